/* test_aml_blob.c — Azure Blob Storage (engine/azureml/blob.c) against real
 * Azurite (tools/azurite.sh installs it; the test starts it on a free port
 * and stops it): the Shared Key signature against vectors computed apart,
 * uploads and downloads byte-identical (folders with odd names, a file in
 * blocks and ranges), paging, skipping what is there, resuming after a
 * cancel, a SAS, and that neither the key nor the SAS reaches a message.
 * And against tests/unit/http_server.py's /changing, a blob rewritten while
 * it is downloaded (what Azurite cannot be made to do at a given moment):
 * ranges pinned to its ETag, never a file of two versions. */
#include "azureml/blob.h"
#include "azureml/blob_sign.h"
#include "check_server.h"
#include "loop.h"
#include "util.h"
#include "work.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define ACCOUNT "devstoreaccount1"
/* Azurite's well-known development key (public, documented by Microsoft). */
#define AZURITE_KEY "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
#define WRONG_KEY "c2VjcmV0LXRoYXQtaXMtbm90LXRoZS1rZXktb2YtdGhpcy1hY2NvdW50LWF0LWFsbA=="

static char g_dir[] = "/tmp/flow-test-blob-XXXXXX";
static int g_port;
static struct loop *g_loop;
static struct work_pool *g_pool;
static struct http_client *g_http;

/* ---- Azurite ------------------------------------------------------------ */

/* tools/azurite.sh prints the binary's path, installing it first if needed. */
static char *azurite_binary(void)
{
    char *root = check_repo_root_or_die();
    char *bin = xasprintf("%s/.deps/azurite/node_modules/.bin/azurite-blob", root);
    if (access(bin, X_OK) != 0) {
        char *cmd = xasprintf("'%s/tools/azurite.sh' 2>&1 >/dev/null", root);
        int rc = system(cmd);
        free(cmd);
        if (rc != 0 || access(bin, X_OK) != 0) {
            free(bin);
            bin = NULL;
        }
    }
    free(root);
    return bin;
}

/* false when Azurite cannot be had (the caller skips, saying so). */
static bool start_azurite(void)
{
    char *bin = azurite_binary();
    if (!bin) return false;
    g_port = check_loopback_port();
    char port[16];
    snprintf(port, sizeof port, "%d", g_port);
    char *location = xasprintf("%s/azurite", g_dir);
    char *log = xasprintf("%s/azurite.log", g_dir);
    mkdir(location, 0700);
    char *argv[] = { bin, "--blobHost", "127.0.0.1", "--blobPort", port, "--location", location, "--silent",
                     "--disableTelemetry", "--skipApiVersionCheck", NULL };
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    check_start_server(argv, &fa);
    posix_spawn_file_actions_destroy(&fa);
    free(bin);
    free(location);
    for (int i = 0; i < 300 && !check_port_listening(g_port); i++) {         /* at most 15 s */
        if (check_server_exited()) {
            char *text = read_file(log, NULL);
            check_die("Azurite exited: %s", text ? text : "(no log)");
        }
        nanosleep(&(struct timespec){ 0, 50000000 }, NULL);
    }
    free(log);
    if (!check_port_listening(g_port)) check_die("Azurite did not listen within 15 s");
    return true;
}

static void stop_azurite(void) { check_stop_server(SIGTERM); }

/* ---- helpers -------------------------------------------------------------- */

static char *path_in(const char *rel) { return xasprintf("%s/%s", g_dir, rel); }

static void write_bytes(const char *path, const void *data, size_t len)
{
    char *dir = xstrdup(path);
    *strrchr(dir, '/') = '\0';
    if (mkdir_p(dir, 0755) != 0) check_die("mkdir %s: %s", dir, strerror(errno));
    free(dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || write_all(fd, data, len) != 0 || close(fd) != 0) check_die("write %s: %s", path, strerror(errno));
}

static void write_text(const char *path, const char *text) { write_bytes(path, text, strlen(text)); }

/* Deterministic bytes that differ per seed. */
static char *pattern(size_t len, unsigned seed)
{
    char *p = xmalloc(len ? len : 1);
    uint32_t s = seed * 2654435761u + 1;
    for (size_t i = 0; i < len; i++) {
        s = s * 1664525u + 1013904223u;
        p[i] = (char)(s >> 24);
    }
    return p;
}

static bool same_file(const char *a, const char *b)
{
    size_t la, lb;
    char *x = read_file(a, &la), *y = read_file(b, &lb);
    bool same = x && y && la == lb && memcmp(x, y, la) == 0;
    if (!same) fprintf(stderr, "  %s and %s differ\n", a, b);
    free(x);
    free(y);
    return same;
}

