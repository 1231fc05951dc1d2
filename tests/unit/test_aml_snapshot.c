/* test_aml_snapshot.c — the code snapshot (engine/azureml/snapshot.c and
 * amlignore.c) against the Azure ML SDK itself: each ignore-rule case and
 * each fixture tree is also given to tests/aml/snapshot_hash.py, which runs
 * the SDK's own IgnoreFile and get_content_hash (Debian's python3-azure),
 * and the answers must agree.  Without the SDK the test fails, naming the
 * package: the ground truth is never skipped. */
#include "check.h"
#include "azureml/amlignore.h"
#include "azureml/snapshot.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char tmp[] = "/tmp/flow-aml-snapshot-XXXXXX";
static char repo[PATH_MAX];

/* ---- helpers ---------------------------------------------------------------- */

static char *at(const char *a, const char *b)
{
    return xasprintf("%s/%s", a, b);
}

static void put(const char *dir, const char *rel, const void *data, size_t len)
{
    char *path = at(dir, rel);
    char *slash = strrchr(path, '/');
    *slash = '\0';
    if (mkdir_p(path, 0755) != 0) { perror(path); exit(2); }
    *slash = '/';
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, len, f) != len || fclose(f) != 0) { perror(path); exit(2); }
    free(path);
}

static void write_text(const char *dir, const char *rel, const char *text)
{
    put(dir, rel, text, strlen(text));
}

static void make_link(const char *target, const char *dir, const char *rel)
{
    char *path = at(dir, rel);
    if (symlink(target, path) != 0) { perror(path); exit(2); }
    free(path);
}

static void make_dir(const char *dir, const char *rel)
{
    char *path = at(dir, rel);
    if (mkdir_p(path, 0755) != 0) { perror(path); exit(2); }
    free(path);
}

/* A fresh fixture directory under tmp. */
static char *fixture(const char *name)
{
    char *dir = at(tmp, name);
    if (mkdir(dir, 0755) != 0) { perror(dir); exit(2); }
    return dir;
}

/* ---- the SDK's answers ---------------------------------------------------------- */

/* Every question for the SDK goes into one batch, run by one Python process
 * (importing azure.ai.ml takes about a second); then the answers are read
 * back in the same order. */
static struct strbuf batch = STRBUF_INIT;
static char **answers;           /* the output of each batch command */
static size_t nanswers;

static size_t nasked;

/* Queues a command; returns the index of its answer. */
static size_t ask(const char *cmd, const char *arg)
{
    sb_addf(&batch, "%s %s\n", cmd, arg);
    return nasked++;
}

static bool run_sdk(void)
{
    char *batch_file = at(tmp, "batch");
    write_text(tmp, "batch", batch.buf);
    char *cmd = xasprintf("PYTHONUTF8=1 PYTHONHASHSEED=0 /usr/bin/python3 %s/tests/aml/snapshot_hash.py "
                          "--batch %s 2>&1", repo, batch_file);
    FILE *p = popen(cmd, "r");
    struct strbuf out = STRBUF_INIT, cur = STRBUF_INIT;
    char line[4096];
    size_t cap = 0;
    while (p && fgets(line, sizeof line, p)) {
        sb_adds(&out, line);
        if (strcmp(line, "==\n") == 0) {
            ARRAY_GROW(answers, nanswers, cap);
            answers[nanswers++] = sb_detach(&cur);
        } else {
            sb_adds(&cur, line);
        }
    }
    int status = p ? pclose(p) : -1;
    bool ok = status == 0;
    if (!ok) {
        fprintf(stderr, "  the Azure ML SDK could not answer (%s %d); it is Debian's python3-azure, "
                "at /usr/bin/python3 (make test-deps installs it). Its output:\n%s\n",
                status != -1 && WIFEXITED(status) ? "exit status" : "wait status",
                status != -1 && WIFEXITED(status) ? WEXITSTATUS(status) : status, out.buf ? out.buf : "(none)");
    }
    sb_release(&out);
    sb_release(&cur);
    free(cmd);
    free(batch_file);
    return ok;
}

/* ---- ignore rules: what git's documentation says, and what the SDK says ---------- */

struct match_case {
    const char *rules;      /* the ignore file */
    const char *path;
    int excluded;           /* expected */
    bool sdk;               /* also ask the SDK (false: where the SDK has no answer) */
};

