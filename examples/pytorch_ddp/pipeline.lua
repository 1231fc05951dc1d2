-- examples/pytorch_ddp: a split step in Lua and a distributed PyTorch training
-- step.  A plain local run trains once (as kedro-azureml does); the same step
-- goes to Azure ML as a multi-node job in an environment that enables it.
--   flow run          flow list          flow list --env prod
local flow = require("flow")

-- Synthetic data: y = 3*x1 - 2*x2 + 0.5, with a little deterministic noise.
local function make_rows(n)
  local rows = {}
  for i = 1, n do
    local x1, x2 = (i % 17) / 17, (i % 23) / 23
    rows[i] = { x1, x2, 3 * x1 - 2 * x2 + 0.5 + ((i * 7919) % 11 - 5) / 500 }
  end
  return rows
end

local function split(rows, fraction)
  local n = math.floor(#rows * fraction)
  return { table.unpack(rows, 1, n) }, { table.unpack(rows, n + 1) }
end

-- The training step, annotated as on the original design card.  Its node
-- count comes from the environment: 1 in conf/base, 4 in conf/prod.
local train = distributed_job<framework = "pytorch", nodes = "params:num_training_nodes",
                              processes_per_node = "params:processes_per_node">(
  flow.command{ "${params.python}", "src/train.py", "--data", "${inputs.train_set}",
                "--epochs", "${params.epochs}", "--lr", "${params.learning_rate}",
                "--model-dir", "${outputs.model}" })

local function report(model_dir)
  local f = assert(io.open(model_dir .. "/metrics.json"))
  local metrics = flow.json.decode(f:read("a"))
  f:close()
  local loss = metrics.loss
  print(string.format("trained on %d process(es): loss %.4f -> %.4f over %d epochs; model in %s",
                      metrics.world_size, loss[1], loss[#loss], #loss, model_dir))
  return loss[#loss]
end

return pipeline{
  node{ func = make_rows, inputs = "params:rows", outputs = "raw_rows", name = "make_data" },
  node{ func = split, inputs = { "raw_rows", "params:train_fraction" }, outputs = { "train_set", "test_set" } },
  node{ func = train, inputs = "train_set", outputs = "model", name = "train_model", tags = { "training" } },
  node{ func = report, inputs = "model", outputs = "report" },
}
