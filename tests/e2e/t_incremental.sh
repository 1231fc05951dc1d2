# t_incremental.sh — fingerprints decide what reruns: parameters, code,
# files a command names, inputs' content; --force, --explain, --dry-run; the
# journal; memory values restored from the cache.

ran() { ls ran_* 2>/dev/null | sed 's/ran_//' | sort | tr '\n' ' '; }

# a ← params:a;  b ← params:b;  ab ← a + b;  twice ← a;  cmd ← src/tool.sh on twice
incr_project() {
    write conf/base/parameters.yml <<'Y'
a: 1
b: 2
Y
    write src/tool.sh <<'S'
#!/bin/sh
# doubles the number in $1 into $2
echo $(( $(cat "$1") * 2 )) > "$2"
S
    chmod +x src/tool.sh
    write pipeline.lua <<'L'
local function mark(name) io.open("ran_" .. name, "w"):close() end
return pipeline{
  node{ name = "a", inputs = "params:a", outputs = "va",
        func = function(a) mark("a") return a * 10 end },
  node{ name = "b", inputs = "params:b", outputs = "vb",
        func = function(b) mark("b") return b * 10 end },
  node{ name = "ab", inputs = { "va", "vb" }, outputs = "vab",
        func = function(x, y) mark("ab") return x + y end },
  node{ name = "twice", inputs = "va", outputs = "tw",
        func = function(x) mark("twice") return x end },
  node{ name = "cmd", inputs = { n = "tw" }, outputs = { out = "doubled" },
        command = "touch ran_cmd; sh src/tool.sh ${inputs.n} ${outputs.out}" },
}
L
}

test_rerun_of_unchanged_pipeline_skips_everything() {
    incr_project
    run_flow 0 run
    equals "$(ran)" "a ab b cmd twice " "first run"
    contains "$ERR" "5 done"
    rm -f ran_*
    run_flow 0 run
    equals "$(ran)" "" "second run"
    contains "$ERR" "0 done, 5 up to date"
}

test_changed_parameter_reruns_exactly_its_dependents() {
    incr_project
    run_flow 0 run
    rm -f ran_*
    run_flow 0 run --params b=3
    equals "$(ran)" "ab b " "after b changed"
    rm -f ran_*
    sed -i 's/^a: 1/a: 5/' conf/base/parameters.yml
    run_flow 0 run --params b=3
    equals "$(ran)" "a ab cmd twice " "after a changed"
    equals "$(cat .flow/data/doubled)" "100"
}

test_same_output_stops_the_rerun_early() {
    incr_project
    write pipeline.lua <<'L'
local function mark(name) io.open("ran_" .. name, "w"):close() end
return pipeline{
  node{ name = "parity", inputs = "params:a", outputs = "p",
        func = function(a) mark("parity") return a % 2 end },
  node{ name = "use", inputs = "p", outputs = "q", func = function(p) mark("use") return p end },
}
L
    run_flow 0 run
    rm -f ran_*
    run_flow 0 run --params a=3            # a changed, its parity did not
    equals "$(ran)" "parity " "only the step whose parameter changed"
}

test_touching_files_without_changing_them_reruns_nothing() {
    incr_project
    run_flow 0 run
    rm -f ran_*
    sleep 0.01
    touch src/tool.sh .flow/data/doubled pipeline.lua conf/base/parameters.yml
    run_flow 0 run
    equals "$(ran)" "" "after touch"
}

test_changed_project_file_reruns_the_command_naming_it() {
    incr_project
    run_flow 0 run
    rm -f ran_*
    echo '# a comment changes the content' >> src/tool.sh
    run_flow 0 run --explain
    equals "$(ran)" "cmd " "after src/tool.sh changed"
    contains "$ERR" "explain: cmd runs: file 'src/tool.sh' changed"
    contains "$ERR" "explain: ab is up to date"
}

# The script of an argv that runs a shell with -c is one word, which names no
# file; the files its words name count (not what it writes).
test_a_project_file_a_sh_c_script_names_reruns_it() {
    write src/train.py <<'P'
print(1)
P
    write pipeline.lua <<'L'
return pipeline{
  node{ name = "train", outputs = { o = "model" },
        command = { "sh", "-c", "touch ran_train; cat src/train.py > ${outputs.o}" } },
  node{ name = "bash", outputs = { o = "m2" },
        command = { "/bin/bash", "-ec", "touch ran_bash; cat src/train.py > $0", "${outputs.o}" } },
}
L
    run_flow 0 run
    rm -f ran_*
    run_flow 0 run
    equals "$(ran)" "" "unchanged"
    echo 'print(2)' >> src/train.py
    run_flow 0 run --explain
    equals "$(ran)" "bash train " "after src/train.py changed"
    contains "$ERR" "explain: train runs: file 'src/train.py' changed"
}

# What a command writes through a redirection or tee is not a file it
# reads: named, logs/run.log changed at every run, and the step ran again
# each time.  A file it reads (< or as an argument) still reruns it.
test_a_file_a_command_writes_is_not_a_file_it_reads() {
    mkdir -p logs
    echo src > src.txt
    write pipeline.lua <<'L'
return pipeline{ node{ command = "echo hi > ${outputs.o}; date +%s%N > logs/run.log; echo x | tee logs/t.log >/dev/null; cat < src.txt >> logs/run.log",
                       outputs = { o = "o" }, name = "a" } }
L
    run_flow 0 run
    run_flow 0 run --explain
    contains "$ERR" "explain: a is up to date"
    echo more >> src.txt
    run_flow 0 run --explain
    contains "$ERR" "explain: a runs: file 'src.txt' changed"
}

test_changed_code_reruns_the_step() {
    incr_project
    run_flow 0 run
    rm -f ran_*
    sed -i 's/return x + y/return x + y + 1/' pipeline.lua
    run_flow 0 run --explain
    equals "$(ran)" "ab " "after ab's code changed"
    contains "$ERR" "explain: ab runs: its code changed"
    rm -f ran_*
    # a blank line above moves every function: line numbers are not code
    sed -i '1i\\' pipeline.lua
    run_flow 0 run
    equals "$(ran)" "" "after lines moved"
}

