/* hashcache.c — see hashcache.h.
 *
 * The cache file holds one entry per line, fields separated by one space and
 * the path last, because a path may itself hold spaces:
 *
 *   <sha256 hex> <size> <mtime_ns> <ctime_ns> <inode> <device> <hashed_at_ns> <path>
 *
 * Lines starting with '#' are comments; any other line that does not parse is
 * skipped.  A path holding a newline is hashed but never saved.
 *
 * When to trust an entry (the "racy git" rule): the stat must match and the
 * recorded mtime and ctime must both be strictly earlier than the moment the
 * content was read.  File timestamps come from the kernel's coarse clock, so a
 * file rewritten within the same tick as the hash was taken can keep the same
 * size, mtime and ctime; such an entry is hashed again on its next lookup, by
 * which time the tick is over.  ctime is checked as well as mtime because
 * utimensat() can put an old mtime on new content, but not an old ctime.
 *
 * Threads.  The run hashes large files and trees on work pool threads while
 * the loop's thread looks up small ones, so the table (entries, index, dirty,
 * files_read) is guarded by one mutex, held only for a lookup or an insert:
 * files are read and directories listed outside it. */
#include "hashcache.h"
#include "nofollow.h"
#include "commit.h"
#include "strmap.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct entry {
    char *path;
    char hex[SHA256_HEX_SIZE];
    struct file_stamp st;
    long long hashed_at_ns;        /* coarse wall clock just before the content was read */
};

struct hashcache {
    pthread_mutex_t mu;            /* guards everything below but `file` */
    char *file;
    struct entry *entries;
    size_t n, cap;
    struct strmap index;           /* path -> position in entries */
    bool dirty;
    size_t files_read;
};

/* The clock file timestamps are taken from, so "earlier than" compares like with like. */
static long long coarse_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME_COARSE, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* A file system that keeps whole seconds (ext4 with 128-byte inodes, FAT,
 * some network file systems) rounds a time down: a file rewritten later in
 * the second it was hashed in keeps the stamp it had.  A stamp without
 * nanoseconds is trusted only once the hash is a whole second younger. */
static long long stamp_grain(long long ns) { return ns % 1000000000LL == 0 ? 1000000000LL : 0; }

static bool entry_trusted(const struct entry *e, const struct file_stamp *now)
{
    return file_stamp_equal(&e->st, now) && e->st.mtime_ns + stamp_grain(e->st.mtime_ns) < e->hashed_at_ns &&
           e->st.ctime_ns + stamp_grain(e->st.ctime_ns) < e->hashed_at_ns;
}

static void remember(struct hashcache *hc, const char *path, const char *hex,
                     const struct file_stamp *st, long long hashed_at_ns)
{
    size_t i;
    if (!strmap_get(&hc->index, path, &i)) {
        ARRAY_GROW(hc->entries, hc->n, hc->cap);
        i = hc->n++;
        hc->entries[i].path = xstrdup(path);
        strmap_put(&hc->index, hc->entries[i].path, i);     /* (the index borrows the entry's) */
    }
    struct entry *e = &hc->entries[i];
    memcpy(e->hex, hex, SHA256_HEX_SIZE);
    e->st = *st;
    e->hashed_at_ns = hashed_at_ns;
    hc->dirty = true;
}

/* ---- loading ---------------------------------------------------------------- */

/* Decimal digits then one space.  By hand: strtoll's locale handling is most
 * of the cost of loading a large cache. */
static bool parse_unsigned(char **p, unsigned long long *out)
{
    char *s = *p;
    unsigned long long v = 0;
    if (*s < '0' || *s > '9') return false;
    for (; *s >= '0' && *s <= '9'; s++) {
        unsigned d = (unsigned)(*s - '0');
        if (v > (ULLONG_MAX - d) / 10) return false;
        v = v * 10 + d;
    }
    if (*s != ' ') return false;
    *p = s + 1;
    *out = v;
    return true;
}

static bool parse_signed(char **p, long long *out)
{
    bool negative = **p == '-';
    char *s = *p + negative;
    unsigned long long v;
    if (!parse_unsigned(&s, &v) || v > (unsigned long long)LLONG_MAX) return false;
    *p = s;
    *out = negative ? -(long long)v : (long long)v;
    return true;
}

