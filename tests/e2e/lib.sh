# lib.sh — helpers for end-to-end tests.  Each test runs in a fresh temporary
# directory with `set -e`; a helper that finds a mismatch prints why and exits 1.
# `skip REASON` exits 77.

# run_flow EXPECTED_STATUS ARGS... — runs $FLOW, keeps stdout/stderr in $OUT/$ERR.
run_flow() {
    local want=$1; shift
    set +e
    "$FLOW" "$@" >stdout.txt 2>stderr.txt
    STATUS=$?
    set -e
    OUT=$(cat stdout.txt) ERR=$(cat stderr.txt)
    if [ "$STATUS" != "$want" ]; then
        echo "flow $* exited $STATUS, expected $want"
        echo "--- stdout"; cat stdout.txt; echo "--- stderr"; cat stderr.txt
        return 1
    fi
}

# run_flow_bg ARGS... — $FLOW in the background (FLOW_PID), output in stdout.txt/stderr.txt.
run_flow_bg() {
    "$FLOW" "$@" >stdout.txt 2>stderr.txt &
    FLOW_PID=$!
}

contains() {   # contains HAYSTACK NEEDLE [WHAT]
    if [[ "$1" != *"$2"* ]]; then
        echo "expected ${3:-output} to contain: $2"
        echo "--- got:"; printf '%s\n' "$1"
        return 1
    fi
}

not_contains() {
    if [[ "$1" == *"$2"* ]]; then
        echo "expected ${3:-output} not to contain: $2"
        echo "--- got:"; printf '%s\n' "$1"
        return 1
    fi
}

equals() {     # equals GOT WANT [WHAT]
    if [ "$1" != "$2" ]; then
        echo "${3:-value} mismatch"; echo "--- got:"; printf '%s\n' "$1"; echo "--- want:"; printf '%s\n' "$2"
        return 1
    fi
}

no_crash() {   # stderr of the last run shows no C-level crash or sanitizer report
    not_contains "$ERR" "Segmentation fault" stderr
    not_contains "$ERR" "AddressSanitizer" stderr
    not_contains "$ERR" "runtime error:" stderr
    not_contains "$ERR" "internal error" stderr
}

skip() { echo "$*"; exit 77; }

# interrupt_within PID SECONDS WHAT: Ctrl-C (SIGINT) to the flow at PID, its
# exit status in STATUS once it has exited, within SECONDS; else it is killed
# and the test fails saying that WHAT went on.
interrupt_within() {
    local pid=$1 secs=$2 what=$3
    kill -INT "$pid"
    for _ in $(seq $((secs * 10))); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then
        kill -9 "$pid"; wait "$pid" || true
        echo "$what went on for $secs s after Ctrl-C"; return 1
    fi
    set +e; wait "$pid"; STATUS=$?; set -e
}

# de_locale: builds de_DE.UTF-8 (a decimal comma, and a collation unlike the
# bytes' order) into ./loc, for LOCPATH=$PWD/loc; skips the test on a machine
# without locale sources (Debian's locales package: make check installs it).
de_locale() {
    [ -e /usr/share/i18n/locales/de_DE ] && command -v localedef >/dev/null ||
        skip "no locale sources (Debian's locales package) to build de_DE.UTF-8 from"
    mkdir -p loc
    localedef -i de_DE -f UTF-8 "$PWD/loc/de_DE.UTF-8" >/dev/null 2>&1 || true   # (1: warnings only)
    [ -e loc/de_DE.UTF-8 ] || { echo "localedef made no de_DE.UTF-8"; return 1; }
}

# copy_example NAME DEST — a fresh copy of examples/NAME: without the .flow/ a demo
# or an earlier run left there, so a test never depends on what ran before it.
copy_example() {
    rm -rf "$2"
    mkdir -p "$2"
    (cd "$FLOW_ROOT/examples/$1" && tar --exclude=./.flow -cf - .) | (cd "$2" && tar -xf -)
}

write() {      # write FILE <<'EOF' ... EOF
    mkdir -p "$(dirname "$1")"
    cat >"$1"
}

# page_dom URL — the page's DOM after its scripts ran, in headless Chromium
# (Debian's chromium, which make check installs), in $DOM.  Anything the page
# writes to its console (an uncaught error, a warning) fails the test.
page_dom() {
    command -v chromium >/dev/null || { echo "chromium is not installed (make check installs it)"; return 1; }
    DOM=$(timeout 120 chromium --headless --no-sandbox --disable-gpu --no-first-run --user-data-dir="$PWD/.chromium" \
          --enable-logging=stderr --v=0 --dump-dom "$1" 2>chromium.err) || { cat chromium.err; return 1; }
    if grep -q ":CONSOLE" chromium.err; then
        echo "the page wrote to its console:"; grep ":CONSOLE" chromium.err; return 1
    fi
}

# The latest start of step $1 among the runs, and its earliest end:
# "overlap" when the first is before the second (runs at once, flow.spawn).
overlap_of() {
    python3 - "$1" .flow/runs/2*/journal.jsonl <<'P'
import json, sys
starts, ends = [], []
for path in sys.argv[2:]:
    for line in open(path):
        e = json.loads(line)
        if e.get("step") == sys.argv[1] and e["event"] == "step_start":
            starts.append(e["time"])
        if e.get("step") == sys.argv[1] and e["event"] == "step_end" and e.get("status") == "ok":
            ends.append(e["time"])
print("overlap" if starts and max(starts) < min(ends) else "none: starts %s, ends %s" % (starts, ends))
P
}

# all_gone PID... — each process is gone (or a zombie) within 30 s.
all_gone() {
    for p in "$@"; do
        for _ in $(seq 300); do
            state=$(ps -o stat= -p "$p" 2>/dev/null || true)
            [ -z "$state" ] || [[ "$state" == Z* ]] && break
            sleep 0.1
        done
        state=$(ps -o stat= -p "$p" 2>/dev/null || true)
        if [ -n "$state" ] && [[ "$state" != Z* ]]; then
            echo "process $p outlived flow ($state)"
            kill -9 "$@" 2>/dev/null           # leave nothing behind for the next test
            return 1
        fi
    done
}
