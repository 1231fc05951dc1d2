/* commit.h — changes to the file system made safe against a crash: fsync of
 * files, directories and whole trees, copying a tree, and moving a finished
 * output into place so that after a crash of flow either the old output or
 * the complete new one is there, never a mix (durable once the caller syncs
 * it). */
#ifndef FLOW_COMMIT_H
#define FLOW_COMMIT_H

#include <stdbool.h>
#include <stddef.h>

/* The directory holding `path` ("." when it has no '/'); the caller frees it. */
char *path_parent(const char *path);
/* The last component of `path`, trailing slashes ignored; the caller frees it. */
char *path_base(const char *path);

/* Each returns 0, or -1 with a message naming the path in err. */
int fsync_dir(const char *path, char *err, size_t errlen);
/* Every regular file and directory under `path` (a file or a directory);
 * symlinks are not followed.  What is not there (ENOENT), before or during
 * the walk, is skipped, as fsync_dir_present skips a directory that is not:
 * a step's consumers may start before its outputs are flushed (step.c's
 * group commit), and one may remove what it read; what is gone has nothing
 * to lose. */
int fsync_tree(const char *path, char *err, size_t errlen);
int fsync_dir_present(const char *path, char *err, size_t errlen);

/* Copies src (a file, a symlink or a directory tree; links are copied as
 * links) to dst, which must not exist, syncing what it writes.  On failure
 * dst may be left half-made: the caller removes it. */
int copy_tree(const char *src, const char *dst, char *err, size_t errlen);

/* Moves `staging` (a file or a directory tree) to `final`: renames it over
 * final (an existing directory or an entry of another type is replaced
 * too).  Nothing is synced: the caller makes final durable later, in a
 * batch (group commit: step.c syncs each output with fsync_tree and its
 * directory with fsync_dir before the journal line naming it).  Across file
 * systems it copies into a hidden sibling of final first (copy_tree, which
 * syncs the copy, then the parent is synced after the rename).  Creates
 * final's parent if missing.  A crash of flow leaves the old or the new
 * output, never a mix; a power loss before that batch may leave neither
 * complete, which is why no journal line names it yet.  On failure final is
 * untouched and err reads "cannot move STAGING to FINAL: reason".  Safe to
 * call from any thread. */
int commit_output_unsynced(const char *staging, const char *final, char *err, size_t errlen);

/* The part of commit_output_unsynced that is one rename(2), which the loop's
 * thread may make itself: true when staging is now final; false when that
 * rename could not do it (final a non-empty directory, another file system,
 * a missing parent, ...), nothing changed, and commit_output_unsynced (on
 * the work pool: it may remove or copy a tree) does the rest. */
bool commit_output_by_rename(const char *staging, const char *final);

#endif
