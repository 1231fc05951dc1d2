/* auth.c — see auth.h.  One credential per aml_auth, picked from the
 * environment by aml_auth_new; one token cached; one fetch at a time, whose
 * result goes to every waiter queued meanwhile.
 *
 * Secrets (the client secret, MSI_SECRET, IDENTITY_HEADER, assertions,
 * tokens, the form bodies and headers that carry them) are wiped with
 * wipe() before their memory is freed, and never go into a message. */
#include "azureml/auth.h"
#include "azureml/auth_parse.h"
#include "azureml/cert.h"
#include "proc.h"
#include "util.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define DEFAULT_AUTHORITY "https://login.microsoftonline.com"
#define DEFAULT_RESOURCE "https://management.azure.com"
#define IMDS_HOST "http://169.254.169.254"
#define IMDS_PATH "/metadata/identity/oauth2/token"
#define JWT_BEARER "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
/* A cached token is handed out while it has more than this left; below it,
 * the next get fetches a new one (azure-core refreshes 5 minutes early too). */
#define REFRESH_MARGIN_S 300.0
/* A refresh that fails still hands out the old token if it has this left. */
#define MIN_VALID_S 60.0
/* IMDS is a link-local address: where there is none (a laptop), a connection
 * attempt ends in a refusal or a timeout, which must not hold a run up. */
#define IMDS_CONNECT_TIMEOUT_S 1.0
#define IMDS_TIMEOUT_S 20.0
#define IMDS_RETRIES 3
#define TOKEN_FILE_MAX (1024 * 1024)

struct waiter {
    aml_token_fn done;               /* NULL: forgotten while its batch is handed out */
    void *arg;
};

/* One HTTP request in flight.  It outlives its aml_auth when that is freed
 * meanwhile (a == NULL then): the cancelled transfer's callback frees it. */
struct fetch {
    struct aml_auth *a;
    struct http_transfer *t;
    bool on_imds_client;             /* freed with that client, which calls no callback */
    bool probe;                      /* the first IMDS request of the auto chain */
};

struct aml_auth {
    struct loop *loop;
    struct http_client *http;        /* the caller's */
    struct http_client *imds_http;   /* ours, with IMDS's short connect timeout; made on first use */
    enum aml_credential_kind kind;   /* AML_CRED_NONE: IMDS, then the CLI, not probed yet */
    char *describe;
    char *what;                      /* how messages name the credential */
    char *why_no_mi;                 /* the auto chain: why IMDS was passed over */

    char *resource, *scope;
    char *client_id;                 /* the client-credential flows' (or a user-assigned identity's) */
    char *token_url;
    char *secret;                    /* client secret */
    struct aml_cert *cert;
    char *token_file;                /* workload identity */
    char *mi_url;                    /* MSI_ENDPOINT / IDENTITY_ENDPOINT / IMDS, query included */
    char *mi_header;                 /* "secret: …", "X-IDENTITY-HEADER: …", "Metadata: true" */
    const char *mi_secret;           /* the secret part of mi_header, or NULL */
    bool mi_imds;

    char *token;                     /* cached, or NULL */
    double expires_on;               /* epoch seconds */
    char *handed;                    /* the token or message last handed out (lives until the next batch) */

    bool fetching;
    struct fetch *fetch;
    struct proc *cli;
    unsigned long timer;

    struct waiter *queue, *batch;    /* waiting / being called back now */
    size_t n_queue, cap_queue, n_batch, cap_batch, batch_pos;
    bool delivering, free_pending;
};

/* ---- small helpers ------------------------------------------------------- */

/* A variable of envp (environ when NULL); an empty one counts as unset, as
 * in azure-identity. */
static const char *env_get(char *const *envp, const char *name)
{
    size_t n = strlen(name);
    for (char *const *e = envp ? envp : environ; *e; e++)
        if (strncmp(*e, name, n) == 0 && (*e)[n] == '=') return (*e)[n + 1] ? *e + n + 1 : NULL;
    return NULL;
}

