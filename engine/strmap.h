/* strmap.h — an open-addressing hash map from strings to indices.
 * The DAG keys 100,000s of step and dataset names with it; keys are copied. */
#ifndef FLOW_STRMAP_H
#define FLOW_STRMAP_H
#include <stddef.h>
#include <stdbool.h>

struct strmap {
    struct strmap_slot { char *key; size_t value; unsigned hash; } *slots;
    size_t count, cap;       /* cap is 0 or a power of two */
};

void strmap_free(struct strmap *m);
/* Insert or overwrite. */
void strmap_put(struct strmap *m, const char *key, size_t value);
bool strmap_get(const struct strmap *m, const char *key, size_t *value);

#endif
