-- flow.settings: the configuration a run uses — conf/base + conf/<env>,
-- --params overrides, interpolation — loaded through the C module flow.config.
local core = require("flow.core")
local config = require("flow.config")
local util = require("flow.util")

local M = {}

-- A configuration problem: nothing ran.  The CLI exits 2 on it.
function M.fail(fmt, ...)
  util.setup_error(string.format(fmt, ...))
end

-- The environment to use: explicit (--env, flow.run{env=}), then FLOW_ENV,
-- then "local".  Returns the name and whether someone asked for it.
local function pick_env(env)
  if env then return env, true end
  local from_env = os.getenv("FLOW_ENV")
  if from_env and from_env ~= "" then return from_env, true end
  return "local", false
end

-- The settings flow.yml may hold; anything else is a typo, and an error.
M.FLOW_KEYS = { distributed = true, pools = true }

-- Pools flow.yml cannot size: `local` is -j, `lua` follows it (see flow.plan.pools).
M.BUILTIN_POOLS = { ["local"] = "-j sizes it", lua = "it is as large as -j" }

local function check_flow_keys(cfg)
  local section = cfg:get("flow")
  if type(section) ~= "table" then return end
  for _, k in ipairs(util.sorted_keys(section)) do
    if not M.FLOW_KEYS[k] then
      M.fail("%s: unknown flow setting '%s'%s; the settings are: %s", cfg:origin("flow", tostring(k)) or "flow.yml",
             tostring(k), util.did_you_mean(tostring(k), util.sorted_keys(M.FLOW_KEYS)),
             table.concat(util.sorted_keys(M.FLOW_KEYS), ", "))
    end
  end
end

-- flow.yml's `pools: {name: size}`: each size a positive whole number.
-- Returns {name = size}.
local function check_pools(cfg)
  local pools = cfg:get("flow", "pools")
  if pools == nil then return {} end
  local where = cfg:origin("flow", "pools") or "flow.yml"
  if type(pools) ~= "table" or (next(pools) ~= nil and util.is_list(pools)) then
    M.fail("%s: pools must be a map of pool name to size, like pools: {gpu: 1}", where)
  end
  local out = {}
  for _, name in ipairs(util.sorted_keys(pools)) do
    local size, at = pools[name], cfg:origin("flow", "pools." .. tostring(name)) or where
    if M.BUILTIN_POOLS[name] then
      M.fail("%s: pool '%s' cannot be set here: %s", at, name, M.BUILTIN_POOLS[name])
    end
    if math.type(size) ~= "integer" or size < 1 then
      M.fail("%s: pool '%s' must have a size that is a whole number of at least 1, got %s", at, tostring(name),
             type(size) == "string" and string.format("%q", size) or tostring(size))
    end
    out[name] = size
  end
  return out
end

-- The last quiet load (the command line's, made before the script's top
-- level runs: cli.lua) and its options; the run's own load with the same
-- options takes it once, printing the warnings it kept quiet, instead of
-- reading conf/ again (a one-step run spent 0.6 ms on the second read).
local preloaded

local function same_load(a, b)
  return a.conf == b.conf and a.env == b.env and a.params_spec == b.params_spec and not a.params and not b.params
end

local function load_config(opts)
  local conf = opts.conf or "conf"
  local env, explicit = pick_env(opts.env)
  local kind = core.exists(conf)
  if kind ~= "directory" then
    if opts.conf then M.fail("--conf %s: no such directory", conf) end
    if explicit and env ~= "local" then
      M.fail("environment '%s' needs a conf/%s directory, and there is no conf/ directory in %s",
             env, env, core.cwd())
    end
    if not (opts.params_spec or opts.params) then return { env = env, params = {}, pools = {} } end
  elseif opts.conf and core.exists(conf .. "/base") ~= "directory" then
    -- an environment's directory given for the one above it: its files would be ignored
    for _, name in ipairs(core.list_dir(conf) or {}) do
      if name:match("%.ya?ml$") or name:match("%.json$") then
        M.fail("--conf %s: it holds config files (%s) but no base/ directory: --conf names the directory above "
               .. "the environments (conf, not conf/base)", conf, name)
      end
    end
  end
  -- Which overlay to load: none when there are no files (overrides still
  -- apply) or when the default environment has no directory (conf/local is
  -- often absent); an environment someone asked for must exist.
  local overlay = env
  if kind ~= "directory" or (not explicit and core.exists(conf .. "/" .. env) ~= "directory") then
    overlay = "base"
  end
  local ok, cfg = pcall(config.load, kind == "directory" and conf or "/nonexistent/flow-conf", overlay)
  if not ok then M.fail("%s", tostring(cfg)) end
  if not opts.quiet then
    for _, w in ipairs(cfg:warnings()) do core.ui_warn(w) end
  end
  if opts.params_spec then
    local okp, err = pcall(cfg.override, cfg, opts.params_spec)
    if not okp then M.fail("%s", cfg:redact(tostring(err))) end     -- (before activate: masked here)
  end
  if opts.params then
    -- a dotted key ("model.depth") is set by the configuration's own rule for
    -- dotted paths (as --params model.depth=4 is), after the plain keys
    local plain, dotted = {}, {}
    for k, v in pairs(opts.params) do
      if type(k) == "string" and k:find(".", 1, true) then dotted[#dotted + 1] = k else plain[k] = v end
    end
    table.sort(dotted)
    local okp, err = true, nil
    if next(plain) then okp, err = pcall(cfg.set, cfg, nil, plain, "flow.run") end
    for _, k in ipairs(dotted) do
      if okp then okp, err = pcall(cfg.set, cfg, k, opts.params[k], "flow.run") end
    end
    if not okp then M.fail("%s", cfg:redact(tostring(err))) end
  end
  cfg:activate()                   -- from here on, engine messages mask its secrets
  local okr, err = pcall(cfg.resolve, cfg)
  if not okr then M.fail("%s", tostring(err)) end
  check_flow_keys(cfg)
  return { env = env, cfg = cfg, params = cfg:get("parameters") or {}, pools = check_pools(cfg) }
end

-- load{conf =, env =, params_spec =, params =, quiet =} -> settings
-- settings = { env =, cfg = (userdata or nil), params = (table) }
-- (quiet: the configuration's warnings are not printed; a later load prints them.)
function M.load(opts)
  local pre = preloaded
  preloaded = nil
  if pre and not opts.quiet and same_load(pre.opts, opts) then
    local cfg = pre.settings.cfg
    if cfg then
      for _, w in ipairs(cfg:warnings()) do core.ui_warn(w) end
      cfg:activate()
    end
    return pre.settings
  end
  local settings = load_config(opts)
  if opts.quiet then preloaded = { opts = opts, settings = settings } end
  return settings
end

-- Closest existing parameter key, for "did you mean".
function M.closest_param(settings, key)
  if settings.cfg then return settings.cfg:closest("parameters", key) end
end

return M
