# t_distributed.sh — distributed_job on one machine: the process layout and
# environment Azure ML gives each rank, tested with real PyTorch DDP and real
# Open MPI.  Debian's python3-torch and python3-mpi4py install for
# /usr/bin/python3, which may not be the python3 first on PATH.

python_with() {   # python_with MODULE -> an interpreter that can import it
    for py in "${FLOW_PYTHON:-}" /usr/bin/python3 python3; do
        [ -n "$py" ] && "$py" -c "import $1" 2>/dev/null && { echo "$py"; return; }
    done
}

test_default_runs_once() {
    write pipeline.lua <<'L'
local cmd = flow.command{ "sh", "-c", "echo run >> runs; echo rank=${RANK:-none}" }
return pipeline{ node{ func = distributed_job{ framework = "pytorch", num_nodes = 4 }(cmd), name = "train" } }
L
    run_flow 0 run
    equals "$(wc -l < runs)" 1 "runs"
}

test_pytorch_environment_per_rank() {
    write pipeline.lua <<'L'
local cmd = flow.command{ "sh", "-c", "env | grep -E '^(MASTER_ADDR|MASTER_PORT|WORLD_SIZE|RANK|LOCAL_RANK|NODE_RANK|LOCAL_WORLD_SIZE|GROUP_RANK)=' | sort > env.$RANK; echo rank-$RANK-ran" }
return pipeline{ node{ func = distributed_job{ framework = Framework.PyTorch, num_nodes = 2, processes_per_node = 2 }(cmd),
                       name = "train" } }
L
    run_flow 0 run --distributed=local
    for r in 0 1 2 3; do [ -f env.$r ] || { echo "rank $r did not run"; return 1; }; done
    contains "$(cat env.3)" "RANK=3"
    contains "$(cat env.3)" "LOCAL_RANK=1"
    contains "$(cat env.3)" "NODE_RANK=1"
    contains "$(cat env.3)" "GROUP_RANK=1"
    contains "$(cat env.2)" "LOCAL_RANK=0"
    contains "$(cat env.0)" "WORLD_SIZE=4"
    contains "$(cat env.0)" "LOCAL_WORLD_SIZE=2"
    contains "$(cat env.0)" "MASTER_ADDR=127.0.0.1"
    equals "$(grep MASTER_PORT env.0)" "$(grep MASTER_PORT env.3)" "MASTER_PORT on every rank"
    for r in 0 1 2 3; do contains "$(cat .flow/runs/latest/logs/train+rank$r.log)" "rank-$r-ran" "the log of rank $r"; done
}

test_mode_from_flow_yml_and_params_counts() {
    write conf/base/parameters.yml <<'Y'
nodes: 1
Y
    write conf/multi/parameters.yml <<'Y'
nodes: 3
Y
    write conf/multi/flow.yml <<'Y'
distributed: local
Y
    write pipeline.lua <<'L'
local cmd = flow.command{ "sh", "-c", "touch rank.$RANK" }
return pipeline{ node{ func = distributed_job{ framework = "pytorch", nodes = "params:nodes" }(cmd), name = "train" } }
L
    run_flow 0 run --env multi
    equals "$(ls rank.* | sort | tr '\n' ' ')" "rank.0 rank.1 rank.2 " "ranks"
    write conf/bad/flow.yml <<'Y'
distributed: everywhere
Y
    run_flow 2 run --env bad
    contains "$ERR" "distributed must be 'once'"
    contains "$ERR" "conf/bad/flow.yml"
    run_flow 2 run --distributed=cluster
    contains "$ERR" "--distributed must be once or local"
}

