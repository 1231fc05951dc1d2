/* client.h — the Azure ML client's insides, shared by the files of engine/azureml/
 * (the API is jobs.h's aml_client_*). */
#ifndef FLOW_AZUREML_CLIENT_H
#define FLOW_AZUREML_CLIENT_H

#include "azureml/jobs.h"

struct arm_call;
struct aml_code;
struct aml_datastore;

struct aml_client {
    struct loop *loop;
    const struct aml_settings *settings;
    struct http_client *http;
    struct aml_auth *auth;
    struct work_pool *pool;          /* the snapshot is scanned and hashed there */
    char *workspace_id;
    bool detach;
    struct arm_call *calls;          /* out or queued (arm.c) */
    size_t arm_active;               /* how many of them are out */
    struct aml_code *code;           /* the run's code snapshot, once asked for (code.c) */
    struct aml_datastore *datastores;/* those asked for (datastore.c) */
    struct aml_job *zombies;         /* jobs freed while a call was out (jobs.c) */
};

struct aml_job;
/* Frees the jobs whose owner let go while a call was out (aml_client_free). */
void aml_jobs_release_zombies(struct aml_client *c);

/* Frees the calls still listed, without calling back (aml_client_free). */
void arm_calls_release(struct aml_client *c);

#endif
