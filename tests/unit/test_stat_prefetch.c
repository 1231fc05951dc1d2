/* test_stat_prefetch.c — the up-to-date check's stats taken ahead: each
 * record's file outputs (and only those) stat-ed as stat(2) says, handed out
 * once and only while fresh; a file that cannot be stat-ed left to the caller; a stop while the
 * thread runs; and the check's verdicts the same with the prefetch as
 * without it. */
#include "check.h"
#include "hashcache.h"
#include "stat_prefetch.h"
#include "statestore.h"
#include "uptodate.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static char root[64];
static char err[1024];

static void put(struct state_store *st, const char *name, struct state_out *outs, size_t n)
{
    CHECK(state_store_put(st, &(struct state_rec){ .name = name, .fp = "fp", .body = "{}", .body_len = 2,
                                                   .n_outs = n, .outs = outs }, err, sizeof err) == 0);
}

/* What stat_prefetch_take hands out. */
struct taken {
    struct file_stamp stamp;
    mode_t mode;
};

static bool take(struct stat_prefetch *p, size_t slot, size_t k, struct taken *t)
{
    return stat_prefetch_take(p, slot, k, &t->stamp, &t->mode);
}

/* What output k of slot's record was stat-ed as, once the thread has come to
 * it (false after 10 s: it never did, or it has nothing for that output). */
static bool take_waiting(struct stat_prefetch *p, size_t slot, size_t k, struct taken *t)
{
    for (int i = 0; i < 10000; i++) {
        if (take(p, slot, k, t)) return true;
        nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
    }
    return false;
}

/* What stat(2) says of the same file. */
static bool same_stat(const struct taken *t, const struct stat *st)
{
    struct file_stamp want = file_stamp_of(st);
    return file_stamp_equal(&t->stamp, &want) && t->mode == st->st_mode;
}

static void test_file_outputs_are_stat_ed_once(void)
{
    check_write_text("a.txt", "aaa\n");
    check_write_text("b.txt", "bbbbbb\n");
    struct state_store *st = state_store_open("state1.log", NULL, err, sizeof err);
    put(st, "mem", (struct state_out[]){ { 'v', "m", "", "h1" } }, 1);
    put(st, "files", (struct state_out[]){ { 'v', "m2", "", "h2" }, { 'f', "a", "a.txt", "h3" },
                                           { 'f', "gone", "missing.txt", "h4" }, { 'c', "b", "b.txt", "h5" } }, 4);
    size_t mem = state_store_slot(st, "mem"), files = state_store_slot(st, "files");
    struct stat want_a, want_b;
    struct taken got;
    CHECK(stat("a.txt", &want_a) == 0 && stat("b.txt", &want_b) == 0);

    struct stat_prefetch *p = stat_prefetch_start(st);
    CHECK(p != NULL);
    CHECK(take_waiting(p, files, 3, &got) && same_stat(&got, &want_b));    /* a cached value's file: 'c' */
    CHECK(!take(p, files, 3, &got));                                       /* once */
    CHECK(take(p, files, 1, &got) && same_stat(&got, &want_a));
    CHECK(!take(p, files, 2, &got));                                       /* missing: the caller's */
    CHECK(!take(p, files, 0, &got));                                       /* a value: nothing to stat */
    CHECK(!take(p, mem, 0, &got));
    CHECK(!take(p, files, 4, &got));                                       /* no such output */
    CHECK(!take(p, STATE_STORE_NO_SLOT, 0, &got));
    stat_prefetch_stop(p);
    stat_prefetch_stop(NULL);
    CHECK(!take(NULL, files, 1, &got));

    /* a stat more than 0.5 s old is the caller's to take again */
    p = stat_prefetch_start(st);
    struct taken first;
    CHECK(take_waiting(p, files, 3, &first));
    nanosleep(&(struct timespec){ 0, 650000000 }, NULL);
    CHECK(!take(p, files, 1, &got));
    stat_prefetch_stop(p);

    /* paths are the start's working directory's, whatever chdir comes after
     * (the preload starts it before the run changes directory) */
    CHECK(mkdir("elsewhere", 0755) == 0);
    check_write_text("elsewhere/a.txt", "another file of the same name\n");
    p = stat_prefetch_start(st);
    CHECK(chdir("elsewhere") == 0);
    CHECK(take_waiting(p, files, 1, &got) && same_stat(&got, &want_a));
    CHECK(chdir("..") == 0);
    stat_prefetch_stop(p);

    /* a store without file outputs, or without records: nothing to start */
    struct state_store *empty = state_store_open("state-empty.log", NULL, err, sizeof err);
    CHECK(stat_prefetch_start(empty) == NULL);
    put(empty, "mem", (struct state_out[]){ { 'v', "m", "", "h1" } }, 1);
    p = stat_prefetch_start(empty);                                        /* (a thread that finds nothing) */
    CHECK(!take(p, 0, 0, &got));
    stat_prefetch_stop(p);
    state_store_free(empty);
    state_store_free(st);
}

