/* name_map.c — a map from the names of a store of declared steps to a
 * number each, as Lua sees a table by name (t[name], t[name] = v, pairs),
 * kept by name id: an array as long as the store's names when the map met
 * it, with a Lua table beside it for a name that store never interned (one
 * of a node of another store).
 *
 * The plan's passes over every step kept such tables by name: a Lua string
 * and a table entry a step, the largest costs left in them.
 *   - dag.scan's `produced` (each dataset to the name of the step that
 *     outputs it; NAME_MAP_NAMES: a value is a name of the store, read as
 *     its string).  As a table: 12 % of a no-op rerun of 100,000 Lua steps,
 *     for a map the plan reads at a few datasets and an error's suggestions.
 *   - pipeline{}'s by-name index of the steps collected so far
 *     (NAME_MAP_INTEGERS: a step's position), written by take_nodes in C and
 *     by compose's add_step in Lua.
 *   - io_names's set of the datasets it has listed (node_decl.c).
 * A name in the array is never also in the table: setting one clears the
 * other.  pairs() gets a table of every entry made whole (an error's
 * suggestions ask for it). */
#include "flowlua.h"
#include "step_decl.h"

#include <lauxlib.h>
#include <string.h>

#define NAME_MAP_MT "flow.name_map"
enum { UV_STORE = 1, UV_ARRAY, UV_OTHER, N_UV = UV_OTHER };

struct name_map {
    const struct step_decls *own;       /* NULL until the map meets a store (UV_STORE keeps it alive) */
    name_id *by_id;                     /* own's name id -> value, 0: none (UV_ARRAY's memory) */
    size_t n;                           /* by_id's length: own's names when met */
    size_t n_other;                     /* entries in the UV_OTHER table */
    enum name_map_values values;
    bool declined;                      /* the store met was too large for the names: the table only */
};

/* A map over few steps of a large store (pipeline{ n } of one node of a
 * script that declared 100,000) keeps its names in the table: an array as
 * long as the store's names, made and cleared for each, made many small
 * pipelines quadratic (100,000 of one node each: 3.1-3.7 s, against 0.24 s). */
#define ARRAY_MIN_SHARE 16              /* the array when the steps are at least 1/16 of the store's names */

struct name_map *flow_name_map_new(lua_State *L, enum name_map_values values)
{
    struct name_map *m = lua_newuserdatauv(L, sizeof *m, N_UV);
    *m = (struct name_map){ NULL, NULL, 0, 0, values, false };
    lua_newtable(L);
    lua_setiuservalue(L, -2, UV_OTHER);
    luaL_setmetatable(L, NAME_MAP_MT);
    return m;
}

struct name_map *flow_check_name_map(lua_State *L, int idx)
{
    return luaL_checkudata(L, idx, NAME_MAP_MT);
}

/* names() -> an empty map of names to positions (pipeline{}'s by-name
 * index: pipeline.lua's compose, l_pipeline.c's take_nodes). */
int flow_l_name_positions(lua_State *L)
{
    flow_name_map_new(L, NAME_MAP_INTEGERS);
    return 1;
}

void flow_name_map_meet(lua_State *L, int idx, struct name_map *m, const struct step_decls *d, int node,
                        size_t steps)
{
    if (m->own || m->declined) return;
    if (steps < d->n_strs / ARRAY_MIN_SHARE) {
        m->declined = true;
        return;
    }
    idx = lua_absindex(L, idx);
    flow_push_node_store(L, node);
    lua_setiuservalue(L, idx, UV_STORE);
    size_t n = d->n_strs;
    m->by_id = lua_newuserdatauv(L, n * sizeof *m->by_id, 0);
    memset(m->by_id, 0, n * sizeof *m->by_id);
    lua_setiuservalue(L, idx, UV_ARRAY);
    m->own = d;
    m->n = n;
}

/* The slot of name `s` in the array, or NULL (no store met, or not one of
 * its names when met). */
static name_id *slot_of(const struct name_map *m, const char *s)
{
    size_t k;
    if (!m->own || !strmap_get(&m->own->ids, s, &k) || k >= m->n) return NULL;
    return &m->by_id[k];
}

/* The slot of name `id` of store d (see slot_of). */
static name_id *slot_of_id(const struct name_map *m, const struct step_decls *d, name_id id)
{
    if (d == m->own) return id < m->n ? &m->by_id[id] : NULL;
    return slot_of(m, step_decls_str(d, id));
}

/* Sets the table's entry of name s to the value at the top (popped; nil
 * removes it). */
static void set_other(lua_State *L, int idx, struct name_map *m, const char *s)
{
    lua_getiuservalue(L, idx, UV_OTHER);
    lua_pushstring(L, s);
    lua_pushvalue(L, -1);
    bool had = lua_rawget(L, -3) != LUA_TNIL;
    lua_pop(L, 1);
    bool has = !lua_isnil(L, -3);
    lua_rotate(L, -3, -1);              /* table, name, value */
    lua_rawset(L, -3);
    lua_pop(L, 1);
    if (has && !had) m->n_other++;
    else if (!has && had) m->n_other--;
}

/* Sets name s to v in its array slot (the table's entry, if any, removed). */
static void set_in_array(lua_State *L, int idx, struct name_map *m, const char *s, name_id *slot, name_id v)
{
    *slot = v;
    if (m->n_other) {
        lua_pushnil(L);
        set_other(L, idx, m, s);
    }
}

/* Sets name s to the value at the top (popped) in the table (its array slot,
 * if any, emptied). */
