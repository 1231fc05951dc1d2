/* json_text.c — see json_text.h. */
#include "json_text.h"
#include "util.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

const char *json_format_double(double d, char buf[32])
{
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(buf, 32, "%.*g", prec, d);
        if (strtod(buf, NULL) == d) break;
    }
    return buf;
}

void json_number(struct strbuf *sb, double d)
{
    if (isnan(d) || isinf(d)) { sb_adds(sb, "null"); return; }
    if (d == floor(d) && fabs(d) <= 2147483647.0) { sb_addf(sb, "%d", (int)d); return; }
    char buf[32];
    sb_adds(sb, json_format_double(d, buf));
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

/* The length of the valid UTF-8 sequence at p (a byte of 128 or more), or 0:
 * no overlong form, no surrogate, nothing past U+10FFFF (RFC 3629).  The
 * string's NUL ends a cut-off sequence, being no continuation byte. */
static size_t utf8_len(const unsigned char *p)
{
    unsigned char lo = 0x80, hi = 0xbf;        /* the second byte's range */
    size_t n;
    if (*p >= 0xc2 && *p <= 0xdf) n = 2;
    else if (*p >= 0xe0 && *p <= 0xef) n = 3, lo = *p == 0xe0 ? 0xa0 : 0x80, hi = *p == 0xed ? 0x9f : 0xbf;
    else if (*p >= 0xf0 && *p <= 0xf4) n = 4, lo = *p == 0xf0 ? 0x90 : 0x80, hi = *p == 0xf4 ? 0x8f : 0xbf;
    else return 0;
    if (p[1] < lo || p[1] > hi) return 0;
    for (size_t i = 2; i < n; i++)
        if (p[i] < 0x80 || p[i] > 0xbf) return 0;
    return n;
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
                size_t n = utf8_len(p);
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
