/* job_body.h — what a step becomes on Azure ML: the body of
 * `PUT …/jobs/{name}` for a command job (shared/azureml/REFERENCE.md §1.3),
 * and the job's name.  Plain data in, JSON text out; the test double checks
 * every body against Microsoft's published schema.
 *
 * Nothing here knows of Lua. */
#ifndef FLOW_AZUREML_JOB_BODY_H
#define FLOW_AZUREML_JOB_BODY_H

#include "azureml/settings.h"

#include <stddef.h>

enum aml_framework { AML_FRAMEWORK_NONE, AML_FRAMEWORK_PYTORCH, AML_FRAMEWORK_MPI, AML_FRAMEWORK_TENSORFLOW };

struct aml_tag {
    const char *key, *value;
};

/* An input or output of the job: ${{inputs.<name>}} / ${{outputs.<name>}}
 * in its command (REFERENCE.md §1.4). */
struct aml_data_binding {
    const char *name;
    const char *type;               /* "uri_file" or "uri_folder" */
    const char *uri;                /* azureml://datastores/<ds>/paths/<p>; NULL (an output): the
                                     * service's default path */
    const char *mode;               /* ReadOnlyMount, Download; ReadWriteMount, Upload */
};

/* One command job.  Optional strings are NULL; numbers ≤ 0 are left out. */
struct aml_job_spec {
    const char *display_name;       /* the step's name */
    const char *experiment;
    const char *command;            /* a shell command line */
    const char *code_id;            /* the snapshot's ARM id */
    const char *environment_id;     /* aml_environment_id's */
    const char *compute_id;         /* {workspace id}/computes/{cluster} */
    int instance_count;             /* num_nodes */
    const char *instance_type, *shm_size;
    enum aml_framework framework;
    int processes_per_node;         /* PyTorch, Mpi: processCountPerInstance */
    int worker_count;               /* TensorFlow: workerCount (default: instance_count) */
    int parameter_server_count;     /* TensorFlow */
    double timeout;                 /* seconds; limits.timeout */
    const struct aml_env_var *env;  /* environmentVariables */
    size_t n_env;
    const struct aml_tag *tags;     /* flow.run_id, flow.step, flow.fingerprint, … */
    size_t n_tags;
    const struct aml_data_binding *inputs, *outputs;
    size_t n_inputs, n_outputs;
    /* NULL, or a Sweep job's own fields as a JSON object (samplingAlgorithm,
     * searchSpace, objective, limits, earlyTermination: REFERENCE.md §1.8),
     * made by the caller: the command job becomes the sweep's trial. */
    const char *sweep_json;
};

/* {"properties": {"jobType": "Command", …}} as JSON text (malloc'd); with
 * spec->sweep_json, {"properties": {"jobType": "Sweep", "trial": {…}, …}}.
 * NULL only when sweep_json is not a JSON object. */
char *aml_job_body(const struct aml_job_spec *spec);

/* A name for attempt `attempt` of a step in a run: deterministic (a resumed
 * run finds the job it submitted before a crash) and valid for Azure ML:
 * "flow-<step, cleaned, ≤ 64 chars>-<12 hex digits of the run id, step and
 * fingerprint>", with "-a<N>" for a retry (a job name is never reused). */
char *aml_job_name(const char *run_id, const char *step, const char *fingerprint, int attempt);

/* The framework named in distributed_job{framework = …}, or NONE. */
enum aml_framework aml_framework_from_name(const char *name);

#endif
