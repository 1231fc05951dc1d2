/* l_uptodate.c — flow.cache.uptodate: the engine's up-to-date check of
 * steps (engine/uptodate.c) as a userdata that owns it.  The stdlib
 * describes each step once, before the run, and hands the check to
 * sched.run (opts.check): the scheduler's up-to-date question, a new step's
 * fingerprint and its record's freshness then never enter Lua.
 *
 *   chk = cache.uptodate(graph, hash_cache, state_store, selected|nil, values)
 *                        (keeps them alive; selected: {[i] = true} for the steps
 *                        the run selected; values: the run's, for inputs no
 *                        selected step makes)
 *   chk:set(i, code, dist|nil, outputs, {param = hash}, {file, ...}) -> described
 *                        step i's parts fixed for the run; its name, inputs
 *                        and outputs are the graph's
 *   chk:describe(ctx)    -> whether any was described, how many in C: every selected step, the
 *                        Lua steps the stdlib's tables say enough of in C,
 *                        the others through ctx.fallback(i) (see l_describe)
 *   chk:name(i)          names step i, a producer the check does not describe
 *   chk:fresh(i, fp)     step i's record in the store, with fingerprint fp, is this run's
 *   chk:passed(i)        -> whether the check found step i up to date
 *   chk:no_record(i)     -> whether the check found step i without a record (it ran)
 *   chk:stats()          -> {passed =, undecided =, no_record =} */
#include "dag.h"
#include "flowlua.h"
#include "uptodate.h"
#include "util.h"

#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>

#define UPTODATE_CLASS "flow.UpToDate"


static size_t check_step(lua_State *L, int idx)
{
    lua_Integer i = luaL_checkinteger(L, idx);
    luaL_argcheck(L, i >= 1, idx, "a step index");
    return (size_t)(i - 1);
}

/* The check's userdata: the check, the run's graph and which of its steps
 * the run selected (NULL: all). */
struct checker {
    struct utd *u;
    const struct dag *dag;
    bool *selected;
    /* chk:set's and chk:describe's arrays, and the outputs part
     * chk:describe makes, reused from step to step (utd_set_step copies them) */
    void *scratch;
    size_t scratch_size;
    struct strbuf part, joined;
    struct span { size_t at, len; const char *s; } *spans;   /* each output's part in `part` */
    size_t cap_spans;
};

static void *scratch(struct checker *c, size_t size)
{
    if (size > c->scratch_size) {
        free(c->scratch);
        c->scratch_size = size * 2;
        c->scratch = xmalloc(c->scratch_size);
    }
    return c->scratch;
}

enum { UV_HASHES = 1, UV_STORE, UV_GRAPH, UV_VALUES, UV_SELECTED, N_UV = UV_SELECTED };

static struct checker *checker_at(lua_State *L, int idx)
{
    struct checker *c = luaL_checkudata(L, idx, UPTODATE_CLASS);
    if (!c->u) luaL_error(L, "the up-to-date check is closed");
    return c;
}

static struct checker *check_checker(lua_State *L) { return checker_at(L, 1); }

static int l_uptodate(lua_State *L)
{
    const struct dag *dag = flow_check_dag(L, 1);
    struct hashcache *hc = flow_check_hashcache(L, 2);
    struct state_store *store = flow_check_state_store(L, 3);
    if (!lua_isnil(L, 4)) luaL_checktype(L, 4, LUA_TTABLE);
    luaL_checktype(L, 5, LUA_TTABLE);
    struct checker *c = lua_newuserdatauv(L, sizeof *c, N_UV);
    *c = (struct checker){ .dag = dag };
    luaL_setmetatable(L, UPTODATE_CLASS);
    for (int k = 1; k <= 3; k++) {
        lua_pushvalue(L, k);
        lua_setiuservalue(L, -2, k);
    }
    lua_pushvalue(L, 5);
    lua_setiuservalue(L, -2, UV_VALUES);
    if (lua_istable(L, 4)) {
        c->selected = lua_newuserdatauv(L, dag->n_steps + 1, 0);
        for (size_t i = 0; i < dag->n_steps; i++) {
            c->selected[i] = lua_rawgeti(L, 4, (lua_Integer)i + 1) != LUA_TNIL && lua_toboolean(L, -1);
            lua_pop(L, 1);
        }
        lua_setiuservalue(L, -2, UV_SELECTED);
    }
    c->u = utd_new(dag->n_steps, hc, store);
    return 1;
}

