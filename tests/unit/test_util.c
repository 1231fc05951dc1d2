/* test_util.c — the shared infrastructure in util.h, strmap.h and arena.h that the config
 * loader and the graph use instead of private copies: strbuf truncation, the maps, the
 * arena, bounded file reads. */
#include "arena.h"
#include "check.h"
#include "crypto_lib.h"
#include "hash.h"
#include "json_text.h"
#include "strmap.h"
#include "util.h"

#include <cjson/cJSON.h>
#include <sha2.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void test_strbuf_truncate(void)
{
    struct strbuf sb = STRBUF_INIT;
    sb_truncate(&sb, 0);                        /* nothing added yet: a no-op */
    CHECK(sb.buf == NULL && sb.len == 0);
    sb_adds(&sb, "parameters");
    sb_addf(&sb, "%c%s", '\x1f', "model");
    size_t mark = sb.len;
    sb_adds(&sb, "\x1flr");
    sb_truncate(&sb, mark);
    CHECK_STR(sb.buf, "parameters\x1fmodel");
    sb_truncate(&sb, 1000);                     /* longer than the string: unchanged */
    CHECK(sb.len == mark);
    char *s = sb_detach(&sb);
    CHECK_STR(s, "parameters\x1fmodel");
    free(s);
}

static void test_ptrmap_put_get_grow(void)
{
    struct ptrmap m = {0};
    static int keys[1000];
    CHECK(ptrmap_get(&m, &keys[0]) == NULL);    /* empty map */
    for (int i = 0; i < 1000; i++)
        ptrmap_put(&m, &keys[i], (void *)(intptr_t)(i + 1));
    CHECK(m.count == 1000);
    int ok = 1;
    for (int i = 0; i < 1000; i++)
        ok &= ptrmap_get(&m, &keys[i]) == (void *)(intptr_t)(i + 1);
    CHECK(ok);
    ptrmap_put(&m, &keys[7], (void *)(intptr_t)42);     /* overwrite keeps the count */
    CHECK(m.count == 1000);
    CHECK(ptrmap_get(&m, &keys[7]) == (void *)(intptr_t)42);
    int other;
    CHECK(ptrmap_get(&m, &other) == NULL);
    ptrmap_free(&m);
    CHECK(m.slots == NULL && m.count == 0 && m.cap == 0);
}

static void test_read_file_max(void)
{
    char path[] = "/tmp/flow_test_util_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    CHECK(write_all(fd, "0123456789", 10) == 0);
    close(fd);
    size_t len = 0;
    char *text = read_file_max(path, 10, &len);
    CHECK(text && len == 10);
    CHECK_STR(text, "0123456789");
    free(text);
    errno = 0;
    CHECK(read_file_max(path, 9, &len) == NULL);
    CHECK(errno == EFBIG);
    text = read_file(path, &len);               /* unbounded */
    CHECK(text && len == 10);
    free(text);
    unlink(path);
    errno = 0;
    CHECK(read_file_max(path, 10, &len) == NULL);
    CHECK(errno == ENOENT);
}

static void check_seconds(double d, const char *want)
{
    struct strbuf sb = STRBUF_INIT;
    json_seconds(&sb, d);
    CHECK_STR(sb.buf, want);
    sb_release(&sb);
}

/* Times and durations in the journal and run.json: to the microsecond, read
 * back within half of one. */
static void test_json_seconds(void)
{
    check_seconds(0, "0");
    check_seconds(12.5, "12.5");
    check_seconds(0.000001, "0.000001");
    check_seconds(0.0000004, "0");
    check_seconds(-1.25, "-1.25");
    check_seconds(-0.5, "-0.5");
    check_seconds(1795735245.588115, "1795735245.588115");
    check_seconds(1795735245.9999996, "1795735246");
    check_seconds(NAN, "null");
    check_seconds(INFINITY, "null");
    check_seconds(1e20, "1e+20");                 /* beyond a microsecond count: json_number's form */
    int ok = 1;
    for (int k = 0; k < 100000; k++) {
        double d = 1.7e9 + k * 0.0137 + k / 7.0;
        struct strbuf sb = STRBUF_INIT;
        json_seconds(&sb, d);
        ok &= fabs(strtod(sb.buf, NULL) - d) <= 0.5e-6 + 2.5e-7;    /* and the double's own step, 2.4e-7 here */
        sb_release(&sb);
    }
    CHECK(ok);
}

