/* test_proc.c — child processes: spawn, output capture into memory and the
 * log, the stderr tail, a command that does not exist, and stopping a whole
 * process group, gracefully (SIGTERM, which the process may handle) or by
 * force (SIGKILL).  Waits are bounded loops over the event loop, never sleeps
 * that assume a speed. */
#include "check.h"
#include "loop.h"
#include "proc.h"
#include "util.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[] = "/tmp/flow-test-proc-XXXXXX";

static struct loop *new_loop(void)
{
    char err[256];
    struct loop *loop = loop_new(err, sizeof err);
    if (!loop) { fprintf(stderr, "loop_new: %s\n", err); exit(2); }
    return loop;
}

static void exited(struct proc *p, void *arg)
{
    (void)p;
    *(bool *)arg = true;
}

/* Runs the loop until *flag, at most `limit` seconds; false if it never came. */
static bool run_until(struct loop *loop, const bool *flag, double limit)
{
    double until = monotonic_seconds() + limit;
    while (!*flag && monotonic_seconds() < until) loop_run_once(loop, 0.05);
    return *flag;
}

static bool exists_within(struct loop *loop, const char *path, double limit)
{
    double until = monotonic_seconds() + limit;
    struct stat st;
    while (stat(path, &st) != 0 && monotonic_seconds() < until) loop_run_once(loop, 0.02);
    return stat(path, &st) == 0;
}

