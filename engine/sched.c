/* sched.c — see sched.h.  The loop wakes for process exits and timers; after
 * every wake-up, ready steps are started while their pools have free slots. */
#include "sched.h"
#include "heap.h"
#include "util.h"

#include <stdlib.h>

/* How long sched_poll goes on starting steps before it lets the loop turn.
 * A step may end inside its start (a Lua function that does not yield) and
 * let its dependents start at once: a chain or a wide layer of such steps
 * would otherwise run to its end inside one poll, the loop seeing no timer,
 * no signal and no pool job's completion meanwhile — the group commit's
 * flush among them, so that none of their ends reached the journal until
 * the last one (step.h). */
#define TURN_EVERY 0.01
#define SKIPS_PER_LOOK 64          /* up-to-date steps decided between two looks at the clock */

/* One pool: its ready steps (earliest declared first) and its slots. */
struct pool {
    size_t size;                   /* SCHED_UNBOUNDED: no limit */
    size_t running, peak;
    struct index_heap ready;
};

struct sched {
    const struct dag *dag;
    struct loop *loop;
    struct sched_options opt;
    struct sched_executor ex;
    struct sched_observer obs;
    enum step_state *state;
    size_t *pending;               /* unfinished upstream steps */
    double *started, *finished;
    struct pool *pools;
    size_t n_pools;
    size_t *pool_of;               /* each step's pool */
    size_t running;                /* in all pools */
    size_t holds;                  /* ends held back (sched_hold): the run is not over */
    bool *held;                    /* per step: its end is held back */
    bool stopping, interrupted, failed;
    bool over;                     /* sched_poll found the run ended */
    unsigned long nudge;           /* a timer due now: the loop turns once, then sched_poll goes on */
    int interrupts_seen;
};

static void ready_push(struct sched *s, size_t v)
{
    heap_push(&s->pools[s->pool_of[v]].ready, v);
    s->state[v] = STEP_READY;
}

static bool has_free_slot(const struct pool *p)
{
    return p->size == SCHED_UNBOUNDED || p->running < p->size;
}

/* The earliest declared ready step whose pool has a free slot, taken off its
 * pool's queue; false if there is none.  Pools are few: a linear look is cheap. */
static bool next_ready(struct sched *s, size_t *out)
{
    struct pool *best = NULL;
    for (size_t k = 0; k < s->n_pools; k++) {
        struct pool *p = &s->pools[k];
        if (p->ready.n && has_free_slot(p) && (!best || p->ready.a[0] < best->ready.a[0])) best = p;
    }
    if (!best) return false;
    *out = heap_pop(&best->ready);
    return true;
}

static void init_pools(struct sched *s, const struct sched_options *opt, size_t n_steps)
{
    s->n_pools = opt->pools && opt->n_pools ? opt->n_pools : 1;
    s->pools = xcalloc(s->n_pools, sizeof *s->pools);
    s->pool_of = xcalloc(n_steps + 1, sizeof *s->pool_of);
    for (size_t k = 0; k < s->n_pools; k++)
        s->pools[k].size = opt->pools && opt->n_pools ? opt->pools[k].size : (size_t)s->opt.jobs;
    size_t *count = xcalloc(s->n_pools, sizeof *count);
    for (size_t i = 0; i < n_steps; i++) {
        size_t p = opt->pool_of ? opt->pool_of[i] : 0;
        s->pool_of[i] = p < s->n_pools ? p : 0;          /* the caller checked; never out of bounds */
        count[s->pool_of[i]]++;
    }
    for (size_t k = 0; k < s->n_pools; k++) s->pools[k].ready.a = xcalloc(count[k] + 1, sizeof(size_t));
    free(count);
}

struct sched *sched_new(const struct dag *dag, struct loop *loop, const struct sched_options *opt,
                        const struct sched_executor *ex, const struct sched_observer *obs)
{
    struct sched *s = xcalloc(1, sizeof *s);
    size_t n = dag->n_steps + 1;
    s->dag = dag;
    s->loop = loop;
    s->opt = *opt;
    if (s->opt.jobs < 1) s->opt.jobs = 1;
    s->ex = *ex;
    if (obs) s->obs = *obs;
    s->state = xcalloc(n, sizeof *s->state);
    s->pending = xcalloc(n, sizeof *s->pending);
    s->started = xcalloc(n, sizeof *s->started);
    s->finished = xcalloc(n, sizeof *s->finished);
    s->held = xcalloc(n, sizeof *s->held);
    init_pools(s, opt, dag->n_steps);
    return s;
}

void sched_free(struct sched *s)
{
    if (!s) return;
    if (s->nudge) loop_cancel_timer(s->loop, s->nudge);
    free(s->state);
    free(s->pending);
    free(s->started);
    free(s->finished);
    free(s->held);
    for (size_t k = 0; k < s->n_pools; k++) free(s->pools[k].ready.a);
    free(s->pools);
    free(s->pool_of);
    free(s);
}

