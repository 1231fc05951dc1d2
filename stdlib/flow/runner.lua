-- flow.runner: flow.run(pipeline, opts).  Builds the DAG in C, then runs each
-- step on its own coroutine under the C scheduler.  Values between Lua steps
-- stay in memory; a command gets files (in-memory values are written as JSON,
-- or as text when they are strings), and its outputs are moved into place only
-- after it succeeded.  Datasets the catalog persists are loaded and saved
-- through flow.catalog.
--
-- Incremental runs: before a ready step starts, the scheduler asks whether
-- it is up to date.  A command step goes first to the engine's check
-- (engine/uptodate.c, set up by Run:engine_check), which passes it without
-- entering Lua when it is sure; any other step, and one the engine cannot
-- decide, comes to Run:up_to_date(i), which computes the step's fingerprint
-- (flow.fingerprint) and compares it with the step's last successful run
-- (flow.state).  A step whose fingerprint and outputs still hold is not run,
-- and its recorded outputs stand in for it.  Every run keeps a journal (.flow/runs/<id>/
-- journal.jsonl) that --resume and the next run read.
--
-- The run is split by concern: flow.plan (everything before any step runs),
-- flow.values (datasets: values, paths, staging and commit), flow.incremental
-- (up-to-date decisions), flow.execute (one attempt of a step), and this file
-- (a step's attempts and journal events, the run's record).
local core = require("flow.core")
local sched = require("flow.sched")
local util = require("flow.util")
local pipeline = require("flow.pipeline")
local cache = require("flow.cache")
local fingerprint = require("flow.fingerprint")
local state_mod = require("flow.state")
local credentials = require("flow.credentials")
local plan_mod = require("flow.plan")
local catalog = require("flow.catalog")
local dag = require("flow.dag")
local values = require("flow.values")
local execute = require("flow.execute")
local failure = require("flow.failure")
local remote = require("flow.remote")
local metrics = require("flow.metrics")
local tasks = require("flow.tasks")
local incremental = require("flow.incremental")
local values_c = require("flow.values_c")

local M = {}

local DATA = values.DATA
local GC_BEFORE_RUN_KB = 4096  -- a Lua heap this large is collected once before the run (M.run)
local RUN_GC_PAUSE = 200      -- the collector's pause (%) while runs are under way (M.run)
local pause_before_runs       -- what it was before


-- Runs started by this process, so `flow run driver.lua` (a script that calls
-- flow.run itself, a sweep) can exit with its last run's status.
M.runs_started, M.last_code = 0, nil
M.running = 0                  -- runs under way in this process (a step's own flow.run, flow.spawn's)
-- The project's state while a run is under way: a run a step starts (flow.run
-- in a step's function) shares it.  Loading its own would fold the journal of
-- the run around it, half written, and mark that run merged (a kill of it
-- then lost the steps it had finished), and the outer run's save, finding
-- the file changed under it, would write its own view over the inner's
-- records.
local running_state = nil
local is_failure, step_failure = failure.is, failure.new
local first_line = failure.first_line
local step_secrets = execute.step_secrets

M.resolve_dist = plan_mod.resolve_dist
M.build_graph = plan_mod.build_graph
M.pools = plan_mod.pools
M.print = execute.print
M.ChildDone = execute.ChildDone

local Run = {}
Run.__index = Run
for _, part in ipairs({ values, execute, incremental, (require("flow.transfer")) }) do
  for name, f in pairs(part.methods) do Run[name] = f end
end

-- An error raised by a step's code, as Run:attempt reports it.
local function on_step_error(e)
  if is_failure(e) then return e end
  if util.is_fs_error(e) then return step_failure { message = e.fs_error, on_disk = true } end
  local msg = util.error_message(e)      -- error({}) or error(): where, and what was raised
  return { traceback = debug.traceback(msg, 2), message = msg }
end

-- A step stopped by sched.guard (its code cannot catch that): Ctrl-C, its
-- timeout, or os.exit, which must not end flow without its journal and summary.
local function cancelled_failure(n, c, calling)
  if c.cancelled == "exit" and calling then            -- a producer called again for n's input
    return step_failure { message = string.format("step '%s' called os.exit(%d) when it was called again for "
      .. "step '%s' (its value is not kept between runs), which a step cannot do: return its outputs, or raise an "
      .. "error to fail it", calling.name, c.code, n.name) }
  elseif c.cancelled == "timed out" and is_failure(c.error) and c.error.timed_out then
    return c.error                      -- a command's, which says what it stopped
  elseif c.cancelled == "timed out" then
    return step_failure { timed_out = true, message = string.format(
      "step '%s' timed out after %s", n.name, util.format_duration(n.timeout or 0)) }
  elseif c.cancelled == "exit" then
    return step_failure { message = string.format("step '%s' called os.exit(%d), which a step cannot do: "
      .. "return its outputs, or raise an error to fail it", n.name, c.code) }
  end
  return step_failure { message = string.format("step '%s' stopped (interrupted)", n.name), quiet = true }
