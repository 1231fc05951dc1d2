/* cert.h — a client certificate for Entra ID (AZURE_CLIENT_CERTIFICATE_PATH):
 * its RSA private key and certificate read from one PEM file, and the signed
 * JWT client assertion made with them (shared/azureml/REFERENCE.md §4:
 * RS256, PKCS#1 v1.5, with the certificate's SHA-1 thumbprint as x5t).
 *
 * Messages name the file, never its content. */
#ifndef FLOW_AZUREML_CERT_H
#define FLOW_AZUREML_CERT_H

#include <stdbool.h>
#include <stddef.h>
#include <time.h>

struct aml_cert;

/* Reads path: a PEM file holding the private key (RSA; PKCS#8 or
 * traditional; encrypted with `password`, which may be NULL) and the
 * certificate, in either order.  NULL with a message naming the path when it
 * cannot be read, holds no key or no certificate, the key is not RSA, is
 * encrypted and no (or the wrong) password was given, or the two do not
 * belong together.  The file's bytes are wiped from memory once parsed. */
struct aml_cert *aml_cert_load(const char *path, const char *password, char *err, size_t errlen);
void aml_cert_free(struct aml_cert *c);

/* base64url(SHA-1(certificate DER)), the JWT header's x5t. */
const char *aml_cert_x5t(const struct aml_cert *c);

/* A client assertion: header {"alg":"RS256","typ":"JWT","x5t":…}, claims
 * aud = audience (the token URL), iss = sub = client_id, jti = a random
 * UUID, nbf = iat = now, exp = now + 600; signed.  Malloc'd (the caller
 * wipes it with wipe() before freeing), or NULL with a message. */
char *aml_cert_assertion(const struct aml_cert *c, const char *audience, const char *client_id, time_t now,
                         char *err, size_t errlen);

/* base64url without padding (RFC 7515 §2) of n bytes, malloc'd. */
char *aml_base64url(const unsigned char *data, size_t n);

/* A random (version 4) UUID, "xxxxxxxx-xxxx-4xxx-yxxx-xxxxxxxxxxxx", into
 * out[37]; false if the random generator failed. */
bool aml_uuid4(char out[37]);

#endif
