/* jobs.h — an Azure ML command job as something a step waits on: a
 * `struct step_wait` (step_wait.h) whose life is submit, poll, cancel.
 *
 * One client per run holds what every job shares: the settings, the HTTP
 * client (one libcurl multi handle on the loop) and the credential.  Hundreds
 * of jobs are tracked at once on the one loop, each a small state machine:
 *
 *   token → PUT jobs/{name} ──────────────────────────────┐
 *   (a job an earlier run's journal names: GET jobs/{name}, adopted) ─┴→ poll GET until
 *   Completed, Failed or Canceled (every poll_interval; the first polls sooner).
 *
 * A job's name is the caller's (job_body.h: deterministic), so a PUT sent
 * twice after a lost answer, or again after flow was killed, never starts a
 * second job.  A 401 fetches a new token and tries once more.  Cancel:
 * graceful sends `POST …/cancel` and waits for Canceled; forced (a second
 * Ctrl-C) sends it and stops waiting; a detached client sends nothing and
 * leaves its jobs running (`flow run --detach`).
 *
 * Nothing here knows of Lua. */
#ifndef FLOW_AZUREML_JOBS_H
#define FLOW_AZUREML_JOBS_H

#include "azureml/auth.h"
#include "azureml/http.h"
#include "azureml/settings.h"
#include "step_wait.h"

#include <stdbool.h>

struct aml_client;

struct aml_client_options {
    const char *ca_file;              /* FLOW_CA_BUNDLE / SSL_CERT_FILE, or NULL */
    void (*trace)(void *ctx, const char *line);   /* `-v`: one line per HTTP attempt */
    void *trace_ctx;
    char *const *envp;                /* the credential's environment; NULL: environ */
    struct work_pool *pool;           /* where the code snapshot is scanned and hashed; NULL: the loop */
};

/* NULL with a message (a credential half set, libcurl unusable).  The
 * settings are the caller's and must outlive the client. */
struct aml_client *aml_client_new(struct loop *loop, const struct aml_settings *s, const struct aml_client_options *o,
                                  char *err, size_t errlen);
/* Jobs still in flight are abandoned (their callbacks are not called). */
void aml_client_free(struct aml_client *c);
struct aml_auth *aml_client_auth(struct aml_client *c);
struct http_client *aml_client_http(struct aml_client *c);
struct loop *aml_client_loop(struct aml_client *c);
const struct aml_settings *aml_client_settings(const struct aml_client *c);
/* Cancels leave jobs running (flow run --detach). */
void aml_client_set_detach(struct aml_client *c, bool detach);
/* "{arm_endpoint}{workspace id}/{rest}?api-version=…" (malloc'd). */
char *aml_client_url(const struct aml_client *c, const char *rest);

/* What is known of a job; strings live as long as the wait. */
struct aml_job_info {
    const char *name;
    const char *status;               /* the service's JobStatus, or "" before the first answer */
    const char *studio_url;           /* services.Studio.endpoint, or NULL */
    bool submitted;                   /* this wait sent its PUT (false: adopted an existing job) */
    bool terminal;                    /* Completed, Failed or Canceled */
    bool cancelled;                   /* cancel was asked (the job may still have completed) */
    bool detached;                    /* the wait ended leaving the job running */
    bool timed_out;                   /* its deadline came first: it was cancelled */
    const char *error;                /* why the job or the wait failed, or NULL */
    bool not_found;                   /* the job to adopt does not exist (its lookup said 404) */
};

/* Called as the job is submitted and whenever its status changes. */
typedef void (*aml_job_event_fn)(void *arg, const struct aml_job_info *info);

/* Submits the job `name` with `body` (job_body.h's JSON; a name of this
 * run's: a PUT of an existing job with the same body answers it, so a lost
 * answer never makes two), or with body NULL adopts the existing job `name`
 * (one that does not exist is an error: --resume, `flow cancel`).  done(w, arg) once it is terminal, the wait failed, or it was
 * cancelled; aml_job_wait_info then says how.  NULL with a message only for
 * a name Azure ML cannot take. */
struct step_wait *aml_job_start(struct aml_client *c, const char *name, const char *body_json,
                                aml_job_event_fn on_event, step_wait_done_fn done, void *arg, char *err,
                                size_t errlen);
/* Cancels the existing job `name` (flow cancel): done once it is Canceled (or
 * was over already). */
struct step_wait *aml_job_cancel_existing(struct aml_client *c, const char *name, aml_job_event_fn on_event,
                                          step_wait_done_fn done, void *arg, char *err, size_t errlen);
/* The step's own timeout (a monotonic time): then the job is cancelled as by
 * a graceful cancel, and its info says timed_out. */
void aml_job_set_deadline(struct step_wait *w, double deadline);

/* Reads the existing job `name` once (flow status): done after one GET. */
struct step_wait *aml_job_peek(struct aml_client *c, const char *name, step_wait_done_fn done, void *arg, char *err,
                               size_t errlen);
const struct aml_job_info *aml_job_wait_info(const struct step_wait *w);

/* Whether a JobStatus is final for a poller. */
bool aml_job_status_terminal(const char *status);

#endif
