/* config_interp.c — ${env:VAR[,default]}, ${globals:key[,default]}, ${params:key[,default]}.
 *
 * config_resolve builds the resolved trees afresh from the raw ones, so the raw values keep
 * what was written: explain can show it, and overrides added later resolve correctly.
 * Each templated string is resolved once (a memo keyed by its raw node).  Meeting a string
 * again while it is still being resolved is a cycle, reported with the chain that led back
 * to it.  A string that is exactly one ${...} takes the referenced value's type; inside a
 * longer string the value is stringified.  $${ is a literal ${, and AML's own ${{...}} is
 * left alone.  Values of environment variables, and defaults, are typed like --params
 * values when the reference is the whole value, except in credentials, which stay strings;
 * embedded in a longer string they give their text exactly as written (ID=0042 makes
 * "/data/${env:ID}" "/data/0042", never "/data/42"). */
#define FLOW_CONFIG_INTERNAL
#include "config.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct link { const cJSON *node; char *path; };

struct interp {
    struct config *cfg;
    struct ptrmap memo;            /* raw string node -> its resolved value */
    struct link chain[CFG_MAX_CHAIN + 2];
    size_t nchain;
    int secret;                        /* building credentials: env values become secrets */
    size_t nodes;                      /* values copied by substitution, bounded */
    size_t bytes;                      /* string bytes built or copied by substitution, bounded */
    int failed;
    char *err;
    size_t errlen;
};

static char resolving_mark;            /* memo value of a string being resolved */

static const cJSON *resolve_string(struct interp *ip, const cJSON *raw, const char *path);
static cJSON *eval_template(struct interp *ip, const char *text, const char *path, bool as_text);

static int in_credentials(const char *path)
{
    size_t n = strlen("credentials");
    return strncmp(path, "credentials", n) == 0 && (path[n] == CFG_SEP || path[n] == '\0');
}

/* "parameters\x1fa\x1fb" -> "params:a.b" */
static void ref_name(const char *path, struct strbuf *out)
{
    const char *sep = strchr(path, CFG_SEP);
    size_t n = sep ? (size_t)(sep - path) : strlen(path);
    if (n == strlen("parameters") && strncmp(path, "parameters", n) == 0)
        sb_adds(out, "params");
    else
        sb_add(out, path, n);
    sb_add(out, ":", 1);
    cfg_path_display(path, out);
}

