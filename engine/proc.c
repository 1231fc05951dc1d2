/* proc.c — see proc.h.  Exit is noticed through a pidfd (Linux ≥ 5.3), so the
 * loop needs no SIGCHLD handler and never busy-waits. */
#include "proc.h"
#include "command_path.h"
#include "proctree.h"
#include "reaper.h"
#include "spawn.h"
#include "ui.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#define TAIL_MAX 4096
#define ECHO_LINE_MAX 16384     /* -v shows a line without an end once it is this long */

/* What is still held of one output pipe (stdout, stderr): bytes read but not
 * yet masked, since they may be the start of a secret the next read completes,
 * and for -v the masked text of a line not ended yet. */
struct held {
    struct strbuf raw, line;
};
enum { OUT, ERR };

struct proc {
    struct loop *loop;
    pid_t pid;
    int pidfd, out_fd, err_fd, log_fd;
    int log_errno;                 /* the first failed open of or write to the log, or 0 */
    char *log_path;                /* opened on the first byte of output (see write_log) */
    bool log_append;
    char *log_header;              /* masked; written just before that byte */
    int status;                    /* from waitpid */
    bool exited, timed_out;
    unsigned long timer;           /* timeout, then the SIGKILL that follows it */
    double kill_at;                /* monotonic: when that SIGKILL is due */
    bool killing;                  /* `timer` is that SIGKILL: stopping has begun */
    bool capture_stdout, echo;
    char *echo_prefix;
    struct strbuf captured;        /* stdout, with capture_stdout */
    struct held held[2];           /* [OUT], [ERR] */
    char tail[TAIL_MAX];           /* ring of the last stderr bytes */
    size_t tail_len, tail_pos;
    char *tail_text;               /* tail as a string, made on demand */
    proc_exit_fn on_exit;
    void *arg;
    /* the groups of its descendants outside its own (an MPI rank's): found
     * when it is signalled, kept for when their parent is gone (proctree.h) */
    pid_t *groups;
    size_t n_groups, cap_groups;
};

static void tail_add(struct proc *p, const char *buf, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        p->tail[p->tail_pos] = buf[i];
        p->tail_pos = (p->tail_pos + 1) % TAIL_MAX;
        if (p->tail_len < TAIL_MAX) p->tail_len++;
    }
}

/* The log is created on the first byte of output, header first: a step that
 * says nothing leaves no file (one file fewer per step, which is what a run
 * of many small steps spends its time on).  A log that cannot be opened fails
 * the step when its process ends, as a failed write does. */
static void write_log(struct proc *p, const char *buf, size_t n)
{
    if (!n || !p->log_path || p->log_errno) return;
    if (p->log_fd < 0) {
        /* A log, not a result: no fsync, no rename — it is only read by people.
         * It lives under .flow/, where flow follows no link. */
        p->log_fd = open(p->log_path, O_WRONLY | O_CREAT | (p->log_append ? 0 : O_TRUNC) | O_APPEND | O_CLOEXEC
                                      | O_NOFOLLOW, 0644);
        if (p->log_fd < 0) { p->log_errno = errno; return; }
        if (p->log_header && write_all(p->log_fd, p->log_header, strlen(p->log_header)) != 0) {
            p->log_errno = errno;       /* the process runs on; the step fails when it ends */
            return;
        }
    }
    if (write_all(p->log_fd, buf, n) != 0) p->log_errno = errno;
}

/* -v: shows the complete lines of `line` plus `text`, keeps the rest (all of
 * it at the end of the output, or once it is too long to wait for its end). */
static void echo_lines(struct proc *p, struct strbuf *line, const char *text, size_t len, bool final)
{
    if (len) sb_add(line, text, len);
    if (!line->len) return;
    const char *nl = memrchr(line->buf, '\n', line->len);
    size_t upto = nl ? (size_t)(nl - line->buf) + 1 : 0;
    if (final || line->len - upto >= ECHO_LINE_MAX) upto = line->len;   /* the unended line is that long */
    if (!upto) return;
    ui_step_output(p->echo_prefix ? p->echo_prefix : "", line->buf, upto);
    memmove(line->buf, line->buf + upto, line->len - upto);
    line->len -= upto;
    line->buf[line->len] = '\0';
}

