#!/usr/bin/env bash
# tests/run.sh BUILD_DIR — runs every unit test binary and every end-to-end
# test, then prints one closing line "N passed, N failed".
set -u
build=${1:-build}
root=$(cd "$(dirname "$0")/.." && pwd)
passed=0 failed=0 skipped=0
failures=()

for t in "$root/$build"/tests/test_*; do
    [ -x "$t" ] || continue
    out=$("$t" 2>&1)
    line=$(printf '%s\n' "$out" | tail -n 1)
    p=$(printf '%s' "$line" | sed -n 's/.*: \([0-9]*\) passed, \([0-9]*\) failed/\1/p')
    f=$(printf '%s' "$line" | sed -n 's/.*: \([0-9]*\) passed, \([0-9]*\) failed/\2/p')
    if [ -z "$p" ]; then                      # crashed before its summary
        p=0 f=1
    fi
    passed=$((passed + p)); failed=$((failed + f))
    if [ "$f" != 0 ]; then printf '%s\n' "$out"; failures+=("unit/$(basename "$t")"); fi
    printf '%s\n' "$line"
done

export FLOW="$root/$build/flow" FLOW_ROOT="$root"
for f in "$root"/tests/e2e/t_*.sh; do
    suite=$(basename "$f" .sh)
    out=$(bash "$root/tests/e2e/runner.sh" "$f" 2>&1)
    summary=$(printf '%s\n' "$out" | tail -n 1)
    printf '%s\n' "$out" | sed '$d' | grep -E '^(FAIL|SKIP)|^  ' || true
    read -r p f s <<<"$(printf '%s' "$summary" | sed -n 's/^e2e \([0-9]*\) \([0-9]*\) \([0-9]*\)$/\1 \2 \3/p')"
    if [ -z "${p:-}" ]; then p=0 f=1 s=0; printf '%s\n' "$out" | tail -n 20; fi
    passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
    [ "$f" != 0 ] && failures+=("e2e/$suite")
    printf '%s: %d passed, %d failed, %d skipped\n' "$suite" "$p" "$f" "$s"
done

[ ${#failures[@]} -gt 0 ] && printf 'failed suites: %s\n' "${failures[*]}"
if [ "$skipped" -gt 0 ]; then echo "$passed passed, $failed failed, $skipped skipped"
else echo "$passed passed, $failed failed"; fi
[ "$failed" -eq 0 ]