static char *container_url(const char *name)
{
    return xasprintf("http://127.0.0.1:%d/" ACCOUNT "/%s", g_port, name);
}

static struct blob_container *container(const char *name, const char *key, const char *sas, unsigned page)
{
    char *url = container_url(name);
    struct blob_container_spec spec = { .url = url, .account = ACCOUNT, .key = key, .sas = sas,
                                        .list_page_size = page };
    char err[512];
    struct blob_container *c = blob_container_new(g_http, g_pool, &spec, err, sizeof err);
    if (!c) check_die("blob_container_new: %s", err);
    free(url);
    return c;
}

struct outcome {
    bool done;
    int calls;
    int progress_calls;
};

static void on_done(struct step_wait *w, void *arg)
{
    (void)w;
    struct outcome *o = arg;
    o->done = true;
    o->calls++;
}

static void on_progress(void *arg, const struct blob_progress *p)
{
    struct outcome *o = arg;
    o->progress_calls++;
    CHECK(p->bytes_done <= p->bytes_total);
    CHECK(p->files_done <= p->files_total);
}

/* Runs the loop until w is done (at most 60 s); returns its error (a copy). */
static char *finish(struct step_wait *w, struct outcome *o)
{
    CHECK(!o->done);                        /* never from within the call that started it */
    double until = monotonic_seconds() + 60;
    while (!o->done && monotonic_seconds() < until) loop_run_once(g_loop, 0.1);
    if (!o->done) check_die("a blob wait did not finish within 60 s");
    CHECK(o->calls == 1);
    const char *e = blob_wait_error(w);
    return e ? xstrdup(e) : NULL;
}

static char *upload(struct blob_container *c, const char *local, const char *prefix, struct blob_progress *p)
{
    struct outcome o = { 0 };
    struct step_wait *w = blob_upload(c, local, prefix, on_progress, on_done, &o);
    char *err = finish(w, &o);
    if (p) *p = *blob_wait_progress(w);
    step_wait_free(w);
    return err;
}

static char *download(struct blob_container *c, const char *prefix, bool folder, const char *dest,
                      struct blob_progress *p)
{
    struct outcome o = { 0 };
    struct step_wait *w = blob_download(c, prefix, folder, dest, on_progress, on_done, &o);
    char *err = finish(w, &o);
    if (p) *p = *blob_wait_progress(w);
    step_wait_free(w);
    return err;
}

static void create(struct blob_container *c)
{
    struct outcome o = { 0 };
    struct step_wait *w = blob_container_create(c, on_done, &o);
    char *err = finish(w, &o);
    if (err) fprintf(stderr, "  %s\n", err);
    CHECK(err == NULL);
    free(err);
    step_wait_free(w);
}

static bool exists(struct blob_container *c, const char *name)
{
    struct outcome o = { 0 };
    struct step_wait *w = blob_exists(c, name, on_done, &o);
    char *err = finish(w, &o);
    if (err) fprintf(stderr, "  %s\n", err);
    CHECK(err == NULL);
    free(err);
    bool yes = blob_wait_exists(w);
    step_wait_free(w);
    return yes;
}

/* blob_stat's hash, or NULL and *err. */
static char *stat_hash(struct blob_container *c, const char *prefix, bool folder, char **err)
{
    struct outcome o = { 0 };
    struct step_wait *w = blob_stat(c, prefix, folder, on_done, &o);
    *err = finish(w, &o);
    const char *h = blob_wait_stat_hash(w);
    char *hash = h ? xstrdup(h) : NULL;
    step_wait_free(w);
    return hash;
}

#define CHECK_OK(expr) do { char *e_ = (expr); if (e_) fprintf(stderr, "  %s\n", e_); CHECK(e_ == NULL); \
    free(e_); } while (0)

/* ---- the HTTPS test server (http_server.py) --------------------------------- */

static int g_https_port;
static char *g_https_ca;

