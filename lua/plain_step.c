/* plain_step.c — the attempt of a plain Lua function step, made in C: the
 * common step of a pipeline of Lua functions (memory values in and out, run
 * here, no metrics, no ranks) in a run that claims no paths.  A run of
 * 100,000 such steps spent some 13 µs a step in the stdlib's Lua around the
 * step's own call (Run:attempt_body, Run:attempt, Run:run_function, its
 * record, its namer, its inputs let go: a dozen calls and reads of the
 * node's fields a step); here the attempt is one C function on the step's
 * coroutine, and Lua is entered only for what is rare.
 *
 * What makes a step plain is decided once per run, here (plain_steps), from
 * the steps' records and the run's facts the stdlib hands over; whether a
 * step keeps its values between runs (Run:keeps_values, whose rule is
 * keeps_values below: the one spelling of it).  An attempt of a plain step
 * (plain_attempt's closure, body.plain.attempt of flow.sched) runs
 *   sched.guard(on_step_error, values_c.call, values, node, cat, inline_max, namer, i)
 * -- the stdlib's own guard and body, so that cancellation, timeouts and
 * errors are caught as for any step -- and when that recorded the step's
 * outputs (the JSON text), lets its inputs go (graph:count_down) and returns
 * true, that text.  Anything else goes to the stdlib's tail(i, k, ok, ...)
 * (runner.lua, Run:plain_tail), which does what Run:attempt_body would from
 * there: the function not called (an input to restore, an output the
 * catalog keeps: the whole attempt the stdlib's way), results values_c.call
 * left to the stdlib, an error, or a step that printed (its log to close).
 * FLOW_DEBUG_LUA_BODIES=1 turns this off with values_c.call's own path;
 * t_outputs.sh compares the two. */
#include "flowlua.h"
#include "dag.h"
#include "step_decl.h"

#include <lauxlib.h>
#include <stdbool.h>

/* A step's byte in plain_steps' string. */
enum { NOT_PLAIN = 0, PLAIN_KEPT = 1, PLAIN_NAMED = 2 };

/* Whether a step keeps its memory values between runs whatever their size
 * (flow.values, Run:keeps_values): called again for a reader, it would run
 * in the reader's turn, not in its pool, nor under its own timeout and
 * retries, and its metrics and ranks would not be its own.  `dist`: it runs
 * its ranks here. */
static bool keeps_values(const struct step_decl *r, bool dist)
{
    return (r->flags & (STEP_METRICS | STEP_TIMEOUT)) || r->pool != 0 || r->retries > 0 || dist;
}

/* keeps(n, dist) -> whether node n keeps its values (see above). */
int flow_l_keeps(lua_State *L)
{
    struct step_decls *d;
    const struct step_decl *r = flow_node_decl(L, 1, &d, NULL);
    luaL_argcheck(L, r != NULL, 1, "a node");
    lua_pushboolean(L, keeps_values(r, lua_toboolean(L, 2)));
    return 1;
}

/* plain_steps(graph, nodes, remote, may_keep) -> a string of a byte a step:
 * 0 for a step the stdlib attempts, else a plain step's, 2 when its values
 * that are too large to keep are named by namer() (Run:unkept_namer: its
 * outputs all read by other steps, and it may not keep them), 1 when every
 * value is kept.  remote: {[i] = truthy} for the steps on Azure ML;
 * may_keep: the same for the plan's keepers. */
