/* amlignore.h — which files of a code snapshot an ignore file leaves out,
 * decided the way the Azure ML SDK decides it (azure-ai-ml's IgnoreFile over
 * its vendored pathspec GitWildMatchPattern), so that flow uploads the files
 * the SDK would and its content hash can match the SDK's.
 *
 * The rules, as the SDK applies them (each checked against its source):
 * - a line is stripped of leading and trailing white space (Python's
 *   str.strip); empty lines, lines starting with '#' and a lone "/" are no
 *   rules; "\#" and "\!" stand for a literal '#' or '!';
 * - '!' negates: a path it matches is kept;
 * - the last rule that matches a path decides (azure-ai-ml 1.4, Debian's,
 *   puts the rules in a Python set and lets the first one in set order
 *   decide, so a path matched by both a rule and a '!' rule gets an answer
 *   that changes with PYTHONHASHSEED; later copies of the same class keep
 *   the file's order and let the last match win, like git: the rule here);
 * - as the SDK tests each file's own path, a '!' rule keeps a file even in an
 *   ignored directory ("data/" then "!data/keep.csv" keeps it; git would not);
 * - a rule without a '/' but at its end matches at any depth; with one, it is
 *   anchored at the root ("/x" and "a/b" alike); a trailing '/' matches only
 *   what is below a directory of that name; a rule matches a directory's name
 *   and so everything below it;
 * - "**" as a whole segment spans directories ("**" alone: everything; "**"
 *   then '/': everything in a subdirectory), '*' and '?' stay in one segment (a
 *   segment that is just "*" needs at least one character), "[...]" is a set
 *   ("[!...]" negated, ranges "a-z"; as in the SDK's regular expression it is
 *   not kept from matching '/', but a '/' in it splits the rule first like
 *   any other), '\' escapes the next character;
 * - every path is matched as it is, relative to the snapshot's root, with '/'
 *   between components; a file is excluded when its own path is.  The SDK
 *   tests files only; a directory is skipped here only when no file below it
 *   could be kept (amlignore_excludes_dir), which gives the same files.
 * Departures, where the SDK cannot give an answer at all: a trailing space
 * escaped by '\' is kept as in git (the SDK strips it and then fails on the
 * lone backslash).  A rule the SDK rejects (a lone "!", a trailing '\', a
 * range such as "[z-a]") is an error here too.
 *
 * Matching is a simulation of the rule's automaton over the path's code
 * points (time proportional to path length × rule size, no backtracking).
 * A finished struct amlignore is only read: safe from any number of threads. */
#ifndef FLOW_AZUREML_AMLIGNORE_H
#define FLOW_AZUREML_AMLIGNORE_H

#include <stdbool.h>
#include <stddef.h>

struct amlignore;

struct amlignore *amlignore_new(void);
void amlignore_free(struct amlignore *ig);

/* Adds the rules of an ignore file's text (UTF-8; lines end with "\n", "\r\n"
 * or "\r", as Python reads them).  0, or -1 with "NAME:LINE: why" in err
 * (the text is not UTF-8, or a rule is invalid); rules before the bad line
 * stay added. */
int amlignore_add_text(struct amlignore *ig, const char *text, size_t len, const char *name,
                       char *err, size_t errlen);
/* One rule (no line break in it).  0, or -1 with why in err. */
int amlignore_add_rule(struct amlignore *ig, const char *rule, char *err, size_t errlen);
/* The number of rules (comments and blank lines not counted). */
size_t amlignore_rule_count(const struct amlignore *ig);

/* Whether the file at `rel` (relative to the root, '/'-separated, no
 * leading "./" or '/') is left out of the snapshot. */
bool amlignore_excludes(const struct amlignore *ig, const char *rel);
/* Whether every file that could be below the directory `rel` is left out,
 * so that the walk need not enter it.  False when unsure. */
bool amlignore_excludes_dir(const struct amlignore *ig, const char *rel);

#endif
