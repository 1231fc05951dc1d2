/* blob.h — Azure Blob Storage on the engine's loop: a datastore's container
 * as flow moves data through it (shared/azureml/REFERENCE.md §5; the Blob
 * service REST API, x-ms-version 2021-08-06).
 *
 * A container is reached one of two ways:
 * - Shared Key: every request signed with HMAC-SHA256 under the account key
 *   (OpenSSL), per the Blob service's documented canonicalization
 *   ("Authorize with Shared Key": StringToSign, CanonicalizedHeaders,
 *   CanonicalizedResource — path-style URLs such as Azurite's put the
 *   account in the resource twice);
 * - SAS: the token's query appended to every URL, no Authorization header.
 * The key and the SAS are secrets: neither reaches a message, a trace line
 * or an error (URLs in messages lose their query; see http.h).
 *
 * What moves, and how (both as step waits, so a step can cancel them):
 * - blob_upload: a local file (one blob: `prefix` itself) or folder (one
 *   blob per file: `prefix/<relative path>`).  A blob that already exists
 *   with the same size and Content-MD5 is not sent again (a folder: one
 *   paged List Blobs of the prefix; a file: one HEAD), so an interrupted
 *   upload resumes where it stopped and a content-addressed prefix that is
 *   already complete costs one request.  Small files: Put Blob with
 *   Content-MD5; above BLOB_BLOCK_THRESHOLD: Put Block (each with its own
 *   Content-MD5) + Put Block List carrying the whole file's MD5 as
 *   x-ms-blob-content-md5.  Several blobs and blocks at once; files are
 *   read as they are sent; MD5s computed on the work pool.
 * - blob_download: the blob `prefix` (as a file) or every blob under
 *   `prefix/` (as a folder, List Blobs with paging) into `dest`.  Each blob
 *   is fetched with ranged Get Blob requests (several at once above
 *   BLOB_RANGE_SIZE) into "<file>.flowpart", checked (length, and
 *   Content-MD5 when the blob has one), fsynced, and only then renamed to
 *   its name: `dest` never holds a partial file under a real name.  Every
 *   range carries If-Match with the ETag the listing (or HEAD) gave, so a
 *   blob rewritten between two of its ranges is never stitched together
 *   from two versions: the service answers 412, and the blob is looked up
 *   again (HEAD) and downloaded again from its start, at most
 *   BLOB_CHANGED_RETRIES times; then the download fails, saying so.  A file
 *   already in `dest` with the blob's size (and MD5, when the blob has one)
 *   is kept: a resumed download redoes only what it had not finished.
 *   `dest` is flow's own (under .flow/): no symbolic link is followed on the
 *   way to it (nofollow.h).
 * Progress (bytes, files) is reported every 2 s as it goes, and once at the
 * end, for the live display.
 *
 * Nothing here knows of Lua. */
#ifndef FLOW_AZUREML_BLOB_H
#define FLOW_AZUREML_BLOB_H

#include "azureml/http.h"
#include "step_wait.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct work_pool;
struct blob_container;

#define BLOB_BLOCK_THRESHOLD (32ull << 20)   /* larger files go up in blocks */
#define BLOB_BLOCK_SIZE (8ull << 20)
#define BLOB_RANGE_SIZE (8ull << 20)         /* larger blobs come down in ranges */
#define BLOB_CHANGED_RETRIES 3               /* downloads again of a blob that changed meanwhile */

/* Where a container is and how to sign for it.  Exactly one of key and sas. */
struct blob_container_spec {
    const char *url;          /* the container: "https://acct.blob.core.windows.net/c" or
                               * path-style "http://127.0.0.1:10000/devstoreaccount1/c" */
    const char *account;      /* the storage account's name (Shared Key) */
    const char *key;          /* the account key, base64 (Shared Key), or NULL */
    const char *sas;          /* a SAS token's query, with or without '?', or NULL */
    /* List Blobs' maxresults: 0 leaves the service's default (5000); the
     * tests set a small one to make a listing come in several pages. */
    unsigned list_page_size;
};

