/* journal.h — an append-only log of lines made durable in the background.
 * Each line goes to the file with one write() (so a crash or kill -9 never
 * leaves half a line from us); a syncer thread then fdatasyncs, folding all
 * the lines appended meanwhile into one sync (group commit).  Appending never
 * waits for the disk; journal_sync does. */
#ifndef FLOW_JOURNAL_H
#define FLOW_JOURNAL_H

#include <stdbool.h>
#include <stddef.h>

struct journal;

/* Opens (creating it and its parent directories) `path` for appending, and
 * starts the syncer (a new file's directory is synced with its first sync).
 * NULL with a message naming the path on failure. */
struct journal *journal_open(const char *path, char *err, size_t errlen);

/* Appends `line` plus a '\n' if it does not end with one.  A `durable`
 * line (one that records work) asks for a sync without waiting for it; one
 * that need not be durable on its own (a run's start, a step found up to
 * date, the end of a run in which nothing ran) asks for none until the
 * journal holds a durable line, whose sync covers it; from then on every
 * line is synced.  So a run in which nothing ran syncs nothing, not even the
 * new file's directory.  -1 with a message if the write failed or an
 * earlier background sync did. */
int journal_append(struct journal *j, const char *line, size_t len, bool durable, char *err, size_t errlen);

/* Waits until everything appended so far is on disk. */
int journal_sync(struct journal *j, char *err, size_t errlen);

/* Syncs, stops the syncer, closes the file and frees j (also on failure). */
int journal_close(struct journal *j, char *err, size_t errlen);

#endif
