/* test_statestore.c — the step state file: records survive a save and a
 * reopen, a later put replaces an earlier one, a torn tail (a kill
 * mid-append) and a damaged record are dropped without losing the others,
 * and superseded records are compacted away.  A record the file could not
 * hold (no name, too large) is refused by put instead of aborting or
 * hiding the records after it.  A step's record made by step_record_put (the
 * engine's and the stdlib's one rule) has the kinds, paths and body the
 * stdlib reads back.  A save cut short (a full disk) leaves the next save to
 * rewrite the file, never to append after the torn record.  A run's store
 * writes records as they come: whole ones, read back (and CRC-checked) when
 * their body is asked for or the file rewritten, left behind by a process
 * that ends without saving, and never appended at an end that another
 * writer has moved. */
#include "check.h"
#include "statestore.h"
#include "step_record.h"
#include "util.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <errno.h>
#include <unistd.h>

static char root[64];
static char err[1024];

static void put_step(struct state_store *s, const char *name, const char *fp, double time)
{
    struct state_out outs[2] = { { 'f', "model", ".flow/data/model", "abc123" }, { 'm', "rows", "", "def456" } };
    struct state_rec r = { .name = name, .fp = fp, .body = "{\"parts\":{}}", .body_len = 12, .time = time,
                           .n_outs = 2, .outs = outs };
    CHECK(state_store_put(s, &r, err, sizeof err) == 0);
}

/* The record's body, never NULL (a test fails instead). */
static const char *body_of(struct state_store *s, const struct state_rec *r)
{
    size_t len = 0;
    const char *b = state_store_body(s, r, &len);
    CHECK(b != NULL && len == r->body_len);
    return b ? b : "";
}

static off_t file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? st.st_size : -1;
}

static struct state_store *reopen(const char *path, const char **warning)
{
    struct state_store *s = state_store_open(path, warning, err, sizeof err);
    CHECK(s != NULL);
    return s;
}

static void test_round_trip(void)
{
    const char *w;
    struct state_store *s = reopen("rt.log", &w);
    CHECK(w == NULL);
    CHECK(state_store_count(s) == 0);
    put_step(s, "train", "fp1", 10.5);
    put_step(s, "split", "fp2", 11);
    CHECK(state_store_save(s, err, sizeof err) == 0);
    state_store_free(s);
    s = reopen("rt.log", &w);
    CHECK(w == NULL);
    CHECK(state_store_count(s) == 2);
    const struct state_rec *r = state_store_get(s, "train");
    CHECK(r != NULL);
    if (r) {
        CHECK_STR(r->fp, "fp1");
        CHECK(r->time == 10.5);
        CHECK(r->body_len == 12);
        CHECK(r->n_outs == 2);
        CHECK(r->outs[0].kind == 'f');
        CHECK_STR(r->outs[0].dataset, "model");
        CHECK_STR(r->outs[0].path, ".flow/data/model");
        CHECK_STR(r->outs[1].hash, "def456");
    }
    put_step(s, "train", "fp3", 12);              /* replaces, appended */
    off_t before = file_size("rt.log");
    CHECK(state_store_save(s, err, sizeof err) == 0);
    CHECK(file_size("rt.log") > before);
    state_store_free(s);
    s = reopen("rt.log", NULL);
    r = state_store_get(s, "train");
    CHECK(r && strcmp(r->fp, "fp3") == 0);
    CHECK(state_store_count(s) == 2);
    state_store_free(s);
}

static void test_torn_tail_is_ignored(void)
{
    struct state_store *s = reopen("torn.log", NULL);
    put_step(s, "a", "fpa", 1);
    CHECK(state_store_save(s, err, sizeof err) == 0);
    put_step(s, "b", "fpb", 2);
    CHECK(state_store_save(s, err, sizeof err) == 0);
    state_store_free(s);
    off_t full = file_size("torn.log");
    CHECK(truncate("torn.log", full - 7) == 0);     /* b's record cut short */
    s = reopen("torn.log", NULL);
    CHECK(state_store_get(s, "a") != NULL);
    CHECK(state_store_get(s, "b") == NULL);
    CHECK(state_store_stats(s).torn_bytes > 0);
    put_step(s, "c", "fpc", 3);                     /* the next save rewrites the tail away */
    CHECK(state_store_save(s, err, sizeof err) == 0);
    state_store_free(s);
    s = reopen("torn.log", NULL);
    CHECK(state_store_stats(s).torn_bytes == 0);
    CHECK(state_store_get(s, "a") && state_store_get(s, "c"));
    state_store_free(s);
}