/* Integers (attempts, exit codes) as "%lld" writes them, the extremes too. */
static void test_json_integer(void)
{
    const long long vs[] = { 0, 7, -7, 10, 2147483647LL, -2147483648LL, LLONG_MAX, LLONG_MIN };
    for (size_t k = 0; k < sizeof vs / sizeof *vs; k++) {
        char want[32];
        snprintf(want, sizeof want, "%lld", vs[k]);
        struct strbuf sb = STRBUF_INIT;
        json_integer(&sb, vs[k]);
        CHECK_STR(sb.buf, want);
        sb_release(&sb);
    }
    struct strbuf sb = STRBUF_INIT;
    json_number(&sb, -0.0);
    json_number(&sb, 3.0);
    json_number(&sb, 2.5);
    CHECK_STR(sb.buf, "032.5");
    sb_release(&sb);
}

static void check_string(const char *s, const char *want)
{
    struct strbuf sb = STRBUF_INIT;
    json_string(&sb, s);
    CHECK_STR(sb.buf, want);
    sb_release(&sb);
}

static void test_json_string(void)
{
    check_string("", "\"\"");
    check_string("plain text", "\"plain text\"");
    check_string("a\"b\\c", "\"a\\\"b\\\\c\"");
    check_string("\n\r\t\b\f", "\"\\n\\r\\t\\b\\f\"");
    check_string("x\001y\037", "\"x\\u0001y\\u001f\"");
    check_string("caf\xc3\xa9 \x7f", "\"caf\xc3\xa9 \x7f\"");     /* bytes of 127 and above as they are */
}

static void check_string_utf8(const char *s, const char *want)
{
    struct strbuf sb = STRBUF_INIT;
    json_string_utf8(&sb, s);
    CHECK_STR(sb.buf, want);
    sb_release(&sb);
}

/* For --log-format json: valid UTF-8 unchanged, each other byte U+FFFD. */
static void test_json_string_utf8_is_always_valid(void)
{
    check_string_utf8("a\"b\n\001", "\"a\\\"b\\n\\u0001\"");
    check_string_utf8("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \x7f", "\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \x7f\"");
    check_string_utf8("bad \xff\xfe!", "\"bad \\ufffd\\ufffd!\"");
    check_string_utf8("\xc0\xaf", "\"\\ufffd\\ufffd\"");                 /* overlong '/' */
    check_string_utf8("\xed\xa0\x80", "\"\\ufffd\\ufffd\\ufffd\"");     /* a surrogate */
    check_string_utf8("\xf4\x90\x80\x80", "\"\\ufffd\\ufffd\\ufffd\\ufffd\"");   /* past U+10FFFF */
    check_string_utf8("cut \xe2\x82", "\"cut \\ufffd\\ufffd\"");            /* ends mid-sequence */
    check_string_utf8("\xc3(", "\"\\ufffd(\"");
}

/* The runs merged_runs does not list: the directory's entries less the
 * file's lines (blank lines, names not there and a missing file alike). */
