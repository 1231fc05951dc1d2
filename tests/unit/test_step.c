/* test_step.c — a step's life (step.h) through a fake body whose attempts
 * wait on real timers: retries after a back-off, a fresh deadline for each
 * attempt, cancel during an attempt and during a back-off, the journal
 * lines written, in their order, with the run's end last, and a step's
 * state record put once its end is recorded. */
#include "check.h"
#include "fixtures.h"
#include "dag.h"
#include "journal.h"
#include "loop.h"
#include "sched.h"
#include "statestore.h"
#include "step.h"
#include "step_wait.h"
#include "work.h"
#include "util.h"

#include <cjson/cJSON.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

static struct loop *new_loop(void)
{
    char err[256];
    struct loop *loop = loop_new(err, sizeof err);
    if (!loop) { fprintf(stderr, "loop_new: %s\n", err); exit(2); }
    return loop;
}

#define MAX_STEPS 4

/* The fake body: step i fails its first fail[i] attempts (after wait[i]
 * seconds each), then succeeds; an attempt honours the step's deadline. */
struct fake {
    struct step_runner *r;
    struct loop *loop;
    int fail[MAX_STEPS];
    double wait[MAX_STEPS];
    int attempts[MAX_STEPS];
    double deadline_left[MAX_STEPS][4];   /* deadline - now at each attempt's start */
    struct step_wait *waiting[MAX_STEPS];
    struct step_wait_list lists[MAX_STEPS];
    bool timed_out[MAX_STEPS];
    const char *path[MAX_STEPS];          /* an output a successful attempt put in place, or NULL */
    int graceful, forced, finished_ok, finished_failed;
};

struct pending { struct fake *f; size_t i; };
static struct pending pendings[MAX_STEPS];

static void attempt_over(struct step_wait *w, void *arg)
{
    struct pending *p = arg;
    struct fake *f = p->f;
    size_t i = p->i;
    bool cancelled = step_wait_timer_cancelled(w);
    step_wait_free(w);
    f->waiting[i] = NULL;
    struct step_outcome o = { .ok = !cancelled && !f->timed_out[i] && f->attempts[i] > f->fail[i],
                              .has_exit_code = true, .exit_code = 0 };
    if (!o.ok) {
        o.exit_code = 3;
        o.message = f->timed_out[i] ? "step 'x' timed out\nmore" : "step 'x' failed (exit code 3)\n  command: false";
        o.report = o.message;
        o.stderr_tail = "\n  last lines of stderr:\n    boom";
        o.timed_out = f->timed_out[i];
        o.interrupted = cancelled;
    } else {
        o.outputs_json = "{\"d\":{\"hash\":\"ab\",\"path\":\"out\"}}";
        if (f->path[i]) {
            o.paths = &f->path[i];
            o.n_paths = 1;
        }
    }
    step_attempt_done(f->r, i, &o);
}

/* What the journal held when each step started (fake_attempt keeps it). */
static char *journal_at_start[MAX_STEPS];
static const char *journal_path_seen;

static void fake_attempt(void *ctx, struct step_runner *r, size_t i, int attempt)
{
    struct fake *f = ctx;
    f->attempts[i] = attempt;
    if (journal_path_seen && attempt == 1) journal_at_start[i] = read_file(journal_path_seen, NULL);
    double deadline = step_runner_deadline(r, i), wait = f->wait[i];
    f->timed_out[i] = false;
    if (attempt <= 4) f->deadline_left[i][attempt - 1] = deadline > 0 ? deadline - monotonic_seconds() : 0;
    if (deadline > 0 && monotonic_seconds() + wait > deadline) {   /* as a process's wait does */
        wait = deadline - monotonic_seconds();
        f->timed_out[i] = true;
    }
    pendings[i] = (struct pending){ f, i };
    f->waiting[i] = step_wait_timer(f->loop, wait, attempt_over, &pendings[i]);
    step_wait_attach(&f->lists[i], f->waiting[i]);
}

