/* snapshot.c — a code snapshot's files, order, content hash and blob names
 * (see snapshot.h). */
#include "snapshot.h"
#include "amlignore.h"
#include "utf8.h"
#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define READ_CHUNK (64 * 1024)
#define IGNORE_FILE_MAX (16u << 20)

/* ---- Python's str.lower(), for the order of files --------------------------- */

struct lower_row { uint32_t first, last, stride; int32_t delta; };
static const struct lower_row lower_table[] = {
#include "pylower_table.h"
};

/* The lowercase of cp into out (1 or 2 code points), as Python lowers a
 * string: its simple mapping, and U+0130 to "i\u0307".  Python also lowers a
 * word-final capital sigma to U+03C2 where this gives U+03C3: that changes the
 * order only of two paths equal up to such a sigma, one with it and one with
 * a small sigma. */
static size_t py_lower(uint32_t cp, uint32_t out[2])
{
    if (cp == 0x130) { out[0] = 'i'; out[1] = 0x307; return 2; }
    size_t lo = 0, hi = sizeof lower_table / sizeof *lower_table;
    while (lo < hi) {                      /* the last row starting at or before cp */
        size_t mid = (lo + hi) / 2;
        if (lower_table[mid].first <= cp) lo = mid + 1; else hi = mid;
    }
    out[0] = cp;
    if (lo > 0) {
        const struct lower_row *r = &lower_table[lo - 1];
        if (cp <= r->last && (cp - r->first) % r->stride == 0) out[0] = (uint32_t)((int32_t)cp + r->delta);
    }
    return 1;
}

char *snapshot_sort_key(const char *rel)
{
    struct strbuf sb = STRBUF_INIT;
    const unsigned char *p = (const unsigned char *)rel;
    size_t len = strlen(rel);
    for (size_t i = 0, used; i < len; i += used) {
        uint32_t cp = utf8_decode(p + i, len - i, &used), low[2];
        if (used == 0) { sb_addc(&sb, (char)p[i]); used = 1; continue; }   /* kept as it is */
        for (size_t k = 0, n = py_lower(cp, low); k < n; k++) utf8_put(&sb, low[k]);
    }
    return sb_detach(&sb);
}

/* ---- the walk ------------------------------------------------------------------ */

struct dir_frame {
    char *rel;             /* "" for the root */
    dev_t dev;
    ino_t ino;
    size_t parent;         /* index in walk.dirs; the root's is itself */
};

struct walk {
    const char *root;
    const struct snapshot_options *opt;
    struct amlignore *ig;
    struct dir_frame *dirs;
    size_t ndirs, dircap;
    size_t *todo;
    size_t ntodo, todocap;
    struct snapshot_file *files;
    char **keys, **locals;     /* per file: sort key; local path for a symlinked file */
    size_t nfiles, filecap, keycap, localcap;
    char *err;
    size_t errlen;
};

static char *join(const char *dir, const char *name)
{
    return *dir ? xasprintf("%s/%s", dir, name) : xstrdup(name);
}

static bool root_excluded(const struct walk *w, const char *name)
{
    if (strcmp(name, ".flow") == 0) return true;
    for (const char *const *n = w->opt ? w->opt->exclude_names : NULL; n && *n; n++)
        if (strcmp(name, *n) == 0) return true;
    return false;
}

/* A name the SDK can hash and upload: it encodes the path as UTF-8 (strictly),
 * turns '\' into '/' (and then cannot find the file), and '\n' would not
 * survive its ignore rules' regular expressions nor a blob name. */
static const char *bad_name(const char *rel)
{
    const unsigned char *p = (const unsigned char *)rel;
    size_t len = strlen(rel);
    for (size_t i = 0, used; i < len; i += used) {
        utf8_decode(p + i, len - i, &used);
        if (used == 0) return "is not UTF-8";
        if (p[i] == '\n') return "has a line break in it";
        if (p[i] == '\\') return "has a '\\' in it";
    }
    return NULL;
}

/* "snapshot: ROOT/REL what" or, with an errno, "snapshot: what ROOT/REL: why". */
static int walk_fail(struct walk *w, const char *rel, const char *what, int e)
{
    const char *sep = *rel ? "/" : "";
    if (e) errf(w->err, w->errlen, "snapshot: %s %s%s%s: %s", what, w->root, sep, rel, strerror(e));
    else errf(w->err, w->errlen, "snapshot: %s%s%s %s", w->root, sep, rel, what);
    return -1;
}

/* The path a symlinked file's bytes come from, as the SDK sorts uploads by
 * it: the target, made absolute. */
