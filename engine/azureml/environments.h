/* environments.h — a workspace environment named "name@latest": its newest
 * version, as azure-ai-ml resolves it (`GET environments/{name}/versions?
 * $orderBy=createdtime desc&$top=1`), since a job's environmentId must name
 * a version.  Asked once per name before a run's steps start.
 *
 * Nothing here knows of Lua. */
#ifndef FLOW_AZUREML_ENVIRONMENTS_H
#define FLOW_AZUREML_ENVIRONMENTS_H

struct aml_client;

/* done(arg, id, NULL) with the newest version's ARM id, or done(arg, NULL,
 * why); always later from the loop. */
typedef void (*aml_env_fn)(void *arg, const char *id, const char *error);
void aml_environment_latest(struct aml_client *c, const char *name, aml_env_fn done, void *arg);

#endif
