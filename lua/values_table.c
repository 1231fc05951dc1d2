/* values_table.c — the run's values table (flow.values' self.values), its
 * entries kept by the graph's dataset index.
 *
 * A run of 100,000 Lua steps spent a tenth of its time finding its values
 * by name: each output's name made a Lua string again (interned: a miss in
 * a string table of hundreds of thousands), and each read and write hashed
 * it into a table of 100,000 keys.  Here the entry of dataset d lives at
 * t[1 + its index in the graph]; C (values_c.call, graph:count_down, the
 * up-to-date check) reads and writes it by index, with no name at all.  The
 * stdlib keeps reading and writing values[d] by name: the metatable maps a
 * name to its index (__index, __newindex), and pairs() gives names
 * (__pairs).  A name the graph does not know is kept under itself.
 *
 *   values_c.table(graph, cat) -> the empty table, for graph and catalog cat
 *   values_c.on_miss(t, fn)    fn(t, d) answers a read of a dataset t does
 *                              not hold (incremental.lua restores a value
 *                              from its record on first use)
 *
 * The table also knows, per dataset, what the catalog says of it (read
 * from cat.exact once, not by name per step: values_c.call's question
 * whether a step's outputs are all memory datasets). */
#include "flowlua.h"
#include "dag.h"

#include <lauxlib.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* The metatable's fields besides the metamethods: its keys at
 * metatable[&keys_tag] (read once per values_c.call, so one raw lookup),
 * and on_miss's function. */
static const char keys_tag;
#define F_MISS "miss"

/* The keys: the graph (its userdata, user value UV_GRAPH, holds the
 * pointer) and the catalog's kind of each dataset, read from the exact
 * entries at UV_EXACT. */
struct keys {
    struct dag **graph;
    bool patterns;                  /* whether the catalog has patterns (a dataset it does not name may match one) */
    unsigned char kinds[];          /* a dataset's enum catalog_kind */
};
enum { UV_GRAPH = 1, UV_EXACT, N_UV = UV_EXACT };

/* The key of dataset name k of the table at t, pushed: 1 + its index, or
 * the name itself when the graph does not know it (or k is no string). */
static void push_key(lua_State *L, int t, int k)
{
    const struct dag *dag = lua_type(L, k) == LUA_TSTRING ? flow_values_keys(L, t, 0).dag : NULL;
    long di = dag ? dag_find_dataset(dag, lua_tostring(L, k)) : -1;
    if (di >= 0) lua_pushinteger(L, (lua_Integer)di + 1);
    else lua_pushvalue(L, k);
}

/* __index(t, d): the entry at d's index, else on_miss's answer. */
static int values_index(lua_State *L)
{
    lua_settop(L, 2);
    push_key(L, 1, 2);                                   /* 3 */
    if (lua_rawget(L, 1) != LUA_TNIL) return 1;
    if (!lua_getmetatable(L, 1) || lua_getfield(L, -1, F_MISS) != LUA_TFUNCTION) {
        lua_pushnil(L);
        return 1;
    }
    lua_pushvalue(L, 1);
    lua_pushvalue(L, 2);
    lua_call(L, 2, 1);
    return 1;
}

/* __newindex(t, d, v): at d's index. */
static int values_newindex(lua_State *L)
{
    lua_settop(L, 3);
    push_key(L, 1, 2);
    lua_pushvalue(L, 3);
    lua_rawset(L, 1);
    return 0;
}

/* The iterator __pairs returns: next over the raw table, with a dataset's
 * index given back as its name. */
static int values_next(lua_State *L)
{
    lua_settop(L, 2);
    const struct dag *dag = flow_values_keys(L, 1, 0).dag;
    if (!lua_isnil(L, 2)) {
        push_key(L, 1, 2);
        lua_replace(L, 2);
    }
    if (!lua_next(L, 1)) return 0;
    lua_Integer k = lua_isinteger(L, -2) ? lua_tointeger(L, -2) : 0;
    if (dag && k >= 1 && (size_t)k <= dag->n_datasets) {
        lua_pushstring(L, dag->datasets[k - 1].name);
        lua_replace(L, -3);
    }
    return 2;
}

static int values_pairs(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_pushcfunction(L, values_next);
    lua_pushvalue(L, 1);
    lua_pushnil(L);
    return 3;
}

