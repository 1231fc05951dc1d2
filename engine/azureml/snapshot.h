/* snapshot.h — the code snapshot a job runs on Azure ML: which files of the
 * project directory go, in which order, under which blob names, and the
 * content hash the SDK files a code asset under (hash_version 202208), so
 * that `GET codes/{name}/versions?hash=…&hashVersion=202208` finds a code
 * version uploaded by flow or by the SDK from the same files.
 *
 * What the SDK (azure-ai-ml: get_content_hash, _get_upload_files_from_folder,
 * traverse_directory, get_ignore_file, upload_directory) does, and so flow:
 * - Files: every file below the root, symlinks followed (to files and into
 *   directories; a file's path is the link's, its bytes the target's; a
 *   relative link is read from the link's directory, where the SDK reads it
 *   from its working directory), except what the root's ignore file leaves
 *   out: `.amlignore` if it exists, else `.gitignore`, else nothing (ignore
 *   files in subdirectories are never read); the rules are in amlignore.h.
 *   Nothing else is special: `.git/` goes unless ignored, and so do the
 *   ignore files themselves.
 * - Flow's own additions: `.flow` at the root is never part of a snapshot
 *   (flow's state; a folder without one hashes as the SDK hashes it), nor
 *   are the root names in snapshot_options.exclude_names.
 * - Order: by relative path lowercased as Python's str.lower() does, code
 *   point by code point; paths equal but for case by their bytes (the SDK
 *   keeps its walk's order there, which for "A/x" and "a/x" is readdir's).
 * - Hash: SHA-256 of str(count), then for each file in order "#" rel "#" and
 *   str(size) (decimal), then each file's contents in the same order; hex.
 * - Blob names: "<name of the root directory>/<rel>" in the container the
 *   pending upload gives (no "LocalUpload/…" prefix); the "indicator" file,
 *   on which the upload's metadata goes, is the first file by local path
 *   ("<real root>/<rel>", a symlinked file's target path) in byte order.
 * Where flow stops and the SDK would go on with something wrong, see
 * snapshot_scan.
 *
 * Nothing here knows of Lua; both functions are safe to run on any thread. */
#ifndef FLOW_AZUREML_SNAPSHOT_H
#define FLOW_AZUREML_SNAPSHOT_H

#include "hash.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#define SNAPSHOT_HASH_VERSION "202208"

struct snapshot_file {
    char *rel;             /* relative to the root, '/'-separated: "src/train.py" */
    char *path;            /* what to open: root "/" rel (a symlink is followed) */
    uint64_t size;
    /* The file as scanned, so that a reader can tell it changed since. */
    dev_t dev;
    ino_t ino;
    struct timespec mtime;
    bool symlink;          /* rel itself is a symlink (to a file) */
};

struct snapshot {
    char *root;            /* as given to snapshot_scan */
    char *dir_name;        /* the last component of the root's real path: the blob prefix */
    char *ignore_file;     /* ".amlignore", ".gitignore", or NULL when neither exists */
    struct snapshot_file *files;    /* in hash order */
    size_t count;
    uint64_t total_size;
    size_t indicator;      /* index in files of the indicator file; count when there is no file */
};

struct snapshot_options {
    /* Root entries left out besides ".flow", e.g. ".git"; NULL-terminated, or NULL. */
    const char *const *exclude_names;
    /* Rules after the ignore file's, as if appended to it; NULL-terminated,
     * or NULL.  The SDK adds "__pycache__" to a component's code (a command
     * job's `code:`), and applies it even without an ignore file. */
    const char *const *extra_rules;
};

/* Lists the snapshot of the directory `root` into *out (opt may be NULL).
 * 0, or -1 with a message naming the path in err (and *out empty), when:
 * the ignore file cannot be read or has a rule the SDK rejects; a directory
 * cannot be read (the SDK would skip it without a word); a kept file cannot
 * be examined, is a dangling symlink, is not a regular file (a FIFO would
 * hang the SDK's read), or has a name the SDK cannot hash or upload (not
 * UTF-8, or with a '\n' or a '\' in it); a directory is reached again below
 * itself through a symlink (the SDK goes round until the path is too long).
 * A directory whose every file the ignore file leaves out is not entered, so
 * none of that applies there. */
int snapshot_scan(const char *root, const struct snapshot_options *opt, struct snapshot *out,
                  char *err, size_t errlen);
void snapshot_free(struct snapshot *s);

/* Adds to ig the rules of root's .amlignore, else of its .gitignore: the
 * file azure-ai-ml and the az ml CLI read.  *which is that file's name, or
 * NULL when root has neither.  0, or -1 with why (a file that cannot be
 * read, a rule that cannot be understood). */
struct amlignore;
int snapshot_load_ignore_file(const char *root, struct amlignore *ig, const char **which, char *err, size_t errlen);

/* The content hash of a scanned snapshot, reading each file in 64 KiB
 * chunks.  stop (may be NULL) is looked at between chunks: once set, from any
 * thread, it fails with "cancelled"; *done (may be NULL) grows by the bytes
 * read, for progress.  -1 with a message when a file cannot be read, -2 when
 * one is no longer what snapshot_scan saw (size, identity or modification
 * time changed, before or while it was read): a snapshot must be one state of
 * the files, so the caller scans again. */
int snapshot_hash(const struct snapshot *s, const atomic_bool *stop, _Atomic uint64_t *done,
                  char hex[SHA256_HEX_SIZE], char *err, size_t errlen);

/* "<dir_name>/<rel>" for files[i]; the caller frees it. */
char *snapshot_blob_name(const struct snapshot *s, size_t i);

/* The sort key of a path: Python's str.lower() of it, as UTF-8 (exposed for
 * the tests).  The caller frees it. */
char *snapshot_sort_key(const char *rel);

#endif
