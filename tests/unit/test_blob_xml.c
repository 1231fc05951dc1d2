/* test_blob_xml.c — the Blob service's XML as blob_xml_walk reads it: each
 * element's path and own text, entities and CDATA decoded; what is not
 * well-formed, nests too deep, or tries entity expansion or an external
 * entity is refused, never fetched or expanded. */
#include "check.h"
#include "azureml/blob_xml.h"
#include "util.h"

#include <string.h>

/* "path=text;" for each element end */
static void collect(void *ctx, const char *path, const char *text)
{
    sb_addf(ctx, "%s=%s;", path, text);
}

static char *walk(const char *xml, bool *ok)
{
    struct strbuf sb = STRBUF_INIT;
    *ok = blob_xml_walk(xml, strlen(xml), collect, &sb);
    return sb_detach(&sb);
}

static void test_list_page(void)
{
    bool ok;
    char *got = walk("<?xml version=\"1.0\" encoding=\"utf-8\"?>\n"
                     "<EnumerationResults ServiceEndpoint=\"https://a.blob.core.windows.net/\" ContainerName=\"c\">"
                     "<Blobs><Blob><Name>runs/a&amp;b &lt;1&gt;.txt</Name><Properties>"
                     "<Content-Length>12</Content-Length><Content-MD5 /><Etag>\"0x8D\"</Etag>"
                     "</Properties></Blob></Blobs><NextMarker>2!ab</NextMarker></EnumerationResults>",
                     &ok);
    CHECK(ok);
    CHECK_STR(got, "EnumerationResults/Blobs/Blob/Name=runs/a&b <1>.txt;"
                   "EnumerationResults/Blobs/Blob/Properties/Content-Length=12;"
                   "EnumerationResults/Blobs/Blob/Properties/Content-MD5=;"
                   "EnumerationResults/Blobs/Blob/Properties/Etag=\"0x8D\";"
                   "EnumerationResults/Blobs/Blob/Properties=;EnumerationResults/Blobs/Blob=;"
                   "EnumerationResults/Blobs=;EnumerationResults/NextMarker=2!ab;EnumerationResults=;");
    free(got);
}

static void test_text_is_the_element_s_own(void)
{
    bool ok;
    char *got = walk("<Error><Code>AuthenticationFailed</Code>\n<Message>Server failed\n to authenticate"
                     "<![CDATA[ <x> ]]>&#x263A;</Message></Error>", &ok);
    CHECK(ok);
    CHECK_STR(got, "Error/Code=AuthenticationFailed;Error/Message=Server failed\n to authenticate <x> \xe2\x98\xba;"
                   "Error=\n;");
    free(got);
}

static void test_refused(void)
{
    bool ok;
    char *got = walk("<Error><Code>x</Code>", &ok);                  /* cut short */
    CHECK(!ok);
    free(got);
    got = walk("not xml at all", &ok);
    CHECK(!ok);
    free(got);
    CHECK(!blob_xml_walk("", 0, collect, NULL));
    struct strbuf deep = STRBUF_INIT;
    for (int i = 0; i <= BLOB_XML_MAX_DEPTH; i++) sb_adds(&deep, "<a>");
    for (int i = 0; i <= BLOB_XML_MAX_DEPTH; i++) sb_adds(&deep, "</a>");
    got = walk(deep.buf, &ok);
    CHECK(!ok);
    free(got);
    sb_release(&deep);
    /* entity expansion ("billion laughs") and an external entity */
    got = walk("<?xml version=\"1.0\"?><!DOCTYPE l [<!ENTITY a \"aaaaaaaaaa\">"
               "<!ENTITY b \"&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;\"><!ENTITY c \"&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;\">"
               "<!ENTITY d \"&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;\"><!ENTITY e \"&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;\">"
               "<!ENTITY f \"&e;&e;&e;&e;&e;&e;&e;&e;&e;&e;\"><!ENTITY g \"&f;&f;&f;&f;&f;&f;&f;&f;&f;&f;\">"
               "<!ENTITY h \"&g;&g;&g;&g;&g;&g;&g;&g;&g;&g;\">]><l>&h;&h;&h;&h;&h;&h;&h;&h;&h;&h;</l>", &ok);
    CHECK(!ok);
    CHECK(strlen(got) < 100);
    free(got);
    got = walk("<?xml version=\"1.0\"?><!DOCTYPE e [<!ENTITY x SYSTEM \"file:///etc/passwd\">]><e>&x;</e>", &ok);
    CHECK(strstr(got, "root") == NULL);                              /* never read */
    free(got);
}

int main(void)
{
    RUN(test_list_page);
    RUN(test_text_is_the_element_s_own);
    RUN(test_refused);
    return CHECK_DONE("blob_xml");
}
