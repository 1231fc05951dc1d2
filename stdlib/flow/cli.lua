-- flow.cli: the command line.  main(args) returns the exit status:
-- 0 success, 1 a step failed, 2 usage/script/graph error, 130 interrupted.
local core = require("flow.core")
local util = require("flow.util")
local pipeline = require("flow.pipeline")
local runner = require("flow.runner")
local distributed = require("flow.distributed")

local M = {}

local USAGE = [[
usage: flow <command> [options]

commands:
  run [SCRIPT]     run a pipeline (default script: ./pipeline.lua)
  list [SCRIPT]    show the steps in run order: inputs, outputs, tags, distribution
  config [KEY]     print the resolved configuration of an environment, or explain a key
  help [COMMAND]   show help for a command

options:
  -h, --help       show help
  --version        print the version

Run 'flow COMMAND --help' for a command's options.]]

local HELP = {
  run = [[
usage: flow run [SCRIPT] [options]

Runs the pipeline that SCRIPT returns (default: pipeline.lua in the current
directory; a directory means DIR/pipeline.lua).  Commands and relative paths
are resolved from the script's directory; state lives in its .flow/.

options:
  -e, --env ENV      configuration environment: conf/base + conf/ENV
                     (default: $FLOW_ENV, else local)
  -p, --params K=V,… override parameters: a.b=1,c=x,d=true,e=null,f=[1,2],g="a, b"
  --conf DIR         configuration directory (default: conf/ beside the script)
  --pipeline NAME    run the pipeline registered as NAME (default: __default__)
  --nodes A,B        only these steps            --from-nodes A   these and all downstream
  --to-nodes B       these and all upstream      --tags T1,T2     steps with any of the tags
  --from-inputs X    steps reading X, and downstream
  --to-outputs Y     steps producing Y, and upstream
                     (several selections intersect; inputs from unselected steps must
                     have a saved copy in .flow/data/)
  -j, --jobs N       run at most N steps at once (default: number of CPUs)
  --distributed MODE once (default): a distributed_job step runs once, normally;
                     local: it runs as num_nodes x processes_per_node local
                     processes with the variables Azure ML sets (also
                     `distributed: local` in conf/<env>/flow.yml)
  -k, --keep-going   after a failure, still run every step that does not depend on it
  -n, --dry-run      print the steps that would run, in order, and stop
  -v, --verbose      stream each command's output, prefixed with its step name
  -q, --quiet        print only errors
  --progress MODE    auto (default: live on a terminal), live, or plain (a line
                     per step state change)

exit status: 0 success, 1 a step failed, 2 usage, script or graph error,
130 interrupted.]],
  list = [[
usage: flow list [SCRIPT] [options]

Prints the steps in run order with their inputs, outputs, tags, where each
would run and its distribution settings.

options:
  -e, --env ENV      resolve "params:" counts in this environment
  -p, --params K=V,… override parameters
  --conf DIR         configuration directory (default: conf/ beside the script)
  --pipeline NAME    list the pipeline registered as NAME
  --format FMT       table (default) or json]],
  config = [[
usage: flow config [KEY] [options]

Prints the configuration of an environment as YAML, after merging conf/base
with conf/ENV, applying --params and interpolating ${env:}, ${globals:} and
${params:}.  Credentials are always masked.  KEY is a dotted key; its first
part may name a section (parameters, catalog, azureml, credentials, globals,
flow), else it is a parameter.

options:
  -e, --env ENV        environment (default: $FLOW_ENV, else local)
  -p, --params K=V,…   override parameters
  --conf DIR           configuration directory (default: ./conf)
  --explain KEY        say which file and line set KEY, and what it overrode]],
}

-- Thrown for usage errors: printed with a hint, exit 2.
local function usage_error(fmt, ...)
  error({ usage = string.format(fmt, ...) }, 0)
end

local CONFIG_OPTIONS = { env = "value", e = "env", params = "value", p = "params", conf = "value" }

local function with_config(t)
  for k, v in pairs(CONFIG_OPTIONS) do t[k] = v end
  t.help, t.h = "flag", "help"
  return t
end

local OPTIONS = {
  run = with_config { pipeline = "value", jobs = "value", j = "jobs", ["keep-going"] = "flag",
                      k = "keep-going", ["dry-run"] = "flag", n = "dry-run", verbose = "flag",
                      v = "verbose", quiet = "flag", q = "quiet", progress = "value",
                      nodes = "value", ["from-nodes"] = "value", ["to-nodes"] = "value",
                      tags = "value", ["from-inputs"] = "value", ["to-outputs"] = "value",
                      distributed = "value" },
  list = with_config { pipeline = "value", format = "value" },
  config = with_config { explain = "value" },
  __step = with_config {},
}

-- Parse args for `cmd`: returns options table and positional list.
local function parse_args(cmd, args)
  local spec, opts, pos = OPTIONS[cmd], {}, {}
  local i = 1
  while i <= #args do
    local a = args[i]
    local name, value
    if a == "--" then
      for k = i + 1, #args do pos[#pos + 1] = args[k] end
      break
    elseif a:match("^%-%-") then
      name, value = a:match("^%-%-([^=]+)=(.*)$")
      name = name or a:sub(3)
    elseif a:match("^%-.") then
      name = a:sub(2, 2)
      if #a > 2 then value = a:sub(3) end
    else
      pos[#pos + 1] = a
    end
    if name then
      local kind = spec[name]
      if kind and kind ~= "flag" and kind ~= "value" then name, kind = kind, spec[kind] end
      if not kind then
        local long = {}
        for k, v in pairs(spec) do if #k > 1 and (v == "flag" or v == "value") then long[#long + 1] = k end end
        usage_error("unknown option '%s' for 'flow %s'%s", a, cmd,
                    util.did_you_mean(name, long):gsub("'(.-)'", "'--%1'", 1))
      end
      if kind == "value" then
        if not value then
          i = i + 1
          value = args[i]
          if not value then usage_error("option '%s' needs a value", a) end
        end
        opts[name] = value
      else
        if value then usage_error("option '%s' takes no value", a) end
        opts[name] = true
      end
    end
    i = i + 1
  end
  return opts, pos
end

local function script_path(pos, cmd)
  if #pos > 1 then usage_error("'flow %s' takes one script, got %d arguments", cmd, #pos) end
  local path = pos[1] or "pipeline.lua"
  if core.exists(path) == "directory" then path = path:gsub("/+$", "") .. "/pipeline.lua" end
  if not core.exists(path) then
    if pos[1] then usage_error("no such script: %s", path) end
    usage_error("no pipeline.lua in %s (pass the script: flow %s path/to/pipeline.lua)", core.cwd(), cmd)
  end
  return path
end

local function script_error(msg)
  error({ script = msg }, 0)
end

-- The configuration choices of the command line, for every run the script makes.
local function set_defaults(opts)
  if opts.env == "" then usage_error("--env needs an environment name") end
  runner.defaults = { env = opts.env, params_spec = opts.params, conf = opts.conf,
                      distributed = opts.distributed }
end

-- Load the script, run its top level, return the chosen pipeline.
local function load_pipeline(path, name)
  local dir, base = path:match("^(.*)/([^/]*)$")
  local chunk, err = core.load_script(path, path)
  if not chunk then script_error(err) end
  if dir and dir ~= "" then core.chdir(dir) end
  runner.defaults.script = base or path
  local flow = require("flow")
  for _, k in ipairs({ "node", "pipeline", "distributed_job", "Framework" }) do _G[k] = flow[k] end
  _G.flow = flow
  _G.print = M.print
  local runs_before = runner.runs_started
  local ok, ret = xpcall(chunk, function(e) return debug.traceback(tostring(e), 2) end)
  if not ok then script_error(util.user_traceback(ret)) end
  if ret ~= nil then
    if pipeline.is_node(ret) then ret = pipeline.pipeline({ ret }) end
    if not pipeline.is_pipeline(ret) then
      script_error(string.format("%s returned a %s; a pipeline script returns pipeline{...}", path, type(ret)))
    end
    if pipeline.registry.__default__ and pipeline.registry.__default__ ~= ret then
      script_error(string.format("%s both returns a pipeline and registers '__default__'; keep one", path))
    end
    pipeline.registry.__default__ = ret
  end
  local want = name or "__default__"
  local p = pipeline.registry[want]
  if not p then
    local names = util.sorted_keys(pipeline.registry)
    if #names == 0 then
      if runner.runs_started ~= runs_before then return nil end      -- a driver script that ran its own pipelines
      script_error(string.format("%s defines no pipeline: end it with 'return pipeline{...}' or call flow.register(name, p)", path))
    end
    usage_error("no pipeline named '%s' in %s; it has: %s", want, path, table.concat(names, ", "))
  end
  return p, base
end

local function positive_int(v, flag)
  local n = tonumber(v)
  if not n or math.type(n) ~= "integer" and n ~= math.floor(n) or n < 1 then
    usage_error("%s needs a positive integer, got '%s'", flag, tostring(v))
  end
  return math.tointeger(n)
end

local function where_runs(n)
  return "local"
end

local SLICING = { "nodes", "from-nodes", "to-nodes", "tags", "from-inputs", "to-outputs" }

local function slicing_options(opts)
  local t = {}
  for _, flag in ipairs(SLICING) do t[flag:gsub("-", "_")] = opts[flag] end
  return t
end

local function print_plan(p, opts)
  local plan = runner.prepare(p, slicing_options(opts))
  local k = 0
  for _, i in ipairs(plan.graph:order()) do
    if not plan.selected or plan.selected[i] then
      k = k + 1
      io.write(string.format("%3d  %s\n", k, p.nodes[i].name))
    end
  end
end

-- After a failed run: which steps failed or did not run, and the command
-- that picks up from the nearest saved inputs.
local function report_failure(result, args)
  local failed, not_run = {}, {}
  for name, st in pairs(result.steps) do
    if st.state == "failed" then failed[#failed + 1] = name
    elseif st.state == "not run" then not_run[#not_run + 1] = name end
  end
  table.sort(failed)
  table.sort(not_run)
  local lines = {}
  if #failed > 0 then lines[#lines + 1] = "failed: " .. table.concat(failed, ", ") end
  if #not_run > 0 then lines[#lines + 1] = "not run: " .. table.concat(not_run, ", ") end
  if result.resume_from and #result.resume_from > 0 then
    local kept, skip = {}, false
    for _, a in ipairs(args) do
      local flag = a:match("^%-%-([%w-]+)")
      if skip then skip = false
      elseif flag and (flag == "from-nodes" or flag == "nodes" or flag == "to-nodes") then
        skip = not a:find("=", 1, true)
      else kept[#kept + 1] = a:find("[%s'\"$]") and ("'" .. a:gsub("'", "'\\''") .. "'") or a end
    end
    lines[#lines + 1] = "resume with: flow run " .. table.concat(kept, " ") .. (#kept > 0 and " " or "")
                        .. "--from-nodes " .. table.concat(result.resume_from, ",")
  end
  if #lines > 0 then core.ui_info(table.concat(lines, "\n")) end
end

local function cmd_run(args)
  local opts, pos = parse_args("run", args)
  if opts.help then print(HELP.run) return 0 end
  local path = script_path(pos, "run")
  local jobs = opts.jobs and positive_int(opts.jobs, "--jobs")
  if opts.quiet and opts.verbose then usage_error("--quiet and --verbose contradict each other") end
  local progress = opts.progress or "auto"
  if progress ~= "auto" and progress ~= "live" and progress ~= "plain" then
    usage_error("--progress must be auto, live or plain, got '%s'", progress)
  end
  core.ui_setup(opts.quiet and "quiet" or opts.verbose and "verbose" or "normal", progress)
  set_defaults(opts)
  local p = load_pipeline(path, opts.pipeline)
  if not p then return runner.last_code or 0 end
  if opts["dry-run"] then print_plan(p, opts) return 0 end
  if opts.distributed and not require("flow.launch").MODES[opts.distributed] then
    usage_error("--distributed must be once or local, got '%s'", opts.distributed)
  end
  local run_opts = slicing_options(opts)
  run_opts.jobs, run_opts.keep_going, run_opts.verbose = jobs, opts["keep-going"], opts.verbose
  local result = runner.run(p, run_opts)
  if result.code == 1 then report_failure(result, args) end
  return result.code
end

local function list_rows(p)
  local plan = runner.prepare(p, {})
  local g = plan.graph
  local rows = {}
  for k, i in ipairs(g:order()) do
    local n = p.nodes[i]
    local ins, outs = {}, {}
    for _, io in ipairs(n.inputs) do ins[#ins + 1] = io.dataset end
    for _, io in ipairs(n.outputs) do outs[#outs + 1] = io.dataset end
    rows[k] = { index = k, name = n.name, kind = n.kind, runs = where_runs(n), inputs = ins,
                outputs = outs, tags = n.tags, distribution = plan.dists[i] and distributed.describe(plan.dists[i]) or nil,
                dist = plan.dists[i], where = n.where }
  end
  return rows
end

local function cmd_list(args)
  local opts, pos = parse_args("list", args)
  if opts.help then print(HELP.list) return 0 end
  local fmt = opts.format or "table"
  if fmt ~= "table" and fmt ~= "json" then usage_error("--format must be table or json, got '%s'", fmt) end
  local path = script_path(pos, "list")
  core.ui_setup("quiet")
  set_defaults(opts)
  local p = load_pipeline(path, opts.pipeline)
  if not p then return 0 end
  local rows = list_rows(p)
  if fmt == "json" then
    for _, r in ipairs(rows) do
      r.dist = r.dist and { framework = r.dist.framework, num_nodes = r.dist.num_nodes,
                            processes_per_node = r.dist.processes_per_node }
    end
    print(core.json_encode(rows, true))
    return 0
  end
  local header = { "#", "step", "runs", "inputs", "outputs", "tags", "distribution" }
  local cells = { header }
  for _, r in ipairs(rows) do
    cells[#cells + 1] = { tostring(r.index), r.name, r.runs, table.concat(r.inputs, ", "),
                          table.concat(r.outputs, ", "), table.concat(r.tags, ", "), r.distribution or "" }
  end
  local width = {}
  for _, row in ipairs(cells) do
    for c, v in ipairs(row) do width[c] = math.max(width[c] or 0, utf8.len(v) or #v) end
  end
  for _, row in ipairs(cells) do
    local parts = {}
    for c, v in ipairs(row) do
      parts[c] = c == #row and v or v .. string.rep(" ", width[c] - (utf8.len(v) or #v))
    end
    print((table.concat(parts, "  "):gsub("%s+$", "")))
  end
  return 0
end

local SECTIONS = { parameters = true, params = true, catalog = true, azureml = true,
                   credentials = true, globals = true, flow = true }

-- "a.b" -> "parameters", "a.b";  "catalog.x" -> "catalog", "x";  "azureml" -> "azureml", nil
local function split_key(key)
  local first, rest = key:match("^([^.]+)%.?(.*)$")
  if SECTIONS[first] then return first, rest ~= "" and rest or nil end
  return "parameters", key
end

local function cmd_config(args)
  local opts, pos = parse_args("config", args)
  if opts.help then print(HELP.config) return 0 end
  if #pos > 1 then usage_error("'flow config' takes one KEY, got %d", #pos) end
  if opts.explain and pos[1] then usage_error("give either KEY or --explain KEY") end
  core.ui_setup("normal")
  local settings = require("flow.settings").load { conf = opts.conf, env = opts.env, params_spec = opts.params }
  local cfg = settings.cfg
  if opts.explain then
    if not cfg then usage_error("no configuration: there is no conf/ directory in %s", core.cwd()) end
    local section, key = split_key(opts.explain)
    print((cfg:explain(section, key or "")))
    return 0
  end
  if not cfg then
    core.ui_info("no conf/ directory in " .. core.cwd() .. ": the configuration is empty")
    return 0
  end
  local section, key
  if pos[1] then section, key = split_key(pos[1]) end
  local text = cfg:dump(section, key, true)
  if not text then
    local near = key and cfg:closest(section, key)
    usage_error("no key '%s' in the %s of environment '%s'%s", pos[1], section, settings.env,
                near and (" (did you mean '" .. near .. "'?)") or "")
  end
  io.write(text)
  return 0
end

-- print for scripts and steps: the same text as Lua's, written so that it
-- keeps clear of the live progress display.
function M.print(...)
  local n = select("#", ...)
  local parts = {}
  for i = 1, n do parts[i] = tostring((select(i, ...))) end
  core.ui_print(table.concat(parts, "\t") .. "\n")
end

-- flow __step SCRIPT STEP INPUTS OUTPUTS [--env …]: one rank of a distributed
-- Lua step (internal; started by flow itself).
local function cmd_step(args)
  local opts, pos = parse_args("__step", args)
  if #pos ~= 4 then usage_error("usage: flow __step SCRIPT STEP INPUTS OUTPUTS (internal)") end
  core.ui_setup("quiet")
  set_defaults(opts)
  runner.child = { step = pos[2], inputs = pos[3], outputs = pos[4] }
  local p = load_pipeline(pos[1], nil)
  if p then runner.run(p) end
  script_error(string.format("step '%s' is not in the pipeline of %s", pos[2], pos[1]))
end

local COMMANDS = { run = cmd_run, list = cmd_list, config = cmd_config, __step = cmd_step }

local function dispatch(args)
  local cmd = args[1]
  if cmd == nil or cmd == "-h" or cmd == "--help" then print(USAGE) return cmd and 0 or 2 end
  if cmd == "--version" or cmd == "version" then
    print("flow " .. require("flow").VERSION .. " (" .. _VERSION .. ")")
    return 0
  end
  if cmd == "help" then
    local topic = args[2]
    if topic and HELP[topic] then print(HELP[topic]) return 0 end
    if topic then usage_error("no command '%s'", topic) end
    print(USAGE)
    return 0
  end
  local fn = COMMANDS[cmd]
  if not fn then
    usage_error("unknown command '%s'%s", cmd, util.did_you_mean(cmd, util.sorted_keys(COMMANDS)))
  end
  return fn({ table.unpack(args, 2) })
end

function M.main(args)
  local ok, ret = pcall(dispatch, args)
  if ok then return ret end
  if getmetatable(ret) == runner.ChildDone then return 0 end
  if core.interrupted() > 0 then
    core.ui_error("interrupted")
    return 130
  end
  if type(ret) == "table" and ret.usage then
    core.ui_error(ret.usage .. "\n(see 'flow --help')")
    return 2
  elseif type(ret) == "table" and ret.script then
    core.ui_error(ret.script)
    return 2
  elseif util.is_setup_error(ret) then
    core.ui_error(ret.setup_error)
    return 2
  end
  error(ret, 0)
end

return M
