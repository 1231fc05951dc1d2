/* stat_prefetch.c — see stat_prefetch.h. */
#include "stat_prefetch.h"
#include "statestore.h"
#include "util.h"
#include "work.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
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
 * The thread starts while the script runs (preload.h) and goes in the
 * store's order, not the check's: a long script, a check of many steps or
 * slow Lua descriptions could otherwise decide on a stat taken long before.
 * 10,000 outputs take the thread about 20 ms, and the script that declares
 * their steps about 50 ms. */
#define MAX_AGE_MS 500

/* What changes a file's stat (not a read, nor an open to read). */
#define CHANGES (IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | \
                 IN_DELETE_SELF | IN_MOVE_SELF)

struct stat_prefetch {
    const struct state_store *s;
    int dir;                     /* the working directory at the start: the store's paths are relative to it */
    int watch;                   /* inotify: each stat-ed file's directory, watched before the stat */
    atomic_bool unwatched;       /* a directory could not be watched */
    bool changed;                /* an event was read (the owner's thread only) */
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

/* The directory the last file was in, and whether it is watched. */
struct last_dir { const char *path; size_t len; bool watched; };

/* Watches the directory of `path` (relative to p->dir) unless it is the last
 * file's; false when it cannot be watched.  inotify_add_watch takes no
 * directory descriptor: p->dir is named through /proc. */
static bool watch_dir_of(struct stat_prefetch *p, const char *path, struct last_dir *last)
{
    const char *slash = strrchr(path, '/');
    size_t len = !slash ? 0 : slash == path ? 1 : (size_t)(slash - path);     /* "/x": the root's */
    if (last->path && last->len == len && memcmp(last->path, path, len) == 0) return last->watched;
    char where[PATH_MAX + 32];
    int n = path[0] == '/' ? snprintf(where, sizeof where, "%.*s", (int)len, path)
                           : snprintf(where, sizeof where, "/proc/self/fd/%d/%.*s", p->dir, (int)len, path);
    *last = (struct last_dir){ path, len, false };
    last->watched = n > 0 && (size_t)n < sizeof where && inotify_add_watch(p->watch, where, CHANGES) >= 0;
    return last->watched;
}

/* The thread: where each record's files are in `e`, then their stats, a
 * record at a time, each published by `done`.  Each file's directory is
 * watched before the file is stat-ed: a change after the stat is an event. */
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
    struct last_dir last = { NULL, 0, false };
    for (size_t i = 0; i < p->n_slots && !atomic_load_explicit(&p->stop, memory_order_relaxed); i++) {
        const struct state_rec *r = state_store_at(p->s, i);
        struct entry *e = &p->e[p->first[i]];
        for (size_t k = 0; r && k < r->n_outs; k++)
            if (is_file(&r->outs[k])) {
                struct stat st;
                if (!watch_dir_of(p, r->outs[k].path, &last)) atomic_store(&p->unwatched, true);
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
    p->watch = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    atomic_init(&p->unwatched, p->watch < 0);
    p->n_slots = n;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &p->start);
    p->first = xmalloc((n + 1) * sizeof *p->first);
    atomic_init(&p->done, 0);
    atomic_init(&p->stop, false);
    if (start_quiet_thread(&p->thread, prefetch, p) != 0) {
        if (p->watch >= 0) close(p->watch);
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

bool stat_prefetch_unchanged(struct stat_prefetch *p)
{
    if (!p || atomic_load(&p->unwatched)) return false;
    if (p->changed) return false;
    char events[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
    ssize_t n = read(p->watch, events, sizeof events);          /* (non-blocking) */
    p->changed = n > 0 || (n < 0 && errno != EAGAIN && errno != EINTR);
    return !p->changed;
}

void stat_prefetch_stop(struct stat_prefetch *p)
{
    if (!p) return;
    atomic_store_explicit(&p->stop, true, memory_order_relaxed);
    pthread_join(p->thread, NULL);
    if (p->watch >= 0) close(p->watch);
    close(p->dir);
    free(p->e);
    free(p->first);
    free(p);
}
