/* http.c — see http.h.  One libcurl multi handle per client, driven by the
 * engine's loop: libcurl says which sockets to watch and when to wake it
 * (CURLMOPT_SOCKETFUNCTION, CURLMOPT_TIMERFUNCTION), the loop tells libcurl
 * which are ready (curl_multi_socket_action).  A transfer is one easy handle,
 * added to the multi handle again for each attempt; back-offs and the
 * delivery of `done` are loop timers, so nothing here blocks or sleeps. */
#include "azureml/http.h"
#include "azureml/curl_lib.h"
#include "util.h"

#include <cjson/cJSON.h>
#include <curl/curl.h>

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#if LIBCURL_VERSION_NUM < 0x075500
#error "libcurl 7.85 or newer is needed (curl_easy_header, CURLINFO_CAPATH, CURLOPT_PROTOCOLS_STR)"
#endif

/* stdlib/flow.lua's VERSION: a server's logs then say which flow called. */
#define USER_AGENT "flow/0.1.0"
/* Connections to one host at a time; more requests wait in libcurl for one
 * to be free.  Without a limit, 200 requests at once open 200 connections
 * (and 200 TLS handshakes), which ARM's throttling does not reward. */
#define MAX_HOST_CONNECTIONS 8L
/* A response larger than this is an error, not an allocation: ARM answers
 * are kilobytes, and a broken or hostile server must not exhaust memory. */
#define MAX_RESPONSE_BYTES ((size_t)64 << 20)
/* The system's CA directory when libcurl was built without a default one. */
#define FALLBACK_CA_DIR "/etc/ssl/certs"

/* libcurl, loaded by the first client (curl_lib.h); every call below goes
 * through it, and none happens before a client exists. */
static const struct curl_lib *lib;

enum transfer_state {
    T_RUNNING,      /* in the multi handle */
    T_WAITING,      /* between attempts: timer is the back-off */
    T_FINISHED,     /* the outcome is known: timer delivers it */
    T_DELIVERING,   /* done is running; the client no longer lists it */
};

/* What is sent: bytes in memory, or a file's range read as it is sent. */
struct body {
    bool present;
    char *mem;                   /* NULL: the range of fd */
    int fd;                      /* -1 unless a file */
    char *path;                  /* the file, for messages */
    uint64_t offset, len;
    uint64_t pos;                /* how much of it libcurl has taken */
};

/* Where a 2xx answer's body goes instead of memory (http_request.sink). */
struct sink {
    int fd;                      /* ours (a dup); -1: no sink */
    uint64_t offset;
    uint64_t written;            /* by this attempt */
    int decided;                 /* this attempt: 0 not yet, 1 into fd, -1 into memory */
};

struct http_transfer {
    struct http_client *client;
    struct http_transfer *prev, *next;   /* the client's list of transfers not yet delivered */
    enum transfer_state state;
    unsigned long timer;                 /* 0: none */
    CURL *easy;
    char *method, *display_url;          /* display_url: http_url_for_display's */
    char *url;                           /* as sent (for sign; may hold a SAS: wiped) */
    http_sign_fn sign;
    void *sign_ctx;
    char **headers;                      /* the caller's "Name: value" lines, copied */
    size_t n_headers;
    struct curl_slist *sent_headers;     /* this attempt's: those and a fresh request id */
    struct body body;
    struct sink sink;
    int max_retries, attempts;
    double attempt_started;
    http_done_fn done;
    void *arg;
    /* The last attempt's outcome. */
    char errbuf[CURL_ERROR_SIZE];
    CURLcode result;
    char *local_error;                   /* a failure of ours (reading the body file...), or NULL */
    struct strbuf received;
    struct strbuf resp_headers;          /* "name\0value\0" of the answer, names lowercased */
    long status;
    char *error;                         /* status 0: why */
    char *request_id, *location, *content_type;
    double retry_after;
    char client_request_id[37];
    bool cancelled;
};

struct http_client {
    struct loop *loop;
    CURLM *multi;
    struct http_options opt;             /* defaults filled in; opt.ca_file is ca_file */
    char *ca_file, *ca_dir;
    unsigned long timer;                 /* libcurl's timeout as a loop timer; 0: none */
    bool *watched;                       /* indexed by fd: the sockets on the loop */
    size_t n_watched;
    struct http_transfer *transfers;
    size_t n_transfers;
    bool closing;                        /* http_client_free is tearing libcurl down */
    uint64_t rng;                        /* only if getrandom fails */
};

static void collect_finished(struct http_client *c);
static void end_attempt(struct http_transfer *t, CURLcode result);

/* ---- random numbers: request ids and jitter ---------------------------- */

static uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

/* getrandom does not fail for a few bytes on any kernel flow runs on; should
 * it, a seeded generator still makes distinct ids (they correlate requests,
 * they are not secrets). */
static void random_bytes(struct http_client *c, unsigned char *buf, size_t n)
{
    ssize_t got;
    do got = getrandom(buf, n, GRND_NONBLOCK);
    while (got < 0 && errno == EINTR);
    if (got == (ssize_t)n) return;
    for (size_t i = 0; i < n; i++) buf[i] = (unsigned char)splitmix64(&c->rng);
}

