-- flow.runs: the project's run history (`flow runs`, `flow runs show`), as
-- Snakemake's --summary and Kedro-viz's experiment tracking show it.  Each
-- run is described from its record: run.json, written when the run ends
-- (its status, time and every step's state), and the first line of its
-- journal (the arguments, script and environment it started with); a run
-- with no run.json (still going, or killed) from its whole journal.
local core = require("flow.core")
local util = require("flow.util")
local state_mod = require("flow.state")
local command = require("flow.command")

local M = {}

-- A run's record and journal are read, never trusted: a value of the wrong
-- type or range (an edited or damaged file's) is absent, so no reader meets one.
local function text(v) return type(v) == "string" and v or nil end
local function whole(v) return math.type(v) == "integer" and v or nil end
local function seconds(v)                       -- a duration: finite, not negative
  return type(v) == "number" and v >= 0 and v < math.huge and v or nil
end
local YEAR_10000 = 253402300800
local function moment(v)                        -- a time: from 1970 to the year 9999, as os.date can say it
  return type(v) == "number" and v >= 0 and v < YEAR_10000 and v or nil
end

-- Metrics as {name = number}, or nil when none are.
local function metrics_of(m)
  if type(m) ~= "table" then return nil end
  local values = {}
  for k, v in pairs(m) do
    if type(k) == "string" and type(v) == "number" then values[k] = v end
  end
  return next(values) and values or nil
end

-- A journal's first event when it is the run's start (run_start), with the
-- fields flow shows of it, each of its type or absent: {run =, env =, name =,
-- script =, resumes =, pipeline_job =, steps =, time =, args =, via =, cwd =}; else nil.
function M.start_of(ev)
  if type(ev) ~= "table" or ev.event ~= "run_start" then return nil end
  local steps = whole(ev.steps)
  return { event = "run_start", run = text(ev.run), env = text(ev.env), name = text(ev.name),
           script = text(ev.script), resumes = text(ev.resumes), pipeline_job = ev.pipeline_job == true or nil,
           steps = steps and steps >= 0 and steps or nil, time = moment(ev.time),
           args = type(ev.args) == "table" and ev.args or nil, via = text(ev.via), cwd = text(ev.cwd) }
end

-- The journal's first line: the run_start event, or nil.
local function start_event(path)
  local f = io.open(path)
  if not f then return nil end
  local line = f:read("l")
  f:close()
  local ok, ev = pcall(core.json_decode, line or "")
  return ok and M.start_of(ev) or nil
end

-- The states of a run's steps, counted: {done = n, ["up to date"] = n, ...}.
local function counted(states)
  local counts = {}
  for _, st in ipairs(states) do counts[st] = (counts[st] or 0) + 1 end
  return counts
end

-- What run.json in `dir` says ({status =, code =, started =, elapsed =, env =,
-- name =, counts =, steps =, metrics =}), or nil when it is missing, is not
-- JSON or has no status (the journal tells the run then).  A step whose state
-- is not text is counted in steps, not in counts.
function M.record(dir)
  local raw = core.read_file(dir .. "/run.json")
  local ok, r = pcall(core.json_decode, raw or "")
  if not raw or not ok or type(r) ~= "table" or not text(r.status) then return nil end
  local steps = type(r.steps) == "table" and r.steps or {}
  local states = {}
  for _, s in ipairs(steps) do
    if type(s) == "table" and text(s.state) then states[#states + 1] = s.state end
  end
  return { status = r.status, code = whole(r.code), started = moment(r.started),
           elapsed = seconds(r.elapsed), env = text(r.env), name = text(r.name), counts = counted(states),
           steps = #steps, metrics = metrics_of(r.metrics) }
end

-- What a run's journal says of it and of each step (`flow status`, flow viz
-- --run of a run still going, `flow runs`): {order = {names}, steps = {[name]
-- = {state = "running" or the step_end's status ("ok", "up to date", "failed",
-- …; "?" when it has none), elapsed =, started =, job =, studio =, status =}},
-- start = the run_start event (M.start_of; {} without one), code =, ended = the
-- run_end's time}.
function M.story(events)
  local story = { order = {}, steps = {}, start = M.start_of(events[1]) or {} }
  local function step(name)
    if not story.steps[name] then
      story.order[#story.order + 1] = name
      story.steps[name] = { state = "running" }
    end
    return story.steps[name]
  end
  for _, ev in ipairs(events) do
    if type(ev.step) == "string" then
      local st = step(ev.step)
      if ev.event == "step_start" then st.started = moment(ev.time)
      elseif ev.event == "step_end" then
        st.state, st.elapsed = text(ev.status) or "?", seconds(ev.elapsed)
        if type(ev.remote) == "table" then
          st.job, st.studio, st.status = text(ev.remote.job), text(ev.remote.studio), text(ev.remote.status)
        end
      elseif ev.event == "remote_job" then st.job, st.status = text(ev.job), "submitted" end
    elseif ev.event == "run_end" then story.code, story.ended = whole(ev.code), moment(ev.time) end
  end
  return story
end

-- A run's status from its exit code (nil: it has not ended).
function M.status_of(code)
  return code == nil and "unfinished" or code == 0 and "ok" or code == 130 and "interrupted" or "failed"
end

-- What the journal says of a run without run.json: "damaged" when it does
-- not start with the run's start or has a line that is not JSON (but a last
-- line without its newline, which the run may be writing now).
local function from_journal(path, start)
  local events, bad, torn = state_mod.read_journal(path)
  local story = M.story(events or {})
  local states = {}
  for i, name in ipairs(story.order) do
    local st = story.steps[name].state
    states[i] = st == "ok" and "done" or st
  end
  local code, ended = story.code, story.ended
  local damaged = not start or bad and not torn
  return { status = damaged and "damaged" or M.status_of(code), code = code, started = start and start.time,
           elapsed = ended and start and start.time and seconds(ended - start.time), env = start and start.env,
           name = start and start.name, counts = counted(states), steps = start and start.steps or #states }
end

-- The command line a run was started with, as a user would type it (a
-- sweep's trial, or a run a driver script named, says its name instead).
function M.command_of(start)
  if not start then return "" end
  if type(start.name) == "string" then return start.name end
  if start.via == "flow.run" then return "flow.run from " .. (start.script or "?") end
  if type(start.args) ~= "table" then return "" end
  local words = { "flow", "run" }
  for _, a in ipairs(start.args) do words[#words + 1] = command.shell_quote(tostring(a)) end
  return table.concat(words, " ")
end

-- One run, by id: {id =, started =, elapsed =, status =, code =, env =, name =,
-- command =, counts =, steps =} (nil for a directory that holds no run).
function M.describe(id)
  local dir = state_mod.RUNS .. "/" .. id
  local journal = dir .. "/journal.jsonl"
  local start = start_event(journal)
  local r = M.record(dir) or (core.exists(journal) and from_journal(journal, start))
  if not r then return nil end
  r.id = id
  r.command = M.command_of(start)
  r.script = start and start.script
  r.resumes = start and start.resumes
  r.pipeline_job = start and start.pipeline_job or nil
  return r
end

-- The project's newest `limit` runs (default: all), newest first, and how
-- many runs it has: only those shown are read (a sweep makes a run a trial).
function M.list(limit)
  local ids = {}
  for _, name in ipairs(core.list_dir(state_mod.RUNS) or {}) do
    if name ~= "latest" and core.exists(state_mod.RUNS .. "/" .. name) == "directory" then ids[#ids + 1] = name end
  end
  table.sort(ids, function(a, b) return a > b end)
  local runs = {}
  for _, id in ipairs(ids) do
    if #runs >= (limit or math.huge) then break end
    runs[#runs + 1] = M.describe(id)
  end
  return runs, #ids
end

-- "3 done, 2 up to date, 1 failed", in a fixed order.
local ORDER = { "done", "up to date", "failed", "interrupted", "running", "not run", "skipped" }
function M.counts_text(counts)
  local parts, seen = {}, {}
  for _, st in ipairs(ORDER) do
    if counts[st] then parts[#parts + 1] = string.format("%d %s", counts[st], st); seen[st] = true end
  end
  for _, st in ipairs(util.sorted_keys(counts)) do
    if not seen[st] then parts[#parts + 1] = string.format("%d %s", counts[st], st) end
  end
  return table.concat(parts, ", ")
end

-- A time as a table shows it; "?" for none (nor for one os.date cannot say).
function M.when(t)
  return moment(t) and os.date("%Y-%m-%d %H:%M:%S", math.floor(t)) or "?"
end

function M.duration(s)
  if type(s) ~= "number" then return "-" end
  return util.short_duration(s)
end

return M
