-- flow.pipeline: node{...}, pipeline{...} (nesting, namespace, remapping,
-- + and -) and the registry of named pipelines.  Everything here is plain
-- description; flow.runner turns it into a DAG.
local core = require("flow.core")
local dag = require("flow.dag")
local util = require("flow.util")
local command = require("flow.command")
local distributed = require("flow.distributed")

local M = {}
-- A node is a read-only handle on its record in C (lua/node_decl.c): its
-- fields (name, where, kind, inputs, outputs, tags, fn, cmd, ...) are made
-- from the record when read.
local Node = { __name = "flow.node" }
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
  local t = c_tags(tags, "pipeline", level + 1)
  return t
end

-- new_store(): the nodes declared from now on have records of their own,
-- which go when the last of those nodes does (a script's load starts one,
-- so a REPL's reloads do not pile records up).
M.new_store = pipeline_c.new_store

-- io_datasets(n, outputs): n's input (or output) dataset names, a new list;
-- has_arg(n, outputs, key): whether one of them is named key.  From the
-- record, for the checks that walk every command step (n.inputs would make
-- lists that stay with the node).  io_names(nodes, indices, which): the
-- datasets the steps nodes[i] read ("inputs"), write ("outputs") or both
-- ("all"), each once, in the order first met: one list for a whole check.
M.io_datasets = pipeline_c.io_datasets
M.io_names = pipeline_c.io_names
-- data_file_clash(nodes, commands, skip) -> nil or file, first, second: the
-- first file in .flow/data that two datasets of the command steps would
-- both be kept at (plan.lua's check_paths, with a catalog without patterns;
-- lua/data_files.c).
M.data_file_clash = pipeline_c.data_file_clash
-- command_refs(nodes, commands) -> wrong, params, credentials: of the
-- command steps nodes[i] (i in `commands`), the first whose template strings
-- have a ${inputs.x}/${outputs.y} naming nothing or a malformed reference
-- (nil if none), and the lists of those with a ${params.…} reference and of
-- those with "${credentials." (lua/command_refs.c).
M.command_refs = pipeline_c.command_refs
M.has_arg = pipeline_c.has_arg

local first_hole = pipeline_c.first_hole
local take_nodes = pipeline_c.bind_take_nodes(Node)
local new_names = pipeline_c.names     -- by_name below: a map by name id (lua/name_map.c), not a table
local unknown_key = pipeline_c.unknown_key
local derive = pipeline_c.bind_derive(Node)
local same_decl = pipeline_c.same_decl

-- Copy of node `n` with datasets and name renamed by `rename(dataset)`, and
-- the fields of `changes` (derive's, a table of the caller's) set.
local function renamed(n, rename, prefix, changes)
  local inputs, outputs = {}, {}
  for i, io in ipairs(n.inputs) do inputs[i] = { arg = io.arg, dataset = rename(io.dataset) } end
  for i, io in ipairs(n.outputs) do outputs[i] = { arg = io.arg, dataset = rename(io.dataset) } end
  changes.inputs, changes.outputs = inputs, outputs
  if prefix then
    changes.name = prefix .. "." .. n.name
    changes.namespace = n.namespace and (prefix .. "." .. n.namespace) or prefix   -- outer.inner, for flow viz
  end
  changes.origin = n.origin or n
  return derive(n, changes)
end

-- A remap option: {"a", "b"} keeps those names, {a = "x"} renames a to x.
local function parse_remap(v, what, level)
  local map = {}
  if v == nil then return map end
  if type(v) == "string" then v = { v } end
  if type(v) ~= "table" then util.fail(level + 1, "pipeline: %s must be a list or a map of dataset names", what) end
  local hole = first_hole(v)
  if hole then util.fail(level + 1, "pipeline: %s[%d] is nil (a misspelt or unset variable?)", what, hole) end
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

-- The parameter keys step n reads, added to `out` (returned) as key = the
-- input that names it ("params:key"; "parameters", the whole tree, is its
-- own key): its "params:" inputs, its command's ${params.} references and
-- its distributed_job counts.
function M.params_read(n, out)
  for _, io in ipairs(n.inputs) do
    local key = dag.is_param_input(io.dataset)
    if key then out[key == true and io.dataset or key] = io.dataset end
  end
  if n.kind == "command" then
    for _, s in ipairs(command.template_strings(n.cmd)) do
      for _, ref in ipairs(core.template_refs(s)) do
        if ref[1] == "params" then
          local key = M.command_param(n, ref[2])
          out[key] = "params:" .. key
        end
      end
    end
  end
  local d = n.dist
  if d then
    for _, ref in ipairs({ d.num_nodes_ref or false, d.processes_per_node_ref or false }) do
      if ref then out[dag.is_param_input(ref)] = ref end
    end
  end
  return out
end

-- The key in `read` (params_read's) that overlaps parameter `key`: the key
-- itself, a table holding it, a part of it, or the whole tree
-- ("parameters"); nil when the step reads none of it.
function M.param_read(read, key)
  for k, input in pairs(read) do
    if dag.is_param_input(input) == true or k == key or key:sub(1, #k + 1) == k .. "." or k:sub(1, #key + 1) == key .. "." then
      return k
    end
  end
end

-- Kedro's rules for pipeline{}'s mappings, each culprit named: a mapped
-- name must be one the wrapped pipeline has; `inputs =` names its free
-- inputs (not a parameter, not what one of its steps makes); `outputs =`
-- names what its steps make; `parameters =` what its steps read.  A
-- misspelt mapping would otherwise leave a different graph than the one
-- meant, silently.
local function check_remaps(nodes, inputs, outputs, params, level)
  local made, free, read = {}, {}, {}
  for _, n in ipairs(nodes) do
    for _, io in ipairs(n.outputs) do made[io.dataset] = n.name end
  end
  for _, n in ipairs(nodes) do
    for _, io in ipairs(n.inputs) do
      local d = io.dataset
      if not made[d] and not dag.is_param_input(d) then free[d] = true end
    end
    M.params_read(n, read)
  end
  local problems = {}
  local function problem(fmt, ...) problems[#problems + 1] = string.format(fmt, ...) end
  for _, k in ipairs(util.sorted_keys(inputs)) do
    if dag.is_param_input(k) then
      problem("inputs: '%s' is a parameter: map parameters with parameters = {...}", k)
    elseif made[k] then
      problem("inputs: '%s' is made by step '%s' inside this pipeline, so it is not one of its inputs "
              .. "(expose or rename it with outputs = {...})", k, made[k])
    elseif not free[k] then
      problem("inputs: the pipeline reads no dataset '%s'%s", k, util.did_you_mean(k, util.sorted_keys(free)))
    end
  end
  for _, k in ipairs(util.sorted_keys(outputs)) do
    if dag.is_param_input(k) then
      problem("outputs: '%s' is a parameter, and parameters are read-only", k)
    elseif free[k] then
      problem("outputs: '%s' is an input of this pipeline, which none of its steps makes "
              .. "(rename it with inputs = {...})", k)
    elseif not made[k] then
      problem("outputs: no step of the pipeline makes '%s'%s", k, util.did_you_mean(k, util.sorted_keys(made)))
    end
  end
  for _, k in ipairs(util.sorted_keys(params)) do
    if dag.is_param_input(k) == true and params[k] ~= k then   -- "parameters", the whole tree
      problem("parameters: 'parameters' (the whole tree) cannot be renamed; map its keys one by one")
    elseif not read[k] then
      problem("parameters: no step of the pipeline reads parameter '%s'%s", k,
              util.did_you_mean(k, util.sorted_keys(read)))
    end
  end
  if #problems == 1 then util.fail(level + 1, "pipeline: %s", problems[1]) end
  if #problems > 1 then
    util.fail(level + 1, "pipeline: %d of its mappings do not fit the pipeline it wraps:\n  %s", #problems,
              table.concat(problems, "\n  "))
  end
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
    local changes = {}
    if n.kind == "command" then changes.cmd_params = command_params(n, rename_param) end
    local d = n.dist
    if d and (d.num_nodes_ref or d.processes_per_node_ref) then   -- its counts read parameters too
      local dist = {}
      for k, v in pairs(d) do dist[k] = v end
      dist.num_nodes_ref = d.num_nodes_ref and rename(d.num_nodes_ref)
      dist.processes_per_node_ref = d.processes_per_node_ref and rename(d.processes_per_node_ref)
      changes.dist = dist
    end
    out[i] = renamed(n, rename, ns, changes)
  end
  return out
end

-- Whether a and b are equal as plain data (functions and userdata by
-- identity, tables field by field, metatables by identity).
local function same_value(a, b)
  if rawequal(a, b) then return true end
  if type(a) ~= "table" or type(b) ~= "table" or getmetatable(a) ~= getmetatable(b) then return false end
  for k, v in pairs(a) do
    if not same_value(v, rawget(b, k)) then return false end
  end
  for k in pairs(b) do
    if rawget(a, k) == nil then return false end
  end
  return true
end

-- Node identity: Kedro's (the name, inputs and outputs) and, since flow
-- runs what it is given, the same body and settings.  Where each was
-- written does not count, nor do tags (the step kept carries both sets).
-- The record's fields are compared in C; the Lua values here.
local function same_step(a, b)
  if rawequal(a, b) then return true end
  return same_decl(a, b) and same_value(a.fn, b.fn) and same_value(a.cmd, b.cmd)
     and same_value(a.dist, b.dist) and same_value(a.cmd_params, b.cmd_params)
end

-- Step n with `tags` added to its own (n itself when it has them all).
local function with_tags(n, tags)
  local have, extra = {}, {}
  for _, t in ipairs(n.tags) do have[t] = true end
  for _, t in ipairs(tags) do
    if not have[t] then have[t] = true; extra[#extra + 1] = t end
  end
  if #extra == 0 then return n end
  local tags = { table.unpack(n.tags) }
  for _, t in ipairs(extra) do tags[#tags + 1] = t end
  return derive(n, { tags = tags, origin = n.origin or n })
end

-- How item i of a list is named in errors: "item 3", "item 2 of item 3".
local function item_name(i, path)
  return path and string.format("item %d of %s", i, path) or string.format("item %d", i)
end

-- Appends step n to out[1 .. count] unless it is there already (the same
-- node, or an identical step: see same_step); returns the new count.
-- `by_name` maps the names in `out` to their positions.  Two different
-- steps with one name are both kept: the graph reports them with the
-- lines that declared each.
local function add_step(n, out, count, by_name)
  local name = n.name
  local at = by_name[name]
  if at and same_step(out[at], n) then
    out[at] = with_tags(out[at], n.tags)
    return count
  end
  count = count + 1
  out[count] = n
  if not at then by_name[name] = count end
  return count
end

-- Appends the nodes of the list `nodes` as add_step does: runs of nodes with
-- names not met yet in C (take_nodes), the others one by one.
local function add_steps(nodes, out, count, by_name)
  local j = 0
  while true do
    count, j = take_nodes(nodes, j + 1, out, count, by_name)
    local n = nodes[j]
    if n == nil then return count end
    count = add_step(n, out, count, by_name)
  end
end

-- Appends the steps of `items` (flattened, each once) to out[count + 1 ...];
-- returns the new count.  A nil among the items is an error naming its
-- position: ipairs would stop there and drop the items after it.
local function collect(items, out, count, by_name, level, path)
  local hole = first_hole(items)
  if hole then
    util.fail(level + 1, "pipeline: %s is nil (a misspelt or unset variable?)", item_name(hole, path))
  end
  local i = 0
  while true do
    count, i = take_nodes(items, i + 1, out, count, by_name)    -- the common case, in C: 100,000 steps pass there
    local item = items[i]
    if item == nil then break end
    local class = getmetatable(item)
    if class == Node then
      count = add_step(item, out, count, by_name)
    elseif class == Pipeline then
      count = add_steps(item.nodes, out, count, by_name)     -- (a pipeline of pipelines: their nodes in C too)
    elseif type(item) == "table" and not class and (util.is_list(item) or first_hole(item)) then
      count = collect(item, out, count, by_name, level + 1, item_name(i, path))
    else
      util.fail(level + 1, "pipeline: %s is a %s, not a node or a pipeline", item_name(i, path), type(item))
    end
  end
  return count
end

local pipeline_fields = { namespace = true, inputs = true, outputs = true, parameters = true, tags = true }

-- pipeline{...} with the user's frame at `level` (1: compose's caller).
local function compose(spec, level)
  level = (level or 1) + 1
  if type(spec) ~= "table" or M.is_node(spec) or M.is_pipeline(spec) then spec = { spec } end
  local k = unknown_key(spec, pipeline_fields)       -- the items are spec's list part
  if k ~= nil then
    util.fail(level, "pipeline: unknown option '%s'%s", tostring(k),
              util.did_you_mean(tostring(k), util.sorted_keys(pipeline_fields)))
  end
  local nodes = {}
  collect(spec, nodes, 0, new_names(), level)
  if spec.namespace ~= nil and (type(spec.namespace) ~= "string" or spec.namespace == "") then
    util.fail(level, "pipeline: namespace must be a non-empty string")
  end
  if spec.namespace then check_name(spec.namespace, "pipeline: namespace", level) end
  if spec.namespace or spec.inputs or spec.outputs or spec.parameters then
    local inputs, outputs = parse_remap(spec.inputs, "inputs", level), parse_remap(spec.outputs, "outputs", level)
    local params = strip_params(parse_remap(spec.parameters, "parameters", level))
    if next(inputs) or next(outputs) or next(params) then check_remaps(nodes, inputs, outputs, params, level) end
    nodes = namespaced(nodes, spec.namespace, inputs, outputs, params)
  end
  if spec.tags ~= nil then
    local extra = parse_tags(spec.tags, level)
    for i, n in ipairs(nodes) do nodes[i] = with_tags(n, extra) end
  end
  return setmetatable({ nodes = nodes }, Pipeline)
end

-- pipeline{a, b} or pipeline(p): one table of nodes and pipelines (or one
-- of them).  No argument, or nil, is a mistake (a misspelt variable), not an
-- empty pipeline: pipeline{} is that.  The entry is C (l_pipeline.c says
-- why); it calls compose.
M.pipeline = pipeline_c.bind_pipeline(compose)

local function as_pipeline(v)
  if M.is_pipeline(v) then return v end
  if M.is_node(v) then return setmetatable({ nodes = { v } }, Pipeline) end
  error(string.format("cannot combine a pipeline with a %s", type(v)), 3)
end

function Pipeline.__add(a, b)
  local p = compose({ as_pipeline(a), as_pipeline(b) }, 2)
  return p
end

-- a & b: the steps of a that b has too (the same step, by node identity).
function Pipeline.__band(a, b)
  a, b = as_pipeline(a), as_pipeline(b)
  local in_b = {}
  for _, n in ipairs(b.nodes) do in_b[n.name] = n end
  local keep = {}
  for _, n in ipairs(a.nodes) do
    local m = in_b[n.name]
    if m and same_step(m, n) then keep[#keep + 1] = n end
  end
  return setmetatable({ nodes = keep }, Pipeline)
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

Pipeline.__bor = Pipeline.__add    -- a | b: the union, as a + b

function Pipeline.__len(p) return #p.nodes end
Node.__add = Pipeline.__add
Node.__sub = Pipeline.__sub
Node.__band = Pipeline.__band
Node.__bor = Pipeline.__bor

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
  if M.is_node(p) then p = as_pipeline(p) end
  if not M.is_pipeline(p) then util.fail(level, "flow.register: %q is not a pipeline", name) end
  M.registry[name] = p
  return p
end

return M