static void new_uuid(struct http_client *c, char out[37])
{
    unsigned char b[16];
    random_bytes(c, b, sizeof b);
    b[6] = (unsigned char)((b[6] & 0x0f) | 0x40);     /* version 4 */
    b[8] = (unsigned char)((b[8] & 0x3f) | 0x80);     /* RFC 4122 variant */
    snprintf(out, 37, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
             b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
}

/* Uniform in [0.8, 1.2]: clients that failed together do not retry together. */
static double jitter(struct http_client *c)
{
    uint32_t r;
    random_bytes(c, (unsigned char *)&r, sizeof r);
    return 0.8 + 0.4 * ((double)r / 4294967295.0);
}

/* ---- libcurl's sockets and timer on the loop --------------------------- */

static void on_socket_ready(void *arg, int fd, unsigned events)
{
    struct http_client *c = arg;
    int mask = 0, running;
    if (events & LOOP_READ) mask |= CURL_CSELECT_IN;
    if (events & LOOP_WRITE) mask |= CURL_CSELECT_OUT;
    /* Errors here concern one socket, and libcurl reports them on the
     * transfers that use it (collected below). */
    lib->multi_socket_action(c->multi, fd, mask, &running);
    collect_finished(c);
}

static void set_watched(struct http_client *c, int fd, bool on)
{
    if ((size_t)fd >= c->n_watched) {
        if (!on) return;
        size_t n = (size_t)fd * 2 + 16;
        c->watched = xrealloc(c->watched, n * sizeof *c->watched);
        memset(c->watched + c->n_watched, 0, (n - c->n_watched) * sizeof *c->watched);
        c->n_watched = n;
    }
    c->watched[fd] = on;
}

static void on_watch_failed(void *arg)
{
    struct http_transfer *t = arg;
    t->timer = 0;
    end_attempt(t, CURLE_ABORTED_BY_CALLBACK);
}

/* Returning -1 here would mark the whole multi handle dead: a socket the
 * loop cannot watch fails the one transfer instead, from a timer, since a
 * handle cannot leave the multi handle from within libcurl. */
static void fail_unwatchable(CURL *easy, int err)
{
    struct http_transfer *t = NULL;
    if (!easy || lib->easy_getinfo(easy, CURLINFO_PRIVATE, (char **)&t) != CURLE_OK || !t) return;
    if (t->state != T_RUNNING || t->timer) return;
    free(t->local_error);
    t->local_error = xasprintf("cannot watch a socket: %s", strerror(err));
    t->timer = loop_add_timer(t->client->loop, 0, on_watch_failed, t);
}

static int on_curl_socket(CURL *easy, curl_socket_t fd, int what, void *arg, void *socketp)
{
    struct http_client *c = arg;
    (void)socketp;
    if (c->closing) return 0;                /* http_client_free already unwatched every socket */
    if (what == CURL_POLL_REMOVE) {
        loop_unwatch(c->loop, fd);
        set_watched(c, fd, false);
        return 0;
    }
    unsigned events = 0;
    if (what & CURL_POLL_IN) events |= LOOP_READ;
    if (what & CURL_POLL_OUT) events |= LOOP_WRITE;
    if (loop_watch(c->loop, fd, events, on_socket_ready, c) != 0) {
        fail_unwatchable(easy, errno);
        return 0;
    }
    set_watched(c, fd, true);
    return 0;
}

static void on_curl_timeout(void *arg)
{
    struct http_client *c = arg;
    int running;
    c->timer = 0;
    lib->multi_socket_action(c->multi, CURL_SOCKET_TIMEOUT, 0, &running);
    collect_finished(c);
}

/* libcurl must not be called back into from here, even for a timeout of 0
 * ("now"): a loop timer of 0 s runs it as soon as this call has returned. */
static int on_curl_timer(CURLM *multi, long timeout_ms, void *arg)
{
    struct http_client *c = arg;
    (void)multi;
    if (c->closing) return 0;
    if (c->timer) loop_cancel_timer(c->loop, c->timer);
    c->timer = 0;
    if (timeout_ms >= 0) c->timer = loop_add_timer(c->loop, (double)timeout_ms / 1000.0, on_curl_timeout, c);
    return 0;
}

/* ---- the client -------------------------------------------------------- */

/* The directory of system CAs that stays trusted beside ca_file. */
static char *system_ca_dir(void)
{
    char *dir = NULL;
    CURL *probe = lib->easy_init();
    if (probe && lib->easy_getinfo(probe, CURLINFO_CAPATH, &dir) == CURLE_OK && dir && *dir) dir = xstrdup(dir);
    else dir = xstrdup(FALLBACK_CA_DIR);
    lib->easy_cleanup(probe);
    return dir;
}

static void fill_defaults(struct http_options *o)
{
    if (o->connect_timeout <= 0) o->connect_timeout = 10;
    if (o->timeout <= 0) o->timeout = 120;
    if (o->max_retries == 0) o->max_retries = 10;
    if (o->max_retries < 0) o->max_retries = 0;
    if (o->backoff_base <= 0) o->backoff_base = 0.8;
    if (o->backoff_max <= 0) o->backoff_max = 120;
}

/* libcurl reads ca_file at each new connection: checking it now turns a typo
 * into a message at start instead of a failed request later. */
static bool setup_tls_trust(struct http_client *c, const char *ca_file, char *err, size_t errlen)
{
    if (!ca_file) return true;
    if (access(ca_file, R_OK) != 0) {
        errf(err, errlen, "cannot read the CA file %s: %s", ca_file, strerror(errno));
        return false;
    }
    c->ca_dir = system_ca_dir();
    struct stat st;
    if (stat(c->ca_dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        /* CURLOPT_CAINFO replaces libcurl's default bundle: without the
         * directory, the CA file would be the only trusted one. */
        errf(err, errlen, "the CA file %s would replace the system's CAs: their directory %s is missing "
             "(the ca-certificates package makes it)", ca_file, c->ca_dir);
        return false;
    }
    c->ca_file = xstrdup(ca_file);
    c->opt.ca_file = c->ca_file;
    return true;
}

static bool setup_multi(struct http_client *c)
{
    return lib->multi_setopt(c->multi, CURLMOPT_SOCKETFUNCTION, on_curl_socket) == CURLM_OK &&
           lib->multi_setopt(c->multi, CURLMOPT_SOCKETDATA, c) == CURLM_OK &&
           lib->multi_setopt(c->multi, CURLMOPT_TIMERFUNCTION, on_curl_timer) == CURLM_OK &&
           lib->multi_setopt(c->multi, CURLMOPT_TIMERDATA, c) == CURLM_OK &&
           lib->multi_setopt(c->multi, CURLMOPT_MAX_HOST_CONNECTIONS, MAX_HOST_CONNECTIONS) == CURLM_OK;
}

struct http_client *http_client_new(struct loop *loop, const struct http_options *opt, char *err, size_t errlen)
{
    if (!lib && !(lib = curl_lib_load(err, errlen))) return NULL;
    CURLcode rc = lib->global_init(CURL_GLOBAL_DEFAULT);      /* reference-counted */
    if (rc != CURLE_OK) {
        errf(err, errlen, "cannot initialise libcurl: %s", lib->easy_strerror(rc));
        return NULL;
    }
    struct http_client *c = xcalloc(1, sizeof *c);
    c->loop = loop;
    if (opt) c->opt = *opt;
    c->opt.ca_file = NULL;
    fill_defaults(&c->opt);
    c->rng = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)c;
    if (!setup_tls_trust(c, opt ? opt->ca_file : NULL, err, errlen)) {
        http_client_free(c);
        return NULL;
    }
    c->multi = lib->multi_init();
    if (!c->multi || !setup_multi(c)) {
        errf(err, errlen, "cannot set up libcurl's multi interface");
        http_client_free(c);
        return NULL;
    }
    return c;
}

/* What a transfer held may be a secret (a bearer token in a header, a client
 * secret in a token request's body, a token in its answer): wiped before the
 * memory goes back. */
static void transfer_free(struct http_transfer *t)
{
    if (t->easy) lib->easy_cleanup(t->easy);
    for (struct curl_slist *l = t->sent_headers; l; l = l->next) wipe(l->data, strlen(l->data));
    lib->slist_free_all(t->sent_headers);
    for (size_t i = 0; i < t->n_headers; i++) {
        wipe(t->headers[i], strlen(t->headers[i]));
        free(t->headers[i]);
    }
    free(t->headers);
    wipe(t->body.mem, t->body.mem ? (size_t)t->body.len : 0);
    free(t->body.mem);
    free(t->body.path);
    if (t->body.fd >= 0) close(t->body.fd);
    if (t->sink.fd >= 0) close(t->sink.fd);
    sb_release(&t->resp_headers);
    wipe(t->received.buf, t->received.len);
    sb_release(&t->received);
    free(t->method);
    free(t->display_url);
    wipe_free(t->url);
    free(t->local_error);
    free(t->error);
    free(t->request_id);
    free(t->location);
    free(t->content_type);
    free(t);
}

static void unlink_transfer(struct http_client *c, struct http_transfer *t)
{
    if (t->prev) t->prev->next = t->next;
    else c->transfers = t->next;
    if (t->next) t->next->prev = t->prev;
    t->prev = t->next = NULL;
    c->n_transfers--;
}

/* Callbacks are not called: the caller is going away with the client. */
void http_client_free(struct http_client *c)
{
    if (!c) return;
    while (c->transfers) {
        struct http_transfer *t = c->transfers;
        unlink_transfer(c, t);
        if (t->timer) loop_cancel_timer(c->loop, t->timer);
        if (t->state == T_RUNNING) lib->multi_remove_handle(c->multi, t->easy);
        transfer_free(t);
    }
    /* libcurl closes its cached connections in curl_multi_cleanup, and may or
     * may not say so first: take them off the loop now, while they are open
     * (no other fd can have their numbers), so the loop keeps no watcher
     * that points at this client. */
    c->closing = true;
    for (size_t fd = 0; fd < c->n_watched; fd++)
        if (c->watched[fd]) loop_unwatch(c->loop, (int)fd);
    if (c->multi) lib->multi_cleanup(c->multi);
    if (c->timer) loop_cancel_timer(c->loop, c->timer);
    free(c->watched);
    free(c->ca_file);
    free(c->ca_dir);
    free(c);
    lib->global_cleanup();
}

struct loop *http_client_loop(const struct http_client *c)
{
    return c->loop;
}

size_t http_client_in_flight(const struct http_client *c)
{
    return c->n_transfers;
}

/* ---- the body, read as libcurl sends it -------------------------------- */

static size_t read_body(char *buf, size_t size, size_t nitems, void *arg)
{
    struct http_transfer *t = arg;
    struct body *b = &t->body;
    size_t want = size * nitems;
    if (want > b->len - b->pos) want = (size_t)(b->len - b->pos);
    if (want == 0) return 0;
    if (b->mem) {
        memcpy(buf, b->mem + b->pos, want);
        b->pos += want;
        return want;
    }
    ssize_t n;
    do n = pread(b->fd, buf, want, (off_t)(b->offset + b->pos));
    while (n < 0 && errno == EINTR);
    if (n <= 0) {
        free(t->local_error);
        t->local_error = n < 0 ? xasprintf("cannot read %s: %s", b->path, strerror(errno))
                               : xasprintf("%s is shorter than the range being sent (it changed meanwhile)", b->path);
        return CURL_READFUNC_ABORT;
    }
    b->pos += (uint64_t)n;
    return (size_t)n;
}

/* libcurl rewinds when it sends again on a new connection (a reused one that
 * the server had closed, say); without this it could not. */
static int seek_body(void *arg, curl_off_t offset, int origin)
{
    struct http_transfer *t = arg;
    if (origin != SEEK_SET || offset < 0 || (uint64_t)offset > t->body.len) return CURL_SEEKFUNC_FAIL;
    t->body.pos = (uint64_t)offset;
    return CURL_SEEKFUNC_OK;
}

/* Only a success goes into the sink: an error's body is its message. */
static bool into_sink(struct http_transfer *t)
{
    if (t->sink.fd < 0) return false;
    if (!t->sink.decided) {
        long status = 0;
        lib->easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &status);
        t->sink.decided = status >= 200 && status <= 299 ? 1 : -1;
    }
    return t->sink.decided > 0;
}

