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

-- Every string of a command that ${…} references are expanded in: its argv
-- words (or its shell line), then its env values by variable name.  Made
-- afresh each time: a command's env table is the caller's, who may change it
-- between runs.  (Without env: its argv as it is, for reading only.)
function M.template_strings(cmd)
  if cmd.argv and cmd.env == nil then return cmd.argv end
  local list = {}
  for i, a in ipairs(cmd.argv or { cmd.shell }) do list[i] = a end
  if cmd.env then
    local names = {}
    for name, v in pairs(cmd.env) do if type(v) == "string" then names[#names + 1] = name end end
    table.sort(names)
    for _, name in ipairs(names) do list[#list + 1] = cmd.env[name] end
  end
  return list
end

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
