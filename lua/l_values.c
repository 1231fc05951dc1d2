/* l_values.c — module flow.values_c: the body of a plain Lua function step
 * in C, the common case of Run:run_function (flow.execute).  A run of
 * 100,000 such steps spent about 4 µs a step in the stdlib's Lua around the
 * call (its arguments gathered, its results sorted by output, each value
 * serialised, hashed and recorded): a handful of tables a step, and the
 * collector's work on them.
 *
 * call(values, n, cat, inline_max [, namer [, i]]) takes a step whose inputs are all in
 * memory (values[d].loaded) and whose outputs are all memory datasets, calls
 * n.fn on the inputs' values, and when the results are what the outputs ask
 * for and each serialises to at most inline_max bytes, records them as the
 * stdlib would: values[d] = {value =, loaded = true, hash =}, and returns
 * the output records {d = {hash =, value = text}} as util.record_json's
 * text, the journal's and the state record's.  With namer (a step whose
 * large values are not kept between runs: flow.values, Run:unkept_namer) a
 * value that does not serialise within inline_max bytes is recorded as
 * {hash = K, recompute = true}, K the hash of "recompute\0" fp "\0" d
 * (values.recompute_key; fp what namer() returns, asked only then), its
 * text never made whole.  Anything else is the
 * stdlib's, decided so that nothing is done twice:
 *   - before the call (an input to restore or to read from a file, an output
 *     the catalog keeps, a pattern that may match an output): nothing
 *     returned, nothing called;
 *   - after it (results the outputs do not match, a map of results with a
 *     metatable, a value that cannot be cached, a large one that goes to a
 *     file, a credential registered, for a value may hold it): nil and the
 *     results as table.pack makes them, from which the stdlib goes on
 *     (values.returned_values, save_values) with its own checks and messages.
 * The function is called with lua_callk: a step that waits (flow.sh) yields
 * its coroutine, and finish() takes the results when it is resumed.  Where
 * the step's code sees a difference: error(msg, 2) names no position (its
 * caller is C, not the stdlib's run_function), and a traceback shows the
 * function as "function <file:line>" rather than "field 'fn'".
 * With i, the step's index in the graph of a values table by index
 * (values_table.c), its inputs are read and its outputs written there by
 * the graph's dataset indices, and the catalog's verdict on its outputs is
 * the table's: no name is made as a Lua string.
 * FLOW_DEBUG_LUA_BODIES=1 sends every step the stdlib's way; t_outputs.sh
 * runs both and compares what they record. */
#include "flowlua.h"
#include "dag.h"
#include "hash.h"
#include "json_text.h"
#include "serialize.h"
#include "statestore.h"
#include "step_decl.h"

#include <lauxlib.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define MAX_OUTPUTS FLOW_KEPT_OUTPUTS_MAX

enum { A_VALUES = 1, A_NODE, A_CAT, A_INLINE_MAX, A_RECOMPUTE, A_STEP, S_EXACT, S_MEMO, S_NAMES, S_GRAPH_STEP };

/* Whether field `key` of the table at idx is the string `want`. */
static bool field_is(lua_State *L, int idx, const char *key, const char *want)
{
    const char *s = flow_field_string(L, idx, key);
    return s && strcmp(s, want) == 0;
}

/* The step: its record (read from the node's, not from Lua lists that a
 * read of n.inputs would make), a copy, and its store; and when the values
 * table keeps its entries by the graph's dataset index (values_table.c)
 * and the step's index was given, the graph's step, whose inputs and
 * outputs give those indices (else NULL: values by name). */
struct step_view {
    struct step_decls *d;
    struct step_decl rec;
    struct values_keys keys;
    const struct dag_step *step;
};

/* The graph's step i (argument A_STEP) when it is the node's, as a values
 * table by index needs it. */
static const struct dag_step *graph_step(lua_State *L, const struct step_view *v)
{
    const struct dag *dag = v->keys.dag;
    lua_Integer i = lua_isinteger(L, A_STEP) ? lua_tointeger(L, A_STEP) : 0;
    if (!dag || i < 1 || (uint64_t)i > dag->n_steps) return NULL;
    const struct dag_step *s = &dag->steps[i - 1];
    if (s->n_inputs != v->rec.n_inputs || s->n_outputs != v->rec.n_outputs ||
        strcmp(s->name, step_decls_str(v->d, v->rec.name)) != 0)
        return NULL;
    for (size_t k = 0; k < s->n_outputs; k++)
        if (s->outputs[k].di >= dag->n_datasets) return NULL;
    return s;
}

