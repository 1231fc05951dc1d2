/* step_record.c — see step_record.h. */
#include "step_record.h"
#include "json_text.h"
#include "statestore.h"
#include "util.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool truthy(const cJSON *v) { return v && !cJSON_IsNull(v) && !cJSON_IsFalse(v); }

/* One output record: its kind, and its path ("" for most values). */
static char output_kind(const cJSON *out, const char **path)
{
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(out, "path");
    *path = "";
    if (cJSON_IsString(p)) {
        *path = p->valuestring;
        return 'f';
    }
    if (truthy(cJSON_GetObjectItemCaseSensitive(out, "uncacheable"))) return 'u';
    if (truthy(cJSON_GetObjectItemCaseSensitive(out, "recompute"))) return 't';
    if (cJSON_GetObjectItemCaseSensitive(out, "value")) return 'v';
    if (truthy(cJSON_GetObjectItemCaseSensitive(out, "cached"))) return 'c';
    return 'm';
}

/* The outputs of `outs` (an object of objects) into rec->outs, with the
 * cached values' paths made in `paths` (one string per output); whether
 * every one is a file or folder.  -1 when outs is not that shape. */
static int read_outputs(const cJSON *outs, const char *values_dir, struct state_rec *rec, char **paths,
                        bool *files_only)
{
    size_t k = 0;
    *files_only = true;
    for (const cJSON *o = outs ? outs->child : NULL; o; o = o->next, k++) {
        if (!cJSON_IsObject(o) || !o->string) return -1;
        const cJSON *h = cJSON_GetObjectItemCaseSensitive(o, "hash");
        const char *hash = cJSON_IsString(h) ? h->valuestring : "";
        const char *path;
        char kind = output_kind(o, &path);
        if (kind == 'c') path = paths[k] = xasprintf("%s/%s", values_dir, hash);
        *files_only = *files_only && kind == 'f';
        rec->outs[k] = (struct state_out){ kind, o->string, path, hash };
    }
    rec->n_outs = k;
    return 0;
}

#define FEW_OUTPUTS 8

/* "key":json, nothing for NULL. */
static void add_member(struct strbuf *sb, const char *key, const char *json)
{
    if (!json) return;
    json_key(sb, key);
    sb_adds(sb, json);
}

/* The record with its outputs read (rec->outs): its body made, then put. */
static int put_with_body(struct state_store *s, const struct step_record *r, struct state_rec *rec, bool files_only,
                         char *err, size_t errlen)
{
    struct strbuf body = STRBUF_INIT;
    sb_addc(&body, '{');
    add_member(&body, "parts", r->parts_json);
    if (!files_only) add_member(&body, "outputs", r->outputs_json);
    add_member(&body, "metrics", r->metrics_json);
    sb_addc(&body, '}');
    rec->body = body.buf;
    rec->body_len = body.len;
    int rc = state_store_put(s, rec, err, errlen);
    sb_release(&body);
    return rc;
}

static bool same_text(const char *a, const char *b) { return strcmp(a ? a : "", b ? b : "") == 0; }

/* Whether the outputs given as fields are those the text gives. */
static bool fields_agree(const struct step_record *r, const struct state_rec *read)
{
    if (read->n_outs != r->n_outs) return false;
    for (size_t k = 0; k < r->n_outs; k++) {
        const struct state_out *a = &r->outs[k], *b = &read->outs[k];
        if (a->kind != b->kind || !same_text(a->dataset, b->dataset) || !same_text(a->path, b->path) ||
            !same_text(a->hash, b->hash))
            return false;
    }
    return true;
}

static bool debug_fields(void)
{
    static int on = -1;               /* (the loop's thread only) */
    if (on < 0) on = getenv("FLOW_DEBUG_RECORD_FIELDS") != NULL;
    return on;
}

/* The record from the outputs given as fields: no text read. */
static int put_fields(struct state_store *s, const struct step_record *r, char *err, size_t errlen)
{
    struct state_out few_outs[FEW_OUTPUTS];
    size_t n = r->n_outs;
    struct state_rec rec = { .name = r->name, .fp = r->fp, .time = r->time, .n_outs = n,
                             .outs = n < FEW_OUTPUTS ? few_outs : xcalloc(n + 1, sizeof *rec.outs) };
    bool files_only = true;
    for (size_t k = 0; k < n; k++) {
        rec.outs[k] = r->outs[k];
        files_only = files_only && r->outs[k].kind == 'f';
    }
    int rc = put_with_body(s, r, &rec, files_only, err, errlen);
    if (rec.outs != few_outs) free(rec.outs);
    return rc;
}

int step_record_put(struct state_store *s, const struct step_record *r, char *err, size_t errlen)
{
    if (r->outs && r->outputs_json && !debug_fields()) return put_fields(s, r, err, errlen);
    cJSON *outs = r->outputs_json ? cJSON_Parse(r->outputs_json) : NULL;
    if (r->outputs_json && !cJSON_IsObject(outs)) {
        cJSON_Delete(outs);
        snprintf(err, errlen, "step '%s': its output records are not a JSON object", r->name);
        return -1;
    }
    size_t n = (size_t)cJSON_GetArraySize(outs);
    /* (a step's few outputs on the stack: two callocs a step were 1 % of a
     * first run of 100,000 Lua steps) */
    struct state_out few_outs[FEW_OUTPUTS];
    char *few_paths[FEW_OUTPUTS] = { NULL };
    bool few = n < FEW_OUTPUTS;
    struct state_rec rec = { .name = r->name, .fp = r->fp, .time = r->time,
                             .outs = few ? few_outs : xcalloc(n + 1, sizeof *rec.outs) };
    char **paths = few ? few_paths : xcalloc(n + 1, sizeof *paths);
    bool files_only;
    int rc = read_outputs(outs, state_store_values_dir(s), &rec, paths, &files_only);
    if (rc != 0)
        snprintf(err, errlen, "step '%s': an output record is not a JSON object", r->name);
    else if (r->outs && !fields_agree(r, &rec)) {
        snprintf(err, errlen, "internal error: step '%s': the outputs given as fields are not those of its output "
                              "records", r->name);
        rc = -1;
    } else
        rc = put_with_body(s, r, &rec, files_only, err, errlen);
    for (size_t k = 0; k < n; k++) free(paths[k]);
    if (!few) {
        free(paths);
        free(rec.outs);
    }
    cJSON_Delete(outs);
    return rc;
}
