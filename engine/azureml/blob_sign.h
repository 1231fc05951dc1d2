/* blob_sign.h — Azure Blob Storage's Shared Key: the Authorization header of
 * a request signed with the storage account's key (HMAC-SHA256 over the
 * service's StringToSign: the method, the standard headers in their order,
 * the x-ms-* headers sorted, the account and path, the query's parameters
 * sorted and decoded).  blob.c signs each attempt with it as it starts. */
#ifndef FLOW_AZUREML_BLOB_SIGN_H
#define FLOW_AZUREML_BLOB_SIGN_H

#include <stddef.h>

/* The Shared Key Authorization header value ("SharedKey acct:base64sig") for
 * a request, from its method, URL (path and query as sent), and headers
 * ("Name: value" lines, NULL-terminated: Content-Length, Content-MD5,
 * Content-Type, Range, x-ms-*).  key_raw is the decoded account key.
 * malloc'd, or NULL when the URL cannot be parsed. */
char *blob_shared_key(const char *account, const unsigned char *key_raw, size_t key_len, const char *method,
                      const char *url, const char *const *headers);

/* Now as "Sun, 06 Nov 1994 08:49:37 GMT" (x-ms-date), whatever the locale. */
void blob_rfc1123_now(char out[40]);

#endif
