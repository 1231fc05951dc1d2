/* blob.c — Azure Blob Storage on the engine's loop (blob.h).
 *
 * A transfer is one step wait that runs a small pipeline: list (List Blobs,
 * or one HEAD for a single blob) and, for an upload, walk the local tree on
 * the work pool; then per file a pool job (upload: its MD5s; download: is
 * the file there already, else open its ".flowpart"), its requests (at most
 * REQUESTS_AT_ONCE in flight per transfer), and for a download a last pool
 * job (length, MD5, fsync, rename).  A download's ranges are pinned to the
 * ETag the listing gave (If-Match): a blob that changes under them is looked
 * up again and downloaded again from its start.  Requests and jobs hold a
 * pointer back to the transfer that is cleared when it is freed early, so an
 * answer or a completion that comes later is dropped instead of touching
 * freed memory. */
#include "azureml/blob.h"
#include "azureml/blob_sign.h"
#include "azureml/blob_xml.h"

#include "commit.h"
#include "hash.h"
#include "nofollow.h"
#include "strmap.h"
#include "crypto_lib.h"
#include "util.h"
#include "work.h"


#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define BLOB_API_VERSION "2021-08-06"
/* Requests in flight per transfer: 10,000 small blobs must not become
 * 10,000 handles (http.c also keeps to 8 connections per host). */
#define REQUESTS_AT_ONCE 8
/* Pool jobs (hashing, preparing a file) per transfer, and how far the
 * preparation of files may run ahead of their requests: each prepared
 * download holds an open ".flowpart". */
#define JOBS_AT_ONCE 4
#define QUEUE_AHEAD 16
#define PROGRESS_EVERY 2.0             /* seconds between progress calls (and one at the end) */
#define PART_SUFFIX ".flowpart"
#define MD5_B64 25                     /* 24 base64 characters and a NUL */
#define WALK_MAX_DEPTH 256
#define READ_CHUNK (1u << 20)

struct blob_container {
    struct http_client *http;
    struct work_pool *pool;
    struct loop *loop;
    char *url;                 /* no trailing '/', no query */
    char *name;                /* its last path segment, for messages */
    char *account;
    unsigned char *key;        /* decoded; NULL with a SAS */
    size_t key_len;
    char *sas;                 /* without '?'; NULL with a key */
    unsigned page_size;
};

enum xfer_kind { X_UPLOAD, X_DOWNLOAD, X_EXISTS, X_CREATE, X_METADATA, X_STAT };
enum req_kind {
    R_LIST, R_HEAD, R_PUT_BLOB, R_PUT_BLOCK, R_PUT_LIST, R_GET_RANGE, R_CREATE, R_METADATA,
    R_HEAD_CHANGED,            /* a download's blob again, after a range found it changed */
    R_DELETE                   /* a folder upload's: a blob the folder no longer holds (item: in remote) */
};
enum job_kind { J_WALK, J_HASH, J_PREPARE, J_FINISH };

/* One file: a blob and its local path. */
struct item {
    char *rel;                 /* below the prefix ("" for a single blob) */
    char *blob;                /* the blob's full name */
    char *path;                /* upload: the source; download: the destination */
    uint64_t size;
    char md5[MD5_B64];         /* upload: the file's; download: the blob's, "" if it has none */
    unsigned char (*block_md5)[16];
    size_t n_parts, parts_left;
    int fd;                    /* download: its ".flowpart" while ranges come in, else -1 */
    /* A download's version of the blob: its ranges carry If-Match with etag
     * (NULL or "": none known, none sent), so each comes from that version
     * or is refused (412).  Refused, the blob starts again as attempt + 1:
     * what is in flight or queued of an older attempt is dropped. */
    char *etag;
    unsigned attempt;
    size_t ranges_out;         /* its range requests in flight, of any attempt */
    bool restart_pending;      /* changed: looked up again once ranges_out is 0 */
    uint64_t bytes_got;        /* of this attempt, taken back from the progress on a restart */
};

/* What the listing found. */
struct remote {
    char *name;
    uint64_t size;
    char md5[MD5_B64];
    char *etag;                /* the service's version of the blob ("" if none came) */
};

struct part_ref {
    enum req_kind kind;
    size_t item, part;
    unsigned attempt;          /* the item's when queued */
};

struct xfer;

struct req {
    struct xfer *x;            /* NULL once the wait was freed: the answer is dropped */
    struct http_transfer *t;
    struct req *prev, *next;
    enum req_kind kind;
    size_t item, part;
    unsigned attempt;          /* R_GET_RANGE: the item's when sent */
    uint64_t len;              /* bytes the request carries (body, or range) */
};

/* A job on the pool owns copies of what it reads: it may outlive the wait. */
struct job {
    struct xfer *x;            /* NULL once the wait was freed */
    struct job *prev, *next;
    enum job_kind kind;
    atomic_bool stop;
    size_t item;
    char *path;
    uint64_t size;
    char want_md5[MD5_B64];
    int fd;                    /* J_PREPARE: the opened ".flowpart"; J_FINISH: the one to close */
    /* results */
    int rc;
    bool skip, is_dir;
    char md5[MD5_B64];
    unsigned char (*block_md5)[16];
    struct item *items;        /* J_WALK */
    size_t n_items, cap_items;
    char err[1024];
};

struct xfer {
    struct step_wait wait;     /* first: the wait is the transfer */
    struct blob_container *c;
    enum xfer_kind kind;
    step_wait_done_fn done;
    blob_progress_fn progress;
    void *arg;
    char *local;               /* upload: the source; download: dest */
    char *prefix;              /* no trailing '/' */
    bool as_folder;
    bool listed_by_caller;     /* upload: the items came with the call (blob_upload_files), no walk */
    char **meta;               /* X_METADATA: "x-ms-meta-<name>: value" lines, NULL-terminated */
    bool ready, complete, finished, exists;
    struct item *items;
    size_t n_items, next_prepare;
    size_t deletes_left;       /* a folder upload: stale blobs still to delete */
    struct part_ref *queue;
    size_t q_head, q_len, q_cap;
    struct remote *remote;
    size_t n_remote, cap_remote;
    struct strmap remote_index;
    struct req *reqs;
    size_t n_reqs;
    struct job *jobs;
    size_t n_jobs;
    struct blob_progress prog;
    char stat_hash[SHA256_HEX_SIZE];   /* X_STAT */
    double last_progress;
    char *error;
    unsigned long timer;
};

/* ---- small helpers --------------------------------------------------------- */

static void base64_of(const unsigned char *data, size_t n, char *out)
{
    const struct crypto_lib *ossl = crypto_lib();
    ossl->EVP_EncodeBlock((unsigned char *)out, data, (int)n);
}

/* Decoded bytes of a base64 string, malloc'd; NULL if it is not base64. */
static unsigned char *base64_decode(const char *s, size_t *out_len)
{
    const struct crypto_lib *ossl = crypto_lib();
    size_t n = strlen(s);
    if (n == 0 || n % 4 != 0) return NULL;
    unsigned char *out = xmalloc(n / 4 * 3 + 1);
    int len = ossl->EVP_DecodeBlock(out, (const unsigned char *)s, (int)n);
    if (len < 0) {
        wipe(out, n / 4 * 3 + 1);     /* part of a key */
        free(out);
        return NULL;
    }
    /* EVP_DecodeBlock counts the padding as zero bytes */
    size_t pad = (size_t)(s[n - 1] == '=') + (size_t)(s[n - 2] == '=');
    *out_len = (size_t)len - pad;
    return out;
}

/* Percent-encoded segment by segment, '/' kept: the path a blob name takes. */
static void add_blob_path(struct strbuf *url, const char *name)
{
    const char *p = name;
    for (;;) {
        size_t n = strcspn(p, "/");
        char *seg = xstrndup(p, n);
        char *enc = http_urlencode(seg);
        sb_adds(url, enc);
        free(enc);
        free(seg);
        if (!p[n]) break;
        sb_addc(url, '/');
        p += n + 1;
    }
}

/* ---- the container ------------------------------------------------------------ */