static void test_damaged_record_is_dropped(void)
{
    struct state_store *s = reopen("dmg.log", NULL);
    put_step(s, "first", "fp-one", 1);
    put_step(s, "second", "fp-two", 2);
    CHECK(state_store_save(s, err, sizeof err) == 0);
    state_store_free(s);
    size_t len;
    char *d = read_file("dmg.log", &len);
    char *at = d ? memmem(d, len, "fp-one", 6) : NULL;
    CHECK(at != NULL);
    if (at) at[3] = 'X';                              /* same length: only the checksum tells */
    int fd = open("dmg.log", O_WRONLY | O_TRUNC);
    CHECK(fd >= 0 && write_all(fd, d, len) == 0);
    if (fd >= 0) close(fd);
    free(d);
    s = reopen("dmg.log", NULL);
    CHECK(state_store_get(s, "first") == NULL);
    CHECK(state_store_get(s, "second") != NULL);
    CHECK(state_store_stats(s).damaged == 1);
    state_store_free(s);
}

static void test_not_a_state_file(void)
{
    int fd = open("junk.log", O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0 && write_all(fd, "{\"version\":1}", 13) == 0);
    if (fd >= 0) close(fd);
    const char *w;
    struct state_store *s = reopen("junk.log", &w);
    CHECK(w != NULL);
    CHECK(state_store_count(s) == 0);
    put_step(s, "x", "fpx", 1);
    CHECK(state_store_save(s, err, sizeof err) == 0);
    state_store_free(s);
    s = reopen("junk.log", &w);
    CHECK(w == NULL && state_store_get(s, "x") != NULL);
    state_store_free(s);
}

static void test_superseded_records_are_compacted(void)
{
    struct state_store *s = reopen("cmp.log", NULL);
    char name[32];
    for (int i = 0; i < 100; i++) { snprintf(name, sizeof name, "s%d", i); put_step(s, name, "v0", 1); }
    CHECK(state_store_save(s, err, sizeof err) == 0);
    off_t one = file_size("cmp.log");
    for (int round = 1; round <= 5; round++) {
        for (int i = 0; i < 100; i++) { snprintf(name, sizeof name, "s%d", i); put_step(s, name, "v1", round + 1); }
        CHECK(state_store_save(s, err, sizeof err) == 0);
    }
    CHECK(file_size("cmp.log") <= 2 * one);        /* never more than twice the live records */
    state_store_free(s);
    s = reopen("cmp.log", NULL);
    CHECK(state_store_count(s) == 100);
    CHECK(state_store_get(s, "s42") && strcmp(state_store_get(s, "s42")->fp, "v1") == 0);
    state_store_free(s);
}

/* A put replaces a step's record whatever its time; reading the file back,
 * a later record replaces an earlier one only when it is not older (as
 * journals fold).  A step keeps its slot through both, and a name with no
 * record has none.  (Ten other steps keep the file from being compacted.) */
static void test_the_newest_record_wins_and_keeps_its_slot(void)
{
    struct state_store *s = reopen("newest.log", NULL);
    char name[32];
    for (int i = 0; i < 10; i++) { snprintf(name, sizeof name, "s%d", i); put_step(s, name, "v", 1); }
    put_step(s, "a", "new", 5);
    put_step(s, "b", "b1", 1);
    CHECK(state_store_save(s, err, sizeof err) == 0);
    size_t slot = state_store_slot(s, "a");
    CHECK(slot != STATE_STORE_NO_SLOT && state_store_at(s, slot) == state_store_get(s, "a"));
    put_step(s, "a", "old", 3);                  /* a put replaces */
    CHECK(state_store_slot(s, "a") == slot && strcmp(state_store_at(s, slot)->fp, "old") == 0);
    put_step(s, "b", "b2", 2);
    CHECK(state_store_slot(s, "nobody") == STATE_STORE_NO_SLOT);
    CHECK(state_store_save(s, err, sizeof err) == 0);
    state_store_free(s);
    s = reopen("newest.log", NULL);              /* the file: a@5 and b@1, then a@3 and b@2 */
    CHECK(state_store_count(s) == 12);
    CHECK(state_store_get(s, "a") && strcmp(state_store_get(s, "a")->fp, "new") == 0);
    CHECK(state_store_get(s, "b") && strcmp(state_store_get(s, "b")->fp, "b2") == 0);
    state_store_free(s);
}

