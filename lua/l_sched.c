/* l_sched.c — module flow.sched: runs a flow.dag with the C scheduler, each
 * step on its own Lua coroutine.  The coroutine's extra space (LUA_EXTRASPACE)
 * points at its step, which is how a waiting C function knows it may yield.
 *
 * Cancellation.  A step's own code (what sched.guard runs: the user's function
 * and the runner's handling of its values) is stopped by Ctrl-C/SIGTERM, by its
 * timeout and by os.exit.  Stopping raises an error the user's code cannot keep:
 * pcall, xpcall, coroutine.resume and coroutine.close hand it on instead of
 * returning it, the count hook raises it again at the very next instruction of
 * a thread that swallowed it some other way (a load() reader, a __close), and
 * sched.guard reports the cancellation whatever the code made of it. */
#include "flowlua.h"
#include "proc.h"
#include "sched.h"
#include "step_wait.h"
#include "loop.h"
#include "ui.h"
#include "util.h"

#include <lauxlib.h>
#include <lualib.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

/* More steps at once than this is a typo (-j 1e999), not a plan. */
#define MAX_JOBS 100000

/* Why a step's code must stop. */
enum cancel { CANCEL_NONE, CANCEL_INTERRUPT, CANCEL_TIMEOUT, CANCEL_EXIT };
static const char *const cancel_names[] = { "none", "interrupted", "timed out", "exit" };

struct step_run {
    struct run *run;
    size_t index;
    lua_State *co;
    int co_ref;                    /* anchors the coroutine in the registry */
    struct step_wait_list waits;   /* what it is waiting on: processes, timers, jobs */
    double deadline;               /* monotonic; 0 = no timeout */
    int guarded;                   /* sched.guard calls running the step's code */
    enum cancel cancel;            /* decided once, reported by the guard */
    lua_Integer exit_code;         /* os.exit's status, for CANCEL_EXIT */
    double next_look;              /* look_before_switch: next look at the signals */
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

/* The registry keeps the step being resumed: the hook and pcall run on any
 * thread, including coroutines the step's code made (their extra space is NULL). */
static const char current_key = 'C';
static const char cancelled_key = 'X';     /* the error value a cancellation raises */

static struct step_run *current_step(lua_State *L)
{
    lua_rawgetp(L, LUA_REGISTRYINDEX, &current_key);
    struct step_run *st = lua_touserdata(L, -1);
    lua_pop(L, 1);
    return st;
}

static void set_current_step(lua_State *L, struct step_run *st)
{
    if (st) lua_pushlightuserdata(L, st);
    else lua_pushnil(L);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &current_key);
}

/* Whether the step's code must stop: an interrupt arrived (counted by the loop
 * or still pending) or, with `deadline`, its timeout passed. */
static bool cancel_due(lua_State *L, struct step_run *st, bool deadline)
{
    if (st->cancel == CANCEL_NONE) {
        if (loop_interrupts(flow_state_loop(L)) > 0) st->cancel = CANCEL_INTERRUPT;
        else if (deadline && st->deadline > 0 && monotonic_seconds() > st->deadline) st->cancel = CANCEL_TIMEOUT;
    }
    return st->cancel != CANCEL_NONE;
}

/* Raise the cancellation; the thread's hook now fires at every instruction, so
 * whatever catches it without handing it on is left at once. */
static int raise_cancel(lua_State *L)
{
    lua_sethook(L, flow_count_hook, LUA_MASKCOUNT, 1);
    lua_rawgetp(L, LUA_REGISTRYINDEX, &cancelled_key);
    return lua_error(L);
}

static void reset_hook(lua_State *L)
{
    if (lua_gethookcount(L) != FLOW_HOOK_COUNT) lua_sethook(L, flow_count_hook, LUA_MASKCOUNT, FLOW_HOOK_COUNT);
}

/* SIGINT/SIGTERM/SIGHUP are blocked (the loop reads them from a signalfd), so Lua
 * code that computes without waiting would never notice Ctrl-C: every
 * FLOW_HOOK_COUNT instructions this looks.  In a step's code it cancels the
 * step (Ctrl-C, or its timeout); at a script's top level it raises
 * "interrupted" and leaves the signal pending for the loop to count.  New
 * threads inherit the hook. */