test_upvalues_and_globals_are_part_of_the_code() {
    write pipeline.lua <<'L'
local scale = 2
SHIFT = 1
local function helper(x) return x * scale end
return pipeline{
  node{ name = "f", outputs = "y",
        func = function() io.open("ran_f", "w"):close() return helper(3) + SHIFT end },
}
L
    run_flow 0 run
    rm -f ran_*
    run_flow 0 run
    equals "$(ran)" "" "unchanged"
    sed -i 's/local scale = 2/local scale = 3/' pipeline.lua
    run_flow 0 run
    equals "$(ran)" "f " "after an upvalue of a helper changed"
    rm -f ran_*
    sed -i 's/SHIFT = 1/SHIFT = 2/' pipeline.lua
    run_flow 0 run
    equals "$(ran)" "f " "after a global it names changed"
}

# A node a step's function holds (a userdata, lua/node_decl.c) is hashed by
# its fields, as a table is: changing the node it names changes the step.
test_a_node_held_in_an_upvalue_is_part_of_the_code() {
    write pipeline.lua <<'L'
local a = node{ func = function() return 1 end, outputs = "x", name = "a", retries = 1 }
local b = node{ name = "b", inputs = "x", outputs = "y",
                func = function(x) io.open("ran_b", "w"):close() return a.name .. x end }
return pipeline{ a, b }
L
    run_flow 0 run
    rm -f ran_*
    run_flow 0 run
    equals "$(ran)" "" "unchanged"
    sed -i 's/retries = 1/retries = 2/' pipeline.lua
    run_flow 0 run
    equals "$(ran)" "b " "after the node it holds changed"
}

# What a step's values lead to is hashed too: a class's methods through the
# metatable, defaults through __index, a field the script set in a project
# module, an _ENV of its own, an integer past 2^53.
test_metatables_module_fields_and_environments_are_part_of_the_code() {
    write lib/cfg.lua <<'L'
local M = { scale = 1 }
function M.apply(x) return x * M.scale end
return M
L
    write conf/base/parameters.yml <<'Y'
seed: 1234567890123456789
Y
    write pipeline.lua <<'L'
local cfg = require("lib.cfg")
cfg.scale = 5
local Model = {}
Model.__index = Model
function Model.predict(self, x) return x * self.w + 100 end
local m = setmetatable({ w = 3 }, Model)
local opts = setmetatable({}, { __index = { lr = 0.5 } })
local h
do local _ENV = { k = 2 }; h = function(x) return x * k end end
local function mark(name) io.open("ran_" .. name, "w"):close() end
return pipeline{
  node{ name = "module", outputs = "a", func = function() mark("module") return cfg.apply(1) end },
  node{ name = "class", outputs = "b", func = function() mark("class") return m:predict(1) end },
  node{ name = "defaults", outputs = "c", func = function() mark("defaults") return opts.lr end },
  node{ name = "env", outputs = "d", func = function() mark("env") return h(1) end },
  node{ name = "seed", inputs = "params:seed", outputs = "e", func = function(s) mark("seed") return s end },
}
L
    run_flow 0 run
    rm -f ran_*
    run_flow 0 run
    equals "$(ran)" "" "unchanged"
    sed -i 's/cfg.scale = 5/cfg.scale = 6/' pipeline.lua
    run_flow 0 run
    equals "$(ran)" "module " "after the script set another value in a module"
    rm -f ran_*
    sed -i 's/x \* self.w + 100/x * self.w + 101/' pipeline.lua
    run_flow 0 run
    equals "$(ran)" "class " "after a method of the value's class changed"
    rm -f ran_*
    sed -i 's/lr = 0.5/lr = 0.25/' pipeline.lua
    run_flow 0 run
    equals "$(ran)" "defaults " "after a default behind __index changed"
    rm -f ran_*
    sed -i 's/_ENV = { k = 2 }/_ENV = { k = 3 }/' pipeline.lua
    run_flow 0 run
    equals "$(ran)" "env " "after a value in the function's own _ENV changed"
    rm -f ran_*
    sed -i 's/seed: 1234567890123456789/seed: 1234567890123456788/' conf/base/parameters.yml
    run_flow 0 run
    equals "$(ran)" "seed " "after a large integer parameter changed by one"
}

# A function the script adds to a library of Lua's is the script's code: the
# step that calls it (as a method, naming no "string") reruns when it changes.
test_functions_added_to_lua_libraries_are_part_of_the_code() {
    write pipeline.lua <<'L'
function string.trim(s) return (s:gsub("^%s+", "")) end
function table.total(t) local s = 0 for _, v in ipairs(t) do s = s + v end return s end
local function mark(name) io.open("ran_" .. name, "w"):close() end
return pipeline{
  node{ name = "trim", outputs = "a", func = function() mark("trim") return ("  hi"):trim() end },
  node{ name = "total", outputs = "b", func = function() mark("total") return table.total({ 1, 2 }) end },
  node{ name = "other", outputs = "c", func = function() mark("other") return ("x"):upper() end },
}
L
    run_flow 0 run
    rm -f ran_*
    run_flow 0 run
    equals "$(ran)" "" "unchanged"
    sed -i 's/"^%s+", ""/"^%s+", "_"/' pipeline.lua
    run_flow 0 run
    equals "$(ran)" "trim " "after string.trim changed"
    rm -f ran_*
    sed -i 's/s = s + v/s = s + 2 * v/' pipeline.lua
    run_flow 0 run
    equals "$(ran)" "total " "after table.total changed"
}

# Values that lead back to one another (functions that call each other,
# tables that hold each other) are hashed whichever step the walk starts
# from: a change in the loop reruns every step that reaches it, in either
# order of the steps.
test_loops_in_what_a_step_reaches_are_hashed_whole() {
    for order in AB BA; do
        rm -rf .flow ran_*
        write pipeline.lua <<L
local f, g
function f(x) if x <= 0 then return 0 end return g(x - 1) + 1 end
function g(x) if x <= 0 then return 100 end return f(x - 1) + 2 end
local model = { lr = 0.7 }
local opt = { parent = model }
model.opt = opt
local function mark(name) io.open("ran_" .. name, "w"):close() end
local A = node{ name = "A", outputs = "a", func = function() mark("A") return f(3) + model.lr end }
local B = node{ name = "B", outputs = "b", func = function() mark("B") return g(3) + opt.parent.lr end }
return pipeline("$order" == "AB" and { A, B } or { B, A })
L
        run_flow 0 run
        rm -f ran_*
        sed -i 's/return g(x - 1) + 1 end/return g(x - 1) + 5 end/' pipeline.lua
        run_flow 0 run
        equals "$(ran)" "A B " "order $order: after a function in the loop changed"
        rm -f ran_*
        sed -i 's/lr = 0.7/lr = 0.8/' pipeline.lua
        run_flow 0 run
        equals "$(ran)" "A B " "order $order: after a table in the loop changed"
        rm -f ran_*
        run_flow 0 run
        equals "$(ran)" "" "order $order: unchanged"
    done
}