struct blob_container *blob_container_new(struct http_client *http, struct work_pool *pool,
                                          const struct blob_container_spec *spec, char *err, size_t errlen)
{
    const char *url = spec->url ? spec->url : "";
    char shown[512];
    http_url_for_display(url, shown, sizeof shown);
    if (strncmp(url, "https://", 8) != 0 && strncmp(url, "http://", 7) != 0) {
        errf(err, errlen, "the container URL %s is not http(s)", shown);
        return NULL;
    }
    if (strpbrk(url, "?#")) {
        errf(err, errlen, "the container URL %s has a query: a SAS goes in `sas`", shown);
        return NULL;
    }
    if (!spec->key == !spec->sas) {
        errf(err, errlen, "the container %s needs exactly one of an account key and a SAS", shown);
        return NULL;
    }
    if (spec->key && (!spec->account || !*spec->account)) {
        errf(err, errlen, "the container %s: Shared Key needs the storage account's name", shown);
        return NULL;
    }
    struct blob_container *c = xcalloc(1, sizeof *c);
    if (spec->key && !(c->key = base64_decode(spec->key, &c->key_len))) {
        free(c);
        errf(err, errlen, "the account key for %s is not base64", shown);
        return NULL;
    }
    c->http = http;
    c->pool = pool;
    c->loop = http_client_loop(http);
    c->url = xstrdup(url);
    size_t n = strlen(c->url);
    while (n && c->url[n - 1] == '/') c->url[--n] = '\0';
    const char *slash = strrchr(c->url, '/');
    c->name = xstrdup(slash ? slash + 1 : c->url);
    c->account = xstrdup(spec->account ? spec->account : "");
    if (spec->sas) c->sas = xstrdup(spec->sas[0] == '?' ? spec->sas + 1 : spec->sas);
    c->page_size = spec->list_page_size;
    return c;
}

void blob_container_free(struct blob_container *c)
{
    if (!c) return;
    if (c->key) wipe(c->key, c->key_len);
    free(c->key);
    wipe_free(c->sas);
    free(c->url);
    free(c->name);
    free(c->account);
    free(c);
}

/* What one request is, before it is signed. */
struct blob_call {
    const char *method;
    const char *blob;              /* NULL: the container itself */
    const char *query;             /* already encoded, or NULL */
    const char *const *headers;    /* beyond x-ms-date, x-ms-version and Authorization; or NULL */
};

/* Each attempt is signed as it starts (http_sign_fn): the signature covers
 * the attempt's own x-ms-client-request-id, and a retry after a long
 * back-off gets a fresh x-ms-date (the service refuses one 15 minutes old). */
static char *sign_attempt(void *ctx, const char *method, const char *url, const char *const *headers,
                          uint64_t content_length)
{
    struct blob_container *c = ctx;
    size_t n = 0;
    while (headers[n]) n++;
    const char **lines = xcalloc(n + 3, sizeof *lines);
    memcpy(lines, headers, n * sizeof *lines);
    char date[40], date_line[64], length_line[64];
    blob_rfc1123_now(date);
    snprintf(date_line, sizeof date_line, "x-ms-date: %s", date);
    /* signed, but libcurl sends it: not a line of ours */
    snprintf(length_line, sizeof length_line, "Content-Length: %llu", (unsigned long long)content_length);
    lines[n] = date_line;
    lines[n + 1] = length_line;
    char *sig = blob_shared_key(c->account, c->key, c->key_len, method, url, lines);
    free(lines);
    if (!sig) return NULL;
    char *extra = xasprintf("%s\nAuthorization: %s", date_line, sig);
    free(sig);
    return extra;
}

/* Builds the URL and headers (signed, or with the SAS) and sends. */
static struct http_transfer *blob_send(struct blob_container *c, const struct blob_call *call,
                                       struct http_request *req, http_done_fn done, void *arg, char *err,
                                       size_t errlen)
{
    struct strbuf url = STRBUF_INIT;
    sb_adds(&url, c->url);
    if (call->blob) {
        sb_addc(&url, '/');
        add_blob_path(&url, call->blob);
    }
    const char *q = call->query && *call->query ? call->query : NULL;
    if (q || c->sas) sb_addc(&url, '?');
    if (q) sb_adds(&url, q);
    if (q && c->sas) sb_addc(&url, '&');
    if (c->sas) sb_adds(&url, c->sas);

    const char *lines[24];
    size_t n = 0;
    lines[n++] = "x-ms-version: " BLOB_API_VERSION;
    for (size_t i = 0; call->headers && call->headers[i] && n < 20; i++) lines[n++] = call->headers[i];
    lines[n] = NULL;
    req->method = call->method;
    req->url = url.buf;
    req->headers = lines;
    if (c->key) {
        req->sign = sign_attempt;
        req->sign_ctx = c;
    }
    struct http_transfer *t = http_send(c->http, req, done, arg, err, errlen);
    wipe_free(url.buf);                /* it holds the SAS */
    return t;
}

/* ---- messages ------------------------------------------------------------------ */

struct error_body { char *code, *message; };

static void error_field(void *arg, const char *path, const char *text)
{
    struct error_body *e = arg;
    if (strcmp(path, "Error/Code") == 0) set_string(&e->code, text);
    else if (strcmp(path, "Error/Message") == 0) set_string(&e->message, text);
}

/* "Code: message (HTTP 403, x-ms-request-id …)" from the service's
 * <Error><Code/><Message/></Error>, or x-ms-error-code (a HEAD has no
 * body); http.c words it.  A body that is not such XML says nothing. */
static void blob_error_message(const struct http_response *resp, char *buf, size_t buflen)
{
    struct error_body e = { NULL, NULL };
    if (resp->status) {
        if (!blob_xml_walk(resp->body, resp->body_len, error_field, &e)) {
            free(e.code);
            free(e.message);
            e = (struct error_body){ NULL, NULL };
        }
        const char *h = http_response_header(resp, "x-ms-error-code");
        if (!e.code && h) e.code = xstrdup(h);
    }
    http_error_message_parsed(resp, e.code, e.message && *e.message ? e.message : NULL, buf, buflen);
    free(e.code);
    free(e.message);
}

/* ---- the wait ------------------------------------------------------------------ */

static void pump(struct xfer *x);

static void report(struct xfer *x, bool final)
{
    if (!x->progress) return;
    double now = monotonic_seconds();
    if (!final && now - x->last_progress < PROGRESS_EVERY) return;
    x->last_progress = now;
    x->progress(x->arg, &x->prog);
}

static void deliver(void *arg)
{
    struct xfer *x = arg;
    x->timer = 0;
    x->done(&x->wait, x->arg);
}

static void close_part_files(struct xfer *x)
{
    for (size_t i = 0; i < x->n_items; i++)
        if (x->items[i].fd >= 0) {
            close(x->items[i].fd);                /* a .flowpart left behind: nothing to report */
            x->items[i].fd = -1;
        }
}

/* The wait completes once nothing of it is in flight: a cancelled download
 * must not write into a file after done. */
static void maybe_finish(struct xfer *x)
{
    if (x->finished || (!x->error && !x->complete) || x->n_reqs || x->n_jobs) return;
    x->finished = true;
    if (x->timer) loop_cancel_timer(x->c->loop, x->timer);     /* kick's, when cancelled before it ran */
    close_part_files(x);
    report(x, true);
    x->timer = loop_add_timer(x->c->loop, 0, deliver, x);
}

/* The first failure wins; everything still in flight is stopped. */
static void stop_all(struct xfer *x)
{
    for (struct req *r = x->reqs; r; r = r->next) http_cancel(r->t);
    for (struct job *j = x->jobs; j; j = j->next) atomic_store(&j->stop, true);
}

static void fail(struct xfer *x, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(struct xfer *x, const char *fmt, ...)
{
    if (!x->error) {
        va_list ap;
        va_start(ap, fmt);
        struct strbuf sb = STRBUF_INIT;
        sb_vaddf(&sb, fmt, ap);
        va_end(ap);
        x->error = sb_detach(&sb);
    }
    stop_all(x);
    maybe_finish(x);
}

static void wait_cancel(struct step_wait *w, enum cancel_mode mode)
{
    (void)mode;                  /* both stop every request: an upload or download has no grace period */
    struct xfer *x = (struct xfer *)w;
    if (x->finished) return;
    fail(x, "cancelled");
}

static void items_free(struct item *items, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(items[i].rel);
        free(items[i].blob);
        free(items[i].path);
        free(items[i].block_md5);
        free(items[i].etag);
        if (items[i].fd >= 0) close(items[i].fd);
    }
    free(items);
}