void flow_count_hook(lua_State *L, lua_Debug *ar)
{
    (void)ar;
    struct step_run *st = current_step(L);
    if (st && st->guarded) {
        if (cancel_due(L, st, true)) raise_cancel(L);
    } else if (!st) {
        sigset_t pending;
        if (sigpending(&pending) == 0 &&
            (sigismember(&pending, SIGINT) || sigismember(&pending, SIGTERM) || sigismember(&pending, SIGHUP)))
            luaL_error(L, "interrupted");
    }
    reset_hook(L);
}

int flow_step_can_yield(lua_State *co)
{
    return step_of(co) != NULL && lua_isyieldable(co);
}

void flow_step_wait(lua_State *co, struct step_wait *w)
{
    struct step_run *st = step_of(co);
    if (st) step_wait_attach(&st->waits, w);
}

void flow_step_wake(lua_State *co, struct step_wait *w)
{
    step_wait_detach(w);
    flow_step_resume(co, 0);
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
    step_wait_list_clear(&st->waits);     /* their owners (the coroutine's userdata) free them */
    sched_step_done(run->sched, st->index, ok);
}

/* Resume a step's coroutine; when it returns, the step is over. run_step
 * reports its own errors and returns true or false; an error reaching here is
 * the engine's bug, reported as such. */
