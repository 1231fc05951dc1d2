-- flow.credentials: handing values of conf/*/credentials.yml to command steps.
--
-- A credential reaches a process only through its environment, never its
-- command line (any user of the machine can read another's command line in
-- /proc; an environment only its owner and root):
--
--   flow.command "psql -h db -U app ${credentials.db.user}"
--       a shell command: the reference becomes "$FLOW_CRED_DB_USER" and the
--       step's process gets FLOW_CRED_DB_USER=<value>
--   flow.command{ "psql", "-h", "db", env = { PGPASSWORD = "${credentials.db.password}" } }
--       an env value: the variable gets the value itself (a node's env = {…}
--       too: node{} merges it into its command's env)
--   flow.command{ "tool", "--password", "${credentials.db.password}" }
--       refused before anything runs: with no shell, nothing could turn a
--       reference into the value except putting the value on the command line
--   catalog.yml: sales: {type: text, path: data/sales.csv, credentials: db_creds}
--       every command reading or writing `sales` gets FLOW_CRED_DB_CREDS_<KEY>
--       for each value of the block db_creds (the names ${credentials.db_creds.<key>}
--       would give)
--
-- Every value handed over is registered with the configuration's redactor
-- (numbers too), so it shows as *** in anything flow prints or records.
-- Values are never part of a fingerprint, not even hashed (a hash of a short
-- password in .flow/ could be brute-forced): a step's fingerprint covers the
-- references as written, so changing a credential's value does not rerun it.
local core = require("flow.core")
local dag = require("flow.dag")
local util = require("flow.util")

local M = {}

local PREFIX = "FLOW_CRED_"

-- "db.password" -> "FLOW_CRED_DB_PASSWORD" (anything but letters and digits becomes _).
function M.var_name(key)
  return PREFIX .. (key:upper():gsub("[^%w]", "_"))
end

-- The shell text a ${credentials.key} becomes in a command string.
function M.shell_ref(key)
  return '"$' .. M.var_name(key) .. '"'
end

local function scalar_text(v)
  if type(v) == "string" then return v end
  if math.type(v) == "integer" then return string.format("%d", v) end
  if type(v) == "number" then return string.format("%.17g", v) end
  if type(v) == "boolean" then return tostring(v) end
end

local function kind_of(v)
  if type(v) == "table" then return next(v) == nil and "an empty mapping" or "a mapping or a list" end
  return v == nil and "null" or type(v)
end

-- The text of credential `key` (dotted), registered as a secret; or nil and
-- why not (naming the key and the closest existing one, never a value).
function M.value(settings, key)
  local cfg = settings.cfg
  local v = cfg and cfg:get("credentials", key)
  if v == nil then
    local near = cfg and cfg:closest("credentials", key)
    return nil, string.format("credential '%s' is not defined in environment '%s' (conf/*/credentials.yml)%s",
      key, settings.env, near and (" (did you mean '" .. near .. "'?)") or "")
  end
  local text = scalar_text(v)
  if not text then
    return nil, string.format("credential '%s' is %s; name one of its values, such as ${credentials.%s.KEY}",
      key, kind_of(v), key)
  end
  cfg:add_secret(text)
  return text
end

-- Every leaf of a credentials block as {key = text}: the names a
-- ${credentials.<block>.<key>} would use.
local function flatten(prefix, v, out)
  if type(v) == "table" then
    for k, item in pairs(v) do flatten(prefix .. "." .. tostring(k), item, out) end
  else
    local text = scalar_text(v)
    if text then out[prefix] = text end
  end
  return out
end

-- The credentials block a catalog entry names (checked to exist when the
-- catalog was read), as {dotted key = text}, each value a registered secret.
function M.block(settings, name)
  local out = flatten(name, settings.cfg:get("credentials", name), {})
  for _, text in pairs(out) do settings.cfg:add_secret(text) end
  return out
end

