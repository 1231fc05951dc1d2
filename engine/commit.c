/* commit.c — see commit.h.  Everything here may run on a worker thread: no
 * globals, no chdir, errors written into the caller's buffer. */
#include "commit.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define COPY_CHUNK (64 * 1024)

char *path_parent(const char *path)
{
    size_t len = strlen(path);
    while (len > 1 && path[len - 1] == '/') len--;        /* "a/b/" is "a/b" */
    while (len > 0 && path[len - 1] != '/') len--;        /* drop the last component */
    if (len == 0) return xstrdup(".");
    while (len > 1 && path[len - 1] == '/') len--;        /* and the separator(s), not a lone "/" */
    return xstrndup(path, len);
}

char *path_base(const char *path)
{
    size_t end = strlen(path);
    while (end > 1 && path[end - 1] == '/') end--;
    size_t start = end;
    while (start > 0 && path[start - 1] != '/') start--;
    return xstrndup(path + start, end - start);
}

/* ---- fsync ------------------------------------------------------------------ */

/* gone_ok: a path that is not there (ENOENT) is not an error: nothing to sync. */
static int fsync_path(const char *path, int flags, bool gone_ok, char *err, size_t errlen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | flags);
    int e = fd < 0 ? errno : 0;
    if (fd < 0 && e == ENOENT && gone_ok) return 0;
    if (fd >= 0) {
        if (fsync(fd) != 0) e = errno;
        if (close(fd) != 0 && !e) e = errno;
    }
    if (e) {
        errf(err, errlen, "cannot sync %s: %s%s", path, strerror(e), errno_hint(e));
        return -1;
    }
    return 0;
}

int fsync_dir(const char *path, char *err, size_t errlen)
{
    return fsync_path(path, O_DIRECTORY, false, err, errlen);
}

int fsync_dir_present(const char *path, char *err, size_t errlen)
{
    return fsync_path(path, O_DIRECTORY, true, err, errlen);
}


/* Calls fn(path) for each entry of the directory at path->buf, with path->buf
 * extended to the entry's path; stops at the first failure. */
static int each_entry(struct strbuf *path, int (*fn)(struct strbuf *, void *), void *arg,
                      char *err, size_t errlen)
{
    size_t n = 0;
    char **names = dir_list(path->buf, &n);
    if (!names && errno == ENOENT) return 0;                      /* gone meanwhile: see fsync_tree */
    if (!names) {
        errf(err, errlen, "cannot read %s: %s", path->buf, strerror(errno));
        return -1;
    }
    size_t len = path->len;
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        sb_addc(path, '/');
        sb_adds(path, names[i]);
        rc = fn(path, arg);
        path->len = len;
        path->buf[len] = '\0';
    }
    dir_list_free(names, n);
    return rc;
}

struct errbuf { char *err; size_t errlen; };

/* Files first, then the directory that names them; what is gone is skipped. */
static int sync_entry(struct strbuf *path, void *arg)
{
    struct errbuf *e = arg;
    struct stat st;
    if (lstat(path->buf, &st) != 0) {
        if (errno == ENOENT) return 0;
        errf(e->err, e->errlen, "cannot sync %s: %s", path->buf, strerror(errno));
        return -1;
    }
    if (S_ISREG(st.st_mode)) return fsync_path(path->buf, O_NOFOLLOW, true, e->err, e->errlen);
    if (!S_ISDIR(st.st_mode)) return 0;      /* a symlink lives in its directory's entries */
    if (each_entry(path, sync_entry, e, e->err, e->errlen) != 0) return -1;
    return fsync_path(path->buf, O_DIRECTORY, true, e->err, e->errlen);
}

int fsync_tree(const char *path, char *err, size_t errlen)
{
    struct strbuf sb = STRBUF_INIT;
    struct errbuf e = { err, errlen };
    sb_adds(&sb, path);
    int rc = sync_entry(&sb, &e);
    sb_release(&sb);
    return rc;
}

/* ---- removing and copying --------------------------------------------------- */

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st; (void)flag; (void)ftw;
    return remove(path);
}

/* Best effort: used on leftovers and old outputs, whose removal decides nothing. */
static void remove_tree(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0) return;
    if (!S_ISDIR(st.st_mode)) unlink(path);
    else nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}


