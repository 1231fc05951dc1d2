/* code.c — the project's code snapshot as an Azure ML code asset (code.h). */
#include "azureml/code.h"

#include "azureml/arm.h"
#include "azureml/client.h"
#include "azureml/shared.h"
#include "azureml/snapshot.h"
#include "ui.h"
#include "util.h"
#include "work.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <openssl/evp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define UPLOADS_AT_ONCE 8
#define BLOCK_THRESHOLD (32ull << 20)    /* larger files go up in blocks */
#define BLOCK_SIZE (8ull << 20)
#define BLOB_API_VERSION "2021-08-06"
#define PROGRESS_MIN (32ull << 20)       /* a progress line for snapshots this large */

enum code_phase { C_SCAN, C_LOOKUP, C_START, C_UPLOAD, C_METADATA, C_REGISTER, C_READY, C_FAILED };

/* One request of the upload: a whole file (block -1), one block of it, or
 * its block list (block -2, once every block is in). */
struct part {
    size_t file;
    long block;
};

/* The scan and hash, on a pool thread; it owns what it makes until its
 * completion hands it over. */
struct scan_job {
    struct aml_code *code;          /* NULL once the code was freed meanwhile */
    char *root;
    struct snapshot snap;
    char hash[SHA256_HEX_SIZE];
    char err[1024];
    int rc;
    atomic_bool stop;
};

struct aml_code {
    struct shared_result result;    /* first: a waiter's result is the code */
    struct aml_client *client;
    enum code_phase phase;
    struct scan_job *scan;          /* while it runs */
    struct snapshot snap;
    char hash[SHA256_HEX_SIZE];
    char *name, *version, *container, *sas, *blob_uri, *id, *error;
    struct arm_call *call;
    struct part *parts;
    size_t n_parts, next_part, in_flight, parts_done;
    size_t *blocks_left;            /* per file: blocks not yet in */
    uint64_t bytes_done;
    double last_progress;
};

static void code_set_error(struct aml_code *code, const char *fmt, const char *detail);
static void upload_more(struct aml_code *code);

static void code_set_error(struct aml_code *code, const char *fmt, const char *detail)
{
    free(code->error);
    code->error = xasprintf(fmt, detail);
    code->phase = C_FAILED;
    shared_settle(&code->result);
}

/* ---- the steps: scan, lookup, pending upload, blobs, metadata, register -- */

static void scan_run(void *arg)
{
    struct scan_job *job = arg;
    static const char *const exclude[] = { ".git", NULL };     /* history, not code: see docs/azureml.md */
    static const char *const extra[] = { "__pycache__", NULL }; /* as azure-ai-ml does for a job's code */
    struct snapshot_options opt = { exclude, extra };
    /* A file that changes while it is read (a log being written) makes the
     * snapshot no one state of the files: list them again, a few times. */
    for (int tries = 0; tries < 3; tries++) {
        if (tries) snapshot_free(&job->snap);
        job->rc = snapshot_scan(job->root, &opt, &job->snap, job->err, sizeof job->err);
        if (job->rc == 0)
            job->rc = snapshot_hash(&job->snap, &job->stop, NULL, job->hash, job->err, sizeof job->err);
        if (job->rc != -2) break;
    }
}

static void lookup(struct aml_code *code);

static void scan_done(void *arg)
{
    struct scan_job *job = arg;
    struct aml_code *code = job->code;
    if (!code) {                                 /* the client went away meanwhile */
        snapshot_free(&job->snap);
        free(job->root);
        free(job);
        return;
    }
    code->scan = NULL;
    code->snap = job->snap;
    memcpy(code->hash, job->hash, sizeof code->hash);
    int rc = job->rc;
    char err[1024];
    snprintf(err, sizeof err, "%s", job->err);
    free(job->root);
    free(job);
    if (rc != 0) {
        code_set_error(code, "the code snapshot: %s", err);
        return;
    }
    /* name: flow-<project directory>, cleaned; version: the content hash's start */
    struct strbuf name = STRBUF_INIT;
    sb_adds(&name, "flow-");
    for (const char *p = code->snap.dir_name; *p && name.len < 64; p++)
        sb_addc(&name, isalnum((unsigned char)*p) || *p == '-' || *p == '_' ? *p : '-');
    code->name = sb_detach(&name);
    code->version = xstrndup(code->hash, 16);
    lookup(code);
}

