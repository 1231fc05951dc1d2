# t_run.sh — running pipelines: values between Lua steps, command steps and
# their files, composition, the annotation form, registries and flow.run.

test_hello_example() {
    copy_example hello hello
    run_flow 0 run hello
    contains "$OUT" "9 words, 8 distinct; longest: quick"
    contains "$OUT" "the    2"
    contains "$ERR" "4 done"
}

test_values_flow_between_lua_steps() {
    write pipeline.lua <<'L'
local function load() return { 5, 3, 8, 1 } end
local function split(rows, fraction)
  local n = math.floor(#rows * fraction)
  return { table.unpack(rows, 1, n) }, { table.unpack(rows, n + 1) }
end
local function stats(parts) return { train = #parts.train, test = #parts.test } end
local function show(s) print(string.format("train=%d test=%d", s.train, s.test)) return true end
return pipeline{
  node{ func = load, outputs = "rows" },
  node{ func = function() return 0.75 end, outputs = "fraction", name = "fraction" },
  node{ func = split, inputs = { "rows", "fraction" }, outputs = { "train", "test" } },
  node{ func = stats, inputs = { train = "train", test = "test" }, outputs = "stats" },
  node{ func = show, inputs = "stats", outputs = "shown" },
}
L
    run_flow 0 run
    contains "$OUT" "train=3 test=1"
}

test_map_outputs() {
    write pipeline.lua <<'L'
local function both() return { first = "a", second = "b" } end
return pipeline{
  node{ func = both, outputs = { first = "one", second = "two" } },
  node{ func = function(x, y) print(x .. y) return 1 end, inputs = { "one", "two" }, outputs = "z", name = "join" },
}
L
    run_flow 0 run
    equals "$OUT" "ab"
}

test_command_gets_json_and_text_files() {
    write pipeline.lua <<'L'
return pipeline{
  node{ func = function() return { lr = 0.5, layers = { 1, 2 } }, "plain text" end,
        outputs = { "config", "note" }, name = "make" },
  node{ command = { "sh", "-c", 'cat "$1"; cat "$2"', "sh", "${inputs.config}", "${inputs.note}" },
        inputs = { "config", "note" }, name = "show" },
}
L
    run_flow 0 run -v
    contains "$ERR" '"lr":	0.5'
    contains "$ERR" "plain text"
    [ -f .flow/data/config.json ] && [ -f .flow/data/note.txt ]
}

test_command_output_reaches_lua_as_path() {
    write pipeline.lua <<'L'
return pipeline{
  node{ command = { "sh", "-c", "printf 42 > \"$1\"", "sh", "${outputs.answer}" }, outputs = "answer", name = "write" },
  node{ func = function(path)
          local f = assert(io.open(path)); local v = f:read("a"); f:close()
          print("path=" .. path .. " value=" .. v) return v end,
        inputs = "answer", outputs = "read", name = "read" },
}
L
    run_flow 0 run
    contains "$OUT" "path=.flow/data/answer value=42"
}

test_command_chain_with_directories() {
    write pipeline.lua <<'L'
return pipeline{
  node{ command = "mkdir -p ${outputs.model} && echo w > ${outputs.model}/weights", outputs = "model", name = "train" },
  node{ command = "cat ${inputs.model}/weights > ${outputs.report}", inputs = "model", outputs = "report", name = "evaluate" },
}
L
    run_flow 0 run
    equals "$(cat .flow/data/report)" "w"
    run_flow 0 run                        # a directory output is replaced cleanly
    equals "$(cat .flow/data/model/weights)" "w"
}

test_argv_is_never_a_shell() {
    write pipeline.lua <<'L'
return pipeline{
  node{ func = function() return "a; touch pwned" end, outputs = "evil", name = "make" },
  node{ command = { "printf", "%s", "${inputs.evil}" }, inputs = "evil", name = "use" },
}
L
    run_flow 0 run
    [ ! -e pwned ] || { echo "an argv went through a shell"; return 1; }
}

test_shell_string_quotes_expansions() {
    write pipeline.lua <<'L'
return pipeline{
  node{ func = function() return "x" end, outputs = "odd'name$HOME*", name = "make" },
  node{ command = "cat ${inputs.x} > ${outputs.copy}", inputs = { x = "odd'name$HOME*" }, outputs = "copy", name = "copy" },
}
L
    run_flow 0 run
    equals "$(cat .flow/data/copy)" "x"
}

test_params_in_commands_and_inputs() {
    write driver.lua <<'L'
local flow = require("flow")
local p = pipeline{
  node{ func = function(lr, all) print("lr=" .. lr .. " epochs=" .. all.train.epochs) return 1 end,
        inputs = { "params:train.lr", "parameters" }, outputs = "a", name = "lua_step" },
  node{ command = { "echo", "epochs=${params.train.epochs}" }, name = "cmd_step" },
}
local r = flow.run(p, { params = { train = { lr = 0.01, epochs = 3 } }, verbose = true })
print("status=" .. r.status)
L
    run_flow 0 run driver.lua
    contains "$OUT" "lr=0.01 epochs=3"
    contains "$OUT" "status=ok"
    contains "$ERR" "[cmd_step] epochs=3"
}

test_missing_parameter_is_caught_before_running() {
    write pipeline.lua <<'L'
local flow = require("flow")
local p = pipeline{
  node{ func = function() print("must not run") return 1 end, outputs = "a", name = "first" },
  node{ func = function(x) return x end, inputs = "params:train.lrr", outputs = "b", name = "uses_param" },
}
flow.run(p, { params = { train = { lr = 1 } } })
L
    run_flow 2 run
    contains "$ERR" "step 'uses_param' (pipeline.lua:4) reads parameter 'train.lrr', which is not defined in environment 'local' (did you mean 'train.lr'?)"
    not_contains "$OUT" "must not run"
}

test_flow_run_returns_outputs_and_status() {
    write pipeline.lua <<'L'
local flow = require("flow")
local p = pipeline{
  node{ func = function() return 2 end, outputs = "two", name = "a" },
  node{ func = function(x) return x * 21 end, inputs = "two", outputs = "answer", name = "b" },
}
local r = flow.run(p, { jobs = 1 })
print(r.status, r.code, r.outputs.answer, r.outputs.two, r.steps.b.state)
local bad = flow.run(pipeline{ node{ func = function() error("x") end, outputs = "q", name = "c" } })
print(bad.status, bad.code, bad.steps.c.state)
L
    run_flow 1 run
    contains "$OUT" "ok	0	42	nil	done"
    contains "$OUT" "failed	1	failed"
}

test_namespace_and_remapping() {
    write pipeline.lua <<'L'
local function double(x, k) return x * k end
local base = pipeline{ node{ func = double, inputs = { "raw", "params:k" }, outputs = "doubled" } }
local a = pipeline{ base, namespace = "a", inputs = "raw" }
local b = pipeline{ base, namespace = "b", inputs = { raw = "a.doubled" }, parameters = { k = "shared_k" } }
local show = node{ func = function(x) print("result=" .. x) return x end, inputs = "b.doubled", outputs = "shown", name = "show" }
local r = flow.run(flow.pipeline{ node{ func = function() return 5 end, outputs = "raw", name = "load" }, a, b, show },
                   { params = { a = { k = 2 }, shared_k = 10 } })
L
    run_flow 0 run
    contains "$OUT" "result=100"
    printf 'return pipeline{ node{ func = function() return 5 end, outputs = "raw", name = "load" }, a, b, show }\n' >> pipeline.lua
    write conf/base/parameters.yml <<'Y'
a: { k: 2 }
shared_k: 10
Y
    sed -i 's/^local r = flow.run/local r = nil and flow.run/' pipeline.lua
    run_flow 0 list
    contains "$OUT" "a.double"
    contains "$OUT" "params:a.k"
    contains "$OUT" "params:shared_k"
}

test_namespaced_commands_read_namespaced_parameters() {
    write conf/base/parameters.yml <<'Y'
k: global
a: { k: in-a }
shared_k: shared
outer: { inner: { k: nested } }
Y
    write pipeline.lua <<'L'
local base = pipeline{ node{ command = "echo ${params.k} > ${outputs.out}", outputs = { out = "k_file" },
                             name = "write_k" } }
local a = pipeline{ base, namespace = "a" }
local b = pipeline{ base, namespace = "b", parameters = { k = "shared_k" } }
local c = pipeline{ pipeline{ base, namespace = "inner" }, namespace = "outer" }
-- pipeline{} without options and with tags keep the same nodes; node{} as
-- scripts call it and with a level given (as stdlib calls it) too
local function same(x, y, what)
  for _, k in ipairs({ "name", "kind", "cmd", "cmd_params", "inputs", "outputs" }) do
    if require("flow.core").json_encode(x[k]) ~= require("flow.core").json_encode(y[k]) then
      error(what .. ": the two paths disagree on " .. k)
    end
  end
end
local fast, slow = pipeline{ a, b, c }, pipeline{ a, b, c, tags = "t" }
for i, n in ipairs(fast.nodes) do same(n, slow.nodes[i], "pipeline{}") end
local spec = function() return { command = "echo ${params.k} > ${outputs.out}", outputs = { out = "k_file" },
                                 name = "write_k" } end
local n_fast, n_lua = node(spec()), require("flow.pipeline").node(spec(), 1)
same(pipeline{ n_fast, namespace = "a" }.nodes[1], pipeline{ n_lua, namespace = "a" }.nodes[1], "node{}")
return fast
L
    run_flow 0 run
    equals "$(cat .flow/data/a.k_file)" "in-a"
    equals "$(cat .flow/data/b.k_file)" "shared"
    equals "$(cat .flow/data/outer.inner.k_file)" "nested"
    sed -i 's/^k: global/k: changed/' conf/base/parameters.yml
    run_flow 0 run --explain
    contains "$ERR" "0 done, 3 up to date"
    sed -i 's/in-a/in-a-2/' conf/base/parameters.yml
    run_flow 0 run --explain
    contains "$ERR" "explain: a.write_k runs: parameter 'a.k' changed"
    contains "$ERR" "1 done, 2 up to date"
    equals "$(cat .flow/data/a.k_file)" "in-a-2"
    sed -i '/^outer:/d' conf/base/parameters.yml
    run_flow 2 run
    contains "$ERR" "step 'outer.inner.write_k' (pipeline.lua:1) reads parameter 'outer.inner.k', which is not defined"
}

test_plus_and_minus() {
    write pipeline.lua <<'L'
local one = node{ func = function() return 1 end, outputs = "x", name = "one" }
local two = node{ func = function(x) return x + 1 end, inputs = "x", outputs = "y", name = "two" }
local three = node{ func = function(y) print("three saw " .. y) return y end, inputs = "y", outputs = "z", name = "three" }
local all = pipeline{ one, two } + three + pipeline{ one }
flow.register("all", all)
flow.register("head", all - pipeline{ three })
print("#all=" .. #all)
return nil
L
    run_flow 0 run --pipeline all
    contains "$OUT" "#all=3"
    contains "$OUT" "three saw 2"
    run_flow 0 list --pipeline head
    not_contains "$OUT" "three"
    run_flow 2 run --pipeline nope
    contains "$ERR" "no pipeline named 'nope'"
    contains "$ERR" "all, head"
}

test_annotation_forms_run() {
    write pipeline.lua <<'L'
distributed_job<framework = "pytorch", nodes = 2> function train(x)
  return x * 10
end

local evaluate = distributed_job<framework = Framework.MPI, num_nodes = 1, processes_per_node = 4>(
  function(m) print("model=" .. m) return m end)

distributed_job<framework="tensorflow", nodes=3> local function export(m) return m end

return pipeline{
  node{ func = function() return 4 end, outputs = "data", name = "load" },
  node{ func = train, inputs = "data", outputs = "model" },
  node{ func = evaluate, inputs = "model", outputs = "score" },
  node{ func = export, inputs = "model", outputs = "exported" },
}
L
    run_flow 0 run
    contains "$OUT" "model=40"
    run_flow 0 list
    contains "$OUT" "PyTorch 2 nodes x 1 process"
    contains "$OUT" "MPI 1 node x 4 processes"
    contains "$OUT" "TensorFlow 3 nodes x 1 process"
}

test_distributed_command_and_master_helper() {
    write pipeline.lua <<'L'
local flow = require("flow")
local train = flow.distributed_job{ framework = flow.Framework.PyTorch, num_nodes = "params:nodes",
                                     processes_per_node = 2 }(
  flow.command{ "sh", "-c", "echo trained > ${outputs.model}" })
return pipeline{
  node{ func = train, outputs = "model", name = "train_model", tags = { "training" } },
  node{ func = function(m) print("master=" .. tostring(flow.is_distributed_master_node())) return m end,
        inputs = "model", outputs = "done", name = "check" },
}
L
    write conf/base/parameters.yml <<'Y'
nodes: 3
Y
    run_flow 0 list
    contains "$OUT" "train_model"
    contains "$OUT" "training"
    contains "$OUT" "PyTorch 3 nodes x 2 processes"
    run_flow 0 list --format json
    contains "$OUT" '"framework":	"pytorch"'
}

test_flow_sh_inside_a_step() {
    write pipeline.lua <<'L'
local flow = require("flow")
return pipeline{
  node{ func = function() return flow.sh("echo from-shell") .. flow.sh{ "printf", "%s", "argv" } end,
        outputs = "out", name = "capture" },
  node{ func = function(s) io.write(s, "\n") return 1 end, inputs = "out", outputs = "z", name = "show" },
}
L
    run_flow 0 run
    contains "$OUT" "from-shell"
    contains "$OUT" "argv"
}

test_flow_sh_failure_fails_step() {
    write pipeline.lua <<'L'
local flow = require("flow")
return pipeline{ node{ func = function() flow.sh("echo oops >&2; exit 4") return 1 end, outputs = "x", name = "shelly" } }
L
    run_flow 1 run
    contains "$ERR" "flow.sh: 'echo oops >&2; exit 4' failed (exit code 4)"
    contains "$ERR" "oops"
}

test_parallel_steps_overlap() {
    write pipeline.lua <<'L'
return pipeline{
  node{ command = { "sleep", "1" }, name = "s1" },
  node{ command = { "sleep", "1" }, name = "s2" },
  node{ command = { "sleep", "1" }, name = "s3" },
}
L
    start=$(date +%s%N)
    run_flow 0 run -j 3
    elapsed_ms=$(( ($(date +%s%N) - start) / 1000000 ))
    # Three one-second sleeps at -j3: well under the 3 s a serial run needs.
    [ "$elapsed_ms" -lt 2500 ] || { echo "took ${elapsed_ms} ms"; return 1; }
}

test_jobs_one_runs_in_declaration_order() {
    write pipeline.lua <<'L'
local function say(name) return function() print(name) return name end end
return pipeline{
  node{ func = say("c"), outputs = "c", name = "c" },
  node{ func = say("a"), outputs = "a", name = "a" },
  node{ func = say("b"), outputs = "b", name = "b" },
}
L
    run_flow 0 run -j 1
    equals "$OUT" "$(printf 'c\na\nb')"
}

test_dry_run() {
    write pipeline.lua <<'L'
return pipeline{
  node{ func = function(x) print("ran") return x end, inputs = "a", outputs = "b", name = "second" },
  node{ func = function() print("ran") return 1 end, outputs = "a", name = "first" },
}
L
    run_flow 0 run --dry-run
    contains "$OUT" "1  first"
    contains "$OUT" "2  second"
    not_contains "$OUT" "ran"
}

test_keep_going() {
    write pipeline.lua <<'L'
return pipeline{
  node{ func = function() error("nope") end, outputs = "a", name = "bad" },
  node{ func = function(a) return a end, inputs = "a", outputs = "b", name = "after_bad" },
  node{ func = function() print("independent ran") return 1 end, outputs = "c", name = "independent" },
}
L
    run_flow 1 run -j 1
    not_contains "$OUT" "independent ran"
    run_flow 1 run -j 1 --keep-going
    contains "$OUT" "independent ran"
    contains "$ERR" "1 done, 1 failed, 1 not run"
}

test_run_journal_dirs() {
    write pipeline.lua <<'L'
return pipeline{ node{ command = "echo logged", name = "talk" } }
L
    run_flow 0 run
    [ -L .flow/runs/latest ] || { echo "no latest link"; return 1; }
    contains "$(cat .flow/runs/latest/logs/talk.log)" "$ echo logged"
    contains "$(cat .flow/runs/latest/logs/talk.log)" "logged"
}

# Over 1,000 steps run.json is written as it is made, one step at a time
# (engine/step.c): the same document, unindented.  The result's free outputs
# are what no step reads (flow.dag's unread_outputs); its per-step table is
# made when first read.
test_a_large_run_writes_a_whole_run_json() {
    write pipeline.lua <<'L'
local nodes = {}
for i = 1, 1200 do
  nodes[i] = node{ name = "s" .. i, inputs = i > 1 and ("d" .. (i - 1)) or nil, outputs = "d" .. i,
                   func = function(x) return (x or 0) + 1 end }
end
nodes[#nodes + 1] = node{ name = "fails", outputs = "never", func = function() error("no") end }
local r = flow.run(pipeline(nodes), { keep_going = true })
local n = 0
for _ in pairs(r.steps) do n = n + 1 end
print(r.status, r.outputs.d1200, r.outputs.d5, n, r.steps.s7.state, r.steps.fails.state)
L
    run_flow 1 run
    contains "$OUT" "failed	1200	nil	1201	done	failed"
    local got
    got=$(python3 - <<'P'
import json
doc = json.load(open(".flow/runs/latest/run.json"))
states = {}
for s in doc["steps"]:
    states[s["state"]] = states.get(s["state"], 0) + 1
print(doc["status"], doc["code"], len(doc["steps"]), doc["steps"][0]["name"], doc["steps"][-1]["name"], sorted(states.items()))
P
)
    equals "$got" "failed 1 1201 s1 fails [('done', 1200), ('failed', 1)]"
}

test_stdlib_override_path() {
    mkdir -p dev/flow
    cp "$FLOW_ROOT/stdlib/flow.lua" dev/flow.lua 2>/dev/null || true
    sed 's/VERSION = "[^"]*"/VERSION = "dev-override"/' "$FLOW_ROOT/stdlib/flow.lua" > dev/flow.lua
    FLOW_STDLIB_PATH=$PWD/dev run_flow 0 --version
    contains "$OUT" "flow dev-override"
}

# `flow --version` and `flow help` load neither the runner nor the pipeline
# layer (a module that fails to load shows where it would have been loaded).
test_version_and_help_load_only_what_they_need() {
    mkdir -p dev/flow
    for m in runner pipeline distributed launch catalog credentials fingerprint state settings shell; do
        echo "error('flow.$m was loaded')" > "dev/flow/$m.lua"
    done
    FLOW_STDLIB_PATH=$PWD/dev run_flow 0 --version
    contains "$OUT" "flow 0.1.0"
    FLOW_STDLIB_PATH=$PWD/dev run_flow 0 help
    FLOW_STDLIB_PATH=$PWD/dev run_flow 0 help run
    write pipeline.lua <<'L'
return pipeline{ node{ func = function() return 1 end, outputs = "x", name = "lua" } }
L
    FLOW_STDLIB_PATH=$PWD/dev run_flow 2 run
    contains "$ERR" "was loaded"
}

# Nor do they map the libraries that later work needs: libcrypto is opened at
# the first hash of more than a few KiB (engine/hash.c; libmd hashes less),
# libcurl at the first request, readline when `flow repl` reads a terminal.
# A run whose hashes are all small opens none of them, a no-op rerun neither;
# an output of 100 KB is hashed by OpenSSL.
test_version_and_help_open_no_library_they_do_not_need() {
    command -v strace >/dev/null 2>&1 || skip "no strace"
    export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0   # LeakSanitizer refuses ptrace
    local args lib
    for args in --version help; do
        strace -f -e trace=open,openat -o trace.txt "$FLOW" $args >/dev/null 2>&1 ||
            skip "strace cannot trace here"
        for lib in libcrypto libcurl libreadline; do
            not_contains "$(cat trace.txt)" "$lib" "libraries opened by flow $args"
        done
    done
    write pipeline.lua <<'L'
return pipeline{ node{ command = "touch ${outputs.x}", outputs = "x", name = "cmd" } }
L
    for args in run "run (a no-op)"; do
        strace -f -e trace=open,openat -o trace.txt "$FLOW" run >/dev/null 2>&1
        for lib in libcrypto libcurl; do
            not_contains "$(cat trace.txt)" "$lib" "libraries opened by a local $args"
        done
    done
    write pipeline.lua <<'L'
return pipeline{ node{ command = "head -c 100000 /dev/zero > ${outputs.y}", outputs = "y", name = "big" } }
L
    strace -f -e trace=open,openat -o trace.txt "$FLOW" run >/dev/null 2>&1
    contains "$(cat trace.txt)" "libcrypto.so.3" "libraries opened by a run that hashes 100 KB"
}

# A libcrypto that is not OpenSSL 3 (a broken installation: here a copy of
# another library under its name) stops a run at its first large hash with a
# message naming it and status 127, as the dynamic loader did when flow was
# linked with it; `flow --version` never opens it.
test_a_broken_libcrypto_is_a_message_not_a_crash() {
    mkdir -p fakelib
    cp "$(ldconfig -p | sed -n 's/.*libcjson\.so\.1 .*=> //p' | head -n 1)" fakelib/libcrypto.so.3 ||
        skip "no libcjson.so.1 to stand in for libcrypto"
    LD_LIBRARY_PATH=$PWD/fakelib run_flow 0 --version
    write pipeline.lua <<'L'
return pipeline{ node{ command = "head -c 100000 /dev/zero > ${outputs.y}", outputs = "y", name = "big" } }
L
    LD_LIBRARY_PATH=$PWD/fakelib run_flow 127 run
    contains "$ERR" "flow: libcrypto.so.3 has no SHA256_Init: OpenSSL 3 is needed"
    not_contains "$ERR" "Aborted"
    [ ! -e core ] || { echo "a core dump"; return 1; }
}

# The stdlib is embedded as Lua bytecode (tools/embed.c), not as source: its
# comments are not in the binary.
test_stdlib_is_embedded_as_bytecode() {
    local comment
    comment=$(head -n 1 "$FLOW_ROOT/stdlib/flow/runner.lua")
    [ "${#comment}" -gt 20 ] || { echo "runner.lua does not start with a comment line"; return 1; }
    if grep -qF -- "$comment" "$FLOW"; then echo "the binary holds the stdlib's source"; return 1; fi
}

# Compiled with its debug information: an error in the stdlib still names the
# stdlib file and the line, as when it was compiled from source.
test_stdlib_errors_name_file_and_line() {
    write pipeline.lua <<'L'
print(select(2, pcall(require("flow.state").read_journal, {})))
local info = debug.getinfo(require("flow.state").read_journal, "S")
print("defined at " .. info.short_src .. ":" .. info.linedefined)
return pipeline{}
L
    run_flow 0 run
    local line
    line=$(sed -n 's/^<flow>\/flow\/state\.lua:\([0-9][0-9]*\): bad argument #1 to .read_file.*/\1/p' <<<"$OUT")
    [ -n "$line" ] || { echo "no '<flow>/flow/state.lua:LINE: bad argument' in: $OUT"; return 1; }
    contains "$(sed -n "${line}p" "$FLOW_ROOT/stdlib/flow/state.lua")" "read_file(" "stdlib/flow/state.lua:$line"
    local def
    def=$(grep -n '^function M.read_journal' "$FLOW_ROOT/stdlib/flow/state.lua" | cut -d: -f1)
    contains "$OUT" "defined at <flow>/flow/state.lua:$def"
}

# `flow --version` and a run of Lua steps start no process: the reaper
# (reaper.h) is started with the first command a step runs, not before.
test_version_and_lua_steps_start_no_process() {
    command -v strace >/dev/null 2>&1 || skip "no strace"
    export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0   # LeakSanitizer refuses ptrace
    strace -f -e trace=clone,clone3,fork,vfork,execve -o trace.txt "$FLOW" --version >/dev/null 2>&1 ||
        skip "strace cannot trace here"
    equals "$(grep -cE 'execve\(' trace.txt)" 1 "execve calls of flow --version"
    not_contains "$(grep -E 'clone|fork' trace.txt || true)" "exit_signal=SIGCHLD" "processes started by flow --version"
    write pipeline.lua <<'L'
return pipeline{ node{ func = function() return 1 end, outputs = "x", name = "lua" } }
L
    strace -f -e trace=clone,clone3,fork,vfork,execve -o trace.txt "$FLOW" run >/dev/null 2>&1
    equals "$(grep -cE 'execve\(' trace.txt)" 1 "execve calls of a run of Lua steps"
    not_contains "$(grep -E 'clone|fork' trace.txt || true)" "exit_signal=SIGCHLD" "processes started by a run of Lua steps"
    write pipeline.lua <<'L'
return pipeline{ node{ command = "true", name = "cmd" } }
L
    strace -f -e trace=clone,clone3,fork,vfork,execve -o trace.txt "$FLOW" run >/dev/null 2>&1
    contains "$(cat trace.txt)" "__flow_reaper" "a run of a command step"
}

# A no-op rerun writes nothing that must be durable: no fsync or fdatasync,
# one new directory (the run's: its logs/ and .flow/tmp/<run>/ are made when
# a step needs them); a run that does work syncs its journal.
test_a_no_op_rerun_syncs_nothing() {
    command -v strace >/dev/null 2>&1 || skip "no strace"
    export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0   # LeakSanitizer refuses ptrace
    write pipeline.lua <<'L'
return pipeline{ node{ command = "echo hi > ${outputs.out}", outputs = { out = "out" }, name = "cmd" } }
L
    strace -f -e trace=fsync,fdatasync,mkdir,mkdirat -o trace.txt "$FLOW" run >/dev/null 2>&1 ||
        skip "strace cannot trace here"
    contains "$(cat trace.txt)" "fdatasync(" "a run that does work"
    strace -f -e trace=fsync,fdatasync,mkdir,mkdirat -o trace.txt "$FLOW" run >/dev/null 2>&1
    equals "$(grep -cE 'fsync\(|fdatasync\(' trace.txt || true)" 0 "syncs of a no-op rerun"
    # (a call another thread interrupts is two lines, "mkdirat(... <unfinished ...>"
    # and "<... mkdirat resumed>": count the calls, not the lines)
    equals "$(grep -cE 'mkdir(at)?\(' trace.txt || true)" 1 "directories a no-op rerun makes"
    run_flow 0 status
    contains "$OUT" "up to date"
    run_flow 0 runs
}

# An interpreter that can import torch: Debian's python3-torch installs for
# /usr/bin/python3, which may not be the python3 first on PATH.
torch_python() {
    for py in "${FLOW_PYTHON:-}" /usr/bin/python3 python3; do
        [ -n "$py" ] && "$py" -c 'import torch' 2>/dev/null && { echo "$py"; return; }
    done
}

test_pytorch_example_trains_once_locally() {
    py=$(torch_python)
    [ -n "$py" ] || skip "no python3 here can import torch (make check installs python3-torch)"
    copy_example pytorch_ddp ex
    FLOW_PYTHON=$py run_flow 0 run ex
    contains "$OUT" "trained on 1 process(es)"
    [ -f ex/.flow/data/model/model.pt ] || { echo "no model.pt"; return 1; }
    # the loss went down
    first=$(sed -n 's/.*"loss": \[\([0-9.]*\),.*/\1/p' ex/.flow/data/model/metrics.json)
    last=$(sed -n 's/.*, \([0-9.]*\)\], "world_size".*/\1/p' ex/.flow/data/model/metrics.json)
    awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a / 2) }' || { echo "loss $first -> $last"; return 1; }
}

test_escaped_param_reference_is_not_checked() {
    # $${params.x} is literal text for the command, not a parameter it reads.
    write pipeline.lua <<'L'
return pipeline{ node{ command = { "echo", "$${params.not_a_param}" }, name = "lit" } }
L
    run_flow 0 run -v
    contains "$ERR" '[lit] ${params.not_a_param}'
}

test_flow_sh_at_top_level_blocks() {
    # Outside a step there is no coroutine to yield: flow.sh drives the loop itself.
    write driver.lua <<'L'
local flow = require("flow")
io.write("top:", flow.sh("echo from-top-level"))
local r = flow.run(pipeline{ node{ func = function() return flow.sh{ "printf", "in-step" } end,
                                   outputs = "x", name = "s" } })
print("step:" .. r.outputs.x)
L
    run_flow 0 run driver.lua
    contains "$OUT" "top:from-top-level"
    contains "$OUT" "step:in-step"
}

# env = {…} values expand like the command: parameters (renamed by a
# namespace), inputs and outputs; a parameter named only there is in the
# fingerprint (changing it reruns the step) and is checked before any step runs.
test_env_values_expand_references_and_count_in_the_fingerprint() {
    write conf/base/parameters.yml <<'Y'
lr: 0.1
a: { lr: 0.5 }
Y
    write pipeline.lua <<'L'
local base = pipeline{
  node{ name = "make", outputs = "o", command = flow.command{ "sh", "-c", 'echo "$LR $LIT" > "$OUT"',
        env = { LR = "${params.lr}", LIT = "plain", OUT = "${outputs.o}" } } },
  node{ name = "read", inputs = "o", outputs = "p", command = 'cat "$IN" > ${outputs.p}', env = { IN = "${inputs.o}" } },
}
return base + pipeline{ base, namespace = "a" }
L
    run_flow 0 run
    equals "$(cat .flow/data/p)" "0.1 plain" "the env values"
    equals "$(cat .flow/data/a.p)" "0.5 plain" "the namespaced copy reads a.lr"
    sed -i 's/^lr: 0.1/lr: 0.2/' conf/base/parameters.yml
    run_flow 0 run --explain
    contains "$ERR" "explain: make runs: parameter 'lr' changed"
    contains "$ERR" "explain: a.make is up to date"
    equals "$(cat .flow/data/p)" "0.2 plain" "after the parameter changed"
    sed -i 's/params.lr/params.lrr/' pipeline.lua
    run_flow 2 run
    contains "$ERR" "reads parameter 'lrr', which is not defined"
    contains "$ERR" "(pipeline.lua:2)"
}

# A command run in another directory (cwd =) reaches its data by paths
# relative to the project's root (../ from sub).  A cwd that does not exist
# fails the step saying so (it was "command not found"); one that is not a
# string is refused at the script's line.
test_a_command_with_a_cwd() {
    mkdir -p sub conf/base
    echo input > in.txt
    write conf/base/catalog.yml <<'Y'
raw: {type: text, path: in.txt}
Y
    write pipeline.lua <<'L'
return pipeline{
  node{ command = flow.command{ "sh", "-c", "pwd > here.txt; cat \"../$0\" > \"../$1\"", "${inputs.i}", "${outputs.o}", cwd = "sub" },
        inputs = { i = "raw" }, outputs = { o = "copy" }, name = "c" },
  node{ command = flow.command{ "true", cwd = "nope" }, name = "d" },
}
L
    run_flow 1 run -k
    equals "$(cat sub/here.txt)" "$PWD/sub" "the command's directory"
    equals "$(cat .flow/data/copy)" "input" "what it copied"
    contains "$ERR" "step 'd': its command's cwd nope is not a directory"
    write pipeline.lua <<'L'
return pipeline{ node{ command = flow.command{ "true", cwd = true }, name = "d" } }
L
    run_flow 2 run
    contains "$ERR" "pipeline.lua:1: flow.command: cwd must be a directory's path, got boolean"
}

# flow.run's options of the wrong type are refused at the caller's line:
# a name that was a function failed deep inside the run ("bad argument #1
# to 'append'") and left a run `flow runs` called damaged.
test_flow_run_options_of_the_wrong_type_are_refused() {
    local o
    for o in 'name = function() end' 'load_versions = 5' 'started = "x"' 'resume = true' 'force = 1'; do
        printf 'local flow = require("flow")\nflow.run(pipeline{ node{ func = function() return 1 end, outputs = "a", name = "s" } }, { %s })\n' "$o" > driver.lua
        run_flow 2 run driver.lua
        contains "$ERR" "driver.lua:2: flow.run: ${o%% *} must be"
    done
    [ ! -d .flow/runs ] || [ -z "$(ls .flow/runs)" ] || { echo "a run was made: $(ls .flow/runs)"; return 1; }
}
