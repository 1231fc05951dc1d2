-- flow.compile: the selected DAG as one Azure ML pipeline job in the az ml
-- CLI v2's YAML (pipelineJob.schema.json), for `az ml job create -f`.  Each
-- step is a `type: command` child job, made as a run would send it to Azure
-- ML (flow.remote: the same command line, compute, environment,
-- distribution and the same rules of what may cross between jobs):
--   a dataset one step makes and another reads: bound with
--     ${{parent.jobs.<step>.outputs.<name>}}, so it stays on the datastore;
--   a dataset no selected step makes: the catalog's datastore path, or the
--     local file or folder (a path relative to the YAML file, which the CLI
--     uploads when it creates the job; a Lua value the last run kept is
--     written as a command would get it, .flow/data/<name>.json);
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
local cache = require("flow.cache")
local transfer = require("flow.transfer")

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
-- as remote.identifier makes one.
local function job_keys(nodes, order)
  -- (az ml takes a node's name in lower case only; display_name keeps the step's)
  local keys, taken = {}, {}
  for _, i in ipairs(order) do keys[i] = remote.identifier(nodes[i].name:lower(), taken) end
  return keys
end

-- az ml's spelling of the delivery modes flow's settings name as REST does.
local MODES = { ReadOnlyMount = "ro_mount", Download = "download", ReadWriteMount = "rw_mount", Upload = "upload" }

local function step_error(n, fmt, ...)
  graph_error(string.format("step '%s' (%s): ", n.name, n.where) .. string.format(fmt, ...))
end

-- ---- the model: what both the YAML and the REST bodies say ----------------------
--
-- {aml =, info = (remote.info: datastore, experiment_name, default_compute, ...), project =, env =, script =,
--  jobs = {job, ...} in run order}
-- job = {key =, n = the node, command =, env = {NAME = value}, environment = as written,
--        compute =, instances =, instance_type =, shm_size =, framework =, processes =,
--        parameter_server_count =, timeout = seconds,
--        inputs = {{name =, from = {key =, output =}} | {name =, type =, uri = | path = (absolute), mode =}},
--        outputs = {{name =, type =, uri = (a catalog entry on a datastore), file = (uri_file), mode =}}}

-- Input io of step n, whose dataset no selected step makes: where it is now;
-- name: the job's (remote.io_names).
local function outside_input(n, io, name, v, mode)
  local d = io.dataset
  if v.uri then return { name = name, type = v.uri_type, uri = v.uri, mode = mode } end
  local path = v.path
  if not path then                 -- a Lua value the last run kept: the file a command would get
    if v.out.recompute then
      step_error(n, "reads '%s', a memory value the last run did not keep (a large value only steps read): "
                 .. "compile its producer with it (widen the selection), or give '%s' a catalog entry", d, d)
    end
    local ok, value = pcall(state_mod.restore_value, v.out, d)
    if not ok then step_error(n, "reads '%s': %s", d, tostring(value)) end
    local why
    path, why = values.write_for_command(d, value)
    if not path then step_error(n, "%s", why) end
  end
  local abs = path:sub(1, 1) == "/" and path or core.cwd() .. "/" .. path
  local kind = core.exists(abs) == "directory" and "uri_folder" or "uri_file"
  return { name = name, type = kind, path = abs, mode = mode, dataset = d }
end

