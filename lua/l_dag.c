/* l_dag.c — module flow.dag: the stdlib hands over the nodes, C builds and
 * validates the graph from their records (node_decl.c), its names keyed by
 * the ids their store interned them with.  The userdata owns the struct dag. */
#include "flowlua.h"
#include "dag.h"
#include "step_decl.h"
#include "util.h"

#include <lauxlib.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#define DAG_MT "flow.dag"
/* The graph's user values: {store = true} for each store whose records' names
 * it borrows, and the store whose name ids are its keys, or nil
 * (dag_key_names: count_down finds its names' strings there). */
enum { UV_STORES = 1, UV_KEY_STORE, N_UV = UV_KEY_STORE };

static struct dag **check_dag(lua_State *L, int idx)
{
    struct dag **d = luaL_checkudata(L, idx, DAG_MT);
    if (!*d) luaL_error(L, "the graph was already freed");
    return d;
}

/* A distributed step's count at field `key`: 1 when absent; anything but an
 * integer a long holds reads as 0, which dag_add_step refuses. */
static long read_count(lua_State *L, int idx, const char *key)
{
    lua_getfield(L, idx, key);
    lua_Integer v = lua_isnil(L, -1) ? 1 : lua_isinteger(L, -1) ? lua_tointeger(L, -1) : 0;
    lua_pop(L, 1);
    return v >= 0 && v <= LONG_MAX ? (long)v : 0;
}

/* The arrays a step is read into before dag_add_step copies it: userdata
 * at fixed stack slots of l_build, reused from step to step and replaced by
 * a larger one when a step needs more.  The collector owns them, so a field
 * read that raises (a step table's __index, out of memory) leaks nothing. */
enum { SCRATCH_INPUTS, SCRATCH_OUTPUTS, SCRATCH_TAGS, SCRATCH_KEYS, N_SCRATCH };
struct scratch { int base; size_t cap[N_SCRATCH]; void *p[N_SCRATCH]; };

static void *scratch(lua_State *L, struct scratch *sc, int which, size_t n, size_t size)
{
    if (!sc->p[which] || n + 1 > sc->cap[which]) {
        size_t cap = sc->cap[which] ? sc->cap[which] : 16;
        while (cap < n + 1) cap *= 2;
        sc->p[which] = lua_newuserdatauv(L, cap * size, 0);
        sc->cap[which] = cap;
        lua_replace(L, sc->base + which);
    }
    return memset(sc->p[which], 0, (n + 1) * size);
}

static enum dist_framework framework_of(const char *s)
{
    if (!s) return DIST_NONE;
    if (strcmp(s, "pytorch") == 0) return DIST_PYTORCH;
    if (strcmp(s, "tensorflow") == 0) return DIST_TENSORFLOW;
    if (strcmp(s, "mpi") == 0) return DIST_MPI;
    return DIST_NONE;
}

/* The distribution of a step: the value at t (nil, or {framework = ...}). */
static void read_dist(lua_State *L, int t, struct dag_dist *dist)
{
    if (lua_istable(L, t)) {
        dist->framework = framework_of(flow_field_string(L, t, "framework"));
        dist->num_nodes = read_count(L, t, "num_nodes");
        dist->processes_per_node = read_count(L, t, "processes_per_node");
        dist->num_nodes_ref = (char *)flow_field_string(L, t, "num_nodes_ref");
        dist->processes_per_node_ref = (char *)flow_field_string(L, t, "processes_per_node_ref");
    }
}

/* The inputs (or outputs) of record `rec` of store d as the graph takes them:
 * pointers to the store's strings, which outlive the call. */
static struct dag_io *read_io(lua_State *L, struct scratch *sc, int which, const struct step_decls *d,
                              struct step_decl rec, bool outputs)
{
    uint32_t n = step_io_count(&rec, outputs), first = step_io_first(&rec, outputs);
    struct dag_io *io = scratch(L, sc, which, n, sizeof *io);
    for (uint32_t i = 0; i < n; i++) {
        struct step_io e = d->io[first + i];
        io[i] = (struct dag_io){ .arg = (char *)step_decls_str(d, e.arg),
                                 .dataset = (char *)step_decls_str(d, e.dataset) };
    }
    return io;
}

