-- flow.distributed: distributed_job{framework=, num_nodes=, processes_per_node=}
-- and the rank helpers.  The decorator form comes from kedro-azureml's
-- @distributed_job; `distributed_job<...>` in scripts is desugared to it.
local util = require("flow.util")
local dag = require("flow.dag")
local command = require("flow.command")

local M = {}

M.Framework = { PyTorch = "pytorch", TensorFlow = "tensorflow", MPI = "mpi" }
local valid = { pytorch = true, tensorflow = true, mpi = true }

local Decorator = { __name = "flow.distributed_job" }
local Distributed = { __name = "flow.distributed" }
Distributed.__index = Distributed
M.Distributed = Distributed

function M.is_distributed(v)
  return getmetatable(v) == Distributed
end

-- A count: a whole number within the graph's bounds (dag.dist_count: the rule a
-- "params:" count meets when the run is planned), or, where `refs`,
-- "params:key" resolved per environment later.
local function check_count(v, what, level, refs)
  local key = refs and type(v) == "string" and dag.is_param_input(v)
  if type(key) == "string" and key ~= "" then return nil, v end
  local n, rule = dag.dist_count(what, v)
  if n then return n, nil end
  util.fail(level + 1, "distributed_job: %s must be %s%s, got %s", what, rule, refs and ' or "params:KEY"' or "",
            type(v) == "string" and string.format("%q", v) or tostring(v))
end

local fields = { framework = true, num_nodes = true, nodes = true, processes_per_node = true,
                 parameter_server_count = true }

local function parse_framework(f, level)
  local names = "Framework.PyTorch, Framework.TensorFlow, Framework.MPI (or \"pytorch\", \"tensorflow\", \"mpi\")"
  if f == nil then util.fail(level + 1, "distributed_job: framework is required: one of %s", names) end
  if type(f) ~= "string" or not valid[f:lower()] then
    util.fail(level + 1, "distributed_job: unknown framework %s: use one of %s",
              type(f) == "string" and string.format("%q", f) or tostring(f), names)
  end
  return f:lower()
end

function M.distributed_job(opts, level)
  level = (level or 1) + 1
  if type(opts) ~= "table" then
    util.fail(level, "distributed_job: expected {framework = ..., num_nodes = ...}, got %s", type(opts))
  end
  util.check_fields(opts, fields, "distributed_job", level)
  if opts.num_nodes ~= nil and opts.nodes ~= nil and opts.num_nodes ~= opts.nodes then
    util.fail(level, "distributed_job: num_nodes and nodes are the same setting; give one")
  end
  local spec = { framework = parse_framework(opts.framework, level) }
  spec.num_nodes, spec.num_nodes_ref = check_count(opts.num_nodes or opts.nodes or 1, "num_nodes", level, true)
  spec.processes_per_node, spec.processes_per_node_ref =
    check_count(opts.processes_per_node or 1, "processes_per_node", level, true)
  if opts.parameter_server_count ~= nil then
    if spec.framework ~= "tensorflow" then
      util.fail(level, "distributed_job: parameter_server_count applies to TensorFlow only")
    end
    -- (a literal only: nothing resolves a "params:" server count later)
    spec.parameter_server_count = check_count(opts.parameter_server_count, "parameter_server_count", level, false)
  end
  return setmetatable({ spec = spec }, Decorator)
end

-- decorator(fn_or_command) and, from the desugared annotation, decorator .. function
local function wrap(dec, target)
  if type(target) ~= "function" and not command.is_command(target) then
    error(string.format("distributed_job{...} wraps a function or a flow.command, got %s",
                        type(target)), 2)
  end
  return setmetatable({ target = target, dist = dec.spec }, Distributed)
end
Decorator.__call = wrap
Decorator.__concat = wrap

-- A wrapped function stays callable, as a decorated Python function does.
function Distributed.__call(self, ...)
  if type(self.target) ~= "function" then error("a distributed command step cannot be called", 2) end
  return self.target(...)
end

function M.describe(dist)
  if not dist then return "" end
  local n = dist.num_nodes or dist.num_nodes_ref
  local p = dist.processes_per_node or dist.processes_per_node_ref
  local names = { pytorch = "PyTorch", tensorflow = "TensorFlow", mpi = "MPI" }
  return string.format("%s %s node%s x %s process%s", names[dist.framework], n, n == 1 and "" or "s",
                       p, p == 1 and "" or "es")
end

-- Rank helpers read what the launcher set: AML and torchrun (RANK...), Open MPI
-- (OMPI_COMM_WORLD_*) or PMI.  Outside a distributed run: rank 0 of 1.
local function env_int(...)
  for _, name in ipairs({ ... }) do
    local v = tonumber(os.getenv(name) or "")
    if v then return math.tointeger(v) or v end
  end
end

-- TensorFlow: the chief, or worker 0 when there is no chief, is the master;
-- parameter servers come after the workers.
local function tf_config()
  local text = os.getenv("TF_CONFIG")
  if not text or text == "" then return nil end
  local ok, tf = pcall(require("flow.core").json_decode, text)
  if ok and type(tf) == "table" and type(tf.task) == "table" and type(tf.cluster) == "table" then return tf end
end

local function tf_rank(tf)
  local t, i = tf.task.type, tonumber(tf.task.index) or 0
  if t == "chief" or t == "master" then return 0 end
  local chiefs = #(tf.cluster.chief or {}) + #(tf.cluster.master or {})
  if t == "worker" then return chiefs + i end
  return chiefs + #(tf.cluster.worker or {}) + i
end

function M.rank()
  local tf = tf_config()
  if tf then return tf_rank(tf) end
  return env_int("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK") or 0
end

function M.world_size()
  local tf = tf_config()
  if tf then
    local n = 0
    for _, members in pairs(tf.cluster) do n = n + #members end
    return n
  end
  return env_int("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE") or 1
end
function M.local_rank() return env_int("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID") or 0 end
function M.is_master() return M.rank() == 0 end

return M
