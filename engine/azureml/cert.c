/* cert.c — see cert.h.  OpenSSL 3 (libcrypto) does the parsing, hashing and
 * signing; cJSON writes the JWT's two JSON parts. */
#include "azureml/cert.h"
#include "crypto_lib.h"
#include "util.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* A PEM file with a key and a certificate is a few KiB; a chain a few more. */
#define CERT_FILE_MAX (1024 * 1024)
#define ASSERTION_LIFETIME_S 600

struct aml_cert {
    EVP_PKEY *key;
    char *x5t;
};

char *aml_base64url(const unsigned char *data, size_t n)
{
    const struct crypto_lib *ossl = crypto_lib();
    /* EVP_EncodeBlock writes 4 characters per 3 bytes (padded) and a NUL. */
    char *out = xmalloc(4 * ((n + 2) / 3) + 1);
    int len = ossl->EVP_EncodeBlock((unsigned char *)out, data, (int)n);
    while (len > 0 && out[len - 1] == '=') len--;
    out[len] = '\0';
    for (int i = 0; i < len; i++) {
        if (out[i] == '+') out[i] = '-';
        else if (out[i] == '/') out[i] = '_';
    }
    return out;
}

bool aml_uuid4(char out[37])
{
    const struct crypto_lib *ossl = crypto_lib();
    unsigned char b[16];
    if (ossl->RAND_bytes(b, sizeof b) != 1) return false;
    b[6] = (unsigned char)((b[6] & 0x0f) | 0x40);      /* version 4 */
    b[8] = (unsigned char)((b[8] & 0x3f) | 0x80);      /* RFC 4122 variant */
    snprintf(out, 37, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
             b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
    return true;
}

/* OpenSSL asks for the password through this; never from the terminal
 * (which is what a NULL callback would do). */
static int password_cb(char *buf, int size, int rwflag, void *u)
{
    (void)rwflag;
    const char *pw = u;
    if (!pw) return -1;
    size_t n = strlen(pw);
    if (n > (size_t)size) return -1;
    memcpy(buf, pw, n);
    return (int)n;
}

static bool read_key(struct aml_cert *c, const char *text, size_t len, const char *path, const char *password,
                     char *err, size_t errlen)
{
    const struct crypto_lib *ossl = crypto_lib();
    BIO *bio = ossl->BIO_new_mem_buf(text, (int)len);
    if (!bio) { errf(err, errlen, "%s: out of memory in OpenSSL", path); return false; }
    c->key = ossl->PEM_read_bio_PrivateKey(bio, NULL, password_cb, (void *)password);
    ossl->BIO_free(bio);
    ossl->ERR_clear_error();
    if (c->key) {
        if (ossl->EVP_PKEY_get_base_id(c->key) == EVP_PKEY_RSA) return true;
        errf(err, errlen, "%s: the private key is not an RSA key (RS256 client assertions need one)", path);
        return false;
    }
    bool encrypted = memmem(text, len, "ENCRYPTED", 9) != NULL;
    if (encrypted && !password)
        errf(err, errlen, "%s: the private key is encrypted; set AZURE_CLIENT_CERTIFICATE_PASSWORD", path);
    else if (encrypted)
        errf(err, errlen, "%s: cannot decrypt the private key (is AZURE_CLIENT_CERTIFICATE_PASSWORD right?)", path);
    else if (memmem(text, len, "-----BEGIN", 10))
        errf(err, errlen, "%s: no private key in this PEM file (it must hold the key and the certificate)", path);
    else
        errf(err, errlen, "%s: not a PEM file (a PKCS#12/PFX file can be converted with "
             "`openssl pkcs12 -in FILE -nodes -out FILE.pem`)", path);
    return false;
}

static bool read_cert(struct aml_cert *c, const char *text, size_t len, const char *path, char *err, size_t errlen)
{
    const struct crypto_lib *ossl = crypto_lib();
    BIO *bio = ossl->BIO_new_mem_buf(text, (int)len);
    if (!bio) { errf(err, errlen, "%s: out of memory in OpenSSL", path); return false; }
    /* The first certificate is the client's own; any that follow are its chain. */
    X509 *x = ossl->PEM_read_bio_X509(bio, NULL, password_cb, NULL);
    ossl->BIO_free(bio);
    ossl->ERR_clear_error();
    if (!x) { errf(err, errlen, "%s: no certificate in this PEM file (it must hold the key and the certificate)", path); return false; }
    bool ok = false;
    if (ossl->X509_check_private_key(x, c->key) != 1) {
        errf(err, errlen, "%s: the certificate does not belong to the private key", path);
    } else {
        unsigned char *der = NULL;
        int n = ossl->i2d_X509(x, &der);
        unsigned char sha1[EVP_MAX_MD_SIZE];
        unsigned int sha1_len = 0;
        if (n > 0 && ossl->EVP_Digest(der, (size_t)n, sha1, &sha1_len, ossl->EVP_sha1(), NULL) == 1) {
            c->x5t = aml_base64url(sha1, sha1_len);
            ok = true;
        } else {
            errf(err, errlen, "%s: cannot compute the certificate's thumbprint", path);
        }
        ossl->CRYPTO_free(der, __FILE__, __LINE__);
    }
    ossl->ERR_clear_error();
    ossl->X509_free(x);
    return ok;
}

struct aml_cert *aml_cert_load(const char *path, const char *password, char *err, size_t errlen)
{
    size_t len = 0;
    char *text = read_file_max(path, CERT_FILE_MAX, &len);
    if (!text) {
        errf(err, errlen, "cannot read %s: %s", path, errno == EFBIG ? "larger than 1 MiB, not a certificate" : strerror(errno));
        return NULL;
    }
    struct aml_cert *c = xcalloc(1, sizeof *c);
    bool ok = read_key(c, text, len, path, password, err, errlen) && read_cert(c, text, len, path, err, errlen);
    wipe(text, len);          /* it held the private key */
    free(text);
    if (!ok) { aml_cert_free(c); return NULL; }
    return c;
}

void aml_cert_free(struct aml_cert *c)
{
    if (!c) return;
    crypto_lib()->EVP_PKEY_free(c->key);
    free(c->x5t);
    free(c);
}

const char *aml_cert_x5t(const struct aml_cert *c)
{
    return c->x5t;
}

static char *json_part(cJSON *obj)
{
    char *json = cJSON_PrintUnformatted(obj);
    if (!json) { fprintf(stderr, "flow: out of memory\n"); abort(); }
    char *b64 = aml_base64url((const unsigned char *)json, strlen(json));
    cJSON_free(json);
    cJSON_Delete(obj);
    return b64;
}

static cJSON *json_object(void)
{
    cJSON *o = cJSON_CreateObject();
    if (!o) { fprintf(stderr, "flow: out of memory\n"); abort(); }
    return o;
}

/* cJSON's setters return NULL only when out of memory. */
static void add_string(cJSON *o, const char *name, const char *value)
{
    if (!cJSON_AddStringToObject(o, name, value)) { fprintf(stderr, "flow: out of memory\n"); abort(); }
}

static void add_number(cJSON *o, const char *name, double value)
{
    if (!cJSON_AddNumberToObject(o, name, value)) { fprintf(stderr, "flow: out of memory\n"); abort(); }
}

/* RS256: RSASSA-PKCS1-v1_5 with SHA-256 over "header.claims". */
static unsigned char *sign(EVP_PKEY *key, const char *input, size_t *sig_len)
{
    const struct crypto_lib *ossl = crypto_lib();
    EVP_MD_CTX *md = ossl->EVP_MD_CTX_new();
    EVP_PKEY_CTX *pctx = NULL;
    unsigned char *sig = NULL;
    size_t n = 0;
    if (md && ossl->EVP_DigestSignInit(md, &pctx, ossl->EVP_sha256(), NULL, key) == 1 &&
        ossl->EVP_PKEY_CTX_set_rsa_padding(pctx, RSA_PKCS1_PADDING) == 1 &&
        ossl->EVP_DigestSign(md, NULL, &n, (const unsigned char *)input, strlen(input)) == 1) {
        sig = xmalloc(n);
        if (ossl->EVP_DigestSign(md, sig, &n, (const unsigned char *)input, strlen(input)) != 1) {
            free(sig);
            sig = NULL;
        }
    }
    ossl->EVP_MD_CTX_free(md);
    ossl->ERR_clear_error();
    *sig_len = n;
    return sig;
}

char *aml_cert_assertion(const struct aml_cert *c, const char *audience, const char *client_id, time_t now,
                         char *err, size_t errlen)
{
    char jti[37];
    if (!aml_uuid4(jti)) { errf(err, errlen, "the random generator failed (client assertion's jti)"); return NULL; }
    cJSON *header = json_object();
    add_string(header, "alg", "RS256");
    add_string(header, "typ", "JWT");
    add_string(header, "x5t", c->x5t);
    cJSON *claims = json_object();
    add_string(claims, "aud", audience);
    add_string(claims, "iss", client_id);
    add_string(claims, "sub", client_id);
    add_string(claims, "jti", jti);
    add_number(claims, "nbf", (double)now);
    add_number(claims, "iat", (double)now);
    add_number(claims, "exp", (double)now + ASSERTION_LIFETIME_S);
    char *h = json_part(header), *p = json_part(claims);
    struct strbuf jwt = STRBUF_INIT;
    sb_addf(&jwt, "%s.%s", h, p);
    free(h);
    free(p);
    size_t sig_len;
    unsigned char *sig = sign(c->key, jwt.buf, &sig_len);
    if (!sig) {
        errf(err, errlen, "cannot sign the client assertion with the certificate's key");
        sb_release(&jwt);
        return NULL;
    }
    char *s = aml_base64url(sig, sig_len);
    free(sig);
    sb_addc(&jwt, '.');
    sb_adds(&jwt, s);
    free(s);
    return sb_detach(&jwt);
}
