# t_integrity.sh — integrity under faults: flow never writes or deletes
# through a link under .flow/, never writes a credential into its files,
# reports a broken environment (a file where a directory belongs, a read-only
# project, a full disk) as a message naming the path, and a failed write fails
# the step or the run and commits nothing.  docs/RELIABILITY.md lists these.
#
# Disk faults come from tests/e2e/faultshim.c (LD_PRELOAD), built by the
# Makefile next to the flow binary: $(BUILD)/tests/libfaultshim.so.

SECRET=tok-SECRET-4242

shim_path() {
    local d
    for d in "$(dirname "$FLOW")/tests" "${FLOW_ROOT:-.}/build/tests"; do
        [ -f "$d/libfaultshim.so" ] && { echo "$d/libfaultshim.so"; return; }
    done
    skip "no libfaultshim.so beside $FLOW (make $(dirname "$FLOW")/tests/libfaultshim.so)"
}

# with_faults OPS PATTERN [ERRNO [AFTER]] -- EXPECTED_STATUS ARGS...: run_flow
# with the calls OPS (write, fsync, rename, create) failing on paths matching
# PATTERN.
with_faults() {
    local ops=$1 pattern=$2 err=ENOSPC after=0 shim
    shift 2
    [ "$1" != "--" ] && { err=$1; shift; }
    [ "$1" != "--" ] && { after=$1; shift; }
    shift
    shim=$(shim_path)
    LD_PRELOAD=$shim FLOW_FAULT=$ops FLOW_FAULT_PATH=$pattern FLOW_FAULT_ERRNO=$err FLOW_FAULT_AFTER=$after \
        ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0 run_flow "$@"
}

clean_failure() {   # the last run failed with a message, not a crash or a traceback
    no_crash
    not_contains "$ERR" "stack traceback" stderr
}

# a (Lua) -> b (Lua) -> c (command writing a file output); each step notes
# that it ran in ran.log.
small_project() {
    write pipeline.lua <<'L'
local function note(name) local f = io.open("ran.log", "a") f:write(name, "\n") f:close() end
return pipeline{
  node{ name = "a", outputs = "x", func = function() note("a") return 1 end },
  node{ name = "b", inputs = "x", outputs = "y", func = function(x) note("b") return x + 1 end },
  node{ name = "c", inputs = { y = "y" }, outputs = { out = "o" },
        command = { "sh", "-c", 'echo c >> ran.log; cat "$0" > "$1"', "${inputs.y}", "${outputs.out}" } },
}
L
}

ran() { tr '\n' ' ' < ran.log 2>/dev/null; rm -f ran.log; }

# ---- links under .flow/ -------------------------------------------------------

test_lock_symlink_is_refused_never_followed() {
    small_project
    mkdir .flow
    echo precious > victim.txt
    ln -s "$PWD/victim.txt" .flow/lock
    run_flow 2 run
    contains "$ERR" ".flow/lock is a symbolic link"
    clean_failure
    run_flow 2 clean
    contains "$ERR" ".flow/lock is a symbolic link"
    equals "$(cat victim.txt)" "precious" "the file .flow/lock points to"
    [ ! -e ran.log ] || { echo "steps ran: $(ran)"; return 1; }
}

test_symlinked_state_directories_are_refused() {
    small_project
    run_flow 0 run
    for d in runs cache tmp data; do
        mkdir -p "victim-$d"
        rm -rf ".flow/$d"
        ln -s "$PWD/victim-$d" ".flow/$d"
        run_flow 2 run --force
        contains "$ERR" ".flow/$d is a symbolic link" "stderr with .flow/$d a link"
        clean_failure
        equals "$(ls -A "victim-$d")" "" "what flow wrote through .flow/$d"
        rm ".flow/$d"
    done
    rm -f ran.log
    mv .flow flow-state
    ln -s "$PWD/flow-state" .flow
    run_flow 2 run
    contains "$ERR" ".flow is a symbolic link"
    [ ! -e ran.log ] || { echo "steps ran with .flow a link: $(ran)"; return 1; }
}

