/* strmap.h — the engine's open-addressing hash maps: strings to indices (the DAG keys
 * 100,000s of step and dataset names with it; keys are copied unless borrowed) and pointers to pointers
 * (the config loader maps parsed nodes to their line numbers).
 *
 * A strmap's value is an index below 2^32: with the hash beside it a slot
 * takes 16 bytes, not 24.  A run of 100,000 steps keeps half a dozen of these
 * maps of 262,144 slots each (a third full, as a doubling table at 70 % load
 * may be), and their slots were 35 MB of its 240 MB peak. */
#ifndef FLOW_STRMAP_H
#define FLOW_STRMAP_H
#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>

struct strmap {
    struct strmap_slot { char *key; uint32_t hash, value; } *slots;
    size_t count, cap;       /* cap is 0 or a power of two */
    bool borrowed_keys;      /* set before the first put: keys are the caller's, neither copied nor
                                freed, and must outlive the map (the DAG's live in its arena) */
};

void strmap_free(struct strmap *m);
/* Insert or overwrite; value < 2^32 (an index: flow makes no array that long). */
void strmap_put(struct strmap *m, const char *key, size_t value);
bool strmap_get(const struct strmap *m, const char *key, size_t *value);
/* Key's slot: found (its key set, its value the key's), or the empty one
 * where the key goes (key NULL), room for it made first.  An empty
 * one is filled with strmap_fill before any other change to the map:
 * interning a name takes one probe, where a get and then a put take two. */
struct strmap_slot *strmap_slot(struct strmap *m, const char *key);
/* The same, for a key whose strmap_hash the caller has (node{} computes it
 * in the pass that checks a name's characters). */
struct strmap_slot *strmap_slot_hashed(struct strmap *m, const char *key, uint32_t hash);
/* A key's hash (FNV-1a over its bytes): strmap_hash, or made a byte at a
 * time from STRMAP_HASH_SEED with strmap_hash_step. */
#define STRMAP_HASH_SEED 2166136261u
static inline uint32_t strmap_hash_step(uint32_t h, unsigned char c) { return (h ^ c) * 16777619u; }
uint32_t strmap_hash(const char *key);
void strmap_fill(struct strmap *m, struct strmap_slot *slot, const char *key, size_t value);
/* Asks the memory for key's first slot ahead of its lookup: in a map of
 * hundreds of thousands of names that slot is a cache miss, and the misses
 * of several keys asked for in turn overlap. */
void strmap_prefetch(const struct strmap *m, const char *key);
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
