/* nofollow.c — see nofollow.h.  Everything goes through a descriptor of the
 * parent directory obtained by the walk, so the name checked is the name
 * used: mkdirat, openat, renameat, symlinkat, unlinkat. */
#include "nofollow.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <linux/openat2.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

/* O_PATH: a directory on the way need not be readable, only searchable. */
#define DIR_FLAGS (O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)

/* Why `name` (in the directory dfd; `shown` is its path from the start) could
 * not be used, after a failure with errno e.  A link or a file in the way is
 * named, with what to do; anything else is strerror and a hint. */
static void explain(int dfd, const char *name, const char *shown, int e, char *err, size_t errlen)
{
    struct stat st;
    bool seen = fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0;
    if (seen && S_ISLNK(st.st_mode))
        errf(err, errlen, "%s is a symbolic link, and flow never follows one inside its .flow/ "
             "directory: remove it", shown);
    else if (seen && e == ENOTDIR && !S_ISDIR(st.st_mode))
        errf(err, errlen, "%s is not a directory: remove or rename it", shown);
    else if (seen && e == EISDIR)
        errf(err, errlen, "%s is a directory where flow keeps a file: remove it", shown);
    else
        errf(err, errlen, "%s%s", strerror(e), errno_hint(e));
}

/* The components of path, walked from the start directory; `shown` grows
 * with them for messages. */
struct walk {
    char *copy;          /* path, with '\0' written over separators as we go */
    char *next;          /* the rest of copy to walk */
    struct strbuf shown;
    int dfd;             /* the directory reached so far */
};

static int walk_start(struct walk *w, const char *path, char *err, size_t errlen)
{
    *w = (struct walk){ .copy = xstrdup(path), .shown = STRBUF_INIT, .dfd = -1 };
    w->next = w->copy;
    bool absolute = path[0] == '/';
    w->dfd = open(absolute ? "/" : ".", DIR_FLAGS);
    if (w->dfd < 0) {
        errf(err, errlen, "cannot open %s: %s", absolute ? "/" : "the current directory", strerror(errno));
        return -1;
    }
    if (absolute) sb_addc(&w->shown, '/');
    return 0;
}

static void walk_end(struct walk *w)
{
    if (w->dfd >= 0) close(w->dfd);
    free(w->copy);
    sb_release(&w->shown);
}

/* The next component that is not empty or ".", or NULL at the end; *last
 * says whether nothing follows it. */
static const char *walk_next(struct walk *w, bool *last)
{
    for (;;) {
        char *s = w->next;
        while (*s == '/') s++;
        if (!*s) return NULL;
        char *end = strchr(s, '/');
        if (end) *end = '\0';
        w->next = end ? end + 1 : s + strlen(s);
        const char *rest = w->next;
        while (*rest == '/') rest++;
        *last = *rest == '\0';
        if (strcmp(s, ".") == 0) {
            if (*last) return s;
            continue;
        }
        if (w->shown.len && w->shown.buf[w->shown.len - 1] != '/') sb_addc(&w->shown, '/');
        sb_adds(&w->shown, s);
        return s;
    }
}

/* Steps into directory `name`, creating it first with `create`. */
static int walk_into(struct walk *w, const char *name, bool create, mode_t mode,
                     const char *verb, const char *path, char *err, size_t errlen)
{
    int fd = openat(w->dfd, name, DIR_FLAGS);
    if (fd < 0 && errno == ENOENT && create) {
        if (mkdirat(w->dfd, name, mode) != 0 && errno != EEXIST) {
            int e = errno;
            errf(err, errlen, "cannot create directory %s: %s%s", path, strerror(e), errno_hint(e));
            return -1;
        }
        fd = openat(w->dfd, name, DIR_FLAGS);
    }
    if (fd < 0) {
        int e = errno;
        char why[768];
        explain(w->dfd, name, w->shown.buf, e, why, sizeof why);
        errf(err, errlen, "cannot %s %s: %s", verb, path, why);
        errno = e;                                /* ENOENT: the caller may not mind */
        return -1;
    }
    close(w->dfd);
    w->dfd = fd;
    return 0;
}