static void start_scan(struct aml_code *code, const char *root)
{
    struct scan_job *job = xcalloc(1, sizeof *job);
    job->code = code;
    job->root = xstrdup(root);
    atomic_init(&job->stop, false);
    code->scan = job;
    char err[256];
    if (code->client->pool && work_submit(code->client->pool, scan_run, scan_done, job, err, sizeof err) == 0) return;
    scan_run(job);                               /* no pool: here (a short stall of the loop) */
    scan_done(job);
}

static const cJSON *json_path(const cJSON *root, const char *const *keys)
{
    const cJSON *v = root;
    for (; *keys && v; keys++) v = cJSON_GetObjectItemCaseSensitive(v, *keys);
    return v;
}

/* A failed ARM answer: false after recording why. */
static bool arm_ok(struct aml_code *code, const struct http_response *resp, const char *what)
{
    if (resp->status >= 200 && resp->status <= 299) return true;
    char msg[2048];
    http_error_message(resp, msg, sizeof msg);
    char *fmt = xasprintf("the code snapshot could not be %s: %%s", what);
    code_set_error(code, fmt, msg);
    free(fmt);
    return false;
}

static char *code_url(struct aml_code *code, const char *suffix)
{
    char *rest = xasprintf("codes/%s/versions%s", code->name, suffix);
    char *url = aml_client_url(code->client, rest);
    free(rest);
    return url;
}

static void register_version(struct aml_code *code);
static void start_upload(struct aml_code *code);

static void on_registered(void *arg, const struct http_response *resp)
{
    struct aml_code *code = arg;
    code->call = NULL;
    if (!arm_ok(code, resp, "registered")) return;
    cJSON *root = cJSON_ParseWithLength(resp->body, resp->body_len);
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(root, "id");
    if (cJSON_IsString(id)) code->id = xstrdup(id->valuestring);
    cJSON_Delete(root);
    if (!code->id) {
        code_set_error(code, "the code snapshot: %s", "the service's answer to its registration has no id");
        return;
    }
    code->phase = C_READY;
    shared_settle(&code->result);
}

static void register_version(struct aml_code *code)
{
    code->phase = C_REGISTER;
    cJSON *body = cJSON_CreateObject();
    cJSON *props = cJSON_AddObjectToObject(body, "properties");
    char *uri = xasprintf("%s/%s", code->blob_uri, code->snap.dir_name);
    cJSON_AddStringToObject(props, "codeUri", uri);
    free(uri);
    cJSON_AddBoolToObject(props, "isAnonymous", false);
    cJSON *p = cJSON_AddObjectToObject(props, "properties");
    cJSON_AddStringToObject(p, "hash_sha256", code->hash);
    cJSON_AddStringToObject(p, "hash_version", SNAPSHOT_HASH_VERSION);
    char *text = cJSON_PrintUnformatted(body);
    cJSON_Delete(body);
    char *suffix = xasprintf("/%s", code->version);
    char *url = code_url(code, suffix);
    code->call = arm_call_start(code->client, "PUT", url, text, on_registered, code);
    free(suffix);
    free(url);
    cJSON_free(text);
}

static void on_lookup(void *arg, const struct http_response *resp)
{
    struct aml_code *code = arg;
    code->call = NULL;
    if (!arm_ok(code, resp, "looked up")) return;
    cJSON *root = cJSON_ParseWithLength(resp->body, resp->body_len);
    const cJSON *first = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(root, "value"), 0);
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(first, "id");
    if (cJSON_IsString(id)) code->id = xstrdup(id->valuestring);
    cJSON_Delete(root);
    if (code->id) {                          /* the same files are registered already */
        code->phase = C_READY;
        if (ui_level() >= UI_VERBOSE) ui_info("azureml: code snapshot %.12s… already registered", code->hash);
        shared_settle(&code->result);
        return;
    }
    start_upload(code);
}

