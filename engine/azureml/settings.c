/* settings.c — azureml.yml, checked and typed (settings.h). */
#include "azureml/settings.h"

#include "duration.h"
#include "suggest.h"
#include "util.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const KEYS[] = {
    "api_version", "arm_endpoint", "authority_host", "blob_endpoint", "compute", "datastore", "dispatch",
    "environment", "environment_variables", "experiment_name", "input_mode", "instance_type", "output_mode",
    "poll_interval", "resource_group", "shm_size", "subscription_id", "timeout", "workspace",
};
#define N_KEYS (sizeof KEYS / sizeof *KEYS)

static const char *const DISPATCH[] = { "distributed", "tagged", "all", "none" };

/* One load: the configuration, what is being filled, and the error buffer. */
struct load {
    const struct config *cfg;
    struct aml_settings *s;
    char *err;
    size_t errlen;
};

/* "conf/prod/azureml.yml:4" for a dotted key, or the file when unknown. */
static const char *where(const struct load *l, const char *key)
{
    const char *o = config_origin(l->cfg, "azureml", key);
    return o ? o : l->s->where;
}

static const char *type_name(const cJSON *v)
{
    if (cJSON_IsString(v)) return "a string";
    if (cJSON_IsNumber(v)) return "a number";
    if (cJSON_IsBool(v)) return "a boolean";
    if (cJSON_IsNull(v)) return "null";
    if (cJSON_IsArray(v)) return "a list";
    return "a mapping";
}

/* A "params:key" value is the run's parameter `key`; anything else is itself.
 * NULL (with a message) when the parameter does not exist. */
static const cJSON *deref(struct load *l, const char *key, const cJSON *v)
{
    if (!cJSON_IsString(v) || strncmp(v->valuestring, "params:", 7) != 0) return v;
    const char *param = v->valuestring + 7;
    const cJSON *p = config_get(l->cfg, "parameters", param);
    if (p) return p;
    char *near = config_closest_key(l->cfg, "parameters", param);
    errf(l->err, l->errlen, "%s: %s is \"%s\" but there is no parameter '%s'%s%s%s", where(l, key), key,
         v->valuestring, param, near ? " (did you mean '" : "", near ? near : "", near ? "'?)" : "");
    free(near);
    return NULL;
}

/* A string field: *out a copy, or left NULL when absent and not required.
 * Numbers are accepted where a name is expected (a YAML `workspace: 123`). */
static int get_string(struct load *l, const char *key, bool required, char **out)
{
    const cJSON *v = config_get(l->cfg, "azureml", key);
    if (!v || cJSON_IsNull(v)) {
        if (!required) return 0;
        errf(l->err, l->errlen, "%s: azureml setting '%s' is missing; it names %s", l->s->where, key,
             strcmp(key, "subscription_id") == 0 ? "the Azure subscription (a GUID)"
             : strcmp(key, "resource_group") == 0 ? "the workspace's resource group"
             : strcmp(key, "workspace") == 0 ? "the Azure ML workspace"
             : strcmp(key, "experiment_name") == 0 ? "the experiment jobs are grouped under"
             : "what jobs run in");
        return -1;
    }
    if (!(v = deref(l, key, v))) return -1;
    char num[64];
    const char *text = cJSON_IsString(v) ? v->valuestring : NULL;
    if (cJSON_IsNumber(v) && v->valuedouble == (double)(long long)v->valuedouble) {
        snprintf(num, sizeof num, "%lld", (long long)v->valuedouble);
        text = num;
    }
    if (!text || !*text) {
        errf(l->err, l->errlen, "%s: %s must be a non-empty string, got %s", where(l, key), key,
             text ? "\"\"" : type_name(v));
        return -1;
    }
    *out = xstrdup(text);
    return 0;
}

/* A duration field (seconds, or "30m", "1h30m"). */
static int get_duration(struct load *l, const char *key, double *out)
{
    const cJSON *v = config_get(l->cfg, "azureml", key);
    if (!v || cJSON_IsNull(v)) return 0;
    if (!(v = deref(l, key, v))) return -1;
    bool ok = cJSON_IsNumber(v) ? isfinite(v->valuedouble) && v->valuedouble > 0 && (*out = v->valuedouble, true)
              : cJSON_IsString(v) && duration_parse(v->valuestring, false, out);
    if (ok) return 0;
    char num[64] = "";
    if (cJSON_IsNumber(v)) snprintf(num, sizeof num, "%g", v->valuedouble);   /* (-1, 0, nan, inf) */
    errf(l->err, l->errlen, "%s: %s must be a positive duration like 90 (seconds), \"30m\" or \"2h\", got %s",
         where(l, key), key, cJSON_IsString(v) ? v->valuestring : *num ? num : type_name(v));
    return -1;
}

