/* l_sched.c — module flow.sched: runs a flow.dag with the C scheduler and
 * step runner (step.h: attempts, retries, timeouts, the journal), each
 * attempt of a step on its own Lua coroutine: this file is the step body.  The coroutine's extra space (LUA_EXTRASPACE)
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
#include "hash.h"
#include "proc.h"
#include "sched.h"
#include "statestore.h"
#include "step.h"
#include "step_wait.h"
#include "loop.h"
#include "ui.h"
#include "util.h"

#include <lauxlib.h>
#include <lualib.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#define RECORD_CLASS "flow.RunRecord"
#define RUN_CLASS "flow.SchedRun"

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
    int guarded;                   /* sched.guard calls running the step's code */
    enum cancel cancel;            /* decided once, reported by the guard */
    lua_Integer exit_code;         /* os.exit's status, for CANCEL_EXIT */
    double next_look;              /* look_before_switch: next look at the signals */
};

/* The outputs a step's body in C gave as fields (flow_step_keep_outputs),
 * for the outputs text `json` of step `owner`'s attempt: one set a run, for
 * the step whose attempt ends next. */
struct kept_outputs {
    const struct step_run *owner;  /* NULL: none */
    const char *json;
    size_t n;
    struct state_out outs[FLOW_KEPT_OUTPUTS_MAX];
    char hash[FLOW_KEPT_OUTPUTS_MAX][SHA256_HEX_SIZE];
};

