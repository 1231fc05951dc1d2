-- flow.failure: a step's failure as the runner reports it — a message and
-- what kind of end it was (timed out, quiet), without a Lua traceback.
local core = require("flow.core")
local util = require("flow.util")

local M = {}

local StepFailure = {}
StepFailure.__index = StepFailure
StepFailure.__tostring = function(f) return f.message end
function M.new(t) return setmetatable(t, StepFailure) end
M.StepFailure = StepFailure

function M.is(err) return getmetatable(err) == StepFailure end

-- The first line of a failure (or of any error), for records and summaries.
function M.first_line(err)
  local s = getmetatable(err) == StepFailure and err.message or tostring(err)
  return s:match("^[^\n]*")
end

-- Say why step n failed, unless the run was interrupted (the summary says so).
function M.report(n, err)
  if core.interrupted() > 0 then return end      -- interrupted, not failed: the summary says so
  if getmetatable(err) == StepFailure then
    if not err.quiet then core.ui_error(err.message) end
  else
    core.ui_error(string.format("step '%s' failed: %s", n.name, util.user_traceback(tostring(err))))
  end
end

return M
