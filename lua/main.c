/* main.c — the flow binary: make the engine state, hand argv to the stdlib's
 * command line (flow.cli), exit with what it returns.  The same binary is the
 * reaper that stops a killed flow's steps (reaper.h), in a mode no user types. */
#include "flowlua.h"
#include "loop.h"
#include "proc.h"
#include "reaper.h"
#include "ui.h"

#include <errno.h>
#include <fcntl.h>
#include <lauxlib.h>
#include <malloc.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static bool stdout_was_closed;

/* Descriptors 0, 1 and 2 open before anything else is: started with one
 * closed (`flow list >&-`), flow's first open file would take its number,
 * and what it prints would go into that file (a lock, a journal).  A closed
 * stdout becomes /dev/full, so that printing fails and says so; the others
 * /dev/null. */
static void open_standard_fds(void)
{
    for (int fd = 0; fd <= 2; fd++) {
        if (fcntl(fd, F_GETFD) >= 0 || errno != EBADF) continue;
        int got = open(fd == 1 ? "/dev/full" : "/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
        if (got >= 0 && got != fd) close(got);            /* (cannot be: fd is the lowest free) */
        if (fd == 1) stdout_was_closed = true;
    }
}

/* A write to a pipe nobody reads: noted, for check_stdout (errno is long
 * gone by then; the write itself fails with EPIPE). */
static volatile sig_atomic_t pipe_closed;
static void note_closed_pipe(int sig) { (void)sig; pipe_closed = 1; }

/* Whether stdout is a pipe or a socket: only then is a SIGPIPE its reader's
 * (one may have come from a step's io.popen). */
static bool stdout_is_pipe(void)
{
    struct stat st;
    return fstat(1, &st) == 0 && (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode));
}

/* What flow printed that could not be written (a full disk, a closed
 * descriptor: `flow viz > /dev/full`) is an error, as it is for coreutils,
 * not a silent exit 0; a reader that went away (`flow runs | head`) is not. */
static int check_stdout(int code)
{
    errno = 0;
    bool failed = fflush(stdout) != 0 || ferror(stdout);
    if (!failed || errno == EPIPE || (pipe_closed && stdout_is_pipe())) return code;   /* its reader went away */
    ui_error("cannot write to standard output: %s", stdout_was_closed ? "it is closed"
             : errno ? strerror(errno) : "a write failed");
    return code == 0 ? 2 : code;
}


int main(int argc, char **argv)
{
    /* One malloc arena for every thread.  flow's threads (the work pool,
     * the journal's syncer, a first run's recorder: engine/step.c) take
     * over memory the loop's thread allocated and allocate what it keeps:
     * with an arena of their own, what one freed the other could not
     * reuse, 20 MB of the peak of a first run of 100,000 Lua steps, for no
     * time gained (each thread's cache of small blocks spares most calls
     * the arena's lock anyway). */
    mallopt(M_ARENA_MAX, 1);
    open_standard_fds();
    if (argc >= 2 && argc <= 3 && strcmp(argv[1], REAPER_ARG) == 0)
        return reaper_main(argc == 3 ? (pid_t)strtol(argv[2], NULL, 10) : 0);
    if (access("/proc/self/exe", X_OK) == 0) reaper_init("/proc/self/exe");
    /* A reader that goes away (`flow run | head`, Ctrl-C reaching `tee` too)
     * must not kill flow before it records its run: a write to it fails with
     * EPIPE instead (check_stdout).  A handler, not SIG_IGN: an exec resets a
     * handler, so a step's processes (io.popen's too) still get the default. */
    struct sigaction pipe_sa = { .sa_handler = note_closed_pipe };
    sigemptyset(&pipe_sa.sa_mask);
    sigaction(SIGPIPE, &pipe_sa, NULL);
    char err[256];
    lua_State *L = flow_state_new(err, sizeof err);
    if (!L) { fprintf(stderr, "flow: %s\n", err); return 2; }
    ui_init(UI_NORMAL, UI_PROGRESS_AUTO);
    int code = 2;
    lua_getglobal(L, "require");
    lua_pushliteral(L, "flow.cli");
    if (flow_pcall(L, 1, 1) == LUA_OK) {
        lua_getfield(L, -1, "main");
        lua_createtable(L, argc, 0);
        for (int i = 1; i < argc; i++) {
            lua_pushstring(L, argv[i]);
            lua_rawseti(L, -2, i);
        }
        if (flow_pcall(L, 1, 1) == LUA_OK) code = (int)luaL_optinteger(L, -1, 0);
        else ui_error("internal error: %s", lua_tostring(L, -1));
    } else {
        ui_error("internal error loading the stdlib: %s", lua_tostring(L, -1));
    }
    /* Interrupted by a closed terminal: 128 + SIGHUP, as a shell reports it. */
    if (code == 130 && loop_first_signal(flow_state_loop(L)) == SIGHUP) code = 129;
    ui_flush();                   /* (progress lines kept: engine/ui.c) */
    code = check_stdout(code);
    proc_stop_lingering(NULL);    /* a stopped step's group is not left to its grace period */
#if defined(__SANITIZE_ADDRESS__) || defined(FLOW_FREE_AT_EXIT)
    flow_state_close(L);          /* every object freed, so that a leak shows */
    reaper_stop();
    return code;
#else
    /* Freeing a large run's Lua heap object by object takes longer than the
     * run's own end (0.5 s of a no-op over 100,000 steps), and the kernel
     * takes it back at once.  Nothing is lost by skipping it: everything
     * flow writes is written and synced by now (a run survives kill -9 at
     * any moment anyway), and a process still running is the reaper's. */
    fflush(NULL);
    reaper_stop();
    _exit(code);
#endif
}