static char *link_local(const char *real_root, const char *rel, int dfd, const char *name)
{
    char buf[PATH_MAX];
    ssize_t n = readlinkat(dfd, name, buf, sizeof buf - 1);
    if (n < 0) return NULL;
    buf[n] = '\0';
    if (buf[0] == '/') return xstrdup(buf);
    char *local = xasprintf("%s/%s", real_root, rel);
    char *slash = strrchr(local, '/');
    char *out = xasprintf("%.*s/%s", (int)(slash - local), local, buf);
    free(local);
    return out;
}

static void add_file(struct walk *w, char *rel, const struct stat *st, bool symlink, char *local)
{
    ARRAY_GROW(w->files, w->nfiles, w->filecap);
    ARRAY_GROW(w->keys, w->nfiles, w->keycap);
    ARRAY_GROW(w->locals, w->nfiles, w->localcap);
    w->files[w->nfiles] = (struct snapshot_file){
        .rel = rel, .path = xasprintf("%s/%s", w->root, rel), .size = (uint64_t)st->st_size,
        .dev = st->st_dev, .ino = st->st_ino, .mtime = st->st_mtim, .symlink = symlink,
    };
    w->keys[w->nfiles] = snapshot_sort_key(rel);
    w->locals[w->nfiles] = local;
    w->nfiles++;
}

/* One entry of directory d (open as dfd).  Takes rel. */
static int walk_entry(struct walk *w, size_t d, int dfd, const char *name, char *rel, const char *real_root)
{
    struct stat st;
    if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
        int rc = walk_fail(w, rel, "cannot examine", errno);
        free(rel);
        return rc;
    }
    bool symlink = S_ISLNK(st.st_mode);
    if (symlink && fstatat(dfd, name, &st, 0) != 0) {
        int e = errno;                      /* dangling: the SDK sees a file */
        if (amlignore_excludes(w->ig, rel)) { free(rel); return 0; }
        int rc = e == ELOOP ? walk_fail(w, rel, "is a symlink loop", 0)
               : e == ENOENT ? walk_fail(w, rel, "is a symlink to nothing", 0)
               : walk_fail(w, rel, "cannot follow the symlink", e);
        free(rel);
        return rc;
    }
    if (S_ISDIR(st.st_mode)) {
        if (amlignore_excludes_dir(w->ig, rel)) { free(rel); return 0; }
        for (size_t a = d;; a = w->dirs[a].parent) {
            if (w->dirs[a].dev == st.st_dev && w->dirs[a].ino == st.st_ino) {
                char what[PATH_MAX + 64];
                snprintf(what, sizeof what, "leads back to %s%s%s (a symlink loop)", w->root,
                         *w->dirs[a].rel ? "/" : "", w->dirs[a].rel);
                int rc = walk_fail(w, rel, what, 0);
                free(rel);
                return rc;
            }
            if (a == 0) break;
        }
        ARRAY_GROW(w->dirs, w->ndirs, w->dircap);
        w->dirs[w->ndirs] = (struct dir_frame){ rel, st.st_dev, st.st_ino, d };
        ARRAY_GROW(w->todo, w->ntodo, w->todocap);
        w->todo[w->ntodo++] = w->ndirs++;
        return 0;
    }
    if (amlignore_excludes(w->ig, rel)) { free(rel); return 0; }
    const char *bad = bad_name(rel);
    const char *why = bad ? bad
                    : !S_ISREG(st.st_mode) ? "is not a regular file (leave it out in .amlignore)"
                    : NULL;
    if (why) {
        int rc = walk_fail(w, rel, why, 0);
        free(rel);
        return rc;
    }
    char *local = symlink ? link_local(real_root, rel, dfd, name) : NULL;
    add_file(w, rel, &st, symlink, local);
    return 0;
}

/* Reads one directory, in byte order of names (so a failure is the same one
 * every time), and handles each entry; directories go on w->todo. */
static int walk_dir(struct walk *w, size_t d, const char *real_root)
{
    const char *rel = w->dirs[d].rel;
    char *path = *rel ? xasprintf("%s/%s", w->root, rel) : xstrdup(w->root);
    size_t n = 0;
    char **names = dir_list(path, &n);                  /* sorted bytewise */
    int dfd = names ? open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
    int e = errno;
    free(path);
    if (dfd < 0) {
        dir_list_free(names, n);
        return walk_fail(w, rel, "cannot read the directory", e);
    }
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++)
        if (d != 0 || !root_excluded(w, names[i]))
            rc = walk_entry(w, d, dfd, names[i], join(rel, names[i]), real_root);
    dir_list_free(names, n);
    close(dfd);
    return rc;
}

/* ---- the snapshot ------------------------------------------------------------------ */