static void test_dir_list_unlisted(void)
{
    char dir[] = "/tmp/flow-test-unlisted-XXXXXX";
    if (!mkdtemp(dir)) { perror("mkdtemp"); exit(2); }
    const char *entries[] = { "r3", "r1", "latest", "r2", "r4" };
    char path[256];
    for (size_t k = 0; k < sizeof entries / sizeof *entries; k++) {
        snprintf(path, sizeof path, "%s/%s", dir, entries[k]);
        CHECK(mkdir(path, 0755) == 0);
    }
    char listed[256];
    snprintf(listed, sizeof listed, "%s.merged", dir);
    size_t n;
    char **names = dir_list_unlisted(dir, listed, &n);            /* no list: every entry */
    CHECK(names && n == 5 && strcmp(names[0], "latest") == 0 && strcmp(names[4], "r4") == 0);
    dir_list_free(names, n);
    FILE *f = fopen(listed, "w");
    CHECK(f && fputs("r4\n\nr1\nr9\nr2", f) >= 0 && fclose(f) == 0);   /* unsorted, a blank line, no last newline */
    names = dir_list_unlisted(dir, listed, &n);
    CHECK(names && n == 2 && strcmp(names[0], "latest") == 0 && strcmp(names[1], "r3") == 0);
    dir_list_free(names, n);
    snprintf(path, sizeof path, "%s/none", dir);
    CHECK(dir_list_unlisted(path, listed, &n) == NULL && errno == ENOENT);
    unlink(listed);
    for (size_t k = 0; k < sizeof entries / sizeof *entries; k++) {
        snprintf(path, sizeof path, "%s/%s", dir, entries[k]);
        rmdir(path);
    }
    rmdir(dir);
}


/* Strings packed byte to byte, other blocks aligned for any object and
 * zeroed, a block larger than a chunk in a chunk of its own; every byte
 * stays as written until arena_free (ASan checks the bounds). */
static void test_arena(void)
{
    struct arena a = ARENA_INIT;
    char *names[3000];
    for (int i = 0; i < 3000; i++) {
        char buf[32];
        snprintf(buf, sizeof buf, "d_%d", i);
        names[i] = arena_strdup(&a, buf);
        if (i % 7 == 0) {
            double *d = arena_calloc(&a, 3, sizeof *d);
            CHECK((uintptr_t)d % _Alignof(max_align_t) == 0);
            CHECK(d[0] == 0 && d[1] == 0 && d[2] == 0);
            d[2] = i;
        }
    }
    CHECK(arena_strdup(&a, NULL) == NULL);
    CHECK(arena_calloc(&a, 0, 8) != NULL);
    size_t big = 3 * 1024 * 1024;
    unsigned char *b = arena_alloc(&a, big);
    CHECK(b[0] == 0 && b[big - 1] == 0);
    memset(b, 0xab, big);
    char *after = arena_strdup(&a, "after the big block");
    int wrong = 0;
    for (int i = 0; i < 3000; i++) {
        char buf[32];
        snprintf(buf, sizeof buf, "d_%d", i);
        wrong += strcmp(names[i], buf) != 0;
    }
    CHECK(wrong == 0);
    CHECK_STR(after, "after the big block");
    CHECK(b[big - 1] == 0xab);
    arena_free(&a);
    CHECK(a.chunks == NULL);
    arena_free(&a);                             /* twice: fine */
}

/* A map with borrowed keys keeps the caller's pointers and frees none. */
static void test_strmap_borrowed_keys(void)
{
    struct arena a = ARENA_INIT;
    struct strmap m = { .borrowed_keys = true };
    char *keys[100];
    for (int i = 0; i < 100; i++) {
        char buf[16];
        snprintf(buf, sizeof buf, "k%d", i);
        keys[i] = arena_strdup(&a, buf);
        strmap_put(&m, keys[i], (size_t)i);
    }
    size_t v = 0, found = 0;
    for (int i = 0; i < 100; i++) found += strmap_get(&m, keys[i], &v) && v == (size_t)i;
    CHECK(found == 100);
    bool same = false;
    for (size_t i = 0; i < m.cap; i++) same = same || m.slots[i].key == keys[42];
    CHECK(same);
    char other[] = "k42";                       /* equal, not the same pointer: found by its bytes */
    CHECK(strmap_get(&m, other, &v) && v == 42);
    CHECK(!strmap_get(&m, "k100", NULL));
    strmap_free(&m);                            /* the keys are the arena's */
    arena_free(&a);
}

