-- flow.tasks: several runs at once on the one event loop.
--
--   local a = flow.spawn(function() return flow.run(p, { params = { lr = 0.1 } }) end)
--   local b = flow.spawn(function() return flow.run(p, { params = { lr = 0.5 } }) end)
--   local ra, rb = table.unpack(flow.wait_all{ a, b })
--
-- A task is a coroutine.  flow.wait_all starts the tasks it is given and
-- turns the loop until every one has ended: a flow.run inside a task starts
-- its run (sched.start) and suspends the task until that run is over, so
-- the runs of all the tasks share the loop, their steps interleaved.  Each
-- run keeps its own run directory, parameters, memory datasets and, for
-- files a command makes outside the catalog, a data directory of its own
-- (.flow/runs/<id>/data); they share the project's state (what is up to
-- date) and hash cache, so what one run made is up to date for the next.
local sched = require("flow.sched")
local util = require("flow.util")

local M = {}

local Task = { __name = "flow.task" }
Task.__index = Task
local current = setmetatable({}, { __mode = "k" })    -- coroutine -> its task
local group = nil          -- while flow.wait_all runs: {shared = {...}}

function M.is_task(v) return getmetatable(v) == Task end

-- flow.spawn(fn, ...) -> a task that calls fn(...) when flow.wait_all starts it.
function M.spawn(fn, ...)
  require("flow.runner").refuse_if_describing("flow.spawn")
  if type(fn) ~= "function" then util.fail(2, "flow.spawn: expected a function, got %s", type(fn)) end
  local args = table.pack(...)
  local t = setmetatable({ status = "new" }, Task)
  t.co = coroutine.create(function() return fn(table.unpack(args, 1, args.n)) end)
  current[t.co] = t
  return t
end

-- The task the running code belongs to, or nil (the main script, a step).
function M.current()
  return current[coroutine.running()]
end

-- What the runs of one flow.wait_all share: made by `make` the first time
-- `key` is asked for (the project's state, its hash cache); nil outside one.
function M.shared(key, make)
  if not group or not M.current() then return make() end
  local v = group.shared[key]
  if v == nil then
    v = make()
    group.shared[key] = v
  end
  return v
end

-- In a task: run `h` (sched.start's) to its end, suspended meanwhile.
function M.await(h)
  local back = coroutine.yield(h)
  assert(back == h, "flow.tasks: a task was resumed by something other than flow.wait_all")
end

-- flow.wait_all{task, ...} -> {first value each task returned, ...}, once
-- every task has ended.  A task that raised is reported after the others
-- ended: the first such error is raised again (with its traceback).
function M.wait_all(list)
  if type(list) ~= "table" then util.fail(2, "flow.wait_all: expected a list of tasks (flow.spawn's), got %s", type(list)) end
  for i = 1, #list do
    if not M.is_task(list[i]) then
      util.fail(2, "flow.wait_all: item %d is %s, not a task (flow.spawn's)", i, type(list[i]))
    end
  end
  if group then util.fail(2, "flow.wait_all: already waiting (call it from the script, not from a task)") end
  group = { shared = {} }
  local ok, err = pcall(function()
    local results = {}
    local function settle(t, rok, v, ...)
      if not rok then
        t.status, t.message, t.error = "failed", v, debug.traceback(t.co, tostring(v))
        -- A coroutine that dies by an error is not unwound: its to-be-closed
        -- values (a run's count of runs under way, its collector pause, its
        -- claims of catalog paths) stay open until it is closed.  (After the
        -- traceback, which reads its stack; the error stays the task's.)
        coroutine.close(t.co)
      elseif coroutine.status(t.co) == "dead" then
        t.status, t.values = "done", table.pack(v, ...)
      elseif sched.is_run(v) then
        t.status, t.run = "waiting", v
      else
        t.status, t.message = "failed", "flow.wait_all: a task may wait only in flow.run (it yielded something else)"
        t.error = t.message
      end
    end
    for _, t in ipairs(list) do
      if t.status == "new" then settle(t, coroutine.resume(t.co)) end
    end
    while true do
      local ended, waiting = {}, false
      for _, t in ipairs(list) do
        if t.status == "waiting" then
          if t.run:poll() then ended[#ended + 1] = t else waiting = true end
        end
      end
      for _, t in ipairs(ended) do
        local h = t.run
        t.run = nil
        settle(t, coroutine.resume(t.co, h))
      end
      if #ended == 0 then
        if not waiting then break end
        sched.turn()
      end
    end
    for i, t in ipairs(list) do results[i] = t.values and t.values[1] end
    return results
  end)
  if not ok then
    -- wait_all itself was stopped (Ctrl-C caught in its own code): the runs
    -- under way see the interrupt too; they end, and record it, before this
    -- raises
    for _, t in ipairs(list) do
      while t.status == "waiting" and not t.run:poll() do sched.turn() end
    end
  end
  group = nil
  if not ok then error(err, 0) end
  for _, t in ipairs(list) do
    -- a message with the task's traceback; an error object (a graph error) as it was
    if t.status == "failed" then error(type(t.message) == "string" and t.error or t.message, 0) end
  end
  return err
end

return M