static void lookup(struct aml_code *code)
{
    code->phase = C_LOOKUP;
    char *suffix = xasprintf("?hash=%s&hashVersion=%s", code->hash, SNAPSHOT_HASH_VERSION);
    char *url = code_url(code, suffix);
    code->call = arm_call_start(code->client, "GET", url, NULL, on_lookup, code);
    free(suffix);
    free(url);
}

static void on_pending_upload(void *arg, const struct http_response *resp)
{
    struct aml_code *code = arg;
    code->call = NULL;
    if (!arm_ok(code, resp, "given storage")) return;
    cJSON *root = cJSON_ParseWithLength(resp->body, resp->body_len);
    static const char *const blob_key[] = { "blobReferenceForConsumption", "blobUri", NULL };
    static const char *const sas_key[] = { "blobReferenceForConsumption", "credential", "sasUri", NULL };
    const cJSON *blob = json_path(root, blob_key), *sas = json_path(root, sas_key);
    const char *q = cJSON_IsString(sas) ? strchr(sas->valuestring, '?') : NULL;
    if (cJSON_IsString(blob) && q) {
        code->blob_uri = xstrdup(blob->valuestring);
        code->container = xstrndup(sas->valuestring, (size_t)(q - sas->valuestring));
        code->sas = xstrdup(q + 1);
    }
    cJSON_Delete(root);
    if (!code->sas) {
        code_set_error(code, "the code snapshot: %s", "the answer to startPendingUpload has no blobUri and SAS");
        return;
    }
    size_t n = code->container ? strlen(code->container) : 0;
    while (n && code->container[n - 1] == '/') code->container[--n] = '\0';
    n = strlen(code->blob_uri);
    while (n && code->blob_uri[n - 1] == '/') code->blob_uri[--n] = '\0';
    code->phase = C_UPLOAD;
    upload_more(code);
}

static void start_upload(struct aml_code *code)
{
    code->phase = C_START;
    /* the parts: a file whole, or its blocks then its block list */
    struct snapshot *s = &code->snap;
    code->blocks_left = xcalloc(s->count + 1, sizeof *code->blocks_left);
    size_t cap = 0;
    for (size_t i = 0; i < s->count; i++) {
        if (s->files[i].size <= BLOCK_THRESHOLD) {
            ARRAY_GROW(code->parts, code->n_parts, cap);
            code->parts[code->n_parts++] = (struct part){ i, -1 };
            continue;
        }
        size_t blocks = (size_t)((s->files[i].size + BLOCK_SIZE - 1) / BLOCK_SIZE);
        code->blocks_left[i] = blocks;
        for (size_t b = 0; b < blocks; b++) {
            ARRAY_GROW(code->parts, code->n_parts, cap);
            code->parts[code->n_parts++] = (struct part){ i, (long)b };
        }
    }
    char *suffix = xasprintf("/%s/startPendingUpload", code->version);
    char *url = code_url(code, suffix);
    code->call = arm_call_start(code->client, "POST", url, "{\"pendingUploadType\":\"TemporaryBlobReference\"}",
                                on_pending_upload, code);
    free(suffix);
    free(url);
}

/* ---- the blobs ------------------------------------------------------------ */

/* The blob's URL: the container's, the name percent-encoded segment by
 * segment, `extra` query parameters, then the SAS. */
static char *blob_url(const struct aml_code *code, const char *name, const char *extra)
{
    struct strbuf url = STRBUF_INIT;
    sb_adds(&url, code->container);
    const char *p = name;
    while (*p) {
        const char *slash = strchr(p, '/');
        size_t n = slash ? (size_t)(slash - p) : strlen(p);
        char *seg = xstrndup(p, n);
        char *enc = http_urlencode(seg);
        sb_addf(&url, "/%s", enc);
        free(enc);
        free(seg);
        p += n + (slash ? 1 : 0);
    }
    sb_addf(&url, "?%s%s%s", extra ? extra : "", extra ? "&" : "", code->sas);
    return sb_detach(&url);
}

/* Block ids: the same length for every block of a blob, base64 of "%06zu". */
static void block_id(size_t block, char out[16])
{
    char raw[32];               /* 6 digits: at most 50,000 blocks a blob */
    snprintf(raw, sizeof raw, "%06zu", block % 1000000);
    EVP_EncodeBlock((unsigned char *)out, (const unsigned char *)raw, 6);
}

