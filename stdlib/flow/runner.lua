-- flow.runner: flow.run(pipeline, opts).  Builds the DAG in C, then runs each
-- step on its own coroutine under the C scheduler.  Values between Lua steps
-- stay in memory; a command gets files (in-memory values are written as JSON,
-- or as text when they are strings), and its outputs are moved into place only
-- after it succeeded.
local core = require("flow.core")
local dag = require("flow.dag")
local sched = require("flow.sched")
local proc = require("flow.proc")
local util = require("flow.util")
local command = require("flow.command")
local pipeline = require("flow.pipeline")
local params_mod = require("flow.params")
local settings_mod = require("flow.settings")
local launch = require("flow.launch")

local M = {}

local DATA = ".flow/data"

local graph_error = util.setup_error

-- Runs started by this process, so `flow run driver.lua` (a script that calls
-- flow.run itself, a sweep) can exit with its last run's status.
M.runs_started, M.last_code = 0, nil

-- A failure raised inside a step, reported without a Lua traceback.
local StepFailure = {}
StepFailure.__index = StepFailure
StepFailure.__tostring = function(f) return f.message end
local function step_failure(t) return setmetatable(t, StepFailure) end

-- A distributed step's counts for this run: "params:" references resolved
-- in the run's environment and checked to be positive integers.
local function resolve_count(n, what, value, ref, settings)
  if not ref then return value end
  local key = ref:match("^params:(.+)$")
  local v = params_mod.get(settings.params, key)
  if v == nil then
    local near = settings_mod.closest_param(settings, key)
    graph_error(string.format("step '%s' (%s): %s = \"%s\" but parameter '%s' is not defined in environment '%s'%s",
      n.name, n.where, what, ref, key, settings.env, near and (" (did you mean '" .. near .. "'?)") or ""))
  end
  if math.type(v) ~= "integer" or v < 1 then
    graph_error(string.format("step '%s' (%s): %s = \"%s\" is %s in environment '%s'; it must be a positive integer",
      n.name, n.where, what, ref, type(v) == "string" and string.format("%q", v) or tostring(v), settings.env))
  end
  return v
end

function M.resolve_dist(n, settings)
  local d = n.dist
  if not d then return nil end
  return {
    framework = d.framework,
    num_nodes = resolve_count(n, "num_nodes", d.num_nodes, d.num_nodes_ref, settings),
    processes_per_node = resolve_count(n, "processes_per_node", d.processes_per_node,
                                       d.processes_per_node_ref, settings),
    parameter_server_count = d.parameter_server_count,
    num_nodes_ref = d.num_nodes_ref, processes_per_node_ref = d.processes_per_node_ref,
  }
end

