/* ui.c — see ui.h.  Progress goes to stderr so that stdout stays the
 * pipeline's own output.  The live display keeps counters rather than
 * scanning every step, and redraws at most ten times a second, so 100,000
 * steps cost nothing extra. */
#include "ui.h"
#include "json_text.h"
#include "util.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdio_ext.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define REDRAW_S 0.1
#define MAX_RUNNING_LINES 8

static enum ui_level level = UI_NORMAL;
static bool color, live, json;

/* A run's progress.  Several may be under way at once (flow.spawn, a sweep's
 * concurrent trials): each has its counts, the live region shows them all,
 * and a labelled run's lines start with its label. */
struct ui_run {
    const struct sched *sched;       /* set by the first observer call */
    const struct dag *dag;
    char *label;                     /* or NULL */
    char *prefix;                    /* "LABEL: " before its plain lines, or "" */
    double started;
    size_t done, failed, interrupted, running, queued, skipped, up_to_date;
    size_t *running_steps, n_running, cap_running;
    struct ui_run *next;             /* the runs under way */
};

static struct {
    struct ui_run *runs;             /* under way, newest first */
    size_t n_runs;
    struct loop *loop;
    int lines_drawn;                 /* height of the live region on screen */
    bool dirty;                      /* counts changed since the last draw */
    long drawn_second;               /* the elapsed second last drawn */
    unsigned long timer;
} live_state;

void ui_init(enum ui_level lvl, enum ui_progress progress)
{
    const char *no_color = getenv("NO_COLOR"), *term = getenv("TERM");
    bool tty = isatty(2) && !(term && strcmp(term, "dumb") == 0);
    level = lvl;
    color = tty && !(no_color && no_color[0]);
    live = !json && lvl != UI_QUIET && (progress == UI_PROGRESS_LIVE || (progress == UI_PROGRESS_AUTO && tty));
    if (json) color = false;
}

void ui_set_json(bool on)
{
    json = on;
    if (on) color = live = false;
}

/* A JSON log line begun: {"time":…, — the caller adds its fields and ends it. */
static void json_begin(struct strbuf *sb)
{
    sb_adds(sb, "{\"time\":");
    json_seconds(sb, wall_seconds());
}

static void json_field(struct strbuf *sb, const char *key, const char *value)
{
    sb_addf(sb, ",\"%s\":", key);
    json_string_utf8(sb, value);        /* a step's output may be any bytes */
}

/* ---- progress lines, written in batches ----------------------------------
 *
 * A step's lines ("started", "done", or its JSON events) are kept and
 * written PROGRESS_MAX bytes at a time, or PROGRESS_EVERY after the first
 * was kept, and before anything else flow writes (a message, a step's
 * output, print's text, a run's summary, the process's exit): written a line
 * each, 100,000 quick steps made 200,000 writes, 15 % of their run.  What a
 * step wrote to stdout itself (io.write) stays in its place among them: a
 * line is kept only while stdout holds nothing (else what is kept goes out,
 * then stdout), so whatever stdout holds came after every line kept. */
#define PROGRESS_MAX (16 * 1024)
#define PROGRESS_EVERY 0.05

static struct {
    struct strbuf lines;
    struct loop *loop;               /* the runs' (ui_run_begin), for the timer */
    unsigned long timer;
} progress;

void ui_flush(void)
{
    if (progress.timer) loop_cancel_timer(progress.loop, progress.timer);
    progress.timer = 0;
    if (progress.lines.len) fwrite(progress.lines.buf, 1, progress.lines.len, stderr);
    sb_truncate(&progress.lines, 0);
}

/* The kept lines, then what stdout holds (all of it came after them). */
static void flush_all(void)
{
    ui_flush();
    fflush(stdout);
}

static void progress_tick(void *arg)
{
    (void)arg;
    progress.timer = 0;
    flush_all();
}

/* Where a progress line is added (then progress_kept). */
static struct strbuf *progress_line(void)
{
    if (__fpending(stdout)) flush_all();
    return &progress.lines;
}

/* A line added to progress.lines is kept until the next write. */
static void progress_kept(void)
{
    if (progress.lines.len >= PROGRESS_MAX || !progress.loop) flush_all();
    else if (!progress.timer) progress.timer = loop_add_timer(progress.loop, PROGRESS_EVERY, progress_tick, NULL);
}