/* Lowercase hex digits; a table, because two range tests per digit
 * mispredict on a random mix of digits and letters. */
static const bool hex_digit[256] = {
    ['0'] = 1, ['1'] = 1, ['2'] = 1, ['3'] = 1, ['4'] = 1, ['5'] = 1, ['6'] = 1, ['7'] = 1,
    ['8'] = 1, ['9'] = 1, ['a'] = 1, ['b'] = 1, ['c'] = 1, ['d'] = 1, ['e'] = 1, ['f'] = 1,
};

static bool parse_hex(char **p, char hex[SHA256_HEX_SIZE])
{
    for (int i = 0; i < SHA256_HEX_SIZE - 1; i++)       /* stops at the line's NUL too */
        if (!hex_digit[(unsigned char)(*p)[i]]) return false;
    if ((*p)[SHA256_HEX_SIZE - 1] != ' ') return false;
    memcpy(hex, *p, SHA256_HEX_SIZE - 1);
    hex[SHA256_HEX_SIZE - 1] = '\0';
    *p += SHA256_HEX_SIZE;
    return true;
}

/* One NUL-terminated line; false when it is not an entry. */
static bool parse_line(char *line, struct hashcache *hc)
{
    char hex[SHA256_HEX_SIZE];
    struct file_stamp st;
    long long hashed_at;
    char *p = line;
    if (!parse_hex(&p, hex) || !parse_signed(&p, &st.size) || !parse_signed(&p, &st.mtime_ns) ||
        !parse_signed(&p, &st.ctime_ns) || !parse_unsigned(&p, &st.ino) ||
        !parse_unsigned(&p, &st.dev) || !parse_signed(&p, &hashed_at) || *p == '\0')
        return false;
    remember(hc, p, hex, &st, hashed_at);
    return true;
}

struct hashcache *hashcache_load(const char *file)
{
    struct hashcache *hc = xcalloc(1, sizeof *hc);
    pthread_mutex_init(&hc->mu, NULL);
    hc->index.borrowed_keys = true;           /* each entry's path: one copy, not two */
    hc->file = xstrdup(file);
    size_t len;
    char *text = read_file(file, &len);
    if (!text) return hc;
    for (char *line = text; line < text + len;) {
        char *nl = memchr(line, '\n', (size_t)(text + len - line));
        if (!nl) break;                       /* a last line cut short: not an entry */
        *nl = '\0';
        if (*line != '#') parse_line(line, hc);
        line = nl + 1;
    }
    free(text);
    hc->dirty = false;
    return hc;
}

void hashcache_free(struct hashcache *hc)
{
    if (!hc) return;
    for (size_t i = 0; i < hc->n; i++) free(hc->entries[i].path);
    free(hc->entries);
    strmap_free(&hc->index);
    free(hc->file);
    pthread_mutex_destroy(&hc->mu);
    free(hc);
}

size_t hashcache_count(struct hashcache *hc)
{
    pthread_mutex_lock(&hc->mu);
    size_t n = hc->n;
    pthread_mutex_unlock(&hc->mu);
    return n;
}

size_t hashcache_files_read(struct hashcache *hc)
{
    pthread_mutex_lock(&hc->mu);
    size_t n = hc->files_read;
    pthread_mutex_unlock(&hc->mu);
    return n;
}

/* ---- hashing ---------------------------------------------------------------- */

/* Reads the file and records what it read with the stat of the open file, so
 * a change during the read shows up as a stat mismatch next time. */
static int hash_and_remember(struct hashcache *hc, const char *path, int extra_flags,
                             const atomic_bool *stop, char hex[SHA256_HEX_SIZE],
                             char *err, size_t errlen)
{
    long long hashed_at = coarse_now_ns();
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | extra_flags);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || hash_fd_until(fd, stop, hex) != 0) {
        errf(err, errlen, "cannot read %s: %s", path, strerror(errno));
        if (fd >= 0) close(fd);
        return -1;
    }
    close(fd);
    struct file_stamp stamp = file_stamp_of(&st);
    pthread_mutex_lock(&hc->mu);
    hc->files_read++;
    remember(hc, path, hex, &stamp, hashed_at);
    pthread_mutex_unlock(&hc->mu);
    return 0;
}

