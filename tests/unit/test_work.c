/* test_work.c — the work pool (jobs run on pool threads, their completions on
 * the loop's thread, woken through its eventfd; many jobs; freeing the pool
 * with jobs still queued) and hashing as a pool job (the hash cache shared by
 * pool threads and the loop's thread, cheap lookups, cancellation). */
#include "check.h"
#include "hash.h"
#include "hashcache.h"
#include "loop.h"
#include "util.h"
#include "work.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static char root[64];              /* this run's scratch directory */
static char err[1024];
static pthread_t loop_thread;

static struct loop *new_loop(void)
{
    struct loop *loop = loop_new(err, sizeof err);
    if (!loop) {
        fprintf(stderr, "loop_new: %s\n", err);
        exit(2);
    }
    return loop;
}

static struct work_pool *new_pool(struct loop *loop, int threads)
{
    struct work_pool *pool = work_pool_new(loop, threads, err, sizeof err);
    if (!pool) {
        fprintf(stderr, "work_pool_new: %s\n", err);
        exit(2);
    }
    return pool;
}

static void pause_ms(long ms)
{
    nanosleep(&(struct timespec){ ms / 1000, (ms % 1000) * 1000000L }, NULL);
}

/* Runs the loop until *count reaches want, or about 10 s pass (a hang is a failure, not a stuck test). */
static void run_until(struct loop *loop, const int *count, int want)
{
    double until = monotonic_seconds() + 10;
    while (*count < want && monotonic_seconds() < until) loop_run_once(loop, 0.5);
}

/* ---------- the pool ---------- */

struct counted {
    atomic_int ran;                /* on pool threads */
    int done;                      /* on the loop's thread */
    bool done_off_loop;            /* a completion ran on another thread */
    bool done_before_run;
    long sleep_ms;
};

struct one_job { struct counted *c; atomic_bool ran; };

static void count_run(void *arg)
{
    struct one_job *j = arg;
    if (j->c->sleep_ms) pause_ms(j->c->sleep_ms);
    atomic_store(&j->ran, true);
    atomic_fetch_add(&j->c->ran, 1);
}

static void count_done(void *arg)
{
    struct one_job *j = arg;
    if (!pthread_equal(pthread_self(), loop_thread)) j->c->done_off_loop = true;
    if (!atomic_load(&j->ran)) j->c->done_before_run = true;
    j->c->done++;
}

static void test_job_runs_and_completion_wakes_the_loop(void)
{
    struct loop *loop = new_loop();
    struct work_pool *pool = new_pool(loop, 2);
    struct counted c = { .sleep_ms = 50 };
    atomic_init(&c.ran, 0);
    struct one_job j = { .c = &c };
    atomic_init(&j.ran, false);
    CHECK(work_submit(pool, count_run, count_done, &j, err, sizeof err) == 0);
    /* Nothing else is watched: only the pool's eventfd can end this wait. */
    double t0 = monotonic_seconds();
    loop_run_once(loop, 10);
    CHECK(monotonic_seconds() - t0 < 5);
    CHECK(c.done == 1);
    CHECK(atomic_load(&c.ran) == 1);
    CHECK(!c.done_off_loop);
    CHECK(!c.done_before_run);
    work_pool_free(pool);
    loop_free(loop);
}

static void test_many_jobs(void)
{
    enum { N = 2000 };
    struct loop *loop = new_loop();
    struct work_pool *pool = new_pool(loop, 4);
    struct counted c = { 0 };
    atomic_init(&c.ran, 0);
    struct one_job *jobs = xcalloc(N, sizeof *jobs);
    for (int i = 0; i < N; i++) {
        jobs[i].c = &c;
        atomic_init(&jobs[i].ran, false);
        CHECK(work_submit(pool, count_run, count_done, &jobs[i], err, sizeof err) == 0);
    }
    run_until(loop, &c.done, N);
    CHECK(c.done == N);
    CHECK(atomic_load(&c.ran) == N);
    CHECK(!c.done_off_loop);
    CHECK(!c.done_before_run);
    work_pool_free(pool);
    free(jobs);
    loop_free(loop);
}

/* A job without a completion runs all the same. */
static void test_job_without_completion(void)
{
    struct loop *loop = new_loop();
    struct work_pool *pool = new_pool(loop, 1);
    struct counted c = { 0 };
    atomic_init(&c.ran, 0);
    struct one_job j = { .c = &c };
    atomic_init(&j.ran, false);
    CHECK(work_submit(pool, count_run, NULL, &j, err, sizeof err) == 0);
    double until = monotonic_seconds() + 10;
    while (atomic_load(&c.ran) == 0 && monotonic_seconds() < until) loop_run_once(loop, 0.1);
    CHECK(atomic_load(&c.ran) == 1);
    work_pool_free(pool);
    loop_free(loop);
}

/* Freeing the pool lets every queued job run (they are bounded) and drops
 * the completions the loop has not delivered, calling none of them. */
