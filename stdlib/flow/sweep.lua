-- flow.sweep: one pipeline run once per set of parameters (a trial), the
-- trials ranked by one of their metrics (flow.metrics), the best marked.
--
--   flow.sweep{ pipeline = p, grid = { lr = { 0.1, 0.01 }, ["model.depth"] = { 2, 4 } },
--               metric = "val_loss", goal = "min" }
--   flow.sweep{ pipeline = p, space = { lr = flow.loguniform(1e-4, 1e-1), bs = flow.choice{ 16, 32 } },
--               sampler = "random", trials = 8, seed = 1, metric = "val_loss" }
--
-- Trials run one after another through flow.run, each its own run (its own
-- run directory and memory datasets) with the trial's parameters merged over
-- the environment's; they share the incremental cache, so a step that does
-- not read a swept parameter runs once for the whole sweep.  A trial that
-- fails is reported, and the sweep goes on.  The results table is printed
-- and written to .flow/sweeps/<id>/results.csv and results.json, with a page
-- of charts, report.html (flow.sweep_report).
local core = require("flow.core")
local util = require("flow.util")
local runner = require("flow.runner")
local pipeline = require("flow.pipeline")
local first_hole = require("flow.pipeline_c").first_hole
local report = require("flow.sweep_report")
local cache = require("flow.cache")
local metrics = require("flow.metrics")
local early_stop = require("flow.early_stop")
local failure = require("flow.failure")
local tasks = require("flow.tasks")

local M = {}

M.DIR = ".flow/sweeps"

-- ---- search spaces --------------------------------------------------------

local Dist = { __name = "flow.distribution" }
Dist.__index = Dist

local function number_arg(v, what, fn, level)
  if type(v) ~= "number" or v ~= v or v == math.huge or v == -math.huge then
    util.fail(level + 1, "flow.%s: %s must be a finite number, got %s", fn, what, tostring(v))
  end
  return v
end

local function range(fn, lo, hi, level)
  number_arg(lo, "the low end", fn, level + 1)
  number_arg(hi, "the high end", fn, level + 1)
  if lo >= hi then util.fail(level + 1, "flow.%s: the low end (%g) must be below the high end (%g)", fn, lo, hi) end
end

-- flow.uniform(lo, hi): any number in [lo, hi), evenly.
function M.uniform(lo, hi)
  range("uniform", lo, hi, 2)
  return setmetatable({ kind = "uniform", lo = lo, hi = hi }, Dist)
end

-- flow.loguniform(lo, hi): a number in [lo, hi) whose logarithm is uniform
-- (learning rates).
function M.loguniform(lo, hi)
  range("loguniform", lo, hi, 2)
  if lo <= 0 then util.fail(2, "flow.loguniform: the low end must be above 0, got %g", lo) end
  return setmetatable({ kind = "loguniform", lo = lo, hi = hi }, Dist)
end

-- flow.randint(lo, hi): a whole number from lo to hi, both included.
function M.randint(lo, hi)
  if math.type(lo) ~= "integer" or math.type(hi) ~= "integer" or lo > hi then
    util.fail(2, "flow.randint: expected two whole numbers lo <= hi, got %s and %s", tostring(lo), tostring(hi))
  end
  return setmetatable({ kind = "randint", lo = lo, hi = hi }, Dist)
end

-- flow.choice{a, b, ...}: one of the values.
function M.choice(values)
  if type(values) ~= "table" or #values == 0 or first_hole(values) then
    util.fail(2, "flow.choice: expected a non-empty list of values (no nil among them), got %s",
              type(values) == "table" and "a table with a hole or none" or type(values))
  end
  local list = {}
  for i = 1, #values do list[i] = values[i] end
  return setmetatable({ kind = "choice", values = list }, Dist)
end

function M.is_distribution(v) return getmetatable(v) == Dist end

-- A generator of its own (splitmix64), so that a seed gives the same trials
-- whatever else calls math.random, on every platform.
local function rng(seed)
  local state = seed
  return function()
    state = state + 0x9E3779B97F4A7C15
    local z = state
    z = (z ~ (z >> 30)) * 0xBF58476D1CE4E5B9
    z = (z ~ (z >> 27)) * 0x94D049BB133111EB
    z = z ~ (z >> 31)
    return (z >> 11) * (1.0 / 9007199254740992.0)      -- [0, 1), 53 bits
  end
end