static size_t receive_into_sink(struct http_transfer *t, const char *data, size_t n)
{
    struct sink *s = &t->sink;
    size_t done = 0;
    while (done < n) {
        ssize_t w = pwrite(s->fd, data + done, n - done, (off_t)(s->offset + s->written));
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            free(t->local_error);
            t->local_error = xasprintf("cannot write the answer's body: %s", w < 0 ? strerror(errno) : "no space");
            return 0;                        /* libcurl stops with CURLE_WRITE_ERROR */
        }
        done += (size_t)w;
        s->written += (uint64_t)w;
    }
    return n;
}

static size_t receive(char *data, size_t size, size_t nmemb, void *arg)
{
    struct http_transfer *t = arg;
    size_t n = size * nmemb;
    if (into_sink(t)) return receive_into_sink(t, data, n);
    if (t->received.len + n > MAX_RESPONSE_BYTES) {
        free(t->local_error);
        t->local_error = xasprintf("the response is larger than %zu MiB", MAX_RESPONSE_BYTES >> 20);
        return 0;                            /* libcurl stops with CURLE_WRITE_ERROR */
    }
    sb_add(&t->received, data, n);
    return n;
}

/* The body file is opened once, here: a missing file or a range past its end
 * is the caller's mistake, said at once; retries read it again by offset. */
