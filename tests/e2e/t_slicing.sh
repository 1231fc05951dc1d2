# t_slicing.sh — running part of a pipeline (selected steps that are up to
# date are still skipped; --force reruns them), and the failure report that
# says how to resume.

slice_project() {
    write pipeline.lua <<'L'
local function mark(name) return function(...) io.open("ran_" .. name, "w"):close() return 1 end end
return pipeline{
  node{ func = mark("load"), outputs = "a", name = "load", tags = "data" },
  node{ command = "touch ran_prep; echo prep > ${outputs.b}", inputs = "a", outputs = "b", name = "prep", tags = "data" },
  node{ func = mark("train"), inputs = "b", outputs = "c", name = "train", tags = { "ml", "gpu" } },
  node{ func = function(c) io.open("ran_eval", "w"):close()
                            if os.getenv("FAIL_EVAL") then error("eval broke") end return 1 end,
        inputs = "c", outputs = "d", name = "eval", tags = "ml" },
  node{ func = mark("report"), inputs = "d", outputs = "e", name = "report" },
  node{ func = mark("side"), outputs = "s", name = "side", tags = "data" },
}
L
}

ran() { ls ran_* 2>/dev/null | sed 's/ran_//' | sort | tr '\n' ' '; }

test_failure_lists_steps_and_resume_command() {
    slice_project
    FAIL_EVAL=1 run_flow 1 run -j 1 -k
    contains "$ERR" "failed: eval"
    contains "$ERR" "not run: report"
    id=$(readlink .flow/runs/latest)
    contains "$ERR" "after a fix, finish it with: flow run --resume $id"
    rm -f ran_*
    # -n previews the resume: what it would run, and nothing runs
    run_flow 0 run --resume "$id" -n
    contains "$ERR" "what resuming run $id would do:"
    contains "$OUT" "eval    runs: "
    contains "$OUT" "report  runs: it reads what 'eval' makes, which runs first"
    contains "$OUT" "2 of 6 selected steps would run"
    equals "$(ran)" "" "steps run by the preview"
    run_flow 0 run --resume "$id"
    equals "$(ran)" "eval report " "steps rerun"
    contains "$ERR" "resuming run $id"
}

test_nodes_and_from_nodes() {
    slice_project
    run_flow 0 run                         # every step's output is saved or cached
    rm -f ran_*
    run_flow 0 run --from-nodes train
    equals "$(ran)" "" "--from-nodes on an up-to-date pipeline"
    contains "$ERR" "0 done, 3 up to date, 3 skipped"
    run_flow 0 run --from-nodes train --force
    equals "$(ran)" "eval report train " "--from-nodes --force"
    contains "$ERR" "3 done, 3 skipped"
}

test_to_nodes_and_tags_intersect() {
    slice_project
    run_flow 0 run --to-nodes prep
    equals "$(ran)" "load prep " "--to-nodes"
    rm -f ran_*
    run_flow 0 run --tags data
    equals "$(ran)" "side " "--tags (load and prep are up to date)"
    rm -f ran_*
    run_flow 0 run --tags data,ml --to-nodes train --force
    equals "$(ran)" "load prep train " "--tags with --to-nodes"
}

test_from_inputs_and_to_outputs() {
    slice_project
    run_flow 0 run --to-outputs b
    equals "$(ran)" "load prep " "--to-outputs"
    rm -f ran_*
    run_flow 0 run --from-inputs b
    equals "$(ran)" "eval report train " "--from-inputs"
}

test_missing_saved_input_is_an_error() {
    slice_project
    run_flow 2 run --nodes eval
    contains "$ERR" "'c' (memory dataset), needed by 'eval' (pipeline.lua:"
    contains "$ERR" "produced by 'train': no earlier run left it in the cache"
    contains "$ERR" "(run their producers too"
    equals "$(ran)" "" "steps run"
}

test_empty_and_unknown_selections() {
    slice_project
    run_flow 2 run --nodes load --tags ml
    contains "$ERR" "matches no step"
    run_flow 2 run --from-nodes trian
    contains "$ERR" "--from-nodes: no step named 'trian' (did you mean 'train'?)"
    # the engine's rule (a swap of neighbours is one edit), not a second one in Lua
    run_flow 2 run --nodes erpotr
    contains "$ERR" "--nodes: no step named 'erpotr' (did you mean 'report'?)"
    run_flow 2 run --nodes lod
    contains "$ERR" "--nodes: no step named 'lod' (did you mean 'load'?)"
    run_flow 2 run --nodes ld
    not_contains "$ERR" "did you mean"
    run_flow 2 run --to-outputs nothing
    contains "$ERR" "--to-outputs: no step produces 'nothing'"
}

test_dry_run_shows_selection() {
    slice_project
    run_flow 0 run -n --to-nodes prep --params x=1
    contains "$OUT" "1  load"
    contains "$OUT" "2  prep"
    not_contains "$OUT" "train"
    equals "$(ran)" "" "steps run by a dry run"
    run_flow 2 run -n --from-nodes eval      # what the real run would refuse, a dry run refuses too
    contains "$ERR" "'c' (memory dataset), needed by 'eval' (pipeline.lua:"
}

test_flow_run_selection_from_lua() {
    slice_project
    mv pipeline.lua p.lua
    write driver.lua <<'L'
local flow = require("flow")
local p = dofile("p.lua")
local r = flow.run(p, { tags = { "data" } })
print("status=" .. r.status .. " side=" .. r.steps.side.state .. " train=" .. r.steps.train.state)
L
    run_flow 0 run driver.lua
    contains "$OUT" "status=ok side=done train=skipped"
}

# flow list takes the selection flags of flow run, and --namespace selects
# the steps inside a namespace (nested ones too), in run, list and compile.
test_list_selection_and_namespace() {
    write pipeline.lua <<'L'
local function f(x) return x end
local inner = pipeline{ node{ func = f, inputs = "x", outputs = "y", name = "fit", tags = "ml" } }
return pipeline{
  node{ func = function() return 1 end, outputs = "raw", name = "load", tags = "data" },
  pipeline{ pipeline{ inner, namespace = "deep", inputs = { x = "raw" } }, namespace = "model", inputs = "raw" },
  node{ func = f, inputs = "model.deep.y", outputs = "r", name = "report" },
  node{ func = f, inputs = "r", outputs = "s", name = "model.summary" },     -- a dotted name, in no namespace
}
L
    run_flow 0 list --tags ml
    equals "$(printf '%s\n' "$OUT" | tail -n +2 | awk '{print $1, $2}')" "1 model.deep.fit" "steps listed"
    run_flow 0 list --to-nodes model.deep.fit --format json
    names=$(printf '%s' "$OUT" | python3 -c 'import json,sys; print([(r["index"], r["name"]) for r in json.load(sys.stdin)])')
    equals "$names" "[(1, 'load'), (2, 'model.deep.fit')]" "listed"
    run_flow 0 list --namespace model --format json
    names=$(printf '%s' "$OUT" | python3 -c 'import json,sys; print([r["name"] for r in json.load(sys.stdin)])')
    equals "$names" "['model.deep.fit']" "steps in namespace model"
    run_flow 2 list --namespace modle,model.deep,nothing
    contains "$ERR" "--namespace: no namespace named 'modle' (did you mean 'model'?) or 'nothing'"
    run_flow 2 list --namespace model --tags data
    contains "$ERR" "matches no step"
    run_flow 0 run -q
    run_flow 0 run --namespace model --force --progress plain
    contains "$ERR" "done     model.deep.fit"
    not_contains "$ERR" "report"
    not_contains "$ERR" "load"
}
