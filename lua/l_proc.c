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
    bool done;
};

static void spawn_exited(struct proc *p, void *arg)
{
    struct waiter *w = arg;
    (void)p;
    w->done = true;
    if (w->co) {
        flow_step_track_proc(w->co, w->proc, 0);
        flow_step_resume(w->co, 0);
    }
}

/* Pushes {code=, signal=, stderr=, stdout=} and frees the waiter. */
static int push_result(lua_State *L, struct waiter *w)
{
    lua_createtable(L, 0, 4);
    lua_pushinteger(L, proc_exit_code(w->proc));
    lua_setfield(L, -2, "code");
    lua_pushinteger(L, proc_term_signal(w->proc));
    lua_setfield(L, -2, "signal");
    lua_pushboolean(L, proc_timed_out(w->proc));
    lua_setfield(L, -2, "timed_out");
    lua_pushstring(L, proc_stderr_tail(w->proc));
    lua_setfield(L, -2, "stderr");
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

static const char *field_string(lua_State *L, int idx, const char *key)
{
    lua_getfield(L, idx, key);
    const char *s = lua_tostring(L, -1);
    lua_pop(L, 1);
    return s;
}

/* spawn{argv=, cwd=, log=, env={"K=V",...}, capture=, echo=} -> result | nil, err */
static int l_spawn(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    struct proc_spec spec = { 0 };
    char **argv = read_argv(L, 1, "argv");
    if (!argv) return luaL_error(L, "spawn: argv must be a list of strings");
    char **env = read_argv(L, 1, "env");
    spec.argv = argv;
    spec.env_extra = env;
    spec.cwd = field_string(L, 1, "cwd");
    spec.log_path = field_string(L, 1, "log");
    spec.echo_prefix = field_string(L, 1, "echo");
    spec.echo = spec.echo_prefix != NULL;
    lua_getfield(L, 1, "capture");
    spec.capture_stdout = lua_toboolean(L, -1);
    lua_getfield(L, 1, "timeout");
    spec.timeout_s = lua_isnumber(L, -1) ? lua_tonumber(L, -1) : 0;
    lua_pop(L, 2);
    double deadline = flow_step_deadline(L);     /* the step's own timeout bounds it too */
    if (deadline > 0) {
        double left = deadline - monotonic_seconds();
        if (left < 0.001) left = 0.001;
        if (spec.timeout_s <= 0 || left < spec.timeout_s) spec.timeout_s = left;
    }

    struct waiter *w = xcalloc(1, sizeof *w);
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
    /* Blocking wait: the child has its own process group, so pass Ctrl-C on. */
    struct loop *loop = flow_state_loop(L);
    int seen = loop_interrupts(loop);
    while (!w->done) {
        loop_run_once(loop, -1);
        if (loop_interrupts(loop) != seen) {
            proc_kill(w->proc, loop_interrupts(loop) - seen > 1 ? SIGKILL : SIGTERM);
        }
    }
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

static const luaL_Reg proc_funcs[] = {
    { "spawn", l_spawn },
    { "sleep", l_sleep },
    { NULL, NULL }
};

int luaopen_flow_proc(lua_State *L)
{
    luaL_newlib(L, proc_funcs);
    return 1;
}