/* A JSON line ended and kept with the progress lines (the caller flushes
 * what must go out at once). */
static void json_end(struct strbuf *sb)
{
    sb_adds(sb, "}\n");
    sb_add(progress_line(), sb->buf, sb->len);
    sb_release(sb);
    progress_kept();
}

enum ui_level ui_level(void) { return level; }

static const char *paint(const char *code) { return color ? code : ""; }
#define RED    paint("\033[31m")
#define GREEN  paint("\033[32m")
#define YELLOW paint("\033[33m")
#define CYAN   paint("\033[36m")
#define DIM    paint("\033[2m")
#define BOLD   paint("\033[1m")
#define RESET  paint("\033[0m")

static ui_redact_fn redactor;
static void *redactor_ctx;
/* (writers first: the recorder takes it for each job, and a secret added
 * meanwhile must not wait for it to fall idle) */
static pthread_rwlock_t redactor_lock = PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP;

void ui_redactor_share(void) { pthread_rwlock_rdlock(&redactor_lock); }
void ui_redactor_change(void) { pthread_rwlock_wrlock(&redactor_lock); }
void ui_redactor_unlock(void) { pthread_rwlock_unlock(&redactor_lock); }

void ui_set_redactor(ui_redact_fn redact, void *ctx)
{
    ui_redactor_change();
    redactor = redact;
    redactor_ctx = ctx;
    ui_redactor_unlock();
}

void *ui_redactor_ctx(void) { return redactor_ctx; }

size_t ui_redact_span(const char *buf, size_t len, bool final, struct strbuf *out)
{
    if (redactor) return redactor(redactor_ctx, buf, len, final, out);
    sb_add(out, buf, len);
    return len;
}

/* ---- the live region ---------------------------------------------------- */

static void clear_region(void)
{
    if (!live_state.lines_drawn) return;
    fprintf(stderr, "\r\033[%dA\033[J", live_state.lines_drawn);
    live_state.lines_drawn = 0;
}

static void format_clock(char *buf, size_t n, double s)
{
    int t = (int)s;
    if (t >= 3600) snprintf(buf, n, "%d:%02d:%02d", t / 3600, t / 60 % 60, t % 60);
    else snprintf(buf, n, "%d:%02d", t / 60, t % 60);
}

/* One run's lines of the live region: its counts, then (unless `brief`: one
 * of several runs, each a line) its running steps. */
static int draw_run(const struct ui_run *run, double now, bool brief)
{
    char clock[32];
    format_clock(clock, sizeof clock, now - run->started);
    size_t finished = run->done + run->failed + run->interrupted + run->up_to_date;
    size_t total = finished + run->running + run->queued;
    if (run->label) fprintf(stderr, "%s%s%s ", BOLD, run->label, RESET);
    fprintf(stderr, "%s[%zu/%zu]%s done %s%zu%s · running %zu · queued %zu", BOLD,
            finished, total, RESET, GREEN, run->done, RESET, run->running, run->queued);
    if (run->failed) fprintf(stderr, " · %sfailed %zu%s", RED, run->failed, RESET);
    if (run->interrupted) fprintf(stderr, " · interrupted %zu", run->interrupted);
    if (run->up_to_date) fprintf(stderr, " · up to date %zu", run->up_to_date);
    if (run->skipped) fprintf(stderr, " · skipped %zu", run->skipped);
    fprintf(stderr, "  %s%s%s\n", DIM, clock, RESET);
    int lines = 1;
    if (brief) return lines;
    for (size_t k = 0; k < run->n_running && k < MAX_RUNNING_LINES; k++, lines++) {
        size_t i = run->running_steps[k];
        format_clock(clock, sizeof clock, run->sched ? sched_elapsed(run->sched, i) : 0);
        fprintf(stderr, "  %s▸%s %s %s%s%s\n", CYAN, RESET, run->dag->steps[i].name, DIM, clock, RESET);
    }
    if (run->n_running > MAX_RUNNING_LINES) {
        fprintf(stderr, "  %s… and %zu more%s\n", DIM, run->n_running - MAX_RUNNING_LINES, RESET);
        lines++;
    }
    return lines;
}