static void test_a_link_is_not_read_and_is_replaced(void)
{
    int fd = open("victim", O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0 && write_all(fd, "precious", 8) == 0);
    if (fd >= 0) close(fd);
    CHECK(symlink("victim", "link.log") == 0);
    const char *w;
    struct state_store *s = reopen("link.log", &w);
    CHECK(w != NULL);
    put_step(s, "x", "fpx", 1);
    CHECK(state_store_save(s, err, sizeof err) == 0);
    state_store_free(s);
    char *v = read_file("victim", NULL);
    CHECK_STR(v, "precious");
    free(v);
    struct stat st;
    CHECK(lstat("link.log", &st) == 0 && S_ISREG(st.st_mode));
}

static void test_an_empty_name_is_refused(void)
{
    struct state_store *s = reopen("empty.log", NULL);
    struct state_rec r = { .name = "", .fp = "fp", .body = "", .body_len = 0 };
    err[0] = '\0';
    CHECK(state_store_put(s, &r, err, sizeof err) == -1);     /* was abort(): decode rejects it */
    CHECK_CONTAINS(err, "name");
    CHECK(state_store_count(s) == 0);
    put_step(s, "ok", "fpok", 1);
    CHECK(state_store_save(s, err, sizeof err) == 0);
    state_store_free(s);
    s = reopen("empty.log", NULL);
    CHECK(state_store_count(s) == 1 && state_store_get(s, "ok") != NULL);
    state_store_free(s);
}

