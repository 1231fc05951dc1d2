/* l_state.c — flow.cache.state(path): the step state file (engine/statestore.c)
 * as a userdata that owns it, so a Lua error anywhere later cannot leak it.
 *
 *   st = cache.state(path)        -> State, warning-or-nil  (raises a file-system error)
 *   st:get(name)                  -> fp, time, body, files  or nil (files: {dataset = {path =, hash =}}
 *                                    when every output is a file, else nil)
 *   st:put(name, fp, time, parts_json, outputs_json, metrics_json)
 *                                 step `name`'s successful run (step_record.h: the
 *                                 engine's rule; JSON texts or nil; a cached value
 *                                 is in values/ beside the file)
 *   st:unsaved()                  -> whether puts wait for save()
 *   st:names()                    -> {name, ...}
 *   st:count()                    -> n
 *   st:save()                     raises a file-system error
 *   st:stats()                    -> {records =, damaged =, torn_bytes =, file_bytes =} */
#include "flowlua.h"
#include "stat_prefetch.h"
#include "statestore.h"
#include "step_record.h"

#include <lauxlib.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#define STATE_CLASS "flow.StateStore"

/* The store, and the stats of its records' files that the preload started
 * (preload.h) until the check takes them or the store changes. */
struct state_box {
    struct state_store *s;
    struct stat_prefetch *ahead;
};

static struct state_box *check_box(lua_State *L, int idx)
{
    struct state_box *box = luaL_checkudata(L, idx, STATE_CLASS);
    if (!box->s) luaL_error(L, "the state store is closed");
    return box;
}

/* (A run's recorder may be using the store: each use from Lua claims it.) */
struct state_store *flow_check_state_store(lua_State *L, int idx)
{
    struct state_store *s = check_box(L, idx)->s;
    state_store_claim(s, false);
    return s;
}

struct state_store *flow_check_state_store_to_change(lua_State *L, int idx)
{
    struct state_box *box = check_box(L, idx);
    state_store_claim(box->s, true);
    stat_prefetch_stop(box->ahead);
    box->ahead = NULL;
    return box->s;
}

struct stat_prefetch *flow_state_store_take_ahead(lua_State *L, int idx)
{
    struct state_box *box = check_box(L, idx);
    struct stat_prefetch *ahead = box->ahead;
    box->ahead = NULL;
    return ahead;
}

static int l_state_open(lua_State *L)
{
    const char *path = luaL_checkstring(L, 1);
    struct state_box *box = lua_newuserdatauv(L, sizeof *box, 0);
    *box = (struct state_box){ NULL, NULL };
    luaL_setmetatable(L, STATE_CLASS);
    char err[1024];
    const char *warning;
    if (!(box->s = flow_preloaded_state(L, path, &warning, &box->ahead)) &&
        !(box->s = state_store_open(path, &warning, err, sizeof err)))
        return flow_raise_fs(L, err);
    if (warning) lua_pushstring(L, warning); else lua_pushnil(L);
    return 2;
}

static int l_state_get(lua_State *L)
{
    struct state_store *s = flow_check_state_store(L, 1);
    const char *name = luaL_checkstring(L, 2);
    const struct state_rec *r = state_store_get(s, name);
    if (!r) return 0;
    size_t len;
    const char *body = state_store_body(s, r, &len);
    if (!body) {
        char err[512];
        snprintf(err, sizeof err, "cannot read the record of step %s back from the state file: %s", name,
                 strerror(errno));
        return flow_raise_fs(L, err);
    }
    lua_pushlstring(L, body, len);                  /* (first: the body may be in a buffer a put would move) */
    lua_pushstring(L, r->fp);
    lua_pushnumber(L, r->time);
    lua_rotate(L, -3, -1);                          /* fp, time, body */
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

/* Strings only, without NUL bytes: they go into C strings as they are. */
static const char *opt_text(lua_State *L, int idx, const char *what)
{
    if (lua_isnoneornil(L, idx)) return NULL;
    size_t len;
    const char *s = luaL_checklstring(L, idx, &len);
    if (strlen(s) != len) luaL_error(L, "put: %s holds a NUL byte", what);
    return s;
}

static int l_state_put(lua_State *L)
{
    struct state_store *s = flow_check_state_store_to_change(L, 1);
    struct step_record rec = {
        .name = luaL_checkstring(L, 2),
        .fp = luaL_checkstring(L, 3),
        .time = luaL_checknumber(L, 4),
        .parts_json = opt_text(L, 5, "the parts"),
        .outputs_json = opt_text(L, 6, "the output records"),
        .metrics_json = opt_text(L, 7, "the metrics"),
    };
    if (!*rec.name) return luaL_error(L, "put: a step's name is empty");
    if (strlen(rec.name) != lua_rawlen(L, 2) || strlen(rec.fp) != lua_rawlen(L, 3))
        return luaL_error(L, "put: a step's name or fingerprint holds a NUL byte");
    char err[512];
    if (step_record_put(s, &rec, err, sizeof err) != 0) return luaL_error(L, "put: %s", err);
    return 0;
}

static int l_state_unsaved(lua_State *L)
{
    lua_pushboolean(L, state_store_unsaved(flow_check_state_store(L, 1)));
    return 1;
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
    if (state_store_save(flow_check_state_store_to_change(L, 1), err, sizeof err) != 0) return flow_raise_fs(L, err);
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
    struct state_box *box = luaL_checkudata(L, 1, STATE_CLASS);
    stat_prefetch_stop(box->ahead);          /* (before the store it reads) */
    state_store_free(box->s);
    *box = (struct state_box){ NULL, NULL };
    return 0;
}

static const luaL_Reg state_methods[] = {
    { "get", l_state_get },
    { "put", l_state_put },
    { "unsaved", l_state_unsaved },
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
