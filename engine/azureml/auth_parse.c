/* auth_parse.c — see auth_parse.h. */
#include "azureml/auth_parse.h"
#include "util.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TOKEN_MAX (64 * 1024)
#define CLI_LINE_MAX 200

/* What goes into an Authorization header: visible ASCII only. */
bool aml_token_safe(const char *t)
{
    size_t n = strlen(t);
    if (n == 0 || n > TOKEN_MAX) return false;
    for (; *t; t++)
        if ((unsigned char)*t <= 0x20 || (unsigned char)*t >= 0x7f) return false;
    return true;
}

/* localhost, [::1] or 127.x.y.z (digits and dots only: 127.0.0.1.example.com is not). */
static bool loopback_host(const char *h, size_t n)
{
    if ((n == 9 && strncmp(h, "localhost", 9) == 0) || (n == 5 && strncmp(h, "[::1]", 5) == 0)) return true;
    if (n < 5 || strncmp(h, "127.", 4) != 0) return false;
    for (size_t i = 4; i < n; i++)
        if (!isdigit((unsigned char)h[i]) && h[i] != '.') return false;
    return true;
}

char *aml_authority_url(const char *host, char *err, size_t errlen)
{
    for (const char *s = host; *s; s++)
        if (isspace((unsigned char)*s) || iscntrl((unsigned char)*s) || *s == '?' || *s == '#') {
            errf(err, errlen, "not a host or URL (it holds a space, '?' or '#')");
            return NULL;
        }
    char *url;
    const char *sep = strstr(host, "://");
    if (!sep) {
        url = xasprintf("https://%s", host);
    } else if (strncmp(host, "https://", 8) == 0) {
        url = xstrdup(host);
    } else if (strncmp(host, "http://", 7) == 0) {
        const char *h = host + 7;
        size_t hn = strcspn(h, ":/");
        if (h[0] == '[') hn = strcspn(h, "]") + 1;
        if (!loopback_host(h, hn)) {
            errf(err, errlen, "must be https:// (plain http:// is accepted for a loopback test server only)");
            return NULL;
        }
        url = xstrdup(host);
    } else {
        errf(err, errlen, "must be https://");
        return NULL;
    }
    const char *h = strstr(url, "://") + 3;
    size_t n = strlen(url);
    while (n > (size_t)(h - url) && url[n - 1] == '/') url[--n] = '\0';
    if (!*h || *h == '/' || *h == ':') {
        errf(err, errlen, "has no host name");
        free(url);
        return NULL;
    }
    return url;
}

/* An epoch or a duration in seconds: a positive number, or a string of digits. */
static bool json_seconds(const cJSON *v, double *out)
{
    if (cJSON_IsNumber(v)) {
        *out = v->valuedouble;
        return *out > 0;
    }
    if (!cJSON_IsString(v) || !v->valuestring[0]) return false;
    size_t n = strlen(v->valuestring);
    if (n > 15 || strspn(v->valuestring, "0123456789") != n) return false;
    *out = strtod(v->valuestring, NULL);
    return *out > 0;
}

/* Takes the string of field `name` out of obj into *token, wiping cJSON's copy. */
static bool take_token(cJSON *obj, const char *name, char **token, char *err, size_t errlen)
{
    cJSON *t = cJSON_GetObjectItemCaseSensitive(obj, name);
    if (!cJSON_IsString(t) || !t->valuestring[0]) {
        errf(err, errlen, "no %s in the answer", name);
        return false;
    }
    bool safe = aml_token_safe(t->valuestring);
    if (safe) *token = xstrdup(t->valuestring);
    wipe(t->valuestring, strlen(t->valuestring));
    if (!safe) errf(err, errlen, "the %s holds characters a bearer token cannot", name);
    return safe;
}

static cJSON *parse_object(const char *text, char *err, size_t errlen)
{
    cJSON *root = cJSON_Parse(text);
    if (cJSON_IsObject(root)) return root;
    cJSON_Delete(root);
    errf(err, errlen, "the answer is not a JSON object");
    return NULL;
}

/* Wipes every string of a parsed answer before it is freed: any of them may
 * be (part of) a token. */
static void wipe_delete(cJSON *node)
{
    for (cJSON *c = node; c; c = c->next) {
        if (cJSON_IsString(c) && c->valuestring) wipe(c->valuestring, strlen(c->valuestring));
        if (c->child) wipe_delete(c->child);
    }
}

bool aml_json_object(const char *text)
{
    cJSON *root = cJSON_Parse(text);
    bool is = cJSON_IsObject(root);
    if (root) wipe_delete(root);
    cJSON_Delete(root);
    return is;
}

