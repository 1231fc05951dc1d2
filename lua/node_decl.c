/* node_decl.c — a node as Lua sees it: a handle on its record in a store of
 * declared steps (engine/step_decl.h), a userdata holding the store and the
 * record's id.  node{} (l_pipeline.c) writes the record; the graph (l_dag.c)
 * and the C passes read records; Lua code that reads a node's field gets it
 * made from the record, a list (inputs, outputs, tags) once, kept beside the
 * handle so that each read gives the same table.  A node is read-only.
 *
 * The handle is a userdata, not a table {id, store}: the passes over
 * 100,000 steps each read every handle, and a table's two reads (its array
 * apart from it) were 7 % of a no-op rerun's time, its two blocks and the
 * collector's traversal of them as much again in node{}.  A node's fields,
 * methods, pairs() and tostring() are as they were; type() says "userdata",
 * and the raw table functions (rawget, next, #) do not apply.
 *
 * The store is a userdata with three user values: bodies[id + 1], each
 * step's Lua function or command; extras[id + 1], a table of the fields only
 * a few steps have and that are Lua values (dist, cmd_params, origin); and
 * names[id], the Lua strings of its names pushed so far (made on first use:
 * flow_push_node_names).  Each
 * handle holds its store, so a store lives as long as a node of it does;
 * node{} adds to the state's current one, which each script load replaces
 * (new_store), so a REPL's reloads do not pile records up. */
#include "flowlua.h"
#include "step_decl.h"

#include <lauxlib.h>
#include <limits.h>
#include <string.h>

#define DECLS_MT "flow.step_decls"
#define CURRENT_KEY "flow.step_decls.current"
enum { UV_BODIES = 1, UV_EXTRAS, UV_NAMES, N_UV = UV_NAMES };

/* A node's handle: its store (the userdata in user value H_DECLS, which
 * keeps `d` alive) and its record's id; user value H_TABLES holds the lists
 * read (see node_index).  Told apart from any other userdata by its size
 * and mark (Lua code cannot write a userdata's bytes), which costs less
 * than comparing its metatable. */
#define NODE_MAGIC 0x666c6f776e6f6465ULL  /* "flownode" */
struct node_ud { uint64_t magic; struct step_decls *d; uint32_t id; };
enum { H_DECLS = 1, H_TABLES, N_H = H_TABLES };

/* The store's userdata.  Every read of a node's field finds its store in the
 * handle, and luaL_testudata (a registry lookup) was a third of the cost of
 * such a read: the userdata's size and this mark tell a store apart as
 * surely, since Lua code cannot write a userdata's bytes. */
#define DECLS_MAGIC 0x666c6f77646563ULL  /* "flowdec" */
struct decls_ud { uint64_t magic; struct step_decls d; };

static int decls_gc(lua_State *L)
{
    struct decls_ud *u = luaL_checkudata(L, 1, DECLS_MT);
    step_decls_free(&u->d);
    return 0;
}

/* The userdata at idx when it is `size` bytes that start with `magic`, or
 * NULL (a store's and a node's handle are told apart this way). */
static void *marked(lua_State *L, int idx, size_t size, uint64_t magic)
{
    const uint64_t *u = lua_touserdata(L, idx);          /* (a light userdata's rawlen is 0) */
    return u && lua_rawlen(L, idx) == size && *u == magic ? (void *)u : NULL;
}

/* The store at idx, or NULL. */
static struct step_decls *to_decls(lua_State *L, int idx)
{
    struct decls_ud *u = marked(L, idx, sizeof *u, DECLS_MAGIC);
    return u ? &u->d : NULL;
}

