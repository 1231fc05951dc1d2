/* preload.c — see preload.h. */
#include "preload.h"
#include "hashcache.h"
#include "stat_prefetch.h"
#include "statestore.h"
#include "util.h"
#include "work.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* What a file was when the thread began, or that there was none. */
struct stamp {
    bool exists;
    struct file_stamp at;
};

struct preloaded {
    char *path;
    struct stamp before;
    void *what;                  /* a state_store or a hashcache, until taken */
    bool asked;
};

struct preload {
    char *cwd;
    pthread_t thread;
    bool joined;
    struct preloaded state, hashes;
    const char *state_warning;
    /* The stats start when both the state is read and the script has run:
     * whichever thread comes second starts them. */
    pthread_mutex_t mu;
    bool state_read, stats_wanted;
    struct stat_prefetch *ahead;       /* the state's recorded files stat-ed ahead, until taken with it */
};

/* The state file is opened without following a link (statestore.c), the
 * hash cache through one (read_file). */
static struct stamp stamp_of(const char *path, bool follow)
{
    struct stat st;
    struct stamp s = { 0 };
    s.exists = (follow ? stat(path, &st) : lstat(path, &st)) == 0;
    if (s.exists) s.at = file_stamp_of(&st);
    return s;
}

static bool same_stamp(const struct stamp *a, const struct stamp *b)
{
    return a->exists == b->exists && (!a->exists || file_stamp_equal(&a->at, &b->at));
}

static void *read_ahead(void *arg)
{
    struct preload *p = arg;
    char err[512];
    p->state.before = stamp_of(p->state.path, false);
    p->state.what = state_store_open(p->state.path, &p->state_warning, err, sizeof err);   /* NULL: the run's error */
    pthread_mutex_lock(&p->mu);
    p->state_read = true;
    if (p->stats_wanted) p->ahead = stat_prefetch_start(p->state.what);   /* (NULL for no store or no record) */
    pthread_mutex_unlock(&p->mu);
    p->hashes.before = stamp_of(p->hashes.path, true);
    p->hashes.what = hashcache_load(p->hashes.path);
    return NULL;
}

struct preload *preload_start(const char *state_path, const char *hashes_path)
{
    struct preload *p = xcalloc(1, sizeof *p);
    pthread_mutex_init(&p->mu, NULL);
    p->cwd = getcwd(NULL, 0);
    p->state.path = xstrdup(state_path);
    p->hashes.path = xstrdup(hashes_path);
    if (!p->cwd || start_quiet_thread(&p->thread, read_ahead, p) != 0) {
        p->joined = true;
        preload_free(p);
        return NULL;
    }
    return p;
}

static void join(struct preload *p)
{
    if (p->joined) return;
    pthread_join(p->thread, NULL);
    p->joined = true;
}

void preload_stat_outputs(struct preload *p)
{
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    if (!p->stats_wanted && p->state_read && !p->state.asked) p->ahead = stat_prefetch_start(p->state.what);
    p->stats_wanted = true;
    pthread_mutex_unlock(&p->mu);
}

void preload_wait(struct preload *p)
{
    if (p) join(p);
}

bool preload_done(const struct preload *p)
{
    return p && p->state.asked && p->hashes.asked;
}

/* What was read of path, NULL when there is none, with whether it still
 * stands (*stands): the caller's from now, to keep or to drop.  Asked once:
 * what does not stand is dropped then, not kept in memory to the run's end. */
static void *take(struct preload *p, struct preloaded *x, const char *path, bool follow, bool *stands)
{
    *stands = false;
    if (!p || strcmp(x->path, path) != 0) return NULL;
    join(p);
    x->asked = true;
    void *what = x->what;
    x->what = NULL;
    if (!what) return NULL;
    char *cwd = getcwd(NULL, 0);
    bool here = cwd && strcmp(cwd, p->cwd) == 0;
    free(cwd);
    struct stamp now = stamp_of(path, follow);
    *stands = here && same_stamp(&x->before, &now);
    return what;
}

struct state_store *preload_take_state(struct preload *p, const char *path, const char **warning,
                                       struct stat_prefetch **ahead)
{
    bool stands;
    struct state_store *s = take(p, p ? &p->state : NULL, path, false, &stands);
    if (!s) return NULL;
    struct stat_prefetch *a = p->ahead;     /* it reads the store: it goes with it */
    p->ahead = NULL;
    if (!stands) {
        stat_prefetch_stop(a);
        state_store_free(s);
        return NULL;
    }
    if (warning) *warning = p->state_warning;
    if (ahead) *ahead = a;
    else stat_prefetch_stop(a);
    return s;
}

struct hashcache *preload_take_hashes(struct preload *p, const char *path)
{
    bool stands;
    struct hashcache *hc = take(p, p ? &p->hashes : NULL, path, true, &stands);
    if (hc && !stands) {
        hashcache_free(hc);
        return NULL;
    }
    return hc;
}

void preload_free(struct preload *p)
{
    if (!p) return;
    join(p);
    stat_prefetch_stop(p->ahead);            /* (before the store it reads) */
    state_store_free(p->state.what);
    hashcache_free(p->hashes.what);
    free(p->state.path);
    free(p->hashes.path);
    free(p->cwd);
    pthread_mutex_destroy(&p->mu);
    free(p);
}
