# t_limits.sh — nothing outlives its limits: a step's timeout, Ctrl-C and
# SIGTERM stop Lua code that catches errors, os.exit cannot end flow from a
# step, and inputs that would grow without bound are refused.

# run_bounded SECONDS EXPECTED_STATUS ARGS... — run_flow, but a flow still
# running after SECONDS is killed and the test fails (a hang, not a wait).
run_bounded() {
    local limit=$1 want=$2; shift 2
    set +e
    timeout -s KILL "$limit" "$FLOW" "$@" >stdout.txt 2>stderr.txt
    STATUS=$?
    set -e
    OUT=$(cat stdout.txt) ERR=$(cat stderr.txt)
    [ "$STATUS" != 137 ] || { echo "flow $* was still running after ${limit}s"; cat stderr.txt; return 1; }
    [ "$STATUS" = "$want" ] || { echo "flow $* exited $STATUS, expected $want"; cat stderr.txt; return 1; }
}

# signal_when_started SIG ARGS... — start flow, wait for the file "started",
# send SIG; flow must exit within 30 s.  Sets STATUS, ERR.
signal_when_started() {
    local sig=$1; shift
    "$FLOW" "$@" >stdout.txt 2>stderr.txt &
    local pid=$!
    for _ in $(seq 400); do [ -e started ] && break; sleep 0.05; done
    [ -e started ] || { echo "the step never started"; cat stderr.txt; kill -9 "$pid"; return 1; }
    sleep 0.2
    kill -"$sig" "$pid"
    for _ in $(seq 600); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
    if kill -0 "$pid" 2>/dev/null; then
        kill -9 "$pid"; wait "$pid" || true
        echo "flow ignored SIG$sig for 30 s"; cat stderr.txt; return 1
    fi
    set +e; wait "$pid"; STATUS=$?; set -e
    ERR=$(cat stderr.txt)
}

# ---- cancellation cannot be caught ----------------------------------------

test_timeout_stops_a_step_that_loops_around_pcall() {
    write pipeline.lua <<'L'
local function spin() for _ = 1, 1e5 do end end
return pipeline{ node{ func = function() while true do pcall(spin) end end,
                       outputs = "x", name = "spin", timeout = 1 } }
L
    run_bounded 60 1 run
    contains "$ERR" "step 'spin' timed out after 1s"
}

# debug.sethook would remove flow's hook, and with it the step's timeout,
# Ctrl-C and SIGTERM: it is refused, with a message, and the step stays bounded.
test_debug_sethook_cannot_remove_flows_hook() {
    write pipeline.lua <<'L'
return pipeline{ node{ func = function() pcall(debug.sethook) while true do end end,
                       outputs = "x", name = "spin", timeout = 1 } }
L
    run_bounded 60 1 run
    contains "$ERR" "step 'spin' timed out after 1s"
    write pipeline.lua <<'L'
return pipeline{ node{ func = function() debug.sethook() return 1 end, outputs = "x", name = "hook" } }
L
    run_bounded 60 1 run
    contains "$ERR" "debug.sethook is not available in a flow pipeline"
    # at the top level too: each step's thread inherits the script's hook
    write pipeline.lua <<'L'
pcall(debug.sethook)
return pipeline{ node{ func = function() while true do end end, outputs = "x", name = "spin", timeout = 1 } }
L
    run_bounded 60 1 run
    contains "$ERR" "step 'spin' timed out after 1s"
}