static bool take_body(struct http_transfer *t, const struct http_request *req, char *err, size_t errlen)
{
    struct body *b = &t->body;
    b->fd = -1;
    if (req->body_file) {
        b->present = true;
        b->path = xstrdup(req->body_file);
        b->offset = req->body_offset;
        b->len = req->body_len_file;
        struct stat st;
        b->fd = open(req->body_file, O_RDONLY | O_CLOEXEC);
        if (b->fd < 0 || fstat(b->fd, &st) != 0) {
            errf(err, errlen, "cannot read %s: %s", req->body_file, strerror(errno));
            return false;
        }
        if (b->offset > (uint64_t)st.st_size || b->len > (uint64_t)st.st_size - b->offset) {
            errf(err, errlen, "%s has %lld bytes, fewer than the range to send (%llu bytes from %llu)",
                 req->body_file, (long long)st.st_size, (unsigned long long)b->len,
                 (unsigned long long)b->offset);
            return false;
        }
    } else if (req->body) {
        b->present = true;
        b->mem = xmalloc(req->body_len ? req->body_len : 1);
        memcpy(b->mem, req->body, req->body_len);
        b->len = req->body_len;
    }
    return true;
}

/* The sink's fd is duplicated: the caller's may be closed, or reused for
 * another range, while this transfer still writes. */
static bool take_sink(struct http_transfer *t, const struct http_request *req, char *err, size_t errlen)
{
    t->sink.fd = -1;
    if (!req->sink) return true;
    t->sink.fd = fcntl(req->sink_fd, F_DUPFD_CLOEXEC, 0);
    if (t->sink.fd < 0) {
        errf(err, errlen, "%s %s: cannot use the file to write the answer into: %s", t->method, t->display_url,
             strerror(errno));
        return false;
    }
    t->sink.offset = req->sink_offset;
    return true;
}

/* ---- checking and setting up a request --------------------------------- */

static bool check_url(const char *url, const char *shown, char *err, size_t errlen)
{
    CURLU *u = lib->url();
    if (!u) {
        errf(err, errlen, "cannot parse URLs (out of memory)");
        return false;
    }
    char *scheme = NULL, *host = NULL;
    CURLUcode rc = lib->url_set(u, CURLUPART_URL, url, 0);
    if (rc == CURLUE_OK) rc = lib->url_get(u, CURLUPART_SCHEME, &scheme, 0);
    if (rc == CURLUE_OK) rc = lib->url_get(u, CURLUPART_HOST, &host, 0);
    bool ok = rc == CURLUE_OK && (strcmp(scheme, "https") == 0 || strcmp(scheme, "http") == 0) && *host;
    if (rc != CURLUE_OK) errf(err, errlen, "bad URL %s: %s", shown, lib->url_strerror(rc));
    else if (!ok) errf(err, errlen, "bad URL %s: only https:// and http:// are supported", shown);
    lib->free(scheme);
    lib->free(host);
    lib->url_cleanup(u);
    return ok;
}

/* Whether a header line is "Name: value" on one line.  A line break in a
 * value would let it add headers (or a request) of its own. */
static bool header_ok(const char *h)
{
    size_t name = strcspn(h, ":");
    if (name == 0 || h[name] != ':') return false;
    for (size_t i = 0; i < name; i++)
        if (!isgraph((unsigned char)h[i])) return false;
    return strpbrk(h, "\r\n") == NULL;
}

/* The caller's header lines are never quoted: one may be Authorization. */
static bool take_headers(struct http_transfer *t, const char *const *headers, char *err, size_t errlen)
{
    size_t n = 0;
    while (headers && headers[n]) {
        if (!header_ok(headers[n])) {
            errf(err, errlen, "request header %zu of %s %s is not one \"Name: value\" line", n + 1, t->method,
                 t->display_url);
            return false;
        }
        n++;
    }
    t->headers = xcalloc(n ? n : 1, sizeof *t->headers);
    for (size_t i = 0; i < n; i++) t->headers[i] = xstrdup(headers[i]);
    t->n_headers = n;
    return true;
}

static bool known_method(const char *m)
{
    static const char *const methods[] = { "GET", "HEAD", "PUT", "POST", "PATCH", "DELETE" };
    for (size_t i = 0; i < sizeof methods / sizeof *methods; i++)
        if (strcmp(m, methods[i]) == 0) return true;
    return false;
}

/* POST goes through CURLOPT_POST, PUT, PATCH and a DELETE with a body
 * through CURLOPT_UPLOAD: both read the body from read_body with its length
 * set, so libcurl sends Content-Length, 0 without a body (never chunked:
 * Azure Storage refuses that, and some front ends want a length on POST). */
static bool setup_method(struct http_transfer *t)
{
    CURL *e = t->easy;
    const char *m = t->method;
    curl_off_t len = (curl_off_t)t->body.len;
    if (strcmp(m, "GET") == 0) return lib->easy_setopt(e, CURLOPT_HTTPGET, 1L) == CURLE_OK;
    if (strcmp(m, "HEAD") == 0) return lib->easy_setopt(e, CURLOPT_NOBODY, 1L) == CURLE_OK;
    if (strcmp(m, "POST") == 0)
        return lib->easy_setopt(e, CURLOPT_POST, 1L) == CURLE_OK &&
               lib->easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, len) == CURLE_OK;
    if (strcmp(m, "DELETE") != 0 || t->body.present) {
        if (lib->easy_setopt(e, CURLOPT_UPLOAD, 1L) != CURLE_OK ||
            lib->easy_setopt(e, CURLOPT_INFILESIZE_LARGE, len) != CURLE_OK)
            return false;
    }
    return strcmp(m, "PUT") == 0 || lib->easy_setopt(e, CURLOPT_CUSTOMREQUEST, m) == CURLE_OK;
}

