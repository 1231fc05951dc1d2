/* uptodate.c — the up-to-date check of command steps (see uptodate.h). */
#include "uptodate.h"
#include "hashcache.h"
#include "json_text.h"
#include "stat_prefetch.h"
#include "statestore.h"
#include "util.h"
#include "work.h"

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* What utd_set_step copied, in one block: this, then its arrays, then its
 * strings.  A step keeps it until it is decided. */
struct description {
    struct fp_str code, dist, outputs;
    struct fp_kv *params;
    char **files;
    struct utd_input *inputs;
    char **outs;
    size_t n_params, n_files, n_inputs, n_outs;
};

/* An output of a step that ran in this run, its record still to come. */
struct ran_out {
    char *dataset, *hash;
};

/* One a step: 96 bytes on a 64-bit machine (a run of 100,000 steps keeps 100,000). */
struct step {
    bool passed, no_record;
    unsigned char early;                    /* 1 + utd_decide_early's verdict, until asked; or 0 */
    bool keeps_values;                      /* utd_keeps_values: a value not kept does not stand */
    bool fresh;                             /* fresh_fp holds the fingerprint of the record that made it fresh */
    bool deferred;                          /* its fingerprint waits for utd_take_deferred_fingerprint */
    unsigned char fresh_fp[SHA256_SIZE];      /* (its bytes: sha256_from_hex) */
    uint32_t slot_1;                        /* 1 + its record's state_store_slot; 0: not found yet */
    const char *name;                       /* the graph's (not copied) */
    char *fp, *parts_json;                  /* utd_decide's, for a step without a record */
    struct description *d;                  /* NULL: never described, or decided */
    struct ran_out *ran;                    /* utd_mark_ran's, until the record is put; NULL: none */
    size_t n_ran;
};

/* find_parts's arrays, reused from decision to decision (grown, never shrunk). */
struct found_space {
    struct fp_kv *files, *inputs, *params;
    char (*file_hex)[SHA256_HEX_SIZE], (*in_hex)[SHA256_HEX_SIZE];
    size_t cap_files, cap_inputs, cap_params;
};

struct utd {
    struct hashcache *hc;
    struct state_store *store;
    struct step *steps;
    size_t n_steps;
    struct utd_stats stats;
    struct found_space space;
    struct stat_prefetch *prefetch;   /* the records' output files stat-ed ahead (utd_prefetch_outputs), or NULL */
    /* The store held no record when the check was made (a first run), and
     * every record it holds now is one of the n_marked steps marked fresh
     * since, each once decided: a step not decided yet has none, and decide
     * does not look for it in a map that grows as the run's steps end (1.7 %
     * of a first run of 100,000 Lua steps).  A record put otherwise (and
     * so counted by the store, not here) sends decide to the map again. */
    bool store_was_empty;
    size_t n_marked;
    struct early *early;              /* the thread deciding early (utd_early_begin), or NULL */
    bool deferring;                   /* utd_defer_begin's: fingerprints may be deferred */
    /* utd_outputs_hashed's, a byte a step: apart from the steps, which the
     * recorder writes as the loop's thread reads this (a line between two
     * cores was 1.5 % of a first run of 100,000 Lua steps) */
    unsigned char *hashed;
};

void utd_prefetch_adopt(struct utd *u, struct stat_prefetch *p)
{
    if (u->prefetch) stat_prefetch_stop(p);
    else u->prefetch = p;
}

void utd_prefetch_outputs(struct utd *u)
{
    if (!u->prefetch) u->prefetch = stat_prefetch_start(u->store);
}

void utd_prefetch_stop(struct utd *u)
{
    stat_prefetch_stop(u->prefetch);
    u->prefetch = NULL;
}

/* Step s's record in the store, or NULL: by its name the first time one is
 * there, by its slot after (a decision asks up to three times a step: its
 * own record, early and when decided, and each producer's). */
static const struct state_rec *record_of(const struct utd *u, struct step *s)
{
    if (!s->slot_1) {
        size_t slot = state_store_slot(u->store, s->name);
        if (slot == STATE_STORE_NO_SLOT) return NULL;    /* (not remembered: a put may add it) */
        if (slot >= UINT32_MAX) return state_store_at(u->store, slot);   /* (not kept: asked each time) */
        s->slot_1 = (uint32_t)slot + 1;
    }
    return state_store_at(u->store, s->slot_1 - 1);
}