/* Walks to the directory that holds path's last component: returns a
 * descriptor of it (the caller closes it) and a copy of the last name in
 * *base (the caller frees it).  `verb` says what the caller is doing. */
static int open_parent(const char *path, const char *verb, char **base, char **shown,
                       char *err, size_t errlen)
{
    struct walk w;
    if (walk_start(&w, path, err, errlen) != 0) { walk_end(&w); return -1; }
    bool last = false;
    const char *name;
    while ((name = walk_next(&w, &last)) && !last)
        if (walk_into(&w, name, false, 0, verb, path, err, errlen) != 0) {
            int e = errno;
            walk_end(&w);
            errno = e;
            return -1;
        }
    if (!name) {
        errf(err, errlen, "cannot %s %s: not a file name", verb, path);
        walk_end(&w);
        errno = EINVAL;
        return -1;
    }
    int fd = w.dfd;
    w.dfd = -1;
    *base = xstrdup(name);
    *shown = sb_detach(&w.shown);
    walk_end(&w);
    return fd;
}

int nofollow_open(const char *path, int flags, mode_t mode, char *err, size_t errlen)
{
    char *base, *shown;
    int dfd = open_parent(path, "open", &base, &shown, err, errlen);
    if (dfd < 0) return -1;
    int fd = open_no_wait(dfd, base, flags | O_NOFOLLOW | O_CLOEXEC, mode);     /* (a FIFO planted there) */
    int e = errno;
    if (fd < 0) {
        char why[768];
        explain(dfd, base, shown, e, why, sizeof why);
        errf(err, errlen, "cannot open %s: %s", path, why);
    }
    close(dfd);
    free(base);
    free(shown);
    errno = e;                                    /* EEXIST, for an O_EXCL caller */
    return fd;
}

int nofollow_mkdir_p(const char *path, mode_t mode, char *err, size_t errlen)
{
    struct walk w;
    int rc = walk_start(&w, path, err, errlen);
    bool last;
    const char *name;
    while (rc == 0 && (name = walk_next(&w, &last)))
        rc = walk_into(&w, name, true, mode, "create directory", path, err, errlen);
    walk_end(&w);
    return rc;
}

struct bytes { const void *data; size_t len; };

static int write_bytes(int fd, void *ctx)
{
    const struct bytes *b = ctx;
    return write_all(fd, b->data, b->len);
}

int nofollow_write_atomic(const char *path, const void *data, size_t len, char *err, size_t errlen)
{
    return nofollow_write_atomic_with(path, write_bytes, &(struct bytes){ data, len }, err, errlen);
}

static int write_atomic_with(const char *path, int (*write)(int fd, void *ctx), void *ctx, bool durable, char *err,
                             size_t errlen)
{
    char *base, *shown;
    int dfd = open_parent(path, "write", &base, &shown, err, errlen);
    if (dfd < 0) return -1;
    char *tmp = xasprintf("%s.tmp-%ld", base, (long)getpid());
    int e = 0;
    bool renamed = false;
    int fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) e = errno;
    else {
        if (write(fd, ctx) != 0 || (durable && fsync(fd) != 0)) e = errno;
        if (close(fd) != 0 && !e) e = errno;      /* NFS may report a failed write only here */
    }
    if (!e && renameat(dfd, tmp, dfd, base) != 0) e = errno;
    else if (!e) {
        renamed = true;
        if (durable) {                            /* now make the new name durable */
            int sfd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
            if (sfd < 0 || fsync(sfd) != 0) e = errno;
            if (sfd >= 0) close(sfd);
        }
    }
    if (e && !renamed) unlinkat(dfd, tmp, 0);
    if (e == EISDIR || e == ENOTEMPTY || e == EEXIST) {
        char why[768];
        explain(dfd, base, shown, EISDIR, why, sizeof why);
        errf(err, errlen, "cannot write %s: %s", path, why);
    } else if (e) {
        errf(err, errlen, "cannot write %s: %s%s", path, strerror(e), errno_hint(e));
    }
    free(tmp);
    close(dfd);
    free(base);
    free(shown);
    return e ? -1 : 0;
}

