/* utf8.h — decoding and encoding UTF-8 the way Python's strict codec does:
 * the code snapshot's rules (the SDK applies them to Python strings), the
 * names a pipeline may use, the JSON log's text. */
#ifndef FLOW_UTF8_H
#define FLOW_UTF8_H

#include "util.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The code point at s (len > 0 bytes) and its length in *used; *used is 0
 * when s does not start a valid sequence (overlong forms, surrogates and
 * values past U+10FFFF are not valid). */
static inline uint32_t utf8_decode(const unsigned char *s, size_t len, size_t *used)
{
    static const uint32_t min[] = {0, 0, 0x80, 0x800, 0x10000};
    unsigned char c = s[0];
    size_t n = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    *used = 0;
    if (n == 0 || n > len) return 0;
    if (n == 1) { *used = 1; return c; }
    uint32_t cp = c & (0x7Fu >> n);
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        cp = cp << 6 | (s[i] & 0x3Fu);
    }
    if (cp < min[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    *used = n;
    return cp;
}

/* Whether s[0..len) is valid UTF-8; *bad_at (may be NULL) is where it is not. */
static inline bool utf8_valid(const char *s, size_t len, size_t *bad_at)
{
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0, used; i < len; i += used) {
        utf8_decode(p + i, len - i, &used);
        if (!used) {
            if (bad_at) *bad_at = i;
            return false;
        }
    }
    return true;
}

/* Appends cp (any value below 0x110000, surrogates included) to sb. */
static inline void utf8_put(struct strbuf *sb, uint32_t cp)
{
    char b[4];
    size_t n;
    if (cp < 0x80) { b[0] = (char)cp; n = 1; }
    else if (cp < 0x800) { b[0] = (char)(0xC0 | cp >> 6); b[1] = (char)(0x80 | (cp & 0x3F)); n = 2; }
    else if (cp < 0x10000) {
        b[0] = (char)(0xE0 | cp >> 12); b[1] = (char)(0x80 | (cp >> 6 & 0x3F)); b[2] = (char)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        b[0] = (char)(0xF0 | cp >> 18); b[1] = (char)(0x80 | (cp >> 12 & 0x3F));
        b[2] = (char)(0x80 | (cp >> 6 & 0x3F)); b[3] = (char)(0x80 | (cp & 0x3F)); n = 4;
    }
    sb_add(sb, b, n);
}

#endif