/* From the current offsets to the end of `in`, by read and write. */
static int copy_by_reading(int in, int out)
{
    char *buf = xmalloc(COPY_CHUNK);
    int rc = 0;
    for (;;) {
        ssize_t n = read(in, buf, COPY_CHUNK);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 || (n > 0 && write_all(out, buf, (size_t)n) != 0)) { rc = -1; break; }
        if (n == 0) break;
    }
    int e = errno;
    free(buf);
    errno = e;
    return rc;
}

/* copy_file_range where the kernel can (it moves the offsets as it goes),
 * read and write from where it stopped where it cannot. */
static int copy_bytes(int in, int out)
{
    for (;;) {
        ssize_t n = copy_file_range(in, NULL, out, NULL, 1 << 30, 0);
        if (n == 0) return 0;
        if (n > 0) continue;
        if (errno == EINTR) continue;
        if (errno == EXDEV || errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP ||
            errno == EPERM)
            return copy_by_reading(in, out);
        return -1;
    }
}

static int copy_file(const char *src, const char *dst, mode_t mode, char *err, size_t errlen)
{
    int in = open(src, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (in < 0) {
        errf(err, errlen, "cannot read %s: %s", src, strerror(errno));
        return -1;
    }
    int out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode & 07777);
    int rc = out >= 0 && copy_bytes(in, out) == 0 && fsync(out) == 0 ? 0 : -1;
    if (rc != 0) errf(err, errlen, "cannot write %s: %s", dst, strerror(errno));
    if (out >= 0 && close(out) != 0 && rc == 0) {
        errf(err, errlen, "cannot write %s: %s", dst, strerror(errno));
        rc = -1;
    }
    close(in);
    return rc;
}

static int copy_link(const char *src, const char *dst, size_t size_hint, char *err, size_t errlen)
{
    size_t cap = size_hint + 1 > 64 ? size_hint + 1 : 64;
    char *target = NULL;
    ssize_t n;
    for (;;) {
        target = xrealloc(target, cap);
        n = readlink(src, target, cap);
        if (n < 0 || (size_t)n < cap) break;
        cap *= 2;                                  /* truncated: the link changed, try bigger */
    }
    int rc = 0;
    if (n < 0) {
        errf(err, errlen, "cannot read link %s: %s", src, strerror(errno));
        rc = -1;
    } else {
        target[n] = '\0';
        if (symlink(target, dst) != 0) {
            errf(err, errlen, "cannot create %s: %s", dst, strerror(errno));
            rc = -1;
        }
    }
    free(target);
    return rc;
}

struct copy { struct strbuf src, dst; char *err; size_t errlen; };

static int copy_entry(struct copy *c);

static int copy_child(struct strbuf *src, void *arg)
{
    struct copy *c = arg;
    size_t len = c->dst.len;
    sb_adds(&c->dst, strrchr(src->buf, '/'));          /* "/name" of the entry */
    int rc = copy_entry(c);
    c->dst.len = len;
    c->dst.buf[len] = '\0';
    return rc;
}

/* Copies c->src to c->dst (which must not exist), syncing what it writes:
 * files as they are written, each directory after its entries. */
static int copy_entry(struct copy *c)
{
    struct stat st;
    if (lstat(c->src.buf, &st) != 0) {
        errf(c->err, c->errlen, "cannot read %s: %s", c->src.buf, strerror(errno));
        return -1;
    }
    if (S_ISREG(st.st_mode)) return copy_file(c->src.buf, c->dst.buf, st.st_mode, c->err, c->errlen);
    if (S_ISLNK(st.st_mode)) return copy_link(c->src.buf, c->dst.buf, (size_t)st.st_size, c->err, c->errlen);
    if (!S_ISDIR(st.st_mode)) {
        errf(c->err, c->errlen, "cannot copy %s: not a file, directory or symlink", c->src.buf);
        return -1;
    }
    if (mkdir(c->dst.buf, 0700) != 0) {           /* its real mode once it is filled */
        errf(c->err, c->errlen, "cannot create %s: %s", c->dst.buf, strerror(errno));
        return -1;
    }
    if (each_entry(&c->src, copy_child, c, c->err, c->errlen) != 0) return -1;
    if (chmod(c->dst.buf, st.st_mode & 07777) != 0) {
        errf(c->err, c->errlen, "cannot set the mode of %s: %s", c->dst.buf, strerror(errno));
        return -1;
    }
    return fsync_dir(c->dst.buf, c->err, c->errlen);
}

