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

config_project() {
    write conf/base/parameters.yml <<'Y'
model:
  lr: 0.1
Y
    write pipeline.lua <<'L'
return pipeline{ node{ func = function() return 1 end, outputs = "x", name = "a" } }
L
}

test_config_explain_forms() {
    config_project
    run_flow 0 config model.lr --explain        # the README's form
    contains "$OUT" "conf/base/parameters.yml:2"
    run_flow 0 config --explain model.lr
    contains "$OUT" "parameters: model.lr = 0.1"
    run_flow 2 config model --explain model.lr
    contains "$ERR" "give one KEY to explain"
    run_flow 2 config --explain
    contains "$ERR" "--explain needs a KEY"
}

test_config_explain_missing_key_exits_2() {
    config_project
    run_flow 2 config --explain model.lrr
    contains "$ERR" "no key 'model.lrr' in the parameters of environment 'local' (did you mean 'model.lr'?)"
    run_flow 2 config model.lrr
    contains "$ERR" "no key 'model.lrr'"
}

test_config_outside_a_project() {
    mkdir empty && cd empty
    run_flow 2 config
    contains "$ERR" "not in a flow project: no conf/ directory and no pipeline.lua in"
}

test_combined_short_flags() {
    write pipeline.lua <<'L'
return pipeline{ node{ command = "echo hello-from-command", name = "say" } }
L
    run_flow 0 run -nv
    contains "$OUT" "1 of 1 selected steps would run"
    run_flow 0 run -qk
    [ -d .flow/runs ] || { echo "-qk did not run"; return 1; }
    run_flow 0 run -vj1 --force
    contains "$ERR" "[say] hello-from-command"
    run_flow 2 run -nx
    contains "$ERR" "unknown option '-x' for 'flow run'"
}

test_params_with_a_space_instead_of_a_comma() {
    config_project
    run_flow 2 config --params 'a=1 b=2'
    contains "$ERR" "separate overrides with commas (a=1,b=2)"
    run_flow 2 run --params 'model.lr=1 epochs=2'
    contains "$ERR" "separate overrides with commas"
    run_flow 0 config note --params 'note=spaced out'   # a space alone is a string
    contains "$OUT" "spaced out"
}

test_durations_combine_units() {
    write pipeline.lua <<'L'
return pipeline{
  node{ command = "true", name = "a", timeout = "1h30m" },
  node{ command = "true", name = "b", timeout = "500ms" },
  node{ command = "true", name = "c", timeout = "1d 12h" },
}
L
    run_flow 0 run
    run_flow 0 clean --runs-older-than 1h30m
    contains "$ERR" "removed 0 runs older than 1h30m"
    run_flow 0 run --force
    sleep 1
    run_flow 0 run --force
    run_flow 0 clean --runs-older-than 0s
    contains "$ERR" "removed 2 runs older than 0s"
    equals "$(ls .flow/runs | grep -vc latest)" 1 "runs left (the latest)"
    run_flow 2 clean --runs-older-than 1h30
    contains "$ERR" "--runs-older-than needs a duration"
    # an age past any run's is out of range, named as the flag (1e20 days has no whole number to print)
    run_flow 0 clean -n --runs-older-than 36500d
    contains "$ERR" "would remove 0 runs older than 36500d"
    run_flow 2 clean --runs-older-than 99999999999999999999d
    contains "$ERR" "--runs-older-than must be at most 36500d (100 years), got '99999999999999999999d'"
    not_contains "$ERR" "internal error" stderr
    write pipeline.lua <<'L'
return pipeline{ node{ command = "true", name = "a", timeout = "0s" } }
L
    run_flow 2 run
    contains "$ERR" "node: timeout must be seconds or a duration"
}

test_help_help_and_usage_error_hints() {
    run_flow 0 help --help
    contains "$OUT" "usage: flow help [COMMAND]"
    run_flow 0 help help
    contains "$OUT" "usage: flow help [COMMAND]"
    write pipeline.lua <<'L'
return pipeline{ node{ func = function() return 1 end, outputs = "x", name = "a" } }
L
    run_flow 2 run --jbos 2
    contains "$ERR" "(see 'flow run --help')"
    run_flow 2 catalog lsit
    contains "$ERR" "(see 'flow catalog --help')"
    run_flow 2 clean --bogus
    contains "$ERR" "(see 'flow clean --help')"
    run_flow 2 rnu
    contains "$ERR" "(see 'flow --help')"
}