/* The node's record and store (keys and step: the caller's to find). */
static bool view_of_node(lua_State *L, struct step_view *v)
{
    const struct step_decl *r = flow_node_decl(L, A_NODE, &v->d, NULL);
    if (!r) return false;
    v->rec = *r;                        /* (pushing a string may run finalizers, which may add records) */
    v->keys = (struct values_keys){ 0 };
    v->step = NULL;
    return true;
}

/* Pushes the dataset of input k (1-based; output k with `outputs`), or its
 * argument's name with `arg`. */
static void push_io_name(lua_State *L, const struct step_view *v, bool outputs, lua_Integer k, bool arg)
{
    struct step_io io = v->d->io[step_io_first(&v->rec, outputs) + (uint32_t)k - 1];
    if (lua_isnil(L, S_NAMES)) {                  /* the store's names, when a step first needs one */
        flow_push_node_names(L, A_NODE);
        lua_replace(L, S_NAMES);
    }
    flow_push_name_of(L, S_NAMES, v->d, arg ? io.arg : io.dataset);
}

/* Every output a memory dataset: by the kinds the values table read from
 * the catalog when it has them, else (or when a pattern may match) by name. */
static bool outputs_in_memory(lua_State *L, const struct step_view *v)
{
    lua_getfield(L, A_CAT, "patterns");
    bool patterns = lua_istable(L, -1) && lua_rawlen(L, -1) > 0;
    lua_pop(L, 1);
    for (lua_Integer k = 1; k <= v->rec.n_outputs; k++) {
        if (v->step && v->keys.kinds) {
            enum catalog_kind kind = v->keys.kinds[v->step->outputs[k - 1].di];
            if (kind == CATALOG_KEPT) return false;
            if (kind == CATALOG_MEMORY || !v->keys.patterns) continue;
        }
        push_io_name(L, v, true, k, false);
        if (!flow_push_known_entry(L, S_EXACT, S_MEMO, -1, patterns)) {
            lua_pop(L, 1);
            return false;
        }
        bool memory = lua_isnil(L, -1) || field_is(L, -1, "type", "memory");
        lua_pop(L, 2);
        if (!memory) return false;
    }
    return true;
}

/* ---- each step its own copy of a table input ------------------------------
 *
 * A table a step returns is the value of its output for every step that
 * reads it in this run, but a later run restores it from its record, as it
 * was when it was returned.  A step that changed its input in place was seen
 * by the steps that read it after it only when the producer ran in the same
 * run: c read 101 on a first run and 1 on a rerun of c alone.  So a Lua step
 * gets a copy of each table input, as Kedro's MemoryDataset gives a deep
 * copy: what it changes, no other step sees.  Only plain data is copied
 * (tables of strings, numbers and booleans, shared parts and cycles kept as
 * they are); a value holding a function, a userdata or a metatable is never
 * kept nor restored (its producer runs again each run), so it is handed on
 * as it is. */

#define COPY_MAX_DEPTH 200

/* Pushes a copy of the table at t (memo: original -> copy), or returns false
 * with nothing pushed at anything that is not plain data. */
static bool push_table_copy(lua_State *L, int t, int memo, int depth)
{
    if (depth > COPY_MAX_DEPTH || !lua_checkstack(L, 6)) return false;
    lua_pushvalue(L, t);
    if (lua_rawget(L, memo) == LUA_TTABLE) return true;        /* a shared part, or a cycle */
    lua_pop(L, 1);
    if (lua_getmetatable(L, t)) {
        lua_pop(L, 1);
        return false;
    }
    lua_createtable(L, (int)(lua_rawlen(L, t) < 1000000 ? lua_rawlen(L, t) : 0), 0);
    int copy = lua_gettop(L);
    lua_pushvalue(L, t);
    lua_pushvalue(L, copy);
    lua_rawset(L, memo);
    lua_pushnil(L);
    while (lua_next(L, t)) {                       /* copy, key, value */
        int kt = lua_type(L, -2), vt = lua_type(L, -1);
        if (kt == LUA_TTABLE || kt == LUA_TFUNCTION || kt == LUA_TUSERDATA || kt == LUA_TTHREAD ||
            kt == LUA_TLIGHTUSERDATA) {
            lua_settop(L, copy - 1);
            return false;
        }
        if (vt == LUA_TTABLE) {
            if (!push_table_copy(L, lua_gettop(L), memo, depth + 1)) {
                lua_settop(L, copy - 1);
                return false;
            }
            lua_replace(L, -2);
        } else if (vt != LUA_TSTRING && vt != LUA_TNUMBER && vt != LUA_TBOOLEAN) {
            lua_settop(L, copy - 1);
            return false;
        }
        lua_pushvalue(L, -2);
        lua_insert(L, -2);
        lua_rawset(L, copy);                       /* copy[key] = value */
    }
    return true;
}