static void start_test_server(void)
{
    char *dir = path_in("https"), *root = check_repo_root_or_die();
    char *script = xasprintf("%s/tests/unit/http_server.py", root);
    free(root);
    if (mkdir(dir, 0700) != 0) check_die("mkdir %s: %s", dir, strerror(errno));
    if (access("/usr/bin/python3", X_OK) != 0) check_die("/usr/bin/python3 is needed to run the test server");
    char *argv[] = { "/usr/bin/python3", script, dir, NULL };
    check_start_server(argv, NULL);
    free(script);
    char *ports = xasprintf("%s/ports", dir);
    for (int i = 0; i < 200; i++) {                 /* at most 10 s: making the CAs takes ~0.3 s */
        FILE *f = fopen(ports, "r");
        int a, b;
        if (f) {
            if (fscanf(f, "%d %d", &a, &b) == 2) g_https_port = a;
            fclose(f);
        }
        if (g_https_port) break;
        if (check_server_exited()) check_die("the test server exited (is the openssl command installed?)");
        nanosleep(&(struct timespec){ 0, 50000000 }, NULL);
    }
    free(ports);
    if (!g_https_port) check_die("the test server did not start within 10 s");
    g_https_ca = xasprintf("%s/ca_a.pem", dir);
    free(dir);
}

static void stop_test_server(void)
{
    check_stop_server(SIGTERM);
    free(g_https_ca);
}

/* ---- the tests ------------------------------------------------------------ */

/* Expected signatures computed apart, with Python's hmac over the documented
 * StringToSign (see the comments), not with this code. */
static void test_shared_key_vectors(void)
{
    size_t key_len;
    unsigned char key[64];
    key_len = (size_t)EVP_DecodeBlock(key, (const unsigned char *)AZURITE_KEY, (int)strlen(AZURITE_KEY)) - 2;
    CHECK(key_len == 64);
    /* "GET\n" + 11 × "\n" + "x-ms-date:Fri, 26 Jun 2015 23:39:12 GMT\nx-ms-version:2021-08-06\n"
     * "/devstoreaccount1/devstoreaccount1/c\ncomp:list\nprefix:a b/&\nrestype:container":
     * path-style (the account twice), query names sorted, values decoded. */
    const char *h1[] = { "x-ms-version: 2021-08-06", "x-ms-date: Fri, 26 Jun 2015 23:39:12 GMT", NULL };
    char *s1 = blob_shared_key(ACCOUNT, key, key_len, "GET",
                               "http://127.0.0.1:10000/devstoreaccount1/c?restype=container&comp=list&prefix=a%20b%2F%26",
                               h1);
    CHECK_STR(s1, "SharedKey devstoreaccount1:tjOlX9vTEY3C5xBOTDSpRRWr2kTJVeqlkkGROKPaLsc=");
    free(s1);
    /* "PUT\n\n\n11\nXrY7u+Ae7tCTyyK7j1rNww==\n" + 7 × "\n" + "x-ms-blob-type:BlockBlob\n"
     * "x-ms-date:…\nx-ms-meta-foo:a b c\nx-ms-version:2021-08-06\n"
     * "/myaccount/mycontainer/dir/a%20b.txt\nblockid:AAA=,BBB=\ncomp:block": header names
     * lowercased, values trimmed and folded, a repeated parameter's values joined by ','. */
    const char *h2[] = { "Content-Length: 11", "Content-MD5: XrY7u+Ae7tCTyyK7j1rNww==", "X-MS-Blob-Type: BlockBlob",
                         "x-ms-date: Fri, 26 Jun 2015 23:39:12 GMT", "x-ms-meta-Foo:   a   b  c ",
                         "x-ms-version: 2021-08-06", NULL };
    char *s2 = blob_shared_key("myaccount", key, key_len, "PUT",
                               "https://myaccount.blob.core.windows.net/mycontainer/dir/a%20b.txt"
                               "?comp=block&blockid=AAA%3D&blockid=BBB%3D",
                               h2);
    CHECK_STR(s2, "SharedKey myaccount:VOaAgkuVdsDPR9+oclp0i80+LozRumiOiFi4E8WvvCU=");
    free(s2);
    /* Content-Length 0 signs as an empty line: the same as no length at all */
    const char *h3[] = { "Content-Length: 0", "x-ms-date: d", NULL }, *h4[] = { "x-ms-date: d", NULL };
    char *a = blob_shared_key("a", key, key_len, "PUT", "https://h/c?restype=container", h3);
    char *b = blob_shared_key("a", key, key_len, "PUT", "https://h/c?restype=container", h4);
    CHECK_STR(a, b);
    free(a);
    free(b);
}

