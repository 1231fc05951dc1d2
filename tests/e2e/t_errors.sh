# t_errors.sh — bad scripts get a clear message with file:line and exit 2; a
# failing step exits 1 with its name.  Never a crash, never a partial output.

test_syntax_error_has_file_and_line() {
    write pipeline.lua <<'L'
local flow = require("flow")

local x = = 3
L
    run_flow 2 run
    contains "$ERR" "pipeline.lua:3:"
    no_crash
}

test_syntax_error_after_annotation_keeps_line() {
    write pipeline.lua <<'L'
distributed_job<framework = "pytorch",
                nodes = 2> function train(x)
  return x
end

local y = )
L
    run_flow 2 run
    contains "$ERR" "pipeline.lua:6:"
}

test_runtime_error_in_script() {
    write pipeline.lua <<'L'
local t = nil
local function f() return t.field end
f()
L
    run_flow 2 run
    contains "$ERR" "pipeline.lua:2: attempt to index a nil value"
    no_crash
}

test_node_without_body() {
    write pipeline.lua <<'L'
return pipeline{
  node{ inputs = "a", outputs = "b", name = "x" },
}
L
    run_flow 2 run
    contains "$ERR" "pipeline.lua:2: node: a step needs func ="
}

test_node_with_both_bodies() {
    write pipeline.lua <<'L'
return pipeline{ node{ func = print, command = "true", name = "x" } }
L
    run_flow 2 run
    contains "$ERR" "pipeline.lua:1: node: give either func or command, not both"
}

test_non_string_input_name() {
    write pipeline.lua <<'L'
local function f(a) return a end
return pipeline{
  node{ func = f, inputs = { "ok", 42 }, outputs = "y" },
}
L
    run_flow 2 run
    contains "$ERR" "pipeline.lua:3: node: inputs[2] must be a dataset name"
}

test_unknown_node_field() {
    write pipeline.lua <<'L'
local function f() return 1 end
return pipeline{ node{ func = f, outptus = "y" } }
L
    run_flow 2 run
    contains "$ERR" "unknown field 'outptus' (did you mean 'outputs'?)"
}

# Every rule of node{} and flow.command, what each returns and every error
# (message, file:line, did-you-mean) as the Lua implementation gave them
# before node{} moved to C (lua/l_pipeline.c): node_rules.expected.  Since
# then a node leaves out the fields at their defaults (retries = 0,
# input_style and output_style unless "map"): a fifth of its table.
test_node_and_command_rules_keep_their_results_and_messages() {
    cp "$FLOW_ROOT/tests/e2e/node_rules.lua" .
    run_flow 0 run -q node_rules.lua
    equals "$OUT$ERR" "$(cat "$FLOW_ROOT/tests/e2e/node_rules.expected")" "node{} results"
    no_crash
}

test_unknown_framework_lists_valid() {
    write pipeline.lua <<'L'
local train = distributed_job{ framework = "jax", num_nodes = 2 }(function() end)
L
    run_flow 2 run
    contains "$ERR" "pipeline.lua:1: distributed_job: unknown framework \"jax\""
    contains "$ERR" "Framework.PyTorch, Framework.TensorFlow, Framework.MPI"
}

test_bad_num_nodes() {
    write pipeline.lua <<'L'
local a = distributed_job{ framework = "mpi", num_nodes = 0 }
L
    run_flow 2 run
    contains "$ERR" "pipeline.lua:1: distributed_job: num_nodes must be a whole number from 1 to 10000"
    write pipeline.lua <<'L'

local a = distributed_job<framework = "mpi", nodes = 1.5>(function() end)
L
    run_flow 2 run
    contains "$ERR" "pipeline.lua:2: distributed_job: num_nodes must be a whole number from 1 to 10000 or \"params:KEY\", got 1.5"
}

test_unterminated_annotation() {
    write pipeline.lua <<'L'
local flow = require("flow")
distributed_job<framework = "pytorch", nodes = 2
function train() end
L
    run_flow 2 run
    contains "$ERR" "pipeline.lua:2: unterminated distributed_job<...> annotation"
}

test_cycle_reported_with_path() {
    write pipeline.lua <<'L'
local function f(x) return x end
return pipeline{
  node{ func = f, inputs = "c", outputs = "a", name = "step_a" },
  node{ func = f, inputs = "a", outputs = "b", name = "step_b" },
  node{ func = f, inputs = "b", outputs = "c", name = "step_c" },
}
L
    run_flow 2 run
    contains "$ERR" "cycle: step_a (pipeline.lua:3) -> step_b (pipeline.lua:4) -> step_c (pipeline.lua:5) -> step_a"
}