test_json_lists_and_nulls() {
    write conf/base/catalog.yml <<'Y'
raw: {type: text, path: raw.txt}
Y
    echo data > raw.txt
    write pipeline.lua <<'L'
return pipeline{
  node{ func = function(r) return r end, inputs = "raw", outputs = "rows", name = "load" },
  node{ command = "cat ${inputs.rows} > ${outputs.out}", inputs = "rows", outputs = "out", name = "c" },
}
L
    run_flow 0 list --format json
    contains "$OUT" '"tags":	[]'
    contains "$OUT" '"distribution":	null'
    not_contains "$OUT" '{
		}'
    run_flow 0 catalog list --format json
    contains "$OUT" '"used_by":	[]'
    contains "$OUT" '"produced_by":	null'
    not_contains "$OUT" '{
		}'
    write pipeline.lua <<'L'
return pipeline{}
L
    run_flow 0 list --format json
    equals "$OUT" "[]" "an empty pipeline's steps"
}

# "skipped" is a step a selection leaves out; "up to date" one that need not run again.
test_up_to_date_is_not_called_skipped() {
    write pipeline.lua <<'L'
return pipeline{
  node{ command = "echo a > ${outputs.x}", outputs = "x", name = "a" },
  node{ command = "cat ${inputs.x} > ${outputs.y}", inputs = "x", outputs = "y", name = "b" },
}
L
    run_flow 0 run
    run_flow 0 run -v --progress=plain
    contains "$ERR" "up to date  a"
    contains "$ERR" "0 done, 2 up to date in"
    not_contains "$ERR" "skipped" stderr
    run_flow 0 run --nodes b --progress=plain
    contains "$ERR" "0 done, 1 up to date, 1 skipped in"
    run_flow 0 run --help
    not_contains "$OUT" "is skipped." "flow run --help"
    contains "$OUT" "Steps a selection leaves out are skipped."
}

# flow runs: the run history, newest first; flow runs show: one run.
test_runs_lists_history_and_shows_one() {
    write pipeline.lua <<'L'
return pipeline{
  node{ command = "echo a > ${outputs.a}", outputs = "a", name = "make" },
  node{ command = "test -z \"$FAIL\" && cp ${inputs.a} ${outputs.b}", inputs = "a", outputs = "b", name = "copy" },
  node{ command = "sleep ${params.nap} && echo > ${outputs.c}", inputs = "b", outputs = "c", name = "nap" },
}
L
    write conf/base/parameters.yml <<'Y'
nap: 0
Y
    mkdir -p conf/local
    run_flow 0 runs
    contains "$ERR" "no runs yet"
    run_flow 0 run -q
    FAIL=1 run_flow 1 run -q --force
    run_flow 0 run -q --params nap=0.1 --env local
    # one killed while it runs: unfinished
    run_flow_bg run -q --params nap=30
    for i in $(seq 100); do
        grep -q 'nap=30' .flow/runs/latest/journal.jsonl 2>/dev/null &&
            grep -q '"step":"nap"' .flow/runs/latest/journal.jsonl && break
        sleep 0.1
    done
    kill -9 "$FLOW_PID"; wait "$FLOW_PID" 2>/dev/null || true
    run_flow 0 runs
    rows=$(printf '%s\n' "$OUT" | tail -n +2 | awk -F'  +' '{print $3 " | " $5 " | " $7}')
    equals "$rows" "unfinished | 2 up to date, 1 running | flow run -q --params nap=30
ok | 1 done, 2 up to date | flow run -q --params nap=0.1 --env local
failed | 1 done, 1 failed, 1 not run | flow run -q --force
ok | 3 done | flow run -q" "status, steps and command of each run"
    contains "$(printf '%s\n' "$OUT" | head -1)" "run  "
    run_flow 0 runs -n 1
    equals "$(printf '%s\n' "$OUT" | grep -c '^20')" 1 "runs listed"
    contains "$OUT" "(3 older runs: flow runs --all)"
    run_flow 0 runs --format json
    printf '%s' "$OUT" | python3 -c '
import json, sys
runs = json.load(sys.stdin)
assert [r["status"] for r in runs] == ["unfinished", "ok", "failed", "ok"], runs
assert runs[2]["code"] == 1 and runs[2]["counts"] == {"done": 1, "failed": 1, "not run": 1}, runs[2]
assert runs[0]["code"] is None and runs[3]["env"] == "local" and runs[3]["steps"] == 3, runs
'
    failed=$(printf '%s' "$OUT" | python3 -c 'import json,sys; print(json.load(sys.stdin)[2]["id"])')
    run_flow 0 runs show "${failed%-*}"      # a unique prefix will do
    contains "$OUT" "run      $failed"
    contains "$OUT" "command  flow run -q --force"
    contains "$OUT" "status   failed (exit status 1)"
    contains "$OUT" "steps    1 done, 1 failed, 1 not run"
    contains "$OUT" "copy  failed"
    run_flow 2 runs show nope
    contains "$ERR" "flow runs show: no run 'nope'"
    run_flow 2 runs -n 1 --all
    contains "$ERR" "-n and --all contradict each other"
    cd .. && run_flow 0 runs "$OLDPWD" -n 1 && cd "$OLDPWD"
    contains "$OUT" "unfinished"
}

