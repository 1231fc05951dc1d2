-- The sweep of pipeline.lua's README line, as a Lua driver: `flow run sweep.lua`.
local p = dofile("pipeline.lua")
local trials = flow.sweep{ pipeline = p, grid = { lr = { 0.01, 0.1, 0.5 } }, metric = "val_loss", goal = "min" }
print(string.format("best: lr=%g (val_loss %.4f)", trials.best.params.lr, trials.best.metric))
