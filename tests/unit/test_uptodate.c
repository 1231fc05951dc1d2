/* test_uptodate.c — the engine's up-to-date check of steps: its
 * fingerprint is fingerprint.c's rule over the described parts plus the
 * files, inputs and outputs it finds; a step passes only with its record's
 * fingerprint and outputs; an input's hash comes only from a producer whose
 * record is this run's; a changed output or named file fails the check;
 * a memory output passes by where its value is kept; a step without a
 * record runs, with the fingerprint and the parts its record will keep. */
#include "check.h"
#include "hashcache.h"
#include "statestore.h"
#include "uptodate.h"
#include "util.h"

#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char root[64];
static char err[1024];

static struct fp_str S(const char *s) { return (struct fp_str){ s, strlen(s) }; }

/* step 0 "make": writes out.txt, names tool.sh; step 1 "use": reads its
 * output.  A step is decided once a run (its description is freed then):
 * each question below describes it afresh. */
static void describe_step(struct utd *u, size_t i)
{
    struct fp_kv params[] = { { S("lr"), S("aaaa") } };
    const char *files[] = { "tool.sh", "missing.py", "tool.sh" };
    const char *outs0[] = { "o" };
    struct utd_input in[] = { { S("o"), 0, NULL, NULL }, { S("raw"), UTD_NO_PRODUCER, NULL, "raw.txt" } };
    const char *outs1[] = { "p" };
    if (i == 0)
        utd_set_step(u, 0, &(struct utd_step){ .name = "make", .code = S("code0"),
                                               .outputs = { "o\0file\0out.txt", 14 }, .params = params, .n_params = 1,
                                               .files = files, .n_files = 3, .outputs_named = outs0, .n_outputs = 1 });
    else
        utd_set_step(u, 1, &(struct utd_step){ .name = "use", .code = S("code1"), .dist = S("dd"), .outputs = S("p"),
                                               .inputs = in, .n_inputs = 2, .outputs_named = outs1, .n_outputs = 1 });
}

static void describe(struct utd *u)
{
    describe_step(u, 0);
    describe_step(u, 1);
}

static enum utd_verdict decide(struct utd *u, size_t i)
{
    describe_step(u, i);
    return utd_decide(u, i);
}

static void record(struct state_store *st, const char *name, const char *fp, const char *dataset, const char *path)
{
    char hex[SHA256_HEX_SIZE];
    struct hashcache *hc = hashcache_load(".flow-hashes-scratch");
    enum hash_kind kind;
    CHECK(hashcache_hash(hc, path, hex, &kind, err, sizeof err) == 0);
    hashcache_free(hc);
    struct state_out out = { 'f', dataset, path, hex };
    CHECK(state_store_put(st, &(struct state_rec){ .name = name, .fp = fp, .body = "{}", .body_len = 2, .n_outs = 1,
                                                   .outs = &out }, err, sizeof err) == 0);
}

static void test_fingerprint_is_the_combine_rule(void)
{
    check_write_text("tool.sh", "echo hi\n");
    struct hashcache *hc = hashcache_load(".hashes");
    struct state_store *st = state_store_open("state.log", NULL, err, sizeof err);
    struct utd *u = utd_new(2, hc, st);
    describe(u);
    char got[SHA256_HEX_SIZE], want[SHA256_HEX_SIZE], tool[SHA256_HEX_SIZE];
    CHECK(utd_fingerprint(u, 0, got) == 0);
    sha256_hex("echo hi\n", 8, tool);
    struct fp_kv files[] = { { S("tool.sh"), S(tool) } };
    struct fp_kv params[] = { { S("lr"), S("aaaa") } };
    struct fp_parts p = { .code = S("code0"), .outputs = { "o\0file\0out.txt", 14 }, .files = files, .n_files = 1,
                          .params = params, .n_params = 1 };
    fp_combine(&p, want);
    CHECK_STR(got, want);
    /* a producer whose record is not this run's: cannot tell */
    CHECK(utd_fingerprint(u, 1, got) == 1);
    CHECK(utd_decide(u, 1) == UTD_CANNOT_TELL);
    utd_free(u);
    state_store_free(st);
    hashcache_free(hc);
}

