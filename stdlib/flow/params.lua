-- flow.params: a parameter by its dotted key, found as `flow config KEY`
-- finds it: by the configuration's own walker (engine/config.c), so mapping
-- keys (the longest that matches: a key with dots in it is found too) and
-- list indexes counted from 0 ("layers.0.size") mean the same everywhere.
local M = {}

-- The value at dotted `key` in a run's parameters (settings from
-- flow.settings.load), or nil when it is not set.
function M.get(settings, key)
  if not settings.cfg then return nil end        -- no configuration: no parameters
  return settings.cfg:get("parameters", key)
end

-- What a `params:key` or `parameters` input gives: key as
-- dag.is_param_input returns it (true: the whole tree).
function M.of_input(settings, key)
  if key == true then return settings.params end
  return M.get(settings, key)
end

-- A parameter as a command line has it: a table as JSON, a number with every
-- digit (tostring's %.14g would cut 0.3333333333333333), else its text.
function M.text(v)
  if type(v) == "table" then return (require("flow.core").json_encode(v)) end
  if type(v) == "number" then return require("flow.core").number_text(v) end
  return tostring(v)
end

-- ${params.key} in command step n (a namespace renames the key): its text,
-- or nil and why not.
function M.command_text(settings, n, key)
  key = require("flow.pipeline").command_param(n, key)
  local ok, v = pcall(M.get, settings, key)
  if not ok or v == nil then return nil, string.format("no parameter '%s'", key) end
  return M.text(v)
end

return M
