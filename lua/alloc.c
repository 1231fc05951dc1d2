/* alloc.c — the Lua state's allocator: small blocks from size classes.
 *
 * A run of 100,000 Lua steps makes and frees tens of millions of small Lua
 * objects (tables, strings, closures); with glibc's malloc behind Lua's
 * default allocator, a quarter of such a run's CPU time went to malloc,
 * free and their consolidation of freed chunks (perf, bench/RESULTS.md).
 * Lua tells the allocator each block's size when it frees or resizes it, so
 * small blocks need no header and no search: a block of up to
 * ALLOC_SMALL_MAX bytes comes from the free list of its 16-byte size class,
 * or is cut from a slab; a freed one goes back on that list.  Larger blocks
 * (long strings, big tables' arrays) go to malloc as before.  A freed
 * small block stays in its class for the next one, and slabs are freed only
 * with the state: a long session (the REPL, a sweep) keeps the peak of its
 * small blocks.  One state, one thread: no locking.
 *
 * Under AddressSanitizer every block is malloc's, so that a use after free
 * in the Lua runtime (or a C function's misuse of a Lua string) is still
 * reported. */
#include "flowlua.h"
#include "util.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__SANITIZE_ADDRESS__)
#define ALLOC_POOLED 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ALLOC_POOLED 0
#endif
#endif
#ifndef ALLOC_POOLED
#define ALLOC_POOLED 1
#endif

#define ALLOC_GRAIN 16
#define ALLOC_SMALL_MAX 512
#define ALLOC_CLASSES (ALLOC_SMALL_MAX / ALLOC_GRAIN)
#define ALLOC_SLAB (64 * 1024)

struct free_block { struct free_block *next; };

struct slab { struct slab *next; };

struct flow_alloc {
    struct free_block *free[ALLOC_CLASSES];
    char *cut, *end;                  /* what is left of the newest slab */
    struct slab *slabs;
};

static size_t class_of(size_t size) { return (size - 1) / ALLOC_GRAIN; }

static void *small_alloc(struct flow_alloc *a, size_t size)
{
    size_t c = class_of(size);
    struct free_block *b = a->free[c];
    if (b) {
        a->free[c] = b->next;
        return b;
    }
    size_t bytes = (c + 1) * ALLOC_GRAIN;
    if ((size_t)(a->end - a->cut) < bytes) {
        /* the rest of the old slab (less than one block of this class) is left unused */
        struct slab *s = malloc(ALLOC_SLAB);
        if (!s) return NULL;
        s->next = a->slabs;
        a->slabs = s;
        a->cut = (char *)s + ALLOC_GRAIN;              /* the header keeps blocks aligned */
        a->end = (char *)s + ALLOC_SLAB;
    }
    void *p = a->cut;
    a->cut += bytes;
    return p;
}

static void small_free(struct flow_alloc *a, void *p, size_t size)
{
    struct free_block *b = p;
    size_t c = class_of(size);
    b->next = a->free[c];
    a->free[c] = b;
}

/* lua_Alloc: osize is the block's size when p is not NULL (a kind of object otherwise). */
static void *pooled(void *ud, void *p, size_t osize, size_t nsize)
{
    struct flow_alloc *a = ud;
    if (!p) osize = 0;
    bool old_small = osize > 0 && osize <= ALLOC_SMALL_MAX, new_small = nsize > 0 && nsize <= ALLOC_SMALL_MAX;
    if (nsize == 0) {
        if (old_small) small_free(a, p, osize);
        else free(p);
        return NULL;
    }
    if (!old_small && !new_small) return realloc(p, nsize);
    if (old_small && new_small && class_of(osize) == class_of(nsize)) return p;
    void *q = new_small ? small_alloc(a, nsize) : malloc(nsize);
    if (!q) return NULL;                               /* Lua keeps p: a failed resize leaves it as it was */
    if (p) {
        memcpy(q, p, osize < nsize ? osize : nsize);
        if (old_small) small_free(a, p, osize);
        else free(p);
    }
    return q;
}

static void *plain(void *ud, void *p, size_t osize, size_t nsize)
{
    (void)ud;
    (void)osize;
    if (nsize == 0) {
        free(p);
        return NULL;
    }
    return realloc(p, nsize);
}

struct flow_alloc *flow_alloc_new(void) { return xcalloc(1, sizeof(struct flow_alloc)); }

lua_Alloc flow_alloc_fn(void) { return ALLOC_POOLED ? pooled : plain; }

void flow_alloc_free(struct flow_alloc *a)
{
    if (!a) return;
    for (struct slab *s = a->slabs, *next; s; s = next) {
        next = s->next;
        free(s);
    }
    free(a);
}
