/* proc.h — child processes: posix_spawn of an argv (never a shell unless the
 * caller asks for /bin/sh), each in its own process group, with stdout/stderr
 * read by the event loop into a log file and a tail kept for error messages.
 * Everything it writes (log, tail, -v echo) is masked through ui_redact_span;
 * a secret cut in two by pipe reads is masked too.  Each process group is
 * known to the reaper (reaper.h), so it dies with flow. */
#ifndef FLOW_PROC_H
#define FLOW_PROC_H

#include "loop.h"
#include "step_wait.h"
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

struct proc_spec {
    char *const *argv;           /* argv[0] is looked up in PATH (command_path.h) */
    const char *cwd;             /* NULL: the engine's */
    const char *log_path;        /* stdout+stderr go here (truncated first), the file made on
                                    the first byte: no output, no file; NULL: discarded */
    bool log_append;             /* add to the log instead (a retry's attempt) */
    const char *log_header;      /* written to the log before the first byte, or NULL */
    char *const *env_extra;      /* "NAME=value" added to the environment, or NULL */
    bool capture_stdout;         /* keep stdout in memory (flow.sh) instead of the log */
    bool echo;                   /* also copy output to flow's stderr, whole lines, prefixed */
    const char *echo_prefix;
    double timeout_s;            /* > 0: after this long, proc_cancel(graceful) (proc_timed_out then says so) */
};

struct proc;
typedef void (*proc_exit_fn)(struct proc *p, void *arg);

/* Starts the process; `on_exit` runs from the loop once it has exited and its
 * output is drained.  NULL with a message if it could not be started. */
struct proc *proc_spawn(struct loop *loop, const struct proc_spec *spec,
                        proc_exit_fn on_exit, void *arg, char *err, size_t errlen);
/* Signals the whole process group. */
void proc_kill(struct proc *p, int sig);
/* Stops the whole process group: graceful is SIGTERM, then SIGKILL to the
 * group 5 s later, also when the process itself has exited by then (what it
 * left in its group is killed; a second graceful cancel does not restart the
 * grace period); forced is SIGKILL now.  Nothing once it has exited. */
void proc_cancel(struct proc *p, enum cancel_mode mode);
/* Sends now the SIGKILLs still due to the groups of cancelled processes that
 * have exited (all of them, or those of `loop`): for flow's exit, and before
 * the loop they wait on is freed. */
void proc_stop_lingering(struct loop *loop);
void proc_free(struct proc *p);

/* Exit code, or 128 + signal number when killed by a signal. */
int proc_exit_code(const struct proc *p);
int proc_term_signal(const struct proc *p);      /* 0 unless killed by a signal */
bool proc_timed_out(const struct proc *p);
/* The first open of or write to the log that failed (errno), or 0: the log is
 * incomplete. */
int proc_log_errno(const struct proc *p);
const char *proc_stderr_tail(const struct proc *p);  /* last lines of stderr */
const char *proc_stdout(const struct proc *p, size_t *len);  /* with capture_stdout */

#endif
