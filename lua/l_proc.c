/* l_proc.c — module flow.proc: start a process and wait for it.  On a step's
 * coroutine the wait yields to the event loop, so other steps go on; anywhere
 * else (top level of a script, the REPL) it runs the loop until the exit. */
#include "flowlua.h"
#include "proc.h"
#include "util.h"

#include <lauxlib.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

struct waiter {
    lua_State *co;         /* the step coroutine to resume, or NULL */
    struct proc *proc;
    size_t pending;        /* 1 until the process has exited */
};

/* Blocking wait (not on a step coroutine): run the loop until *pending is 0.
 * The children have their own process groups, so Ctrl-C is passed on to
 * them: SIGTERM at the first, SIGKILL at a second. */
static void block_on(struct loop *loop, struct proc *const *procs, size_t n, const size_t *pending)
{
    int seen = loop_interrupts(loop), sent = 0;
    while (*pending) {
        loop_run_once(loop, -1);
        int extra = loop_interrupts(loop) - seen;
        if (extra > sent && sent < 2) {
            sent = extra > 1 ? 2 : 1;
            for (size_t k = 0; k < n; k++) proc_kill(procs[k], sent > 1 ? SIGKILL : SIGTERM);
        }
    }
}

static void spawn_exited(struct proc *p, void *arg)
{
    struct waiter *w = arg;
    (void)p;
    w->pending = 0;
    if (w->co) {
        flow_step_track_proc(w->co, w->proc, 0);
        flow_step_resume(w->co, 0);
    }
}

/* Pushes {code=, signal=, timed_out=, stderr=, log_error=} for an exited process. */
static void push_exit(lua_State *L, const struct proc *p)
{
    lua_createtable(L, 0, 5);
    lua_pushinteger(L, proc_exit_code(p));
    lua_setfield(L, -2, "code");
    lua_pushinteger(L, proc_term_signal(p));
    lua_setfield(L, -2, "signal");
    lua_pushboolean(L, proc_timed_out(p));
    lua_setfield(L, -2, "timed_out");
    lua_pushstring(L, proc_stderr_tail(p));
    lua_setfield(L, -2, "stderr");
    if (proc_log_errno(p)) {
        lua_pushfstring(L, "%s%s", strerror(proc_log_errno(p)), errno_hint(proc_log_errno(p)));
        lua_setfield(L, -2, "log_error");
    }
}

/* Pushes the exit table plus stdout= and frees the waiter. */
static int push_result(lua_State *L, struct waiter *w)
{
    push_exit(L, w->proc);
    size_t len;
    const char *out = proc_stdout(w->proc, &len);
    lua_pushlstring(L, out, len);
    lua_setfield(L, -2, "stdout");
    proc_free(w->proc);
    free(w);
    return 1;
}

static int spawn_continue(lua_State *L, int status, lua_KContext ctx)
{
    (void)status;
    return push_result(L, (struct waiter *)ctx);
}

/* argv strings, NULL-terminated, pointing into the Lua table (kept on the stack). */
static char **read_argv(lua_State *L, int idx, const char *field)
{
    lua_getfield(L, idx, field);
    if (!lua_istable(L, -1)) { lua_pop(L, 1); return NULL; }
    size_t n = lua_rawlen(L, -1);
    char **v = xcalloc(n + 1, sizeof *v);
    for (size_t i = 0; i < n; i++) {
        lua_rawgeti(L, -1, (lua_Integer)i + 1);
        v[i] = (char *)lua_tostring(L, -1);
        lua_pop(L, 1);
        if (!v[i]) { free(v); luaL_error(L, "%s[%d] is not a string", field, (int)i + 1); }
    }
    lua_pop(L, 1);
    return v;
}

/* Reads one spawn{} table at idx into spec; the strings stay in the table. */
static void read_spec(lua_State *L, int idx, struct proc_spec *spec, char ***argv, char ***env)
{
    memset(spec, 0, sizeof *spec);
    *argv = read_argv(L, idx, "argv");
    if (!*argv) luaL_error(L, "spawn: argv must be a list of strings");
    *env = read_argv(L, idx, "env");
    spec->argv = *argv;
    spec->env_extra = *env;
    spec->cwd = flow_field_string(L, idx, "cwd");
    spec->log_path = flow_field_string(L, idx, "log");
    spec->echo_prefix = flow_field_string(L, idx, "echo");
    spec->log_header = flow_field_string(L, idx, "header");
    spec->echo = spec->echo_prefix != NULL;
    lua_getfield(L, idx, "timeout");
    spec->timeout_s = lua_isnumber(L, -1) ? lua_tonumber(L, -1) : 0;
    lua_pop(L, 1);
    double deadline = flow_step_deadline(L);
    if (deadline > 0) {
        double left = deadline - monotonic_seconds();
        if (left < 0.001) left = 0.001;
        if (spec->timeout_s <= 0 || left < spec->timeout_s) spec->timeout_s = left;
    }
}

/* spawn{argv=, cwd=, log=, env={"K=V",...}, capture=, echo=, timeout=} -> result | nil, err
 * (the step's own timeout bounds it too) */
static int l_spawn(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    struct proc_spec spec;
    char **argv, **env;
    read_spec(L, 1, &spec, &argv, &env);
    lua_getfield(L, 1, "capture");
    spec.capture_stdout = lua_toboolean(L, -1);
    lua_pop(L, 1);

    struct waiter *w = xcalloc(1, sizeof *w);
    w->pending = 1;
    char err[1024];
    w->co = flow_step_can_yield(L) ? L : NULL;
    w->proc = proc_spawn(flow_state_loop(L), &spec, spawn_exited, w, err, sizeof err);
    free(argv);
    free(env);
    if (!w->proc) {
        free(w);
        lua_pushnil(L);
        lua_pushstring(L, err);
        return 2;
    }
    if (w->co) {
        flow_step_track_proc(L, w->proc, 1);
        return lua_yieldk(L, 0, (lua_KContext)w, spawn_continue);
    }
    block_on(flow_state_loop(L), &w->proc, 1, &w->pending);
    return push_result(L, w);
}