static struct fp_str str_at(lua_State *L, int idx)
{
    struct fp_str s;
    s.s = luaL_checklstring(L, idx, &s.len);
    return s;
}

/* A string field of the table on top of the stack, read raw; NULL if it is
 * not a string.  (Held by the table.) */
static const char *raw_string_field(lua_State *L, const char *key)
{
    lua_pushstring(L, key);
    lua_rawget(L, -2);
    const char *v = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
    lua_pop(L, 1);
    return v;
}

/* Argument 2: a step of the check's graph. */
static size_t graph_step(lua_State *L, const struct checker *c)
{
    size_t i = check_step(L, 2);
    luaL_argcheck(L, i < c->dag->n_steps, 2, "a step of the graph");
    return i;
}

/* Where input dataset d of a step comes from: a step of this run (its
 * producer, when the run selected it), or one of the run's values
 * (values[d]: its hash, or the file or folder at its path; a value is held
 * by the values table, so its strings outlive this call).  false: neither,
 * and the stdlib's check says what is wrong. */
static bool input_source(lua_State *L, const struct checker *c, const char *d, struct utd_input *in)
{
    long ds = dag_find_dataset(c->dag, d);
    long p = ds >= 0 ? c->dag->datasets[ds].producer : -1;
    *in = (struct utd_input){ .dataset = { d, strlen(d) }, .producer = UTD_NO_PRODUCER };
    if (p >= 0 && (!c->selected || c->selected[p])) {
        in->producer = (size_t)p;
        return true;
    }
    lua_getiuservalue(L, 1, UV_VALUES);
    lua_pushstring(L, d);
    if (lua_rawget(L, -2) == LUA_TTABLE) {
        in->hash = raw_string_field(L, "hash");
        in->path = in->hash ? NULL : raw_string_field(L, "path");
    }
    lua_pop(L, 2);
    return in->hash || in->path;
}

/* A step's description's arrays, in the checker's scratch (a raise while
 * they are filled leaks nothing): np parameters and nf files the caller
 * fills, the graph step's inputs and outputs describe() fills. */
struct arrays { struct fp_kv *params; const char **files; struct utd_input *in; const char **outs; };

static struct arrays scratch_arrays(struct checker *c, const struct dag_step *step, size_t np, size_t nf)
{
    struct arrays a;
    a.params = scratch(c, np * sizeof *a.params + step->n_inputs * sizeof *a.in +
                          (nf + step->n_outputs) * sizeof(char *) + 1);
    a.in = (struct utd_input *)(a.params + np);
    a.files = (const char **)(a.in + step->n_inputs);
    a.outs = a.files + nf;
    return a;
}

/* Describes step i: spec's code, dist, outputs, params and files given; its
 * name, inputs and outputs the graph's.  false (and not described): an input
 * neither made by a selected step nor a value of the run with a hash or a
 * path — the stdlib's check says what is wrong.  The checker is argument 1. */
static bool describe(lua_State *L, struct checker *c, size_t i, struct utd_step *spec, struct arrays *a)
{
    const struct dag_step *step = &c->dag->steps[i];
    spec->name = step->name;
    spec->n_inputs = 0;
    for (size_t k = 0; k < step->n_inputs; k++) {
        const char *d = step->inputs[k].dataset;
        if (dag_is_param_input(d)) continue;            /* a parameter: among the params */
        if (!input_source(L, c, d, &a->in[spec->n_inputs++])) return false;
    }
    spec->inputs = a->in;
    for (size_t k = 0; k < step->n_outputs; k++) a->outs[k] = step->outputs[k].dataset;
    spec->outputs_named = a->outs;
    spec->n_outputs = step->n_outputs;
    utd_set_step(c->u, i, spec);
    return true;
}