/* What utd_set_step copied, freed: once a step is decided, only its name
 * (its consumers' inputs name its record), its flags and a fingerprint not
 * yet taken stay. */
static void forget_description(struct step *s)
{
    free(s->d);
    s->d = NULL;
}

static void forget_ran(struct step *s)
{
    for (size_t k = 0; k < s->n_ran; k++) {
        free(s->ran[k].dataset);
        free(s->ran[k].hash);
    }
    free(s->ran);
    s->ran = NULL;
    s->n_ran = 0;
}

static void clear_step(struct step *s)
{
    forget_ran(s);
    free(s->fp);
    free(s->parts_json);
    forget_description(s);
    memset(s, 0, sizeof *s);
}

struct utd *utd_new(size_t n_steps, struct hashcache *hc, struct state_store *store)
{
    struct utd *u = xcalloc(1, sizeof *u);
    u->hc = hc;
    u->store = store;
    u->store_was_empty = state_store_count(store) == 0;
    u->n_steps = n_steps;
    u->steps = xcalloc_written(n_steps + 1, sizeof *u->steps);     /* (each slot cleared, so read, first) */
    return u;
}

void utd_free(struct utd *u)
{
    if (!u) return;
    utd_early_end(u);
    utd_prefetch_stop(u);
    for (size_t i = 0; i < u->n_steps; i++) clear_step(&u->steps[i]);
    free(u->steps);
    free(u->hashed);
    free(u->space.files);
    free(u->space.inputs);
    free(u->space.params);
    free(u->space.file_hex);
    free(u->space.in_hex);
    free(u);
}

/* A description is copied into one block (its arrays, then its strings):
 * one allocation a step, not a dozen, for a run of 100,000 steps. */
struct packer { char *next; };

static size_t str_space(const char *s) { return s ? strlen(s) + 1 : 0; }
static size_t fp_space(struct fp_str s) { return s.s ? s.len + 1 : 0; }

static struct fp_str pack_fp(struct packer *p, struct fp_str s)
{
    if (!s.s) return s;
    char *c = memcpy(p->next, s.s, s.len);
    c[s.len] = '\0';
    p->next += s.len + 1;
    return (struct fp_str){ c, s.len };
}

static char *pack_str(struct packer *p, const char *s)
{
    return s ? (char *)pack_fp(p, (struct fp_str){ s, strlen(s) }).s : NULL;
}

static size_t description_space(const struct utd_step *spec)
{
    size_t n = spec->n_params * sizeof(struct fp_kv) + spec->n_inputs * sizeof(struct utd_input) +
               (spec->n_files + spec->n_outputs) * sizeof(char *);
    n += fp_space(spec->code) + fp_space(spec->dist) + fp_space(spec->outputs);
    for (size_t k = 0; k < spec->n_params; k++) n += fp_space(spec->params[k].key) + fp_space(spec->params[k].value);
    for (size_t k = 0; k < spec->n_files; k++) n += str_space(spec->files[k]);
    for (size_t k = 0; k < spec->n_inputs; k++) {
        const struct utd_input *in = &spec->inputs[k];
        n += fp_space(in->dataset) + str_space(in->hash) + str_space(in->path);
    }
    for (size_t k = 0; k < spec->n_outputs; k++) n += str_space(spec->outputs_named[k]);
    return n;
}

void utd_set_step(struct utd *u, size_t i, const struct utd_step *spec)
{
    if (i >= u->n_steps) return;
    struct step *s = &u->steps[i];
    bool keeps = s->keeps_values;            /* (utd_keeps_values may come first) */
    clear_step(s);
    s->name = spec->name;
    s->keeps_values = keeps;
    struct description *d = s->d = xmalloc(sizeof *d + description_space(spec) + 1);
    /* the arrays first (pointer-aligned: the struct's size is, and every
     * member of theirs is pointer-sized) */
    d->params = (struct fp_kv *)(d + 1);
    d->inputs = (struct utd_input *)(d->params + spec->n_params);
    d->files = (char **)(d->inputs + spec->n_inputs);
    d->outs = d->files + spec->n_files;
    struct packer p = { (char *)(d->outs + spec->n_outputs) };
    d->code = pack_fp(&p, spec->code);
    d->dist = pack_fp(&p, spec->dist);
    d->outputs = pack_fp(&p, spec->outputs);
    d->n_params = spec->n_params;
    for (size_t k = 0; k < spec->n_params; k++)
        d->params[k] = (struct fp_kv){ pack_fp(&p, spec->params[k].key), pack_fp(&p, spec->params[k].value) };
    d->n_files = spec->n_files;
    for (size_t k = 0; k < spec->n_files; k++) d->files[k] = pack_str(&p, spec->files[k]);
    d->n_inputs = spec->n_inputs;
    for (size_t k = 0; k < spec->n_inputs; k++) {
        const struct utd_input *in = &spec->inputs[k];
        d->inputs[k] = (struct utd_input){ pack_fp(&p, in->dataset), in->producer, pack_str(&p, in->hash),
                                           pack_str(&p, in->path) };
    }
    d->n_outs = spec->n_outputs;
    for (size_t k = 0; k < spec->n_outputs; k++) d->outs[k] = pack_str(&p, spec->outputs_named[k]);
}

