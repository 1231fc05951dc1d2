-- flow.pipeline: node{...}, pipeline{...} (nesting, namespace, remapping,
-- + and -) and the registry of named pipelines.  Everything here is plain
-- description; flow.runner turns it into a DAG.
local core = require("flow.core")
local dag = require("flow.dag")
local util = require("flow.util")
local command = require("flow.command")
local distributed = require("flow.distributed")

local M = {}
local Node = { __name = "flow.node" }
Node.__index = Node
local Pipeline = { __name = "flow.pipeline" }
Pipeline.__index = Pipeline

function M.is_node(v) return getmetatable(v) == Node end
function M.is_pipeline(v) return getmetatable(v) == Pipeline end

-- The C fast path (lua/l_pipeline.c) builds the common valid nodes and
-- pipelines as the code below does and returns nothing for anything else
-- (errors included), which the code below then handles.  It mirrors M.node,
-- command.command and M.pipeline: change those and l_pipeline.c together.
local node_fast, pipeline_fast =
  require("flow.pipeline_c").bind(Node, Pipeline, command.Command, distributed.Distributed, util)

-- Why a string cannot name a dataset or a step (nil if it can): the rule
-- is the C fast path's, so the two cannot disagree.
local name_problem = require("flow.pipeline_c").name_problem

local function check_name(name, what, level)
  local problem = name_problem(name)
  if problem then
    local shown = name:gsub("[%c\\]", function(c) return string.format("\\%d", c:byte()) end)
    util.fail(level + 1, "%s: '%s' %s", what, shown, problem)
  end
end

local function where(level)
  local info = debug.getinfo(level + 1, "Sl")
  if not info or info.currentline < 0 then return "?" end
  return info.short_src .. ":" .. info.currentline
end

