/* components.c — registering a component version (components.h). */
#include "azureml/components.h"

#include "azureml/arm.h"
#include "azureml/client.h"
#include "util.h"

#include <cjson/cJSON.h>
#include <stdlib.h>

struct registration {
    char *name, *version;
    aml_component_fn done;
    void *arg;
};

static void on_put(void *arg, const struct http_response *resp)
{
    struct registration *r = arg;
    if (resp->status >= 200 && resp->status <= 299) {
        cJSON *root = cJSON_ParseWithLength(resp->body, resp->body_len);
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(root, "id");
        if (cJSON_IsString(id)) r->done(r->arg, id->valuestring, NULL);
        else {
            char *why = xasprintf("component %s version %s: Azure ML's answer has no id", r->name, r->version);
            r->done(r->arg, NULL, why);
            free(why);
        }
        cJSON_Delete(root);
    } else {
        char msg[2048];
        http_error_message(resp, msg, sizeof msg);
        char *why = xasprintf("component %s version %s: %s", r->name, r->version, msg);
        r->done(r->arg, NULL, why);
        free(why);
    }
    free(r->name);
    free(r->version);
    free(r);
}

void aml_component_register(struct aml_client *c, const char *name, const char *version, const char *body_json,
                            aml_component_fn done, void *arg)
{
    struct registration *r = xmalloc(sizeof *r);
    *r = (struct registration){ xstrdup(name), xstrdup(version), done, arg };
    char *enc_name = http_urlencode(name), *enc_version = http_urlencode(version);
    char *rest = xasprintf("components/%s/versions/%s", enc_name, enc_version);
    char *url = aml_client_url(c, rest);
    arm_call_start(c, "PUT", url, body_json, on_put, r);
    free(url);
    free(rest);
    free(enc_name);
    free(enc_version);
}