static void draw_region(void)
{
    if (!live || !live_state.runs) return;
    double now = monotonic_seconds();
    int lines = 0;
    size_t shown = 0;
    bool several = live_state.n_runs > 1;     /* a line each, so that the region fits a screen */
    for (const struct ui_run *r = live_state.runs; r && shown < MAX_RUNNING_LINES; r = r->next, shown++)
        lines += draw_run(r, now, several);
    if (live_state.n_runs > shown) {
        fprintf(stderr, "%s… and %zu more runs%s\n", DIM, live_state.n_runs - shown, RESET);
        lines++;
    }
    live_state.lines_drawn = lines;
    fflush(stderr);
}

static void redraw(void)
{
    clear_region();
    draw_region();
}

/* Redraw when something changed, or when the elapsed clock moves on. */
static void tick(void *arg)
{
    (void)arg;
    long second = (long)monotonic_seconds();
    if (live_state.dirty || second != live_state.drawn_second) {
        live_state.dirty = false;
        live_state.drawn_second = second;
        redraw();
    }
    live_state.timer = loop_add_timer(live_state.loop, REDRAW_S, tick, NULL);
}

/* ---- messages ----------------------------------------------------------- */

static void vmessage(const char *tag, const char *tagcolor, const char *fmt, va_list ap)
{
    struct strbuf sb = STRBUF_INIT, clean = STRBUF_INIT;
    sb_vaddf(&sb, fmt, ap);
    ui_redact_span(sb.buf ? sb.buf : "", sb.len, true, &clean);
    if (json) {
        struct strbuf line = STRBUF_INIT;
        json_begin(&line);
        json_field(&line, "level", *tag == 'e' ? "error" : *tag == 'w' ? "warning" : "info");
        json_field(&line, "message", clean.buf ? clean.buf : "");
        json_end(&line);
        flush_all();
        sb_release(&clean);
        sb_release(&sb);
        return;
    }
    flush_all();
    clear_region();
    fprintf(stderr, "flow: %s%s%s%s\n", tagcolor, tag, RESET, clean.buf ? clean.buf : "");
    draw_region();
    sb_release(&clean);
    sb_release(&sb);
}

void ui_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vmessage("error: ", RED, fmt, ap);
    va_end(ap);
}

void ui_warn(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vmessage("warning: ", YELLOW, fmt, ap);
    va_end(ap);
}

void ui_info(const char *fmt, ...)
{
    if (level == UI_QUIET) return;
    va_list ap;
    va_start(ap, fmt);
    vmessage("", "", fmt, ap);
    va_end(ap);
}

void ui_stdout(const char *text, size_t len)
{
    flush_all();
    struct strbuf clean = STRBUF_INIT;
    ui_redact_span(text, len, true, &clean);
    if (live_state.lines_drawn && isatty(1)) {       /* same screen: write above the display */
        clear_region();
        if (clean.len) fwrite(clean.buf, 1, clean.len, stdout);
        fflush(stdout);
        draw_region();
    } else if (clean.len) {
        fwrite(clean.buf, 1, clean.len, stdout);
    }
    sb_release(&clean);
}

/* -v in JSON: a line per output line, its source the prefix's bracketed text */
static void json_output(const char *prefix, const char *buf, size_t len)
{
    struct strbuf source = STRBUF_INIT;
    sb_adds(&source, prefix);
    while (source.len && (source.buf[source.len - 1] == ' ' || source.buf[source.len - 1] == ']'))
        source.buf[--source.len] = '\0';
    const char *src = source.buf ? source.buf + (source.buf[0] == '[') : "";
    for (size_t at = 0; at < len;) {
        const char *nl = memchr(buf + at, '\n', len - at);
        size_t end = nl ? (size_t)(nl - buf) : len;
        char *text = xstrndup(buf + at, end - at);
        struct strbuf line = STRBUF_INIT;
        json_begin(&line);
        json_field(&line, "event", "output");
        json_field(&line, "source", src);
        json_field(&line, "line", text);
        json_end(&line);
        free(text);
        at = end + 1;
    }
    flush_all();
    sb_release(&source);
}

