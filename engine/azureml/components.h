/* components.h — a component version registered in the workspace: what each
 * child job of a pipeline job names as its `componentId`
 * (shared/azureml/REFERENCE.md §1.7).  `PUT components/{name}/versions/
 * {version}` with the command component's spec (the az ml CLI's component
 * YAML, as JSON).  Versions are immutable: the caller names a version after
 * the spec's content, so registering the same step twice is answered with
 * the version that is there, and a changed step gets a new version.
 *
 * Nothing here knows of Lua. */
#ifndef FLOW_AZUREML_COMPONENTS_H
#define FLOW_AZUREML_COMPONENTS_H

struct aml_client;

/* done(arg, id, NULL) with the version's ARM id, or done(arg, NULL, why);
 * always later from the loop.  body_json: the request's body,
 * {"properties": {"componentSpec": …, …}}, made by the caller as a pipeline
 * job's body is (stdlib/flow/compile.lua). */
typedef void (*aml_component_fn)(void *arg, const char *id, const char *error);
void aml_component_register(struct aml_client *c, const char *name, const char *version, const char *body_json,
                            aml_component_fn done, void *arg);

#endif
