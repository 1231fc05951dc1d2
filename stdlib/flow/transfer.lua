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
-- Methods of the run object (flow.runner mixes them in).
local core = require("flow.core")
local dag = require("flow.dag")
local failure = require("flow.failure")
local catalog = require("flow.catalog")
local cache = require("flow.cache")

local step_failure = failure.new

local M = {}
local Run = {}
M.methods = Run

M.DOWNLOADS = ".flow/tmp/azureml"

function M.datastore_uri(datastore, path)
  return "azureml://datastores/" .. datastore .. "/paths/" .. path
end

-- The project's name in datastore paths: its directory's, as the code
-- asset's (letters, digits, - and _).
local function project_name(root)
  local base = root:match("([^/]+)/*$") or "project"
  return (base:gsub("[^%w_-]", "-"))
end

-- A dataset on a datastore: the reference a remote step's output leaves
-- when nothing here needs its bytes.
local function remote_ref(v)
  return type(v) == "table" and type(v.azureml) == "string" and type(v.job) == "string" and v or nil
end

-- Where dataset d lives on a datastore, if it does: {uri =, type =}.
function Run:datastore_ref(d)
  local v = self.values[d]
  if not v then return nil end
  if v.uri then return { uri = v.uri, type = v.uri_type } end
  if v.path then return nil end
  local ok, value = pcall(self.value_of, self, d)
  local ref = ok and remote_ref(value)
  return ref and { uri = ref.azureml, type = ref.type } or nil
end

local function settings(self)
  return require("flow.remote").info(self.aml)
end

-- The job's input bindings of step n, uploading what is here.
function Run:bind_inputs(n, mode, fail)
  local info, bindings = settings(self), {}
  for _, io in ipairs(n.inputs) do
    local d = io.dataset
    if not dag.is_param_input(d) then
      local ref = self:datastore_ref(d)
      if ref then
        bindings[#bindings + 1] = { name = io.arg, type = ref.type, uri = ref.uri, mode = mode }
      else
        local path = self:input_path(d)
        local kind = core.exists(path)
        local hash = self:hash_of(d)
        local name = kind == "directory" and core.safe_name(d) or path:match("([^/]+)$")
        local blob = string.format("flow/%s/%s/%s", project_name(self.root), hash:gsub("^sha256:", ""), name)
        local r, why = self.aml:transfer { op = "upload", datastore = info.datastore, blob = blob, path = path,
                                          folder = kind == "directory",
                                          step = n.name, label = string.format("input '%s'", d) }
        if not r then fail(why) end
        bindings[#bindings + 1] = { name = io.arg, type = kind == "directory" and "uri_folder" or "uri_file",
                                    uri = M.datastore_uri(info.datastore, blob), mode = mode }
      end
    end
  end
  return bindings
end

-- Dataset d, a reference to a datastore path, made a file or folder here:
-- for a step here that reads what a job made when the job's step was up to
-- date from a run in which nothing here read it (so it stayed remote).  One
-- download per dataset and run; a second reader waits for the first.
function Run:localize(d)
  local v = self.values[d]
  local ok, value = pcall(self.value_of, self, d)
  local ref = ok and remote_ref(value)
  if not ref then return end
  self.localizing = self.localizing or {}
  while self.localizing[d] do require("flow.proc").sleep(0.05) end
  if self.values[d] ~= v then return end           -- the other reader brought it
  self.localizing[d] = true
  local dest = string.format("%s/%s/%s", M.DOWNLOADS, ref.job, core.safe_name(d))
  local r, why = self.aml:transfer { op = "download", datastore = settings(self).datastore,
                                    blob = ref.azureml:match("^azureml://datastores/[^/]+/paths/(.*)$"),
                                    path = dest, folder = ref.type ~= "uri_file",
                                    label = string.format("dataset '%s'", d) }
  if r then
    local final = self:final_path(self.cat:entry(d), d)
    ok, why = pcall(cache.commit, dest, final)
    if ok then
      local h, herr = self.hc:file(final)
      if h then self.values[d] = { path = final, hash = h, uri = ref.azureml, uri_type = ref.type }
      else why = herr end
    end
    core.remove_tree(M.DOWNLOADS .. "/" .. ref.job)
  end
  self.localizing[d] = nil
  if self.values[d] == v then
    error(step_failure { message = string.format("cannot bring '%s' here from Azure ML: %s", d, tostring(why)) })
  end
end

-- The kind of output d is on Azure ML: a file for the catalog's file-like
-- types, else a folder (a command's untyped output is a directory there).
local function output_type(e)
  if e.type ~= "memory" and e.type ~= "folder" then return "uri_file" end
  return "uri_folder"
end

-- The job's output bindings of step n, run as job `job`.
function Run:bind_outputs(n, job, mode)
  local info, bindings = settings(self), {}
  for _, io in ipairs(n.outputs) do
    local e = self.cat:entry(io.dataset)
    local path = string.format("flow/%s/runs/%s/%s", project_name(self.root), job, io.arg)
    if output_type(e) == "uri_file" then
      path = path .. "/" .. (self.cat:save_path(e):match("([^/]+)$") or io.arg)
    end
    bindings[#bindings + 1] = { name = io.arg, dataset = io.dataset, type = output_type(e),
                                uri = M.datastore_uri(info.datastore, path), blob = path, mode = mode }
  end
  return bindings
end

-- After job `job` of step n completed: each output downloaded when needed
-- here, else a reference.  Returns the step's output records.
function Run:fetch_outputs(n, job, bindings, downloads, fail)
  local info, by, fetched = settings(self), {}, {}
  for _, b in ipairs(bindings) do
    if downloads[b.dataset] then
      local dest = string.format("%s/%s/%s", M.DOWNLOADS, job, core.safe_name(b.dataset))
      local r, why = self.aml:transfer { op = "download", datastore = info.datastore, blob = b.blob, path = dest,
                                        folder = b.type == "uri_folder",
                                        step = n.name, label = string.format("output '%s'", b.dataset) }
      if not r then fail(why) end
      fetched[b.dataset] = dest
    else
      by[b.dataset] = { azureml = b.uri, type = b.type, job = job }
    end
  end
  local outs = {}
  if next(by) then outs = self:save_values(n, by) end
  for _, b in ipairs(bindings) do
    local dest = fetched[b.dataset]
    if dest then
      local e = self.cat:entry(b.dataset)
      if catalog.persisted(e) and e.type ~= "folder" and e.type ~= "file" then
        local text, err = core.read_file(dest)
        local v, why = nil, err
        if text then v, why = catalog.parse(e, text, b.dataset) end
        if v == nil then
          fail(string.format("its output '%s' (a %s dataset, %s) %s", b.dataset, e.type, e.origin,
               text and why or ("cannot be read: " .. tostring(why))))
        end
      end
      local rec = self:commit(b.dataset, e, dest, n)
      rec.uri, rec.uri_type = b.uri, b.type
      self.values[b.dataset].uri, self.values[b.dataset].uri_type = b.uri, b.type
      outs[b.dataset] = rec
    end
  end
  core.remove_tree(M.DOWNLOADS .. "/" .. job)
  return outs
end

return M
