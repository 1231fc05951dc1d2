/* step.c — see step.h.  Each step has a `life`: its phase, attempt, times
 * and what its end will say.  The journal's lines wait in `held` until a
 * flush; a flush that carries outputs to make durable first runs one job on
 * the work pool (fdatasync of each output, fsync of its directory) and
 * appends the lines from that job's completion, on the loop's thread, so the
 * order on disk is always: outputs, then the line naming them. */
#include "step.h"
#include "json_text.h"
#include "commit.h"
#include "nofollow.h"
#include "serial.h"
#include "statestore.h"
#include "step_record.h"
#include "ui.h"
#include "uptodate.h"
#include "util.h"

#include <cjson/cJSON.h>

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define FLUSH_EVERY 0.05        /* seconds: the most a kill loses of the journal */
#define HELD_LINES_MAX (64 * 1024)   /* bytes of journal lines an up-to-date step may leave held */
#define HELD_PATHS_MAX 4096     /* outputs a batch may hold before it is flushed, whatever the time */
#define BACKOFF_MAX 60.0
#define PRETTY_MAX 1000         /* run.json is indented up to this many steps */
#define RECORDED_MAX 512        /* quick steps the recorder may have to record before a flush, whatever the time */

enum phase { PHASE_IDLE, PHASE_ATTEMPT, PHASE_BACKOFF, PHASE_ENDING, PHASE_OVER };

struct life {
    struct step_runner *r;       /* set when a retry waits (backoff_done) */
    enum phase phase;
    int attempt;                 /* the one in flight or the last; 0: none */
    double started, finished;    /* wall clock; 0: never */
    double deadline;             /* monotonic; 0: none */
    bool has_exit_code, timed_out, ok;
    bool cancelled;              /* the scheduler stopped it (Ctrl-C) */
    bool given_up;               /* its retries given up: the run stops after a failure */
    int exit_code;
    char *error;                 /* the first line of the last failure, redacted */
    char *report;                /* what to print of it, or NULL */
    char *fp, *parts;            /* from the body at the start; freed once its record is put */
    bool fp_deferred;            /* the recorder works fp and parts out: read them after recorder_sync */
    char *outputs;               /* its output records (JSON), from its end to its record */
    char *remote;                /* the remote job the last attempt ran as (JSON), or NULL */
    char *metrics, *series;      /* what the step reported of itself (JSON objects), or NULL */
    struct step_wait *backoff;   /* a retry's timer */
    struct step_wait_list waits;
};

/* Lines to write, the outputs to flush first, the steps whose end waits for them. */
struct batch {
    struct strbuf lines;
    bool durable;                /* a line of it must be durable (journal_append) */
    struct held_path { char *path; size_t step; } *paths;   /* an output, and the step that made it */
    size_t n_paths, cap_paths;
    size_t *steps;               /* ending steps, completed once the batch is written */
    size_t n_steps, cap_steps;
};

struct flush_job {
    struct step_runner *r;
    struct batch b;
    int rc;
    char err[1024];
    size_t failed_path;          /* the path whose flush failed (rc != 0), or n_paths: a directory's */
};

struct step_runner {
    const struct dag *dag;
    struct loop *loop;
    struct sched *sched;
    struct step_body body;
    struct journal *journal;
    struct work_pool *pool;
    struct state_store *state;
    struct utd *check;
    char *run_id;                /* redacted */
    struct step_spec *specs;
    double backoff;
    struct life *lives;
    enum step_state *states;     /* kept by step_runner_finish */
    struct batch held;
    struct strbuf spare_lines;   /* the last written batch's buffer, empty, for the next (keep_lines) */
    double flushed_at;           /* monotonic */
    struct flush_job *in_flight; /* a flush whose outputs are being synced */
    bool flush_wanted;           /* another flush asked for while one is in flight */
    unsigned long flush_timer;   /* writes what is still held FLUSH_EVERY after it was held; 0: none */
    bool any_started;
    bool stopping;               /* a step failed and the run stops (exec_stopping): no more retries */
    bool failed_late;            /* ... because a step's end could not be recorded, -k or not */
    bool detached;               /* the scheduler is gone (step_runner_detach) */
    /* A first run's recorder (uptodate.h: fingerprints deferred): from
     * step_runner_new to deferral_end, a thread that works out the
     * fingerprint of each step whose START it is given and writes its start
     * line, and for each quick step's END its end line and its record, while
     * this thread runs the next steps.  The store and the check's records
     * are the recorder's meanwhile: this thread reads them after
     * recorder_sync.  The lines and warnings it made so far (rec_lines,
     * rec_warnings, under rec_mu) are taken whenever (recorder_collect). */
    bool deferring;
    struct serial *rec;              /* started by the first deferred step; NULL: none (yet) */
    size_t rec_ends;                 /* ENDs given it since the last flush */
    pthread_mutex_t rec_mu;
    struct strbuf rec_lines, rec_warnings, rec_mask;
};

/* text with the configuration's secrets masked (ui.h's redactor); caller frees */
static char *redacted(const char *text)
{
    struct strbuf sb = STRBUF_INIT;
    ui_redact_span(text, strlen(text), true, &sb);
    return sb_detach(&sb);
}

/* s masked, in `buf`, valid until its next use: a step's name is masked
 * for each of its lines and its record, three times a step, and a copy each
 * time was a malloc and a free.  The loop's thread masks in loop_mask, the
 * recorder in its rec_mask. */
static const char *masked(struct strbuf *buf, const char *s)
{
    sb_truncate(buf, 0);
    ui_redact_span(s, strlen(s), true, buf);
    return buf->buf ? buf->buf : "";
}

static struct strbuf loop_mask;

static void json_redacted(struct strbuf *sb, struct strbuf *mask, const char *s)
{
    json_string(sb, masked(mask, s));
}

static const char *step_name(const struct step_runner *r, size_t i)
{
    return r->dag->steps[i].name;
}

/* ---- the journal: batches, group commit ---- */

static void batch_release(struct batch *b)
{
    sb_release(&b->lines);
    for (size_t k = 0; k < b->n_paths; k++) free(b->paths[k].path);
    free(b->paths);
    free(b->steps);
    *b = (struct batch){ .lines = STRBUF_INIT };
}

static void recorder_sync(struct step_runner *r);
static void recorder_collect(struct step_runner *r);

/* What is held, handed over; the runner holds nothing after but the buffer
 * a written batch left (keep_lines). */