/* The two steps' files as describe() names them, and a check of both on a
 * state store of its own. */
static struct utd *two_steps(const char *state_path, struct hashcache **hc, struct state_store **st)
{
    check_write_text("tool.sh", "echo hi\n");
    check_write_text("out.txt", "made\n");
    check_write_text("p.txt", "used\n");
    check_write_text("raw.txt", "raw\n");
    *hc = hashcache_load(".hashes");
    *st = state_store_open(state_path, NULL, err, sizeof err);
    struct utd *u = utd_new(2, *hc, *st);
    describe(u);
    return u;
}

static void test_passes_only_with_record_and_outputs(void)
{
    struct hashcache *hc;
    struct state_store *st;
    struct utd *u = two_steps("state2.log", &hc, &st);
    /* no record: it runs, with the fingerprint and the parts its record keeps */
    char fp0[SHA256_HEX_SIZE], fp1[SHA256_HEX_SIZE];
    CHECK(utd_fingerprint(u, 0, fp0) == 0);
    CHECK(utd_decide(u, 0) == UTD_NO_RECORD && !utd_passed(u, 0));
    CHECK(utd_decide(u, 0) == UTD_CANNOT_TELL);    /* asked once: its description is gone */
    char *fp, *parts;
    CHECK(utd_take_fingerprint(u, 0, &fp, &parts));
    CHECK_STR(fp, fp0);
    char outputs[SHA256_HEX_SIZE], tool[SHA256_HEX_SIZE], want[256];
    sha256_hex("o\0file\0out.txt", 14, outputs);
    sha256_hex("echo hi\n", 8, tool);
    snprintf(want, sizeof want, "{\"code\":\"code0\",\"outputs\":\"%.16s\",\"files\":{\"tool.sh\":\"%.16s\"},"
             "\"params\":{\"lr\":\"aaaa\"}}", outputs, tool);
    CHECK_STR(parts, want);
    free(fp);
    free(parts);
    CHECK(!utd_take_fingerprint(u, 0, &fp, &parts) && !fp && !parts);     /* handed over once */
    CHECK(utd_stats(u).no_record == 1);
    /* (a record put into a store that was empty, not by a step of the
     * check's: decide looks for it all the same) */
    record(st, "make", fp0, "o", "out.txt");
    CHECK(decide(u, 0) == UTD_UP_TO_DATE && utd_passed(u, 0));
    CHECK(utd_fingerprint(u, 1, fp1) == 0);        /* its producer is fresh now */
    record(st, "use", fp1, "p", "p.txt");
    CHECK(utd_decide(u, 1) == UTD_UP_TO_DATE);
    CHECK(utd_stats(u).passed == 2);
    utd_free(u);

    /* next run: a changed output, then a changed named file */
    u = utd_new(2, hc, st);
    check_write_text("out.txt", "changed\n");
    CHECK(decide(u, 0) == UTD_CANNOT_TELL && !utd_passed(u, 0));
    CHECK(decide(u, 1) == UTD_CANNOT_TELL);        /* its producer did not pass */
    check_write_text("out.txt", "made\n");
    check_write_text("tool.sh", "echo bye\n");
    CHECK(decide(u, 0) == UTD_CANNOT_TELL);
    check_write_text("tool.sh", "echo hi\n");
    CHECK(decide(u, 0) == UTD_UP_TO_DATE);
    check_write_text("raw.txt", "new raw\n");
    CHECK(decide(u, 1) == UTD_CANNOT_TELL);        /* an outside input changed */
    CHECK(utd_stats(u).undecided == 4);
    utd_free(u);
    state_store_free(st);
    hashcache_free(hc);
}

