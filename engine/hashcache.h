/* hashcache.h — content hashes of files and directory trees, remembered
 * between runs.  A file's hash is keyed by its path and trusted while its
 * stat (size, mtime, ctime, inode, device) is unchanged, so deciding that
 * nothing changed costs one stat() per file and reads nothing. */
#ifndef FLOW_HASHCACHE_H
#define FLOW_HASHCACHE_H

#include "hash.h"
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include <sys/types.h>

struct file_stamp;

enum hash_kind { HASH_KIND_FILE, HASH_KIND_DIRECTORY };

struct hashcache;

/* `file` is where the cache lives (e.g. ".flow/cache/hashes").  A missing or
 * unreadable file is an empty cache and a corrupt line is skipped: the cache
 * only ever saves work, it never decides anything. */
struct hashcache *hashcache_load(const char *file);
void hashcache_free(struct hashcache *hc);

/* Every function below is safe from any thread: the cache's table is locked
 * around each lookup and insert, never while a file is read. */

/* The content hash of a file, or the tree hash of a directory (entries sorted
 * bytewise, recursively; each adds "<f|d|l> <hash or link target> <relative
 * path>\n"; symlinks inside are not followed, a top-level one is).
 * -1 with a message naming the path when it is missing or unreadable. */
int hashcache_hash(struct hashcache *hc, const char *path, char hex[SHA256_HEX_SIZE],
                   enum hash_kind *kind, char *err, size_t errlen);

/* The limits the loop's thread keeps to (measured on the 2-core reference
 * machine: SHA-256 of a page-cached file runs at about 1.4 GB/s, so 1 MiB
 * holds the loop for about 0.7 ms, and a 64 KiB file (43 us) is cheaper
 * there than a pool round trip, about 60 us; a folder of at most 256
 * entries, every file cached, is a stat each, about 0.3 ms in all). */
#define HASHCACHE_LOOP_MAX_READ (1024 * 1024)
#define HASHCACHE_LOOP_MAX_ENTRIES 256

/* What the loop's thread can afford: reading at most max_read bytes of a
 * file, and stat-ing at most max_entries entries of a tree.  0 with the hash
 * (a trusted entry or a small file read now; a tree of at most max_entries
 * entries whose files the cache all vouches for), 1 when only a longer read
 * or walk can tell (hash it with a hashcache_job), -1 with a message as
 * hashcache_hash.  (The loop passes HASHCACHE_LOOP_MAX_*.) */
int hashcache_hash_cheap(struct hashcache *hc, const char *path, long long max_read,
                         size_t max_entries, char hex[SHA256_HEX_SIZE], enum hash_kind *kind,
                         char *err, size_t errlen);
/* The same with path's stamp and mode (following links) as the caller
 * took them a moment ago (stat_prefetch.h). */
int hashcache_hash_cheap_stamp(struct hashcache *hc, const char *path, const struct file_stamp *stamp, mode_t mode,
                               long long max_read, size_t max_entries, char hex[SHA256_HEX_SIZE],
                               enum hash_kind *kind, char *err, size_t errlen);

/* hashcache_hash as a work pool job: work_submit(pool, hashcache_job_run, done, job).
 * hc and path must outlive the job; setting `cancel` (from any thread) stops
 * the read at its next 64 KiB chunk, and the job ends with rc -1 and
 * "cannot read PATH: Operation canceled". */
struct hashcache_job {
    struct hashcache *hc;
    const char *path;
    atomic_bool cancel;
    int rc;                        /* out: 0 or -1 (then err says why) */
    enum hash_kind kind;
    char hex[SHA256_HEX_SIZE];
    char err[1024];
};
void hashcache_job_run(void *job);

/* Writes the cache atomically (creating its directory) if anything changed
 * since it was loaded or saved; -1 with a message naming the file. */
int hashcache_save(struct hashcache *hc, char *err, size_t errlen);

/* Drops entries whose file is gone or whose stat changed; returns how many. */
size_t hashcache_prune(struct hashcache *hc);

size_t hashcache_count(struct hashcache *hc);
/* Files actually read since the cache was loaded (what a hit avoids). */
size_t hashcache_files_read(struct hashcache *hc);

#endif
