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
#include <stddef.h>
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

/* A record this process put keeps only what the engine reads in memory
 * (`own`: its name, fingerprint and outputs in one block); its payload is
 * in `pend` until written, then in the file, read back when its body is
 * asked for or the file is rewritten.  A run of 100,000 steps held 440 bytes
 * a step of payloads until its end, 17 % of its peak; it now holds about 180. */
struct slot {
    struct state_rec rec;               /* a mapped record's strings in the map; a put's in own (body NULL) */
    void *own;                          /* a put's block, or NULL (a mapped record: rec.outs is its own) */
    union {
        const unsigned char *mapped;    /* a mapped record's payload */
        uint64_t at;                    /* a put's payload: its offset in the file followed by pend */
    } where;
    uint32_t len, crc;                  /* the payload's length and CRC (its frame's) */
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
    int fd;                             /* the file, once this process has written it; or -1 */
    uint64_t file_end;                  /* where pend's first frame goes in the file */
    struct strbuf pend;                 /* the frames not in the file yet */
    size_t n_pend;                      /* ... how many */
    unsigned char *scratch;             /* a payload read back from the file */
    size_t scratch_cap;
    dev_t dev;                          /* the file as this store last read or wrote it */
    ino_t ino;
    bool rewrite;                       /* the file is missing, unusable or has a torn tail */
    bool streaming;                     /* puts are written before the save (state_store_stream) */
    bool unsynced;                      /* frames written since the last fdatasync */
    uint64_t unstarted;                 /* bytes appended since their writeback was last started (write_pend) */
    bool streaming_failed;              /* a write before the save failed: the save tries again */
    struct state_store_stats stats;
    void (*claim)(void *arg, bool change);   /* state_store_set_claim's, or NULL */
    void *claim_arg;
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

static void set_u32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)v, p[1] = (unsigned char)(v >> 8), p[2] = (unsigned char)(v >> 16),
    p[3] = (unsigned char)(v >> 24);
}

