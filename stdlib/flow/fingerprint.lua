-- flow.fingerprint: what a step's result depends on, as SHA-256 hashes.
--
-- A step's fingerprint covers its code (a Lua function's bytecode with the
-- values of its upvalues — tables with their metatables — and of the script
-- globals it names, and the source and present fields of the project
-- modules it names or holds and the source of the Lua files it runs with
-- dofile/loadfile given a literal path; a command with
-- its parameters expanded, plus the content of project files it names, such
-- as src/train.py, in a `sh -c` script too), the parameters it reads, its
-- distribution settings, its declared outputs and its inputs' catalog types,
-- and the content hashes of its inputs.  The parts are kept
-- (shortened) so that `--explain` can say which one changed.
local core = require("flow.core")
local params_text = require("flow.params").text
local cache = require("flow.cache")
local is_node = require("flow.pipeline").is_node

local M = {}

local SHORT = cache.FP_SHORT      -- hex digits of a part kept for --explain (engine/fingerprint.h)

-- Globals present before any script ran (the stdlib's) and the ones the CLI
-- adds for scripts: a function's fingerprint includes only the others.
local builtin_globals = {}
for k in pairs(_G) do builtin_globals[k] = true end
for _, k in ipairs({ "node", "pipeline", "distributed_job", "Framework", "flow", "print" }) do
  builtin_globals[k] = true
end

-- What Lua's libraries held then (string, table, math, ...): a function a
-- script adds to one (string.trim, called as s:trim()) or puts in place of
-- one is the script's code, found by its key (Hasher:lib_additions).
local builtin_libs = {}
for name, lib in pairs(_G) do
  if type(lib) == "table" and name ~= "_G" and name ~= "package" then
    local was = {}
    for k, v in pairs(lib) do was[k] = v end
    builtin_libs[name] = was
  end
end

-- Modules loaded before any script ran (Lua's own libraries, the stdlib's
-- C modules) and the stdlib: they change only with flow itself.  Every other
-- module is the project's (or installed beside it) and is hashed by its source.
local builtin_modules = {}
for k in pairs(package.loaded) do builtin_modules[k] = true end
local function stdlib_module(name)
  return builtin_modules[name] or name == "flow" or name:sub(1, 5) == "flow."
end

-- Hashes Lua values canonically.  One per run: functions and tables are
-- hashed once (memo), so a helper shared by 10,000 steps costs one dump; and
-- what closures of one function expression share (their bytecode, the modules
-- and global names it names) is found and hashed once per prototype (protos).
local Hasher = {}
Hasher.__index = Hasher

function M.hasher()
  local modules = {}
  for name, mod in pairs(package.loaded) do
    if type(mod) == "table" then modules[mod] = name end
  end
  return setmetatable({ memo = {}, active = {}, protos = {}, modules = modules, globals = nil,
                        module_files = {}, module_hashes = {}, code_modules = {}, loops = 0 }, Hasher)
end

-- The names a compiled chunk's string constants may load: each string (a
-- module name, for require) and, when the code names dofile or loadfile,
-- "@" .. each string that names a Lua file ("lib/d.lua"), for the file it runs.
local function loaded_names(strings)
  local runs_files = false
  for _, s in ipairs(strings) do
    if s == "dofile" or s == "loadfile" then runs_files = true end
  end
  local names = {}
  for _, s in ipairs(strings) do
    names[#names + 1] = s
    if runs_files and #s <= 4096 and s:match("%.lua$") and not s:find("[\0\n]") then
      names[#names + 1] = "@" .. s
    end
  end
  return names
end

-- Project module `name` (or, named "@path", a Lua file a step runs with
-- dofile or loadfile) as {path =, hash = of its source, deps = {names of the
-- modules and files its code names}}, or false: a stdlib module, a string
-- that names no Lua file, or a C module (no source to hash).
function Hasher:module_file(name)
  local m = self.module_files[name]
  if m ~= nil then return m end
  m = false
  local path
  if name:sub(1, 1) == "@" then
    local _, _, kind = cache.stat(name:sub(2))
    path = kind == "file" and name:sub(2) or nil
  elseif #name <= 200 and name:match("^[%a_][%w_%.%-]*$") and not stdlib_module(name) then
    path = package.searchpath(name, package.path)
  end
  local text = path and core.read_file(path)
  if text then
    -- a module require loaded runs the text it was loaded from, which the
    -- file may no longer hold (edited in a REPL, not reloaded yet): that
    -- text's hash, not the file's.  (What it names is read from the file.)
    local loaded = name:sub(1, 1) ~= "@" and package.loaded[name] ~= nil and core.loaded_source(path)
    m = { path = path, hash = loaded or cache.sha256(text), deps = {} }
    -- compiled (through the desugarer, as require compiles it), not run: only its constants are read
    local chunk = core.load_text(text, "@" .. path)
    if chunk then
      local _, strings = core.code(chunk, true)
      m.deps = loaded_names(strings)
    end
  end
  self.module_files[name] = m
  return m
end

-- The hash of project module `name` with every project module it names,
-- transitively (cycles included), or false when it is not a project module.
function Hasher:module(name)
  local h = self.module_hashes[name]
  if h ~= nil then return h end
  h = false
  if self:module_file(name) then
    local seen, stack, items = { [name] = true }, { name }, {}
    while #stack > 0 do                  -- iterative: a long chain of requires cannot overflow
      local m = table.remove(stack)
      local f = self:module_file(m)
      items[#items + 1] = m .. "=" .. f.hash
      for _, d in ipairs(f.deps) do
        if not seen[d] and self:module_file(d) then seen[d] = true; stack[#stack + 1] = d end
      end
    end
    table.sort(items)
    h = cache.sha256(table.concat(items, "\0"))
  end
  self.module_hashes[name] = h
  return h
end

-- The project modules a function's code names (require("lib.x") has the
-- string "lib.x") and the Lua files it runs (dofile("lib/d.lua")):
-- "name=hash" items, found once per distinct code.
function Hasher:modules_named(f, code)
  local found = self.code_modules[code]
  if found then return found end
  found = {}
  local _, strings = core.code(f, true)
  for _, s in ipairs(loaded_names(strings)) do
    local h = self:module(s)
    if h then found[#found + 1] = "M" .. s .. "=" .. h end
  end
  table.sort(found)
  self.code_modules[code] = found
  return found
end

-- {name, value, ...} entries sorted by name.
local function sorted_by_name(list)
  table.sort(list, function(a, b) return a[1] < b[1] end)
  return list
end

-- The script's own globals (names with their values), found once per run.
function Hasher:user_globals()
  if not self.globals then
    local g = {}
    for k, v in pairs(_G) do
      if type(k) == "string" and not builtin_globals[k] then g[#g + 1] = { k, v } end
    end
    self.globals = sorted_by_name(g)
  end
  return self.globals
end

-- What the script added to a library of Lua's or put in place of its own
-- (string.trim), found once per run: {"string.trim", value, "trim"}.  A
-- function's code that names the key uses it, whether through the library
-- or as a method (s:trim() names no "string", nor any global).
function Hasher:lib_additions()
  if not self.libs then
    local g = {}
    for name, was in pairs(builtin_libs) do
      local lib = rawget(_G, name)
      if type(lib) == "table" then
        for k, v in pairs(lib) do
          -- (not the stdlib's own wrappers, coroutine.resume and the like: no code of the script's)
          if type(k) == "string" and not rawequal(was[k], v) and (type(v) ~= "function" or core.code(v)) then
            g[#g + 1] = { name .. "." .. k, v, k }
          end
        end
      end
    end
    self.libs = sorted_by_name(g)
  end
  return self.libs
end

-- Canonical text of a value (tables by sorted keys; functions by their
-- hash).  Integers in full (%.17g gave 2^63 - 1 and 2^63 - 2 one text).
function Hasher:text(v)
  local t = type(v)
  if t == "string" then return "s" .. #v .. ":" .. v end
  if t == "number" then
    if math.type(v) == "integer" then return "i" .. string.format("%d", v) end
    return "f" .. string.format("%.17g", v)
  end
  if t == "boolean" or t == "nil" then return tostring(v) end
  if t == "function" then return "F" .. self:fn(v) end
  -- a node (a userdata: lua/node_decl.c) by its fields, as a table is
  if t == "table" or (t == "userdata" and is_node(v)) then return "T" .. self:table(v) end
  return "U" .. t               -- userdata, thread: no stable content to hash
end

-- A value that leads back to one being hashed (a table that holds its
-- parent, two functions that call each other) is hashed as "cycle" (or
-- "recursive") there, and so differs with where the walk entered the loop:
-- what was hashed inside a loop is not kept (self.loops counts them), or
-- which step was hashed first would decide the others' fingerprints, and
-- one whose loop changed would keep its old hash.  A value that leads back
-- to itself only (a recursive function) is kept: its walk always starts at it.
function Hasher:back_edge(kind)
  self.loops = self.loops + 1
  return kind
end

function Hasher:table(tbl)
  local memo = self.memo[tbl]
  if memo then return memo end
  if rawequal(tbl, _G) then return "globals" end    -- (a function's globals are hashed by name: Hasher:proto)
  if self.active[tbl] then return self:back_edge("cycle") end
  local module, source = self.modules[tbl], nil
  if module then
    source = self:module(module)       -- a project module: its source, not its name ...
    if not source then return "module:" .. module end    -- (the stdlib, a C module: they change with flow)
  end
  self.active[tbl] = true
  local loops = self.loops
  local items = {}
  for k, v in pairs(tbl) do
    local kt = rawequal(k, tbl) and "Tcycle" or self:text(k)
    items[#items + 1] = kt .. "=" .. (rawequal(v, tbl) and "Tcycle" or self:text(v))
  end
  -- what a metatable adds (a class's methods, defaults through __index) is the value's too
  local mt = debug.getmetatable(tbl)
  if mt ~= nil then items[#items + 1] = "@meta=" .. (rawequal(mt, tbl) and "Tcycle" or self:text(mt)) end
  table.sort(items)
  self.active[tbl] = nil
  local h = cache.sha256("{", table.concat(items, ","), "}")
  -- ... and what the script set in it since
  if module then h = "module:" .. module .. ":" .. source .. ":" .. h end
  if self.loops == loops then self.memo[tbl] = h end
  return h
end

-- What every closure of f's prototype shares, or nil for a C function:
-- {code =, prefix = SHA-256 state after the code and the project modules it
-- names, upvalues = {names}, globals = {{name, value} of the script globals
-- its code names}, libs = {what the script added to Lua's libraries that its
-- code names: Hasher:lib_additions}, hash = the whole hash when it has no
-- upvalue and names none of those}.  Kept per
-- run by core.proto_id (lua/proto.c); `f` is kept too, so that the prototype
-- stays alive and no other one can take its id during the run.  Without an id
-- (the self-check of lua/proto.c failed) it is found again for each closure.
function Hasher:proto(f)
  local id = core.proto_id(f)
  local p = id and self.protos[id]
  if p then return p end
  local code = core.code(f)
  if not code then return nil end              -- not user code
  local head = { code }
  for _, m in ipairs(self:modules_named(f, code)) do head[#head + 1] = m end
  p = { f = f, code = code, prefix = cache.sha256_prefix(table.concat(head, "\0")), upvalues = {} }
  for i = 1, math.huge do
    local name = debug.getupvalue(f, i)
    if not name then break end
    p.upvalues[i] = name
    if name == "_ENV" and not p.globals then
      p.globals = {}
      for _, g in ipairs(self:user_globals()) do
        if code:find(g[1], 1, true) then p.globals[#p.globals + 1] = g end
      end
    end
  end
  p.libs = {}
  for _, g in ipairs(self:lib_additions()) do
    if code:find(g[3], 1, true) then p.libs[#p.libs + 1] = g end
  end
  -- no upvalue but _ENV, and no script global named: every closure of it
  -- hashes alike (Hasher:fn would join no part)
  if #p.libs == 0 and (#p.upvalues == 0 or #p.upvalues == 1 and p.globals and #p.globals == 0) then
    p.hash = p.prefix:sha256()
  end
  if id then self.protos[id] = p end
  return p
end

-- A Lua function: its bytecode without debug information or line numbers
-- (so moving it to another line changes nothing), its upvalues' values, the values of the
-- script globals whose names appear in its code and the project modules it names:
-- sha256 of those parts joined by "\0".  The first parts are its prototype's
-- (Hasher:proto, hashed once); only the values are hashed per closure.
function Hasher:fn(f)
  local memo = self.memo[f]
  if memo then return memo end
  if self.active[f] then return self:back_edge("recursive") end
  local p = self:proto(f)
  if not p then return "C function" end
  -- no upvalue, or only _ENV as the script's globals: every closure of it hashes alike
  if p.hash and (#p.upvalues == 0 or rawequal(select(2, debug.getupvalue(f, 1)), _G)) then return p.hash end
  self.active[f] = true
  local loops = self.loops
  local parts = {}
  for i, name in ipairs(p.upvalues) do
    local _, v = debug.getupvalue(f, i)
    if name == "_ENV" and rawequal(v, _G) then
      for _, g in ipairs(p.globals) do parts[#parts + 1] = "G" .. g[1] .. "=" .. self:text(g[2]) end
    else                                       -- (an _ENV of its own, `local _ENV = {...}`: a value)
      parts[#parts + 1] = "U" .. name .. "=" .. (rawequal(v, f) and "Frecursive" or self:text(v))
    end
  end
  for _, g in ipairs(p.libs) do parts[#parts + 1] = "G" .. g[1] .. "=" .. self:text(g[2]) end
  self.active[f] = nil
  local h = #parts == 0 and p.prefix:sha256() or p.prefix:sha256("\0", table.concat(parts, "\0"))
  if self.loops == loops then self.memo[f] = h end
  return h
end

function Hasher:value(v) return cache.sha256(self:text(v)) end

-- Words of a command that may name a project file (relative paths outside
-- .flow/, or absolute ones under the project), as relative paths: which of
-- them are regular files, and their content, is looked at when the step is
-- ready (M.file_hashes here, engine/uptodate.c for the engine's check).
local function project_file_names(words, root)
  local names, seen = {}, {}
  for _, w in ipairs(words) do
    w = w:match("^%-%-?[%w_-]+=(.+)$") or w
    if w:find("[./]") and not w:find("${", 1, true) and not w:find("^%-") then
      local rel = w
      if w:sub(1, 1) == "/" then
        rel = w:sub(1, #root + 1) == root .. "/" and w:sub(#root + 2) or nil
      end
      rel = rel and rel:gsub("^%./", "")
      if rel and rel ~= "" and not rel:find("^%.flow/") and not rel:find("^%.%.?/?$") and not seen[rel] then
        seen[rel] = true
        names[#names + 1] = rel
      end
    end
  end
  return names
end

-- {path = content hash} of the names that are regular files now.
function M.file_hashes(names, hc)
  local files = {}
  for _, rel in ipairs(names) do
    local _, _, kind = cache.stat(rel)
    if kind == "file" then
      local h = hc:file(rel)
      if h then files[rel] = h end
    end
  end
  return files
end

-- The words of a shell command that may name a file it reads: not the
-- target of a redirection (> f, >> f, 2> f, &> f, >| f) nor what tee writes,
-- which the command writes (named, such a file changed at every run, and the
-- step ran again each time).
local function shell_words(s)
  local words, pos, tee = {}, 1, false
  while true do
    local a, b = s:find("[^%s;|&<>()`]+", pos)
    if not a then break end
    local before = s:sub(pos, a - 1)
    local w = s:sub(a, b):gsub("^['\"]", ""):gsub("['\"]$", "")
    if before:find("[;|&()`\n]") then tee = false end          -- another command
    if not before:find(">[|&]?%s*$") and not tee then words[#words + 1] = w end
    if w == "tee" then tee = true end
    pos = b + 1
  end
  return words
end

-- Shells whose -c option (alone or with others: -ec, -lc) runs its next
-- argument as a command line.
local SHELLS = { sh = true, bash = true, dash = true, zsh = true, ksh = true, mksh = true }

-- The script of an argv that runs a shell with -c ({"sh", "-c", "python3
-- src/train.py"}), or nil.
local function shell_script(argv)
  local prog = argv[1] and argv[1]:match("[^/]+$")
  if not (prog and SHELLS[prog]) then return nil end
  for k = 2, #argv - 1 do
    local a = argv[k]
    if not a:find("^%-") then return nil end          -- a script file, not -c
    if a:find("^%-%a*c%a*$") then return argv[k + 1] end
  end
  return nil
end

local function command_code(cmd, root)
  local parts, words = {}, {}
  if cmd.shell then
    parts[1] = "sh:" .. cmd.shell
    words = shell_words(cmd.shell)
  else
    for i, a in ipairs(cmd.argv) do
      words[i] = a
      parts[#parts + 1] = a
    end
    -- the files its script names (one word of the argv, which names none)
    local script = shell_script(cmd.argv)
    if script then
      for _, w in ipairs(shell_words(script)) do words[#words + 1] = w end
    end
  end
  if cmd.cwd then parts[#parts + 1] = "cwd=" .. cmd.cwd end
  if cmd.env then
    local env = {}
    for k, v in pairs(cmd.env) do env[#env + 1] = k .. "=" .. params_text(v) end    -- (as launch.env_list spells it)
    table.sort(env)
    parts[#parts + 1] = "env:" .. table.concat(env, "\0")
  end
  return cache.sha256(table.concat(parts, "\0")), project_file_names(words, root)
end

-- The command as written (its ${params.}, ${inputs.} and ${outputs.}
-- references unexpanded: the parameters and data they stand for are parts of
-- their own), and the names of the project files it may name (M.file_hashes).
-- Memoised per run by the command's text: 10,000 steps often share one command line.
function M.command_code(cmd, root, memo)
  local key = cmd.shell and ("sh\1" .. cmd.shell) or table.concat(cmd.argv, "\0")
  if not cmd.cwd and not cmd.env and memo[key] then return memo[key][1], memo[key][2] end
  local code, names = command_code(cmd, root)
  if not cmd.cwd and not cmd.env then memo[key] = { code, names } end
  return code, names
end

-- parts = {code =, files = {path = h}, params = {key = h}, inputs = {d = h},
--          dist =, outputs =}  ->  fingerprint.  The rule is engine/fingerprint.c's
-- (one implementation, which an engine-side check can share).
M.combine = cache.fp_combine

-- The parts shortened, as a step's record keeps them for --explain.
function M.short(parts)
  local short = { code = parts.code:sub(1, SHORT), dist = parts.dist and parts.dist:sub(1, SHORT),
                  outputs = cache.sha256(parts.outputs):sub(1, SHORT) }
  for _, field in ipairs({ "files", "params", "inputs" }) do
    local t = parts[field]
    if t and next(t) then
      local s = {}
      for k, v in pairs(t) do s[k] = v:sub(1, SHORT) end
      short[field] = s
    end
  end
  return short
end

-- Why a step with parts `now` differs from its last successful run's `old`.
function M.explain(old, now, is_command)
  local reasons = {}
  local function add(fmt, ...) reasons[#reasons + 1] = string.format(fmt, ...) end
  if old.code ~= now.code then add(is_command and "its command changed" or "its code changed") end
  local function diff(field, what)
    local a, b = old[field] or {}, now[field] or {}
    local keys = {}
    for k in pairs(a) do keys[k] = true end
    for k in pairs(b) do keys[k] = true end
    local sorted = {}
    for k in pairs(keys) do sorted[#sorted + 1] = k end
    table.sort(sorted)
    for _, k in ipairs(sorted) do
      if k == "*" then add("the parameters changed (it reads all of them)")
      elseif a[k] == nil then add("it now reads %s '%s'", what, k)
      elseif b[k] == nil then add("it no longer reads %s '%s'", what, k)
      elseif a[k] ~= b[k] then add("%s '%s' changed", what, k) end
    end
  end
  diff("params", "parameter")
  diff("inputs", "input")
  diff("files", "file")
  if old.dist ~= now.dist then add("its distribution settings changed") end
  if old.outputs ~= now.outputs then add("its outputs (names, types or paths) or the catalog types of its inputs changed") end
  if #reasons == 0 then add("its fingerprint changed (flow itself changed how it is computed)") end
  return table.concat(reasons, "; ")
end

return M
