-- flow.failure: a step's failure as the runner reports it — a message and
-- what kind of end it was (timed out, quiet), without a Lua traceback.
local M = {}

local StepFailure = {}
StepFailure.__index = StepFailure
StepFailure.__tostring = function(f) return f.message end
function M.new(t) return setmetatable(t, StepFailure) end

-- Whether err is such a failure (anything else a step raises is a Lua error).
function M.is(err) return getmetatable(err) == StepFailure end

-- The first line of a failure (or of any error), for records and summaries.
function M.first_line(err)
  local s = M.is(err) and err.message or tostring(err)
  return s:match("^[^\n]*")
end

return M
