/* uptodate.h — the up-to-date check of steps, without Lua.
 *
 * What a step's fingerprint depends on splits in two: the parts fixed for
 * the whole run (its command text or its Lua function's hash, the hashes of
 * the parameters it reads, its distribution and outputs parts, the project
 * files its command names), which the stdlib computes once when it plans the run and
 * hands over here as plain data; and the parts only known when the step is
 * ready (the content of those files, the hashes of its inputs, its outputs
 * as they are now), which this file finds itself: project files and outputs
 * through the hash cache, inputs from the state records of their producers.
 * One fp_combine (fingerprint.h) over them, compared with the step's record.
 *
 * The check only ever says "up to date" when it is sure, and "runs" only
 * when the step has no record at all (then its fingerprint, computed here,
 * goes into the step's new record); "cannot tell" (a producer whose record
 * is not this run's, an input or output that needs a long read, a value
 * that could not be cached, a record that no longer holds) sends the step
 * to the stdlib's full check, which explains why it runs.  Nothing here
 * knows Lua. */
#ifndef FLOW_UPTODATE_H
#define FLOW_UPTODATE_H

#include "fingerprint.h"
#include <stdbool.h>
#include <stddef.h>

struct hashcache;
struct state_store;

#define UTD_NO_PRODUCER ((size_t)-1)

/* An input dataset: made by step `producer` of this run (its hash is that
 * step's record's), or from outside the run, with a known `hash` or a file
 * or folder at `path` hashed now. */
struct utd_input {
    struct fp_str dataset;
    size_t producer;
    const char *hash, *path;       /* NULL when not known / not a path */
};

/* What the stdlib computed for step i before the run. */
struct utd_step {
    const char *name;                       /* its state record's key */
    struct fp_str code, dist, outputs;      /* dist {NULL, 0}: not distributed */
    struct fp_kv *params;                   /* key -> hash */
    size_t n_params;
    const char *const *files;               /* project files its command names (relative paths) */
    size_t n_files;
    const struct utd_input *inputs;
    size_t n_inputs;
    const char *const *outputs_named;       /* its output datasets */
    size_t n_outputs;
};

struct utd;
struct stat_prefetch;

/* hc and store must outlive the checker. */
struct utd *utd_new(size_t n_steps, struct hashcache *hc, struct state_store *store);
void utd_free(struct utd *u);

/* The files of the store's records are stat-ed ahead on a thread of their
 * own (stat_prefetch.h) until utd_prefetch_stop, which must come before the
 * store changes (a step's record put) or goes; utd_free stops it too.
 * utd_prefetch_adopt takes over one already started on this store (the
 * preload's, started once the script had run): utd_prefetch_outputs then
 * starts none. */
void utd_prefetch_adopt(struct utd *u, struct stat_prefetch *p);
void utd_prefetch_outputs(struct utd *u);
void utd_prefetch_stop(struct utd *u);

/* Describes step i (everything copied but its name, which is the run's graph's
 * and must outlive the check, as utd_name_step's); a step never described is
 * never up to date here. */
void utd_set_step(struct utd *u, size_t i, const struct utd_step *spec);

/* Names step i (its state record's key) without describing it: a producer
 * of a described step's input that this check does not decide itself.  The
 * name is not copied: a run of 100,000 steps has its names once, in its graph. */
void utd_name_step(struct utd *u, size_t i, const char *name);

/* Step i keeps its memory values between runs (it has a timeout, retries, a
 * pool, metrics, ranks: flow.values): a record whose value it did not keep
 * does not stand, the step runs again to keep it. */
void utd_keeps_values(struct utd *u, size_t i);

/* Step i's record in the store, with fingerprint fp, is this run's (it ran
 * and was recorded, or was found up to date): its outputs' hashes can stand
 * for its consumers' for as long as the store holds that record (another
 * run at once may replace it).  The check marks the steps it passes itself;
 * step.c marks a step once its record is put, and incremental.lua's
 * Run:up_to_date (check:fresh(i, fp), lua/l_uptodate.c) one its Lua check
 * finds up to date. */
void utd_mark_fresh(struct utd *u, size_t i, const char *fp);

/* Step i ran in this run and succeeded, with the output records of
 * outputs_json (its end's): its consumers may take their inputs' hashes
 * from these before its record is put, which waits for its outputs to be
 * flushed (step.c's group commit), while they already run. */
void utd_mark_ran(struct utd *u, size_t i, const char *outputs_json);

/* Step i's fingerprint as it is now, into hex: 0, or 1 when this check
 * cannot tell (then hex is unset). */
int utd_fingerprint(struct utd *u, size_t i, char hex[SHA256_HEX_SIZE]);

enum utd_verdict {
    UTD_CANNOT_TELL,       /* the stdlib's full check decides, and says why */
    UTD_UP_TO_DATE,        /* its fingerprint is its record's and each output is as that record says */
    UTD_NO_RECORD,         /* it has no record, so it runs; its fingerprint is known (utd_take_fingerprint) */
};