int nofollow_write_atomic_with(const char *path, int (*write)(int fd, void *ctx), void *ctx, char *err,
                               size_t errlen)
{
    return write_atomic_with(path, write, ctx, true, err, errlen);
}

int nofollow_replace_with(const char *path, int (*write)(int fd, void *ctx), void *ctx, char *err, size_t errlen)
{
    return write_atomic_with(path, write, ctx, false, err, errlen);
}

int nofollow_replace(const char *path, const void *data, size_t len, char *err, size_t errlen)
{
    return nofollow_replace_with(path, write_bytes, &(struct bytes){ data, len }, err, errlen);
}

int nofollow_symlink(const char *target, const char *path, char *err, size_t errlen)
{
    char *base, *shown;
    int dfd = open_parent(path, "replace", &base, &shown, err, errlen);
    if (dfd < 0) return -1;
    char *tmp = xasprintf("%s.tmp-%ld", base, (long)getpid());
    unlinkat(dfd, tmp, 0);                        /* a leftover of a crashed run */
    int rc = 0;
    if (symlinkat(target, dfd, tmp) != 0) {
        int e = errno;
        errf(err, errlen, "cannot create a link beside %s: %s%s", path, strerror(e), errno_hint(e));
        rc = -1;
    } else if (renameat(dfd, tmp, dfd, base) != 0) {
        int e = errno;
        char why[768];
        explain(dfd, base, shown, e == ENOTEMPTY || e == EEXIST ? EISDIR : e, why, sizeof why);
        errf(err, errlen, "cannot replace %s: %s", path, why);
        unlinkat(dfd, tmp, 0);
        rc = -1;
    }
    free(tmp);
    close(dfd);
    free(base);
    free(shown);
    return rc;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st; (void)ftw;
    return flag == FTW_DP ? rmdir(path) : unlink(path);
}

/* Whether path is certainly missing, found in one call: resolved with no
 * symbolic link allowed anywhere on it (openat2, Linux 5.6), ENOENT means a
 * real directory on the way lacks the next name, which is what the walk
 * below would find.  Any other answer (a link: ELOOP, a file on the way:
 * ENOTDIR, an older kernel: ENOSYS, or the path there) is the walk's to
 * tell.  A step's staging path, cleared before every command, is missing
 * almost always: one system call instead of a walk's nine. */
static bool certainly_missing(const char *path)
{
    struct open_how how = { .flags = O_PATH | O_CLOEXEC | O_NOFOLLOW, .resolve = RESOLVE_NO_SYMLINKS };
    int fd = (int)syscall(SYS_openat2, AT_FDCWD, path, &how, sizeof how);
    if (fd >= 0) close(fd);
    return fd < 0 && errno == ENOENT;
}

int nofollow_remove_tree(const char *path, char *err, size_t errlen)
{
    if (certainly_missing(path)) return 0;
    char *base, *shown;
    char why[768];
    int dfd = open_parent(path, "remove", &base, &shown, why, sizeof why);
    if (dfd < 0) {
        if (errno == ENOENT) return 0;            /* no parent: nothing to remove */
        errf(err, errlen, "%s", why);             /* a link or a file on the way: refused */
        return -1;
    }
    struct stat st;
    int rc = 0;
    if (fstatat(dfd, base, &st, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno != ENOENT) {
            errf(err, errlen, "cannot remove %s: %s", path, strerror(errno));
            rc = -1;
        }
    } else if (!S_ISDIR(st.st_mode)) {
        if (unlinkat(dfd, base, 0) != 0) {
            errf(err, errlen, "cannot remove %s: %s", path, strerror(errno));
            rc = -1;
        }
    } else if (nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT) != 0) {
        /* The components up to path were just checked; inside, FTW_PHYS
         * removes links themselves and FTW_MOUNT stays on this file system. */
        errf(err, errlen, "cannot remove %s: %s", path, strerror(errno));
        rc = -1;
    }
    close(dfd);
    free(base);
    free(shown);
    return rc;
}
