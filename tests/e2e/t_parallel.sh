# t_parallel.sh — the scheduler under load and failure: -j, retries, timeouts,
# output volume, the run summary, and the progress display in both modes.

test_jobs_bound_parallelism() {
    write pipeline.lua <<'L'
return pipeline{ node{ command = { "sleep", "1" }, name = "a" }, node{ command = { "sleep", "1" }, name = "b" } }
L
    t0=$(date +%s%N); run_flow 0 run -j 2; two=$(( ($(date +%s%N) - t0) / 1000000 ))
    t0=$(date +%s%N); run_flow 0 run -j 1 --force; one=$(( ($(date +%s%N) - t0) / 1000000 ))
    # Loose bounds: a loaded 2-core machine must not make this flaky.
    [ "$two" -lt 1800 ] || { echo "-j2 took $two ms"; return 1; }
    [ "$one" -ge 1900 ] || { echo "-j1 took only $one ms"; return 1; }
}

test_retries_until_success() {
    write pipeline.lua <<'L'
return pipeline{ node{ command = "echo x >> tries; [ $(wc -l < tries) -ge 3 ]", name = "flaky", retries = 2 } }
L
    run_flow 0 run
    equals "$(wc -l < tries)" 3 "attempts"
    contains "$ERR" "step 'flaky' failed (exit code 1) (attempt 1 of 3); retrying in 1s"
    contains "$(cat .flow/runs/latest/run.json)" '"attempts":	3'
}

# A Lua step's error is "failed: <its message>" in the retry's warning, and
# a message that names the step keeps its colon.
test_retry_warnings_of_lua_steps_read_as_sentences() {
    write pipeline.lua <<'L'
return pipeline{
  node{ func = function() error("boom") end, outputs = "x", name = "lua", retries = 1 },
  node{ command = flow.command{ "true", cwd = "nodir" }, name = "named", retries = 1 },
}
L
    run_flow 1 run -k
    contains "$ERR" "step 'lua' failed: pipeline.lua:2: boom (attempt 1 of 2); retrying in 1s"
    contains "$ERR" "step 'named' failed: its command's cwd nodir is not a directory (attempt 1 of 2)"
}

# Without -k, a failed step ends the run: a step waiting out a retry's
# back-off gives up at once (it went on retrying, back-offs of 1 s, 2 s,
# 4 s ... a run long failed), and a failing attempt is not retried; with -k
# it retries as before.
test_a_failed_run_does_not_wait_out_retries() {
    write pipeline.lua <<'L'
return pipeline{
  node{ command = "echo x >> tries; exit 1", name = "flaky", retries = 2 },
  node{ command = "sleep 0.5; exit 2", name = "bad" },
}
L
    t0=$(date +%s%N); run_flow 1 run -j 2; ms=$(( ($(date +%s%N) - t0) / 1000000 ))
    equals "$(wc -l < tries)" 1 "attempts"
    contains "$ERR" "step 'flaky': not retried: the run stops after a failure (-k/--keep-going runs the rest)"
    contains "$ERR" "failed: bad, flaky"
    [ "$ms" -lt 5000 ] || { echo "the run took $ms ms"; return 1; }
    rm tries
    run_flow 1 run -j 2 -k
    equals "$(wc -l < tries)" 3 "attempts with -k"
}

test_retries_exhausted_fail() {
    write pipeline.lua <<'L'
return pipeline{ node{ command = "echo x >> tries; exit 1", name = "broken", retries = 1 } }
L
    run_flow 1 run
    equals "$(wc -l < tries)" 2 "attempts"
}

test_command_timeout_kills_process_group() {
    write pipeline.lua <<'L'
return pipeline{ node{ command = "sleep 30 & echo $! > child; wait", name = "slow", timeout = "1s" } }
L
    t0=$(date +%s)
    run_flow 1 run
    [ $(( $(date +%s) - t0 )) -lt 10 ] || { echo "the timeout did not stop the step"; return 1; }
    contains "$ERR" "step 'slow' timed out after 1s"
    state=$(ps -o stat= -p "$(cat child)" 2>/dev/null || true)
    [ -z "$state" ] || [[ "$state" == Z* ]] || { echo "the step's child survived ($state)"; return 1; }
    contains "$(cat .flow/runs/latest/run.json)" '"timed_out":	true'
}

test_lua_step_timeout() {
    write pipeline.lua <<'L'
return pipeline{ node{ func = function() while true do end end, outputs = "x", name = "spin", timeout = 1 } }
L
    run_flow 1 run
    contains "$ERR" "step 'spin' timed out after 1s"
}

test_timeout_bounds_flow_sh_inside_a_step() {
    write pipeline.lua <<'L'
local flow = require("flow")
return pipeline{ node{ func = function() flow.sh("sleep 30") return 1 end, outputs = "x", name = "waits", timeout = 1 } }
L
    t0=$(date +%s)
    run_flow 1 run
    [ $(( $(date +%s) - t0 )) -lt 10 ] || { echo "flow.sh outlived the step's timeout"; return 1; }
    contains "$ERR" "timed out"
}

