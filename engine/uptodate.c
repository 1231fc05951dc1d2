/* uptodate.c — the up-to-date check of command steps (see uptodate.h). */
#include "uptodate.h"
#include "hashcache.h"
#include "statestore.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

struct step {
    bool described, fresh, passed;
    char *name;
    struct fp_str code, dist, outputs;
    struct fp_kv *params;
    size_t n_params;
    char **files;
    size_t n_files;
    struct utd_input *inputs;
    size_t n_inputs;
    char **outs;
    size_t n_outs;
};

struct utd {
    struct hashcache *hc;
    struct state_store *store;
    struct step *steps;
    size_t n_steps;
    struct utd_stats stats;
};

static struct fp_str copy_str(struct fp_str s)
{
    if (!s.s) return s;
    char *c = xmalloc(s.len + 1);
    memcpy(c, s.s, s.len);
    c[s.len] = '\0';
    return (struct fp_str){ c, s.len };
}

static char *copy_opt(const char *s) { return s ? xstrdup(s) : NULL; }

static char **copy_list(const char *const *v, size_t n)
{
    char **c = xcalloc(n + 1, sizeof *c);
    for (size_t k = 0; k < n; k++) c[k] = xstrdup(v[k]);
    return c;
}

static void free_list(char **v, size_t n)
{
    for (size_t k = 0; k < n; k++) free(v[k]);
    free(v);
}

static void clear_step(struct step *s)
{
    free(s->name);
    s->name = NULL;
    if (!s->described) return;
    free((char *)s->code.s);
    free((char *)s->dist.s);
    free((char *)s->outputs.s);
    for (size_t k = 0; k < s->n_params; k++) {
        free((char *)s->params[k].key.s);
        free((char *)s->params[k].value.s);
    }
    free(s->params);
    free_list(s->files, s->n_files);
    for (size_t k = 0; k < s->n_inputs; k++) {
        free((char *)s->inputs[k].dataset.s);
        free((char *)s->inputs[k].hash);
        free((char *)s->inputs[k].path);
    }
    free(s->inputs);
    free_list(s->outs, s->n_outs);
    memset(s, 0, sizeof *s);
}

struct utd *utd_new(size_t n_steps, struct hashcache *hc, struct state_store *store)
{
    struct utd *u = xcalloc(1, sizeof *u);
    u->hc = hc;
    u->store = store;
    u->n_steps = n_steps;
    u->steps = xcalloc(n_steps + 1, sizeof *u->steps);
    return u;
}

void utd_free(struct utd *u)
{
    if (!u) return;
    for (size_t i = 0; i < u->n_steps; i++) clear_step(&u->steps[i]);
    free(u->steps);
    free(u);
}

void utd_set_step(struct utd *u, size_t i, const struct utd_step *spec)
{
    if (i >= u->n_steps) return;
    struct step *s = &u->steps[i];
    clear_step(s);
    s->described = true;
    s->name = xstrdup(spec->name);
    s->code = copy_str(spec->code);
    s->dist = copy_str(spec->dist);
    s->outputs = copy_str(spec->outputs);
    s->n_params = spec->n_params;
    s->params = xcalloc(spec->n_params + 1, sizeof *s->params);
    for (size_t k = 0; k < spec->n_params; k++)
        s->params[k] = (struct fp_kv){ copy_str(spec->params[k].key), copy_str(spec->params[k].value) };
    s->n_files = spec->n_files;
    s->files = copy_list(spec->files, spec->n_files);
    s->n_inputs = spec->n_inputs;
    s->inputs = xcalloc(spec->n_inputs + 1, sizeof *s->inputs);
    for (size_t k = 0; k < spec->n_inputs; k++) {
        const struct utd_input *in = &spec->inputs[k];
        s->inputs[k] = (struct utd_input){ copy_str(in->dataset), in->producer, copy_opt(in->hash), copy_opt(in->path) };
    }
    s->n_outs = spec->n_outputs;
    s->outs = copy_list(spec->outputs_named, spec->n_outputs);
}

void utd_name_step(struct utd *u, size_t i, const char *name)
{
    if (i >= u->n_steps || u->steps[i].name) return;
    u->steps[i].name = xstrdup(name);
}

void utd_mark_fresh(struct utd *u, size_t i)
{
    if (i < u->n_steps) u->steps[i].fresh = true;
}

bool utd_passed(const struct utd *u, size_t i) { return i < u->n_steps && u->steps[i].passed; }

struct utd_stats utd_stats(const struct utd *u) { return u->stats; }

/* What the loop's thread can afford to hash (the limits flow.cache's hc:file
 * applies before it goes to the pool): a longer read is the stdlib's, which
 * waits for the pool while the loop runs on.  0 with the hash, 1: cannot
 * tell here, -1: missing or unreadable. */
static int hash_now(struct utd *u, const char *path, char hex[SHA256_HEX_SIZE])
{
    char err[256];
    enum hash_kind kind;
    return hashcache_hash_cheap(u->hc, path, HASHCACHE_LOOP_MAX_READ, HASHCACHE_LOOP_MAX_ENTRIES, hex, &kind,
                                err, sizeof err);
}

static const struct state_out *out_named(const struct state_rec *r, const char *dataset, size_t len)
{
    for (size_t k = 0; k < r->n_outs; k++)
        if (strlen(r->outs[k].dataset) == len && memcmp(r->outs[k].dataset, dataset, len) == 0) return &r->outs[k];
    return NULL;
}

