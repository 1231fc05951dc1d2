/* hash.h — SHA-256 as lowercase hex: an incremental hasher, one-shot hashing
 * of a buffer, and streaming a file through the digest. */
#ifndef FLOW_HASH_H
#define FLOW_HASH_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#define SHA256_HEX_SIZE 65          /* 64 hex digits and a NUL */
#define SHA256_SIZE 32              /* the digest's bytes */

/* Up to this many bytes a hasher keeps what it is given, to hash it at the
 * end with libmd while the process's small budget lasts; past them OpenSSL
 * takes over (hash.c says why). */
#define HASHER_SMALL (8 * 1024)

struct hasher;

/* Never NULL: like xmalloc, a missing SHA-256 implementation aborts. */
struct hasher *hasher_new(void);
void hasher_update(struct hasher *h, const void *data, size_t len);
/* Writes the digest of everything added and starts over (the hasher is reusable). */
void hasher_finish(struct hasher *h, char hex[SHA256_HEX_SIZE]);
void hasher_finish_md(struct hasher *h, unsigned char md[SHA256_SIZE]);     /* the digest's bytes */
void hasher_free(struct hasher *h);
/* Makes dst continue from where src is: what was added to src counts for
 * both (SHA-256's state after a shared prefix, hashed once). */
void hasher_copy(struct hasher *dst, const struct hasher *src);

void sha256_hex(const void *data, size_t len, char hex[SHA256_HEX_SIZE]);
void sha256_md(const void *data, size_t len, unsigned char md[SHA256_SIZE]);
/* A digest's bytes as the hex this file writes, and back: false for any text
 * but 64 lowercase hex digits (so two digests' texts are equal exactly when
 * their bytes are). */
void sha256_to_hex(const unsigned char md[SHA256_SIZE], char hex[SHA256_HEX_SIZE]);
bool sha256_from_hex(const char *hex, unsigned char md[SHA256_SIZE]);
/* Sets what libmd may still hash in this process, in bytes (tests: 0 makes
 * every hash OpenSSL's, SIZE_MAX every small one libmd's). */
void hash_set_small_budget(size_t bytes);

/* Reads fd to its end in 64 KiB chunks.  -1 with errno set on a read error. */
int hash_fd(int fd, char hex[SHA256_HEX_SIZE]);
/* The same, stopping with errno ECANCELED at the next chunk once *stop is set
 * (from any thread); stop may be NULL.  Safe from any thread. */
int hash_fd_until(int fd, const atomic_bool *stop, char hex[SHA256_HEX_SIZE]);
/* -1 with "cannot read PATH: reason" in err. */
int hash_file(const char *path, char hex[SHA256_HEX_SIZE], char *err, size_t errlen);

#endif
