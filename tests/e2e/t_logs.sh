# t_logs.sh — what a step says: -v shows whole lines, a Lua step's print is in
# its log too, retries keep every attempt, `flow logs STEP` finds the newest log.

test_verbose_shows_whole_lines_of_parallel_steps() {
    # Each line is written in two pieces with a pause between: -v must not
    # cut it where a pipe read ended, nor mix in the other step's pieces.
    write pipeline.lua <<'L'
local function slow(tag)
  return string.format("for i in 1 2 3; do printf '%s-'; sleep 0.1; printf 'line-%%s\\n' $i; done; printf '%s-tail'", tag, tag)
end
return pipeline{
  node{ command = slow("aaa"), name = "a" },
  node{ command = slow("bbb"), name = "b" },
}
L
    run_flow 0 run -v -j 2
    for t in a b; do
        tag=$([ $t = a ] && echo aaa || echo bbb)
        lines=$(grep "^\[$t\] " stderr.txt)
        equals "$lines" "[$t] $tag-line-1
[$t] $tag-line-2
[$t] $tag-line-3
[$t] $tag-tail" "what -v showed of step $t"
    done
}

# Lines that arrive many to a pipe read: -v cut one wherever a 16 KiB read
# left a line's start with the 16 KiB behind it, and wrote its lines a byte
# at a time (2 MB/s).  And a step writing faster than flow passes its output
# on kept the loop reading, so Ctrl-C was acted on only when it caught up
# (20 s for 40 MB): now it stops the run at once.
test_verbose_shows_a_flood_of_lines_whole_and_ctrl_c_stops_it() {
    write pipeline.lua <<'L'
return pipeline{
  node{ command = "head -c 2000000 /dev/zero | tr '\\0' x | fold -w 100", name = "lines" },
}
L
    run_flow 0 run -v
    equals "$(grep -c '^\[lines\] x' stderr.txt)" 20000 "lines shown"
    equals "$(grep '^\[lines\] ' stderr.txt | awk 'length($0) != 108' | wc -l)" 0 "lines cut"
    write pipeline.lua <<'L'
return pipeline{
  node{ command = "touch started; yes yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy | head -c 300000000; sleep 60",
        name = "flood" },
}
L
    "$FLOW" run -v >/dev/null 2>/dev/null &
    local pid=$!
    for _ in $(seq 200); do [ -e started ] && break; sleep 0.05; done
    sleep 0.3
    interrupt_within "$pid" 10 "flow -v"
    equals "$STATUS" 130 "exit status"
}

test_lua_print_goes_to_the_step_log() {
    write pipeline.lua <<'L'
return pipeline{ node{ func = function() print("hello", "from-lua") return 1 end, outputs = "x", name = "talker" } }
L
    run_flow 0 run
    equals "$OUT" $'hello\tfrom-lua' "stdout without -v"
    contains "$(cat .flow/runs/latest/logs/talker.log)" $'hello\tfrom-lua'
    run_flow 0 run -v --force
    contains "$OUT" $'[talker] hello\tfrom-lua' "stdout with -v"
    contains "$(cat .flow/runs/latest/logs/talker.log)" $'hello\tfrom-lua'
    run_flow 0 run -q --force
    equals "$OUT" "" "stdout with -q"
    contains "$(cat .flow/runs/latest/logs/talker.log)" $'hello\tfrom-lua'
}