/* Pushes a new, empty store. */
static struct step_decls *push_new_decls(lua_State *L)
{
    struct decls_ud *u = lua_newuserdatauv(L, sizeof *u, N_UV);
    memset(u, 0, sizeof *u);            /* what __gc may free before init */
    struct step_decls *d = &u->d;
    luaL_setmetatable(L, DECLS_MT);     /* (flow_open_decls made it) */
    for (int uv = UV_BODIES; uv <= UV_EXTRAS; uv++) {       /* (UV_NAMES: on first use) */
        lua_newtable(L);
        lua_setiuservalue(L, -2, uv);
    }
    step_decls_init(d);
    u->magic = DECLS_MAGIC;
    return d;
}

struct step_decls *flow_push_current_decls(lua_State *L)
{
    lua_getfield(L, LUA_REGISTRYINDEX, CURRENT_KEY);
    struct step_decls *current = to_decls(L, -1);
    if (current) return current;
    lua_pop(L, 1);
    struct step_decls *d = push_new_decls(L);
    lua_pushvalue(L, -1);
    lua_setfield(L, LUA_REGISTRYINDEX, CURRENT_KEY);
    return d;
}

void flow_open_decls(lua_State *L)
{
    static const luaL_Reg no_methods[] = { { NULL, NULL } };
    flow_new_class(L, DECLS_MT, no_methods, decls_gc);
}

/* new_store(): the nodes declared from now on go to a new store. */
int flow_l_new_store(lua_State *L)
{
    push_new_decls(L);
    lua_setfield(L, LUA_REGISTRYINDEX, CURRENT_KEY);
    return 0;
}

/* The handle at idx, or NULL. */
static const struct node_ud *to_node(lua_State *L, int idx)
{
    return marked(L, idx, sizeof(struct node_ud), NODE_MAGIC);
}

const struct step_decl *flow_node_decl(lua_State *L, int idx, struct step_decls **decls, uint32_t *id)
{
    const struct node_ud *u = to_node(L, idx);
    if (!u || u->id >= u->d->n_recs) return NULL;       /* (the handle keeps the store alive) */
    *decls = u->d;
    if (id) *id = u->id;
    return &u->d->recs[u->id];
}

void flow_push_node_store(lua_State *L, int idx)
{
    lua_getiuservalue(L, idx, H_DECLS);
}

void flow_node_add(lua_State *L, int decls, const struct step_decl *rec, int body, int extras, int cls)
{
    decls = lua_absindex(L, decls);
    body = lua_absindex(L, body);
    if (extras) extras = lua_absindex(L, extras);
    uint32_t id = step_decls_add(to_decls(L, decls), rec);
    if (id == UINT32_MAX) luaL_error(L, "node: more than 4,294,967,294 steps");
    lua_getiuservalue(L, decls, UV_BODIES);
    lua_pushvalue(L, body);
    lua_rawseti(L, -2, (lua_Integer)id + 1);
    lua_pop(L, 1);
    if (extras) {
        lua_getiuservalue(L, decls, UV_EXTRAS);
        lua_pushvalue(L, extras);
        lua_rawseti(L, -2, (lua_Integer)id + 1);
        lua_pop(L, 1);
    }
    struct node_ud *u = lua_newuserdatauv(L, sizeof *u, N_H);
    *u = (struct node_ud){ NODE_MAGIC, to_decls(L, decls), id };
    lua_pushvalue(L, decls);
    lua_setiuservalue(L, -2, H_DECLS);
    lua_pushvalue(L, cls);
    lua_setmetatable(L, -2);
}

/* ---- fields ------------------------------------------------------------- */

enum field {
    F_NAME, F_WHERE, F_NAMESPACE, F_KIND, F_INPUTS, F_OUTPUTS, F_INPUT_STYLE, F_OUTPUT_STYLE, F_TAGS, F_RETRIES,
    F_TIMEOUT, F_POOL, F_METRICS, F_FN, F_CMD, F_DIST, F_CMD_PARAMS, F_ORIGIN,
    F_AML,                              /* then the STEP_N_AML settings, in enum step_aml's order */
};
static const char *const field_names[] = {
    "name", "where", "namespace", "kind", "inputs", "outputs", "input_style", "output_style", "tags", "retries",
    "timeout", "pool", "metrics", "fn", "cmd", "dist", "cmd_params", "origin",
    "compute", "environment", "instance_type", "shm_size", "input_mode", "output_mode",
};
#define N_FIELDS (sizeof field_names / sizeof *field_names)

