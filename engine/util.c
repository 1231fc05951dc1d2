/* util.c — see util.h. */
#include "util.h"
#include "hash.h"

#include <dirent.h>
#include <stdbool.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

void out_of_memory(size_t n)
{
    fprintf(stderr, "flow: out of memory (allocating %zu bytes)\n", n);
    abort();
}

void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) out_of_memory(n);
    return p;
}

void *xcalloc(size_t count, size_t size)
{
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p) out_of_memory(count * size);
    return p;
}

void *xcalloc_written(size_t count, size_t size)
{
    if (!count) count = 1;
    if (!size) size = 1;
    if (count > SIZE_MAX / size) out_of_memory(SIZE_MAX);
    size_t n = count * size;
    void *p = xmalloc(n);
    explicit_bzero(p, n);               /* (a memset after malloc, GCC makes a calloc again) */
    return p;
}

void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q) out_of_memory(n);
    return q;
}

char *xstrdup(const char *s)
{
    return xstrndup(s, strlen(s));
}

char *xstrndup(const char *s, size_t n)
{
    char *p = xmalloc(n + 1);
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

void set_string(char **slot, const char *s)
{
    char *copy = s ? xstrdup(s) : NULL;      /* before the free: s may be *slot */
    free(*slot);
    *slot = copy;
}

void wipe(void *p, size_t n)
{
    if (p) explicit_bzero(p, n);
}

void wipe_free(char *s)
{
    if (!s) return;
    wipe(s, strlen(s));
    free(s);
}

char *xasprintf(const char *fmt, ...)
{
    struct strbuf sb = STRBUF_INIT;
    va_list ap;
    va_start(ap, fmt);
    sb_vaddf(&sb, fmt, ap);
    va_end(ap);
    return sb_detach(&sb);
}

static void sb_reserve(struct strbuf *sb, size_t extra)
{
    if (sb->len + extra + 1 <= sb->cap) return;
    size_t cap = sb->cap ? sb->cap : 64;
    while (cap < sb->len + extra + 1) cap *= 2;
    sb->buf = xrealloc(sb->buf, cap);
    sb->cap = cap;
}

void sb_add(struct strbuf *sb, const char *s, size_t n)
{
    sb_reserve(sb, n);
    memcpy(sb->buf + sb->len, s, n);
    sb->len += n;
    sb->buf[sb->len] = '\0';
}

void sb_adds(struct strbuf *sb, const char *s) { sb_add(sb, s, strlen(s)); }

void sb_vaddf(struct strbuf *sb, const char *fmt, va_list ap)
{
    if (!fmt) return;     /* never NULL; said so for gcc -O1 -fsanitize=undefined (-Wformat-truncation) */
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap2);                /* the length it needs */
    va_end(ap2);
    if (n < 0) return;
    sb_reserve(sb, (size_t)n);
    vsnprintf(sb->buf + sb->len, (size_t)n + 1, fmt, ap);
    sb->len += (size_t)n;
}

void sb_addf(struct strbuf *sb, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    sb_vaddf(sb, fmt, ap);
    va_end(ap);
}

void sb_truncate(struct strbuf *sb, size_t len)
{
    if (sb->buf && len < sb->len) {
        sb->len = len;
        sb->buf[len] = '\0';
    }
}

char *sb_detach(struct strbuf *sb)
{
    char *s = sb->buf ? sb->buf : xstrdup("");
    sb->buf = NULL;
    sb->len = sb->cap = 0;
    return s;
}

void sb_release(struct strbuf *sb)
{
    free(sb->buf);
    sb->buf = NULL;
    sb->len = sb->cap = 0;
}

void errf(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || !errlen) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

const char *errno_hint(int e)
{
    switch (e) {
    case ENOSPC: case EDQUOT: return "; free some disk space and run again";
    case EROFS: return "; flow writes its state to .flow/ beside the pipeline and its outputs "
                       "where the catalog says: run it where it can write";
    case EACCES: case EPERM: return "; flow needs permission to write there";
    case EIO: return "; the disk reported an I/O error: check it before running again";
    case EMFILE: case ENFILE: return "; too many open files: raise the limit (ulimit -n)";
    default: return "";
    }
}

