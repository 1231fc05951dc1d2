-- flow.incremental: whether a step must run.  Before a ready step starts,
-- the scheduler asks whether it is up to date: a command step first of the
-- engine's check (engine/uptodate.c, described here by Run:engine_check),
-- which passes it without entering Lua when it is sure; any other step, and
-- one the engine cannot decide, comes to Run:up_to_date(i), which computes
-- the step's fingerprint (flow.fingerprint) and compares it with the step's
-- last successful run (flow.state).  A step whose fingerprint and outputs
-- still hold is not run, and its recorded outputs stand in for it.
-- Methods of the run object (flow.runner mixes them in).
local core = require("flow.core")
local command = require("flow.command")
local dag = require("flow.dag")
local pipeline = require("flow.pipeline")
local params_mod = require("flow.params")
local fingerprint = require("flow.fingerprint")
local state_mod = require("flow.state")
local failure = require("flow.failure")
local cache = require("flow.cache")
local values_c = require("flow.values_c")
local remote = require("flow.remote")

local first_line = failure.first_line

local M = {}
local Run = {}
M.methods = Run

local NO_PARAMS = setmetatable({}, { __newindex = function() error("flow.incremental: NO_PARAMS is shared", 2) end })
local NO_NAMES = {}

-- Why a step that was never run (successfully) runs: the Lua check's words,
-- and the engine's check's, which finds such a step itself.
M.NO_RECORD = "it has no earlier successful run"

-- parts.params[key] = hash; the table made on the first parameter a step reads.
local function set_param(parts, key, hash)
  if rawequal(parts.params, NO_PARAMS) then parts.params = {} end
  parts.params[key] = hash
end

-- The hash of parameter `key`'s value, once per run.
local function param_hash(self, key)
  local ph = self.memo.params[key]
  if not ph then
    ph = self.hasher:value(params_mod.get(self.settings, key))
    self.memo.params[key] = ph
  end
  return ph
end

-- An output's part: its dataset, type and path (a step that writes
-- elsewhere is another step).
local function output_part(self, d)
  local e = self.cat:entry(d)
  return d .. "\0" .. e.type .. "\0" .. (e.path or "") .. (e.versioned and "\0v" or "")
end

-- An input's catalog type (and whether it is versioned), for a dataset the
-- catalog declares: what the step is handed for it (a string, a table, a
-- path) depends on it as much as on the content.  nil for a memory value.
local function input_part(self, d)
  local e = self.cat:entry(d)
  if not e.declared then return nil end
  return "<" .. d .. "\0" .. e.type .. (e.versioned and "\0v" or "")
end

