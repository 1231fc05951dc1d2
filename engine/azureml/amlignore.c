/* amlignore.c — the SDK's gitwildmatch rules as small automata (see amlignore.h).
 *
 * The SDK turns each rule into a regular expression (pathspec's
 * GitWildMatchPattern.pattern_to_regex) and matches it against the whole
 * path.  compile_rule follows that translation step by step, emitting for
 * each piece of the expression the equivalent automaton fragment:
 *   "(?:.+/)?" leading "**"        "(?:/.+)?" inner "**"      "/.*" trailing "**"
 *   "[^/]+" a segment "*"           "[^/]*" a '*' in a glob    "[^/]" a '?'
 *   "(?:/.*)?" after a last segment that is not "**" (a name matches all below it)
 *   ".+" the rule "**"; ".+/.*" the rule "**" then '/'.
 * Python's '.' does not match '\n'; snapshot.c refuses names with one, so
 * here '.' is any character. */
#include "amlignore.h"
#include "utf8.h"
#include "util.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum node_kind { N_CHAR, N_NOT_SLASH, N_ANY, N_CLASS, N_SPLIT, N_MATCH };

struct node {
    unsigned char kind;
    bool universal;      /* N_SPLIT looping over N_ANY with the other way to N_MATCH */
    int out, alt;        /* next node; N_SPLIT: the second way */
    uint32_t cp;         /* N_CHAR: the code point; N_CLASS: index into the rule's sets */
};

struct set {
    uint32_t (*ranges)[2];
    size_t n;
    bool negate;
};

struct rule {
    struct node *nodes;
    size_t n, cap;
    struct set *sets;
    size_t nsets, setcap;
    bool keep;           /* a '!' rule */
    /* The longest run of literal characters every match has (UTF-8): a path
     * without it cannot match, which spares most simulations ("*.pyc"). */
    char *need;
    size_t need_len;
    struct strbuf run;   /* while compiling: the current run */
};

struct amlignore {
    struct rule *rules;
    size_t n, cap;
    size_t max_nodes;
};

/* ---- UTF-8 ---------------------------------------------------------------- */

/* The code point at s (len > 0 bytes left) and its length.  A byte that does
 * not start a valid sequence stands for itself as U+DC80..U+DCFF, as Python's
 * surrogateescape gives a file name that is not UTF-8. */
static uint32_t utf8_next(const unsigned char *s, size_t len, size_t *used)
{
    uint32_t cp = utf8_decode(s, len, used);
    if (*used) return cp;
    *used = 1;
    return 0xDC00u + s[0];
}

