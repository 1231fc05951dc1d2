-- flow.params: reading "a.b.c" out of the resolved parameter tree.
local M = {}

-- Value at dotted `key`, or nil when any part is missing.
function M.get(tree, key)
  local v = tree
  for part in key:gmatch("[^.]+") do
    if type(v) ~= "table" then return nil end
    v = v[part]
  end
  return v
end

-- Every dotted key in the tree (for "did you mean").
function M.keys(tree, prefix, out)
  out = out or {}
  for k, v in pairs(tree) do
    local key = prefix and (prefix .. "." .. tostring(k)) or tostring(k)
    out[#out + 1] = key
    if type(v) == "table" then M.keys(v, key, out) end
  end
  return out
end

return M
