-- flow.shell: flow.sh, running a process from inside a Lua step.  The wait
-- yields to the event loop, so other steps keep running meanwhile.
local proc = require("flow.proc")
local command = require("flow.command")
local util = require("flow.util")

local M = {}

-- flow.sh("ls -l")            -- through /bin/sh
-- flow.sh{"git", "rev-parse", "HEAD"}  -- an argv, no shell
-- Returns the command's stdout; raises with its stderr on failure.
function M.sh(cmd, level)
  level = (level or 1) + 1
  local argv
  if type(cmd) == "string" then argv = { "/bin/sh", "-c", cmd }
  elseif type(cmd) == "table" and #cmd > 0 then
    argv = {}
    for i, a in ipairs(cmd) do argv[i] = tostring(a) end
  else
    util.fail(level, "flow.sh: expected a command string or an argument list")
  end
  local r, err = proc.spawn { argv = argv, capture = true }
  if not r then util.fail(level, "flow.sh: %s", err) end
  if r.timed_out then util.fail(level, "flow.sh: '%s' timed out", type(cmd) == "string" and cmd or command.display(argv)) end
  if r.code ~= 0 then
    local shown = type(cmd) == "string" and cmd or command.display(argv)
    util.fail(level, "flow.sh: '%s' failed (exit code %d)%s", shown, r.code,
              r.stderr:find("%S") and (":\n" .. r.stderr:gsub("%s+$", "")) or "")
  end
  return r.stdout
end

return M