/* Replaces the value at idx by its copy when it is a table of plain data. */
static void own_copy(lua_State *L, int idx)
{
    if (lua_type(L, idx) != LUA_TTABLE) return;
    idx = lua_absindex(L, idx);
    lua_newtable(L);
    int memo = lua_gettop(L);
    if (push_table_copy(L, idx, memo, 0)) lua_replace(L, idx);
    lua_settop(L, memo - 1);
}

/* copy(v) -> v's own copy when it is a table of plain data, else v */
static int l_copy(lua_State *L)
{
    luaL_checkany(L, 1);
    lua_settop(L, 1);
    own_copy(L, 1);
    return 1;
}

/* Pushes the value of every input (a table of them by argument name when
 * the step takes a map): false, with nothing left pushed, when one is not
 * loaded in memory yet.  Returns the number of arguments in *nargs. */
static bool push_inputs(lua_State *L, const struct step_view *v, int *nargs)
{
    int top = lua_gettop(L);
    lua_Integer n_in = v->rec.n_inputs;
    bool map = v->rec.flags & STEP_INPUTS_MAP;
    if (n_in > 1000000 || !lua_checkstack(L, (int)n_in + 8)) return false;    /* the stdlib says why */
    if (map) lua_createtable(L, 0, (int)(n_in > 64 ? 64 : n_in));
    for (lua_Integer k = 1; k <= n_in; k++) {
        int type;
        if (v->step) {
            size_t di = v->step->inputs[k - 1].di;           /* (a parameter has none: the stdlib's) */
            type = di < v->keys.dag->n_datasets ? lua_rawgeti(L, A_VALUES, (lua_Integer)di + 1) : LUA_TNONE;
        } else {
            push_io_name(L, v, false, k, false);
            type = lua_rawget(L, A_VALUES);
        }
        if (type != LUA_TTABLE || lua_getfield(L, -1, "loaded") != LUA_TBOOLEAN ||
            !lua_toboolean(L, -1)) {
            lua_settop(L, top);
            return false;
        }
        lua_pop(L, 1);
        lua_getfield(L, -1, "value");            /* entry, value */
        own_copy(L, -1);
        if (map) {
            push_io_name(L, v, false, k, true);
            lua_insert(L, -2);
            lua_rawset(L, -4);                   /* t[io.arg] = value */
            lua_pop(L, 1);
        } else {
            lua_replace(L, -2);
        }
    }
    *nargs = lua_gettop(L) - top;
    return true;
}

/* The result that output k gets (pushed), or false with nothing pushed
 * when the results do not give it: results base+1 .. base+nres. */
static bool push_result(lua_State *L, const struct step_view *v, int base, int nres, bool map, lua_Integer k)
{
    if (map) {
        /* a table with a metatable is the stdlib's: its __index may wait
         * (flow.sh), which it cannot do under a C function */
        if (nres < 1 || !lua_istable(L, base + 1)) return false;
        if (lua_getmetatable(L, base + 1)) {
            lua_pop(L, 1);
            return false;
        }
        push_io_name(L, v, true, k, true);
        lua_rawget(L, base + 1);
    } else {
        if (k > nres) return false;
        lua_pushvalue(L, base + (int)k);
    }
    if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        return false;
    }
    return true;
}

/* The results, packed as table.pack packs them, after nil: the stdlib's turn. */
static int hand_over(lua_State *L, int base, int nres)
{
    lua_pushnil(L);
    lua_createtable(L, nres, 1);
    for (int i = 1; i <= nres; i++) {
        lua_pushvalue(L, base + i);
        lua_rawseti(L, -2, i);
    }
    lua_pushinteger(L, nres);
    lua_setfield(L, -2, "n");
    return 2;
}

/* An output ready to be recorded: its dataset, its serialised value (NULL
 * when it is not kept) and that text's hash, or its recompute key (the
 * strings are held by the step's node and the stack). */
struct ready { const char *d, *text; char hash[SHA256_HEX_SIZE]; };