/* The keys of record `rec` of store d as the graph takes them (dag.h): the
 * ids of its name and of its inputs' and outputs' datasets. */
static uint32_t *read_keys(lua_State *L, struct scratch *sc, const struct step_decls *d, struct step_decl rec)
{
    uint32_t n_in = step_io_count(&rec, false), n_out = step_io_count(&rec, true);
    uint32_t *keys = scratch(L, sc, SCRATCH_KEYS, 1 + (size_t)n_in + n_out, sizeof *keys);
    keys[0] = rec.name;
    for (uint32_t i = 0; i < n_in; i++) keys[1 + i] = d->io[step_io_first(&rec, false) + i].dataset;
    for (uint32_t i = 0; i < n_out; i++) keys[1 + n_in + i] = d->io[step_io_first(&rec, true) + i].dataset;
    return keys;
}

#define ANOTHER_STORE (-2)

/* Adds the node at `idx` (its record), whose distribution is the value at
 * `dist`; on error leaves a message in err.  `keyed`: the graph's names are
 * the ids of that store's names, and a node of another store is
 * ANOTHER_STORE. */
static long add_step(lua_State *L, struct scratch *sc, struct dag *dag, int idx, int dist, int udata,
                     const struct step_decls *keyed, char *err, size_t errlen)
{
    struct step_decls *d;
    const struct step_decl *r = flow_node_decl(L, idx, &d, NULL);
    if (!r) {
        errf(err, errlen, "step %d is not a node{}", udata);
        return -1;
    }
    if (keyed && d != keyed) return ANOTHER_STORE;
    struct step_decl rec = *r;          /* (a scratch array's allocation may run finalizers, which may add nodes) */
    struct dag_step spec = {
        .name = (char *)step_decls_str(d, rec.name),
        .where = (char *)step_decls_str(d, rec.where),
        .kind = rec.kind == STEP_DECL_COMMAND ? STEP_COMMAND : STEP_FUNC,
        .n_inputs = rec.n_inputs, .n_outputs = rec.n_outputs, .n_tags = rec.n_tags,
        /* the scheduler's bound: more retries would never be reached */
        .retries = rec.retries > 1000000 ? 1000000 : rec.retries,
        .timeout = rec.flags & STEP_TIMEOUT ? rec.timeout : 0,
        .udata = udata,
    };
    spec.inputs = read_io(L, sc, SCRATCH_INPUTS, d, rec, false);
    spec.outputs = read_io(L, sc, SCRATCH_OUTPUTS, d, rec, true);
    spec.tags = scratch(L, sc, SCRATCH_TAGS, rec.n_tags, sizeof *spec.tags);
    for (uint32_t i = 0; i < rec.n_tags; i++) spec.tags[i] = (char *)step_decls_str(d, d->tags[rec.tags + i]);
    read_dist(L, dist, &spec.dist);
    if (keyed) spec.keys = read_keys(L, sc, d, rec);
    return dag_add_step(dag, &spec, err, errlen);
}

/* The steps of nodes (at 1) into a new graph in *ud (any graph there
 * before freed), its names keyed by the first node's store (dag.h: no name
 * hashed again) when `keyed`; 0, or -1 with a message in err, or
 * ANOTHER_STORE: a node was declared in another Lua state's store (a
 * pipeline of nodes of two scripts), whose ids are not the same names'. */
