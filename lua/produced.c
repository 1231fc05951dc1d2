/* produced.c — the plan's map of each dataset to the step that outputs it
 * (dag.scan's `produced`, read by flow.plan as produced[d] -> the step's
 * name or nil), kept by name id rather than as a Lua table by name.
 *
 * As a table it cost a Lua string for every output and a table entry for
 * each: at 100,000 steps, 12 % of a no-op rerun, and some 8 MB of Lua heap,
 * for a map the plan reads only at the few datasets no step produces, the
 * commands' inputs and an error's suggestions.  Here a dataset's entry is
 * the id of its producer's name, by the dataset's id in the store of the
 * first node scanned (an array as long as that store's names); a dataset or
 * producer of another store that this one never interned goes to a Lua table
 * beside it (user value 2).  A later producer of a dataset replaces an
 * earlier one, as the table's rawset did (dag.build names the clash).
 * Reading is __index; pairs() (__pairs) gets a table made whole, which only
 * an error's message asks for. */
#include "flowlua.h"
#include "step_decl.h"

#include <lauxlib.h>
#include <string.h>

#define PRODUCED_MT "flow.dag.produced"
enum { UV_STORE = 1, UV_OTHER, N_UV = UV_OTHER };

struct produced {
    const struct step_decls *own;       /* kept alive by user value UV_STORE */
    size_t n;                           /* own's names when made: by_id's length */
    size_t n_other;                     /* entries in the UV_OTHER table */
    name_id by_id[];                    /* dataset id in own -> its producer's name id in own; 0: none */
};

/* The id in p's store of name `id` of store d, or 0 (not interned there). */
static name_id own_id(const struct produced *p, const struct step_decls *d, name_id id)
{
    if (d == p->own) return id;
    size_t k;
    return strmap_get(&p->own->ids, step_decls_str(d, id), &k) ? (name_id)k : 0;
}

struct produced *flow_produced_new(lua_State *L, const struct step_decls *own, int store)
{
    store = lua_absindex(L, store);
    size_t n = own->n_strs;
    struct produced *p = lua_newuserdatauv(L, sizeof *p + n * sizeof *p->by_id, N_UV);
    *p = (struct produced){ own, n, 0 };
    memset(p->by_id, 0, n * sizeof *p->by_id);
    lua_pushvalue(L, store);
    lua_setiuservalue(L, -2, UV_STORE);
    lua_newtable(L);
    lua_setiuservalue(L, -2, UV_OTHER);
    luaL_setmetatable(L, PRODUCED_MT);
    return p;
}

/* Sets (or, with `name` NULL, clears) the other table's entry of `dataset`. */
static void set_other(lua_State *L, int idx, struct produced *p, const char *dataset, const char *name)
{
    lua_getiuservalue(L, idx, UV_OTHER);
    lua_pushstring(L, dataset);
    lua_pushvalue(L, -1);
    bool had = lua_rawget(L, -3) != LUA_TNIL;
    lua_pop(L, 1);
    if (name) lua_pushstring(L, name);
    else lua_pushnil(L);
    lua_rawset(L, -3);
    lua_pop(L, 1);
    if (name && !had) p->n_other++;
    else if (!name && had) p->n_other--;
}

void flow_produced_set(lua_State *L, int idx, struct produced *p, const struct step_decls *d, name_id dataset,
                       name_id producer)
{
    name_id k = own_id(p, d, dataset), by = own_id(p, d, producer);
    if (k && k < p->n && by) {
        p->by_id[k] = by;
        if (p->n_other) set_other(L, idx, p, step_decls_str(d, dataset), NULL);
        return;
    }
    if (k && k < p->n) p->by_id[k] = 0;
    set_other(L, idx, p, step_decls_str(d, dataset), step_decls_str(d, producer));
}

bool flow_produced_has(lua_State *L, int idx, const struct produced *p, const struct step_decls *d, name_id dataset)
{
    name_id k = own_id(p, d, dataset);
    if (k && k < p->n && p->by_id[k]) return true;
    if (!p->n_other) return false;
    lua_getiuservalue(L, idx, UV_OTHER);
    lua_pushstring(L, step_decls_str(d, dataset));
    bool has = lua_rawget(L, -2) != LUA_TNIL;
    lua_pop(L, 2);
    return has;
}

/* produced[d] -> the name of the step that outputs dataset d, or nil. */
static int produced_index(lua_State *L)
{
    const struct produced *p = luaL_checkudata(L, 1, PRODUCED_MT);
    size_t len, k;
    const char *d = lua_type(L, 2) == LUA_TSTRING ? lua_tolstring(L, 2, &len) : NULL;
    if (d && strlen(d) == len && strmap_get(&p->own->ids, d, &k) && k < p->n && p->by_id[k]) {
        lua_pushstring(L, step_decls_str(p->own, p->by_id[k]));
        return 1;
    }
    lua_getiuservalue(L, 1, UV_OTHER);
    lua_pushvalue(L, 2);
    lua_rawget(L, -2);
    return 1;
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

/* pairs(produced): next over a table of every entry. */
static int produced_pairs(lua_State *L)
{
    const struct produced *p = luaL_checkudata(L, 1, PRODUCED_MT);
    lua_pushcfunction(L, next_entry);
    lua_createtable(L, 0, 0);
    for (size_t k = 1; k < p->n; k++) {
        if (!p->by_id[k]) continue;
        lua_pushstring(L, step_decls_str(p->own, (name_id)k));
        lua_pushstring(L, step_decls_str(p->own, p->by_id[k]));
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

void flow_open_produced(lua_State *L)
{
    luaL_newmetatable(L, PRODUCED_MT);
    lua_pushcfunction(L, produced_index);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, produced_pairs);
    lua_setfield(L, -2, "__pairs");
    lua_pop(L, 1);
}