static const struct match_case match_cases[] = {
    /* no '/': at any depth, and everything below a directory of that name */
    { "*.log\n", "a.log", 1, true }, { "*.log\n", "d/e/a.log", 1, true },
    { "*.log\n", "a.logx", 0, true }, { "*.log\n", "log", 0, true }, { "*.log\n", "x.log/f", 1, true },
    { "node_modules\n", "node_modules/p/i.js", 1, true }, { "node_modules\n", "a/node_modules/i.js", 1, true },
    { "node_modules\n", "node_modules_x/i.js", 0, true },
    /* anchored: a leading '/', or a '/' in the middle */
    { "/root.txt\n", "root.txt", 1, true }, { "/root.txt\n", "d/root.txt", 0, true },
    { "doc/*.txt\n", "doc/a.txt", 1, true }, { "doc/*.txt\n", "doc/s/a.txt", 0, true },
    { "doc/*.txt\n", "x/doc/a.txt", 0, true },
    { "dir/sub/\n", "dir/sub/f", 1, true }, { "dir/sub/\n", "a/dir/sub/f", 0, true },
    { "*/foo\n", "a/foo", 1, true }, { "*/foo\n", "foo", 0, true }, { "*/foo\n", "a/b/foo", 0, true },
    { "a/*\n", "a/b", 1, true }, { "a/*\n", "a/b/c", 1, true }, { "a/*\n", "a", 0, true },
    /* a trailing '/': directories only */
    { "build/\n", "build/x", 1, true }, { "build/\n", "a/build/x", 1, true },
    { "build/\n", "build", 0, true }, { "build/\n", "builder/x", 0, true },
    { "x/\n", "x", 0, true }, { "x/\n", "x/y", 1, true },
    /* ** */
    { "**/foo\n", "foo", 1, true }, { "**/foo\n", "a/b/foo", 1, true }, { "**/foo\n", "a/foo/x", 1, true },
    { "**/foo\n", "afoo", 0, true },
    { "foo/**\n", "foo/x", 1, true }, { "foo/**\n", "foo/a/b", 1, true }, { "foo/**\n", "foo", 0, true },
    { "a/**/b\n", "a/b", 1, true }, { "a/**/b\n", "a/x/b", 1, true }, { "a/**/b\n", "a/x/y/b/c", 1, true },
    { "a/**/b\n", "ab", 0, true }, { "a/**/b\n", "x/a/b", 0, true },
    { "**/cache/**\n", "cache/y", 1, true }, { "**/cache/**\n", "a/cache/x", 1, true },
    { "**/cache/**\n", "b/cache", 0, true },
    { "docs/**/*.md\n", "docs/a.md", 1, true }, { "docs/**/*.md\n", "docs/x/y/z.md", 1, true },
    { "docs/**/*.md\n", "docs/r.txt", 0, true },
    { "**\n", "anything/at/all", 1, true }, { "**\n", "f", 1, true },
    { "**/\n", "f", 0, true }, { "**/\n", "d/f", 1, true },
    { "*\n", "f", 1, true }, { "*\n", "d/f", 1, true },
    { "a/**/**/b\n", "a/x/b", 1, true },
    /* * ? [] within a segment */
    { "?.txt\n", "a.txt", 1, true }, { "?.txt\n", "ab.txt", 0, true }, { "?.txt\n", "d/a.txt", 1, true },
    { "a?c\n", "a/c", 0, true }, { "a*c\n", "a/c", 0, true }, { "a*c\n", "ac", 1, true },
    { "[abc].txt\n", "b.txt", 1, true }, { "[abc].txt\n", "d.txt", 0, true },
    { "[!abc].txt\n", "d.txt", 1, true }, { "[!abc].txt\n", "a.txt", 0, true },
    { "[a-c]x\n", "bx", 1, true }, { "[a-c]x\n", "dx", 0, true },
    { "[]]x\n", "]x", 1, true }, { "[!]]x\n", "]x", 0, true }, { "[!]]x\n", "ax", 1, true },
    { "[a-]x\n", "-x", 1, true }, { "[^a]x\n", "^x", 1, true }, { "[^a]x\n", "bx", 0, true },
    { "[]\n", "[]", 1, true }, { "a[b\n", "a[b", 1, true },
    { "[Tt]emp*\n", "Temp1", 1, true }, { "[Tt]emp*\n", "tEmp", 0, true },
    /* as the SDK's regular expression has it, a set can match '/' (git's cannot); a '/'
     * inside brackets splits the rule first, leaving two literal halves */
    { "a[!x]b\n", "a/b", 1, true }, { "a[/]b\n", "a/b", 0, true }, { "a[/]b\n", "a[/]b", 1, true },
    /* case matters; code points, not bytes */
    { "*.TXT\n", "a.txt", 0, true }, { "?.md\n", "\xc3\xa9.md", 1, true },
    { "\xc3\x9cn*\n", "\xc3\x9cnicode", 1, true }, { "[\xc3\xa0-\xc3\xbf]\n", "\xc3\xa9", 1, true },
    /* escapes, comments, blank lines, white space */
    { "\\#x\n", "#x", 1, true }, { "#x\n", "#x", 0, true }, { "\\!x\n", "!x", 1, true },
    { "\\*\n", "*", 1, true }, { "\\*\n", "a", 0, true },
    { "\n\n   \n# c\n", "a", 0, true }, { "/\n", "a", 0, true },
    { "  spaced.txt  \t\n", "spaced.txt", 1, true },
    { "a.txt\r\nb.txt\rc.txt\n", "b.txt", 1, true }, { "a.txt\r\nb.txt\rc.txt\n", "c.txt", 1, true },
    /* negation: the last rule that matches decides */
    { "*.log\n!keep.log\n", "keep.log", 0, true }, { "*.log\n!keep.log\n", "d/keep.log", 0, true },
    { "*.log\n!keep.log\n", "a.log", 1, true }, { "!keep.log\n*.log\n", "keep.log", 1, true },
    /* the SDK tests each file: a '!' rule keeps a file in an ignored directory (git would not) */
    { "data/\n!data/keep.csv\n", "data/keep.csv", 0, true }, { "data/\n!data/keep.csv\n", "data/x", 1, true },
    { "a//b\n", "a/b", 0, true },
    /* git keeps a trailing space escaped by '\' (the SDK fails on it) */
    { "trail\\ \n", "trail ", 1, false }, { "trail\\ \n", "trail", 0, false },
};

struct error_case { const char *rules; const char *why; };

static const struct error_case error_cases[] = {
    { "ok\n!\n", "invalid rule" },
    { "foo\\\n", "escapes nothing" },
    { "[z-a]\n", "bad character range" },
    { "a\n[b-a]x\n", ":2:" },
};

static struct amlignore *rules_of(const char *text, char *err, size_t errlen)
{
    struct amlignore *ig = amlignore_new();
    if (amlignore_add_text(ig, text, strlen(text), "RULES", err, errlen) != 0) {
        amlignore_free(ig);
        return NULL;
    }
    return ig;
}

static void test_match_expectations(void)
{
    for (size_t i = 0; i < sizeof match_cases / sizeof *match_cases; i++) {
        const struct match_case *c = &match_cases[i];
        char err[300] = "";
        struct amlignore *ig = rules_of(c->rules, err, sizeof err);
        CHECK(ig != NULL);
        if (!ig) { fprintf(stderr, "    rules %s: %s\n", c->rules, err); continue; }
        bool got = amlignore_excludes(ig, c->path);
        if (got != (c->excluded == 1))
            fprintf(stderr, "  rules \"%s\" path \"%s\": got %d, expected %d\n", c->rules, c->path, got, c->excluded);
        CHECK(got == (c->excluded == 1));
        amlignore_free(ig);
    }
}

static void test_match_errors(void)
{
    for (size_t i = 0; i < sizeof error_cases / sizeof *error_cases; i++) {
        char err[300] = "";
        struct amlignore *ig = rules_of(error_cases[i].rules, err, sizeof err);
        CHECK(ig == NULL);
        CHECK_CONTAINS(err, error_cases[i].why);
        CHECK_CONTAINS(err, "RULES:");
        amlignore_free(ig);
    }
    char err[300] = "";
    struct amlignore *ig = rules_of("ok\n\xff\xfe\n", err, sizeof err);
    CHECK(ig == NULL);
    CHECK_CONTAINS(err, "RULES:2: not UTF-8");
    ig = amlignore_new();
    CHECK(amlignore_add_rule(ig, "x/**/y", err, sizeof err) == 0);
    CHECK(amlignore_add_rule(ig, "# no rule", err, sizeof err) == 0);
    CHECK(amlignore_rule_count(ig) == 1);
    CHECK(amlignore_add_rule(ig, "[", err, sizeof err) == 0);       /* an unclosed '[' is itself */
    CHECK(amlignore_excludes(ig, "["));
    amlignore_free(ig);
}

/* Skipping a directory must be safe: never when a file below it could be kept. */
struct dir_case { const char *rules, *dir; int pruned; };