static void test_an_oversize_record_is_refused(void)
{
    struct state_store *s = reopen("big.log", NULL);
    put_step(s, "before", "fp0", 1);
    size_t big = STATE_STORE_MAX_RECORD + 1;
    char *body = xmalloc(big);
    memset(body, 'x', big);
    struct state_rec r = { .name = "huge", .fp = "fp1", .body = body, .body_len = big, .time = 2 };
    err[0] = '\0';
    CHECK(state_store_put(s, &r, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "too large");
    CHECK(state_store_get(s, "huge") == NULL);
    /* Just under the limit with the rest of the record: the body alone fits, the record does not. */
    r.body_len = STATE_STORE_MAX_RECORD - 8;
    CHECK(state_store_put(s, &r, err, sizeof err) == -1);
    struct state_out o = { 'f', "d", "p", "h" };
    struct state_rec many = { .name = "wide", .fp = "fp", .body = "", .n_outs = STATE_STORE_MAX_RECORD / 8,
                              .outs = &o };   /* refused on the count before any output is read */
    CHECK(state_store_put(s, &many, err, sizeof err) == -1);
    free(body);
    put_step(s, "after", "fp2", 3);
    CHECK(state_store_save(s, err, sizeof err) == 0);
    state_store_free(s);
    s = reopen("big.log", NULL);                  /* an oversize frame would end the scan as a torn tail */
    CHECK(state_store_stats(s).torn_bytes == 0);
    CHECK(state_store_get(s, "before") != NULL);
    CHECK(state_store_get(s, "after") != NULL);
    CHECK(state_store_get(s, "huge") == NULL);
    CHECK(state_store_count(s) == 2);
    put_step(s, "later", "fp3", 4);                 /* appended after the refused put: still read */
    CHECK(state_store_save(s, err, sizeof err) == 0);
    state_store_free(s);
    s = reopen("big.log", NULL);
    CHECK(state_store_count(s) == 3 && state_store_get(s, "later") != NULL);
    state_store_free(s);
}

static void test_a_record_at_the_limit_is_kept(void)
{
    struct state_store *s = reopen("edge.log", NULL);
    /* payload: f64, name "e" (4+1+1), fp "f" (4+1+1), body (4+len+1), u32 n = 0 */
    size_t blen = STATE_STORE_MAX_RECORD - (8 + 6 + 6 + 5 + 4);
    char *body = xmalloc(blen);
    memset(body, 'y', blen);
    struct state_rec r = { .name = "e", .fp = "f", .body = body, .body_len = blen, .time = 1 };
    CHECK(state_store_put(s, &r, err, sizeof err) == 0);
    r.body_len++;
    CHECK(state_store_put(s, &r, err, sizeof err) == -1);
    put_step(s, "next", "fpn", 2);
    CHECK(state_store_save(s, err, sizeof err) == 0);
    state_store_free(s);
    free(body);
    s = reopen("edge.log", NULL);
    const struct state_rec *got = state_store_get(s, "e");
    CHECK(got && got->body_len == blen);
    CHECK(state_store_get(s, "next") != NULL);
    CHECK(state_store_stats(s).torn_bytes == 0);
    state_store_free(s);
}

static const struct state_out *out_named(const struct state_rec *r, const char *dataset)
{
    for (size_t k = 0; r && k < r->n_outs; k++)
        if (strcmp(r->outs[k].dataset, dataset) == 0) return &r->outs[k];
    return NULL;
}

/* A record whose outputs come as fields (a Lua step's body in C) is the
 * record its text gives; under FLOW_DEBUG_RECORD_FIELDS (set for this whole
 * program, as t_outputs.sh sets it for a run) fields that say otherwise
 * than the text are refused. */
static void test_a_step_record_from_its_fields(void)
{
    const char *w;
    CHECK(mkdir_p(".flow/cache", 0755) == 0);
    struct state_store *s = reopen(".flow/cache/fields.log", &w);
    const char *json = "{\"a\":{\"hash\":\"h1\",\"value\":\"return 1\"},\"b\":{\"hash\":\"h2\",\"recompute\":true}}";
    struct state_out outs[] = { { 'v', "a", "", "h1" }, { 't', "b", "", "h2" } };
    struct step_record rec = { .name = "text", .fp = "fp", .time = 1, .parts_json = "{\"code\":\"c\"}",
                               .outputs_json = json };
    CHECK(step_record_put(s, &rec, err, sizeof err) == 0);
    rec.name = "fields";
    rec.outs = outs;
    rec.n_outs = 2;
    CHECK(step_record_put(s, &rec, err, sizeof err) == 0);
    const struct state_rec *t = state_store_get(s, "text"), *f = state_store_get(s, "fields");
    CHECK(t && f && f->n_outs == 2 && t->n_outs == 2);
    for (size_t k = 0; t && f && k < 2; k++)
        CHECK(f->outs[k].kind == t->outs[k].kind && strcmp(f->outs[k].dataset, t->outs[k].dataset) == 0 &&
              strcmp(f->outs[k].path, t->outs[k].path) == 0 && strcmp(f->outs[k].hash, t->outs[k].hash) == 0);
    char *tb = t ? xstrndup(body_of(s, t), t->body_len) : NULL;
    CHECK(tb && f && f->body_len == t->body_len && memcmp(body_of(s, f), tb, f->body_len) == 0);
    free(tb);
    outs[1].hash = "h3";                         /* not what the text says */
    rec.name = "wrong";
    CHECK(step_record_put(s, &rec, err, sizeof err) == -1 && strstr(err, "not those of its output records") &&
          !state_store_get(s, "wrong"));
    state_store_free(s);
}

static void test_a_step_record_from_its_json(void)
{
    const char *w;
    CHECK(mkdir_p(".flow/cache", 0755) == 0);             /* cached values: values/ beside the file */
    struct state_store *s = reopen(".flow/cache/steprec.log", &w);
    struct step_record rec = {
        .name = "train", .fp = "fp1", .time = 12.25, .parts_json = "{\"code\":\"ab\"}",
        .outputs_json = "{\"model\":{\"hash\":\"h1\",\"path\":\"out/model.pt\"},"
                        "\"rows\":{\"hash\":\"h2\",\"value\":\"return 3\"},"
                        "\"big\":{\"cached\":true,\"hash\":\"h3\"},"
                        "\"sock\":{\"uncacheable\":\"a userdata\"},"
                        "\"gone\":{\"hash\":\"h5\"}}",
        .metrics_json = "{\"values\":{\"loss\":0.5}}",
    };
    CHECK(step_record_put(s, &rec, err, sizeof err) == 0);
    const struct state_rec *r = state_store_get(s, "train");
    CHECK(r && r->n_outs == 5 && r->time == 12.25 && strcmp(r->fp, "fp1") == 0);
    const struct state_out *o = out_named(r, "model");
    CHECK(o && o->kind == 'f' && strcmp(o->path, "out/model.pt") == 0 && strcmp(o->hash, "h1") == 0);
    o = out_named(r, "rows");
    CHECK(o && o->kind == 'v' && strcmp(o->path, "") == 0 && strcmp(o->hash, "h2") == 0);
    o = out_named(r, "big");
    CHECK(o && o->kind == 'c' && strcmp(o->path, ".flow/cache/values/h3") == 0);
    o = out_named(r, "sock");
    CHECK(o && o->kind == 'u' && strcmp(o->hash, "") == 0);
    o = out_named(r, "gone");
    CHECK(o && o->kind == 'm');
    /* a memory value among them: the output records are in the body */
    const char *body = r ? body_of(s, r) : NULL;
    CHECK(body && strncmp(body, "{\"parts\":{\"code\":\"ab\"},\"outputs\":{\"model\"", 40) == 0);
    CHECK(body && strstr(body, "},\"metrics\":{\"values\":{\"loss\":0.5}}}") != NULL);

    /* files only: the record's own fields say it all */
    rec.name = "fit";
    rec.outputs_json = "{\"model\":{\"hash\":\"h1\",\"path\":\"out/model.pt\"}}";
    rec.metrics_json = NULL;
    CHECK(step_record_put(s, &rec, err, sizeof err) == 0);
    r = state_store_get(s, "fit");
    CHECK(r && r->body_len == strlen("{\"parts\":{\"code\":\"ab\"}}") &&
          memcmp(body_of(s, r), "{\"parts\":{\"code\":\"ab\"}}", r->body_len) == 0);

    /* more outputs than step_record_put keeps on its stack: each one read */
    char many[1024] = "{";
    for (int k = 0; k < 12; k++)
        snprintf(many + strlen(many), sizeof many - strlen(many), "%s\"o%d\":{\"hash\":\"k%d\"%s}", k ? "," : "", k, k,
                 k % 2 ? ",\"cached\":true" : ",\"value\":\"1\"");
    strcat(many, "}");
    rec.name = "wide";
    rec.outputs_json = many;
    CHECK(step_record_put(s, &rec, err, sizeof err) == 0);
    r = state_store_get(s, "wide");
    CHECK(r && r->n_outs == 12);
    o = out_named(r, "o11");
    CHECK(o && o->kind == 'c' && strcmp(o->path, ".flow/cache/values/k11") == 0 && strcmp(o->hash, "k11") == 0);
    o = out_named(r, "o10");
    CHECK(o && o->kind == 'v' && strcmp(o->path, "") == 0 && strcmp(o->hash, "k10") == 0);

    /* no outputs, no parts */
    rec.name = "noop";
    rec.outputs_json = rec.parts_json = NULL;
    CHECK(step_record_put(s, &rec, err, sizeof err) == 0);
    r = state_store_get(s, "noop");
    CHECK(r && r->n_outs == 0 && r->body_len == 2 && memcmp(body_of(s, r), "{}", 2) == 0);

    /* not a record: refused with a message, the store as it was */
    size_t before = state_store_count(s);
    rec.name = "bad";
    rec.outputs_json = "[1,2]";
    CHECK(step_record_put(s, &rec, err, sizeof err) == -1 && strstr(err, "step 'bad'") != NULL);
    rec.outputs_json = "{\"x\":3}";
    CHECK(step_record_put(s, &rec, err, sizeof err) == -1);
    rec.outputs_json = "{\"x\":";
    CHECK(step_record_put(s, &rec, err, sizeof err) == -1);
    CHECK(state_store_count(s) == before && state_store_get(s, "bad") == NULL);
    CHECK(state_store_unsaved(s));
    CHECK(state_store_save(s, err, sizeof err) == 0);
    CHECK(!state_store_unsaved(s));
    state_store_free(s);
}

/* Puts step_<i> for i = 0, every, 2 * every, ... below n, each with the
 * 64-digit fingerprint i + fp_offset and the time i + time_offset. */
static void put_numbered(struct state_store *s, int n, int every, int fp_offset, int time_offset)
{
    char name[32], fp[80];
    for (int i = 0; i < n; i += every) {
        snprintf(name, sizeof name, "step_%d", i);
        snprintf(fp, sizeof fp, "%064d", i + fp_offset);
        put_step(s, name, fp, i + time_offset);
    }
}

/* A save larger than the writer's chunk (256 KiB) — written new, then
 * appended to — keeps every record, each exactly once, in a file of the
 * records' frames and nothing else. */
static void test_a_large_save_is_written_in_chunks(void)
{
    struct state_store *s = reopen("chunks.log", NULL);
    put_numbered(s, 4000, 1, 0, 0);
    CHECK(state_store_save(s, err, sizeof err) == 0);
    off_t whole = file_size("chunks.log");
    CHECK(whole > 2 * 256 * 1024);
    put_numbered(s, 4000, 2, 1000000, 1);       /* half of them again: appended */
    CHECK(state_store_save(s, err, sizeof err) == 0);
    CHECK(file_size("chunks.log") > whole + whole / 2 - 4096 && file_size("chunks.log") < 2 * whole);
    state_store_free(s);
    const char *w = NULL;
    s = reopen("chunks.log", &w);
    CHECK(w == NULL);
    CHECK(state_store_count(s) == 4000);
    int wrong = 0;
    char name[32], fp[80];
    for (int i = 0; i < 4000; i++) {
        snprintf(name, sizeof name, "step_%d", i);
        snprintf(fp, sizeof fp, "%064d", i % 2 ? i : i + 1000000);
        const struct state_rec *r = state_store_get(s, name);
        wrong += !r || strcmp(r->fp, fp) != 0;
    }
    CHECK(wrong == 0);
    state_store_free(s);
}

/* An append cut short (here by RLIMIT_FSIZE, as a full disk would) leaves
 * whole records and a torn one at the end of the file.  The records are
 * written as they are put (a chunk at a time), so the cut comes there: the
 * put still succeeds (the record is kept for the save), the save that
 * follows fails too (it must now rewrite the file, which does not fit
 * either), and once there is room the next save rewrites the file instead
 * of appending after the torn bytes, so that a reopen finds every record. */
static void test_a_failed_append_makes_the_next_save_rewrite(void)
{
    struct state_store *s = reopen("cut.log", NULL);
    char name[32];
    for (int i = 0; i < 100; i++) {
        snprintf(name, sizeof name, "first_%d", i);
        put_step(s, name, "fp", i);
    }
    CHECK(state_store_save(s, err, sizeof err) == 0);
    struct rlimit old;
    CHECK(getrlimit(RLIMIT_FSIZE, &old) == 0);
    struct rlimit cut = old;
    cut.rlim_cur = (rlim_t)file_size("cut.log") + 300 * 1024;      /* inside the fifth chunk */
    void (*was)(int) = signal(SIGXFSZ, SIG_IGN);
    CHECK(setrlimit(RLIMIT_FSIZE, &cut) == 0);
    state_store_stream(s);
    put_numbered(s, 4000, 1, 0, 0);
    CHECK(file_size("cut.log") == (off_t)cut.rlim_cur);              /* whole records, then a torn one */
    CHECK(state_store_save(s, err, sizeof err) != 0);
    CHECK(strstr(err, "cut.log") != NULL);
    CHECK(setrlimit(RLIMIT_FSIZE, &old) == 0);
    signal(SIGXFSZ, was);
    CHECK(state_store_unsaved(s));
    CHECK(state_store_save(s, err, sizeof err) == 0);
    state_store_free(s);
    const char *w = NULL;
    s = reopen("cut.log", &w);
    CHECK(w == NULL);
    CHECK(state_store_count(s) == 4100);
    CHECK(state_store_stats(s).torn_bytes == 0 && state_store_stats(s).damaged == 0);
    CHECK(state_store_get(s, "step_3999") != NULL && state_store_get(s, "first_0") != NULL);
    state_store_free(s);
}

/* ---- records written before the save ---------------------------------------- */

/* Step gen_<i>'s record of generation g: a body that says which it is. */
static void put_generation(struct state_store *s, int i, int g)
{
    char name[32], fp[80], body[96];
    snprintf(name, sizeof name, "gen_%d", i);
    snprintf(fp, sizeof fp, "%064d", i * 10 + g);
    int blen = snprintf(body, sizeof body, "{\"parts\":{\"step\":%d,\"generation\":%d}}", i, g);
    struct state_out outs[1] = { { 'v', "value", "", "0123456789abcdef0123456789abcdef" } };
    struct state_rec r = { .name = name, .fp = fp, .body = body, .body_len = (size_t)blen, .time = g,
                           .n_outs = 1, .outs = outs };
    CHECK(state_store_put(s, &r, err, sizeof err) == 0);
}

/* How many of gen_<from> .. gen_<to - 1> s holds at generation g, body and all. */
static int count_generation(struct state_store *s, int from, int to, int g)
{
    int right = 0;
    for (int i = from; i < to; i++) {
        char name[32], want[96];
        snprintf(name, sizeof name, "gen_%d", i);
        snprintf(want, sizeof want, "{\"parts\":{\"step\":%d,\"generation\":%d}}", i, g);
        const struct state_rec *r = state_store_get(s, name);
        size_t len = 0;
        const char *body = r ? state_store_body(s, r, &len) : NULL;
        right += body && len == strlen(want) && memcmp(body, want, len) == 0 && r->n_outs == 1 &&
                 strcmp(r->outs[0].dataset, "value") == 0;
    }
    return right;
}

/* A store made where nothing is yet (not even its folder) writes its
 * records as they come: before the save the file holds whole records only,
 * the bodies of those written are read back from it (and of those not yet
 * written, from memory), and a body changed in the file under the store is
 * an error, not a wrong body. */
static void test_records_are_written_as_they_come(void)
{
    struct state_store *s = reopen("fresh/cache/state.log", NULL);
    for (int i = 0; i < 300; i++) put_generation(s, i, 1);
    CHECK(file_size("fresh/cache/state.log") == -1);    /* not a run's store (yet): nothing written */
    state_store_stream(s);
    for (int i = 300; i < 3000; i++) put_generation(s, i, 1);
    off_t early = file_size("fresh/cache/state.log");
    CHECK(early > (off_t)STATE_STORE_STREAM_BYTES);
    struct state_store *other = reopen("fresh/cache/state.log", NULL);
    size_t seen = state_store_count(other);
    CHECK(seen > 1000 && seen < 3000);
    CHECK(state_store_stats(other).torn_bytes == 0 && state_store_stats(other).damaged == 0);
    CHECK(count_generation(other, 0, (int)seen, 1) == (int)seen);
    state_store_free(other);
    CHECK(count_generation(s, 0, 3000, 1) == 3000);
    CHECK(state_store_unsaved(s));
    CHECK(state_store_save(s, err, sizeof err) == 0);
    CHECK(!state_store_unsaved(s));
    CHECK(count_generation(s, 0, 3000, 1) == 3000);

    size_t len;
    char *d = read_file("fresh/cache/state.log", &len);
    char *at = d ? memmem(d, len, "\"step\":7,", 9) : NULL;
    CHECK(at != NULL);
    if (at) {
        int fd = open("fresh/cache/state.log", O_WRONLY);
        CHECK(fd >= 0 && pwrite(fd, "8", 1, (at - d) + 8) == 1);
        if (fd >= 0) close(fd);
    }
    free(d);
    const struct state_rec *r = state_store_get(s, "gen_7");
    errno = 0;
    CHECK(r && state_store_body(s, r, &len) == NULL && errno == EIO);
    state_store_free(s);
}

/* A process that ends without saving (a kill) leaves the records it had
 * written, whole, and nothing torn. */
static void test_a_kill_before_the_save_keeps_what_was_written(void)
{
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        struct state_store *s = state_store_open("killed.log", NULL, err, sizeof err);
        if (s) state_store_stream(s);
        for (int i = 0; s && i < 3000; i++) put_generation(s, i, 1);
        _exit(0);
    }
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status));
    struct state_store *s = reopen("killed.log", NULL);
    size_t n = state_store_count(s);
    CHECK(n > 1000 && n < 3000);
    CHECK(state_store_stats(s).torn_bytes == 0 && state_store_stats(s).damaged == 0);
    CHECK(count_generation(s, 0, (int)n, 1) == (int)n);
    state_store_free(s);
}