static struct batch take_held(struct step_runner *r)
{
    struct batch b = r->held;
    r->held = (struct batch){ .lines = r->spare_lines };
    r->spare_lines = (struct strbuf)STRBUF_INIT;
    return b;
}

/* A written batch's buffer holds the next one: a run's batches are of a
 * size, and growing each from nothing again was a realloc chain and the
 * page faults of fresh memory for every flush. */
static void keep_lines(struct step_runner *r, struct batch *b)
{
    if (r->spare_lines.buf || !b->lines.buf) return;
    sb_truncate(&b->lines, 0);
    r->spare_lines = b->lines;
    b->lines = (struct strbuf)STRBUF_INIT;
}

static void start_flush(struct step_runner *r);

/* A line held longer than FLUSH_EVERY goes out even when nothing else ends:
 * a long step's step_start is how `flow status` and `flow viz --run` see it
 * running, and a kill loses at most that long of the journal. */
static void flush_tick(void *arg)
{
    struct step_runner *r = arg;
    r->flush_timer = 0;
    recorder_collect(r);
    if (r->held.lines.len || r->held.n_steps) start_flush(r);
}

/* A journal line, held for the next batch: written at the end of the held
 * lines (hold_begin's), then ended (hold_end) -- not made in a buffer of its
 * own and copied, which was a malloc, two or three reallocs and a free a
 * line, two lines a step.  `durable`: it records work (a step's start or
 * end), so its batch is synced; a line that records only that nothing ran
 * waits for such a line's sync (journal_append). */
static struct strbuf *hold_begin(struct step_runner *r)
{
    recorder_sync(r);                           /* (its lines go before this one) */
    return &r->held.lines;
}

static void start_flush_timer(struct step_runner *r)
{
    if (!r->flush_timer) r->flush_timer = loop_add_timer(r->loop, FLUSH_EVERY, flush_tick, r);
}

static void hold_end(struct step_runner *r, bool durable)
{
    sb_addc(&r->held.lines, '\n');              /* (a batch ending in one is appended as it is) */
    r->held.durable = r->held.durable || durable;
    start_flush_timer(r);
}

static void stop_flush_timer(struct step_runner *r)
{
    if (r->flush_timer) loop_cancel_timer(r->loop, r->flush_timer);
    r->flush_timer = 0;
}

