/* state.c — one engine, one lua_State: libraries, C modules, stdlib searcher,
 * and the event loop that the state owns. */
#include "flowlua.h"
#include "loop.h"
#include "util.h"

#include <lauxlib.h>
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
    lua_setwarnf(L, warn_off, L);
    /* The main thread's extra space is copied into every new thread: NULL
     * there means "not a step coroutine". */
    memset(lua_getextraspace(L), 0, LUA_EXTRASPACE);
    luaL_openlibs(L);
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
    loop_free(loop);
}
