# t_pools.sh — resource pools: node{pool =} with sizes from flow.yml, the Lua
# steps' own pool, and the errors.  Overlap is judged from timestamps the
# steps write themselves (start and end of each), never from how long a run
# took: a loaded machine only makes steps longer, which these checks allow.

# A step that records "<name> start <ns>" and "<name> end <ns>" around a sleep.
timed() {   # timed NAME [EXTRA node fields]
    printf '  node{ command = "echo %s start $(date +%%s%%N) >> times; sleep 1; echo %s end $(date +%%s%%N) >> times", name = "%s"%s },\n' \
        "$1" "$1" "$1" "${2:+, $2}"
}
at() { awk -v n="$1" -v e="$2" '$1 == n && $2 == e { print $3 }' times; }   # at NAME start|end
overlap() { [ "$(at "$1" start)" -lt "$(at "$2" end)" ] && [ "$(at "$2" start)" -lt "$(at "$1" end)" ]; }

test_named_pool_of_one_serialises_its_steps_while_others_run() {
    write conf/base/flow.yml <<'Y'
pools:
  gpu: 1
Y
    { echo 'return pipeline{'; timed a 'pool = "gpu"'; timed b 'pool = "gpu"'; timed c; echo '}'; } > pipeline.lua
    run_flow 0 run -j 4
    ! overlap a b || { cat times; echo "two steps of a pool of 1 ran at once"; return 1; }
    overlap c a || overlap c b || { cat times; echo "the local step waited for the gpu pool"; return 1; }
}

test_without_a_pool_steps_share_j() {
    { echo 'return pipeline{'; timed a; timed b; echo '}'; } > pipeline.lua
    run_flow 0 run -j 2
    overlap a b || { cat times; echo "-j 2 did not run both at once"; return 1; }
    rm times
    run_flow 0 run -j 1 --force
    ! overlap a b || { cat times; echo "-j 1 ran two at once"; return 1; }
}

test_environment_flow_yml_sizes_the_pool() {
    write conf/base/flow.yml <<'Y'
pools: {gpu: 1}
Y
    write conf/big/flow.yml <<'Y'
pools: {gpu: 2}
Y
    { echo 'return pipeline{'; timed a 'pool = "gpu"'; timed b 'pool = "gpu"'; echo '}'; } > pipeline.lua
    run_flow 0 run -j 4 --env big
    overlap a b || { cat times; echo "conf/big/flow.yml's gpu: 2 did not let both run"; return 1; }
}

# A pool's steps hold its slots, not -j's: a gpu step and a local one at -j 1.
test_a_pool_step_holds_no_j_slot() {
    write conf/base/flow.yml <<'Y'
pools: {gpu: 1}
Y
    { echo 'return pipeline{'; timed a 'pool = "gpu"'; timed b; echo '}'; } > pipeline.lua
    run_flow 0 run -j 1
    overlap a b || { cat times; echo "the gpu step took the one -j slot"; return 1; }
}

# Lua steps have their own pool, as large as -j: a Lua step waiting on its
# command does not hold a command step back at -j 1, and two Lua steps at -j 1
# still take turns.
test_lua_steps_have_their_own_pool() {
    write pipeline.lua <<'L'
local function shell(name)
  return function()
    os.execute("echo " .. name .. " start $(date +%s%N) >> times; sleep 1; echo " .. name .. " end $(date +%s%N) >> times")
    return 1
  end
end
return pipeline{
  node{ func = shell("l1"), outputs = "x1", name = "l1" },
  node{ func = shell("l2"), outputs = "x2", name = "l2" },
  node{ command = "echo c start $(date +%s%N) >> times; sleep 1; echo c end $(date +%s%N) >> times", name = "c" },
}
L
    run_flow 0 run -j 1
    ! overlap l1 l2 || { cat times; echo "two Lua steps ran at once at -j 1"; return 1; }
    overlap l1 c || overlap l2 c || { cat times; echo "the command waited for the Lua steps"; return 1; }
}

test_lua_step_in_a_named_pool() {
    write conf/base/flow.yml <<'Y'
pools: {gpu: 1}
Y
    write pipeline.lua <<'L'
local function shell(name)
  return function()
    os.execute("echo " .. name .. " start $(date +%s%N) >> times; sleep 1; echo " .. name .. " end $(date +%s%N) >> times")
    return 1
  end
end
return pipeline{
  node{ func = shell("l1"), outputs = "x1", name = "l1", pool = "gpu" },
  node{ func = shell("l2"), outputs = "x2", name = "l2", pool = "gpu" },
}
L
    run_flow 0 run -j 4
    ! overlap l1 l2 || { cat times; echo "two steps of a pool of 1 ran at once"; return 1; }
}

