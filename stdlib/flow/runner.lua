-- flow.runner: flow.run(pipeline, opts).  Builds the DAG in C, then runs each
-- step on its own coroutine under the C scheduler.  Values between Lua steps
-- stay in memory; a command gets files (in-memory values are written as JSON,
-- or as text when they are strings), and its outputs are moved into place only
-- after it succeeded.  Datasets the catalog persists are loaded and saved
-- through flow.catalog.
--
-- Incremental runs: before a ready step starts, the scheduler asks
-- Run:up_to_date(i), which computes the step's fingerprint (flow.fingerprint)
-- and compares it with the step's last successful run (flow.state); a step
-- whose fingerprint and outputs still hold is not run, and its recorded
-- outputs stand in for it.  Every run keeps a journal (.flow/runs/<id>/
-- journal.jsonl) that --resume and the next run read.
--
-- The run is split by concern: flow.plan (everything before any step runs),
-- flow.values (datasets: values, paths, staging and commit), flow.incremental
-- (up-to-date decisions), flow.execute (one attempt of a step), and this file
-- (a step's attempts and journal events, the run's record).
local core = require("flow.core")
local sched = require("flow.sched")
local proc = require("flow.proc")
local util = require("flow.util")
local pipeline = require("flow.pipeline")
local cache = require("flow.cache")
local fingerprint = require("flow.fingerprint")
local state_mod = require("flow.state")
local credentials = require("flow.credentials")
local plan_mod = require("flow.plan")
local values = require("flow.values")
local execute = require("flow.execute")
local failure = require("flow.failure")
-- What flow writes into its own files (journal, run.json, logs' headers)
-- goes through the configuration's redaction, as its messages do
-- (util.record_json for JSON records).
local redact = require("flow.config").redact

local M = {}

local DATA = values.DATA


-- Runs started by this process, so `flow run driver.lua` (a script that calls
-- flow.run itself, a sweep) can exit with its last run's status.
M.runs_started, M.last_code = 0, nil
local StepFailure, step_failure = failure.StepFailure, failure.new
local first_line, report = failure.first_line, failure.report
local printing, step_secrets = execute.printing, execute.step_secrets

M.resolve_dist = plan_mod.resolve_dist
M.build_graph = plan_mod.build_graph
M.pools = plan_mod.pools
M.print = execute.print
M.ChildDone = execute.ChildDone

local Run = {}
Run.__index = Run
for _, part in ipairs({ values, execute, (require("flow.incremental")) }) do
  for name, f in pairs(part.methods) do Run[name] = f end
end

-- One attempt of step n, with its timeout; returns ok, err.
local function on_step_error(e)
  if getmetatable(e) == StepFailure then return e end
  if util.is_fs_error(e) then return step_failure { message = e.fs_error, on_disk = true } end
  return { traceback = debug.traceback(tostring(e), 2), message = tostring(e) }
end

-- A step stopped by sched.guard (its code cannot catch that): Ctrl-C, its
-- timeout, or os.exit, which must not end flow without its journal and summary.
local function cancelled_failure(n, c)
  if c.cancelled == "timed out" and getmetatable(c.error) == StepFailure and c.error.timed_out then
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

function Run:attempt(n)
  if n.timeout then sched.set_deadline(n.timeout) end
  local ok, err = sched.guard(on_step_error, n.kind == "func" and self.run_function or self.run_command, self, n)
  if n.timeout then sched.set_deadline(nil) end
  if not ok and err.on_disk then err.message = string.format("step '%s': %s", n.name, err.message) end
  if ok or getmetatable(err) == StepFailure then return ok, err end
  if err.cancelled then return false, cancelled_failure(n, err) end
  return false, err.traceback
end

-- Append an event (a table, or a line already encoded) to the run's journal
-- (none in a dry run).  Lines are written in batches: with `flush`, or when
-- the last write is 50 ms old.  A pipeline of 100,000 quick Lua steps then
-- makes a few hundred writes, not 200,000, and a long step's end is written
-- at once.  A kill loses at most the last 50 ms of lines: those steps run
-- again on --resume, which is correct, only redundant.
--
-- A line already encoded must have its strings masked (redact) by its maker.
-- Returns true, or false and the file-system error when the journal cannot
-- take the lines (a full disk): the caller decides what that fails.
local FLUSH_EVERY = 0.05

function Run:log(ev, flush)
  if not self.journal then return true end
  local held = self.held
  held[#held + 1] = type(ev) == "string" and ev or util.record_json(ev)
  local now = core.time()
  if flush or now - self.flushed_at >= FLUSH_EVERY then
    local ok, err = pcall(self.journal.append, self.journal, table.concat(held, "\n"))
    self.held, self.flushed_at = {}, now
    if not ok then
      if not util.is_fs_error(err) then error(err, 0) end
      return false, err
    end
  end
  return true
end

-- Runs on the step's own coroutine; returns whether the step succeeded.
-- A failed attempt is retried `retries` times, after 1 s, 2 s, 4 s… (at most 60 s).
function Run:step(i)
  local n = self.nodes[i]
  local rec = self.records[n.name]
  local pending = self.pending[i]
  self.pending[i] = nil
  rec.started = core.time()
  -- A step whose start cannot be recorded does not run (no attempt).
  local ok, err = self:log(string.format('{"event":"step_start","step":%s,"time":%.6f%s}', core.json_encode(redact(n.name)),
                           rec.started, pending and (',"fingerprint":"' .. pending.fp .. '"') or ""))
  if not ok then err = step_failure { message = string.format("step '%s' did not start: %s", n.name, err.fs_error) } end
  printing[coroutine.running()] = { run = self, n = n }
  for attempt = 1, ok and n.retries + 1 or 0 do
    rec.attempts = attempt
    ok, err = self:attempt(n)
    if ok or core.interrupted() > 0 or attempt > n.retries then break end
    local delay = math.min(60, 2 ^ (attempt - 1))
    local reason = first_line(err):gsub("^step '.-'%s*", ""):gsub("^:%s*", "")
    local tail = getmetatable(err) == StepFailure and err.stderr_tail or ""
    core.ui_warn(string.format("step '%s' %s (attempt %d of %d); retrying in %gs%s",
                               n.name, reason, attempt, n.retries + 1, delay, tail))
    proc.sleep(delay)
    if core.interrupted() > 0 then break end
  end
  printing[coroutine.running()] = nil
  if rec.print_log then rec.print_log:close(); rec.print_log = nil end
  rec.finished = core.time()
  local ev = { event = "step_end", step = n.name, time = rec.finished, attempts = rec.attempts,
               elapsed = rec.finished - rec.started, run = self.run_id }
  if ok then
    ev.status, ev.outputs = "ok", rec.outputs
    if pending then ev.fingerprint, ev.parts = pending.fp, fingerprint.short(pending.parts) end
  else
    rec.timed_out = getmetatable(err) == StepFailure and err.timed_out or nil
    rec.error = first_line(err)
    ev.status = core.interrupted() > 0 and "interrupted" or "failed"
    ev.error, ev.exit_code = rec.error, rec.exit_code
    report(n, err)
  end
  local logged, lerr = self:log(ev, n.kind == "command" or ev.elapsed >= FLUSH_EVERY or not ok)
  if ok and not logged then
    -- Its outputs are in place, but with no record of them the step is not done.
    ok, err = false, step_failure { message = string.format("step '%s' ran, but its end cannot be recorded: %s",
                                                            n.name, lerr.fs_error) }
    rec.error = first_line(err)
    report(n, err)
  end
  if ok and pending then
    state_mod.put(self.state, n.name, { fp = pending.fp, parts = ev.parts, outputs = rec.outputs, time = rec.finished })
  end
  return ok
end

-- .flow/runs/<id>/run.json: what ran, when, and how it ended.  Every key is
-- there for every step (null when it does not apply), for other programs.
function Run:write_summary(result, started, states)
  local steps, null = {}, core.json_null
  for i, n in ipairs(self.nodes) do
    local rec = self.records[n.name]
    steps[i] = { name = n.name, state = states[i], started = rec.started or null, finished = rec.finished or null,
                 elapsed = rec.started and rec.finished and (rec.finished - rec.started) or null,
                 attempts = rec.attempts or null, exit_code = rec.exit_code or null, timed_out = rec.timed_out or false,
                 error = rec.error or null }
  end
  steps = core.json_list(steps)
  local summary = { run_id = self.run_id, status = result.status, code = result.code, env = result.env,
                    started = started, finished = core.time(), steps = steps }
  summary.elapsed = summary.finished - started
  core.write_atomic(self.run_dir .. "/run.json", util.record_json(summary, #steps <= 1000) .. "\n")
end

-- What the command line chose ({env =, params_spec =, conf =}); flow.run
-- calls from a driver script start from it.
M.defaults = {}

-- Everything a run or a listing needs before any step runs (flow.plan).
function M.prepare(p, opts, level)
  local plan = plan_mod.prepare(p, opts, M.defaults, (level or 1) + 1)     -- not a tail call: one more level
  return plan
end

local function new_run(plan, opts, run_id, st)
  local run_dir = ".flow/runs/" .. run_id
  local self = setmetatable({
    nodes = plan.nodes, settings = plan.settings, params = plan.settings.params, verbose = opts.verbose, records = {},
    dists = plan.dists, mode = plan.mode, index = {}, cat = plan.cat, state = st, pending = {},
    held = {}, flushed_at = 0,
    memo = { code = {}, refs = {},    -- by command text: its code and files; its ${params.} keys
             params = {} },           -- by parameter key: its value's hash
    hc = cache.hashes(state_mod.CACHE .. "/hashes"), hasher = fingerprint.hasher(), root = core.cwd(),
    force = opts.force, explain = opts.explain, completed = opts.resume and opts.resume.completed or {},
    defaults = M.defaults, run_id = run_id, run_dir = run_dir, log_dir = run_dir .. "/logs", tmp_dir = ".flow/tmp/" .. run_id,
  }, Run)
  for i, n in ipairs(plan.nodes) do self.records[n.name] = {}; self.index[n] = i end
  self.values = values.outside_inputs(plan, st)
  return self
end

-- What the journal's first line says of the run: enough for --resume to
-- start it again the same way, and no secrets (values are hashed).
function Run:log_start(plan, opts)
  local ev = { event = "run_start", run = self.run_id, time = plan.started, cwd = M.defaults.cwd,
               args = M.defaults.args, script = M.defaults.script, env = plan.settings.env,
               params_hash = self.hasher:value(self.params), resumes = opts.resume and opts.resume.run,
               steps = #plan.nodes, flow_version = require("flow").VERSION }
  if util.record_json(ev) ~= core.json_encode(ev) then ev.redacted = true end   -- --resume cannot use them
  local ok, err = self:log(ev, true)
  if not ok then error(err, 0) end
end

-- The run's result for flow.run's caller: the outputs no step consumes.
function Run:result(code, states, elapsed, env)
  local result = { code = code, run_id = self.run_id, steps = {}, outputs = {}, env = env,
                   status = code == 0 and "ok" or code == 130 and "interrupted" or "failed" }
  local consumed = {}
  for i, n in ipairs(self.nodes) do
    result.steps[n.name] = { state = states[i], elapsed = elapsed[i], reason = self.records[n.name].reason }
    for _, io in ipairs(n.inputs) do consumed[io.dataset] = true end
  end
  for _, n in ipairs(self.nodes) do
    for _, io in ipairs(n.outputs) do
      local v = self.values[io.dataset]
      if v and not consumed[io.dataset] then
        local ok, value = pcall(self.value_of, self, io.dataset)
        result.outputs[io.dataset] = ok and value or v.path
      end
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
function M.run(p, opts, level)
  opts = opts or {}
  if M.child then return execute.run_child(M.child, pipeline.is_node(p) and pipeline.pipeline({ p }) or p) end
  local plan = M.prepare(p, opts, (level or 1) + 1)
  local secrets = credentials.check(plan.nodes, plan.settings, plan.cat, plan.selected)
  for _, n in ipairs(plan.nodes) do step_secrets[n] = secrets[n] end
  state_mod.lock()
  local run_id = core.run_id(state_mod.RUNS)
  local self = new_run(plan, opts, run_id, state_mod.load(run_id))
  -- Every directory the run writes to, made (or found to be a directory, not
  -- a file or a link) before any step runs: a problem here raises a file-system
  -- error naming it, which the CLI reports with exit status 2.
  core.mkdir_p(self.log_dir)
  core.mkdir_p(self.tmp_dir)
  core.mkdir_p(DATA)
  core.mkdir_p(state_mod.CACHE)
  self.journal = cache.journal(self.run_dir .. "/journal.jsonl")
  self:log_start(plan, opts)
  core.symlink(run_id, ".flow/runs/latest")
  local jobs = opts.jobs or core.cpu_count()
  local pools, pool_of = M.pools(plan, jobs)
  local code, states, elapsed = sched.run(plan.graph, { jobs = jobs, pools = pools, pool = pool_of,
                                                        keep_going = opts.keep_going, selected = plan.selected },
                                          function(i) return self:step(i) end,
                                          function(i) return self:up_to_date(i) end)
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
  -- What only saves work later is worth a warning, not a failed run.
  local function tidy(f, arg, consequence)
    local ok, err = pcall(f, arg)
    if ok then return end
    if not util.is_fs_error(err) then error(err, 0) end
    core.ui_warn(err.fs_error .. " (" .. consequence .. ")")
  end
  local logged, lerr = self:log({ event = "run_end", time = core.time(), code = code }, true)
  if not logged then problem(lerr) end
  record(self.journal.close, self.journal)
  record(state_mod.save, self.state, run_id)
  tidy(self.hc.save, self.hc, "the next run hashes those files again")
  tidy(core.remove_tree, self.tmp_dir, "flow clean removes it later")
  local result = self:result(code, states, elapsed, plan.settings.env)
  record(self.write_summary, self, result, plan.started, states)
  if #problems > 0 then
    for _, msg in ipairs(problems) do core.ui_error("the run's record is incomplete: " .. msg) end
    if result.code == 0 then
      local ran = false
      for _, n in ipairs(self.nodes) do ran = ran or self.records[n.name].started ~= nil end
      result.code, result.status = ran and 1 or 2, "failed"
    end
  end
  M.runs_started, M.last_code = M.runs_started + 1, result.code
  if result.code == 0 then nothing_ran(states) end
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
        if not why then self:use_recorded(n, self.state.steps[n.name]) end
      end
      runs[i] = why ~= nil
      rows[#rows + 1] = { name = n.name, runs = why ~= nil, why = why }
    end
  end
  return rows
end

return M
