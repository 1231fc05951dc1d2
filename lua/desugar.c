/* desugar.c — rewrites `distributed_job<...>` annotations into plain Lua (see desugar.h).
 *
 * One left-to-right pass with a lexer that knows just enough of Lua's to skip
 * strings, long strings, comments and numerals; the text between rewrites is
 * copied in bulk. At an annotation's '<' we look ahead once, to find its '>'
 * (find_close) and to read a function header that may follow (read_function),
 * then keep lexing, rewriting the '>' when the pass reaches it. The look-ahead
 * covers text the pass walks anyway, so the cost stays linear (times the
 * nesting depth for annotations written inside other annotations).
 *
 * Line numbers matter more than layout: text we drop keeps its line breaks and
 * text we insert has none, so every token stays on the line it was written on. */
#include "desugar.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EOS (-1)        /* what at() reads past the end of the source */
#define MAXNEST 32      /* annotations inside annotations; deeper is surely a mistake */

static const char ANNOTATION[] = "distributed_job";
#define ANNOTATION_LEN (sizeof ANNOTATION - 1)

static const char UNTERMINATED[] =
    "unterminated distributed_job<...> annotation (no matching '>')";
static const char NO_NAME[] = "expected a function name after distributed_job<...>";
static const char NO_LPAREN[] =
    "expected '(' after the function name in a distributed_job<...> declaration";
static const char BAD_PREFIX[] =
    "distributed_job<...> before a function needs a plain name, like flow.distributed_job";
static const char TOO_DEEP[] = "distributed_job<...> annotations nested too deeply";

/* What follows the annotation, and so what it becomes (J stands for distributed_job). */
typedef enum {
    ANN_PLAIN,  /* J<A> ...                    ->  J{A} ...                           */
    ANN_ANON,   /* J<A> function(              ->  J{A} .. function(                  */
    ANN_NAMED,  /* J<A> function N(            ->  N = J{A} .. function(              */
    ANN_LOCAL   /* J<A> local function N(      ->  local N; N = J{A} .. function(     */
} AnnKind;

typedef struct {
    AnnKind kind;
    size_t close;       /* the '>' that ends the annotation */
    size_t local_at;    /* 'local' (ANN_LOCAL) */
    size_t func_at;     /* 'function' (all but ANN_PLAIN) */
    size_t name_at;     /* the function's name (ANN_NAMED, ANN_LOCAL) ... */
    size_t lparen;      /* ... up to the '(' of its parameter list */
    int method;         /* `function A:b(` gets an explicit self */
    int no_params;      /* `()`: self needs no comma */
} Annotation;

/* Token kinds the rewrite cares about; strings, numerals and most operators are T_OTHER. */
typedef enum {
    T_SPACE, T_COMMENT, T_NAME, T_DOT, T_COLON, T_OPEN, T_CLOSE, T_GT, T_OTHER
} Token;

/* What came before, to find where a qualified name like `flow.distributed_job` starts. */
typedef enum { LAST_OTHER, LAST_NAME, LAST_SEP } Last;

typedef struct {
    const char *src;
    size_t n;
    char *out;                  /* the result, always with room for a final NUL */
    size_t len, cap;
    size_t copied;              /* src[0, copied) is in the output (or dropped on purpose) */
    Annotation open[MAXNEST];   /* annotations whose '>' is still ahead, innermost last */
    int nopen;
    Last last;
    size_t chain_start;         /* first name of the current `a.b:c` chain ... */
    int chain_ok;               /* ... if the chain starts with a name at all */
    int failed;
    int err_line;
    char *err;
    size_t errlen;
} Desugar;


/* ---------- characters ---------- */

static int at(const Desugar *D, size_t p)
{
    return p < D->n ? (unsigned char)D->src[p] : EOS;
}

static int is_break(int c) { return c == '\n' || c == '\r'; }