# A step's "started" and "done" lines on a stderr that is not a terminal
# are written in batches (engine/ui.c), yet in one file with stdout they
# keep their order with what the steps print, through flow or io.write
# straight to stdout, and with flow's own messages; none is lost.
test_progress_lines_keep_their_order_with_what_steps_print() {
    write pipeline.lua <<'L'
local nodes = {}
for i = 1, 3000 do
  nodes[#nodes + 1] = node{ name = "s" .. i, outputs = "v" .. i, inputs = i > 1 and "v" .. (i - 1) or nil,
                            func = function(a) return (a or 0) + 1 end }
end
nodes[#nodes + 1] = node{ name = "p", inputs = "v1500", outputs = "pv",
                          func = function(a) print("hello from p " .. a) return a end }
nodes[#nodes + 1] = node{ name = "q", inputs = "pv", outputs = "qv",
                          func = function(a) io.stdout:write("written by q\n") return a end }
nodes[#nodes + 1] = node{ name = "r", inputs = "qv", outputs = "rv", retries = 1,
                          func = function(a) if not flow_retried then flow_retried = true error("once") end return a end }
return pipeline(nodes)
L
    "$FLOW" run > all.txt 2>&1 || { cat all.txt | tail; return 1; }
    equals "$(grep -c '^  started  ' all.txt)" 3003 "started lines"
    equals "$(grep -c '^  done     ' all.txt)" 3003 "done lines"
    equals "$(sed -n '/^  started  p$/,/^  done     q /p' all.txt | sed 's/ (.*s)$//')" "  started  p
hello from p 1500
  done     p
  started  q
written by q
  done     q" "what p and q printed, between their lines"
    equals "$(sed -n '/^  started  r$/,/^  done     r /p' all.txt | sed 's/ (.*s)$//; s/retrying in .*/retrying/')" \
        "  started  r
flow: warning: step 'r' failed: pipeline.lua:11: once (attempt 1 of 2); retrying
  done     r" "the retry's warning, between r's lines"
    contains "$(tail -n 1 all.txt)" "flow: 3003 done in "
    # each step of the chain starts after its producer is done
    awk '/^  (started|done) +s[0-9]+/ { n = substr($2, 2) + 0
             if ($1 == "started" && n > 1 && !((n - 1) in done)) { print "started before its producer: s" n; bad = 1 }
             if ($1 == "done") done[n] = 1 }
         END { exit bad }' all.txt
}

test_retries_keep_every_attempt_in_the_log() {
    write pipeline.lua <<'L'
return pipeline{ node{ command = "echo x >> tries; n=$(wc -l < tries); echo out-$n; echo boom-$n >&2; [ $n -ge 3 ]",
                       name = "flaky", retries = 2 } }
L
    run_flow 0 run
    log=$(cat .flow/runs/latest/logs/flaky.log)
    for n in 1 2 3; do
        contains "$log" "attempt $n of 3"
        contains "$log" "out-$n"
        contains "$log" "boom-$n"
    done
    # the warning before a retry shows what the attempt said on stderr
    contains "$ERR" "boom-1"
    contains "$ERR" "boom-2"
}

test_flow_logs_finds_the_newest_log_of_a_step() {
    write pipeline.lua <<'L'
return pipeline{
  node{ command = "echo made-by-$(cat ver)", name = "make" },
  node{ func = function() print("lua-step-said") return 1 end, outputs = "x", name = "lua" },
}
L
    echo one > ver
    run_flow 0 run
    first=$(readlink .flow/runs/latest)
    sleep 1.1                                   # a later run id
    run_flow 0 run                              # nothing runs again
    [ -z "$(ls .flow/runs/latest/logs)" ] || { echo "a no-op run wrote logs"; return 1; }
    contains "$ERR" "flow logs"
    run_flow 0 logs make
    contains "$OUT" "made-by-one"
    run_flow 0 logs lua
    contains "$OUT" "lua-step-said"
    run_flow 0 logs make --path
    equals "$OUT" ".flow/runs/$first/logs/make.log" "flow logs --path"
    run_flow 0 logs
    contains "$OUT" "make"
    contains "$OUT" ".flow/runs/$first/logs/make.log"
    # a newer run of the step wins
    echo two > ver
    sleep 1.1
    run_flow 0 run --force --nodes make
    run_flow 0 logs make
    contains "$OUT" "made-by-two"
    not_contains "$OUT" "made-by-one"
    run_flow 2 logs nosuch
    contains "$ERR" "no log of step 'nosuch'"
}

