/* reaper.c — see reaper.h.  The first half runs in flow, the second
 * (reaper_main) in the reaper process. */
#include "reaper.h"
#include "proctree.h"
#include "ui.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define REAPER_FD 3
#define GRACE_S 5
#define BATCH_NS (2 * 1000 * 1000)
#define SEND_WAIT_MS 100
/* How reaper_stop wakes the reaper: a signal whose default action is to be
 * ignored, so that one that comes before the reaper's handler is in place
 * (a run that ends at once) cannot kill it. */
#define REAPER_WAKE SIGURG

static const char *reaper_exe;
static int sock = -1;
static pid_t reaper_pid;
static bool failed;
static int held_fd = -1;           /* reaper_hold's */

/* fd, passed to the reaper (SCM_RIGHTS, with the value 0, which names no
 * group): the reaper holds it open until it ends. */
static void send_fd(int fd)
{
    int32_t zero = 0;
    struct iovec iov = { &zero, sizeof zero };
    union { char buf[CMSG_SPACE(sizeof(int))]; struct cmsghdr align; } u;
    memset(&u, 0, sizeof u);
    struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf };
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof fd);
    (void)sendmsg(sock, &msg, MSG_NOSIGNAL);   /* (without it, the lock ends with flow: as before) */
}

void reaper_hold(int fd)
{
    held_fd = fd;
    if (sock >= 0) send_fd(fd);
}

void reaper_init(const char *exe) { reaper_exe = exe; }

bool reaper_start(void)
{
    if (sock >= 0) return true;
    if (!reaper_exe || failed) return false;
    /* SEQPACKET: each message arrives whole or not at all, even when one is dropped. */
    int sv[2];
    int rc = socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) == 0 ? 0 : errno;
    if (rc == 0) {
        posix_spawn_file_actions_t fa;
        posix_spawnattr_t attr;
        sigset_t none;
        sigemptyset(&none);
        char group[24];
        snprintf(group, sizeof group, "%ld", (long)getpgrp());     /* flow's: never one of a step's (proctree.h) */
        char *argv[] = { "flow", REAPER_ARG, group, NULL };
        if ((rc = posix_spawn_file_actions_init(&fa)) == 0) {
            if ((rc = posix_spawnattr_init(&attr)) == 0) {
                if (!(rc = posix_spawn_file_actions_adddup2(&fa, sv[1], REAPER_FD)) &&
                    !(rc = posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0)) &&
                    /* not flow's stdout or stderr: a pipe reader must see their end when flow ends */
                    !(rc = posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0)) &&
                    !(rc = posix_spawn_file_actions_adddup2(&fa, 1, 2)) &&
                    !(rc = posix_spawnattr_setsigmask(&attr, &none)) &&
                    /* its own group: a kill of flow's group (or Ctrl-C) must leave it standing */
                    !(rc = posix_spawnattr_setpgroup(&attr, 0)) &&
                    !(rc = posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETPGROUP)))
                    rc = posix_spawn(&reaper_pid, reaper_exe, &fa, &attr, argv, environ);
                posix_spawnattr_destroy(&attr);
            }
            posix_spawn_file_actions_destroy(&fa);
        }
        close(sv[1]);
        if (rc == 0) {
            sock = sv[0];
            struct timeval wait = { 0, SEND_WAIT_MS * 1000 };
            (void)setsockopt(sock, SOL_SOCKET, SO_SNDTIMEO, &wait, sizeof wait);
            if (held_fd >= 0) send_fd(held_fd);
        } else {
            close(sv[0]);
        }
    }
    if (rc != 0) {
        failed = true;
        ui_warn("cannot start the process that stops steps if flow is killed (%s); "
                "if flow is killed, its steps keep running", strerror(rc));
        return false;
    }
    return true;
}

static void tell(int32_t v)
{
    if (sock < 0) return;
    /* Never stop a run for this: a reaper that is gone or stuck costs this
     * one safeguard, nothing else.  A full socket (the reaper takes its
     * messages in batches) is waited on for at most SEND_WAIT_MS, once: a
     * reaper that lets that pass is not waited for again. */
    static bool behind;
    if (send(sock, &v, sizeof v, MSG_NOSIGNAL | MSG_DONTWAIT) >= 0 || behind) return;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return;          /* gone: nothing to wait for */
    if (send(sock, &v, sizeof v, MSG_NOSIGNAL) < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        behind = true;                 /* SO_SNDTIMEO passed */
        ui_warn("the process that stops steps if flow is killed is not keeping up; "
                "if flow is killed, some of its steps may keep running");
    }
}

