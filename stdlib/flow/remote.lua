-- flow.remote: where each step runs — here, or on Azure ML — and what a step
-- sent there is: its job's command, resources and name.  The protocol
-- (credentials, HTTPS, the job's life: submit, poll, cancel) is the engine's
-- (engine/azureml/, through flow.azureml); this file describes.
local core = require("flow.core")
local dag = require("flow.dag")
local command = require("flow.command")
local util = require("flow.util")
local params_mod = require("flow.params")

local M = {}

local graph_error = util.setup_error

-- The Azure ML settings of the run's environment (conf/<env>/azureml.yml),
-- or nil when it has none.  A broken file is an error naming its line.
function M.load(settings)
  if not settings.cfg then return nil end
  local ok, client = pcall(require("flow.azureml").load, settings.cfg)
  if not ok then graph_error(tostring(client)) end
  return client
end

-- The settings as a table (azureml.yml does not change during a run): made
-- once per client, not once per step that asks.
local infos = setmetatable({}, { __mode = "k" })
function M.info(aml)
  local info = infos[aml]
  if not info then
    info = aml:info()
    infos[aml] = info
  end
  return info
end

-- Whether the settings send step n to Azure ML.
local function dispatched(n, aml, info)
  if info.dispatch == "none" then return false end
  if info.dispatch == "all" then return true end
  if n.dist then return true end
  return info.dispatch == "tagged" and aml:tags_name_compute(n.tags)
end

local function step_error(n, fmt, ...)
  graph_error(string.format("step '%s' (%s) ", n.name, n.where) .. string.format(fmt, ...))
end

-- Where step n runs on Azure ML: {compute =, instances =, processes =, framework =}.
local function placement(n, aml, info, dist, defaults)
  local compute = n.compute
  if not compute then
    local c, why = aml:compute_for(n.tags)
    if not c then step_error(n, "runs on Azure ML, but %s", why) end
    compute = c
  end
  if n.kind == "func" then
    if n.environment then
      step_error(n, "is a Lua function, which runs on Azure ML as `flow run … --nodes %s` inside the job, in "
        .. "the environment %s marks as having flow installed; a node's own environment = cannot say that: "
        .. "drop it, or make the step a command", n.name, info.where)
    elseif not info.flow_installed then
      step_error(n, "is a Lua function, which runs on Azure ML as `flow run … --nodes %s` inside the job; "
        .. "environment '%s' is not marked as having flow installed. Build one from "
        .. "examples/pytorch_ddp/azureml/Dockerfile (docs/azureml.md), register it, and name it in %s as "
        .. "environment: {name: <name>:<version>, flow_installed: true}", n.name, info.environment, info.where)
    end
    if not defaults.script then
      step_error(n, "is a Lua function, which runs on Azure ML as `flow run SCRIPT --nodes %s`: run the "
        .. "pipeline with `flow run SCRIPT`", n.name)
    end
  end
  return { compute = compute, instances = dist and dist.num_nodes or 1,
           processes = dist and dist.processes_per_node or 1, framework = dist and dist.framework,
           parameter_server_count = dist and dist.parameter_server_count }
end

-- What crosses between this machine and the jobs.  A command step on Azure
-- ML reads datasets made here (uploaded to the datastore, content-addressed)
-- or by another job (bound to its output's datastore path: no round trip
-- through this machine), and its outputs are downloaded when a step here or
-- the catalog needs them.  A Lua function step runs inside its job as `flow
-- run --nodes`, which has no way to receive datasets: it may read
-- parameters only, and nothing here may read what it makes.
local function check_data(nodes, remote, cat)
  local producer, local_need = {}, {}
  for i, n in ipairs(nodes) do
    for _, io in ipairs(n.outputs) do producer[io.dataset] = i end
  end
  for i, n in ipairs(nodes) do
    for _, io in ipairs(n.inputs) do
      local from = producer[io.dataset]
      if not dag.is_param_input(io.dataset) then
        if remote[i] and n.kind == "func" then
          step_error(n, "is a Lua function on Azure ML but reads '%s': a Lua step there runs as `flow run "
            .. "--nodes %s` inside its job and receives parameters only; make it a command (its datasets "
            .. "then cross as files), or run it here", io.dataset, n.name)
        elseif from and remote[from] and nodes[from].kind == "func" then
          step_error(n, "reads '%s', which Lua step '%s' makes inside an Azure ML job, where its values stay; "
            .. "make that step a command that writes its output's path (${outputs.<name>}), or run it here",
            io.dataset, nodes[from].name)
        end
        if not remote[i] then local_need[io.dataset] = true end
      end
    end
  end
  for i, n in ipairs(nodes) do
    if remote[i] then
      remote[i].downloads = {}
      for _, io in ipairs(n.outputs) do
        local e = cat and cat:entry(io.dataset)
        -- a local step reads it, or the catalog keeps it here (not on a datastore), or
        -- it is the step's metrics (${outputs.metrics}: read here, as a local step's are)
        remote[i].downloads[io.dataset] = local_need[io.dataset] or (e and e.type ~= "memory" and not e.uri)
                                          or (n.kind == "command" and io.arg == "metrics") or false
        if n.kind == "func" and remote[i].downloads[io.dataset] then
          step_error(n, "is a Lua function on Azure ML, where its values stay, but its output '%s' is a %s "
            .. "catalog entry here; make it a command that writes ${outputs.%s}, or run it here", io.dataset,
            e.type, io.arg)
        end
      end
    end
  end