static void fake_cancel(void *ctx, size_t i, enum cancel_mode mode)
{
    struct fake *f = ctx;
    if (mode == CANCEL_GRACEFUL) f->graceful++;
    else f->forced++;
    step_wait_list_cancel(&f->lists[i], mode);
}

static void fake_fingerprint(void *ctx, size_t i, char **fp, char **parts)
{
    (void)ctx;
    *fp = i == 0 ? xstrdup("f00d") : NULL;
    *parts = i == 0 ? xstrdup("{\"code\":\"c0de\"}") : NULL;
}

struct run_result {
    int code;
    char *journal;          /* its text */
};

static struct state_store *run_state;     /* where run() has steps' records put, or NULL */

static struct run_result run(struct fake *f, struct dag *d, const struct step_spec *specs, bool with_journal)
{
    char err[512], dir[] = "/tmp/flow-test-step-XXXXXX";
    struct run_result res = { 0, NULL };
    if (!mkdtemp(dir)) { perror("mkdtemp"); exit(2); }
    char *path = xasprintf("%s/journal.jsonl", dir);
    struct journal *j = with_journal ? journal_open(path, err, sizeof err) : NULL;
    if (with_journal && !j) { fprintf(stderr, "%s\n", err); exit(2); }
    struct step_body body = { f, fake_attempt, fake_cancel, NULL, fake_fingerprint };
    struct step_runner_options opt = { .journal = j, .run_id = "r1", .specs = specs, .backoff = 0.01,
                                       .state = run_state };
    f->r = step_runner_new(d, f->loop, &opt, &body);
    struct sched_executor ex = step_runner_executor(f->r);
    struct sched_options so = { .jobs = 2 };
    struct sched *s = sched_new(d, f->loop, &so, &ex, NULL);
    res.code = sched_run(s);
    for (size_t i = 0; i < d->n_steps; i++) {            /* the steps whose end was recorded, ok or failed */
        f->finished_ok += sched_state(s, i) == STEP_DONE;
        f->finished_failed += sched_state(s, i) == STEP_FAILED;
    }
    CHECK(step_runner_finish(f->r, s, res.code, err, sizeof err) == 0);
    char *summary = xasprintf("%s/run.json", dir);
    struct step_summary sum = { .run_id = "r1", .status = "ok", .env = "base", .code = res.code, .started = 1 };
    CHECK(step_runner_write_summary(f->r, summary, &sum, err, sizeof err) == 0);
    char *text = read_file(summary, NULL);
    CHECK(text && strstr(text, "\"steps\":\t[{"));
    free(text);
    if (j) {
        CHECK(journal_close(j, err, sizeof err) == 0);
        res.journal = read_file(path, NULL);
        /* step.c writes JSON itself: every line must parse, and as an object */
        char *copy = xstrdup(res.journal ? res.journal : ""), *save = NULL;
        for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
            cJSON *parsed = cJSON_Parse(line);
            CHECK(parsed && cJSON_IsObject(parsed));
            cJSON_Delete(parsed);
        }
        free(copy);
    }
    sched_free(s);
    step_runner_free(f->r);
    unlink(summary);
    unlink(path);
    rmdir(dir);
    free(summary);
    free(path);
    return res;
}

/* The line of the journal that contains `what`, from `from` on; NULL if none. */
static const char *line_with(const char *from, const char *what)
{
    return from ? strstr(from, what) : NULL;
}

