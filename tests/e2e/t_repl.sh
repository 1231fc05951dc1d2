# t_repl.sh — flow repl under a pseudo-terminal (tests/e2e/pty_drive.py types
# as a person would): expressions, multi-line chunks, completion, an error
# and recovery, Ctrl-C at the prompt, in an expression and during a step,
# the helpers, history; and piped input without a prompt.

DRIVE="/usr/bin/python3 $FLOW_ROOT/tests/e2e/pty_drive.py"

repl_project() {
    write conf/base/parameters.yml <<'Y'
epochs: 3
nap: 0
Y
    write conf/base/catalog.yml <<'Y'
report: {type: json, path: data/report.json}
Y
    write pipeline.lua <<'L'
local function train(epochs) return { loss = 1 / epochs } end
return pipeline{
  node{ func = train, inputs = "params:epochs", outputs = "model", name = "train" },
  node{ command = "sleep ${params.nap}; echo '{\"ok\": true}' > ${outputs.r}", inputs = { m = "model" },
        outputs = { r = "report" }, name = "evaluate" },
}
L
}

# drive STEPS... — runs flow repl on a pty with these steps (pty_drive.py's)
drive() {
    printf '%s\n' "$@" >steps.txt
    set +e
    XDG_STATE_HOME="$PWD/state" $DRIVE steps.txt -- "$FLOW" repl >screen.txt 2>&1
    STATUS=$?
    set -e
    SCREEN=$(cat screen.txt)
    [ "$STATUS" = 0 ] || { echo "--- the session:"; cat screen.txt; return 1; }
}

test_expressions_chunks_errors_and_history() {
    repl_project
    drive 'expect Ctrl-D leaves.*> $' \
          'send 1+1\n' 'expect \n2\r?\n> $' \
          'send function twice(x)\n' 'expect >> $' 'send   return 2 * x\n' 'expect >> $' 'send end\n' 'expect > $' \
          'send twice(21)\n' 'expect 42' \
          'send {1, "two", {a = 1, b = {c = {d = {}}}}}\n' 'expect \{ 1, "two", \{ a = 1, b = \{ c = \{…\} \} \} \}' \
          'send error("boom")\n' 'expect error: stdin:1: boom.*stack traceback.*> $' \
          'send 2 +\n' 'expect >> $' 'send 3\n' 'expect \n5\r?\n> $' \
          'send {1,\n' 'expect >> $' 'send \x03' 'expect \n> $' 'send 7\n' 'expect \n7\r?\n> $' \
          'send pipeline\n' 'expect <pipeline: 2 steps: train, evaluate>' \
          'send params.epochs\n' 'expect \n3\r?\n> $' \
          'send \x04' 'exit 0'
    contains "$(cat state/flow/history)" "1+1"
    contains "$(cat state/flow/history)" "function twice(x)"
}

test_completion() {
    repl_project
    drive 'expect > $' \
          'send para\t' 'expect params' 'send .epo\t' 'expect \.epochs' 'send \n' 'expect \n3\r?\n> $' \
          'send string.up\t' 'expect string\.upper' 'send ("a")\n' 'expect "A"' \
          'send step("ev\t' 'expect evaluate' 'send ).kind\n' 'expect "command"' \
          'send load("rep\t' 'expect report' 'send \x03' 'expect > $' \
          'send n = pipeline.nodes[1]\n' 'expect > $' 'send n.na\t' 'expect n\.name' 'send \n' 'expect "train"' \
          "send n\\n" "expect <step 'train' \\(Lua function\\)" \
          'send \x04' 'exit 0'
}

# A name with a dot (a namespaced step, ns.train) completes after the dot
# too: readline breaks words there, and the part before it was taken for a
# table's path (nothing completed).
test_completion_of_dotted_names() {
    write pipeline.lua <<'L'
local inner = pipeline{ node{ func = function() return 1 end, outputs = "a", name = "train" },
                        node{ func = function(a) return a end, inputs = "a", outputs = "b", name = "test" } }
return pipeline{ pipeline{ inner, namespace = "ns" } }
L
    drive 'expect > $' \
          'send step("ns.tr\t' 'expect ns\.train' 'send ").name\n' 'expect "ns\.train"' \
          'send run{ nodes = "ns.te\t' 'expect ns\.test' 'send \x03' 'expect > $' \
          'send \x04' 'exit 0'
}

test_helpers_run_load_save_step_reload() {
    repl_project
    echo 'notes: {type: text, path: data/notes.txt}' >>conf/base/catalog.yml
    drive 'expect > $' \
          'send r = run{}\n' 'expect > $' 'send r.status, r.code\n' 'expect "ok"\t0' \
          'send load("report")\n' 'expect \{ ok = true \}' \
          'send load("model")\n' 'expect \{ loss = 0\.333' \
          'send save("notes", "hello")\n' 'expect "data/notes\.txt"' \
          'send load("nope")\n' "expect no step makes 'nope'" \
          'send step("train").inputs\n' 'expect \{ "params:epochs" \}' \
          'send run{params = {epochs = 4}, nodes = "train"}.status\n' 'expect "ok"' \
          'send load("model").loss\n' 'expect 0\.25\r?\n> $' \
          'send \x04' 'exit 0'
    equals "$(cat data/notes.txt)" "hello" "what save() wrote"
    # reload: the script read again
    drive 'expect > $' 'send #pipeline.nodes\n' 'expect \n2\r?\n> $' \
          'send s = io.open("pipeline.lua"):read("a"):gsub("evaluate", "assess") io.open("pipeline.lua", "w"):write(s):close()\n' \
          'expect > $' 'send reload()\n' 'expect <pipeline: 2 steps: train, assess>\r?\n> $' \
          'send \x04' 'exit 0'
}

