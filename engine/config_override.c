/* config_override.c — run-time overrides of the parameters section.
 *
 * Two ways in: the --params text of the command line, parsed here with the same typing as
 * plain YAML scalars, and already-typed cJSON values from the Lua side (flow.run's params
 * table).  Both end in override_set, which walks or creates the dotted path and merges
 * like one more environment on top, with "--params" (or the caller's label) as origin. */
#define FLOW_CONFIG_INTERNAL
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- applying ----------------------------------------------------------------------- */

static const char *type_name(const cJSON *v)
{
    return cJSON_IsObject(v) ? "a mapping" : cJSON_IsArray(v) ? "a list" : cJSON_IsString(v) ? "a string"
         : cJSON_IsNumber(v) ? "a number" : cJSON_IsBool(v) ? "a boolean" : "null";
}

static int valid_key(const char *dotted)
{
    if (!dotted[0] || dotted[0] == '.')
        return 0;
    for (const char *p = dotted; *p; p++)
        if (*p == '.' && (p[1] == '.' || p[1] == '\0'))
            return 0;
    return 1;
}

/* For a path that does not exist yet, "a.b.c" = v becomes "a" = {b: {c: v}}, so that it
 * merges (and records its origins) in one piece.  Frees value on failure. */
static cJSON *wrap_path(cJSON *value, const char *rest, size_t *first_len)
{
    const char *end = rest + strlen(rest), *dot;
    while ((dot = memrchr(rest, '.', (size_t)(end - rest))) != NULL) {
        cJSON *map = cJSON_CreateObject();
        if (!map || !(value->string = cfg_key_dup(dot + 1, (size_t)(end - dot - 1)))) {
            cJSON_Delete(map);
            cJSON_Delete(value);
            return NULL;
        }
        cJSON_AddItemToArray(map, value);
        value = map;
        end = dot;
    }
    *first_len = (size_t)(end - rest);
    return value;
}

/* Sets parameters.<dotted> to value (owned): mappings merge, anything else replaces. */
static int override_set(struct config *cfg, const char *dotted, cJSON *value, const char *origin,
                        char *err, size_t errlen)
{
    struct cfg_source from = {origin, NULL, CFG_LAYER_OVERRIDE, CFG_PARAMETERS};
    struct strbuf path = STRBUF_INIT;
    cJSON *node = cfg->raw[CFG_PARAMETERS], *child;
    const char *rest = dotted ? dotted : "";
    size_t keylen;
    int rc = -1;
    sb_adds(&path, cfg_section_names[CFG_PARAMETERS]);
    if (!*rest) {
        if (cJSON_IsObject(value))
            rc = cfg_merge_object(cfg, &path, node, value, &from, 0, err, errlen);
        else
            cfg_errorf(cfg, err, errlen, "%s: a value without a parameter name must be a mapping", origin);
        goto done;
    }
    if (!valid_key(rest)) {
        cfg_errorf(cfg, err, errlen, "%s: invalid parameter name '%s'", origin, rest);
        goto done;
    }
    size_t segments = 1;
    for (const char *p = rest; *p; p++)
        segments += *p == '.';
    if (segments + cfg_tree_depth(value) > CFG_MAX_DEPTH) {
        cfg_errorf(cfg, err, errlen, "%s: parameter '%.40s...' nests deeper than %d levels", origin,
                   rest, CFG_MAX_DEPTH);
        goto done;
    }
    /* walk the keys that exist (the longest match wins: keys may contain dots) */
    while ((child = cfg_match_key(node, rest, &keylen)) != NULL && rest[keylen] == '.') {
        cfg_path_push(&path, child->string);
        if (!cJSON_IsObject(child)) {
            const char *where = cfg_path_where(cfg, path.buf);
            cfg_errorf(cfg, err, errlen, "%s: cannot set parameter '%s': '%.*s' is %s (set at %s), "
                       "not a mapping", origin, dotted, (int)((size_t)(rest - dotted) + keylen), dotted,
                       type_name(child), where ? where : "?");
            goto done;
        }
        node = child;
        rest += keylen + 1;
    }
    size_t first_len = strlen(rest);
    if (!child && !(value = wrap_path(value, rest, &first_len))) {
        snprintf(err, errlen, "out of memory");
        goto done;
    }
    if (!(value->string = cfg_key_dup(rest, first_len))) {
        snprintf(err, errlen, "out of memory");
        goto done;
    }
    cfg_path_push(&path, value->string);
    rc = cfg_merge_member(cfg, &path, node, value, &from, 0, err, errlen);
    value = NULL;                      /* merge_member took it */
    if (rc < 0 && !err[0])
        snprintf(err, errlen, "out of memory");
done:
    cJSON_Delete(value);
    sb_release(&path);
    return rc;
}

