/* arena.c — see arena.h.  Chunks double from 4 KiB to 1 MiB, so a small
 * graph costs a page and a large one a chunk per 1 MiB; a request larger than
 * a chunk gets a chunk of its own.  Strings are packed byte to byte; other
 * requests are aligned for any object. */
#include "arena.h"
#include "util.h"

#include <stdalign.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define FIRST_CHUNK 4096
#define MAX_CHUNK (1024 * 1024)
#define ALIGN alignof(max_align_t)

struct arena_chunk {
    struct arena_chunk *prev;
    size_t size;                    /* of data[] */
    alignas(max_align_t) char data[];
};

static void add_chunk(struct arena *a, size_t need)
{
    size_t size = a->chunks ? a->chunks->size * 2 : FIRST_CHUNK;
    if (size > MAX_CHUNK) size = MAX_CHUNK;
    if (size < need) size = need;
    if (size > SIZE_MAX - sizeof(struct arena_chunk)) out_of_memory(size);
    struct arena_chunk *c = xmalloc(sizeof *c + size);
    c->prev = a->chunks;
    c->size = size;
    a->chunks = c;
    a->next = c->data;
    a->end = c->data + size;
}

/* size bytes at an address that is a multiple of align (a power of two). */
static char *take(struct arena *a, size_t size, size_t align)
{
    if (a->next) {
        size_t pad = (size_t)(-(uintptr_t)a->next & (align - 1));
        if ((size_t)(a->end - a->next) >= pad && (size_t)(a->end - a->next) - pad >= size) {
            char *p = a->next + pad;
            a->next = p + size;
            return p;
        }
    }
    add_chunk(a, size);             /* a chunk's data is aligned for any object */
    char *p = a->next;
    a->next += size;
    return p;
}

void *arena_alloc(struct arena *a, size_t size)
{
    return memset(take(a, size, ALIGN), 0, size);
}

void *arena_calloc(struct arena *a, size_t count, size_t size)
{
    if (size && count > SIZE_MAX / size) out_of_memory(SIZE_MAX);
    return arena_alloc(a, count * size);
}

char *arena_strdup(struct arena *a, const char *s)
{
    if (!s) return NULL;
    size_t len = strlen(s) + 1;
    return memcpy(take(a, len, 1), s, len);
}

void arena_free(struct arena *a)
{
    while (a->chunks) {
        struct arena_chunk *prev = a->chunks->prev;
        free(a->chunks);
        a->chunks = prev;
    }
    a->next = a->end = NULL;
}
