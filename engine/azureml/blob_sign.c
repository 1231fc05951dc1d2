/* blob_sign.c — see blob_sign.h. */
#include "azureml/blob_sign.h"

#include "crypto_lib.h"
#include "util.h"

#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

static int hex_value(char ch)
{
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

static char *url_decode(const char *s, size_t n)
{
    struct strbuf sb = STRBUF_INIT;
    sb_add(&sb, "", 0);
    for (size_t i = 0; i < n; i++) {
        int hi, lo;
        if (s[i] == '%' && i + 2 < n && (hi = hex_value(s[i + 1])) >= 0 && (lo = hex_value(s[i + 2])) >= 0) {
            sb_addc(&sb, (char)(hi * 16 + lo));
            i += 2;
        } else {
            sb_addc(&sb, s[i]);          /* '+' stays: the service decodes as .NET's Uri does */
        }
    }
    return sb_detach(&sb);
}

/* "Sun, 06 Nov 1994 08:49:37 GMT", whatever the locale. */
void blob_rfc1123_now(char out[40])
{
    static const char *const days[] = { "Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat" };
    static const char *const months[] = { "Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                          "Jul", "Aug", "Sep", "Oct", "Nov", "Dec" };
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    snprintf(out, 40, "%s, %02d %s %04d %02d:%02d:%02d GMT", days[tm.tm_wday % 7], tm.tm_mday,
             months[tm.tm_mon % 12], tm.tm_year + 1900, tm.tm_hour, tm.tm_min, tm.tm_sec);
}

struct kv {
    char *name, *value;
    size_t order;              /* as given: values of one name keep their order */
};

static int kv_cmp(const void *a, const void *b)
{
    const struct kv *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c ? c : (x->order > y->order) - (x->order < y->order);
}

static void kv_free(struct kv *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(v[i].name);
        free(v[i].value);
    }
    free(v);
}

/* Trimmed, with runs of white space folded to one space (CanonicalizedHeaders). */
static char *fold_space(const char *s)
{
    struct strbuf sb = STRBUF_INIT;
    sb_add(&sb, "", 0);
    bool space = true;
    for (; *s; s++) {
        bool blank = *s == ' ' || *s == '\t';
        if (blank && space) continue;
        sb_addc(&sb, blank ? ' ' : *s);
        space = blank;
    }
    while (sb.len && sb.buf[sb.len - 1] == ' ') sb_truncate(&sb, sb.len - 1);
    return sb_detach(&sb);
}

/* The standard headers of the StringToSign, in their order; "" when absent. */
static const char *const signed_standard[] = {
    "Content-Encoding", "Content-Language", "Content-Length", "Content-MD5", "Content-Type", "Date",
    "If-Modified-Since", "If-Match", "If-None-Match", "If-Unmodified-Since", "Range",
};
#define N_STANDARD (sizeof signed_standard / sizeof *signed_standard)

static void split_headers(const char *const *headers, const char *std[N_STANDARD], struct kv **ms, size_t *n_ms)
{
    size_t cap = 0;
    for (size_t i = 0; headers && headers[i]; i++) {
        const char *h = headers[i], *colon = strchr(h, ':');
        if (!colon) continue;
        size_t nlen = (size_t)(colon - h);
        const char *value = colon + 1;
        while (*value == ' ' || *value == '\t') value++;
        for (size_t k = 0; k < N_STANDARD; k++)
            if (strlen(signed_standard[k]) == nlen && strncasecmp(h, signed_standard[k], nlen) == 0) std[k] = value;
        if (nlen > 5 && strncasecmp(h, "x-ms-", 5) == 0) {
            ARRAY_GROW(*ms, *n_ms, cap);
            char *name = xstrndup(h, nlen);
            for (char *p = name; *p; p++) *p = (char)tolower((unsigned char)*p);
            (*ms)[*n_ms] = (struct kv){ name, fold_space(value), *n_ms };
            (*n_ms)++;
        }
    }
    /* "Content-Length (empty when 0)": since 2015-02-21 a zero length signs as "" */
    if (std[2] && strcmp(std[2], "0") == 0) std[2] = NULL;
}

/* "\nname:v1,v2" per query parameter, names lowercased and sorted, values
 * decoded. */
static void add_canonical_query(struct strbuf *sb, const char *query)
{
    struct kv *v = NULL;
    size_t n = 0, cap = 0;
    while (query && *query) {
        size_t len = strcspn(query, "&");
        size_t nlen = strcspn(query, "=");
        if (nlen > len) nlen = len;
        if (len) {
            ARRAY_GROW(v, n, cap);
            char *name = url_decode(query, nlen);
            for (char *p = name; *p; p++) *p = (char)tolower((unsigned char)*p);
            const char *val = query + nlen + (nlen < len);
            v[n] = (struct kv){ name, url_decode(val, (size_t)(query + len - val)), n };
            n++;
        }
        query += len + (query[len] == '&');
    }
    if (n) qsort(v, n, sizeof *v, kv_cmp);
    for (size_t i = 0; i < n; i++) {
        if (i && strcmp(v[i].name, v[i - 1].name) == 0) sb_addf(sb, ",%s", v[i].value);
        else sb_addf(sb, "\n%s:%s", v[i].name, v[i].value);
    }
    kv_free(v, n);
}

static char *string_to_sign(const char *account, const char *method, const char *path, const char *query,
                            const char *const *headers)
{
    const char *std[N_STANDARD] = { 0 };
    struct kv *ms = NULL;
    size_t n_ms = 0;
    split_headers(headers, std, &ms, &n_ms);
    struct strbuf sb = STRBUF_INIT;
    sb_addf(&sb, "%s\n", method);
    for (size_t k = 0; k < N_STANDARD; k++) sb_addf(&sb, "%s\n", std[k] ? std[k] : "");
    if (n_ms) qsort(ms, n_ms, sizeof *ms, kv_cmp);
    for (size_t i = 0; i < n_ms; i++) sb_addf(&sb, "%s:%s\n", ms[i].name, ms[i].value);
    kv_free(ms, n_ms);
    sb_addf(&sb, "/%s%s", account, path);
    add_canonical_query(&sb, query);
    return sb_detach(&sb);
}

char *blob_shared_key(const char *account, const unsigned char *key_raw, size_t key_len, const char *method,
                      const char *url, const char *const *headers)
{
    const struct crypto_lib *ossl = crypto_lib();
    const char *sep = strstr(url, "://");
    if (!sep) return NULL;
    const char *path = sep + 3 + strcspn(sep + 3, "/?#");
    size_t path_len = strcspn(path, "?#");
    char *path_copy = path_len ? xstrndup(path, path_len) : xstrdup("/");
    char *query = path[path_len] == '?' ? xstrndup(path + path_len + 1, strcspn(path + path_len + 1, "#")) : NULL;
    char *sts = string_to_sign(account, method, path_copy, query, headers);
    free(path_copy);
    free(query);
    unsigned char mac[EVP_MAX_MD_SIZE];
    unsigned int mac_len = 0;
    bool ok = ossl->HMAC(ossl->EVP_sha256(), key_raw, (int)key_len, (const unsigned char *)sts, strlen(sts), mac, &mac_len);
    free(sts);
    if (!ok) return NULL;
    char sig[EVP_MAX_MD_SIZE * 2];
    ossl->EVP_EncodeBlock((unsigned char *)sig, mac, (int)mac_len);
    wipe(mac, sizeof mac);
    return xasprintf("SharedKey %s:%s", account, sig);
}
