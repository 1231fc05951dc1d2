/* test_proctree.c — the process groups of a step's descendants outside its
 * own (an MPI rank's), found from /proc, and signalled with the step's. */
#include "check.h"
#include "proctree.h"
#include "util.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* A "step": a group leader whose child leaves for a group of its own (as
 * mpirun's ranks do) and has a child of its own there; both sleep.  The
 * pipe says when the grandchildren are in place: their pids, then their
 * group. */
static pid_t start_step(int report[2], pid_t *rank, pid_t *rank_child)
{
    if (pipe(report) != 0) exit(2);
    pid_t leader = fork();
    if (leader == 0) {
        setpgid(0, 0);
        pid_t r = fork();
        if (r == 0) {
            setpgid(0, 0);                      /* a group of its own */
            pid_t c = fork();
            if (c == 0) { pause(); _exit(0); }
            pid_t mine[2] = { getpid(), c };
            if (write(report[1], mine, sizeof mine) != sizeof mine) _exit(2);
            pause();
            _exit(0);
        }
        pause();
        _exit(0);
    }
    setpgid(leader, leader);
    pid_t got[2];
    if (read(report[0], got, sizeof got) != sizeof got) exit(2);
    *rank = got[0];
    *rank_child = got[1];
    return leader;
}

static bool gone(pid_t pid)
{
    for (int i = 0; i < 200; i++) {
        char state;
        pid_t ppid, pgid;
        if (!proctree_stat(pid, &state, &ppid, &pgid) || state == 'Z') return true;
        struct timespec t = { 0, 10 * 1000 * 1000 };
        nanosleep(&t, NULL);
    }
    return false;
}

static void test_a_descendants_own_group_is_found_and_stopped(void)
{
    int report[2];
    pid_t rank, rank_child;
    pid_t leader = start_step(report, &rank, &rank_child);
    char state;
    pid_t ppid, pgid;
    CHECK(proctree_stat(rank, &state, &ppid, &pgid) && ppid == leader && pgid == rank);
    pid_t *groups = NULL;
    size_t n = 0, cap = 0;
    proctree_groups(leader, getpgrp(), &groups, &n, &cap);
    CHECK(n == 1 && groups && groups[0] == rank);
    /* found once: a second look adds nothing, even after the leader is gone
     * (the rank orphaned: its group is remembered, not found again) */
    proctree_groups(leader, getpgrp(), &groups, &n, &cap);
    CHECK(n == 1);
    proctree_signal(leader, groups, n, SIGKILL);
    CHECK(gone(rank));
    CHECK(gone(rank_child));
    waitpid(leader, NULL, 0);
    free(groups);
    close(report[0]);
    close(report[1]);
}

static void test_flow_s_own_group_is_never_a_steps(void)
{
    int report[2];
    pid_t rank, rank_child;
    pid_t leader = start_step(report, &rank, &rank_child);
    pid_t *groups = NULL;
    size_t n = 0, cap = 0;
    proctree_groups(leader, rank, &groups, &n, &cap);      /* the rank's group taken for flow's */
    CHECK(n == 0);
    proctree_groups(-1, getpgrp(), &groups, &n, &cap);      /* no group: nothing */
    CHECK(n == 0);
    kill(-rank, SIGKILL);
    kill(-leader, SIGKILL);
    waitpid(leader, NULL, 0);
    CHECK(gone(rank));
    free(groups);
    close(report[0]);
    close(report[1]);
}

int main(void)
{
    RUN(test_a_descendants_own_group_is_found_and_stopped);
    RUN(test_flow_s_own_group_is_never_a_steps);
    return CHECK_DONE("proctree");
}