/* Python's str.isspace(), which str.strip() removes. */
static bool py_space(uint32_t cp)
{
    return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0
        || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029
        || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

/* ---- building a rule's automaton ------------------------------------------ */

static int emit(struct rule *r, unsigned char kind, int out, int alt, uint32_t cp)
{
    ARRAY_GROW(r->nodes, r->n, r->cap);
    r->nodes[r->n] = (struct node){ .kind = kind, .out = out, .alt = alt, .cp = cp };
    return (int)r->n++;
}

/* Ends the current run of literal characters (any fragment but one character does). */
static void run_break(struct rule *r)
{
    if (r->run.len > r->need_len) {
        free(r->need);
        r->need = xstrndup(r->run.buf, r->run.len);
        r->need_len = r->run.len;
    }
    sb_truncate(&r->run, 0);
}

/* Each fragment goes on at the node right after its own, so a sequence of
 * fragments is a sequence of emits. */
static void frag_char(struct rule *r, uint32_t cp)
{
    int b = (int)r->n;
    emit(r, N_CHAR, b + 1, -1, cp);
    utf8_put(&r->run, cp);
}

static void frag_one(struct rule *r, unsigned char kind, uint32_t cp)
{
    run_break(r);
    int b = (int)r->n;
    emit(r, kind, b + 1, -1, cp);
}

/* "x*" (star) or "x+" (plus) over one-character kind x. */
static void frag_repeat(struct rule *r, unsigned char kind, bool at_least_one)
{
    run_break(r);
    int b = (int)r->n;
    if (at_least_one) {
        emit(r, kind, b + 1, -1, 0);
        emit(r, N_SPLIT, b, b + 2, 0);
    } else {
        emit(r, N_SPLIT, b + 1, b + 2, 0);
        emit(r, kind, b, -1, 0);
    }
}

/* "(?:.+/)?" */
static void frag_lead(struct rule *r)
{
    run_break(r);
    int b = (int)r->n;
    emit(r, N_SPLIT, b + 1, b + 4, 0);
    emit(r, N_ANY, b + 2, -1, 0);
    emit(r, N_SPLIT, b + 1, b + 3, 0);
    emit(r, N_CHAR, b + 4, -1, '/');
}

/* "(?:/.+)?" */
static void frag_inner(struct rule *r)
{
    run_break(r);
    int b = (int)r->n;
    emit(r, N_SPLIT, b + 1, b + 4, 0);
    emit(r, N_CHAR, b + 2, -1, '/');
    emit(r, N_ANY, b + 3, -1, 0);
    emit(r, N_SPLIT, b + 2, b + 4, 0);
}

/* "/.*", or "(?:/.*)?" when optional */
static void frag_below(struct rule *r, bool optional)
{
    run_break(r);
    int b = (int)r->n, c = optional ? b + 1 : b, end = c + 3;
    if (optional) emit(r, N_SPLIT, c, end, 0);
    emit(r, N_CHAR, c + 1, -1, '/');
    emit(r, N_SPLIT, c + 2, end, 0);
    emit(r, N_ANY, c + 1, -1, 0);
}

/* A bracket set, parsed as Python's re parses the class the SDK writes:
 * cp[0..n) is the text after '[' (and after a '!') up to and including its
 * ']', backslashes literal (the SDK doubles them). */
static int parse_set(struct rule *r, const uint32_t *cp, size_t n, bool negate, char *err, size_t errlen)
{
    struct set s = { NULL, 0, negate };
    size_t cap = 0, i = 0;
    for (;;) {
        if (i >= n) { free(s.ranges); errf(err, errlen, "unterminated character set"); return -1; }
        uint32_t lo = cp[i++], hi = lo;
        if (lo == ']' && s.n) break;
        bool last = false;
        if (i < n && cp[i] == '-') {
            i++;
            if (i >= n) { free(s.ranges); errf(err, errlen, "unterminated character set"); return -1; }
            uint32_t that = cp[i++];
            if (that == ']') {
                ARRAY_GROW(s.ranges, s.n, cap);
                s.ranges[s.n][0] = s.ranges[s.n][1] = lo;
                s.n++;
                lo = hi = '-';
                last = true;
            } else if (that < lo) {
                free(s.ranges);
                errf(err, errlen, "bad character range");
                return -1;
            } else {
                hi = that;
            }
        }
        ARRAY_GROW(s.ranges, s.n, cap);
        s.ranges[s.n][0] = lo;
        s.ranges[s.n][1] = hi;
        s.n++;
        if (last) break;
    }
    ARRAY_GROW(r->sets, r->nsets, r->setcap);
    r->sets[r->nsets] = s;
    frag_one(r, N_CLASS, (uint32_t)r->nsets++);
    return 0;
}

/* pathspec's _translate_segment_glob, emitting fragments. */
static int compile_glob(struct rule *r, const char *seg, size_t len, char *err, size_t errlen)
{
    uint32_t *cp = xmalloc((len + 1) * sizeof *cp);
    size_t n = 0;
    for (size_t i = 0, used; i < len; i += used)
        cp[n++] = utf8_next((const unsigned char *)seg + i, len - i, &used);
    bool escape = false;
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0;) {
        uint32_t c = cp[i++];
        if (escape) { escape = false; frag_char(r, c); }
        else if (c == '\\') escape = true;
        else if (c == '*') frag_repeat(r, N_NOT_SLASH, false);
        else if (c == '?') frag_one(r, N_NOT_SLASH, 0);
        else if (c == '[') {
            size_t j = i;
            if (j < n && cp[j] == '!') j++;
            if (j < n && cp[j] == ']') j++;
            while (j < n && cp[j] != ']') j++;
            if (j < n) {
                bool negate = cp[i] == '!';
                size_t from = negate ? i + 1 : i;
                rc = parse_set(r, cp + from, j + 1 - from, negate, err, errlen);
                i = j + 1;
            } else {
                frag_char(r, '[');
            }
        } else frag_char(r, c);
    }
    if (rc == 0 && escape) { errf(err, errlen, "'\\' at the end escapes nothing"); rc = -1; }
    free(cp);
    return rc;
}