test_ctrl_c_stops_an_expression_and_a_step() {
    repl_project
    drive 'expect > $' \
          'send print("spinning") while true do end\n' 'expect spinning\r?\n' 'sleep 0.2' 'send \x03' \
          'expect error: interrupted\r?\n> $' \
          'send r = run{params = {nap = 30}}\n' 'expect running 1' 'sleep 0.3' 'send \x03' 'expect > $' \
          'send r.code\n' 'expect 130' \
          'send run{}.code\n' 'expect \n0\r?\n> $' \
          'send \x04' 'exit 0'
}

# load() of a value the last run did not keep (a large one only steps read)
# says so and how to make it; run{to_outputs =, force = true} hands it back.
test_load_of_a_value_not_kept_says_how_to_make_it() {
    write pipeline.lua <<'L'
return pipeline{
  node{ name = "make", outputs = "t", func = function() return string.rep("z", 2000) end },
  node{ name = "use", inputs = "t", outputs = "n", func = function(t) return #t end },
}
L
    run_flow 0 run
    printf 'print(load("n"))\nprint(pcall(load, "t"))\nprint(run{to_outputs = "t"}.outputs.t)\nprint(#run{to_outputs = "t", force = true}.outputs.t)\n' |
        "$FLOW" repl pipeline.lua >out.txt 2>err.txt
    equals "$(cat out.txt)" "2000
false	load: 't' is not kept between runs (a large value its last run handed only to steps): run{ to_outputs = \"t\", force = true }.outputs[\"t\"] makes it
nil
2000" "stdout"
}

test_piped_input_has_no_prompt() {
    repl_project
    printf 'print(params.epochs)\n1 + 1\nfor i = 1, 2 do\n  print(i)\nend\n' | "$FLOW" repl >out.txt 2>err.txt
    equals "$(cat out.txt)" "3
2
1
2" "stdout"
    equals "$(cat err.txt)" "" "stderr"
    set +e
    printf 'error("bad")\nprint("after")\n' | "$FLOW" repl >out.txt 2>err.txt
    status=$?
    set -e
    equals "$status" 1 "exit status after an error"
    equals "$(cat out.txt)" "after" "stdout"
    contains "$(cat err.txt)" "error: stdin:1: bad"
    # no script: a plain Lua prompt with flow
    mkdir empty && cd empty
    equals "$(echo 'print(type(flow.run), pipeline)' | "$FLOW" repl)" "function	nil" "without a script"
    run_flow 2 repl nope.lua
    contains "$ERR" "no such script: nope.lua"
}

# reload() of a broken script printed "error: table: 0x..." (the CLI's
# script error, a table): it prints the message, as a setup error's is.
test_reload_of_a_broken_script_says_why() {
    repl_project
    set +e
    printf '%s\n' 'io.open("pipeline.lua", "w"):write("return 42\n"):close()' 'reload()' \
        'io.open("pipeline.lua", "w"):write("return pipeline{ node{ command = \"x\", name = \"a\" }, node{ command = \"y\", name = \"a\" } }\n"):close()' \
        'reload()' | "$FLOW" repl pipeline.lua >out.txt 2>err.txt
    status=$?
    set -e
    equals "$status" 1 "exit status"
    contains "$(cat err.txt)" "error: pipeline.lua returned a number; a pipeline script returns pipeline{...}"
    contains "$(cat err.txt)" "error: two steps are named 'a'"
    not_contains "$(cat err.txt)" "table: 0x"
    not_contains "$(cat err.txt)" "stack traceback"
}

# SIGTERM at the prompt ends the session (exit 143), and SIGHUP, its
# terminal closed, too (129): both only redrew the prompt, kill -9 alone
# ended it.
test_sigterm_and_sighup_end_the_session() {
    repl_project
    drive 'expect > ' 'signal TERM' 'exit 143'
    drive 'expect > ' 'signal HUP' 'exit 129'
    # a SIGTERM after a Ctrl-C (as a supervisor escalates) still ends it
    drive 'expect > ' 'send os.execute("sleep 2")\n' 'sleep 0.3' 'signal INT' 'sleep 0.2' 'signal TERM' 'exit 143'
}

# The session after run{}: the project's lock is released (an idle session
# kept every flow run and flow clean out: "another flow run is using this
# project"), save() of a versioned dataset makes a version each time (one
# version was overwritten), and a value whose metamethods raise is said
# (it ended the session, "internal error").
test_a_session_after_run_holds_no_lock_and_saves_versions() {
    repl_project
    write conf/base/catalog.yml <<'Y'
notes: {type: json, path: data/notes.json, versioned: true}
Y
    ( printf 'save("notes", { a = 1 })\nsave("notes", { a = 2 })\nr = run{}\nos.execute("sleep 2")\nsetmetatable({}, { __pairs = function() error("boom") end })\nprint("alive")\n' |
        "$FLOW" repl >repl.txt 2>&1 ) &
    local pid=$!
    for _ in $(seq 100); do [ -e .flow/runs/latest ] && break; sleep 0.05; done
    sleep 0.5
    run_flow 0 run
    wait "$pid"
    equals "$(ls data/notes.json | wc -l)" 2 "versions saved"
    contains "$(cat repl.txt)" "<table: cannot be shown: stdin:1: boom>"
    contains "$(cat repl.txt)" "alive"
}