/* Records the first (innermost) error as "where: section key 'a.b': message". */
static void ifail(struct interp *ip, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void ifail(struct interp *ip, const char *path, const char *fmt, ...)
{
    if (ip->failed)
        return;
    ip->failed = 1;
    char *msg = NULL;
    va_list ap;
    va_start(ap, fmt);
    if (vasprintf(&msg, fmt, ap) < 0)
        msg = NULL;
    va_end(ap);
    struct strbuf key = STRBUF_INIT;
    cfg_path_display(path, &key);
    const char *where = cfg_path_where(ip->cfg, path), *sep = strchr(path, CFG_SEP);
    cfg_errorf(ip->cfg, ip->err, ip->errlen, "%s: %.*s key '%s': %s", where ? where : ip->cfg->dir,
               (int)(sep ? (size_t)(sep - path) : strlen(path)), path, key.buf,
               msg ? msg : "out of memory");
    sb_release(&key);
    free(msg);
}

static void *ioom(struct interp *ip, const char *path)
{
    ifail(ip, path, "out of memory");
    return NULL;
}

/* The bytes of the strings (keys included) in a tree. */
static size_t tree_bytes(const cJSON *v)
{
    size_t n = (v->string ? strlen(v->string) : 0) + (cJSON_IsString(v) ? strlen(v->valuestring) : 0);
    for (const cJSON *c = v->child; c; c = c->next)
        n += tree_bytes(c);
    return n;
}

/* A few kilobytes of YAML can reference a value ten times, that value ten
 * times, and so on: what substitution makes is counted, values and bytes,
 * as the parser counts what aliases make. */
static int charge_bytes(struct interp *ip, size_t n, const char *path)
{
    ip->bytes += n;
    if (ip->bytes <= (size_t)CFG_MAX_RESOLVED)
        return 0;
    ifail(ip, path, "interpolation produces more than %ld MiB of text", CFG_MAX_RESOLVED >> 20);
    return -1;
}

static int charge(struct interp *ip, const cJSON *v, const char *path)
{
    ip->nodes += cfg_tree_size(v);
    if (ip->nodes > CFG_MAX_NODES) {
        ifail(ip, path, "interpolation produces more than %d values", CFG_MAX_NODES);
        return -1;
    }
    return charge_bytes(ip, tree_bytes(v), path);
}

static int needs_interp(const cJSON *n) { return cJSON_IsString(n) && strstr(n->valuestring, "${"); }

/* ---- building the resolved tree ----------------------------------------------------- */

static cJSON *build(struct interp *ip, const cJSON *raw, struct strbuf *path, size_t depth)
{
    if (needs_interp(raw)) {
        const cJSON *v = resolve_string(ip, raw, path->buf);
        if (!v)
            return NULL;
        if (depth + cfg_tree_depth(v) > CFG_MAX_DEPTH) {
            ifail(ip, path->buf, "interpolation nests values deeper than %d levels", CFG_MAX_DEPTH);
            return NULL;
        }
        cJSON *copy = charge(ip, v, path->buf) < 0 ? NULL : cfg_copy_value(v);
        return copy || ip->failed ? copy : ioom(ip, path->buf);
    }
    if (!cJSON_IsObject(raw) && !cJSON_IsArray(raw)) {
        cJSON *copy = cfg_copy_value(raw);
        return copy ? copy : ioom(ip, path->buf);
    }
    cJSON *out = cJSON_IsObject(raw) ? cJSON_CreateObject() : cJSON_CreateArray();
    size_t mark = path->len, i = 0;
    for (const cJSON *c = raw->child; c && out; c = c->next, i++) {
        if (c->string)
            cfg_path_push(path, c->string);
        else
            cfg_path_push_index(path, i);
        cJSON *item = build(ip, c, path, depth + 1);
        sb_truncate(path, mark);
        if (item && c->string && !(item->string = cfg_key_dup(c->string, strlen(c->string)))) {
            cJSON_Delete(item);
            item = ioom(ip, path->buf);
        }
        if (!item) {
            cJSON_Delete(out);
            return NULL;
        }
        cJSON_AddItemToArray(out, item);
    }
    return out ? out : ioom(ip, path->buf);
}

/* ---- references --------------------------------------------------------------------- */

static void report_cycle(struct interp *ip, const cJSON *raw, const char *path)
{
    size_t start = 0;
    while (start < ip->nchain && ip->chain[start].node != raw)
        start++;
    struct strbuf b = STRBUF_INIT;
    for (size_t i = start; i < ip->nchain; i++) {
        const char *where = cfg_path_where(ip->cfg, ip->chain[i].path);
        ref_name(ip->chain[i].path, &b);
        sb_addf(&b, " (%s) -> ", where ? where : "?");
    }
    ref_name(path, &b);
    ifail(ip, start < ip->nchain ? ip->chain[start].path : path, "interpolation cycle: %s",
          b.buf ? b.buf : "?");
    sb_release(&b);
}

static int chain_push(struct interp *ip, const cJSON *node, const char *path)
{
    if (ip->nchain >= CFG_MAX_CHAIN) {
        ifail(ip, path, "references nested more than %d deep", CFG_MAX_CHAIN);
        return -1;
    }
    if (!(ip->chain[ip->nchain].path = strdup(path))) {
        ioom(ip, path);
        return -1;
    }
    ip->chain[ip->nchain++].node = node;
    return 0;
}

static void chain_pop(struct interp *ip) { free(ip->chain[--ip->nchain].path); }

static const cJSON *resolve_string(struct interp *ip, const cJSON *raw, const char *path)
{
    void *memo = ptrmap_get(&ip->memo, raw);
    if (memo == &resolving_mark) {
        report_cycle(ip, raw, path);
        return NULL;
    }
    if (memo)
        return memo;
    if (chain_push(ip, raw, path) < 0)
        return NULL;
    ptrmap_put(&ip->memo, raw, &resolving_mark);
    cJSON *v = eval_template(ip, raw->valuestring, path, false);
    chain_pop(ip);
    if (v)
        ptrmap_put(&ip->memo, raw, v);
    if (v && ip->secret && cJSON_IsString(v))
        cfg_add_secret(ip->cfg, v->valuestring);
    return v;
}

/* Finds section:dotted and returns a resolved copy; 0 when it does not exist. */
static int find_ref(struct interp *ip, int sec, const char *dotted, cJSON **out, const char *path)
{
    const cJSON *node = ip->cfg->raw[sec];
    const char *rest = dotted;
    struct strbuf target = STRBUF_INIT;
    int rc = 0;
    sb_adds(&target, cfg_section_names[sec]);
    while (node && *rest && !needs_interp(node))
        node = cfg_step(node, &rest, &target);
    if (node && *rest) {               /* the path goes on inside a templated value */
        const cJSON *v = resolve_string(ip, node, target.buf), *found = v ? cfg_walk(v, rest, NULL) : NULL;
        rc = !v ? -1 : !found ? 0 : charge(ip, found, path) < 0 ? -1 : (*out = cfg_copy_value(found)) ? 1 : -1;
        if (rc < 0 && !ip->failed)
            ioom(ip, path);
    } else if (node) {
        int linked = (cJSON_IsObject(node) || cJSON_IsArray(node));
        if (linked && chain_push(ip, node, target.buf) < 0) {
            rc = -1;
        } else {
            *out = build(ip, node, &target, 0);
            rc = *out ? 1 : -1;
            if (linked)
                chain_pop(ip);
        }
    }
    sb_release(&target);
    return rc;
}

static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    size_t n = strlen(s);
    while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t'))
        s[--n] = '\0';
    return s;
}

