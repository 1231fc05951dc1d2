/* sched.h — runs a finalized DAG: starts ready steps in declaration order, at
 * most `jobs` at once, through an executor that knows how to run one step.
 * The executor is a vtable (as Redis's engine interface is), so this file knows
 * nothing of Lua: the Lua side implements it with one coroutine per step. */
#ifndef FLOW_SCHED_H
#define FLOW_SCHED_H

#include "dag.h"
#include "loop.h"
#include <stdbool.h>

enum step_state {
    STEP_WAITING,       /* some input not ready yet */
    STEP_READY,
    STEP_RUNNING,
    STEP_DONE,
    STEP_FAILED,
    STEP_NOT_RUN,       /* upstream failed, or the run stopped first */
    STEP_SKIPPED,       /* not selected */
    STEP_UP_TO_DATE,    /* selected, but its last run's outputs still hold */
    STEP_INTERRUPTED,   /* stopped by Ctrl-C/SIGTERM while it ran: not a failure */
};

struct sched;

struct sched_executor {
    void *ctx;
    /* Start step `i`.  Either finish it now (call sched_step_done before
     * returning) or later from a loop callback. Returns 0, or -1 if it could
     * not be started (the executor has reported why). */
    int (*start)(void *ctx, struct sched *s, size_t i);
    /* Stop a running step (Ctrl-C, a failure elsewhere): signal its processes.
     * The executor still calls sched_step_done when they are gone. */
    void (*stop)(void *ctx, struct sched *s, size_t i, int sig);
    /* Optional: asked when step `i` is ready, before it takes a job slot.
     * True means its outputs are up to date: it is not started, and its
     * dependents go on as if it had run. */
    bool (*up_to_date)(void *ctx, struct sched *s, size_t i);
};

/* Progress reports, for the UI.  An up-to-date step is reported finished
 * without having started. */
struct sched_observer {
    void *ctx;
    void (*step_started)(void *ctx, const struct sched *s, size_t i);
    void (*step_finished)(void *ctx, const struct sched *s, size_t i);
};

struct sched_options {
    int jobs;                /* ≥ 1 */
    bool keep_going;         /* run everything that does not depend on a failure */
    const bool *selected;    /* NULL: all steps; else steps to run (others SKIPPED) */
};

struct sched *sched_new(const struct dag *dag, struct loop *loop, const struct sched_options *opt,
                        const struct sched_executor *ex, const struct sched_observer *obs);
void sched_free(struct sched *s);

/* Runs until every step is done, failed or not run; returns 0 if all selected
 * steps succeeded, 1 if any failed, 130 if interrupted. */
int sched_run(struct sched *s);
void sched_step_done(struct sched *s, size_t i, bool ok);

const struct dag *sched_dag(const struct sched *s);
struct loop *sched_loop(const struct sched *s);
enum step_state sched_state(const struct sched *s, size_t i);
double sched_elapsed(const struct sched *s, size_t i);
bool sched_interrupted(const struct sched *s);
const char *step_state_name(enum step_state st);

#endif