-- The plain data the C graph is built from.
function M.build_graph(nodes, dists)
  local specs = {}
  for i, n in ipairs(nodes) do
    specs[i] = { name = n.name, kind = n.kind, inputs = n.inputs, outputs = n.outputs,
                 tags = n.tags, dist = dists and dists[i] }
  end
  local ok, g = pcall(dag.build, specs, {})
  if not ok then
    -- Point at the script lines where the clashing steps were declared.
    local msg = tostring(g)
    local name = msg:match("^two steps are named '(.-)'")
    if name then
      local at = {}
      for _, n in ipairs(nodes) do if n.name == name then at[#at + 1] = n.where end end
      msg = msg .. "\n  declared at " .. table.concat(at, " and ")
    end
    graph_error(msg)
  end
  return g
end

local Run = {}
Run.__index = Run

-- The value a Lua function receives for input `io`.
function Run:input_value(n, io)
  if io.dataset == "parameters" then return self.params end
  local key = io.dataset:match("^params:(.+)$")
  if key then return params_mod.get(self.params, key) end
  local v = self.values[io.dataset]
  if v.path then return v.path end
  return v.value
end

-- The path a command receives for input dataset `d`: a file it or another
-- command wrote, or a Lua value written out now (once per run).
function Run:input_path(d)
  local v = self.values[d]
  if v.path then return v.path end
  local data, ext = v.value, ".json"
  if type(data) == "string" then ext = ".txt"
  else
    local err
    data, err = core.json_encode(v.value, true)
    if not data then
      error(step_failure { message = string.format("dataset '%s' cannot be passed to a command as JSON: %s", d, err) })
    end
    data = data .. "\n"
  end
  core.mkdir_p(DATA)
  v.path = DATA .. "/" .. core.safe_name(d) .. ext
  core.write_atomic(v.path, data)
  return v.path
end

local function param_text(v)
  if type(v) == "table" then return (core.json_encode(v)) end
  return tostring(v)
end

local function assign_outputs(self, n, results)
  if n.output_style == "map" then
    local t = results[1]
    if type(t) ~= "table" then
      error(step_failure { message = string.format("step '%s' must return a table with keys %s (its outputs are a map), got %s",
        n.name, table.concat(util.sorted_keys((function() local k = {} for _, io in ipairs(n.outputs) do k[io.arg] = 1 end return k end)()), ", "), type(t)) })
    end
    for _, io in ipairs(n.outputs) do
      if t[io.arg] == nil then
        error(step_failure { message = string.format("step '%s' returned no value for output '%s' (key %q)", n.name, io.dataset, io.arg) })
      end
      self.values[io.dataset] = { value = t[io.arg] }
    end
    return
  end
  if results.n < #n.outputs then
    local names = {}
    for i, io in ipairs(n.outputs) do names[i] = io.dataset end
    error(step_failure { message = string.format("step '%s' returned %d value%s but declares %d output%s (%s)",
      n.name, results.n, results.n == 1 and "" or "s", #n.outputs, #n.outputs == 1 and "" or "s", table.concat(names, ", ")) })
  end
  for i, io in ipairs(n.outputs) do
    if results[i] == nil then
      error(step_failure { message = string.format("step '%s' returned nil for output '%s'", n.name, io.dataset) })
    end
    self.values[io.dataset] = { value = results[i] }
  end
end

-- The arguments a Lua function step is called with, and their count.
function Run:function_args(n)
  local args = {}
  for i, io in ipairs(n.inputs) do args[i] = self:input_value(n, io) end
  if n.input_style == "map" then
    local t = {}
    for i, io in ipairs(n.inputs) do t[io.arg] = args[i] end
    return { t }, 1
  end
  return args, #n.inputs
end

function Run:run_function(n)
  local args, count = self:function_args(n)
  local dist = self.mode == "local" and self.dists[self.index[n]]
  if dist then return self:run_function_ranks(n, dist, args, count) end
  assign_outputs(self, n, table.pack(n.fn(table.unpack(args, 1, count))))
end

-- The flags that give a child `flow` the configuration this run has.
local function config_flags()
  local flags = {}
  if M.defaults.env then flags[#flags + 1] = "--env=" .. M.defaults.env end
  if M.defaults.params_spec then flags[#flags + 1] = "--params=" .. M.defaults.params_spec end
  if M.defaults.conf then flags[#flags + 1] = "--conf=" .. M.defaults.conf end
  return flags
end

-- distributed: local for a Lua function: every rank is a `flow __step` child
-- that loads the script and runs this one step on the inputs it is handed;
-- only the master's return values become the step's outputs.
function Run:run_function_ranks(n, dist, args, count)
  if not M.defaults.script then
    error(step_failure { message = string.format("step '%s': a distributed Lua step runs in child processes, "
      .. "which need the pipeline script: run it with `flow run SCRIPT`", n.name) })
  end
  local tmpdir = self.tmp_dir .. "/" .. core.safe_name(n.name) .. "--ranks"
  core.remove_tree(tmpdir)
  core.mkdir_p(tmpdir)
  local inputs, outputs = tmpdir .. "/inputs.json", tmpdir .. "/outputs.json"
  local data, err = core.json_encode({ n = count, args = args })
  if not data then
    error(step_failure { message = string.format("step '%s' runs on every rank, which receive its inputs as JSON, but %s",
                                                 n.name, err) })
  end
  core.write_atomic(inputs, data)
  local argv = { core.exe_path(), "__step", M.defaults.script, n.name, inputs, outputs }
  for _, f in ipairs(config_flags()) do argv[#argv + 1] = f end
  self:launch_ranks(n, dist, argv, string.format("flow __step %s %s (on each rank)", M.defaults.script, n.name))
  local text = core.read_file(outputs)
  core.remove_tree(tmpdir)
  if not text then
    error(step_failure { message = string.format("step '%s': the master rank (rank 0) returned no outputs", n.name) })
  end
  local res = core.json_decode(text)
  local results = { n = res.n }
  for i = 1, res.n do results[i] = res.values[i] or res.values[tostring(i)] end
  assign_outputs(self, n, results)
end

-- In a `flow __step` child: run the one step and leave.
local ChildDone = { __tostring = function() return "child step done" end }
M.ChildDone = ChildDone

function M.run_child(p)
  local c = M.child
  for _, n in ipairs(p.nodes) do
    if n.name == c.step then
      local payload = core.json_decode(assert(core.read_file(c.inputs)))
      local results = table.pack(n.fn(table.unpack(payload.args, 1, payload.n)))
      if require("flow.distributed").is_master() then
        local values = {}
        for i = 1, results.n do values[i] = results[i] end
        local data, err = core.json_encode({ n = results.n, values = values })
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
  local by_arg = { inputs = {}, outputs = {} }
  for _, io in ipairs(n.inputs) do by_arg.inputs[io.arg] = io end
  for _, io in ipairs(n.outputs) do by_arg.outputs[io.arg] = io end
  local function lookup(ns, key)
    if ns == "params" then
      local ok, v = pcall(params_mod.get, self.params, key)
      if not ok or v == nil then return nil, string.format("no parameter '%s'", key) end
      return param_text(v)
    end
    local io = by_arg[ns][key]
    if not io then
      local names = util.sorted_keys(by_arg[ns])
      return nil, string.format("${%s.%s}: the step has no %s named '%s'%s", ns, key,
        ns == "inputs" and "input" or "output", key, util.did_you_mean(key, names))
    end
    if ns == "outputs" then return staging[io.dataset] end
    if io.dataset:match("^params:") or io.dataset == "parameters" then
      return param_text(self:input_value(n, io))
    end
    return self:input_path(io.dataset)
  end
  local cmd = n.cmd
  local function expand(s, quote)
    local out, err = core.expand(s, quote and function(ns, key)
      local v, e = lookup(ns, key)
      return v and command.shell_quote(v), e
    end or lookup)
    if not out then error(step_failure { message = string.format("step '%s': %s", n.name, err) }) end
    return out
  end
  if cmd.shell then return { "/bin/sh", "-c", expand(cmd.shell, true) }, expand(cmd.shell, true) end
  local argv = {}
  for i, a in ipairs(cmd.argv) do argv[i] = expand(a) end
  return argv, command.display(argv)
end

local function tail_lines(text, n)
  local lines = {}
  for line in text:gmatch("[^\n]+") do lines[#lines + 1] = line end
  local first = math.max(1, #lines - n + 1)
  local out = {}
  for i = first, #lines do out[#out + 1] = "    " .. lines[i] end
  return table.concat(out, "\n")
end

-- A process result that is not success, as a step failure: interrupted,
-- timed out, or failed with its exit code and the last lines of stderr.
local function process_failure(n, r, display, log, who)
  if r.signal ~= 0 and core.interrupted() > 0 then
    return step_failure { message = string.format("step '%s' stopped (interrupted)", n.name), quiet = true }
  end
  if r.timed_out then
    return step_failure { timed_out = true, message = string.format(
      "step '%s' timed out after %s (its processes were stopped)\n  command: %s\n  full log: %s",
      n.name, util.format_duration(n.timeout), display, log) }
  end
  local how = r.signal ~= 0 and string.format("killed by signal %d", r.signal)
              or string.format("exit code %d", r.code)
  local msg = string.format("step '%s' failed%s (%s)\n  command: %s", n.name, who or "", how, display)
  if r.stderr:find("%S") then msg = msg .. "\n  last lines of stderr:\n" .. tail_lines(r.stderr, 10) end
  return step_failure { message = msg .. "\n  full log: " .. log }
end

-- The staging path of each output of step n, in the run's temporary
-- directory, and a cleanup that removes whatever of them exists.
function Run:staging(n)
  local staging, prefix = {}, self.tmp_dir .. "/" .. core.safe_name(n.name) .. "--"
  for _, io in ipairs(n.outputs) do
    staging[io.dataset] = prefix .. core.safe_name(io.dataset)
    core.remove_tree(staging[io.dataset])         -- a leftover of an earlier attempt
  end
  return staging
end

local function discard(staging)
  for _, path in pairs(staging) do core.remove_tree(path) end
end

-- Move a successful command's outputs into place; all must exist.
function Run:commit_outputs(n, staging, display)
  for _, io in ipairs(n.outputs) do
    if not core.exists(staging[io.dataset]) then
      discard(staging)
      error(step_failure { message = string.format(
        "step '%s' exited 0 but did not write its output '%s' (the command was given the path %s)\n  command: %s",
        n.name, io.dataset, staging[io.dataset], display) })
    end
  end
  for _, io in ipairs(n.outputs) do
    local final = DATA .. "/" .. core.safe_name(io.dataset)
    core.replace(staging[io.dataset], final)
    self.values[io.dataset] = { path = final }
  end
end

function Run:log_path(n, rank)
  return self.log_dir .. "/" .. core.safe_name(n.name) .. (rank and (".rank" .. rank) or "") .. ".log"
end

local function command_env(n, extra)
  local env = {}
  for k, v in pairs(n.cmd and n.cmd.env or {}) do env[k] = v end
  for k, v in pairs(extra or {}) do env[k] = v end
  return launch.env_list(env)
end

function Run:run_command(n)
  local staging = self:staging(n)
  local argv, display = self:expand_command(n, staging)
  local dist = self.mode == "local" and self.dists[self.index[n]]
  local ok, err
  if dist then ok, err = pcall(self.launch_ranks, self, n, dist, argv, display)
  else ok, err = pcall(self.launch_once, self, n, argv, display) end
  if not ok then discard(staging); error(err, 0) end
  self:commit_outputs(n, staging, display)
end

function Run:launch_once(n, argv, display)
  local log = self:log_path(n)
  local r, err = proc.spawn { argv = argv, cwd = n.cmd and n.cmd.cwd, log = log, env = command_env(n),
                              header = "$ " .. display .. "\n",
                              echo = self.verbose and ("[" .. n.name .. "] ") or nil }
  if not r then error(step_failure { message = string.format("step '%s': %s", n.name, err) }) end
  self.records[n.name].exit_code = r.code
  if r.code ~= 0 then error(process_failure(n, r, display, log)) end
end

-- distributed: local — every rank of the job as a local process.
function Run:launch_ranks(n, dist, argv, display)
  if dist.framework == "mpi" then return self:launch_mpi(n, dist, argv, display) end
  local ranks = dist.framework == "pytorch" and launch.pytorch_ranks(dist) or launch.tensorflow_ranks(dist)
  local specs = {}
  for r, env in ipairs(ranks) do
    local log = self:log_path(n, r - 1)
    specs[r] = { argv = argv, cwd = n.cmd and n.cmd.cwd, log = log, env = command_env(n, env),
                 header = "$ " .. display .. "\n" .. table.concat(launch.env_list(env), "\n") .. "\n\n",
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
  self.records[n.name].exit_code = 0
end

function Run:launch_mpi(n, dist, argv, display)
  local log = self:log_path(n)
  local margv, menv = launch.mpi_argv(dist, argv, (log:gsub("%.log$", "")))
  local env = command_env(n)
  for _, e in ipairs(menv) do env[#env + 1] = e end
  local r, err = proc.spawn { argv = margv, cwd = n.cmd and n.cmd.cwd, log = log, env = env,
                              header = "$ " .. command.display(margv) .. "\n",
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
    error(process_failure(n, r, display, log .. " (each rank's output: " ..
                          self:log_path(n, "N") .. ")"))
  end
end

local function report(n, err)
  if core.interrupted() > 0 then return end      -- stopped, not failed: the summary says so
  if getmetatable(err) == StepFailure then
    if not err.quiet then core.ui_error(err.message) end
  else
    core.ui_error(string.format("step '%s' failed: %s", n.name, util.user_traceback(tostring(err))))
  end
end

-- One attempt of step n, with its timeout; returns ok, err.
local function on_step_error(e)
  if getmetatable(e) == StepFailure then return e end
  return { traceback = debug.traceback(tostring(e), 2), message = tostring(e) }
end

function Run:attempt(n)
  if n.timeout then sched.set_deadline(n.timeout) end
  local ok, err = xpcall(n.kind == "func" and self.run_function or self.run_command, on_step_error, self, n)
  if n.timeout then sched.set_deadline(nil) end
  if ok or getmetatable(err) == StepFailure then return ok, err end
  if n.timeout and err.message:find("timed out$") then    -- raised by the deadline hook
    return false, step_failure { timed_out = true, message = string.format(
      "step '%s' timed out after %s", n.name, util.format_duration(n.timeout)) }
  end
  return false, err.traceback
end

local function first_line(err)
  local s = getmetatable(err) == StepFailure and err.message or tostring(err)
  return s:match("^[^\n]*")
end

-- Runs on the step's own coroutine; returns whether the step succeeded.
-- A failed attempt is retried `retries` times, after 1 s, 2 s, 4 s… (at most 60 s).
function Run:step(i)
  local n = self.nodes[i]
  local rec = self.records[n.name]
  rec.started = core.time()
  local ok, err
  for attempt = 1, n.retries + 1 do
    rec.attempts = attempt
    ok, err = self:attempt(n)
    if ok or core.interrupted() > 0 or attempt > n.retries then break end
    local delay = math.min(60, 2 ^ (attempt - 1))
    local reason = first_line(err):gsub("^step '.-'%s*", ""):gsub("^:%s*", "")
    core.ui_warn(string.format("step '%s' %s (attempt %d of %d); retrying in %gs",
                               n.name, reason, attempt, n.retries + 1, delay))
    proc.sleep(delay)
    if core.interrupted() > 0 then break end
  end
  rec.finished = core.time()
  if not ok then
    rec.timed_out = getmetatable(err) == StepFailure and err.timed_out or nil
    rec.error = first_line(err)
    report(n, err)
  end
  return ok
end

-- Where to restart after a failure (as Kedro suggests): the steps to rerun
-- are the failed and not-run ones, plus any finished step whose output they
-- need and that has no saved copy; the starts are those among them with no
-- producer among them.  `--from-nodes <starts>` then reruns what is needed.
function Run:resume_points(g, states)
  local rerun = {}
  for i, st in ipairs(states) do
    if st == "failed" or st == "not run" then rerun[i] = true end
  end
  local grew = true
  while grew do
    grew = false
    for i in pairs(rerun) do
      for _, io in ipairs(self.nodes[i].inputs) do
        local p = g:producer(io.dataset)      -- nil for parameters too
        if p and not rerun[p] and not M.saved_copy(io.dataset) then rerun[p] = true; grew = true end
      end
    end
  end
  local starts = {}
  for _, i in ipairs(g:order()) do
    if rerun[i] then
      local has_producer = false
      for _, d in ipairs(g:deps(i)) do if rerun[d] then has_producer = true end end
      if not has_producer then starts[#starts + 1] = self.nodes[i].name end
    end
  end
  return starts
end

-- .flow/runs/<id>/run.json: what ran, when, and how it ended.
function Run:write_summary(result, started, states)
  local steps = {}
  for i, n in ipairs(self.nodes) do
    local rec = self.records[n.name]
    steps[i] = { name = n.name, state = states[i], started = rec.started, finished = rec.finished,
                 elapsed = rec.started and rec.finished and (rec.finished - rec.started) or nil,
                 attempts = rec.attempts, exit_code = rec.exit_code, timed_out = rec.timed_out,
                 error = rec.error }
  end
  local summary = { run_id = self.run_id, status = result.status, code = result.code, env = result.env,
                    started = started, finished = core.time(), steps = steps }
  summary.elapsed = summary.finished - started
  core.write_atomic(self.run_dir .. "/run.json", core.json_encode(summary, #steps <= 1000) .. "\n")
end

-- Every "params:" input and ${params.} reference must exist before anything runs.
local function check_params(nodes, settings)
  for _, n in ipairs(nodes) do
    local function check(key)
      if params_mod.get(settings.params, key) == nil then
        local near = settings_mod.closest_param(settings, key) or util.closest(key, params_mod.keys(settings.params))
        graph_error(string.format("step '%s' (%s) reads parameter '%s', which is not defined in environment '%s'%s",
          n.name, n.where, key, settings.env, near and (" (did you mean '" .. near .. "'?)") or ""))
      end
    end
    for _, io in ipairs(n.inputs) do
      local key = io.dataset:match("^params:(.+)$")
      if key then check(key) end
    end
    if n.kind == "command" then
      for _, s in ipairs(n.cmd.argv or { n.cmd.shell }) do
        for _, ref in ipairs(core.template_refs(s)) do
          if ref[1] == "params" then check(ref[2]) end
        end
      end
    end
  end
end

local run_fields = { jobs = true, keep_going = true, params = true, verbose = true, env = true,
                     nodes = true, from_nodes = true, to_nodes = true, tags = true,
                     from_inputs = true, to_outputs = true, distributed = true }

-- A dataset's copy on disk from an earlier run: a command's output file or
-- folder, or a Lua value written as JSON (or text) for a command.
function M.saved_copy(dataset)
  local base = DATA .. "/" .. core.safe_name(dataset)
  if core.exists(base) then return { path = base } end
  local json = core.read_file(base .. ".json")
  if json then return { value = core.json_decode(json), path = base .. ".json" } end
  local text = core.read_file(base .. ".txt")
  if text then return { value = text, path = base .. ".txt" } end
end

local function as_list(v, what, level)
  if v == nil then return nil end
  if type(v) == "string" then
    local t = {}
    for part in v:gmatch("[^,]+") do t[#t + 1] = part:match("^%s*(.-)%s*$") end
    return t
  end
  if not util.is_list(v) then util.fail(level + 1, "flow.run: %s must be a list of names", what) end
  return v
end

-- Slicing, as Kedro does it: every filter given selects a set of steps and
-- the run takes their intersection.  Returns a selected-flags list, or nil for all.
local function select_steps(nodes, g, opts, level)
  local index, names = {}, {}
  for i, n in ipairs(nodes) do index[n.name] = i; names[i] = n.name end
  local function step_indices(list, flag)
    local out = {}
    for _, name in ipairs(list) do
      if not index[name] then
        graph_error(string.format("%s: no step named '%s'%s", flag, name, util.did_you_mean(name, names)))
      end
      out[#out + 1] = index[name]
    end
    return out
  end
  local function consumers_of(list, flag)
    local out, known = {}, {}
    for i, n in ipairs(nodes) do
      for _, io in ipairs(n.inputs) do
        known[io.dataset] = true
        for _, d in ipairs(list) do if io.dataset == d then out[#out + 1] = i end end
      end
    end
    for _, d in ipairs(list) do if not known[d] then graph_error(string.format("%s: no step reads '%s'", flag, d)) end end
    return out
  end
  local function producers_of(list, flag)
    local out = {}
    for _, d in ipairs(list) do
      local p = g:producer(d)
      if not p then graph_error(string.format("%s: no step produces '%s'", flag, d)) end
      out[#out + 1] = p
    end
    return out
  end
  local sets = {}
  local v = as_list(opts.nodes, "nodes", level + 1)
  if v then local t = {} for _, i in ipairs(step_indices(v, "--nodes")) do t[i] = true end sets[#sets + 1] = t end
  v = as_list(opts.from_nodes, "from_nodes", level + 1)
  if v then sets[#sets + 1] = g:downstream(step_indices(v, "--from-nodes")) end
  v = as_list(opts.to_nodes, "to_nodes", level + 1)
  if v then sets[#sets + 1] = g:upstream(step_indices(v, "--to-nodes")) end
  v = as_list(opts.from_inputs, "from_inputs", level + 1)
  if v then sets[#sets + 1] = g:downstream(consumers_of(v, "--from-inputs")) end
  v = as_list(opts.to_outputs, "to_outputs", level + 1)
  if v then sets[#sets + 1] = g:upstream(producers_of(v, "--to-outputs")) end
  v = as_list(opts.tags, "tags", level + 1)
  if v then
    local t, wanted = {}, {}
    for _, tag in ipairs(v) do wanted[tag] = true end
    for i, n in ipairs(nodes) do
      for _, tag in ipairs(n.tags) do if wanted[tag] then t[i] = true end end
    end
    sets[#sets + 1] = t
  end
  if #sets == 0 then return nil end
  local selected, count = {}, 0
  for i = 1, #nodes do
    local keep = true
    for _, set in ipairs(sets) do if not set[i] then keep = false break end end
    selected[i] = keep
    if keep then count = count + 1 end
  end
  if count == 0 then graph_error("the selection (--nodes, --from-nodes, --to-nodes, --tags, --from-inputs, --to-outputs) matches no step") end
  return selected
end

-- Inputs of selected steps that unselected steps produce must have a saved
-- copy; returns {dataset = copy}, or raises listing what is missing.
local function saved_inputs(nodes, g, selected)
  local copies, missing = {}, {}
  for i, n in ipairs(nodes) do
    if selected[i] then
      for _, io in ipairs(n.inputs) do
        local p = g:producer(io.dataset)      -- nil for parameters too
        if p and not selected[p] and not copies[io.dataset] then
          copies[io.dataset] = M.saved_copy(io.dataset)
          if not copies[io.dataset] then
            missing[#missing + 1] = string.format("  '%s' (from step '%s', needed by '%s')", io.dataset, nodes[p].name, n.name)
          end
        end
      end
    end
  end
  if #missing > 0 then
    graph_error("the selected steps need datasets that unselected steps produce and that have no saved copy:\n"
                .. table.concat(missing, "\n") .. "\n(select their producers too, e.g. with --from-nodes)")
  end
  return copies
end

-- What the command line chose ({env =, params_spec =, conf =}); flow.run
-- calls from a driver script start from it.
M.defaults = {}

-- Everything a run or a listing needs before any step runs: the pipeline's
-- nodes, the configuration, resolved distribution settings and the graph.
function M.prepare(p, opts, level)
  level = (level or 1) + 1
  if pipeline.is_node(p) then p = pipeline.pipeline({ p }) end
  if not pipeline.is_pipeline(p) then util.fail(level, "flow.run: expected a pipeline, got %s", type(p)) end
  util.check_fields(opts, run_fields, "flow.run", level)
  if opts.params ~= nil and type(opts.params) ~= "table" then
    util.fail(level, "flow.run: params must be a table")
  end
  local settings = settings_mod.load { conf = M.defaults.conf, env = opts.env or M.defaults.env,
                                       params_spec = M.defaults.params_spec, params = opts.params }
  local dists = {}
  for i, n in ipairs(p.nodes) do dists[i] = M.resolve_dist(n, settings) end
  local g = M.build_graph(p.nodes, dists)
  check_params(p.nodes, settings)
  local selected = select_steps(p.nodes, g, opts, level)
  local copies = selected and saved_inputs(p.nodes, g, selected) or {}
  local mode = opts.distributed or M.defaults.distributed
  if not mode and settings.cfg then mode = settings.cfg:get("flow", "distributed") end
  mode = mode or "once"
  if not launch.MODES[mode] then
    graph_error(string.format("distributed must be 'once' (run a distributed step once, the default) or 'local' "
      .. "(launch all its ranks here), got '%s' (from %s)", tostring(mode),
      (opts.distributed or M.defaults.distributed) and "--distributed" or
      (settings.cfg:origin("flow", "distributed") or "conf/<env>/flow.yml")))
  end
  return { nodes = p.nodes, settings = settings, dists = dists, graph = g, selected = selected,
           copies = copies, mode = mode }
end

-- flow.run(p, opts) -> result {status =, code =, outputs =, steps =, run_id =}
-- Graph errors raise {graph_error = message}; step failures are in the result.
function M.run(p, opts, level)
  opts = opts or {}
  if M.child then return M.run_child(pipeline.is_node(p) and pipeline.pipeline({ p }) or p) end
  local plan = M.prepare(p, opts, (level or 1) + 1)
  local nodes, g, params = plan.nodes, plan.graph, plan.settings.params

  local run_id = core.run_id()
  local run_dir = ".flow/runs/" .. run_id
  local self = setmetatable({
    nodes = nodes, params = params, values = plan.copies, verbose = opts.verbose, records = {},
    dists = plan.dists, mode = plan.mode, index = {},
    run_id = run_id, run_dir = run_dir, log_dir = run_dir .. "/logs", tmp_dir = ".flow/tmp/" .. run_id,
  }, Run)
  for i, n in ipairs(nodes) do self.records[n.name] = {}; self.index[n] = i end
  local started = core.time()
  core.mkdir_p(self.log_dir)
  core.mkdir_p(self.tmp_dir)
  core.mkdir_p(DATA)
  core.symlink(run_id, ".flow/runs/latest")
  local code, states, elapsed = sched.run(g, { jobs = opts.jobs or core.cpu_count(),
                                               keep_going = opts.keep_going, selected = plan.selected },
                                          function(i) return self:step(i) end)
  core.remove_tree(self.tmp_dir)
  M.runs_started, M.last_code = M.runs_started + 1, code
  local result = { code = code, run_id = run_id, steps = {}, outputs = {}, env = plan.settings.env,
                   status = code == 0 and "ok" or code == 130 and "interrupted" or "failed" }
  local consumed = {}
  for i, n in ipairs(nodes) do
    result.steps[n.name] = { state = states[i], elapsed = elapsed[i] }
    for _, io in ipairs(n.inputs) do consumed[io.dataset] = true end
  end
  for _, n in ipairs(nodes) do
    for _, io in ipairs(n.outputs) do
      local v = self.values[io.dataset]
      if v and not consumed[io.dataset] then
        result.outputs[io.dataset] = v.path or v.value
      end
    end
  end
  self:write_summary(result, started, states)
  if code ~= 0 then result.resume_from = self:resume_points(g, states) end
  return result
end

return M