/* A store on `path` streaming its puts, after a save of generation g of
 * steps 0..n-1 there (read back mapped). */
static struct state_store *streaming_after_a_save(const char *path, int n, int g)
{
    struct state_store *s = reopen(path, NULL);
    for (int i = 0; i < n; i++) put_generation(s, i, g);
    CHECK(state_store_save(s, err, sizeof err) == 0);
    state_store_free(s);
    s = reopen(path, NULL);
    state_store_stream(s);
    return s;
}

/* Records of three kinds in one rewrite: read from the file when it was
 * opened, put and written since, put and not written yet; the rewrite
 * (most of the file superseded) keeps each step's newest. */
static void test_a_rewrite_keeps_records_of_every_kind(void)
{
    struct state_store *s = streaming_after_a_save("mixed.log", 1000, 1);   /* gen 1 of 0..999: mapped */
    for (int g = 2; g <= 5; g++)
        for (int i = 500; i < 2000; i++) put_generation(s, i, g);
    off_t before = file_size("mixed.log");
    CHECK(state_store_save(s, err, sizeof err) == 0);
    CHECK(file_size("mixed.log") < before);             /* rewritten */
    CHECK(count_generation(s, 0, 500, 1) == 500);
    state_store_free(s);
    s = reopen("mixed.log", NULL);
    CHECK(state_store_count(s) == 2000 && state_store_stats(s).file_bytes == (size_t)file_size("mixed.log"));
    CHECK(count_generation(s, 0, 500, 1) == 500);
    CHECK(count_generation(s, 500, 2000, 5) == 1500);
    state_store_free(s);
}

