/* hash.c — SHA-256: libmd for a process's first few small hashes, OpenSSL
 * for the rest.
 *
 * OpenSSL's SHA-256 (SHA-NI here) is ten times as fast as libmd's C: 0.29
 * against 2.9 µs for a fingerprint's 300 bytes, 1.2 GB/s against 120 MB/s.
 * But loading libcrypto costs 1.3 ms and 2.2 M instructions (crypto_lib.h),
 * a fifth of a one-step no-op `flow run`, which hashes four strings of a few
 * hundred bytes.  So a process hashes with libmd (BSD's message digest
 * functions, Debian's libmd0, which dpkg itself needs; a 30 KB library linked
 * at start) until what it hashed that way would have cost about as much as
 * loading libcrypto — SMALL_BUDGET bytes, each call counted 64 bytes more —
 * and with OpenSSL from then on, or as soon as libcrypto is loaded anyway.
 * Whatever the run, that costs at most about twice what the better of the two
 * would have.  A hasher keeps its first HASHER_SMALL bytes, and the first byte
 * past them hands everything to OpenSSL: a large file or value never waits on
 * libmd.  Both are SHA-256, byte for byte (test_util.c checks each path
 * against OpenSSL and libmd alone at every length around the switch).
 *
 * OpenSSL through SHA256_*, not EVP: OpenSSL 3 initialises its configuration
 * and default provider at the first EVP digest (0.8 ms), while SHA256_Init
 * runs the same code with no set-up.  Those functions are deprecated since
 * OpenSSL 3.0 in favour of EVP, but every 3.x has them; should one drop
 * them, this file goes back to EVP_MD_fetch.  A fingerprint is not a
 * security boundary, so a FIPS provider's view of SHA-256 does not matter
 * here; TLS and HMAC stay on EVP (engine/azureml/). */
#include "crypto_lib.h"     /* first: it allows the deprecated SHA256_* */
#include "hash.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <sha2.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define READ_CHUNK (64 * 1024)
#define SMALL_BUDGET (128 * 1024)      /* libmd's ~1 ms: what loading libcrypto costs */
#define CALL_COST 64                   /* a call's own cost, in bytes hashed */

/* What libmd may still hash in this process (hash_set_small_budget). */
static atomic_size_t small_budget = SMALL_BUDGET;

struct hasher {
    bool big;                          /* OpenSSL's: `ctx` has all that was added */
    bool keeps;                        /* has `small` (not one made after libcrypto was loaded) */
    size_t n_small;                    /* while not big: the bytes added so far, in `small` */
    SHA256_CTX ctx;
    unsigned char small[];             /* HASHER_SMALL bytes when `keeps` */
};

/* A failure of these is not something the engine can work around, any more
 * than running out of memory (they only fail on NULL arguments). */
static void no_sha256(const char *what)
{
    fprintf(stderr, "flow: SHA-256 is unavailable (OpenSSL %s failed)\n", what);
    abort();
}

/* From here on OpenSSL hashes h: first the n bytes of `kept`. */
static void go_big(struct hasher *h, const unsigned char *kept, size_t n)
{
    const struct crypto_lib *ossl = crypto_lib();
    if (ossl->SHA256_Init(&h->ctx) != 1) no_sha256("SHA256_Init");
    if (n && ossl->SHA256_Update(&h->ctx, kept, n) != 1) no_sha256("SHA256_Update");
    h->big = true;
}

struct hasher *hasher_new(void)
{
    bool keeps = !crypto_lib_loaded();      /* else OpenSSL is there, and faster: nothing to keep */
    struct hasher *h = xmalloc(sizeof *h + (keeps ? HASHER_SMALL : 0));
    h->big = false;
    h->keeps = keeps;
    h->n_small = 0;
    if (!keeps) go_big(h, NULL, 0);
    return h;
}

void hasher_update(struct hasher *h, const void *data, size_t len)
{
    if (!h->big && len <= HASHER_SMALL - h->n_small) {
        if (len) memcpy(h->small + h->n_small, data, len);
        h->n_small += len;
        return;
    }
    if (!h->big) go_big(h, h->small, h->n_small);
    if (len && crypto_lib()->SHA256_Update(&h->ctx, data, len) != 1) no_sha256("SHA256_Update");
}

_Static_assert(SHA256_SIZE == SHA256_DIGEST_LENGTH, "a SHA-256 digest is 32 bytes");

void sha256_to_hex(const unsigned char md[SHA256_SIZE], char hex[SHA256_HEX_SIZE])
{
    static const char digits[] = "0123456789abcdef";
    for (unsigned int i = 0; i < SHA256_SIZE; i++) {
        hex[2 * i] = digits[md[i] >> 4];
        hex[2 * i + 1] = digits[md[i] & 15];
    }
    hex[2 * SHA256_SIZE] = '\0';
}

