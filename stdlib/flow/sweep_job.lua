-- flow.sweep_job: a sweep whose swept step runs on Azure ML, sent as one
-- Azure ML Sweep job (REFERENCE.md §1.8) instead of a run per trial.
--
-- flow.sweep hands the run a plan ({step =, search_space =, sweep =, ...});
-- the run submits that step's command job as the sweep's trial, with each
-- swept ${params.x} (or params:x input) written ${{search_space.x}}.  Azure
-- ML samples the trials, runs them (maxConcurrentTrials at once), stops
-- poor ones (earlyTermination) and ranks them by the metric, which it reads
-- from MLflow.  So each trial's command ends with a few lines of Python
-- (TRIAL_EPILOGUE) that log the step's ${outputs.metrics} to MLflow and
-- write the trial's parameters and metrics to its own folder on the
-- datastore, where flow reads every trial back after the job.  Each trial's
-- outputs go under .../runs/<job>/trials/<trial job>/; the run's step takes
-- the best trial's.
local core = require("flow.core")
local dag = require("flow.dag")
local util = require("flow.util")
local catalog = require("flow.catalog")
local pipeline = require("flow.pipeline")
local metrics = require("flow.metrics")

local M = {}

-- The epilogue's argv: metrics file, trial folder, start time, key=value...
-- Only rank 0 of a distributed trial speaks (RANK, Open MPI's rank, or
-- TensorFlow's worker 0).
M.TRIAL_EPILOGUE = [[
import json, math, os, sys, time
rank = os.environ.get("RANK") or os.environ.get("OMPI_COMM_WORLD_RANK") or "0"
task = (json.loads(os.environ.get("TF_CONFIG") or "{}").get("task") or {})
if rank != "0" or (task and (task.get("type"), task.get("index")) != ("worker", 0)):
    sys.exit(0)
path, folder, t0 = sys.argv[1:4]
try:
    t0 = float(t0)
except ValueError:                      # a date without %N
    t0 = float(t0.split(".")[0])
params = dict(a.split("=", 1) for a in sys.argv[4:])
with open(path) as f:
    m = json.load(f)
os.makedirs(folder, exist_ok=True)
with open(os.path.join(folder, "trial.json"), "w") as f:
    json.dump({"params": params, "metrics": m, "started": t0, "ended": time.time()}, f)
try:
    import mlflow
except ImportError:
    sys.exit("flow: this trial's environment has no mlflow; an Azure ML sweep reads each trial's metric from "
             "MLflow: add mlflow and azureml-mlflow to the environment")
for k, v in m.items():
    for i, x in enumerate(v if isinstance(v, list) else [v]):
        if isinstance(x, (int, float)) and math.isfinite(x):
            mlflow.log_metric(k, x, step=i)
]]

local function ident(key)
  local s = key:gsub("[^%w_]", "_")
  if s:match("^%d") then s = "_" .. s end
  return s
end

-- ---- which sweeps go to Azure ML ---------------------------------------------

-- The step a sweep job would run as its trials, or nil and why a sweep over
-- `keys` in this plan runs as a run per trial instead (nil when nothing
-- swept runs on Azure ML: then a run per trial is what anyone expects).
-- plan: the prepared run of the trials' pipeline (runner.prepare).
function M.trial_step(plan, keys)
  if not plan.aml then return nil end
  local readers, remote, partial = {}, false, nil
  for i, n in ipairs(plan.nodes) do
    if not plan.selected or plan.selected[i] then
      local read = pipeline.params_read(n, {})
      for _, key in ipairs(keys) do
        local k = pipeline.param_read(read, key)
        if k and readers[#readers] ~= i then
          readers[#readers + 1], remote = i, remote or plan.remote[i] ~= nil
        end
        if k and k ~= key then partial = partial or { n.name, tostring(k), key } end
      end
    end
  end
  if not remote then return nil end
  if #readers > 1 then
    return nil, string.format("steps '%s' and '%s' both read swept parameters", plan.nodes[readers[1]].name,
                              plan.nodes[readers[2]].name)
  end
  if partial then return nil, string.format("step '%s' reads '%s', not the swept '%s' alone", table.unpack(partial)) end
  local found = readers[1]
  local n = plan.nodes[found]
  if n.kind ~= "command" then return nil, string.format("step '%s' is a Lua function, not a command", n.name) end
  if n.dist then
    for _, ref in ipairs({ n.dist.num_nodes_ref or false, n.dist.processes_per_node_ref or false }) do
      for _, key in ipairs(keys) do
        if ref and dag.is_param_input(ref) == key then
          return nil, string.format("step '%s' takes its node or process count from '%s'", n.name, key)
        end
      end
    end
  end
  for name, v in pairs(n.cmd.env or {}) do
    for _, ref in ipairs(type(v) == "string" and core.template_refs(v) or {}) do
      for _, key in ipairs(keys) do
        if ref[1] == "params" and pipeline.command_param(n, ref[2]) == key then
          return nil, string.format("step '%s' reads '%s' in its environment (%s), which a sweep job's trials "
                                    .. "cannot set each their own", n.name, key, name)
        end
      end
    end
  end
  local has_metrics = false
  for _, io in ipairs(n.outputs) do
    if io.arg == "metrics" then has_metrics = true end
    local e = plan.cat and plan.cat:entry(io.dataset)
    if e and e.uri then
      return nil, string.format("step '%s' writes '%s', which the catalog keeps at one datastore path", n.name,
                                io.dataset)
    end
  end
  if not has_metrics then
    return nil, string.format("step '%s' writes no ${outputs.metrics}, where a trial's metric comes from", n.name)
  end
  return n
end

-- ---- the job ---------------------------------------------------------------

-- A flow distribution or a grid's values as searchSpace has it (the
-- azure-ai-ml SDK's REST form: ["choice", [[values]]], ["uniform", [lo, hi]],
-- ["loguniform", [ln lo, ln hi]]).
local function space_entry(d)
  if d.kind == "choice" then return { "choice", { d.values } } end
  if d.kind == "uniform" then return { "uniform", { d.lo, d.hi } } end
  if d.kind == "loguniform" then return { "loguniform", { math.log(d.lo), math.log(d.hi) } } end
  -- randint lo..hi, both included (Azure ML's randint is 0..upper-1): a
  -- choice of each (M.plan refuses a range too large for one)
  local list = {}
  for v = d.lo, d.hi do list[#list + 1] = v end
  return { "choice", { list } }
end

M.MAX_CHOICES = 10000

-- What flow.sweep gives the run for a sweep job: o (flow.sweep's options),
-- spec (checked: goal, sampler, keys, trials, seed, early_stop), n (the
-- trial step), the number of trials; or nil and why it cannot be one.
function M.plan(o, spec, n, count)
  local space, names, search = {}, {}, {}
  local is_distribution = require("flow.sweep").is_distribution
  for _, key in ipairs(spec.keys) do
    local id = ident(key)
    if names[id] then
      return nil, string.format("parameters '%s' and '%s' would have one name in the sweep job (%s)", names[id], key, id)
    end
    names[id] = key
    local v = (o.grid or o.space)[key]
    local dist = is_distribution(v)
    if dist and v.kind == "randint" and v.hi - v.lo >= M.MAX_CHOICES then
      return nil, string.format("flow.randint(%d, %d) would be a choice of %d values in the sweep job (at most %d)",
                                v.lo, v.hi, v.hi - v.lo + 1, M.MAX_CHOICES)
    end
    space[id] = dist and space_entry(v) or { "choice", { v } }
    search[key] = "${{search_space." .. id .. "}}"
  end
  local own = o.metric
  if own:sub(1, #n.name + 1) == n.name .. "." then own = own:sub(#n.name + 2) end
  local sweep = {
    samplingAlgorithm = spec.sampler == "grid" and { samplingAlgorithmType = "Grid" }
                        or { samplingAlgorithmType = "Random", seed = spec.seed },
    searchSpace = space,
    objective = { primaryMetric = own, goal = spec.goal == "max" and "Maximize" or "Minimize" },
    limits = { maxTotalTrials = count, maxConcurrentTrials = o.parallel or count },
  }
  local es = spec.early_stop
  if es then
    sweep.earlyTermination = { policyType = es.policy == "bandit" and "Bandit" or "MedianStopping",
                               evaluationInterval = es.every, delayEvaluation = es.after,
                               slackFactor = es.slack_factor, slackAmount = es.slack_amount }
  end
  return { step = n.name, search_space = search, names = names, sweep = sweep, metric = own }
end

-- The trial's command line: the step's, then the epilogue (only after it
-- succeeded).  `line` is the step's own; metrics is its ${outputs.metrics}.
function M.trial_command(plan, line)
  local q = require("flow.command").shell_quote
  local words = { "python3", "-c", q(M.TRIAL_EPILOGUE), "${{outputs.metrics}}", "${{outputs.flow_trial}}", '"$flow_t0"' }
  for _, id in ipairs(util.sorted_keys(plan.names)) do
    words[#words + 1] = q(id .. "=${{search_space." .. id .. "}}")
  end
  return "flow_t0=$(date +%s.%N) && ( " .. line .. "\n) && " .. table.concat(words, " ")     -- (a # in line ends there)
end

-- Output bindings for the sweep job `job`: each trial's under its own
-- folder, .../runs/<job>/trials/${{name}}/, and its record (flow_trial).
function M.bindings(run, n, job, mode)
  local outputs = run:bind_outputs(n, job .. "/trials/${{name}}", mode)
  local info = require("flow.remote").info(run.aml)
  outputs[#outputs + 1] = { name = "flow_trial", type = "uri_folder", mode = mode,
                            uri = M.records_uri(run, info.datastore, job) .. "${{name}}/" }
  return outputs
end

-- Where the trials' records go: a folder each, under runs/<job>/trial_records/.
function M.records_uri(run, datastore, job)
  local transfer = require("flow.transfer")
  return transfer.output_uri(datastore, transfer.project_name(run.root), job, "trial_records") .. "/"
end

-- After sweep job `job` ended: every trial that finished, read from its
-- record (names: the plan's search-space name -> parameter key): {{name =, params = {key = text}, metrics = {values, series}, elapsed =}},
-- in the order they started.  Raises the step's failure when none did.
function M.trials(run, n, job, names, fail)
  local info = require("flow.remote").info(run.aml)
  local datastore, blob = catalog.parse_datastore_uri(M.records_uri(run, info.datastore, job))
  local dest = string.format("%s/%s/trial_records", run:downloads(), job)
  core.remove_tree(dest)
  local r, why = run.aml:transfer { op = "download", datastore = datastore, blob = blob, path = dest, folder = true,
                                    step = n.name, label = "the sweep's trial records" }
  if not r then fail("Azure ML sweep job " .. job .. ": " .. why) end
  local list = {}
  for _, name in ipairs(core.list_dir(dest) or {}) do
    local text = core.read_file(dest .. "/" .. name .. "/trial.json")
    local ok, t = pcall(core.json_decode, text or "")
    local m = ok and type(t) == "table" and type(t.metrics) == "table" and metrics.from_table(t.metrics)
    if m and type(t.params) == "table" then
      local params = {}
      for id, v in pairs(t.params) do
        params[names[id] or id] = math.tointeger(tonumber(v)) or tonumber(v) or v
      end
      list[#list + 1] = { name = name, params = params, metrics = m, started = tonumber(t.started) or 0,
                          elapsed = (tonumber(t.ended) or 0) - (tonumber(t.started) or 0) }
    else
      core.ui_warn(string.format("sweep job %s: trial %s left no readable record (%s/%s/trial.json)", job, name,
                                 dest, name))
    end
  end
  table.sort(list, function(a, b)
    if a.started ~= b.started then return a.started < b.started end
    return a.name < b.name
  end)
  if #list == 0 then fail(string.format("Azure ML sweep job %s completed, but no trial left its record", job)) end
  return list
end

return M
