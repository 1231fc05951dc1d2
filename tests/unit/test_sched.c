/* test_sched.c — the scheduler's pools and cancel modes, through an executor
 * whose steps wait on timers (step_wait.h), as remote jobs will.  Nothing here
 * asserts a duration: concurrency is what the pools' counters and the
 * executor's own count saw, and what cannot happen would hang, bounded by a
 * long timer, not pass by luck. */
#include "check.h"
#include "fixtures.h"
#include "dag.h"
#include "loop.h"
#include "sched.h"
#include "step_wait.h"
#include "util.h"

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

/* A graph of n independent steps named s0, s1, ... */
static struct dag *independent_steps(size_t n)
{
    struct dag *d = dag_new();
    char err[256], name[32], out[32];
    for (size_t i = 0; i < n; i++) {
        snprintf(name, sizeof name, "s%zu", i);
        snprintf(out, sizeof out, "d%zu", i);
        struct dag_io o = { .dataset = out };
        struct dag_step s = { .name = name, .outputs = &o, .n_outputs = 1 };
        if (dag_add_step(d, &s, err, sizeof err) < 0) { fprintf(stderr, "%s\n", err); exit(2); }
    }
    if (dag_finalize(d, err, sizeof err) != 0) { fprintf(stderr, "%s\n", err); exit(2); }
    return d;
}

static struct loop *new_loop(void)
{
    char err[256];
    struct loop *loop = loop_new(err, sizeof err);
    if (!loop) { fprintf(stderr, "loop_new: %s\n", err); exit(2); }
    return loop;
}

/* The test executor: step i waits on a timer of seconds[i]; every step's
 * waits are in its own list, cancelled as the scheduler asks. */
struct fake {
    struct sched *s;
    struct loop *loop;
    const double *seconds;
    struct step_wait **wait;
    struct step_wait_list *lists;
    size_t running, peak;
    size_t finished_in[8];         /* per pool, steps finished */
    const size_t *pool_of;
    int graceful, forced;          /* cancels seen */
    bool ignore_graceful;          /* a step that does not stop at the first Ctrl-C */
    void (*on_finish)(struct fake *f, size_t i);
    void (*timer_done)(struct step_wait *w, void *arg);   /* NULL: timer_done */
};


static size_t index_of(struct fake *f, struct step_wait *w)
{
    size_t i = 0;
    while (f->wait[i] != w) i++;
    return i;
}

/* Step i's timer w is over: which step it was. */
static size_t timer_over(struct fake *f, struct step_wait *w)
{
    size_t i = index_of(f, w);
    step_wait_free(w);
    f->wait[i] = NULL;
    f->running--;
    return i;
}

static void timer_done(struct step_wait *w, void *arg)
{
    struct fake *f = arg;
    size_t i = timer_over(f, w);
    f->finished_in[f->pool_of ? f->pool_of[i] : 0]++;
    sched_step_done(f->s, i, true);
    if (f->on_finish) f->on_finish(f, i);
}

static int fake_start(void *ctx, struct sched *s, size_t i)
{
    struct fake *f = ctx;
    f->s = s;
    if (++f->running > f->peak) f->peak = f->running;
    f->wait[i] = step_wait_timer(f->loop, f->seconds[i], f->timer_done ? f->timer_done : timer_done, f);
    step_wait_attach(&f->lists[i], f->wait[i]);
    return 0;
}

static void fake_cancel(void *ctx, struct sched *s, size_t i, enum cancel_mode mode)
{
    struct fake *f = ctx;
    (void)s;
    if (mode == CANCEL_GRACEFUL) f->graceful++;
    else f->forced++;
    if (mode == CANCEL_GRACEFUL && f->ignore_graceful) return;
    step_wait_list_cancel(&f->lists[i], mode);
}