test_dataset_produced_twice() {
    write pipeline.lua <<'L'
return pipeline{
  node{ func = function() return 1 end, outputs = "model", name = "one" },
  node{ func = function() return 2 end, outputs = "model", name = "two" },
}
L
    run_flow 2 run
    contains "$ERR" "dataset 'model' is produced by two steps, 'one' (pipeline.lua:2) and 'two' (pipeline.lua:3)"
}

# Every graph error names the steps it blames with their file:line, as a
# duplicate step name does: in a namespaced pipeline, for every clash.
test_graph_errors_name_each_steps_line() {
    write pipeline.lua <<'L'
local p = pipeline{
  node{ func = function() return 1, 2 end, outputs = { "x", "y" }, name = "a" },
  node{ func = function() return 1, 2 end, outputs = { "x", "y" }, name = "b" },
  node{ func = function() return 1 end, outputs = "x", name = "c" },
}
return pipeline{ p, namespace = "ns" }
L
    run_flow 2 run
    contains "$ERR" "2 datasets are produced by more than one step"
    contains "$ERR" "'ns.x', by 'ns.a' (pipeline.lua:2), 'ns.b' (pipeline.lua:3) and 'ns.c' (pipeline.lua:4)"
    contains "$ERR" "'ns.y', by 'ns.a' (pipeline.lua:2) and 'ns.b' (pipeline.lua:3)"

    write pipeline.lua <<'L'
return pipeline{
  node{ func = function() return 1 end, outputs = "a", name = "first" },
  node{ func = function() return 1, 2 end, outputs = { "x", "x" }, name = "s" },
}
L
    run_flow 2 run
    contains "$ERR" "step 's' (pipeline.lua:3) lists output 'x' twice"

    write pipeline.lua <<'L'
local function f(x) return x end
return pipeline{
  node{ func = f, inputs = "b", outputs = "a", name = "a" },
  node{ func = f, inputs = "a", outputs = "b", name = "b" },
}
L
    run_flow 2 list
    contains "$ERR" "the pipeline has a cycle: a (pipeline.lua:3) -> b (pipeline.lua:4) -> a"
}

test_missing_input_lists_steps() {
    write pipeline.lua <<'L'
local function f(x) return x end
return pipeline{
  node{ func = f, inputs = "raw", outputs = "a", name = "first" },
  node{ func = f, inputs = "raw", outputs = "b", name = "second" },
}
L
    run_flow 2 run
    contains "$ERR" "'raw', needed by 'first' (pipeline.lua:3), 'second' (pipeline.lua:4)"
}

test_missing_input_suggests_the_closest_dataset() {
    write conf/base/catalog.yml <<'Y'
raw_rows: {type: text, path: data/rows.txt}
Y
    write pipeline.lua <<'L'
local function f(x) return x end
return pipeline{
  node{ func = f, inputs = "raw_row", outputs = "features", name = "featurize" },
  node{ func = f, inputs = "feature", outputs = "model", name = "train" },
}
L
    run_flow 2 run
    contains "$ERR" "2 input datasets that no step produces and the catalog does not declare"
    contains "$ERR" "'raw_row', needed by 'featurize' (pipeline.lua:3) (did you mean 'raw_rows'?)"
    contains "$ERR" "'feature', needed by 'train' (pipeline.lua:4) (did you mean 'features'?)"
}

test_duplicate_step_name_points_at_lines() {
    write pipeline.lua <<'L'
return pipeline{
  node{ func = function() return 1 end, outputs = "a", name = "same" },
  node{ func = function() return 2 end, outputs = "b", name = "same" },
}
L
    run_flow 2 run
    contains "$ERR" "two steps are named 'same'"
    contains "$ERR" "pipeline.lua:2 and pipeline.lua:3"
}

test_script_returning_nothing() {
    write pipeline.lua <<'L'
local x = 1
L
    run_flow 2 run
    contains "$ERR" "defines no pipeline"
}

