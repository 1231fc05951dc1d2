/* step_decl.h — the steps a pipeline script declares, as compact records:
 * every name (step, dataset, argument, tag, pool, file:line) interned once
 * and referred to by a 32-bit id, inputs and outputs as id pairs in one
 * shared array.  node{} writes a record and the graph is built from records;
 * 100,000 steps take some 30 MB here (a third of it the string map) where
 * one Lua table each took 65 MB of Lua heap.
 * Plain data: what a step's body is (a Lua function, a command) is its
 * owner's business, kept beside the record under the same index. */
#ifndef FLOW_STEP_DECL_H
#define FLOW_STEP_DECL_H

#include "arena.h"
#include "strmap.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A string id: 0 is "none" (an absent pool, namespace, ...). */
typedef uint32_t name_id;

struct step_io { name_id arg, dataset; };

/* The Azure ML settings a step may give (node{ compute = ... }), in this order. */
enum step_aml { AML_COMPUTE, AML_ENVIRONMENT, AML_INSTANCE_TYPE, AML_SHM_SIZE, AML_INPUT_MODE, AML_OUTPUT_MODE,
                STEP_N_AML };

enum step_decl_kind { STEP_DECL_FUNC, STEP_DECL_COMMAND };

enum step_decl_flag {
    STEP_METRICS = 1 << 0,          /* a Lua step returning its metrics (metrics = true) */
    STEP_TIMEOUT = 1 << 1,          /* `timeout` holds the step's limit */
    STEP_INPUTS_MAP = 1 << 2,       /* inputs given as a map {arg = dataset} (else a list or a name) */
    STEP_OUTPUTS_MAP = 1 << 3,
    STEP_DIST = 1 << 4,             /* a distributed_job (its settings are the owner's) */
    STEP_AML = 1 << 5,              /* `aml` indexes its Azure ML settings */
    STEP_TIMEOUT_INTEGER = 1 << 6,  /* the timeout was given as a whole number (Lua shows 5, not 5.0) */
};

struct step_decl {
    name_id name, where, namespace_, pool;
    uint32_t io;                    /* inputs at decls->io[io ...], then the outputs */
    uint32_t n_inputs, n_outputs;
    uint32_t tags, n_tags;          /* decls->tags[tags ...] */
    uint32_t aml;                   /* decls->aml[aml] when STEP_AML */
    uint8_t kind;                   /* enum step_decl_kind */
    uint8_t flags;                  /* enum step_decl_flag */
    int32_t retries;                /* further attempts after a failure; 0: none */
    double timeout;                 /* seconds per attempt, when STEP_TIMEOUT */
};

struct step_decls {
    uint64_t serial;                /* unique among the stores of this process (a freed store's
                                     * address may be reused: a cache of ids keys on this) */
    struct strmap ids;              /* string -> id; keys borrowed from `mem` */
    const char **strs;              /* id -> string; strs[0] is NULL */
    size_t n_strs, cap_strs;
    struct arena mem;
    struct step_decl *recs;
    size_t n_recs, cap_recs;
    struct step_io *io;
    size_t n_io, cap_io;
    name_id *tags;
    size_t n_tags, cap_tags;
    name_id (*aml)[STEP_N_AML];
    size_t n_aml, cap_aml;
};

void step_decls_init(struct step_decls *r);
void step_decls_free(struct step_decls *r);

/* The id of s (NUL-terminated), interning it the first time; 0 for NULL.
 * Returns 0 too past 2^32 - 1 strings (never in practice; callers refuse). */
name_id step_decls_intern(struct step_decls *r, const char *s);
/* The same, with s's strmap_hash given. */
name_id step_decls_intern_hashed(struct step_decls *r, const char *s, uint32_t hash);
static inline const char *step_decls_str(const struct step_decls *r, name_id id)
{
    return r->strs[id];
}

/* Appends to the shared arrays; each returns the index of its first entry
 * (UINT32_MAX past 2^32 - 1 entries: callers refuse). */
uint32_t step_decls_add_io(struct step_decls *r, struct step_io io);
uint32_t step_decls_add_tag(struct step_decls *r, name_id tag);
uint32_t step_decls_add_aml(struct step_decls *r, const name_id aml[STEP_N_AML]);
/* A copy of *rec as the next record; returns its index, or UINT32_MAX. */
uint32_t step_decls_add(struct step_decls *r, const struct step_decl *rec);

/* Where s's inputs (outputs false) or outputs start in decls->io, and how
 * many there are.  (Indices, not pointers: the array moves as it grows.) */
static inline uint32_t step_io_first(const struct step_decl *s, bool outputs)
{
    return s->io + (outputs ? s->n_inputs : 0);
}
static inline uint32_t step_io_count(const struct step_decl *s, bool outputs)
{
    return outputs ? s->n_outputs : s->n_inputs;
}

/* Whether one of s's inputs (outputs false) or outputs is named `key`
 * (${inputs.key}, ${outputs.key}); a name the store never interned is none. */
bool step_decls_has_arg(const struct step_decls *r, const struct step_decl *s, bool outputs, const char *key);

/* Whether a (of store ra) and b (of rb) declare the same step apart from
 * where they were written and their tags: Kedro's node identity (name,
 * inputs, outputs) and every setting.  Their bodies are the owner's to
 * compare. */
bool step_decls_same(const struct step_decls *ra, const struct step_decl *a, const struct step_decls *rb,
                     const struct step_decl *b);

#endif