static void progress(struct aml_code *code, bool last)
{
    if (code->snap.total_size < PROGRESS_MIN || ui_level() < UI_NORMAL) return;
    double now = monotonic_seconds();
    if (!last && now - code->last_progress < 2) return;
    code->last_progress = now;
    ui_info("azureml: uploading the code snapshot: %.0f of %.0f MB (%zu files)",
            (double)code->bytes_done / 1e6, (double)code->snap.total_size / 1e6, code->snap.count);
}

static void send_part(struct aml_code *code, size_t k);
static void set_metadata(struct aml_code *code);

static void on_part(void *arg, const struct http_response *resp);

/* The request for part k: its transfer's argument encodes the code and k. */
struct part_call {
    struct aml_code *code;
    size_t k;
};

static void on_part(void *arg, const struct http_response *resp)
{
    struct part_call *pc = arg;
    struct aml_code *code = pc->code;
    size_t k = pc->k;
    free(pc);
    code->in_flight--;
    if (code->phase != C_UPLOAD) return;              /* failed meanwhile: the rest are ignored */
    if (resp->status < 200 || resp->status > 299) {
        char msg[2048];
        http_error_message(resp, msg, sizeof msg);
        code_set_error(code, "the code snapshot could not be uploaded: %s", msg);
        return;
    }
    struct part part = code->parts[k];               /* a copy: the array may grow below */
    const struct snapshot_file *f = &code->snap.files[part.file];
    if (part.block >= 0) {
        uint64_t offset = (uint64_t)part.block * BLOCK_SIZE;
        code->bytes_done += f->size - offset < BLOCK_SIZE ? f->size - offset : BLOCK_SIZE;
        if (--code->blocks_left[part.file] == 0) {    /* every block is in: its list goes last */
            code->parts = xrealloc(code->parts, (code->n_parts + 1) * sizeof *code->parts);
            code->parts[code->n_parts++] = (struct part){ part.file, -2 };
        }
    } else if (part.block == -1) {
        code->bytes_done += f->size;
    }
    code->parts_done++;
    progress(code, false);
    if (code->parts_done == code->n_parts) {
        progress(code, true);
        set_metadata(code);
        return;
    }
    upload_more(code);
}

static void upload_more(struct aml_code *code)
{
    if (code->snap.count == 0) {
        set_metadata(code);
        return;
    }
    while (code->phase == C_UPLOAD && code->in_flight < UPLOADS_AT_ONCE && code->next_part < code->n_parts)
        send_part(code, code->next_part++);
}

static void send_part(struct aml_code *code, size_t k)
{
    const struct part *part = &code->parts[k];
    const struct snapshot_file *f = &code->snap.files[part->file];
    char *name = snapshot_blob_name(&code->snap, part->file);
    char id[16], extra[64];
    struct strbuf list = STRBUF_INIT;
    struct http_request req = { .method = "PUT" };
    const char *blob_headers[] = { "x-ms-version: " BLOB_API_VERSION, "x-ms-blob-type: BlockBlob", NULL };
    const char *block_headers[] = { "x-ms-version: " BLOB_API_VERSION, NULL };
    const char *list_headers[] = { "x-ms-version: " BLOB_API_VERSION, "Content-Type: application/xml", NULL };
    if (part->block == -1) {                          /* Put Blob */
        extra[0] = '\0';
        req.headers = blob_headers;
        req.body_file = f->path;
        req.body_len_file = f->size;
    } else if (part->block >= 0) {                    /* Put Block */
        block_id((size_t)part->block, id);
        char *enc = http_urlencode(id);
        snprintf(extra, sizeof extra, "comp=block&blockid=%s", enc);
        free(enc);
        req.headers = block_headers;
        req.body_file = f->path;
        req.body_offset = (uint64_t)part->block * BLOCK_SIZE;
        req.body_len_file = f->size - req.body_offset < BLOCK_SIZE ? f->size - req.body_offset : BLOCK_SIZE;
    } else {                                          /* Put Block List */
        snprintf(extra, sizeof extra, "comp=blocklist");
        sb_adds(&list, "<?xml version=\"1.0\" encoding=\"utf-8\"?><BlockList>");
        for (size_t b = 0; b < (size_t)((f->size + BLOCK_SIZE - 1) / BLOCK_SIZE); b++) {
            block_id(b, id);
            sb_addf(&list, "<Latest>%s</Latest>", id);
        }
        sb_adds(&list, "</BlockList>");
        req.headers = list_headers;
        req.body = list.buf;
        req.body_len = list.len;
    }
    char *url = blob_url(code, name, extra[0] ? extra : NULL);
    req.url = url;
    struct part_call *pc = xmalloc(sizeof *pc);
    *pc = (struct part_call){ code, k };
    char err[512];
    struct http_transfer *t = http_send(code->client->http, &req, on_part, pc, err, sizeof err);
    free(url);
    free(name);
    sb_release(&list);
    if (!t) {
        free(pc);
        code_set_error(code, "the code snapshot could not be uploaded: %s", err);
        return;
    }
    code->in_flight++;
}