static bool is_selected(const struct sched *s, size_t i)
{
    return !s->opt.selected || s->opt.selected[i];
}

/* A failed step's dependents cannot run.  Iterative: a 100,000-step chain
 * must not overflow the C stack. */
static void mark_not_run_downstream(struct sched *s, size_t failed)
{
    size_t *stack = xmalloc((s->dag->n_steps + 1) * sizeof *stack), n = 0;
    stack[n++] = failed;
    while (n) {
        const struct dag_step *st = &s->dag->steps[stack[--n]];
        for (size_t k = 0; k < st->n_dependents; k++) {
            size_t d = st->dependents[k];
            if (s->state[d] != STEP_WAITING) continue;
            s->state[d] = STEP_NOT_RUN;
            stack[n++] = d;            /* each step is pushed at most once */
        }
    }
    free(stack);
}

static bool waits_for_record(const struct sched *s, size_t d)
{
    return s->opt.after_records && s->opt.after_records[d];
}

/* Step i is done: its dependents have one step less to wait for; while
 * its end is held, not those that wait for records: they are released at
 * its unhold (at_record). */
static void release_dependents(struct sched *s, size_t i, bool at_record)
{
    const struct dag_step *st = &s->dag->steps[i];
    for (size_t k = 0; k < st->n_dependents; k++) {
        size_t d = st->dependents[k];
        bool at_unhold = s->held[i] && waits_for_record(s, d);
        if (at_unhold != at_record) continue;
        if (--s->pending[d] == 0 && s->state[d] == STEP_WAITING) ready_push(s, d);
    }
}

/* Nothing new starts; what waits between attempts may give up. */
static void stop_starting(struct sched *s)
{
    if (s->stopping) return;
    s->stopping = true;
    if (s->ex.stopping) s->ex.stopping(s->ex.ctx, s);
}

void sched_step_done(struct sched *s, size_t i, bool ok)
{
    /* A step that ends badly once Ctrl-C or SIGTERM arrived was stopped, not
     * failed (loop_interrupts also counts a signal no wait has read yet: a busy
     * Lua step's hook sees it pending and stops the step before the loop runs). */
    bool stopped = !ok && (s->interrupted || loop_interrupts(s->loop) > 0);
    s->state[i] = ok ? STEP_DONE : stopped ? STEP_INTERRUPTED : STEP_FAILED;
    s->finished[i] = monotonic_seconds();
    s->running--;
    s->pools[s->pool_of[i]].running--;
    if (s->obs.step_finished) s->obs.step_finished(s->obs.ctx, s, i);
    if (ok) {
        release_dependents(s, i, false);
        return;
    }
    if (!stopped) s->failed = true;
    mark_not_run_downstream(s, i);
    if (!s->opt.keep_going) stop_starting(s);
}

void sched_hold(struct sched *s, size_t i)
{
    if (s->held[i]) return;
    s->held[i] = true;
    s->holds++;
}

bool sched_held(const struct sched *s, size_t i) { return s->held[i]; }

void sched_unhold(struct sched *s, size_t i)
{
    if (!s->held[i]) return;
    if (s->state[i] == STEP_DONE) release_dependents(s, i, true);
    s->held[i] = false;
    s->holds--;
}

void sched_step_failed_late(struct sched *s, size_t i)
{
    s->state[i] = STEP_FAILED;
    s->failed = true;
    if (s->obs.step_failed_late) s->obs.step_failed_late(s->obs.ctx, s, i);
    mark_not_run_downstream(s, i);
    stop_starting(s);
}

/* Steps whose outputs are up to date finish at once, without a pool slot. */
static bool skip_up_to_date(struct sched *s, size_t i)
{
    if (!s->ex.up_to_date || !s->ex.up_to_date(s->ex.ctx, s, i)) return false;
    s->state[i] = STEP_UP_TO_DATE;
    if (s->obs.step_finished) s->obs.step_finished(s->obs.ctx, s, i);
    release_dependents(s, i, false);
    return true;
}

static void start_step(struct sched *s, size_t i)
{
    s->state[i] = STEP_RUNNING;
    s->started[i] = monotonic_seconds();
    s->running++;
    struct pool *p = &s->pools[s->pool_of[i]];
    if (++p->running > p->peak) p->peak = p->running;
    if (s->obs.step_started) s->obs.step_started(s->obs.ctx, s, i);
    if (s->ex.start(s->ex.ctx, s, i) != 0 && s->state[i] == STEP_RUNNING)
        sched_step_done(s, i, false);
}

static void cancel_running(struct sched *s, enum cancel_mode mode)
{
    for (size_t i = 0; i < s->dag->n_steps; i++)
        if (s->state[i] == STEP_RUNNING) s->ex.cancel(s->ex.ctx, s, i, mode);
}

