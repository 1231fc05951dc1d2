/* job_body.c — a step as an Azure ML command job (job_body.h). */
#include "azureml/job_body.h"

#include "duration.h"
#include "hash.h"
#include "util.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static void add_string(cJSON *obj, const char *key, const char *value)
{
    if (value) cJSON_AddStringToObject(obj, key, value);
}

static cJSON *resources(const struct aml_job_spec *spec)
{
    cJSON *r = cJSON_CreateObject();
    cJSON_AddNumberToObject(r, "instanceCount", spec->instance_count > 0 ? spec->instance_count : 1);
    add_string(r, "instanceType", spec->instance_type);
    add_string(r, "shmSize", spec->shm_size);
    return r;
}

static cJSON *distribution(const struct aml_job_spec *spec)
{
    cJSON *d = cJSON_CreateObject();
    switch (spec->framework) {
    case AML_FRAMEWORK_PYTORCH:
    case AML_FRAMEWORK_MPI:
        cJSON_AddStringToObject(d, "distributionType", spec->framework == AML_FRAMEWORK_MPI ? "Mpi" : "PyTorch");
        cJSON_AddNumberToObject(d, "processCountPerInstance",
                                spec->processes_per_node > 0 ? spec->processes_per_node : 1);
        break;
    case AML_FRAMEWORK_TENSORFLOW:
        cJSON_AddStringToObject(d, "distributionType", "TensorFlow");
        cJSON_AddNumberToObject(d, "workerCount", spec->worker_count > 0 ? spec->worker_count
                                                  : spec->instance_count > 0 ? spec->instance_count : 1);
        if (spec->parameter_server_count > 0)
            cJSON_AddNumberToObject(d, "parameterServerCount", spec->parameter_server_count);
        break;
    case AML_FRAMEWORK_NONE:
        cJSON_Delete(d);
        return NULL;
    }
    return d;
}

static void add_bindings(cJSON *props, const char *key, const char *type_key, const struct aml_data_binding *b,
                         size_t n)
{
    if (!n) return;
    cJSON *map = cJSON_AddObjectToObject(props, key);
    for (size_t i = 0; i < n; i++) {
        cJSON *o = cJSON_AddObjectToObject(map, b[i].name);
        cJSON_AddStringToObject(o, type_key, b[i].type ? b[i].type : "uri_folder");
        add_string(o, "uri", b[i].uri);
        add_string(o, "mode", b[i].mode);
    }
}

/* The command job `props` made a Sweep job: the fields a TrialComponent
 * has move into "trial", the command's time limit becomes each trial's
 * (limits.trialTimeout), and the sweep's own fields join.  Takes `sweep`. */
static void make_sweep(cJSON *props, cJSON *sweep)
{
    static const char *const trial_keys[] = { "command", "codeId", "environmentId", "environmentVariables",
                                              "distribution", "resources" };
    cJSON *trial = cJSON_CreateObject();
    for (size_t i = 0; i < sizeof trial_keys / sizeof *trial_keys; i++) {
        cJSON *item = cJSON_DetachItemFromObjectCaseSensitive(props, trial_keys[i]);
        if (item) cJSON_AddItemToObject(trial, trial_keys[i], item);
    }
    cJSON_ReplaceItemInObjectCaseSensitive(props, "jobType", cJSON_CreateString("Sweep"));
    cJSON_AddItemToObject(props, "trial", trial);
    cJSON *command_limits = cJSON_DetachItemFromObjectCaseSensitive(props, "limits");
    cJSON *limits = cJSON_GetObjectItemCaseSensitive(sweep, "limits");
    if (!cJSON_IsObject(limits)) {
        cJSON_DeleteItemFromObjectCaseSensitive(sweep, "limits");
        limits = cJSON_AddObjectToObject(sweep, "limits");
    }
    cJSON_DeleteItemFromObjectCaseSensitive(limits, "jobLimitsType");
    cJSON_AddStringToObject(limits, "jobLimitsType", "Sweep");
    cJSON *timeout = cJSON_GetObjectItemCaseSensitive(command_limits, "timeout");
    if (cJSON_IsString(timeout) && !cJSON_HasObjectItem(limits, "trialTimeout"))
        cJSON_AddStringToObject(limits, "trialTimeout", timeout->valuestring);
    cJSON_Delete(command_limits);
    while (sweep->child) {
        cJSON *item = cJSON_DetachItemViaPointer(sweep, sweep->child);
        cJSON_DeleteItemFromObjectCaseSensitive(props, item->string);
        cJSON_AddItemToObject(props, item->string, item);
    }
    cJSON_Delete(sweep);
}

