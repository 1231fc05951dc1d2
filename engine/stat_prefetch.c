/* stat_prefetch.c — see stat_prefetch.h. */
#include "stat_prefetch.h"
#include "statestore.h"
#include "util.h"
#include "work.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* What the hash cache reads of a stat (a whole struct stat is 144 bytes:
 * 10,000 of them were 1.4 MB of a no-op rerun's peak). */
struct entry {
    struct file_stamp stamp;
    mode_t mode;
    uint32_t at_ms;              /* when it was taken (ms since the start) */
    bool ok;                     /* stat succeeded (set by the thread before `done` passes it) */
    bool taken;                  /* handed out (the caller's thread only) */
};

/* A stat older than this is not handed out: the check stats the file again.
 * The thread starts while the run is planned (preload.h) and goes in the
 * store's order, not the check's: a long plan, a check of many steps or
 * slow Lua descriptions could otherwise decide on a stat taken long before.
 * 10,000 outputs take the thread about 20 ms, and the planning of their
 * steps about 30 ms. */
#define MAX_AGE_MS 500

struct stat_prefetch {
    const struct state_store *s;
    int dir;                     /* the working directory at the start: the store's paths are relative to it */
    struct timespec start;
    size_t n_slots;
    uint32_t *first;             /* slot i's file outputs are entries first[i] .. first[i + 1] - 1 */
    struct entry *e;
    atomic_size_t done;          /* slots [0, done) are stat-ed: first and e are set for them */
    atomic_bool stop;
    pthread_t thread;
};

static uint32_t ms_since(const struct timespec *start)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &now);
    long long ms = (now.tv_sec - start->tv_sec) * 1000LL + (now.tv_nsec - start->tv_nsec) / 1000000;
    return ms < 0 ? 0 : ms > UINT32_MAX ? UINT32_MAX : (uint32_t)ms;
}

static bool is_file(const struct state_out *o)
{
    return (o->kind == 'f' || o->kind == 'c') && o->path && o->path[0];
}

/* The thread: where each record's files are in `e`, then their stats, a
 * record at a time, each published by `done`. */
static void *prefetch(void *arg)
{
    struct stat_prefetch *p = arg;
    size_t n = 0;
    for (size_t i = 0; i < p->n_slots; i++) {
        p->first[i] = (uint32_t)n;
        const struct state_rec *r = state_store_at(p->s, i);
        for (size_t k = 0; r && k < r->n_outs; k++) n += is_file(&r->outs[k]);
        if (n >= UINT32_MAX) return NULL;
    }
    p->first[p->n_slots] = (uint32_t)n;
    if (n == 0) return NULL;
    p->e = calloc(n, sizeof *p->e);
    if (!p->e) return NULL;
    for (size_t i = 0; i < p->n_slots && !atomic_load_explicit(&p->stop, memory_order_relaxed); i++) {
        const struct state_rec *r = state_store_at(p->s, i);
        struct entry *e = &p->e[p->first[i]];
        for (size_t k = 0; r && k < r->n_outs; k++)
            if (is_file(&r->outs[k])) {
                struct stat st;
                if (fstatat(p->dir, r->outs[k].path, &st, 0) == 0)    /* (calloc's zeros say "failed") */
                    *e = (struct entry){ file_stamp_of(&st), st.st_mode, ms_since(&p->start), .ok = true };
                e++;
            }
        atomic_store_explicit(&p->done, i + 1, memory_order_release);
    }
    return NULL;
}

struct stat_prefetch *stat_prefetch_start(const struct state_store *s)
{
    size_t n = s ? state_store_count(s) : 0;
    if (n == 0) return NULL;
    int dir = open(".", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0) return NULL;
    struct stat_prefetch *p = xcalloc(1, sizeof *p);
    p->s = s;
    p->dir = dir;
    p->n_slots = n;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &p->start);
    p->first = xmalloc((n + 1) * sizeof *p->first);
    atomic_init(&p->done, 0);
    atomic_init(&p->stop, false);
    if (start_quiet_thread(&p->thread, prefetch, p) != 0) {
        close(dir);
        free(p->first);
        free(p);
        return NULL;
    }
    return p;
}

bool stat_prefetch_take(struct stat_prefetch *p, size_t slot, size_t k, struct file_stamp *stamp, mode_t *mode)
{
    if (!p || slot >= atomic_load_explicit(&p->done, memory_order_acquire)) return false;
    const struct state_rec *r = state_store_at(p->s, slot);
    if (!r || k >= r->n_outs || !is_file(&r->outs[k])) return false;
    size_t rank = 0;                              /* the files before it in its record */
    for (size_t j = 0; j < k; j++) rank += is_file(&r->outs[j]);
    struct entry *e = &p->e[p->first[slot] + rank];
    if (!e->ok || e->taken || ms_since(&p->start) - e->at_ms > MAX_AGE_MS) return false;
    e->taken = true;
    *stamp = e->stamp;
    *mode = e->mode;
    return true;
}

void stat_prefetch_stop(struct stat_prefetch *p)
{
    if (!p) return;
    atomic_store_explicit(&p->stop, true, memory_order_relaxed);
    pthread_join(p->thread, NULL);
    close(p->dir);
    free(p->e);
    free(p->first);
    free(p);
}