static bool setup_tls(struct http_transfer *t)
{
    CURL *e = t->easy;
    const struct http_client *c = t->client;
    /* Always on: no option or variable turns verification off. */
    if (lib->easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 1L) != CURLE_OK ||
        lib->easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 2L) != CURLE_OK ||
        lib->easy_setopt(e, CURLOPT_SSLVERSION, (long)CURL_SSLVERSION_TLSv1_2) != CURLE_OK)
        return false;
    if (!c->ca_file) return true;
    /* CAINFO replaces libcurl's default bundle; CAPATH, the system's hashed
     * directory, keeps the public CAs (management.azure.com) trusted. */
    return lib->easy_setopt(e, CURLOPT_CAINFO, c->ca_file) == CURLE_OK &&
           lib->easy_setopt(e, CURLOPT_CAPATH, c->ca_dir) == CURLE_OK;
}

static bool setup_easy(struct http_transfer *t, const char *url, double timeout)
{
    CURL *e = t->easy;
    const struct http_options *o = &t->client->opt;
    return lib->easy_setopt(e, CURLOPT_URL, url) == CURLE_OK &&
           lib->easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https") == CURLE_OK &&
           lib->easy_setopt(e, CURLOPT_NOSIGNAL, 1L) == CURLE_OK &&
           lib->easy_setopt(e, CURLOPT_USERAGENT, USER_AGENT) == CURLE_OK &&
           lib->easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)(o->connect_timeout * 1000)) == CURLE_OK &&
           lib->easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)(timeout * 1000)) == CURLE_OK &&
           lib->easy_setopt(e, CURLOPT_ERRORBUFFER, t->errbuf) == CURLE_OK &&
           lib->easy_setopt(e, CURLOPT_WRITEFUNCTION, receive) == CURLE_OK &&
           lib->easy_setopt(e, CURLOPT_WRITEDATA, t) == CURLE_OK &&
           lib->easy_setopt(e, CURLOPT_READFUNCTION, read_body) == CURLE_OK &&
           lib->easy_setopt(e, CURLOPT_READDATA, t) == CURLE_OK &&
           lib->easy_setopt(e, CURLOPT_SEEKFUNCTION, seek_body) == CURLE_OK &&
           lib->easy_setopt(e, CURLOPT_SEEKDATA, t) == CURLE_OK &&
           lib->easy_setopt(e, CURLOPT_PRIVATE, (void *)t) == CURLE_OK &&
           setup_tls(t) && setup_method(t);
}

/* ---- attempts ---------------------------------------------------------- */

/* Out of memory aborts, as in util.h's x* functions. */
static struct curl_slist *slist_add(struct curl_slist *l, const char *s)
{
    struct curl_slist *n = lib->slist_append(l, s);
    if (!n) {
        fprintf(stderr, "flow: out of memory (a libcurl header list)\n");
        abort();
    }
    return n;
}

/* The caller's signature over this attempt's headers, added to them. */
static bool add_signature(struct http_transfer *t, char *id_line)
{
    const char **lines = xcalloc(t->n_headers + 2, sizeof *lines);
    lines[0] = id_line;
    for (size_t i = 0; i < t->n_headers; i++) lines[i + 1] = t->headers[i];
    char *extra = t->sign(t->sign_ctx, t->method, t->url, lines, t->body.len);
    free(lines);
    if (!extra) {
        t->local_error = xstrdup("cannot sign the request");
        return false;
    }
    for (char *p = extra, *nl; *p; p = nl + 1) {
        nl = p + strcspn(p, "\n");
        bool last = *nl == '\0';
        *nl = '\0';
        if (*p && header_ok(p)) t->sent_headers = slist_add(t->sent_headers, p);
        if (last) break;
    }
    wipe_free(extra);
    return true;
}

static bool build_headers(struct http_transfer *t)
{
    char line[64];
    for (struct curl_slist *l = t->sent_headers; l; l = l->next) wipe(l->data, strlen(l->data));
    lib->slist_free_all(t->sent_headers);
    new_uuid(t->client, t->client_request_id);
    snprintf(line, sizeof line, "x-ms-client-request-id: %s", t->client_request_id);
    struct curl_slist *l = slist_add(NULL, line);
    /* No "Expect: 100-continue" (libcurl's default for large uploads): a
     * front end that does not answer it would cost each upload a second. */
    l = slist_add(l, "Expect:");
    for (size_t i = 0; i < t->n_headers; i++) l = slist_add(l, t->headers[i]);
    t->sent_headers = l;
    return !t->sign || add_signature(t, line);
}

static void clear_answer(struct http_transfer *t)
{
    t->errbuf[0] = '\0';
    t->result = CURLE_OK;
    free(t->local_error);
    free(t->error);
    free(t->request_id);
    free(t->location);
    free(t->content_type);
    t->local_error = t->error = t->request_id = t->location = t->content_type = NULL;
    sb_truncate(&t->received, 0);
    sb_truncate(&t->resp_headers, 0);
    t->sink.written = 0;                     /* a retry rewrites the range from its start */
    t->sink.decided = 0;
    t->status = 0;
    t->retry_after = -1;
}

/* false with t->local_error set when libcurl refuses the handle. */
static bool start_attempt(struct http_transfer *t)
{
    t->attempts++;
    clear_answer(t);
    if (!build_headers(t)) return false;
    t->body.pos = 0;
    t->attempt_started = monotonic_seconds();
    t->state = T_RUNNING;
    CURLcode set = lib->easy_setopt(t->easy, CURLOPT_HTTPHEADER, t->sent_headers);
    if (set != CURLE_OK) {
        t->local_error = xasprintf("cannot set the request's headers: %s", lib->easy_strerror(set));
        return false;
    }
    CURLMcode rc = lib->multi_add_handle(t->client->multi, t->easy);
    if (rc == CURLM_OK) return true;
    t->local_error = xasprintf("cannot start the request: %s", lib->multi_strerror(rc));
    return false;
}

/* A copy of a response header's value (control characters replaced: it goes
 * into messages and onto terminals), or NULL when there is none. */
static char *header_value(CURL *easy, const char *name)
{
    struct curl_header *h;
    if (lib->easy_header(easy, name, 0, CURLH_HEADER, -1, &h) != CURLHE_OK) return NULL;
    char *v = xstrdup(h->value);
    for (char *p = v; *p; p++)
        if (iscntrl((unsigned char)*p)) *p = '?';
    return v;
}

