/* fingerprint.c — a step's fingerprint from its parts (see fingerprint.h). */
#include "fingerprint.h"
#include "util.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static int by_key(const void *a, const void *b)
{
    const struct fp_str *x = &((const struct fp_kv *)a)->key, *y = &((const struct fp_kv *)b)->key;
    return bytes_compare(x->s, x->len, y->s, y->len);
}

static void add(struct hasher *h, struct fp_str s, bool *first)
{
    if (!*first) hasher_update(h, "", 1);       /* the NUL between items */
    *first = false;
    hasher_update(h, s.s, s.len);
}

static struct fp_str lit(const char *s) { return (struct fp_str){ s, strlen(s) }; }

static void add_map(struct hasher *h, const char *name, struct fp_kv *kv, size_t n, bool *first)
{
    if (n == 0) return;
    if (n > 1) qsort(kv, n, sizeof *kv, by_key);
    add(h, lit(name), first);
    for (size_t i = 0; i < n; i++) {
        add(h, kv[i].key, first);
        add(h, kv[i].value, first);
    }
}

void fp_combine(struct fp_parts *p, char hex[SHA256_HEX_SIZE])
{
    struct hasher *h = hasher_new();
    bool first = true;
    add(h, lit(FP_VERSION), &first);
    add(h, p->code, &first);
    add(h, p->dist.s ? p->dist : lit("-"), &first);
    add(h, p->outputs, &first);
    add_map(h, "files", p->files, p->n_files, &first);
    add_map(h, "params", p->params, p->n_params, &first);
    add_map(h, "inputs", p->inputs, p->n_inputs, &first);
    hasher_finish(h, hex);
    hasher_free(h);
}
