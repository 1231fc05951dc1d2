-- bench/phases.lua — where the time of a `flow run` goes, phase by phase.
--
--   python3 bench/gen.py 100000 /tmp/lua --lua
--   PIPELINE=/tmp/lua/flow-lua/pipeline.lua ./flow run -q -j 2 bench/phases.lua
--
-- Wraps the stdlib's entry points (the module tables, the run object's
-- methods and the C classes' method tables are shared, so the runner calls
-- the wrappers), then loads and returns the pipeline named by $PIPELINE (an
-- absolute path).  Prints CPU seconds (os.clock: the whole process, pool
-- threads included) per phase and the size of the Lua heap after it on
-- stderr, with the process's resident memory and its peak so far.  Nested
-- phases are included in their parent's time.  What runs once per step
-- (the "step:" lines) is summed over the run and printed when
-- sched.run returns; a step that yields (a command, a commit on the pool)
-- counts what ran meanwhile too.  A profiling aid: not used by run.sh.
local clock = os.clock
-- The process's resident memory now and its peak so far (Linux), in MB.
local function rss()
  local f = io.open("/proc/self/status")
  if not f then return 0, 0 end
  local text = f:read("a")
  f:close()
  local now, peak = text:match("VmRSS:%s*(%d+)"), text:match("VmHWM:%s*(%d+)")
  return (tonumber(now) or 0) / 1024, (tonumber(peak) or 0) / 1024
end
local function line(label, t)
  local now, peak = rss()
  io.stderr:write(string.format("phase  %-50s %8.3f s   Lua heap %7.1f MB   RSS %6.1f MB (peak %6.1f)\n", label, t,
                                collectgarbage("count") / 1024, now, peak))
end

-- t[name] timed on each call, a line each time.
local function wrap(t, name, label)
  local f = t and t[name]
  assert(type(f) == "function", "bench/phases.lua: no " .. label .. " to wrap (the stdlib changed?)")
  t[name] = function(...)
    local t0 = clock()
    local r = table.pack(f(...))
    line(label, clock() - t0)
    return table.unpack(r, 1, r.n)
  end
end

-- t[name] timed on each call and summed; printed by flush_sums().
local sums, sum_order = {}, {}
local function wrap_sum(t, name, label)
  local f = t and t[name]
  assert(type(f) == "function", "bench/phases.lua: no " .. label .. " to wrap (the stdlib changed?)")
  sums[label] = { t = 0, n = 0 }
  sum_order[#sum_order + 1] = label
  t[name] = function(...)
    local t0 = clock()
    local r = table.pack(f(...))
    local s = sums[label]
    s.t, s.n = s.t + (clock() - t0), s.n + 1
    return table.unpack(r, 1, r.n)
  end
end

local function flush_sums()
  for _, label in ipairs(sum_order) do
    local s = sums[label]
    line(string.format("  step: %s x%d", label, s.n), s.t)
    s.t, s.n = 0, 0
  end
end

-- A local of runner.lua, found through the upvalues of its functions.
local function find_upvalue(f, want, depth, seen)
  seen = seen or {}
  if seen[f] then return nil end
  seen[f] = true
  for i = 1, 255 do
    local name, v = debug.getupvalue(f, i)
    if not name then break end
    if name == want then return v end
    if type(v) == "function" and depth > 0 then
      local r = find_upvalue(v, want, depth - 1, seen)
      if r then return r end
    end
  end
end

local runner, plan, dag, sched = require("flow.runner"), require("flow.plan"), require("flow.dag"), require("flow.sched")
local state, credentials = require("flow.state"), require("flow.credentials")
-- Run (the run object's methods, mixed in from flow.values, flow.execute and
-- flow.incremental) is local to runner.lua: M.run -> new_run -> Run.
local Run = assert(find_upvalue(runner.run, "Run", 2), "bench/phases.lua: runner.lua's Run not found")
local registry = debug.getregistry()
local RunRecord = assert(registry["flow.RunRecord"], "bench/phases.lua: no flow.RunRecord class").__index
local Journal = assert(registry["flow.Journal"], "bench/phases.lua: no flow.Journal class").__index

wrap(plan, "prepare", "plan.prepare (configuration, catalog, checks)")
wrap(plan, "build_graph", "  plan.build_graph")
wrap(dag, "build", "    flow.dag.build (C)")
wrap(credentials, "check", "credentials.check")
wrap(state, "load", "state.load (state.log, journals folded in)")
wrap(Run, "engine_check", "Run:engine_check (the C up-to-date check)")
local sched_run = sched.run
sched.run = function(...)
  local t0 = clock()
  local r = table.pack(sched_run(...))
  flush_sums()
  line("sched.run (all steps)", clock() - t0)
  return table.unpack(r, 1, r.n)
end
wrap_sum(Run, "up_to_date", "Run:up_to_date (Lua check)")
wrap_sum(Run, "take_fingerprint", "Run:take_fingerprint")
wrap_sum(Run, "attempt_body", "Run:attempt_body (a step not plain)")
wrap_sum(Run, "plain_tail", "Run:plain_tail (a plain step, rare)")
wrap(Journal, "close", "journal:close (last sync)")
wrap(state, "save", "state.save (state.log)")
wrap(Run, "result", "Run:result (the result's tables)")
wrap(RunRecord, "write_summary", "record:write_summary (run.json, C)")
wrap(runner, "run", "runner.run (all)")

local path = assert(os.getenv("PIPELINE"), "set PIPELINE to the absolute path of a pipeline.lua")
local t = clock()
local p = dofile(path)
line("the script (node{} calls, pipeline{})", clock() - t)
return p