test_flow_logs_from_another_directory() {
    write proj/pipeline.lua <<'L'
return pipeline{ node{ command = "echo in-proj", name = "s" } }
L
    run_flow 0 run proj
    run_flow 0 logs s proj
    contains "$OUT" "in-proj"
    run_flow 2 logs s nowhere
    contains "$ERR" "no such directory: nowhere"
}

test_a_step_named_like_a_rank_log_has_its_own_log() {
    write pipeline.lua <<'L'
local cmd = flow.command{ "sh", "-c", "echo rank-$RANK-said" }
return pipeline{
  node{ func = distributed_job{ framework = "pytorch", num_nodes = 2 }(cmd), name = "x" },
  node{ command = "echo plain-step-said", name = "x.rank0" },
}
L
    run_flow 0 run --distributed=local
    run_flow 0 logs x.rank0
    equals "$OUT" "$(printf '$ echo plain-step-said\nplain-step-said')" "the log of step x.rank0"
    run_flow 0 logs x
    contains "$OUT" "rank-0-said"
    contains "$OUT" "rank-1-said"
    not_contains "$OUT" "plain-step-said"
}

# Log files are named by core.safe_name (percent-encoded): flow logs listed
# those file names, so a/b showed as "a%2Fb" -- which, looked up, was step
# a%2Fb's log -- and ".." (a name refused since) as "%2E.", which it then
# did not find.  It lists and takes step names, a long one (its file name cut
# and hashed) too.
test_flow_logs_lists_and_finds_steps_by_name() {
    long=$(printf 'x/%.0s' $(seq 120))
    write pipeline.lua <<'L'
return pipeline{
  node{ command = "echo said-slash", name = "a/b" },
  node{ command = "echo said-percent", name = "a%2Fb" },
  node{ command = "echo said-percent-sign", name = "50%" },
  node{ command = "echo said-long", name = string.rep("x/", 120) },
}
L
    run_flow 0 run
    run_flow 0 logs
    equals "$(echo "$OUT" | tail -n +2 | awk '{print $1}')" "50%
a%2Fb
a/b
$long" "the steps listed"
    run_flow 0 logs a/b
    contains "$OUT" "said-slash"
    run_flow 0 logs a%2Fb
    contains "$OUT" "said-percent"
    not_contains "$OUT" "said-slash"
    run_flow 0 logs 50%
    contains "$OUT" "said-percent-sign"
    run_flow 0 logs "$long"
    contains "$OUT" "said-long"
    run_flow 2 logs a%252Fb
    contains "$ERR" "(steps with logs: 50%, a%2Fb, a/b, $long)"
}

# A log is created on a step's first byte of output, its "$ command" header
# with it: a step that writes nothing leaves no file.
test_a_log_is_created_on_the_first_byte() {
    write pipeline.lua <<'L'
return pipeline{
  node{ command = "true", name = "silent" },
  node{ command = "echo said", name = "talks" },
  node{ command = "echo only-stderr >&2", name = "stderr" },
  node{ func = function() return 1 end, outputs = "x", name = "lua_silent" },
  node{ func = function() print("lua-said") return 1 end, outputs = "y", name = "lua_talks" },
}
L
    run_flow 0 run
    equals "$(ls .flow/runs/latest/logs | sort | tr '\n' ' ')" "lua_talks.log stderr.log talks.log " "the logs made"
    equals "$(cat .flow/runs/latest/logs/talks.log)" "$(printf '$ echo said\nsaid')" "the log of a command"
    equals "$(cat .flow/runs/latest/logs/stderr.log)" "$(printf '$ echo only-stderr >&2\nonly-stderr')" "the log of stderr"
    run_flow 2 logs silent
    contains "$ERR" "no log of step 'silent'"
    contains "$ERR" "a step that writes no output has none"
}