void utd_name_step(struct utd *u, size_t i, const char *name)
{
    if (i >= u->n_steps || u->steps[i].name) return;
    u->steps[i].name = name;
}

static void mark_fresh(struct step *s, const char *fp)
{
    s->fresh = sha256_from_hex(fp, s->fresh_fp);
}

/* Whether record r is still the one that made step p fresh. */
static bool still_fresh(const struct step *p, const struct state_rec *r)
{
    if (!p->fresh || !r) return false;
    char hex[SHA256_HEX_SIZE];
    sha256_to_hex(p->fresh_fp, hex);
    return strcmp(hex, r->fp) == 0;
}

void utd_mark_fresh(struct utd *u, size_t i, const char *fp)
{
    if (i >= u->n_steps) return;
    struct step *s = &u->steps[i];
    if (!s->fresh) u->n_marked++;
    mark_fresh(s, fp);
    forget_ran(s);                           /* its record says the same from now */
    /* its slot found now, while the put that made it fresh has left the
     * store's map entry in the cache: its consumers' decisions, a layer of
     * steps later, would each miss it (1.5 % of a first run's samples) */
    if (s->name && !s->slot_1) (void)record_of(u, s);
}

/* What input_hash takes from output record o: a hash, of anything but a
 * value that could not be cached (step_record.c's kind 'u'); or NULL. */
static const char *output_hash(const cJSON *o)
{
    const cJSON *h = cJSON_GetObjectItemCaseSensitive(o, "hash");
    const cJSON *unc = cJSON_GetObjectItemCaseSensitive(o, "uncacheable");
    bool uncached = !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(o, "path")) && unc && !cJSON_IsNull(unc) &&
                    !cJSON_IsFalse(unc);
    if (!o->string || !cJSON_IsString(h) || !h->valuestring[0] || uncached) return NULL;
    return h->valuestring;
}

bool utd_outputs_json_hashed(const char *outputs_json)
{
    cJSON *outs = cJSON_Parse(outputs_json);
    bool all = cJSON_IsObject(outs);
    for (const cJSON *o = all ? outs->child : NULL; o && all; o = o->next) all = output_hash(o) != NULL;
    cJSON_Delete(outs);
    return all;
}

void utd_mark_ran(struct utd *u, size_t i, const char *outputs_json)
{
    if (i >= u->n_steps || !outputs_json) return;
    struct step *s = &u->steps[i];
    forget_ran(s);
    cJSON *outs = cJSON_Parse(outputs_json);
    size_t n = (size_t)cJSON_GetArraySize(outs);
    s->ran = xcalloc(n + 1, sizeof *s->ran);
    for (const cJSON *o = cJSON_IsObject(outs) ? outs->child : NULL; o; o = o->next) {
        const char *h = output_hash(o);
        if (h) s->ran[s->n_ran++] = (struct ran_out){ xstrdup(o->string), xstrdup(h) };
    }
    cJSON_Delete(outs);
}

/* What step p's run in this process made of dataset (len bytes), or NULL. */
static const char *ran_hash(const struct step *p, const char *dataset, size_t len)
{
    for (size_t k = 0; k < p->n_ran; k++)
        if (strlen(p->ran[k].dataset) == len && memcmp(p->ran[k].dataset, dataset, len) == 0) return p->ran[k].hash;
    return NULL;
}

void utd_keeps_values(struct utd *u, size_t i)
{
    if (i < u->n_steps) u->steps[i].keeps_values = true;
}

bool utd_passed(const struct utd *u, size_t i) { return i < u->n_steps && u->steps[i].passed; }

