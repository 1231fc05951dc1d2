/* auth.h — Entra ID tokens for Azure Resource Manager, as
 * DefaultAzureCredential finds them (shared/azureml/REFERENCE.md §4).
 *
 * The chain, tried in this order; the first whose variables are set is the
 * one used (a set-but-failing credential is an error, as in azure-identity's
 * EnvironmentCredential, not a silent fall-through):
 *   1. client secret       AZURE_TENANT_ID, AZURE_CLIENT_ID, AZURE_CLIENT_SECRET
 *   2. client certificate  AZURE_TENANT_ID, AZURE_CLIENT_ID, AZURE_CLIENT_CERTIFICATE_PATH (PEM:
 *                          key + certificate; AZURE_CLIENT_CERTIFICATE_PASSWORD for an encrypted key):
 *                          an RS256 JWT assertion with x5t, signed with OpenSSL
 *   3. workload identity   AZURE_FEDERATED_TOKEN_FILE (+ AZURE_TENANT_ID, AZURE_CLIENT_ID)
 *   4. AML compute         MSI_ENDPOINT, MSI_SECRET
 *   5. managed identity    IDENTITY_ENDPOINT (+ IDENTITY_HEADER), else IMDS (IMDS_ENDPOINT or
 *                          169.254.169.254, probed with a short timeout)
 *   6. Azure CLI           `az account get-access-token --output json --resource …`
 * AZURE_AUTHORITY_HOST (or the configuration's authority_host) picks the cloud.
 *
 * Tokens are cached in memory, refreshed five minutes before they expire,
 * and again when the caller reports a 401 (aml_auth_invalidate).  Concurrent
 * requests for a token share one fetch.  No secret or token ever goes into a
 * message: errors name the credential and the variable, never its value.
 *
 * Nothing here knows of Lua. */
#ifndef FLOW_AZUREML_AUTH_H
#define FLOW_AZUREML_AUTH_H

#include "azureml/http.h"
#include "loop.h"

#include <stdbool.h>
#include <stddef.h>

struct aml_auth;

enum aml_credential_kind {
    AML_CRED_NONE,
    AML_CRED_CLIENT_SECRET,
    AML_CRED_CLIENT_CERTIFICATE,
    AML_CRED_WORKLOAD_IDENTITY,
    AML_CRED_AML_COMPUTE,
    AML_CRED_MANAGED_IDENTITY,
    AML_CRED_AZURE_CLI,
};

struct aml_auth_options {
    const char *authority_host;   /* e.g. "https://login.microsoftonline.com"; NULL: AZURE_AUTHORITY_HOST or that */
    const char *resource;         /* e.g. "https://management.azure.com"; NULL: that */
    /* The environment to read (NULL-terminated "NAME=value"); NULL: environ.
     * Tests hand their own. */
    char *const *envp;
};

/* Picks the credential from the environment.  NULL with a message (naming
 * the variable, never a value) when one is half set or unreadable, e.g. a
 * certificate file that holds no key. */
struct aml_auth *aml_auth_new(struct loop *loop, struct http_client *http, const struct aml_auth_options *opt,
                              char *err, size_t errlen);
void aml_auth_free(struct aml_auth *a);

enum aml_credential_kind aml_auth_kind(const struct aml_auth *a);
/* "client secret (AZURE_CLIENT_ID=…)", for `flow azureml whoami`: which
 * credential and its non-secret identity (tenant, client id, file path). */
const char *aml_auth_describe(const struct aml_auth *a);

/* done(arg, token, NULL) with a bearer token valid for at least a minute, or
 * done(arg, NULL, message).  Always called later from the loop (a cached
 * token too).  The token string lives until the next call into aml_auth. */
typedef void (*aml_token_fn)(void *arg, const char *token, const char *error);
void aml_auth_get_token(struct aml_auth *a, aml_token_fn done, void *arg);
/* Pending callbacks with this arg are dropped (their waiter went away). */
void aml_auth_forget(struct aml_auth *a, void *arg);
/* The server refused the token (401): the next get fetches a new one. */
void aml_auth_invalidate(struct aml_auth *a);
/* Seconds until the cached token expires (< 0: none cached). */
double aml_auth_expires_in(const struct aml_auth *a);

#endif