static int run_fake(struct fake *f, struct dag *d, const struct sched_options *opt)
{
    f->wait = xcalloc(d->n_steps, sizeof *f->wait);
    f->lists = xcalloc(d->n_steps, sizeof *f->lists);
    f->pool_of = opt->pool_of;
    struct sched_executor ex = { f, fake_start, fake_cancel, NULL, NULL, NULL };
    struct sched *s = sched_new(d, f->loop, opt, &ex, NULL);
    f->s = s;
    int code = sched_run(s);
    return code;
}

static void free_fake(struct fake *f)
{
    free(f->wait);
    free(f->lists);
    sched_free(f->s);
}

/* ---- -j: one pool of `jobs` slots ----------------------------------------- */

static void test_jobs_bound_one_pool(void)
{
    struct dag *d = independent_steps(10);
    double secs[10];
    for (int i = 0; i < 10; i++) secs[i] = 0.01;
    struct fake f = { .loop = new_loop(), .seconds = secs };
    struct sched_options opt = { .jobs = 3 };
    CHECK(run_fake(&f, d, &opt) == 0);
    CHECK(f.peak == 3);
    CHECK(sched_pool_peak(f.s, 0) == 3);
    CHECK(f.finished_in[0] == 10);
    free_fake(&f);
    loop_free(f.loop);
    dag_free(d);
}

/* ---- a named pool of size 1 serialises its steps while the others run ----- */

static void test_named_pool_serialises(void)
{
    /* steps 0-2 in "gpu" (1 slot), 3-8 in "local" (2 slots) */
    struct dag *d = independent_steps(9);
    double secs[9];
    size_t pool_of[9];
    for (int i = 0; i < 9; i++) {
        secs[i] = 0.02;
        pool_of[i] = i < 3 ? 1 : 0;
    }
    struct sched_pool pools[] = { { "local", 2 }, { "gpu", 1 } };
    struct fake f = { .loop = new_loop(), .seconds = secs };
    struct sched_options opt = { .jobs = 2, .pools = pools, .n_pools = 2, .pool_of = pool_of };
    CHECK(run_fake(&f, d, &opt) == 0);
    CHECK(sched_pool_peak(f.s, 1) == 1);     /* never two gpu steps at once */
    CHECK(sched_pool_peak(f.s, 0) == 2);     /* the local ones at full -j meanwhile */
    CHECK(f.peak == 3);                      /* both pools at once */
    CHECK(f.finished_in[0] == 6 && f.finished_in[1] == 3);
    for (size_t i = 0; i < 9; i++) CHECK(sched_state(f.s, i) == STEP_DONE);
    free_fake(&f);
    loop_free(f.loop);
    dag_free(d);
}

/* ---- 200 remote-pool waits hold no local slot ------------------------------ */

#define N_REMOTE 200
#define N_LOCAL 20

/* Once every local step is done, the remote "jobs" end (their timers are
 * cancelled, which fires them): had they held local slots, no local step
 * could have run, and the run would wait for their 60 s instead. */
static void end_remote_after_locals(struct fake *f, size_t i)
{
    if (f->pool_of[i] != 0 || f->finished_in[0] != N_LOCAL) return;
    CHECK(sched_pool_running(f->s, 1) == N_REMOTE);    /* all still pending */
    for (size_t k = 0; k < N_REMOTE; k++) step_wait_cancel(f->wait[k], CANCEL_GRACEFUL);
}

static void test_remote_waits_hold_no_local_slot(void)
{
    struct dag *d = independent_steps(N_REMOTE + N_LOCAL);
    static double secs[N_REMOTE + N_LOCAL];
    static size_t pool_of[N_REMOTE + N_LOCAL];
    for (size_t i = 0; i < N_REMOTE + N_LOCAL; i++) {
        bool remote = i < N_REMOTE;          /* declared first: they would be started first */
        secs[i] = remote ? 60 : 0.005;
        pool_of[i] = remote ? 1 : 0;
    }
    struct sched_pool pools[] = { { "local", 2 }, { "remote", SCHED_UNBOUNDED } };
    struct fake f = { .loop = new_loop(), .seconds = secs, .on_finish = end_remote_after_locals };
    struct sched_options opt = { .jobs = 2, .pools = pools, .n_pools = 2, .pool_of = pool_of };
    double t0 = monotonic_seconds();
    CHECK(run_fake(&f, d, &opt) == 0);
    CHECK(monotonic_seconds() - t0 < 50);
    CHECK(sched_pool_peak(f.s, 1) == N_REMOTE);
    CHECK(sched_pool_peak(f.s, 0) == 2);
    CHECK(f.finished_in[0] == N_LOCAL && f.finished_in[1] == N_REMOTE);
    free_fake(&f);
    loop_free(f.loop);
    dag_free(d);
}