static void test_free_with_jobs_pending(void)
{
    enum { N = 20 };
    struct loop *loop = new_loop();
    struct work_pool *pool = new_pool(loop, 2);
    struct counted c = { .sleep_ms = 5 };
    atomic_init(&c.ran, 0);
    struct one_job jobs[N];
    for (int i = 0; i < N; i++) {
        jobs[i] = (struct one_job){ .c = &c };
        atomic_init(&jobs[i].ran, false);
        CHECK(work_submit(pool, count_run, count_done, &jobs[i], err, sizeof err) == 0);
    }
    work_pool_free(pool);              /* the loop never ran */
    CHECK(atomic_load(&c.ran) == N);
    CHECK(c.done == 0);
    loop_run_once(loop, 0);            /* the eventfd is gone from the loop */
    CHECK(c.done == 0);
    loop_free(loop);
}

static void test_pool_with_no_jobs(void)
{
    struct loop *loop = new_loop();
    work_pool_free(new_pool(loop, 8));
    work_pool_free(NULL);
    loop_free(loop);
}

/* ---------- hashing as a pool job ---------- */

static char *at(const char *rel) { return xasprintf("%s/%s", root, rel); }

static void mkdir_rel(const char *rel)
{
    char *p = at(rel);
    CHECK(mkdir(p, 0755) == 0);
    free(p);
}

/* A file of `size` bytes of a pattern that depends on `seed`. */
static void put_pattern(const char *rel, size_t size, unsigned seed)
{
    char *p = at(rel);
    FILE *f = fopen(p, "wb");
    CHECK(f != NULL);
    for (size_t i = 0; f && i < size; i++) fputc((int)((i * 31 + seed) & 0xff), f);
    if (f) fclose(f);
    free(p);
}

/* Waits until the coarse clock has passed every file's ctime so hashes taken
 * now are trusted (the racy-git rule in hashcache.c): a tick is at most 10 ms. */
static void settle(void) { pause_ms(30); }

struct hash_waiter { struct hashcache_job job; int *done; };

static void hash_done(void *arg)
{
    struct hash_waiter *w = arg;
    (*w->done)++;
}

static void expect_hash_of(const char *rel, const char *hex)
{
    char *p = at(rel), want[SHA256_HEX_SIZE];
    CHECK(hash_file(p, want, err, sizeof err) == 0);
    CHECK_STR(hex, want);
    free(p);
}

/* Many pool threads hash files through one cache while the loop's thread
 * looks up others: every hash right, every file read once, all remembered. */
static void test_hash_jobs_share_the_cache(void)
{
    enum { N = 24 };
    mkdir_rel("many");
    for (int i = 0; i < N; i++) {
        char rel[32];
        snprintf(rel, sizeof rel, "many/f%d", i);
        put_pattern(rel, (size_t)(200 * 1024 + i * 4099), (unsigned)i);
    }
    settle();
    struct loop *loop = new_loop();
    struct work_pool *pool = new_pool(loop, 4);
    char *cache = at("many.cache");
    struct hashcache *hc = hashcache_load(cache);
    struct hash_waiter w[N];
    char *paths[N];
    int done = 0;
    for (int i = 0; i < N; i++) {
        char rel[32];
        snprintf(rel, sizeof rel, "many/f%d", i);
        paths[i] = at(rel);
        w[i] = (struct hash_waiter){ .job = { .hc = hc, .path = paths[i] }, .done = &done };
        atomic_init(&w[i].job.cancel, false);
        CHECK(work_submit(pool, hashcache_job_run, hash_done, &w[i], err, sizeof err) == 0);
    }
    /* Meanwhile, on this thread: lookups and inserts of other files. */
    put_pattern("side", 1000, 7);
    settle();
    char *side = at("side"), hex[SHA256_HEX_SIZE];
    enum hash_kind kind;
    for (int k = 0; k < 200; k++)
        CHECK(hashcache_hash_cheap(hc, side, 1 << 20, 64, hex, &kind, err, sizeof err) == 0);
    run_until(loop, &done, N);
    CHECK(done == N);
    for (int i = 0; i < N; i++) {
        char rel[32];
        snprintf(rel, sizeof rel, "many/f%d", i);
        CHECK(w[i].job.rc == 0);
        CHECK(w[i].job.kind == HASH_KIND_FILE);
        expect_hash_of(rel, w[i].job.hex);
    }
    CHECK(hashcache_count(hc) == N + 1);
    CHECK(hashcache_files_read(hc) == N + 1);          /* "side" once, then hits */
    /* Now each is a hit, answered on the loop's thread without a read. */
    for (int i = 0; i < N; i++) {
        CHECK(hashcache_hash_cheap(hc, paths[i], 0, 64, hex, &kind, err, sizeof err) == 0);
        CHECK_STR(hex, w[i].job.hex);
    }
    CHECK(hashcache_files_read(hc) == N + 1);
    CHECK(hashcache_save(hc, err, sizeof err) == 0);
    hashcache_free(hc);
    for (int i = 0; i < N; i++) free(paths[i]);
    free(side);
    free(cache);
    work_pool_free(pool);
    loop_free(loop);
}

