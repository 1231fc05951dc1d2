/* config.c — loading conf/base + conf/<env>, deep merging, origins, lookups, explain,
 * dump, secrets.  Parsing lives in config_yaml.c, ${...} in config_interp.c, --params in
 * config_override.c, masking secrets in text in config_redact.c.
 *
 * Every value's history is kept beside the tree, keyed by its canonical path (section and
 * keys joined by CFG_SEP), so "where was this set, and what did it override?" is answered
 * without decorating cJSON nodes.  Replacing a mapping or list drops the history of what
 * was inside it, since none of that survives. */
#define FLOW_CONFIG_INTERNAL
#include "config.h"
#include "suggest.h"
#include "ui.h"

#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CFG_MAX_FILE_SIZE (64L << 20)
#define CFG_MAX_DIR_DEPTH 8

const char *const cfg_section_names[CFG_NSECTIONS] = {
    "parameters", "catalog", "azureml", "credentials", "globals", "flow"};

static cJSON empty_object = {.type = cJSON_Object};

/* ---- small utilities ---------------------------------------------------------------- */

char *cfg_key_dup(const char *s, size_t n)
{
    char *k = cJSON_malloc(n + 1);
    if (k) {
        memcpy(k, s, n);
        k[n] = '\0';
    }
    return k;
}

int cfg_section_id(const char *name)
{
    if (!name)
        return -1;
    if (strcmp(name, "params") == 0)
        return CFG_PARAMETERS;
    for (int i = 0; i < CFG_NSECTIONS; i++)
        if (strcmp(name, cfg_section_names[i]) == 0)
            return i;
    return -1;
}

const char *config_section_name(size_t i) { return i < CFG_NSECTIONS ? cfg_section_names[i] : NULL; }

cJSON *cfg_copy_value(const cJSON *v)
{
    cJSON *copy = cJSON_Duplicate(v, 1);
    if (copy && copy->string) {
        if (!(copy->type & cJSON_StringIsConst))
            cJSON_free(copy->string);
        copy->string = NULL;
        copy->type &= ~cJSON_StringIsConst;
    }
    return copy;
}

size_t cfg_tree_depth(const cJSON *node)
{
    size_t deepest = 0;
    for (const cJSON *c = node->child; c; c = c->next) {
        size_t d = cfg_tree_depth(c);
        deepest = d > deepest ? d : deepest;
    }
    return (cJSON_IsObject(node) || cJSON_IsArray(node)) + deepest;
}

size_t cfg_tree_size(const cJSON *node)
{
    size_t n = 1;
    for (const cJSON *c = node->child; c; c = c->next)
        n += cfg_tree_size(c);
    return n;
}

/* ---- secrets and errors ------------------------------------------------------------- */

void cfg_add_secret(struct config *cfg, const char *s)
{
    if (!s || strlen(s) < CFG_SECRET_MIN)
        return;
    for (size_t i = 0; i < cfg->nsecrets; i++)
        if (strcmp(cfg->secrets[i], s) == 0)
            return;
    char *copy = xstrdup(s);
    ui_redactor_change();                  /* (the redactor may be reading the list on another thread: ui.h) */
    ARRAY_GROW(cfg->secrets, cfg->nsecrets, cfg->capsecrets);
    cfg->secrets[cfg->nsecrets++] = copy;
    ui_redactor_unlock();
}

void config_add_secret(struct config *cfg, const char *text) { cfg_add_secret(cfg, text); }

bool config_has_secrets(const struct config *cfg)
{
    return cfg && cfg->nsecrets > 0;
}

/* Formats an error, then masks secrets before it leaves the module (a second line of
 * defence: messages are written never to quote values in the first place). */
void cfg_errorf(const struct config *cfg, char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || !errlen)
        return;
    struct strbuf msg = STRBUF_INIT;
    va_list ap;
    va_start(ap, fmt);
    sb_vaddf(&msg, fmt, ap);
    va_end(ap);
    char *safe = config_redact(cfg, msg.buf ? msg.buf : "");
    snprintf(err, errlen, "%s", safe);
    free(safe);
    sb_release(&msg);
}

static int oom(char *err, size_t errlen)
{
    snprintf(err, errlen, "out of memory");
    return -1;
}

/* ---- paths -------------------------------------------------------------------------- */

void cfg_path_push(struct strbuf *path, const char *seg)
{
    char sep = CFG_SEP;
    sb_add(path, &sep, 1);
    sb_adds(path, seg);
}

void cfg_path_push_index(struct strbuf *path, size_t i) { sb_addf(path, "%c%zu", CFG_SEP, i); }

/* "parameters\x1fmodel\x1flr" -> "model.lr", appended to out */
void cfg_path_display(const char *path, struct strbuf *out)
{
    const char *p = strchr(path, CFG_SEP);
    sb_add(out, "", 0);
    for (int first = 1; p; p = strchr(p + 1, CFG_SEP), first = 0) {
        const char *end = strchr(p + 1, CFG_SEP);
        if (!first)
            sb_add(out, ".", 1);
        sb_add(out, p + 1, end ? (size_t)(end - p - 1) : strlen(p + 1));
    }
}

