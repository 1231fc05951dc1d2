# t_uptodate.sh — the engine's up-to-date check of command and Lua steps
# (engine/uptodate.c) against the stdlib's (flow.incremental): the engine
# passes a step only when the fingerprint it computes is byte for byte the
# one the stdlib recorded, so a no-op rerun in which the engine passes every
# command step of many shapes shows the two computations agree on each;
# a change the engine must notice leaves the step (and what reads it) to
# the stdlib, which reruns it.  (The project below has one Lua step; the
# Lua steps of many shapes are further down.)

# Command steps of many shapes: argv, shell line, cwd, env, ${params.} in
# argv and shell, params: and parameters inputs, project files named plainly,
# as --opt=path and by absolute path, distribution, several outputs, one
# dataset read twice (one entry in the fingerprint), catalog
# types (json, text, file, folder; a raw catalog input), a memory input made
# by a Lua step, inputs from other command steps.
shapes_project() {
    write conf/base/parameters.yml <<'Y'
lr: 0.5
model: {depth: 3, name: tiny}
n: 2
Y
    write conf/base/catalog.yml <<'Y'
raw: {type: text, path: data/raw.txt}
table: {type: json, path: data/table.json}
report: {type: text, path: data/report.txt}
blob: {type: file, path: data/blob.bin}
plots: {type: folder, path: data/plots}
Y
    mkdir -p data src conf/x
    echo "raw rows" > data/raw.txt
    write src/tool.sh <<'S'
#!/bin/sh
# reads its arguments, writes its last one
for last; do :; done
cat "$@" > /dev/null 2>&1
echo made > "$last"
S
    write conf/x/settings.yaml <<'S'
k: v
S
    write pipeline.lua <<'L'
return pipeline{
  node{ name = "argv", inputs = { r = "raw" }, outputs = { o = "a1" },
        command = { "sh", "src/tool.sh", "${inputs.r}", "--lr=${params.lr}", "${outputs.o}" } },
  node{ name = "argv_touch", inputs = { r = "raw", again = "raw" }, outputs = { o = "a2" },
        command = { "touch", "${outputs.o}" } },
  node{ name = "shell", inputs = { a = "a1", b = "a2" }, outputs = { o = "s1" },
        command = "sh src/tool.sh ${inputs.a} ${inputs.b} --config=conf/x/settings.yaml; echo ${params.model.name} > ${outputs.o}" },
  node{ name = "cwd", outputs = { o = "c1" },
        command = flow.command{ "sh", "-c", "touch \"../$0\"", "${outputs.o}", cwd = "src" } },
  node{ name = "env", inputs = { s = "s1" }, outputs = { o = "e1" },
        command = flow.command{ "sh", "-c", "echo $DEPTH > \"$0\"", "${outputs.o}", env = { DEPTH = "${params.model.depth}", K = "v" } } },
  node{ name = "params_in", inputs = { p = "params:n", all = "parameters", e = "e1" }, outputs = { o = "p1" },
        command = "touch ${outputs.o}" },
  node{ name = "abs", outputs = { o = "ab1" },
        command = { "sh", ROOT .. "/src/tool.sh", "${outputs.o}" } },
  node{ name = "many", inputs = { a = "a1" }, outputs = { t = "table", r = "report", b = "blob", p = "plots", x = "extra" },
        command = "echo '{\"k\": 1}' > ${outputs.t}; echo hi > ${outputs.r}; echo b > ${outputs.b}; touch ${outputs.p}/one.png; touch ${outputs.x}" },
  node{ name = "dist", inputs = { t = "table" }, outputs = { o = "d1" },
        command = distributed_job{ framework = "pytorch", num_nodes = 2 }(flow.command "touch ${outputs.o}") },
  node{ name = "lua_made", inputs = "report", outputs = "mem", func = function(r) return { text = r, n = 3 } end },
  node{ name = "reads_memory", inputs = { m = "mem", p = "plots" }, outputs = { o = "m1" },
        command = { "sh", "src/tool.sh", "${inputs.m}", "${inputs.p}", "${outputs.o}" } },
  node{ name = "last", inputs = { a = "m1", b = "d1", c = "p1", d = "ab1", e = "c1", f = "blob" }, outputs = { o = "z" },
        command = "touch ${outputs.o}" },
}
L
    sed -i "1i ROOT = \"$PWD\"" pipeline.lua
}

