/* serial.c — see serial.h.  Two buffers of jobs (and of their data) change
 * hands: the queuer fills `local`, hands it over as `handed`, and the worker
 * swaps `handed` with the group it has just run, so no job is allocated on
 * its own and neither side holds the lock while a job runs. */
#include "serial.h"
#include "util.h"
#include "work.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define SERIAL_GROUP 256         /* jobs queued before the worker is told of them */

struct job {
    serial_fn fn;
    size_t i;
    size_t at, len;              /* its data in the group's bytes */
};

#define DATA_ALIGN 16            /* each job's data starts at a multiple of this */

struct jobs {
    struct job *v;
    size_t n, cap;
    unsigned char *bytes;        /* the jobs' data */
    size_t used, size;
};

struct serial {
    void *ctx;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t has_work, idle;
    struct jobs local;           /* queued, not handed over yet: the queuer's */
    struct jobs handed;          /* handed over, not taken yet (under mu) */
    bool busy;                   /* the worker runs a group (under mu) */
    bool stop;                   /* (under mu) */
    struct serial_stats stats;   /* (under mu) */
};

static void *worker(void *arg)
{
    struct serial *s = arg;
    struct jobs group = { 0 };
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->handed.n && !s->stop) pthread_cond_wait(&s->has_work, &s->mu);
        if (!s->handed.n) break;
        struct jobs taken = s->handed;
        s->handed = group;                       /* (empty: its buffer is reused) */
        group = taken;
        s->busy = true;
        pthread_mutex_unlock(&s->mu);
        for (size_t k = 0; k < group.n; k++) {
            const struct job *j = &group.v[k];
            j->fn(s->ctx, j->i, j->len ? group.bytes + j->at : NULL, j->len);
        }
        pthread_mutex_lock(&s->mu);
        s->stats.jobs += group.n;
        group.n = group.used = 0;
        s->busy = false;
        if (!s->handed.n) pthread_cond_broadcast(&s->idle);
    }
    pthread_mutex_unlock(&s->mu);
    free(group.v);
    free(group.bytes);
    return NULL;
}

struct serial *serial_new(void *ctx)
{
    struct serial *s = xcalloc(1, sizeof *s);
    s->ctx = ctx;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->has_work, NULL);
    pthread_cond_init(&s->idle, NULL);
    if (start_quiet_thread(&s->thread, worker, s) == 0) return s;
    pthread_cond_destroy(&s->idle);
    pthread_cond_destroy(&s->has_work);
    pthread_mutex_destroy(&s->mu);
    free(s);
    return NULL;
}

/* Room for len more bytes of data in jobs j, at a multiple of DATA_ALIGN: its offset. */
static size_t data_room(struct jobs *j, size_t len)
{
    size_t at = (j->used + DATA_ALIGN - 1) / DATA_ALIGN * DATA_ALIGN;
    if (at + len > j->size) {
        j->size = 2 * (at + len) + 4096;
        j->bytes = xrealloc(j->bytes, j->size);
    }
    j->used = at + len;
    return at;
}

/* The jobs queued so far, told to the worker. */
static void hand_over(struct serial *s)
{
    if (!s->local.n) return;
    pthread_mutex_lock(&s->mu);
    if (!s->handed.n) {
        struct jobs t = s->handed;           /* (empty: its buffers become local's) */
        s->handed = s->local;
        s->local = t;
    } else {                                 /* (the worker is behind: rarer) */
        for (size_t k = 0; k < s->local.n; k++) {
            struct job j = s->local.v[k];
            if (j.len) {
                size_t at = data_room(&s->handed, j.len);
                memcpy(s->handed.bytes + at, s->local.bytes + j.at, j.len);
                j.at = at;
            }
            ARRAY_GROW(s->handed.v, s->handed.n, s->handed.cap);
            s->handed.v[s->handed.n++] = j;
        }
        s->local.n = s->local.used = 0;
    }
    pthread_cond_signal(&s->has_work);
    pthread_mutex_unlock(&s->mu);
}

void *serial_push_space(struct serial *s, serial_fn fn, size_t i, size_t len)
{
    if (s->local.n >= SERIAL_GROUP) hand_over(s);        /* (before: the space stays the caller's to fill) */
    size_t at = len ? data_room(&s->local, len) : 0;
    ARRAY_GROW(s->local.v, s->local.n, s->local.cap);
    s->local.v[s->local.n++] = (struct job){ fn, i, at, len };
    return len ? s->local.bytes + at : NULL;
}

void serial_push(struct serial *s, serial_fn fn, size_t i, const void *data, size_t len)
{
    void *to = serial_push_space(s, fn, i, len);
    if (len) memcpy(to, data, len);
}

void serial_sync(struct serial *s)
{
    hand_over(s);
    pthread_mutex_lock(&s->mu);
    while (s->handed.n || s->busy) pthread_cond_wait(&s->idle, &s->mu);
    pthread_mutex_unlock(&s->mu);
}

void serial_free(struct serial *s)
{
    if (!s) return;
    serial_sync(s);
    pthread_mutex_lock(&s->mu);
    s->stop = true;
    pthread_cond_signal(&s->has_work);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
    pthread_cond_destroy(&s->idle);
    pthread_cond_destroy(&s->has_work);
    pthread_mutex_destroy(&s->mu);
    free(s->local.v);
    free(s->local.bytes);
    free(s->handed.v);
    free(s->handed.bytes);
    free(s);
}

struct serial_stats serial_stats(struct serial *s)
{
    pthread_mutex_lock(&s->mu);
    struct serial_stats st = s->stats;
    pthread_mutex_unlock(&s->mu);
    return st;
}
