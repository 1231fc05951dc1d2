/* spawn.c — see spawn.h. */
#include "spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <spawn.h>
#include <stdnoreturn.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- spawn_at: vfork and execve ----------------------------------------------
 *
 * Between vfork and execve the child runs on the parent's memory, so it may
 * only make system calls and write the one word it reports through.  All
 * signals are blocked around the vfork (the child inherits that mask): a
 * handler of the parent's must never run in the child, which is why the
 * child resets every handled signal to SIG_DFL before it sets its own mask. */

/* What posix_spawn's POSIX_SPAWN_SETSIGDEF does, and what glibc does for
 * every other signal: one with a handler goes back to SIG_DFL (execve would
 * reset it too, but only after the mask below is in force). */
static void reset_signals(const sigset_t *defaults)
{
    struct sigaction dfl = { .sa_handler = SIG_DFL }, was;
    sigemptyset(&dfl.sa_mask);
    for (int sig = 1; sig < NSIG; sig++) {
        if (sig == SIGKILL || sig == SIGSTOP) continue;
        /* (glibc's own signals answer EINVAL and are left as they are) */
        if (!sigismember(defaults, sig) &&
            (sigaction(sig, NULL, &was) != 0 || was.sa_handler == SIG_DFL || was.sa_handler == SIG_IGN))
            continue;
        sigaction(sig, &dfl, NULL);
    }
}

/* Descriptor fd as target, kept across the exec.  0 or -1. */
static int onto(int fd, int target)
{
    if (fd == target) return fcntl(fd, F_SETFD, 0);      /* dup2 onto itself would keep FD_CLOEXEC */
    return dup2(fd, target) < 0 ? -1 : 0;
}

static noreturn __attribute__((noinline)) void exec_child(const char *path, const struct spawn_plan *plan,
                                                          volatile int *child_errno)
{
    reset_signals(plan->defaults);
    int null = -1;
    if (setpgid(0, 0) == 0 && (null = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0 && onto(null, 0) == 0 &&
        onto(plan->stdout_fd, 1) == 0 && onto(plan->stderr_fd, 2) == 0 && (!plan->cwd || chdir(plan->cwd) == 0)) {
        sigprocmask(SIG_SETMASK, plan->mask, NULL);
        execve(path, plan->argv, plan->envp);
    }
    *child_errno = errno ? errno : EINVAL;
    _exit(127);
}

int spawn_at(const char *path, const struct spawn_plan *plan, pid_t *pid)
{
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    /* Written by the child before it exits, read once the parent runs again
     * (after the child's exec or exit).  Under valgrind, whose vfork is a
     * fork, a failed exec is seen only as the child's exit status 127. */
    volatile int child_errno = 0;
    pid_t p = vfork();
    if (p == 0) exec_child(path, plan, &child_errno);
    int e = p < 0 ? errno : child_errno;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (p > 0 && e != 0)
        while (waitpid(p, NULL, 0) < 0 && errno == EINTR) continue;
    if (e != 0) return e;
    *pid = p;
    return 0;
}

/* ---- spawn_search: posix_spawnp ------------------------------------------------ */

static int search_with(const struct spawn_plan *plan, posix_spawn_file_actions_t *fa, posix_spawnattr_t *attr,
                       pid_t *pid)
{
    int rc;
    if ((rc = posix_spawn_file_actions_addopen(fa, 0, "/dev/null", O_RDONLY, 0)) != 0 ||
        (rc = posix_spawn_file_actions_adddup2(fa, plan->stdout_fd, 1)) != 0 ||
        (rc = posix_spawn_file_actions_adddup2(fa, plan->stderr_fd, 2)) != 0 ||
        (plan->cwd && (rc = posix_spawn_file_actions_addchdir_np(fa, plan->cwd)) != 0) ||
        (rc = posix_spawnattr_setsigmask(attr, plan->mask)) != 0 ||
        (rc = posix_spawnattr_setsigdefault(attr, plan->defaults)) != 0 ||
        (rc = posix_spawnattr_setpgroup(attr, 0)) != 0 ||
        (rc = posix_spawnattr_setflags(attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF |
                                                 POSIX_SPAWN_SETPGROUP)) != 0)
        return rc;
    return posix_spawnp(pid, plan->argv[0], fa, attr, plan->argv, plan->envp);
}

int spawn_search(const struct spawn_plan *plan, pid_t *pid)
{
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    int rc = posix_spawn_file_actions_init(&fa);
    if (rc != 0) return rc;
    if ((rc = posix_spawnattr_init(&attr)) == 0) {
        rc = search_with(plan, &fa, &attr, pid);
        posix_spawnattr_destroy(&attr);
    }
    posix_spawn_file_actions_destroy(&fa);
    return rc;
}