# A count is a whole number from 1 to 10000 nodes, 1024 processes per node:
# anything else (1e300, inf, 2^63 read as a float, a fraction) is refused at
# the script's line before anything runs, not taken as nil or wrapped.
test_counts_out_of_range_name_the_script_line() {
    for v in 1e300 math.huge '-math.huge' '2^63' 0x7fffffffffffffff 10001 0 -1 2.5 '0/0'; do
        write pipeline.lua <<L
local cmd = flow.command{ "sh", "-c", "touch ran" }
local train = distributed_job{ framework = "pytorch", nodes = $v }(cmd)
return pipeline{ node{ func = train, name = "train" } }
L
        run_flow 2 run --distributed=local
        contains "$ERR" "pipeline.lua:2: distributed_job: num_nodes must be a whole number from 1 to 10000 or \"params:KEY\", got" "nodes = $v"
        run_flow 2 list
        contains "$ERR" "pipeline.lua:2: distributed_job: num_nodes must be a whole number" "flow list, nodes = $v"
    done
    contains "$ERR" "nan" "the error for 0/0"
    [ ! -e ran ] || { echo "a step ran"; return 1; }
    write pipeline.lua <<'L'
return pipeline{ node{ func = distributed_job<framework = "mpi", processes_per_node = 1025>(flow.command{ "true" }),
                       name = "m" } }
L
    run_flow 2 list
    contains "$ERR" "pipeline.lua:1: distributed_job: processes_per_node must be a whole number from 1 to 1024"
    write pipeline.lua <<'L'
return pipeline{ node{ func = distributed_job<framework = "pytorch", nodes = math.huge>(flow.command{ "true" }),
                       name = "t" } }
L
    run_flow 2 list
    contains "$ERR" "pipeline.lua:1: distributed_job: num_nodes must be a whole number from 1 to 10000 or \"params:KEY\", got inf"
}

# num_nodes x processes_per_node once wrapped (2^62 x 4 started 2 ranks and
# reported done); with both bounded it cannot, and past 1024 processes
# --distributed=local refuses to start the job on one machine.
test_rank_total_is_bounded() {
    write pipeline.lua <<'L'
local cmd = flow.command{ "sh", "-c", "touch ran.$OMPI_COMM_WORLD_RANK" }
return pipeline{ node{ func = distributed_job{ framework = "mpi", nodes = 0x4000000000000000, processes_per_node = 4 }(cmd),
                       name = "m" } }
L
    run_flow 2 run --distributed=local
    contains "$ERR" "pipeline.lua:2: distributed_job: num_nodes must be a whole number from 1 to 10000"
    write pipeline.lua <<'L'
local cmd = flow.command{ "sh", "-c", "touch ran" }
return pipeline{ node{ func = distributed_job{ framework = "pytorch", num_nodes = 33, processes_per_node = 32 }(cmd),
                       name = "train" } }
L
    run_flow 0 list                                     # fine for Azure ML ...
    contains "$OUT" "PyTorch 33 nodes x 32 processes"
    run_flow 2 run --distributed=local                  # ... too many processes for this machine
    contains "$ERR" "step 'train' (pipeline.lua:2): num_nodes 33 x processes_per_node 32 is 1056 processes, more than --distributed=local starts on one machine (at most 1024)"
    [ ! -e ran ] || { echo "the step ran"; return 1; }
    run_flow 0 run                                      # the default runs it once
    [ -e ran ] || { echo "the step did not run once"; return 1; }
    write pipeline.lua <<'L'
local cmd = flow.command{ "true" }
return pipeline{ node{ func = distributed_job{ framework = "tensorflow", num_nodes = 1024, parameter_server_count = 1 }(cmd),
                       name = "tf" } }
L
    run_flow 2 run --distributed=local
    contains "$ERR" "num_nodes 1024 x processes_per_node 1 + 1 parameter server is 1025 processes"
    write pipeline.lua <<'L'
return pipeline{ node{ func = distributed_job{ framework = "tensorflow", parameter_server_count = "params:ps" }(flow.command{ "true" }),
                       name = "tf" } }
L
    run_flow 2 list
    contains "$ERR" "pipeline.lua:1: distributed_job: parameter_server_count must be a whole number from 1 to 10000, got \"params:ps\""
}