/* Runs at once share the store (a parallel sweep's trials): a producer's
 * record replaced by another run after this run marked it fresh no longer
 * speaks for its output here. */
static void test_a_record_another_run_replaced_is_not_trusted(void)
{
    struct hashcache *hc;
    struct state_store *st;
    struct utd *u = two_steps("state3.log", &hc, &st);
    char fp0[SHA256_HEX_SIZE], fp1[SHA256_HEX_SIZE];
    CHECK(utd_fingerprint(u, 0, fp0) == 0);
    record(st, "make", fp0, "o", "out.txt");
    utd_mark_fresh(u, 0, fp0);                     /* this run put it */
    CHECK(utd_fingerprint(u, 1, fp1) == 0);
    check_write_text("other.txt", "another run's\n");
    char other_fp[SHA256_HEX_SIZE];
    sha256_hex("another run", 11, other_fp);
    record(st, "make", other_fp, "o", "other.txt");  /* a run beside it put its own */
    CHECK(utd_fingerprint(u, 1, fp1) == 1);
    CHECK(utd_decide(u, 1) == UTD_CANNOT_TELL);
    utd_free(u);
    state_store_free(st);
    hashcache_free(hc);
}

/* Only a fingerprint of 64 lowercase hex digits makes a step fresh (the
 * check keeps its bytes): a record whose fingerprint is another text (short,
 * long, uppercase, with a stray byte) tells its consumers nothing, and the
 * same text in lowercase does. */
static void test_only_a_whole_fingerprint_makes_a_step_fresh(void)
{
    static const char *const bad[] = {
        "", "abc", "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcde",   /* 63 */
        "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0",          /* 65 */
        "0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF",
        "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdeg",
    };
    static const char good[] = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    for (size_t k = 0; k <= sizeof bad / sizeof *bad; k++) {
        const char *fp = k < sizeof bad / sizeof *bad ? bad[k] : good;
        struct hashcache *hc;
        struct state_store *st;
        struct utd *u = two_steps("state-fp.log", &hc, &st);
        record(st, "make", fp, "o", "out.txt");
        utd_mark_fresh(u, 0, fp);
        char fp1[SHA256_HEX_SIZE];
        int rc = utd_fingerprint(u, 1, fp1);
        CHECK(rc == (k < sizeof bad / sizeof *bad ? 1 : 0));    /* 1: an input's hash cannot be told */
        utd_free(u);
        state_store_free(st);
        hashcache_free(hc);
        unlink("state-fp.log");
    }
}

/* A memory output: inline in its record ('v', vouched for by the record's
 * checksum), cached in a file ('c', hashed like a file output), or of a
 * kind this check does not decide ('m' from before values said where they
 * are, 'u' a value that could not be cached). */
static bool passes_with_output(char kind, const char *path, const char *hash)
{
    struct hashcache *hc = hashcache_load(".hashes");
    struct state_store *st = state_store_open("state-mem.log", NULL, err, sizeof err);
    struct utd *u = utd_new(1, hc, st);
    const char *outs[] = { "v" };
    utd_set_step(u, 0, &(struct utd_step){ .name = "lua", .code = S("fn"), .outputs = S("v\0memory\0"),
                                           .outputs_named = outs, .n_outputs = 1 });
    char fp[SHA256_HEX_SIZE];
    CHECK(utd_fingerprint(u, 0, fp) == 0);
    struct state_out out = { kind, "v", path, hash };
    CHECK(state_store_put(st, &(struct state_rec){ .name = "lua", .fp = fp, .body = "{}", .body_len = 2, .n_outs = 1,
                                                   .outs = &out }, err, sizeof err) == 0);
    bool ok = utd_decide(u, 0) == UTD_UP_TO_DATE;
    utd_free(u);
    state_store_free(st);
    hashcache_free(hc);
    return ok;
}

