-- flow.sweep_report: a sweep's report.html — one self-contained page (no
-- network: its style, script and charts are inline) with the results table
-- (sortable: click a heading; #sort=KEY or #sort=KEY,desc in the address
-- sorts it on load) and charts that flow draws as SVG: the metric of each
-- trial, the metric against each swept parameter, and the metric over the
-- epochs of the trials that logged it as a series.
local core = require("flow.core")

local M = {}

local W, H = 560, 260                         -- a chart's size
local PAD = { left = 72, right = 16, top = 28, bottom = 40 }

local esc = require("flow.util").html_escape

-- A parameter's or a metric's value as shown: a float to 6 significant
-- digits, a list or null as JSON (--grid n=[1,2],null), anything else as
-- tostring says.
function M.value_text(v)
  if math.type(v) == "float" then return string.format("%.6g", v) end
  if type(v) == "table" or v == core.json_null then return core.json_encode(v) or tostring(v) end
  return tostring(v)
end
local num = M.value_text

-- A value as text that tells every two values apart (0.3 and 0.30000001,
-- which value_text's 6 digits do not), a list or null as JSON.
function M.exact_text(v)
  if type(v) == "table" or v == core.json_null then return core.json_encode(v) end
  return tostring(v)
end

-- An axis over the numbers in `values`: a function from value to [0, 1], its
-- ticks ({value, label}), and whether it is logarithmic (all positive,
-- spanning more than three decades: learning rates, a diverged loss).
local function axis(values)
  local lo, hi = math.huge, -math.huge
  for _, v in ipairs(values) do lo, hi = math.min(lo, v), math.max(hi, v) end
  if lo == math.huge then lo, hi = 0, 1 end
  local log = lo > 0 and hi / lo > 1000
  local f = log and math.log or function(v) return v end
  local a, b = f(lo), f(hi)
  if a == b then a, b = a - 1, b + 1 end
  local ticks = {}
  for k = 0, 4 do
    local t = a + (b - a) * k / 4
    ticks[#ticks + 1] = { (t - a) / (b - a), string.format("%.3g", log and math.exp(t) or t) }
  end
  return function(v) return (f(v) - a) / (b - a) end, ticks, log
end

-- A category axis: each distinct value (in first-seen order) at its slot.
local function category_axis(values)
  local slots, labels = {}, {}
  -- a slot per value as written (0.3 and 0.30000001 apart), labelled as shown
  local key = M.exact_text
  for _, v in ipairs(values) do
    local k = key(v)
    if not slots[k] then labels[#labels + 1] = M.value_text(v); slots[k] = #labels end
  end
  local n = #labels
  local ticks = {}
  for i, l in ipairs(labels) do ticks[i] = { (i - 0.5) / n, l } end
  return function(v) return (slots[key(v)] - 0.5) / n end, ticks
end

-- The frame of a chart: <svg>, its title, axes and tick labels; returns the
-- opening markup and functions from [0, 1] to pixels.
local function frame(out, title, xticks, yticks, xlabel, ylabel)
  local pw, ph = W - PAD.left - PAD.right, H - PAD.top - PAD.bottom
  local function px(u) return PAD.left + u * pw end
  local function py(u) return PAD.top + (1 - u) * ph end
  out[#out + 1] = string.format('<svg class="chart" width="%d" height="%d" viewBox="0 0 %d %d" role="img" '
    .. 'aria-label="%s"><text class="title" x="%d" y="18">%s</text>', W, H, W, H, esc(title), PAD.left, esc(title))
  out[#out + 1] = string.format('<line class="axis" x1="%d" y1="%d" x2="%d" y2="%d"/><line class="axis" x1="%d" '
    .. 'y1="%d" x2="%d" y2="%d"/>', PAD.left, PAD.top, PAD.left, H - PAD.bottom, PAD.left, H - PAD.bottom,
    W - PAD.right, H - PAD.bottom)
  for _, t in ipairs(yticks) do
    out[#out + 1] = string.format('<line class="grid" x1="%d" y1="%.1f" x2="%d" y2="%.1f"/><text class="tick" '
      .. 'x="%d" y="%.1f" text-anchor="end">%s</text>', PAD.left, py(t[1]), W - PAD.right, py(t[1]),
      PAD.left - 6, py(t[1]) + 4, esc(t[2]))
  end
  for _, t in ipairs(xticks) do
    out[#out + 1] = string.format('<text class="tick" x="%.1f" y="%d" text-anchor="middle">%s</text>', px(t[1]),
      H - PAD.bottom + 16, esc(t[2]))
  end
  out[#out + 1] = string.format('<text class="label" x="%d" y="%d" text-anchor="middle">%s</text>',
    PAD.left + pw // 2, H - 6, esc(xlabel))
  out[#out + 1] = string.format('<text class="label" x="12" y="%d" transform="rotate(-90 12 %d)" '
    .. 'text-anchor="middle">%s</text>', PAD.top + ph // 2, PAD.top + ph // 2, esc(ylabel))
  return px, py
end

-- The trials that have the metric (ok ones).
local function scored(trials)
  local out = {}
  for _, t in ipairs(trials) do if t.status == "ok" and t.metric ~= nil then out[#out + 1] = t end end
  return out
end

local function point(out, x, y, t, best, metric)
  out[#out + 1] = string.format('<circle class="point%s" cx="%.1f" cy="%.1f" r="5" data-trial="%d"><title>trial '
    .. '%d: %s %s</title></circle>', t == best and " best" or "", x, y, t.trial, t.trial, esc(metric), num(t.metric))
end

-- The metric of each trial, by trial number.
local function chart_per_trial(out, trials, best, metric)
  local s = scored(trials)
  table.sort(s, function(a, b) return a.trial < b.trial end)
  local ys, xs = {}, {}
  for i, t in ipairs(s) do ys[i], xs[i] = t.metric, t.trial end
  local fy, yt = axis(ys)
  local fx, xt = category_axis(xs)
  local px, py = frame(out, metric .. " per trial", xt, yt, "trial", metric)
  for _, t in ipairs(s) do point(out, px(fx(t.trial)), py(fy(t.metric)), t, best, metric) end
  out[#out + 1] = "</svg>"
end

-- The metric against parameter `key`: a number axis when every value is a
-- number, else one slot per value.
local function chart_against(out, trials, best, metric, key)
  local s = scored(trials)
  local xs, ys, numeric = {}, {}, true
  for i, t in ipairs(s) do
    xs[i], ys[i] = t.params[key], t.metric
    numeric = numeric and type(xs[i]) == "number"
  end
  local fy, yt = axis(ys)
  local fx, xt, log = (numeric and axis or category_axis)(xs)
  local px, py = frame(out, metric .. " against " .. key, xt, yt, key .. (log and " (log scale)" or ""), metric)
  for _, t in ipairs(s) do
    local u = fx(t.params[key])
    if numeric and #xt > 0 then u = 0.04 + 0.92 * u end     -- off the axis lines
    point(out, px(u), py(fy(t.metric)), t, best, metric)
  end
  out[#out + 1] = "</svg>"
end

-- The metric over epochs, a line per trial that logged it as a series.
local function chart_series(out, trials, best, metric)
  local lines, ys, longest = {}, {}, 0
  for _, t in ipairs(trials) do
    if t.series and #t.series > 1 then
      lines[#lines + 1] = t
      for _, v in ipairs(t.series) do ys[#ys + 1] = v end
      longest = math.max(longest, #t.series)
    end
  end
  if #lines == 0 then return end
  local fy, yt = axis(ys)
  local xt = {}
  for k = 1, longest, math.max(1, longest // 8) do xt[#xt + 1] = { (k - 1) / (longest - 1), tostring(k) } end
  local px, py = frame(out, metric .. " over epochs", xt, yt, "epoch", metric)
  for _, t in ipairs(lines) do
    local pts = {}
    for k, v in ipairs(t.series) do pts[k] = string.format("%.1f,%.1f", px((k - 1) / (longest - 1)), py(fy(v))) end
    out[#out + 1] = string.format('<polyline class="series%s" data-trial="%d" points="%s"><title>trial %d</title>'
      .. '</polyline>', t == best and " best" or t.status == "stopped" and " stopped" or "", t.trial,
      table.concat(pts, " "), t.trial)
  end
  out[#out + 1] = "</svg>"
end

local STYLE = [[
body { font: 14px system-ui, sans-serif; margin: 24px; color: #222; }
h1 { font-size: 20px; } .meta { color: #666; }
table { border-collapse: collapse; margin: 16px 0; }
th, td { padding: 4px 10px; border-bottom: 1px solid #ddd; text-align: left; }
th { cursor: pointer; user-select: none; background: #f4f4f4; }
th.sorted-asc::after { content: " \25B2"; } th.sorted-desc::after { content: " \25BC"; }
tr.best td { font-weight: 600; background: #eef7ee; } tr.failed td { color: #a33; } tr.stopped td { color: #777; }
.charts { display: flex; flex-wrap: wrap; gap: 16px; }
svg.chart { border: 1px solid #e4e4e4; background: #fff; }
.title { font-weight: 600; } .tick, .label { fill: #555; font-size: 11px; }
.axis { stroke: #999; } .grid { stroke: #eee; }
.point { fill: #4a78b5; } .point.best { fill: #2e9e44; stroke: #145a22; stroke-width: 2; }
.series { fill: none; stroke: #4a78b5; stroke-opacity: .6; stroke-width: 1.5; }
.series.stopped { stroke: #999; stroke-dasharray: 4 3; }
.series.best { stroke: #2e9e44; stroke-opacity: 1; stroke-width: 2.5; }
]]

-- Sorting the table: numbers as numbers, "-" last; the address's
-- #sort=KEY[,desc] on load.
local SCRIPT = [[
(function () {
  var table = document.getElementById("results"), body = table.tBodies[0];
  var heads = Array.prototype.slice.call(table.tHead.rows[0].cells);
  function value(row, col) {
    var text = row.cells[col].textContent.trim();
    if (text === "-" || text === "") return null;
    var n = Number(text);
    return isNaN(n) ? text : n;
  }
  function sortBy(col, desc) {
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = value(a, col), y = value(b, col);
      if (x === null || y === null) return x === y ? 0 : x === null ? 1 : -1;
      var c = typeof x === "number" && typeof y === "number" ? x - y : String(x).localeCompare(String(y));
      return desc ? -c : c;
    });
    rows.forEach(function (r) { body.appendChild(r); });
    heads.forEach(function (h, i) {
      h.className = i === col ? (desc ? "sorted-desc" : "sorted-asc") : "";
    });
  }
  heads.forEach(function (h, i) {
    h.addEventListener("click", function () { sortBy(i, h.className === "sorted-asc"); });
  });
  var m = /^#sort=([^,]+)(,desc)?$/.exec(decodeURIComponent(location.hash));
  if (m) heads.forEach(function (h, i) { if (h.getAttribute("data-key") === m[1]) sortBy(i, !!m[2]); });
})();
]]

-- The page for a sweep: `trials` ranked (best first), `keys` the swept
-- parameters, `info` = {id =, metric =, goal =, sampler =, seed =}.
function M.html(trials, keys, best, info)
  local out = { '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">',
                '<title>flow sweep ', esc(info.id), '</title><style>', STYLE, '</style></head><body>',
                '<h1>Sweep ', esc(info.id), '</h1><p class="meta">', #trials, ' trial', #trials == 1 and "" or "s",
                ', ', esc(info.sampler), info.seed and (" (seed " .. esc(info.seed) .. ")") or "", ', ranked by ',
                esc(info.metric), ' (', info.goal == "min" and "lower" or "higher", ' is better)',
                best and (", best: trial " .. best.trial) or ", no trial has the metric", '</p>' }
  out[#out + 1] = '<table id="results"><thead><tr><th data-key="trial">trial</th>'
  for _, k in ipairs(keys) do out[#out + 1] = string.format('<th data-key="%s">%s</th>', esc(k), esc(k)) end
  out[#out + 1] = string.format('<th data-key="metric">%s</th><th data-key="status">status</th>'
    .. '<th data-key="time">time (s)</th><th data-key="run">run</th></tr></thead><tbody>', esc(info.metric))
  for _, t in ipairs(trials) do
    local cls = t == best and ' class="best"' or t.status == "stopped" and ' class="stopped"'
                or t.status ~= "ok" and ' class="failed"' or ""
    out[#out + 1] = string.format('<tr%s data-trial="%d"><td>%d</td>', cls, t.trial, t.trial)
    for _, k in ipairs(keys) do out[#out + 1] = "<td>" .. esc(num(t.params[k])) .. "</td>" end
    out[#out + 1] = string.format('<td>%s</td><td title="%s">%s</td><td>%.2f</td><td>%s</td></tr>',
      t.metric and num(t.metric) or "-", esc(t.error or ""), esc(t.status), t.elapsed, esc(t.run_id or "-"))
  end
  out[#out + 1] = '</tbody></table><div class="charts">'
  if best or #scored(trials) > 0 then
    chart_per_trial(out, trials, best, info.metric)
    for _, k in ipairs(keys) do chart_against(out, trials, best, info.metric, k) end
    chart_series(out, trials, best, info.metric)
  end
  out[#out + 1] = '</div><script>' .. SCRIPT .. '</script></body></html>\n'
  return table.concat(out)
end

return M