/* ---- two runs on one loop: begin, then poll after each turn ---------------- */

static void test_two_runs_share_the_loop(void)
{
    struct loop *loop = new_loop();
    struct dag *da = independent_steps(4), *db = independent_steps(4);
    double secs[4] = { 0.03, 0.03, 0.03, 0.03 };
    struct fake fa = { .loop = loop, .seconds = secs }, fb = { .loop = loop, .seconds = secs };
    struct sched_options opt = { .jobs = 2 };
    struct fake *fs[] = { &fa, &fb };
    struct dag *ds[] = { da, db };
    struct sched *s[2];
    for (int k = 0; k < 2; k++) {
        fs[k]->wait = xcalloc(4, sizeof *fs[k]->wait);
        fs[k]->lists = xcalloc(4, sizeof *fs[k]->lists);
        struct sched_executor ex = { fs[k], fake_start, fake_cancel, NULL, NULL, NULL };
        s[k] = fs[k]->s = sched_new(ds[k], loop, &opt, &ex, NULL);
        sched_begin(s[k]);
    }
    bool over[2] = { false, false };
    size_t both_running = 0;
    while (!(over[0] && over[1])) {
        for (int k = 0; k < 2; k++) over[k] = over[k] || sched_poll(s[k]);
        if (fa.running && fb.running) both_running++;
        if (!(over[0] && over[1])) loop_run_once(loop, -1);
    }
    CHECK(both_running > 0);                  /* their steps interleaved */
    CHECK(fa.peak == 2 && fb.peak == 2);      /* each within its own -j */
    CHECK(sched_code(s[0]) == 0 && sched_code(s[1]) == 0);
    CHECK(sched_poll(s[0]));                  /* over stays over */
    for (size_t i = 0; i < 4; i++) CHECK(sched_state(s[0], i) == STEP_DONE && sched_state(s[1], i) == STEP_DONE);
    free_fake(&fa);
    free_fake(&fb);
    dag_free(da);
    dag_free(db);
    loop_free(loop);
}

/* ---- Ctrl-C: graceful first, forced at the second --------------------------- */

static void send_sigint(void *arg)
{
    (void)arg;
    kill(getpid(), SIGINT);
}

static void test_interrupt_cancels_graceful_then_forced(void)
{
    struct dag *d = independent_steps(3);
    double secs[3] = { 60, 60, 60 };
    struct fake f = { .loop = new_loop(), .seconds = secs, .ignore_graceful = true };
    struct sched_options opt = { .jobs = 2 };
    loop_add_timer(f.loop, 0.05, send_sigint, NULL);
    loop_add_timer(f.loop, 0.3, send_sigint, NULL);
    double t0 = monotonic_seconds();
    CHECK(run_fake(&f, d, &opt) == 130);
    CHECK(monotonic_seconds() - t0 < 50);
    CHECK(f.graceful == 2);                  /* both running steps, once each */
    CHECK(f.forced == 2);                    /* then by force: the steps had ignored it */
    CHECK(sched_state(f.s, 2) == STEP_NOT_RUN);       /* nothing new started after Ctrl-C */
    CHECK(sched_interrupted(f.s));
    free_fake(&f);
    loop_free(f.loop);
    dag_free(d);
}

