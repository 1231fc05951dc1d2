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

-- node{} is C (lua/l_pipeline.c): the one implementation of its fields,
-- checks and errors.  This file owns the classes and pipeline{} composition.
local pipeline_c = require("flow.pipeline_c")
M.node = pipeline_c.bind(Node, command.Command, distributed.Distributed, util)

-- check_name(name, what, level): raises "<what>: '<name>' <problem>" where a
-- string cannot name a dataset or a step (the rule is node{}'s, in C).
local c_check_name = pipeline_c.check_name
local function check_name(name, what, level)
  c_check_name(name, what, level + 1)
end

-- tags: a string or a list of strings -> a copy of the list (node{}'s rule).
local c_tags = pipeline_c.tags
local function parse_tags(tags, level)
  local t = c_tags(tags, "node", level + 1)
  return t
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
  for _, s in ipairs(command.template_strings(n.cmd)) do
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

-- Appends the nodes of `items` (flattened, each once) to out[n + 1 ...];
-- returns the new count.
local function collect(items, out, n, seen, level)
  for i, item in ipairs(items) do
    local class = getmetatable(item)
    if class == Node then
      if not seen[item] then seen[item] = true; n = n + 1; out[n] = item end
    elseif class == Pipeline then
      n = collect(item.nodes, out, n, seen, level)
    elseif type(item) == "table" and util.is_list(item) then
      n = collect(item, out, n, seen, level)
    else
      util.fail(level + 1, "pipeline: item %d is a %s, not a node or a pipeline", i, type(item))
    end
  end
  return n
end

local pipeline_fields = { namespace = true, inputs = true, outputs = true, parameters = true, tags = true }

function M.pipeline(spec, level)
  level = (level or 1) + 1
  if type(spec) ~= "table" or M.is_node(spec) or M.is_pipeline(spec) then spec = { spec } end
  for k in pairs(spec) do           -- the items are spec's list part (ipairs)
    if type(k) ~= "number" and not pipeline_fields[k] then
      util.fail(level, "pipeline: unknown option '%s'%s", tostring(k),
                util.did_you_mean(tostring(k), util.sorted_keys(pipeline_fields)))
    end
  end
  local nodes = {}
  collect(spec, nodes, 0, {}, level)
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