bool aml_parse_token_response(const char *body, double now, char **token, double *expires_on,
                              char *err, size_t errlen)
{
    *token = NULL;
    cJSON *root = parse_object(body, err, errlen);
    if (!root) return false;
    double on = 0, in = 0;
    bool ok = false;
    if (json_seconds(cJSON_GetObjectItemCaseSensitive(root, "expires_on"), &on)) {
        *expires_on = on;
        ok = true;
    } else if (json_seconds(cJSON_GetObjectItemCaseSensitive(root, "expires_in"), &in)) {
        *expires_on = now + in;
        ok = true;
    } else {
        errf(err, errlen, "no expires_on or expires_in in the answer");
    }
    ok = ok && take_token(root, "access_token", token, err, errlen);
    wipe_delete(root);
    cJSON_Delete(root);
    return ok;
}

/* "2024-05-01 13:45:10.123456" (local time), the fraction optional. */
static bool parse_local_time(const char *s, double *out)
{
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    const char *rest = strptime(s, "%Y-%m-%d %H:%M:%S", &tm);
    if (!rest) return false;
    double frac = 0;
    if (*rest == '.') {
        size_t n = strspn(rest + 1, "0123456789");
        if (n == 0) return false;
        frac = strtod(rest, NULL);
        rest += 1 + n;
    }
    if (*rest) return false;
    tm.tm_isdst = -1;
    time_t t = mktime(&tm);
    if (t == (time_t)-1) return false;
    *out = (double)t + frac;
    return true;
}

bool aml_parse_cli_output(const char *out, char **token, double *expires_on, char *err, size_t errlen)
{
    *token = NULL;
    cJSON *root = parse_object(out, err, errlen);
    if (!root) return false;
    bool ok = false;
    cJSON *on = cJSON_GetObjectItemCaseSensitive(root, "expires_on");
    cJSON *local = cJSON_GetObjectItemCaseSensitive(root, "expiresOn");
    if (on) {
        ok = json_seconds(on, expires_on);
        if (!ok) errf(err, errlen, "expires_on is not a number of seconds");
    } else if (cJSON_IsString(local)) {
        ok = parse_local_time(local->valuestring, expires_on);
        if (!ok) errf(err, errlen, "expiresOn is not a \"%%Y-%%m-%%d %%H:%%M:%%S.%%f\" time");
    } else {
        errf(err, errlen, "no expires_on or expiresOn in the answer");
    }
    ok = ok && take_token(root, "accessToken", token, err, errlen);
    wipe_delete(root);
    cJSON_Delete(root);
    return ok;
}

/* The first non-empty line of text, capped (at a UTF-8 character's start). */
static void first_line(const char *text, char *buf, size_t buflen)
{
    text += strspn(text, " \t\r\n");
    size_t n = strcspn(text, "\r\n");
    if (n > CLI_LINE_MAX) {
        n = CLI_LINE_MAX;
        while (n > 0 && ((unsigned char)text[n] & 0xc0) == 0x80) n--;
    }
    if (n >= buflen) n = buflen - 1;
    memcpy(buf, text, n);
    buf[n] = '\0';
}

void aml_cli_failure(int exit_code, bool timed_out, const char *stderr_text, const char *why_no_mi,
                     char *buf, size_t buflen)
{
    char line[CLI_LINE_MAX + 1];
    first_line(stderr_text ? stderr_text : "", line, sizeof line);
    if (strstr(line, "eyJ") || strstr(line, "ccessToken") || strstr(line, "ccess_token"))
        snprintf(line, sizeof line, "(its message is withheld: it may hold a token)");
    bool login = stderr_text && (strstr(stderr_text, "az login") || strstr(stderr_text, "az account set"));
    if (timed_out)
        errf(buf, buflen, "Azure CLI: `az account get-access-token` did not finish within %.0f s", AML_CLI_TIMEOUT_S);
    else if (exit_code == 127)
        errf(buf, buflen, "Azure CLI not found (no working az on PATH)%s%s; set AZURE_TENANT_ID, AZURE_CLIENT_ID and "
             "AZURE_CLIENT_SECRET (or AZURE_CLIENT_CERTIFICATE_PATH), or install the Azure CLI and log in with az login",
             why_no_mi ? ", and no managed identity: " : "", why_no_mi ? why_no_mi : "");
    else if (login)
        errf(buf, buflen, "Azure CLI: not logged in; run az login (az: %s)", line);
    else if (line[0])
        errf(buf, buflen, "Azure CLI failed (exit %d): %s", exit_code, line);
    else
        errf(buf, buflen, "Azure CLI failed (exit %d) and said nothing on stderr", exit_code);
}
