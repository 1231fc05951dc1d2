/* desugar.h — turns the `distributed_job<...>` annotation form of pipeline scripts
 * into plain Lua before the chunk is loaded. Every token stays on its line, so
 * Lua's syntax and runtime errors still point at the line the user wrote.
 *
 *   distributed_job<n=4>(fn)                ->  distributed_job{n=4}(fn)
 *   distributed_job<n=4> function f(a)      ->  f = distributed_job{n=4} .. function(a)
 *   distributed_job<n=4> local function f(  ->  local f; f = distributed_job{n=4} .. function(
 *   distributed_job<n=4> function M:f(a)    ->  M.f = distributed_job{n=4} .. function(self, a)
 *
 * The object that `distributed_job{...}` returns wraps the function in its
 * `__concat` metamethod, so the rewrite never has to find the function's `end`. */
#ifndef FLOW_DESUGAR_H
#define FLOW_DESUGAR_H

#include <stddef.h>

/* Rewrites `distributed_job<...>` annotations in Lua source into plain Lua.
 * Returns a malloc'd NUL-terminated buffer (caller frees) and sets *out_len;
 * on error returns NULL, sets *err_line (1-based; 0 when out of memory) and
 * writes a message into err. out_len, err_line and err may be NULL. */
char *desugar_chunk(const char *src, size_t len, size_t *out_len,
                    int *err_line, char *err, size_t errlen);

#endif
