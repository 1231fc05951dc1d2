/* shared.c — one result, many waiting steps (shared.h). */
#include "azureml/shared.h"

#include "util.h"

#include <stdlib.h>

struct shared_waiter {
    struct step_wait wait;          /* first: the wait is the waiter */
    struct step_wait_ops ops;       /* its kind's name for messages; the functions below */
    struct loop *loop;
    struct shared_result *result;   /* NULL once cancelled or abandoned */
    step_wait_done_fn done;
    void *arg;
    struct shared_waiter *next;     /* in result->waiters until settled */
    unsigned long timer;
    bool delivered;
};

static void deliver(void *arg)
{
    struct shared_waiter *w = arg;
    w->timer = 0;
    w->delivered = true;
    w->done(&w->wait, w->arg);
}

static void unlist(struct shared_waiter *w)
{
    if (!w->result) return;
    for (struct shared_waiter **p = &w->result->waiters; *p; p = &(*p)->next)
        if (*p == w) {
            *p = w->next;
            break;
        }
}

static void waiter_cancel(struct step_wait *sw, enum cancel_mode mode)
{
    (void)mode;
    struct shared_waiter *w = (struct shared_waiter *)sw;
    if (w->delivered || w->timer) return;
    unlist(w);
    w->result = NULL;
    w->timer = loop_add_timer(w->loop, 0, deliver, w);
}

static void waiter_free(struct step_wait *sw)
{
    struct shared_waiter *w = (struct shared_waiter *)sw;
    step_wait_detach(sw);
    unlist(w);
    if (w->timer) loop_cancel_timer(w->loop, w->timer);
    free(w);
}

struct step_wait *shared_wait(struct shared_result *r, const char *kind, step_wait_done_fn done, void *arg)
{
    struct shared_waiter *w = xcalloc(1, sizeof *w);
    w->ops = (struct step_wait_ops){ kind, waiter_cancel, waiter_free };
    step_wait_init(&w->wait, &w->ops);
    w->loop = r->loop;
    w->result = r;
    w->done = done;
    w->arg = arg;
    if (r->settled) w->timer = loop_add_timer(r->loop, 0, deliver, w);
    else {
        w->next = r->waiters;
        r->waiters = w;
    }
    return &w->wait;
}

struct shared_result *shared_wait_result(const struct step_wait *sw)
{
    return ((const struct shared_waiter *)sw)->result;
}

void shared_settle(struct shared_result *r)
{
    r->settled = true;
    struct shared_waiter *w = r->waiters;
    r->waiters = NULL;
    while (w) {
        struct shared_waiter *next = w->next;
        w->next = NULL;
        w->timer = loop_add_timer(w->loop, 0, deliver, w);
        w = next;
    }
}

void shared_abandon(struct shared_result *r)
{
    for (struct shared_waiter *w = r->waiters; w; w = w->next) w->result = NULL;
    r->waiters = NULL;
}