void ui_step_output(const char *prefix, const char *buf, size_t len)
{
    if (json) {
        json_output(prefix, buf, len);
        return;
    }
    /* stderr is unbuffered: the prefixed lines are made first and written
     * at once (written a byte at a time, -v passed a step's output on at
     * 2 MB/s, and the loop was too busy to see Ctrl-C meanwhile) */
    struct strbuf out = STRBUF_INIT;
    size_t plen = strlen(prefix);
    sb_add(&out, prefix, plen);
    for (size_t i = 0; i < len;) {
        const char *nl = memchr(buf + i, '\n', len - i);
        size_t end = nl ? (size_t)(nl - buf) + 1 : len;
        sb_add(&out, buf + i, end - i);
        i = end;
        if (nl && i < len) sb_add(&out, prefix, plen);
    }
    if (len && buf[len - 1] != '\n') sb_addc(&out, '\n');
    flush_all();
    clear_region();
    fwrite(out.buf, 1, out.len, stderr);
    draw_region();
    sb_release(&out);
}

/* ---- step events -------------------------------------------------------- */

/* A step's start, or its end with the state the scheduler gives it, as a JSON log line. */
static void json_step(const struct ui_run *run, const struct sched *s, size_t i, bool start)
{
    struct strbuf line = STRBUF_INIT;
    enum step_state st = sched_state(s, i);
    json_begin(&line);
    json_field(&line, "event", start ? "step_start" : "step_end");
    if (run->label) json_field(&line, "run", run->label);
    json_field(&line, "step", sched_dag(s)->steps[i].name);
    if (!start) {
        json_field(&line, "state", step_state_name(st));
        if (st != STEP_UP_TO_DATE) {
            sb_adds(&line, ",\"elapsed\":");
            json_seconds(&line, sched_elapsed(s, i));
        }
    }
    json_end(&line);
}

/* "trial 2/4: " for a run with a label (one of several at once), else "". */
static void plain_line(const struct ui_run *run, const struct sched *s, size_t i, const char *word, bool failure)
{
    const char *wcolor = failure ? RED : strcmp(word, "done") == 0 ? GREEN : DIM;
    if (level == UI_QUIET && !failure) return;
    if (json) {
        json_step(run, s, i, strcmp(word, "started") == 0);
        return;
    }
    const char *prefix = run->prefix;
    if (strcmp(word, "started") == 0)
        sb_addf(progress_line(), "  %s%s%-7s%s  %s\n", prefix, DIM, word, RESET, sched_dag(s)->steps[i].name);
    else
        sb_addf(progress_line(), "  %s%s%-7s%s  %s %s(%.2fs)%s\n", prefix, wcolor, word, RESET,
                sched_dag(s)->steps[i].name, DIM, sched_elapsed(s, i), RESET);
    progress_kept();
    if (failure) flush_all();
}

/* Step i, counted done, failed after all: its end could not be recorded. */
static void step_failed_late(void *ctx, const struct sched *s, size_t i)
{
    struct ui_run *run = ctx;
    if (run->done) run->done--;
    run->failed++;
    live_state.dirty = true;
    if (live) clear_region();
    plain_line(run, s, i, "FAILED", true);
}

static void step_started(void *ctx, const struct sched *s, size_t i)
{
    struct ui_run *run = ctx;
    run->sched = s;
    run->running++;
    if (run->queued) run->queued--;
    ARRAY_GROW(run->running_steps, run->n_running, run->cap_running);
    run->running_steps[run->n_running++] = i;
    live_state.dirty = true;
    if (!live) plain_line(run, s, i, "started", false);
}

/* Up to date: counted, and named only in verbose plain mode (a no-op rerun of
 * 10,000 steps should not print 10,000 lines). */
static void step_up_to_date(struct ui_run *run, const struct sched *s, size_t i)
{
    run->sched = s;
    run->up_to_date++;
    if (run->queued) run->queued--;
    live_state.dirty = true;
    if (json && level != UI_QUIET) json_step(run, s, i, false);
    else if (!live && level == UI_VERBOSE) {
        sb_addf(progress_line(), "  %s%s%-7s%s  %s\n", run->prefix, DIM, "up to date", RESET,
                sched_dag(s)->steps[i].name);
        progress_kept();
    }
}

static void step_finished(void *ctx, const struct sched *s, size_t i)
{
    struct ui_run *run = ctx;
    enum step_state st = sched_state(s, i);
    if (st == STEP_UP_TO_DATE) {
        step_up_to_date(run, s, i);
        return;
    }
    run->running--;
    live_state.dirty = true;
    if (st == STEP_DONE) run->done++;
    else if (st == STEP_INTERRUPTED) run->interrupted++;
    else run->failed++;
    for (size_t k = 0; k < run->n_running; k++)
        if (run->running_steps[k] == i) {
            memmove(&run->running_steps[k], &run->running_steps[k + 1], (run->n_running - k - 1) * sizeof(size_t));
            run->n_running--;
            break;
        }
    const char *word = st == STEP_DONE ? "done" : st == STEP_INTERRUPTED ? "interrupted" : "FAILED";
    if (!live) plain_line(run, s, i, word, st == STEP_FAILED);
    else if (st != STEP_DONE) {
        clear_region();
        plain_line(run, s, i, word, st == STEP_FAILED);   /* these stay on screen above the display */
    }
}