/* The mapping key that `rest` starts with, followed by '.' or its end; the longest such
 * key wins so that keys containing dots stay reachable. */
cJSON *cfg_match_key(const cJSON *obj, const char *rest, size_t *keylen)
{
    cJSON *best = NULL;
    size_t best_len = 0;
    for (cJSON *c = obj->child; c; c = c->next) {
        if (!c->string)
            continue;
        size_t n = strlen(c->string);
        if (strncmp(rest, c->string, n) == 0 && (rest[n] == '\0' || rest[n] == '.') &&
            (!best || n > best_len))
            best = c, best_len = n;
    }
    *keylen = best_len;
    return best;
}

/* One step of a dotted walk: a mapping key or a list index.  Advances *rest. */
const cJSON *cfg_step(const cJSON *node, const char **rest, struct strbuf *path)
{
    const char *r = *rest;
    const cJSON *child = NULL;
    size_t n = 0;
    if (cJSON_IsObject(node)) {
        child = cfg_match_key(node, r, &n);
        if (child && path)
            cfg_path_push(path, child->string);
    } else if (cJSON_IsArray(node)) {
        while (r[n] >= '0' && r[n] <= '9')
            n++;
        if (n == 0 || n > 9 || (r[n] && r[n] != '.'))
            return NULL;
        long i = strtol(r, NULL, 10);
        child = cJSON_GetArrayItem(node, (int)i);
        if (child && path)
            cfg_path_push_index(path, (size_t)i);
    }
    if (!child || (r[n] == '.' && r[n + 1] == '\0'))
        return NULL;
    *rest = r + n + (r[n] == '.');
    return child;
}

const cJSON *cfg_walk(const cJSON *root, const char *dotted, struct strbuf *path)
{
    const char *rest = dotted ? dotted : "";
    while (root && *rest)
        root = cfg_step(root, &rest, path);
    return root;
}

static const cJSON *current_tree(const struct config *cfg, int sec)
{
    if (!cfg || sec < 0)
        return &empty_object;
    return cfg->res[sec] ? cfg->res[sec] : cfg->raw[sec];
}

/* ---- origins ------------------------------------------------------------------------ */

static struct cfg_origin_entry *origins_find(const struct cfg_origins *o, const char *path)
{
    size_t i;
    return strmap_get(&o->index, path, &i) ? o->v[i] : NULL;
}

static struct cfg_origin_entry *origins_get(struct cfg_origins *o, const char *path)
{
    struct cfg_origin_entry *e = origins_find(o, path);
    if (!e) {
        e = xcalloc(1, sizeof *e);
        e->path = xstrdup(path);
        ARRAY_GROW(o->v, o->n, o->cap);
        strmap_put(&o->index, path, o->n);
        o->v[o->n++] = e;
    }
    return e;
}

/* Takes ownership of where and text. */
static void origin_add(struct config *cfg, const char *path, char *where, char *text, enum cfg_layer layer,
                       bool raw)
{
    struct cfg_origin_entry *e = origins_get(&cfg->origins, path);
    ARRAY_GROW(e->v, e->n, e->cap);
    e->v[e->n++] = (struct cfg_origin){where, text, layer, raw};
}

static void origin_entry_clear(struct cfg_origin_entry *e)
{
    for (size_t i = 0; i < e->n; i++) {
        free(e->v[i].where);
        free(e->v[i].text);
    }
    e->n = 0;
}

static void origins_clear_below(struct cfg_origins *o, const char *path)
{
    size_t n = strlen(path);
    for (size_t i = 0; i < o->n; i++)
        if (strncmp(o->v[i]->path, path, n) == 0 && o->v[i]->path[n] == CFG_SEP)
            origin_entry_clear(o->v[i]);
}

static void origins_free(struct cfg_origins *o)
{
    for (size_t i = 0; i < o->n; i++) {
        origin_entry_clear(o->v[i]);
        free(o->v[i]->v);
        free(o->v[i]->path);
        free(o->v[i]);
    }
    free(o->v);
    strmap_free(&o->index);
    *o = (struct cfg_origins){0};
}

/* The entry with records nearest to path: itself, else the closest ancestor. */
static const struct cfg_origin_entry *origin_nearest(const struct config *cfg, const char *path)
{
    struct strbuf p = STRBUF_INIT;
    const struct cfg_origin_entry *e = NULL;
    sb_adds(&p, path);
    for (;;) {
        e = origins_find(&cfg->origins, p.buf);
        if (e && e->n)
            break;
        e = NULL;
        char *sep = strrchr(p.buf, CFG_SEP);
        if (!sep)
            break;
        sb_truncate(&p, (size_t)(sep - p.buf));
    }
    sb_release(&p);
    return e;
}