static const struct dir_case dir_cases[] = {
    { "build/\n", "build", 1 }, { "build/\n", "a/build", 1 }, { "build/\n", "buildx", 0 },
    { "build/\n!build/keep\n", "build", 0 }, { "build/\n!*.keep\n", "build", 0 },
    { "build/\n!other/x\n", "build", 1 }, { "!build/keep\nbuild/\n", "build", 1 },
    { "*.log\n", "x.log", 1 }, { "*.log\n", "x", 0 }, { "**\n", "any", 1 }, { "**\n!*.py\n", "any", 0 },
    { "foo/**\n", "foo", 1 }, { "a/**/b\n", "a/b", 1 }, { "a/**/b\n", "a/x/b", 1 }, { "a/**/b\n", "a", 0 },
    { "/data\n", "data", 1 }, { "/data\n", "x/data", 0 }, { "node_modules\n", "a/node_modules", 1 },
    { "**/\n", "d", 1 }, { "x/*\n", "x", 0 }, { "x/*\n", "x/y", 1 }, { "data/\n!data/keep.csv\n", "data", 0 },
    { "*\n!*/\n", "d", 0 }, { "d\n!d\n", "d", 0 }, { "d\n!e\n", "d", 0 }, { "d\n!/e\n", "d", 1 },
};

static const char *const below[] = { "f", "keep", "x.keep", "a.py", "keep.csv", "sub/f", "x/b", "b/c/keep" };

static void test_dir_pruning(void)
{
    for (size_t i = 0; i < sizeof dir_cases / sizeof *dir_cases; i++) {
        const struct dir_case *c = &dir_cases[i];
        char err[300];
        struct amlignore *ig = rules_of(c->rules, err, sizeof err);
        CHECK(ig != NULL);
        if (!ig) continue;
        bool pruned = amlignore_excludes_dir(ig, c->dir);
        if (pruned != (c->pruned == 1))
            fprintf(stderr, "  rules \"%s\" dir \"%s\": pruned %d, expected %d\n", c->rules, c->dir, pruned, c->pruned);
        CHECK(pruned == (c->pruned == 1));
        for (size_t k = 0; pruned && k < sizeof below / sizeof *below; k++) {
            char *p = xasprintf("%s/%s", c->dir, below[k]);
            CHECK(amlignore_excludes(ig, p));
            free(p);
        }
        amlignore_free(ig);
    }
}

static void ask_match(void)
{
    struct strbuf cases = STRBUF_INIT;
    const char *last = NULL;
    for (size_t i = 0; i < sizeof match_cases / sizeof *match_cases; i++) {
        const struct match_case *c = &match_cases[i];
        if (!c->sdk) continue;
        if (!last || strcmp(last, c->rules) != 0) {
            sb_adds(&cases, "C\n");
            /* One "R" line per line of the rules, line breaks as they are:
             * the SDK reads the same text from its own file. */
            for (const char *r = c->rules; *r;) {
                size_t n = strcspn(r, "\n");
                sb_addf(&cases, "R %.*s\n", (int)n, r);
                r += n + (r[n] == '\n');
            }
            last = c->rules;
        }
        sb_addf(&cases, "P %s\n", c->path);
    }
    for (size_t i = 0; i < sizeof error_cases / sizeof *error_cases; i++) {
        sb_adds(&cases, "C\n");
        for (const char *r = error_cases[i].rules; *r;) {
            size_t n = strcspn(r, "\n");
            sb_addf(&cases, "R %.*s\n", (int)n, r);
            r += n + (r[n] == '\n');
        }
        sb_adds(&cases, "P a\n");
    }
    write_text(tmp, "match-cases", cases.buf);
    sb_release(&cases);
    char *path = at(tmp, "match-cases");
    ask("match", path);
    free(path);
}

/* The SDK's answers, in case order: each path's, and "E ..." for each error case. */
static void check_match(const char *answer)
{
    const char *p = answer;
    for (size_t i = 0; i < sizeof match_cases / sizeof *match_cases; i++) {
        const struct match_case *c = &match_cases[i];
        if (!c->sdk) continue;
        if (!*p) { CHECK(!"the SDK gave fewer answers than there are cases"); return; }
        size_t n = strcspn(p, "\n");
        bool sdk = n == 1 && *p == '1';
        if (!(n == 1 && (*p == '0' || *p == '1')))
            fprintf(stderr, "  SDK on rules \"%s\" path \"%s\": %.*s\n", c->rules, c->path, (int)n, p);
        if (sdk != (c->excluded == 1))
            fprintf(stderr, "  SDK on rules \"%s\" path \"%s\": %d, this test expects %d\n",
                    c->rules, c->path, sdk, c->excluded);
        CHECK(sdk == (c->excluded == 1));
        p += n + (p[n] == '\n');
    }
    for (size_t i = 0; i < sizeof error_cases / sizeof *error_cases; i++) {
        CHECK(strncmp(p, "E ", 2) == 0);
        p += strcspn(p, "\n");
        p += *p == '\n';
    }
    CHECK(*p == '\0');
}

/* Random rule sets and paths, a fixed sequence: every answer must be the
 * SDK's, a rule set the SDK rejects must be rejected, and a directory may
 * be skipped only when the SDK excludes every path below it. */
#define FUZZ_SETS 400
#define FUZZ_PATHS 24

static uint32_t fuzz_state = 2463534242u;

static uint32_t fuzz(uint32_t n)
{
    fuzz_state ^= fuzz_state << 13;
    fuzz_state ^= fuzz_state >> 17;
    fuzz_state ^= fuzz_state << 5;
    return fuzz_state % n;
}

struct fuzz_case { char *rules; char *paths[FUZZ_PATHS]; };
static struct fuzz_case fuzz_cases[FUZZ_SETS];

static void make_fuzz(void)
{
    static const char *const atoms[] = { "a", "b", "*", "?", "[ab]", "[!a]", "[a-b]", "\\a", ".", "a", "b" };
    static const char *const names[] = { "a", "b", "ab", "ba", "aa", "a.b", "b.a", "bb" };
    for (size_t c = 0; c < FUZZ_SETS; c++) {
        struct strbuf r = STRBUF_INIT;
        for (uint32_t i = 0, n = 1 + fuzz(4); i < n; i++) {
            if (fuzz(5) == 0) sb_addc(&r, '!');
            if (fuzz(5) == 0) sb_addc(&r, '/');
            for (uint32_t g = 0, segs = 1 + fuzz(3); g < segs; g++) {
                if (g) sb_addc(&r, '/');
                uint32_t kind = fuzz(20);
                if (kind < 3) sb_adds(&r, "**");
                else if (kind < 5) sb_adds(&r, "*");
                else for (uint32_t a = 0, na = 1 + fuzz(3); a < na; a++) sb_adds(&r, atoms[fuzz(11)]);
            }
            if (fuzz(5) == 0) sb_addc(&r, '/');
            sb_addc(&r, '\n');
        }
        fuzz_cases[c].rules = sb_detach(&r);
        for (size_t p = 0; p < FUZZ_PATHS; p++) {
            struct strbuf path = STRBUF_INIT;
            for (uint32_t g = 0, segs = 1 + fuzz(4); g < segs; g++) {
                if (g) sb_addc(&path, '/');
                sb_adds(&path, names[fuzz(8)]);
            }
            fuzz_cases[c].paths[p] = sb_detach(&path);
        }
    }
}

