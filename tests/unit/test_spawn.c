/* test_spawn.c — the two ways spawn.h starts a program (flow's own vfork
 * and execve, posix_spawnp) give the child the same start: what it sees of
 * its signals, descriptors, directory and process group, compared line by
 * line and against what spawn.h promises; and a program that cannot be run
 * is reported by its errno, with no child left behind. */
#include "check.h"
#include "spawn.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static char dir[] = "/tmp/flow-test-spawn-XXXXXX";

/* What a child sees of itself, asked of programs that change none of it:
 * its signal sets and process group (/proc/self/status, by cat: grep
 * catches SIGSEGV itself), its descriptors (ls's own, so also the one it
 * lists with), its directory. */
static char *const reports[][5] = {
    { "cat", "/proc/self/status", NULL },
    { "ls", "-l", "/proc/self/fd/", NULL },
    { "pwd", NULL },
};

static void handler(int sig) { (void)sig; }

static char *read_all(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) return xstrdup("");
    struct strbuf sb = STRBUF_INIT;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) sb_add(&sb, buf, n);
    fclose(f);
    return sb_detach(&sb);
}

/* Runs report k through one of the two ways; its stdout's text (the caller frees it). */
static char *run_report(size_t k, bool own, const sigset_t *mask, const sigset_t *defaults)
{
    char *out = xasprintf("%s/report.out", dir), *err = xasprintf("%s/report.err", dir);
    int o = open(out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    int e = open(err, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    struct spawn_plan plan = { .argv = reports[k], .envp = environ, .stdout_fd = o, .stderr_fd = e, .cwd = dir,
                               .mask = mask, .defaults = defaults };
    pid_t pid = 0;
    char *path = xasprintf("/bin/%s", reports[k][0]);
    int rc = own ? spawn_at(path, &plan, &pid) : spawn_search(&plan, &pid);
    CHECK(rc == 0);
    int status = -1;
    if (rc == 0) waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    close(o);
    close(e);
    char *text = read_all(err);
    CHECK_STR(text, "");
    free(text);
    text = read_all(out);
    free(out);
    free(err);
    free(path);
    return text;
}

/* A /proc/PID/status signal set line's value ("SigIgn:\t0000000000000005"). */
static unsigned long long signal_set(const char *text, const char *field)
{
    const char *at = strstr(text, field);
    return at ? strtoull(at + strlen(field), NULL, 16) : ~0ULL;
}

static unsigned long long bit(int sig) { return 1ULL << (sig - 1); }

/* What report 0 says, as a comparable line.  glibc's two internal signals
 * (32, 33) are masked out: its posix_spawn leaves them ignored in the child,
 * spawn_at at their default (their handlers are glibc's, for its own threads
 * only). */
static char *signals_seen(const char *text)
{
    unsigned long long internal = bit(32) | bit(33);
    const char *pid = strstr(text, "NSpid:"), *pgid = strstr(text, "NSpgid:");
    bool leader = pid && pgid && strtol(pid + 6, NULL, 10) == strtol(pgid + 7, NULL, 10);
    return xasprintf("blocked %llx ignored %llx caught %llx%s", signal_set(text, "SigBlk:") & ~internal,
                     signal_set(text, "SigIgn:") & ~internal, signal_set(text, "SigCgt:") & ~internal,
                     leader ? " leader" : "");
}

/* What report 1 says: "fd -> target" lines, ls's own pid made "PID". */
static char *descriptors_seen(const char *text)
{
    struct strbuf sb = { 0 };
    for (const char *line = text; *line; ) {
        const char *end = strchr(line, '\n');
        size_t n = end ? (size_t)(end - line) : strlen(line);
        const char *arrow = memmem(line, n, " -> ", 4);
        if (arrow) {
            const char *fd = arrow;
            while (fd > line && fd[-1] != ' ') fd--;
            for (const char *c = fd; c < line + n; c++) {
                if (strncmp(c, "/proc/", 6) == 0 && c[6] >= '0' && c[6] <= '9') {
                    sb_adds(&sb, "/proc/PID");
                    for (c += 6; c < line + n && *c >= '0' && *c <= '9'; c++) continue;
                    c--;
                } else sb_addc(&sb, *c);
            }
            sb_addc(&sb, '\n');
        }
        line += n + (end != NULL);
    }
    return sb_detach(&sb);
}

static void test_both_ways_start_the_child_alike(void)
{
    /* the parent: a handler (SIGUSR1, and SIGINT among the defaults), ignored
     * signals (SIGHUP as under nohup, and SIGPIPE among the defaults) */
    struct sigaction catch = { .sa_handler = handler }, ignore = { .sa_handler = SIG_IGN };
    sigemptyset(&catch.sa_mask);
    sigemptyset(&ignore.sa_mask);
    struct sigaction was_usr1, was_int, was_hup, was_pipe;
    sigaction(SIGUSR1, &catch, &was_usr1);
    sigaction(SIGINT, &catch, &was_int);
    sigaction(SIGHUP, &ignore, &was_hup);
    sigaction(SIGPIPE, &ignore, &was_pipe);
    sigset_t mask, defaults, blocked_here, parent;
    sigemptyset(&mask);
    sigaddset(&mask, SIGUSR2);                 /* the child's mask, whatever the parent's */
    sigemptyset(&defaults);
    sigaddset(&defaults, SIGINT);
    sigaddset(&defaults, SIGTERM);
    sigaddset(&defaults, SIGPIPE);
    sigaddset(&defaults, SIGCHLD);
    sigemptyset(&blocked_here);
    sigaddset(&blocked_here, SIGTERM);
    sigprocmask(SIG_BLOCK, &blocked_here, &parent);

    char *seen[3][2];
    for (size_t k = 0; k < 3; k++)
        for (int own = 0; own < 2; own++) {
            char *text = run_report(k, own, &mask, &defaults);
            seen[k][own] = k == 0 ? signals_seen(text) : k == 1 ? descriptors_seen(text) : xstrdup(text);
            free(text);
        }
    for (size_t k = 0; k < 3; k++) CHECK_STR(seen[k][1], seen[k][0]);
    /* and what spawn.h promises */
    const char *sig = seen[0][1];
    unsigned long long blocked = strtoull(strstr(sig, "blocked ") + 8, NULL, 16),
                       ignored = strtoull(strstr(sig, "ignored ") + 8, NULL, 16),
                       caught = strtoull(strstr(sig, "caught ") + 7, NULL, 16);
    CHECK(blocked == bit(SIGUSR2));
    CHECK(ignored == bit(SIGHUP));            /* ignored stays ignored, but a default is the default */
    CHECK(caught == 0);                       /* no handler of the parent's */
    CHECK_CONTAINS(sig, " leader");
    /* 0 to 2 as planned, and none of the parent's descriptors that close on exec */
    char *fds = xasprintf("0 -> /dev/null\n1 -> %s/report.out\n", dir), *err = xasprintf("2 -> %s/report.err\n", dir);
    CHECK_CONTAINS(seen[1][1], fds);
    CHECK_CONTAINS(seen[1][1], err);
    CHECK(strstr(strstr(seen[1][1], "report.out") + 1, "report.out") == NULL);
    CHECK(strstr(strstr(seen[1][1], "report.err") + 1, "report.err") == NULL);
    free(err);
    char *cwd = xasprintf("%s\n", dir);
    CHECK_STR(seen[2][1], cwd);
    free(fds);
    free(cwd);
    for (size_t k = 0; k < 3; k++) free(seen[k][0]), free(seen[k][1]);

    sigprocmask(SIG_SETMASK, &parent, NULL);
    sigaction(SIGUSR1, &was_usr1, NULL);
    sigaction(SIGINT, &was_int, NULL);
    sigaction(SIGHUP, &was_hup, NULL);
    sigaction(SIGPIPE, &was_pipe, NULL);
}

/* Runs argv through spawn_at(path): its return value. */
static int own_way(const char *path, const char *cwd)
{
    sigset_t none;
    sigemptyset(&none);
    char *argv[] = { (char *)path, NULL };
    struct spawn_plan plan = { .argv = argv, .envp = environ, .stdout_fd = 1, .stderr_fd = 2, .cwd = cwd,
                               .mask = &none, .defaults = &none };
    pid_t pid = -1;
    int rc = spawn_at(path, &plan, &pid);
    if (rc == 0) waitpid(pid, NULL, 0);
    return rc;
}

static void test_what_cannot_run_is_reported_and_reaped(void)
{
    char *plain = xasprintf("%s/plain", dir);
    FILE *f = fopen(plain, "w");
    if (f) fclose(f);
    chmod(plain, 0644);
    CHECK(own_way("/nonexistent/program", NULL) == ENOENT);
    CHECK(own_way(plain, NULL) == EACCES);                        /* not executable */
    char *gone = xasprintf("%s/no-such-dir", dir);
    CHECK(own_way("/bin/true", gone) == ENOENT);                 /* its directory is missing */
    CHECK(own_way("/bin/true", dir) == 0);
    /* every child was reaped, the failed ones by spawn_at itself */
    errno = 0;
    CHECK(waitpid(-1, NULL, WNOHANG) < 0 && errno == ECHILD);
    free(plain);
    free(gone);
}

int main(void)
{
    /* From every disposition at its default, whatever started the tests left:
     * a shell's background job ignores SIGINT and SIGQUIT, and an ignored
     * signal stays ignored in the child (the test's own SIGHUP is that case). */
    for (int sig = 1; sig < NSIG; sig++)
        if (sig != SIGKILL && sig != SIGSTOP) signal(sig, SIG_DFL);    /* (glibc's own two refuse: harmless) */
    if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }
    RUN(test_both_ways_start_the_child_alike);
    RUN(test_what_cannot_run_is_reported_and_reaped);
    char *cmd = xasprintf("rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    free(cmd);
    return CHECK_DONE("spawn");
}
