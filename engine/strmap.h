/* strmap.h — the engine's open-addressing hash maps: strings to indices (the DAG keys
 * 100,000s of step and dataset names with it; keys are copied unless borrowed) and pointers to pointers
 * (the config loader maps parsed nodes to their line numbers). */
#ifndef FLOW_STRMAP_H
#define FLOW_STRMAP_H
#include <stddef.h>
#include <stdbool.h>

struct strmap {
    struct strmap_slot { char *key; size_t value; unsigned hash; } *slots;
    size_t count, cap;       /* cap is 0 or a power of two */
    bool borrowed_keys;      /* set before the first put: keys are the caller's, neither copied nor
                                freed, and must outlive the map (the DAG's live in its arena) */
};

void strmap_free(struct strmap *m);
/* Insert or overwrite. */
void strmap_put(struct strmap *m, const char *key, size_t value);
bool strmap_get(const struct strmap *m, const char *key, size_t *value);
/* Room for n keys without growing (a map filled in a known count is not
 * rehashed at every doubling). */
void strmap_reserve(struct strmap *m, size_t n);

/* Pointer -> pointer.  Keys and values must be non-NULL (a NULL value reads as absent);
 * keys are not owned, and entries are never removed. */
struct ptrmap {
    struct ptrmap_slot { const void *key; void *value; } *slots;
    size_t count, cap;       /* cap is 0 or a power of two */
};

void ptrmap_free(struct ptrmap *m);
/* Insert or overwrite. */
void ptrmap_put(struct ptrmap *m, const void *key, void *value);
void *ptrmap_get(const struct ptrmap *m, const void *key);

#endif