/* The trusted hash of the file at `path` as `now` stamps it, copied into hex. */
static bool lookup(struct hashcache *hc, const char *path, const struct file_stamp *now,
                   char hex[SHA256_HEX_SIZE])
{
    size_t i;
    pthread_mutex_lock(&hc->mu);
    bool hit = strmap_get(&hc->index, path, &i) && entry_trusted(&hc->entries[i], now);
    if (hit) memcpy(hex, hc->entries[i].hex, SHA256_HEX_SIZE);
    pthread_mutex_unlock(&hc->mu);
    return hit;
}

/* `st` is the caller's stat of the regular file at `path`: a hit costs nothing more. */
static int file_hash(struct hashcache *hc, const char *path, const struct stat *st, int extra_flags,
                     const atomic_bool *stop, char hex[SHA256_HEX_SIZE], char *err, size_t errlen)
{
    struct file_stamp now = file_stamp_of(st);
    if (lookup(hc, path, &now, hex)) return 0;
    return hash_and_remember(hc, path, extra_flags, stop, hex, err, errlen);
}


/* A symlink's target text; NULL with errno on failure. */
static char *read_link(const char *path, size_t size_hint)
{
    size_t cap = size_hint + 1 > 64 ? size_hint + 1 : 64;
    for (;;) {
        char *buf = xmalloc(cap);
        ssize_t n = readlink(path, buf, cap);
        if (n < 0) { free(buf); return NULL; }
        if ((size_t)n < cap) { buf[n] = '\0'; return buf; }
        free(buf);                          /* truncated: the link changed, try bigger */
        cap *= 2;
    }
}

struct tree_walk {
    struct hashcache *hc;
    const atomic_bool *stop;
    bool cached_only;              /* a file the cache does not vouch for ends the walk (1) */
    size_t budget;                 /* entries left to look at; at 0 the walk ends (1) */
    struct strbuf path;            /* the entry being looked at */
    size_t root_len;               /* relative paths start after path.buf[root_len] */
    char *err;
    size_t errlen;
};

static int tree_hash(struct tree_walk *w, char hex[SHA256_HEX_SIZE]);

/* Adds the line for w->path to h.  Sockets, FIFOs and devices have no
 * content to hash and are left out.  0, -1 with a message, or 1 when a
 * cached_only walk meets a file to read or runs out of budget. */
static int tree_entry(struct tree_walk *w, struct hasher *h)
{
    struct stat st;
    char hex[SHA256_HEX_SIZE];
    char *link = NULL;
    char type;
    if (w->budget == 0) return 1;
    w->budget--;
    if (lstat(w->path.buf, &st) != 0) {
        errf(w->err, w->errlen, "cannot read %s: %s", w->path.buf, strerror(errno));
        return -1;
    }
    if (S_ISREG(st.st_mode)) {
        type = 'f';
        if (w->cached_only) {
            struct file_stamp now = file_stamp_of(&st);
            if (!lookup(w->hc, w->path.buf, &now, hex)) return 1;
        } else if (file_hash(w->hc, w->path.buf, &st, O_NOFOLLOW, w->stop, hex, w->err, w->errlen) != 0) {
            return -1;
        }
    } else if (S_ISDIR(st.st_mode)) {
        type = 'd';
        int rc = tree_hash(w, hex);
        if (rc != 0) return rc;
    } else if (S_ISLNK(st.st_mode)) {
        type = 'l';
        if (!(link = read_link(w->path.buf, (size_t)st.st_size))) {
            errf(w->err, w->errlen, "cannot read link %s: %s", w->path.buf, strerror(errno));
            return -1;
        }
    } else {
        return 0;
    }
    const char *rel = w->path.buf + w->root_len + 1;   /* after descending: buf may have moved */
    hasher_update(h, &type, 1);
    hasher_update(h, " ", 1);
    hasher_update(h, link ? link : hex, strlen(link ? link : hex));
    hasher_update(h, " ", 1);
    hasher_update(h, rel, strlen(rel));
    hasher_update(h, "\n", 1);
    free(link);
    return 0;
}

