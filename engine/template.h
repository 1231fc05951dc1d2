/* template.h — `${inputs.x}`, `${outputs.y}`, `${params.a.b}`, `${credentials.a.b}` in
 * command steps.
 * The caller resolves each reference through a callback, so the engine decides
 * what a name means (a materialised path, a parameter's text). `$${` is a literal `${`;
 * `${NAME}` without a dot (a shell variable, `${RANK:-0}`) is left as it is. */
#ifndef FLOW_TEMPLATE_H
#define FLOW_TEMPLATE_H

#include "util.h"

/* Append the value of `${ns.key}` to `out`; return -1 with a message if unknown. */
typedef int (*template_lookup_fn)(void *ctx, const char *ns, const char *key,
                                  struct strbuf *out, char *err, size_t errlen);

/* Returns a malloc'd expansion, or NULL with the reason in err. */
char *template_expand(const char *tmpl, template_lookup_fn lookup, void *ctx,
                      char *err, size_t errlen);

/* Calls `visit` for every reference in tmpl (for validation before a run). */
int template_each_ref(const char *tmpl,
                      int (*visit)(void *ctx, const char *ns, const char *key),
                      void *ctx, char *err, size_t errlen);

#endif