/* Seconds from Retry-After (a number or an HTTP date) or the millisecond
 * headers azure-core reads first; < 0: none. */
static double retry_after(CURL *easy)
{
    static const char *const ms_headers[] = { "retry-after-ms", "x-ms-retry-after-ms" };
    for (size_t i = 0; i < 2; i++) {
        char *v = header_value(easy, ms_headers[i]), *end;
        double ms = v ? strtod(v, &end) : -1;
        bool ok = v && end != v && *end == '\0' && ms >= 0 && isfinite(ms);
        free(v);
        if (ok) return ms / 1000;
    }
    char *v = header_value(easy, "retry-after"), *end;
    double s = -1;
    if (v) {
        long n = strtol(v, &end, 10);
        if (end != v && *end == '\0' && n >= 0) s = (double)n;
        else {
            time_t when = lib->getdate(v, NULL);
            if (when != (time_t)-1) s = fmax(0, difftime(when, time(NULL)));
        }
    }
    free(v);
    return s;
}

/* curl's own message, unless it quotes the URL's query (a SAS signature). */
static char *transport_error(struct http_transfer *t, const char *url_query)
{
    if (t->local_error) return xstrdup(t->local_error);
    if (t->errbuf[0] && !(url_query && *url_query && strstr(t->errbuf, url_query))) return xstrdup(t->errbuf);
    return xstrdup(lib->easy_strerror(t->result));
}

/* Every header of the last response, names lowercased (curl_easy_nextheader
 * keeps the server's case). */
static void read_headers(struct http_transfer *t)
{
    struct curl_header *h = NULL;
    while ((h = lib->easy_nextheader(t->easy, CURLH_HEADER, -1, h))) {
        size_t start = t->resp_headers.len;
        sb_adds(&t->resp_headers, h->name);
        for (size_t i = start; i < t->resp_headers.len; i++)
            t->resp_headers.buf[i] = (char)tolower((unsigned char)t->resp_headers.buf[i]);
        sb_addc(&t->resp_headers, '\0');
        sb_adds(&t->resp_headers, h->value ? h->value : "");
        sb_addc(&t->resp_headers, '\0');
    }
}

static void read_answer(struct http_transfer *t, CURLcode result)
{
    t->result = result;
    if (result == CURLE_OK && !t->local_error) {
        lib->easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &t->status);
        t->request_id = header_value(t->easy, "x-ms-request-id");
        t->location = header_value(t->easy, "location");
        t->content_type = header_value(t->easy, "content-type");
        t->retry_after = retry_after(t->easy);
        read_headers(t);
        return;
    }
    /* No answer: what arrived of one (headers, part of a body) is not it. */
    char *url = NULL, *query = NULL;
    lib->easy_getinfo(t->easy, CURLINFO_EFFECTIVE_URL, &url);
    if (url) query = strpbrk(url, "?#");
    t->error = transport_error(t, query ? query + 1 : NULL);
    sb_truncate(&t->received, 0);
}

static bool retryable(const struct http_transfer *t)
{
    if (t->local_error) return false;
    if (t->result == CURLE_OK) {
        switch (t->status) {
        case 408: case 429: case 500: case 502: case 503: case 504: return true;
        default: return false;
        }
    }
    /* Failures that may pass: a refused or reset connection, a timeout, a
     * handshake cut short.  Not those that will not: a certificate that does
     * not verify, a bad CA file, a host name that does not resolve (far more
     * often a wrong name than a passing outage). */
    switch (t->result) {
    case CURLE_COULDNT_CONNECT: case CURLE_OPERATION_TIMEDOUT: case CURLE_SEND_ERROR: case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING: case CURLE_PARTIAL_FILE: case CURLE_SSL_CONNECT_ERROR: case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
        return true;
    default:
        return false;
    }
}

/* Retry-After when the server gave one, else base × 2^(n-1) ± 20 %; capped. */
static double backoff(struct http_transfer *t)
{
    const struct http_options *o = &t->client->opt;
    if (t->retry_after >= 0) return fmin(t->retry_after, o->backoff_max);
    double wait = o->backoff_base * pow(2, t->attempts - 1) * jitter(t->client);
    return fmin(wait, o->backoff_max);
}

/* One line per attempt, for -v; no query string (display_url), no header:
 * "PUT https://host/path → 201 (x-ms-request-id …) 0.12 s" or
 * "GET https://host/path → error after 0.30 s: <curl's message> (retry 1 in 0.85 s)". */
static void trace_attempt(struct http_transfer *t, double took, double wait)
{
    const struct http_options *o = &t->client->opt;
    if (!o->trace) return;
    struct strbuf sb = STRBUF_INIT;
    sb_addf(&sb, "%s %s → ", t->method, t->display_url);
    if (t->status) {
        sb_addf(&sb, "%ld", t->status);
        if (t->request_id && *t->request_id) sb_addf(&sb, " (x-ms-request-id %s)", t->request_id);
        sb_addf(&sb, " %.2f s", took);
    } else {
        sb_addf(&sb, "error after %.2f s: %s", took, t->error);
    }
    if (wait >= 0) sb_addf(&sb, " (retry %d in %.*f s)", t->attempts, wait < 1 ? 2 : 1, wait);
    o->trace(o->trace_ctx, sb.buf);
    sb_release(&sb);
}

static void on_deliver(void *arg);
static void on_retry(void *arg);

static void finish(struct http_transfer *t)
{
    t->state = T_FINISHED;
    t->timer = loop_add_timer(t->client->loop, 0, on_deliver, t);
}

static void end_attempt(struct http_transfer *t, CURLcode result)
{
    struct http_client *c = t->client;
    if (t->timer) loop_cancel_timer(c->loop, t->timer);      /* on_watch_failed's */
    t->timer = 0;
    read_answer(t, result);            /* before the handle leaves: its headers are read */
    lib->multi_remove_handle(c->multi, t->easy);
    double took = monotonic_seconds() - t->attempt_started;
    if (retryable(t) && t->attempts <= t->max_retries) {
        double wait = backoff(t);
        trace_attempt(t, took, wait);
        t->state = T_WAITING;
        t->timer = loop_add_timer(c->loop, wait, on_retry, t);
        return;
    }
    trace_attempt(t, took, -1);
    finish(t);
}