struct sched_observer ui_run_observer(struct ui_run *r)
{
    return (struct sched_observer){ r, step_started, step_finished, step_failed_late };
}

struct ui_run *ui_run_begin(const struct dag *dag, const bool *selected, struct loop *loop, const char *label)
{
    struct ui_run *run = xcalloc(1, sizeof *run);
    run->dag = dag;
    run->label = label ? xstrdup(label) : NULL;
    run->prefix = label ? xasprintf("%s: ", label) : xstrdup("");
    run->started = monotonic_seconds();
    progress.loop = loop;
    for (size_t i = 0; i < dag->n_steps; i++) {
        if (!selected || selected[i]) run->queued++;
        else run->skipped++;
    }
    clear_region();
    run->next = live_state.runs;
    live_state.runs = run;
    live_state.n_runs++;
    live_state.dirty = true;
    if (live && !live_state.timer) {
        live_state.loop = loop;
        live_state.timer = loop_add_timer(loop, REDRAW_S, tick, NULL);
    }
    return run;
}

/* The last line of a run: its counts, in JSON or plain text (ui_run_end
 * has written what was kept, and stdout, before it). */
static void run_summary(const struct ui_run *run, const struct sched *s)
{
    size_t not_run = 0;
    const struct dag *dag = sched_dag(s);
    for (size_t i = 0; i < dag->n_steps; i++) not_run += sched_state(s, i) == STEP_NOT_RUN;
    if (level == UI_QUIET && !run->failed && !sched_interrupted(s)) return;
    if (json) {
        struct strbuf line = STRBUF_INIT;
        json_begin(&line);
        json_field(&line, "event", "run_end");
        if (run->label) json_field(&line, "run", run->label);
        size_t counts[] = { run->done, run->failed, run->interrupted, not_run, run->up_to_date, run->skipped };
        const char *names[] = { "done", "failed", "interrupted", "not_run", "up_to_date", "skipped" };
        sb_adds(&line, ",\"steps\":{");
        for (size_t k = 0; k < sizeof counts / sizeof *counts; k++)
            sb_addf(&line, "%s\"%s\":%zu", k ? "," : "", names[k], counts[k]);
        sb_adds(&line, "},\"elapsed\":");
        json_seconds(&line, monotonic_seconds() - run->started);
        sb_addf(&line, ",\"interrupted\":%s", sched_interrupted(s) ? "true" : "false");
        json_end(&line);
        flush_all();
        return;
    }
    struct strbuf sb = STRBUF_INIT;
    sb_addf(&sb, "%zu done", run->done);
    if (run->failed) sb_addf(&sb, ", %s%zu failed%s", RED, run->failed, RESET);
    if (run->interrupted) sb_addf(&sb, ", %zu interrupted", run->interrupted);
    if (not_run) sb_addf(&sb, ", %zu not run", not_run);
    if (run->up_to_date) sb_addf(&sb, ", %zu up to date", run->up_to_date);
    if (run->skipped) sb_addf(&sb, ", %zu skipped", run->skipped);
    fprintf(stderr, "flow: %s%s%s%s in %.2fs%s\n", run->prefix, BOLD, sb.buf, RESET,
            monotonic_seconds() - run->started, sched_interrupted(s) ? " (interrupted)" : "");
    sb_release(&sb);
}

void ui_run_end(struct ui_run *run, const struct sched *s)
{
    flush_all();
    clear_region();
    run_summary(run, s);
    for (struct ui_run **p = &live_state.runs; *p; p = &(*p)->next)
        if (*p == run) {
            *p = run->next;
            break;
        }
    live_state.n_runs--;
    if (!live_state.runs && live_state.timer) {
        loop_cancel_timer(live_state.loop, live_state.timer);
        live_state.timer = 0;
    }
    free(run->running_steps);
    free(run->label);
    free(run->prefix);
    free(run);
    draw_region();
}