static int is_space(int c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

static int is_digit(int c) { return c >= '0' && c <= '9'; }

static int is_xdigit(int c)
{
    return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* ASCII only, like Lua built without LUA_UCID; never the C locale's idea of a letter. */
static int is_name_start(int c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static int is_name_char(int c) { return is_name_start(c) || is_digit(c); }


/* ---------- errors and output ---------- */

/* The line of position pos, counting "\n", "\r", "\r\n" and "\n\r" as one break, as Lua does. */
static int line_at(const Desugar *D, size_t pos)
{
    int line = 1;
    size_t p = 0;
    while (p < pos) {
        int c = at(D, p++);
        if (!is_break(c)) continue;
        if (is_break(at(D, p)) && at(D, p) != c) p++;
        if (line < INT_MAX) line++;
    }
    return line;
}

/* Records the first error only: later ones are consequences of it. */
static void fail(Desugar *D, size_t pos, const char *msg)
{
    if (D->failed) return;
    D->failed = 1;
    D->err_line = line_at(D, pos);
    if (D->err && D->errlen > 0) snprintf(D->err, D->errlen, "%s", msg);
}

static void fail_memory(Desugar *D)
{
    if (D->failed) return;
    D->failed = 1;
    D->err_line = 0;
    if (D->err && D->errlen > 0) snprintf(D->err, D->errlen, "out of memory");
}

/* Makes room for `extra` more bytes plus the final NUL. */
static int reserve(Desugar *D, size_t extra)
{
    size_t cap = D->cap;
    char *out;
    if (extra < cap - D->len) return 1;
    if (extra >= SIZE_MAX - D->len) { fail_memory(D); return 0; }
    while (extra >= cap - D->len) {
        if (cap > SIZE_MAX / 2) { cap = SIZE_MAX; break; }
        cap = cap ? cap * 2 : 64;
    }
    out = realloc(D->out, cap);
    if (!out) { fail_memory(D); return 0; }
    D->out = out;
    D->cap = cap;
    return 1;
}

static void put(Desugar *D, const char *s, size_t k)
{
    if (D->failed || k == 0 || !reserve(D, k)) return;
    memcpy(D->out + D->len, s, k);
    D->len += k;
}

static void put_str(Desugar *D, const char *s) { put(D, s, strlen(s)); }

/* Copies the source up to (not including) position upto. */
static void flush(Desugar *D, size_t upto)
{
    put(D, D->src + D->copied, upto - D->copied);
    D->copied = upto;
}

/* Leaves src[p, e) out of the output but keeps its line breaks. Dropped text
 * right after a break becomes one space, so a "\n" and a "\r" that were on
 * different lines cannot fuse into a single "\n\r" break. */
static void put_dropped(Desugar *D, size_t p, size_t e)
{
    for (; p < e; p++) {
        char c = D->src[p];
        if (is_break((unsigned char)c)) put(D, &c, 1);
        else if (D->len > 0 && is_break((unsigned char)D->out[D->len - 1])) put(D, " ", 1);
    }
}


/* ---------- lexing ---------- */

static size_t skip_name(const Desugar *D, size_t p)
{
    while (is_name_char(at(D, p))) p++;
    return p;
}

/* Lua's read_numeral: hex digits, dots and signed exponents. A numeral that
 * runs into a name is malformed; swallow the name too, as Lua's error does. */
static size_t skip_numeral(const Desugar *D, size_t p)
{
    int e1 = 'e', e2 = 'E';
    if (at(D, p) == '0' && (at(D, p + 1) == 'x' || at(D, p + 1) == 'X')) {
        e1 = 'p'; e2 = 'P';
        p += 2;
    }
    for (;;) {
        int c = at(D, p);
        if (c == e1 || c == e2) {
            p++;
            if (at(D, p) == '+' || at(D, p) == '-') p++;
        } else if (is_xdigit(c) || c == '.') {
            p++;
        } else {
            break;
        }
    }
    return skip_name(D, p);
}

/* At '[': the level of the long bracket "[==[" that starts at p plus one
 * ("[[" gives 1), or 0 when p starts no long bracket. */
static size_t long_open(const Desugar *D, size_t p)
{
    size_t q = p + 1;
    while (at(D, q) == '=') q++;
    return at(D, q) == '[' ? q - p : 0;
}

/* Skips a long string or comment whose opening bracket (of long_open() sep)
 * starts at p. Unclosed: returns the end of the source and sets *ok = 0. */
static size_t skip_long(const Desugar *D, size_t p, size_t sep, int *ok)
{
    const char *s = D->src, *hit;
    p += sep + 1;
    while (p < D->n && (hit = memchr(s + p, ']', D->n - p)) != NULL) {
        size_t bracket = (size_t)(hit - s), q = bracket + 1;
        while (at(D, q) == '=') q++;
        if (at(D, q) == ']' && q - bracket == sep) return q + 1;
        p = bracket + 1;
    }
    *ok = 0;
    return D->n;
}

/* Skips the short string whose quote is at p. An unescaped line break or the
 * end of the source leaves it unfinished: stop there and set *ok = 0. */
static size_t skip_string(const Desugar *D, size_t p, int *ok)
{
    int quote = at(D, p++);
    for (;;) {
        int c = at(D, p);
        if (c == quote) return p + 1;
        if (c == EOS || is_break(c)) { *ok = 0; return p; }
        p++;
        if (c != '\\') continue;
        c = at(D, p);                           /* the escaped character */
        if (is_break(c)) {                      /* one break, maybe "\r\n" */
            p++;
            if (is_break(at(D, p)) && at(D, p) != c) p++;
        } else if (c == 'z') {                  /* "\z" skips spaces and breaks */
            p++;
            while (is_space(at(D, p))) p++;
        } else if (c != EOS) {
            p++;
        }
    }
}

/* Skips the comment whose "--" is at p: long if a long bracket follows,
 * else to the end of the line (not including the break). */
static size_t skip_comment(const Desugar *D, size_t p, int *ok)
{
    size_t sep;
    p += 2;
    if (at(D, p) == '[' && (sep = long_open(D, p)) != 0) return skip_long(D, p, sep, ok);
    while (p < D->n && !is_break(at(D, p))) p++;
    return p;
}

/* Skips whitespace and comments. */
static size_t skip_blank(const Desugar *D, size_t p, int *ok)
{
    for (;;) {
        int c = at(D, p);
        if (is_space(c)) p++;
        else if (c == '-' && at(D, p + 1) == '-') p = skip_comment(D, p, ok);
        else return p;
    }
}

/* Reads the token at p (p < D->n): sets *kind and returns where it ends.
 * Sets *ok = 0 for an unfinished string, long string or long comment. */
static size_t lex(const Desugar *D, size_t p, Token *kind, int *ok)
{
    int c = at(D, p);
    size_t sep;
    *kind = T_OTHER;
    switch (c) {
    case ' ': case '\t': case '\n': case '\r': case '\v': case '\f':
        *kind = T_SPACE;
        while (is_space(at(D, ++p))) {}
        return p;
    case '-':
        if (at(D, p + 1) != '-') return p + 1;
        *kind = T_COMMENT;
        return skip_comment(D, p, ok);
    case '"': case '\'':
        return skip_string(D, p, ok);
    case '[':
        if ((sep = long_open(D, p)) != 0) return skip_long(D, p, sep, ok);
        *kind = T_OPEN;
        return p + 1;
    case '(': case '{':
        *kind = T_OPEN;
        return p + 1;
    case ')': case '}': case ']':
        *kind = T_CLOSE;
        return p + 1;
    case '>':
        if (at(D, p + 1) == '=') return p + 2;
        *kind = T_GT;
        return p + 1;
    case '.':
        if (at(D, p + 1) == '.') return at(D, p + 2) == '.' ? p + 3 : p + 2;
        if (is_digit(at(D, p + 1))) return skip_numeral(D, p);
        *kind = T_DOT;
        return p + 1;
    case ':':
        if (at(D, p + 1) == ':') return p + 2;
        *kind = T_COLON;
        return p + 1;
    default:
        if (is_name_start(c)) { *kind = T_NAME; return skip_name(D, p); }
        if (is_digit(c)) return skip_numeral(D, p);
        return p + 1;
    }
}

/* Is the name token at p exactly `word`? */
static int word_at(const Desugar *D, size_t p, const char *word)
{
    size_t k = strlen(word);
    return D->n - p >= k && memcmp(D->src + p, word, k) == 0 && !is_name_char(at(D, p + k));
}

static int is_reserved(const Desugar *D, size_t p)
{
    static const char *const words[] = {
        "and", "break", "do", "else", "elseif", "end", "false", "for", "function",
        "goto", "if", "in", "local", "nil", "not", "or", "repeat", "return", "then",
        "true", "until", "while"
    };
    for (size_t i = 0; i < sizeof words / sizeof *words; i++)
        if (word_at(D, p, words[i])) return 1;
    return 0;
}

/* A name that can be (part of) a function's name. */
static int plain_name_at(const Desugar *D, size_t p)
{
    return is_name_start(at(D, p)) && !is_reserved(D, p);
}


/* ---------- finding annotations ---------- */

static int is_annotation(const Desugar *D, size_t p, size_t e)
{
    return e - p == ANNOTATION_LEN && memcmp(D->src + p, ANNOTATION, ANNOTATION_LEN) == 0;
}

/* After the name `distributed_job` that ends at e: does an annotation's '<'
 * follow? Stores its position in *lt. `<=` and `<<` are operators, and
 * `local distributed_job <const>` (or <close>) is Lua 5.4's own attribute. */
static int find_open(const Desugar *D, size_t e, size_t *lt)
{
    size_t p = e, q;
    int ok = 1;
    while (is_space(at(D, p))) p++;
    if (at(D, p) != '<' || at(D, p + 1) == '=' || at(D, p + 1) == '<') return 0;
    q = skip_blank(D, p + 1, &ok);
    if (word_at(D, q, "const") || word_at(D, q, "close")) {
        if (at(D, skip_blank(D, q + 5, &ok)) == '>') return 0;
    }
    *lt = p;
    return 1;
}

/* Finds the '>' that ends the annotation whose '<' is at lt (its name at dj):
 * the first '>' outside brackets, strings and comments that is not a '>='.
 * Annotations nested in the arguments are skipped whole. A closing bracket
 * that was opened before the '<' means the '>' is missing. */
static int find_close(Desugar *D, size_t dj, size_t lt, int nest, size_t *gt)
{
    size_t p = lt + 1;
    int depth = 0, ok = 1;
    if (nest >= MAXNEST) { fail(D, dj, TOO_DEEP); return 0; }
    while (ok && p < D->n) {
        Token kind;
        size_t e = lex(D, p, &kind, &ok), inner_lt, inner_gt;
        if (kind == T_GT && depth == 0) { *gt = p; return 1; }
        if (kind == T_OPEN) {
            depth++;
        } else if (kind == T_CLOSE) {
            if (depth-- == 0) break;
        } else if (kind == T_NAME && is_annotation(D, p, e) && find_open(D, e, &inner_lt)) {
            if (!find_close(D, p, inner_lt, nest + 1, &inner_gt)) return 0;
            e = inner_gt + 1;
        }
        p = e;
    }
    fail(D, dj, UNTERMINATED);
    return 0;
}

/* Reads what follows the annotation's '>': `function`, `local function` and a
 * function header fill in *a; anything else leaves ANN_PLAIN. Returns an error
 * message (with its position in *where) or NULL. */
static const char *read_function(const Desugar *D, Annotation *a, size_t *where, int *ok)
{
    size_t p = skip_blank(D, a->close + 1, ok);
    int is_local = 0;
    a->kind = ANN_PLAIN;
    if (word_at(D, p, "local")) {
        size_t f = skip_blank(D, p + 5, ok);
        if (!word_at(D, f, "function")) return NULL;
        a->local_at = p;
        p = f;
        is_local = 1;
    } else if (!word_at(D, p, "function")) {
        return NULL;
    }
    a->func_at = p;
    p = skip_blank(D, p + 8, ok);
    if (at(D, p) == '(' && !is_local) { a->kind = ANN_ANON; return NULL; }
    *where = p;
    if (!plain_name_at(D, p)) return NO_NAME;
    a->name_at = p;
    p = skip_blank(D, skip_name(D, p), ok);
    /* `function a.b.c(` or `function a.b:c(`; a local function has one name */
    while (!is_local && (at(D, p) == '.' || at(D, p) == ':') && at(D, p + 1) != at(D, p)) {
        int colon = at(D, p) == ':';
        *where = p = skip_blank(D, p + 1, ok);
        if (!plain_name_at(D, p)) return NO_NAME;
        p = skip_blank(D, skip_name(D, p), ok);
        if (colon) { a->method = 1; break; }
    }
    *where = p;
    if (at(D, p) != '(') return NO_LPAREN;
    a->lparen = p;
    a->no_params = at(D, skip_blank(D, p + 1, ok)) == ')';
    a->kind = is_local ? ANN_LOCAL : ANN_NAMED;
    return NULL;
}

static int read_header(Desugar *D, Annotation *a)
{
    int ok = 1;
    size_t where = a->close;
    const char *msg = read_function(D, a, &where, &ok);
    if (!ok) {              /* an unfinished comment: Lua's parser says so better */
        a->kind = ANN_PLAIN;
        return 1;
    }
    if (msg) { fail(D, where, msg); return 0; }
    return 1;
}


/* ---------- rewriting ---------- */

/* The function's name with blanks and comments left out and ':' as '.'. */
static void put_name(Desugar *D, const Annotation *a)
{
    size_t p = a->name_at;
    while (p < a->lparen) {
        Token kind;
        int ok = 1;
        size_t e = lex(D, p, &kind, &ok);
        if (kind == T_NAME) put(D, D->src + p, e - p);
        else if (kind == T_DOT || kind == T_COLON) put(D, ".", 1);
        p = e;
    }
}

/* At the name `distributed_job` (dj) whose annotation opens at lt: writes
 * "N = " (or "local N; N = ") in front of the qualified name, and '{' for '<'.
 * Returns where the pass goes on: inside the annotation. */
static size_t open_annotation(Desugar *D, size_t dj, size_t lt)
{
    Annotation a;
    memset(&a, 0, sizeof a);
    if (!find_close(D, dj, lt, 0, &a.close) || !read_header(D, &a)) return D->n;
    if (D->nopen == MAXNEST) { fail(D, dj, TOO_DEEP); return D->n; }
    if (a.kind == ANN_NAMED || a.kind == ANN_LOCAL) {
        if (!D->chain_ok || D->chain_start < D->copied) { fail(D, dj, BAD_PREFIX); return D->n; }
        flush(D, D->chain_start);
        if (a.kind == ANN_LOCAL) {      /* declared first, so the body can recurse */
            put_str(D, "local ");
            put_name(D, &a);
            put_str(D, "; ");
        }
        put_name(D, &a);
        put_str(D, " = ");
    }
    flush(D, lt);
    put(D, "{", 1);
    D->copied = lt + 1;
    D->open[D->nopen++] = a;
    D->last = LAST_OTHER;
    return lt + 1;
}

/* At the innermost open annotation's '>': writes '}' and, before a function,
 * turns `[local] function NAME(` into `.. function(` (adding self to a method).
 * Returns where the pass goes on. */
static size_t close_annotation(Desugar *D)
{
    Annotation a = D->open[--D->nopen];
    flush(D, a.close);
    put(D, "}", 1);
    D->copied = a.close + 1;
    D->last = LAST_OTHER;
    if (a.kind == ANN_PLAIN) return D->copied;
    flush(D, a.kind == ANN_LOCAL ? a.local_at : a.func_at);    /* blanks and comments */
    if (a.kind == ANN_LOCAL) put_dropped(D, a.local_at, a.func_at);
    put_str(D, ".. ");
    D->copied = a.func_at;
    if (a.kind == ANN_ANON) return D->copied;
    put_str(D, "function");
    put_dropped(D, a.func_at + 8, a.lparen);
    put(D, "(", 1);
    if (a.method) put_str(D, a.no_params ? "self" : "self, ");
    D->copied = a.lparen + 1;
    return D->copied;
}

/* A name token src[p, e): extends or starts a qualified-name chain, and may open an annotation. */
static size_t on_name(Desugar *D, size_t p, size_t e)
{
    size_t lt;
    if (D->last != LAST_SEP) {
        D->chain_start = p;
        D->chain_ok = 1;
    }
    D->last = LAST_NAME;
    if (!is_annotation(D, p, e) || !find_open(D, e, &lt)) return e;
    return open_annotation(D, p, lt);
}

/* '.' or ':' continues a chain only after a name (not after `t[1]` or `f()`). */
static void on_separator(Desugar *D)
{
    if (D->last != LAST_NAME) D->chain_ok = 0;
    D->last = LAST_SEP;
}

/* luaL_loadbuffer does not skip a first line starting with '#' as
 * luaL_loadfile does: make it a comment, in place. */
static size_t skip_shebang(Desugar *D)
{
    size_t p = 0;
    if (at(D, 0) != '#') return 0;
    put_str(D, "--");
    while (p < D->n && !is_break(at(D, p))) p++;
    return p;
}

static void desugar(Desugar *D)
{
    size_t p = skip_shebang(D);
    while (p < D->n && !D->failed) {
        Token kind;
        int ok = 1;             /* unfinished strings out here are Lua's to report */
        size_t e = lex(D, p, &kind, &ok);
        switch (kind) {
        case T_SPACE: case T_COMMENT:
            break;              /* `flow . distributed_job` is still one chain */
        case T_NAME:
            e = on_name(D, p, e);
            break;
        case T_DOT: case T_COLON:
            on_separator(D);
            break;
        case T_GT:
            if (D->nopen > 0 && D->open[D->nopen - 1].close == p) e = close_annotation(D);
            D->last = LAST_OTHER;
            break;
        default:
            D->last = LAST_OTHER;
            break;
        }
        p = e;
    }
    if (!D->failed && D->nopen > 0)     /* cannot happen: find_close saw this '>' */
        fail(D, D->open[0].close, "internal error: an annotation's '>' was not reached");
    flush(D, D->n);
}

char *desugar_chunk(const char *src, size_t len, size_t *out_len,
                    int *err_line, char *err, size_t errlen)
{
    Desugar D;
    memset(&D, 0, sizeof D);
    D.src = src ? src : "";
    D.n = src ? len : 0;
    D.err = err;
    D.errlen = errlen;
    if (err && errlen > 0) err[0] = '\0';
    /* room for a few insertions up front, so a big chunk is rarely copied twice */
    if (reserve(&D, D.n < SIZE_MAX / 2 ? D.n + D.n / 16 + 64 : D.n)) desugar(&D);
    if (D.failed) {
        free(D.out);
        if (err_line) *err_line = D.err_line;
        return NULL;
    }
    D.out[D.len] = '\0';
    if (out_len) *out_len = D.len;
    return D.out;
}