engine_line() { printf '%s\n' "$ERR" | grep 'up-to-date check:' || true; }

# A run, then a no-op rerun: a folder output's files were hashed in the
# same instant they were written, which the hash cache does not trust (the
# "racy git" rule), so this first rerun may leave 'many' to the stdlib.
first_runs() {
    run_flow 0 run
    contains "$ERR" "12 done"
    run_flow 0 run
    contains "$ERR" "0 done, 12 up to date"
}

# (And the run knew it before it began: it skips the collection of the
# script's garbage that it makes for steps that will run, runner.lua.)
test_engine_and_stdlib_agree_on_every_command_shape() {
    shapes_project
    first_runs
    FLOW_DEBUG_UPTODATE=1 run_flow 0 run
    contains "$ERR" "0 done, 12 up to date"
    equals "$(engine_line)" "flow: up-to-date check: 12 passed in the engine, 0 left to Lua" "every step passed in the engine"
    contains "$ERR" "flow: every step found up to date before the run"
}

test_a_changed_parameter_leaves_its_steps_to_the_stdlib() {
    shapes_project
    first_runs
    sed -i 's/lr: 0.5/lr: 0.25/' conf/base/parameters.yml
    FLOW_DEBUG_UPTODATE=1 run_flow 0 run
    # argv reads params.lr, params_in all parameters; what reads their outputs
    # is up to date (the same bytes: early cutoff)
    contains "$ERR" "2 done, 10 up to date"
    equals "$(engine_line)" "flow: up-to-date check: 10 passed in the engine, 2 left to Lua"
    not_contains "$ERR" "every step found up to date"
}

test_a_changed_named_file_or_input_reruns_what_reads_it() {
    shapes_project
    first_runs
    echo "# changed" >> conf/x/settings.yaml
    echo "more rows" >> data/raw.txt
    FLOW_DEBUG_UPTODATE=1 run_flow 0 run --explain
    contains "$ERR" "explain: shell runs: file 'conf/x/settings.yaml' changed"
    FLOW_DEBUG_UPTODATE=1 run_flow 0 run
    contains "$ERR" "0 done, 12 up to date"
}

test_a_changed_output_is_noticed() {
    shapes_project
    first_runs
    echo "edited" > data/report.txt
    touch -d '2001-01-01' src/tool.sh
    FLOW_DEBUG_UPTODATE=1 run_flow 0 run
    contains "$ERR" "1 done"
    equals "$(engine_line)" "flow: up-to-date check: 11 passed in the engine, 1 left to Lua"
    equals "$(cat data/report.txt)" "hi"
}

# The recorded outputs are stat-ed ahead of the check while the run is
# planned (engine/stat_prefetch.c), once the script has run: an output the
# script itself changes as it loads, well after the state file was read, is
# noticed and its step runs again.
test_an_output_the_script_changes_is_noticed() {
    write conf/base/catalog.yml <<'Y'
report: {type: text, path: data/report.txt}
Y
    write pipeline.lua <<'L'
if os.getenv("TAMPER") then
  local t = os.clock() + 0.3          -- the state file read, the outputs stat-ed meanwhile
  while os.clock() < t do end
  local f = assert(io.open("data/report.txt", "w"))
  f:write("tampered\n")
  f:close()
end
return pipeline{ node{ command = "echo made > ${outputs.report}", outputs = "report", name = "make" } }
L
    run_flow 0 run
    run_flow 0 run
    contains "$ERR" "0 done, 1 up to date"
    TAMPER=1 run_flow 0 run
    contains "$ERR" "1 done"
    equals "$(cat data/report.txt)" "made"
}