bool utd_no_record(const struct utd *u, size_t i) { return i < u->n_steps && u->steps[i].no_record; }

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

/* hash_now of output k of the record in `slot`, with its stat from the
 * prefetch when that is there. */
static int output_hash_now(struct utd *u, size_t slot, size_t k, const char *path, char hex[SHA256_HEX_SIZE])
{
    struct file_stamp stamp;
    mode_t mode;
    if (!stat_prefetch_take(u->prefetch, slot, k, &stamp, &mode)) return hash_now(u, path, hex);
    char err[256];
    enum hash_kind kind;
    return hashcache_hash_cheap_stamp(u->hc, path, &stamp, mode, HASHCACHE_LOOP_MAX_READ, HASHCACHE_LOOP_MAX_ENTRIES,
                                      hex, &kind, err, sizeof err);
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
        /* only a record this run made or confirmed says what the input is now:
         * a run beside this one (flow.spawn: a parallel sweep's trials share
         * the store) may have put a record of its own since */
        if (in->producer >= u->n_steps) return NULL;
        struct step *p = &u->steps[in->producer];
        if (p->ran) return ran_hash(p, in->dataset.s, in->dataset.len);
        if (!p->fresh || !p->name) return NULL;
        const struct state_rec *r = record_of(u, p);
        if (!still_fresh(p, r)) return NULL;
        const struct state_out *o = out_named(r, in->dataset.s, in->dataset.len);
        if (!o || o->kind == 'u' || !o->hash[0]) return NULL;
        return o->hash;
    }
    if (in->hash) return in->hash;
    if (in->path && hash_now(u, in->path, buf) == 0) return buf;
    return NULL;
}

/* Whether key is among the first n keys of kv (a step's few files or inputs). */
static bool kv_has(const struct fp_kv *kv, size_t n, struct fp_str key)
{
    for (size_t j = 0; j < n; j++)
        if (kv[j].key.len == key.len && memcmp(kv[j].key.s, key.s, key.len) == 0) return true;
    return false;
}

/* Project files the command names: those that are regular files now, with
 * their content hashes (a file that cannot be read is left out, as the
 * stdlib leaves it out). */
static int file_hashes(struct utd *u, const struct description *d, struct fp_kv *kv,
                       char (*hex)[SHA256_HEX_SIZE], size_t *n)
{
    *n = 0;
    for (size_t k = 0; k < d->n_files; k++) {
        struct stat st;
        if (stat(d->files[k], &st) != 0 || !S_ISREG(st.st_mode)) continue;
        struct fp_str name = { d->files[k], strlen(d->files[k]) };
        if (kv_has(kv, *n, name)) continue;  /* named twice: one entry, as in a Lua table */
        int rc = hash_now(u, d->files[k], hex[*n]);
        if (rc == 1) return 1;
        if (rc != 0) continue;
        kv[*n] = (struct fp_kv){ name, { hex[*n], SHA256_HEX_SIZE - 1 } };
        (*n)++;
    }
    return 0;
}

/* The space's arrays hold at least files, inputs and params items (and one more). */
static void found_space_fit(struct found_space *fs, size_t files, size_t inputs, size_t params)
{
    if (files >= fs->cap_files) {
        fs->cap_files = 2 * files + 1;
        fs->files = xrealloc(fs->files, fs->cap_files * sizeof *fs->files);
        fs->file_hex = xrealloc(fs->file_hex, fs->cap_files * sizeof *fs->file_hex);
    }
    if (inputs >= fs->cap_inputs) {
        fs->cap_inputs = 2 * inputs + 1;
        fs->inputs = xrealloc(fs->inputs, fs->cap_inputs * sizeof *fs->inputs);
        fs->in_hex = xrealloc(fs->in_hex, fs->cap_inputs * sizeof *fs->in_hex);
    }
    if (params >= fs->cap_params) {
        fs->cap_params = 2 * params + 1;
        fs->params = xrealloc(fs->params, fs->cap_params * sizeof *fs->params);
    }
}

/* The parts of a step's fingerprint as they are now, in p: the described
 * ones, and the files, inputs and parameters found (the check's
 * found_space holds them, good until the next call).  0, or 1 when this
 * check cannot tell. */
