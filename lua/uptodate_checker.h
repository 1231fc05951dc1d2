/* uptodate_checker.h — private to lua/l_uptodate.c and lua/uptodate_describe.c:
 * the userdata of flow.cache.uptodate's check, and describing a step to it. */
#ifndef FLOW_UPTODATE_CHECKER_H
#define FLOW_UPTODATE_CHECKER_H

#include "dag.h"
#include "strmap.h"
#include "flowlua.h"
#include "uptodate.h"
#include "util.h"

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
    struct fp_kv *params;                        /* chk:describe's parameters of a step */
    size_t cap_params;
    /* chk:describe's copy of the names the catalog lists (ctx.cat_exact's
     * keys): a dataset not among them, with no patterns, has no entry, and
     * is found so without making its name a Lua string */
    struct strmap cat_names;
};

/* The check at idx, raising if it is not one or is closed. */
struct checker *flow_uptodate_checker(lua_State *L, int idx);

/* A step's description's arrays, in the checker's scratch (a raise while
 * they are filled leaks nothing): np parameters and nf files the caller
 * fills, the graph step's inputs and outputs flow_uptodate_describe_step
 * fills. */
struct arrays { struct fp_kv *params; const char **files; struct utd_input *in; const char **outs; };
struct arrays flow_uptodate_arrays(struct checker *c, const struct dag_step *step, size_t np, size_t nf);

/* Describes step i: spec's code, dist, outputs, params and files given; its
 * name, inputs and outputs the graph's.  false (and only named, so that its
 * consumers may use its record once it is fresh): an input neither made by
 * a selected step nor a value of the run with a hash or a path — the
 * stdlib's check says what is wrong.  The checker is argument 1. */
bool flow_uptodate_describe_step(lua_State *L, struct checker *c, size_t i, struct utd_step *spec, struct arrays *a);

/* chk:describe(ctx) (lua/uptodate_describe.c). */
int flow_uptodate_describe(lua_State *L);

#endif
