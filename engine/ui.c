/* ui.c — see ui.h.  Progress goes to stderr so that stdout stays the
 * pipeline's own output (what its steps print). */
#include "ui.h"
#include "util.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static enum ui_level level = UI_NORMAL;
static bool color;
static double run_started;

void ui_init(enum ui_level lvl)
{
    const char *no_color = getenv("NO_COLOR");
    level = lvl;
    color = isatty(2) && !(no_color && no_color[0]) && !(getenv("TERM") && !strcmp(getenv("TERM"), "dumb"));
}

enum ui_level ui_level(void) { return level; }
bool ui_color(void) { return color; }

static const char *paint(const char *code) { return color ? code : ""; }
#define RED    paint("\033[31m")
#define GREEN  paint("\033[32m")
#define YELLOW paint("\033[33m")
#define DIM    paint("\033[2m")
#define BOLD   paint("\033[1m")
#define RESET  paint("\033[0m")

static ui_redact_fn redactor;
static void *redactor_ctx;

void ui_set_redactor(ui_redact_fn redact, void *ctx)
{
    redactor = redact;
    redactor_ctx = ctx;
}

void *ui_redactor_ctx(void) { return redactor_ctx; }

static void vmessage(const char *tag, const char *tagcolor, const char *fmt, va_list ap)
{
    struct strbuf sb = STRBUF_INIT;
    sb_vaddf(&sb, fmt, ap);
    char *clean = redactor && sb.buf ? redactor(redactor_ctx, sb.buf) : NULL;
    fflush(stdout);
    fprintf(stderr, "flow: %s%s%s%s\n", tagcolor, tag, RESET, clean ? clean : sb.buf ? sb.buf : "");
    free(clean);
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

static void step_started(void *ctx, const struct sched *s, size_t i)
{
    (void)ctx;
    if (level == UI_QUIET) return;
    fflush(stdout);
    fprintf(stderr, "  %sstarted%s  %s\n", DIM, RESET, sched_dag(s)->steps[i].name);
}

static void step_finished(void *ctx, const struct sched *s, size_t i)
{
    (void)ctx;
    enum step_state st = sched_state(s, i);
    if (level == UI_QUIET && st != STEP_FAILED) return;
    fflush(stdout);
    const char *word = st == STEP_DONE ? "done" : sched_interrupted(s) ? "stopped" : "FAILED";
    fprintf(stderr, "  %s%-7s%s  %s %s(%.2fs)%s\n", st == STEP_DONE ? GREEN : RED,
            word, RESET, sched_dag(s)->steps[i].name,
            DIM, sched_elapsed(s, i), RESET);
}

struct sched_observer ui_sched_observer(void)
{
    return (struct sched_observer){ NULL, step_started, step_finished };
}

void ui_run_begin(const struct dag *dag)
{
    run_started = monotonic_seconds();
    (void)dag;
}

void ui_run_end(const struct sched *s)
{
    const struct dag *dag = sched_dag(s);
    size_t count[STEP_SKIPPED + 1] = { 0 };
    for (size_t i = 0; i < dag->n_steps; i++) count[sched_state(s, i)]++;
    if (level == UI_QUIET && !count[STEP_FAILED] && !sched_interrupted(s)) return;
    struct strbuf sb = STRBUF_INIT;
    sb_addf(&sb, "%zu done", count[STEP_DONE]);
    if (count[STEP_FAILED]) sb_addf(&sb, ", %s%zu failed%s", RED, count[STEP_FAILED], RESET);
    if (count[STEP_NOT_RUN]) sb_addf(&sb, ", %zu not run", count[STEP_NOT_RUN]);
    if (count[STEP_SKIPPED]) sb_addf(&sb, ", %zu skipped", count[STEP_SKIPPED]);
    fflush(stdout);
    fprintf(stderr, "flow: %s%s%s in %.2fs%s\n", BOLD, sb.buf, RESET,
            monotonic_seconds() - run_started, sched_interrupted(s) ? " (interrupted)" : "");
    sb_release(&sb);
}