static void put_u32(struct strbuf *sb, uint32_t v)
{
    unsigned char b[4];
    set_u32(b, v);
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

/* What encode writes besides the bytes themselves: a time, and for each
 * string its length before it and a NUL after it. */
#define TIME_LEN 8
#define STR_EXTRA 5

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

/* Where encode put rec's body bytes in its payload: after the time, the
 * name, the fingerprint and the body's length. */
static size_t body_offset(const struct state_rec *rec)
{
    return TIME_LEN + STR_EXTRA + strlen(rec->name) + STR_EXTRA + strlen(rec->fp) + 4;
}

/* A frame's header, at p: its marker, the payload's length and its CRC. */
static void set_frame(unsigned char *p, uint32_t len, uint32_t crc)
{
    set_u32(p, FRAME_MARK);
    set_u32(p + 4, len);
    set_u32(p + 8, crc);
}

/* Appends the frame of a payload whose CRC is known (checked when it was read). */
static void frame(struct strbuf *out, const unsigned char *payload, uint32_t len, uint32_t crc)
{
    unsigned char h[FRAME_LEN];
    set_frame(h, len, crc);
    sb_add(out, (const char *)h, FRAME_LEN);
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
    r->p += STR_EXTRA + len;
    r->left -= STR_EXTRA + len;
    return true;
}

/* Fills rec from a payload; its strings point into it.  outs is allocated. */
static bool decode(const unsigned char *p, size_t len, struct state_rec *rec)
{
    struct reader r = { p, len };
    if (r.left < TIME_LEN) return false;
    uint64_t u = (uint64_t)get_u32(r.p) | (uint64_t)get_u32(r.p + 4) << 32;
    memcpy(&rec->time, &u, sizeof rec->time);
    r.p += TIME_LEN; r.left -= TIME_LEN;
    if (!get_str(&r, &rec->name, NULL) || !get_str(&r, &rec->fp, NULL)) return false;
    const char *body;
    if (r.left < 4) return false;
    size_t blen = get_u32(r.p);
    if (blen >= r.left - 4 || r.p[4 + blen] != '\0') return false;
    body = (const char *)r.p + 4;                          /* the body may hold any byte */
    r.p += STR_EXTRA + blen; r.left -= STR_EXTRA + blen;
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

static void release_slot(struct slot *sl)
{
    if (sl->own) free(sl->own);
    else free(sl->rec.outs);
}

/* Sets the record of step sl->rec.name; with `newest`, only when it is not
 * older than the one it would replace (as journals fold).  Returns whether
 * it was set: false leaves sl the caller's to release. */
static bool set_slot(struct state_store *s, const struct slot *sl, bool newest)
{
    struct strmap_slot *at = strmap_slot(&s->index, sl->rec.name);
    size_t i = at->value;
    if (at->key) {
        if (newest && s->slots[i].rec.time > sl->rec.time) return false;
        release_slot(&s->slots[i]);      /* (the map's key is its own copy: the old name may go) */
    } else {
        if (s->n == s->cap) {
            s->cap = s->cap ? s->cap * 2 : 256;
            s->slots = xrealloc(s->slots, s->cap * sizeof *s->slots);
        }
        i = s->n++;
        strmap_fill(&s->index, at, sl->rec.name, i);
    }
    s->slots[i] = *sl;
    return true;
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
        if (!set_slot(s, &(struct slot){ .rec = rec, .where.mapped = payload, .len = (uint32_t)len,
                                         .crc = get_u32(payload - 4) }, true))
            free(rec.outs);
    }
    s->stats.torn_bytes = (size_t)(end - p);
    if (p < end) s->rewrite = true;
}

struct state_store *state_store_open(const char *path, const char **warning, char *err, size_t errlen)
{
    if (warning) *warning = NULL;
    struct state_store *s = xcalloc(1, sizeof *s);
    s->fd = -1;
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
    s->dev = st.st_dev;
    s->ino = st.st_ino;
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
        s->file_end = size;
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

bool state_store_set_claim(struct state_store *s, void (*claim)(void *arg, bool change), void *arg)
{
    if (claim && s->claim) return false;
    s->claim = claim;
    s->claim_arg = arg;
    return true;
}

void state_store_claim(struct state_store *s, bool change)
{
    if (s && s->claim) s->claim(s->claim_arg, change);
}

void state_store_free(struct state_store *s)
{
    if (!s) return;
    for (size_t i = 0; i < s->n; i++) release_slot(&s->slots[i]);
    free(s->slots);
    if (s->fd >= 0) close(s->fd);
    sb_release(&s->pend);
    free(s->scratch);
    strmap_free(&s->index);
    if (s->map) munmap(s->map, s->map_len);
    free(s->path);
    free(s->values_dir);
    free(s);
}

size_t state_store_slot(const struct state_store *s, const char *name)
{
    size_t i;
    return strmap_get(&s->index, name, &i) ? i : STATE_STORE_NO_SLOT;
}

void state_store_prefetch(const struct state_store *s, const char *name)
{
    strmap_prefetch(&s->index, name);
}

const struct state_rec *state_store_get(const struct state_store *s, const char *name)
{
    return state_store_at(s, state_store_slot(s, name));     /* (NO_SLOT is past the end: NULL) */
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
    size_t n = TIME_LEN + 3 * STR_EXTRA + 4, lim = STATE_STORE_MAX_RECORD;
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
        n += 1 + 3 * STR_EXTRA;
    }
    return n;
}

/* ---- writing -------------------------------------------------------------------- */

static char *copy_text(char **at, const char *text)
{
    size_t len = strlen(text ? text : "") + 1;
    char *to = *at;
    memcpy(to, text ? text : "", len);
    *at += len;
    return to;
}

/* A put's block: its outputs, then its strings; rec points into it. */
static void *own_copy(const struct state_rec *src, struct state_rec *rec)
{
    size_t n = src->n_outs, bytes = n * sizeof(struct state_out) + strlen(src->name) + strlen(src->fp) + 2;
    for (size_t i = 0; i < n; i++) {
        const struct state_out *o = &src->outs[i];
        bytes += strlen(o->dataset) + (o->path ? strlen(o->path) : 0) + (o->hash ? strlen(o->hash) : 0) + 3;
    }
    char *block = xmalloc(bytes), *at = block + n * sizeof(struct state_out);
    struct state_out *outs = (struct state_out *)(void *)block;
    *rec = (struct state_rec){ .name = copy_text(&at, src->name), .fp = copy_text(&at, src->fp),
                               .body_len = src->body ? src->body_len : 0, .time = src->time,
                               .n_outs = n, .outs = n ? outs : NULL };
    for (size_t i = 0; i < n; i++) {
        const struct state_out *o = &src->outs[i];
        outs[i] = (struct state_out){ .kind = o->kind, .dataset = copy_text(&at, o->dataset),
                                      .path = copy_text(&at, o->path), .hash = copy_text(&at, o->hash) };
    }
    return block;
}

static int pwrite_all(int fd, const void *buf, size_t len, uint64_t at)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t w = pwrite(fd, p, len, (off_t)at);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            if (w == 0) errno = EIO;
            return -1;
        }
        p += w;
        len -= (size_t)w;
        at += (uint64_t)w;
    }
    return 0;
}