static void test_container_spec_checked(void)
{
    char err[256];
    struct blob_container_spec bad_key = { .url = "https://a.blob.core.windows.net/c", .account = "a", .key = "no!" };
    CHECK(blob_container_new(g_http, g_pool, &bad_key, err, sizeof err) == NULL);
    CHECK_CONTAINS(err, "not base64");
    struct blob_container_spec ftp = { .url = "ftp://a/c", .account = "a", .key = AZURITE_KEY };
    CHECK(blob_container_new(g_http, g_pool, &ftp, err, sizeof err) == NULL);
    CHECK_CONTAINS(err, "not http(s)");
    struct blob_container_spec both = { .url = "https://a/c", .account = "a", .key = AZURITE_KEY, .sas = "sv=x" };
    CHECK(blob_container_new(g_http, g_pool, &both, err, sizeof err) == NULL);
    CHECK_CONTAINS(err, "exactly one");
}

static void test_create_and_exists(void)
{
    struct blob_container *c = container("basics", AZURITE_KEY, NULL, 0);
    create(c);
    create(c);                                  /* already there: fine */
    CHECK(!exists(c, "nothing/here"));
    char *f = path_in("one.txt");
    write_text(f, "one");
    CHECK_OK(upload(c, f, "dir/one.txt", NULL));
    CHECK(exists(c, "dir/one.txt"));
    free(f);
    blob_container_free(c);
}

/* A tree with nested directories, odd names and an empty file. */
static void make_tree(const char *root, int files_per_dir)
{
    static const char *const names[] = { "plain.txt", "with space.bin", "a&b=c?.dat", "ünïcødé 日本.txt",
                                         "sub/deeper/x.txt", "sub/y z/%41.txt", "empty" };
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        char *p = xasprintf("%s/%s", root, names[i]);
        size_t len = strcmp(names[i], "empty") == 0 ? 0 : 1000 + i * 777;
        char *data = pattern(len, (unsigned)i);
        write_bytes(p, data, len);
        free(data);
        free(p);
    }
    for (int i = 0; i < files_per_dir; i++) {
        char *p = xasprintf("%s/many/f%03d", root, i);
        char *data = pattern(100, (unsigned)(1000 + i));
        write_bytes(p, data, 100);
        free(data);
        free(p);
    }
}

static bool same_tree(const char *a, const char *b, int files_per_dir)
{
    static const char *const names[] = { "plain.txt", "with space.bin", "a&b=c?.dat", "ünïcødé 日本.txt",
                                         "sub/deeper/x.txt", "sub/y z/%41.txt", "empty" };
    bool same = true;
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        char *x = xasprintf("%s/%s", a, names[i]), *y = xasprintf("%s/%s", b, names[i]);
        same &= same_file(x, y);
        free(x);
        free(y);
    }
    for (int i = 0; i < files_per_dir; i++) {
        char *x = xasprintf("%s/many/f%03d", a, i), *y = xasprintf("%s/many/f%03d", b, i);
        same &= same_file(x, y);
        free(x);
        free(y);
    }
    return same;
}

static bool has_flowpart(const char *dir)
{
    char *cmd = xasprintf("find '%s' -name '*.flowpart' | grep -q .", dir);
    int rc = system(cmd);
    free(cmd);
    return rc == 0;
}

/* Pages of 2 blobs: the listing must follow NextMarker to see them all. */
static void test_folder_round_trip_paged(void)
{
    struct blob_container *c = container("tree", AZURITE_KEY, NULL, 2);
    create(c);
    char *src = path_in("tree-src"), *dst = path_in("tree-dst");
    make_tree(src, 9);
    struct blob_progress p;
    CHECK_OK(upload(c, src, "runs/r1/out", &p));
    CHECK(p.files_total == 16 && p.files_done == 16 && p.files_skipped == 0);
    CHECK(p.bytes_sent == p.bytes_total && p.bytes_done == p.bytes_total);
    CHECK(exists(c, "runs/r1/out/ünïcødé 日本.txt"));
    CHECK(exists(c, "runs/r1/out/a&b=c?.dat"));

    /* the same folder again: one listing, nothing sent */
    CHECK_OK(upload(c, src, "runs/r1/out/", &p));
    CHECK(p.files_skipped == 16 && p.bytes_sent == 0 && p.bytes_done == p.bytes_total);

    /* one file changed: only it goes */
    char *changed = xasprintf("%s/many/f004", src);
    write_text(changed, "changed");
    CHECK_OK(upload(c, src, "runs/r1/out", &p));
    CHECK(p.files_skipped == 15 && p.bytes_sent == 7);
    free(changed);

    CHECK_OK(download(c, "runs/r1/out", true, dst, &p));
    CHECK(p.files_total == 16 && p.files_done == 16 && p.files_skipped == 0);
    CHECK(same_tree(src, dst, 9));
    CHECK(!has_flowpart(dst));

    /* downloaded again: every file is kept */
    CHECK_OK(download(c, "runs/r1/out", true, dst, &p));
    CHECK(p.files_skipped == 16 && p.bytes_sent == 0);

    /* a prefix with nothing under it is an error naming it */
    char *e = download(c, "runs/none", true, dst, NULL);
    CHECK_CONTAINS(e, "no blob under runs/none");
    free(e);
    free(src);
    free(dst);
    blob_container_free(c);
}

