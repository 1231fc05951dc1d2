/* loop.h — the one event loop: file descriptors (pipes, pidfds, later libcurl's
 * sockets), timers and SIGINT/SIGTERM/SIGHUP, all on one thread with epoll. Nothing polls. */
#ifndef FLOW_LOOP_H
#define FLOW_LOOP_H

#include <stdbool.h>
#include <stddef.h>

struct loop;
typedef void (*loop_fd_fn)(void *arg, int fd, unsigned events);
typedef void (*loop_timer_fn)(void *arg);

enum { LOOP_READ = 1, LOOP_WRITE = 2 };

/* NULL with the reason in err if the kernel refuses an epoll or signalfd. */
struct loop *loop_new(char *err, size_t errlen);
void loop_free(struct loop *loop);

/* Calls fn from loop_run_once while fd is ready; watching an fd again replaces
 * its callback.  -1 with errno set if epoll refuses the fd (nothing changes then). */
int loop_watch(struct loop *loop, int fd, unsigned events, loop_fd_fn fn, void *arg);
/* Safe from a callback, for any fd, including one with an event still pending in
 * the batch being dispatched (that event is then dropped). */
void loop_unwatch(struct loop *loop, int fd);

/* One-shot timer; returns an id for loop_cancel_timer (ids are never reused). */
unsigned long loop_add_timer(struct loop *loop, double delay_s, loop_timer_fn fn, void *arg);
void loop_cancel_timer(struct loop *loop, unsigned long id);

/* Waits (at most max_wait_s; < 0 means until something happens) and dispatches. */
void loop_run_once(struct loop *loop, double max_wait_s);

/* SIGINT, SIGTERM and SIGHUP (unless ignored when flow started, as under
 * nohup) are blocked and delivered through the loop: this returns how many
 * arrived since the loop was made (so a second Ctrl-C can escalate). */
int loop_interrupts(struct loop *loop);
/* The same without a system call when the last look is less than
 * LOOP_LOOK_EVERY old: for a step's own code, which looks as it enters and
 * leaves sched.guard (a run of 100,000 Lua steps read the signal descriptor
 * 200,000 times for it), and for the scheduler between two steps it starts.
 * A signal is seen at most that late; a wait sees it at once, and the
 * scheduler looks exactly each time the loop hands it control. */
#define LOOP_LOOK_EVERY 0.005
int loop_interrupts_recent(struct loop *loop);
/* Forgets the interrupts so far (flow repl: a Ctrl-C ends what it stopped,
 * not the session). */
void loop_reset_interrupts(struct loop *loop);
/* Which signal the first of them was (0: none yet): flow exits 129 after SIGHUP. */
int loop_first_signal(struct loop *loop);
/* SIGTERM or SIGHUP if one came since the last reset, whatever came before
 * it (the first of them when it was one), else 0: flow repl ends on it. */
int loop_ending_signal(struct loop *loop);
/* The signal mask children must be started with (everything unblocked). */
void loop_child_sigmask(void *sigset_out);

#endif