/* The file, opened for reading back and writing at its end (never through a link). */
static int open_file(struct state_store *s, char *err, size_t errlen)
{
    if (s->fd >= 0) return 0;
    char oerr[512];
    s->fd = nofollow_open(s->path, O_RDWR, 0, oerr, sizeof oerr);
    if (s->fd < 0) errf(err, errlen, "%s", oerr);
    return s->fd < 0 ? -1 : 0;
}

/* A put's payload: in pend, or read back from the file into scratch and
 * checked against its CRC (a file changed under the run is an error, not
 * a wrong record).  NULL with errno set. */
static const unsigned char *put_payload(struct state_store *s, const struct slot *sl)
{
    if (sl->where.at >= s->file_end) return (const unsigned char *)s->pend.buf + (sl->where.at - s->file_end);
    char err[512];
    if (open_file(s, err, sizeof err) != 0) return NULL;
    if (s->scratch_cap < (size_t)sl->len + 1) {
        free(s->scratch);
        s->scratch_cap = (size_t)sl->len + 1;
        s->scratch = xmalloc(s->scratch_cap);
    }
    ssize_t got;
    do got = pread(s->fd, s->scratch, sl->len, (off_t)sl->where.at);
    while (got < 0 && errno == EINTR);
    if (got != (ssize_t)sl->len || state_store_crc32(s->scratch, sl->len) != sl->crc) {
        if (got >= 0) errno = EIO;
        return NULL;
    }
    s->scratch[sl->len] = '\0';
    return s->scratch;
}

static void stream(struct state_store *s);

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
    size_t start = s->pend.len;
    sb_add(&s->pend, "\0\0\0\0\0\0\0\0\0\0\0\0", FRAME_LEN);   /* the frame's header, once the payload is there */
    size_t payload_at = s->pend.len;
    encode(&s->pend, rec);
    if (s->pend.len - payload_at != size) {             /* (encoded_size is the encoding's length) */
        sb_truncate(&s->pend, start);
        errf(err, errlen, "the state record of step %s cannot be stored", rec->name);
        return -1;
    }
    uint32_t crc = state_store_crc32(s->pend.buf + payload_at, size);
    set_frame((unsigned char *)s->pend.buf + start, (uint32_t)size, crc);
    struct slot sl = { .where.at = s->file_end + payload_at, .len = (uint32_t)size, .crc = crc };
    sl.own = own_copy(rec, &sl.rec);
    set_slot(s, &sl, false);
    s->n_pend++;
    if (s->streaming && s->pend.len >= STATE_STORE_STREAM_BYTES) stream(s);
    return 0;
}

struct state_store_stats state_store_stats(const struct state_store *s) { return s->stats; }

const char *state_store_body(struct state_store *s, const struct state_rec *rec, size_t *len)
{
    const struct slot *sl = (const struct slot *)(const void *)((const char *)rec - offsetof(struct slot, rec));
    *len = rec->body_len;
    if (!sl->own) return rec->body;
    const unsigned char *payload = put_payload(s, sl);
    if (!payload) return NULL;
    return (const char *)payload + body_offset(rec);
}

/* The whole file: its magic and every live record, a chunk of frames to a
 * write (a save of 100,000 records holds a chunk, not a second copy of the
 * file), each put's new offset in at[].  0, or -1 with errno set. */
#define WRITE_CHUNK (256 * 1024)
struct frames { struct state_store *s; uint64_t *at, end; };

static int write_frames(int fd, void *ctx)
{
    struct frames *w = ctx;
    struct state_store *s = w->s;
    struct strbuf out = { 0 };
    sb_add(&out, MAGIC, MAGIC_LEN);
    uint64_t written = 0;
    int rc = 0;
    for (size_t i = 0; i < s->n && rc == 0; i++) {
        const struct slot *sl = &s->slots[i];
        const unsigned char *payload = sl->own ? put_payload(s, sl) : sl->where.mapped;
        if (!payload) { rc = -1; break; }
        frame(&out, payload, sl->len, sl->crc);
        w->at[i] = written + out.len - sl->len;
        rc = sb_write_some(&out, fd, WRITE_CHUNK, &written);
    }
    w->end = written + out.len;
    return sb_write_last(&out, fd, rc);
}

/* Writes every live record to a new file renamed into place (synced), and
 * points the puts at their new places in it. */
