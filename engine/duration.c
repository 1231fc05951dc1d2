/* duration.c — durations as users write them (duration.h). */
#include "duration.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double unit_seconds(const char *u, size_t n)
{
    static const struct { const char *name; double s; } units[] = {
        { "ms", 0.001 }, { "s", 1 }, { "m", 60 }, { "h", 3600 }, { "d", 86400 },
    };
    for (size_t k = 0; k < sizeof units / sizeof *units; k++)
        if (strlen(units[k].name) == n && memcmp(units[k].name, u, n) == 0) return units[k].s;
    return 0;
}

/* A number as the stdlib has always read it: digits, then optionally a point
 * and more digits ("1.", "1.5"; not ".5", "1e3" or "-1"). */
static const char *scan_number(const char *p, double *v)
{
    const char *start = p;
    while (isdigit((unsigned char)*p)) p++;
    if (p == start) return NULL;
    if (*p == '.') {
        p++;
        while (isdigit((unsigned char)*p)) p++;
    }
    char buf[64];
    size_t n = (size_t)(p - start);
    if (n >= sizeof buf) return NULL;
    memcpy(buf, start, n);
    buf[n] = '\0';
    *v = strtod(buf, NULL);
    return p;
}

static bool finish(double total, bool allow_zero, double *seconds)
{
    if (!isfinite(total) || total < 0 || (total == 0 && !allow_zero)) return false;
    *seconds = total;
    return true;
}

bool duration_parse(const char *text, bool allow_zero, double *seconds)
{
    const char *p = text, *end = text + strlen(text);
    while (p < end && isspace((unsigned char)*p)) p++;
    while (end > p && isspace((unsigned char)end[-1])) end--;
    if (p == end) return false;
    double v;
    const char *q = scan_number(p, &v);
    if (q == end) return finish(v, allow_zero, seconds);      /* plain seconds */
    double total = 0;
    while (p < end) {
        if (!(q = scan_number(p, &v))) return false;
        while (q < end && isspace((unsigned char)*q)) q++;
        const char *u = q;
        while (q < end && isalpha((unsigned char)*q)) q++;
        double unit = unit_seconds(u, (size_t)(q - u));
        if (unit == 0) return false;
        total += v * unit;
        while (q < end && isspace((unsigned char)*q)) q++;
        p = q;
    }
    return finish(total, allow_zero, seconds);
}

/* Appends to buf at *n, never past buflen (snprintf's truncation rule). */
static void put(char *buf, size_t buflen, size_t *n, const char *fmt, double v)
{
    if (*n >= buflen) return;
    int k = snprintf(buf + *n, buflen - *n, fmt, v);
    if (k > 0) *n += (size_t)k;
}

void duration_iso8601(double seconds, char *buf, size_t buflen)
{
    if (buflen == 0) return;
    if (!(seconds > 0) || !isfinite(seconds)) {
        snprintf(buf, buflen, "PT0S");
        return;
    }
    double days = floor(seconds / 86400), rest = seconds - days * 86400;
    double h = floor(rest / 3600), m = floor((rest - h * 3600) / 60), s = rest - h * 3600 - m * 60;
    size_t n = 0;
    put(buf, buflen, &n, "P", 0);
    if (days > 0) put(buf, buflen, &n, "%.0fD", days);
    if (h > 0 || m > 0 || s > 0) put(buf, buflen, &n, "T", 0);
    if (h > 0) put(buf, buflen, &n, "%.0fH", h);
    if (m > 0) put(buf, buflen, &n, "%.0fM", m);
    if (s > 0) put(buf, buflen, &n, "%gS", s);
}