static int check_keys(struct load *l)
{
    const cJSON *section = config_section(l->cfg, "azureml");
    if (!cJSON_IsObject(section)) {
        errf(l->err, l->errlen, "%s: azureml settings must be a mapping", l->s->where);
        return -1;
    }
    for (const cJSON *k = section->child; k; k = k->next) {
        bool known = false;
        for (size_t i = 0; i < N_KEYS && !known; i++) known = strcmp(k->string, KEYS[i]) == 0;
        if (known) continue;
        const char *near = closest_word(k->string, KEYS, N_KEYS);
        struct strbuf all = STRBUF_INIT;
        for (size_t i = 0; i < N_KEYS; i++) sb_addf(&all, "%s%s", i ? ", " : "", KEYS[i]);
        errf(l->err, l->errlen, "%s: unknown azureml setting '%s'%s%s%s; the settings are: %s",
             where(l, k->string), k->string, near ? " (did you mean '" : "", near ? near : "",
             near ? "'?)" : "", all.buf);
        sb_release(&all);
        return -1;
    }
    return 0;
}

static int cmp_tag(const void *a, const void *b)
{
    return strcmp(((const struct aml_compute_tag *)a)->tag, ((const struct aml_compute_tag *)b)->tag);
}

/* compute: a cluster name (the default), or {__default__: name, <tag>: name}. */
static int load_compute(struct load *l)
{
    const cJSON *v = config_get(l->cfg, "azureml", "compute");
    if (!v || cJSON_IsNull(v)) {
        errf(l->err, l->errlen, "%s: azureml setting 'compute' is missing; it names the compute cluster, "
             "or maps tags to clusters: compute: {__default__: cpu-cluster, gpu: gpu-cluster}", l->s->where);
        return -1;
    }
    if (!cJSON_IsObject(v)) return get_string(l, "compute", true, &l->s->default_compute);
    for (const cJSON *c = v->child; c; c = c->next) {
        char key[512];
        snprintf(key, sizeof key, "compute.%s", c->string);
        const cJSON *name = deref(l, key, c);
        if (!name) return -1;
        if (!cJSON_IsString(name) || !aml_valid_name(name->valuestring)) {
            errf(l->err, l->errlen, "%s: %s must be the name of a compute cluster, got %s", where(l, key), key,
                 cJSON_IsString(name) ? name->valuestring : type_name(name));
            return -1;
        }
        if (strcmp(c->string, "__default__") == 0) {
            l->s->default_compute = xstrdup(name->valuestring);
            continue;
        }
        l->s->computes = xrealloc(l->s->computes, (l->s->n_computes + 1) * sizeof *l->s->computes);
        l->s->computes[l->s->n_computes++] = (struct aml_compute_tag){ xstrdup(c->string), xstrdup(name->valuestring) };
    }
    if (l->s->n_computes) qsort(l->s->computes, l->s->n_computes, sizeof *l->s->computes, cmp_tag);
    return 0;
}

/* environment: what jobs run in, as a string, or {name: …, flow_installed: true}
 * for an environment built with flow inside (Lua-function steps need it). */
static int load_environment(struct load *l)
{
    const cJSON *v = config_get(l->cfg, "azureml", "environment");
    if (!cJSON_IsObject(v)) return get_string(l, "environment", true, &l->s->environment);
    for (const cJSON *k = v->child; k; k = k->next) {
        if (strcmp(k->string, "name") == 0 || strcmp(k->string, "flow_installed") == 0) continue;
        char key[512];
        snprintf(key, sizeof key, "environment.%s", k->string);
        errf(l->err, l->errlen, "%s: unknown key '%s' in environment; it is a string, or "
             "{name: <environment>, flow_installed: true}", where(l, key), k->string);
        return -1;
    }
    if (get_string(l, "environment.name", true, &l->s->environment) != 0) return -1;
    const cJSON *fi = cJSON_GetObjectItemCaseSensitive(v, "flow_installed");
    if (fi && !cJSON_IsBool(fi)) {
        errf(l->err, l->errlen, "%s: environment.flow_installed must be true or false, got %s",
             where(l, "environment.flow_installed"), type_name(fi));
        return -1;
    }
    l->s->flow_installed = cJSON_IsTrue(fi);
    return 0;
}

