-- flow.catalog: the datasets declared in conf/<env>/catalog.yml.
--
-- A dataset the catalog does not name is `memory`: a Lua value handed from
-- step to step (written to .flow/data/ when a command needs a file).  The
-- catalog declares persisted ones:
--
--   raw:     {type: text, path: data/raw.txt}
--   model:   {type: file, path: data/model.pt, versioned: true}
--   "{name}_metrics": {type: json, path: data/metrics/{name}.json}
--
-- Types: json, text, lua (a serialised Lua value), file and folder (paths,
-- for commands), memory.  A versioned dataset is saved under
-- path/<UTC timestamp>/<basename> (Kedro's layout) and loaded from the newest
-- version unless --load-versions pins one.  Patterns match dataset names; the
-- most specific wins (most literal characters, then fewest placeholders, then
-- by name, as Kedro ranks them).
--
-- A path may be on the workspace's datastore (Azure ML environments only):
--   features: {type: folder, path: azureml://datastores/workspaceblobstore/paths/features}
-- A job reads and writes it where it is; a step here works on a copy in
-- .flow/datastore/<datastore>/<path> (e.path), brought here before it reads
-- it and sent up after it writes it (flow.transfer); e.uri is the datastore
-- path, e.datastore and e.blob its parts.
--
-- `credentials: db_creds` names a block of credentials.yml (Kedro's pattern);
-- it must exist.  The entry keeps the name; a command step that reads or
-- writes the dataset gets the block's values in its environment (see
-- flow.credentials), and Catalog:credentials(e) hands them to whatever loads
-- or saves the dataset itself (no local type needs them; remote ones will).
local core = require("flow.core")
local dag = require("flow.dag")
local util = require("flow.util")

local M = {}

M.TYPES = { "memory", "json", "text", "lua", "file", "folder" }
local TYPE_SET = {}
for _, t in ipairs(M.TYPES) do TYPE_SET[t] = true end
local FIELDS = { type = true, path = true, versioned = true, metadata = true, credentials = true }
local FIELD_NAMES = { "type", "path", "versioned", "metadata", "credentials" }

local Catalog = {}
Catalog.__index = Catalog

M.DATASTORE_COPIES = ".flow/datastore"
local DATASTORE_PATH = "^azureml://datastores/([%w_-]+)/paths/(.+)$"

-- Whether a path as written is on a datastore.
local function on_datastore(path)
  return type(path) == "string" and path:sub(1, 10) == "azureml://"
end

-- "azureml://datastores/<ds>/paths/<p>" and its parts.
function M.datastore_uri(datastore, path)
  return "azureml://datastores/" .. datastore .. "/paths/" .. path
end

function M.parse_datastore_uri(uri)
  return uri:match(DATASTORE_PATH)
end

-- An entry whose path is on a datastore gets its parts and the path of its
-- copy here (after a pattern's placeholders are filled in).
local function place_on_datastore(e)
  if not on_datastore(e.path) then return e end
  e.uri = e.path
  e.datastore, e.blob = M.parse_datastore_uri(e.path)
  e.path = M.DATASTORE_COPIES .. "/" .. e.datastore .. "/" .. e.blob
  return e
end

-- How Azure ML binds dataset e: a folder for folders (and a command's
-- untyped output, a directory there), else a file.
function M.uri_type(e)
  if e.type == "memory" or e.type == "folder" then return "uri_folder" end
  return "uri_file"
end

-- A command step's output `io` (dataset entry e) as a job on Azure ML writes
-- it: its type and, for a file, the file's name.  ${outputs.metrics} is a
-- JSON file whatever its dataset is (flow.metrics reads it back), so a
-- memory dataset there is a file, metrics.json, not a folder.
function Catalog:job_output(e, io)
  if io.arg == "metrics" and e.type == "memory" then return "uri_file", "metrics.json" end
  local kind = M.uri_type(e)
  return kind, kind == "uri_file" and (self:save_path(e):match("([^/]+)$") or io.arg) or nil
end

-- Kedro's version stamp: 2026-11-22T03.15.00.123Z (UTC; sorts as time; no ':' in paths).
function M.version_stamp(t)
  local s = math.floor(t)
  return os.date("!%Y-%m-%dT%H.%M.%S", s) .. string.format(".%03dZ", math.floor((t - s) * 1000))
end

-- The stamp a run saves its versioned datasets under, from its start time t:
-- never one an earlier run of this process had (runs at once, flow.spawn,
-- may start in the same millisecond), so no two runs write one version.
local last_save_ms = -1
function M.save_stamp(t)
  local ms = math.floor(t * 1000)
  if ms <= last_save_ms then ms = last_save_ms + 1 end
  last_save_ms = ms
  return os.date("!%Y-%m-%dT%H.%M.%S", ms // 1000) .. string.format(".%03dZ", ms % 1000)
end

local function is_version(s)
  return s:match("^%d%d%d%d%-%d%d%-%d%dT%d%d%.%d%d%.%d%d%.%d%d%dZ$") ~= nil
end
M.is_version = is_version

local function basename(path)
  return (path:gsub("/+$", ""):match("([^/]*)$"))
end

-- "{name}_model" -> Lua pattern "^(.-)_model$", placeholder names, literal length.
local function compile_pattern(key, where)
  local parts, names, literal, seen = { "^" }, {}, 0, {}
  local pos = 1
  while true do
    local s, e, name = key:find("{([^{}]*)}", pos)
    local lit = key:sub(pos, (s or #key + 1) - 1)
    if lit:find("[{}]") then
      util.setup_error(string.format("%s: catalog pattern '%s' has an unmatched brace", where, key))
    end
    parts[#parts + 1] = lit:gsub("%W", "%%%0")
    literal = literal + #lit
    if not s then break end
    if not name:match("^[%a_][%w_]*$") then
      util.setup_error(string.format("%s: catalog pattern '%s': placeholder {%s} must be a name like {name}", where, key, name))
    end
    if seen[name] then
      util.setup_error(string.format("%s: catalog pattern '%s' uses {%s} twice", where, key, name))
    end
    seen[name] = true
    names[#names + 1] = name
    parts[#parts + 1] = "(.-)"
    pos = e + 1
  end
  parts[#parts + 1] = "$"
  return { key = key, lua = table.concat(parts), names = names, seen = seen, literal = literal }
end

-- A catalog entry as written, checked; `where` is its file:line.
local function check_entry(name, spec, where, pattern)
  local function bad(fmt, ...)
    util.setup_error(string.format("%s: catalog entry '%s': " .. fmt, where, name, ...))
  end
  if type(spec) ~= "table" or (next(spec) ~= nil and util.is_list(spec)) then
    bad("expected a mapping like {type: json, path: data/%s.json}", name)
  end
  for k in pairs(spec) do
    if not FIELDS[k] then bad("unknown field '%s'%s", tostring(k), util.did_you_mean(tostring(k), FIELD_NAMES)) end
  end
  local t = spec.type
  if t == nil then
    if spec.path ~= nil then bad("has a path but no type (one of %s)", table.concat(M.TYPES, ", ")) end
    t = "memory"
  end
  if type(t) ~= "string" then                    -- (type: [1] is a list, not "table: 0x55…")
    bad("type must be one of %s, got a %s", table.concat(M.TYPES, ", "),
        type(t) ~= "table" and type(t) or util.is_list(t) and "list" or "mapping")
  elseif not TYPE_SET[t] then
    bad("unknown type '%s'%s (types: %s)", t, util.did_you_mean(t, M.TYPES), table.concat(M.TYPES, ", "))
  end
  if t == "memory" then
    if spec.path ~= nil then bad("a memory dataset has no path (give a type such as json to persist it)") end
    if spec.versioned then bad("a memory dataset cannot be versioned") end
  else
    if type(spec.path) ~= "string" or spec.path == "" then bad("type %s needs path: (where it is stored)", t) end
  end
  if spec.versioned ~= nil and type(spec.versioned) ~= "boolean" then bad("versioned must be true or false") end
  if on_datastore(spec.path) then
    local ds, rest = M.parse_datastore_uri(spec.path)
    if not ds or rest:find("//", 1, true) or ("/" .. rest .. "/"):find("/%.%.?/") then
      bad("path %s must be azureml://datastores/<datastore>/paths/<path> (no '.', '..' or empty segment)",
          spec.path)
    end
    if spec.versioned then bad("a dataset on a datastore cannot be versioned (versions are folders on this machine)") end
    if spec.credentials ~= nil then
      bad("a dataset on a datastore is reached with the datastore's own credentials (azureml.yml); drop credentials")
    end
  end
  if spec.credentials ~= nil then
    if type(spec.credentials) ~= "string" or spec.credentials == "" then
      bad("credentials names a block of credentials.yml, like credentials: db_creds")
    end
    if t == "memory" then bad("a memory dataset has no credentials") end
  end
  if pattern and spec.path then
    for ph in spec.path:gmatch("{([^{}]*)}") do
      if not pattern.seen[ph] then bad("path uses {%s}, which the name pattern does not have", ph) end
    end
  end
  return { type = t, path = spec.path, versioned = spec.versioned or false, credentials = spec.credentials }
end

-- A catalog entry's credentials block must exist in this environment.
local function check_credentials(settings, name, e, where)
  local cfg = settings.cfg
  if not e.credentials or cfg:get("credentials", e.credentials) ~= nil then return end
  local near = cfg:closest("credentials", e.credentials)
  util.setup_error(string.format("%s: catalog entry '%s': credentials '%s' is not defined in environment '%s' "
    .. "(conf/*/credentials.yml)%s", cfg:origin("catalog", name .. ".credentials") or where, name,
    e.credentials, settings.env, near and (" (did you mean '" .. near .. "'?)") or ""))
end

-- new(settings, {load_versions = {name = stamp}, save_version = stamp})
function M.new(settings, opts)
  opts = opts or {}
  local self = setmetatable({ exact = {}, patterns = {}, memo = {}, settings = settings,
                              load_versions = opts.load_versions or {},
                              save_version = opts.save_version or M.version_stamp(core.time()) }, Catalog)
  local cfg = settings.cfg
  local spec = cfg and cfg:get("catalog") or {}
  for name, entry in pairs(spec) do
    local where = cfg:origin("catalog", name) or "catalog.yml"
    if type(name) ~= "string" then
      util.setup_error(string.format("%s: catalog keys are dataset names, got %s", where, tostring(name)))
    end
    if dag.is_param_input(name) then
      util.setup_error(string.format("%s: catalog entry '%s': 'parameters' and 'params:…' are parameters, "
        .. "not datasets (set them in parameters.yml)", where, name))
    end
    if name:find("[{}]") then
      local pat = compile_pattern(name, where)
      pat.entry = check_entry(name, entry, where, pat)
      self.on_datastore = self.on_datastore or on_datastore(pat.entry.path)
      check_credentials(settings, name, pat.entry, where)
      pat.origin = where
      self.patterns[#self.patterns + 1] = pat
    else
      local e = place_on_datastore(check_entry(name, entry, where))
      self.on_datastore = self.on_datastore or e.uri ~= nil
      check_credentials(settings, name, e, where)
      e.name, e.origin, e.declared = name, where, true
      self.exact[name] = e
    end
  end
  table.sort(self.patterns, function(a, b)
    if a.literal ~= b.literal then return a.literal > b.literal end
    if #a.names ~= #b.names then return #a.names < #b.names end
    return a.key < b.key
  end)
  return self
end

local function from_pattern(name, pat, captures)
  local values = {}
  for i, ph in ipairs(pat.names) do values[ph] = captures[i] end
  local e = { name = name, type = pat.entry.type, versioned = pat.entry.versioned, origin = pat.origin,
              pattern = pat.key, declared = true, credentials = pat.entry.credentials }
  if pat.entry.path then e.path = pat.entry.path:gsub("{([%a_][%w_]*)}", values) end
  return place_on_datastore(e)
end

-- The entry for dataset `name`: declared, matched by a pattern, or memory.
-- `memo` keeps what took a search of the patterns; without patterns a memory
-- entry is made afresh on each call (a table kept for each of 100,000
-- datasets was 17 MB, 15 % of what such a run's Lua heap held at its end).
function Catalog:entry(name)
  local e = self.exact[name] or self.memo[name]
  if e then return e end
  local patterns = self.patterns
  for _, pat in ipairs(patterns) do
    local captures = { name:match(pat.lua) }
    if captures[1] ~= nil then e = from_pattern(name, pat, captures) break end
  end
  e = e or { name = name, type = "memory", versioned = false, declared = false }
  if patterns[1] then self.memo[name] = e end
  return e
end

function M.persisted(e) return e.type ~= "memory" end

-- The values of the credentials block entry e names, {dotted key = text}
-- (each registered as a secret), or nil when it names none.
function Catalog:credentials(e)
  if e.credentials then return require("flow.credentials").block(self.settings, e.credentials) end
end

-- The entries declared by name (not patterns), sorted by name.
function Catalog:declared()
  local out = {}
  for _, name in ipairs(util.sorted_keys(self.exact)) do out[#out + 1] = self.exact[name] end
  return out
end

-- Where this run saves dataset e.
function Catalog:save_path(e)
  if e.versioned then return e.path .. "/" .. self.save_version .. "/" .. basename(e.path) end
  return e.path
end

-- The versions of e on disk, oldest first (those that hold the dataset).
function Catalog:versions(e)
  local names = core.list_dir(e.path) or {}
  local out, base = {}, basename(e.path)
  for _, v in ipairs(names) do
    if is_version(v) and core.exists(e.path .. "/" .. v .. "/" .. base) then out[#out + 1] = v end
  end
  return out
end

-- Where this run loads dataset e from: the file, the pinned version or the
-- newest one.  Returns path, or nil and why not.
function Catalog:load_path(e)
  if not e.versioned then
    if core.exists(e.path) then return e.path end
    return nil, string.format("there is no %s at %s", e.type == "folder" and "folder" or "file", e.path)
  end
  local pinned = self.load_versions[e.name]
  local versions = self:versions(e)
  if pinned then
    local p = e.path .. "/" .. pinned .. "/" .. basename(e.path)
    if core.exists(p) then return p end
    return nil, string.format("--load-versions %s:%s: there is no %s%s", e.name, pinned, p,
      #versions > 0 and (" (versions: " .. table.concat(versions, ", ") .. ")") or "")
  end
  if #versions == 0 then return nil, string.format("no saved version under %s/", e.path) end
  return e.path .. "/" .. versions[#versions] .. "/" .. basename(e.path)
end

-- The value the bytes `text` of dataset e hold (text, json or lua), or nil
-- and what is wrong with them ("is not valid JSON: …").
function M.parse(e, text, where)
  if e.type == "text" then return text end
  if e.type == "json" then
    local v, err = core.json_decode(text)
    if v == nil then return nil, "is not valid JSON: " .. (err or "it is null, which is no value") end
    return v
  end
  local ok, v = pcall(require("flow.cache").deserialize, text, where)
  if not ok then return nil, "is not a serialised Lua value: " .. tostring(v) end
  return v
end

-- The value a Lua function receives for dataset e stored at path.
function M.decode(e, path)
  if e.type == "file" or e.type == "folder" then return path end
  local text, err = core.read_file(path)
  if not text then error(string.format("cannot read dataset '%s' from %s: %s", e.name, path, err), 0) end
  local v, why = M.parse(e, text, path)
  if v == nil then error(string.format("dataset '%s' (%s) %s", e.name, path, why), 0) end
  return v
end

-- The bytes a Lua value is saved as for dataset e (json, text, lua), or nil
-- and why it cannot be.
function M.encode(e, value)
  if e.type == "text" then
    if type(value) == "string" then return value end
    if type(value) == "number" then return core.number_text(value) end
    return nil, string.format("a text dataset holds a string, got a %s", type(value))
  elseif e.type == "json" then
    local text, err = core.json_encode(value, true)
    if not text then return nil, "it cannot be written as JSON: " .. err end
    return text .. "\n"
  elseif e.type == "lua" then
    local text, err = require("flow.cache").serialize(value)
    if not text then return nil, err end
    return text
  end
  error("encode: not a value type: " .. e.type)
end

-- Every versioned dataset a --load-versions pin names must exist in the catalog.
function Catalog:check_load_versions(produced)
  for name, v in pairs(self.load_versions) do
    local e = self:entry(name)
    if not e.declared then
      util.setup_error(string.format("--load-versions %s:%s: no dataset '%s' in the catalog", name, v, name))
    elseif not e.versioned then
      util.setup_error(string.format("--load-versions %s:%s: dataset '%s' is not versioned (%s)", name, v, name, e.origin))
    elseif produced[name] then
      util.setup_error(string.format("--load-versions %s:%s: this run saves '%s' (step '%s'); a pinned version "
        .. "applies to a dataset the run only loads", name, v, name, produced[name]))
    end
  end
end

-- "a:2026-…Z,b:2026-…Z" -> {a = "2026-…Z", b = …}
function M.parse_load_versions(spec)
  local out = {}
  if not spec then return out end
  for part in spec:gmatch("[^,]+") do
    local name, v = part:match("^%s*(.-):(%d%d%d%d%-.-)%s*$")
    if not name or name == "" or not is_version(v) then
      util.setup_error(string.format("--load-versions: '%s' is not NAME:VERSION with a version like %s",
                                     part, M.version_stamp(0)))
    end
    out[name] = v
  end
  return out
end

return M