bool http_waiting(const struct http_transfer *t) { return t->state == T_WAITING; }

static void on_retry(void *arg)
{
    struct http_transfer *t = arg;
    t->timer = 0;
    if (!start_attempt(t)) {
        t->error = xstrdup(t->local_error);
        finish(t);
    }
}

static void collect_finished(struct http_client *c)
{
    CURLMsg *msg;
    int left;
    while ((msg = lib->multi_info_read(c->multi, &left))) {
        if (msg->msg != CURLMSG_DONE) continue;
        struct http_transfer *t = NULL;
        CURLcode result = msg->data.result;          /* msg goes when the handle is removed */
        lib->easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&t);
        if (t) end_attempt(t, result);
    }
}

/* From a loop timer, so that done runs with nothing of this client on the
 * stack: it may send, cancel, even free the client (see http.h).  So t is
 * no longer the client's, and holds nothing of libcurl's, when done runs. */
static void on_deliver(void *arg)
{
    struct http_transfer *t = arg;
    unlink_transfer(t->client, t);
    t->timer = 0;
    t->state = T_DELIVERING;
    lib->easy_cleanup(t->easy);
    t->easy = NULL;
    struct http_response resp = {
        .status = t->status,
        .body = t->received.buf ? t->received.buf : "",
        .body_len = t->received.len,
        .request_id = t->request_id ? t->request_id : "",
        .client_request_id = t->client_request_id,
        .location = t->location,
        .content_type = t->content_type,
        .retry_after = t->retry_after,
        .attempts = t->attempts,
        .cancelled = t->cancelled,
        .error = t->status ? NULL : (t->error ? t->error : "cancelled"),
        .url = t->display_url,
        .sink_written = t->sink.written,
        .headers = t->resp_headers.buf,
        .headers_len = t->resp_headers.len,
    };
    t->done(t->arg, &resp);
    transfer_free(t);
}

/* ---- the public calls -------------------------------------------------- */

static bool check_request(const struct http_request *req, const char *shown, char *err, size_t errlen)
{
    if (!req->method || !known_method(req->method)) {
        errf(err, errlen, "unsupported HTTP method \"%s\"", req->method ? req->method : "");
        return false;
    }
    if (!req->url) {
        errf(err, errlen, "a %s request needs a URL", req->method);
        return false;
    }
    if (!check_url(req->url, shown, err, errlen)) return false;
    if ((req->body || req->body_file) && (!strcmp(req->method, "GET") || !strcmp(req->method, "HEAD"))) {
        errf(err, errlen, "a %s request has no body (%s)", req->method, shown);
        return false;
    }
    return true;
}

static struct http_transfer *new_transfer(struct http_client *c, const struct http_request *req, char *err,
                                          size_t errlen)
{
    char shown[1024];
    http_url_for_display(req->url ? req->url : "", shown, sizeof shown);
    if (!check_request(req, shown, err, errlen)) return NULL;
    struct http_transfer *t = xcalloc(1, sizeof *t);
    t->client = c;
    t->body.fd = -1;
    t->sink.fd = -1;
    t->method = xstrdup(req->method);
    t->display_url = xstrdup(shown);
    t->url = xstrdup(req->url);
    t->sign = req->sign;
    t->sign_ctx = req->sign_ctx;
    t->max_retries = req->max_retries > 0 ? req->max_retries : req->max_retries < 0 ? 0 : c->opt.max_retries;
    t->sink.fd = -1;
    if (take_headers(t, req->headers, err, errlen) && take_body(t, req, err, errlen) &&
        take_sink(t, req, err, errlen)) {
        t->easy = lib->easy_init();
        if (t->easy && setup_easy(t, req->url, req->timeout > 0 ? req->timeout : c->opt.timeout)) return t;
        errf(err, errlen, "cannot set up the request %s %s in libcurl", t->method, shown);
    }
    transfer_free(t);
    return NULL;
}

struct http_transfer *http_send(struct http_client *c, const struct http_request *req, http_done_fn done,
                                void *arg, char *err, size_t errlen)
{
    struct http_transfer *t = new_transfer(c, req, err, errlen);
    if (!t) return NULL;
    t->done = done;
    t->arg = arg;
    if (!start_attempt(t)) {
        errf(err, errlen, "%s %s: %s", t->method, t->display_url, t->local_error);
        transfer_free(t);
        return NULL;
    }
    t->next = c->transfers;
    if (c->transfers) c->transfers->prev = t;
    c->transfers = t;
    c->n_transfers++;
    return t;
}

/* An answer that already came is delivered as it is (the request was made,
 * and a caller must know that a PUT it cancelled took effect). */
void http_cancel(struct http_transfer *t)
{
    if (!t || t->state == T_FINISHED || t->state == T_DELIVERING) return;
    struct http_client *c = t->client;
    if (t->timer) loop_cancel_timer(c->loop, t->timer);
    t->timer = 0;
    if (t->state == T_RUNNING) lib->multi_remove_handle(c->multi, t->easy);
    clear_answer(t);
    t->cancelled = true;
    t->error = xstrdup("cancelled");
    finish(t);
}

const char *http_response_header(const struct http_response *resp, const char *name)
{
    const char *p = resp->headers, *end = p ? p + resp->headers_len : NULL;
    while (p && p < end) {
        const char *value = p + strlen(p) + 1;
        if (value >= end) break;
        if (strcasecmp(p, name) == 0) return value;
        p = value + strlen(value) + 1;
    }
    return NULL;
}

/* ---- messages ---------------------------------------------------------- */

static void add_bounded(char *buf, size_t buflen, size_t *len, const char *s, size_t n)
{
    if (*len + 1 >= buflen) return;
    if (n > buflen - 1 - *len) n = buflen - 1 - *len;
    memcpy(buf + *len, s, n);
    *len += n;
    buf[*len] = '\0';
}

void http_url_for_display(const char *url, char *buf, size_t buflen)
{
    if (!buflen) return;
    buf[0] = '\0';
    size_t len = 0;
    if (!url) url = "";
    const char *p = url, *sep = strstr(url, "://");
    if (sep && sep == url + strcspn(url, ":/?#")) {
        add_bounded(buf, buflen, &len, url, (size_t)(sep + 3 - url));
        p = sep + 3;
        /* user:password@ is a secret too: the host starts after the last '@' */
        size_t authority = strcspn(p, "/?#");
        for (size_t i = authority; i > 0; i--)
            if (p[i - 1] == '@') {
                p += i;
                authority -= i;
                break;
            }
        add_bounded(buf, buflen, &len, p, authority);
        p += authority;
    }
    add_bounded(buf, buflen, &len, p, strcspn(p, "?#"));
}

