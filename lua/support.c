/* support.c — the few helpers every C module of the boundary shares. */
#include "flowlua.h"

#include <lauxlib.h>

int flow_cpcall(lua_State *L, lua_CFunction fn, void *ud, int nargs, int nresults)
{
    lua_pushcfunction(L, fn);          /* a light C function: no allocation */
    lua_pushlightuserdata(L, ud);
    lua_rotate(L, -(nargs + 2), 2);    /* fn, ud, then the arguments */
    return lua_pcall(L, nargs + 1, nresults, 0);
}

struct owned_string { const char *s; size_t len; };

static int push_owned_string(lua_State *L)
{
    const struct owned_string *o = lua_touserdata(L, 1);
    lua_pushlstring(L, o->s, o->len);
    return 1;
}

void flow_push_owned(lua_State *L, char *s, size_t len, void (*release)(void *))
{
    struct owned_string o = { s, len };
    int rc = flow_cpcall(L, push_owned_string, &o, 0, 1);
    release(s);
    if (rc != LUA_OK) lua_error(L);
}

struct string_list { char *const *v; size_t n; };

static int push_string_list(lua_State *L)
{
    const struct string_list *l = lua_touserdata(L, 1);
    lua_createtable(L, (int)l->n, 0);
    for (size_t i = 0; i < l->n; i++) {
        lua_pushstring(L, l->v[i]);
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    return 1;
}

int flow_push_string_list(lua_State *L, char *const *v, size_t n)
{
    struct string_list l = { v, n };
    return flow_cpcall(L, push_string_list, &l, 0, 1);
}

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

bool flow_field_bool(lua_State *L, int idx, const char *key)
{
    lua_getfield(L, idx, key);
    bool set = lua_toboolean(L, -1);
    lua_pop(L, 1);
    return set;
}

bool flow_push_known_entry(lua_State *L, int exact, int memo, int d, bool patterns)
{
    d = lua_absindex(L, d);
    lua_pushvalue(L, d);
    if (lua_rawget(L, exact) == LUA_TTABLE) return true;
    lua_pop(L, 1);
    if (!patterns) {                  /* the memo keeps only what a search of them found */
        lua_pushnil(L);
        return true;
    }
    lua_pushvalue(L, d);
    if (lua_rawget(L, memo) == LUA_TTABLE) return true;
    lua_pop(L, 1);
    return false;
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
