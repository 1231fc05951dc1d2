/* test_aml_http.c — the Azure ML HTTP client (engine/azureml/http.c) against
 * a local HTTPS server (tests/unit/http_server.py): answers and bodies, the
 * retry policy, cancellation and re-entrancy, connection reuse, TLS trust,
 * and that no query string or header reaches a message. */
#include "azureml/curl_lib.h"
#include "azureml/http.h"
#include "check_server.h"
#include "hash.h"
#include "loop.h"
#include "util.h"

#include <cjson/cJSON.h>
#include <curl/curl.h>

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

static struct loop *g_loop;
static char g_dir[] = "/tmp/flow-test-http-XXXXXX";
static int g_port_a, g_port_b;           /* certificates from CA A, from CA B */
static char *g_ca_a, *g_capath_b;
static struct strbuf g_trace;            /* every trace line, each ending in '\n' */

/* ---- the server ------------------------------------------------------- */

/* What User-Agent must say: "flow/" and stdlib/flow.lua's VERSION (http.c
 * has its own copy of the version; this catches the two drifting apart). */
static char g_user_agent[64];

static void read_version(const char *root)
{
    char *path = xasprintf("%s/stdlib/flow.lua", root);
    char *text = read_file(path, NULL);
    const char *v = text ? strstr(text, "VERSION = \"") : NULL;
    if (!v) check_die("cannot find VERSION in %s", path);
    v += strlen("VERSION = \"");
    snprintf(g_user_agent, sizeof g_user_agent, "flow/%.*s", (int)strcspn(v, "\""), v);
    free(text);
    free(path);
}

static void start_server(void)
{
    if (!mkdtemp(g_dir)) check_die("mkdtemp: %s", strerror(errno));
    char *root = check_repo_root_or_die();
    char *script = xasprintf("%s/tests/unit/http_server.py", root);
    read_version(root);
    free(root);
    if (access("/usr/bin/python3", X_OK) != 0) check_die("/usr/bin/python3 is needed to run the test server");
    if (access(script, R_OK) != 0) check_die("cannot read %s: %s", script, strerror(errno));
    char *argv[] = { "/usr/bin/python3", script, g_dir, NULL };
    check_start_server(argv, NULL);
    free(script);
    char *ports = xasprintf("%s/ports", g_dir);
    for (int i = 0; i < 200; i++) {                 /* at most 10 s: making the CAs takes ~0.3 s */
        FILE *f = fopen(ports, "r");
        if (f) {
            int n = fscanf(f, "%d %d", &g_port_a, &g_port_b);
            fclose(f);
            if (n == 2) break;
        }
        if (check_server_exited()) check_die("the test server exited (is the openssl command installed?)");
        nanosleep(&(struct timespec){ 0, 50000000 }, NULL);
    }
    free(ports);
    if (!g_port_a || !g_port_b) check_die("the test server did not start within 10 s");
    g_ca_a = xasprintf("%s/ca_a.pem", g_dir);
    g_capath_b = xasprintf("%s/capath_b", g_dir);
}