/* A header value must not end the header (a CR or LF would add another). */
static bool header_safe(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f) return false;
    return true;
}

/* Replaces every occurrence of secret in msg by "***" (msg stays within its
 * buffer: the replacement is never longer than what it replaces). */
static void scrub(char *msg, const char *secret)
{
    size_t n = secret ? strlen(secret) : 0;
    if (n < 4) return;
    for (char *p = strstr(msg, secret); p; p = strstr(p + 3, secret)) {
        memcpy(p, "***", 3);
        memmove(p + 3, p + n, strlen(p + n) + 1);
    }
}

static char *with_query(const char *base, const char *query)
{
    return xasprintf("%s%c%s", base, strchr(base, '?') ? '&' : '?', query);
}

/* ---- handing results out --------------------------------------------------- */

static void destroy(struct aml_auth *a);

/* Calls back every waiter queued so far with the token or the message.  The
 * callbacks may get, forget, invalidate or free (deferred to the end here);
 * new gets wait for the next batch.  The last thing its callers do: a may be
 * gone when it returns. */
static void deliver(struct aml_auth *a, const char *token, const char *error)
{
    char *text = xstrdup(token ? token : error);
    wipe_free(a->handed);
    a->handed = text;
    struct waiter *w = a->batch;
    size_t cap = a->cap_batch;
    a->batch = a->queue;
    a->n_batch = a->n_queue;
    a->cap_batch = a->cap_queue;
    a->queue = w;
    a->cap_queue = cap;
    a->n_queue = 0;
    a->delivering = true;
    for (a->batch_pos = 0; a->batch_pos < a->n_batch && !a->free_pending; a->batch_pos++) {
        struct waiter cur = a->batch[a->batch_pos];
        if (cur.done) cur.done(cur.arg, token ? text : NULL, token ? NULL : text);
    }
    a->n_batch = 0;
    a->delivering = false;
    if (a->free_pending) destroy(a);
}

/* The end of a fetch: a new token (malloc'd, now ours) or a message. */
static void finish(struct aml_auth *a, char *token, double expires_on, const char *error)
{
    a->fetching = false;
    if (token) {
        wipe_free(a->token);
        a->token = token;
        a->expires_on = expires_on;
        deliver(a, a->token, NULL);
    } else if (a->token && a->expires_on - wall_seconds() >= MIN_VALID_S) {
        deliver(a, a->token, NULL);      /* an early refresh failed: the old token still serves */
    } else {
        deliver(a, NULL, error);
    }
}

