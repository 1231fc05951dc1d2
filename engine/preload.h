/* preload.h — the state file and the hash cache of a run, read ahead on a
 * thread of their own while the script declares its steps.
 *
 * A rerun reads both before its up-to-date check: 0.04 s of a no-op rerun
 * of 100,000 Lua steps (45 MB of state.log, each record's checksum) on the
 * one core the script keeps busy, while the other is idle.  The thread
 * reads them as the run would (state_store_open, hashcache_load); the run
 * takes what it read only when the file is still as it was when the thread
 * began (device, inode, size, times) and the working directory is the
 * same, which holds unless something wrote the file meanwhile — another
 * flow run, before this one took the project's lock; then the run reads it
 * again itself.  Once the script has run (preload_stat_outputs) and the
 * state is read, the stats of its records' output files start
 * (stat_prefetch.h), which the up-to-date check takes later.  Nothing here
 * knows Lua. */
#ifndef FLOW_PRELOAD_H
#define FLOW_PRELOAD_H

#include <stdbool.h>

struct preload;
struct stat_prefetch;
struct state_store;
struct hashcache;

/* Starts reading both (paths relative to the working directory, as the run
 * names them); NULL when no thread could start. */
struct preload *preload_start(const char *state_path, const char *hashes_path);

/* What the thread read of `path`, when it is the path it read and that file
 * has not changed since: the caller owns it (and *warning is
 * state_store_open's).  NULL: read it yourself.  Waits for the thread;
 * each is handed out once.  With the state come the stats of its records'
 * files when preload_stat_outputs started them (stat_prefetch.h; *ahead,
 * NULL if none): the caller stops them before the store changes or goes.
 * With ahead NULL they are stopped here. */
struct state_store *preload_take_state(struct preload *p, const char *path, const char **warning,
                                       struct stat_prefetch **ahead);
struct hashcache *preload_take_hashes(struct preload *p, const char *path);

/* The script has run: the stats of the state's recorded output files start
 * now, or as soon as the thread has read the state (it does not wait). */
void preload_stat_outputs(struct preload *p);

/* Waits for the thread (before the working directory changes: the thread
 * reads relative to it). */
void preload_wait(struct preload *p);
/* Whether both were asked for (the preload can go). */
bool preload_done(const struct preload *p);

/* Waits for the thread, frees what was not taken. */
void preload_free(struct preload *p);

#endif