end

-- The first dataset the steps read or write that the catalog keeps on a
-- datastore, and its entry; nil when there is none.
local function datastore_dataset(nodes, cat)
  if not (cat and cat.on_datastore) then return nil end      -- (no entry per dataset made for nothing)
  for _, n in ipairs(nodes) do
    for _, list in ipairs({ n.inputs, n.outputs }) do
      for _, io in ipairs(list) do
        if not dag.is_param_input(io.dataset) then
          local e = cat:entry(io.dataset)
          if e.uri then return io.dataset, e end
        end
      end
    end
  end
end

-- The plan's remote placements: {[i] = placement} for the steps Azure ML
-- runs; the client (nil when nothing goes there and no dataset lives on a
-- datastore); and whether a dataset does.
function M.plan(nodes, settings, dists, cat, defaults)
  local on_ds, e = datastore_dataset(nodes, cat)
  -- inside an Azure ML job (a Lua step's `flow run … --nodes`), everything runs here
  local in_job = os.getenv("FLOW_IN_AZUREML_JOB")
  if in_job and not on_ds then return {}, nil, false end
  local aml = M.load(settings)
  if not aml then
    if on_ds then
      graph_error(string.format("catalog entry '%s' (%s) is on a datastore (%s), but environment '%s' has no "
        .. "azureml.yml to reach it", on_ds, e.origin, e.uri, settings.env or "local"))
    end
    return {}, nil, false
  end
  local info = M.info(aml)
  local remote, any = {}, false
  for i, n in ipairs(nodes) do
    if not in_job and dispatched(n, aml, info) then    -- (a step that runs here ignores node{compute =, …})
      remote[i] = placement(n, aml, info, dists[i], defaults)
      any = true
    end
  end
  if any then check_data(nodes, remote, cat) end
  if not any and not on_ds then return remote, nil, false end
  return remote, aml, on_ds ~= nil
end

-- Every selected step placed on Azure ML, as `flow compile` sends the whole
-- DAG there: {[i] = placement} and the client.  The rules of what crosses
-- between jobs are those of a run, with every selected step remote.
function M.place_all(plan, defaults)
  local aml = M.load(plan.settings)
  if not aml then
    graph_error(string.format("environment '%s' has no azureml.yml (conf/%s/azureml.yml): an Azure ML pipeline "
      .. "needs its workspace, compute and environment; choose one with --env", plan.settings.env or "local",
      plan.settings.env or "<env>"))
  end
  local info = M.info(aml)
  local nodes, remote, sub, sub_remote = plan.nodes, {}, {}, {}
  for i, n in ipairs(nodes) do
    if not plan.selected or plan.selected[i] then
      remote[i] = placement(n, aml, info, plan.dists[i], defaults)
      sub[#sub + 1], sub_remote[#sub + 1] = n, remote[i]
    end
  end
  check_data(sub, sub_remote, plan.cat)
  return remote, aml
end

-- "Azure ML gpu-cluster × 2 × 4" for flow list.
function M.describe(place)
  local s = "azureml " .. place.compute
  if place.instances > 1 or place.processes > 1 then
    s = s .. string.format(" ×%d node%s", place.instances, place.instances == 1 and "" or "s")
    if place.processes > 1 then s = s .. string.format(" ×%d proc", place.processes) end
  end
  return s
end

-- The CA bundle the HTTPS client adds to the system's.
local function ca_file()
  local f = os.getenv("FLOW_CA_BUNDLE")
  if f and f ~= "" then return f end
  f = os.getenv("SSL_CERT_FILE")
  if f and f ~= "" then return f end
  return nil
end

-- Picks the credential before any step runs: a half-set one is an error now.
function M.connect(aml, detach)
  local ok, why = aml:connect { ca_file = ca_file() }
  if not ok then graph_error("Azure ML: " .. why) end
  aml:set_detach(detach and true or false)
end

-- Each remote step's environmentId, before any step runs: a workspace
-- environment named "name@latest" is asked for its newest version (once per
-- name), and one Azure ML does not know is an error now, not at submission.
function M.resolve_environments(nodes, remote, aml, selected)
  local info, ids = M.info(aml), {}
  for i, place in pairs(remote) do
    if not selected or selected[i] then
      local n = nodes[i]
      local env = n.environment or info.environment
      if ids[env] == nil then
        local id, why = aml:environment_id(env)
        if not id then step_error(n, "runs on Azure ML, but %s", why) end
        ids[env] = id
      end
      place.environment_id = ids[env]
    end
  end
end

-- A name Azure ML takes for a job's key, input or output (an identifier:
-- [A-Za-z_][A-Za-z0-9_]*): `name` with every other character an underscore
-- and "_" before a leading digit; one already in `taken` gets a number.
-- The result is marked taken.
function M.identifier(name, taken)
  local base = name:gsub("[^A-Za-z0-9_]", "_")
  if base == "" or base:match("^%d") then base = "_" .. base end
  local id, k = base, 1
  while taken[id] do k = k + 1; id = base .. "_" .. k end
  taken[id] = true
  return id
end

-- Azure ML's names for step n's inputs and outputs, in its job's command
-- (${{inputs.<name>}}) and its data bindings alike: {inputs = {[k] = name},
-- outputs = {[k] = name}} for n.inputs[k] and n.outputs[k] (a parameter input
-- has none).  A list-form dataset's argument is the dataset's name
-- ("train-set", "ns.clean"), which need not be an identifier, and a list may
-- name one twice: an argument that is an identifier keeps it when free (so
-- ${{outputs.metrics}} stays that), the others get M.identifier's.
local io_names_of = setmetatable({}, { __mode = "k" })
function M.io_names(n)
  local names = io_names_of[n]
  if names then return names end
  local function name_list(list)
    local t, taken = {}, {}
    for k, io in ipairs(list) do
      if not dag.is_param_input(io.dataset) and io.arg:match("^[A-Za-z_][A-Za-z0-9_]*$") and not taken[io.arg] then
        t[k], taken[io.arg] = io.arg, true
      end
    end
    for k, io in ipairs(list) do
      if not t[k] and not dag.is_param_input(io.dataset) then t[k] = M.identifier(io.arg, taken) end
    end
    return t
  end
  names = { inputs = name_list(n.inputs), outputs = name_list(n.outputs) }
  io_names_of[n] = names
  return names
end

-- The job's command line for a command step: parameters as their values,
-- outputs as the job's output bindings.  run: {settings =} (a run's, or
-- flow compile's plan's); for the trial step of a sweep job (run.sweep_step,
-- run.sweep_job: flow.sweep_job), a swept parameter is its ${{search_space.<name>}}.
function M.command_line(run, n, fail)
  local swept = run.sweep_step == n.name and run.sweep_job.search_space or {}
  local by_arg, names = { inputs = {}, outputs = {} }, M.io_names(n)
  for _, ns in ipairs({ "inputs", "outputs" }) do
    for k, io in ipairs(n[ns]) do by_arg[ns][io.arg] = by_arg[ns][io.arg] or k end
  end
  -- a parameter's value as the job's text, refused when it holds a
  -- credential's value (a parameter read from the same ${env:X} as one):
  -- the job's command line and environment are visible in Azure ML studio.
  -- (Only what a parameter puts there: the command's own words are the
  -- user's, and a credential's user name may well be one of them.)
  local function param_text(v, key)
    if type(v) == "string" and util.holds_secret(v) then
      return nil, string.format("${params.%s} holds a credential's value (a parameter set to one): a step on Azure "
        .. "ML cannot be given credentials by flow (its command line and environment are visible in Azure ML "
        .. "studio); use the workspace's Key Vault", key)
    end
    return v
  end
  local function lookup(ns, key)
    if ns == "credentials" then
      return nil, string.format("${credentials.%s}: a step on Azure ML cannot be given credentials by flow "
        .. "(its command line and environment are visible in Azure ML studio); use the workspace's Key Vault", key)
    end
    if ns == "params" then
      local v, err = swept[require("flow.pipeline").command_param(n, key)] or params_mod.command_text(run.settings, n, key)
      if not v then return nil, err end
      return param_text(v, key)
    end
    local k = by_arg[ns][key]
    if not k then return nil, string.format("${%s.%s}: the step has no %s named '%s'", ns, key, ns:sub(1, -2), key) end
    local io = n[ns][k]
    -- Azure ML puts the path there
    if ns == "outputs" then return "${{outputs." .. names.outputs[k] .. "}}" end
    local param = dag.is_param_input(io.dataset)
    if not param then return "${{inputs." .. names.inputs[k] .. "}}" end
    if swept[param] then return swept[param] end
    return param_text(params_mod.text(params_mod.of_input(run.settings, param)), param)
  end
  local function expand(s, quote)
    local out, err = core.expand(s, function(ns, key)
      local v, e = lookup(ns, key)
      if v and quote then v = command.shell_quote(v) end
      return v, e
    end)
    if not out then fail(err) end
    return out
  end
  local cmd = n.cmd
  local line
  if cmd.shell then line = expand(cmd.shell, true)
  else
    local words = {}
    for i, a in ipairs(cmd.argv) do
      local w = expand(a, false)
      -- a binding needs no quotes of its own: Azure ML puts a plain path there
      local plain = w:gsub("%${{%a+puts%.[%w_]+}}", "x")
      words[i] = command.shell_quote(plain) == plain and w or command.shell_quote(w)
    end
    line = table.concat(words, " ")
  end
  if cmd.cwd then line = "cd " .. command.shell_quote(cmd.cwd) .. " && " .. line end
  local env = {}
  for name, v in pairs(cmd.env or {}) do
    env[name] = type(v) == "string" and expand(v, false) or tostring(v)
  end
  return line, env