test_project_modules_are_part_of_the_code() {
    # a module the step requires at run time, one a module requires, and one
    # held in an upvalue: each is hashed by its source file's content
    write lib/helpers.lua <<'L'
local M = {}
function M.scale(x) return x * require("lib.factor") end
return M
L
    write lib/factor.lua <<'L'
return 2
L
    write lib/shift.lua <<'L'
return { by = 1 }
L
    write pipeline.lua <<'L'
local shift = require("lib.shift")
return pipeline{
  node{ name = "scaled", outputs = "y",
        func = function() io.open("ran_scaled", "w"):close() return require("lib.helpers").scale(3) end },
  node{ name = "shifted", outputs = "z",
        func = function() io.open("ran_shifted", "w"):close() return 3 + shift.by end },
  node{ name = "show", inputs = { "y", "z" }, func = function(y, z) print("y=" .. y .. " z=" .. z) end },
}
L
    run_flow 0 run
    contains "$OUT" "y=6 z=4"
    rm -f ran_*
    run_flow 0 run
    equals "$(ran)" "" "unchanged"
    sed -i 's/x \* /x * 10 * /' lib/helpers.lua
    run_flow 0 run --explain
    equals "$(ran)" "scaled " "after the module a step requires changed"
    contains "$ERR" "explain: scaled runs: its code changed"
    contains "$OUT" "y=60 z=4"
    rm -f ran_*
    echo 'return 3' > lib/factor.lua
    run_flow 0 run
    equals "$(ran)" "scaled " "after a module that module requires changed"
    contains "$OUT" "y=90 z=4"
    rm -f ran_*
    echo 'return { by = 2 }' > lib/shift.lua
    run_flow 0 run
    equals "$(ran)" "shifted " "after the module held in an upvalue changed"
    contains "$OUT" "y=90 z=5"
}

# A module require loaded runs the text it was loaded from: a driver script
# (or a REPL) that edits it between two runs without loading it again runs
# the old code, which must not be recorded under the new source's hash; the
# next process, which loads the new text, runs the step.
test_a_module_is_hashed_as_it_was_loaded() {
    write lib/m.lua <<'L'
return { v = function() return 1 end }
L
    write driver.lua <<'L'
local flow = require("flow")
local m = require("lib.m")
local p = pipeline{ node{ name = "s", outputs = "o", func = function() return m.v() end },
                    node{ name = "show", inputs = "o", func = function(o) print("o=" .. o) end } }
flow.run(p)
local f = assert(io.open("lib/m.lua", "w"))
f:write("return { v = function() return 2 end }\n")
f:close()
flow.run(p)
L
    run_flow 0 run driver.lua
    contains "$OUT" "o=1"
    contains "$ERR" "0 done, 2 up to date"
    run_flow 0 run driver.lua
    contains "$OUT" "o=2"
}

test_modules_with_annotations_and_dofiled_files_are_part_of_the_code() {
    # a module written with distributed_job<…> still shows what it requires;
    # a file a step runs with dofile or loadfile (a literal path) is hashed
    # like a module, with what it requires in turn
    write lib/inner.lua <<'L'
return { k = 5 }
L
    write lib/a.lua <<'L'
local flow = require("flow")
local M = {}
M.job = distributed_job<framework = "pytorch", nodes = 1>(flow.command{ "true" })
function M.f() return require("lib.inner").k end
return M
L
    write lib/d.lua <<'L'
return 100 + require("lib.deep").n
L
    write lib/deep.lua <<'L'
return { n = 1 }
L
    write lib/l.lua <<'L'
return 1000
L
    write pipeline.lua <<'L'
local function s() io.open("ran_s", "w"):close() return require("lib.a").f() end
return pipeline{
  node{ func = s, outputs = "v", name = "s" },
  node{ name = "d", outputs = "dv",
        func = function() io.open("ran_d", "w"):close() return dofile("lib/d.lua") end },
  node{ name = "l", outputs = "lv",
        func = function() io.open("ran_l", "w"):close() return loadfile("lib/l.lua")() end },
  node{ inputs = { "v", "dv", "lv" }, name = "show",
        func = function(v, d, l) print("v=" .. v .. " d=" .. d .. " l=" .. l) end },
}
L
    run_flow 0 run
    contains "$OUT" "v=5 d=101 l=1000"
    rm -f ran_*
    run_flow 0 run
    equals "$(ran)" "" "unchanged"
    echo 'return { k = 6 }' > lib/inner.lua
    run_flow 0 run --explain
    equals "$(ran)" "s " "after the module an annotated module requires changed"
    contains "$ERR" "explain: s runs: its code changed"
    contains "$OUT" "v=6 d=101 l=1000"
    rm -f ran_*
    echo 'return 200 + require("lib.deep").n' > lib/d.lua
    run_flow 0 run
    equals "$(ran)" "d " "after the file a step runs with dofile changed"
    contains "$OUT" "v=6 d=201 l=1000"
    rm -f ran_*
    echo 'return { n = 2 }' > lib/deep.lua
    run_flow 0 run
    equals "$(ran)" "d " "after a module that file requires changed"
    contains "$OUT" "v=6 d=202 l=1000"
    rm -f ran_*
    echo 'return 2000' > lib/l.lua
    run_flow 0 run
    equals "$(ran)" "l " "after the file a step runs with loadfile changed"
    contains "$OUT" "v=6 d=202 l=2000"
}

test_single_word_command_is_up_to_date() {
    write pipeline.lua <<'L'
return pipeline{
  node{ command = { "true" }, name = "noop" },
  node{ command = "true", name = "noop_sh" },
}
L
    run_flow 0 run
    contains "$ERR" "2 done"
    run_flow 0 run --explain
    contains "$ERR" "0 done, 2 up to date"
    not_contains "$ERR" "runs:"
}

test_force_and_dry_run() {
    incr_project
    run_flow 0 run
    rm -f ran_*
    run_flow 0 run --force
    equals "$(ran)" "a ab b cmd twice " "--force"
    rm -f ran_*
    run_flow 0 run -n --params a=2
    equals "$(ran)" "" "a dry run runs nothing"
    contains "$OUT" "a      runs: parameter 'a' changed"
    contains "$OUT" "b      up to date"
    contains "$OUT" "twice  runs: it reads what 'a' makes, which runs first"
    contains "$OUT" "4 of 5 selected steps would run"
}