static void test_memory_outputs(void)
{
    char h[SHA256_HEX_SIZE];
    sha256_hex("return 1", 8, h);
    CHECK(passes_with_output('v', "", h));
    CHECK(!passes_with_output('v', "", ""));           /* no hash: nothing a reader could use */
    CHECK(!passes_with_output('m', "", h));
    CHECK(!passes_with_output('u', "", ""));
    check_write_text("value.lua", "return 1");
    CHECK(passes_with_output('c', "value.lua", h));
    check_write_text("value.lua", "return 2");               /* edited behind flow's back */
    CHECK(!passes_with_output('c', "value.lua", h));
    unlink("value.lua");
    CHECK(!passes_with_output('c', "value.lua", h));
    CHECK(!passes_with_output('c', "", h));
}

/* Records for both steps, with the fingerprints the check computes. */
static void record_both(struct utd *u, struct state_store *st)
{
    char fp0[SHA256_HEX_SIZE], fp1[SHA256_HEX_SIZE];
    CHECK(utd_fingerprint(u, 0, fp0) == 0);
    record(st, "make", fp0, "o", "out.txt");
    utd_mark_fresh(u, 0, fp0);
    CHECK(utd_fingerprint(u, 1, fp1) == 0);
    record(st, "use", fp1, "p", "p.txt");
}

/* utd_decide_early: a step is decided as it is described when its
 * producers are fresh, and the scheduler's question later gets that
 * verdict; one whose producer has not passed, or without a record, waits
 * for the question; the counts and flags are the question's (a run that
 * stops before asking counts nothing); a keeper marked before its
 * description stays one. */
static void test_a_step_is_decided_early_once_its_producers_are_fresh(void)
{
    struct hashcache *hc;
    struct state_store *st;
    struct utd *u = two_steps("state-early.log", &hc, &st);
    CHECK(!utd_decide_early(u, 0));                /* no record: decided when asked */
    record_both(u, st);
    utd_free(u);

    /* the next run: both decided as described, producer first */
    u = utd_new(2, hc, st);
    describe_step(u, 1);
    CHECK(!utd_decide_early(u, 1));                /* its producer has not passed yet */
    describe_step(u, 0);
    CHECK(utd_decide_early(u, 0));
    CHECK(!utd_passed(u, 0) && utd_stats(u).passed == 0);   /* not asked yet */
    CHECK(utd_decide_early(u, 1));                 /* now it can be */
    check_write_text("out.txt", "changed after the check\n");   /* (asked later, the verdict stands) */
    CHECK(utd_decide(u, 0) == UTD_UP_TO_DATE && utd_passed(u, 0));
    CHECK(utd_decide(u, 1) == UTD_UP_TO_DATE);
    CHECK(utd_decide(u, 1) == UTD_CANNOT_TELL);    /* asked once */
    CHECK(utd_stats(u).passed == 2 && utd_stats(u).undecided == 0);
    utd_free(u);

    /* a producer that fails the check leaves its consumer to the question */
    u = utd_new(2, hc, st);
    describe_step(u, 0);
    CHECK(utd_decide_early(u, 0));
    describe_step(u, 1);
    CHECK(!utd_decide_early(u, 1));
    CHECK(utd_decide(u, 0) == UTD_CANNOT_TELL);
    check_write_text("out.txt", "made\n");
    utd_free(u);

    /* a keeper stays one when described after utd_keeps_values: its memory
     * output's record, which kept no value, does not stand */
    u = utd_new(1, hc, st);
    utd_keeps_values(u, 0);
    const char *outs[] = { "v" };
    utd_set_step(u, 0, &(struct utd_step){ .name = "keeper", .code = S("fn"), .outputs = S("v\0memory\0"),
                                           .outputs_named = outs, .n_outputs = 1 });
    char fp[SHA256_HEX_SIZE], h[SHA256_HEX_SIZE];
    CHECK(utd_fingerprint(u, 0, fp) == 0);
    sha256_hex("return 1", 8, h);
    struct state_out out = { 't', "v", "", h };      /* a value its run did not keep */
    CHECK(state_store_put(st, &(struct state_rec){ .name = "keeper", .fp = fp, .body = "{}", .body_len = 2,
                                                   .n_outs = 1, .outs = &out }, err, sizeof err) == 0);
    CHECK(utd_decide_early(u, 0));
    CHECK(utd_decide(u, 0) == UTD_CANNOT_TELL);
    utd_free(u);
    state_store_free(st);
    hashcache_free(hc);
}