/* First Ctrl-C: stop starting steps, cancel the running ones gracefully (a
 * process gets SIGTERM, then SIGKILL after a grace period).  A second Ctrl-C
 * cancels by force.  `exact` reads the signal descriptor; otherwise a look
 * less than LOOP_LOOK_EVERY old will do. */
static void handle_interrupts(struct sched *s, bool exact)
{
    int n = exact ? loop_interrupts(s->loop) : loop_interrupts_recent(s->loop);
    if (n == s->interrupts_seen) return;
    s->interrupts_seen = n;
    if (!s->interrupted) {
        s->interrupted = s->stopping = true;
        cancel_running(s, CANCEL_GRACEFUL);
    } else {
        cancel_running(s, CANCEL_FORCED);
    }
}

static void seed_ready(struct sched *s)
{
    for (size_t i = 0; i < s->dag->n_steps; i++) {
        s->pending[i] = s->dag->steps[i].n_deps;
        s->state[i] = is_selected(s, i) ? STEP_WAITING : STEP_SKIPPED;
    }
    /* Unselected steps count as done for their dependents: their outputs must
     * already exist, which the caller checked. */
    for (size_t k = 0; k < s->dag->n_steps; k++) {
        size_t i = s->dag->order[k];
        if (s->state[i] == STEP_SKIPPED) release_dependents(s, i, false);
    }
    for (size_t i = 0; i < s->dag->n_steps; i++)
        if (s->state[i] == STEP_WAITING && s->pending[i] == 0) ready_push(s, i);
}

void sched_begin(struct sched *s)
{
    seed_ready(s);
}

static void nudged(void *arg)
{
    struct sched *s = arg;
    s->nudge = 0;
}

bool sched_poll(struct sched *s)
{
    if (s->over) return true;
    handle_interrupts(s, true);
    size_t i, skipped = 0;
    double turn_at = monotonic_seconds() + TURN_EVERY;
    while (!s->stopping && next_ready(s, &i)) {
        if (!skip_up_to_date(s, i)) start_step(s, i);
        else if (++skipped % SKIPS_PER_LOOK) continue;
        /* A step that blocked the loop (io.popen, os.execute where it cannot
         * yield) may have let Ctrl-C arrive unseen: once seen, nothing new
         * starts.  Not a read of the signal descriptor a step: one every
         * LOOP_LOOK_EVERY (a no-op rerun of 100,000 steps made 100,000 reads,
         * a fifth of its time here); a signal that came meanwhile is seen that
         * late, and the steps started in between are cancelled with the rest. */
        handle_interrupts(s, false);
        if (monotonic_seconds() >= turn_at && !s->stopping) {
            /* the rest after one turn of the loop, which the timer makes at once */
            if (!s->nudge) s->nudge = loop_add_timer(s->loop, 0, nudged, s);
            return false;
        }
    }
    if (s->running) return false;
    if (s->holds && s->ex.quiet) {
        size_t before = s->holds;
        s->ex.quiet(s->ex.ctx, s);
        if (s->holds < before) return sched_poll(s);    /* released now: what waited may start */
    }
    if (s->holds) return false;
    handle_interrupts(s, true);  /* a signal that made the last step fail */
    for (size_t k = 0; k < s->n_pools; k++)
        while (s->pools[k].ready.n) s->state[heap_pop(&s->pools[k].ready)] = STEP_NOT_RUN;
    for (size_t j = 0; j < s->dag->n_steps; j++)
        if (s->state[j] == STEP_WAITING) s->state[j] = STEP_NOT_RUN;
    s->over = true;
    return true;
}

int sched_code(const struct sched *s)
{
    if (s->interrupted) return 130;
    return s->failed ? 1 : 0;
}

int sched_run(struct sched *s)
{
    sched_begin(s);
    while (!sched_poll(s)) loop_run_once(s->loop, -1);
    return sched_code(s);
}

const struct dag *sched_dag(const struct sched *s) { return s->dag; }
struct loop *sched_loop(const struct sched *s) { return s->loop; }
enum step_state sched_state(const struct sched *s, size_t i) { return s->state[i]; }
bool sched_interrupted(const struct sched *s) { return s->interrupted; }

double sched_elapsed(const struct sched *s, size_t i)
{
    if (s->started[i] == 0) return 0;
    double end = s->finished[i] ? s->finished[i] : monotonic_seconds();
    return end - s->started[i];
}

size_t sched_pool_running(const struct sched *s, size_t p) { return p < s->n_pools ? s->pools[p].running : 0; }
size_t sched_pool_peak(const struct sched *s, size_t p) { return p < s->n_pools ? s->pools[p].peak : 0; }

const char *step_state_name(enum step_state st)
{
    static const char *const names[] = { "waiting", "ready", "running", "done",
                                         "failed", "not run", "skipped", "up to date", "interrupted" };
    return names[st];
}
