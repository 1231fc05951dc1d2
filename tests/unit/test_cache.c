/* test_cache.c — flow.cache and the engine under it: SHA-256, the file and
 * tree hash cache, the journal, durable commits, and the value serializer
 * (through a plain lua_State with the module loaded). */
#include "check.h"
#include "commit.h"
#include "nofollow.h"
#include "flowlua.h"
#include "hash.h"
#include "hashcache.h"
#include "journal.h"
#include "nofollow.h"
#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <lauxlib.h>
#include <limits.h>
#include <lualib.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static char root[64];              /* this run's scratch directory */
static char err[1024];

/* ---------- helpers ---------- */

static char *at(const char *rel)
{
    return xasprintf("%s/%s", root, rel);
}

static void put(const char *rel, const char *content)
{
    char *p = at(rel);
    char *dir = path_parent(p);
    mkdir_p(dir, 0755);
    CHECK(nofollow_write_atomic(p, content, strlen(content), err, sizeof err) == 0);
    free(dir);
    free(p);
}

static char *get(const char *rel)
{
    char *p = at(rel);
    char *s = read_file(p, NULL);
    free(p);
    return s;
}

static bool exists(const char *rel)
{
    char *p = at(rel);
    struct stat st;
    bool ok = lstat(p, &st) == 0;
    free(p);
    return ok;
}

static long long coarse_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME_COARSE, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Waits until the clock file times come from has passed the file's ctime, so
 * a hash taken now is trusted (see the racy-git rule in hashcache.c). */
static void settle(const char *rel)
{
    char *p = at(rel);
    struct stat st;
    CHECK(stat(p, &st) == 0);
    long long ctime_ns = (long long)st.st_ctim.tv_sec * 1000000000LL + st.st_ctim.tv_nsec;
    while (coarse_now_ns() <= ctime_ns) nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
    free(p);
}

/* Puts an old mtime on a file (its ctime becomes now). */
static void set_mtime(const char *rel, time_t seconds)
{
    char *p = at(rel);
    struct timespec times[2] = { { seconds, 0 }, { seconds, 0 } };
    CHECK(utimensat(AT_FDCWD, p, times, 0) == 0);
    free(p);
}

/* Entries of a directory but "." and "..", hidden ones included. */
static size_t count_entries(const char *rel)
{
    char *p = at(rel);
    size_t n = 0;
    DIR *d = opendir(p);
    for (struct dirent *e; d && (e = readdir(d));)
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    if (d) closedir(d);
    free(p);
    return n;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st; (void)flag; (void)ftw;
    return remove(path);
}

