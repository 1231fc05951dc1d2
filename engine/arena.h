/* arena.h — a bump allocator for data that lives and dies together: the
 * graph's names and lists (hundreds of thousands of small strings, each a
 * malloc call and a malloc header otherwise), all freed at once. */
#ifndef FLOW_ARENA_H
#define FLOW_ARENA_H

#include <stddef.h>

struct arena_chunk;
struct arena {
    struct arena_chunk *chunks;     /* newest first */
    char *next, *end;               /* the free part of the newest chunk */
};
#define ARENA_INIT { NULL, NULL, NULL }

/* size bytes aligned for any object, zeroed; never NULL (out of memory aborts,
 * as xmalloc does).  Lives until arena_free. */
void *arena_alloc(struct arena *a, size_t size);
/* An array of count zeroed items of size bytes (count may be 0: a valid
 * pointer all the same). */
void *arena_calloc(struct arena *a, size_t count, size_t size);
/* A copy of s, NULL for NULL. */
char *arena_strdup(struct arena *a, const char *s);
void arena_free(struct arena *a);

#endif