function Dist:sample(next_float)
  local u = next_float()
  if self.kind == "uniform" then return self.lo + u * (self.hi - self.lo) end
  if self.kind == "loguniform" then return math.exp(math.log(self.lo) + u * (math.log(self.hi) - math.log(self.lo))) end
  if self.kind == "randint" then return self.lo + math.floor(u * (self.hi - self.lo + 1)) end
  return self.values[math.floor(u * #self.values) + 1]
end

-- ---- the trials -----------------------------------------------------------

-- grid = {key = {values}} -> every combination, keys in sorted order, the
-- last key varying fastest: {{key = value, ...}, ...}.
local function grid_trials(grid, keys)
  local trials = { {} }
  for _, k in ipairs(keys) do
    local next_trials = {}
    for _, t in ipairs(trials) do
      for _, v in ipairs(grid[k]) do
        local c = {}
        for kk, vv in pairs(t) do c[kk] = vv end
        c[k] = v
        next_trials[#next_trials + 1] = c
      end
    end
    trials = next_trials
  end
  return trials
end

-- `trials` draws from space = {key = distribution or {values}}.
local function random_trials(space, keys, n, seed)
  local next_float, trials = rng(seed), {}
  for i = 1, n do
    local t = {}
    for _, k in ipairs(keys) do
      local d = space[k]
      t[k] = M.is_distribution(d) and d:sample(next_float) or d[math.floor(next_float() * #d) + 1]
    end
    trials[i] = t
  end
  return trials
end

-- ---- checking what was asked ----------------------------------------------

local fields = { pipeline = true, env = true, grid = true, space = true, sampler = true, trials = true, seed = true,
                 metric = true, goal = true, params = true, jobs = true, force = true, name = true, quiet = true,
                 resume = true, early_stop = true, parallel = true, sweep_job = true }

-- The swept keys of grid (lists) or space (distributions or lists), sorted.
local function check_space(t, what, level)
  if type(t) ~= "table" or next(t) == nil then
    util.fail(level + 1, "flow.sweep: %s must be a table of parameter = %s", what,
              what == "grid" and "{values}" or "flow.uniform(...) | flow.choice{...} | {values}")
  end
  local keys = {}
  for k, v in pairs(t) do
    if type(k) ~= "string" or k == "" or k:find("^%.") or k:find("%.$") or k:find("%.%.") then
      util.fail(level + 1, "flow.sweep: %s keys are parameter keys (like \"lr\" or \"model.depth\"), got %s",
                what, tostring(k))
    end
    if not M.is_distribution(v) or what == "grid" then
      if type(v) ~= "table" or M.is_distribution(v) or #v == 0 or first_hole(v) then
        util.fail(level + 1, "flow.sweep: %s.%s must be a non-empty list of values%s", what, k,
                  what == "space" and " or a distribution (flow.uniform, flow.loguniform, flow.randint, flow.choice)" or "")
      end
    end
    keys[#keys + 1] = k
  end
  table.sort(keys)
  return keys
end

local function check_pipeline(p, level)
  if pipeline.is_node(p) then p = pipeline.pipeline(p) end
  if not pipeline.is_pipeline(p) then
    util.fail(level + 1, "flow.sweep: pipeline = the pipeline to run for each trial, got %s", type(p))
  end
  return p
end

local function check_opts(o, level)
  if type(o) ~= "table" then util.fail(level + 1, "flow.sweep: expected a table of options, got %s", type(o)) end
  util.check_fields(o, fields, "flow.sweep", level + 1)
  local p = check_pipeline(o.pipeline, level + 1)
  if type(o.metric) ~= "string" or o.metric == "" then
    util.fail(level + 1, "flow.sweep: metric = the name of the metric that ranks the trials (a step's, see flow.log_metric)")
  end
  local goal = o.goal or "min"
  if goal ~= "min" and goal ~= "max" then util.fail(level + 1, "flow.sweep: goal must be \"min\" or \"max\", got %s", tostring(goal)) end
  if (o.grid == nil) == (o.space == nil) then util.fail(level + 1, "flow.sweep: give either grid = {...} or space = {...}") end
  local sampler = o.sampler or (o.grid and "grid" or "random")
  if sampler ~= "grid" and sampler ~= "random" then
    util.fail(level + 1, "flow.sweep: sampler must be \"grid\" or \"random\", got %s", tostring(sampler))
  end
  if sampler == "grid" and o.space then
    util.fail(level + 1, "flow.sweep: a space is sampled (sampler = \"random\"); a grid = {...} is tried whole")
  end
  local keys = check_space(o.grid or o.space, o.grid and "grid" or "space", level + 1)
  local n = o.trials
  if sampler == "random" and (math.type(n) ~= "integer" or n < 1) then
    util.fail(level + 1, "flow.sweep: a random sweep needs trials = the number of trials (a whole number from 1)")
  end
  if sampler == "grid" and n ~= nil then util.fail(level + 1, "flow.sweep: trials = is for a random sweep; a grid is tried whole") end
  local seed = o.seed or 0
  if math.type(seed) ~= "integer" then util.fail(level + 1, "flow.sweep: seed must be a whole number, got %s", tostring(seed)) end
  if o.params ~= nil and type(o.params) ~= "table" then util.fail(level + 1, "flow.sweep: params must be a table") end
  local stop = o.early_stop ~= nil and early_stop.check(o.early_stop, level + 1) or nil
  if o.parallel ~= nil and (math.type(o.parallel) ~= "integer" or o.parallel < 1) then
    util.fail(level + 1, "flow.sweep: parallel must be a whole number from 1 (trials at once), got %s", tostring(o.parallel))
  end
  if o.sweep_job ~= nil and type(o.sweep_job) ~= "boolean" then
    util.fail(level + 1, "flow.sweep: sweep_job must be true or false, got %s", tostring(o.sweep_job))
  end
  return p, { goal = goal, sampler = sampler, keys = keys, trials = n, seed = seed, early_stop = stop }
end

-- ---- running them ---------------------------------------------------------

-- The trials ranked: those that succeeded with the metric, by it (goal),
-- then those that succeeded without it, then the others; ties by number.
local function ranked(trials, goal)
  local order = {}
  for i, t in ipairs(trials) do order[i] = t end
  local function rank(t)
    return t.status == "ok" and (t.metric == nil and 2 or 1) or t.status == "stopped" and 3 or 4
  end
  table.sort(order, function(a, b)
    local ra, rb = rank(a), rank(b)
    if ra ~= rb then return ra < rb end
    if ra == 1 and a.metric ~= b.metric then
      if goal == "min" then return a.metric < b.metric end
      return a.metric > b.metric
    end
    return a.trial < b.trial
  end)
  return order
end

-- The series of values the metric `name` had (one per epoch), when the step
-- that reports it logged one: name is the run's metric, "val_loss" or, when
-- several steps report one, "train.val_loss".
local function metric_series(r, name)
  for step, s in pairs(r.steps) do
    if s.series then
      local own = name:sub(1, #step + 1) == step .. "." and name:sub(#step + 2) or name
      if s.series[own] and (own ~= name or r.metrics[name] == s.metrics[own]) then return s.series[own] end
    end
  end
end

-- Early stopping while trial t runs: each value its metric gets through
-- flow.log_metric is shown to the policy (flow.early_stop), with the series
-- of the trials before it; a trial the policy stops fails its step with a
-- failure the trial records as "stopped".  Returns the hook flow.run's
-- on_log takes (flow.metrics.collect).
local function stopper(o, spec, t, before)
  local previous = {}
  for _, b in ipairs(before) do
    if b.series and (b.status == "ok" or b.status == "stopped") then previous[#previous + 1] = b.series end
  end
  local decide = early_stop.decider(spec.early_stop, spec.goal, previous)
  return function(step, name, series)
    if name ~= o.metric and step .. "." .. name ~= o.metric then return end
    local why = decide(series)
    if not why then return end
    t.stopped = o.metric .. " " .. why
    t.series = { table.unpack(series) }
    error(failure.new { quiet = true, message = string.format("step '%s' stopped early by the sweep: %s",
                                                                step, t.stopped) }, 0)
  end
end

-- One trial: flow.run with its parameters.  A graph error that comes from
-- the trial's parameters fails that trial, not the sweep.
local function trial_params(o, values)
  local params = {}              -- the sweep's params, then the trial's (dotted keys: flow.run sets them)
  for k, v in pairs(o.params or {}) do params[k] = v end
  for k, v in pairs(values) do params[k] = v end
  return params
end

local function run_trial(p, o, spec, id, i, n, values, before, jobs, keep)
  local params = trial_params(o, values)
  local t = { trial = i, params = values }
  local started = core.time()
  -- (keep_values: what the trials share is made once and kept for the
  -- others, not made again in each: flow.values)
  local ok, r = pcall(runner.run, p, { env = o.env, params = params, jobs = jobs or o.jobs, force = o.force,
                                       keep_values = keep or true,
                                       name = string.format("%s trial %d/%d", o.name or ("sweep " .. id), i, n),
                                       label = string.format("trial %d/%d", i, n),
                                       on_log = spec.early_stop and stopper(o, spec, t, before) or nil })
  t.elapsed = core.time() - started
  if not ok then
    if not util.is_setup_error(r) then error(r, 0) end
    t.status, t.error = "failed", r.setup_error
    core.ui_error(string.format("trial %d/%d: %s", i, n, r.setup_error))    -- (nothing ran: no step says why)
    return t
  end
  t.run_id, t.status, t.metrics = r.run_id, r.status, r.metrics
  if t.stopped and r.code == 1 then
    t.status, t.error, t.metric = "stopped", "stopped early: " .. t.stopped, t.series[#t.series]
    return t
  end
  if r.code ~= 0 then
    t.status = r.code == 130 and "interrupted" or "failed"
    for _, node in ipairs(p.nodes) do           -- the first to fail, in the pipeline's order
      if r.steps[node.name].state == "failed" then t.error = string.format("step '%s' failed", node.name) break end
    end
  end
  t.metric = r.metrics[o.metric]
  t.series = metric_series(r, o.metric)
  return t
end

-- "lr=0.1 depth=2": a trial's values for a person.
local function describe_values(keys, v)
  local shown = {}
  for _, k in ipairs(keys) do shown[#shown + 1] = k .. "=" .. report.value_text(v[k]) end
  return table.concat(shown, " ")
end

-- Trial i: announced, run, and recorded in the sweep's trials.jsonl (the
-- line synced) unless it was interrupted, which runs again on resume.
local function one_trial(p, o, spec, id, values, i, before, log, jobs, keep)
  core.ui_info(string.format("trial %d/%d: %s", i, #values, describe_values(spec.keys, values[i])))
  local t = run_trial(p, o, spec, id, i, #values, values[i], before, jobs, keep)
  if t.status == "stopped" then core.ui_info(string.format("trial %d/%d stopped early: %s", i, #values, t.stopped)) end
  if t.status ~= "interrupted" then
    log:append(core.json_encode(t))
    log:sync()
  end
  return t
end

-- ---- trials at once ------------------------------------------------------------

-- The configuration with trial 1's parameters set, before any trial runs: a
-- swept key that cannot be set (`min_count.x` where min_count is a number),
-- or a configuration that does not load, would fail every trial alike, each
-- with the message only in results.json; it is the sweep's error instead
-- (exit 2).  A value that breaks the graph is still that trial's failure.
local function check_settable(o, values)
  if #values == 0 then return end
  local d = runner.defaults
  local ok, err = pcall(require("flow.settings").load, { conf = d.conf, env = o.env or d.env,
                                                          params_spec = d.params_spec,
                                                          params = trial_params(o, values[1]) })
  if ok then return end
  if not util.is_setup_error(err) then error(err, 0) end
  util.setup_error("flow sweep: the swept parameters cannot be set: " .. err.setup_error:gsub("^flow%.run: ", ""))
end

-- The trials' run prepared (runner.prepare) with the first trial's values,
-- to see which steps the sweep touches; nil when that fails (each trial then
-- reports why).
local function prepared(p, o, values)
  local ok, plan = pcall(runner.prepare, p, { env = o.env, params = trial_params(o, values[1]) }, 1)
  if ok then return plan end
  if not util.is_setup_error(plan) then error(plan, 0) end
  return nil
end

-- The steps whose work does not depend on the swept parameters (they read
-- none, nor anything made from one): {names}, in the pipeline's order.
local function shared_steps(plan, keys)
  local swept, g = {}, plan.graph
  for _, i in ipairs(g:order()) do              -- producers first
    local n = plan.nodes[i]
    local read = pipeline.params_read(n, {})
    for _, key in ipairs(keys) do swept[i] = swept[i] or pipeline.param_read(read, key) ~= nil end
    for _, io in ipairs(n.inputs) do
      local from = g:producer(io.dataset)
      swept[i] = swept[i] or (from and swept[from]) or false
    end
  end
  local names = {}
  for i, n in ipairs(plan.nodes) do
    if not swept[i] and (not plan.selected or plan.selected[i]) then names[#names + 1] = n.name end
  end
  return names, swept
end

-- Trials that run at once must not write the same file: a dataset the
-- catalog keeps (here or on a datastore), made by a step that depends on the
-- swept parameters, is such a file.  (Memory datasets are each run's own, what a command writes
-- outside the catalog goes to its run's data directory, and a versioned
-- dataset to its run's version.)
local function check_parallel(plan, swept, parallel)
  for i, n in ipairs(plan.nodes) do
    if swept[i] and (not plan.selected or plan.selected[i]) then
      for _, io in ipairs(n.outputs) do
        local e = plan.cat and plan.cat:entry(io.dataset)
        if e and (require("flow.catalog").persisted(e) or e.uri) and not e.versioned then
          util.setup_error(string.format("flow.sweep: parallel = %d: the trials would each write '%s' (%s, catalog "
            .. "entry %s), made by step '%s' from the swept parameters; run them one at a time, or keep '%s' out "
            .. "of the catalog (then each trial's copy stays in its run)", parallel, io.dataset, e.path or "?",
            e.origin or "?", n.name, io.dataset))
        end
      end
    end
  end
end

-- The trials, `parallel` at once on the one loop (flow.spawn): first the
-- steps every trial shares, in a run of their own (so they run once, not
-- once per trial at the same moment), then workers that each take the next
-- trial until none is left.  Returns the trials that ended (in the order
-- they ended) and whether the sweep was interrupted; nil when the shared
-- steps failed (the trials then run one at a time, each reporting it).
local function run_parallel(p, o, spec, id, values, done, parallel, log, plan, shared, keep, swept)
  if not plan then return nil end
  local jobs = o.jobs or core.cpu_count()
  local per_trial = math.max(1, jobs // parallel)
  if swept then check_parallel(plan, swept, parallel) end    -- (a new sweep's was checked before it was made)
  local names = shared
  if #names > 0 and #names < #plan.nodes then
    core.ui_info(string.format("sweep %s: the steps every trial shares first: %s", id, table.concat(names, ", ")))
    local rok, r = pcall(runner.run, p, { env = o.env, params = trial_params(o, values[1]), jobs = jobs,
                                          force = o.force, nodes = names, keep_values = keep or true,
                                          name = string.format("%s shared steps", o.name or ("sweep " .. id)) })
    if not rok and not util.is_setup_error(r) then error(r, 0) end
    if rok and r.code == 130 then return {}, true end
    if not rok or r.code ~= 0 then
      core.ui_warn(string.format("sweep %s: the shared steps failed: the trials run one at a time", id))
      return nil
    end
  end
  core.ui_info(string.format("sweep %s: %d trials at once, %d job%s each", id, parallel, per_trial,
                             per_trial == 1 and "" or "s"))
  local trials, next_i, interrupted = {}, 0, false
  local before = {}                  -- the trials ended so far, earlier ones too (early stopping)
  for _, t in pairs(done) do before[#before + 1] = t end
  local function worker()
    while not interrupted do
      next_i = next_i + 1
      local i = next_i
      if not values[i] then return end
      if not done[i] then
        local ok, t = pcall(one_trial, p, o, spec, id, values, i, before, log, per_trial, keep)
        if not ok then
          interrupted = true         -- no new trial starts; the others end, then this raises
          error(t, 0)
        end
        trials[#trials + 1], before[#before + 1] = t, t
        interrupted = interrupted or t.status == "interrupted" or core.interrupted() > 0
      end
    end
  end
  local workers = {}
  for w = 1, parallel do workers[w] = tasks.spawn(worker) end
  tasks.wait_all(workers)
  return trials, interrupted
end

-- ---- on Azure ML: one sweep job ---------------------------------------------

-- The sweep job's plan (flow.sweep_job) when the swept step runs on Azure ML
-- in the sweep's environment, else nil (each trial is a run of its own).
local function azureml_plan(plan, o, spec, values)
  if o.sweep_job == false or not plan then return nil end
  local sweep_job = require("flow.sweep_job")        -- (Azure ML's: loaded only for a sweep that may use it)
  local n, why = sweep_job.trial_step(plan, spec.keys)
  local job
  if n then job, why = sweep_job.plan(o, spec, n, #values) end
  if not job and why then core.ui_info("sweep: a run per trial, not an Azure ML sweep job: " .. why) end
  return job
end

-- The trial number of values `params` (as a trial record has them: text
-- made numbers) among the sweep's trials, or nil.
local function trial_number(values, keys, params)
  for i, v in ipairs(values) do
    local same = true
    for _, k in ipairs(keys) do
      same = same and (v[k] == params[k] or report.exact_text(v[k]) == report.exact_text(params[k]))
    end
    if same then return i end
  end
end

-- A sweep job's trials (Run:sweep_outcome's records) as a sweep's: a grid
-- trial numbered as its values are in the grid, any other after the
-- highest number taken, in the order they started.
local function job_trials(records, spec, values, plan, run_id)
  local trials, used, top = {}, {}, 0
  for _, st in ipairs(records) do
    local i = spec.sampler == "grid" and trial_number(values, spec.keys, st.params) or nil
    if i and not used[i] then
      used[i], top = true, math.max(top, i)
    else
      i = false
    end
    trials[#trials + 1] = { trial = i, params = st.params, status = "ok", metrics = st.metrics.values,
                            metric = st.metrics.values[plan.metric], series = (st.metrics.series or {})[plan.metric],
                            elapsed = st.elapsed, run_id = run_id, job = st.name }
  end
  if spec.sampler == "random" then top = 0 end
  for _, t in ipairs(trials) do
    if not t.trial then
      top = top + 1
      t.trial = top
    end
  end
  table.sort(trials, function(a, b) return a.trial < b.trial end)
  return trials
end

-- The sweep as one run whose swept step is an Azure ML sweep job; its
-- trials are recorded (trials.jsonl, synced) as soon as the job's records
-- are read, before the steps after it run.  aml: {plan = flow.sweep_job's
-- plan}, and on a resume the run the interrupted sweep started (run) and the
-- sweep job it submitted (jobs), which this run adopts (waiting for it, or
-- reading a finished one's records again) instead of sending another.  Returns the
-- trials, whether it was interrupted, and whether the run completed.
local function run_sweep_job(p, o, spec, id, values, aml, log)
  local plan, trials = aml.plan, {}
  local opts = { env = o.env, params = trial_params(o, values[1]), jobs = o.jobs, force = o.force,
                 name = o.name or ("sweep " .. id), sweep_job = plan,
                 started = function(run_id)
                   log:append(core.json_encode({ azureml_run = run_id }))
                   log:sync()
                 end,
                 sweep_trials = function(records, run_id)       -- -> the best trial's job and metric
                   trials = job_trials(records, spec, values, plan, run_id)
                   for _, t in ipairs(trials) do log:append(core.json_encode(t)) end
                   log:sync()
                   local best = ranked(trials, spec.goal)[1]
                   if best and best.metric ~= nil then return best.job, best.metric end
                 end }
  if aml.run then opts.resume = { run = aml.run, completed = {}, remote_jobs = aml.jobs } end
  core.ui_info(string.format("sweep %s: step '%s' as one Azure ML sweep job (%s, %d trials, %d at once)", id,
                             plan.step, spec.sampler, plan.sweep.limits.maxTotalTrials,
                             plan.sweep.limits.maxConcurrentTrials))
  local ok, r = pcall(runner.run, p, opts)
  if not ok then
    if not util.is_setup_error(r) then error(r, 0) end
    core.ui_error(r.setup_error)
    return trials, false, false
  end
  return trials, r.code == 130, r.code == 0
end

-- ---- reporting ------------------------------------------------------------

local fmt_value = report.value_text

-- The table's cells: a header and a row per trial, best first.
local function table_cells(order, keys, metric, best)
  local cells = { { "", "trial" } }
  for _, k in ipairs(keys) do cells[1][#cells[1] + 1] = k end
  for _, h in ipairs({ metric, "status", "time", "run" }) do cells[1][#cells[1] + 1] = h end
  for _, t in ipairs(order) do
    local row = { t == best and "*" or "", tostring(t.trial) }
    for _, k in ipairs(keys) do row[#row + 1] = fmt_value(t.params[k]) end
    row[#row + 1] = t.metric and fmt_value(t.metric) or "-"
    row[#row + 1] = t.status .. (t.status == "ok" and t.metric == nil and " (no metric)" or "")
    row[#row + 1] = util.short_duration(t.elapsed)
    row[#row + 1] = t.run_id or "-"
    cells[#cells + 1] = row
  end
  return cells
end

local function csv_field(v)
  v = v == nil and "" or report.exact_text(v)              -- (--grid k=[1,2], k=null: as JSON)
  if v:find('[,"\n\r]') then v = '"' .. v:gsub('"', '""') .. '"' end
  return v
end

local function results_csv(order, keys, metric)
  local lines = {}
  local head = { "trial" }
  for _, k in ipairs(keys) do head[#head + 1] = k end
  for _, h in ipairs({ metric, "status", "elapsed", "run_id", "error" }) do head[#head + 1] = h end
  for i, h in ipairs(head) do head[i] = csv_field(h) end
  lines[1] = table.concat(head, ",")
  for _, t in ipairs(order) do
    -- (by position: a value that is nil, a failed trial's metric, leaves its
    -- column empty; #row + 1 put the next value there, under its heading)
    local row, at = { t.trial }, 1
    for _, k in ipairs(keys) do at = at + 1; row[at] = t.params[k] end
    row[at + 1], row[at + 2], row[at + 3] = t.metric, t.status, string.format("%.3f", t.elapsed)
    row[at + 4], row[at + 5] = t.run_id, t.error
    local cells = {}
    for i = 1, #head do cells[i] = csv_field(row[i]) end
    lines[#lines + 1] = table.concat(cells, ",")
  end
  return table.concat(lines, "\n") .. "\n"
end

local function results_json(id, o, spec, order, best)
  local trials = {}
  for i, t in ipairs(order) do
    trials[i] = { trial = t.trial, params = t.params, metric = t.metric, metrics = t.metrics, status = t.status,
                  elapsed = t.elapsed, run_id = t.run_id, error = t.error, best = t == best }
  end
  return core.json_encode({ id = id, metric = o.metric, goal = spec.goal, sampler = spec.sampler,
                            seed = spec.sampler == "random" and spec.seed or nil, trials = trials,
                            best = best and best.trial or nil }) .. "\n"
end

-- ---- resuming ---------------------------------------------------------------
--
-- A sweep's directory keeps what it was started with (sweep.json: the
-- metric, the goal, the trials' values, the parameters under them) and a
-- line per trial that ended (trials.jsonl, appended and synced as each ends,
-- so a kill -9 loses none).  `resume` runs the trials that did not succeed.

local function spec_json(id, o, spec, values, aml)
  return core.json_encode({ id = id, metric = o.metric, goal = spec.goal, sampler = spec.sampler,
                            seed = spec.seed, keys = spec.keys, trials = values, params = o.params,
                            early_stop = spec.early_stop, azureml = aml, parallel = o.parallel,
                            env = o.env or runner.defaults.env, params_spec = runner.defaults.params_spec,
                            conf = runner.defaults.conf }) .. "\n"
end

-- The sweep `want` names (true: the latest; else an id or a unique prefix).
local function find_sweep(want, level)
  local ids = {}
  for _, name in ipairs(core.list_dir(M.DIR) or {}) do ids[#ids + 1] = name end
  table.sort(ids)
  if #ids == 0 then util.setup_error("flow.sweep: resume: no sweep in " .. M.DIR .. " to resume") end
  if want == true then return ids[#ids] end
  if type(want) ~= "string" or want == "" then
    util.fail(level + 1, "flow.sweep: resume must be true (the latest sweep) or a sweep's id, got %s", tostring(want))
  end
  local id, matches = util.find_id(ids, want)
  if id then return id end
  util.setup_error(string.format("flow.sweep: resume: %s (sweeps: %s)", #matches > 1 and
    string.format("'%s' starts %d sweeps' ids", want, #matches) or string.format("no sweep '%s' in %s", want, M.DIR),
    table.concat(ids, ", ", math.max(1, #ids - 4))))
end

local resume_fields = { pipeline = true, resume = true, jobs = true, force = true, quiet = true }

-- flow.sweep{pipeline =, resume =}: the sweep's saved options, its trials'
-- values and the trials it finished well ({[i] = trial}).
local function resumed(o, level)
  for k in pairs(o) do
    if not resume_fields[k] then
      util.fail(level + 1, "flow.sweep: %s = cannot change a sweep being resumed (it keeps the trials, metric and "
        .. "parameters it was started with; it may take jobs, force and quiet)", tostring(k))
    end
  end
  local id = find_sweep(o.resume, level + 1)
  local dir = M.DIR .. "/" .. id
  local text = core.read_file(dir .. "/sweep.json")
  local ok, saved = pcall(core.json_decode, text or "")
  if not text or not ok or type(saved) ~= "table" or type(saved.metric) ~= "string" or type(saved.trials) ~= "table"
     or type(saved.keys) ~= "table" then
    util.setup_error(string.format("flow.sweep: resume: %s/sweep.json is missing or damaged: the sweep cannot be resumed", dir))
  end
  local done, prior = {}, nil
  for _, t in ipairs(require("flow.state").read_journal(dir .. "/trials.jsonl") or {}) do
    if math.type(t.trial) == "integer" and (t.status == "ok" or t.status == "stopped") and type(t.params) == "table" then
      done[t.trial] = t
    elseif type(t.azureml_run) == "string" then
      prior = t.azureml_run                        -- the run that submitted the sweep job
    end
  end
  local opts = { pipeline = o.pipeline, metric = saved.metric, goal = saved.goal, params = saved.params,
                 env = saved.env, jobs = o.jobs, force = o.force, quiet = o.quiet,
                 parallel = math.type(saved.parallel) == "integer" and saved.parallel > 0 and saved.parallel or nil }
  -- the command line's --params and --conf of the sweep, for its trials' runs
  runner.defaults.params_spec = type(saved.params_spec) == "string" and saved.params_spec or nil
  runner.defaults.conf = type(saved.conf) == "string" and saved.conf or runner.defaults.conf
  local spec = { goal = saved.goal == "max" and "max" or "min", sampler = saved.sampler == "random" and "random" or "grid",
                 keys = saved.keys, seed = saved.seed,
                 early_stop = saved.early_stop ~= nil and early_stop.check(saved.early_stop, level + 1) or nil }
  local aml = type(saved.azureml) == "table" and saved.azureml or nil
  -- that run's journal: whether it completed (a later one would start
  -- afresh), and the sweep job it submitted, to wait for instead of a new one
  local finished, jobs = false, {}
  for _, ev in ipairs(aml and prior and require("flow.state").read_journal(".flow/runs/" .. prior .. "/journal.jsonl")
                      or {}) do
    if ev.event == "run_end" then finished = ev.code == 0 end
    if ev.event == "remote_job" and ev.step == aml.step and type(ev.job) == "string" then
      jobs[aml.step] = { job = ev.job, fp = ev.fp or "" }
    end
  end
  -- a null value (--grid k=null) reads back as no value: it is null again,
  -- in the trials to run and in those done
  local function nulls_back(t)
    for _, k in ipairs(spec.keys) do
      if type(t) == "table" and t[k] == nil then t[k] = core.json_null end
    end
  end
  for _, t in ipairs(saved.trials) do nulls_back(t) end
  for _, t in pairs(done) do nulls_back(t.params) end
  return opts, spec, saved.trials, id, done, aml and { plan = aml, run = prior, jobs = jobs, finished = finished } or nil
end

-- flow.sweep{...} -> the trials, best first ({trial =, params =, metric =,
-- metrics =, status =, elapsed =, run_id =, error =}), with .best (the best
-- trial, or nil when none succeeded with the metric), .id and .dir.
function M.sweep(o)
  runner.refuse_if_describing("flow.sweep")
  local p, spec, values, id, done, aml, trial_plan, shared
  if type(o) == "table" and o.resume ~= nil then
    p = check_pipeline(o.pipeline, 2)
    o, spec, values, id, done, aml = resumed(o, 2)
  else
    p, spec = check_opts(o, 2)
    local space = o.grid or o.space
    values = spec.sampler == "grid" and grid_trials(space, spec.keys)
             or random_trials(space, spec.keys, spec.trials, spec.seed)
    -- (the first trial's plan loads conf/ with the swept values; only when
    -- it cannot is conf/ loaded again, to say whether they were the cause)
    trial_plan = prepared(p, o, values)
    if not trial_plan then check_settable(o, values) end
    id, done = core.run_id(M.DIR), {}
    local plan = azureml_plan(trial_plan, o, spec, values)
    aml = plan and { plan = plan }
    if not plan and trial_plan and (o.parallel or 1) > 1 then       -- refused before the sweep is made
      local swept
      shared, swept = shared_steps(trial_plan, spec.keys)
      check_parallel(trial_plan, swept, o.parallel)
    end
    core.write_atomic(M.DIR .. "/" .. id .. "/sweep.json", spec_json(id, o, spec, values, plan))
  end
  local dir = M.DIR .. "/" .. id
  local n_done = 0
  for _ in pairs(done) do n_done = n_done + 1 end
  core.ui_info(string.format("sweep %s: %d trial%s of %s, ranked by %s (%s)%s", id, #values,
                             #values == 1 and "" or "s", table.concat(spec.keys, ", "), o.metric, spec.goal,
                             n_done > 0 and string.format("; resumed: %d done before", n_done) or ""))
  local trials, interrupted = {}, false
  local log <close> = setmetatable({ j = cache.journal(dir .. "/trials.jsonl") },
                                   { __close = function(l) l.j:close() end })
  local completed = false
  if aml and aml.finished then                     -- its run completed: the trials are all there are
    for _, t in pairs(done) do trials[#trials + 1] = t end
    completed = true
  elseif aml then
    trials, interrupted, completed = run_sweep_job(p, o, spec, id, values, aml, log.j)
  end
  local parallel = not aml and math.min(o.parallel or 1, #values) or 1
  -- the values the trials keep: those of the steps they share (a value made
  -- from a swept parameter serves one trial only); all when that is unknown
  local keep, swept
  if not aml then
    trial_plan = trial_plan or prepared(p, o, values)
    if trial_plan then
      if not shared then shared, swept = shared_steps(trial_plan, spec.keys) end    -- (resumed)
      keep = {}
      for _, name in ipairs(shared) do keep[name] = true end
    end
  end
  if parallel > 1 then
    local ran
    ran, interrupted = run_parallel(p, o, spec, id, values, done, parallel, log.j, trial_plan, shared, keep, swept)
    if ran then
      for i in pairs(done) do trials[#trials + 1] = done[i] end
      for _, t in ipairs(ran) do trials[#trials + 1] = t end
    else
      parallel, interrupted = 1, false
    end
  end
  if not aml and parallel == 1 then      -- one trial after another
    for i in ipairs(values) do
      if done[i] then
        trials[#trials + 1] = done[i]
      elseif not interrupted then      -- after Ctrl-C: the trials done before are still reported
        local t = one_trial(p, o, spec, id, values, i, trials, log.j, nil, keep)
        trials[#trials + 1] = t
        interrupted = t.status == "interrupted" or core.interrupted() > 0
      end
    end
  end
  local order = ranked(trials, spec.goal)
  local best = order[1] and order[1].status == "ok" and order[1].metric ~= nil and order[1] or nil
  core.write_atomic(dir .. "/results.csv", results_csv(order, spec.keys, o.metric))
  core.write_atomic(dir .. "/results.json", results_json(id, o, spec, order, best))
  core.write_atomic(dir .. "/report.html", report.html(order, spec.keys, best,
    { id = id, metric = o.metric, goal = spec.goal, sampler = spec.sampler,
      seed = spec.sampler == "random" and spec.seed or nil }))
  if not o.quiet then util.print_table(table_cells(order, spec.keys, o.metric, best)) end
  local failed = 0
  local stopped = 0
  for _, t in ipairs(trials) do
    if t.status == "stopped" then stopped = stopped + 1 elseif t.status ~= "ok" then failed = failed + 1 end
  end
  -- a sweep job's trials that failed, or that its policy stopped, left no
  -- record; the job is over, so --resume has nothing to finish
  local unrecorded = aml and completed and math.max(0, #values - #trials) or 0
  core.ui_info(string.format("sweep %s: %d of %d trials ok%s%s%s; results in %s/ (report.html, results.csv, results.json)%s",
                             id, #trials - failed - stopped, #values,
                             stopped > 0 and string.format(", %d stopped early", stopped) or "",
                             unrecorded > 0 and string.format(", %d failed or stopped on Azure ML (see the sweep "
                               .. "job in Azure ML studio)", unrecorded) or "",
                             best and string.format(", best: trial %d (%s %s)", best.trial, o.metric,
                                                    fmt_value(best.metric)) or ", no trial has the metric", dir,
                             (interrupted or failed > 0 or (aml and not completed)) and ("; finish it with: flow "
                               .. "sweep --resume " .. id) or ""))
  order.best, order.id, order.dir = best, id, dir
  -- `flow run driver.lua` exits as the sweep went: 0 when a trial is best
  runner.last_code = interrupted and 130 or best and 0 or 1
  return order
end

return M
