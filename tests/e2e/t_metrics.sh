# t_metrics.sh — what steps report of themselves (flow.metrics): a Lua step
# marked metrics = true returns them after its outputs, flow.log_metric adds
# a series, a command writes ${outputs.metrics}; they reach run.json, the
# journal, flow.run's result and the next run's record of an up-to-date step.

# run.json's metrics, one line each: "<step or run> <name>=<value> ... [series ...]"
show_metrics() {
    python3 - "$1" <<'P'
import json, sys
d = json.load(open(sys.argv[1]))
def fmt(m): return " ".join(f"{k}={m[k]:g}" for k in sorted(m)) if m else "-"
print("run", fmt(d["metrics"]))
for s in d["steps"]:
    line = f'{s["name"]} {s["state"]} {fmt(s["metrics"])}'
    if "series" in s:
        line += " series " + " ".join(f'{k}={",".join(f"{v:g}" for v in s["series"][k])}' for k in sorted(s["series"]))
    print(line)
P
}

metrics_project() {
    write conf/base/parameters.yml <<'Y'
lr: 0.5
Y
    write pipeline.lua <<'L'
local function prep() return { 1, 2, 3 } end
local function train(data, lr)
  local loss = 1.0
  for epoch = 1, 3 do loss = loss * (1 - lr); flow.log_metric("loss", loss) end
  return "model", { val_loss = loss, acc = 0.25 + lr }
end
local function evaluate(model) return { auc = 0.75 } end
return pipeline{
  node{ func = prep, outputs = "data" },
  node{ func = train, inputs = { "data", "params:lr" }, outputs = "model", metrics = true },
  node{ func = evaluate, inputs = "model", metrics = true },
  node{ command = [[printf '{"f1": 0.5, "acc": [0.125, 0.25]}' > ${outputs.metrics}]],
        outputs = { metrics = "cmd_metrics" }, name = "score" },
}
L
}

test_steps_report_metrics_to_run_json_and_the_journal() {
    metrics_project
    run_flow 0 run
    contains "$ERR" "flow: metrics: auc 0.75, f1 0.5, loss 0.125, score.acc 0.25, train.acc 0.75, val_loss 0.125"
    equals "$(show_metrics .flow/runs/latest/run.json)" "run auc=0.75 f1=0.5 loss=0.125 score.acc=0.25 train.acc=0.75 val_loss=0.125
prep done -
train done acc=0.75 loss=0.125 val_loss=0.125 series loss=0.5,0.25,0.125
evaluate done auc=0.75
score done acc=0.25 f1=0.5 series acc=0.125,0.25"
    contains "$(cat .flow/runs/latest/journal.jsonl)" '"metrics":{"acc":0.75,"loss":0.125,"val_loss":0.125}'
    contains "$(cat .flow/runs/latest/journal.jsonl)" '"series":{"loss":[0.5,0.25,0.125]}'
    # the command's metrics file is its output dataset too
    equals "$(cat .flow/data/cmd_metrics)" '{"f1": 0.5, "acc": [0.125, 0.25]}'
}

# A step that need not run still reports the metrics it had: a sweep's
# trial that hits the cache keeps its score.
test_up_to_date_steps_keep_their_metrics() {
    metrics_project
    run_flow 0 run
    first=$(show_metrics .flow/runs/latest/run.json)
    run_flow 0 run
    contains "$ERR" "0 done, 4 up to date"
    equals "$(show_metrics .flow/runs/latest/run.json)" "${first//done/up to date}"
    # ... and from the journal alone, as after a kill -9 that left state.log unsaved
    rm -rf .flow
    run_flow 0 run
    rm .flow/cache/state.log .flow/cache/merged_runs
    run_flow 0 run
    contains "$ERR" "0 done, 4 up to date"
    contains "$(show_metrics .flow/runs/latest/run.json)" "train up to date acc=0.75 loss=0.125 val_loss=0.125 series loss=0.5,0.25,0.125"
    # a changed parameter reruns train and its metrics change with it
    sed -i 's/lr: 0.5/lr: 0.25/' conf/base/parameters.yml
    run_flow 0 run
    contains "$(show_metrics .flow/runs/latest/run.json)" "train done acc=0.5 loss=0.421875 val_loss=0.421875"
}

