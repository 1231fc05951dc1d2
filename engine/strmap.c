/* strmap.c — linear probing, grows at 70% load; FNV-1a for strings, a 64-bit mixer for
 * pointers (their low bits are mostly alignment). */
#include "strmap.h"
#include "util.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

uint32_t strmap_hash(const char *s)
{
    uint32_t h = STRMAP_HASH_SEED;
    for (; *s; s++) h = strmap_hash_step(h, (unsigned char)*s);
    return h;
}

void strmap_free(struct strmap *m)
{
    if (!m->borrowed_keys)
        for (size_t i = 0; i < m->cap; i++) free(m->slots[i].key);
    free(m->slots);
    m->slots = NULL;
    m->count = m->cap = 0;
}

static struct strmap_slot *find_slot(const struct strmap *m, const char *key, uint32_t h)
{
    size_t mask = m->cap - 1;
    for (size_t i = h & mask; ; i = (i + 1) & mask) {
        struct strmap_slot *s = &m->slots[i];
        /* (the same pointer first: the graph's names are interned once, and
         * a found key is then not read, a cache miss in a large map) */
        if (!s->key || (s->hash == h && (s->key == key || strcmp(s->key, key) == 0))) return s;
    }
}

/* How far ahead rehash asks for the slots it will fill. */
#define REHASH_AHEAD 8

static void rehash(struct strmap *m, size_t cap)
{
    struct strmap old = *m;
    m->cap = cap;
    m->slots = xcalloc_written(m->cap, sizeof *m->slots);     /* (probed: read first) */
    for (size_t i = 0; i < old.cap; i++) {
        if (i + REHASH_AHEAD < old.cap && old.slots[i + REHASH_AHEAD].key)
            __builtin_prefetch(&m->slots[old.slots[i + REHASH_AHEAD].hash & (cap - 1)], 1);
        if (!old.slots[i].key) continue;
        *find_slot(m, old.slots[i].key, old.slots[i].hash) = old.slots[i];
    }
    free(old.slots);
}

void strmap_prefetch(const struct strmap *m, const char *key)
{
    if (m->cap) __builtin_prefetch(&m->slots[strmap_hash(key) & (m->cap - 1)]);
}

static bool fits(size_t count, size_t cap) { return count * 10 <= cap * 7; }

void strmap_reserve(struct strmap *m, size_t n)
{
    size_t cap = m->cap ? m->cap : 16;
    while (!fits(n, cap)) cap *= 2;
    if (cap != m->cap) rehash(m, cap);
}

void strmap_put(struct strmap *m, const char *key, size_t value)
{
    if (value > UINT32_MAX) out_of_memory(value);      /* (an index that large: its array could not exist) */
    struct strmap_slot *s = strmap_slot(m, key);
    if (!s->key) strmap_fill(m, s, key, value);
    else s->value = (uint32_t)value;
}

struct strmap_slot *strmap_slot(struct strmap *m, const char *key)
{
    return strmap_slot_hashed(m, key, strmap_hash(key));
}

struct strmap_slot *strmap_slot_hashed(struct strmap *m, const char *key, uint32_t h)
{
    struct strmap_slot *s = m->cap ? find_slot(m, key, h) : NULL;
    if (s && s->key) return s;         /* found: the map does not grow for a key it has */
    if (!fits(m->count + 1, m->cap)) {
        rehash(m, m->cap ? m->cap * 2 : 16);
        s = find_slot(m, key, h);
    }
    s->hash = h;                       /* (strmap_fill's; an empty slot's hash is never read) */
    return s;
}

void strmap_fill(struct strmap *m, struct strmap_slot *slot, const char *key, size_t value)
{
    if (value > UINT32_MAX) out_of_memory(value);
    slot->key = m->borrowed_keys ? (char *)key : xstrdup(key);
    slot->value = (uint32_t)value;
    m->count++;
}

bool strmap_get(const struct strmap *m, const char *key, size_t *value)
{
    if (!m->cap) return false;
    struct strmap_slot *s = find_slot(m, key, strmap_hash(key));
    if (!s->key) return false;
    if (value) *value = s->value;
    return true;
}

static size_t hash_ptr(const void *p)
{
    uint64_t x = (uint64_t)(uintptr_t)p;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return (size_t)x;
}

void ptrmap_free(struct ptrmap *m)
{
    free(m->slots);
    m->slots = NULL;
    m->count = m->cap = 0;
}

static struct ptrmap_slot *ptr_slot(const struct ptrmap *m, const void *key)
{
    size_t mask = m->cap - 1;
    for (size_t i = hash_ptr(key) & mask; ; i = (i + 1) & mask) {
        struct ptrmap_slot *s = &m->slots[i];
        if (!s->key || s->key == key) return s;
    }
}

static void ptr_grow(struct ptrmap *m)
{
    struct ptrmap old = *m;
    m->cap = old.cap ? old.cap * 2 : 64;
    m->slots = xcalloc_written(m->cap, sizeof *m->slots);
    for (size_t i = 0; i < old.cap; i++)
        if (old.slots[i].key) *ptr_slot(m, old.slots[i].key) = old.slots[i];
    free(old.slots);
}

void ptrmap_put(struct ptrmap *m, const void *key, void *value)
{
    if ((m->count + 1) * 10 > m->cap * 7) ptr_grow(m);
    struct ptrmap_slot *s = ptr_slot(m, key);
    m->count += !s->key;
    s->key = key;
    s->value = value;
}

void *ptrmap_get(const struct ptrmap *m, const void *key)
{
    return m->cap ? ptr_slot(m, key)->value : NULL;
}
