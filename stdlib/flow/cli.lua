-- flow.cli: the command line.  main(args) returns the exit status:
-- 0 success, 1 a step failed, 2 usage/script/graph error, 130 interrupted.
local core = require("flow.core")
local util = require("flow.util")

-- A module that only some commands use, loaded on its first use: `flow
-- --version` and `flow help` load neither the runner nor the pipeline layer.
-- (A command that runs a script uses the runner before the script's first
-- line: flow.fingerprint must see the globals as they were before it.)
local function lazy(name)
  local function load(proxy)
    local m = require(name)
    setmetatable(proxy, { __index = m, __newindex = m })
    return m
  end
  return setmetatable({}, {
    __index = function(proxy, k) return load(proxy)[k] end,
    __newindex = function(proxy, k, v) load(proxy)[k] = v end,
  })
end
local pipeline = lazy("flow.pipeline")
local runner = lazy("flow.runner")
local distributed = lazy("flow.distributed")

local M = {}

local USAGE = [[
usage: flow <command> [options]

commands:
  new NAME         create a project that runs at once: pipeline, conf/, data/, src/
  run [SCRIPT]     run a pipeline (default script: ./pipeline.lua); steps whose
                   inputs, code and parameters did not change are up to date
                   and do not run again
  sweep [SCRIPT]   run the pipeline once per set of parameters, ranked by a metric
  list [SCRIPT]    show the steps in run order: inputs, outputs, tags, distribution
  repl [SCRIPT]    a Lua prompt on the pipeline: run{}, load(), save(), step(), reload()
  viz [SCRIPT]     draw the pipeline: Graphviz DOT, Mermaid or a page; coloured by a run
  compile [SCRIPT] write the pipeline as an Azure ML pipeline job (az ml job create -f)
  catalog list     show every dataset a pipeline uses: its type and where it lives
  config [KEY]     print the resolved configuration of an environment, or explain a key
  logs [STEP]      print a step's newest log, from whichever run ran it
  status [RUN_ID]  a run's steps: state, time, and each Azure ML job's status and link
  runs             past runs: when, command, environment, status, time, steps
  cancel [RUN_ID]  cancel the Azure ML jobs a run left running (flow run --detach)
  azureml whoami   say which Azure credential flow finds, and try it
  clean            remove old runs (.flow/runs) and unused cache entries
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

A step whose fingerprint (its code or command, the parameters it reads, its
distribution settings and its inputs' content) matches its last successful
run, and whose outputs are still as that run left them, is up to date: it
does not run again.  Steps a selection leaves out are skipped.

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
  --namespace NS     the steps inside namespace NS (NS.step, NS.inner.step)
                     (several selections intersect; inputs from unselected steps come
                     from their last successful run: the catalog's files or the cache)
  --force            run every selected step, up to date or not
  --explain          say for each step why it runs or is up to date
  --resume [RUN_ID]  finish a failed or interrupted run (default: the latest; a
                     unique prefix of its id will do) with its original arguments;
                     steps it completed are not run again, and Azure ML jobs it
                     submitted are waited for, not submitted again (a run
                     flow.run started, or whose parameters changed, is refused)
  --submit-pipeline  hand the selected steps to Azure ML as one pipeline job
                     (what `flow compile` writes: a component per step, data
                     bound job to job) and wait for it; Ctrl-C cancels it
  --detach           on Ctrl-C, leave the run's Azure ML jobs running (default:
                     cancel them); `flow run --resume` waits for them later,
                     `flow cancel RUN_ID` cancels them
  --load-versions NAME:VERSION,…
                     load these versions of versioned datasets (default: the newest)
  -j, --jobs N       run at most N command steps at once, and N Lua steps
                     (default: number of CPUs; named pools: flow.yml pools:)
  --distributed MODE once (default): a distributed_job step runs once, normally;
                     local: it runs as num_nodes x processes_per_node local
                     processes (at most 1024) with the variables Azure ML sets (also
                     `distributed: local` in conf/<env>/flow.yml)
  -k, --keep-going   after a failure, still run every step that does not depend on it
  -n, --dry-run      print the selected steps in order, whether each would run and
                     why, and stop
  -v, --verbose      stream each command's output, prefixed with its step name
  -q, --quiet        print only warnings and errors
  --progress MODE    auto (default: live on a terminal), live, or plain (a line
                     per step state change)
  --log-format FMT   text (default) or json: every line on stderr a JSON object
                     (messages, each step's start and end, -v output, the run's end)

An option that takes a list may be given again, and adds to it as if the
values were joined with commas: --params (a later key wins), the selections
and --load-versions.  Any other option takes one value: given twice with two
values, it is an error.

exit status: 0 success, 1 a step failed, 2 usage, script or graph error,
130 interrupted.]],
  sweep = [[
usage: flow sweep [SCRIPT] --grid KEY=V1,V2,... [--grid ...] --metric NAME [options]

Runs the pipeline SCRIPT returns once per trial: every combination of the
--grid values (or --random N of them, drawn with --seed), each trial's
values overriding the parameters of the environment.  Trials run one after
another (or --parallel N at once) and share the incremental cache: a step
that reads no swept parameter runs once.  A failed trial is reported and the
sweep goes on.
The trials are ranked by the metric NAME their steps report (metrics =
true, flow.log_metric or ${outputs.metrics}); the table is printed, best
marked *, and written to .flow/sweeps/<id>/results.csv and results.json,
with report.html: the table (sortable) and charts of the metric per trial,
against each swept parameter, and over the epochs of trials that log it.

options:
  --grid KEY=V1,V2   the values of parameter KEY to try (KEY may be dotted:
                     model.depth); numbers, true/false, else text
  --metric NAME      the metric that ranks the trials
  --goal min|max     lower or higher is better (default: min)
  --random N         N trials drawn from the grid's values, not all of them
  --seed S           the random draw's seed (default: 0): the same seed, the same trials
  --early-stop POLICY[,key=value,…]
                     stop a trial whose metric, logged per epoch with
                     flow.log_metric, falls behind the trials before it:
                     bandit (slack_factor=F, default 0.1, or slack_amount=A)
                     or median; after=N (the first value looked at, default
                     1), every=N (default 1).  Such a trial is "stopped".
  -e, --env ENV      configuration environment (default: $FLOW_ENV, else local)
  -p, --params K=V,… override parameters for every trial
  --conf DIR         configuration directory (default: conf/ beside the script)
  --pipeline NAME    the pipeline registered as NAME (default: __default__)
  -j, --jobs N       steps at once within a trial (default: number of CPUs)
  --force            run every step of every trial, up to date or not
  -q, --quiet        print only warnings, errors and the results table
  --log-format FMT   text (default) or json: every line on stderr a JSON object
  --open             print the path of the sweep's report.html (its table and
                     charts), and open it in a browser when there is a display
  --resume [ID]      finish an interrupted sweep (default: the latest; a unique
                     prefix of its id will do): the trials that did not succeed
                     (nor were stopped early) run, with the values, metric and
                     parameters it started with
  --parallel N       N trials at once (default: 1), after the steps they all
                     share ran once; -j is split among them.  In an Azure ML
                     sweep job: its trials at once (default: all)
  --no-sweep-job     a run per trial even when the swept step runs on Azure ML

When the one step that reads the swept parameters is a command that runs on
Azure ML in ENV, the sweep is one Azure ML sweep job: Azure ML samples and
runs the trials (docs/azureml.md, "Sweeps on Azure ML").

From Lua: flow.sweep{pipeline =, grid = | space =, sampler =, trials =,
seed =, metric =, goal =, early_stop =, parallel =, sweep_job =}
(docs/pipelines.md, "Sweeps").

exit status: 0 a trial has the best metric, 1 none succeeded with it, 2 usage,
script or graph error, 130 interrupted.]],
  viz = [=[
usage: flow viz [SCRIPT] [--format dot|mermaid|html] [-o FILE] [--run [RUN_ID]] [options]

Draws the pipeline SCRIPT returns: steps (boxes, with their tags, their
distribution and where they run in the environment), datasets (ellipses;
cylinders for those the catalog persists) and the parameters steps read
(notes, dashed edges), edges in the direction data flows, each namespace a
cluster (nested namespaces nested).

options:
  --format FORMAT    dot (default: Graphviz; `flow viz | dot -Tsvg > p.svg`),
                     mermaid (a flowchart block for Markdown) or html (one
                     self-contained page: click a step for its inputs, outputs,
                     parameters, command and, with --run, its log; filter by tag)
  -o, --output FILE  write it to FILE (default: standard output)
  --run [RUN_ID]     colour each step by what it did in that run (default: the
                     latest; a unique prefix of its id will do): done, up to
                     date, failed, interrupted, running, not run, skipped; with
                     its time
  -e, --env ENV      environment: where each step runs follows it
  -p, --params K=V,… override parameters
  --conf DIR         configuration directory (default: conf/ beside the script)
  --pipeline NAME    the pipeline registered as NAME (default: __default__)]=],
  compile = [[
usage: flow compile [SCRIPT] --env ENV [-o FILE] [options]

Writes the selected steps of the pipeline SCRIPT returns as one Azure ML
pipeline job, in the az ml CLI v2's YAML (pipelineJob.schema.json), for
`az ml job create -f FILE`.  Each step is a command job with the command,
compute, environment, resources and distribution a run would send for it
(conf/ENV/azureml.yml; a Lua function step runs as `flow run SCRIPT --nodes
STEP` in an environment with flow installed).  Data between steps is bound
job to job (${{parent.jobs.<step>.outputs.<name>}}); data no selected step
makes comes from its datastore path, or from the local file or folder (a
path relative to FILE, uploaded by the CLI); parameters are resolved for ENV
and written into the commands.  No request is made to Azure ML.

options:
  -e, --env ENV      the environment whose azureml.yml (workspace, compute,
                     environment) and parameters to use (default: $FLOW_ENV,
                     else local)
  -o, --output FILE  write it to FILE (default: standard output, with paths
                     relative to the current directory)
  -p, --params K=V,… override parameters
  --conf DIR         configuration directory (default: conf/ beside the script)
  --pipeline NAME    the pipeline registered as NAME (default: __default__)
  --nodes, --from-nodes, --to-nodes, --tags, --from-inputs, --to-outputs,
  --namespace        compile only these steps, as `flow run` selects them]],
  new = [[
usage: flow new NAME

Creates the project directory NAME (which must not exist, or be empty): a
pipeline.lua with a Lua step, a command step and metrics; conf/base/
(parameters.yml, catalog.yml); conf/local/ for what stays on this machine,
ignored by git; data/ with the catalog's raw data; src/ for the code command
steps run; .gitignore and .amlignore that leave out .flow/; a README.
`cd NAME && flow run` runs it.]],
  repl = [[
usage: flow repl [SCRIPT] [options]

A Lua 5.4 prompt on flow's own state, for trying things out.  Expressions
print without `return` (> 1+1 prints 2); a chunk that is not complete goes
on at the next line (>>); tables print to a depth and a length, pipelines and
steps summarised.  With a script (default: ./pipeline.lua when there is
one), the session has `pipeline`, `params` and `catalog`, and
  run{nodes =, params =, tags =, ...}   run the pipeline (flow.run's options)
  load("dataset")                       its value, through the catalog or as
                                        the last run left it
  save("dataset", value)                save it through the catalog
  step("name")                          what a step is, and its last run
  reload()                              read the script and conf/ again
An error prints its message and traceback; Ctrl-C stops what runs and the
prompt comes back; Ctrl-D leaves.  Lines are edited with readline, kept in
$XDG_STATE_HOME/flow/history, and Tab completes names, fields, datasets and
steps.  Input that is not a terminal runs without a prompt:
  echo 'print(params.epochs)' | flow repl

options:
  -e, --env ENV      configuration environment (default: $FLOW_ENV, else local)
  -p, --params K=V,… override parameters
  --conf DIR         configuration directory (default: conf/ beside the script)
  --pipeline NAME    the pipeline registered as NAME (default: __default__)]],
  runs = [[
usage: flow runs [DIR] [-n N | --all] [--format table|json]
       flow runs show [RUN_ID] [DIR]

Lists the project's runs, newest first (default: the last 20): each run's id,
when it started, its status (ok, failed, interrupted; unfinished: still going,
or killed), its time, its steps (done, up to date, failed, not run, ...), the
environment and the command that started it (a sweep's trial: its name).
`flow runs show` describes one run (default: the latest; a unique prefix of
its id will do): those lines, its metrics, and each step's state and time.
DIR is the project (default: the current directory).

options:
  -n N               the N newest runs
  --all              every run
  --format FMT       table (default) or json]],
  status = [[
usage: flow status [RUN_ID] [DIR]

Says how run RUN_ID (default: the latest; a unique prefix of its id will do)
went or is going, from its journal: each step's state and time, and for a
step on Azure ML its job's name, status and Studio link.  The status of a job
whose step has not completed (the run goes on, was detached or was killed) is
asked of Azure ML, with the run's environment's azureml.yml and credential.
DIR is the project (default: the current directory).]],
  cancel = [[
usage: flow cancel [RUN_ID] [DIR]

Cancels the Azure ML jobs that run RUN_ID (default: the latest; a unique
prefix of its id will do) submitted and did not see finish — after
`flow run --detach` and Ctrl-C, or a run that was killed — and waits until
Azure ML says each is canceled.  DIR is the project (default: the current
directory).]],
  azureml = [[
usage: flow azureml whoami [options]

Says which Azure credential flow finds (in the order of Azure's
DefaultAzureCredential: client secret, client certificate, workload
identity, Azure ML compute, managed identity, Azure CLI), gets a token with
it, and prints the workspace the environment's azureml.yml names.  Nothing
secret is printed.

options:
  -e, --env ENV      environment whose azureml.yml to read
  --conf DIR         configuration directory (default: ./conf)]],
  list = [[
usage: flow list [SCRIPT] [options]

Prints the steps in run order with their inputs, outputs, tags, where each
would run, its pool (when a step has one) and its distribution settings.

options:
  -e, --env ENV      resolve "params:" counts in this environment
  -p, --params K=V,… override parameters
  --conf DIR         configuration directory (default: conf/ beside the script)
  --pipeline NAME    list the pipeline registered as NAME
  --format FMT       table (default) or json
  --nodes, --from-nodes, --to-nodes, --tags, --from-inputs, --to-outputs,
  --namespace        only the steps `flow run` would select with these]],
  catalog = [[
usage: flow catalog list [SCRIPT] [options]

Lists every dataset the pipeline uses, in run order: its type (memory, json,
text, lua, file, folder), where it lives, the catalog entry or pattern that
declares it (conf/base/catalog.yml merged with conf/ENV/catalog.yml), and the
steps that make and read it.

options:
  -e, --env ENV      environment whose catalog to use
  -p, --params K=V,… override parameters
  --conf DIR         configuration directory (default: conf/ beside the script)
  --pipeline NAME    the pipeline registered as NAME
  --format FMT       table (default) or json]],
  clean = [[
usage: flow clean [DIR] [options]

Removes what flow keeps under DIR/.flow (default: the current directory) and
no longer needs: run directories (journals, logs) older than a limit, never
the latest run; temporary directories of runs that are over; with --cache,
cached values that no step's last run refers to, and hashes of files that
changed or are gone.  Outputs and the record of each step's last run stay,
so the next run still does not rerun what is up to date.

options:
  --runs-older-than AGE  remove runs that started more than AGE ago (default 30d;
                         units ms, s, m, h, d, combined as in 1h30m; 0s: all but
                         the latest; at most 36500d)
  --cache                also remove unused cache entries
  -n, --dry-run          say what would be removed, remove nothing]],
  help = [[
usage: flow help [COMMAND]

Shows how to use COMMAND (run, list, catalog, logs, config, clean, help), or, without
one, the list of commands.  'flow COMMAND --help' shows the same.]],
  logs = [==[
usage: flow logs [STEP [DIR]] [options]

Prints the log of STEP — its command's stdout and stderr, or what a Lua step
printed — from the newest run that ran it: a run in which the step was up to
date made no log of it, nor one in which it wrote nothing (a log is created on
a step's first byte of output).  A distributed step's ranks each have a log; all are
printed.  Without STEP, lists each step's newest log.  DIR is the project
(default: the current directory).

options:
  --path    print where the log is instead of what it says]==],
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
  --explain [KEY]      say which file and line set KEY, and what it overrode
                       (flow config --explain model.lr, or flow config model.lr --explain)]],
}

