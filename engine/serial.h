/* serial.h — jobs run in the order they were queued, on a thread of their
 * own, and a barrier that waits for them: the step runner's recorder
 * (step.c), which formats a first run's journal lines and puts its state
 * records while the loop's thread runs the next Lua steps.
 *
 * One thread queues (the loop's); jobs are handed to the worker in groups
 * (SERIAL_GROUP, or at serial_sync), so 100,000 quick steps wake it a few
 * hundred times, not 200,000.  A job's data is copied into the queue with
 * it: queuing allocates nothing once the queue's buffers have grown (a
 * malloc a step on the loop's thread, freed on the worker's, was 5 % of a
 * first run of 100,000 Lua steps, the allocator's lock passing between the
 * two).  What a job writes is the queuer's to read once serial_sync has
 * returned: the barrier is a mutex, so everything the jobs wrote happens
 * before it.  Nothing here knows what a job does. */
#ifndef FLOW_SERIAL_H
#define FLOW_SERIAL_H

#include <stddef.h>

/* A job: fn(ctx, i, data, len), ctx the queue's; data (aligned for any
 * object) is valid for the call only. */
typedef void (*serial_fn)(void *ctx, size_t i, const void *data, size_t len);

struct serial;

/* A queue and its thread (signals blocked there), or NULL when no thread
 * can be started: the caller then does the work itself. */
struct serial *serial_new(void *ctx);

/* Queues fn(ctx, i, a copy of the len bytes at data) after every job
 * queued before (data may be NULL when len is 0). */
void serial_push(struct serial *s, serial_fn fn, size_t i, const void *data, size_t len);
/* The same, the job's len bytes to be written by the caller at the pointer
 * returned, before the next call on the queue. */
void *serial_push_space(struct serial *s, serial_fn fn, size_t i, size_t len);

/* Returns once every job queued has run. */
void serial_sync(struct serial *s);

/* The jobs queued, run (serial_sync), then the thread ended and the queue freed. */
void serial_free(struct serial *s);

/* Jobs run so far (tests/unit/test_serial.c's count). */
struct serial_stats { size_t jobs; };
struct serial_stats serial_stats(struct serial *s);

#endif