test_flow_run_returns_metrics() {
    metrics_project
    mv pipeline.lua steps.lua
    write pipeline.lua <<'L'
local p = dofile("steps.lua")
for _, lr in ipairs({ 0.5, 0.25 }) do
  local r = flow.run(p, { params = { lr = lr } })
  print(string.format("lr=%g status=%s val_loss=%g train.acc=%g steps.train.val_loss=%g series=%d",
    lr, r.status, r.metrics.val_loss, r.metrics["train.acc"], r.steps.train.metrics.val_loss,
    #r.steps.train.series.loss))
end
L
    run_flow 0 run -q
    contains "$OUT" "lr=0.5 status=ok val_loss=0.125 train.acc=0.75 steps.train.val_loss=0.125 series=3"
    contains "$OUT" "lr=0.25 status=ok val_loss=0.421875 train.acc=0.5 steps.train.val_loss=0.421875 series=3"
}

test_bad_metrics_fail_the_step() {
    write pipeline.lua <<'L'
return pipeline{ node{ func = function() return 1, { loss = "low" } end, outputs = "x", name = "t", metrics = true } }
L
    run_flow 1 run
    contains "$ERR" "step 't' is marked metrics = true: it returns its metrics (a table) after its outputs, as value 2, or logs them with flow.log_metric; metric 'loss' is a string"
    sed -i 's/return 1, { loss = "low" }/return 1/' pipeline.lua
    run_flow 1 run
    contains "$ERR" "metrics must be a table of name = number, got nil"
    sed -i 's/return 1 end/return 1, { loss = 0\/0 } end/' pipeline.lua
    run_flow 1 run
    contains "$ERR" "metric 'loss' is"
    write pipeline.lua <<'L'
return pipeline{ node{ func = function() flow.log_metric("loss", 1) return 1 end, outputs = "x", name = "t" } }
L
    run_flow 1 run
    contains "$ERR" "flow.log_metric: step 't' is not marked metrics = true"
    write pipeline.lua <<'L'
return pipeline{ node{ func = function() flow.log_metric("loss", "x") return 1 end, outputs = "x", name = "t",
                       metrics = true } }
L
    run_flow 1 run
    contains "$ERR" "flow.log_metric: metric 'loss': the value must be a finite number, got string"
    write pipeline.lua <<'L'
flow.log_metric("loss", 1)
L
    run_flow 2 run
    contains "$ERR" "pipeline.lua:1: flow.log_metric: called outside a step"
    # a command's metrics file that is not a JSON object: nothing is committed
    write pipeline.lua <<'L'
return pipeline{ node{ command = "echo '[1, 2]' > ${outputs.metrics}; echo kept > ${outputs.other}",
                       outputs = { metrics = "m", other = "o" }, name = "c" } }
L
    run_flow 1 run
    contains "$ERR" "step 'c' exited 0 but its metrics (output 'm', \${outputs.metrics}) is not a JSON object of name: number"
    [ ! -e .flow/data/o ] || { echo "an output was committed"; return 1; }
    write pipeline.lua <<'L'
return pipeline{ node{ command = [[echo '{"a": true}' > ${outputs.metrics}]], outputs = { metrics = "m" }, name = "c" } }
L
    run_flow 1 run
    contains "$ERR" "metric 'a' is a boolean"
    no_crash
}

test_metrics_true_is_for_lua_steps() {
    write pipeline.lua <<'L'
return pipeline{ node{ command = "true", name = "c", metrics = true } }
L
    run_flow 2 run
    contains "$ERR" "pipeline.lua:1: node: metrics = true is for Lua function steps"
    contains "$ERR" "\${outputs.metrics}"
    sed -i 's/metrics = true/metrics = "yes"/' pipeline.lua
    run_flow 2 run
    contains "$ERR" "pipeline.lua:1: node: metrics must be true or false, got string"
}

# A distributed Lua step runs on every rank in child processes: what the
# master rank returns and logs comes back.
test_distributed_lua_step_reports_metrics() {
    write pipeline.lua <<'L'
local train = distributed_job{ framework = "pytorch", num_nodes = 2 }(function()
  flow.log_metric("loss", 0.5)
  flow.log_metric("loss", 0.25)
  return "m", { rank_seen = flow.rank() }
end)
return pipeline{ node{ func = train, outputs = "model", name = "train", metrics = true } }
L
    run_flow 0 run --distributed=local
    equals "$(show_metrics .flow/runs/latest/run.json)" "run loss=0.25 rank_seen=0
train done loss=0.25 rank_seen=0 series loss=0.5,0.25"
}