test_step_function_raises() {
    write pipeline.lua <<'L'
local function helper(rows) error("bad row " .. #rows) end
local function clean(rows) local r = helper(rows); return r end
return pipeline{
  node{ func = function() return { 1, 2 } end, outputs = "rows", name = "load" },
  node{ func = clean, inputs = "rows", outputs = "clean" },
  node{ func = function(c) return c end, inputs = "clean", outputs = "final", name = "after" },
}
L
    run_flow 1 run
    contains "$ERR" "step 'clean' failed: pipeline.lua:1: bad row 2"
    contains "$ERR" "stack traceback:"
    contains "$ERR" "pipeline.lua:2:"
    contains "$ERR" "1 done, 1 failed, 1 not run"
    no_crash
}

test_command_failure_shows_stderr_tail() {
    write pipeline.lua <<'L'
return pipeline{
  node{ command = { "sh", "-c", "echo to-stdout; echo first-err >&2; echo last-err >&2; exit 3" },
        name = "failing" },
}
L
    run_flow 1 run
    contains "$ERR" "step 'failing' failed (exit code 3)"
    contains "$ERR" "last-err"
    contains "$ERR" "full log: .flow/runs/"
    log=$(ls .flow/runs/latest/logs/failing.log)
    contains "$(cat "$log")" "to-stdout"
}

test_command_not_found() {
    write pipeline.lua <<'L'
return pipeline{ node{ command = { "no-such-program-xyz", "arg" }, name = "ghost" } }
L
    run_flow 1 run
    contains "$ERR" "step 'ghost': command not found: no-such-program-xyz"
}

test_failed_command_leaves_no_partial_output() {
    write pipeline.lua <<'L'
return pipeline{
  node{ command = "echo partial > ${outputs.result}; exit 1", outputs = "result", name = "half" },
}
L
    run_flow 1 run
    [ ! -e .flow/data/result ] || { echo "partial output left at .flow/data/result"; return 1; }
    [ -z "$(ls -A .flow/tmp 2>/dev/null)" ] || { echo "staging files left behind"; ls -R .flow/tmp; return 1; }
}

test_failed_rerun_keeps_previous_output() {
    write pipeline.lua <<'L'
return pipeline{ node{ command = "echo good > ${outputs.result}", outputs = "result", name = "w" } }
L
    run_flow 0 run
    write pipeline.lua <<'L'
return pipeline{ node{ command = "echo bad > ${outputs.result}; exit 1", outputs = "result", name = "w" } }
L
    run_flow 1 run
    equals "$(cat .flow/data/result)" "good" "the complete earlier output"
}

test_command_that_writes_no_output() {
    write pipeline.lua <<'L'
return pipeline{ node{ command = { "true" }, outputs = "model", name = "lazy" } }
L
    run_flow 1 run
    contains "$ERR" "step 'lazy' exited 0 but did not write its output 'model'"
}

test_wrong_number_of_returns() {
    write pipeline.lua <<'L'
local function split(x) return x end
return pipeline{
  node{ func = function() return 1 end, outputs = "raw", name = "load" },
  node{ func = split, inputs = "raw", outputs = { "train", "test" } },
}
L
    run_flow 1 run
    contains "$ERR" "step 'split' returned 1 value but declares 2 outputs (train, test)"
}

test_unnamed_anonymous_step() {
    write pipeline.lua <<'L'
return pipeline{ node{ func = function() return 1 end, outputs = "x" } }
L
    run_flow 2 run
    contains "$ERR" "pipeline.lua:1: node: this step has no name"
}

test_bad_template_reference_stops_before_any_step() {
    write pipeline.lua <<'L'
return pipeline{
  node{ func = function() io.open("load-ran", "w"):close() return "x" end, outputs = "rows", name = "load" },
  node{ command = "cat ${inputs.row} > ${outputs.out}", inputs = "rows", outputs = "out", name = "c" },
}
L
    run_flow 2 run
    contains "$ERR" "step 'c' (pipeline.lua:3): \${inputs.row}: the step has no input named 'row' (did you mean 'rows'?)"
    [ ! -e load-ran ] || { echo "a step ran before the template was checked"; return 1; }
    sed -i 's/inputs.row}/inputs.rows}/; s/outputs.out}/output.out}/' pipeline.lua
    run_flow 2 run
    contains "$ERR" "step 'c' (pipeline.lua:3): unknown reference '\${output.out}'"
    contains "$ERR" "(did you mean 'outputs'?)"
    sed -i 's/output.out}/outputs.nope}/' pipeline.lua
    run_flow 2 list
    contains "$ERR" "\${outputs.nope}: the step has no output named 'nope' (its outputs: out)"
    [ ! -e load-ran ] || { echo "a step ran before the template was checked"; return 1; }
}

# The plan finds the command steps to look at in one pass in C
# (lua/command_refs.c), then words the message in Lua: a wrong reference,
# an undefined ${params.}, an undefined ${credentials.} late among many
# right steps, in an argument, a shell line or an env value, are each found,
# and the first wrong step in the pipeline's order is the one named.
test_a_wrong_step_among_many_right_ones_is_found() {
    write pipeline.lua <<'L'
local bad = tonumber(os.getenv("BAD") or "0")
local nodes = {}
for i = 1, 60 do
  local spec = { command = { "touch", "${outputs.o}" }, outputs = { o = "d" .. i }, name = "s" .. i }
  if i > 1 then spec.inputs = { a = "d" .. (i - 1) } end
  if i == 30 and bad == 1 then spec.command = { "cp", "${inputs.b}", "${outputs.o}" } end
  if i == 40 and (bad == 1 or bad == 2) then
    spec.command = flow.command{ "sh", "-c", 'touch "$OUT"', env = { OUT = "${outputs.oo}" } }
  end
  if i == 45 and bad == 3 then spec.command = "touch ${outputs.o} # ${params.missing}" end
  if i == 50 and bad == 4 then
    spec.command = flow.command{ "touch", "${outputs.o}", env = { K = "${credentials.nope}" } }
  end
  nodes[#nodes + 1] = node(spec)
end
return pipeline(nodes)
L
    touch ran
    BAD=1 run_flow 2 run
    contains "$ERR" "step 's30' (pipeline.lua:14): \${inputs.b}: the step has no input named 'b' (did you mean 'a'?)"
    BAD=2 run_flow 2 run
    contains "$ERR" "step 's40' (pipeline.lua:14): \${outputs.oo}: the step has no output named 'oo' (did you mean 'o'?)"
    BAD=3 run_flow 2 run
    contains "$ERR" "step 's45' (pipeline.lua:14) reads parameter 'missing', which is not defined in environment 'local'"
    BAD=4 run_flow 2 run
    contains "$ERR" "step 's50' (pipeline.lua:14): env K: credential 'nope' is not defined in environment 'local'"
    [ ! -e .flow/data/d1 ] || { echo "a step ran before the plan was checked"; return 1; }
    BAD=5 run_flow 0 run -q
    [ -e .flow/data/d60 ] || { echo "the right pipeline did not run"; return 1; }
}

# An error value that is not a message (error({}), error(nil)) is named by
# its type at the script's line, not shown as "table: 0x55…" or "nil"; a
# precompiled script is refused naming the file.
test_error_values_that_are_not_messages_name_the_line() {
    printf 'local x = 1\nerror({})\n' > pipeline.lua
    run_flow 2 run
    contains "$ERR" "flow: error: pipeline.lua:2: error raised a table, not a message"
    printf 'local function f() error(nil) end\nf()\n' > pipeline.lua
    run_flow 2 run
    contains "$ERR" "flow: error: pipeline.lua:1: error raised nil, not a message"
    printf 'error(setmetatable({}, {__tostring = function() return "my error" end}))\n' > pipeline.lua
    run_flow 2 run
    contains "$ERR" "flow: error: my error"
    # a number is a message without a position: it gets the line's; a
    # __tostring that fails, or gives no string, does not hide the error
    printf 'local x = 1\nerror(42)\n' > pipeline.lua
    run_flow 2 run
    contains "$ERR" "flow: error: pipeline.lua:2: 42"
    printf 'error(setmetatable({}, {__tostring = function() error("oops") end}))\n' > pipeline.lua
    run_flow 2 run
    contains "$ERR" "flow: error: pipeline.lua:1: error raised a table, not a message"
    printf 'error(setmetatable({}, {__tostring = function() return {} end}))\n' > pipeline.lua
    run_flow 2 run
    contains "$ERR" "flow: error: pipeline.lua:1: error raised a table, not a message"
    not_contains "$ERR" "<flow>/"
    printf '\033Lua' > pipeline.lua
    run_flow 2 run
    contains "$ERR" "flow: error: pipeline.lua: attempt to load a binary chunk"
    # the same inside a step: its failure names the line, not "table: 0x…"
    cat > pipeline.lua <<'L'
return pipeline{
  node{ func = function() error({ code = 3 }) end, outputs = "x", name = "a" },
  node{ func = function() error() end, outputs = "y", name = "b" },
  node{ func = function() error(42) end, outputs = "z", name = "c" },
  node{ func = function() error(setmetatable({}, { __tostring = function() error("oops") end })) end,
        outputs = "w", name = "d" },
}
L
    run_flow 1 run -k
    contains "$ERR" "step 'a' failed: pipeline.lua:2: error raised a table, not a message"
    contains "$ERR" "step 'b' failed: pipeline.lua:3: error raised nil, not a message"
    contains "$ERR" "step 'c' failed: pipeline.lua:4: 42"
    contains "$ERR" "step 'd' failed: pipeline.lua:5: error raised a table, not a message"
    not_contains "$ERR" "table: 0x"
}

# A NUL byte ends a C string: a command line, an argument, an env value or
# a configuration string holding one was cut short there without a word
# ("echo a\0b; echo c" ran only "echo a").  Each is refused where written.
test_a_nul_byte_in_a_command_env_or_config_is_refused() {
    local body
    for body in 'command = "echo a\0b; echo c"' 'command = { "echo", "a\0b" }' \
                'command = flow.command{ "echo", "x", env = { A = "a\0b" } }' \
                'command = "echo x", env = { A = "a\0b" }'; do
        printf 'return pipeline{ node{ %s, name = "s" } }\n' "$body" > pipeline.lua
        run_flow 2 run
        contains "$ERR" "pipeline.lua:1: "
        contains "$ERR" "holds a NUL byte"
    done
    printf 'return pipeline{ node{ command = "true", name = "s" } }\n' > pipeline.lua
    mkdir -p conf/base
    printf 'v: "a\\0b"\n' > conf/base/parameters.yml
    run_flow 2 run
    contains "$ERR" "conf/base/parameters.yml:1:4: a string with a NUL byte"
}

# A name is UTF-8 text without control characters (C1 ones, U+0080..U+009F,
# included: they broke the YAML flow compile writes), and no part between
# its dots is empty (a namespace ".x" made flow viz recurse until memory ran
# out).  Each is refused where it is written, the bytes shown.
test_names_must_be_utf8_without_controls_or_empty_parts() {
    printf 'return pipeline{ node{ func = function() return 1 end, outputs = "b", name = "s" }, namespace = ".x" }\n' > pipeline.lua
    run_flow 2 viz
    contains "$ERR" "pipeline.lua:1: pipeline: namespace: '.x' has an empty part between dots"
    printf 'return pipeline{ node{ func = function() return 1 end, outputs = "b", name = "s\\xc2\\x9bt" } }\n' > pipeline.lua
    run_flow 2 list
    contains "$ERR" "node: name: 's\\194\\155t' contains a control character"
    printf 'return pipeline{ node{ func = function() return 1 end, outputs = "a..b", name = "s" } }\n' > pipeline.lua
    run_flow 2 list
    contains "$ERR" "node: outputs: 'a..b' has an empty part between dots"
    printf 'return pipeline{ node{ func = function() return 1 end, outputs = "b", name = "s\\xfft" } }\n' > pipeline.lua
    run_flow 2 list
    contains "$ERR" "node: name: 's\\255t' is not UTF-8 text"
    printf 'return pipeline{ node{ func = function() return 1 end, outputs = "b", name = "caf\\xc3\\xa9" } }\n' > pipeline.lua
    run_flow 0 list
}

# A failure at the start of a long chain names at most 20 of the steps it
# left unrun, then counts the rest: one line, not one name per step.
test_a_failure_names_at_most_twenty_steps_not_run() {
    write pipeline.lua <<'L'
local nodes = { node{ name = "first", outputs = "d0", func = function() error("boom") end } }
for i = 1, 30 do
  nodes[#nodes + 1] = node{ name = "s" .. i, inputs = "d" .. (i - 1), outputs = "d" .. i, func = function(x) return x end }
end
return pipeline(nodes)
L
    run_flow 1 run
    contains "$ERR" "flow: failed: first"
    contains "$ERR" "not run: s1, s10, s11, s12, s13, s14, s15, s16, s17, s18, s19, s2, s20, s21, s22, s23, s24, s25, s26, s27 and 10 more"
}

# A stack overflow's traceback repeats one frame thousands of times: each
# run of the same frame is shown once and counted.
test_a_stack_overflow_shows_its_repeated_frame_once() {
    write pipeline.lua <<'L'
return pipeline{
  node{ name = "deep", outputs = "x", func = function() local function f() return 1 + f() end return f() end },
}
L
    run_flow 1 run
    contains "$ERR" "step 'deep' failed: pipeline.lua:2: stack overflow"
    contains "$ERR" "$(printf "\tpipeline.lua:2: in upvalue 'f'\n\t(the frame above 9 more times)")"
    [ "$(printf '%s\n' "$ERR" | grep -c "in upvalue 'f'")" -le 2 ] || { echo "the frame shown again and again"; return 1; }
    printf 'local function f() return 1 + f() end\nf()\n' > pipeline.lua
    run_flow 2 run
    contains "$ERR" "flow: error: pipeline.lua:1: stack overflow"
    [ "$(printf '%s\n' "$ERR" | grep -c "in upvalue 'f'")" -le 2 ] || { echo "the frame shown again and again"; return 1; }
}