/* Output of stream `which`: masked, then into the log, the stderr tail and
 * (-v) the screen.  `final` at the end of the stream: nothing is held back. */
static void take_output(struct proc *p, int which, const char *buf, size_t n, bool final)
{
    struct held *h = &p->held[which];
    const char *text = buf;
    size_t len = n;
    if (h->raw.len) {                   /* the held tail goes first */
        sb_add(&h->raw, buf, n);
        text = h->raw.buf;
        len = h->raw.len;
    }
    struct strbuf clean = STRBUF_INIT;
    size_t used = ui_redact_span(text, len, final, &clean);
    if (text == h->raw.buf) {
        memmove(h->raw.buf, h->raw.buf + used, len - used);
        h->raw.len = len - used;
        h->raw.buf[h->raw.len] = '\0';
    } else if (used < len) {
        sb_add(&h->raw, text + used, len - used);
    }
    write_log(p, clean.buf, clean.len);
    if (which == ERR) tail_add(p, clean.buf, clean.len);
    if (p->echo) echo_lines(p, &h->line, clean.buf, clean.len, final);
    sb_release(&clean);
}

/* Reads what is available from one output pipe, at most PUMP_READS reads a
 * call: the loop calls again while more is waiting (the pipe is watched
 * level-triggered), so a step that writes as fast as flow reads does not keep
 * the loop from signals, timers and the other steps.  Returns false at EOF. */
#define PUMP_READS 64
static bool pump(struct proc *p, int fd)
{
    char buf[16384];
    for (int reads = 0; reads < PUMP_READS; reads++) {
        ssize_t n = read(fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return errno == EAGAIN;
        if (n == 0) return false;
        if (fd == p->out_fd && p->capture_stdout) sb_add(&p->captured, buf, (size_t)n);
        else take_output(p, fd == p->err_fd ? ERR : OUT, buf, (size_t)n, false);
    }
    return true;
}

static void close_pipe(struct proc *p, int *fd)
{
    if (*fd < 0) return;
    loop_unwatch(p->loop, *fd);
    close(*fd);
    *fd = -1;
}

static void on_output(void *arg, int fd, unsigned events)
{
    struct proc *p = arg;
    if (pump(p, fd)) return;
    int which = fd == p->err_fd ? ERR : OUT;
    take_output(p, which, "", 0, true);
    close_pipe(p, which == ERR ? &p->err_fd : &p->out_fd);
}

#define KILL_GRACE_S 5.0

static void kill_after_grace(void *arg)
{
    struct proc *p = arg;
    p->timer = 0;
    proc_kill(p, SIGKILL);
}

/* A cancelled step whose leader exited inside the grace period (a shell that
 * dies on SIGTERM while a child that ignores it runs on): the group still
 * gets its SIGKILL when the grace period ends, or when flow ends first
 * (proc_stop_lingering), though the step has been reported and freed.
 *
 * Why the group id cannot have changed hands by then: the leader is left
 * unreaped (a zombie) until that SIGKILL is sent.  A process id is not given
 * out again while a zombie holds it, nor while any process still has it as
 * its group id, so kill(-pgid) reaches this group's members, or nobody
 * (a group with only the zombie left: harmless).  The reaper keeps the group
 * listed until then, so a flow killed meanwhile still has it stopped. */
struct lingering {
    struct loop *loop;
    pid_t pgid;                    /* = the unreaped leader's pid */
    unsigned long timer;
    pid_t *groups;                 /* the process's, handed on (proctree.h) */
    size_t n_groups, cap_groups;
};
static struct lingering **lingering;
static size_t n_lingering, cap_lingering;

static void end_lingering(size_t i)
{
    struct lingering *g = lingering[i];
    proctree_groups(g->pgid, getpgrp(), &g->groups, &g->n_groups, &g->cap_groups);
    proctree_signal(g->pgid, g->groups, g->n_groups, SIGKILL);
    reaper_forget(g->pgid);            /* before the reap, while the pid cannot be reused */
    waitpid(g->pgid, NULL, 0);         /* a zombie already: no wait */
    lingering[i] = lingering[--n_lingering];
    free(g->groups);
    free(g);
}

static void lingering_grace_over(void *arg)
{
    for (size_t i = 0; i < n_lingering; i++)
        if (lingering[i] == arg) { end_lingering(i); return; }
}

/* p has exited (unreaped) with its SIGKILL still due: hands that on. */
static void linger(struct proc *p)
{
    struct lingering *g = xcalloc(1, sizeof *g);
    g->loop = p->loop;
    g->pgid = p->pid;
    g->groups = p->groups;
    g->n_groups = p->n_groups;
    g->cap_groups = p->cap_groups;
    p->groups = NULL;
    p->n_groups = p->cap_groups = 0;
    double left = p->kill_at - monotonic_seconds();
    g->timer = loop_add_timer(p->loop, left > 0 ? left : 0, lingering_grace_over, g);
    ARRAY_GROW(lingering, n_lingering, cap_lingering);
    lingering[n_lingering++] = g;
}

void proc_stop_lingering(struct loop *loop)
{
    for (size_t i = n_lingering; i-- > 0;) {
        if (loop && lingering[i]->loop != loop) continue;
        loop_cancel_timer(lingering[i]->loop, lingering[i]->timer);
        end_lingering(i);
    }
}

/* The exit status of pid, which has exited, as waitpid gives it, but with
 * pid left unreaped: false while it runs. */
static bool peek_exit(pid_t pid, int *status)
{
    siginfo_t si;
    memset(&si, 0, sizeof si);
    if (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) != 0 || si.si_pid != pid) return false;
    if (si.si_code == CLD_EXITED) *status = (si.si_status & 0xff) << 8;
    else *status = (si.si_status & 0x7f) | (si.si_code == CLD_DUMPED ? 0x80 : 0);
    return true;
}

