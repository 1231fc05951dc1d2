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

struct watcher { int fd; loop_fd_fn fn; void *arg; };
struct timer { unsigned long id; double when; loop_timer_fn fn; void *arg; };

struct loop {
    int epfd, sigfd;
    struct watcher **watchers;      /* indexed by fd */
    size_t n_watchers;
    struct timer *timers;           /* sorted by `when` */
    size_t n_timers, cap_timers;
    unsigned long next_timer_id;
    int interrupts;
    int first_signal;               /* the signal of the first interrupt, 0 before */
    sigset_t saved_mask;
};

struct loop *loop_new(void)
{
    struct loop *loop = xcalloc(1, sizeof *loop);
    loop->epfd = epoll_create1(EPOLL_CLOEXEC);
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGTERM);
    /* A closed terminal stops the run like Ctrl-C — unless SIGHUP was ignored
     * before flow started (nohup): blocked, it would be queued, not ignored. */
    struct sigaction hup;
    if (sigaction(SIGHUP, NULL, &hup) == 0 && hup.sa_handler != SIG_IGN) sigaddset(&mask, SIGHUP);
    sigprocmask(SIG_BLOCK, &mask, &loop->saved_mask);
    loop->sigfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
    if (loop->epfd < 0 || loop->sigfd < 0) {
        fprintf(stderr, "flow: cannot create the event loop: %s\n", strerror(errno));
        exit(2);
    }
    struct epoll_event ev = { .events = EPOLLIN, .data.ptr = NULL };
    epoll_ctl(loop->epfd, EPOLL_CTL_ADD, loop->sigfd, &ev);
    loop->next_timer_id = 1;
    return loop;
}

void loop_free(struct loop *loop)
{
    if (!loop) return;
    for (size_t i = 0; i < loop->n_watchers; i++) free(loop->watchers[i]);
    free(loop->watchers);
    free(loop->timers);
    close(loop->epfd);
    close(loop->sigfd);
    sigprocmask(SIG_SETMASK, &loop->saved_mask, NULL);
    free(loop);
}

int loop_watch(struct loop *loop, int fd, unsigned events, loop_fd_fn fn, void *arg)
{
    if ((size_t)fd >= loop->n_watchers) {
        size_t n = (size_t)fd * 2 + 16;
        loop->watchers = xrealloc(loop->watchers, n * sizeof *loop->watchers);
        memset(loop->watchers + loop->n_watchers, 0, (n - loop->n_watchers) * sizeof *loop->watchers);
        loop->n_watchers = n;
    }
    struct watcher *w = loop->watchers[fd];
    int op = w ? EPOLL_CTL_MOD : EPOLL_CTL_ADD;
    if (!w) w = loop->watchers[fd] = xmalloc(sizeof *w);
    *w = (struct watcher){ fd, fn, arg };
    struct epoll_event ev = { .data.ptr = w };
    if (events & LOOP_READ) ev.events |= EPOLLIN;
    if (events & LOOP_WRITE) ev.events |= EPOLLOUT;
    return epoll_ctl(loop->epfd, op, fd, &ev);
}

void loop_unwatch(struct loop *loop, int fd)
{
    if (fd < 0 || (size_t)fd >= loop->n_watchers || !loop->watchers[fd]) return;
    epoll_ctl(loop->epfd, EPOLL_CTL_DEL, fd, NULL);
    free(loop->watchers[fd]);
    loop->watchers[fd] = NULL;
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
    for (int i = 0; i < n; i++) {
        struct watcher *w = evs[i].data.ptr;
        if (!w) { drain_signals(loop); continue; }
        unsigned events = 0;
        if (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) events |= LOOP_READ;
        if (evs[i].events & EPOLLOUT) events |= LOOP_WRITE;
        /* A callback may unwatch this or a later fd in evs: look the watcher up again. */
        int fd = w->fd;
        if ((size_t)fd < loop->n_watchers && loop->watchers[fd] == w) w->fn(w->arg, fd, events);
    }
    fire_due_timers(loop);
}

int loop_interrupts(struct loop *loop)
{
    drain_signals(loop);         /* also count those not yet seen by a wait */
    return loop->interrupts;
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
