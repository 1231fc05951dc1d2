# t_sweep.sh — flow sweep and flow.sweep: trials of examples/sweep (a tiny
# linear model trained by gradient descent in a Python command) ranked by
# the metric it reports, the shared steps run once, failed trials reported.

sweep_project() {
    copy_example sweep ex
    cd ex
}

# The runs in which step $1 ran (its step_end "ok"); latest is a link to one.
runs_of() {
    grep -l "\"status\":\"ok\",\"step\":\"$1\"" .flow/runs/2*/journal.jsonl 2>/dev/null | wc -l
}

test_grid_sweep_ranks_trials_and_finds_the_best() {
    sweep_project
    run_flow 0 sweep --grid lr=0.01,0.1,0.5 --metric val_loss
    # the table: best first, marked; the largest stable rate wins after 20 epochs
    first=$(printf '%s\n' "$OUT" | sed -n 2p)
    [[ $first == "*  3      0.5"* ]] || { echo "best row: $first"; echo "$OUT"; return 1; }
    contains "$OUT" "   trial  lr    val_loss  status  time"
    contains "$ERR" "sweep "
    contains "$ERR" "3 of 3 trials ok, best: trial 3 (val_loss 0.030403)"
    dir=$(ls -d .flow/sweeps/*)
    equals "$(head -1 "$dir/results.csv")" "trial,lr,val_loss,status,elapsed,run_id,error"
    equals "$(sed -n 2p "$dir/results.csv" | cut -d, -f1-4)" "3,0.5,0.030402956734308,ok"
    python3 - "$dir/results.json" <<'P'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["best"] == 3 and d["metric"] == "val_loss" and d["goal"] == "min" and d["sampler"] == "grid", d
assert [t["params"]["lr"] for t in d["trials"]] == [0.5, 0.1, 0.01], d["trials"]
assert all(len(t["metrics"]) == 2 and t["status"] == "ok" for t in d["trials"]), d["trials"]
assert [t["best"] for t in d["trials"]] == [True, False, False]
P
    # each trial is a run of its own, named as the sweep's trial
    contains "$(cat .flow/runs/*/run.json)" "trial 3/3"
    # the steps that read no swept parameter ran once for the whole sweep
    equals "$(runs_of make_data) $(runs_of split) $(runs_of train)" "1 1 3"
    # ranked the other way: the state keeps one record per step (the last
    # trial's), so train runs again for every trial; make_data does not
    run_flow 0 sweep --grid lr=0.01,0.1,0.5 --metric val_loss --goal max -q
    equals "$(printf '%s\n' "$OUT" | sed -n 2p | cut -c1-14)" "*  1      0.01"
    equals "$(runs_of make_data) $(runs_of train)" "1 6"
}

test_random_sweep_is_reproducible() {
    sweep_project
    run_flow 0 sweep --grid lr=0.01,0.05,0.1,0.5 --grid epochs=5,10,20 --random 3 --seed 7 --metric val_loss -q
    draw() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(sorted((t["trial"], t["params"]["lr"], t["params"]["epochs"]) for t in d["trials"]))' "$1"; }
    a=$(draw "$(ls -d .flow/sweeps/* | tail -1)/results.json")
    run_flow 0 sweep --grid lr=0.01,0.05,0.1,0.5 --grid epochs=5,10,20 --random 3 --seed 7 --metric val_loss -q
    equals "$(draw "$(ls -d .flow/sweeps/* | tail -1)/results.json")" "$a" "the same seed's trials"
    run_flow 0 sweep --grid lr=0.01,0.05,0.1,0.5 --grid epochs=5,10,20 --random 3 --seed 8 --metric val_loss -q
    [ "$(draw "$(ls -d .flow/sweeps/* | tail -1)/results.json")" != "$a" ] || { echo "seed 8 drew seed 7's trials"; return 1; }
}

test_a_failed_trial_does_not_stop_the_sweep() {
    sweep_project
    run_flow 0 sweep --grid lr=0.01,-1,0.5 --metric val_loss
    contains "$ERR" "train.py: --lr must be positive"
    contains "$ERR" "2 of 3 trials ok, best: trial 3"
    contains "$OUT" "2      -1    -         failed"
    contains "$(cat .flow/sweeps/*/results.csv)" "failed"
    contains "$(cat .flow/sweeps/*/results.csv)" "step 'train' failed"
    # no trial succeeds: exit 1
    run_flow 1 sweep --grid lr=-1,-2 --metric val_loss -q
    # a metric no step reports: the trials ran, none is best
    run_flow 1 sweep --grid lr=0.1 --metric val_los
    contains "$OUT" "ok (no metric)"
    contains "$ERR" "no trial has the metric"
}