/* values.recompute_key(fp, d) into hash. */
static void recompute_key(lua_State *L, const char *fp, const char *d, char hash[SHA256_HEX_SIZE])
{
    static const char prefix[] = "recompute";
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    luaL_addlstring(&b, prefix, sizeof prefix);          /* with its NUL byte */
    luaL_addstring(&b, fp);
    luaL_addchar(&b, '\0');
    luaL_addstring(&b, d);
    luaL_pushresult(&b);
    size_t len;
    const char *text = lua_tolstring(L, -1, &len);
    sha256_hex(text, len, hash);
    lua_pop(L, 1);
}

static int by_dataset(const void *a, const void *b)
{
    return strcmp(((const struct ready *)a)->d, ((const struct ready *)b)->d);
}

static void put_buffer(void *b, const char *p, size_t n) { luaL_addlstring(b, p, n); }

static void add_json_string(luaL_Buffer *b, const char *s)
{
    luaL_addchar(b, '"');
    json_escape(s, put_buffer, b);
    luaL_addchar(b, '"');
}

/* Pushes the output records as util.record_json writes them: {"d":{"hash":
 * "…","value":"…"},…}, keys in byte order.  No secret is registered (the
 * caller checked), so there is nothing to mask. */
static void push_records_json(lua_State *L, struct ready *r, size_t n)
{
    qsort(r, n, sizeof *r, by_dataset);
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    luaL_addchar(&b, '{');
    for (size_t k = 0; k < n; k++) {
        if (k) luaL_addchar(&b, ',');
        add_json_string(&b, r[k].d);
        luaL_addstring(&b, ":{\"hash\":");
        add_json_string(&b, r[k].hash);
        if (r[k].text) {
            luaL_addstring(&b, ",\"value\":");
            add_json_string(&b, r[k].text);
        } else {
            luaL_addstring(&b, ",\"recompute\":true");
        }
        luaL_addchar(&b, '}');
    }
    luaL_addchar(&b, '}');
    luaL_pushresult(&b);
}

/* After n.fn returned (directly, or resumed after it yielded): its results
 * are above `base`. */
static int finish(lua_State *L, int status, lua_KContext ctx)
{
    (void)status;
    int base = (int)ctx, nres = lua_gettop(L) - base;
    /* a call with LUA_MULTRET leaves no room above its results: made here
     * (what hand_over needs first, then the values and their texts) */
    luaL_checkstack(L, 8, "too many results");
    struct step_view v;
    if (!view_of_node(L, &v)) return luaL_error(L, "internal error: a step's node went while it ran");
    /* the graph's step l_call found, or NULL (the values table at A_VALUES
     * keeps the graph alive) */
    v.step = lua_touserdata(L, S_GRAPH_STEP);
    lua_Integer n_out = v.rec.n_outputs;
    lua_Integer inline_max = lua_tointeger(L, A_INLINE_MAX);
    bool map = v.rec.flags & STEP_OUTPUTS_MAP;
    bool may_unkeep = lua_isfunction(L, A_RECOMPUTE);   /* false: every value is kept */
    int unkept = 0;
    /* util.holds_secret is the stdlib's; more outputs than this, rare, too */
    if (flow_active_has_secrets(L) || n_out > MAX_OUTPUTS || !lua_checkstack(L, 2 * (int)n_out + 8))
        return hand_over(L, base, nres);
    int vals = lua_gettop(L);
    for (lua_Integer k = 1; k <= n_out; k++) {           /* value k at vals + 2k - 1, its text above it */
        if (!push_result(L, &v, base, nres, map, k)) {
            lua_settop(L, vals);
            return hand_over(L, base, nres);
        }
        /* a value over inline_max is not kept, or is the stdlib's (a file of
         * its own): either way its text is not made whole here */
        if (!flow_serialize_max(L, -1, (size_t)inline_max)) {
            if (!may_unkeep) {
                lua_settop(L, vals);
                return hand_over(L, base, nres);
            }
            lua_pop(L, 1);
            lua_pushnil(L);                               /* (no text: not kept) */
            unkept++;
        }
    }
    /* Every output is ready: recorded now, in order, as save_values does:
     * values[d] = {value =, loaded = true, hash =}. */
    const char *fp = NULL;
    if (unkept) {                                         /* the name of what made them (kept on the stack) */
        lua_pushvalue(L, A_RECOMPUTE);
        lua_call(L, 0, 1);
        if (!(fp = lua_tostring(L, -1))) return luaL_error(L, "internal error: no name for a value not kept");
    }
    struct ready r[MAX_OUTPUTS];
    for (lua_Integer k = 1; k <= n_out; k++) {
        int val = vals + 2 * (int)k - 1;
        size_t len;
        struct ready *o = &r[k - 1];
        o->text = lua_tolstring(L, val + 1, &len);
        const struct dag_io *io = v.step ? &v.step->outputs[k - 1] : NULL;
        if (io) {
            o->d = io->dataset;                             /* the graph's, which A_VALUES keeps alive */
        } else {
            push_io_name(L, &v, true, k, false);
            o->d = lua_tostring(L, -1);                     /* kept alive as a key of A_VALUES */
        }
        if (o->text) sha256_hex(o->text, len, o->hash);
        else recompute_key(L, fp, o->d, o->hash);
        lua_createtable(L, 0, 3);
        lua_pushstring(L, o->hash);
        lua_setfield(L, -2, "hash");
        lua_pushvalue(L, val);
        lua_setfield(L, -2, "value");
        lua_pushboolean(L, 1);
        lua_setfield(L, -2, "loaded");
        if (io) lua_rawseti(L, A_VALUES, (lua_Integer)io->di + 1);
        else lua_rawset(L, A_VALUES);
    }
    push_records_json(L, r, (size_t)n_out);
    if (v.step) {               /* the datasets' names are the graph's: they outlive the run's records */
        struct state_out outs[MAX_OUTPUTS];
        for (lua_Integer k = 0; k < n_out; k++)      /* (in the text's order: push_records_json sorted r) */
            outs[k] = (struct state_out){ .kind = r[k].text ? 'v' : 't', .dataset = r[k].d, .path = "",
                                          .hash = r[k].hash };
        flow_step_keep_outputs(L, lua_tostring(L, -1), outs, (size_t)n_out);
    }
    return 1;
}