int snapshot_load_ignore_file(const char *root, struct amlignore *ig, const char **which, char *err, size_t errlen)
{
    static const char *const names[] = { ".amlignore", ".gitignore" };
    *which = NULL;
    for (size_t i = 0; i < 2 && !*which; i++) {
        char *path = xasprintf("%s/%s", root, names[i]);
        /* As Python's Path.exists(): links followed, and ENOENT, ENOTDIR
         * and ELOOP mean "does not exist"; any other failure is one. */
        struct stat st;
        if (stat(path, &st) != 0) {
            int e = errno;
            if (e != ENOENT && e != ENOTDIR && e != ELOOP) {
                errf(err, errlen, "snapshot: cannot examine %s: %s", path, strerror(e));
                free(path);
                return -1;
            }
            free(path);
            continue;
        }
        size_t len;
        char *text = read_file_max(path, IGNORE_FILE_MAX, &len);
        if (!text) {
            int e = errno;
            errf(err, errlen, "snapshot: cannot read %s: %s", path, strerror(e));
            free(path);
            return -1;
        }
        char why[600];
        int rc = amlignore_add_text(ig, text, len, path, why, sizeof why);
        if (rc != 0) errf(err, errlen, "snapshot: %s", why);
        free(text);
        free(path);
        if (rc != 0) return -1;
        *which = names[i];
    }
    return 0;
}

static int load_ignore(struct walk *w, struct snapshot *s)
{
    const char *which;
    if (snapshot_load_ignore_file(w->root, w->ig, &which, w->err, w->errlen) != 0) return -1;
    if (which) s->ignore_file = xstrdup(which);
    for (const char *const *r = w->opt ? w->opt->extra_rules : NULL; r && *r; r++) {
        char why[300];
        if (amlignore_add_rule(w->ig, *r, why, sizeof why) != 0) {
            errf(w->err, w->errlen, "snapshot: extra rule %s", why);
            return -1;
        }
    }
    return 0;
}

struct order { const char *key, *rel; size_t i; };

static int compare_order(const void *a, const void *b)
{
    const struct order *x = a, *y = b;
    int c = strcmp(x->key, y->key);
    return c ? c : strcmp(x->rel, y->rel);
}

/* Puts w's files into s in hash order, and finds the indicator. */
static void finish(struct walk *w, struct snapshot *s, const char *real_root)
{
    struct order *o = xmalloc((w->nfiles ? w->nfiles : 1) * sizeof *o);
    for (size_t i = 0; i < w->nfiles; i++) o[i] = (struct order){ w->keys[i], w->files[i].rel, i };
    if (w->nfiles > 1) qsort(o, w->nfiles, sizeof *o, compare_order);
    s->files = xmalloc((w->nfiles ? w->nfiles : 1) * sizeof *s->files);
    s->count = w->nfiles;
    s->indicator = w->nfiles;
    char *best = NULL;
    for (size_t k = 0; k < w->nfiles; k++) {
        size_t i = o[k].i;
        s->files[k] = w->files[i];
        s->total_size += w->files[i].size;
        char *local = w->locals[i] ? w->locals[i] : xasprintf("%s/%s", real_root, w->files[i].rel);
        w->locals[i] = NULL;
        if (!best || strcmp(local, best) < 0) { free(best); best = local; s->indicator = k; }
        else free(local);
    }
    free(best);
    free(o);
    for (size_t i = 0; i < w->nfiles; i++) free(w->keys[i]);
    w->nfiles = 0;                          /* the files are s's now */
}

static void walk_release(struct walk *w)
{
    for (size_t i = 0; i < w->ndirs; i++) free(w->dirs[i].rel);
    free(w->dirs);
    free(w->todo);
    for (size_t i = 0; i < w->nfiles; i++) {
        free(w->files[i].rel);
        free(w->files[i].path);
        free(w->keys[i]);
        free(w->locals[i]);
    }
    free(w->files);
    free(w->keys);
    free(w->locals);
    amlignore_free(w->ig);
}

int snapshot_scan(const char *root, const struct snapshot_options *opt, struct snapshot *out,
                  char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    size_t rootlen = strlen(root);
    while (rootlen > 1 && root[rootlen - 1] == '/') rootlen--;
    out->root = xstrndup(root, rootlen);
    struct walk w = { .root = out->root, .opt = opt, .ig = amlignore_new(), .err = err, .errlen = errlen };

    int rc = -1;
    char *real_root = realpath(out->root, NULL);
    struct stat st;
    if (!real_root || stat(out->root, &st) != 0) {
        errf(err, errlen, "snapshot: %s: %s", out->root, strerror(errno));
        goto done;
    }
    if (!S_ISDIR(st.st_mode)) {
        errf(err, errlen, "snapshot: %s is not a directory", out->root);
        goto done;
    }
    const char *base = strrchr(real_root, '/');
    out->dir_name = xstrdup(base ? base + 1 : real_root);
    if (load_ignore(&w, out) != 0) goto done;

    ARRAY_GROW(w.dirs, w.ndirs, w.dircap);
    w.dirs[w.ndirs++] = (struct dir_frame){ xstrdup(""), st.st_dev, st.st_ino, 0 };
    ARRAY_GROW(w.todo, w.ntodo, w.todocap);
    w.todo[w.ntodo++] = 0;
    /* Iterative, depth first: a deep tree costs heap, never C stack. */
    rc = 0;
    while (w.ntodo && rc == 0) {
        size_t d = w.todo[--w.ntodo];
        rc = walk_dir(&w, d, real_root);
    }
    if (rc == 0) finish(&w, out, real_root);
done:
    free(real_root);
    walk_release(&w);
    if (rc != 0) snapshot_free(out);
    return rc;
}