/* What is on the datastore, without moving it: one hash that changes when
 * any blob under the prefix does (paged: pages of 2). */
static void test_stat_names_what_is_there(void)
{
    struct blob_container *c = container("stat", AZURITE_KEY, NULL, 2);
    create(c);
    char *src = path_in("stat-src"), *err = NULL;
    make_tree(src, 3);
    CHECK_OK(upload(c, src, "data/set", NULL));
    char *h1 = stat_hash(c, "data/set", true, &err);
    CHECK(h1 && !err);
    char *h2 = stat_hash(c, "data/set", true, &err);
    CHECK_STR(h1, h2);
    char *changed = xasprintf("%s/many/f001", src);
    write_text(changed, "changed");
    CHECK_OK(upload(c, src, "data/set", NULL));
    char *h3 = stat_hash(c, "data/set", true, &err);
    CHECK(h3 && h1 && strcmp(h1, h3) != 0);
    char *one = stat_hash(c, "data/set/plain.txt", false, &err);
    CHECK(one && !err);
    char *none = stat_hash(c, "data/nothing", true, &err);
    CHECK(none == NULL);
    CHECK_CONTAINS(err, "there is no blob under data/nothing");
    free(err);
    free(changed);
    free(h1);
    free(h2);
    free(h3);
    free(one);
    free(src);
    blob_container_free(c);
}

/* Above BLOB_BLOCK_THRESHOLD: Put Block ×5 + Put Block List; down in 5 ranges. */
static void test_large_file_blocks_and_ranges(void)
{
    struct blob_container *c = container("large", AZURITE_KEY, NULL, 0);
    create(c);
    size_t len = (40u << 20) + 12345;
    char *data = pattern(len, 7);
    char *src = path_in("large.bin"), *dst = path_in("large-dst/sub/large.bin");
    write_bytes(src, data, len);
    free(data);
    struct blob_progress p;
    double t0 = monotonic_seconds();
    CHECK_OK(upload(c, src, "big/large.bin", &p));
    CHECK(p.bytes_sent == len && p.files_done == 1);
    double t1 = monotonic_seconds();
    CHECK_OK(download(c, "big/large.bin", false, dst, &p));
    CHECK(p.bytes_sent == len && p.files_done == 1);
    double t2 = monotonic_seconds();
    printf("  40 MB: up %.2f s, down %.2f s\n", t1 - t0, t2 - t1);
    CHECK(same_file(src, dst));
    /* again: the HEAD finds the same size and MD5 (x-ms-blob-content-md5 of the block list) */
    CHECK_OK(upload(c, src, "big/large.bin", &p));
    CHECK(p.files_skipped == 1 && p.bytes_sent == 0);
    CHECK_OK(download(c, "big/large.bin", false, dst, &p));
    CHECK(p.files_skipped == 1 && p.bytes_sent == 0);
    free(src);
    free(dst);
    blob_container_free(c);
}

static size_t files_in(const char *dst, int n)
{
    size_t present = 0;
    for (int i = 0; i < n; i++) {
        char *d = xasprintf("%s/f%02d.bin", dst, i);
        present += access(d, F_OK) == 0;
        free(d);
    }
    return present;
}

/* Cancelled half-way: no partial file under a real name, and a second run
 * keeps what the first finished. */