int mkdir_p(const char *path, mode_t mode)
{
    char *p = xstrdup(path);
    int rc = 0;
    for (char *s = p + 1; ; s++) {
        if (*s != '/' && *s != '\0') continue;
        char saved = *s;
        *s = '\0';
        if (mkdir(p, mode) != 0 && errno != EEXIST) { rc = -1; break; }
        *s = saved;
        if (!saved) break;
    }
    free(p);
    return rc;
}

int write_all(int fd, const void *buf, size_t len)
{
    const char *data = buf;
    while (len > 0) {
        ssize_t n = write(fd, data, len);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return -1;
        data += n;
        len -= (size_t)n;
    }
    return 0;
}

int sb_write_some(struct strbuf *sb, int fd, size_t at_least, uint64_t *written)
{
    if (sb->len < at_least || sb->len == 0) return 0;
    if (write_all(fd, sb->buf, sb->len) != 0) return -1;
    if (written) *written += sb->len;
    sb_truncate(sb, 0);
    return 0;
}

void writeback_start(int fd, uint64_t end, uint64_t len)
{
    if (len) (void)sync_file_range(fd, (off_t)(end - len), (off_t)len, SYNC_FILE_RANGE_WRITE);
}

int sb_write_last(struct strbuf *sb, int fd, int rc)
{
    if (rc == 0) rc = sb_write_some(sb, fd, 0, NULL);
    int e = errno;
    sb_release(sb);
    errno = e;
    return rc;
}

char *read_file(const char *path, size_t *len)
{
    return read_file_max(path, SIZE_MAX, len);
}

int open_no_wait(int dfd, const char *path, int flags, mode_t mode)
{
    int fd = openat(dfd, path, flags | O_NONBLOCK, mode);
    if (fd < 0 || (flags & O_NONBLOCK)) return fd;
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

char *read_file_max(const char *path, size_t max, size_t *len)
{
    /* A FIFO planted there is refused, as a script's reader does (open_no_wait). */
    int fd = open_no_wait(AT_FDCWD, path, O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0) return NULL;
    struct stat st;
    int refused = 0;
    if (fstat(fd, &st) != 0) refused = errno;
    else if (S_ISFIFO(st.st_mode)) refused = EINVAL;
    if (refused) {
        close(fd);
        errno = refused;
        return NULL;
    }
    struct strbuf sb = STRBUF_INIT;
    char chunk[65536];
    for (;;) {
        ssize_t n = read(fd, chunk, sizeof chunk);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            int e = errno;
            close(fd);
            sb_release(&sb);
            errno = e;
            return NULL;
        }
        if (n == 0) break;
        sb_add(&sb, chunk, (size_t)n);
        if (sb.len > max) {
            close(fd);
            sb_release(&sb);
            errno = EFBIG;
            return NULL;
        }
    }
    close(fd);
    if (len) *len = sb.len;
    return sb_detach(&sb);
}

/* Past this many bytes an encoded name keeps its start and a hash of all of it:
 * a file name has at most 255 bytes (NAME_MAX), and a suffix is added to some. */
#define SAFE_NAME_MAX 200
#define SAFE_NAME_KEEP 160

static bool portable_byte(unsigned char c, bool first)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           c == '-' || c == '_' || (c == '.' && !first) || c >= 0x80;
}

bool safe_file_name_is_itself(const char *name, size_t len)
{
    if (len == 0 || len > SAFE_NAME_MAX || memchr(name, '\0', len)) return false;
    for (size_t i = 0; i < len; i++)
        if (!portable_byte((unsigned char)name[i], i == 0)) return false;
    return true;
}