test_state_files_that_are_links_are_replaced_not_written_through() {
    small_project
    run_flow 0 run
    echo precious > victim.txt
    for f in cache/state.log cache/hashes; do
        rm ".flow/$f"
        ln -s "$PWD/victim.txt" ".flow/$f"
    done
    run_flow 0 run --force
    equals "$(cat victim.txt)" "precious" "a file that .flow/cache/state.log or hashes pointed to"
    [ ! -L .flow/cache/state.log ] || { echo ".flow/cache/state.log is still a link"; return 1; }
    run_flow 0 run
    contains "$ERR" "3 up to date"
}

test_clean_unlinks_a_symlinked_tmp_and_never_empties_it() {
    small_project
    run_flow 0 run
    mkdir -p victim/keep
    echo precious > victim/keep/file
    rm -rf .flow/tmp
    ln -s "$PWD/victim" .flow/tmp
    run_flow 0 clean
    equals "$(cat victim/keep/file)" "precious" "a file in the directory .flow/tmp pointed to"
    [ ! -e .flow/tmp ] && [ ! -L .flow/tmp ] || { echo ".flow/tmp is still there"; return 1; }
    # A link in place of a run directory: refused, never emptied.
    ln -s "$PWD/victim" .flow/runs/20000101-000000-1
    run_flow 2 clean --runs-older-than 1s
    contains "$ERR" ".flow/runs/20000101-000000-1: it is a symbolic link"
    clean_failure
    equals "$(cat victim/keep/file)" "precious" "a file in the directory a run link pointed to"
}

# ---- secrets ------------------------------------------------------------------

