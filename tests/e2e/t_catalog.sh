# t_catalog.sh — conf/*/catalog.yml: dataset types, paths, versions,
# factory patterns, `flow catalog list`, and its error messages.

catalog_project() {
    write data/raw.txt <<'T'
3 1 2
T
    write conf/base/catalog.yml <<'Y'
raw: {type: text, path: data/raw.txt}
numbers: {type: json, path: data/numbers.json}
stats:
  type: lua
  path: data/stats.lua
sorted: {type: file, path: data/sorted.txt}
report_dir: {type: folder, path: data/report}
"{name}_summary": {type: text, path: "data/summaries/{name}.txt"}
"{name}":
  type: json
  path: data/other/{name}.json
Y
    write pipeline.lua <<'L'
return pipeline{
  node{ name = "parse", inputs = "raw", outputs = "numbers", func = function(text)
          local t = {} for w in text:gmatch("%d+") do t[#t + 1] = tonumber(w) end return t end },
  node{ name = "stats", inputs = "numbers", outputs = "stats", func = function(t)
          local s = 0 for _, v in ipairs(t) do s = s + v end
          return { n = #t, sum = s, mean = s / #t, [true] = "yes" } end },
  node{ name = "sort", inputs = { n = "numbers" }, outputs = { out = "sorted" },
        command = "tr -d '[],\\n ' < ${inputs.n} | fold -w1 | sort > ${outputs.out}" },
  node{ name = "report", inputs = { s = "sorted" }, outputs = { dir = "report_dir" },
        command = "cp ${inputs.s} ${outputs.dir}/sorted.txt && echo ok > ${outputs.dir}/status" },
  node{ name = "summarise", inputs = { "stats", "sorted" }, outputs = "train_summary",
        func = function(st, path) return string.format("n=%d sum=%d mean=%s %s %s", st.n, st.sum, st.mean,
                                                      st[true], io.open(path):read("a"):gsub("\n", "")) end },
}
L
}

test_types_are_saved_and_loaded() {
    catalog_project
    run_flow 0 run
    equals "$(tr -d ' \n' < data/numbers.json)" "[3,1,2]" "json"
    contains "$(cat data/stats.lua)" "mean=2.0"
    equals "$(cat data/sorted.txt | tr '\n' ' ')" "1 2 3 " "file"
    equals "$(cat data/report/status)" "ok" "folder"
    equals "$(cat data/summaries/train.txt)" "n=3 sum=6 mean=2.0 yes 123" "text via a pattern"
    [ ! -e .flow/data/numbers ] || { echo "a catalog dataset was also written to .flow/data"; return 1; }
}

# A step reads a catalog dataset as the catalog decodes it, whether its
# producer ran in this run or in an earlier one: it got the producer's own
# table in the same run (1.0 a float, [1] an integer key, 3 a number) and
# the decoded file later, so one fingerprint gave two results.
test_a_reader_gets_the_decoded_value_in_the_producers_run_too() {
    write conf/base/catalog.yml <<'Y'
metrics: {type: json, path: data/metrics.json}
count:   {type: text, path: data/count.txt}
summary: {type: text, path: data/summary.txt}
Y
    write pipeline.lua <<'L'
return pipeline{
  node{ func = function() return { acc = 1.5, list = { 1, 2 } } end, outputs = "metrics", name = "score" },
  node{ func = function() return 3 end, outputs = "count", name = "count_rows" },
  node{ func = function(m, n) return string.format("acc=%s n=%s %s", m.acc, #m.list, math.type(n) or type(n)) end,
        inputs = { "metrics", "count" }, outputs = "summary", name = "summarize" },
}
L
    run_flow 0 run
    local first; first=$(cat data/summary.txt)
    run_flow 0 run --nodes summarize --force
    equals "$(cat data/summary.txt)" "$first" "the same step on the same inputs"
    equals "$first" "acc=1.5 n=2 string" "what it read"
}

test_numbers_are_saved_with_every_digit() {
    write conf/base/catalog.yml <<'Y'
j: {type: json, path: data/j.json}
t: {type: text, path: data/t.txt}
Y
    write pipeline.lua <<'L'
local function make() return { a = 0.1 + 0.2, b = 9007199254740993, c = 1.5, d = 3 }, 0.1 + 0.2 end
return pipeline{
  node{ func = make, outputs = { "j", "t" } },
  node{ func = function(j) return j end, inputs = "j", outputs = "m", name = "copy" },
  node{ command = "tr -d ' \t\n' < ${inputs.m} >&2", inputs = "m", name = "cmd" },
}
L
    run_flow 0 run -v
    equals "$(tr -d ' \t\n' < data/j.json)" '{"a":0.30000000000000004,"b":9007199254740993,"c":1.5,"d":3}' "json"
    equals "$(cat data/t.txt)" "0.30000000000000004" "text"
    contains "$ERR" '"a":0.30000000000000004'
}

test_catalog_list() {
    catalog_project
    run_flow 0 catalog list
    contains "$OUT" "dataset"
    contains "$OUT" "raw            text    data/raw.txt"
    contains "$OUT" "conf/base/catalog.yml:1"
    contains "$OUT" "train_summary  text    data/summaries/train.txt"
    contains "$OUT" "pattern \"{name}_summary\""
    run_flow 0 catalog list --format json
    contains "$OUT" '"dataset":	"report_dir"'
}

test_most_specific_pattern_wins() {
    write conf/base/catalog.yml <<'Y'
"{a}": {type: text, path: "data/any/{a}.txt"}
"{a}_{b}": {type: text, path: "data/two/{a}-{b}.txt"}
"model_{b}": {type: text, path: "data/models/{b}.txt"}
Y
    write pipeline.lua <<'L'
return pipeline{
  node{ name = "x", outputs = { "plain", "x_y", "model_big" }, func = function() return "1", "2", "3" end },
}
L
    run_flow 0 run
    equals "$(cat data/any/plain.txt)" 1
    equals "$(cat data/two/x-y.txt)" 2
    equals "$(cat data/models/big.txt)" 3
}

test_versioned_saves_and_load_versions() {
    write conf/base/catalog.yml <<'Y'
model: {type: text, path: data/model.txt, versioned: true}
Y
    write pipeline.lua <<'L'
return pipeline{
  node{ name = "train", inputs = "params:v", outputs = "model", func = function(v) return "model " .. v end },
}
L
    write use.lua <<'L'
return pipeline{
  node{ name = "use", inputs = "model", outputs = "used", func = function(m) print("using " .. m) return m end },
}
L
    run_flow 0 run --params v=1
    sleep 0.01
    run_flow 0 run --params v=2
    versions=$(ls data/model.txt)
    equals "$(echo "$versions" | wc -l)" 2 "versions"
    first=$(echo "$versions" | head -n 1)
    equals "$(cat "data/model.txt/$first/model.txt")" "model 1"
    run_flow 0 run use.lua
    contains "$OUT" "using model 2"
    run_flow 0 run use.lua --load-versions "model:$first"
    contains "$OUT" "using model 1"
    run_flow 2 run use.lua --load-versions "model:2000-01-01T00.00.00.000Z"
    contains "$ERR" "there is no data/model.txt/2000-01-01T00.00.00.000Z/model.txt"
    run_flow 2 run use.lua --load-versions "model:yesterday"
    contains "$ERR" "--load-versions: 'model:yesterday' is not NAME:VERSION"
    run_flow 2 run --params v=3 --load-versions "model:$first"
    contains "$ERR" "this run saves 'model' (step 'train')"
    # a selection that does not run the step saving it loads the pinned
    # version (Kedro's `--from-nodes use --load-versions model:…`)
    write both.lua <<'L'
return pipeline{
  node{ name = "train", inputs = "params:v", outputs = "model", func = function(v) return "model " .. v end },
  node{ name = "use", inputs = "model", outputs = "used", func = function(m) print("using " .. m) return m end },
}
L
    write conf/base/parameters.yml <<'Y'
v: 2
Y
    run_flow 0 run both.lua
    run_flow 0 run both.lua --from-nodes use --load-versions "model:$first"
    contains "$OUT" "using model 1"
    run_flow 2 run both.lua --nodes train,use --load-versions "model:$first"
    contains "$ERR" "this run saves 'model' (step 'train')"
}

test_lua_dataset_refuses_functions() {
    write conf/base/catalog.yml <<'Y'
state: {type: lua, path: data/state.lua}
Y
    write pipeline.lua <<'L'
return pipeline{ node{ name = "bad", outputs = "state", func = function() return { f = print } end } }
L
    run_flow 1 run
    contains "$ERR" "step 'bad': output 'state' is a lua dataset (conf/base/catalog.yml:1), but value.f is a function"
    [ ! -e data/state.lua ] || { echo "a partial output was left"; return 1; }
}

test_command_writing_bad_json_fails_itself_and_commits_nothing() {
    write conf/base/catalog.yml <<'Y'
table: {type: json, path: data/table.json}
side: {type: file, path: data/side.txt}
Y
    write conf/base/parameters.yml <<'Y'
body: '{"rows": 2}'
Y
    write pipeline.lua <<'L'
return pipeline{
  node{ name = "produce", inputs = "params:body", outputs = { t = "table", s = "side" },
        command = "printf '%s' ${params.body} > ${outputs.s}; printf '%s' ${params.body} > ${outputs.t}" },
  node{ name = "consume", inputs = "table", outputs = "n", func = function(t) print("rows=" .. t.rows) return t.rows end },
}
L
    run_flow 0 run
    contains "$OUT" "rows=2"
    run_flow 1 run --params 'body=not json'
    contains "$ERR" "step 'produce' exited 0 but its output 'table' (a json dataset, conf/base/catalog.yml:1) is not valid JSON"
    not_contains "$ERR" "step 'consume'"
    contains "$ERR" "not run: consume"
    equals "$(cat data/table.json)" '{"rows": 2}' "the previous output"
    equals "$(cat data/side.txt)" '{"rows": 2}' "the previous output beside it"
    local states
    states=$(python3 -c 'import json; print(" ".join(s["name"] + "=" + s["state"] for s in json.load(open(".flow/runs/latest/run.json"))["steps"]))')
    equals "$states" "produce=failed consume=not run" "run.json's step states"
    run_flow 1 run --resume
    contains "$ERR" "step 'produce' exited 0 but its output 'table' (a json dataset, conf/base/catalog.yml:1) is not valid JSON"
    run_flow 0 run
    contains "$ERR" "0 done, 2 up to date"
}

test_write_past_the_file_size_limit_fails_the_step_and_commits_nothing() {
    write conf/base/catalog.yml <<'Y'
small: {type: json, path: data/small.json}
big: {type: text, path: data/big.txt}
Y
    write conf/base/parameters.yml <<'Y'
n: 10
Y
    write pipeline.lua <<'L'
return pipeline{
  node{ name = "w", inputs = "params:n", outputs = { "small", "big" },
        func = function(n) return { n = n }, string.rep("x", n) end },
  node{ name = "m", inputs = "params:n", outputs = "mem", func = function(n) return string.rep("y", n) end },
  node{ name = "use", inputs = "mem", func = function(s) print("mem=" .. #s) end },
  node{ name = "r", inputs = "params:n", outputs = "result", func = function(n) return string.rep("r", n) end },
}
L
    run_flow 0 run
    contains "$OUT" "mem=10"
    # a 64 KiB file-size limit, SIGXFSZ ignored: write() fails with EFBIG
    ( trap '' XFSZ; ulimit -f 64; run_flow 1 run -k --params n=200000 )
    ERR=$(cat stderr.txt)
    contains "$ERR" "step 'w': cannot save output 'big': cannot write "
    contains "$ERR" "File too large"
    # a large value only steps read is not written at all; a result is
    contains "$ERR" "done     m"
    contains "$(cat stdout.txt)" "mem=200000"
    contains "$ERR" "step 'r': cannot cache output 'result': "
    not_contains "$ERR" "stack traceback"
    equals "$(tr -d ' \t\n' < data/small.json)" '{"n":10}' "the output written before the failed one"
    equals "$(cat data/big.txt)" "xxxxxxxxxx" "the output that hit the limit"
    equals "$(ls -A data)" "big.txt
small.json" "nothing beside the outputs"
    run_flow 0 run --params n=200000
    contains "$ERR" "2 done, 2 up to date"
    equals "$(wc -c < data/big.txt)" "200000"
}

test_failed_step_keeps_the_previous_output_whole() {
    write conf/base/catalog.yml <<'Y'
out: {type: file, path: data/out.txt}
Y
    write pipeline.lua <<'L'
return pipeline{ node{ name = "w", outputs = { o = "out" }, inputs = "params:fail",
                       command = "echo partial > ${outputs.o}; [ ${params.fail} = no ]" } }
L
    write conf/base/parameters.yml <<'Y'
fail: "no"
Y
    run_flow 0 run
    run_flow 1 run --params fail=yes
    equals "$(cat data/out.txt)" "partial" "previous output"
    equals "$(ls -A data)" "out.txt" "no temporary files next to the output"
}

test_bad_catalog_entries() {
    write pipeline.lua <<'L'
return pipeline{ node{ name = "a", outputs = "x", func = function() return 1 end } }
L
    write conf/base/catalog.yml <<'Y'
x: {type: jsn, path: data/x.json}
Y
    run_flow 2 run
    contains "$ERR" "conf/base/catalog.yml:1: catalog entry 'x': unknown type 'jsn' (did you mean 'json'?)"
    # a type that is no name is said to be what it is, not "table: 0x55…"
    local t
    for t in '[json]:list' '{a: 1}:mapping' '3:number' 'true:boolean'; do
        printf 'x: {type: %s, path: data/x.json}\n' "${t%:*}" > conf/base/catalog.yml
        run_flow 2 run
        contains "$ERR" "conf/base/catalog.yml:1: catalog entry 'x': type must be one of "
        contains "$ERR" ", got a ${t##*:}"
        not_contains "$ERR" "0x"
    done
    write conf/base/catalog.yml <<'Y'
x:
  type: json
  pth: data/x.json
Y
    run_flow 2 run
    contains "$ERR" "catalog entry 'x': unknown field 'pth' (did you mean 'path'?)"
    write conf/base/catalog.yml <<'Y'
x: {type: file}
Y
    run_flow 2 run
    contains "$ERR" "catalog entry 'x': type file needs path:"
    write conf/base/catalog.yml <<'Y'
"{a}_x": {type: json, path: "data/{b}.json"}
Y
    run_flow 2 run
    contains "$ERR" "path uses {b}, which the name pattern does not have"
}

test_missing_raw_input_is_named() {
    catalog_project
    rm data/raw.txt
    run_flow 2 run
    contains "$ERR" "the pipeline reads datasets that are not available"
    contains "$ERR" "'raw' (text dataset, conf/base/catalog.yml:1), needed by 'parse' (pipeline.lua:2): there is no file at data/raw.txt"
    # No selection left anything out: running "their producers" would not help.
    not_contains "$ERR" "run their producers" stderr
    not_contains "$ERR" "selection" stderr
}

test_unused_catalog_entry_is_a_warning() {
    catalog_project
    cat >>conf/base/catalog.yml <<'Y'
sorted_copy: {type: file, path: data/sorted_copy.txt}
Y
    run_flow 0 run
    contains "$ERR" "warning: conf/base/catalog.yml:12: catalog entry 'sorted_copy' is used by no step"
    not_contains "$ERR" "entry 'raw'" stderr
    # an entry a registered pipeline uses is not unused
    cat >>pipeline.lua <<'L'
flow.register("copy", pipeline{ node{ name = "copy", inputs = "sorted", outputs = "sorted_copy",
                                      command = "cp ${inputs.sorted} ${outputs.sorted_copy}" } })
L
    sed -i '1s/^return /local p = /' pipeline.lua
    echo 'return p' >>pipeline.lua
    run_flow 0 run
    not_contains "$ERR" "used by no step" stderr
}

test_raw_input_change_reruns_its_readers() {
    catalog_project
    run_flow 0 run
    echo "5 4" > data/raw.txt
    run_flow 0 run --explain
    contains "$ERR" "explain: parse runs: input 'raw' changed"
    equals "$(cat data/summaries/train.txt)" "n=2 sum=9 mean=4.5 yes 45"
}

test_catalog_list_command_output_is_a_file() {
    write pipeline.lua <<'L'
return pipeline{
  node{ func = function() return "x" end, outputs = "rows", name = "load" },
  node{ command = "cat ${inputs.rows} > ${outputs.out}", inputs = "rows", outputs = "out", name = "c" },
}
L
    run_flow 0 catalog list
    contains "$OUT" "rows     memory  in memory"
    contains "$OUT" "out      file    .flow/data/out"
    not_contains "$(grep '^out' stdout.txt)" "in memory" "the command output's row"
}