static void stop_server(void)
{
    check_stop_server(SIGKILL);
    char *cmd = xasprintf("rm -rf '%s'", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", g_dir);
    free(cmd);
}

/* ---- requests and what came back -------------------------------------- */

struct result {
    bool called;
    long status;
    char *body, *request_id, *client_request_id, *location, *content_type, *error, *url, *message;
    size_t body_len;
    double retry_after, at;
    int attempts;
    bool cancelled;
};

static void on_done(void *arg, const struct http_response *r)
{
    struct result *res = arg;
    char msg[1024];
    CHECK(!res->called);                            /* exactly once */
    http_error_message(r, msg, sizeof msg);
    CHECK(r->body && r->body[r->body_len] == '\0');
    *res = (struct result){
        .called = true, .status = r->status, .body = xstrndup(r->body, r->body_len), .body_len = r->body_len,
        .request_id = xstrdup(r->request_id), .client_request_id = xstrdup(r->client_request_id),
        .location = r->location ? xstrdup(r->location) : NULL,
        .content_type = r->content_type ? xstrdup(r->content_type) : NULL,
        .error = r->error ? xstrdup(r->error) : NULL, .url = xstrdup(r->url), .message = xstrdup(msg),
        .retry_after = r->retry_after, .at = monotonic_seconds(), .attempts = r->attempts,
        .cancelled = r->cancelled,
    };
}

static void result_free(struct result *r)
{
    free(r->body);
    free(r->request_id);
    free(r->client_request_id);
    free(r->location);
    free(r->content_type);
    free(r->error);
    free(r->url);
    free(r->message);
    *r = (struct result){ 0 };
}

static void on_trace(void *ctx, const char *line)
{
    (void)ctx;
    sb_adds(&g_trace, line);
    sb_addc(&g_trace, '\n');
}

static const char *trace_text(void) { return g_trace.buf ? g_trace.buf : ""; }

/* Fast retries, the test CA, tracing. */
static struct http_options quick(void)
{
    return (struct http_options){ .ca_file = g_ca_a, .connect_timeout = 2, .timeout = 5, .max_retries = 3,
                                  .backoff_base = 0.05, .backoff_max = 0.2, .trace = on_trace };
}

static struct http_client *client(struct http_options o)
{
    char err[256];
    struct http_client *c = http_client_new(g_loop, &o, err, sizeof err);
    if (!c) check_die("http_client_new: %s", err);
    return c;
}

static char *url_a(const char *path) { return xasprintf("https://127.0.0.1:%d%s", g_port_a, path); }

static struct http_transfer *send_req(struct http_client *c, const struct http_request *req, struct result *r)
{
    char err[256];
    struct http_transfer *t = http_send(c, req, on_done, r, err, sizeof err);
    if (!t) fprintf(stderr, "  http_send: %s\n", err);
    CHECK(t != NULL);
    CHECK(!r->called);                              /* never from within http_send */
    return t;
}

/* Runs the loop until all n results came, at most max_s seconds. */
static bool wait_all(struct result *r, size_t n, double max_s)
{
    double until = monotonic_seconds() + max_s;
    for (;;) {
        size_t called = 0;
        for (size_t i = 0; i < n; i++) called += r[i].called;
        if (called == n) return true;
        if (monotonic_seconds() > until) return false;
        loop_run_once(g_loop, 0.05);
    }
}

static void run_for(double s)
{
    double until = monotonic_seconds() + s;
    while (monotonic_seconds() < until) loop_run_once(g_loop, until - monotonic_seconds());
}

/* One request on its own client, waited for. */
static void fetch(struct http_options o, const struct http_request *req, struct result *r)
{
    struct http_client *c = client(o);
    send_req(c, req, r);
    CHECK(wait_all(r, 1, 8));
    CHECK(http_client_in_flight(c) == 0);
    http_client_free(c);
}

static bool is_uuid4(const char *s)
{
    if (!s || strlen(s) != 36) return false;
    for (int i = 0; i < 36; i++) {
        bool dash = i == 8 || i == 13 || i == 18 || i == 23;
        if (dash ? s[i] != '-' : !strchr("0123456789abcdef", s[i])) return false;
    }
    return s[14] == '4' && strchr("89ab", s[19]);
}

static const char *echoed_header(const cJSON *echo, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(echo, "headers"), name);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static const char *json_str(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static double json_num(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

/* ---- answers and bodies ------------------------------------------------ */

static void test_get_answer_and_headers(void)
{
    sb_truncate(&g_trace, 0);
    char *u = url_a("/echo?key=get");
    const char *headers[] = { "Accept: application/json", "X-Test: one two", NULL };
    struct result r = { 0 };
    fetch(quick(), &(struct http_request){ .method = "GET", .url = u, .headers = headers }, &r);
    CHECK(r.status == 200);
    CHECK(r.attempts == 1);
    CHECK(!r.cancelled && r.error == NULL);
    CHECK(strncmp(r.request_id, "req-", 4) == 0);
    CHECK_STR(r.content_type, "application/json");
    CHECK_STR(r.location, "https://127.0.0.1/somewhere/else");
    CHECK(r.retry_after < 0);
    CHECK(is_uuid4(r.client_request_id));
    cJSON *echo = cJSON_Parse(r.body);
    CHECK_STR(json_str(echo, "method"), "GET");
    CHECK_STR(echoed_header(echo, "x-test"), "one two");
    CHECK_STR(echoed_header(echo, "accept"), "application/json");
    CHECK_STR(echoed_header(echo, "user-agent"), g_user_agent);
    CHECK_STR(echoed_header(echo, "x-ms-client-request-id"), r.client_request_id);
    CHECK(echoed_header(echo, "expect") == NULL);
    cJSON_Delete(echo);
    char *line = xasprintf("GET https://127.0.0.1:%d/echo → 200 (x-ms-request-id %s) 0.", g_port_a, r.request_id);
    CHECK_CONTAINS(g_trace.buf, line);
    free(line);
    free(u);
    result_free(&r);
}

static void test_put_json_body(void)
{
    char *u = url_a("/echo");
    const char *body = "{\"properties\": {\"jobType\": \"Command\"}}";
    const char *headers[] = { "Content-Type: application/json", NULL };
    struct result r = { 0 };
    fetch(quick(), &(struct http_request){ .method = "PUT", .url = u, .headers = headers, .body = body,
                                           .body_len = strlen(body) }, &r);
    CHECK(r.status == 200);
    cJSON *echo = cJSON_Parse(r.body);
    char hex[SHA256_HEX_SIZE];
    sha256_hex(body, strlen(body), hex);
    CHECK_STR(json_str(echo, "method"), "PUT");
    CHECK(json_num(echo, "body_len") == (double)strlen(body));
    CHECK_STR(json_str(echo, "sha256"), hex);
    CHECK_STR(echoed_header(echo, "content-type"), "application/json");
    CHECK(echoed_header(echo, "transfer-encoding") == NULL);
    cJSON_Delete(echo);
    free(u);
    result_free(&r);
}

/* POST, PUT and DELETE without a body say Content-Length: 0; HEAD has no body back. */
static void test_methods_without_body(void)
{
    static const char *const methods[] = { "POST", "PUT", "DELETE", "PATCH" };
    char *u = url_a("/echo");
    for (size_t i = 0; i < 4; i++) {
        struct result r = { 0 };
        fetch(quick(), &(struct http_request){ .method = methods[i], .url = u }, &r);
        cJSON *echo = cJSON_Parse(r.body);
        CHECK(r.status == 200);
        CHECK_STR(json_str(echo, "method"), methods[i]);
        CHECK(json_num(echo, "body_len") == 0);
        if (strcmp(methods[i], "DELETE") != 0) CHECK_STR(echoed_header(echo, "content-length"), "0");
        cJSON_Delete(echo);
        result_free(&r);
    }
    struct result r = { 0 };
    fetch(quick(), &(struct http_request){ .method = "HEAD", .url = u }, &r);
    CHECK(r.status == 200);
    CHECK(r.body_len == 0 && strcmp(r.body, "") == 0);
    result_free(&r);
    free(u);
}

/* 5 MiB from the middle of a 6 MiB file, sent twice (the first answer is a
 * 503): the retry reads the range again from its start. */
static void test_body_from_file_range(void)
{
    size_t size = 6u << 20, off = 777, len = 5u << 20;
    char *data = xmalloc(size);
    uint32_t x = 12345;
    for (size_t i = 0; i < size; i++) data[i] = (char)((x = x * 1103515245u + 12345u) >> 24);
    char *path = xasprintf("%s/big.bin", g_dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    CHECK(fd >= 0 && write_all(fd, data, size) == 0 && close(fd) == 0);
    char hex[SHA256_HEX_SIZE];
    sha256_hex(data + off, len, hex);
    free(data);
    char *u = url_a("/status/503?times=1&key=file");
    struct result r = { 0 };
    double start = monotonic_seconds();
    fetch(quick(), &(struct http_request){ .method = "PUT", .url = u, .body_file = path, .body_offset = off,
                                           .body_len_file = len }, &r);
    printf("  5 MiB from a file, sent twice over TLS: %.2f s\n", monotonic_seconds() - start);
    CHECK(r.status == 200);
    CHECK(r.attempts == 2);
    cJSON *echo = cJSON_Parse(r.body);
    CHECK(json_num(echo, "body_len") == (double)len);
    CHECK_STR(json_str(echo, "sha256"), hex);
    CHECK_STR(echoed_header(echo, "content-length"), "5242880");
    cJSON_Delete(echo);
    free(u);
    free(path);
    result_free(&r);
}

/* ---- response headers, a body into a file, signing ----------------------- */

struct seen {
    bool called;
    long status;
    char *location, *request_id, *missing, *body;
    uint64_t sink_written;
    int attempts;
};

static void on_seen(void *arg, const struct http_response *r)
{
    struct seen *s = arg;
    const char *loc = http_response_header(r, "LOCATION"), *rid = http_response_header(r, "x-ms-request-id");
    *s = (struct seen){ .called = true, .status = r->status, .location = loc ? xstrdup(loc) : NULL,
                        .request_id = rid ? xstrdup(rid) : NULL,
                        .missing = http_response_header(r, "x-not-there") ? xstrdup("?") : NULL,
                        .body = xstrndup(r->body, r->body_len), .sink_written = r->sink_written,
                        .attempts = r->attempts };
}

static void seen_free(struct seen *s)
{
    free(s->location);
    free(s->request_id);
    free(s->missing);
    free(s->body);
    *s = (struct seen){ 0 };
}

static void run_seen(const struct http_request *req, struct seen *s)
{
    struct http_client *c = client(quick());
    char err[256];
    CHECK(http_send(c, req, on_seen, s, err, sizeof err) != NULL);
    double until = monotonic_seconds() + 8;
    while (!s->called && monotonic_seconds() < until) loop_run_once(g_loop, 0.05);
    CHECK(s->called);
    http_client_free(c);
}

static void test_response_header_lookup(void)
{
    char *u = url_a("/echo?key=hdr");
    struct seen s = { 0 };
    run_seen(&(struct http_request){ .method = "GET", .url = u }, &s);
    CHECK(s.status == 200);
    CHECK_STR(s.location, "https://127.0.0.1/somewhere/else");    /* any case */
    CHECK(s.request_id && strncmp(s.request_id, "req-", 4) == 0);
    CHECK(s.missing == NULL);
    seen_free(&s);
    free(u);
}

/* A 2xx body goes into the file at the offset, an error's into memory; the
 * retry after a 503 writes from the offset again. */
static void test_body_into_file(void)
{
    char *path = xasprintf("%s/sink.bin", g_dir);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    CHECK(fd >= 0 && write_all(fd, "XXXXXXXXXX", 10) == 0);
    char *u = url_a("/status/503?times=1&key=sink&body=busy");
    struct seen s = { 0 };
    run_seen(&(struct http_request){ .method = "GET", .url = u, .sink = true, .sink_fd = fd, .sink_offset = 5 }, &s);
    CHECK(s.status == 200 && s.attempts == 2);
    CHECK_STR(s.body, "");
    size_t len;
    char *text = read_file(path, &len);
    CHECK(text && len == 5 + s.sink_written && strncmp(text, "XXXXX{", 6) == 0);
    cJSON *echo = text ? cJSON_Parse(text + 5) : NULL;
    CHECK(json_num(echo, "hit") == 2);
    cJSON_Delete(echo);
    free(text);
    seen_free(&s);
    free(u);

    u = url_a("/status/404?body=nope");
    run_seen(&(struct http_request){ .method = "GET", .url = u, .sink = true, .sink_fd = fd }, &s);
    CHECK(s.status == 404 && s.sink_written == 0);
    CHECK_STR(s.body, "nope");
    text = read_file(path, &len);
    CHECK(text && strncmp(text, "XXXXX{", 6) == 0);         /* untouched */
    free(text);
    seen_free(&s);
    free(u);
    close(fd);
    free(path);
}

static int g_signs;

/* Signs with the attempt's own client request id, as Shared Key does. */
static char *sign_echo(void *ctx, const char *method, const char *url, const char *const *headers,
                       uint64_t content_length)
{
    (void)ctx;
    g_signs++;
    CHECK_STR(method, "PUT");
    CHECK_CONTAINS(url, "key=sign");
    CHECK(content_length == 3);
    for (size_t i = 0; headers[i]; i++)
        if (strncmp(headers[i], "x-ms-client-request-id: ", 24) == 0)
            return xasprintf("X-Signed: %s\nX-Also: 1", headers[i] + 24);
    return NULL;
}

static char *sign_refuse(void *ctx, const char *method, const char *url, const char *const *headers,
                         uint64_t content_length)
{
    (void)ctx, (void)method, (void)url, (void)headers, (void)content_length;
    return NULL;
}

static void test_sign_each_attempt(void)
{
    g_signs = 0;
    char *u = url_a("/status/503?times=1&key=sign");
    struct result r = { 0 };
    fetch(quick(), &(struct http_request){ .method = "PUT", .url = u, .body = "abc", .body_len = 3,
                                           .sign = sign_echo }, &r);
    CHECK(r.status == 200 && r.attempts == 2 && g_signs == 2);
    cJSON *echo = cJSON_Parse(r.body);
    CHECK_STR(echoed_header(echo, "x-signed"), r.client_request_id);
    CHECK_STR(echoed_header(echo, "x-also"), "1");
    cJSON_Delete(echo);
    result_free(&r);

    struct http_client *c = client(quick());
    char err[256];
    CHECK(http_send(c, &(struct http_request){ .method = "PUT", .url = u, .sign = sign_refuse }, on_done, &r, err,
                    sizeof err) == NULL);
    CHECK_CONTAINS(err, "cannot sign");
    http_client_free(c);
    free(u);
}

/* ---- the retry policy -------------------------------------------------- */

static void test_429_waits_retry_after(void)
{
    sb_truncate(&g_trace, 0);
    struct http_options o = quick();
    o.backoff_max = 5;
    char *u = url_a("/status/429?times=1&retry_after=1&key=429");
    struct result r = { 0 };
    double start = monotonic_seconds();
    fetch(o, &(struct http_request){ .method = "GET", .url = u }, &r);
    CHECK(r.status == 200);
    CHECK(r.attempts == 2);
    CHECK(r.at - start >= 0.95);
    CHECK(r.at - start < 3);
    CHECK_CONTAINS(g_trace.buf, "/status/429 → 429 (x-ms-request-id req-");
    CHECK_CONTAINS(g_trace.buf, "(retry 1 in 1.0 s)");
    free(u);
    result_free(&r);
}

/* Retry-After as an HTTP date, and azure-core's x-ms-retry-after-ms, on a
 * final answer (202 is not retried): the caller polls by it. */
static void test_retry_after_forms(void)
{
    char date[64];
    time_t when = time(NULL) + 30;
    strftime(date, sizeof date, "%a, %d %b %Y %H:%M:%S GMT", gmtime(&when));
    char *enc = http_urlencode(date), *path = xasprintf("/status/202?retry_after=%s", enc);
    char *u = url_a(path);
    struct result r = { 0 };
    fetch(quick(), &(struct http_request){ .method = "GET", .url = u }, &r);
    CHECK(r.status == 202 && r.attempts == 1);
    CHECK(r.retry_after >= 28 && r.retry_after <= 30);
    result_free(&r);
    free(u);
    u = url_a("/status/202?retry_after=7&retry_after_ms=1500");
    fetch(quick(), &(struct http_request){ .method = "GET", .url = u }, &r);
    CHECK(r.retry_after == 1.5);
    result_free(&r);
    free(u);
    free(path);
    free(enc);
}

/* Each attempt has its own x-ms-client-request-id; the server saw three. */
static void test_503_backoff_then_success(void)
{
    char *u = url_a("/status/503?times=2&key=503");
    struct result r = { 0 };
    fetch(quick(), &(struct http_request){ .method = "GET", .url = u }, &r);
    CHECK(r.status == 200);
    CHECK(r.attempts == 3);
    free(u);
    u = url_a("/seen?of=503");
    struct result seen = { 0 };
    fetch(quick(), &(struct http_request){ .method = "GET", .url = u }, &seen);
    cJSON *root = cJSON_Parse(seen.body), *ids = cJSON_GetObjectItemCaseSensitive(root, "ids");
    CHECK(cJSON_GetArraySize(ids) == 3);
    const char *id[3] = { 0 };
    for (int i = 0; i < 3 && i < cJSON_GetArraySize(ids); i++) {
        id[i] = cJSON_GetArrayItem(ids, i)->valuestring;
        CHECK(is_uuid4(id[i]));
    }
    CHECK(id[0] && id[1] && id[2] && strcmp(id[0], id[1]) != 0 && strcmp(id[1], id[2]) != 0 &&
          strcmp(id[0], id[2]) != 0);
    CHECK_STR(id[2], r.client_request_id);
    cJSON_Delete(root);
    free(u);
    result_free(&r);
    result_free(&seen);
}

static void test_client_errors_not_retried(void)
{
    char *u = url_a("/arm");
    struct result r = { 0 };
    fetch(quick(), &(struct http_request){ .method = "PUT", .url = u, .body = "{}", .body_len = 2 }, &r);
    CHECK(r.status == 400);
    CHECK(r.attempts == 1);
    char *want = xasprintf("BadThing: what went wrong (HTTP 400, x-ms-request-id %s)", r.request_id);
    CHECK_STR(r.message, want);
    free(want);
    free(u);
    result_free(&r);

    u = url_a("/entra");
    fetch(quick(), &(struct http_request){ .method = "POST", .url = u, .body = "a=b", .body_len = 3 }, &r);
    CHECK(r.status == 401);
    CHECK(r.attempts == 1);
    want = xasprintf("invalid_client: AADSTS7000215: Invalid client secret provided. Trace ID: abc "
                     "(HTTP 401, x-ms-request-id %s)", r.request_id);
    CHECK_STR(r.message, want);
    free(want);
    free(u);
    result_free(&r);

    u = url_a("/status/404?body=no%20such%20job");
    fetch(quick(), &(struct http_request){ .method = "GET", .url = u }, &r);
    CHECK(r.status == 404);
    CHECK(r.attempts == 1);
    want = xasprintf("Not Found: no such job (HTTP 404, x-ms-request-id %s)", r.request_id);
    CHECK_STR(r.message, want);
    free(want);
    free(u);
    result_free(&r);
}

static void test_dropped_connection_retried(void)
{
    sb_truncate(&g_trace, 0);
    char *u = url_a("/drop?times=1&key=drop");
    struct result r = { 0 };
    fetch(quick(), &(struct http_request){ .method = "GET", .url = u }, &r);
    CHECK(r.status == 200);
    CHECK(r.attempts == 2);
    CHECK_CONTAINS(g_trace.buf, "/drop → error after 0.");
    CHECK_CONTAINS(g_trace.buf, "(retry 1 in ");
    free(u);
    result_free(&r);
}

static void test_retries_exhausted_last_status(void)
{
    char *u = url_a("/status/503?key=always");
    struct result r = { 0 };
    fetch(quick(), &(struct http_request){ .method = "GET", .url = u, .max_retries = 2 }, &r);
    CHECK(r.status == 503);
    CHECK(r.attempts == 3);
    CHECK(strncmp(r.message, "Service Unavailable (HTTP 503, x-ms-request-id req-", 51) == 0);
    result_free(&r);
    fetch(quick(), &(struct http_request){ .method = "GET", .url = u, .max_retries = -1 }, &r);
    CHECK(r.status == 503);
    CHECK(r.attempts == 1);
    result_free(&r);
    free(u);
}

/* Also: the query string (a SAS signature) is in no trace line and no message. */
static void test_connection_refused(void)
{
    sb_truncate(&g_trace, 0);
    int port = check_loopback_port();
    char *u = xasprintf("https://127.0.0.1:%d/blob?sv=2024&sig=SECRET", port);
    struct result r = { 0 };
    fetch(quick(), &(struct http_request){ .method = "PUT", .url = u, .body = "x", .body_len = 1 }, &r);
    CHECK(r.status == 0);
    CHECK(r.attempts == 4);
    CHECK(!r.cancelled);
    CHECK_CONTAINS(r.error, "onnect");
    char *want = xasprintf("could not reach https://127.0.0.1:%d/blob: ", port);
    CHECK(strncmp(r.message, want, strlen(want)) == 0);
    CHECK_CONTAINS(r.message, "(after 4 attempts)");
    CHECK(strstr(r.message, "SECRET") == NULL);
    CHECK(strstr(trace_text(), "SECRET") == NULL);
    /* base × 2^(n-1) ± 20 %, capped: 0.05, 0.1, then 0.2 (0.16–0.24, capped) */
    double waits[4] = { 0 };
    int n = 0;
    for (const char *p = trace_text(); (p = strstr(p, "(retry ")); p++) {
        int k;
        double w;
        if (sscanf(p, "(retry %d in %lf s)", &k, &w) == 2 && k >= 1 && k <= 3) waits[k] = w, n++;
    }
    CHECK(n == 3);
    CHECK(waits[1] >= 0.04 && waits[1] <= 0.06);
    CHECK(waits[2] >= 0.08 && waits[2] <= 0.12);
    CHECK(waits[3] >= 0.16 && waits[3] <= 0.2);
    free(want);
    free(u);
    result_free(&r);
}

static void test_query_never_traced(void)
{
    sb_truncate(&g_trace, 0);
    char *u = url_a("/status/503?times=1&key=sas&sig=SECRET");
    struct result r = { 0 };
    fetch(quick(), &(struct http_request){ .method = "GET", .url = u }, &r);
    CHECK(r.status == 200 && r.attempts == 2);
    CHECK(strstr(trace_text(), "SECRET") == NULL);
    CHECK(strstr(trace_text(), "?") == NULL);
    CHECK(strstr(r.message, "SECRET") == NULL);
    char *want = xasprintf("https://127.0.0.1:%d/status/503", g_port_a);
    CHECK_STR(r.url, want);
    free(want);
    free(u);
    result_free(&r);
}

static void test_timeout_per_attempt(void)
{
    char *u = url_a("/delay?s=2");
    struct result r = { 0 };
    double start = monotonic_seconds();
    fetch(quick(), &(struct http_request){ .method = "GET", .url = u, .timeout = 0.3, .max_retries = 1 }, &r);
    CHECK(r.status == 0);
    CHECK(r.attempts == 2);
    CHECK_CONTAINS(r.error, "timed out");
    CHECK(r.at - start < 1.9);                      /* the answer would come at 2 s */
    free(u);
    result_free(&r);
}

/* ---- cancellation and re-entrancy -------------------------------------- */

struct cancel_at { struct http_transfer *t; struct result *r; bool done_inside; };

static void cancel_now(void *arg)
{
    struct cancel_at *c = arg;
    http_cancel(c->t);
    c->done_inside = c->r->called;                  /* must stay false */
}

static void test_cancel_during_transfer(void)
{
    struct http_client *c = client(quick());
    char *u = url_a("/delay?s=3");
    static struct result r;
    r = (struct result){ 0 };
    double start = monotonic_seconds();
    static struct cancel_at at;         /* static: the timer must not outlive it, even when a check fails */
    at = (struct cancel_at){ send_req(c, &(struct http_request){ .method = "GET", .url = u }, &r), &r, false };
    loop_add_timer(g_loop, 0.2, cancel_now, &at);
    CHECK(wait_all(&r, 1, 3));
    CHECK(!at.done_inside);
    CHECK(r.cancelled);
    CHECK(r.status == 0);
    CHECK(r.attempts == 1);
    CHECK(r.at - start < 2);                        /* the answer would come at 3 s */
    CHECK_CONTAINS(r.message, "cancelled");
    CHECK(http_client_in_flight(c) == 0);
    http_client_free(c);
    free(u);
    result_free(&r);
}

static void test_cancel_during_retry_wait(void)
{
    struct http_options o = quick();
    o.backoff_max = 10;
    struct http_client *c = client(o);
    char *u = url_a("/status/503?retry_after=5&key=wait");
    static struct result r;
    r = (struct result){ 0 };
    double start = monotonic_seconds();
    static struct cancel_at at;         /* static: the timer must not outlive it, even when a check fails */
    at = (struct cancel_at){ send_req(c, &(struct http_request){ .method = "GET", .url = u }, &r), &r, false };
    loop_add_timer(g_loop, 0.5, cancel_now, &at);  /* the 503 came long before: it waits 5 s */
    CHECK(wait_all(&r, 1, 3));
    CHECK(!at.done_inside);
    CHECK(r.cancelled);
    CHECK(r.status == 0);
    CHECK(r.attempts == 1);
    CHECK(r.at - start < 3);                        /* the retry would be at 5 s */
    CHECK(http_client_in_flight(c) == 0);
    http_client_free(c);
    free(u);
    result_free(&r);
}

/* done sends another request, cancels a third transfer and itself (a no-op). */
struct chain {
    struct http_client *c;
    struct http_transfer *self, *victim;
    struct result *mine, *next, *victim_r;
    char *next_url;
};

static void on_done_chain(void *arg, const struct http_response *resp)
{
    struct chain *ch = arg;
    on_done(ch->mine, resp);
    http_cancel(ch->self);
    http_cancel(ch->victim);
    CHECK(!ch->victim_r->called);
    char err[256];
    CHECK(http_send(ch->c, &(struct http_request){ .method = "GET", .url = ch->next_url }, on_done, ch->next, err,
                    sizeof err) != NULL);
    CHECK(!ch->next->called);
}

static void test_done_may_send_and_cancel(void)
{
    struct http_client *c = client(quick());
    char *echo = url_a("/echo"), *slow = url_a("/delay?s=3");
    struct result r[3] = { { 0 } };
    struct chain ch = { c, NULL, NULL, &r[0], &r[1], &r[2], echo };
    char err[256];
    ch.victim = http_send(c, &(struct http_request){ .method = "GET", .url = slow }, on_done, &r[2], err, sizeof err);
    ch.self = http_send(c, &(struct http_request){ .method = "GET", .url = echo }, on_done_chain, &ch, err,
                        sizeof err);
    CHECK(ch.victim && ch.self);
    CHECK(http_client_in_flight(c) == 2);
    CHECK(wait_all(r, 3, 3));
    CHECK(r[0].status == 200 && !r[0].cancelled);
    CHECK(r[1].status == 200);
    CHECK(r[2].cancelled);
    CHECK(http_client_in_flight(c) == 0);
    http_client_free(c);
    for (int i = 0; i < 3; i++) result_free(&r[i]);
    free(echo);
    free(slow);
}

struct freeing { struct http_client *c; struct result *r; };

static void on_done_free_client(void *arg, const struct http_response *resp)
{
    struct freeing *f = arg;
    on_done(f->r, resp);
    http_client_free(f->c);
}

/* Freeing the client drops the callbacks of what is in flight, running,
 * waiting to retry, or just sent; freeing it from a done callback is allowed. */
static void test_free_with_transfers_in_flight(void)
{
    struct http_options o = quick();
    o.backoff_max = 10;
    struct http_client *c = client(o);
    char *echo = url_a("/echo"), *slow = url_a("/delay?s=3"), *wait = url_a("/status/503?retry_after=5&key=f");
    struct result r[4] = { { 0 } };
    struct freeing f = { c, &r[0] };
    char err[256];
    CHECK(http_send(c, &(struct http_request){ .method = "GET", .url = slow }, on_done, &r[1], err, sizeof err));
    CHECK(http_send(c, &(struct http_request){ .method = "GET", .url = wait }, on_done, &r[2], err, sizeof err));
    run_for(0.3);                                   /* the 503 came, its retry waits */
    CHECK(http_send(c, &(struct http_request){ .method = "GET", .url = echo }, on_done_free_client, &f, err,
                    sizeof err));
    CHECK(wait_all(&r[0], 1, 3));
    if (!r[0].called) http_client_free(c);         /* so nothing calls back into this frame later */
    run_for(0.2);
    CHECK(!r[1].called && !r[2].called);

    c = client(quick());                            /* freed before anything ran */
    CHECK(http_send(c, &(struct http_request){ .method = "GET", .url = echo }, on_done, &r[3], err, sizeof err));
    http_client_free(c);
    run_for(0.2);
    CHECK(!r[3].called);
    for (int i = 0; i < 4; i++) result_free(&r[i]);
    free(echo);
    free(slow);
    free(wait);
}

/* ---- connections and TLS ----------------------------------------------- */

static int connections_on_a(bool reset)
{
    char *u = url_a(reset ? "/stats?reset=1" : "/stats");
    struct result r = { 0 };
    fetch(quick(), &(struct http_request){ .method = "GET", .url = u }, &r);
    cJSON *j = cJSON_Parse(r.body);
    int n = (int)json_num(j, "connections");
    cJSON_Delete(j);
    free(u);
    result_free(&r);
    return n;
}

static void test_many_requests_few_connections(void)
{
    enum { N = 200 };
    connections_on_a(true);
    struct http_options o = quick();
    o.trace = NULL;
    struct http_client *c = client(o);
    char *u = url_a("/echo?key=many");
    struct result *r = xcalloc(N, sizeof *r);
    double start = monotonic_seconds();
    for (int i = 0; i < N; i++) send_req(c, &(struct http_request){ .method = "GET", .url = u }, &r[i]);
    CHECK(http_client_in_flight(c) == N);
    CHECK(wait_all(r, N, 8));
    double took = monotonic_seconds() - start;
    int ok = 0, retried = 0;
    for (int i = 0; i < N; i++) {
        ok += r[i].status == 200;
        retried += r[i].attempts > 1;
        result_free(&r[i]);
    }
    http_client_free(c);
    int conns = connections_on_a(false) - 1;        /* the /stats request's own */
    printf("  %d concurrent requests: %.2f s, %d connections, %d retried\n", N, took, conns, retried);
    CHECK(ok == N);
    CHECK(conns >= 1 && conns <= 8);
    free(r);
    free(u);
}

static void test_tls_untrusted_refused(void)
{
    struct http_options o = quick();
    o.ca_file = NULL;
    char *u = url_a("/echo");
    struct result r = { 0 };
    fetch(o, &(struct http_request){ .method = "GET", .url = u }, &r);
    CHECK(r.status == 0);
    CHECK(r.attempts == 1);                         /* a certificate does not get better */
    CHECK_CONTAINS(r.error, "certificate");
    CHECK_CONTAINS(r.message, "could not reach https://127.0.0.1:");
    free(u);
    result_free(&r);

    /* ca_file trusts its CA, not every server: B's is from another CA. */
    u = xasprintf("https://127.0.0.1:%d/echo", g_port_b);
    fetch(quick(), &(struct http_request){ .method = "GET", .url = u }, &r);
    CHECK(r.status == 0);
    CHECK_CONTAINS(r.error, "certificate");
    free(u);
    result_free(&r);
}

static long blocking_get(int port, const char *cainfo, const char *capath, char *errbuf)
{
    CURL *e = curl_easy_init();
    char *u = xasprintf("https://127.0.0.1:%d/echo", port);
    long status = 0;
    curl_easy_setopt(e, CURLOPT_URL, u);
    curl_easy_setopt(e, CURLOPT_CAINFO, cainfo);
    curl_easy_setopt(e, CURLOPT_CAPATH, capath);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, fwrite);
    FILE *devnull = fopen("/dev/null", "w");
    curl_easy_setopt(e, CURLOPT_WRITEDATA, devnull);
    errbuf[0] = '\0';
    if (curl_easy_perform(e) == CURLE_OK) curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
    fclose(devnull);
    curl_easy_cleanup(e);
    free(u);
    return status;
}

/* What ca_file relies on: with CURLOPT_CAINFO (the extra CA) and CURLOPT_CAPATH
 * (the system's directory) both set, libcurl trusts both; so the public CAs
 * in /etc/ssl/certs stay trusted beside ca_file.  capath_b stands in for the
 * system directory here. */
static void test_tls_cainfo_and_capath_both_trusted(void)
{
    char errbuf[CURL_ERROR_SIZE];
    CHECK(blocking_get(g_port_a, g_ca_a, g_capath_b, errbuf) == 200);
    CHECK(blocking_get(g_port_b, g_ca_a, g_capath_b, errbuf) == 200);
    CHECK(blocking_get(g_port_b, g_ca_a, NULL, errbuf) == 0);
    CHECK_CONTAINS(errbuf, "certificate");
    /* And the client finds a system directory to add ca_file to. */
    char err[256];
    struct http_client *c = http_client_new(g_loop, &(struct http_options){ .ca_file = g_ca_a }, err, sizeof err);
    CHECK(c != NULL);
    http_client_free(c);
    c = http_client_new(g_loop, &(struct http_options){ .ca_file = "/nonexistent/ca.pem" }, err, sizeof err);
    CHECK(c == NULL);
    CHECK_CONTAINS(err, "/nonexistent/ca.pem");
}

/* ---- requests refused at once, and the pure functions ------------------ */

static void check_refused(struct http_client *c, const struct http_request *req, const char *expect)
{
    char err[256] = "";
    struct result r = { 0 };
    CHECK(http_send(c, req, on_done, &r, err, sizeof err) == NULL);
    CHECK_CONTAINS(err, expect);
    CHECK(strstr(err, "SECRET") == NULL);
}

static void test_bad_requests_refused(void)
{
    struct http_client *c = client(quick());
    char *u = url_a("/echo");
    check_refused(c, &(struct http_request){ .method = "FETCH", .url = u }, "unsupported HTTP method");
    check_refused(c, &(struct http_request){ .method = "GET" }, "needs a URL");
    check_refused(c, &(struct http_request){ .method = "GET", .url = "ftp://host/x?sig=SECRET" },
                  "bad URL ftp://host/x");
    check_refused(c, &(struct http_request){ .method = "GET", .url = "https://ho st/x?sig=SECRET" }, "bad URL");
    check_refused(c, &(struct http_request){ .method = "GET", .url = "not a url" }, "bad URL");
    const char *split[] = { "Authorization: Bearer SECRET\r\nX-Injected: 1", NULL };
    check_refused(c, &(struct http_request){ .method = "GET", .url = u, .headers = split }, "header 1");
    const char *nameless[] = { "X-Ok: 1", "SECRET", NULL };
    check_refused(c, &(struct http_request){ .method = "GET", .url = u, .headers = nameless }, "header 2");
    check_refused(c, &(struct http_request){ .method = "GET", .url = u, .body = "x", .body_len = 1 }, "no body");
    check_refused(c, &(struct http_request){ .method = "PUT", .url = u, .body_file = "/nonexistent/f" },
                  "cannot read /nonexistent/f");
    check_refused(c, &(struct http_request){ .method = "PUT", .url = u, .body_file = g_ca_a, .body_offset = 10,
                                             .body_len_file = 1u << 20 }, "fewer than the range");
    CHECK(http_client_in_flight(c) == 0);
    http_client_free(c);
    free(u);
}

static void test_url_for_display(void)
{
    char buf[128];
    http_url_for_display("https://acct.blob.core.windows.net/c/b.zip?sv=2024&sig=SECRET", buf, sizeof buf);
    CHECK_STR(buf, "https://acct.blob.core.windows.net/c/b.zip");
    http_url_for_display("https://user:pw@host:8443/p#frag", buf, sizeof buf);
    CHECK_STR(buf, "https://host:8443/p");
    http_url_for_display("https://host/a@b?x=1", buf, sizeof buf);
    CHECK_STR(buf, "https://host/a@b");
    http_url_for_display("http://169.254.169.254?api-version=1", buf, sizeof buf);
    CHECK_STR(buf, "http://169.254.169.254");
    http_url_for_display("relative/path?q", buf, sizeof buf);
    CHECK_STR(buf, "relative/path");
    http_url_for_display("https://management.azure.com/subscriptions", buf, 12);
    CHECK_STR(buf, "https://man");
}

static void test_urlencode(void)
{
    char *s = http_urlencode("a b/c?d=é~-._Z9&+");
    CHECK_STR(s, "a%20b%2Fc%3Fd%3D%C3%A9~-._Z9%26%2B");
    free(s);
    s = http_urlencode("");
    CHECK_STR(s, "");
    free(s);
}

static void test_error_messages(void)
{
    char buf[512];
    const char *arm = "{\"error\":{\"code\":\"Conflict\",\"message\":\"job x\\nexists\"}}";
    struct http_response r = { .status = 409, .body = arm, .body_len = strlen(arm), .request_id = "" };
    http_error_message(&r, buf, sizeof buf);
    CHECK_STR(buf, "Conflict: job x exists (HTTP 409)");

    const char *odd = "{\"error\":{\"details\":[]}}";   /* neither code nor message */
    r = (struct http_response){ .status = 500, .body = odd, .body_len = strlen(odd), .request_id = "r1" };
    http_error_message(&r, buf, sizeof buf);
    CHECK_STR(buf, "Internal Server Error: {\"error\":{\"details\":[]}} (HTTP 500, x-ms-request-id r1)");

    /* 300 bytes with control characters: one line, 200 bytes of it, marked as cut */
    char body[301];
    for (int i = 0; i < 300; i++) body[i] = i % 50 == 0 ? '\n' : 'a';
    body[300] = '\0';
    r = (struct http_response){ .status = 502, .body = body, .body_len = 300, .request_id = "" };
    http_error_message(&r, buf, sizeof buf);
    CHECK(strncmp(buf, "Bad Gateway: aaa", 16) == 0);
    CHECK(strchr(buf, '\n') == NULL);
    CHECK_CONTAINS(buf, "… (HTTP 502)");
    CHECK(strlen(buf) < 13 + 200 + strlen("… (HTTP 502)") + 1);

    /* the cut does not split a UTF-8 character */
    char utf[300];
    memset(utf, 'a', 199);
    strcpy(utf + 199, "éééé");
    r = (struct http_response){ .status = 503, .body = utf, .body_len = strlen(utf), .request_id = "" };
    http_error_message(&r, buf, sizeof buf);
    CHECK_CONTAINS(buf, "aaa… (HTTP 503)");

    r = (struct http_response){ .status = 0, .error = "Could not resolve host: nowhere", .attempts = 1,
                                .url = "https://nowhere/x", .request_id = "", .body = "" };
    http_error_message(&r, buf, sizeof buf);
    CHECK_STR(buf, "could not reach https://nowhere/x: Could not resolve host: nowhere (after 1 attempt)");

    char small[16];
    http_error_message(&r, small, sizeof small);
    CHECK(strlen(small) == 15);
}

/* libcurl is opened when the first client is made: a missing library or
 * function is a message naming it, never a crash. */
static void test_curl_lib_open(void)
{
    struct curl_lib lib;
    char err[512];
    CHECK(curl_lib_open("libflow-no-such-curl.so.9", &lib, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "cannot load libcurl (libflow-no-such-curl.so.9)");
    CHECK_CONTAINS(err, "libcurl4");
    CHECK(curl_lib_open("libc.so.6", &lib, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "libc.so.6 has no curl_global_init: libcurl 7.85 or newer is needed");
    CHECK(curl_lib_open(CURL_LIB_SONAME, &lib, err, sizeof err) == 0);
    CHECK_STR(lib.easy_strerror(CURLE_OK), curl_easy_strerror(CURLE_OK));
    CHECK(curl_lib_load(err, sizeof err) != NULL);
}

int main(void)
{
    const char *proxies[] = { "http_proxy", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY", NULL };
    for (int i = 0; proxies[i]; i++) unsetenv(proxies[i]);
    start_server();
    char err[256];
    g_loop = loop_new(err, sizeof err);
    if (!g_loop) check_die("loop_new: %s", err);
    double start = monotonic_seconds();
    RUN(test_curl_lib_open);
    RUN(test_url_for_display);
    RUN(test_urlencode);
    RUN(test_error_messages);
    RUN(test_bad_requests_refused);
    RUN(test_get_answer_and_headers);
    RUN(test_put_json_body);
    RUN(test_methods_without_body);
    RUN(test_body_from_file_range);
    RUN(test_response_header_lookup);
    RUN(test_body_into_file);
    RUN(test_sign_each_attempt);
    RUN(test_429_waits_retry_after);
    RUN(test_retry_after_forms);
    RUN(test_503_backoff_then_success);
    RUN(test_client_errors_not_retried);
    RUN(test_dropped_connection_retried);
    RUN(test_retries_exhausted_last_status);
    RUN(test_connection_refused);
    RUN(test_query_never_traced);
    RUN(test_timeout_per_attempt);
    RUN(test_cancel_during_transfer);
    RUN(test_cancel_during_retry_wait);
    RUN(test_done_may_send_and_cancel);
    RUN(test_free_with_transfers_in_flight);
    RUN(test_many_requests_few_connections);
    RUN(test_tls_untrusted_refused);
    RUN(test_tls_cainfo_and_capath_both_trusted);
    printf("  all: %.2f s\n", monotonic_seconds() - start);
    loop_free(g_loop);
    stop_server();
    free(g_ca_a);
    free(g_capath_b);
    sb_release(&g_trace);
    return CHECK_DONE("test_aml_http");
}
