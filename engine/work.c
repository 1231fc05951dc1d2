/* work.c — see work.h.  Jobs wait in a FIFO under one mutex; finished jobs
 * wait in a second FIFO until the loop reads the eventfd. */
#include "work.h"
#include "util.h"

#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#define MAX_THREADS 8

struct job {
    work_fn run;
    work_done_fn done;
    void *arg;
    struct job *next;
};

struct queue { struct job *head, *tail; };

struct work_pool {
    struct loop *loop;
    int efd;
    pthread_mutex_t mu;
    pthread_cond_t has_work;
    struct queue todo, finished;   /* both under mu */
    size_t n_todo;
    int n_threads, n_idle, max_threads;
    bool stopping;
    pthread_t threads[MAX_THREADS];
};

static void queue_push(struct queue *q, struct job *j)
{
    j->next = NULL;
    if (q->tail) q->tail->next = j;
    else q->head = j;
    q->tail = j;
}

static struct job *queue_pop(struct queue *q)
{
    struct job *j = q->head;
    if (j) {
        q->head = j->next;
        if (!q->head) q->tail = NULL;
    }
    return j;
}

static void queue_free(struct queue *q)
{
    for (struct job *j; (j = queue_pop(q));) free(j);
}

int start_quiet_thread(pthread_t *t, void *(*fn)(void *), void *arg)
{
    sigset_t all, saved;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &saved);     /* the new thread inherits this mask */
    int rc = pthread_create(t, NULL, fn, arg);
    pthread_sigmask(SIG_SETMASK, &saved, NULL);
    return rc;
}

/* Wakes the loop; the counter only has to be non-zero. */
static void signal_loop(struct work_pool *pool)
{
    uint64_t one = 1;
    while (write(pool->efd, &one, sizeof one) < 0 && errno == EINTR) {}
}

static void *worker(void *arg)
{
    struct work_pool *pool = arg;
    pthread_mutex_lock(&pool->mu);
    for (;;) {
        while (!pool->todo.head && !pool->stopping) {
            pool->n_idle++;
            pthread_cond_wait(&pool->has_work, &pool->mu);
            pool->n_idle--;
        }
        struct job *j = queue_pop(&pool->todo);
        if (!j) break;                               /* stopping, and nothing left to do */
        pool->n_todo--;
        pthread_mutex_unlock(&pool->mu);
        j->run(j->arg);
        pthread_mutex_lock(&pool->mu);
        queue_push(&pool->finished, j);
        signal_loop(pool);
    }
    pthread_mutex_unlock(&pool->mu);
    return NULL;
}

/* On the loop's thread: run the completions in the order the jobs finished. */
static void deliver(void *arg, int fd, unsigned events)
{
    struct work_pool *pool = arg;
    (void)events;
    uint64_t count;
    while (read(fd, &count, sizeof count) < 0 && errno == EINTR) {}
    pthread_mutex_lock(&pool->mu);
    struct queue ready = pool->finished;
    pool->finished = (struct queue){ NULL, NULL };
    pthread_mutex_unlock(&pool->mu);
    for (struct job *j; (j = queue_pop(&ready));) {
        if (j->done) j->done(j->arg);
        free(j);
    }
}

struct work_pool *work_pool_new(struct loop *loop, int max_threads, char *err, size_t errlen)
{
    int efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (efd < 0) {
        errf(err, errlen, "cannot create an eventfd: %s", strerror(errno));
        return NULL;
    }
    struct work_pool *pool = xcalloc(1, sizeof *pool);
    pool->loop = loop;
    pool->efd = efd;
    pool->max_threads = max_threads < 1 ? 1 : max_threads > MAX_THREADS ? MAX_THREADS : max_threads;
    pthread_mutex_init(&pool->mu, NULL);
    pthread_cond_init(&pool->has_work, NULL);
    if (loop_watch(loop, efd, LOOP_READ, deliver, pool) != 0) {
        errf(err, errlen, "cannot watch an eventfd: %s", strerror(errno));
        work_pool_free(pool);
        return NULL;
    }
    return pool;
}

int work_submit(struct work_pool *pool, work_fn run, work_done_fn done, void *arg,
                char *err, size_t errlen)
{
    struct job *j = xmalloc(sizeof *j);
    *j = (struct job){ run, done, arg, NULL };
    pthread_mutex_lock(&pool->mu);
    queue_push(&pool->todo, j);
    pool->n_todo++;
    int rc = 0;
    if (pool->n_todo > (size_t)pool->n_idle && pool->n_threads < pool->max_threads) {
        rc = start_quiet_thread(&pool->threads[pool->n_threads], worker, pool);
        if (rc == 0) pool->n_threads++;
        else if (pool->n_threads > 0) rc = 0;      /* the running threads will get to it */
    }
    if (rc != 0) {            /* no thread at all, so `j` is the only job queued: take it back */
        pool->todo = (struct queue){ NULL, NULL };
        pool->n_todo = 0;
        free(j);
        errf(err, errlen, "cannot start a thread: %s", strerror(rc));
    } else {
        pthread_cond_signal(&pool->has_work);
    }
    pthread_mutex_unlock(&pool->mu);
    return rc ? -1 : 0;
}

void work_pool_free(struct work_pool *pool)
{
    if (!pool) return;
    pthread_mutex_lock(&pool->mu);
    pool->stopping = true;
    pthread_cond_broadcast(&pool->has_work);
    pthread_mutex_unlock(&pool->mu);
    for (int i = 0; i < pool->n_threads; i++) pthread_join(pool->threads[i], NULL);
    loop_unwatch(pool->loop, pool->efd);
    close(pool->efd);
    queue_free(&pool->todo);
    queue_free(&pool->finished);
    pthread_cond_destroy(&pool->has_work);
    pthread_mutex_destroy(&pool->mu);
    free(pool);
}