static int find_parts(struct utd *u, const struct description *d, struct fp_parts *p)
{
    struct found_space *fs = &u->space;
    found_space_fit(fs, d->n_files, d->n_inputs, d->n_params);
    *p = (struct fp_parts){ .code = d->code, .dist = d->dist, .outputs = d->outputs, .files = fs->files,
                            .inputs = fs->inputs, .params = fs->params };
    if (file_hashes(u, d, p->files, fs->file_hex, &p->n_files) != 0) return 1;
    for (size_t k = 0; k < d->n_inputs; k++) {
        const struct fp_str ds = d->inputs[k].dataset;
        if (kv_has(p->inputs, p->n_inputs, ds)) continue;    /* read twice: one entry, as in a map */
        const char *h = input_hash(u, &d->inputs[k], fs->in_hex[k]);
        if (!h) return 1;
        p->inputs[p->n_inputs++] = (struct fp_kv){ ds, { h, strlen(h) } };
    }
    /* fp_combine sorts in place: a copy keeps the description's order */
    memcpy(p->params, d->params, d->n_params * sizeof *p->params);
    p->n_params = d->n_params;
    return 0;
}

/* utd_fingerprint's, as the digest's bytes. */
static int fingerprint_md(struct utd *u, size_t i, unsigned char md[SHA256_SIZE])
{
    if (i >= u->n_steps || !u->steps[i].d) return 1;
    struct fp_parts p;
    int rc = find_parts(u, u->steps[i].d, &p);
    if (rc == 0) fp_combine_md(&p, md);
    return rc;
}

int utd_fingerprint(struct utd *u, size_t i, char hex[SHA256_HEX_SIZE])
{
    unsigned char md[SHA256_SIZE];
    int rc = fingerprint_md(u, i, md);
    if (rc == 0) sha256_to_hex(md, hex);
    return rc;
}
/* "name":"its first FP_SHORT bytes" — a part as fingerprint.short keeps it,
 * after a comma unless it comes first. */
static void short_field(struct strbuf *sb, bool first, const char *name, struct fp_str v)
{
    char head[FP_SHORT + 1];
    size_t n = v.len < FP_SHORT ? v.len : FP_SHORT;
    memcpy(head, v.s, n);
    head[n] = '\0';
    if (!first) sb_addc(sb, ',');
    json_string(sb, name);
    sb_addc(sb, ':');
    json_string(sb, head);
}

static void short_map(struct strbuf *sb, const char *name, const struct fp_kv *kv, size_t n)
{
    if (n == 0) return;                     /* an empty map is left out, as fingerprint.short leaves it */
    sb_addc(sb, ',');
    json_string(sb, name);
    sb_adds(sb, ":{");
    for (size_t k = 0; k < n; k++) short_field(sb, k == 0, kv[k].key.s, kv[k].value);
    sb_addc(sb, '}');
}

/* The parts as fingerprint.short makes them, as a JSON object equal to the
 * one core.json_encode writes of that (its keys sorted, these in this
 * order; one rule, checked against the stdlib by tests/e2e/t_uptodate.sh):
 * each hash cut to FP_SHORT hex digits, the outputs part (names, types,
 * paths) hashed first.  Keys are dataset, parameter and file names: no NUL
 * in them. */
static char *short_parts_json(const struct fp_parts *p)
{
    struct strbuf sb = STRBUF_INIT;
    char outputs[SHA256_HEX_SIZE];
    sha256_hex(p->outputs.s, p->outputs.len, outputs);
    sb_addc(&sb, '{');
    short_field(&sb, true, "code", p->code);
    if (p->dist.s) short_field(&sb, false, "dist", p->dist);
    short_field(&sb, false, "outputs", (struct fp_str){ outputs, SHA256_HEX_SIZE - 1 });
    short_map(&sb, "files", p->files, p->n_files);
    short_map(&sb, "params", p->params, p->n_params);
    short_map(&sb, "inputs", p->inputs, p->n_inputs);
    sb_addc(&sb, '}');
    return sb_detach(&sb);
}

/* Whether each output is as record r says: a file or folder, or a memory
 * value cached in a file, with its hash; or a memory value inline in the
 * record, which the record's checksum vouches for; or a memory value not
 * kept, which its producer makes again when a reader needs it (flow.values,
 * Run:recompute), unless the step keeps its values now (`keeps`).  Anything
 * else (a value that could not be cached, a record from before values said
 * where they are, a damaged file) is the stdlib's to explain. */
