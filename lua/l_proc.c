/* l_proc.c — module flow.proc: start processes and wait for them.  On a step's
 * coroutine the wait yields to the event loop, so other steps go on; anywhere
 * else (top level of a script, the REPL) it runs the loop until the exit. */
#include "flowlua.h"
#include "proc.h"
#include "util.h"

#include <lauxlib.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define SPAWN_CLASS "flow.Spawn"
#define GROUP_GRACE_S 5.0

/* One spawn{} table, its strings copied: nothing points into a table that Lua
 * code could change or the collector could free while the processes run. */
struct spec {
    struct proc_spec proc;         /* its pointers are the copies below */
    char **argv, **env;            /* NULL-terminated */
    char *cwd, *log, *echo, *header;
};

/* What one spawn or spawn_group holds, owned by a userdata on the caller's
 * stack from the moment it exists: a Lua error anywhere (a bad spec, out of
 * memory while building the result) frees it, and its __gc stops a process
 * still running.  A step's coroutine keeps it on its stack while it waits. */
struct spawn {
    lua_State *co;                 /* the step coroutine to resume, or NULL (blocking) */
    struct loop *loop;
    struct spec *specs;            /* n, all read before any process starts */
    struct proc **procs;           /* n; NULL until started and once reported */
    size_t n, remaining;           /* remaining: started and not yet exited */
    bool group;                    /* the first rank that fails stops the others */
    long first_failed;             /* index of the first rank that failed, or -1 */
    unsigned long kill_timer;
};

static void free_strings(char **v)
{
    for (size_t i = 0; v && v[i]; i++) free(v[i]);
    free(v);
}

static void spec_release(struct spec *s)
{
    free_strings(s->argv);
    free_strings(s->env);
    free(s->cwd);
    free(s->log);
    free(s->echo);
    free(s->header);
}

static void release_procs(struct spawn *sp)
{
    if (sp->kill_timer) loop_cancel_timer(sp->loop, sp->kill_timer);
    sp->kill_timer = 0;
    for (size_t i = 0; i < sp->n; i++) {
        proc_free(sp->procs[i]);     /* kills and reaps one still running */
        sp->procs[i] = NULL;
    }
}

static int spawn_gc(lua_State *L)
{
    struct spawn *sp = luaL_checkudata(L, 1, SPAWN_CLASS);
    release_procs(sp);
    for (size_t i = 0; i < sp->n; i++) spec_release(&sp->specs[i]);
    free(sp->specs);
    free(sp->procs);
    sp->specs = NULL;
    sp->procs = NULL;
    sp->n = 0;
    return 0;
}

/* Pushes the userdata that owns everything for n processes. */
static struct spawn *new_spawn(lua_State *L, size_t n, bool group)
{
    struct spawn *sp = lua_newuserdatauv(L, sizeof *sp, 0);
    memset(sp, 0, sizeof *sp);
    luaL_setmetatable(L, SPAWN_CLASS);
    sp->loop = flow_state_loop(L);
    sp->group = group;
    sp->first_failed = -1;
    sp->specs = xcalloc(n, sizeof *sp->specs);
    sp->procs = xcalloc(n, sizeof *sp->procs);
    sp->n = n;
    return sp;
}

/* The string (or number) on top of the stack, copied, or NULL; pops it. */
static char *pop_string_copy(lua_State *L)
{
    int t = lua_type(L, -1);
    char *copy = t == LUA_TSTRING || t == LUA_TNUMBER ? xstrdup(lua_tostring(L, -1)) : NULL;
    lua_pop(L, 1);
    return copy;
}

static char *field_copy(lua_State *L, int idx, const char *key)
{
    lua_getfield(L, idx, key);
    return pop_string_copy(L);
}

/* Field `field` of the table at idx, a list of strings, into *out (NULL-terminated
 * at every step, so a raise part-way leaves it for the owner to free); absent: NULL. */
