/* l_sched.c — module flow.sched: runs a flow.dag with the C scheduler, each
 * step on its own Lua coroutine.  The coroutine's extra space (LUA_EXTRASPACE)
 * points at its step, which is how a waiting C function knows it may yield. */
#include "flowlua.h"
#include "proc.h"
#include "sched.h"
#include "loop.h"
#include "ui.h"
#include "util.h"

#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>

struct step_run {
    struct run *run;
    size_t index;
    lua_State *co;
    int co_ref;                    /* anchors the coroutine in the registry */
    struct proc **procs;           /* processes it is waiting on */
    size_t n_procs, cap_procs;
    unsigned long sleep_timer;     /* flow.proc.sleep in progress, or 0 */
    int n_waits;                   /* other waits in progress (flow_step_track_wait) */
    double deadline;               /* monotonic; 0 = no timeout */
};

struct run {
    lua_State *L;
    struct sched *sched;
    int step_fn_ref;               /* the stdlib's run_step(i) */
    int check_fn_ref;              /* its up_to_date(i), or LUA_NOREF */
    struct step_run *steps;
    /* Finished coroutines, ready for the next step: a new thread per step
     * would be most of the cost of 100,000 tiny Lua steps. */
    struct { lua_State *co; int ref; } *idle;
    size_t n_idle, cap_idle;
};

static struct step_run *step_of(lua_State *co)
{
    return *(struct step_run **)lua_getextraspace(co);
}

int flow_step_can_yield(lua_State *co)
{
    return step_of(co) != NULL && lua_isyieldable(co);
}

void flow_step_track_proc(lua_State *co, struct proc *p, int add)
{
    struct step_run *st = step_of(co);
    if (!st) return;
    if (add) {
        ARRAY_GROW(st->procs, st->n_procs, st->cap_procs);
        st->procs[st->n_procs++] = p;
        return;
    }
    for (size_t i = 0; i < st->n_procs; i++)
        if (st->procs[i] == p) { st->procs[i] = st->procs[--st->n_procs]; return; }
}

void flow_step_track_wait(lua_State *co, int add)
{
    struct step_run *st = step_of(co);
    if (st) st->n_waits += add ? 1 : -1;
}

static void wake_up(void *arg)
{
    struct step_run *st = arg;
    st->sleep_timer = 0;
    flow_step_resume(st->co, 0);
}

void flow_step_sleep(lua_State *co, double seconds)
{
    struct step_run *st = step_of(co);
    st->sleep_timer = loop_add_timer(flow_state_loop(co), seconds, wake_up, st);
}

double flow_step_deadline(lua_State *co)
{
    struct step_run *st = step_of(co);
    return st ? st->deadline : 0;
}

/* sched.set_deadline(seconds | nil): the calling step must finish within seconds. */
static int l_set_deadline(lua_State *L)
{
    struct step_run *st = step_of(L);
    if (!st) return luaL_error(L, "set_deadline outside a step");
    st->deadline = lua_isnoneornil(L, 1) ? 0 : monotonic_seconds() + luaL_checknumber(L, 1);
    return 0;
}

/* A coroutine that returned normally has an empty stack and can run the
 * next step; one that failed is dropped. */
static void finish(struct step_run *st, bool ok)
{
    struct run *run = st->run;
    *(struct step_run **)lua_getextraspace(st->co) = NULL;
    if (lua_status(st->co) == LUA_OK) {
        lua_settop(st->co, 0);
        ARRAY_GROW(run->idle, run->n_idle, run->cap_idle);
        run->idle[run->n_idle].co = st->co;
        run->idle[run->n_idle++].ref = st->co_ref;
    } else {
        luaL_unref(run->L, LUA_REGISTRYINDEX, st->co_ref);
    }
    st->co = NULL;
    free(st->procs);
    st->procs = NULL;
    st->n_procs = st->cap_procs = 0;
    sched_step_done(run->sched, st->index, ok);
}

/* Resume a step's coroutine; when it returns, the step is over. run_step
 * reports its own errors and returns true or false; an error reaching here is
 * the engine's bug, reported as such. */
static void resume(struct step_run *st, int nargs)
{
    int nres = 0;
    int status = lua_resume(st->co, st->run->L, nargs, &nres);
    if (status == LUA_YIELD) {
        if (st->n_procs == 0 && st->sleep_timer == 0 && st->n_waits == 0) {
            lua_pop(st->co, nres);
            ui_error("step '%s' yielded without waiting for anything (a coroutine.yield() outside "
                     "a coroutine of its own?)", sched_dag(st->run->sched)->steps[st->index].name);
            finish(st, false);
        }
        return;
    }
    bool ok = status == LUA_OK && nres > 0 && lua_toboolean(st->co, -nres);
    if (status != LUA_OK) {
        ui_error("internal error in step '%s': %s", sched_dag(st->run->sched)->steps[st->index].name,
                 lua_tostring(st->co, -1));
    }
    finish(st, ok);
}

void flow_step_resume(lua_State *co, int nargs)
{
    struct step_run *st = step_of(co);
    if (st) resume(st, nargs);
}