# flow new NAME: a project that runs at once.
test_new_creates_a_project_that_runs() {
    run_flow 0 new my-proj
    contains "$ERR" "next: cd my-proj && flow run"
    for f in pipeline.lua conf/base/parameters.yml conf/base/catalog.yml conf/local/.gitignore data/words.txt \
             src/README.md .gitignore .amlignore README.md; do
        test -f "my-proj/$f" || { echo "flow new made no $f"; return 1; }
    done
    contains "$(cat my-proj/.gitignore)" ".flow/"
    contains "$(cat my-proj/README.md)" "# my-proj"
    cd my-proj
    run_flow 0 run
    contains "$ERR" "3 done"
    contains "$ERR" "metrics: kept_words 5"
    equals "$(cat data/report.txt)" "a:	2
dog:	2
fox:	4
quick:	2
the:	4" "the report"
    run_flow 0 run --params min_count=3
    equals "$(cut -f1 data/report.txt | tr '\n' ' ')" "fox: the: " "the report with min_count=3"
    cd ..
    run_flow 2 new my-proj
    contains "$ERR" "'my-proj' exists and is not empty"
    touch afile
    run_flow 2 new afile
    contains "$ERR" "'afile' exists and is not a directory"
    run_flow 2 new
    contains "$ERR" "flow new takes one project name"
    mkdir empty
    run_flow 0 new empty/
    test -f empty/pipeline.lua
}

# -o writes where a shell redirection would: through a symbolic link (the
# link stays), into a FIFO or a device (never replaced by a file: a run as
# root once turned /dev/full into a regular file).  And what flow prints is
# checked: stdout full or closed is an error, exit 2, not a silent 0.
test_output_goes_through_links_and_devices_and_write_errors_are_errors() {
    write pipeline.lua <<'L'
return pipeline{ node{ func = function() return 1 end, outputs = "x", name = "a" } }
L
    ln -s real.dot link.dot
    run_flow 0 viz -o link.dot
    [ -L link.dot ] || { echo "the link was replaced"; return 1; }
    contains "$(cat real.dot)" "digraph"
    mkfifo fifo
    cat fifo > from_fifo &
    local reader=$!
    run_flow 0 viz -o fifo
    wait "$reader"
    [ -p fifo ] || { echo "the FIFO was replaced"; return 1; }
    contains "$(cat from_fifo)" "digraph"
    if mknod full c 1 7 2>/dev/null; then          # a /dev/full of our own (as root)
        run_flow 2 viz -o full
        contains "$ERR" "cannot write $PWD/full: No space left on device"
        [ -c full ] || { echo "the device was replaced"; return 1; }
    fi
    set +e
    "$FLOW" list >/dev/full 2>stderr.txt; STATUS=$?
    set -e
    equals "$STATUS" 2 "exit status, stdout full"
    contains "$(cat stderr.txt)" "cannot write to standard output: No space left on device"
    set +e
    "$FLOW" list >&- 2>stderr.txt; STATUS=$?
    set -e
    equals "$STATUS" 2 "exit status, stdout closed"
    contains "$(cat stderr.txt)" "cannot write to standard output: it is closed"
    run_flow 2 viz -o .
    contains "$ERR" "is a directory"
}

# The project name goes into the files flow new writes: a newline in it
# would have ended pipeline.lua's first comment and run the rest as code.
test_new_refuses_a_name_with_a_control_character() {
    run_flow 2 new "$(printf 'p\nos.exit(7)--')"
    contains "$ERR" "the project name cannot contain a control character (byte 10 at 2)"
    local made
    made=$(ls | grep -v -e '^stdout.txt$' -e '^stderr.txt$' || true)
    [ -z "$made" ] || { echo "flow new made something: $made"; return 1; }
}