/* The tree hash of the directory at w->path; w->path is as it was on return. */
static int tree_hash(struct tree_walk *w, char hex[SHA256_HEX_SIZE])
{
    size_t n = 0;
    char **names = dir_list(w->path.buf, &n);
    if (!names) {
        errf(w->err, w->errlen, "cannot read %s: %s", w->path.buf, strerror(errno));
        return -1;
    }
    struct hasher *h = hasher_new();
    size_t len = w->path.len;
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        sb_addc(&w->path, '/');
        sb_adds(&w->path, names[i]);
        rc = tree_entry(w, h);
        w->path.len = len;
        w->path.buf[len] = '\0';
    }
    if (rc == 0) hasher_finish(h, hex);
    hasher_free(h);
    dir_list_free(names, n);
    return rc;
}

/* max_entries 0: the whole tree, reading what the cache does not vouch for;
 * otherwise at most that many entries, all files cached, or 1. */
static int dir_hash(struct hashcache *hc, const char *path, const atomic_bool *stop, size_t max_entries,
                    char hex[SHA256_HEX_SIZE], char *err, size_t errlen)
{
    struct tree_walk w = { .hc = hc, .stop = stop, .cached_only = max_entries > 0,
                           .budget = max_entries ? max_entries : SIZE_MAX,
                           .path = STRBUF_INIT, .err = err, .errlen = errlen };
    size_t len = strlen(path);
    while (len > 0 && path[len - 1] == '/') len--;       /* "data/" and "data" share entries */
    sb_add(&w.path, path, len);
    w.root_len = len;
    int rc = tree_hash(&w, hex);
    sb_release(&w.path);
    return rc;
}

/* What `st` (path's, following links) says path is: a file or a folder;
 * -1 with a message for anything else. */
static int hashable_kind(const char *path, mode_t mode, enum hash_kind *kind, char *err, size_t errlen)
{
    if (S_ISREG(mode)) *kind = HASH_KIND_FILE;
    else if (S_ISDIR(mode)) *kind = HASH_KIND_DIRECTORY;
    else {
        errf(err, errlen, "cannot read %s: not a file or a directory", path);
        return -1;
    }
    return 0;
}

/* The stat of what hashcache_hash hashes; -1 with a message if it is not a
 * file or a directory. */
static int stat_hashable(const char *path, struct stat *st, enum hash_kind *kind,
                         char *err, size_t errlen)
{
    if (stat(path, st) != 0) {
        errf(err, errlen, "cannot read %s: %s", path, strerror(errno));
        return -1;
    }
    return hashable_kind(path, st->st_mode, kind, err, errlen);
}

static int hash_until(struct hashcache *hc, const char *path, const atomic_bool *stop,
                      char hex[SHA256_HEX_SIZE], enum hash_kind *kind, char *err, size_t errlen)
{
    struct stat st;
    if (stat_hashable(path, &st, kind, err, errlen) != 0) return -1;
    if (*kind == HASH_KIND_FILE) return file_hash(hc, path, &st, 0, stop, hex, err, errlen);
    return dir_hash(hc, path, stop, 0, hex, err, errlen);
}

int hashcache_hash(struct hashcache *hc, const char *path, char hex[SHA256_HEX_SIZE],
                   enum hash_kind *kind, char *err, size_t errlen)
{
    return hash_until(hc, path, NULL, hex, kind, err, errlen);
}

int hashcache_hash_cheap(struct hashcache *hc, const char *path, long long max_read,
                         size_t max_entries, char hex[SHA256_HEX_SIZE], enum hash_kind *kind,
                         char *err, size_t errlen)
{
    struct stat st;
    if (stat_hashable(path, &st, kind, err, errlen) != 0) return -1;
    struct file_stamp stamp = file_stamp_of(&st);
    return hashcache_hash_cheap_stamp(hc, path, &stamp, st.st_mode, max_read, max_entries, hex, kind, err, errlen);
}

