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

return M