/* Stopped while it runs: it ends where it is (ASan/TSan would see a use of
 * the freed state). */
static void test_a_stop_while_it_runs(void)
{
    struct state_store *st = state_store_open("state2.log", NULL, err, sizeof err);
    char name[32];
    for (int i = 0; i < 20000; i++) {
        snprintf(name, sizeof name, "s%d", i);
        put(st, name, (struct state_out[]){ { 'f', "d", "a.txt", "h" } }, 1);
    }
    for (int i = 0; i < 20; i++) stat_prefetch_stop(stat_prefetch_start(st));
    state_store_free(st);
}

static void describe_two(struct utd *u)
{
    static const char *named[] = { "o" };
    for (size_t i = 0; i < 2; i++)
        utd_set_step(u, i, &(struct utd_step){ .name = i ? "b" : "a", .code = { "c", 1 }, .outputs = { "o", 1 },
                                               .outputs_named = named, .n_outputs = 1 });
}

/* The check with its outputs stat-ed ahead passes what it passes without,
 * fails a step whose output is not as its record says, and reads no file
 * the hash cache vouches for (a prefetched stat unlike stat(2)'s would
 * send it to read the file again). */
static void test_the_check_decides_the_same(void)
{
    check_write_text("out.txt", "made\n");
    check_write_text("out2.txt", "made too\n");
    /* the hash cache trusts no entry of a file changed as it was hashed (its clock is coarse) */
    nanosleep(&(struct timespec){ 0, 50000000 }, NULL);
    struct hashcache *hc = hashcache_load(".hashes");
    struct state_store *st = state_store_open("state3.log", NULL, err, sizeof err);
    char hex[SHA256_HEX_SIZE], hex2[SHA256_HEX_SIZE], fp[SHA256_HEX_SIZE];
    enum hash_kind kind;
    CHECK(hashcache_hash(hc, "out.txt", hex, &kind, err, sizeof err) == 0);
    CHECK(hashcache_hash(hc, "out2.txt", hex2, &kind, err, sizeof err) == 0);
    struct utd *u = utd_new(2, hc, st);
    describe_two(u);
    CHECK(utd_fingerprint(u, 0, fp) == 0);
    utd_free(u);
    CHECK(state_store_put(st, &(struct state_rec){ .name = "a", .fp = fp, .body = "{}", .body_len = 2, .n_outs = 1,
                                                   .outs = (struct state_out[]){ { 'f', "o", "out.txt", hex } } },
                          err, sizeof err) == 0);
    CHECK(state_store_put(st, &(struct state_rec){ .name = "b", .fp = fp, .body = "{}", .body_len = 2, .n_outs = 1,
                                                   .outs = (struct state_out[]){ { 'f', "o", "out2.txt", hex } } },
                          err, sizeof err) == 0);                         /* not out2.txt's content */
    size_t read_before = hashcache_files_read(hc);
    for (int prefetch = 0; prefetch < 2; prefetch++) {
        u = utd_new(2, hc, st);
        describe_two(u);
        if (prefetch) {
            utd_prefetch_outputs(u);
            nanosleep(&(struct timespec){ 0, 20000000 }, NULL);   /* (usually done with two records by then) */
        }
        CHECK(utd_decide(u, 0) == UTD_UP_TO_DATE);
        CHECK(utd_decide(u, 1) == UTD_CANNOT_TELL);
        utd_prefetch_stop(u);
        utd_free(u);
    }
    CHECK(hashcache_files_read(hc) == read_before);
    state_store_free(st);
    hashcache_free(hc);
}

int main(void)
{
    check_enter_scratch(root, sizeof root, "flow-test-prefetch");
    RUN(test_file_outputs_are_stat_ed_once);
    RUN(test_a_stop_while_it_runs);
    RUN(test_the_check_decides_the_same);
    check_leave_scratch(root);
    return CHECK_DONE("stat_prefetch");
}