-- Thrown for usage errors: printed with a hint, exit 2.
local function usage_error(fmt, ...)
  error({ usage = string.format(fmt, ...) }, 0)
end

-- A command's optional project directory argument: work there.
local function enter_project(dir)
  if not dir then return end
  if core.exists(dir) ~= "directory" then usage_error("no such directory: %s", dir) end
  core.chdir(dir)
end

local CONFIG_OPTIONS = { env = "value", e = "env", params = "commas", p = "params", conf = "value" }

local function with_config(t)
  for k, v in pairs(CONFIG_OPTIONS) do t[k] = v end
  t.help, t.h = "flag", "help"
  return t
end

local OPTIONS = {
  run = with_config { pipeline = "value", jobs = "value", j = "jobs", ["keep-going"] = "flag",
                      k = "keep-going", ["dry-run"] = "flag", n = "dry-run", verbose = "flag",
                      v = "verbose", quiet = "flag", q = "quiet", progress = "value",
                      nodes = "commas", ["from-nodes"] = "commas", ["to-nodes"] = "commas",
                      tags = "commas", ["from-inputs"] = "commas", ["to-outputs"] = "commas",
                      namespace = "commas", distributed = "value", force = "flag", explain = "flag",
                      resume = "optional", ["load-versions"] = "commas", detach = "flag",
                      ["submit-pipeline"] = "flag", ["log-format"] = "value" },
  list = with_config { pipeline = "value", format = "value", nodes = "commas", ["from-nodes"] = "commas",
                       ["to-nodes"] = "commas", tags = "commas", ["from-inputs"] = "commas", ["to-outputs"] = "commas",
                       namespace = "commas" },
  viz = with_config { pipeline = "value", format = "value", output = "value", o = "output", run = "optional" },
  compile = with_config { pipeline = "value", output = "value", o = "output", nodes = "commas",
                          ["from-nodes"] = "commas", ["to-nodes"] = "commas", tags = "commas",
                          ["from-inputs"] = "commas", ["to-outputs"] = "commas", namespace = "commas" },
  sweep = with_config { pipeline = "value", grid = "list", metric = "value", goal = "value", random = "value",
                        ["early-stop"] = "value", ["log-format"] = "value",
                        seed = "value", jobs = "value", j = "jobs", force = "flag", quiet = "flag", q = "quiet",
                        open = "flag", resume = "optional", parallel = "value", ["no-sweep-job"] = "flag" },
  config = with_config { explain = "optional" },
  catalog = with_config { pipeline = "value", format = "value" },
  clean = { ["runs-older-than"] = "value", cache = "flag", ["dry-run"] = "flag", n = "dry-run",
            help = "flag", h = "help" },
  logs = { path = "flag", help = "flag", h = "help" },
  cancel = { help = "flag", h = "help" },
  status = { help = "flag", h = "help" },
  runs = { n = "value", all = "flag", format = "value", help = "flag", h = "help" },
  new = { help = "flag", h = "help" },
  repl = with_config { pipeline = "value" },
  azureml = with_config {},
  __step = with_config {},
}

