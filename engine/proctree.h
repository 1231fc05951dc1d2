/* proctree.h — the processes of a step outside its process group.
 *
 * flow starts each process of a step in a process group of its own and stops
 * the step by signalling that group.  A launcher may put what it starts in
 * groups of their own: Open MPI's mpirun gives each rank one, so a SIGKILL
 * to mpirun's group left the ranks running, reparented to PID 1, for ever.
 * This finds those groups — every group holding a descendant of a member of
 * the step's group — from /proc, so that whoever stops the step signals them
 * too, and remembers them: once their parent is gone they can no longer be
 * found.  (A process that leaves with setsid and is then orphaned before it
 * is seen is beyond reach, as it is beyond Ctrl-C's.) */
#ifndef FLOW_PROCTREE_H
#define FLOW_PROCTREE_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* The process groups other than `pgid` that hold a descendant of one of its
 * members (or of theirs), added to *groups (n, cap: an ARRAY_GROW array)
 * unless already there; never `flow_group` (flow's own, where a process
 * that joined it is not the step's alone), nor the caller's.  Reads /proc;
 * finds nothing where it cannot. */
void proctree_groups(pid_t pgid, pid_t flow_group, pid_t **groups, size_t *n, size_t *cap);

/* Process pid's state letter (R, S, Z …), parent and group, from
 * /proc/<pid>/stat; false when it is gone or cannot be read. */
bool proctree_stat(pid_t pid, char *state, pid_t *ppid, pid_t *pgid);

/* Signals group pgid, then each of groups[0..n). */
void proctree_signal(pid_t pgid, const pid_t *groups, size_t n, int sig);

#endif
