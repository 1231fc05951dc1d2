/* json_text.c — see json_text.h. */
#include "json_text.h"
#include "util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

void json_number(struct strbuf *sb, double d)
{
    if (isnan(d) || isinf(d)) { sb_adds(sb, "null"); return; }
    if (d == floor(d) && fabs(d) <= 2147483647.0) { sb_addf(sb, "%d", (int)d); return; }
    char buf[32];
    snprintf(buf, sizeof buf, "%1.15g", d);
    if (strtod(buf, NULL) != d) snprintf(buf, sizeof buf, "%1.17g", d);
    sb_adds(sb, buf);
}

void json_string(struct strbuf *sb, const char *s)
{
    sb_addc(sb, '"');
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"': sb_adds(sb, "\\\""); break;
        case '\\': sb_adds(sb, "\\\\"); break;
        case '\b': sb_adds(sb, "\\b"); break;
        case '\f': sb_adds(sb, "\\f"); break;
        case '\n': sb_adds(sb, "\\n"); break;
        case '\r': sb_adds(sb, "\\r"); break;
        case '\t': sb_adds(sb, "\\t"); break;
        default:
            if (*p < 32) sb_addf(sb, "\\u%04x", *p);
            else sb_addc(sb, (char)*p);
        }
    }
    sb_addc(sb, '"');
}