char *aml_job_body(const struct aml_job_spec *spec)
{
    cJSON *sweep = NULL;
    if (spec->sweep_json) {
        sweep = cJSON_Parse(spec->sweep_json);
        if (!cJSON_IsObject(sweep)) {
            cJSON_Delete(sweep);
            return NULL;
        }
    }
    cJSON *props = cJSON_CreateObject();
    cJSON_AddStringToObject(props, "jobType", "Command");
    add_string(props, "displayName", spec->display_name);
    add_string(props, "experimentName", spec->experiment);
    cJSON_AddStringToObject(props, "command", spec->command);
    add_string(props, "codeId", spec->code_id);
    cJSON_AddStringToObject(props, "environmentId", spec->environment_id);
    add_string(props, "computeId", spec->compute_id);
    cJSON_AddItemToObject(props, "resources", resources(spec));
    cJSON *dist = distribution(spec);
    if (dist) cJSON_AddItemToObject(props, "distribution", dist);
    if (spec->timeout > 0) {
        char iso[64];
        duration_iso8601(spec->timeout, iso, sizeof iso);
        cJSON *limits = cJSON_AddObjectToObject(props, "limits");
        cJSON_AddStringToObject(limits, "jobLimitsType", "Command");
        cJSON_AddStringToObject(limits, "timeout", iso);
    }
    if (spec->n_env) {
        cJSON *env = cJSON_AddObjectToObject(props, "environmentVariables");
        for (size_t i = 0; i < spec->n_env; i++) cJSON_AddStringToObject(env, spec->env[i].name, spec->env[i].value);
    }
    add_bindings(props, "inputs", "jobInputType", spec->inputs, spec->n_inputs);
    add_bindings(props, "outputs", "jobOutputType", spec->outputs, spec->n_outputs);
    if (spec->n_tags) {
        cJSON *tags = cJSON_AddObjectToObject(props, "tags");
        for (size_t i = 0; i < spec->n_tags; i++) cJSON_AddStringToObject(tags, spec->tags[i].key, spec->tags[i].value);
    }
    if (sweep) make_sweep(props, sweep);
    cJSON *root = cJSON_CreateObject();
    cJSON_AddItemToObject(root, "properties", props);
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!text) abort();                     /* cJSON fails only for want of memory */
    return text;
}

char *aml_job_name(const char *run_id, const char *step, const char *fingerprint, int attempt)
{
    struct strbuf key = STRBUF_INIT;
    sb_addf(&key, "%s\n%s\n%s", run_id, step, fingerprint ? fingerprint : "");
    char hex[SHA256_HEX_SIZE];
    sha256_hex(key.buf, key.len, hex);
    sb_release(&key);
    /* The step's name, as much of it as reads well: letters, digits, - and _. */
    char clean[65];
    size_t n = 0;
    for (const char *p = step; *p && n < sizeof clean - 1; p++)
        clean[n++] = isalnum((unsigned char)*p) || *p == '_' || *p == '-' ? *p : '-';
    clean[n] = '\0';
    hex[12] = '\0';
    return attempt > 1 ? xasprintf("flow-%s-%s-a%d", clean, hex, attempt) : xasprintf("flow-%s-%s", clean, hex);
}

enum aml_framework aml_framework_from_name(const char *name)
{
    if (!name) return AML_FRAMEWORK_NONE;
    if (strcasecmp(name, "pytorch") == 0) return AML_FRAMEWORK_PYTORCH;
    if (strcasecmp(name, "mpi") == 0) return AML_FRAMEWORK_MPI;
    if (strcasecmp(name, "tensorflow") == 0) return AML_FRAMEWORK_TENSORFLOW;
    return AML_FRAMEWORK_NONE;
}