int copy_tree(const char *src, const char *dst, char *err, size_t errlen)
{
    struct copy c = { STRBUF_INIT, STRBUF_INIT, err, errlen };
    sb_adds(&c.src, src);
    sb_adds(&c.dst, dst);
    int rc = copy_entry(&c);
    sb_release(&c.src);
    sb_release(&c.dst);
    return rc;
}

/* ---- moving into place ------------------------------------------------------ */

/* rename() refuses these when dst exists as a non-empty directory or as
 * another type of entry; the entry is then replaced in two steps. */
static bool rename_blocked(int e)
{
    return e == ENOTEMPTY || e == EEXIST || e == EISDIR || e == ENOTDIR;
}

/* The fallback where RENAME_EXCHANGE is not supported: dst moves to a hidden
 * sibling, src moves in, the sibling goes.  dst is put back if src cannot
 * move in. */
static int install_via_aside(const char *src, const char *dst)
{
    char *parent = path_parent(dst), *base = path_base(dst);
    char *aside = xasprintf("%s/.%s.flow-old-%ld", parent, base, (long)getpid());
    free(parent);
    free(base);
    remove_tree(aside);
    int rc = -1;
    if (rename(dst, aside) == 0) {
        if (rename(src, dst) == 0) rc = 0;
        else {
            int e = errno;
            rename(aside, dst);
            errno = e;
        }
    }
    int e = errno;
    if (rc == 0) remove_tree(aside);
    free(aside);
    errno = e;
    return rc;
}

/* rename(src, dst) that also replaces a directory or an entry of another
 * type.  Prefers an atomic exchange, so dst is never missing, even for a
 * moment; the old contents then sit at src and are removed.  -1 with errno
 * (EXDEV across file systems) and dst untouched on failure. */
static int install(const char *src, const char *dst)
{
    if (rename(src, dst) == 0) return 0;
    int e = errno;
    struct stat st;
    if (!rename_blocked(e) || lstat(dst, &st) != 0) { errno = e; return -1; }
    if (renameat2(AT_FDCWD, src, AT_FDCWD, dst, RENAME_EXCHANGE) == 0) {
        remove_tree(src);
        return 0;
    }
    if (errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP) return -1;
    return install_via_aside(src, dst);
}

/* Across file systems: copy into a hidden sibling of final (synced as it is
 * written), move that into place, then drop staging. */
static int commit_across(const char *staging, const char *final, const char *parent,
                         char *err, size_t errlen)
{
    char *base = path_base(final);
    char *tmp = xasprintf("%s/.%s.flow-tmp-%ld", parent, base, (long)getpid());
    free(base);
    remove_tree(tmp);                           /* a leftover of a crashed run */
    int rc = copy_tree(staging, tmp, err, errlen);
    if (rc == 0 && install(tmp, final) != 0) {
        errf(err, errlen, "%s", strerror(errno));
        rc = -1;
    }
    if (rc != 0) remove_tree(tmp);
    else {
        rc = fsync_dir(parent, err, errlen);
        remove_tree(staging);
    }
    free(tmp);
    return rc;
}

static int commit_steps(const char *staging, const char *final, char *err, size_t errlen)
{
    struct stat st;
    if (lstat(staging, &st) != 0) {
        errf(err, errlen, "%s", strerror(errno));
        return -1;
    }
    char *parent = path_parent(final);
    int rc = mkdir_p(parent, 0755);
    if (rc != 0) errf(err, errlen, "cannot create directory %s: %s", parent, strerror(errno));
    else if (install(staging, final) == 0) rc = 0;
    else if (errno == EXDEV) rc = commit_across(staging, final, parent, err, errlen);
    else {
        errf(err, errlen, "%s", strerror(errno));
        rc = -1;
    }
    free(parent);
    return rc;
}

bool commit_output_by_rename(const char *staging, const char *final)
{
    return rename(staging, final) == 0;      /* install()'s first try, which commit_steps then repeats */
}

int commit_output_unsynced(const char *staging, const char *final, char *err, size_t errlen)
{
    char reason[1024] = "";
    if (commit_steps(staging, final, reason, sizeof reason) == 0) return 0;
    errf(err, errlen, "cannot move %s to %s: %s", staging, final, reason);
    return -1;
}
