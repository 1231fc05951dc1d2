/* fingerprint.h — the one rule that turns a step's fingerprint parts into its
 * fingerprint (stdlib/flow/fingerprint.lua computes the parts and calls this
 * through flow.cache.fp_combine).  Nothing here knows Lua. */
#ifndef FLOW_FINGERPRINT_H
#define FLOW_FINGERPRINT_H

#include "hash.h"
#include <stddef.h>

#define FP_VERSION "flow-fingerprint-1"

/* Hex digits of each part a record keeps, for --explain (fingerprint.short). */
#define FP_SHORT 16

/* A string with its length: the outputs part holds NUL bytes. */
struct fp_str { const char *s; size_t len; };
struct fp_kv { struct fp_str key, value; };

/* code, outputs: required; dist: {NULL, 0} when the step is not distributed.
 * files, params, inputs: key -> hash, in any order (sorted here, in place,
 * bytewise as Lua compares strings in the C locale). */
struct fp_parts {
    struct fp_str code, dist, outputs;
    struct fp_kv *files, *params, *inputs;
    size_t n_files, n_params, n_inputs;
};

/* SHA-256 of VERSION, code, dist (or "-"), outputs, then for each non-empty
 * map in the order files, params, inputs: its name and each key and value by
 * key (bytewise) — every item followed by a NUL but the last. */
void fp_combine(struct fp_parts *p, char hex[SHA256_HEX_SIZE]);
void fp_combine_md(struct fp_parts *p, unsigned char md[SHA256_SIZE]);     /* the digest's bytes */

#endif
