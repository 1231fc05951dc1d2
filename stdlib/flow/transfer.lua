-- flow.transfer: the data of a step on Azure ML as it crosses between this
-- machine and the workspace's datastore (engine/azureml/blob.c moves the
-- bytes; this file decides what goes where).
--   inputs   made here (a Lua value as its JSON/text file, a file, a folder):
--            uploaded to flow/<project>/<content hash>/<name>, so unchanged
--            data is never sent twice; made by another job: its output's
--            datastore path, bound as it is (no round trip through here)
--   outputs  each bound to flow/<project>/runs/<job>/<output>; downloaded
--            after the job when a step here or the catalog needs it (into
--            .flow/tmp/azureml/<job>/, then committed like any output),
--            else recorded as a reference to that datastore path
--   catalog  an entry on a datastore (flow.catalog): a job binds its path;
--            a step here gets a copy brought down first, and what it writes
--            is sent up; one no step makes is looked at (not moved) before
--            the run, for its consumers' fingerprints
-- Methods of the run object (flow.runner mixes them in).
local core = require("flow.core")
local dag = require("flow.dag")
local failure = require("flow.failure")
local values = require("flow.values")
local catalog = require("flow.catalog")
local util = require("flow.util")
local remote = require("flow.remote")

local step_failure = failure.new

local M = {}
local Run = {}
M.methods = Run

M.DOWNLOADS = ".flow/tmp/azureml"

-- Where this run's downloads wait: .flow/tmp/azureml/, where a resumed run
-- finds what had finished; a run among others at once (flow.spawn) has a
-- folder of its own there, as two may fetch the same job's output.
function Run:downloads()
  return self.downloads_dir or M.DOWNLOADS
end

-- The project's name in datastore paths: its directory's, as the code
-- asset's (letters, digits, - and _).
function M.project_name(root)
  local base = root:match("([^/]+)/*$") or "project"
  return (base:gsub("[^%w_-]", "-"))
end

-- The reference a job's output leaves when nothing here needs its bytes
-- ({azureml = uri, type = uri_file|uri_folder, job = name}), if dataset d
-- is one.  Only a value without a path can be (so no file is decoded).
function Run:remote_ref(d)
  local v = self.values[d]
  if not v or v.path then return nil end
  local ok, value = pcall(self.value_of, self, d)
  if ok and type(value) == "table" and type(value.azureml) == "string" and type(value.job) == "string" then
    return value
  end
end

-- Where dataset d lives on a datastore, if it does: {uri =, type =}.
function Run:datastore_ref(d)
  local v = self.values[d]
  if v and v.uri then return { uri = v.uri, type = v.uri_type } end
  local ref = self:remote_ref(d)
  return ref and { uri = ref.azureml, type = ref.type } or nil
end

local function settings(self)
  return require("flow.remote").info(self.aml)
end

-- Where job `job`'s output `output` lands on `datastore` when the catalog
-- does not say: azureml://datastores/<ds>/paths/flow/<project>/runs/<job>/<output>,
-- then /<file> for a uri_file output.  `job` may be an expression Azure ML
-- fills in (${{name}}: a pipeline's child, a sweep's trial) or a path under
-- the job (<job>/trials/${{name}}).  A run, flow compile and a sweep job
-- all place outputs so.
function M.output_uri(datastore, project, job, output, file)
  local path = string.format("flow/%s/runs/%s/%s", project, job, output)
  return catalog.datastore_uri(datastore, file and path .. "/" .. file or path)
end

-- Dataset d, here at path (content hash `hash`), uploaded to the datastore
-- where unchanged data is never sent twice: flow/<project>/<hash>/<name>.
-- Returns its binding's type and uri, or nil and why not.
function M.upload_input(aml, datastore, root, d, path, hash, step)
  local folder = core.exists(path) == "directory"
  local name = folder and core.safe_name(d) or path:match("([^/]+)$")
  local blob = string.format("flow/%s/%s/%s", M.project_name(root), hash:gsub("^sha256:", ""), name)
  local r, why = aml:transfer { op = "upload", datastore = datastore, blob = blob, path = path, folder = folder,
                                step = step, label = string.format("input '%s'", d) }
  if not r then return nil, why end
  return folder and "uri_folder" or "uri_file", catalog.datastore_uri(datastore, blob)