/* Values are 32-bit in the slot (strmap.h): the largest one comes back
 * whole, an overwrite replaces, and 100,000 keys put through every growth
 * are all found, with the slot at 16 bytes. */
static void test_strmap_values_and_growth(void)
{
    CHECK(sizeof(struct strmap_slot) == 16);
    struct strmap m = { 0 };
    strmap_prefetch(&m, "max");         /* (an empty map has no slots to ask for) */
    strmap_put(&m, "max", UINT32_MAX);
    strmap_put(&m, "zero", 0);
    size_t v = 1;
    CHECK(strmap_get(&m, "max", &v) && v == UINT32_MAX);
    CHECK(strmap_get(&m, "zero", &v) && v == 0);
    strmap_put(&m, "zero", 7);
    CHECK(strmap_get(&m, "zero", &v) && v == 7 && m.count == 2);
    for (size_t i = 0; i < 100000; i++) {
        char buf[32];
        snprintf(buf, sizeof buf, "s_%zu_%zu", i / 1000, i % 1000);
        strmap_prefetch(&m, buf);
        strmap_put(&m, buf, i);
    }
    size_t found = 0;
    for (size_t i = 0; i < 100000; i++) {
        char buf[32];
        snprintf(buf, sizeof buf, "s_%zu_%zu", i / 1000, i % 1000);
        found += strmap_get(&m, buf, &v) && v == i;
    }
    CHECK(found == 100000 && m.count == 100002);
    CHECK(!strmap_get(&m, "s_100_0", NULL));
    strmap_free(&m);
}

/* strmap_slot and strmap_fill intern in one probe: the first ask of a name
 * gives an empty slot that fill makes the name's, a second ask finds it with
 * its value, and growth between two interns (10,000 names, both key modes)
 * loses none; fill copies the key unless the map borrows it. */
static void test_strmap_slot_interns(void)
{
    for (int borrowed = 0; borrowed < 2; borrowed++) {
        struct arena a = ARENA_INIT;
        struct strmap m = { .borrowed_keys = borrowed };
        size_t wrong = 0;
        for (size_t i = 0; i < 10000; i++) {
            char buf[32];
            snprintf(buf, sizeof buf, "d_%zu", i);
            struct strmap_slot *s = strmap_slot(&m, buf);
            wrong += s->key != NULL;
            char *key = borrowed ? arena_strdup(&a, buf) : buf;
            strmap_fill(&m, s, key, i);
            wrong += (s->key == key) != borrowed;      /* a copy unless borrowed */
            s = strmap_slot(&m, buf);
            wrong += !s->key || s->value != i || strcmp(s->key, buf) != 0;
        }
        CHECK(wrong == 0 && m.count == 10000);
        size_t v = 0, found = 0;
        for (size_t i = 0; i < 10000; i++) {
            char buf[32];
            snprintf(buf, sizeof buf, "d_%zu", i);
            found += strmap_get(&m, buf, &v) && v == i;
        }
        CHECK(found == 10000);
        CHECK(strmap_slot(&m, "absent")->key == NULL && m.count == 10000);   /* asking adds nothing */
        CHECK(!strmap_get(&m, "absent", NULL));
        strmap_free(&m);
        arena_free(&a);
    }
    /* a map full to its load limit grows for a new key only, not for one it has */
    struct strmap m = { 0 };
    char buf[32];
    size_t n = 0;
    do {
        snprintf(buf, sizeof buf, "k%zu", n);
        strmap_put(&m, buf, n++);
    } while ((m.count + 1) * 10 <= m.cap * 7);
    size_t cap = m.cap;
    CHECK(strmap_slot(&m, "k0")->key != NULL && m.cap == cap);
    CHECK(strmap_slot(&m, "new")->key == NULL && m.cap == 2 * cap && m.count == n);
    strmap_free(&m);
}

/* json_indent lays out JSON text as cJSON_Print does after a parse (run.json
 * was made that way), without parsing: the same bytes for each of these. */