static void resume(struct step_run *st, int nargs)
{
    lua_State *L = st->run->L;
    struct step_run *outer = current_step(L);      /* a step that waits by running the loop itself */
    set_current_step(L, st);
    int nres = 0;
    int status = lua_resume(st->co, L, nargs, &nres);
    set_current_step(L, outer);
    if (status == LUA_YIELD) {
        if (st->waits.n == 0) {
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
    st->guarded = 0;
    st->cancel = CANCEL_NONE;
    st->next_look = 0;
    lua_rawgeti(st->co, LUA_REGISTRYINDEX, run->step_fn_ref);
    lua_pushinteger(st->co, (lua_Integer)i + 1);
    resume(st, 1);
    (void)s;
    return 0;
}

/* Ctrl-C: the step's code is stopped (sched.guard reports it) and whatever it
 * waits on is cancelled; a cancelled timer (a retry's back-off) ends at once. */
static void exec_cancel(void *ctx, struct sched *s, size_t i, enum cancel_mode mode)
{
    struct run *run = ctx;
    (void)s;
    struct step_run *st = &run->steps[i];
    if (st->cancel == CANCEL_NONE) st->cancel = CANCEL_INTERRUPT;   /* only interrupts stop steps */
    step_wait_list_cancel(&st->waits, mode);
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

/* opts.pools ({name = size, ...}, 0 = unbounded) and opts.pool ({[i] = name})
 * into opt; the arrays are userdata left on the stack, so a bad value raises
 * without leaking.  Without opts.pools: one pool of `jobs` slots. */
static void read_pools(lua_State *L, int opts, size_t n_steps, struct sched_options *opt)
{
    if (lua_getfield(L, opts, "pools") != LUA_TTABLE) { lua_pop(L, 1); return; }
    int pools = lua_gettop(L);
    size_t n = 0;
    for (lua_pushnil(L); lua_next(L, pools); lua_pop(L, 1)) n++;
    if (n == 0) luaL_error(L, "pools: no pools");
    struct sched_pool *p = lua_newuserdatauv(L, n * sizeof *p, 0);
    size_t k = 0;
    for (lua_pushnil(L); lua_next(L, pools); lua_pop(L, 1)) {
        lua_Integer size = lua_isinteger(L, -1) ? lua_tointeger(L, -1) : -1;
        if (lua_type(L, -2) != LUA_TSTRING || size < 0)
            luaL_error(L, "pools: each is name = size (a whole number ≥ 0; 0 is unbounded)");
        p[k++] = (struct sched_pool){ lua_tostring(L, -2), (size_t)size };  /* the name is held by opts */
    }
    size_t *pool_of = lua_newuserdatauv(L, (n_steps + 1) * sizeof *pool_of, 0);
    lua_getfield(L, opts, "pool");
    for (size_t i = 0; i < n_steps; i++) {
        lua_rawgeti(L, -1, (lua_Integer)i + 1);
        const char *name = lua_isstring(L, -1) ? lua_tostring(L, -1) : "local";
        size_t j = 0;
        while (j < n && strcmp(p[j].name, name) != 0) j++;
        if (j == n) luaL_error(L, "pools: step %d is in pool '%s', which is not in pools", (int)i + 1, name);
        pool_of[i] = j;
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    opt->pools = p;
    opt->n_pools = n;
    opt->pool_of = pool_of;
}

/* run(dag, {jobs=, keep_going=, selected=, pools=, pool=}, run_step [, up_to_date])
 *   -> code, {state, ...}, {elapsed, ...} */
static int l_run(lua_State *L)
{
    struct dag *dag = flow_check_dag(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    luaL_checktype(L, 3, LUA_TFUNCTION);
    lua_getfield(L, 2, "jobs");
    lua_Integer jobs = lua_isnil(L, -1) ? 1 : lua_tointeger(L, -1);
    if (jobs < 1 || jobs > MAX_JOBS) return luaL_error(L, "jobs must be a whole number from 1 to %d", MAX_JOBS);
    lua_getfield(L, 2, "keep_going");
    struct sched_options opt = { .jobs = (int)jobs, .keep_going = lua_toboolean(L, -1) };
    lua_pop(L, 2);
    lua_settop(L, 4);
    read_pools(L, 2, dag->n_steps, &opt);       /* before anything is allocated */
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
    struct sched_executor ex = { &run, exec_start, exec_cancel, exec_up_to_date };
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

/* ---- the step's code: sched.guard and the library functions it changes ---- */

/* Pushes false, {cancelled = "interrupted" | "timed out" | "exit", code = n,
 * error = the error the code ended with, if any} and clears the reason: a
 * retry starts afresh. */
static int push_cancel(lua_State *L, struct step_run *st, int error_idx)
{
    lua_pushboolean(L, 0);
    lua_createtable(L, 0, 3);
    if (error_idx) {
        lua_pushvalue(L, error_idx);
        lua_setfield(L, -2, "error");
    }
    lua_pushstring(L, cancel_names[st->cancel]);
    lua_setfield(L, -2, "cancelled");
    if (st->cancel == CANCEL_EXIT) {
        lua_pushinteger(L, st->exit_code);
        lua_setfield(L, -2, "code");
    }
    st->cancel = CANCEL_NONE;
    return 2;
}

static int guard_done(lua_State *L, int status, lua_KContext ctx)
{
    (void)ctx;
    struct step_run *st = step_of(L);
    if (st) {
        st->guarded--;
        reset_hook(L);
        /* code that went on past Ctrl-C (os.execute ignores it) or past its
         * timeout is stopped all the same: its results are not trusted */
        if (cancel_due(L, st, true))
            return push_cancel(L, st, status == LUA_OK || status == LUA_YIELD ? 0 : lua_gettop(L));
    }
    if (status == LUA_OK || status == LUA_YIELD) {
        lua_pushboolean(L, 1);
        lua_replace(L, 1);                  /* the handler's slot */
        return lua_gettop(L);
    }
    lua_pushboolean(L, 0);
    lua_insert(L, -2);
    return 2;
}

/* guard(handler, f, ...) -> true, f's results | false, handler(error) | false, {cancelled =, code =, error =}
 * xpcall for the step's own code, on the step's coroutine (it may yield).
 * Once the step is stopped nothing more of its code runs: a guard entered
 * after an interrupt returns the cancellation at once. */
static int l_guard(lua_State *L)
{
    luaL_checkany(L, 2);
    struct step_run *st = step_of(L);
    if (st) {
        if (cancel_due(L, st, false)) return push_cancel(L, st, 0);
        st->guarded++;
    }
    int status = lua_pcallk(L, lua_gettop(L) - 2, LUA_MULTRET, 1, 0, guard_done);
    return guard_done(L, status, 0);
}

/* After pcall, xpcall, coroutine.resume or coroutine.close (upvalue 1)
 * returned: a failure in a step that must stop hands the cancellation on. */
static int after_catch(lua_State *L, int status, lua_KContext ctx)
{
    (void)status;
    (void)ctx;
    if (lua_gettop(L) > 0 && !lua_toboolean(L, 1)) {
        struct step_run *st = current_step(L);
        if (st && st->guarded && cancel_due(L, st, true)) return raise_cancel(L);
    }
    return lua_gettop(L);
}

static int l_rethrowing(lua_State *L)
{
    luaL_checkany(L, 1);                    /* named after this function, not '?' */
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_callk(L, lua_gettop(L) - 1, LUA_MULTRET, 0, after_catch);
    return after_catch(L, LUA_OK, 0);
}

/* Each thread counts its own instructions for the hook, and a new one starts
 * from zero: a loop that makes coroutines that each run less than
 * FLOW_HOOK_COUNT would never meet it.  So making one, and switching to one,
 * looks (the clock every time, the signals at most every 10 ms). */
static void look_before_switch(lua_State *L)
{
    struct step_run *st = current_step(L);
    if (!st || !st->guarded) return;
    double now = monotonic_seconds();
    if (st->cancel == CANCEL_NONE && now < st->next_look && (st->deadline <= 0 || now <= st->deadline)) return;
    st->next_look = now + 0.01;
    if (cancel_due(L, st, true)) raise_cancel(L);
}

static int l_resume(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTHREAD);
    look_before_switch(L);
    return l_rethrowing(L);
}

static int l_close(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTHREAD);
    return l_rethrowing(L);
}

/* coroutine.create and coroutine.wrap (upvalue 1), unchanged but for the look. */
static int l_create(lua_State *L)
{
    look_before_switch(L);
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
    return lua_gettop(L);
}

/* xpcall's message handler (upvalue 1), kept from a cancellation: raised by
 * the hook, the error reaches the handler while hooks are off, and a handler
 * that never returned could not be stopped. */
static int l_handler(lua_State *L)
{
    struct step_run *st = current_step(L);
    if (st && st->guarded && st->cancel != CANCEL_NONE) return lua_gettop(L);
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
    return lua_gettop(L);
}

static int l_xpcall(lua_State *L)
{
    luaL_checktype(L, 2, LUA_TFUNCTION);
    lua_pushvalue(L, 2);
    lua_pushcclosure(L, l_handler, 1);
    lua_replace(L, 2);
    return l_rethrowing(L);
}

/* os.exit in a step's code fails the step (flow exits 0/1/2/130 and writes its
 * journal and summary); anywhere else it is the standard one (upvalue 1). */
static int l_exit(lua_State *L)
{
    struct step_run *st = current_step(L);
    if (!st || !st->guarded) {
        lua_pushvalue(L, lua_upvalueindex(1));
        lua_insert(L, 1);
        lua_call(L, lua_gettop(L) - 1, 0);
        return 0;
    }
    st->cancel = CANCEL_EXIT;
    if (lua_isboolean(L, 1)) st->exit_code = lua_toboolean(L, 1) ? 0 : 1;
    else st->exit_code = lua_isinteger(L, 1) ? lua_tointeger(L, 1) : 0;
    return raise_cancel(L);
}

/* os.execute's results from flow.proc.spawn's: true|nil, "exit"|"signal", n */
static int execute_done(lua_State *L, int status, lua_KContext ctx)
{
    (void)status;
    (void)ctx;
    if (!lua_istable(L, -2)) {                 /* the shell could not be started */
        lua_pushnil(L);
        lua_pushliteral(L, "exit");
        lua_pushinteger(L, 127);
        return 3;
    }
    lua_getfield(L, -2, "signal");
    lua_Integer sig = lua_tointeger(L, -1);
    lua_getfield(L, -3, "code");
    lua_Integer code = lua_tointeger(L, -1);
    if (sig == 0 && code == 0) lua_pushboolean(L, 1);
    else lua_pushnil(L);
    lua_pushstring(L, sig ? "signal" : "exit");
    lua_pushinteger(L, sig ? sig : code);
    return 3;
}

/* os.execute(cmd) in a step's code runs like flow.sh: the step yields while
 * the command runs (other steps go on), Ctrl-C and the step's timeout stop
 * it, its output goes to flow's stderr, its stdin is /dev/null.  Anywhere
 * else, and os.execute() without a command, it is the standard one (upvalue 1). */
static int l_execute(lua_State *L)
{
    struct step_run *st = step_of(L);
    if (!st || !st->guarded || !flow_step_can_yield(L) || lua_isnoneornil(L, 1)) {
        lua_pushvalue(L, lua_upvalueindex(1));
        lua_insert(L, 1);
        lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
        return lua_gettop(L);
    }
    const char *cmd = luaL_checkstring(L, 1);
    lua_settop(L, 1);
    lua_getfield(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
    lua_getfield(L, -1, "flow.proc");
    lua_getfield(L, -1, "spawn");
    lua_createtable(L, 0, 2);
    lua_createtable(L, 3, 0);
    lua_pushliteral(L, "/bin/sh");
    lua_rawseti(L, -2, 1);
    lua_pushliteral(L, "-c");
    lua_rawseti(L, -2, 2);
    lua_pushstring(L, cmd);
    lua_rawseti(L, -2, 3);
    lua_setfield(L, -2, "argv");
    lua_pushliteral(L, "");
    lua_setfield(L, -2, "echo");
    lua_callk(L, 1, 2, 0, execute_done);
    return execute_done(L, LUA_OK, 0);
}

/* debug.sethook is refused, in a step and at a script's top level alike: it
 * would replace flow's count hook, which bounds a step's code (timeout,
 * Ctrl-C, SIGTERM) and which each step's thread inherits from the script's.
 * An error, not a silent no-op, so a profiler or debugger says why. */
static int l_sethook(lua_State *L)
{
    return luaL_error(L, "debug.sethook is not available in a flow pipeline: flow's own hook bounds each "
                         "step's code (its timeout, Ctrl-C, SIGTERM), and a hook set here would replace it");
}

static int cancelled_tostring(lua_State *L)
{
    lua_pushliteral(L, "the step was stopped (interrupted, timed out or os.exit)");
    return 1;
}

void flow_install_guards(lua_State *L)
{
    static const struct { const char *lib, *name; lua_CFunction fn; } wraps[] = {
        { LUA_GNAME, "pcall", l_rethrowing }, { LUA_GNAME, "xpcall", l_xpcall },
        { LUA_COLIBNAME, "resume", l_resume }, { LUA_COLIBNAME, "close", l_close },
        { LUA_COLIBNAME, "create", l_create }, { LUA_COLIBNAME, "wrap", l_create },
        { LUA_OSLIBNAME, "exit", l_exit }, { LUA_OSLIBNAME, "execute", l_execute },
        { LUA_DBLIBNAME, "sethook", l_sethook },
    };
    for (size_t i = 0; i < sizeof wraps / sizeof *wraps; i++) {
        if (lua_getglobal(L, wraps[i].lib) != LUA_TTABLE) { lua_pop(L, 1); continue; }
        lua_getfield(L, -1, wraps[i].name);
        lua_pushcclosure(L, wraps[i].fn, 1);
        lua_setfield(L, -2, wraps[i].name);
        lua_pop(L, 1);
    }
    lua_createtable(L, 0, 0);
    lua_createtable(L, 0, 1);
    lua_pushcfunction(L, cancelled_tostring);
    lua_setfield(L, -2, "__tostring");
    lua_setmetatable(L, -2);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &cancelled_key);
}

static const luaL_Reg sched_funcs[] = {
    { "run", l_run },
    { "set_deadline", l_set_deadline },
    { "guard", l_guard },
    { NULL, NULL }
};

int luaopen_flow_sched(lua_State *L)
{
    luaL_newlib(L, sched_funcs);
    lua_pushinteger(L, MAX_JOBS);
    lua_setfield(L, -2, "MAX_JOBS");
    return 1;
}