static size_t ask_fuzz(void)
{
    make_fuzz();
    struct strbuf cases = STRBUF_INIT;
    for (size_t c = 0; c < FUZZ_SETS; c++) {
        sb_adds(&cases, "C\n");
        for (const char *r = fuzz_cases[c].rules; *r;) {
            size_t n = strcspn(r, "\n");
            sb_addf(&cases, "R %.*s\n", (int)n, r);
            r += n + (r[n] == '\n');
        }
        for (size_t p = 0; p < FUZZ_PATHS; p++) sb_addf(&cases, "P %s\n", fuzz_cases[c].paths[p]);
    }
    write_text(tmp, "fuzz-cases", cases.buf);
    sb_release(&cases);
    char *path = at(tmp, "fuzz-cases");
    size_t i = ask("match", path);
    free(path);
    return i;
}

static void check_fuzz(const char *answer)
{
    const char *p = answer;
    size_t mismatches = 0, pruned_dirs = 0, rejected = 0;
    for (size_t c = 0; c < FUZZ_SETS; c++) {
        const struct fuzz_case *fc = &fuzz_cases[c];
        char err[300];
        struct amlignore *ig = rules_of(fc->rules, err, sizeof err);
        if (strncmp(p, "E ", 2) == 0) {
            rejected++;
            if (ig) { fprintf(stderr, "  the SDK rejects rules \"%s\", flow does not: %.*s\n", fc->rules,
                              (int)strcspn(p, "\n"), p); mismatches++; }
            p += strcspn(p, "\n");
            p += *p == '\n';
            amlignore_free(ig);
            continue;
        }
        if (!ig) { fprintf(stderr, "  flow rejects rules \"%s\", the SDK does not: %s\n", fc->rules, err); mismatches++; }
        bool sdk[FUZZ_PATHS];
        for (size_t k = 0; k < FUZZ_PATHS; k++) {
            sdk[k] = *p == '1';
            if (ig && amlignore_excludes(ig, fc->paths[k]) != sdk[k]) {
                if (mismatches++ < 10)
                    fprintf(stderr, "  rules \"%s\" path %s: SDK %d, flow %d\n", fc->rules, fc->paths[k], sdk[k], !sdk[k]);
            }
            p += strcspn(p, "\n");
            p += *p == '\n';
        }
        /* Skipping a directory: every path below it must be excluded by the SDK. */
        for (size_t k = 0; ig && k < FUZZ_PATHS; k++) {
            for (const char *slash = strchr(fc->paths[k], '/'); slash; slash = strchr(slash + 1, '/')) {
                char *dir = xstrndup(fc->paths[k], (size_t)(slash - fc->paths[k]));
                if (amlignore_excludes_dir(ig, dir)) {
                    pruned_dirs++;
                    if (!sdk[k]) {
                        mismatches++;
                        fprintf(stderr, "  rules \"%s\": dir %s skipped, but the SDK keeps %s\n", fc->rules, dir,
                                fc->paths[k]);
                    }
                }
                free(dir);
            }
        }
        amlignore_free(ig);
    }
    CHECK(*p == '\0');
    CHECK(mismatches == 0);
    CHECK(pruned_dirs > 100);          /* the sample does exercise skipping */
    CHECK(rejected < FUZZ_SETS / 10);
}

/* ---- the order: Python's str.lower() ----------------------------------------------- */

static void ask_lower(void)
{
    /* Every code point this side lowers, for the SDK side to compare with all of Python's. */
    struct strbuf sb = STRBUF_INIT;
    for (uint32_t cp = 1; cp < 0x110000; cp++) {
        if (cp >= 0xD800 && cp <= 0xDFFF) continue;
        char in[5];
        size_t n;
        if (cp < 0x80) { in[0] = (char)cp; n = 1; }
        else if (cp < 0x800) { in[0] = (char)(0xC0 | cp >> 6); in[1] = (char)(0x80 | (cp & 0x3F)); n = 2; }
        else if (cp < 0x10000) {
            in[0] = (char)(0xE0 | cp >> 12); in[1] = (char)(0x80 | (cp >> 6 & 0x3F));
            in[2] = (char)(0x80 | (cp & 0x3F)); n = 3;
        } else {
            in[0] = (char)(0xF0 | cp >> 18); in[1] = (char)(0x80 | (cp >> 12 & 0x3F));
            in[2] = (char)(0x80 | (cp >> 6 & 0x3F)); in[3] = (char)(0x80 | (cp & 0x3F)); n = 4;
        }
        in[n] = '\0';
        char *key = snapshot_sort_key(in);
        if (strcmp(key, in) != 0) {
            sb_addf(&sb, "%x", cp);
            const unsigned char *k = (const unsigned char *)key;
            while (*k) {                                  /* decode the key again, code point by code point */
                uint32_t c = *k;
                size_t len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
                c = len == 1 ? c : c & (0x7F >> len);
                for (size_t j = 1; j < len; j++) c = c << 6 | (k[j] & 0x3F);
                sb_addf(&sb, " %x", c);
                k += len;
            }
            sb_addc(&sb, '\n');
        }
        free(key);
    }
    write_text(tmp, "lower", sb.buf);
    sb_release(&sb);
    char *path = at(tmp, "lower");
    ask("lower", path);
    free(path);
}

static void test_sort_key(void)
{
    char *k = snapshot_sort_key("Src/\xc3\x89t\xc3\xa9/\xc4\xb0X.PY");   /* "Src/Été/İX.PY" */
    CHECK_STR(k, "src/\xc3\xa9t\xc3\xa9/i\xcc\x87x.py");
    free(k);
    k = snapshot_sort_key("\xe1\xba\x9e\xce\xa9");                        /* "ẞΩ" */
    CHECK_STR(k, "\xc3\x9f\xcf\x89");
    free(k);
}

/* ---- fixture trees ---------------------------------------------------------------------- */