/* chk:set(i, code, dist|nil, outputs, {param = hash}, {file, ...}) -> whether step i is described.
 * Its name, inputs and outputs are the graph's; an input neither made by a
 * selected step nor a value of the run with a hash or a path leaves it
 * undescribed (the caller names it). */
static int l_set(lua_State *L)
{
    struct checker *c = check_checker(L);
    size_t i = graph_step(L, c);
    struct utd_step spec = { .code = str_at(L, 3), .outputs = str_at(L, 5) };
    if (!lua_isnil(L, 4)) spec.dist = str_at(L, 4);
    luaL_checktype(L, 6, LUA_TTABLE);
    luaL_checktype(L, 7, LUA_TTABLE);
    size_t np = 0, nf = (size_t)lua_rawlen(L, 7);
    for (lua_pushnil(L); lua_next(L, 6); lua_pop(L, 1)) np++;
    struct arrays a = scratch_arrays(c, &c->dag->steps[i], np, nf);
    np = 0;
    for (lua_pushnil(L); lua_next(L, 6); lua_pop(L, 1)) {
        if (lua_type(L, -2) != LUA_TSTRING || lua_type(L, -1) != LUA_TSTRING)
            return luaL_error(L, "up-to-date check: parameters map keys to hashes");
        a.params[np].key.s = lua_tolstring(L, -2, &a.params[np].key.len);        /* held by the table */
        a.params[np].value.s = lua_tolstring(L, -1, &a.params[np].value.len);
        np++;
    }
    spec.params = a.params;
    spec.n_params = np;
    for (size_t k = 0; k < nf; k++) {
        /* Strings only: a number converted here would be a new string that
         * is not in the table, gone once popped. */
        if (lua_rawgeti(L, 7, (lua_Integer)k + 1) != LUA_TSTRING)
            return luaL_error(L, "up-to-date check: file %d is a %s, not a name", (int)k + 1, luaL_typename(L, -1));
        a.files[k] = lua_tostring(L, -1);                 /* held by the table */
        lua_pop(L, 1);
    }
    spec.files = a.files;
    spec.n_files = nf;
    lua_pushboolean(L, describe(L, c, i, &spec, &a));
    return 1;
}

/* ---- chk:describe: the steps the run's tables already say enough of ------
 *
 * The parts of a step's fingerprint fixed for the run (flow.incremental's
 * Run:static_parts) for the steps whose every part is already in a table the
 * stdlib keeps, with no Lua code run a step: a no-op rerun of 100,000 steps
 * describes them in C.  The rule is Run:static_parts's; t_uptodate.sh checks
 * that the engine's fingerprints and parts (made from these) equal the
 * stdlib's.  Anything else is the stdlib's (ctx.fallback(i)): a distributed
 * or remote step, the sweep job's step, a function whose hash the hasher has
 * not made yet (the first closure of each prototype; one with upvalues), a
 * command not in the command memo yet (the first of each command line; one
 * with cwd or env), a parameter not yet hashed, "parameters", an output a
 * catalog pattern may match that the catalog has not resolved. */

/* ctx's fields, at fixed stack slots of l_describe. */
enum { X_NODES = 3, X_FN_MEMO, X_PROTOS, X_PARAMS, X_CODE_MEMO, X_REFS, X_CAT_MEMO, X_CAT_EXACT, X_DISTS, X_REMOTE,
       X_FALLBACK, X_SWEEP, X_PATTERNS, X_TOP = X_PATTERNS };
static const char *const ctx_fields[] = { "nodes", "fn_memo", "protos", "params", "code_memo", "refs", "cat_memo",
                                          "cat_exact", "dists", "remote", "fallback", "sweep_step", "patterns" };

