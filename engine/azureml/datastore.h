/* datastore.h — a workspace datastore as flow moves data through it
 * (shared/azureml/REFERENCE.md §2.1):
 *
 *   GET  datastores/{name}              AzureBlob: account, container, endpoint, protocol
 *   POST datastores/{name}/listSecrets  AccountKey (Shared Key signing) or Sas
 *   → a blob container (blob.h)
 *
 * Asked once per name per run, by the first step that needs it; the others
 * wait on the same answer (shared.h).  settings' blob_endpoint, when set,
 * replaces the account's service URL (Azurite, sovereign clouds).  The key
 * or SAS goes into the container and is wiped here: it never reaches a
 * message.
 *
 * Nothing here knows of Lua. */
#ifndef FLOW_AZUREML_DATASTORE_H
#define FLOW_AZUREML_DATASTORE_H

#include "step_wait.h"

struct aml_client;
struct aml_datastore;
struct blob_container;

/* A wait for datastore `name`'s container: done(w, arg) once it is known or
 * failed, always later from the loop. */
struct step_wait *aml_datastore_wait(struct aml_client *c, const char *name, step_wait_done_fn done, void *arg);
/* After done: the container (the client's; valid while the client lives), or
 * NULL and why. */
struct blob_container *aml_datastore_wait_container(const struct step_wait *w);
const char *aml_datastore_wait_error(const struct step_wait *w);

/* With the client (client.c): stops what is in flight, frees every datastore. */
void aml_datastores_free(struct aml_datastore *list);

/* "https://acct.blob.core.windows.net/container" for a datastore's fields,
 * or blob_endpoint + "/container" when the settings override it (malloc'd). */
char *aml_datastore_container_url(const char *blob_endpoint, const char *protocol, const char *account,
                                  const char *endpoint, const char *container);

#endif