static int compare_strings(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* On a pool thread (or the loop's): each output's data, then each directory
 * that holds the rename that put one in place — once per batch, however many
 * outputs landed there (most land in .flow/data). */
static void flush_outputs(void *arg)
{
    struct flush_job *job = arg;
    size_t n = job->b.n_paths;
    job->rc = 0;
    job->failed_path = n;
    for (size_t k = 0; k < n && job->rc == 0; k++)
        if (fsync_tree(job->b.paths[k].path, job->err, sizeof job->err) != 0) {
            job->rc = -1;
            job->failed_path = k;
        }
    char **parents = xcalloc(n + 1, sizeof *parents);
    for (size_t k = 0; k < n; k++) parents[k] = path_parent(job->b.paths[k].path);
    qsort(parents, n, sizeof *parents, compare_strings);
    for (size_t k = 0; k < n && job->rc == 0; k++)
        if ((k == 0 || strcmp(parents[k], parents[k - 1]) != 0) &&
            fsync_dir_present(parents[k], job->err, sizeof job->err) != 0)
            job->rc = -1;
    for (size_t k = 0; k < n; k++) free(parents[k]);
    free(parents);
}

static void end_recorded(struct step_runner *r, size_t i, bool written, const char *why,
                         const struct step_outcome *o);

/* On the loop's thread: the outputs are durable (or could not be made so);
 * now the lines, then the steps that waited for them. */
static void flush_written(void *arg)
{
    struct flush_job *job = arg;
    struct step_runner *r = job->r;
    if (!r) {                              /* its runner was freed meanwhile (step_runner_free) */
        batch_release(&job->b);
        free(job);
        return;
    }
    char err[1024] = "";
    int rc = job->rc;
    if (rc != 0) snprintf(err, sizeof err, "%s", job->err);
    else if (job->b.lines.len && journal_append(r->journal, job->b.lines.buf, job->b.lines.len, job->b.durable, err, sizeof err) != 0)
        rc = -1;
    if (r->in_flight == job) r->in_flight = NULL;
    /* A batch is one journal write: its other steps fail with the one whose
     * output could not be made durable, and say so rather than name a file
     * of another step's as theirs. */
    size_t owner = job->rc != 0 && job->failed_path < job->b.n_paths ? job->b.paths[job->failed_path].step : SIZE_MAX;
    for (size_t k = 0; k < job->b.n_steps; k++) {
        size_t i = job->b.steps[k];
        if (owner == SIZE_MAX || owner == i) {
            end_recorded(r, i, rc == 0, err, NULL);
            continue;
        }
        char *why = xasprintf("its journal line was in one batch with the end of step '%s', whose output could "
                              "not be made durable (%s)", step_name(r, owner), err);
        end_recorded(r, i, false, why, NULL);
        free(why);
    }
    keep_lines(r, &job->b);
    batch_release(&job->b);
    free(job);
    if (r->flush_wanted && !r->in_flight) {
        r->flush_wanted = false;
        start_flush(r);
    }
}

/* Writes what is held, with the lines the recorder has made so far (those
 * it has still to make go with the next batch): through the pool when
 * outputs must be flushed first. */
static void start_flush(struct step_runner *r)
{
    if (r->in_flight) { r->flush_wanted = true; return; }
    recorder_collect(r);
    r->rec_ends = 0;
    r->flushed_at = monotonic_seconds();
    struct flush_job *job = xcalloc(1, sizeof *job);
    job->r = r;
    job->b = take_held(r);
    if (job->b.n_paths && r->pool) {
        r->in_flight = job;
        if (work_submit(r->pool, flush_outputs, flush_written, job, NULL, 0) == 0) return;
        r->in_flight = NULL;
    }
    flush_outputs(job);
    flush_written(job);
}

/* ---- a step's life ---- */

static struct life *life_of(struct step_runner *r, size_t i) { return &r->lives[i]; }

static void first_line_of(char **slot, const char *message)
{
    const char *s = message ? message : "";
    char *line = xstrndup(s, strcspn(s, "\n"));
    free(*slot);
    *slot = redacted(line);
    free(line);
}

static void step_end_line(struct step_runner *r, size_t i, struct strbuf *sb, struct strbuf *mask, const char *outputs,
                          bool interrupted)
{
    struct life *l = life_of(r, i);
    sb_addc(sb, '{');
    if (l->attempt > 0) { sb_adds(sb, "\"attempts\":"); json_number(sb, l->attempt); sb_addc(sb, ','); }
    sb_adds(sb, "\"elapsed\":");
    json_seconds(sb, l->finished - l->started);
    if (!l->ok) {
        sb_adds(sb, ",\"error\":");
        json_string(sb, l->error ? l->error : "");
    }
    sb_adds(sb, ",\"event\":\"step_end\"");
    if (!l->ok && l->has_exit_code) { sb_adds(sb, ",\"exit_code\":"); json_number(sb, l->exit_code); }
    if (l->ok && l->fp) { sb_adds(sb, ",\"fingerprint\":"); json_string(sb, l->fp); }
    if (l->ok && l->metrics) { sb_adds(sb, ",\"metrics\":"); sb_adds(sb, l->metrics); }
    if (l->ok && outputs) { sb_adds(sb, ",\"outputs\":"); sb_adds(sb, outputs); }
    if (l->ok && l->fp && l->parts) { sb_adds(sb, ",\"parts\":"); sb_adds(sb, l->parts); }
    if (l->remote) { sb_adds(sb, ",\"remote\":"); sb_adds(sb, l->remote); }
    if (r->run_id) { sb_adds(sb, ",\"run\":"); json_string(sb, r->run_id); }
    if (l->ok && l->series) { sb_adds(sb, ",\"series\":"); sb_adds(sb, l->series); }
    sb_adds(sb, l->ok ? ",\"status\":\"ok\"" : interrupted ? ",\"status\":\"interrupted\"" : ",\"status\":\"failed\"");
    sb_adds(sb, ",\"step\":");
    json_redacted(sb, mask, step_name(r, i));
    sb_adds(sb, ",\"time\":");
    json_seconds(sb, l->finished);
    sb_addc(sb, '}');
}

static void start_line(struct step_runner *r, size_t i, struct strbuf *sb, struct strbuf *mask)
{
    struct life *l = life_of(r, i);
    sb_adds(sb, "{\"event\":\"step_start\",\"step\":");
    json_redacted(sb, mask, step_name(r, i));
    sb_adds(sb, ",\"time\":");
    json_seconds(sb, l->started);
    if (l->fp) {
        sb_adds(sb, ",\"fingerprint\":");
        json_string(sb, l->fp);
    }
    sb_addc(sb, '}');
}

static bool run_interrupted(const struct step_runner *r)
{
    return loop_interrupts(r->loop) > 0;
}

static void report(struct step_runner *r, size_t i)
{
    struct life *l = life_of(r, i);
    if (l->report && !run_interrupted(r)) ui_error("%s", l->report);
}

/* The metrics of a step's record: {"values":…,"series":…}, from the texts
 * the body reported (masked by it, as its output records are). */
static char *record_metrics(const struct life *l)
{
    if (!l->metrics) return NULL;
    struct strbuf json = STRBUF_INIT;
    sb_addf(&json, "{\"values\":%s", l->metrics);
    if (l->series) sb_addf(&json, ",\"series\":%s", l->series);
    sb_addc(&json, '}');
    return sb_detach(&json);
}

/* A step whose end is recorded: its state record (step_record.h) goes into
 * the store, which makes it the step's last successful run for the next
 * run's check, and for this run's (its consumers may now use its hashes).
 * A record the store refuses costs the next run a rerun of the step.  On
 * either thread (the recorder's: rec_end): its outputs as JSON and, when
 * the body gave them, as fields (else NULL); its name masked in `mask`; a
 * refusal's warning printed, or added to `warnings` (NULL: printed). */
static void put_record(struct step_runner *r, size_t i, const char *outputs_json, const struct state_out *outs,
                       size_t n_outs, struct strbuf *mask, struct strbuf *warnings)
{
    struct life *l = life_of(r, i);
    char *metrics = record_metrics(l);
    struct step_record rec = { .name = masked(mask, step_name(r, i)), .fp = l->fp, .time = l->finished,
                               .parts_json = l->parts, .outputs_json = outputs_json, .metrics_json = metrics,
                               .outs = outs, .n_outs = n_outs };
    char err[512];
    if (step_record_put(r->state, &rec, err, sizeof err) == 0) {
        if (r->check) utd_mark_fresh(r->check, i, l->fp);
    } else if (warnings) {
        sb_addf(warnings, "%s: its record cannot be kept, so it runs again next time\n", err);
    } else {
        ui_warn("%s: its record cannot be kept, so it runs again next time", err);
    }
    free(metrics);
    free(l->fp);
    free(l->parts);
    free(l->outputs);
    l->fp = l->parts = l->outputs = NULL;
}

/* The step's end is written (or could not be): it is over.  A step the
 * scheduler was told of already (held) fails now if its end was lost. */
static void end_recorded(struct step_runner *r, size_t i, bool written, const char *why,
                         const struct step_outcome *o)
{
    struct life *l = life_of(r, i);
    if (l->ok && written && r->state) {
        /* the store: this run's recorder's meanwhile, or another run's */
        if (r->deferring) recorder_sync(r);
        else state_store_claim(r->state, true);
        if (l->fp) put_record(r, i, l->outputs, o ? o->outs : NULL, o ? o->n_outs : 0, &loop_mask, NULL);
    }
    bool was_ok = l->ok;
    if (l->ok && !written) {
        /* Its outputs are in place, but with no record of them the step is not done. */
        char *msg = xasprintf("step '%s' ran, but its end cannot be recorded: %s", step_name(r, i), why);
        l->ok = false;
        first_line_of(&l->error, msg);
        set_string(&l->report, msg);
        free(msg);
        report(r, i);
    }
    l->phase = PHASE_OVER;
    if (!sched_held(r->sched, i)) {
        sched_step_done(r->sched, i, l->ok);
        return;
    }
    if (was_ok && !l->ok) {
        r->failed_late = true;
        sched_step_failed_late(r->sched, i);
    }
    sched_unhold(r->sched, i);
}

/* ---- the recorder: a first run's fingerprints, lines and records ---- */

/* What a quick step's END job needs of its outcome, as its data (serial.h):
 * this head, then its outputs record (n_json bytes with the NUL), then each
 * output field's kind and texts (dataset, path, hash, each with its NUL). */
struct ending {
    size_t n_json;               /* 0: no outputs record */
    size_t n_outs;
    bool fields;                 /* false: the body gave no output fields (n_outs 0) */
};

static char *copy_into(char *at, const char *s)
{
    size_t n = strlen(s) + 1;
    memcpy(at, s, n);
    return at + n;
}

/* What push_end wrote: the outputs record, and the fields into outs (n of
 * them, at most `room`; else a block the caller frees), or NULL. */
static const char *read_end(const void *data, struct state_out *few, size_t room, struct state_out **outs, size_t *n)
{
    struct ending e;
    memcpy(&e, data, sizeof e);
    const char *at = (const char *)data + sizeof e, *json = e.n_json ? at : NULL;
    at += e.n_json;
    *n = e.n_outs;
    *outs = !e.fields ? NULL : e.n_outs <= room ? few : xmalloc(e.n_outs * sizeof **outs);
    for (size_t k = 0; k < e.n_outs; k++) {
        struct state_out *out = &(*outs)[k];
        out->kind = *at++;
        out->dataset = at;
        at += strlen(at) + 1;
        out->path = at;
        at += strlen(at) + 1;
        out->hash = at;
        at += strlen(at) + 1;
    }
    return json;
}

/* Whether each output of o has a hash its consumers' fingerprints can take. */
static bool outputs_hashed(const struct step_outcome *o)
{
    if (!o->outputs_json) return true;
    if (!o->outs) return utd_outputs_json_hashed(o->outputs_json);     /* (a body in the stdlib: rarer) */
    for (size_t k = 0; k < o->n_outs; k++)
        if (!o->outs[k].hash[0] || o->outs[k].kind == 'u') return false;
    return true;
}

/* Step i ended as o: its consumers' fingerprints may be deferred when each
 * input they take of it has a hash, in its record (put by the recorder, or
 * here) or in what utd_mark_ran keeps of it until then, and that record
 * will be found: under the step's name (a name a secret masks is kept
 * under the masked one, which no check looks up) and within the store's
 * size.  (Else the check of a consumer, undeferred, tells the stdlib's.) */
static void tell_hashed(struct step_runner *r, size_t i, const struct step_outcome *o)
{
    if (!r->deferring || !outputs_hashed(o)) return;
    const char *name = step_name(r, i);
    size_t size = (o->outputs_json ? strlen(o->outputs_json) : 0) + (o->metrics_json ? strlen(o->metrics_json) : 0) +
                  (o->series_json ? strlen(o->series_json) : 0);
    if (size < STATE_STORE_MAX_RECORD / 2 && strcmp(masked(&loop_mask, name), name) == 0)
        utd_outputs_hashed(r->check, i);
}

/* Jobs, on the recorder's thread.  START: the step's fingerprint, as the
 * check would have worked it out at its start (its producers' records are
 * in: their ENDs came first), and its start line. */
static void rec_start(void *ctx, size_t i, const void *data, size_t len)
{
    (void)data;
    (void)len;
    struct step_runner *r = ctx;
    struct life *l = life_of(r, i);
    utd_take_deferred_fingerprint(r->check, i, &l->fp, &l->parts);
    ui_redactor_share();
    pthread_mutex_lock(&r->rec_mu);
    start_line(r, i, &r->rec_lines, &r->rec_mask);
    sb_addc(&r->rec_lines, '\n');
    pthread_mutex_unlock(&r->rec_mu);
    ui_redactor_unlock();
}

/* END of a quick step that succeeded: its end line, then its record. */
static void rec_end(void *ctx, size_t i, const void *data, size_t len)
{
    (void)len;
    struct step_runner *r = ctx;
    struct state_out few[8], *outs;
    size_t n_outs;
    const char *json = read_end(data, few, sizeof few / sizeof *few, &outs, &n_outs);
    struct strbuf warning = STRBUF_INIT;
    ui_redactor_share();
    pthread_mutex_lock(&r->rec_mu);
    step_end_line(r, i, &r->rec_lines, &r->rec_mask, json, false);
    sb_addc(&r->rec_lines, '\n');
    pthread_mutex_unlock(&r->rec_mu);
    if (life_of(r, i)->fp) put_record(r, i, json, outs, n_outs, &r->rec_mask, &warning);
    ui_redactor_unlock();
    if (warning.len) {
        pthread_mutex_lock(&r->rec_mu);
        sb_add(&r->rec_warnings, warning.buf, warning.len);
        pthread_mutex_unlock(&r->rec_mu);
    }
    sb_release(&warning);
    if (outs != few) free(outs);
}

/* END of step i, with what it needs of o, for the recorder. */
static void push_end(struct step_runner *r, size_t i, const struct step_outcome *o)
{
    struct ending e = { .n_json = o->outputs_json ? strlen(o->outputs_json) + 1 : 0,
                        .n_outs = o->outs ? o->n_outs : 0, .fields = o->outs != NULL };
    size_t len = sizeof e + e.n_json;
    for (size_t k = 0; k < e.n_outs; k++)
        len += 1 + strlen(o->outs[k].dataset) + strlen(o->outs[k].path) + strlen(o->outs[k].hash) + 3;
    char *at = serial_push_space(r->rec, rec_end, i, len);
    memcpy(at, &e, sizeof e);
    at += sizeof e;
    if (e.n_json) at = copy_into(at, o->outputs_json);
    for (size_t k = 0; k < e.n_outs; k++) {
        *at++ = o->outs[k].kind;
        at = copy_into(copy_into(copy_into(at, o->outs[k].dataset), o->outs[k].path), o->outs[k].hash);
    }
}

/* Whether steps may go to the recorder: it is started with the first. */
static bool recorder_ready(struct step_runner *r)
{
    if (r->deferring && !r->rec) r->rec = serial_new(r);
    return r->rec != NULL;
}

/* The lines the recorder has made so far go into what is held (after
 * every line held before: this thread holds one only after a sync), its
 * warnings are printed; it goes on meanwhile. */
static void recorder_collect(struct step_runner *r)
{
    if (!r->rec) return;
    struct strbuf warnings = STRBUF_INIT;
    pthread_mutex_lock(&r->rec_mu);
    if (r->rec_lines.len) {
        if (r->held.lines.len) {
            sb_add(&r->held.lines, r->rec_lines.buf, r->rec_lines.len);
        } else {
            struct strbuf t = r->held.lines;
            r->held.lines = r->rec_lines;
            r->rec_lines = t;
        }
        sb_truncate(&r->rec_lines, 0);
        r->held.durable = true;
    }
    if (r->rec_warnings.len) {
        warnings = r->rec_warnings;
        r->rec_warnings = (struct strbuf)STRBUF_INIT;
    }
    pthread_mutex_unlock(&r->rec_mu);
    for (char *line = warnings.buf, *end; line && (end = strchr(line, '\n')); line = end + 1)
        ui_warn("%.*s", (int)(end - line), line);
    sb_release(&warnings);
}

/* Waits for the recorder to have done every job given, and collects. */
static void recorder_sync(struct step_runner *r)
{
    if (!r->rec) return;
    serial_sync(r->rec);
    recorder_collect(r);
}

/* The run's deferral is over (its end, or a change to the store from Lua):
 * the recorder's jobs done, its thread ended; this thread does it all now. */
static void deferral_end(struct step_runner *r)
{
    if (!r->deferring) return;
    recorder_sync(r);
    serial_free(r->rec);
    r->rec = NULL;
    r->deferring = false;
    utd_defer_end(r->check);
    state_store_set_claim(r->state, NULL, NULL);
}

/* The store's claim (statestore.h): a change from anyone else ends the deferral. */
static void claim_store(void *arg, bool change)
{
    if (change) deferral_end(arg);
    else recorder_sync(arg);
}

/* A quick step that succeeded, its fingerprint the recorder's: its end
 * goes there too (rec_end), and it is done for its dependents now. */
static void end_later(struct step_runner *r, size_t i, const struct step_outcome *o)
{
    tell_hashed(r, i, o);
    push_end(r, i, o);
    start_flush_timer(r);
    life_of(r, i)->phase = PHASE_OVER;
    /* (the lines of 50 ms of quick steps were 8 MB buffers, three of them:
     * a flush each RECORDED_MAX steps keeps them small; it takes what the
     * recorder has made by then, without waiting for it) */
    if (++r->rec_ends >= RECORDED_MAX) start_flush(r);
    sched_step_done(r->sched, i, true);
}

static void end_step(struct step_runner *r, size_t i, const struct step_outcome *o)
{
    struct life *l = life_of(r, i);
    l->phase = PHASE_ENDING;
    l->finished = wall_seconds();
    l->ok = o->ok;
    bool interrupted = !o->ok && (o->interrupted || l->cancelled || run_interrupted(r));
    if (!o->ok) {
        l->timed_out = o->timed_out;
        report(r, i);
    }
    /* A record of a step must never name an output the disk may lose: its
     * line is written with its batch, once the batch's outputs are flushed,
     * and its record put then (end_recorded).  Only a quick step with
     * nothing to flush (memory values) has its record put before its line
     * is out: by the recorder, when it has the step's fingerprint to make. */
    bool flush = r->specs[i].command || l->finished - l->started >= FLUSH_EVERY || !o->ok || o->n_paths > 0 ||
                 monotonic_seconds() - r->flushed_at >= FLUSH_EVERY;
    if (l->fp_deferred) {
        if (!flush && r->rec) { end_later(r, i, o); return; }
        recorder_sync(r);                        /* its fingerprint, and its start line, are in now */
    }
    if (o->ok && l->fp) tell_hashed(r, i, o);
    if (o->ok && r->state && l->fp) set_string(&l->outputs, o->outputs_json);
    if (!r->journal) { end_recorded(r, i, true, NULL, o); return; }
    step_end_line(r, i, hold_begin(r), &loop_mask, o->ok ? o->outputs_json : NULL, interrupted);
    hold_end(r, true);
    if (o->ok)
        for (size_t k = 0; k < o->n_paths; k++) {
            ARRAY_GROW(r->held.paths, r->held.n_paths, r->held.cap_paths);
            r->held.paths[r->held.n_paths++] = (struct held_path){ xstrdup(o->paths[k]), i };
        }
    if (!flush) { end_recorded(r, i, true, NULL, o); return; }
    ARRAY_GROW(r->held.steps, r->held.n_steps, r->held.cap_steps);
    r->held.steps[r->held.n_steps++] = i;
    if (!o->ok) {
        /* A failed step keeps its slot until it is recorded: the run may
         * have to stop, and nothing new may start meanwhile. */
        start_flush(r);
        return;
    }
    /* A step that succeeded is done for its dependents now, not once the
     * disk has flushed its outputs: they read what is in place, and the
     * journal still has every line after the outputs it names, and a
     * producer's line before its consumers' (batches go out in order).  Its
     * end waits for the batch, which the flush timer (FLUSH_EVERY), a full
     * batch or a quiet scheduler (exec_quiet) sends: one flush for the
     * outputs of many steps, off every step's path.  The run is not over
     * until it is recorded (sched_hold); if that fails, the step fails then. */
    if (r->check && l->fp) utd_mark_ran(r->check, i, o->outputs_json);
    sched_hold(r->sched, i);
    sched_step_done(r->sched, i, true);
    if (r->held.n_paths >= HELD_PATHS_MAX) start_flush(r);
}

static void run_attempt(struct step_runner *r, size_t i)
{
    struct life *l = life_of(r, i);
    l->phase = PHASE_ATTEMPT;
    l->attempt++;
    double t = r->specs[i].timeout;
    l->deadline = t > 0 ? monotonic_seconds() + t : 0;
    r->body.attempt(r->body.ctx, r, i, l->attempt);
}

static void backoff_done(struct step_wait *w, void *arg);

void step_attempt_done(struct step_runner *r, size_t i, const struct step_outcome *o)
{
    if (r->detached) return;
    struct life *l = life_of(r, i);
    l->deadline = 0;
    if (o->has_exit_code) {
        l->has_exit_code = true;
        l->exit_code = o->exit_code;
    }
    if (o->remote_json) set_string(&l->remote, o->remote_json);
    if (o->ok) {
        step_runner_set_metrics(r, i, o->metrics_json, o->series_json);
        end_step(r, i, o);
        return;
    }
    first_line_of(&l->error, o->message);
    set_string(&l->report, o->report);
    if (o->interrupted || o->final || l->cancelled || run_interrupted(r) || r->stopping ||
        l->attempt > r->specs[i].retries) {
        end_step(r, i, o);
        return;
    }
    double delay = fmin(BACKOFF_MAX, ldexp(r->backoff, l->attempt - 1));
    char *reason = NULL;
    first_line_of(&reason, o->reason ? o->reason : o->message);
    ui_warn("step '%s' %s (attempt %d of %d); retrying in %gs%s", step_name(r, i), reason,
            l->attempt, r->specs[i].retries + 1, delay, o->stderr_tail ? o->stderr_tail : "");
    free(reason);
    l->phase = PHASE_BACKOFF;
    l->timed_out = o->timed_out;
    l->r = r;                            /* (for backoff_done, which has only l) */
    l->backoff = step_wait_timer(r->loop, delay, backoff_done, l);
    step_wait_attach(&l->waits, l->backoff);
}

static void backoff_done(struct step_wait *w, void *arg)
{
    struct life *l = arg;
    struct step_runner *r = l->r;
    size_t i = (size_t)(l - r->lives);
    l->backoff = NULL;
    step_wait_free(w);
    if (r->detached) return;
    if (l->cancelled || run_interrupted(r)) {
        struct step_outcome o = { .ok = false, .message = l->error, .timed_out = l->timed_out, .interrupted = true };
        end_step(r, i, &o);
        return;
    }
    if (l->given_up) {                   /* its last attempt's failure is its end */
        if (r->failed_late)
            ui_warn("step '%s': not retried: the run stops, as a step's end could not be recorded", step_name(r, i));
        else
            ui_warn("step '%s': not retried: the run stops after a failure (-k/--keep-going runs the rest)",
                    step_name(r, i));
        struct step_outcome o = { .ok = false, .message = l->error, .report = l->report, .timed_out = l->timed_out };
        end_step(r, i, &o);
        return;
    }
    run_attempt(r, i);
}

static int exec_start(void *ctx, struct sched *s, size_t i)
{
    struct step_runner *r = ctx;
    r->sched = s;
    r->any_started = true;
    struct life *l = life_of(r, i);
    l->started = wall_seconds();
    bool deferred = r->check && utd_deferred(r->check, i);
    if (deferred && recorder_ready(r)) {
        l->fp_deferred = true;                   /* its fingerprint and start line: rec_start */
        serial_push(r->rec, rec_start, i, NULL, 0);
        start_flush_timer(r);
    } else {
        if (deferred) utd_take_deferred_fingerprint(r->check, i, &l->fp, &l->parts);
        else if (r->body.fingerprint) r->body.fingerprint(r->body.ctx, i, &l->fp, &l->parts);
        if (r->journal) {
            start_line(r, i, hold_begin(r), &loop_mask);
            hold_end(r, true);
        }
        /* its record's place in the store's map, fetched while the body runs
         * (a miss at the put was 1.2 % of a first run of 100,000 Lua steps; a
         * name a secret masks is another key: a hint lost, nothing more) */
        if (r->state && l->fp) {
            if (!r->deferring) state_store_claim(r->state, false);     /* (another run's recorder) */
            state_store_prefetch(r->state, step_name(r, i));
        }
    }
    if (r->journal && monotonic_seconds() - r->flushed_at >= FLUSH_EVERY) {
        if (!r->in_flight && !r->held.n_paths && !r->held.n_steps) {
            /* a step whose start cannot be recorded does not run */
            recorder_sync(r);                    /* (its start line, the recorder's) */
            struct batch b = take_held(r);
            r->flushed_at = monotonic_seconds();
            r->rec_ends = 0;
            char err[1024];
            int rc = journal_append(r->journal, b.lines.buf, b.lines.len, b.durable, err, sizeof err);
            keep_lines(r, &b);
            batch_release(&b);
            if (rc != 0) {
                char *msg = xasprintf("step '%s' did not start: %s", step_name(r, i), err);
                struct step_outcome o = { .ok = false, .message = msg, .report = msg };
                first_line_of(&l->error, msg);
                set_string(&l->report, msg);
                end_step(r, i, &o);
                free(msg);
                return 0;
            }
        } else {
            start_flush(r);
        }
    }
    run_attempt(r, i);
    return 0;
}

static void exec_cancel(void *ctx, struct sched *s, size_t i, enum cancel_mode mode)
{
    struct step_runner *r = ctx;
    (void)s;
    struct life *l = life_of(r, i);
    l->cancelled = true;
    if (l->phase == PHASE_ATTEMPT) r->body.cancel(r->body.ctx, i, mode);
    else if (l->phase == PHASE_BACKOFF) step_wait_list_cancel(&l->waits, mode);
    /* ending: its outputs are being flushed, which is bounded and finishes */
}

/* A step failed and the run stops: a step waiting out a retry's back-off
 * (up to a minute, and more after each) ends now, failed, rather than try
 * again in a run that has failed.  (The timer's cancel completes from the
 * loop: backoff_done.) */
static void exec_stopping(void *ctx, struct sched *s)
{
    struct step_runner *r = ctx;
    (void)s;
    r->stopping = true;
    for (size_t i = 0; i < r->dag->n_steps; i++) {
        struct life *l = &r->lives[i];
        if (l->phase != PHASE_BACKOFF || l->cancelled) continue;
        l->given_up = true;
        step_wait_list_cancel(&l->waits, CANCEL_GRACEFUL);
    }
}

/* Nothing runs and nothing can start: what is held goes out now rather than
 * when the flush timer fires (the run's last steps, a chain's next step). */
static void exec_quiet(void *ctx, struct sched *s)
{
    struct step_runner *r = ctx;
    (void)s;
    recorder_sync(r);                            /* (every line goes out now) */
    if (r->held.n_steps || r->held.lines.len) start_flush(r);
}

static bool exec_up_to_date(void *ctx, struct sched *s, size_t i)
{
    struct step_runner *r = ctx;
    r->sched = s;
    if (!r->body.up_to_date || !r->body.up_to_date(r->body.ctx, i)) return false;
    if (r->journal) {
        struct strbuf *line = hold_begin(r);
        sb_adds(line, "{\"event\":\"step_end\",\"step\":");
        json_redacted(line, &loop_mask, step_name(r, i));
        sb_adds(line, ",\"status\":\"up to date\"}");
        hold_end(r, false);                            /* nothing ran */
        /* a no-op rerun decides its steps without turning the loop: its lines
         * go out as they add up, not all at its end (1 MB of 10,000 steps) */
        if (r->held.lines.len >= HELD_LINES_MAX) start_flush(r);
    }
    return true;
}

struct sched_executor step_runner_executor(struct step_runner *r)
{
    return (struct sched_executor){ r, exec_start, exec_cancel, exec_up_to_date, exec_stopping, exec_quiet };
}

/* ---- the runner ---- */

struct step_runner *step_runner_new(const struct dag *dag, struct loop *loop, const struct step_runner_options *opt,
                                    const struct step_body *body)
{
    struct step_runner *r = xcalloc(1, sizeof *r);
    r->dag = dag;
    r->loop = loop;
    r->body = *body;
    r->journal = opt->journal;
    r->pool = opt->pool;
    r->state = opt->state;
    if (r->state) state_store_stream(r->state);   /* records to the file as steps end, not all at the run's end */
    r->check = opt->check;
    r->run_id = opt->run_id ? redacted(opt->run_id) : NULL;
    size_t n = dag->n_steps;
    r->specs = xcalloc(n + 1, sizeof *r->specs);
    if (opt->specs) memcpy(r->specs, opt->specs, n * sizeof *r->specs);
    /* (untouched until a step starts: a no-op rerun's are zero pages, not
     * 1.4 MB of its peak at 10,000 steps) */
    r->lives = xcalloc(n + 1, sizeof *r->lives);
    r->flushed_at = -1e9;
    r->backoff = opt->backoff > 0 ? opt->backoff : 1.0;
    pthread_mutex_init(&r->rec_mu, NULL);
    /* a first run: fingerprints and records on the recorder's thread
     * (FLOW_DEBUG_NO_RECORDER: all on this one, for tests/e2e/t_outputs.sh
     * to compare) */
    if (r->journal && r->state && r->check && !getenv("FLOW_DEBUG_NO_RECORDER") &&
        state_store_set_claim(r->state, claim_store, r)) {
        r->deferring = utd_defer_begin(r->check);
        if (!r->deferring) state_store_set_claim(r->state, NULL, NULL);
    }
    return r;
}

void step_runner_detach(struct step_runner *r)
{
    deferral_end(r);
    stop_flush_timer(r);
    if (r->in_flight) r->in_flight->r = NULL;
    r->in_flight = NULL;
    r->sched = NULL;
    r->detached = true;
}

void step_runner_free(struct step_runner *r)
{
    if (!r) return;
    deferral_end(r);
    stop_flush_timer(r);
    /* a flush still on the pool (a run released before step_runner_finish)
     * completes on its own: its lines are not written, its steps not ended */
    if (r->in_flight) r->in_flight->r = NULL;
    for (size_t i = 0; i < r->dag->n_steps; i++) {
        struct life *l = &r->lives[i];
        step_wait_free(l->backoff);
        free(l->error);
        free(l->report);
        free(l->fp);
        free(l->parts);
        free(l->outputs);
        free(l->remote);
        free(l->metrics);
        free(l->series);
    }
    batch_release(&r->held);
    sb_release(&r->spare_lines);
    sb_release(&r->rec_lines);
    sb_release(&r->rec_warnings);
    sb_release(&r->rec_mask);
    pthread_mutex_destroy(&r->rec_mu);
    free(r->lives);
    free(r->specs);
    free(r->states);
    free(r->run_id);
    free(r);
}

const char *step_runner_fingerprint(struct step_runner *r, size_t i)
{
    recorder_sync(r);                            /* (the recorder may have it to work out still) */
    return r->lives[i].fp;
}

size_t step_runner_n_steps(const struct step_runner *r)
{
    return r->dag->n_steps;
}

double step_runner_deadline(const struct step_runner *r, size_t i)
{
    return r->lives[i].deadline;
}

int step_runner_attempt(const struct step_runner *r, size_t i)
{
    return r->lives[i].attempt;
}

bool step_runner_any_started(const struct step_runner *r)
{
    return r->any_started;
}

int step_runner_finish(struct step_runner *r, const struct sched *s, int code, char *err, size_t errlen)
{
    deferral_end(r);
    size_t n = r->dag->n_steps;
    free(r->states);
    r->states = xcalloc(n + 1, sizeof *r->states);
    for (size_t i = 0; i < n; i++) r->states[i] = sched_state(s, i);
    while (r->in_flight) loop_run_once(r->loop, 0.05);    /* none: ending steps are still running */
    if (!r->journal) return 0;
    struct strbuf *line = hold_begin(r);
    sb_addf(line, "{\"code\":%d,\"event\":\"run_end\",\"time\":", code);
    json_seconds(line, wall_seconds());
    sb_addc(line, '}');
    hold_end(r, false);                            /* synced if anything was */
    stop_flush_timer(r);                                   /* written here, now */
    struct flush_job job = { .r = r, .b = take_held(r) };
    flush_outputs(&job);
    int rc = job.rc;
    if (rc != 0) snprintf(err, errlen, "%s", job.err);
    else rc = journal_append(r->journal, job.b.lines.buf, job.b.lines.len, job.b.durable, err, errlen);
    batch_release(&job.b);
    return rc;
}

/* ---- run.json ---- */

/* run.json is written as text, its keys in sorted order (as the Lua side's
 * JSON has them): a run of 100,000 steps made a cJSON tree per step, 6 % of
 * its time. */
/* A member's key, with the comma before it (or the object's brace), as one
 * literal: run.json has twelve a step, and 100,000 steps' keys made of a
 * comma, quotes and the name a piece were half of writing it. */
#define KEY(lit) lit, sizeof lit - 1
#define NULL_LIT "null", 4

static void seconds_or_null(struct strbuf *sb, const char *k, size_t klen, bool present, double d)
{
    sb_add(sb, k, klen);
    if (present) json_seconds(sb, d);
    else sb_add(sb, NULL_LIT);
}

static void integer_or_null(struct strbuf *sb, const char *k, size_t klen, bool present, long long v)
{
    sb_add(sb, k, klen);
    if (present) json_integer(sb, v);
    else sb_add(sb, NULL_LIT);
}

/* text, masked, or null for NULL */
static void redacted_or_null(struct strbuf *sb, const char *k, size_t klen, const char *text)
{
    sb_add(sb, k, klen);
    if (text) json_redacted(sb, &loop_mask, text);
    else sb_add(sb, NULL_LIT);
}

/* JSON text flow made itself (metrics, a remote job's record), or null when
 * it does not parse: a damaged value must not make run.json unreadable. */
static void json_or_null(struct strbuf *sb, const char *k, size_t klen, const char *json)
{
    sb_add(sb, k, klen);
    cJSON *v = json ? cJSON_ParseWithOpts(json, NULL, true) : NULL;     /* nothing after the value */
    if (v) sb_adds(sb, json);
    else sb_add(sb, NULL_LIT);
    cJSON_Delete(v);
}

/* A step's members before its name, and those from its name to its state. */
static void summary_before_name(struct strbuf *sb, const struct life *l)
{
    bool over = l->started > 0 && l->finished > 0;
    integer_or_null(sb, KEY("{\"attempts\":"), l->attempt > 0, l->attempt);
    seconds_or_null(sb, KEY(",\"elapsed\":"), over, l->finished - l->started);
    sb_add(sb, KEY(",\"error\":"));
    if (l->error && !l->ok) json_string(sb, l->error);     /* redacted when kept */
    else sb_add(sb, NULL_LIT);
    integer_or_null(sb, KEY(",\"exit_code\":"), l->has_exit_code, l->exit_code);
    seconds_or_null(sb, KEY(",\"finished\":"), l->finished > 0, l->finished);
    json_or_null(sb, KEY(",\"metrics\":"), l->metrics);
}

static void summary_after_name(struct strbuf *sb, const struct life *l)
{
    json_or_null(sb, KEY(",\"remote\":"), l->remote);
    if (l->series) json_or_null(sb, KEY(",\"series\":"), l->series);   /* only a step that logged one has it */
    seconds_or_null(sb, KEY(",\"started\":"), l->started > 0, l->started);
}

/* Whether every field the two above read is as in a step nothing happened
 * to (up to date, skipped, not reached): its members are then the ones they
 * made of a blank life, once a summary (`blank`). */
static bool untouched(const struct life *l)
{
    return l->attempt == 0 && l->started <= 0 && l->finished <= 0 && !l->error && !l->has_exit_code &&
           !l->metrics && !l->remote && !l->series;
}

/* What summary_before_name and summary_after_name make of a blank life:
 * most of a no-op rerun's run.json (100,000 steps, 16 MB), made once. */
struct blank_members { struct strbuf before, after; };

static void summary_step(struct strbuf *sb, const struct step_runner *r, size_t i, const struct blank_members *blank)
{
    const struct life *l = &r->lives[i];
    bool plain = untouched(l);
    if (plain) sb_add(sb, blank->before.buf, blank->before.len);
    else summary_before_name(sb, l);
    redacted_or_null(sb, KEY(",\"name\":"), step_name(r, i));
    if (plain) sb_add(sb, blank->after.buf, blank->after.len);
    else summary_after_name(sb, l);
    sb_add(sb, KEY(",\"state\":"));
    json_string(sb, step_state_name(r->states ? r->states[i] : STEP_NOT_RUN));
    if (l->timed_out && !l->ok) sb_add(sb, KEY(",\"timed_out\":true}"));
    else sb_add(sb, KEY(",\"timed_out\":false}"));
}

/* The run's own members, without the closing brace (its steps follow). */
static void summary_head(struct strbuf *sb, const struct step_summary *sum, double finished)
{
    integer_or_null(sb, KEY("{\"code\":"), true, sum->code);
    seconds_or_null(sb, KEY(",\"elapsed\":"), true, finished - sum->started);
    if (sum->env) redacted_or_null(sb, KEY(",\"env\":"), sum->env);
    seconds_or_null(sb, KEY(",\"finished\":"), true, finished);
    json_or_null(sb, KEY(",\"metrics\":"), sum->metrics_json);
    redacted_or_null(sb, KEY(",\"name\":"), sum->name);
    redacted_or_null(sb, KEY(",\"run_id\":"), sum->run_id);
    seconds_or_null(sb, KEY(",\"started\":"), true, sum->started);
    redacted_or_null(sb, KEY(",\"status\":"), sum->status);
}

struct summary_stream { const struct step_runner *r; const struct step_summary *sum; double finished; };

/* written every 64 KiB: a buffer of 1 MiB grew to 2 MiB, a no-op rerun's
 * peak (10,000 steps make 2 MB of run.json: 32 writes) */
#define SUMMARY_CHUNK (64 * 1024)

/* run.json, written as it is made: never the whole document in memory
 * (100,000 steps make 16 MB).  A small run's is indented, for whoever
 * reads it: made whole, then laid out as cJSON_Print would (json_indent). */
static int write_summary_stream(int fd, void *ctx)
{
    const struct summary_stream *s = ctx;
    size_t n = s->r->dag->n_steps;
    struct strbuf sb = STRBUF_INIT;
    summary_head(&sb, s->sum, s->finished);
    sb_adds(&sb, ",\"steps\":[");
    struct blank_members blank = { STRBUF_INIT, STRBUF_INIT };
    const struct life nothing = { 0 };
    summary_before_name(&blank.before, &nothing);
    summary_after_name(&blank.after, &nothing);
    int rc = 0;
    uint64_t written = 0, started = 0;     /* (the disk started on them as they add up: writeback_start) */
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (i > 0) sb_addc(&sb, ',');
        summary_step(&sb, s->r, i, &blank);
        if (n <= PRETTY_MAX) continue;
        rc = sb_write_some(&sb, fd, SUMMARY_CHUNK, &written);
        if (written - started >= WRITEBACK_BYTES) {
            writeback_start(fd, written, written - started);
            started = written;
        }
    }
    sb_release(&blank.before);
    sb_release(&blank.after);
    sb_adds(&sb, "]}");
    if (rc == 0 && n <= PRETTY_MAX) {
        struct strbuf pretty = STRBUF_INIT;
        json_indent(&pretty, sb.buf, sb.len);
        sb_release(&sb);
        sb = pretty;
    }
    sb_addc(&sb, '\n');
    return sb_write_last(&sb, fd, rc);
}

void step_runner_set_metrics(struct step_runner *r, size_t i, const char *metrics_json, const char *series_json)
{
    struct life *l = &r->lives[i];
    if (metrics_json || l->metrics) set_string(&l->metrics, metrics_json);   /* (most steps report none) */
    if (series_json || l->series) set_string(&l->series, series_json);
}

int step_runner_write_summary(const struct step_runner *r, const char *path, const struct step_summary *sum,
                              char *err, size_t errlen)
{
    struct summary_stream s = { r, sum, wall_seconds() };
    /* a run in which nothing ran changed nothing the summary must survive */
    return (r->any_started ? nofollow_write_atomic_with : nofollow_replace_with)(path, write_summary_stream, &s, err,
                                                                                errlen);
}
