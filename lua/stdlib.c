/* stdlib.c — a package searcher for the stdlib compiled into the binary.
 * FLOW_STDLIB_PATH, when set, is searched first so the Lua half can be edited
 * without rebuilding. Module "flow.x.y" is file "flow/x/y.lua". */
#include "flowlua.h"
#include "util.h"

#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char *module_file(const char *name)
{
    char *file = xasprintf("%s.lua", name);
    for (char *p = file; *p && strcmp(p, ".lua") != 0; p++)
        if (*p == '.') *p = '/';
    return file;
}

static int load_from_dir(lua_State *L, const char *dir, const char *file)
{
    char *path = xasprintf("%s/%s", dir, file);
    int found = access(path, R_OK) == 0;
    if (found) {
        if (flow_load_file(L, path) != LUA_OK) {
            free(path);
            return lua_error(L);
        }
        lua_pushstring(L, path);
    }
    free(path);
    return found ? 2 : 0;
}

static int search_stdlib(lua_State *L)
{
    const char *name = luaL_checkstring(L, 1);
    if (strcmp(name, "flow") != 0 && strncmp(name, "flow.", 5) != 0) {
        lua_pushstring(L, "not a flow module");
        return 1;
    }
    char *file = module_file(name);
    const char *dev = getenv("FLOW_STDLIB_PATH");
    int n = dev && *dev ? load_from_dir(L, dev, file) : 0;
    for (const struct flow_embedded *e = flow_stdlib; !n && e->name; e++) {
        if (strcmp(e->name, file) != 0) continue;
        lua_pushfstring(L, "@<flow>/%s", file);
        if (luaL_loadbufferx(L, (const char *)e->data, e->len, lua_tostring(L, -1), "b") != LUA_OK) {
            free(file);
            return lua_error(L);
        }
        lua_insert(L, -2);           /* loader, then its extra argument (the name) */
        n = 2;
    }
    if (!n) lua_pushfstring(L, "no embedded module '%s'", file);
    free(file);
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
