-- flow.launch: how a distributed_job step is started on this machine with
-- `distributed: local` — the process layout and environment Azure ML gives
-- it, so distributed code is tested before it costs GPU hours.
--   PyTorch:    num_nodes x processes_per_node processes with MASTER_ADDR,
--               MASTER_PORT, WORLD_SIZE, RANK, LOCAL_RANK, NODE_RANK (and
--               LOCAL_WORLD_SIZE, GROUP_RANK... as torchrun sets them)
--   TensorFlow: one process per worker (and parameter server), each with its
--               TF_CONFIG
--   MPI:        mpirun -np num_nodes x processes_per_node, each rank
--               logging to its own file
local core = require("flow.core")
local params_text = require("flow.params").text

local M = {}

M.MODES = { once = true, ["local"] = true }

-- The ranks of a PyTorch job: a list of environment tables, global rank order.
function M.pytorch_ranks(dist)
  local nodes, ppn = dist.num_nodes, dist.processes_per_node
  local port = core.free_port()
  local ranks = {}
  for node = 0, nodes - 1 do
    for lr = 0, ppn - 1 do
      local rank = node * ppn + lr
      ranks[#ranks + 1] = {
        MASTER_ADDR = "127.0.0.1", MASTER_PORT = port, WORLD_SIZE = nodes * ppn, RANK = rank,
        LOCAL_RANK = lr, NODE_RANK = node, LOCAL_WORLD_SIZE = ppn, GROUP_RANK = node,
        GROUP_WORLD_SIZE = nodes, ROLE_RANK = rank, ROLE_WORLD_SIZE = nodes * ppn,
      }
    end
  end
  return ranks
end

-- The processes of a TensorFlow job: workers (num_nodes x processes_per_node,
-- worker 0 is the chief) then parameter servers, each with its TF_CONFIG.
function M.tensorflow_ranks(dist)
  local workers, ps = {}, {}
  for i = 1, dist.num_nodes * dist.processes_per_node do workers[i] = "127.0.0.1:" .. core.free_port() end
  for i = 1, dist.parameter_server_count or 0 do ps[i] = "127.0.0.1:" .. core.free_port() end
  local cluster = { worker = workers }
  if #ps > 0 then cluster.ps = ps end
  local ranks = {}
  local function add(kind, index)
    local tf = { cluster = cluster, task = { type = kind, index = index }, environment = "cloud" }
    ranks[#ranks + 1] = { TF_CONFIG = core.json_encode(tf) }
  end
  for i = 0, #workers - 1 do add("worker", i) end
  for i = 0, #ps - 1 do add("ps", i) end
  return ranks
end

-- mpirun in front of argv.  Each rank adds its own output straight to
-- log_base .. "+rank<N>.log" (through a tiny sh wrapper; adds, so a retry
-- keeps the attempt before): relaying it through mpirun's output forwarding
-- can lose a rank's last lines when mpirun exits.
-- Running as root (CI, containers) needs Open MPI's consent; more ranks than
-- cores need --oversubscribe.
local RANK_LOG = 'exec "$@" >> "$0+rank${OMPI_COMM_WORLD_RANK:-0}.log" 2>&1'

function M.mpi_argv(dist, argv, log_base)
  local np = dist.num_nodes * dist.processes_per_node
  local out = { "mpirun", "-np", tostring(np) }
  if np > core.cpu_count() then out[#out + 1] = "--oversubscribe" end
  for _, a in ipairs({ "/bin/sh", "-c", RANK_LOG, log_base }) do out[#out + 1] = a end
  for _, a in ipairs(argv) do out[#out + 1] = a end
  return out, { "OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1" }
end

-- "K=V" strings for flow.proc.spawn from an environment table.
function M.env_list(env)
  local out = {}
  for k, v in pairs(env) do out[#out + 1] = k .. "=" .. params_text(v) end
  table.sort(out)
  return out
end

return M
