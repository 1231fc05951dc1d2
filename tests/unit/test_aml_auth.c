/* test_aml_auth.c — the Entra ID credential chain (engine/azureml/auth.c).
 *
 * Without a server: which credential the environment picks (precedence,
 * half-set credentials, unreadable certificates), the client assertion (a JWT
 * checked field by field and its signature verified with the certificate's
 * public key), the token answers' and the Azure CLI's expiry forms, the
 * CLI's failures, the authority host.
 *
 * With tests/unit/token_server.py (plain HTTP on 127.0.0.1) and a fake `az`
 * first on PATH: each credential's request as the server checks it, the
 * cache (one request while a token is fresh, a new one when it has five
 * minutes or less left or was invalidated, one for concurrent gets), errors
 * that carry Entra's code but never the secret, and the auto chain (IMDS,
 * then the CLI). */
#include "azureml/auth.h"
#include "azureml/auth_parse.h"
#include "azureml/cert.h"
#include "check_server.h"
#include "loop.h"
#include "util.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static char dir[] = "/tmp/flow-test-aml-auth-XXXXXX";
static struct loop *g_loop;
static struct http_client *g_http;
static int g_port;                       /* the token server's; 0: none */
static pid_t g_server;

static char *path_in(const char *name)
{
    static char buf[8][300];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f || fputs(text, f) < 0 || fclose(f) != 0) { perror(path); exit(2); }
}

/* ---- an environment, built up -------------------------------------------- */

struct env { char *v[24]; int n; };

static void env_add(struct env *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void env_add(struct env *e, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    struct strbuf sb = STRBUF_INIT;
    sb_vaddf(&sb, fmt, ap);
    va_end(ap);
    e->v[e->n++] = sb_detach(&sb);
    e->v[e->n] = NULL;
}

static void env_free(struct env *e)
{
    for (int i = 0; i < e->n; i++) free(e->v[i]);
    e->n = 0;
}

#define TENANT "00000000-0000-0000-0000-00000000000a"
#define CLIENT "11111111-1111-1111-1111-11111111111b"
#define SECRET "s3cr3t~value.with+chars/&="

static struct aml_auth *auth_for(struct env *e, const char *authority, char *err, size_t errlen)
{
    struct aml_auth_options o = { .authority_host = authority, .envp = e->v };
    if (!e->n) e->v[0] = NULL;
    err[0] = '\0';
    return aml_auth_new(g_loop, g_http, &o, err, errlen);
}

/* ---- a throwaway key and certificate ------------------------------------- */

static EVP_PKEY *g_key;
static X509 *g_cert;

static void make_cert(void)
{
    g_key = EVP_RSA_gen(2048);
    g_cert = X509_new();
    if (!g_key || !g_cert) { fprintf(stderr, "cannot make a key\n"); exit(2); }
    X509_set_version(g_cert, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(g_cert), 1);
    X509_gmtime_adj(X509_getm_notBefore(g_cert), 0);
    X509_gmtime_adj(X509_getm_notAfter(g_cert), 3600);
    X509_set_pubkey(g_cert, g_key);
    X509_NAME *name = X509_get_subject_name(g_cert);
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)"flow-test", -1, -1, 0);
    X509_set_issuer_name(g_cert, name);
    if (!X509_sign(g_cert, g_key, EVP_sha256())) { fprintf(stderr, "cannot sign the certificate\n"); exit(2); }
}

/* A PEM file with the key (encrypted with password unless NULL) and/or the certificate. */
static void write_pem(const char *path, bool key, bool cert, const char *password)
{
    FILE *f = fopen(path, "w");
    if (!f) { perror(path); exit(2); }
    if (cert && !key) PEM_write_X509(f, g_cert);
    if (key && !PEM_write_PrivateKey(f, g_key, password ? EVP_aes_128_cbc() : NULL,
                                     (unsigned char *)password, password ? (int)strlen(password) : 0, NULL, NULL)) {
        fprintf(stderr, "cannot write the key\n");
        exit(2);
    }
    if (cert && key) PEM_write_X509(f, g_cert);      /* the key first here, the certificate first above */
    fclose(f);
}

/* ---- pure parts ------------------------------------------------------------ */

static void check_authority(const char *in, const char *want)
{
    char err[256] = "";
    char *got = aml_authority_url(in, err, sizeof err);
    if (want) CHECK_STR(got, want);
    else CHECK(got == NULL && err[0]);
    free(got);
}

static void test_authority_host_is_normalised(void)
{
    check_authority("login.microsoftonline.us", "https://login.microsoftonline.us");
    check_authority("https://login.microsoftonline.com/", "https://login.microsoftonline.com");
    check_authority("login.chinacloudapi.cn//", "https://login.chinacloudapi.cn");
    check_authority("https://adfs.contoso.com/adfs/", "https://adfs.contoso.com/adfs");
    check_authority("http://127.0.0.1:8080/", "http://127.0.0.1:8080");
    check_authority("http://localhost:1", "http://localhost:1");
    check_authority("http://[::1]:1", "http://[::1]:1");
    check_authority("http://login.microsoftonline.com", NULL);   /* a secret never travels in clear */
    check_authority("http://127.0.0.1.evil.example", NULL);
    check_authority("ftp://login.microsoftonline.com", NULL);
    check_authority("https://", NULL);
    check_authority("https:///x", NULL);
    check_authority("login.microsoftonline.com?x=1", NULL);
    check_authority("login microsoftonline.com", NULL);
}

static void check_token(const char *body, double now, const char *want_token, double want_expiry)
{
    char *token = NULL, err[256] = "";
    double on = 0;
    bool ok = aml_parse_token_response(body, now, &token, &on, err, sizeof err);
    CHECK(ok);
    CHECK_STR(token, want_token);
    CHECK(on == want_expiry);
    free(token);
}

static void check_token_fails(const char *body, const char *want_err)
{
    char *token = NULL, err[256] = "";
    double on = 0;
    CHECK(!aml_parse_token_response(body, 1000, &token, &on, err, sizeof err));
    CHECK(token == NULL);
    CHECK_CONTAINS(err, want_err);
    CHECK(!strstr(err, "eyJ"));
}

