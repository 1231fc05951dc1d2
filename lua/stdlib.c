/* stdlib.c — a package searcher for the stdlib compiled into the binary.
 * FLOW_STDLIB_PATH, when set, is searched first so the Lua half can be edited
 * without rebuilding. Module "flow.x.y" is file "flow/x/y.lua". */
#include "flowlua.h"

#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Module "flow.x.y" is file "flow/x/y.lua".  Names are pushed, not
 * allocated: the Lua calls that follow can raise, and a C copy would leak. */
static const char *push_module_file(lua_State *L, const char *name)
{
    luaL_gsub(L, name, ".", "/");
    lua_pushfstring(L, "%s.lua", lua_tostring(L, -1));
    lua_remove(L, -2);
    return lua_tostring(L, -1);
}

static int load_from_dir(lua_State *L, const char *dir, const char *file)
{
    const char *path = lua_pushfstring(L, "%s/%s", dir, file);
    if (access(path, R_OK) != 0) {
        lua_pop(L, 1);
        return 0;
    }
    if (flow_load_file(L, path) != LUA_OK) return lua_error(L);
    lua_insert(L, -2);                 /* the loader, then its extra argument (the path) */
    return 2;
}

static int search_stdlib(lua_State *L)
{
    const char *name = luaL_checkstring(L, 1);
    if (strcmp(name, "flow") != 0 && strncmp(name, "flow.", 5) != 0) {
        lua_pushstring(L, "not a flow module");
        return 1;
    }
    const char *file = push_module_file(L, name);
    const char *dev = getenv("FLOW_STDLIB_PATH");
    int n = dev && *dev ? load_from_dir(L, dev, file) : 0;
    for (const struct flow_embedded *e = flow_stdlib; !n && e->name; e++) {
        if (strcmp(e->name, file) != 0) continue;
        lua_pushfstring(L, "@<flow>/%s", file);
        if (luaL_loadbufferx(L, (const char *)e->data, e->len, lua_tostring(L, -1), "b") != LUA_OK)
            return lua_error(L);
        lua_insert(L, -2);           /* loader, then its extra argument (the name) */
        n = 2;
    }
    if (!n) lua_pushfstring(L, "no embedded module '%s'", file);
    return n ? n : 1;
}

void flow_open_stdlib(lua_State *L)
{
    lua_getglobal(L, "package");
    lua_getfield(L, -1, "searchers");
    size_t n = lua_rawlen(L, -1);
    for (size_t i = n + 1; i > 2; i--) {     /* make room at position 2, after preload */
        lua_rawgeti(L, -1, (lua_Integer)i - 1);
        lua_rawseti(L, -2, (lua_Integer)i);
    }
    lua_pushcfunction(L, search_stdlib);
    lua_rawseti(L, -2, 2);
    lua_pop(L, 2);
}
