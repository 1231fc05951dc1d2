/* crypto_lib.h — OpenSSL's libcrypto, loaded the first time flow hashes
 * more than a few KiB (hash.c), signs or encodes something.
 *
 * Linked the usual way, libcrypto is mapped and relocated at every start of
 * flow: some 3,400 symbol relocations, 1.3 ms of `flow --version`'s 3.1 ms on
 * the machine of bench/RESULTS.md (an empty C program takes 0.8 ms, the same
 * program linked with -lcrypto 2.1 ms), for `--version`, `--help`, `flow
 * repl`, the shell completions and a no-op run, which never use it.  So flow opens libcrypto
 * with dlopen on first use, as it opens libcurl (azureml/curl_lib.h), and
 * calls it through this table (crypto_lib.c says how it is opened).  Each
 * pointer has the type of OpenSSL's declaration of the function
 * (__typeof__), so calls are checked as before, and the flow binary does not
 * link libcrypto: a direct call would not link.
 * The headers still come from libssl-dev through pkg-config; at run time
 * Debian's libssl3 package provides the library (libcurl needs it too, and
 * the process then has one copy: the same soname loads once).
 *
 * Wiping secrets is not here: util.h's wipe() is glibc's explicit_bzero. */
#ifndef FLOW_CRYPTO_LIB_H
#define FLOW_CRYPTO_LIB_H

/* SHA256_Init and its siblings are deprecated in OpenSSL 3; hash.c says why
 * it uses them.  Defined before any OpenSSL header: include this one first. */
#define OPENSSL_SUPPRESS_DEPRECATED
#include <openssl/bio.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/rsa.h>
#include <openssl/sha.h>
#include <openssl/x509.h>
#include <stdbool.h>
#include <stddef.h>

/* The soname of OpenSSL 3's libcrypto (Debian's libssl3). */
#define CRYPTO_LIB_SONAME "libcrypto.so.3"

#define CRYPTO_LIB_FUNCTIONS(X)                                                                             \
    X(SHA256_Init) X(SHA256_Update) X(SHA256_Final)                                                         \
    X(EVP_md5) X(EVP_sha1) X(EVP_sha256) X(EVP_MD_CTX_new) X(EVP_MD_CTX_free) X(EVP_DigestInit_ex)          \
    X(EVP_DigestUpdate) X(EVP_DigestFinal_ex) X(EVP_Digest) X(EVP_DigestSignInit) X(EVP_DigestSign)         \
    X(EVP_PKEY_CTX_set_rsa_padding) X(EVP_PKEY_get_base_id) X(EVP_PKEY_free) X(HMAC)                       \
    X(EVP_EncodeBlock) X(EVP_DecodeBlock) X(BIO_new_mem_buf) X(BIO_free) X(PEM_read_bio_PrivateKey)        \
    X(PEM_read_bio_X509) X(X509_check_private_key) X(X509_free) X(i2d_X509) X(RAND_bytes)                 \
    X(ERR_clear_error) X(CRYPTO_free)

struct crypto_lib {
#define CRYPTO_LIB_FIELD(name) __typeof__(&name) name;
    CRYPTO_LIB_FUNCTIONS(CRYPTO_LIB_FIELD)
#undef CRYPTO_LIB_FIELD
};

/* libcrypto's functions, loaded once per process, from any thread.  Never
 * NULL: a missing libcrypto (a broken installation; `make deps` installs it)
 * is a message naming it and exit status 127, as when the dynamic loader
 * could not start a flow linked with it. */
const struct crypto_lib *crypto_lib(void);

/* Whether crypto_lib() has loaded libcrypto: a cheap test, from any thread. */
bool crypto_lib_loaded(void);

/* Fills *out from the library `soname` (crypto_lib's, and tests'): 0, or -1
 * with a message naming the library and what is missing. */
int crypto_lib_open(const char *soname, struct crypto_lib *out, char *err, size_t errlen);

#endif