int hashcache_hash_cheap_stamp(struct hashcache *hc, const char *path, const struct file_stamp *stamp, mode_t mode,
                               long long max_read, size_t max_entries, char hex[SHA256_HEX_SIZE],
                               enum hash_kind *kind, char *err, size_t errlen)
{
    if (hashable_kind(path, mode, kind, err, errlen) != 0) return -1;
    if (*kind == HASH_KIND_DIRECTORY)
        return max_entries ? dir_hash(hc, path, NULL, max_entries, hex, err, errlen) : 1;
    if (lookup(hc, path, stamp, hex)) return 0;
    if (stamp->size > max_read) return 1;
    return hash_and_remember(hc, path, 0, NULL, hex, err, errlen);
}

void hashcache_job_run(void *arg)
{
    struct hashcache_job *job = arg;
    job->rc = hash_until(job->hc, job->path, &job->cancel, job->hex, &job->kind,
                         job->err, sizeof job->err);
}

/* ---- saving and pruning ----------------------------------------------------- */

#define SAVE_CHUNK (64 * 1024)

/* The file's lines, written SAVE_CHUNK bytes at a time: the whole text of
 * 10,000 entries held at once was 1.6 MB of a no-op rerun's peak. */
static int write_entries(int fd, void *ctx)
{
    const struct hashcache *hc = ctx;
    struct strbuf sb = STRBUF_INIT;
    sb_adds(&sb, "# flow hash cache: sha256 size mtime_ns ctime_ns inode device hashed_at_ns path\n");
    int rc = 0;
    for (size_t i = 0; i < hc->n && rc == 0; i++) {
        const struct entry *e = &hc->entries[i];
        if (strchr(e->path, '\n')) continue;
        sb_addf(&sb, "%s %lld %lld %lld %llu %llu %lld %s\n", e->hex, e->st.size, e->st.mtime_ns,
                e->st.ctime_ns, e->st.ino, e->st.dev, e->hashed_at_ns, e->path);
        rc = sb_write_some(&sb, fd, SAVE_CHUNK, NULL);
    }
    return sb_write_last(&sb, fd, rc);
}

static int save_locked(struct hashcache *hc, char *err, size_t errlen)
{
    if (!hc->dirty) return 0;
    char *dir = path_parent(hc->file);
    int rc = nofollow_mkdir_p(dir, 0755, err, errlen);     /* it lives under .flow/ */
    free(dir);
    if (rc != 0) return -1;
    /* a cache: a copy a power loss took is only hashed again (and a torn
     * line, which does not parse, is skipped) */
    rc = nofollow_replace_with(hc->file, write_entries, hc, err, errlen);
    if (rc == 0) hc->dirty = false;
    return rc;
}

int hashcache_save(struct hashcache *hc, char *err, size_t errlen)
{
    pthread_mutex_lock(&hc->mu);
    int rc = save_locked(hc, err, errlen);
    pthread_mutex_unlock(&hc->mu);
    return rc;
}

static bool entry_current(const struct entry *e)
{
    struct stat st;
    if (stat(e->path, &st) != 0) return false;
    struct file_stamp now = file_stamp_of(&st);
    return file_stamp_equal(&e->st, &now);
}

static size_t prune_locked(struct hashcache *hc)
{
    size_t kept = 0;
    for (size_t i = 0; i < hc->n; i++) {
        if (entry_current(&hc->entries[i])) hc->entries[kept++] = hc->entries[i];
        else free(hc->entries[i].path);
    }
    size_t removed = hc->n - kept;
    if (removed == 0) return 0;
    hc->n = kept;
    strmap_free(&hc->index);                 /* positions moved: index them again */
    for (size_t i = 0; i < hc->n; i++) strmap_put(&hc->index, hc->entries[i].path, i);
    hc->dirty = true;
    return removed;
}

size_t hashcache_prune(struct hashcache *hc)
{
    pthread_mutex_lock(&hc->mu);
    size_t removed = prune_locked(hc);
    pthread_mutex_unlock(&hc->mu);
    return removed;
}
