/* work.h — a small pool of threads for blocking file-system work (fsync,
 * copies) that must not stall the event loop.  A job runs on a pool thread;
 * its completion runs on the loop's thread, from loop_run_once, delivered
 * through an eventfd the loop watches. */
#ifndef FLOW_WORK_H
#define FLOW_WORK_H

#include "loop.h"
#include <pthread.h>
#include <stddef.h>

struct work_pool;
typedef void (*work_fn)(void *arg);          /* on a pool thread: touch nothing shared */
typedef void (*work_done_fn)(void *arg);     /* on the loop's thread, after work_fn */

/* Threads are started as jobs arrive, up to max_threads (at least 1).
 * NULL with a message if the eventfd cannot be made. */
struct work_pool *work_pool_new(struct loop *loop, int max_threads, char *err, size_t errlen);

/* Queues run(arg), then done(arg) on the loop.  -1 with a message only when
 * no thread at all could be started. */
int work_submit(struct work_pool *pool, work_fn run, work_done_fn done, void *arg,
                char *err, size_t errlen);

/* Lets every queued job finish (they are bounded), joins the threads; the
 * completions not yet delivered are dropped without calling done. */
void work_pool_free(struct work_pool *pool);

/* pthread_create with every signal blocked in the new thread: SIGINT and
 * SIGTERM belong to the loop's signalfd, and a thread that did not block
 * them would take them instead. */
int start_quiet_thread(pthread_t *t, void *(*fn)(void *), void *arg);

#endif