# A "params:" count meets the same rule when the run is planned: the error
# names the step, the parameter and the file that set it; nothing starts.
test_params_counts_are_bounded() {
    write conf/base/parameters.yml <<'Y'
n: 100000000
ppn: 2
Y
    write pipeline.lua <<'L'
local cmd = flow.command{ "sh", "-c", "touch rank.$RANK" }
return pipeline{ node{ func = distributed_job{ framework = "pytorch", nodes = "params:n", processes_per_node = "params:ppn" }(cmd),
                       name = "train" } }
L
    run_flow 2 run --distributed=local
    contains "$ERR" "step 'train' (pipeline.lua:2): num_nodes = \"params:n\" is 100000000 in environment 'local' (set in conf/base/parameters.yml:1); it must be a whole number from 1 to 10000"
    run_flow 2 list --params n=1e300
    contains "$ERR" "num_nodes = \"params:n\" is 1e+300 in environment 'local' (set in --params)"
    run_flow 2 list --params n=2,ppn=2.5
    contains "$ERR" "processes_per_node = \"params:ppn\" is 2.5 in environment 'local' (set in --params); it must be a whole number from 1 to 1024"
    run_flow 2 run --distributed=local --params n=2,ppn=1000
    contains "$ERR" "step 'train' (pipeline.lua:2): num_nodes 2 x processes_per_node 1000 is 2000 processes"
    # null: set, without a value (not "not defined ... (did you mean 'ppn'?)")
    run_flow 2 list --params n=2,ppn=null
    contains "$ERR" "processes_per_node = \"params:ppn\" but parameter 'ppn' is null in environment 'local' (set at --params); give it a value"
    ! ls rank.* >/dev/null 2>&1 || { echo "a rank ran"; return 1; }
    # a valid 2 x 2 (2.0 is the whole number 2, as math.tointeger has it) still runs its four ranks
    run_flow 0 run --distributed=local --params n=2.0
    equals "$(ls rank.* | sort | tr '\n' ' ')" "rank.0 rank.1 rank.2 rank.3 " "ranks"
    write pipeline.lua <<'L'
local cmd = flow.command{ "sh", "-c", "touch literal.$RANK" }
return pipeline{ node{ func = distributed_job{ framework = "pytorch", nodes = 2.0, processes_per_node = 2 }(cmd), name = "train" } }
L
    run_flow 0 list
    contains "$OUT" "PyTorch 2 nodes x 2 processes"
    run_flow 0 run --distributed=local
    equals "$(ls literal.* | sort | tr '\n' ' ')" "literal.0 literal.1 literal.2 literal.3 " "ranks"
}

test_tensorflow_config_per_process() {
    py=$(python_with json)
    [ -n "$py" ] || skip "no python3"
    write show_tf.py <<'P'
import json, os
tf = json.loads(os.environ["TF_CONFIG"])
print(json.dumps({"type": tf["task"]["type"], "index": tf["task"]["index"],
                  "workers": len(tf["cluster"]["worker"]), "ps": len(tf["cluster"].get("ps", [])),
                  "env": tf.get("environment")}))
P
    write pipeline.lua <<L
local cmd = flow.command{ "$py", "show_tf.py" }
return pipeline{ node{ func = distributed_job{ framework = "tensorflow", num_nodes = 2, parameter_server_count = 1 }(cmd),
                       name = "tf" } }
L
    run_flow 0 run --distributed=local
    logs=.flow/runs/latest/logs
    contains "$(cat $logs/tf+rank0.log)" '{"type": "worker", "index": 0, "workers": 2, "ps": 1, "env": "cloud"}'
    contains "$(cat $logs/tf+rank1.log)" '"type": "worker", "index": 1'
    contains "$(cat $logs/tf+rank2.log)" '"type": "ps", "index": 0'
    contains "$(cat $logs/tf+rank0.log)" '127.0.0.1:'
}

test_lua_step_runs_on_every_rank_master_returns() {
    write pipeline.lua <<'L'
local flow = require("flow")
distributed_job<framework = "pytorch", nodes = 2, processes_per_node = 2> function train(x)
  io.open("ran." .. flow.rank(), "w"):close()
  return { rank = flow.rank(), world = flow.world_size(), local_rank = flow.local_rank(),
           master = flow.is_distributed_master_node(), x = x }
end
return pipeline{
  node{ func = function() return 20 end, outputs = "x", name = "make" },
  node{ func = train, inputs = "x", outputs = "r" },
  node{ func = function(r) print(string.format("rank=%d world=%d master=%s x=%d", r.rank, r.world,
                                              tostring(r.master), r.x)) return 1 end,
        inputs = "r", outputs = "z", name = "show" },
}
L
    run_flow 0 run --distributed=local
    equals "$(ls ran.* | sort | tr '\n' ' ')" "ran.0 ran.1 ran.2 ran.3 " "ranks that ran"
    contains "$OUT" "rank=0 world=4 master=true x=20"
    run_flow 0 run                          # default: once, in-process, rank 0 of 1
    contains "$OUT" "rank=0 world=1 master=true x=20"
}

