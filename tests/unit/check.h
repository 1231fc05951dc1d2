/* check.h — a minimal unit-test harness: CHECK(cond), CHECK_STR(a, b), RUN(test).
 * Each test binary prints "name: N passed, N failed" and exits non-zero on failure. */
#ifndef FLOW_CHECK_H
#define FLOW_CHECK_H
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int check_passed, check_failed, check_cur_failed;

#define CHECK(cond) do { if (!(cond)) { check_cur_failed = 1; \
    fprintf(stderr, "  %s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond); } } while (0)

#define CHECK_STR(a, b) do { const char *a_ = (a), *b_ = (b); \
    if (!a_ || !b_ || strcmp(a_, b_) != 0) { check_cur_failed = 1; \
    fprintf(stderr, "  %s:%d: %s == %s failed\n    got:      %s\n    expected: %s\n", \
            __FILE__, __LINE__, #a, #b, a_ ? a_ : "(null)", b_ ? b_ : "(null)"); } } while (0)

#define CHECK_CONTAINS(hay, needle) do { const char *h_ = (hay), *n_ = (needle); \
    if (!h_ || !strstr(h_, n_)) { check_cur_failed = 1; \
    fprintf(stderr, "  %s:%d: expected %s to contain \"%s\"\n    got: %s\n", \
            __FILE__, __LINE__, #hay, n_, h_ ? h_ : "(null)"); } } while (0)

#define RUN(test) do { check_cur_failed = 0; test(); \
    if (check_cur_failed) { check_failed++; fprintf(stderr, "FAIL %s\n", #test); } \
    else check_passed++; } while (0)

/* The repository, for a test that needs its files or tools: the binary is
 * <root>/<build>/tests/<test>.  malloc'd, or NULL when it cannot tell. */
static inline char *check_repo_root(void)
{
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return NULL;
    exe[n] = '\0';
    for (int i = 0; i < 3; i++) {
        char *slash = strrchr(exe, '/');
        if (!slash) return NULL;
        *slash = '\0';
    }
    return strdup(exe);
}

/* Writes text to path (a test's fixture file). */
static inline void check_write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f) { perror(path); exit(2); }
    fputs(text, f);
    fclose(f);
}

/* A test run in a directory of its own: made under /tmp from `prefix` and
 * entered (dir holds its path), then removed with everything in it. */
static inline void check_enter_scratch(char *dir, size_t size, const char *prefix)
{
    snprintf(dir, size, "/tmp/%s-XXXXXX", prefix);
    if (!mkdtemp(dir) || chdir(dir) != 0) { perror("mkdtemp"); exit(2); }
}

static inline void check_leave_scratch(const char *dir)
{
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (chdir("/") != 0 || system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", dir);
}

#define CHECK_DONE(suite) (printf("%s: %d passed, %d failed\n", (suite), check_passed, check_failed), \
                           check_failed ? 1 : 0)
#endif