static void test_token_answers_each_expiry_form(void)
{
    /* Entra v2: expires_in, a number */
    check_token("{\"token_type\":\"Bearer\",\"expires_in\":3599,\"ext_expires_in\":3599,\"access_token\":\"eyJ0.a.b\"}",
                1000, "eyJ0.a.b", 4599);
    /* IMDS: strings, expires_on wins */
    check_token("{\"access_token\":\"t1\",\"expires_in\":\"3599\",\"expires_on\":\"1700003599\",\"resource\":\"r\"}",
                1000, "t1", 1700003599);
    /* Azure ML compute (2017-09-01): expires_on an integer */
    check_token("{\"access_token\":\"t2\",\"expires_on\":1700003599,\"token_type\":\"Bearer\"}", 1000, "t2", 1700003599);
    /* App Service 2017's date string: expires_in is used instead */
    check_token("{\"access_token\":\"t3\",\"expires_on\":\"09/14/2017 00:00:00 PM +00:00\",\"expires_in\":\"60\"}",
                1000, "t3", 1060);
    check_token_fails("{\"expires_in\":3599}", "no access_token");
    check_token_fails("{\"access_token\":\"eyJ0.a.b\"}", "no expires_on or expires_in");
    check_token_fails("{\"access_token\":\"eyJ0 a\",\"expires_in\":1}", "characters a bearer token cannot");
    check_token_fails("{\"access_token\":\"eyJ0\\r\\nX-Injected: 1\",\"expires_in\":1}", "characters");
    check_token_fails("{\"access_token\":\"eyJ0\",\"expires_in\":-5}", "no expires_on or expires_in");
    check_token_fails("<html>eyJ</html>", "not a JSON object");
    check_token_fails("[1]", "not a JSON object");
}

static void test_cli_output_both_expiry_forms(void)
{
    char *token = NULL, err[256] = "";
    double on = 0;
    /* Newer CLIs: expires_on, epoch seconds; it wins over expiresOn. */
    CHECK(aml_parse_cli_output("{\"accessToken\":\"cli1\",\"expiresOn\":\"2000-01-01 00:00:00.000000\","
                               "\"expires_on\":1714571110,\"subscription\":\"s\",\"tenant\":\"t\",\"tokenType\":\"Bearer\"}",
                               &token, &on, err, sizeof err));
    CHECK_STR(token, "cli1");
    CHECK(on == 1714571110);
    free(token);
    /* Older CLIs: expiresOn only, local time.  POSIX TZ strings need no tzdata. */
    char *old_tz = getenv("TZ") ? xstrdup(getenv("TZ")) : NULL;
    setenv("TZ", "UTC0", 1);
    tzset();
    CHECK(aml_parse_cli_output("{\"accessToken\":\"cli2\",\"expiresOn\":\"2024-05-01 13:45:10.500000\"}",
                               &token, &on, err, sizeof err));
    CHECK_STR(token, "cli2");
    CHECK(on == 1714571110.5);
    free(token);
    setenv("TZ", "XYZ-2", 1);            /* two hours east of UTC */
    tzset();
    CHECK(aml_parse_cli_output("{\"accessToken\":\"cli3\",\"expiresOn\":\"2024-05-01 13:45:10\"}",
                               &token, &on, err, sizeof err));
    CHECK(on == 1714571110 - 7200);
    free(token);
    if (old_tz) setenv("TZ", old_tz, 1);
    else unsetenv("TZ");
    free(old_tz);
    tzset();
    CHECK(!aml_parse_cli_output("{\"accessToken\":\"cli4\",\"expiresOn\":\"tomorrow\"}", &token, &on, err, sizeof err));
    CHECK_CONTAINS(err, "expiresOn");
    CHECK(!aml_parse_cli_output("{\"expires_on\":1714571110}", &token, &on, err, sizeof err));
    CHECK_CONTAINS(err, "no accessToken");
    CHECK(!aml_parse_cli_output("{\"accessToken\":\"cli5\"}", &token, &on, err, sizeof err));
    CHECK_CONTAINS(err, "no expires_on or expiresOn");
    CHECK(!aml_parse_cli_output("WARNING: something\n{", &token, &on, err, sizeof err));
    CHECK(token == NULL);
}

static void test_cli_failures_are_explained(void)
{
    char msg[1024];
    aml_cli_failure(127, false, "sh: az: not found", NULL, msg, sizeof msg);
    CHECK_CONTAINS(msg, "Azure CLI not found");
    CHECK_CONTAINS(msg, "AZURE_TENANT_ID");
    CHECK_CONTAINS(msg, "az login");
    aml_cli_failure(127, false, "", "IMDS did not answer (Connection refused)", msg, sizeof msg);
    CHECK_CONTAINS(msg, "no managed identity: IMDS did not answer");
    aml_cli_failure(1, false, "ERROR: Please run 'az login' to setup account.\n", NULL, msg, sizeof msg);
    CHECK_CONTAINS(msg, "not logged in; run az login");
    aml_cli_failure(1, false, "\nERROR: AADSTS70043: The refresh token has expired. Run `az account set`\nmore\n",
                    NULL, msg, sizeof msg);
    CHECK_CONTAINS(msg, "not logged in");
    CHECK(!strstr(msg, "more"));
    aml_cli_failure(2, false, "ERROR: bad \"accessToken\": \"eyJ0eXAi...\"\n", NULL, msg, sizeof msg);
    CHECK_CONTAINS(msg, "exit 2");
    CHECK_CONTAINS(msg, "withheld");
    CHECK(!strstr(msg, "eyJ"));
    char long_line[600];
    memset(long_line, 'x', sizeof long_line - 1);
    long_line[sizeof long_line - 1] = '\0';
    aml_cli_failure(1, false, long_line, NULL, msg, sizeof msg);
    CHECK(strlen(msg) < 260);
    aml_cli_failure(0, true, "", NULL, msg, sizeof msg);
    CHECK_CONTAINS(msg, "did not finish");
}

/* ---- the client assertion ---------------------------------------------------- */

/* Standard base64 decoding of a base64url string, into a malloc'd buffer. */
static unsigned char *unb64url(const char *s, size_t n, size_t *out_len)
{
    char *std = xmalloc(n + 4);
    for (size_t i = 0; i < n; i++) std[i] = s[i] == '-' ? '+' : s[i] == '_' ? '/' : s[i];
    size_t pad = (4 - n % 4) % 4;
    for (size_t i = 0; i < pad; i++) std[n + i] = '=';
    unsigned char *out = xmalloc(n + 4);
    int len = EVP_DecodeBlock(out, (unsigned char *)std, (int)(n + pad));
    free(std);
    *out_len = len < 0 ? 0 : (size_t)len - pad;
    out[*out_len] = '\0';
    return out;
}

static cJSON *json_part(const char *s, size_t n)
{
    size_t len;
    unsigned char *raw = unb64url(s, n, &len);
    cJSON *j = cJSON_Parse((char *)raw);
    free(raw);
    return j;
}