static int add_steps(lua_State *L, struct dag **ud, bool keyed, char *err, size_t errlen)
{
    dag_free(*ud);
    *ud = dag_new();
    (*ud)->borrowed_names = true;       /* the records' strings: their stores are kept below */
    lua_newtable(L);                    /* {store = true}, the graph's user value */
    lua_pushvalue(L, -1);
    lua_setiuservalue(L, 4, UV_STORES);
    int stores = lua_gettop(L);
    size_t n = lua_rawlen(L, 1);
    const struct step_decls *key_store = NULL;
    if (keyed && n > 0) {
        lua_rawgeti(L, 1, 1);
        struct step_decls *d;
        if (flow_node_decl(L, -1, &d, NULL)) key_store = d;
        if (key_store) {
            dag_key_names(*ud, &key_store->ids, key_store->n_strs);
            flow_push_node_store(L, -1);
            lua_setiuservalue(L, 4, UV_KEY_STORE);
        }
        lua_pop(L, 1);
    }
    if (!key_store) {
        lua_pushnil(L);
        lua_setiuservalue(L, 4, UV_KEY_STORE);
    }
    dag_reserve(*ud, n);
    bool dists = lua_istable(L, 3);
    struct scratch sc = { .base = lua_gettop(L) + 1 };
    for (int k = 0; k < N_SCRATCH; k++) lua_pushnil(L);
    const void *last_store = NULL;      /* (a pipeline's steps mostly share one) */
    for (size_t i = 1; i <= n; i++) {
        lua_rawgeti(L, 1, (lua_Integer)i);
        int step = lua_gettop(L);
        if (dists) lua_rawgeti(L, 3, (lua_Integer)i);
        else lua_getfield(L, step, "dist");
        long rc = add_step(L, &sc, *ud, step, step + 1, (int)i, key_store, err, errlen);
        if (rc >= 0) {
            flow_push_node_store(L, step);
            if (lua_topointer(L, -1) != last_store) {
                last_store = lua_topointer(L, -1);
                lua_pushboolean(L, 1);
                lua_rawset(L, stores);
            }
        }
        lua_settop(L, step - 1);
        if (rc < 0) return (int)(rc == ANOTHER_STORE ? ANOTHER_STORE : -1);
    }
    return 0;
}

/* build(nodes, declared_datasets [, dists]) -> dag | raises "message".  Each
 * step is read from its node's record (node_decl.c); the messages name each
 * step with its where ("'a' (pipeline.lua:3)").  dists[i], when dists is
 * given, is step i's distribution in place of the node's own dist. */
static int l_build(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_settop(L, 3);
    struct dag **ud = lua_newuserdatauv(L, sizeof *ud, N_UV);   /* 4 */
    *ud = NULL;
    luaL_setmetatable(L, DAG_MT);
    char err[4096];
    int rc = add_steps(L, ud, true, err, sizeof err);
    lua_settop(L, 4);
    if (rc == ANOTHER_STORE) rc = add_steps(L, ud, false, err, sizeof err);
    lua_settop(L, 4);               /* the graph on top */
    if (rc != 0) return flow_raise(L, err);
    if (lua_istable(L, 2))
        for (lua_Integer i = 1; i <= (lua_Integer)lua_rawlen(L, 2); i++) {
            lua_rawgeti(L, 2, i);
            if (lua_type(L, -1) == LUA_TSTRING) dag_declare_dataset(*ud, lua_tostring(L, -1));
            lua_pop(L, 1);
        }
    if (dag_finalize(*ud, err, sizeof err) != 0) return flow_raise(L, err);
    return 1;
}

/* dag:order() -> {i1, i2, ...} (1-based step indices in run order) */
static int l_order(lua_State *L)
{
    struct dag *dag = *check_dag(L, 1);
    lua_createtable(L, (int)dag->n_steps, 0);
    for (size_t k = 0; k < dag->n_steps; k++) {
        lua_pushinteger(L, (lua_Integer)dag->order[k] + 1);
        lua_rawseti(L, -2, (lua_Integer)k + 1);
    }
    return 1;
}

static void push_indices(lua_State *L, const size_t *v, size_t n)
{
    lua_createtable(L, (int)n, 0);
    for (size_t k = 0; k < n; k++) {
        lua_pushinteger(L, (lua_Integer)v[k] + 1);
        lua_rawseti(L, -2, (lua_Integer)k + 1);
    }
}

static size_t check_step(lua_State *L, struct dag *dag, int idx)
{
    lua_Integer i = luaL_checkinteger(L, idx);
    luaL_argcheck(L, i >= 1 && (size_t)i <= dag->n_steps, idx, "no such step");
    return (size_t)i - 1;
}