static char *path_in(const char *name)
{
    static char buf[4][256];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

static struct proc *sh(struct loop *loop, const char *script, bool capture, const char *log, bool *done)
{
    char *argv[] = { "/bin/sh", "-c", (char *)script, NULL };
    struct proc_spec spec = { .argv = argv, .cwd = dir, .capture_stdout = capture, .log_path = log };
    char err[256];
    struct proc *p = proc_spawn(loop, &spec, exited, done, err, sizeof err);
    if (!p) fprintf(stderr, "proc_spawn: %s\n", err);
    return p;
}

static void test_output_capture_and_tail(void)
{
    struct loop *loop = new_loop();
    bool done = false;
    struct proc *p = sh(loop, "echo out; echo err >&2; exit 3", true, NULL, &done);
    CHECK(p != NULL);
    CHECK(run_until(loop, &done, 30));
    size_t len;
    CHECK_STR(proc_stdout(p, &len), "out\n");
    CHECK(len == 4);
    CHECK_STR(proc_stderr_tail(p), "err\n");
    CHECK(proc_exit_code(p) == 3);
    CHECK(proc_term_signal(p) == 0);
    CHECK(!proc_timed_out(p));
    proc_free(p);
    loop_free(loop);
}

static void test_output_into_the_log(void)
{
    struct loop *loop = new_loop();
    bool done = false;
    const char *log = path_in("step.log");
    struct proc *p = sh(loop, "echo one; echo two >&2", false, log, &done);
    CHECK(p != NULL);
    CHECK(run_until(loop, &done, 30));
    CHECK(proc_exit_code(p) == 0);
    CHECK(proc_log_errno(p) == 0);
    size_t n;
    char *text = read_file(log, &n);
    CHECK(text && strstr(text, "one\n") && strstr(text, "two\n"));
    free(text);
    proc_free(p);
    loop_free(loop);
}

static void test_missing_command_is_reported(void)
{
    struct loop *loop = new_loop();
    char *argv[] = { "flow-no-such-command", NULL };
    struct proc_spec spec = { .argv = argv };
    char err[256] = "";
    bool done = false;
    CHECK(proc_spawn(loop, &spec, exited, &done, err, sizeof err) == NULL);
    CHECK_CONTAINS(err, "command not found: flow-no-such-command");
    loop_free(loop);
}

/* The process is gone (reaped by someone, or a zombie nobody waits for). */
static bool gone_within(pid_t pid, double limit)
{
    double until = monotonic_seconds() + limit;
    for (;;) {
        char path[64], state = '?';
        snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
        FILE *f = fopen(path, "r");
        if (!f) return true;
        if (fscanf(f, "%*d %*s %c", &state) != 1) state = '?';
        fclose(f);
        if (state == 'Z') return true;
        if (monotonic_seconds() > until) return false;
        usleep(20000);
    }
}

static pid_t read_pid(const char *path)
{
    size_t n;
    char *text = read_file(path, &n);
    pid_t pid = text ? (pid_t)atoi(text) : 0;
    free(text);
    return pid;
}

/* Forced: SIGKILL to the whole group, the background child included. */
static void test_forced_cancel_kills_the_group(void)
{
    struct loop *loop = new_loop();
    bool done = false;
    struct proc *p = sh(loop, "sleep 60 & echo $! > child; touch ready; wait", false, NULL, &done);
    CHECK(p != NULL);
    CHECK(exists_within(loop, path_in("ready"), 30));
    pid_t child = read_pid(path_in("child"));
    CHECK(child > 0);
    proc_cancel(p, CANCEL_FORCED);
    CHECK(run_until(loop, &done, 30));
    CHECK(proc_term_signal(p) == SIGKILL);
    CHECK(child > 0 && gone_within(child, 30));
    proc_free(p);
    unlink(path_in("ready"));
    loop_free(loop);
}

/* Graceful: SIGTERM, which a process may handle to clean up and exit. */
static void test_graceful_cancel_lets_it_clean_up(void)
{
    struct loop *loop = new_loop();
    bool done = false;
    struct proc *p = sh(loop, "trap 'echo cleaned > cleaned; exit 7' TERM; touch ready; "
                              "while :; do sleep 0.05; done", false, NULL, &done);
    CHECK(p != NULL);
    CHECK(exists_within(loop, path_in("ready"), 30));
    proc_cancel(p, CANCEL_GRACEFUL);
    CHECK(run_until(loop, &done, 30));
    CHECK(proc_exit_code(p) == 7);
    struct stat st;
    CHECK(stat(path_in("cleaned"), &st) == 0);
    proc_free(p);
    unlink(path_in("ready"));
    proc_stop_lingering(loop);
    loop_free(loop);
}

/* Graceful on a process that ignores SIGTERM: SIGKILL once the grace period
 * (5 s) is over; a forced cancel then does not wait for it. */
static void test_graceful_cancel_escalates_after_the_grace(void)
{
    struct loop *loop = new_loop();
    bool done = false;
    struct proc *p = sh(loop, "trap '' TERM; touch ready; while :; do sleep 0.05; done", false, NULL, &done);
    CHECK(p != NULL);
    CHECK(exists_within(loop, path_in("ready"), 30));
    double t0 = monotonic_seconds();
    proc_cancel(p, CANCEL_GRACEFUL);
    proc_cancel(p, CANCEL_GRACEFUL);         /* a second graceful cancel does not restart the grace */
    CHECK(run_until(loop, &done, 60));
    CHECK(proc_term_signal(p) == SIGKILL);
    CHECK(monotonic_seconds() - t0 >= 4.5);   /* it had its grace period */
    proc_free(p);
    unlink(path_in("ready"));

    done = false;
    p = sh(loop, "trap '' TERM; touch ready; while :; do sleep 0.05; done", false, NULL, &done);
    CHECK(exists_within(loop, path_in("ready"), 30));
    proc_cancel(p, CANCEL_GRACEFUL);
    proc_cancel(p, CANCEL_FORCED);            /* the second Ctrl-C */
    CHECK(run_until(loop, &done, 30));
    CHECK(proc_term_signal(p) == SIGKILL);
    proc_free(p);
    unlink(path_in("ready"));
    loop_free(loop);
}

/* A leader that exits on SIGTERM, leaving a child that ignores it in its
 * group: the step is reported at once, and the group still gets its SIGKILL
 * when the grace period ends — or at once when flow ends first. */
static void test_graceful_cancel_kills_what_the_leader_left(void)
{
    struct loop *loop = new_loop();
    for (int at_exit = 0; at_exit <= 1; at_exit++) {
        bool done = false;
        struct proc *p = sh(loop, "sh -c 'trap \"\" TERM; while :; do sleep 0.05; done' & echo $! > child; "
                                  "touch ready; wait", false, NULL, &done);
        CHECK(p != NULL);
        CHECK(exists_within(loop, path_in("ready"), 30));
        pid_t child = read_pid(path_in("child"));
        CHECK(child > 0);
        double t0 = monotonic_seconds();
        proc_cancel(p, CANCEL_GRACEFUL);
        CHECK(run_until(loop, &done, 30));
        CHECK(proc_term_signal(p) == SIGTERM);
        CHECK(monotonic_seconds() - t0 < 4);      /* reported when the leader exits */
        proc_free(p);
        CHECK(child > 0 && !gone_within(child, 0.5));
        if (at_exit) {
            proc_stop_lingering(NULL);            /* flow ends before the grace period does */
            CHECK(child > 0 && gone_within(child, 2));
        } else {
            bool never = false;
            run_until(loop, &never, 5.5 - (monotonic_seconds() - t0));
            CHECK(child > 0 && gone_within(child, 2));
            CHECK(monotonic_seconds() - t0 >= 4.5);   /* it had its grace period */
        }
        unlink(path_in("ready"));
    }
    loop_free(loop);
}

static void test_timeout_is_a_graceful_cancel(void)
{
    struct loop *loop = new_loop();
    bool done = false;
    char *argv[] = { "/bin/sh", "-c", "trap 'exit 5' TERM; while :; do sleep 0.05; done", NULL };
    struct proc_spec spec = { .argv = argv, .timeout_s = 0.2 };
    char err[256];
    struct proc *p = proc_spawn(loop, &spec, exited, &done, err, sizeof err);
    CHECK(p != NULL);
    CHECK(run_until(loop, &done, 30));
    CHECK(proc_timed_out(p));
    CHECK(proc_exit_code(p) == 5);
    proc_free(p);
    proc_stop_lingering(loop);
    loop_free(loop);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    if (!mkdtemp(dir)) { perror("mkdtemp"); return 2; }
    RUN(test_output_capture_and_tail);
    RUN(test_output_into_the_log);
    RUN(test_missing_command_is_reported);
    RUN(test_forced_cancel_kills_the_group);
    RUN(test_graceful_cancel_lets_it_clean_up);
    RUN(test_timeout_is_a_graceful_cancel);
    RUN(test_graceful_cancel_escalates_after_the_grace);
    RUN(test_graceful_cancel_kills_what_the_leader_left);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return CHECK_DONE("proc");
}
