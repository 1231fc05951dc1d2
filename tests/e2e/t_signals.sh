# t_signals.sh — Ctrl-C / SIGTERM stop the run, leave no process behind, exit 130;
# a closed terminal (SIGHUP) exits 129 the same way; a killed flow takes its steps along.

# Start flow in the background, wait until the marker file shows the step
# started, send SIG, and check the exit status and that no child survives.
interrupt_run() {
    local sig=$1 want=${2:-130}
    write pipeline.lua <<'L'
return pipeline{
  node{ command = "echo $$ > started; exec sleep 300", name = "long_a" },
  node{ command = "sleep 300 & echo $! > child; wait", name = "long_b" },
}
L
    # (SIGHUP at its default: run under nohup, the tests' is ignored, and
    # flow, started so, keeps on after a hang-up, as nohup asks)
    env --default-signal=HUP "$FLOW" run -j 2 >stdout.txt 2>stderr.txt &
    local pid=$!
    for _ in $(seq 100); do [ -s started ] && [ -s child ] && break; sleep 0.05; done
    [ -s started ] || { echo "the step never started"; cat stderr.txt; return 1; }
    kill -"$sig" "$pid"
    set +e; wait "$pid"; STATUS=$?; set -e
    equals "$STATUS" "$want" "exit status after SIG$sig"
    for p in $(cat started) $(cat child); do
        sleep 0.1
        # A zombie is dead (this machine's PID 1 may not reap orphans).
        state=$(ps -o stat= -p "$p" 2>/dev/null || true)
        if [ -n "$state" ] && [[ "$state" != Z* ]]; then echo "process $p survived SIG$sig ($state)"; return 1; fi
    done
    contains "$(cat stderr.txt)" "(interrupted)"
    not_contains "$(cat stderr.txt)" "failed (killed by signal" "an interrupted step's report"
    # stopped steps are counted as interrupted, not failed: summary and run.json
    contains "$(cat stderr.txt)" "0 done, 2 interrupted in"
    not_contains "$(cat stderr.txt)" "failed" stderr
    contains "$(tr -d ' \t\n' < .flow/runs/latest/run.json)" '"state":"interrupted"'
    not_contains "$(tr -d ' \t\n' < .flow/runs/latest/run.json)" '"state":"failed"' run.json
    contains "$(cat .flow/runs/latest/journal.jsonl)" '"status":"interrupted"' 
}

test_sigint_stops_everything() { interrupt_run INT; }
test_sigterm_stops_everything() { interrupt_run TERM; }
test_sighup_stops_everything() { interrupt_run HUP 129; }

test_kill_9_takes_the_steps_along() {
    # flow cannot clean up after SIGKILL: its steps' processes must notice on their own.
    write pipeline.lua <<'L'
return pipeline{
  node{ command = "echo $$ > started; exec sleep 1000", name = "direct" },
  node{ command = "sleep 1000 & echo $! > child; wait", name = "grandchild" },
}
L
    "$FLOW" run -j 2 >stdout.txt 2>stderr.txt &
    local pid=$!
    for _ in $(seq 200); do [ -s started ] && [ -s child ] && break; sleep 0.05; done
    [ -s started ] && [ -s child ] || { echo "the steps never started"; cat stderr.txt; return 1; }
    sleep 1          # running, not just starting (see engine/reaper.h: a kill in between)
    kill -9 "$pid"
    set +e; wait "$pid"; set -e
    all_gone "$(cat started)" "$(cat child)"
}