end

-- The job's command for a Lua function step: flow itself, inside the job,
-- runs that one step of the same script, pipeline and configuration (a step
-- only a registered pipeline has is no step of __default__).  `fail(msg)`
-- raises: a --params holding a credential's value (--params key=$SECRET)
-- would put it on the job's command line, visible in Azure ML studio.
function M.flow_line(run, n, fail)
  local d = run.defaults
  local words = { "flow", "run", d.script, "--nodes", n.name }
  if d.pipeline then words[#words + 1] = "--pipeline=" .. d.pipeline end
  if d.env then words[#words + 1] = "--env=" .. d.env end
  if d.params_spec then
    if util.holds_secret(d.params_spec) then
      fail("--params holds a credential's value, and a Lua step on Azure ML is run there with the same --params "
           .. "(on its job's command line, visible in Azure ML studio); give the job its secrets from the "
           .. "workspace's Key Vault")
    end
    words[#words + 1] = "--params=" .. d.params_spec
  end
  if d.conf then             -- relative to the project, whose files are the job's working directory
    local root = core.cwd() .. "/"
    local conf = d.conf:sub(1, #root) == root and d.conf:sub(#root + 1) or d.conf
    words[#words + 1] = "--conf=" .. conf
  end
  for i, w in ipairs(words) do words[i] = command.shell_quote(w) end
  return table.concat(words, " ")
end

-- The spec flow.azureml's run_job takes for attempt k of step n; inputs and
-- outputs are its data bindings (flow.transfer's).
function M.job_spec(run, n, place, name, fail, inputs, outputs)
  local line, env
  if n.kind == "command" then line, env = M.command_line(run, n, fail)
  else line, env = M.flow_line(run, n, fail), { FLOW_IN_AZUREML_JOB = "1" } end
  local rec = run.records[n.name]
  return {
    name = name, display_name = n.name, command = line, env = env, inputs = inputs, outputs = outputs,
    compute = place.compute, instance_count = place.instances, framework = place.framework,
    processes_per_node = place.processes, parameter_server_count = place.parameter_server_count,
    -- TensorFlow: a worker per process, as distributed: local launches them
    worker_count = place.framework == "tensorflow" and place.instances * place.processes or nil,
    instance_type = n.instance_type, shm_size = n.shm_size, environment_id = place.environment_id,
    timeout = n.timeout,
    tags = { ["flow.run_id"] = run.run_id, ["flow.step"] = n.name, ["flow.fingerprint"] = rec.fp or "" },
  }
end

return M