test_failing_rank_stops_the_others() {
    write pipeline.lua <<'L'
local cmd = flow.command{ "sh", "-c", 'if [ "$RANK" = 2 ]; then echo "rank two broke" >&2; exit 7; fi; echo $$ > pid.$RANK; exec sleep 60' }
return pipeline{ node{ func = distributed_job{ framework = "pytorch", num_nodes = 2, processes_per_node = 2 }(cmd), name = "train" } }
L
    t0=$(date +%s)
    run_flow 1 run --distributed=local
    [ $(( $(date +%s) - t0 )) -lt 15 ] || { echo "the other ranks were not stopped"; return 1; }
    contains "$ERR" "step 'train' failed on rank 2 of 4 (exit code 7)"
    contains "$ERR" "rank two broke"
    contains "$ERR" "train+rank2.log"
    for f in pid.*; do
        state=$(ps -o stat= -p "$(cat "$f")" 2>/dev/null || true)
        [ -z "$state" ] || [[ "$state" == Z* ]] || { echo "rank ${f#pid.} survived ($state)"; return 1; }
    done
}

test_ctrl_c_stops_all_ranks() {
    write pipeline.lua <<'L'
local cmd = flow.command{ "sh", "-c", 'echo $$ > pid.$RANK; exec sleep 60' }
return pipeline{ node{ func = distributed_job{ framework = "pytorch", num_nodes = 3 }(cmd), name = "train" } }
L
    "$FLOW" run --distributed=local >stdout.txt 2>stderr.txt &
    pid=$!
    for _ in $(seq 100); do [ "$(ls pid.* 2>/dev/null | wc -l)" = 3 ] && break; sleep 0.05; done
    kill -INT $pid
    set +e; wait $pid; status=$?; set -e
    equals "$status" 130 "exit status"
    sleep 0.2
    for f in pid.*; do
        state=$(ps -o stat= -p "$(cat "$f")" 2>/dev/null || true)
        [ -z "$state" ] || [[ "$state" == Z* ]] || { echo "rank ${f#pid.} survived Ctrl-C"; return 1; }
    done
}

ddp_run() {   # ddp_run NODES PPN
    py=$(python_with torch)
    [ -n "$py" ] || skip "no python3 here can import torch (make check installs python3-torch)"
    copy_example pytorch_ddp ex
    FLOW_PYTHON=$py run_flow 0 run ex --distributed=local --params "num_training_nodes=$1,processes_per_node=$2,epochs=40"
    logs=ex/.flow/runs/latest/logs
    # every rank joined one process group of world size 2 ...
    for r in 0 1; do contains "$(cat $logs/train_model+rank$r.log)" '"world_size": 2' "rank $r log"; done
    # ... and DDP kept the model identical on every rank
    w0=$(grep -o '"weights": .*}' $logs/train_model+rank0.log)
    w1=$(grep -o '"weights": .*}' $logs/train_model+rank1.log)
    equals "$w0" "$w1" "final weights of rank 0 and rank 1"
    # the loss went down (metrics.json from rank 0)
    "$py" - ex/.flow/data/model/metrics.json <<'P'
import json, sys
m = json.load(open(sys.argv[1]))
assert m["world_size"] == 2, m["world_size"]
assert m["loss"][-1] < m["loss"][0] / 2, (m["loss"][0], m["loss"][-1])
P
    contains "$OUT" "trained on 2 process(es)"
}

test_pytorch_ddp_two_nodes_one_process() { ddp_run 2 1; }
test_pytorch_ddp_one_node_two_processes() { ddp_run 1 2; }

