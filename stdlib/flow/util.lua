-- flow.util: small helpers shared by the stdlib (errors at the user's line,
-- "did you mean", list formatting, credentials masked in what flow records).
local config = require("flow.config")

local M = {}

-- Raise `msg` at the caller's caller `level` frames up, as error() does,
-- so messages point at the user's script line.
function M.fail(level, fmt, ...)
  error(string.format(fmt, ...), level + 1)
end

-- A setup error: the script, its graph or its configuration is wrong and
-- nothing ran.  Prints as its message; the CLI exits 2 on it.
local SetupError = { __tostring = function(e) return e.setup_error end }
function M.setup_error(msg)
  error(setmetatable({ setup_error = msg }, SetupError), 0)
end
function M.is_setup_error(e)
  return getmetatable(e) == SetupError
end

-- A failure of the file system or the disk, raised by flow's C file
-- primitives ({fs_error = message}): the environment's fault, reported as its
-- message (which names the path and what to do), never with a traceback.
function M.is_fs_error(e)
  return type(e) == "table" and type(rawget(e, "fs_error")) == "string"
end

-- ---- what flow writes into its own files: credentials masked ----

-- The JSON text of t (plain data) for one of flow's own files (journal,
-- run.json, state.json): every credential of the active configuration is
-- masked in its strings and keys, hashes and numbers aside.  Returns what
-- core.json_encode returns.
M.record_json = config.record_json

-- Whether value v holds a credential in one of its strings or keys (a value
-- that does is not written to the cache).
function M.holds_secret(v)
  if not config.has_secrets() then return false end
  local seen = {}
  local function walk(x)
    if type(x) == "string" then return config.redact(x) ~= x end
    if type(x) ~= "table" or seen[x] then return false end
    seen[x] = true
    for k, y in pairs(x) do
      if walk(k) or walk(y) then return true end
    end
    return false
  end
  return walk(v)
end

-- Levenshtein distance, for "did you mean" hints.
local function distance(a, b)
  local prev, cur = {}, {}
  for j = 0, #b do prev[j] = j end
  for i = 1, #a do
    cur[0] = i
    for j = 1, #b do
      local cost = a:byte(i) == b:byte(j) and 0 or 1
      cur[j] = math.min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost)
    end
    prev, cur = cur, prev
  end
  return prev[#b]
end

function M.closest(word, candidates)
  local best, best_d
  for _, c in ipairs(candidates) do
    local d = distance(word, c)
    if d <= math.max(2, #word // 3) and (not best_d or d < best_d) then best, best_d = c, d end
  end
  return best
end

function M.did_you_mean(word, candidates)
  local c = M.closest(word, candidates)
  return c and string.format(" (did you mean '%s'?)", c) or ""
end

function M.sorted_keys(t)
  local keys = {}
  for k in pairs(t) do keys[#keys + 1] = k end
  table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
  return keys
end

-- Check that table `spec` has only `allowed` keys; `what` names it in errors.
-- (Hot: called for every node{} — the sorted names are built only for a message.)
function M.check_fields(spec, allowed, what, level)
  for k in pairs(spec) do
    if not allowed[k] then
      local names = M.sorted_keys(allowed)
      if type(k) ~= "string" then
        M.fail(level + 1, "%s: unexpected positional value %s (fields are %s)", what, tostring(k),
               table.concat(names, ", "))
      end
      M.fail(level + 1, "%s: unknown field '%s'%s", what, k, M.did_you_mean(k, names))
    end
  end
end

function M.is_list(t)
  if type(t) ~= "table" then return false end
  local n = 0
  for _ in pairs(t) do n = n + 1 end
  return n == #t
end

-- "30s", "15m", "2h", "1d" or a number of seconds -> seconds, or nil.
function M.parse_duration(v)
  if type(v) == "number" and v > 0 then return v end
  if type(v) ~= "string" then return nil end
  local n, unit = v:match("^%s*(%d+%.?%d*)%s*([smhd]?)%s*$")
  n = tonumber(n)
  if not n or n <= 0 then return nil end
  return n * ({ [""] = 1, s = 1, m = 60, h = 3600, d = 86400 })[unit]
end

function M.format_duration(s)
  if s >= 3600 and s % 3600 == 0 then return string.format("%dh", s // 3600) end
  if s >= 60 and s % 60 == 0 then return string.format("%dm", s // 60) end
  return string.format("%gs", s)
end

-- Keep the user's frames of a traceback, drop the engine's own.  A traceback
-- of a single frame says nothing the message's "file:line:" does not.
local noise = { "<flow>/", "[C]: in ?", "in function 'xpcall'", "in function 'pcall'",
                "in function 'error'", "(...tail calls...)", "in function 'assert'" }
function M.user_traceback(tb)
  local msg, rest = tb:match("^(.-)\nstack traceback:\n(.*)$")
  if not msg then return tb end
  local frames = {}
  for line in rest:gmatch("[^\n]+") do
    local keep = true
    for _, n in ipairs(noise) do if line:find(n, 1, true) then keep = false break end end
    if keep then frames[#frames + 1] = line end
  end
  if #frames < 2 then return msg end
  return msg .. "\nstack traceback:\n" .. table.concat(frames, "\n")
end

return M
