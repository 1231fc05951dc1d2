/* blob_xml.c — see blob_xml.h. */
#include "azureml/blob_xml.h"

#include "util.h"

#include <expat.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

struct walk {
    XML_Parser parser;
    blob_xml_fn fn;
    void *ctx;
    int depth;                                  /* elements open */
    bool refused;                               /* too deep or too long */
    struct strbuf path;                         /* "A/B/C" of the open elements */
    size_t path_len[BLOB_XML_MAX_DEPTH];        /* path's length before each one */
    struct strbuf text[BLOB_XML_MAX_DEPTH];     /* each open element's own text */
};

static void refuse(struct walk *w)
{
    w->refused = true;
    XML_StopParser(w->parser, XML_FALSE);
}

static void XMLCALL on_start(void *arg, const XML_Char *name, const XML_Char **attrs)
{
    (void)attrs;
    struct walk *w = arg;
    if (w->refused) return;
    if (w->depth == BLOB_XML_MAX_DEPTH) { refuse(w); return; }
    w->path_len[w->depth] = w->path.len;
    if (w->depth > 0) sb_addc(&w->path, '/');
    sb_adds(&w->path, name);
    sb_truncate(&w->text[w->depth], 0);
    w->depth++;
}

static void XMLCALL on_text(void *arg, const XML_Char *s, int len)
{
    struct walk *w = arg;
    if (w->refused || w->depth == 0 || len <= 0) return;
    struct strbuf *t = &w->text[w->depth - 1];
    if (t->len + (size_t)len > BLOB_XML_MAX_TEXT) { refuse(w); return; }
    sb_add(t, s, (size_t)len);
}

static void XMLCALL on_end(void *arg, const XML_Char *name)
{
    (void)name;
    struct walk *w = arg;
    if (w->refused || w->depth == 0) return;
    struct strbuf *t = &w->text[w->depth - 1];
    w->fn(w->ctx, w->path.buf, t->len ? t->buf : "");
    w->depth--;
    sb_truncate(&w->path, w->path_len[w->depth]);
}

bool blob_xml_walk(const char *body, size_t len, blob_xml_fn fn, void *ctx)
{
    if (!body || len == 0 || len > INT_MAX) return false;
    struct walk w = { .fn = fn, .ctx = ctx, .path = STRBUF_INIT };
    for (int i = 0; i < BLOB_XML_MAX_DEPTH; i++) w.text[i] = (struct strbuf)STRBUF_INIT;
    w.parser = XML_ParserCreate("UTF-8");
    if (!w.parser) abort();                                /* out of memory */
    XML_SetUserData(w.parser, &w);
    XML_SetElementHandler(w.parser, on_start, on_end);
    XML_SetCharacterDataHandler(w.parser, on_text);
    XML_SetParamEntityParsing(w.parser, XML_PARAM_ENTITY_PARSING_NEVER);
    bool ok = XML_Parse(w.parser, body, (int)len, XML_TRUE) == XML_STATUS_OK && !w.refused;
    XML_ParserFree(w.parser);
    sb_release(&w.path);
    for (int i = 0; i < BLOB_XML_MAX_DEPTH; i++) sb_release(&w.text[i]);
    return ok;
}
