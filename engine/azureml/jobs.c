/* jobs.c — Azure ML command jobs as step waits (jobs.h). */
#include "azureml/jobs.h"

#include "azureml/arm.h"
#include "azureml/client.h"
#include "util.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FIRST_POLL 1.0          /* seconds: a job's first polls come sooner than poll_interval */

/* What the job waits for now. */
enum job_phase {
    PHASE_LOOKUP,       /* GET jobs/{name}: does it exist already? */
    PHASE_SUBMIT,       /* PUT jobs/{name} */
    PHASE_POLL,         /* GET jobs/{name}, or the timer before it */
    PHASE_CANCEL,       /* POST jobs/{name}/cancel */
    PHASE_DONE,
};

struct aml_job {
    struct step_wait wait;       /* first: the wait is the job */
    struct aml_client *client;
    enum job_phase phase;
    struct arm_call *call;       /* the request in flight, or NULL */
    unsigned long timer;         /* the next poll, or 0 */
    unsigned long deadline_timer;  /* the step's timeout, or 0 */
    double next_poll;            /* seconds between polls now */
    char *name, *body, *status, *studio, *error;
    struct aml_job_info info;
    bool cancel_sent, forced, owner_freed, done_called;
    int unreadable;              /* 2xx answers in a row that were no job (read again, up to MAX_UNREADABLE) */
    bool peek;                   /* one look, then done (aml_job_peek) */
    aml_job_event_fn on_event;
    step_wait_done_fn done;
    void *arg;
    struct aml_job *next_zombie;  /* freed by its owner, its last call still out */
};

static void job_request(struct aml_job *j, const char *method, char *body);
static void job_poll_later(struct aml_job *j);
static void job_release(struct aml_job *j);

bool aml_job_status_terminal(const char *status)
{
    static const char *const final[] = { "Completed", "Failed", "Canceled", "Paused", "Unknown" };
    for (size_t i = 0; i < sizeof final / sizeof *final; i++)
        if (strcmp(status, final[i]) == 0) return true;
    return false;
}

void aml_jobs_release_zombies(struct aml_client *c)
{
    while (c->zombies) {
        struct aml_job *z = c->zombies;
        c->zombies = z->next_zombie;
        job_release(z);
    }
}

/* ---- a job's life -------------------------------------------------------- */

static void refresh_info(struct aml_job *j)
{
    j->info = (struct aml_job_info){ .name = j->name, .status = j->status ? j->status : "",
                                     .studio_url = j->studio, .submitted = j->info.submitted,
                                     .terminal = j->status && aml_job_status_terminal(j->status),
                                     .cancelled = j->cancel_sent || j->info.cancelled,
                                     .detached = j->info.detached, .timed_out = j->info.timed_out,
                                     .error = j->error, .not_found = j->info.not_found };
}

static void notify(struct aml_job *j)
{
    refresh_info(j);
    if (j->on_event && !j->owner_freed) j->on_event(j->arg, &j->info);
}

/* The end: the owner's callback, once, from the loop. */
static void finish(struct aml_job *j)
{
    j->phase = PHASE_DONE;
    if (j->deadline_timer) loop_cancel_timer(j->client->loop, j->deadline_timer);
    j->deadline_timer = 0;
    refresh_info(j);
    if (j->done_called || j->owner_freed) return;
    j->done_called = true;
    j->done(&j->wait, j->arg);
}

#define MAX_UNREADABLE 3
static void job_poll_later(struct aml_job *j);

static void fail(struct aml_job *j, const char *fmt, const char *detail)
{
    char *msg = xasprintf(fmt, j->name, detail);
    set_string(&j->error, msg);
    free(msg);
    finish(j);
}

/* A string from the service as it may be printed: control characters (a
 * terminal escape in a broken or hostile answer) become '?'. */
static void set_clean(char **dst, const char *s)
{
    set_string(dst, s);
    for (char *p = *dst; p && *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f) *p = '?';
}

