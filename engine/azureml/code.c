/* code.c — the project's code snapshot as an Azure ML code asset (code.h). */
#include "azureml/code.h"

#include "azureml/arm.h"
#include "azureml/blob.h"
#include "azureml/client.h"
#include "azureml/shared.h"
#include "azureml/snapshot.h"
#include "ui.h"
#include "util.h"
#include "work.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PROGRESS_MIN (32ull << 20)       /* a progress line for snapshots this large */

enum code_phase { C_SCAN, C_LOOKUP, C_START, C_UPLOAD, C_METADATA, C_REGISTER, C_READY, C_FAILED };

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
    char *name, *version, *blob_uri, *id, *error;
    struct arm_call *call;
    struct blob_container *container;   /* from startPendingUpload's SAS */
    struct step_wait *upload;           /* the files, then the indicator's metadata */
};

static void code_set_error(struct aml_code *code, const char *fmt, const char *detail);
static void upload_files(struct aml_code *code);

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
    char err[1024] = "the answer to startPendingUpload has no blobUri and SAS";
    if (cJSON_IsString(blob) && q) {
        code->blob_uri = xstrdup(blob->valuestring);
        char *url = xstrndup(sas->valuestring, (size_t)(q - sas->valuestring));
        size_t n = strlen(url);
        while (n && url[n - 1] == '/') url[--n] = '\0';
        struct blob_container_spec spec = { .url = url, .sas = q + 1 };
        code->container = blob_container_new(code->client->http, code->client->pool, &spec, err, sizeof err);
        free(url);
        wipe(sas->valuestring, strlen(sas->valuestring));    /* a SAS is a credential */
    }
    cJSON_Delete(root);
    if (!code->container) {
        code_set_error(code, "the code snapshot: %s", err);
        return;
    }
    size_t n = strlen(code->blob_uri);
    while (n && code->blob_uri[n - 1] == '/') code->blob_uri[--n] = '\0';
    code->phase = C_UPLOAD;
    upload_files(code);
}

static void start_upload(struct aml_code *code)
{
    code->phase = C_START;
    char *suffix = xasprintf("/%s/startPendingUpload", code->version);
    char *url = code_url(code, suffix);
    code->call = arm_call_start(code->client, "POST", url, "{\"pendingUploadType\":\"TemporaryBlobReference\"}",
                                on_pending_upload, code);
    free(suffix);
    free(url);
}

/* ---- the blobs (blob.c) ---------------------------------------------------- */

static void upload_progress(void *arg, const struct blob_progress *p)
{
    if (p->bytes_total < PROGRESS_MIN || ui_level() < UI_NORMAL) return;
    (void)arg;
    ui_info("azureml: uploading the code snapshot: %.0f of %.0f MB (%zu files)", (double)p->bytes_done / 1e6,
            (double)p->bytes_total / 1e6, p->files_total);
}

/* A step of the upload over: its error, or NULL (the wait is freed). */
static char *upload_step_done(struct aml_code *code, struct step_wait *w)
{
    const char *err = blob_wait_error(w);
    char *why = err ? xstrdup(err) : NULL;
    step_wait_free(w);
    code->upload = NULL;
    return why;
}

static void on_metadata(struct step_wait *w, void *arg)
{
    struct aml_code *code = arg;
    char *why = upload_step_done(code, w);
    if (why) code_set_error(code, "the code snapshot's upload could not be marked complete: %s", why);
    else register_version(code);
    free(why);
}

/* The indicator file's metadata says the upload is complete (what the SDK
 * checks before uploading the same files again). */
static void on_files(struct step_wait *w, void *arg)
{
    struct aml_code *code = arg;
    char *why = upload_step_done(code, w);
    if (why) {
        code_set_error(code, "the code snapshot could not be uploaded: %s", why);
        free(why);
        return;
    }
    code->phase = C_METADATA;
    char *name = snapshot_blob_name(&code->snap, code->snap.indicator);
    char *meta_name = xasprintf("x-ms-meta-name: %s", code->name);
    char *meta_version = xasprintf("x-ms-meta-version: %s", code->version);
    const char *meta[] = { "x-ms-meta-upload_status: completed", meta_name, meta_version, NULL };
    code->upload = blob_set_metadata(code->container, name, meta, on_metadata, code);
    free(meta_name);
    free(meta_version);
    free(name);
}

/* Every file of the snapshot to <its directory name>/<path>, as the SDK
 * lays it out; files read as they are sent. */
static void upload_files(struct aml_code *code)
{
    const struct snapshot *s = &code->snap;
    if (s->count == 0) {
        register_version(code);
        return;
    }
    struct blob_file *files = xcalloc(s->count, sizeof *files);
    for (size_t i = 0; i < s->count; i++) files[i] = (struct blob_file){ s->files[i].path, s->files[i].rel, s->files[i].size };
    code->upload = blob_upload_files(code->container, s->dir_name, files, s->count, upload_progress, on_files, code);
    free(files);
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
    step_wait_free(code->upload);
    blob_container_free(code->container);     /* it wipes the SAS */
    snapshot_free(&code->snap);
    char **strings[] = { &code->name, &code->version, &code->blob_uri, &code->id, &code->error };
    for (size_t i = 0; i < sizeof strings / sizeof *strings; i++) free(*strings[i]);
    free(code);
}