static void job_free(struct job *j)
{
    if (j->fd >= 0) close(j->fd);
    items_free(j->items, j->n_items);
    free(j->block_md5);
    free(j->path);
    free(j);
}

static void wait_free(struct step_wait *w)
{
    struct xfer *x = (struct xfer *)w;
    step_wait_detach(w);
    if (x->timer) loop_cancel_timer(x->c->loop, x->timer);
    /* Still in flight: orphaned, their completions free them. */
    for (struct req *r = x->reqs, *next; r; r = next) {
        next = r->next;
        r->x = NULL;
        http_cancel(r->t);
    }
    for (struct job *j = x->jobs; j; j = j->next) {
        j->x = NULL;
        atomic_store(&j->stop, true);
    }
    items_free(x->items, x->n_items);
    for (size_t i = 0; i < x->n_remote; i++) {
        free(x->remote[i].name);
        free(x->remote[i].etag);
    }
    free(x->remote);
    strmap_free(&x->remote_index);
    free(x->queue);
    free(x->local);
    free(x->prefix);
    for (char **m = x->meta; m && *m; m++) free(*m);
    free(x->meta);
    free(x->error);
    free(x);
}

static const struct step_wait_ops blob_wait_ops = { "azure blob", wait_cancel, wait_free };

static struct xfer *xfer_new(struct blob_container *c, enum xfer_kind kind, blob_progress_fn progress,
                             step_wait_done_fn done, void *arg)
{
    struct xfer *x = xcalloc(1, sizeof *x);
    step_wait_init(&x->wait, &blob_wait_ops);
    x->c = c;
    x->kind = kind;
    x->progress = progress;
    x->done = done;
    x->arg = arg;
    return x;
}

const char *blob_wait_error(const struct step_wait *w)
{
    return ((const struct xfer *)w)->error;
}

const struct blob_progress *blob_wait_progress(const struct step_wait *w)
{
    return &((const struct xfer *)w)->prog;
}

bool blob_wait_exists(const struct step_wait *w)
{
    return ((const struct xfer *)w)->exists;
}

/* Complete once every item is done and every stale blob deleted. */
static void check_complete(struct xfer *x)
{
    if (x->prog.files_done == x->n_items && x->deletes_left == 0) x->complete = true;
}

static void item_done(struct xfer *x)
{
    x->prog.files_done++;
    check_complete(x);
    report(x, false);
}

/* ---- requests ------------------------------------------------------------------ */

static void on_answer(void *arg, const struct http_response *resp);

static struct req *req_start(struct xfer *x, enum req_kind kind, size_t item, size_t part, uint64_t len,
                             const struct blob_call *call, struct http_request *hreq)
{
    struct req *r = xcalloc(1, sizeof *r);
    *r = (struct req){ .x = x, .kind = kind, .item = item, .part = part, .len = len };
    char err[1024];
    r->t = blob_send(x->c, call, hreq, on_answer, r, err, sizeof err);
    if (!r->t) {
        free(r);
        fail(x, "%s", err);
        return NULL;
    }
    r->next = x->reqs;
    if (x->reqs) x->reqs->prev = r;
    x->reqs = r;
    x->n_reqs++;
    return r;
}

static void req_unlink(struct xfer *x, struct req *r)
{
    if (r->prev) r->prev->next = r->next;
    else x->reqs = r->next;
    if (r->next) r->next->prev = r->prev;
    x->n_reqs--;
}

static void queue_push(struct xfer *x, enum req_kind kind, size_t item, size_t part)
{
    if (x->q_head + x->q_len == x->q_cap) {
        if (x->q_head) {                           /* slide down before growing */
            memmove(x->queue, x->queue + x->q_head, x->q_len * sizeof *x->queue);
            x->q_head = 0;
        }
        if (x->q_len == x->q_cap) {
            x->q_cap = x->q_cap ? x->q_cap * 2 : 16;
            x->queue = xrealloc(x->queue, x->q_cap * sizeof *x->queue);
        }
    }
    unsigned attempt = kind == R_DELETE ? 0 : x->items[item].attempt;     /* (a delete's item is a remote blob) */
    x->queue[x->q_head + x->q_len++] = (struct part_ref){ kind, item, part, attempt };
}

static char *list_query(struct xfer *x, const char *marker)
{
    struct strbuf q = STRBUF_INIT;
    sb_adds(&q, "restype=container&comp=list");
    const char *pfx = x->as_folder && *x->prefix ? "/" : "";
    char *p = xasprintf("%s%s", x->prefix, pfx);
    if (*p) {
        char *enc = http_urlencode(p);
        sb_addf(&q, "&prefix=%s", enc);
        free(enc);
    }
    free(p);
    if (marker && *marker) {
        char *enc = http_urlencode(marker);
        sb_addf(&q, "&marker=%s", enc);
        free(enc);
    }
    if (x->c->page_size) sb_addf(&q, "&maxresults=%u", x->c->page_size);
    return sb_detach(&q);
}

static void list_page(struct xfer *x, const char *marker)
{
    char *query = list_query(x, marker);
    struct blob_call call = { .method = "GET", .query = query };
    struct http_request req = { 0 };
    req_start(x, R_LIST, 0, 0, 0, &call, &req);
    free(query);
}

/* Get Blob Properties of `name`: R_HEAD for the transfer's own prefix,
 * R_HEAD_CHANGED for item i's blob after it changed (head_changed). */
static void send_head(struct xfer *x, enum req_kind kind, size_t i, const char *name)
{
    struct blob_call call = { .method = "HEAD", .blob = name };
    struct http_request req = { 0 };
    req_start(x, kind, i, 0, 0, &call, &req);
}

static void head_blob(struct xfer *x, const char *name) { send_head(x, R_HEAD, 0, name); }

static void add_remote(struct xfer *x, const char *name, uint64_t size, const char *md5, const char *etag)
{
    ARRAY_GROW(x->remote, x->n_remote, x->cap_remote);
    struct remote *r = &x->remote[x->n_remote];
    *r = (struct remote){ .name = xstrdup(name), .size = size, .etag = xstrdup(etag ? etag : "") };
    snprintf(r->md5, sizeof r->md5, "%s", md5 ? md5 : "");
    strmap_put(&x->remote_index, name, x->n_remote);
    x->n_remote++;
}

static bool parse_size(const char *s, uint64_t *out)
{
    char *end;
    if (!s || !isdigit((unsigned char)*s)) return false;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end) return false;
    *out = v;
    return true;
}

/* A List Blobs page as it is read: the <Blob> being read, and what the
 * page said so far. */
struct list_page {
    struct xfer *x;
    char *name, *length, *md5, *etag, *next;
    bool root_seen, ok;
};

#define LIST_BLOB "EnumerationResults/Blobs/Blob"

static void list_field(void *arg, const char *path, const char *text)
{
    struct list_page *pg = arg;
    if (strcmp(path, "EnumerationResults") == 0) pg->root_seen = true;
    else if (strcmp(path, "EnumerationResults/NextMarker") == 0) set_string(&pg->next, text);
    else if (strncmp(path, LIST_BLOB "/", sizeof LIST_BLOB) == 0) {
        const char *field = path + sizeof LIST_BLOB;
        if (strcmp(field, "Name") == 0) set_string(&pg->name, text);
        else if (strcmp(field, "Properties/Content-Length") == 0) set_string(&pg->length, text);
        else if (strcmp(field, "Properties/Content-MD5") == 0) set_string(&pg->md5, text);
        else if (strcmp(field, "Properties/Etag") == 0) set_string(&pg->etag, text);
    } else if (strcmp(path, LIST_BLOB) == 0) {            /* the end of one blob */
        uint64_t size = 0;
        if (pg->ok && pg->name && *pg->name && parse_size(pg->length, &size))
            add_remote(pg->x, pg->name, size, pg->md5, pg->etag);
        else
            pg->ok = false;
        char **fields[] = { &pg->name, &pg->length, &pg->md5, &pg->etag };
        for (size_t k = 0; k < sizeof fields / sizeof *fields; k++) set_string(fields[k], NULL);
    }
}

