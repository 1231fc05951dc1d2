-- examples/sweep: a learning-rate sweep over a tiny linear model.  make_data
-- and split read no swept parameter, so they run once for the whole sweep;
-- train runs once per trial and reports its metrics in ${outputs.metrics}.
--   flow sweep --grid lr=0.01,0.1,0.5 --metric val_loss
--   flow sweep --grid lr=0.01,0.05,0.1,0.5,1 --random 3 --seed 7 --metric val_loss
--   flow run sweep.lua          (the same sweep, written in Lua)

-- Synthetic data: y = 3*x1 - 2*x2 + 0.5, with a little deterministic noise.
local function make_data(n)
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

return pipeline{
  node{ func = make_data, inputs = "params:rows", outputs = "rows" },
  node{ func = split, inputs = { "rows", "params:train_fraction" }, outputs = { "train_set", "test_set" } },
  node{ command = { "${params.python}", "src/train.py", "--train", "${inputs.train}", "--test", "${inputs.test}",
                    "--lr", "${params.lr}", "--epochs", "${params.epochs}",
                    "--model", "${outputs.model}", "--metrics", "${outputs.metrics}" },
        inputs = { train = "train_set", test = "test_set" }, outputs = { model = "model", metrics = "train_metrics" },
        name = "train" },
}
