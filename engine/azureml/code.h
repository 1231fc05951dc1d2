/* code.h — the project as an Azure ML code asset, which every job of the run
 * names as its codeId (shared/azureml/REFERENCE.md §2.2, as azure-ai-ml does
 * it):
 *
 *   scan + hash (snapshot.h, on the work pool)
 *   → GET codes/{name}/versions?hash=…&hashVersion=202208   found: reuse it, upload nothing
 *   → POST codes/{name}/versions/{version}/startPendingUpload  a container SAS
 *   → each file as a blob through blob.c (Put Blob with Content-MD5; Put
 *     Block + Put Block List above BLOB_BLOCK_THRESHOLD), a few at once,
 *     files read as they are sent; a blob already there is not sent again
 *   → the indicator file's metadata (upload_status=completed, name, version)
 *   → PUT codes/{name}/versions/{version}   → its ARM id
 *
 * Once per run: the first step that asks starts it, the others wait on the
 * same result.  The name is "flow-<project directory>", the version the
 * first 16 hex digits of the content hash, so a snapshot already registered
 * by flow or by the SDK from the same files is found and reused.  The SAS is
 * a secret: it never reaches a message (URLs in messages lose their query).
 *
 * Nothing here knows of Lua. */
#ifndef FLOW_AZUREML_CODE_H
#define FLOW_AZUREML_CODE_H

#include "step_wait.h"

#include <stddef.h>

struct aml_client;
struct aml_code;

/* A wait for the run's code asset of the project at `root` (every call of a
 * run must name the same root).  done(w, arg) once it is registered or
 * failed, always later from the loop. */
struct step_wait *aml_code_wait(struct aml_client *c, const char *root, step_wait_done_fn done, void *arg);
/* After done: the code version's ARM id, or NULL and the reason. */
const char *aml_code_wait_id(const struct step_wait *w);
const char *aml_code_wait_error(const struct step_wait *w);

/* With the client (client.c): stops what is in flight. */
void aml_code_free(struct aml_code *code);

#endif