static void rm_rf(const char *path)
{
    nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static void hash_of(struct hashcache *hc, const char *rel, char hex[SHA256_HEX_SIZE])
{
    char *p = at(rel);
    enum hash_kind kind;
    if (hashcache_hash(hc, p, hex, &kind, err, sizeof err) != 0) {
        fprintf(stderr, "  %s\n", err);
        check_cur_failed = 1;
        hex[0] = '\0';
    }
    free(p);
}

/* ---------- SHA-256 ---------- */

static void test_sha256_vectors(void)
{
    char hex[SHA256_HEX_SIZE];
    sha256_hex("", 0, hex);
    CHECK_STR(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    sha256_hex("abc", 3, hex);
    CHECK_STR(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    struct hasher *h = hasher_new();
    hasher_update(h, "a", 1);
    hasher_update(h, "bc", 2);
    hasher_finish(h, hex);
    CHECK_STR(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    hasher_finish(h, hex);                 /* starts over after finishing */
    CHECK_STR(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    hasher_free(h);
}

/* A digest's hex goes back to its bytes and out again unchanged; any other
 * text (short, long, uppercase, not hex) has no bytes. */
static void test_sha256_hex_round_trip(void)
{
    char hex[SHA256_HEX_SIZE], again[SHA256_HEX_SIZE];
    unsigned char md[SHA256_SIZE];
    sha256_hex("abc", 3, hex);
    CHECK(sha256_from_hex(hex, md) && md[0] == 0xba && md[31] == 0xad);
    sha256_to_hex(md, again);
    CHECK_STR(again, hex);
    static const char *const bad[] = {
        "", "ba78", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015a",
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad0",
        "BA7816BF8F01CFEA414140DE5DAE2223B00361A396177A9CB410FF61F20015AD",
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ag",
    };
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) CHECK(!sha256_from_hex(bad[k], md));
}

static void test_hash_file(void)
{
    size_t n = 200 * 1000;                 /* several 64 KiB reads */
    char *content = xmalloc(n + 1);
    for (size_t i = 0; i < n; i++) content[i] = (char)('a' + i % 23);
    content[n] = '\0';
    put("big", content);
    char want[SHA256_HEX_SIZE], got[SHA256_HEX_SIZE];
    sha256_hex(content, n, want);
    char *p = at("big");
    CHECK(hash_file(p, got, err, sizeof err) == 0);
    CHECK_STR(got, want);
    free(p);
    free(content);
    p = at("no-such-file");
    CHECK(hash_file(p, got, err, sizeof err) != 0);
    CHECK_CONTAINS(err, "no-such-file: No such file or directory");
    free(p);
}

/* ---------- tree hashes ---------- */

static void make_tree(const char *dir, bool reversed)
{
    static const char *const files[] = { "a.txt", "sub/b.txt", "sub/deep/c.txt", "z" };
    for (int k = 0; k < 4; k++) {
        int i = reversed ? 3 - k : k;
        char *rel = xasprintf("%s/%s", dir, files[i]);
        put(rel, files[i]);
        free(rel);
    }
    char *link = xasprintf("%s/%s/link", root, dir);
    CHECK(symlink("a.txt", link) == 0);
    free(link);
}

static void test_tree_hash_format(void)
{
    put("fmt/x", "x");
    put("fmt/d/y", "y");
    char hx[SHA256_HEX_SIZE], hy[SHA256_HEX_SIZE], hd[SHA256_HEX_SIZE], want[SHA256_HEX_SIZE];
    sha256_hex("x", 1, hx);
    sha256_hex("y", 1, hy);
    char *line = xasprintf("f %s d/y\n", hy);                 /* paths relative to the top */
    sha256_hex(line, strlen(line), hd);
    free(line);
    line = xasprintf("d %s d\nf %s x\n", hd, hx);
    sha256_hex(line, strlen(line), want);
    free(line);

    char *cache = at("fmt-cache");
    struct hashcache *hc = hashcache_load(cache);
    char hex[SHA256_HEX_SIZE];
    enum hash_kind kind;
    char *p = at("fmt/");                                      /* a trailing slash changes nothing */
    CHECK(hashcache_hash(hc, p, hex, &kind, err, sizeof err) == 0);
    CHECK(kind == HASH_KIND_DIRECTORY);
    CHECK_STR(hex, want);
    free(p);
    hashcache_free(hc);
    free(cache);
}

static void test_tree_hash_changes(void)
{
    make_tree("t1", false);
    make_tree("t2", true);                 /* same tree, created in another order, elsewhere */
    struct hashcache *hc = hashcache_load("/nonexistent/cache");
    char h1[SHA256_HEX_SIZE], h2[SHA256_HEX_SIZE], h3[SHA256_HEX_SIZE];
    hash_of(hc, "t1", h1);
    hash_of(hc, "t2", h2);
    CHECK_STR(h1, h2);
    hash_of(hc, "t1", h3);
    CHECK_STR(h1, h3);

    put("t1/sub/deep/c.txt", "changed");
    hash_of(hc, "t1", h3);
    CHECK(strcmp(h1, h3) != 0);
    put("t1/sub/deep/c.txt", "sub/deep/c.txt");
    hash_of(hc, "t1", h3);
    CHECK_STR(h1, h3);

    char *from = at("t1/sub/deep/c.txt"), *to = at("t1/sub/deep/renamed.txt");
    CHECK(rename(from, to) == 0);
    hash_of(hc, "t1", h3);
    CHECK(strcmp(h1, h3) != 0);
    CHECK(rename(to, from) == 0);
    free(from);
    free(to);

    char *link = at("t1/link");                 /* a symlink's target is hashed, not followed */
    CHECK(unlink(link) == 0 && symlink("z", link) == 0);
    hash_of(hc, "t1", h3);
    CHECK(strcmp(h1, h3) != 0);
    free(link);
    hashcache_free(hc);
}

static void test_missing_path(void)
{
    struct hashcache *hc = hashcache_load("/nonexistent/cache");
    char hex[SHA256_HEX_SIZE];
    enum hash_kind kind;
    char *p = at("nothing-here");
    CHECK(hashcache_hash(hc, p, hex, &kind, err, sizeof err) != 0);
    CHECK_CONTAINS(err, "nothing-here: No such file or directory");
    free(p);
    hashcache_free(hc);
}

/* ---------- the hash cache ---------- */

static void test_cache_hit_reads_nothing(void)
{
    put("hit/f", "content one");
    set_mtime("hit/f", 1000000000);
    settle("hit/f");
    char *cache = at("hit-cache/hashes");
    struct hashcache *hc = hashcache_load(cache);
    char h1[SHA256_HEX_SIZE], h2[SHA256_HEX_SIZE], want[SHA256_HEX_SIZE];
    hash_of(hc, "hit/f", h1);
    sha256_hex("content one", 11, want);
    CHECK_STR(h1, want);
    CHECK(hashcache_files_read(hc) == 1);
    hash_of(hc, "hit/f", h2);
    CHECK(hashcache_files_read(hc) == 1);          /* a hit: one stat, no read */
    CHECK(hashcache_save(hc, err, sizeof err) == 0);
    hashcache_free(hc);

    /* Tamper with the recorded hash: the cache trusts the unchanged stat. */
    char *text = read_file(cache, NULL);
    char *pos = text ? strstr(text, want) : NULL;
    CHECK(pos != NULL);
    if (pos) memset(pos, '0', 64);
    CHECK(text && nofollow_write_atomic(cache, text, strlen(text), err, sizeof err) == 0);
    free(text);
    hc = hashcache_load(cache);
    hash_of(hc, "hit/f", h2);
    CHECK_STR(h2, "0000000000000000000000000000000000000000000000000000000000000000");
    CHECK(hashcache_files_read(hc) == 0);

    /* A new mtime (same size) is a change: read again. */
    set_mtime("hit/f", 1000000001);
    hash_of(hc, "hit/f", h2);
    CHECK_STR(h2, want);
    CHECK(hashcache_files_read(hc) == 1);
    hashcache_free(hc);
    free(cache);
}

/* An entry whose mtime/ctime is not earlier than when it was hashed may hide
 * a rewrite in the same clock tick: it is hashed again. */
static void test_racy_entry_rehashed(void)
{
    put("racy/f", "racy");
    char *p = at("racy/f"), *cache = at("racy-cache");
    struct stat st;
    CHECK(stat(p, &st) == 0);
    long long mt = (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
    long long ct = (long long)st.st_ctim.tv_sec * 1000000000LL + st.st_ctim.tv_nsec;
    char *line = xasprintf("%064d %lld %lld %lld %llu %llu %lld %s\n", 0, (long long)st.st_size, mt, ct,
                           (unsigned long long)st.st_ino, (unsigned long long)st.st_dev, ct, p);
    CHECK(nofollow_write_atomic(cache, line, strlen(line), err, sizeof err) == 0);
    struct hashcache *hc = hashcache_load(cache);
    CHECK(hashcache_count(hc) == 1);
    char hex[SHA256_HEX_SIZE], want[SHA256_HEX_SIZE];
    hash_of(hc, "racy/f", hex);
    sha256_hex("racy", 4, want);
    CHECK_STR(hex, want);
    CHECK(hashcache_files_read(hc) == 1);
    hashcache_free(hc);
    free(line);
    free(cache);
    free(p);
}

/* On a file system of whole seconds a rewrite in the second of the hash
 * keeps the stamp: an entry whose mtime has no nanoseconds is trusted only a
 * second after it (here the cached hash is a stale one, zeros). */
static void test_whole_second_stamp_is_rehashed_within_its_second(void)
{
    put("sec/f", "new!");
    char *p = at("sec/f"), *cache = at("sec-cache");
    struct stat st;
    for (int tries = 0; tries < 5; tries++) {       /* mtime the second ctime is in */
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        struct timespec times[2] = { { now.tv_sec, 0 }, { now.tv_sec, 0 } };
        CHECK(utimensat(AT_FDCWD, p, times, 0) == 0);
        CHECK(stat(p, &st) == 0);
        if (st.st_ctim.tv_sec == st.st_mtim.tv_sec) break;
    }
    long long mt = (long long)st.st_mtim.tv_sec * 1000000000LL;
    long long ct = (long long)st.st_ctim.tv_sec * 1000000000LL + st.st_ctim.tv_nsec;
    char *line = xasprintf("%064d %lld %lld %lld %llu %llu %lld %s\n", 0, (long long)st.st_size, mt, ct,
                           (unsigned long long)st.st_ino, (unsigned long long)st.st_dev, ct + 1, p);
    CHECK(nofollow_write_atomic(cache, line, strlen(line), err, sizeof err) == 0);
    struct hashcache *hc = hashcache_load(cache);
    char hex[SHA256_HEX_SIZE], want[SHA256_HEX_SIZE];
    hash_of(hc, "sec/f", hex);
    sha256_hex("new!", 4, want);
    CHECK_STR(hex, want);
    hashcache_free(hc);
    free(line);
    free(cache);
    free(p);
}

static void test_save_load_round_trip(void)
{
    put("rt/a", "a");
    put("rt/with space", "b");
    put("rt/d/c", "c");
    settle("rt/d/c");
    char *cache = at("rt-cache/sub/hashes");          /* the directory is created */
    struct hashcache *hc = hashcache_load(cache);
    char ha[SHA256_HEX_SIZE], hb[SHA256_HEX_SIZE], hd[SHA256_HEX_SIZE], x[SHA256_HEX_SIZE];
    hash_of(hc, "rt/a", ha);
    hash_of(hc, "rt/with space", hb);
    hash_of(hc, "rt/d", hd);
    CHECK(hashcache_count(hc) == 3);
    CHECK(hashcache_save(hc, err, sizeof err) == 0);
    CHECK(unlink(cache) == 0);
    CHECK(hashcache_save(hc, err, sizeof err) == 0);  /* unchanged: nothing written */
    CHECK(access(cache, F_OK) != 0);
    hash_of(hc, "rt/a", x);                           /* a hit changes nothing either */
    CHECK(hashcache_save(hc, err, sizeof err) == 0);
    CHECK(access(cache, F_OK) != 0);
    put("rt/a", "A");                                 /* a change is saved */
    settle("rt/a");
    hash_of(hc, "rt/a", ha);
    CHECK(hashcache_save(hc, err, sizeof err) == 0);
    hashcache_free(hc);

    hc = hashcache_load(cache);
    CHECK(hashcache_count(hc) == 3);
    hash_of(hc, "rt/a", x);
    CHECK_STR(x, ha);
    hash_of(hc, "rt/with space", x);
    CHECK_STR(x, hb);
    hash_of(hc, "rt/d", x);
    CHECK_STR(x, hd);
    CHECK(hashcache_files_read(hc) == 0);
    hashcache_free(hc);
    free(cache);
}

static void test_corrupt_lines_ignored(void)
{
    put("bad/f", "f");
    settle("bad/f");
    char *cache = at("bad-cache");
    struct hashcache *hc = hashcache_load(cache);
    char want[SHA256_HEX_SIZE], x[SHA256_HEX_SIZE];
    hash_of(hc, "bad/f", want);
    CHECK(hashcache_save(hc, err, sizeof err) == 0);
    hashcache_free(hc);

    char *good = read_file(cache, NULL);
    char *text = xasprintf("garbage\n%s\n0123 1 2 3 4 5 6 short-hash\n"
                           "%.64s -1 x 3 4 5 6 not-a-number\n%.64s 1 2 3 4 5 6\n%s",
                           "not hex at all", want, want, good ? good : "");
    size_t len = strlen(text);
    text[len - 1] = '\0';                               /* and the last line cut short */
    CHECK(nofollow_write_atomic(cache, text, strlen(text), err, sizeof err) == 0);
    hc = hashcache_load(cache);
    CHECK(hashcache_count(hc) == 0);
    hashcache_free(hc);

    free(text);
    text = xasprintf("garbage\n\n%s", good ? good : "");
    CHECK(nofollow_write_atomic(cache, text, strlen(text), err, sizeof err) == 0);
    hc = hashcache_load(cache);
    CHECK(hashcache_count(hc) == 1);
    hash_of(hc, "bad/f", x);
    CHECK_STR(x, want);
    CHECK(hashcache_files_read(hc) == 0);
    hashcache_free(hc);
    free(text);
    free(good);
    free(cache);
}

static void test_prune(void)
{
    put("prune/keep", "k");
    put("prune/gone", "g");
    put("prune/touched", "t");
    struct hashcache *hc = hashcache_load("/nonexistent/cache");
    char x[SHA256_HEX_SIZE];
    hash_of(hc, "prune/keep", x);
    hash_of(hc, "prune/gone", x);
    hash_of(hc, "prune/touched", x);
    char *gone = at("prune/gone");
    CHECK(unlink(gone) == 0);
    free(gone);
    set_mtime("prune/touched", 1000000000);
    CHECK(hashcache_prune(hc) == 2);
    CHECK(hashcache_count(hc) == 1);
    CHECK(hashcache_prune(hc) == 0);
    hash_of(hc, "prune/keep", x);                  /* the index still finds what is left */
    CHECK(hashcache_count(hc) == 1);
    hashcache_free(hc);
}

/* ---------- journal ---------- */

static void test_journal(void)
{
    char *path = at("journal/dir/run.log");               /* directories are created */
    struct journal *j = journal_open(path, err, sizeof err);
    CHECK(j != NULL);
    if (!j) { free(path); return; }
    struct strbuf want = STRBUF_INIT;
    for (int i = 0; i < 500; i++) {
        char *line = xasprintf(i % 2 ? "line %d" : "line %d\n", i);
        CHECK(journal_append(j, line, strlen(line), true, err, sizeof err) == 0);
        sb_addf(&want, "line %d\n", i);
        free(line);
    }
    CHECK(journal_sync(j, err, sizeof err) == 0);
    char *big = xmalloc(5000);                             /* longer than the stack buffer */
    memset(big, 'x', 4999);
    big[4999] = '\0';
    CHECK(journal_append(j, big, strlen(big), true, err, sizeof err) == 0);
    sb_addf(&want, "%s\n", big);
    CHECK(journal_close(j, err, sizeof err) == 0);

    j = journal_open(path, err, sizeof err);               /* reopening appends */
    CHECK(j && journal_append(j, "", 0, true, err, sizeof err) == 0);
    sb_adds(&want, "\n");
    CHECK(j && journal_close(j, err, sizeof err) == 0);
    char *got = read_file(path, NULL);
    CHECK_STR(got, want.buf);
    free(got);
    free(big);
    sb_release(&want);
    free(path);

    CHECK(journal_open("/proc/no/such/journal", err, sizeof err) == NULL);
    CHECK_CONTAINS(err, "/proc/no/such");
}

/* This binary's fsync: what the engine syncs, by path, while `recording`
 * (the engine's calls resolve to it rather than to the C library's). */
static bool recording;
static char synced[32][PATH_MAX];
static int n_synced;

int fsync(int fd)
{
    if (recording && n_synced < 32) {
        char link[64];
        snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
        ssize_t n = readlink(link, synced[n_synced], PATH_MAX - 1);
        if (n > 0) synced[n_synced++][n] = '\0';
    }
    return (int)syscall(SYS_fsync, fd);
}

static bool was_synced(const char *path)
{
    char real[PATH_MAX];
    if (!realpath(path, real)) return false;
    for (int i = 0; i < n_synced; i++)
        if (strcmp(synced[i], real) == 0) return true;
    return false;
}

/* Whether a path synced ends with `tail` and has `part` in it (a copy
 * synced under a temporary name before it was renamed). */
static bool synced_like(const char *part, const char *tail)
{
    size_t tl = strlen(tail);
    for (int i = 0; i < n_synced; i++) {
        size_t l = strlen(synced[i]);
        if (strstr(synced[i], part) && l >= tl && strcmp(synced[i] + l - tl, tail) == 0) return true;
    }
    return false;
}

/* ---------- commit ---------- */

static int commit_rel(const char *staging, const char *final)
{
    char *s = at(staging), *f = at(final);
    int rc = commit_output_unsynced(s, f, err, sizeof err);
    free(s);
    free(f);
    return rc;
}

static void test_commit_file(void)
{
    put("c1/staging", "new");
    n_synced = 0;
    recording = true;
    CHECK(commit_rel("c1/staging", "c1/out/deeper/final") == 0);   /* parents created */
    recording = false;
    CHECK(n_synced == 0);                          /* a rename only: group commit syncs it later */
    char *s = get("c1/out/deeper/final");
    CHECK_STR(s, "new");
    free(s);
    CHECK(!exists("c1/staging"));
    put("c1/staging", "newer");                                   /* over an existing file */
    CHECK(commit_rel("c1/staging", "c1/out/deeper/final") == 0);
    s = get("c1/out/deeper/final");
    CHECK_STR(s, "newer");
    free(s);
}

static void test_commit_dir_over_dir(void)
{
    put("c2/final/old.txt", "old");
    put("c2/final/sub/old2.txt", "old");
    put("c2/staging/new.txt", "new");
    put("c2/staging/sub/new2.txt", "new2");
    CHECK(commit_rel("c2/staging", "c2/final") == 0);
    char *s = get("c2/final/sub/new2.txt");
    CHECK_STR(s, "new2");
    free(s);
    CHECK(!exists("c2/final/old.txt"));
    CHECK(!exists("c2/staging"));
    CHECK(count_entries("c2") == 1);               /* no hidden copy left beside it */
}

static void test_commit_types_differ(void)
{
    put("c3/final/inside", "dir");
    put("c3/staging", "file");
    CHECK(commit_rel("c3/staging", "c3/final") == 0);   /* a file over a directory */
    char *s = get("c3/final");
    CHECK_STR(s, "file");
    free(s);
    put("c3/staging2/inside", "dir again");
    CHECK(commit_rel("c3/staging2", "c3/final") == 0);  /* a directory over a file */
    s = get("c3/final/inside");
    CHECK_STR(s, "dir again");
    free(s);
}

static void test_commit_failure_leaves_final(void)
{
    put("c4/final", "kept");
    CHECK(commit_rel("c4/missing", "c4/final") != 0);
    CHECK_CONTAINS(err, "cannot move ");
    CHECK_CONTAINS(err, "c4/missing to ");
    CHECK_CONTAINS(err, "c4/final: No such file or directory");
    char *s = get("c4/final");
    CHECK_STR(s, "kept");
    free(s);
}

/* /dev/shm is usually a tmpfs apart from /tmp: then the copy path runs. */
static void test_commit_across_file_systems(void)
{
    struct stat a, b;
    char shm[] = "/dev/shm/flow-test-cache-XXXXXX";
    if (stat(root, &a) != 0 || !mkdtemp(shm)) return;
    if (stat(shm, &b) != 0 || a.st_dev == b.st_dev) { rmdir(shm); return; }
    char *staging = xasprintf("%s/out", shm);
    char *file = xasprintf("%s/out/sub/f", shm), *link = xasprintf("%s/out/link", shm);
    char *sub = xasprintf("%s/out/sub", shm);
    CHECK(mkdir(staging, 0755) == 0 && mkdir(sub, 0750) == 0);
    CHECK(nofollow_write_atomic(file, "far", 3, err, sizeof err) == 0);
    CHECK(chmod(file, 0600) == 0);
    CHECK(symlink("sub/f", link) == 0);
    put("c5/final/old", "old");
    char *final = at("c5/final");
    n_synced = 0;
    recording = true;
    CHECK(commit_output_unsynced(staging, final, err, sizeof err) == 0);
    recording = false;
    char *s = get("c5/final/link");                     /* read through the copied symlink */
    CHECK_STR(s, "far");
    free(s);
    struct stat st;
    char *copied = at("c5/final/sub/f"), *copied_dir = at("c5/final/sub");
    CHECK(stat(copied, &st) == 0 && (st.st_mode & 07777) == 0600);
    CHECK(stat(copied_dir, &st) == 0 && (st.st_mode & 07777) == 0750);
    CHECK(!exists("c5/final/old"));
    CHECK(access(staging, F_OK) != 0);                  /* staging removed */
    CHECK(count_entries("c5") == 1);               /* no hidden temporary left */
    /* Across file systems the copy is synced as it is made, and so is the
     * folder that holds final after the rename. */
    CHECK(synced_like("/c5/.final.flow-tmp-", "/sub/f"));
    CHECK(synced_like("/c5/.final.flow-tmp-", "/sub"));
    char *c5 = at("c5");
    CHECK(was_synced(c5));
    free(c5);
    rm_rf(shm);
    free(copied);
    free(copied_dir);
    free(final);
    free(sub);
    free(link);
    free(file);
    free(staging);
}

/* Journal records point at files written this way: the new name must be on
 * disk (its directory synced) before the call returns. */
static void test_write_atomic_syncs_directory(void)
{
    put("wa/other", "x");
    char *file = at("wa/value.bin"), *dir = at("wa");
    n_synced = 0;
    recording = true;
    CHECK(nofollow_write_atomic(file, "data", 4, err, sizeof err) == 0);
    recording = false;
    char *got = get("wa/value.bin");
    CHECK_STR(got, "data");
    free(got);
    CHECK(was_synced(dir));
    CHECK(count_entries("wa") == 2);                 /* no temporary file left */
    free(file);
    free(dir);
    file = at("wa/missing/value.bin");
    CHECK(nofollow_write_atomic(file, "data", 4, err, sizeof err) != 0);
    CHECK_CONTAINS(err, "No such file or directory");
    free(file);
}

static void test_fsync_helpers(void)
{
    put("sync/a/b", "b");
    char *p = at("sync");
    CHECK(fsync_tree(p, err, sizeof err) == 0);
    CHECK(fsync_dir(p, err, sizeof err) == 0);
    free(p);
    CHECK(fsync_dir("/nonexistent-dir", err, sizeof err) != 0);
    CHECK_CONTAINS(err, "cannot sync /nonexistent-dir");
    /* what a consumer removed before the batch was flushed is skipped; what
     * cannot be reached for another reason is not */
    CHECK(fsync_tree("/nonexistent-dir/out", err, sizeof err) == 0);
    CHECK(fsync_dir_present("/nonexistent-dir", err, sizeof err) == 0);
    CHECK(fsync_tree("/dev/null/out", err, sizeof err) != 0);
    CHECK_CONTAINS(err, "cannot sync /dev/null/out");
    CHECK(fsync_dir_present("/dev/null/dir", err, sizeof err) != 0);
    char *parent = path_parent("a/b/"), *base = path_base("a/b/");
    CHECK_STR(parent, "a");
    CHECK_STR(base, "b");
    free(parent);
    free(base);
    parent = path_parent("file");
    CHECK_STR(parent, ".");
    free(parent);
    parent = path_parent("/top");
    CHECK_STR(parent, "/");
    free(parent);
}

/* ---------- Lua: flow.cache ---------- */

static lua_State *L;

/* Helpers the Lua checks share: deep equality that tells 1 from 1.0 and
 * 0.0 from -0.0, and a serialize/deserialize round trip. */
static const char prelude[] =
    "cache = require('flow.cache')\n"
    "function same(a, b)\n"
    "  if type(a) ~= type(b) then return false end\n"
    "  if type(a) == 'number' then\n"
    "    if math.type(a) ~= math.type(b) then return false end\n"
    "    if a ~= a then return b ~= b end\n"
    "    return a == b and (a ~= 0 or 1/a == 1/b)\n"
    "  end\n"
    "  if type(a) ~= 'table' then return a == b end\n"
    "  for k, v in pairs(a) do if not same(v, b[k]) then return false end end\n"
    "  for k in pairs(b) do if a[k] == nil then return false end end\n"
    "  return true\n"
    "end\n"
    "function roundtrip(v)\n"
    "  local s, msg = cache.serialize(v)\n"
    "  assert(s, msg)\n"
    "  local back = cache.deserialize(s, 'rt')\n"
    "  assert(same(v, back), 'not the same after reloading: ' .. s)\n"
    "  assert(cache.serialize(back) == s, 'not stable: ' .. s)\n"
    "  return s\n"
    "end\n";

/* Runs a chunk; it passes when it returns nothing and raises nothing. */
static void lua_ok(const char *code)
{
    const char *msg = "ok";
    if (luaL_dostring(L, code) != LUA_OK) msg = lua_tostring(L, -1);
    CHECK_STR(msg, "ok");
    lua_settop(L, 0);
}

static void test_lua_sha256(void)
{
    lua_ok("assert(cache.sha256() == 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855')\n"
           "assert(cache.sha256('a', '', 'bc') == cache.sha256('abc'))\n"
           "assert(not pcall(cache.sha256, {}))");
}

static void test_serialize_exact(void)
{
    lua_ok("local s = cache.serialize({1, 2, a = 1, ['end'] = 2, [true] = 3, [2.5] = 4, ['x y'] = 5,"
           "                          [-1] = 6, [10] = 7, [false] = 8, _b9 = {}})\n"
           "assert(s == 'return {1,2,[false]=8,[true]=3,[-1]=6,[2.5]=4,[10]=7,_b9={},a=1,[\"end\"]=2,[\"x y\"]=5}', s)\n"
           "assert(cache.serialize(nil) == 'return nil')\n"
           "assert(cache.serialize(true) == 'return true')\n"
           "assert(cache.serialize(1.0) == 'return 1.0')\n"
           "assert(cache.serialize(1) == 'return 1')\n"
           "assert(cache.serialize(0.1) == 'return 0.1')\n"
           "assert(cache.serialize('a\\0001\\n') == 'return \"a\\\\0001\\\\n\"')");
}

/* serialize(v, max): the same text when it fits in max bytes, else nil and
 * why, at whatever point the text grew past max (a long string, a long
 * table); a value that cannot be serialised is refused as it is without a
 * limit. */
static void test_serialize_max(void)
{
    lua_ok("local t = {} for i = 1, 100 do t[i] = i end\n"
           "local whole = cache.serialize(t)\n"
           "assert(cache.serialize(t, #whole) == whole)\n"
           "local s, why = cache.serialize(t, #whole - 1)\n"
           "assert(s == nil and why:find('more than ' .. (#whole - 1) .. ' bytes', 1, true), why)\n"
           "assert(cache.serialize(string.rep('x', 1000), 100) == nil)\n"
           "assert(cache.serialize({ a = string.rep('x', 1000) }, 100) == nil)\n"
           "assert(cache.serialize(12345, 100) == 'return 12345')\n"
           "local m = {} for i = 1, 100 do m[i] = i end m.x = 1 m.y = 2\n"
           "local mw = cache.serialize(m)\n"
           "assert(cache.serialize(m, #mw) == mw and cache.serialize(m, #mw - 1) == nil)\n"
           "local k = {} for i = 1, 1000 do k['k' .. i] = i end\n"
           "assert(cache.serialize(k, 100) == nil)\n"
           "local _, f = cache.serialize({ print }, 100)\n"
           "assert(f:find('is a function'), f)\n"
           "assert(not pcall(cache.serialize, 1, -1))");
}

static void test_serialize_numbers(void)
{
    lua_ok("roundtrip({1, 1.0, -0.0, 0.0, 1/0, -1/0, 0/0, math.mininteger, math.maxinteger,"
           "           -math.maxinteger, 0.1, 1e300, -1e-300, 2^53 + 1, 2^63, -2^63, 5e-324, 123456789.125})\n"
           "local v = cache.deserialize(cache.serialize({1, 1.0}), 'x')\n"
           "assert(math.type(v[1]) == 'integer' and math.type(v[2]) == 'float')\n"
           "assert(1/cache.deserialize(cache.serialize(-0.0), 'x') == -1/0)\n"
           "assert(cache.serialize(math.mininteger) == 'return 0x8000000000000000')\n"
           "assert(cache.deserialize(cache.serialize(math.mininteger), 'x') == math.mininteger)\n"
           "local s = cache.serialize({[2^63] = 1, [math.maxinteger] = 2, [-2^63 - 2^11] = 3})\n"
           "assert(s == 'return {[-9.223372036854778e+18]=3,[9223372036854775807]=2,[9.223372036854776e+18]=1}', s)\n"
           "roundtrip({[1/0] = 'inf', [-1/0] = '-inf', [0.5] = 'half'})\n"
           "local nan, other = 0/0, -(0/0)\n"
           "assert(cache.serialize(nan) ~= cache.serialize(other))\n"
           "for _, v in ipairs({nan, other}) do\n"
           "  local back = cache.deserialize(cache.serialize(v), 'x')\n"
           "  assert(back ~= back and string.format('%f', back) == string.format('%f', v), cache.serialize(v))\n"
           "end");
}

static void test_serialize_strings(void)
{
    lua_ok("local bytes = {}\n"
           "for i = 0, 255 do bytes[#bytes + 1] = string.char(i) end\n"
           "local all = table.concat(bytes)\n"
           "roundtrip(all)\n"
           "roundtrip({[all] = all})\n"
           "roundtrip('\\1' .. '23')\n"
           "roundtrip('\\r\\n\\t\\0\"\\\\')\n"
           "roundtrip(string.rep('long ', 10000))\n"
           "for i = 0, 255 do roundtrip(string.char(i) .. '7') end");
}

static void test_serialize_tables(void)
{
    lua_ok("roundtrip({})\n"
           "roundtrip({{}, {{}}, {a = {b = {c = {1, 2, {x = 'y'}}}}}})\n"
           "roundtrip({['end'] = 1, ['and'] = 2, ['goto'] = 3, ['nil'] = 4, ['1x'] = 5, [''] = 6, ok_1 = 7})\n"
           "roundtrip({1, 2, nil, 4})\n"
           "roundtrip({[1] = 'a', [3] = 'c', [1.5] = 'x', [true] = false, [-7] = 0})\n"
           "local list = {} for i = 1, 1000 do list[i] = {i, tostring(i), i + 0.5} end\n"
           "roundtrip(list)\n"
           "local s = roundtrip({{1, 2}, {1, 2}, k = {1, 2}})\n"
           "assert(s == 'return {{1,2},{1,2},k={1,2}}', s)");
}

/* What would not read back as it was is refused: a table held twice (read
 * back, two tables; and a value of tables sharing halves doubled a level,
 * 2^24 tables for 24), a table with a metatable, text Lua cannot compile. */
static void test_serialize_refuses_what_would_not_read_back(void)
{
    lua_ok("local shared = {1, 2}\n"
           "local s, msg = cache.serialize({shared, k = shared})\n"
           "assert(s == nil and msg == 'value.k is a table the value holds twice (read back, it would be two '\n"
           "       .. 'tables: give each place a table of its own)', msg)\n"
           "local t = {} for i = 1, 40 do t = {t, t} end\n"
           "s, msg = cache.serialize(t)\n"
           "assert(s == nil and msg:find('^value%[1%]%[1%].*%[2%] is a table the value holds twice'), msg)\n"
           "s, msg = cache.serialize({p = setmetatable({x = 3}, {__index = print})})\n"
           "assert(s == nil and msg == 'value.p has a metatable (read back, it would be a plain table, '\n"
           "       .. 'without its methods)', msg)\n"
           "local chain = {} for i = 1, 64 do chain = {0, 0, 0, chain} end\n"
           "s, msg = cache.serialize(chain)\n"
           "assert(s == nil and msg:find('^value is nested too deeply to be read back %(value:1: .*registers'), msg)\n"
           "chain = {} for i = 1, 40 do chain = {0, 0, 0, chain} end\n"
           "roundtrip(chain)\n"
           "local wide = {} for i = 1, 5 do local l = {} for j = 1, 49 do l[j] = j end l[50] = wide wide = l end\n"
           "roundtrip(wide)\n"
           "roundtrip({a = {b = {c = {d = {e = {f = 1}}}}}})");
}

static void test_serialize_deterministic(void)
{
    lua_ok("local keys = {}\n"
           "for i = 1, 60 do keys[#keys + 1] = 'k' .. i; keys[#keys + 1] = i * 3; keys[#keys + 1] = i + 0.25 end\n"
           "keys[#keys + 1] = true; keys[#keys + 1] = false\n"
           "local first\n"
           "for round = 1, 20 do\n"
           "  local order = {}\n"
           "  for i = 1, #keys do order[i] = keys[i] end\n"
           "  math.randomseed(round)\n"
           "  for i = #order, 2, -1 do local j = math.random(i); order[i], order[j] = order[j], order[i] end\n"
           "  local t = {}\n"
           "  if round % 2 == 0 then for i = 1, 500 do t['junk' .. i] = i end end\n"
           "  for _, k in ipairs(order) do t[k] = tostring(k) end\n"
           "  if round % 2 == 0 then for i = 1, 500 do t['junk' .. i] = nil end end\n"
           "  local s = cache.serialize(t)\n"
           "  first = first or s\n"
           "  assert(s == first, 'differs in round ' .. round)\n"
           "end");
}

static void test_serialize_depth(void)
{
    lua_ok("local function nest(n) local t = {} local top = t for i = 2, n do t[1] = {} t = t[1] end return top end\n"
           "roundtrip(nest(100))\n"
           "local s, msg = cache.serialize(nest(101))\n"
           "assert(s == nil and msg == 'nested deeper than 100 levels', msg)");
}

static void test_serialize_errors(void)
{
    lua_ok("local function fails(v, want)\n"
           "  local s, msg = cache.serialize(v)\n"
           "  assert(s == nil, 'serialized: ' .. tostring(s))\n"
           "  assert(msg == want, msg)\n"
           "end\n"
           "fails({model = {fit = print}}, 'value.model.fit is a function')\n"
           "fails({1, 2, io.stdout}, 'value[3] is a userdata')\n"
           "fails(print, 'value is a function')\n"
           "fails({['a b'] = {coroutine.create(print)}}, 'value[\"a b\"][1] is a thread')\n"
           "local t = {} t.a = t\n"
           "fails(t, 'value.a refers back to value (a cycle)')\n"
           "local u = {x = {y = {}}} u.x.y.z = u.x\n"
           "fails(u, 'value.x.y.z refers back to value.x (a cycle)')\n"
           "fails({x = {[{}] = 1}}, 'a table key at value.x is a table')\n"
           "fails({[print] = 1}, 'a table key at value is a function')");
}

static void test_deserialize_errors(void)
{
    lua_ok("local function fails(text, want)\n"
           "  local ok, msg = pcall(cache.deserialize, text, 'out.lua')\n"
           "  assert(not ok, 'loaded: ' .. text)\n"
           "  assert(msg:find(want, 1, true) == 1, msg)\n"
           "end\n"
           "fails('return {', 'out.lua:1:')\n"
           "fails('return', 'out.lua: returned 0 values, not exactly one')\n"
           "fails('return 1, 2', 'out.lua: returned 2 values, not exactly one')\n"
           "fails('return print(1)', 'out.lua:1: attempt to call a nil value')");
}

/* A chunk may assign globals, but only into its own empty environment. */
static void test_deserialize_sandbox(void)
{
    lua_ok("assert(cache.deserialize('x = 1 return x', 'n') == 1)\n"
           "assert(x == nil)\n"
           "assert(cache.deserialize('return os', 'n') == nil)\n"
           "local ok, msg = pcall(cache.deserialize, string.dump(function() return 1 end), 'bin')\n"
           "assert(not ok and msg:find('bin: attempt to load a binary chunk', 1, true) == 1, msg)\n"
           "assert(cache.deserialize('return nil', 'n') == nil)");
}

static void test_lua_hashes_and_journal(void)
{
    struct strbuf sb = STRBUF_INIT;
    sb_addf(&sb, "local root = '%s'\n", root);
    sb_adds(&sb,
        "os.execute('mkdir -p ' .. root .. '/lua')\n"
        "local f = io.open(root .. '/lua/x.txt', 'w') or error('cannot write')\n"
        "f:write('abc') f:close()\n"
        "local hc = cache.hashes(root .. '/lua/cache/hashes')\n"
        "local h, kind = hc:file(root .. '/lua/x.txt')\n"
        "assert(h == cache.sha256('abc') and kind == 'file', tostring(h))\n"
        "local d, dkind = hc:file(root .. '/lua')\n"
        "assert(#d == 64 and dkind == 'directory')\n"
        "local none, msg = hc:file(root .. '/lua/missing')\n"
        "assert(none == nil and msg:find('missing: No such file or directory', 1, true), msg)\n"
        "hc:save()\n"
        "assert(io.open(root .. '/lua/cache/hashes')):close()\n"
        "assert(hc:prune() == 0)\n"
        "local size, mtime, what = cache.stat(root .. '/lua/x.txt')\n"
        "assert(size == 3 and math.type(mtime) == 'float' and what == 'file')\n"
        "assert(select(3, cache.stat(root)) == 'directory')\n"
        "assert(cache.stat(root .. '/lua/missing') == nil)\n"
        "local j = cache.journal(root .. '/lua/j/log')\n"
        "j:append('one') j:append('two\\n') j:sync() j:close() j:close()\n"
        "assert(not pcall(j.append, j, 'three'))\n"
        "local text = assert(io.open(root .. '/lua/j/log')):read('a')\n"
        "assert(text == 'one\\ntwo\\n', text)\n"
        "local s = assert(io.open(root .. '/lua/stage', 'w')) s:write('S') s:close()\n"
        "cache.commit(root .. '/lua/stage', root .. '/lua/out/final')\n"
        "assert(assert(io.open(root .. '/lua/out/final')):read('a') == 'S')\n"
        "local ok, err = pcall(cache.commit, root .. '/lua/stage', root .. '/lua/out/final')\n"
        "assert(not ok and err.fs_error:find('^cannot move .*/lua/stage to .*/lua/out/final: No such file'), tostring(err))\n"
        "assert(tostring(err) == err.fs_error)");
    lua_ok(sb.buf);
    sb_release(&sb);
}

static lua_State *new_state(void)
{
    lua_State *s = luaL_newstate();
    memset(lua_getextraspace(s), 0, LUA_EXTRASPACE);   /* not a step coroutine (see state.c) */
    luaL_openlibs(s);
    luaL_requiref(s, "flow.cache", luaopen_flow_cache, 0);
    lua_pop(s, 1);
    if (luaL_dostring(s, prelude) != LUA_OK) {
        fprintf(stderr, "prelude: %s\n", lua_tostring(s, -1));
        exit(1);
    }
    return s;
}

int main(void)
{
    snprintf(root, sizeof root, "/tmp/flow-test-cache-XXXXXX");
    if (!mkdtemp(root)) { perror("mkdtemp"); return 1; }
    RUN(test_sha256_vectors);
    RUN(test_sha256_hex_round_trip);
    RUN(test_hash_file);
    RUN(test_tree_hash_format);
    RUN(test_tree_hash_changes);
    RUN(test_missing_path);
    RUN(test_cache_hit_reads_nothing);
    RUN(test_racy_entry_rehashed);
    RUN(test_whole_second_stamp_is_rehashed_within_its_second);
    RUN(test_save_load_round_trip);
    RUN(test_corrupt_lines_ignored);
    RUN(test_prune);
    RUN(test_journal);
    RUN(test_commit_file);
    RUN(test_commit_dir_over_dir);
    RUN(test_commit_types_differ);
    RUN(test_commit_failure_leaves_final);
    RUN(test_commit_across_file_systems);
    RUN(test_fsync_helpers);
    RUN(test_write_atomic_syncs_directory);

    L = new_state();
    RUN(test_lua_sha256);
    RUN(test_serialize_exact);
    RUN(test_serialize_numbers);
    RUN(test_serialize_strings);
    RUN(test_serialize_tables);
    RUN(test_serialize_refuses_what_would_not_read_back);
    RUN(test_serialize_deterministic);
    RUN(test_serialize_depth);
    RUN(test_serialize_errors);
    RUN(test_serialize_max);
    RUN(test_deserialize_errors);
    RUN(test_deserialize_sandbox);
    RUN(test_lua_hashes_and_journal);
    lua_close(L);

    rm_rf(root);
    return CHECK_DONE("cache");
}