/* One page of List Blobs: each <Blob>'s Name, Content-Length, Content-MD5
 * and Etag; *next the NextMarker (NULL on the last page). */
static bool parse_list_page(struct xfer *x, const struct http_response *resp, char **next)
{
    struct list_page pg = { .x = x, .ok = true };
    bool ok = blob_xml_walk(resp->body, resp->body_len, list_field, &pg) && pg.root_seen && pg.ok;
    char **fields[] = { &pg.name, &pg.length, &pg.md5, &pg.etag };
    for (size_t k = 0; k < sizeof fields / sizeof *fields; k++) set_string(fields[k], NULL);
    *next = ok && pg.next && *pg.next ? pg.next : NULL;
    if (!*next) free(pg.next);
    return ok;
}

static void after_listing(struct xfer *x);

static void on_list(struct xfer *x, const struct http_response *resp)
{
    char *next = NULL;
    if (!parse_list_page(x, resp, &next)) {
        fail(x, "cannot list %s/%s: the answer is not a List Blobs result (HTTP %ld)", x->c->name, x->prefix,
             resp->status);
        return;
    }
    if (next) list_page(x, next);
    else after_listing(x);
    free(next);
}

/* A Get Blob Properties answer's size, MD5 and ETag (NULL when absent; the
 * response keeps them), or false after failing the transfer: no size. */
static bool head_properties(struct xfer *x, const struct http_response *resp, const char *name, uint64_t *size,
                            const char **md5, const char **etag)
{
    if (!parse_size(http_response_header(resp, "content-length"), size)) {
        fail(x, "cannot look up %s/%s: the answer has no Content-Length", x->c->name, name);
        return false;
    }
    *md5 = http_response_header(resp, "content-md5");
    *etag = http_response_header(resp, "etag");
    return true;
}

static void on_head(struct xfer *x, const struct http_response *resp)
{
    if (resp->status == 404) {
        after_listing(x);
        return;
    }
    uint64_t size = 0;
    const char *md5, *etag;
    if (!head_properties(x, resp, x->prefix, &size, &md5, &etag)) return;
    add_remote(x, x->prefix, size, md5, etag);
    after_listing(x);
}

/* "cannot upload data/x.bin to container/prefix/x.bin: …" and the like. */
static void fail_request(struct xfer *x, const struct req *r, const struct http_response *resp)
{
    char msg[2048];
    blob_error_message(resp, msg, sizeof msg);
    const struct item *it = r->kind == R_LIST || r->kind == R_HEAD || r->kind == R_CREATE || r->kind == R_METADATA ||
                            r->kind == R_DELETE ? NULL : &x->items[r->item];
    if (r->kind == R_LIST) fail(x, "cannot list %s/%s: %s", x->c->name, x->prefix, msg);
    else if (r->kind == R_CREATE) fail(x, "cannot create the container %s: %s", x->c->name, msg);
    else if (r->kind == R_METADATA) fail(x, "cannot set the metadata of %s/%s: %s", x->c->name, x->prefix, msg);
    else if (r->kind == R_DELETE)
        fail(x, "cannot delete %s/%s (a blob the folder %s no longer holds): %s", x->c->name, x->remote[r->item].name,
             x->local, msg);
    else if (!it && x->kind == X_UPLOAD) fail(x, "cannot upload %s to %s/%s: %s", x->local, x->c->name, x->prefix, msg);
    else if (!it && x->kind == X_DOWNLOAD) fail(x, "cannot download %s/%s to %s: %s", x->c->name, x->prefix, x->local, msg);
    else if (!it) fail(x, "cannot look up %s/%s: %s", x->c->name, x->prefix, msg);
    else if (x->kind == X_UPLOAD) fail(x, "cannot upload %s to %s/%s: %s", it->path, x->c->name, it->blob, msg);
    else fail(x, "cannot download %s/%s to %s: %s", x->c->name, it->blob, it->path, msg);
}

static void start_finish_job(struct xfer *x, size_t item);
static void start_prepare(struct xfer *x, size_t item);

static void on_part_done(struct xfer *x, struct req *r, const struct http_response *resp)
{
    struct item *it = &x->items[r->item];
    switch (r->kind) {
    case R_GET_RANGE:
        if (resp->sink_written != r->len) {
            fail(x, "cannot download %s/%s to %s: a range came with %llu of its %llu bytes", x->c->name, it->blob,
                 it->path, (unsigned long long)resp->sink_written, (unsigned long long)r->len);
            return;
        }
        it->bytes_got += r->len;
        /* fallthrough */
    case R_PUT_BLOCK:
        x->prog.bytes_done += r->len;
        x->prog.bytes_sent += r->len;
        if (--it->parts_left) break;
        if (r->kind == R_PUT_BLOCK) queue_push(x, R_PUT_LIST, r->item, 0);
        else start_finish_job(x, r->item);
        break;
    case R_PUT_BLOB:
        x->prog.bytes_done += r->len;
        x->prog.bytes_sent += r->len;
        /* fallthrough */
    default:                                    /* R_PUT_LIST */
        item_done(x);
        break;
    }
    report(x, false);
}

/* ---- downloads: a blob that changed under its ranges ------------------------------ */

/* Its ranges drained, the blob is looked up again: its new size, MD5 and
 * ETag. */
static void head_changed(struct xfer *x, size_t i)
{
    struct item *it = &x->items[i];
    it->restart_pending = false;
    send_head(x, R_HEAD_CHANGED, i, it->blob);
}

/* A 412 to a range's If-Match: the blob is no longer the version the
 * ranges so far came from.  What came of it is worthless (a file of two
 * versions), so the item starts again from nothing, once the ranges still
 * out (some may yet succeed, with old bytes) are back: their writes into
 * the ".flowpart" must be over before it is truncated. */
static void blob_changed(struct xfer *x, size_t i)
{
    struct item *it = &x->items[i];
    if (it->attempt == BLOB_CHANGED_RETRIES) {
        fail(x, "cannot download %s/%s to %s: the blob changed while it was being downloaded, %u times in a row "
             "(something is still writing it)", x->c->name, it->blob, it->path, it->attempt + 1);
        return;
    }
    it->attempt++;
    it->restart_pending = true;
    x->prog.bytes_done -= it->bytes_got;
    it->bytes_got = 0;
    for (struct req *o = x->reqs; o; o = o->next)
        if (o->kind == R_GET_RANGE && o->item == i) http_cancel(o->t);
    if (it->ranges_out == 0) head_changed(x, i);
}

/* Whether a range's answer was taken care of here: one of an older attempt
 * is dropped, a 412 to our If-Match restarts the blob.  Anything else is
 * the caller's. */
static bool range_of_changed_blob(struct xfer *x, const struct req *r, const struct http_response *resp)
{
    struct item *it = &x->items[r->item];
    if (r->attempt != it->attempt) {
        if (it->restart_pending && it->ranges_out == 0) head_changed(x, r->item);
        return true;
    }
    if (resp->status != 412 || !it->etag || !*it->etag) return false;
    blob_changed(x, r->item);
    return true;
}

/* The blob as it is now: the item takes its size, MD5 and ETag, and its
 * ".flowpart" is prepared again (truncated, on the pool), as a new item's
 * is; the file already at its name is kept if it is this version. */
static void on_head_changed(struct xfer *x, size_t i, const struct http_response *resp)
{
    struct item *it = &x->items[i];
    uint64_t size = 0;
    const char *md5, *etag;
    if (!head_properties(x, resp, it->blob, &size, &md5, &etag)) return;
    x->prog.bytes_total = x->prog.bytes_total - it->size + size;
    it->size = size;
    snprintf(it->md5, sizeof it->md5, "%s", md5 ? md5 : "");
    set_string(&it->etag, etag ? etag : "");
    if (it->fd >= 0) close(it->fd);
    it->fd = -1;
    start_prepare(x, i);
}

/* A Delete Blob of a hierarchical namespace's directory that is not empty:
 * 409 with that error code (any other 409, SnapshotsPresent say, is a
 * failure: the blob would stay). */
