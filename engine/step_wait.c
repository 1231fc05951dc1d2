/* step_wait.c — see step_wait.h: the list a step keeps, and the kinds. */
#include "step_wait.h"
#include "proc.h"
#include "util.h"

#include <stdlib.h>

void step_wait_init(struct step_wait *w, const struct step_wait_ops *ops)
{
    *w = (struct step_wait){ .ops = ops };
}

void step_wait_attach(struct step_wait_list *list, struct step_wait *w)
{
    step_wait_detach(w);
    w->list = list;
    w->prev = NULL;
    w->next = list->first;
    if (list->first) list->first->prev = w;
    list->first = w;
    list->n++;
}

void step_wait_detach(struct step_wait *w)
{
    struct step_wait_list *list = w->list;
    if (!list) return;
    if (w->prev) w->prev->next = w->next;
    else list->first = w->next;
    if (w->next) w->next->prev = w->prev;
    list->n--;
    w->list = NULL;
    w->prev = w->next = NULL;
}

void step_wait_cancel(struct step_wait *w, enum cancel_mode mode)
{
    w->ops->cancel(w, mode);
}

void step_wait_free(struct step_wait *w)
{
    if (!w) return;
    step_wait_detach(w);
    w->ops->free(w);
}

/* Safe to walk: by the contract, cancel completes nothing synchronously, so
 * nothing leaves the list while it is walked. */
void step_wait_list_cancel(struct step_wait_list *list, enum cancel_mode mode)
{
    for (struct step_wait *w = list->first; w; w = w->next) step_wait_cancel(w, mode);
}

void step_wait_list_clear(struct step_wait_list *list)
{
    while (list->first) step_wait_detach(list->first);
}

/* ---- timers -------------------------------------------------------------- */

struct timer_wait {
    struct step_wait base;
    struct loop *loop;
    unsigned long timer;           /* 0 once fired */
    bool cancelled;
    step_wait_done_fn done;
    void *arg;
};

static void timer_fired(void *arg)
{
    struct timer_wait *t = arg;
    t->timer = 0;
    t->done(&t->base, t->arg);     /* last: done may free t */
}

/* Either mode: fire at the next loop turn, never from inside cancel. */
static void timer_cancel(struct step_wait *w, enum cancel_mode mode)
{
    (void)mode;
    struct timer_wait *t = (struct timer_wait *)w;
    if (!t->timer || t->cancelled) return;
    t->cancelled = true;
    loop_cancel_timer(t->loop, t->timer);
    t->timer = loop_add_timer(t->loop, 0, timer_fired, t);
}

static void timer_free(struct step_wait *w)
{
    struct timer_wait *t = (struct timer_wait *)w;
    if (t->timer) loop_cancel_timer(t->loop, t->timer);
    free(t);
}

static const struct step_wait_ops timer_ops = { "timer", timer_cancel, timer_free };

struct step_wait *step_wait_timer(struct loop *loop, double seconds, step_wait_done_fn done, void *arg)
{
    struct timer_wait *t = xcalloc(1, sizeof *t);
    step_wait_init(&t->base, &timer_ops);
    t->loop = loop;
    t->done = done;
    t->arg = arg;
    t->timer = loop_add_timer(loop, seconds > 0 ? seconds : 0, timer_fired, t);
    return &t->base;
}

bool step_wait_timer_cancelled(const struct step_wait *w)
{
    return w->ops == &timer_ops && ((const struct timer_wait *)w)->cancelled;
}

/* ---- processes ----------------------------------------------------------- */

struct procs_wait {
    struct step_wait base;
    struct proc **procs;           /* n; each freed with the wait */
    size_t n, running;
    bool group;
    long first_failed;
    step_wait_done_fn done;
    void *arg;
};

static void procs_cancel(struct step_wait *w, enum cancel_mode mode)
{
    struct procs_wait *pw = (struct procs_wait *)w;
    for (size_t i = 0; i < pw->n; i++) proc_cancel(pw->procs[i], mode);
}

static void procs_free(struct step_wait *w)
{
    struct procs_wait *pw = (struct procs_wait *)w;
    for (size_t i = 0; i < pw->n; i++) proc_free(pw->procs[i]);    /* kills and reaps one still running */
    free(pw->procs);
    free(pw);
}

static const struct step_wait_ops procs_ops = { "process", procs_cancel, procs_free };

static void proc_exited(struct proc *p, void *arg)
{
    struct procs_wait *pw = arg;
    pw->running--;
    if (pw->group && proc_exit_code(p) != 0 && pw->first_failed < 0) {
        size_t i = 0;
        while (pw->procs[i] != p) i++;
        pw->first_failed = (long)i;
        procs_cancel(&pw->base, CANCEL_GRACEFUL);
    }
    if (pw->running == 0) pw->done(&pw->base, pw->arg);     /* last: done may free pw */
}

struct step_wait *step_wait_procs(struct loop *loop, const struct proc_spec *specs, size_t n, bool group,
                                  step_wait_done_fn done, void *arg, char *err, size_t errlen)
{
    struct procs_wait *pw = xcalloc(1, sizeof *pw);
    step_wait_init(&pw->base, &procs_ops);
    pw->procs = xcalloc(n ? n : 1, sizeof *pw->procs);
    pw->group = group;
    pw->first_failed = -1;
    pw->done = done;
    pw->arg = arg;
    for (size_t i = 0; i < n; i++) {
        pw->procs[i] = proc_spawn(loop, &specs[i], proc_exited, pw, err, errlen);
        if (!pw->procs[i]) {
            procs_free(&pw->base);
            return NULL;
        }
        pw->n++;
        pw->running++;
    }
    if (n == 0) {
        errf(err, errlen, "no processes");
        procs_free(&pw->base);
        return NULL;
    }
    return &pw->base;
}

size_t step_wait_procs_count(const struct step_wait *w) { return ((const struct procs_wait *)w)->n; }
size_t step_wait_procs_running(const struct step_wait *w) { return ((const struct procs_wait *)w)->running; }
long step_wait_procs_first_failed(const struct step_wait *w) { return ((const struct procs_wait *)w)->first_failed; }

struct proc *step_wait_procs_proc(const struct step_wait *w, size_t i)
{
    const struct procs_wait *pw = (const struct procs_wait *)w;
    return i < pw->n ? pw->procs[i] : NULL;
}

/* ---- work-pool jobs ------------------------------------------------------ */

static void job_cancel(struct step_wait *w, enum cancel_mode mode) { (void)w; (void)mode; }
static void job_free(struct step_wait *w) { (void)w; }

const struct step_wait_ops step_wait_job_ops = { "work job", job_cancel, job_free };

void step_wait_block(struct loop *loop, struct step_wait *w, const bool *done)
{
    int seen = loop_interrupts(loop), sent = 0;
    while (!*done) {
        loop_run_once(loop, -1);
        int extra = loop_interrupts(loop) - seen;
        if (extra > sent && sent < 2) {
            sent = extra > 1 ? 2 : 1;
            step_wait_cancel(w, sent > 1 ? CANCEL_FORCED : CANCEL_GRACEFUL);
        }
    }
}