static void test_retries_back_off_then_succeed(void)
{
    struct dag *d = chain(2);
    struct fake f = { .loop = new_loop(), .fail = { 2, 0 }, .wait = { 0.01, 0.01 } };
    struct step_spec specs[2] = { { .retries = 3 }, { .retries = 0, .command = true } };
    double t0 = monotonic_seconds();
    struct run_result res = run(&f, d, specs, true);
    CHECK(res.code == 0);
    CHECK(f.attempts[0] == 3 && f.attempts[1] == 1);
    CHECK(monotonic_seconds() - t0 >= 0.03);            /* back-offs of 0.01 and 0.02 s */
    CHECK(f.finished_ok == 2);
    /* the order: s0 starts, ends ok after 3 attempts, s1 starts and ends, run_end */
    const char *a = line_with(res.journal, "{\"event\":\"step_start\",\"step\":\"s0\",\"time\":");
    const char *b = line_with(a, "{\"attempts\":3,\"elapsed\":");
    const char *c = line_with(b, "\"event\":\"step_end\",\"fingerprint\":\"f00d\",\"outputs\":{\"d\":{\"hash\":\"ab\","
                                 "\"path\":\"out\"}},\"parts\":{\"code\":\"c0de\"},\"run\":\"r1\",\"status\":\"ok\","
                                 "\"step\":\"s0\",\"time\":");
    const char *e = line_with(c, "{\"event\":\"step_start\",\"step\":\"s1\"");
    const char *g = line_with(e, "\"status\":\"ok\",\"step\":\"s1\"");
    const char *h = line_with(g, "{\"code\":0,\"event\":\"run_end\",\"time\":");
    CHECK(a && b && c && e && g && h);
    CHECK(strstr(a, "\"fingerprint\":\"f00d\"}"));        /* the start carries the fingerprint */
    free(res.journal);
    loop_free(f.loop);
    dag_free(d);
}

static void test_failure_after_the_last_retry(void)
{
    struct dag *d = chain(2);
    struct fake f = { .loop = new_loop(), .fail = { 9, 0 }, .wait = { 0.001, 0.001 } };
    struct step_spec specs[2] = { { .retries = 1 }, { 0 } };
    struct run_result res = run(&f, d, specs, true);
    CHECK(res.code == 1);
    CHECK(f.attempts[0] == 2 && f.attempts[1] == 0);     /* s1 never ran */
    CHECK(f.finished_failed == 1);
    CHECK_CONTAINS(res.journal, "{\"attempts\":2,\"elapsed\":");
    CHECK_CONTAINS(res.journal, "\"error\":\"step 'x' failed (exit code 3)\",\"event\":\"step_end\","
                                "\"exit_code\":3,\"run\":\"r1\",\"status\":\"failed\",\"step\":\"s0\"");
    CHECK(!strstr(res.journal, "\"step\":\"s1\""));
    free(res.journal);
    loop_free(f.loop);
    dag_free(d);
}

static void test_each_attempt_gets_its_own_deadline(void)
{
    struct dag *d = chain(1);
    struct fake f = { .loop = new_loop(), .fail = { 0 }, .wait = { 30 } };
    struct step_spec specs[1] = { { .retries = 1, .timeout = 0.05 } };
    double t0 = monotonic_seconds();
    struct run_result res = run(&f, d, specs, false);
    CHECK(res.code == 1);
    CHECK(monotonic_seconds() - t0 < 10);                 /* not the 30 s the attempts wanted */
    CHECK(f.attempts[0] == 2);
    for (int k = 0; k < 2; k++)
        CHECK(f.deadline_left[0][k] > 0.03 && f.deadline_left[0][k] <= 0.05);
    loop_free(f.loop);
    dag_free(d);
}

static void send_sigint(void *arg)
{
    (void)arg;
    kill(getpid(), SIGINT);
}

static void test_cancel_during_an_attempt(void)
{
    struct dag *d = chain(1);
    struct fake f = { .loop = new_loop(), .fail = { 0 }, .wait = { 60 } };
    struct step_spec specs[1] = { { .retries = 5 } };
    loop_add_timer(f.loop, 0.05, send_sigint, NULL);
    double t0 = monotonic_seconds();
    struct run_result res = run(&f, d, specs, true);
    CHECK(res.code == 130);
    CHECK(monotonic_seconds() - t0 < 30);
    CHECK(f.graceful == 1 && f.forced == 0);
    CHECK(f.attempts[0] == 1);                            /* an interrupted step is not retried */
    CHECK_CONTAINS(res.journal, "\"status\":\"interrupted\",\"step\":\"s0\"");
    CHECK_CONTAINS(res.journal, "{\"code\":130,\"event\":\"run_end\"");
    free(res.journal);
    loop_free(f.loop);
    dag_free(d);
}