void snapshot_free(struct snapshot *s)
{
    if (!s) return;
    for (size_t i = 0; i < s->count; i++) {
        free(s->files[i].rel);
        free(s->files[i].path);
    }
    free(s->files);
    free(s->root);
    free(s->dir_name);
    free(s->ignore_file);
    memset(s, 0, sizeof *s);
}

char *snapshot_blob_name(const struct snapshot *s, size_t i)
{
    return xasprintf("%s/%s", s->dir_name, s->files[i].rel);
}

/* ---- the hash ------------------------------------------------------------------------ */

static bool same_file(const struct snapshot_file *f, const struct stat *st)
{
    return S_ISREG(st->st_mode) && (uint64_t)st->st_size == f->size && st->st_dev == f->dev
        && st->st_ino == f->ino && st->st_mtim.tv_sec == f->mtime.tv_sec
        && st->st_mtim.tv_nsec == f->mtime.tv_nsec;
}

/* Streams one file into h; -1 with a message. */
static int hash_contents(struct hasher *h, const struct snapshot_file *f, char *buf, const atomic_bool *stop,
                         _Atomic uint64_t *done, char *err, size_t errlen)
{
    int fd = open(f->path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        int e = errno;
        errf(err, errlen, "snapshot: cannot read %s: %s", f->path, strerror(e));
        return -1;
    }
    struct stat st;
    int rc = 0;
    const char *changed = "changed while flow read it for the code snapshot (a file being written, "
                          "such as a log? .amlignore leaves it out)";
    if (fstat(fd, &st) != 0) {
        errf(err, errlen, "snapshot: cannot read %s: %s", f->path, strerror(errno));
        rc = -1;
    } else if (!same_file(f, &st)) {
        errf(err, errlen, "snapshot: %s %s", f->path, changed);
        rc = -2;
    }
    if (rc == 0) posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    uint64_t total = 0;
    while (rc == 0) {
        if (stop && atomic_load_explicit(stop, memory_order_relaxed)) {
            errf(err, errlen, "snapshot: hashing %s: cancelled", f->path);
            rc = -1;
            break;
        }
        ssize_t n = read(fd, buf, READ_CHUNK);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            int e = errno;
            errf(err, errlen, "snapshot: cannot read %s: %s", f->path, strerror(e));
            rc = -1;
            break;
        }
        if (n == 0) break;
        total += (uint64_t)n;
        if (total > f->size) break;
        hasher_update(h, buf, (size_t)n);
        if (done) atomic_fetch_add_explicit(done, (uint64_t)n, memory_order_relaxed);
    }
    /* The size read and the state after reading must still be the listed
     * ones: a file written to meanwhile would make a hash of no version of it. */
    if (rc == 0 && (total != f->size || fstat(fd, &st) != 0 || !same_file(f, &st))) {
        errf(err, errlen, "snapshot: %s %s", f->path, changed);
        rc = -2;
    }
    close(fd);
    return rc;
}

int snapshot_hash(const struct snapshot *s, const atomic_bool *stop, _Atomic uint64_t *done,
                  char hex[SHA256_HEX_SIZE], char *err, size_t errlen)
{
    struct hasher *h = hasher_new();
    char num[32];
    snprintf(num, sizeof num, "%zu", s->count);
    hasher_update(h, num, strlen(num));
    for (size_t i = 0; i < s->count; i++) {
        snprintf(num, sizeof num, "%" PRIu64, s->files[i].size);
        hasher_update(h, "#", 1);
        hasher_update(h, s->files[i].rel, strlen(s->files[i].rel));
        hasher_update(h, "#", 1);
        hasher_update(h, num, strlen(num));
    }
    char *buf = xmalloc(READ_CHUNK);
    int rc = 0;
    for (size_t i = 0; i < s->count && rc == 0; i++)
        rc = hash_contents(h, &s->files[i], buf, stop, done, err, errlen);
    if (rc == 0) hasher_finish(h, hex);
    free(buf);
    hasher_free(h);
    return rc;
}