/* hashcache_hash_cheap: a small file now; a larger one, or a tree with a file
 * to read or more entries than allowed, is the pool's. */
static void test_cheap_hash_leaves_long_work(void)
{
    mkdir_rel("cheap");
    put_pattern("cheap/small", 100, 1);
    put_pattern("cheap/large", 300 * 1024, 2);
    settle();
    struct hashcache *hc = hashcache_load("/nonexistent/cache");
    char *small = at("cheap/small"), *large = at("cheap/large"), *dir = at("cheap");
    char *missing = at("cheap/missing"), hex[SHA256_HEX_SIZE];
    enum hash_kind kind;
    CHECK(hashcache_hash_cheap(hc, small, 1024, 64, hex, &kind, err, sizeof err) == 0);
    CHECK(kind == HASH_KIND_FILE);
    expect_hash_of("cheap/small", hex);
    CHECK(hashcache_hash_cheap(hc, large, 1024, 64, hex, &kind, err, sizeof err) == 1);
    CHECK(kind == HASH_KIND_FILE);
    CHECK(hashcache_hash_cheap(hc, dir, 1024, 64, hex, &kind, err, sizeof err) == 1);
    CHECK(kind == HASH_KIND_DIRECTORY);
    CHECK(hashcache_hash_cheap(hc, missing, 1024, 64, hex, &kind, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "cannot read");
    CHECK_CONTAINS(err, "cheap/missing");
    CHECK(hashcache_files_read(hc) == 1);
    /* Once the pool has hashed it, the large file is a hit here too. */
    struct hashcache_job job = { .hc = hc, .path = large };
    atomic_init(&job.cancel, false);
    hashcache_job_run(&job);
    CHECK(job.rc == 0);
    char big_hex[SHA256_HEX_SIZE];
    memcpy(big_hex, job.hex, sizeof big_hex);
    CHECK(hashcache_hash_cheap(hc, large, 1024, 64, hex, &kind, err, sizeof err) == 0);
    CHECK_STR(hex, big_hex);
    /* And a tree job's hash is hashcache_hash's. */
    struct hashcache_job tree = { .hc = hc, .path = dir };
    atomic_init(&tree.cancel, false);
    hashcache_job_run(&tree);
    CHECK(tree.rc == 0);
    CHECK(tree.kind == HASH_KIND_DIRECTORY);
    CHECK(hashcache_hash(hc, dir, hex, &kind, err, sizeof err) == 0);
    CHECK_STR(hex, tree.hex);
    /* Every file of it cached now: a small enough tree is answered here. */
    size_t reads = hashcache_files_read(hc);
    memset(hex, 0, sizeof hex);
    CHECK(hashcache_hash_cheap(hc, dir, 0, 2, hex, &kind, err, sizeof err) == 0);
    CHECK(kind == HASH_KIND_DIRECTORY);
    CHECK_STR(hex, tree.hex);
    CHECK(hashcache_hash_cheap(hc, dir, 0, 1, hex, &kind, err, sizeof err) == 1);   /* two entries */
    mkdir_rel("cheap/sub");
    put_pattern("cheap/sub/new", 10, 4);
    settle();
    CHECK(hashcache_hash_cheap(hc, dir, 1 << 20, 64, hex, &kind, err, sizeof err) == 1);
    CHECK(hashcache_files_read(hc) == reads);          /* a walk here reads nothing */
    hashcache_free(hc);
    free(small); free(large); free(dir); free(missing);
}

/* A cancelled job stops reading, says so, and leaves nothing in the cache. */
static void test_cancelled_hash(void)
{
    put_pattern("cancel", 256 * 1024, 3);
    settle();
    struct hashcache *hc = hashcache_load("/nonexistent/cache");
    char *p = at("cancel");
    struct hashcache_job job = { .hc = hc, .path = p };
    atomic_init(&job.cancel, true);
    hashcache_job_run(&job);
    CHECK(job.rc == -1);
    CHECK_CONTAINS(job.err, "cannot read");
    CHECK_CONTAINS(job.err, strerror(ECANCELED));
    CHECK(hashcache_count(hc) == 0);
    atomic_store(&job.cancel, false);
    hashcache_job_run(&job);
    CHECK(job.rc == 0);
    expect_hash_of("cancel", job.hex);
    hashcache_free(hc);
    free(p);
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st; (void)flag; (void)ftw;
    return remove(path);
}

int main(void)
{
    loop_thread = pthread_self();
    snprintf(root, sizeof root, "/tmp/flow-test-work-XXXXXX");
    if (!mkdtemp(root)) { perror("mkdtemp"); return 1; }
    RUN(test_job_runs_and_completion_wakes_the_loop);
    RUN(test_many_jobs);
    RUN(test_job_without_completion);
    RUN(test_free_with_jobs_pending);
    RUN(test_pool_with_no_jobs);
    RUN(test_hash_jobs_share_the_cache);
    RUN(test_cheap_hash_leaves_long_work);
    RUN(test_cancelled_hash);
    nftw(root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return CHECK_DONE("work");
}