-- inputs/outputs: nil, "name", {"a", "b"} or {arg = "dataset"}.
-- Returns the list of {arg=, dataset=} and its style.
local function parse_io(value, what, level)
  if value == nil then return {}, "list" end
  if type(value) == "string" then
    check_name(value, "node: " .. what, level + 1)
    return { { arg = value, dataset = value } }, "single"
  end
  if type(value) ~= "table" then
    util.fail(level + 1, "node: %s must be a dataset name, a list of names or a map, got %s", what, type(value))
  end
  local io = {}
  if util.is_list(value) then
    for i, v in ipairs(value) do
      if type(v) ~= "string" or v == "" then
        util.fail(level + 1, "node: %s[%d] must be a dataset name (a non-empty string), got %s",
                  what, i, type(v) == "string" and '""' or type(v))
      end
      check_name(v, "node: " .. what, level + 1)
      io[i] = { arg = v, dataset = v }
    end
    return io, "list"
  end
  for _, k in ipairs(util.sorted_keys(value)) do
    local v = value[k]
    if type(k) ~= "string" or type(v) ~= "string" or v == "" then
      util.fail(level + 1, "node: %s must map names to dataset names (strings); %s = %s is not",
                what, tostring(k), type(v) == "string" and '""' or type(v))
    end
    check_name(v, "node: " .. what, level + 1)
    io[#io + 1] = { arg = k, dataset = v }
  end
  return io, "map"
end

-- The name of the variable holding `value` in the caller (a local, then a
-- global): node{func = split} is named "split", as Kedro names by __name__.
local function variable_name(value, level)
  local i = 1
  while true do
    local name, v = debug.getlocal(level + 1, i)
    if not name then break end
    if rawequal(v, value) and not name:find("^%(") then return name end
    i = i + 1
  end
  for k, v in pairs(_G) do
    if rawequal(v, value) and type(k) == "string" then return k end
  end
end

local node_fields = { func = true, command = true, inputs = true, outputs = true, name = true,
                      tags = true, retries = true, timeout = true, pool = true }

-- func or command -> kind ("func"|"command"), fn, cmd, dist
local function parse_body(spec, level)
  local body = spec.func ~= nil and spec.func or spec.command
  local dist
  if spec.func ~= nil and spec.command ~= nil then
    util.fail(level + 1, "node: give either func or command, not both")
  elseif body == nil then
    util.fail(level + 1, "node: a step needs func = <function> or command = <flow.command or argv list or string>")
  end
  if distributed.is_distributed(body) then dist, body = body.dist, body.target end
  if type(body) == "function" then
    if spec.command ~= nil then util.fail(level + 1, "node: command must be a command, not a function (use func =)") end
    return "func", body, nil, dist
  end
  if type(body) == "string" or (type(body) == "table" and not command.is_command(body) and spec.command ~= nil) then
    body = command.command(body, level + 1)
  end
  if command.is_command(body) then return "command", nil, body, dist end
  util.fail(level + 1, "node: func must be a function or a flow.command, got %s", type(body))
end

local function parse_tags(tags, level)
  if tags == nil then return {} end
  if type(tags) == "string" then return { tags } end
  if not util.is_list(tags) then util.fail(level + 1, "node: tags must be a string or a list of strings") end
  for i, t in ipairs(tags) do
    if type(t) ~= "string" then util.fail(level + 1, "node: tags[%d] must be a string, got %s", i, type(t)) end
  end
  return { table.unpack(tags) }
end

function M.node(spec, level)
  if level == nil then             -- the fast path finds the user's frame two levels up
    local n = node_fast(spec)      -- not a tail call: that would drop this frame
    if n then return n end
  end
  level = (level or 1) + 1
  if type(spec) ~= "table" or M.is_node(spec) then
    util.fail(level, "node: expected node{func = ..., inputs = ..., outputs = ...}, got %s", type(spec))
  end
  util.check_fields(spec, node_fields, "node", level)
  local n = setmetatable({ where = where(level) }, Node)
  n.kind, n.fn, n.cmd, n.dist = parse_body(spec, level)
  n.inputs, n.input_style = parse_io(spec.inputs, "inputs", level)
  n.outputs, n.output_style = parse_io(spec.outputs, "outputs", level)
  n.tags = parse_tags(spec.tags, level)
  if spec.name ~= nil and (type(spec.name) ~= "string" or spec.name == "") then
    util.fail(level, "node: name must be a non-empty string")
  end
  if spec.name then check_name(spec.name, "node: name", level) end
  n.name = spec.name or variable_name(spec.func ~= nil and spec.func or spec.command, level)
  if not n.name then
    util.fail(level, "node: this step has no name and its %s is not held in a variable: add name = \"...\"",
              n.kind == "func" and "function" or "command")
  end
  if spec.retries ~= nil and (math.type(spec.retries) ~= "integer" or spec.retries < 0) then
    util.fail(level, "node: retries must be a non-negative integer")
  end
  n.retries = spec.retries or 0
  if spec.pool ~= nil and (type(spec.pool) ~= "string" or spec.pool == "") then
    util.fail(level, "node: pool must be the name of a pool (flow.yml pools:), got %s", type(spec.pool))
  end
  n.pool = spec.pool
  if spec.timeout ~= nil then
    n.timeout = util.parse_duration(spec.timeout)
    if not n.timeout then
      util.fail(level, "node: timeout must be seconds or a duration like \"90s\", \"30m\", \"1h30m\", got %s",
                tostring(spec.timeout))
    end
  end
  return n
end

-- Copy of node `n` with datasets and name renamed by `rename(dataset)`.
local function renamed(n, rename, prefix)
  local c = setmetatable({}, Node)
  for k, v in pairs(n) do c[k] = v end
  c.inputs, c.outputs = {}, {}
  for i, io in ipairs(n.inputs) do c.inputs[i] = { arg = io.arg, dataset = rename(io.dataset) } end
  for i, io in ipairs(n.outputs) do c.outputs[i] = { arg = io.arg, dataset = rename(io.dataset) } end
  if prefix then c.name = prefix .. "." .. n.name end
  c.origin = n.origin or n
  return c
end

-- A remap option: {"a", "b"} keeps those names, {a = "x"} renames a to x.
local function parse_remap(v, what, level)
  local map = {}
  if v == nil then return map end
  if type(v) == "string" then v = { v } end
  if type(v) ~= "table" then util.fail(level + 1, "pipeline: %s must be a list or a map of dataset names", what) end
  for k, name in pairs(v) do
    if type(name) ~= "string" then util.fail(level + 1, "pipeline: %s values must be strings", what) end
    check_name(name, "pipeline: " .. what, level + 1)
    if type(k) == "number" then map[name] = name else map[k] = name end
  end
  return map
end

local function strip_params(map)
  local out = {}
  for k, v in pairs(map) do out[(k:gsub("^params:", ""))] = (v:gsub("^params:", "")) end
  return out
end

-- The parameter key a command's ${params.KEY} reads: KEY, unless namespaces
-- and `parameters =` mappings renamed it as they rename "params:KEY" inputs.
function M.command_param(n, key)
  local keys = n.cmd_params
  return keys and keys[key] or key
end

-- A command node's ${params.} keys as namespacing leaves them ({KEY = key
-- it now reads}), from the node's earlier renames and `rename_param`.
local function command_params(n, rename_param)
  local keys = {}
  for _, s in ipairs(n.cmd.argv or { n.cmd.shell }) do
    for _, ref in ipairs(core.template_refs(s)) do
      if ref[1] == "params" then keys[ref[2]] = rename_param(M.command_param(n, ref[2])) end
    end
  end
  return keys
