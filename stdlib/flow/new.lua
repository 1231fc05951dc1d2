-- flow.new: `flow new NAME`, a project that runs at once with `flow run`:
-- a pipeline with a Lua step, a command step and metrics; parameters and a
-- catalog in conf/base; conf/local for what stays on this machine
-- (credentials), ignored by git; .gitignore and .amlignore that leave out
-- .flow/; a README saying what to do next.
local core = require("flow.core")
local util = require("flow.util")

local M = {}

local FILES = {
  { "pipeline.lua", [==[
-- {{name}}: a flow pipeline.
--   flow run                      run it (steps that did not change do not run again)
--   flow run --params min_count=3 with other parameters
--   flow list / flow viz          its steps
local flow = require("flow")

-- A Lua step takes its inputs as arguments and returns its outputs.  `raw`
-- is a catalog dataset (conf/base/catalog.yml: the text of data/words.txt).
local function count_words(text)
  local counts = {}
  for word in text:lower():gmatch("%a+") do counts[word] = (counts[word] or 0) + 1 end
  return counts
end

-- metrics = true: the table returned after the outputs is the step's metrics
-- (flow sweep ranks trials by them).
local function keep_frequent(counts, min_count)
  local kept, n = {}, 0
  for word, c in pairs(counts) do
    if c >= min_count then kept[word] = c; n = n + 1 end
  end
  return kept, { kept_words = n }
end

return pipeline{
  node{ func = count_words, inputs = "raw", outputs = "counts" },
  node{ func = keep_frequent, inputs = { "counts", "params:min_count" }, outputs = "frequent", metrics = true },
  -- A command step: ${inputs.x} is a file (a Lua value arrives as JSON),
  -- ${outputs.y} the path it writes.
  node{ command = [=[grep -o '"[a-z]*":[[:space:]]*[0-9]*' ${inputs.frequent} | tr -d '"' | sort > ${outputs.report}]=],
        inputs = "frequent", outputs = "report", name = "write_report" },
}
]==] },
  { "conf/base/parameters.yml", [[
# Parameters every environment starts from; conf/<env>/parameters.yml overrides them.
min_count: 2
]] },
  { "conf/base/catalog.yml", [[
# Datasets that live outside flow (files, folders, datastores); everything
# else passes between steps in memory or under .flow/.
raw:
  type: text
  path: data/words.txt
report:
  type: file
  path: data/report.txt
]] },
  { "conf/local/README.md", [[
conf/local: settings for this machine only (credentials.yml, a parameters.yml
of your own).  Nothing here is committed: see .gitignore beside this file.
`flow run` uses conf/base + conf/local unless --env names another environment.
]] },
  { "conf/local/.gitignore", [[
*
!.gitignore
!README.md
]] },
  { "data/words.txt", [[
The quick brown fox jumps over the lazy dog. The dog sleeps; the fox runs.
A quick fox is a happy fox.
]] },
  { "src/README.md", [[
src/: the code your command steps run (python src/train.py ...).  It goes to
Azure ML with the project when a step runs there.
]] },
  { ".gitignore", [[
# flow's runs, caches and data
.flow/
]] },
  { ".amlignore", [[
# what Azure ML does not need in the code snapshot (`flow compile`: az ml reads this too)
.flow/
data/
]] },
  { "README.md", [[
# {{name}}

A pipeline run by flow, the workflow engine for ML pipelines that train on
Azure Machine Learning.

    flow run                        # run the pipeline
    flow run --params min_count=3   # with other parameters
    flow list                       # its steps; flow viz draws them
    flow sweep --grid min_count=1,2,3 --metric kept_words --goal max

- `pipeline.lua` — the steps.
- `conf/base/` — parameters and the data catalog; `conf/<env>/` overrides them
  (`flow run --env prod`), `conf/local/` holds what stays on this machine.
- `data/` — the data the catalog names; `src/` — code for command steps.
- `.flow/` — flow's runs and cache (not committed).

To run steps on Azure ML, add `conf/prod/azureml.yml` (see flow's docs/azureml.md).
]] },
}

-- Why `name` cannot be a new project's directory, or nil.
local function problem(path)
  if path == "" then return "flow new needs a project name (a directory to create)" end
  -- (the name goes into the files made: a newline would end pipeline.lua's comment)
  local bad = path:find("[%z\1-\31\127]")
  if bad then
    return string.format("flow new: the project name cannot contain a control character (byte %d at %d)",
                         path:byte(bad), bad)
  end
  local kind = core.exists(path)
  if kind == "file" or (kind and kind ~= "directory") then return string.format("'%s' exists and is not a directory", path) end
  if kind == "directory" and #(core.list_dir(path) or {}) > 0 then
    return string.format("'%s' exists and is not empty: flow new makes a new project", path)
  end
  return nil
end

-- Creates the project at `path` (relative or absolute); returns the files written.
function M.create(path)
  local why = problem(path)
  if why then util.setup_error(why) end
  local name = (path:gsub("/+$", ""):match("([^/]+)$")) or path
  local written = {}
  for _, f in ipairs(FILES) do
    local file = path .. "/" .. f[1]
    core.mkdir_p(file:match("^(.*)/[^/]*$"))
    core.write_atomic(file, (f[2]:gsub("{{name}}", function() return name end)))
    written[#written + 1] = f[1]
  end
  return written
end

return M