test_bad_timeout_and_retries() {
    write pipeline.lua <<'L'
return pipeline{ node{ command = "true", name = "x", timeout = "soon" } }
L
    run_flow 2 run
    contains "$ERR" "pipeline.lua:1: node: timeout must be seconds or a duration"
    write pipeline.lua <<'L'
return pipeline{ node{ command = "true", name = "x", retries = -1 } }
L
    run_flow 2 run
    contains "$ERR" "retries must be a non-negative integer"
}

test_much_output_does_not_deadlock() {
    write pipeline.lua <<'L'
return pipeline{
  node{ command = "head -c 20000000 /dev/zero | tr '\\0' 'x'; head -c 5000000 /dev/zero | tr '\\0' 'y' >&2", name = "loud" },
  node{ command = "head -c 3000000 /dev/zero | tr '\\0' 'z'", name = "loud2" },
}
L
    run_flow 0 run -j 2
    size=$(stat -c %s .flow/runs/latest/logs/loud.log)
    [ "$size" -ge 25000000 ] || { echo "log has $size bytes"; return 1; }
}

test_run_json_summary() {
    write pipeline.lua <<'L'
return pipeline{
  node{ command = "exit 3", name = "bad" },
  node{ func = function() return 1 end, outputs = "x", name = "good" },
}
L
    run_flow 1 run -k
    json=$(cat .flow/runs/latest/run.json)
    contains "$json" '"status":	"failed"'
    contains "$json" '"name":	"bad"'
    contains "$json" '"exit_code":	3'
    contains "$json" '"state":	"done"'
    contains "$json" '"started":'
    contains "$json" '"exit_code":	null'      # a Lua step: absent values are null, not left out
    contains "$json" '"error":	null'
}

test_plain_progress_when_not_a_terminal() {
    write pipeline.lua <<'L'
return pipeline{ node{ command = "true", name = "one" } }
L
    run_flow 0 run
    contains "$ERR" "started  one"
    contains "$ERR" "done     one"
    not_contains "$ERR" $'\033[' "plain output"
}

test_live_progress_on_a_terminal() {
    command -v script >/dev/null || skip "no script(1)"
    write pipeline.lua <<'L'
return pipeline{
  node{ command = { "sleep", "0.5" }, name = "first" },
  node{ command = { "sleep", "0.5" }, name = "second" },
  node{ func = function() print("printed-by-lua") return 1 end, outputs = "p", name = "talker",
        pool = "local" },    -- queued behind the commands, as the display shows
}
L
    script -qec "$FLOW run -j 2" /dev/null > tty.txt 2>&1
    out=$(cat tty.txt)
    contains "$out" "[0/3]"
    contains "$out" "running 2"
    contains "$out" "▸"
    contains "$out" " first "
    contains "$out" $'\033[' "live output"
    contains "$out" "A"$'\033'"[J"
    contains "$out" "printed-by-lua"
    contains "$out" "3 done"
    NO_COLOR=1 script -qec "$FLOW run -j 2 --force" /dev/null > tty2.txt 2>&1
    not_contains "$(cat tty2.txt)" $'\033[32m' "NO_COLOR output"
    contains "$(cat tty2.txt)" "[0/3]"
    NO_COLOR=1 script -qec "$FLOW run --progress=plain --force" /dev/null > tty3.txt 2>&1
    contains "$(cat tty3.txt)" "started  first"
    not_contains "$(cat tty3.txt)" "[0/3]"
    run_flow 2 run --progress=fancy
    contains "$ERR" "--progress must be auto, live or plain"
}

# A step whose shell exits at once but whose background child writes later: while a
# busy Lua step holds the loop, the exit and the late output become ready together,
# and the exit's callback closes the pipe whose event is still in the same batch.
# (The loop read the freed watcher; build-asan/flow reported it.)
test_exit_and_late_output_in_one_batch() {
    write pipeline.lua <<'L'
local nodes = {}
for i = 1, 6 do
  nodes[#nodes + 1] = node{ name = "cmd" .. i,
    command = "(sleep 0.05; echo late; touch late" .. i .. ") & exit 0" }
  nodes[#nodes + 1] = node{ name = "busy" .. i, outputs = "o" .. i, func = function()
    -- hold the loop until the background child has written (bounded: 20 s of CPU)
    local t0 = os.clock()
    while not io.open("late" .. i) and os.clock() - t0 < 20 do end
    local x = 0
    for k = 1, 1e6 do x = x + k end
    return x
  end }
end
return pipeline(nodes)
L
    run_flow 0 run -j 2
    no_crash
    contains "$ERR" "12 done"
}

# Without --keep-going nothing starts after a failure, even while the journal
# waits for an earlier step's large output to be flushed (a step waiting for
# its flush gives its -j slot back; a failed one does not).
test_nothing_starts_after_a_failure_while_outputs_flush() {
    write pipeline.lua <<'L'
return pipeline{
  node{ name = "a", outputs = "big", command = "head -c 50000000 /dev/zero > ${outputs.big}" },
  node{ name = "b", outputs = "bo", command = "exit 3" },
  node{ name = "c", outputs = "co", command = "touch C_RAN; echo > ${outputs.co}" },
}
L
    run_flow 1 run -j 1 --progress=plain
    [ ! -e C_RAN ] || { echo "c started after b failed"; return 1; }
    contains "$ERR" "not run: c"
}
