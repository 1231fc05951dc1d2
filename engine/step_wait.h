/* step_wait.h — something a running step is waiting on: a process, the ranks
 * of a distributed step (a process group), a timer, a job on the work pool;
 * next an HTTP transfer or a job on a remote backend.  Every kind is one
 * object with the same two operations, as xmake's coroutine scheduler has one
 * kind of wait: the step that waits keeps a list of them, and stopping the
 * step (Ctrl-C, its timeout) is `cancel(mode)` on each, whatever it is.
 *
 * The contract every kind keeps:
 * - cancel never completes the wait synchronously: its completion callback
 *   always runs later, from the loop.  So a list can be cancelled while it is
 *   walked, and the canceller never re-enters the waiting step.
 * - cancel may be called again (the second Ctrl-C escalates graceful to
 *   forced), and after the wait is complete (it then does nothing).
 * - a wait is owned by whoever made it; step_wait_free detaches it from its
 *   list and releases it (a process still running is killed and reaped).
 *
 * Nothing here knows of Lua. */
#ifndef FLOW_STEP_WAIT_H
#define FLOW_STEP_WAIT_H

#include "loop.h"
#include <stdbool.h>
#include <stddef.h>

/* How to stop what a step waits on.  A remote backend's cancel is an
 * asynchronous request: its graceful and forced modes map onto the backend's
 * own, not onto signals. */
enum cancel_mode {
    CANCEL_GRACEFUL,     /* processes: SIGTERM now, SIGKILL after a grace period; timers fire now */
    CANCEL_FORCED,       /* processes: SIGKILL now; timers fire now */
};

struct step_wait;
struct step_wait_list;

struct step_wait_ops {
    const char *kind;                                     /* "process", "timer", ... */
    void (*cancel)(struct step_wait *w, enum cancel_mode mode);
    void (*free)(struct step_wait *w);
};

/* Embedded at the start of each kind's own struct. */
struct step_wait {
    const struct step_wait_ops *ops;
    struct step_wait_list *list;          /* the step waiting on it, or NULL */
    struct step_wait *prev, *next;
};

/* A step's waits (intrusive: adding or removing one allocates nothing). */
struct step_wait_list {
    struct step_wait *first;
    size_t n;
};

void step_wait_init(struct step_wait *w, const struct step_wait_ops *ops);
/* A wait is on at most one list; attaching it again moves it. */
void step_wait_attach(struct step_wait_list *list, struct step_wait *w);
void step_wait_detach(struct step_wait *w);
void step_wait_cancel(struct step_wait *w, enum cancel_mode mode);
void step_wait_free(struct step_wait *w);            /* NULL is fine */
void step_wait_list_cancel(struct step_wait_list *list, enum cancel_mode mode);
/* Detaches every wait still listed (a step that ends while a wait it started
 * is still in flight: its owner frees it later). */
void step_wait_list_clear(struct step_wait_list *list);

/* Drives the loop until *done (set by w's completion) for a caller that is
 * not a step and so cannot yield: Ctrl-C cancels w gracefully, a second one
 * forcefully.  The wait completes either way. */
void step_wait_block(struct loop *loop, struct step_wait *w, const bool *done);

/* ---- the kinds --------------------------------------------------------- */

typedef void (*step_wait_done_fn)(struct step_wait *w, void *arg);

/* A timer: done(w, arg) after `seconds`, or at the next loop turn once
 * cancelled (a retry's back-off or flow.proc.sleep ends early; the step sees
 * its cancellation when it resumes). */
struct step_wait *step_wait_timer(struct loop *loop, double seconds, step_wait_done_fn done, void *arg);
bool step_wait_timer_cancelled(const struct step_wait *w);

/* Processes: one (flow.proc.spawn) or a group (the ranks of a distributed
 * step), started from `specs` (struct proc_spec, proc.h).  done(w, arg) once
 * every one of them has exited and its output is drained.  In a group
 * (`group` true) the first process that fails stops the others, gracefully:
 * the ranks of a collective cannot finish without it.  NULL with a message
 * if one could not be started (those already started are killed and reaped). */
struct proc_spec;
struct proc;
struct step_wait *step_wait_procs(struct loop *loop, const struct proc_spec *specs, size_t n, bool group,
                                  step_wait_done_fn done, void *arg, char *err, size_t errlen);
size_t step_wait_procs_count(const struct step_wait *w);
struct proc *step_wait_procs_proc(const struct step_wait *w, size_t i);
long step_wait_procs_first_failed(const struct step_wait *w);      /* index, or -1 */
size_t step_wait_procs_running(const struct step_wait *w);

/* A job on the work pool (work.h), such as moving an output into place: a
 * struct step_wait embedded in the job, initialised with these ops; the job's
 * owner holds its memory (the pool thread writes to it until its completion
 * runs), so free releases nothing.  The work is bounded file-system work that
 * cannot be stopped half-way (a rename, an fsync): cancel lets it finish, and
 * the step sees its cancellation when the completion resumes it. */
extern const struct step_wait_ops step_wait_job_ops;

#endif
