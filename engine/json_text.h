/* json_text.h — JSON values written into a strbuf, for the text flow writes
 * itself: the journal and run.json (step.c) and --log-format json (ui.c). */
#ifndef FLOW_JSON_TEXT_H
#define FLOW_JSON_TEXT_H

#include <stddef.h>

struct strbuf;

/* A finite double's text: the shortest of %.15g, %.16g and %.17g that reads
 * back as the same double (%.17g always does), so no digit is lost and none
 * is made up ("0.30000000000000004" for 0.1 + 0.2, "0.1" for 0.1).  The one
 * float formatter of flow's JSON, Lua literals and ${params.x} text. */
const char *json_format_double(double d, char buf[32]);
/* The same with ".0" added where the text would read as an integer ("1.0",
 * "1e+20" as it is): a float as Lua's tostring and YAML show one (the Lua
 * literals of values, a float's tostring, the YAML and text of config). */
const char *json_format_float(double d, char buf[40]);
/* A number: an integer when it is one (within int's range), else
 * json_format_double's text; null for NaN and infinities. */
void json_number(struct strbuf *sb, double d);
/* v in decimal, as "%lld" writes it, without printf (a field of every step's
 * journal line and run.json entry). */
void json_integer(struct strbuf *sb, long long v);
/* Seconds (a time of day or a duration), to the microsecond: digits made
 * with integer arithmetic, "12.5" for 12.500000.  A run of 100,000 steps
 * writes 400,000 of them, and printf's float conversion (twice, with the
 * read-back json_number needs) was 5 % of its time.  json_number beyond
 * what a microsecond count can hold. */
void json_seconds(struct strbuf *sb, double d);
/* An object member's key and colon, after a comma unless the member opens
 * its object (sb's last byte is '{'); key needs no escape. */
void json_key(struct strbuf *sb, const char *key);
/* A string, quoted and escaped (bytes of 128 and above as they are). */
void json_string(struct strbuf *sb, const char *s);
/* The same, valid JSON whatever s holds (for --log-format json, whose lines a
 * strict parser reads: a step's output is any bytes): valid UTF-8 as it is,
 * and each byte that is not part of a valid UTF-8 sequence as \ufffd (U+FFFD,
 * the replacement character), one per byte. */
void json_string_utf8(struct strbuf *sb, const char *s);
/* Appends the JSON text json[0..len) laid out as cJSON_Print lays out what
 * it parsed — members on lines of their own, indented with tabs, "key":\tvalue,
 * array elements after ", " — but without parsing it: strings and numbers
 * are copied as they are, whitespace between tokens is dropped.  For run.json
 * (step.c), whose parse and print again was 15 % of a 1,000-step run's
 * instructions.  json must be valid JSON; what is not comes out rearranged,
 * never read past its end. */
void json_indent(struct strbuf *out, const char *json, size_t len);
/* The same escaped text without the quotes, handed to put a piece at a time
 * (cJSON escapes alike: what util.record_json writes). */
void json_escape(const char *s, void (*put)(void *ctx, const char *p, size_t n), void *ctx);

#endif