test_a_silent_failing_step_says_it_has_no_log() {
    write pipeline.lua <<'L'
return pipeline{ node{ command = "exit 3", name = "mute" } }
L
    run_flow 1 run
    contains "$ERR" "step 'mute' failed (exit code 3)"
    contains "$ERR" "no log: the step wrote no output"
    not_contains "$ERR" "full log:"
    [ ! -e .flow/runs/latest/logs/mute.log ] || { echo "a log of a silent step"; return 1; }
}

test_a_retry_that_speaks_gets_its_own_header() {
    write pipeline.lua <<'L'
return pipeline{ node{ command = "echo x >> tries; [ $(wc -l < tries) -ge 2 ] && echo second-try", name = "late",
                       retries = 1 } }
L
    run_flow 0 run
    log=$(cat .flow/runs/latest/logs/late.log)
    not_contains "$log" "attempt 1 of 2"
    contains "$log" "attempt 2 of 2"
    contains "$log" "second-try"
}

# --log-format json: every line flow writes on stderr is a JSON object.
test_log_format_json() {
    write pipeline.lua <<'L'
return pipeline{
  node{ command = "echo made; echo data > ${outputs.a}", outputs = "a", name = "make" },
  node{ command = "echo 'bad \"input\"' >&2; exit 3", inputs = "a", outputs = "b", name = "break" },
  node{ command = "echo > ${outputs.c}", outputs = "c", name = "side" },
}
L
    run_flow 1 run --log-format json -v -j 1 -k
    printf '%s\n' "$ERR" | python3 -c '
import json, sys
events = [json.loads(line) for line in sys.stdin if line.strip()]
assert all("time" in e for e in events), events
starts = [e["step"] for e in events if e.get("event") == "step_start"]
ends = {e["step"]: e["state"] for e in events if e.get("event") == "step_end"}
assert sorted(starts) == ["break", "make", "side"], starts
assert ends == {"make": "done", "break": "failed", "side": "done"}, ends
out = [(e["source"], e["line"]) for e in events if e.get("event") == "output"]
assert ("make", "made") in out and ("break", "bad \"input\"") in out, out
end = [e for e in events if e.get("event") == "run_end"][0]
assert end["steps"]["failed"] == 1 and end["steps"]["done"] == 2 and end["interrupted"] is False, end
errors = [e["message"] for e in events if e.get("level") == "error"]
assert any("break" in m and "failed (exit code 3)" in m and "bad \"input\"" in m for m in errors), errors
infos = [e["message"] for e in events if e.get("level") == "info"]
assert any("flow run --resume" in m for m in infos), infos
'
    not_contains "$ERR" $'\033' "stderr (no colour)"
    # a rerun: up-to-date steps are events too
    write pipeline.lua <<'L'
return pipeline{ node{ command = "echo data > ${outputs.a}", outputs = "a", name = "make" } }
L
    run_flow 0 run -q
    run_flow 0 run --log-format json
    contains "$ERR" '"event":"step_end","step":"make","state":"up to date"}'
    run_flow 2 run --log-format yaml
    contains "$ERR" "--log-format must be text or json, got 'yaml'"
}

# Every line is valid JSON, whatever bytes a step prints: valid UTF-8 as it
# is, each byte that is not as U+FFFD (in output lines and error messages).
test_log_format_json_with_output_that_is_not_utf8() {
    write pipeline.lua <<'L'
return pipeline{ node{ command = [[printf 'bad \377\376 caf\303\251\n'; printf 'worse \300\257\n' >&2; exit 2]],
                       name = "bytes" } }
L
    run_flow 1 run --log-format json -v
    python3 -c '
import json, sys
events = [json.loads(line) for line in open(sys.argv[1], "rb") if line.strip()]
out = [e["line"] for e in events if e.get("event") == "output"]
assert "bad \ufffd\ufffd caf\u00e9" in out and "worse \ufffd\ufffd" in out, out
errors = [e["message"] for e in events if e.get("level") == "error"]
assert any("worse \ufffd\ufffd" in m for m in errors), errors
' stderr.txt
}