static bool outputs_hold(struct utd *u, const struct description *d, const struct state_rec *r, size_t slot,
                         bool keeps)
{
    for (size_t k = 0; k < d->n_outs; k++) {
        const struct state_out *o = out_named(r, d->outs[k], strlen(d->outs[k]));
        if (!o || !o->hash[0]) return false;
        if (o->kind == 'v' || (o->kind == 't' && !keeps)) continue;
        if ((o->kind != 'f' && o->kind != 'c') || !o->path[0]) return false;
        char hex[SHA256_HEX_SIZE];
        if (output_hash_now(u, slot, (size_t)(o - r->outs), o->path, hex) != 0 || strcmp(hex, o->hash) != 0)
            return false;
    }
    return true;
}

/* The fingerprint and parts of a step without a record (the caller frees
 * both): false when this check cannot work them out. */
static bool fingerprint_new(struct utd *u, const struct description *d, char **fp, char **parts_json)
{
    struct fp_parts p;
    if (!d || find_parts(u, d, &p) != 0) return false;
    char hex[SHA256_HEX_SIZE];
    fp_combine(&p, hex);                       /* sorts the maps: the JSON is in key order too */
    *fp = xstrdup(hex);
    *parts_json = short_parts_json(&p);
    return true;
}

/* A step without a record runs: its fingerprint and parts are kept for
 * its new record, when this check can work them out. */
static enum utd_verdict no_record(struct utd *u, struct step *s)
{
    free(s->fp);
    free(s->parts_json);
    s->fp = s->parts_json = NULL;
    return fingerprint_new(u, s->d, &s->fp, &s->parts_json) ? UTD_NO_RECORD : UTD_CANNOT_TELL;
}

/* Step i's verdict, its description freed.  Up to date marks it fresh at
 * once (its consumers' inputs are its record's outputs); the rest of what a
 * verdict sets waits for the scheduler's question (account). */
static enum utd_verdict decide(struct utd *u, size_t i)
{
    struct step *s = &u->steps[i];
    bool none = u->store_was_empty && state_store_count(u->store) == u->n_marked;
    const struct state_rec *r = none ? NULL : record_of(u, s);
    enum utd_verdict v = UTD_CANNOT_TELL;
    unsigned char md[SHA256_SIZE], recorded[SHA256_SIZE];     /* (bytes: no hex made and compared a step) */
    if (!r) v = no_record(u, s);
    else if (fingerprint_md(u, i, md) == 0 && sha256_from_hex(r->fp, recorded) &&
             memcmp(md, recorded, SHA256_SIZE) == 0 &&
             outputs_hold(u, s->d, r, s->slot_1 ? s->slot_1 - 1 : STATE_STORE_NO_SLOT, s->keeps_values))
        v = UTD_UP_TO_DATE;
    if (v == UTD_UP_TO_DATE) {
        s->fresh = true;
        memcpy(s->fresh_fp, md, SHA256_SIZE);
    }
    return v;                           /* (its description is the caller's to forget: decided_once) */
}

/* decide, once: asked once a run, a step's description goes with the
 * answer (100,000 descriptions are not kept to the run's end). */
static enum utd_verdict decided_once(struct utd *u, size_t i)
{
    enum utd_verdict v = decide(u, i);
    forget_description(&u->steps[i]);
    return v;
}

/* The verdict given to the scheduler: the step's flags and the counts (a
 * step decided early whose question never comes, in a run that stopped,
 * is counted nowhere and was not "without a record" for the run's result). */
static enum utd_verdict account(struct utd *u, struct step *s, enum utd_verdict v)
{
    if (v == UTD_UP_TO_DATE) {
        s->passed = true;
        u->stats.passed++;
    } else if (v == UTD_NO_RECORD) {
        s->no_record = true;
        u->stats.no_record++;
    } else {
        u->stats.undecided++;
    }
    return v;
}

enum utd_verdict utd_decide(struct utd *u, size_t i)
{
    if (i >= u->n_steps) return UTD_CANNOT_TELL;
    struct step *s = &u->steps[i];
    if (s->early) {
        enum utd_verdict v = (enum utd_verdict)(s->early - 1);
        s->early = 0;
        return account(u, s, v);
    }
    if (!s->d) return UTD_CANNOT_TELL;
    utd_claim(u);                              /* (decide reads the store) */
    return account(u, s, decided_once(u, i));
}

/* ---- a first run's fingerprints, deferred ---- */

bool utd_defer_begin(struct utd *u)
{
    if (!u->store_was_empty || state_store_count(u->store) != u->n_marked || u->early) return false;
    u->deferring = true;
    if (!u->hashed) u->hashed = xcalloc(u->n_steps + 1, 1);
    return true;
}