/* Upvalues of the __index closure: the Node class (for its methods), the
 * weak cache of {arg = d, dataset = d} entries, the empty tags list, and
 * {field name = enum field}. */
enum { UP_CLASS = 1, UP_IO_CACHE, UP_NO_TAGS, UP_FIELDS, N_INDEX_UP = UP_FIELDS };

static void push_name(lua_State *L, const struct step_decls *d, name_id id)
{
    if (id) lua_pushstring(L, step_decls_str(d, id));
    else lua_pushnil(L);
}

/* {arg = a, dataset = ds}: one table for every entry that names a dataset by
 * itself (a list's, a lone name's), held weakly by the cache: a dataset is an
 * output of one step and an input of others.  Nothing changes an entry. */
static void push_io_entry(lua_State *L, const struct step_decls *d, struct step_io io)
{
    int cache = lua_upvalueindex(UP_IO_CACHE);
    bool named = io.arg == io.dataset;
    push_name(L, d, io.dataset);
    if (named) {
        lua_pushvalue(L, -1);
        if (lua_rawget(L, cache) == LUA_TTABLE) {
            lua_remove(L, -2);
            return;
        }
        lua_pop(L, 1);
    }
    lua_createtable(L, 0, 2);
    lua_pushvalue(L, -2);
    lua_setfield(L, -2, "dataset");
    if (named) lua_pushvalue(L, -2);
    else push_name(L, d, io.arg);
    lua_setfield(L, -2, "arg");
    if (named) {
        lua_pushvalue(L, -2);
        lua_pushvalue(L, -2);
        lua_rawset(L, cache);
    }
    lua_remove(L, -2);
}

/* The list of inputs (or outputs) of record `rec` (a copy: pushing may run a
 * collection, whose finalizers may add records and move the arrays). */
