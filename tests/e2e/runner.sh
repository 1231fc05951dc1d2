#!/usr/bin/env bash
# runner.sh FILE — sources one e2e test file and runs each test_* function in
# its own subshell and temporary directory. Last line: "e2e PASSED FAILED SKIPPED".
set -u
file=$1
source "$(dirname "$0")/lib.sh"
source "$file"
p=0 f=0 s=0
# FLOW_TEST_ONLY=REGEX runs only the tests whose names match (while working on one).
for t in $(declare -F | awk '{print $3}' | grep '^test_' | grep -E -- "${FLOW_TEST_ONLY:-.}"); do
    dir=$(mktemp -d "${TMPDIR:-/tmp}/flow-e2e.XXXXXX")
    log="$dir.log"
    ( cd "$dir" && set -e && "$t" ) >"$log" 2>&1
    rc=$?
    if [ $rc -eq 0 ]; then p=$((p + 1))
    elif [ $rc -eq 77 ]; then s=$((s + 1)); echo "SKIP $t: $(tail -n 1 "$log")"
    else f=$((f + 1)); echo "FAIL $t"; sed 's/^/  /' "$log" | tail -n 40; fi
    rm -rf "$dir" "$log"
done
echo "e2e $p $f $s"