static void on_metadata(void *arg, const struct http_response *resp)
{
    struct aml_code *code = arg;
    if (code->phase != C_METADATA) return;
    if (resp->status < 200 || resp->status > 299) {
        char msg[2048];
        http_error_message(resp, msg, sizeof msg);
        code_set_error(code, "the code snapshot's upload could not be marked complete: %s", msg);
        return;
    }
    register_version(code);
}

/* The indicator file's metadata says the upload is complete (what the SDK
 * checks before uploading the same files again). */
static void set_metadata(struct aml_code *code)
{
    code->phase = C_METADATA;
    if (code->snap.count == 0) {
        register_version(code);
        return;
    }
    char *name = snapshot_blob_name(&code->snap, code->snap.indicator);
    char *url = blob_url(code, name, "comp=metadata");
    char *meta_name = xasprintf("x-ms-meta-name: %s", code->name);
    char *meta_version = xasprintf("x-ms-meta-version: %s", code->version);
    const char *headers[] = { "x-ms-version: " BLOB_API_VERSION, "x-ms-meta-upload_status: completed",
                              meta_name, meta_version, NULL };
    struct http_request req = { .method = "PUT", .url = url, .headers = headers };
    char err[512];
    struct http_transfer *t = http_send(code->client->http, &req, on_metadata, code, err, sizeof err);
    free(meta_name);
    free(meta_version);
    free(url);
    free(name);
    if (!t) code_set_error(code, "the code snapshot's upload could not be marked complete: %s", err);
}

/* ---- the API -------------------------------------------------------------- */

struct step_wait *aml_code_wait(struct aml_client *c, const char *root, step_wait_done_fn done, void *arg)
{
    if (!c->code) {
        c->code = xcalloc(1, sizeof *c->code);
        c->code->result.loop = c->loop;
        c->code->client = c;
        start_scan(c->code, root);
    }
    return shared_wait(&c->code->result, "azureml code", done, arg);
}

const char *aml_code_wait_id(const struct step_wait *w)
{
    const struct aml_code *code = (const struct aml_code *)shared_wait_result(w);
    return code && code->phase == C_READY ? code->id : NULL;
}

const char *aml_code_wait_error(const struct step_wait *w)
{
    const struct aml_code *code = (const struct aml_code *)shared_wait_result(w);
    if (!code) return "cancelled";
    return code->phase == C_FAILED ? code->error : NULL;
}

void aml_code_free(struct aml_code *code)
{
    if (!code) return;
    if (code->scan) {                        /* its completion frees it */
        code->scan->code = NULL;
        atomic_store(&code->scan->stop, true);
    }
    shared_abandon(&code->result);
    snapshot_free(&code->snap);
    wipe_free(code->sas);                       /* a SAS is a credential */
    char **strings[] = { &code->name, &code->version, &code->container, &code->blob_uri, &code->id,
                         &code->error };
    for (size_t i = 0; i < sizeof strings / sizeof *strings; i++) free(*strings[i]);
    free(code->parts);
    free(code->blocks_left);
    free(code);
}