void utd_defer_end(struct utd *u)
{
    u->deferring = false;
}

void utd_claim(struct utd *u)
{
    if (u) state_store_claim(u->store, false);
}

/* Whether step s's fingerprint can wait: nothing in it but its code,
 * parameters and the hashes of inputs known now or made by steps whose
 * outputs were all hashed (their records, put by the recorder before it
 * works out s's, hold them).  Reads only what the loop's thread writes. */
static bool deferrable(const struct utd *u, const struct step *s)
{
    const struct description *d = s->d;
    if (!d || d->n_files) return false;
    for (size_t k = 0; k < d->n_inputs; k++) {
        size_t p = d->inputs[k].producer;
        if (p == UTD_NO_PRODUCER ? !d->inputs[k].hash : p >= u->n_steps || !u->hashed[p]) return false;
    }
    return true;
}

enum utd_verdict utd_decide_may_defer(struct utd *u, size_t i)
{
    if (i < u->n_steps && u->deferring && !u->steps[i].early && deferrable(u, &u->steps[i])) {
        /* (no record: the store holds only this run's, and none of this step's) */
        u->steps[i].deferred = true;
        u->stats.deferred++;
        return account(u, &u->steps[i], UTD_NO_RECORD);
    }
    return utd_decide(u, i);
}

bool utd_deferred(const struct utd *u, size_t i)
{
    return i < u->n_steps && u->steps[i].deferred;
}

void utd_take_deferred_fingerprint(struct utd *u, size_t i, char **fp, char **parts_json)
{
    *fp = *parts_json = NULL;
    if (!utd_deferred(u, i)) return;
    struct step *s = &u->steps[i];
    s->deferred = false;
    (void)fingerprint_new(u, s->d, fp, parts_json);
    forget_description(s);
}

void utd_outputs_hashed(struct utd *u, size_t i)
{
    if (i < u->n_steps && u->hashed) u->hashed[i] = 1;
}

bool utd_early_up_to_date(const struct utd *u, size_t i)
{
    return i < u->n_steps && u->steps[i].early == 1 + UTD_UP_TO_DATE;
}

/* The early decision of step i, if it can be made now.  `forget`: its
 * description goes with it; else the describer's thread frees it
 * (forget_decided: a block that thread allocated, freed on another, took
 * glibc's arena lock against its next malloc, two futex calls a step). */
static bool decide_early_now(struct utd *u, size_t i, bool forget)
{
    /* one without a record would hold the fingerprint and parts it runs with
     * from now until it starts (a first run of 100,000 independent steps:
     * all of them at once): it is decided when asked, as a slot frees */
    if (!record_of(u, &u->steps[i])) return false;
    const struct description *d = u->steps[i].d;
    for (size_t k = 0; k < d->n_inputs; k++) {
        size_t p = d->inputs[k].producer;
        if (p != UTD_NO_PRODUCER && (p >= u->n_steps || (!u->steps[p].fresh && !u->steps[p].ran)))
            return false;
    }
    u->steps[i].early = (unsigned char)(1 + (forget ? decided_once(u, i) : decide(u, i)));
    return true;
}

/* ---- early decisions on a thread of their own ----------------------------- */

/* The describer (the loop's thread) queues each step it described; the
 * thread decides them in that order, producers first as they were
 * described.  A queued step is the thread's until utd_early_end: the
 * describer writes only the steps it has not queued yet (their producers
 * are queued before them), and the thread's decisions of a step read only
 * it and its producers.  Producer and consumer share `n`; the thread spins
 * a little before it sleeps, and the describer wakes it only once it has
 * queued EARLY_BATCH more: woken for each step, it cost a futex call and a
 * context switch a step (13,000 and 1,000 of a no-op of 100,000). */
#define EARLY_SPINS 2000
#define EARLY_BATCH 256

struct early {
    struct utd *u;
    pthread_t thread;
    uint32_t *queue;             /* n_steps entries */
    atomic_size_t n;             /* queued so far */
    atomic_size_t decided;       /* the queue's first `decided` are the thread's no more */
    size_t forgotten;            /* of those, the descriptions freed (forget_decided) */
    atomic_size_t slept_at;      /* what the thread had decided when it went to sleep */
    atomic_bool closed, sleeping;
    pthread_mutex_t mu;
    pthread_cond_t more;
};