static const char *jstr(cJSON *o, const char *name)
{
    cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static double jnum(cJSON *o, const char *name)
{
    cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

static bool verifies(const char *jwt, size_t signed_len, const unsigned char *sig, size_t sig_len)
{
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    bool ok = md && EVP_DigestVerifyInit(md, NULL, EVP_sha256(), NULL, X509_get0_pubkey(g_cert)) == 1 &&
              EVP_DigestVerify(md, sig, sig_len, (const unsigned char *)jwt, signed_len) == 1;
    EVP_MD_CTX_free(md);
    return ok;
}

static void test_client_assertion_is_a_verifiable_rs256_jwt(void)
{
    write_pem(path_in("both.pem"), true, true, NULL);
    char err[512] = "";
    struct aml_cert *c = aml_cert_load(path_in("both.pem"), NULL, err, sizeof err);
    CHECK(c != NULL);
    if (!c) { fprintf(stderr, "  %s\n", err); return; }
    const char *aud = "https://login.microsoftonline.com/" TENANT "/oauth2/v2.0/token";
    time_t now = 1700000000;
    char *jwt = aml_cert_assertion(c, aud, CLIENT, now, err, sizeof err);
    CHECK(jwt != NULL);
    if (!jwt) { aml_cert_free(c); return; }
    const char *dot1 = strchr(jwt, '.'), *dot2 = dot1 ? strchr(dot1 + 1, '.') : NULL;
    CHECK(dot1 && dot2 && !strchr(dot2 + 1, '.'));
    CHECK(!strpbrk(jwt, "+/="));         /* base64url, unpadded */
    if (!dot2) { free(jwt); aml_cert_free(c); return; }

    cJSON *h = json_part(jwt, (size_t)(dot1 - jwt));
    CHECK_STR(jstr(h, "alg"), "RS256");
    CHECK_STR(jstr(h, "typ"), "JWT");
    unsigned char *der = NULL;
    int der_len = i2d_X509(g_cert, &der);
    unsigned char sha1[EVP_MAX_MD_SIZE];
    unsigned int sha1_len = 0;
    CHECK(der_len > 0 && EVP_Digest(der, (size_t)der_len, sha1, &sha1_len, EVP_sha1(), NULL) == 1);
    OPENSSL_free(der);
    const char *x5t = jstr(h, "x5t");
    CHECK(x5t != NULL);
    if (x5t) {
        size_t len;
        unsigned char *raw = unb64url(x5t, strlen(x5t), &len);
        CHECK(len == 20 && sha1_len == 20 && memcmp(raw, sha1, 20) == 0);
        free(raw);
        CHECK_STR(aml_cert_x5t(c), x5t);
    }
    cJSON_Delete(h);

    cJSON *claims = json_part(dot1 + 1, (size_t)(dot2 - dot1 - 1));
    CHECK_STR(jstr(claims, "aud"), aud);
    CHECK_STR(jstr(claims, "iss"), CLIENT);
    CHECK_STR(jstr(claims, "sub"), CLIENT);
    const char *jti = jstr(claims, "jti");
    CHECK(jti && strlen(jti) == 36 && jti[8] == '-' && jti[14] == '4' && strchr("89ab", jti[19]));
    CHECK(jnum(claims, "nbf") == 1700000000);
    CHECK(jnum(claims, "iat") == 1700000000);
    CHECK(jnum(claims, "exp") == 1700000600);
    cJSON_Delete(claims);

    size_t sig_len;
    unsigned char *sig = unb64url(dot2 + 1, strlen(dot2 + 1), &sig_len);
    CHECK(sig_len == 256);
    CHECK(verifies(jwt, (size_t)(dot2 - jwt), sig, sig_len));
    CHECK(!verifies(jwt, (size_t)(dot2 - jwt) - 1, sig, sig_len));     /* the check can fail */
    free(sig);

    char *again = aml_cert_assertion(c, aud, CLIENT, now, err, sizeof err);
    CHECK(again && strcmp(again, jwt) != 0);                           /* a fresh jti each time */
    free(again);
    free(jwt);
    aml_cert_free(c);

    /* an encrypted key, the certificate first */
    FILE *f = fopen(path_in("enc.pem"), "w");
    PEM_write_X509(f, g_cert);
    PEM_write_PrivateKey(f, g_key, EVP_aes_256_cbc(), (unsigned char *)"pw", 2, NULL, NULL);
    fclose(f);
    c = aml_cert_load(path_in("enc.pem"), "pw", err, sizeof err);
    CHECK(c != NULL);
    aml_cert_free(c);
}

/* ---- picking the credential ---------------------------------------------------- */

static void check_pick(struct env *e, enum aml_credential_kind kind, const char *describe)
{
    char err[1024];
    struct aml_auth *a = auth_for(e, NULL, err, sizeof err);
    CHECK(a != NULL);
    if (!a) { fprintf(stderr, "    aml_auth_new: %s\n", err); env_free(e); return; }
    CHECK(aml_auth_kind(a) == kind);
    CHECK_STR(aml_auth_describe(a), describe);
    CHECK(!strstr(aml_auth_describe(a), SECRET));
    CHECK(aml_auth_expires_in(a) < 0);
    aml_auth_free(a);
    env_free(e);
}

static void check_refused(struct env *e, const char *authority, const char *want1, const char *want2)
{
    char err[1024];
    struct aml_auth *a = auth_for(e, authority, err, sizeof err);
    CHECK(a == NULL);
    CHECK_CONTAINS(err, want1);
    if (want2) CHECK_CONTAINS(err, want2);
    CHECK(!strstr(err, SECRET));
    CHECK(!strstr(err, "BEGIN"));
    aml_auth_free(a);
    env_free(e);
}

static void test_pick_each_credential(void)
{
    struct env e = { .n = 0 };
    check_pick(&e, AML_CRED_NONE, "managed identity (IMDS) or else Azure CLI: not tried yet");
    env_add(&e, "AZURE_CLIENT_ID=" CLIENT);                 /* a user-assigned identity's, alone */
    check_pick(&e, AML_CRED_NONE, "managed identity (IMDS) or else Azure CLI: not tried yet");

    env_add(&e, "AZURE_TENANT_ID=" TENANT);
    env_add(&e, "AZURE_CLIENT_ID=" CLIENT);
    env_add(&e, "AZURE_CLIENT_SECRET=" SECRET);
    check_pick(&e, AML_CRED_CLIENT_SECRET, "client secret (tenant " TENANT ", client " CLIENT ")");

    write_pem(path_in("cred.pem"), true, true, NULL);
    env_add(&e, "AZURE_TENANT_ID=" TENANT);
    env_add(&e, "AZURE_CLIENT_ID=" CLIENT);
    env_add(&e, "AZURE_CLIENT_CERTIFICATE_PATH=%s", path_in("cred.pem"));
    char want[512];
    snprintf(want, sizeof want, "client certificate (%s, tenant " TENANT ", client " CLIENT ")", path_in("cred.pem"));
    check_pick(&e, AML_CRED_CLIENT_CERTIFICATE, want);

    write_pem(path_in("cred-enc.pem"), true, true, "pass phrase");
    env_add(&e, "AZURE_TENANT_ID=" TENANT);
    env_add(&e, "AZURE_CLIENT_ID=" CLIENT);
    env_add(&e, "AZURE_CLIENT_CERTIFICATE_PATH=%s", path_in("cred-enc.pem"));
    env_add(&e, "AZURE_CLIENT_CERTIFICATE_PASSWORD=pass phrase");
    snprintf(want, sizeof want, "client certificate (%s, tenant " TENANT ", client " CLIENT ")", path_in("cred-enc.pem"));
    check_pick(&e, AML_CRED_CLIENT_CERTIFICATE, want);

    env_add(&e, "AZURE_TENANT_ID=" TENANT);
    env_add(&e, "AZURE_CLIENT_ID=" CLIENT);
    env_add(&e, "AZURE_FEDERATED_TOKEN_FILE=/var/run/secrets/azure/tokens/azure-identity-token");
    check_pick(&e, AML_CRED_WORKLOAD_IDENTITY, "workload identity (token file /var/run/secrets/azure/tokens/"
               "azure-identity-token, tenant " TENANT ", client " CLIENT ")");

    env_add(&e, "MSI_ENDPOINT=http://127.0.0.1:46808/MSI/auth");
    env_add(&e, "MSI_SECRET=" SECRET);
    check_pick(&e, AML_CRED_AML_COMPUTE, "Azure ML compute identity (MSI_ENDPOINT)");
    env_add(&e, "MSI_ENDPOINT=http://127.0.0.1:46808/MSI/auth");
    env_add(&e, "MSI_SECRET=" SECRET);
    env_add(&e, "AZURE_CLIENT_ID=" CLIENT);
    check_pick(&e, AML_CRED_AML_COMPUTE, "Azure ML compute identity (MSI_ENDPOINT, client " CLIENT ")");
    env_add(&e, "MSI_ENDPOINT=http://localhost:50342/oauth2/token");    /* Cloud Shell's: az serves there */
    check_pick(&e, AML_CRED_NONE, "managed identity (IMDS) or else Azure CLI: not tried yet");

    env_add(&e, "IDENTITY_ENDPOINT=http://127.0.0.1:41741/MSI/token/");
    env_add(&e, "IDENTITY_HEADER=" SECRET);
    check_pick(&e, AML_CRED_MANAGED_IDENTITY, "managed identity (IDENTITY_ENDPOINT)");
}

static void test_pick_precedence(void)
{
    struct env e = { .n = 0 };
    write_pem(path_in("cred.pem"), true, true, NULL);
    /* secret over certificate over workload identity over the managed identities */
    env_add(&e, "AZURE_TENANT_ID=" TENANT);
    env_add(&e, "AZURE_CLIENT_ID=" CLIENT);
    env_add(&e, "AZURE_CLIENT_CERTIFICATE_PATH=%s", path_in("cred.pem"));
    env_add(&e, "AZURE_FEDERATED_TOKEN_FILE=/tmp/x");
    env_add(&e, "MSI_ENDPOINT=http://127.0.0.1:1/x");
    env_add(&e, "MSI_SECRET=x");
    env_add(&e, "IDENTITY_ENDPOINT=http://127.0.0.1:1/x");
    env_add(&e, "IDENTITY_HEADER=x");
    env_add(&e, "AZURE_CLIENT_SECRET=" SECRET);
    check_pick(&e, AML_CRED_CLIENT_SECRET, "client secret (tenant " TENANT ", client " CLIENT ")");

    env_add(&e, "AZURE_TENANT_ID=" TENANT);
    env_add(&e, "AZURE_CLIENT_ID=" CLIENT);
    env_add(&e, "AZURE_CLIENT_SECRET=");                   /* empty: unset, as in azure-identity */
    env_add(&e, "AZURE_FEDERATED_TOKEN_FILE=/tmp/x");
    env_add(&e, "AZURE_CLIENT_CERTIFICATE_PATH=%s", path_in("cred.pem"));
    char want[512];
    snprintf(want, sizeof want, "client certificate (%s, tenant " TENANT ", client " CLIENT ")", path_in("cred.pem"));
    check_pick(&e, AML_CRED_CLIENT_CERTIFICATE, want);

    env_add(&e, "AZURE_TENANT_ID=" TENANT);
    env_add(&e, "AZURE_CLIENT_ID=" CLIENT);
    env_add(&e, "AZURE_FEDERATED_TOKEN_FILE=/tmp/x");
    env_add(&e, "MSI_ENDPOINT=http://127.0.0.1:1/x");
    env_add(&e, "MSI_SECRET=x");
    check_pick(&e, AML_CRED_WORKLOAD_IDENTITY, "workload identity (token file /tmp/x, tenant " TENANT ", client " CLIENT ")");

    env_add(&e, "IDENTITY_ENDPOINT=http://127.0.0.1:1/x");
    env_add(&e, "IDENTITY_HEADER=x");
    env_add(&e, "MSI_ENDPOINT=http://127.0.0.1:1/x");
    env_add(&e, "MSI_SECRET=x");
    check_pick(&e, AML_CRED_AML_COMPUTE, "Azure ML compute identity (MSI_ENDPOINT)");
}

static void test_half_set_credentials_are_refused(void)
{
    struct env e = { .n = 0 };
    env_add(&e, "AZURE_CLIENT_ID=" CLIENT);
    env_add(&e, "AZURE_CLIENT_SECRET=" SECRET);
    check_refused(&e, NULL, "AZURE_CLIENT_SECRET is set but AZURE_TENANT_ID is not", NULL);
    env_add(&e, "AZURE_CLIENT_SECRET=" SECRET);
    check_refused(&e, NULL, "AZURE_CLIENT_SECRET is set but AZURE_TENANT_ID and AZURE_CLIENT_ID are not", NULL);
    env_add(&e, "AZURE_TENANT_ID=" TENANT);
    env_add(&e, "AZURE_CLIENT_CERTIFICATE_PATH=/tmp/x.pem");
    check_refused(&e, NULL, "AZURE_CLIENT_CERTIFICATE_PATH is set but AZURE_CLIENT_ID is not", NULL);
    env_add(&e, "AZURE_TENANT_ID=" TENANT);
    env_add(&e, "AZURE_FEDERATED_TOKEN_FILE=/tmp/x");
    check_refused(&e, NULL, "AZURE_FEDERATED_TOKEN_FILE is set but AZURE_CLIENT_ID is not", NULL);
    env_add(&e, "MSI_SECRET=" SECRET);
    check_refused(&e, NULL, "MSI_SECRET is set but MSI_ENDPOINT is not", NULL);
    env_add(&e, "IDENTITY_ENDPOINT=http://127.0.0.1:1/x");
    check_refused(&e, NULL, "IDENTITY_ENDPOINT is set but IDENTITY_HEADER is not", NULL);
    env_add(&e, "IDENTITY_HEADER=" SECRET);
    check_refused(&e, NULL, "IDENTITY_HEADER is set but IDENTITY_ENDPOINT is not", NULL);
    env_add(&e, "AZURE_TENANT_ID=" TENANT "/../x");
    env_add(&e, "AZURE_CLIENT_ID=" CLIENT);
    env_add(&e, "AZURE_CLIENT_SECRET=" SECRET);
    check_refused(&e, NULL, "AZURE_TENANT_ID is not a tenant id", NULL);
    /* the authority host, from the options or the environment */
    env_add(&e, "AZURE_TENANT_ID=" TENANT);
    env_add(&e, "AZURE_CLIENT_ID=" CLIENT);
    env_add(&e, "AZURE_CLIENT_SECRET=" SECRET);
    env_add(&e, "AZURE_AUTHORITY_HOST=http://login.example.com");
    check_refused(&e, NULL, "AZURE_AUTHORITY_HOST must be https://", NULL);
    env_add(&e, "AZURE_TENANT_ID=" TENANT);
    env_add(&e, "AZURE_CLIENT_ID=" CLIENT);
    env_add(&e, "AZURE_CLIENT_SECRET=" SECRET);
    check_refused(&e, "ftp://x", "authority_host must be https://", NULL);
    /* MSI_SECRET must not break its header */
    env_add(&e, "MSI_ENDPOINT=http://127.0.0.1:1/x");
    env_add(&e, "MSI_SECRET=a\r\nX-Evil: 1");
    check_refused(&e, NULL, "MSI_SECRET holds a control character", NULL);
}

static void check_cert_refused(const char *file, const char *password, const char *want)
{
    struct env e = { .n = 0 };
    env_add(&e, "AZURE_TENANT_ID=" TENANT);
    env_add(&e, "AZURE_CLIENT_ID=" CLIENT);
    env_add(&e, "AZURE_CLIENT_CERTIFICATE_PATH=%s", file);
    if (password) env_add(&e, "AZURE_CLIENT_CERTIFICATE_PASSWORD=%s", password);
    check_refused(&e, NULL, file, want);
}

static void test_unusable_certificates_are_refused(void)
{
    check_cert_refused(path_in("no-such.pem"), NULL, "No such file or directory");
    write_pem(path_in("cert-only.pem"), false, true, NULL);
    check_cert_refused(path_in("cert-only.pem"), NULL, "no private key");
    write_pem(path_in("key-only.pem"), true, false, NULL);
    check_cert_refused(path_in("key-only.pem"), NULL, "no certificate");
    write_pem(path_in("enc2.pem"), true, true, "right");
    check_cert_refused(path_in("enc2.pem"), NULL, "set AZURE_CLIENT_CERTIFICATE_PASSWORD");
    check_cert_refused(path_in("enc2.pem"), "wrong", "cannot decrypt");
    write_text(path_in("cert.pfx"), "\x30\x82\x05\x00 binary");
    check_cert_refused(path_in("cert.pfx"), NULL, "not a PEM file");
    /* a certificate that is not the key's */
    EVP_PKEY *other = EVP_RSA_gen(1024);
    FILE *f = fopen(path_in("mismatch.pem"), "w");
    PEM_write_PrivateKey(f, other, NULL, NULL, 0, NULL, NULL);
    PEM_write_X509(f, g_cert);
    fclose(f);
    EVP_PKEY_free(other);
    check_cert_refused(path_in("mismatch.pem"), NULL, "does not belong to the private key");
}

/* ---- against a token server ------------------------------------------------------ */

struct got {
    int calls;
    char token[256], error[2048];
};

static void on_token(void *arg, const char *token, const char *error)
{
    struct got *g = arg;
    g->calls++;
    snprintf(g->token, sizeof g->token, "%s", token ? token : "");
    snprintf(g->error, sizeof g->error, "%s", error ? error : "");
    CHECK((token == NULL) != (error == NULL));
}

static bool wait_for(const int *calls, int n, double limit)
{
    double until = monotonic_seconds() + limit;
    while (*calls < n && monotonic_seconds() < until) loop_run_once(g_loop, 0.05);
    return *calls >= n;
}

/* One token, or the message. */
static void get(struct aml_auth *a, struct got *g)
{
    int before = g->calls;
    aml_auth_get_token(a, on_token, g);
    CHECK(g->calls == before);           /* never from within the call */
    CHECK(wait_for(&g->calls, before + 1, 8));
}

static void config(const char *json)
{
    write_text(path_in("config.json.tmp"), json);
    if (rename(path_in("config.json.tmp"), path_in("config.json")) != 0) { perror("rename"); exit(2); }
    unlink(path_in("log.jsonl"));
}

/* How many requests the server logged; its log into *log when asked. */
static int requests(char **log)
{
    size_t n = 0;
    char *text = read_file(path_in("log.jsonl"), &n);
    int lines = 0;
    for (size_t i = 0; text && i < n; i++) lines += text[i] == '\n';
    if (log) *log = text ? text : xstrdup("");
    else free(text);
    return lines;
}

static char g_authority[64];

static struct aml_auth *server_auth(struct env *e)
{
    char err[1024];
    struct aml_auth *a = auth_for(e, g_authority, err, sizeof err);
    if (!a) fprintf(stderr, "    aml_auth_new: %s\n", err);
    env_free(e);
    return a;
}

static void secret_env(struct env *e, const char *secret)
{
    env_add(e, "AZURE_TENANT_ID=" TENANT);
    env_add(e, "AZURE_CLIENT_ID=" CLIENT);
    env_add(e, "AZURE_CLIENT_SECRET=%s", secret);
}

#define CFG_IDS "\"tenant\":\"" TENANT "\",\"client_id\":\"" CLIENT "\""

static void test_secret_flow_and_the_cache(void)
{
    config("{" CFG_IDS ",\"secret\":\"" SECRET "\",\"expires_in\":3600}");
    struct env e = { .n = 0 };
    secret_env(&e, SECRET);
    struct aml_auth *a = server_auth(&e);
    CHECK(a != NULL);
    if (!a) return;
    struct got g = { 0 };
    get(a, &g);
    CHECK_STR(g.token, "tok-1");
    CHECK_STR(g.error, "");
    CHECK(aml_auth_expires_in(a) > 3500 && aml_auth_expires_in(a) <= 3600);
    char *log;
    CHECK(requests(&log) == 1);
    CHECK_CONTAINS(log, "\"kind\": \"secret\", \"ok\": true");
    free(log);
    /* fresh: from the cache, still from the loop */
    get(a, &g);
    CHECK_STR(g.token, "tok-1");
    CHECK(requests(NULL) == 1);
    /* a 401 from ARM: the next get fetches anew */
    aml_auth_invalidate(a);
    CHECK(aml_auth_expires_in(a) < 0);
    get(a, &g);
    CHECK_STR(g.token, "tok-2");
    CHECK(requests(NULL) == 2);
    aml_auth_free(a);
}

static void test_token_with_five_minutes_left_is_refreshed(void)
{
    config("{" CFG_IDS ",\"secret\":\"" SECRET "\",\"expires_in\":300}");
    struct env e = { .n = 0 };
    secret_env(&e, SECRET);
    struct aml_auth *a = server_auth(&e);
    if (!a) { CHECK(a != NULL); return; }
    struct got g = { 0 };
    get(a, &g);
    CHECK(g.token[0] != '\0');
    char first[256];
    snprintf(first, sizeof first, "%s", g.token);
    get(a, &g);
    CHECK(g.token[0] && strcmp(g.token, first) != 0);
    CHECK(requests(NULL) == 2);
    aml_auth_free(a);
}

/* A refresh (under five minutes left) that fails: the old token still
 * serves while it has a minute; an invalidated one does not. */
static void test_failed_refresh_keeps_a_valid_token(void)
{
    config("{" CFG_IDS ",\"secret\":\"" SECRET "\",\"expires_in\":200}");
    struct env e = { .n = 0 };
    secret_env(&e, SECRET);
    struct aml_auth *a = server_auth(&e);
    if (!a) { CHECK(a != NULL); return; }
    struct got g = { 0 };
    get(a, &g);
    char first[256];
    snprintf(first, sizeof first, "%s", g.token);
    CHECK(first[0] != '\0');
    config("{" CFG_IDS ",\"secret\":\"rotated\"}");
    get(a, &g);
    CHECK_STR(g.token, first);
    CHECK(requests(NULL) == 1);          /* it did try */
    aml_auth_invalidate(a);
    get(a, &g);
    CHECK_STR(g.token, "");
    CHECK_CONTAINS(g.error, "invalid_client");
    aml_auth_free(a);
}

static void test_concurrent_gets_share_one_fetch(void)
{
    config("{" CFG_IDS ",\"secret\":\"" SECRET "\",\"delay\":0.3}");
    struct env e = { .n = 0 };
    secret_env(&e, SECRET);
    struct aml_auth *a = server_auth(&e);
    if (!a) { CHECK(a != NULL); return; }
    struct got g[4] = { { 0 } };
    aml_auth_get_token(a, on_token, &g[0]);
    for (int i = 0; i < 3; i++) loop_run_once(g_loop, 0.03);         /* the fetch is under way */
    aml_auth_get_token(a, on_token, &g[1]);
    aml_auth_get_token(a, on_token, &g[2]);
    aml_auth_get_token(a, on_token, &g[3]);
    aml_auth_forget(a, &g[3]);           /* that waiter went away */
    CHECK(wait_for(&g[2].calls, 1, 8));
    for (int i = 0; i < 3; i++) loop_run_once(g_loop, 0.01);
    for (int i = 0; i < 3; i++) {
        CHECK(g[i].calls == 1);
        CHECK(g[i].token[0] && strcmp(g[i].token, g[0].token) == 0);
    }
    CHECK(g[3].calls == 0);
    CHECK(requests(NULL) == 1);
    aml_auth_free(a);
}

static void test_bad_secret_gives_entra_error_without_the_secret(void)
{
    config("{" CFG_IDS ",\"secret\":\"the-right-one\"}");
    struct env e = { .n = 0 };
    secret_env(&e, SECRET);
    struct aml_auth *a = server_auth(&e);
    if (!a) { CHECK(a != NULL); return; }
    struct got g[2] = { { 0 } };
    aml_auth_get_token(a, on_token, &g[0]);
    aml_auth_get_token(a, on_token, &g[1]);
    CHECK(wait_for(&g[1].calls, 1, 8));
    for (int i = 0; i < 2; i++) {
        CHECK(g[i].calls == 1);
        CHECK_STR(g[i].token, "");
        CHECK_CONTAINS(g[i].error, "client secret credential (AZURE_CLIENT_ID=" CLIENT "): invalid_client");
        CHECK_CONTAINS(g[i].error, "AADSTS7000215");
        CHECK_CONTAINS(g[i].error, "HTTP 401");
        CHECK_CONTAINS(g[i].error, "req-");
        CHECK(!strstr(g[i].error, SECRET));
        CHECK(!strstr(g[i].error, "s3cr3t"));
    }
    CHECK(requests(NULL) == 1);
    CHECK(aml_auth_expires_in(a) < 0);
    aml_auth_free(a);
}

static void test_certificate_flow(void)
{
    write_pem(path_in("flow.pem"), true, true, NULL);
    char cfg[1024];
    snprintf(cfg, sizeof cfg, "{" CFG_IDS ",\"cert\":\"%s\"}", path_in("flow.pem"));
    config(cfg);
    struct env e = { .n = 0 };
    env_add(&e, "AZURE_TENANT_ID=" TENANT);
    env_add(&e, "AZURE_CLIENT_ID=" CLIENT);
    env_add(&e, "AZURE_CLIENT_CERTIFICATE_PATH=%s", path_in("flow.pem"));
    struct aml_auth *a = server_auth(&e);
    if (!a) { CHECK(a != NULL); return; }
    struct got g = { 0 };
    get(a, &g);
    CHECK_STR(g.error, "");
    CHECK(g.token[0] != '\0');
    char *log;
    CHECK(requests(&log) == 1);
    CHECK_CONTAINS(log, "\"kind\": \"certificate\", \"ok\": true");   /* x5t, claims checked there */
    if (!strstr(log, "\"signature_checked\": true"))
        fprintf(stderr, "  (no python3-cryptography: the server checked the assertion's form, not its signature)\n");
    free(log);
    aml_auth_free(a);

    /* the server knows another certificate for this client: refused, and said so */
    EVP_PKEY *other_key = EVP_RSA_gen(1024);
    X509 *other = X509_dup(g_cert);
    X509_set_pubkey(other, other_key);
    X509_sign(other, other_key, EVP_sha256());
    FILE *f = fopen(path_in("other.pem"), "w");
    PEM_write_X509(f, other);
    fclose(f);
    X509_free(other);
    EVP_PKEY_free(other_key);
    snprintf(cfg, sizeof cfg, "{" CFG_IDS ",\"cert\":\"%s\"}", path_in("other.pem"));
    config(cfg);
    env_add(&e, "AZURE_TENANT_ID=" TENANT);
    env_add(&e, "AZURE_CLIENT_ID=" CLIENT);
    env_add(&e, "AZURE_CLIENT_CERTIFICATE_PATH=%s", path_in("flow.pem"));
    a = server_auth(&e);
    if (!a) { CHECK(a != NULL); return; }
    get(a, &g);
    CHECK_CONTAINS(g.error, "client certificate credential (AZURE_CLIENT_CERTIFICATE_PATH=");
    CHECK_CONTAINS(g.error, "invalid_client: AADSTS700027");
    CHECK(!strstr(g.error, "eyJ"));
    CHECK(requests(&log) == 1);
    CHECK_CONTAINS(log, "\"why\": \"x5t");
    free(log);
    aml_auth_free(a);
}

static void test_workload_identity_reads_the_file_each_time(void)
{
    write_text(path_in("federated"), "  fed-token-1\n");
    config("{" CFG_IDS ",\"assertion\":\"fed-token-1\"}");
    struct env e = { .n = 0 };
    env_add(&e, "AZURE_TENANT_ID=" TENANT);
    env_add(&e, "AZURE_CLIENT_ID=" CLIENT);
    env_add(&e, "AZURE_FEDERATED_TOKEN_FILE=%s", path_in("federated"));
    struct aml_auth *a = server_auth(&e);
    if (!a) { CHECK(a != NULL); return; }
    struct got g = { 0 };
    get(a, &g);
    CHECK_STR(g.error, "");
    char *log;
    CHECK(requests(&log) == 1);
    CHECK_CONTAINS(log, "\"kind\": \"workload\", \"ok\": true");
    free(log);
    write_text(path_in("federated"), "fed-token-2");               /* Kubernetes rotated it */
    config("{" CFG_IDS ",\"assertion\":\"fed-token-2\"}");
    aml_auth_invalidate(a);
    get(a, &g);
    CHECK_STR(g.error, "");
    CHECK(requests(&log) == 1);
    CHECK_CONTAINS(log, "\"assertion\": \"fed-token-2\"");
    free(log);
    write_text(path_in("federated"), "");
    aml_auth_invalidate(a);
    get(a, &g);
    CHECK_CONTAINS(g.error, "is empty");
    unlink(path_in("federated"));
    get(a, &g);
    CHECK_CONTAINS(g.error, "cannot read");
    CHECK_CONTAINS(g.error, path_in("federated"));
    aml_auth_free(a);
}

static void test_managed_identity_endpoints(void)
{
    config("{\"msi_secret\":\"" SECRET "\",\"identity_header\":\"" SECRET "\",\"expires_in\":1800}");
    struct env e = { .n = 0 };
    env_add(&e, "MSI_ENDPOINT=http://127.0.0.1:%d/msi/token", g_port);
    env_add(&e, "MSI_SECRET=" SECRET);
    env_add(&e, "AZURE_CLIENT_ID=" CLIENT);
    struct aml_auth *a = server_auth(&e);
    if (!a) { CHECK(a != NULL); return; }
    struct got g = { 0 };
    get(a, &g);
    CHECK_STR(g.error, "");
    CHECK(g.token[0] != '\0');
    CHECK(aml_auth_expires_in(a) > 1700 && aml_auth_expires_in(a) <= 1800);
    char *log;
    CHECK(requests(&log) == 1);
    CHECK_CONTAINS(log, "\"kind\": \"msi\", \"ok\": true");
    CHECK_CONTAINS(log, "\"clientid\": \"" CLIENT "\"");
    free(log);
    aml_auth_free(a);

    env_add(&e, "IDENTITY_ENDPOINT=http://127.0.0.1:%d/identity/token", g_port);
    env_add(&e, "IDENTITY_HEADER=" SECRET);
    a = server_auth(&e);
    if (!a) { CHECK(a != NULL); return; }
    get(a, &g);
    CHECK_STR(g.error, "");
    CHECK(aml_auth_expires_in(a) > 1700);
    CHECK(requests(&log) == 2);
    CHECK_CONTAINS(log, "\"kind\": \"identity\", \"ok\": true");
    free(log);
    aml_auth_free(a);

    /* a wrong secret header: the error names the credential, not the secret */
    config("{\"msi_secret\":\"other\"}");
    env_add(&e, "MSI_ENDPOINT=http://127.0.0.1:%d/msi/token", g_port);
    env_add(&e, "MSI_SECRET=" SECRET);
    a = server_auth(&e);
    if (!a) { CHECK(a != NULL); return; }
    get(a, &g);
    CHECK_CONTAINS(g.error, "Azure ML compute identity (MSI_ENDPOINT): ");
    CHECK_CONTAINS(g.error, "HTTP 400");
    CHECK(!strstr(g.error, SECRET));
    aml_auth_free(a);
}

/* ---- IMDS, then the Azure CLI ------------------------------------------------------- */

static char *g_old_path;

static void fake_az(const char *body)
{
    mkdir(path_in("bin"), 0755);
    char *script = xasprintf("#!/bin/sh\necho \"$PWD|$AZURE_CORE_NO_COLOR|$*\" >> '%s'\n%s\n", path_in("az.log"), body);
    write_text(path_in("bin/az"), script);
    free(script);
    chmod(path_in("bin/az"), 0755);
    char *path = xasprintf("%s:%s", path_in("bin"), g_old_path);
    setenv("PATH", path, 1);
    free(path);
    unlink(path_in("az.log"));
}

static struct aml_auth *auto_auth(int imds_port)
{
    struct env e = { .n = 0 };
    env_add(&e, "IMDS_ENDPOINT=http://127.0.0.1:%d", imds_port);
    return server_auth(&e);
}

#define AZ_OK "printf '{\"accessToken\": \"cli-token\", \"expiresOn\": \"2099-01-01 00:00:00.000000\", " \
              "\"expires_on\": 4070908800, \"subscription\": \"s\", \"tenant\": \"t\", \"tokenType\": \"Bearer\"}\\n'"

static void test_nothing_configured_falls_back_to_the_cli(void)
{
    fake_az(AZ_OK);
    struct aml_auth *a = auto_auth(check_loopback_port());
    if (!a) { CHECK(a != NULL); return; }
    CHECK(aml_auth_kind(a) == AML_CRED_NONE);
    struct got g = { 0 };
    get(a, &g);
    CHECK_STR(g.error, "");
    CHECK_STR(g.token, "cli-token");
    CHECK(aml_auth_kind(a) == AML_CRED_AZURE_CLI);
    CHECK_STR(aml_auth_describe(a), "Azure CLI");
    CHECK(aml_auth_expires_in(a) > 1e9);
    size_t n;
    char *log = read_file(path_in("az.log"), &n);
    CHECK_STR(log, "/|true|account get-access-token --output json --resource https://management.azure.com\n");
    free(log);
    /* settled: the CLI straight away next time */
    aml_auth_invalidate(a);
    get(a, &g);
    CHECK_STR(g.token, "cli-token");
    aml_auth_free(a);

    /* IMDS answering 404 with HTML (not Azure's): the CLI too */
    config("{\"imds\":\"absent\"}");
    a = auto_auth(g_port);
    if (!a) { CHECK(a != NULL); return; }
    get(a, &g);
    CHECK_STR(g.token, "cli-token");
    CHECK(aml_auth_kind(a) == AML_CRED_AZURE_CLI);
    aml_auth_free(a);
}

static void test_imds_when_it_answers(void)
{
    config("{\"imds\":\"token\"}");
    fake_az("exit 1");
    struct aml_auth *a = auto_auth(g_port);
    if (!a) { CHECK(a != NULL); return; }
    struct got g = { 0 };
    get(a, &g);
    CHECK_STR(g.error, "");
    CHECK(g.token[0] != '\0');
    CHECK(aml_auth_kind(a) == AML_CRED_MANAGED_IDENTITY);
    CHECK_STR(aml_auth_describe(a), "managed identity (IMDS)");
    CHECK(aml_auth_expires_in(a) > 3500);
    char *log;
    CHECK(requests(&log) == 1);
    CHECK_CONTAINS(log, "\"kind\": \"imds\", \"ok\": true");
    free(log);
    struct stat st;
    CHECK(stat(path_in("az.log"), &st) != 0);       /* az was not run */
    aml_auth_free(a);
}

static void test_busy_imds_is_asked_again(void)
{
    config("{\"imds\":\"busy-once\",\"busy_key\":\"k1\"}");
    fake_az("exit 1");
    struct aml_auth *a = auto_auth(g_port);
    if (!a) { CHECK(a != NULL); return; }
    struct got g = { 0 };
    get(a, &g);
    CHECK_STR(g.error, "");
    CHECK(aml_auth_kind(a) == AML_CRED_MANAGED_IDENTITY);
    CHECK(requests(NULL) == 2);
    aml_auth_free(a);
}

static void test_cli_not_logged_in_and_missing(void)
{
    fake_az("echo \"ERROR: Please run 'az login' to setup account.\" >&2; exit 1");
    config("{\"imds\":\"no-identity\"}");
    struct aml_auth *a = auto_auth(g_port);
    if (!a) { CHECK(a != NULL); return; }
    struct got g = { 0 };
    get(a, &g);
    CHECK_CONTAINS(g.error, "Azure CLI: not logged in; run az login");
    CHECK(aml_auth_kind(a) == AML_CRED_AZURE_CLI);
    aml_auth_free(a);

    fake_az("echo 'az: command not found' >&2; exit 127");
    a = auto_auth(check_loopback_port());
    if (!a) { CHECK(a != NULL); return; }
    get(a, &g);
    CHECK_CONTAINS(g.error, "Azure CLI not found");
    CHECK_CONTAINS(g.error, "IMDS did not answer");
    aml_auth_free(a);

    setenv("PATH", path_in("empty"), 1);             /* no az at all */
    a = auto_auth(check_loopback_port());
    if (!a) { CHECK(a != NULL); return; }
    get(a, &g);
    CHECK_CONTAINS(g.error, "Azure CLI not found");
    CHECK_CONTAINS(g.error, "az login");
    aml_auth_free(a);
    setenv("PATH", g_old_path, 1);
}

/* ---- freeing at awkward moments ---------------------------------------------------- */

static struct aml_auth *g_freed_by_callback;

static void free_from_callback(void *arg, const char *token, const char *error)
{
    on_token(arg, token, error);
    aml_auth_free(g_freed_by_callback);
}

static void test_free_during_a_fetch_and_from_a_callback(void)
{
    config("{" CFG_IDS ",\"secret\":\"" SECRET "\",\"delay\":0.3}");
    struct env e = { .n = 0 };
    secret_env(&e, SECRET);
    struct aml_auth *a = server_auth(&e);
    if (!a) { CHECK(a != NULL); return; }
    struct got g = { 0 };
    aml_auth_get_token(a, on_token, &g);
    for (int i = 0; i < 3; i++) loop_run_once(g_loop, 0.02);
    aml_auth_free(a);                                /* the request is cancelled */
    for (int i = 0; i < 20; i++) loop_run_once(g_loop, 0.02);
    CHECK(g.calls == 0);

    /* the first waiter frees it: the second is not called back */
    config("{" CFG_IDS ",\"secret\":\"" SECRET "\"}");
    secret_env(&e, SECRET);
    a = server_auth(&e);
    if (!a) { CHECK(a != NULL); return; }
    struct got g2[2] = { { 0 } };
    g_freed_by_callback = a;
    aml_auth_get_token(a, free_from_callback, &g2[0]);
    aml_auth_get_token(a, on_token, &g2[1]);
    CHECK(wait_for(&g2[0].calls, 1, 8));
    for (int i = 0; i < 3; i++) loop_run_once(g_loop, 0.01);
    CHECK(g2[0].calls == 1 && g2[0].token[0]);
    CHECK(g2[1].calls == 0);
}

/* ---- the server ------------------------------------------------------------------------- */

static bool start_server(void)
{
    if (access("/usr/bin/python3", X_OK) != 0) return false;
    char *root = check_repo_root();
    if (!root) return false;
    char *script = xasprintf("%s/tests/unit/token_server.py", root);
    free(root);
    if (access(script, R_OK) != 0) { free(script); return false; }
    config("{}");
    int fds[2];
    if (pipe(fds) != 0) { free(script); return false; }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    posix_spawn_file_actions_addclose(&fa, fds[0]);
    char *argv[] = { "python3", script, path_in("config.json"), path_in("log.jsonl"), NULL };
    int rc = posix_spawn(&g_server, "/usr/bin/python3", &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    free(script);
    char line[32] = "";
    size_t len = 0;
    while (rc == 0 && len < sizeof line - 1 && !memchr(line, '\n', len)) {
        ssize_t got = read(fds[0], line + len, sizeof line - 1 - len);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) break;
        len += (size_t)got;
    }
    close(fds[0]);
    line[len] = '\0';
    if (!memchr(line, '\n', len)) return false;
    g_port = atoi(line);
    snprintf(g_authority, sizeof g_authority, "http://127.0.0.1:%d", g_port);
    return g_port > 0;
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    if (!mkdtemp(dir)) { perror("mkdtemp"); return 2; }
    char err[256];
    g_loop = loop_new(err, sizeof err);
    if (!g_loop) { fprintf(stderr, "loop_new: %s\n", err); return 2; }
    struct http_options ho = { .max_retries = -1, .timeout = 10 };
    g_http = http_client_new(g_loop, &ho, err, sizeof err);
    if (!g_http) { fprintf(stderr, "http_client_new: %s\n", err); return 2; }
    g_old_path = xstrdup(getenv("PATH") ? getenv("PATH") : "/usr/bin:/bin");
    make_cert();

    RUN(test_authority_host_is_normalised);
    RUN(test_token_answers_each_expiry_form);
    RUN(test_cli_output_both_expiry_forms);
    RUN(test_cli_failures_are_explained);
    RUN(test_client_assertion_is_a_verifiable_rs256_jwt);
    RUN(test_pick_each_credential);
    RUN(test_pick_precedence);
    RUN(test_half_set_credentials_are_refused);
    RUN(test_unusable_certificates_are_refused);

    if (start_server()) {
        RUN(test_secret_flow_and_the_cache);
        RUN(test_token_with_five_minutes_left_is_refreshed);
        RUN(test_failed_refresh_keeps_a_valid_token);
        RUN(test_concurrent_gets_share_one_fetch);
        RUN(test_bad_secret_gives_entra_error_without_the_secret);
        RUN(test_certificate_flow);
        RUN(test_workload_identity_reads_the_file_each_time);
        RUN(test_managed_identity_endpoints);
        RUN(test_nothing_configured_falls_back_to_the_cli);
        RUN(test_imds_when_it_answers);
        RUN(test_busy_imds_is_asked_again);
        RUN(test_cli_not_logged_in_and_missing);
        RUN(test_free_during_a_fetch_and_from_a_callback);
        kill(g_server, SIGKILL);         /* it inherited the loop's blocked SIGTERM */
        waitpid(g_server, NULL, 0);
    } else {
        fprintf(stderr, "aml_auth: no python3 or tests/unit/token_server.py: the server tests are skipped\n");
    }

    http_client_free(g_http);
    loop_free(g_loop);
    EVP_PKEY_free(g_key);
    X509_free(g_cert);
    free(g_old_path);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return CHECK_DONE("aml_auth");
}