static void fail(struct aml_auth *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(struct aml_auth *a, const char *fmt, ...)
{
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    scrub(msg, a->secret);
    scrub(msg, a->mi_secret);
    finish(a, NULL, 0, msg);
}

/* ---- HTTP credentials -------------------------------------------------------- */

static void start_cli(struct aml_auth *a);

static void settle(struct aml_auth *a, enum aml_credential_kind kind)
{
    a->kind = kind;
    free(a->describe);
    free(a->what);
    if (kind == AML_CRED_AZURE_CLI) {
        a->describe = xstrdup("Azure CLI");
        a->what = xstrdup("Azure CLI");
    } else if (a->client_id) {
        a->describe = xasprintf("managed identity (IMDS, client %s)", a->client_id);
        a->what = xasprintf("managed identity (IMDS, AZURE_CLIENT_ID=%s)", a->client_id);
    } else {
        a->describe = xstrdup("managed identity (IMDS)");
        a->what = xstrdup("managed identity (IMDS)");
    }
}

static void got_token_answer(struct aml_auth *a, const struct http_response *resp)
{
    char msg[1024];
    if (resp->status == 200) {
        char *token;
        double expires_on;
        if (aml_parse_token_response(resp->body, wall_seconds(), &token, &expires_on, msg, sizeof msg)) {
            if (a->kind == AML_CRED_NONE) settle(a, AML_CRED_MANAGED_IDENTITY);    /* a busy IMDS, asked again */
            finish(a, token, expires_on, NULL);
            return;
        }
        char where[512];
        http_url_for_display(a->token_url ? a->token_url : a->mi_url, where, sizeof where);
        fail(a, "%s: unexpected answer from %s: %s (x-ms-request-id %s)", a->what, where, msg,
             resp->request_id && resp->request_id[0] ? resp->request_id : "none");
        return;
    }
    http_error_message(resp, msg, sizeof msg);
    fail(a, "%s: %s", a->what, msg);
}

static void got_probe_answer(struct aml_auth *a, const struct http_response *resp);
static void http_done(void *arg, const struct http_response *resp);

static void send_request(struct aml_auth *a, bool imds, bool probe, const struct http_request *req)
{
    char err[512];
    struct http_client *c = a->http;
    if (imds) {
        if (!a->imds_http) {
            struct http_options o = { .connect_timeout = IMDS_CONNECT_TIMEOUT_S, .timeout = IMDS_TIMEOUT_S,
                                      .max_retries = IMDS_RETRIES };
            a->imds_http = http_client_new(a->loop, &o, err, sizeof err);
            if (!a->imds_http) { fail(a, "%s: %s", a->what, err); return; }
        }
        c = a->imds_http;
    }
    struct fetch *f = xcalloc(1, sizeof *f);
    f->a = a;
    f->on_imds_client = imds;
    f->probe = probe;
    a->fetch = f;
    f->t = http_send(c, req, http_done, f, err, sizeof err);
    if (!f->t) {
        a->fetch = NULL;
        free(f);
        fail(a, "%s: %s", a->what, err);
    }
}

static void http_done(void *arg, const struct http_response *resp)
{
    struct fetch *f = arg;
    struct aml_auth *a = f->a;
    bool probe = f->probe;
    free(f);
    if (!a) return;                      /* its aml_auth was freed meanwhile */
    a->fetch = NULL;
    if (probe) got_probe_answer(a, resp);
    else got_token_answer(a, resp);
}

static void fetch_managed(struct aml_auth *a, bool probe)
{
    const char *headers[] = { a->mi_header, "Accept: application/json", NULL };
    struct http_request req = { .method = "GET", .url = a->mi_url, .headers = headers,
                                .max_retries = probe ? -1 : 0 };
    send_request(a, a->mi_imds, probe, &req);
}

/* IMDS's first answer in the auto chain.  No answer, 400 (no identity
 * assigned, azure-identity's reading too), 404, or anything but JSON (some
 * other cloud's metadata server, a proxy): no managed identity here, the CLI
 * is next.  A token: IMDS it is, from now on.  A busy IMDS (408, 429, 5xx):
 * asked again, with retries.  Any other error stops the chain (it may be
 * passing): the next fetch probes again. */
static void got_probe_answer(struct aml_auth *a, const struct http_response *resp)
{
    char msg[1024];
    long s = resp->status;
    bool is_json = s && aml_json_object(resp->body);
    if (s == 200 && is_json) {
        char *token;
        double expires_on;
        if (aml_parse_token_response(resp->body, wall_seconds(), &token, &expires_on, msg, sizeof msg)) {
            settle(a, AML_CRED_MANAGED_IDENTITY);
            finish(a, token, expires_on, NULL);
            return;
        }
    }
    if (s == 0 || s == 200 || s == 400 || s == 404 || !is_json) {
        free(a->why_no_mi);
        if (s == 0) a->why_no_mi = xasprintf("IMDS did not answer (%s)", resp->error ? resp->error : "no answer");
        else if (s == 400) a->why_no_mi = xstrdup("IMDS says no identity is assigned (HTTP 400)");
        else {
            char where[512];
            http_url_for_display(a->mi_url, where, sizeof where);
            a->why_no_mi = xasprintf("%s is not Azure's IMDS (HTTP %ld%s)", where, s, is_json ? "" : ", not JSON");
        }
        settle(a, AML_CRED_AZURE_CLI);
        start_cli(a);
        return;
    }
    if (s == 408 || s == 429 || s >= 500) {
        fetch_managed(a, false);
        return;
    }
    http_error_message(resp, msg, sizeof msg);
    fail(a, "%s: %s", a->what, msg);
}

/* `name=value&…`, every value percent-encoded, in one allocation so that no
 * copy of a secret is left behind by a growing buffer.  Caller wipes it. */
static char *form(const char *const *pairs)
{
    size_t total = 1, n = 0;
    char *enc[16];
    for (; pairs[2 * n]; n++) {
        enc[n] = http_urlencode(pairs[2 * n + 1]);
        total += strlen(pairs[2 * n]) + strlen(enc[n]) + 2;
    }
    char *body = xmalloc(total), *p = body;
    for (size_t i = 0; i < n; i++) {
        if (i) *p++ = '&';
        size_t k = strlen(pairs[2 * i]), v = strlen(enc[i]);
        memcpy(p, pairs[2 * i], k);
        p[k] = '=';
        memcpy(p + k + 1, enc[i], v);
        p += k + 1 + v;
        wipe_free(enc[i]);
    }
    *p = '\0';
    return body;
}

/* The workload identity's assertion: the file's content, read afresh each
 * time (Kubernetes rotates it), trimmed.  Malloc'd, or NULL after fail(). */
static char *read_token_file(struct aml_auth *a)
{
    size_t size;
    char *text = read_file_max(a->token_file, TOKEN_FILE_MAX, &size);
    if (!text) {
        fail(a, "%s: cannot read %s: %s", a->what, a->token_file, errno == EFBIG ? "larger than 1 MiB" : strerror(errno));
        return NULL;
    }
    size_t start = strspn(text, " \t\r\n"), len = size;
    while (len > start && isspace((unsigned char)text[len - 1])) len--;
    char *assertion = xstrndup(text + start, len - start);
    wipe(text, size);
    free(text);
    if (!assertion[0] || !aml_token_safe(assertion)) {
        fail(a, "%s: %s is %s", a->what, a->token_file, assertion[0] ? "not a token (it holds spaces or control characters)" : "empty");
        wipe_free(assertion);
        return NULL;
    }
    return assertion;
}

static void fetch_client_credentials(struct aml_auth *a)
{
    char *assertion = NULL;
    if (a->kind == AML_CRED_CLIENT_CERTIFICATE) {
        char err[512];
        assertion = aml_cert_assertion(a->cert, a->token_url, a->client_id, time(NULL), err, sizeof err);
        if (!assertion) { fail(a, "%s: %s", a->what, err); return; }
    } else if (a->kind == AML_CRED_WORKLOAD_IDENTITY) {
        if (!(assertion = read_token_file(a))) return;
    }
    const char *pairs[16] = { "client_id", a->client_id, "scope", a->scope, "grant_type", "client_credentials" };
    if (assertion) {
        pairs[6] = "client_assertion_type";
        pairs[7] = JWT_BEARER;
        pairs[8] = "client_assertion";
        pairs[9] = assertion;
    } else {
        pairs[6] = "client_secret";
        pairs[7] = a->secret;
    }
    char *body = form(pairs);
    wipe_free(assertion);
    const char *headers[] = { "Content-Type: application/x-www-form-urlencoded", "Accept: application/json", NULL };
    struct http_request req = { .method = "POST", .url = a->token_url, .headers = headers,
                                .body = body, .body_len = strlen(body) };
    send_request(a, false, false, &req);     /* http_send copied the body */
    wipe_free(body);
}

/* ---- the Azure CLI ------------------------------------------------------------ */

/* Whether name is an executable file in one of PATH's directories (what
 * posix_spawnp will look for). */
static bool on_path(const char *name)
{
    const char *path = getenv("PATH");
    if (!path) path = "/usr/local/bin:/usr/bin:/bin";
    for (const char *p = path;; ) {
        size_t n = strcspn(p, ":");
        char *file = xasprintf("%.*s%s%s", (int)n, n ? p : ".", "/", name);
        struct stat st;
        bool ok = stat(file, &st) == 0 && S_ISREG(st.st_mode) && access(file, X_OK) == 0;
        free(file);
        if (ok) return true;
        if (!p[n]) return false;
        p += n + 1;
    }
}

static void cli_exited(struct proc *p, void *arg)
{
    struct aml_auth *a = arg;
    a->cli = NULL;
    size_t out_len;
    /* The captured stdout holds the token: wiped before proc_free frees it. */
    char *out = (char *)proc_stdout(p, &out_len);
    int code = proc_exit_code(p);
    bool timed_out = proc_timed_out(p);
    char msg[1024], err[256];
    char *token = NULL;
    double expires_on = 0;
    bool ok = false;
    if (code == 0 && !timed_out) {
        ok = aml_parse_cli_output(out, &token, &expires_on, err, sizeof err);
        if (!ok) errf(msg, sizeof msg, "Azure CLI: unexpected output from az account get-access-token: %s", err);
    } else {
        aml_cli_failure(code, timed_out, proc_stderr_tail(p), a->why_no_mi, msg, sizeof msg);
    }
    wipe(out, out_len);
    proc_free(p);
    if (ok) finish(a, token, expires_on, NULL);
    else fail(a, "%s", msg);
}

static void start_cli(struct aml_auth *a)
{
    char msg[1024];
    if (!on_path("az")) {
        aml_cli_failure(127, false, "", a->why_no_mi, msg, sizeof msg);
        fail(a, "%s", msg);
        return;
    }
    char *argv[] = { "az", "account", "get-access-token", "--output", "json", "--resource", a->resource, NULL };
    char *env[] = { "AZURE_CORE_NO_COLOR=true", NULL };
    struct proc_spec spec = { .argv = argv, .cwd = "/", .env_extra = env, .capture_stdout = true,
                              .timeout_s = AML_CLI_TIMEOUT_S };
    char err[512];
    a->cli = proc_spawn(a->loop, &spec, cli_exited, a, err, sizeof err);
    if (!a->cli) fail(a, "Azure CLI: %s", err);
}

/* ---- fetching ------------------------------------------------------------------ */

static void start_fetch(struct aml_auth *a)
{
    a->fetching = true;
    switch (a->kind) {
    case AML_CRED_CLIENT_SECRET:
    case AML_CRED_CLIENT_CERTIFICATE:
    case AML_CRED_WORKLOAD_IDENTITY:
        fetch_client_credentials(a);
        break;
    case AML_CRED_AML_COMPUTE:
    case AML_CRED_MANAGED_IDENTITY:
        fetch_managed(a, false);
        break;
    case AML_CRED_NONE:
        fetch_managed(a, true);
        break;
    case AML_CRED_AZURE_CLI:
        start_cli(a);
        break;
    }
}

static void on_timer(void *arg)
{
    struct aml_auth *a = arg;
    a->timer = 0;
    if (!a->n_queue || a->fetching) return;
    if (a->token && a->expires_on - wall_seconds() > REFRESH_MARGIN_S) deliver(a, a->token, NULL);
    else start_fetch(a);
}

void aml_auth_get_token(struct aml_auth *a, aml_token_fn done, void *arg)
{
    ARRAY_GROW(a->queue, a->n_queue, a->cap_queue);
    a->queue[a->n_queue++] = (struct waiter){ done, arg };
    /* Never a call back from here: a timer decides, from the loop, between
     * the cached token and a fetch.  A fetch under way calls back when it ends. */
    if (!a->fetching && !a->timer) a->timer = loop_add_timer(a->loop, 0, on_timer, a);
}

void aml_auth_forget(struct aml_auth *a, void *arg)
{
    size_t k = 0;
    for (size_t i = 0; i < a->n_queue; i++)
        if (a->queue[i].arg != arg) a->queue[k++] = a->queue[i];
    a->n_queue = k;
    if (a->delivering)
        for (size_t i = a->batch_pos + 1; i < a->n_batch; i++)
            if (a->batch[i].arg == arg) a->batch[i].done = NULL;
}

void aml_auth_invalidate(struct aml_auth *a)
{
    wipe_free(a->token);
    a->token = NULL;
    a->expires_on = 0;
}

double aml_auth_expires_in(const struct aml_auth *a)
{
    return a->token ? a->expires_on - wall_seconds() : -1;
}

enum aml_credential_kind aml_auth_kind(const struct aml_auth *a)
{
    return a->kind;
}

const char *aml_auth_describe(const struct aml_auth *a)
{
    return a->describe;
}

/* ---- choosing the credential ------------------------------------------------------ */

struct env {
    char *const *envp;
    const char *tenant, *client_id;
};

/* A credential picked by `var` needs the tenant and the client id too. */
static bool need_ids(const struct env *e, const char *var, const char *name, char *err, size_t errlen)
{
    if (e->tenant && e->client_id) {
        if (strspn(e->tenant, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-") == strlen(e->tenant))
            return true;
        errf(err, errlen, "AZURE_TENANT_ID is not a tenant id or domain (letters, digits, '.' and '-' only)");
        return false;
    }
    errf(err, errlen, "%s is set but %s%s%s %s not: a %s credential needs AZURE_TENANT_ID, AZURE_CLIENT_ID and %s",
         var, e->tenant ? "" : "AZURE_TENANT_ID", !e->tenant && !e->client_id ? " and " : "",
         e->client_id ? "" : "AZURE_CLIENT_ID", !e->tenant && !e->client_id ? "are" : "is", name, var);
    return false;
}

static bool set_token_url(struct aml_auth *a, const struct aml_auth_options *opt, const struct env *e,
                          char *err, size_t errlen)
{
    const char *host = opt && opt->authority_host ? opt->authority_host : env_get(e->envp, "AZURE_AUTHORITY_HOST");
    const char *var = opt && opt->authority_host ? "the configuration's authority_host" : "AZURE_AUTHORITY_HOST";
    char why[256];
    char *authority = aml_authority_url(host ? host : DEFAULT_AUTHORITY, why, sizeof why);
    if (!authority) {
        errf(err, errlen, "%s %s", var, why);
        return false;
    }
    a->client_id = xstrdup(e->client_id);
    a->token_url = xasprintf("%s/%s/oauth2/v2.0/token", authority, e->tenant);
    free(authority);
    return true;
}

/* MSI_ENDPOINT, IDENTITY_ENDPOINT or IMDS: the URL with its query. */
static void set_managed(struct aml_auth *a, const char *base, const char *api, const char *client_param,
                        char *header)
{
    char *res = http_urlencode(a->resource);
    char *query = xasprintf("api-version=%s&resource=%s", api, res);
    free(res);
    if (a->client_id) {
        char *cid = http_urlencode(a->client_id);
        char *q = xasprintf("%s&%s=%s", query, client_param, cid);
        free(cid);
        free(query);
        query = q;
    }
    a->mi_url = with_query(base, query);
    free(query);
    a->mi_header = header;
}

static bool pick_client_credential(struct aml_auth *a, const struct aml_auth_options *opt, const struct env *e,
                                   char *err, size_t errlen)
{
    const char *secret = env_get(e->envp, "AZURE_CLIENT_SECRET");
    const char *cert = env_get(e->envp, "AZURE_CLIENT_CERTIFICATE_PATH");
    const char *file = env_get(e->envp, "AZURE_FEDERATED_TOKEN_FILE");
    if (secret) {
        if (!need_ids(e, "AZURE_CLIENT_SECRET", "client secret", err, errlen) || !set_token_url(a, opt, e, err, errlen))
            return false;
        a->kind = AML_CRED_CLIENT_SECRET;
        a->secret = xstrdup(secret);
        a->describe = xasprintf("client secret (tenant %s, client %s)", e->tenant, e->client_id);
        a->what = xasprintf("client secret credential (AZURE_CLIENT_ID=%s)", e->client_id);
    } else if (cert) {
        if (!need_ids(e, "AZURE_CLIENT_CERTIFICATE_PATH", "client certificate", err, errlen) ||
            !set_token_url(a, opt, e, err, errlen))
            return false;
        char why[1024];
        a->cert = aml_cert_load(cert, env_get(e->envp, "AZURE_CLIENT_CERTIFICATE_PASSWORD"), why, sizeof why);
        if (!a->cert) {
            errf(err, errlen, "AZURE_CLIENT_CERTIFICATE_PATH: %s", why);
            return false;
        }
        a->kind = AML_CRED_CLIENT_CERTIFICATE;
        a->describe = xasprintf("client certificate (%s, tenant %s, client %s)", cert, e->tenant, e->client_id);
        a->what = xasprintf("client certificate credential (AZURE_CLIENT_CERTIFICATE_PATH=%s, AZURE_CLIENT_ID=%s)",
                            cert, e->client_id);
    } else if (file) {
        if (!need_ids(e, "AZURE_FEDERATED_TOKEN_FILE", "workload identity", err, errlen) ||
            !set_token_url(a, opt, e, err, errlen))
            return false;
        a->kind = AML_CRED_WORKLOAD_IDENTITY;
        a->token_file = xstrdup(file);
        a->describe = xasprintf("workload identity (token file %s, tenant %s, client %s)", file, e->tenant,
                                e->client_id);
        a->what = xasprintf("workload identity credential (AZURE_FEDERATED_TOKEN_FILE=%s, AZURE_CLIENT_ID=%s)",
                            file, e->client_id);
    }
    return true;
}

static char *with_client(const char *text, const char *client_id)
{
    return client_id ? xasprintf("%s, client %s)", text, client_id) : xasprintf("%s)", text);
}

static bool pick_managed_identity(struct aml_auth *a, const struct env *e, char *err, size_t errlen)
{
    const char *msi = env_get(e->envp, "MSI_ENDPOINT"), *msi_secret = env_get(e->envp, "MSI_SECRET");
    const char *id_ep = env_get(e->envp, "IDENTITY_ENDPOINT"), *id_header = env_get(e->envp, "IDENTITY_HEADER");
    if (e->client_id) a->client_id = xstrdup(e->client_id);     /* a user-assigned identity */
    if (msi_secret && !msi) {
        errf(err, errlen, "MSI_SECRET is set but MSI_ENDPOINT is not: the Azure ML compute identity needs both");
        return false;
    }
    /* MSI_ENDPOINT alone is Cloud Shell's identity (not supported): its az login serves. */
    if (msi && msi_secret) {
        if (!header_safe(msi_secret)) { errf(err, errlen, "MSI_SECRET holds a control character"); return false; }
        a->kind = AML_CRED_AML_COMPUTE;
        set_managed(a, msi, "2017-09-01", "clientid", xasprintf("secret: %s", msi_secret));
        a->mi_secret = a->mi_header + strlen("secret: ");
        a->describe = with_client("Azure ML compute identity (MSI_ENDPOINT", e->client_id);
        a->what = xstrdup("Azure ML compute identity (MSI_ENDPOINT)");
        return true;
    }
    if (id_ep || id_header) {
        if (!id_ep || !id_header) {
            errf(err, errlen, "%s is set but %s is not: the managed identity of App Service, Functions or "
                 "Container Apps needs both (Azure Arc's is not supported)",
                 id_ep ? "IDENTITY_ENDPOINT" : "IDENTITY_HEADER", id_ep ? "IDENTITY_HEADER" : "IDENTITY_ENDPOINT");
            return false;
        }
        if (!header_safe(id_header)) { errf(err, errlen, "IDENTITY_HEADER holds a control character"); return false; }
        a->kind = AML_CRED_MANAGED_IDENTITY;
        set_managed(a, id_ep, "2019-08-01", "client_id", xasprintf("X-IDENTITY-HEADER: %s", id_header));
        a->mi_secret = a->mi_header + strlen("X-IDENTITY-HEADER: ");
        a->describe = with_client("managed identity (IDENTITY_ENDPOINT", e->client_id);
        a->what = xstrdup("managed identity (IDENTITY_ENDPOINT)");
        return true;
    }
    /* Nothing configured: IMDS if it answers, else the CLI, settled at the first fetch. */
    const char *imds = env_get(e->envp, "IMDS_ENDPOINT");
    char *host = imds ? (strstr(imds, "://") ? xstrdup(imds) : xasprintf("http://%s", imds)) : xstrdup(IMDS_HOST);
    size_t n = strlen(host);
    while (n > 0 && host[n - 1] == '/') host[--n] = '\0';
    char *base = xasprintf("%s%s", host, IMDS_PATH);
    free(host);
    a->kind = AML_CRED_NONE;
    a->mi_imds = true;
    set_managed(a, base, "2018-02-01", "client_id", xstrdup("Metadata: true"));
    free(base);
    a->describe = xstrdup("managed identity (IMDS) or else Azure CLI: not tried yet");
    a->what = xstrdup("managed identity (IMDS)");
    return true;
}

struct aml_auth *aml_auth_new(struct loop *loop, struct http_client *http, const struct aml_auth_options *opt,
                              char *err, size_t errlen)
{
    struct aml_auth *a = xcalloc(1, sizeof *a);
    a->loop = loop;
    a->http = http;
    const char *resource = opt && opt->resource ? opt->resource : DEFAULT_RESOURCE;
    a->resource = xstrdup(resource);
    size_t n = strlen(a->resource);
    a->scope = xasprintf("%.*s/.default", (int)(n && resource[n - 1] == '/' ? n - 1 : n), resource);
    struct env e = { opt ? opt->envp : NULL, NULL, NULL };
    e.tenant = env_get(e.envp, "AZURE_TENANT_ID");
    e.client_id = env_get(e.envp, "AZURE_CLIENT_ID");
    bool ok = pick_client_credential(a, opt, &e, err, errlen);
    if (ok && a->kind == AML_CRED_NONE) ok = pick_managed_identity(a, &e, err, errlen);
    if (!ok) {
        destroy(a);
        return NULL;
    }
    return a;
}

/* ---- freeing ---------------------------------------------------------------------- */

static void destroy(struct aml_auth *a)
{
    if (a->timer) loop_cancel_timer(a->loop, a->timer);
    if (a->fetch) {
        if (a->fetch->on_imds_client) {
            free(a->fetch);              /* http_client_free below cancels it without a callback */
        } else {
            a->fetch->a = NULL;          /* its callback, from the loop, frees it */
            http_cancel(a->fetch->t);
        }
    }
    if (a->imds_http) http_client_free(a->imds_http);
    proc_free(a->cli);                   /* stops a running az */
    wipe_free(a->secret);
    wipe_free(a->mi_header);
    wipe_free(a->token);
    wipe_free(a->handed);
    aml_cert_free(a->cert);
    free(a->describe);
    free(a->what);
    free(a->why_no_mi);
    free(a->resource);
    free(a->scope);
    free(a->client_id);
    free(a->token_url);
    free(a->token_file);
    free(a->mi_url);
    free(a->queue);
    free(a->batch);
    free(a);
}

void aml_auth_free(struct aml_auth *a)
{
    if (!a) return;
    if (a->delivering) {
        a->free_pending = true;          /* deliver() frees it once the callback returns */
        return;
    }
    destroy(a);
}