test_mpi_allreduce() {
    command -v mpirun >/dev/null || skip "no mpirun (make check installs openmpi-bin)"
    py=$(python_with mpi4py)
    [ -n "$py" ] || skip "no python3 here can import mpi4py (make check installs python3-mpi4py)"
    write allreduce.py <<'P'
from mpi4py import MPI
comm = MPI.COMM_WORLD
total = comm.allreduce(comm.Get_rank() + 1, op=MPI.SUM)
print(f"rank {comm.Get_rank()} of {comm.Get_size()}: sum={total}", flush=True)
P
    write pipeline.lua <<L
local cmd = flow.command{ "$py", "allreduce.py" }
return pipeline{ node{ func = distributed_job{ framework = "mpi", num_nodes = 1, processes_per_node = 3 }(cmd), name = "reduce" } }
L
    run_flow 0 run --distributed=local
    logs=.flow/runs/latest/logs
    for r in 0 1 2; do contains "$(cat $logs/reduce+rank$r.log)" "rank $r of 3: sum=6"; done
}

test_mpi_rank_helpers_in_lua_step() {
    command -v mpirun >/dev/null || skip "no mpirun (make check installs openmpi-bin)"
    write pipeline.lua <<'L'
local flow = require("flow")
local step = distributed_job{ framework = "mpi", num_nodes = 2, processes_per_node = 2 }(function()
  io.open("mpi." .. flow.rank() .. "." .. flow.world_size(), "w"):close()
  return flow.rank()
end)
return pipeline{ node{ func = step, outputs = "r", name = "ranks" },
                 node{ func = function(r) print("master rank " .. r) return 1 end, inputs = "r", outputs = "z", name = "show" } }
L
    run_flow 0 run --distributed=local
    equals "$(ls mpi.* | sort | tr '\n' ' ')" "mpi.0.4 mpi.1.4 mpi.2.4 mpi.3.4 " "ranks"
    contains "$OUT" "master rank 0"
}

test_mpi_without_mpirun_is_a_clear_error() {
    write pipeline.lua <<'L'
return pipeline{ node{ func = distributed_job{ framework = "mpi", num_nodes = 2 }(flow.command{ "true" }), name = "m" } }
L
    mkdir bin && ln -s "$(command -v sh)" bin/sh
    set +e; PATH=$PWD/bin "$FLOW" run --distributed=local 2>stderr.txt; status=$?; set -e
    equals "$status" 1 "exit status"
    contains "$(cat stderr.txt)" "mpirun, which is not installed (Debian: apt-get install openmpi-bin)"
}

test_mpi_failing_rank() {
    command -v mpirun >/dev/null || skip "no mpirun (make check installs openmpi-bin)"
    write pipeline.lua <<'L'
local cmd = flow.command{ "sh", "-c", 'if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then echo "rank one broke" >&2; exit 5; fi' }
return pipeline{ node{ func = distributed_job{ framework = "mpi", num_nodes = 2 }(cmd), name = "m" } }
L
    run_flow 1 run --distributed=local
    contains "$ERR" "step 'm' failed"
    contains "$ERR" "m+rankN.log"
    contains "$(cat .flow/runs/latest/logs/m+rank1.log)" "rank one broke"
}