/* A default: itself a template, a quoted string, or a plain value typed like --params
 * (its text as written when as_text: the reference is embedded in a longer string). */
static cJSON *eval_default(struct interp *ip, char *def, const char *path, bool as_text)
{
    def = trim(def);
    size_t n = strlen(def);
    cJSON *v;
    if (strstr(def, "${"))
        return eval_template(ip, def, path, as_text);
    if (n >= 2 && (def[0] == '"' || def[0] == '\'') && def[n - 1] == def[0]) {
        def[n - 1] = '\0';
        v = cJSON_CreateString(def + 1);
    } else {
        v = as_text || in_credentials(path) ? cJSON_CreateString(def) : cfg_scalar_infer(def, n, 0);
    }
    return v ? v : ioom(ip, path);
}

static cJSON *eval_env(struct interp *ip, const char *name, char *def, const char *path, bool as_text)
{
    const char *val = name[0] ? getenv(name) : NULL;
    if (!name[0]) {
        ifail(ip, path, "${env:} needs a variable name");
        return NULL;
    }
    if (val) {
        if (ip->secret)
            cfg_add_secret(ip->cfg, val);
        cJSON *v = as_text || in_credentials(path) ? cJSON_CreateString(val)
                                                    : cfg_scalar_infer(val, strlen(val), 0);
        return v ? v : ioom(ip, path);
    }
    if (def)
        return eval_default(ip, def, path, as_text);
    ifail(ip, path, "environment variable %s is not set (set it, or give a default: ${env:%s,value})",
          name, name);
    return NULL;
}

static cJSON *eval_lookup(struct interp *ip, int sec, const char *kind, const char *name,
                          char *def, const char *path, bool as_text)
{
    cJSON *out = NULL;
    int rc = name[0] ? find_ref(ip, sec, name, &out, path) : 0;
    if (rc != 0)
        return rc > 0 ? out : NULL;
    if (def)
        return eval_default(ip, def, path, as_text);
    char *near = name[0] ? config_closest_key(ip->cfg, cfg_section_names[sec], name) : NULL;
    ifail(ip, path, "${%s:%s} does not exist%s%s%s", kind, name, near ? "; did you mean '" : "",
          near ? near : "", near ? "'?" : "");
    free(near);
    return NULL;
}

