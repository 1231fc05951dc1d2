/* heap.h — a binary min-heap of indices.  The DAG's topological sort and the
 * scheduler's ready queue both pop the earliest-declared step first. */
#ifndef FLOW_HEAP_H
#define FLOW_HEAP_H
#include <stddef.h>

struct index_heap { size_t *a, n; };     /* `a` holds at least as many slots as pushes */

void heap_push(struct index_heap *h, size_t v);
size_t heap_pop(struct index_heap *h);   /* h->n must be > 0 */

#endif
