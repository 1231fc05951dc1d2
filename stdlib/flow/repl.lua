-- flow.repl: `flow repl [SCRIPT]`, a Lua 5.4 REPL on the engine's own state.
--
-- Expressions print without `return` (`> 1+1` prints 2); a chunk that is not
-- complete yet continues on the next line (`>> `), as lua(1) does; values
-- print readably (tables to a depth and a length, pipelines and steps
-- summarised).  An error prints its message and traceback and the prompt
-- comes back; Ctrl-C stops the expression or the run going on (the count
-- hook of lua/l_sched.c, the scheduler's cancel) and the prompt comes back;
-- Ctrl-D leaves.  With a script loaded, the session has `pipeline`,
-- `params`, `catalog` and the helpers run{}, load(), save(), step() and
-- reload().  Line editing, history ($XDG_STATE_HOME/flow/history) and Tab
-- completion (globals, table fields, dataset and step names in strings) come
-- from readline (flow.repl_c); piped input runs without a prompt.
local core = require("flow.core")
local util = require("flow.util")
local repl_c = require("flow.repl_c")
local pipeline_mod = require("flow.pipeline")
-- What the session shows (a result, an error) is masked as flow's own
-- messages are: a parameter that embeds a credential prints as ***.
local redact = require("flow.config").redact

local M = {}

-- ---- printing values ---------------------------------------------------------

local MAX_DEPTH, MAX_ITEMS, MAX_STRING, WIDTH = 3, 20, 300, 78

-- (masked before it is quoted and cut: %q's escapes would hide a secret
-- from the masker, and the cut would show its start)
local function quoted(s)
  s = redact(s)
  if #s > MAX_STRING then
    return string.format("%q", s:sub(1, MAX_STRING)):gsub("\\\n", "\\n") .. string.format("… (%d bytes)", #s)
  end
  return (string.format("%q", s):gsub("\\\n", "\\n"))
end

local function names_of(list, field)
  local out = {}
  for i, io in ipairs(list) do out[i] = io[field] end
  return table.concat(out, ", ")
end

-- A step in one line: its name, kind, inputs and outputs.
function M.step_line(n)
  return string.format("<step '%s' (%s%s): %s -> %s>", n.name, n.kind == "func" and "Lua function" or "command",
                       n.dist and ", distributed" or "", names_of(n.inputs, "dataset"), names_of(n.outputs, "dataset"))
end

local function key_text(k)
  if type(k) == "string" and k:match("^[%a_][%w_]*$") then return k end
  return "[" .. (type(k) == "string" and quoted(k) or tostring(k)) .. "]"
end

local function show(v, depth, seen)
  local t = type(v)
  if t == "string" then return quoted(v) end
  if t == "number" then return math.type(v) == "integer" and tostring(v) or string.format("%.14g", v) end
  if t == "function" then
    local info = debug.getinfo(v, "S")
    if info.what == "C" then return "<builtin function>" end
    return string.format("<function %s:%d>", info.short_src, info.linedefined)
  end
  if pipeline_mod.is_node(v) then return M.step_line(v) end      -- (a userdata: lua/node_decl.c)
  if t ~= "table" then return tostring(v) end
  if pipeline_mod.is_pipeline(v) then
    local names = {}
    for i = 1, math.min(#v.nodes, 8) do names[i] = v.nodes[i].name end
    return string.format("<pipeline: %d step%s: %s%s>", #v.nodes, #v.nodes == 1 and "" or "s",
                         table.concat(names, ", "), #v.nodes > 8 and ", …" or "")
  end
  local mt = getmetatable(v)
  if mt and mt.__tostring then return tostring(v) end
  if seen[v] then return "<cycle>" end
  if depth >= MAX_DEPTH then return next(v) == nil and "{}" or "{…}" end
  seen[v] = true
  local items, n = {}, #v
  for i = 1, math.min(n, MAX_ITEMS) do items[#items + 1] = show(v[i], depth + 1, seen) end
  local keys = {}
  for k in pairs(v) do
    if not (math.type(k) == "integer" and k >= 1 and k <= n) then keys[#keys + 1] = k end
  end
  table.sort(keys, function(a, b)
    if type(a) == type(b) and (type(a) == "string" or type(a) == "number") then return a < b end
    return type(a) < type(b)
  end)
  local shown = math.min(n, MAX_ITEMS)
  for _, k in ipairs(keys) do
    if shown >= MAX_ITEMS then break end
    items[#items + 1] = key_text(k) .. " = " .. show(v[k], depth + 1, seen)
    shown = shown + 1
  end
  local more = n + #keys - shown
  if more > 0 then items[#items + 1] = string.format("… (%d more)", more) end
  seen[v] = nil
  if #items == 0 then return "{}" end
  local flat = "{ " .. table.concat(items, ", ") .. " }"
  if #flat <= WIDTH and not flat:find("\n") then return flat end
  local pad = string.rep("  ", depth + 1)
  return "{\n" .. pad .. table.concat(items, ",\n" .. pad) .. "\n" .. string.rep("  ", depth) .. "}"
end

-- A value as the REPL prints it.
function M.show(v) return show(v, 0, {}) end

-- ---- the session's helpers -----------------------------------------------------

local function datasets_of(p)
  local seen, out = {}, {}
  for _, n in ipairs(p.nodes) do
    for _, list in ipairs({ n.inputs, n.outputs }) do
      for _, io in ipairs(list) do
        if not seen[io.dataset] and not require("flow.dag").is_param_input(io.dataset) then
          seen[io.dataset] = true
          out[#out + 1] = io.dataset
        end
      end
    end
  end
  table.sort(out)
  return out
end

local function find_step(p, name)
  for _, n in ipairs(p.nodes) do if n.name == name then return n end end
end

-- The helpers bound to the loaded project (project = {pipeline =, plan =, reload =}).
local function bind(env, project)
  local runner = require("flow.runner")
  local catalog = require("flow.catalog")
  local state_mod = require("flow.state")
  local function need(what)
    if not project.pipeline then error(what .. ": no pipeline is loaded (flow repl SCRIPT)", 3) end
  end
  local function refresh()
    env.pipeline, env.params, env.catalog = project.pipeline, project.plan and project.plan.settings.params,
                                            project.plan and project.plan.cat
  end
  refresh()
  -- run{nodes =, params =, tags =, force =, ...}: flow.run of the pipeline
  env.run = function(opts)
    need("run")
    if opts ~= nil and type(opts) ~= "table" then error("run: expected a table of options, as flow.run takes", 2) end
    -- the project's lock ends with the run: an idle session does not keep
    -- every flow run and flow clean out of the project
    local _ <close> = setmetatable({}, { __close = function() require("flow.state").unlock() end })
    return runner.run(project.pipeline, opts or {}, 3)      -- (not a tail call: 3 is this chunk's caller)
  end
  -- load("dataset"): its value, through the catalog, or as the last run left it
  env.load = function(name)
    need("load")
    if type(name) ~= "string" then error("load: expected a dataset's name", 2) end
    local plan = project.plan
    local e = plan.cat:entry(name)
    if catalog.persisted(e) then
      local path, why = plan.cat:load_path(e)
      if not path then error(string.format("load: dataset '%s': %s", name, why), 2) end
      return catalog.decode(e, path)
    end
    local p = plan.graph:producer(name)
    if not p then
      error(string.format("load: no step makes '%s' and the catalog has no entry for it%s", name,
                          util.did_you_mean(name, datasets_of(project.pipeline))), 2)
    end
    local rec = state_mod.load(nil).steps[plan.nodes[p].name]
    local out = rec and rec.outputs and rec.outputs[name]
    if not out then
      error(string.format("load: '%s' has no value yet: run{ to_outputs = \"%s\" } makes it", name, name), 2)
    end
    if out.path then return out.path end
    if out.recompute then
      error(string.format("load: '%s' is not kept between runs (a large value its last run handed only to steps): "
                          .. "run{ to_outputs = \"%s\", force = true }.outputs[\"%s\"] makes it", name, name, name), 2)
    end
    return state_mod.restore_value(out, name)
  end
  -- save("dataset", value): through the catalog
  env.save = function(name, value)
    need("save")
    if type(name) ~= "string" then error("save: expected a dataset's name and a value", 2) end
    local cat = project.plan.cat
    local e = cat:entry(name)
    if not catalog.persisted(e) then
      error(string.format("save: '%s' is a memory dataset, which lives only in runs: give it a catalog entry "
                          .. "(conf/base/catalog.yml) to save it", name), 2)
    end
    if e.type == "file" or e.type == "folder" then
      error(string.format("save: '%s' is a %s dataset: its step writes it", name, e.type), 2)
    end
    local bytes, why = catalog.encode(e, value)
    if not bytes then error(string.format("save: dataset '%s': %s", name, why), 2) end
    if e.versioned then cat.save_version = catalog.save_stamp(core.time()) end   -- a version of its own each time
    local path = cat:save_path(e)
    core.mkdir_p(path:match("^(.*)/[^/]*$") or ".")
    core.write_atomic(path, bytes)
    return path
  end
  -- step("name"): what the step is, and its last successful run
  env.step = function(name)
    need("step")
    local n = find_step(project.pipeline, name)
    if not n then
      local names = {}
      for i, s in ipairs(project.pipeline.nodes) do names[i] = s.name end
      error(string.format("step: no step named '%s'%s", tostring(name), util.did_you_mean(tostring(name), names)), 2)
    end
    local rec = state_mod.load(nil).steps[n.name]
    local ins, outs = {}, {}
    for i, io in ipairs(n.inputs) do ins[i] = io.dataset end
    for i, io in ipairs(n.outputs) do outs[i] = io.dataset end
    return { name = n.name, kind = n.kind, where = n.where, inputs = ins, outputs = outs, tags = { table.unpack(n.tags) },
             command = n.cmd and (n.cmd.shell or table.concat(n.cmd.argv, " ")) or nil,
             func = n.func, distributed = n.dist and true or nil,
             last_run = rec and { time = os.date("%Y-%m-%d %H:%M:%S", math.floor(rec.time or 0)),
                                  fingerprint = rec.fp, metrics = rec.metrics and rec.metrics.values } or nil }
  end
  -- reload(): the script and the configuration read again
  env.reload = function()
    if not project.reload then error("reload: no script is loaded (flow repl SCRIPT)", 2) end
    project.reload()
    refresh()
    return project.pipeline
  end
end

-- ---- completion ------------------------------------------------------------------

local KEYWORDS = { "and", "break", "do", "else", "elseif", "end", "false", "for", "function", "goto", "if", "in",
                   "local", "nil", "not", "or", "repeat", "return", "then", "true", "until", "while" }

-- Whether t has keys to complete: a table, or a node (a userdata whose
-- pairs() lists its fields).
local function keyed(t)
  return type(t) == "table" or pipeline_mod.is_node(t)
end

-- The keys of t and of the tables its metatables' __index chain holds.
local function keys_of(t, methods)
  local out, seen, depth = {}, {}, 0
  while keyed(t) and depth < 5 do
    for k, v in pairs(t) do
      if type(k) == "string" and k:match("^[%a_][%w_]*$") and not seen[k] and (not methods or type(v) == "function") then
        seen[k] = true
        out[#out + 1] = k
      end
    end
    local mt = getmetatable(t)
    t = type(mt) == "table" and rawget(mt, "__index") or nil
    depth = depth + 1
  end
  return out
end

-- Whether text ends inside a string literal ("…' or '…"; a backslash
-- escapes): no name is completed there.
local function open_string(text)
  local quote, i = nil, 1
  while i <= #text do
    local c = text:sub(i, i)
    if quote and c == "\\" then i = i + 1
    elseif quote and c == quote then quote = nil
    elseif not quote and (c == '"' or c == "'") then quote = c end
    i = i + 1
  end
  return quote ~= nil
end

-- Candidates for line[start+1 .. finish] (readline's word), in env.
local function candidates(env, project, line, start, finish)
  local word = line:sub(start + 1, finish)
  local before = line:sub(1, start)
  local pool
  -- inside a name's string: what it holds before the word (readline breaks
  -- words at '.', so in step("ns.n1") the word is n1 and "ns." comes before)
  local fn, typed = before:match("([%a_][%w_]*)%s*%(%s*[\"']([^\"']*)$")
  local in_nodes = before:match("nodes%s*=%s*[\"']([^\"']*)$")
  if fn == "load" or fn == "save" then
    pool = project.pipeline and datasets_of(project.pipeline) or {}
  elseif fn == "step" or in_nodes then
    pool = {}
    for i, n in ipairs(project.pipeline and project.pipeline.nodes or {}) do pool[i] = n.name end
    typed = fn == "step" and typed or in_nodes:match("[^,]*$")    -- (nodes = "a,b": the last name)
  elseif open_string(before) then
    pool = {}
  else
    local path, sep = before:match("([%a_][%w_%.]*)([%.:])$")
    if path then
      local t = env
      for part in path:gmatch("[^%.]+") do
        if not keyed(t) then t = nil break end
        t = t[part]
      end
      pool = keyed(t) and keys_of(t, sep == ":") or {}
    else
      pool = keys_of(env)
      for _, k in ipairs(KEYWORDS) do pool[#pool + 1] = k end
    end
  end
  local out = {}
  local prefix = (fn == "load" or fn == "save" or fn == "step" or in_nodes) and typed or ""
  for _, c in ipairs(pool) do
    if c:sub(1, #prefix + #word) == prefix .. word then out[#out + 1] = c:sub(#prefix + 1) end
  end
  table.sort(out)
  return out
end

-- ---- the loop ---------------------------------------------------------------------

-- The chunk `src` as an expression (printed) or as statements; "incomplete"
-- when more lines may finish it.
local function compile(src, env)
  local f, as_expression = load("return " .. src, "=stdin", "t", env)
  if f then return f end
  local err
  f, err = load(src, "=stdin", "t", env)
  if f then return f end
  -- `2 +` is an expression to be continued, as `function f()` is a statement
  if err:match("<eof>$") or as_expression:match("near <eof>$") then return nil, "incomplete" end
  return nil, err
end

local function traceback(e)
  if type(e) == "string" and e:match("interrupted$") then return "interrupted" end   -- Ctrl-C: no trace
  -- flow's own errors (a broken script on reload(), a bad graph or setting, a
  -- file-system failure) are their message: the trace would be flow's frames
  if util.is_setup_error(e) then return e.setup_error end
  if util.is_fs_error(e) then return e.fs_error end
  if type(e) == "table" and type(rawget(e, "script")) == "string" then return e.script end     -- (cli's script_error)
  if type(e) == "table" and type(rawget(e, "usage")) == "string" then return e.usage end       -- (cli's usage_error)
  local tb = debug.traceback(tostring(e), 2)
  -- the REPL's own frames say nothing to the user
  tb = tb:gsub("\n[^\n]*flow/repl%.lua[^\n]*.*$", "")
  return (tb:gsub("\n%s*%[C%]: in function 'xpcall'", ""):gsub("\n%s*%[C%]: in %?", ""))
end

-- Runs one complete chunk; prints what it returns.  Returns false on error.
local function evaluate(f, out)
  local r = table.pack(xpcall(f, traceback))
  if repl_c.terminated() then return false end   -- SIGTERM, SIGHUP: the session ends (M.main)
  repl_c.reset_interrupts()                  -- a Ctrl-C ended what it stopped, not the session
  if not r[1] then
    io.stderr:write("error: ", redact(tostring(r[2])), "\n")
    return false
  end
  if r.n > 1 then
    local parts = {}
    for i = 2, r.n do
      -- (a value whose metamethods raise, __pairs or __len, is said so: it
      -- ended the session)
      local ok, text = pcall(M.show, r[i])
      parts[#parts + 1] = ok and text or string.format("<%s: cannot be shown: %s>", type(r[i]), tostring(text))
    end
    out:write(redact(table.concat(parts, "\t")), "\n")
  end
  out:flush()
  return true
end

local function history_path()
  local state = os.getenv("XDG_STATE_HOME")
  if not state or state == "" then
    local home = os.getenv("HOME")
    if not home or home == "" then return nil end
    state = home .. "/.local/state"
  end
  local ok = pcall(core.mkdir_p, state .. "/flow")
  return ok and state .. "/flow/history" or nil
end

-- The session's globals: Lua's and flow's, then what the session defines.
local function session_env(project)
  local env = setmetatable({}, { __index = _G })
  env.flow = require("flow")
  env._G = env
  bind(env, project)
  return env
end

-- flow repl: project = {pipeline =, plan =, reload =, script =, env =} (pipeline nil: none).
-- Returns the exit status.
function M.main(project)
  local env = session_env(project)
  local tty = repl_c.isatty(0)
  local failed = false
  if not tty then                              -- piped: no prompt, no editor
    local buf
    for line in io.lines() do
      buf = buf and (buf .. "\n" .. line) or line
      local f, err = compile(buf, env)
      if f then
        failed = not evaluate(f, io.stdout) or failed
        buf = nil
        local sig = repl_c.terminated()
        if sig then return 128 + sig end       -- (a read that waits here is not interrupted)
      elseif err ~= "incomplete" then
        io.stderr:write("error: ", redact(err), "\n")
        failed, buf = true, nil
      end
    end
    if buf then
      io.stderr:write("error: the input ended inside a chunk\n")
      failed = true
    end
    return failed and 1 or 0
  end
  local ed, why = repl_c.open(history_path(), function(line, start, finish)
    return candidates(env, project, line, start, finish)
  end)
  if not ed then util.setup_error("flow repl: " .. why) end
  io.stdout:write(string.format("flow %s (%s)%s; Ctrl-D leaves\n", require("flow").VERSION, _VERSION,
    project.pipeline and string.format(" — %s, env %s: pipeline, params, catalog, run{}, load(), save(), step(), "
                                         .. "reload()", project.script, project.env or "local") or ""))
  local buf
  while true do
    local sig = repl_c.terminated()              -- SIGTERM, or SIGHUP (its terminal closed): it ends
    if sig then ed:close(); return 128 + sig end
    local line = ed:read(buf and ">> " or "> ")
    sig = repl_c.terminated()
    if sig then ed:close(); return 128 + sig end
    if line == nil then io.stdout:write("\n") break end
    if line == false then
      buf = nil                                  -- Ctrl-C: the chunk so far is dropped
      repl_c.reset_interrupts()
    elseif line:match("%S") or buf then
      buf = buf and (buf .. "\n" .. line) or line
      local f, err = compile(buf, env)
      if f or err ~= "incomplete" then
        ed:remember(buf)
        if f then evaluate(f, io.stdout) else io.stderr:write("error: ", redact(err), "\n") end
        buf = nil
      end
    end
  end
  ed:close()
  return 0
end

return M