test_unknown_pool_is_a_load_error_with_file_line() {
    write conf/base/flow.yml <<'Y'
pools: {gpu: 1}
Y
    write pipeline.lua <<'L'
return pipeline{
  node{ command = "true", name = "a", pool = "gpuu" },
}
L
    run_flow 2 run
    contains "$ERR" "step 'a' (pipeline.lua:2) asks for pool 'gpuu'"
    contains "$ERR" "did you mean 'gpu'?"
    contains "$ERR" "pools: gpu, local"
    [ ! -d .flow/runs ] || [ -z "$(ls .flow/runs)" ] || { echo "a run started"; return 1; }
    run_flow 2 list
    contains "$ERR" "asks for pool 'gpuu'"
    rm conf/base/flow.yml
    run_flow 2 run
    contains "$ERR" "pools: local"
}

test_remote_pool_is_not_for_local_steps() {
    write pipeline.lua <<'L'
return pipeline{ node{ command = "true", name = "a", pool = "remote" } }
L
    run_flow 2 run
    contains "$ERR" "the remote pool is for steps a remote backend runs"
}

test_local_pool_may_be_named() {
    write pipeline.lua <<'L'
return pipeline{ node{ command = "echo ran > out.txt", name = "a", pool = "local" } }
L
    run_flow 0 run
    equals "$(cat out.txt)" ran
}

test_pool_sizes_must_be_positive_integers() {
    local bad
    for bad in 0 -1 1.5 two "[1]" "{}" true; do
        mkdir -p conf/base
        printf 'pools:\n  gpu: %s\n' "$bad" > conf/base/flow.yml
        write pipeline.lua <<'L'
return pipeline{ node{ command = "true", name = "a", pool = "gpu" } }
L
        run_flow 2 run
        contains "$ERR" "conf/base/flow.yml:2: pool 'gpu' must have a size that is a whole number of at least 1" "size $bad"
    done
    write conf/base/flow.yml <<'Y'
pools: [gpu]
Y
    run_flow 2 run
    contains "$ERR" "conf/base/flow.yml:1: pools must be a map of pool name to size"
    write conf/base/flow.yml <<'Y'
pools:
  local: 8
Y
    run_flow 2 run
    contains "$ERR" "conf/base/flow.yml:2: pool 'local' cannot be set here: -j sizes it"
    write conf/base/flow.yml <<'Y'
pool: {gpu: 1}
Y
    run_flow 2 run
    contains "$ERR" "unknown flow setting 'pool' (did you mean 'pools'?)"
}

test_remote_pool_size_is_configurable() {
    write conf/base/flow.yml <<'Y'
pools: {remote: 50}
Y
    write pipeline.lua <<'L'
return pipeline{ node{ command = "echo ok > out.txt", name = "a" } }
L
    run_flow 0 run
    equals "$(cat out.txt)" ok
}

test_node_pool_must_be_a_name() {
    write pipeline.lua <<'L'
return pipeline{ node{ command = "true", name = "a", pool = 1 } }
L
    run_flow 2 run
    contains "$ERR" "pipeline.lua:1: node: pool must be the name of a pool (flow.yml pools:), got number"
    write pipeline.lua <<'L'
return pipeline{ node{ command = "true", name = "a", pool = "" } }
L
    run_flow 2 run
    contains "$ERR" "node: pool must be the name of a pool"
}

test_list_shows_the_pool() {
    write conf/base/flow.yml <<'Y'
pools: {gpu: 1}
Y
    write pipeline.lua <<'L'
return pipeline{
  node{ command = "true", name = "train", pool = "gpu" },
  node{ command = "true", name = "other" },
}
L
    run_flow 0 list
    contains "$OUT" "pool"
    contains "$(grep train <<<"$OUT")" "gpu"
    run_flow 0 list --format json
    contains "$OUT" '"pool":	"gpu"'
    contains "$OUT" '"pool":	null'
    write pipeline.lua <<'L'
return pipeline{ node{ command = "true", name = "other" } }
L
    run_flow 0 list
    not_contains "$OUT" "pool" "a listing without pools"
}

# A step's process holds a few descriptors (its pipes, pidfd and log): a -j
# larger than `ulimit -n` allows is lowered to fit, and says so, where each
# step past the limit failed with "pipe: Too many open files" (exit 1).
test_a_j_beyond_ulimit_n_is_lowered_not_a_failure() {
    write pipeline.lua <<'L'
local steps = {}
for i = 1, 60 do steps[i] = node{ command = "sleep 0.2", name = "s" .. i } end
return pipeline(steps)
L
    set +e
    (ulimit -n 128 && exec "$FLOW" run -j 100000) >stdout.txt 2>stderr.txt
    STATUS=$?
    set -e
    equals "$STATUS" 0 "exit status"
    contains "$(cat stderr.txt)" "ulimit -n allows 128 open files, enough for 16 steps running at once"
    contains "$(cat stderr.txt)" "60 done"
}
