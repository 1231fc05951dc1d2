/* sched.h — runs a finalized DAG: starts ready steps in declaration order,
 * through an executor that knows how to run one step.  The executor is a
 * vtable (as Redis's engine interface is), so this file knows nothing of Lua:
 * the Lua side implements it with one coroutine per step.
 *
 * Pools, as ninja has them: every step belongs to one pool and holds one of
 * its slots while it runs, so a pool of size N runs at most N of its steps at
 * once, whatever the other pools do.  Which pools there are, and which step
 * goes in which, is the caller's to say (flow: "local" for command processes,
 * sized by -j; "lua" for Lua steps; "remote" for jobs a remote backend runs,
 * unbounded unless configured; and the named pools of flow.yml).  A step
 * waiting in a full pool never holds back a ready step of another pool. */
#ifndef FLOW_SCHED_H
#define FLOW_SCHED_H

#include "dag.h"
#include "loop.h"
#include "step_wait.h"
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
    /* Stop a running step (Ctrl-C): cancel what it waits on, in `mode` (see
     * step_wait.h).  The first Ctrl-C cancels gracefully, a second one by
     * force.  The executor still calls sched_step_done once the step ends. */
    void (*cancel)(void *ctx, struct sched *s, size_t i, enum cancel_mode mode);
    /* Optional: asked when step `i` is ready, before it takes a pool slot.
     * True means its outputs are up to date: it is not started, and its
     * dependents go on as if it had run. */
    bool (*up_to_date)(void *ctx, struct sched *s, size_t i);
    /* Optional: a step failed and the run stops (no keep_going): what waits
     * between a step's attempts may give up; a running attempt goes on. */
    void (*stopping)(void *ctx, struct sched *s);
    /* Optional: nothing runs and nothing can start, but the run still waits
     * on ends held back (sched_hold): finish them now rather than later. */
    void (*quiet)(void *ctx, struct sched *s);
};

/* Progress reports, for the UI.  An up-to-date step is reported finished
 * without having started. */
struct sched_observer {
    void *ctx;
    void (*step_started)(void *ctx, const struct sched *s, size_t i);
    void (*step_finished)(void *ctx, const struct sched *s, size_t i);
    /* Optional: step i, reported finished (done), failed after all
     * (sched_step_failed_late). */
    void (*step_failed_late)(void *ctx, const struct sched *s, size_t i);
};

#define SCHED_UNBOUNDED 0

struct sched_pool {
    const char *name;        /* for messages; not copied: it outlives the scheduler */
    size_t size;             /* slots, ≥ 1, or SCHED_UNBOUNDED */
};

struct sched_options {
    int jobs;                /* ≥ 1: the one pool's size when `pools` is NULL */
    bool keep_going;         /* run everything that does not depend on a failure */
    const bool *selected;    /* NULL: all steps; else steps to run (others SKIPPED) */
    const struct sched_pool *pools;   /* NULL: one pool, "local", of `jobs` slots */
    size_t n_pools;
    const size_t *pool_of;   /* per step, the index of its pool (< n_pools); NULL: pool 0 */
    /* NULL, or per step: it starts only once the steps it depends on have
     * their ends recorded, not merely done (sched_hold): a remote job, which
     * --resume adopts only when what it was given is on record */
    const bool *after_records;
};

struct sched *sched_new(const struct dag *dag, struct loop *loop, const struct sched_options *opt,
                        const struct sched_executor *ex, const struct sched_observer *obs);
void sched_free(struct sched *s);

/* Runs until every step is done, failed or not run; returns sched_code. */
int sched_run(struct sched *s);
/* The same in steps, for several runs on one loop (flow.spawn): begin, then
 * after each turn of the loop poll, which starts what is ready and says
 * whether the run is over (its states are then final).  A poll starts steps
 * for at most 10 ms: steps that end inside their start (quick Lua functions)
 * would otherwise run a whole chain inside it, the loop's timers, signals
 * and pool completions waiting; it then arms a timer due at once, so that
 * the loop turns without waiting, and the next poll goes on. */
void sched_begin(struct sched *s);
bool sched_poll(struct sched *s);
/* 0 if all selected steps succeeded, 1 if any failed, 130 if interrupted. */
int sched_code(const struct sched *s);
void sched_step_done(struct sched *s, size_t i, bool ok);
/* A step may be done for its dependents before its end is recorded (its
 * outputs made durable and its journal line written, engine/step.c):
 * sched_hold(i) before its sched_step_done says so, sched_unhold(i) that it
 * is recorded (or failed late, after sched_step_failed_late).  The run is
 * not over while an end is held, and a dependent marked in after_records
 * waits for its unhold. */
void sched_hold(struct sched *s, size_t i);
void sched_unhold(struct sched *s, size_t i);
bool sched_held(const struct sched *s, size_t i);
/* Step i, done, could not have its end recorded: it failed after all, and
 * the run stops (keep_going or not: what failed is the disk, not a step).
 * Dependents it had already let start run on; no other step starts. */
void sched_step_failed_late(struct sched *s, size_t i);

const struct dag *sched_dag(const struct sched *s);
struct loop *sched_loop(const struct sched *s);
enum step_state sched_state(const struct sched *s, size_t i);
double sched_elapsed(const struct sched *s, size_t i);
bool sched_interrupted(const struct sched *s);
const char *step_state_name(enum step_state st);
/* How many of pool p's steps run now, and the most that ever ran at once. */
size_t sched_pool_running(const struct sched *s, size_t p);
size_t sched_pool_peak(const struct sched *s, size_t p);

#endif