-- The ${credentials.x} references in a template, as a list of keys.  (Hot:
-- every command word of every run passes here, so the parser runs only on
-- words that can hold one.)
local function refs_in(s)
  local keys = {}
  if not s:find("${credentials.", 1, true) then return keys end
  for _, ref in ipairs(core.template_refs(s)) do
    if ref[1] == "credentials" then keys[#keys + 1] = ref[2] end
  end
  return keys
end

local function argv_refusal(n, key)
  return string.format("step '%s' (%s): ${credentials.%s} in an argument list would put the secret on "
    .. "the process's command line, which every user of the machine can read; pass it in the environment "
    .. "instead: flow.command{ ..., env = { NAME = \"${credentials.%s}\" } }, or use a shell command string, "
    .. "where it becomes \"$%s\"", n.name, n.where, key, key, M.var_name(key))
end

-- What step n's process gets in its environment: {NAME = value} for the
-- credentials it references (in its command or env values) and those of the
-- catalog entries it reads or writes.  Raises a setup error (nothing runs)
-- for a credential in an argv word, a missing one or a mapping.
function M.step_env(n, settings, cat)
  local env, from = {}, {}
  local function put(name, text, why)
    if env[name] ~= nil and env[name] ~= text then
      util.setup_error(string.format("step '%s' (%s): %s and %s both set the environment variable %s to "
        .. "different values", n.name, n.where, from[name], why, name))
    end
    env[name], from[name] = text, why
  end
  local function need(key)
    local text, err = M.value(settings, key)
    if not text then util.setup_error(string.format("step '%s' (%s): %s", n.name, n.where, err)) end
    return text
  end
  local cmd = n.cmd
  if cmd.argv then
    for _, a in ipairs(cmd.argv) do
      local key = refs_in(a)[1]
      if key then util.setup_error(argv_refusal(n, key)) end
    end
  else
    for _, key in ipairs(refs_in(cmd.shell)) do
      put(M.var_name(key), need(key), "${credentials." .. key .. "}")
    end
  end
  for name, v in pairs(cmd.env or {}) do
    if type(v) == "string" and v:find("${credentials.", 1, true) then
      local out, err = core.expand(v, function(ns, key)
        if ns == "credentials" then return M.value(settings, key) end
        return "${" .. ns .. "." .. key .. "}"       -- the rest expands when the step runs (flow.execute)
      end)
      if not out then
        util.setup_error(string.format("step '%s' (%s): env %s: %s", n.name, n.where, name, err))
      end
      put(name, out, "env " .. name)       -- checked here; the value reaches the process as
    end                                     -- expand_command expands it (flow.execute)
  end
  for _, list in ipairs({ n.inputs, n.outputs }) do
    for _, io in ipairs(list) do
      local e = not dag.is_param_input(io.dataset) and cat:entry(io.dataset)
      if e and e.credentials then
        for key, text in pairs(M.block(settings, e.credentials)) do
          put(M.var_name(key), text, string.format("dataset '%s' (credentials: %s)", io.dataset, e.credentials))
        end
      end
    end
  end
  for name, v in pairs(cmd.env or {}) do
    if from[name] == "env " .. name and type(v) == "string" then env[name] = nil end
  end
  return env
end

-- Whether any entry of the catalog (by name or pattern) names a credentials block.
local function catalog_has_credentials(cat)
  for _, e in pairs(cat.exact) do if e.credentials then return true end end
  for _, pat in ipairs(cat.patterns) do if pat.entry.credentials then return true end end
  return false
end

-- Before anything runs: every selected command step's credentials resolve
-- (and are registered as secrets).  `commands`: the indices of the command
-- steps among `nodes`; `readers`: those with "${credentials." in the
-- command's words, its shell line or an env value (pipeline.command_refs).
-- Only they can find anything (or anything wrong), unless the catalog has an
-- entry with credentials that any step might read or write; most steps
-- have none, and skip step_env and its tables.  Returns {node = env table}
-- for the steps that get any.
function M.check(nodes, commands, readers, settings, cat, selected)
  local by_node = {}
  for _, i in ipairs(catalog_has_credentials(cat) and commands or readers) do
    local n = nodes[i]
    if not selected or selected[i] then
      local env = M.step_env(n, settings, cat)
      if next(env) then by_node[n] = env end
    end
  end
  return by_node
end

return M
