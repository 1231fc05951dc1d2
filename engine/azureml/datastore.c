/* datastore.c — a datastore's blob container, asked once (datastore.h). */
#include "azureml/datastore.h"

#include "azureml/arm.h"
#include "azureml/blob.h"
#include "azureml/client.h"
#include "azureml/shared.h"
#include "util.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct aml_datastore {
    struct shared_result result;     /* first: shared_wait_result gives the datastore */
    struct aml_client *client;
    char *name;
    char *account, *url;             /* from GET datastores/{name} */
    struct blob_container *container;/* once ready */
    char *error;                     /* once failed */
    struct arm_call *call;           /* in flight */
    struct aml_datastore *next;
};

static void datastore_fail(struct aml_datastore *d, const char *fmt, const char *detail)
{
    free(d->error);
    d->error = xasprintf(fmt, d->name, detail);
    shared_settle(&d->result);
}

static bool answered(struct aml_datastore *d, const struct http_response *resp, const char *what)
{
    d->call = NULL;
    if (resp->status >= 200 && resp->status <= 299) return true;
    char msg[2048];
    http_error_message(resp, msg, sizeof msg);
    char *detail = xasprintf("%s: %s", what, msg);
    datastore_fail(d, "datastore '%s': %s", detail);
    free(detail);
    return false;
}

/* The container from the secret: an account key signs each request, a SAS
 * rides along in its query. */
static void on_secrets(void *arg, const struct http_response *resp)
{
    struct aml_datastore *d = arg;
    if (!answered(d, resp, "cannot read its credentials (listSecrets)")) return;
    cJSON *root = cJSON_ParseWithLength(resp->body, resp->body_len);
    const char *type = http_json_string(root, "secretsType");
    struct blob_container_spec spec = { .url = d->url, .account = d->account };
    if (type && strcmp(type, "AccountKey") == 0) spec.key = http_json_string(root, "key");
    else if (type && strcmp(type, "Sas") == 0) spec.sas = http_json_string(root, "sasToken");
    if (!spec.key && !spec.sas) {
        char detail[256];
        snprintf(detail, sizeof detail, "its credentials are of type %s; flow reads and writes datastores "
                 "with an account key or a SAS token", type ? type : "(none)");
        datastore_fail(d, "datastore '%s': %s", detail);
    } else {
        char err[1024];
        d->container = blob_container_new(d->client->http, d->client->pool, &spec, err, sizeof err);
        if (!d->container) datastore_fail(d, "datastore '%s': %s", err);
        else shared_settle(&d->result);
    }
    /* the secret is wiped: cJSON's strings are freed by cJSON_Delete */
    cJSON *secret = cJSON_GetObjectItemCaseSensitive(root, spec.key ? "key" : "sasToken");
    if (cJSON_IsString(secret)) explicit_bzero(secret->valuestring, strlen(secret->valuestring));
    cJSON_Delete(root);
    explicit_bzero((char *)resp->body, resp->body_len);
}

static void on_datastore(void *arg, const struct http_response *resp)
{
    struct aml_datastore *d = arg;
    if (!answered(d, resp, "cannot read it")) return;
    cJSON *root = cJSON_ParseWithLength(resp->body, resp->body_len);
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(root, "properties");
    const char *type = http_json_string(p, "datastoreType");
    const char *account = http_json_string(p, "accountName"), *container = http_json_string(p, "containerName");
    const cJSON *creds = cJSON_GetObjectItemCaseSensitive(p, "credentials");
    const char *cred_type = http_json_string(creds, "credentialsType");
    if (!type || strcmp(type, "AzureBlob") != 0) {
        datastore_fail(d, "datastore '%s' is %s; flow moves data through Azure Blob datastores "
                       "(set azureml.yml datastore: to one)", type ? type : "of an unknown type");
    } else if (!account || !container) {
        datastore_fail(d, "datastore '%s': %s", "Azure ML's answer names no accountName or containerName");
    } else if (cred_type && strcmp(cred_type, "None") == 0) {
        datastore_fail(d, "datastore '%s': %s", "it is identity-based (credentialsType None); flow reads and "
                       "writes datastores with an account key or a SAS token: register it with one");
    } else {
        const char *protocol = http_json_string(p, "protocol"), *endpoint = http_json_string(p, "endpoint");
        d->account = xstrdup(account);
        d->url = aml_datastore_container_url(d->client->settings->blob_endpoint, protocol, account, endpoint,
                                             container);
        char *rest = xasprintf("datastores/%s/listSecrets", d->name);
        char *url = aml_client_url(d->client, rest);
        d->call = arm_call_start(d->client, "POST", url, NULL, on_secrets, d);
        free(url);
        free(rest);
    }
    cJSON_Delete(root);
}

char *aml_datastore_container_url(const char *blob_endpoint, const char *protocol, const char *account,
                                  const char *endpoint, const char *container)
{
    if (blob_endpoint) return xasprintf("%s/%s", blob_endpoint, container);
    return xasprintf("%s://%s.blob.%s/%s", protocol ? protocol : "https", account,
                     endpoint ? endpoint : "core.windows.net", container);
}

struct step_wait *aml_datastore_wait(struct aml_client *c, const char *name, step_wait_done_fn done, void *arg)
{
    struct aml_datastore *d = c->datastores;
    while (d && strcmp(d->name, name) != 0) d = d->next;
    if (!d) {
        d = xcalloc(1, sizeof *d);
        d->result.loop = c->loop;
        d->client = c;
        d->name = xstrdup(name);
        d->next = c->datastores;
        c->datastores = d;
        char *enc = http_urlencode(name);
        char *rest = xasprintf("datastores/%s", enc);
        char *url = aml_client_url(c, rest);
        d->call = arm_call_start(c, "GET", url, NULL, on_datastore, d);
        free(url);
        free(rest);
        free(enc);
    }
    return shared_wait(&d->result, "azureml datastore", done, arg);
}

static const struct aml_datastore *datastore_of(const struct step_wait *w)
{
    return (const struct aml_datastore *)shared_wait_result(w);
}

struct blob_container *aml_datastore_wait_container(const struct step_wait *w)
{
    const struct aml_datastore *d = datastore_of(w);
    return d ? d->container : NULL;
}

const char *aml_datastore_wait_error(const struct step_wait *w)
{
    const struct aml_datastore *d = datastore_of(w);
    if (!d) return "cancelled";
    return d->container ? NULL : d->error ? d->error : "the datastore was not read";
}

void aml_datastores_free(struct aml_datastore *d)
{
    while (d) {
        struct aml_datastore *next = d->next;
        shared_abandon(&d->result);
        /* a call still out is released with the client's calls, without its callback */
        blob_container_free(d->container);
        free(d->name);
        free(d->account);
        free(d->url);
        free(d->error);
        free(d);
        d = next;
    }
}