static void push_io_list(lua_State *L, const struct step_decls *d, struct step_decl rec, bool outputs)
{
    uint32_t first = step_io_first(&rec, outputs), n = step_io_count(&rec, outputs);
    lua_createtable(L, (int)(n > 64 ? 64 : n), 0);
    for (uint32_t i = 0; i < n; i++) {
        push_io_entry(L, d, d->io[first + i]);
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
}

static void push_tags(lua_State *L, const struct step_decls *d, struct step_decl rec)
{
    if (rec.n_tags == 0) {
        lua_pushvalue(L, lua_upvalueindex(UP_NO_TAGS));
        return;
    }
    lua_createtable(L, (int)(rec.n_tags > 64 ? 64 : rec.n_tags), 0);
    for (uint32_t i = 0; i < rec.n_tags; i++) {
        push_name(L, d, d->tags[rec.tags + i]);
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
}

/* Pushes uservalue `uv` of the store at `decls`, entry id + 1, and, when
 * `key`, that table's field `key`. */
static void push_side(lua_State *L, int decls, int uv, uint32_t id, const char *key)
{
    lua_getiuservalue(L, decls, uv);
    lua_rawgeti(L, -1, (lua_Integer)id + 1);
    lua_remove(L, -2);
    if (!key) return;
    if (lua_istable(L, -1)) lua_getfield(L, -1, key);
    else lua_pushnil(L);
    lua_remove(L, -2);
}

/* Pushes what uservalue `uv` of its store holds for the node at idx (and
 * that table's field `key`, when given); nil for a value that is not a node. */
static int push_node_side(lua_State *L, int idx, int uv, const char *key)
{
    idx = lua_absindex(L, idx);
    struct step_decls *d;
    uint32_t id;
    if (!flow_node_decl(L, idx, &d, &id)) {
        lua_pushnil(L);
        return LUA_TNIL;
    }
    lua_getiuservalue(L, idx, H_DECLS);
    push_side(L, lua_gettop(L), uv, id, key);
    lua_remove(L, -2);
    return lua_type(L, -1);
}

int flow_node_push_body(lua_State *L, int idx)
{
    return push_node_side(L, idx, UV_BODIES, NULL);
}

int flow_node_push_extra(lua_State *L, int idx, const char *key)
{
    return push_node_side(L, idx, UV_EXTRAS, key);
}

/* ---- names as Lua strings ------------------------------------------------
 *
 * A plain Lua step's body in C (l_values.c) pushes its inputs' and outputs'
 * names to find their values, and the graph's count_down (l_dag.c) the
 * names of the values it lets go.  Pushed as C strings, each was hashed and
 * looked up in Lua's string table again (a chain of cache misses), and an
 * output's, which the collector had taken since the script made it, made
 * anew: Lua's string interning was 9.8 % of a first run of 100,000 Lua
 * steps, 7.2 % so.  The store keeps each name pushed this way, by id, in an
 * array as long as its names when first asked (3.2 MB for 200,000 names); a
 * name interned since goes to the table's hash part. */

struct step_decls *flow_push_store_names(lua_State *L, int store)
{
    struct step_decls *d = to_decls(L, store);
    if (!d) {
        lua_pushnil(L);
        return NULL;
    }
    store = lua_absindex(L, store);
    if (lua_getiuservalue(L, store, UV_NAMES) != LUA_TTABLE) {
        lua_pop(L, 1);
        lua_createtable(L, d->n_strs < INT_MAX ? (int)d->n_strs : 0, 0);
        lua_pushvalue(L, -1);
        lua_setiuservalue(L, store, UV_NAMES);
    }
    return d;
}

void flow_push_node_names(lua_State *L, int idx)
{
    lua_getiuservalue(L, idx, H_DECLS);
    flow_push_store_names(L, -1);
    lua_remove(L, -2);
}

void flow_push_name_of(lua_State *L, int names, const struct step_decls *d, uint32_t id)
{
    if (lua_rawgeti(L, names, id) == LUA_TSTRING) return;
    lua_pop(L, 1);
    lua_pushstring(L, step_decls_str(d, id));
    lua_pushvalue(L, -1);
    lua_rawseti(L, names, id);
}

/* Pushes field f of the record (nil when it has none). */
static void push_field(lua_State *L, int decls, const struct step_decls *d, uint32_t id, struct step_decl rec,
                       int f)
{
    bool func = rec.kind == STEP_DECL_FUNC;
    switch (f) {
    case F_NAME: push_name(L, d, rec.name); return;
    case F_WHERE: push_name(L, d, rec.where); return;
    case F_NAMESPACE: push_name(L, d, rec.namespace_); return;
    case F_POOL: push_name(L, d, rec.pool); return;
    case F_KIND:
        if (func) lua_pushliteral(L, "func");
        else lua_pushliteral(L, "command");
        return;
    case F_INPUTS: push_io_list(L, d, rec, false); return;
    case F_OUTPUTS: push_io_list(L, d, rec, true); return;
    case F_INPUT_STYLE: case F_OUTPUT_STYLE:
        if (rec.flags & (f == F_INPUT_STYLE ? STEP_INPUTS_MAP : STEP_OUTPUTS_MAP)) lua_pushliteral(L, "map");
        else lua_pushnil(L);
        return;
    case F_TAGS: push_tags(L, d, rec); return;
    case F_RETRIES:
        if (rec.retries > 0) lua_pushinteger(L, rec.retries);
        else lua_pushnil(L);
        return;
    case F_TIMEOUT:
        if (rec.flags & STEP_TIMEOUT_INTEGER) lua_pushinteger(L, (lua_Integer)rec.timeout);
        else if (rec.flags & STEP_TIMEOUT) lua_pushnumber(L, rec.timeout);
        else lua_pushnil(L);
        return;
    case F_METRICS:
        if (rec.flags & STEP_METRICS) lua_pushboolean(L, 1);
        else lua_pushnil(L);
        return;
    case F_FN: case F_CMD:
        if (func == (f == F_FN)) push_side(L, decls, UV_BODIES, id, NULL);
        else lua_pushnil(L);
        return;
    case F_DIST: case F_CMD_PARAMS: case F_ORIGIN:
        push_side(L, decls, UV_EXTRAS, id, field_names[f]);
        return;
    default:                            /* the Azure ML settings */
        push_name(L, d, rec.flags & STEP_AML ? d->aml[rec.aml][f - F_AML] : 0);
    }
}

/* Node.__index(node, key): a field of its record, else the class's. */
static int node_index(lua_State *L)
{
    lua_settop(L, 2);
    lua_pushvalue(L, 2);
    int f = lua_rawget(L, lua_upvalueindex(UP_FIELDS)) == LUA_TNUMBER ? (int)lua_tointeger(L, 3) : -1;
    /* a list is made once and kept in the handle's user value H_TABLES, so
     * that each read gives the same table; a read of one made already is
     * this lookup */
    bool list = f == F_INPUTS || f == F_OUTPUTS || f == F_TAGS;
    if (list && to_node(L, 1) && lua_getiuservalue(L, 1, H_TABLES) == LUA_TTABLE) {    /* 4 */
        lua_pushvalue(L, 2);
        if (lua_rawget(L, 4) != LUA_TNIL) return 1;
    }
    lua_settop(L, 2);
    struct step_decls *d;
    uint32_t id;
    const struct step_decl *r = f >= 0 ? flow_node_decl(L, 1, &d, &id) : NULL;
    if (!r) {                           /* the class's (not a field, or not a node) */
        lua_rawget(L, lua_upvalueindex(UP_CLASS));
        return 1;
    }
    struct step_decl rec = *r;
    lua_getiuservalue(L, 1, H_DECLS);   /* 3: the store */
    push_field(L, 3, d, id, rec, f);
    if (!list || (f == F_TAGS && rec.n_tags == 0)) return 1;
    if (lua_getiuservalue(L, 1, H_TABLES) != LUA_TTABLE) {
        lua_pop(L, 1);
        lua_createtable(L, 0, 2);
        lua_pushvalue(L, -1);
        lua_setiuservalue(L, 1, H_TABLES);
    }
    lua_pushvalue(L, 2);
    lua_pushvalue(L, 4);
    lua_rawset(L, 5);
    lua_settop(L, 4);
    return 1;
}

/* The iterator of pairs(node): the fields the node has, in field_names'
 * order (state: the node; control: the last key). */
static int node_next(lua_State *L)
{
    lua_settop(L, 2);
    size_t f = 0;
    if (!lua_isnil(L, 2)) {
        lua_pushvalue(L, 2);
        if (lua_rawget(L, lua_upvalueindex(1)) != LUA_TNUMBER) return luaL_error(L, "pairs: no such field of a node");
        f = (size_t)lua_tointeger(L, -1) + 1;
    }
    for (; f < N_FIELDS; f++) {
        lua_settop(L, 2);
        lua_pushstring(L, field_names[f]);
        if (lua_gettable(L, 1) != LUA_TNIL) {      /* through __index */
            lua_pushstring(L, field_names[f]);
            lua_insert(L, -2);
            return 2;
        }
    }
    lua_pushnil(L);
    return 1;
}

/* Node.__pairs(node) -> next, node, nil */
static int node_pairs(lua_State *L)
{
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_pushvalue(L, 1);
    lua_pushnil(L);
    return 3;
}

static int node_newindex(lua_State *L)
{
    return luaL_error(L, "a node is read-only (pipeline{ namespace =, inputs =, outputs =, tags = } makes a "
                      "changed copy)");
}

void flow_node_class(lua_State *L, int cls, int no_tags)
{
    cls = lua_absindex(L, cls);
    no_tags = lua_absindex(L, no_tags);
    lua_pushvalue(L, cls);
    lua_newtable(L);                    /* the io entries' cache, weak */
    lua_createtable(L, 0, 1);
    lua_pushliteral(L, "v");
    lua_setfield(L, -2, "__mode");
    lua_setmetatable(L, -2);
    lua_pushvalue(L, no_tags);
    lua_createtable(L, 0, (int)N_FIELDS);
    for (size_t f = 0; f < N_FIELDS; f++) {
        lua_pushinteger(L, (lua_Integer)f);
        lua_setfield(L, -2, field_names[f]);
    }
    lua_pushvalue(L, -1);               /* the fields, for pairs */
    lua_insert(L, -5);
    lua_pushcclosure(L, node_index, N_INDEX_UP);
    lua_setfield(L, cls, "__index");
    lua_pushcclosure(L, node_next, 1);
    lua_pushcclosure(L, node_pairs, 1);
    lua_setfield(L, cls, "__pairs");
    lua_pushcfunction(L, node_newindex);
    lua_setfield(L, cls, "__newindex");
}

/* ---- derived nodes and node identity ----------------------------------- */

name_id flow_decls_intern(lua_State *L, struct step_decls *d, int idx)
{
    size_t len;
    const char *s = lua_type(L, idx) == LUA_TSTRING ? lua_tolstring(L, idx, &len) : NULL;
    if (!s || strlen(s) != len) luaL_error(L, "a step's name, dataset, argument or tag must be a string without NUL bytes");
    return flow_decls_intern_hashed(L, d, s, strmap_hash(s));
}

name_id flow_decls_intern_hashed(lua_State *L, struct step_decls *d, const char *s, uint32_t hash)
{
    name_id id = step_decls_intern_hashed(d, s, hash);
    if (!id) luaL_error(L, "more than 4,294,967,294 names in one script's steps");
    return id;
}

static void add_io(lua_State *L, struct step_decls *d, struct step_io io)
{
    if (step_decls_add_io(d, io) == UINT32_MAX) luaL_error(L, "derive: too many inputs and outputs");
}

/* Appends the copy's inputs (or outputs): the {arg =, dataset =} entries of
 * the list at idx when it is one, else those of `old`, the node's record.
 * Returns how many. */
static uint32_t append_io(lua_State *L, struct step_decls *d, int idx, struct step_decl old, bool outputs)
{
    uint32_t n = 0;
    if (!lua_istable(L, idx)) {
        uint32_t first = step_io_first(&old, outputs);
        for (n = 0; n < step_io_count(&old, outputs); n++) add_io(L, d, d->io[first + n]);
        return n;
    }
    for (lua_Integer i = 1; lua_rawgeti(L, idx, i) == LUA_TTABLE; i++, n++) {
        lua_getfield(L, -1, "arg");
        lua_getfield(L, -2, "dataset");
        add_io(L, d, (struct step_io){ flow_decls_intern(L, d, -2), flow_decls_intern(L, d, -1) });
        lua_pop(L, 3);
    }
    lua_pop(L, 1);
    return n;
}

/* derive(n, changes) -> a copy of node n with `changes` = {name =,
 * namespace =, inputs =, outputs =, tags =, dist =, cmd_params =, origin =}
 * (each optional; inputs and outputs lists of {arg =, dataset =}, tags a
 * list of strings).  pipeline{}'s namespaces, mappings and tags make their
 * steps with it. */
int flow_l_derive(lua_State *L)
{
    struct step_decls *d;
    uint32_t id;
    const struct step_decl *r = flow_node_decl(L, 1, &d, &id);
    luaL_argcheck(L, r != NULL, 1, "not a node");
    luaL_checktype(L, 2, LUA_TTABLE);
    struct step_decl rec = *r;
    lua_settop(L, 2);
    lua_getiuservalue(L, 1, H_DECLS);   /* 3 */
    if (lua_getfield(L, 2, "name") != LUA_TNIL) rec.name = flow_decls_intern(L, d, -1);
    if (lua_getfield(L, 2, "namespace") != LUA_TNIL) rec.namespace_ = flow_decls_intern(L, d, -1);
    lua_settop(L, 3);
    lua_getfield(L, 2, "inputs");       /* 4 */
    lua_getfield(L, 2, "outputs");      /* 5 */
    if (lua_istable(L, 4) || lua_istable(L, 5)) {  /* else the copy shares the node's: records never change */
        struct step_decl old = rec;     /* the copy's inputs, then its outputs, side by side */
        rec.io = (uint32_t)d->n_io;
        rec.n_inputs = append_io(L, d, 4, old, false);
        rec.n_outputs = append_io(L, d, 5, old, true);
    }
    if (lua_getfield(L, 2, "tags") == LUA_TTABLE) {                 /* 6 */
        rec.n_tags = 0;
        rec.tags = (uint32_t)d->n_tags;
        for (lua_Integer i = 1; lua_rawgeti(L, 6, i) != LUA_TNIL; i++, rec.n_tags++) {
            if (step_decls_add_tag(d, flow_decls_intern(L, d, -1)) == UINT32_MAX)
                luaL_error(L, "derive: too many tags");
            lua_pop(L, 1);
        }
        lua_pop(L, 1);
    }
    lua_settop(L, 3);
    lua_createtable(L, 0, 3);           /* 4: the extras, the node's then the changes' */
    push_side(L, 3, UV_EXTRAS, id, NULL);
    if (lua_istable(L, -1)) {
        lua_pushnil(L);
        while (lua_next(L, 5)) {
            lua_pushvalue(L, -2);
            lua_insert(L, -2);
            lua_rawset(L, 4);
        }
    }
    lua_settop(L, 4);
    static const char *const extras[] = { "dist", "cmd_params", "origin" };
    for (int k = 0; k < 3; k++) {
        if (lua_getfield(L, 2, extras[k]) == LUA_TNIL) lua_pop(L, 1);
        else lua_setfield(L, 4, extras[k]);
    }
    lua_pushnil(L);
    bool any = lua_next(L, 4) != 0;
    lua_settop(L, 4);
    push_side(L, 3, UV_BODIES, id, NULL);                           /* 5 */
    lua_pushvalue(L, lua_upvalueindex(1));                          /* 6: the Node class */
    flow_node_add(L, 3, &rec, 5, any ? 4 : 0, 6);
    return 1;
}

/* io_datasets(n, outputs) -> {dataset, ...}: node n's input (or, with
 * `outputs`, output) datasets in order, a new list of strings: what the
 * plan's checks of each command step walk, without making the node's lists
 * of {arg =, dataset =} entries, which would stay with it. */
int flow_l_io_datasets(lua_State *L)
{
    struct step_decls *d;
    const struct step_decl *r = flow_node_decl(L, 1, &d, NULL);
    luaL_argcheck(L, r != NULL, 1, "not a node");
    bool outputs = lua_toboolean(L, 2);
    struct step_decl rec = *r;          /* (pushing may run finalizers, which may add records) */
    uint32_t n = step_io_count(&rec, outputs), first = step_io_first(&rec, outputs);
    lua_createtable(L, (int)(n > 64 ? 64 : n), 0);
    for (uint32_t i = 0; i < n; i++) {
        lua_pushstring(L, step_decls_str(d, d->io[first + i].dataset));
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    return 1;
}

lua_Integer flow_push_listed_node(lua_State *L, int nodes, int indices, lua_Integer k, const char *who,
                                  struct step_decls **d, struct step_decl *rec)
{
    lua_rawgeti(L, indices, k);
    lua_Integer i = lua_tointeger(L, -1);
    lua_pop(L, 1);
    lua_rawgeti(L, nodes, i);
    const struct step_decl *r = flow_node_decl(L, -1, d, NULL);
    if (!r) luaL_error(L, "%s: nodes[%d] is not a node", who, (int)i);
    *rec = *r;
    return i;
}

/* Appends to the list at `list` each dataset of record rec's inputs (or
 * outputs) not met before.  rec is a copy: pushing may run finalizers, which
 * may add records (and move the array). */
static void push_new_names(lua_State *L, int met_at, struct name_map *met, struct step_decls *d,
                           const struct step_decl *rec, bool outputs, int list)
{
    uint32_t n = step_io_count(rec, outputs), first = step_io_first(rec, outputs);
    for (uint32_t i = 0; i < n; i++) {
        name_id id = d->io[first + i].dataset;
        if (flow_name_map_has(L, met_at, met, d, id)) continue;
        flow_name_map_set_integer(L, met_at, met, d, id, 1);
        lua_pushstring(L, step_decls_str(d, id));
        lua_rawseti(L, list, (lua_Integer)lua_rawlen(L, list) + 1);
    }
}

/* io_names(nodes, indices, which) -> {dataset, ...}: the datasets the steps
 * nodes[i] (i in the list `indices`) read ("inputs"), write ("outputs") or
 * both ("all": a step's inputs, then its outputs), each once, in the order
 * first met.  For the plan's checks, which would otherwise make a list per
 * step (io_datasets) only to find the same names again and again. */
int flow_l_io_names(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    luaL_checktype(L, 2, LUA_TTABLE);
    static const char *const whiches[] = { "inputs", "outputs", "all", NULL };
    int which = luaL_checkoption(L, 3, NULL, whiches);
    lua_settop(L, 3);
    lua_newtable(L);                    /* 4: the list */
    struct name_map *met = flow_name_map_new(L, NAME_MAP_INTEGERS);     /* 5: the names met */
    lua_Integer n = (lua_Integer)lua_rawlen(L, 2);
    for (lua_Integer k = 1; k <= n; k++) {
        struct step_decls *d;
        struct step_decl rec;
        flow_push_listed_node(L, 1, 2, k, "io_names", &d, &rec);
        flow_name_map_meet(L, 5, met, d, -1, (size_t)n);
        if (which != 1) push_new_names(L, 5, met, d, &rec, false, 4);
        if (which != 0) push_new_names(L, 5, met, d, &rec, true, 4);
        lua_pop(L, 1);
    }
    lua_settop(L, 4);
    return 1;
}

/* has_arg(n, outputs, key) -> whether one of node n's inputs (or, with
 * `outputs`, outputs) is named `key` (${inputs.key}, ${outputs.key}). */
int flow_l_has_arg(lua_State *L)
{
    size_t len;
    const char *key = luaL_checklstring(L, 3, &len);    /* (first: it may allocate, and run finalizers) */
    bool outputs = lua_toboolean(L, 2);
    struct step_decls *d;
    const struct step_decl *r = flow_node_decl(L, 1, &d, NULL);
    luaL_argcheck(L, r != NULL, 1, "not a node");
    lua_pushboolean(L, strlen(key) == len && step_decls_has_arg(d, r, outputs, key));
    return 1;
}

/* same_decl(a, b) -> whether nodes a and b declare the same step apart from
 * where they were written and their tags (step_decls_same); their bodies and
 * extras are for the caller to compare. */
int flow_l_same_decl(lua_State *L)
{
    struct step_decls *da, *db;
    const struct step_decl *a = flow_node_decl(L, 1, &da, NULL), *b = flow_node_decl(L, 2, &db, NULL);
    luaL_argcheck(L, a != NULL, 1, "not a node");
    luaL_argcheck(L, b != NULL, 2, "not a node");
    lua_pushboolean(L, step_decls_same(da, a, db, b));
    return 1;
}