/* call(values, n, cat, inline_max [, namer [, i]]) -> records JSON | nil, results | nothing (see above) */
static int l_call(lua_State *L)
{
    lua_settop(L, A_STEP);
    luaL_checktype(L, A_VALUES, LUA_TTABLE);
    luaL_checktype(L, A_NODE, LUA_TUSERDATA);
    luaL_checktype(L, A_CAT, LUA_TTABLE);
    luaL_argcheck(L, luaL_checkinteger(L, A_INLINE_MAX) > 0, A_INLINE_MAX, "a positive size");
    if (!lua_isnoneornil(L, A_RECOMPUTE)) luaL_checktype(L, A_RECOMPUTE, LUA_TFUNCTION);
    lua_getfield(L, A_CAT, "exact");
    lua_getfield(L, A_CAT, "memo");
    for (int i = S_EXACT; i <= S_MEMO; i++)
        if (!lua_istable(L, i)) return 0;
    struct step_view v;
    if (!view_of_node(L, &v)) return 0;
    v.keys = flow_values_keys(L, A_VALUES, S_EXACT);
    v.step = graph_step(L, &v);
    lua_pushnil(L);                                        /* S_NAMES: made by push_io_name */
    lua_pushlightuserdata(L, (void *)v.step);              /* S_GRAPH_STEP: for finish */
    if (!outputs_in_memory(L, &v)) return 0;
    if (flow_node_push_body(L, A_NODE) != LUA_TFUNCTION) return 0;
    int base = lua_gettop(L) - 1, nargs;                   /* the results replace fn and its arguments */
    if (!push_inputs(L, &v, &nargs)) return 0;
    lua_callk(L, nargs, LUA_MULTRET, base, finish);
    return finish(L, LUA_OK, base);
}

/* recompute_key(fp, d) -> K: the hash that names value d of a step whose
 * fingerprint is fp when the value is not kept (flow.values); the one
 * spelling of it, for the stdlib too. */
static int l_recompute_key(lua_State *L)
{
    const char *fp = luaL_checkstring(L, 1), *d = luaL_checkstring(L, 2);
    char hash[SHA256_HEX_SIZE];
    recompute_key(L, fp, d, hash);
    lua_pushstring(L, hash);
    return 1;
}

static const luaL_Reg values_funcs[] = {
    { "call", l_call },
    { "copy", l_copy },
    { "recompute_key", l_recompute_key },
    { "keeps", flow_l_keeps },                  /* plain_step.c */
    { "plain_steps", flow_l_plain_steps },
    { "plain_attempt", flow_l_plain_attempt },
    { "plain_done", flow_l_plain_done },
    { NULL, NULL }
};

int luaopen_flow_values_c(lua_State *L)
{
    luaL_newlib(L, values_funcs);
    flow_values_table_open(L);
    return 1;
}