# A list flag given again adds to its list (as if the values were joined with
# commas), and so does --params (a later key wins); every command that shares
# the parser does so.  (Each was kept only as its last occurrence.)
test_repeated_list_flags_and_params_accumulate() {
    write conf/base/parameters.yml <<'Y'
a: 0
b: 0
Y
    write pipeline.lua <<'L'
return pipeline{
  node{ func = function(p) print("a=" .. p.a .. " b=" .. p.b) return 1 end, inputs = "parameters",
        outputs = "x", name = "one", tags = "t1" },
  node{ func = function() return 1 end, outputs = "y", name = "two", tags = "t2" },
  node{ func = function() return 1 end, outputs = "z", name = "three", tags = "t3" },
}
L
    run_flow 0 run -n --nodes one --nodes two
    contains "$OUT" "2 of 2 selected steps would run"
    run_flow 0 run -n --tags t1 --tags=t3
    contains "$OUT" "one"
    contains "$OUT" "three"
    not_contains "$OUT" "two"
    run_flow 0 run -n --to-outputs x --to-outputs y,z
    contains "$OUT" "3 of 3 selected steps would run"
    run_flow 0 list --nodes one --nodes three
    contains "$OUT" "three"
    not_contains "$OUT" "two"
    run_flow 0 run --nodes one --params a=1 -p b=5 --params b=2
    contains "$OUT" "a=1 b=2"
    run_flow 0 config parameters --params a=1 --params=b=2
    contains "$OUT" "a: 1"
    contains "$OUT" "b: 2"
    run_flow 2 run --params a=1 --params 'b="open'
    contains "$ERR" "--params: unterminated quoted string"
}

# A single-valued flag given twice with two values is refused, naming it (it
# kept the last one); the same value twice is one choice.
test_single_valued_flag_given_twice_exits_2() {
    write pipeline.lua <<'L'
return pipeline{ node{ func = function() return 1 end, outputs = "x", name = "a" } }
L
    run_flow 2 run --env dev -e prod
    contains "$ERR" "option '--env' given twice ('dev', then 'prod'): it takes one value"
    run_flow 2 run -n -j 2 --jobs=3
    contains "$ERR" "option '--jobs' given twice ('2', then '3')"
    run_flow 2 run --pipeline p --pipeline q
    contains "$ERR" "option '--pipeline' given twice"
    run_flow 2 run --resume r1 --resume r2
    contains "$ERR" "option '--resume' given twice ('r1', then 'r2')"
    run_flow 2 viz --format dot --format mermaid
    contains "$ERR" "option '--format' given twice"
    run_flow 2 sweep --grid a=1,2 --metric m --metric n
    contains "$ERR" "option '--metric' given twice"
    run_flow 2 compile --env a --env b
    contains "$ERR" "option '--env' given twice"
    no_crash
    run_flow 0 run -n --env local --env local -j 2 -j2 --force --force
    contains "$OUT" "1 of 1 selected steps would run"
}

# flow list, viz, compile and catalog list describe a pipeline: a driver
# script (one that runs pipelines of its own with flow.run) is refused at
# its first flow.run, before any step runs.  `flow list driver.lua` ran
# the driver's steps and exited 0 printing nothing, and the shells' Tab
# completion of --nodes (flow list --format json) ran them too.
test_describing_commands_refuse_a_driver_before_it_runs() {
    write driver.lua <<'L'
local p = pipeline{ node{ command = "date >> side_effect", name = "train" } }
flow.run(p, { force = true })
L
    local cmd
    for cmd in list viz compile "catalog list"; do
        run_flow 2 $cmd driver.lua
        contains "$ERR" "flow $cmd describes a pipeline without running it, and driver.lua runs pipelines of its own (flow.run)"
    done
    [ ! -e side_effect ] || { echo "a step ran: $(cat side_effect)"; return 1; }
    # flow.sweep and flow.spawn too (a sweep caught the refusal of each
    # trial's flow.run, and ran on; a driver may catch what flow.wait_all raises)
    write sweeper.lua <<'L'
local p = pipeline{ node{ command = "date >> side_effect", name = "train" } }
flow.sweep{ pipeline = p, grid = { k = { 1, 2 } }, metric = "m" }
L
    write spawner.lua <<'L'
local p = pipeline{ node{ command = "date >> side_effect", name = "train" } }
pcall(flow.wait_all, { flow.spawn(flow.run, p) })
L
    run_flow 2 list sweeper.lua
    contains "$ERR" "flow list describes a pipeline without running it, and sweeper.lua runs pipelines of its own (flow.sweep)"
    run_flow 2 list spawner.lua
    contains "$ERR" "spawner.lua runs pipelines of its own (flow.spawn)"
    [ ! -e side_effect ] && [ ! -d .flow/sweeps ] || { echo "something ran"; return 1; }
    printf 'return 1 == 1 and nil\n' > empty.lua
    run_flow 2 list empty.lua
    contains "$ERR" "empty.lua defines no pipeline"
    run_flow 0 run driver.lua
    [ -s side_effect ] || { echo "flow run did not run the driver"; return 1; }
}