bool sha256_from_hex(const char *hex, unsigned char md[SHA256_SIZE])
{
    /* 1 + a digit's value; 0 for any other byte (the NUL too) */
    static const unsigned char value_1[256] = {
        ['0'] = 1, ['1'] = 2, ['2'] = 3, ['3'] = 4, ['4'] = 5, ['5'] = 6, ['6'] = 7, ['7'] = 8, ['8'] = 9,
        ['9'] = 10, ['a'] = 11, ['b'] = 12, ['c'] = 13, ['d'] = 14, ['e'] = 15, ['f'] = 16,
    };
    const unsigned char *h = (const unsigned char *)hex;
    for (size_t k = 0; k < 2 * SHA256_SIZE; k += 2) {
        unsigned hi = value_1[h[k]];
        unsigned lo = hi ? value_1[h[k + 1]] : 0;     /* (not past a NUL) */
        if (!lo) return false;
        md[k / 2] = (unsigned char)((hi - 1) << 4 | (lo - 1));
    }
    return h[2 * SHA256_SIZE] == '\0';
}

void hash_set_small_budget(size_t bytes)
{
    atomic_store(&small_budget, bytes);
}

/* Whether libmd hashes these len bytes: while the budget lasts and libcrypto
 * is not loaded (then OpenSSL is there, and faster). */
static bool take_small_budget(size_t len)
{
    if (crypto_lib_loaded()) return false;
    size_t cost = len + CALL_COST, left = atomic_load(&small_budget);
    while (left >= cost)
        if (atomic_compare_exchange_weak(&small_budget, &left, left - cost)) return true;
    return false;
}

/* SHA-256 of a small buffer: libmd's, or OpenSSL's once the budget is spent. */
static void small_sha256_md(const void *data, size_t len, unsigned char md[SHA256_SIZE])
{
    if (take_small_budget(len)) {
        SHA2_CTX ctx;
        SHA256Init(&ctx);
        SHA256Update(&ctx, data, len);
        SHA256Final(md, &ctx);
        wipe(&ctx, sizeof ctx);            /* what was hashed may have been a secret's text */
    } else {
        /* (not OpenSSL's SHA256(): in OpenSSL 3 it is an EVP digest, see above) */
        const struct crypto_lib *ossl = crypto_lib();
        SHA256_CTX ctx;
        if (ossl->SHA256_Init(&ctx) != 1 || ossl->SHA256_Update(&ctx, data, len) != 1 ||
            ossl->SHA256_Final(md, &ctx) != 1)
            no_sha256("SHA256_*");
        wipe(&ctx, sizeof ctx);
    }
}

void hasher_finish(struct hasher *h, char hex[SHA256_HEX_SIZE])
{
    unsigned char md[SHA256_SIZE];
    hasher_finish_md(h, md);
    sha256_to_hex(md, hex);
}

void hasher_finish_md(struct hasher *h, unsigned char md[SHA256_SIZE])
{
    if (h->big) {
        if (crypto_lib()->SHA256_Final(md, &h->ctx) != 1) no_sha256("SHA256_Final");
    } else {
        small_sha256_md(h->small, h->n_small, md);
    }
    if (h->keeps) wipe(h->small, h->n_small);
    h->big = false;                    /* and reusable: empty again */
    h->n_small = 0;
    if (!h->keeps || crypto_lib_loaded()) go_big(h, NULL, 0);
}

void hasher_copy(struct hasher *dst, const struct hasher *src)
{
    dst->n_small = 0;
    if (src->big) {
        dst->big = true;
        dst->ctx = src->ctx;             /* a plain struct: its state is all in it */
    } else if (dst->keeps) {
        dst->big = false;
        dst->n_small = src->n_small;
        memcpy(dst->small, src->small, src->n_small);
    } else {
        go_big(dst, src->small, src->n_small);
    }
}

void hasher_free(struct hasher *h)
{
    if (!h) return;
    /* what was hashed may have been a secret's text: none of it stays in freed memory */
    if (h->big) wipe(&h->ctx, sizeof h->ctx);
    if (h->keeps) wipe(h->small, h->n_small);     /* (hasher_finish wiped what it hashed) */
    free(h);
}

void sha256_md(const void *data, size_t len, unsigned char md[SHA256_SIZE])
{
    if (len <= HASHER_SMALL) {
        small_sha256_md(data, len, md);
        return;
    }
    struct hasher *h = hasher_new();
    hasher_update(h, data, len);
    hasher_finish_md(h, md);
    hasher_free(h);
}

void sha256_hex(const void *data, size_t len, char hex[SHA256_HEX_SIZE])
{
    unsigned char md[SHA256_SIZE];
    sha256_md(data, len, md);
    sha256_to_hex(md, hex);
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
