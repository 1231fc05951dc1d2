-- flow.execute: one attempt of a step — a Lua function called on its input
-- values (or on every rank, under distributed: local), or a command expanded
-- and launched as one process, the ranks of a distributed job, or mpirun —
-- with the step's log, its print(), and the failure it ends with.
-- Methods of the run object (flow.runner mixes them in).
local core = require("flow.core")
local sched = require("flow.sched")
local dag = require("flow.dag")
local proc = require("flow.proc")
local util = require("flow.util")
local command = require("flow.command")
local params_mod = require("flow.params")
local launch = require("flow.launch")
local credentials = require("flow.credentials")
local values = require("flow.values")
local failure = require("flow.failure")
local redact = require("flow.config").redact
local remote = require("flow.remote")
local metrics = require("flow.metrics")

local step_failure = failure.new
local INLINE_MAX = require("flow.state").INLINE_MAX
local values_c = require("flow.values_c")

local M = {}
local Run = {}
M.methods = Run

-- The arguments a Lua function step is called with, and their count.
function Run:function_args(n)
  local args = {}
  for i, io in ipairs(n.inputs) do args[i] = values_c.copy(self:input_value(n, io)) end
  if n.input_style == "map" then
    local t = {}
    for i, io in ipairs(n.inputs) do t[io.arg] = args[i] end
    return { t }, 1
  end
  return args, #n.inputs
end

-- A step marked metrics = true returns its metrics after its outputs (a
-- map of outputs is one value): the step's record keeps them.
local function returned_metrics(n, results, rec)
  if not n.metrics then return end
  local at = (#n.outputs == 0 and 0 or n.output_style == "map" and 1 or #n.outputs) + 1
  if results[at] == nil and next(metrics.logged(coroutine.running())) then return end   -- logged ones only
  local m, why = metrics.from_table(results[at])
  if not m then
    error(step_failure { message = string.format("step '%s' is marked metrics = true: it returns its metrics "
      .. "(a table) after its outputs, as value %d, or logs them with flow.log_metric; %s", n.name, at, why) })
  end
  rec.metrics = m
end

-- The common case, a step of memory values in and out, is called and
-- recorded in C (lua/l_values.c); it hands back what it does not do itself:
-- the whole step before the call, the results after it.  (A plain step's
-- attempt does not come here: lua/plain_step.c calls values_c.call itself.)
M.lua_bodies = os.getenv("FLOW_DEBUG_LUA_BODIES") ~= nil     -- (t_outputs.sh compares the two)

function Run:run_function(n, i)
  local dist = self.mode == "local" and self.dists[i]
  local namer = self:unkept_namer(n, i)      -- its large values are not kept (flow.values)
  if not dist and not n.metrics and not M.lua_bodies then
    local json, results = values_c.call(self.values, n, self.cat, INLINE_MAX, namer, i)
    if json then
      self.bodies_in_c = (self.bodies_in_c or 0) + 1
      self.records[n.name].outputs_json = json
      return
    end
    if results then return self:save_results(n, results, namer) end
  end
  local args, count = self:function_args(n)
  local results
  if dist then results = self:run_function_ranks(n, dist, args, count)
  else results = table.pack(n.fn(table.unpack(args, 1, count))) end
  self:save_results(n, results, namer)
end

-- What a Lua step's function returned (table.pack's), saved as its outputs
-- (and its metrics).
function Run:save_results(n, results, namer)
  local rec = self.records[n.name]
  returned_metrics(n, results, rec)
  rec.outputs = self:save_values(n, values.returned_values(n, results), namer)
end

-- The step's log, for `flow logs`: what its job was (the job's own output is
-- in Azure ML studio, at the link).
function Run:job_log(n, place, spec, r)
  local header, append = self:attempt_header(n)
  local text = string.format("%s$ azureml job %s on %s (%d node%s)\ncommand: %s\nstatus: %s\n%s%s",
    header, r.name, place.compute, place.instances, place.instances == 1 and "" or "s", spec.command or "(adopted)",
    r.status ~= "" and r.status or "unknown", r.studio and ("studio: " .. r.studio .. "\n") or "",
    r.error and ("error: " .. r.error .. "\n") or "")
  local f, err = core.open_write(self:log_path(n), append)
  if f then
    f:write(redact(text))
    f:close()
  else
    core.ui_warn(string.format("step '%s': cannot write its log: %s", n.name, err))
  end
