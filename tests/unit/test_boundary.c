/* test_boundary.c — the C<->Lua boundary under errors: a Lua error raised while
 * C code holds heap memory (a template lookup that fails, a bad process spec)
 * frees that memory, and a bad spec starts no process.  Runs on a full engine
 * state (flow_state_new), from a throwaway working directory. */
#include "check.h"
#include "flowlua.h"

#include <ftw.h>
#include <lauxlib.h>
#include <malloc.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static lua_State *L;
static char dir[64];

/* Runs a chunk; a failure is a failed check with its message. */
static void lua_ok(const char *code)
{
    if (luaL_dostring(L, code) != LUA_OK) {
        fprintf(stderr, "  lua: %s\n", lua_tostring(L, -1));
        CHECK(!"lua chunk failed");
    }
    lua_settop(L, 0);
}

/* Bytes the C heap holds after a full collection (0 under ASan, whose
 * allocator glibc does not see: the leak checker covers that build). */
static size_t heap_in_use(void)
{
    lua_gc(L, LUA_GCCOLLECT);
    lua_gc(L, LUA_GCCOLLECT);
    return mallinfo2().uordblks;
}

/* Runs `code` (which repeats a failing call many times) and checks the heap
 * did not grow by what those calls would leak. */
static void no_growth(const char *code)
{
    lua_ok(code);                               /* once to warm up caches and tables */
    size_t before = heap_in_use();
    lua_ok(code);
    size_t after = heap_in_use();
    if (after > before + (1u << 20)) {
        fprintf(stderr, "  heap grew by %zu bytes\n", after - before);
        CHECK(after <= before + (1u << 20));
    }
}

static void test_expand_lookup_error_is_raised_as_is(void)
{
    lua_ok("local core = require('flow.core')\n"
           "local token = {}\n"
           "local ok, e = pcall(core.expand, 'x ${params.a} y', function() error(token) end)\n"
           "assert(not ok and e == token, 'the error object changed: ' .. tostring(e))\n"
           "ok, e = pcall(core.expand, '${inputs.a}', function() error('boom', 0) end)\n"
           "assert(not ok and e == 'boom', tostring(e))\n"
           "assert(core.expand('<${params.a}>', function(ns, k) return ns .. ':' .. k end) == '<params:a>')\n"
           "local s, m = core.expand('${params.a}', function() return nil, 'no such parameter' end)\n"
           "assert(s == nil and m == 'no such parameter', tostring(m))\n"
           "s, m = core.expand('${params.a}', function() return nil, 42 end)\n"
           "assert(s == nil and m == '42', tostring(m))\n"
           "s, m = core.expand('${params.a}', function() end)\n"
           "assert(s == nil and m == 'unknown reference', tostring(m))\n"
           "ok, e = pcall(core.expand, '${params.a}', function() coroutine.yield() end)\n"
           "assert(not ok and tostring(e):find('yield'), tostring(e))\n");
}

static void test_expand_lookup_error_frees_the_expansion(void)
{
    no_growth("local core = require('flow.core')\n"
              "local t = string.rep('x', 8192) .. '${params.a}'\n"
              "for i = 1, 2000 do\n"
              "  assert(not pcall(core.expand, t, function() error('boom') end))\n"
              "end\n");
}

static void test_spawn_bad_spec_frees_what_was_read(void)
{
    no_growth("local proc = require('flow.proc')\n"
              "local argv = { 'true' }\n"
              "for i = 2, 512 do argv[i] = 'arg' .. i end\n"
              "for i = 1, 2000 do\n"
              "  assert(not pcall(proc.spawn, { argv = argv, env = { 'A=1', {} } }))\n"
              "end\n"
              "for i = 1, 300 do\n"
              "  assert(not pcall(proc.spawn_group, { { argv = argv }, { argv = argv }, { argv = 'sh' } }))\n"
              "end\n");
}

static void test_spawn_group_bad_spec_starts_nothing(void)
{
    lua_ok("local proc = require('flow.proc')\n"
           "local first = { argv = { 'sh', '-c', 'touch started' } }\n"
           "local ok, e = pcall(proc.spawn_group, { first, { argv = { 'true', {} } } })\n"
           "proc.sleep(1)                       -- time enough for a stray first process\n"
           "assert(io.open('started') == nil, 'a process started although a later spec was bad')\n"
           "assert(not ok and e:find('argv%[2%] is not a string'), e)\n"
           "ok, e = pcall(proc.spawn, { argv = { 'true' }, env = { 'A=1', {} } })\n"
           "assert(not ok and e:find('env%[2%] is not a string'), e)\n"
           "ok, e = pcall(proc.spawn_group, { first, 'sh' })\n"
           "assert(not ok and e:find('process 2 is not a table'), e)\n");
}

static void test_spawn_and_group_results(void)
{
    lua_ok("local proc = require('flow.proc')\n"
           "local r = assert(proc.spawn { argv = { 'sh', '-c', 'echo out; echo err >&2; exit 3' }, capture = true })\n"
           "assert(r.code == 3 and r.stdout == 'out\\n' and r.stderr == 'err\\n', r.stdout .. r.stderr)\n"
           "local r2, e = proc.spawn { argv = { 'no-such-command-flow-test' } }\n"
           "assert(r2 == nil and e:find('command not found'), e)\n"
           "local g = assert(proc.spawn_group { { argv = { 'true' } }, { argv = { 'sh', '-c', 'exit 2' } } })\n"
           "assert(g.failed == 2 and g.results[2].code == 2 and #g.results == 2)\n"
           "local g2, e2 = proc.spawn_group { { argv = { 'sleep', '30' } }, { argv = { 'no-such-command-flow-test' } } }\n"
           "assert(g2 == nil and e2:find('command not found'), e2)\n");
}