static void test_download_resumes_after_cancel(void)
{
    struct blob_container *c = container("resume", AZURITE_KEY, NULL, 0);
    create(c);
    char *src = path_in("resume-src"), *dst = path_in("resume-dst");
    for (int i = 0; i < 24; i++) {
        char *p = xasprintf("%s/f%02d.bin", src, i);
        size_t len = (size_t)(3u << 20) + (size_t)i;
        char *data = pattern(len, (unsigned)(50 + i));
        write_bytes(p, data, len);
        free(data);
        free(p);
    }
    CHECK_OK(upload(c, src, "r", NULL));

    /* cancelled once 4 files are in place (progress calls are too sparse to
     * catch a local download half-way) */
    struct outcome o = { 0 };
    struct step_wait *w = blob_download(c, "r", true, dst, on_progress, on_done, &o);
    double until = monotonic_seconds() + 30;
    while (!o.done && files_in(dst, 24) < 4 && monotonic_seconds() < until) loop_run_once(g_loop, 0.01);
    CHECK(!o.done);
    step_wait_cancel(w, CANCEL_GRACEFUL);
    char *e = finish(w, &o);
    CHECK_STR(e, "cancelled");
    free(e);
    size_t finished = blob_wait_progress(w)->files_done;
    step_wait_free(w);
    CHECK(finished >= 4 && finished < 24);
    size_t present = 0;
    for (int i = 0; i < 24; i++) {
        char *s = xasprintf("%s/f%02d.bin", src, i), *d = xasprintf("%s/f%02d.bin", dst, i);
        if (access(d, F_OK) == 0) {
            present++;
            CHECK(same_file(s, d));                 /* a final name holds a whole file */
        }
        free(s);
        free(d);
    }
    CHECK(present == finished);

    struct blob_progress p;
    CHECK_OK(download(c, "r", true, dst, &p));
    CHECK(p.files_skipped == finished && p.files_done == 24);
    CHECK(!has_flowpart(dst));
    for (int i = 0; i < 24; i++) {
        char *s = xasprintf("%s/f%02d.bin", src, i), *d = xasprintf("%s/f%02d.bin", dst, i);
        CHECK(same_file(s, d));
        free(s);
        free(d);
    }
    free(src);
    free(dst);
    blob_container_free(c);
}

static void test_cancel_before_anything_happened(void)
{
    struct blob_container *c = container("basics", AZURITE_KEY, NULL, 0);
    char *src = path_in("tree-src");
    struct outcome o = { 0 };
    struct step_wait *w = blob_upload(c, src, "cancelled", NULL, on_done, &o);
    step_wait_cancel(w, CANCEL_FORCED);
    CHECK(!o.done);                             /* never synchronously */
    step_wait_cancel(w, CANCEL_FORCED);         /* again: harmless */
    char *e = finish(w, &o);
    CHECK_STR(e, "cancelled");
    free(e);
    step_wait_cancel(w, CANCEL_GRACEFUL);       /* after done: nothing */
    step_wait_free(w);
    free(src);
    blob_container_free(c);
}

static void test_wrong_key_message(void)
{
    struct blob_container *c = container("basics", WRONG_KEY, NULL, 0);
    char *f = path_in("one.txt");
    char *e = upload(c, f, "dir/two.txt", NULL);
    CHECK_CONTAINS(e, "cannot upload");
    CHECK_CONTAINS(e, "HTTP 403, x-ms-request-id ");
    CHECK_CONTAINS(e, "Authorization");
    CHECK(e && !strstr(e, WRONG_KEY) && !strstr(e, AZURITE_KEY));
    free(e);
    e = download(c, "tree", true, f, NULL);
    CHECK_CONTAINS(e, "cannot list basics/tree: ");
    CHECK_CONTAINS(e, "HTTP 403");
    free(e);
    free(f);
    blob_container_free(c);
}

/* A container SAS as the service defines it for version 2021-08-06 (the
 * same fields as tests/aml/aml_blob.py's sas_query). */
static char *container_sas(const char *container_name, const char *perms, int lifetime)
{
    time_t end = time(NULL) + lifetime;
    struct tm tm;
    gmtime_r(&end, &tm);
    char se[32];
    strftime(se, sizeof se, "%Y-%m-%dT%H:%M:%SZ", &tm);
    char *sts = xasprintf("%s\n\n%s\n/blob/" ACCOUNT "/%s\n\n\n\n2021-08-06\nc\n\n\n\n\n\n\n", perms, se,
                          container_name);
    unsigned char key[64], mac[32];
    unsigned mac_len = 0;
    EVP_DecodeBlock(key, (const unsigned char *)AZURITE_KEY, (int)strlen(AZURITE_KEY));
    HMAC(EVP_sha256(), key, 64, (const unsigned char *)sts, strlen(sts), mac, &mac_len);
    char sig[64];
    EVP_EncodeBlock((unsigned char *)sig, mac, (int)mac_len);
    char *se_enc = http_urlencode(se), *sig_enc = http_urlencode(sig);
    char *q = xasprintf("sv=2021-08-06&se=%s&sr=c&sp=%s&sig=%s", se_enc, perms, sig_enc);
    free(se_enc);
    free(sig_enc);
    free(sts);
    return q;
}

