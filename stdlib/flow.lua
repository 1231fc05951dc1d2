-- flow: the module pipeline scripts use.  require("flow") returns this table;
-- scripts also get node, pipeline, distributed_job and Framework as globals.
local core = require("flow.core")

local flow = {
  VERSION = "0.1.0",
  -- JSON as the engine reads and writes it (tables with keys 1..n are arrays)
  json = { encode = core.json_encode, decode = core.json_decode },
}

-- The rest comes from the modules that define it, each loaded on the first
-- use of one of its names: `flow --version` reads VERSION and loads none.
local from = {
  node = { "flow.pipeline", "node" },
  pipeline = { "flow.pipeline", "pipeline" },
  register = { "flow.pipeline", "register" },
  command = { "flow.command", "command" },
  distributed_job = { "flow.distributed", "distributed_job" },
  Framework = { "flow.distributed", "Framework" },
  is_distributed_master_node = { "flow.distributed", "is_master" },
  rank = { "flow.distributed", "rank" },
  world_size = { "flow.distributed", "world_size" },
  local_rank = { "flow.distributed", "local_rank" },
  run = { "flow.runner", "run" },
  sh = { "flow.shell", "sh" },
  log_metric = { "flow.metrics", "log" },
  sweep = { "flow.sweep", "sweep" },
  uniform = { "flow.sweep", "uniform" },
  loguniform = { "flow.sweep", "loguniform" },
  randint = { "flow.sweep", "randint" },
  choice = { "flow.sweep", "choice" },
  spawn = { "flow.tasks", "spawn" },
  wait_all = { "flow.tasks", "wait_all" },
}

local function field(t, k)
  local f = from[k]
  if not f then return nil end
  local v = require(f[1])[f[2]]
  rawset(t, k, v)
  return v
end

return setmetatable(flow, {
  __index = field,
  __pairs = function(t)              -- every name, loaded or not
    for k in pairs(from) do field(t, k) end
    return next, t, nil
  end,
})
