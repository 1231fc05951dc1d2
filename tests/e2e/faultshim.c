/* faultshim.c — an LD_PRELOAD library for the end-to-end tests: makes chosen
 * file-system calls fail on chosen paths, as a full disk, a failing disk or a
 * read-only file system would.  Built by the Makefile as
 * $(BUILD)/tests/libfaultshim.so; see with_faults in lib.sh.
 *
 *   FLOW_FAULT        the calls that fail, comma-separated: write, fsync
 *                     (fsync and fdatasync), rename (rename, renameat,
 *                     renameat2), create (open for writing, mkdir)
 *   FLOW_FAULT_PATH   a pattern (fnmatch, '*' also matches '/') for the
 *                     absolute path; a call on any other path is left alone.
 *                     A descriptor's path is read from /proc/self/fd; rename
 *                     fails when either of its paths matches.
 *   FLOW_FAULT_ERRNO  ENOSPC (default), EIO, EROFS or EACCES
 *   FLOW_FAULT_AFTER  let this many matching calls succeed first (default 0)
 *
 * Child processes inherit LD_PRELOAD, so a pattern should name flow's files,
 * not what a step's command writes. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <limits.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static atomic_long seen;           /* matching calls so far */

static bool op_enabled(const char *op)
{
    const char *list = getenv("FLOW_FAULT");
    if (!list) return false;
    size_t n = strlen(op);
    for (const char *p = list; (p = strstr(p, op)); p += n)
        if ((p == list || p[-1] == ',') && (p[n] == ',' || p[n] == '\0')) return true;
    return false;
}

static int fault_errno(void)
{
    const char *e = getenv("FLOW_FAULT_ERRNO");
    if (!e || strcmp(e, "ENOSPC") == 0) return ENOSPC;
    if (strcmp(e, "EIO") == 0) return EIO;
    if (strcmp(e, "EROFS") == 0) return EROFS;
    if (strcmp(e, "EACCES") == 0) return EACCES;
    return ENOSPC;
}

/* The absolute form of `path` relative to directory descriptor dirfd. */
static void absolute(int dirfd, const char *path, char *out, size_t outlen)
{
    char base[PATH_MAX] = "";
    if (path[0] == '/') {
        snprintf(out, outlen, "%s", path);
        return;
    }
    if (dirfd == AT_FDCWD) {
        if (!getcwd(base, sizeof base)) base[0] = '\0';
    } else {
        char link[64];
        snprintf(link, sizeof link, "/proc/self/fd/%d", dirfd);
        ssize_t n = readlink(link, base, sizeof base - 1);
        base[n > 0 ? n : 0] = '\0';
    }
    snprintf(out, outlen, "%s/%s", base, path);
}

/* Whether this call (op on the path) must fail; sets errno when it does. */
static bool should_fail(const char *op, const char *path)
{
    if (!op_enabled(op)) return false;
    const char *pattern = getenv("FLOW_FAULT_PATH");
    if (!pattern || fnmatch(pattern, path, 0) != 0) return false;
    const char *after = getenv("FLOW_FAULT_AFTER");
    long skip = after ? atol(after) : 0;
    if (atomic_fetch_add(&seen, 1) < skip) return false;
    errno = fault_errno();
    return true;
}

static bool fd_fails(const char *op, int fd)
{
    if (fd <= 2 || !op_enabled(op)) return false;
    char link[64], path[PATH_MAX];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof path - 1);
    if (n <= 0) return false;
    path[n] = '\0';
    return should_fail(op, path);
}

static bool at_fails(const char *op, int dirfd, const char *path)
{
    if (!path || !op_enabled(op)) return false;
    char full[PATH_MAX * 2];
    absolute(dirfd, path, full, sizeof full);
    return should_fail(op, full);
}

#define REAL(name) static __typeof__(name) *real; if (!real) real = dlsym(RTLD_NEXT, #name)

ssize_t write(int fd, const void *buf, size_t n)
{
    REAL(write);
    if (fd_fails("write", fd)) return -1;
    return real(fd, buf, n);
}

int fsync(int fd)
{
    REAL(fsync);
    if (fd_fails("fsync", fd)) return -1;
    return real(fd);
}

int fdatasync(int fd)
{
    REAL(fdatasync);
    if (fd_fails("fsync", fd)) return -1;
    return real(fd);
}

int rename(const char *from, const char *to)
{
    REAL(rename);
    if (at_fails("rename", AT_FDCWD, from) || at_fails("rename", AT_FDCWD, to)) return -1;
    return real(from, to);
}

int renameat(int fromfd, const char *from, int tofd, const char *to)
{
    REAL(renameat);
    if (at_fails("rename", fromfd, from) || at_fails("rename", tofd, to)) return -1;
    return real(fromfd, from, tofd, to);
}

int renameat2(int fromfd, const char *from, int tofd, const char *to, unsigned flags)
{
    REAL(renameat2);
    if (at_fails("rename", fromfd, from) || at_fails("rename", tofd, to)) return -1;
    return real(fromfd, from, tofd, to, flags);
}

static bool writes(int flags)
{
    return (flags & (O_WRONLY | O_RDWR | O_CREAT | O_TRUNC)) != 0;
}

static mode_t mode_arg(int flags, va_list ap)
{
    return (flags & (O_CREAT | O_TMPFILE)) ? (mode_t)va_arg(ap, int) : 0;
}

int open(const char *path, int flags, ...)
{
    REAL(open);
    va_list ap;
    va_start(ap, flags);
    mode_t mode = mode_arg(flags, ap);
    va_end(ap);
    if (writes(flags) && at_fails("create", AT_FDCWD, path)) return -1;
    return real(path, flags, mode);
}

int open64(const char *path, int flags, ...)
{
    REAL(open64);
    va_list ap;
    va_start(ap, flags);
    mode_t mode = mode_arg(flags, ap);
    va_end(ap);
    if (writes(flags) && at_fails("create", AT_FDCWD, path)) return -1;
    return real(path, flags, mode);
}

int openat(int dirfd, const char *path, int flags, ...)
{
    REAL(openat);
    va_list ap;
    va_start(ap, flags);
    mode_t mode = mode_arg(flags, ap);
    va_end(ap);
    if (writes(flags) && at_fails("create", dirfd, path)) return -1;
    return real(dirfd, path, flags, mode);
}

int openat64(int dirfd, const char *path, int flags, ...)
{
    REAL(openat64);
    va_list ap;
    va_start(ap, flags);
    mode_t mode = mode_arg(flags, ap);
    va_end(ap);
    if (writes(flags) && at_fails("create", dirfd, path)) return -1;
    return real(dirfd, path, flags, mode);
}

int mkdir(const char *path, mode_t mode)
{
    REAL(mkdir);
    if (at_fails("create", AT_FDCWD, path)) return -1;
    return real(path, mode);
}

int mkdirat(int dirfd, const char *path, mode_t mode)
{
    REAL(mkdirat);
    if (at_fails("create", dirfd, path)) return -1;
    return real(dirfd, path, mode);
}