static int cmp_var(const void *a, const void *b)
{
    return strcmp(((const struct aml_env_var *)a)->name, ((const struct aml_env_var *)b)->name);
}

static bool is_var_name(const char *s)
{
    if (!*s || isdigit((unsigned char)*s)) return false;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && *s != '_') return false;
    return true;
}

static int load_env_vars(struct load *l)
{
    const cJSON *v = config_get(l->cfg, "azureml", "environment_variables");
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsObject(v)) {
        errf(l->err, l->errlen, "%s: environment_variables must be a mapping of NAME: value, got %s",
             where(l, "environment_variables"), type_name(v));
        return -1;
    }
    size_t n = (size_t)cJSON_GetArraySize(v);
    l->s->env_vars = xcalloc(n ? n : 1, sizeof *l->s->env_vars);
    for (const cJSON *e = v->child; e; e = e->next) {
        char key[512], *value = NULL;
        snprintf(key, sizeof key, "environment_variables.%s", e->string);
        if (!is_var_name(e->string)) {
            errf(l->err, l->errlen, "%s: environment_variables: '%s' is not a variable name", where(l, key),
                 e->string);
            return -1;
        }
        if (cJSON_IsBool(e)) value = xstrdup(cJSON_IsTrue(e) ? "true" : "false");
        else if (get_string(l, key, true, &value) != 0) return -1;
        /* a credential's value (read from the same ${env:X} as one) would be
         * every job's, visible in Azure ML studio: refused, as a step's
         * ${credentials.x} is */
        char *masked = config_redact(l->cfg, value);
        bool secret = strcmp(masked, "***") == 0 && strcmp(value, "***") != 0;
        free(masked);
        if (secret) {
            free(value);
            errf(l->err, l->errlen, "%s: environment_variables: '%s' holds a credential's value, which a job's "
                 "environment would show in Azure ML studio; give jobs their secrets from the workspace's Key Vault",
                 where(l, key), e->string);
            return -1;
        }
        l->s->env_vars[l->s->n_env_vars++] = (struct aml_env_var){ xstrdup(e->string), value };
    }
    qsort(l->s->env_vars, l->s->n_env_vars, sizeof *l->s->env_vars, cmp_var);
    return 0;
}

static int load_dispatch(struct load *l)
{
    char *d = NULL;
    if (get_string(l, "dispatch", false, &d) != 0) return -1;
    l->s->dispatch = AML_DISPATCH_DISTRIBUTED;
    if (!d) return 0;
    for (size_t i = 0; i < sizeof DISPATCH / sizeof *DISPATCH; i++)
        if (strcmp(d, DISPATCH[i]) == 0) {
            l->s->dispatch = (enum aml_dispatch)i;
            free(d);
            return 0;
        }
    errf(l->err, l->errlen, "%s: dispatch must be distributed, tagged, all or none, got \"%s\"",
         where(l, "dispatch"), d);
    free(d);
    return -1;
}

bool aml_valid_shm_size(const char *s)
{
    const char *p = s;
    while (isdigit((unsigned char)*p)) p++;
    return p > s && p[0] && strchr("bBkKmMgG", p[0]) && !p[1];
}

static bool is_api_version(const char *s)
{
    /* 2024-10-01, or 2025-01-01-preview */
    for (int i = 0; i < 10; i++)
        if (i == 4 || i == 7 ? s[i] != '-' : !isdigit((unsigned char)s[i])) return false;
    return s[10] == '\0' || strcmp(s + 10, "-preview") == 0;
}

/* Whether an http:// URL names this machine (an emulator such as Azurite):
 * the only place flow talks plain HTTP to. */
