# t_resume.sh — --resume after a failure and after kill -9: the pipeline
# completes, completed steps are not redone, and the outputs are byte for
# byte those of an uninterrupted run, with no partial file anywhere.

# 50 steps in 10 layers of 5: Lua steps with memory, json and lua outputs,
# commands with file and folder outputs; each reads two steps of the layer
# above, and commands sleep a little so that a kill lands mid-run.
resume_project() {
    write conf/base/catalog.yml <<'Y'
"j_{n}": {type: json, path: "data/json/{n}.json"}
"l_{n}": {type: lua, path: "data/lua/{n}.lua"}
"f_{n}": {type: file, path: "data/files/{n}.txt"}
"d_{n}": {type: folder, path: "data/dirs/{n}"}
Y
    write pipeline.lua <<'L'
local W, L = 5, 10
local kinds = { "m", "j", "l", "f", "d" }       -- memory, json, lua, file, folder
local function name(layer, j) return kinds[(layer + j) % 5 + 1] .. "_" .. layer .. "_" .. j end
local function log(step) local f = io.open("executed.log", "a") f:write(step, "\n") f:close() end
local nodes = {}
for layer = 0, L - 1 do
  for j = 0, W - 1 do
    local out, step = name(layer, j), "s" .. layer .. "_" .. j
    local ins = layer == 0 and {} or { name(layer - 1, j), name(layer - 1, (j + 1) % W) }
    local kind = out:sub(1, 1)
    if kind == "f" or kind == "d" then
      local cmd = { "sh", "-c", 'echo "$0" >> executed.log; sleep 0.03; ' ..
        (kind == "d" and 'for f in "$@"; do cat "$f" 2>/dev/null || ls "$f"; done > "$1/listing"; echo "$0" > "$1/name"'
                      or 'for f in "$@"; do cat "$f" 2>/dev/null || ls "$f"; done > "$1"; echo "$0" >> "$1"'),
        step, "${outputs.o}" }
      for k, d in ipairs(ins) do cmd[#cmd + 1] = "${inputs.i" .. k .. "}" end
      local inputs = {}
      for k, d in ipairs(ins) do inputs["i" .. k] = d end
      nodes[#nodes + 1] = node{ name = step, command = cmd, inputs = inputs, outputs = { o = out } }
    else
      nodes[#nodes + 1] = node{ name = step, inputs = ins, outputs = out, func = function(a, b)
        log(step)
        local t = { step = step, n = layer * W + j }
        for k, v in ipairs({ a, b }) do t[k] = type(v) == "table" and v.n or #tostring(v) end
        return t
      end }
    end
  end
end
return pipeline(nodes)
L
}

# A digest of every output file, and of every step's outputs in memory.
outputs_digest() {
    (find data .flow/data -type f 2>/dev/null | sort | xargs -r sha256sum)
}

steps_with_status() {   # steps_with_status STATUS JOURNAL — one name a line
    python3 -c '
import json, sys
for line in open(sys.argv[2]):
    try: ev = json.loads(line)
    except ValueError: continue
    if ev.get("event") == "step_end" and ev.get("status") == sys.argv[1]: print(ev["step"])
' "$1" "$2"
}

partial_files() {
    find data .flow/data \( -name '*.tmp-*' -o -name '.*flow-tmp*' -o -name '*.old-*' \) 2>/dev/null
}

test_resume_after_a_failure_runs_only_what_is_left() {
    write pipeline.lua <<'L'
local function step(name, fail)
  return function(x)
    local f = io.open("executed.log", "a") f:write(name, "\n") f:close()
    if fail and os.getenv("FAIL") then error(name .. " broke") end
    return (x or 0) + 1
  end
end
return pipeline{
  node{ name = "a", outputs = "a", func = step("a") },
  node{ name = "b", inputs = "a", outputs = "b", func = step("b") },
  node{ name = "c", inputs = "b", outputs = "c", func = step("c", true) },
  node{ name = "d", inputs = "c", outputs = "d", func = step("d") },
}
L
    FAIL=1 run_flow 1 run --force
    equals "$(tr '\n' ' ' < executed.log)" "a b c " "first run"
    rm executed.log
    run_flow 0 run --resume
    equals "$(tr '\n' ' ' < executed.log)" "c d " "resumed run (a and b restored from the cache, despite --force)"
    run_flow 0 run --resume
    contains "$ERR" "finished successfully: nothing to resume"
    run_flow 2 run --resume 20000101-000000-1
    contains "$ERR" "--resume: no run '20000101-000000-1'"
    run_flow 2 run --resume --env prod
    contains "$ERR" "--resume runs again with the original run's arguments; drop --env"
}

test_runs_get_their_own_ids_and_resume_names_one_exactly() {
    mkdir sweep
    write sweep/driver.lua <<'L'
local flow = require("flow")
local p = pipeline{ node{ name = "s", outputs = "y", func = function() return 1 end } }
for i = 1, 3 do print("run " .. flow.run(p, { force = true }).run_id) end
L
    cd sweep
    run_flow 0 run driver.lua
    cd ..
    equals "$(printf '%s\n' "$OUT" | sort -u | wc -l)" "3" "distinct run ids of three flow.run calls"
    for id in $(printf '%s\n' "$OUT" | sed 's/^run //'); do
        contains "$(head -n 1 "sweep/.flow/runs/$id/journal.jsonl")" "\"run\":\"$id\"" "run $id's journal"
    done
    equals "$(ls sweep/.flow/runs | grep -vc latest)" "3" "run directories"

    write pipeline.lua <<'L'
return pipeline{
  node{ name = "a", outputs = "a", func = function() return 1 end },
  node{ name = "b", inputs = "a", outputs = "b",
        func = function(x) io.open("ran_b", "w"):close() if os.getenv("FAIL") then error("b broke") end return x end },
}
L
    FAIL=1 run_flow 1 run
    first=$(readlink .flow/runs/latest)
    FAIL=1 run_flow 1 run
    second=$(readlink .flow/runs/latest)
    [ "$first" != "$second" ] || { echo "two runs share the id $first"; return 1; }
    run_flow 2 run --resume nope
    contains "$ERR" "--resume: no run 'nope'"
    contains "$ERR" "latest runs: $first, $second"
    run_flow 2 run --resume "${first:0:8}"
    contains "$ERR" "--resume: '${first:0:8}' is ambiguous: it starts 2 runs ($first, $second)"
    # the shortest prefix naming only the first run
    n=1
    while [ "$(ls .flow/runs | grep -c "^${first:0:$n}")" != 1 ]; do n=$((n + 1)); done
    rm -f ran_b
    run_flow 0 run --resume "${first:0:$n}"
    contains "$ERR" "resuming run $first"
    [ -e ran_b ] || { echo "b did not run again"; return 1; }
}

test_kill_9_then_resume_matches_an_uninterrupted_run() {
    resume_project
    keep=$(mktemp -d "${TMPDIR:-/tmp}/flow-resume.XXXXXX")
    cp -r . "$keep/project"
    run_flow 0 run -j 2
    ref=$(outputs_digest)
    [ "$(echo "$ref" | wc -l)" -ge 30 ] || { echo "too few outputs: $ref"; return 1; }
    full_ms=$(awk '/in [0-9.]+s/ { sub(/s$/, "", $NF); print int($NF * 1000) }' stderr.txt)
    [ "${full_ms:-0}" -gt 50 ] || full_ms=400
    RANDOM=20261122
    for round in $(seq 20); do
        rm -rf ./* .flow
        cp -r "$keep/project/." .
        "$FLOW" run -q -j 2 >/dev/null 2>&1 &
        pid=$!
        for _ in $(seq 200); do [ -e .flow/runs/latest/journal.jsonl ] && break; sleep 0.01; done
        delay=$(( RANDOM % full_ms ))
        sleep "$(printf '0.%03d' "$delay")"
        kill -9 "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
        killed=$(readlink .flow/runs/latest)
        sleep 0.1                                     # orphaned commands finish in their staging dirs
        [ -z "$(partial_files)" ] || { echo "round $round: partial files after kill -9: $(partial_files)"; return 1; }
        run_flow 0 run --resume -q
        got=$(outputs_digest)
        if [ "$got" != "$ref" ]; then
            echo "round $round (killed after ${delay} ms): outputs differ from an uninterrupted run:"
            diff <(echo "$ref") <(echo "$got") || true
            return 1
        fi
        [ -z "$(partial_files)" ] || { echo "round $round: partial files: $(partial_files)"; return 1; }
        # nothing the killed run completed ran again (unless the kill came after its end)
        resumed=$(readlink .flow/runs/latest)
        [ "$resumed" != "$killed" ] || continue
        redone=$(steps_with_status ok ".flow/runs/$killed/journal.jsonl" \
                 | grep -Fxf - <(steps_with_status ok ".flow/runs/$resumed/journal.jsonl") || true)
        [ -z "$redone" ] || { echo "round $round: completed before the kill, yet ran again: $redone"; return 1; }
    done
    rm -rf "$keep"
}

test_ambiguous_resume_count_and_list_agree() {
    write pipeline.lua <<'L'
return pipeline{ node{ name = "a", outputs = "a", func = function() return 1 end } }
L
    for i in 1 2 3 4 5 6 7; do mkdir -p ".flow/runs/20250101-000000-00000$i-1"; done
    run_flow 2 run --resume 2025
    contains "$ERR" "--resume: '2025' is ambiguous: it starts 7 runs (the latest 5: 20250101-000000-000003-1, 20250101-000000-000004-1, 20250101-000000-000005-1, 20250101-000000-000006-1, 20250101-000000-000007-1)"
    rm -rf .flow/runs/20250101-000000-00000[1-4]-1
    run_flow 2 run --resume 2025
    contains "$ERR" "it starts 3 runs (20250101-000000-000005-1, 20250101-000000-000006-1, 20250101-000000-000007-1)"
}

# ---- power loss: group commit -----------------------------------------------

# The order a power loss relies on, from `strace -f`: each output's data is
# fsynced (file, or every file of a folder) and its directory synced before
# the journal write of the step_end line that names it, and the journal is
# synced after that write.  Outputs are renamed into place without a sync of
# their own; the flush comes in one batch before the journal's.
test_power_loss_order_outputs_synced_before_their_journal_line() {
    command -v strace >/dev/null || skip "strace is not installed (apt-get install strace)"
    write pipeline.lua <<'L'
return pipeline{
  node{ name = "make", outputs = "table", func = function() return { rows = 3 } end },
  node{ name = "copy", inputs = "table", outputs = "copied",
        command = { "sh", "-c", 'cat "$0" > "$1"', "${inputs.table}", "${outputs.copied}" } },
  node{ name = "tree", inputs = "copied", outputs = "tree",
        command = { "sh", "-c", 'mkdir -p "$1/sub" && cp "$0" "$1/sub/a" && echo b > "$1/b"', "${inputs.copied}", "${outputs.tree}" } },
}
L
    write conf/base/catalog.yml <<'Y'
table: {type: json, path: data/table.json}
tree: {type: folder, path: data/tree}
Y
    # (LeakSanitizer cannot run under ptrace: the ASan build is checked for leaks elsewhere)
    ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" \
    strace -f -y -s 65536 -e trace=fsync,fdatasync,rename,renameat2,write -o trace.txt "$FLOW" run -q \
        || { echo "flow under strace failed"; return 1; }
    python3 - trace.txt "$PWD" <<'PY' || return 1
import json, re, sys
lines = open(sys.argv[1]).read().splitlines()
root = sys.argv[2]
# Each call as it completes ("<unfinished ...>" is joined with its "resumed" part).
pending, calls = {}, []
for ln in lines:
    m = re.match(r"(\d+)\s+(.*)$", ln)
    if not m: continue
    pid, rest = m.groups()
    if rest.endswith("<unfinished ...>"):
        pending[pid] = rest[: -len("<unfinished ...>")]
        continue
    r = re.match(r"<\.\.\. (\w+) resumed>(.*)$", rest)
    if r:
        rest = pending.pop(pid, r.group(1) + "(").rstrip() + r.group(2)
    c = re.match(r"(\w+)\((.*)\)\s+=\s+(-?\d+)", rest, re.S)
    if c: calls.append((c.group(1), c.group(2), int(c.group(3))))
def fd_path(args):
    m = re.match(r"\d+<([^>]*)>", args)
    return m.group(1) if m else None
synced = []            # (position, path) of each successful fsync/fdatasync
journal_writes = []    # (position, text)
renamed = {}           # final path -> (position, the path it had before)
for k, (name, args, rc) in enumerate(calls):
    p = fd_path(args)
    if name in ("rename", "renameat2") and rc == 0:
        names = re.findall(r'"((?:[^"\\]|\\.)*)"', args)
        if len(names) == 2:
            a, b = (n if n.startswith("/") else root + "/" + n for n in names)
            renamed[b] = (k, a)
    if name in ("fsync", "fdatasync") and rc == 0 and p: synced.append((k, p))
    if name == "write" and p and p.endswith("/journal.jsonl"):
        text = re.search(r', "(.*)", \d+\s*$', args, re.S).group(1)
        journal_writes.append((k, text.encode().decode("unicode_escape")))
def synced_before(path, pos):
    # synced under its name, or under the name it had before a rename into place
    if any(q < pos and s == path for q, s in synced): return True
    for final, (rpos, before) in renamed.items():
        if path == final or path.startswith(final + "/"):
            old = before + path[len(final):]
            if any(q < min(pos, rpos) and s == old for q, s in synced): return True
    return False
def under(path):
    import os
    out = [path]
    if os.path.isdir(path):
        for d, subdirs, files in os.walk(path):
            out += [os.path.join(d, f) for f in subdirs + files]
    return out
done = 0
for pos, text in journal_writes:
    for line in text.splitlines():
        ev = json.loads(line)
        if ev.get("event") != "step_end" or ev.get("status") != "ok": continue
        for d, out in ev.get("outputs", {}).items():
            if "path" not in out: continue
            full = root + "/" + out["path"]
            for f in under(full):
                if not synced_before(f, pos):
                    sys.exit(f"{ev['step']}: {f} was not synced before the journal line marking it done")
            parent = full.rsplit("/", 1)[0]
            if not synced_before(parent, pos):
                sys.exit(f"{ev['step']}: {parent} (holding {out['path']}) was not synced before its journal line")
            done += 1
        journal = [p for q, p in synced if q > pos and p.endswith("/journal.jsonl")]
        if not journal: sys.exit(f"{ev['step']}: the journal was not synced after its step_end line")
if done != 3: sys.exit(f"checked {done} outputs, expected 3 (table, copied, tree)")
PY
}

# A run that flow.run started (here the REPL's run{}) has no command line:
# --resume rebuilt it as a plain `flow run`, so it reran a finished step with
# the default parameters and ran a step the run had not selected.  It is
# refused now; and a run whose parameters changed since is not resumed.
test_resume_refuses_a_flow_run_run_and_changed_parameters() {
    write conf/base/parameters.yml <<'Y'
k: 1
Y
    write pipeline.lua <<'L'
return pipeline{
  node{ command = "echo a ${params.k} >> executed.log; echo ${params.k} > ${outputs.o}", outputs = { o = "a_out" }, name = "a" },
  node{ command = "test -e ok && cat ${inputs.i}", inputs = { i = "a_out" }, name = "b" },
  node{ command = "echo c >> executed.log", name = "c" },
}
L
    echo 'run{nodes = "a,b", params = {k = 7}}' | "$FLOW" repl pipeline.lua >/dev/null 2>&1 || true
    equals "$(cat executed.log)" "a 7" "what the REPL's run ran"
    run_flow 0 runs
    contains "$OUT" "flow.run from pipeline.lua"
    touch ok
    run_flow 2 run --resume
    contains "$ERR" "was started by flow.run"
    contains "$ERR" "resume it the way it was started"
    equals "$(cat executed.log)" "a 7" "what --resume ran"
    # a run of flow run, its parameters changed before --resume
    rm ok
    run_flow 1 run
    echo 'k: 2' > conf/base/parameters.yml
    touch ok
    run_flow 2 run --resume
    contains "$ERR" "--resume: the parameters differ from run"
    echo 'k: 1' > conf/base/parameters.yml
    run_flow 0 run --resume
    contains "$ERR" "resuming run"
}

# --resume --dry-run checks what --resume checks: with the parameters changed
# since the run it showed a plan that the resume itself then refused.
test_resume_dry_run_refuses_changed_parameters() {
    write conf/base/parameters.yml <<'Y'
k: 1
Y
    write pipeline.lua <<'L'
return pipeline{
  node{ command = "echo ${params.k} > ${outputs.o}", outputs = { o = "a_out" }, name = "a" },
  node{ command = "test -e ok && cat ${inputs.i}", inputs = { i = "a_out" }, name = "b" },
}
L
    run_flow 1 run
    touch ok
    echo 'k: 2' > conf/base/parameters.yml
    run_flow 2 run --resume
    local refused
    refused=$(grep 'error:' stderr.txt)
    contains "$refused" "--resume: the parameters differ from run"
    run_flow 2 run --resume --dry-run
    contains "$ERR" "$refused"
    not_contains "$OUT" "selected steps would run"
    run_flow 2 run --resume -n --params k=3
    contains "$ERR" "drop --params"
    echo 'k: 1' > conf/base/parameters.yml
    run_flow 0 run --resume --dry-run
    contains "$ERR" "what resuming run"
    contains "$OUT" "1 of 2 selected steps would run"
    run_flow 0 run --resume
    contains "$ERR" "resuming run"
}

# A step that runs a pipeline of its own (flow.run inside its function)
# leaves .flow/runs/latest on the run the command line started: flow status
# and a plain --resume went to the inner run (refused: "started by flow.run").
test_a_nested_run_does_not_move_latest() {
    write pipeline.lua <<'L'
local inner = pipeline{ node{ func = function() return 1 end, outputs = "i", name = "in" } }
return pipeline{
  node{ func = function() return flow.run(inner).code end, outputs = "o", name = "outer" },
  node{ func = function(o) if not io.open("fixed") then error("not yet") end return o end, inputs = "o",
        outputs = "p", name = "after" },
}
L
    run_flow 1 run
    local outer; outer=$(readlink .flow/runs/latest)
    contains "$(head -1 .flow/runs/latest/journal.jsonl)" '"steps":2'
    touch fixed
    run_flow 0 run --resume
    contains "$ERR" "resuming run $outer"
}

# A run started from outside its project with a relative --conf resumes,
# and its resumed run resumes again, from the project (the resumed run
# recorded the project as where its arguments were given: --conf
# proj/conf2 was no such directory the second time).
test_a_relative_conf_survives_a_resume_of_a_resume() {
    mkdir -p proj/conf2/base
    echo 'x: 1' > proj/conf2/base/parameters.yml
    write proj/pipeline.lua <<'L'
return pipeline{ node{ command = "test -e ok && echo x=${params.x}", name = "s" } }
L
    run_flow 1 run proj/pipeline.lua --conf proj//conf2
    cd proj
    run_flow 1 run --resume
    run_flow 1 run --resume
    touch ok
    run_flow 0 run --resume -v
    contains "$ERR" "x=1"
}
