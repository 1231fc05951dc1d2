/* nofollow.h — creating, writing and removing flow's own files (everything
 * under .flow/) without ever following a symbolic link.  Every component of
 * the path as written must be a real directory, and the last one a real file
 * or directory: a link planted there (.flow/lock -> ~/.bashrc, .flow/tmp ->
 * ~) would otherwise make flow truncate, overwrite or empty what it points to.
 *
 * Paths are walked one component at a time with openat(O_NOFOLLOW), from the
 * current directory for a relative path (the project directory: it is trusted,
 * as are the directories above it) or from / for an absolute one.  Each
 * function returns 0 (or a descriptor), or -1 with a message in err naming the
 * path and, when an entry is in the way, which one and what to do. */
#ifndef FLOW_NOFOLLOW_H
#define FLOW_NOFOLLOW_H

#include <stddef.h>
#include <sys/types.h>

/* open(path, flags, mode) with O_NOFOLLOW and O_CLOEXEC on every component;
 * on failure errno is the failing call's (EEXIST for O_EXCL on an existing file). */
int nofollow_open(const char *path, int flags, mode_t mode, char *err, size_t errlen);

/* mkdir -p where every existing component must be a directory, not a link. */
int nofollow_mkdir_p(const char *path, mode_t mode, char *err, size_t errlen);

/* Writes data to a temporary file beside path, syncs it, renames it over path
 * and syncs the directory; path's directory must exist.  On failure path is
 * untouched and the temporary file is gone. */
int nofollow_write_atomic(const char *path, const void *data, size_t len, char *err, size_t errlen);

/* The same, for content made while it is written: write(fd, ctx) writes it
 * (with write_all) and returns 0, or -1 with errno set. */
int nofollow_write_atomic_with(const char *path, int (*write)(int fd, void *ctx), void *ctx, char *err,
                               size_t errlen);

/* The same two without the syncs, for what is worth no fsync (a no-op run's
 * run.json, a cache): a crash leaves the old file or the new one whole; a
 * power loss may lose the new one. */
int nofollow_replace(const char *path, const void *data, size_t len, char *err, size_t errlen);
int nofollow_replace_with(const char *path, int (*write)(int fd, void *ctx), void *ctx, char *err, size_t errlen);

/* Points the symbolic link `path` at `target`, replacing it atomically. */
int nofollow_symlink(const char *target, const char *path, char *err, size_t errlen);

/* Removes path and, when it is a directory, everything in it.  A link, there
 * or inside, is removed itself, never what it points to.  A missing path is
 * not an error. */
int nofollow_remove_tree(const char *path, char *err, size_t errlen);

#endif