# One file per pipeline, as Kedro projects keep them: the annotation form works
# in every project file the script loads, and errors keep their file and line.
test_annotation_in_required_dofile_and_loadfile_files() {
    write pipelines/train.lua <<'L'
local M = {}
distributed_job<framework = "pytorch", nodes = 2> function M.train(x)
  return x .. "-trained"
end
return M
L
    write pipelines/evaluate.lua <<'L'
return distributed_job<framework = "mpi", nodes = 3>(function(m) return m .. "-evaluated" end)
L
    write pipelines/report.lua <<'L'
return distributed_job<framework = "tensorflow", nodes = 4>(function(m) return m .. "!" end)
L
    write pipeline.lua <<'L'
local train = require("pipelines.train").train
local evaluate = dofile("pipelines/evaluate.lua")
local report = assert(loadfile("pipelines/report.lua"))()
return pipeline{
  node{ func = function() return "data" end, outputs = "d", name = "load" },
  node{ func = train, inputs = "d", outputs = "m", name = "train" },
  node{ func = evaluate, inputs = "m", outputs = "e", name = "evaluate" },
  node{ func = report, inputs = "e", outputs = "r", name = "report" },
}
L
    run_flow 0 list
    contains "$OUT" "PyTorch 2 nodes"
    contains "$OUT" "MPI 3 nodes"
    contains "$OUT" "TensorFlow 4 nodes"
    write driver.lua <<'L'
local r = flow.run(dofile("pipeline.lua"))
print("result=" .. r.outputs.r)
L
    run_flow 0 run driver.lua
    contains "$OUT" "result=data-trained-evaluated!"
    write pipelines/bad.lua <<'L'
local a = 1
distributed_job<framework = "pytorch",
                nodes = 2> function t(x)
  return x
end
local y = )
L
    echo 'require("pipelines.bad")' > pipeline.lua
    run_flow 2 run
    contains "$ERR" "pipelines/bad.lua:6: unexpected symbol near ')'"
    echo 'return dofile("pipelines/bad.lua")' > pipeline.lua
    run_flow 2 run
    contains "$ERR" "pipelines/bad.lua:6: unexpected symbol near ')'"
    echo 'print(select(2, loadfile("pipelines/bad.lua")))' > pipeline.lua
    run_flow 2 run
    contains "$OUT" "pipelines/bad.lua:6: unexpected symbol near ')'"
}

# distributed_job{...} wrapping what is neither a function nor a command
# names the script's line (it named none: error level 3 is past the caller).
test_wrapping_a_value_names_the_line() {
    printf 'local x = distributed_job{ framework = "mpi" }(5)\nreturn pipeline{}\n' > pipeline.lua
    run_flow 2 run
    contains "$ERR" "flow: error: pipeline.lua:1: distributed_job{...} wraps a function or a flow.command, got number"
    printf 'local f = 5\nlocal x = distributed_job<framework="mpi"> .. f\nreturn pipeline{}\n' > pipeline.lua
    run_flow 2 run
    contains "$ERR" "flow: error: pipeline.lua:2: distributed_job{...} wraps a function or a flow.command, got number"
}

# mpirun gives each rank a process group of its own: a second Ctrl-C
# (SIGKILL to mpirun's group) left the ranks running for ever, reparented
# to PID 1.  The groups of a step's descendants are stopped with it, and
# after a kill -9 of flow the reaper stops them too.
mpi_ranks_that_ignore_sigterm() {
    write pipeline.lua <<'L'
local job = distributed_job{ framework = "mpi", num_nodes = 1, processes_per_node = 2 }(
  flow.command "trap '' TERM; echo $$ >> pids; exec sleep 57")
return pipeline{ node{ func = job, name = "mpi" } }
L
    rm -f pids
    "$FLOW" run --distributed=local >stdout.txt 2>stderr.txt &
    FLOW_PID=$!
    for _ in $(seq 200); do [ -s pids ] && [ "$(wc -l < pids)" -ge 2 ] && break; sleep 0.05; done
    [ "$(wc -l < pids 2>/dev/null || echo 0)" -ge 2 ] || { echo "the ranks never started"; cat stderr.txt; kill -9 "$FLOW_PID"; return 1; }
}

test_a_second_ctrl_c_stops_mpi_ranks_in_their_own_groups() {
    command -v mpirun >/dev/null || skip "no mpirun (make check installs openmpi-bin)"
    mpi_ranks_that_ignore_sigterm || return 1
    kill -INT "$FLOW_PID"; sleep 0.3; kill -INT "$FLOW_PID"
    set +e; wait "$FLOW_PID"; STATUS=$?; set -e
    equals "$STATUS" 130 "exit status"
    all_gone $(cat pids)
}

test_kill_9_stops_mpi_ranks_in_their_own_groups() {
    command -v mpirun >/dev/null || skip "no mpirun (make check installs openmpi-bin)"
    mpi_ranks_that_ignore_sigterm || return 1
    sleep 0.5        # mpirun's group told to the reaper (engine/reaper.h)
    kill -9 "$FLOW_PID"
    set +e; wait "$FLOW_PID"; set -e
    all_gone $(cat pids)
}