-- One child job for step i.
local function model_job(ctx, i, key_of)
  local plan, n, place, info = ctx.plan, ctx.plan.nodes[i], ctx.remote[i], ctx.info
  local job = { key = key_of[i], n = n, environment = n.environment or info.environment, compute = place.compute,
                instances = place.instances, processes = place.processes, framework = place.framework,
                parameter_server_count = place.parameter_server_count,
                instance_type = n.instance_type or info.instance_type, shm_size = n.shm_size or info.shm_size,
                timeout = n.timeout or (info.timeout > 0 and info.timeout) or nil, inputs = {}, outputs = {} }
  local env
  if n.kind == "command" then
    job.command, env = remote.command_line(ctx.run, n, function(msg) step_error(n, "%s", msg) end)
  else
    job.command, env = remote.flow_line(ctx.run, n, function(msg) step_error(n, "%s", msg) end),
                       { FLOW_IN_AZUREML_JOB = "1" }
  end
  job.env = {}
  for k, v in pairs(info.environment_variables) do job.env[k] = v end
  for k, v in pairs(env) do job.env[k] = v end
  local in_mode = n.input_mode or info.input_mode or "ReadOnlyMount"
  local out_mode = n.output_mode or info.output_mode or "ReadWriteMount"
  local names = remote.io_names(n)
  for k, io in ipairs(n.inputs) do
    local d = io.dataset
    if not dag.is_param_input(d) then
      local p = plan.graph:producer(d)
      if p and (not plan.selected or plan.selected[p]) then
        local output
        for j, out in ipairs(plan.nodes[p].outputs) do
          if out.dataset == d then output = remote.io_names(plan.nodes[p]).outputs[j] end
        end
        job.inputs[#job.inputs + 1] = { name = names.inputs[k], from = { key = key_of[p], output = output } }
      else
        job.inputs[#job.inputs + 1] = outside_input(n, io, names.inputs[k], ctx.outside[d], in_mode)
      end
    end
  end
  for k, io in ipairs(n.outputs) do
    local e = plan.cat:entry(io.dataset)
    local kind, file = plan.cat:job_output(e, io)
    job.outputs[#job.outputs + 1] = { name = names.outputs[k], type = kind, uri = e.uri, mode = out_mode, file = file }
  end
  return job
end

-- The model of the plan's selected steps (flow.plan.prepare's) for Azure ML.
-- defaults: flow.runner.defaults (script, env, params_spec).
function M.model(plan, defaults)
  local placed, aml = remote.place_all(plan, defaults)
  local info = remote.info(aml)
  local order = {}
  for _, i in ipairs(plan.graph:order()) do
    if not plan.selected or plan.selected[i] then order[#order + 1] = i end
  end
  if #order == 0 then graph_error("no steps to compile: the selection is empty") end
  local ctx = {
    plan = plan, remote = placed, info = info,
    -- what flow.remote's job commands read: the parameters, the script's name
    run = { settings = plan.settings, defaults = defaults },
    outside = values.outside_inputs(plan, state_mod.load(nil)),
  }
  local key_of = job_keys(plan.nodes, order)
  local m = { aml = aml, info = info, env = plan.settings.env or "local", script = defaults.script,
              project = transfer.project_name(core.cwd()), jobs = {} }
  for _, i in ipairs(order) do m.jobs[#m.jobs + 1] = model_job(ctx, i, key_of) end
  return m
end

-- A job's tags: its step's name and tags.
local function job_tags(n)
  local t = { ["flow.step"] = n.name }
  if #n.tags > 0 then t["flow.tags"] = table.concat(n.tags, ",") end
  return t
end

local function string_map(t)
  local m = map()
  for _, k in ipairs(util.sorted_keys(t or {})) do m:put(k, tostring(t[k])) end
  return m
end

-- ---- the YAML document ----------------------------------------------------------------

local function yaml_distribution(job)
  local fw = job.framework
  if not fw then return nil end
  local d = map():put("type", fw)
  if fw == "tensorflow" then
    d:put("worker_count", job.instances * job.processes)
    if (job.parameter_server_count or 0) > 0 then d:put("parameter_server_count", job.parameter_server_count) end
  else
    d:put("process_count_per_instance", job.processes)
  end
  return d
end

local function yaml_job(m, job, base_dir, code)
  local n = job.n
  local env_ref, why = m.aml:environment_yaml(job.environment)
  if not env_ref then step_error(n, "%s", why) end
  local inputs, outputs = map(), map()
  for _, inp in ipairs(job.inputs) do
    if inp.from then
      inputs:put(inp.name, string.format("${{parent.jobs.%s.outputs.%s}}", inp.from.key, inp.from.output))
    else
      inputs:put(inp.name, map():put("type", inp.type):put("path", inp.uri or M.relative(base_dir, inp.path))
                                :put("mode", MODES[inp.mode]))
    end
  end
  for _, out in ipairs(job.outputs) do
    local path = out.uri
    if not path and out.file then    -- the child job's name: Azure ML's ${{name}}
      path = transfer.output_uri(m.info.datastore, m.project, "${{name}}", out.name, out.file)
    end
    outputs:put(out.name, map():put("type", out.type):put("path", path):put("mode", MODES[out.mode]))
  end
  return map():put("type", "command"):put("display_name", n.name):put("tags", string_map(job_tags(n)))
              :put("code", code):put("command", job.command):put("environment", env_ref)
              :put("compute", "azureml:" .. job.compute)
              :put("environment_variables", next(job.env) and string_map(job.env) or nil)
              :put("resources", map():put("instance_count", job.instances):put("instance_type", job.instance_type)
                                     :put("shm_size", job.shm_size))
              :put("distribution", yaml_distribution(job))
              :put("limits", job.timeout and map():put("timeout", math.ceil(job.timeout)) or nil)
              :put("inputs", #inputs.keys > 0 and inputs or nil)
              :put("outputs", #outputs.keys > 0 and outputs or nil)
end

-- The pipeline job as the az ml CLI's YAML document (M.yaml writes it);
-- base_dir: the directory its relative paths start from (absolute).
function M.document(m, base_dir)
  local code = M.relative(base_dir, core.cwd())
  local jobs = map()
  for _, job in ipairs(m.jobs) do jobs:put(job.key, yaml_job(m, job, base_dir, code)) end
  local settings = map():put("default_compute", m.info.default_compute and "azureml:" .. m.info.default_compute or nil)
                        :put("default_datastore", "azureml:" .. m.info.datastore)
                        :put("continue_on_step_failure", false)
  return map():put("$schema", M.SCHEMA):put("type", "pipeline")
              :put("display_name", m.project)
              :put("experiment_name", m.info.experiment_name)
              :put("description", string.format("compiled by flow %s from %s (environment %s)",
                                                require("flow").VERSION, m.script, m.env))
              :put("tags", map():put("flow.script", m.script):put("flow.env", m.env))
              :put("settings", settings)
              :put("jobs", jobs)
end

-- ---- submitting it through REST -------------------------------------------------------
--
-- As azure-ai-ml does for a pipeline job (REFERENCE.md §1.7): each step is
-- registered as a command component version, and the pipeline job's child
-- jobs name them (componentId) with snake_case fields and ${{parent.jobs.…}}
-- bindings.  Every output gets a datastore path under the pipeline job's
-- name, so flow knows where each landed.

local DIST_TYPES = { pytorch = "PyTorch", mpi = "Mpi", tensorflow = "TensorFlow" }

local function rest_distribution(job)
  local fw = job.framework
  if not fw then return nil end
  if fw == "tensorflow" then
    return { distribution_type = "TensorFlow", worker_count = job.instances * job.processes,
             parameter_server_count = (job.parameter_server_count or 0) > 0 and job.parameter_server_count or nil }
  end
  return { distribution_type = DIST_TYPES[fw], process_count_per_instance = job.processes }
end

-- The output's datastore path in pipeline job `name`.
local function output_uri(m, name, job, out)
  if out.uri then return out.uri end
  local uri = transfer.output_uri(m.info.datastore, m.project, name .. "/" .. job.key, out.name, out.file)
  return out.file and uri or uri .. "/"
end

-- The command component's spec for a job (the CLI's component YAML as JSON).
local function component_spec(m, job, code_id, env_id)
  local inputs, outputs = {}, {}
  for _, inp in ipairs(job.inputs) do
    local t = inp.type
    if inp.from then               -- the type of what it is bound to
      for _, other in ipairs(m.jobs) do
        if other.key == inp.from.key then
          for _, out in ipairs(other.outputs) do
            if out.name == inp.from.output then t = out.type end
          end
        end
      end
    end
    inputs[inp.name] = { type = t }
  end
  for _, out in ipairs(job.outputs) do outputs[out.name] = { type = out.type } end
  local name = ("flow_" .. m.project .. "_" .. job.key):lower():gsub("[^a-z0-9_]", "_")
  local spec = { name = name, type = "command", display_name = job.n.name, command = job.command,
                 code = "azureml:" .. code_id, environment = env_id:sub(1, 1) == "/" and "azureml:" .. env_id or env_id,
                 inputs = next(inputs) and inputs or nil, outputs = next(outputs) and outputs or nil,
                 tags = job_tags(job.n) }
  -- immutable versions named after their content: the same step twice is one version
  spec.version = cache.sha256(util.record_json(spec)):sub(1, 16)
  return name, spec
end

-- The pipeline job's body (REST) once every component is registered.
local function pipeline_body(m, name, component_ids, compute_id)
  local jobs = {}
  for _, job in ipairs(m.jobs) do
    local inputs, outputs = {}, {}
    for _, inp in ipairs(job.inputs) do
      inputs[inp.name] = inp.from and { job_input_type = "literal",
                                        value = string.format("${{parent.jobs.%s.outputs.%s}}", inp.from.key,
                                                              inp.from.output) }
                         or { job_input_type = inp.type, uri = inp.uri, mode = inp.mode }
    end
    for _, out in ipairs(job.outputs) do
      outputs[out.name] = { job_output_type = out.type, uri = output_uri(m, name, job, out), mode = out.mode }
    end
    local limits = job.timeout and { job_limits_type = "Command",
                                     timeout = string.format("PT%dS", math.ceil(job.timeout)) } or nil
    jobs[job.key] = {
      type = "command", name = job.key, display_name = job.n.name, tags = job_tags(job.n),
      componentId = component_ids[job.key], computeId = compute_id(job.compute),
      inputs = next(inputs) and inputs or nil, outputs = next(outputs) and outputs or nil,
      distribution = rest_distribution(job),
      resources = { instance_count = job.instances, instance_type = job.instance_type, shm_size = job.shm_size },
      environment_variables = next(job.env) and job.env or nil, limits = limits,
    }
  end
  return core.json_encode({ properties = {
    jobType = "Pipeline", displayName = m.project, experimentName = m.info.experiment_name,
    description = string.format("submitted by flow %s from %s (environment %s)", require("flow").VERSION, m.script,
                                m.env),
    tags = { ["flow.script"] = m.script, ["flow.env"] = m.env },
    computeId = m.info.default_compute and compute_id(m.info.default_compute) or nil,
    settings = { continue_on_step_failure = false },
    jobs = jobs,
  } })
end

-- Uploads what the jobs read from this machine, as a run's inputs are
-- (flow.transfer: unchanged data is not sent again), and gives each such
-- input its datastore uri.
local function upload_inputs(m)
  local hc = cache.hashes(state_mod.CACHE .. "/hashes")
  for _, job in ipairs(m.jobs) do
    for _, inp in ipairs(job.inputs) do
      if inp.path then
        local h, err = hc:file(inp.path)
        if not h then graph_error(string.format("cannot read dataset '%s': %s", inp.dataset, err)) end
        local kind, uri = transfer.upload_input(m.aml, m.info.datastore, core.cwd(), inp.dataset, inp.path, h)
        if not kind then graph_error(uri) end
        inp.uri, inp.path = uri, nil
      end
    end
  end
  pcall(hc.save, hc)
end

-- The workspace's ARM id of compute c.
local function compute_id_of(info)
  return function(c) return info.workspace_id .. "/computes/" .. c end
end

-- Registers the code snapshot, the data read from here and a component per
-- step; returns the pipeline job's body.
local function prepare_submission(m, name)
  local aml = m.aml
  local code_id, why = aml:code_id(core.cwd())
  if not code_id then graph_error("Azure ML: " .. why) end
  upload_inputs(m)
  local env_ids, component_ids = {}, {}
  for _, job in ipairs(m.jobs) do
    local env = job.environment
    if not env_ids[env] then
      local id, err = aml:environment_id(env)
      if not id then step_error(job.n, "runs on Azure ML, but %s", err) end
      env_ids[env] = id
    end
    local cname, spec = component_spec(m, job, code_id, env_ids[env])
    local body = core.json_encode({ properties = {
      componentSpec = spec, isAnonymous = false,
      description = string.format("step '%s' of %s", job.n.name, m.script) } })
    local cid, err = aml:register_component(cname, spec.version, body)
    if not cid then graph_error("Azure ML: " .. err) end
    component_ids[job.key] = cid
  end
  return pipeline_body(m, name, component_ids, compute_id_of(m.info))
end

-- flow run --submit-pipeline: the run is one Azure ML pipeline job, waited
-- for until it ends (Ctrl-C cancels it unless o.detach).  Its journal
-- (.flow/runs/<id>/journal.jsonl) names the job as the run's one step,
-- "pipeline", so `flow status` shows it, `flow cancel` cancels it and
-- `flow run --resume` waits for it instead of submitting another.
--   o = {detach =, resume = {run =, remote_jobs =} | nil}
-- Returns the exit status: 0 Completed, 1 Failed or Canceled, 130 interrupted.
function M.submit_run(m, o)
  remote.connect(m.aml, o.detach)
  state_mod.lock()
  local run_id = core.run_id(state_mod.RUNS)
  local prior = o.resume and o.resume.remote_jobs and o.resume.remote_jobs.pipeline
  local spec = { display_name = m.project, label = "pipeline" }
  if prior then
    spec.name, spec.attach_only = prior.job, true
  else                              -- (before the journal: a submission refused here leaves no run)
    spec.name = require("flow.azureml").job_name(run_id, "pipeline-" .. m.project, "", 1)
    spec.body = prepare_submission(m, spec.name)
  end
  local started = core.time()
  local journal = require("flow.runner").start_journal(run_id, {
    time = started, script = m.script, env = m.env, steps = 1, resumes = o.resume and o.resume.run,
    pipeline_job = true })
  journal:append(util.record_json { event = "step_start", step = "pipeline", time = core.time() })
  journal:append(util.record_json { event = "remote_job", step = "pipeline", attempt = 1, backend = "azureml",
                                    job = spec.name, time = core.time() })
  journal:sync()
  core.ui_info(string.format("pipeline: %d step%s as Azure ML pipeline job %s", #m.jobs, #m.jobs == 1 and "" or "s",
                             spec.name))
  local r, err = m.aml:run_job(spec)
  if not r then                     -- the job never started: the run ends here, recorded
    journal:append(util.record_json { event = "run_end", code = 2, time = core.time() })
    journal:close()
    graph_error("Azure ML: " .. err)
  end
  local code = r.ok and 0 or (core.interrupted() > 0 or r.detached) and 130 or 1
  local status = r.ok and "ok" or code == 130 and "interrupted" or "failed"
  if not r.detached then
    journal:append(util.record_json { event = "step_end", step = "pipeline", status = status, time = core.time(),
                                      elapsed = core.time() - started,
                                      remote = { backend = "azureml", job = r.name, studio = r.studio,
                                                 status = r.status } })
  end
  journal:append(util.record_json { event = "run_end", code = code, time = core.time() })
  journal:close()
  if r.ok then
    core.ui_info(string.format("pipeline job %s Completed%s", r.name, r.studio and (" — " .. r.studio) or ""))
  elseif r.detached then
    core.ui_info(string.format("pipeline job %s left running (--detach): `flow run --resume` waits for it, "
      .. "`flow cancel` cancels it", r.name))
  else
    local why = r.error or (r.studio and "see " .. r.studio)
    core.ui_error(string.format("pipeline job %s %s%s", r.name, r.status ~= "" and r.status or "did not finish",
                                why and (": " .. why) or ""))
  end
  return code
end

return M
