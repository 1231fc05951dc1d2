/* statestore.c — the step state file: an append-only log of checksummed
 * records, indexed in memory by step name (see statestore.h, docs/data.md).
 *
 * File: the 8-byte magic "FLOWST01", then records.  A record is a 12-byte
 * frame — u32 "FSR1" marker, u32 payload length, u32 CRC-32 of the payload
 * (all little-endian) — and the payload:
 *     f64 time | str name | str fp | str body | u32 n | n x (u8 kind, str dataset, str path, str hash)
 * where str is a u32 length, the bytes and a NUL (so a string in the mapped
 * file is a C string in place).  Every length is checked against what is
 * left: a record that does not parse is damaged and skipped; a frame whose
 * length runs past the end of the file, or that does not start with the
 * marker, is the torn tail of an interrupted append and ends the scan. */
#include "statestore.h"
#include "commit.h"
#include "nofollow.h"
#include "strmap.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAGIC "FLOWST01"
#define MAGIC_LEN 8
#define FRAME_MARK 0x31525346u          /* "FSR1" little-endian */
#define FRAME_LEN 12
#define COMPACT_MIN_RECORDS 64

struct slot {
    struct state_rec rec;               /* pointers into blob */
    const unsigned char *blob;          /* the encoded payload */
    size_t blob_len;
    bool owned, dirty;                  /* blob malloc'd (a put); not yet saved */
};

struct state_store {
    char *path;
    char *values_dir;                   /* values/ beside the file */
    unsigned char *map;                 /* the file as read, or NULL */
    size_t map_len;
    struct slot *slots;
    size_t n, cap;
    struct strmap index;                /* name -> slot */
    size_t file_records;                /* records in the file, superseded ones included */
    size_t dirty;
    bool rewrite;                       /* the file is missing, unusable or has a torn tail */
    struct state_store_stats stats;
};

/* ---- CRC-32 (IEEE), for telling a damaged record from a good one ----------- */

static uint32_t get_u32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Eight bytes a step (slice-by-8): a byte at a time, the CRC of a large
 * state.log was 4 % of a no-op run of 100,000 steps.  crc_tables[k][i] is
 * the CRC of byte i followed by k zero bytes. */
static uint32_t crc_tables[8][256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_tables[0][i] = c;
    }
    for (int k = 1; k < 8; k++)
        for (uint32_t i = 0; i < 256; i++)
            crc_tables[k][i] = (crc_tables[k - 1][i] >> 8) ^ crc_tables[0][crc_tables[k - 1][i] & 0xFF];
}