static void test_sas(void)
{
    struct blob_container *admin = container("sas", AZURITE_KEY, NULL, 0);
    create(admin);
    blob_container_free(admin);
    char *sas = container_sas("sas", "racwl", 3600);
    char *with_q = xasprintf("?%s", sas);
    struct blob_container *c = container("sas", NULL, with_q, 3);
    char *src = path_in("tree-src"), *dst = path_in("sas-dst");
    struct blob_progress p;
    CHECK_OK(upload(c, src, "via-sas", &p));
    CHECK(p.files_done == 16 && p.files_skipped == 0);
    CHECK(exists(c, "via-sas/plain.txt"));
    CHECK_OK(upload(c, src, "via-sas", &p));
    CHECK(p.files_skipped == 16);
    CHECK_OK(download(c, "via-sas", true, dst, NULL));
    CHECK(same_tree(src, dst, 9));
    blob_container_free(c);

    /* read-only: an upload fails, and the message holds no part of the SAS */
    char *ro = container_sas("sas", "rl", 3600);
    c = container("sas", NULL, ro, 0);
    char *e = upload(c, src, "denied", NULL);
    CHECK_CONTAINS(e, "HTTP 403");
    CHECK(e && !strstr(e, "sig=") && !strstr(e, "sv=2021"));
    free(e);
    blob_container_free(c);
    free(ro);
    free(sas);
    free(with_q);
    free(src);
    free(dst);
}

/* http_server.py's version v of its changing blob: `size` + 1000 v bytes. */
static char *version_bytes(unsigned v, size_t size)
{
    char *p = xmalloc(size);
    for (size_t i = 0; i < size; i++) p[i] = (char)((7 * (i % 251) + 13 * v) % 251);
    return p;
}

/* Which version each BLOB_RANGE_SIZE range of a file came from, for a
 * message ("0 1": torn, the first range of version 0, the next of 1). */
static void say_versions(const char *got, size_t len)
{
    fprintf(stderr, "  its ranges are of versions:");
    for (size_t at = 0; at < len; at += BLOB_RANGE_SIZE) {
        size_t n = len - at < BLOB_RANGE_SIZE ? len - at : BLOB_RANGE_SIZE;
        int found = -1;
        for (unsigned v = 0; v < 8 && found < 0; v++) {
            char *want = version_bytes(v, at + n);
            if (memcmp(got + at, want + at, n) == 0) found = (int)v;
            free(want);
        }
        fprintf(stderr, found < 0 ? " ?" : " %d", found);
    }
    fprintf(stderr, "\n");
}

static bool file_is_version(const char *path, unsigned v, size_t size)
{
    size_t len;
    char *got = read_file(path, &len), *want = version_bytes(v, size + 1000 * v);
    bool same = got && len == size + 1000 * v && memcmp(got, want, len) == 0;
    if (!same && got) {
        fprintf(stderr, "  %s: %zu bytes, not version %u's %zu\n", path, len, v, size + 1000 * v);
        say_versions(got, len);
    } else if (!got) {
        fprintf(stderr, "  %s: %s\n", path, strerror(errno));
    }
    free(got);
    free(want);
    return same;
}

/* The container /changing of http_server.py, its knobs in the query (where
 * a SAS goes): key (its own blob), change (listing or range), times, size. */
static struct blob_container *changing_container(struct http_client *h, const char *knobs)
{
    char *url = xasprintf("https://127.0.0.1:%d/changing", g_https_port);
    struct blob_container_spec spec = { .url = url, .sas = knobs };
    char err[512];
    struct blob_container *c = blob_container_new(h, g_pool, &spec, err, sizeof err);
    if (!c) check_die("blob_container_new: %s", err);
    free(url);
    return c;
}

/* A blob rewritten between two range GETs of one download (the first range
 * answered, then the blob changes, before any other is): each range carries
 * If-Match with the listed ETag, the service refuses the rest (412), and the
 * blob is looked up and downloaded again: the file is the new version whole,
 * never the old one's first 8 MB and the new one's rest.  The same when the
 * blob changes between its listing and its only range (a size the listing
 * did not give), and a blob that keeps changing fails, saying so. */