static void test_cancel_during_a_back_off(void)
{
    struct dag *d = chain(1);
    struct fake f = { .loop = new_loop(), .fail = { 9 }, .wait = { 0.001 } };
    struct step_spec specs[1] = { { .retries = 20 } };
    /* the back-offs grow 0.01, 0.02, …, 0.64, 1.28 s: the interrupt lands in one */
    loop_add_timer(f.loop, 0.25, send_sigint, NULL);
    double t0 = monotonic_seconds();
    struct run_result res = run(&f, d, specs, true);
    CHECK(res.code == 130);
    CHECK(monotonic_seconds() - t0 < 1.0);                /* the wait ended early */
    CHECK(f.graceful == 0);                               /* no attempt was in flight */
    CHECK(f.attempts[0] >= 2 && f.attempts[0] < 20);
    CHECK_CONTAINS(res.journal, "\"status\":\"interrupted\",\"step\":\"s0\"");
    free(res.journal);
    loop_free(f.loop);
    dag_free(d);
}

/* Group commit: a step is done for its dependents as soon as it succeeds,
 * and its line waits for its batch, written once the batch's outputs are
 * flushed.  Here the flush fails (the output is not there): the step fails
 * then, after all, the run stops and fails, and the journal has no line
 * saying it ended well. */
static void test_a_step_whose_outputs_cannot_be_flushed_fails_late(void)
{
    struct dag *d = chain(3);
    struct fake f = { .loop = new_loop(), .fail = { 0, 0, 0 }, .wait = { 0.001, 0.001, 0.001 },
                      .path = { NULL, "/dev/null/flow-test-output", NULL } };   /* ENOTDIR */
    struct step_spec specs[3] = { { 0 }, { 0 }, { 0 } };
    struct run_result res = run(&f, d, specs, true);
    CHECK(res.code == 1);
    CHECK(f.attempts[0] == 1 && f.attempts[1] == 1);
    CHECK(f.finished_failed >= 1);
    CHECK(res.journal && !strstr(res.journal, "\"status\":\"ok\",\"step\":\"s1\""));
    free(res.journal);
    loop_free(f.loop);
    dag_free(d);
}

/* A run with a journal, a work pool and an output file in a directory of
 * its own: what a test of the flush needs. */
struct pooled {
    char dir[64], err[512];
    char *jpath, *out;
    struct loop *loop;
    struct work_pool *pool;
    struct journal *j;
    struct sched *s;               /* pooled_start's, of one slot */
};

static void pooled_open(struct pooled *p, const char *name)
{
    snprintf(p->dir, sizeof p->dir, "/tmp/flow-test-step-%s-XXXXXX", name);
    if (!mkdtemp(p->dir)) { perror("mkdtemp"); exit(2); }
    p->jpath = xasprintf("%s/journal.jsonl", p->dir);
    p->out = xasprintf("%s/out", p->dir);
    FILE *fh = fopen(p->out, "w");
    CHECK(fh && fputs("x", fh) >= 0 && fclose(fh) == 0);
    p->loop = new_loop();
    p->pool = work_pool_new(p->loop, 1, p->err, sizeof p->err);
    p->j = journal_open(p->jpath, p->err, sizeof p->err);
    CHECK(p->pool && p->j);
}

/* f's steps of d, run by a step runner with p's journal and pool. */
static void pooled_start(struct pooled *p, struct fake *f, struct dag *d, const struct step_spec *specs)
{
    struct step_body body = { f, fake_attempt, fake_cancel, NULL, fake_fingerprint };
    struct step_runner_options opt = { .journal = p->j, .pool = p->pool, .run_id = "r1", .specs = specs };
    f->r = step_runner_new(d, p->loop, &opt, &body);
    struct sched_executor ex = step_runner_executor(f->r);
    struct sched_options so = { .jobs = 1 };
    p->s = sched_new(d, p->loop, &so, &ex, NULL);
}

