-- node{} and flow.command: every rule, as what each call returns or raises.
-- t_errors.sh compares the output with node_rules.expected, which the Lua
-- implementation (before node{} moved to C) printed: messages, file:line and
-- did-you-mean are a contract.
local flow = require("flow")
local function show(v, depth)
  depth = depth or 0
  if type(v) ~= "table" then return type(v) == "function" and "<function>" or tostring(v) end
  if depth > 3 then return "{...}" end
  local keys = {}
  for k in pairs(v) do keys[#keys + 1] = tostring(k) end
  table.sort(keys)
  local parts = {}
  for _, k in ipairs(keys) do
    local val = v[k]
    if val == nil then val = v[tonumber(k)] end
    parts[#parts + 1] = k .. "=" .. show(val, depth + 1)
  end
  local mt = getmetatable(v)
  return (mt and mt.__name and (mt.__name .. "") or "") .. "{" .. table.concat(parts, ",") .. "}"
end
local function try(label, f)
  local ok, r = pcall(f)
  print(label .. ": " .. (ok and show(r) or ("ERR " .. tostring(r))))
end
local f = function() return 1 end
split = function() end
local cmd = flow.command{ "echo", "${outputs.o}", env = { A = "1" }, cwd = "sub" }
local D = flow.distributed_job{ framework = "pytorch", num_nodes = 2 }
try("plain", function() local n = node{ func = f, name = "p", inputs = "a", outputs = { "b", "c" } }; return n end)
try("map", function() local n = node{ func = f, name = "m", inputs = { z = "a", y = "b", x = "c" }, outputs = { o = "d" } }; return n end)
try("global name", function() local n = node{ func = split }; return n end)
try("local name", function() local g = f; local n = node{ func = g }; return n end)
try("local cmd name", function() local c = { "true" }; local n = node{ command = c }; return n end)
try("no name", function() local n = node{ func = function() end }; return n end)
try("no name cmd", function() local n = node{ command = { "true" } }; return n end)
try("named", function() local n = node{ func = f, name = "x", tags = { "a", "b" }, retries = 2, timeout = "1h30m" }; return n end)
try("tag string", function() local n = node{ func = f, name = "x", tags = "t", timeout = 5 }; return n end)
try("not table", function() local n = node("x"); return n end)
try("node of node", function() local m = node{ func = f }; local n = node(m); return n end)
try("unknown", function() local n = node{ func = f, outptus = "x" }; return n end)
try("positional", function() local n = node{ f }; return n end)
try("both", function() local n = node{ func = f, command = "true" }; return n end)
try("neither", function() local n = node{ name = "x" }; return n end)
try("func false", function() local n = node{ func = false, name = "x" }; return n end)
try("cmd fn", function() local n = node{ command = f, name = "x" }; return n end)
try("func number", function() local n = node{ func = 3, name = "x" }; return n end)
try("func table", function() local n = node{ func = { "a" }, name = "x" }; return n end)
try("func string", function() local n = node{ func = "echo hi", name = "x" }; return n end)
try("cmd string", function() local n = node{ command = "echo ${outputs.o}", outputs = { o = "o" }, name = "x" }; return n end)
try("cmd empty string", function() local n = node{ command = "  ", name = "x" }; return n end)
try("cmd argv", function() local n = node{ command = { "echo", 3, 1.5, env = { K = "v" }, cwd = "d" }, name = "x" }; return n end)
try("cmd obj", function() local n = node{ command = cmd, name = "x" }; return n end)
try("func cmd obj", function() local n = node{ func = cmd, name = "x" }; return n end)
try("cmd bad arg", function() local n = node{ command = { "echo", true }, name = "x" }; return n end)
try("cmd bad field", function() local n = node{ command = { "echo", evn = {} }, name = "x" }; return n end)
try("cmd bad key", function() local n = node{ command = { "echo", [true] = 1 }, name = "x" }; return n end)
try("cmd hole", function() local n = node{ command = { "echo", [3] = "x" }, name = "x" }; return n end)
try("cmd float key", function() local n = node{ command = { "echo", [1.5] = "x" }, name = "x" }; return n end)
try("cmd empty", function() local n = node{ command = {}, name = "x" }; return n end)
try("cmd only env", function() local n = node{ command = { env = {} }, name = "x" }; return n end)
try("cmd env", function() local n = node{ command = { "echo", env = "x" }, name = "x" }; return n end)
try("dist func", function() local n = node{ func = D(f), name = "x" }; return n end)
try("dist cmd", function() local n = node{ command = D(cmd), name = "x" }; return n end)
try("in number", function() local n = node{ func = f, name = "x", inputs = 3 }; return n end)
try("in empty", function() local n = node{ func = f, name = "x", inputs = "" }; return n end)
try("in ctrl", function() local n = node{ func = f, name = "x", inputs = "a\nb\\c" }; return n end)
try("in nul", function() local n = node{ func = f, name = "x", outputs = { "a\0b" } }; return n end)
try("in params", function() local n = node{ func = f, name = "x", inputs = "params:" }; return n end)
try("in list bad", function() local n = node{ func = f, name = "x", inputs = { "a", 3 } }; return n end)
try("in list empty", function() local n = node{ func = f, name = "x", inputs = { "a", "" } }; return n end)
try("in map bad", function() local n = node{ func = f, name = "x", inputs = { a = "x", b = 4 } }; return n end)
try("in map empty", function() local n = node{ func = f, name = "x", outputs = { b = "" } }; return n end)
try("in map numkey", function() local n = node{ func = f, name = "x", inputs = { "a", [3] = "b" } }; return n end)
try("in map ctrl", function() local n = node{ func = f, name = "x", inputs = { a = "x\ty" } }; return n end)
local big = {}
for i = 1, 40 do big["k" .. i] = "d" .. i end
try("in map big", function() local n = node{ func = f, name = "x", inputs = big }; return n end)
big.k17 = 5
try("in map big bad", function() local n = node{ func = f, name = "x", inputs = big }; return n end)
try("tags bad", function() local n = node{ func = f, name = "x", tags = 3 }; return n end)
try("tags map", function() local n = node{ func = f, name = "x", tags = { a = 1 } }; return n end)
try("tags item", function() local n = node{ func = f, name = "x", tags = { "a", 2 } }; return n end)
try("name num", function() local n = node{ func = f, name = 3 }; return n end)
try("name empty", function() local n = node{ func = f, name = "" }; return n end)
try("name false", function() local n = node{ func = f, name = false }; return n end)
try("name ctrl", function() local n = node{ func = f, name = "a\rb" }; return n end)
try("retries neg", function() local n = node{ func = f, name = "x", retries = -1 }; return n end)
try("retries float", function() local n = node{ func = f, name = "x", retries = 1.5 }; return n end)
try("retries str", function() local n = node{ func = f, name = "x", retries = "2" }; return n end)
try("timeout bad", function() local n = node{ func = f, name = "x", timeout = "soon" }; return n end)
try("timeout zero", function() local n = node{ func = f, name = "x", timeout = 0 }; return n end)
try("timeout table", function() local n = node{ func = f, name = "x", timeout = true }; return n end)
try("command str", function() local c = flow.command("echo hi"); return c end)
try("command empty", function() local c = flow.command(""); return c end)
try("command num", function() local c = flow.command(3); return c end)
try("command bad field", function() local c = flow.command{ "a", cwdd = "x" }; return c end)
try("pipeline ns", function() local p = pipeline{ node{ func = f, name = "s", inputs = "a", outputs = "b" }, namespace = "a\tb" }; return p end)
try("pipeline in", function() local p = pipeline{ node{ func = f, name = "s", inputs = "a", outputs = "b" }, inputs = { a = "" } }; return p end)
try("pipeline tags", function() local p = pipeline{ node{ func = f, name = "s" }, tags = { 1 } }; return p end)
try("pipeline tags ok", function() local p = pipeline{ node{ func = f, name = "s", tags = "x" }, tags = { "y" } }; return p end)
try("pipeline opt", function() local p = pipeline{ node{ func = f, name = "s" }, namespce = "x" }; return p end)
try("pipeline item", function() local p = pipeline{ node{ func = f, name = "s" }, 3 }; return p end)
try("pipeline nested", function() local p = pipeline{ { node{ func = f, name = "s" }, pipeline{ node{ func = f, name = "t" } } } }; return p end)
try("pipeline after nested", function() local p = pipeline{ pipeline{ node{ func = f, name = "a" } }, { node{ func = f, name = "b" } }, node{ func = f, name = "c" } }; return tostring(p) end)
try("pipeline remapped", function() local p = pipeline{ pipeline{ node{ func = f, name = "a", outputs = "x" } }, node{ func = f, name = "c" }, namespace = "ns" }; return tostring(p) end)
try("pool", function() local n = node{ func = f, name = "x", pool = "gpu" }; return n end)
try("pool number", function() local n = node{ func = f, name = "x", pool = 1 }; return n end)
try("pool empty", function() local n = node{ func = f, name = "x", pool = "" }; return n end)
try("pool typo field", function() local n = node{ func = f, name = "x", pol = "gpu" }; return n end)
try("env shell", function() local n = node{ command = "echo $P", env = { P = "${credentials.db.password}" }, name = "x" }; return n end)
try("env merged", function() local n = node{ command = cmd, env = { B = 2 }, name = "x" }; return { n = n, cmd = cmd } end)
try("env same value", function() local n = node{ command = cmd, env = { A = 1 }, name = "x" }; return n end)
try("env argv", function() local n = node{ command = { "env", env = { A = "1" } }, env = { B = "2" }, name = "x" }; return n end)
try("env dist", function() local n = node{ command = D(cmd), env = { B = "2" }, name = "x" }; return n end)
try("env conflict", function() local n = node{ command = cmd, env = { A = "2" }, name = "x" }; return n end)
try("env func", function() local n = node{ func = f, env = { A = "1" }, name = "x" }; return n end)
try("env string", function() local n = node{ command = "true", env = "A=1", name = "x" }; return n end)
try("env value", function() local n = node{ command = "true", env = { A = {} }, name = "x" }; return n end)
try("env list", function() local n = node{ command = "true", env = { "A=1" }, name = "x" }; return n end)
try("env equals", function() local n = node{ command = "true", env = { ["A=B"] = "1" }, name = "x" }; return n end)
try("env typo field", function() local n = node{ command = "true", evn = {}, name = "x" }; return n end)
try("azureml fields", function() local n = node{ command = "true", name = "x", compute = "gpu-cluster", environment = "e:1", instance_type = "Standard_NC6", shm_size = "16g" }; return n end)
try("compute bad", function() local n = node{ command = "true", name = "x", compute = "-gpu" }; return n end)
try("shm_size bad", function() local n = node{ command = "true", name = "x", shm_size = "16gb" }; return n end)
try("environment empty", function() local n = node{ command = "true", name = "x", environment = "" }; return n end)
return pipeline{}