struct tree {
    const char *name;
    char *dir;              /* what the C side scans */
    char *sdk_dir;          /* what the SDK hashes (the same, or an equivalent tree) */
    struct snapshot_options opt;
    bool component;         /* the SDK's ComponentIgnoreFile */
    int conflict;           /* expected: some file matched by a rule and a '!' rule */
    size_t count;           /* expected number of files */
    size_t answer;          /* index in answers */
};

static struct tree trees[16];
static size_t ntrees;

static struct tree *tree(const char *name)
{
    struct tree *t = &trees[ntrees++];
    memset(t, 0, sizeof *t);
    t->name = name;
    t->dir = fixture(name);
    return t;
}

static char *outside;         /* files outside every tree, for symlinks to point at */

static void build_basic(void)
{
    struct tree *t = tree("basic");
    const char *d = t->dir;
    const char *names[] = {
        "README.md", "readme.txt", "B.txt", "a.txt", "Zeta/x.py", "alpha/Beta/y.py", "alpha/beta.txt",
        "alpha.txt", "Alpha2/z", "_under", "-dash", "~tilde", "UPPER_", "Upper-", "with space.txt",
        "dir with space/f g.txt", "\xc3\x89t\xc3\xa9.txt", "\xc3\xa9t\xc3\xa9" "2.txt", "\xce\xa9mega.txt",
        "\xcf\x89mega2.txt", "\xc4\xb0stanbul.txt", "istanbul2.txt", "\xe6\x97\xa5\xe6\x9c\xac/\xe3\x83\x95.txt",
        "\xc3\x9f.txt", "\xe1\xba\x9e" "2.txt", "deep/a/b/c/d/e/f/g/h.txt", ".hidden", ".git/HEAD",
        /* lowercase and byte order disagree: "Éb" < "éa" by bytes, not once lowered */
        "\xc3\x89" "b.txt", "\xc3\xa9" "a.txt", "\xce\xa9" "b", "\xcf\x89" "a", "Ab/x", "aA/y",
    };
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) write_text(d, names[i], names[i]);
    put(d, "empty.txt", "", 0);
    unsigned char bin[512];
    for (size_t i = 0; i < sizeof bin; i++) bin[i] = (unsigned char)(i * 7 + 3);
    put(d, "data/blob.bin", bin, sizeof bin);
    size_t big = 3 * 1024 * 1024 + 17;
    unsigned char *b = xmalloc(big);
    uint32_t x = 12345;
    for (size_t i = 0; i < big; i++) { x = x * 1103515245u + 12345u; b[i] = (unsigned char)(x >> 16); }
    put(d, "data/Big.bin", b, big);
    free(b);
    make_dir(d, "empty_dir/nested");
    char *target = at(outside, "target.txt");
    make_link(target, d, "link_abs.txt");                       /* to a file outside the tree */
    free(target);
    char *in_tree = at(d, "alpha/beta.txt");
    make_link(in_tree, d, "Zeta/link_in.txt");                   /* to a file in another directory */
    free(in_tree);
    make_link("alpha/beta.txt", d, "rel_link.txt");              /* relative, at the root */
    make_link("Zeta", d, "zeta_again");                          /* a directory, again */
    char *outdir = at(outside, "dir");
    make_link(outdir, d, "linked_dir");                          /* a directory outside */
    free(outdir);
    t->sdk_dir = xstrdup(d);
    /* the files, empty/bin/big, 3 symlinks to files, zeta_again's 2, linked_dir's 2 */
    t->count = sizeof names / sizeof *names + 3 + 3 + 2 + 2;
}

static void build_amlignore(void)
{
    struct tree *t = tree("amlignore");
    const char *d = t->dir;
    write_text(d, ".amlignore",
          "# comment\n"
          "*.log\n"
          "!keep.log\n"
          "build/\n"
          "/data\n"
          "**/cache/**\n"
          "docs/**/*.md\n"
          "*.tmp   \n"
          "\\#hash.txt\n"
          "[Tt]emp*\n"
          "a?c.txt\n"
          "   leading.txt\n"
          "node_modules\n"
          "sub/dir/\n");
    const char *files[] = {
        "x.log", "keep.log", "sub/y.log", "sub/keep.log", "build/out.o", "src/build/out.o", "other/build",
        "data/big.bin", "sub/data/kept.bin", "a/cache/x", "cache/y", "b/cache", "docs/a.md", "docs/x/y/z.md",
        "docs/readme.txt", "t.tmp", "#hash.txt", "Temp1", "temp2", "tEmp3", "abc.txt", "a/c.txt",
        "leading.txt", "node_modules/pkg/index.js", "sub/node_modules/x.js", "sub/dir/f", "sub/dirx/f",
    };
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) write_text(d, files[i], files[i]);
    /* What an ignored directory may hold without troubling anyone: it is not entered. */
    make_link("nowhere", d, "build/dangling");
    make_link("..", d, "node_modules/loop");
    t->sdk_dir = xstrdup(d);
    t->conflict = 1;
    /* kept: .amlignore keep.log sub/keep.log other/build sub/data/kept.bin b/cache docs/readme.txt
     * tEmp3 a/c.txt sub/dirx/f */
    t->count = 10;
}

static void build_gitignore(void)
{
    struct tree *t = tree("gitignore");
    const char *d = t->dir;
    write_text(d, ".gitignore", "*.pyc\n__pycache__/\n.venv\n");
    const char *files[] = { "src/m.py", "src/m.pyc", "src/__pycache__/m.cpython-311.pyc", ".venv/lib/x.py",
                            "README" };
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) write_text(d, files[i], files[i]);
    t->sdk_dir = xstrdup(d);
    t->count = 3;
}

static void build_both(void)
{
    struct tree *t = tree("both");
    const char *d = t->dir;
    write_text(d, ".amlignore", "*.md\n");
    write_text(d, ".gitignore", "*.py\n");
    const char *files[] = { "a.py", "b.md", "sub/c.py", "sub/d.md" };
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) write_text(d, files[i], files[i]);
    t->sdk_dir = xstrdup(d);
    t->count = 4;                  /* .amlignore .gitignore a.py sub/c.py */
}

static void build_negated_dir(void)
{
    struct tree *t = tree("negated_dir");
    const char *d = t->dir;
    write_text(d, ".amlignore", "data/\n!data/keep.csv\n");
    const char *files[] = { "data/keep.csv", "data/x.csv", "data/sub/keep.csv", "train.py" };
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) write_text(d, files[i], files[i]);
    t->sdk_dir = xstrdup(d);
    t->conflict = 1;
    t->count = 3;                  /* .amlignore data/keep.csv train.py */
}

static const char *const pycache[] = { "__pycache__", NULL };

