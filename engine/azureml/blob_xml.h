/* blob_xml.h — the Blob service's XML answers (List Blobs pages, error
 * bodies), read with expat.
 *
 * Those answers are shallow trees of elements holding text, with names and
 * values XML-escaped (a blob named "a&b" arrives as "a&amp;b"), so a reader
 * needs only each element's path and its text: the walk calls back at the end
 * of every element with "EnumerationResults/Blobs/Blob/Name" and the text
 * directly inside it, entities decoded.  Nothing is fetched and no external
 * entity is read; expat refuses entity expansion attacks itself.
 *
 * expat rather than libxml2: the same job, and a library with no further
 * dependencies, where libxml2 brought ICU and libstdc++ into every start of
 * flow (1.9 ms of a 7 ms `flow --version`). */
#ifndef FLOW_AZUREML_BLOB_XML_H
#define FLOW_AZUREML_BLOB_XML_H

#include <stdbool.h>
#include <stddef.h>

#define BLOB_XML_MAX_DEPTH 16
#define BLOB_XML_MAX_TEXT (1u << 20)     /* an element's text; longer is refused */

typedef void (*blob_xml_fn)(void *ctx, const char *path, const char *text);

/* Calls fn at the end of each element.  False when the body is not
 * well-formed XML, nests deeper than BLOB_XML_MAX_DEPTH or holds a text
 * longer than BLOB_XML_MAX_TEXT (the callbacks made before stand). */
bool blob_xml_walk(const char *body, size_t len, blob_xml_fn fn, void *ctx);

#endif
