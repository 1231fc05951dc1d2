/* line_editor.h — the line editor of `flow repl`: GNU Readline, loaded the
 * first time the REPL reads from a terminal (as libcurl is, curl_lib.h: no
 * other command pays for mapping it), driven by the one event loop through
 * readline's callback interface, so that Ctrl-C (a signal the loop takes)
 * ends the line being edited instead of the process.
 *
 * Nothing here knows of Lua. */
#ifndef FLOW_LINE_EDITOR_H
#define FLOW_LINE_EDITOR_H

#include <stddef.h>

struct loop;
struct line_editor;

/* Candidates for the word line[start..end) (Tab): a NULL-terminated malloc'd
 * array of malloc'd strings, or NULL for none.  Called while a line is read. */
typedef char **(*line_complete_fn)(void *arg, const char *line, int start, int end);

/* NULL with a message when readline cannot be loaded.  history: the file
 * lines are read from now and written to by line_editor_close (NULL: none). */
struct line_editor *line_editor_open(struct loop *loop, const char *history, line_complete_fn complete, void *arg,
                                     char *err, size_t errlen);
/* Writes the history (at most 1,000 lines kept) and frees the editor. */
void line_editor_close(struct line_editor *ed);

enum line_result { LINE_OK, LINE_EOF, LINE_INTERRUPTED };

/* Reads a line after `prompt`: LINE_OK with *line malloc'd (the caller's),
 * LINE_EOF at Ctrl-D on an empty line, LINE_INTERRUPTED when a signal came
 * (the line is dropped, the terminal restored). */
enum line_result line_editor_read(struct line_editor *ed, const char *prompt, char **line);

/* Adds a line to the history. */
void line_editor_remember(struct line_editor *ed, const char *line);

#endif