/* Reads status and the Studio link from a JobBaseResource; false if the
 * body is not one (the message then says what it is). */
static bool read_job(struct aml_job *j, const struct http_response *resp)
{
    cJSON *root = cJSON_ParseWithLength(resp->body, resp->body_len);
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(root, "properties");
    const cJSON *status = cJSON_GetObjectItemCaseSensitive(props, "status");
    if (!cJSON_IsString(status)) {
        cJSON_Delete(root);
        /* One garbled answer (a proxy's HTML page) to a PUT that was taken
         * or to a poll: the job is read again, rather than the step failed
         * with its job left running. */
        if ((j->phase == PHASE_SUBMIT || j->phase == PHASE_POLL) && ++j->unreadable < MAX_UNREADABLE) {
            job_poll_later(j);
            return false;
        }
        char detail[256];
        snprintf(detail, sizeof detail, "HTTP %ld, x-ms-request-id %s", resp->status,
                 resp->request_id && *resp->request_id ? resp->request_id : "none");
        fail(j, "Azure ML job %s: the service's answer has no properties.status (%s)", detail);
        return false;
    }
    j->unreadable = 0;
    bool changed = !j->status || strcmp(j->status, status->valuestring) != 0;
    set_clean(&j->status, status->valuestring);
    const cJSON *services = cJSON_GetObjectItemCaseSensitive(props, "services");
    const cJSON *studio = cJSON_GetObjectItemCaseSensitive(services, "Studio");
    const cJSON *endpoint = cJSON_GetObjectItemCaseSensitive(studio, "endpoint");
    if (cJSON_IsString(endpoint) && strncmp(endpoint->valuestring, "https://", 8) == 0
        && (!j->studio || strcmp(j->studio, endpoint->valuestring) != 0)) {
        set_clean(&j->studio, endpoint->valuestring);
        changed = true;
    }
    if (strcmp(j->status, "Failed") == 0 && !j->error) {
        /* Azure ML does not put the reason in the job resource: the status,
         * the name and the link are what there is to say. */
        char *msg = xasprintf("Azure ML job %s failed%s%s", j->name, j->studio ? ": " : "", j->studio ? j->studio : "");
        set_string(&j->error, msg);
        free(msg);
    }
    cJSON_Delete(root);
    if (changed) notify(j);
    return true;
}

/* What comes after an answer (or a cancel between requests): the one place
 * that decides the job's next step. */
static void advance(struct aml_job *j)
{
    bool exists = j->status != NULL;                /* submitted, or adopted */
    if (j->peek || (exists && aml_job_status_terminal(j->status))) finish(j);
    else if (j->info.cancelled && j->client->detach) {
        j->info.detached = exists;
        finish(j);
    } else if (j->info.cancelled && exists && !j->cancel_sent) {
        j->cancel_sent = true;
        j->phase = PHASE_CANCEL;
        job_request(j, "POST", NULL);
    } else if (j->info.cancelled && (j->forced || !exists)) finish(j);
    else job_poll_later(j);
}

static void on_lookup(struct aml_job *j, const struct http_response *resp)
{
    if (resp->status == 404 && !j->body) {
        j->info.not_found = true;           /* (a lookup that failed otherwise says nothing of it) */
        fail(j, "Azure ML job %s: %s", "there is no such job in the workspace");
        return;
    }
    if (resp->status == 404 && !j->info.cancelled) {
        j->phase = PHASE_SUBMIT;
        job_request(j, "PUT", xstrdup(j->body));
        return;
    }
    if (resp->status == 404 || read_job(j, resp)) advance(j);
}

static void unlist_zombie(struct aml_job *j)
{
    struct aml_job **p = &j->client->zombies;
    while (*p && *p != j) p = &(*p)->next_zombie;
    if (*p) *p = j->next_zombie;
}

