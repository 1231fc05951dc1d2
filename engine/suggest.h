/* suggest.h — "did you mean": the one rule every message of flow uses, from
 * the C engine and (through flow.core.closest) from the Lua stdlib. */
#ifndef FLOW_SUGGEST_H
#define FLOW_SUGGEST_H

#include <stdbool.h>
#include <stddef.h>

/* Edits between a and b: an insertion, a deletion, a change or a swap of
 * neighbours each count one.  SIZE_MAX when either is longer than 256 bytes. */
size_t edit_distance(const char *a, const char *b);

/* Whether a candidate `distance` edits away from `query` is worth suggesting:
 * within a third of the query's length, and always within one edit. */
bool near_enough(const char *query, size_t distance);

/* The candidate nearest to `word` (the first among equals) when it is near
 * enough, else NULL. */
const char *closest_word(const char *word, const char *const *candidates, size_t n);

#endif
