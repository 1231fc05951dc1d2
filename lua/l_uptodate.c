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
 *                        and outputs are the graph's (named only, when not)
 *   chk:describe(ctx)    -> whether any step was described, how many in C:
 *                        every selected step, those the stdlib's tables say
 *                        enough of in C, the others through ctx.fallback(i)
 *                        (lua/uptodate_describe.c)
 *   chk:name(i)          names step i, a producer the check does not describe
 *   chk:fresh(i, fp)     step i's record in the store, with fingerprint fp, is this run's
 *   chk:passed(i)        -> whether the check found step i up to date
 *   chk:no_record(i)     -> whether the check found step i without a record (it ran)
 *   chk:stats()          -> {passed =, undecided =, no_record =} */
#include "uptodate_checker.h"

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

struct checker *flow_uptodate_checker(lua_State *L, int idx)
{
    struct checker *c = luaL_checkudata(L, idx, UPTODATE_CLASS);
    if (!c->u) luaL_error(L, "the up-to-date check is closed");
    utd_claim(c->u);                /* (a run's recorder may be using it: uptodate.h) */
    return c;
}

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
    utd_prefetch_adopt(c->u, flow_state_store_take_ahead(L, 3));     /* (the preload's: chk:describe's then) */
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
static bool input_source(lua_State *L, const struct checker *c, const struct dag_io *io, struct utd_input *in)
{
    const char *d = io->dataset;
    long p = c->dag->datasets[io->di].producer;
    *in = (struct utd_input){ .dataset = { d, strlen(d) }, .producer = UTD_NO_PRODUCER };
    if (p >= 0 && (!c->selected || c->selected[p])) {
        in->producer = (size_t)p;
        return true;
    }
    lua_getiuservalue(L, 1, UV_VALUES);
    if (flow_values_get(L, -1, c->dag, io->di, d) == LUA_TTABLE) {
        in->hash = raw_string_field(L, "hash");
        in->path = in->hash ? NULL : raw_string_field(L, "path");
    }
    lua_pop(L, 2);
    return in->hash || in->path;
}

struct arrays flow_uptodate_arrays(struct checker *c, const struct dag_step *step, size_t np, size_t nf)
{
    struct arrays a;
    a.params = scratch(c, np * sizeof *a.params + step->n_inputs * sizeof *a.in +
                          (nf + step->n_outputs) * sizeof(char *) + 1);
    a.in = (struct utd_input *)(a.params + np);
    a.files = (const char **)(a.in + step->n_inputs);
    a.outs = a.files + nf;
    return a;
}

bool flow_uptodate_describe_step(lua_State *L, struct checker *c, size_t i, struct utd_step *spec, struct arrays *a)
{
    const struct dag_step *step = &c->dag->steps[i];
    spec->name = step->name;
    spec->n_inputs = 0;
    for (size_t k = 0; k < step->n_inputs; k++) {
        if (step->inputs[k].di == DAG_NO_DATASET) continue;   /* a parameter: among the params */
        if (!input_source(L, c, &step->inputs[k], &a->in[spec->n_inputs++])) {
            utd_name_step(c->u, i, step->name);
            return false;
        }
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
 * undescribed, only named. */
static int l_set(lua_State *L)
{
    struct checker *c = flow_uptodate_checker(L, 1);
    size_t i = graph_step(L, c);
    struct utd_step spec = { .code = str_at(L, 3), .outputs = str_at(L, 5) };
    if (!lua_isnil(L, 4)) spec.dist = str_at(L, 4);
    luaL_checktype(L, 6, LUA_TTABLE);
    luaL_checktype(L, 7, LUA_TTABLE);
    size_t np = 0, nf = (size_t)lua_rawlen(L, 7);
    for (lua_pushnil(L); lua_next(L, 6); lua_pop(L, 1)) np++;
    struct arrays a = flow_uptodate_arrays(c, &c->dag->steps[i], np, nf);
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
    lua_pushboolean(L, flow_uptodate_describe_step(L, c, i, &spec, &a));
    return 1;
}

/* chk:name(i): step i, undescribed, known by name (a producer whose record
 * its consumers may still use once it is fresh). */
static int l_name(lua_State *L)
{
    struct checker *c = flow_uptodate_checker(L, 1);
    size_t i = graph_step(L, c);
    utd_name_step(c->u, i, c->dag->steps[i].name);
    return 0;
}

/* chk:keeps(i): step i keeps its values between runs (utd_keeps_values);
 * after chk:describe. */
static int l_keeps(lua_State *L)
{
    struct checker *c = flow_uptodate_checker(L, 1);
    utd_keeps_values(c->u, graph_step(L, c));
    return 0;
}

static int l_fresh(lua_State *L)
{
    utd_mark_fresh(flow_uptodate_checker(L, 1)->u, check_step(L, 2), luaL_checkstring(L, 3));
    return 0;
}

static int l_passed(lua_State *L)
{
    lua_pushboolean(L, utd_passed(flow_uptodate_checker(L, 1)->u, check_step(L, 2)));
    return 1;
}

/* chk:all_up_to_date() -> whether every step of the check (every selected
 * one) was decided up to date as chk:describe went: a run in which no step
 * will run. */
static int l_all_up_to_date(lua_State *L)
{
    struct checker *c = flow_uptodate_checker(L, 1);
    bool all = true;
    for (size_t i = 0; i < c->dag->n_steps && all; i++)
        if (!c->selected || c->selected[i]) all = utd_early_up_to_date(c->u, i);
    lua_pushboolean(L, all);
    return 1;
}

static int l_no_record(lua_State *L)
{
    lua_pushboolean(L, utd_no_record(flow_uptodate_checker(L, 1)->u, check_step(L, 2)));
    return 1;
}

static int l_stats(lua_State *L)
{
    struct utd_stats st = utd_stats(flow_uptodate_checker(L, 1)->u);
    lua_createtable(L, 0, 4);
    lua_pushinteger(L, (lua_Integer)st.passed);
    lua_setfield(L, -2, "passed");
    lua_pushinteger(L, (lua_Integer)st.undecided);
    lua_setfield(L, -2, "undecided");
    lua_pushinteger(L, (lua_Integer)st.no_record);
    lua_setfield(L, -2, "no_record");
    lua_pushinteger(L, (lua_Integer)st.deferred);
    lua_setfield(L, -2, "deferred");
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
    free(c->params);
    strmap_free(&c->cat_names);
    c->spans = NULL;
    c->params = NULL;
    c->u = NULL;
    c->scratch = NULL;
    return 0;
}

struct utd *flow_check_uptodate(lua_State *L, int idx) { return flow_uptodate_checker(L, idx)->u; }

static const luaL_Reg uptodate_methods[] = {
    { "set", l_set },
    { "describe", flow_uptodate_describe },
    { "name", l_name },
    { "keeps", l_keeps },
    { "fresh", l_fresh },
    { "passed", l_passed },
    { "no_record", l_no_record },
    { "all_up_to_date", l_all_up_to_date },
    { "stats", l_stats },
    { NULL, NULL }
};

void flow_open_uptodate(lua_State *L)
{
    flow_new_class(L, UPTODATE_CLASS, uptodate_methods, l_gc);
    lua_pushcfunction(L, l_uptodate);
    lua_setfield(L, -2, "uptodate");
}