# Steps listed before the steps that make their inputs: the engine describes
# them producers first and decides each at once when its producers passed
# (engine/uptodate.c: utd_decide_early); one whose producer runs again
# waits, and is decided in the engine once that run's record is put.
test_steps_listed_before_their_producers_are_decided_in_the_engine() {
    write pipeline.lua <<'L'
return pipeline {
  node { name = "c", command = { "cp", "${inputs.b}", "${outputs.c}" }, inputs = { b = "b" }, outputs = { c = "c" } },
  node { name = "b", command = { "cp", "${inputs.a}", "${outputs.b}" }, inputs = { a = "a" }, outputs = { b = "b" } },
  node { name = "a", command = { "sh", "-c", "echo made > $0", "${outputs.a}" }, outputs = { a = "a" } },
}
L
    run_flow 0 run
    contains "$ERR" "3 done"
    FLOW_DEBUG_UPTODATE=1 run_flow 0 run
    contains "$ERR" "0 done, 3 up to date"
    equals "$(engine_line)" "flow: up-to-date check: 3 passed in the engine, 0 left to Lua"
    echo "edited" > .flow/data/a
    FLOW_DEBUG_UPTODATE=1 run_flow 0 run
    contains "$ERR" "1 done, 2 up to date"
    equals "$(engine_line)" "flow: up-to-date check: 2 passed in the engine, 1 left to Lua"
    equals "$(cat .flow/data/c)" "made"
}

