/* l_proc.c — module flow.proc: start processes and wait for them.  On a step's
 * coroutine the wait yields to the event loop, so other steps go on; anywhere
 * else (top level of a script, the REPL) it runs the loop until the exit. */
#include "flowlua.h"
#include "proc.h"
#include "step_wait.h"
#include "util.h"

#include <lauxlib.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define SPAWN_CLASS "flow.Spawn"
#define SLEEP_CLASS "flow.Sleep"

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
    size_t n;
    bool group;                    /* the first rank that fails stops the others */
    struct step_wait *wait;        /* the processes, once started; NULL once reported */
    bool done;                     /* every one has exited */
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
    step_wait_free(sp->wait);        /* kills and reaps one still running */
    sp->wait = NULL;
}

static int spawn_gc(lua_State *L)
{
    struct spawn *sp = luaL_checkudata(L, 1, SPAWN_CLASS);
    release_procs(sp);
    for (size_t i = 0; i < sp->n; i++) spec_release(&sp->specs[i]);
    free(sp->specs);
    sp->specs = NULL;
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
    sp->specs = xcalloc(n, sizeof *sp->specs);
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

static void spawn_done(struct step_wait *w, void *arg)
{
    struct spawn *sp = arg;
    sp->done = true;
    /* Last: the step may finish and drop the userdata before this returns. */
    if (sp->co) flow_step_wake(sp->co, w);
}

/* Starts every spec (a group stops its other ranks once one fails); false
 * with the reason in err if one could not be started. */
static bool start_all(lua_State *L, struct spawn *sp, char *err, size_t errlen)
{
    struct proc_spec *specs = xmalloc(sp->n * sizeof *specs);     /* no Lua call until freed */
    for (size_t i = 0; i < sp->n; i++) {
        specs[i] = sp->specs[i].proc;
        apply_deadline(L, &specs[i]);
    }
    sp->wait = step_wait_procs(sp->loop, specs, sp->n, sp->group, spawn_done, sp, err, errlen);
    free(specs);
    if (!sp->wait) return false;
    if (sp->co) flow_step_wait(sp->co, sp->wait);
    return true;
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
        struct proc *p = step_wait_procs_proc(sp->wait, 0);
        push_exit(L, p);
        size_t len;
        const char *out = proc_stdout(p, &len);
        lua_pushlstring(L, out, len);
        lua_setfield(L, -2, "stdout");
    } else {
        lua_createtable(L, 0, 2);
        long failed = step_wait_procs_first_failed(sp->wait);
        if (failed >= 0) {
            lua_pushinteger(L, failed + 1);
            lua_setfield(L, -2, "failed");
        }
        lua_createtable(L, (int)sp->n, 0);
        for (size_t i = 0; i < sp->n; i++) {
            push_exit(L, step_wait_procs_proc(sp->wait, i));
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
    step_wait_block(sp->loop, sp->wait, &sp->done);    /* its processes have their own groups: Ctrl-C is passed on */
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

/* A timer a step sleeps on, owned by a userdata on the step's stack while it
 * waits: its __gc frees a timer the step never woke from. */
static int sleep_gc(lua_State *L)
{
    struct step_wait **box = luaL_checkudata(L, 1, SLEEP_CLASS);
    step_wait_free(*box);
    *box = NULL;
    return 0;
}

static void sleep_done(struct step_wait *w, void *arg)
{
    flow_step_wake(arg, w);
}

static int sleep_continue(lua_State *L, int status, lua_KContext ctx)
{
    (void)L; (void)status;
    struct step_wait **box = (struct step_wait **)ctx;
    step_wait_free(*box);
    *box = NULL;
    return 0;
}

/* sleep(seconds): on a step's coroutine, yields to the loop (stopping the
 * step ends the sleep at once); elsewhere blocks (still waking for Ctrl-C). */
static int l_sleep(lua_State *L)
{
    double s = luaL_checknumber(L, 1);
    if (s <= 0) return 0;
    if (flow_step_can_yield(L)) {
        struct step_wait **box = lua_newuserdatauv(L, sizeof *box, 0);
        *box = NULL;
        luaL_setmetatable(L, SLEEP_CLASS);
        *box = step_wait_timer(flow_state_loop(L), s, sleep_done, L);
        flow_step_wait(L, *box);
        return lua_yieldk(L, 0, (lua_KContext)box, sleep_continue);
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
    flow_new_class(L, SLEEP_CLASS, no_methods, sleep_gc);
    luaL_newlib(L, proc_funcs);
    return 1;
}
