/* test_step_wait.c — one kind of wait: the list a step keeps, and each kind's
 * cancel (timers fire, processes stop, work jobs finish) keeping the contract
 * that a cancel never completes a wait synchronously. */
#include "check.h"
#include "loop.h"
#include "proc.h"
#include "step_wait.h"
#include "util.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static struct loop *new_loop(void)
{
    char err[256];
    struct loop *loop = loop_new(err, sizeof err);
    if (!loop) { fprintf(stderr, "loop_new: %s\n", err); exit(2); }
    return loop;
}

static bool run_until(struct loop *loop, const int *count, int want, double limit)
{
    double until = monotonic_seconds() + limit;
    while (*count < want && monotonic_seconds() < until) loop_run_once(loop, 0.05);
    return *count >= want;
}

static void count_done(struct step_wait *w, void *arg)
{
    (void)w;
    (*(int *)arg)++;
}

/* ---- the list ------------------------------------------------------------- */

static int cancels[2];
static void rec_cancel(struct step_wait *w, enum cancel_mode mode) { (void)w; cancels[mode]++; }
static void rec_free(struct step_wait *w) { (void)w; }
static const struct step_wait_ops rec_ops = { "test", rec_cancel, rec_free };

static void test_list_attach_detach_cancel(void)
{
    struct step_wait a, b, c;
    struct step_wait_list l1 = { 0 }, l2 = { 0 };
    step_wait_init(&a, &rec_ops);
    step_wait_init(&b, &rec_ops);
    step_wait_init(&c, &rec_ops);
    step_wait_attach(&l1, &a);
    step_wait_attach(&l1, &b);
    step_wait_attach(&l1, &c);
    CHECK(l1.n == 3);
    step_wait_detach(&b);                    /* from the middle */
    step_wait_detach(&b);                    /* twice is fine */
    CHECK(l1.n == 2 && b.list == NULL);
    step_wait_attach(&l2, &c);               /* moves it */
    CHECK(l1.n == 1 && l2.n == 1 && c.list == &l2);
    cancels[0] = cancels[1] = 0;
    step_wait_attach(&l1, &b);
    step_wait_list_cancel(&l1, CANCEL_GRACEFUL);
    CHECK(cancels[CANCEL_GRACEFUL] == 2 && cancels[CANCEL_FORCED] == 0);
    step_wait_list_cancel(&l2, CANCEL_FORCED);
    CHECK(cancels[CANCEL_FORCED] == 1);
    step_wait_free(&a);                      /* detaches first */
    CHECK(l1.n == 1 && l1.first == &b);
    step_wait_list_clear(&l1);
    CHECK(l1.n == 0 && l1.first == NULL && b.list == NULL);
    step_wait_detach(&c);
    CHECK(l2.n == 0);
}

/* ---- timers ----------------------------------------------------------------- */

static void test_timer_fires(void)
{
    struct loop *loop = new_loop();
    int done = 0;
    struct step_wait *w = step_wait_timer(loop, 0.01, count_done, &done);
    CHECK(run_until(loop, &done, 1, 30));
    CHECK(!step_wait_timer_cancelled(w));
    step_wait_free(w);
    loop_free(loop);
}

static void test_cancelled_timer_fires_at_the_next_turn_not_inside_cancel(void)
{
    struct loop *loop = new_loop();
    int done = 0;
    struct step_wait_list list = { 0 };
    struct step_wait *w = step_wait_timer(loop, 3600, count_done, &done);
    step_wait_attach(&list, w);
    step_wait_list_cancel(&list, CANCEL_GRACEFUL);
    CHECK(done == 0);                        /* never synchronously */
    step_wait_list_cancel(&list, CANCEL_FORCED);     /* again: still one completion */
    double t0 = monotonic_seconds();
    CHECK(run_until(loop, &done, 1, 30));
    CHECK(monotonic_seconds() - t0 < 20);
    CHECK(step_wait_timer_cancelled(w));
    loop_run_once(loop, 0.05);
    CHECK(done == 1);
    step_wait_free(w);
    CHECK(list.n == 0);
    loop_free(loop);
}

/* Freeing a timer that has not fired: it never fires. */
static void test_freed_timer_never_fires(void)
{
    struct loop *loop = new_loop();
    int done = 0;
    step_wait_free(step_wait_timer(loop, 0.01, count_done, &done));
    loop_run_once(loop, 0.1);
    loop_run_once(loop, 0.1);
    CHECK(done == 0);
    loop_free(loop);
}

/* ---- processes -------------------------------------------------------------- */

static struct proc_spec shell(char **argv, const char *script)
{
    argv[0] = "/bin/sh";
    argv[1] = "-c";
    argv[2] = (char *)script;
    argv[3] = NULL;
    return (struct proc_spec){ .argv = argv };
}

