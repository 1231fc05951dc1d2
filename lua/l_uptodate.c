/* l_uptodate.c — flow.cache.uptodate: the engine's up-to-date check of
 * steps (engine/uptodate.c) as a userdata that owns it.  The stdlib
 * describes each step once, before the run, and hands the check to
 * sched.run (opts.check): the scheduler's up-to-date question, a new step's
 * fingerprint and its record's freshness then never enter Lua.
 *
 *   chk = cache.uptodate(n_steps, hash_cache, state_store)   (keeps both alive)
 *   chk:set(i, name, code, dist|nil, outputs, {param = hash}, {file, ...},
 *           {dataset, producer|false, hash|false, path|false, ...}, {output, ...})
 *   chk:name(i, name)    names step i, a producer the check does not describe
 *   chk:fresh(i, fp)     step i's record in the store, with fingerprint fp, is this run's
 *   chk:passed(i)        -> whether the check found step i up to date
 *   chk:no_record(i)     -> whether the check found step i without a record (it ran)
 *   chk:stats()          -> {passed =, undecided =, no_record =} */
#include "flowlua.h"
#include "uptodate.h"

#include <lauxlib.h>
#include <string.h>

#define UPTODATE_CLASS "flow.UpToDate"

static struct utd *check_utd(lua_State *L) { return flow_check_uptodate(L, 1); }

static size_t check_step(lua_State *L, int idx)
{
    lua_Integer i = luaL_checkinteger(L, idx);
    luaL_argcheck(L, i >= 1, idx, "a step index");
    return (size_t)(i - 1);
}

static int l_uptodate(lua_State *L)
{
    lua_Integer n = luaL_checkinteger(L, 1);
    luaL_argcheck(L, n >= 0 && n <= 100000000, 1, "a step count");
    struct hashcache *hc = flow_check_hashcache(L, 2);
    struct state_store *store = flow_check_state_store(L, 3);
    struct utd **box = lua_newuserdatauv(L, sizeof *box, 2);
    *box = NULL;
    luaL_setmetatable(L, UPTODATE_CLASS);
    lua_pushvalue(L, 2);
    lua_setiuservalue(L, -2, 1);
    lua_pushvalue(L, 3);
    lua_setiuservalue(L, -2, 2);
    *box = utd_new((size_t)n, hc, store);
    return 1;
}

static struct fp_str str_at(lua_State *L, int idx)
{
    struct fp_str s;
    s.s = luaL_checklstring(L, idx, &s.len);
    return s;
}

/* The strings of list t (a table at idx) in a userdata array left on the stack. */
static const char **string_list(lua_State *L, int idx, size_t *n)
{
    luaL_checktype(L, idx, LUA_TTABLE);
    *n = (size_t)lua_rawlen(L, idx);
    const char **v = lua_newuserdatauv(L, (*n + 1) * sizeof *v, 0);
    for (size_t k = 0; k < *n; k++) {
        /* Strings only: a number converted here would be a new string that
         * is not in the table, gone once popped. */
        if (lua_rawgeti(L, idx, (lua_Integer)k + 1) != LUA_TSTRING)
            luaL_error(L, "up-to-date check: item %d of a list of strings is a %s", (int)k + 1,
                       luaL_typename(L, -1));
        v[k] = lua_tostring(L, -1);                   /* held by the table */
        lua_pop(L, 1);
    }
    return v;
}

static const char *opt_string(lua_State *L, int t, lua_Integer k)
{
    lua_rawgeti(L, t, k);
    const char *s = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
    lua_pop(L, 1);
    return s;
}