struct seg { const char *s; size_t len; };

static bool seg_is(struct seg g, const char *what)
{
    return g.len == strlen(what) && memcmp(g.s, what, g.len) == 0;
}

/* pathspec's pattern_to_regex for a stripped, non-comment, non-empty line
 * other than "/".  0, or -1 with why in err. */
static int compile_rule(struct rule *r, const char *text, size_t len, char *err, size_t errlen)
{
    if (len && text[0] == '!') { r->keep = true; text++; len--; }

    struct seg *segs = NULL;
    size_t n = 0, cap = 0;
    for (size_t start = 0, i = 0;; i++) {
        if (i == len || text[i] == '/') {
            ARRAY_GROW(segs, n, cap);
            segs[n++] = (struct seg){ text + start, i - start };
            start = i + 1;
            if (i == len) break;
        }
    }
    for (size_t i = n - 1; i > 0; i--)           /* "**" twice or more in a row is one */
        if (seg_is(segs[i - 1], "**") && seg_is(segs[i], "**")) {
            memmove(segs + i, segs + i + 1, (n - i - 1) * sizeof *segs);
            n--;
        }
    /* "**" then '/': everything below the root's own files, which no
     * normalisation expresses. */
    bool override = n == 2 && seg_is(segs[0], "**") && segs[1].len == 0;
    if (segs[0].len == 0) {                      /* "/x": anchored at the root */
        memmove(segs, segs + 1, (n - 1) * sizeof *segs);
        n--;
    } else if (n == 1 || (n == 2 && segs[1].len == 0)) {
        if (!seg_is(segs[0], "**")) {           /* "x" and "x/": at any depth */
            ARRAY_GROW(segs, n, cap);
            memmove(segs + 1, segs, n * sizeof *segs);
            segs[0] = (struct seg){ "**", 2 };
            n++;
        }
    }
    if (n == 0) { free(segs); errf(err, errlen, "invalid rule"); return -1; }
    if (segs[n - 1].len == 0 && n > 1) segs[n - 1] = (struct seg){ "**", 2 };   /* "x/": below x */

    int rc = 0;
    if (override) {
        frag_repeat(r, N_ANY, true);
        frag_char(r, '/');
        frag_repeat(r, N_ANY, false);
    } else {
        bool need_slash = false;
        size_t end = n - 1;
        for (size_t i = 0; i < n && rc == 0; i++) {
            if (seg_is(segs[i], "**")) {
                if (i == 0 && i == end) frag_repeat(r, N_ANY, true);
                else if (i == 0) { frag_lead(r); need_slash = false; }
                else if (i == end) frag_below(r, false);
                else { frag_inner(r); need_slash = true; }
                continue;
            }
            if (need_slash) frag_char(r, '/');
            if (seg_is(segs[i], "*")) frag_repeat(r, N_NOT_SLASH, true);
            else rc = compile_glob(r, segs[i].s, segs[i].len, err, errlen);
            if (i == end) frag_below(r, true);
            need_slash = true;
        }
    }
    free(segs);
    if (rc != 0) return -1;
    run_break(r);
    sb_release(&r->run);
    int match = emit(r, N_MATCH, -1, -1, 0);
    for (size_t i = 0; i < r->n; i++) {
        struct node *s = &r->nodes[i];
        if (s->kind == N_SPLIT && s->alt == match && r->nodes[s->out].kind == N_ANY
            && r->nodes[s->out].out == (int)i)
            s->universal = true;
    }
    return 0;
}

static void rule_release(struct rule *r)
{
    free(r->need);
    sb_release(&r->run);
    for (size_t i = 0; i < r->nsets; i++) free(r->sets[i].ranges);
    free(r->sets);
    free(r->nodes);
}