static bool is_loopback_http(const char *e)
{
    static const char *const hosts[] = { "http://127.0.0.1", "http://localhost", "http://[::1]" };
    for (size_t i = 0; i < sizeof hosts / sizeof *hosts; i++) {
        size_t n = strlen(hosts[i]);
        if (strncmp(e, hosts[i], n) == 0 && (e[n] == ':' || e[n] == '/' || !e[n])) return true;
    }
    return false;
}

/* An endpoint: https://host[:port][/path], without a trailing slash; a bare
 * host where bare_host_ok, http:// to this machine where emulator_ok. */
static int get_endpoint(struct load *l, const char *key, bool bare_host_ok, bool emulator_ok, char **out)
{
    if (get_string(l, key, false, out) != 0) return -1;
    if (!*out) return 0;
    char *e = *out;
    if (bare_host_ok && !strstr(e, "://")) {
        *out = xasprintf("https://%s", e);
        free(e);
        e = *out;
    }
    bool emulator = emulator_ok && is_loopback_http(e);
    if (!emulator && (strncmp(e, "https://", 8) != 0 || !e[8] || e[8] == '/')) {
        errf(l->err, l->errlen, "%s: %s must be an https:// URL%s, got \"%s\"", where(l, key), key,
             emulator_ok ? " (http:// only to this machine: an emulator)" : "", e);
        return -1;
    }
    size_t n = strlen(e);
    while (n > 8 && e[n - 1] == '/') e[--n] = '\0';
    return 0;
}

bool aml_valid_data_mode(const char *mode, bool output)
{
    return output ? strcmp(mode, "ReadWriteMount") == 0 || strcmp(mode, "Upload") == 0
                  : strcmp(mode, "ReadOnlyMount") == 0 || strcmp(mode, "Download") == 0;
}

/* input_mode / output_mode: how a job's data is delivered. */
static int get_mode(struct load *l, const char *key, bool output, char **out)
{
    if (get_string(l, key, false, out) != 0) return -1;
    if (!*out || aml_valid_data_mode(*out, output)) return 0;
    errf(l->err, l->errlen, "%s: %s must be %s, got \"%s\"", where(l, key), key,
         output ? "ReadWriteMount or Upload" : "ReadOnlyMount or Download", *out);
    return -1;
}

static int load_fields(struct load *l)
{
    struct aml_settings *s = l->s;
    bool need = s->dispatch != AML_DISPATCH_NONE;
    if (get_string(l, "subscription_id", need, &s->subscription_id) != 0
        || get_string(l, "resource_group", need, &s->resource_group) != 0
        || get_string(l, "workspace", need, &s->workspace) != 0
        || get_string(l, "experiment_name", need, &s->experiment_name) != 0)
        return -1;
    if (need && (load_compute(l) != 0 || load_environment(l) != 0)) return -1;
    if (get_string(l, "instance_type", false, &s->instance_type) != 0
        || get_string(l, "shm_size", false, &s->shm_size) != 0
        || get_duration(l, "timeout", &s->timeout) != 0
        || get_duration(l, "poll_interval", &s->poll_interval) != 0
        || load_env_vars(l) != 0
        || get_string(l, "api_version", false, &s->api_version) != 0
        || get_endpoint(l, "arm_endpoint", false, false, &s->arm_endpoint) != 0
        || get_endpoint(l, "authority_host", true, false, &s->authority_host) != 0
        || get_endpoint(l, "blob_endpoint", false, true, &s->blob_endpoint) != 0
        || get_string(l, "datastore", false, &s->datastore) != 0
        || get_mode(l, "input_mode", false, &s->input_mode) != 0
        || get_mode(l, "output_mode", true, &s->output_mode) != 0)
        return -1;
    if (s->datastore && !aml_valid_name(s->datastore)) {
        errf(l->err, l->errlen, "%s: datastore \"%s\" is not a valid Azure ML name", where(l, "datastore"),
             s->datastore);
        return -1;
    }
    if (s->shm_size && !aml_valid_shm_size(s->shm_size)) {
        errf(l->err, l->errlen, "%s: shm_size must be a size like \"16g\" or \"512m\", got \"%s\"",
             where(l, "shm_size"), s->shm_size);
        return -1;
    }
    if (s->api_version && !is_api_version(s->api_version)) {
        errf(l->err, l->errlen, "%s: api_version must be a date like 2024-10-01, got \"%s\"",
             where(l, "api_version"), s->api_version);
        return -1;
    }
    if (s->workspace && !aml_valid_name(s->workspace)) {
        errf(l->err, l->errlen, "%s: workspace \"%s\" is not a valid Azure ML name (letters, digits, - and _, "
             "starting with a letter or digit)", where(l, "workspace"), s->workspace);
        return -1;
    }
    return 0;
}