test_timeout_stops_xpcall_coroutines_and_load_readers() {
    write pipeline.lua <<'L'
local function spin() for _ = 1, 1e5 do end end
local ways = {
  xpcall = function() while true do xpcall(spin, function(e) return e end) end end,
  resume = function() while true do coroutine.resume(coroutine.create(spin)) end end,
  wrapped = function() coroutine.wrap(function() while true do end end)() end,
  reader = function() while true do load(function() spin() return nil end) end end,
  handler = function() xpcall(error, function() while true do end end) end,
  close = function()
    while true do
      local co = coroutine.create(function() local x <close> = setmetatable({}, { __close = spin }) coroutine.yield() end)
      coroutine.resume(co) coroutine.close(co)
    end
  end,
}
local nodes = {}
for name, f in pairs(ways) do nodes[#nodes + 1] = node{ func = f, outputs = name, name = name, timeout = 1 } end
return pipeline(nodes)
L
    run_bounded 120 1 run -k -j 6
    for name in xpcall resume wrapped reader handler close; do
        contains "$ERR" "step '$name' timed out after 1s"
    done
}

test_sigint_stops_a_step_that_loops_around_pcall() {
    write pipeline.lua <<'L'
return pipeline{ node{ func = function()
  io.open("started", "w"):close()
  while true do pcall(function() for _ = 1, 1e5 do end end) end
end, outputs = "x", name = "spin" } }
L
    signal_when_started INT run
    equals "$STATUS" 130 "exit status after Ctrl-C"
}

test_sigterm_stops_a_step_that_loops_around_xpcall() {
    write pipeline.lua <<'L'
return pipeline{ node{ func = function()
  io.open("started", "w"):close()
  while true do xpcall(function() for _ = 1, 1e5 do end end, debug.traceback) end
end, outputs = "x", name = "spin" } }
L
    signal_when_started TERM run
    equals "$STATUS" 130 "exit status after SIGTERM"
}

# After Ctrl-C nothing new starts, whatever the running step was doing.
test_sigint_during_os_execute_starts_nothing_new() {
    write pipeline.lua <<'L'
return pipeline{
  node{ func = function() os.execute("echo $$ > child; touch started; exec sleep 60") return 1 end,
        outputs = "a", name = "a" },
  node{ func = function() io.open("b_ran", "w"):close() return 1 end, outputs = "b", name = "b" },
}
L
    signal_when_started INT run -j 1 -k
    equals "$STATUS" 130 "exit status"
    [ ! -e b_ran ] || { echo "step b started after Ctrl-C"; return 1; }
    state=$(ps -o stat= -p "$(cat child)" 2>/dev/null || true)
    [ -z "$state" ] || [[ "$state" == Z* ]] || { echo "os.execute's command survived Ctrl-C ($state)"; return 1; }
}

test_sigint_during_blocking_popen_starts_nothing_new() {
    write pipeline.lua <<'L'
return pipeline{
  node{ func = function() return io.popen("touch started; sleep 2"):read("a") end, outputs = "a", name = "a" },
  node{ func = function() io.open("b_ran", "w"):close() return 1 end, outputs = "b", name = "b" },
}
L
    signal_when_started INT run -j 1 -k
    equals "$STATUS" 130 "exit status"
    [ ! -e b_ran ] || { echo "step b started after Ctrl-C"; return 1; }
    not_contains "$(cat .flow/runs/latest/journal.jsonl)" '"status":"ok","step":"a"' "the journal"
    contains "$(cat .flow/runs/latest/journal.jsonl)" '"status":"interrupted","step":"a"' "the journal"
}

test_os_execute_in_a_step_is_bounded_by_its_timeout() {
    write pipeline.lua <<'L'
return pipeline{ node{ func = function() os.execute("sleep 60") return 1 end, outputs = "x",
                       name = "waits", timeout = 1 } }
L
    run_bounded 30 1 run
    contains "$ERR" "step 'waits' timed out after 1s"
}

# gone_within SECONDS PID — the process is gone (or a zombie) within SECONDS.
gone_within() {
    local state
    for _ in $(seq $(($1 * 20))); do
        state=$(ps -o stat= -p "$2" 2>/dev/null || true)
        [ -z "$state" ] || [[ "$state" == Z* ]] && return 0
        sleep 0.05
    done
    echo "process $2 still running ($state)"; return 1
}

# A stopped step's whole group gets SIGKILL 5 s after SIGTERM, also when the
# group's leader exits on SIGTERM and leaves behind a process that ignores it:
# after the grace period while the run goes on, at once when flow ends first.
LEFT_BEHIND='sh -c '"'"'trap "" TERM; echo $$ > child; touch started; sleep 100'"'"' & sleep 100'
test_timeout_kills_what_the_leader_left_in_its_group() {
    write pipeline.lua <<L
return pipeline{ node{ command = [[$LEFT_BEHIND]], timeout = "1s", name = "t" },
                 node{ command = "sleep 9", name = "keep" } }
L
    "$FLOW" run -j 2 >stdout.txt 2>stderr.txt &
    local pid=$!
    for _ in $(seq 400); do [ -s child ] && break; sleep 0.05; done
    [ -s child ] || { echo "the step never started"; kill -9 "$pid"; return 1; }
    gone_within 8 "$(cat child)" || { kill -9 "$pid"; return 1; }   # 1 s + the 5 s grace, well before 9 s
    kill -0 "$pid" 2>/dev/null || { echo "flow ended first: this tests nothing"; return 1; }
    set +e; wait "$pid"; STATUS=$?; set -e
    equals "$STATUS" 1 "exit status"
    contains "$(cat stderr.txt)" "step 't' timed out after 1s"

    rm -f child started
    write pipeline.lua <<L
return pipeline{ node{ command = [[$LEFT_BEHIND]], timeout = "1s", name = "t" } }
L
    run_bounded 30 1 run
    gone_within 2 "$(cat child)"
}

test_sigint_kills_what_the_leader_left_in_its_group() {
    write pipeline.lua <<L
return pipeline{ node{ command = [[$LEFT_BEHIND]], name = "t" } }
L
    signal_when_started INT run
    equals "$STATUS" 130 "exit status after Ctrl-C"
    gone_within 2 "$(cat child)"
}

test_os_execute_in_a_step_returns_what_os_execute_returns() {
    write pipeline.lua <<'L'
return pipeline{ node{ func = function()
  local a = table.pack(os.execute("exit 3"))
  local b = table.pack(os.execute("true"))
  local c = table.pack(os.execute("echo from-the-command"))
  return string.format("%s %s %s | %s %s %s | %s", tostring(a[1]), a[2], a[3], tostring(b[1]), b[2], b[3], tostring(c[1]))
end, outputs = "r", name = "r" } }
L
    write conf/base/catalog.yml <<'Y'
r: {type: text, path: r.txt}
Y
    run_bounded 30 0 run
    equals "$(cat r.txt)" "nil exit 3 | true exit 0 | true"
    contains "$ERR" "from-the-command"
}

test_os_exit_in_a_step_fails_the_step_not_flow() {
    write pipeline.lua <<'L'
return pipeline{
  node{ func = function() os.exit(3) end, outputs = "a", name = "quits" },
  node{ func = function() local ok = pcall(os.exit, 0) return ok end, outputs = "b", name = "catches" },
  node{ func = function() return 1 end, outputs = "c", name = "fine" },
}
L
    run_bounded 30 1 run -k
    contains "$ERR" "step 'quits' called os.exit(3), which a step cannot do"
    contains "$ERR" "step 'catches' called os.exit(0)"
    contains "$(cat .flow/runs/latest/run.json)" '"code":	1'
    contains "$(cat .flow/runs/latest/journal.jsonl)" '"event":"run_end"'
    contains "$(cat .flow/runs/latest/journal.jsonl)" '"status":"ok","step":"fine"'
}

test_os_exit_outside_a_step_still_exits() {
    write pipeline.lua <<'L'
os.exit(7)
L
    run_bounded 30 7 run
}

test_a_step_recovers_from_its_own_errors_as_before() {
    write pipeline.lua <<'L'
return pipeline{ node{ func = function()
  local ok, err = pcall(error, "mine")
  local ok2 = coroutine.resume(coroutine.create(function() error("x") end))
  return tostring(ok) .. " " .. tostring(err) .. " " .. tostring(ok2)
end, outputs = "r", name = "r" } }
L
    write conf/base/catalog.yml <<'Y'
r: {type: text, path: r.txt}
Y
    run_bounded 30 0 run
    equals "$(cat r.txt)" "false mine false"
}

# ---- inputs that would grow without bound ----------------------------------

# Each level repeats the one before ten times: 100 bytes become 10^8.
nested_parameters() {
    mkdir -p conf/base
    {
        printf 'l0: "%s"\n' "$(printf 'x%.0s' $(seq 100))"
        for i in 1 2 3 4 5 6; do
            printf 'l%d: "' "$i"
            for _ in $(seq 10); do printf '${params:l%d}' $((i - 1)); done
            printf '"\n'
        done
    } > conf/base/parameters.yml
    write pipeline.lua <<'L'
return pipeline{ node{ func = function(x) return #x end, inputs = "params:l1", outputs = "n", name = "n" } }
L
}

test_interpolation_cannot_build_a_huge_string() {
    nested_parameters
    [ "$(wc -c < conf/base/parameters.yml)" -lt 2500 ] || { echo "the test's file is not small"; return 1; }
    run_bounded 60 2 run
    contains "$ERR" "conf/base/parameters.yml:7: parameters key 'l6': interpolation makes this string longer than 16 MiB"
    run_bounded 60 2 config l1
}

test_interpolation_copies_are_bounded_too() {
    nested_parameters
    sed -i '/^l6:/d' conf/base/parameters.yml      # l5 is 10 MB, under the limit of one string
    for i in $(seq 30); do printf 'copy%d: "${params:l5}"\n' "$i"; done >> conf/base/parameters.yml
    run_bounded 60 2 run
    contains "$ERR" "interpolation produces more than 256 MiB of text"
    contains "$ERR" "conf/base/parameters.yml:"
}

test_a_script_that_is_not_a_regular_file_is_refused() {
    run_bounded 30 2 run /dev/zero
    contains "$ERR" "/dev/zero is not a regular file"
    mkfifo fifo.lua
    run_bounded 30 2 run fifo.lua
    contains "$ERR" "fifo.lua is not a regular file"
    truncate -s 65M big.lua
    run_bounded 30 2 run big.lua
    contains "$ERR" "big.lua is larger than 64 MiB"
}

# The files a script loads (dofile, loadfile, require) follow the script's
# rule: a regular file of at most 64 MiB, named in the message (exit 2).
test_files_the_script_loads_are_bounded_too() {
    write pipeline.lua <<'L'
dofile("/dev/zero")
return pipeline{ node{ func = function() return 1 end, outputs = "x", name = "x" } }
L
    run_bounded 30 2 run
    contains "$ERR" "/dev/zero is not a regular file"
    mkfifo fifo.lua
    write pipeline.lua <<'L'
assert(loadfile("fifo.lua"))
return pipeline{ node{ func = function() return 1 end, outputs = "x", name = "x" } }
L
    run_bounded 30 2 run
    contains "$ERR" "fifo.lua is not a regular file"
    write pipeline.lua <<'L'
package.path = "./?.lua"
require("fifo")
return pipeline{ node{ func = function() return 1 end, outputs = "x", name = "x" } }
L
    run_bounded 30 2 run
    contains "$ERR" "fifo.lua is not a regular file"
    truncate -s 65M big.lua
    write pipeline.lua <<'L'
dofile("big.lua")
return pipeline{ node{ func = function() return 1 end, outputs = "x", name = "x" } }
L
    run_bounded 30 2 run
    contains "$ERR" "big.lua is larger than 64 MiB"
}

test_jobs_must_be_a_reasonable_integer() {
    write pipeline.lua <<'L'
return pipeline{ node{ func = function() return 1 end, outputs = "x", name = "x" } }
L
    for j in 1e999 1e3 0x10 99999999999999999999 2.0 " 4" 0 -1 inf nan; do
        run_bounded 30 2 run -j "$j"
        contains "$ERR" "--jobs needs a whole number from 1 to 100000, got '$j'"
    done
    run_bounded 30 0 run -j 100000
    write driver.lua <<'L'
local flow = require("flow")
flow.run(pipeline{ node{ func = function() return 1 end, outputs = "x", name = "x" } }, { jobs = 1e999 })
L
    run_bounded 30 2 run driver.lua
    contains "$ERR" "driver.lua:2: flow.run: jobs must be a whole number from 1 to 100000"
}

test_an_empty_parameter_name_is_an_error() {
    write pipeline.lua <<'L'
local function f(x) return x end
return pipeline{
  node{ func = f, inputs = "params:", outputs = "x", name = "x" },
}
L
    run_bounded 30 2 run
    contains "$ERR" "pipeline.lua:3: node: inputs: 'params:' names no parameter"
    write pipeline.lua <<'L'
local function f(x) return x end
return pipeline{
  node{ func = f, inputs = { a = "params:" }, outputs = "x", name = "x" },
}
L
    run_bounded 30 2 run
    contains "$ERR" "pipeline.lua:3: node: inputs: 'params:' names no parameter"
}

test_a_catalog_entry_cannot_be_named_like_a_parameter() {
    write pipeline.lua <<'L'
return pipeline{ node{ func = function(x) return x end, inputs = "params:lr", outputs = "x", name = "x" } }
L
    write conf/base/parameters.yml <<'Y'
lr: 0.1
Y
    write conf/base/catalog.yml <<'Y'
raw: {type: text, path: raw.txt}
"params:lr": {type: text, path: lr.txt}
Y
    run_bounded 30 2 run
    contains "$ERR" "conf/base/catalog.yml:2: catalog entry 'params:lr'"
    contains "$ERR" "parameters"
}

# A step's waits are cancelled, whatever they are: a retry's back-off (a
# timer) ends at Ctrl-C instead of running out its minute.
test_sigint_ends_a_retry_back_off() {
    write pipeline.lua <<'L'
return pipeline{ node{ command = "touch started; exit 1", name = "flaky", retries = 6 } }
L
    t0=$(date +%s)
    signal_when_started INT run
    equals "$STATUS" 130 "exit status"
    [ $(( $(date +%s) - t0 )) -lt 25 ] || { echo "the back-off ran on after Ctrl-C"; return 1; }
    contains "$(cat .flow/runs/latest/journal.jsonl)" '"status":"interrupted"'
}

test_sigint_ends_flow_proc_sleep_in_a_lua_step() {
    write pipeline.lua <<'L'
local proc = require("flow.proc")
return pipeline{ node{ func = function() io.open("started", "w"):close(); proc.sleep(120) return 1 end,
                       outputs = "x", name = "sleeper" } }
L
    signal_when_started INT run
    equals "$STATUS" 130 "exit status"
}
