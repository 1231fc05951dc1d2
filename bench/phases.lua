-- bench/phases.lua — where the time of a `flow run` goes, phase by phase.
--
--   python3 bench/gen.py 100000 /tmp/lua --lua
--   PIPELINE=/tmp/lua/flow-lua/pipeline.lua ./flow run -q -j 2 bench/phases.lua
--
-- Wraps the stdlib's entry points (the module tables are shared, so the
-- runner calls the wrappers), then loads and returns the pipeline named by
-- $PIPELINE (an absolute path).  Prints CPU seconds per phase and the size of
-- the Lua heap after it on stderr.  Nested phases are included in their
-- parent's time.  A profiling aid: not used by run.sh.
local clock = os.clock
local function wrap(mod, name, label)
  local f = mod and mod[name]
  if type(f) ~= "function" then return end
  mod[name] = function(...)
    local t = clock()
    local r = table.pack(f(...))
    io.stderr:write(string.format("phase  %-34s %7.3f s   Lua heap %7.1f MB\n", label, clock() - t,
                                  collectgarbage("count") / 1024))
    return table.unpack(r, 1, r.n)
  end
end

local runner, dag, sched, core = require("flow.runner"), require("flow.dag"), require("flow.sched"), require("flow.core")
-- Run (the runner's per-run object) is local to runner.lua: find it through M.run's upvalues.
local Run
for i = 1, 255 do
  local name, v = debug.getupvalue(runner.run, i)
  if not name then break end
  if name == "Run" then Run = v end
end
wrap(runner, "prepare", "runner.prepare (graph, checks)")
wrap(runner, "build_graph", "  runner.build_graph")
wrap(dag, "build", "    flow.dag.build (C)")
wrap(sched, "run", "flow.sched.run (all steps)")
wrap(Run, "write_summary", "Run:write_summary (run.json)")
wrap(runner, "run", "runner.run (all)")

local path = assert(os.getenv("PIPELINE"), "set PIPELINE to the absolute path of a pipeline.lua")
local t = clock()
local p = dofile(path)
io.stderr:write(string.format("phase  %-34s %7.3f s   Lua heap %7.1f MB\n", "the script (node{} calls, pipeline{})",
                              clock() - t, collectgarbage("count") / 1024))
return p