char *http_urlencode(const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    struct strbuf sb = STRBUF_INIT;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (isalnum(*p) || *p == '-' || *p == '.' || *p == '_' || *p == '~') {
            sb_addc(&sb, (char)*p);
        } else {
            char e[3] = { '%', hex[*p >> 4], hex[*p & 15] };
            sb_add(&sb, e, 3);
        }
    }
    return sb_detach(&sb);
}

/* Drops a UTF-8 character the end of sb cuts in two. */
static void drop_partial_char(struct strbuf *sb, size_t start)
{
    size_t k = sb->len;
    while (k > start && sb->len - k < 3 && ((unsigned char)sb->buf[k - 1] & 0xc0) == 0x80) k--;
    if (k == start) return;
    unsigned char lead = (unsigned char)sb->buf[k - 1];
    size_t need = lead >= 0xf0 ? 4 : lead >= 0xe0 ? 3 : lead >= 0xc0 ? 2 : 1;
    if (sb->len - (k - 1) < need) sb_truncate(sb, k - 1);
}

/* Text from a server, made fit for one line: control characters (the CR LF
 * in Entra's descriptions) become spaces, runs of spaces one, at most max
 * bytes (cut on a UTF-8 character boundary, "…" marking the cut). */
static void add_clean(struct strbuf *sb, const char *s, size_t n, size_t max)
{
    size_t start = sb->len, i = 0;
    bool space = true;                       /* leading blanks are dropped */
    for (; i < n && sb->len - start < max; i++) {
        unsigned char ch = (unsigned char)s[i];
        bool blank = ch < 0x20 || ch == 0x7f || ch == ' ';
        if (blank && space) continue;
        sb_addc(sb, blank ? ' ' : (char)ch);
        space = blank;
    }
    bool cut = i < n;
    if (cut) drop_partial_char(sb, start);
    while (sb->len > start && sb->buf[sb->len - 1] == ' ') sb_truncate(sb, sb->len - 1);
    if (cut) sb_adds(sb, "…");
}

static const char *reason_phrase(long status)
{
    static const struct { long status; const char *text; } phrases[] = {
        { 200, "OK" }, { 201, "Created" }, { 202, "Accepted" }, { 204, "No Content" },
        { 400, "Bad Request" }, { 401, "Unauthorized" }, { 403, "Forbidden" }, { 404, "Not Found" },
        { 405, "Method Not Allowed" }, { 408, "Request Timeout" }, { 409, "Conflict" },
        { 412, "Precondition Failed" }, { 413, "Content Too Large" }, { 429, "Too Many Requests" },
        { 500, "Internal Server Error" }, { 501, "Not Implemented" }, { 502, "Bad Gateway" },
        { 503, "Service Unavailable" }, { 504, "Gateway Timeout" },
    };
    for (size_t i = 0; i < sizeof phrases / sizeof *phrases; i++)
        if (phrases[i].status == status) return phrases[i].text;
    return "unexpected answer";
}

const char *http_json_string(const struct cJSON *obj, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsString(v) && v->valuestring[0] ? v->valuestring : NULL;
}

/* "CODE: message", each made fit for one line of a message. */
static void add_code_message(struct strbuf *sb, const char *code, const char *message)
{
    if (code) add_clean(sb, code, strlen(code), 200);
    if (code && message) sb_adds(sb, ": ");
    if (message) add_clean(sb, message, strlen(message), 2000);
}

/* "CODE: message" from ARM's {"error": {"code", "message"}} or Entra's
 * {"error": "code", "error_description": "…"}; false if the body is neither. */
static bool add_error_body(struct strbuf *sb, const struct http_response *resp)
{
    cJSON *root = cJSON_ParseWithLength(resp->body, resp->body_len);
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(root, "error");
    const char *code = NULL, *message = NULL;
    if (cJSON_IsObject(e)) {
        code = http_json_string(e, "code");
        message = http_json_string(e, "message");
    } else if (cJSON_IsString(e)) {
        code = http_json_string(root, "error");
        message = http_json_string(root, "error_description");
    }
    add_code_message(sb, code, message);
    cJSON_Delete(root);
    return code || message;
}

/* " (HTTP 404, x-ms-request-id …)" */
static void add_status(struct strbuf *sb, const struct http_response *resp)
{
    sb_addf(sb, " (HTTP %ld", resp->status);
    if (resp->request_id && *resp->request_id) sb_addf(sb, ", x-ms-request-id %s", resp->request_id);
    sb_adds(sb, ")");
}

void http_error_message_parsed(const struct http_response *resp, const char *code, const char *message, char *buf,
                               size_t buflen)
{
    if (!resp->status || (!code && !message)) {
        http_error_message(resp, buf, buflen);
        return;
    }
    struct strbuf sb = STRBUF_INIT;
    add_code_message(&sb, code, message);
    add_status(&sb, resp);
    errf(buf, buflen, "%s", sb.buf);
    sb_release(&sb);
}

void http_error_message(const struct http_response *resp, char *buf, size_t buflen)
{
    struct strbuf sb = STRBUF_INIT;
    const char *url = resp->url ? resp->url : "the server";
    if (resp->status == 0 && resp->cancelled) {
        sb_addf(&sb, "request to %s cancelled", url);
    } else if (resp->status == 0) {
        sb_addf(&sb, "could not reach %s: %s (after %d attempt%s)", url, resp->error ? resp->error : "no answer",
                resp->attempts, resp->attempts == 1 ? "" : "s");
    } else {
        if (!add_error_body(&sb, resp)) {
            sb_adds(&sb, reason_phrase(resp->status));
            if (resp->body_len) {
                sb_adds(&sb, ": ");
                add_clean(&sb, resp->body, resp->body_len, 200);
            }
        }
        add_status(&sb, resp);
    }
    errf(buf, buflen, "%s", sb.buf);
    sb_release(&sb);
}