end

local function namespaced(nodes, ns, inputs, outputs, params)
  local function rename_param(key)
    if params[key] then return params[key] end
    return ns and (ns .. "." .. key) or key
  end
  local function rename(d)
    local key = dag.is_param_input(d)
    if key == true then return d end                       -- "parameters": all of them
    if key then return "params:" .. rename_param(key) end
    if inputs[d] then return inputs[d] end
    if outputs[d] then return outputs[d] end
    return ns and (ns .. "." .. d) or d
  end
  local out = {}
  for i, n in ipairs(nodes) do
    out[i] = renamed(n, rename, ns)
    if n.kind == "command" then out[i].cmd_params = command_params(n, rename_param) end
  end
  return out
end

local function collect(items, out, seen, level)
  for i, item in ipairs(items) do
    if M.is_node(item) then
      if not seen[item] then seen[item] = true; out[#out + 1] = item end
    elseif M.is_pipeline(item) then
      collect(item.nodes, out, seen, level)
    elseif type(item) == "table" and util.is_list(item) then
      collect(item, out, seen, level)
    else
      util.fail(level + 1, "pipeline: item %d is a %s, not a node or a pipeline", i, type(item))
    end
  end
end

local pipeline_fields = { namespace = true, inputs = true, outputs = true, parameters = true, tags = true }

function M.pipeline(spec, level)
  do                               -- a block: the frame keeps its size (see M.node)
    local p = pipeline_fast(spec)
    if p then return p end
  end
  level = (level or 1) + 1
  if type(spec) ~= "table" or M.is_node(spec) or M.is_pipeline(spec) then spec = { spec } end
  local items = {}
  for k, v in pairs(spec) do
    if type(k) == "number" then items[k] = v
    elseif not pipeline_fields[k] then
      util.fail(level, "pipeline: unknown option '%s'%s", tostring(k),
                util.did_you_mean(tostring(k), util.sorted_keys(pipeline_fields)))
    end
  end
  local nodes = {}
  collect(items, nodes, {}, level)
  if spec.namespace ~= nil and (type(spec.namespace) ~= "string" or spec.namespace == "") then
    util.fail(level, "pipeline: namespace must be a non-empty string")
  end
  if spec.namespace then check_name(spec.namespace, "pipeline: namespace", level) end
  if spec.namespace or spec.inputs or spec.outputs or spec.parameters then
    nodes = namespaced(nodes, spec.namespace, parse_remap(spec.inputs, "inputs", level),
                       parse_remap(spec.outputs, "outputs", level),
                       strip_params(parse_remap(spec.parameters, "parameters", level)))
  end
  if spec.tags ~= nil then
    local extra = parse_tags(spec.tags, level)
    for i, n in ipairs(nodes) do
      local c = renamed(n, function(d) return d end)
      c.tags = { table.unpack(n.tags) }
      for _, t in ipairs(extra) do c.tags[#c.tags + 1] = t end
      nodes[i] = c
    end
  end
  return setmetatable({ nodes = nodes }, Pipeline)
end

local function as_pipeline(v)
  if M.is_pipeline(v) then return v end
  if M.is_node(v) then return M.pipeline({ v }) end
  error(string.format("cannot combine a pipeline with a %s", type(v)), 3)
end

function Pipeline.__add(a, b)
  return M.pipeline({ as_pipeline(a), as_pipeline(b) }, 2)
end

function Pipeline.__sub(a, b)
  local drop = {}
  for _, n in ipairs(as_pipeline(b).nodes) do drop[n.name] = true end
  local keep = {}
  for _, n in ipairs(as_pipeline(a).nodes) do
    if not drop[n.name] then keep[#keep + 1] = n end
  end
  return setmetatable({ nodes = keep }, Pipeline)
end

function Pipeline.__len(p) return #p.nodes end
Node.__add = Pipeline.__add
Node.__sub = Pipeline.__sub

function Pipeline.__tostring(p)
  local names = {}
  for i, n in ipairs(p.nodes) do names[i] = n.name end
  return string.format("pipeline{%s}", table.concat(names, ", "))
end

function Node.__tostring(n)
  return string.format("node %s (%s)", n.name, n.where)
end

-- Named pipelines: flow.register(name, p).  A script's returned pipeline
-- becomes "__default__".
M.registry = {}

function M.register(name, p, level)
  level = (level or 1) + 1
  if type(name) ~= "string" or name == "" then util.fail(level, "flow.register: name must be a string") end
  if M.is_node(p) then p = M.pipeline({ p }) end
  if not M.is_pipeline(p) then util.fail(level, "flow.register: %q is not a pipeline", name) end
  M.registry[name] = p
  return p
end

return M