static int l_deps(lua_State *L)
{
    struct dag *dag = *check_dag(L, 1);
    const struct dag_step *s = &dag->steps[check_step(L, dag, 2)];
    push_indices(L, s->deps, s->n_deps);
    return 1;
}

static int l_dependents(lua_State *L)
{
    struct dag *dag = *check_dag(L, 1);
    const struct dag_step *s = &dag->steps[check_step(L, dag, 2)];
    push_indices(L, s->dependents, s->n_dependents);
    return 1;
}

/* dag:producer(dataset) -> step index or nil */
static int l_producer(lua_State *L)
{
    struct dag *dag = *check_dag(L, 1);
    long d = dag_find_dataset(dag, luaL_checkstring(L, 2));
    if (d < 0 || dag->datasets[d].producer < 0) lua_pushnil(L);
    else lua_pushinteger(L, dag->datasets[d].producer + 1);
    return 1;
}

/* dag:downstream({i...}) / dag:upstream({i...}) -> {[i] = true, ...} including the seeds.
 * The scratch arrays are userdata, not C heap: the Lua calls after them can
 * raise (a bad index, or memory running out) and the collector frees them. */
static int walk(lua_State *L, bool downstream)
{
    struct dag *dag = *check_dag(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    size_t n = lua_rawlen(L, 2);
    size_t *seeds = lua_newuserdatauv(L, (n + 1) * sizeof *seeds, 0);
    bool *mark = lua_newuserdatauv(L, (dag->n_steps + 1) * sizeof *mark, 0);
    memset(mark, 0, (dag->n_steps + 1) * sizeof *mark);
    for (size_t k = 0; k < n; k++) {
        lua_rawgeti(L, 2, (lua_Integer)k + 1);
        lua_Integer i = lua_tointeger(L, -1);
        lua_pop(L, 1);
        if (i < 1 || (size_t)i > dag->n_steps) return luaL_error(L, "no such step %d", (int)i);
        seeds[k] = (size_t)i - 1;
    }
    if (downstream) dag_mark_downstream(dag, seeds, n, mark);
    else dag_mark_upstream(dag, seeds, n, mark);
    lua_createtable(L, 0, 0);
    for (size_t i = 0; i < dag->n_steps; i++)
        if (mark[i]) { lua_pushboolean(L, 1); lua_rawseti(L, -2, (lua_Integer)i + 1); }
    return 1;
}

static int l_downstream(lua_State *L) { return walk(L, true); }
static int l_upstream(lua_State *L) { return walk(L, false); }

/* dag:unread_outputs() -> {dataset, ...}: what steps make and no step reads
 * (a run's free outputs), in step order. */
static int l_unread_outputs(lua_State *L)
{
    struct dag *dag = *check_dag(L, 1);
    const bool *read = dag_read_flags(dag);
    lua_newtable(L);
    lua_Integer k = 0;
    for (size_t i = 0; i < dag->n_steps; i++) {
        const struct dag_step *s = &dag->steps[i];
        for (size_t o = 0; o < s->n_outputs; o++) {
            if (s->outputs[o].di != DAG_NO_DATASET && read[s->outputs[o].di]) continue;
            lua_pushstring(L, s->outputs[o].dataset);
            lua_rawseti(L, -2, ++k);
        }
    }
    return 1;
}

/* dag:reader_counts() -> counts: how many inputs of the graph's steps name
 * each dataset (parameters are not datasets), by the dataset's index; a
 * userdata only count_down reads.  By index, not a table by name: a run of
 * 100,000 steps made 200,000 Lua strings for it, and count_down one a
 * reader. */
#define COUNTS_MT "flow.dag.reader_counts"
struct reader_counts { const struct dag *dag; size_t n; uint32_t left[]; };

static int l_reader_counts(lua_State *L)
{
    struct dag *dag = *check_dag(L, 1);
    size_t n = dag->n_datasets;
    struct reader_counts *c = lua_newuserdatauv(L, sizeof *c + (n + 1) * sizeof *c->left, 0);
    c->dag = dag;
    c->n = n;
    memset(c->left, 0, (n + 1) * sizeof *c->left);
    for (size_t i = 0; i < dag->n_steps; i++) {
        const struct dag_step *s = &dag->steps[i];
        for (size_t k = 0; k < s->n_inputs; k++)
            if (s->inputs[k].di < n) c->left[s->inputs[k].di]++;      /* (fewer than 2^32 inputs) */
    }
    luaL_setmetatable(L, COUNTS_MT);
    return 1;
}

/* dag:outputs_all_read(i) -> whether step i has outputs and steps of the
 * graph read each of them. */
static int l_outputs_all_read(lua_State *L)
{
    struct dag *dag = *check_dag(L, 1);
    lua_pushboolean(L, dag_outputs_all_read(dag, check_step(L, dag, 2)));
    return 1;
}

/* dag:count_down(i, left, values, let_go): step i has ended well; for each
 * of its inputs d that `left` (reader_counts's) counts, one reader less, and
 * at the last one, when values holds d, values[d] = let_go.  (flow.values'
 * release_inputs, over the graph's own lists; a values table of this graph
 * is read and written by index, values_table.c.) */
static int l_count_down(lua_State *L)
{
    struct dag *dag = *check_dag(L, 1);
    const struct dag_step *s = &dag->steps[check_step(L, dag, 2)];
    struct reader_counts *c = luaL_checkudata(L, 3, COUNTS_MT);
    luaL_argcheck(L, c->dag == dag && c->n == dag->n_datasets, 3, "the counts of another graph");
    luaL_checktype(L, 4, LUA_TTABLE);
    lua_settop(L, 5);
    if (flow_values_keys(L, 4, 0).dag == dag) {
        for (size_t k = 0; k < s->n_inputs; k++) {
            size_t di = s->inputs[k].di;
            if (di >= c->n || c->left[di] == 0 || --c->left[di] > 0) continue;
            if (lua_rawgeti(L, 4, (lua_Integer)di + 1) != LUA_TNIL) {
                lua_pushvalue(L, 5);
                lua_rawseti(L, 4, (lua_Integer)di + 1);
            }
            lua_pop(L, 1);
        }
        return 0;
    }
    lua_getiuservalue(L, 1, UV_KEY_STORE);
    const struct step_decls *keyed = flow_push_store_names(L, 6);     /* 7: its names by key, or nil */
    for (size_t k = 0; k < s->n_inputs; k++) {
        size_t di = s->inputs[k].di;
        if (di >= c->n || c->left[di] == 0 || --c->left[di] > 0) continue;
        /* 8: its last reader has ended (a key of the store's is its name's id) */
        if (keyed) flow_push_name_of(L, 7, keyed, s->keys[1 + k]);
        else lua_pushstring(L, s->inputs[k].dataset);
        lua_pushvalue(L, 8);
        if (lua_rawget(L, 4) != LUA_TNIL) {
            lua_pushvalue(L, 8);
            lua_pushvalue(L, 5);
            lua_rawset(L, 4);
        }
        lua_settop(L, 7);
    }
    return 0;
}

static int l_count(lua_State *L)
{
    lua_pushinteger(L, (lua_Integer)(*check_dag(L, 1))->n_steps);
    return 1;
}

static int l_gc(lua_State *L)
{
    struct dag **d = luaL_checkudata(L, 1, DAG_MT);
    dag_free(*d);
    *d = NULL;
    return 0;
}

static const luaL_Reg dag_methods[] = {
    { "order", l_order },
    { "deps", l_deps },
    { "dependents", l_dependents },
    { "producer", l_producer },
    { "count", l_count },
    { "unread_outputs", l_unread_outputs },
    { "outputs_all_read", l_outputs_all_read },
    { "reader_counts", l_reader_counts },
    { "count_down", l_count_down },
    { "downstream", l_downstream },
    { "upstream", l_upstream },
    { NULL, NULL }
};

/* is_param_input(name) -> false for a dataset; for a parameter input, its
 * dotted key ("params:a.b" -> "a.b") or true ("parameters": all of them).
 * The graph's own rule (dag_is_param_input), so Lua never spells it again. */
static int l_is_param_input(lua_State *L)
{
    const char *name = luaL_checkstring(L, 1);
    const char *key = dag_param_key(name);
    if (key) lua_pushstring(L, key);
    else lua_pushboolean(L, dag_is_param_input(name));
    return 1;
}

/* Appends step index i to the list at `list`. */
static void append_index(lua_State *L, int list, lua_Integer *n, lua_Integer i)
{
    lua_pushinteger(L, i);
    lua_rawseti(L, list, ++*n);
}

/* scan(nodes) -> {produced =, pending =, commands =, pooled =, distributed =,
 * reporting =, keepers =}: the plan's one pass over its steps (flow.plan's
 * prepare says what each holds), over the nodes' records.  A loop of
 * 100,000 steps, which in Lua was as long as building the graph.  `produced`
 * is a map by name id (name_map.c), which also says whether an input was
 * produced by a step before it: most inputs are, and neither needs a Lua
 * string of the name. */
enum { SC_NODES = 1, SC_PRODUCED, SC_PENDING, SC_COMMANDS, SC_POOLED, SC_DISTRIBUTED, SC_REPORTING, SC_KEEPERS,
       SC_N_LISTS = SC_KEEPERS - SC_PRODUCED + 1 };

static const char *const SCAN_FIELDS[SC_N_LISTS] = {
    "produced", "pending", "commands", "pooled", "distributed", "reporting", "keepers"
};

static int l_scan(lua_State *L)
{
    luaL_checktype(L, SC_NODES, LUA_TTABLE);
    lua_settop(L, SC_NODES);
    lua_Unsigned n_nodes = lua_rawlen(L, SC_NODES);
    struct name_map *produced = flow_name_map_new(L, NAME_MAP_NAMES);          /* SC_PRODUCED */
    for (int k = SC_PENDING; k <= SC_KEEPERS; k++) lua_newtable(L);
    lua_Integer len[SC_KEEPERS + 1] = { 0 };
    for (lua_Integer i = 1; lua_rawgeti(L, SC_NODES, i) != LUA_TNIL; i++) {     /* ipairs, raw */
        struct step_decls *d;
        const struct step_decl *r = flow_node_decl(L, -1, &d, NULL);
        if (!r) return luaL_error(L, "scan: step %d is not a node{}", (int)i);
        struct step_decl rec = *r;      /* (pushing a string may run finalizers, which may add nodes) */
        flow_name_map_meet(L, SC_PRODUCED, produced, d, -1, (size_t)n_nodes);  /* (the first node's store) */
        lua_settop(L, SC_KEEPERS);
        for (uint32_t k = 0; k < rec.n_inputs; k++) {
            name_id id = d->io[step_io_first(&rec, false) + k].dataset;
            if (flow_name_map_has(L, SC_PRODUCED, produced, d, id)) continue;
            append_index(L, SC_PENDING, &len[SC_PENDING], i);
            lua_pushstring(L, step_decls_str(d, id));
            lua_rawseti(L, SC_PENDING, ++len[SC_PENDING]);
        }
        bool metrics_out = false;
        for (uint32_t k = 0; k < rec.n_outputs; k++) {
            struct step_io o = d->io[step_io_first(&rec, true) + k];
            flow_name_map_set_name(L, SC_PRODUCED, produced, d, o.dataset, rec.name);
            metrics_out = metrics_out || strcmp(step_decls_str(d, o.arg), "metrics") == 0;
        }
        bool command = rec.kind == STEP_DECL_COMMAND, pool = rec.pool != 0, dist = rec.flags & STEP_DIST;
        bool metrics = rec.flags & STEP_METRICS;
        if (command) append_index(L, SC_COMMANDS, &len[SC_COMMANDS], i);
        if (pool) append_index(L, SC_POOLED, &len[SC_POOLED], i);
        if (dist) append_index(L, SC_DISTRIBUTED, &len[SC_DISTRIBUTED], i);
        if (metrics || (metrics_out && command)) append_index(L, SC_REPORTING, &len[SC_REPORTING], i);
        if (metrics || pool || dist || (rec.flags & STEP_TIMEOUT) || rec.retries > 0)
            append_index(L, SC_KEEPERS, &len[SC_KEEPERS], i);
    }
    lua_settop(L, SC_KEEPERS);
    lua_createtable(L, 0, SC_N_LISTS);
    for (int k = 0; k < SC_N_LISTS; k++) {
        lua_pushvalue(L, SC_PRODUCED + k);
        lua_setfield(L, -2, SCAN_FIELDS[k]);
    }
    return 1;
}

/* The counts of a distributed_job, in enum dist_count's order. */
static const char *const COUNT_NAMES[] = { "num_nodes", "processes_per_node", "parameter_server_count", NULL };

/* dist_count(what, v) -> v as an integer when it is a valid `what` (one of
 * COUNT_NAMES): a number with a whole value (2.0 reads as 2, as
 * math.tointeger has it; 1e300, inf, nan and 2^63 have none an integer
 * holds) within dag_count_ok's bounds; else nil and the rule, "a whole number
 * from 1 to N".  The graph's rule (engine/dag.c), asked by distributed_job{}
 * for a literal count and by the planner for a "params:" one. */
static int l_dist_count(lua_State *L)
{
    enum dist_count c = (enum dist_count)luaL_checkoption(L, 1, NULL, COUNT_NAMES);
    int exact = 0;
    lua_Integer v = lua_type(L, 2) == LUA_TNUMBER ? lua_tointegerx(L, 2, &exact) : 0;
    if (exact && dag_count_ok(c, v)) {
        lua_pushinteger(L, v);
        return 1;
    }
    lua_pushnil(L);
    lua_pushfstring(L, "a whole number from 1 to %I", (lua_Integer)dag_count_max(c));
    return 2;
}

/* check_local(num_nodes, processes_per_node [, parameter_server_count]) ->
 * nil when --distributed=local may start that job's processes on this
 * machine, else why not.  The counts are valid (dag.dist_count's). */
static int l_check_local(lua_State *L)
{
    lua_Integer n = luaL_checkinteger(L, 1), p = luaL_checkinteger(L, 2), ps = luaL_optinteger(L, 3, 0);
    luaL_argcheck(L, dag_count_ok(DIST_NUM_NODES, n), 1, "not a valid num_nodes");
    luaL_argcheck(L, dag_count_ok(DIST_PROCESSES_PER_NODE, p), 2, "not a valid processes_per_node");
    luaL_argcheck(L, ps == 0 || dag_count_ok(DIST_PARAMETER_SERVERS, ps), 3, "not a valid parameter_server_count");
    long long total = dag_local_processes((long)n, (long)p, (long)ps);
    if (total <= DIST_MAX_LOCAL_PROCESSES) {
        lua_pushnil(L);
        return 1;
    }
    lua_pushfstring(L, "num_nodes %I x processes_per_node %I", n, p);
    if (ps > 0) lua_pushfstring(L, " + %I parameter server%s", ps, ps == 1 ? "" : "s");
    else lua_pushliteral(L, "");
    lua_pushfstring(L, "%s%s is %I processes, more than --distributed=local starts on one machine (at most %d); "
                    "test it with smaller counts, or run it once (--distributed=once)",
                    lua_tostring(L, -2), lua_tostring(L, -1), (lua_Integer)total, DIST_MAX_LOCAL_PROCESSES);
    return 1;
}

static const luaL_Reg dag_funcs[] = {
    { "build", l_build },
    { "scan", l_scan },
    { "is_param_input", l_is_param_input },
    { "dist_count", l_dist_count },
    { "check_local", l_check_local },
    { NULL, NULL }
};

/* For l_sched.c: the struct dag behind a flow.dag userdata. */
struct dag *flow_check_dag(lua_State *L, int idx)
{
    return *check_dag(L, idx);
}

int luaopen_flow_dag(lua_State *L)
{
    flow_new_class(L, DAG_MT, dag_methods, l_gc);
    luaL_newmetatable(L, COUNTS_MT);
    lua_pop(L, 1);
    flow_open_name_map(L);
    luaL_newlib(L, dag_funcs);
    return 1;
}