static void build_component(void)
{
    struct tree *t = tree("component");
    const char *d = t->dir;
    const char *files[] = { "src/a.py", "src/__pycache__/a.cpython-311.pyc", "__pycache__/b.pyc" };
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) write_text(d, files[i], files[i]);
    t->opt.extra_rules = pycache;
    t->component = true;
    t->sdk_dir = xstrdup(d);
    t->count = 1;
}

static void build_component_amlignore(void)
{
    struct tree *t = tree("component_amlignore");
    const char *d = t->dir;
    write_text(d, ".amlignore", "*.txt\n");
    const char *files[] = { "src/a.py", "src/__pycache__/a.pyc", "notes.txt" };
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) write_text(d, files[i], files[i]);
    t->opt.extra_rules = pycache;
    t->component = true;
    t->sdk_dir = xstrdup(d);
    t->count = 2;
}

static const char *const git[] = { ".git", NULL };

/* .flow is never part of a snapshot; .git only when the caller says so.  The
 * SDK hashes the same tree without them. */
static void build_flow_state(void)
{
    const char *files[] = { "src/a.py", ".flow/journal", ".git/HEAD", "sub/.flow/kept", "sub/.git/kept" };
    struct tree *t = tree("flow_state");
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) write_text(t->dir, files[i], files[i]);
    struct tree *u = tree("flow_state_no_git");
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) write_text(u->dir, files[i], files[i]);
    u->opt.exclude_names = git;
    char *sdk = fixture("flow_state.sdk"), *sdk_no_git = fixture("flow_state_no_git.sdk");
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        if (strncmp(files[i], ".flow/", 6) == 0) continue;
        write_text(sdk, files[i], files[i]);
        if (strncmp(files[i], ".git/", 5) != 0) write_text(sdk_no_git, files[i], files[i]);
    }
    t->sdk_dir = sdk;
    t->count = 4;
    u->sdk_dir = sdk_no_git;
    u->count = 3;
}

/* A relative symlink below the root: the SDK resolves it against its working
 * directory, not the link's (a bug); flow hashes the file it points to, as
 * the SDK hashes a copy of it. */
static void build_nested_link(void)
{
    struct tree *t = tree("nested_link");
    write_text(t->dir, "target.txt", "the target");
    write_text(t->dir, "sub/own.txt", "own");
    make_link("../target.txt", t->dir, "sub/l.txt");
    char *sdk = fixture("nested_link.sdk");
    write_text(sdk, "target.txt", "the target");
    write_text(sdk, "sub/own.txt", "own");
    write_text(sdk, "sub/l.txt", "the target");
    t->sdk_dir = sdk;
    t->count = 3;
}

static void build_empty(void)
{
    struct tree *t = tree("empty");
    make_dir(t->dir, "only/dirs");
    t->sdk_dir = xstrdup(t->dir);
    t->count = 0;
}

static void ask_trees(void)
{
    for (size_t i = 0; i < ntrees; i++)
        trees[i].answer = ask(trees[i].component ? "component" : "hash", trees[i].sdk_dir);
}

/* The part of a blob name after its directory. */
static const char *blob_rel(const char *name)
{
    const char *slash = strchr(name, '/');
    return slash ? slash + 1 : name;
}

static int compare_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void check_tree(const struct tree *t, const char *answer)
{
    struct snapshot s;
    char err[512] = "";
    int rc = snapshot_scan(t->dir, &t->opt, &s, err, sizeof err);
    if (rc != 0) fprintf(stderr, "  %s: %s\n", t->name, err);
    CHECK(rc == 0);
    if (rc != 0) return;
    char hex[SHA256_HEX_SIZE] = "";
    _Atomic uint64_t done = 0;
    rc = snapshot_hash(&s, NULL, &done, hex, err, sizeof err);
    if (rc != 0) fprintf(stderr, "  %s: %s\n", t->name, err);
    CHECK(rc == 0);
    CHECK(done == s.total_size);

    char sdk[100] = "", ordered[100] = "";
    int conflict = -1;
    size_t count = 0;
    if (sscanf(answer, "%99s %99s %d %zu", sdk, ordered, &conflict, &count) != 4) {
        fprintf(stderr, "  %s: the SDK said: %s\n", t->name, answer);
        CHECK(!"an answer from the SDK");
        snapshot_free(&s);
        return;
    }
    if (strcmp(hex, ordered) != 0 || s.count != count || s.count != t->count) {
        fprintf(stderr, "  %s: flow %s (%zu files), SDK %s (%zu files), expected %zu files; flow's files:\n",
                t->name, hex, s.count, ordered, count, t->count);
        for (size_t i = 0; i < s.count; i++) fprintf(stderr, "    %s %" PRIu64 "\n", s.files[i].rel, s.files[i].size);
    }
    CHECK_STR(hex, ordered);
    CHECK(s.count == count);
    CHECK(s.count == t->count);
    CHECK(conflict == t->conflict);
    /* Without rules that disagree, the SDK as it is gives the same hash. */
    if (conflict == 0) CHECK_STR(hex, sdk);

    /* Blob names and the indicator, as upload_directory has them. */
    const char *p = strchr(answer, '\n');
    p = p ? p + 1 : "";
    char **names = xcalloc(s.count + 1, sizeof *names);
    for (size_t i = 0; i < s.count; i++) names[i] = snapshot_blob_name(&s, i);
    if (s.count > 1) qsort(names, s.count, sizeof *names, compare_str);
    char *base = strrchr(t->dir, '/') + 1;
    for (size_t i = 0; i < s.count; i++) {
        CHECK(strncmp(names[i], base, strlen(base)) == 0 && names[i][strlen(base)] == '/');
    }
    CHECK_STR(s.dir_name, base);
    size_t n = strcspn(p, "\n");
    if (strncmp(p, "I ", 2) == 0) {
        char *sdk_indicator = xstrndup(p + 2, n - 2);
        if (s.count == 0) CHECK_STR(sdk_indicator, "-");
        else {
            char *mine = snapshot_blob_name(&s, s.indicator);
            CHECK_STR(blob_rel(mine), blob_rel(sdk_indicator));
            free(mine);
        }
        free(sdk_indicator);
        p += n + (p[n] == '\n');
    } else {
        CHECK(!"an indicator from the SDK");
    }
    size_t k = 0;
    for (; strncmp(p, "B ", 2) == 0; k++) {
        n = strcspn(p, "\n");
        char *name = xstrndup(p + 2, n - 2);
        if (k < s.count) CHECK_STR(blob_rel(names[k]), blob_rel(name));
        free(name);
        p += n + (p[n] == '\n');
    }
    CHECK(k == s.count);
    for (size_t i = 0; i < s.count; i++) free(names[i]);
    free(names);
    snapshot_free(&s);
}