static void test_json_indent_is_cjson_print(void)
{
    static const char *const docs[] = {
        "{}", "[]", "{\"a\":1}", "[1,2,3]", "{\"a\":{},\"b\":[],\"c\":[{}]}",
        "{\"code\":0,\"steps\":[{\"name\":\"s\",\"metrics\":{\"loss\":0.5,\"tags\":[\"x\",\"y\"]},\"ok\":true},"
        "{\"name\":\"t\",\"metrics\":null,\"ok\":false}]}",
        "{\"q\":\"a \\\" quote, a {brace} and [bracket]: kept\",\"u\":\"\\u0001 \\\\\"}",
        "[[[1,[2]],{\"deep\":{\"deeper\":{\"deepest\":[{},{\"x\":-3}]}}}]]",
        "\"just a string\"", "42", "null",
    };
    for (size_t k = 0; k < sizeof docs / sizeof *docs; k++) {
        cJSON *tree = cJSON_Parse(docs[k]);
        CHECK(tree != NULL);
        char *want = cJSON_Print(tree);
        struct strbuf got = STRBUF_INIT;
        json_indent(&got, docs[k], strlen(docs[k]));
        CHECK_STR(got.buf, want);
        cJSON_free(want);
        cJSON_Delete(tree);
        sb_release(&got);
    }
    /* whitespace between tokens (a fragment written pretty) is dropped */
    struct strbuf got = STRBUF_INIT;
    json_indent(&got, " { \"a\" :\n [ 1 , 2 ] } ", 22);
    CHECK_STR(got.buf, "{\n\t\"a\":\t[1, 2]\n}");
    sb_release(&got);
    /* text that is not JSON is rearranged, never read past its end */
    static const char *const bad[] = { "{\"open", "}}]]", "{\"a\":\"\\", "[{,:" };
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        json_indent(&got, bad[k], strlen(bad[k]));
        CHECK(got.buf != NULL);
        sb_truncate(&got, 0);
    }
    sb_release(&got);
}

/* libcrypto is opened at the first hash: a missing library or function is a
 * message naming it; the one loaded hashes as the standard says. */