static int exec_start(void *ctx, struct sched *s, size_t i)
{
    struct run *run = ctx;
    struct step_run *st = &run->steps[i];
    if (run->n_idle) {
        run->n_idle--;
        st->co = run->idle[run->n_idle].co;
        st->co_ref = run->idle[run->n_idle].ref;
    } else {
        st->co = lua_newthread(run->L);
        st->co_ref = luaL_ref(run->L, LUA_REGISTRYINDEX);
    }
    *(struct step_run **)lua_getextraspace(st->co) = st;
    lua_rawgeti(st->co, LUA_REGISTRYINDEX, run->step_fn_ref);
    lua_pushinteger(st->co, (lua_Integer)i + 1);
    resume(st, 1);
    (void)s;
    return 0;
}

static void exec_stop(void *ctx, struct sched *s, size_t i, int sig)
{
    struct run *run = ctx;
    (void)s;
    struct step_run *st = &run->steps[i];
    for (size_t k = 0; k < st->n_procs; k++) proc_kill(st->procs[k], sig);
    if (st->sleep_timer) {                    /* a retry back-off: end it now */
        loop_cancel_timer(flow_state_loop(run->L), st->sleep_timer);
        st->sleep_timer = 0;
        resume(st, 0);
    }
}

/* Ask the stdlib whether step i's outputs are up to date.  It runs on the
 * main state and must not wait; an error there is the engine's bug, and the
 * step then simply runs. */
static bool exec_up_to_date(void *ctx, struct sched *s, size_t i)
{
    struct run *run = ctx;
    (void)s;
    if (run->check_fn_ref == LUA_NOREF) return false;
    lua_State *L = run->L;
    lua_rawgeti(L, LUA_REGISTRYINDEX, run->check_fn_ref);
    lua_pushinteger(L, (lua_Integer)i + 1);
    if (flow_pcall(L, 1, 1) != LUA_OK) {
        ui_error("internal error checking step '%s': %s", sched_dag(run->sched)->steps[i].name,
                 lua_tostring(L, -1));
        lua_pop(L, 1);
        return false;
    }
    bool skip = lua_toboolean(L, -1);
    lua_pop(L, 1);
    return skip;
}

static bool *read_selected(lua_State *L, int opts, size_t n)
{
    lua_getfield(L, opts, "selected");
    if (!lua_istable(L, -1)) { lua_pop(L, 1); return NULL; }
    bool *sel = xcalloc(n + 1, sizeof *sel);
    for (size_t i = 0; i < n; i++) {
        lua_rawgeti(L, -1, (lua_Integer)i + 1);
        sel[i] = lua_toboolean(L, -1);
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    return sel;
}

/* run(dag, {jobs=, keep_going=, selected=}, run_step [, up_to_date]) -> code, {state, ...}, {elapsed, ...} */
static int l_run(lua_State *L)
{
    struct dag *dag = flow_check_dag(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    luaL_checktype(L, 3, LUA_TFUNCTION);
    lua_getfield(L, 2, "jobs");
    int jobs = (int)luaL_optinteger(L, -1, 1);
    lua_getfield(L, 2, "keep_going");
    struct sched_options opt = { jobs, lua_toboolean(L, -1), NULL };
    lua_pop(L, 2);
    opt.selected = read_selected(L, 2, dag->n_steps);

    struct run run = { .L = L, .step_fn_ref = LUA_NOREF, .check_fn_ref = LUA_NOREF,
                       .steps = xcalloc(dag->n_steps + 1, sizeof(struct step_run)) };
    for (size_t i = 0; i < dag->n_steps; i++)
        run.steps[i] = (struct step_run){ .run = &run, .index = i, .co_ref = LUA_NOREF };
    lua_pushvalue(L, 3);
    run.step_fn_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    if (lua_isfunction(L, 4)) {
        lua_pushvalue(L, 4);
        run.check_fn_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    }
    struct sched_executor ex = { &run, exec_start, exec_stop, exec_up_to_date };
    struct sched_observer obs = ui_sched_observer();
    run.sched = sched_new(dag, flow_state_loop(L), &opt, &ex, &obs);
    ui_run_begin(dag, opt.selected, flow_state_loop(L));
    int code = sched_run(run.sched);
    ui_run_end(run.sched);

    lua_pushinteger(L, code);
    lua_createtable(L, (int)dag->n_steps, 0);
    lua_createtable(L, (int)dag->n_steps, 0);
    for (size_t i = 0; i < dag->n_steps; i++) {
        lua_pushstring(L, step_state_name(sched_state(run.sched, i)));
        lua_rawseti(L, -3, (lua_Integer)i + 1);
        lua_pushnumber(L, sched_elapsed(run.sched, i));
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    luaL_unref(L, LUA_REGISTRYINDEX, run.step_fn_ref);
    luaL_unref(L, LUA_REGISTRYINDEX, run.check_fn_ref);
    for (size_t k = 0; k < run.n_idle; k++) luaL_unref(L, LUA_REGISTRYINDEX, run.idle[k].ref);
    free(run.idle);
    sched_free(run.sched);
    free(run.steps);
    free((void *)opt.selected);
    return 3;
}

static const luaL_Reg sched_funcs[] = {
    { "run", l_run },
    { "set_deadline", l_set_deadline },
    { NULL, NULL }
};

int luaopen_flow_sched(lua_State *L)
{
    luaL_newlib(L, sched_funcs);
    return 1;
}