static int rewrite(struct state_store *s, char *err, size_t errlen)
{
    char *dir = path_parent(s->path);
    int rc = nofollow_mkdir_p(dir, 0777, err, errlen);
    free(dir);
    if (rc != 0) return -1;
    struct frames w = { s, xcalloc(s->n + 1, sizeof *w.at), 0 };
    rc = nofollow_write_atomic_with(s->path, write_frames, &w, err, errlen);
    if (rc == 0) {
        for (size_t i = 0; i < s->n; i++)
            if (s->slots[i].own) s->slots[i].where.at = w.at[i];
        if (s->fd >= 0) close(s->fd);                  /* the file it read is not the file now */
        s->fd = -1;
        s->file_end = w.end;
        struct stat st;
        if (lstat(s->path, &st) == 0) s->dev = st.st_dev, s->ino = st.st_ino;
        sb_truncate(&s->pend, 0);
        s->n_pend = 0;
        s->file_records = s->n;
        s->rewrite = s->unsynced = false;
    }
    free(w.at);
    return rc;
}

/* Whether the file at the path is still the one this store read or last
 * wrote, as it left it.  Another writer (a second store on the file) would
 * make this store's offsets wrong, and appending where it thinks the end is
 * would overwrite that writer's records: its records go to a new file. */
static bool still_ours(const struct state_store *s)
{
    struct stat st;
    return lstat(s->path, &st) == 0 && S_ISREG(st.st_mode) && st.st_dev == s->dev && st.st_ino == s->ino &&
           (uint64_t)st.st_size == s->file_end;
}

/* Writes pend at the end of the file (no sync). */
static int write_pend(struct state_store *s, char *err, size_t errlen)
{
    if (!still_ours(s)) {
        errf(err, errlen, "%s changed under this run (another flow wrote it)", s->path);
        s->rewrite = true;
        return -1;
    }
    if (open_file(s, err, errlen) != 0) return -1;
    if (pwrite_all(s->fd, s->pend.buf, s->pend.len, s->file_end) != 0) {
        /* whole records, then part of one: the next save must not write after it */
        errf(err, errlen, "cannot write %s: %s", s->path, strerror(errno));
        s->rewrite = true;
        return -1;
    }
    s->file_end += s->pend.len;
    s->file_records += s->n_pend;
    /* the disk starts on what is written as it adds up, so that the save's
     * sync waits for the last of it only (a first run of 100,000 steps
     * streams 42 MB: its sync was 28 ms of the run's end, 2.5 ms so) */
    s->unstarted = s->unstarted + s->pend.len <= s->file_end ? s->unstarted + s->pend.len : s->pend.len;
    if (s->unstarted >= WRITEBACK_BYTES) {
        writeback_start(s->fd, s->file_end, s->unstarted);
        s->unstarted = 0;
    }
    sb_truncate(&s->pend, 0);
    s->n_pend = 0;
    s->unsynced = true;
    return 0;
}

/* Before the save: what pend holds goes to the file (made first if it must
 * be), unsynced; a failure leaves it to the save, which says why. */
static void stream(struct state_store *s)
{
    if (s->streaming_failed) return;
    char err[512];
    if ((s->rewrite ? rewrite(s, err, sizeof err) : write_pend(s, err, sizeof err)) != 0) s->streaming_failed = true;
}

void state_store_stream(struct state_store *s) { s->streaming = true; }

bool state_store_unsaved(const struct state_store *s) { return s->n_pend > 0 || s->unsynced || s->rewrite; }

int state_store_save(struct state_store *s, char *err, size_t errlen)
{
    if (!state_store_unsaved(s)) return 0;
    if (s->n == 0 && s->n_pend == 0 && s->stats.file_bytes == 0) return 0;   /* nothing to write, nothing there */
    if (!s->rewrite && !still_ours(s)) s->rewrite = true;    /* (write_pend's reason) */
    size_t after = s->file_records + s->n_pend;
    bool compact = s->rewrite || (after >= COMPACT_MIN_RECORDS && after > 2 * s->n);
    int rc = compact ? rewrite(s, err, errlen) : write_pend(s, err, errlen);
    if (rc == 0 && !compact && fdatasync(s->fd) != 0) {
        errf(err, errlen, "cannot write %s: %s", s->path, strerror(errno));
        rc = -1;
    }
    if (rc != 0) {
        /* an append that failed part-way left whole records and a torn one
         * at the end (and a failed sync, pages that may never reach the
         * disk): the next save rewrites the file */
        s->rewrite = true;
        return -1;
    }
    s->unsynced = false;
    s->streaming_failed = false;
    return 0;
}