/* NULL with a message (a key that is not base64, a URL that is not http(s)).
 * The spec's strings are copied; the key and SAS are wiped when freed.  The
 * HTTP client and the pool are the caller's and must outlive the container. */
struct blob_container *blob_container_new(struct http_client *http, struct work_pool *pool,
                                          const struct blob_container_spec *spec, char *err, size_t errlen);
/* Transfers still in flight must have been freed first. */
void blob_container_free(struct blob_container *c);

/* What a transfer has done so far (and, after done, in all). */
struct blob_progress {
    uint64_t bytes_total;     /* of everything to move (known after the listing) */
    uint64_t bytes_done;      /* moved, or found already there */
    uint64_t bytes_sent;      /* actually put on the wire (0 for a rerun that found all) */
    size_t files_total, files_done;
    size_t files_skipped;     /* already there with the same size and MD5 */
};
typedef void (*blob_progress_fn)(void *arg, const struct blob_progress *p);

/* Uploads the file or folder at local_path to blob name `prefix` (a file)
 * or under `prefix/` (a folder: the blobs under it that the folder does not
 * hold are deleted, so prefix/ then holds exactly the folder; an empty folder
 * uploads nothing).  done(w,
 * arg) once all is there, or on the first failure, or after a cancel; always
 * later from the loop.  progress may be NULL. */
struct step_wait *blob_upload(struct blob_container *c, const char *local_path, const char *prefix,
                              blob_progress_fn progress, step_wait_done_fn done, void *arg);

/* One file of blob_upload_files: where it is here, and its name under the
 * prefix. */
struct blob_file {
    const char *path, *rel;
    uint64_t size;
};

/* Uploads the files given (copied), each to `prefix/rel`, as blob_upload
 * uploads a folder's: one listing of the prefix, and what is there with the
 * same size and MD5 is not sent again.  For a caller that chose the files
 * itself (the code snapshot, with its own ignore rules). */
struct step_wait *blob_upload_files(struct blob_container *c, const char *prefix, const struct blob_file *files,
                                    size_t n, blob_progress_fn progress, step_wait_done_fn done, void *arg);

/* Sets blob `name`'s metadata to the "x-ms-meta-<name>: value" lines of
 * meta (NULL-terminated, copied): done after one Set Blob Metadata. */
struct step_wait *blob_set_metadata(struct blob_container *c, const char *name, const char *const *meta,
                                    step_wait_done_fn done, void *arg);

/* Downloads blob `prefix` (as_folder false: dest is a file) or every blob
 * under `prefix/` (dest a directory, made as needed; relative names are
 * checked: no "..", no absolute path, no empty segment).  A prefix with no
 * blob at all is an error naming it. */
struct step_wait *blob_download(struct blob_container *c, const char *prefix, bool as_folder, const char *dest,
                                blob_progress_fn progress, step_wait_done_fn done, void *arg);

/* What is at blob `prefix` (as_folder false) or under `prefix/`, without
 * moving it: one HEAD or a paged List Blobs.  After done,
 * blob_wait_stat_hash is a hash of each blob's name, size, MD5 and ETag (it
 * changes when any blob changes); no blob there is an error naming it. */
struct step_wait *blob_stat(struct blob_container *c, const char *prefix, bool as_folder, step_wait_done_fn done,
                            void *arg);
const char *blob_wait_stat_hash(const struct step_wait *w);

/* After done: NULL on success, else why ("cannot upload data/x.bin to
 * container/prefix/x.bin: …").  The progress in all. */
const char *blob_wait_error(const struct step_wait *w);
const struct blob_progress *blob_wait_progress(const struct step_wait *w);

/* Whether the blob `name` exists: done after one HEAD; then
 * blob_wait_error, and blob_wait_exists. */
struct step_wait *blob_exists(struct blob_container *c, const char *name, step_wait_done_fn done, void *arg);
bool blob_wait_exists(const struct step_wait *w);

/* Creates the container (PUT ?restype=container); one that exists already
 * is fine.  For tests and emulators: a datastore's container always exists
 * on Azure.  Then blob_wait_error. */
struct step_wait *blob_container_create(struct blob_container *c, step_wait_done_fn done, void *arg);

#endif