/* Whether step i is up to date; asked once (its description is freed then:
 * a second question gets UTD_CANNOT_TELL).  UTD_UP_TO_DATE marks it fresh and passed.
 * UTD_NO_RECORD (a first run, or a new step) keeps the fingerprint and its
 * parts, so a step that was never run costs the stdlib nothing either. */
enum utd_verdict utd_decide(struct utd *u, size_t i);

/* Decides step i now, and keeps the verdict for utd_decide, when every
 * producer of its inputs in the run is fresh already (a step whose producer
 * will run must wait for that run's outputs): the describer calls it as it
 * goes, producers first, so that a no-op rerun holds one description at a
 * time rather than all of them until the scheduler asks (3 MB of 10,000
 * command steps: the run's peak).  Not a step without a record, whose
 * fingerprint would wait in memory until it starts.  Only for a check the
 * scheduler will ask about every described step (not with --force).
 * Whether it decided now: always false while utd_early_begin's thread runs
 * (the step is queued for it). */
bool utd_decide_early(struct utd *u, size_t i);
/* Asks the memory for where step i, named `name`, will have its record
 * looked up (a pass over the steps calls it a few steps ahead of describing
 * them: each lookup was a cache miss in a map of 100,000 names). */
void utd_prefetch_record(const struct utd *u, size_t i, const char *name);

/* From utd_early_begin to utd_early_end, utd_decide_early queues the step
 * for a thread of its own, which decides the queued steps in order while
 * the caller describes the next ones (a no-op rerun's check, half of it
 * fingerprints, on two cores); utd_decide_early returns false then, and a
 * queued step is the thread's until utd_early_end, which waits for every
 * decision (utd_free ends it too).  Steps are queued producers first (the
 * graph's order), and nothing describes or names a step whose consumer is
 * queued: the thread reads a queued step's producers.  Without a thread, decisions are made
 * at once as before. */
void utd_early_begin(struct utd *u);
void utd_early_end(struct utd *u);

/* Whether step i was decided up to date early (utd_decide_early), its
 * verdict not asked for yet: after utd_early_end, the run will not run it. */
bool utd_early_up_to_date(const struct utd *u, size_t i);

/* Whether utd_decide said step i is up to date; that it has no record. */
bool utd_passed(const struct utd *u, size_t i);
bool utd_no_record(const struct utd *u, size_t i);

/* The fingerprint and its shortened parts (a JSON object, as the stdlib's
 * fingerprint.short makes them: each hash's first FP_SHORT hex digits, the
 * outputs part hashed) of a step utd_decide found without a record, handed
 * over once (the caller frees both): false (both NULL) for any other step. */
bool utd_take_fingerprint(struct utd *u, size_t i, char **fp, char **parts_json);

/* ---- a first run's fingerprints, worked out off the loop's thread ----
 *
 * In a run whose store held no record (a first run) and holds only those
 * of its own steps since, a step without a record need not wait for its
 * fingerprint to start: step.c's recorder works it out, on a thread of its
 * own, after its producers' records are put.  From utd_defer_begin (true:
 * the store is such) to utd_defer_end, the recorder owns the store (its
 * claim: statestore.h) and the check's records and fingerprints; whoever
 * else would read them claims the store first: utd_decide does for any
 * step it does not defer, the Lua side (lua/l_uptodate.c: utd_claim, and
 * lua/l_state.c) for each use. */
bool utd_defer_begin(struct utd *u);
void utd_defer_end(struct utd *u);
void utd_claim(struct utd *u);

/* utd_decide, but a step deferring allows (its inputs all made by this
 * run's steps whose outputs were hashed, or known: utd_outputs_hashed; no
 * project file to hash) is UTD_NO_RECORD with its fingerprint deferred. */
enum utd_verdict utd_decide_may_defer(struct utd *u, size_t i);
/* Whether step i's fingerprint waits for utd_take_deferred_fingerprint. */
bool utd_deferred(const struct utd *u, size_t i);
/* Step i's deferred fingerprint and parts (the caller frees both), worked
 * out now, by the store's owner, as utd_decide would have; NULLs when its
 * inputs' hashes are not to be had after all (a producer's record refused). */
void utd_take_deferred_fingerprint(struct utd *u, size_t i, char **fp, char **parts_json);
/* Step i ran in this run, and each of its outputs has a hash its consumers
 * may take (no value that could not be cached): they may be deferred. */
void utd_outputs_hashed(struct utd *u, size_t i);
/* Whether each output record of outputs_json (a step's end's) has such a hash. */
bool utd_outputs_json_hashed(const char *outputs_json);

/* no_record counts the deferred steps too (FLOW_DEBUG_UPTODATE's numbers) */
struct utd_stats { size_t passed, undecided, no_record, deferred; };
struct utd_stats utd_stats(const struct utd *u);

#endif