end

-- Runs at once in one process (flow.spawn) must not share a file that one
-- of them writes: the second writer would replace the first's output under
-- the first's record, a reader would read the other run's bytes and record
-- them as its own producer's, and later runs would trust either record.  A
-- run claims each path the catalog keeps as one of its steps is about to
-- write it, or to read it (not a versioned one's: each run reads and writes
-- versions of its own), until the run ends; a step whose claim meets another
-- run's (a write against either, a read against a write) fails at once,
-- naming the other run.  (flow.sweep refuses such trials before they start.)
local claims = {}          -- path -> {[run] = "w" | "r"}

local function catalog_path(self, e)
  return (e.uri and e.uri .. "/" or "") .. self.cat:save_path(e):gsub("^%./", ""):gsub("//+", "/")
end

-- nil, or the failure of step n, which would write a file a run at once
-- reads or writes, or read one it writes; else its paths are claimed.
function Run:claim_paths(n)
  local want = {}          -- path -> {how =, io =, input =}
  for _, io in ipairs(n.outputs) do
    local e = self.cat:entry(io.dataset)
    if catalog.persisted(e) then want[catalog_path(self, e)] = { how = "w", io = io } end
  end
  for _, io in ipairs(n.inputs) do
    local e = not dag.is_param_input(io.dataset) and self.cat:entry(io.dataset)
    if e and catalog.persisted(e) and not e.versioned then
      local path = catalog_path(self, e)
      want[path] = want[path] or { how = "r", io = io, input = true }
    end
  end
  for _, path in ipairs(util.sorted_keys(want)) do
    local w = want[path]
    for run, how in pairs(claims[path] or {}) do
      if run ~= self and (w.how == "w" or how == "w") then
        return step_failure { no_retry = true, message = string.format("step '%s': %s '%s' (%s) is %s by another "
          .. "run at once (%s): runs at once (flow.spawn) must not share a file that one of them writes; make '%s' "
          .. "versioned, give each run a path of its own, or run them one after the other", n.name,
          w.input and "input" or "output", w.io.dataset, path, how == "w" and "written" or "read",
          run.label or run.run_id, w.io.dataset) }
      end
    end
  end
  for path, w in pairs(want) do
    claims[path] = claims[path] or {}
    if claims[path][self] ~= "w" then claims[path][self] = w.how end
    self.claimed[#self.claimed + 1] = path
  end
end

local function release_claims(run)
  for _, path in ipairs(run.claimed) do
    local holders = claims[path]
    if holders then
      holders[run] = nil
      if next(holders) == nil then claims[path] = nil end
    end
  end
end

-- One attempt of step n (the graph's step i); returns ok, err.  (Its
-- deadline is engine/step.c's, which the guard and a process's wait read.)
function Run:attempt(n, i)
  if self.claimed and not self.remote[i] then
    local clash = self:claim_paths(n)
    if clash then return false, clash end
  end
  local body = self.remote[i] and self.run_remote or n.kind == "func" and self.run_function or self.run_command
  return self:guarded(n, sched.guard(on_step_error, body, self, n, i))
end

-- What sched.guard returned for step n: true, or false and the failure (a
-- traceback for an error of the step's own code).
function Run:guarded(n, ok, err)
  local calling = self.recomputing and self:recompute_over(coroutine.running())
  if ok then return true end
  if err.on_disk then err.message = string.format("step '%s': %s", n.name, err.message) end
  if is_failure(err) then return false, err end
  if err.cancelled then return false, cancelled_failure(n, err, calling and self.nodes[calling]) end
  return false, err.traceback
end

-- The body of a step (engine/step.c owns its life: retries and their
-- back-off, the timeout of each attempt, the journal, run.json).  Attempt k
-- of step i, on the step's own coroutine.  Returns
--   true, {outputs = JSON text, paths = {files and trees it put in place}, exit_code =,
--          metrics =, series = JSON text (flow.metrics)}
--   false, {message =, report = what to print (nil: nothing), tail = stderr's last
--           lines, timed_out =, exit_code =, final = no retry would mend it}
-- (A plain Lua step's attempt is lua/plain_step.c's, which comes to
-- Run:plain_tail for what is not common.)
function Run:attempt_body(i, k)
  local n = self.nodes[i]
  local rec = self:attempt_record(n, k)
  if self.remote[i] then rec.fp = sched.fingerprint() end     -- its job's name and tags (flow.remote)
  local co = coroutine.running()
  local reports = n.metrics
  if reports then metrics.collect(co, n, self.on_log) end
  local ok, err = self:attempt(n, i)
  local logged = reports and metrics.logged(co)
  if reports then metrics.stop(co) end
  return self:attempt_end(i, n, ok, err, logged)
end

-- Step n's record, started for its attempt k (what an attempt sets is its own).
function Run:attempt_record(n, k)
  local rec = self.records[n.name]
  rec.attempts, rec.metrics, rec.outputs, rec.outputs_json = k, nil, nil, nil
  return rec
end

-- The stdlib's part of attempt k of plain step i (lua/plain_step.c): what
-- sched.guard returned for values_c.call there, when the attempt did not
-- end in C.
function Run:plain_tail(i, k, ok, json, results)
  if ok and json == nil and results == nil then return self:attempt_body(i, k) end   -- not called: all the stdlib's
  local n = self.nodes[i]
  local rec = self:attempt_record(n, k)
  if ok and json then                          -- recorded in C; the step printed
    rec.outputs_json = json
    self.bodies_in_c = (self.bodies_in_c or 0) + 1
  elseif ok then                               -- the results are the stdlib's to save
    ok, json = sched.guard(on_step_error, self.save_results, self, n, results, self:unkept_namer(n, i))
  end
  return self:attempt_end(i, n, self:guarded(n, ok, json))
end

-- The end of an attempt of step i (n): what Run:attempt_body returns.
function Run:attempt_end(i, n, ok, err, logged)
  local rec = self.records[n.name]
  if rec.print_log then rec.print_log:close(); rec.print_log = nil end
  self.printed[i] = nil
  if ok then
    local paths, outs = nil, rec.outputs        -- (nil: none, as for most Lua steps)
    if outs then
      for _, io in ipairs(n.outputs) do
        local out = outs[io.dataset]
        if out and out.path then
          paths = paths or {}
          paths[#paths + 1] = out.path
        end
      end
    end
    if rec.metrics or logged then
      local m = metrics.with_logged(rec.metrics, logged)
      rec.metrics = m and next(m.values) and m or nil
    end
    -- the journal's, and the state record's (as text already from a step run in C)
    local outputs = rec.outputs_json or outs and util.record_json(outs)
    rec.outputs, rec.outputs_json = nil, nil    -- engine/step.c records them: a run of 100,000 steps keeps no copy
    -- nor the record itself, unless the result needs it (why it ran, what it reported)
    local m = rec.metrics
    if not rec.reason and not m then self.records[n.name] = nil end
    self:release_inputs(i)
    if not (paths or rec.exit_code or rec.remote or m) then return true, { outputs = outputs } end   -- most steps
    return true, { outputs = outputs, paths = paths, exit_code = rec.exit_code,
                   remote = rec.remote and util.record_json(rec.remote),
                   metrics = m and util.record_json(m.values),
                   series = m and m.series and util.record_json(m.series) }
  end
  local f = is_failure(err)
  local text = f and err.message or tostring(err)
  local shown
  if not f then shown = string.format("step '%s' failed: %s", n.name, util.user_traceback(text))
  elseif not err.quiet then shown = err.message end
  -- the retry's warning names the step itself: "step 'x' <reason> (attempt …)",
  -- the failure without its name ("failed (exit code 1)", "timed out after
  -- 5s"), and "failed: <why>" for a message that is not a sentence about it
  local named = "step '" .. n.name .. "'"
  local rest = text:sub(1, #named) == named and text:sub(#named + 1)
  local reason = rest and not rest:find("^%s*:") and rest:gsub("^%s*", "")
                 or "failed: " .. (rest and rest:gsub("^%s*:%s*", "") or text)
  return false, { message = text, report = shown, tail = f and err.stderr_tail or nil, reason = reason,
                  timed_out = f and err.timed_out or nil, exit_code = rec.exit_code,
                  final = f and err.no_retry or nil,         -- (a retry would fail the same way)
                  remote = rec.remote and util.record_json(rec.remote) }
end

-- body.plain for flow.sched: the attempt of the run's plain Lua steps in C
-- (lua/plain_step.c), or nil when none is plain.  Not for a run that claims
-- the paths it writes (runs at once), nor one that keeps values by name (a
-- sweep's trials), nor under FLOW_DEBUG_LUA_BODIES (execute.lua).
function Run:plain_body(plan)
  if self.claimed or self.keep_values ~= nil or execute.lua_bodies then return nil end
  local steps = values_c.plain_steps(plan.graph, plan.nodes, plan.remote, self.may_keep)
  if not steps:find("[\1\2]") then return nil end
  local attempt = values_c.plain_attempt {
    guard = sched.guard, handler = on_step_error, call = values_c.call, values = self.values, nodes = self.nodes,
    cat = self.cat, inline_max = state_mod.INLINE_MAX, namer = self:namer(), steps = steps,
    tail = function(i, k, ...) return self:plain_tail(i, k, ...) end,
    count_down = self.graph.count_down, graph = self.graph, left = function() return self:readers_left() end,
    let_go = values.LET_GO,
    printed = self.printed,
  }
  return { attempt = attempt, steps = steps }
end

-- At step i's start, when the engine's check did not compute its
-- fingerprint: the one up_to_date computed, and its parts (JSON) for the
-- journal and the step's record (engine/step.c keeps both from here).
function Run:take_fingerprint(i)
  local pending = self.pending[i]
  if not pending then return nil end
  self.pending[i] = nil
  return pending.fp, core.json_encode(fingerprint.short(pending.parts))   -- hashes: never masked
end

-- What the command line chose ({env =, params_spec =, conf =, pipeline =}); flow.run
-- calls from a driver script start from it.
M.defaults = {}

-- --resume runs with the parameters the run had, or not at all: the same
-- command line may give others (conf/ edited since), and a resumed run that
-- mixed two sets of parameters would look finished.
local function check_resumed_params(plan, resume)
  if type(resume.params_hash) ~= "string" then return end     -- (a journal from before the check)
  if fingerprint.hasher():value(plan.settings.params) == resume.params_hash then return end
  util.setup_error(string.format("--resume: the parameters differ from run %s's (conf/ or the script "
                                 .. "changed since); start a new run instead", resume.run))
end

-- Everything a run or a listing needs before any step runs (flow.plan); a
-- resumed run's checks too, so that --dry-run refuses what the run would.
function M.prepare(p, opts, level)
  local plan = plan_mod.prepare(p, opts, M.defaults, (level or 1) + 1)     -- not a tail call: one more level
  if opts.resume then check_resumed_params(plan, opts.resume) end
  return plan
end

local function new_run(plan, opts, run_id, st)
  local run_dir = ".flow/runs/" .. run_id
  local among_others = tasks.current() ~= nil
  local self = setmetatable({
    nodes = plan.nodes, graph = plan.graph, selected = plan.selected,
    settings = plan.settings, params = plan.settings.params, verbose = opts.verbose, records = {},
    dists = plan.dists, mode = plan.mode, cat = plan.cat, state = st, pending = {},
    remote = plan.remote, aml = plan.aml, remote_prior = opts.resume and opts.resume.remote_jobs or {},
    memo = { code = {}, refs = {},    -- by command text: its code and files; its ${params.} keys
             params = {} },           -- by parameter key: its value's hash
    hc = tasks.shared("hashes", function() return cache.hashes(state_mod.CACHE .. "/hashes") end),
    hasher = fingerprint.hasher(), root = core.cwd(), on_log = opts.on_log,
    -- a run among others at once (flow.spawn) keeps its commands' files apart,
    -- and its lines say which it is
    data_dir = among_others and run_dir .. "/data" or DATA,
    claimed = among_others and {} or nil,     -- the catalog paths it writes (Run:claim_outputs)
    label = among_others and opts.label or nil,
    downloads_dir = among_others and require("flow.transfer").DOWNLOADS .. "/" .. run_id or nil,
    force = opts.force, explain = opts.explain, command_line = opts.command_line,
    keep_values = opts.keep_values,     -- (a sweep's trials: true, or {step name = true}: flow.values)
    completed = opts.resume and opts.resume.completed or {},
    sweep_job = opts.sweep_job, on_sweep_trials = opts.sweep_trials,     -- (flow.sweep_job)
    sweep_step = opts.sweep_job and opts.sweep_job.step,                  -- the step it runs, or nil
    defaults = M.defaults, run_id = run_id, run_dir = run_dir, log_dir = run_dir .. "/logs", tmp_dir = ".flow/tmp/" .. run_id,
  }, Run)
  self.reporting = plan.reporting           -- the steps that report metrics
  self.printed = {}                         -- [i]: step i's print() opened its log (Run:step_print)
  self.may_keep = {}                        -- the only steps Run:keeps_values may find keeping theirs
  for _, i in ipairs(plan.keepers) do self.may_keep[i] = true end
  -- a step's record, made when it is first used: a no-op run uses none
  setmetatable(self.records, { __index = function(records, name)
    local rec = {}
    records[name] = rec
    return rec
  end })
  self.values = values.outside_inputs(plan, st)
  return self
end

-- Run run_id's journal, .flow/runs/<id>/journal.jsonl, opened with its
-- first line: ev's fields and the command line's (enough for --resume to
-- start the run again the same way, and no secret: a credential among the
-- arguments is masked, and the line says so, for --resume cannot use them);
-- .flow/runs/latest then points at the run.  note: the line is synced only
-- with the first that records work (journal_note).  Used by a run and by
-- `flow run --submit-pipeline`.
function M.start_journal(run_id, ev, note)
  local journal = cache.journal(state_mod.RUNS .. "/" .. run_id .. "/journal.jsonl")
  ev.event, ev.run, ev.cwd, ev.args = "run_start", run_id, M.defaults.cwd, M.defaults.args
  ev.script, ev.flow_version = ev.script or M.defaults.script, require("flow").VERSION
  ev.time = ev.time or core.time()
  if util.record_json(ev) ~= core.json_encode(ev) then ev.redacted = true end
  journal:append(util.record_json(ev), note)
  -- latest is the run the command line started: not one a step starts
  -- within it (flow status, a plain --resume), nor the second of runs at once
  if M.running == 0 then core.symlink(run_id, ".flow/runs/latest") end
  return journal
end

-- What the journal's first line says of the run (values are hashed).
function Run:start_journal(plan, opts)
  -- synced with the first line that records work: a run in which nothing
  -- runs syncs nothing (its journal only says so)
  self.journal = M.start_journal(self.run_id, {
    time = plan.started, env = plan.settings.env, params_hash = self.hasher:value(self.params),
    resumes = opts.resume and opts.resume.run, steps = #plan.nodes, name = opts.name,
    -- a run flow.run started (a driver script, the REPL's run{}, a sweep's
    -- trial) has no command line of its own: --resume refuses it
    via = not opts.command_line and "flow.run" or nil }, true)
end

local EMPTY_RECORD = {}      -- a step whose record the run did not keep

-- result.steps, made on first use ({name = {state =, elapsed =, reason =}}):
-- `flow run` reads it only after a failure, and 100,000 small tables are a
-- tenth of a no-op run of 100,000 steps.  A step the engine's check found
-- without a record ran for that reason.
local function lazy_steps(result, nodes, records, states, elapsed, check)
  return setmetatable(result, { __index = function(t, k)
    if k ~= "steps" then return nil end
    local steps = {}
    for i, n in ipairs(nodes) do
      local rec = rawget(records, n.name) or EMPTY_RECORD     -- (records[] would make one a step)
      local reason = rec.reason or check and check:no_record(i) and incremental.NO_RECORD or nil
      steps[n.name] = { state = states[i], elapsed = elapsed[i], reason = reason,
                        metrics = rec.metrics and rec.metrics.values, series = rec.metrics and rec.metrics.series }
    end
    setmetatable(t, nil)
    t.steps = steps
    return steps
  end })
end

-- The metrics of the steps that report them (flow.metrics), in run order:
-- {{name =, metrics =}, ...}.  A step that was up to date reports those of
-- its record, which run.json gets too (through run_rec).
function Run:step_metrics(states, run_rec)
  local out = {}
  for _, i in ipairs(self.reporting) do
    local n = self.nodes[i]
    local rec = self.records[n.name]
    if states[i] == "up to date" then
      local old = self.state.steps[n.name]
      rec.metrics = old and old.metrics or nil
      if rec.metrics then
        run_rec:set_metrics(i, core.json_encode(rec.metrics.values),
                            rec.metrics.series and core.json_encode(rec.metrics.series))
      end
    end
    if rec.metrics and (states[i] == "done" or states[i] == "up to date") then
      out[#out + 1] = { name = n.name, metrics = rec.metrics }
    end
  end
  return out
end

-- What a run hands back: the datasets its steps make that none of them
-- reads (the pipeline's free outputs; of a selection, its own, as Kedro's
-- runner returns the free outputs of the pipeline it ran).
local function result_datasets(graph, nodes, selected)
  if not selected then return graph:unread_outputs() end
  local read, list = {}, {}
  for i, n in ipairs(nodes) do
    if selected[i] then
      for _, io in ipairs(n.inputs) do read[io.dataset] = true end
    end
  end
  for i, n in ipairs(nodes) do
    if selected[i] then
      for _, io in ipairs(n.outputs) do
        if not read[io.dataset] then list[#list + 1] = io.dataset end
      end
    end
  end
  return list
end

-- The run's result for flow.run's caller: those outputs, and the metrics.
function Run:result(graph, code, states, elapsed, env, reported)
  local result = lazy_steps({ code = code, run_id = self.run_id, outputs = {}, env = env,
                              status = code == 0 and "ok" or code == 130 and "interrupted" or "failed",
                              metrics = metrics.merge(reported) },
                            self.nodes, self.records, states, elapsed, self.check)
  -- (`flow run` itself shows none: a value not kept is not made for it)
  -- (nor a value not kept that the run did not make: its producer is not
  -- called after the run, where a failure or Ctrl-C would have no step)
  for _, d in ipairs(self.command_line and {} or result_datasets(graph, self.nodes, self.selected)) do
    local v = self.values[d]
    if v and not self:to_make_again(d) then
      local ok, value = pcall(self.value_of, self, d)
      result.outputs[d] = ok and value or v.path
    end
  end
  return result
end

-- A run in which every step was up to date made no logs of its own: say
-- where what the steps made, and what they said, is.
local function nothing_ran(states)
  local up_to_date = 0
  for _, st in ipairs(states) do
    if st == "up to date" then up_to_date = up_to_date + 1
    elseif st ~= "skipped" then return end
  end
  if up_to_date == 0 then return end
  core.ui_info("nothing ran: every step is up to date; their outputs are where earlier runs left them "
               .. "('flow catalog list'), their logs in those runs ('flow logs STEP')")
end

-- flow.run(p, opts) -> result {status =, code =, outputs =, steps =, run_id =}
-- Graph errors raise {graph_error = message}; step failures are in the result.
-- In a script flow list (viz, compile, catalog list; the shells' Tab
-- completion) only describes: its first flow.run, flow.sweep or flow.spawn
-- is refused, before anything runs (cli.lua's load_pipeline sets it).
function M.refuse_if_describing(what)
  if M.describing then
    util.setup_error(string.format("%s describes a pipeline without running it, and %s runs pipelines of its own "
      .. "(%s): give it a script that returns pipeline{...}", M.describing.command, M.describing.script, what))
  end
end

function M.run(p, opts, level)
  M.refuse_if_describing("flow.run")
  opts = opts or {}
  if type(opts) ~= "table" then util.fail((level or 1) + 1, "flow.run: options must be a table, got %s", type(opts)) end
  if M.child then return execute.run_child(M.child, pipeline.is_node(p) and pipeline.pipeline({ p }) or p) end
  local plan = M.prepare(p, opts, (level or 1) + 1)
  local secrets = credentials.check(plan.nodes, plan.commands, plan.credential_readers, plan.settings, plan.cat,
                                 plan.selected)
  for _, i in ipairs(plan.commands) do       -- (only command steps get any)
    local n = plan.nodes[i]
    step_secrets[n] = secrets[n]
  end
  state_mod.lock()
  local run_id = core.run_id(state_mod.RUNS)
  local st = tasks.shared("state", function() return M.running > 0 and running_state or state_mod.load(run_id) end)
  local self = new_run(plan, opts, run_id, st)
  local _ <close> = self.claimed and setmetatable({}, { __close = function() release_claims(self) end }) or nil
  -- Every directory the run writes to, made (or found to be a directory, not
  -- a file or a link) before any step runs: a problem here raises a file-system
  -- error naming it, which the CLI reports with exit status 2.
  -- (The run's own logs/ and .flow/tmp/<id>/ are made when first needed: a
  -- run in which nothing runs makes neither.)
  core.mkdir_p(self.data_dir)
  core.mkdir_p(".flow/tmp")
  core.mkdir_p(state_mod.CACHE)
  self:start_journal(plan, opts)
  M.running = M.running + 1                          -- (start_journal moves latest only when none was under way)
  running_state = running_state or st
  -- While runs are under way, the collector's pause is RUN_GC_PAUSE: the
  -- pause spaces the full collections that Lua's generational collector
  -- falls back to when a major one frees too little, as while a first
  -- run's values pile up.  At 200 % the heap may double with garbage
  -- between two, and at 120 % a first run of 100,000 Lua steps collected
  -- 5 % more often for 8 MB less of its peak (173 against 181 MB, since
  -- one malloc arena serves every thread: lua/main.c); at 160 % it peaked
  -- between the two, and no faster.  Not while a script declares its
  -- steps (its heap grows as they are declared): at 120 % there, a no-op
  -- rerun of 10,000 commands spent twice the collector's instructions.
  if M.running == 1 then pause_before_runs = collectgarbage("setpause", RUN_GC_PAUSE) end
  local _running <close> = setmetatable({}, { __close = function()
    M.running = M.running - 1
    if M.running == 0 then
      running_state = nil
      collectgarbage("setpause", pause_before_runs)
    end
  end })
  if opts.started then opts.started(run_id) end      -- (flow.sweep keeps the id of a sweep job's run)
  local jobs = opts.jobs or core.cpu_count()
  local pools, pool_of, kind_pools = M.pools(plan, jobs)
  if plan.aml then
    local any = plan.on_datastore                 -- a dataset the catalog keeps on a datastore
    for i in pairs(plan.remote) do any = any or not plan.selected or plan.selected[i] end
    if any then
      remote.connect(plan.aml, opts.detach)
      remote.resolve_environments(plan.nodes, plan.remote, plan.aml, plan.selected)
      self:stat_datastore_inputs()
    end
  end
  if not self.force and not self.explain then self.check = self:engine_check(plan) end
  -- The script's and planning's garbage (11 MB of 100,000 Lua steps)
  -- collected before the steps make their own, so that the allocator's
  -- slabs (lua/alloc.c, which keep their peak) are reused rather than grown.
  -- Once: a second full collection (after the script too) raised a first
  -- run of 100,000 Lua steps from 187 to 207 MB, the generational
  -- collector's next major cycle coming later.  Not for a small pipeline,
  -- whose heap (0.7 MB for one step) is mostly the stdlib: a one-step run
  -- paid 0.36 M instructions (4 %) for nothing.  Nor when the check found
  -- every step up to date: the run makes next to nothing then, and the
  -- collection was 25-30 ms of a 0.7 s no-op rerun of 100,000 Lua steps.
  local all_up_to_date = self.check and self.check:all_up_to_date()
  if collectgarbage("count") > GC_BEFORE_RUN_KB and not all_up_to_date then collectgarbage() end
  local code, states, elapsed, run_rec, jerr
  local sched_opts = {
    jobs = jobs, pools = pools, pool = pool_of, kind_pools = kind_pools, keep_going = opts.keep_going,
    selected = plan.selected, journal = self.journal, run_id = run_id, label = self.label,
    state = self.state.store, check = self.check,
    -- a remote job starts once what it is given is on record: --resume adopts
    -- it only then, and a producer run again would give it other inputs
    after_records = next(plan.remote) and plan.remote or nil,
    owner = self,                                    -- what sched.step() names (print() in a step)
  }
  local body = {
    attempt = function(i, k) return self:attempt_body(i, k) end,
    up_to_date = function(i) return self:up_to_date(i) end,
    fingerprint = function(i) return self:take_fingerprint(i) end,
    -- (nothing to attempt when every step was found up to date: a no-op
    -- rerun of 100,000 Lua steps spent 2 % of its time sorting them)
    plain = not all_up_to_date and self:plain_body(plan) or nil,
  }
  -- one of several runs at once: flow.wait_all turns the loop (a task that
  -- cannot yield here, inside a C call such as string.gsub's, runs it itself)
  if tasks.current() and coroutine.isyieldable() then
    local h = sched.start(plan.graph, sched_opts, body)
    tasks.await(h)
    code, states, elapsed, run_rec, jerr = h:result()
  else
    code, states, elapsed, run_rec, jerr = sched.run(plan.graph, sched_opts, body)
  end
  if os.getenv("FLOW_DEBUG_UPTODATE") then     -- what the engine's check did (t_uptodate.sh)
    if self.described_in_c then
      io.stderr:write(string.format("flow: described in C: %d steps\n", self.described_in_c))
    end
    local in_c = (self.bodies_in_c or 0) + (body.plain and values_c.plain_done(body.plain.attempt) or 0)
    if in_c > 0 then                 -- (flow.execute's run_function, plain steps; t_outputs.sh)
      io.stderr:write(string.format("flow: Lua step bodies in C: %d\n", in_c))
    end
    if self.check then
      local st = self.check:stats()
      io.stderr:write(string.format("flow: up-to-date check: %d passed in the engine, %d left to Lua%s\n",
                                    st.passed, st.undecided,
                                    st.no_record > 0 and string.format(", %d without a record", st.no_record) or ""))
      if all_up_to_date then io.stderr:write("flow: every step found up to date before the run\n") end
      if st.deferred > 0 then       -- (a first run's recorder, engine/step.c; t_outputs.sh)
        io.stderr:write(string.format("flow: fingerprints and records made beside the loop: %d\n", st.deferred))
      end
    end
  end
  -- Record what ran: each of these is tried even when one before it failed.
  local problems, seen = {}, {}
  local function problem(err)
    if not util.is_fs_error(err) then error(err, 0) end
    if not seen[err.fs_error] then problems[#problems + 1], seen[err.fs_error] = err.fs_error, true end
  end
  local function record(f, ...)
    local ok, err = pcall(f, ...)
    if not ok then problem(err) end
  end
  if jerr then problem({ fs_error = jerr }) end      -- the last lines and run_end, written by sched.run
  -- What only saves work later is worth a warning, not a failed run.
  local function tidy(f, arg, consequence)
    local ok, err = pcall(f, arg)
    if ok then return end
    if not util.is_fs_error(err) then error(err, 0) end
    core.ui_warn(err.fs_error .. " (" .. consequence .. ")")
  end
  record(self.journal.close, self.journal)
  record(state_mod.save, self.state, run_id)
  tidy(self.hc.save, self.hc, "the next run hashes those files again")
  tidy(core.remove_tree, self.tmp_dir, "flow clean removes it later")
  if self.downloads_dir then tidy(core.remove_tree, self.downloads_dir, "flow clean removes it later") end
  local result = self:result(plan.graph, code, states, elapsed, plan.settings.env, self:step_metrics(states, run_rec))
  record(run_rec.write_summary, run_rec, self.run_dir .. "/run.json",
         { run_id = run_id, status = result.status, code = result.code, env = result.env, started = plan.started,
           name = opts.name,
           metrics = next(result.metrics) and core.json_encode(result.metrics) or nil })
  if #problems > 0 then
    for _, msg in ipairs(problems) do core.ui_error("the run's record is incomplete: " .. msg) end
    if result.code == 0 then
      local ran = run_rec:any_started()
      result.code, result.status = ran and 1 or 2, "failed"
    end
  end
  M.runs_started, M.last_code = M.runs_started + 1, result.code
  if result.code == 0 then nothing_ran(states) end
  if next(result.metrics) then
    core.ui_info((self.label and self.label .. ": " or "") .. "metrics: " .. metrics.describe(result.metrics))
  end
  return result
end

-- flow run --dry-run: which selected steps would run and why, without
-- running anything (a step after one that runs is assumed to run too: its
-- input is not made yet).  Returns rows {name =, runs =, why =}.
function M.dry_run(p, opts)
  local plan = M.prepare(p, opts, 2)
  local self = new_run(plan, opts, "dry-run", state_mod.load(nil))
  local rows, runs = {}, {}
  for _, i in ipairs(plan.graph:order()) do
    if not plan.selected or plan.selected[i] then
      local n = plan.nodes[i]
      local after
      for _, d in ipairs(plan.graph:deps(i)) do
        if runs[d] then after = plan.nodes[d].name break end
      end
      local why
      if after then why = string.format("it reads what '%s' makes, which runs first", after)
      else
        local ok, w = pcall(self.decide, self, i, n)
        if ok then why = w else why = first_line(w) end
        if not why then self:use_recorded(n, self.pending[i].rec) end     -- the record decide judged
      end
      runs[i] = why ~= nil
      rows[#rows + 1] = { name = n.name, runs = why ~= nil, why = why }
    end
  end
  return rows
end

return M