void proc_cancel(struct proc *p, enum cancel_mode mode)
{
    if (!p || p->exited) return;
    if (mode == CANCEL_FORCED) {
        if (p->timer) loop_cancel_timer(p->loop, p->timer);
        p->timer = 0;
        p->killing = true;               /* nothing left to escalate to */
        proc_kill(p, SIGKILL);
        return;
    }
    proc_kill(p, SIGTERM);
    if (p->killing) return;              /* the grace period already runs: it is not restarted */
    if (p->timer) loop_cancel_timer(p->loop, p->timer);     /* the timeout: stopping now anyway */
    p->killing = true;
    p->kill_at = monotonic_seconds() + KILL_GRACE_S;
    p->timer = loop_add_timer(p->loop, KILL_GRACE_S, kill_after_grace, p);
}

static void on_timeout(void *arg)
{
    struct proc *p = arg;
    p->timer = 0;
    p->timed_out = true;
    proc_cancel(p, CANCEL_GRACEFUL);
}

/* The process has exited: reap it, drain what it wrote and report.  Output
 * pipes may still be held open by a grandchild it left behind; we take what
 * is there now rather than wait for that grandchild. */
static void on_pidfd(void *arg, int fd, unsigned events)
{
    struct proc *p = arg;
    if (p->killing && p->timer) {        /* cancelled, the group's SIGKILL still due: see linger */
        if (!peek_exit(p->pid, &p->status)) return;
        linger(p);                       /* (its own timer; p's goes below) */
    } else {
        reaper_forget(p->pid);           /* before the reap, while the pid cannot be reused */
        if (waitpid(p->pid, &p->status, WNOHANG) != p->pid) return;
    }
    p->exited = true;
    if (p->timer) { loop_cancel_timer(p->loop, p->timer); p->timer = 0; }
    loop_unwatch(p->loop, fd);
    close(p->pidfd);
    p->pidfd = -1;
    if (p->out_fd >= 0) pump(p, p->out_fd);
    if (p->err_fd >= 0) pump(p, p->err_fd);
    take_output(p, OUT, "", 0, true);   /* what a grandchild may still add is not waited for */
    take_output(p, ERR, "", 0, true);
    close_pipe(p, &p->out_fd);
    close_pipe(p, &p->err_fd);
    if (p->log_fd >= 0) {
        if (close(p->log_fd) != 0 && !p->log_errno) p->log_errno = errno;
        p->log_fd = -1;
    }
    p->on_exit(p, p->arg);
}

