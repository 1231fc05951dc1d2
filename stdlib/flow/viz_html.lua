-- flow.viz_html: `flow viz --format html` — one self-contained page (its
-- style, script and drawing inline; nothing loaded from anywhere) that draws
-- the pipeline as SVG, laid out here: datasets and steps in columns by their
-- depth in the graph, each column ordered to keep edges short.  Click a step
-- for its inputs, outputs, parameters, command, where it runs and, with a
-- run, its state, time and the tail of its log; pick a tag to pick out its
-- steps; parameters can be shown or hidden.  The address's #step=NAME opens a
-- step and #tag=TAG picks a tag on load (what the browser test uses).
local parent = require("flow.util").parent_name

local M = {}

local COL_W, ROW_H = 230, 64           -- the grid
local NODE_W, NODE_H = 180, 44
local MARGIN = 24

local esc = require("flow.util").html_escape

-- Columns by longest path from the sources (a parameter one column before
-- its first reader); then each column ordered by the mean row of what feeds
-- it (the barycentre heuristic, one sweep left to right).
local function layout(m)
  local preds, col = {}, {}
  for _, e in ipairs(m.edges) do
    preds[e.to] = preds[e.to] or {}
    table.insert(preds[e.to], e.from)
  end
  local items = {}
  for _, s in ipairs(m.steps) do items[s.id] = s end
  for _, d in ipairs(m.datasets) do items[d.id] = d end
  for _, p in ipairs(m.params) do items[p.id] = p end
  -- steps come in run order (topological), so their inputs' columns are known
  local function column_of(id)
    if col[id] then return col[id] end
    local c = 0
    for _, from in ipairs(preds[id] or {}) do
      if not from:match("^p") then c = math.max(c, column_of(from) + 1) end
    end
    col[id] = c
    return c
  end
  for _, s in ipairs(m.steps) do column_of(s.id) end
  for _, d in ipairs(m.datasets) do column_of(d.id) end
  local shift = 0                                -- room left of a first-column step for its parameters
  for _, e in ipairs(m.edges) do if e.param and col[e.to] == 0 then shift = 1 end end
  if shift > 0 then for id, c in pairs(col) do col[id] = c + shift end end
  for _, e in ipairs(m.edges) do                 -- a parameter: just left of its first reader
    if e.param then col[e.from] = math.min(col[e.from] or math.huge, col[e.to] - 1) end
  end
  local columns, n_cols = {}, 0
  for id, c in pairs(col) do
    columns[c] = columns[c] or {}
    table.insert(columns[c], id)
    n_cols = math.max(n_cols, c + 1)
  end
  local row = {}
  for c = 0, n_cols - 1 do
    local list = columns[c] or {}
    local key = {}
    for _, id in ipairs(list) do
      local sum, n = 0, 0
      for _, from in ipairs(preds[id] or {}) do
        if row[from] then sum, n = sum + row[from], n + 1 end
      end
      key[id] = n > 0 and sum / n or math.huge
    end
    table.sort(list, function(a, b)
      if key[a] ~= key[b] then return key[a] < key[b] end
      return tonumber(a:sub(2)) + (a:sub(1, 1) == "s" and 0 or 1e6) < tonumber(b:sub(2)) + (b:sub(1, 1) == "s" and 0 or 1e6)
    end)
    for r, id in ipairs(list) do row[id] = r - 1 end
  end
  local rows = 0
  for id, c in pairs(col) do
    items[id].x, items[id].y = MARGIN + c * COL_W, MARGIN + 24 + row[id] * ROW_H
    rows = math.max(rows, row[id] + 1)
  end
  return items, MARGIN * 2 + n_cols * COL_W, MARGIN * 2 + 24 + rows * ROW_H
end

local STATE_CLASS = { ["done"] = "done", ["up to date"] = "uptodate", ["failed"] = "failed",
                      ["interrupted"] = "interrupted", ["running"] = "running", ["not run"] = "notrun",
                      ["skipped"] = "skipped", ["not in that run"] = "notrun" }