const char *cfg_path_where(const struct config *cfg, const char *path)
{
    const struct cfg_origin_entry *e = origin_nearest(cfg, path);
    return e ? e->v[e->n - 1].where : NULL;
}

/* s quoted on one line, at most max bytes of it: masked first (cfg's secrets,
 * when cfg is given), then escaped and cut, so that neither hides a secret. */
static void quote_into(struct strbuf *b, const struct config *cfg, const char *s, size_t max)
{
    char *safe = cfg ? config_redact(cfg, s) : xstrdup(s);
    size_t len = strlen(safe);
    sb_add(b, "\"", 1);
    for (size_t i = 0; i < len && i < max; i++) {
        unsigned char c = (unsigned char)safe[i];
        if (c == '"' || c == '\\')
            sb_addf(b, "\\%c", c);
        else if (c < 0x20)
            sb_adds(b, c == '\n' ? "\\n" : c == '\t' ? "\\t" : "?");
        else
            sb_add(b, (const char *)&c, 1);
    }
    sb_adds(b, len > max ? "...\"" : "\"");
    free(safe);
}

/* A one-line picture of a value for explain; secrets show as *** (a section
 * of credentials), and within a string cfg's secrets are masked. */
static char *value_text(const struct config *cfg, const cJSON *n, int secret, size_t max)
{
    struct strbuf b = STRBUF_INIT;
    char num[40];
    if (cJSON_IsObject(n))
        sb_adds(&b, n->child ? "{mapping}" : "{}");
    else if (cJSON_IsArray(n) && !n->child)
        sb_adds(&b, "[]");
    else if (cJSON_IsArray(n))
        sb_addf(&b, "[list of %d]", cJSON_GetArraySize(n));
    else if (secret && (cJSON_IsString(n) || cJSON_IsNumber(n)))
        sb_adds(&b, "***");
    else if (cJSON_IsString(n))
        quote_into(&b, cfg, n->valuestring, max);
    else if (cJSON_IsNumber(n))
        sb_adds(&b, cfg_number_text(n, num));
    else
        sb_adds(&b, cJSON_IsTrue(n) ? "true" : cJSON_IsFalse(n) ? "false" : "null");
    return sb_detach(&b);
}

static char *where_of(const struct cfg_source *from, const cJSON *node)
{
    long line = from->lines ? (long)(intptr_t)ptrmap_get(from->lines, node) : 0;
    return line > 0 ? xasprintf("%s:%ld", from->file, line) : xstrdup(from->file);
}

/* Records node and everything inside it as set by `from`. */
static void record_tree(struct config *cfg, struct strbuf *path, const cJSON *node,
                        const struct cfg_source *from)
{
    int secret = from->section == CFG_CREDENTIALS;
    /* (a string is kept as it is, quoted when shown: the secrets are not all
     * known while the files are read) */
    bool raw = !secret && cJSON_IsString(node);
    origin_add(cfg, path->buf, where_of(from, node), raw ? xstrdup(node->valuestring) : value_text(NULL, node, secret, 60),
               from->layer, raw);
    size_t mark = path->len, i = 0;
    for (const cJSON *c = node->child; c; c = c->next, i++) {
        if (cJSON_IsObject(node))
            cfg_path_push(path, c->string);
        else
            cfg_path_push_index(path, i);
        record_tree(cfg, path, c, from);
        sb_truncate(path, mark);
    }
}

/* ---- merging ------------------------------------------------------------------------ */

static const char *layer_name(const struct config *cfg, enum cfg_layer layer)
{
    return layer == CFG_LAYER_BASE ? "base" : layer == CFG_LAYER_ENV ? cfg->env : "--params";
}

/* Within one environment a top-level key lives in one file: two files defining it is
 * almost always a copy-paste accident, and "later file wins" would hide it. */
static int check_top_level(struct config *cfg, const struct strbuf *path, const cJSON *item,
                           const struct cfg_source *from, char *err, size_t errlen)
{
    const struct cfg_origin_entry *e = origins_find(&cfg->origins, path->buf);
    if (!e || !e->n || e->v[e->n - 1].layer != from->layer)
        return 0;
    char *w = where_of(from, item);
    cfg_errorf(cfg, err, errlen,
               "%s: %s key '%s' is already defined in %s; within one environment (%s) a "
               "top-level key may appear in only one file", w ? w : from->file,
               cfg_section_names[from->section], item->string, e->v[e->n - 1].where,
               layer_name(cfg, from->layer));
    free(w);
    return -1;
}

/* Puts item (a detached member, keyed) into the mapping dst: mappings merge deeply,
 * anything else replaces.  Takes ownership of item.  path names item. */
