/* shared.h — one result that many steps wait on: the run's code snapshot, a
 * datastore's container.  The first step to ask starts the work; every step
 * that asks gets a step wait of its own (step_wait.h), and when the work is
 * settled each waiter is told from a loop turn of its own.  Cancelling one
 * step's wait stops only that wait (it completes at once, cancelled); the
 * work goes on for the others.
 *
 * Nothing here knows of Lua. */
#ifndef FLOW_AZUREML_SHARED_H
#define FLOW_AZUREML_SHARED_H

#include "step_wait.h"

#include <stdbool.h>

struct shared_waiter;

/* Embedded in the owner of the work (zeroed, then loop set). */
struct shared_result {
    struct loop *loop;
    struct shared_waiter *waiters;   /* asked before the result was settled */
    bool settled;
};

/* A wait on r: done(w, arg) once r is settled (at once, from the next loop
 * turn, when it already is), or after the wait is cancelled. */
struct step_wait *shared_wait(struct shared_result *r, const char *kind, step_wait_done_fn done, void *arg);
/* After done: the result the wait saw, or NULL when it was cancelled or its
 * owner went away. */
struct shared_result *shared_wait_result(const struct step_wait *w);
/* The work is over (successfully or not): every waiter is told. */
void shared_settle(struct shared_result *r);
/* The owner is going away: waiters still listed see no result. */
void shared_abandon(struct shared_result *r);

#endif
