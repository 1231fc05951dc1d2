/* test_preload.c — the state file and hash cache read ahead: handed over
 * when the file is as the thread found it, read again by the caller when it
 * changed, was replaced, or the working directory moved; another path is
 * not this preload's; each is handed out once; a missing file and a file
 * that is not a state file read as the run would read them; the state
 * comes with its records' files stat-ed ahead once the script has run,
 * which go with it when it does not stand. */
#include "check.h"
#include "hashcache.h"
#include "preload.h"
#include "stat_prefetch.h"
#include "statestore.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static char root[64];
static char err[1024];

static void append_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "a");
    fputs(text, f);
    fclose(f);
}

/* A state file with one record, and a hash cache with one entry. */
static void make_files(const char *state, const char *hashes)
{
    struct state_store *s = state_store_open(state, NULL, err, sizeof err);
    struct state_out out = { 'v', "d", "", "h" };
    CHECK(state_store_put(s, &(struct state_rec){ .name = "step", .fp = "fp1", .body = "{}", .body_len = 2,
                                                  .n_outs = 1, .outs = &out }, err, sizeof err) == 0);
    CHECK(state_store_save(s, err, sizeof err) == 0);
    state_store_free(s);
    check_write_text("f.txt", "hello\n");
    struct hashcache *hc = hashcache_load(hashes);
    char hex[SHA256_HEX_SIZE];
    enum hash_kind kind;
    CHECK(hashcache_hash(hc, "f.txt", hex, &kind, err, sizeof err) == 0);
    CHECK(hashcache_save(hc, err, sizeof err) == 0);
    hashcache_free(hc);
}

static void test_what_still_stands_is_handed_over_once(void)
{
    make_files("s1.log", "h1");
    struct preload *p = preload_start("s1.log", "h1");
    CHECK(p != NULL);
    CHECK(preload_take_state(p, "other.log", NULL, NULL) == NULL);     /* not this preload's: it stays */
    const char *warning = "unset";
    struct state_store *s = preload_take_state(p, "s1.log", &warning, NULL);
    CHECK(s && !warning && state_store_count(s) == 1);
    const struct state_rec *r = s ? state_store_get(s, "step") : NULL;
    CHECK(r && strcmp(r->fp, "fp1") == 0);
    CHECK(preload_take_state(p, "s1.log", NULL, NULL) == NULL);        /* once */
    CHECK(!preload_done(p));
    struct hashcache *hc = preload_take_hashes(p, "h1");
    CHECK(preload_done(p));
    CHECK(hc && hashcache_count(hc) == 1);
    CHECK(preload_take_hashes(p, "h1") == NULL);
    preload_free(p);
    state_store_free(s);
    hashcache_free(hc);
    preload_free(NULL);
    CHECK(preload_take_state(NULL, "s1.log", NULL, NULL) == NULL && preload_take_hashes(NULL, "h1") == NULL);
}

/* A file written after the thread read it (another run, before this one
 * took the lock) is read again by the caller. */
static void test_a_changed_file_is_read_again(void)
{
    make_files("s2.log", "h2");
    struct preload *p = preload_start("s2.log", "h2");
    hashcache_free(preload_take_hashes(p, "h2"));                 /* (waits for the thread: both are read) */
    append_text("s2.log", "x");                                   /* a torn record's first byte */
    CHECK(preload_take_state(p, "s2.log", NULL, NULL) == NULL);
    preload_free(p);

    make_files("s3.log", "h3");
    p = preload_start("s3.log", "h3");
    struct state_store *s = preload_take_state(p, "s3.log", NULL, NULL);
    CHECK(s != NULL);
    state_store_free(s);
    CHECK(rename("h1", "h3") == 0);                               /* replaced: another inode */
    CHECK(preload_take_hashes(p, "h3") == NULL);
    preload_free(p);
}

static void test_another_working_directory_reads_again(void)
{
    make_files("s4.log", "h4");
    struct preload *p = preload_start("s4.log", "h4");
    CHECK(mkdir("sub", 0755) == 0 && chdir("sub") == 0);
    make_files("s4.log", "h4");                                   /* the same names, other files */
    CHECK(preload_take_state(p, "s4.log", NULL, NULL) == NULL);
    CHECK(preload_take_hashes(p, "h4") == NULL);
    CHECK(chdir("..") == 0);
    preload_free(p);
}

