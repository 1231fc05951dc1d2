/* ui.h — what a person sees on stderr: one line per step state change, a
 * summary at the end, and errors in one consistent form.  Colour only on a
 * terminal and never with NO_COLOR. */
#ifndef FLOW_UI_H
#define FLOW_UI_H

#include "sched.h"
#include <stdbool.h>

enum ui_level { UI_QUIET, UI_NORMAL, UI_VERBOSE };

void ui_init(enum ui_level level);
enum ui_level ui_level(void);
bool ui_color(void);

void ui_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void ui_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void ui_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Every message goes through `redact` (when set) before it is printed: the
 * configuration masks secrets this way.  It returns a malloc'd copy or NULL. */
typedef char *(*ui_redact_fn)(void *ctx, const char *text);
void ui_set_redactor(ui_redact_fn redact, void *ctx);
void *ui_redactor_ctx(void);

struct sched_observer ui_sched_observer(void);
void ui_run_begin(const struct dag *dag);
void ui_run_end(const struct sched *s);

#endif
