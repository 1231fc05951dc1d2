/* auth.h — Entra ID tokens for Azure Resource Manager, as
 * DefaultAzureCredential finds them (shared/azureml/REFERENCE.md §4).
 *
 * The chain, tried in this order; the first whose variables are set is the
 * one used (a set-but-failing credential is an error, as in azure-identity's
 * EnvironmentCredential, not a silent fall-through).  The variable in the
 * middle column picks the credential; the others in parentheses must then be
 * set too, or aml_auth_new fails naming the one missing.  An empty variable
 * counts as unset.
 *   1. client secret       AZURE_CLIENT_SECRET (+ AZURE_TENANT_ID, AZURE_CLIENT_ID)
 *   2. client certificate  AZURE_CLIENT_CERTIFICATE_PATH (+ AZURE_TENANT_ID, AZURE_CLIENT_ID; PEM:
 *                          key + certificate; AZURE_CLIENT_CERTIFICATE_PASSWORD for an encrypted key):
 *                          an RS256 JWT assertion with x5t, signed with OpenSSL; the file is read
 *                          by aml_auth_new
 *   3. workload identity   AZURE_FEDERATED_TOKEN_FILE (+ AZURE_TENANT_ID, AZURE_CLIENT_ID), read
 *                          afresh at each fetch (it is rotated)
 *   4. AML compute         MSI_ENDPOINT and MSI_SECRET (MSI_SECRET alone is an error; MSI_ENDPOINT
 *                          alone, Cloud Shell's, is passed over: its az login serves)
 *   5. managed identity    IDENTITY_ENDPOINT (+ IDENTITY_HEADER), else IMDS (IMDS_ENDPOINT or
 *                          169.254.169.254) when nothing above is set: see AML_CRED_NONE
 *   6. Azure CLI           `az account get-access-token --output json --resource …`
 * AZURE_CLIENT_ID alone names a user-assigned identity for 4 and 5.
 * AZURE_AUTHORITY_HOST (or the configuration's authority_host) picks the
 * cloud for 1–3: "login.microsoftonline.us" or an https:// URL (http:// for
 * a loopback test server only).
 *
 * Tokens are cached in memory, refreshed five minutes before they expire,
 * and again when the caller reports a 401 (aml_auth_invalidate).  Concurrent
 * requests for a token share one fetch.  No secret or token ever goes into a
 * message: errors name the credential and the variable, never its value
 * (ids and file paths are not secrets), e.g.
 *   client secret credential (AZURE_CLIENT_ID=…): invalid_client: AADSTS7000215: Invalid client
 *   secret provided. … (HTTP 401, x-ms-request-id …)
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
    /* Nothing configured, and no token fetched yet.  The first fetch asks
     * IMDS (1 s to connect, no retry): a token settles the kind on
     * AML_CRED_MANAGED_IDENTITY for good; no answer, 400 (no identity
     * assigned), 404 or an answer that is not JSON settles it on
     * AML_CRED_AZURE_CLI, and az is run at once; a busy IMDS (408, 429, 5xx)
     * is asked again with retries; any other error from IMDS is that fetch's
     * error, and the next fetch asks again. */
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
 * certificate file that holds no key.  With nothing set it succeeds (kind
 * AML_CRED_NONE): flow needs no credential until it dispatches.  http is
 * used for every request but IMDS's (a client of its own, for the short
 * connect timeout). */
struct aml_auth *aml_auth_new(struct loop *loop, struct http_client *http, const struct aml_auth_options *opt,
                              char *err, size_t errlen);
/* A fetch in flight is cancelled (no callback is called) and a running az
 * killed.  Free it before its http client.  May be called from a done callback. */
void aml_auth_free(struct aml_auth *a);

enum aml_credential_kind aml_auth_kind(const struct aml_auth *a);
/* For `flow azureml whoami`: which credential and its non-secret identity,
 * one of "client secret (tenant T, client C)", "client certificate (PATH,
 * tenant T, client C)", "workload identity (token file PATH, tenant T,
 * client C)", "Azure ML compute identity (MSI_ENDPOINT[, client C])",
 * "managed identity (IDENTITY_ENDPOINT[, client C])", "managed identity
 * (IMDS[, client C])", "Azure CLI", or before AML_CRED_NONE is settled
 * "managed identity (IMDS) or else Azure CLI: not tried yet".  Valid while
 * aml_auth_kind stays the same. */
const char *aml_auth_describe(const struct aml_auth *a);

/* done(arg, token, NULL) with a bearer token valid for at least a minute, or
 * done(arg, NULL, message).  Always called later from the loop (a cached
 * token too), in the order of the gets.  The token string lives until the
 * next call into aml_auth.  A refresh that fails while the cached token
 * still has a minute left hands out the cached token; without one, every
 * waiter of that fetch gets the message.  done may call any aml_auth
 * function, aml_auth_free included (the waiters after it are then dropped). */
typedef void (*aml_token_fn)(void *arg, const char *token, const char *error);
void aml_auth_get_token(struct aml_auth *a, aml_token_fn done, void *arg);
/* Pending callbacks with this arg are dropped (their waiter went away). */
void aml_auth_forget(struct aml_auth *a, void *arg);
/* The server refused the token (401): the next get fetches a new one. */
void aml_auth_invalidate(struct aml_auth *a);
/* Seconds until the cached token expires (< 0: none cached). */
double aml_auth_expires_in(const struct aml_auth *a);

#endif
