-- flow: the module pipeline scripts use.  require("flow") returns this table;
-- scripts also get node, pipeline, distributed_job and Framework as globals.
local pipeline = require("flow.pipeline")
local command = require("flow.command")
local distributed = require("flow.distributed")
local runner = require("flow.runner")
local shell = require("flow.shell")
local core = require("flow.core")

local flow = {
  VERSION = "0.1.0",
  node = pipeline.node,
  pipeline = pipeline.pipeline,
  register = pipeline.register,
  command = command.command,
  distributed_job = distributed.distributed_job,
  Framework = distributed.Framework,
  is_distributed_master_node = distributed.is_master,
  rank = distributed.rank,
  world_size = distributed.world_size,
  local_rank = distributed.local_rank,
  run = runner.run,
  sh = shell.sh,
  -- JSON as the engine reads and writes it (tables with keys 1..n are arrays)
  json = { encode = core.json_encode, decode = core.json_decode },
}

return flow
