/* step_decl.c — the store of declared steps: interned strings in an arena,
 * records and their lists in arrays that only grow (a script declares its
 * steps once; the store dies with everything that refers to it). */
#include "step_decl.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>

#define TOO_MANY UINT32_MAX

void step_decls_init(struct step_decls *r)
{
    static uint64_t serials;            /* (stores are made on a Lua state's one thread) */
    memset(r, 0, sizeof *r);
    r->serial = ++serials;
    r->ids.borrowed_keys = true;
    r->mem = (struct arena)ARENA_INIT;
    r->cap_strs = 64;
    r->strs = xcalloc(r->cap_strs, sizeof *r->strs);
    r->n_strs = 1;                  /* id 0: none */
}

void step_decls_free(struct step_decls *r)
{
    strmap_free(&r->ids);
    arena_free(&r->mem);
    free(r->strs);
    free(r->recs);
    free(r->io);
    free(r->tags);
    free(r->aml);
    memset(r, 0, sizeof *r);
}

name_id step_decls_intern(struct step_decls *r, const char *s)
{
    return s ? step_decls_intern_hashed(r, s, strmap_hash(s)) : 0;
}

name_id step_decls_intern_hashed(struct step_decls *r, const char *s, uint32_t hash)
{
    struct strmap_slot *slot = strmap_slot_hashed(&r->ids, s, hash);
    if (slot->key) return (name_id)slot->value;
    if (r->n_strs >= TOO_MANY) return 0;
    ARRAY_GROW(r->strs, r->n_strs, r->cap_strs);
    char *copy = arena_strdup(&r->mem, s);
    r->strs[r->n_strs] = copy;
    strmap_fill(&r->ids, slot, copy, r->n_strs);
    return (name_id)r->n_strs++;
}

/* Index of the next entry of an array of *n entries, grown when full. */
#define APPEND(arr, n, cap, value) do {                                          \
        if ((n) >= TOO_MANY) return TOO_MANY;                                    \
        ARRAY_GROW(arr, n, cap);                                                       \
        (arr)[n] = (value);                                                      \
        return (uint32_t)(n)++;                                                  \
    } while (0)

bool step_decls_has_arg(const struct step_decls *r, const struct step_decl *s, bool outputs, const char *key)
{
    size_t id;
    if (!strmap_get(&r->ids, key, &id)) return false;
    uint32_t n = step_io_count(s, outputs), first = step_io_first(s, outputs);
    for (uint32_t i = 0; i < n; i++)
        if (r->io[first + i].arg == (name_id)id) return true;
    return false;
}

uint32_t step_decls_add_io(struct step_decls *r, struct step_io io)
{
    APPEND(r->io, r->n_io, r->cap_io, io);
}

uint32_t step_decls_add_tag(struct step_decls *r, name_id tag)
{
    APPEND(r->tags, r->n_tags, r->cap_tags, tag);
}

uint32_t step_decls_add_aml(struct step_decls *r, const name_id aml[STEP_N_AML])
{
    if (r->n_aml >= TOO_MANY) return TOO_MANY;
    ARRAY_GROW(r->aml, r->n_aml, r->cap_aml);
    memcpy(r->aml[r->n_aml], aml, sizeof r->aml[r->n_aml]);
    return (uint32_t)r->n_aml++;
}

uint32_t step_decls_add(struct step_decls *r, const struct step_decl *rec)
{
    APPEND(r->recs, r->n_recs, r->cap_recs, *rec);
}

/* Whether id a of store ra and id b of store rb name the same string. */
static bool same_name(const struct step_decls *ra, name_id a, const struct step_decls *rb, name_id b)
{
    if (ra == rb || !a || !b) return a == b;      /* 0 is none in every store */
    return strcmp(ra->strs[a], rb->strs[b]) == 0;
}

bool step_decls_same(const struct step_decls *ra, const struct step_decl *a, const struct step_decls *rb,
                     const struct step_decl *b)
{
    if (a->kind != b->kind || a->flags != b->flags || a->retries != b->retries || a->n_inputs != b->n_inputs ||
        a->n_outputs != b->n_outputs || ((a->flags & STEP_TIMEOUT) && a->timeout != b->timeout))
        return false;
    if (!same_name(ra, a->name, rb, b->name) || !same_name(ra, a->namespace_, rb, b->namespace_) ||
        !same_name(ra, a->pool, rb, b->pool))
        return false;
    for (uint32_t i = 0; i < a->n_inputs + a->n_outputs; i++) {
        struct step_io x = ra->io[a->io + i], y = rb->io[b->io + i];
        if (!same_name(ra, x.arg, rb, y.arg) || !same_name(ra, x.dataset, rb, y.dataset)) return false;
    }
    for (int k = 0; (a->flags & STEP_AML) && k < STEP_N_AML; k++)
        if (!same_name(ra, ra->aml[a->aml][k], rb, rb->aml[b->aml][k])) return false;
    return true;
}
