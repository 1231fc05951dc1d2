/* statestore.h — each step's last successful run, kept between runs in one
 * append-only file of checksummed records (.flow/cache/state.log; the
 * format is in docs/data.md).  Opening reads the file once (mmap) and indexes
 * the newest record of each step.  A run's new records are appended as they come,
 * STATE_STORE_STREAM_BYTES of them to a write, without a sync (the file is
 * made first when it is missing or unusable); the save writes the rest and
 * makes them all durable with one fdatasync, and the file is rewritten
 * (temporary file + rename) when most of it is superseded records.  Of a
 * record it has written, the store keeps in memory only what the engine
 * reads (its fingerprint and outputs) and reads the body back on demand.
 *
 * A record holds what the engine itself checks — the step's fingerprint and
 * its outputs (dataset, path, content hash) — and an opaque body (JSON of
 * the fingerprint's parts and the output records: step_record.h makes
 * records) that only the stdlib decodes.  Nothing here knows Lua. */
#ifndef FLOW_STATESTORE_H
#define FLOW_STATESTORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define STATE_STORE_MAX_FILE ((size_t)1 << 31)   /* a larger file is not read (every step runs) */
#define STATE_STORE_MAX_RECORD ((size_t)1 << 26)
#define STATE_STORE_STREAM_BYTES ((size_t)64 * 1024)     /* new records written ahead of the save */

/* One output: kind 'f' (a file or folder at path), 'm' (a memory value),
 * 'u' (a value that could not be cached: no hash). */
struct state_out {
    char kind;
    const char *dataset, *path, *hash;        /* path and hash may be "" */
};

struct state_rec {
    const char *name, *fp;
    const char *body;                         /* NULL for a record put by this process: state_store_body */
    size_t body_len;
    double time;
    size_t n_outs;
    struct state_out *outs;
};

struct state_store;

/* Reads `path` (a missing file is an empty store).  Damaged records are
 * skipped and a torn tail (a kill mid-append) is ignored; *warning (may be
 * NULL) is set to a message when the file could not be used at all.  Returns
 * NULL with err set only when the file exists and cannot be opened or read. */
struct state_store *state_store_open(const char *path, const char **warning, char *err, size_t errlen);
/* Where the values too large for a record are cached: values/ beside the
 * file (.flow/cache/values for .flow/cache/state.log). */
const char *state_store_values_dir(const struct state_store *s);
void state_store_free(struct state_store *s);

const struct state_rec *state_store_get(const struct state_store *s, const char *name);
/* Where step `name`'s record is, for state_store_at, or STATE_STORE_NO_SLOT.
 * A slot is the step's for the store's life (a put replaces the record in
 * it, and none is removed): a caller asking about one step several times a
 * run looks its name up once. */
#define STATE_STORE_NO_SLOT ((size_t)-1)
size_t state_store_slot(const struct state_store *s, const char *name);
/* Asks the memory for the place state_store_slot will look `name` up first
 * (strmap_prefetch): a pass over the steps asks a few steps ahead. */
void state_store_prefetch(const struct state_store *s, const char *name);
/* The body of rec (one of s's records, as get or at returned it): in the
 * mapped file, or read back for a record put by this process (valid until
 * the next call).  NULL with errno set when it cannot be read back, or its
 * bytes are no longer what was written (the file changed under the run). */
const char *state_store_body(struct state_store *s, const struct state_rec *rec, size_t *len);
/* Live records in no particular order: i from 0 to state_store_count() - 1. */
size_t state_store_count(const struct state_store *s);
const struct state_rec *state_store_at(const struct state_store *s, size_t i);

/* Records (copies) rec as step rec->name's last successful run, replacing any;
 * its record may be written to the file before the save (no sync: a crash
 * leaves whole records, and at most one torn one at the end).  A write that
 * fails here is the save's to try again and report.
 * -1 with a message, the store unchanged, when rec cannot be a record: an
 * empty name, or more than STATE_STORE_MAX_RECORD bytes encoded. */
int state_store_put(struct state_store *s, const struct state_rec *rec, char *err, size_t errlen);

/* From now on, puts are written to the file as they come (a run's store,
 * under the project's lock).  Without it they wait for the save, so that a
 * command that only reads (and folds journals in) writes nothing. */
void state_store_stream(struct state_store *s);

/* Whether puts (or a rewrite) wait for state_store_save. */
bool state_store_unsaved(const struct state_store *s);
/* Makes every put durable: appends those not written yet and syncs, or
 * rewrites the file with only live records (temporary file, rename) when
 * superseded or damaged records take more than half of it.  Never follows a
 * link under .flow.  -1 with a message naming the file. */
int state_store_save(struct state_store *s, char *err, size_t errlen);

/* While a thread other than its opener's uses the store (step.c's recorder
 * puts a first run's records), everyone else on the opener's thread -- the
 * Lua side through lua/l_state.c, the up-to-date check, another run sharing
 * the store -- claims it before each use: claim(arg, change) returns once
 * that thread has let go of it for now; `change`: the caller will change
 * it.  One claim at a time: false (nothing set) while another is set.  A
 * NULL claim clears it. */
bool state_store_set_claim(struct state_store *s, void (*claim)(void *arg, bool change), void *arg);
void state_store_claim(struct state_store *s, bool change);

/* The CRC-32 (IEEE, as zlib's crc32) each record's frame carries. */
uint32_t state_store_crc32(const void *data, size_t n);
/* What opening found, for tests and --explain of the store itself. */
struct state_store_stats { size_t records, damaged, torn_bytes, file_bytes; };
struct state_store_stats state_store_stats(const struct state_store *s);

#endif