/* ---- the rule list ---------------------------------------------------------- */

struct amlignore *amlignore_new(void)
{
    return xcalloc(1, sizeof(struct amlignore));
}

void amlignore_free(struct amlignore *ig)
{
    if (!ig) return;
    for (size_t i = 0; i < ig->n; i++) rule_release(&ig->rules[i]);
    free(ig->rules);
    free(ig);
}

size_t amlignore_rule_count(const struct amlignore *ig)
{
    return ig->n;
}

/* One line as Python read it, without its line break. */
static int add_line(struct amlignore *ig, const char *line, size_t len, char *err, size_t errlen)
{
    const unsigned char *p = (const unsigned char *)line;
    size_t b = 0, e = len, used;
    while (b < e && py_space(utf8_next(p + b, e - b, &used))) b += used;
    /* Trailing white space goes, but for one character escaped by a '\'
     * (git's rule; the SDK would strip it and then fail on the '\'). */
    size_t keep = b;
    for (size_t i = b; i < e; i += used) {
        uint32_t c = utf8_next(p + i, e - i, &used);
        if (c == '\\' && i + 1 < e) {
            size_t used2;
            utf8_next(p + i + 1, e - i - 1, &used2);
            used += used2;
            keep = i + used;
        } else if (!py_space(c)) {
            keep = i + used;
        }
    }
    e = keep;
    if (b == e || line[b] == '#' || (e - b == 1 && line[b] == '/')) return 0;

    struct rule r = {0};
    if (compile_rule(&r, line + b, e - b, err, errlen) != 0) { rule_release(&r); return -1; }
    ARRAY_GROW(ig->rules, ig->n, ig->cap);
    ig->rules[ig->n++] = r;
    if (r.n > ig->max_nodes) ig->max_nodes = r.n;
    return 0;
}

int amlignore_add_rule(struct amlignore *ig, const char *rule, char *err, size_t errlen)
{
    size_t len = strlen(rule), bad;
    if (!utf8_valid(rule, len, &bad)) { errf(err, errlen, "not UTF-8"); return -1; }
    char why[200];
    if (add_line(ig, rule, len, why, sizeof why) != 0) {
        errf(err, errlen, "\"%s\": %s", rule, why);
        return -1;
    }
    return 0;
}

int amlignore_add_text(struct amlignore *ig, const char *text, size_t len, const char *name,
                       char *err, size_t errlen)
{
    size_t bad, lineno = 1;
    if (!utf8_valid(text, len, &bad)) {
        for (size_t i = 0; i < bad; i++)
            if (text[i] == '\n' || (text[i] == '\r' && (i + 1 >= len || text[i + 1] != '\n'))) lineno++;
        errf(err, errlen, "%s:%zu: not UTF-8 text", name, lineno);
        return -1;
    }
    for (size_t start = 0; start < len; lineno++) {
        size_t end = start;
        while (end < len && text[end] != '\n' && text[end] != '\r') end++;
        char why[200];
        if (add_line(ig, text + start, end - start, why, sizeof why) != 0) {
            errf(err, errlen, "%s:%zu: \"%.*s\": %s", name, lineno, (int)(end - start), text + start, why);
            return -1;
        }
        if (end < len && text[end] == '\r' && end + 1 < len && text[end + 1] == '\n') end++;
        start = end + 1;
    }
    return 0;
}

/* ---- matching ---------------------------------------------------------------- */

struct sim {
    int *cur, *next, *stack;
    unsigned *mark;
    size_t ncur, nnext;
    unsigned gen;
};

static void add_state(const struct rule *r, struct sim *m, int *list, size_t *n, int s)
{
    size_t top = 0;
    m->stack[top++] = s;
    while (top) {
        int x = m->stack[--top];
        if (m->mark[x] == m->gen) continue;
        m->mark[x] = m->gen;
        list[(*n)++] = x;
        if (r->nodes[x].kind == N_SPLIT) {
            m->stack[top++] = r->nodes[x].alt;
            m->stack[top++] = r->nodes[x].out;
        }
    }
}

