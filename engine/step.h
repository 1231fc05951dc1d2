/* step.h — a step's life, from the scheduler's start to its recorded end:
 * the journal's step_start line, attempts, retries after a back-off, the
 * timeout of each attempt, cancellation, the step_end line and the run's
 * summary (run.json).  What an attempt *is* (a Lua function called on its
 * inputs, a command launched) is the body's: a small vtable the caller
 * implements, as the scheduler's executor is.  Nothing here knows of Lua.
 *
 * The policy, in one place:
 * - a step whose start cannot be journaled does not run; one whose end cannot
 *   be journaled fails, even though its outputs are in place;
 * - a failed attempt is retried `retries` times, after 1 s, 2 s, 4 s … 60 s
 *   (a cancellable timer: Ctrl-C ends the wait and the step), unless the run
 *   was interrupted;
 * - journal lines are written in batches: when the oldest line held is 50 ms
 *   old, when 4,096 outputs wait to be flushed, when a step fails, or when
 *   nothing runs and nothing can start — 100,000 quick Lua steps make a few
 *   hundred writes, 10,000 quick commands a few hundred flushes;
 * - group commit: before a batch is written, the outputs its steps made are
 *   flushed (data of each file or tree, then its directory) in one job on the
 *   work pool; the journal then appends the batch and syncs it.  So after a
 *   power loss a step_end line on disk always names outputs that are on disk,
 *   and a producer's line comes before its consumers' (batches go in order).
 *   A step that succeeded is done for the scheduler at once — its dependents
 *   start on what is in place, not after the disk (but for those the
 *   scheduler's after_records names: remote jobs) — but the run is over only
 *   once every end is recorded (sched_hold), and one whose batch cannot be
 *   flushed or written fails then, and stops the run (-k or not): a batch is
 *   one write, so its other steps fail with it, saying they shared it with
 *   the step whose output could not be flushed.  A failed step keeps its
 *   slot until its end is recorded;
 * - once a step's end is recorded, its state record (step_record.h: its
 *   fingerprint, parts and output records, as its step_end line has them)
 *   goes into the state store, and the up-to-date check may use it for the
 *   step's consumers; the store is saved at the run's end;
 * - in a first run (uptodate.h: fingerprints deferred), a step run in this
 *   process has its fingerprint worked out, its lines made and its record
 *   put by the recorder, a thread of the runner's (serial.h), in the order
 *   the loop's thread started and ended the steps, while that thread runs
 *   the next; a quick one is done for its dependents as soon as it ended,
 *   its lines go with the next batch (one at least every 512 such steps),
 *   and whatever else reads the store waits for the recorder first
 *   (statestore.h's claim).  FLOW_DEBUG_NO_RECORDER=1: none.
 *
 * Every string written (step names, errors) goes through the UI's redactor
 * (ui.h); the outputs record comes from the body as JSON text already
 * redacted; the fingerprint parts are written as they come: hashes keyed by
 * dataset names, parameter keys and project file names (masking inside a hash
 * would corrupt it, and nothing there is a secret's value). */
#ifndef FLOW_STEP_H
#define FLOW_STEP_H

#include "journal.h"
#include "sched.h"
#include "work.h"

#include <stdbool.h>
#include <stddef.h>

struct step_runner;
struct state_out;

/* What step i is, for its life (the body knows the rest). */
struct step_spec {
    int retries;             /* further attempts after a failure, ≥ 0 */
    double timeout;          /* seconds per attempt; 0 = none */
    bool command;            /* runs a process: its end goes with the next batch, never ahead of its line */
};

/* How an attempt ended (step_attempt_done).  Strings are copied. */
struct step_outcome {
    bool ok;
    /* on success: the step's outputs record (a JSON object, redacted), or
     * NULL; and the files and trees it put in place, flushed before its end is
     * journaled */
    const char *outputs_json;
    /* outputs_json's outputs as the state record has them, when the body
     * had them as fields (step_record.h; valid for this call), or NULL */
    const struct state_out *outs;
    size_t n_outs;
    const char *const *paths;
    size_t n_paths;
    /* on failure: the message (its first line goes into the records), what to
     * print (NULL: nothing, as for an interruption), the stderr tail added to a
     * retry's warning (or NULL) */
    const char *message;
    const char *report;
    const char *stderr_tail;
    /* the failure without the step's name in front ("failed (exit code 1)"),
     * for the retry's warning, or NULL: the message's first line */
    const char *reason;
    bool timed_out;
    bool interrupted;
    bool final;                  /* a failure no retry can mend: none is made */
    /* either way: the exit code of the process it ran, if any, and the
     * remote job it ran as (a JSON object, redacted: {"backend", "job",
     * "status", "studio"}), or NULL */
    bool has_exit_code;
    int exit_code;
    const char *remote_json;
    /* on success: the metrics the step reported ({"name": number}) and the
     * series it logged ({"name": [numbers]}), JSON objects, or NULL */
    const char *metrics_json, *series_json;
};

