/* config_yaml.c — text to cJSON and back for the config loader.
 *
 * YAML is read event by event with libyaml (not its document loader) so that we can type
 * plain scalars by the YAML 1.2 core schema, expand aliases and `<<:` merge keys, reject
 * duplicate keys, and remember the line of every value for origins.  JSON goes through
 * cJSON; a second, trivial scan of the (already valid) text recovers the lines.
 * Input is untrusted: nesting, alias expansion and sizes are bounded. */
#define FLOW_CONFIG_INTERNAL
#include "config.h"
#include "json_text.h"
#include "utf8.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#define YAML_TAG "tag:yaml.org,2002:"

/* ---- scalars ------------------------------------------------------------------------ */

cJSON *cfg_number(double d)
{
    /* cJSON casts the double to int to fill valueint; a NaN cast is undefined. */
    cJSON *n = cJSON_CreateNumber(isnan(d) ? 0 : d);
    if (n && isnan(d))
        n->valuedouble = d;
    return n;
}

cJSON *cfg_integer(long long i)
{
    if (i >= -9007199254740992LL && i <= 9007199254740992LL)
        return cfg_number((double)i);
    char text[24];
    snprintf(text, sizeof text, "%lld", i);
    cJSON *n = cJSON_CreateString(text);    /* valuestring from cJSON's own allocator */
    if (!n)
        return NULL;
    n->type = cJSON_Number;
    n->valuedouble = (double)i;
    n->valueint = i < 0 ? INT_MIN : INT_MAX; /* what cJSON_CreateNumber saturates it to */
    return n;
}

bool cfg_big_integer(const cJSON *n, long long *out)
{
    if (!cJSON_IsNumber(n) || !n->valuestring)
        return false;
    char *end;
    errno = 0;
    *out = strtoll(n->valuestring, &end, 10);
    return errno == 0 && *end == '\0' && end != n->valuestring;
}

const char *cfg_number_text(const cJSON *n, char buf[40])
{
    long long i;
    if (cfg_big_integer(n, &i)) {
        snprintf(buf, 40, "%lld", i);
        return buf;
    }
    return cfg_format_number(n->valuedouble, buf);
}

const char *cfg_format_number(double d, char buf[40])
{
    if (isnan(d))
        return strcpy(buf, ".nan");
    if (isinf(d))
        return strcpy(buf, d < 0 ? "-.inf" : ".inf");
    /* no libm: the module links with just cJSON and libyaml */
    if (d > -1e17 && d < 1e17 && d == (double)(long long)d) {
        snprintf(buf, 40, "%.0f", d);
        return buf;
    }
    return json_format_float(d, buf);   /* keeps it reading as a float */
}

static int all_digits(const char *s, size_t n, const char *set)
{
    if (n == 0)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!strchr(set, s[i]) || s[i] == '\0')
            return 0;
    return 1;
}

static int digit_of(int c) { return c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10; }

static double digits_value(const char *s, size_t n, int base)
{
    double v = 0;
    for (size_t i = 0; i < n; i++)
        v = v * base + digit_of(s[i]);
    return v;
}

/* 0x.../0o... digits that fit a long long, exactly (digits_value's double
 * rounds past 2^53: 0x20000000000001 read one less). */
static int exact_digits(const char *s, size_t n, int base, long long *out)
{
    unsigned long long v = 0, max = (unsigned long long)LLONG_MAX;
    for (size_t i = 0; i < n; i++) {
        unsigned d = (unsigned)digit_of(s[i]);
        if (v > (max - d) / (unsigned)base)
            return 0;                            /* beyond a long long: parse_int's float */
        v = v * (unsigned)base + d;
    }
    *out = (long long)v;
    return 1;
}

/* strtod on a slice, so decimal text rounds exactly as C reads it */
static int slice_to_double(const char *s, size_t n, double *out)
{
    char tmp[64], *copy = n < sizeof tmp ? tmp : malloc(n + 1);
    if (!copy)
        return 0;
    memcpy(copy, s, n);
    copy[n] = '\0';
    *out = strtod(copy, NULL);
    if (copy != tmp)
        free(copy);
    return 1;
}

/* An int that fits a long long, read exactly (strtod would round one past 2^53):
 * decimal, or YAML 1.2's 0o and 0x. */