static void test_graceful_cancel_alone_stops_cooperating_steps(void)
{
    struct dag *d = independent_steps(2);
    double secs[2] = { 60, 60 };
    struct fake f = { .loop = new_loop(), .seconds = secs };
    struct sched_options opt = { .jobs = 2 };
    loop_add_timer(f.loop, 0.05, send_sigint, NULL);
    CHECK(run_fake(&f, d, &opt) == 130);
    CHECK(f.graceful == 2);
    CHECK(f.forced == 0);
    free_fake(&f);
    loop_free(f.loop);
    dag_free(d);
}

/* ---- ends held back: sched_hold, quiet, a late failure ------------------ */

/* Each step's end is held (as step.c holds one until its outputs are
 * flushed): done for the scheduler, the run open until the executor's quiet
 * hook releases it.  `log` says what happened, in order: "+i" a start, "-i"
 * an unhold. */
struct held_fake {
    struct fake f;
    size_t held[8], n_held, quiet_calls;
    bool fail_s0_late;                   /* s0's end turns out lost when s1 ends */
    char log[64];
};

static void note(struct held_fake *h, char what, size_t i)
{
    size_t n = strlen(h->log);
    snprintf(h->log + n, sizeof h->log - n, "%c%zu ", what, i);
}

static void timer_done_held(struct step_wait *w, void *arg)
{
    struct held_fake *h = arg;
    size_t i = timer_over(&h->f, w);
    sched_hold(h->f.s, i);
    sched_step_done(h->f.s, i, true);
    if (i == 1 && h->fail_s0_late) sched_step_failed_late(h->f.s, 0);
    h->held[h->n_held++] = i;
}

static int held_start(void *ctx, struct sched *s, size_t i)
{
    note(ctx, '+', i);
    return fake_start(ctx, s, i);
}

static void release_held(void *ctx, struct sched *s)
{
    struct held_fake *h = ctx;
    h->quiet_calls++;
    for (size_t k = 0; k < h->n_held; k++) {
        note(h, '-', h->held[k]);
        sched_unhold(s, h->held[k]);
    }
    h->n_held = 0;
}

static int run_held(struct held_fake *h, struct dag *d, const struct sched_options *opt)
{
    static const double secs[8] = { 0.001, 0.001, 0.001, 0.001, 0.001, 0.001, 0.001, 0.001 };
    h->f.loop = new_loop();
    h->f.seconds = secs;
    h->f.timer_done = timer_done_held;
    h->f.wait = xcalloc(d->n_steps, sizeof *h->f.wait);
    h->f.lists = xcalloc(d->n_steps, sizeof *h->f.lists);
    struct sched_executor ex = { h, held_start, fake_cancel, NULL, NULL, release_held };
    h->f.s = sched_new(d, h->f.loop, opt, &ex, NULL);
    return sched_run(h->f.s);
}

static void test_held_ends_keep_the_run_open_and_may_fail_late(void)
{
    struct dag *d = independent_steps(3);
    struct held_fake h = { .fail_s0_late = true };
    struct sched_options opt = { .jobs = 1 };
    CHECK(run_held(&h, d, &opt) == 1);
    CHECK(h.quiet_calls >= 1 && h.n_held == 0);      /* over only once every end was released */
    CHECK(sched_state(h.f.s, 0) == STEP_FAILED);
    CHECK(sched_state(h.f.s, 1) == STEP_DONE);
    CHECK(sched_state(h.f.s, 2) == STEP_NOT_RUN);     /* the run stopped: nothing new started */
    free_fake(&h.f);
    loop_free(h.f.loop);
    dag_free(d);
}

/* s0 makes d0, which s1 and s2 read; s1 waits for records (after_records,
 * as a remote job does), s2 does not. */