/* If a quoted default starts at text[i] (after a comma and blanks), the index of its
 * closing quote; else 0.  The closing quote is the first one followed by blanks and '}',
 * so a lone apostrophe (${env:X,it's}) is plain text, not an unterminated quote. */
static size_t quoted_default_end(const char *text, size_t i)
{
    while (text[i] == ' ' || text[i] == '\t')
        i++;
    if (text[i] != '\'' && text[i] != '"')
        return 0;
    for (size_t j = i + 1; text[j]; j++) {
        if (text[j] != text[i])
            continue;
        size_t k = j + 1;
        while (text[k] == ' ' || text[k] == '\t')
            k++;
        if (text[k] == '}')
            return j;
    }
    return 0;
}

/* The index just past the '}' closing the ${ at text[i], or 0 if it is not closed.  A
 * quoted default may hold '}' (${env:X,'a}b'}): the quotes are skipped whole. */
static size_t ref_end(const char *text, size_t i)
{
    size_t depth = 0, q;
    for (; text[i]; i++) {
        if (text[i] == '$' && text[i + 1] == '{')
            depth++, i++;
        else if (text[i] == '}' && --depth == 0)
            return i + 1;
        else if (text[i] == ',' && (q = quoted_default_end(text, i + 1)))
            i = q;
    }
    return 0;
}

/* inner is what is between "${" and "}": "kind:name" or "kind:name,default". */
static cJSON *eval_ref(struct interp *ip, const char *inner, size_t n, const char *path, bool as_text)
{
    char *ref = strndup(inner, n), *colon = ref ? strchr(ref, ':') : NULL, *def = NULL;
    cJSON *v = NULL;
    if (!ref)
        return ioom(ip, path);
    for (size_t i = colon ? (size_t)(colon - ref) : 0, depth = 0; colon && ref[i]; i++) {
        if (ref[i] == '$' && ref[i + 1] == '{')
            depth++;
        else if (ref[i] == '}' && depth)
            depth--;
        else if (ref[i] == ',' && !depth) {
            ref[i] = '\0';             /* the default starts after the first top-level comma */
            def = ref + i + 1;
            break;
        }
    }
    if (colon)
        *colon = '\0';
    char *kind = trim(ref), *name = colon ? trim(colon + 1) : NULL;
    if (!name)
        ifail(ip, path, "%s%s%s is not a reference: use ${env:VAR}, ${globals:key} or ${params:key}",
              in_credentials(path) ? "this ${...}" : "${", in_credentials(path) ? "" : kind,
              in_credentials(path) ? "" : "}");
    else if (strcmp(kind, "env") == 0)
        v = eval_env(ip, name, def, path, as_text);
    else if (strcmp(kind, "globals") == 0)
        v = eval_lookup(ip, CFG_GLOBALS, "globals", name, def, path, as_text);
    else if (strcmp(kind, "params") == 0 || strcmp(kind, "parameters") == 0)
        v = eval_lookup(ip, CFG_PARAMETERS, "params", name, def, path, as_text);
    else
        ifail(ip, path, "unknown reference kind '%s': use ${env:VAR}, ${globals:key} or ${params:key}",
              in_credentials(path) ? "..." : kind);
    free(ref);
    return v;
}

/* Stringifies a referenced value into a longer string. */
static int append_value(struct interp *ip, struct strbuf *b, const cJSON *v, const char *path)
{
    char num[40];
    if (cJSON_IsString(v))
        sb_adds(b, v->valuestring);
    else if (cJSON_IsNumber(v))
        sb_adds(b, cfg_number_text(v, num));
    else if (cJSON_IsBool(v))
        sb_adds(b, cJSON_IsTrue(v) ? "true" : "false");
    else if (cJSON_IsObject(v) || cJSON_IsArray(v)) {
        ifail(ip, path, "a %s cannot be embedded in a longer string; make the reference the "
              "whole value", cJSON_IsObject(v) ? "mapping" : "list");
        return -1;
    }
    return 0;                          /* null embeds as nothing */
}

/* as_text: the result will be embedded in a longer string (this is a default of an
 * embedded reference), so environment values and defaults keep their text. */
