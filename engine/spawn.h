/* spawn.h — starting a command step's program in a child process.
 *
 * Two ways to one result: spawn_at runs a program whose path is known (the
 * common case: command_path.h found argv[0] in PATH) through vfork and
 * execve, done here; spawn_search hands the PATH search to posix_spawnp (a
 * name with a '/', a relative PATH entry, a name not found).  Either way the
 * child starts with stdin on /dev/null, stdout and stderr on the given
 * descriptors, in the given directory, in a process group of its own, with
 * the given signal mask, the `defaults` signals at SIG_DFL and every other
 * signal that had a handler at SIG_DFL too (an ignored one stays ignored:
 * nohup).  tests/unit/test_spawn.c runs both and compares what the child
 * sees.
 *
 * Why not posix_spawn for the first: glibc's asks the kernel for the
 * descriptor limit for every file action (5 calls), maps and unmaps a stack
 * for the child (an unmap in a process with threads is a TLB shootdown on
 * every core), and the parent waits through all of it.  A microbenchmark of
 * /bin/true (2,000 spawns, flow's attributes, two idle threads) blocked the
 * parent 125 µs a spawn under posix_spawn and 100 µs here. */
#ifndef FLOW_SPAWN_H
#define FLOW_SPAWN_H

#include <signal.h>
#include <sys/types.h>

struct spawn_plan {
    char *const *argv, *const *envp;
    int stdout_fd, stderr_fd;           /* become the child's 1 and 2 (descriptors above 2) */
    const char *cwd;                    /* NULL: the parent's */
    const sigset_t *mask;               /* the child's signal mask */
    const sigset_t *defaults;           /* signals set to SIG_DFL, even when ignored */
};

/* Runs the program at `path` (absolute).  0 with *pid, or an errno value:
 * the exec's own (ENOENT: the file is gone) when the child could not run it,
 * and the child is reaped. */
int spawn_at(const char *path, const struct spawn_plan *plan, pid_t *pid);

/* Runs plan->argv[0], looked up in PATH as posix_spawnp does.  0 or an errno value. */
int spawn_search(const struct spawn_plan *plan, pid_t *pid);

#endif
