-- flow.command: command steps.  A list is an argv, run without a shell;
-- a string is a shell command line, run by /bin/sh -c.
local util = require("flow.util")

local M = {}
local Command = {}
Command.__index = Command
Command.__name = "flow.command"
M.Command = Command

function M.is_command(v)
  return getmetatable(v) == Command
end

-- flow.command{ "python3", "train.py", "--x", "${inputs.x}", env = {K = "v"} }
-- flow.command "sort ${inputs.raw} > ${outputs.sorted}"
-- command(spec [, level]) is C (lua/l_pipeline.c), as node{} is, which
-- builds the commands of its command = field with it.
M.command = require("flow.pipeline_c").bind_command(Command)

-- The text a person would type: for logs and error messages.
function M.display(argv)
  local parts = {}
  for i, a in ipairs(argv) do
    parts[i] = a:find("^[%w%._/:=,@%%+-]+$") and a or ("'" .. a:gsub("'", "'\\''") .. "'")
  end
  return table.concat(parts, " ")
end

-- Quote a value for /bin/sh unless it is plainly safe.
function M.shell_quote(s)
  if s:find("^[%w%._/:=,@%%+-]+$") then return s end
  return "'" .. s:gsub("'", "'\\''") .. "'"
end

return M