static int sleep_continue(lua_State *L, int status, lua_KContext ctx)
{
    (void)L; (void)status; (void)ctx;
    return 0;
}

/* sleep(seconds): on a step's coroutine, yields to the loop; elsewhere blocks
 * (still waking for Ctrl-C). */
static int l_sleep(lua_State *L)
{
    double s = luaL_checknumber(L, 1);
    if (s <= 0) return 0;
    if (flow_step_can_yield(L)) {
        flow_step_sleep(L, s);
        return lua_yieldk(L, 0, 0, sleep_continue);
    }
    struct loop *loop = flow_state_loop(L);
    double until = monotonic_seconds() + s;
    int seen = loop_interrupts(loop);
    while (monotonic_seconds() < until && loop_interrupts(loop) == seen)
        loop_run_once(loop, until - monotonic_seconds());
    return 0;
}

/* ---- process groups: the ranks of a distributed step ---------------------- */

#define GROUP_GRACE_S 5.0

struct group {
    lua_State *co;                 /* step coroutine to resume, or NULL (blocking) */
    struct loop *loop;
    struct proc **procs;
    size_t n, remaining;
    long first_failed;             /* index of the first rank that failed, or -1 */
    unsigned long kill_timer;
};

static void group_kill_all(void *arg)
{
    struct group *g = arg;
    g->kill_timer = 0;
    for (size_t i = 0; i < g->n; i++) proc_kill(g->procs[i], SIGKILL);
}

static void group_member_exited(struct proc *p, void *arg)
{
    struct group *g = arg;
    size_t i = 0;
    while (g->procs[i] != p) i++;
    g->remaining--;
    if (g->co) flow_step_track_proc(g->co, p, 0);
    if (proc_exit_code(p) != 0 && g->first_failed < 0) {
        /* One rank failed: the others cannot finish a collective without it. */
        g->first_failed = (long)i;
        for (size_t k = 0; k < g->n; k++) proc_kill(g->procs[k], SIGTERM);
        g->kill_timer = loop_add_timer(g->loop, GROUP_GRACE_S, group_kill_all, g);
    }
    if (g->remaining == 0) {
        if (g->kill_timer) loop_cancel_timer(g->loop, g->kill_timer);
        g->kill_timer = 0;
        if (g->co) flow_step_resume(g->co, 0);
    }
}

/* Pushes {failed = index or nil, results = {{code=, signal=, stderr=, timed_out=}...}}. */
static int push_group_result(lua_State *L, struct group *g)
{
    lua_createtable(L, 0, 2);
    if (g->first_failed >= 0) {
        lua_pushinteger(L, g->first_failed + 1);
        lua_setfield(L, -2, "failed");
    }
    lua_createtable(L, (int)g->n, 0);
    for (size_t i = 0; i < g->n; i++) {
        push_exit(L, g->procs[i]);
        lua_rawseti(L, -2, (lua_Integer)i + 1);
        proc_free(g->procs[i]);
    }
    lua_setfield(L, -2, "results");
    free(g->procs);
    free(g);
    return 1;
}

static int group_continue(lua_State *L, int status, lua_KContext ctx)
{
    (void)status;
    return push_group_result(L, (struct group *)ctx);
}

/* spawn_group({spec, spec, ...}) -> {failed =, results =} | nil, err
 * Starts every process, waits for all; the first failure stops the rest. */
static int l_spawn_group(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    size_t n = lua_rawlen(L, 1);
    if (n == 0) return luaL_error(L, "spawn_group: no processes");
    struct group *g = xcalloc(1, sizeof *g);
    g->loop = flow_state_loop(L);
    g->procs = xcalloc(n, sizeof *g->procs);
    g->first_failed = -1;
    g->co = flow_step_can_yield(L) ? L : NULL;
    char err[1024];
    for (size_t i = 0; i < n; i++) {
        lua_rawgeti(L, 1, (lua_Integer)i + 1);
        struct proc_spec spec;
        char **argv, **env;
        read_spec(L, lua_gettop(L), &spec, &argv, &env);
        g->procs[i] = proc_spawn(g->loop, &spec, group_member_exited, g, err, sizeof err);
        free(argv);
        free(env);
        lua_pop(L, 1);
        if (!g->procs[i]) {                   /* stop the ones already started */
            for (size_t k = 0; k < i; k++) proc_free(g->procs[k]);
            free(g->procs);
            free(g);
            lua_pushnil(L);
            lua_pushstring(L, err);
            return 2;
        }
        g->n++;
        g->remaining++;
        if (g->co) flow_step_track_proc(L, g->procs[i], 1);
    }
    if (g->co) return lua_yieldk(L, 0, (lua_KContext)g, group_continue);
    block_on(g->loop, g->procs, g->n, &g->remaining);
    return push_group_result(L, g);
}

static const luaL_Reg proc_funcs[] = {
    { "spawn_group", l_spawn_group },
    { "spawn", l_spawn },
    { "sleep", l_sleep },
    { NULL, NULL }
};

int luaopen_flow_proc(lua_State *L)
{
    luaL_newlib(L, proc_funcs);
    return 1;
}