/* Field key of the value at idx (through its metatable, as `t.key`); true
 * when it is a string, left on the stack either way. */
static bool field_string(lua_State *L, int idx, const char *key)
{
    return lua_getfield(L, idx, key) == LUA_TSTRING;
}

/* The hash of the function at idx that Hasher:fn would give without running
 * Lua: its closure's memo, or its prototype's hash (a function without
 * upvalues but _ENV and no script global).  NULL: the hasher's to make. */
static const char *known_fn_hash(lua_State *L, int fn, size_t *len)
{
    lua_pushvalue(L, fn);
    if (lua_rawget(L, X_FN_MEMO) == LUA_TSTRING) return lua_tolstring(L, -1, len);
    const void *id = flow_proto_id(L, fn);
    if (!id) return NULL;
    lua_pushlightuserdata(L, (void *)id);
    if (lua_rawget(L, X_PROTOS) != LUA_TTABLE) return NULL;
    lua_pushliteral(L, "hash");
    return lua_rawget(L, -2) == LUA_TSTRING ? lua_tolstring(L, -1, len) : NULL;
}

/* Output d's part, as Run:static_parts's output_part makes it from d's
 * catalog entry (d \0 type \0 path, then \0v when versioned), added to
 * c->part; false when only cat:entry can tell the entry (a pattern may
 * match d). */
static bool add_output_part(lua_State *L, struct checker *c, const char *d)
{
    const char *type = "memory", *path = "";
    bool versioned = false;
    lua_pushstring(L, d);
    if (lua_rawget(L, X_CAT_MEMO) != LUA_TTABLE) {
        lua_pop(L, 1);
        lua_pushstring(L, d);
        if (lua_rawget(L, X_CAT_EXACT) != LUA_TTABLE && lua_toboolean(L, X_PATTERNS)) return false;
    }
    int e = lua_gettop(L);
    if (lua_istable(L, e)) {
        if (!field_string(L, e, "type")) return false;
        type = lua_tostring(L, -1);
        int t = lua_getfield(L, e, "path");
        if (t == LUA_TSTRING) path = lua_tostring(L, -1);
        else if (t != LUA_TNIL && !(t == LUA_TBOOLEAN && !lua_toboolean(L, -1))) return false;
        lua_getfield(L, e, "versioned");
        versioned = lua_toboolean(L, -1);
    }
    sb_add(&c->part, d, strlen(d) + 1);          /* the NULs between the fields */
    sb_add(&c->part, type, strlen(type) + 1);
    sb_adds(&c->part, path);
    if (versioned) sb_add(&c->part, "\0v", 2);
    lua_settop(L, e - 1);
    return true;
}

/* Lua's string order in the C locale (flow never sets another): bytes,
 * then length — what table.sort gives the parts, NUL bytes and all. */
static int compare_spans(const void *a, const void *b)
{
    const struct span *x = a, *y = b;
    int d = memcmp(x->s, y->s, x->len < y->len ? x->len : y->len);
    return d ? d : (x->len > y->len) - (x->len < y->len);
}

/* The outputs' part (Run:static_parts's outputs_part): the one output's
 * part, or each output's sorted and joined with "\n"; "" for none.  false
 * as add_output_part. */
static bool outputs_part(lua_State *L, struct checker *c, const struct dag_step *step, struct fp_str *out)
{
    sb_truncate(&c->part, 0);
    if (step->n_outputs > c->cap_spans) {
        c->cap_spans = 2 * step->n_outputs;
        c->spans = xrealloc(c->spans, c->cap_spans * sizeof *c->spans);
    }
    for (size_t k = 0; k < step->n_outputs; k++) {
        size_t at = c->part.len;
        if (!add_output_part(L, c, step->outputs[k].dataset)) return false;
        c->spans[k] = (struct span){ at, c->part.len - at, NULL };
    }
    if (step->n_outputs < 2) {
        *out = (struct fp_str){ c->part.len ? c->part.buf : "", c->part.len };
        return true;
    }
    for (size_t k = 0; k < step->n_outputs; k++) c->spans[k].s = c->part.buf + c->spans[k].at;
    qsort(c->spans, step->n_outputs, sizeof *c->spans, compare_spans);
    sb_truncate(&c->joined, 0);
    for (size_t k = 0; k < step->n_outputs; k++) {
        if (k) sb_addc(&c->joined, '\n');
        sb_add(&c->joined, c->spans[k].s, c->spans[k].len);
    }
    *out = (struct fp_str){ c->joined.buf, c->joined.len };
    return true;
}

