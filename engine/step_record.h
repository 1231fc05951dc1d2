/* step_record.h — a step's successful run as its state record
 * (statestore.h): what the record's fields and body hold, made from the JSON
 * texts the step's end already has (its journal line's), or with the
 * outputs' fields given by whoever wrote the text (a Lua step's body in C),
 * which are then not read from it again.  One rule for both
 * writers: the engine, when a step's end is recorded (step.c), and the
 * stdlib, when it folds an earlier run's journal in (flow.state's put).
 *
 * The body is {"parts":…,"outputs":…,"metrics":…}: the fingerprint's parts;
 * the output records, only when one of them is not a file or folder (those
 * are the record's own fields); the metrics, when the step reported any.
 * Each output record of `outputs_json` ({dataset: {path =, hash =, value =,
 * cached =, uncacheable =, recompute =}}) gives the record an output: 'f' a
 * file or folder at its path, 'v' a value inline in the body, 'c' a value
 * cached at <the store's values dir>/<hash>, 'u' a value that could not be
 * cached, 't' a value not kept (its hash names what made it; its producer
 * is called again when a reader needs it), 'm' any other.
 * Nothing here knows Lua. */
#ifndef FLOW_STEP_RECORD_H
#define FLOW_STEP_RECORD_H

#include <stddef.h>

struct state_store;

struct step_record {
    const char *name;            /* the store's key, masked by the caller */
    const char *fp;
    double time;                 /* its step_end's */
    /* JSON texts, masked by whoever made them; NULL: none */
    const char *parts_json, *outputs_json, *metrics_json;
    /* outputs_json's outputs as the record has them, in its order, when
     * whoever made the text had them as fields (a Lua step's body in C:
     * values inline, or not kept, so no path); NULL: read from the text.
     * FLOW_DEBUG_RECORD_FIELDS=1 reads the text too and refuses a record
     * whose fields differ (t_outputs.sh). */
    const struct state_out *outs;
    size_t n_outs;
};

/* Puts the record into the store (state_store_put).  -1 with a message when
 * outputs_json is not a JSON object of objects, or the store refuses it. */
int step_record_put(struct state_store *s, const struct step_record *rec, char *err, size_t errlen);

#endif
