/* uptodate_describe.c — chk:describe: the steps the run's tables already
 * say enough of, described to the engine's up-to-date check without running
 * Lua a step (see the section below and lua/l_uptodate.c for the check). */
#include "uptodate_checker.h"

#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>

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

/* ctx's fields, at fixed stack slots of flow_uptodate_describe. */
enum { X_NODES = 3, X_FN_MEMO, X_PROTOS, X_PARAMS, X_CODE_MEMO, X_REFS, X_CAT_MEMO, X_CAT_EXACT, X_DISTS, X_REMOTE,
       X_FALLBACK, X_SWEEP, X_PATTERNS, X_BY_COMMAND, X_TOP = X_BY_COMMAND };
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
 * upvalues but _ENV, the script's globals, and no script global named; an
 * _ENV of its own is a value the hasher hashes).  NULL: the hasher's to make. */
static const char *known_fn_hash(lua_State *L, int fn, size_t *len)
{
    lua_pushvalue(L, fn);
    if (lua_rawget(L, X_FN_MEMO) == LUA_TSTRING) return lua_tolstring(L, -1, len);
    if (lua_getupvalue(L, fn, 1)) {
        lua_rawgeti(L, LUA_REGISTRYINDEX, LUA_RIDX_GLOBALS);
        bool globals = lua_rawequal(L, -1, -2);
        lua_pop(L, 2);
        if (!globals) return NULL;
    }
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
    int top = lua_gettop(L);
    if (lua_toboolean(L, X_PATTERNS) || strmap_get(&c->cat_names, d, NULL)) {
        lua_pushstring(L, d);
        if (!flow_push_known_entry(L, X_CAT_EXACT, X_CAT_MEMO, -1, lua_toboolean(L, X_PATTERNS))) return false;
    }
    int e = lua_gettop(L);
    if (e > top && lua_istable(L, e)) {
        if (!(type = flow_field_string(L, e, "type"))) return false;
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
    lua_settop(L, top);
    return true;
}

/* Bytewise, as core.sort_bytes sorts the parts for Run:static_parts. */
static int compare_spans(const void *a, const void *b)
{
    const struct span *x = a, *y = b;
    return bytes_compare(x->s, x->len, y->s, y->len);
}

/* Input d's part, as incremental.lua's input_part makes it, added to
 * c->part: "<" d \0 type, then \0v when versioned, for a dataset the catalog
 * declares (by name or by a pattern); nothing for a memory value or a
 * parameter (the graph's DAG_NO_DATASET).  *added says which; false when
 * only cat:entry can tell. */
static bool add_input_part(lua_State *L, struct checker *c, const struct dag_io *in, bool *added)
{
    *added = false;
    bool patterns = lua_toboolean(L, X_PATTERNS);
    const char *d = in->dataset;
    if (in->di == DAG_NO_DATASET || (!patterns && !strmap_get(&c->cat_names, d, NULL))) return true;
    int top = lua_gettop(L);
    lua_pushstring(L, d);
    if (!flow_push_known_entry(L, X_CAT_EXACT, X_CAT_MEMO, -1, patterns)) return false;
    int e = lua_gettop(L);
    if (lua_istable(L, e) && flow_field_bool(L, e, "declared")) {
        const char *type = flow_field_string(L, e, "type");
        if (!type) return false;
        sb_addc(&c->part, '<');
        sb_add(&c->part, d, strlen(d) + 1);
        sb_adds(&c->part, type);
        if (flow_field_bool(L, e, "versioned")) sb_add(&c->part, "\0v", 2);
        *added = true;
    }
    lua_settop(L, top);
    return true;
}

/* The spans [from, to) sorted by their bytes, added to c->joined each after
 * a "\n" but the first when `first`; a span equal to the one before it
 * once. */
static void join_sorted(struct checker *c, size_t from, size_t to, bool first)
{
    for (size_t k = from; k < to; k++) c->spans[k].s = c->part.buf + c->spans[k].at;
    qsort(c->spans + from, to - from, sizeof *c->spans, compare_spans);
    for (size_t k = from; k < to; k++) {
        if (k > from && compare_spans(&c->spans[k], &c->spans[k - 1]) == 0) continue;
        if (!(first && k == from)) sb_addc(&c->joined, '\n');
        sb_add(&c->joined, c->spans[k].s, c->spans[k].len);
    }
}

/* The outputs' part (Run:static_parts's outputs_part): the one output's
 * part, or each output's sorted and joined with "\n" ("" for none); then,
 * after a "\n" each, the sorted parts of its declared inputs (their types:
 * what the step is handed depends on them as much as on the content).
 * false as add_output_part. */
static bool outputs_part(lua_State *L, struct checker *c, const struct dag_step *step, struct fp_str *out)
{
    sb_truncate(&c->part, 0);
    size_t n = step->n_outputs + step->n_inputs;
    if (n > c->cap_spans) {
        c->cap_spans = 2 * n;
        c->spans = xrealloc(c->spans, c->cap_spans * sizeof *c->spans);
    }
    for (size_t k = 0; k < step->n_outputs; k++) {
        size_t at = c->part.len;
        if (!add_output_part(L, c, step->outputs[k].dataset)) return false;
        c->spans[k] = (struct span){ at, c->part.len - at, NULL };
    }
    size_t n_in = step->n_outputs;
    for (size_t k = 0; k < step->n_inputs; k++) {
        size_t at = c->part.len;
        bool added;
        if (!add_input_part(L, c, &step->inputs[k], &added)) return false;
        if (added) c->spans[n_in++] = (struct span){ at, c->part.len - at, NULL };
    }
    if (step->n_outputs < 2 && n_in == step->n_outputs) {
        *out = (struct fp_str){ c->part.len ? c->part.buf : "", c->part.len };
        return true;
    }
    sb_truncate(&c->joined, 0);             /* (not empty below: two outputs or an input's part) */
    if (step->n_outputs == 1) sb_add(&c->joined, c->part.buf, c->spans[0].len);
    else join_sorted(c, 0, step->n_outputs, true);
    join_sorted(c, step->n_outputs, n_in, false);
    *out = (struct fp_str){ c->joined.buf, c->joined.len };
    return true;
}

/* The code memo's {code, names} entry at the top of the stack: its code. */
static const char *entry_code(lua_State *L, size_t *len)
{
    if (lua_rawgeti(L, -1, 1) != LUA_TSTRING) return NULL;
    const char *code = lua_tolstring(L, -1, len);
    lua_pop(L, 1);                                   /* held by the memo's entry, left on the stack */
    return code;
}

/* A command's code and project file names, as fingerprint.command_code
 * memoised them by the command's text (a command with a cwd or env is never
 * memoised): pushes the memo's {code, names} entry and returns its code, or
 * NULL.  The text key is built in c->part, once per Command (X_BY_COMMAND
 * keeps the entry by the Command itself: node{} gives the steps of one
 * command line one Command). */
static const char *known_command_code(lua_State *L, struct checker *c, int cmd, size_t *len)
{
    lua_pushvalue(L, cmd);
    if (lua_rawget(L, X_BY_COMMAND) == LUA_TTABLE) return entry_code(L, len);
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
    const char *code = entry_code(L, len);
    if (code) {
        lua_pushvalue(L, cmd);
        lua_pushvalue(L, -2);
        lua_rawset(L, X_BY_COMMAND);
    }
    return code;
}

/* The ${params.} keys each of a command's template strings names
 * (memo.refs, by string; `templates` is the argv list, or the shell line
 * itself, or 0 for a function step), as the step reads them after
 * namespacing (n.cmd_params), with the parameters read as inputs: their
 * hashes into c->params, each key once.  Returns how many, or -1 when a
 * string's keys or a key's hash is not in the memos yet. */
static long known_params(lua_State *L, struct checker *c, const struct dag_step *step, int n, int templates)
{
    size_t np = 0;
    /* (the renames are of a command's template references: a Lua step has
     * none, and looking them up was 546 of the 4,200 instructions of
     * describing one) */
    int renames = templates && flow_node_push_extra(L, n, "cmd_params") == LUA_TTABLE ? lua_gettop(L) : 0;
    bool line = templates && lua_type(L, templates) == LUA_TSTRING;
    size_t n_templates = !templates ? 0 : line ? 1 : (size_t)lua_rawlen(L, templates);
    for (size_t t = 0; t < n_templates + step->n_inputs; t++) {
        const char *key = NULL;
        size_t keys = 1;
        int refs = 0;
        if (t < n_templates) {
            if (line) lua_pushvalue(L, templates);
            else lua_rawgeti(L, templates, (lua_Integer)t + 1);
            if (lua_rawget(L, X_REFS) != LUA_TTABLE) return -1;
            refs = lua_gettop(L);
            keys = (size_t)lua_rawlen(L, refs);
        } else {
            const struct dag_io *in = &step->inputs[t - n_templates];
            if (in->di != DAG_NO_DATASET) continue;          /* (dag_finalize's mark of a parameter) */
            const char *d = in->dataset;
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
                twice = c->params[j].key.len == ks.len && memcmp(c->params[j].key.s, key, ks.len) == 0;
            if (twice) continue;
            lua_pushstring(L, key);
            if (lua_rawget(L, X_PARAMS) != LUA_TSTRING) return -1;
            ARRAY_GROW(c->params, np, c->cap_params);
            c->params[np++] = (struct fp_kv){ ks, { lua_tostring(L, -1), lua_rawlen(L, -1) } };   /* held by the memo */
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
    bool command = step->kind == STEP_COMMAND;
    if (lua_type(L, X_SWEEP) == LUA_TSTRING && strcmp(step->name, lua_tostring(L, X_SWEEP)) == 0) return -1;
    struct utd_step spec = { 0 };
    int templates = 0, names = 0;
    if (command) {
        if (flow_node_push_body(L, n) != LUA_TTABLE) return -1;
        int cmd = lua_gettop(L);
        if (!(spec.code.s = known_command_code(L, c, cmd, &spec.code.len))) return -1;
        int entry = lua_gettop(L);
        int t = lua_rawgeti(L, entry, 2);
        if (t == LUA_TTABLE) names = lua_gettop(L);
        else if (t != LUA_TNIL) return -1;
        /* command.template_strings: argv (no env here), or the shell line */
        if (lua_getfield(L, cmd, "argv") != LUA_TTABLE) {
            lua_pop(L, 1);
            if (!field_string(L, cmd, "shell")) return -1;
        }
        templates = lua_gettop(L);
    } else {
        if (flow_node_push_body(L, n) != LUA_TFUNCTION) return -1;
        if (!(spec.code.s = known_fn_hash(L, lua_gettop(L), &spec.code.len))) return -1;
    }
    long np = known_params(L, c, step, n, templates);
    if (np < 0) return -1;
    size_t nf = names ? (size_t)lua_rawlen(L, names) : 0;
    struct arrays a = flow_uptodate_arrays(c, step, 0, nf);
    for (size_t k = 0; k < nf; k++) {
        if (lua_rawgeti(L, names, (lua_Integer)k + 1) != LUA_TSTRING) return -1;
        a.files[k] = lua_tostring(L, -1);               /* held by the memo */
        lua_pop(L, 1);
    }
    if (!outputs_part(L, c, step, &spec.outputs)) return -1;
    spec.params = c->params;
    spec.n_params = (size_t)np;
    spec.files = a.files;
    spec.n_files = nf;
    return flow_uptodate_describe_step(L, c, i, &spec, &a) ? 1 : 0;
}

/* c->cat_names: the string keys of ctx.cat_exact, copied (a fallback runs
 * Lua between two steps). */
static void list_catalog_names(lua_State *L, struct checker *c)
{
    strmap_free(&c->cat_names);
    lua_pushnil(L);
    while (lua_next(L, X_CAT_EXACT)) {
        lua_pop(L, 1);
        if (lua_type(L, -1) == LUA_TSTRING) strmap_put(&c->cat_names, lua_tostring(L, -1), 0);
    }
}

/* How many steps ahead describe_steps asks for a step's record
 * (utd_prefetch_record): the memory answers while the steps in between are
 * described (the lookups were 1.4 % of a no-op rerun of 100,000 Lua steps'
 * samples, 0.4 % so). */
#define RECORD_AHEAD 4

/* Describes every selected step (chk:describe's loop), with the stack as
 * chk:describe left it: the checker, ctx and ctx's fields at X_*. */
static int describe_steps(lua_State *L)
{
    struct checker *c = flow_uptodate_checker(L, 1);
    luaL_checkstack(L, 48, "the up-to-date check");    /* describe_known pushes about 25 at most */
    list_catalog_names(L, c);
    bool described = false;
    lua_Integer here = 0;
    for (size_t k = 0; k < c->dag->n_steps; k++) {
        size_t i = c->dag->order[k];
        if (k + RECORD_AHEAD < c->dag->n_steps) {
            size_t ahead = c->dag->order[k + RECORD_AHEAD];
            utd_prefetch_record(c->u, ahead, c->dag->steps[ahead].name);
        }
        if (c->selected && !c->selected[i]) continue;
        int r = describe_known(L, c, i);
        lua_settop(L, X_TOP);
        if (r < 0) {
            lua_pushvalue(L, X_FALLBACK);
            lua_pushinteger(L, (lua_Integer)i + 1);
            lua_call(L, 1, 1);
            r = lua_toboolean(L, -1) ? 2 : 0;
            lua_settop(L, X_TOP);
        }
        described = described || r > 0;
        here += r == 1;
        if (r > 0) utd_decide_early(c->u, i);
    }
    lua_pushboolean(L, described);
    lua_pushinteger(L, here);
    return 2;
}

/* chk:describe(ctx) -> whether any step was described, and how many were
 * described here (without ctx.fallback).  Describes every
 * selected step, producers first: those describe_known can, in C; the
 * others through ctx.fallback(i) -> described (which names a step it cannot
 * describe).  A step whose producers in the run are all fresh by then is
 * decided at once (utd_decide_early): the check's steps are the run's, and
 * the scheduler asks about each (with its keepers marked before this).
 * ctx = {nodes =, fn_memo = hasher.memo, protos = hasher.protos, params =
 * {key = hash}, code_memo =, refs =, cat_memo =, cat_exact =, patterns =
 * whether the catalog has patterns, dists =, remote =, sweep_step =
 * name|nil, fallback =}.
 *
 * Meanwhile two threads help: one stats the recorded output files ahead
 * (the one the preload started, taken over with the store, or one started
 * here; none for a selection of the steps, which would stat them all:
 * stat_prefetch.h), the other decides the described steps
 * (utd_early_begin).  They read the state store, which the run changes next
 * (a step's record), so they stop when the description ends, by an error
 * too: the loop runs protected, and an error is raised again once they have
 * stopped, whoever catches it. */
int flow_uptodate_describe(lua_State *L)
{
    struct checker *c = flow_uptodate_checker(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    lua_settop(L, 2);
    luaL_checkstack(L, X_TOP + 2, "the up-to-date check");
    for (int k = X_NODES; k <= X_PATTERNS; k++) {
        int t = lua_getfield(L, 2, ctx_fields[k - X_NODES]);
        if (k < X_FALLBACK) luaL_argexpected(L, t == LUA_TTABLE, 2, ctx_fields[k - X_NODES]);
        if (k == X_FALLBACK) luaL_argexpected(L, t == LUA_TFUNCTION, 2, "fallback");
    }
    lua_newtable(L);                                 /* X_BY_COMMAND */
    lua_pushcfunction(L, describe_steps);
    for (int k = 1; k <= X_TOP; k++) lua_pushvalue(L, k);
    if (c->selected) utd_prefetch_stop(c->u);
    else utd_prefetch_outputs(c->u);
    utd_early_begin(c->u);
    int rc = lua_pcall(L, X_TOP, 2, 0);
    utd_early_end(c->u);
    utd_prefetch_stop(c->u);
    if (rc != LUA_OK) return lua_error(L);
    return 2;
}