static bool directory_not_empty(const struct http_response *resp)
{
    const char *code = http_response_header(resp, "x-ms-error-code");
    return resp->status == 409 && code &&
           (strcmp(code, "DirectoryNotEmpty") == 0 || strcmp(code, "DirectoryIsNotEmpty") == 0);
}

static void on_answer(void *arg, const struct http_response *resp)
{
    struct req *r = arg;
    struct xfer *x = r->x;
    if (!x) {                                   /* the wait was freed meanwhile */
        free(r);
        return;
    }
    req_unlink(x, r);
    if (r->kind == R_GET_RANGE) x->items[r->item].ranges_out--;
    bool ok = resp->status >= 200 && resp->status <= 299;
    if (x->error) {
        /* stopping: the answer changes nothing */
    } else if (r->kind == R_GET_RANGE && range_of_changed_blob(x, r, resp)) {
        /* dropped; the blob starts again */
    } else if (r->kind == R_HEAD_CHANGED && ok) {
        on_head_changed(x, r->item, resp);
    } else if (r->kind == R_HEAD && (ok || resp->status == 404)) {
        if (x->kind == X_EXISTS) {
            x->exists = ok;
            x->complete = true;
        } else {
            on_head(x, resp);
        }
    } else if ((r->kind == R_CREATE && (ok || resp->status == 409)) || (r->kind == R_METADATA && ok)) {
        x->complete = true;
    } else if (r->kind == R_DELETE && (ok || resp->status == 404 || directory_not_empty(resp))) {
        /* (a directory of an account with a hierarchical namespace that still
         * holds blobs is left: what it holds is not stale) */
        x->deletes_left--;
        check_complete(x);
    } else if (!ok) {
        fail_request(x, r, resp);
    } else if (r->kind == R_LIST) {
        on_list(x, resp);
    } else {
        on_part_done(x, r, resp);
    }
    free(r);
    pump(x);
}

/* ---- uploads: sending a part ---------------------------------------------------- */

/* Block ids: the same length for every block of a blob (the service's
 * rule), base64 of "%06zu" as code.c's. */
static void block_id(size_t block, char out[16])
{
    char raw[32];
    snprintf(raw, sizeof raw, "%06zu", block % 1000000);
    base64_of((const unsigned char *)raw, 6, out);
}

static size_t block_count(uint64_t size)
{
    return (size_t)((size + BLOB_BLOCK_SIZE - 1) / BLOB_BLOCK_SIZE);
}

static void send_put_blob(struct xfer *x, size_t i)
{
    struct item *it = &x->items[i];
    char md5_line[64];
    snprintf(md5_line, sizeof md5_line, "Content-MD5: %s", it->md5);
    const char *headers[] = { "x-ms-blob-type: BlockBlob", md5_line, NULL };
    struct blob_call call = { .method = "PUT", .blob = it->blob, .headers = headers };
    struct http_request req = { .body_file = it->path, .body_len_file = it->size };
    req_start(x, R_PUT_BLOB, i, 0, it->size, &call, &req);
}

static void send_put_block(struct xfer *x, size_t i, size_t b)
{
    struct item *it = &x->items[i];
    char id[16], md5[MD5_B64], md5_line[64];
    block_id(b, id);
    base64_of(it->block_md5[b], 16, md5);
    snprintf(md5_line, sizeof md5_line, "Content-MD5: %s", md5);
    char *enc = http_urlencode(id);
    char *query = xasprintf("comp=block&blockid=%s", enc);
    free(enc);
    uint64_t offset = (uint64_t)b * BLOB_BLOCK_SIZE;
    uint64_t len = it->size - offset < BLOB_BLOCK_SIZE ? it->size - offset : BLOB_BLOCK_SIZE;
    const char *headers[] = { md5_line, NULL };
    struct blob_call call = { .method = "PUT", .blob = it->blob, .query = query, .headers = headers };
    struct http_request req = { .body_file = it->path, .body_offset = offset, .body_len_file = len };
    req_start(x, R_PUT_BLOCK, i, b, len, &call, &req);
    free(query);
}

static void send_put_list(struct xfer *x, size_t i)
{
    struct item *it = &x->items[i];
    struct strbuf body = STRBUF_INIT;
    sb_adds(&body, "<?xml version=\"1.0\" encoding=\"utf-8\"?><BlockList>");
    for (size_t b = 0; b < it->n_parts; b++) {
        char id[16];
        block_id(b, id);
        sb_addf(&body, "<Latest>%s</Latest>", id);
    }
    sb_adds(&body, "</BlockList>");
    char md5_line[64];
    snprintf(md5_line, sizeof md5_line, "x-ms-blob-content-md5: %s", it->md5);
    const char *headers[] = { md5_line, "Content-Type: application/xml", NULL };
    struct blob_call call = { .method = "PUT", .blob = it->blob, .query = "comp=blocklist", .headers = headers };
    struct http_request req = { .body = body.buf, .body_len = body.len };
    req_start(x, R_PUT_LIST, i, 0, 0, &call, &req);
    sb_release(&body);
}

static void send_get_range(struct xfer *x, size_t i, size_t part)
{
    struct item *it = &x->items[i];
    uint64_t offset = (uint64_t)part * BLOB_RANGE_SIZE;
    uint64_t len = it->size - offset < BLOB_RANGE_SIZE ? it->size - offset : BLOB_RANGE_SIZE;
    char range[80];
    snprintf(range, sizeof range, "x-ms-range: bytes=%llu-%llu", (unsigned long long)offset,
             (unsigned long long)(offset + len - 1));
    /* The ETag as the service gave it: List Blobs' comes without quotes,
     * HEAD's with; If-Match takes either (x-ms-version 2011-08-18 on). */
    char *if_match = it->etag && *it->etag ? xasprintf("If-Match: %s", it->etag) : NULL;
    const char *headers[] = { range, if_match, NULL };
    struct blob_call call = { .method = "GET", .blob = it->blob, .headers = headers };
    struct http_request req = { .sink = true, .sink_fd = it->fd, .sink_offset = offset };
    struct req *r = req_start(x, R_GET_RANGE, i, part, len, &call, &req);
    free(if_match);
    if (!r) return;
    r->attempt = it->attempt;
    it->ranges_out++;
}

/* Delete Blob of remote blob i, one the uploaded folder no longer holds. */
static void send_delete(struct xfer *x, size_t i)
{
    struct blob_call call = { .method = "DELETE", .blob = x->remote[i].name };
    struct http_request req = { 0 };
    req_start(x, R_DELETE, i, 0, 0, &call, &req);
}

/* A folder uploaded under prefix/ replaces what is there: the blobs under it
 * that the folder does not hold (an earlier version's files) are deleted, or
 * a reader of the prefix would see them too (a job, or the next download),
 * and a folder that lost a file would hash as it was.  Never at the
 * container's root, nor for the caller's own list of files. */
static void queue_stale(struct xfer *x)
{
    if (!*x->prefix || x->listed_by_caller) return;
    struct strmap mine = { 0 };
    for (size_t i = 0; i < x->n_items; i++) strmap_put(&mine, x->items[i].blob, i);
    for (size_t i = 0; i < x->n_remote; i++) {
        size_t k;
        if (strmap_get(&mine, x->remote[i].name, &k)) continue;
        queue_push(x, R_DELETE, i, 0);
        x->deletes_left++;
    }
    strmap_free(&mine);
}

static void send_next(struct xfer *x)
{
    struct part_ref p = x->queue[x->q_head++];
    x->q_len--;
    if (p.kind == R_GET_RANGE && p.attempt != x->items[p.item].attempt) return;    /* of a version now gone */
    switch (p.kind) {
    case R_DELETE: send_delete(x, p.item); break;
    case R_PUT_BLOB: send_put_blob(x, p.item); break;
    case R_PUT_BLOCK: send_put_block(x, p.item, p.part); break;
    case R_PUT_LIST: send_put_list(x, p.item); break;
    default: send_get_range(x, p.item, p.part); break;
    }
}

/* ---- pool jobs ------------------------------------------------------------------ */

static void job_done(void *arg);
static void job_run(void *arg);

