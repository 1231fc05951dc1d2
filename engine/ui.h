/* ui.h — what a person sees on stderr.  On a terminal, a live display that
 * redraws in place (counts, elapsed time, one line per running step); else,
 * or with --progress=plain, one line per step state change.  Messages, step
 * output (-v) and what Lua steps print appear above the live display.
 * Colour only on a terminal and never with NO_COLOR. */
#ifndef FLOW_UI_H
#define FLOW_UI_H

#include "sched.h"
#include <stdbool.h>
#include <stddef.h>

enum ui_level { UI_QUIET, UI_NORMAL, UI_VERBOSE };
enum ui_progress { UI_PROGRESS_AUTO, UI_PROGRESS_LIVE, UI_PROGRESS_PLAIN };

void ui_init(enum ui_level level, enum ui_progress progress);
enum ui_level ui_level(void);

void ui_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void ui_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void ui_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Text for stdout (a Lua step's print) or a step's output for stderr (-v),
 * written without disturbing the live display. */
void ui_stdout(const char *text, size_t len);
void ui_step_output(const char *prefix, const char *buf, size_t len);

/* Every message goes through `redact` (when set) before it is printed: the
 * configuration masks secrets this way.  It returns a malloc'd copy or NULL. */
typedef char *(*ui_redact_fn)(void *ctx, const char *text);
void ui_set_redactor(ui_redact_fn redact, void *ctx);
void *ui_redactor_ctx(void);

struct sched_observer ui_sched_observer(void);
void ui_run_begin(const struct dag *dag, const bool *selected, struct loop *loop);
void ui_run_end(const struct sched *s);

#endif
