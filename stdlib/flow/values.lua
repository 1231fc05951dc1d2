-- flow.values: the data path of a run — what each dataset is (a Lua value,
-- a file, a cached value restored on first use), the paths and values a step
-- is given, and how a step's outputs are staged, checked and committed.
-- Methods of the run object (flow.runner mixes them in).
local core = require("flow.core")
local dag = require("flow.dag")
local util = require("flow.util")
local params_mod = require("flow.params")
local catalog = require("flow.catalog")
local cache = require("flow.cache")
local state_mod = require("flow.state")
local failure = require("flow.failure")
local metrics = require("flow.metrics")
local sched = require("flow.sched")
local proc = require("flow.proc")
local fingerprint = require("flow.fingerprint")
local values_c = require("flow.values_c")

local step_failure = failure.new
local graph_error = util.setup_error

local M = {}
local Run = {}
M.methods = Run

local DATA = ".flow/data"
M.DATA = DATA

-- self.values[d]: what the run knows of dataset d (the table is
-- values_c.table's: kept by the graph's dataset index for C, read and
-- written by name here, pairs() giving names) —
--   value, loaded   the Lua value (loaded = true once it is in memory)
--   path            where it is on disk (a persisted or command-written dataset)
--   hash            its content hash (inputs' hashes go into fingerprints)
--   out             a cached memory value's record, restored on first use
--   entry           its catalog entry when it is persisted

-- The Lua value of dataset d, restored, loaded or recomputed on first use.
function Run:value_of(d)
  local v = self.values[d]
  if not v.loaded then
    if v.out and v.out.recompute then return self:recompute(d)
    elseif v.out then v.value = state_mod.restore_value(v.out, d)
    elseif v.entry and catalog.persisted(v.entry) then v.value = catalog.decode(v.entry, v.path)
    else return v.path end           -- a command's output that the catalog does not type: its path
    v.loaded = true
  end
  return v.value
end

-- After step i ended well: each input no other step of the graph still has
-- to read is let go, so that a pipeline handing on large values (data
-- frames, models) holds each only while a step still needs it, not to the
-- run's end.  Every step of the graph counts, selected or not, run or found
-- up to date: only one that ends well here counts down, so a value a step
-- may still ask for (a retry, a producer called again for its reader, one
-- the run left out) is kept, as is every output nothing reads (the run's
-- result).  The counts are made when the first step ends, not for a run in
-- which none runs.  A dataset let go keeps its key, holding LET_GO: taking
-- keys out of a large table and adding others is what makes Lua rehash it
-- again and again (8 % of a 100,000-step run's instructions went there).
local LET_GO = setmetatable({}, { __index = function(_, field)
  error("internal error: a dataset let go after its last reader was asked for again (its " .. tostring(field)
        .. ")", 2)
end })

M.LET_GO = LET_GO                        -- (lua/plain_step.c lets a plain step's inputs go too)

function Run:release_inputs(i)
  self.graph:count_down(i, self:readers_left(), self.values, LET_GO)    -- (C: over the graph's lists, not n.inputs)
end

-- The counts release_inputs takes, made when first asked for.
function Run:readers_left()
  local left = self.counts_left
  if not left then
    left = self.graph:reader_counts()
    self.counts_left = left
  end
  return left
end

-- The value a Lua function receives for input `io`.
function Run:input_value(n, io)
  local v = self.values[io.dataset]
  if v and v.loaded then return v.value end      -- in memory already (a parameter never is)
  local key = dag.is_param_input(io.dataset)
  if key then return params_mod.of_input(self.settings, key) end
  if self.aml then self:localize(io.dataset, n) end      -- a job's output left on the datastore
  local ok, v = pcall(self.value_of, self, io.dataset)
  if not ok then
    if failure.is(v) then              -- a value made again: the step stopped meanwhile, or why it could not be
      if not (v.quiet or v.timed_out) then v.message = string.format("step '%s': %s", n.name, v.message) end
      error(v, 0)
    end
    error(step_failure { message = string.format("step '%s': %s", n.name, tostring(v)) })
  end
  return v
end

-- ---- Memory values that are not kept -------------------------------------
--
-- A Lua step whose outputs are all memory datasets that other steps read
-- keeps a value between runs only when it is small: serialised in at most
-- INLINE_MAX bytes, inside the step's record (no file of its own), as
-- before.  A larger one, or one that cannot be serialised (a function, a
-- userdata, a metatable...) or holds a credential, is handed to its readers
-- in this run and nothing of it is written: serialising stops at INLINE_MAX
-- bytes, nothing is hashed.  Its record says {hash = K, recompute = true},
-- K naming what made the value (the step's fingerprint and the dataset: its
-- readers' fingerprints take K where a kept value gives its content's hash).
-- A later run whose reader runs while the producer is up to date calls the
-- producer's function again for it (Run:recompute), as make remakes an
-- intermediate file and Snakemake a temp() one; the producer's record
-- stands, it does not "run".  Kept as before, however large: a value no
-- step reads (the pipeline's results, what flow.run returns) and the
-- outputs of a step that reports metrics, runs its ranks, runs in a pool,
-- has a timeout or retries, or has an output the catalog persists.  The catalog keeps any value across runs (`type:
-- lua` for a Lua table).

-- K for output d of a step whose fingerprint is fp: the C body's
-- (lua/l_values.c), the one spelling of it.
M.recompute_key = require("flow.values_c").recompute_key

-- For step i, whose large values need not be kept (see above): a function
-- returning the fingerprint that names them, called only for a value that
-- is not kept (most values are small: a string a step costs 10 MB in a
-- run of 100,000); else nil.  A step without a fingerprint (a run that
-- keeps no record of it) names them by the run.
function Run:unkept_namer(n, i)
  local keep = self.keep_values          -- (a sweep's trials: true, or the steps they share)
  if keep == true or (keep and keep[n.name]) or self:keeps_values(n, i) or not self.graph:outputs_all_read(i) then
    return nil                          -- (an output no step reads is the run's result: kept)
  end
  return self:namer()
end

-- The namer of unkept_namer: the fingerprint of the step that calls it.
function Run:namer()
  local namer = self.namer_fn
  if not namer then
    namer = function() return sched.fingerprint() or ("run " .. self.run_id) end
    self.namer_fn = namer
  end
  return namer
end

-- Whether step n (step i) keeps its values between runs, whatever their
-- size: called again, a step would run in its reader's turn, not in its
-- pool, nor under its own timeout and retries, its metrics and ranks not
-- its own.  A record of such a step whose value was not kept (made before
-- it had one of these) does not stand: it runs again (Run:outputs_changed,
-- and engine/uptodate.c told by Run:engine_check).  Only a step among the
-- plan's keepers may (asked of every step that runs, the rest is not read).
function Run:keeps_values(n, i)
  if not self.may_keep[i] then return false end
  return values_c.keeps(n, self.mode == "local" and self.dists[i] ~= nil)    -- (lua/plain_step.c's rule)
end

-- Whether dataset d's value is one not kept that is not in memory yet.
function Run:to_make_again(d)
  local v = not dag.is_param_input(d) and self.values[d]
  return v and not v.loaded and v.out and v.out.recompute or false
end

local outside_value            -- (below, with the run's other outside inputs)
local CHANGED_OUTSIDE = {}     -- Run:call_again's error: a step changed since it made the values

-- The inputs of step p that the run has no entry for (p is unselected, or
-- a step upstream of it is not done), as their producers' last runs (or
-- the catalog) left them: what calling p again for dataset `for_d` needs.
-- Raises naming one that is not available.
function Run:outside_of(p, for_d)
  local n = self.nodes[p]
  for _, io in ipairs(n.inputs) do
    local d = io.dataset
    -- (also one whose producer is this run's but not done, or failed: its
    -- last run's, as for an unselected producer; the reader's record then
    -- names what it read, so the next run sees any change)
    if not dag.is_param_input(d) and self.values[d] == nil then
      local q = self.graph:producer(d)
      local v, why = outside_value(d, q, self.nodes, self.state, self.cat)
      if not v then
        error(step_failure { no_retry = true, message = string.format("input '%s' is not kept between runs, and "
          .. "making it again needs '%s', which step '%s' reads: %s", for_d, d, n.name, why) }, 0)
      end
      self.values[d] = v
    end
  end
end

-- The producers to call again for dataset d, upstream first: d's, and
-- those of their inputs that are not kept either (a loop, not recursion:
-- a chain of them may be long).
function Run:makers_of(d)
  local g, todo, k, need, list = self.graph, { d }, 1, {}, {}
  while todo[k] do
    local p = g:producer(todo[k])
    k = k + 1
    if not need[p] then
      need[p] = true
      list[#list + 1] = p
      self:outside_of(p, d)           -- (an unselected step, or one of this run not done)
      for _, io in ipairs(self.nodes[p].inputs) do
        if self:to_make_again(io.dataset) then todo[#todo + 1] = io.dataset end
      end
    end
  end
  local pos = self.topo_pos
  if not pos then
    pos = {}
    for at, i in ipairs(g:order()) do pos[i] = at end
    self.topo_pos = pos
  end
  table.sort(list, function(a, b) return pos[a] < pos[b] end)
  return list
end

-- Step p's function called again for its values not kept (its inputs are
-- in memory); raises what it raised.  It is called only as it was when it
-- made the values its readers' fingerprints name: its fingerprint now
-- (code, parameters, inputs as this run sees them) must give each value's
-- recorded name.  (A step outside the selection was not checked; a record
-- may have been replaced since by a run beside this one.)
function Run:call_again(p)
  local n = self.nodes[p]
  local fp = fingerprint.combine(self:parts(p, n))
  for _, io in ipairs(n.outputs) do
    local d = io.dataset
    if self:to_make_again(d) and M.recompute_key(fp, d) ~= self.values[d].hash then error(CHANGED_OUTSIDE, 0) end
  end
  local args, count = self:function_args(n)
  local by = M.returned_values(n, table.pack(n.fn(table.unpack(args, 1, count))))
  for _, io in ipairs(n.outputs) do       -- (a value the record keeps stays the one it vouches for)
    local d = io.dataset
    if self:to_make_again(d) then
      local o = self.values[d]
      o.value, o.loaded = by[d], true
      if self.explain or self.verbose then
        core.ui_info(string.format("%s: called again for '%s' (a memory value, not kept between runs)", n.name, d))
      end
    end
  end
end

-- The value of dataset d, made again by its producer's function (see
-- above) for a step that reads it.  Two readers at once wait for one call:
-- recomputing[p] is the coroutine making p's values, cleared when its call
-- ends, and by Run:attempt when the step it serves stopped meanwhile
-- (Ctrl-C, its timeout: the stop passes any pcall here by).
function Run:recompute(d)
  self.recomputing = self.recomputing or {}
  for _, p in ipairs(self:makers_of(d)) do
    while self.recomputing[p] do
      proc.sleep(0.01)
      sched.stop_if_due()           -- (a waiting step stopped: sleep returns at once)
    end
    local needed = false
    for _, io in ipairs(self.nodes[p].outputs) do needed = needed or self:to_make_again(io.dataset) end
    if needed then
      self.recomputing[p] = coroutine.running()
      local ok, err = pcall(self.call_again, self, p)
      self.recomputing[p] = nil
      if not ok then self:recompute_failed(d, p, err) end
    end
  end
  return self.values[d].value
end

-- Raises why making dataset d again failed at step p.
function Run:recompute_failed(d, p, err)
  if failure.is(err) and (err.quiet or err.timed_out) then error(err, 0) end     -- the reader stopped
  local name, direct = self.nodes[p].name, p == self.graph:producer(d)
  local what = direct and string.format("its producer '%s'", name)
               or string.format("step '%s' (upstream of it)", name)
  if err == CHANGED_OUTSIDE then
    error(step_failure { no_retry = true, message = string.format("input '%s' is not kept between runs, and making "
      .. "it again needs %s (%s), which changed since it made it: run it too (e.g. --from-nodes %s)",
      d, what, self.nodes[p].where, name) }, 0)
  end
  local why = failure.is(err) and err.message or util.error_message(err)
  if direct then
    error(string.format("input '%s' is not kept between runs, and calling %s (up to date) again for it failed: %s",
                        d, what, why), 0)
  end
  error(string.format("input '%s' is not kept between runs, and making it again called %s, which failed: %s",
                      d, what, why), 0)
end

-- After an attempt of a step on the coroutine `co`: a call it was making
-- for values not kept is over, whether or not it returned.  Returns the
-- step it was calling, if any (what an os.exit there names).
function Run:recompute_over(co)
  local calling
  for p, owner in pairs(self.recomputing or {}) do
    if owner == co then self.recomputing[p], calling = nil, p end
  end
  return calling
end

-- Lua value `value` of dataset d as the file a command reads: JSON in
-- <dir>/<d>.json, or the text in <dir>/<d>.txt for a string (dir: a run's
-- data directory, default .flow/data).  Returns its path, or nil and why it
-- cannot be written (a value holding a credential is not: flow writes no
-- secret to a file of its own).
function M.write_for_command(d, value, dir)
  dir = dir or DATA
  if util.holds_secret(value) then
    return nil, string.format("dataset '%s' holds a credential, which flow does not write to a file for a command "
      .. "to read: give the command the credential itself (${credentials.…})", d)
  end
  local data, ext = value, ".txt"
  if type(value) ~= "string" then
    local err
    data, err = core.json_encode(value, true)
    if not data then return nil, string.format("dataset '%s' cannot be passed to a command as JSON: %s", d, err) end
    data, ext = data .. "\n", ".json"
  end
  core.mkdir_p(dir)
  local path = dir .. "/" .. core.safe_name(d) .. ext
  core.write_atomic(path, data)
  return path
end

-- The path a command receives for input dataset `d`: a file on disk, or a
-- Lua value written out now (once per run) as JSON, or as text if a string.
function Run:input_path(d, n)
  if self.aml then self:localize(d, n) end
  local v = self.values[d]
  if v.path then return v.path end
  local path, err = M.write_for_command(d, self:value_of(d), self.data_dir)
  if not path then error(step_failure { message = err }) end
  v.path = path
  return path
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

-- The values a Lua function returned, by output dataset.
function M.returned_values(n, results)
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
-- temporary directory, made on first use; flow.cache.commit moves it into
-- place).
function Run:staging_path(n, d)
  if not self.tmp_dir_made then
    core.mkdir_p(self.tmp_dir)
    self.tmp_dir_made = true
  end
  return self.tmp_dir .. "/" .. core.safe_name(n.name) .. "+" .. core.safe_name(d)    -- no name encodes a '+'
end

-- Where a finished output goes: its catalog path, or the run's data
-- directory (.flow/data/) for a command's output the catalog does not persist.
function Run:final_path(e, d)
  if catalog.persisted(e) then return self.cat:save_path(e) end
  return self.data_dir .. "/" .. core.safe_name(d)
end

-- Commit an output step n made here; one the catalog keeps on a datastore
-- goes up there too.
function Run:commit_made_here(d, e, from, n)
  local rec = self:commit(d, e, from, n)
  if e.uri then self:publish(n, d, e, rec) end
  return rec
end

-- Whether a file (or folder) committed at `final` may replace what is there
-- now.  A file replaces a file.  A folder replaces a directory that is the
-- dataset's own output of its step's last run, an empty one, or one in
-- .flow/; any other directory (one the catalog path names by mistake: src/,
-- data/; or the step's own commit of a run killed before it was recorded,
-- which nothing tells apart) is not deleted but moved aside into the run's
-- directory, with a warning (Run:commit).  A file replaces a folder,
-- or a folder a file (its type changed), only when that is the dataset's own
-- output of the last run; anything else there the commit would delete: the
-- step fails naming it.
function Run:check_replaced(d, e, from, final, n)
  local there = core.exists(final)
  if not there then return end                  -- (the common case: one stat)
  local made = core.exists(from)
  if there == made and (there ~= "directory" or final:find("^%.flow/")) then return end   -- (.flow/data is flow's)
  if there == "directory" and made == "directory" and #(core.list_dir(final) or { 1 }) == 0 then return end
  local old = self.state.steps[n.name]
  local was = old and old.outputs and old.outputs[d]
  local same = was and was.path and cache.realpath(was.path) == cache.realpath(final)
  if same and (there == made or self.hc:file(final) == was.hash) then return end
  if there == "directory" and made == "directory" then
    self.aside = self.aside or {}
    self.aside[final] = true
    return
  end
  error(step_failure { message = string.format("step '%s': output '%s' is stored at %s, which is a %s that "
    .. "this step's last run did not make: committing its %s there would delete it (give '%s' a path of its own, "
    .. "or remove %s if it is an old output)", n.name, d, final, there == "directory" and "directory" or "file",
    made == "directory" and "folder" or "file", d, final) })
end

-- Before the first of step n's outputs is committed, each of them must be
-- able to go: none replaces what it must not (check_replaced) and each
-- one's directory exists.  So a step that cannot commit one output fails
-- with none committed, not with its first outputs new and its record old.
-- `from` = {dataset = staging path} of the outputs committed here (a job's
-- download too: transfer.lua).
function Run:ready_to_commit(n, from)
  for _, io in ipairs(n.outputs) do
    local d = io.dataset
    if from[d] then
      local e = self.cat:entry(d)
      local final = self:final_path(e, d)
      self:check_replaced(d, e, from[d], final, n)
      local dir = final:match("^(.*)/[^/]*$")
      local ok, err = true, nil
      self.dirs_made = self.dirs_made or {}    -- (most outputs go to .flow/data: made once a run)
      if dir and dir ~= "" and not self.dirs_made[dir] then
        ok, err = pcall(core.mkdir_p, dir)
        self.dirs_made[dir] = ok or nil
      end
      if not ok then
        error(step_failure { message = string.format("step '%s': cannot save output '%s': %s", n.name, d,
                                                     tostring(util.is_fs_error(err) and err.fs_error or err)) })
      end
    end
  end
end

-- A directory at `final` that no run recorded as output d's (check_replaced),
-- moved into the run's directory rather than deleted by the commit; beside
-- itself when that is another file system (a rename cannot cross one).
function Run:move_aside(d, final, n)
  self.aside[final] = nil
  local dir = self.run_dir .. "/replaced"
  local dest = dir .. "/" .. core.safe_name(final)
  local ok, err = pcall(core.mkdir_p, dir)
  if ok then ok, err = os.rename(final, dest) end
  if not ok and tostring(err):find("cross%-device") then
    dest = final:gsub("/+$", "") .. ".replaced-" .. self.run_id
    ok, err = os.rename(final, dest)
  end
  if not ok then
    error(step_failure { message = string.format("step '%s': output '%s' is stored at %s, a directory no run "
      .. "recorded as its output, which could not be moved aside (%s): give '%s' a path of its own, or remove %s",
      n.name, d, final, tostring(util.is_fs_error(err) and err.fs_error or err), d, final) })
  end
  core.ui_warn(string.format("step '%s': output '%s' replaced the directory %s, which no run recorded as its "
    .. "output: what it held is in %s%s", n.name, d, final, dest,
    dest:find("^%.flow/") and " (flow clean removes it with the run)" or ""))
end

-- Move a finished file or folder into place; record where and its hash.
function Run:commit(d, e, from, n)
  local final = self:final_path(e, d)
  if self.aside and self.aside[final] then self:move_aside(d, final, n) end
  local ok, err = pcall(cache.commit, from, final)
  if not ok then
    error(step_failure { message = string.format("step '%s': cannot save output '%s': %s", n.name, d, tostring(err)) })
  end
  local h, herr = self.hc:file(final)
  if not h then error(step_failure { message = string.format("step '%s': output '%s': %s", n.name, d, herr) }) end
  self.values[d] = { path = final, hash = h, entry = e }
  return { path = final, hash = h }
end

function M.discard(staging)
  for _, path in pairs(staging or {}) do core.remove_tree(path) end
end

-- Write `bytes` to `path`, checking open, write, flush and close: a full
-- disk or a file-size limit fails the step instead of leaving a truncated
-- file to commit.  Returns true, or nil and why.
local function write_checked(path, bytes)
  local f, err = core.open_write(path)          -- never through a link (nofollow.h)
  if not f then return nil, err end
  local ok, werr = f:write(bytes)
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

-- Whether `path` lies in flow's temporary area .flow/tmp/ (symbolic links
-- resolved): only such a returned file or folder is moved into place.
function Run:in_tmp(path)
  local real, tmp = cache.realpath(path), cache.realpath(".flow/tmp")
  return real and tmp and real:sub(1, #tmp + 1) == tmp .. "/" or false
end

-- Save what a Lua function returned: memory values stay in memory (and in
-- the cache), persisted ones are written through the catalog.  Every output
-- is prepared (encoded, written to its staging path) before any is
-- committed, so a failure commits none.  Returns the output records for the
-- step's journal entry.
-- (A failure removes what was staged so far.)
local function save_failed(staged, fmt, ...)
  M.discard(staged)
  error(step_failure { message = string.format(fmt, ...) })
end

-- namer: Run:unkept_namer's, for a step whose large values need not be
-- kept; they are not when its outputs turn out all memory ones.
function Run:save_values(n, by, namer)
  for _, o in ipairs(namer and n.outputs or {}) do
    if self.cat:entry(o.dataset).type ~= "memory" then namer = nil end
  end
  if namer then
    local outs = {}
    for _, o in ipairs(n.outputs) do
      local d, v = o.dataset, by[o.dataset]
      local ok, out = pcall(state_mod.store_value, v, state_mod.INLINE_MAX)    -- (in its record, when small)
      if not ok then save_failed(nil, "step '%s': cannot cache output '%s': %s", n.name, d, tostring(out)) end
      out = out or { hash = M.recompute_key(namer(), d), recompute = true }
      outs[d] = out
      self.values[d] = { value = v, loaded = true, hash = out.hash }
    end
    return outs
  end
  -- ready[i]: a memory value's output record, or {from =, value =} for a
  -- file to put in place; staged: the staging paths written so far
  local ready, staged = {}, nil
  for i, o in ipairs(n.outputs) do
    local d, v = o.dataset, by[o.dataset]
    local e = self.cat:entry(d)
    if e.type == "memory" then
      local ok, rec, err = pcall(state_mod.store_value, v)
      if not ok then save_failed(staged, "step '%s': cannot cache output '%s': %s", n.name, d, tostring(rec)) end
      ready[i] = rec or { uncacheable = err }
    elseif e.type == "file" or e.type == "folder" then
      if type(v) ~= "string" or not core.exists(v) then
        save_failed(staged, "step '%s': output '%s' is a %s dataset (%s): the function returns the path of the %s "
                    .. "it wrote, got %s", n.name, d, e.type, e.origin, e.type,
                    type(v) == "string" and ("'" .. v .. "', which does not exist") or type(v))
      end
      local kind = core.exists(v)
      if (e.type == "folder") ~= (kind == "directory") then
        save_failed(staged, "step '%s': output '%s' is a %s dataset (%s): the function returns the path of the %s "
                    .. "it wrote, got '%s', a %s", n.name, d, e.type, e.origin, e.type, v,
                    kind == "directory" and "directory" or "file")
      end
      local input = self:input_at(n, v)
      if input then
        save_failed(staged, "step '%s': output '%s' is the path of its input '%s' (%s): flow refuses an input as "
                    .. "an output (it is neither moved nor copied); write a new %s and return its path",
                    n.name, d, input, v, e.type)
      end
      if self:in_tmp(v) then
        ready[i] = { from = v }                   -- flow's own scratch space: moved into place
      else
        -- Anywhere else (another dataset, the script, a file outside the
        -- project): copied into place, the returned path left as it was.
        local staging = self:staging_path(n, d)
        core.remove_tree(staging)
        staged = staged or {}
        staged[d] = staging
        local ok, cerr = pcall(cache.copy, cache.realpath(v) or v, staging)
        if not ok then
          save_failed(staged, "step '%s': cannot copy output '%s' from %s: %s", n.name, d, v, tostring(cerr))
        end
        ready[i] = { from = staging }
      end
    else
      local bytes, err = catalog.encode(e, v)
      if not bytes then
        save_failed(staged, "step '%s': output '%s' is a %s dataset (%s), but %s", n.name, d, e.type, e.origin, err)
      end
      local staging = self:staging_path(n, d)
      staged = staged or {}
      staged[d] = staging
      local ok, werr = write_checked(staging, bytes)
      if not ok then save_failed(staged, "step '%s': cannot save output '%s': %s", n.name, d, werr) end
      ready[i] = { from = staging }    -- (its readers get the value decoded, as in a later run: not v)
    end
  end
  local from = {}
  for i, o in ipairs(n.outputs) do from[o.dataset] = ready[i].from end
  local ok, err = pcall(self.ready_to_commit, self, n, from)
  if not ok then
    M.discard(staged)
    error(err, 0)
  end
  local outs = {}
  for i, o in ipairs(n.outputs) do
    local d, r = o.dataset, ready[i]
    if not r.from then
      outs[d] = r
      -- a value that cannot be cached has a hash of its own each run (its
      -- readers always run); a digest, so that --explain's short parts differ
      self.values[d] = { value = by[d], loaded = true,
                         hash = r.hash or cache.sha256("uncacheable\0" .. self.run_id .. "\0" .. d) }
    else
      outs[d] = self:commit_made_here(d, self.cat:entry(d), r.from, n)
    end
  end
  return outs
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

-- Why the file at path, written for dataset d of catalog entry e, is not
-- what its type says (bad JSON, a Lua table that does not load), or nil.
function M.typed_problem(e, d, path)
  if e.type ~= "json" and e.type ~= "lua" then return nil end
  local text, err = core.read_file(path)
  local v, why = nil, err
  if text then v, why = catalog.parse(e, text, d) end
  if v ~= nil then return nil end
  return string.format("(a %s dataset, %s) %s", e.type, e.origin, text and why or ("cannot be read: " .. tostring(why)))
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
      M.discard(staging)
      error(step_failure { message = string.format("step '%s' exited 0 but " .. problem ..
        " (the command was given the path %s)\n  command: %s", n.name, d, staging[d], display) })
    end
  end
  -- A typed output is checked before anything is committed: bad JSON fails
  -- this step, not the one that reads it, and leaves the last good output.
  -- (The value is not kept: a command's consumers may all be commands.)
  for _, io in ipairs(n.outputs) do
    local d = io.dataset
    local problem = M.typed_problem(self.cat:entry(d), d, staging[d])
    if problem then
      M.discard(staging)
      error(step_failure { message = string.format("step '%s' exited 0 but its output '%s' %s\n  command: %s",
        n.name, d, problem, display) })
    end
  end
  -- ${outputs.metrics}: the step's metrics, a JSON object (flow.metrics)
  for _, io in ipairs(n.outputs) do
    if io.arg == "metrics" then
      local ok, err = pcall(self.read_metrics, self, n, io.dataset, staging[io.dataset], "command: " .. display)
      if not ok then
        M.discard(staging)
        error(err, 0)
      end
    end
  end
  local ok, err = pcall(self.ready_to_commit, self, n, staging)
  if not ok then
    M.discard(staging)
    error(err, 0)
  end
  local outs = {}
  for _, io in ipairs(n.outputs) do
    outs[io.dataset] = self:commit_made_here(io.dataset, self.cat:entry(io.dataset), staging[io.dataset], n)
  end
  return outs
end

-- Step n's metrics from the JSON file its ${outputs.metrics} (dataset d)
-- was written to; a bad one fails the step, `what` saying what wrote it.
function Run:read_metrics(n, d, path, what)
  local text, err = core.read_file(path)
  local m, why = nil, err
  if text then m, why = metrics.from_json(text) end
  if not m then
    error(step_failure { message = string.format("step '%s' exited 0 but its metrics (output '%s', "
      .. "${outputs.metrics}) %s\n  %s", n.name, d, why, what) })
  end
  self.records[n.name].metrics = m
end

-- entry, or nil and why not.
local function saved_dataset(d, e, out, cat)
  if out and out.path and core.exists(out.path) then
    return { path = out.path, entry = e, uri = out.uri, uri_type = out.uri_type }
  end
  if out and not out.path and not out.uncacheable and state_mod.value_available(out) then
    return { out = out, hash = out.hash }
  end
  if e.uri then           -- on a datastore: looked at before the run (Run:stat_datastore_inputs)
    return { uri = e.uri, uri_type = catalog.uri_type(e), entry = e }
  end
  if catalog.persisted(e) then
    local path, why = cat:load_path(e)
    if path then return { path = path, entry = e } end
    return nil, why
  end
  return nil, "no earlier run left it in the cache"
end

-- The value entry of dataset d as an unselected step p (or none) left it:
-- its last successful run's output (a file, a kept value, or a value not
-- kept, which Run:recompute makes again when a reader needs it), or the
-- catalog's; nil and why not.
function outside_value(d, p, nodes, st, cat)
  local e = cat:entry(d)
  if cat.load_versions[d] then return saved_dataset(d, e, nil, cat) end    -- pinned: that version, not the last run's
  local rec = p and st.steps[nodes[p].name]
  local out = rec and rec.outputs and rec.outputs[d]
  if out and out.recompute then return { out = out, hash = out.hash } end
  return saved_dataset(d, e, out, cat)
end

-- The datasets the selected steps read but no selected step writes: a
-- catalog dataset no step produces (the pipeline's raw data), or the output
-- of an unselected step as its last successful run left it.  Returns
-- {dataset = value entry}, or raises listing everything missing.
function M.outside_inputs(plan, st)
  local nodes, g, selected, cat = plan.nodes, plan.graph, plan.selected, plan.cat
  local values, missing, seen, unselected_producer = values_c.table(g, cat), {}, {}, false
  local readers = selected and nodes or plan.free_readers     -- without a selection only free inputs are outside
  for i, n in ipairs(readers) do
    if not selected or selected[i] then
      for _, io in ipairs(n.inputs) do
        local d = io.dataset
        local p = g:producer(d)
        local inside = p and (not selected or selected[p])
        if not seen[d] and not inside and not dag.is_param_input(d) then
          seen[d] = true
          local v, why = outside_value(d, p, nodes, st, cat)
          values[d] = v
          if not v then
            local e = cat:entry(d)
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

return M