/* The body: how to run one attempt of a step.  attempt() completes through
 * step_attempt_done, now or later from the loop.  cancel() stops the attempt
 * in flight, which still completes (as a failure).  The others are optional. */
struct step_body {
    void *ctx;
    void (*attempt)(void *ctx, struct step_runner *r, size_t i, int attempt);
    void (*cancel)(void *ctx, size_t i, enum cancel_mode mode);
    /* Asked when step i is ready: true if its outputs are up to date. */
    bool (*up_to_date)(void *ctx, size_t i);
    /* At its start: step i's fingerprint and its parts as JSON (malloc'd,
     * the runner frees them), or NULLs. */
    void (*fingerprint)(void *ctx, size_t i, char **fp, char **parts_json);
};

struct state_store;
struct utd;
struct step_runner_options {
    struct journal *journal;        /* NULL: nothing is journaled */
    struct work_pool *pool;         /* NULL: outputs are flushed on the loop's thread */
    /* Where a step's record goes once its end is recorded (NULL: nowhere),
     * and the up-to-date check told of it (NULL: none): step_record.h. */
    struct state_store *state;
    struct utd *check;
    const char *run_id;             /* written into each step_end */
    const struct step_spec *specs;  /* one per step of the DAG; copied */
    double backoff;                 /* the first retry's wait, doubled each time; 0: 1 s */
};

struct step_runner *step_runner_new(const struct dag *dag, struct loop *loop, const struct step_runner_options *opt,
                                    const struct step_body *body);
/* The scheduler is going before the run ended (a run released early): the
 * runner lets go of it.  Its flush timer stops, a flush on the pool completes
 * on its own (nothing written), and an attempt or back-off that ends later is
 * dropped; step_runner_free still follows. */
void step_runner_detach(struct step_runner *r);
void step_runner_free(struct step_runner *r);

/* The executor to hand sched_new; the runner learns the scheduler from it. */
struct sched_executor step_runner_executor(struct step_runner *r);

/* The body reports attempt `attempt` of step i over. */
void step_attempt_done(struct step_runner *r, size_t i, const struct step_outcome *o);

/* Monotonic time by which the attempt in flight must end; 0: no timeout. */
double step_runner_deadline(const struct step_runner *r, size_t i);
/* The attempt in flight (or the last one), from 1; 0 before the first. */
int step_runner_attempt(const struct step_runner *r, size_t i);
/* Step i's fingerprint (from the body, at its start), until its record is put; or NULL. */
const char *step_runner_fingerprint(struct step_runner *r, size_t i);
/* The number of steps (the DAG's). */
size_t step_runner_n_steps(const struct step_runner *r);
/* Whether any step started. */
bool step_runner_any_started(const struct step_runner *r);

/* After sched_run: flushes what is held with a run_end line carrying `code`,
 * and keeps each step's final state for the summary.  0, or -1 with why the
 * journal could not take it (the run's record is then incomplete). */
int step_runner_finish(struct step_runner *r, const struct sched *s, int code, char *err, size_t errlen);

/* The metrics of step i when it did not run (up to date: its record's), as
 * step_outcome's metrics_json and series_json, for run.json. */
void step_runner_set_metrics(struct step_runner *r, size_t i, const char *metrics_json, const char *series_json);

/* run.json, written (streamed) to `path` atomically: the run's id, status,
 * code, environment (NULL: none), start and metrics, and every step's name,
 * state, times, attempts, exit code, timeout, error, remote job and metrics
 * (null where they do not apply; "series" only for a step that logged one).  Indented as cJSON does for up to 1,000 steps, compact beyond. */
struct step_summary {
    const char *run_id, *status, *env;
    const char *metrics_json;       /* the run's metrics ({"name": number}), or NULL */
    const char *name;               /* what flow.run's caller named the run (a sweep's trial), or NULL */
    int code;
    double started;
};
int step_runner_write_summary(const struct step_runner *r, const char *path, const struct step_summary *sum,
                              char *err, size_t errlen);

#endif