int cfg_merge_member(struct config *cfg, struct strbuf *path, cJSON *dst, cJSON *item,
                     const struct cfg_source *from, int top, char *err, size_t errlen)
{
    cJSON *old = cJSON_GetObjectItemCaseSensitive(dst, item->string);
    if (top && from->layer != CFG_LAYER_OVERRIDE && check_top_level(cfg, path, item, from, err, errlen) < 0) {
        cJSON_Delete(item);
        return -1;
    }
    if (cJSON_IsObject(old) && cJSON_IsObject(item)) {
        origin_add(cfg, path->buf, where_of(from, item), xstrdup("{mapping}"), from->layer, false);
        int rc = cfg_merge_object(cfg, path, old, item, from, 0, err, errlen);
        cJSON_Delete(item);
        return rc;
    }
    if (old) {
        if (old->child)
            origins_clear_below(&cfg->origins, path->buf);
        cJSON_ReplaceItemViaPointer(dst, old, item);
    } else {
        cJSON_AddItemToArray(dst, item);   /* keeps item->string as the key */
    }
    record_tree(cfg, path, item, from);
    return 0;
}

/* Moves every member of src into dst (both mappings); src ends up empty. */
int cfg_merge_object(struct config *cfg, struct strbuf *path, cJSON *dst, cJSON *src,
                     const struct cfg_source *from, int top, char *err, size_t errlen)
{
    cJSON *item;
    while ((item = src->child) != NULL) {
        cJSON_DetachItemViaPointer(src, item);
        size_t mark = path->len;
        cfg_path_push(path, item->string);
        int rc = cfg_merge_member(cfg, path, dst, item, from, top, err, errlen);
        sb_truncate(path, mark);
        if (rc < 0)
            return -1;
    }
    return 0;
}

/* ---- files -------------------------------------------------------------------------- */

struct cfg_file { char *rel; int section; };
struct cfg_files { struct cfg_file *v; size_t n, cap; };

static int section_of(const char *name)
{
    for (int i = 0; i < CFG_NSECTIONS; i++)
        if (strncmp(name, cfg_section_names[i], strlen(cfg_section_names[i])) == 0)
            return i;
    return -1;
}

/* 1 for YAML, 2 for JSON, 0 for anything else. */
static int config_ext(const char *name)
{
    const char *dot = strrchr(name, '.');
    if (!dot)
        return 0;
    return strcmp(dot, ".yml") == 0 || strcmp(dot, ".yaml") == 0 ? 1 : strcmp(dot, ".json") == 0 ? 2 : 0;
}

static void add_file(struct cfg_files *files, char *rel, int section)
{
    ARRAY_GROW(files->v, files->n, files->cap);
    files->v[files->n++] = (struct cfg_file){rel, section};
}

static void files_free(struct cfg_files *files)
{
    for (size_t i = 0; i < files->n; i++)
        free(files->v[i].rel);
    free(files->v);
}

static char *join(const char *a, const char *b) { return xasprintf("%s/%s", a, b); }

static void warn_unmatched(struct config *cfg, const char *full)
{
    ARRAY_GROW(cfg->warnings, cfg->nwarnings, cfg->capwarnings);
    cfg->warnings[cfg->nwarnings++] = xasprintf("%s: ignored: config file names start with "
        "parameters, catalog, azureml, credentials, globals or flow", full);
}

/* Directories nest at most CFG_MAX_DIR_DEPTH deep below an environment (stat follows
 * links, so a link to a parent would otherwise recurse forever); what lies deeper is
 * named, never dropped in silence. */
static void warn_too_deep(struct config *cfg, const char *full)
{
    ARRAY_GROW(cfg->warnings, cfg->nwarnings, cfg->capwarnings);
    cfg->warnings[cfg->nwarnings++] = xasprintf("%s: ignored: directories more than %d deep below an "
        "environment are not read (nothing in it is loaded)", full, CFG_MAX_DIR_DEPTH);
}

static const char *file_kind(mode_t mode)
{
    return S_ISFIFO(mode) ? "a FIFO" : S_ISCHR(mode) ? "a character device" : S_ISBLK(mode) ? "a block device"
         : S_ISSOCK(mode) ? "a socket" : "something else";
}

/* The error for an entry named like a config file that cannot be read as one: a dangling
 * or looping link, a FIFO, a device (stat gave `stat_errno`, or `st`).  Skipping it would
 * surface later as "parameter 'x' is not defined", never naming the file.  Decided from
 * stat alone: opening a FIFO would block until something writes to it. */