struct values_keys flow_values_keys(lua_State *L, int t, int exact)
{
    struct values_keys keys = { 0 };
    if (!lua_getmetatable(L, t)) return keys;
    if (lua_rawgetp(L, -1, &keys_tag) == LUA_TUSERDATA) {
        const struct keys *k = lua_touserdata(L, -1);
        if (!(keys.dag = *k->graph)) luaL_error(L, "the graph was already freed");
        if (exact) {
            lua_getiuservalue(L, -1, UV_EXACT);
            if (lua_rawequal(L, -1, exact)) keys.kinds = k->kinds, keys.patterns = k->patterns;
            lua_pop(L, 1);
        }
    }
    lua_pop(L, 2);
    return keys;
}

int flow_values_get(lua_State *L, int t, const struct dag *dag, size_t di, const char *name)
{
    if (di < dag->n_datasets && flow_values_keys(L, t, 0).dag == dag) return lua_rawgeti(L, t, (lua_Integer)di + 1);
    t = lua_absindex(L, t);
    lua_pushstring(L, name);
    return lua_rawget(L, t);
}

/* The keys of a table of graph (at idx 1) in catalog cat (at idx 2),
 * pushed.  The catalog's exact entries are few: each is looked up in the
 * graph, not each dataset in the catalog. */
static void push_keys(lua_State *L, struct dag **graph)
{
    size_t n = (*graph)->n_datasets;
    struct keys *k = lua_newuserdatauv(L, sizeof *k + n, N_UV);
    int idx = lua_gettop(L);
    k->graph = graph;
    memset(k->kinds, CATALOG_UNNAMED, n);
    lua_pushvalue(L, 1);
    lua_setiuservalue(L, idx, UV_GRAPH);
    lua_getfield(L, 2, "patterns");
    k->patterns = lua_istable(L, -1) && lua_rawlen(L, -1) > 0;
    lua_pop(L, 1);
    if (lua_getfield(L, 2, "exact") != LUA_TTABLE) luaL_error(L, "values_c.table: a catalog without its exact entries");
    lua_pushnil(L);
    while (lua_next(L, -2)) {                            /* exact, name, entry */
        long di = lua_type(L, -2) == LUA_TSTRING ? dag_find_dataset(*graph, lua_tostring(L, -2)) : -1;
        if (di >= 0 && lua_istable(L, -1)) {
            const char *type = flow_field_string(L, -1, "type");
            k->kinds[di] = type && strcmp(type, "memory") == 0 ? CATALOG_MEMORY : CATALOG_KEPT;
        }
        lua_pop(L, 1);
    }
    lua_setiuservalue(L, idx, UV_EXACT);
}

/* table(graph, cat) -> a new values table (see above) */
static int l_table(lua_State *L)
{
    flow_check_dag(L, 1);
    struct dag **graph = lua_touserdata(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    lua_settop(L, 2);
    size_t n = (*graph)->n_datasets;
    lua_createtable(L, n < INT_MAX ? (int)n : 0, 0);     /* 3 */
    lua_createtable(L, 0, 4);                            /* 4: its metatable */
    lua_pushcfunction(L, values_index);
    lua_setfield(L, 4, "__index");
    lua_pushcfunction(L, values_newindex);
    lua_setfield(L, 4, "__newindex");
    lua_pushcfunction(L, values_pairs);
    lua_setfield(L, 4, "__pairs");
    push_keys(L, graph);
    lua_rawsetp(L, 4, &keys_tag);
    lua_setmetatable(L, 3);
    return 1;
}

/* on_miss(t, fn): fn(t, d) answers a read of dataset d that t does not hold. */
static int l_on_miss(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    luaL_checktype(L, 2, LUA_TFUNCTION);
    luaL_argcheck(L, flow_values_keys(L, 1, 0).dag != NULL, 1, "a values table (values_c.table)");
    lua_getmetatable(L, 1);
    lua_pushvalue(L, 2);
    lua_setfield(L, -2, F_MISS);
    return 0;
}

static const luaL_Reg values_table_funcs[] = {
    { "table", l_table },
    { "on_miss", l_on_miss },
    { NULL, NULL }
};

void flow_values_table_open(lua_State *L)
{
    luaL_setfuncs(L, values_table_funcs, 0);
}
