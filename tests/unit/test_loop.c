/* test_loop.c — the event loop: callbacks that unwatch fds with events still
 * pending in the same batch, nested dispatch, and failures reported, not fatal. */
#include "check.h"
#include "loop.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

/* One readable pipe end and what its callback saw. */
struct end { int rd, wr; int calls; };

static struct loop *new_loop(void)
{
    char err[256];
    struct loop *loop = loop_new(err, sizeof err);
    if (!loop) {
        fprintf(stderr, "loop_new: %s\n", err);
        exit(2);
    }
    return loop;
}

static void readable_pipe(struct end *e)
{
    int fds[2];
    if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0 || write(fds[1], "x", 1) != 1) {
        perror("pipe");
        exit(2);
    }
    *e = (struct end){ fds[0], fds[1], 0 };
}

static void close_end(struct end *e)
{
    if (e->rd >= 0) close(e->rd);
    if (e->wr >= 0) close(e->wr);
    e->rd = e->wr = -1;
}

static void drain(int fd)
{
    char buf[64];
    while (read(fd, buf, sizeof buf) > 0) {}
}

/* ---- a callback closes the other fd of the batch and reuses its number ------ */

static struct loop *g_loop;
static struct end g_a, g_b, g_fresh;

static void on_fresh(void *arg, int fd, unsigned events)
{
    (void)arg; (void)fd; (void)events;
    g_fresh.calls++;
}

/* Whichever of a and b fires first unwatches and closes the other, then opens
 * an empty pipe (it gets the number just freed) and watches it. */
static void on_first(void *arg, int fd, unsigned events)
{
    struct end *self = arg, *other = self == &g_a ? &g_b : &g_a;
    (void)events;
    self->calls++;
    drain(fd);
    if (other->rd < 0) return;
    int old = other->rd;
    loop_unwatch(g_loop, other->rd);
    close_end(other);
    int fds[2];
    if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) { perror("pipe"); exit(2); }
    g_fresh = (struct end){ fds[0], fds[1], 0 };
    CHECK(g_fresh.rd == old);                           /* the lowest number: reused at once */
    CHECK(loop_watch(g_loop, g_fresh.rd, LOOP_READ, on_fresh, NULL) == 0);
}

static void test_unwatch_pending_fd_in_same_batch(void)
{
    g_loop = new_loop();
    readable_pipe(&g_a);
    readable_pipe(&g_b);
    CHECK(loop_watch(g_loop, g_a.rd, LOOP_READ, on_first, &g_a) == 0);
    CHECK(loop_watch(g_loop, g_b.rd, LOOP_READ, on_first, &g_b) == 0);
    loop_run_once(g_loop, 1.0);                         /* both are ready: one batch */
    CHECK(g_a.calls + g_b.calls == 1);
    /* The closed fd's event must not reach the watcher that took its number
     * (nothing was written to the fresh pipe). */
    CHECK(g_fresh.calls == 0);
    loop_run_once(g_loop, 0);
    CHECK(g_fresh.calls == 0);
    loop_free(g_loop);
    close_end(&g_a);
    close_end(&g_b);
    close_end(&g_fresh);
}

/* ---- a callback runs the loop itself (a blocking flow.proc wait) ------------- */

static struct end g_outer, g_victim;

static void on_victim(void *arg, int fd, unsigned events)
{
    (void)arg; (void)fd; (void)events;
    g_victim.calls++;
}

static void on_outer(void *arg, int fd, unsigned events)
{
    (void)arg; (void)events;
    g_outer.calls++;
    drain(fd);
    if (g_victim.rd >= 0) {
        loop_unwatch(g_loop, g_victim.rd);
        close_end(&g_victim);
    }
    /* The nested dispatch must not free what the outer batch still names. */
    loop_run_once(g_loop, 0);
}

static void test_nested_dispatch_keeps_retired_watchers(void)
{
    g_loop = new_loop();
    readable_pipe(&g_outer);
    readable_pipe(&g_victim);
    /* victim is watched second, so its event comes later in the batch */
    CHECK(loop_watch(g_loop, g_outer.rd, LOOP_READ, on_outer, NULL) == 0);
    CHECK(loop_watch(g_loop, g_victim.rd, LOOP_READ, on_victim, NULL) == 0);
    loop_run_once(g_loop, 1.0);
    CHECK(g_outer.calls + g_victim.calls >= 1);
    if (g_outer.calls) CHECK(g_victim.calls == 0);
    loop_free(g_loop);
    close_end(&g_outer);
    close_end(&g_victim);
}

/* ---- failures are returned ------------------------------------------------- */

static void never(void *arg, int fd, unsigned events)
{
    (void)arg; (void)fd; (void)events;
    CHECK(!"called");
}

static void test_watch_refused_is_reported(void)
{
    struct loop *loop = new_loop();
    char path[] = "/tmp/flow_test_loop_XXXXXX";
    int fd = mkstemp(path);                             /* epoll refuses regular files */
    CHECK(fd >= 0);
    unlink(path);
    errno = 0;
    CHECK(loop_watch(loop, fd, LOOP_READ, never, NULL) == -1);
    CHECK(errno == EPERM);
    loop_unwatch(loop, fd);                             /* nothing to undo */
    loop_run_once(loop, 0);
    close(fd);
    loop_free(loop);
}

static void test_loop_new_failure_is_reported(void)
{
    struct rlimit saved, low;
    getrlimit(RLIMIT_NOFILE, &saved);
    int lowest = open("/dev/null", O_RDONLY | O_CLOEXEC);   /* the next fd number free */
    CHECK(lowest >= 0);
    close(lowest);
    low = saved;
    low.rlim_cur = (rlim_t)lowest;                      /* no new fd can be made */
    CHECK(setrlimit(RLIMIT_NOFILE, &low) == 0);
    char err[256] = "";
    struct loop *loop = loop_new(err, sizeof err);
    setrlimit(RLIMIT_NOFILE, &saved);
    CHECK(loop == NULL);
    CHECK_CONTAINS(err, "cannot create the event loop");
    sigset_t now;
    sigprocmask(SIG_SETMASK, NULL, &now);
    CHECK(!sigismember(&now, SIGINT));                  /* the signal mask is given back */
    loop_free(loop);
}

int main(void)
{
    RUN(test_unwatch_pending_fd_in_same_batch);
    RUN(test_nested_dispatch_keeps_retired_watchers);
    RUN(test_watch_refused_is_reported);
    RUN(test_loop_new_failure_is_reported);
    return CHECK_DONE("loop");
}