test_credentials_never_reach_flow_files() {
    write conf/base/credentials.yml <<Y
api:
  key: "$SECRET"
Y
    mkdir -p "conf/stage$SECRET"
    write conf/base/parameters.yml <<'Y'
api_key: none
Y
    write pipeline.lua <<'L'
return pipeline{
  -- an error message built from a parameter
  node{ name = "check", inputs = "params:api_key", outputs = "checked",
        func = function(k) error("the service rejected key " .. k) end },
  -- an error message of the Lua code itself
  node{ name = "login", outputs = "session",
        func = function() error("login failed for tok-SECRET-4242") end },
  -- a value holding the secret: used in memory, never cached (a step reads
  -- it: not kept; a result: cannot be cached)
  node{ name = "token", outputs = "t", func = function() return "Bearer tok-SECRET-4242" end },
  node{ name = "use", inputs = "t", outputs = "n", func = function(t) return #t end },
  node{ name = "token_result", outputs = "t2", func = function() return "Bearer tok-SECRET-4242" end },
  -- a command that reads it: flow would have to write it to a file
  node{ name = "cmd_reads", inputs = { t = "t" }, outputs = { o = "o" }, command = "cat ${inputs.t} > ${outputs.o}" },
  -- a command line holding it (the log's header)
  node{ name = "call", command = { "true", "${params.api_key}" } },
}
L
    run_flow 1 run -k --env "stage$SECRET" --params "api_key=$SECRET"
    contains "$ERR" "the service rejected key ***"
    contains "$ERR" "dataset 't' holds a credential, which flow does not write to a file for a command to read"
    hits=$(grep -rl -- "$SECRET" .flow || true)
    equals "$hits" "" "files under .flow/ holding the credential"
    contains "$(cat .flow/runs/latest/run.json)" "login failed for ***" "run.json"
    contains "$(cat .flow/runs/latest/journal.jsonl)" "the service rejected key ***" "the journal"
    # The step with the secret in its result is not taken as up to date next
    # time; the one whose value a step reads was not kept: it stands.
    run_flow 1 run -k --env "stage$SECRET" --params "api_key=$SECRET" --explain
    contains "$ERR" "token_result runs: its output 't2' cannot be cached (it holds a credential"
    contains "$ERR" "explain: token is up to date"
    # --resume cannot use arguments it never stored.
    run_flow 2 run --resume
    contains "$ERR" "had a credential among its arguments"
    clean_failure
    hits=$(grep -rl -- "$SECRET" .flow || true)
    equals "$hits" "" "files under .flow/ holding the credential"
}

test_short_credentials_leave_hashes_and_numbers_intact() {
    small_project
    run_flow 0 run
    # Credentials that happen to occur inside a fingerprint and inside every time
    hex=$(grep -o '"fingerprint":"[0-9a-f]*"' .flow/runs/latest/journal.jsonl | head -n 1 | cut -c16-21)
    num=$(date +%s | cut -c1-5)
    write conf/base/credentials.yml <<Y
db: { user: "$hex", pin: "$num" }
Y
    rm -f ran.log
    run_flow 0 run --force
    python3 -c '
import glob, json
for path in glob.glob(".flow/runs/*/journal.jsonl"):
    for line in open(path):
        json.loads(line)
json.load(open(".flow/runs/latest/run.json"))
'
    run_flow 0 run
    contains "$ERR" "3 up to date"
    sed -i 's/x + 1/error("b broke")/' pipeline.lua
    run_flow 1 run
    sed -i 's/error("b broke")/x + 1/' pipeline.lua
    run_flow 0 run --resume
    # A cached value that is that number is restored as it was.
    write pipeline.lua <<L
return pipeline{
  node{ name = "n", outputs = "n", func = function() return $num end },
  node{ name = "m", inputs = "n", outputs = "m", func = function(n)
    local f = io.open("got.txt", "w") f:write(math.type(n), " ", n) f:close() return n end },
}
L
    run_flow 0 run
    run_flow 0 run --nodes m --force
    equals "$(cat got.txt)" "integer $num" "the value m got from the cache"
}

# ---- the environment ----------------------------------------------------------

# A FIFO planted where flow keeps its state never blocks a run (its open
# would wait for a writer, and SIGTERM goes to flow's signalfd): refused,
# or read as empty, within the time limit.
test_fifos_in_place_of_state_files_never_block() {
    small_project
    for f in .flow/cache/state.log .flow/cache/hashes .flow/cache/merged_runs; do
        rm -rf .flow
        run_flow 0 run
        rm -f "$f"
        mkfifo "$f"
        rc=0
        timeout -s KILL 20 "$FLOW" run -q >/dev/null 2>err.txt || rc=$?
        [ "$rc" = 0 ] || [ "$rc" = 2 ] || { echo "$f: exit status $rc: $(cat err.txt)"; return 1; }
        not_contains "$(cat err.txt)" "stack traceback" "$f"
    done
}

test_state_paths_that_are_files_give_a_message() {
    small_project
    for p in .flow .flow/runs .flow/cache; do
        rm -rf .flow ran.log
        mkdir -p "$(dirname "$p")"
        echo not a directory > "$p"
        run_flow 2 run
        contains "$ERR" "$p is not a directory: remove or rename it" "stderr with $p a file"
        clean_failure
        [ ! -e ran.log ] || { echo "steps ran with $p a file: $(ran)"; return 1; }
    done
}

test_clean_with_flow_a_file_gives_a_message() {
    echo not a directory > .flow
    run_flow 2 clean
    contains "$ERR" ".flow is not a directory: remove or rename it"
    clean_failure
    equals "$(cat .flow)" "not a directory" "the file .flow"
}

test_lock_that_is_a_directory_gives_a_message() {
    small_project
    mkdir -p .flow/lock
    run_flow 2 run
    contains "$ERR" "cannot open .flow/lock: .flow/lock is a directory where flow keeps a file: remove it"
    clean_failure
}

test_read_only_project_gives_a_message() {
    small_project
    with_faults create "$PWD/*" EROFS -- 2 run
    contains "$ERR" "cannot create directory .flow: Read-only file system; flow writes its state to .flow/"
    clean_failure
    run_flow 0 run
    rm -f ran.log
    with_faults create "$PWD/*" EROFS -- 2 run
    contains "$ERR" "cannot open .flow/lock: Read-only file system"
    clean_failure
    [ ! -e ran.log ] || { echo "steps ran: $(ran)"; return 1; }
}

test_full_disk_on_the_journal() {
    small_project
    # At the run's first line: nothing runs.
    with_faults write "*/journal.jsonl" -- 2 run
    contains "$ERR" "cannot append to .flow/runs/"
    contains "$ERR" "journal.jsonl: No space left on device; free some disk space and run again"
    clean_failure
    [ ! -e ran.log ] || { echo "steps ran: $(ran)"; return 1; }
    # Later (which batch of lines that is depends on timing): the step whose
    # start or end cannot be recorded fails; the next run redoes what was not
    # recorded, and then everything is.
    with_faults write "*/journal.jsonl" ENOSPC 1 -- 1 run
    contains "$ERR" "cannot append to .flow/runs/"
    [[ "$ERR" == *"ran, but its end cannot be recorded"* || "$ERR" == *"did not start"* ]] \
        || { echo "no step failed for the journal: $ERR"; return 1; }
    clean_failure
    rm -f ran.log
    run_flow 0 run
    [ -s ran.log ] || { echo "nothing ran again"; return 1; }
    run_flow 0 run
    contains "$ERR" "3 up to date"
    # A failed sync of the journal is reported too.
    with_faults fsync "*/journal.jsonl" EIO -- 1 run --force
    contains "$ERR" "journal.jsonl: Input/output error"
    clean_failure
}

test_resume_in_a_moved_project() {
    mkdir proj
    (cd proj && small_project)
    sed -i 's/return x + 1/if os.getenv("FAIL") then error("b broke") end return x + 1/' proj/pipeline.lua
    FAIL=1 run_flow 1 run proj/pipeline.lua
    mv proj moved
    rm moved/ran.log
    cd moved
    run_flow 0 run --resume
    equals "$(ran)" "b c " "steps the resumed run ran"
    no_crash
}

test_resume_with_a_damaged_first_line() {
    small_project
    sed -i 's/x + 1/error("b broke")/' pipeline.lua
    run_flow 1 run
    sed -i '1s/"args":[^]}]*[]}]/"args":[1,true]/' .flow/runs/latest/journal.jsonl
    contains "$(head -n 1 .flow/runs/latest/journal.jsonl)" '"args":[1,true]'
    run_flow 2 run --resume
    contains "$ERR" "journal.jsonl is damaged (its arguments are not a list of words); start a new run instead"
    clean_failure
}

# A step_end line without its step's name (damaged) completes nothing: the
# resumed run runs what is not up to date, without a traceback.
test_resume_with_a_step_line_without_its_name() {
    small_project
    sed -i 's/x + 1/error("b broke")/' pipeline.lua
    run_flow 1 run
    sed -i 's/"step":"a"/"stap":"a"/' .flow/runs/latest/journal.jsonl
    contains "$(cat .flow/runs/latest/journal.jsonl)" '"stap":"a"'
    sed -i 's/error("b broke")/x + 1/' pipeline.lua
    run_flow 0 run --resume
    clean_failure
}

# The first digit of the first output hash in step STEP's successful
# step_end line of journal FILE, changed.
damage_output_hash() {
    python3 - "$1" "$2" <<'P'
import re, sys
p, step = sys.argv[1], sys.argv[2]
lines = open(p).read().split("\n")
for i, l in enumerate(lines):
    if '"step":"%s"' % step in l and '"status":"ok"' in l:
        m = re.search(r'"hash":"([0-9a-f])', l)
        lines[i] = l[:m.start(1)] + ("0" if m.group(1) != "0" else "1") + l[m.start(1) + 1:]
open(p, "w").write("\n".join(lines))
P
}

# The last run's journal folded in again with STEP's output hash damaged:
# STEP runs again, alone, and the run after finds everything up to date.
refold_with_damaged_hash() {
    rm -f ran.log .flow/cache/state.log .flow/cache/merged_runs
    damage_output_hash ".flow/runs/$(readlink .flow/runs/latest)/journal.jsonl" "$1"
    run_flow 0 run
    equals "$(ran)" "$1 " "steps run again"
    run_flow 0 run
    contains "$ERR" "up to date"
}

# A journal line whose inline value no longer matches its hash (a journal
# line has no checksum) is not folded into the state: its step runs again,
# rather than stay up to date while each reader fails to restore its value.
test_a_journal_value_that_fails_its_hash_is_not_folded() {
    small_project
    run_flow 0 run
    refold_with_damaged_hash a
    # a value not kept: its record's key no longer the one its fingerprint gives
    write pipeline.lua <<'L'
local function note(name) local f = io.open("ran.log", "a") f:write(name, "\n") f:close() end
return pipeline{
  node{ name = "big", outputs = "t", func = function() note("big") local t = {} for i = 1, 300 do t[i] = i end return t end },
  node{ name = "use", inputs = "t", outputs = "n", func = function(t) note("use") return #t end },
}
L
    rm -rf .flow
    run_flow 0 run
    refold_with_damaged_hash big
}

test_damaged_step_records_are_dropped() {
    small_project
    run_flow 0 run
    run_flow 0 run --force
    id=$(readlink .flow/runs/latest)
    sed -i "/^$id\$/d" .flow/cache/merged_runs
    sed -i '/step_end/s/"time":[0-9.e+-]*}/"time":"soon"}/' ".flow/runs/$id/journal.jsonl"
    contains "$(cat ".flow/runs/$id/journal.jsonl")" '"time":"soon"'
    rm -f ran.log
    run_flow 0 run
    no_crash
    # Every record damaged (a byte changed: its checksum fails): each is dropped, with a warning.
    python3 -c '
import re
p = ".flow/cache/state.log"
d = open(p, "rb").read()
open(p, "wb").write(re.sub(rb"[0-9a-f]{64}", b"7" * 64, d))
'
    run_flow 0 run
    no_crash
    contains "$ERR" "of .flow/cache/state.log were damaged"
    equals "$(ran)" "a b c " "steps whose records were damaged"
}

# run.json and the journal are read, never trusted: a value of the wrong type
# or range (an edited file's) is shown as unknown, never crashes flow runs or
# flow status, and no time or duration, however large, breaks its formatting.
test_damaged_run_json_values_are_shown_as_unknown() {
    small_project
    run_flow 0 run
    j=.flow/runs/latest
    cp "$j/run.json" run.json.good
    # no status: run.json tells nothing, the journal tells the run
    echo '{"started":1e300}' > "$j/run.json"
    for args in runs "runs --format json" "runs show"; do
        run_flow 0 $args
        clean_failure
    done
    run_flow 0 runs
    contains "$(printf '%s\n' "$OUT" | tail -1)" "  ok  "
    # each field of the wrong type or range is absent
    echo '{"status":"ok","started":1e300,"elapsed":-1,"code":1.5,"env":{},"steps":[5,{"state":3},{"state":"done"}],
           "metrics":{"loss":"low","acc":0.5}}' > "$j/run.json"
    run_flow 0 runs
    clean_failure
    contains "$OUT" "?        ok      -     1 done"
    run_flow 0 runs show
    clean_failure
    contains "$OUT" "status   ok
time     -
steps    1 done
metrics  acc 0.5"
    run_flow 0 runs --format json
    printf '%s' "$OUT" | python3 -c '
import json, sys
r = json.load(sys.stdin)[0]
assert r["started"] is None and r["elapsed"] is None and r["code"] is None and r["env"] is None, r
assert r["steps"] == 3 and r["counts"] == {"done": 1} and r["metrics"] == {"acc": 0.5}, r
'
    # a state flow does not know (an edited file): flow viz --run draws the
    # step without its colour (the page's code failed, "internal error")
    sed 's/"state":[[:space:]]*"done"/"state": "cancelled"/' run.json.good > "$j/run.json"
    run_flow 0 viz --run --format html
    clean_failure
    cp run.json.good "$j/run.json"
    # a step's end with an elapsed time that is not a number, or too large to print
    echo '{"event":"step_end","step":"a","status":"ok","elapsed":"x"}' >> "$j/journal.jsonl"
    run_flow 0 status
    clean_failure
    contains "$OUT" "run $(readlink $j) (env local): succeeded"
    equals "$(printf '%s\n' "$OUT" | grep '^a ')" "a     ok" "step a's row"
    echo '{"event":"step_end","step":"a","status":"ok","elapsed":1e300}' >> "$j/journal.jsonl"
    run_flow 0 status
    clean_failure
    contains "$OUT" "1.15741e+295d"
    echo '{"event":"step_end","step":"a","status":7,"elapsed":1e999,"remote":{"job":[]}}' >> "$j/journal.jsonl"
    run_flow 0 runs show
    clean_failure
    contains "$OUT" "a     ?"
}

# A journal that cannot be read whole is damaged, and flow status says which
# file and line, rather than call a finished run "running".
test_damaged_journal_is_reported_not_shown_as_running() {
    small_project
    run_flow 0 run
    j=.flow/runs/latest
    cp "$j/journal.jsonl" journal.good
    : > "$j/journal.jsonl"                              # emptied
    run_flow 2 status
    contains "$ERR" "flow status: ./.flow/runs/latest/journal.jsonl is damaged: it is empty"
    clean_failure
    not_contains "$OUT" "running" stdout
    head -c 300 journal.good > "$j/journal.jsonl"       # truncated in its second line
    run_flow 2 status
    contains "$ERR" "journal.jsonl is damaged: line 2 is cut short"
    clean_failure
    sed '3s/.*/{"event": garbled/' journal.good > "$j/journal.jsonl"
    run_flow 2 runs show
    contains "$ERR" "flow runs show: ./.flow/runs/latest/journal.jsonl is damaged: line 3 is not a JSON object"
    clean_failure
    run_flow 2 viz --run
    contains "$ERR" "--run: ./.flow/runs/latest/journal.jsonl is damaged: line 3"
    sed 1d journal.good > "$j/journal.jsonl"            # no run_start
    run_flow 2 status
    contains "$ERR" "journal.jsonl is damaged: its first line is not the run's start"
    clean_failure
    # flow runs lists it from run.json; without one, its status is "damaged"
    run_flow 0 runs
    contains "$OUT" "  ok  "
    rm "$j/run.json"
    run_flow 0 runs
    contains "$OUT" "  damaged  "
    # lines lost at a line's end: run.json says how the run ended, and the journal is damaged
    cp journal.good "$j/journal.jsonl"
    run_flow 0 run --force
    head -n 2 "$j/journal.jsonl" > short && cat short > "$j/journal.jsonl"
    run_flow 0 status
    contains "$ERR" "journal.jsonl is damaged: it ends before the run's end, which run.json records"
    contains "$OUT" ": succeeded"
    clean_failure
    # a run's own last line, torn while it is written (no run.json yet), is not damage
    rm "$j/run.json"
    printf '{"event":"step_st' >> "$j/journal.jsonl"
    run_flow 0 status
    contains "$OUT" "running, or stopped without a word (killed)"
    clean_failure
}

# ---- failed writes ------------------------------------------------------------

# Outputs are renamed into place unsynced and flushed in one batch before the
# journal line marking their step done (group commit): a failed flush fails
# the step, and with no record of the output the next run makes it again.
test_failed_output_sync_records_nothing() {
    small_project
    with_faults fsync "*/.flow/data/o" -- 1 run
    contains "$ERR" "step 'c' ran, but its end cannot be recorded"
    contains "$ERR" "No space left on device"
    clean_failure
    not_contains "$(cat .flow/runs/latest/journal.jsonl)" '"status":"ok","step":"c"' "the journal"
    rm -f ran.log
    run_flow 0 run --explain
    contains "$ERR" "explain: c runs"
    equals "$(ran)" "c " "steps run after the failure"
}

# A step is done for its dependents before its outputs are flushed (group
# commit): when that flush fails, a dependent may have run already, and the
# run fails anyway, -k or not: the step says its end was not recorded, the
# journal has no line saying it ended well, and the next run makes it again.
test_failed_flush_after_a_dependent_ran_fails_the_run() {
    write pipeline.lua <<'L'
return pipeline{
  node{ name = "c", outputs = { out = "o" },
        command = { "sh", "-c", 'echo c >> ran.log; echo made > "$0"', "${outputs.out}" } },
  node{ name = "d", inputs = { o = "o" }, outputs = { out = "p" },
        command = { "sh", "-c", 'echo d >> ran.log; cat "$0" > "$1"', "${inputs.o}", "${outputs.out}" } },
}
L
    with_faults fsync "*/.flow/data/o" -- 1 run -k
    contains "$ERR" "step 'c' ran, but its end cannot be recorded"
    contains "$ERR" "FAILED   c"
    not_contains "$ERR" "flow: 2 done" "the summary (c counted done)"
    clean_failure
    equals "$(ran)" "c d " "steps run: d did not wait for c's flush"
    not_contains "$(cat .flow/runs/latest/journal.jsonl)" '"status":"ok","step":"c"' "the journal"
    run_flow 0 run
    contains " $(ran)" " c " "the steps run again"
}

# A chain of Lua steps that never yield runs inside one turn of the
# scheduler; their file outputs' flushes complete on the pool and must still
# be written to the journal as the chain goes, not all at its end (a kill
# would lose the whole chain).  The last step reads the journal: the first
# step's end must be there, 0.6 s of work after it.
test_the_journal_follows_a_chain_of_quick_lua_steps() {
    mkdir -p conf/base
    for i in $(seq 1 200); do echo "d$i: {type: text, path: data/d$i.txt}"; done > conf/base/catalog.yml
    write pipeline.lua <<'L'
local function busy() local t = os.clock() while os.clock() - t < 0.003 do end end
local function journal()
  local f = assert(io.open(".flow/runs/latest/journal.jsonl"))
  local text = f:read("a")
  f:close()
  return text
end
local n = { node{ name = "s1", outputs = "d1", func = function() busy() return "x" end } }
for i = 2, 200 do
  n[i] = node{ name = "s" .. i, inputs = "d" .. (i - 1), outputs = "d" .. i, func = function(x)
    busy()
    if i == 200 and not journal():find('"status":"ok","step":"s1"', 1, true) then
      error("the journal has no end of s1 yet")
    end
    return x
  end }
end
return pipeline(n)
L
    run_flow 0 run
    equals "$(ls data | wc -l)" "200" "outputs"
}

# A step waiting out a retry's back-off when another step's end cannot be
# recorded is given up, -k or not, and says why (not "-k runs the rest").
test_a_late_failure_gives_up_retries_even_with_keep_going() {
    write pipeline.lua <<'L'
return pipeline{
  node{ name = "c", outputs = { out = "o" }, command = { "sh", "-c", 'sleep 0.3; echo made > "$0"', "${outputs.out}" } },
  node{ name = "r", outputs = { out = "q" }, retries = 1, command = { "sh", "-c", "exit 3" } },
}
L
    with_faults fsync "*/.flow/data/o" -- 1 run -k --log-format json
    contains "$ERR" "step 'r': not retried: the run stops, as a step's end could not be recorded"
    not_contains "$ERR" "keep-going runs the rest"
    contains "$ERR" '"steps":{"done":0,"failed":2,'
    clean_failure
}

test_failed_output_rename_keeps_the_old_output() {
    write conf/base/catalog.yml <<'Y'
result: {type: json, path: data/result.json}
Y
    write conf/base/parameters.yml <<'Y'
v: 1
Y
    write pipeline.lua <<'L'
return pipeline{ node{ name = "make", inputs = "params:v", outputs = "result", func = function(v) return { v = v } end } }
L
    run_flow 0 run
    old=$(cat data/result.json)
    with_faults rename "*/data/result.json" EIO -- 1 run --params v=2
    contains "$ERR" "step 'make': cannot save output 'result': cannot move"
    clean_failure
    equals "$(cat data/result.json)" "$old" "the output after a failed commit"
    run_flow 0 run --params v=2 --explain
    contains "$ERR" "explain: make runs"
    grep -q '"v":[[:space:]]*2' data/result.json || { echo "data/result.json: $(cat data/result.json)"; return 1; }
}

test_failed_state_write_is_reported() {
    small_project
    with_faults fsync "*/state.log.tmp-*" -- 1 run
    contains "$ERR" "the run's record is incomplete: cannot write .flow/cache/state.log: No space left on device"
    clean_failure
    rm -f ran.log
    run_flow 0 run                  # the journal has what ran
    contains "$ERR" "3 up to date"
    # The hash cache only saves work: a warning.
    with_faults write "*/cache/hashes.tmp-*" -- 0 run --force
    contains "$ERR" "warning: cannot write .flow/cache/hashes: No space left on device"
    contains "$ERR" "(the next run hashes those files again)"
}

test_failed_value_cache_write_fails_the_step() {
    write pipeline.lua <<'L'
return pipeline{ node{ name = "big", outputs = "v", func = function() return string.rep("x", 4096) end } }
L
    with_faults rename "*/.flow/cache/values/*" -- 1 run
    contains "$ERR" "step 'big': cannot cache output 'v': cannot write .flow/cache/values/"
    clean_failure
    run_flow 0 run
    contains "$ERR" "1 done"
}

test_failed_log_write_fails_the_step() {
    small_project
    sed -i 's/echo c >> ran.log;/echo c >> ran.log; echo c-says;/' pipeline.lua  # a log is made on the first byte
    with_faults write "*/logs/c.log" -- 1 run
    contains "$ERR" "step 'c': cannot write its log .flow/runs/"
    clean_failure
    [ ! -e .flow/data/o ] || { echo "the output was committed"; return 1; }
}

# The log is created on the first byte of output: a log that cannot be created
# then fails the step as a failed write does, and nothing is committed.
test_a_log_that_cannot_be_created_fails_the_step() {
    small_project
    sed -i 's/echo c >> ran.log;/echo c >> ran.log; echo c-says;/' pipeline.lua
    with_faults create "*/logs/c.log" EACCES -- 1 run
    contains "$ERR" "step 'c': cannot write its log .flow/runs/"
    contains "$ERR" "Permission denied"
    clean_failure
    [ ! -e .flow/data/o ] || { echo "the output was committed"; return 1; }
    run_flow 0 run
    contains "$(cat .flow/runs/latest/logs/c.log)" "c-says"
}

test_failed_print_to_the_log_fails_the_lua_step() {
    write pipeline.lua <<'L'
return pipeline{ node{ name = "a", outputs = "x", func = function() print(string.rep("x", 3000)) return 1 end } }
L
    # a 2 KiB file-size limit, SIGXFSZ ignored: the log's write fails with EFBIG
    ( trap '' XFSZ; ulimit -f 2; run_flow 1 run -q )
    ERR=$(cat stderr.txt)
    contains "$ERR" "step 'a': cannot write its log .flow/runs/"
    contains "$ERR" "File too large"
    clean_failure
}

# ---- writes a step could redirect with a link ---------------------------------

# A Lua step plants a link where flow is about to write its staging output
# (.flow/tmp/<run>/<step>+<dataset>): the write refuses the link, the file it
# points to is untouched, the step fails naming the path, nothing is committed.
test_a_link_planted_at_a_staging_path_is_never_written_through() {
    echo precious > victim.txt
    write conf/base/catalog.yml <<'Y'
out: {type: json, path: data/out.json}
Y
    write pipeline.lua <<'L'
return pipeline{ node{ name = "a", outputs = "out", func = function()
  local run = io.popen("readlink .flow/runs/latest"):read("l")
  io.popen("mkdir -p .flow/tmp/" .. run .. " && ln -s \"$PWD/victim.txt\" .flow/tmp/" .. run .. "/a+out"):close()
  return { x = 1 }
end } }
L
    run_flow 1 run
    equals "$(cat victim.txt)" "precious" "the file the staging link pointed to"
    contains "$ERR" "step 'a': cannot save output 'out': cannot open .flow/tmp/"
    contains "$ERR" "a+out is a symbolic link"
    clean_failure
    [ ! -e data/out.json ] || { echo "the output was committed"; return 1; }
}

# The same for a Lua step's print log (.flow/runs/<id>/logs/<step>.log).
test_a_link_planted_at_a_print_log_is_never_written_through() {
    echo precious > victim.txt
    write pipeline.lua <<'L'
return pipeline{ node{ name = "a", outputs = "x", func = function()
  local run = io.popen("readlink .flow/runs/latest"):read("l")
  io.popen("mkdir -p .flow/runs/" .. run .. "/logs && ln -s \"$PWD/victim.txt\" .flow/runs/" .. run .. "/logs/a.log"):close()
  print("hello")
  return 1
end } }
L
    run_flow 1 run
    equals "$(cat victim.txt)" "precious" "the file the log link pointed to"
    contains "$ERR" "step 'a': cannot write its log .flow/runs/"
    contains "$ERR" "a.log is a symbolic link"
    clean_failure
}

# The fault shim's `write` reaches a Lua step's staging output (written with
# write(2), not stdio): a full disk fails the step and commits nothing.
test_full_disk_on_a_lua_steps_staging_output() {
    write conf/base/catalog.yml <<'Y'
out: {type: json, path: data/out.json}
Y
    write pipeline.lua <<'L'
return pipeline{ node{ name = "a", outputs = "out", func = function() return { x = string.rep("y", 1000) } end } }
L
    with_faults write "*/.flow/tmp/*" -- 1 run
    contains "$ERR" "step 'a': cannot save output 'out': cannot write .flow/tmp/"
    contains "$ERR" "No space left on device"
    clean_failure
    [ ! -e data/out.json ] || { echo "the output was committed"; return 1; }
    run_flow 0 run
    contains "$(cat data/out.json)" "yyyy"
}