/* Only plain JSON data: no raw text, and mappings whose members all have keys. */
static int plain_data(const cJSON *v, size_t depth)
{
    if (depth > CFG_MAX_DEPTH || cJSON_IsRaw(v) || cJSON_IsInvalid(v))
        return 0;
    for (const cJSON *c = v->child; c; c = c->next)
        if ((cJSON_IsObject(v) && !c->string) || !plain_data(c, depth + 1))
            return 0;
    return 1;
}

int config_override_value_from(struct config *cfg, const char *dotted, const cJSON *value,
                               const char *origin, char *err, size_t errlen)
{
    char scratch[512];
    if (!err || !errlen)
        err = scratch, errlen = sizeof scratch;
    err[0] = '\0';
    origin = origin && *origin ? origin : "--params";
    if (!cfg || !value || !plain_data(value, 0)) {
        snprintf(err, errlen, "%s: %s", origin, !cfg || !value ? "no configuration or value"
                 : "unsupported value (raw JSON, or nested deeper than 100 levels)");
        return -1;
    }
    cJSON *copy = cfg_copy_value(value);
    if (!copy) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    return override_set(cfg, dotted, copy, origin, err, errlen);
}

int config_override_value(struct config *cfg, const char *dotted, const cJSON *value,
                          char *err, size_t errlen)
{
    return config_override_value_from(cfg, dotted, value, NULL, err, errlen);
}

/* ---- parsing --params --------------------------------------------------------------- */

struct spec { const char *text, *p; char *err; size_t errlen; const char *flag; };

static void skip_ws(struct spec *s)
{
    while (*s->p == ' ' || *s->p == '\t')
        s->p++;
}

static cJSON *spec_fail(struct spec *s, const char *msg)
{
    snprintf(s->err, s->errlen, "%s: %s at character %zu of '%s'", s->flag, msg, (size_t)(s->p - s->text) + 1,
             s->text);
    return NULL;
}

/* '...' or "..." : always a string; a backslash escapes the quote or itself. */
static cJSON *parse_quoted(struct spec *s)
{
    char q = *s->p++;
    struct strbuf b = STRBUF_INIT;
    sb_add(&b, "", 0);
    for (; *s->p && *s->p != q; s->p++) {
        if (*s->p == '\\' && (s->p[1] == q || s->p[1] == '\\'))
            s->p++;
        sb_add(&b, s->p, 1);
    }
    if (!*s->p) {
        sb_release(&b);
        return spec_fail(s, "unterminated quoted string");
    }
    s->p++;
    char *str = sb_detach(&b);
    cJSON *v = str ? cJSON_CreateString(str) : NULL;
    free(str);
    return v ? v : spec_fail(s, "out of memory");
}

/* An unquoted value runs to the next separator; it is typed like a plain YAML scalar. */
static cJSON *parse_plain(struct spec *s, const char *stops)
{
    const char *start = s->p;
    while (*s->p && !strchr(stops, *s->p))
        s->p++;
    const char *end = s->p;
    while (end > start && (end[-1] == ' ' || end[-1] == '\t'))
        end--;
    /* 'a=1 b=2' is two overrides written with a space, not a = "1 b=2" */
    const char *space = memchr(start, ' ', (size_t)(end - start));
    if (!space)
        space = memchr(start, '\t', (size_t)(end - start));
    if (space && strcmp(stops, ",") == 0 && memchr(space, '=', (size_t)(end - space))) {
        s->p = space;
        return spec_fail(s, "a space before another key=value: separate overrides with commas "
                            "(a=1,b=2), or quote a value that holds spaces and '='");
    }
    cJSON *v = cfg_scalar_infer(start, (size_t)(end - start), 0);
    return v ? v : spec_fail(s, "out of memory");
}

static cJSON *parse_value(struct spec *s, const char *stops, int depth);