/* Closes the journal (its text returned, to free) and removes everything. */
static char *pooled_close(struct pooled *p)
{
    work_pool_free(p->pool);
    CHECK(journal_close(p->j, p->err, sizeof p->err) == 0);
    char *text = read_file(p->jpath, NULL);
    loop_free(p->loop);
    unlink(p->out);
    unlink(p->jpath);
    rmdir(p->dir);
    free(p->out);
    free(p->jpath);
    return text;
}

/* A step's dependent starts before the step's end is written (its outputs
 * are flushed later, with others'), and the run is over only once every
 * end is: the journal has them all, in the steps' order. */
static void test_dependents_start_before_the_flush(void)
{
    struct pooled p;
    pooled_open(&p, "early");
    struct dag *d = chain(3);
    struct fake f = { .loop = p.loop, .wait = { 0.001, 0.001, 0.001 }, .path = { p.out, p.out, p.out } };
    struct step_spec specs[3] = { { 0 }, { 0 }, { 0 } };
    pooled_start(&p, &f, d, specs);
    struct sched *s = p.s;
    journal_path_seen = p.jpath;
    CHECK(sched_run(s) == 0);
    journal_path_seen = NULL;
    for (size_t i = 0; i < 3; i++) CHECK(sched_state(s, i) == STEP_DONE);
    /* s1 and s2 started with their producer's end not yet in the journal */
    CHECK(journal_at_start[1] && !strstr(journal_at_start[1], "\"status\":\"ok\",\"step\":\"s0\""));
    CHECK(journal_at_start[2] && !strstr(journal_at_start[2], "\"status\":\"ok\",\"step\":\"s1\""));
    /* the run's end waited for every step's: all three lines, in order */
    char *text = read_file(p.jpath, NULL);
    const char *p0 = text ? strstr(text, "\"status\":\"ok\",\"step\":\"s0\"") : NULL;
    const char *p1 = text ? strstr(text, "\"status\":\"ok\",\"step\":\"s1\"") : NULL;
    const char *p2 = text ? strstr(text, "\"status\":\"ok\",\"step\":\"s2\"") : NULL;
    CHECK(p0 && p1 && p2 && p0 < p1 && p1 < p2);
    free(text);
    CHECK(step_runner_finish(f.r, s, 0, p.err, sizeof p.err) == 0);
    sched_free(s);
    step_runner_free(f.r);
    for (size_t i = 0; i < 3; i++) { free(journal_at_start[i]); journal_at_start[i] = NULL; }
    dag_free(d);
    free(pooled_close(&p));
}

/* A step with a fingerprint gets its record once its end is recorded: the
 * fingerprint, its output (a file, so the body holds only the parts), the
 * time of its step_end.  One without a fingerprint gets none. */
static void test_a_recorded_step_gets_its_state_record(void)
{
    char err[256], dir[] = "/tmp/flow-test-step-state-XXXXXX";
    if (!mkdtemp(dir)) { perror("mkdtemp"); exit(2); }
    char *path = xasprintf("%s/state.log", dir);
    run_state = state_store_open(path, NULL, err, sizeof err);
    CHECK(run_state != NULL);
    struct dag *d = chain(2);
    struct fake f = { .loop = new_loop(), .wait = { 0.001, 0.001 } };
    struct step_spec specs[2] = { { .retries = 0 }, { .retries = 0 } };
    struct run_result res = run(&f, d, specs, true);
    CHECK(res.code == 0);
    const struct state_rec *r = state_store_get(run_state, "s0");
    CHECK(r && strcmp(r->fp, "f00d") == 0 && r->time > 0);
    CHECK(r && r->n_outs == 1 && r->outs[0].kind == 'f' && strcmp(r->outs[0].dataset, "d") == 0 &&
          strcmp(r->outs[0].path, "out") == 0 && strcmp(r->outs[0].hash, "ab") == 0);
    size_t blen = 0;
    const char *body = r ? state_store_body(run_state, r, &blen) : NULL;
    CHECK(body && blen == strlen("{\"parts\":{\"code\":\"c0de\"}}") &&
          memcmp(body, "{\"parts\":{\"code\":\"c0de\"}}", blen) == 0);
    CHECK(state_store_get(run_state, "s1") == NULL);           /* no fingerprint: no record */
    CHECK(state_store_unsaved(run_state));
    state_store_free(run_state);
    run_state = NULL;
    free(res.journal);
    dag_free(d);
    loop_free(f.loop);
    unlink(path);
    rmdir(dir);
    free(path);
}

