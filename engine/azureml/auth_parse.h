/* auth_parse.h — what the credential chain (auth.c) reads from others: the
 * authority host as a user writes it, token endpoints' answers, the Azure
 * CLI's output and failures.  No loop, no network: tests/unit/test_aml_auth.c
 * checks each form directly.
 *
 * Parsed answers hold tokens: every string of them is wiped before it is
 * freed, and no message here holds anything of a body. */
#ifndef FLOW_AZUREML_AUTH_PARSE_H
#define FLOW_AZUREML_AUTH_PARSE_H

#include <stdbool.h>
#include <stddef.h>

/* How long `az account get-access-token` may take (a cold start of the CLI
 * takes seconds; azure-identity allows 10). */
#define AML_CLI_TIMEOUT_S 30.0

/* The authority URL from a host as a user writes it: "login.microsoftonline.us"
 * gets "https://", a trailing '/' goes.  Plain http:// only for a loopback
 * host (127.x.y.z, [::1], localhost: a test's server): a client secret never
 * travels in clear.  Malloc'd, or NULL with a message (to follow the name of
 * the setting, e.g. "must be https://"). */
char *aml_authority_url(const char *host, char *err, size_t errlen);

/* What may go into an Authorization header: 1 to 64 KiB of visible ASCII. */
bool aml_token_safe(const char *token);

/* Whether text is a JSON object (an answer from an Azure endpoint, not some
 * other server's page). */
bool aml_json_object(const char *text);

/* A token endpoint's 200 answer (Entra, IMDS, App Service, Azure ML):
 * access_token, and its expiry from expires_on (epoch seconds, a number or a
 * string of digits) or else now + expires_in (likewise).  *token malloc'd
 * (the caller wipes it).  False with a message that holds nothing of the body. */
bool aml_parse_token_response(const char *body, double now, char **token, double *expires_on,
                              char *err, size_t errlen);

/* `az account get-access-token --output json`: accessToken, and expires_on
 * (epoch seconds, newer CLIs) or else expiresOn ("%Y-%m-%d %H:%M:%S.%f",
 * local time).  Same contract as aml_parse_token_response. */
bool aml_parse_cli_output(const char *out, char **token, double *expires_on, char *err, size_t errlen);

/* What a failed `az` run means, into buf: not installed (exit 127; `why_no_mi`,
 * if not NULL, says why no managed identity was used instead), not logged in
 * (its stderr mentions `az login` or `az account set`), timed out, or the
 * first line of its stderr (capped at 200 bytes; withheld when it looks like
 * it holds a token). */
void aml_cli_failure(int exit_code, bool timed_out, const char *stderr_text, const char *why_no_mi,
                     char *buf, size_t buflen);

#endif
