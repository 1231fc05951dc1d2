/* support.c — the few helpers every C module of the boundary shares. */
#include "flowlua.h"

#include <lauxlib.h>

int flow_raise(lua_State *L, const char *msg)
{
    lua_pushstring(L, msg);
    return lua_error(L);
}

static int fs_error_tostring(lua_State *L)
{
    lua_getfield(L, 1, "fs_error");
    return 1;
}

int flow_raise_fs(lua_State *L, const char *msg)
{
    lua_createtable(L, 0, 1);
    lua_pushstring(L, msg);
    lua_setfield(L, -2, "fs_error");
    if (luaL_newmetatable(L, "flow.FsError")) {
        lua_pushcfunction(L, fs_error_tostring);
        lua_setfield(L, -2, "__tostring");
    }
    lua_setmetatable(L, -2);
    return lua_error(L);
}

const char *flow_field_string(lua_State *L, int idx, const char *key)
{
    lua_getfield(L, idx, key);
    /* Strings only: lua_tostring would turn a number into a new string on the
     * stack, which the pop below would leave to the collector. */
    const char *s = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
    lua_pop(L, 1);                 /* the string stays alive: it is in the table */
    return s;
}

void flow_new_class(lua_State *L, const char *name, const luaL_Reg *methods, lua_CFunction gc)
{
    luaL_newmetatable(L, name);
    lua_newtable(L);               /* not luaL_newlib: it sizes an array, not a pointer */
    luaL_setfuncs(L, methods, 0);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, gc);
    lua_setfield(L, -2, "__gc");
    lua_pop(L, 1);
}
