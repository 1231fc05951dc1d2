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

local fields = { env = true, cwd = true }

-- node{} builds commands on a C fast path too (push_argv_command and
-- push_shell_command in lua/l_pipeline.c): a rule changed here changes there.
-- flow.command{ "python3", "train.py", "--x", "${inputs.x}", env = {K = "v"} }
-- flow.command "sort ${inputs.raw} > ${outputs.sorted}"
function M.command(spec, level)
  level = (level or 1) + 1
  if type(spec) == "string" then
    if not spec:find("%S") then util.fail(level, "flow.command: empty command line") end
    return setmetatable({ shell = spec }, Command)
  end
  if type(spec) ~= "table" then
    util.fail(level, "flow.command: expected a list of arguments or a command string, got %s", type(spec))
  end
  local argv = {}
  for i, a in ipairs(spec) do
    if type(a) ~= "string" and type(a) ~= "number" then
      util.fail(level, "flow.command: argument %d is a %s; arguments are strings or numbers", i, type(a))
    end
    argv[i] = tostring(a)
  end
  for k in pairs(spec) do
    if type(k) ~= "number" then
      if not fields[k] then
        util.fail(level, "flow.command: unknown field '%s'%s", tostring(k),
                  util.did_you_mean(tostring(k), { "env", "cwd" }))
      end
    elseif math.type(k) ~= "integer" or k < 1 or k > #spec then
      util.fail(level, "flow.command: the argument list has a hole at [%s]", tostring(k))
    end
  end
  if #argv == 0 then util.fail(level, "flow.command: empty argument list") end
  if spec.env ~= nil and type(spec.env) ~= "table" then
    util.fail(level, "flow.command: env must be a table of NAME = value")
  end
  return setmetatable({ argv = argv, env = spec.env, cwd = spec.cwd }, Command)
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
