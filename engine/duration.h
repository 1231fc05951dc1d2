/* duration.h — the one rule for durations in flow: node{timeout =}, azureml.yml's
 * timeout and poll_interval, `flow clean --runs-older-than` (the Lua stdlib calls
 * this through flow.core.parse_duration). */
#ifndef FLOW_DURATION_H
#define FLOW_DURATION_H

#include <stdbool.h>
#include <stddef.h>

/* Seconds from text: a number of seconds ("90", "1.5"), or parts such as "30s",
 * "15m", "2h", "1d", "500ms", combined as in "1h30m" or "1d 12h" (spaces around
 * parts allowed).  false for anything else, for infinities and NaN, and for zero
 * unless `allow_zero`. */
bool duration_parse(const char *text, bool allow_zero, double *seconds);

/* Seconds as an ISO 8601 duration, as Azure wants them ("PT1H30M", "PT0.5S"). */
void duration_iso8601(double seconds, char *buf, size_t buflen);

#endif