char *safe_file_name(const char *name)
{
    struct strbuf sb = STRBUF_INIT;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
        if (portable_byte(*p, p == (const unsigned char *)name)) sb_addc(&sb, (char)*p);
        else sb_addf(&sb, "%%%02X", *p);
    }
    if (sb.len == 0) sb_addc(&sb, '%');          /* no encoding is a lone '%' */
    if (sb.len > SAFE_NAME_MAX) {
        size_t keep = SAFE_NAME_KEEP;
        /* not inside a %XX or a UTF-8 sequence */
        while (keep > 0 && (((unsigned char)sb.buf[keep] & 0xC0) == 0x80 ||
                            (keep >= 1 && sb.buf[keep - 1] == '%') || (keep >= 2 && sb.buf[keep - 2] == '%')))
            keep--;
        char hex[SHA256_HEX_SIZE];
        sha256_hex(name, strlen(name), hex);
        sb.len = keep;
        sb_addf(&sb, "~%.16s", hex);                /* '~' is always encoded: no name ends up here */
    }
    return sb_detach(&sb);
}

double monotonic_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

double wall_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

struct file_stamp file_stamp_of(const struct stat *st)
{
    return (struct file_stamp){
        .size = (long long)st->st_size,
        .mtime_ns = (long long)st->st_mtim.tv_sec * 1000000000LL + st->st_mtim.tv_nsec,
        .ctime_ns = (long long)st->st_ctim.tv_sec * 1000000000LL + st->st_ctim.tv_nsec,
        .ino = (unsigned long long)st->st_ino,
        .dev = (unsigned long long)st->st_dev,
    };
}

bool file_stamp_equal(const struct file_stamp *a, const struct file_stamp *b)
{
    return a->size == b->size && a->mtime_ns == b->mtime_ns && a->ctime_ns == b->ctime_ns &&
           a->ino == b->ino && a->dev == b->dev;
}

int bytes_compare(const char *a, size_t alen, const char *b, size_t blen)
{
    int d = memcmp(a, b, alen < blen ? alen : blen);
    return d ? d : (alen > blen) - (alen < blen);
}

static int compare_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);     /* bytewise: strcmp compares unsigned */
}

void dir_list_free(char **names, size_t n)
{
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
}

char **dir_list(const char *dir, size_t *count)
{
    DIR *d = opendir(dir);
    if (!d) return NULL;
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    errno = 0;
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        ARRAY_GROW(names, n, cap);
        names[n++] = xstrdup(e->d_name);
    }
    int e_read = errno;
    closedir(d);
    if (e_read) { dir_list_free(names, n); errno = e_read; return NULL; }
    if (n > 1) qsort(names, n, sizeof *names, compare_names);    /* never qsort(NULL, 0): UB */
    *count = n;
    return names ? names : xcalloc(1, sizeof *names);
}

#define LISTED_MAX ((size_t)64 << 20)

char **dir_list_unlisted(const char *dir, const char *listed, size_t *count)
{
    size_t n;
    char **names = dir_list(dir, &n);
    if (!names) return NULL;
    char *text = listed ? read_file_max(listed, LISTED_MAX, NULL) : NULL;
    char **lines = NULL;
    size_t n_lines = 0, cap = 0;
    for (char *p = text; p && *p;) {            /* the lines, in place */
        char *end = strchr(p, '\n');
        if (end) *end = '\0';
        if (*p) {
            ARRAY_GROW(lines, n_lines, cap);
            lines[n_lines++] = p;
        }
        if (!end) break;
        p = end + 1;
    }
    if (n_lines > 1) qsort(lines, n_lines, sizeof *lines, compare_names);
    size_t kept = 0, j = 0;                      /* both sorted: one walk */
    for (size_t i = 0; i < n; i++) {
        while (j < n_lines && strcmp(lines[j], names[i]) < 0) j++;
        if (j < n_lines && strcmp(lines[j], names[i]) == 0) free(names[i]);
        else names[kept++] = names[i];
    }
    free(lines);
    free(text);
    *count = kept;
    return names;
}