# Lua steps of many shapes: upvalues (a number, a nested table), a script
# global, a project module, params: and parameters inputs, one dataset read
# twice, a value small enough to live in its record, a large one that
# other steps read (not kept: named by its producer's fingerprint), a large
# result cached in .flow/cache/values/, several outputs, a catalog json
# output, inputs from a command step, a function value a step reads (not
# kept either) and a function result that cannot be cached, whose step
# always reruns.
lua_project() {
    write conf/base/parameters.yml <<'Y'
lr: 0.5
n: 2
Y
    write conf/base/catalog.yml <<'Y'
tbl: {type: json, path: data/tbl.json}
Y
    write lib/helpers.lua <<'L'
return { twice = function(x) return 2 * x end }
L
    write pipeline.lua <<'L'
local scale = 3
local cfg = { depth = 2, names = { "a", "b" } }
GLOBAL_K = 7
local helpers = require("lib.helpers")
return pipeline{
  node{ name = "base", outputs = "b0", func = function() return 1 end },
  node{ name = "upv", inputs = "b0", outputs = "u1", func = function(b) return b * scale + cfg.depth end },
  node{ name = "glob", inputs = "u1", outputs = "g1", func = function(u) return u + GLOBAL_K end },
  node{ name = "mod", inputs = "g1", outputs = "m1", func = function(g) return helpers.twice(g) end },
  node{ name = "params", inputs = { x = "m1", again = "m1", lr = "params:lr", all = "parameters" }, outputs = "p1",
        func = function(t) return t.x + t.lr + t.all.n end },
  node{ name = "big", inputs = "p1", outputs = "big", func = function(p) return string.rep("x", 2000) .. p end },
  node{ name = "many", inputs = "big", outputs = { "m_a", "m_b" }, func = function(b) return #b, { t = b:sub(1, 3) } end },
  node{ name = "to_json", inputs = "m_b", outputs = "tbl", func = function(b) return b end },
  node{ name = "cmd", inputs = { t = "tbl" }, outputs = { o = "c1" }, command = "cp ${inputs.t} ${outputs.o}" },
  node{ name = "from_cmd", inputs = { "c1", "m_a" }, outputs = "f1", func = function(c, a) return #c + a end },
  node{ name = "fn_made", outputs = "fnval", func = function() return function() end end },
  node{ name = "reads_fn", inputs = "fnval", outputs = "r1", func = function(f) return type(f) end },
  node{ name = "big_result", inputs = "p1", outputs = "bigres", func = function(p) return string.rep("y", 2000) .. p end },
  node{ name = "uncacheable", outputs = "fnres", func = function() return function() end end },
}
L
}

test_engine_and_stdlib_agree_on_lua_steps() {
    lua_project
    run_flow 0 run
    contains "$ERR" "14 done"
    FLOW_DEBUG_UPTODATE=1 run_flow 0 run --explain
    # the function result is never cached: its step runs each time; the
    # function value a step reads is not kept, and its reader stands
    contains "$ERR" "explain: uncacheable runs: its output 'fnres' cannot be cached"
    contains "$ERR" "explain: reads_fn is up to date"
    FLOW_DEBUG_UPTODATE=1 run_flow 0 run
    contains "$ERR" "1 done, 13 up to date"
    equals "$(engine_line)" "flow: up-to-date check: 13 passed in the engine, 1 left to Lua"
    not_contains "$ERR" "every step found up to date"
    # only the large result has a file: the large value 'many' reads has none
    equals "$(ls .flow/cache/values | wc -l)" "1" "one value cached in a file"
}

test_lua_step_changes_reach_the_stdlib() {
    lua_project
    run_flow 0 run
    sed -i 's/^local scale = 3/local scale = 4/' pipeline.lua
    FLOW_DEBUG_UPTODATE=1 run_flow 0 run --explain
    contains "$ERR" "explain: upv runs: its code changed"
    contains "$ERR" "explain: glob runs: input 'u1' changed"
    contains "$ERR" "explain: to_json is up to date"       # the same value made again: early cutoff
    # a cached value edited behind flow's back is not trusted
    local f
    for f in .flow/cache/values/*; do echo "return 'edited'" > "$f"; done
    FLOW_DEBUG_UPTODATE=1 run_flow 0 run
    contains "$ERR" "the cached value of 'bigres' (output of step 'big_result') was damaged"
    contains "$ERR" "2 done, 12 up to date"          # big_result, and the function result
    FLOW_DEBUG_UPTODATE=1 run_flow 0 run
    equals "$(engine_line)" "flow: up-to-date check: 13 passed in the engine, 1 left to Lua"
}

# A step without a record (every step of a first run) gets its fingerprint
# and its record's parts from the engine's check (uptodate.c's
# short_parts_json), never from flow.incremental; --force makes the stdlib
# compute both for every step.  Per step, both runs' journals must say the
# same (the parts as JSON objects): two implementations of one rule, run
# side by side on steps of every shape (a step that read a value that could
# not be cached, whose hash is the run's own, would be left out).
fingerprints_of_runs() {
    python3 - "$@" <<'P'
import json, sys, glob
runs = sorted(p for p in glob.glob(".flow/runs/*/journal.jsonl") if "/latest/" not in p)
assert len(runs) == 2, runs
def ends(path):
    out = {}
    for line in open(path):
        ev = json.loads(line)
        if ev.get("event") == "step_end" and ev.get("status") == "ok":
            out[ev["step"]] = (ev["fingerprint"], ev["parts"])
    return out
engine, stdlib = ends(runs[0]), ends(runs[1])
skip = set(sys.argv[1:])
steps = sorted(set(engine) - skip)
assert steps and sorted(set(stdlib) - skip) == steps, (steps, sorted(stdlib))
for s in steps:
    assert engine[s] == stdlib[s], (s, engine[s], stdlib[s])
print(len(steps))
P
}

test_a_first_run_fingerprints_in_the_engine_as_the_stdlib_does() {
    shapes_project
    FLOW_DEBUG_UPTODATE=1 run_flow 0 run
    contains "$ERR" "12 done"
    # the memory input from a Lua step is uncacheable by nothing: every step is the engine's
    equals "$(engine_line)" "flow: up-to-date check: 0 passed in the engine, 0 left to Lua, 12 without a record"
    not_contains "$ERR" "every step found up to date"
    run_flow 0 run --force
    equals "$(fingerprints_of_runs)" "12" "every step's fingerprint and parts agree"
}

test_a_first_run_of_lua_steps_fingerprints_in_the_engine_as_the_stdlib_does() {
    lua_project
    FLOW_DEBUG_UPTODATE=1 run_flow 0 run
    contains "$ERR" "14 done"
    # values not kept are named by their producers' fingerprints: every
    # step is the engine's, readers of such values too
    equals "$(engine_line)" "flow: up-to-date check: 0 passed in the engine, 0 left to Lua, 14 without a record"
    run_flow 0 run --force
    equals "$(fingerprints_of_runs)" "14" "every step's fingerprint and parts agree"
}

# Steps made by one function expression in a loop, and commands of one
# command line: the first of each goes through the stdlib (which hashes the
# prototype, or the command's text, and finds its parameters), every other
# one is described in C (lua/l_uptodate.c, chk:describe) from the hasher's,
# the command memo's, the parameters' and the catalog's tables.  Shapes: no
# upvalue, only _ENV (math), a parameter read twice and another, outputs
# declared in the catalog (json, versioned) and matched by a pattern, no
# output, several (their parts sorted); an argv command naming a project
# file, a shell line, ${params.} keys renamed by a namespace and by
# `parameters =`.  The stdlib's: an upvalue, a command with env.  The engine's fingerprints and
# parts must be the stdlib's (--force), and a rerun passes every step in
# the engine.
loop_project() {
    write conf/base/parameters.yml <<'Y'
lr: 0.5
n: 2
nt: { k: 5 }
Y
    write conf/base/catalog.yml <<'Y'
j2: {type: json, path: data/j2.json}
v3: {type: json, path: data/v3.json, versioned: true}
"{name}_pat": {type: json, path: "data/{name}.json"}
Y
    write pipeline.lua <<'L'
local steps = {}
local function add(t) steps[#steps + 1] = node(t) end
for k = 1, 3 do
  add{ name = "plain" .. k, outputs = k == 2 and "j2" or k == 3 and "v3" or "p1", func = function() return 1 end }
  add{ name = "env" .. k, inputs = k == 1 and "p1" or k == 2 and "j2" or "v3", outputs = "e" .. k,
       func = function(x) return math.floor(x * 2) end }
  add{ name = "par" .. k, inputs = { "e" .. k, "params:lr", "params:lr", "params:n" }, outputs = "q" .. k .. "_pat",
       func = function(x, a, b, n) return x + a + b + n end }
  add{ name = "sink" .. k, inputs = "q" .. k .. "_pat", func = function(x) end }
  add{ name = "two" .. k, inputs = "e" .. k, outputs = { "tb" .. k, "ta" .. k, "t" .. k .. "_pat" },
       func = function(x) return x, x, x end }
  add{ name = "upv" .. k, inputs = "ta" .. k, outputs = "u" .. k, func = function(x) return x + k end }
  add{ name = "cmd" .. k, inputs = { i = "e" .. k }, outputs = { o = "c" .. k },
       command = { "sh", "tool.sh", "${inputs.i}", "${outputs.o}", "${params.n}" } }
  add{ name = "shl" .. k, inputs = { i = "c" .. k, lr = "params:lr" }, outputs = { o = "s" .. k },
       command = "cat ${inputs.i} > ${outputs.o}; echo ${params.lr} ${params.n} >> ${outputs.o}" }
  add{ name = "env" .. k .. "c", inputs = { i = "s" .. k }, outputs = { o = "x" .. k }, env = { K = "1" },
       command = "cp ${inputs.i} ${outputs.o}" }
end
local inner = pipeline{
  node{ name = "nsc1", outputs = { o = "n1" }, command = { "sh", "-c", "echo $0 > $1", "${params.k}", "${outputs.o}" } },
  node{ name = "nsc2", outputs = { o = "n2" }, command = { "sh", "-c", "echo $0 > $1", "${params.k}", "${outputs.o}" } } }
steps[#steps + 1] = pipeline{ inner, namespace = "ns", parameters = { k = "n" } }
steps[#steps + 1] = pipeline{ inner, namespace = "nt" }
return pipeline(steps)
L
    write tool.sh <<'S'
cat "$1" > "$2"; echo "$3" >> "$2"
S
}

test_steps_of_one_function_are_described_in_c_as_the_stdlib_would() {
    loop_project
    FLOW_DEBUG_UPTODATE=1 run_flow 0 run
    contains "$ERR" "31 done"
    # plain, env, par, sink and two 2 and 3 (10), cmd and shl 2 and 3 (4),
    # ns.nsc2 and nt.nsc2 (nt.nsc1 reads nt.k, not hashed before it)
    contains "$ERR" "flow: described in C: 16 steps"
    run_flow 0 run --force
    equals "$(fingerprints_of_runs)" "31" "every step's fingerprint and parts agree"
    FLOW_DEBUG_UPTODATE=1 run_flow 0 run
    contains "$ERR" "31 up to date"
    contains "$ERR" "flow: described in C: 16 steps"
    equals "$(engine_line)" "flow: up-to-date check: 31 passed in the engine, 0 left to Lua"
    # what the described steps read reaches them: a parameter, a project file
    sed -i 's/^lr: 0.5/lr: 0.25/' conf/base/parameters.yml
    echo '# changed' >> tool.sh
    FLOW_DEBUG_UPTODATE=1 run_flow 0 run --explain
    contains "$ERR" "explain: par2 runs: parameter 'lr' changed"
    contains "$ERR" "explain: shl3 runs: parameter 'lr' changed"
    contains "$ERR" "explain: cmd3 runs: file 'tool.sh' changed"
    contains "$ERR" "explain: sink3 runs: input 'q3_pat' changed"
    FLOW_DEBUG_UPTODATE=1 run_flow 0 run
    equals "$(engine_line)" "flow: up-to-date check: 31 passed in the engine, 0 left to Lua"
}

# An input's catalog type is in its readers' fingerprints: the same bytes
# read as text or as JSON are another value.  Three steps of one function
# expression read three declared datasets (the first through the stdlib,
# the others described in C); a memory value's reader keeps its fingerprint.
test_a_changed_input_type_reruns_its_readers() {
    write conf/base/catalog.yml <<'Y'
r1: {type: text, path: data/r1.json}
r2: {type: text, path: data/r2.json}
r3: {type: text, path: data/r3.json}
o1: {type: text, path: data/o1.txt}
o2: {type: text, path: data/o2.txt}
o3: {type: text, path: data/o3.txt}
Y
    mkdir -p data
    for k in 1 2 3; do echo '[1, 2]' > data/r$k.json; done
    write pipeline.lua <<'L'
local steps = { node{ name = "m", outputs = "mem", func = function() return 1 end },
                node{ name = "usem", inputs = "mem", outputs = "mem2", func = function(x) return x end } }
for k = 1, 3 do
  steps[#steps + 1] = node{ name = "c" .. k, inputs = "r" .. k, outputs = "o" .. k, func = function(r) return type(r) end }
end
return pipeline(steps)
L
    run_flow 0 run
    equals "$(cat data/o3.txt)" "string" "o3"
    FLOW_DEBUG_UPTODATE=1 run_flow 0 run
    contains "$ERR" "flow: described in C: 2 steps"
    equals "$(engine_line)" "flow: up-to-date check: 5 passed in the engine, 0 left to Lua"
    sed -i 's/type: text, path: data\/r/type: json, path: data\/r/' conf/base/catalog.yml
    FLOW_DEBUG_UPTODATE=1 run_flow 0 run
    contains "$ERR" "3 done, 2 up to date"
    equals "$(engine_line)" "flow: up-to-date check: 2 passed in the engine, 3 left to Lua"
    equals "$(cat data/o1.txt) $(cat data/o2.txt) $(cat data/o3.txt)" "table table table" "the outputs"
    sed -i 's/type: json, path: data\/r/type: text, path: data\/r/' conf/base/catalog.yml
    run_flow 0 run --explain
    for k in 1 2 3; do
        contains "$ERR" "explain: c$k runs: its outputs (names, types or paths) or the catalog types of its inputs changed"
    done
    contains "$ERR" "explain: usem is up to date"
}

# A script that sets its locale leaves the collation at C's: Lua compares
# strings with strcoll, and under de_DE.UTF-8's collation table.sort ordered
# what the stdlib hashes (a table's items, a command's env) and the
# catalog's patterns otherwise than under C's.  The step `cased` reads a
# parameter table and has outputs whose names that collation orders
# otherwise than the bytes (a _b B b_x against B _b a b_x).  The stdlib under os.setlocale("de_DE.UTF-8") (--force) gives
# every step the fingerprint and parts the engine gave it without, and a
# rerun under it is a no-op described in C as before.  The output parts are
# sorted by their bytes in any case (core.sort_bytes, and the engine in C):
# that order is checked first, NUL bytes, prefixes and high bytes included.
test_a_locale_of_the_script_changes_no_fingerprint() {
    de_locale || return 1
    write order.lua <<'L'
local t = { "b", "a\0z", "a", "ab", "\255", "A", "a\0" }
require("flow.core").sort_bytes(t)
for i, v in ipairs(t) do t[i] = (v:gsub("%z", "0"):gsub("\255", "FF")) end
print("order", table.concat(t, " "))
print("refused", pcall(require("flow.core").sort_bytes, { "a", 1 }))
return pipeline{}
L
    run_flow 0 run order.lua
    contains "$OUT" "order	A a a0 a0z ab b FF"
    contains "$OUT" "refused	false"
    rm -rf .flow order.lua
    loop_project
    sed -i 's/^return pipeline(steps)$/add{ name = "cased", inputs = { "e1", "params:mixed" }, outputs = { "b_x", "B", "a", "_b" },\n     func = function(x) return x, x, x, x end }\n&/' pipeline.lua
    echo 'mixed: { B: 1, a: 2, _b: 3, b_x: 4 }' >> conf/base/parameters.yml
    FLOW_DEBUG_UPTODATE=1 run_flow 0 run
    contains "$ERR" "32 done"
    sed -i '1i assert(os.setlocale("de_DE.UTF-8"), "no de_DE.UTF-8 locale") do local t = { "b_x", "B", "a", "_b" }; table.sort(t); assert(table.concat(t, " ") == "B _b a b_x" and os.setlocale(nil, "collate") == "C" and os.setlocale(nil, "time") == "de_DE.UTF-8", "table.sort under de_DE.UTF-8: " .. table.concat(t, " ")) end' pipeline.lua
    LOCPATH=$PWD/loc run_flow 0 run --force
    equals "$(fingerprints_of_runs)" "32" "every step's fingerprint and parts agree"
    LOCPATH=$PWD/loc FLOW_DEBUG_UPTODATE=1 run_flow 0 run
    contains "$ERR" "32 up to date"
    contains "$ERR" "flow: described in C: 16 steps"
    write set.lua <<'L'
os.setlocale("de_DE.UTF-8", "collate")
L
    LOCPATH=$PWD/loc run_flow 2 run set.lua
    contains "$ERR" 'set.lua:1: os.setlocale: flow keeps the "collate" category at "C"'
}

# The checker goes to sched.run in its options, nowhere else: a run that
# raises leaves nothing behind in the registry, so a driver script that
# catches the error and runs again leaks nothing.
test_the_check_goes_with_the_run_and_nothing_is_left_when_it_raises() {
    write driver.lua <<'L'
local flow = require("flow")
local sched = require("flow.sched")
local function entries()
  local n = 0
  for k, v in pairs(debug.getregistry()) do
    if type(k) == "userdata" and type(v) == "userdata" then n = n + 1 end
  end
  return n
end
local p = pipeline{ node{ name = "a", outputs = { o = "out" }, command = "echo hi > ${outputs.o}" } }
assert(flow.run(p).status == "ok")
local before, during, check = entries()
local real = sched.run
sched.run = function(_, opts) during, check = entries(), opts.check; error("scheduler broke", 0) end
local ok, err = pcall(flow.run, p)
sched.run = real
print(string.format("ok=%s err=%s check=%s registered=%d left=%d", tostring(ok), err,
                    type(check) == "userdata" and type(check.no_record), during - before, entries() - before))
L
    run_flow 0 run driver.lua
    contains "$OUT" "ok=false err=scheduler broke check=function registered=0 left=0"
}
