/* stat_prefetch.h — the up-to-date check's stats of recorded outputs, taken
 * ahead on a thread of its own.
 *
 * A no-op rerun of 10,000 command steps stats each step's recorded output
 * files to learn that they are as their records say: an eighth of the run
 * on its one busy core, the kernel walking each path.  A run starts this
 * thread once its script has run, while it plans the run (preload.h): it
 * stats the files of the store's records in the store's order (the order
 * their steps ended: near the check's own), so that each stat is there
 * when the check comes to it.  A stat taken a little early is as good as
 * one taken now: the check has no order among the steps it passes, and a
 * file that changes while it runs may be seen either way whichever stats
 * it; nothing but flow's own planning runs between.  (Not before the
 * script has run: a pipeline.lua may write an output as it loads, after a
 * stat taken meanwhile.)  A stat more than 0.5 s old is not handed out
 * (the check stats the file again), so that a long plan or check never
 * decides on an old one.  Paths are taken relative to the working
 * directory of the start, as the store's are, whatever chdir comes later.
 *
 * The thread only reads the store: stop it (stat_prefetch_stop) before the
 * store changes or goes.  Nothing here knows Lua. */
#ifndef FLOW_STAT_PREFETCH_H
#define FLOW_STAT_PREFETCH_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

struct state_store;
struct stat_prefetch;
struct file_stamp;

/* Starts stat-ing the outputs of s's records that are files ('f', and the
 * cached values, 'c'); NULL when there is none, or no thread could start
 * (then each stat is the caller's, as without it). */
struct stat_prefetch *stat_prefetch_start(const struct state_store *s);

/* The stat of output k of the record in slot `slot`, when the thread has
 * taken it, it succeeded and it is at most 0.5 s old: true with its stamp
 * and mode (what the hash cache reads).  False: stat it yourself (not taken
 * yet, failed, too old, or not a file output).  Each is handed out once. */
bool stat_prefetch_take(struct stat_prefetch *p, size_t slot, size_t k, struct file_stamp *stamp, mode_t *mode);

/* Stops the thread where it is, waits for it and frees everything. */
void stat_prefetch_stop(struct stat_prefetch *p);

#endif
