-- flow.compile: the selected DAG as one Azure ML pipeline job in the az ml
-- CLI v2's YAML (pipelineJob.schema.json), for `az ml job create -f`.  Each
-- step is a `type: command` child job, made as a run would send it to Azure
-- ML (flow.remote: the same command line, compute, environment,
-- distribution and the same rules of what may cross between jobs):
--   a dataset one step makes and another reads: bound with
--     ${{parent.jobs.<step>.outputs.<name>}}, so it stays on the datastore;
--   a dataset no selected step makes: the catalog's datastore path, or the
--     local file or folder (a path relative to the YAML file, which the CLI
--     uploads when it creates the job);
--   parameters: resolved for the environment and written into the command;
--   a Lua function step: `flow run SCRIPT --nodes STEP` inside its job.
-- Nothing here asks Azure ML anything: compiling needs no credential.
local core = require("flow.core")
local dag = require("flow.dag")
local util = require("flow.util")
local catalog = require("flow.catalog")
local remote = require("flow.remote")
local values = require("flow.values")
local state_mod = require("flow.state")

local M = {}

M.SCHEMA = "https://azuremlschemas.azureedge.net/latest/pipelineJob.schema.json"

local graph_error = util.setup_error

-- A YAML mapping that keeps the order its keys were put in.
local Map = {}
Map.__index = Map
local function map() return setmetatable({ keys = {} }, Map) end
function Map:put(k, v)
  if v ~= nil then
    self.keys[#self.keys + 1] = k
    self[k] = v
  end
  return self
end

-- ---- the YAML text ----------------------------------------------------------

-- Words YAML 1.1 readers (PyYAML, the az ml CLI's) take for booleans or null.
local RESERVED = { y = true, n = true, yes = true, no = true, ["true"] = true, ["false"] = true, on = true,
                   off = true, null = true, ["~"] = true }

-- A scalar: plain where nothing in it can mean something else to YAML, else
-- double-quoted with JSON's escapes (a JSON string is a YAML one).
local function scalar(v)
  local t = math.type(v) or type(v)
  if t == "integer" or t == "boolean" then return tostring(v) end
  if t == "float" then return string.format("%.17g", v) end
  local path = v == "." or v == ".." or v:match("^%.%.?/")        -- ./x, ../x: never a number
  if (path or v:match("^[%a_$]")) and v:match("^[%w_./@:$%-]+$") and not v:match(":$") and not RESERVED[v:lower()] then
    return v
  end
  return (core.json_encode(v))
end

local function emit(out, m, depth)
  local pad = string.rep("  ", depth)
  for _, k in ipairs(m.keys) do
    local v = m[k]
    if getmetatable(v) ~= Map then out[#out + 1] = pad .. scalar(k) .. ": " .. scalar(v)
    elseif #v.keys == 0 then out[#out + 1] = pad .. scalar(k) .. ": {}"
    else
      out[#out + 1] = pad .. scalar(k) .. ":"
      emit(out, v, depth + 1)
    end
  end
end

function M.yaml(doc)
  local out = {}
  emit(out, doc, 0)
  return table.concat(out, "\n") .. "\n"
end

-- ---- paths ------------------------------------------------------------------

local function components(path)
  local t = {}
  for part in path:gmatch("[^/]+") do
    if part == ".." then t[#t] = nil elseif part ~= "." then t[#t + 1] = part end
  end
  return t
end

-- Absolute path `to` as seen from absolute directory `from`.
function M.relative(from, to)
  local a, b = components(from), components(to)
  local k = 0
  while k < #a and k < #b and a[k + 1] == b[k + 1] do k = k + 1 end
  local parts = {}
  for _ = k + 1, #a do parts[#parts + 1] = ".." end
  for j = k + 1, #b do parts[#parts + 1] = b[j] end
  return #parts == 0 and "." or table.concat(parts, "/")
end

-- ---- the document -----------------------------------------------------------

-- A name Azure ML takes for a job in `jobs:` (an identifier): the step's,
-- with every other character an underscore; a clash gets a number.
local function job_keys(nodes, order)
  local keys, taken = {}, {}
  for _, i in ipairs(order) do
    local base = nodes[i].name:gsub("[^%w_]", "_")
    if base:match("^%d") then base = "_" .. base end
    local key, k = base, 1
    while taken[key] do k = k + 1; key = base .. "_" .. k end
    keys[i], taken[key] = key, true
  end
  return keys
end

-- az ml's spelling of the delivery modes flow's settings name as REST does.
local MODES = { ReadOnlyMount = "ro_mount", Download = "download", ReadWriteMount = "rw_mount", Upload = "upload" }

local function step_error(n, fmt, ...)
  graph_error(string.format("step '%s' (%s): ", n.name, n.where) .. string.format(fmt, ...))
end

-- The job input for dataset d, which no selected step makes: where it is now.
local function outside_input(n, d, v, mode, o)
  if v.uri then return map():put("type", v.uri_type):put("path", v.uri):put("mode", mode) end
  if v.path then
    local abs = v.path:sub(1, 1) == "/" and v.path or o.root .. "/" .. v.path
    local kind = core.exists(abs) == "directory" and "uri_folder" or "uri_file"
    return map():put("type", kind):put("path", M.relative(o.base_dir, abs)):put("mode", mode)
  end
  step_error(n, "reads '%s', a value an earlier run kept in flow's own state, not a file the pipeline job can be "
    .. "given; select the step that makes it too (e.g. --from-nodes), or give '%s' a catalog entry with a path", d, d)
end

-- The job output of step n for its output io (as a run binds it: a catalog
-- entry on a datastore goes there; a file needs a path of its own, under
-- the child job's name).
local function job_output(n, io, cat, info, project, mode)
  local e = cat:entry(io.dataset)
  local kind = catalog.uri_type(e)
  local path = e.uri
  if not path and kind == "uri_file" then
    local file = cat:save_path(e):match("([^/]+)$") or io.arg
    path = catalog.datastore_uri(info.datastore, string.format("flow/%s/runs/${{name}}/%s/%s", project, io.arg, file))
  end
  return map():put("type", kind):put("path", path):put("mode", mode)
end

local function distribution(place)
  local fw = place.framework
  if not fw then return nil end
  local d = map():put("type", fw)
  if fw == "tensorflow" then
    d:put("worker_count", place.instances * place.processes)
    if (place.parameter_server_count or 0) > 0 then d:put("parameter_server_count", place.parameter_server_count) end
  else
    d:put("process_count_per_instance", place.processes)
  end
  return d
end

local function string_map(t)
  local m = map()
  for _, k in ipairs(util.sorted_keys(t or {})) do m:put(k, tostring(t[k])) end
  return m
end

-- One child job for step i.
local function command_job(ctx, i, key_of)
  local plan, o, n, place = ctx.plan, ctx.o, ctx.plan.nodes[i], ctx.remote[i]
  local info = ctx.info
  local env_ref, why = ctx.aml:environment_yaml(n.environment or info.environment)
  if not env_ref then step_error(n, "%s", why) end
  local line, env
  if n.kind == "command" then
    line, env = remote.command_line(ctx.run, n, function(msg) step_error(n, "%s", msg) end)
  else
    line, env = remote.flow_line(ctx.run, n), { FLOW_IN_AZUREML_JOB = "1" }
  end
  local vars = {}
  for k, v in pairs(info.environment_variables) do vars[k] = v end
  for k, v in pairs(env) do vars[k] = v end
  local in_mode = MODES[n.input_mode or info.input_mode] or "ro_mount"
  local out_mode = MODES[n.output_mode or info.output_mode] or "rw_mount"
  local inputs, outputs = map(), map()
  for _, io in ipairs(n.inputs) do
    local d = io.dataset
    if not dag.is_param_input(d) then
      local p = plan.graph:producer(d)
      if p and (not plan.selected or plan.selected[p]) then
        local arg
        for _, out in ipairs(plan.nodes[p].outputs) do
          if out.dataset == d then arg = out.arg end
        end
        inputs:put(io.arg, string.format("${{parent.jobs.%s.outputs.%s}}", key_of[p], arg))
      else
        inputs:put(io.arg, outside_input(n, d, ctx.outside[d], in_mode, o))
      end
    end
  end
  for _, io in ipairs(n.outputs) do
    outputs:put(io.arg, job_output(n, io, plan.cat, info, ctx.project, out_mode))
  end
  local resources = map():put("instance_count", place.instances)
                         :put("instance_type", n.instance_type or info.instance_type)
                         :put("shm_size", n.shm_size or info.shm_size)
  local timeout = n.timeout or (info.timeout > 0 and info.timeout) or nil
  local tags = map():put("flow.step", n.name)
  if #n.tags > 0 then tags:put("flow.tags", table.concat(n.tags, ",")) end
  return map():put("type", "command"):put("display_name", n.name):put("tags", tags)
              :put("code", ctx.code):put("command", line):put("environment", env_ref)
              :put("compute", "azureml:" .. place.compute)
              :put("environment_variables", next(vars) and string_map(vars) or nil)
              :put("resources", resources):put("distribution", distribution(place))
              :put("limits", timeout and map():put("timeout", math.ceil(timeout)) or nil)
              :put("inputs", #inputs.keys > 0 and inputs or nil)
              :put("outputs", #outputs.keys > 0 and outputs or nil)
end

-- The pipeline job for the plan's selected steps (flow.plan.prepare's).
--   o.root      the project's directory (absolute)
--   o.base_dir  the directory the YAML's relative paths start from (absolute)
--   o.script, o.defaults (flow.runner.defaults: script, env, params_spec)
function M.document(plan, o)
  local placed, aml = remote.place_all(plan, o.defaults)
  local info = remote.info(aml)
  local order = {}
  for _, i in ipairs(plan.graph:order()) do
    if not plan.selected or plan.selected[i] then order[#order + 1] = i end
  end
  if #order == 0 then graph_error("no steps to compile: the selection is empty") end
  local ctx = {
    plan = plan, o = o, remote = placed, aml = aml, info = info,
    -- what the command lines read: parameters (flow.remote's job commands)
    run = { settings = plan.settings, defaults = o.defaults,
            input_value = function(_, _, io)
              local key = dag.is_param_input(io.dataset)
              if key == true then return plan.settings.params end
              return require("flow.params").get(plan.settings, key)
            end },
    outside = values.outside_inputs(plan, state_mod.load(nil)),
    project = (o.root:match("([^/]+)/*$") or "project"):gsub("[^%w_-]", "-"),
    code = M.relative(o.base_dir, o.root),
  }
  local key_of = job_keys(plan.nodes, order)
  local jobs = map()
  for _, i in ipairs(order) do jobs:put(key_of[i], command_job(ctx, i, key_of)) end
  local env = plan.settings.env
  local settings = map():put("default_compute", info.default_compute and "azureml:" .. info.default_compute or nil)
                        :put("default_datastore", "azureml:" .. info.datastore)
                        :put("continue_on_step_failure", false)
  return map():put("$schema", M.SCHEMA):put("type", "pipeline")
              :put("display_name", ctx.project)
              :put("experiment_name", info.experiment_name)
              :put("description", string.format("compiled by flow %s from %s (environment %s)",
                                                require("flow").VERSION, o.script, env or "local"))
              :put("tags", map():put("flow.script", o.script):put("flow.env", env or "local"))
              :put("settings", settings)
              :put("jobs", jobs)
end

return M