/* Two stores on one file (a run's, and another that saved meanwhile): the
 * run's does not write where it thinks the end is, over the other's
 * records, but rewrites the file with the records it knows. */
static void test_a_file_changed_under_the_store_is_rewritten(void)
{
    struct state_store *s = streaming_after_a_save("two.log", 10, 1);
    struct state_store *other = reopen("two.log", NULL);
    for (int i = 0; i < 2000; i++) put_generation(other, i, 20000);   /* (records of another length) */
    CHECK(state_store_save(other, err, sizeof err) == 0);
    state_store_free(other);
    for (int i = 0; i < 1000; i++) put_generation(s, i, 3);   /* its stream sees the change and stops */
    CHECK(state_store_save(s, err, sizeof err) == 0);
    state_store_free(s);
    s = reopen("two.log", NULL);
    CHECK(state_store_stats(s).torn_bytes == 0 && state_store_stats(s).damaged == 0);
    CHECK(count_generation(s, 0, 1000, 3) == 1000);
    state_store_free(s);
}

/* The frame's checksum is the standard CRC-32 (zlib's crc32): the check
 * value, and every length across the eight-byte steps. */
static void test_crc32(void)
{
    CHECK(state_store_crc32("123456789", 9) == 0xCBF43926u);
    CHECK(state_store_crc32("", 0) == 0);
    unsigned char buf[64];
    for (size_t k = 0; k < sizeof buf; k++) buf[k] = (unsigned char)(k * 37 + 11);
    int ok = 1;
    for (size_t n = 0; n <= sizeof buf; n++) {           /* against the bitwise definition */
        uint32_t c = 0xFFFFFFFFu;
        for (size_t k = 0; k < n; k++) {
            c ^= buf[k];
            for (int b = 0; b < 8; b++) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        }
        ok &= state_store_crc32(buf, n) == (c ^ 0xFFFFFFFFu);
    }
    CHECK(ok);
}

