/* arm.c — one ARM request with its token (arm.h). */
#include "azureml/arm.h"

#include "azureml/client.h"
#include "util.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* At most this many calls are out at once (token fetch or HTTP): the rest
 * wait in order, holding no libcurl handle, so 300 jobs polled at once cost
 * what 32 do (the HTTP client keeps 8 connections a host anyway). */
#define ARM_ACTIVE_MAX 32

struct arm_call {
    struct aml_client *client;
    struct arm_call *prev, *next;   /* the client's calls, out or queued */
    bool queued;                    /* waiting for a place among the active ones */
    char *method, *url, *body;
    arm_done_fn done;
    void *arg;
    struct http_transfer *xfer;
    bool want_token, retried_401, cancelled;
    unsigned long timer;            /* delivering a failure without a transfer */
    char *error;
};

static void send_with_token(struct arm_call *call);

/* The oldest queued call takes the place a finished one left. */
static void start_queued(struct aml_client *c)
{
    if (c->arm_active >= ARM_ACTIVE_MAX) return;
    struct arm_call *oldest = NULL;
    for (struct arm_call *q = c->calls; q; q = q->next)
        if (q->queued) oldest = q;               /* calls are listed newest first */
    if (!oldest) return;
    oldest->queued = false;
    c->arm_active++;
    send_with_token(oldest);
}

static void call_free(struct arm_call *call)
{
    struct aml_client *c = call->client;
    bool was_active = !call->queued;
    if (call->prev) call->prev->next = call->next;
    else call->client->calls = call->next;
    if (call->next) call->next->prev = call->prev;
    free(call->method);
    free(call->url);
    free(call->body);
    free(call->error);
    free(call);
    if (was_active) {
        c->arm_active--;
        start_queued(c);
    }
}

/* A failure that is not an HTTP answer (no token, cancelled before sending). */
static void deliver_error(void *arg)
{
    struct arm_call *call = arg;
    char url[512];
    http_url_for_display(call->url, url, sizeof url);
    struct http_response resp = { .status = 0, .body = "", .request_id = "", .client_request_id = "",
                                  .retry_after = -1, .cancelled = call->cancelled, .url = url,
                                  .error = call->error ? call->error : "cancelled" };
    call->done(call->arg, &resp);
    call_free(call);
}

static void fail_later(struct arm_call *call, const char *error)
{
    if (error && !call->error) call->error = xstrdup(error);
    call->timer = loop_add_timer(aml_client_loop(call->client), 0, deliver_error, call);
}

static void on_answer(void *arg, const struct http_response *resp)
{
    struct arm_call *call = arg;
    call->xfer = NULL;
    if (resp->status == 401 && !call->retried_401 && !call->cancelled) {
        aml_auth_invalidate(aml_client_auth(call->client));      /* expired or revoked: fetch another */
        call->retried_401 = true;
        send_with_token(call);
        return;
    }
    call->done(call->arg, resp);
    call_free(call);
}

static void on_token(void *arg, const char *token, const char *error)
{
    struct arm_call *call = arg;
    call->want_token = false;
    if (!token) {
        char *msg = xasprintf("no token for Azure: %s", error ? error : "unknown error");
        fail_later(call, msg);
        free(msg);
        return;
    }
    char *auth = xasprintf("Authorization: Bearer %s", token);
    const char *headers[] = { auth, "Accept: application/json",
                              call->body ? "Content-Type: application/json" : NULL, NULL };
    struct http_request req = { .method = call->method, .url = call->url, .headers = headers,
                                .body = call->body, .body_len = call->body ? strlen(call->body) : 0 };
    char err[512];
    call->xfer = http_send(aml_client_http(call->client), &req, on_answer, call, err, sizeof err);
    wipe_free(auth);
    if (!call->xfer) fail_later(call, err);
}

static void send_with_token(struct arm_call *call)
{
    call->want_token = true;
    aml_auth_get_token(aml_client_auth(call->client), on_token, call);
}

struct arm_call *arm_call_start(struct aml_client *c, const char *method, const char *url, const char *body,
                                arm_done_fn done, void *arg)
{
    struct arm_call *call = xcalloc(1, sizeof *call);
    *call = (struct arm_call){ .client = c, .method = xstrdup(method), .url = xstrdup(url),
                               .body = body ? xstrdup(body) : NULL, .done = done, .arg = arg };
    call->next = c->calls;
    if (c->calls) c->calls->prev = call;
    c->calls = call;
    if (c->arm_active < ARM_ACTIVE_MAX) {
        c->arm_active++;
        send_with_token(call);
    } else {
        call->queued = true;
    }
    return call;
}

void arm_calls_release(struct aml_client *c)
{
    for (struct arm_call *q = c->calls; q; q = q->next) q->queued = true;    /* none may start now */
    while (c->calls) {
        struct arm_call *call = c->calls;
        if (call->timer) loop_cancel_timer(c->loop, call->timer);
        call_free(call);
    }
}

bool arm_call_idle(const struct arm_call *call)
{
    return call->queued || (call->xfer && http_waiting(call->xfer));
}

void arm_call_cancel(struct arm_call *call)
{
    if (call->cancelled || call->timer) return;
    call->cancelled = true;
    if (call->queued) {
        fail_later(call, NULL);                 /* still queued: it frees as one (not active) */
    } else if (call->xfer) {
        http_cancel(call->xfer);
    } else if (call->want_token) {
        aml_auth_forget(aml_client_auth(call->client), call);
        call->want_token = false;
        fail_later(call, NULL);
    }
}
