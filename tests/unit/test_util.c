/* test_util.c — the shared infrastructure in util.h and strmap.h that the config loader
 * uses instead of private copies: strbuf truncation, the pointer map, bounded file reads. */
#include "check.h"
#include "strmap.h"
#include "util.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

static void test_strbuf_truncate(void)
{
    struct strbuf sb = STRBUF_INIT;
    sb_truncate(&sb, 0);                        /* nothing added yet: a no-op */
    CHECK(sb.buf == NULL && sb.len == 0);
    sb_adds(&sb, "parameters");
    sb_addf(&sb, "%c%s", '\x1f', "model");
    size_t mark = sb.len;
    sb_adds(&sb, "\x1flr");
    sb_truncate(&sb, mark);
    CHECK_STR(sb.buf, "parameters\x1fmodel");
    sb_truncate(&sb, 1000);                     /* longer than the string: unchanged */
    CHECK(sb.len == mark);
    char *s = sb_detach(&sb);
    CHECK_STR(s, "parameters\x1fmodel");
    free(s);
}

static void test_ptrmap_put_get_grow(void)
{
    struct ptrmap m = {0};
    static int keys[1000];
    CHECK(ptrmap_get(&m, &keys[0]) == NULL);    /* empty map */
    for (int i = 0; i < 1000; i++)
        ptrmap_put(&m, &keys[i], (void *)(intptr_t)(i + 1));
    CHECK(m.count == 1000);
    int ok = 1;
    for (int i = 0; i < 1000; i++)
        ok &= ptrmap_get(&m, &keys[i]) == (void *)(intptr_t)(i + 1);
    CHECK(ok);
    ptrmap_put(&m, &keys[7], (void *)(intptr_t)42);     /* overwrite keeps the count */
    CHECK(m.count == 1000);
    CHECK(ptrmap_get(&m, &keys[7]) == (void *)(intptr_t)42);
    int other;
    CHECK(ptrmap_get(&m, &other) == NULL);
    ptrmap_free(&m);
    CHECK(m.slots == NULL && m.count == 0 && m.cap == 0);
}

static void test_read_file_max(void)
{
    char path[] = "/tmp/flow_test_util_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    CHECK(write_all(fd, "0123456789", 10) == 0);
    close(fd);
    size_t len = 0;
    char *text = read_file_max(path, 10, &len);
    CHECK(text && len == 10);
    CHECK_STR(text, "0123456789");
    free(text);
    errno = 0;
    CHECK(read_file_max(path, 9, &len) == NULL);
    CHECK(errno == EFBIG);
    text = read_file(path, &len);               /* unbounded */
    CHECK(text && len == 10);
    free(text);
    unlink(path);
    errno = 0;
    CHECK(read_file_max(path, 10, &len) == NULL);
    CHECK(errno == ENOENT);
}

int main(void)
{
    RUN(test_strbuf_truncate);
    RUN(test_ptrmap_put_get_grow);
    RUN(test_read_file_max);
    return CHECK_DONE("util");
}