/* With utd_early_begin the thread makes the same early decisions, in the
 * order the steps were described (producers first): a producer that passes
 * lets its consumer pass, one that fails leaves it to the question; a step
 * without a record is not queued; utd_early_end waits for them all, and
 * utd_free ends a thread never ended. */
static void test_early_decisions_on_their_thread(void)
{
    struct hashcache *hc;
    struct state_store *st;
    struct utd *u = two_steps("state-early-thread.log", &hc, &st);
    record_both(u, st);
    utd_free(u);

    for (int round = 0; round < 50; round++) {           /* (the thread's timing varies) */
        u = utd_new(2, hc, st);
        utd_early_begin(u);
        describe_step(u, 0);
        CHECK(!utd_decide_early(u, 0));                   /* queued: decided on the thread */
        describe_step(u, 1);
        CHECK(!utd_decide_early(u, 1));
        utd_early_end(u);
        CHECK(utd_decide(u, 0) == UTD_UP_TO_DATE && utd_decide(u, 1) == UTD_UP_TO_DATE);
        CHECK(utd_stats(u).passed == 2);
        utd_free(u);

        /* a producer that fails the check leaves its consumer to the question */
        check_write_text("out.txt", "changed\n");
        u = utd_new(2, hc, st);
        utd_early_begin(u);
        describe_step(u, 0);
        utd_decide_early(u, 0);
        describe_step(u, 1);
        utd_decide_early(u, 1);
        utd_early_end(u);
        CHECK(utd_decide(u, 0) == UTD_CANNOT_TELL);
        CHECK(decide(u, 1) == UTD_CANNOT_TELL);           /* asked: its producer did not pass */
        CHECK(utd_stats(u).undecided == 2);
        utd_free(u);
        check_write_text("out.txt", "made\n");
    }

    /* a chain of 3,000 steps, each reading the one before: all pass, the
     * thread sleeping and woken as the queue fills (ThreadSanitizer's case) */
    enum { N = 3000 };
    static char names[N][16];
    static const char *outs[] = { "v" };
    char h[SHA256_HEX_SIZE];
    sha256_hex("return 1", 8, h);
    hash_set_small_budget(SIZE_MAX);          /* (libmd's SHA-256: no libcrypto to load under TSan) */
    for (int pass = 0; pass < 2; pass++) {
        u = utd_new(N, hc, st);
        if (pass) utd_early_begin(u);
        for (size_t i = 0; i < N; i++) {
            snprintf(names[i], sizeof names[i], "c%zu", i);
            struct utd_input in = { S("v"), i - 1, NULL, NULL };
            utd_set_step(u, i, &(struct utd_step){ .name = names[i], .code = S("fn"), .outputs = S("v\0memory\0"),
                                                   .inputs = &in, .n_inputs = i > 0, .outputs_named = outs,
                                                   .n_outputs = 1 });
            if (pass) {
                utd_decide_early(u, i);
                continue;
            }
            char fp[SHA256_HEX_SIZE];
            CHECK(utd_fingerprint(u, i, fp) == 0);
            struct state_out out = { 'v', "v", "", h };
            CHECK(state_store_put(st, &(struct state_rec){ .name = names[i], .fp = fp, .body = "{}", .body_len = 2,
                                                           .n_outs = 1, .outs = &out }, err, sizeof err) == 0);
            utd_mark_fresh(u, i, fp);
        }
        if (pass) {
            utd_early_end(u);
            size_t passed = 0;
            for (size_t i = 0; i < N; i++) passed += utd_decide(u, i) == UTD_UP_TO_DATE;
            CHECK(passed == N);
        }
        utd_free(u);
    }

    /* no record: not queued, decided when asked; a thread left running is ended by utd_free */
    u = utd_new(2, hc, st);
    utd_early_begin(u);
    utd_set_step(u, 0, &(struct utd_step){ .name = "new", .code = S("c"), .outputs = S("o") });
    CHECK(!utd_decide_early(u, 0));
    CHECK(utd_decide(u, 0) == UTD_NO_RECORD);
    utd_free(u);
    state_store_free(st);
    hashcache_free(hc);
}