static struct job *job_new(struct xfer *x, enum job_kind kind, size_t item)
{
    struct job *j = xcalloc(1, sizeof *j);
    j->x = x;
    j->kind = kind;
    j->item = item;
    j->fd = -1;
    atomic_init(&j->stop, false);
    return j;
}

static void job_submit(struct xfer *x, struct job *j)
{
    j->next = x->jobs;
    if (x->jobs) x->jobs->prev = j;
    x->jobs = j;
    x->n_jobs++;
    char err[256];
    if (x->c->pool && work_submit(x->c->pool, job_run, job_done, j, err, sizeof err) == 0) return;
    job_run(j);                       /* no pool: here (a stall of the loop, as code.c's scan) */
    job_done(j);
}

static void job_unlink(struct xfer *x, struct job *j)
{
    if (j->prev) j->prev->next = j->next;
    else x->jobs = j->next;
    if (j->next) j->next->prev = j->prev;
    x->n_jobs--;
}

/* MD5 of fd's first `size` bytes, and of each BLOB_BLOCK_SIZE block when
 * blocks is set; -1 with a message (errno ECANCELED once stop is set). */
static int md5_fd(struct job *j, int fd, uint64_t size, bool blocks, unsigned char whole[16])
{
    const struct crypto_lib *ossl = crypto_lib();
    size_t n_blocks = blocks ? block_count(size) : 0;
    if (blocks) j->block_md5 = xcalloc(n_blocks ? n_blocks : 1, sizeof *j->block_md5);
    EVP_MD_CTX *all = ossl->EVP_MD_CTX_new(), *blk = ossl->EVP_MD_CTX_new();
    if (!all || !blk) abort();                 /* out of memory, as util.h's */
    ossl->EVP_DigestInit_ex(all, ossl->EVP_md5(), NULL);
    ossl->EVP_DigestInit_ex(blk, ossl->EVP_md5(), NULL);
    unsigned char *buf = xmalloc(READ_CHUNK);
    uint64_t pos = 0;
    int rc = 0;
    while (pos < size && rc == 0) {
        if (atomic_load(&j->stop)) {
            snprintf(j->err, sizeof j->err, "cancelled");
            rc = -1;
            break;
        }
        size_t want = READ_CHUNK;
        if (want > size - pos) want = (size_t)(size - pos);
        if (blocks && want > BLOB_BLOCK_SIZE - pos % BLOB_BLOCK_SIZE) want = (size_t)(BLOB_BLOCK_SIZE - pos % BLOB_BLOCK_SIZE);
        ssize_t got = pread(fd, buf, want, (off_t)pos);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) {
            snprintf(j->err, sizeof j->err, "cannot read %s: %s", j->path,
                     got < 0 ? strerror(errno) : "it became shorter while it was read");
            rc = -1;
            break;
        }
        ossl->EVP_DigestUpdate(all, buf, (size_t)got);
        ossl->EVP_DigestUpdate(blk, buf, (size_t)got);
        pos += (uint64_t)got;
        if (blocks && (pos % BLOB_BLOCK_SIZE == 0 || pos == size)) {
            ossl->EVP_DigestFinal_ex(blk, j->block_md5[(pos - 1) / BLOB_BLOCK_SIZE], NULL);
            ossl->EVP_DigestInit_ex(blk, ossl->EVP_md5(), NULL);
        }
    }
    if (rc == 0) ossl->EVP_DigestFinal_ex(all, whole, NULL);
    free(buf);
    ossl->EVP_MD_CTX_free(all);
    ossl->EVP_MD_CTX_free(blk);
    return rc;
}

/* Upload: the file's MD5 (and its blocks' when it goes up in blocks). */
static void run_hash(struct job *j)
{
    int fd = open(j->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(j->err, sizeof j->err, "cannot read %s: %s", j->path, strerror(errno));
        j->rc = -1;
        return;
    }
    unsigned char md5[16];
    j->rc = md5_fd(j, fd, j->size, j->size > BLOB_BLOCK_THRESHOLD, md5);
    close(fd);
    if (j->rc == 0) base64_of(md5, 16, j->md5);
}

static bool file_matches(struct job *j, const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size != j->size) return false;
    if (!j->want_md5[0]) return true;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) return false;
    unsigned char md5[16];
    char b64[MD5_B64];
    int rc = md5_fd(j, fd, j->size, false, md5);
    close(fd);
    free(j->block_md5);
    j->block_md5 = NULL;
    if (rc != 0) return false;
    base64_of(md5, 16, b64);
    return strcmp(b64, j->want_md5) == 0;
}

/* Download: keep a file that is already there, else make its directory and
 * open (truncating) its ".flowpart". */
static void run_prepare(struct job *j)
{
    char *dir = path_parent(j->path);
    if (nofollow_mkdir_p(dir, 0755, j->err, sizeof j->err) != 0) j->rc = -1;
    free(dir);
    if (j->rc) return;
    if (file_matches(j, j->path)) {
        j->skip = true;
        return;
    }
    if (atomic_load(&j->stop)) {
        snprintf(j->err, sizeof j->err, "cancelled");
        j->rc = -1;
        return;
    }
    char *part = xasprintf("%s" PART_SUFFIX, j->path);
    /* read back too: its MD5 is checked before the rename */
    j->fd = nofollow_open(part, O_RDWR | O_CREAT | O_TRUNC, 0644, j->err, sizeof j->err);
    free(part);
    if (j->fd < 0) j->rc = -1;
}

/* Download: the ".flowpart" checked (length, MD5), synced, renamed.  The
 * directory is not synced: after a power loss the rename may be lost, and
 * the file is fetched again; what has the real name is always whole.  (flow
 * syncs the tree when it commits it as an output.) */
static void run_finish(struct job *j)
{
    struct stat st;
    char *part = xasprintf("%s" PART_SUFFIX, j->path);
    unsigned char md5[16];
    char b64[MD5_B64];
    j->rc = -1;
    if (fstat(j->fd, &st) != 0) {
        snprintf(j->err, sizeof j->err, "cannot examine %s: %s", part, strerror(errno));
    } else if ((uint64_t)st.st_size != j->size) {
        snprintf(j->err, sizeof j->err, "%s has %lld bytes, the blob %llu", part, (long long)st.st_size,
                 (unsigned long long)j->size);
    } else if (j->want_md5[0] && md5_fd(j, j->fd, j->size, false, md5) != 0) {
        /* md5_fd said why */
    } else if (j->want_md5[0] && (base64_of(md5, 16, b64), strcmp(b64, j->want_md5) != 0)) {
        snprintf(j->err, sizeof j->err, "what came has the MD5 %s, the blob's Content-MD5 is %s", b64, j->want_md5);
    } else if (fsync(j->fd) != 0) {
        snprintf(j->err, sizeof j->err, "cannot sync %s: %s%s", part, strerror(errno), errno_hint(errno));
    } else {
        j->rc = 0;
    }
    int fd = j->fd;
    j->fd = -1;
    if (close(fd) != 0 && j->rc == 0) {
        snprintf(j->err, sizeof j->err, "cannot write %s: %s%s", part, strerror(errno), errno_hint(errno));
        j->rc = -1;
    }
    if (j->rc == 0 && rename(part, j->path) != 0) {
        snprintf(j->err, sizeof j->err, "cannot rename %s to %s: %s", part, j->path, strerror(errno));
        j->rc = -1;
    }
    free(part);
}

/* ---- the local tree (uploads) --------------------------------------------------- */

struct walk_dir {
    dev_t dev;
    ino_t ino;
};

static void walk_add(struct job *j, const char *rel, const char *path, uint64_t size)
{
    ARRAY_GROW(j->items, j->n_items, j->cap_items);
    j->items[j->n_items++] = (struct item){ .rel = xstrdup(rel), .path = xstrdup(path), .size = size, .fd = -1 };
}

/* Symlinks are followed (to files and into directories); a directory met
 * again below itself is a loop, refused.  ".flowpart" files are a download's
 * leftovers, never data: they are not uploaded. */
