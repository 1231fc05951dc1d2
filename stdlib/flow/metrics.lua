-- flow.metrics: what a step reports of itself (val_loss, accuracy, ...).
--
--   * a Lua function step marked metrics = true returns a table of them after
--     its outputs: `return model, { val_loss = 0.12 }`;
--   * a command step writes them as a JSON object to ${outputs.metrics} (an
--     output named metrics), as the step's dataset too;
--   * flow.log_metric(name, value) in a Lua step adds a value to a series
--     (one per epoch, say); the series' last value is the metric unless the
--     returned table gives one.
--
-- A step's metrics are {values = {name = number}, series = {name = {numbers}}}.
-- They land in the run's journal and run.json, in the step's record (so a
-- step that is up to date still reports the metrics it had), and in
-- flow.run's result.  A metric is a finite number, or a list of them (a
-- series, whose last value is the metric).
local core = require("flow.core")

local M = {}

local function finite(v)
  return type(v) == "number" and v == v and v ~= math.huge and v ~= -math.huge
end

-- Why `name` cannot name a metric, or nil.
local function name_problem(name)
  if type(name) ~= "string" or name == "" then return "a metric's name must be a non-empty string" end
  if name:find("[%c]") then return string.format("metric name %q contains a control character", name) end
  return nil
end

-- From a table {name = number | {numbers}}: the step's metrics, or nil and
-- why not (which metric, and what it is instead).
function M.from_table(t)
  if type(t) ~= "table" then return nil, string.format("metrics must be a table of name = number, got %s", type(t)) end
  local values, series = {}, {}
  for name, v in pairs(t) do
    local bad = name_problem(name)
    if bad then return nil, bad end
    if finite(v) then
      values[name] = v
    elseif type(v) == "table" and #v > 0 then
      local list = {}
      for i = 1, #v do
        if not finite(v[i]) then
          return nil, string.format("metric '%s'[%d] is %s, not a finite number", name, i, tostring(v[i]))
        end
        list[i] = v[i]
      end
      series[name], values[name] = list, list[#list]
    else
      return nil, string.format("metric '%s' is %s; a metric is a finite number or a list of them (one per epoch)",
                                name, type(v) == "table" and "an empty list or a map" or type(v) == "number"
                                and tostring(v) or "a " .. type(v))
    end
  end
  return { values = values, series = next(series) and series or nil }
end

-- From the JSON text a command wrote: as from_table, for an object.
function M.from_json(text)
  local ok, t = pcall(core.json_decode, text)
  if not ok then return nil, "is not JSON: " .. tostring(t):gsub("^.-: ", "") end
  if type(t) ~= "table" or (#t > 0 and next(t, #t) == nil) then
    return nil, "is not a JSON object of name: number"
  end
  return M.from_table(t)
end

-- m (a step's metrics, or nil) with the series logged while it ran: a
-- series' last value is its metric unless m gives one.
function M.with_logged(m, logged)
  if not logged or not next(logged) then return m end
  m = m or { values = {} }
  m.series = m.series or {}
  for name, list in pairs(logged) do
    m.series[name] = m.series[name] or list
    if m.values[name] == nil then m.values[name] = list[#list] end
  end
  return m
end

-- flow.log_metric's collector: the coroutine of a step marked metrics =
-- true -> {step = its name, series = {name = {values}}}.  A distributed Lua
-- step's ranks run in child processes: there the collector is M.child
-- (series false when the step is not marked), sent back with the outputs.
local logs = setmetatable({}, { __mode = "k" })
M.child = nil

-- The name of the step running on coroutine co, if any (flow.execute sets
-- it): for log_metric's message in a step that is not marked.
M.step_on = function(co) return nil end

-- Starts collecting what step n (marked metrics = true), on coroutine co,
-- logs; on_log (or nil) is called after each value with the step's name,
-- the metric's and its series so far (flow.sweep's early stopping); what it
-- raises fails the step.
function M.collect(co, n, on_log)
  logs[co] = { step = n.name, series = {}, on_log = on_log }
end

function M.stop(co) logs[co] = nil end

-- The series the step on coroutine co has logged so far.
function M.logged(co)
  return logs[co].series
end

-- flow.log_metric(name, value): adds value to the series `name` of the step
-- that calls it.
function M.log(name, value)
  local bad = name_problem(name)
  if bad then error("flow.log_metric: " .. bad, 2) end
  if not finite(value) then
    error(string.format("flow.log_metric: metric '%s': the value must be a finite number, got %s", name,
                        type(value) == "number" and tostring(value) or type(value)), 2)
  end
  local co = coroutine.running()
  local e = logs[co] or M.child
  local step = e and e.step or M.step_on(co)
  if not step then error("flow.log_metric: called outside a step (it adds to the metrics of the step that calls it)", 2) end
  if not (e and e.series) then
    error(string.format("flow.log_metric: step '%s' is not marked metrics = true (node{ ..., metrics = true })",
                        step), 2)
  end
  local list = e.series[name]
  if not list then list = {}; e.series[name] = list end
  list[#list + 1] = value
  local hook = e.on_log
  if hook then hook(step, name, list) end
end

-- The run's metrics from its steps' ({{name =, metrics =}, ...} in run
-- order): a metric one step reports is named as it is; one that several
-- steps report is named "<step>.<metric>" for each, so that none hides another.
function M.merge(steps)
  local count = {}
  for _, s in ipairs(steps) do
    for name in pairs(s.metrics.values) do count[name] = (count[name] or 0) + 1 end
  end
  local out = {}
  for _, s in ipairs(steps) do
    for name, v in pairs(s.metrics.values) do
      out[count[name] > 1 and (s.name .. "." .. name) or name] = v
    end
  end
  return out
end

-- "acc 0.6, val_loss 0.729": a run's metrics for a person, sorted by name.
function M.describe(values)
  local names = {}
  for name in pairs(values) do names[#names + 1] = name end
  table.sort(names)
  for i, name in ipairs(names) do names[i] = string.format("%s %.6g", name, values[name]) end
  return table.concat(names, ", ")
end

return M