/* utd_mark_ran: a producer that ran in this run, its record still to come
 * (its outputs not yet flushed), gives its consumer the input hash its end
 * reported: the same fingerprint the record gives once put; nothing
 * without a hash, or for a value that could not be cached. */
static void test_a_producer_that_ran_speaks_before_its_record(void)
{
    struct hashcache *hc;
    struct state_store *st;
    struct utd *u = two_steps("state-ran.log", &hc, &st);
    char fp0[SHA256_HEX_SIZE], fp1_ran[SHA256_HEX_SIZE], fp1_rec[SHA256_HEX_SIZE], hex[SHA256_HEX_SIZE];
    CHECK(utd_fingerprint(u, 0, fp0) == 0);
    CHECK(utd_fingerprint(u, 1, fp1_ran) == 1);                 /* its producer has said nothing */
    enum hash_kind kind;
    CHECK(hashcache_hash(hc, "out.txt", hex, &kind, err, sizeof err) == 0);
    char *outs = xasprintf("{\"o\":{\"hash\":\"%s\",\"path\":\"out.txt\"}}", hex);
    utd_mark_ran(u, 0, outs);
    CHECK(utd_fingerprint(u, 1, fp1_ran) == 0);
    record(st, "make", fp0, "o", "out.txt");                   /* the record, once flushed */
    utd_mark_fresh(u, 0, fp0);
    CHECK(utd_fingerprint(u, 1, fp1_rec) == 0);
    CHECK(strcmp(fp1_ran, fp1_rec) == 0);
    utd_free(u);
    free(outs);

    u = utd_new(2, hc, st);
    describe(u);
    utd_mark_ran(u, 0, "{\"o\":{\"hash\":\"\",\"path\":\"out.txt\"}}");          /* no hash */
    CHECK(utd_fingerprint(u, 1, fp1_ran) == 1);
    utd_mark_ran(u, 0, "{\"o\":{\"hash\":\"ab\",\"uncacheable\":true}}");          /* not cached */
    CHECK(utd_fingerprint(u, 1, fp1_ran) == 1);
    utd_mark_ran(u, 0, "not json");
    CHECK(utd_fingerprint(u, 1, fp1_ran) == 1);
    utd_free(u);
    state_store_free(st);
    hashcache_free(hc);
}

int main(void)
{
    check_enter_scratch(root, sizeof root, "flow-test-uptodate");
    RUN(test_fingerprint_is_the_combine_rule);
    RUN(test_passes_only_with_record_and_outputs);
    RUN(test_memory_outputs);
    RUN(test_a_record_another_run_replaced_is_not_trusted);
    RUN(test_only_a_whole_fingerprint_makes_a_step_fresh);
    RUN(test_a_step_is_decided_early_once_its_producers_are_fresh);
    RUN(test_a_producer_that_ran_speaks_before_its_record);
    RUN(test_early_decisions_on_their_thread);
    check_leave_scratch(root);
    return CHECK_DONE("uptodate");
}
