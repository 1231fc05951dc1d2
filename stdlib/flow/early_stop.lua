-- flow.early_stop: whether a sweep's trial should stop before its end, from
-- the series of its metric (one value per flow.log_metric call: an epoch)
-- against the trials before it.  The policies are Azure ML's
-- (earlyTermination of a sweep job), applied at every `every`-th value from
-- the `after`-th on:
--   bandit  a trial whose value at that point is worse than the best value
--           any earlier trial had at the same point, by more than the slack:
--           slack_factor f (min: v > best * (1 + f); max: v < best / (1 + f))
--           or slack_amount a (min: v > best + a; max: v < best - a);
--   median  a trial whose best value so far is worse than the median of the
--           earlier trials' running averages at that point.
--
--   flow.sweep{ ..., early_stop = { policy = "bandit", slack_factor = 0.1, after = 2 } }
--   flow sweep ... --early-stop bandit,slack_factor=0.1,after=2
local util = require("flow.util")

local M = {}

local POLICIES = { bandit = true, median = true }
local FIELDS = { policy = true, slack_factor = true, slack_amount = true, after = true, every = true }

local function fail(level, fmt, ...)
  util.fail(level + 1, "flow.sweep: early_stop: " .. fmt, ...)
end

-- The policy `t` asks for, checked and completed, or an error at `level`.
function M.check(t, level)
  if type(t) ~= "table" then
    fail(level + 1, "expected a table {policy = \"bandit\" | \"median\", ...}, got %s", type(t))
  end
  for k in pairs(t) do
    if not FIELDS[k] then fail(level + 1, "unknown field '%s' (it has: after, every, policy, slack_amount, slack_factor)",
                               tostring(k)) end
  end
  if not POLICIES[t.policy] then fail(level + 1, "policy must be \"bandit\" or \"median\", got %s", tostring(t.policy)) end
  local p = { policy = t.policy, after = t.after or 1, every = t.every or 1 }
  for _, k in ipairs({ "after", "every" }) do
    if math.type(p[k]) ~= "integer" or p[k] < 1 then
      fail(level + 1, "%s must be a whole number from 1 (a count of logged values), got %s", k, tostring(p[k]))
    end
  end
  if t.policy == "bandit" then
    if t.slack_factor ~= nil and t.slack_amount ~= nil then fail(level + 1, "give slack_factor or slack_amount, not both") end
    p.slack_factor, p.slack_amount = t.slack_factor, t.slack_amount
    if p.slack_amount == nil then p.slack_factor = p.slack_factor or 0.1 end
    local k = p.slack_factor ~= nil and "slack_factor" or "slack_amount"
    if type(p[k]) ~= "number" or p[k] < 0 or p[k] ~= p[k] or p[k] == math.huge then
      fail(level + 1, "%s must be a finite number from 0, got %s", k, tostring(p[k]))
    end
  elseif t.slack_factor ~= nil or t.slack_amount ~= nil then
    fail(level + 1, "slack_factor and slack_amount are the bandit policy's")
  end
  return p
end

-- `flow sweep --early-stop bandit,slack_factor=0.2,after=3` -> the table M.check takes.
function M.parse(text)
  local t = {}
  for item in (text .. ","):gmatch("([^,]*),") do
    local k, v = item:match("^%s*([%w_]+)%s*=%s*(.-)%s*$")
    if not k then
      if t.policy or item:match("^%s*$") then return nil, string.format("'%s' is not key=value", item) end
      t.policy = item:match("^%s*(.-)%s*$")
    else
      t[k] = math.tointeger(tonumber(v)) or tonumber(v) or v
    end
  end
  return t
end

-- When the policy looks at value k (1-based).
local function due(p, k)
  return k >= p.after and (k - p.after) % p.every == 0
end

local function worse(goal, a, b)
  if goal == "min" then return a > b end
  return a < b
end

local function fmt(v) return string.format("%.6g", v) end

-- For the trial now running: a function of its series so far that returns why
-- it should stop ("<value> at value 3, worse than …", to follow the metric's
-- name), or nil.  previous: the series of the trials before it, which do not
-- change while it runs: their running sums are made once, and the trial's
-- best so far is kept, so each value costs one look per earlier trial.
function M.decider(p, goal, previous)
  local sums = {}
  for j, s in ipairs(p.policy == "median" and previous or {}) do
    local acc, t = 0, {}
    for i = 1, #s do acc = acc + s[i]; t[i] = acc end
    sums[j] = t
  end
  local best_so_far, seen = nil, 0
  return function(series)
    local k = #series
    if p.policy ~= "bandit" then                   -- (the bandit policy does not read it)
      for i = seen + 1, k do
        if best_so_far == nil or worse(goal, best_so_far, series[i]) then best_so_far = series[i] end
      end
      seen = k
    end
    if not due(p, k) then return nil end
    local v = series[k]
    if p.policy == "bandit" then
      local best
      for _, s in ipairs(previous) do
        if s[k] and (best == nil or worse(goal, best, s[k])) then best = s[k] end
      end
      if best == nil then return nil end
      local limit
      if p.slack_factor then limit = goal == "min" and best * (1 + p.slack_factor) or best / (1 + p.slack_factor)
      else limit = goal == "min" and best + p.slack_amount or best - p.slack_amount end
      if worse(goal, v, limit) then
        return string.format("%s at value %d, worse than the best earlier trial's %s there by more than the "
          .. "bandit slack (%s)", fmt(v), k, fmt(best), p.slack_factor and ("factor " .. fmt(p.slack_factor))
          or ("amount " .. fmt(p.slack_amount)))
      end
      return nil
    end
    local averages = {}
    for _, t in ipairs(sums) do
      if t[k] then averages[#averages + 1] = t[k] / k end
    end
    if #averages == 0 then return nil end
    table.sort(averages)
    local m = #averages
    local median = m % 2 == 1 and averages[(m + 1) // 2] or (averages[m // 2] + averages[m // 2 + 1]) / 2
    local best = best_so_far
    if worse(goal, best, median) then
      return string.format("best %s by value %d, worse than the median of the earlier trials' running averages "
        .. "there (%s)", fmt(best), k, fmt(median))
    end
    return nil
  end
end

return M