static int walk(struct job *j, const char *path, const char *rel, struct walk_dir *up, size_t depth)
{
    if (depth >= WALK_MAX_DEPTH) {
        snprintf(j->err, sizeof j->err, "%s: more than %d directories deep", path, WALK_MAX_DEPTH);
        return -1;
    }
    size_t n = 0;
    char **names = dir_list(path, &n);
    if (!names) {
        snprintf(j->err, sizeof j->err, "cannot read the directory %s: %s", path, strerror(errno));
        return -1;
    }
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        char *child = xasprintf("%s/%s", path, names[i]);
        char *child_rel = *rel ? xasprintf("%s/%s", rel, names[i]) : xstrdup(names[i]);
        struct stat st;
        size_t len = strlen(names[i]);
        if (atomic_load(&j->stop)) {
            snprintf(j->err, sizeof j->err, "cancelled");
            rc = -1;
        } else if (stat(child, &st) != 0) {
            snprintf(j->err, sizeof j->err, "cannot examine %s: %s%s", child, strerror(errno),
                     errno == ENOENT ? " (a dangling symbolic link?)" : "");
            rc = -1;
        } else if (S_ISDIR(st.st_mode)) {
            for (size_t k = 0; k <= depth && rc == 0; k++)
                if (up[k].dev == st.st_dev && up[k].ino == st.st_ino) {
                    snprintf(j->err, sizeof j->err, "%s leads back to a directory above it (a symbolic link loop)",
                             child);
                    rc = -1;
                }
            up[depth + 1] = (struct walk_dir){ st.st_dev, st.st_ino };
            if (rc == 0) rc = walk(j, child, child_rel, up, depth + 1);
        } else if (!S_ISREG(st.st_mode)) {
            snprintf(j->err, sizeof j->err, "%s is not a regular file", child);
            rc = -1;
        } else if (!(len > strlen(PART_SUFFIX) && strcmp(names[i] + len - strlen(PART_SUFFIX), PART_SUFFIX) == 0)) {
            walk_add(j, child_rel, child, (uint64_t)st.st_size);
        }
        free(child);
        free(child_rel);
    }
    dir_list_free(names, n);
    return rc;
}

static void run_walk(struct job *j)
{
    struct stat st;
    if (stat(j->path, &st) != 0) {
        snprintf(j->err, sizeof j->err, "cannot upload %s: %s", j->path, strerror(errno));
        j->rc = -1;
        return;
    }
    if (S_ISREG(st.st_mode)) {
        walk_add(j, "", j->path, (uint64_t)st.st_size);
        return;
    }
    if (!S_ISDIR(st.st_mode)) {
        snprintf(j->err, sizeof j->err, "cannot upload %s: not a file or a directory", j->path);
        j->rc = -1;
        return;
    }
    j->is_dir = true;
    struct walk_dir *up = xcalloc(WALK_MAX_DEPTH + 1, sizeof *up);
    up[0] = (struct walk_dir){ st.st_dev, st.st_ino };
    j->rc = walk(j, j->path, "", up, 0);
    free(up);
}

static void job_run(void *arg)
{
    struct job *j = arg;
    switch (j->kind) {
    case J_WALK: run_walk(j); break;
    case J_HASH: run_hash(j); break;
    case J_PREPARE: run_prepare(j); break;
    case J_FINISH: run_finish(j); break;
    }
}

/* ---- the pipeline ---------------------------------------------------------------- */

static void enqueue_upload(struct xfer *x, size_t i)
{
    struct item *it = &x->items[i];
    size_t k;
    if (strmap_get(&x->remote_index, it->blob, &k) && x->remote[k].size == it->size && x->remote[k].md5[0] &&
        strcmp(x->remote[k].md5, it->md5) == 0) {
        x->prog.files_skipped++;
        x->prog.bytes_done += it->size;
        item_done(x);
        return;
    }
    if (it->size <= BLOB_BLOCK_THRESHOLD) {
        queue_push(x, R_PUT_BLOB, i, 0);
        return;
    }
    it->n_parts = it->parts_left = block_count(it->size);
    for (size_t b = 0; b < it->n_parts; b++) queue_push(x, R_PUT_BLOCK, i, b);
}

static void enqueue_download(struct xfer *x, size_t i, int fd)
{
    struct item *it = &x->items[i];
    it->fd = fd;
    if (it->size == 0) {
        start_finish_job(x, i);
        return;
    }
    it->n_parts = it->parts_left = (size_t)((it->size + BLOB_RANGE_SIZE - 1) / BLOB_RANGE_SIZE);
    for (size_t p = 0; p < it->n_parts; p++) queue_push(x, R_GET_RANGE, i, p);
}

static void start_finish_job(struct xfer *x, size_t i)
{
    struct item *it = &x->items[i];
    struct job *j = job_new(x, J_FINISH, i);
    j->path = xstrdup(it->path);
    j->size = it->size;
    memcpy(j->want_md5, it->md5, sizeof j->want_md5);
    j->fd = it->fd;                          /* the job closes it */
    it->fd = -1;
    job_submit(x, j);
}

static void start_prepare(struct xfer *x, size_t i)
{
    struct item *it = &x->items[i];
    struct job *j = job_new(x, x->kind == X_UPLOAD ? J_HASH : J_PREPARE, i);
    j->path = xstrdup(it->path);
    j->size = it->size;
    memcpy(j->want_md5, it->md5, sizeof j->want_md5);
    job_submit(x, j);
}

static void upload_items(struct xfer *x);

static void on_walked(struct xfer *x, struct job *j)
{
    x->items = j->items;
    x->n_items = j->n_items;
    j->items = NULL;
    j->n_items = 0;
    x->as_folder = j->is_dir;
    if (!x->as_folder && !*x->prefix) {
        fail(x, "cannot upload %s to the container %s: a file needs a blob name", x->local, x->c->name);
        return;
    }
    upload_items(x);
}

/* The items known (walked, or given): their blob names, then what is there. */
static void upload_items(struct xfer *x)
{
    for (size_t i = 0; i < x->n_items; i++) {
        struct item *it = &x->items[i];
        it->blob = !x->as_folder ? xstrdup(x->prefix)
                   : *x->prefix  ? xasprintf("%s/%s", x->prefix, it->rel)
                                 : xstrdup(it->rel);
        x->prog.bytes_total += it->size;
    }
    x->prog.files_total = x->n_items;
    if (x->as_folder) list_page(x, NULL);
    else head_blob(x, x->prefix);
}

static void on_job(struct xfer *x, struct job *j)
{
    struct item *it = j->kind == J_WALK ? NULL : &x->items[j->item];
    if (j->rc != 0) {
        if (j->kind == J_WALK) fail(x, "%s", j->err);
        else if (x->kind == X_UPLOAD) fail(x, "cannot upload %s to %s/%s: %s", it->path, x->c->name, it->blob, j->err);
        else fail(x, "cannot download %s/%s to %s: %s", x->c->name, it->blob, it->path, j->err);
        return;
    }
    switch (j->kind) {
    case J_WALK:
        on_walked(x, j);
        break;
    case J_HASH:
        memcpy(it->md5, j->md5, sizeof it->md5);
        it->block_md5 = j->block_md5;
        j->block_md5 = NULL;
        enqueue_upload(x, j->item);
        break;
    case J_PREPARE:
        if (j->skip) {
            x->prog.files_skipped++;
            x->prog.bytes_done += it->size;
            item_done(x);
        } else {
            enqueue_download(x, j->item, j->fd);
            j->fd = -1;
        }
        break;
    case J_FINISH:
        item_done(x);
        break;
    }
}

static void job_done(void *arg)
{
    struct job *j = arg;
    struct xfer *x = j->x;
    if (x) {
        job_unlink(x, j);
        /* a file renamed into place while the transfer stopped still counts */
        if (!x->error || (j->kind == J_FINISH && j->rc == 0)) on_job(x, j);
    }
    job_free(j);                             /* closes a .flowpart no one took */
    if (x) pump(x);
}

/* A relative name a download may write: no "..", ".", absolute path or
 * empty segment, and not a name of our own ".flowpart" files. */