static cJSON *eval_template(struct interp *ip, const char *text, const char *path, bool as_text)
{
    size_t len = strlen(text), end;
    if (text[0] == '$' && text[1] == '{' && text[2] != '{' && ref_end(text, 0) == len)
        return eval_ref(ip, text + 2, len - 3, path, as_text);
    struct strbuf b = STRBUF_INIT;
    sb_add(&b, "", 0);
    for (size_t i = 0; i < len && !ip->failed;) {
        if (strncmp(text + i, "$${", 3) == 0) {
            sb_add(&b, "${", 2);
            i += 3;
        } else if (strncmp(text + i, "${{", 3) == 0) {
            const char *close = strstr(text + i + 3, "}}");
            end = close ? (size_t)(close - text) + 2 : len;
            sb_add(&b, text + i, end - i);
            i = end;
        } else if (strncmp(text + i, "${", 2) == 0) {
            if (!(end = ref_end(text, i))) {
                ifail(ip, path, "unterminated ${ (close it with }, or write $${ for a literal ${)");
                break;
            }
            cJSON *v = eval_ref(ip, text + i + 2, end - i - 3, path, true);
            if (v)
                append_value(ip, &b, v, path);
            cJSON_Delete(v);
            i = end;
        } else {
            sb_add(&b, text + i, 1);
            i++;
        }
        if (b.len > (size_t)CFG_MAX_STRING && !ip->failed)
            ifail(ip, path, "interpolation makes this string longer than %ld MiB", CFG_MAX_STRING >> 20);
    }
    if (!ip->failed)
        charge_bytes(ip, b.len, path);
    char *s = sb_detach(&b);
    cJSON *v = s && !ip->failed ? cJSON_CreateString(s) : NULL;
    free(s);
    return v || ip->failed ? v : ioom(ip, path);
}

/* ---- entry point -------------------------------------------------------------------- */

static void collect_secrets(struct config *cfg, const cJSON *node)
{
    if (cJSON_IsString(node))
        cfg_add_secret(cfg, node->valuestring);
    for (const cJSON *c = node->child; c; c = c->next)
        collect_secrets(cfg, c);
}

static void interp_free(struct interp *ip)
{
    for (size_t i = 0; i < ip->memo.cap; i++)
        if (ip->memo.slots[i].key && ip->memo.slots[i].value != &resolving_mark)
            cJSON_Delete(ip->memo.slots[i].value);
    ptrmap_free(&ip->memo);
    while (ip->nchain)
        chain_pop(ip);
}

int config_resolve(struct config *cfg, char *err, size_t errlen)
{
    /* credentials first, so environment values they pull in (even through globals) are
     * known as secrets before anything else can put them into an error message */
    static const int order[] = {CFG_CREDENTIALS, CFG_PARAMETERS, CFG_GLOBALS, CFG_CATALOG,
                                CFG_AZUREML, CFG_FLOW};
    char scratch[512];
    if (!err || !errlen)
        err = scratch, errlen = sizeof scratch;
    err[0] = '\0';
    if (!cfg) {
        snprintf(err, errlen, "no configuration");
        return -1;
    }
    struct interp ip = {.cfg = cfg, .err = err, .errlen = errlen};
    cJSON *out[CFG_NSECTIONS] = {0};
    int rc = 0;
    for (size_t k = 0; k < CFG_NSECTIONS && rc == 0; k++) {
        int s = order[k];
        struct strbuf path = STRBUF_INIT;
        sb_adds(&path, cfg_section_names[s]);
        ip.secret = s == CFG_CREDENTIALS;
        out[s] = build(&ip, cfg->raw[s], &path, 0);
        sb_release(&path);
        rc = out[s] ? 0 : -1;
    }
    if (rc == 0)
        collect_secrets(cfg, out[CFG_CREDENTIALS]);
    interp_free(&ip);
    for (int s = 0; s < CFG_NSECTIONS; s++) {
        cJSON *old = rc == 0 ? cfg->res[s] : out[s];
        if (rc == 0)
            cfg->res[s] = out[s];
        cJSON_Delete(old);
    }
    if (rc < 0 && !err[0])
        snprintf(err, errlen, "out of memory");
    return rc;
}
