/* state.c — one engine, one lua_State: libraries, C modules, stdlib searcher,
 * and the event loop that the state owns. */
#include "flowlua.h"
#include "loop.h"
#include "proc.h"
#include "util.h"

#include <lauxlib.h>
#include <locale.h>
#include <lualib.h>
#include <stdio.h>
#include <string.h>

static const char loop_key = 'L';      /* its address keys the loop in the registry */

static void warn_off(void *ud, const char *msg, int tocont);

/* An error outside any protected call: nothing can catch it (a bug in
 * flow's C code, never a script's error).  Say so before Lua aborts. */
static int panic(lua_State *L)
{
    const char *msg = lua_tostring(L, -1);
    fprintf(stderr, "flow: internal error: unprotected Lua error (%s)\n", msg ? msg : "not a string");
    return 0;
}

/* warn(): off until a script says warn("@on"), as in the lua interpreter;
 * a message may come in pieces (tocont). */
static void warn_on(void *ud, const char *msg, int tocont);

static bool warn_control(lua_State *L, const char *msg, int tocont)
{
    if (tocont || msg[0] != '@') return false;
    if (strcmp(msg, "@off") == 0) lua_setwarnf(L, warn_off, L);
    else if (strcmp(msg, "@on") == 0) lua_setwarnf(L, warn_on, L);
    return true;                          /* other controls are ignored */
}

static void warn_more(void *ud, const char *msg, int tocont)
{
    fputs(msg, stderr);
    if (!tocont) {
        fputc('\n', stderr);
        lua_setwarnf(ud, warn_on, ud);
    }
}

static void warn_on(void *ud, const char *msg, int tocont)
{
    if (warn_control(ud, msg, tocont)) return;
    fputs("Lua warning: ", stderr);
    lua_setwarnf(ud, warn_more, ud);
    warn_more(ud, msg, tocont);
}

static void warn_off(void *ud, const char *msg, int tocont)
{
    warn_control(ud, msg, tocont);
}

/* os.setlocale as Lua's, except that LC_NUMERIC and LC_COLLATE stay "C".
 * flow writes numbers with the C library (the values it keeps as Lua
 * literals, JSON, the journal, the UI) and reads them back: under a locale
 * with a decimal comma 0.5 was kept as "return 0,5" (two values; the next
 * run that restored it read 0).  And Lua compares strings with strcoll:
 * under another collation table.sort ordered what flow hashes (a table's
 * items, a command's env) and the catalog's patterns otherwise, so a
 * fingerprint or the pattern a dataset matches depended on the machine's
 * locale.  "all" sets the other categories and says what the locale now is;
 * "numeric" or "collate" to anything but C is an error that says why. */
static int setlocale_keeping_c(lua_State *L)
{
    const char *name = luaL_optstring(L, 1, NULL);
    const char *category = luaL_optstring(L, 2, "all");
    bool kept = strcmp(category, "numeric") == 0 || strcmp(category, "collate") == 0;
    if (name && kept && strcmp(name, "C") != 0 && strcmp(name, "POSIX") != 0)
        return luaL_error(L, "os.setlocale: flow keeps the \"%s\" category at \"C\" (numbers are written with a "
                          "'.', strings compare by their bytes, on every machine), so it cannot be set to \"%s\"; "
                          "\"ctype\", \"monetary\" and \"time\" can", category, name);
    bool sets = name != NULL, all = strcmp(category, "all") == 0;   /* (the call pops both strings) */
    int n = lua_gettop(L);
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, n, 1);
    if (sets && lua_isstring(L, -1)) {                 /* it set something */
        setlocale(LC_NUMERIC, "C");
        setlocale(LC_COLLATE, "C");
        if (all) lua_pushstring(L, setlocale(LC_ALL, NULL));
    }
    return 1;
}

static void keep_c_locale(lua_State *L)
{
    lua_getglobal(L, LUA_OSLIBNAME);
    lua_getfield(L, -1, "setlocale");
    lua_pushcclosure(L, setlocale_keeping_c, 1);
    lua_setfield(L, -2, "setlocale");
    lua_pop(L, 1);
}

lua_State *flow_state_new(char *err, size_t errlen)
{
    struct loop *loop = loop_new(err, errlen);
    if (!loop) return NULL;
    struct flow_alloc *alloc = flow_alloc_new();
    lua_State *L = lua_newstate(flow_alloc_fn(), alloc);
    if (!L) {
        flow_alloc_free(alloc);
        loop_free(loop);
        errf(err, errlen, "cannot create the Lua state (out of memory)");
        return NULL;
    }
    lua_atpanic(L, panic);
    /* Generational: most of what a run makes dies young (a step's arguments,
     * its results' texts, the script's node specs), while the graph, the
     * catalog and the values in flight live long.  Incremental collection
     * (Lua's default) lets the heap grow to twice what is live before a
     * cycle ends, and the allocator keeps its peak (alloc.c): a first run of
     * 100,000 Lua steps peaked at 248 MB that way and at 225 MB with this,
     * in the same time (bench/RESULTS.md, section 5).  (The run sets the
     * pause of its full collections: runner.lua's M.run.) */
    lua_gc(L, LUA_GCGEN, 0, 0);
    lua_setwarnf(L, warn_off, L);
    /* The main thread's extra space is copied into every new thread: NULL
     * there means "not a step coroutine". */
    memset(lua_getextraspace(L), 0, LUA_EXTRASPACE);
    luaL_openlibs(L);
    keep_c_locale(L);
    lua_sethook(L, flow_count_hook, LUA_MASKCOUNT, FLOW_HOOK_COUNT);
    lua_pushlightuserdata(L, loop);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &loop_key);
    static const luaL_Reg modules[] = {
        { "flow.core", luaopen_flow_core },
        { "flow.dag", luaopen_flow_dag },
        { "flow.proc", luaopen_flow_proc },
        { "flow.sched", luaopen_flow_sched },
        { "flow.config", luaopen_flow_config },
        { "flow.cache", luaopen_flow_cache },
        { "flow.pipeline_c", luaopen_flow_pipeline_c },
        { NULL, NULL },
    };
    for (const luaL_Reg *m = modules; m->name; m++) {
        luaL_requiref(L, m->name, m->func, 0);
        lua_pop(L, 1);
    }
    /* Loaded when first required: most runs never talk to Azure, nor read a
     * terminal; flow.values_c goes with flow.execute. */
    luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_PRELOAD_TABLE);
    lua_pushcfunction(L, luaopen_flow_azureml);
    lua_setfield(L, -2, "flow.azureml");
    lua_pushcfunction(L, luaopen_flow_repl_c);
    lua_setfield(L, -2, "flow.repl_c");
    lua_pushcfunction(L, luaopen_flow_values_c);
    lua_setfield(L, -2, "flow.values_c");
    lua_pop(L, 1);
    flow_proto_check(L);
    flow_open_project_loaders(L);
    flow_install_guards(L);
    flow_open_stdlib(L);
    return L;
}

struct loop *flow_state_loop(lua_State *L)
{
    lua_rawgetp(L, LUA_REGISTRYINDEX, &loop_key);
    struct loop *loop = lua_touserdata(L, -1);
    lua_pop(L, 1);
    return loop;
}

void flow_state_close(lua_State *L)
{
    if (!L) return;
    struct loop *loop = flow_state_loop(L);
    void *alloc;
    lua_getallocf(L, &alloc);
    lua_close(L);
    flow_alloc_free(alloc);
    proc_stop_lingering(loop);    /* their timers are the loop's */
    loop_free(loop);
}