void reaper_stop(void)
{
    if (sock < 0) return;
    close(sock);
    sock = -1;
    kill(reaper_pid, REAPER_WAKE);     /* ends its pause between batches: flow's exit does not wait it out */
    waitpid(reaper_pid, NULL, 0);      /* no zombie left where PID 1 does not reap */
}

void reaper_watch(pid_t pgid) { if (pgid > 0) tell((int32_t)pgid); }
void reaper_forget(pid_t pgid) { if (pgid > 0) tell(-(int32_t)pgid); }

/* ---- the reaper process --------------------------------------------------- */

static bool any_alive(const pid_t *groups, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (kill(-groups[i], 0) == 0) return true;
    return false;
}

static void woken(int sig) { (void)sig; }

int reaper_main(pid_t flow_group)
{
    /* It lives exactly as long as flow: the signals that stop a run are for flow. */
    static const int ignored[] = { SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGTSTP, SIGTTIN, SIGTTOU };
    for (size_t i = 0; i < sizeof ignored / sizeof *ignored; i++) signal(ignored[i], SIG_IGN);
    /* REAPER_WAKE (reaper_stop) only interrupts a pause: no SA_RESTART */
    struct sigaction wake = { .sa_handler = woken };
    sigemptyset(&wake.sa_mask);
    sigaction(REAPER_WAKE, &wake, NULL);
    pid_t *groups = NULL;
    size_t n = 0, cap = 0;
    int held = -1;                 /* the project's lock, reaper_hold's: closed at the end, by the exit */
    /* flow sends two messages a step (watch, forget).  Woken for each, the
     * reaper would cost a run of many short steps two context switches a
     * step on both sides; so it takes what has gathered, then sleeps a
     * moment (BATCH_NS) before it waits again.  The socket holds hundreds of
     * messages; a killed flow's end is seen at most that moment late (a flow
     * that ends normally cuts the pause short: reaper_stop). */
    struct timespec batch = { 0, BATCH_NS };
    for (bool wait = true;;) {
        int32_t v;
        /* (an fd flow passes, its project's lock, is installed here and
         * held open until the reaper ends: reaper_hold) */
        union { char buf[CMSG_SPACE(sizeof(int))]; struct cmsghdr align; } u;
        struct iovec iov = { &v, sizeof v };
        struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf };
        ssize_t r = recvmsg(REAPER_FD, &msg, wait ? 0 : MSG_DONTWAIT);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0 && !wait && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            nanosleep(&batch, NULL);
            wait = true;
            continue;
        }
        if (r != (ssize_t)sizeof v) break;           /* 0: flow is gone */
        wait = false;
        if (v == 0) {                                  /* an fd to hold (above): the newest lock, the old one closed */
            struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
            if (c && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
                int fd;
                memcpy(&fd, CMSG_DATA(c), sizeof fd);
                if (held >= 0) close(held);
                held = fd;
            }
            continue;
        }
        if (v > 0) {
            ARRAY_GROW(groups, n, cap);
            groups[n++] = v;
        } else {
            for (size_t i = 0; i < n; i++)
                if (groups[i] == -v) { groups[i] = groups[--n]; break; }
        }
    }
    if (n) {
        /* flow died with these running: what it would have done on Ctrl-C,
         * to their descendants' own groups too (proctree.h), found now and
         * again before the SIGKILL. */
        size_t n_steps = n;
        for (size_t i = 0; i < n_steps; i++) proctree_groups(groups[i], flow_group, &groups, &n, &cap);
        for (size_t i = 0; i < n; i++) kill(-groups[i], SIGTERM);
        struct timespec tick = { 0, 100 * 1000 * 1000 };
        for (int t = 0; t < GRACE_S * 10 && any_alive(groups, n); t++) nanosleep(&tick, NULL);
        for (size_t i = 0; i < n_steps; i++) proctree_groups(groups[i], flow_group, &groups, &n, &cap);
        for (size_t i = 0; i < n; i++) kill(-groups[i], SIGKILL);
    }
    free(groups);
    return 0;
}