static bool safe_rel(const char *rel)
{
    size_t len = strlen(rel), plen = strlen(PART_SUFFIX);
    if (!*rel || rel[0] == '/' || (len >= plen && strcmp(rel + len - plen, PART_SUFFIX) == 0)) return false;
    for (const char *p = rel;;) {
        size_t n = strcspn(p, "/");
        if (n == 0 || (n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.')) return false;
        if (!p[n]) return true;
        p += n + 1;
    }
}

static void download_items(struct xfer *x)
{
    size_t skip = x->as_folder && *x->prefix ? strlen(x->prefix) + 1 : 0;
    x->items = xcalloc(x->n_remote ? x->n_remote : 1, sizeof *x->items);
    for (size_t i = 0; i < x->n_remote; i++) {
        const struct remote *r = &x->remote[i];
        const char *rel = x->as_folder ? r->name + skip : "";
        if (x->as_folder && !safe_rel(rel)) {
            fail(x, "cannot download %s/%s: the blob name %s cannot be a file's below %s", x->c->name, x->prefix,
                 r->name, x->local);
            return;
        }
        struct item *it = &x->items[x->n_items++];
        *it = (struct item){ .rel = xstrdup(rel), .blob = xstrdup(r->name), .size = r->size, .fd = -1,
                             .etag = xstrdup(r->etag) };
        it->path = x->as_folder ? xasprintf("%s/%s", x->local, rel) : xstrdup(x->local);
        memcpy(it->md5, r->md5, sizeof it->md5);
        x->prog.bytes_total += r->size;
    }
    x->prog.files_total = x->n_items;
}

/* X_STAT: what is there, as one hash of each blob's name, size, MD5 and
 * ETag (the service changes the ETag whenever the blob changes). */
static void stat_listing(struct xfer *x)
{
    struct strbuf sb = STRBUF_INIT;
    for (size_t i = 0; i < x->n_remote; i++) {
        const struct remote *r = &x->remote[i];
        sb_addf(&sb, "%s%c%llu%c%s%c%s\n", r->name, 0, (unsigned long long)r->size, 0, r->md5, 0, r->etag);
        x->prog.bytes_total += r->size;
    }
    x->prog.files_total = x->n_remote;
    sha256_hex(sb.buf ? sb.buf : "", sb.len, x->stat_hash);
    sb_release(&sb);
}

static void after_listing(struct xfer *x)
{
    if ((x->kind == X_DOWNLOAD || x->kind == X_STAT) && x->n_remote == 0) {
        fail(x, "cannot %s %s/%s: there is no blob %s %s", x->kind == X_STAT ? "look up" : "download", x->c->name,
             x->prefix, x->as_folder ? "under" : "named", x->prefix);
        return;
    }
    if (x->kind == X_STAT) {
        stat_listing(x);
        x->complete = true;
        return;
    }
    if (x->kind == X_DOWNLOAD) {
        download_items(x);
        if (x->error) return;
    }
    if (x->kind == X_UPLOAD && x->as_folder) queue_stale(x);
    x->ready = true;
    check_complete(x);                           /* an empty folder uploads nothing (but may delete) */
    report(x, false);
}

static void pump(struct xfer *x)
{
    while (!x->error && x->ready && x->n_jobs < JOBS_AT_ONCE && x->next_prepare < x->n_items &&
           x->q_len < QUEUE_AHEAD)
        start_prepare(x, x->next_prepare++);
    while (!x->error && x->n_reqs < REQUESTS_AT_ONCE && x->q_len) send_next(x);
    maybe_finish(x);
}

/* The first step runs from a timer: nothing can complete within the call. */
static void kick(void *arg)
{
    struct xfer *x = arg;
    x->timer = 0;
    switch (x->kind) {
    case X_UPLOAD: {
        if (x->listed_by_caller) {
            upload_items(x);
            break;
        }
        struct job *j = job_new(x, J_WALK, 0);
        j->path = xstrdup(x->local);
        job_submit(x, j);
        break;
    }
    case X_DOWNLOAD:
    case X_STAT:
        if (!x->as_folder && !*x->prefix) fail(x, "cannot download from the container %s: no blob name", x->c->name);
        else if (x->as_folder) list_page(x, NULL);
        else head_blob(x, x->prefix);
        break;
    case X_EXISTS:
        head_blob(x, x->prefix);
        break;
    case X_CREATE: {
        struct blob_call call = { .method = "PUT", .query = "restype=container" };
        struct http_request req = { 0 };
        req_start(x, R_CREATE, 0, 0, 0, &call, &req);
        break;
    }
    case X_METADATA: {
        struct blob_call call = { .method = "PUT", .blob = x->prefix, .query = "comp=metadata",
                                  .headers = (const char *const *)x->meta };
        struct http_request req = { 0 };
        req_start(x, R_METADATA, 0, 0, 0, &call, &req);
        break;
    }
    }
    pump(x);
}

static char *strip_slashes(const char *s)
{
    char *p = xstrdup(s ? s : "");
    size_t n = strlen(p);
    while (n && p[n - 1] == '/') p[--n] = '\0';
    return p;
}

static struct step_wait *xfer_start(struct xfer *x)
{
    x->timer = loop_add_timer(x->c->loop, 0, kick, x);
    return &x->wait;
}

struct step_wait *blob_upload(struct blob_container *c, const char *local_path, const char *prefix,
                              blob_progress_fn progress, step_wait_done_fn done, void *arg)
{
    struct xfer *x = xfer_new(c, X_UPLOAD, progress, done, arg);
    x->local = strip_slashes(local_path);
    if (!*x->local) set_string(&x->local, "/");
    x->prefix = strip_slashes(prefix);
    return xfer_start(x);
}

struct step_wait *blob_upload_files(struct blob_container *c, const char *prefix, const struct blob_file *files,
                                    size_t n, blob_progress_fn progress, step_wait_done_fn done, void *arg)
{
    struct xfer *x = xfer_new(c, X_UPLOAD, progress, done, arg);
    x->prefix = strip_slashes(prefix);
    x->local = xstrdup("");
    x->as_folder = x->listed_by_caller = true;
    x->items = xcalloc(n ? n : 1, sizeof *x->items);
    for (size_t i = 0; i < n; i++)
        x->items[i] = (struct item){ .rel = xstrdup(files[i].rel), .path = xstrdup(files[i].path),
                                     .size = files[i].size, .fd = -1 };
    x->n_items = n;
    return xfer_start(x);
}

struct step_wait *blob_set_metadata(struct blob_container *c, const char *name, const char *const *meta,
                                    step_wait_done_fn done, void *arg)
{
    struct xfer *x = xfer_new(c, X_METADATA, NULL, done, arg);
    x->prefix = xstrdup(name);
    size_t n = 0;
    while (meta[n]) n++;
    x->meta = xcalloc(n + 1, sizeof *x->meta);
    for (size_t i = 0; i < n; i++) x->meta[i] = xstrdup(meta[i]);
    return xfer_start(x);
}

struct step_wait *blob_download(struct blob_container *c, const char *prefix, bool as_folder, const char *dest,
                                blob_progress_fn progress, step_wait_done_fn done, void *arg)
{
    struct xfer *x = xfer_new(c, X_DOWNLOAD, progress, done, arg);
    x->prefix = strip_slashes(prefix);
    x->local = strip_slashes(dest);
    if (!*x->local) set_string(&x->local, "/");
    x->as_folder = as_folder;
    return xfer_start(x);
}

struct step_wait *blob_stat(struct blob_container *c, const char *prefix, bool as_folder, step_wait_done_fn done,
                            void *arg)
{
    struct xfer *x = xfer_new(c, X_STAT, NULL, done, arg);
    x->prefix = strip_slashes(prefix);
    x->as_folder = as_folder;
    return xfer_start(x);
}

const char *blob_wait_stat_hash(const struct step_wait *w)
{
    const struct xfer *x = (const struct xfer *)w;
    return x->kind == X_STAT && !x->error ? x->stat_hash : NULL;
}

struct step_wait *blob_exists(struct blob_container *c, const char *name, step_wait_done_fn done, void *arg)
{
    struct xfer *x = xfer_new(c, X_EXISTS, NULL, done, arg);
    x->prefix = xstrdup(name);
    return xfer_start(x);
}

struct step_wait *blob_container_create(struct blob_container *c, step_wait_done_fn done, void *arg)
{
    struct xfer *x = xfer_new(c, X_CREATE, NULL, done, arg);
    x->prefix = xstrdup("");
    return xfer_start(x);
}
