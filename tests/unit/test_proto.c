/* test_proto.c — prototype identity (lua/proto.c) and the fingerprint of Lua
 * functions built on it (flow.fingerprint's Hasher:fn): closures of one
 * function expression share one id and one bytecode hash, but their upvalues
 * still count one by one, and the fingerprints are the ones of the rule
 * before the shortcut (sha256 of the code and "U<name>=<value>" parts joined
 * by NUL), with the shortcut or without it.  Runs on a full engine state. */
#include "check.h"
#include "flowlua.h"

#include <lauxlib.h>

static lua_State *L;

/* Runs a chunk; a failure is a failed check with its message. */
static void lua_ok(const char *code)
{
    if (luaL_dostring(L, code) != LUA_OK) {
        fprintf(stderr, "  lua: %s\n", lua_tostring(L, -1));
        CHECK(!"lua chunk failed");
    }
    lua_settop(L, 0);
}

static void test_self_check_passes_on_this_lua(void)
{
    CHECK(flow_proto_check(L));
    lua_ok("assert(require('flow.core').proto_id(function() end) ~= nil)");
}

static void test_one_expression_one_id_two_expressions_two(void)
{
    lua_ok("local core = require('flow.core')\n"
           "local function make(v) return function() return v end end\n"
           "local a, b = make(1), make(2)\n"
           "assert(a ~= b and core.proto_id(a) == core.proto_id(b))\n"
           "local f, g = function() return 1 end, function() return 1 end\n"
           "assert(core.proto_id(f) ~= core.proto_id(g))\n"
           "assert(core.proto_id(f) ~= core.proto_id(a))\n"
           "local ids = {}\n"
           "for i = 1, 100 do ids[core.proto_id(function() return i end)] = true end\n"
           "assert(next(ids) ~= nil and next(ids, next(ids)) == nil, 'a loop makes one prototype')\n"
           "assert(core.proto_id(string.len) == nil, 'a C function has none')\n"
           "assert(core.proto_id(coroutine.wrap(function() end)) == nil, 'a C closure has none')\n");
}

/* The fingerprint module's hasher with and without proto ids; `reference`
 * is the rule as it was before the shortcut, for functions whose upvalues
 * are integers (text "i<n>") and that name no global nor module. */
static const char prelude[] =
    "local core, cache = require('flow.core'), require('flow.cache')\n"
    "local fp = require('flow.fingerprint')\n"
    "local function reference(f)\n"
    "  local parts = { core.code(f) }\n"
    "  for i = 1, math.huge do\n"
    "    local name, v = debug.getupvalue(f, i)\n"
    "    if not name then break end\n"
    "    parts[#parts + 1] = 'U' .. name .. '=i' .. v\n"
    "  end\n"
    "  return cache.sha256(table.concat(parts, '\\0'))\n"
    "end\n"
    "local function without_ids(fn)\n"
    "  local real = core.proto_id\n"
    "  core.proto_id = function() return nil end\n"
    "  local ok, r = pcall(fn)\n"
    "  core.proto_id = real\n"
    "  assert(ok, r)\n"
    "  return r\n"
    "end\n"
    "local function make(k, t) return function() return k, t end end\n";

static void test_closures_of_one_prototype_differ_by_their_upvalues(void)
{
    char code[4096];
    snprintf(code, sizeof code, "%s%s", prelude,
             "local fs = {}\n"
             "for i = 1, 6 do fs[i] = function() return i % 3 end end\n"
             "local h = fp.hasher()\n"
             "for i = 1, 6 do assert(h:fn(fs[i]) == reference(fs[i]), 'the rule before the shortcut') end\n"
             "assert(h:fn(fs[1]) ~= h:fn(fs[2]), 'different upvalue values')\n"
             "local same1, same2 = make(7, 'x'), make(7, 'x')\n"
             "local other = make(8, 'x')\n"
             "assert(h:fn(same1) == h:fn(same2), 'the same upvalue values')\n"
             "assert(h:fn(same1) ~= h:fn(other))\n"
             "local t1, t2 = make(1, { a = 1 }), make(1, { a = 2 })\n"
             "assert(h:fn(t1) ~= h:fn(t2), 'a table upvalue counts by its content')\n"
             "assert(h:fn(make(1, { a = 1 })) == h:fn(t1))\n"
             "local a, b = function() return 1 end, function() return 2 end\n"
             "assert(h:fn(a) ~= h:fn(b), 'two functions on one line')\n"
             "assert(h:fn(a) == reference(a) and h:fn(b) == reference(b))\n"
             "local n1 = function() local function inner() return 1 end return inner end\n"
             "local n2 = function() local function inner() return 2 end return inner end\n"
             "assert(h:fn(n1) ~= h:fn(n2), 'a nested function counts')\n");
    lua_ok(code);
}

static void test_same_fingerprints_without_proto_ids(void)
{
    char code[4096];
    snprintf(code, sizeof code, "%s%s", prelude,
             "G1 = { 1, 2 }\n"
             "local helper = function(x) return x + 1 end\n"
             "local fs = {}\n"
             "for i = 1, 4 do fs[#fs + 1] = function() return helper(i) + G1[1] end end\n"
             "fs[#fs + 1] = make(3, fs[1])\n"
             "fs[#fs + 1] = make(3, fs[2])\n"
             "fs[#fs + 1] = function() return require('string') end\n"
             "local function rec(n) if n > 0 then return rec(n - 1) end end\n"
             "fs[#fs + 1] = rec\n"
             "local with = fp.hasher()\n"
             "local got = {}\n"
             "for i, f in ipairs(fs) do got[i] = with:fn(f) end\n"
             "local plain = without_ids(function()\n"
             "  local h, r = fp.hasher(), {}\n"
             "  for i, f in ipairs(fs) do r[i] = h:fn(f) end\n"
             "  return r\n"
             "end)\n"
             "for i = 1, #fs do assert(got[i] == plain[i], 'function ' .. i) end\n"
             "assert(got[1] ~= got[2] and got[5] ~= got[6])\n"
             "G1[1] = 5\n"
             "assert(fp.hasher():fn(fs[1]) ~= got[1], 'a global it names counts')\n");
    lua_ok(code);
}

int main(void)
{
    char err[256];
    L = flow_state_new(err, sizeof err);
    if (!L) { fprintf(stderr, "flow_state_new: %s\n", err); return 1; }
    RUN(test_self_check_passes_on_this_lua);
    RUN(test_one_expression_one_id_two_expressions_two);
    RUN(test_closures_of_one_prototype_differ_by_their_upvalues);
    RUN(test_same_fingerprints_without_proto_ids);
    flow_state_close(L);
    return CHECK_DONE("proto");
}
