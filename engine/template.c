/* template.c — a single left-to-right scan; references never nest. */
#include "template.h"

#include <stdlib.h>
#include <string.h>

static const char *const namespaces[] = { "inputs", "outputs", "params", "credentials" };

/* Parse the reference body "ns.key" (without ${ }); fills ns and key. */
static int split_ref(const char *body, size_t len, char *ns, size_t nslen,
                     char **key, char *err, size_t errlen)
{
    const char *dot = memchr(body, '.', len);
    if (!dot || dot == body || dot + 1 == body + len) {
        errf(err, errlen, "bad reference '${%.*s}': write ${inputs.NAME}, ${outputs.NAME}, "
             "${params.KEY} or ${credentials.KEY}", (int)len, body);
        return -1;
    }
    size_t n = (size_t)(dot - body);
    int known = 0;
    for (size_t i = 0; i < sizeof namespaces / sizeof *namespaces; i++)
        if (strlen(namespaces[i]) == n && memcmp(namespaces[i], body, n) == 0) known = 1;
    if (!known || n >= nslen) {
        errf(err, errlen, "unknown reference '${%.*s}': only inputs., outputs., params. and "
             "credentials. can be expanded", (int)len, body);
        return -1;
    }
    memcpy(ns, body, n);
    ns[n] = '\0';
    *key = xstrndup(dot + 1, len - n - 1);
    return 0;
}

/* Scan tmpl; literal text goes to `out` (if non-NULL), references to `on_ref`. */
static int scan(const char *tmpl, struct strbuf *out,
                int (*on_ref)(void *ctx, const char *ns, const char *key, char *err, size_t errlen),
                void *ctx, char *err, size_t errlen)
{
    const char *p = tmpl;
    for (;;) {
        const char *dollar = strchr(p, '$');
        if (!dollar) {
            if (out) sb_adds(out, p);
            return 0;
        }
        if (out) sb_add(out, p, (size_t)(dollar - p));
        if (dollar[1] == '$' && dollar[2] == '{') {          /* $${ -> ${ */
            if (out) sb_adds(out, "${");
            p = dollar + 3;
            continue;
        }
        if (dollar[1] != '{') {
            if (out) sb_addc(out, '$');
            p = dollar + 1;
            continue;
        }
        const char *close = strchr(dollar + 2, '}');
        if (!close) {
            errf(err, errlen, "unterminated '${' in \"%s\"", tmpl);
            return -1;
        }
        if (!memchr(dollar + 2, '.', (size_t)(close - dollar - 2))) {
            /* ${HOME}, ${RANK:-0}: a shell's variable, not ours; keep it. */
            if (out) sb_add(out, dollar, (size_t)(close - dollar + 1));
            p = close + 1;
            continue;
        }
        char ns[16], *key = NULL;
        if (split_ref(dollar + 2, (size_t)(close - dollar - 2), ns, sizeof ns, &key, err, errlen))
            return -1;
        int rc = on_ref(ctx, ns, key, err, errlen);
        free(key);
        if (rc != 0) return -1;
        p = close + 1;
    }
}

struct expand_ctx { template_lookup_fn lookup; void *ctx; struct strbuf *out; };

static int expand_ref(void *c, const char *ns, const char *key, char *err, size_t errlen)
{
    struct expand_ctx *e = c;
    return e->lookup(e->ctx, ns, key, e->out, err, errlen);
}

char *template_expand(const char *tmpl, template_lookup_fn lookup, void *ctx,
                      char *err, size_t errlen)
{
    struct strbuf out = STRBUF_INIT;
    struct expand_ctx e = { lookup, ctx, &out };
    /* Literal text and expansions interleave in `out`: scan appends literals,
     * expand_ref appends values, in order. */
    if (scan(tmpl, &out, expand_ref, &e, err, errlen) != 0) {
        sb_release(&out);
        return NULL;
    }
    return sb_detach(&out);
}

struct visit_ctx { int (*visit)(void *, const char *, const char *); void *ctx; };

static int visit_ref(void *c, const char *ns, const char *key, char *err, size_t errlen)
{
    struct visit_ctx *v = c;
    (void)err; (void)errlen;
    return v->visit(v->ctx, ns, key);
}

int template_each_ref(const char *tmpl,
                      int (*visit)(void *ctx, const char *ns, const char *key),
                      void *ctx, char *err, size_t errlen)
{
    struct visit_ctx v = { visit, ctx };
    return scan(tmpl, NULL, visit_ref, &v, err, errlen);
}
