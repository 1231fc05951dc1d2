/* settings.h — conf/<env>/azureml.yml, checked and typed: the workspace, where
 * steps go (dispatch, compute by tag), what they run in (environment,
 * resources), and how flow talks to Azure (api_version, endpoints, polling).
 *
 * Every problem is found here, before anything is submitted, and named with
 * the file and line it comes from ("conf/prod/azureml.yml:4: compute.gpu must
 * be the name of a compute cluster, got 3").  Values may be `${env:…}` (the
 * configuration resolves those) or "params:key" (a parameter of the run).
 *
 * Nothing here knows of Lua. */
#ifndef FLOW_AZUREML_SETTINGS_H
#define FLOW_AZUREML_SETTINGS_H

#include "config.h"

#include <stdbool.h>
#include <stddef.h>

/* Which steps go to Azure ML. */
enum aml_dispatch {
    AML_DISPATCH_DISTRIBUTED,   /* distributed_job steps (the default) */
    AML_DISPATCH_TAGGED,        /* those, and steps with a tag that names a compute */
    AML_DISPATCH_ALL,           /* every step */
    AML_DISPATCH_NONE,          /* none: the environment runs everything here */
};

struct aml_compute_tag {
    char *tag, *cluster;
};

struct aml_env_var {
    char *name, *value;
};

struct aml_settings {
    char *subscription_id, *resource_group, *workspace, *experiment_name;
    char *default_compute;                 /* compute.__default__, or NULL */
    struct aml_compute_tag *computes;      /* the other compute keys, sorted by tag */
    size_t n_computes;
    char *environment;                     /* as written (see aml_environment_id) */
    bool flow_installed;                   /* environment: {flow_installed: true} */
    char *instance_type, *shm_size;        /* or NULL */
    double timeout;                        /* seconds; 0: none */
    struct aml_env_var *env_vars;          /* environment_variables, sorted by name */
    size_t n_env_vars;
    enum aml_dispatch dispatch;
    char *api_version;                     /* default "2024-10-01" */
    char *arm_endpoint;                    /* default "https://management.azure.com" (no trailing /) */
    char *authority_host;                  /* default NULL: AZURE_AUTHORITY_HOST or Entra's public cloud */
    double poll_interval;                  /* seconds; default 10 */
    char *datastore;                       /* where data crosses; default "workspaceblobstore" */
    char *blob_endpoint;                   /* replaces the datastore account's service URL, or NULL */
    char *input_mode;                      /* how jobs get inputs: "ReadOnlyMount" (default) or "Download" */
    char *output_mode;                     /* how jobs write outputs: "ReadWriteMount" (default) or "Upload" */
    char *where;                           /* "conf/prod/azureml.yml", for messages */
};

/* 1 when the environment has no azureml section (nothing goes to Azure ML),
 * 0 with *out filled, -1 with a message naming file, line and field. */
int aml_settings_load(const struct config *cfg, struct aml_settings *out, char *err, size_t errlen);
void aml_settings_free(struct aml_settings *s);

/* The workspace's ARM id: /subscriptions/…/workspaces/{ws} (malloc'd). */
char *aml_workspace_id(const struct aml_settings *s);

/* The compute cluster for a step with these tags: compute.<tag> when exactly
 * one tag names a compute, else compute.__default__.  NULL with a message when
 * two tags match or there is no default. */
const char *aml_compute_for(const struct aml_settings *s, const char *const *tags, size_t n_tags,
                            char *err, size_t errlen);
/* Whether one of the tags names a compute (dispatch: tagged). */
bool aml_tags_name_compute(const struct aml_settings *s, const char *const *tags, size_t n_tags);

/* What to send as environmentId for `environment` as written
 * (shared/azureml/REFERENCE.md §3): a curated "azureml:AzureML-…@latest" or a
 * registry "azureml://registries/…" as it is, a workspace "name:version" as
 * its ARM id; "name@latest" needs the workspace's latest version, which the
 * caller looks up: *needs_latest is set and NULL returned.  NULL with a
 * message for anything else. */
char *aml_environment_id(const struct aml_settings *s, const char *environment, bool *needs_latest,
                         char *err, size_t errlen);

/* The same environment as the az ml CLI's YAML names it (a job's
 * `environment:`): "azureml:name:version", "azureml:name@latest",
 * "azureml:AzureML-…@latest", "azureml:<ARM id>", or a registry's URI as it
 * is.  Needs no workspace: `flow compile` writes it without asking Azure ML.
 * NULL with the same message as aml_environment_id's for anything else. */
char *aml_environment_yaml(const char *environment, char *err, size_t errlen);

/* Whether mode is a delivery mode flow accepts for inputs (ReadOnlyMount,
 * Download) or outputs (ReadWriteMount, Upload). */
bool aml_valid_data_mode(const char *mode, bool output);

/* Whether a string is a valid Azure ML resource name (job, code, compute). */
bool aml_valid_name(const char *name);
/* Whether a string is a shared-memory size as Azure ML takes it: digits and
 * one of b, k, m, g ("16g"). */
bool aml_valid_shm_size(const char *s);

#endif
