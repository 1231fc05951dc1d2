-- flow.plan: everything a run or a listing needs before any step runs —
-- the configuration, the catalog, each distributed step's resolved counts,
-- the graph, the selection (slicing), and every check that must stop a run
-- before it starts (missing inputs and parameters, template references,
-- shared paths, pools), each with the step's file:line.
local core = require("flow.core")
local command = require("flow.command")
local dag = require("flow.dag")
local sched = require("flow.sched")
local util = require("flow.util")
local pipeline = require("flow.pipeline")
local params_mod = require("flow.params")
local settings_mod = require("flow.settings")
local launch = require("flow.launch")
local catalog = require("flow.catalog")
local cache = require("flow.cache")
local remote_mod = require("flow.remote")

local M = {}

local DATA = require("flow.values").DATA

local graph_error = util.setup_error

-- A distributed step's counts for this run: "params:" references resolved
-- in the run's environment and checked by the rule distributed_job{} checks
-- a literal count by (dag.dist_count).
local function resolve_count(n, what, value, ref, settings)
  if not ref then return value end
  local key = dag.is_param_input(ref)
  local v = params_mod.get(settings, key)
  if v == nil then
    local set_at = settings.cfg and settings.cfg:origin("parameters", key)    -- (null: set, but no value)
    if set_at then
      graph_error(string.format("step '%s' (%s): %s = \"%s\" but parameter '%s' is null in environment '%s' "
        .. "(set at %s); give it a value", n.name, n.where, what, ref, key, settings.env, set_at))
    end
    local near = settings_mod.closest_param(settings, key)
    if near == key then near = nil end
    graph_error(string.format("step '%s' (%s): %s = \"%s\" but parameter '%s' is not defined in environment '%s'%s",
      n.name, n.where, what, ref, key, settings.env, near and (" (did you mean '" .. near .. "'?)") or ""))
  end
  local count, rule = dag.dist_count(what, v)
  if not count then
    local origin = settings.cfg:origin("parameters", key)
    graph_error(string.format("step '%s' (%s): %s = \"%s\" is %s in environment '%s'%s; it must be %s",
      n.name, n.where, what, ref, type(v) == "string" and string.format("%q", v) or params_mod.text(v), settings.env,
      origin and (" (set in " .. origin .. ")") or "", rule))
  end
  return count
end

function M.resolve_dist(n, settings)
  local d = n.dist
  if not d then return nil end
  return {
    framework = d.framework,
    num_nodes = resolve_count(n, "num_nodes", d.num_nodes, d.num_nodes_ref, settings),
    processes_per_node = resolve_count(n, "processes_per_node", d.processes_per_node,
                                       d.processes_per_node_ref, settings),
    parameter_server_count = d.parameter_server_count,
    num_nodes_ref = d.num_nodes_ref, processes_per_node_ref = d.processes_per_node_ref,
  }
end

-- --distributed=local starts every rank of a selected distributed step that
-- runs here (not on Azure ML) on this machine: a count fit for a cluster may
-- be too many processes for one machine (dag.check_local says).
local function check_local_ranks(nodes, distributed, dists, selected, remote)
  for _, i in ipairs(distributed) do
    local d = dists[i]
    if (not selected or selected[i]) and not remote[i] then
      local err = dag.check_local(d.num_nodes, d.processes_per_node, d.parameter_server_count)
      if err then graph_error(string.format("step '%s' (%s): %s", nodes[i].name, nodes[i].where, err)) end
    end
  end
end