/* As the run would read them: a missing state file is an empty store, one
 * that is not a state file comes with state_store_open's warning. */
static void test_missing_and_foreign_files(void)
{
    struct preload *p = preload_start("none.log", "no-hashes");
    const char *warning = "unset";
    struct state_store *s = preload_take_state(p, "none.log", &warning, NULL);
    CHECK(s && !warning && state_store_count(s) == 0);
    struct hashcache *hc = preload_take_hashes(p, "no-hashes");
    CHECK(hc && hashcache_count(hc) == 0);
    preload_free(p);
    state_store_free(s);
    hashcache_free(hc);

    check_write_text("foreign.log", "not a state file at all\n");
    p = preload_start("foreign.log", "no-hashes");
    s = preload_take_state(p, "foreign.log", &warning, NULL);
    CHECK(s && warning && strstr(warning, "not a flow state file"));
    state_store_free(s);
    preload_free(p);                                              /* the hash cache never asked for */
}

/* A state whose record has a file output, and the stat taken of it once
 * the script has run (preload_stat_outputs: before the thread has read the
 * state, or after): as stat(2) says, from the directory the preload began
 * in.  Not asked for, none is taken. */
static void test_the_state_comes_with_its_files_stat_ed(void)
{
    check_write_text("out.txt", "an output\n");
    struct state_store *w = state_store_open("s5.log", NULL, err, sizeof err);
    struct state_out out = { 'f', "d", "out.txt", "h" };
    CHECK(state_store_put(w, &(struct state_rec){ .name = "step", .fp = "fp1", .body = "{}", .body_len = 2,
                                                  .n_outs = 1, .outs = &out }, err, sizeof err) == 0);
    CHECK(state_store_save(w, err, sizeof err) == 0);
    state_store_free(w);
    struct stat want;
    CHECK(stat("out.txt", &want) == 0);

    for (int when = 0; when < 3; when++) {        /* asked at once, after the read, never */
        struct preload *p = preload_start("s5.log", "h5");
        if (when == 0) preload_stat_outputs(p);
        if (when == 1) {
            preload_wait(p);
            preload_stat_outputs(p);
            preload_stat_outputs(p);                                /* (once is enough) */
        }
        struct stat_prefetch *ahead = NULL;
        struct state_store *s = preload_take_state(p, "s5.log", NULL, &ahead);
        CHECK(s != NULL && (ahead != NULL) == (when < 2));
        if (ahead) {
            struct file_stamp stamp, expect = file_stamp_of(&want);
            mode_t mode = 0;
            bool got = false;
            for (int i = 0; i < 10000 && !(got = stat_prefetch_take(ahead, 0, 0, &stamp, &mode)); i++)
                nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
            CHECK(got && file_stamp_equal(&stamp, &expect) && mode == want.st_mode);
        }
        stat_prefetch_stop(ahead);                                  /* (before the store it reads) */
        state_store_free(s);
        preload_stat_outputs(p);                                    /* taken: nothing to start */
        preload_free(p);
    }

    /* a state that does not stand: its stats are stopped with it */
    struct preload *p = preload_start("s5.log", "h5");
    preload_stat_outputs(p);
    preload_wait(p);
    append_text("s5.log", "x");
    struct stat_prefetch *ahead = NULL;
    CHECK(preload_take_state(p, "s5.log", NULL, &ahead) == NULL && ahead == NULL);
    preload_free(p);
    /* and one never taken, with the preload */
    p = preload_start("s5.log", "h5");
    preload_stat_outputs(p);
    preload_free(p);
    preload_stat_outputs(NULL);
}

int main(void)
{
    check_enter_scratch(root, sizeof root, "flow-test-preload");
    RUN(test_what_still_stands_is_handed_over_once);
    RUN(test_a_changed_file_is_read_again);
    RUN(test_another_working_directory_reads_again);
    RUN(test_missing_and_foreign_files);
    RUN(test_the_state_comes_with_its_files_stat_ed);
    check_leave_scratch(root);
    return CHECK_DONE("preload");
}
