-- flow.state: what flow remembers between runs, under .flow/.
--
--   .flow/lock                       held (flock) by the one run using the project
--   .flow/runs/<id>/journal.jsonl    each run's journal: run start, step start/end, run end
--   .flow/runs/latest                symlink to the last run
--   .flow/cache/merged_runs          the runs whose journals state.log holds, an id a line
--                                    (an earlier flow marked each with .flow/runs/<id>/merged)
--   .flow/cache/state.log            each step's last successful run: fingerprint, parts, outputs
--                                    (an append-only file of checksummed records, engine/statestore.c;
--                                    docs/data.md has its format)
--   .flow/cache/values/<sha256>      Lua values of memory outputs (small ones live in state.log)
--   .flow/cache/hashes               content hashes of files by (path, size, mtime, inode)
--
-- The journal is the record of truth: a run killed with kill -9 never saved
-- its records to state.log, so the next run folds its journal in first.  Records carry the
-- time they were made and only a newer record replaces an older one, so
-- folding is idempotent and order does not matter.
local core = require("flow.core")
local cache = require("flow.cache")
local recompute_key = require("flow.values_c").recompute_key
local util = require("flow.util")
local redact = require("flow.config").redact

local M = {}

M.RUNS = ".flow/runs"
M.CACHE = ".flow/cache"
M.STATE = M.CACHE .. "/state.log"
M.OLD_STATE = M.CACHE .. "/state.json"   -- before state.log: read once, then removed
M.VALUES = M.CACHE .. "/values"      -- beside state.log, where the store looks too (statestore.h)
M.MERGED = M.CACHE .. "/merged_runs"
M.INLINE_MAX = 512      -- serialised values up to this size live in the step's record

local locked = false

-- One run at a time per project: a second `flow run` here would race on
-- .flow/data and the outputs.  The lock dies with the process, even on kill -9.
function M.lock()
  if locked then return end
  core.mkdir_p(".flow")
  local ok, holder = core.lock(".flow/lock")
  if not ok then
    util.setup_error(string.format("another flow run (pid %s) is using this project (%s/.flow); "
      .. "wait for it to finish", holder ~= "" and holder or "?", core.cwd()))
  end
  locked = true
end

-- The lock released (flow repl, after its run{}: the session goes on idle).
function M.unlock()
  if not locked then return end
  core.unlock()
  locked = false
end

-- Output records keyed by dataset name, each a table.
local function valid_outputs(outputs)
  if type(outputs) ~= "table" then return false end
  for d, out in pairs(outputs) do
    if type(d) ~= "string" or type(out) ~= "table" then return false end
  end
  return true
end

-- Whether a step record (from state.log or a journal) has fields of the
-- types the runner reads; a damaged one is dropped, so that step runs again.
local function valid(rec)
  return type(rec) == "table" and type(rec.fp) == "string" and valid_outputs(rec.outputs)
     and (rec.parts == nil or type(rec.parts) == "table") and (rec.time == nil or type(rec.time) == "number")
     and (rec.metrics == nil or type(rec.metrics) == "table" and type(rec.metrics.values) == "table")
end