test_deleted_or_edited_output_reruns_its_step() {
    incr_project
    run_flow 0 run
    rm -f ran_*
    echo 7 > .flow/data/doubled
    run_flow 0 run --explain
    equals "$(ran)" "cmd " "after the output was edited"
    contains "$ERR" "its output 'doubled' was changed since"
    equals "$(cat .flow/data/doubled)" "20"
    rm -f ran_* .flow/data/doubled
    run_flow 0 run
    equals "$(ran)" "cmd " "after the output was deleted"
}

test_memory_values_of_skipped_steps_come_from_the_cache() {
    write pipeline.lua <<'L'
return pipeline{
  node{ name = "make", outputs = "t",
        func = function() io.open("ran_make", "w"):close()
                          return { list = { 1, 2.5, "x" }, flag = true, big = string.rep("z", SIZE or 200) } end },
  node{ name = "use", inputs = { "t", "params:k" }, outputs = "u",
        func = function(t, k) io.open("ran_use", "w"):close()
                              return string.format("%s %s %s %d %s", math.type(t.list[1]), t.list[2], t.list[3], #t.big, k) end },
}
L
    write conf/base/parameters.yml <<'Y'
k: one
Y
    run_flow 0 run
    rm -f ran_*
    run_flow 0 run --params k=two
    equals "$(ran)" "use " "only the consumer"
    write driver.lua <<'L'
local r = flow.run(dofile("pipeline.lua"), { params = { k = "three" } })
print(r.outputs.u)
L
    run_flow 0 run driver.lua
    equals "$OUT" "integer 2.5 x 200 three"
    [ ! -e .flow/cache/values ] || { echo "a value small enough for its record got a file"; return 1; }
}

# A large value that only steps read is not kept between runs: nothing of
# it is written (no file in .flow/cache/values), its step's record names it
# by the step's fingerprint, and a reader that runs while its producer is up
# to date has the producer called again for it (-v says so); the producer
# stays up to date.  A driver gets it among the outputs of a selection that
# ends with it when the run makes it (not after the run, when it was up to
# date: force = true makes it).
test_a_large_value_only_steps_read_is_made_again_when_a_reader_needs_it() {
    write pipeline.lua <<'L'
return pipeline{
  node{ name = "make", outputs = "t",
        func = function() io.open("ran_make", "w"):close()
                          return { list = { 1, 2.5, "x" }, big = string.rep("z", 2000) } end },
  node{ name = "use", inputs = { "t", "params:k" }, outputs = "u",
        func = function(t, k) io.open("ran_use", "w"):close() return #t.big .. " " .. k end },
  node{ name = "also", inputs = "t", outputs = "a", func = function(t) return t.list[3] end },
}
L
    write conf/base/parameters.yml <<'Y'
k: one
Y
    run_flow 0 run
    [ ! -e .flow/cache/values ] || { echo "a value not kept got a file"; return 1; }
    contains "$(grep '"step":"make"' .flow/runs/latest/journal.jsonl)" '"recompute":true'
    rm -f ran_*
    run_flow 0 run
    equals "$(ran)" "" "a rerun"
    run_flow 0 run -v --params k=two
    equals "$(ran)" "make use " "the reader, and its producer called again"
    contains "$ERR" "up to date  make"
    contains "$ERR" "flow: make: called again for 't' (a memory value, not kept between runs)"
    contains "$ERR" "1 done, 2 up to date"
    rm -f ran_*
    run_flow 0 run --params k=two
    equals "$(ran)" "" "the rerun after it"
    write driver.lua <<'L'
local p = dofile("pipeline.lua")
print(flow.run(p, { params = { k = "three" } }).outputs.u)
print(flow.run(p, { to_outputs = "t" }).outputs.t)              -- up to date: not made after the run
print(#flow.run(p, { to_outputs = "t", force = true }).outputs.t.big)
L
    run_flow 0 run driver.lua
    equals "$OUT" "$(printf '2000 three\nnil\n2000')"
}

# A selection whose step reads a value not kept leaves its producer out:
# when the reader runs, the producer (and so on up) is called again if it is
# as its record says; changed since, the reader fails saying to select it.
# A reader that does not run needs nothing, not even the producer's inputs.
test_a_selection_calls_unselected_producers_of_values_not_kept_again() {
    write pipeline.lua <<'L'
local function mark(s) io.open("ran_" .. s, "w"):close() end
return pipeline{
  node{ name = "make", inputs = "raw", outputs = "t", func = function(r) mark("make") return string.rep(r, 2000) end },
  node{ name = "mid", inputs = "t", outputs = "m", func = function(t) mark("mid") return t .. string.rep("y", 10) end },
  node{ name = "use", inputs = { "m", "params:k" }, outputs = "u", retries = 2,    -- (not retried: it cannot mend)
        func = function(m, k) mark("use") return #m .. " " .. k end },
}
L
    write conf/base/parameters.yml <<'Y'
k: one
Y
    write conf/base/catalog.yml <<'Y'
raw: {type: text, path: raw.txt}
Y
    echo -n z > raw.txt
    run_flow 0 run
    rm -f ran_*
    run_flow 0 run --nodes use --params k=two
    equals "$(ran)" "make mid use " "the reader and the producers called again"
    contains "$ERR" "1 done, 2 skipped"
    rm -f ran_*
    sed -i 's/string.rep("y", 10)/string.rep("y", 20)/' pipeline.lua
    run_flow 1 run --nodes use --params k=three
    contains "$ERR" "step 'use': input 'm' is not kept between runs, and making it again needs its producer 'mid' (pipeline.lua:4), which changed since it made it: run it too (e.g. --from-nodes mid)"
    not_contains "$ERR" "retrying"
    run_flow 0 run --from-nodes mid --params k=three
    contains "$ERR" "2 done, 1 skipped"
    rm raw.txt
    run_flow 0 run --nodes use --params k=three
    contains "$ERR" "0 done, 1 up to date, 2 skipped"
    run_flow 1 run --nodes use --params k=four
    contains "$ERR" "input 'm' is not kept between runs, and making it again needs 'raw', which step 'make' reads: there is no file at raw.txt"
    echo -n z > raw.txt
    write driver.lua <<'L'
local r = flow.run(dofile("pipeline.lua"), { nodes = "use", params = { k = "five" } })
local keys = {}
for k in pairs(r.outputs) do keys[#keys + 1] = k end
print(r.outputs.u, table.concat(keys, ","))
L
    run_flow 0 run driver.lua
    equals "$OUT" "2020 five	u"
}

# A selected producer this run did not finish (it failed) is not called
# again with its new parameters for a reader that runs anyway (-k): that
# value would stand under its old record's name, and a later run would read
# it as up to date ("yyyyytwo" where a clean run gives "xxxxxtwo").  A value
# is made again only by a producer whose fingerprint now names it.
test_a_value_is_made_again_only_by_the_producer_that_made_it() {
    write pipeline.lua <<'L'
return pipeline{
  node{ name = "u", inputs = "params:a", outputs = "t1",
        func = function(a) if io.open("fail") then error("u broke") end return string.rep(a, 600) end },
  node{ name = "p", inputs = "t1", outputs = "t", func = function(t1) return t1 .. string.rep("-", 600) end },
  node{ name = "r", inputs = { "t", "params:k" }, outputs = "res", func = function(t, k) return t:sub(1, 5) .. k end },
}
L
    write conf/base/parameters.yml <<'Y'
a: x
k: one
Y
    run_flow 0 run
    touch fail
    run_flow 1 run -j 1 -k --nodes u,r -p a=y -p k=two
    contains "$ERR" "step 'r': input 't' is not kept between runs, and making it again needs step 'u' (upstream of it) (pipeline.lua:2), which changed since it made it: run it too (e.g. --from-nodes u)"
    rm fail
    write driver.lua <<'L'
print(flow.run(dofile("pipeline.lua"), { params = { a = "x", k = "two" } }).outputs.res)
L
    run_flow 0 run driver.lua
    equals "$OUT" "xxxxxtwo" "what a later run reads"
}

# A reader may start before a selected step upstream of its producer is
# decided (nothing orders them: the producer is not selected): it reads
# that step's last value, as for an unselected one, at any -j.
test_a_reader_before_a_selected_step_upstream_reads_its_last_value() {
    write pipeline.lua <<'L'
return pipeline{
  node{ name = "s0", inputs = "params:a", outputs = "y0", func = function(a) flow.sh("sleep 1") return "same" end },
  node{ name = "q", inputs = "y0", outputs = "y", func = function(y0) return string.rep(y0, 300) end },
  node{ name = "P", inputs = "y", outputs = "x", func = function(y) return y .. string.rep("-", 600) end },
  node{ name = "R", inputs = { "x", "params:k" }, outputs = "res", func = function(x, k) return x:sub(1, 5) .. k end },
}
L
    write conf/base/parameters.yml <<'Y'
a: 1
k: one
Y
    run_flow 0 run
    run_flow 0 run -j 2 --nodes s0,q,R -p a=3 -p k=four
    contains "$ERR" "2 done, 1 up to date, 1 skipped"
    run_flow 0 run -j 1 --nodes s0,q,R -p a=4 -p k=five
    contains "$ERR" "2 done, 1 up to date, 1 skipped"
}

# A task whose run raised (here its `started` callback) is closed: the run's
# to-be-closed values ran, so no run is left under way in the process: the
# next run is the latest (.flow/runs/latest moves only when no other run is
# under way) and has a state of its own, and the collector's pause is back.
test_a_task_whose_run_raised_leaves_no_run_under_way() {
    write pipeline.lua <<'L'
collectgarbage("setpause", 160)         -- what the runs must leave as they found it
local p = pipeline{ node{ func = function() return 1 end, outputs = "a", name = "a" } }
local ok, err = pcall(flow.wait_all, { flow.spawn(flow.run, p, { started = function() error("boom") end }) })
print("caught " .. tostring(ok) .. " " .. tostring(err):match("boom"))
local second
flow.run(p, { started = function(id) second = id end })
print("second " .. second)
print("pause " .. collectgarbage("setpause", 200))
L
    run_flow 0 run pipeline.lua
    contains "$OUT" "caught false boom"
    local second
    second=$(sed -n 's/^second //p' <<<"$OUT")
    equals "$(readlink .flow/runs/latest)" "$second" "the latest run"
    contains "$OUT" "pause 160"
}

# Two runs at once (flow.spawn) whose steps would write one catalog file:
# the second step to start fails (the first run's evaluate read the other
# run's model, and its record said its own: later runs trusted it); the
# first run ends as if alone.  Versioned, both write.
test_runs_at_once_never_write_one_catalog_file() {
    write conf/base/catalog.yml <<'Y'
model: {type: text, path: data/model.txt}
Y
    write conf/base/parameters.yml <<'Y'
x: 1
d: 1
Y
    write pipeline.lua <<'L'
return pipeline{
  node{ command = "sleep ${params.x}; echo model-x=${params.x} > ${outputs.model}", outputs = "model", name = "train" },
  node{ command = "sleep ${params.d}; cat ${inputs.model} > ${outputs.report}", inputs = "model", outputs = "report",
        name = "evaluate" },
  node{ func = function(r) local f = io.open(r) local s = f:read("a") f:close() return s end, inputs = "report",
        outputs = "result", name = "collect" },
}
L
    write driver.lua <<'L'
local p = dofile("pipeline.lua")
local a = flow.spawn(flow.run, p, { params = { x = 0.2, d = 1.5 }, label = "A" })
local b = flow.spawn(flow.run, p, { params = { x = 1, d = 0.2 }, label = "B" })
local r = flow.wait_all{ a, b }
print("A " .. tostring(r[1].outputs.result):gsub("\n", "") .. " " .. r[1].code)
print("B " .. tostring(r[2].outputs.result) .. " " .. r[2].code)
L
    run_flow 0 run driver.lua
    contains "$OUT" "A model-x=0.2 0"
    contains "$OUT" "B nil 1"
    contains "$ERR" "step 'train': output 'model' (data/model.txt) is written by another run at once (A): runs at once (flow.spawn) must not share a file that one of them writes"
    equals "$(cat data/model.txt)" "model-x=0.2" "the model"
    rm data/model.txt
    write conf/base/catalog.yml <<'Y'
model: {type: text, path: data/model.txt, versioned: true}
Y
    run_flow 0 run driver.lua
    contains "$OUT" "A model-x=0.2 0"
    contains "$OUT" "B model-x=1"
    # a reader is a claim too: A's train is up to date and its evaluate reads
    # the model while B writes it (evaluate read B's model, recorded as A's)
    rm -rf data .flow
    write conf/base/catalog.yml <<'Y'
model: {type: text, path: data/model.txt}
Y
    run_flow 0 run --nodes train --params x=0.2
    write driver.lua <<'L'
local p = dofile("pipeline.lua")
local a = flow.spawn(flow.run, p, { params = { x = 0.2, d = 1.5 }, label = "A" })
local b = flow.spawn(flow.run, p, { params = { x = 1 }, nodes = "train", label = "B" })
local r = flow.wait_all{ a, b }
print("A " .. r[1].code .. " B " .. r[2].code)
L
    run_flow 0 run driver.lua
    contains "$OUT" "A 0 B 1"
    contains "$ERR" "step 'train': output 'model' (data/model.txt) is read by another run at once (A)"
    equals "$(cat data/model.txt)" "model-x=0.2" "the model"
}

# The same with two runs at once (flow.spawn): one replaces the producer's
# record while the other's reader needs the value its run started with.
test_a_value_is_not_made_again_by_a_producer_another_run_changed() {
    write pipeline.lua <<'L'
return pipeline{
  node{ name = "p", inputs = "params:a", outputs = "t", func = function(a) flow.sh("sleep 1") return string.rep(a, 600) end },
  node{ name = "s", inputs = "params:k", outputs = "sv", func = function(k) flow.sh("sleep 2") return k end },
  node{ name = "r", inputs = { "t", "sv" }, outputs = "res", func = function(t, sv) return t:sub(1, 5) .. sv end },
}
L
    write conf/base/parameters.yml <<'Y'
a: x
k: one
Y
    write driver.lua <<'L'
local P = dofile("pipeline.lua")
flow.run(P, { params = { a = "x", k = "one" } })
local A = flow.spawn(flow.run, P, { nodes = "p", params = { a = "y" } })
local B = flow.spawn(flow.run, P, { nodes = "s,r", params = { a = "y", k = "two" } })
local rs = flow.wait_all { A, B }
print(rs[2].steps.r.state)
print(flow.run(P, { params = { a = "x", k = "two" } }).outputs.res)
L
    run_flow 0 run driver.lua
    equals "$OUT" "$(printf 'failed\nxxxxxtwo')" "r in the run beside, then what a later run reads"
}

# A step in a pool, or with a timeout or retries, keeps its large values:
# called again it would run in its reader's turn, outside its pool's limit
# (two "gpu" steps at once) and its own timeout.
test_a_step_in_a_pool_or_with_a_timeout_keeps_its_values() {
    write conf/base/flow.yml <<'Y'
pools: {gpu: 1}
Y
    write pipeline.lua <<'L'
local function mark(s) io.open("ran_" .. s, "w"):close() end
return pipeline{
  node{ name = "fa", pool = "gpu", outputs = "a", func = function() mark("fa") return string.rep("a", 2000) end },
  node{ name = "fb", timeout = "1m", outputs = "b", func = function() mark("fb") return string.rep("b", 2000) end },
  node{ name = "ra", inputs = { "a", "b", "params:k" }, outputs = "r", func = function(a, b, k) return #a + #b .. k end },
}
L
    write conf/base/parameters.yml <<'Y'
k: one
Y
    run_flow 0 run
    equals "$(ls .flow/cache/values | wc -l)" "2" "values cached in files"
    rm -f ran_*
    run_flow 0 run -p k=two
    equals "$(ran)" "" "producers called again"
    contains "$ERR" "1 done, 2 up to date"
}

# Two readers that run at once need one value not kept: its producer, which
# waits (flow.sh), is called once for both.
test_a_value_not_kept_is_made_once_for_readers_at_once() {
    write pipeline.lua <<'L'
local function log(s) local f = io.open("calls", "a"); f:write(s, "\n"); f:close() end
return pipeline{
  node{ name = "make", outputs = "t",
        func = function() log("make"); flow.sh("sleep 0.2"); return string.rep("z", 2000) end },
  node{ name = "r1", inputs = { "t", "params:k" }, outputs = "u1", func = function(t, k) return #t .. k end },
  node{ name = "r2", inputs = { "t", "params:k" }, outputs = "u2", func = function(t, k) return #t .. k end },
}
L
    write conf/base/parameters.yml <<'Y'
k: one
Y
    run_flow 0 run
    rm -f calls
    run_flow 0 run -j 2 --params k=two
    contains "$ERR" "2 done, 1 up to date"
    equals "$(cat calls)" "make" "the producer's calls"
}

# A reader that stops while a value not kept is made for it (its timeout,
# Ctrl-C) stops: the pcall around the call does not hold the stop, the
# other reader waiting for that call is not left waiting for ever (it makes
# the value itself), and a retry makes it again.  (These runs hung.)
slow_producer_pipeline() {
    write pipeline.lua <<'L'
return pipeline{
  node{ name = "make", inputs = "params:k", outputs = "t", func = function(k)
          io.open("making", "w"):close()
          flow.sh("sleep " .. (os.getenv("SLOW") or "0"))
          local t = {} for i = 1, 200 do t[i] = i * k end return t end },
  node{ name = "use1", timeout = "1s", retries = 1, inputs = { "t", "params:v" }, outputs = "r1",
        func = function(t, v) return t[1] + v end },
  node{ name = "use2", inputs = { "t", "params:v" }, outputs = "r2", func = function(t, v) return t[2] + v end },
}
L
    write conf/base/parameters.yml <<'Y'
k: 1
v: 0
Y
    run_flow 0 run
}

test_a_reader_stopped_while_a_value_is_made_again_stops() {
    slow_producer_pipeline
    set +e
    SLOW=2 timeout -k 5 60 "$FLOW" run -j 2 -p v=1 >stdout.txt 2>stderr.txt
    STATUS=$?
    set -e
    ERR=$(cat stderr.txt)
    equals "$STATUS" 1 "exit status (124 or 137: it hung)"
    contains "$ERR" "step 'use1' timed out after 1s (attempt 1 of 2); retrying"
    contains "$ERR" "done     use2"
    run_flow 0 run -p v=1
    contains "$ERR" "1 done, 2 up to date"
    # Ctrl-C while both readers wait on the call
    rm -f making
    SLOW=5 "$FLOW" run -j 2 -p v=2 >stdout.txt 2>stderr.txt &
    local pid=$!
    for _ in $(seq 300); do [ -e making ] && break; sleep 0.1; done
    interrupt_within "$pid" 20 "the run"
    equals "$STATUS" 130 "exit status after Ctrl-C"
}

# A producer that fails when it is called again fails the reader that
# needed it, naming both.  os.exit there is the producer's, not the
# reader's, and flow goes on to its summary.
test_a_producer_that_fails_when_called_again_fails_its_reader() {
    write pipeline.lua <<'L'
return pipeline{
  node{ name = "make", outputs = "t", func = function()
          if io.open("fail") then error("the source is gone") end
          if io.open("quit") then os.exit(4) end
          return string.rep("z", 2000) end },
  node{ name = "use", inputs = { "t", "params:k" }, outputs = "u", func = function(t, k) return #t .. k end },
}
L
    write conf/base/parameters.yml <<'Y'
k: one
Y
    run_flow 0 run
    touch fail
    run_flow 1 run --params k=two
    contains "$ERR" "step 'use': input 't' is not kept between runs, and calling its producer 'make' (up to date) again for it failed: pipeline.lua:3: the source is gone"
    no_crash
    rm fail; touch quit
    run_flow 1 run --params k=three
    contains "$ERR" "step 'make' called os.exit(4) when it was called again for step 'use' (its value is not kept between runs), which a step cannot do"
    contains "$ERR" "flow: failed: use"
    no_crash
}

# A producer whose large value was not kept, given a timeout since (or
# retries, a pool, metrics): called again it would run outside its limits,
# so such a step keeps its values; its record does not stand, it runs again
# (in the engine's check as in Lua's) and keeps the value.
test_a_producer_that_now_keeps_its_values_runs_again() {
    write pipeline.lua <<'L'
return pipeline{
  node{ name = "mk", outputs = "big", func = function() io.open("ran_mk", "w"):close() return string.rep("z", 2000) end },
  node{ name = "use", inputs = "big", outputs = "u", func = function(b) io.open("ran_use", "w"):close() return #b end },
}
L
    run_flow 0 run
    contains "$(grep '"step":"mk"' .flow/runs/latest/journal.jsonl)" '"recompute":true'
    sed -i 's/name = "mk", /name = "mk", timeout = "1m", /' pipeline.lua
    rm -f ran_*
    run_flow 0 run
    equals "$(ran)" "mk use " "the producer, and its reader"
    not_contains "$(grep '"step":"mk"' .flow/runs/latest/journal.jsonl)" '"recompute":true'
    rm -f ran_*
    run_flow 0 run --explain
    equals "$(ran)" "" "the run after"
    sed -i 's/timeout = "1m", /retries = 2, /' pipeline.lua
    run_flow 0 run --explain
    equals "$(ran)" "" "retries: its value is kept already"
    # the same through the Lua check, which says why
    rm -rf .flow
    sed -i 's/retries = 2, //' pipeline.lua
    run_flow 0 run
    sed -i 's/name = "mk", /name = "mk", timeout = "1m", /' pipeline.lua
    run_flow 0 run --explain
    contains "$ERR" "explain: mk runs: its output 'big' was not kept between runs, and the step keeps its values now"
}

# A function value a step reads is not kept: nothing reruns.  One that no
# step reads (a result) cannot be cached: its step always runs, and
# --explain says why.
test_function_outputs_that_cannot_be_cached_always_rerun() {
    write pipeline.lua <<'L'
return pipeline{
  node{ name = "fn", outputs = "f", func = function() io.open("ran_fn", "w"):close() return function() return 1 end end },
  node{ name = "call", inputs = "f", outputs = "r", func = function(f) io.open("ran_call", "w"):close() return f() end },
  node{ name = "fn_result", outputs = "g", func = function() io.open("ran_fn_result", "w"):close() return print end },
}
L
    run_flow 0 run
    rm -f ran_*
    run_flow 0 run --explain
    equals "$(ran)" "fn_result " "uncacheable"
    contains "$ERR" "explain: call is up to date"
    contains "$ERR" "its output 'g' cannot be cached (value is a function)"
}

test_journal_records_the_run() {
    incr_project
    run_flow 0 run --params b=4
    j=.flow/runs/latest/journal.jsonl
    [ -f "$j" ] || { echo "no journal at $j"; return 1; }
    first=$(head -n 1 "$j")
    contains "$first" '"event":"run_start"'
    contains "$first" '"args":["--params","b=4"]'
    contains "$(cat "$j")" '"event":"step_end"'
    contains "$(cat "$j")" '"status":"ok"'
    contains "$(tail -n 1 "$j")" '"event":"run_end"'
    [ -f .flow/cache/state.log ] || { echo "no state.log"; return 1; }
    grep -qx "$(readlink .flow/runs/latest)" .flow/cache/merged_runs || { echo "journal not listed merged"; return 1; }
}

test_state_is_rebuilt_from_an_unmerged_journal() {
    incr_project
    run_flow 0 run
    # as if flow had been killed before writing state.log
    rm -f .flow/cache/state.log .flow/cache/merged_runs
    rm -f ran_*
    run_flow 0 run
    equals "$(ran)" "" "after state.log was lost"
}

test_an_old_state_json_is_read_once_and_replaced() {
    incr_project
    run_flow 0 run
    # state.json as flow wrote it before state.log, rebuilt from the journal
    python3 -c '
import glob, json
steps = {}
for path in glob.glob(".flow/runs/*/journal.jsonl"):
    for line in open(path):
        ev = json.loads(line)
        if ev.get("event") == "step_end" and ev.get("status") == "ok":
            steps[ev["step"]] = {"fp": ev["fingerprint"], "parts": ev["parts"], "outputs": ev["outputs"], "time": ev["time"]}
json.dump({"version": 1, "steps": steps}, open(".flow/cache/state.json", "w"))
'
    rm -f .flow/cache/state.log ran_*
    run_flow 0 run
    equals "$(ran)" "" "steps run after the migration"
    [ -f .flow/cache/state.log ] || { echo "no state.log"; return 1; }
    [ ! -e .flow/cache/state.json ] || { echo "state.json is still there"; return 1; }
    run_flow 0 run
    equals "$(ran)" "" "steps run after the migration, twice"
}

# A run writes its records to state.log as its steps end (64 KiB at a
# time), not only at its end: killed while its last step runs, it leaves
# whole records of the steps that ended, and the journal the rest, so the
# next run runs only the step that was killed.
# A step that runs a pipeline of its own (flow.run in its function) shares
# the project's state with the run around it: the inner run's records are
# kept (the outer run's save wrote over them), and a kill of the outer run
# later loses none of the steps it finished (the inner run folded the outer
# run's half-written journal and marked it merged).
test_a_run_inside_a_step_shares_the_state() {
    write pipeline.lua <<'L'
local flow = require("flow")
local function log(s) local f = io.open("exec.log", "a") f:write(s, "\n") f:close() end
local inner = pipeline{ node{ name = "inner1", outputs = "i1", func = function() log("inner1") return 41 end } }
flow.register("inner", inner)
return pipeline{
  node{ name = "s1", outputs = "a", func = function() log("s1") return 1 end },
  node{ name = "nest", inputs = "a", outputs = "b", func = function(a) log("nest") return a + flow.run(inner, {}).outputs.i1 end },
  node{ name = "after", inputs = "b", outputs = "c", func = function(b) log("after") return b + 1 end },
  node{ name = "slow", inputs = { c = "c" }, outputs = { o = "d" },
        command = { "sh", "-c", "touch slow_started; sleep ${params.nap}; echo x > $0", "${outputs.o}" } },
}
L
    write conf/base/parameters.yml <<'Y'
nap: 0
Y
    run_flow 0 run
    run_flow 0 run --pipeline inner --explain
    contains "$ERR" "explain: inner1 is up to date"
    rm -rf .flow exec.log slow_started
    run_flow_bg run -q --params nap=30
    for i in $(seq 300); do [ -e slow_started ] && break; sleep 0.1; done
    kill -9 "$FLOW_PID"; wait "$FLOW_PID" 2>/dev/null || true
    equals "$(tr '\n' ' ' < exec.log)" "s1 nest inner1 after " "the killed run's steps"
    rm -f exec.log
    run_flow 0 run --params nap=0
    equals "$(cat exec.log 2>/dev/null)" "" "steps run again after the kill"
}

test_a_killed_run_leaves_whole_records_behind() {
    write pipeline.lua <<'L'
local nodes = {}
for i = 1, 600 do
  nodes[#nodes + 1] = node { name = "v" .. i, func = function() return string.rep("x", 40) .. i end,
                             outputs = { "d" .. i } }
end
nodes[#nodes + 1] = node { name = "last", inputs = { "d600" }, outputs = { "done" },
                           command = "sleep ${params.nap}; echo > ${outputs.done}" }
return pipeline(nodes)
L
    write conf/base/parameters.yml <<'Y'
nap: 0
Y
    run_flow_bg run -q --params nap=30
    for i in $(seq 300); do
        grep -q '"step":"last"' .flow/runs/latest/journal.jsonl 2>/dev/null && break
        sleep 0.1
    done
    kill -9 "$FLOW_PID"; wait "$FLOW_PID" 2>/dev/null || true
    [ -s .flow/cache/state.log ] || { echo "the killed run wrote no records"; return 1; }
    python3 - <<'P' || return 1
import struct
d = open(".flow/cache/state.log", "rb").read()
assert d[:8] == b"FLOWST01", d[:8]
p, n = 8, 0
while p < len(d):
    mark, length, _ = struct.unpack_from("<III", d, p)
    assert mark == 0x31525346 and p + 12 + length <= len(d), ("a torn record at", p)
    p, n = p + 12 + length, n + 1
assert n >= 150, n
P
    run_flow 0 run -v --params nap=0
    equals "$(printf '%s\n' "$ERR" | grep -c '  done  ')" 1 "steps run after the kill"
    contains "$ERR" "  done     last"
    not_contains "$ERR" "damaged"
}

test_a_torn_state_tail_is_ignored() {
    incr_project
    run_flow 0 run
    rm -f ran_*
    # a run killed in the middle of appending its records
    printf 'FSR1\377\377\000\000garbage' >> .flow/cache/state.log
    run_flow 0 run --params b=5
    equals "$(ran)" "ab b " "steps run with a torn state file"
    rm -f ran_*
    run_flow 0 run --params b=5
    equals "$(ran)" "" "steps run after the torn tail was rewritten"
}

test_second_run_in_the_same_project_is_refused() {
    write pipeline.lua <<'L'
return pipeline{ node{ name = "wait", outputs = "w", command = "sleep 2; touch ${outputs.w}" } }
L
    "$FLOW" run -q >/dev/null 2>&1 &
    pid=$!
    for _ in $(seq 50); do [ -s .flow/lock ] && break; sleep 0.05; done
    run_flow 2 run
    contains "$ERR" "another flow run (pid $pid) is using this project"
    wait $pid
}

# Runs at once (flow.spawn) keep their commands' outputs in their own run
# directory: flow clean keeps a run whose directory holds an output a record
# uses, and what was up to date stays so.
test_clean_keeps_the_runs_that_hold_outputs_in_use() {
    write driver.lua <<'L'
local flow = require("flow")
local function p(tag) return pipeline{
  node{ name = "train_" .. tag, outputs = "model_" .. tag,
        command = { "sh", "-c", 'echo train $0 >> exec.log; echo "m=$0" > "$1"', tag, "${outputs.model_" .. tag .. "}" } },
} end
flow.wait_all{ flow.spawn(flow.run, p("a"), {}), flow.spawn(flow.run, p("b"), {}) }
L
    run_flow 0 run driver.lua
    run_flow 0 run driver.lua
    rm -f exec.log
    run_flow 0 clean --runs-older-than 0s
    run_flow 0 run driver.lua
    equals "$(cat exec.log 2>/dev/null)" "" "steps run again after flow clean"
}

test_clean_removes_old_runs_and_unused_cache_entries() {
    write pipeline.lua <<'L'
return pipeline{
  -- (its second output, which no step reads, keeps its large value)
  node{ name = "big", inputs = "params:n", outputs = { "b", "n" },
        func = function(n) local s = string.rep("x", 1000 + n) return s, #s end },
  node{ name = "len", inputs = "b", outputs = "l", func = function(b) io.open("ran_len", "w"):close() return #b end },
}
L
    write conf/base/parameters.yml <<'Y'
n: 1
Y
    run_flow 0 run
    run_flow 0 run --params n=2
    equals "$(ls .flow/cache/values | wc -l)" 2 "cached values"
    sleep 1.1
    run_flow 0 run --params n=2
    run_flow 0 clean -n --runs-older-than 1s --cache
    contains "$ERR" "would remove 2 runs older than 1s"
    equals "$(ls .flow/runs | grep -vc latest)" 3 "runs after a dry run"
    run_flow 0 clean --runs-older-than 1s --cache
    contains "$ERR" "removed 2 runs older than 1s"
    contains "$ERR" "1 unused cached value"
    equals "$(ls .flow/runs | grep -vc latest)" 1 "runs left"
    equals "$(ls .flow/cache/values | wc -l)" 1 "cached values left"
    rm -f ran_*
    run_flow 0 run --params n=2
    equals "$(ran)" "" "after clean, still up to date"
    run_flow 2 clean --runs-older-than soon
    contains "$ERR" "--runs-older-than needs a duration like 30d"
    run_flow 2 catalog
    contains "$ERR" "'flow catalog' needs a command"
}
