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
/* --log-format json: every line flow writes on stderr is a JSON object —
 * {"time", "level": "error"|"warning"|"info", "message"} for messages,
 * {"time", "event": "step_start"|"step_end", "step", "state", "elapsed"} for
 * steps (up-to-date ones too), {"time", "event": "output", "source", "line"}
 * for a step's output under -v, {"time", "event": "run_end", "steps": {state:
 * count}, "elapsed", "interrupted"} at a run's end; no live display, no colour.
 * Stays set until changed. */
void ui_set_json(bool json);
enum ui_level ui_level(void);

void ui_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void ui_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void ui_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Text for stdout (print), masked, or whole lines of a step's output for
 * stderr (-v; masked by the caller), each line prefixed; both written without
 * disturbing the live display. */
void ui_stdout(const char *text, size_t len);
/* Steps' progress lines are written in batches (and before anything else
 * flow writes): what is kept goes out now, as before the process exits
 * (stdout, which holds only what came after them, is the caller's to
 * flush: lua/main.c checks that flush). */
void ui_flush(void);
void ui_step_output(const char *prefix, const char *buf, size_t len);

/* Everything flow writes goes through `redact` (when set) first: messages,
 * print, a step's output (-v) and its log.  The configuration masks secrets
 * this way.  The contract is config_redact_span's: append buf masked to out and
 * return the bytes consumed — all with `final`, else it may hold back a tail
 * that could be the start of a secret, to be passed again with what follows. */
struct strbuf;
typedef size_t (*ui_redact_fn)(void *ctx, const char *buf, size_t len, bool final, struct strbuf *out);
void ui_set_redactor(ui_redact_fn redact, void *ctx);
void *ui_redactor_ctx(void);
size_t ui_redact_span(const char *buf, size_t len, bool final, struct strbuf *out);
/* A thread other than the one that sets the redactor (step.c's recorder)
 * masks text between ui_redactor_share and ui_redactor_unlock; a change to
 * the redactor or to what it reads (ui_set_redactor, a secret added to the
 * configuration) waits for it, between ui_redactor_change and
 * ui_redactor_unlock.  The setting thread reads without the lock. */
void ui_redactor_share(void);
void ui_redactor_change(void);
void ui_redactor_unlock(void);

/* A run's progress: begun before its scheduler is made (the observer is the
 * scheduler's), ended after it ran (the summary line; frees it).  Several
 * may be under way at once (concurrent trials): the live region shows each,
 * and the lines of a run with a label (NULL: none) start with it. */
struct ui_run;
struct ui_run *ui_run_begin(const struct dag *dag, const bool *selected, struct loop *loop, const char *label);
struct sched_observer ui_run_observer(struct ui_run *r);
void ui_run_end(struct ui_run *r, const struct sched *s);

#endif
