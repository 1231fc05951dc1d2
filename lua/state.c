/* state.c — one engine, one lua_State: libraries, C modules, stdlib searcher,
 * and the event loop that the state owns. */
#include "flowlua.h"
#include "loop.h"
#include "util.h"

#include <lauxlib.h>
#include <lualib.h>
#include <string.h>

static const char loop_key = 'L';      /* its address keys the loop in the registry */

lua_State *flow_state_new(char *err, size_t errlen)
{
    struct loop *loop = loop_new(err, errlen);
    if (!loop) return NULL;
    lua_State *L = luaL_newstate();
    if (!L) {
        loop_free(loop);
        errf(err, errlen, "cannot create the Lua state (out of memory)");
        return NULL;
    }
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
    /* Loaded when first required: most runs never talk to Azure, nor read a terminal. */
    luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_PRELOAD_TABLE);
    lua_pushcfunction(L, luaopen_flow_azureml);
    lua_setfield(L, -2, "flow.azureml");
    lua_pushcfunction(L, luaopen_flow_repl_c);
    lua_setfield(L, -2, "flow.repl_c");
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
    lua_close(L);
    loop_free(loop);
}