# The reaper takes flow's messages in batches (engine/reaper.c): 60 steps
# that start in a burst are 60 messages read in a few batches, and a flow
# killed then leaves every one of their process groups to be stopped.
test_kill_9_takes_a_burst_of_steps_along() {
    mkdir started.d
    write pipeline.lua <<'L'
local steps = {}
for i = 1, 60 do
  steps[i] = node{ command = "echo $$ > started.d/" .. i .. "; exec sleep 1000", name = "s" .. i }
end
return pipeline(steps)
L
    "$FLOW" run -j 60 >stdout.txt 2>stderr.txt &
    local pid=$!
    for _ in $(seq 400); do [ "$(ls started.d | wc -l)" -eq 60 ] && break; sleep 0.05; done
    [ "$(ls started.d | wc -l)" -eq 60 ] || { echo "the steps never all started"; cat stderr.txt; kill -9 "$pid"; return 1; }
    sleep 0.5        # each one's group told to the reaper (engine/reaper.h: a kill in between)
    kill -9 "$pid"
    set +e; wait "$pid"; set -e
    all_gone $(cat started.d/*)
}

test_sighup_ignored_under_nohup() {
    # nohup (SIGHUP ignored before flow starts) keeps its meaning: the run goes on.
    write pipeline.lua <<'L'
return pipeline{ node{ command = "touch started; sleep 1; touch finished", name = "s" } }
L
    ( trap '' HUP; exec "$FLOW" run >stdout.txt 2>stderr.txt ) &
    local pid=$!
    for _ in $(seq 200); do [ -e started ] && break; sleep 0.05; done
    kill -HUP "$pid"
    set +e; wait "$pid"; STATUS=$?; set -e
    equals "$STATUS" 0 "exit status of a run under nohup after SIGHUP"
    [ -e finished ] || { echo "the step did not finish"; return 1; }
}

# Start flow on pipeline.lua, wait for the file "started", send SIGINT; 130 expected.
interrupt_when_started() {
    "$FLOW" run >stdout.txt 2>stderr.txt &
    local pid=$!
    for _ in $(seq 100); do [ -e started ] && break; sleep 0.05; done
    kill -INT "$pid"
    set +e; wait "$pid"; STATUS=$?; set -e
    equals "$STATUS" 130 "exit status"
}

test_sigint_stops_a_busy_lua_step() {
    write pipeline.lua <<'L'
return pipeline{ node{ func = function() io.open("started", "w"):close() while true do end end,
                       outputs = "never", name = "spin" } }
L
    interrupt_when_started
}

test_sigint_during_script_top_level() {
    write pipeline.lua <<'L'
io.open("started", "w"):close()
while true do end
L
    interrupt_when_started
}

# sched.run turns the instruction hook off while it runs (its callbacks are
# flow's own): a driver script that computes after a run must still stop.
test_sigint_during_a_driver_script_after_a_run() {
    write pipeline.lua <<'L'
local flow = require("flow")
assert(flow.run(pipeline{ node{ func = function() return 1 end, outputs = "x", name = "a" } }).status == "ok")
io.open("started", "w"):close()
while true do end
L
    interrupt_when_started
}

test_sigint_during_blocking_flow_sh() {
    write pipeline.lua <<'L'
flow.sh("echo $$ > child; touch started; exec sleep 60")
L
    interrupt_when_started
    sleep 0.2
    [ -s child ] || { echo "flow.sh never started"; return 1; }
    state=$(ps -o stat= -p "$(cat child)" 2>/dev/null || true)
    [ -z "$state" ] || [[ "$state" == Z* ]] || { echo "flow.sh's child survived Ctrl-C ($state)"; return 1; }
}

# A reader that goes away (`flow run -v | head -2`, or Ctrl-C reaching `tee`
# as well) does not kill flow with SIGPIPE: it died at once, exit 141, with
# no run_end and no run.json.  The run ends, recorded; its steps' processes
# still get SIGPIPE's default (a handler, not SIG_IGN, is what exec resets).
test_a_closed_output_pipe_does_not_kill_flow() {
    write pipeline.lua <<'L'
return pipeline{
  node{ command = "for i in 1 2 3 4 5; do echo line $i; sleep 0.1; done", name = "a" },
  node{ command = "yes | head -1 > yes.txt", name = "b" },
}
L
    set +e
    "$FLOW" run -v 2>&1 | head -2 >/dev/null
    local status=${PIPESTATUS[0]}
    set -e
    equals "$status" 0 "flow's exit status"
    contains "$(tr -d ' \t\n' < .flow/runs/latest/run.json)" '"status":"ok"'
    contains "$(cat .flow/runs/latest/journal.jsonl)" '"event":"run_end"'
    equals "$(cat yes.txt)" "y" "a step's pipe"
    # a write that failed early is no error at the end (it exited 2: "cannot
    # write to standard output")
    write pipeline.lua <<'L'
return pipeline{ node{ func = function() for i = 1, 2000 do print("line " .. i) end return 1 end, outputs = "o", name = "p" } }
L
    set +e
    "$FLOW" run 2>stderr.txt | head -1 >/dev/null
    status=${PIPESTATUS[0]}
    set -e
    equals "$status" 0 "flow's exit status after an early failed write"
    not_contains "$(cat stderr.txt)" "cannot write to standard output"
    # a SIGPIPE of a step's own (its io.popen's reader gone) is not stdout's:
    # a full stdout is still an error (it exited 0, the output lost)
    write pipeline.lua <<'L'
return pipeline{ node{ name = "s", func = function()
  local f = io.popen("true", "w"); os.execute("sleep 0.3")
  f:write(string.rep("x", 100000)); f:flush(); f:close()
  print(string.rep("out ", 10)) end } }
L
    set +e
    "$FLOW" run >/dev/full 2>stderr.txt
    status=$?
    set -e
    equals "$status" 2 "flow's exit status with a full stdout"
    contains "$(cat stderr.txt)" "cannot write to standard output"
}

# After a kill -9, the project's lock lasts until the reaper has stopped the
# killed run's steps (it holds the lock too): a run started meanwhile waits
# for it, saying so, instead of running the same step beside the old one.
test_a_run_after_kill_9_waits_for_the_old_steps_to_stop() {
    write pipeline.lua <<'L'
return pipeline{ node{ command = "trap '' TERM; for i in $(seq 1 25); do echo $$ >> progress; sleep 0.1; done", name = "train" } }
L
    "$FLOW" run >stdout.txt 2>stderr.txt &
    local pid=$!
    for _ in $(seq 200); do [ -s progress ] && break; sleep 0.05; done
    sleep 0.5        # its group told to the reaper (engine/reaper.h)
    kill -9 "$pid"
    set +e; wait "$pid"; set -e
    run_flow 0 run --resume
    contains "$ERR" "waiting for the steps of a flow run that was killed (pid $pid) to stop"
    # the old step's lines, then the new one's: never the two at once
    equals "$(uniq progress | awk '{print $1}' | uniq | wc -l)" 2 "runs of lines by pid"
}
