/* util.h — allocation that never returns NULL, growable strings and arrays,
 * and the few file-system helpers every part of the engine needs. */
#ifndef FLOW_UTIL_H
#define FLOW_UTIL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Out of memory is not a condition the engine can recover from: print and abort. */
void out_of_memory(size_t n) __attribute__((noreturn));
void *xmalloc(size_t n);
void *xcalloc(size_t count, size_t size);
/* xcalloc's zeros written at once, for a large block whose every page is
 * read before it is written (a hash table's slots, an array cleared slot by
 * slot).  calloc leaves fresh pages from mmap unwritten; the first read of
 * one maps the kernel's shared zero page, and the write after it copies
 * that page and flushes it from the TLB of every core the process runs on:
 * an interprocessor interrupt a page once a second thread runs, a VM exit
 * each in a virtual machine.  A no-op rerun of 100,000 Lua steps made
 * 20,900 such flushes that way, 157 so.  Not for a block that may stay
 * mostly unused: its pages are all made now. */
void *xcalloc_written(size_t count, size_t size);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);
char *xstrndup(const char *s, size_t n);
char *xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* *slot becomes a copy of s (or NULL), its old string freed. */
void set_string(char **slot, const char *s);
/* Overwrites n bytes that held a secret (a token, a client secret, a key, a
 * SAS) in a way the compiler keeps (glibc's explicit_bzero), so that freed
 * or reused memory does not keep it.  NULL is fine. */
void wipe(void *p, size_t n);
/* Frees a string that held a secret after wiping it.  NULL is fine. */
void wipe_free(char *s);

/* Grow an array `p` of `n` items with capacity `cap` so one more item fits. */
#define ARRAY_GROW(p, n, cap) do { if ((n) >= (cap)) { \
        (cap) = (cap) ? (cap) * 2 : 8; (p) = xrealloc((p), (cap) * sizeof *(p)); } } while (0)

struct strbuf {
    char *buf;      /* always NUL-terminated once anything was added */
    size_t len, cap;
};
#define STRBUF_INIT { NULL, 0, 0 }
void sb_add(struct strbuf *sb, const char *s, size_t n);
void sb_adds(struct strbuf *sb, const char *s);
/* Inline: the journal, run.json and every record add millions of single
 * bytes (3 % of a 100,000-step run's instructions as a call each). */
static inline void sb_addc(struct strbuf *sb, char c)
{
    if (sb->len + 2 > sb->cap) { sb_add(sb, &c, 1); return; }
    sb->buf[sb->len++] = c;
    sb->buf[sb->len] = '\0';
}
void sb_addf(struct strbuf *sb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void sb_vaddf(struct strbuf *sb, const char *fmt, va_list ap);
/* Shortens the string to its first len bytes (a no-op when it is not longer). */
void sb_truncate(struct strbuf *sb, size_t len);
char *sb_detach(struct strbuf *sb);          /* caller owns the result ("" if empty) */
void sb_release(struct strbuf *sb);

/* Write errors the same way everywhere: into a caller's fixed buffer. */
void errf(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* What to do about a failed file-system call, to end a message with
 * ("; free some disk space and run again"), or "" when errno says it all. */
const char *errno_hint(int e);

int mkdir_p(const char *path, mode_t mode);
/* Whole file into a NUL-terminated buffer; NULL with errno set on failure. */
char *read_file(const char *path, size_t *len);
/* The same, but a file longer than max bytes fails with EFBIG as soon as more than max
 * bytes were read, so an accidental huge file costs about the limit, not its size. */
char *read_file_max(const char *path, size_t max, size_t *len);
/* openat that never waits on a FIFO (its open blocks until the other end
 * comes, and flow's signals go to a signalfd, so not even SIGTERM would end
 * that): opened with O_NONBLOCK, which is then cleared unless `flags` asked
 * for it.  The caller's own checks find what it opened is no file. */
int open_no_wait(int dfd, const char *path, int flags, mode_t mode);
/* write() all of buf, retrying on EINTR and short writes; -1 with errno. */
int write_all(int fd, const void *buf, size_t len);
/* For a file written as it is made (nofollow's write_with callbacks), with
 * its text built in sb: once sb holds `at_least` bytes, writes them and
 * empties it, adding their count to *written when given; 0 or -1 (errno).
 * sb_write_last then writes what is left if rc is 0, releases sb, and
 * returns rc with errno as the write left it. */
int sb_write_some(struct strbuf *sb, int fd, size_t at_least, uint64_t *written);
/* The disk started on the `len` bytes written before offset `end` of fd
 * (sync_file_range, without waiting): a large file synced once written then
 * waits at its sync for its last part only.  Failures are the sync's. */
#define WRITEBACK_BYTES ((uint64_t)4 << 20)     /* what a writer lets add up before it starts the disk */
void writeback_start(int fd, uint64_t end, uint64_t len);
int sb_write_last(struct strbuf *sb, int fd, int rc);
/* The entries of dir but "." and "..", sorted bytewise; NULL with errno on
 * failure.  The directory is closed on return, so a walk holds no fds. */
char **dir_list(const char *dir, size_t *count);
/* The same, less the names the file `listed` holds (a name a line; a missing
 * or unreadable file, or NULL, holds none): the runs a project keeps that its
 * merged_runs does not account for, found at each run's start without a Lua
 * string for each of the thousands it may keep. */
char **dir_list_unlisted(const char *dir, const char *listed, size_t *count);
void dir_list_free(char **names, size_t n);
/* Byte strings in bytewise order, a prefix first (NUL bytes compare as bytes):
 * the order of a step's output parts in its fingerprint, whatever the locale. */
int bytes_compare(const char *a, size_t alen, const char *b, size_t blen);

/* Which file, at which version, as stat says: what the hash cache trusts a
 * hash by, and what tells a file read ahead from one changed since. */
struct stat;
struct file_stamp {
    long long size, mtime_ns, ctime_ns;
    unsigned long long ino, dev;
};
struct file_stamp file_stamp_of(const struct stat *st);
bool file_stamp_equal(const struct file_stamp *a, const struct file_stamp *b);
/* A file name made from a dataset or step name, a different one for every
 * name: bytes other than [A-Za-z0-9._-] and those of UTF-8 (>= 0x80) are
 * percent-encoded ("m/n" is "m%2Fn", '%' is "%25"), as is a leading '.' (never
 * a hidden file, "." or ".."); a name longer than 200 bytes encoded keeps its
 * start and gets "~" and 16 hex digits of its SHA-256.  Never "" and never
 * contains '+' or '~' otherwise, so either can join two of them.  Caller frees. */
char *safe_file_name(const char *name);
/* Whether safe_file_name of these len bytes is the bytes themselves (a name
 * of portable characters, short enough): its callers can skip the copy. */
bool safe_file_name_is_itself(const char *name, size_t len);

double monotonic_seconds(void);
/* Seconds since the epoch (the time of day, for records and logs). */
double wall_seconds(void);

#endif