/* environ plus NAME=value pairs; a pair overrides an inherited variable. */
static char **build_env(char *const *extra, size_t *n_out)
{
    size_t n = 0, m = 0;
    while (environ[n]) n++;
    while (extra && extra[m]) m++;
    char **env = xmalloc((n + m + 1) * sizeof *env);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        size_t namelen = strcspn(environ[i], "=");
        bool overridden = false;
        for (size_t j = 0; j < m; j++)
            if (strncmp(extra[j], environ[i], namelen + 1) == 0) overridden = true;
        if (!overridden) env[k++] = environ[i];
    }
    for (size_t j = 0; j < m; j++) env[k++] = extra[j];
    env[k] = NULL;
    *n_out = k;
    return env;
}

static int start(struct proc *p, const struct proc_spec *spec, char *err, size_t errlen)
{
    int out[2], errp[2];
    if (pipe2(out, O_CLOEXEC) != 0) { errf(err, errlen, "pipe: %s", strerror(errno)); return -1; }
    if (pipe2(errp, O_CLOEXEC) != 0) {
        errf(err, errlen, "pipe: %s", strerror(errno));
        close(out[0]); close(out[1]);
        return -1;
    }
    sigset_t mask, defaults;
    loop_child_sigmask(&mask);
    sigemptyset(&defaults);
    sigaddset(&defaults, SIGINT);
    sigaddset(&defaults, SIGTERM);
    sigaddset(&defaults, SIGPIPE);
    sigaddset(&defaults, SIGCHLD);
    size_t n_env;
    char **env = build_env(spec->env_extra, &n_env);
    struct spawn_plan plan = { .argv = spec->argv, .envp = env, .stdout_fd = out[1], .stderr_fd = errp[1],
                               .cwd = spec->cwd, .mask = &mask, .defaults = &defaults };
    reaper_start();
    /* argv[0] where PATH had it when first looked up (command_path.h); if it
     * is gone since, or was never found there, posix_spawnp looks itself. */
    const char *exe = command_path_find(spec->argv[0]);
    int rc = exe ? spawn_at(exe, &plan, &p->pid) : ENOENT;
    if (exe && rc == ENOENT) command_path_forget(spec->argv[0]);
    if (rc == ENOENT) rc = spawn_search(&plan, &p->pid);
    if (rc == 0) reaper_watch(p->pid);   /* at once: flow may be killed at any moment */
    free(env);
    close(out[1]);
    close(errp[1]);
    p->out_fd = out[0];
    p->err_fd = errp[0];
    if (rc != 0) {
        if (rc == ENOENT) errf(err, errlen, "command not found: %s", spec->argv[0]);
        else errf(err, errlen, "cannot run %s: %s", spec->argv[0], strerror(rc));
        return -1;
    }
    return 0;
}