static cJSON *parse_list(struct spec *s, int depth)
{
    cJSON *list = depth > CFG_MAX_DEPTH ? NULL : cJSON_CreateArray();
    if (!list)
        return spec_fail(s, depth > CFG_MAX_DEPTH ? "lists nested too deeply" : "out of memory");
    s->p++;
    skip_ws(s);
    if (*s->p == ']') {
        s->p++;
        return list;
    }
    for (;;) {
        skip_ws(s);
        if (*s->p == ',' || *s->p == ']') {
            cJSON_Delete(list);
            return spec_fail(s, "empty list item");
        }
        cJSON *item = parse_value(s, ",]", depth + 1);
        if (!item) {
            cJSON_Delete(list);
            return NULL;
        }
        cJSON_AddItemToArray(list, item);
        skip_ws(s);
        if (*s->p == ']') {
            s->p++;
            return list;
        }
        if (*s->p != ',') {
            cJSON_Delete(list);
            return spec_fail(s, *s->p ? "expected ',' or ']'" : "unterminated list (missing ']')");
        }
        s->p++;
    }
}

static cJSON *parse_value(struct spec *s, const char *stops, int depth)
{
    skip_ws(s);
    if (*s->p == '"' || *s->p == '\'')
        return parse_quoted(s);
    if (*s->p == '[')
        return parse_list(s, depth);
    return parse_plain(s, stops);
}

cJSON *config_parse_values(const char *text, const char *flag, char *err, size_t errlen)
{
    struct spec s = {text, text, err, errlen, flag};
    cJSON *list = cJSON_CreateArray();
    if (!list)
        return spec_fail(&s, "out of memory");
    for (;;) {
        skip_ws(&s);
        if (*s.p == ',' || !*s.p) {
            cJSON_Delete(list);
            return spec_fail(&s, "an empty value");
        }
        cJSON *v = parse_value(&s, ",", 0);
        if (!v) {
            cJSON_Delete(list);
            return NULL;
        }
        cJSON_AddItemToArray(list, v);
        skip_ws(&s);
        if (!*s.p)
            return list;
        if (*s.p != ',') {
            cJSON_Delete(list);
            return spec_fail(&s, "expected ',' after the value (quote values that contain commas)");
        }
        s.p++;
    }
}

/* key=value; the key runs to '=', trimmed. */
static cJSON *parse_item(struct spec *s)
{
    skip_ws(s);
    const char *key = s->p;
    while (*s->p && *s->p != '=' && *s->p != ',')
        s->p++;
    if (*s->p != '=')
        return spec_fail(s, "expected key=value");
    const char *end = s->p;
    while (end > key && (end[-1] == ' ' || end[-1] == '\t'))
        end--;
    if (end == key)
        return spec_fail(s, "missing parameter name before '='");
    s->p++;
    cJSON *value = parse_value(s, ",", 0);
    if (value && !(value->string = cfg_key_dup(key, (size_t)(end - key)))) {
        cJSON_Delete(value);
        return spec_fail(s, "out of memory");
    }
    skip_ws(s);
    if (value && *s->p && *s->p != ',') {
        cJSON_Delete(value);
        return spec_fail(s, "expected ',' after the value (quote values that contain commas)");
    }
    return value;
}

int config_override_spec(struct config *cfg, const char *spec, char *err, size_t errlen)
{
    char scratch[512];
    if (!err || !errlen)
        err = scratch, errlen = sizeof scratch;
    err[0] = '\0';
    if (!cfg || !spec) {
        snprintf(err, errlen, "--params: no configuration or text");
        return -1;
    }
    /* parse everything first: a typo late in the text must not leave half of it applied */
    struct spec s = {spec, spec, err, errlen, "--params"};
    cJSON *items = cJSON_CreateArray(), *item;
    int rc = items ? 0 : -1;
    for (skip_ws(&s); rc == 0 && *s.p; skip_ws(&s)) {
        if (*s.p == ',') {
            s.p++;
            continue;
        }
        if ((item = parse_item(&s)) == NULL)
            rc = -1;
        else
            cJSON_AddItemToArray(items, item);
    }
    while (rc == 0 && items->child) {
        item = cJSON_DetachItemViaPointer(items, items->child);
        char *key = item->string;      /* override_set gives the value its last segment */
        item->string = NULL;
        rc = override_set(cfg, key, item, "--params", err, errlen);
        cJSON_free(key);
    }
    cJSON_Delete(items);
    if (rc < 0 && !err[0])
        snprintf(err, errlen, "out of memory");
    return rc;
}