static void read_list(lua_State *L, int idx, const char *field, char ***out)
{
    lua_getfield(L, idx, field);
    if (!lua_istable(L, -1)) { lua_pop(L, 1); return; }
    size_t n = lua_rawlen(L, -1);
    *out = xcalloc(n + 1, sizeof **out);
    for (size_t i = 0; i < n; i++) {
        lua_rawgeti(L, -1, (lua_Integer)i + 1);
        if (!((*out)[i] = pop_string_copy(L))) luaL_error(L, "%s[%d] is not a string", field, (int)i + 1);
    }
    lua_pop(L, 1);
}

/* Reads the spawn{} table at idx into s (owned by the caller's userdata); raises on a bad one. */
static void read_spec(lua_State *L, int idx, struct spec *s)
{
    read_list(L, idx, "argv", &s->argv);
    if (!s->argv) luaL_error(L, "spawn: argv must be a list of strings");
    read_list(L, idx, "env", &s->env);
    s->cwd = field_copy(L, idx, "cwd");
    s->log = field_copy(L, idx, "log");
    s->echo = field_copy(L, idx, "echo");
    s->header = field_copy(L, idx, "header");
    struct proc_spec *p = &s->proc;
    p->argv = s->argv;
    p->env_extra = s->env;
    p->cwd = s->cwd;
    p->log_path = s->log;
    p->echo_prefix = s->echo;
    p->echo = s->echo != NULL;
    p->log_header = s->header;
    lua_getfield(L, idx, "append");
    p->log_append = lua_toboolean(L, -1);
    lua_pop(L, 1);
    lua_getfield(L, idx, "timeout");
    p->timeout_s = lua_isnumber(L, -1) ? lua_tonumber(L, -1) : 0;
    lua_pop(L, 1);
}

/* The step's own timeout bounds every process it starts. */
static void apply_deadline(lua_State *L, struct proc_spec *p)
{
    double deadline = flow_step_deadline(L);
    if (deadline <= 0) return;
    double left = deadline - monotonic_seconds();
    if (left < 0.001) left = 0.001;
    if (p->timeout_s <= 0 || left < p->timeout_s) p->timeout_s = left;
}

static void group_kill_all(void *arg)
{
    struct spawn *sp = arg;
    sp->kill_timer = 0;
    for (size_t i = 0; i < sp->n; i++) proc_kill(sp->procs[i], SIGKILL);
}

static void spawn_exited(struct proc *p, void *arg)
{
    struct spawn *sp = arg;
    sp->remaining--;
    if (sp->co) flow_step_track_proc(sp->co, p, 0);
    if (sp->group && proc_exit_code(p) != 0 && sp->first_failed < 0) {
        /* One rank failed: the others cannot finish a collective without it. */
        size_t i = 0;
        while (sp->procs[i] != p) i++;
        sp->first_failed = (long)i;
        for (size_t k = 0; k < sp->n; k++) proc_kill(sp->procs[k], SIGTERM);
        sp->kill_timer = loop_add_timer(sp->loop, GROUP_GRACE_S, group_kill_all, sp);
    }
    if (sp->remaining == 0) {
        if (sp->kill_timer) loop_cancel_timer(sp->loop, sp->kill_timer);
        sp->kill_timer = 0;
        /* Last: the step may finish and drop the userdata before this returns. */
        if (sp->co) flow_step_resume(sp->co, 0);
    }
}

/* Starts every spec; on a failure stops those already started and returns false
 * with the reason in err.  The step tracks them only once all are running. */
static bool start_all(lua_State *L, struct spawn *sp, char *err, size_t errlen)
{
    for (size_t i = 0; i < sp->n; i++) {
        apply_deadline(L, &sp->specs[i].proc);
        sp->procs[i] = proc_spawn(sp->loop, &sp->specs[i].proc, spawn_exited, sp, err, errlen);
        if (!sp->procs[i]) {
            release_procs(sp);
            sp->remaining = 0;
            return false;
        }
        sp->remaining++;
    }
    if (sp->co)
        for (size_t i = 0; i < sp->n; i++) flow_step_track_proc(sp->co, sp->procs[i], 1);
    return true;
}

/* Blocking wait (not on a step coroutine): run the loop until all exited.
 * The children have their own process groups, so Ctrl-C is passed on to
 * them: SIGTERM at the first, SIGKILL at a second. */
