-- flow.util: small helpers shared by the stdlib (errors at the user's line,
-- "did you mean", list formatting, credentials masked in what flow records).
local core = require("flow.core")
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
-- run.json, state.log): every credential of the active configuration is
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

-- "Did you mean": the candidate nearest to `word`, if near enough, or nil.
-- The engine's rule (engine/suggest.c), so every message suggests alike.
function M.closest(word, candidates)
  return core.closest(word, candidates)
end

function M.did_you_mean(word, candidates)
  local c = M.closest(word, candidates)
  return c and string.format(" (did you mean '%s'?)", c) or ""
end

-- The name around a dotted name ("outer.inner.step" -> "outer.inner"), or nil.
function M.parent_name(name)
  return name:match("^(.*)%.[^.]*$")
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

-- A duration -> seconds, or nil: a number of seconds, or parts such as
-- "30s", "15m", "2h", "1d", "500ms", combined as in "1h30m" or "1d 12h".
-- Zero only where `allow_zero` says it means something ("older than 0s").
-- Text is read by the engine's rule (engine/duration.c), as azureml.yml's is.
function M.parse_duration(v, allow_zero)
  if type(v) == "string" then return core.parse_duration(v, allow_zero) end
  if type(v) ~= "number" or v ~= v or v == math.huge or v == -math.huge then return nil end
  if v > 0 or (allow_zero and v == 0) then return v end
  return nil
end

-- Seconds as the shortest duration text that parses back: "1h30m", "500ms".
-- Durations read from a file may be anything: NaN and infinities are "?", a
-- negative one "0s", and past 2^53 s, where no count of days is exact, days
-- as %g ("1.2e+295d": an edited file's, no run takes that long).
function M.format_duration(s)
  if s ~= s or s == math.huge or s == -math.huge then return "?" end
  if s <= 0 then return "0s" end
  if s >= 2^53 then return string.format("%gd", s / 86400) end
  if s < 1 then return string.format("%gms", s * 1000) end
  local parts, rest = {}, s
  for _, u in ipairs({ { "d", 86400 }, { "h", 3600 }, { "m", 60 } }) do
    if rest >= u[2] then
      local k = rest // u[2]
      parts[#parts + 1] = string.format("%d%s", k, u[1])
      rest = rest - k * u[2]
    end
  end
  if rest > 0 then parts[#parts + 1] = string.format("%gs", rest) end
  return table.concat(parts)
end

-- A run's or a trial's time in a table: "0.42s" under a minute, else "2m3s"
-- (NaN and infinities "?", a negative time "0.00s", as format_duration).
function M.short_duration(s)
  if s ~= s or s == math.huge or s == -math.huge then return "?" end
  return s < 60 and string.format("%.2fs", math.max(s, 0)) or M.format_duration(math.floor(s))
end

-- The id in `ids` that `want` names: itself, or the one id it is a prefix
-- of.  Else nil and the ids it is a prefix of (none, or several).
function M.find_id(ids, want)
  local matches = {}
  for _, id in ipairs(ids) do
    if id == want then return id end
    if id:sub(1, #want) == want then matches[#matches + 1] = id end
  end
  if #matches == 1 then return matches[1] end
  return nil, matches
end

-- Text as HTML text or an attribute's value: & < > " ' escaped.
local HTML_ESCAPES = { ["&"] = "&amp;", ["<"] = "&lt;", [">"] = "&gt;", ['"'] = "&quot;", ["'"] = "&#39;" }
function M.html_escape(s)
  return (tostring(s):gsub("[&<>\"']", HTML_ESCAPES))
end

-- Prints rows of cells to stdout, columns padded to their widest cell.
-- Each cell is masked first, as print's text is (a catalog path, a tag or an
-- error may hold a credential's value).
function M.print_table(cells)
  local width, shown = {}, {}
  for r, row in ipairs(cells) do
    shown[r] = {}
    for c, v in ipairs(row) do
      v = config.redact(v)
      shown[r][c] = v
      width[c] = math.max(width[c] or 0, utf8.len(v) or #v)
    end
  end
  for _, row in ipairs(shown) do
    local parts = {}
    for c, v in ipairs(row) do
      parts[c] = c == #row and v or v .. string.rep(" ", width[c] - (utf8.len(v) or #v))
    end
    io.write((table.concat(parts, "  "):gsub("%s+$", "")), "\n")
  end
end

-- The message of an error value `e` raised by a script, for a message
-- handler: a string as it is; a value with __tostring as that says; a
-- number after the position of the script's code that raised it (Lua adds
-- one to a string only); any other value (error({}), error(nil)) named by
-- its type at that position, rather than shown as "table: 0x55…" or "nil".
function M.error_message(e)
  if type(e) == "string" then return e end
  local mt = getmetatable(e)
  if type(mt) == "table" and mt.__tostring then
    -- (a __tostring that raises, or returns no string, must not take the
    -- handler down with it: the value is named as any other then)
    local ok, text = pcall(tostring, e)
    if ok and type(text) == "string" then return text end
  end
  local where = ""
  for level = 3, 30 do                  -- 1: here, 2: the handler
    local info = debug.getinfo(level, "Sl")
    if not info then break end
    if info.what ~= "C" and info.currentline > 0 and info.short_src:sub(1, 7) ~= "<flow>/" then
      where = info.short_src .. ":" .. info.currentline .. ": "
      break
    end
  end
  if type(e) == "number" then return where .. tostring(e) end     -- error(42): where, as a message has
  return where .. "error raised " .. (e == nil and "nil" or "a " .. type(e)) .. ", not a message"
end

-- Keep the user's frames of a traceback, drop the engine's own and C's (a
-- C function's frame, node or error or pcall, names no line).  A traceback
-- of a single frame says nothing the message's "file:line:" does not.
local noise = { "<flow>/", "[C]: in ", "(...tail calls...)" }

function M.user_traceback(tb)
  local msg, rest = tb:match("^(.-)\nstack traceback:\n(.*)$")
  if not msg then return tb end
  -- a frame that repeats the one before it (a stack overflow's thousands)
  -- is counted, not shown again; Lua's "...\t(skipping N levels)" stays
  local frames, last, again = {}, nil, 0
  local function counted()
    if again > 0 then frames[#frames + 1] = string.format("\t(the frame above %d more time%s)", again,
                                                          again == 1 and "" or "s") end
    again = 0
  end
  for line in rest:gmatch("[^\n]+") do
    local keep = true
    for _, n in ipairs(noise) do if line:find(n, 1, true) then keep = false break end end
    if keep and line == last then
      again = again + 1
    elseif keep then
      counted()
      frames[#frames + 1], last = line, line
    end
  end
  counted()
  if #frames < 2 then return msg end
  return msg .. "\nstack traceback:\n" .. table.concat(frames, "\n")
end

return M