/* A command's code and project file names, as fingerprint.command_code
 * memoised them by the command's text (a command with a cwd or env is never
 * memoised): pushes the memo's {code, names} entry and returns its code, or
 * NULL.  The text key is built in c->part. */
static const char *known_command_code(lua_State *L, struct checker *c, int cmd, size_t *len)
{
    if (lua_getfield(L, cmd, "cwd") != LUA_TNIL || lua_getfield(L, cmd, "env") != LUA_TNIL) return NULL;
    sb_truncate(&c->part, 0);
    if (field_string(L, cmd, "shell")) {
        sb_add(&c->part, "sh\1", 3);
        sb_add(&c->part, lua_tostring(L, -1), lua_rawlen(L, -1));
    } else {
        if (lua_getfield(L, cmd, "argv") != LUA_TTABLE) return NULL;
        int argv = lua_gettop(L);
        for (lua_Integer k = 1; k <= (lua_Integer)lua_rawlen(L, argv); k++) {
            if (lua_rawgeti(L, argv, k) != LUA_TSTRING) return NULL;
            if (k > 1) sb_addc(&c->part, '\0');
            sb_add(&c->part, lua_tostring(L, -1), lua_rawlen(L, -1));
            lua_pop(L, 1);
        }
    }
    lua_pushlstring(L, c->part.buf ? c->part.buf : "", c->part.len);
    if (lua_rawget(L, X_CODE_MEMO) != LUA_TTABLE) return NULL;
    if (lua_rawgeti(L, -1, 1) != LUA_TSTRING) return NULL;
    const char *code = lua_tolstring(L, -1, len);
    lua_pop(L, 1);                                   /* held by the memo's entry, left on the stack */
    return code;
}

/* The ${params.} keys each of a command's template strings names
 * (memo.refs, by string), as the step reads them after namespacing
 * (n.cmd_params), with the parameters read as inputs: their hashes into
 * params (at most max), each key once.  Returns how many, or -1 when a
 * string's keys or a key's hash is not in the memos yet. */
static long known_params(lua_State *L, const struct dag_step *step, int n, int templates, struct fp_kv *params,
                         size_t max)
{
    size_t np = 0;
    int renames = lua_getfield(L, n, "cmd_params") == LUA_TTABLE ? lua_gettop(L) : 0;
    size_t n_templates = templates ? (size_t)lua_rawlen(L, templates) : 0;
    size_t n_inputs = step->n_inputs;
    for (size_t t = 0; t < n_templates + n_inputs; t++) {
        const char *key = NULL;
        size_t keys = 1;
        int refs = 0;
        if (t < n_templates) {
            lua_rawgeti(L, templates, (lua_Integer)t + 1);
            if (lua_rawget(L, X_REFS) != LUA_TTABLE) return -1;
            refs = lua_gettop(L);
            keys = (size_t)lua_rawlen(L, refs);
        } else {
            const char *d = step->inputs[t - n_templates].dataset;
            if (!dag_is_param_input(d)) continue;
            if (!(key = dag_param_key(d))) return -1;   /* "parameters": all of them */
        }
        for (size_t k = 0; k < keys; k++) {
            if (refs) {
                if (lua_rawgeti(L, refs, (lua_Integer)k + 1) != LUA_TSTRING) return -1;
                if (renames) {                           /* pipeline.command_param */
                    lua_pushvalue(L, -1);
                    if (lua_rawget(L, renames) == LUA_TSTRING) lua_replace(L, -2);
                    else lua_pop(L, 1);
                }
                key = lua_tostring(L, -1);               /* held by the memo or the renames */
                lua_pop(L, 1);
            }
            struct fp_str ks = { key, strlen(key) };
            bool twice = false;                          /* read twice: one entry, as in a map */
            for (size_t j = 0; j < np && !twice; j++)
                twice = params[j].key.len == ks.len && memcmp(params[j].key.s, key, ks.len) == 0;
            if (twice) continue;
            if (np == max) return -1;
            lua_pushstring(L, key);
            if (lua_rawget(L, X_PARAMS) != LUA_TSTRING) return -1;
            params[np++] = (struct fp_kv){ ks, { lua_tostring(L, -1), lua_rawlen(L, -1) } };   /* held by the memo */
            lua_pop(L, 1);
        }
        if (refs) lua_settop(L, refs - 1);
    }
    return (long)np;
}

