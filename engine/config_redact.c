/* config_redact.c — secrets masked in text: messages, and a step's output as it
 * streams from its pipes (see config_redact_span in config.h).  The secrets are
 * collected by config.c when the credentials are loaded. */
#define FLOW_CONFIG_INTERNAL
#include "config.h"
#include "util.h"

#include <string.h>

size_t config_redact_span(const struct config *cfg, const char *buf, size_t len, bool final,
                          struct strbuf *out)
{
    size_t n = cfg ? cfg->nsecrets : 0;
    if (n == 0) {
        sb_add(out, buf, len);
        return len;
    }
    bool first[256] = {false};           /* the bytes a secret starts with: skip the rest fast */
    for (size_t k = 0; k < n; k++)
        first[(unsigned char)cfg->secrets[k][0]] = true;
    size_t i = 0, plain = 0;             /* buf[plain..i) is text to copy as it is */
    while (i < len) {
        if (!first[(unsigned char)buf[i]]) {
            i++;
            continue;
        }
        size_t best = 0;
        bool maybe = false;              /* a secret may go on past the end of buf */
        for (size_t k = 0; k < n; k++) {
            const char *s = cfg->secrets[k];
            size_t sl = strlen(s);
            if (sl <= len - i) {
                if (sl > best && memcmp(buf + i, s, sl) == 0)
                    best = sl;
            } else if (!final && memcmp(buf + i, s, len - i) == 0) {
                maybe = true;
            }
        }
        if (maybe)                       /* decide once the next bytes are here */
            break;
        if (!best) {
            i++;
            continue;
        }
        sb_add(out, buf + plain, i - plain);
        sb_add(out, "***", 3);
        i += best;
        plain = i;
    }
    sb_add(out, buf + plain, i - plain);
    return i;
}

char *config_redact(const struct config *cfg, const char *text)
{
    if (!text)
        return NULL;
    struct strbuf out = STRBUF_INIT;
    config_redact_span(cfg, text, strlen(text), true, &out);
    return sb_detach(&out);
}