-- s cut to n characters (UTF-8: never inside one; names are checked UTF-8).
local function short(s, n)
  if utf8.len(s) and utf8.len(s) > n then return s:sub(1, utf8.offset(s, n) - 1) .. "…" end
  return s
end

local function svg_node(out, item)
  local x, y = item.x, item.y
  if item.kind then
    out[#out + 1] = string.format('<g class="node step %s" data-id="%s" data-name="%s" data-tags="%s" tabindex="0">'
      .. '<rect x="%d" y="%d" width="%d" height="%d" rx="8"/><text x="%d" y="%d">%s</text>%s</g>',
      item.state and STATE_CLASS[item.state] and ("state-" .. STATE_CLASS[item.state]) or "", item.id, esc(item.name),
      esc(table.concat(item.tags, " ")), x, y, NODE_W, NODE_H, x + 10, y + 18, esc(short(item.name, 26)),
      string.format('<text class="sub" x="%d" y="%d">%s</text>', x + 10, y + 34,
        esc(short(item.state and (item.state .. (item.elapsed and string.format(" · %.2fs", item.elapsed) or ""))
                  or item.dist or (#item.tags > 0 and ("#" .. table.concat(item.tags, " #"))) or item.kind, 30))))
  else
    local cls = item.param and "param" or "dataset"
    out[#out + 1] = string.format('<g class="node %s%s" data-id="%s"><rect x="%d" y="%d" width="%d" height="%d" '
      .. 'rx="%d"/><text x="%d" y="%d">%s</text></g>', cls, item.persisted and " persisted" or "", item.id, x,
      y + 8, NODE_W, NODE_H - 16, cls == "param" and 2 or 14, x + 12, y + 27, esc(short(item.name, 28)))
  end
end

local function svg_edge(out, e, items)
  local a, b = items[e.from], items[e.to]
  local x1, y1, x2, y2 = a.x + NODE_W, a.y + NODE_H / 2, b.x, b.y + NODE_H / 2
  local mid = (x1 + x2) / 2
  out[#out + 1] = string.format('<path class="edge%s" data-from="%s" data-to="%s" d="M%d,%d C%d,%d %d,%d %d,%d"/>',
    e.param and " param" or "", e.from, e.to, x1, y1, mid, y1, mid, y2, x2, y2)
end

-- The namespaces as boxes behind their members (drawn first).
local function svg_spaces(out, m)
  local boxes = {}
  for _, list in ipairs({ m.steps, m.datasets }) do
    for _, it in ipairs(list) do
      local ns = it.namespace
      while ns do
        local b = boxes[ns] or { x1 = math.huge, y1 = math.huge, x2 = -math.huge, y2 = -math.huge }
        boxes[ns] = b
        b.x1, b.y1 = math.min(b.x1, it.x), math.min(b.y1, it.y)
        b.x2, b.y2 = math.max(b.x2, it.x + NODE_W), math.max(b.y2, it.y + NODE_H)
        ns = parent(ns)
      end
    end
  end
  local names = {}
  for ns in pairs(boxes) do names[#names + 1] = ns end
  table.sort(names)                     -- outer before inner: inner boxes drawn on top
  for _, ns in ipairs(names) do
    local b, depth = boxes[ns], select(2, ns:gsub("%.", ""))
    local pad = 14 - 4 * math.min(depth, 2)
    out[#out + 1] = string.format('<g class="namespace"><rect x="%d" y="%d" width="%d" height="%d" rx="10"/>'
      .. '<text x="%d" y="%d">%s</text></g>', b.x1 - pad, b.y1 - pad - 12, b.x2 - b.x1 + 2 * pad,
      b.y2 - b.y1 + 2 * pad + 12, b.x1 - pad + 6, b.y1 - pad, esc(ns))
  end
end

local function json_details(m)
  local core = require("flow.core")
  local steps = {}
  for _, s in ipairs(m.steps) do
    steps[s.id] = { name = s.name, namespace = s.namespace, tags = core.json_list({ table.unpack(s.tags) }), kind = s.kind,
                    inputs = core.json_list(s.inputs), outputs = core.json_list(s.outputs),
                    params = core.json_list(s.params), command = s.command, where = s.where, runs = s.runs,
                    dist = s.dist, state = s.state, elapsed = s.elapsed, log = s.log }
  end
  -- </script> cannot end the script early: "<" is written as an escape
  return (core.json_encode(steps):gsub("<", "\\u003c"))
end

local STYLE = [[
body { font: 13px system-ui, sans-serif; margin: 0; color: #222; display: flex; height: 100vh; }
#canvas { flex: 1; overflow: auto; } #panel { width: 320px; border-left: 1px solid #ddd; padding: 12px 16px;
  overflow: auto; background: #fafafa; }
header { padding: 10px 16px; border-bottom: 1px solid #eee; } h1 { font-size: 16px; margin: 0 0 6px; }
.node rect { stroke-width: 1.5; } .node text { font-size: 12px; pointer-events: none; }
.node text.sub { fill: #555; font-size: 11px; }
.step rect { fill: #e8f0fe; stroke: #4a78b5; } .step { cursor: pointer; }
.step.selected rect { stroke-width: 3; stroke: #1a3d6d; }
.dataset rect { fill: #fff; stroke: #888; } .dataset.persisted rect { fill: #f3efe6; stroke: #8d6e3f; }
.param rect { fill: #fafafa; stroke: #bbb; stroke-dasharray: 3 2; }
.edge { fill: none; stroke: #9aa; stroke-width: 1.3; } .edge.param { stroke-dasharray: 4 3; stroke: #ccc; }
.namespace rect { fill: #f6f8fb; stroke: #c5cfdc; stroke-dasharray: 5 3; } .namespace text { fill: #6b7c93; font-size: 11px; }
.state-done rect { fill: #d4edda; stroke: #2e7d32; } .state-uptodate rect { fill: #e8f5e9; stroke: #81c784; }
.state-failed rect { fill: #f8d7da; stroke: #c62828; } .state-interrupted rect, .state-running rect { fill: #fff3cd; stroke: #f9a825; }
.state-notrun rect { fill: #fff; stroke: #9e9e9e; } .state-skipped rect { fill: #f5f5f5; stroke: #bdbdbd; }
.dimmed { opacity: .25; } .hidden { display: none; }
#panel h2 { font-size: 15px; margin: 4px 0 10px; word-break: break-all; } #panel dt { font-weight: 600; margin-top: 8px; }
#panel dd { margin: 2px 0 0; word-break: break-all; } #panel pre { background: #fff; border: 1px solid #e3e3e3;
  padding: 6px; max-height: 240px; overflow: auto; font-size: 11px; white-space: pre-wrap; }
]]

local SCRIPT = [[
(function () {
  var steps = JSON.parse(document.getElementById("steps").textContent);
  var panel = document.getElementById("detail");
  function text(tag, t) { var e = document.createElement(tag); e.textContent = t; return e; }
  function show(id) {
    var s = steps[id];
    document.querySelectorAll(".step").forEach(function (g) {
      g.classList.toggle("selected", g.getAttribute("data-id") === id);
    });
    panel.innerHTML = "";
    if (!s) return;
    panel.appendChild(text("h2", s.name));
    var dl = document.createElement("dl");
    function row(k, v) {
      if (v === undefined || v === null || (Array.isArray(v) && v.length === 0)) return;
      dl.appendChild(text("dt", k));
      var dd = document.createElement("dd");
      if (k === "command" || k === "log") dd.appendChild(text("pre", v));
      else dd.textContent = Array.isArray(v) ? v.join(", ") : String(v);
      dl.appendChild(dd);
    }
    row("inputs", s.inputs); row("outputs", s.outputs); row("parameters", s.params);
    row("tags", s.tags); row("kind", s.kind); row("command", s.command); row("runs", s.runs);
    row("distribution", s.dist); row("declared at", s.where);
    if (s.state) row("in that run", s.state + (typeof s.elapsed === "number" ? " (" + s.elapsed.toFixed(2) + "s)" : ""));
    row("log", s.log);
    panel.appendChild(dl);
  }
  function pickTag(tag) {
    document.getElementById("tag").value = tag;
    document.querySelectorAll(".step").forEach(function (g) {
      var tags = (g.getAttribute("data-tags") || "").split(" ");
      g.classList.toggle("dimmed", tag !== "" && tags.indexOf(tag) < 0);
    });
  }
  function showParams(on) {
    document.querySelectorAll(".param").forEach(function (e) { e.classList.toggle("hidden", !on); });
    document.getElementById("params").checked = on;
  }
  document.querySelectorAll(".step").forEach(function (g) {
    g.addEventListener("click", function () { show(g.getAttribute("data-id")); });
    g.addEventListener("keydown", function (ev) { if (ev.key === "Enter") show(g.getAttribute("data-id")); });
  });
  document.getElementById("tag").addEventListener("change", function (ev) { pickTag(ev.target.value); });
  document.getElementById("params").addEventListener("change", function (ev) { showParams(ev.target.checked); });
  function dec(x) { try { return decodeURIComponent(x); } catch (e) { return x; } }
  var h = location.hash.slice(1).split("&");       // split first: a name may hold & or =
  h.forEach(function (part) {
    var kv = part.split("="), k = dec(kv[0]), v = dec(kv.slice(1).join("="));
    if (k === "step") Object.keys(steps).forEach(function (id) { if (steps[id].name === v) show(id); });
    if (k === "tag") pickTag(v);
    if (k === "params") showParams(v !== "off");
  });
})();
]]

-- The page for model m (flow.viz's, with each step's .log filled in when a
-- run is shown); info = {title =, run =}.
function M.html(m, info)
  local items, w, h = layout(m)
  local tags, seen = {}, {}
  for _, s in ipairs(m.steps) do
    for _, t in ipairs(s.tags) do if not seen[t] then seen[t] = true; tags[#tags + 1] = t end end
  end
  table.sort(tags)
  local out = { '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>', esc(info.title),
                '</title><style>', STYLE, '</style></head><body><div id="canvas"><header><h1>', esc(info.title),
                '</h1>', #m.steps, ' step', #m.steps == 1 and "" or "s", ', ', #m.datasets, ' dataset',
                #m.datasets == 1 and "" or "s", info.run and (", coloured by run " .. esc(info.run)) or "",
                ' · tag <select id="tag"><option value="">(all)</option>' }
  for _, t in ipairs(tags) do out[#out + 1] = string.format('<option value="%s">%s</option>', esc(t), esc(t)) end
  out[#out + 1] = '</select> · <label><input type="checkbox" id="params" checked> parameters</label></header>'
  out[#out + 1] = string.format('<svg id="graph" width="%d" height="%d" viewBox="0 0 %d %d">', w, h, w, h)
  svg_spaces(out, m)
  for _, e in ipairs(m.edges) do svg_edge(out, e, items) end
  for _, list in ipairs({ m.params, m.datasets, m.steps }) do
    for _, it in ipairs(list) do svg_node(out, it) end
  end
  out[#out + 1] = '</svg></div><aside id="panel"><div id="detail"><p>Click a step to see its inputs, outputs, '
    .. 'parameters, command and, with a run, its log.</p></div></aside>'
  out[#out + 1] = '<script type="application/json" id="steps">' .. json_details(m) .. '</script>'
  out[#out + 1] = '<script>' .. SCRIPT .. '</script></body></html>\n'
  return table.concat(out)
end

return M
