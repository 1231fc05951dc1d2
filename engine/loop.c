/* loop.c — epoll over fds, a sorted timer list (few timers: step timeouts and
 * retry back-offs), and a signalfd for interrupts (SIGINT, SIGTERM, SIGHUP). */
#include "loop.h"
#include "util.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <unistd.h>

/* fn is NULL once unwatched: the watcher may still be named by an event later in
 * the batch being dispatched, so it is freed only after that batch. */
struct watcher { int fd; loop_fd_fn fn; void *arg; };
struct timer { unsigned long id; double when; loop_timer_fn fn; void *arg; };

struct loop {
    int epfd, sigfd;
    struct watcher **watchers;      /* indexed by fd */
    size_t n_watchers;
    struct watcher **retired;       /* unwatched during a dispatch, freed after it */
    size_t n_retired, cap_retired;
    int dispatching;                /* depth: a callback may run the loop itself */
    struct timer *timers;           /* sorted by `when` */
    size_t n_timers, cap_timers;
    unsigned long next_timer_id;
    int interrupts;
    int first_signal;               /* the signal of the first interrupt, 0 before */
    bool ending;                    /* a SIGTERM or SIGHUP came, whatever came first */
    double looked_at;               /* monotonic: loop_interrupts_recent's last read of sigfd */
    sigset_t saved_mask;
};

struct loop *loop_new(char *err, size_t errlen)
{
    struct loop *loop = xcalloc(1, sizeof *loop);
    loop->epfd = loop->sigfd = -1;
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGTERM);
    /* A closed terminal stops the run like Ctrl-C — unless SIGHUP was ignored
     * before flow started (nohup): blocked, it would be queued, not ignored. */
    struct sigaction hup;
    if (sigaction(SIGHUP, NULL, &hup) == 0 && hup.sa_handler != SIG_IGN) sigaddset(&mask, SIGHUP);
    sigprocmask(SIG_BLOCK, &mask, &loop->saved_mask);
    struct epoll_event ev = { .events = EPOLLIN, .data.ptr = NULL };
    if ((loop->epfd = epoll_create1(EPOLL_CLOEXEC)) < 0 ||
        (loop->sigfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK)) < 0 ||
        epoll_ctl(loop->epfd, EPOLL_CTL_ADD, loop->sigfd, &ev) != 0) {
        errf(err, errlen, "cannot create the event loop: %s", strerror(errno));
        loop_free(loop);
        return NULL;
    }
    loop->next_timer_id = 1;
    return loop;
}

static void free_retired(struct loop *loop)
{
    for (size_t i = 0; i < loop->n_retired; i++) free(loop->retired[i]);
    loop->n_retired = 0;
}

void loop_free(struct loop *loop)
{
    if (!loop) return;
    for (size_t i = 0; i < loop->n_watchers; i++) free(loop->watchers[i]);
    free(loop->watchers);
    free_retired(loop);
    free(loop->retired);
    free(loop->timers);
    if (loop->epfd >= 0) close(loop->epfd);
    if (loop->sigfd >= 0) close(loop->sigfd);
    sigprocmask(SIG_SETMASK, &loop->saved_mask, NULL);
    free(loop);
}

int loop_watch(struct loop *loop, int fd, unsigned events, loop_fd_fn fn, void *arg)
{
    if (fd < 0) {
        errno = EBADF;
        return -1;
    }
    if ((size_t)fd >= loop->n_watchers) {
        size_t n = (size_t)fd * 2 + 16;
        loop->watchers = xrealloc(loop->watchers, n * sizeof *loop->watchers);
        memset(loop->watchers + loop->n_watchers, 0, (n - loop->n_watchers) * sizeof *loop->watchers);
        loop->n_watchers = n;
    }
    struct watcher *w = loop->watchers[fd];
    bool added = !w;
    if (added) w = xmalloc(sizeof *w);
    struct epoll_event ev = { .data.ptr = w };
    if (events & LOOP_READ) ev.events |= EPOLLIN;
    if (events & LOOP_WRITE) ev.events |= EPOLLOUT;
    if (epoll_ctl(loop->epfd, added ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, fd, &ev) != 0) {
        int saved = errno;
        if (added) free(w);          /* a modified watcher keeps its old callback */
        errno = saved;
        return -1;
    }
    *w = (struct watcher){ fd, fn, arg };
    loop->watchers[fd] = w;
    return 0;
}