static void test_dag_build_bad_step_frees_what_was_read(void)
{
    lua_ok("local dag = require('flow.dag')\n"
           "local ok, e = pcall(dag.build, { { name = 'a', outputs = { { arg = 'x' } } } }, {})\n"
           "assert(not ok and e:find('step a: an output without dataset'), e)\n"
           "local g = dag.build({ { name = 'b', tags = { 7, 't' }, outputs = { { dataset = 'd' } } } }, {})\n"
           "assert(g:count() == 1)\n");
    no_growth("local dag = require('flow.dag')\n"
              "local inputs = {}\n"
              "for i = 1, 512 do inputs[i] = { dataset = 'd' .. i } end\n"
              "local steps = { { name = 'a', inputs = inputs, outputs = { {} } } }\n"
              "for i = 1, 2000 do assert(not pcall(dag.build, steps, {})) end\n");
}

/* The runner hands dag.build its node{} tables as they are (no spec table
 * per step): fields read through the Node class's __index. */
static void test_dag_build_reads_nodes_as_they_are(void)
{
    lua_ok("local dag, flow = require('flow.dag'), require('flow')\n"
           "local f = function() end\n"
           "local a = flow.node{ func = f, name = 'a', outputs = 'x', tags = 't' }\n"
           "local b = flow.node{ command = { 'true' }, name = 'b', inputs = { i = 'x' }, outputs = { 'y' } }\n"
           "local g = dag.build({ a, b }, {}, {})\n"
           "assert(g:count() == 2 and g:producer('y') == 2 and g:deps(2)[1] == 1)\n"
           "local ok, e = pcall(dag.build, { a, a }, {}, {})\n"
           "assert(not ok and e:find(\"two steps are named 'a'\"), e)\n");
}

/* An allocator that refuses every new or growing block while `refusing`:
 * Lua raises "not enough memory" (LUA_ERRMEM) from the first allocation. */
static lua_Alloc real_alloc;
static void *real_alloc_ud;
static int refusing;

static void *refusing_alloc(void *ud, void *ptr, size_t osize, size_t nsize)
{
    if (refusing && nsize > 0 && (!ptr || nsize > osize)) return NULL;
    return real_alloc(ud, ptr, osize, nsize);
}

/* g:method(seeds) with every Lua allocation refused: a memory error, and the
 * C arrays the walk made are freed (the heap does not grow over 100 calls). */
static void walk_out_of_memory(const char *method)
{
    lua_getglobal(L, "g");
    lua_getfield(L, -1, method);
    lua_insert(L, -2);
    lua_getglobal(L, "seeds");
    lua_call(L, 2, 1);                          /* once to grow the stack and caches */
    lua_settop(L, 0);
    size_t before = heap_in_use();
    real_alloc = lua_getallocf(L, &real_alloc_ud);
    lua_setallocf(L, refusing_alloc, real_alloc_ud);
    int errmem = 0;
    for (int i = 0; i < 100; i++) {
        lua_getglobal(L, "g");
        lua_getfield(L, -1, method);
        lua_insert(L, -2);
        lua_getglobal(L, "seeds");
        refusing = 1;
        int rc = lua_pcall(L, 2, 1, 0);
        refusing = 0;
        errmem += rc == LUA_ERRMEM;
        lua_settop(L, 0);
    }
    lua_setallocf(L, real_alloc, real_alloc_ud);
    CHECK(errmem == 100);
    size_t after = heap_in_use();
    if (after > before + (1u << 20)) {
        fprintf(stderr, "  %s: heap grew by %zu bytes\n", method, after - before);
        CHECK(after <= before + (1u << 20));
    }
}

static void test_dag_walk_out_of_memory_frees_its_arrays(void)
{
    lua_ok("local dag = require('flow.dag')\n"
           "local steps = {}\n"
           "seeds = {}\n"
           "for i = 1, 20000 do\n"
           "  steps[i] = { name = 's' .. i, outputs = { { dataset = 'd' .. i } },\n"
           "               inputs = i > 1 and { { dataset = 'd' .. (i - 1) } } or {} }\n"
           "  seeds[i] = i\n"
           "end\n"
           "g = dag.build(steps, {})\n");
    walk_out_of_memory("downstream");
    walk_out_of_memory("upstream");
    lua_ok("local d = g:downstream({ 19999 })\n"
           "assert(d[19999] and d[20000] and not d[19998])\n"
           "local u = g:upstream({ 2 })\n"
           "assert(u[1] and u[2] and not u[3])\n"
           "local ok, e = pcall(g.downstream, g, { 1, 20001 })\n"
           "assert(not ok and e:find('no such step 20001'), e)\n"
           "g, seeds = nil, nil\n");
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st; (void)flag; (void)ftw;
    return remove(path);
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/flow-test-boundary-XXXXXX");
    if (!mkdtemp(dir) || chdir(dir) != 0) { perror(dir); return 1; }
    char err[256];
    L = flow_state_new(err, sizeof err);
    if (!L) { fprintf(stderr, "flow_state_new: %s\n", err); return 1; }
    RUN(test_expand_lookup_error_is_raised_as_is);
    RUN(test_expand_lookup_error_frees_the_expansion);
    RUN(test_spawn_bad_spec_frees_what_was_read);
    RUN(test_spawn_group_bad_spec_starts_nothing);
    RUN(test_spawn_and_group_results);
    RUN(test_dag_build_bad_step_frees_what_was_read);
    RUN(test_dag_build_reads_nodes_as_they_are);
    RUN(test_dag_walk_out_of_memory_frees_its_arrays);
    flow_state_close(L);
    if (chdir("/") != 0) perror("/");
    nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return CHECK_DONE("boundary");
}