static int parse_exact_int(const char *s, size_t n, long long *out)
{
    if (n > 2 && s[0] == '0' && (s[1] == 'o' || s[1] == 'x')) {
        int hex = s[1] == 'x';
        return all_digits(s + 2, n - 2, hex ? "0123456789abcdefABCDEF" : "01234567") &&
               exact_digits(s + 2, n - 2, hex ? 16 : 8, out);
    }
    size_t i = (n > 0 && (s[0] == '-' || s[0] == '+'));
    if (n - i == 0 || n - i > 19 || !all_digits(s + i, n - i, "0123456789"))
        return 0;
    char tmp[24], *end;
    memcpy(tmp, s, n);
    tmp[n] = '\0';
    errno = 0;
    *out = strtoll(tmp, &end, 10);
    return errno == 0 && *end == '\0';
}

/* YAML 1.2 core schema ints: [-+]?[0-9]+ | 0o[0-7]+ | 0x[0-9a-fA-F]+ */
static int parse_int(const char *s, size_t n, double *out)
{
    if (n > 2 && s[0] == '0' && (s[1] == 'o' || s[1] == 'x')) {
        int hex = s[1] == 'x';
        if (!all_digits(s + 2, n - 2, hex ? "0123456789abcdefABCDEF" : "01234567"))
            return 0;
        *out = digits_value(s + 2, n - 2, hex ? 16 : 8);
        return 1;
    }
    size_t i = (n > 0 && (s[0] == '-' || s[0] == '+'));
    return all_digits(s + i, n - i, "0123456789") && slice_to_double(s, n, out);
}

/* [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)? and the .inf/.nan spellings */
static int parse_float(const char *s, size_t n, double *out)
{
    static const char *const inf[] = {".inf", ".Inf", ".INF"}, *const nan_[] = {".nan", ".NaN", ".NAN"};
    size_t i = (n > 0 && (s[0] == '-' || s[0] == '+'));
    for (int k = 0; k < 3; k++) {
        if (n - i == 4 && memcmp(s + i, inf[k], 4) == 0) {
            *out = s[0] == '-' ? -INFINITY : INFINITY;
            return 1;
        }
        if (n == 4 && memcmp(s, nan_[k], 4) == 0) {
            *out = NAN;
            return 1;
        }
    }
    size_t int_digits = 0, frac_digits = 0, j = i;
    while (j < n && s[j] >= '0' && s[j] <= '9') j++, int_digits++;
    if (j < n && s[j] == '.')
        for (j++; j < n && s[j] >= '0' && s[j] <= '9'; j++) frac_digits++;
    if (int_digits + frac_digits == 0)
        return 0;
    if (j < n && (s[j] == 'e' || s[j] == 'E')) {
        j++;
        if (j < n && (s[j] == '-' || s[j] == '+')) j++;
        size_t exp_digits = 0;
        while (j < n && s[j] >= '0' && s[j] <= '9') j++, exp_digits++;
        if (!exp_digits)
            return 0;
    }
    return j == n && slice_to_double(s, n, out);
}

static int word_in(const char *s, size_t n, const char *const *words)
{
    for (; *words; words++)
        if (strlen(*words) == n && memcmp(s, *words, n) == 0)
            return 1;
    return 0;
}

/* The YAML 1.2 core schema reading of an unquoted scalar.  Empty text is null in YAML
 * but an empty string in --params and environment variables (empty_is_null = 0). */
cJSON *cfg_scalar_infer(const char *s, size_t n, int empty_is_null)
{
    static const char *const nulls[] = {"null", "Null", "NULL", "~", NULL};
    static const char *const trues[] = {"true", "True", "TRUE", NULL};
    static const char *const falses[] = {"false", "False", "FALSE", NULL};
    double d;
    if (n == 0)
        return empty_is_null ? cJSON_CreateNull() : cJSON_CreateString("");
    if (word_in(s, n, nulls))
        return cJSON_CreateNull();
    if (word_in(s, n, trues))
        return cJSON_CreateTrue();
    if (word_in(s, n, falses))
        return cJSON_CreateFalse();
    long long i;
    if (parse_exact_int(s, n, &i))
        return cfg_integer(i);
    if (parse_int(s, n, &d) || parse_float(s, n, &d))   /* beyond a long long: a float */
        return cfg_number(d);
    char *copy = strndup(s, n);
    cJSON *str = copy ? cJSON_CreateString(copy) : NULL;
    free(copy);
    return str;
}

/* Would a plain scalar with this text read back as something other than this string,
 * in YAML 1.2 or in the YAML 1.1 readers people still use (yes/no/on/off)? */
static int needs_quotes(const char *s)
{
    static const char *const yaml11[] = {"yes", "Yes", "YES", "no", "No", "NO", "on", "On",
                                         "ON", "off", "Off", "OFF", "y", "Y", "n", "N", NULL};
    size_t n = strlen(s);
    if (n == 0 || word_in(s, n, yaml11) || strcmp(s, "<<") == 0)
        return 1;
    cJSON *v = cfg_scalar_infer(s, n, 1);
    int quote = !v || !cJSON_IsString(v);
    cJSON_Delete(v);
    return quote;
}