int flow_l_plain_steps(lua_State *L)
{
    struct dag *dag = flow_check_dag(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    luaL_checktype(L, 3, LUA_TTABLE);
    luaL_checktype(L, 4, LUA_TTABLE);
    lua_settop(L, 4);
    char *out = lua_newuserdatauv(L, dag->n_steps + 1, 0);     /* 5: made here, then pushed as a string */
    for (size_t i = 0; i < dag->n_steps; i++) {
        lua_Integer k = (lua_Integer)i + 1;
        struct step_decls *d;
        lua_rawgeti(L, 2, k);
        const struct step_decl *r = flow_node_decl(L, -1, &d, NULL);
        lua_pop(L, 1);
        bool plain = r && r->kind == STEP_DECL_FUNC && !(r->flags & (STEP_METRICS | STEP_DIST)) &&
                     lua_rawgeti(L, 3, k) == LUA_TNIL;
        lua_settop(L, 5);
        if (!plain) {
            out[i] = NOT_PLAIN;
            continue;
        }
        bool keeps = lua_rawgeti(L, 4, k) != LUA_TNIL && lua_toboolean(L, -1) && keeps_values(r, false);
        lua_pop(L, 1);
        out[i] = !keeps && dag_outputs_all_read(dag, i) ? PLAIN_NAMED : PLAIN_KEPT;
    }
    lua_pushlstring(L, out, dag->n_steps);
    return 1;
}

/* The closure's upvalues: what plain_attempt was given, in its order, then
 * the count of the steps it finished itself. */
enum { U_GUARD = 1, U_HANDLER, U_CALL, U_VALUES, U_NODES, U_CAT, U_INLINE_MAX, U_NAMER, U_STEPS, U_TAIL,
       U_COUNT_DOWN, U_GRAPH, U_LEFT, U_LET_GO, U_PRINTED, N_GIVEN = U_PRINTED, U_DONE };
#define UP(u) lua_upvalueindex(u)

/* After the guarded call (stack: i, k, ok, ...): the common end here, the
 * rest the stdlib's. */
static int tail_done(lua_State *L, int status, lua_KContext ctx)
{
    (void)status;
    (void)ctx;
    return lua_gettop(L);
}

static int called(lua_State *L, int status, lua_KContext ctx)
{
    (void)status;
    (void)ctx;
    luaL_checkstack(L, 8, NULL);             /* (a call with LUA_MULTRET leaves no room above its results) */
    int top = lua_gettop(L);
    lua_Integer i = lua_tointeger(L, 1);
    if (top == 4 && lua_toboolean(L, 3) && lua_type(L, 4) == LUA_TSTRING &&
        lua_rawgeti(L, UP(U_PRINTED), i) == LUA_TNIL) {
        lua_pop(L, 1);
        if (lua_type(L, UP(U_LEFT)) == LUA_TFUNCTION) {  /* the counts, made when the first step ends */
            lua_pushvalue(L, UP(U_LEFT));
            lua_call(L, 0, 1);
            luaL_checktype(L, -1, LUA_TUSERDATA);
            lua_replace(L, UP(U_LEFT));
        }
        lua_pushvalue(L, UP(U_COUNT_DOWN));        /* its inputs' readers counted down (Run:release_inputs) */
        lua_pushvalue(L, UP(U_GRAPH));
        lua_pushinteger(L, i);
        lua_pushvalue(L, UP(U_LEFT));
        lua_pushvalue(L, UP(U_VALUES));
        lua_pushvalue(L, UP(U_LET_GO));
        lua_call(L, 5, 0);
        lua_pushinteger(L, lua_tointeger(L, UP(U_DONE)) + 1);
        lua_replace(L, UP(U_DONE));
        lua_pushboolean(L, 1);
        lua_pushvalue(L, 4);
        return 2;
    }
    lua_settop(L, top);
    flow_step_forget_outputs(L);             /* (the stdlib's text, if any, is not the body's) */
    lua_pushvalue(L, UP(U_TAIL));
    lua_insert(L, 1);
    lua_callk(L, top, LUA_MULTRET, 0, tail_done);
    return tail_done(L, LUA_OK, 0);
}

/* attempt(i, k) -> ok, outputs JSON | what tail returns */
static int attempt(lua_State *L)
{
    lua_Integer i = luaL_checkinteger(L, 1);
    lua_settop(L, 2);
    size_t n;
    const char *steps = lua_tolstring(L, UP(U_STEPS), &n);
    luaL_argcheck(L, i >= 1 && (size_t)i <= n && steps[i - 1] != NOT_PLAIN, 1, "a plain step");
    luaL_checkstack(L, 10, NULL);
    lua_pushvalue(L, UP(U_GUARD));
    lua_pushvalue(L, UP(U_HANDLER));
    lua_pushvalue(L, UP(U_CALL));
    lua_pushvalue(L, UP(U_VALUES));
    lua_rawgeti(L, UP(U_NODES), i);
    lua_pushvalue(L, UP(U_CAT));
    lua_pushvalue(L, UP(U_INLINE_MAX));
    if (steps[i - 1] == PLAIN_NAMED) lua_pushvalue(L, UP(U_NAMER));
    else lua_pushnil(L);
    lua_pushinteger(L, i);
    lua_callk(L, 8, LUA_MULTRET, 0, called);
    return called(L, LUA_OK, 0);
}

/* plain_attempt{guard =, handler =, call =, values =, nodes =, cat =,
 *               inline_max =, namer =, steps =, tail =, count_down =,
 *               graph =, left =, let_go =, printed =}
 *   -> attempt(i, k), the attempt of plain step i (see above); left: the
 *   counts graph:count_down takes, or a function returning them, called
 *   when the first step ends here; printed: {[i] = truthy} for a step whose
 *   print() opened its log, which the tail closes. */
int flow_l_plain_attempt(lua_State *L)
{
    static const char *const given[N_GIVEN] = { "guard", "handler", "call", "values", "nodes", "cat", "inline_max",
                                                "namer", "steps", "tail", "count_down", "graph", "left", "let_go",
                                                "printed" };
    luaL_checktype(L, 1, LUA_TTABLE);
    luaL_checkstack(L, N_GIVEN + 2, NULL);
    for (int u = 0; u < N_GIVEN; u++) {
        if (lua_getfield(L, 1, given[u]) == LUA_TNIL) return luaL_error(L, "plain_attempt: no %s", given[u]);
    }
    lua_pushinteger(L, 0);                         /* U_DONE */
    lua_pushcclosure(L, attempt, N_GIVEN + 1);
    return 1;
}

/* plain_done(attempt) -> how many plain steps it finished itself (the
 * stdlib's tail not entered): FLOW_DEBUG_UPTODATE's count. */
int flow_l_plain_done(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TFUNCTION);
    const char *name = lua_getupvalue(L, 1, U_DONE);
    luaL_argcheck(L, name && lua_tocfunction(L, 1) == attempt, 1, "a plain attempt");
    return 1;
}
