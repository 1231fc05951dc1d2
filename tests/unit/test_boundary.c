/* test_boundary.c — the C<->Lua boundary under errors: a Lua error raised while
 * C code holds heap memory (a template lookup that fails, a bad process spec,
 * an allocation Lua cannot make) frees that memory, and a bad spec starts no
 * process.  Runs on a full engine
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

/* Bytes the C heap holds after a full collection, blocks malloc maps on
 * their own (128 KiB and more) included; 0 under ASan, whose allocator glibc
 * does not see: the leak checker covers that build. */
static size_t heap_in_use(void)
{
    lua_gc(L, LUA_GCCOLLECT);
    lua_gc(L, LUA_GCCOLLECT);
    struct mallinfo2 mi = mallinfo2();
    return mi.uordblks + mi.hblkhd;
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

/* dag.build takes node{}s (their records): anything else is refused, and a
 * graph it refuses leaves nothing behind (its scratch arrays grown first). */
static void test_dag_build_bad_step_frees_what_was_read(void)
{
    lua_ok("local dag, flow = require('flow.dag'), require('flow')\n"
           "local ok, e = pcall(dag.build, { { name = 'a', outputs = { { dataset = 'x' } } } }, {})\n"
           "assert(not ok and e:find('step 1 is not a node{}'), e)\n"
           "local g = dag.build({ flow.node{ func = print, name = 'b', tags = 't', outputs = 'd' } }, {})\n"
           "assert(g:count() == 1)\n");
    no_growth("local dag, flow = require('flow.dag'), require('flow')\n"
              "local inputs = {}\n"
              "for i = 1, 512 do inputs[i] = 'd' .. i end\n"
              "local a = flow.node{ func = print, name = 'a', inputs = inputs, tags = inputs }\n"
              "local b = flow.node{ func = print, name = 'b', outputs = 'd1' }\n"
              "for i = 1, 2000 do\n"
              "  assert(not pcall(dag.build, { a }, {}))                  -- d2 ... made by no step\n"
              "  assert(not pcall(dag.build, { a, b, {} }, {}))           -- not a node\n"
              "end\n");
}

/* The runner hands dag.build its node{}s as they are: the graph is built
 * from their records. */
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

/* A node's record lives in its store, and a store as long as one of its
 * nodes does: loading a script again (new_store) lets the last load's records
 * go.  A node{} that raises half-way leaves nothing behind either.  (Each
 * new store may sit where a freed one was: node{}'s cache of its line's id
 * must not take it for the old one.) */
static void test_node_records_go_with_their_nodes(void)
{
    no_growth("local flow, pipeline = require('flow'), require('flow.pipeline')\n"
              "for k = 1, 50 do\n"
              "  pipeline.new_store()\n"
              "  local nodes = {}\n"
              "  for i = 1, 1000 do\n"
              "    nodes[i] = flow.node{ func = print, name = 's' .. i, inputs = { 'd' .. i, 'e' .. i },\n"
              "                          outputs = { o = 'x' .. i }, tags = 't' .. i }\n"
              "  end\n"
              "  local p = pipeline.pipeline{ pipeline.pipeline(nodes), namespace = 'ns' }\n"
              "  assert(#p == 1000 and p.nodes[1000].name == 'ns.s1000')\n"
              "  local many = {}\n"
              "  for i = 1, 40 do many[i] = 'm' .. i end\n"
              "  assert(not pcall(flow.node, { func = print, name = 'bad', inputs = many, outputs = { 'ok', 7 } }))\n"
              "end\n");
    lua_ok("local flow, pipeline = require('flow'), require('flow.pipeline')\n"
           "pipeline.new_store()\n"
           "local a = flow.node{ func = print, name = 'a', outputs = 'x' }\n"
           "pipeline.new_store()\n"
           "collectgarbage()\n"
           "local b = flow.node{ func = print, name = 'b', inputs = 'x' }\n"
           "local g = require('flow.dag').build({ a, b }, {}, {})\n"
           "assert(g:count() == 2 and g:producer('x') == 1 and a.name == 'a')\n"
           "local c = flow.node{ func = print, name = 'a', outputs = 'x' }\n"
           "assert(#pipeline.pipeline{ a, c } == 1, 'the same step from two stores is one step')\n"
           "local function make(k) return flow.node{ func = print, name = 's' .. k, outputs = 'd' .. k } end\n"
           "local where = make(0).where\n"
           "for k = 1, 20 do\n"
           "  pipeline.new_store()\n"
           "  assert(make(k).where == where, 'a store where a freed one was')\n"
           "  pipeline.new_store()\n"
           "  collectgarbage()\n"
           "  collectgarbage()\n"
           "end\n");
}

/* The plan's one-pass helpers (pipeline.io_names, lua/node_decl.c;
 * pipeline.command_refs, lua/command_refs.c) agree with the walks they
 * replace, done here in Lua over the same nodes: each name once, in the
 * order a walk of the steps meets it, across two stores too; the first step
 * whose templates check_templates refuses; the steps with a ${params.…}
 * reference and with "${credentials.". */
static void test_plan_helpers_agree_with_the_walks_they_replace(void)
{
    lua_ok("local flow, pipeline = require('flow'), require('flow.pipeline')\n"
           "local command, core = require('flow.command'), require('flow.core')\n"
           "pipeline.new_store()\n"
           "local early = flow.node{ command = 'cat ${inputs.a} > ${outputs.o}', name = 'e',\n"
           "                         inputs = { a = 'x0' }, outputs = { o = 'y0' } }\n"
           "pipeline.new_store()\n"
           "local nodes = { early }\n"
           "local specs = {\n"
           "  { 'touch', '${outputs.o}' }, { 'cp', '${inputs.a}', '${outputs.o}' }, 'echo ${params.lr} > ${outputs.o}',\n"
           "  flow.command{ 'sh', '-c', 'x', env = { K = '${credentials.db.password}', O = '${outputs.o}' } },\n"
           "  { 'cp', '${inputs.b}', '${outputs.o}' }, 'echo ${outputs.o', { 'x', '$${credentials.y}', '${outputs.o}' },\n"
           "  flow.command{ 'x', env = { P = '${params.a.b}', Q = 7 } }, { 'echo', '${inputs.zz}' },\n"
           "}\n"
           "for i, c in ipairs(specs) do\n"
           "  nodes[#nodes + 1] = flow.node{ command = c, name = 'n' .. i, inputs = { a = 'x' .. (i % 3) },\n"
           "                                 outputs = { o = 'y' .. i } }\n"
           "end\n"
           "nodes[#nodes + 1] = flow.node{ func = print, name = 'f', inputs = { 'x1', 'y2' }, outputs = 'z' }\n"
           "local all = {}\n"
           "for i = 1, #nodes do all[i] = i end\n"
           "local commands = {}\n"
           "for i, n in ipairs(nodes) do if n.kind == 'command' then commands[#commands + 1] = i end end\n"
           "for _, which in ipairs({ 'inputs', 'outputs', 'all' }) do\n"
           "  local want, seen = {}, {}\n"
           "  for _, i in ipairs(all) do\n"
           "    local lists = which == 'all' and { false, true } or { which == 'outputs' }\n"
           "    for _, outputs in ipairs(lists) do\n"
           "      for _, d in ipairs(pipeline.io_datasets(nodes[i], outputs)) do\n"
           "        if not seen[d] then seen[d] = true; want[#want + 1] = d end\n"
           "      end\n"
           "    end\n"
           "  end\n"
           "  local got = pipeline.io_names(nodes, all, which)\n"
           "  assert(table.concat(got, ' ') == table.concat(want, ' '), which .. ': ' .. table.concat(got, ' '))\n"
           "end\n"
           "local wrong, params, creds = nil, {}, {}\n"
           "for _, i in ipairs(commands) do\n"
           "  local n, bad, p, c = nodes[i], false, false, false\n"
           "  for _, s in ipairs(command.template_strings(n.cmd)) do\n"
           "    local refs, err = core.template_refs(s)\n"
           "    if err then bad = true end\n"
           "    for _, r in ipairs(refs) do\n"
           "      if r[1] == 'params' then p = true end\n"
           "      if (r[1] == 'inputs' or r[1] == 'outputs') and not pipeline.has_arg(n, r[1] == 'outputs', r[2]) then\n"
           "        bad = true\n"
           "      end\n"
           "    end\n"
           "    if s:find('${credentials.', 1, true) then c = true end\n"
           "  end\n"
           "  if bad and not wrong then wrong = i end\n"
           "  if p then params[#params + 1] = i end\n"
           "  if c then creds[#creds + 1] = i end\n"
           "end\n"
           "local w, p, c = pipeline.command_refs(nodes, commands)\n"
           "assert(wrong == 6 and w == wrong, tostring(w))\n"
           "assert(table.concat(p, ',') == table.concat(params, ',') and #p == 2, table.concat(p, ','))\n"
           "assert(table.concat(c, ',') == table.concat(creds, ',') and #c == 2, table.concat(c, ','))\n"
           "assert(pipeline.command_refs(nodes, { 1, 2, 3 }) == nil)\n");
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
    lua_ok("local dag, flow = require('flow.dag'), require('flow')\n"
           "local steps = {}\n"
           "seeds = {}\n"
           "for i = 1, 20000 do\n"
           "  steps[i] = flow.node{ func = print, name = 's' .. i, outputs = 'd' .. i,\n"
           "                        inputs = i > 1 and 'd' .. (i - 1) or nil }\n"
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

/* An allocator that lets `allow_left` more new or growing Lua blocks through,
 * then refuses every one: run with 0, 1, 2, ... it fails each allocation point
 * of a call in turn (a stack growth, a CallInfo, a string, a table). */
static long allow_left = -1;                    /* -1: no limit */

static void *countdown_alloc(void *ud, void *ptr, size_t osize, size_t nsize)
{
    if (allow_left >= 0 && nsize > 0 && (!ptr || nsize > osize)) {
        if (allow_left == 0) return NULL;
        allow_left--;
    }
    return real_alloc(ud, ptr, osize, nsize);
}

/* Calls f(args...), the values `code` returns, 200 times with Lua's
 * allocations failing from the 1st, 2nd, ... 8th on, and checks that the C
 * heap did not grow by what the calls would leak (under ASan, whose heap
 * mallinfo does not see, the leak checker does).  Returns how many calls
 * raised a memory error. */
static int out_of_memory_calls_upto(const char *code, long most);

static int out_of_memory_calls(const char *code)
{
    return out_of_memory_calls_upto(code, 8);
}

/* The same, with allocations failing from the 1st to the `most`th on, spread
 * over the 200 calls (a call that gets far before it fails). */
static int out_of_memory_calls_upto(const char *code, long most)
{
    if (luaL_dostring(L, code) != LUA_OK) {
        fprintf(stderr, "  lua: %s\n", lua_tostring(L, -1));
        CHECK(!"lua chunk failed");
        lua_settop(L, 0);
        return 0;
    }
    int n = lua_gettop(L);
    for (int k = 1; k <= n; k++) lua_pushvalue(L, k);
    lua_pcall(L, n - 1, 0, 0);                  /* once to warm up caches and tables */
    lua_settop(L, n);
    size_t before = heap_in_use();
    real_alloc = lua_getallocf(L, &real_alloc_ud);
    lua_setallocf(L, countdown_alloc, real_alloc_ud);
    int errmem = 0;
    for (int i = 0; i < 200; i++) {
        for (int k = 1; k <= n; k++) lua_pushvalue(L, k);
        allow_left = most <= 200 ? i % most : (long)i * most / 200;
        int rc = lua_pcall(L, n - 1, 0, 0);
        allow_left = -1;
        errmem += rc == LUA_ERRMEM;
        lua_settop(L, n);
    }
    lua_setallocf(L, real_alloc, real_alloc_ud);
    size_t after = heap_in_use();
    lua_settop(L, 0);
    if (after > before + (1u << 20)) {
        fprintf(stderr, "  heap grew by %zu bytes\n", after - before);
        CHECK(after <= before + (1u << 20));
    }
    return errmem;
}

static void test_read_file_out_of_memory_frees_the_buffer(void)
{
    lua_ok("local f = assert(io.open('big.txt', 'w'))\n"
           "f:write(string.rep('0123456789abcdef', 16384))\n"
           "f:close()\n");
    CHECK(out_of_memory_calls("return require('flow.core').read_file, 'big.txt'") > 0);
}

static void test_list_dir_out_of_memory_frees_the_names(void)
{
    lua_ok("local core = require('flow.core')\n"
           "core.mkdir_p('many')\n"
           "for i = 1, 300 do\n"
           "  assert(io.open('many/' .. i .. string.rep('n', 150), 'w')):close()\n"
           "end\n"
           "assert(#core.list_dir('many') == 300)\n");
    CHECK(out_of_memory_calls("return require('flow.core').list_dir, 'many'") > 0);
}

static void test_json_decode_out_of_memory_frees_the_tree(void)
{
    lua_ok("local core = require('flow.core')\n"
           "local t = {}\n"
           "for i = 1, 2000 do t[i] = { name = string.rep('v', 100) .. i } end\n"
           "json_text = core.json_encode(t)\n"
           "assert(#core.json_decode(json_text) == 2000)\n");
    CHECK(out_of_memory_calls("return require('flow.core').json_decode, json_text") > 0);
    lua_ok("json_text = nil");
}

static void test_json_encode_out_of_memory_frees_the_text(void)
{
    /* Each call's text differs: Lua's string cache would otherwise find the
     * last one at the same address and push it without allocating. */
    CHECK(out_of_memory_calls("local encode, t, n = require('flow.core').json_encode, {}, 0\n"
                              "for i = 1, 2000 do t[i] = string.rep('w', 100) .. i end\n"
                              "return function() n = n + 1; t[1] = n; return encode(t) end") > 0);
}

/* A walk that stops part-way (the stack cannot grow for the next level)
 * frees the levels it converted, and the path it built. */
static void test_json_encode_out_of_memory_frees_a_partial_tree(void)
{
    CHECK(out_of_memory_calls("local s, v = string.rep('y', 2000), 'leaf'\n"
                              "for i = 1, 150 do v = { s, s, s, s, s, v } end\n"
                              "return require('flow.core').json_encode, v") > 0);
    lua_ok("local core = require('flow.core')\n"
           "local v = {}\n"
           "v.a = { b = { 1, 2, { c = function() end } } }\n"
           "local s, e = core.json_encode(v)\n"
           "assert(s == nil and e == '.a.b[3].c is a function, which cannot be saved as data', e)\n"
           "assert(core.json_encode({ b = 1, a = { 2, core.json_null } }) == '{\"a\":[2,null],\"b\":1}')\n"
           "assert(core.json_encode(core.json_list({})) == '[]')\n");
}

/* A desugaring error (here an unterminated distributed_job<) in a file read
 * into C memory: pushing its message may fail, the file's text is freed. */
static void test_load_script_error_out_of_memory_frees_the_text(void)
{
    lua_ok("local f = assert(io.open('bad.lua', 'w'))\n"
           "f:write(string.rep('-- filler line\\n', 16384), 'x = distributed_job<nodes = 1')\n"
           "f:close()\n"
           "chunk_name = '@bad.lua'             -- kept: the name is pushed without allocating\n"
           "local ok, e = require('flow.core').load_script('bad.lua')\n"
           "assert(ok == nil and e:find('^bad.lua:16385:'), e)\n");
    out_of_memory_calls("return require('flow.core').load_script, 'bad.lua'");
    lua_ok("chunk_name = nil");
}

static void test_expand_and_refs_out_of_memory_free_their_copies(void)
{
    CHECK(out_of_memory_calls("local v = 'v'\n"
                              "return require('flow.core').expand, string.rep('x', 200000) .. '${params.a}',\n"
                              "       function() return v end") > 0);
    CHECK(out_of_memory_calls("return require('flow.core').template_refs,\n"
                              "       '${params.a} ${params.' .. string.rep('k', 200000) .. '}'") > 0);
    CHECK(out_of_memory_calls("return require('flow.core').safe_name, string.rep('\\1', 100)") > 0);
    lua_ok("local core = require('flow.core')\n"
           "local r, e = core.template_refs('${params.a} ${inputs.b} ${bad')\n"
           "assert(#r == 2 and r[2][1] == 'inputs' and r[2][2] == 'b' and e:find('unterminated'), e)\n");
}

static void test_config_strings_out_of_memory_are_freed(void)
{
    lua_ok("local core = require('flow.core')\n"
           "core.mkdir_p('conf/base')\n"
           "for i = 1, 300 do core.mkdir_p('conf/' .. i .. string.rep('e', 150)) end\n"
           "cfg = require('flow.config').load('conf')\n");
    CHECK(out_of_memory_calls("return require('flow.config').list_envs, 'conf'") > 0);
    CHECK(out_of_memory_calls("return cfg.redact, cfg, string.rep('z', 200000)") > 0);
    lua_ok("cfg = nil");
}

static void test_stdlib_search_out_of_memory_frees_the_names(void)
{
    lua_ok("local found = package.searchers[2]('flow.' .. string.rep('x', 100))\n"
           "assert(found:find(\"no embedded module 'flow/xxx\"), found)\n"
           "assert(type(package.searchers[2]('flow.util')) == 'function')\n");
    CHECK(out_of_memory_calls("return package.searchers[2], 'flow.' .. string.rep('x', 200000)") > 0);
}

/* sched.run's C state (its steps, selection, scheduler, coroutines and their
 * references) belongs to a to-be-closed userdata, and nothing inside the
 * scheduler raises: a step whose coroutine cannot be made fails, and a memory
 * error anywhere leaks nothing. */
static void test_sched_run_out_of_memory_frees_its_state(void)
{
    lua_ok("local dag, flow = require('flow.dag'), require('flow')\n"
           "local nodes = {}\n"
           "for i = 1, 40 do\n"
           "  nodes[i] = flow.node{ func = print, name = 's' .. i, outputs = 'd' .. i,\n"
           "                        inputs = i > 1 and 'd' .. (i - 1) or nil }\n"
           "end\n"
           "sched_graph = dag.build(nodes, {}, {})\n"
           "sched_body = { attempt = function(i, k)\n"
           "  local t = {} for j = 1, 8 do t[j] = ('x'):rep(j * 10) .. i end\n"
           "  return true, { outputs = '{}' } end }\n"
           "local code = require('flow.sched').run(sched_graph, { jobs = 2, selected = {} }, sched_body)\n"
           "assert(code == 0, code)\n");
    CHECK(out_of_memory_calls_upto("return require('flow.sched').run, sched_graph, { jobs = 2 }, sched_body", 1200) > 0);
    lua_ok("sched_graph, sched_body = nil, nil");
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
    /* What is measured is the C heap, the Lua allocator's slabs in it, and
     * they keep the Lua heap's peak (alloc.c).  flow's collector is
     * generational, whose peak a warm-up run need not reach (the slabs of
     * a chunk making 50,000 nodes grew by another megabyte over the next
     * few runs, then stayed); incremental, one warm-up reaches it, so that
     * a growth left is C memory a failing call did not free. */
    lua_gc(L, LUA_GCINC, 0, 0, 0);
    RUN(test_expand_lookup_error_is_raised_as_is);
    RUN(test_expand_lookup_error_frees_the_expansion);
    RUN(test_spawn_bad_spec_frees_what_was_read);
    RUN(test_spawn_group_bad_spec_starts_nothing);
    RUN(test_spawn_and_group_results);
    RUN(test_dag_build_bad_step_frees_what_was_read);
    RUN(test_dag_build_reads_nodes_as_they_are);
    RUN(test_dag_walk_out_of_memory_frees_its_arrays);
    RUN(test_node_records_go_with_their_nodes);
    RUN(test_plan_helpers_agree_with_the_walks_they_replace);
    RUN(test_read_file_out_of_memory_frees_the_buffer);
    RUN(test_list_dir_out_of_memory_frees_the_names);
    RUN(test_json_decode_out_of_memory_frees_the_tree);
    RUN(test_json_encode_out_of_memory_frees_the_text);
    RUN(test_json_encode_out_of_memory_frees_a_partial_tree);
    RUN(test_load_script_error_out_of_memory_frees_the_text);
    RUN(test_expand_and_refs_out_of_memory_free_their_copies);
    RUN(test_config_strings_out_of_memory_are_freed);
    RUN(test_stdlib_search_out_of_memory_frees_the_names);
    RUN(test_sched_run_out_of_memory_frees_its_state);
    flow_state_close(L);
    if (chdir("/") != 0) perror("/");
    nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return CHECK_DONE("boundary");
}