-- What an option takes (any other entry in OPTIONS names the option it is short for):
--   flag      nothing; given twice, it is still given
--   value     one value; given again with another value, an error (which would win?)
--   optional  a value or nothing (--resume [RUN_ID]); given twice, as value
--   commas    a comma-separated list (--nodes a,b, --params a=1,b=2): given again,
--             it adds to it, as if the values were joined with commas
--   list      a value each time, kept apart in a table (sweep's --grid)
local KINDS = { flag = true, value = true, optional = true, commas = true, list = true }

-- A single-valued option may be repeated only with the same value.
local function set_once(opts, name, value)
  local old = opts[name]
  if old ~= nil and old ~= value then
    local function shown(v) return v == true and "without a value" or string.format("'%s'", v) end
    usage_error("option '%s%s' given twice (%s, then %s): it takes one value", #name > 1 and "--" or "-", name,
                shown(old), shown(value))
  end
  opts[name] = value
end

-- Parse args for `cmd`: returns options table and positional list.
-- Short flags combine (-nv is -n -v); a short option's value may follow it (-j4).
local function parse_args(cmd, args)
  local spec, opts, pos = OPTIONS[cmd], {}, {}
  args = { table.unpack(args) }          -- combined short flags are split in place
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
      if #a > 2 then
        local kind = spec[name]
        if spec[kind] then kind = spec[kind] end
        if kind == "flag" then
          table.insert(args, i + 1, "-" .. a:sub(3))
          a = a:sub(1, 2)
        else
          value = a:sub(3)
        end
      end
    else
      pos[#pos + 1] = a
    end
    if name then
      local kind = spec[name]
      if kind and not KINDS[kind] then name, kind = kind, spec[kind] end
      if not kind then
        local long = {}
        for k, v in pairs(spec) do
          if #k > 1 and KINDS[v] then long[#long + 1] = k end
        end
        usage_error("unknown option '%s' for 'flow %s'%s", a, cmd,
                    util.did_you_mean(name, long):gsub("'(.-)'", "'--%1'", 1))
      end
      if kind == "optional" then
        -- --resume [RUN_ID] (and viz --run): the next word is its value unless it is an
        -- option or names a script or project (a run id that names none is
        -- an error then, not the latest run resumed in its place).
        if not value and (name == "resume" or name == "run") and args[i + 1] and not args[i + 1]:match("^%-")
           and not core.exists(args[i + 1]) then
          i = i + 1
          value = args[i]
        elseif not value and name == "explain" and args[i + 1] and not args[i + 1]:match("^%-") then
          i = i + 1                        -- flow config --explain KEY (or flow config KEY --explain)
          value = args[i]
        end
        set_once(opts, name, value or true)
      elseif kind == "value" or kind == "commas" or kind == "list" then
        if not value then
          i = i + 1
          value = args[i]
          if not value then usage_error("option '%s' needs a value", a) end
        end
        if kind == "list" then
          opts[name] = opts[name] or {}
          table.insert(opts[name], value)
        elseif kind == "commas" then
          opts[name] = opts[name] and opts[name] .. "," .. value or value
        else
          set_once(opts, name, value)
        end
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

-- --log-format text|json (ui.h: every stderr line a JSON object).
local function set_log_format(opts)
  local fmt = opts["log-format"] or "text"
  if fmt ~= "text" and fmt ~= "json" then usage_error("--log-format must be text or json, got '%s'", fmt) end
  core.ui_set_json(fmt == "json")
end

-- The configuration choices of the command line, for every run the script makes.
local function set_defaults(opts)
  if opts.env == "" then usage_error("--env needs an environment name") end
  runner.defaults = { env = opts.env, params_spec = opts.params, conf = opts.conf, pipeline = opts.pipeline,
                      distributed = opts.distributed }
end

-- The command line's configuration loaded (and its redactor made flow's)
-- before the script's top level runs: what that prints or raises, such as a
-- credential's variable read with os.getenv, is masked as a step's is.  A
-- configuration that does not load is reported by the run that loads it
-- (runner.prepare, with the run's own options), not here.
local function know_secrets()
  local d = runner.defaults
  pcall(require("flow.settings").load, { conf = d.conf, env = d.env, params_spec = d.params_spec, quiet = true })
end

-- A relative --conf DIR names a directory from where flow was started, as
-- any path on a command line; flow works in the script's directory `dir`,
-- so it becomes relative to that (as a job's command line passes it on), or
-- absolute when it lies outside.
local function conf_from(conf, dir)
  if conf:sub(1, 1) == "/" then return conf end
  local cwd = core.cwd()
  local abs = (cwd .. "/" .. conf:gsub("^%./", "")):gsub("//+", "/")
  local script_dir = (dir:sub(1, 1) == "/" and dir or cwd .. "/" .. dir:gsub("^%./", "")):gsub("//+", "/")
  script_dir = script_dir:gsub("/+$", "")
  if abs:sub(1, #script_dir + 1) == script_dir .. "/" then return abs:sub(#script_dir + 2) end
  return abs
end

-- The collector's pause (%) while a script's top level runs (load_pipeline).
-- A script that declares its steps only grows its heap (node handles, step
-- functions) while it makes garbage (spec tables, the names' strings), so
-- Lua's generational collector finds each major collection bad and falls
-- back to full collections, one each time the heap reaches pause % of what
-- the last one left: at the default 200 % a no-op rerun of 100,000 Lua
-- steps made 16 of them, 94-97 ms, the heap growing about 1.4 times from
-- one to the next.  At 400 % it grows about 2.1 times: 10 collections,
-- 48-50 ms (a first run: 145-160 ms -> 81-84), for about 7 MB more at a
-- first run's peak (the allocator keeps the slabs the extra garbage took:
-- lua/alloc.c).  The ratio is what changes, so there are fewer collections
-- at any number of steps; the time saved also depends on how large the
-- heap is when the last one falls (300 % made 13 here, 91 ms).  A driver
-- script's own code between its runs keeps this pause too (a run sets its
-- own: runner.lua's M.run).
local SCRIPT_GC_PAUSE = 400

-- Load the script, run its top level, return the chosen pipeline.
-- `describing`: the command that only describes the pipeline (flow list,
-- viz, compile, catalog list; a shell's Tab completion runs flow list), for
-- which a script that runs pipelines of its own (flow.run) is refused at its
-- first flow.run, before any step runs.
local function load_pipeline(path, name, describing)
  local dir, base = path:match("^(.*)/([^/]*)$")
  local chunk, err = core.load_script(path, path)
  if not chunk then
    script_error(err:sub(1, #path + 1) == path .. ":" and err or path .. ": " .. err)
  end
  if dir and dir ~= "" then
    if runner.defaults.conf then runner.defaults.conf = conf_from(runner.defaults.conf, dir) end
    core.chdir(dir)
  end
  runner.defaults.script = base or path
  local runs = not describing and not runner.child       -- (flow run's, not flow list's nor a step's)
  if runs then
    -- a run reads these before its check: read ahead while the script runs
    -- (engine/preload.h; taken only when the files did not change meanwhile)
    local state_mod = require("flow.state")
    require("flow.cache").preload(state_mod.STATE, state_mod.CACHE .. "/hashes")
  end
  know_secrets()
  local flow = require("flow")
  for _, k in ipairs({ "node", "pipeline", "distributed_job", "Framework" }) do _G[k] = flow[k] end
  _G.flow = flow
  _G.print = M.print
  local runs_before = runner.runs_started
  pipeline.new_store()
  runner.describing = describing and { command = describing, script = path } or nil
  local pause = collectgarbage("setpause", SCRIPT_GC_PAUSE)
  local ok, ret = xpcall(chunk, function(e)
    if util.is_fs_error(e) then return e end   -- a driver's flow.run met the disk, not a bug
    if describing and util.is_setup_error(e) then return e end
    return debug.traceback(util.error_message(e), 2)
  end)
  collectgarbage("setpause", pause)
  runner.describing = nil
  if not ok and (util.is_fs_error(ret) or util.is_setup_error(ret)) then error(ret, 0) end
  if not ok then script_error(util.user_traceback(ret)) end
  -- the recorded outputs stat-ed while the run is planned: not before, when
  -- the script might yet change one after its stat (engine/stat_prefetch.h)
  if runs then require("flow.cache").preload_stats() end
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

-- Decimal digits only: tonumber would take 1e999, 0x10 and " 4".
local function positive_int(v, flag, max)
  local n = tostring(v):match("^%d+$") and math.tointeger(tonumber(v))
  if not n or n < 1 or n > max then
    usage_error("%s needs a whole number from 1 to %d, got '%s'", flag, max, tostring(v))
  end
  return n
end

-- Where a step runs: here, or on Azure ML (its compute, nodes, processes).
local function where_runs(plan, i)
  local place = plan.remote[i]
  return place and require("flow.remote").describe(place) or "local"
end

local SLICING = { "nodes", "from-nodes", "to-nodes", "tags", "from-inputs", "to-outputs", "namespace" }

local function slicing_options(opts)
  local t = {}
  for _, flag in ipairs(SLICING) do t[flag:gsub("-", "_")] = opts[flag] end
  return t
end

local function run_options(opts)
  local t = slicing_options(opts)
  t.force, t.explain, t.load_versions = opts.force, opts.explain, opts["load-versions"]
  return t
end

-- flow run --dry-run: the selected steps in order, and whether each would run.
local function print_plan(p, opts, resume)
  local o = run_options(opts)
  o.resume = resume
  local rows = runner.dry_run(p, o)
  local width, runs = 0, 0
  for _, r in ipairs(rows) do width = math.max(width, #r.name) end
  for k, r in ipairs(rows) do
    if r.runs then runs = runs + 1 end
    io.write(require("flow.config").redact(string.format("%3d  %-" .. width .. "s  %s\n", k, r.name,
                                  r.runs and ("runs: " .. r.why) or "up to date")))
  end
  io.write(string.format("%d of %d selected steps would run\n", runs, #rows))
end

-- names, sorted and joined by commas; past `max` of them, the count of the
-- rest (a failure at the start of 10,000 steps is one line, not 100 KB).
local function name_list(names, max)
  table.sort(names)
  if #names <= max then return table.concat(names, ", ") end
  return string.format("%s and %d more", table.concat(names, ", ", 1, max), #names - max)
end

-- After a failed run: which steps failed or did not run, and how to go on.
local function report_failure(result)
  local failed, not_run = {}, {}
  for name, st in pairs(result.steps) do
    if st.state == "failed" then failed[#failed + 1] = name
    elseif st.state == "not run" then not_run[#not_run + 1] = name end
  end
  local lines = {}
  if #failed > 0 then lines[#lines + 1] = "failed: " .. name_list(failed, 20) end
  if #not_run > 0 then lines[#lines + 1] = "not run: " .. name_list(not_run, 20) end
  lines[#lines + 1] = "after a fix, finish it with: flow run --resume " .. result.run_id
  core.ui_info(table.concat(lines, "\n"))
end

-- Options that only change how a run is shown, which --resume may add.
local RESUME_OK = { resume = true, quiet = true, verbose = true, progress = true, jobs = true,
                    explain = true, help = true, detach = true, ["dry-run"] = true, ["log-format"] = true }

-- The journal of run `id` ("latest", an id, or a unique prefix of one) in
-- project `dir`: its events and path, then what state.read_journal says of its
-- lines (the first that is not JSON, and whether it is a torn last line).
-- `what` names the option in errors.
local function run_journal(dir, id, what)
  local runs = {}
  for _, r in ipairs(core.list_dir(dir .. "/.flow/runs") or {}) do
    if r ~= "latest" then runs[#runs + 1] = r end
  end
  local function recent() return #runs > 0 and (" (latest runs: " .. table.concat(runs, ", ", math.max(1, #runs - 4)) .. ")")
                                             or " (no runs yet)" end
  if id ~= "latest" then                      -- a run's id, or a prefix that names one run
    local found, matches = util.find_id(runs, id)
    if not found and #matches > 1 then        -- the count and the list agree: past 5, "the latest 5"
      local shown = table.concat(matches, ", ", math.max(1, #matches - 4))
      usage_error("%s: '%s' is ambiguous: it starts %d runs (%s%s)", what, id, #matches,
                  #matches > 5 and "the latest 5: " or "", shown)
    end
    if not found then usage_error("%s: no run '%s' in %s/.flow/runs%s", what, id, dir, recent()) end
    id = found
  end
  local path = dir .. "/.flow/runs/" .. id .. "/journal.jsonl"
  local events, bad, torn = require("flow.state").read_journal(path)
  if not events then usage_error("%s: no run '%s' in %s/.flow/runs%s", what, id, dir, recent()) end
  return events, path, bad, torn
end

-- The journal of a run to show (flow status, runs show, cancel, viz --run):
-- its events and path.  One that does not start with the run's start, or has
-- a line that is not JSON, is damaged, and the error names the file and the
-- line, rather than show a run as still going that is not.  A torn last line
-- is only damage once the run is over (run.json): before, flow may be writing
-- it.  (--resume reads run_journal: a lost step record there only makes that
-- step run again.)
local function run_events(dir, id, what)
  local events, path, bad, torn = run_journal(dir, id, what)
  local over = core.exists((path:gsub("journal%.jsonl$", "run.json"))) ~= nil
  if bad and (over or not torn) then
    util.setup_error(string.format("%s: %s is damaged: line %d is %s", what, path, bad,
                                   torn and "cut short" or "not a JSON object"))
  end
  if not require("flow.runs").start_of(events[1]) then
    util.setup_error(string.format("%s: %s is damaged: %s", what, path,
                                   #events == 0 and "it is empty" or "its first line is not the run's start"))
  end
  return events, path
end

-- flow run --resume [RUN_ID]: the run's journal gives its arguments and the
-- steps it completed; it runs again from the directory it ran in.
local function resume_args(opts, pos)
  for k in pairs(opts) do
    if not RESUME_OK[k] then
      usage_error("--resume runs again with the original run's arguments; drop --%s", k)
    end
  end
  if #pos > 1 then usage_error("'flow run --resume' takes at most the script, to find its project") end
  local dir = "."
  if pos[1] then
    dir = core.exists(pos[1]) == "directory" and pos[1] or (pos[1]:match("^(.*)/[^/]*$") or ".")
  end
  local events, path = run_journal(dir, opts.resume == true and "latest" or opts.resume, "--resume")
  local start = events[1]
  if not start or start.event ~= "run_start" or type(start.args) ~= "table" then
    usage_error("--resume: %s does not start with the run's arguments", path)
  end
  local bad = not util.is_list(start.args) or type(start.run) ~= "string"
              or (start.script ~= nil and type(start.script) ~= "string")
  for _, a in ipairs(start.args) do bad = bad or type(a) ~= "string" end
  if bad then
    util.setup_error(string.format("--resume: the first line of %s is damaged (its arguments are not "
                                   .. "a list of words); start a new run instead", path))
  end
  if start.via == "flow.run" then
    util.setup_error(string.format("--resume: run %s was started by flow.run (a driver script, the REPL's "
                                   .. "run{} or a sweep), not by 'flow run', so flow does not know its steps "
                                   .. "and parameters; resume it the way it was started: run the driver again, "
                                   .. "or run{} again with the same options (the steps it finished are up to date)",
                                   start.run))
  end
  if start.redacted then
    util.setup_error(string.format("--resume: run %s had a credential among its arguments, which flow "
                                   .. "does not store; run it again with the same arguments instead", start.run))
  end
  local completed, finished = {}, nil
  for _, ev in ipairs(events) do
    if ev.event == "step_end" and type(ev.step) == "string" and (ev.status == "ok" or ev.status == "up to date") then
      completed[ev.step] = true        -- (a damaged line without its step's name: nothing completed)
    end
    if ev.event == "run_end" then finished = ev.code end
  end
  return start, completed, finished, dir, M.unfinished_jobs(events)
end

-- The Azure ML jobs of a run's journal whose steps did not complete: {[step]
-- = {job =, fp =}} (each step's newest).  An interrupted step's job may still
-- run (--detach, or flow was killed); a failed one's is over, which adopting
-- or cancelling it finds out.
function M.unfinished_jobs(events)
  local jobs = {}
  for _, ev in ipairs(events) do
    if ev.event == "remote_job" and type(ev.step) == "string" and type(ev.job) == "string" then
      jobs[ev.step] = { job = ev.job, fp = ev.fp or "" }
    elseif ev.event == "step_end" and type(ev.step) == "string" and (ev.status == "ok" or ev.status == "up to date") then
      jobs[ev.step] = nil
    end
  end
  return jobs
end

-- The --conf and --params of the run a journal starts with (`start`: its
-- first event, as runs.start_of reads it), for what acts on the run later
-- (--resume, flow cancel, flow status): the same workspace, from the same
-- configuration.  A relative --conf is from where the run was started,
-- when that directory is still there.
local function run_config(start)
  local ok, orig = pcall(parse_args, "run", type(start.args) == "table" and start.args or {})
  if not ok then return {} end
  local conf = orig.conf
  if conf and conf:sub(1, 1) ~= "/" and start.cwd and core.exists(start.cwd .. "/" .. conf) == "directory" then
    conf = start.cwd .. "/" .. conf
  end
  return { conf = conf, params = orig.params }
end

local run_with, check_submit_flags

local function cmd_run(args)
  local opts, pos = parse_args("run", args)
  if opts.help then print(HELP.run) return 0 end
  if not opts.resume then return run_with(opts, pos, args) end
  local start, completed, finished, dir, remote_jobs = resume_args(opts, pos)
  if finished == 0 then
    core.ui_setup(opts.quiet and "quiet" or "normal", opts.progress or "auto")
    core.ui_info(string.format("run %s finished successfully: nothing to resume", start.run))
    return 0
  end
  -- From the project directory, where the journal is, with the script as it
  -- is named there: the project may have been moved since, so the directory
  -- the run was started from (and the script's path from it) may not exist.
  core.chdir(dir)
  local orig, orig_pos = parse_args("run", start.args)
  orig.conf = run_config(require("flow.runs").start_of(start)).conf
  if start.script then orig_pos = { start.script } end
  for k in pairs(RESUME_OK) do
    if opts[k] ~= nil and k ~= "resume" then orig[k] = opts[k] end
  end
  if opts.quiet then orig.verbose = nil elseif opts.verbose then orig.quiet = nil end
  return run_with(orig, orig_pos, start.args, { run = start.run, completed = completed, remote_jobs = remote_jobs,
                                                params_hash = start.params_hash,
                                                cwd = type(start.cwd) == "string" and start.cwd or nil })
end

-- --submit-pipeline hands the whole run to Azure ML: what only a run here
-- does cannot go with it.
local SUBMIT_EXCLUDES = { "dry-run", "force", "explain", "keep-going", "jobs", "distributed", "load-versions" }
function check_submit_flags(opts)
  for _, flag in ipairs(SUBMIT_EXCLUDES) do
    if opts[flag] then
      usage_error("--submit-pipeline hands the run to Azure ML as one pipeline job; --%s is for runs here", flag)
    end
  end
end

function run_with(opts, pos, args, resume)
  local path = script_path(pos, "run")
  local jobs = opts.jobs and positive_int(opts.jobs, "--jobs", require("flow.sched").MAX_JOBS)
  if opts.quiet and opts.verbose then usage_error("--quiet and --verbose contradict each other") end
  local progress = opts.progress or "auto"
  if progress ~= "auto" and progress ~= "live" and progress ~= "plain" then
    usage_error("--progress must be auto, live or plain, got '%s'", progress)
  end
  set_log_format(opts)
  core.ui_setup(opts.quiet and "quiet" or opts.verbose and "verbose" or "normal", progress)
  set_defaults(opts)
  -- (a resumed run's arguments are the run's, and so is where they were given)
  runner.defaults.args, runner.defaults.cwd = args, resume and resume.cwd or core.cwd()
  if resume then
    core.ui_info(string.format(opts["dry-run"] and "what resuming run %s would do:" or "resuming run %s", resume.run))
  end
  if opts["submit-pipeline"] then check_submit_flags(opts) end
  local p = load_pipeline(path, opts.pipeline)
  if not p then return runner.last_code or 0 end
  if opts["submit-pipeline"] then
    local compile = require("flow.compile")
    local m = compile.model(runner.prepare(p, slicing_options(opts)), runner.defaults)
    return compile.submit_run(m, { detach = opts.detach, resume = resume })
  end
  if opts["dry-run"] then print_plan(p, opts, resume) return 0 end
  if opts.distributed and not require("flow.launch").MODES[opts.distributed] then
    usage_error("--distributed must be once or local, got '%s'", opts.distributed)
  end
  local run_opts = run_options(opts)
  run_opts.jobs, run_opts.keep_going, run_opts.verbose = jobs, opts["keep-going"], opts.verbose
  run_opts.detach = opts.detach
  run_opts.resume = resume
  run_opts.command_line = true          -- (a run of its own: --resume can start it again from args)
  local result = runner.run(p, run_opts)
  if result.code == 1 then report_failure(result)
  elseif result.code == 130 then core.ui_info("finish it with: flow run --resume " .. result.run_id) end
  return result.code
end

local print_table = util.print_table

-- The steps in run order (those the selection flags keep, numbered among
-- themselves).
local function list_rows(p, opts)
  local plan = runner.prepare(p, slicing_options(opts or {}))
  local g = plan.graph
  local rows = {}
  for _, i in ipairs(g:order()) do
    if not plan.selected or plan.selected[i] then
      local n = p.nodes[i]
      local ins, outs = {}, {}
      for _, io in ipairs(n.inputs) do ins[#ins + 1] = io.dataset end
      for _, io in ipairs(n.outputs) do outs[#outs + 1] = io.dataset end
      rows[#rows + 1] = { index = #rows + 1, name = n.name, kind = n.kind, runs = where_runs(plan, i), inputs = ins,
                          outputs = outs, tags = n.tags,
                          distribution = plan.dists[i] and distributed.describe(plan.dists[i]) or nil,
                          dist = plan.dists[i], where = n.where, pool = n.pool }
    end
  end
  return rows
end

-- `flow list` and `flow catalog list`: the pipeline to describe, and --format.
local function pipeline_to_list(opts, pos, cmd)
  local fmt = opts.format or "table"
  if fmt ~= "table" and fmt ~= "json" then usage_error("--format must be table or json, got '%s'", fmt) end
  local path = script_path(pos, cmd)
  core.ui_setup("quiet")
  set_defaults(opts)
  local p = load_pipeline(path, opts.pipeline, "flow " .. cmd)
  if not p then usage_error("%s returns no pipeline; flow %s needs a script that returns one", path, cmd) end
  return p, fmt
end

local function cmd_list(args)
  local opts, pos = parse_args("list", args)
  if opts.help then print(HELP.list) return 0 end
  local p, fmt = pipeline_to_list(opts, pos, "list")
  local rows = list_rows(p, opts)
  if fmt == "json" then
    -- Every key present (null when absent), and lists as arrays even when empty.
    local null, list = core.json_null, core.json_list
    for _, r in ipairs(rows) do
      r.dist = r.dist and { framework = r.dist.framework, num_nodes = r.dist.num_nodes,
                            processes_per_node = r.dist.processes_per_node } or null
      r.distribution = r.distribution or null
      r.pool = r.pool or null
      r.inputs, r.outputs, r.tags = list(r.inputs), list(r.outputs), list({ table.unpack(r.tags) })
    end
    print(core.json_encode(list(rows), true))
    return 0
  end
  local header = { "#", "step", "runs", "inputs", "outputs", "tags", "distribution" }
  local pools = false                  -- a pool column only when a step asks for one
  for _, r in ipairs(rows) do pools = pools or r.pool ~= nil end
  if pools then table.insert(header, 7, "pool") end
  local cells = { header }
  for _, r in ipairs(rows) do
    local row = { tostring(r.index), r.name, r.runs, table.concat(r.inputs, ", "),
                  table.concat(r.outputs, ", "), table.concat(r.tags, ", "), r.distribution or "" }
    if pools then table.insert(row, 7, r.pool or "") end
    cells[#cells + 1] = row
  end
  print_table(cells)
  return 0
end

-- Every dataset the pipeline uses, in the order steps first mention it.
local function catalog_rows(p)
  local plan = runner.prepare(p, {})
  local cat, rows, by_name = plan.cat, {}, {}
  local function row(d, producer)
    if require("flow.dag").is_param_input(d) then return nil end
    if not by_name[d] then
      local e = cat:entry(d)
      local kind, path, where, from = e.type, e.path, nil, nil
      if e.type == "memory" and producer and producer.kind == "command" then
        -- a command's output the catalog does not name is a file, not a value
        kind, where, from = "file", ".flow/data/" .. core.safe_name(d), "not in the catalog (a command's output)"
        path = where
      elseif e.type == "memory" then
        where, from = "in memory (a file in .flow/data/ when a command reads it)", "not in the catalog"
      else
        where = e.uri or e.path
        if e.versioned then
          local versions = cat:versions(e)
          where = string.format("%s/<version>/ (versioned; %s)", e.path,
                                #versions > 0 and ("newest " .. versions[#versions]) or "no version yet")
        end
        from = e.pattern and string.format("pattern \"%s\" (%s)", e.pattern, e.origin) or e.origin
      end
      by_name[d] = { dataset = d, type = kind, path = path, versioned = e.versioned, where = where,
                     from = from, produced_by = nil, used_by = {} }
      rows[#rows + 1] = by_name[d]
    end
    return by_name[d]
  end
  for _, i in ipairs(plan.graph:order()) do
    local n = p.nodes[i]
    for _, io in ipairs(n.inputs) do
      local r = row(io.dataset)
      if r then r.used_by[#r.used_by + 1] = n.name end
    end
    for _, io in ipairs(n.outputs) do row(io.dataset, n).produced_by = n.name end
  end
  return rows
end

local function cmd_catalog(args)
  local opts, pos = parse_args("catalog", args)
  if opts.help then print(HELP.catalog) return 0 end
  if pos[1] == nil then usage_error("'flow catalog' needs a command: flow catalog list [SCRIPT]") end
  if pos[1] ~= "list" then usage_error("unknown catalog command '%s' (there is: list)", pos[1]) end
  table.remove(pos, 1)
  local p, fmt = pipeline_to_list(opts, pos, "catalog list")
  local rows = catalog_rows(p)
  if fmt == "json" then
    for _, r in ipairs(rows) do       -- every key present (null when absent), lists as arrays
      r.path, r.produced_by, r.used_by = r.path or core.json_null, r.produced_by or core.json_null, core.json_list(r.used_by)
    end
    print(core.json_encode(core.json_list(rows), true))
    return 0
  end
  local cells = { { "dataset", "type", "where", "from", "made by", "read by" } }
  for _, r in ipairs(rows) do
    cells[#cells + 1] = { r.dataset, r.type, r.where, r.from, r.produced_by or "-",
                          #r.used_by > 0 and table.concat(r.used_by, ", ") or "-" }
  end
  print_table(cells)
  return 0
end

local MAX_RUN_AGE = 36500 * 86400

local function cmd_clean(args)
  local opts, pos = parse_args("clean", args)
  if opts.help then print(HELP.clean) return 0 end
  if #pos > 1 then usage_error("'flow clean' takes at most the project directory, got %d arguments", #pos) end
  enter_project(pos[1])
  local older = util.parse_duration(opts["runs-older-than"] or "30d", true)
  if not older then
    usage_error("--runs-older-than needs a duration like 30d, 12h, 1h30m or 0s, got '%s'", opts["runs-older-than"])
  end
  if older > MAX_RUN_AGE then            -- (no run is that old; a larger age is a typo)
    usage_error("--runs-older-than must be at most 36500d (100 years), got '%s'", opts["runs-older-than"])
  end
  core.ui_setup("normal")
  local kind = core.exists(".flow")
  if kind == "file" then core.ui_error(".flow is not a directory: remove or rename it") return 2 end
  if kind ~= "directory" then core.ui_info("no .flow/ in " .. core.cwd() .. ": nothing to clean") return 0 end
  local c = require("flow.state").clean(older, opts.cache, opts["dry-run"])
  local verb = opts["dry-run"] and "would remove" or "removed"
  local parts = { string.format("%d run%s older than %s", c.runs, c.runs == 1 and "" or "s",
                                util.format_duration(older)) }
  if c.tmp > 0 then parts[#parts + 1] = string.format("%d temporary director%s", c.tmp, c.tmp == 1 and "y" or "ies") end
  if opts.cache then
    parts[#parts + 1] = string.format("%d unused cached value%s (%.1f MB)", c.values, c.values == 1 and "" or "s", c.bytes / 1e6)
    parts[#parts + 1] = string.format("%d stale file hash%s", c.hashes, c.hashes == 1 and "" or "es")
  end
  core.ui_info(verb .. " " .. table.concat(parts, ", "))
  return 0
end

-- The step a log file's stem (core.safe_name of the step) is of: the name
-- percent-decoded, or, for a long name the stem cut and ended with a hash
-- ('~', which the encoding never leaves), the step of the run's journal whose
-- safe name it is (steps_of: that map, read once per run); nil if none.
local function step_of_stem(stem, steps_of)
  if not stem:find("~", 1, true) then
    if stem == "%" then return "" end                 -- (an empty name)
    return (stem:gsub("%%(%x%x)", function(h) return string.char(tonumber(h, 16)) end))
  end
  local steps = steps_of()
  return steps[stem]
end

-- The step names of run `id`'s journal, by safe name.
local function journal_steps(id)
  local steps = {}
  local events = require("flow.state").read_journal(".flow/runs/" .. id .. "/journal.jsonl") or {}
  for _, ev in ipairs(events) do
    if type(ev.step) == "string" then steps[core.safe_name(ev.step)] = ev.step end
  end
  return steps
end

-- The newest logs of each step, by step name: { run =, files = {paths, rank
-- order} }.  Newest: the run whose log of it was written last.  (By name, not
-- by file name: `flow logs` lists names and `flow logs NAME` takes one.)
local function newest_logs()
  local cache = require("flow.cache")
  local by_step = {}
  for _, id in ipairs(core.list_dir(".flow/runs") or {}) do
    if id ~= "latest" then
      local dir = ".flow/runs/" .. id .. "/logs"
      local steps
      local function steps_of() steps = steps or journal_steps(id) return steps end
      for _, f in ipairs(core.list_dir(dir) or {}) do
        local stem, rank = f:match("^(.-)%+rank(%d+)%.log$")
        stem = stem or f:match("^(.-)%.log$")
        stem = stem and step_of_stem(stem, steps_of)
        if stem then
          local path = dir .. "/" .. f
          local _, mtime = cache.stat(path)
          local runs = by_step[stem] or {}
          by_step[stem] = runs
          local r = runs[id] or { run = id, files = {}, mtime = 0 }
          runs[id] = r
          r.files[#r.files + 1] = { path = path, rank = tonumber(rank) or -1 }
          r.mtime = math.max(r.mtime, mtime or 0)
        end
      end
    end
  end
  local newest = {}
  for stem, runs in pairs(by_step) do
    local best
    for _, r in pairs(runs) do
      if not best or r.mtime > best.mtime or (r.mtime == best.mtime and r.run > best.run) then best = r end
    end
    table.sort(best.files, function(a, b) return a.rank < b.rank end)
    for i, f in ipairs(best.files) do best.files[i] = f.path end
    newest[stem] = best
  end
  return newest
end

local function cmd_logs(args)
  local opts, pos = parse_args("logs", args)
  if opts.help then print(HELP.logs) return 0 end
  if #pos > 2 then usage_error("'flow logs' takes a step and a project directory, got %d arguments", #pos) end
  enter_project(pos[2])
  core.ui_setup("normal")
  local logs = newest_logs()
  local names = util.sorted_keys(logs)
  if not pos[1] then
    if #names == 0 then core.ui_info("no step logs in " .. core.cwd() .. "/.flow/runs") return 0 end
    local cells = { { "step", "run", "log" } }
    for _, name in ipairs(names) do
      local l = logs[name]
      cells[#cells + 1] = { name, l.run, table.concat(l.files, ", ") }
    end
    print_table(cells)
    return 0
  end
  local l = logs[pos[1]]
  if not l then
    usage_error("no log of step '%s' in %s/.flow/runs (a step that writes no output has none)%s",
                pos[1], core.cwd(),
                #names > 0 and (" (steps with logs: " .. table.concat(names, ", ") .. ")") or "")
  end
  for _, path in ipairs(l.files) do
    if opts.path then print(path)
    else
      if #l.files > 1 then io.write("==> " .. path .. " <==\n") end
      io.write(core.read_file(path) or "")
    end
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
  if type(opts.explain) == "string" and pos[1] then
    usage_error("give one KEY to explain: flow config %s --explain, or flow config --explain %s", opts.explain, opts.explain)
  end
  local explain = opts.explain and (pos[1] or opts.explain)
  if explain == true then usage_error("--explain needs a KEY: flow config --explain model.lr") end
  core.ui_setup("normal")
  local settings = require("flow.settings").load { conf = opts.conf, env = opts.env, params_spec = opts.params }
  local cfg = settings.cfg
  if not cfg then
    if opts.conf or core.exists("pipeline.lua") then
      if explain then usage_error("no configuration: there is no conf/ directory in %s", core.cwd()) end
      core.ui_info("no conf/ directory in " .. core.cwd() .. ": the configuration is empty")
      return 0
    end
    usage_error("not in a flow project: no conf/ directory and no pipeline.lua in %s "
                .. "(run flow config in the project, or give --conf DIR)", core.cwd())
  end
  local key_text = explain or pos[1]
  local section, key
  if key_text then section, key = split_key(key_text) end
  local text = cfg:dump(section, key, true)
  if not text then
    local near = key and cfg:closest(section, key)
    usage_error("no key '%s' in the %s of environment '%s'%s", key_text, section, settings.env,
                near and (" (did you mean '" .. near .. "'?)") or "")
  end
  if explain then text = cfg:explain(section, key or "") end
  io.write(text)
  if not text:match("\n$") then io.write("\n") end
  return 0
end

-- print for scripts and steps: the same text as Lua's, written so that it
-- keeps clear of the live progress display.
function M.print(...)
  local n = select("#", ...)
  local parts = {}
  for i = 1, n do parts[i] = tostring((select(i, ...))) end
  runner.print(table.concat(parts, "\t") .. "\n")
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

-- The Azure ML settings of environment `env` (conf/<env>/azureml.yml),
-- connected; an environment without them is a usage error.
local function azureml_of(opts, env)
  local settings = require("flow.settings").load { conf = opts.conf, env = env, params_spec = opts.params }
  local remote = require("flow.remote")
  local aml = remote.load(settings)
  if not aml then
    util.setup_error(string.format("environment '%s' has no Azure ML settings (conf/%s/azureml.yml)",
                                   settings.env, settings.env))
  end
  remote.connect(aml, false)
  return aml, settings
end

-- `flow CMD [RUN_ID] [DIR]`: the run's journal events, from the project, or
-- nil after printing the help.
local function run_command_events(cmd, args)
  local opts, pos = parse_args(cmd, args)
  if opts.help then print(HELP[cmd]) return nil end
  if #pos > 2 then usage_error("'flow %s' takes a run id and a project directory", cmd) end
  enter_project(pos[2])
  core.ui_setup("normal")
  return run_events(".", pos[1] or "latest", "flow " .. cmd)
end

-- flow cancel [RUN_ID] [DIR]
local function cmd_cancel(args)
  local events = run_command_events("cancel", args)
  if not events then return 0 end
  local start = require("flow.runs").start_of(events[1])
  local jobs = M.unfinished_jobs(events)
  local steps = util.sorted_keys(jobs)
  if #steps == 0 then
    core.ui_info(string.format("run %s left no Azure ML job running", start.run or "?"))
    return 0
  end
  local aml = azureml_of(run_config(start), start.env)
  local code = 0
  for _, step in ipairs(steps) do
    local r, err = aml:run_job { name = jobs[step].job, display_name = step, attach_only = true, cancel = true }
    if not r then
      core.ui_error(string.format("step '%s': %s", step, err))
      code = 1
    elseif r.error and r.status ~= "Canceled" then
      core.ui_error(string.format("step '%s': %s", step, r.error))
      code = 1
    else
      core.ui_info(string.format("step '%s': Azure ML job %s is %s", step, r.name, r.status))
    end
  end
  return code
end

-- What `flow status` prints of a run's journal (events, from run_events).
local function show_status(events, journal)
  local runs = require("flow.runs")
  local story = runs.story(events)
  local open = M.unfinished_jobs(events)
  if next(open) then                             -- ask Azure ML how those jobs are now
    local ok, aml = pcall(azureml_of, run_config(story.start), story.start.env)
    for name, j in pairs(open) do
      local st = story.steps[name]
      if not ok then st.status = "unknown (" .. (util.is_setup_error(aml) and aml.setup_error or tostring(aml)) .. ")"
      else
        local r, err = aml:run_job { name = j.job, display_name = name, peek = true }
        if r and r.status ~= "" then st.status, st.studio = r.status, r.studio or st.studio
        else st.status = "unknown (" .. tostring(r and r.error or err) .. ")" end
      end
    end
  end
  local code = story.code
  if code == nil then            -- no run_end: going, killed, or the journal lost its last lines
    local rec = runs.record((journal:gsub("/journal%.jsonl$", "")))
    if rec and rec.code then
      core.ui_warn(string.format("%s is damaged: it ends before the run's end, which run.json records "
                                 .. "(steps it has lost the end of show as running)", journal))
      code = rec.code
    end
  end
  local how = code == nil and "running, or stopped without a word (killed)"
              or code == 0 and "succeeded" or code == 130 and "interrupted" or "failed"
  print(string.format("run %s%s: %s", story.start.run or "?",
                      story.start.env and (" (env " .. story.start.env .. ")") or "", how))
  local cells = { { "step", "state", "time", "azure ml job" } }
  for _, name in ipairs(story.order) do
    local st = story.steps[name]
    local job = st.job and string.format("%s %s%s", st.job, st.status or "", st.studio and ("  " .. st.studio) or "") or ""
    cells[#cells + 1] = { name, st.state, st.elapsed and util.format_duration(st.elapsed) or "", job }
  end
  print_table(cells)
  return 0
end

-- flow status [RUN_ID] [DIR]
local function cmd_status(args)
  local events, journal = run_command_events("status", args)
  if not events then return 0 end
  return show_status(events, journal)
end

-- flow runs [DIR] / flow runs show [RUN_ID] [DIR]
local function cmd_runs(args)
  local opts, pos = parse_args("runs", args)
  if opts.help then print(HELP.runs) return 0 end
  local history = require("flow.runs")
  if pos[1] == "show" then
    if opts.n or opts.all or opts.format then usage_error("flow runs show takes no -n, --all or --format") end
    table.remove(pos, 1)
    if #pos > 2 then usage_error("'flow runs show' takes a run id and a project directory") end
    enter_project(pos[2])
    core.ui_setup("normal")
    local events, journal = run_events(".", pos[1] or "latest", "flow runs show")
    local id = journal:match("([^/]+)/journal%.jsonl$")
    if id == "latest" then id = core.readlink(".flow/runs/latest") or id end
    local r = history.describe(id)
    if r then
      print(string.format("run      %s\nstarted  %s\ncommand  %s\nenv      %s\nstatus   %s%s\ntime     %s\nsteps    %s",
        r.id, history.when(r.started), r.command, r.env or "?", r.status,
        r.code and string.format(" (exit status %d)", r.code) or "", history.duration(r.elapsed),
        history.counts_text(r.counts)))
      if r.resumes then print("resumes  " .. r.resumes) end
      if r.metrics then print("metrics  " .. require("flow.metrics").describe(r.metrics)) end
      print()
    end
    return show_status(events, journal)
  end
  if #pos > 1 then usage_error("'flow runs' takes a project directory (or: flow runs show [RUN_ID] [DIR])") end
  if opts.n and opts.all then usage_error("-n and --all contradict each other") end
  local limit = opts.all and math.huge or opts.n and positive_int(opts.n, "-n", 1000000) or 20
  local fmt = opts.format or "table"
  if fmt ~= "table" and fmt ~= "json" then usage_error("--format must be table or json, got '%s'", fmt) end
  enter_project(pos[1])
  local shown, total = history.list(limit)
  if fmt == "json" then
    local null = core.json_null
    for _, r in ipairs(shown) do
      for _, k in ipairs({ "code", "elapsed", "env", "name", "started", "script", "resumes", "metrics" }) do
        if r[k] == nil then r[k] = null end
      end
      r.pipeline_job = r.pipeline_job or false
    end
    print(core.json_encode(core.json_list(shown), true))
    return 0
  end
  if #shown == 0 then
    core.ui_setup("normal")
    core.ui_info("no runs yet in " .. core.cwd())
    return 0
  end
  local cells = { { "run", "started", "status", "time", "steps", "env", "command" } }
  for _, r in ipairs(shown) do
    cells[#cells + 1] = { r.id, history.when(r.started), r.status, history.duration(r.elapsed),
                          history.counts_text(r.counts), r.env or "", r.command }
  end
  print_table(cells)
  if total > #shown then
    print(string.format("(%d older run%s: flow runs --all)", total - #shown, total - #shown == 1 and "" or "s"))
  end
  return 0
end

-- flow repl [SCRIPT]
local function cmd_repl(args)
  local opts, pos = parse_args("repl", args)
  if opts.help then print(HELP.repl) return 0 end
  if #pos > 1 then usage_error("'flow repl' takes one script, got %d arguments", #pos) end
  core.ui_setup("normal")
  set_defaults(opts)
  runner.defaults.args, runner.defaults.cwd = args, core.cwd()
  local project = { env = opts.env or os.getenv("FLOW_ENV") }
  local path = (pos[1] or core.exists("pipeline.lua")) and script_path(pos, "repl") or nil
  if path then
    local cwd = core.cwd()                   -- the script is read from here each time, named as given
    local known = {}                         -- modules loaded before the script: kept by reload()
    for name in pairs(package.loaded) do known[name] = true end
    project.script = path:match("([^/]*)$")
    function project.reload()
      for name in pairs(package.loaded) do
        if not known[name] then package.loaded[name] = nil end
      end
      for k in pairs(pipeline.registry) do pipeline.registry[k] = nil end
      core.chdir(cwd)
      local p = load_pipeline(path, opts.pipeline)
      if not p then usage_error("%s ran its own pipelines; flow repl needs a script that returns one", path) end
      project.pipeline, project.plan = p, runner.prepare(p, {})
    end
    project.reload()
  end
  return require("flow.repl").main(project)
end

-- flow new NAME
local function cmd_new(args)
  local opts, pos = parse_args("new", args)
  if opts.help then print(HELP.new) return 0 end
  if #pos ~= 1 then usage_error("flow new takes one project name (the directory to create)") end
  core.ui_setup("normal")
  local files = require("flow.new").create(pos[1])
  core.ui_info(string.format("created %s/: %s", pos[1]:gsub("/+$", ""), table.concat(files, ", ")))
  core.ui_info(string.format("next: cd %s && flow run", require("flow.command").shell_quote(pos[1])))
  return 0
end

-- flow azureml whoami
local function cmd_azureml(args)
  local opts, pos = parse_args("azureml", args)
  if opts.help or #pos == 0 then print(HELP.azureml) return opts.help and 0 or 2 end
  if pos[1] ~= "whoami" then usage_error("unknown azureml command '%s' (there is: whoami)", pos[1]) end
  core.ui_setup("normal")
  set_defaults(opts)
  local aml, settings = azureml_of(opts, runner.defaults.env)
  local info = aml:info()
  local who, err, expires = aml:whoami()
  print("credential: " .. who)
  print(string.format("workspace:  %s (resource group %s, subscription %s), environment '%s'",
                      info.workspace, info.resource_group, info.subscription_id, settings.env))
  if err then
    core.ui_error("no token: " .. err)
    return 1
  end
  print(string.format("token:      valid for %s", util.format_duration(math.max(0, math.floor(expires)))))
  return 0
end

-- --grid KEY=V1,V2 (each given once) -> {KEY = {values}}
local function parse_grid(list)
  local grid = {}
  for _, g in ipairs(list) do
    local key, values = g:match("^([^=]+)=(.*)$")
    if not key or values == "" then usage_error("--grid takes KEY=V1,V2,..., got '%s'", g) end
    if key:find("^%.") or key:find("%.$") or key:find("%.%.") then
      usage_error("--grid %s: a parameter key (like lr or model.depth), got '%s'", g, key)
    end
    if grid[key] then usage_error("--grid %s is given twice: list its values in one --grid", key) end
    -- each value typed as --params types one (True, 0x10, null: "False" as
    -- text was true in Lua); "a,b" quoted, [1, 2] a list
    local t, err = require("flow.config").parse_values(values, "--grid " .. key)
    if not t then usage_error("%s", err) end
    grid[key] = t
  end
  return grid
end

-- --open: the page's path, and the page in a browser when there is a
-- display to show it on (xdg-open, in the background).
local function open_page(path)
  local full = core.cwd() .. "/" .. path
  print(full)
  local display = (os.getenv("DISPLAY") or "") ~= "" or (os.getenv("WAYLAND_DISPLAY") or "") ~= ""
  if display and os.execute("command -v xdg-open >/dev/null 2>&1") then
    os.execute("xdg-open " .. require("flow.command").shell_quote(full) .. " >/dev/null 2>&1 &")
  end
end

-- What flow sweep's flags ask of flow.sweep (less the pipeline).
local function sweep_options(opts)
  if opts.resume then           -- the sweep's own trials, metric and parameters
    for _, flag in ipairs({ "grid", "metric", "goal", "random", "seed", "params", "env", "early-stop", "parallel",
                            "no-sweep-job" }) do
      if opts[flag] then
        usage_error("--resume keeps the sweep's trials, metric and parameters: --%s cannot change them", flag)
      end
    end
    return { resume = opts.resume }
  end
  if not opts.grid then usage_error("flow sweep needs --grid KEY=V1,V2,... (one for each parameter to sweep)") end
  if not opts.metric or opts.metric == "" then
    usage_error("flow sweep needs --metric NAME: the metric that ranks the trials")
  end
  if opts.goal and opts.goal ~= "min" and opts.goal ~= "max" then
    usage_error("--goal must be min or max, got '%s'", opts.goal)
  end
  if opts.seed and not opts.random then usage_error("--seed is the seed of --random N") end
  local seed = opts.seed and (opts.seed:match("^%-?%d+$") and math.tointeger(tonumber(opts.seed))
                              or usage_error("--seed needs a whole number, got '%s'", opts.seed))
  local random = opts.random and positive_int(opts.random, "--random", 1000000)
  local grid = parse_grid(opts.grid)
  local stop
  if opts["early-stop"] then
    local why
    stop, why = require("flow.early_stop").parse(opts["early-stop"])
    if stop then      -- checked here as flow.sweep checks it, to name the flag
      local ok, err = pcall(require("flow.early_stop").check, stop, 1)
      if not ok then stop, why = nil, tostring(err):gsub("^.-flow%.sweep: early_stop: ", "") end
    end
    if not stop then usage_error("--early-stop: %s (POLICY[,key=value,...], e.g. bandit,slack_factor=0.1,after=2)", why) end
  end
  return { grid = not random and grid or nil, space = random and grid or nil, sampler = random and "random" or "grid",
           trials = random, seed = seed, metric = opts.metric, goal = opts.goal, early_stop = stop,
           parallel = opts.parallel and positive_int(opts.parallel, "--parallel", 1000000),
           sweep_job = opts["no-sweep-job"] ~= true }
end

local function cmd_sweep(args)
  local opts, pos = parse_args("sweep", args)
  if opts.help then print(HELP.sweep) return 0 end
  local o = sweep_options(opts)
  o.jobs = opts.jobs and positive_int(opts.jobs, "--jobs", require("flow.sched").MAX_JOBS)
  o.force = opts.force
  local path = script_path(pos, "sweep")
  set_log_format(opts)
  core.ui_setup(opts.quiet and "quiet" or "normal", "auto")
  set_defaults(opts)
  runner.defaults.args, runner.defaults.cwd = args, core.cwd()
  o.pipeline = load_pipeline(path, opts.pipeline)
  if not o.pipeline then usage_error("%s ran its own pipelines; flow sweep needs a script that returns one", path) end
  local trials = require("flow.sweep").sweep(o)
  if opts.open then open_page(trials.dir .. "/report.html") end
  return runner.last_code
end

-- -o FILE: text written to FILE.  A regular file (or none yet) is replaced
-- at once (a temporary file renamed over it); through a symbolic link, the
-- file the link names is, and the link stays; a FIFO or a device
-- (/dev/stdout) is written to, as a shell redirection would, never replaced.
local function write_output(out, text)
  for _ = 1, 40 do                     -- (as many links as the kernel follows)
    local target = core.readlink(out)
    if not target then break end
    out = target:sub(1, 1) == "/" and target or ((out:match("^(.*)/") or ".") .. "/" .. target)
  end
  local kind = core.exists(out)
  if kind == "directory" then usage_error("--output %s is a directory", out) end
  if kind ~= "other" then return core.write_atomic(out, text) end
  local f, err = io.open(out, "w")       -- (its message names the file)
  if f then
    local ok, werr = f:write(text)
    local closed, cerr = f:close()
    err = not ok and werr or not closed and cerr or nil
    if err then err = out .. ": " .. err end
  end
  if err then script_error("cannot write " .. err) end
end

-- v with every string masked (the configuration's secrets), tables copied:
-- before a format escapes them (DOT's \", JSON's \u003c in a page), after
-- which the masker would no longer find a secret that holds such a character.
local function masked(v, seen)
  if type(v) == "string" then return require("flow.config").redact(v) end
  if type(v) ~= "table" then return v end
  seen = seen or {}
  if seen[v] then return seen[v] end
  local t = {}
  seen[v] = t
  for k, x in pairs(v) do t[masked(k, seen)] = masked(x, seen) end
  return setmetatable(t, getmetatable(v))
end

local function cmd_viz(args)
  local opts, pos = parse_args("viz", args)
  if opts.help then print(HELP.viz) return 0 end
  local fmt = opts.format or "dot"
  if fmt ~= "dot" and fmt ~= "mermaid" and fmt ~= "html" then
    usage_error("--format must be dot, mermaid or html, got '%s'", fmt)
  end
  local out = opts.output
  if out == "" then usage_error("--output needs a file name") end
  if out and out:sub(1, 1) ~= "/" then out = core.cwd() .. "/" .. out end   -- before the script's directory
  local path = script_path(pos, "viz")
  core.ui_setup("quiet")
  set_defaults(opts)
  local p = load_pipeline(path, opts.pipeline, "flow viz")
  if not p then usage_error("%s returns no pipeline; flow viz needs a script that returns one", path) end
  local viz = require("flow.viz")
  local states, run_id
  if opts.run then
    local events, journal = run_events(".", opts.run == true and "latest" or opts.run, "--run")
    states = viz.run_states((journal:gsub("journal%.jsonl$", "run.json"))) or viz.journal_states(events)
    run_id = journal:match("([^/]+)/journal%.jsonl$")
    if run_id == "latest" then run_id = core.readlink(".flow/runs/latest") or run_id end
  end
  local plan = runner.prepare(p, {})
  local m = viz.model(plan, function(i) return where_runs(plan, i) end, distributed.describe, states)
  local text
  if fmt == "html" then
    if states then                     -- each step's newest log, its tail (as flow logs finds it)
      local logs = newest_logs()
      for _, st in ipairs(m.steps) do
        local l = logs[st.name]
        st.log = l and viz.tail(l.files[1], 40) or nil
      end
    end
    m = masked(m)
    text = require("flow.viz_html").html(m, { title = "flow viz: " .. path, run = run_id })
  else
    m = masked(m)
    text = fmt == "dot" and viz.dot(m) or viz.mermaid(m)
  end
  text = require("flow.config").redact(text)   -- (a command's text may embed a credential)
  if out then write_output(out, text) else io.write(text) end
  return 0
end

local function cmd_compile(args)
  local opts, pos = parse_args("compile", args)
  if opts.help then print(HELP.compile) return 0 end
  local out = opts.output
  if out == "" then usage_error("--output needs a file name") end
  if out and out:sub(1, 1) ~= "/" then out = core.cwd() .. "/" .. out end   -- before the script's directory
  local base_dir = out and out:match("^(.*)/[^/]*$") or core.cwd()
  local path = script_path(pos, "compile")
  core.ui_setup("normal")
  set_defaults(opts)
  local p = load_pipeline(path, opts.pipeline, "flow compile")
  if not p then usage_error("%s returns no pipeline; flow compile needs a script that returns one", path) end
  local compile = require("flow.compile")
  local plan = runner.prepare(p, slicing_options(opts))
  local text = compile.yaml(compile.document(compile.model(plan, runner.defaults), base_dir))
  if out then write_output(out, text) else io.write(text) end
  -- (the rules az ml reads, as the code snapshot reads them; a file that
  -- cannot be read is for the snapshot to report)
  if core.exists(".flow") and require("flow.azureml").code_ignores(".", ".flow") == false then
    core.ui_warn("az ml uploads the code directory as .amlignore (else .gitignore) says, and neither leaves out "
      .. ".flow/ (flow's runs and cached data): add a line '.flow/' to .amlignore")
  end
  return 0
end

local COMMANDS = { run = cmd_run, list = cmd_list, sweep = cmd_sweep, viz = cmd_viz, compile = cmd_compile,
                   config = cmd_config, catalog = cmd_catalog,
                   clean = cmd_clean, logs = cmd_logs, cancel = cmd_cancel, azureml = cmd_azureml,
                   status = cmd_status, runs = cmd_runs, new = cmd_new, repl = cmd_repl,
                   __step = cmd_step }

local function dispatch(args)
  local cmd = args[1]
  if cmd == nil or cmd == "-h" or cmd == "--help" then print(USAGE) return cmd and 0 or 2 end
  if cmd == "--version" or cmd == "version" then
    print("flow " .. require("flow").VERSION .. " (" .. _VERSION .. ")")
    return 0
  end
  if cmd == "help" then
    local topic = args[2]
    if topic == "-h" or topic == "--help" then topic = "help" end
    if topic and HELP[topic] then print(HELP[topic]) return 0 end
    if topic then
      usage_error("no command '%s'%s", topic, util.did_you_mean(topic, util.sorted_keys(HELP)))
    end
    print(USAGE)
    return 0
  end
  local fn = COMMANDS[cmd]
  if not fn then
    usage_error("unknown command '%s'%s", cmd, util.did_you_mean(cmd, util.sorted_keys(HELP)))
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
    local cmd = args[1]
    local topic = HELP[cmd] and cmd ~= "help" and ("flow " .. cmd .. " --help") or "flow --help"
    core.ui_error(ret.usage .. "\n(see '" .. topic .. "')")
    return 2
  elseif type(ret) == "table" and ret.script then
    core.ui_error(ret.script)
    return 2
  elseif util.is_setup_error(ret) then
    core.ui_error(ret.setup_error)
    return 2
  elseif util.is_fs_error(ret) then       -- before any step ran: the message says what to do
    core.ui_error(ret.fs_error)
    return 2
  end
  error(ret, 0)
end

return M