static void test_crypto_lib_open(void)
{
    struct crypto_lib lib;
    char err[512];
    CHECK(crypto_lib_open("libflow-no-such-crypto.so.9", &lib, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "cannot load libcrypto (libflow-no-such-crypto.so.9)");
    CHECK_CONTAINS(err, "libssl3");
    CHECK(crypto_lib_open("libc.so.6", &lib, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "libc.so.6 has no SHA256_Init: OpenSSL 3 is needed");
    CHECK(crypto_lib_open(CRYPTO_LIB_SONAME, &lib, err, sizeof err) == 0);
    CHECK(crypto_lib() != NULL && crypto_lib()->SHA256_Init == lib.SHA256_Init);
    char hex[SHA256_HEX_SIZE];
    sha256_hex("abc", 3, hex);                  /* FIPS 180-2's first example */
    CHECK_STR(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

static void hex_of(const unsigned char *md, char hex[SHA256_HEX_SIZE])
{
    for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", md[i]);
}

/* Two implementations of SHA-256 (hash.c): libmd for what fits in a
 * hasher's first HASHER_SMALL bytes while the process's small budget lasts,
 * OpenSSL past them or after.  With the budget unlimited and with none, at
 * every length around the switch, fed whole or in pieces, copied half-way
 * (hasher_copy), the hasher and sha256_hex give what OpenSSL alone and libmd
 * alone give.  (libcrypto is loaded by then, which makes hashers start on
 * OpenSSL: the small path is checked first, by a run of its own below.) */
static int size_order(const void *a, const void *b)
{
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return x < y ? -1 : x > y;
}

static void check_sha256_paths(size_t up_to)
{
    size_t max = 3 * HASHER_SMALL + 100;
    unsigned char *data = malloc(max);
    for (size_t i = 0; i < max; i++) data[i] = (unsigned char)(i * 2654435761u >> 13);
    static const size_t pieces[] = { 1, 7, 64, 1000, HASHER_SMALL - 1, HASHER_SMALL, HASHER_SMALL + 1 };
    size_t lengths[64], n_len = 0;
    for (size_t k = 0; k < 40; k++) lengths[n_len++] = k * 97;
    for (long d = -3; d <= 3; d++) {
        lengths[n_len++] = (size_t)((long)HASHER_SMALL + d);
        lengths[n_len++] = (size_t)((long)(2 * HASHER_SMALL) + d);
    }
    lengths[n_len++] = max;
    qsort(lengths, n_len, sizeof *lengths, size_order);
    for (size_t k = 0; k < n_len && lengths[k] <= up_to; k++) {
        size_t len = lengths[k];
        unsigned char md[32];
        char want[SHA256_HEX_SIZE], got[SHA256_HEX_SIZE], libmd[SHA256_HEX_SIZE];
        SHA256(data, len, md);                                   /* OpenSSL, linked into this test */
        hex_of(md, want);
        SHA2_CTX ctx;
        SHA256Init(&ctx);
        SHA256Update(&ctx, data, len);
        SHA256Final(md, &ctx);
        hex_of(md, libmd);
        CHECK_STR(libmd, want);
        sha256_hex(data, len, got);
        CHECK_STR(got, want);
        for (size_t p = 0; p < sizeof pieces / sizeof *pieces; p++) {
            struct hasher *h = hasher_new(), *copy = hasher_new();
            size_t half = len / 2, at = 0;
            while (at < len) {
                size_t step = len - at < pieces[p] ? len - at : pieces[p];
                if (at <= half && half < at + step) {            /* the copy goes on from the middle */
                    hasher_update(h, data + at, half - at);
                    hasher_copy(copy, h);
                    hasher_update(h, data + half, at + step - half);
                    hasher_update(copy, data + half, len - half);
                } else {
                    hasher_update(h, data + at, step);
                }
                at += step;
            }
            if (len == 0) hasher_copy(copy, h);
            hasher_finish(h, got);
            CHECK_STR(got, want);
            hasher_finish(copy, got);
            CHECK_STR(got, want);
            hasher_update(h, data, len);                         /* a finished hasher starts over */
            hasher_finish(h, got);
            CHECK_STR(got, want);
            hasher_free(h);
            hasher_free(copy);
        }
    }
    free(data);
}

static void test_sha256_small_and_big_agree(void)
{
    CHECK(!crypto_lib_loaded());            /* (this test runs first) */
    hash_set_small_budget(SIZE_MAX);
    check_sha256_paths(HASHER_SMALL);       /* libmd alone */
    CHECK(!crypto_lib_loaded());
    /* a hasher that kept HASHER_SMALL - 10 bytes, to go past them below */
    static unsigned char text[HASHER_SMALL + 90];
    for (size_t i = 0; i < sizeof text; i++) text[i] = (unsigned char)(i % 251);
    struct hasher *crossing = hasher_new();
    hasher_update(crossing, text, HASHER_SMALL - 10);
    /* small hashes go to libmd until they would have cost about what loading
     * libcrypto does (each call counts 64 bytes more); then to OpenSSL */
    char hex[SHA256_HEX_SIZE];
    hash_set_small_budget(2 * (3 + 64));
    for (int k = 0; k < 3; k++) {
        CHECK(!crypto_lib_loaded());
        sha256_hex("abc", 3, hex);          /* FIPS 180-2's first example */
        CHECK_STR(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    }
    CHECK(crypto_lib_loaded());
    char want[SHA256_HEX_SIZE];
    unsigned char md[32];
    SHA256(text, sizeof text, md);
    hex_of(md, want);
    /* a hasher made now keeps nothing: a copy of the kept bytes goes to OpenSSL */
    struct hasher *late = hasher_new();
    hasher_copy(late, crossing);
    hasher_update(late, text + HASHER_SMALL - 10, 100);
    hasher_finish(late, hex);
    CHECK_STR(hex, want);
    hasher_free(late);
    /* past HASHER_SMALL, OpenSSL goes on from what the hasher kept */
    hasher_update(crossing, text + HASHER_SMALL - 10, 100);
    hasher_finish(crossing, hex);
    CHECK_STR(hex, want);
    hasher_free(crossing);
    hash_set_small_budget(SIZE_MAX);
    check_sha256_paths(SIZE_MAX);           /* OpenSSL, once it is loaded */
}

/* wipe() zeroes what it is given, and takes NULL. */
/* xcalloc_written's blocks are zeros, small and large (where it writes
 * them itself rather than leave fresh pages to calloc). */
static void test_xcalloc_written(void)
{
    size_t sizes[] = { 1, 100, 64 * 1024, 3 * 1024 * 1024 + 5 };
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        unsigned char *p = xcalloc_written(sizes[k], 1);
        size_t nonzero = 0;
        for (size_t i = 0; i < sizes[k]; i++) nonzero += p[i] != 0;
        CHECK(nonzero == 0);
        free(p);
    }
    free(xcalloc_written(0, 0));                /* (a block all the same) */
}

static void test_wipe(void)
{
    char secret[] = "client-secret";
    wipe(secret, sizeof secret);
    for (size_t i = 0; i < sizeof secret; i++) CHECK(secret[i] == 0);
    wipe(NULL, 8);
    wipe_free(NULL);
}

/* A file written as it is made: what sb holds goes out once it reaches the
 * threshold (counted), the rest at the end; a failed write says so with
 * its errno, and the buffer is released either way. */
static void test_strbuf_written_in_pieces(void)
{
    char path[] = "/tmp/flow-test-pieces-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    struct strbuf sb = STRBUF_INIT;
    uint64_t written = 0;
    sb_adds(&sb, "abc");
    CHECK(sb_write_some(&sb, fd, 4, &written) == 0 && written == 0 && sb.len == 3);   /* not yet */
    sb_adds(&sb, "def");
    CHECK(sb_write_some(&sb, fd, 4, &written) == 0 && written == 6 && sb.len == 0);
    sb_adds(&sb, "gh");
    CHECK(sb_write_last(&sb, fd, 0) == 0 && sb.buf == NULL);
    close(fd);
    size_t len;
    char *text = read_file(path, &len);
    CHECK(text && len == 8 && strcmp(text, "abcdefgh") == 0);
    free(text);
    unlink(path);
    sb_adds(&sb, "lost");
    CHECK(sb_write_some(&sb, -1, 1, NULL) == -1 && errno == EBADF && sb.len == 4);
    sb_adds(&sb, "x");
    errno = 0;
    CHECK(sb_write_last(&sb, -1, 0) == -1 && errno == EBADF && sb.buf == NULL);
    sb_adds(&sb, "y");
    errno = EIO;                                   /* an earlier failure: nothing more written */
    CHECK(sb_write_last(&sb, -1, -1) == -1 && errno == EIO && sb.buf == NULL);
}

int main(void)
{
    RUN(test_sha256_small_and_big_agree);   /* first: before anything loads libcrypto */
    RUN(test_strbuf_truncate);
    RUN(test_strbuf_written_in_pieces);
    RUN(test_ptrmap_put_get_grow);
    RUN(test_read_file_max);
    RUN(test_json_seconds);
    RUN(test_json_integer);
    RUN(test_json_string);
    RUN(test_json_string_utf8_is_always_valid);
    RUN(test_dir_list_unlisted);
    RUN(test_arena);
    RUN(test_strmap_borrowed_keys);
    RUN(test_strmap_values_and_growth);
    RUN(test_strmap_slot_interns);
    RUN(test_json_indent_is_cjson_print);
    RUN(test_crypto_lib_open);
    RUN(test_wipe);
    RUN(test_xcalloc_written);
    return CHECK_DONE("util");
}
