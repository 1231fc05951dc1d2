-- flow: the module pipeline scripts use.  require("flow") returns this table;
-- scripts also get node, pipeline, distributed_job and Framework as globals.
local pipeline = require("flow.pipeline")
local command = require("flow.command")
local distributed = require("flow.distributed")
local runner = require("flow.runner")
local shell = require("flow.shell")

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
}

return flow