void loop_unwatch(struct loop *loop, int fd)
{
    if (fd < 0 || (size_t)fd >= loop->n_watchers || !loop->watchers[fd]) return;
    struct watcher *w = loop->watchers[fd];
    /* Callers unwatch before they close the fd, so this does not fail. */
    epoll_ctl(loop->epfd, EPOLL_CTL_DEL, fd, NULL);
    loop->watchers[fd] = NULL;
    if (!loop->dispatching) {
        free(w);
        return;
    }
    w->fn = NULL;
    ARRAY_GROW(loop->retired, loop->n_retired, loop->cap_retired);
    loop->retired[loop->n_retired++] = w;
}

unsigned long loop_add_timer(struct loop *loop, double delay_s, loop_timer_fn fn, void *arg)
{
    ARRAY_GROW(loop->timers, loop->n_timers, loop->cap_timers);
    double when = monotonic_seconds() + delay_s;
    size_t i = loop->n_timers;
    while (i > 0 && loop->timers[i - 1].when > when) {
        loop->timers[i] = loop->timers[i - 1];
        i--;
    }
    loop->timers[i] = (struct timer){ loop->next_timer_id++, when, fn, arg };
    loop->n_timers++;
    return loop->timers[i].id;
}

void loop_cancel_timer(struct loop *loop, unsigned long id)
{
    for (size_t i = 0; i < loop->n_timers; i++)
        if (loop->timers[i].id == id) {
            memmove(&loop->timers[i], &loop->timers[i + 1], (loop->n_timers - i - 1) * sizeof *loop->timers);
            loop->n_timers--;
            return;
        }
}

static void drain_signals(struct loop *loop)
{
    struct signalfd_siginfo si;
    while (read(loop->sigfd, &si, sizeof si) == (ssize_t)sizeof si) {
        if (!loop->interrupts) loop->first_signal = (int)si.ssi_signo;
        if (si.ssi_signo == SIGTERM || si.ssi_signo == SIGHUP) loop->ending = true;
        loop->interrupts++;
    }
}

static void fire_due_timers(struct loop *loop)
{
    double now = monotonic_seconds();
    while (loop->n_timers && loop->timers[0].when <= now) {
        struct timer t = loop->timers[0];
        memmove(&loop->timers[0], &loop->timers[1], (loop->n_timers - 1) * sizeof *loop->timers);
        loop->n_timers--;
        t.fn(t.arg);                 /* may add or cancel timers */
    }
}

void loop_run_once(struct loop *loop, double max_wait_s)
{
    double wait = max_wait_s;
    if (loop->n_timers) {
        double until = loop->timers[0].when - monotonic_seconds();
        if (until < 0) until = 0;
        if (wait < 0 || until < wait) wait = until;
    }
    int timeout_ms = wait < 0 ? -1 : (int)ceil(wait * 1000);
    struct epoll_event evs[64];
    int n = epoll_wait(loop->epfd, evs, 64, timeout_ms);
    /* A callback may unwatch (and close, and reuse the number of) this or a later fd
     * in evs: an unwatched watcher stays allocated, with no fn, until the outermost
     * dispatch is over, so every data.ptr in evs stays valid and is never confused
     * with a newer watcher of the same fd. */
    loop->dispatching++;
    for (int i = 0; i < n; i++) {
        struct watcher *w = evs[i].data.ptr;
        if (!w) { drain_signals(loop); continue; }
        unsigned events = 0;
        if (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) events |= LOOP_READ;
        if (evs[i].events & EPOLLOUT) events |= LOOP_WRITE;
        if (w->fn) w->fn(w->arg, w->fd, events);
    }
    if (--loop->dispatching == 0) free_retired(loop);
    fire_due_timers(loop);
}

int loop_interrupts(struct loop *loop)
{
    drain_signals(loop);         /* also count those not yet seen by a wait */
    return loop->interrupts;
}

int loop_interrupts_recent(struct loop *loop)
{
    double now = monotonic_seconds();
    if (now - loop->looked_at >= LOOP_LOOK_EVERY) {
        drain_signals(loop);
        loop->looked_at = now;
    }
    return loop->interrupts;
}

void loop_reset_interrupts(struct loop *loop)
{
    drain_signals(loop);
    loop->interrupts = 0;
    loop->first_signal = 0;
    loop->ending = false;
}

int loop_ending_signal(struct loop *loop)
{
    loop_interrupts(loop);                 /* what the descriptor holds */
    if (!loop->ending) return 0;
    return loop->first_signal == SIGTERM || loop->first_signal == SIGHUP ? loop->first_signal : SIGTERM;
}

int loop_first_signal(struct loop *loop)
{
    drain_signals(loop);
    return loop->first_signal;
}

void loop_child_sigmask(void *sigset_out)
{
    sigemptyset((sigset_t *)sigset_out);
}