/* ---- what only flow does --------------------------------------------------------------- */

static int scan_error(const char *dir, const struct snapshot_options *opt, char *err, size_t errlen)
{
    struct snapshot s;
    int rc = snapshot_scan(dir, opt, &s, err, errlen);
    if (rc == 0) snapshot_free(&s);
    return rc;
}

static void test_scan_errors(void)
{
    char err[512];
    char *d = fixture("err_loop");
    write_text(d, "a.txt", "a");
    make_dir(d, "sub");
    make_link("..", d, "sub/up");
    CHECK(scan_error(d, NULL, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "sub/up leads back to");
    CHECK_CONTAINS(err, "symlink loop");
    write_text(d, ".amlignore", "up\n");
    CHECK(scan_error(d, NULL, err, sizeof err) == 0);      /* ignored: never entered */
    free(d);

    d = fixture("err_dangling");
    make_link("nowhere", d, "gone.txt");
    CHECK(scan_error(d, NULL, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "gone.txt is a symlink to nothing");
    make_link("self", d, "self");
    write_text(d, ".amlignore", "gone.txt\n");
    CHECK(scan_error(d, NULL, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "self is a symlink loop");
    write_text(d, ".amlignore", "gone.txt\nself\n");
    CHECK(scan_error(d, NULL, err, sizeof err) == 0);
    free(d);

    d = fixture("err_fifo");
    char *fifo = at(d, "pipe");
    CHECK(mkfifo(fifo, 0644) == 0);
    CHECK(scan_error(d, NULL, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "pipe is not a regular file");
    free(fifo);
    free(d);

    d = fixture("err_names");
    write_text(d, "back\\slash", "x");
    CHECK(scan_error(d, NULL, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "has a '\\' in it");
    write_text(d, ".amlignore", "back*\n");
    CHECK(scan_error(d, NULL, err, sizeof err) == 0);
    write_text(d, "sub/not\xff-utf8", "x");
    CHECK(scan_error(d, NULL, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "is not UTF-8");
    write_text(d, ".amlignore", "back*\nsub/\n");
    write_text(d, "line\nbreak", "x");
    CHECK(scan_error(d, NULL, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "has a line break in it");
    free(d);

    d = fixture("err_rules");
    write_text(d, ".amlignore", "ok\n[z-a]\n");
    write_text(d, ".gitignore", "fine\n");
    CHECK(scan_error(d, NULL, err, sizeof err) == -1);
    CHECK_CONTAINS(err, ".amlignore:2: \"[z-a]\": bad character range");
    static const char *const bad_extra[] = { "!", NULL };
    struct snapshot_options opt = { .extra_rules = bad_extra };
    write_text(d, ".amlignore", "ok\n");
    CHECK(scan_error(d, &opt, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "extra rule");
    make_dir(d, "dir/.amlignore");
    CHECK(scan_error(d, NULL, err, sizeof err) == 0);      /* only the root's counts */
    free(d);

    d = fixture("err_amlignore_dir");
    make_dir(d, ".amlignore");
    CHECK(scan_error(d, NULL, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "cannot read");
    free(d);

    char *missing = at(tmp, "missing");
    CHECK(scan_error(missing, NULL, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "No such file");
    free(missing);
    char *file = at(outside, "target.txt");
    CHECK(scan_error(file, NULL, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "not a directory");
    free(file);

    if (geteuid() != 0) {                        /* root reads any directory */
        d = fixture("err_unreadable");
        make_dir(d, "locked");
        char *locked = at(d, "locked");
        CHECK(chmod(locked, 0) == 0);
        CHECK(scan_error(d, NULL, err, sizeof err) == -1);
        CHECK_CONTAINS(err, "cannot read the directory");
        CHECK_CONTAINS(err, "locked: Permission denied");
        write_text(d, ".amlignore", "locked/\n");
        CHECK(scan_error(d, NULL, err, sizeof err) == 0);
        CHECK(chmod(locked, 0755) == 0);
        free(locked);
        free(d);
    }
}

static void test_scan_details(void)
{
    char err[512];
    char *d = fixture("details");
    write_text(d, "b.txt", "bb");
    write_text(d, "A.txt", "a");
    write_text(d, "a.txt", "aa");
    make_link("b.txt", d, "link");
    make_link("b.txt", d, "link2");                    /* the SDK keeps one of two links to a file (a bug) */
    struct snapshot s;
    char *slashed = xasprintf("%s///", d);
    CHECK(snapshot_scan(slashed, NULL, &s, err, sizeof err) == 0);
    CHECK_STR(s.root, d);
    CHECK(s.ignore_file == NULL);
    CHECK(s.count == 5);
    CHECK(s.total_size == 1 + 2 + 2 + 2 + 2);
    if (s.count == 5) {
        CHECK_STR(s.files[0].rel, "A.txt");           /* "a.txt" twice: by bytes */
        CHECK_STR(s.files[1].rel, "a.txt");
        CHECK_STR(s.files[2].rel, "b.txt");
        CHECK_STR(s.files[3].rel, "link");
        CHECK(s.files[3].symlink && !s.files[2].symlink);
        CHECK(s.files[3].size == 2);
        char *path = at(d, "link");
        CHECK_STR(s.files[3].path, path);
        free(path);
        char *blob = snapshot_blob_name(&s, 3);
        CHECK_STR(blob, "details/link");
        free(blob);
        CHECK(s.indicator == 0);
    }
    snapshot_free(&s);
    free(slashed);

    /* .amlignore, then .gitignore: a dangling .amlignore does not exist (Path.exists()). */
    char *g = fixture("details_ignore");
    make_link("nowhere", g, ".amlignore");
    write_text(g, ".gitignore", "x\n.amlignore\n");
    write_text(g, "x", "x");
    write_text(g, "y", "y");
    CHECK(snapshot_scan(g, NULL, &s, err, sizeof err) == 0);
    CHECK_STR(s.ignore_file, ".gitignore");
    CHECK(s.count == 2);                               /* .gitignore y */
    snapshot_free(&s);
    char *aml = at(g, ".amlignore");
    CHECK(unlink(aml) == 0);
    write_text(g, ".amlignore", "y\n");
    CHECK(snapshot_scan(g, NULL, &s, err, sizeof err) == 0);
    CHECK_STR(s.ignore_file, ".amlignore");
    CHECK(s.count == 3);                               /* .amlignore .gitignore x */
    snapshot_free(&s);
    free(aml);
    free(g);

    /* The hash of no file at all is that of "0". */
    char *e = fixture("details_empty");
    CHECK(snapshot_scan(e, NULL, &s, err, sizeof err) == 0);
    char hex[SHA256_HEX_SIZE], zero[SHA256_HEX_SIZE];
    CHECK(snapshot_hash(&s, NULL, NULL, hex, err, sizeof err) == 0);
    sha256_hex("0", 1, zero);
    CHECK_STR(hex, zero);
    CHECK(s.indicator == s.count);
    snapshot_free(&s);
    free(e);
    free(d);
}

static void test_hash_consistency(void)
{
    char err[512];
    char *d = fixture("changing");
    write_text(d, "a.txt", "aaaa");
    write_text(d, "b.txt", "bbbb");
    struct snapshot s;
    char hex[SHA256_HEX_SIZE];
    CHECK(snapshot_scan(d, NULL, &s, err, sizeof err) == 0);
    /* The same bytes as the hash's definition, by hand. */
    char expected[SHA256_HEX_SIZE];
    const char *text = "2#a.txt#4#b.txt#4aaaabbbb";
    sha256_hex(text, strlen(text), expected);
    CHECK(snapshot_hash(&s, NULL, NULL, hex, err, sizeof err) == 0);
    CHECK_STR(hex, expected);

    atomic_bool stop = true;
    CHECK(snapshot_hash(&s, &stop, NULL, hex, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "cancelled");

    write_text(d, "b.txt", "bbbbb");                        /* grew */
    CHECK(snapshot_hash(&s, NULL, NULL, hex, err, sizeof err) == -2);
    CHECK_CONTAINS(err, "b.txt changed while flow read it for the code snapshot");
    snapshot_free(&s);

    CHECK(snapshot_scan(d, NULL, &s, err, sizeof err) == 0);
    char *a = at(d, "a.txt");
    struct timespec old[2] = { { 0, UTIME_OMIT }, { 1000000000, 0 } };
    CHECK(utimensat(AT_FDCWD, a, old, 0) == 0);        /* same size, other time: rewritten */
    CHECK(snapshot_hash(&s, NULL, NULL, hex, err, sizeof err) == -2);
    CHECK_CONTAINS(err, "a.txt changed");
    snapshot_free(&s);

    CHECK(snapshot_scan(d, NULL, &s, err, sizeof err) == 0);
    CHECK(unlink(a) == 0);
    CHECK(snapshot_hash(&s, NULL, NULL, hex, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "cannot read");
    CHECK_CONTAINS(err, "a.txt: No such file");
    snapshot_free(&s);
    free(a);
    free(d);
}

/* Scanning and hashing from several threads at once: nothing shared. */
struct thread_job { const char *dir; char hex[SHA256_HEX_SIZE]; int rc; };

static void *hash_thread(void *arg)
{
    struct thread_job *j = arg;
    struct snapshot s;
    char err[512];
    j->rc = snapshot_scan(j->dir, NULL, &s, err, sizeof err);
    if (j->rc == 0) {
        j->rc = snapshot_hash(&s, NULL, NULL, j->hex, err, sizeof err);
        snapshot_free(&s);
    }
    return NULL;
}

static void test_threads(void)
{
    struct thread_job jobs[4];
    pthread_t t[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (struct thread_job){ .dir = trees[i % 2].dir };
        CHECK(pthread_create(&t[i], NULL, hash_thread, &jobs[i]) == 0);
    }
    for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < 4; i++) {
        CHECK(jobs[i].rc == 0);
        CHECK_STR(jobs[i].hex, jobs[i % 2].hex);
    }
}

static void find_repo(void)
{
    char *root = check_repo_root();
    if (!root) { fprintf(stderr, "test_aml_snapshot: cannot find the repository from my own binary's path\n"); exit(2); }
    snprintf(repo, sizeof repo, "%s", root);
    free(root);
}

static void remove_tree(const char *dir)
{
    char *cmd = xasprintf("chmod -R u+rwx '%s' 2>/dev/null; rm -rf '%s'", dir, dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    free(cmd);
}

int main(void)
{
    find_repo();
    if (!mkdtemp(tmp)) { perror("mkdtemp"); return 1; }
    outside = fixture("outside");
    write_text(outside, "target.txt", "outside target");
    write_text(outside, "dir/f1.txt", "f1");
    write_text(outside, "dir/n/f2.txt", "f2");

    RUN(test_match_expectations);
    RUN(test_match_errors);
    RUN(test_dir_pruning);
    RUN(test_sort_key);
    RUN(test_scan_errors);
    RUN(test_scan_details);
    RUN(test_hash_consistency);

    build_basic();
    build_amlignore();
    build_gitignore();
    build_both();
    build_negated_dir();
    build_component();
    build_component_amlignore();
    build_flow_state();
    build_nested_link();
    build_empty();
    RUN(test_threads);
    ask_trees();
    size_t match_answer = nasked;
    ask_match();
    size_t lower_answer = nasked;
    ask_lower();
    size_t fuzz_answer = ask_fuzz();

    check_cur_failed = 0;
    bool sdk = run_sdk() && nanswers == nasked;
    if (!sdk) {
        check_failed++;
        fprintf(stderr, "FAIL the SDK's answers (%zu of %zu)\n", nanswers, nasked);
    } else {
        check_cur_failed = 0;
        check_match(answers[match_answer]);
        if (check_cur_failed) { check_failed++; fprintf(stderr, "FAIL the SDK's ignore rules\n"); }
        else check_passed++;
        check_cur_failed = 0;
        CHECK_STR(answers[lower_answer], "ok\n");
        if (check_cur_failed) { check_failed++; fprintf(stderr, "FAIL Python's str.lower\n"); }
        else check_passed++;
        check_cur_failed = 0;
        check_fuzz(answers[fuzz_answer]);
        if (check_cur_failed) { check_failed++; fprintf(stderr, "FAIL random rules against the SDK's\n"); }
        else check_passed++;
        for (size_t i = 0; i < ntrees; i++) {
            check_cur_failed = 0;
            check_tree(&trees[i], answers[trees[i].answer]);
            if (check_cur_failed) { check_failed++; fprintf(stderr, "FAIL tree %s\n", trees[i].name); }
            else check_passed++;
        }
    }
    for (size_t i = 0; i < nanswers; i++) free(answers[i]);
    free(answers);
    for (size_t i = 0; i < ntrees; i++) { free(trees[i].dir); free(trees[i].sdk_dir); }
    sb_release(&batch);
    for (size_t c = 0; c < FUZZ_SETS; c++) {
        free(fuzz_cases[c].rules);
        for (size_t k = 0; k < FUZZ_PATHS; k++) free(fuzz_cases[c].paths[k]);
    }
    free(outside);
    remove_tree(tmp);
    return CHECK_DONE("aml_snapshot");
}