static void on_response(void *arg, const struct http_response *resp)
{
    struct aml_job *j = arg;
    j->call = NULL;
    if (j->owner_freed) {                                     /* the zombie's last call */
        unlist_zombie(j);
        job_release(j);
        return;
    }
    if (resp->cancelled) {
        advance(j);
        return;
    }
    bool lookup_miss = j->phase == PHASE_LOOKUP && resp->status == 404;
    if ((resp->status < 200 || resp->status > 299) && !lookup_miss) {
        char msg[2048];
        http_error_message(resp, msg, sizeof msg);
        const char *what = j->phase == PHASE_SUBMIT ? "could not be submitted" : j->phase == PHASE_CANCEL
                           ? "could not be cancelled" : "could not be read";
        char *fmt = xasprintf("Azure ML job %%s %s: %%s", what);
        fail(j, fmt, msg);
        free(fmt);
        return;
    }
    switch (j->phase) {
    case PHASE_LOOKUP: on_lookup(j, resp); break;
    case PHASE_SUBMIT:
        j->info.submitted = true;
        if (read_job(j, resp)) advance(j);
        break;
    case PHASE_POLL: if (read_job(j, resp)) advance(j); break;
    case PHASE_CANCEL: advance(j); break;
    case PHASE_DONE: break;
    }
}

/* Sends method to the job's URL (POST: its cancel URL); takes body. */
static void job_request(struct aml_job *j, const char *method, char *body)
{
    char *rest = xasprintf(strcmp(method, "POST") == 0 ? "jobs/%s/cancel" : "jobs/%s", j->name);
    char *url = aml_client_url(j->client, rest);
    j->call = arm_call_start(j->client, method, url, body, on_response, j);
    free(rest);
    free(url);
    free(body);
}

static void on_poll_timer(void *arg)
{
    struct aml_job *j = arg;
    j->timer = 0;
    j->phase = PHASE_POLL;
    job_request(j, "GET", NULL);
}

/* The first polls come after FIRST_POLL seconds, then each twice as late as
 * the one before, up to poll_interval: a short job is seen ending soon, a
 * long one costs few requests. */
static void job_poll_later(struct aml_job *j)
{
    double interval = j->client->settings->poll_interval;
    double delay = j->next_poll > 0 ? j->next_poll : (FIRST_POLL < interval ? FIRST_POLL : interval);
    j->next_poll = delay * 2 < interval ? delay * 2 : interval;
    j->phase = PHASE_POLL;
    j->timer = loop_add_timer(j->client->loop, delay, on_poll_timer, j);
}

/* ---- the wait's operations ----------------------------------------------- */

static void on_cancel_turn(void *arg)
{
    struct aml_job *j = arg;
    j->timer = 0;
    advance(j);
}

/* Stops what is in flight when its answer no longer matters: a lookup (the
 * job may not exist), anything once detached, anything after a forced cancel
 * whose POST went out, and a lookup, PUT or poll that waits to be retried (a
 * 503's or a 429's Retry-After: nothing of it is on the wire, and Ctrl-C
 * waited out the whole back-off, minutes; the cancel's own POST is waited
 * for, as a second Ctrl-C stops that).  Otherwise the answer comes first and advance()
 * sends the cancel (a PUT on the wire may be creating the job right now).  A
 * PUT abandoned so has no job to cancel, unless an earlier try made one whose
 * answer was lost: the journal names it, for `flow cancel` and --resume. */
static void job_cancel(struct step_wait *w, enum cancel_mode mode)
{
    struct aml_job *j = (struct aml_job *)w;
    if (j->phase == PHASE_DONE) return;
    j->info.cancelled = true;
    if (mode == CANCEL_FORCED) j->forced = true;
    bool abandon = j->phase == PHASE_LOOKUP || j->client->detach || (j->forced && j->cancel_sent) ||
                   (j->phase != PHASE_CANCEL && j->call && arm_call_idle(j->call));
    if (j->call) {
        if (abandon) arm_call_cancel(j->call);     /* its answer (or cancelled) comes to on_response */
        return;
    }
    if (j->timer) loop_cancel_timer(j->client->loop, j->timer);
    j->timer = loop_add_timer(j->client->loop, 0, on_cancel_turn, j);      /* never synchronously */
}