static void *decide_queued(void *arg)
{
    struct early *e = arg;
    size_t done = 0;
    for (int spins = 0;;) {
        size_t n = atomic_load(&e->n);
        if (done < n) {
            for (; done < n; done++) {
                decide_early_now(e->u, e->queue[done], false);
                if (done % 64 == 63) atomic_store(&e->decided, done + 1);
            }
            atomic_store(&e->decided, done);
            spins = 0;
            continue;
        }
        if (atomic_load(&e->closed)) {
            if (done == atomic_load(&e->n)) return NULL;
            continue;
        }
        if (++spins < EARLY_SPINS) continue;
        pthread_mutex_lock(&e->mu);
        atomic_store(&e->slept_at, done);
        atomic_store(&e->sleeping, true);             /* then n looked at again: a queue seen, or a wake-up */
        while (atomic_load(&e->n) == done && !atomic_load(&e->closed)) pthread_cond_wait(&e->more, &e->mu);
        atomic_store(&e->sleeping, false);
        pthread_mutex_unlock(&e->mu);
        spins = 0;
    }
}

/* On the describer's thread: the descriptions of the steps the thread has
 * decided, freed (one it could not decide keeps its own for the question). */
static void forget_decided(struct early *e)
{
    size_t upto = atomic_load(&e->decided);
    for (; e->forgotten < upto; e->forgotten++) {
        struct step *s = &e->u->steps[e->queue[e->forgotten]];
        if (s->early) forget_description(s);
    }
}

static void wake(struct early *e, size_t n)
{
    if (!atomic_load(&e->sleeping) || n - atomic_load(&e->slept_at) < EARLY_BATCH) return;
    pthread_mutex_lock(&e->mu);
    pthread_cond_signal(&e->more);
    pthread_mutex_unlock(&e->mu);
}

void utd_early_begin(struct utd *u)
{
    /* (a first run has no record to decide early: no thread) */
    if (u->early || u->n_steps == 0 || u->n_steps > UINT32_MAX || !u->store || state_store_count(u->store) == 0)
        return;
    struct early *e = xcalloc(1, sizeof *e);
    e->u = u;
    e->queue = xmalloc(u->n_steps * sizeof *e->queue);
    atomic_init(&e->n, 0);
    atomic_init(&e->closed, false);
    atomic_init(&e->sleeping, false);
    atomic_init(&e->slept_at, 0);
    atomic_init(&e->decided, 0);
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->more, NULL);
    if (start_quiet_thread(&e->thread, decide_queued, e) != 0) {
        pthread_cond_destroy(&e->more);
        pthread_mutex_destroy(&e->mu);
        free(e->queue);
        free(e);
        return;
    }
    u->early = e;
}

void utd_early_end(struct utd *u)
{
    struct early *e = u->early;
    if (!e) return;
    atomic_store(&e->closed, true);
    pthread_mutex_lock(&e->mu);
    pthread_cond_signal(&e->more);
    pthread_mutex_unlock(&e->mu);
    pthread_join(e->thread, NULL);
    forget_decided(e);
    pthread_cond_destroy(&e->more);
    pthread_mutex_destroy(&e->mu);
    free(e->queue);
    free(e);
    u->early = NULL;
}

void utd_prefetch_record(const struct utd *u, size_t i, const char *name)
{
    if (i < u->n_steps && !u->steps[i].slot_1 && name) state_store_prefetch(u->store, name);
}

bool utd_decide_early(struct utd *u, size_t i)
{
    if (i >= u->n_steps || !u->steps[i].d || u->steps[i].early) return false;
    struct early *e = u->early;
    if (!e) return decide_early_now(u, i, true);
    forget_decided(e);
    /* (what the thread would find first, found here: a first run queues
     * nothing, and the thread sleeps through it) */
    if (!record_of(u, &u->steps[i])) return false;
    size_t n = atomic_load_explicit(&e->n, memory_order_relaxed);    /* (only this thread writes it) */
    e->queue[n] = (uint32_t)i;
    atomic_store(&e->n, n + 1);
    wake(e, n + 1);
    return false;
}

bool utd_take_fingerprint(struct utd *u, size_t i, char **fp, char **parts_json)
{
    *fp = *parts_json = NULL;
    if (i >= u->n_steps || !u->steps[i].fp) return false;
    *fp = u->steps[i].fp;
    *parts_json = u->steps[i].parts_json;
    u->steps[i].fp = u->steps[i].parts_json = NULL;
    return true;
}