/* ---- YAML reading ------------------------------------------------------------------- */

struct yframe {
    cJSON *node;                       /* the mapping or sequence being filled */
    char *key;                         /* mapping: the pending key, once read */
    int have_key, key_line, merge_key;
    cJSON *merges;                     /* values of `<<:`, applied at the mapping's end */
};

struct yanchor { char *name; cJSON *node; int open; };

struct yload {
    yaml_parser_t parser;
    const char *text, *file;
    struct ptrmap *lines;
    struct yframe stack[CFG_MAX_DEPTH + 1];
    size_t depth;
    struct yanchor *anchors;
    size_t nanchors, capanchors;
    cJSON *root;
    /* `<<:` sources whose mapping has ended: an anchor set on one (`<<: &base {..}`) may
     * still be aliased later in the file, so they live until the parse ends. */
    cJSON *spent_merges;
    size_t nodes;
    int docs;
    char *err;
    size_t errlen;
};

static int yfail(struct yload *y, const yaml_mark_t *m, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int yfail(struct yload *y, const yaml_mark_t *m, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(y->err, y->errlen, "%s:%zu:%zu: %s", y->file, m->line + 1, m->column + 1, msg);
    return -1;
}

static void offset_to_mark(const char *text, size_t off, yaml_mark_t *m)
{
    m->line = m->column = 0;
    for (size_t i = 0; i < off && text[i]; i++) {
        if (text[i] == '\n')
            m->line++, m->column = 0;
        else
            m->column++;
    }
}

static void ysyntax_error(struct yload *y)
{
    yaml_parser_t *p = &y->parser;
    yaml_mark_t m = p->problem_mark;
    if (p->error == YAML_MEMORY_ERROR) {
        snprintf(y->err, y->errlen, "%s: out of memory", y->file);
        return;
    }
    if (p->error == YAML_READER_ERROR)
        offset_to_mark(y->text, p->problem_offset, &m);
    const char *problem = p->problem ? p->problem : "syntax error";
    if (p->context)
        snprintf(y->err, y->errlen, "%s:%zu:%zu: %s (%s at line %zu)", y->file, m.line + 1,
                 m.column + 1, problem, p->context, p->context_mark.line + 1);
    else
        snprintf(y->err, y->errlen, "%s:%zu:%zu: %s", y->file, m.line + 1, m.column + 1, problem);
}

static cJSON *yscalar(const yaml_event_t *ev)
{
    const char *tag = (const char *)ev->data.scalar.tag, *text = (const char *)ev->data.scalar.value;
    size_t n = ev->data.scalar.length;
    int plain = ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
    int core_tag = tag && strncmp(tag, YAML_TAG, strlen(YAML_TAG)) == 0;
    if (tag && (strcmp(tag, YAML_TAG "str") == 0 || strcmp(tag, "!") == 0))
        return cJSON_CreateString(text);
    if (plain || core_tag)             /* a custom tag (!Ref) does not change the reading */
        return cfg_scalar_infer(text, n, 1);
    return cJSON_CreateString(text);
}

static struct yanchor *yfind_anchor(struct yload *y, const char *name)
{
    for (size_t i = y->nanchors; i-- > 0;)     /* a later anchor of the same name wins */
        if (strcmp(y->anchors[i].name, name) == 0)
            return &y->anchors[i];
    return NULL;
}

static int yadd_anchor(struct yload *y, const yaml_char_t *name, cJSON *node, int open)
{
    if (!name)
        return 0;
    if (y->nanchors == y->capanchors) {
        size_t cap = y->capanchors ? y->capanchors * 2 : 8;
        struct yanchor *a = realloc(y->anchors, cap * sizeof *a);
        if (!a)
            return -1;
        y->anchors = a, y->capanchors = cap;
    }
    char *copy = strdup((const char *)name);
    if (!copy)
        return -1;
    y->anchors[y->nanchors++] = (struct yanchor){copy, node, open};
    return 0;
}

static void yclose_anchors(struct yload *y, const cJSON *node)
{
    for (size_t i = 0; i < y->nanchors; i++)
        if (y->anchors[i].node == node)
            y->anchors[i].open = 0;
}

/* Copies the line of every node of src onto the same place in its copy dst. */
static int copy_lines(struct ptrmap *lines, const cJSON *src, const cJSON *dst)
{
    void *line = ptrmap_get(lines, src);
    if (line)
        ptrmap_put(lines, dst, line);
    for (src = src->child, dst = dst->child; src && dst; src = src->next, dst = dst->next)
        if (copy_lines(lines, src, dst) < 0)
            return -1;
    return 0;
}

static cJSON *yduplicate(struct yload *y, const cJSON *node)
{
    cJSON *copy = cJSON_Duplicate(node, 1);
    if (copy && copy_lines(y->lines, node, copy) < 0) {
        cJSON_Delete(copy);
        return NULL;
    }
    return copy;
}

/* Hangs a new node where the parser is: the document root, a list, a mapping value or
 * a `<<:` merge source.  The node is owned by the tree from here on. */
static int yattach(struct yload *y, cJSON *node, const yaml_mark_t *m)
{
    int line = (int)m->line + 1;
    if (y->depth == 0) {
        if (cJSON_IsNull(node)) {
            cJSON_Delete(node);
            return 1;
        }
        if (!cJSON_IsObject(node)) {
            cJSON_Delete(node);
            return yfail(y, m, "the top level of a config file must be a mapping (key: value)");
        }
        y->root = node;
    } else {
        struct yframe *f = &y->stack[y->depth - 1];
        if (cJSON_IsArray(f->node)) {
            cJSON_AddItemToArray(f->node, node);
        } else if (f->merge_key) {
            if (!f->merges && !(f->merges = cJSON_CreateArray())) {
                cJSON_Delete(node);
                return -1;
            }
            cJSON_AddItemToArray(f->merges, node);
            cJSON_free(f->key);
            f->key = NULL;
            f->merge_key = f->have_key = 0;
            line = f->key_line;        /* the line of `<<`, for ymerge_from's errors */
        } else {
            node->string = f->key;
            f->key = NULL;
            f->have_key = 0;
            line = f->key_line;
            cJSON_AddItemToArray(f->node, node);
        }
    }
    ptrmap_put(y->lines, node, (void *)(intptr_t)line);
    return 0;
}

static int ycount(struct yload *y, size_t n, const yaml_mark_t *m)
{
    y->nodes += n;
    if (y->nodes > CFG_MAX_NODES)
        return yfail(y, m, "too many values (aliases expand to more than %d)", CFG_MAX_NODES);
    return 0;
}

/* A scalar or alias read where a mapping expects its key. */
static int ykey(struct yload *y, const yaml_event_t *ev)
{
    struct yframe *f = &y->stack[y->depth - 1];
    const yaml_mark_t *m = &ev->start_mark;
    char *key = NULL;
    if (ev->type == YAML_SCALAR_EVENT) {
        key = cfg_key_dup((const char *)ev->data.scalar.value, ev->data.scalar.length);
        f->merge_key = ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE && !ev->data.scalar.tag &&
                       strcmp((const char *)ev->data.scalar.value, "<<") == 0;
    } else if (ev->type == YAML_ALIAS_EVENT) {
        struct yanchor *a = yfind_anchor(y, (const char *)ev->data.alias.anchor);
        if (!a || cJSON_IsObject(a->node) || cJSON_IsArray(a->node))
            return yfail(y, m, "an alias used as a key must name a scalar");
        char num[40];
        const char *text = cJSON_IsString(a->node) ? a->node->valuestring
                         : cJSON_IsNumber(a->node) ? cfg_number_text(a->node, num)
                         : cJSON_IsTrue(a->node) ? "true" : cJSON_IsFalse(a->node) ? "false" : "null";
        key = cfg_key_dup(text, strlen(text));
        f->merge_key = 0;
    } else {
        return yfail(y, m, "mapping keys must be scalars, not lists or mappings");
    }
    if (!key)
        return -1;
    f->key = key;
    f->have_key = 1;
    f->key_line = (int)m->line + 1;
    return 0;
}

static int ypush(struct yload *y, cJSON *node, const yaml_event_t *ev, const yaml_char_t *anchor)
{
    if (y->depth >= CFG_MAX_DEPTH) {
        cJSON_Delete(node);
        return yfail(y, &ev->start_mark, "nesting deeper than %d levels", CFG_MAX_DEPTH);
    }
    int rc = yattach(y, node, &ev->start_mark);
    if (rc != 0)
        return rc;
    if (yadd_anchor(y, anchor, node, 1) < 0)
        return -1;
    y->stack[y->depth++] = (struct yframe){.node = node};
    return 0;
}

/* Duplicate keys are an error in YAML (and a trap in JSON, where the last one silently
 * wins elsewhere); report the second with the line of the first. */
struct keyed { const char *key; long line; };

static int keyed_cmp(const void *a, const void *b)
{
    const struct keyed *x = a, *y = b;
    int c = strcmp(x->key, y->key);
    return c ? c : (x->line > y->line) - (x->line < y->line);
}

static int check_dup_keys(const cJSON *obj, const char *file, const struct ptrmap *lines,
                          char *err, size_t errlen)
{
    size_t n = 0, i = 0;
    for (const cJSON *c = obj->child; c; c = c->next)
        n++;
    if (n < 2)
        return 0;
    struct keyed *v = malloc(n * sizeof *v);
    if (!v) {
        snprintf(err, errlen, "%s: out of memory", file);
        return -1;
    }
    for (const cJSON *c = obj->child; c; c = c->next, i++)
        v[i] = (struct keyed){c->string, (long)(intptr_t)ptrmap_get(lines, c)};
    qsort(v, n, sizeof *v, keyed_cmp);
    int rc = 0;
    for (i = 1; i < n && rc == 0; i++)
        if (strcmp(v[i - 1].key, v[i].key) == 0) {
            snprintf(err, errlen, "%s:%ld: duplicate key '%s' (first defined at line %ld)", file,
                     v[i].line, v[i].key, v[i - 1].line);
            rc = -1;
        }
    free(v);
    return rc;
}

/* Merges one `<<:` source into map, at the mapping's end (m).  A source that is no mapping
 * is reported at its own line, that of its `<<` key or of its list entry, not at m. */
static int ymerge_from(struct yload *y, cJSON *map, const cJSON *src, const yaml_mark_t *m)
{
    if (!cJSON_IsObject(src)) {
        long line = (long)(intptr_t)ptrmap_get(y->lines, src);
        if (!line)
            return yfail(y, m, "`<<` merges a mapping or a list of mappings");
        snprintf(y->err, y->errlen, "%s:%ld: `<<` merges a mapping or a list of mappings", y->file, line);
        return -1;
    }
    for (const cJSON *c = src->child; c; c = c->next) {
        if (cJSON_GetObjectItemCaseSensitive(map, c->string))
            continue;                  /* keys written in the mapping win */
        if (ycount(y, cfg_tree_size(c), m) < 0)
            return -1;
        cJSON *copy = yduplicate(y, c);
        if (!copy)
            return -1;
        cJSON_AddItemToArray(map, copy);
    }
    return 0;
}

static int yend(struct yload *y, const yaml_event_t *ev)
{
    struct yframe *f = &y->stack[y->depth - 1];
    int rc = 0;
    if (cJSON_IsObject(f->node)) {
        rc = check_dup_keys(f->node, y->file, y->lines, y->err, y->errlen);
        for (const cJSON *src = f->merges ? f->merges->child : NULL; src && rc == 0; src = src->next) {
            if (!cJSON_IsArray(src))
                rc = ymerge_from(y, f->node, src, &ev->start_mark);
            for (const cJSON *e = cJSON_IsArray(src) ? src->child : NULL; e && rc == 0; e = e->next)
                rc = ymerge_from(y, f->node, e, &ev->start_mark);
        }
    }
    yclose_anchors(y, f->node);
    if (f->merges) {
        if (!y->spent_merges && !(y->spent_merges = cJSON_CreateArray())) {
            cJSON_Delete(f->merges);
            rc = -1;
        } else {
            cJSON_AddItemToArray(y->spent_merges, f->merges);
        }
        f->merges = NULL;
    }
    cJSON_free(f->key);
    f->key = NULL;
    y->depth--;
    return rc;
}

static int yvalue(struct yload *y, const yaml_event_t *ev)
{
    const yaml_mark_t *m = &ev->start_mark;
    cJSON *node;
    int rc;
    if (ycount(y, 1, m) < 0)
        return -1;
    switch (ev->type) {
    case YAML_SCALAR_EVENT:
        if (!(node = yscalar(ev)))
            return -1;
        rc = yattach(y, node, m);
        return rc != 0 ? (rc < 0 ? -1 : 0) : yadd_anchor(y, ev->data.scalar.anchor, node, 0);
    case YAML_ALIAS_EVENT: {
        const char *name = (const char *)ev->data.alias.anchor;
        struct yanchor *a = yfind_anchor(y, name);
        if (!a)
            return yfail(y, m, "undefined alias *%s", name);
        if (a->open)
            return yfail(y, m, "alias *%s refers to a value that contains it", name);
        if (ycount(y, cfg_tree_size(a->node), m) < 0 || !(node = yduplicate(y, a->node)))
            return -1;
        cJSON_free(node->string);      /* the copy takes the key of where it is used */
        node->string = NULL;
        return yattach(y, node, m) < 0 ? -1 : 0;
    }
    case YAML_SEQUENCE_START_EVENT:
        if (!(node = cJSON_CreateArray()))
            return -1;
        return ypush(y, node, ev, ev->data.sequence_start.anchor);
    case YAML_MAPPING_START_EVENT:
        if (!(node = cJSON_CreateObject()))
            return -1;
        return ypush(y, node, ev, ev->data.mapping_start.anchor);
    default:
        return 0;
    }
}

static int yevent(struct yload *y, const yaml_event_t *ev)
{
    struct yframe *f = y->depth ? &y->stack[y->depth - 1] : NULL;
    switch (ev->type) {
    case YAML_DOCUMENT_START_EVENT:
        if (++y->docs > 1)
            return yfail(y, &ev->start_mark, "only one YAML document per file (found a second '---')");
        return 0;
    case YAML_SCALAR_EVENT:
        /* ("\0" in a quoted scalar: a C string would end there, and the
         * value be cut short without a word) */
        if (memchr(ev->data.scalar.value, 0, ev->data.scalar.length))
            return yfail(y, &ev->start_mark, "a string with a NUL byte (\\0), which configuration text cannot hold");
        /* fall through */
    case YAML_ALIAS_EVENT:
    case YAML_SEQUENCE_START_EVENT:
    case YAML_MAPPING_START_EVENT:
        if (f && cJSON_IsObject(f->node) && !f->have_key)
            return ykey(y, ev);
        return yvalue(y, ev);
    case YAML_SEQUENCE_END_EVENT:
    case YAML_MAPPING_END_EVENT:
        return yend(y, ev);
    default:
        return 0;
    }
}

/* Parses one YAML file into a cJSON object (empty for an empty file); lines receives the
 * line of every value (of its key, for mapping values).  text[len] must be '\0'. */
cJSON *cfg_parse_yaml(const char *text, size_t len, const char *file,
                      struct ptrmap *lines, char *err, size_t errlen)
{
    struct yload *y = calloc(1, sizeof *y);
    if (!y || !yaml_parser_initialize(&y->parser)) {
        free(y);
        snprintf(err, errlen, "%s: out of memory", file);
        return NULL;
    }
    yaml_parser_set_input_string(&y->parser, (const unsigned char *)text, len);
    y->text = text, y->file = file, y->lines = lines, y->err = err, y->errlen = errlen;
    err[0] = '\0';
    int rc = 0;
    for (int done = 0; !done && rc == 0;) {
        yaml_event_t ev;
        if (!yaml_parser_parse(&y->parser, &ev)) {
            ysyntax_error(y);
            rc = -1;
            break;
        }
        done = ev.type == YAML_STREAM_END_EVENT;
        rc = yevent(y, &ev);
        yaml_event_delete(&ev);
    }
    if (rc < 0 && !err[0])
        snprintf(err, errlen, "%s: out of memory", file);
    for (; y->depth > 0; y->depth--) {
        cJSON_Delete(y->stack[y->depth - 1].merges);
        cJSON_free(y->stack[y->depth - 1].key);
    }
    for (size_t i = 0; i < y->nanchors; i++)
        free(y->anchors[i].name);
    free(y->anchors);
    cJSON_Delete(y->spent_merges);
    yaml_parser_delete(&y->parser);
    cJSON *root = y->root;
    free(y);
    if (rc < 0) {
        cJSON_Delete(root);
        return NULL;
    }
    if (!root && !(root = cJSON_CreateObject()))
        snprintf(err, errlen, "%s: out of memory", file);
    return root;
}

/* ---- JSON reading ------------------------------------------------------------------- */

/* Walks text that cJSON accepted, in step with the tree, to learn each value's line. */
struct jscan { const char *s; size_t pos, len; long line; struct ptrmap *lines; size_t nul_at; };

static int is_json_ws(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

static void jskip_ws(struct jscan *j)
{
    for (; j->pos < j->len && is_json_ws(j->s[j->pos]); j->pos++)
        j->line += j->s[j->pos] == '\n';
}

/* Past a token; a string's \u0000 (a NUL, which would cut the C string
 * short: "x\u0000y" read as "x") is noted in nul_at, from 1. */
static void jskip_token(struct jscan *j)
{
    if (j->pos < j->len && j->s[j->pos] == '"') {
        for (j->pos++; j->pos < j->len && j->s[j->pos] != '"'; j->pos++) {
            if (j->s[j->pos] == '\\') {
                if (!j->nul_at && j->len - j->pos >= 6 && memcmp(j->s + j->pos + 1, "u0000", 5) == 0)
                    j->nul_at = j->pos + 1;
                j->pos++;
            } else {
                j->line += j->s[j->pos] == '\n';
            }
        }
        j->pos++;
        return;
    }
    while (j->pos < j->len && !is_json_ws(j->s[j->pos]) && !strchr(",]}", j->s[j->pos]))
        j->pos++;
}

/* A JSON integer beyond 2^53 made exact as YAML's are (cfg_integer: its
 * text in valuestring): cJSON reads every number as a double, so
 * 1234567890123456789 in a .json file became 1234567890123456768.  The
 * token is the text at s (n bytes).  -1: out of memory. */
static int exact_json_integer(cJSON *node, const char *s, size_t n)
{
    long long i;
    if (!parse_exact_int(s, n, &i) || (i >= -9007199254740992LL && i <= 9007199254740992LL))
        return 0;
    cJSON *exact = cfg_integer(i);
    if (!exact)
        return -1;
    node->valuestring = exact->valuestring;     /* (cJSON_Delete frees a number's too) */
    node->valuedouble = exact->valuedouble;
    node->valueint = exact->valueint;
    exact->valuestring = NULL;
    cJSON_Delete(exact);
    return 0;
}

static int jscan_value(struct jscan *j, cJSON *node)
{
    jskip_ws(j);
    if (j->pos >= j->len || (j->s[j->pos] != '{' && j->s[j->pos] != '[')) {
        size_t at = j->pos;
        jskip_token(j);
        return cJSON_IsNumber(node) ? exact_json_integer(node, j->s + at, j->pos - at) : 0;
    }
    int object = j->s[j->pos++] == '{';
    for (cJSON *c = node->child; c; c = c->next) {
        jskip_ws(j);
        ptrmap_put(j->lines, c, (void *)(intptr_t)j->line);
        if (object) {
            jskip_token(j);
            jskip_ws(j);
            j->pos++;                  /* ':' */
        }
        if (jscan_value(j, c) < 0)
            return -1;
        jskip_ws(j);
        if (j->pos < j->len && j->s[j->pos] == ',')
            j->pos++;
    }
    jskip_ws(j);
    j->pos++;                          /* '}' or ']' */
    return 0;
}

static int check_dups_tree(const cJSON *node, const char *file, const struct ptrmap *lines,
                           char *err, size_t errlen)
{
    if (cJSON_IsObject(node) && check_dup_keys(node, file, lines, err, errlen) < 0)
        return -1;
    for (const cJSON *c = node->child; c; c = c->next)
        if ((cJSON_IsObject(c) || cJSON_IsArray(c)) && check_dups_tree(c, file, lines, err, errlen) < 0)
            return -1;
    return 0;
}

static cJSON *json_fail(cJSON *root, char *err, size_t errlen, const char *file,
                        const char *text, size_t off, const char *msg)
{
    yaml_mark_t m;
    offset_to_mark(text, off, &m);
    snprintf(err, errlen, "%s:%zu:%zu: %s", file, m.line + 1, m.column + 1, msg);
    cJSON_Delete(root);
    return NULL;
}

/* Parses one JSON file into a cJSON object, like cfg_parse_yaml.  text[len] must be '\0'. */
cJSON *cfg_parse_json(const char *text, size_t len, const char *file,
                      struct ptrmap *lines, char *err, size_t errlen)
{
    size_t start = len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0 ? 3 : 0, i = start;
    while (i < len && is_json_ws(text[i]))
        i++;
    if (i == len)
        return cJSON_CreateObject();
    const char *nul = memchr(text, '\0', len);
    if (nul)
        return json_fail(NULL, err, errlen, file, text, (size_t)(nul - text), "NUL byte in JSON text");
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len + 1, &end, 1);
    if (!root) {
        size_t off = end && end >= text && end <= text + len ? (size_t)(end - text) : 0;
        return json_fail(NULL, err, errlen, file, text, off,
                         off >= len ? "invalid JSON: unexpected end of input"
                                    : "invalid JSON: syntax error at or just before this point");
    }
    if (!cJSON_IsObject(root))
        return json_fail(root, err, errlen, file, text, i, "the top level of a config file must be an object");
    if (cfg_tree_depth(root) > CFG_MAX_DEPTH)
        return json_fail(root, err, errlen, file, text, i, "nesting deeper than 100 levels");
    if (cfg_tree_size(root) > CFG_MAX_NODES)
        return json_fail(root, err, errlen, file, text, i, "too many values");
    struct jscan j = {text, start, len, 1, lines, 0};
    if (jscan_value(&j, root) < 0)
        return json_fail(root, err, errlen, file, text, 0, "out of memory");
    if (j.nul_at)
        return json_fail(root, err, errlen, file, text, j.nul_at - 1, "a NUL character (\\u0000) in a string");
    if (check_dups_tree(root, file, lines, err, errlen) < 0) {
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

/* ---- YAML writing ------------------------------------------------------------------- */

/* libyaml refuses invalid UTF-8, which JSON files, --params and the environment can carry;
 * such bytes become U+FFFD. */
static char *utf8_fix(const char *s)
{
    struct strbuf b = STRBUF_INIT;
    while (*s) {
        size_t n;
        utf8_decode((const unsigned char *)s, 4, &n);    /* (a NUL ends a cut-off sequence) */
        if (n)
            sb_add(&b, s, n);
        else
            sb_add(&b, "\xEF\xBF\xBD", 3);
        s += n ? n : 1;
    }
    sb_add(&b, "", 0);
    return sb_detach(&b);
}

static int emit_scalar(yaml_emitter_t *e, const char *text, int is_string)
{
    yaml_event_t ev;
    int quote = is_string && needs_quotes(text);
    yaml_scalar_style_t style = quote ? YAML_DOUBLE_QUOTED_SCALAR_STYLE
                              : is_string ? YAML_ANY_SCALAR_STYLE : YAML_PLAIN_SCALAR_STYLE;
    char *fixed = NULL;
    if (!yaml_scalar_event_initialize(&ev, NULL, NULL, (yaml_char_t *)text, (int)strlen(text),
                                      !quote, is_string, style)) {
        if (!(fixed = utf8_fix(text)) ||
            !yaml_scalar_event_initialize(&ev, NULL, NULL, (yaml_char_t *)fixed, (int)strlen(fixed),
                                          !quote, is_string, style)) {
            free(fixed);
            return -1;
        }
    }
    free(fixed);                       /* the event holds its own copy */
    return yaml_emitter_emit(e, &ev) ? 0 : -1;
}

static int emit_node(yaml_emitter_t *e, const cJSON *n)
{
    yaml_event_t ev;
    char num[40];
    if (cJSON_IsObject(n) || cJSON_IsArray(n)) {
        int map = cJSON_IsObject(n);
        if (map ? !yaml_mapping_start_event_initialize(&ev, NULL, NULL, 1, YAML_BLOCK_MAPPING_STYLE)
                : !yaml_sequence_start_event_initialize(&ev, NULL, NULL, 1, YAML_BLOCK_SEQUENCE_STYLE))
            return -1;
        if (!yaml_emitter_emit(e, &ev))
            return -1;
        for (const cJSON *c = n->child; c; c = c->next)
            if ((map && emit_scalar(e, c->string ? c->string : "", 1) < 0) || emit_node(e, c) < 0)
                return -1;
        if (map ? !yaml_mapping_end_event_initialize(&ev) : !yaml_sequence_end_event_initialize(&ev))
            return -1;
        return yaml_emitter_emit(e, &ev) ? 0 : -1;
    }
    if (cJSON_IsString(n))
        return emit_scalar(e, n->valuestring, 1);
    if (cJSON_IsNumber(n))
        return emit_scalar(e, cfg_number_text(n, num), 0);
    if (cJSON_IsBool(n))
        return emit_scalar(e, cJSON_IsTrue(n) ? "true" : "false", 0);
    return emit_scalar(e, "null", 0);
}

static int emit_write(void *data, unsigned char *buffer, size_t size)
{
    struct strbuf *b = data;
    sb_add(b, (const char *)buffer, size);
    return 1;
}

/* Block-style YAML for a value; strings that would read back as another type are quoted. */
char *cfg_yaml_emit(const cJSON *node)
{
    yaml_emitter_t e;
    yaml_event_t ev;
    struct strbuf out = STRBUF_INIT;
    if (!yaml_emitter_initialize(&e))
        return NULL;
    yaml_emitter_set_output(&e, emit_write, &out);
    yaml_emitter_set_unicode(&e, 1);
    yaml_emitter_set_width(&e, -1);
    yaml_emitter_set_indent(&e, 2);
    int ok = yaml_stream_start_event_initialize(&ev, YAML_UTF8_ENCODING) && yaml_emitter_emit(&e, &ev) &&
             yaml_document_start_event_initialize(&ev, NULL, NULL, NULL, 1) && yaml_emitter_emit(&e, &ev) &&
             emit_node(&e, node) == 0 &&
             yaml_document_end_event_initialize(&ev, 1) && yaml_emitter_emit(&e, &ev) &&
             yaml_stream_end_event_initialize(&ev) && yaml_emitter_emit(&e, &ev);
    yaml_emitter_delete(&e);
    if (!ok) {
        sb_release(&out);
        return NULL;
    }
    sb_add(&out, "", 0);
    return sb_detach(&out);
}
