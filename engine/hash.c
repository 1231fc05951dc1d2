/* hash.c — SHA-256 through OpenSSL's EVP interface. */
#include "hash.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define READ_CHUNK (64 * 1024)

struct hasher { EVP_MD_CTX *ctx; };

static EVP_MD *sha256_md;
static pthread_once_t sha256_once = PTHREAD_ONCE_INIT;

/* OpenSSL 3 looks an algorithm up by name on every EVP_sha256() init unless it
 * is fetched once; a tree of thousands of files makes that cost visible. */
static void fetch_sha256(void)
{
    sha256_md = EVP_MD_fetch(NULL, "SHA256", NULL);
}

/* A build of OpenSSL without SHA-256 (or a broken FIPS setup) is not something
 * the engine can work around, any more than running out of memory. */
static void no_sha256(const char *what)
{
    fprintf(stderr, "flow: SHA-256 is unavailable (OpenSSL %s failed)\n", what);
    abort();
}

static void hasher_start(struct hasher *h)
{
    if (EVP_DigestInit_ex(h->ctx, sha256_md, NULL) != 1) no_sha256("EVP_DigestInit_ex");
}

struct hasher *hasher_new(void)
{
    pthread_once(&sha256_once, fetch_sha256);
    if (!sha256_md) no_sha256("EVP_MD_fetch");
    struct hasher *h = xmalloc(sizeof *h);
    h->ctx = EVP_MD_CTX_new();
    if (!h->ctx) no_sha256("EVP_MD_CTX_new");
    hasher_start(h);
    return h;
}

void hasher_update(struct hasher *h, const void *data, size_t len)
{
    if (len && EVP_DigestUpdate(h->ctx, data, len) != 1) no_sha256("EVP_DigestUpdate");
}

void hasher_finish(struct hasher *h, char hex[SHA256_HEX_SIZE])
{
    static const char digits[] = "0123456789abcdef";
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    if (EVP_DigestFinal_ex(h->ctx, md, &n) != 1 || n != 32) no_sha256("EVP_DigestFinal_ex");
    for (unsigned int i = 0; i < n; i++) {
        hex[2 * i] = digits[md[i] >> 4];
        hex[2 * i + 1] = digits[md[i] & 15];
    }
    hex[2 * n] = '\0';
    hasher_start(h);
}

void hasher_copy(struct hasher *dst, const struct hasher *src)
{
    if (EVP_MD_CTX_copy_ex(dst->ctx, src->ctx) != 1) no_sha256("EVP_MD_CTX_copy_ex");
}

void hasher_free(struct hasher *h)
{
    if (!h) return;
    EVP_MD_CTX_free(h->ctx);
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