end

-- The job's input bindings of step n, uploading what is here.
function Run:bind_inputs(n, mode, fail)
  local info, bindings = settings(self), {}
  local names = remote.io_names(n)
  for k, io in ipairs(n.inputs) do
    local d = io.dataset
    if not dag.is_param_input(d) then
      local ref = self:datastore_ref(d)
      if ref then
        bindings[#bindings + 1] = { name = names.inputs[k], type = ref.type, uri = ref.uri, mode = mode }
      else
        local path = self:input_path(d, n)
        local kind, uri = M.upload_input(self.aml, info.datastore, self.root, d, path, self:hash_of(d), n.name)
        if not kind then fail(uri) end
        bindings[#bindings + 1] = { name = names.inputs[k], type = kind, uri = uri, mode = mode }
      end
    end
  end
  return bindings
end

-- Dataset d, at `uri` ({type =} of a binding) on a datastore, brought here
-- by step n and committed as its local value; the download waits in
-- .flow/tmp/azureml/<job>/ (a resumed run keeps what had finished).
-- Returns the output record, or raises the step's failure.
function Run:fetch(n, d, uri, type, job, label)
  local datastore, blob = catalog.parse_datastore_uri(uri)
  local dest = string.format("%s/%s/%s", self:downloads(), job, core.safe_name(d))
  local r, why = self.aml:transfer { op = "download", datastore = datastore, blob = blob, path = dest,
                                    folder = type == "uri_folder", step = n.name, label = label }
  if not r then error(step_failure { message = string.format("step '%s': %s", n.name, why) }) end
  local e = self.cat:entry(d)
  local problem = values.typed_problem(e, d, dest)
  if problem then
    error(step_failure { message = string.format("step '%s': dataset '%s' from Azure ML %s", n.name, d, problem) })
  end
  self:ready_to_commit(n, { [d] = dest })
  local rec = self:commit(d, e, dest, n)
  rec.uri, rec.uri_type = uri, type
  self.values[d].uri, self.values[d].uri_type = uri, type
  return rec
end

-- Before step n (here) reads dataset d: a job's output left on the
-- datastore (its step up to date from a run in which nothing here read it)
-- is brought here.  Once per dataset and run; a second reader waits.
function Run:localize(d, n)
  local ref = self:only_on_datastore(d)
  if not ref then return end
  self.localizing = self.localizing or {}
  while self.localizing[d] do require("flow.proc").sleep(0.05) end
  if not self:only_on_datastore(d) then return end            -- the other reader brought it
  self.localizing[d] = true
  local ok, err = pcall(self.fetch, self, n, d, ref.uri, ref.type, ref.job, string.format("dataset '%s'", d))
  self.localizing[d] = nil
  if not ok then error(err, 0) end                   -- what had finished waits for the next try
  core.remove_tree(self:downloads() .. "/" .. ref.job)
end

-- Dataset d when only a datastore has it: {uri =, type =, job =} (job: the
-- name its download waits under), or nil.
function Run:only_on_datastore(d)
  local ref = self:remote_ref(d)
  if ref then return { uri = ref.azureml, type = ref.type, job = ref.job } end
  local v = self.values[d]
  if v and v.uri and not v.path then
    return { uri = v.uri, type = v.uri_type, job = "catalog-" .. core.safe_name(d) }
  end
end

-- After step n, here, committed output d of catalog entry e that lives on a
-- datastore: it goes up there (only what changed is sent).
function Run:publish(n, d, e, rec)
  local r, why = self.aml:transfer { op = "upload", datastore = e.datastore, blob = e.blob, path = rec.path,
                                    folder = core.exists(rec.path) == "directory", step = n.name,
                                    label = string.format("output '%s'", d) }
  if not r then error(step_failure { message = string.format("step '%s': %s", n.name, why) }) end
  rec.uri, rec.uri_type = e.uri, catalog.uri_type(e)
  self.values[d].uri, self.values[d].uri_type = rec.uri, rec.uri_type
end

-- Before a job of step n is submitted: each output folder the catalog keeps
-- on a datastore is emptied (an empty folder uploaded, which deletes what is
-- under it: blob.h), as a folder output here starts empty: an earlier run's
-- files would stay beside what the job writes, read as its, and the folder
-- would hash as it was.  Its copy here goes too: the record of the run that
-- made what was emptied no longer stands (a job that fails now must not
-- leave the step up to date for the earlier parameters, its folder gone).
function Run:clear_datastore_folders(n)
  for _, io in ipairs(n.outputs) do
    local e = self.cat:entry(io.dataset)
    if e.uri and e.type == "folder" then
      core.remove_tree(self.cat:save_path(e))
      local empty = self.tmp_dir .. "/empty~"
      core.mkdir_p(empty)
      local r, why = self.aml:transfer { op = "upload", datastore = e.datastore, blob = e.blob, path = empty,
                                        folder = true, step = n.name,
                                        label = string.format("output '%s' (emptied for the job)", io.dataset) }
      if not r then error(step_failure { message = string.format("step '%s': %s", n.name, why) }) end
    end
  end
end

-- Before the run: what the catalog's datastore entries that no selected
-- step makes hold now, as their consumers' input hashes.  One that is not
-- there stops the run, as a missing file does.
function Run:stat_datastore_inputs()
  local missing = {}
  for d, v in pairs(self.values) do
    if v.uri and not v.path and not v.hash and v.entry then
      local e = v.entry
      local r, why = self.aml:transfer { op = "stat", datastore = e.datastore, blob = e.blob,
                                        folder = e.type == "folder", label = string.format("dataset '%s'", d) }
      if r then v.hash = "datastore:" .. r.hash
      else missing[#missing + 1] = string.format("  '%s' (%s dataset, %s): %s", d, e.type, e.origin, why) end
    end
  end
  if #missing > 0 then
    table.sort(missing)
    util.setup_error("the pipeline reads datasets that are not on their datastore:\n" .. table.concat(missing, "\n"))
  end
end

-- The job's output bindings of step n, run as job `job`.
function Run:bind_outputs(n, job, mode)
  local info, bindings = settings(self), {}
  local names = remote.io_names(n)
  for k, io in ipairs(n.outputs) do
    local e = self.cat:entry(io.dataset)
    local kind, file = self.cat:job_output(e, io)
    -- the catalog keeps it on a datastore: there; else the job's own place
    local uri = e.uri or M.output_uri(info.datastore, M.project_name(self.root), job, io.arg, file)
    bindings[#bindings + 1] = { name = names.outputs[k], dataset = io.dataset, type = kind, uri = uri, mode = mode }
  end
  return bindings
end

-- After job `job` of step n completed: each output downloaded when needed
-- here, else a reference.  A dataset the catalog keeps on a datastore is
-- always brought here: its local copy is what its record and its readers'
-- fingerprints name (as a raw one's is), and a reference is no value of its
-- type (the step failed: "returns the path of the folder it wrote, got
-- table").  Returns the step's output records.
function Run:fetch_outputs(n, job, bindings, downloads)
  local by, fetched = {}, {}
  for _, b in ipairs(bindings) do
    fetched[b.dataset] = downloads[b.dataset] or self.cat:entry(b.dataset).uri ~= nil
    if not fetched[b.dataset] then by[b.dataset] = { azureml = b.uri, type = b.type, job = job } end
  end
  local outs = next(by) and self:save_values(n, by) or {}
  for _, b in ipairs(bindings) do
    if fetched[b.dataset] then
      outs[b.dataset] = self:fetch(n, b.dataset, b.uri, b.type, job, string.format("output '%s'", b.dataset))
      if b.name == "metrics" then self:read_metrics(n, b.dataset, outs[b.dataset].path, "job " .. job) end
    end
  end
  core.remove_tree(self:downloads() .. "/" .. job)
  return outs
end

return M