static void set_in_table(lua_State *L, int idx, struct name_map *m, const char *s, name_id *slot)
{
    if (slot) *slot = 0;
    set_other(L, idx, m, s);
}

void flow_name_map_set_name(lua_State *L, int idx, struct name_map *m, const struct step_decls *d, name_id key,
                            name_id value)
{
    idx = lua_absindex(L, idx);
    const char *s = step_decls_str(d, key);
    name_id *slot = slot_of_id(m, d, key), *own_value = slot ? slot_of_id(m, d, value) : NULL;
    if (own_value) {                    /* (no Lua string: the common case) */
        set_in_array(L, idx, m, s, slot, (name_id)(own_value - m->by_id));
        return;
    }
    lua_pushstring(L, step_decls_str(d, value));
    set_in_table(L, idx, m, s, slot);
}

void flow_name_map_set_integer(lua_State *L, int idx, struct name_map *m, const struct step_decls *d, name_id key,
                               uint32_t value)
{
    idx = lua_absindex(L, idx);
    const char *s = step_decls_str(d, key);
    name_id *slot = slot_of_id(m, d, key);
    if (slot) {
        set_in_array(L, idx, m, s, slot, value);
        return;
    }
    lua_pushinteger(L, value);
    set_in_table(L, idx, m, s, slot);
}

/* Pushes the value of name s (its slot, or NULL), or nil. */
static int push_value(lua_State *L, int idx, const struct name_map *m, const char *s, const name_id *slot)
{
    if (slot && *slot) {
        if (m->values == NAME_MAP_NAMES) lua_pushstring(L, step_decls_str(m->own, *slot));
        else lua_pushinteger(L, *slot);
        return lua_type(L, -1);
    }
    if (!m->n_other) {
        lua_pushnil(L);
        return LUA_TNIL;
    }
    lua_getiuservalue(L, idx, UV_OTHER);
    lua_pushstring(L, s);
    lua_rawget(L, -2);
    lua_remove(L, -2);
    return lua_type(L, -1);
}

bool flow_name_map_has(lua_State *L, int idx, const struct name_map *m, const struct step_decls *d, name_id key)
{
    const name_id *slot = slot_of_id(m, d, key);
    if (slot && *slot) return true;
    if (!m->n_other) return false;
    bool has = push_value(L, lua_absindex(L, idx), m, step_decls_str(d, key), slot) != LUA_TNIL;
    lua_pop(L, 1);
    return has;
}

/* The key at 2 as a name (a string without NUL bytes), or NULL. */
static const char *key_name(lua_State *L)
{
    size_t len;
    const char *s = lua_type(L, 2) == LUA_TSTRING ? lua_tolstring(L, 2, &len) : NULL;
    return s && strlen(s) == len ? s : NULL;
}

/* map[k] */
static int map_index(lua_State *L)
{
    const struct name_map *m = luaL_checkudata(L, 1, NAME_MAP_MT);
    const char *s = key_name(L);
    if (!s) return 0;
    push_value(L, 1, m, s, slot_of(m, s));
    return 1;
}

/* map[k] = v: an integers' map only, v a position (a whole number from 1 to
 * 2^32 - 1) or nil. */
static int map_newindex(lua_State *L)
{
    struct name_map *m = luaL_checkudata(L, 1, NAME_MAP_MT);
    if (m->values != NAME_MAP_INTEGERS) return luaL_error(L, "this map of names is read-only");
    const char *s = key_name(L);
    luaL_argcheck(L, s != NULL, 2, "a name");
    lua_Integer v = lua_isnil(L, 3) ? 0 : luaL_checkinteger(L, 3);
    luaL_argcheck(L, v >= 0 && v <= UINT32_MAX && (v > 0 || lua_isnil(L, 3)), 3, "a position");
    lua_settop(L, 3);
    name_id *slot = slot_of(m, s);
    if (slot) set_in_array(L, 1, m, s, slot, (name_id)v);
    else set_in_table(L, 1, m, s, NULL);
    return 0;
}

/* next(t, k), as the base library's (which a script may have replaced). */
static int next_entry(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_settop(L, 2);
    if (lua_next(L, 1)) return 2;
    lua_pushnil(L);
    return 1;
}

/* pairs(map): next over a table of every entry. */
static int map_pairs(lua_State *L)
{
    const struct name_map *m = luaL_checkudata(L, 1, NAME_MAP_MT);
    lua_pushcfunction(L, next_entry);
    lua_createtable(L, 0, 0);
    for (size_t k = 1; k < m->n; k++) {
        if (!m->by_id[k]) continue;
        lua_pushstring(L, step_decls_str(m->own, (name_id)k));
        push_value(L, 1, m, NULL, &m->by_id[k]);
        lua_rawset(L, -3);
    }
    lua_getiuservalue(L, 1, UV_OTHER);
    lua_pushnil(L);
    while (lua_next(L, -2)) {
        lua_pushvalue(L, -2);
        lua_insert(L, -2);
        lua_rawset(L, -5);
    }
    lua_pop(L, 1);
    lua_pushnil(L);
    return 3;
}

void flow_open_name_map(lua_State *L)
{
    static const luaL_Reg meta[] = {
        { "__index", map_index }, { "__newindex", map_newindex }, { "__pairs", map_pairs }, { NULL, NULL },
    };
    if (luaL_newmetatable(L, NAME_MAP_MT)) luaL_setfuncs(L, meta, 0);    /* (flow.dag's and flow.pipeline_c's) */
    lua_pop(L, 1);
}