-- Whether every value a record keeps inline still has its hash, and every
-- value it did not keep the key its fingerprint gives it (flow.values): a
-- journal line has no checksum of its own (state.log's records have), and a
-- record folded from a damaged one would be trusted from then on, each
-- reader failing to restore (or make again) the value while its producer
-- stayed up to date.
local function values_hold(rec)
  for d, out in pairs(rec.outputs) do
    if out.value ~= nil and (type(out.value) ~= "string" or cache.sha256(out.value) ~= out.hash) then return false end
    if out.recompute and out.hash ~= recompute_key(rec.fp, d) then return false end
  end
  return true
end

-- One step_end line of a journal -> (name, record) when it is a success.
local function record_of(ev)
  if ev.event ~= "step_end" or ev.status ~= "ok" or type(ev.step) ~= "string" then return nil end
  local rec = { fp = ev.fingerprint, parts = ev.parts, outputs = ev.outputs or {}, time = ev.time,
                metrics = ev.metrics and { values = ev.metrics, series = ev.series } }
  if valid(rec) and values_hold(rec) then return ev.step, rec end
end

-- The events of a journal, or nil when it cannot be read; then the number of
-- its first line that is not a JSON object (skipped: a run folds in what it
-- can, and `flow status` says the file is damaged), and whether that line is
-- the last, without its newline: a line a running flow is writing, or one
-- torn by a power loss or a truncated file.
function M.read_journal(path)
  local text = core.read_file(path)
  if not text then return nil end
  local events, bad, torn, n = {}, nil, false, 0
  for line, nl in text:gmatch("([^\n]*)(\n?)") do
    n = n + 1
    if line ~= "" then
      local ok, ev = pcall(core.json_decode, line)
      if ok and type(ev) == "table" then events[#events + 1] = ev
      elseif not bad then bad, torn = n, nl == "" end
    end
  end
  return events, bad, torn
end

local function newer(rec, old)
  return not old or (rec.time or 0) >= (old.time or 0)
end

-- Fold the journals of runs not yet merged into `steps`; returns the ids
-- to list in merged_runs once state.log holds them (those folded, and those
-- an earlier flow marked with a file in the run's directory).  One read of
-- merged_runs, not a look into each of a project's hundreds of runs, and in
-- C (core.list_dir with merged_runs): only the runs it does not list come
-- to Lua.  A line torn by a kill names no run: that run is folded again.
local function fold_journals(steps, current)
  local folded = {}
  for _, id in ipairs(core.list_dir(M.RUNS, M.MERGED) or {}) do
    local dir = M.RUNS .. "/" .. id
    if id ~= "latest" and id ~= current then
      if core.readlink(dir) then          -- its journal would come from outside .flow/
        error({ fs_error = string.format("cannot read the run %s: it is a symbolic link, and flow never follows "
          .. "one inside its .flow/ directory: remove it", dir) }, 0)
      end
      if not core.exists(dir .. "/merged") then
        local events = M.read_journal(dir .. "/journal.jsonl")
        for _, ev in ipairs(events or {}) do
          local name, rec = record_of(ev)
          if name and newer(rec, steps[name]) then steps[name] = rec end
        end
      end
      folded[#folded + 1] = id
    end
  end
  return folded
end

-- The records of state.json (flow before state.log), read once.
local function read_old_state(steps)
  local text = core.read_file(M.OLD_STATE)
  if not text then return false end
  local ok, doc = pcall(core.json_decode, text)
  if ok and type(doc) == "table" and doc.version == 1 and type(doc.steps) == "table" then
    for name, rec in pairs(doc.steps) do
      if type(name) == "string" and valid(rec) then steps[name] = rec end
    end
  else
    core.ui_warn(M.OLD_STATE .. " is unreadable; every step will run (its outputs are checked afresh)")
  end
  return true
end

-- A record's body (its parts and output records, JSON) decoded; false if damaged.
local function decode_body(body)
  local ok, b = pcall(core.json_decode, body)
  return ok and type(b) == "table" and b
end

-- state.steps: a step's record built from the store each time it is read
-- (never kept: the engine puts records meanwhile, engine/step.c), and its
-- JSON body decoded only when something reads more than the engine keeps
-- (a no-op run of 10,000 command steps decodes none: the fingerprint and
-- the outputs' paths and hashes come from the record itself).  pairs()
-- walks every step the store knows.
local function steps_view(store)
  return setmetatable({}, {
    __index = function(t, name)
      if type(name) ~= "string" then return nil end
      local fp, time, body, files = store:get(name)
      if not fp then return nil end
      local rec
      if files then
        rec = setmetatable({ fp = fp, time = time, outputs = files }, { __index = function(r, k)
          if k ~= "parts" and k ~= "metrics" then return nil end
          local b = decode_body(body)
          rawset(r, "parts", b and type(b.parts) == "table" and b.parts or false)
          rawset(r, "metrics", b and type(b.metrics) == "table" and b.metrics or false)
          return rawget(r, k) or nil
        end })
      else
        local b = decode_body(body)
        rec = b and { fp = fp, time = time, parts = b.parts, outputs = b.outputs, metrics = b.metrics }
        if not (rec and valid(rec)) then rec = nil end
      end
      return rec
    end,
    __pairs = function(t)
      local names, i = store:names(), 0
      return function()
        while true do
          i = i + 1
          local name = names[i]
          if not name then return nil end
          local rec = t[name]
          if rec then return name, rec end
        end
      end, t, nil
    end,
  })
end

-- load(current_run_id) -> state {steps = {name = record}, store =, folded = {ids}}
function M.load(current)
  local store, warning = cache.state(M.STATE)
  if warning then
    core.ui_warn(M.STATE .. " " .. warning .. "; every step will run (its outputs are checked afresh)")
  end
  local damaged = store:stats().damaged
  if damaged > 0 then
    core.ui_warn(string.format("%d record%s of %s %s damaged (%s its checksum): %s step%s run%s again", damaged,
      damaged == 1 and "" or "s", M.STATE, damaged == 1 and "was" or "were", damaged == 1 and "it fails" or "they fail",
      damaged == 1 and "its" or "their", damaged == 1 and "" or "s", damaged == 1 and "s" or ""))
  end
  local st = { store = store, steps = steps_view(store) }
  if store:count() == 0 then
    local old = {}
    if read_old_state(old) then
      st.migrated = true
      for name, rec in pairs(old) do M.put(st, name, rec) end
    end
  end
  local journal = {}
  st.folded = fold_journals(journal, current)
  for name, rec in pairs(journal) do
    if newer(rec, st.steps[name]) then M.put(st, name, rec) end
  end
  return st
end

-- Record step `name`'s successful run, from an earlier run's journal (or
-- the old state.json): {fp =, time =, parts =, outputs =, metrics =}.  The
-- record is made as the engine makes a step's when its end is recorded
-- (engine/step_record.c); save() makes it durable.
function M.put(state, name, rec)
  local parts = rec.parts and core.json_encode(rec.parts)     -- hashes: never masked
  local outputs = rec.outputs and util.record_json(rec.outputs)
  state.store:put(redact(name), rec.fp, rec.time or 0, parts, outputs, rec.metrics and util.record_json(rec.metrics))
end

-- Make what changed durable (state.log), then list the folded journals merged.
function M.save(state, run_id)
  if state.store:unsaved() then          -- the store knows what was put (by the engine too)
    core.mkdir_p(M.CACHE)
    state.store:save()
  end
  if state.migrated then os.remove(M.OLD_STATE); state.migrated = nil end
  local ids = state.folded
  if run_id then ids[#ids + 1] = run_id end
  -- Appended in one write, with no sync: a line lost to a power failure, or
  -- torn by a kill, only has its journal folded in again (which changes nothing).
  if #ids > 0 then
    core.mkdir_p(M.CACHE)
    local f, err = core.open_write(M.MERGED, true)
    local ok, werr = f and f:write(table.concat(ids, "\n") .. "\n")
    if f then f:close() end
    if not (f and ok) then error({ fs_error = err or (M.MERGED .. ": " .. tostring(werr)) }, 0) end
  end
  state.folded = {}
end

-- A memory value as stored: inline text in the record, or a file named by its hash.
-- Returns the output record fields {hash =, value = or cached = true}, or
-- nil and why the value cannot be cached.
-- (max: a value whose text would take more is not stored: nil and why.)
function M.store_value(v, max)
  local text, err = cache.serialize(v, max)
  if not text then return nil, err end
  if util.holds_secret(v) then return nil, "it holds a credential, which flow does not write to its cache" end
  local h = cache.sha256(text)
  if #text <= M.INLINE_MAX then return { hash = h, value = text } end
  local path = M.VALUES .. "/" .. h
  if core.read_file(path) ~= text then             -- missing, or damaged since it was written
    core.mkdir_p(M.VALUES)
    core.write_atomic(path, text)
  end
  return { hash = h, cached = true }
end

-- Whether an output record's value can be restored: true, or false and why
-- not.  Cached content is addressed by its hash and trusted only while it
-- still has that hash: an edited or truncated value is "damaged", a miss
-- like a missing one (the producer runs again and writes it afresh), and its
-- file is removed.  `hc` (the run's hash cache) spares reading a value file
-- that has not changed since it was last hashed.
function M.value_available(out, hc)
  if out.value ~= nil then
    if cache.sha256(out.value) == out.hash then return true end
    return false, "damaged"
  end
  if not out.cached then return false, "gone" end
  local path = M.VALUES .. "/" .. out.hash
  local h = hc and hc:file(path) or cache.sha256(core.read_file(path) or "")
  if h == out.hash then return true end
  if not core.exists(path) then return false, "gone" end
  os.remove(path)
  return false, "damaged"
end

function M.restore_value(out, name)
  local text = out.value
  local path = M.VALUES .. "/" .. tostring(out.hash)
  if not text then
    local err
    text, err = core.read_file(path)
    if not text then error(string.format("the cached value of '%s' is gone (%s): run again to remake it", name, err), 0) end
  end
  if cache.sha256(text) ~= out.hash then              -- changed since the run decided to use it
    if not out.value then os.remove(path) end
    error(string.format("the cached value of '%s' is damaged (its content no longer matches its hash): "
      .. "run again to remake it", name), 0)
  end
  return cache.deserialize(text, "cached value of '" .. name .. "'")
end

-- The time a run started: its journal's first line, else the directory's mtime.
local function run_started(dir)
  local text = core.read_file(dir .. "/journal.jsonl")
  local first = text and text:match("^[^\n]+")
  local ok, ev = pcall(core.json_decode, first or "")
  if ok and type(ev) == "table" and type(ev.time) == "number" then return ev.time end
  local _, mtime = cache.stat(dir)
  return mtime
end

-- Every cached value file a step record still points at.
local function referenced_values(steps)
  local keep = {}
  for _, rec in pairs(steps) do
    for _, out in pairs(rec.outputs or {}) do
      if out.cached then keep[out.hash] = true end
    end
  end
  return keep
end

-- The runs whose directory holds an output a step record still points at:
-- a run among others at once (flow.spawn, a parallel sweep's trials) keeps
-- its commands' outputs in .flow/runs/<id>/data.
local function runs_with_outputs(steps)
  local keep = {}
  for _, rec in pairs(steps) do
    for _, out in pairs(rec.outputs or {}) do
      local id = type(out.path) == "string" and out.path:match("^%.flow/runs/([^/]+)/data/")
      if id then keep[id] = true end
    end
  end
  return keep
end

-- flow clean: run directories older than `older` seconds (never the
-- latest run, nor one holding outputs a record uses), temporary directories
-- of runs that are over, and with
-- `cache`, cached values no step record uses and stale file hashes.
-- Returns counts {runs =, tmp =, values =, hashes =, bytes =}.
function M.clean(older, with_cache, dry)
  M.lock()
  local st = M.load(nil)
  if not dry then M.save(st) end        -- fold unmerged journals before any is removed
  local counts = { runs = 0, tmp = 0, values = 0, hashes = 0, bytes = 0 }
  local latest = core.readlink(M.RUNS .. "/latest")
  local now = core.time()
  local function remove(path)
    if not dry then core.remove_tree(path) end
  end
  local kept = {}
  local holding = runs_with_outputs(st.steps)
  for _, id in ipairs(core.list_dir(M.RUNS) or {}) do
    local dir = M.RUNS .. "/" .. id
    if id ~= "latest" and id ~= latest and not holding[id] then
      local t = run_started(dir)
      if older and t and now - t > older then remove(dir); counts.runs = counts.runs + 1
      else kept[#kept + 1] = id end
    elseif id ~= "latest" then
      kept[#kept + 1] = id
    end
  end
  -- merged_runs lists the runs left (all merged: the load above folded the others)
  if counts.runs > 0 and not dry then core.write_atomic(M.MERGED, table.concat(kept, "\n") .. "\n") end
  if core.readlink(".flow/tmp") then                   -- a link: removed itself, never emptied
    remove(".flow/tmp")
    counts.tmp = counts.tmp + 1
  else
    for _, id in ipairs(core.list_dir(".flow/tmp") or {}) do
      remove(".flow/tmp/" .. id)                       -- the lock says no run is using them
      counts.tmp = counts.tmp + 1
    end
  end
  if with_cache then
    local keep = referenced_values(st.steps)
    for _, h in ipairs(core.list_dir(M.VALUES) or {}) do
      if not keep[h] then
        local size = cache.stat(M.VALUES .. "/" .. h)
        counts.bytes = counts.bytes + (size or 0)
        remove(M.VALUES .. "/" .. h)
        counts.values = counts.values + 1
      end
    end
    local hc = cache.hashes(M.CACHE .. "/hashes")
    counts.hashes = hc:prune()
    if not dry then hc:save() end
  end
  return counts
end

return M