-- The outputs' part: one string for the usual single output; several sorted
-- by their bytes, as the engine sorts them (lua/uptodate_describe.c), not by
-- table.sort's strcoll (which os.setlocale keeps at C's, lua/state.c, but a
-- C module a script loads could change); then, each after a "\n", the
-- sorted parts of its declared inputs (once each).
local function outputs_part(self, n)
  local outs, part = n.outputs, nil
  if #outs == 1 then
    part = output_part(self, outs[1].dataset)
  else
    local t = {}
    for k, io in ipairs(outs) do t[k] = output_part(self, io.dataset) end
    core.sort_bytes(t)
    part = table.concat(t, "\n")
  end
  local ins, seen
  for _, io in ipairs(n.inputs) do
    local p = not dag.is_param_input(io.dataset) and input_part(self, io.dataset)
    if p and not (seen and seen[p]) then
      ins, seen = ins or {}, seen or {}
      seen[p] = true
      ins[#ins + 1] = p
    end
  end
  if not ins then return part end
  core.sort_bytes(ins)
  return part .. "\n" .. table.concat(ins, "\n")
end

-- The parts of step i's fingerprint fixed for the whole run: its code
-- (and, for a command, the names of the project files it may name), the
-- parameters it reads, its distribution and its outputs.  The engine's check
-- of command steps (engine/uptodate.c) gets these once, before the run.
-- A step that reads no parameter shares one empty, read-only params table.
function Run:static_parts(i, n)
  local h = self.hasher
  local parts = { params = NO_PARAMS }
  local names
  if n.kind == "func" then
    parts.code = h:fn(n.fn)
  else
    parts.code, names = fingerprint.command_code(n.cmd, self.root, self.memo.code)
    for _, s in ipairs(command.template_strings(n.cmd)) do
      local refs = self.memo.refs[s]
      if not refs then
        refs = {}
        for _, ref in ipairs(core.template_refs(s)) do
          if ref[1] == "params" then refs[#refs + 1] = ref[2] end
        end
        self.memo.refs[s] = refs
      end
      for _, key in ipairs(refs) do
        key = pipeline.command_param(n, key)
        set_param(parts, key, param_hash(self, key))
      end
    end
  end
  for _, io in ipairs(n.inputs) do
    local key = dag.is_param_input(io.dataset)
    if key == true then set_param(parts, "*", h:value(self.params))
    elseif key then set_param(parts, key, param_hash(self, key)) end
  end
  local dist, place = self.dists[i], self.remote[i]
  if place then        -- on Azure ML: where and in what it runs count, not --distributed
    local info = remote.info(self.aml)
    parts.dist = h:value({ "azureml", place.framework or false, place.instances, place.processes,
                           place.parameter_server_count or false, place.compute, n.environment or info.environment,
                           n.instance_type or info.instance_type or false, n.shm_size or info.shm_size or false,
                           info.datastore })
  elseif dist then
    parts.dist = h:value({ dist.framework, dist.num_nodes, dist.processes_per_node,
                           dist.parameter_server_count or false, self.mode })
  end
  parts.outputs = outputs_part(self, n)
  return parts, names
end

-- The parts of step i's fingerprint (see flow.fingerprint).
function Run:parts(i, n)
  local parts, names = self:static_parts(i, n)
  if names then parts.files = fingerprint.file_hashes(names, self.hc) end
  parts.inputs = {}
  for _, io in ipairs(n.inputs) do
    local d = io.dataset
    if not dag.is_param_input(d) then parts.inputs[d] = self:hash_of(d) end
  end
  return parts
end

-- Why the recorded outputs of step n (step i) no longer stand, or nil if they do.
function Run:outputs_changed(n, rec, i)
  for _, io in ipairs(n.outputs) do
    local d = io.dataset
    local out = rec.outputs[d]
    if not out then return string.format("its last run has no record of output '%s'", d) end
    if out.uncacheable then
      return string.format("its output '%s' cannot be cached (%s)", d, out.uncacheable)
    elseif out.recompute and self:keeps_values(n, i) then
      return string.format("its output '%s' was not kept between runs, and the step keeps its values now "
        .. "(it has a timeout, retries, a pool, metrics or ranks)", d)
    elseif out.recompute then            -- not kept: made again for a reader that needs it (flow.values)
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
  local rec = self.state.steps[n.name]
  -- the record judged is kept: a run beside this one may put another meanwhile
  self.pending[i] = { fp = fp, parts = parts, rec = rec }
  if n.name == self.sweep_step then return "its trials run as an Azure ML sweep job" end
  if self.force and not self.completed[n.name] then return "--force" end
  if not rec then return M.NO_RECORD end
  if rec.fp ~= fp then
    if not rec.parts then return "its fingerprint changed" end
    return fingerprint.explain(rec.parts, fingerprint.short(parts), n.kind == "command")
  end
  return self:outputs_changed(n, rec, i)
end

-- The value a recorded output stands in with: a file or folder at its path
-- (with the catalog entry of its dataset), or a memory value.
local function value_from_record(out, entry)
  if out.path then return { path = out.path, hash = out.hash, entry = entry, uri = out.uri, uri_type = out.uri_type } end
  return { out = out, hash = out.hash }
end

-- The engine's up-to-date check (engine/uptodate.c): each selected step
-- described once, with the parts fixed for the run (a Lua function's hash
-- is its prototype's, found once per run, with its upvalues' values as they
-- are now) and where each input's hash comes from.  chk:describe describes
-- in C every step whose parts the tables it is given already hold (the
-- steps of one function expression or one command line after the first);
-- Run:static_parts the others.  A step the engine finds
-- up to date never enters Lua: its recorded outputs stand in lazily
-- (self.values looks them up in its state record on first use).  A step it
-- cannot decide comes to Run:up_to_date as before.  A step without a record
-- (every step of a first run) runs, and the engine computes its fingerprint
-- for its record too (the scheduler takes it, and engine/step.c puts the
-- record), so it never enters this file's Lua either.  Not used with --force
-- or --explain (the Lua check says why each step runs).  Returns the checker
-- (sched.run's opts.check), or nil.
function Run:engine_check(plan)
  local nodes, g, selected = self.nodes, plan.graph, plan.selected
  local chk = cache.uptodate(g, self.hc, self.state.store, selected, self.values)
  -- step i described here: a step the check cannot describe from the
  -- tables below by itself (the first closure of each function expression,
  -- the first command of each command line, ...: lua/uptodate_describe.c)
  local function describe(i)
    local n = nodes[i]
    local ok, parts, names = false, nil, nil        -- the sweep job's step always runs (Run:decide)
    if n.name ~= self.sweep_step then ok, parts, names = pcall(self.static_parts, self, i, n) end
    -- (chk:set names a step it cannot describe: its consumers may still use
    -- its record once it is fresh)
    if ok then return chk:set(i, parts.code, parts.dist, parts.outputs, parts.params, names or NO_NAMES) end
    chk:name(i)
    return false
  end
  -- (the keepers first: chk:describe decides the steps it can at once)
  for _, i in ipairs(plan.keepers) do
    if (not selected or selected[i]) and self:keeps_values(nodes[i], i) then chk:keeps(i) end
  end
  local described, in_c = chk:describe {
    nodes = nodes, fn_memo = self.hasher.memo, protos = self.hasher.protos, params = self.memo.params,
    code_memo = self.memo.code, refs = self.memo.refs, cat_memo = self.cat.memo, cat_exact = self.cat.exact,
    patterns = #self.cat.patterns > 0,
    dists = self.dists, remote = self.remote, sweep_step = self.sweep_step, fallback = describe }
  self.described_in_c = in_c          -- (FLOW_DEBUG_UPTODATE's line, runner.lua)
  if not described then return nil end
  local state = self.state
  values_c.on_miss(self.values, function(values, d)
    local p = type(d) == "string" and g:producer(d)
    if not (p and chk:passed(p)) then return nil end
    local n = nodes[p]
    local rec = state.steps[n.name]
    local out = rec and rec.outputs[d]
    if not out then return nil end
    local v = value_from_record(out, self.cat:entry(d))
    values[d] = v
    return v
  end)
  return chk
end

-- Recorded outputs stand in for a step that does not run (Run:engine_check's
-- lookup does the same, on first use, for the steps the engine passed).
function Run:use_recorded(n, rec)
  for _, io in ipairs(n.outputs) do
    self.values[io.dataset] = value_from_record(rec.outputs[io.dataset], self.cat:entry(io.dataset))
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
  local rec = self.pending[i].rec
  self.pending[i] = nil                       -- its parts are needed only for a run's record
  self:use_recorded(n, rec)
  if self.check then self.check:fresh(i, rec.fp) end  -- its record stands: consumers may use its hashes
  if self.explain then explain_line(n, "is up to date") end
  -- its journal line ("up to date") is engine/step.c's
  return true
end

return M