static void set_defaults(struct aml_settings *s)
{
    if (!s->api_version) s->api_version = xstrdup("2024-10-01");
    if (!s->arm_endpoint) s->arm_endpoint = xstrdup("https://management.azure.com");
    if (!s->experiment_name) s->experiment_name = xstrdup("Default");
    if (s->poll_interval == 0) s->poll_interval = 10;
    if (!s->datastore) s->datastore = xstrdup("workspaceblobstore");
    if (!s->input_mode) s->input_mode = xstrdup("ReadOnlyMount");
    if (!s->output_mode) s->output_mode = xstrdup("ReadWriteMount");
}

int aml_settings_load(const struct config *cfg, struct aml_settings *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    const cJSON *section = config_section(cfg, "azureml");
    if (!section || (cJSON_IsObject(section) && !section->child)) return 1;
    /* The file, for messages about what it lacks: where any of its keys is. */
    const char *o = NULL;
    for (const cJSON *k = section->child; k && !o; k = k->next) o = config_origin(cfg, "azureml", k->string);
    char *file = xstrdup(o ? o : "azureml.yml");
    char *colon = strrchr(file, ':');
    if (colon && colon[1] && strspn(colon + 1, "0123456789") == strlen(colon + 1)) *colon = '\0';
    out->where = file;
    struct load l = { cfg, out, err, errlen };
    if (check_keys(&l) != 0 || load_dispatch(&l) != 0 || load_fields(&l) != 0) {
        aml_settings_free(out);
        return -1;
    }
    set_defaults(out);
    return 0;
}

void aml_settings_free(struct aml_settings *s)
{
    if (!s) return;
    char **strings[] = { &s->subscription_id, &s->resource_group, &s->workspace, &s->experiment_name,
                         &s->default_compute, &s->environment, &s->instance_type, &s->shm_size,
                         &s->api_version, &s->arm_endpoint, &s->authority_host, &s->where, &s->datastore,
                         &s->blob_endpoint, &s->input_mode, &s->output_mode };
    for (size_t i = 0; i < sizeof strings / sizeof *strings; i++) {
        free(*strings[i]);
        *strings[i] = NULL;
    }
    for (size_t i = 0; i < s->n_computes; i++) {
        free(s->computes[i].tag);
        free(s->computes[i].cluster);
    }
    for (size_t i = 0; i < s->n_env_vars; i++) {
        free(s->env_vars[i].name);
        free(s->env_vars[i].value);
    }
    free(s->computes);
    free(s->env_vars);
    memset(s, 0, sizeof *s);
}

char *aml_workspace_id(const struct aml_settings *s)
{
    return xasprintf("/subscriptions/%s/resourceGroups/%s/providers/Microsoft.MachineLearningServices/workspaces/%s",
                     s->subscription_id, s->resource_group, s->workspace);
}

static const char *compute_of_tag(const struct aml_settings *s, const char *tag)
{
    for (size_t i = 0; i < s->n_computes; i++)
        if (strcmp(s->computes[i].tag, tag) == 0) return s->computes[i].cluster;
    return NULL;
}

bool aml_tags_name_compute(const struct aml_settings *s, const char *const *tags, size_t n_tags)
{
    for (size_t i = 0; i < n_tags; i++)
        if (compute_of_tag(s, tags[i])) return true;
    return false;
}

const char *aml_compute_for(const struct aml_settings *s, const char *const *tags, size_t n_tags,
                            char *err, size_t errlen)
{
    const char *found = NULL, *found_tag = NULL;
    for (size_t i = 0; i < n_tags; i++) {
        const char *c = compute_of_tag(s, tags[i]);
        if (!c) continue;
        if (found) {
            errf(err, errlen, "tags '%s' and '%s' both name a compute in %s (compute.%s: %s, compute.%s: %s); "
                 "a step runs on one: keep one of the tags, or set node{compute = …}",
                 found_tag, tags[i], s->where, found_tag, found, tags[i], c);
            return NULL;
        }
        found = c;
        found_tag = tags[i];
    }
    if (found) return found;
    if (s->default_compute) return s->default_compute;
    errf(err, errlen, "no compute for this step in %s: none of its tags names one and there is no "
         "compute.__default__", s->where);
    return NULL;
}

