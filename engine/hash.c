/* hash.c — SHA-256 through OpenSSL's SHA256_* functions.
 *
 * Not EVP: OpenSSL 3 initialises its configuration and default provider at
 * the first EVP digest, 0.8 ms of every flow start that hashes anything (a
 * tenth of a one-step `flow run`), while SHA256_Init runs the same code
 * (the same assembly, the same 1.9 GB/s here) with no set-up.  Those
 * functions are deprecated since OpenSSL 3.0 in favour of EVP, but every 3.x
 * has them; should one drop them, this file goes back to EVP_MD_fetch.  A
 * fingerprint is not a security boundary, so a FIPS provider's view of
 * SHA-256 does not matter here; TLS and HMAC stay on EVP (engine/azureml/). */
#include "crypto_lib.h"     /* first: it allows the deprecated SHA256_* */
#include "hash.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define READ_CHUNK (64 * 1024)

struct hasher { SHA256_CTX ctx; };

/* A failure of these is not something the engine can work around, any more
 * than running out of memory (they only fail on NULL arguments). */
static void no_sha256(const char *what)
{
    fprintf(stderr, "flow: SHA-256 is unavailable (OpenSSL %s failed)\n", what);
    abort();
}

struct hasher *hasher_new(void)
{
    const struct crypto_lib *ossl = crypto_lib();
    struct hasher *h = xmalloc(sizeof *h);
    if (ossl->SHA256_Init(&h->ctx) != 1) no_sha256("SHA256_Init");
    return h;
}

void hasher_update(struct hasher *h, const void *data, size_t len)
{
    const struct crypto_lib *ossl = crypto_lib();
    if (len && ossl->SHA256_Update(&h->ctx, data, len) != 1) no_sha256("SHA256_Update");
}

void hasher_finish(struct hasher *h, char hex[SHA256_HEX_SIZE])
{
    const struct crypto_lib *ossl = crypto_lib();
    static const char digits[] = "0123456789abcdef";
    unsigned char md[SHA256_DIGEST_LENGTH];
    if (ossl->SHA256_Final(md, &h->ctx) != 1) no_sha256("SHA256_Final");
    for (unsigned int i = 0; i < SHA256_DIGEST_LENGTH; i++) {
        hex[2 * i] = digits[md[i] >> 4];
        hex[2 * i + 1] = digits[md[i] & 15];
    }
    hex[2 * SHA256_DIGEST_LENGTH] = '\0';
    if (ossl->SHA256_Init(&h->ctx) != 1) no_sha256("SHA256_Init");
}

void hasher_copy(struct hasher *dst, const struct hasher *src)
{
    dst->ctx = src->ctx;                 /* a plain struct: its state is all in it */
}

void hasher_free(struct hasher *h)
{
    if (!h) return;
    wipe(&h->ctx, sizeof h->ctx);
    free(h);
}

void sha256_hex(const void *data, size_t len, char hex[SHA256_HEX_SIZE])
{
    struct hasher *h = hasher_new();
    hasher_update(h, data, len);
    hasher_finish(h, hex);
    hasher_free(h);
}

int hash_fd(int fd, char hex[SHA256_HEX_SIZE])
{
    return hash_fd_until(fd, NULL, hex);
}

int hash_fd_until(int fd, const atomic_bool *stop, char hex[SHA256_HEX_SIZE])
{
    char *chunk = xmalloc(READ_CHUNK);     /* off the stack: tree walks call this deep in recursion */
    struct hasher *h = hasher_new();
    int rc = 0;
    for (;;) {
        if (stop && atomic_load_explicit(stop, memory_order_relaxed)) {
            errno = ECANCELED;
            rc = -1;
            break;
        }
        ssize_t n = read(fd, chunk, READ_CHUNK);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) { rc = -1; break; }
        if (n == 0) break;
        hasher_update(h, chunk, (size_t)n);
    }
    int e = errno;
    if (rc == 0) hasher_finish(h, hex);
    hasher_free(h);
    free(chunk);
    errno = e;
    return rc;
}

int hash_file(const char *path, char hex[SHA256_HEX_SIZE], char *err, size_t errlen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0 || hash_fd(fd, hex) != 0) {
        errf(err, errlen, "cannot read %s: %s", path, strerror(errno));
        if (fd >= 0) close(fd);
        return -1;
    }
    close(fd);
    return 0;
}
