/* reaper.h — a step's processes die with flow, even when flow gets no chance
 * to stop them (kill -9, a crash, the OOM killer).
 *
 * Before the first process flow starts, it starts a reaper: its own binary in
 * a hidden mode, in a process group of its own, ignoring the signals that stop
 * a run.  flow tells it the process group of each process it starts (proc.c
 * makes one per process) and forgets it once that process has exited, over a
 * socket of which flow holds the only other end.  When that socket closes with
 * groups still listed, flow died without stopping them: the reaper sends each
 * group SIGTERM, and SIGKILL to whatever is left 5 s later.
 *
 * flow tells the reaper of a process as soon as posix_spawn returns; a kill
 * landing between the two (microseconds, unless flow is descheduled right
 * there) leaves that one process to run on.  Processes that leave their
 * group (setsid, setpgid) are beyond its reach, as they are beyond Ctrl-C's.
 *
 * One extra process per run and two small messages per step, instead of a
 * helper process per step: steps start as fast as before.  (A per-step guard
 * using PR_SET_PDEATHSIG was measured at several ms per step, most of it
 * loading flow's shared libraries again.) */
#ifndef FLOW_REAPER_H
#define FLOW_REAPER_H

#include <stdbool.h>
#include <sys/types.h>

#define REAPER_ARG "__flow_reaper"

/* The binary to run as the reaper ("/proc/self/exe"); without this call there
 * is none (unit tests). */
void reaper_init(const char *exe);
/* Starts the reaper if there is none yet; false (with a warning, once) if it
 * cannot be started: the run goes on without one. */
bool reaper_start(void);
/* pgid's processes are to be stopped if flow dies / no longer. */
void reaper_watch(pid_t pgid);
void reaper_forget(pid_t pgid);
/* fd (the project's lock, .flow/lock) is held by the reaper too, from its
 * start or now: a killed flow's lock outlives it until its steps are
 * stopped, so that no run starts in the project while they still run. */
void reaper_hold(int fd);
/* At flow's exit: the reaper ends (at once when nothing is listed) and is reaped. */
void reaper_stop(void);

/* main() of the hidden mode (argv: REAPER_ARG, flow's process group): the
 * socket is file descriptor 3. */
int reaper_main(pid_t flow_group);

#endif