/* The hash of input `in`, or NULL when this check cannot tell. */
static const char *input_hash(struct utd *u, const struct utd_input *in, char buf[SHA256_HEX_SIZE])
{
    if (in->producer != UTD_NO_PRODUCER) {
        /* only a record this run made or confirmed says what the input is now */
        if (in->producer >= u->n_steps || !u->steps[in->producer].fresh || !u->steps[in->producer].name)
            return NULL;
        const struct state_rec *r = state_store_get(u->store, u->steps[in->producer].name);
        const struct state_out *o = r ? out_named(r, in->dataset.s, in->dataset.len) : NULL;
        if (!o || o->kind == 'u' || !o->hash[0]) return NULL;
        return o->hash;
    }
    if (in->hash) return in->hash;
    if (in->path && hash_now(u, in->path, buf) == 0) return buf;
    return NULL;
}

/* Project files the command names: those that are regular files now, with
 * their content hashes (a file that cannot be read is left out, as the
 * stdlib leaves it out). */
static int file_hashes(struct utd *u, const struct step *s, struct fp_kv *kv, char (*hex)[SHA256_HEX_SIZE],
                       size_t *n)
{
    *n = 0;
    for (size_t k = 0; k < s->n_files; k++) {
        struct stat st;
        if (stat(s->files[k], &st) != 0 || !S_ISREG(st.st_mode)) continue;
        bool seen = false;                    /* named twice: one entry, as in a Lua table */
        for (size_t j = 0; j < *n && !seen; j++) seen = strcmp(kv[j].key.s, s->files[k]) == 0;
        if (seen) continue;
        int rc = hash_now(u, s->files[k], hex[*n]);
        if (rc == 1) return 1;
        if (rc != 0) continue;
        kv[*n] = (struct fp_kv){ { s->files[k], strlen(s->files[k]) }, { hex[*n], SHA256_HEX_SIZE - 1 } };
        (*n)++;
    }
    return 0;
}

int utd_fingerprint(struct utd *u, size_t i, char hex[SHA256_HEX_SIZE])
{
    if (i >= u->n_steps || !u->steps[i].described) return 1;
    struct step *s = &u->steps[i];
    struct fp_kv *files = xcalloc(s->n_files + 1, sizeof *files);
    char (*file_hex)[SHA256_HEX_SIZE] = xcalloc(s->n_files + 1, sizeof *file_hex);
    struct fp_kv *inputs = xcalloc(s->n_inputs + 1, sizeof *inputs);
    char (*in_hex)[SHA256_HEX_SIZE] = xcalloc(s->n_inputs + 1, sizeof *in_hex);
    struct fp_kv *params = xcalloc(s->n_params + 1, sizeof *params);
    int rc = 1;
    size_t n_files, n_inputs = 0;
    if (file_hashes(u, s, files, file_hex, &n_files) != 0) goto out;
    for (size_t k = 0; k < s->n_inputs; k++) {
        const char *h = input_hash(u, &s->inputs[k], in_hex[k]);
        if (!h) goto out;
        inputs[n_inputs++] = (struct fp_kv){ s->inputs[k].dataset, { h, strlen(h) } };
    }
    /* fp_combine sorts in place: a copy keeps the description's order */
    memcpy(params, s->params, s->n_params * sizeof *params);
    struct fp_parts p = { .code = s->code, .dist = s->dist, .outputs = s->outputs,
                          .files = files, .n_files = n_files, .params = params, .n_params = s->n_params,
                          .inputs = inputs, .n_inputs = n_inputs };
    fp_combine(&p, hex);
    rc = 0;
out:
    free(files);
    free(file_hex);
    free(inputs);
    free(in_hex);
    free(params);
    return rc;
}

/* Whether each output is as record r says: a file or folder, or a memory
 * value cached in a file, with its hash; or a memory value inline in the
 * record, which the record's checksum vouches for.  Anything else (a value
 * that could not be cached, a record from before values said where they
 * are, a damaged file) is the stdlib's to explain. */
static bool outputs_hold(struct utd *u, const struct step *s, const struct state_rec *r)
{
    for (size_t k = 0; k < s->n_outs; k++) {
        const struct state_out *o = out_named(r, s->outs[k], strlen(s->outs[k]));
        if (!o || !o->hash[0]) return false;
        if (o->kind == 'v') continue;
        if ((o->kind != 'f' && o->kind != 'c') || !o->path[0]) return false;
        char hex[SHA256_HEX_SIZE];
        if (hash_now(u, o->path, hex) != 0 || strcmp(hex, o->hash) != 0) return false;
    }
    return true;
}

bool utd_check(struct utd *u, size_t i)
{
    if (i >= u->n_steps || !u->steps[i].described) return false;
    struct step *s = &u->steps[i];
    const struct state_rec *r = state_store_get(u->store, s->name);
    char hex[SHA256_HEX_SIZE];
    if (!r || utd_fingerprint(u, i, hex) != 0 || strcmp(hex, r->fp) != 0 || !outputs_hold(u, s, r)) {
        u->stats.undecided++;
        return false;
    }
    s->fresh = s->passed = true;
    u->stats.passed++;
    return true;
}