test_flow_sweep_from_lua() {
    sweep_project
    run_flow 0 run sweep.lua -q
    contains "$OUT" "best: lr=0.5 (val_loss 0.0304)"
    write driver.lua <<'L'
local p = dofile("pipeline.lua")
local trials = flow.sweep{ pipeline = p, space = { lr = flow.loguniform(0.01, 0.5), epochs = flow.choice{ 5, 10 } },
                           sampler = "random", trials = 4, seed = 3, metric = "val_loss", quiet = true }
assert(#trials == 4 and trials.best == trials[1], "sorted, best first")
for i = 2, #trials do assert(trials[i - 1].metric <= trials[i].metric, "ranked by val_loss") end
for _, t in ipairs(trials) do
  assert(t.params.lr >= 0.01 and t.params.lr < 0.5 and (t.params.epochs == 5 or t.params.epochs == 10), "drawn")
end
print("dir", trials.dir:match("^%.flow/sweeps/") ~= nil, "metrics", trials.best.metrics.train_loss ~= nil)
L
    run_flow 0 run driver.lua -q
    contains "$OUT" "dir	true	metrics	true"
}

test_sweep_errors() {
    sweep_project
    run_flow 2 sweep --grid lr=0.1
    contains "$ERR" "flow sweep needs --metric NAME"
    run_flow 2 sweep --metric val_loss
    contains "$ERR" "flow sweep needs --grid KEY=V1,V2"
    run_flow 2 sweep --grid lr --metric val_loss
    contains "$ERR" "--grid takes KEY=V1,V2,..., got 'lr'"
    run_flow 2 sweep --grid lr=0.1,,0.2 --metric val_loss
    contains "$ERR" "--grid lr: an empty value at character 5 of '0.1,,0.2'"
    run_flow 2 sweep --grid .lr=1 --metric val_loss
    contains "$ERR" "--grid .lr=1: a parameter key (like lr or model.depth), got '.lr'"
    run_flow 2 sweep --grid lr=1 --metric ''
    contains "$ERR" "flow sweep needs --metric NAME"
    not_contains "$ERR" "internal error"
    run_flow 2 sweep --grid lr=0.1 --grid lr=0.2 --metric val_loss
    contains "$ERR" "--grid lr is given twice"
    run_flow 2 sweep --grid lr=0.1 --metric val_loss --goal best
    contains "$ERR" "--goal must be min or max"
    run_flow 2 sweep --grid lr=0.1 --metric val_loss --seed 3
    contains "$ERR" "--seed is the seed of --random N"
    run_flow 2 sweep --grid lr=0.1 --metric val_loss --grdi x=1
    contains "$ERR" "unknown option '--grdi' for 'flow sweep' (did you mean '--grid'?)"
    for bad in 'grid = { lr = {} }' 'grid = { lr = 0.1 }' 'space = { lr = { 1 } }, trials = 0' \
               'grid = { lr = { 1 } }, space = { x = { 1 } }' 'grid = { lr = { 1 } }, goal = "best"' \
               'grid = { lr = { 1, nil, 2 } }' 'grid = { lr = { 1 } }, parallel = 0' 'grid = { [".lr"] = { 1 } }'; do
        write driver.lua <<L
local p = dofile("pipeline.lua")
flow.sweep{ pipeline = p, metric = "val_loss", $bad }
L
        run_flow 2 run driver.lua -q
        contains "$ERR" "driver.lua:2: flow.sweep: "
    done
    write driver.lua <<'L'
local x = flow.uniform(1, 1)
L
    run_flow 2 run driver.lua
    contains "$ERR" "driver.lua:1: flow.uniform: the low end (1) must be below the high end (1)"
    write driver.lua <<'L'
flow.sweep{ grid = { lr = { 1 } }, metric = "val_loss" }
L
    run_flow 2 run driver.lua
    contains "$ERR" "driver.lua:1: flow.sweep: pipeline = the pipeline to run for each trial, got nil"
}

# report.html: one self-contained page — nothing it loads from anywhere —
# whose table sorts and whose charts show every trial, checked in a browser.
test_report_page_in_a_browser() {
    sweep_project
    run_flow 0 sweep --grid lr=0.01,0.1,0.5,1 --grid epochs=10,20 --metric val_loss --open -q
    page=$(ls -d "$PWD"/.flow/sweeps/*)/report.html
    contains "$OUT" "$page"
    if grep -Eq '(src|href)=|@import|url\(' "$page"; then echo "the page loads something:"; grep -Eo '(src|href)=[^ >]*' "$page"; return 1; fi
    page_dom "file://$page"
    # as written: best first, marked
    first=$(printf '%s\n' "$DOM" | grep -o '<tr[^>]*data-trial="[0-9]*"' | head -1)
    equals "$first" '<tr class="best" data-trial="7"' "the first row"
    # charts: per trial, against each swept parameter, over the epochs
    for title in "val_loss per trial" "val_loss against epochs" "val_loss against lr" "val_loss over epochs"; do
        contains "$DOM" "aria-label=\"$title\""
    done
    equals "$(printf '%s\n' "$DOM" | grep -o '<circle class="point[^"]*" ' | wc -l)" "24" "points: 8 trials in 3 charts"
    equals "$(printf '%s\n' "$DOM" | grep -o '<circle class="point best"' | wc -l)" "3" "the best trial's points"
    equals "$(printf '%s\n' "$DOM" | grep -o '<polyline class="series' | wc -l)" "8" "a line per trial"
    # sorted by the page's script: by lr, then by val_loss descending
    page_dom "file://$page#sort=lr"
    contains "$DOM" '<th data-key="lr" class="sorted-asc">'
    equals "$(printf '%s\n' "$DOM" | grep -o '<tr[^>]*data-trial="[0-9]*"><td>[0-9]*</td><td>[0-9]*</td><td>[^<]*' | sed 's/.*<td>//' | tr '\n' ' ')" \
        "0.01 0.01 0.1 0.1 0.5 0.5 1 1 " "lr column after sorting"
    page_dom "file://$page#sort=metric,desc"
    equals "$(printf '%s\n' "$DOM" | grep -o 'data-trial="[0-9]*"><td>' | head -1)" 'data-trial="8"><td>' "the worst trial first"
}

# A trial that fails when fail_<x> exists and waits when slow_<x> does.
resumable_project() {
    write pipeline.lua <<'L'
return pipeline{
  node{ func = function() return 1 end, outputs = "data", name = "prep" },
  node{ command = [[if [ -e fail_${params.x} ]; then exit 3; fi; if [ -e slow_${params.x} ]; then sleep 60; fi
                   printf '{"score": %s}' ${params.x} > ${outputs.metrics}]],
        inputs = { data = "data" }, outputs = { metrics = "scores" }, name = "score" },
}
L
    echo "x: 0" > params.yml; mkdir -p conf/base; mv params.yml conf/base/parameters.yml
}

test_resume_runs_only_the_trials_that_did_not_succeed() {
    resumable_project
    touch fail_2
    run_flow 0 sweep --grid x=1,2,3 --metric score --goal max
    contains "$ERR" "finish it with: flow sweep --resume"
    equals "$(runs_of score)" "2"
    rm fail_2
    run_flow 0 sweep --resume
    equals "$(runs_of score)" "3" "trials run: the failed one only"
    contains "$ERR" "resumed: 2 done before"
    contains "$ERR" "3 of 3 trials ok, best: trial 3 (score 3)"
    equals "$(ls .flow/sweeps | wc -l)" "1" "sweeps"
    # a resume takes no new trials or metric; an unknown sweep is named
    run_flow 2 sweep --resume --grid x=4 --metric score
    contains "$ERR" "--resume keeps the sweep's trials, metric and parameters: --grid cannot change them"
    run_flow 2 sweep --resume 1999
    contains "$ERR" "flow.sweep: resume: no sweep '1999' in .flow/sweeps"
}

test_resume_after_kill_keeps_the_finished_trials() {
    resumable_project
    touch slow_2
    run_flow_bg sweep --grid x=1,2,3 --metric score --goal max -q
    for _ in $(seq 200); do
        [ "$(cat .flow/sweeps/*/trials.jsonl 2>/dev/null | wc -l)" = 1 ] && break
        sleep 0.1
    done
    equals "$(cat .flow/sweeps/*/trials.jsonl | wc -l)" "1" "trials ended before the kill"
    sleep 0.5
    kill -9 "$FLOW_PID"; wait "$FLOW_PID" 2>/dev/null || true
    rm slow_2
    run_flow 0 sweep --resume
    contains "$ERR" "resumed: 1 done before"
    not_contains "$ERR" "trial 1/3"
    contains "$ERR" "trial 2/3"
    equals "$(runs_of score)" "3" "score ran once per trial"
    contains "$OUT" "*  3      3  3      ok"
}

# Ctrl-C to the sweep in the background: it exits 130, saying how to resume.
interrupt_sweep() {
    kill -INT "$FLOW_PID"
    set +e; wait "$FLOW_PID"; code=$?; set -e
    equals "$code" "130" "exit status after Ctrl-C"
    ERR=$(cat stderr.txt)
    contains "$ERR" "finish it with: flow sweep --resume"
}

test_ctrl_c_stops_the_sweep_and_resume_finishes_it() {
    resumable_project
    touch slow_2
    run_flow_bg sweep --grid x=1,2,3 --metric score --goal max
    for _ in $(seq 200); do
        grep -q "trial 2/3" stderr.txt 2>/dev/null && [ -n "$(ls .flow/runs/*/logs 2>/dev/null)" ] && break
        sleep 0.1
    done
    sleep 0.5
    interrupt_sweep
    not_contains "$ERR" "trial 3/3"
    contains "$(cat stdout.txt)" "interrupted"
    rm slow_2
    run_flow 0 sweep --resume -q
    contains "$OUT" "*  3      3  3      ok"
    equals "$(runs_of score)" "3" "score ran once per trial"
}

# prep reads no swept parameter; score takes a second, and can be made to
# take a minute (slow_<x>).
concurrent_project() {
    write pipeline.lua <<'L'
return pipeline{
  node{ func = function(n) return n * 2 end, inputs = "params:n", outputs = "data", name = "prep" },
  node{ command = [[if [ -e slow_${params.x} ]; then sleep 60; fi; sleep 1
                   printf '{"score": %s}' ${params.x} > ${outputs.metrics}; cat ${inputs.data} > ${outputs.copy}
                   echo ${params.x} >> ${outputs.copy}]],
        inputs = { data = "data" }, outputs = { metrics = "scores", copy = "copy" }, name = "score" },
}
L
    mkdir -p conf/base
    printf 'x: 0\nn: 1\n' >conf/base/parameters.yml
}

test_parallel_trials_overlap_and_share_steps_once() {
    concurrent_project
    run_flow 0 sweep --grid x=1,2,3 --metric score --goal max --parallel 3 -j 3
    contains "$OUT" "*  3      3  3      ok"
    contains "$ERR" "3 trials at once, 1 job each"
    contains "$ERR" "the steps every trial shares first: prep"
    contains "$ERR" "  trial 2/3: done     score"
    equals "$(runs_of prep) $(runs_of score)" "1 3" "runs of prep and score"
    equals "$(overlap_of score)" "overlap" "the trials' score steps"
    # each trial's command output is its own (its run's data directory)
    equals "$(cat .flow/runs/2*/data/copy | sort | tr '\n' ' ')" "1 2 2 2 2 3 " "the trials' copies"
    # again: prep is up to date; the state keeps one record per step (the
    # last trial's), so score runs again for the other two trials
    run_flow 0 sweep --grid x=1,2,3 --metric score --goal max --parallel 3 -j 3
    equals "$(runs_of prep) $(runs_of score)" "1 5" "runs after the same sweep again"
    contains "$OUT" "*  3      3  3      ok"
    # a file the catalog keeps, made from the swept parameters, would be
    # written by every trial at once: refused, naming it
    mkdir -p conf/base
    printf 'copy: {type: text, path: data/copy.txt}\n' >conf/base/catalog.yml
    run_flow 2 sweep --grid x=1,2 --metric score --parallel 2
    contains "$ERR" "parallel = 2: the trials would each write 'copy' (data/copy.txt"
    run_flow 0 sweep --grid x=1,2 --metric score
}

test_parallel_sweep_ctrl_c_and_resume() {
    concurrent_project
    touch slow_2
    run_flow_bg sweep --grid x=1,2,3 --metric score --goal max --parallel 2 -j 2
    for _ in $(seq 300); do
        [ "$(cat .flow/sweeps/*/trials.jsonl 2>/dev/null | grep -c '"trial"')" -ge 2 ] && break
        sleep 0.1
    done
    sleep 0.3
    interrupt_sweep
    rm slow_2
    run_flow 0 sweep --resume -q
    contains "$OUT" "*  3      3  3      ok"
    equals "$(runs_of score)" "3" "score ran once per trial"
}

# flow.spawn and flow.wait_all: runs at once from a Lua script, each with its
# parameters; an error in one task is raised once the others have ended.
test_spawn_and_wait_all() {
    concurrent_project
    write driver.lua <<'L'
local p = dofile("pipeline.lua")
local a = flow.spawn(flow.run, p, { params = { x = 5 } })
local b = flow.spawn(function() return flow.run(p, { params = { x = 7 } }).metrics.score end)
local r = flow.wait_all{ a, b }
print(r[1].status, r[1].metrics.score, r[2])
L
    run_flow 0 run driver.lua
    contains "$OUT" "ok	5	7"
    equals "$(overlap_of score)" "overlap" "the two runs' score steps"
    equals "$(runs_of score)" "2" "runs of score"
    write driver.lua <<'L'
local p = dofile("pipeline.lua")
local a = flow.spawn(function() error("boom") end)
local b = flow.spawn(flow.run, p, { params = { x = 9 } })
flow.wait_all{ a, b }
L
    run_flow 2 run driver.lua
    contains "$ERR" "driver.lua:2: boom"
    equals "$(runs_of score)" "3" "the other task's run ended first"
    # a task that cannot yield where it calls flow.run (inside string.gsub's
    # callback) runs that run itself, to its end
    write driver.lua <<'L'
local p = dofile("pipeline.lua")
local a = flow.spawn(function()
  local r
  string.gsub("x", "x", function() r = flow.run(p, { params = { x = 11 } }) end)
  return r.status
end)
print(flow.wait_all{ a }[1])
L
    run_flow 0 run driver.lua
    equals "$OUT" "ok" "a run where the task cannot yield"
    for bad in 'flow.spawn(42)|flow.spawn: expected a function, got number' \
               'flow.wait_all{ 1 }|flow.wait_all: item 1 is number, not a task' \
               'flow.wait_all{ flow.spawn(function() coroutine.yield(1) end) }|a task may wait only in flow.run'; do
        printf '%s\n' "${bad%%|*}" >driver.lua
        run_flow 2 run driver.lua
        contains "$ERR" "${bad#*|}"
    done
}

# A dotted key sets one nested parameter and keeps its siblings, as --params does.
test_dotted_keys_set_one_nested_parameter() {
    write conf/base/parameters.yml <<'Y'
model: { depth: 1, lr: 0.5 }
Y
    write pipeline.lua <<'L'
return pipeline{ node{ command = [[printf '{"score": %s, "lr": %s}' ${params.model.depth} ${params.model.lr} > ${outputs.metrics}]],
                       outputs = { metrics = "m" }, name = "score" } }
L
    run_flow 0 sweep --grid model.depth=2,4 --metric score --goal max -q
    contains "$OUT" "*  2      4            4      ok"
    contains "$(cat .flow/sweeps/*/results.json)" '"lr":0.5'
}

# Early stopping: a trial whose metric, logged per epoch, falls behind the
# trials before it stops there (Azure ML's bandit and median policies).
early_project() {
    write conf/base/parameters.yml <<'Y'
lr: 0.1
Y
    write pipeline.lua <<'L'
-- the loss after epoch e decays at rate lr; each epoch run is counted in a file
local function train(lr)
  local loss = 1.0
  for e = 1, 10 do
    loss = loss * (1 - lr)
    local f = assert(io.open("epochs.log", "a")); f:write(lr, "\n"); f:close()
    flow.log_metric("val_loss", loss)
  end
  return loss
end
return pipeline{ node{ func = train, inputs = "params:lr", outputs = "model", name = "train", metrics = true } }
L
}

epochs_of() { grep -cx "$1" epochs.log || true; }

test_early_stop_bandit_and_median() {
    early_project
    run_flow 0 sweep --grid lr=0.5,0.01,0.3,0.45 --metric val_loss --early-stop bandit,slack_factor=0.5,after=2
    # trial 1 (0.5) runs all 10 epochs; at epoch 2 its loss is 0.25: 0.01 (0.98) and
    # 0.3 (0.49) are more than 50 % worse and stop there; 0.45 (0.55^k against
    # 0.5^k) falls more than 50 % behind at epoch 5 (1.1^5 > 1.5)
    equals "$(epochs_of 0.5) $(epochs_of 0.01) $(epochs_of 0.3) $(epochs_of 0.45)" "10 2 2 5" "epochs run"
    contains "$ERR" "trial 2/4 stopped early: val_loss 0.9801 at value 2, worse than the best earlier trial's 0.25 there by more than the bandit slack (factor 0.5)"
    contains "$ERR" "1 of 4 trials ok, 3 stopped early, best: trial 1"
    not_contains "$ERR" "flow sweep --resume"
    contains "$OUT" "   2      0.01  0.9801       stopped"
    dir=$(ls -d .flow/sweeps/* | tail -1)
    python3 - "$dir/results.json" <<'P'
import json, sys
d = json.load(open(sys.argv[1]))
st = {t["trial"]: t["status"] for t in d["trials"]}
assert st == {1: "ok", 2: "stopped", 3: "stopped", 4: "stopped"}, st
assert [t["trial"] for t in d["trials"]] == [1, 2, 3, 4], d["trials"]
assert len(d["trials"][3]["metrics"] or {}) == 0, d["trials"][3]
assert d["trials"][1]["error"].startswith("stopped early: val_loss 0.9801 at value 2"), d["trials"][1]
P
    contains "$(cat "$dir/report.html")" '<tr class="stopped" data-trial="2">'
    contains "$(cat "$dir/report.html")" '<polyline class="series stopped" data-trial="3"'
    # resuming keeps the stopped trials: nothing runs again
    : >epochs.log
    run_flow 0 sweep --resume
    equals "$(grep -c . epochs.log || true)" 0 "epochs run on resume"
    run_flow 2 sweep --resume --early-stop median
    contains "$ERR" "--early-stop cannot change them"
    # median: by value k a trial's best is worse than the median of the running
    # averages; trial 1 is up to date (it ran in the first sweep), and the
    # series its record kept is what the others are measured against
    : >epochs.log
    run_flow 0 sweep --grid lr=0.5,0.3,0.01 --metric val_loss --early-stop median -q
    equals "$(epochs_of 0.5) $(epochs_of 0.3) $(epochs_of 0.01)" "0 1 1" "epochs run"
    contains "$OUT" "*  1      0.5   0.000976562  ok"
    # from Lua, with the same policy
    : >epochs.log
    write driver.lua <<'L'
local p = dofile("pipeline.lua")
local trials = flow.sweep{ pipeline = p, grid = { lr = { 0.5, 0.01 } }, metric = "val_loss",
                           early_stop = { policy = "bandit", slack_amount = 0.1, after = 3, every = 2 } }
print(trials[2].status, #trials[2].series)
L
    run_flow 0 run driver.lua -q
    contains "$OUT" "stopped	3"
}

test_early_stop_errors() {
    early_project
    for bad in 'policy = "truncation"' 'policy = "bandit", slack_factor = 0.1, slack_amount = 1' \
               'policy = "median", slack_factor = 0.1' 'policy = "bandit", after = 0' 'policy = "bandit", every = 1.5' \
               'policy = "bandit", slack_factor = -1' 'policy = "bandit", delay = 2'; do
        write driver.lua <<L
local p = dofile("pipeline.lua")
flow.sweep{ pipeline = p, grid = { lr = { 0.5 } }, metric = "val_loss", early_stop = { $bad } }
L
        run_flow 2 run driver.lua -q
        contains "$ERR" "driver.lua:2: flow.sweep: early_stop: "
    done
    run_flow 2 sweep --grid lr=0.5 --metric val_loss --early-stop bandit,slack_factor
    contains "$ERR" "--early-stop: 'slack_factor' is not key=value"
    run_flow 2 sweep --grid lr=0.5 --metric val_loss --early-stop bandit,after=x
    contains "$ERR" "--early-stop: after must be a whole number from 1"
    # each check of flow.sweep's, named by the flag (it was an internal error)
    local bad
    for bad in foo median,after=0 bandit,slack_factor=0.1,slack_amount=1 bandit,bogus=1 median,slack_factor=1; do
        run_flow 2 sweep --grid lr=0.5 --metric val_loss --early-stop "$bad"
        contains "$ERR" "flow: error: --early-stop: "
        not_contains "$ERR" "internal error"
    done
}

# --grid values are typed as --params types them: False is false (as text
# it was true in Lua, and both trials ran with the flag on), 0x10 is 16,
# null is null, a quoted value may hold a comma, [1,2] is a list.  A trial
# whose configuration refuses a value says why on the terminal.
test_grid_values_are_typed_as_params() {
    write conf/base/parameters.yml <<'Y'
flag: false
n: 1
Y
    write pipeline.lua <<'L'
return pipeline{ node{ name = "s", inputs = { "params:flag", "params:n" }, metrics = true,
  func = function(flag, n)
    print(string.format("got %s:%s %s:%s", type(flag), tostring(flag), math.type(n) or type(n),
                        type(n) == "table" and #n or tostring(n)))
    flow.log_metric("m", 1) end } }
L
    run_flow 0 sweep --grid flag=True,False,'"x,y"' --grid n=0x10,null,[1,2] --metric m
    contains "$OUT" "got boolean:true integer:16"
    contains "$OUT" "got boolean:false integer:16"
    contains "$OUT" "got string:x,y table:2"
    contains "$ERR" "trial 2/9: flag=true n=null"
    contains "$ERR" "flow: error: trial 2/9: step 's' (pipeline.lua:1) reads parameter 'n', which is null"
    contains "$ERR" "trial 3/9: flag=true n=[1,2]"
    # results.csv: JSON for a list or null, and each value under its heading
    # (a failed trial's missing metric shifted its status there)
    local csv; csv=$(cat .flow/sweeps/*/results.csv)
    contains "$csv" '3,true,"[1,2]",1,ok,'
    contains "$csv" '2,true,null,,failed,'
    not_contains "$(cat .flow/sweeps/*/report.html)" "table: 0x" "the report"
    # resumed, a null is null again (it was no value: the trial ran as n=1)
    run_flow 0 sweep --resume
    contains "$ERR" "resumed"
    not_contains "$OUT" "n=nil"
    contains "$OUT" "null"
}

# A completed trial's null is null too when the sweep is resumed: its
# report's chart indexed a value it had no slot for (internal error, and
# results.csv rewritten with the null gone).
test_a_resumed_sweep_keeps_a_done_trials_null() {
    write conf/base/parameters.yml <<'Y'
cfg: {k: 5}
Y
    write pipeline.lua <<'L'
return pipeline{ node{ name = "s", inputs = { "params:cfg" }, metrics = true, func = function(cfg)
  if cfg.k == 1 and not io.open("ok") then error("first time") end; flow.log_metric("m", 1) end } }
L
    run_flow 0 sweep --grid cfg.k=null,1 --metric m
    touch ok
    run_flow 0 sweep --resume
    contains "$(cat .flow/sweeps/*/results.csv)" "1,null,1,ok,"
}

# A swept key that cannot be set (a key under a number) would fail every
# trial alike, the reason only in results.json: it is the sweep's error,
# exit 2, before any trial runs.  A value that breaks one trial still fails
# only that trial (test_a_failed_trial_does_not_stop_the_sweep).
test_a_swept_key_that_cannot_be_set_is_the_sweeps_error() {
    sweep_project
    run_flow 2 sweep --grid lr.x=1,2 --metric val_loss
    contains "$ERR" "flow sweep: the swept parameters cannot be set: cannot set parameter 'lr.x': 'lr' is a number"
    [ ! -d .flow/sweeps ] || [ -z "$(ls .flow/sweeps)" ] || { echo "a sweep was made: $(ls .flow/sweeps)"; return 1; }
}

# What the trials share is made once, at one at a time and at once: a
# large value only steps read is kept for a sweep's trials when a shared
# step makes it (a run keeps none of those), so a trial does not call the
# shared steps again for it; one made from a swept parameter is not kept.
test_the_trials_share_large_values_made_once() {
    write pipeline.lua <<'L'
local function log(s) local f = io.open("calls", "a") f:write(s, "\n") f:close() end
return pipeline{
  node{ name = "make", inputs = "params:k", outputs = "t", func = function(k)
          log("make") local t = {} for i = 1, 300 do t[i] = i * k end return t end },
  node{ name = "mid", inputs = "t", outputs = "m", func = function(t)
          log("mid") local o = {} for i, x in ipairs(t) do o[i] = x + 1 end return o end },
  node{ name = "prep", inputs = "params:lr", outputs = "z", func = function(lr) return string.rep("z", 2000 + lr) end },
  node{ name = "train", inputs = { "m", "z", "params:lr" }, outputs = "r", metrics = true,
        func = function(m, z, lr) log("train") return m[3] * lr, { loss = m[3] * lr } end },
}
L
    write conf/base/parameters.yml <<'Y'
k: 1
lr: 1
Y
    run_flow 0 sweep --grid lr=21,22,23 --metric loss -q
    equals "$(sort calls | uniq -c | tr -s ' ')" "$(printf ' 1 make\n 1 mid\n 3 train')" "calls, one trial at a time"
    equals "$(ls .flow/cache/values | wc -l)" "2" "values kept (t and m, not the trials' z)"
    rm -rf .flow calls
    run_flow 0 sweep --grid lr=21,22,23,24 --metric loss --parallel 2 -q
    equals "$(sort calls | uniq -c | tr -s ' ')" "$(printf ' 1 make\n 1 mid\n 4 train')" "calls, two trials at once"
}