static int l_set(lua_State *L)
{
    struct utd *u = check_utd(L);
    struct utd_step spec = { 0 };
    size_t i = check_step(L, 2);
    spec.name = luaL_checkstring(L, 3);
    spec.code = str_at(L, 4);
    if (!lua_isnil(L, 5)) spec.dist = str_at(L, 5);
    spec.outputs = str_at(L, 6);
    luaL_checktype(L, 7, LUA_TTABLE);
    size_t np = 0;
    for (lua_pushnil(L); lua_next(L, 7); lua_pop(L, 1)) np++;
    struct fp_kv *params = lua_newuserdatauv(L, (np + 1) * sizeof *params, 0);
    np = 0;
    for (lua_pushnil(L); lua_next(L, 7); lua_pop(L, 1)) {
        if (lua_type(L, -2) != LUA_TSTRING || lua_type(L, -1) != LUA_TSTRING)
            return luaL_error(L, "up-to-date check: parameters map keys to hashes");
        params[np].key.s = lua_tolstring(L, -2, &params[np].key.len);        /* held by the table */
        params[np].value.s = lua_tolstring(L, -1, &params[np].value.len);
        np++;
    }
    spec.params = params;
    spec.n_params = np;
    spec.files = string_list(L, 8, &spec.n_files);
    luaL_checktype(L, 9, LUA_TTABLE);
    size_t ni = (size_t)lua_rawlen(L, 9) / 4;
    struct utd_input *in = lua_newuserdatauv(L, (ni + 1) * sizeof *in, 0);
    for (size_t k = 0; k < ni; k++) {
        lua_Integer base = (lua_Integer)(4 * k);
        lua_rawgeti(L, 9, base + 1);
        if (lua_type(L, -1) != LUA_TSTRING) return luaL_error(L, "up-to-date check: an input is a dataset name");
        in[k].dataset.s = lua_tolstring(L, -1, &in[k].dataset.len);
        lua_pop(L, 1);
        lua_rawgeti(L, 9, base + 2);
        in[k].producer = lua_isinteger(L, -1) && lua_tointeger(L, -1) >= 1 ? (size_t)(lua_tointeger(L, -1) - 1)
                                                                           : UTD_NO_PRODUCER;
        lua_pop(L, 1);
        in[k].hash = opt_string(L, 9, base + 3);
        in[k].path = opt_string(L, 9, base + 4);
    }
    spec.inputs = in;
    spec.n_inputs = ni;
    spec.outputs_named = string_list(L, 10, &spec.n_outputs);
    utd_set_step(u, i, &spec);
    return 0;
}

static int l_name(lua_State *L)
{
    struct utd *u = check_utd(L);
    utd_name_step(u, check_step(L, 2), luaL_checkstring(L, 3));
    return 0;
}

static int l_fresh(lua_State *L)
{
    utd_mark_fresh(check_utd(L), check_step(L, 2), luaL_checkstring(L, 3));
    return 0;
}

static int l_passed(lua_State *L)
{
    lua_pushboolean(L, utd_passed(check_utd(L), check_step(L, 2)));
    return 1;
}

static int l_no_record(lua_State *L)
{
    lua_pushboolean(L, utd_no_record(check_utd(L), check_step(L, 2)));
    return 1;
}

static int l_stats(lua_State *L)
{
    struct utd_stats st = utd_stats(check_utd(L));
    lua_createtable(L, 0, 3);
    lua_pushinteger(L, (lua_Integer)st.passed);
    lua_setfield(L, -2, "passed");
    lua_pushinteger(L, (lua_Integer)st.undecided);
    lua_setfield(L, -2, "undecided");
    lua_pushinteger(L, (lua_Integer)st.no_record);
    lua_setfield(L, -2, "no_record");
    return 1;
}

static int l_gc(lua_State *L)
{
    struct utd **box = luaL_checkudata(L, 1, UPTODATE_CLASS);
    utd_free(*box);
    *box = NULL;
    return 0;
}

struct utd *flow_check_uptodate(lua_State *L, int idx)
{
    struct utd **box = luaL_checkudata(L, idx, UPTODATE_CLASS);
    if (!*box) luaL_error(L, "the up-to-date check is closed");
    return *box;
}

static const luaL_Reg uptodate_methods[] = {
    { "set", l_set },
    { "name", l_name },
    { "fresh", l_fresh },
    { "passed", l_passed },
    { "no_record", l_no_record },
    { "stats", l_stats },
    { NULL, NULL }
};

void flow_open_uptodate(lua_State *L)
{
    flow_new_class(L, UPTODATE_CLASS, uptodate_methods, l_gc);
    lua_pushcfunction(L, l_uptodate);
    lua_setfield(L, -2, "uptodate");
}
