/* json_text.h — JSON values written into a strbuf as cJSON prints them (the
 * journal's readers compare bytes), for the lines flow writes itself: the
 * journal (step.c) and --log-format json (ui.c). */
#ifndef FLOW_JSON_TEXT_H
#define FLOW_JSON_TEXT_H

struct strbuf;

/* A number: an integer when it is one (within int's range), else %.15g, or
 * %.17g when that does not read back the same; null for NaN and infinities. */
void json_number(struct strbuf *sb, double d);
/* A string, quoted and escaped (bytes of 128 and above as they are). */
void json_string(struct strbuf *sb, const char *s);

#endif