static struct dag *fan_out(void)
{
    struct dag *d = dag_new();
    char err[256];
    char names[3][3] = { "s0", "s1", "s2" }, data[3][3] = { "d0", "d1", "d2" };
    struct dag_io d0 = { .dataset = data[0] }, d1 = { .dataset = data[1] }, d2 = { .dataset = data[2] };
    struct dag_step steps[3] = { { .name = names[0], .outputs = &d0, .n_outputs = 1 },
                                 { .name = names[1], .inputs = &d0, .n_inputs = 1, .outputs = &d1, .n_outputs = 1 },
                                 { .name = names[2], .inputs = &d0, .n_inputs = 1, .outputs = &d2, .n_outputs = 1 } };
    for (int k = 0; k < 3; k++)
        if (dag_add_step(d, &steps[k], err, sizeof err) < 0) { fprintf(stderr, "%s\n", err); exit(2); }
    if (dag_finalize(d, err, sizeof err) != 0) { fprintf(stderr, "%s\n", err); exit(2); }
    return d;
}

/* A step that waits for records starts only once its producer's held end is
 * released; one that does not starts as soon as the producer is done. */
static void test_a_step_after_records_waits_for_the_unhold(void)
{
    struct dag *d = fan_out();
    static const bool after[3] = { false, true, false };
    struct held_fake h = { 0 };
    struct sched_options opt = { .jobs = 2, .after_records = after };
    CHECK(run_held(&h, d, &opt) == 0);
    CHECK_STR(h.log, "+0 +2 -0 -2 +1 -1 ");
    for (size_t i = 0; i < 3; i++) CHECK(sched_state(h.f.s, i) == STEP_DONE);
    free_fake(&h.f);
    loop_free(h.f.loop);
    dag_free(d);
}

/* Steps that end inside their start after `spin` seconds of work, as a Lua
 * function that does not yield does; `started_at_tick`: how many had
 * started when a timer due at once fired. */
struct sync_fake {
    double spin;
    size_t started, started_at_tick;
    int ticks;
};

static int sync_start(void *ctx, struct sched *s, size_t i)
{
    struct sync_fake *f = ctx;
    double until = monotonic_seconds() + f->spin;
    while (monotonic_seconds() < until) continue;
    f->started++;
    sched_step_done(s, i, true);
    return 0;
}

static void sync_cancel(void *ctx, struct sched *s, size_t i, enum cancel_mode mode)
{
    (void)ctx, (void)s, (void)i, (void)mode;
}

static void sync_tick(void *arg)
{
    struct sync_fake *f = arg;
    if (f->ticks++ == 0) f->started_at_tick = f->started;
}

/* A chain of steps that each end inside their start never waits on the
 * loop, but the loop still turns every so often while it runs (its timers,
 * signals and pool jobs — the journal's flushes — are not held up to its
 * end).  40 steps of 2 ms each take 80 ms however loaded the machine; the
 * timer, due at once, fires after the first of them. */
static void test_steps_that_end_in_their_start_let_the_loop_turn(void)
{
    struct dag *d = chain(40);
    struct loop *loop = new_loop();
    struct sync_fake f = { .spin = 0.002 };
    struct sched_executor ex = { .ctx = &f, .start = sync_start, .cancel = sync_cancel };
    struct sched_options opt = { .jobs = 2 };
    struct sched *s = sched_new(d, loop, &opt, &ex, NULL);
    loop_add_timer(loop, 0, sync_tick, &f);
    CHECK(sched_run(s) == 0);
    CHECK(f.started == 40);
    CHECK(f.ticks == 1);
    CHECK(f.started_at_tick > 0 && f.started_at_tick < 40);
    sched_free(s);
    loop_free(loop);
    dag_free(d);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    RUN(test_jobs_bound_one_pool);
    RUN(test_named_pool_serialises);
    RUN(test_remote_waits_hold_no_local_slot);
    RUN(test_graceful_cancel_alone_stops_cooperating_steps);
    RUN(test_interrupt_cancels_graceful_then_forced);
    RUN(test_two_runs_share_the_loop);
    RUN(test_held_ends_keep_the_run_open_and_may_fail_late);
    RUN(test_a_step_after_records_waits_for_the_unhold);
    RUN(test_steps_that_end_in_their_start_let_the_loop_turn);
    return CHECK_DONE("sched");
}
