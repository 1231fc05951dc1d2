/* l_state.c — flow.cache.state(path): the step state file (engine/statestore.c)
 * as a userdata that owns it, so a Lua error anywhere later cannot leak it.
 *
 *   st = cache.state(path)        -> State, warning-or-nil  (raises a file-system error)
 *   st:get(name)                  -> fp, time, body, files  or nil (files: {dataset = {path =, hash =}}
 *                                    when every output is a file, else nil)
 *   st:put(name, fp, time, body, {dataset, kind, path, hash, ...})
 *   st:names()                    -> {name, ...}
 *   st:count()                    -> n
 *   st:save()                     raises a file-system error
 *   st:stats()                    -> {records =, damaged =, torn_bytes =, file_bytes =} */
#include "flowlua.h"
#include "statestore.h"

#include <lauxlib.h>
#include <string.h>

#define STATE_CLASS "flow.StateStore"

struct state_store *flow_check_state_store(lua_State *L, int idx)
{
    struct state_store **box = luaL_checkudata(L, idx, STATE_CLASS);
    if (!*box) luaL_error(L, "the state store is closed");
    return *box;
}

static int l_state_open(lua_State *L)
{
    const char *path = luaL_checkstring(L, 1);
    struct state_store **box = lua_newuserdatauv(L, sizeof *box, 0);
    *box = NULL;
    luaL_setmetatable(L, STATE_CLASS);
    char err[1024];
    const char *warning;
    if (!(*box = state_store_open(path, &warning, err, sizeof err))) return flow_raise_fs(L, err);
    if (warning) lua_pushstring(L, warning); else lua_pushnil(L);
    return 2;
}

static int l_state_get(lua_State *L)
{
    struct state_store *s = flow_check_state_store(L, 1);
    const struct state_rec *r = state_store_get(s, luaL_checkstring(L, 2));
    if (!r) return 0;
    lua_pushstring(L, r->fp);
    lua_pushnumber(L, r->time);
    lua_pushlstring(L, r->body, r->body_len);
    for (size_t i = 0; i < r->n_outs; i++)
        if (r->outs[i].kind != 'f') return 3;
    lua_createtable(L, 0, (int)r->n_outs);
    for (size_t i = 0; i < r->n_outs; i++) {
        lua_createtable(L, 0, 2);
        lua_pushstring(L, r->outs[i].path);
        lua_setfield(L, -2, "path");
        lua_pushstring(L, r->outs[i].hash);
        lua_setfield(L, -2, "hash");
        lua_setfield(L, -2, r->outs[i].dataset);
    }
    return 4;
}

static int l_state_put(lua_State *L)
{
    struct state_store *s = flow_check_state_store(L, 1);
    struct state_rec rec = { 0 };
    size_t name_len, fp_len;
    rec.name = luaL_checklstring(L, 2, &name_len);
    rec.fp = luaL_checklstring(L, 3, &fp_len);
    if (name_len == 0) return luaL_error(L, "put: a step's name is empty");
    if (strlen(rec.name) != name_len || strlen(rec.fp) != fp_len)
        return luaL_error(L, "put: a step's name or fingerprint holds a NUL byte");
    rec.time = luaL_checknumber(L, 4);
    rec.body = luaL_checklstring(L, 5, &rec.body_len);
    luaL_checktype(L, 6, LUA_TTABLE);
    lua_Integer n = luaL_len(L, 6);
    if (n % 4 != 0) return luaL_error(L, "put: outputs come in fours (dataset, kind, path, hash)");
    rec.n_outs = (size_t)(n / 4);
    /* Scratch for the outputs as a userdata: a bad field below raises without a leak. */
    rec.outs = lua_newuserdatauv(L, (rec.n_outs ? rec.n_outs : 1) * sizeof *rec.outs, 0);
    for (size_t i = 0; i < rec.n_outs; i++) {
        const char *f[4];
        for (int k = 0; k < 4; k++) {
            int at = (int)(i * 4) + k + 1;
            size_t len;
            /* Strings only: a number converted here would be a new string
             * that is not in the table, gone once popped. */
            if (lua_rawgeti(L, 6, at) != LUA_TSTRING)
                return luaL_error(L, "put: output field %d is a %s, not a string", at, luaL_typename(L, -1));
            f[k] = lua_tolstring(L, -1, &len);   /* stays alive in the table */
            if (strlen(f[k]) != len) return luaL_error(L, "put: output field %d holds a NUL byte", at);
            lua_pop(L, 1);
        }
        if (strlen(f[1]) != 1) return luaL_error(L, "put: an output's kind is one letter");
        rec.outs[i] = (struct state_out){ f[1][0], f[0], f[2], f[3] };
    }
    char err[256];
    if (state_store_put(s, &rec, err, sizeof err) != 0) return luaL_error(L, "put: %s", err);
    return 0;
}

static int l_state_names(lua_State *L)
{
    struct state_store *s = flow_check_state_store(L, 1);
    size_t n = state_store_count(s);
    lua_createtable(L, (int)n, 0);
    for (size_t i = 0; i < n; i++) {
        lua_pushstring(L, state_store_at(s, i)->name);
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    return 1;
}

static int l_state_count(lua_State *L)
{
    lua_pushinteger(L, (lua_Integer)state_store_count(flow_check_state_store(L, 1)));
    return 1;
}

static int l_state_save(lua_State *L)
{
    char err[1024];
    if (state_store_save(flow_check_state_store(L, 1), err, sizeof err) != 0) return flow_raise_fs(L, err);
    return 0;
}

static int l_state_stats(lua_State *L)
{
    struct state_store_stats st = state_store_stats(flow_check_state_store(L, 1));
    lua_createtable(L, 0, 4);
    lua_pushinteger(L, (lua_Integer)st.records); lua_setfield(L, -2, "records");
    lua_pushinteger(L, (lua_Integer)st.damaged); lua_setfield(L, -2, "damaged");
    lua_pushinteger(L, (lua_Integer)st.torn_bytes); lua_setfield(L, -2, "torn_bytes");
    lua_pushinteger(L, (lua_Integer)st.file_bytes); lua_setfield(L, -2, "file_bytes");
    return 1;
}

static int l_state_gc(lua_State *L)
{
    struct state_store **box = luaL_checkudata(L, 1, STATE_CLASS);
    state_store_free(*box);
    *box = NULL;
    return 0;
}

static const luaL_Reg state_methods[] = {
    { "get", l_state_get },
    { "put", l_state_put },
    { "names", l_state_names },
    { "count", l_state_count },
    { "save", l_state_save },
    { "stats", l_state_stats },
    { NULL, NULL }
};

/* Adds state = l_state_open to the module table on top of the stack. */
void flow_open_state_store(lua_State *L)
{
    flow_new_class(L, STATE_CLASS, state_methods, l_state_gc);
    lua_pushcfunction(L, l_state_open);
    lua_setfield(L, -2, "state");
}