/* Describes step i (0-based) if its parts are all known here: 1 described,
 * 0 not describable (an input without a source: named only), -1 the
 * stdlib's.  Leaves what it pushed on the stack (the caller resets it). */
static int describe_known(lua_State *L, struct checker *c, size_t i)
{
    const struct dag_step *step = &c->dag->steps[i];
    if (lua_rawgeti(L, X_DISTS, (lua_Integer)i + 1) != LUA_TNIL) return -1;
    if (lua_rawgeti(L, X_REMOTE, (lua_Integer)i + 1) != LUA_TNIL) return -1;
    lua_rawgeti(L, X_NODES, (lua_Integer)i + 1);
    int n = lua_gettop(L);
    if (!field_string(L, n, "kind")) return -1;
    bool command = strcmp(lua_tostring(L, -1), "command") == 0;
    if (!command && strcmp(lua_tostring(L, -1), "func") != 0) return -1;
    if (lua_type(L, X_SWEEP) == LUA_TSTRING && field_string(L, n, "name") && lua_rawequal(L, -1, X_SWEEP))
        return -1;
    struct utd_step spec = { 0 };
    int templates = 0, names = 0;
    if (command) {
        if (lua_getfield(L, n, "cmd") != LUA_TTABLE) return -1;
        int cmd = lua_gettop(L);
        if (!(spec.code.s = known_command_code(L, c, cmd, &spec.code.len))) return -1;
        int entry = lua_gettop(L);
        int t = lua_rawgeti(L, entry, 2);
        if (t == LUA_TTABLE) names = lua_gettop(L);
        else if (t != LUA_TNIL) return -1;
        /* command.template_strings: argv (no env here), or the shell line */
        if (lua_getfield(L, cmd, "argv") == LUA_TTABLE) {
            templates = lua_gettop(L);
        } else {
            lua_createtable(L, 1, 0);
            templates = lua_gettop(L);
            lua_getfield(L, cmd, "shell");
            lua_rawseti(L, templates, 1);
        }
    } else {
        if (lua_getfield(L, n, "fn") != LUA_TFUNCTION) return -1;
        if (!(spec.code.s = known_fn_hash(L, lua_gettop(L), &spec.code.len))) return -1;
    }
    size_t nf = names ? (size_t)lua_rawlen(L, names) : 0;
    size_t max = step->n_inputs;
    for (size_t t = 0; templates && t < (size_t)lua_rawlen(L, templates); t++) {
        lua_rawgeti(L, templates, (lua_Integer)t + 1);
        if (lua_rawget(L, X_REFS) != LUA_TTABLE) return -1;
        max += (size_t)lua_rawlen(L, -1);
        lua_pop(L, 1);
    }
    struct arrays a = scratch_arrays(c, step, max, nf);
    long np = known_params(L, step, n, templates, a.params, max);
    if (np < 0) return -1;
    for (size_t k = 0; k < nf; k++) {
        if (lua_rawgeti(L, names, (lua_Integer)k + 1) != LUA_TSTRING) return -1;
        a.files[k] = lua_tostring(L, -1);               /* held by the memo */
        lua_pop(L, 1);
    }
    if (!outputs_part(L, c, step, &spec.outputs)) return -1;
    spec.params = a.params;
    spec.n_params = (size_t)np;
    spec.files = a.files;
    spec.n_files = nf;
    return describe(L, c, i, &spec, &a) ? 1 : 0;
}