static void on_deadline(void *arg)
{
    struct aml_job *j = arg;
    j->deadline_timer = 0;
    if (j->phase == PHASE_DONE) return;
    j->info.timed_out = true;
    job_cancel(&j->wait, CANCEL_GRACEFUL);
}

void aml_job_set_deadline(struct step_wait *w, double deadline)
{
    struct aml_job *j = (struct aml_job *)w;
    if (j->deadline_timer) loop_cancel_timer(j->client->loop, j->deadline_timer);
    double left = deadline - monotonic_seconds();
    j->deadline_timer = loop_add_timer(j->client->loop, left > 0 ? left : 0, on_deadline, j);
}

static void job_release(struct aml_job *j)
{
    free(j->name);
    free(j->body);
    free(j->status);
    free(j->studio);
    free(j->error);
    free(j);
}

static void job_free(struct step_wait *w)
{
    struct aml_job *j = (struct aml_job *)w;
    step_wait_detach(w);
    j->owner_freed = true;
    if (j->timer) loop_cancel_timer(j->client->loop, j->timer);
    if (j->deadline_timer) loop_cancel_timer(j->client->loop, j->deadline_timer);
    if (j->call) {                  /* released when the call's answer arrives, or with the client */
        arm_call_cancel(j->call);
        j->next_zombie = j->client->zombies;
        j->client->zombies = j;
        return;
    }
    job_release(j);
}

static const struct step_wait_ops job_ops = { "azureml job", job_cancel, job_free };

struct step_wait *aml_job_start(struct aml_client *c, const char *name, const char *body_json,
                                aml_job_event_fn on_event, step_wait_done_fn done, void *arg, char *err,
                                size_t errlen)
{
    if (!aml_valid_name(name)) {
        errf(err, errlen, "'%s' cannot name an Azure ML job (letters, digits, - and _, at most 255)", name);
        return NULL;
    }
    struct aml_job *j = xcalloc(1, sizeof *j);
    step_wait_init(&j->wait, &job_ops);
    j->client = c;
    j->name = xstrdup(name);
    j->body = body_json ? xstrdup(body_json) : NULL;
    j->on_event = on_event;
    j->done = done;
    j->arg = arg;
    refresh_info(j);
    /* A job of this run's is submitted at once: its name is new, and a PUT
     * repeated after a lost answer finds the job the first one made.  One
     * named by an earlier run's journal is looked up first (adopted). */
    if (j->body) {
        j->phase = PHASE_SUBMIT;
        job_request(j, "PUT", xstrdup(j->body));
    } else {
        j->phase = PHASE_LOOKUP;
        job_request(j, "GET", NULL);
    }
    return &j->wait;
}

struct step_wait *aml_job_cancel_existing(struct aml_client *c, const char *name, aml_job_event_fn on_event,
                                          step_wait_done_fn done, void *arg, char *err, size_t errlen)
{
    struct step_wait *w = aml_job_start(c, name, NULL, on_event, done, arg, err, errlen);
    if (w) ((struct aml_job *)w)->info.cancelled = true;     /* advance() cancels it once found */
    return w;
}

struct step_wait *aml_job_peek(struct aml_client *c, const char *name, step_wait_done_fn done, void *arg, char *err,
                               size_t errlen)
{
    struct step_wait *w = aml_job_start(c, name, NULL, NULL, done, arg, err, errlen);
    if (w) ((struct aml_job *)w)->peek = true;
    return w;
}

const struct aml_job_info *aml_job_wait_info(const struct step_wait *w)
{
    return &((const struct aml_job *)w)->info;
}
