/* l_preload.c — cache.preload(state_path, hashes_path): the run's state file
 * and hash cache read ahead on a thread (engine/preload.h) while the script
 * runs; cache.preload_stats(), once the script has run, starts the stats of
 * the state's recorded output files; cache.state and cache.hashes take what
 * was read (and stat-ed) when it still stands.  One preload at a time, kept
 * in the registry until both are asked for, or the next preload, or the
 * state's end (its __gc).
 * core.chdir waits for its thread first (flow_preload_wait): the thread
 * reads relative to the working directory. */
#include "flowlua.h"
#include "preload.h"

#include <lauxlib.h>

#define PRELOAD_CLASS "flow.Preload"

static const char preload_key = 0;
static const luaL_Reg no_methods[] = { { NULL, NULL } };

static struct preload **current(lua_State *L)
{
    lua_rawgetp(L, LUA_REGISTRYINDEX, &preload_key);
    struct preload **box = lua_touserdata(L, -1);
    lua_pop(L, 1);                                 /* (the registry keeps it) */
    return box && *box ? box : NULL;
}

static int l_preload_gc(lua_State *L)
{
    struct preload **box = luaL_checkudata(L, 1, PRELOAD_CLASS);
    preload_free(*box);
    *box = NULL;
    return 0;
}

/* preload(state_path, hashes_path): starts reading both. */
static int l_preload(lua_State *L)
{
    const char *state = luaL_checkstring(L, 1), *hashes = luaL_checkstring(L, 2);
    struct preload **box = lua_newuserdatauv(L, sizeof *box, 0);
    *box = NULL;
    luaL_setmetatable(L, PRELOAD_CLASS);
    struct preload **old = current(L);
    if (old) {
        preload_free(*old);
        *old = NULL;
    }
    *box = preload_start(state, hashes);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &preload_key);
    return 0;
}

/* preload_stats(): the script has run (engine/preload.h). */
static int l_preload_stats(lua_State *L)
{
    struct preload **box = current(L);
    if (box) preload_stat_outputs(*box);
    return 0;
}

/* Once both were asked for, the preload goes. */
static void drop_if_done(lua_State *L, struct preload **box)
{
    if (!preload_done(*box)) return;
    preload_free(*box);
    *box = NULL;
    lua_pushnil(L);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &preload_key);
}

struct state_store *flow_preloaded_state(lua_State *L, const char *path, const char **warning,
                                         struct stat_prefetch **ahead)
{
    struct preload **box = current(L);
    if (!box) return NULL;
    struct state_store *s = preload_take_state(*box, path, warning, ahead);
    drop_if_done(L, box);
    return s;
}

struct hashcache *flow_preloaded_hashes(lua_State *L, const char *path)
{
    struct preload **box = current(L);
    if (!box) return NULL;
    struct hashcache *hc = preload_take_hashes(*box, path);
    drop_if_done(L, box);
    return hc;
}

void flow_preload_wait(lua_State *L)
{
    struct preload **box = current(L);
    if (box) preload_wait(*box);
}

/* Adds preload to the module table on top of the stack. */
void flow_open_preload(lua_State *L)
{
    flow_new_class(L, PRELOAD_CLASS, no_methods, l_preload_gc);
    lua_pushcfunction(L, l_preload);
    lua_setfield(L, -2, "preload");
    lua_pushcfunction(L, l_preload_stats);
    lua_setfield(L, -2, "preload_stats");
}