static bool set_has(const struct set *s, uint32_t c)
{
    bool in = false;
    for (size_t i = 0; i < s->n && !in; i++) in = c >= s->ranges[i][0] && c <= s->ranges[i][1];
    return in != s->negate;
}

struct outcome { bool match, live, universal; };

/* Runs rule r over all of text; what its automaton can do afterwards. */
static struct outcome run(const struct rule *r, struct sim *m, const char *text, size_t len)
{
    const unsigned char *p = (const unsigned char *)text;
    m->gen++;
    m->ncur = 0;
    add_state(r, m, m->cur, &m->ncur, 0);
    for (size_t i = 0, used; i < len && m->ncur; i += used) {
        uint32_t c = utf8_next(p + i, len - i, &used);
        m->gen++;
        m->nnext = 0;
        for (size_t k = 0; k < m->ncur; k++) {
            const struct node *x = &r->nodes[m->cur[k]];
            bool ok = x->kind == N_CHAR ? c == x->cp
                    : x->kind == N_NOT_SLASH ? c != '/'
                    : x->kind == N_ANY ? true
                    : x->kind == N_CLASS ? set_has(&r->sets[x->cp], c)
                    : false;
            if (ok) add_state(r, m, m->next, &m->nnext, x->out);
        }
        int *t = m->cur; m->cur = m->next; m->next = t;
        m->ncur = m->nnext;
    }
    struct outcome o = {0};
    for (size_t k = 0; k < m->ncur; k++) {
        const struct node *x = &r->nodes[m->cur[k]];
        if (x->kind == N_MATCH) o.match = true;
        else if (x->kind != N_SPLIT) o.live = true;
        if (x->universal) o.universal = true;
    }
    return o;
}

/* Scratch space for one call: on the stack for rules of ordinary size, so
 * that checking a file allocates nothing.  A node enters a step's list at
 * most once, so each list holds at most `nodes`; the closure's stack gets at
 * most two pushes per N_SPLIT and the first one. */
#define SIM_SMALL 256

struct sim_space {
    struct sim m;
    int small_i[4 * SIM_SMALL + 1];
    unsigned small_u[SIM_SMALL];
    void *heap;
};

static void sim_init(struct sim_space *sp, size_t nodes)
{
    sp->heap = NULL;
    int *ints = sp->small_i;
    unsigned *marks = sp->small_u;
    size_t cap = SIM_SMALL;
    if (nodes > SIM_SMALL) {
        cap = nodes;
        sp->heap = xmalloc((4 * cap + 1) * sizeof(int) + cap * sizeof(unsigned));
        ints = sp->heap;
        marks = (unsigned *)(ints + 4 * cap + 1);
    }
    sp->m = (struct sim){ .cur = ints, .next = ints + cap, .stack = ints + 2 * cap, .mark = marks };
    memset(marks, 0, cap * sizeof *marks);
}

bool amlignore_excludes(const struct amlignore *ig, const char *rel)
{
    if (!ig || ig->n == 0) return false;
    struct sim_space sp;
    sim_init(&sp, ig->max_nodes);
    size_t len = strlen(rel);
    bool excluded = false;
    for (size_t i = ig->n; i-- > 0;) {            /* the last match decides */
        const struct rule *r = &ig->rules[i];
        if (r->need_len && !memmem(rel, len, r->need, r->need_len)) continue;
        if (run(r, &sp.m, rel, len).match) { excluded = !r->keep; break; }
    }
    free(sp.heap);
    return excluded;
}

bool amlignore_excludes_dir(const struct amlignore *ig, const char *rel)
{
    if (!ig || ig->n == 0) return false;
    struct sim_space sp;
    sim_init(&sp, ig->max_nodes);
    char *below = xasprintf("%s/", rel);
    size_t len = strlen(below);
    /* The last rule that matches everything below rel decides for all of
     * it, unless a '!' rule after it might match something there. */
    bool excluded = false;
    for (size_t i = ig->n; i-- > 0;) {
        struct outcome o = run(&ig->rules[i], &sp.m, below, len);
        if (o.universal) { excluded = !ig->rules[i].keep; break; }
        if (ig->rules[i].keep && (o.live || o.match)) break;
    }
    free(below);
    free(sp.heap);
    return excluded;
}
