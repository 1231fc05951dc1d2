# t_cli.sh — the command line: help, version, usage errors and their exit status.

test_help() {
    run_flow 0 --help
    contains "$OUT" "usage: flow <command>"
    contains "$OUT" "run [SCRIPT]"
    run_flow 0 run --help
    contains "$OUT" "--jobs"
    run_flow 0 help list
    contains "$OUT" "usage: flow list"
}

test_no_arguments_is_usage_error() {
    run_flow 2
    contains "$OUT" "usage: flow"
}

test_version() {
    run_flow 0 --version
    contains "$OUT" "flow 0."
    contains "$OUT" "Lua 5.4"
}

test_unknown_command_suggests() {
    run_flow 2 rnu
    contains "$ERR" "unknown command 'rnu' (did you mean 'run'?)"
}

test_unknown_option_names_flag() {
    write pipeline.lua <<'L'
return pipeline{ node{ func = function() return 1 end, outputs = "x", name = "a" } }
L
    run_flow 2 run --jbos 2
    contains "$ERR" "unknown option '--jbos' for 'flow run' (did you mean '--jobs'?)"
}

test_bad_jobs_value() {
    write pipeline.lua <<'L'
return pipeline{ node{ func = function() return 1 end, outputs = "x", name = "a" } }
L
    run_flow 2 run -j zero
    contains "$ERR" "--jobs needs a whole number from 1 to 100000, got 'zero'"
    run_flow 2 run --jobs
    contains "$ERR" "option '--jobs' needs a value"
}

test_missing_script() {
    run_flow 2 run
    contains "$ERR" "no pipeline.lua in"
    run_flow 2 run nothere.lua
    contains "$ERR" "no such script: nothere.lua"
}

test_script_directory_argument() {
    write proj/pipeline.lua <<'L'
return pipeline{ node{ func = function() print("ran in dir") return 1 end, outputs = "x", name = "a" } }
L
    run_flow 0 run proj
    contains "$OUT" "ran in dir"
    [ -d proj/.flow/runs ] || { echo "state must live beside the script"; return 1; }
    [ ! -e .flow ] || { echo "no .flow in the caller's directory"; return 1; }
}

test_quiet_and_verbose() {
    write pipeline.lua <<'L'
return pipeline{ node{ command = "echo hello-from-command", name = "say" } }
L
    run_flow 0 run -q
    not_contains "$ERR" "done" stderr
    run_flow 0 run -v --force
    contains "$ERR" "[say] hello-from-command"
    run_flow 2 run -q -v
}
