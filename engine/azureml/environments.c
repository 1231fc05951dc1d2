/* environments.c — "name@latest" to a version's ARM id (environments.h). */
#include "azureml/environments.h"

#include "azureml/arm.h"
#include "azureml/client.h"
#include "util.h"

#include <cjson/cJSON.h>
#include <stdlib.h>

struct latest {
    char *name;
    aml_env_fn done;
    void *arg;
};

static void on_versions(void *arg, const struct http_response *resp)
{
    struct latest *q = arg;
    char msg[2048];
    if (resp->status < 200 || resp->status > 299) {
        http_error_message(resp, msg, sizeof msg);
        char *why = xasprintf("environment %s@latest: %s", q->name, msg);
        q->done(q->arg, NULL, why);
        free(why);
    } else {
        cJSON *root = cJSON_ParseWithLength(resp->body, resp->body_len);
        const cJSON *first = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(root, "value"), 0);
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(first, "id");
        if (cJSON_IsString(id)) q->done(q->arg, id->valuestring, NULL);
        else {
            char *why = xasprintf("environment %s@latest: the workspace has no version of environment '%s'",
                                  q->name, q->name);
            q->done(q->arg, NULL, why);
            free(why);
        }
        cJSON_Delete(root);
    }
    free(q->name);
    free(q);
}

void aml_environment_latest(struct aml_client *c, const char *name, aml_env_fn done, void *arg)
{
    struct latest *q = xmalloc(sizeof *q);
    *q = (struct latest){ xstrdup(name), done, arg };
    char *enc = http_urlencode(name);
    char *rest = xasprintf("environments/%s/versions?$orderBy=createdtime%%20desc&$top=1", enc);
    char *url = aml_client_url(c, rest);
    arm_call_start(c, "GET", url, NULL, on_versions, q);
    free(url);
    free(rest);
    free(enc);
}