int main(void)
{
    snprintf(root, sizeof root, "/tmp/flow-test-state-XXXXXX");
    if (!mkdtemp(root) || chdir(root) != 0) { perror("mkdtemp"); return 1; }
    setenv("FLOW_DEBUG_RECORD_FIELDS", "1", 1);     /* (test_a_step_record_from_its_fields) */
    RUN(test_crc32);
    RUN(test_round_trip);
    RUN(test_torn_tail_is_ignored);
    RUN(test_damaged_record_is_dropped);
    RUN(test_not_a_state_file);
    RUN(test_superseded_records_are_compacted);
    RUN(test_the_newest_record_wins_and_keeps_its_slot);
    RUN(test_a_link_is_not_read_and_is_replaced);
    RUN(test_an_empty_name_is_refused);
    RUN(test_an_oversize_record_is_refused);
    RUN(test_a_record_at_the_limit_is_kept);
    RUN(test_a_step_record_from_its_json);
    RUN(test_a_step_record_from_its_fields);
    RUN(test_a_large_save_is_written_in_chunks);
    RUN(test_a_failed_append_makes_the_next_save_rewrite);
    RUN(test_records_are_written_as_they_come);
    RUN(test_a_kill_before_the_save_keeps_what_was_written);
    RUN(test_a_rewrite_keeps_records_of_every_kind);
    RUN(test_a_file_changed_under_the_store_is_rewritten);
    if (chdir("/") == 0) {
        char *cmd = xasprintf("rm -rf '%s'", root);
        if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", root);
        free(cmd);
    }
    return CHECK_DONE("statestore");
}
