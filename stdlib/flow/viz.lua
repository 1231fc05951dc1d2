-- flow.viz: the pipeline as a picture — steps, datasets and the parameters
-- they read as nodes, edges in the direction data flows, namespaces as
-- clusters — written as Graphviz DOT or a Mermaid flowchart.  With a run's
-- record, each step is coloured by what it did in that run, with its time.
local core = require("flow.core")
local dag = require("flow.dag")
local pipeline = require("flow.pipeline")
local catalog = require("flow.catalog")
local command = require("flow.command")
local util = require("flow.util")

local M = {}

local parent = util.parent_name      -- "a.b" for "a.b.c" (the namespace around a name), nil for "c"

-- What the picture shows: {steps = {...}, datasets = {...}, params = {...},
-- edges = {{from, to, param = bool}}, spaces = the namespaces' tree}.
-- `plan` is the runner's; `where(i)` says where step i runs; `states` maps a
-- step's name to {state =, elapsed =} (a run's), or is nil.
function M.model(plan, where, describe_dist, states)
  local m = { steps = {}, datasets = {}, params = {}, edges = {} }
  local dataset_id, param_id = {}, {}
  local function dataset(name)
    if not dataset_id[name] then
      local e = plan.cat:entry(name)
      m.datasets[#m.datasets + 1] = { id = "d" .. (#m.datasets + 1), name = name, persisted = catalog.persisted(e) }
      dataset_id[name] = m.datasets[#m.datasets].id
    end
    return dataset_id[name]
  end
  local function param(key, input)
    if not param_id[key] then
      m.params[#m.params + 1] = { id = "p" .. (#m.params + 1), name = input, param = true }
      param_id[key] = m.params[#m.params].id
    end
    return param_id[key]
  end
  for k, i in ipairs(plan.graph:order()) do
    local n = plan.nodes[i]
    local st = states and states[n.name]
    local s = { id = "s" .. k, name = n.name, namespace = n.namespace, tags = n.tags, kind = n.kind,
                runs = where(i), dist = plan.dists[i] and describe_dist(plan.dists[i]), where = n.where,
                state = states and (st and st.state or "not in that run"), elapsed = st and st.elapsed,
                inputs = {}, outputs = {}, params = {},
                command = n.cmd and (n.cmd.shell or command.display(n.cmd.argv)) or nil }
    m.steps[k] = s
    for _, io in ipairs(n.inputs) do
      if not dag.is_param_input(io.dataset) then
        m.edges[#m.edges + 1] = { from = dataset(io.dataset), to = s.id }
        s.inputs[#s.inputs + 1] = io.dataset
      end
    end
    local read = pipeline.params_read(n, {})
    for key in pairs(read) do s.params[#s.params + 1] = key end
    table.sort(s.params)
    for _, key in ipairs(s.params) do m.edges[#m.edges + 1] = { from = param(key, read[key]), to = s.id, param = true } end
    for _, io in ipairs(n.outputs) do
      m.edges[#m.edges + 1] = { from = s.id, to = dataset(io.dataset) }
      s.outputs[#s.outputs + 1] = io.dataset
    end
  end
  -- a dataset named ns.x belongs to namespace ns when some step is in it
  local spaces = {}
  for _, s in ipairs(m.steps) do
    local ns = s.namespace
    while ns do spaces[ns] = true; ns = parent(ns) end
  end
  for _, d in ipairs(m.datasets) do
    local ns = parent(d.name)
    while ns and not spaces[ns] do ns = parent(ns) end
    d.namespace = ns
  end
  m.spaces = spaces
  return m
end

-- Colours of a step by its state in a run (fill, border).
local STATE_COLOURS = {
  ["done"] = { "#d4edda", "#2e7d32" }, ["up to date"] = { "#e8f5e9", "#81c784" },
  ["failed"] = { "#f8d7da", "#c62828" }, ["interrupted"] = { "#fff3cd", "#f9a825" },
  ["running"] = { "#fff3cd", "#f9a825" }, ["not run"] = { "#ffffff", "#9e9e9e" },
  ["skipped"] = { "#f5f5f5", "#bdbdbd" }, ["not in that run"] = { "#ffffff", "#bdbdbd" },
}

-- A step's label lines: its name, its tags, its distribution and where it
-- runs, and its state in the run shown.
local function step_lines(s)
  local lines = { s.name }
  if #s.tags > 0 then lines[#lines + 1] = "#" .. table.concat(s.tags, " #") end
  if s.dist then lines[#lines + 1] = s.dist end
  if s.runs ~= "local" or s.dist then lines[#lines + 1] = "runs: " .. s.runs end
  if s.state then
    lines[#lines + 1] = s.state .. (s.elapsed and string.format(" (%.2fs)", s.elapsed) or "")
  end
  return lines
end

-- The namespaces as a tree: children of each (nil: the top), sorted.
local function space_tree(spaces)
  local children = { [""] = {} }
  local names = {}
  for ns in pairs(spaces) do names[#names + 1] = ns end
  table.sort(names)
  for _, ns in ipairs(names) do
    local up = parent(ns) or ""
    children[up] = children[up] or {}
    table.insert(children[up], ns)
    children[ns] = children[ns] or {}
  end
  return children
end

-- Members (steps and datasets) by namespace ("" for none).
local function members(m)
  local by = {}
  local function add(ns, item)
    ns = ns or ""
    by[ns] = by[ns] or {}
    table.insert(by[ns], item)
  end
  for _, s in ipairs(m.steps) do add(s.namespace, s) end
  for _, d in ipairs(m.datasets) do add(d.namespace, d) end
  return by
end

-- Walks the namespaces from the top: node(item, indent) for each step and
-- dataset, open(ns, indent) and close(indent) around each namespace's.
local function walk(m, node, open, close)
  local by, tree = members(m), space_tree(m.spaces)
  local function emit(ns, indent)
    for _, item in ipairs(by[ns] or {}) do node(item, indent) end
    for _, child in ipairs(tree[ns] or {}) do
      open(child, indent)
      emit(child, indent .. "  ")
      close(indent)
    end
  end
  emit("", "  ")
end

-- ---- Graphviz DOT ---------------------------------------------------------

local function dot_string(s)
  return '"' .. s:gsub("[\\\"]", "\\%0"):gsub("\n", "\\n") .. '"'
end

local function dot_node(out, indent, item)
  if item.kind then                                -- a step
    local c = item.state and STATE_COLOURS[item.state] or { "#e8f0fe", "#4a78b5" }
    out[#out + 1] = string.format('%s%s [shape=box, style="rounded,filled", fillcolor="%s", color="%s"%s, label=%s];',
      indent, item.id, c[1], c[2], item.dist and ", penwidth=2" or "", dot_string(table.concat(step_lines(item), "\n")))
  else                                             -- a dataset
    out[#out + 1] = string.format('%s%s [shape=%s, label=%s];', indent, item.id,
      item.persisted and "cylinder" or "ellipse", dot_string(item.name))
  end
end

function M.dot(m)
  local out = { "digraph pipeline {", '  rankdir=LR;', '  node [fontname="Helvetica", fontsize=11];',
                '  edge [color="#777777"];' }
  walk(m, function(item, indent) dot_node(out, indent, item) end,
       function(ns, indent)
         out[#out + 1] = string.format('%ssubgraph %s {', indent, dot_string("cluster_" .. ns))
         out[#out + 1] = string.format('%s  label=%s; style="rounded,dashed"; color="#999999";', indent,
                                       dot_string(ns:match("[^.]*$")))
       end,
       function(indent) out[#out + 1] = indent .. "}" end)
  if #m.params > 0 then
    out[#out + 1] = '  subgraph "cluster_parameters" {'
    out[#out + 1] = '    label="parameters"; style="rounded,dotted"; color="#bbbbbb";'
    for _, p in ipairs(m.params) do
      out[#out + 1] = string.format('    %s [shape=note, style=filled, fillcolor="#fafafa", label=%s];', p.id,
                                    dot_string(p.name))
    end
    out[#out + 1] = "  }"
  end
  for _, e in ipairs(m.edges) do
    out[#out + 1] = string.format("  %s -> %s%s;", e.from, e.to, e.param and ' [style=dashed, color="#aaaaaa"]' or "")
  end
  out[#out + 1] = "}"
  return table.concat(out, "\n") .. "\n"
end

-- ---- Mermaid --------------------------------------------------------------

local function mermaid_text(s)
  return '"' .. s:gsub("[\"#<>&]", { ['"'] = "#quot;", ["#"] = "#35;", ["<"] = "#lt;", [">"] = "#gt;",
                                     ["&"] = "#amp;" }) .. '"'
end

local function mermaid_node(out, indent, item)
  if item.kind then
    local lines = step_lines(item)
    for i, l in ipairs(lines) do lines[i] = mermaid_text(l):sub(2, -2) end
    out[#out + 1] = string.format('%s%s["%s"]', indent, item.id, table.concat(lines, "<br/>"))
  elseif item.persisted then
    out[#out + 1] = string.format('%s%s[(%s)]', indent, item.id, mermaid_text(item.name))
  else
    out[#out + 1] = string.format('%s%s([%s])', indent, item.id, mermaid_text(item.name))
  end
end

local MERMAID_CLASS = { ["done"] = "done", ["up to date"] = "uptodate", ["failed"] = "failed",
                        ["interrupted"] = "interrupted", ["running"] = "interrupted", ["not run"] = "notrun",
                        ["skipped"] = "skipped", ["not in that run"] = "notrun" }

function M.mermaid(m)
  local out = { "flowchart LR" }
  local n_space = 0
  walk(m, function(item, indent) mermaid_node(out, indent, item) end,
       function(ns, indent)
         n_space = n_space + 1
         out[#out + 1] = string.format('%ssubgraph ns%d[%s]', indent, n_space, mermaid_text(ns:match("[^.]*$")))
       end,
       function(indent) out[#out + 1] = indent .. "end" end)
  if #m.params > 0 then
    out[#out + 1] = '  subgraph parameters["parameters"]'
    for _, p in ipairs(m.params) do out[#out + 1] = string.format("    %s>%s]", p.id, mermaid_text(p.name)) end
    out[#out + 1] = "  end"
  end
  for _, e in ipairs(m.edges) do
    out[#out + 1] = string.format("  %s %s %s", e.from, e.param and "-.->" or "-->", e.to)
  end
  local members_of, colours = {}, {}      -- class -> step ids; class -> the colours of a state it shows
  for _, s in ipairs(m.steps) do
    local class = s.state and MERMAID_CLASS[s.state]
    if class then
      members_of[class] = members_of[class] or {}
      table.insert(members_of[class], s.id)
      colours[class] = STATE_COLOURS[s.state]
    end
  end
  local classes = {}
  for class in pairs(members_of) do classes[#classes + 1] = class end
  table.sort(classes)
  for _, class in ipairs(classes) do
    out[#out + 1] = string.format("  classDef %s fill:%s,stroke:%s", class, colours[class][1], colours[class][2])
    out[#out + 1] = string.format("  class %s %s", table.concat(members_of[class], ","), class)
  end
  return table.concat(out, "\n") .. "\n"
end

-- The steps' states in run.json at `path`: {name = {state =, elapsed =}}.
function M.run_states(path)
  local text = core.read_file(path)
  local ok, doc = pcall(core.json_decode, text or "")
  if not text or not ok or type(doc) ~= "table" or type(doc.steps) ~= "table" then return nil end
  local states = {}
  for _, s in ipairs(doc.steps) do
    if type(s) == "table" and type(s.name) == "string" then
      states[s.name] = { state = type(s.state) == "string" and s.state or "not run",
                         elapsed = type(s.elapsed) == "number" and s.elapsed or nil }
    end
  end
  return states
end

-- The last `n` lines of the file at path (read from its end: a log may be
-- large), or nil.
function M.tail(path, n)
  local f = path and io.open(path, "rb")
  if not f then return nil end
  local size = f:seek("end")
  f:seek("set", math.max(0, size - 8192))
  local text = f:read("a") or ""
  f:close()
  local lines = {}
  for line in text:gmatch("[^\n]*\n?") do if line ~= "" then lines[#lines + 1] = line end end
  local from = math.max(1, #lines - n + 1)
  return table.concat(lines, "", from)
end

-- The steps' states from a run's journal (flow.runs.story), for a run still
-- going (or killed) that wrote no run.json: started and not ended is "running".
local JOURNAL_STATE = { ok = "done", ["up to date"] = "up to date", interrupted = "interrupted", running = "running" }
function M.journal_states(events)
  local story, states = require("flow.runs").story(events), {}
  for name, st in pairs(story.steps) do
    states[name] = { state = JOURNAL_STATE[st.state] or "failed",
                     elapsed = st.state ~= "running" and type(st.elapsed) == "number" and st.elapsed or nil }
  end
  return states
end

return M