static void test_download_pinned_to_etag(void)
{
    struct http_options o = { .ca_file = g_https_ca, .connect_timeout = 5, .timeout = 30, .max_retries = 2,
                              .backoff_base = 0.05, .backoff_max = 0.2 };
    char err[256];
    struct http_client *h = http_client_new(g_loop, &o, err, sizeof err);
    if (!h) check_die("http_client_new: %s", err);
    size_t big = BLOB_RANGE_SIZE + 5000;            /* two ranges */
    struct blob_progress p;

    char *knobs = xasprintf("key=torn&change=range&times=1&size=%zu", big);
    struct blob_container *c = changing_container(h, knobs);
    char *dst = path_in("changing/big.bin");
    CHECK_OK(download(c, "big.bin", false, dst, &p));
    CHECK(file_is_version(dst, 1, big));
    CHECK(p.files_done == 1 && p.bytes_total == big + 1000 && p.bytes_done == p.bytes_total);
    char *dir = path_in("changing");
    CHECK(!has_flowpart(dir));
    free(dir);
    blob_container_free(c);
    free(knobs);
    free(dst);

    /* listed (List Blobs' ETag comes unquoted), then rewritten larger: its
     * one range would have been the new version's first 3000 bytes */
    c = changing_container(h, "key=listed&change=listing&times=1&size=3000");
    dst = path_in("changing/folder");
    CHECK_OK(download(c, "d", true, dst, &p));
    char *file = path_in("changing/folder/x.bin");
    CHECK(file_is_version(file, 1, 3000));
    CHECK(p.files_done == 1 && p.bytes_total == 4000 && p.bytes_done == 4000);
    blob_container_free(c);
    free(file);
    free(dst);

    knobs = xasprintf("key=busy&change=range&times=1000&size=%zu", big);
    c = changing_container(h, knobs);
    dst = path_in("changing/busy.bin");
    char *e = download(c, "busy.bin", false, dst, &p), want[160];
    snprintf(want, sizeof want, "the blob changed while it was being downloaded, %d times in a row",
             BLOB_CHANGED_RETRIES + 1);
    CHECK_CONTAINS(e, "cannot download changing/busy.bin to ");
    CHECK_CONTAINS(e, want);
    CHECK(e && !strstr(e, "key=busy"));             /* the query (a SAS) stays out */
    CHECK(access(dst, F_OK) != 0 && errno == ENOENT);
    CHECK(p.files_done == 0 && p.bytes_done <= p.bytes_total);
    free(e);
    free(dst);
    free(knobs);
    blob_container_free(c);
    http_client_free(h);
}

/* Names a download must not write: our own ".flowpart" files, "..". */
static void test_unsafe_names_refused(void)
{
    struct blob_container *c = container("basics", AZURITE_KEY, NULL, 0);
    char *f = path_in("one.txt"), *dst = path_in("unsafe-dst");
    CHECK_OK(upload(c, f, "bad/x.flowpart", NULL));
    char *e = download(c, "bad", true, dst, NULL);
    CHECK_CONTAINS(e, "the blob name bad/x.flowpart cannot be");
    free(e);
    free(f);
    free(dst);
    blob_container_free(c);
}

int main(void)
{
    const char *proxies[] = { "http_proxy", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY", NULL };
    for (int i = 0; proxies[i]; i++) unsetenv(proxies[i]);
    if (!mkdtemp(g_dir)) check_die("mkdtemp: %s", strerror(errno));
    char err[256];
    g_loop = loop_new(err, sizeof err);
    if (!g_loop) check_die("loop_new: %s", err);
    g_pool = work_pool_new(g_loop, 4, err, sizeof err);
    if (!g_pool) check_die("work_pool_new: %s", err);
    struct http_options o = { .connect_timeout = 5, .timeout = 30, .max_retries = 2, .backoff_base = 0.05,
                              .backoff_max = 0.2 };
    g_http = http_client_new(g_loop, &o, err, sizeof err);
    if (!g_http) check_die("http_client_new: %s", err);
    double start = monotonic_seconds();
    RUN(test_shared_key_vectors);
    RUN(test_container_spec_checked);
    if (start_azurite()) {
        RUN(test_create_and_exists);
        RUN(test_folder_round_trip_paged);
        RUN(test_stat_names_what_is_there);
        RUN(test_large_file_blocks_and_ranges);
        RUN(test_download_resumes_after_cancel);
        RUN(test_cancel_before_anything_happened);
        RUN(test_wrong_key_message);
        RUN(test_sas);
        RUN(test_unsafe_names_refused);
        stop_azurite();
    } else {
        printf("SKIP test_aml_blob: Azurite could not be installed (tools/azurite.sh); "
               "only the signing tests and the test server's ran\n");
    }
    start_test_server();
    RUN(test_download_pinned_to_etag);
    stop_test_server();
    printf("  all: %.2f s\n", monotonic_seconds() - start);
    http_client_free(g_http);
    work_pool_free(g_pool);
    loop_free(g_loop);
    char *cmd = xasprintf("rm -rf '%s'", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", g_dir);
    free(cmd);
    return CHECK_DONE("test_aml_blob");
}