uint32_t state_store_crc32(const void *data, size_t n)
{
    pthread_once(&crc_once, crc_init);
    const unsigned char *p = data;
    const uint32_t (*t)[256] = crc_tables;
    uint32_t c = 0xFFFFFFFFu;
    for (; n >= 8; p += 8, n -= 8) {
        uint32_t a = c ^ get_u32(p), b = get_u32(p + 4);
        c = t[7][a & 0xFF] ^ t[6][(a >> 8) & 0xFF] ^ t[5][(a >> 16) & 0xFF] ^ t[4][a >> 24] ^
            t[3][b & 0xFF] ^ t[2][(b >> 8) & 0xFF] ^ t[1][(b >> 16) & 0xFF] ^ t[0][b >> 24];
    }
    while (n--) c = t[0][(c ^ *p++) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

/* ---- encoding ---------------------------------------------------------------- */

static void put_u32(struct strbuf *sb, uint32_t v)
{
    unsigned char b[4] = { (unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16),
                           (unsigned char)(v >> 24) };
    sb_add(sb, (const char *)b, 4);
}

static void put_str(struct strbuf *sb, const char *s, size_t len)
{
    put_u32(sb, (uint32_t)len);
    sb_add(sb, s, len);
    sb_addc(sb, '\0');
}

static void put_f64(struct strbuf *sb, double d)
{
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    put_u32(sb, (uint32_t)u);
    put_u32(sb, (uint32_t)(u >> 32));
}

/* The payload of rec (without its frame). */
static void encode(struct strbuf *sb, const struct state_rec *rec)
{
    put_f64(sb, rec->time);
    put_str(sb, rec->name, strlen(rec->name));
    put_str(sb, rec->fp, strlen(rec->fp));
    put_str(sb, rec->body ? rec->body : "", rec->body ? rec->body_len : 0);
    put_u32(sb, (uint32_t)rec->n_outs);
    for (size_t i = 0; i < rec->n_outs; i++) {
        const struct state_out *o = &rec->outs[i];
        sb_addc(sb, o->kind);
        put_str(sb, o->dataset, strlen(o->dataset));
        put_str(sb, o->path ? o->path : "", o->path ? strlen(o->path) : 0);
        put_str(sb, o->hash ? o->hash : "", o->hash ? strlen(o->hash) : 0);
    }
}

static void frame(struct strbuf *out, const unsigned char *payload, size_t len)
{
    put_u32(out, FRAME_MARK);
    put_u32(out, (uint32_t)len);
    put_u32(out, state_store_crc32(payload, len));
    sb_add(out, (const char *)payload, len);
}

/* ---- decoding (bounded) -------------------------------------------------------- */

struct reader { const unsigned char *p; size_t left; };

static bool get_str(struct reader *r, const char **s, size_t *len_out)
{
    if (r->left < 4) return false;
    size_t len = get_u32(r->p);
    if (len >= r->left - 4 || r->p[4 + len] != '\0') return false;
    *s = (const char *)r->p + 4;
    if (len_out) *len_out = len;
    if (memchr(*s, '\0', len)) return false;   /* a name or path with a NUL is damage */
    r->p += 5 + len;
    r->left -= 5 + len;
    return true;
}

/* Fills rec from a payload; its strings point into it.  outs is allocated. */
static bool decode(const unsigned char *p, size_t len, struct state_rec *rec)
{
    struct reader r = { p, len };
    if (r.left < 8) return false;
    uint64_t u = (uint64_t)get_u32(r.p) | (uint64_t)get_u32(r.p + 4) << 32;
    memcpy(&rec->time, &u, sizeof rec->time);
    r.p += 8; r.left -= 8;
    if (!get_str(&r, &rec->name, NULL) || !get_str(&r, &rec->fp, NULL)) return false;
    const char *body;
    if (r.left < 4) return false;
    size_t blen = get_u32(r.p);
    if (blen >= r.left - 4 || r.p[4 + blen] != '\0') return false;
    body = (const char *)r.p + 4;                          /* the body may hold any byte */
    r.p += 5 + blen; r.left -= 5 + blen;
    rec->body = body;
    rec->body_len = blen;
    if (r.left < 4) return false;
    size_t n = get_u32(r.p);
    r.p += 4; r.left -= 4;
    if (n > r.left / 13) return false;                     /* each output takes at least 13 bytes */
    rec->outs = n ? xcalloc(n, sizeof *rec->outs) : NULL;
    rec->n_outs = n;
    for (size_t i = 0; i < n; i++) {
        struct state_out *o = &rec->outs[i];
        if (r.left < 1) goto bad;
        o->kind = (char)*r.p;
        r.p++; r.left--;
        if (!get_str(&r, &o->dataset, NULL) || !get_str(&r, &o->path, NULL) || !get_str(&r, &o->hash, NULL))
            goto bad;
    }
    if (r.left != 0 || !rec->name[0]) goto bad;
    return true;
bad:
    free(rec->outs);
    rec->outs = NULL;
    return false;
}

/* ---- the index ------------------------------------------------------------------ */

static void set_slot(struct state_store *s, const unsigned char *blob, size_t len, bool owned,
                     const struct state_rec *rec, bool dirty)
{
    size_t i;
    if (strmap_get(&s->index, rec->name, &i)) {
        struct slot *old = &s->slots[i];
        free(old->rec.outs);
        if (old->owned) free((void *)old->blob);
        if (old->dirty) s->dirty--;
    } else {
        if (s->n == s->cap) {
            s->cap = s->cap ? s->cap * 2 : 256;
            s->slots = xrealloc(s->slots, s->cap * sizeof *s->slots);
        }
        i = s->n++;
    }
    s->slots[i] = (struct slot){ .rec = *rec, .blob = blob, .blob_len = len, .owned = owned, .dirty = dirty };
    strmap_put(&s->index, rec->name, i);     /* the key is copied: the old name may be freed */
    if (dirty) s->dirty++;
}

static void scan(struct state_store *s)
{
    const unsigned char *p = s->map + MAGIC_LEN, *end = s->map + s->map_len;
    while (p < end) {
        size_t left = (size_t)(end - p);
        if (left < FRAME_LEN || get_u32(p) != FRAME_MARK) break;
        size_t len = get_u32(p + 4);
        if (len > left - FRAME_LEN || len > STATE_STORE_MAX_RECORD) break;
        const unsigned char *payload = p + FRAME_LEN;
        p = payload + len;
        s->file_records++;
        struct state_rec rec = { 0 };
        if (state_store_crc32(payload, len) != get_u32(payload - 4) || !decode(payload, len, &rec)) {
            s->stats.damaged++;
            continue;
        }
        /* A later record replaces an earlier one only if it is not older (as journals fold). */
        const struct state_rec *old = state_store_get(s, rec.name);
        if (old && old->time > rec.time) { free(rec.outs); continue; }
        set_slot(s, payload, len, false, &rec, false);
    }
    s->stats.torn_bytes = (size_t)(end - p);
    if (p < end) s->rewrite = true;
}

struct state_store *state_store_open(const char *path, const char **warning, char *err, size_t errlen)
{
    if (warning) *warning = NULL;
    struct state_store *s = xcalloc(1, sizeof *s);
    s->path = xstrdup(path);
    char *dir = path_parent(path);
    s->values_dir = xasprintf("%s/values", dir);
    free(dir);
    char oerr[512];
    int fd = nofollow_open(path, O_RDONLY, 0, oerr, sizeof oerr);
    if (fd < 0) {
        if (errno == ENOENT) { s->rewrite = true; return s; }
        if (errno == ELOOP) {                  /* a link planted there: replaced by the next save */
            if (warning) *warning = "is a symbolic link";
            s->rewrite = true;
            return s;
        }
        errf(err, errlen, "%s", oerr);
        state_store_free(s);
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        errf(err, errlen, "cannot read %s: %s", path, strerror(errno));
        close(fd);
        state_store_free(s);
        return NULL;
    }
    if (!S_ISREG(st.st_mode)) {
        errf(err, errlen, "cannot read %s: not a regular file", path);
        close(fd);
        state_store_free(s);
        return NULL;
    }
    size_t size = (size_t)st.st_size;
    s->stats.file_bytes = size;
    s->rewrite = true;
    if (size > STATE_STORE_MAX_FILE) {
        if (warning) *warning = "is too large to be read";
    } else if (size > 0) {
        void *m = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            errf(err, errlen, "cannot read %s: %s", path, strerror(errno));
            close(fd);
            state_store_free(s);
            return NULL;
        }
        s->map = m;
        s->map_len = size;
        if (size < MAGIC_LEN || memcmp(m, MAGIC, MAGIC_LEN) != 0) {
            if (warning) *warning = "is not a flow state file (or flow's format changed)";
        } else {
            s->rewrite = false;
            scan(s);
        }
    }
    close(fd);
    s->stats.records = s->n;
    return s;
}

void state_store_free(struct state_store *s)
{
    if (!s) return;
    for (size_t i = 0; i < s->n; i++) {
        free(s->slots[i].rec.outs);
        if (s->slots[i].owned) free((void *)s->slots[i].blob);
    }
    free(s->slots);
    strmap_free(&s->index);
    if (s->map) munmap(s->map, s->map_len);
    free(s->path);
    free(s->values_dir);
    free(s);
}

const struct state_rec *state_store_get(const struct state_store *s, const char *name)
{
    size_t i;
    return strmap_get(&s->index, name, &i) ? &s->slots[i].rec : NULL;
}

size_t state_store_count(const struct state_store *s) { return s->n; }

const char *state_store_values_dir(const struct state_store *s) { return s->values_dir; }

const struct state_rec *state_store_at(const struct state_store *s, size_t i)
{
    return i < s->n ? &s->slots[i].rec : NULL;
}

/* The payload's size for rec, or SIZE_MAX when it cannot be a record. */
static size_t encoded_size(const struct state_rec *rec)
{
    size_t n = 8 + 3 * 5 + 4, lim = STATE_STORE_MAX_RECORD;
    size_t parts[3] = { strlen(rec->name), strlen(rec->fp), rec->body ? rec->body_len : 0 };
    for (int k = 0; k < 3; k++) {
        if (parts[k] > lim) return SIZE_MAX;
        n += parts[k];
    }
    if (rec->n_outs > lim / 16) return SIZE_MAX;
    for (size_t i = 0; i < rec->n_outs && n <= lim; i++) {
        const struct state_out *o = &rec->outs[i];
        size_t l[3] = { strlen(o->dataset), o->path ? strlen(o->path) : 0, o->hash ? strlen(o->hash) : 0 };
        for (int k = 0; k < 3; k++) {
            if (l[k] > lim) return SIZE_MAX;
            n += l[k];
        }
        n += 1 + 3 * 5;
    }
    return n;
}

int state_store_put(struct state_store *s, const struct state_rec *rec, char *err, size_t errlen)
{
    if (!rec->name || !rec->name[0]) {
        errf(err, errlen, "a step's state record needs a name");
        return -1;
    }
    if (!rec->fp || (rec->n_outs && !rec->outs)) {
        errf(err, errlen, "the state record of step %s has no fingerprint or no outputs", rec->name);
        return -1;
    }
    /* scan() takes a frame longer than STATE_STORE_MAX_RECORD for a torn
     * tail and stops there: such a record would hide every record after it
     * on the next open.  (An output takes at least 16 bytes: the count is
     * checked before any output is read.) */
    bool too_large = rec->n_outs > STATE_STORE_MAX_RECORD / 16;
    for (size_t i = 0; i < rec->n_outs && !too_large; i++)
        if (!rec->outs[i].dataset) {
            errf(err, errlen, "an output in the state record of step %s has no dataset", rec->name);
            return -1;
        }
    size_t size = too_large ? SIZE_MAX : encoded_size(rec);
    if (size > STATE_STORE_MAX_RECORD) {
        errf(err, errlen, "the state record of step %s is too large (more than %zu bytes)", rec->name,
             (size_t)STATE_STORE_MAX_RECORD);
        return -1;
    }
    /* Sized to fit: a record kept for each of 100,000 steps, in a buffer
     * grown by doubling, held 51 MB where its bytes take 44. */
    struct strbuf sb = { xmalloc(size + 1), 0, size + 1 };
    encode(&sb, rec);
    size_t len = sb.len;
    unsigned char *blob = (unsigned char *)sb_detach(&sb);
    struct state_rec copy = { 0 };
    if (!decode(blob, len, &copy)) {              /* what the checks above let through always decodes */
        free(blob);
        errf(err, errlen, "the state record of step %s cannot be stored", rec->name);
        return -1;
    }
    set_slot(s, blob, len, true, &copy, true);
    return 0;
}

struct state_store_stats state_store_stats(const struct state_store *s) { return s->stats; }

/* The frames of the store's records, written to fd a chunk at a time (a
 * save of 100,000 records holds a chunk, not a second copy of the file):
 * the whole file, its magic and every record, or (an append) only the
 * records not in the file yet.  0, or -1 with errno set. */
#define WRITE_CHUNK (256 * 1024)
struct frames { const struct state_store *s; bool whole; };

static int write_frames(int fd, void *ctx)
{
    const struct frames *w = ctx;
    struct strbuf out = { 0 };
    if (w->whole) sb_add(&out, MAGIC, MAGIC_LEN);
    int rc = 0;
    for (size_t i = 0; i < w->s->n && rc == 0; i++) {
        const struct slot *sl = &w->s->slots[i];
        if (!w->whole && !sl->dirty) continue;
        frame(&out, sl->blob, sl->blob_len);
        if (out.len >= WRITE_CHUNK) {
            rc = write_all(fd, out.buf, out.len);
            sb_truncate(&out, 0);
        }
    }
    if (rc == 0 && out.len) rc = write_all(fd, out.buf, out.len);
    int e = errno;
    sb_release(&out);
    errno = e;
    return rc;
}

static int append(struct state_store *s, char *err, size_t errlen)
{
    char oerr[512];
    int fd = nofollow_open(s->path, O_WRONLY | O_APPEND, 0, oerr, sizeof oerr);
    if (fd < 0) { errf(err, errlen, "%s", oerr); return -1; }
    /* Whole records, in order: a crash leaves them and at most one torn
     * record at the end, which the next open ignores and the next save
     * rewrites away. */
    int rc = write_frames(fd, &(struct frames){ s, false }) == 0 && fdatasync(fd) == 0 ? 0 : -1;
    int e = errno;
    if (close(fd) != 0 && rc == 0) { rc = -1; e = errno; }
    if (rc != 0) errf(err, errlen, "cannot write %s: %s", s->path, strerror(e));
    return rc;
}

static int rewrite(struct state_store *s, char *err, size_t errlen)
{
    return nofollow_write_atomic_with(s->path, write_frames, &(struct frames){ s, true }, err, errlen);
}

bool state_store_unsaved(const struct state_store *s) { return s->dirty > 0 || s->rewrite; }

int state_store_save(struct state_store *s, char *err, size_t errlen)
{
    if (!state_store_unsaved(s)) return 0;
    if (s->dirty == 0 && s->n == 0 && s->stats.file_bytes == 0) return 0;   /* nothing to write, nothing there */
    size_t after = s->file_records + s->dirty;
    bool compact = s->rewrite || (after >= COMPACT_MIN_RECORDS && after > 2 * s->n);
    int rc = compact ? rewrite(s, err, errlen) : append(s, err, errlen);
    if (rc != 0) {
        /* an append that failed part-way left whole records and a torn one
         * at the end: the next save must not append after it, or the next
         * open would stop at the torn record and lose what follows */
        s->rewrite = true;
        return -1;
    }
    for (size_t i = 0; i < s->n; i++) s->slots[i].dirty = false;
    s->file_records = compact ? s->n : after;
    s->dirty = 0;
    s->rewrite = false;
    return 0;
}