struct proc *proc_spawn(struct loop *loop, const struct proc_spec *spec,
                        proc_exit_fn on_exit, void *arg, char *err, size_t errlen)
{
    if (!spec->argv || !spec->argv[0] || !spec->argv[0][0]) {
        errf(err, errlen, "empty command");
        return NULL;
    }
    struct proc *p = xcalloc(1, sizeof *p);
    p->loop = loop;
    p->pidfd = p->out_fd = p->err_fd = p->log_fd = -1;
    p->on_exit = on_exit;
    p->arg = arg;
    p->capture_stdout = spec->capture_stdout;
    p->echo = spec->echo;
    p->echo_prefix = spec->echo_prefix ? xstrdup(spec->echo_prefix) : NULL;
    if (spec->log_path) {
        p->log_path = xstrdup(spec->log_path);
        p->log_append = spec->log_append;
        if (spec->log_header) {
            struct strbuf h = STRBUF_INIT;
            ui_redact_span(spec->log_header, strlen(spec->log_header), true, &h);
            p->log_header = h.len ? xstrdup(h.buf) : NULL;
            sb_release(&h);
        }
    }
    if (start(p, spec, err, errlen) != 0) { proc_free(p); return NULL; }
    p->pidfd = pidfd_open(p->pid, 0);
    if (p->pidfd < 0) {
        errf(err, errlen, "pidfd_open: %s (flow needs Linux 5.3 or later)", strerror(errno));
        kill(-p->pid, SIGKILL);            /* (just started: nothing of its own yet) */
        reaper_forget(p->pid);
        waitpid(p->pid, NULL, 0);
        proc_free(p);
        return NULL;
    }
    fcntl(p->out_fd, F_SETFL, O_NONBLOCK);
    fcntl(p->err_fd, F_SETFL, O_NONBLOCK);
    if (loop_watch(loop, p->out_fd, LOOP_READ, on_output, p) != 0 ||
        loop_watch(loop, p->err_fd, LOOP_READ, on_output, p) != 0 ||
        loop_watch(loop, p->pidfd, LOOP_READ, on_pidfd, p) != 0) {
        errf(err, errlen, "cannot watch %s: %s", spec->argv[0], strerror(errno));
        proc_free(p);                /* stops it: a process nobody watches must not run */
        return NULL;
    }
    if (spec->timeout_s > 0) p->timer = loop_add_timer(loop, spec->timeout_s, on_timeout, p);
    return p;
}

/* Its group, and the groups of its descendants outside it (proctree.h). */
static void signal_tree(struct proc *p, int sig)
{
    proctree_groups(p->pid, getpgrp(), &p->groups, &p->n_groups, &p->cap_groups);
    proctree_signal(p->pid, p->groups, p->n_groups, sig);
}

void proc_kill(struct proc *p, int sig)
{
    if (p && !p->exited && p->pid > 0) signal_tree(p, sig);
}

void proc_free(struct proc *p)
{
    if (!p) return;
    if (p->timer) loop_cancel_timer(p->loop, p->timer);
    if (p->pidfd >= 0) {                 /* still running: never leave a zombie or orphan */
        signal_tree(p, SIGKILL);
        reaper_forget(p->pid);
        waitpid(p->pid, NULL, 0);
        loop_unwatch(p->loop, p->pidfd);
        close(p->pidfd);
    }
    free(p->groups);
    close_pipe(p, &p->out_fd);
    close_pipe(p, &p->err_fd);
    if (p->log_fd >= 0) close(p->log_fd);
    sb_release(&p->captured);
    for (int i = OUT; i <= ERR; i++) {
        sb_release(&p->held[i].raw);
        sb_release(&p->held[i].line);
    }
    free(p->tail_text);
    free(p->echo_prefix);
    free(p->log_path);
    free(p->log_header);
    free(p);
}

bool proc_timed_out(const struct proc *p) { return p->timed_out; }

int proc_exit_code(const struct proc *p)
{
    if (WIFSIGNALED(p->status)) return 128 + WTERMSIG(p->status);
    return WEXITSTATUS(p->status);
}

int proc_log_errno(const struct proc *p)
{
    return p->log_errno;
}

int proc_term_signal(const struct proc *p)
{
    return WIFSIGNALED(p->status) ? WTERMSIG(p->status) : 0;
}

const char *proc_stderr_tail(const struct proc *p)
{
    struct proc *mp = (struct proc *)p;      /* the text is a cache of the ring */
    free(mp->tail_text);
    size_t start = (p->tail_pos + TAIL_MAX - p->tail_len) % TAIL_MAX;
    mp->tail_text = xmalloc(p->tail_len + 1);
    for (size_t i = 0; i < p->tail_len; i++) mp->tail_text[i] = p->tail[(start + i) % TAIL_MAX];
    mp->tail_text[p->tail_len] = '\0';
    return mp->tail_text;
}

const char *proc_stdout(const struct proc *p, size_t *len)
{
    if (len) *len = p->captured.len;
    return p->captured.buf ? p->captured.buf : "";
}
