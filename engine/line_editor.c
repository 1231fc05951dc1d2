/* line_editor.c — GNU Readline through dlopen, on the event loop (line_editor.h). */
#include "line_editor.h"

#include "loop.h"
#include "util.h"

#include <dlfcn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <readline/history.h>
#include <readline/readline.h>

/* The soname of Debian's libreadline8 (libreadline-dev's libreadline.so). */
#define READLINE_SONAME "libreadline.so.8"
#define HISTORY_LINES 1000

/* Each pointer has the type of readline.h's declaration, as curl_lib.h does. */
#define RL_FUNCTIONS(X)                                                                                       \
    X(rl_callback_handler_install) X(rl_callback_read_char) X(rl_callback_handler_remove)                     \
    X(rl_callback_sigcleanup) X(rl_free_line_state) X(rl_crlf) X(rl_completion_matches) X(add_history)        \
    X(read_history) X(write_history) X(history_truncate_file) X(stifle_history)
#define RL_VARIABLES(X)                                                                                       \
    X(rl_attempted_completion_function) X(rl_completer_word_break_characters) X(rl_readline_name)              \
    X(rl_catch_signals) X(rl_attempted_completion_over) X(rl_line_buffer) X(rl_completion_append_character)

struct readline_lib {
#define RL_FUNCTION_FIELD(name) __typeof__(&name) name;
#define RL_VARIABLE_FIELD(name) __typeof__(name) *name;
    RL_FUNCTIONS(RL_FUNCTION_FIELD)
    RL_VARIABLES(RL_VARIABLE_FIELD)
#undef RL_FUNCTION_FIELD
#undef RL_VARIABLE_FIELD
};

struct line_editor {
    struct loop *loop;
    char *history;
    line_complete_fn complete;
    void *arg;
    bool got;                       /* the line handler was called */
    char *line;                     /* what it was given (NULL: end of input) */
    char **candidates;              /* the completion being listed */
    size_t next;
};

static struct readline_lib rl;
static struct line_editor *active;  /* readline's callbacks take no argument */

/* Loads readline once per process (as curl_lib.c loads libcurl); a failure
 * keeps its message, which later calls give again. */
static int load(char *err, size_t errlen)
{
    static bool tried;
    static char load_error[512];
    if (!tried) {
        tried = true;
        void *h = dlopen(READLINE_SONAME, RTLD_NOW | RTLD_LOCAL);
        if (!h) errf(load_error, sizeof load_error, "cannot load %s (Debian's libreadline8): %s", READLINE_SONAME,
                     dlerror());
#define RL_LOAD(name)                                                                                          \
        if (h && !(*(void **)&rl.name = dlsym(h, #name))) {                                                    \
            errf(load_error, sizeof load_error, "%s has no %s", READLINE_SONAME, #name);                       \
            dlclose(h);                                                                                        \
            h = NULL;                                                                                          \
        }
        RL_FUNCTIONS(RL_LOAD)
        RL_VARIABLES(RL_LOAD)
#undef RL_LOAD
    }
    if (!load_error[0]) return 0;
    errf(err, errlen, "%s", load_error);
    return -1;
}

/* rl_completion_matches' generator: the candidates, one per call. */
static char *next_candidate(const char *text, int state)
{
    (void)text;
    struct line_editor *ed = active;
    if (state == 0) ed->next = 0;
    return ed->candidates[ed->next] ? ed->candidates[ed->next++] : NULL;   /* readline frees each */
}

static char **attempted_completion(const char *text, int start, int end)
{
    struct line_editor *ed = active;
    *rl.rl_attempted_completion_over = 1;       /* no file names when there is nothing */
    *rl.rl_completion_append_character = '\0'; /* params<Tab> then .min: no space between */
    if (!ed || !ed->complete) return NULL;
    ed->candidates = ed->complete(ed->arg, *rl.rl_line_buffer, start, end);
    /* the generator hands readline every candidate: only the array is ours */
    char **matches = ed->candidates ? rl.rl_completion_matches(text, next_candidate) : NULL;
    free(ed->candidates);
    ed->candidates = NULL;
    return matches;
}

struct line_editor *line_editor_open(struct loop *loop, const char *history, line_complete_fn complete, void *arg,
                                     char *err, size_t errlen)
{
    if (load(err, errlen) != 0) return NULL;
    struct line_editor *ed = xcalloc(1, sizeof *ed);
    ed->loop = loop;
    ed->history = history ? xstrdup(history) : NULL;
    ed->complete = complete;
    ed->arg = arg;
    *rl.rl_readline_name = "flow";              /* $if flow in ~/.inputrc */
    *rl.rl_catch_signals = 0;                   /* the loop takes SIGINT, SIGTERM and SIGHUP */
    *rl.rl_attempted_completion_function = attempted_completion;
    /* a word ends at these, so that a.b<Tab> and f(x.<Tab> complete the last part */
    *rl.rl_completer_word_break_characters = " \t\n\"'`@$><=;|&{(,[+-*/%^~#:.";
    rl.stifle_history(HISTORY_LINES);
    if (ed->history) rl.read_history(ed->history);   /* none yet is fine */
    return ed;
}

void line_editor_close(struct line_editor *ed)
{
    if (!ed) return;
    if (ed->history && rl.write_history(ed->history) == 0) rl.history_truncate_file(ed->history, HISTORY_LINES);
    if (active == ed) active = NULL;
    free(ed->history);
    free(ed);
}

static void on_line(char *line)
{
    active->got = true;
    active->line = line;
    rl.rl_callback_handler_remove();            /* the terminal as it was, until the next prompt */
}

static void on_input(void *arg, int fd, unsigned events)
{
    (void)arg, (void)fd, (void)events;
    rl.rl_callback_read_char();
}

enum line_result line_editor_read(struct line_editor *ed, const char *prompt, char **line)
{
    *line = NULL;
    active = ed;
    ed->got = false;
    ed->line = NULL;
    int seen = loop_interrupts(ed->loop);
    rl.rl_callback_handler_install(prompt, on_line);
    if (loop_watch(ed->loop, STDIN_FILENO, LOOP_READ, on_input, ed) != 0) {
        rl.rl_callback_handler_remove();
        return LINE_EOF;
    }
    while (!ed->got && loop_interrupts(ed->loop) == seen) loop_run_once(ed->loop, -1);
    loop_unwatch(ed->loop, STDIN_FILENO);
    if (!ed->got) {                             /* Ctrl-C: drop the line, a fresh prompt next */
        rl.rl_callback_sigcleanup();
        rl.rl_free_line_state();
        rl.rl_callback_handler_remove();
        rl.rl_crlf();
        return LINE_INTERRUPTED;
    }
    if (!ed->line) return LINE_EOF;
    *line = ed->line;
    return LINE_OK;
}

void line_editor_remember(struct line_editor *ed, const char *line)
{
    (void)ed;
    rl.add_history(line);
}
