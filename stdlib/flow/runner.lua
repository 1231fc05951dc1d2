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
local catalog = require("flow.catalog")
local cache = require("flow.cache")
local fingerprint = require("flow.fingerprint")
local state_mod = require("flow.state")
local credentials = require("flow.credentials")
-- What flow writes into its own files (journal, run.json, logs' headers)
-- goes through the configuration's redaction, as its messages do
-- (util.record_json for JSON records).
local redact = require("flow.config").redact

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
  local key = dag.is_param_input(ref)
  local v = params_mod.get(settings, key)
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
function M.build_graph(nodes, dists, declared)
  -- the nodes as they are (no copy per step); dists[i] is node i's resolved dist
  local ok, g = pcall(dag.build, nodes, declared or {}, dists or {})
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

-- self.values[d]: what the run knows of dataset d —
--   value, loaded   the Lua value (loaded = true once it is in memory)
--   path            where it is on disk (a persisted or command-written dataset)
--   hash            its content hash (inputs' hashes go into fingerprints)
--   out             a cached memory value's record, restored on first use
--   entry           its catalog entry when it is persisted

-- The Lua value of dataset d, restored or loaded on first use.
function Run:value_of(d)
  local v = self.values[d]
  if not v.loaded then
    if v.out then v.value = state_mod.restore_value(v.out, d)
    elseif v.entry and catalog.persisted(v.entry) then v.value = catalog.decode(v.entry, v.path)
    else return v.path end           -- a command's output that the catalog does not type: its path
    v.loaded = true
  end
  return v.value
end

-- The value a Lua function receives for input `io`.
function Run:input_value(n, io)
  local key = dag.is_param_input(io.dataset)
  if key == true then return self.params end
  if key then return params_mod.get(self.settings, key) end
  local ok, v = pcall(self.value_of, self, io.dataset)
  if not ok then error(step_failure { message = string.format("step '%s': %s", n.name, tostring(v)) }) end
  return v
end

-- The path a command receives for input dataset `d`: a file on disk, or a
-- Lua value written out now (once per run) as JSON, or as text if a string.
function Run:input_path(d)
  local v = self.values[d]
  if v.path then return v.path end
  local value = self:value_of(d)
  local data, ext = value, ".txt"
  if type(value) ~= "string" then
    local err
    data, err = core.json_encode(value, true)
    if not data then
      error(step_failure { message = string.format("dataset '%s' cannot be passed to a command as JSON: %s", d, err) })
    end
    data, ext = data .. "\n", ".json"
  end
  core.mkdir_p(DATA)
  v.path = DATA .. "/" .. core.safe_name(d) .. ext
  core.write_atomic(v.path, data)
  return v.path
end

-- The content hash of dataset d, for the fingerprints of its consumers.
function Run:hash_of(d)
  local v = self.values[d]
  if not v.hash then
    local h, err = self.hc:file(v.path)
    if not h then error(string.format("cannot read dataset '%s': %s", d, err), 0) end
    v.hash = h
  end
  return v.hash
end

local function param_text(v)
  if type(v) == "table" then return (core.json_encode(v)) end
  return tostring(v)
end

-- The values a Lua function returned, by output dataset.
local function returned_values(n, results)
  local by = {}
  if n.output_style == "map" then
    local t = results[1]
    if type(t) ~= "table" then
      local keys = {}
      for _, io in ipairs(n.outputs) do keys[#keys + 1] = io.arg end
      table.sort(keys)
      error(step_failure { message = string.format("step '%s' must return a table with keys %s (its outputs are a map), got %s",
        n.name, table.concat(keys, ", "), type(t)) })
    end
    for _, io in ipairs(n.outputs) do
      if t[io.arg] == nil then
        error(step_failure { message = string.format("step '%s' returned no value for output '%s' (key %q)", n.name, io.dataset, io.arg) })
      end
      by[io.dataset] = t[io.arg]
    end
    return by
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
    by[io.dataset] = results[i]
  end
  return by
end

-- Where a step's output is staged while the step runs (in the run's
-- temporary directory; flow.cache.commit moves it into place).
function Run:staging_path(n, d)
  return self.tmp_dir .. "/" .. core.safe_name(n.name) .. "+" .. core.safe_name(d)    -- no name encodes a '+'
end

-- Where a finished output goes: its catalog path, or .flow/data/ for a
-- command's output the catalog does not persist.
function Run:final_path(e, d)
  if catalog.persisted(e) then return self.cat:save_path(e) end
  return DATA .. "/" .. core.safe_name(d)
end

-- Move a finished file or folder into place; record where and its hash.
function Run:commit(d, e, from, n)
  local final = self:final_path(e, d)
  local ok, err = pcall(cache.commit, from, final)
  if not ok then
    error(step_failure { message = string.format("step '%s': cannot save output '%s': %s", n.name, d, tostring(err)) })
  end
  local h, herr = self.hc:file(final)
  if not h then error(step_failure { message = string.format("step '%s': output '%s': %s", n.name, d, herr) }) end
  self.values[d] = { path = final, hash = h, entry = e }
  return { path = final, hash = h }
end

local function discard(staging)
  for _, path in pairs(staging) do core.remove_tree(path) end
end

-- Write `bytes` to `path`, checking open, write, flush and close: a full
-- disk or a file-size limit fails the step instead of leaving a truncated
-- file to commit.  Returns true, or nil and why.
local function write_checked(path, bytes)
  local f, err = io.open(path, "wb")
  if not f then return nil, err end
  local ok, werr = f:write(bytes)
  if ok then ok, werr = f:flush() end
  local closed, cerr = f:close()
  if not ok then return nil, string.format("cannot write %s: %s", path, werr) end
  if not closed then return nil, string.format("cannot write %s: %s", path, cerr) end
  return true
end

-- The input of step n that `path` is, lies in or holds (resolving symbolic
-- links), if any: committing `path` as an output would move that input away.
function Run:input_at(n, path)
  local real = cache.realpath(path)
  if not real then return nil end
  local function within(a, b) return a == b or a:sub(1, #b + 1) == b .. "/" end
  for _, io in ipairs(n.inputs) do
    local v = self.values[io.dataset]
    local p = v and v.path and cache.realpath(v.path)
    if p and (within(real, p) or within(p, real)) then return io.dataset end
  end
end

-- Save what a Lua function returned: memory values stay in memory (and in
-- the cache), persisted ones are written through the catalog.  Every output
-- is prepared (encoded, written to its staging path) before any is
-- committed, so a failure commits none.  Returns the output records for the
-- step's journal entry.
function Run:save_values(n, by)
  local ready, staged = {}, {}
  local function fail(fmt, ...)
    discard(staged)
    error(step_failure { message = string.format(fmt, ...) })
  end
  for i, o in ipairs(n.outputs) do
    local d, v = o.dataset, by[o.dataset]
    local e = self.cat:entry(d)
    if e.type == "memory" then
      local ok, rec, err = pcall(state_mod.store_value, v)
      if not ok then fail("step '%s': cannot cache output '%s': %s", n.name, d, tostring(rec)) end
      ready[i] = { memory = true, rec = rec, err = err }
    elseif e.type == "file" or e.type == "folder" then
      if type(v) ~= "string" or not core.exists(v) then
        fail("step '%s': output '%s' is a %s dataset (%s): the function returns the path of the %s it wrote, got %s",
             n.name, d, e.type, e.origin, e.type,
             type(v) == "string" and ("'" .. v .. "', which does not exist") or type(v))
      end
      local input = self:input_at(n, v)
      if input then
        fail("step '%s': output '%s' is the path of its input '%s' (%s): flow moves a %s output into place, "
             .. "which would take the input away; write a new %s and return its path", n.name, d, input, v, e.type, e.type)
      end
      ready[i] = { from = v }
    else
      local bytes, err = catalog.encode(e, v)
      if not bytes then fail("step '%s': output '%s' is a %s dataset (%s), but %s", n.name, d, e.type, e.origin, err) end
      local staging = self:staging_path(n, d)
      staged[d] = staging
      local ok, werr = write_checked(staging, bytes)
      if not ok then fail("step '%s': cannot save output '%s': %s", n.name, d, werr) end
      ready[i] = { from = staging, value = v }
    end
  end
  local outs = {}
  for i, o in ipairs(n.outputs) do
    local d, r = o.dataset, ready[i]
    if r.memory then
      outs[d] = r.rec or { uncacheable = r.err }
      self.values[d] = { value = by[d], loaded = true,
                         hash = r.rec and r.rec.hash or ("uncacheable:" .. self.run_id .. ":" .. d) }
    else
      outs[d] = self:commit(d, self.cat:entry(d), r.from, n)
      if r.value ~= nil then self.values[d].value, self.values[d].loaded = r.value, true end
    end
  end
  return outs
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
  local results
  if dist then results = self:run_function_ranks(n, dist, args, count)
  else results = table.pack(n.fn(table.unpack(args, 1, count))) end
  self.records[n.name].outputs = self:save_values(n, returned_values(n, results))
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
  local tmpdir = self.tmp_dir .. "/" .. core.safe_name(n.name) .. "~ranks"
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
  return results
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
    if ns == "credentials" then      -- refused in argv words before the run (flow.credentials)
      return nil, string.format("${credentials.%s} cannot be a command-line argument", key)
    end
    if ns == "params" then
      key = pipeline.command_param(n, key)
      local ok, v = pcall(params_mod.get, self.settings, key)
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
    if dag.is_param_input(io.dataset) then
      return param_text(self:input_value(n, io))
    end
    return self:input_path(io.dataset)
  end
  local cmd = n.cmd
  local function expand(s, quote)
    local out, err = core.expand(s, quote and function(ns, key)
      if ns == "credentials" then return credentials.shell_ref(key) end     -- "$FLOW_CRED_…"
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

-- The staging path of each output of step n, emptied of any leftover of an
-- earlier attempt; a folder output starts as an empty directory.
function Run:staging(n)
  local staging = {}
  for _, io in ipairs(n.outputs) do
    local path = self:staging_path(n, io.dataset)
    core.remove_tree(path)
    if self.cat:entry(io.dataset).type == "folder" then core.mkdir_p(path) end
    staging[io.dataset] = path
  end
  return staging
end

-- Move a successful command's outputs into place; all must exist, as the
-- kind (file or folder) the catalog declares.
function Run:commit_outputs(n, staging, display)
  for _, io in ipairs(n.outputs) do
    local d = io.dataset
    local kind, e = core.exists(staging[d]), self.cat:entry(d)
    local problem
    if not kind then problem = "did not write its output '%s'"
    elseif e.type == "folder" and kind ~= "directory" then problem = "wrote a file for its output '%s', a folder dataset"
    elseif catalog.persisted(e) and e.type ~= "folder" and kind == "directory" then
      problem = "wrote a directory for its output '%s', a " .. e.type .. " dataset (declare it as type: folder)"
    end
    if problem then
      discard(staging)
      error(step_failure { message = string.format("step '%s' exited 0 but " .. problem ..
        " (the command was given the path %s)\n  command: %s", n.name, d, staging[d], display) })
    end
  end
  -- A typed output is checked before anything is committed: bad JSON fails
  -- this step, not the one that reads it, and leaves the last good output.
  -- (The value is not kept: a command's consumers may all be commands.)
  for _, io in ipairs(n.outputs) do
    local d, e = io.dataset, self.cat:entry(io.dataset)
    if e.type == "json" or e.type == "lua" then
      local text, err = core.read_file(staging[d])
      local v, why = nil, err
      if text then v, why = catalog.parse(e, text, d) end
      if v == nil then
        discard(staging)
        error(step_failure { message = string.format("step '%s' exited 0 but its output '%s' (a %s dataset, %s) %s"
          .. "\n  command: %s", n.name, d, e.type, e.origin, text and why or ("cannot be read: " .. tostring(why)),
          display) })
      end
    end
  end
  local outs = {}
  for _, io in ipairs(n.outputs) do
    outs[io.dataset] = self:commit(io.dataset, self.cat:entry(io.dataset), staging[io.dataset], n)
  end
  return outs
end

function Run:log_path(n, rank)
  return self.log_dir .. "/" .. core.safe_name(n.name) .. (rank and ("+rank" .. rank) or "") .. ".log"
end

-- The credentials each command step's process gets in its environment, set
-- by flow.run for its steps (see flow.credentials).
local step_secrets = setmetatable({}, { __mode = "k" })

-- Every attempt of a step writes to the same log: the first starts it, a
-- retry adds to it, each under a header of its own.  Returns the header and
-- whether to append.
function Run:attempt_header(n)
  if n.retries == 0 then return "", false end
  local attempt = self.records[n.name].attempts or 1
  return string.format("%s--- attempt %d of %d ---\n", attempt > 1 and "\n" or "", attempt, n.retries + 1),
         attempt > 1
end

-- print() in a Lua step: into the step's log like a command's output, and
-- shown as the pipeline's output: on stdout, prefixed with the step's name
-- under -v, not at all under -q.  Anywhere else it is a plain print.
local printing = setmetatable({}, { __mode = "k" })     -- step coroutine -> { run =, n = }

function M.print(text)
  local to = printing[coroutine.running()]
  if to then to.run:step_print(to.n, text) else core.ui_print(text) end
end

function Run:step_print(n, text)
  local rec, path = self.records[n.name], self:log_path(n)
  -- A log that cannot be written fails the step, as a command's does.
  local function check(ok, err)
    if not ok then
      error(step_failure { message = string.format("step '%s': cannot write its log %s: %s", n.name, path, err) }, 0)
    end
    return ok
  end
  if rec.print_attempt ~= rec.attempts then       -- the first print of this attempt
    if rec.print_log then rec.print_log:close() end
    local header, append = self:attempt_header(n)
    rec.print_log = check(io.open(path, append and "a" or "w"))
    rec.print_log:setvbuf("line")
    check(rec.print_log:write(header))
    rec.print_attempt = rec.attempts
  end
  check(rec.print_log:write(redact(text)))
  if core.ui_level() == "quiet" then return end
  if self.verbose then
    text = text:gsub("([^\n]*)\n", function(line) return "[" .. n.name .. "] " .. line .. "\n" end)
  end
  core.ui_print(text)
end

local function command_env(n, extra)
  local env = {}
  for k, v in pairs(n.cmd and n.cmd.env or {}) do env[k] = v end
  for k, v in pairs(step_secrets[n] or {}) do env[k] = v end
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
  self.records[n.name].outputs = self:commit_outputs(n, staging, display)
end

-- A process that succeeded but whose log could not be written (a full
-- disk) fails its step: its outputs may be as incomplete as its log.
local function check_log(n, r, log)
  if r.log_error then
    error(step_failure { message = string.format("step '%s': cannot write its log %s: %s", n.name, log, r.log_error) })
  end
end

function Run:launch_once(n, argv, display)
  local log = self:log_path(n)
  local header, append = self:attempt_header(n)
  local r, err = proc.spawn { argv = argv, cwd = n.cmd and n.cmd.cwd, log = log, env = command_env(n),
                              header = redact(header .. "$ " .. display .. "\n"), append = append,
                              echo = self.verbose and ("[" .. n.name .. "] ") or nil }
  if not r then error(step_failure { message = string.format("step '%s': %s", n.name, err) }) end
  self.records[n.name].exit_code = r.code
  if r.code ~= 0 then error(process_failure(n, r, display, log)) end
  check_log(n, r, log)
end

-- distributed: local — every rank of the job as a local process.
function Run:launch_ranks(n, dist, argv, display)
  if dist.framework == "mpi" then return self:launch_mpi(n, dist, argv, display) end
  local ranks = dist.framework == "pytorch" and launch.pytorch_ranks(dist) or launch.tensorflow_ranks(dist)
  local specs = {}
  local header, append = self:attempt_header(n)
  for r, env in ipairs(ranks) do
    local log = self:log_path(n, r - 1)
    specs[r] = { argv = argv, cwd = n.cmd and n.cmd.cwd, log = log, env = command_env(n, env), append = append,
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

function Run:launch_mpi(n, dist, argv, display)
  local log = self:log_path(n)
  local margv, menv = launch.mpi_argv(dist, argv, (log:gsub("%.log$", "")))
  local env = command_env(n)
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

local function first_line(err)
  local s = getmetatable(err) == StepFailure and err.message or tostring(err)
  return s:match("^[^\n]*")
end

local function report(n, err)
  if core.interrupted() > 0 then return end      -- interrupted, not failed: the summary says so
  if getmetatable(err) == StepFailure then
    if not err.quiet then core.ui_error(err.message) end
  else
    core.ui_error(string.format("step '%s' failed: %s", n.name, util.user_traceback(tostring(err))))
  end
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

-- The parts of step i's fingerprint (see flow.fingerprint).
function Run:parts(i, n)
  local h = self.hasher
  local parts = { params = {}, inputs = {} }
  local function param(key)
    local ph = self.memo.params[key]
    if not ph then
      ph = h:value(params_mod.get(self.settings, key))
      self.memo.params[key] = ph
    end
    parts.params[key] = ph
  end
  if n.kind == "func" then
    parts.code = h:fn(n.fn)
  else
    parts.code, parts.files = fingerprint.command_code(n.cmd, self.root, self.hc, self.memo.code)
    for _, s in ipairs(n.cmd.argv or { n.cmd.shell }) do
      local refs = self.memo.refs[s]
      if not refs then
        refs = {}
        for _, ref in ipairs(core.template_refs(s)) do
          if ref[1] == "params" then refs[#refs + 1] = ref[2] end
        end
        self.memo.refs[s] = refs
      end
      for _, key in ipairs(refs) do param(pipeline.command_param(n, key)) end
    end
  end
  for _, io in ipairs(n.inputs) do
    local d = io.dataset
    local key = dag.is_param_input(d)
    if key == true then parts.params["*"] = h:value(self.params)
    elseif key then param(key)
    else parts.inputs[d] = self:hash_of(d) end
  end
  local dist = self.dists[i]
  if dist then
    parts.dist = h:value({ dist.framework, dist.num_nodes, dist.processes_per_node,
                           dist.parameter_server_count or false, self.mode })
  end
  local outs = {}
  for k, io in ipairs(n.outputs) do
    local e = self.cat:entry(io.dataset)
    outs[k] = io.dataset .. "\0" .. e.type .. "\0" .. (e.path or "") .. (e.versioned and "\0v" or "")
  end
  if #outs > 1 then table.sort(outs) end
  parts.outputs = table.concat(outs, "\n")
  return parts
end

-- Why the recorded outputs of step n no longer stand, or nil if they do.
function Run:outputs_changed(n, rec)
  for _, io in ipairs(n.outputs) do
    local d = io.dataset
    local out = rec.outputs[d]
    if not out then return string.format("its last run has no record of output '%s'", d) end
    if out.uncacheable then
      return string.format("its output '%s' cannot be cached (%s)", d, out.uncacheable)
    elseif out.path then
      local h = self.hc:file(out.path)
      if not h then return string.format("its output '%s' is missing (%s)", d, out.path) end
      if h ~= out.hash then return string.format("its output '%s' was changed since (%s)", d, out.path) end
    else
      local ok, why = state_mod.value_available(out, self.hc)
      if why == "damaged" then
        core.ui_warn(string.format("the cached value of '%s' (output of step '%s') was damaged "
          .. "(its content no longer matches its hash); the step runs again", d, n.name))
      end
      if not ok then return string.format("the cached value of its output '%s' is %s", d, why) end
    end
  end
end

-- Whether step i is up to date: returns nil when it is, else
-- why it runs.  Its fingerprint is kept for the record of its run.
function Run:decide(i, n)
  local parts = self:parts(i, n)
  local fp = fingerprint.combine(parts)
  self.pending[i] = { fp = fp, parts = parts }
  local rec = self.state.steps[n.name]
  if self.force and not self.completed[n.name] then return "--force" end
  if not rec then return "it has no earlier successful run" end
  if rec.fp ~= fp then
    if not rec.parts then return "its fingerprint changed" end
    return fingerprint.explain(rec.parts, fingerprint.short(parts), n.kind == "command")
  end
  return self:outputs_changed(n, rec)
end

-- Recorded outputs stand in for a step that does not run.
function Run:use_recorded(n, rec)
  for _, io in ipairs(n.outputs) do
    local out, e = rec.outputs[io.dataset], self.cat:entry(io.dataset)
    if out.path then self.values[io.dataset] = { path = out.path, hash = out.hash, entry = e }
    else self.values[io.dataset] = { out = out, hash = out.hash } end
  end
end

local function explain_line(n, verdict, why)
  core.ui_info(string.format("explain: %s %s%s", n.name, verdict, why and (": " .. why) or ""))
end

-- Asked by the scheduler before step i starts (on the main thread).
function Run:up_to_date(i)
  local n = self.nodes[i]
  local ok, why = pcall(self.decide, self, i, n)
  if not ok then
    -- An input that cannot be hashed: the step runs and meets the problem itself.
    why = first_line(why)
  end
  if why then
    self.records[n.name].reason = why
    if self.explain then explain_line(n, "runs", why) end
    return false
  end
  self.pending[i] = nil                       -- its parts are needed only for a run's record
  self:use_recorded(n, self.state.steps[n.name])
  if self.explain then explain_line(n, "is up to date") end
  self.held[#self.held + 1] = '{"event":"step_end","step":' .. core.json_encode(redact(n.name)) .. ',"status":"up to date"}'
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

-- Every "params:" input and ${params.} reference must exist before anything runs.
local function check_params(nodes, settings)
  for _, n in ipairs(nodes) do
    local function check(key)
      if params_mod.get(settings, key) == nil then
        local near = settings_mod.closest_param(settings, key)
        graph_error(string.format("step '%s' (%s) reads parameter '%s', which is not defined in environment '%s'%s",
          n.name, n.where, key, settings.env, near and (" (did you mean '" .. near .. "'?)") or ""))
      end
    end
    for _, io in ipairs(n.inputs) do
      local key = dag.is_param_input(io.dataset)
      if type(key) == "string" then check(key) end
    end
    if n.kind == "command" then
      for _, s in ipairs(n.cmd.argv or { n.cmd.shell }) do
        for _, ref in ipairs(core.template_refs(s)) do
          if ref[1] == "params" then check(pipeline.command_param(n, ref[2])) end
        end
      end
    end
  end
end

-- Every ${inputs.x} / ${outputs.y} in a command must name one of its step's
-- inputs or outputs, and every reference must be well formed: checked with the
-- graph, so a typo stops the run before any step starts.
local TEMPLATE_NAMESPACES = { "inputs", "outputs", "params" }

local function check_templates(nodes)
  for _, n in ipairs(nodes) do
    if n.kind == "command" then
      local args = { inputs = {}, outputs = {} }
      for _, io in ipairs(n.inputs) do args.inputs[io.arg] = true end
      for _, io in ipairs(n.outputs) do args.outputs[io.arg] = true end
      for _, s in ipairs(n.cmd.argv or { n.cmd.shell }) do
        local refs, err = core.template_refs(s)
        for _, ref in ipairs(refs) do
          local ns, key = ref[1], ref[2]
          if args[ns] and not args[ns][key] then
            local names = util.sorted_keys(args[ns])
            local hint = util.did_you_mean(key, names)
            if hint == "" then
              hint = #names > 0 and string.format(" (its %s: %s)", ns, table.concat(names, ", "))
                     or string.format(" (it declares no %s)", ns)
            end
            graph_error(string.format("step '%s' (%s): ${%s.%s}: the step has no %s named '%s'%s", n.name, n.where,
              ns, key, ns == "inputs" and "input" or "output", key, hint))
          end
        end
        if err then
          local ns = err:match("^unknown reference '%${([^.}]*)%.")   -- template.c names the reference
          graph_error(string.format("step '%s' (%s): %s%s", n.name, n.where, err,
                                    ns and util.did_you_mean(ns, TEMPLATE_NAMESPACES) or ""))
        end
      end
    end
  end
end

local run_fields = { jobs = true, keep_going = true, params = true, verbose = true, env = true,
                     nodes = true, from_nodes = true, to_nodes = true, tags = true,
                     from_inputs = true, to_outputs = true, distributed = true,
                     force = true, explain = true, resume = true, load_versions = true }

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

-- The dataset d as an unselected producer p's last successful run left it
-- (nil when it did not), or as the catalog stores it.  Returns a value
-- entry, or nil and why not.
local function saved_dataset(d, e, out, cat)
  if out and out.path and core.exists(out.path) then return { path = out.path, entry = e } end
  if out and not out.path and not out.uncacheable and state_mod.value_available(out) then
    return { out = out, hash = out.hash }
  end
  if catalog.persisted(e) then
    local path, why = cat:load_path(e)
    if path then return { path = path, entry = e } end
    return nil, why
  end
  return nil, "no earlier run left it in the cache"
end

-- The datasets the selected steps read but no selected step writes: a
-- catalog dataset no step produces (the pipeline's raw data), or the output
-- of an unselected step as its last successful run left it.  Returns
-- {dataset = value entry}, or raises listing everything missing.
local function outside_inputs(plan, st)
  local nodes, g, selected, cat = plan.nodes, plan.graph, plan.selected, plan.cat
  local values, missing, seen, unselected_producer = {}, {}, {}, false
  local readers = selected and nodes or plan.free_readers     -- without a selection only free inputs are outside
  for i, n in ipairs(readers) do
    if not selected or selected[i] then
      for _, io in ipairs(n.inputs) do
        local d = io.dataset
        local p = g:producer(d)
        local inside = p and (not selected or selected[p])
        if not seen[d] and not inside and not dag.is_param_input(d) then
          seen[d] = true
          local e = cat:entry(d)
          local rec = p and st.steps[nodes[p].name]
          local v, why = saved_dataset(d, e, rec and rec.outputs and rec.outputs[d], cat)
          values[d] = v
          if not v then
            unselected_producer = unselected_producer or p ~= nil
            missing[#missing + 1] = string.format("  '%s' (%s), needed by '%s' (%s)%s: %s", d,
              e.declared and (e.type .. " dataset, " .. e.origin) or "memory dataset", n.name, n.where,
              p and string.format(", produced by '%s'", nodes[p].name) or "", why)
          end
        end
      end
    end
  end
  if #missing > 0 then
    -- The hint only where the selection left a dataset's producer out.
    graph_error((selected and "the selected steps read" or "the pipeline reads") .. " datasets that are not available:\n"
                .. table.concat(missing, "\n")
                .. (unselected_producer and "\n(run their producers too, e.g. with --from-nodes, or drop the selection)" or ""))
  end
  return values
end

-- What the command line chose ({env =, params_spec =, conf =}); flow.run
-- calls from a driver script start from it.
M.defaults = {}

-- Catalog-persisted datasets that no step produces (the pipeline's raw
-- inputs): the graph accepts them as inputs from outside.
-- Also returns which dataset each step produces, and the steps that read
-- a dataset no step produces.
local function catalog_inputs(nodes, cat)
  local produced, declared, seen, readers = {}, {}, {}, {}
  for _, n in ipairs(nodes) do
    for _, io in ipairs(n.outputs) do produced[io.dataset] = n.name end
  end
  for _, n in ipairs(nodes) do
    for _, io in ipairs(n.inputs) do
      local d = io.dataset
      if not produced[d] and not dag.is_param_input(d) then
        if readers[#readers] ~= n then readers[#readers + 1] = n end
        if not seen[d] then
          seen[d] = true
          if catalog.persisted(cat:entry(d)) then declared[#declared + 1] = d end
        end
      end
    end
  end
  return declared, produced, readers
end

-- Inputs that no step produces and the catalog does not declare, with the
-- steps that read them (file:line) and the closest dataset that does exist.
local function check_missing_inputs(nodes, cat, produced)
  local missing, readers = {}, {}
  for _, n in ipairs(nodes) do
    for _, io in ipairs(n.inputs) do
      local d = io.dataset
      if not produced[d] and d ~= "parameters" and not d:match("^params:") and not catalog.persisted(cat:entry(d)) then
        local r = readers[d]
        if not r then r = {}; readers[d] = r; missing[#missing + 1] = d end
        if r[#r] ~= n then r[#r + 1] = n end
      end
    end
  end
  if #missing == 0 then return end
  local known = util.sorted_keys(produced)
  for _, e in ipairs(cat:declared()) do
    if not produced[e.name] then known[#known + 1] = e.name end
  end
  local lines = {}
  for k, d in ipairs(missing) do
    if k > 20 then lines[#lines + 1] = string.format("  ... and %d more", #missing - 20) break end
    local who = {}
    for _, n in ipairs(readers[d]) do who[#who + 1] = string.format("'%s' (%s)", n.name, n.where) end
    lines[#lines + 1] = string.format("  '%s', needed by %s%s", d, table.concat(who, ", "), util.did_you_mean(d, known))
  end
  graph_error(string.format("%d input dataset%s that no step produces and the catalog does not declare:\n%s\n"
    .. "(add a step that outputs it, or declare it in conf/base/catalog.yml)", #missing, #missing == 1 and "" or "s",
    table.concat(lines, "\n")))
end

-- A catalog entry that no step of this pipeline (or of any registered one)
-- reads or writes is most likely a typo: a warning, once per entry and process.
local warned_unused = {}
local function warn_unused_entries(nodes, cat)
  local used, undeclared = {}, {}
  local function mark(list)
    for _, n in ipairs(list) do
      for _, io in ipairs(n.inputs) do used[io.dataset] = true end
      for _, io in ipairs(n.outputs) do used[io.dataset] = true end
    end
  end
  mark(nodes)
  for _, q in pairs(pipeline.registry) do mark(q.nodes) end
  for d in pairs(used) do
    if not cat:entry(d).declared and d ~= "parameters" and not d:match("^params:") then undeclared[#undeclared + 1] = d end
  end
  table.sort(undeclared)
  for _, e in ipairs(cat:declared()) do
    if not used[e.name] and not warned_unused[e.origin .. "\0" .. e.name] then
      warned_unused[e.origin .. "\0" .. e.name] = true
      core.ui_warn(string.format("%s: catalog entry '%s' is used by no step%s", e.origin, e.name,
                                 util.did_you_mean(e.name, undeclared)))
    end
  end
end

-- A path as one key: absolute, without "." or ".." segments or repeated '/'.
local function path_key(path, cwd)
  if path:sub(1, 1) ~= "/" then path = cwd .. "/" .. path end
  local parts = {}
  for seg in path:gmatch("[^/]+") do
    if seg == ".." then parts[#parts] = nil
    elseif seg ~= "." then parts[#parts + 1] = seg end
  end
  return "/" .. table.concat(parts, "/")
end

-- Every dataset needs a place of its own, or two would overwrite each other:
-- two catalog entries with one path, or two datasets flow keeps in
-- .flow/data (a command's output "a.json" and a value "a" a command reads,
-- written as a.json).  Raises naming both.
local function check_paths(nodes, cat)
  local owner, cwd = {}, core.cwd()
  local function claim(path, d, e)
    local key = path_key(path, cwd)
    local o = owner[key]
    if o and o.d ~= d then
      local function who(x)
        return x.e.declared and string.format("catalog entry '%s' (%s)", x.d, x.e.origin)
               or string.format("dataset '%s'", x.d)
      end
      graph_error(string.format("%s and %s are both stored at %s: each dataset needs a path of its own",
                                who(o), who({ d = d, e = e }), path))
    end
    owner[key] = { d = d, e = e }
  end
  for _, name in ipairs(util.sorted_keys(cat.exact)) do
    local e = cat.exact[name]
    if catalog.persisted(e) then claim(e.path, name, e) end
  end
  local by_command = {}
  for _, n in ipairs(nodes) do
    if n.kind == "command" then for _, io in ipairs(n.outputs) do by_command[io.dataset] = true end end
  end
  -- Only a pattern or a command gives a dataset a path not claimed above:
  -- a Lua step's memory values (most datasets, often) need no look.
  local patterns = #cat.patterns > 0
  local function place(d, command)
    if not (command or patterns) or d == "parameters" or d:find("^params:") then return end
    local e = cat:entry(d)
    if catalog.persisted(e) then
      if not cat.exact[d] then claim(e.path, d, e) end
    elseif by_command[d] then claim(DATA .. "/" .. core.safe_name(d), d, e)
    elseif command then
      claim(DATA .. "/" .. core.safe_name(d) .. ".json", d, e)
      claim(DATA .. "/" .. core.safe_name(d) .. ".txt", d, e)
    end
  end
  for _, n in ipairs(nodes) do
    local command = n.kind == "command"
    for _, io in ipairs(n.inputs) do place(io.dataset, command) end
    for _, io in ipairs(n.outputs) do place(io.dataset, command) end
  end
end

-- A step's `pool =` must name a pool of flow.yml's `pools:` (or `local`).
local function check_pools(nodes, settings)
  local names = { ["local"] = true }
  for name in pairs(settings.pools or {}) do
    if name ~= "remote" then names[name] = true end
  end
  for _, n in ipairs(nodes) do
    if n.pool and not names[n.pool] then
      local known = util.sorted_keys(names)
      local why = n.pool == "remote" and "the remote pool is for steps a remote backend runs"
        or string.format("it is not defined in environment '%s'%s", settings.env,
                         util.did_you_mean(n.pool, known))
      graph_error(string.format("step '%s' (%s) asks for pool '%s', but %s; pools: %s (define one in "
        .. "conf/<env>/flow.yml, e.g. pools: {%s: 1})", n.name, n.where, n.pool, why, table.concat(known, ", "),
        n.pool == "remote" and "gpu" or n.pool))
    end
  end
end

-- sched.run's pools (name = size, 0 unbounded) and each step's pool: its own
-- `pool =`, else `lua` for a Lua step and `local` for a command.  `local`
-- holds -j slots.  Lua steps have a pool of their own, as large: their code
-- runs on flow's one thread, so what the pool bounds is how many can wait at
-- once (on flow.sh, os.execute, a retry's back-off), and Lua steps neither
-- wait for command steps' slots nor take them.  `remote` (unbounded unless
-- flow.yml sizes it) is for steps a remote backend runs: their waits never
-- hold a local slot.
function M.pools(plan, jobs)
  local sizes = { ["local"] = jobs, lua = jobs, remote = 0 }
  for name, size in pairs(plan.settings.pools or {}) do sizes[name] = size end
  local of = {}
  for i, n in ipairs(plan.nodes) do of[i] = n.pool or (n.kind == "func" and "lua" or "local") end
  return sizes, of
end

-- Everything a run or a listing needs before any step runs: the pipeline's
-- nodes, the configuration, the catalog, resolved distribution settings and
-- the graph.
function M.prepare(p, opts, level)
  level = (level or 1) + 1
  if pipeline.is_node(p) then p = pipeline.pipeline({ p }) end
  if not pipeline.is_pipeline(p) then util.fail(level, "flow.run: expected a pipeline, got %s", type(p)) end
  util.check_fields(opts, run_fields, "flow.run", level)
  if opts.params ~= nil and type(opts.params) ~= "table" then
    util.fail(level, "flow.run: params must be a table")
  end
  local jobs = opts.jobs and math.tointeger(opts.jobs)
  if opts.jobs ~= nil and (not jobs or jobs < 1 or jobs > sched.MAX_JOBS) then
    util.fail(level, "flow.run: jobs must be a whole number from 1 to %d, got %s", sched.MAX_JOBS, tostring(opts.jobs))
  end
  local settings = settings_mod.load { conf = M.defaults.conf, env = opts.env or M.defaults.env,
                                       params_spec = M.defaults.params_spec, params = opts.params }
  local load_versions = opts.load_versions or M.defaults.load_versions
  if type(load_versions) ~= "table" then load_versions = catalog.parse_load_versions(load_versions) end
  local started = core.time()
  local cat = catalog.new(settings, { load_versions = load_versions, save_version = catalog.version_stamp(started) })
  local dists = {}
  for i, n in ipairs(p.nodes) do dists[i] = M.resolve_dist(n, settings) end
  local declared, produced, free_readers = catalog_inputs(p.nodes, cat)
  check_missing_inputs(p.nodes, cat, produced)
  check_paths(p.nodes, cat)
  local g = M.build_graph(p.nodes, dists, declared)
  cat:check_load_versions(produced)
  check_params(p.nodes, settings)
  check_pools(p.nodes, settings)
  check_templates(p.nodes)
  local selected = select_steps(p.nodes, g, opts, level)
  local mode = opts.distributed or M.defaults.distributed
  if not mode and settings.cfg then mode = settings.cfg:get("flow", "distributed") end
  mode = mode or "once"
  if not launch.MODES[mode] then
    graph_error(string.format("distributed must be 'once' (run a distributed step once, the default) or 'local' "
      .. "(launch all its ranks here), got '%s' (from %s)", tostring(mode),
      (opts.distributed or M.defaults.distributed) and "--distributed" or
      (settings.cfg:origin("flow", "distributed") or "conf/<env>/flow.yml")))
  end
  warn_unused_entries(p.nodes, cat)
  return { nodes = p.nodes, settings = settings, dists = dists, graph = g, selected = selected,
           mode = mode, cat = cat, started = started, free_readers = free_readers }
end

-- The per-run object, with the state of earlier runs loaded.
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
    run_id = run_id, run_dir = run_dir, log_dir = run_dir .. "/logs", tmp_dir = ".flow/tmp/" .. run_id,
  }, Run)
  for i, n in ipairs(plan.nodes) do self.records[n.name] = {}; self.index[n] = i end
  self.values = outside_inputs(plan, st)
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
  if M.child then return M.run_child(pipeline.is_node(p) and pipeline.pipeline({ p }) or p) end
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
