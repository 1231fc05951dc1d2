/* arm.h — one Azure Resource Manager request: a token from the client's
 * credential in its Authorization header, JSON in and out, and once more with
 * a fresh token when the service refuses the one it got (401).  The HTTP
 * client's retries (throttling, 5xx, dropped connections) apply underneath.
 *
 * Nothing here knows of Lua. */
#ifndef FLOW_AZUREML_ARM_H
#define FLOW_AZUREML_ARM_H

#include "azureml/http.h"

struct aml_client;
struct arm_call;

/* The answer (status 0 with `error` set when there was none: no token, no
 * connection, cancelled).  Valid during the callback only. */
typedef void (*arm_done_fn)(void *arg, const struct http_response *resp);

/* Sends method url (body: JSON text, or NULL); done(arg, resp) exactly once,
 * always later from the loop.  The call frees itself after done. */
struct arm_call *arm_call_start(struct aml_client *c, const char *method, const char *url, const char *body,
                                arm_done_fn done, void *arg);
/* done comes later with cancelled set (or with the answer, when it had come). */
void arm_call_cancel(struct arm_call *call);
/* Whether the call has nothing on the wire now: it waits for its turn, or to
 * retry (http_waiting). */
bool arm_call_idle(const struct arm_call *call);

#endif
