/* json_text.c — see json_text.h. */
#include "json_text.h"
#include "utf8.h"
#include "util.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *json_format_double(double d, char buf[32])
{
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(buf, 32, "%.*g", prec, d);
        if (strtod(buf, NULL) == d) break;
    }
    return buf;
}

const char *json_format_float(double d, char buf[40])
{
    json_format_double(d, buf);
    if (!strpbrk(buf, ".eEn")) strcat(buf, ".0");     /* ("n": nan, inf) */
    return buf;
}

void json_number(struct strbuf *sb, double d)
{
    if (isnan(d) || isinf(d)) { sb_adds(sb, "null"); return; }
    if (d == floor(d) && fabs(d) <= 2147483647.0) { json_integer(sb, (long long)d); return; }
    char buf[32];
    sb_adds(sb, json_format_double(d, buf));
}

void json_integer(struct strbuf *sb, long long v)
{
    char buf[24], *p = buf + sizeof buf;
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    do *--p = (char)('0' + u % 10); while ((u /= 10) > 0);
    if (v < 0) *--p = '-';
    sb_add(sb, p, (size_t)(buf + sizeof buf - p));
}

void json_seconds(struct strbuf *sb, double d)
{
    if (!(fabs(d) < 9e12)) { json_number(sb, d); return; }      /* NaN, infinite, or past 2^63 µs */
    long long us = llround(d * 1e6);
    char buf[32], *p = buf + sizeof buf;
    unsigned long long u = us < 0 ? (unsigned long long)-us : (unsigned long long)us;
    unsigned long long whole = u / 1000000, frac = u % 1000000;
    if (frac) {
        int digits = 6;
        while (frac % 10 == 0) frac /= 10, digits--;
        for (; digits > 0; digits--, frac /= 10) *--p = (char)('0' + frac % 10);
        *--p = '.';
    }
    do *--p = (char)('0' + whole % 10); while ((whole /= 10) > 0);
    if (us < 0) *--p = '-';
    sb_add(sb, p, (size_t)(buf + sizeof buf - p));
}

void json_key(struct strbuf *sb, const char *key)
{
    if (sb->len && sb->buf[sb->len - 1] != '{') sb_addc(sb, ',');
    sb_addc(sb, '"');
    sb_adds(sb, key);
    sb_adds(sb, "\":");
}

static void escape(const char *s, bool utf8, void (*put)(void *ctx, const char *p, size_t n), void *ctx)
{
    unsigned char top = utf8 ? 127 : 255;       /* bytes above are looked at one by one */
    for (const unsigned char *p = (const unsigned char *)s;;) {
        /* the run of bytes that need no escape, handed over at once */
        const unsigned char *run = p;
        while (*p >= 32 && *p <= top && *p != '"' && *p != '\\') p++;
        if (p > run) put(ctx, (const char *)run, (size_t)(p - run));
        if (!*p) return;
        char esc[8];
        switch (*p) {
        case '"': put(ctx, "\\\"", 2); break;
        case '\\': put(ctx, "\\\\", 2); break;
        case '\b': put(ctx, "\\b", 2); break;
        case '\f': put(ctx, "\\f", 2); break;
        case '\n': put(ctx, "\\n", 2); break;
        case '\r': put(ctx, "\\r", 2); break;
        case '\t': put(ctx, "\\t", 2); break;
        default:
            if (*p > top) {
                size_t n;
                utf8_decode(p, 4, &n);           /* (a NUL ends a cut-off sequence) */
                if (n) { put(ctx, (const char *)p, n); p += n; continue; }
                put(ctx, "\\ufffd", 6);
                break;
            }
            snprintf(esc, sizeof esc, "\\u%04x", *p);
            put(ctx, esc, 6);
        }
        p++;
    }
}

void json_escape(const char *s, void (*put)(void *ctx, const char *p, size_t n), void *ctx)
{
    escape(s, false, put, ctx);
}

static void put_sb(void *sb, const char *p, size_t n) { sb_add(sb, p, n); }

void json_string(struct strbuf *sb, const char *s)
{
    sb_addc(sb, '"');
    escape(s, false, put_sb, sb);
    sb_addc(sb, '"');
}

void json_string_utf8(struct strbuf *sb, const char *s)
{
    sb_addc(sb, '"');
    escape(s, true, put_sb, sb);
    sb_addc(sb, '"');
}

/* ---- cJSON_Print's layout, without cJSON ----------------------------------- */

static void add_tabs(struct strbuf *sb, size_t n)
{
    while (n--) sb_addc(sb, '\t');
}

static bool json_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* The index past the string that opens at s[i] (its closing quote's + 1). */
static size_t string_end(const char *s, size_t len, size_t i)
{
    for (i++; i < len && s[i] != '"'; i++)
        if (s[i] == '\\') i++;
    return i < len ? i + 1 : len;
}

void json_indent(struct strbuf *out, const char *s, size_t len)
{
    /* What each open container is, '{' or '['; cJSON's depth is its height. */
    char *kinds = NULL;
    size_t depth = 0, cap = 0;
    char prev = 0;                               /* the last token's first byte */
    for (size_t i = 0; i < len;) {
        char c = s[i];
        if (json_space(c)) { i++; continue; }
        bool in_object = depth > 0 && kinds[depth - 1] == '{';
        if (c == '"') {
            size_t end = string_end(s, len, i);
            sb_add(out, s + i, end - i);
            i = end;
            prev = c;
            continue;
        }
        switch (c) {
        case '{':
        case '[':
            ARRAY_GROW(kinds, depth, cap);
            kinds[depth++] = c;
            sb_addc(out, c);
            if (c == '{') {
                sb_addc(out, '\n');
                size_t j = i + 1;
                while (j < len && json_space(s[j])) j++;
                if (j >= len || s[j] != '}') add_tabs(out, depth);     /* its first member's line */
            }
            break;
        case '}':
        case ']':
            if (c == '}' && prev != '{') sb_addc(out, '\n');
            if (c == '}') add_tabs(out, depth ? depth - 1 : 0);
            sb_addc(out, c);
            if (depth) depth--;
            break;
        case ',':
            sb_addc(out, ',');
            if (in_object) {
                sb_addc(out, '\n');
                add_tabs(out, depth);
            } else {
                sb_addc(out, ' ');
            }
            break;
        case ':':
            sb_adds(out, ":\t");
            break;
        default:                                 /* a number or a literal, as it is */
            sb_addc(out, c);
            break;
        }
        prev = c;
        i++;
    }
    free(kinds);
}