static void block_on(struct spawn *sp)
{
    int seen = loop_interrupts(sp->loop), sent = 0;
    while (sp->remaining) {
        loop_run_once(sp->loop, -1);
        int extra = loop_interrupts(sp->loop) - seen;
        if (extra > sent && sent < 2) {
            sent = extra > 1 ? 2 : 1;
            for (size_t k = 0; k < sp->n; k++) proc_kill(sp->procs[k], sent > 1 ? SIGKILL : SIGTERM);
        }
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

/* spawn: the exit table plus stdout=.
 * spawn_group: {failed = index or nil, results = {{code=, signal=, stderr=, timed_out=}...}}. */
static int push_result(lua_State *L, struct spawn *sp)
{
    if (!sp->group) {
        push_exit(L, sp->procs[0]);
        size_t len;
        const char *out = proc_stdout(sp->procs[0], &len);
        lua_pushlstring(L, out, len);
        lua_setfield(L, -2, "stdout");
    } else {
        lua_createtable(L, 0, 2);
        if (sp->first_failed >= 0) {
            lua_pushinteger(L, sp->first_failed + 1);
            lua_setfield(L, -2, "failed");
        }
        lua_createtable(L, (int)sp->n, 0);
        for (size_t i = 0; i < sp->n; i++) {
            push_exit(L, sp->procs[i]);
            lua_rawseti(L, -2, (lua_Integer)i + 1);
        }
        lua_setfield(L, -2, "results");
    }
    release_procs(sp);               /* their pipes and pidfds now, not at the next collection */
    return 1;
}

static int spawn_continue(lua_State *L, int status, lua_KContext ctx)
{
    (void)status;
    return push_result(L, (struct spawn *)ctx);
}

/* The userdata is on the stack; starts its processes and waits for them. */
static int start_and_wait(lua_State *L, struct spawn *sp)
{
    char err[1024];
    sp->co = flow_step_can_yield(L) ? L : NULL;
    if (!start_all(L, sp, err, sizeof err)) {
        lua_pushnil(L);
        lua_pushstring(L, err);
        return 2;
    }
    if (sp->co) return lua_yieldk(L, 0, (lua_KContext)sp, spawn_continue);
    block_on(sp);
    return push_result(L, sp);
}

/* spawn{argv=, cwd=, log=, append=, header=, env={"K=V",...}, capture=, echo=, timeout=} -> result | nil, err
 * (the step's own timeout bounds it too) */
static int l_spawn(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    struct spawn *sp = new_spawn(L, 1, false);
    read_spec(L, 1, &sp->specs[0]);
    lua_getfield(L, 1, "capture");
    sp->specs[0].proc.capture_stdout = lua_toboolean(L, -1);
    lua_pop(L, 1);
    return start_and_wait(L, sp);
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

/* spawn_group({spec, spec, ...}) -> {failed =, results =} | nil, err
 * Reads every spec, then starts every process and waits for all; the first
 * failure stops the rest.  A bad spec raises before anything has started. */
static int l_spawn_group(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    size_t n = lua_rawlen(L, 1);
    if (n == 0) return luaL_error(L, "spawn_group: no processes");
    struct spawn *sp = new_spawn(L, n, true);
    for (size_t i = 0; i < n; i++) {
        if (lua_rawgeti(L, 1, (lua_Integer)i + 1) != LUA_TTABLE)
            return luaL_error(L, "spawn_group: process %d is not a table", (int)i + 1);
        read_spec(L, lua_gettop(L), &sp->specs[i]);
        lua_pop(L, 1);
    }
    return start_and_wait(L, sp);
}

static const luaL_Reg proc_funcs[] = {
    { "spawn_group", l_spawn_group },
    { "spawn", l_spawn },
    { "sleep", l_sleep },
    { NULL, NULL }
};

static const luaL_Reg no_methods[] = { { NULL, NULL } };

int luaopen_flow_proc(lua_State *L)
{
    flow_new_class(L, SPAWN_CLASS, no_methods, spawn_gc);
    luaL_newlib(L, proc_funcs);
    return 1;
}