static int bad_entry(struct config *cfg, const char *full, int stat_errno, const struct stat *st,
                     char *err, size_t errlen)
{
    struct stat lst;
    char target[1024] = "";
    if (lstat(full, &lst) == 0 && S_ISLNK(lst.st_mode)) {
        ssize_t n = readlink(full, target, sizeof target - 1);
        target[n > 0 ? n : 0] = '\0';
    }
    if (stat_errno == ENOENT && *target)
        cfg_errorf(cfg, err, errlen, "%s: a symbolic link to '%s', which does not exist", full, target);
    else if (stat_errno)
        cfg_errorf(cfg, err, errlen, "%s: cannot read: %s", full, strerror(stat_errno));
    else if (*target)
        cfg_errorf(cfg, err, errlen, "%s: not a regular file: a symbolic link to '%s', which is %s", full,
                   target, file_kind(st->st_mode));
    else
        cfg_errorf(cfg, err, errlen, "%s: not a regular file but %s", full, file_kind(st->st_mode));
    return -1;
}

/* Collects config files under envdir/rel.  A file's name prefix picks its section, except
 * inside a directory named like a section (parameters/, catalog_extra/), where every
 * config file belongs to that section, recursively.  A config file whose name picks no
 * section is reported at any depth (conf/prod/overrides/model.yml), never skipped quietly. */
static int scan_dir(struct config *cfg, const char *envdir, const char *rel, int section, int depth,
                    struct cfg_files *out, char *err, size_t errlen)
{
    char *dirpath = rel ? join(envdir, rel) : xstrdup(envdir);
    DIR *d = opendir(dirpath);
    if (!d) {
        cfg_errorf(cfg, err, errlen, "%s: cannot read directory: %s", dirpath, strerror(errno));
        free(dirpath);
        return -1;
    }
    int rc = 0;
    for (struct dirent *de; rc == 0 && (de = readdir(d)) != NULL;) {
        if (de->d_name[0] == '.')
            continue;
        char *child_rel = rel ? join(rel, de->d_name) : xstrdup(de->d_name);
        char *full = join(envdir, child_rel);
        struct stat st;
        int sec = section >= 0 ? section : section_of(de->d_name);
        bool named_config = config_ext(de->d_name) && sec >= 0;
        if (stat(full, &st) != 0)
            rc = named_config ? bad_entry(cfg, full, errno, NULL, err, errlen) : 0;
        else if (S_ISDIR(st.st_mode) && depth < CFG_MAX_DIR_DEPTH)
            rc = scan_dir(cfg, envdir, child_rel, sec, depth + 1, out, err, errlen);
        else if (S_ISDIR(st.st_mode))
            warn_too_deep(cfg, full);
        else if (S_ISREG(st.st_mode) && named_config) {
            add_file(out, child_rel, sec);
            child_rel = NULL;
        } else if (named_config && !S_ISDIR(st.st_mode)) {
            rc = bad_entry(cfg, full, 0, &st, err, errlen);
        } else if (S_ISREG(st.st_mode) && config_ext(de->d_name)) {
            warn_unmatched(cfg, full);
        }
        free(child_rel);
        free(full);
    }
    closedir(d);
    free(dirpath);
    return rc;
}

static int file_cmp(const void *a, const void *b)
{
    return strcmp(((const struct cfg_file *)a)->rel, ((const struct cfg_file *)b)->rel);
}

static char *read_config_file(const char *path, size_t *len, const char *display,
                              char *err, size_t errlen)
{
    char *text = read_file_max(path, CFG_MAX_FILE_SIZE, len);
    if (!text && errno == EFBIG)
        snprintf(err, errlen, "%s: file larger than 64 MiB", display);
    else if (!text)
        snprintf(err, errlen, "%s: cannot open: %s", display, strerror(errno));
    return text;
}

static int load_file(struct config *cfg, const char *envdir, const char *envname,
                     const struct cfg_file *file, enum cfg_layer layer, char *err, size_t errlen)
{
    char *full = join(envdir, file->rel), *text = NULL;
    char *display = xasprintf("%s/%s/%s", cfg->dir, envname, file->rel);
    size_t len = 0;
    struct ptrmap lines = {0};
    struct strbuf path = STRBUF_INIT;
    cJSON *root = NULL;
    int rc = -1;
    if (!(text = read_config_file(full, &len, display, err, errlen)))
        goto done;
    root = config_ext(file->rel) == 2 ? cfg_parse_json(text, len, display, &lines, err, errlen)
                                      : cfg_parse_yaml(text, len, display, &lines, err, errlen);
    if (!root)
        goto done;
    struct cfg_source from = {display, &lines, layer, (enum cfg_section)file->section};
    sb_adds(&path, cfg_section_names[file->section]);
    rc = cfg_merge_object(cfg, &path, cfg->raw[file->section], root, &from, 1, err, errlen);
done:
    cJSON_Delete(root);
    ptrmap_free(&lines);
    sb_release(&path);
    free(text);
    free(display);
    free(full);
    return rc;
}