-- joined({"'a'", "'b'", "'c'"}, "and") -> "'a', 'b' and 'c'"
local function joined(items, word)
  local last = items[#items]
  return #items > 1 and table.concat(items, ", ", 1, #items - 1) .. " " .. word .. " " .. last or last
end

-- The graph's "two steps are named 'x'" (`msg`), completed with every name
-- that more than one step has and the script lines that declared each.
local function name_clashes(nodes, msg)
  local at, order = {}, {}
  for _, n in ipairs(nodes) do
    local list = at[n.name]
    if not list then list = {}; at[n.name] = list; order[#order + 1] = n.name end
    list[#list + 1] = n.where
  end
  local clashes = {}
  for _, name in ipairs(order) do
    if #at[name] > 1 then clashes[#clashes + 1] = string.format("'%s' at %s", name, joined(at[name], "and")) end
  end
  if #clashes == 1 then return msg .. "\n  declared at " .. joined(at[msg:match("^two steps are named '(.-)'")], "and") end
  return string.format("%d step names are used by more than one step (step names must be unique: give "
                       .. "one of each name = \"...\"):\n  %s", #clashes, table.concat(clashes, "\n  "))
end

-- The plain data the C graph is built from.
function M.build_graph(nodes, dists, declared)
  -- the nodes as they are (no copy per step); dists[i] is node i's resolved dist
  local ok, g = pcall(dag.build, nodes, declared or {}, dists or {})
  if not ok then
    local msg = tostring(g)
    if msg:match("^two steps are named '") then msg = name_clashes(nodes, msg) end
    graph_error(msg)
  end
  return g
end

-- Memoised for one prepare, by dataset name and by template string: most
-- names and template strings come up many times (a dataset in each step
-- that reads it; "${outputs.o}" in every command step).
-- params_of[d]: dag.is_param_input(d) (false, a key or true).
local function param_memo()
  return setmetatable({}, { __index = function(t, d)
    local k = dag.is_param_input(d)
    t[d] = k
    return k
  end })
end

-- templates[s]: {refs = core.template_refs(s), err = its error, params = whether a ref is ${params.…}}
local function template_memo()
  return setmetatable({}, { __index = function(t, s)
    local refs, err = core.template_refs(s)
    local v = { refs = refs, err = err, params = false }
    for _, ref in ipairs(refs) do if ref[1] == "params" then v.params = true end end
    t[s] = v
    return v
  end })
end

-- A parameter set to null (`seed: null`, `--params seed=null`) exists but has no value a
-- step could receive: say so, with where it was set, rather than "not defined".
local function check_param(n, key, settings)
  if params_mod.get(settings, key) ~= nil then return end
  local set_at = settings.cfg and settings.cfg:origin("parameters", key)
  if set_at then
    graph_error(string.format("step '%s' (%s) reads parameter '%s', which is null in environment '%s' (set at %s); give it a value",
      n.name, n.where, key, settings.env, set_at))
  end
  local near = settings_mod.closest_param(settings, key)
  if near == key then near = nil end
  graph_error(string.format("step '%s' (%s) reads parameter '%s', which is not defined in environment '%s'%s",
    n.name, n.where, key, settings.env, near and (" (did you mean '" .. near .. "'?)") or ""))
end

-- Every "params:" input and ${params.} reference must exist before anything runs.
-- (After the graph is built: a dataset some step produces is no parameter.)
-- `which`: the indices of the steps that can read one (commands, "params:" readers);
-- `refs`: pipeline.command_refs's answer (its .params: the command steps with
-- a ${params.} reference); `reads_params`: whether a step reads a "params:"
-- input (catalog_inputs found its readers).  Only those steps are looked at,
-- and the inputs only when one reads a parameter: each step in `which`
-- order, as the message names the first step found wanting.
local function check_params(nodes, which, settings, params_of, templates, produced, refs, reads_params)
  if not reads_params and #refs.params == 0 then return end
  local has_refs = {}
  for _, i in ipairs(refs.params) do has_refs[i] = true end
  for _, i in ipairs(which) do
    local n = nodes[i]
    if reads_params then
      for _, d in ipairs(pipeline.io_datasets(n, false)) do
        if not produced[d] then
          local key = params_of[d]
          if type(key) == "string" then check_param(n, key, settings) end
        end
      end
    end
    if has_refs[i] then
      for _, s in ipairs(command.template_strings(n.cmd)) do
        local t = templates[s]
        if t.params then
          for _, ref in ipairs(t.refs) do
            if ref[1] == "params" then check_param(n, pipeline.command_param(n, ref[2]), settings) end
          end
        end
      end
    end
  end
end

-- Every ${inputs.x} / ${outputs.y} in a command must name one of its step's
-- inputs or outputs, and every reference must be well formed: checked with the
-- graph, so a typo stops the run before any step starts.
local TEMPLATE_NAMESPACES = { "inputs", "outputs", "params" }

-- Raises for step n's first wrong reference, if it has one (prepare asks
-- for the first step pipeline.command_refs found wrong: the one whose
-- message this makes).
local function check_templates(n, templates)
  for _, s in ipairs(command.template_strings(n.cmd)) do
    local t = templates[s]
    for _, ref in ipairs(t.refs) do
      local ns, key = ref[1], ref[2]
      if (ns == "inputs" or ns == "outputs") and not pipeline.has_arg(n, ns == "outputs", key) then
        local list = ns == "inputs" and n.inputs or n.outputs
        local args = {}
        for _, io in ipairs(list) do args[io.arg] = true end
        local names = util.sorted_keys(args)
        local hint = util.did_you_mean(key, names)
        if hint == "" then
          hint = #names > 0 and string.format(" (its %s: %s)", ns, table.concat(names, ", "))
                 or string.format(" (it declares no %s)", ns)
        end
        graph_error(string.format("step '%s' (%s): ${%s.%s}: the step has no %s named '%s'%s", n.name, n.where,
          ns, key, ns == "inputs" and "input" or "output", key, hint))
      end
    end
    local err = t.err
    if err then
      local ns = err:match("^unknown reference '%${([^.}]*)%.")   -- template.c names the reference
      graph_error(string.format("step '%s' (%s): %s%s", n.name, n.where, err,
                                ns and util.did_you_mean(ns, TEMPLATE_NAMESPACES) or ""))
    end
  end
end

local run_fields = { jobs = true, keep_going = true, params = true, verbose = true, env = true,
                     nodes = true, from_nodes = true, to_nodes = true, tags = true,
                     from_inputs = true, to_outputs = true, namespace = true, distributed = true,
                     force = true, explain = true, resume = true, load_versions = true, detach = true,
                     name = true, sweep_job = true, started = true, label = true,
                     on_log = true, sweep_trials = true, command_line = true, keep_values = true }

local RUN_FIELD_TYPES = {
  name = { string = true, what = "a string" }, label = { string = true, what = "a string" },
  load_versions = { string = true, table = true, what = "dataset=version text or a table of them" },
  started = { ["function"] = true, what = "a function" }, on_log = { ["function"] = true, what = "a function" },
  resume = { table = true, what = "a table (as flow run --resume makes it)" },
  verbose = { boolean = true, what = "true or false" }, force = { boolean = true, what = "true or false" },
  explain = { boolean = true, string = true, what = "true, false or a step's name" },
  keep_going = { boolean = true, what = "true or false" }, detach = { boolean = true, what = "true or false" },
}

local function as_list(v, what, level)
  if v == nil then return nil end
  if type(v) == "string" then
    local t = {}
    for part in v:gmatch("[^,]+") do t[#t + 1] = part:match("^%s*(.-)%s*$") end
    return t
  end
  if not util.is_list(v) then util.fail(level + 1, "flow.run: %s must be a list of names", what) end
  return v
end

-- " (did you mean ...?)" for a name the pipeline does not have: the names
-- that end in ".<name>" (--nodes train where the step is eval.train), else
-- the closest by spelling.
local function suggestion(name, names)
  local suffix, hits = "." .. name, {}
  for _, c in ipairs(names) do
    if #c > #suffix and c:sub(-#suffix) == suffix then hits[#hits + 1] = string.format("'%s'", c) end
  end
  if #hits == 0 then return util.did_you_mean(name, names) end
  table.sort(hits)
  if #hits > 4 then hits = { hits[1], hits[2], hits[3], string.format("%d more", #hits - 3) } end
  return string.format(" (did you mean %s?)", joined(hits, "or"))
end

-- Stops the run naming every one of `missing` (with a suggestion each):
-- "<flag>: <what> 'a' (did you mean 'b'?), 'c' or 'd'".
local function unknown_names(flag, what, missing, names)
  local parts = {}
  for i, m in ipairs(missing) do parts[i] = string.format("'%s'%s", m, suggestion(m, names)) end
  graph_error(string.format("%s: %s %s", flag, what, joined(parts, "or")))
end

-- Slicing, as Kedro does it: every filter given selects a set of steps and
-- the run takes their intersection.  Returns a selected-flags list, or nil for all.
local function select_steps(nodes, g, opts, level)
  local index, names                 -- by name, and the names: only when a filter names steps
  local function step_indices(list, flag)
    if not index then
      index, names = {}, {}
      for i, n in ipairs(nodes) do index[n.name] = i; names[i] = n.name end
    end
    local out, missing = {}, {}
    for _, name in ipairs(list) do
      if index[name] then out[#out + 1] = index[name] else missing[#missing + 1] = name end
    end
    if #missing > 0 then unknown_names(flag, "no step named", missing, names) end
    return out
  end
  local function consumers_of(list, flag)
    local out, known = {}, {}
    for i, n in ipairs(nodes) do
      for _, io in ipairs(n.inputs) do
        known[io.dataset] = true
        for _, d in ipairs(list) do if io.dataset == d then out[#out + 1] = i end end
      end
    end
    local missing = {}
    for _, d in ipairs(list) do if not known[d] then missing[#missing + 1] = d end end
    if #missing > 0 then unknown_names(flag, "no step reads", missing, util.sorted_keys(known)) end
    return out
  end
  local function producers_of(list, flag)
    local out, missing = {}, {}
    for _, d in ipairs(list) do
      local p = g:producer(d)
      if p then out[#out + 1] = p else missing[#missing + 1] = d end
    end
    if #missing > 0 then
      local made = {}
      for _, n in ipairs(nodes) do for _, io in ipairs(n.outputs) do made[#made + 1] = io.dataset end end
      unknown_names(flag, "no step produces", missing, made)
    end
    return out
  end
  local sets = {}
  local v = as_list(opts.nodes, "nodes", level + 1)
  if v then local t = {} for _, i in ipairs(step_indices(v, "--nodes")) do t[i] = true end sets[#sets + 1] = t end
  v = as_list(opts.from_nodes, "from_nodes", level + 1)
  if v then sets[#sets + 1] = g:downstream(step_indices(v, "--from-nodes")) end
  v = as_list(opts.to_nodes, "to_nodes", level + 1)
  if v then sets[#sets + 1] = g:upstream(step_indices(v, "--to-nodes")) end
  v = as_list(opts.from_inputs, "from_inputs", level + 1)
  if v then sets[#sets + 1] = g:downstream(consumers_of(v, "--from-inputs")) end
  v = as_list(opts.to_outputs, "to_outputs", level + 1)
  if v then sets[#sets + 1] = g:upstream(producers_of(v, "--to-outputs")) end
  v = as_list(opts.tags, "tags", level + 1)
  if v then
    local t, wanted = {}, {}
    for _, tag in ipairs(v) do wanted[tag] = true end
    for i, n in ipairs(nodes) do
      for _, tag in ipairs(n.tags) do if wanted[tag] then t[i] = true end end
    end
    sets[#sets + 1] = t
  end
  v = as_list(opts.namespace, "namespace", level + 1)
  if v then                           -- Kedro's --namespace: the steps inside it (nested ones too)
    -- the namespaces each step is in: its own (n.namespace: "outer.inner") and those around it
    local t, found, spaces = {}, {}, {}
    local wanted = {}
    for _, ns in ipairs(v) do wanted[ns] = true end
    for i, n in ipairs(nodes) do
      local ns = n.namespace
      while ns do
        spaces[ns] = true
        if wanted[ns] then t[i], found[ns] = true, true end
        ns = util.parent_name(ns)
      end
    end
    local missing = {}
    for _, ns in ipairs(v) do if not found[ns] then missing[#missing + 1] = ns end end
    if #missing > 0 then
      unknown_names("--namespace", "no namespace named", missing, util.sorted_keys(spaces))
    end
    sets[#sets + 1] = t
  end
  if #sets == 0 then return nil end
  local selected, count = {}, 0
  for i = 1, #nodes do
    local keep = true
    for _, set in ipairs(sets) do if not set[i] then keep = false break end end
    selected[i] = keep
    if keep then count = count + 1 end
  end
  if count == 0 then
    graph_error("the selection (--nodes, --from-nodes, --to-nodes, --tags, --from-inputs, --to-outputs, --namespace) "
                .. "matches no step")
  end
  return selected
end

-- One pass over the steps for what the checks below need, so that each
-- visits only the steps it applies to (at 100,000 steps a pass over all of
-- them costs tens of milliseconds).  Returns a table:
--   produced     {dataset = the name of the step that outputs it}
--   pending      i1, d1, i2, d2, ...: each input (the step's index, the
--                dataset) that no earlier step produces, in step and input
--                order (for steps listed in run order: the raw inputs and
--                the parameters only)
--   commands, pooled, distributed, reporting: the indices of the command
--                steps, of the steps with a pool =, of those with a dist and
--                of those that report metrics (flow.metrics), in order
--   keepers      the indices of the steps that may keep their memory values
--                whatever their size (flow.values' Run:keeps_values)
local scan = dag.scan       -- (C, lua/l_dag.c: in Lua this loop took as long as building the graph)

-- The indices of two increasing lists, merged: increasing, each once.
local function merged(a, b)
  if #b == 0 then return a end
  if #a == 0 then return b end
  local out, i, j = {}, 1, 1
  while a[i] or b[j] do
    local x, y = a[i], b[j]
    if not y or (x and x < y) then out[#out + 1] = x; i = i + 1
    elseif not x or y < x then out[#out + 1] = y; j = j + 1
    else out[#out + 1] = x; i = i + 1; j = j + 1 end
  end
  return out
end

-- Catalog-persisted datasets that no step produces (the pipeline's raw
-- inputs): the graph accepts them as inputs from outside.
-- Also returns the steps that read a dataset no step produces, and the
-- indices of the steps that read a "params:" input.
local function catalog_inputs(nodes, sc, cat, params_of)
  local produced, pending = sc.produced, sc.pending
  local declared, seen, readers, param_readers = {}, {}, {}, {}
  for k = 1, #pending, 2 do
    local d = pending[k + 1]
    if not produced[d] then
      local key = params_of[d]
      if not key then
        local n = nodes[pending[k]]
        if readers[#readers] ~= n then readers[#readers + 1] = n end
        if not seen[d] then
          seen[d] = true
          if catalog.persisted(cat:entry(d)) then declared[#declared + 1] = d end
        end
      elseif type(key) == "string" and param_readers[#param_readers] ~= pending[k] then
        param_readers[#param_readers + 1] = pending[k]
      end
    end
  end
  return declared, readers, param_readers
end

-- Inputs that no step produces and the catalog does not declare, with the
-- steps that read them (file:line) and the closest dataset that does exist.
-- `free_readers`: catalog_inputs's steps that read a dataset no step
-- produces, in order (only they can read a missing one).
local function check_missing_inputs(free_readers, cat, produced, params_of)
  local missing, readers = {}, {}
  for _, n in ipairs(free_readers) do
    for _, io in ipairs(n.inputs) do
      local d = io.dataset
      if not produced[d] and not params_of[d] and not catalog.persisted(cat:entry(d)) then
        local r = readers[d]
        if not r then r = {}; readers[d] = r; missing[#missing + 1] = d end
        if r[#r] ~= n then r[#r + 1] = n end
      end
    end
  end
  if #missing == 0 then return end
  local known = util.sorted_keys(produced)
  for _, e in ipairs(cat:declared()) do
    if not produced[e.name] then known[#known + 1] = e.name end
  end
  local lines = {}
  for k, d in ipairs(missing) do
    if k > 20 then lines[#lines + 1] = string.format("  ... and %d more", #missing - 20) break end
    local who = {}
    for _, n in ipairs(readers[d]) do who[#who + 1] = string.format("'%s' (%s)", n.name, n.where) end
    lines[#lines + 1] = string.format("  '%s', needed by %s%s", d, table.concat(who, ", "), util.did_you_mean(d, known))
  end
  graph_error(string.format("%d input dataset%s that no step produces and the catalog does not declare:\n%s\n"
    .. "(add a step that outputs it, or declare it in conf/base/catalog.yml)", #missing, #missing == 1 and "" or "s",
    table.concat(lines, "\n")))
end

-- A catalog entry that no step of this pipeline (or of any registered one)
-- reads or writes is most likely a typo: a warning, once per entry and process.
local warned_unused = {}
local function warn_unused_entries(nodes, cat, params_of)
  if next(cat.exact) == nil then return end                  -- no entry to warn about
  local used, undeclared = {}, {}
  local function mark(list)
    for _, n in ipairs(list) do
      for _, io in ipairs(n.inputs) do used[io.dataset] = true end
      for _, io in ipairs(n.outputs) do used[io.dataset] = true end
    end
  end
  mark(nodes)
  for _, q in pairs(pipeline.registry) do mark(q.nodes) end
  for d in pairs(used) do
    if not cat:entry(d).declared and not params_of[d] then undeclared[#undeclared + 1] = d end
  end
  table.sort(undeclared)
  for _, e in ipairs(cat:declared()) do
    if not used[e.name] and not warned_unused[e.origin .. "\0" .. e.name] then
      warned_unused[e.origin .. "\0" .. e.name] = true
      core.ui_warn(string.format("%s: catalog entry '%s' is used by no step%s", e.origin, e.name,
                                 util.did_you_mean(e.name, undeclared)))
    end
  end
end

-- A path as one key: absolute, without "." or ".." segments or repeated '/'.
-- The absolute, normalised form of path, its directory part resolved as far
-- as it exists (realpath of the longest existing prefix: data/x and link/x,
-- where link -> data, are one file).  `dirs` memoises the resolved prefixes.
local function path_key(path, cwd, dirs)
  if path:sub(1, 1) ~= "/" then path = cwd .. "/" .. path end
  local parts = {}
  for seg in path:gmatch("[^/]+") do
    if seg == ".." then parts[#parts] = nil
    elseif seg ~= "." then parts[#parts + 1] = seg end
  end
  for k = #parts - 1, 1, -1 do
    local prefix = "/" .. table.concat(parts, "/", 1, k)
    local real = dirs[prefix]
    if real == nil then real = cache.realpath(prefix) or false; dirs[prefix] = real end
    if real then return (real == "/" and "" or real) .. "/" .. table.concat(parts, "/", k + 1) end
  end
  return "/" .. table.concat(parts, "/")
end

-- path_key, memoised by the path's directory part as written (most paths
-- share a handful of directories: .flow/data above all).  A path whose last
-- segment is a plain name has as its key its directory's key (path_key of
-- dir/x without the "/x") and "/" and that name; any other goes the long way.
local function path_keyer(cwd)
  local dirs, by_dir = {}, {}
  return function(path)
    local dir, base = path:match("^(.*/)([^/]+)$")
    if not dir then
      if path:find("/", 1, true) then return path_key(path, cwd, dirs) end   -- "data/out/"
      dir, base = "", path
    end
    if base == "." or base == ".." or base == "" then return path_key(path, cwd, dirs) end
    local k = by_dir[dir]
    if not k then
      k = path_key(dir .. "x", cwd, dirs)
      k = k:sub(1, -3)                               -- without its "/x"
      by_dir[dir] = k
    end
    return k .. "/" .. base
  end
end

-- Every dataset needs a place of its own, or two would overwrite each other:
-- two catalog entries with one path, or two datasets flow keeps in
-- .flow/data (a command's output "a.json" and a value "a" a command reads,
-- written as a.json).  Raises naming both.
local function check_paths(nodes, commands, cat, produced, project_files)
  local owner_d, owner_e, owner_path = {}, {}, {}   -- by key: the dataset stored there, its entry, its path
  local key_of, folders = path_keyer(core.cwd()), false
  local function who(d, e)
    return e.declared and string.format("catalog entry '%s' (%s)", d, e.origin)
           or string.format("dataset '%s'", d)
  end
  local function clash(o, oe, d, e, path)
    graph_error(string.format("%s and %s are both stored at %s: each dataset needs a path of its own",
                              who(o, oe), who(d, e), path))
  end
  local function claim(key, path, d, e)
    local o = owner_d[key]
    if o and o ~= d then clash(o, owner_e[key], d, e, path) end
    owner_d[key], owner_e[key], owner_path[key] = d, e, path
    if e.type == "folder" then folders = true end
  end
  for _, name in ipairs(util.sorted_keys(cat.exact)) do
    local e = cat.exact[name]
    if catalog.persisted(e) then claim(key_of(e.path), e.path, name, e) end
  end
  -- Only a pattern or a command gives a dataset a path not claimed above:
  -- a Lua step's memory values (most datasets, often) need no look.  A
  -- dataset's places depend only on its name and on whether a command reads
  -- or writes it (a command's are a superset of a Lua step's), so each name
  -- is placed once per kind: placed[d] is 1 (for a Lua step) or 2 (a command).
  -- A name the catalog neither declares nor can match is memory: MEMORY
  -- stands for its entry here, as cat:entry's would (no table per dataset).
  -- The datasets flow keeps in .flow/data are claimed by their file name
  -- there (no path built for each); they can meet the keys above only where
  -- a catalog path lies in .flow/data or a folder may hold it, and are then
  -- claimed as keys too.  core.safe_name never has a '/' nor a leading '.',
  -- so the key of DATA/<safe name> is the key of DATA's directory, "/" and
  -- the name.
  local patterns = #cat.patterns > 0
  local MEMORY = { type = "memory", declared = false }
  local data_owner, data_entry = {}, {}     -- by file name in .flow/data
  local function claim_data(file, d, e)
    local o = data_owner[file]
    if o and o ~= d then clash(o, data_entry[file], d, e, DATA .. "/" .. file) end
    data_owner[file], data_entry[file] = d, e
  end
  local placed, by_command = {}, nil       -- by_command: the commands' outputs, a set made when first asked
  local function place(d, command)
    if not by_command then
      by_command = {}
      for _, o in ipairs(pipeline.io_names(nodes, commands, "outputs")) do by_command[o] = true end
    end
    local want = command and 2 or 1
    if (placed[d] or 0) >= want then return end
    placed[d] = want
    if dag.is_param_input(d) then return end       -- (placed: asked once per name)
    local e = cat.exact[d] or (patterns and cat:entry(d)) or MEMORY
    if catalog.persisted(e) then
      if not cat.exact[d] then claim(key_of(e.path), e.path, d, e) end
    elseif by_command[d] then
      claim_data(core.safe_name(d), d, e)
    elseif command then
      local safe = core.safe_name(d)
      claim_data(safe .. ".json", d, e)
      claim_data(safe .. ".txt", d, e)
    end
  end
  local function place_all(n, command)
    for _, d in ipairs(pipeline.io_datasets(n, false)) do place(d, command) end
    for _, d in ipairs(pipeline.io_datasets(n, true)) do place(d, command) end
  end
  -- Whether a catalog path claimed so far lies in .flow/data or a folder
  -- may hold it: then the files there are claimed as keys too, below.
  local data_dir = key_of(DATA .. "/x"):sub(1, -3)
  local function meets()
    if folders then return true end
    for key in pairs(owner_d) do
      if key:sub(1, #data_dir + 1) == data_dir .. "/" then return true end
    end
    return false
  end
  local meet = false
  if patterns then
    for _, n in ipairs(nodes) do place_all(n, n.kind == "command") end
    meet = meets()
  elseif not meets() then     -- (claims nothing more but in .flow/data: the same rule, in C)
    local skip = {}
    for d, e in pairs(cat.exact) do skip[d] = catalog.persisted(e) or nil end
    local file, o, d = pipeline.data_file_clash(nodes, commands, skip)
    if file then clash(o, cat.exact[o] or MEMORY, d, cat.exact[d] or MEMORY, DATA .. "/" .. file) end
  else                        -- (each name once, in the order place_all would meet it)
    for _, d in ipairs(pipeline.io_names(nodes, commands, "all")) do place(d, true) end
    meet = true
  end
  if meet then
    for _, file in ipairs(util.sorted_keys(data_owner)) do
      claim(data_dir .. "/" .. file, DATA .. "/" .. file, data_owner[file], data_entry[file])
    end
  end
  -- A dataset inside another's path: committing the outer one (a rename
  -- over its path) would delete it.  A folder dataset holds it; a path of any
  -- other type names a directory by mistake (a text dataset at data/01_raw).
  -- And .flow/ is flow's own, but for the datasets it keeps in .flow/data.
  local flow_dir = key_of(".flow/x"):sub(1, -3)
  local keys = util.sorted_keys(owner_d)      -- (for both checks below)
  for _, key in ipairs(keys) do
    local mine = owner_e[key].uri or key:sub(1, #data_dir + 1) == data_dir .. "/"   -- (a datastore's copy is flow's)
    if not mine and (key == flow_dir or key:sub(1, #flow_dir + 1) == flow_dir .. "/") then
      graph_error(string.format("%s is stored at %s, inside .flow/, where flow keeps its own state; give it a "
        .. "path outside .flow/", who(owner_d[key], owner_e[key]), owner_path[key]))
    end
    local dir = key:match("^(.+)/[^/]*$")
    while dir do
      local outer = owner_d[dir]
      if outer and outer ~= owner_d[key] then
        local folder = owner_e[dir].type == "folder"
        graph_error(string.format("%s is stored at %s, inside the %s of %s (%s): committing %s would replace it; "
          .. "give each dataset a path outside the other's", who(owner_d[key], owner_e[key]), owner_path[key],
          folder and "folder" or "path", who(outer, owner_e[dir]), owner_path[dir],
          folder and "the folder" or "that " .. owner_e[dir].type .. " dataset"))
      end
      dir = dir:match("^(.+)/[^/]*$")
    end
  end
  -- The script and conf/ are the project's own: a step's output stored at
  -- either, inside conf/, or at a folder holding either, overwrites them.
  for _, f in ipairs(project_files) do
    local own = key_of(f.path)
    for _, key in ipairs(keys) do
      local d = owner_d[key]
      local how = key == own and "which is" or own:sub(1, #key + 1) == key .. "/" and "which holds"
                  or f.dir and key:sub(1, #own + 1) == own .. "/" and "inside"
      if how and produced[d] then
        graph_error(string.format("%s is stored at %s, %s %s (%s): step '%s' would overwrite it; give '%s' a "
          .. "path of its own", who(d, owner_e[key]), owner_path[key], how, f.what, f.path, produced[d], d))
      end
    end
  end
end

-- What no output may overwrite: the script that made the pipeline and the
-- configuration directory ({path =, what =, dir =}).
local function project_files(defaults)
  local files = {}
  if defaults.script then files[1] = { path = defaults.script, what = "the pipeline script" } end
  files[#files + 1] = { path = defaults.conf or "conf", what = "the configuration directory", dir = true }
  return files
end

-- A step's `pool =` must name a pool of flow.yml's `pools:` (or `local`).
local function check_pools(nodes, pooled, settings)
  local names = { ["local"] = true }
  for name in pairs(settings.pools or {}) do
    if name ~= "remote" then names[name] = true end
  end
  for _, i in ipairs(pooled) do
    local n = nodes[i]
    if not names[n.pool] then
      local known = util.sorted_keys(names)
      local why = n.pool == "remote" and "the remote pool is for steps a remote backend runs"
        or string.format("it is not defined in environment '%s'%s", settings.env,
                         util.did_you_mean(n.pool, known))
      graph_error(string.format("step '%s' (%s) asks for pool '%s', but %s; pools: %s (define one in "
        .. "conf/<env>/flow.yml, e.g. pools: {%s: 1})", n.name, n.where, n.pool, why, table.concat(known, ", "),
        n.pool == "remote" and "gpu" or n.pool))
    end
  end
end

-- sched.run's pools (name = size, 0 unbounded), the steps placed in a pool
-- other than their kind's ({[i] = name}) and the kinds' pools: a step's pool
-- is its own `pool =`, else `lua` for a Lua step and `local` for a command.  `local`
-- holds -j slots.  Lua steps have a pool of their own, as large: their code
-- runs on flow's one thread, so what the pool bounds is how many can wait at
-- once (on flow.sh, os.execute, a retry's back-off), and Lua steps neither
-- wait for command steps' slots nor take them.  `remote` (unbounded unless
-- flow.yml sizes it) is for steps a remote backend runs: their waits never
-- hold a local slot.
--
-- A running process holds about FILES_A_STEP descriptors (its output pipes,
-- its pidfd, its log): the sizes are kept to what `ulimit -n` allows, raised
-- as far as they need, so that -j 100000 lowers -j (and says so) rather than
-- failing a step with "Too many open files".
local FILES_A_STEP, FILES_KEPT = 4, 64
local KIND_POOLS = { command = "local", func = "lua" }   -- a step's pool when it names none (sched.run applies it)
function M.pools(plan, jobs)
  local sizes = { ["local"] = jobs, lua = jobs, remote = 0 }
  for name, size in pairs(plan.settings.pools or {}) do sizes[name] = size end
  -- of[i]: only the steps not in their kind's pool (sched.run places the
  -- others), counted out of it
  local nodes, of = plan.nodes, {}
  local steps = { [KIND_POOLS.command] = #plan.commands, [KIND_POOLS.func] = #nodes - #plan.commands }
  local function place(i, pool)
    local own = KIND_POOLS[nodes[i].kind]
    of[i], steps[own], steps[pool] = pool, steps[own] - 1, (steps[pool] or 0) + 1
  end
  for _, i in ipairs(plan.pooled) do place(i, nodes[i].pool) end
  for i in pairs(plan.remote) do
    if not nodes[i].pool then place(i, "remote") end
  end
  local at_once, total = {}, 0             -- how many steps each local pool may run at once
  for name, count in pairs(steps) do
    if name ~= "remote" and sizes[name] then
      at_once[name] = math.min(sizes[name], count)
      total = total + at_once[name]
    end
  end
  local limit = core.open_files(total * FILES_A_STEP + FILES_KEPT)
  local most = math.max(1, (limit - FILES_KEPT) // FILES_A_STEP)
  if total > most then
    core.ui_warn(string.format("ulimit -n allows %d open files, enough for %d steps running at once: -j (and "
      .. "any pool of flow.yml) is lowered to fit", limit, most))
    for name, n in pairs(at_once) do sizes[name] = math.max(1, n * most // total) end
  end
  return sizes, of, KIND_POOLS
end

-- {dataset = step name} of what the selected steps save (a version pinned
-- with --load-versions applies to what the run only loads: what an
-- unselected step saves, the run loads as the pinned version).
local function selected_outputs(nodes, selected, produced)
  if not selected then return produced end
  local out = {}
  for i, n in ipairs(nodes) do
    if selected[i] then
      for _, io in ipairs(n.outputs) do out[io.dataset] = n.name end
    end
  end
  return out
end

-- Everything a run or a listing needs before any step runs: the pipeline's
-- nodes, the configuration, the catalog, resolved distribution settings and
-- the graph.
function M.prepare(p, opts, defaults, level)
  level = (level or 1) + 1
  if pipeline.is_node(p) then p = pipeline.pipeline({ p }) end
  if not pipeline.is_pipeline(p) then util.fail(level, "flow.run: expected a pipeline, got %s", type(p)) end
  util.check_fields(opts, run_fields, "flow.run", level)
  if opts.params ~= nil and type(opts.params) ~= "table" then
    util.fail(level, "flow.run: params must be a table")
  end
  -- the options the run keeps or calls: a wrong type failed deep inside it
  for field, want in pairs(RUN_FIELD_TYPES) do
    local v = opts[field]
    if v ~= nil and not want[type(v)] then
      util.fail(level, "flow.run: %s must be %s, got %s", field, want.what, type(v))
    end
  end
  local jobs = opts.jobs and math.tointeger(opts.jobs)
  if opts.jobs ~= nil and (not jobs or jobs < 1 or jobs > sched.MAX_JOBS) then
    util.fail(level, "flow.run: jobs must be a whole number from 1 to %d, got %s", sched.MAX_JOBS, tostring(opts.jobs))
  end
  local settings = settings_mod.load { conf = defaults.conf, env = opts.env or defaults.env,
                                       params_spec = defaults.params_spec, params = opts.params }
  local load_versions = opts.load_versions or defaults.load_versions
  if type(load_versions) ~= "table" then load_versions = catalog.parse_load_versions(load_versions) end
  local started = core.time()
  local cat = catalog.new(settings, { load_versions = load_versions, save_version = catalog.save_stamp(started) })
  local nodes = p.nodes
  local sc = scan(nodes)
  local dists = {}
  for _, i in ipairs(sc.distributed) do dists[i] = M.resolve_dist(nodes[i], settings) end
  local params_of, templates = param_memo(), template_memo()
  local produced = sc.produced
  local declared, free_readers, param_readers = catalog_inputs(nodes, sc, cat, params_of)
  check_missing_inputs(free_readers, cat, produced, params_of)
  check_paths(nodes, sc.commands, cat, produced, project_files(defaults))
  local g = M.build_graph(nodes, dists, declared)
  local refs = {}
  refs.wrong, refs.params, refs.credentials = pipeline.command_refs(nodes, sc.commands)
  check_params(nodes, merged(sc.commands, param_readers), settings, params_of, templates, produced, refs,
               #param_readers > 0)
  check_pools(nodes, sc.pooled, settings)
  if refs.wrong then check_templates(nodes[refs.wrong], templates) end
  local selected = select_steps(p.nodes, g, opts, level)
  cat:check_load_versions(selected_outputs(nodes, selected, produced))
  local mode = opts.distributed or defaults.distributed
  if not mode and settings.cfg then mode = settings.cfg:get("flow", "distributed") end
  mode = mode or "once"
  if not launch.MODES[mode] then
    graph_error(string.format("distributed must be 'once' (run a distributed step once, the default) or 'local' "
      .. "(launch all its ranks here), got '%s' (from %s)", tostring(mode),
      (opts.distributed or defaults.distributed) and "--distributed" or
      (settings.cfg:origin("flow", "distributed") or "conf/<env>/flow.yml")))
  end
  warn_unused_entries(p.nodes, cat, params_of)
  local remote, aml, on_datastore = remote_mod.plan(nodes, settings, dists, cat, defaults)
  if mode == "local" then check_local_ranks(nodes, sc.distributed, dists, selected, remote) end
  return { nodes = p.nodes, settings = settings, dists = dists, graph = g, selected = selected,
           mode = mode, cat = cat, started = started, free_readers = free_readers, remote = remote, aml = aml,
           on_datastore = on_datastore, reporting = sc.reporting, keepers = sc.keepers, commands = sc.commands,
           pooled = sc.pooled, credential_readers = refs.credentials }
end

return M
