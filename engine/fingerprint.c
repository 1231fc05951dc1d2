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

/* Where the items go: a buffer on the stack, hashed once at the end (a
 * step's items are a few hundred bytes: a dozen SHA256_Update calls and a
 * hasher's malloc were most of fp_combine), or a hasher from the first byte
 * that does not fit. */
#define FP_BUF 2048

struct sink {
    unsigned char buf[FP_BUF];
    size_t n;
    struct hasher *h;
};

static void put(struct sink *k, const void *s, size_t len)
{
    if (!k->h && len <= FP_BUF - k->n) {
        memcpy(k->buf + k->n, s, len);
        k->n += len;
        return;
    }
    if (!k->h) {
        k->h = hasher_new();
        hasher_update(k->h, k->buf, k->n);
    }
    hasher_update(k->h, s, len);
}

static void add(struct sink *k, struct fp_str s, bool *first)
{
    if (!*first) put(k, "", 1);                 /* the NUL between items */
    *first = false;
    put(k, s.s, s.len);
}

static struct fp_str lit(const char *s) { return (struct fp_str){ s, strlen(s) }; }

static void add_map(struct sink *k, const char *name, struct fp_kv *kv, size_t n, bool *first)
{
    if (n == 0) return;
    if (n > 1) qsort(kv, n, sizeof *kv, by_key);
    add(k, lit(name), first);
    for (size_t i = 0; i < n; i++) {
        add(k, kv[i].key, first);
        add(k, kv[i].value, first);
    }
}

void fp_combine(struct fp_parts *p, char hex[SHA256_HEX_SIZE])
{
    unsigned char md[SHA256_SIZE];
    fp_combine_md(p, md);
    sha256_to_hex(md, hex);
}

void fp_combine_md(struct fp_parts *p, unsigned char md[SHA256_SIZE])
{
    struct sink k;
    k.n = 0;
    k.h = NULL;
    bool first = true;
    add(&k, lit(FP_VERSION), &first);
    add(&k, p->code, &first);
    add(&k, p->dist.s ? p->dist : lit("-"), &first);
    add(&k, p->outputs, &first);
    add_map(&k, "files", p->files, p->n_files, &first);
    add_map(&k, "params", p->params, p->n_params, &first);
    add_map(&k, "inputs", p->inputs, p->n_inputs, &first);
    if (k.h) {
        hasher_finish_md(k.h, md);
        hasher_free(k.h);
    } else {
        sha256_md(k.buf, k.n, md);
    }
    wipe(k.buf, k.n);                          /* a command's text may hold what a secret became */
}
