# t_outputs.sh — outputs and the cache are what they claim: cached values
# are checked against their hash, every dataset has a file of its own, and an
# output never destroys an input.

# A producer whose value is big enough to be cached in its own file, and a
# consumer that sums it; the consumer reruns when parameter k changes.  (The
# producer's second output, a result no step reads, makes it keep its values:
# a large value only steps read is not kept at all.)
cached_value_pipeline() {
    write pipeline.lua <<'L'
local function make()
  local t = {}
  for i = 1, 300 do t[i] = 1 end
  return t, #t
end
local function total(t, k)
  if io.open("fail") then error("asked to fail") end
  local s = 0
  for _, v in ipairs(t) do s = s + v end
  return s .. " " .. k
end
return pipeline{
  node{ func = make, outputs = { "ones", "count" }, name = "make" },
  node{ func = total, inputs = { "ones", "params:k" }, outputs = "sum", name = "total" },
}
L
    write conf/base/catalog.yml <<'Y'
sum: {type: text, path: sum.txt}
Y
    write conf/base/parameters.yml <<'Y'
k: 1
Y
}

the_cached_value() {
    local files=(.flow/cache/values/*)
    [ ${#files[@]} = 1 ] && [ -f "${files[0]}" ] || { echo "expected one cached value file, got: ${files[*]}"; return 1; }
    VALUE=${files[0]}
}

test_an_edited_cached_value_is_recomputed() {
    cached_value_pipeline
    run_flow 0 run
    equals "$(cat sum.txt)" "300 1"
    the_cached_value
    sed -i '0,/1/s//7/' "$VALUE"                 # one digit changed
    run_flow 0 run --params k=2
    equals "$(cat sum.txt)" "300 2" "the consumer's result"
    contains "$ERR" "the cached value of 'ones' (output of step 'make') was damaged"
    contains "$ERR" "done     make"
    the_cached_value
    equals "$(cache_hash "$VALUE")" "$(basename "$VALUE")" "the rewritten value's hash"
}

cache_hash() { sha256sum "$1" | cut -d' ' -f1; }

test_a_truncated_cached_value_is_recomputed_on_resume() {
    cached_value_pipeline
    touch fail
    run_flow 1 run
    the_cached_value
    truncate -s 10 "$VALUE"
    rm fail
    run_flow 0 run --resume
    equals "$(cat sum.txt)" "300 1"
    contains "$ERR" "was damaged"
    no_crash
    run_flow 0 run
    contains "$ERR" "up to date"
}

test_a_damaged_inline_value_is_recomputed() {
    write pipeline.lua <<'L'
return pipeline{
  node{ func = function() return 41 end, outputs = "n", name = "make" },
  node{ func = function(n, k) return (n + 1) .. " " .. k end, inputs = { "n", "params:k" }, outputs = "r", name = "use" },
}
L
    write conf/base/catalog.yml <<'Y'
r: {type: text, path: r.txt}
Y
    write conf/base/parameters.yml <<'Y'
k: 1
Y
    run_flow 0 run
    sed -i 's/return 41/return 99/' .flow/cache/state.log
    grep -aq 'return 99' .flow/cache/state.log || { echo "the inline value was not where expected"; cat -v .flow/cache/state.log; return 1; }
    run_flow 0 run --params k=2
    equals "$(cat r.txt)" "42 2"
    contains "$ERR" "was damaged"
}

# ---- every dataset has a file of its own -----------------------------------

test_datasets_named_alike_get_different_files() {
    write pipeline.lua <<'L'
return pipeline{
  node{ func = function() return "slash", "underscore" end, outputs = { "m/n", "m_n" }, name = "make" },
  node{ command = "cat ${inputs.a} ${inputs.b} > ${outputs.both}", inputs = { a = "m/n", b = "m_n" },
        outputs = { both = "both" }, name = "join" },
  node{ command = "echo one > ${outputs.x}; echo two > ${outputs.y}", outputs = { x = "c/d", y = "c_d" },
        name = "two" },
  node{ command = "cat ${inputs.x} ${inputs.y} > ${outputs.z}", inputs = { x = "c/d", y = "c_d" },
        outputs = { z = "both2" }, name = "read" },
}
L
    run_flow 0 run
    equals "$(cat .flow/data/both)" "slashunderscore"
    equals "$(cat .flow/data/both2)" "$(printf 'one\ntwo')"
    [ -f .flow/data/m%2Fn.txt ] && [ -f .flow/data/m_n.txt ] || { ls -a .flow/data; return 1; }
}

test_names_with_control_characters_are_refused_where_written() {
    write pipeline.lua <<'L'
local function f() return 1 end
return pipeline{
  node{ func = f, outputs = "a\0b", name = "x" },
}
L
    run_flow 2 run
    contains "$ERR" "pipeline.lua:3: node: outputs: 'a\\0b' contains a control character"
    write pipeline.lua <<'L'
local function f(x) return x end
return pipeline{
  node{ func = f, outputs = "a", name = "x" },
  node{ func = f, inputs = { "a" }, outputs = { "b\nc" }, name = "y" },
}
L
    run_flow 2 run
    contains "$ERR" "pipeline.lua:4: node: outputs: 'b\\10c' contains a control character"
    write pipeline.lua <<'L'
local function f() return 1 end
return pipeline{
  node{ func = f, outputs = "a", name = "x\0y" },
}
L
    run_flow 2 run
    contains "$ERR" "pipeline.lua:3: node: name: 'x\\0y' contains a control character"
    write pipeline.lua <<'L'
local function f() return 1 end
local p = pipeline{ node{ func = f, outputs = "a", name = "x" } }
local q = pipeline{ p, namespace = "n\0s" }
return q
L
    run_flow 2 run
    contains "$ERR" "pipeline.lua:3: pipeline: namespace: 'n\\0s' contains a control character"
}

test_two_catalog_entries_with_one_path_are_an_error() {
    write pipeline.lua <<'L'
return pipeline{
  node{ func = function() return "a" end, outputs = "first", name = "one" },
  node{ func = function() return "b" end, outputs = "second", name = "two" },
}
L
    write conf/base/catalog.yml <<'Y'
first: {type: text, path: data/out.txt}
second: {type: text, path: ./data//out.txt}
Y
    run_flow 2 run
    contains "$ERR" "catalog entry 'first' (conf/base/catalog.yml:1) and catalog entry 'second' (conf/base/catalog.yml:2) are both stored at"
    [ ! -e data/out.txt ] || { echo "a step ran"; return 1; }
}

# One file reached through a symbolic link to a directory is still one file.
test_two_entries_with_one_path_through_a_linked_directory_are_an_error() {
    write pipeline.lua <<'L'
return pipeline{
  node{ func = function() return "a" end, outputs = "first", name = "one" },
  node{ func = function() return "b" end, outputs = "second", name = "two" },
}
L
    write conf/base/catalog.yml <<'Y'
first: {type: text, path: data/out.txt}
second: {type: text, path: link/out.txt}
Y
    mkdir data
    ln -s data link
    run_flow 2 run
    contains "$ERR" "catalog entry 'first' (conf/base/catalog.yml:1) and catalog entry 'second' (conf/base/catalog.yml:2) are both stored at"
    [ ! -e data/out.txt ] || { echo "a step ran"; return 1; }
}

# A dataset inside a folder dataset would be deleted when the folder is committed.
test_an_entry_inside_a_folder_entry_is_an_error() {
    write pipeline.lua <<'L'
return pipeline{
  node{ func = function() return "a" end, outputs = "first", name = "one" },
  node{ func = function() local d = os.tmpname() os.remove(d) os.execute("mkdir " .. d) return d end,
        outputs = "dir", name = "two" },
}
L
    write conf/base/catalog.yml <<'Y'
first: {type: text, path: data/out.txt}
dir: {type: folder, path: data}
Y
    run_flow 2 run
    contains "$ERR" "catalog entry 'first' (conf/base/catalog.yml:1) is stored at data/out.txt, inside the folder of catalog entry 'dir' (conf/base/catalog.yml:2)"
    [ ! -e data ] || { echo "a step ran"; return 1; }
}

test_a_pattern_and_an_entry_with_one_path_are_an_error() {
    write pipeline.lua <<'L'
return pipeline{
  node{ func = function() return "a" end, outputs = "a_metrics", name = "one" },
  node{ func = function() return "b" end, outputs = "report", name = "two" },
}
L
    write conf/base/catalog.yml <<'Y'
"{name}_metrics": {type: text, path: "data/{name}.txt"}
report: {type: text, path: data/a.txt}
Y
    run_flow 2 run
    contains "$ERR" "catalog entry 'report' (conf/base/catalog.yml:2) and catalog entry 'a_metrics' (conf/base/catalog.yml:1)"
}

test_a_value_file_and_a_command_output_with_one_name_are_an_error() {
    write pipeline.lua <<'L'
return pipeline{
  node{ func = function() return { 1 } end, outputs = "a", name = "value" },
  node{ command = "cat ${inputs.a} > ${outputs.o}", inputs = { a = "a" }, outputs = { o = "a.json" }, name = "cmd" },
}
L
    run_flow 2 run
    contains "$ERR" "dataset 'a' and dataset 'a.json' are both stored at .flow/data/a.json"
}

# The files flow keeps in .flow/data for commands are checked in C
# (lua/data_files.c) when the catalog has no patterns, and by check_paths's
# Lua loop when it has one: each clash here gets one message both ways (an
# unused pattern sends it the Lua way), and a pipeline without one runs both
# ways: "m/n" and "m%2Fn" are kept apart (as m%2Fn and m%252Fn), and a value
# the catalog keeps at its own path (v) takes no file there.
test_data_file_clashes_are_found_alike_with_and_without_catalog_patterns() {
    local cases=(
        'node{ func = function() return { 1 } end, outputs = "a", name = "value" },
         node{ command = "cat ${inputs.a} > ${outputs.o}", inputs = { a = "a" }, outputs = { o = "a.json" }, name = "cmd" },'
        'node{ func = function() return "t" end, outputs = "r", name = "value" },
         node{ command = "cat ${inputs.r} > ${outputs.o}", inputs = { r = "r" }, outputs = { o = "r.txt" }, name = "cmd" },'
        'node{ command = "touch ${outputs.o}", outputs = { o = "m/n" }, name = "one" },
         node{ command = "touch ${outputs.o}", outputs = { o = "m%2Fn" }, name = "two" },'
        'node{ command = "touch ${outputs.o}", outputs = { o = "kept.json" }, name = "one" },
         node{ command = "cat ${inputs.k} > ${outputs.o}", inputs = { k = "kept" }, outputs = { o = "x" }, name = "two" },
         node{ func = function() return 1 end, outputs = "kept", name = "three" },'
        'node{ command = "touch ${outputs.o}", outputs = { o = "fine" }, name = "one" },
         node{ command = "cat ${inputs.f} > ${outputs.o}", inputs = { f = "fine" }, outputs = { o = "fine2" }, name = "two" },'
        'node{ func = function() return { 1 } end, outputs = "v", name = "value" },
         node{ command = "cat ${inputs.v} > ${outputs.o}", inputs = { v = "v" }, outputs = { o = "v.json" }, name = "cmd" },'
    )
    local want=(2 2 0 2 0 0) k catalog first
    local base=$'kept: {type: memory}\nv: {type: json, path: data/v.json}'
    for k in "${!cases[@]}"; do
        first=
        for catalog in "$base" "$base"$'\n"{x}_unused": {type: json, path: "data/{x}.json"}'; do
            rm -rf .flow
            printf 'return pipeline{\n%s\n}\n' "${cases[$k]}" | write pipeline.lua
            printf '%s\n' "$catalog" | write conf/base/catalog.yml
            run_flow "${want[$k]}" run
            [ "${want[$k]}" = 2 ] || continue
            contains "$ERR" "are both stored at .flow/data/"
            if [ -z "$first" ]; then first=$ERR; else equals "$ERR" "$first" "case $k, with a pattern"; fi
        done
    done
}

# A Lua value 'a' that a command reads (flow writes it to .flow/data/a.json
# for the command), the catalog $1 and one more step $2.
value_for_a_command() {
    write pipeline.lua <<L
return pipeline{
  node{ func = function() return { 1 } end, outputs = "a", name = "value" },
  node{ command = "cat \${inputs.a} > \${outputs.o}", inputs = { a = "a" }, outputs = { o = "kept" }, name = "cmd" },
  ${2:-}
}
L
    printf '%s\n' "$1" | write conf/base/catalog.yml
}

# A catalog path inside .flow/data meets the files flow keeps there...
test_a_catalog_path_in_flows_data_and_a_value_file_are_an_error() {
    value_for_a_command "kept: {type: json, path: .flow/data/a.json}"
    run_flow 2 run
    contains "$ERR" "catalog entry 'kept' (conf/base/catalog.yml:1) and dataset 'a' are both stored at .flow/data/a.json"
}

# ... and so does a folder dataset that holds .flow/data.
test_a_folder_dataset_holding_flows_data_is_an_error() {
    value_for_a_command "dir: {type: folder, path: .flow/data}" \
        'node{ func = function() local d = os.tmpname() os.remove(d) os.execute("mkdir " .. d) return d end, outputs = "dir", name = "folder" },'
    run_flow 2 run
    contains "$ERR" "catalog entry 'dir' (conf/base/catalog.yml:1) is stored at .flow/data, inside .flow/, where flow keeps its own state"
}

# ---- an output never takes an input away --------------------------------

test_a_lua_step_returning_its_input_path_is_refused() {
    write pipeline.lua <<'L'
return pipeline{
  node{ func = function(path) return path end, inputs = "raw", outputs = "copy", name = "passthrough" },
  node{ func = function(dir) return dir .. "/one.txt" end, inputs = "folder", outputs = "part", name = "part" },
}
L
    write conf/base/catalog.yml <<'Y'
raw: {type: file, path: data/raw.txt}
copy: {type: file, path: data/copy.txt}
folder: {type: folder, path: data/dir}
part: {type: file, path: data/part.txt}
Y
    mkdir -p data/dir
    echo precious > data/raw.txt
    echo one > data/dir/one.txt
    run_flow 1 run -k
    contains "$ERR" "step 'passthrough': output 'copy' is the path of its input 'raw' (data/raw.txt): flow refuses an input as an output"
    contains "$ERR" "step 'part': output 'part' is the path of its input 'folder'"
    equals "$(cat data/raw.txt)" "precious" "the input"
    equals "$(cat data/dir/one.txt)" "one" "the folder input"
}

# A returned path that is not one of the step's inputs but still someone's
# file — another dataset, the script, a file outside the project — is copied
# into place, never moved away.
test_a_returned_path_that_is_not_scratch_is_copied_not_moved() {
    write pipeline.lua <<'L'
return pipeline{
  node{ func = function() return "data/raw.txt" end, outputs = "copy", name = "other_dataset" },
  node{ func = function() return "pipeline.lua" end, outputs = "script_copy", name = "script" },
  node{ func = function() return os.getenv("OUTSIDE") end, outputs = "outside_copy", name = "outside" },
  node{ func = function() return "data/dir" end, outputs = "dir_copy", name = "folder" },
  node{ func = function(raw) return raw:upper() end, inputs = "raw", outputs = "upper", name = "reader" },
}
L
    write conf/base/catalog.yml <<'Y'
raw: {type: file, path: data/raw.txt}
copy: {type: file, path: data/copy.txt}
script_copy: {type: file, path: data/script.lua}
outside_copy: {type: file, path: data/outside.txt}
dir: {type: folder, path: data/dir}
dir_copy: {type: folder, path: data/dir_copy}
upper: {type: text, path: data/upper.txt}
Y
    mkdir -p data/dir
    echo precious > data/raw.txt
    echo one > data/dir/one.txt
    outside=$(mktemp); echo away > "$outside"
    OUTSIDE=$outside run_flow 0 run
    equals "$(cat data/raw.txt)" "precious" "the other dataset"
    equals "$(cat data/copy.txt)" "precious" "the copy"
    [ -f pipeline.lua ] || { echo "the script was moved away"; return 1; }
    cmp -s pipeline.lua data/script.lua || { echo "the script's copy differs"; return 1; }
    equals "$(cat "$outside")" "away" "the file outside the project"
    equals "$(cat data/outside.txt)" "away" "its copy"
    equals "$(cat data/dir/one.txt)" "one" "the folder"
    equals "$(cat data/dir_copy/one.txt)" "one" "the folder's copy"
    rm -f "$outside"
}

# A file the step made in flow's scratch space (.flow/tmp/) is moved, as before.
test_a_returned_path_in_flows_tmp_is_moved() {
    write pipeline.lua <<'L'
return pipeline{ node{ name = "make", outputs = "out", func = function()
  local run = io.popen("readlink .flow/runs/latest"):read("l")
  os.execute("mkdir -p .flow/tmp/" .. run)
  local path = ".flow/tmp/" .. run .. "/scratch.txt"
  local f = assert(io.open(path, "w")) f:write("made\n") f:close()
  SCRATCH = path
  return path
end },
  node{ name = "look", inputs = "out", outputs = "left", func = function()
    local f = io.open(SCRATCH) if f then f:close() return "left" end return "gone" end } }
L
    write conf/base/catalog.yml <<'Y'
out: {type: file, path: data/out.txt}
left: {type: text, path: data/left.txt}
Y
    run_flow 0 run
    equals "$(cat data/out.txt)" "made" "the output"
    equals "$(cat data/left.txt)" "gone" "the scratch file after the commit"
}

# The graph is built from node{}s' records only, and no way of making a
# node lets a NUL into a name (the graph keys names by C string: "a\0b" and
# "a\0c" would be one).
test_the_graph_refuses_a_nul_in_a_name_from_any_caller() {
    write check.lua <<'L'
local dag = require("flow.dag")
local steps = { { name = "s", kind = "func", inputs = {}, outputs = { { arg = "x", dataset = "a\0b" } } } }
local ok, err = pcall(dag.build, steps, {})
local out = { tostring(ok) .. ": " .. tostring(err) }
local f = function() end
for _, spec in ipairs({ { func = f, name = "s", outputs = "a\0b" }, { func = f, name = "s\0t" },
                        { func = f, name = "s", inputs = { ["x\0y"] = "a" } }, { func = f, name = "s", pool = "p\0q" } }) do
  ok, err = pcall(node, spec)
  out[#out + 1] = tostring(ok) .. ": " .. tostring(err):gsub("^check%.lua:%d+: ", "")
end
ok, err = pcall(pipeline, { node{ func = f, name = "s" }, namespace = "n\0s" })
out[#out + 1] = tostring(ok) .. ": " .. tostring(err):gsub("^check%.lua:%d+: ", "")
io.open("result", "w"):write(table.concat(out, "\n")):close()
return pipeline{}
L
    run_flow 0 run check.lua
    equals "$(cat result)" "false: step 1 is not a node{}
false: node: outputs: 'a\\0b' contains a control character
false: node: name: 's\\0t' contains a control character
false: node: inputs: the name of an argument holds a NUL byte (\\0)
false: node: pool holds a NUL byte (\\0)
false: pipeline: namespace: 'n\\0s' contains a control character"
}

# A step's consumers start before its outputs are flushed (group commit,
# engine/step.c): a command reading a quick Lua step's file may delete it
# before the flush, which skips what is gone rather than fail the producer
# (and the consumer, whose line shares its batch) naming the file.
test_a_consumer_may_remove_what_a_quick_step_wrote() {
    write conf/base/catalog.yml <<'Y'
x: {type: text, path: data/a.txt}
Y
    write pipeline.lua <<'L'
return pipeline{
  node{ name = "z", outputs = "w", func = function() return 1 end },
  node{ name = "a", inputs = "w", outputs = "x", func = function() return "hello" end },
  node{ name = "c", inputs = "x", outputs = "o", command = 'gzip -c ${inputs.x} > ${outputs.o} && rm ${inputs.x}' },
}
L
    for i in 1 2 3; do
        rm -rf .flow data
        run_flow 0 run
        [ ! -e data/a.txt ] || { echo "the consumer did not run"; return 1; }
    done
}

# ---- a Lua step's body in C and in the stdlib ----------------------------

# A step of memory values in and out is called and recorded in C
# (lua/l_values.c); anything else, and everything under
# FLOW_DEBUG_LUA_BODIES=1, the stdlib does (flow.execute, flow.values).
# Both must record the same: the journal's step_end lines (fingerprints,
# parts, output records) byte for byte, on a first run and on a rerun whose
# steps read values restored from the records the first one made.
bodies_project() {
    write conf/base/parameters.yml <<'Y'
k: 3
Y
    write conf/base/catalog.yml <<'Y'
kept: {type: json, path: data/kept.json}
Y
    write pipeline.lua <<'L'
return pipeline{
  node{ name = "one", outputs = "a", func = function() return 1 end },
  node{ name = "float", outputs = "f", func = function() return 0.1 end },
  node{ name = "flag", outputs = "b", func = function() return false end },
  node{ name = "text", inputs = "a", outputs = "t",
        func = function(a) return "quote \" back \\ nl \n tab \t \1 é " .. a end },
  node{ name = "table", inputs = { "t", "f" }, outputs = "tb",
        func = function(t, f) return { t = t, f = f, list = { 1, 2, { x = "y" } } } end },
  node{ name = "two", inputs = { x = "tb", y = "b" }, outputs = { "q", "p" },
        func = function(m) return not m.y, m.x.list end },
  node{ name = "map_out", inputs = "p", outputs = { z_last = "zz", a_first = "aa" },
        func = function(p) return { z_last = #p, a_first = p[3] } end },
  node{ name = "yields", inputs = "zz", outputs = "y",
        func = function(zz) return zz + tonumber(flow.sh("echo 4")) end },
  -- the stdlib's: a parameter input, a dataset the catalog keeps; in C, a
  -- value over the inline size, which is not kept; then one that reads them
  -- (the stdlib's: the catalog's dataset is read back decoded, and on the
  -- rerun from the state, calling big again)
  node{ name = "param", inputs = { "params:k", "aa" }, outputs = "pk", func = function(k, aa) return k * #aa.x end },
  node{ name = "big", outputs = "big", func = function() return string.rep("x", 600) end },
  node{ name = "persist", inputs = "q", outputs = "kept", func = function(q) return { q = q } end },
  node{ name = "last", inputs = { "y", "pk", "big", "kept" }, outputs = "e",
        func = function(y, pk, big, kept) return y + pk + #big + (kept.q and 1 or 0) end },
}
L
}

# The journal's step_end lines as written, without what differs from run to
# run (its id, times), sorted
step_ends() {
    grep '"event":"step_end"' .flow/runs/latest/journal.jsonl |
        sed -E 's/"(elapsed|time)":[0-9.e+-]+,?//g; s/"run":"[^"]*",?//' | sort
}

# (The body in C hands the state record its outputs as fields: under
# FLOW_DEBUG_RECORD_FIELDS each is compared with the outputs text, and a
# record whose fields differ is refused, which the run would warn of.)
bodies_runs() {
    FLOW_DEBUG_RECORD_FIELDS=1 run_flow 0 run
    not_contains "$ERR" "cannot be kept"
    FIRST=$(step_ends)
    BODIES=$(printf '%s\n' "$ERR" | grep "Lua step bodies in C" || true)
    sed -i 's/echo 4/echo 6/' pipeline.lua
    run_flow 0 run
    SECOND=$(step_ends)
    run_flow 0 run driver.lua
    VALUE=$OUT
    sed -i 's/echo 6/echo 4/' pipeline.lua
    rm -rf .flow data
}

test_lua_step_bodies_in_c_record_what_the_stdlib_records() {
    bodies_project
    write driver.lua <<'L'
print(flow.run(dofile("pipeline.lua")).outputs.e)
L
    export FLOW_DEBUG_UPTODATE=1
    bodies_runs
    local first=$FIRST second=$SECOND value=$VALUE
    equals "$BODIES" "flow: Lua step bodies in C: 9" "the steps the C path took"
    FLOW_DEBUG_LUA_BODIES=1 bodies_runs
    equals "$BODIES" "" "no step in C under FLOW_DEBUG_LUA_BODIES"
    equals "$FIRST" "$first" "first run's records"
    equals "$SECOND" "$second" "rerun's records"
    equals "$VALUE" "$value" "the value"
    equals "$value" "613" "the value"
    contains "$second" '"status":"ok","step":"yields"'
}

# ---- a first run's recorder ----------------------------------------------

# A first run works its Lua steps' fingerprints, journal lines and state
# records out on a thread of its own (engine/step.c's recorder), while the
# loop's runs the next steps; FLOW_DEBUG_NO_RECORDER=1 does it all on the
# loop's.  Both write the same lines and records; the recorder's come in the
# order the steps started and ended (each producer's end before its
# consumers' start), its step names masked as the loop's are; a step that
# asks its own fingerprint gets the one its lines have; steps that are not
# its (slow, a file output, a command) are recorded on the loop among its.
RECORDER_SECRET=hunter2SECRETvalue

recorder_project() {
    write conf/local/credentials.yml <<Y
api:
  key: "$RECORDER_SECRET"
Y
    write conf/base/parameters.yml <<'Y'
k: 3
Y
    write conf/base/catalog.yml <<'Y'
file: {type: text, path: data/file.txt}
Y
    write pipeline.lua <<'L'
local sched = require("flow.sched")
local nodes = {}
for c = 1, 8 do                  -- 8 chains of 250 quick steps: more than a flush's worth between flushes
  for j = 1, 250 do
    nodes[#nodes + 1] = node{ name = "s" .. c .. "_" .. j, outputs = "v" .. c .. "_" .. j,
                              inputs = j > 1 and { "v" .. c .. "_" .. (j - 1), "params:k" } or "params:k",
                              func = function(a, k) return k and a + k or a end }
  end
end
nodes[#nodes + 1] = node{ name = "fp", inputs = "v1_10", outputs = "fpv", func = function() return sched.fingerprint() end }
nodes[#nodes + 1] = node{ name = "slow", inputs = "v2_10", outputs = "sl",
                          func = function(v) flow.sh("sleep 0.2") return v end }
nodes[#nodes + 1] = node{ name = "file", inputs = "v3_10", outputs = "file", func = function(v) return "v=" .. v end }
nodes[#nodes + 1] = node{ name = "cmd", inputs = { a = "sl", f = "file" }, outputs = "c",
                          command = "cat ${inputs.f} > ${outputs.c}; echo ${credentials.api.key} > /dev/null" }
nodes[#nodes + 1] = node{ name = "after_hunter2SECRETvalue", inputs = { "c", "v8_250", "sl" }, outputs = "z",
                          func = function(c, v, sl) return v + sl end }
nodes[#nodes + 1] = node{ name = "last", inputs = { "z", "fpv" }, outputs = "e", func = function(z) return z end }
return pipeline(nodes)
L
}

# The journal's step lines in the order written, without what differs from
# run to run (its id, times)
step_lines() {
    grep -E '"event":"step_(start|end)"' .flow/runs/latest/journal.jsonl |
        sed -E 's/"(elapsed|time)":[0-9.e+-]+,?//g; s/"run":"[^"]*",?//; s/,}/}/'
}

test_a_first_runs_recorder_records_what_the_loop_records() {
    recorder_project
    FLOW_DEBUG_UPTODATE=1 run_flow 0 run
    # (every step but the command, and the one after the step whose name holds the secret)
    contains "$ERR" "flow: fingerprints and records made beside the loop: 2004"
    not_contains "$ERR" "cannot be kept"
    local lines
    lines=$(step_lines)
    equals "$(printf '%s\n' "$lines" | wc -l)" 4012 "two lines a step"
    # in order: each step's start after its producer's end, its end after its start
    printf '%s\n' "$lines" | awk '
        { if (!match($0, /"step":"[^"]*"/)) next
          name = substr($0, RSTART + 8, RLENGTH - 9)
          if ($0 ~ /"step_start"/) started[name] = NR; else ended[name] = NR }
        END { bad = 0
              for (c = 1; c <= 8; c++) for (j = 1; j <= 250; j++) {
                  s = "s" c "_" j; p = "s" c "_" (j - 1)
                  if (!(s in started) || ended[s] < started[s] || (j > 1 && started[s] < ended[p])) { print "out of order: " s; bad = 1 } }
              if (ended["fp"] < started["fp"] || started["fp"] < ended["s1_10"] || started["last"] < ended["fp"]) { print "out of order: fp"; bad = 1 }
              exit bad }' || return 1
    # the step that asked its fingerprint got the one its lines have
    local fp_end fp
    fp_end=$(printf '%s\n' "$lines" | grep '"step_end".*"step":"fp"')
    fp=$(printf '%s\n' "$fp_end" | sed -E 's/.*"fingerprint":"([0-9a-f]{64})".*/\1/')
    equals "${#fp}" 64 "the fingerprint's length"
    contains "$fp_end" "\"value\":\"return \\\"$fp\\\"\"" "the value the step returned"
    # its step name masked, the secret nowhere
    contains "$lines" '"step":"after_***"'
    equals "$(grep -rlF "$RECORDER_SECRET" .flow --exclude-dir=data || true)" "" "files under .flow/ holding the secret"
    # its records stand: the rerun runs only the step whose name holds the
    # secret (its record is kept under the masked name, which no check
    # looks up, the recorder's or not)
    run_flow 0 run
    contains "$ERR" "flow: 1 done, 2005 up to date"
    # ... and are the loop's own
    rm -rf .flow data
    FLOW_DEBUG_NO_RECORDER=1 FLOW_DEBUG_UPTODATE=1 run_flow 0 run
    not_contains "$ERR" "beside the loop"
    equals "$(step_lines | sort)" "$(printf '%s\n' "$lines" | sort)" "the journal's step lines, without the recorder"
    run_flow 0 run
    contains "$ERR" "flow: 1 done, 2005 up to date"
}

# A plain step's attempt is C's (lua/plain_step.c) unless it ends in
# something rare: its print() (the log to close), a retry after an error,
# results the stdlib saves (a value with a metatable, too few results), a
# timeout, an error that is no message.  Each must end as under
# FLOW_DEBUG_LUA_BODIES, where the stdlib does it all: the same messages,
# logs, journal lines and exit status.
plain_step_runs() {
    rm -rf .flow
    run_flow 1 run -k
    MSGS=$(printf '%s\n' "$ERR" | sed -E 's/\(([0-9.]+s)\)$/(T)/; s/in [0-9.]+s$/in T/; s/--resume [0-9-]+/--resume ID/')
    LOGS=$(for f in .flow/runs/latest/logs/*; do echo "-- ${f##*/}"; cat "$f"; done)
    ENDS=$(step_ends)
}

test_plain_steps_retry_print_and_fail_as_the_stdlib_does() {
    write pipeline.lua <<'L'
local n = 0
return pipeline{
  node{ name = "flaky", outputs = "a", retries = 1, func = function()
          n = n + 1; print("attempt " .. n); if n == 1 then error("first time") end; return n end },
  node{ name = "shape", inputs = "a", outputs = { "x", "y" }, func = function(a) return a end },
  node{ name = "meta", inputs = "a", outputs = "m", func = function() print("meta") return setmetatable({}, {}) end },
  node{ name = "spin", inputs = "a", outputs = "s", timeout = 0.3, func = function() while true do end end },
  node{ name = "bad", inputs = "m", outputs = "b", func = function() error({ code = 7 }) end },
  node{ name = "quiet", inputs = "a", outputs = "o", func = function(a) return a + 1 end },
  node{ name = "loud", inputs = "o", outputs = "l", func = function(o) print("fine", o) return o + 1 end },
  -- over the inline size: kept by a step that retries, not kept by one that does not
  node{ name = "kept_big", inputs = "a", outputs = "kb", retries = 1, func = function() return string.rep("y", 600) end },
  node{ name = "unkept_big", inputs = "a", outputs = "ub", func = function() return string.rep("z", 600) end },
  node{ name = "reads_big", inputs = { "kb", "ub" }, outputs = "rb", func = function(kb, ub) return #kb + #ub end },
}
L
    FLOW_DEBUG_UPTODATE=1 plain_step_runs
    local msgs=$MSGS logs=$LOGS ends=$ENDS
    contains "$msgs" "flow: Lua step bodies in C: 6"       # flaky (2nd attempt), meta, loud (the tail), quiet, unkept_big, reads_big
    contains "$msgs" "flow: warning: step 'flaky' failed: pipeline.lua:4: first time (attempt 1 of 2); retrying in T"
    contains "$msgs" "flow: error: step 'shape' returned 1 value but declares 2 outputs (x, y)"
    contains "$msgs" "flow: error: step 'spin' timed out after 300ms"
    contains "$msgs" "flow: error: step 'bad' failed: pipeline.lua:8: error raised a table, not a message"
    contains "$logs" "$(printf -- '-- flaky.log\n--- attempt 1 of 2 ---\nattempt 1\n\n--- attempt 2 of 2 ---\nattempt 2')"
    contains "$logs" "$(printf -- '-- loud.log\nfine\t3')"
    contains "$ends" '"kb":{"cached":true'
    contains "$ends" '"recompute":true'
    FLOW_DEBUG_UPTODATE=1 FLOW_DEBUG_LUA_BODIES=1 plain_step_runs
    equals "$(printf '%s\n' "$MSGS" | grep -v 'bodies in C\|beside the loop')" \
        "$(printf '%s\n' "$msgs" | grep -v 'bodies in C\|beside the loop')" "the messages"
    equals "$LOGS" "$logs" "the logs"
    equals "$ENDS" "$ends" "the journal's step_end lines"
}

# Steps called in C wait as the stdlib's do: two that each wait in flow.sh
# for the other to have started both run at once (a call that could not
# yield would hold the thread, and the first would wait in vain).
test_lua_steps_called_in_c_wait_for_each_other() {
    write pipeline.lua <<'L'
local function meet(me, other)
  return flow.sh(string.format("touch %s; i=0; while [ ! -e %s ] && [ $i -lt 500 ]; do sleep 0.01; i=$((i+1)); done; " ..
                               "[ -e %s ] && echo met", me, other, other))
end
return pipeline{
  node{ name = "one", outputs = "a", func = function() return meet("one", "two") end },
  node{ name = "two", outputs = "b", func = function() return meet("two", "one") end },
}
L
    FLOW_DEBUG_UPTODATE=1 run_flow 0 run -j 2
    contains "$ERR" "flow: Lua step bodies in C: 2"
    write driver.lua <<'L'
local r = flow.run(dofile("pipeline.lua"))
print(r.outputs.a, r.outputs.b)
L
    run_flow 0 run driver.lua
    equals "$OUT" "$(printf 'met\n\tmet\n')" "what each step's wait saw"
}

# A memory value is let go once every step that reads it has ended well:
# a later step of the same run finds it collected (a weak reference to it
# gone), while a value a step still has to read, and an output nothing reads
# (the run's result), stay.  A reader that fails and is tried again still
# gets its input.
test_a_value_is_let_go_after_its_last_reader() {
    write pipeline.lua <<'L'
local seen = setmetatable({}, { __mode = "v" })
local function big(tag) local t = { tag = tag }; seen[tag] = t; return t end
local tries = 0
return pipeline{
  node{ name = "make_a", outputs = "a", func = function() return big("a") end },
  node{ name = "make_b", outputs = "b", func = function() return big("b") end },
  node{ name = "read_a1", inputs = "a", outputs = "a1", func = function(a) return a.tag end },
  node{ name = "read_a2", inputs = "a", outputs = "a2", retries = 1, func = function(a)
    tries = tries + 1
    if tries == 1 then error("first try fails") end
    return a.tag
  end },
  node{ name = "look", inputs = { "a1", "a2" }, outputs = "looked", func = function()
    collectgarbage(); collectgarbage()
    return string.format("a %s, b %s", seen.a and "kept" or "collected", seen.b and "kept" or "collected")
  end },
  node{ name = "read_b", inputs = { "b", "looked" }, outputs = "out", func = function(b, looked)
    return looked .. ", then b is " .. b.tag
  end },
}
L
    write driver.lua <<'L'
local r = flow.run(dofile("pipeline.lua"), { jobs = 1 })
print(r.status, r.outputs.out)
L
    run_flow 0 run driver.lua
    equals "$OUT" "$(printf 'ok\ta collected, b kept, then b is b')" "what the run kept"
    contains "$ERR" "first try fails"
}

# A plain step's body finds its inputs' and outputs' names among the Lua
# strings its store keeps by id (node_decl.c), an array as long as the
# store's names when a run first asked: steps declared after that run have
# names past its end, and still find their values, through C.
test_steps_declared_after_a_run_find_their_values() {
    write driver.lua <<'L'
local function chain(prefix, n)
  local nodes = {}
  for i = 1, n do
    nodes[i] = node{ name = "step_" .. prefix .. i, outputs = prefix .. i, inputs = i > 1 and prefix .. (i - 1) or nil,
                     func = function(x) return (x or 0) + 10 * i end }
  end
  return pipeline(nodes)
end
local a = flow.run(chain("a", 3))
local b = flow.run(chain("b", 4))
print(a.status, a.outputs.a3, b.status, b.outputs.b4)
L
    FLOW_DEBUG_UPTODATE=1 run_flow 0 run -q driver.lua
    equals "$OUT" "$(printf 'ok\t60\tok\t100')" "each run's last value"
    equals "$(printf '%s\n' "$ERR" | grep "bodies in C")" "$(printf 'flow: Lua step bodies in C: 3\nflow: Lua step bodies in C: 4')" \
        "the steps the C path took"
}

# The run's values table (lua/values_table.c) keeps a dataset of the graph
# at its index, where C reads and writes it, and answers Lua by name: reads,
# writes, pairs() (names, with a name the graph does not know kept under
# itself), on_miss's first use; the catalog's word on each dataset is read
# from its exact entries once (a kept output sends the step the stdlib's
# way, which t_outputs' comparisons of the two paths cover).
test_the_values_table_keeps_datasets_by_index_and_answers_by_name() {
    write check.lua <<'L'
local dag, values_c = require("flow.dag"), require("flow.values_c")
local f = function() end
local g = dag.build({ node{ name = "p", outputs = "a", func = f }, node{ name = "q", inputs = "a", outputs = "b", func = f } }, {})
local v = values_c.table(g, { exact = { b = { type = "json" } }, patterns = {} })
local out = {}
local function say(...) out[#out + 1] = table.concat({ ... }, " ") end
v.a = { value = 1 }
v.other = { value = 2 }
say("a", v.a.value, tostring(rawget(v, "a")), "other", v.other.value, tostring(rawget(v, "other") ~= nil))
say("missing", tostring(v.b), tostring(v.nothing))
local names = {}
for d, e in pairs(v) do names[#names + 1] = d .. "=" .. e.value end
table.sort(names)
say("pairs", table.concat(names, ","))
values_c.on_miss(v, function(t, d) if d == "b" then t[d] = { value = "made" } return t[d] end end)
say("miss", v.b.value, tostring(v.nothing))
v.a = nil
say("gone", tostring(v.a))
say("refused", tostring(pcall(values_c.on_miss, {}, f)))
io.open("result", "w"):write(table.concat(out, "\n")):close()
return pipeline{}
L
    run_flow 0 run check.lua
    equals "$(cat result)" "a 1 nil other 2 true
missing nil nil
pairs a=1,other=2
miss made nil
gone nil
refused false"
}

# A script may set a locale whose decimal point is a comma (os.setlocale):
# the numbers flow keeps and writes still use a '.', so a value restored on
# the next run is the value the step returned (it was kept as "return 0,5",
# which reads back as 0).  The numeric category alone cannot be set (nor the
# collation: t_uptodate.sh).
test_a_locale_with_a_decimal_comma_changes_no_kept_value() {
    de_locale || return 1
    write pipeline.lua <<'L'
local set = os.setlocale("de_DE.UTF-8")
assert(set and set:find("LC_NUMERIC=C", 1, true), tostring(set))
assert(os.setlocale(nil, "time") == "de_DE.UTF-8" and os.setlocale(nil, "numeric") == "C")
assert(os.setlocale(nil, "collate") == "C")
assert(string.format("%.2f", 1.5) == "1.50")
local ok, err = pcall(function() return os.setlocale("de_DE.UTF-8", "numeric") end)
assert(not ok and err:find("pipeline.lua:6: os.setlocale: flow keeps the \"numeric\" category at \"C\"", 1, true), err)
assert(os.setlocale("C", "numeric") == "C")
return pipeline{
  node{ func = function() return 0.5 end, outputs = "half", name = "a" },
  node{ func = function(h) return { h = h, x = 2.25, l = { 1.5, -0.125 } } end, inputs = "half", outputs = "t", name = "b" },
  node{ func = function(t)
          local f = assert(io.open("seen", "w"))
          f:write(string.format("%s %s %s %s\n", t.h, t.x, t.l[1], t.l[2]))
          f:close()
          return t.h * 2
        end, inputs = "t", outputs = "one", name = "c" },
  node{ command = "cat ${inputs.t} > ${outputs.o}", inputs = "t", outputs = "o", name = "d" },
}
L
    LOCPATH=$PWD/loc run_flow 0 run
    equals "$(cat seen)" "0.5 2.25 1.5 -0.125" "what step c read"
    python3 -c 'import json, sys
t = json.load(open(".flow/data/o"))
assert t == {"h": 0.5, "x": 2.25, "l": [1.5, -0.125]}, t
for line in open(".flow/runs/latest/journal.jsonl"): json.loads(line)
json.load(open(".flow/runs/latest/run.json"))' || return 1
    contains "$ERR" "4 done in 0." "the summary"
    # c changes: it reads t restored from the first run's record
    sed -i 's/return t.h \* 2$/return t.h * 2 + 0/' pipeline.lua
    rm seen
    LOCPATH=$PWD/loc run_flow 0 run
    contains "$ERR" "1 done, 3 up to date" "the rerun"
    equals "$(cat seen)" "0.5 2.25 1.5 -0.125" "what step c read from the kept value"
}

# What a step reads is the same on a rerun, when the values it reads are
# restored from their records, as on the run that made them: a step gets its
# own copy of a table input (b's change to v is not c's), and a value that
# would not read back as it was (a table with a metatable, a table held
# twice, a list too deep for Lua to compile back) is not kept: its producer,
# up to date, is called again for the reader that runs.  Such a value that
# no step reads (a result) cannot be cached: its step runs again, and
# --explain says why.  The stdlib's path (FLOW_DEBUG_LUA_BODIES) reads what
# the C path reads.
test_a_step_reads_on_a_rerun_what_it_read_on_the_first_run() {
    write pipeline.lua <<'L'
local Point = {}; Point.__index = Point
function Point:norm() return math.sqrt(self.x ^ 2 + self.y ^ 2) end
local function seen(name, text)
  local f = assert(io.open("seen_" .. name, "w")); f:write(text, "\n"); f:close()
end
return pipeline{
  node{ func = function() return { n = 1, l = { 1, 2 } } end, outputs = "v", name = "a" },
  node{ func = function(v) v.n = v.n + 100; v.l[1] = 99; return 1 end, inputs = "v", outputs = "o", name = "b" },
  node{ func = function(v, o) seen("c", v.n .. " " .. v.l[1]) return 1 end, -- reader
        inputs = { "v", "o" }, outputs = "p", name = "c" },
  node{ func = function() return setmetatable({ x = 3, y = 4 }, Point) end, outputs = "pt", name = "m" },
  node{ func = function(pt) seen("mm", pt:norm()) return 1 end, -- reader
        inputs = "pt", outputs = "q", name = "mm" },
  node{ func = function() local s = { 1 } return { s, s } end, outputs = "sh", name = "s" },
  node{ func = function(sh) seen("ss", tostring(rawequal(sh[1], sh[2]))) return 1 end, -- reader
        inputs = "sh", outputs = "r", name = "ss" },
  node{ func = function() local t = {} for _ = 1, 64 do t = { 0, 0, 0, t } end return t end,
        outputs = "deep", name = "d" },
  node{ func = function(t) local n = 0 while t do n, t = n + 1, t[4] end seen("dd", n) return 1 end, -- reader
        inputs = "deep", outputs = "u", name = "dd" },
  node{ func = function() return setmetatable({ x = 3, y = 4 }, Point) end, outputs = "pt_result", name = "mr" },
  node{ func = function() local s = { 1 } return { s, s } end, outputs = "sh_result", name = "sr" },
  node{ func = function() local t = {} for _ = 1, 64 do t = { 0, 0, 0, t } end return t end,
        outputs = "deep_result", name = "dr" },
}
L
    run_flow 0 run
    local first
    first=$(cat seen_c seen_mm seen_ss seen_dd)
    equals "$first" "$(printf '1 1\n5\ntrue\n65')" "what the readers read"
    sed -i 's/return 1 end, -- reader/return 2 end, -- reader/' pipeline.lua
    rm seen_*
    run_flow 0 run --explain
    equals "$(cat seen_c seen_mm seen_ss seen_dd)" "$first" "what the readers read on the rerun"
    contains "$ERR" "explain: a is up to date"
    contains "$ERR" "explain: m is up to date"
    contains "$ERR" "flow: m: called again for 'pt' (a memory value, not kept between runs)"
    contains "$ERR" "flow: s: called again for 'sh'"
    contains "$ERR" "flow: d: called again for 'deep'"
    contains "$ERR" "explain: mr runs: its output 'pt_result' cannot be cached (value has a metatable"
    contains "$ERR" "explain: sr runs: its output 'sh_result' cannot be cached (value[2] is a table the value holds twice"
    contains "$ERR" "explain: dr runs: its output 'deep_result' cannot be cached (value is nested too deeply to be read back"
    rm -rf .flow seen_*
    FLOW_DEBUG_LUA_BODIES=1 run_flow 0 run
    equals "$(cat seen_c seen_mm seen_ss seen_dd)" "$first" "what the readers read through the stdlib"
}

# A catalog path of a file dataset that names a directory by mistake: the
# commit (a rename over the path) deleted the directory, the step's own input
# and the other files in it with it, exit 0.  A path holding another
# dataset's is refused before the run, as a folder's is; a directory the
# step did not make fails the step, left as it was; a path inside .flow/
# (state.log) is refused.  A dataset whose type changed from folder to file
# still replaces its own old folder.
test_a_file_dataset_never_replaces_a_directory_it_did_not_make() {
    mkdir -p conf/base data/01_raw data/other
    echo "hello world" > data/01_raw/words.txt
    echo "a,b" > data/other/keep.csv
    write pipeline.lua <<'L'
return pipeline{ node{ func = function(r) return r:upper() end, inputs = "raw", outputs = "report", name = "A" } }
L
    write conf/base/catalog.yml <<'Y'
raw: {type: text, path: data/01_raw/words.txt}
report: {type: text, path: data/01_raw}
Y
    run_flow 2 run
    contains "$ERR" "catalog entry 'raw' (conf/base/catalog.yml:1) is stored at data/01_raw/words.txt, inside the path of catalog entry 'report' (conf/base/catalog.yml:2) (data/01_raw)"
    write conf/base/catalog.yml <<'Y'
raw: {type: text, path: data/01_raw/words.txt}
report: {type: text, path: data/other}
Y
    run_flow 1 run
    contains "$ERR" "step 'A': output 'report' is stored at data/other, which is a directory that this step's last run did not make"
    equals "$(cat data/other/keep.csv)" "a,b" "the directory's file"
    write conf/base/catalog.yml <<'Y'
raw: {type: text, path: data/01_raw/words.txt}
report: {type: text, path: .flow/cache/state.log}
Y
    run_flow 2 run
    contains "$ERR" "is stored at .flow/cache/state.log, inside .flow/, where flow keeps its own state"
    # folder, then file: the dataset's own old folder is replaced
    write pipeline.lua <<'L'
return pipeline{ node{ command = "mkdir -p ${outputs.o} && echo x > ${outputs.o}/f", outputs = { o = "out" }, name = "B" } }
L
    write conf/base/catalog.yml <<'Y'
out: {type: folder, path: data/out}
Y
    run_flow 0 run
    [ -d data/out ] || { echo "no folder"; return 1; }
    write pipeline.lua <<'L'
return pipeline{ node{ command = "echo y > ${outputs.o}", outputs = { o = "out" }, name = "B" } }
L
    write conf/base/catalog.yml <<'Y'
out: {type: file, path: data/out}
Y
    run_flow 0 run
    equals "$(cat data/out)" "y" "the file that replaced the step's own folder"
}

# A catalog path that names the pipeline script, a file in conf/, conf/
# itself or a folder holding the script is refused before the run: the
# step overwrote pipeline.lua (the next run failed to parse it) or the
# catalog itself.  Reading such a path is allowed.
test_an_output_never_overwrites_the_script_or_the_configuration() {
    mkdir -p conf/base
    write pipeline.lua <<'L'
return pipeline{ node{ func = function() return 1 end, outputs = "a", name = "s" } }
L
    local path
    for path in pipeline.lua conf/base/catalog.yml conf . ; do
        echo "a: {type: text, path: $path}" > conf/base/catalog.yml
        run_flow 2 run
        contains "$ERR" "catalog entry 'a' (conf/base/catalog.yml:1) is stored at $path, "
    done
    contains "$ERR" "stored at ., which holds the pipeline script (pipeline.lua): step 's' would overwrite it"
    equals "$(head -c 6 pipeline.lua)" "return" "the script"
    write pipeline.lua <<'L'
return pipeline{ node{ func = function(t) return #t end, inputs = "me", outputs = "n", name = "s" } }
L
    echo "me: {type: text, path: pipeline.lua}" > conf/base/catalog.yml
    run_flow 0 run
}

# A folder dataset whose path names a directory no run recorded as its
# output (src/ by mistake) no longer deletes what it holds: the commit
# deleted src/train.py and put the folder there, silently.  The directory
# is moved into the run's directory, with a warning naming both.  Its own
# folder of the last run, and an empty directory, it replaces.
test_a_folder_dataset_never_deletes_a_directory_it_did_not_make() {
    mkdir -p conf/base src data/empty
    echo "print(1)" > src/train.py
    write pipeline.lua <<'L'
return pipeline{ node{ command = "mkdir -p ${outputs.o} && echo x > ${outputs.o}/f", outputs = { o = "out" }, name = "B" } }
L
    write conf/base/catalog.yml <<'Y'
out: {type: folder, path: src}
Y
    run_flow 0 run
    local run; run=$(readlink .flow/runs/latest)
    contains "$ERR" "step 'B': output 'out' replaced the directory src, which no run recorded as its output: what it held is in .flow/runs/$run/replaced/src"
    equals "$(cat .flow/runs/$run/replaced/src/train.py)" "print(1)" "the directory's file, kept"
    equals "$(cat src/f)" "x" "the output"
    run_flow 0 run --force
    not_contains "$ERR" "replaced the directory" "over its own folder"
    write conf/base/catalog.yml <<'Y'
out: {type: folder, path: data/empty}
Y
    run_flow 0 run
    not_contains "$ERR" "replaced the directory" "an empty directory"
    equals "$(cat data/empty/f)" "x" "the folder in the empty directory"
}

# A step whose second output cannot be committed (its directory is blocked
# by a file) fails with none committed: its first output was new while its
# record said the old parameter, and a step reading it read the new value.
test_a_step_that_cannot_commit_an_output_commits_none() {
    mkdir -p conf/base data
    write conf/base/catalog.yml <<'Y'
o1: {type: text, path: data/o1.txt}
o2: {type: text, path: data/blocker/o2.txt}
Y
    write conf/base/parameters.yml <<'Y'
v: 1
Y
    write pipeline.lua <<'L'
return pipeline{ node{ command = "echo ${params.v} > ${outputs.o1}; echo ${params.v} > ${outputs.o2}",
                       outputs = { o1 = "o1", o2 = "o2" }, name = "a" } }
L
    run_flow 0 run
    rm -rf data/blocker
    echo file > data/blocker
    run_flow 1 run --params v=2
    contains "$ERR" "step 'a': cannot save output 'o2'"
    equals "$(cat data/o1.txt)" "1" "the first output"
}

# A Lua step returning a directory for a file dataset (or a file for a
# folder) is refused, as a command that wrote the wrong kind is: it was
# committed, exit 0.
test_a_lua_step_returning_the_wrong_kind_of_path_is_refused() {
    mkdir -p conf/base d
    echo x > d/x
    write conf/base/catalog.yml <<'Y'
out: {type: file, path: data/out.txt}
dir: {type: folder, path: data/dir}
Y
    write pipeline.lua <<'L'
return pipeline{ node{ func = function() return "d" end, outputs = "out", name = "a" } }
L
    run_flow 1 run
    contains "$ERR" "step 'a': output 'out' is a file dataset (conf/base/catalog.yml:1): the function returns the path of the file it wrote, got 'd', a directory"
    [ ! -e data/out.txt ] || { echo "committed"; return 1; }
    write pipeline.lua <<'L'
return pipeline{ node{ func = function() return "d/x" end, outputs = "dir", name = "b" } }
L
    run_flow 1 run
    contains "$ERR" "got 'd/x', a file"
}