static void test_one_process(void)
{
    struct loop *loop = new_loop();
    char *argv[4];
    struct proc_spec spec = shell(argv, "exit 4");
    int done = 0;
    char err[256];
    struct step_wait *w = step_wait_procs(loop, &spec, 1, false, count_done, &done, err, sizeof err);
    CHECK(w != NULL);
    CHECK(run_until(loop, &done, 1, 30));
    CHECK(step_wait_procs_count(w) == 1);
    CHECK(step_wait_procs_running(w) == 0);
    CHECK(proc_exit_code(step_wait_procs_proc(w, 0)) == 4);
    CHECK(step_wait_procs_first_failed(w) == -1);     /* not a group */
    step_wait_free(w);
    loop_free(loop);
}

/* A group: the first rank that fails stops the others. */
static void test_group_first_failure_stops_the_rest(void)
{
    struct loop *loop = new_loop();
    char *a[4], *b[4], *c[4];
    struct proc_spec specs[3] = { shell(a, "exec sleep 60"), shell(b, "sleep 0.1; exit 2"),
                                  shell(c, "exec sleep 60") };
    int done = 0;
    char err[256];
    double t0 = monotonic_seconds();
    struct step_wait *w = step_wait_procs(loop, specs, 3, true, count_done, &done, err, sizeof err);
    CHECK(w != NULL);
    CHECK(run_until(loop, &done, 1, 50));
    CHECK(monotonic_seconds() - t0 < 50);
    CHECK(step_wait_procs_first_failed(w) == 1);
    CHECK(proc_term_signal(step_wait_procs_proc(w, 0)) == SIGTERM);
    CHECK(proc_term_signal(step_wait_procs_proc(w, 2)) == SIGTERM);
    step_wait_free(w);
    loop_free(loop);
}

static void test_cancel_modes_on_processes(void)
{
    struct loop *loop = new_loop();
    char *a[4], *b[4];
    struct proc_spec specs[2] = { shell(a, "exec sleep 60"), shell(b, "exec sleep 60") };
    int done = 0;
    char err[256];
    struct step_wait_list list = { 0 };
    struct step_wait *w = step_wait_procs(loop, specs, 2, false, count_done, &done, err, sizeof err);
    CHECK(w != NULL);
    step_wait_attach(&list, w);
    step_wait_list_cancel(&list, CANCEL_GRACEFUL);
    CHECK(done == 0);
    CHECK(run_until(loop, &done, 1, 30));
    CHECK(proc_term_signal(step_wait_procs_proc(w, 0)) == SIGTERM);
    step_wait_free(w);

    done = 0;
    w = step_wait_procs(loop, specs, 2, false, count_done, &done, err, sizeof err);
    step_wait_attach(&list, w);
    step_wait_list_cancel(&list, CANCEL_FORCED);
    CHECK(run_until(loop, &done, 1, 30));
    CHECK(proc_term_signal(step_wait_procs_proc(w, 1)) == SIGKILL);
    step_wait_free(w);
    loop_free(loop);
}

static void test_process_start_failure_starts_nothing(void)
{
    struct loop *loop = new_loop();
    char *a[4];
    char *missing[] = { "flow-no-such-command", NULL };
    struct proc_spec specs[2] = { shell(a, "exec sleep 60"), { .argv = missing } };
    int done = 0;
    char err[256] = "";
    CHECK(step_wait_procs(loop, specs, 2, true, count_done, &done, err, sizeof err) == NULL);
    CHECK_CONTAINS(err, "command not found");
    loop_free(loop);
}

/* Freeing a wait whose processes still run kills and reaps them. */
static void test_free_stops_running_processes(void)
{
    struct loop *loop = new_loop();
    char *a[4];
    struct proc_spec spec = shell(a, "exec sleep 60");
    int done = 0;
    char err[256];
    double t0 = monotonic_seconds();
    struct step_wait *w = step_wait_procs(loop, &spec, 1, false, count_done, &done, err, sizeof err);
    CHECK(w != NULL);
    step_wait_free(w);
    CHECK(monotonic_seconds() - t0 < 30);
    CHECK(done == 0);
    loop_free(loop);
}

/* ---- work jobs ---------------------------------------------------------------- */

static void test_job_cancel_lets_it_finish(void)
{
    struct step_wait job;
    struct step_wait_list list = { 0 };
    step_wait_init(&job, &step_wait_job_ops);
    step_wait_attach(&list, &job);
    step_wait_list_cancel(&list, CANCEL_FORCED);      /* nothing to stop half-way */
    CHECK(list.n == 1);
    step_wait_free(&job);
    CHECK(list.n == 0);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    RUN(test_list_attach_detach_cancel);
    RUN(test_timer_fires);
    RUN(test_cancelled_timer_fires_at_the_next_turn_not_inside_cancel);
    RUN(test_freed_timer_never_fires);
    RUN(test_one_process);
    RUN(test_group_first_failure_stops_the_rest);
    RUN(test_cancel_modes_on_processes);
    RUN(test_process_start_failure_starts_nothing);
    RUN(test_free_stops_running_processes);
    RUN(test_job_cancel_lets_it_finish);
    return CHECK_DONE("step_wait");
}