end

-- A step on Azure ML: its job submitted (or, after --resume, the job the
-- interrupted run had submitted for the same fingerprint adopted), waited
-- for, and its outputs recorded as references to the job's outputs.  The
-- job's name is journaled, and synced, before it is submitted: a run killed
-- at any moment is resumed without a second job.
function Run:run_remote(n, i)
  local rec = self.records[n.name]
  local place = self.remote[i]
  local function fail(msg) error(step_failure { message = string.format("step '%s': %s", n.name, msg) }) end
  local prior = self.remote_prior[n.name]
  local name
  if prior and prior.fp == (rec.fp or "") then
    self.remote_prior[n.name] = nil           -- adopted once: a retry submits a job of its own
    name = prior.job
  else
    name = require("flow.azureml").job_name(self.run_id, n.name, rec.fp or "", rec.attempts or 1)
  end
  local info = remote.info(self.aml)
  local attach_only = prior ~= nil and name == prior.job
  local sweep = self.sweep_step == n.name and self.sweep_job
  local mode = n.output_mode or info.output_mode
  local sweep_job = sweep and require("flow.sweep_job")      -- (loaded only for a sweep's trial step)
  local outputs = sweep and sweep_job.bindings(self, n, name, mode) or self:bind_outputs(n, name, mode)
  local inputs = not attach_only and self:bind_inputs(n, n.input_mode or info.input_mode, fail) or nil
  local spec = remote.job_spec(self, n, place, name, fail, inputs, outputs)
  spec.attach_only = attach_only
  if sweep then
    spec.command, spec.sweep = sweep_job.trial_command(sweep, spec.command), core.json_encode(sweep.sweep)
  end
  if not spec.attach_only then
    local id, why = self.aml:code_id(self.root)     -- the project's files, once per run
    if not id then fail(why) end
    spec.code_id = id
    if not sweep then self:clear_datastore_folders(n) end
  end
  -- journaled (and synced) before it is submitted, or adopted: a run killed
  -- now is resumed, or cancelled, with this job; an adopted one unjournaled
  -- here was unknown to this run's own --resume, which submitted a second
  self.journal:append(util.record_json { event = "remote_job", step = n.name, attempt = rec.attempts or 1,
                                         backend = "azureml", job = name, fp = rec.fp, time = core.time(),
                                         adopted = spec.attach_only or nil })
  self.journal:sync()
  local r, err = self.aml:run_job(spec)
  if not r then fail(err) end
  if r.status ~= "" or not spec.attach_only then self:job_log(n, place, spec, r) end
  rec.remote = { backend = "azureml", job = r.name, studio = r.studio, status = r.status }
  if r.ok then
    local downloads = place.downloads or {}
    rec.outputs = sweep and self:sweep_outcome(n, r.name, sweep, outputs, downloads, fail)
                  or self:fetch_outputs(n, r.name, outputs, downloads)
    return
  end
  -- never submitted, or it ended badly: this run submits its own (a job whose
  -- status could not be read is neither: it may be running, and is kept)
  if spec.attach_only and not r.cancelled and (r.not_found or r.status == "Failed" or r.status == "Canceled") then
    return self:run_remote(n, i)
  end
  if r.detached then
    local msg = string.format("step '%s': Azure ML job %s left running (--detach): `flow run --resume` "
      .. "waits for it, `flow cancel` cancels it", n.name, r.name)
    core.ui_info(msg)                          -- an interrupted run reports no step's failure
    error(step_failure { quiet = true, message = msg })
  end
  -- a job left running (its cancel refused, its status unreadable): how to reach it
  local left = string.format(": it may still be running: `flow run --resume %s` waits for it again, "
    .. "`flow cancel %s` cancels it", self.run_id, self.run_id)
  if r.cancelled then
    -- (a refused cancel is said, not hidden behind "interrupted")
    local refused = r.error and not r.terminal and r.status ~= ""
    local job = refused and (r.error .. left) or string.format("Azure ML job %s %s", r.name,
                                                               r.status == "Canceled" and "canceled" or "asked to cancel")
    if core.interrupted() > 0 and not r.timed_out then
      error(step_failure { quiet = not refused, message = string.format("step '%s' stopped (interrupted); %s",
                                                                        n.name, job) })
    end
    error(step_failure { timed_out = true, message = string.format(
      "step '%s' timed out after %s (%s)", n.name, util.format_duration(n.timeout or 0), job) })
  end
  local exists = r.status ~= "" or r.submitted or spec.attach_only
  fail(r.error and exists and not r.terminal and (r.error .. left) or r.error
       or string.format("Azure ML job %s ended %s%s", r.name, r.status, r.studio and (": " .. r.studio) or ""))
end

-- After the sweep job `job` of step n completed: its trials read back and
-- handed to flow.sweep (opts.sweep_trials), which records and ranks them
-- and names the best; the step's outputs are that trial's, as a command
-- job's are.
function Run:sweep_outcome(n, job, sweep, outputs, downloads, fail)
  local sweep_job = require("flow.sweep_job")
  local trials = sweep_job.trials(self, n, job, sweep.names, fail)
  local best, metric = self.on_sweep_trials(trials, self.run_id)
  if not best then fail(string.format("Azure ML sweep job %s: no trial reported %s", job, sweep.metric)) end
  local own = {}
  for _, b in ipairs(outputs) do
    if b.name ~= "flow_trial" then
      own[#own + 1] = { name = b.name, dataset = b.dataset, type = b.type, mode = b.mode,
                        uri = b.uri:gsub("%${{name}}", best) }
    end
  end
  core.ui_info(string.format("step '%s': sweep job %s: %d trial%s, best %s (%s %s)", n.name, job, #trials,
                             #trials == 1 and "" or "s", best, sweep.metric, tostring(metric)))
  return self:fetch_outputs(n, job, own, downloads)
end

-- The flags that give a child `flow` the configuration this run has.
local function config_flags(defaults)
  local flags = {}
  if defaults.env then flags[#flags + 1] = "--env=" .. defaults.env end
  if defaults.params_spec then flags[#flags + 1] = "--params=" .. defaults.params_spec end
  if defaults.conf then flags[#flags + 1] = "--conf=" .. defaults.conf end
  return flags
end

-- distributed: local for a Lua function: every rank is a `flow __step` child
-- that loads the script and runs this one step on the inputs it is handed;
-- only the master's return values become the step's outputs.
function Run:run_function_ranks(n, dist, args, count)
  if not self.defaults.script then
    error(step_failure { message = string.format("step '%s': a distributed Lua step runs in child processes, "
      .. "which need the pipeline script: run it with `flow run SCRIPT`", n.name) })
  end
  local tmpdir = self.tmp_dir .. "/" .. core.safe_name(n.name) .. "~ranks"
  core.remove_tree(tmpdir)
  core.mkdir_p(tmpdir)
  local inputs, outputs = tmpdir .. "/inputs.json", tmpdir .. "/outputs.json"
  if util.holds_secret(args) then          -- (flow writes no secret to a file of its own)
    error(step_failure { message = string.format("step '%s' runs on every rank, which receive its inputs in a file, "
      .. "but an input holds a credential, which flow does not write to a file", n.name) })
  end
  local data, err = core.json_encode({ n = count, args = args })
  if not data then
    error(step_failure { message = string.format("step '%s' runs on every rank, which receive its inputs as JSON, but %s",
                                                 n.name, err) })
  end
  core.write_atomic(inputs, data)
  local argv = { core.exe_path(), "__step", self.defaults.script, n.name, inputs, outputs }
  for _, f in ipairs(config_flags(self.defaults)) do argv[#argv + 1] = f end
  self:launch_ranks(n, dist, argv, string.format("flow __step %s %s (on each rank)", self.defaults.script, n.name))
  local text = core.read_file(outputs)
  core.remove_tree(tmpdir)
  if not text then
    error(step_failure { message = string.format("step '%s': the master rank (rank 0) returned no outputs", n.name) })
  end
  local res = core.json_decode(text)
  local results = { n = res.n }
  for i = 1, res.n do results[i] = res.values[i] or res.values[tostring(i)] end
  local logged = n.metrics and metrics.logged(coroutine.running())   -- what the master rank logged
  for name, list in pairs(logged and type(res.series) == "table" and res.series or {}) do
    for _, v in ipairs(list) do
      local l = logged[name] or {}
      l[#l + 1], logged[name] = v, l
    end
  end
  return results
end

-- In a `flow __step` child: run the one step and leave.
local ChildDone = { __tostring = function() return "child step done" end }
M.ChildDone = ChildDone

function M.run_child(c, p)
  for _, n in ipairs(p.nodes) do
    if n.name == c.step then
      local payload = core.json_decode(assert(core.read_file(c.inputs)))
      metrics.child = { step = n.name, series = n.metrics and {} or false }   -- sent back with the outputs
      local results = table.pack(n.fn(table.unpack(payload.args, 1, payload.n)))
      if require("flow.distributed").is_master() then
        local values = {}
        for i = 1, results.n do values[i] = results[i] end
        local series = metrics.child.series
        local data, err = core.json_encode({ n = results.n, values = values,
                                             series = series and next(series) and series or nil })
        if not data then error(string.format("step '%s' returned a value that cannot go back to flow as JSON: %s", n.name, err), 0) end
        core.write_atomic(c.outputs, data)
      end
      error(setmetatable({ child_done = true }, ChildDone), 0)
    end
  end
  return { status = "ok", code = 0, steps = {}, outputs = {} }     -- not this pipeline: go on
end

-- Expand the command's templates; outputs go to a staging path first.
function Run:expand_command(n, staging)
  local cmd = n.cmd
  if cmd.cwd and core.exists(cmd.cwd) ~= "directory" then
    error(step_failure { message = string.format("step '%s': its command's cwd %s is not a directory", n.name,
                                                 cmd.cwd) })
  end
  local by_arg = { inputs = {}, outputs = {} }
  for _, io in ipairs(n.inputs) do by_arg.inputs[io.arg] = io end
  for _, io in ipairs(n.outputs) do by_arg.outputs[io.arg] = io end
  local function lookup(ns, key)
    if ns == "credentials" then      -- refused in argv words before the run (flow.credentials)
      return nil, string.format("${credentials.%s} cannot be a command-line argument", key)
    end
    if ns == "params" then return params_mod.command_text(self.settings, n, key) end
    local io = by_arg[ns][key]
    if not io then
      local names = util.sorted_keys(by_arg[ns])
      return nil, string.format("${%s.%s}: the step has no %s named '%s'%s", ns, key,
        ns == "inputs" and "input" or "output", key, util.did_you_mean(key, names))
    end
    if ns == "outputs" then return staging[io.dataset] end
    if dag.is_param_input(io.dataset) then
      return params_mod.text(self:input_value(n, io))
    end
    return self:input_path(io.dataset, n)
  end
  local function expand(s, quote)
    local out, err = core.expand(s, quote and function(ns, key)
      if ns == "credentials" then return credentials.shell_ref(key) end     -- "$FLOW_CRED_…"
      local v, e = lookup(ns, key)
      return v and command.shell_quote(v), e
    end or lookup)
    if not out then error(step_failure { message = string.format("step '%s': %s", n.name, err) }) end
    return out
  end
  -- env values: the same references, and a credential is the value itself
  -- (they reach the process's environment, never a command line)
  local env = {}
  for name, v in pairs(cmd.env or {}) do
    if type(v) == "string" and v:find("${", 1, true) then
      local out, err = core.expand(v, function(ns, key)
        if ns == "credentials" then return credentials.value(self.settings, key) end
        return lookup(ns, key)
      end)
      if not out then error(step_failure { message = string.format("step '%s': env %s: %s", n.name, name, err) }) end
      v = out
    end
    env[name] = v
  end
  if cmd.shell then
    local script = expand(cmd.shell, true)
    return { "/bin/sh", "-c", script }, script, env
  end
  local argv = {}
  for i, a in ipairs(cmd.argv) do argv[i] = expand(a) end
  return argv, command.display(argv), env
end

local function tail_lines(text, n)
  local lines = {}
  for line in text:gmatch("[^\n]+") do lines[#lines + 1] = line end
  local first = math.max(1, #lines - n + 1)
  local out = {}
  for i = first, #lines do out[#out + 1] = "    " .. lines[i] end
  return table.concat(out, "\n")
end

-- A log is made on a step's first byte of output (proc.c): a silent one has none.
local function full_log(log, also)
  return core.exists(log) and "\n  full log: " .. log .. (also or "") or "\n  no log: the step wrote no output"
end

-- A process result that is not success, as a step failure: interrupted,
-- timed out, or failed with its exit code and the last lines of stderr.
local function process_failure(n, r, display, log, who, also)
  if r.signal ~= 0 and core.interrupted() > 0 then
    return step_failure { message = string.format("step '%s' stopped (interrupted)", n.name), quiet = true }
  end
  if r.timed_out then
    return step_failure { timed_out = true, message = string.format(
      "step '%s' timed out after %s (its processes were stopped)\n  command: %s%s",
      n.name, util.format_duration(n.timeout), display, full_log(log, also)) }
  end
  local how = r.signal ~= 0 and string.format("killed by signal %d", r.signal)
              or string.format("exit code %d", r.code)
  local msg = string.format("step '%s' failed%s (%s)\n  command: %s", n.name, who or "", how, display)
  local tail
  if r.stderr:find("%S") then
    tail = "\n  last lines of stderr:\n" .. tail_lines(r.stderr, 10)
    msg = msg .. tail
  end
  return step_failure { message = msg .. full_log(log, also), stderr_tail = tail }
end

-- Step n's log (a rank's): .flow/runs/<id>/logs/<step>.log.  The folder is
-- made when the run first needs one, so a run in which nothing runs makes
-- none (an inode fewer per no-op rerun).
function Run:log_path(n, rank)
  if not self.log_dir_made then
    core.mkdir_p(self.log_dir)
    self.log_dir_made = true
  end
  return self.log_dir .. "/" .. core.safe_name(n.name) .. (rank and ("+rank" .. rank) or "") .. ".log"
end

-- The credentials each command step's process gets in its environment, set
-- by flow.run for its steps (see flow.credentials).
local step_secrets = setmetatable({}, { __mode = "k" })
M.step_secrets = step_secrets

-- Every attempt of a step writes to the same log: the first starts it, a
-- retry adds to it, each under a header of its own.  Returns the header and
-- whether to append.
function Run:attempt_header(n, attempt)
  local retries = n.retries or 0
  if retries == 0 then return "", false end
  attempt = attempt or self.records[n.name].attempts or 1
  return string.format("%s--- attempt %d of %d ---\n", attempt > 1 and "\n" or "", attempt, retries + 1),
         attempt > 1
end

-- print() in a Lua step: into the step's log like a command's output, and
-- shown as the pipeline's output: on stdout, prefixed with the step's name
-- under -v, not at all under -q.  Anywhere else (a coroutine the step's code
-- made included) it is a plain print.
metrics.step_on = function(co)
  local run, i = sched.step(co)
  return run and run.nodes[i].name
end

function M.print(text)
  local run, i, k = sched.step()
  if run then run:step_print(i, text, k) else core.ui_print(text) end
end

-- print() in attempt k of step i.  Its log stays open to the attempt's end
-- (Run:attempt_end closes it: self.printed[i] says there is one).
function Run:step_print(i, text, k)
  local n = self.nodes[i]
  local rec, path = self.records[n.name], self:log_path(n)
  -- A log that cannot be written fails the step, as a command's does.
  local function check(ok, err)
    if not ok then
      error(step_failure { message = string.format("step '%s': cannot write its log %s: %s", n.name, path, err) }, 0)
    end
    return ok
  end
  if rec.print_attempt ~= k then       -- the first print of this attempt
    if rec.print_log then rec.print_log:close() end
    local header, append = self:attempt_header(n, k)
    rec.print_log = check(core.open_write(path, append))   -- never through a link
    self.printed[i] = true
    check(rec.print_log:write(header))
    rec.print_attempt = k
  end
  check(rec.print_log:write(redact(text)))
  if core.ui_level() == "quiet" then return end
  if self.verbose then
    text = text:gsub("([^\n]*)\n", function(line) return "[" .. n.name .. "] " .. line .. "\n" end)
  end
  core.ui_print(text)
end

-- A command's process environment: its env values as expand_command
-- expanded them (`cmd_env`), its credentials' variables (FLOW_CRED_…, a
-- catalog entry's block) over them, then `extra` (a rank's).
local function command_env(n, cmd_env, extra)
  local env = {}
  for k, v in pairs(cmd_env or {}) do env[k] = v end
  for k, v in pairs(step_secrets[n] or {}) do env[k] = v end
  for k, v in pairs(extra or {}) do env[k] = v end
  return launch.env_list(env)
end

function Run:run_command(n, i)
  local staging = self:staging(n)
  local argv, display, env = self:expand_command(n, staging)
  local dist = self.mode == "local" and self.dists[i]
  local ok, err
  if dist then ok, err = pcall(self.launch_ranks, self, n, dist, argv, display, env)
  else ok, err = pcall(self.launch_once, self, n, argv, display, env) end
  if not ok then values.discard(staging); error(err, 0) end
  self.records[n.name].outputs = self:commit_outputs(n, staging, display)
end

-- A process that succeeded but whose log could not be written (a full
-- disk) fails its step: its outputs may be as incomplete as its log.
local function check_log(n, r, log)
  if r.log_error then
    error(step_failure { message = string.format("step '%s': cannot write its log %s: %s", n.name, log, r.log_error) })
  end
end

function Run:launch_once(n, argv, display, cmd_env)
  local log = self:log_path(n)
  local header, append = self:attempt_header(n)
  local r, err = proc.spawn { argv = argv, cwd = n.cmd and n.cmd.cwd, log = log, env = command_env(n, cmd_env),
                              header = redact(header .. "$ " .. display .. "\n"), append = append,
                              echo = self.verbose and ("[" .. n.name .. "] ") or nil }
  if not r then error(step_failure { message = string.format("step '%s': %s", n.name, err) }) end
  self.records[n.name].exit_code = r.code
  if r.code ~= 0 then error(process_failure(n, r, display, log)) end
  check_log(n, r, log)
end

-- distributed: local — every rank of the job as a local process.
function Run:launch_ranks(n, dist, argv, display, cmd_env)
  if dist.framework == "mpi" then return self:launch_mpi(n, dist, argv, display, cmd_env) end
  local ranks = dist.framework == "pytorch" and launch.pytorch_ranks(dist) or launch.tensorflow_ranks(dist)
  local specs = {}
  local header, append = self:attempt_header(n)
  for r, env in ipairs(ranks) do
    local log = self:log_path(n, r - 1)
    specs[r] = { argv = argv, cwd = n.cmd and n.cmd.cwd, log = log, env = command_env(n, cmd_env, env), append = append,
                 header = redact(header .. "$ " .. display .. "\n" .. table.concat(launch.env_list(env), "\n") .. "\n\n"),
                 echo = self.verbose and string.format("[%s rank %d] ", n.name, r - 1) or nil }
  end
  local g, err = proc.spawn_group(specs)
  if not g then error(step_failure { message = string.format("step '%s': %s", n.name, err) }) end
  if g.failed then
    local r = g.results[g.failed]
    self.records[n.name].exit_code = r.code
    error(process_failure(n, r, display, specs[g.failed].log,
                          string.format(" on rank %d of %d", g.failed - 1, #specs)))
  end
  for r, res in ipairs(g.results) do check_log(n, res, specs[r].log) end
  self.records[n.name].exit_code = 0
end

function Run:launch_mpi(n, dist, argv, display, cmd_env)
  local log = self:log_path(n)
  local margv, menv = launch.mpi_argv(dist, argv, (log:gsub("%.log$", "")))
  local env = command_env(n, cmd_env)
  for _, e in ipairs(menv) do env[#env + 1] = e end
  local header, append = self:attempt_header(n)
  local r, err = proc.spawn { argv = margv, cwd = n.cmd and n.cmd.cwd, log = log, env = env,
                              header = redact(header .. "$ " .. command.display(margv) .. "\n"), append = append,
                              echo = self.verbose and ("[" .. n.name .. "] ") or nil }
  if not r then
    if err:find("command not found") then
      err = "MPI steps run locally through mpirun, which is not installed (Debian: apt-get install openmpi-bin)"
    end
    error(step_failure { message = string.format("step '%s': %s", n.name, err) })
  end
  self.records[n.name].exit_code = r.code
  if r.code ~= 0 then
    -- mpirun's own stderr says which rank failed; each rank's output is in its log.
    error(process_failure(n, r, display, log, nil, " (each rank's output: " .. self:log_path(n, "N") .. ")"))
  end
  check_log(n, r, log)
end

return M