/* chk:describe(ctx) -> whether any step was described, and how many were
 * described here (without ctx.fallback).  Describes every
 * selected step: those describe_known can, in C; the others through
 * ctx.fallback(i) -> described (which names a step it cannot describe).
 * ctx = {nodes =, fn_memo = hasher.memo, protos = hasher.protos, params =
 * {key = hash}, cat_memo =, cat_exact =, patterns = whether the catalog has
 * patterns, dists =, remote =, sweep_step = name|nil, fallback =}. */
static int l_describe(lua_State *L)
{
    struct checker *c = check_checker(L);
    luaL_checktype(L, 2, LUA_TTABLE);
    lua_settop(L, 2);
    for (int k = X_NODES; k <= X_TOP; k++) {
        int t = lua_getfield(L, 2, ctx_fields[k - X_NODES]);
        if (k < X_FALLBACK) luaL_argexpected(L, t == LUA_TTABLE, 2, ctx_fields[k - X_NODES]);
        if (k == X_FALLBACK) luaL_argexpected(L, t == LUA_TFUNCTION, 2, "fallback");
    }
    luaL_checkstack(L, 48, "the up-to-date check");    /* describe_known pushes about 25 at most */
    bool described = false;
    lua_Integer here = 0;
    for (size_t i = 0; i < c->dag->n_steps; i++) {
        if (c->selected && !c->selected[i]) continue;
        int r = describe_known(L, c, i);
        lua_settop(L, X_TOP);
        if (r == 0) utd_name_step(c->u, i, c->dag->steps[i].name);
        if (r >= 0) {
            described = described || r > 0;
            here += r > 0;
            continue;
        }
        lua_pushvalue(L, X_FALLBACK);
        lua_pushinteger(L, (lua_Integer)i + 1);
        lua_call(L, 1, 1);
        described = described || lua_toboolean(L, -1);
        lua_settop(L, X_TOP);
    }
    lua_pushboolean(L, described);
    lua_pushinteger(L, here);
    return 2;
}

/* chk:name(i): step i, undescribed, known by name (a producer whose record
 * its consumers may still use once it is fresh). */
static int l_name(lua_State *L)
{
    struct checker *c = check_checker(L);
    size_t i = graph_step(L, c);
    utd_name_step(c->u, i, c->dag->steps[i].name);
    return 0;
}

static int l_fresh(lua_State *L)
{
    utd_mark_fresh(check_checker(L)->u, check_step(L, 2), luaL_checkstring(L, 3));
    return 0;
}

static int l_passed(lua_State *L)
{
    lua_pushboolean(L, utd_passed(check_checker(L)->u, check_step(L, 2)));
    return 1;
}

static int l_no_record(lua_State *L)
{
    lua_pushboolean(L, utd_no_record(check_checker(L)->u, check_step(L, 2)));
    return 1;
}

static int l_stats(lua_State *L)
{
    struct utd_stats st = utd_stats(check_checker(L)->u);
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
    struct checker *c = luaL_checkudata(L, 1, UPTODATE_CLASS);
    utd_free(c->u);
    free(c->scratch);
    sb_release(&c->part);
    sb_release(&c->joined);
    free(c->spans);
    c->spans = NULL;
    c->u = NULL;
    c->scratch = NULL;
    return 0;
}

struct utd *flow_check_uptodate(lua_State *L, int idx) { return checker_at(L, idx)->u; }

static const luaL_Reg uptodate_methods[] = {
    { "set", l_set },
    { "describe", l_describe },
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