static int load_env(struct config *cfg, const char *envname, enum cfg_layer layer, char *err, size_t errlen)
{
    struct cfg_files files = {0};
    struct stat st;
    char *envdir = join(cfg->dir, envname);
    int rc = 0;
    if (stat(envdir, &st) != 0 && errno == ENOENT && layer == CFG_LAYER_BASE) {
        free(envdir);                  /* no conf/base: an empty base */
        return 0;
    }
    rc = scan_dir(cfg, envdir, NULL, -1, 0, &files, err, errlen);
    if (rc == 0 && files.n > 1)
        qsort(files.v, files.n, sizeof *files.v, file_cmp);
    for (size_t i = 0; rc == 0 && i < files.n; i++)
        rc = load_file(cfg, envdir, envname, &files.v[i], layer, err, errlen);
    files_free(&files);
    free(envdir);
    return rc;
}

/* ---- environments ------------------------------------------------------------------- */

static int str_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int is_subdir(const char *dir, const char *name)
{
    struct stat st;
    char *full = join(dir, name);
    int yes = stat(full, &st) == 0 && S_ISDIR(st.st_mode);
    free(full);
    return yes;
}

char **config_list_envs(const char *conf_dir, size_t *n)
{
    size_t count = 0, cap = 8;
    char **v = xcalloc(cap, sizeof *v);
    DIR *d = conf_dir ? opendir(conf_dir) : NULL;
    struct dirent *de;
    while (d && (de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.' || !is_subdir(conf_dir, de->d_name))
            continue;
        if (count + 1 == cap) {
            v = xrealloc(v, cap * 2 * sizeof *v);
            cap *= 2;
        }
        v[count] = xstrdup(de->d_name);
        v[++count] = NULL;
    }
    if (d)
        closedir(d);
    qsort(v, count, sizeof *v, str_cmp);
    if (n)
        *n = count;
    return v;
}

void config_list_free(char **list)
{
    for (char **p = list; p && *p; p++)
        free(*p);
    free(list);
}

static int env_missing(const struct config *cfg, const char *env, char *err, size_t errlen)
{
    size_t n = 0, best_d = SIZE_MAX;
    char **envs = config_list_envs(cfg->dir, &n);
    const char *best = NULL;
    struct strbuf list = STRBUF_INIT;
    sb_add(&list, "", 0);
    for (size_t i = 0; i < n; i++) {
        size_t d = edit_distance(env, envs[i]);
        sb_addf(&list, "%s%s", i ? ", " : "", envs[i]);
        if (d < best_d)
            best_d = d, best = envs[i];
    }
    if (n == 0)
        cfg_errorf(cfg, err, errlen, "environment '%s' not found: %s/%s does not exist, and %s "
                   "has no environments", env, cfg->dir, env, cfg->dir);
    else
        cfg_errorf(cfg, err, errlen, "environment '%s' not found: %s/%s does not exist "
                   "(environments: %s)%s%s%s", env, cfg->dir, env, list.buf,
                   best && near_enough(env, best_d) ? "; did you mean '" : "",
                   best && near_enough(env, best_d) ? best : "",
                   best && near_enough(env, best_d) ? "'?" : "");
    sb_release(&list);
    config_list_free(envs);
    return -1;
}

static int check_env(struct config *cfg, const char *env, char *err, size_t errlen)
{
    struct stat st;
    if (strchr(env, '/') || env[0] == '.') {
        cfg_errorf(cfg, err, errlen, "invalid environment name '%s': it names a directory in %s",
                   env, cfg->dir);
        return -1;
    }
    char *envdir = join(cfg->dir, env);
    int found = stat(envdir, &st) == 0 && S_ISDIR(st.st_mode);
    free(envdir);
    return found ? 0 : env_missing(cfg, env, err, errlen);
}

/* ---- load and free ------------------------------------------------------------------ */

static void collect_secrets(struct config *cfg, const cJSON *node)
{
    if (cJSON_IsString(node) && !strstr(node->valuestring, "${"))
        cfg_add_secret(cfg, node->valuestring);
    for (const cJSON *c = node->child; c; c = c->next)
        collect_secrets(cfg, c);
}

struct config *config_load(const char *conf_dir, const char *env, char *err, size_t errlen)
{
    char scratch[512];
    if (!err || !errlen)
        err = scratch, errlen = sizeof scratch;
    err[0] = '\0';
    struct config *cfg = xcalloc(1, sizeof *cfg);
    cfg->dir = xstrdup(conf_dir && *conf_dir ? conf_dir : "conf");
    for (size_t n = strlen(cfg->dir); n > 1 && cfg->dir[n - 1] == '/'; n--)
        cfg->dir[n - 1] = '\0';
    int rc = 0;
    for (int i = 0; i < CFG_NSECTIONS; i++)
        if (!(cfg->raw[i] = cJSON_CreateObject()))
            rc = oom(err, errlen);
    if (rc == 0 && env && *env && strcmp(env, "base") != 0) {
        rc = check_env(cfg, env, err, errlen);
        if (rc == 0)
            cfg->env = xstrdup(env);
    }
    if (rc == 0)
        rc = load_env(cfg, "base", CFG_LAYER_BASE, err, errlen);
    if (rc == 0 && cfg->env)
        rc = load_env(cfg, cfg->env, CFG_LAYER_ENV, err, errlen);
    if (rc == 0)
        collect_secrets(cfg, cfg->raw[CFG_CREDENTIALS]);
    if (rc < 0) {
        config_free(cfg);
        return NULL;
    }
    return cfg;
}

void config_free(struct config *cfg)
{
    if (!cfg)
        return;
    for (int i = 0; i < CFG_NSECTIONS; i++) {
        cJSON_Delete(cfg->raw[i]);
        cJSON_Delete(cfg->res[i]);
    }
    origins_free(&cfg->origins);
    for (size_t i = 0; i < cfg->nsecrets; i++)
        free(cfg->secrets[i]);
    for (size_t i = 0; i < cfg->nwarnings; i++)
        free(cfg->warnings[i]);
    free(cfg->secrets);
    free(cfg->warnings);
    free(cfg->dir);
    free(cfg->env);
    free(cfg);
}

const char *config_env(const struct config *cfg) { return cfg && cfg->env ? cfg->env : "base"; }
const char *config_dir(const struct config *cfg) { return cfg ? cfg->dir : NULL; }

const char *const *config_warnings(const struct config *cfg, size_t *n)
{
    if (n)
        *n = cfg ? cfg->nwarnings : 0;
    return cfg ? (const char *const *)cfg->warnings : NULL;
}

/* ---- lookups ------------------------------------------------------------------------ */

const cJSON *config_section(const struct config *cfg, const char *section)
{
    return current_tree(cfg, cfg_section_id(section));
}

const cJSON *config_get(const struct config *cfg, const char *section, const char *dotted)
{
    int sec = cfg_section_id(section);
    return cfg && sec >= 0 ? cfg_walk(current_tree(cfg, sec), dotted, NULL) : NULL;
}

/* The canonical path of a dotted key, found in the current tree or else the raw one. */
static const cJSON *find_path(const struct config *cfg, int sec, const char *dotted, struct strbuf *path)
{
    sb_adds(path, cfg_section_names[sec]);
    const cJSON *node = cfg_walk(current_tree(cfg, sec), dotted, path);
    if (!node && cfg->res[sec]) {
        sb_truncate(path, strlen(cfg_section_names[sec]));
        node = cfg_walk(cfg->raw[sec], dotted, path);
    }
    return node;
}

const char *config_origin(const struct config *cfg, const char *section, const char *dotted)
{
    int sec = cfg_section_id(section);
    struct strbuf path = STRBUF_INIT;
    const char *where = NULL;
    if (cfg && sec >= 0 && find_path(cfg, sec, dotted, &path))
        where = cfg_path_where(cfg, path.buf);
    sb_release(&path);
    return where;
}

static void closest_in(const cJSON *node, struct strbuf *prefix, const char *query,
                       char **best, size_t *best_d)
{
    if (!cJSON_IsObject(node))
        return;
    for (const cJSON *c = node->child; c; c = c->next) {
        size_t mark = prefix->len;
        if (mark)
            sb_add(prefix, ".", 1);
        sb_adds(prefix, c->string);
        size_t d = edit_distance(query, prefix->buf);
        if (d < *best_d) {
            free(*best);
            *best = xstrdup(prefix->buf), *best_d = d;
        }
        closest_in(c, prefix, query, best, best_d);
        sb_truncate(prefix, mark);
    }
}

char *config_closest_key(const struct config *cfg, const char *section, const char *dotted)
{
    int sec = cfg_section_id(section);
    char *best = NULL;
    size_t best_d = SIZE_MAX;
    struct strbuf prefix = STRBUF_INIT;
    if (!cfg || sec < 0 || !dotted)
        return NULL;
    closest_in(current_tree(cfg, sec), &prefix, dotted, &best, &best_d);
    sb_release(&prefix);
    if (best && !near_enough(dotted, best_d)) {
        free(best);
        best = NULL;
    }
    return best;
}

/* ---- explain ------------------------------------------------------------------------ */

/* Mappings from several files merge, so no single one "wins"; anything else is replaced
 * wholesale by the last one. */
static void explain_records(const struct config *cfg, struct strbuf *b,
                            const struct cfg_origin_entry *e)
{
    int mapping = e->n > 1 && !e->v[e->n - 1].raw && strcmp(e->v[e->n - 1].text, "{mapping}") == 0;
    int width = 0;
    for (size_t i = 0; i < e->n; i++) {
        int w = (int)strlen(e->v[i].where);
        width = w > width ? w : width;
    }
    for (size_t i = 0; i < e->n; i++) {
        const struct cfg_origin *o = &e->v[i];
        char label[96];
        snprintf(label, sizeof label, "%s%s", o->layer == CFG_LAYER_ENV ? "env " : "",
                 o->layer == CFG_LAYER_OVERRIDE ? "override" : layer_name(cfg, o->layer));
        struct strbuf shown = STRBUF_INIT;
        if (o->raw) quote_into(&shown, cfg, o->text, 60);
        sb_addf(b, "  %-*s  %-12s  %s%s\n", width, o->where, label, o->raw ? shown.buf : o->text,
                i + 1 == e->n && !mapping ? "   <- wins" : "");
        sb_release(&shown);
    }
    if (mapping && e->n > 1)
        sb_adds(b, "  (mappings merge: each file above contributes its keys, later ones win)\n");
}

char *config_explain(const struct config *cfg, const char *section, const char *dotted)
{
    int sec = cfg_section_id(section);
    struct strbuf b = STRBUF_INIT, path = STRBUF_INIT, shown = STRBUF_INIT;
    const char *key = dotted && *dotted ? dotted : "(section)";
    const cJSON *node = cfg && sec >= 0 ? find_path(cfg, sec, dotted, &path) : NULL;
    if (!cfg || sec < 0) {
        sb_addf(&b, "unknown config section '%s' (sections: parameters, catalog, azureml, "
                "credentials, globals, flow)\n", section ? section : "(null)");
    } else if (!node) {
        char *near = config_closest_key(cfg, section, dotted);
        sb_addf(&b, "%s: %s is not set%s%s%s\n", cfg_section_names[sec], key,
                near ? "; did you mean '" : "", near ? near : "", near ? "'?" : "");
        free(near);
    } else {
        char *val = value_text(cfg, node, sec == CFG_CREDENTIALS, 200);
        const struct cfg_origin_entry *e = origin_nearest(cfg, path.buf);
        sb_addf(&b, "%s: %s = %s\n", cfg_section_names[sec], key, val ? val : "?");
        free(val);
        if (e && strcmp(e->path, path.buf) != 0) {
            cfg_path_display(e->path, &shown);
            sb_addf(&b, "  set as part of '%s':\n", shown.buf);
        }
        if (e)
            explain_records(cfg, &b, e);
        else if (!strchr(path.buf, CFG_SEP))
            sb_adds(&b, "  (explain a key, such as 'model.lr', to see where it was set)\n");
        else
            sb_adds(&b, "  (no file sets it)\n");
    }
    sb_release(&path);
    sb_release(&shown);
    char *text = sb_detach(&b), *safe = config_redact(cfg, text);
    free(text);
    return safe;
}

/* ---- dump --------------------------------------------------------------------------- */

/* A copy for dumping: credentials become ***, secrets elsewhere are redacted. */
static cJSON *masked_copy(const struct config *cfg, const cJSON *n, int all)
{
    if (cJSON_IsObject(n) || cJSON_IsArray(n)) {
        cJSON *copy = cJSON_IsObject(n) ? cJSON_CreateObject() : cJSON_CreateArray();
        for (const cJSON *c = n->child; c && copy; c = c->next) {
            cJSON *item = masked_copy(cfg, c, all);
            if (item && c->string && !(item->string = cfg_key_dup(c->string, strlen(c->string)))) {
                cJSON_Delete(item);
                item = NULL;
            }
            if (!item) {
                cJSON_Delete(copy);
                return NULL;
            }
            cJSON_AddItemToArray(copy, item);
        }
        return copy;
    }
    if (all && (cJSON_IsString(n) || cJSON_IsNumber(n)))
        return cJSON_CreateString("***");
    if (cJSON_IsString(n)) {
        char *safe = config_redact(cfg, n->valuestring);
        cJSON *s = safe ? cJSON_CreateString(safe) : NULL;
        free(safe);
        return s;
    }
    return cfg_copy_value(n);
}

char *config_dump_yaml(const struct config *cfg, const char *section, const char *dotted, int mask_secrets)
{
    cJSON *doc = NULL;
    int sec = cfg_section_id(section);
    if (!cfg || (section && sec < 0))
        return NULL;
    if (!section) {
        if (dotted && *dotted)
            return NULL;
        doc = cJSON_CreateObject();
        for (int i = 0; i < CFG_NSECTIONS && doc; i++) {
            const cJSON *tree = current_tree(cfg, i);
            cJSON *copy = !tree->child ? NULL
                        : mask_secrets ? masked_copy(cfg, tree, i == CFG_CREDENTIALS) : cfg_copy_value(tree);
            if (tree->child && (!copy || !cJSON_AddItemToObject(doc, cfg_section_names[i], copy))) {
                cJSON_Delete(copy);
                cJSON_Delete(doc);
                doc = NULL;
            }
        }
    } else {
        const cJSON *node = cfg_walk(current_tree(cfg, sec), dotted, NULL);
        if (!node)
            return NULL;
        doc = mask_secrets ? masked_copy(cfg, node, sec == CFG_CREDENTIALS) : cfg_copy_value(node);
    }
    char *text = doc ? cfg_yaml_emit(doc) : NULL;
    cJSON_Delete(doc);
    return text;
}