/* A runner freed while a flush of its outputs is still on the work pool (a
 * run released before step_runner_finish): the flush completes on its own,
 * touching nothing of the runner (ASan would see it), and ends no step. */
static void test_a_flush_outlives_its_freed_runner(void)
{
    struct pooled p;
    pooled_open(&p, "orphan");
    struct dag *d = chain(1);
    struct fake f = { .loop = p.loop, .wait = { 0.001 }, .path = { p.out } };
    struct step_spec specs[1] = { { .retries = 0 } };
    pooled_start(&p, &f, d, specs);
    struct sched *s = p.s;
    sched_begin(s);
    sched_poll(s);                                    /* s0 starts: its attempt waits on a timer */
    while (f.attempts[0] == 0 || f.waiting[0]) loop_run_once(p.loop, 0.01);
    CHECK(!sched_poll(s));             /* its end is held; nothing runs, so its flush goes to the pool */
    sched_free(s);
    step_runner_free(f.r);
    for (int k = 0; k < 20; k++) loop_run_once(p.loop, 0.01);   /* the flush's completion arrives */
    char *text = pooled_close(&p);     /* its lines are not written: the step never ended */
    CHECK(text && !strstr(text, "step_end"));
    free(text);
    dag_free(d);
}

/* A scheduler freed before its run ended (a run released by a raise), the
 * runner kept (run.json's record outlives the run) and detached: s0's end,
 * held with the flush timer armed, and s1's attempt, which ends after, reach
 * nothing of the scheduler (ASan would see it) and write nothing more. */
static void test_a_detached_runner_outlives_its_scheduler(void)
{
    struct pooled p;
    pooled_open(&p, "detached");
    struct dag *d = chain(2);
    struct fake f = { .loop = p.loop, .wait = { 0.001, 0.2 }, .path = { p.out } };
    struct step_spec specs[2] = { { .retries = 0 }, { .retries = 0 } };
    pooled_start(&p, &f, d, specs);
    sched_begin(p.s);
    while (f.attempts[1] == 0) {                      /* s0 ends, held; s1 starts */
        sched_poll(p.s);
        loop_run_once(p.loop, 0.01);
    }
    step_runner_detach(f.r);
    sched_free(p.s);
    double until = monotonic_seconds() + 0.4;         /* past the flush timer and s1's end */
    while (monotonic_seconds() < until) loop_run_once(p.loop, 0.05);
    CHECK(f.waiting[1] == NULL);                      /* s1's attempt did end, and was dropped */
    step_runner_free(f.r);
    char *text = pooled_close(&p);
    CHECK(text && !strstr(text, "step_end"));
    free(text);
    dag_free(d);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    RUN(test_retries_back_off_then_succeed);
    RUN(test_failure_after_the_last_retry);
    RUN(test_each_attempt_gets_its_own_deadline);
    RUN(test_cancel_during_an_attempt);
    RUN(test_cancel_during_a_back_off);
    RUN(test_a_step_whose_outputs_cannot_be_flushed_fails_late);
    RUN(test_dependents_start_before_the_flush);
    RUN(test_a_recorded_step_gets_its_state_record);
    RUN(test_a_flush_outlives_its_freed_runner);
    RUN(test_a_detached_runner_outlives_its_scheduler);
    return CHECK_DONE("step");
}