/* The part of s before `sep`, or NULL when sep is not there. */
static char *before(const char *s, const char *sep, const char **rest)
{
    const char *at = strstr(s, sep);
    if (!at) return NULL;
    *rest = at + strlen(sep);
    return xstrndup(s, (size_t)(at - s));
}

/* The forms of an environment as written in azureml.yml or node{environment =}
 * (shared/azureml/REFERENCE.md §3).  *bare: past an "azureml:" prefix;
 * name and version: a workspace environment's, malloc'd. */
enum env_form { ENV_REGISTRY, ENV_CURATED, ENV_ARM_ID, ENV_WORKSPACE_LATEST, ENV_WORKSPACE_VERSION, ENV_UNKNOWN };

static enum env_form environment_form(const char *environment, const char **bare, char **name, char **version)
{
    *name = *version = NULL;
    *bare = strncmp(environment, "azureml:", 8) == 0 ? environment + 8 : environment;
    if (strncmp(environment, "azureml://registries/", 21) == 0) return ENV_REGISTRY;
    const char *e = *bare, *v = NULL;
    if (strncmp(e, "AzureML-", 8) == 0) return ENV_CURATED;         /* expanded by Azure ML */
    if (strncmp(e, "/subscriptions/", 15) == 0) return ENV_ARM_ID;
    char *n = before(e, "@", &v);
    if (n && strcmp(v, "latest") == 0 && aml_valid_name(n)) {
        *name = n;
        return ENV_WORKSPACE_LATEST;
    }
    free(n);
    if ((n = before(e, ":", &v)) && aml_valid_name(n) && *v && !strchr(v, '/')) {
        *name = n;
        *version = xstrdup(v);
        return ENV_WORKSPACE_VERSION;
    }
    free(n);
    return ENV_UNKNOWN;
}

static void unknown_environment(const char *environment, char *err, size_t errlen)
{
    errf(err, errlen, "environment \"%s\" is not one Azure ML knows: use a curated environment "
         "(azureml:AzureML-<name>@latest), a registry one (azureml://registries/<registry>/environments/<name>/"
         "versions/<v> or …/labels/latest), or one of the workspace's (<name>:<version> or <name>@latest)",
         environment);
}

char *aml_environment_id(const struct aml_settings *s, const char *environment, bool *needs_latest,
                         char *err, size_t errlen)
{
    const char *bare;
    char *name, *version, *id = NULL;
    *needs_latest = false;
    switch (environment_form(environment, &bare, &name, &version)) {
    case ENV_REGISTRY: id = xstrdup(environment); break;
    case ENV_CURATED: id = xasprintf("azureml:%s", bare); break;
    case ENV_ARM_ID: id = xstrdup(bare); break;
    case ENV_WORKSPACE_LATEST: *needs_latest = true; break;
    case ENV_WORKSPACE_VERSION: {
        char *ws = aml_workspace_id(s);
        id = xasprintf("%s/environments/%s/versions/%s", ws, name, version);
        free(ws);
        break;
    }
    case ENV_UNKNOWN: unknown_environment(environment, err, errlen); break;
    }
    free(name);
    free(version);
    return id;
}

char *aml_environment_yaml(const char *environment, char *err, size_t errlen)
{
    const char *bare;
    char *name, *version, *ref = NULL;
    enum env_form form = environment_form(environment, &bare, &name, &version);
    free(name);
    free(version);
    if (form == ENV_REGISTRY) ref = xstrdup(environment);
    else if (form == ENV_UNKNOWN) unknown_environment(environment, err, errlen);
    else ref = xasprintf("azureml:%s", bare);      /* name:version, name@latest, an ARM id, a curated one */
    return ref;
}

bool aml_valid_name(const char *name)
{
    size_t n = strlen(name);
    if (n == 0 || n > 255 || !isalnum((unsigned char)name[0])) return false;
    for (size_t i = 1; i < n; i++)
        if (!isalnum((unsigned char)name[i]) && name[i] != '-' && name[i] != '_') return false;
    return true;
}
