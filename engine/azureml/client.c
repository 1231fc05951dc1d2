/* client.c — what every Azure ML request of a run shares (jobs.h): the
 * settings, the HTTP client, the credential, the work pool, and the ARM
 * calls in flight (so that freeing the client frees them too). */
#include "azureml/client.h"

#include "azureml/code.h"
#include "azureml/datastore.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>

struct aml_client *aml_client_new(struct loop *loop, const struct aml_settings *s, const struct aml_client_options *o,
                                  char *err, size_t errlen)
{
    struct http_options hopt = { .ca_file = o ? o->ca_file : NULL, .trace = o ? o->trace : NULL,
                                 .trace_ctx = o ? o->trace_ctx : NULL };
    struct http_client *http = http_client_new(loop, &hopt, err, errlen);
    if (!http) return NULL;
    struct aml_auth_options aopt = { .authority_host = s->authority_host, .envp = o ? o->envp : NULL };
    struct aml_auth *auth = aml_auth_new(loop, http, &aopt, err, errlen);
    if (!auth) {
        http_client_free(http);
        return NULL;
    }
    struct aml_client *c = xcalloc(1, sizeof *c);
    *c = (struct aml_client){ .loop = loop, .settings = s, .http = http, .auth = auth,
                              .pool = o ? o->pool : NULL, .workspace_id = aml_workspace_id(s) };
    return c;
}

void aml_client_free(struct aml_client *c)
{
    if (!c) return;
    aml_code_free(c->code);
    aml_datastores_free(c->datastores); /* after the transfers through their containers */
    aml_auth_free(c->auth);             /* token callbacks pending are dropped */
    http_client_free(c->http);          /* transfers in flight are dropped, without callbacks */
    arm_calls_release(c);               /* so the calls they belonged to are only freed */
    aml_jobs_release_zombies(c);
    free(c->workspace_id);
    free(c);
}

struct aml_auth *aml_client_auth(struct aml_client *c) { return c->auth; }
struct http_client *aml_client_http(struct aml_client *c) { return c->http; }
struct loop *aml_client_loop(struct aml_client *c) { return c->loop; }
const struct aml_settings *aml_client_settings(const struct aml_client *c) { return c->settings; }
void aml_client_set_detach(struct aml_client *c, bool detach) { c->detach = detach; }

char *aml_client_url(const struct aml_client *c, const char *rest)
{
    return xasprintf("%s%s/%s%sapi-version=%s", c->settings->arm_endpoint, c->workspace_id, rest,
                     strchr(rest, '?') ? "&" : "?", c->settings->api_version);
}