struct run {
    lua_State *L;                  /* where the callbacks run: the caller's, or the run's own thread (start) */
    struct sched *sched;
    struct step_runner *runner;
    struct ui_run *ui;             /* its progress on stderr, until it ended */
    bool over;                     /* the scheduler is done and the journal closed */
    bool started;                  /* by sched.start: anchored in the registry until over */
    int code, journal_rc;
    char journal_error[1024];
    int attempt_fn_ref;            /* the stdlib's attempt(i, k) */
    /* body.plain: the attempt of a plain Lua function step, which C makes
     * (lua/plain_step.c), and which steps are plain (`plain_steps`, a string
     * of a byte a step, anchored with the run); LUA_NOREF, NULL: none */
    int plain_fn_ref;
    const char *plain_steps;
    int owner_ref;                 /* opts.owner, what sched.step() names, or LUA_NOREF */
    struct utd *check;             /* the engine's up-to-date check (opts.check), or NULL */
    lua_State *hooked;             /* sched.run's caller, whose hook is off while it runs */
    lua_Hook hook;
    int hook_mask, hook_count;
    int check_fn_ref;              /* its up_to_date(i), or LUA_NOREF */
    int fingerprint_fn_ref;        /* its fingerprint(i), or LUA_NOREF */
    struct step_run *steps;
    struct kept_outputs kept;
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
static double deadline_of(const struct step_run *st)
{
    return step_runner_deadline(st->run->runner, st->index);
}

static bool cancel_due(lua_State *L, struct step_run *st, bool deadline)
{
    if (st->cancel == CANCEL_NONE) {
        double d = deadline ? deadline_of(st) : 0;
        if (loop_interrupts_recent(flow_state_loop(L)) > 0) st->cancel = CANCEL_INTERRUPT;
        else if (d > 0 && monotonic_seconds() > d) st->cancel = CANCEL_TIMEOUT;
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

/* The hook is on only where code that may not return runs: a script's top
 * level, and a step's own code (sched.guard).  Any hook makes the VM call
 * out at every instruction (Lua's 'trap'), which was 9 % of a run of 100,000
 * Lua steps; the engine's callbacks and a step's bookkeeping run without it,
 * and a step's coroutine is made without it (threads inherit their maker's). */
static void hook_on(lua_State *L) { lua_sethook(L, flow_count_hook, LUA_MASKCOUNT, FLOW_HOOK_COUNT); }
static void hook_off(lua_State *L) { lua_sethook(L, NULL, 0, 0); }

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
    return st ? deadline_of(st) : 0;
}

/* The coroutine of an attempt that is over: one that returned normally has an
 * empty stack and can run the next attempt; one that failed is dropped. */
static void release(struct step_run *st)
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
    if (run->kept.owner == st) run->kept.owner = NULL;     /* (its outputs' fields went with its end) */
}

void flow_step_keep_outputs(lua_State *co, const char *json, const struct state_out *outs, size_t n)
{
    struct step_run *st = step_of(co);
    if (!st || n > FLOW_KEPT_OUTPUTS_MAX) return;
    struct kept_outputs *k = &st->run->kept;
    for (size_t i = 0; i < n; i++) {
        k->outs[i] = outs[i];
        snprintf(k->hash[i], sizeof k->hash[i], "%s", outs[i].hash);
        k->outs[i].hash = k->hash[i];
    }
    k->n = n;
    k->json = json;
    k->owner = st;
}

void flow_step_forget_outputs(lua_State *co)
{
    struct step_run *st = step_of(co);
    if (st && st->run->kept.owner == st) st->run->kept.owner = NULL;
}

/* The attempt's results on the coroutine's stack, `ok, info` (see
 * runner.lua's Run:attempt_body), as an outcome whose strings live on that
 * stack.  Nothing here may raise (it runs inside the scheduler): the paths'
 * array is C memory the caller frees. */
static void read_outcome(struct step_run *st, int nres, struct step_outcome *o)
{
    lua_State *co = st->co;
    int top = lua_gettop(co), t = top - nres + 2;
    o->ok = nres > 0 && lua_toboolean(co, top - nres + 1);
    if (o->ok && nres >= 2 && lua_type(co, t) == LUA_TSTRING) {     /* a plain step's: its outputs */
        o->outputs_json = lua_tostring(co, t);
        /* their fields, when the body in C gave them for this very text
         * (plain_step.c returned it as values_c.call did, or forgot them:
         * the same address is the same string, on the stack since) */
        const struct kept_outputs *k = &st->run->kept;
        if (k->owner == st && k->json == o->outputs_json) {
            o->outs = k->outs;
            o->n_outs = k->n;
        }
        return;
    }
    if (nres < 2 || !lua_istable(co, t)) {
        if (!o->ok) o->message = o->report = "internal error: an attempt ended without saying how";
        return;
    }
    lua_getfield(co, t, "exit_code");
    if (lua_isinteger(co, -1)) {
        o->has_exit_code = true;
        o->exit_code = (int)lua_tointeger(co, -1);
    }
    lua_pop(co, 1);
    o->remote_json = flow_field_string(co, t, "remote");
    if (o->ok) {
        o->outputs_json = flow_field_string(co, t, "outputs");
        o->metrics_json = flow_field_string(co, t, "metrics");
        o->series_json = flow_field_string(co, t, "series");
        lua_getfield(co, t, "paths");
        if (lua_istable(co, -1)) {
            size_t n = lua_rawlen(co, -1);
            const char **paths = xcalloc(n + 1, sizeof *paths);
            for (size_t k = 0; k < n; k++) {
                lua_rawgeti(co, -1, (lua_Integer)k + 1);
                if (lua_type(co, -1) == LUA_TSTRING) paths[o->n_paths++] = lua_tostring(co, -1);  /* the table keeps it */
                lua_pop(co, 1);
            }
            o->paths = paths;
        }
        lua_pop(co, 1);
        return;
    }
    o->message = flow_field_string(co, t, "message");
    o->report = flow_field_string(co, t, "report");
    o->stderr_tail = flow_field_string(co, t, "tail");
    o->reason = flow_field_string(co, t, "reason");
    o->timed_out = flow_field_bool(co, t, "timed_out");
    o->interrupted = flow_field_bool(co, t, "interrupted");
    o->final = flow_field_bool(co, t, "final");
}

/* An attempt that ended in an error of the engine's own (not the step's). */
static void engine_failure(struct step_run *st, const char *msg)
{
    struct step_outcome o = { .ok = false, .message = msg, .report = msg };
    step_attempt_done(st->run->runner, st->index, &o);
}

/* Resume an attempt's coroutine; when it returns, the attempt is over.  The
 * attempt reports its own errors and returns ok, info; an error reaching
 * here is the engine's bug, reported as such. */
static void resume(struct step_run *st, int nargs)
{
    lua_State *L = st->run->L;
    struct step_run *outer = current_step(L);      /* a step that waits by running the loop itself */
    set_current_step(L, st);
    int nres = 0;
    int status = lua_resume(st->co, L, nargs, &nres);
    set_current_step(L, outer);
    const char *name = sched_dag(st->run->sched)->steps[st->index].name;
    char msg[2048];             /* formatted in C: this runs inside the scheduler, where nothing may raise */
    if (status == LUA_YIELD) {
        if (st->waits.n > 0) return;
        lua_pop(st->co, nres);
        snprintf(msg, sizeof msg, "step '%s' yielded without waiting for anything (a coroutine.yield() outside "
                 "a coroutine of its own?)", name);
    } else if (status != LUA_OK) {
        const char *err = lua_type(st->co, -1) == LUA_TSTRING ? lua_tostring(st->co, -1) : NULL;
        if (status == LUA_ERRMEM) err = "not enough memory";
        snprintf(msg, sizeof msg, "internal error in step '%s': %s", name, err ? err : "(an error that is not a string)");
    }
    if (status != LUA_OK) {
        engine_failure(st, msg);                        /* copied by the runner */
        release(st);
        return;
    }
    struct step_outcome o = { 0 };
    read_outcome(st, nres, &o);
    step_attempt_done(st->run->runner, st->index, &o);     /* copies what it keeps */
    free((void *)o.paths);
    release(st);
}

void flow_step_resume(lua_State *co, int nargs)
{
    struct step_run *st = step_of(co);
    if (st) resume(st, nargs);
}

/* ---- the body (step.h) ---- */

/* A new coroutine for step_run `ud` (protected: called by flow_cpcall), anchored
 * in the registry. */
static int new_coroutine(lua_State *L)
{
    struct step_run *st = lua_touserdata(L, 1);
    lua_State *co = lua_newthread(L);
    st->co_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    st->co = co;
    return 0;
}

static void body_attempt(void *ctx, struct step_runner *r, size_t i, int attempt)
{
    struct run *run = ctx;
    (void)r;
    struct step_run *st = &run->steps[i];
    if (run->n_idle) {
        run->n_idle--;
        st->co = run->idle[run->n_idle].co;
        st->co_ref = run->idle[run->n_idle].ref;
    } else if (flow_cpcall(run->L, new_coroutine, st, 0, 0) != LUA_OK) {
        /* out of memory: raising here would unwind through the scheduler */
        lua_pop(run->L, 1);
        st->co = NULL;
        struct step_outcome o = { .ok = false, .message = "cannot start: not enough memory for its coroutine",
                                  .report = "cannot start a step: not enough memory for its coroutine" };
        step_attempt_done(r, i, &o);
        return;
    }
    *(struct step_run **)lua_getextraspace(st->co) = st;
    st->guarded = 0;
    st->cancel = CANCEL_NONE;
    st->next_look = 0;
    bool plain = run->plain_steps && run->plain_steps[i];
    lua_rawgeti(st->co, LUA_REGISTRYINDEX, plain ? run->plain_fn_ref : run->attempt_fn_ref);
    lua_pushinteger(st->co, (lua_Integer)i + 1);
    lua_pushinteger(st->co, attempt);
    resume(st, 2);
}

/* Ctrl-C: the step's code is stopped (sched.guard reports it) and whatever it
 * waits on is cancelled. */
static void body_cancel(void *ctx, size_t i, enum cancel_mode mode)
{
    struct run *run = ctx;
    struct step_run *st = &run->steps[i];
    if (!st->co) return;
    if (st->cancel == CANCEL_NONE) st->cancel = CANCEL_INTERRUPT;   /* only interrupts stop steps */
    step_wait_list_cancel(&st->waits, mode);
}

/* Calls the stdlib's function `ref` with step i (and `extra` more values
 * pushed by the caller) on the main state, which must not wait; an error
 * there is the engine's bug.  Leaves nres results, or returns false. */
static bool call_main(struct run *run, int ref, size_t i, int extra, int nres, const char *what)
{
    lua_State *L = run->L;
    lua_rawgeti(L, LUA_REGISTRYINDEX, ref);
    lua_pushinteger(L, (lua_Integer)i + 1);
    if (extra) lua_rotate(L, -2 - extra, 2);
    if (flow_pcall(L, 1 + extra, nres) == LUA_OK) return true;
    ui_error("internal error %s step '%s': %s", what, sched_dag(run->sched)->steps[i].name, lua_tostring(L, -1));
    lua_pop(L, 1);
    return false;
}

/* Whether step i's outputs are up to date; on an error the step simply runs. */
static bool body_up_to_date(void *ctx, size_t i)
{
    struct run *run = ctx;
    /* a step the engine's check finds up to date never enters Lua, nor one it
     * finds without a record: that one runs, with the fingerprint the check
     * computed (body_fingerprint takes it: uptodate.h) */
    bool plain = run->plain_steps && run->plain_steps[i];    /* (in this process: its fingerprint may wait) */
    switch (!run->check ? UTD_CANNOT_TELL : plain ? utd_decide_may_defer(run->check, i) : utd_decide(run->check, i)) {
    case UTD_UP_TO_DATE: return true;
    case UTD_NO_RECORD: return false;
    case UTD_CANNOT_TELL: break;
    }
    if (run->check_fn_ref == LUA_NOREF || !call_main(run, run->check_fn_ref, i, 0, 1, "checking")) return false;
    bool skip = lua_toboolean(run->L, -1);
    lua_pop(run->L, 1);
    return skip;
}

static void body_fingerprint(void *ctx, size_t i, char **fp, char **parts)
{
    struct run *run = ctx;
    if (run->check && utd_take_fingerprint(run->check, i, fp, parts)) return;
    *fp = *parts = NULL;
    if (run->fingerprint_fn_ref == LUA_NOREF || !call_main(run, run->fingerprint_fn_ref, i, 0, 2, "starting"))
        return;
    lua_State *L = run->L;
    if (lua_type(L, -2) == LUA_TSTRING) *fp = xstrdup(lua_tostring(L, -2));
    if (lua_type(L, -1) == LUA_TSTRING) *parts = xstrdup(lua_tostring(L, -1));
    lua_pop(L, 2);
}

/* opts[key] ({[i] = truthy}: opts.selected, opts.after_records) as flags in
 * a userdata left on the stack (a nil there when there is no such table). */
static bool *read_flags(lua_State *L, int opts, const char *key, size_t n)
{
    if (lua_getfield(L, opts, key) != LUA_TTABLE) return NULL;
    bool *sel = lua_newuserdatauv(L, (n + 1) * sizeof *sel, 0);
    memset(sel, 0, (n + 1) * sizeof *sel);
    for (size_t i = 0; i < n; i++) {
        lua_rawgeti(L, -2, (lua_Integer)i + 1);
        sel[i] = lua_toboolean(L, -1);
        lua_pop(L, 1);
    }
    return sel;
}

/* The index of pool `name` among the n pools p, or n when none has it. */
static size_t pool_index(const struct sched_pool *p, size_t n, const char *name)
{
    size_t j = 0;
    while (j < n && strcmp(p[j].name, name) != 0) j++;
    return j;
}

/* opts.pools ({name = size, ...}, 0 = unbounded) and opts.pool ({[i] = name})
 * into opt; the arrays are userdata left on the stack, so a bad value raises
 * without leaking.  Without opts.pools: one pool of `jobs` slots.  A step
 * opts.pool leaves out is in its kind's pool, opts.kind_pools = {command =
 * name, func = name} (the stdlib's rule; `local` for both without it), so
 * that the stdlib hands over only the few steps placed otherwise, not a
 * table of 100,000 names.  specs says each step's kind. */
static void read_pools(lua_State *L, int opts, size_t n_steps, const struct step_spec *specs,
                       struct sched_options *opt)
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
    const char *kind_pool[2] = { "local", "local" };     /* a Lua step's, a command's; held by opts */
    if (lua_getfield(L, opts, "kind_pools") == LUA_TTABLE) {
        const char *func = flow_field_string(L, -1, "func"), *command = flow_field_string(L, -1, "command");
        if (func) kind_pool[0] = func;
        if (command) kind_pool[1] = command;
    }
    lua_pop(L, 1);
    size_t kind_index[2] = { pool_index(p, n, kind_pool[0]), pool_index(p, n, kind_pool[1]) };
    size_t *pool_of = lua_newuserdatauv(L, (n_steps + 1) * sizeof *pool_of, 0);
    lua_getfield(L, opts, "pool");
    for (size_t i = 0; i < n_steps; i++) {
        lua_rawgeti(L, -1, (lua_Integer)i + 1);
        bool named = lua_isstring(L, -1);
        const char *name = named ? lua_tostring(L, -1) : kind_pool[specs[i].command];
        size_t j = named ? pool_index(p, n, name) : kind_index[specs[i].command];
        if (j == n) luaL_error(L, "pools: step %d is in pool '%s', which is not in pools", (int)i + 1, name);
        pool_of[i] = j;
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    opt->pools = p;
    opt->n_pools = n;
    opt->pool_of = pool_of;
}

/* Each step's retries, timeout and kind, from the graph (dag.build took
 * them from the steps' records), into a userdata left on the stack. */
static struct step_spec *read_specs(lua_State *L, const struct dag *dag)
{
    size_t n = dag->n_steps;
    struct step_spec *specs = lua_newuserdatauv(L, (n + 1) * sizeof *specs, 0);
    memset(specs, 0, (n + 1) * sizeof *specs);
    for (size_t i = 0; i < n; i++) {
        const struct dag_step *s = &dag->steps[i];
        specs[i] = (struct step_spec){ .retries = s->retries, .timeout = s->timeout, .command = s->kind == STEP_COMMAND };
    }
    return specs;
}

static int optional_ref(lua_State *L, int t, const char *key, bool required)
{
    if (lua_getfield(L, t, key) != LUA_TFUNCTION) {
        if (required) luaL_error(L, "run: the body has no %s function", key);
        lua_pop(L, 1);
        return LUA_NOREF;
    }
    return luaL_ref(L, LUA_REGISTRYINDEX);
}

/* body.plain = {attempt = f(i, k), steps = a byte a step}: the steps whose
 * byte is not 0 start with f instead of body.attempt.  Leaves `steps` (or
 * nil) on the stack, for the caller to anchor. */
static void read_plain(lua_State *L, int body, size_t n_steps, struct run *run)
{
    if (lua_getfield(L, body, "plain") != LUA_TTABLE) {
        lua_pop(L, 1);
        lua_pushnil(L);
        return;
    }
    int t = lua_gettop(L);
    size_t len = 0;
    const char *steps = lua_getfield(L, t, "steps") == LUA_TSTRING ? lua_tolstring(L, -1, &len) : NULL;
    if (!steps || len != n_steps) luaL_error(L, "run: body.plain.steps must be a string of a byte a step");
    run->plain_fn_ref = optional_ref(L, t, "attempt", true);
    run->plain_steps = steps;
    lua_remove(L, t);
}

/* The run of sched.run and sched.start: the arguments read, the scheduler and
 * step runner made.  Leaves the run's userdata on top of the stack, its user
 * value a table anchoring what the scheduler points into (the DAG, the
 * options' strings, the arrays read from them, the record, `thread`). */
static struct run *make_run(lua_State *L, lua_State *thread)
{
    struct dag *dag = flow_check_dag(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    luaL_checktype(L, 3, LUA_TTABLE);
    lua_getfield(L, 2, "jobs");
    lua_Integer jobs = lua_isnil(L, -1) ? 1 : lua_tointeger(L, -1);
    if (jobs < 1 || jobs > MAX_JOBS) luaL_error(L, "jobs must be a whole number from 1 to %d", MAX_JOBS);
    lua_getfield(L, 2, "keep_going");
    struct sched_options opt = { .jobs = (int)jobs, .keep_going = lua_toboolean(L, -1) };
    lua_pop(L, 2);
    /* everything that may raise, before anything is allocated */
    struct step_runner_options ropt = { .specs = read_specs(L, dag) };
    read_pools(L, 2, dag->n_steps, ropt.specs, &opt);
    if (lua_getfield(L, 2, "journal") != LUA_TNIL) {
        ropt.journal = flow_check_journal(L, -1);
        ropt.pool = flow_work_pool(L);
    }
    /* the state store and the check: held by opts */
    if (lua_getfield(L, 2, "state") != LUA_TNIL) ropt.state = flow_check_state_store_to_change(L, -1);
    struct utd *check = lua_getfield(L, 2, "check") != LUA_TNIL ? flow_check_uptodate(L, -1) : NULL;
    ropt.check = check;
    lua_getfield(L, 2, "run_id");
    ropt.run_id = lua_tostring(L, -1);                  /* held by opts */
    lua_getfield(L, 2, "label");
    const char *label = lua_tostring(L, -1);            /* held by opts; copied by the UI */
    /* The run's C state belongs to its userdata from here on: a raise anywhere
     * below (out of memory) releases it. */
    struct run *run = lua_newuserdatauv(L, sizeof *run, 1);
    *run = (struct run){ .L = thread, .check = check, .attempt_fn_ref = LUA_NOREF, .check_fn_ref = LUA_NOREF,
                         .fingerprint_fn_ref = LUA_NOREF, .plain_fn_ref = LUA_NOREF, .owner_ref = LUA_NOREF };
    luaL_setmetatable(L, RUN_CLASS);
    int run_idx = lua_gettop(L);
    run->attempt_fn_ref = optional_ref(L, 3, "attempt", true);
    run->check_fn_ref = optional_ref(L, 3, "up_to_date", false);
    run->fingerprint_fn_ref = optional_ref(L, 3, "fingerprint", false);
    if (lua_getfield(L, 2, "owner") != LUA_TNIL) run->owner_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    else lua_pop(L, 1);
    read_plain(L, 3, dag->n_steps, run);                /* its string stays on the stack: anchored below */
    struct step_runner **record = lua_newuserdatauv(L, sizeof *record, 1);
    *record = NULL;
    luaL_setmetatable(L, RECORD_CLASS);
    lua_pushvalue(L, 1);
    lua_setiuservalue(L, -2, 1);                        /* the DAG its names are in */
    int record_idx = lua_gettop(L);

    opt.selected = read_flags(L, 2, "selected", dag->n_steps);              /* userdata, on the stack */
    opt.after_records = read_flags(L, 2, "after_records", dag->n_steps);    /* the same */
    run->steps = lua_newuserdatauv(L, (dag->n_steps + 1) * sizeof(struct step_run), 0);
    for (size_t i = 0; i < dag->n_steps; i++)
        run->steps[i] = (struct step_run){ .run = run, .index = i, .co_ref = LUA_NOREF };
    /* the anchor: every value on the stack but the run itself */
    int top = lua_gettop(L);
    lua_createtable(L, top, 0);
    for (int k = 1; k <= top; k++) {
        if (k == run_idx) continue;
        lua_pushvalue(L, k);
        lua_rawseti(L, -2, k);
    }
    lua_pushvalue(L, record_idx);
    lua_setfield(L, -2, "record");
    lua_setiuservalue(L, run_idx, 1);
    struct step_body body = { run, body_attempt, body_cancel, body_up_to_date, body_fingerprint };
    *record = run->runner = step_runner_new(dag, flow_state_loop(L), &ropt, &body);
    struct sched_executor ex = step_runner_executor(run->runner);
    run->ui = ui_run_begin(dag, opt.selected, flow_state_loop(L), label);
    struct sched_observer obs = ui_run_observer(run->ui);
    run->sched = sched_new(dag, flow_state_loop(L), &opt, &ex, &obs);
    lua_settop(L, run_idx);
    return run;
}

/* Runs sched.start made that are not over, by address: the registry holds
 * them, so a run whose handle its owner dropped is never collected (and its
 * scheduler freed) while its steps still call back into it. */
static const char started_key = 'S';

static void anchor_started(lua_State *L, struct run *run, int run_idx, bool on)
{
    if (lua_rawgetp(L, LUA_REGISTRYINDEX, &started_key) != LUA_TTABLE) {
        lua_pop(L, 1);
        lua_newtable(L);
        lua_pushvalue(L, -1);
        lua_rawsetp(L, LUA_REGISTRYINDEX, &started_key);
    }
    if (on) lua_pushvalue(L, run_idx);
    else lua_pushnil(L);
    lua_rawsetp(L, -2, run);
    lua_pop(L, 1);
}

/* The run is over: its summary line, the journal's last lines. */
static void end_run(lua_State *L, struct run *run)
{
    run->code = sched_code(run->sched);
    ui_run_end(run->ui, run->sched);
    run->ui = NULL;
    run->journal_rc = step_runner_finish(run->runner, run->sched, run->code, run->journal_error,
                                         sizeof run->journal_error);
    run->over = true;
    if (run->started) anchor_started(L, run, 0, false);
}

/* code, {state, ...}, {elapsed, ...}, record, journal_error | nil */
static int push_result(lua_State *L, struct run *run, int run_idx)
{
    const struct dag *dag = sched_dag(run->sched);
    lua_pushinteger(L, run->code);
    lua_createtable(L, (int)dag->n_steps, 0);
    lua_createtable(L, (int)dag->n_steps, 0);
    for (size_t i = 0; i < dag->n_steps; i++) {
        lua_pushstring(L, step_state_name(sched_state(run->sched, i)));
        lua_rawseti(L, -3, (lua_Integer)i + 1);
        lua_pushnumber(L, sched_elapsed(run->sched, i));
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    lua_getiuservalue(L, run_idx, 1);
    lua_getfield(L, -1, "record");
    lua_remove(L, -2);
    if (run->journal_rc != 0) lua_pushstring(L, run->journal_error);
    else lua_pushnil(L);
    return 5;
}

/* The hook sched.run took off its caller's thread, back. */
static void give_hook_back(struct run *run)
{
    if (!run->hooked) return;
    lua_sethook(run->hooked, run->hook, run->hook_mask, run->hook_count);
    run->hooked = NULL;
}

/* run(dag, {jobs=, keep_going=, selected=, pools=, pool=, nodes=, journal=, run_id=, label=,
 *           state=, check=, after_records=, owner=}, body)
 *   state: the state store, where each step's record goes once its end is
 *   recorded; check: the engine's up-to-date check (flow.cache.uptodate),
 *   asked first; after_records: {[i] = truthy}, the steps that start only
 *   once the steps they depend on are recorded (sched.h)
 *   owner: what sched.step() names as a step's run (the stdlib's run object)
 *   body: {attempt = f(i, k) -> ok, info; up_to_date = f(i) -> bool;
 *          fingerprint = f(i) -> fp, parts_json;
 *          plain = {attempt = g(i, k) -> ok, info | true, outputs_json;
 *                   steps = a byte a step, not 0 for the steps g attempts}},
 *   up_to_date and fingerprint asked when the check cannot tell
 *   -> code, {state, ...}, {elapsed, ...}, record, journal_error | nil
 * Runs the loop until the run is over.  The record (run.json's,
 * :write_summary) outlives the run. */
static int l_run(lua_State *L)
{
    lua_settop(L, 3);
    struct run *run = make_run(L, L);
    int run_idx = lua_gettop(L);
    lua_toclose(L, run_idx);                            /* closing `run` releases it */
    /* the loop answers Ctrl-C meanwhile: the callbacks are the engine's own
     * (the hook comes back when the run ends, or is released by a raise) */
    run->hooked = L;
    run->hook = lua_gethook(L);
    run->hook_mask = lua_gethookmask(L);
    run->hook_count = lua_gethookcount(L);
    hook_off(L);
    sched_run(run->sched);
    end_run(L, run);
    give_hook_back(run);
    return push_result(L, run, run_idx);
}

/* start(dag, opts, body) -> a run under way, its callbacks on a thread of its
 * own (the caller, a flow.spawn task, waits suspended meanwhile): the loop is
 * turned by whoever waits for it (flow.wait_all), and after each turn
 * h:poll() starts what is ready and says whether it is over; then
 * h:result() is what run() returns.  Until it is over the registry holds
 * it (anchor_started). */
static int l_start(lua_State *L)
{
    lua_settop(L, 3);
    lua_State *thread = lua_newthread(L);               /* anchored with the run's arguments */
    hook_off(thread);                                   /* it runs the engine's callbacks only */
    struct run *run = make_run(L, thread);
    run->started = true;
    anchor_started(L, run, lua_gettop(L), true);
    sched_begin(run->sched);
    return 1;
}

static struct run *check_run(lua_State *L)
{
    struct run *run = luaL_checkudata(L, 1, RUN_CLASS);
    if (!run->sched) luaL_error(L, "sched: the run was released");
    return run;
}

static int l_run_poll(lua_State *L)
{
    struct run *run = check_run(L);
    if (!run->over && sched_poll(run->sched)) end_run(L, run);
    lua_pushboolean(L, run->over);
    return 1;
}

static int l_run_result(lua_State *L)
{
    struct run *run = check_run(L);
    if (!run->over) return luaL_error(L, "sched: the run is not over (poll it first)");
    return push_result(L, run, 1);
}

/* A run's __close and __gc: its registry references, idle coroutines and
 * scheduler (safe to repeat). */
static int run_release(lua_State *L)
{
    struct run *run = luaL_checkudata(L, 1, RUN_CLASS);
    give_hook_back(run);
    if (run->ui) {                       /* released before it ended (a raise): its display goes */
        ui_run_end(run->ui, run->sched);
        run->ui = NULL;
    }
    int *refs[] = { &run->attempt_fn_ref, &run->check_fn_ref, &run->fingerprint_fn_ref, &run->plain_fn_ref,
                    &run->owner_ref };
    for (size_t k = 0; k < sizeof refs / sizeof *refs; k++) {
        luaL_unref(L, LUA_REGISTRYINDEX, *refs[k]);
        *refs[k] = LUA_NOREF;
    }
    for (size_t k = 0; k < run->n_idle; k++) luaL_unref(L, LUA_REGISTRYINDEX, run->idle[k].ref);
    free(run->idle);
    run->idle = NULL;
    run->n_idle = run->cap_idle = 0;
    if (run->sched && !run->over) {
        /* released before it ended (a raise): its record, which may outlive
         * it, must not reach the scheduler from a timer or a flush later */
        lua_getiuservalue(L, 1, 1);
        struct step_runner **record = lua_istable(L, -1) && lua_getfield(L, -1, "record") == LUA_TUSERDATA
                                          ? lua_touserdata(L, -1) : NULL;
        if (record && *record) step_runner_detach(*record);
        lua_settop(L, 1);
    }
    sched_free(run->sched);
    run->sched = NULL;
    return 0;
}

/* ---- the run's record ---- */

static struct step_runner *check_record(lua_State *L)
{
    struct step_runner **record = luaL_checkudata(L, 1, RECORD_CLASS);
    if (!*record) luaL_error(L, "the run's record is gone");
    return *record;
}

/* record:write_summary(path, {run_id=, status=, code=, env=, started=, metrics = JSON, name=}): run.json;
 * raises a file-system error when it cannot be written */
static int l_record_write_summary(lua_State *L)
{
    struct step_runner *r = check_record(L);
    const char *path = luaL_checkstring(L, 2);
    luaL_checktype(L, 3, LUA_TTABLE);
    lua_getfield(L, 3, "run_id");
    lua_getfield(L, 3, "status");
    lua_getfield(L, 3, "env");
    lua_getfield(L, 3, "code");
    lua_getfield(L, 3, "started");
    lua_getfield(L, 3, "metrics");
    lua_getfield(L, 3, "name");
    struct step_summary sum = { .run_id = luaL_optstring(L, 4, ""), .status = luaL_optstring(L, 5, ""),
                                .env = lua_tostring(L, 6), .code = (int)lua_tointeger(L, 7),
                                .started = lua_tonumber(L, 8), .metrics_json = lua_tostring(L, 9),
                                .name = lua_tostring(L, 10) };
    char err[1024];
    if (step_runner_write_summary(r, path, &sum, err, sizeof err) != 0) return flow_raise_fs(L, err);
    return 0;
}

/* record:set_metrics(i, metrics_json, series_json): step i's, when it did not run */
static int l_record_set_metrics(lua_State *L)
{
    struct step_runner *r = check_record(L);
    lua_Integer i = luaL_checkinteger(L, 2);
    luaL_argcheck(L, i >= 1 && (size_t)i <= step_runner_n_steps(r), 2, "no such step");
    step_runner_set_metrics(r, (size_t)i - 1, luaL_optstring(L, 3, NULL), luaL_optstring(L, 4, NULL));
    return 0;
}

/* record:any_started() -> whether any step started */
static int l_record_any_started(lua_State *L)
{
    lua_pushboolean(L, step_runner_any_started(check_record(L)));
    return 1;
}

static int l_record_gc(lua_State *L)
{
    struct step_runner **record = luaL_checkudata(L, 1, RECORD_CLASS);
    step_runner_free(*record);
    *record = NULL;
    return 0;
}

static const luaL_Reg record_methods[] = {
    { "write_summary", l_record_write_summary },
    { "any_started", l_record_any_started },
    { "set_metrics", l_record_set_metrics },
    { NULL, NULL }
};

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
        if (--st->guarded == 0) hook_off(L);
        else reset_hook(L);
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
        if (st->guarded++ == 0) hook_on(L);
    }
    int status = lua_pcallk(L, lua_gettop(L) - 2, LUA_MULTRET, 1, 0, guard_done);
    return guard_done(L, status, 0);
}

/* stop_if_due(): in a step's code whose stop is due (Ctrl-C, its timeout),
 * raises it; elsewhere nothing.  For the stdlib's own loops that wait on a
 * step's behalf (flow.values), where a sleep that a stop ends at once would
 * otherwise turn round until the count hook looked. */
static int l_stop_if_due(lua_State *L)
{
    struct step_run *st = current_step(L);
    if (st && st->guarded && cancel_due(L, st, true)) return raise_cancel(L);
    return 0;
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
    double deadline = deadline_of(st);
    if (st->cancel == CANCEL_NONE && now < st->next_look && (deadline <= 0 || now <= deadline)) return;
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

/* fingerprint() -> the fingerprint of the step whose code calls it (from
 * its start: the up-to-date check's or the stdlib's), or nil. */
static int l_fingerprint(lua_State *L)
{
    struct step_run *st = current_step(L);
    const char *fp = st ? step_runner_fingerprint(st->run->runner, st->index) : NULL;
    if (fp) lua_pushstring(L, fp);
    else lua_pushnil(L);
    return 1;
}

/* step([co]) -> owner, i, k: the run (its opts.owner) and the step whose
 * attempt k runs on coroutine co (the running one), or nothing: a print()
 * there goes to that step's log.  (Not a coroutine the step's code made:
 * its extra space is NULL.) */
static int l_step(lua_State *L)
{
    lua_State *co = lua_isthread(L, 1) ? lua_tothread(L, 1) : L;
    struct step_run *st = step_of(co);
    if (!st || st->run->owner_ref == LUA_NOREF) return 0;
    lua_rawgeti(L, LUA_REGISTRYINDEX, st->run->owner_ref);
    lua_pushinteger(L, (lua_Integer)st->index + 1);
    lua_pushinteger(L, step_runner_attempt(st->run->runner, st->index));
    return 3;
}

/* turn(): one turn of the loop, waiting for whatever comes first (flow.wait_all). */
static int l_turn(lua_State *L)
{
    loop_run_once(flow_state_loop(L), -1);
    return 0;
}

/* is_run(v): whether v is a run sched.start made. */
static int l_is_run(lua_State *L)
{
    lua_pushboolean(L, luaL_testudata(L, 1, RUN_CLASS) != NULL);
    return 1;
}

static const luaL_Reg sched_funcs[] = {
    { "run", l_run },
    { "start", l_start },
    { "turn", l_turn },
    { "is_run", l_is_run },
    { "guard", l_guard },
    { "fingerprint", l_fingerprint },
    { "stop_if_due", l_stop_if_due },
    { "step", l_step },
    { NULL, NULL }
};

int luaopen_flow_sched(lua_State *L)
{
    flow_new_class(L, RECORD_CLASS, record_methods, l_record_gc);
    static const luaL_Reg run_methods[] = {
        { "poll", l_run_poll }, { "result", l_run_result }, { NULL, NULL }
    };
    flow_new_class(L, RUN_CLASS, run_methods, run_release);
    luaL_getmetatable(L, RUN_CLASS);
    lua_pushcfunction(L, run_release);
    lua_setfield(L, -2, "__close");
    lua_pop(L, 1);
    luaL_newlib(L, sched_funcs);
    lua_pushinteger(L, MAX_JOBS);
    lua_setfield(L, -2, "MAX_JOBS");
    return 1;
}
