/* config.h — flow's configuration loader: conf/base plus conf/<env> (YAML or JSON) merged
 * into one cJSON tree per section, run-time overrides, ${...} interpolation, the origin of
 * every value, and masking of secrets.  Plain C: the Lua side converts cJSON itself.
 *
 * Life cycle:
 *     cfg = config_load("conf", "prod", err, sizeof err);    files, deep-merged, raw
 *     config_override_spec(cfg, "lr=0.1,epochs=3", ...);      --params (any number of calls)
 *     config_override_value(cfg, "model", json, ...);         typed overrides (flow.run)
 *     config_resolve(cfg, err, sizeof err);                   ${env:} ${globals:} ${params:}
 *     config_get(cfg, "parameters", "model.lr");              lookups, dumps, explain
 *     config_free(cfg);
 *
 * Sections, picked by the file-name prefix: parameters, catalog, azureml, credentials,
 * globals, flow ("params" is accepted as an alias of "parameters" in every lookup).
 *
 * Dotted keys: "a.b.c" walks mappings; a key that itself contains dots is found too (the
 * longest key that matches wins); a number walks into a list ("layers.0.size").
 *
 * Errors: functions that can fail take (char *err, size_t errlen), write one line there and
 * return NULL or -1.  Messages name the file and line ("conf/prod/parameters.yml:12: ...")
 * and never contain a secret.
 *
 * Pointers returned as const (cJSON trees, origins) belong to the config and stay valid
 * until the next config_override_*, config_resolve or config_free.  char * results are
 * malloc'd and the caller frees them.  A config is not thread-safe; use one per thread.
 */
#ifndef FLOW_CONFIG_H
#define FLOW_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <cjson/cJSON.h>

struct config;

/* Loads conf_dir/base (optional) and then conf_dir/env on top.  env NULL, "" or "base"
 * loads base only.  A missing env directory is an error listing the ones that exist; so is
 * an entry named like a config file that is no regular file (a dangling link, a FIFO). */
struct config *config_load(const char *conf_dir, const char *env, char *err, size_t errlen);
void config_free(struct config *cfg);

/* The environment given to config_load ("base" when none) and the directory as given. */
const char *config_env(const struct config *cfg);
const char *config_dir(const struct config *cfg);

/* Files that looked like config (.yml, .yaml, .json) but matched no section and were
 * skipped, as warnings ready to print.  *n receives the count. */
const char *const *config_warnings(const struct config *cfg, size_t *n);

/* --params text: "a.b=1,c=x,d=true,e=null,f=[1,2],g='quoted, string'".  Values are typed
 * like plain YAML scalars (int, float, bool, null, string); quotes force a string; [...]
 * is a list.  Dotted keys create nested mappings.  Nothing is applied when the text
 * does not parse. */
int config_override_spec(struct config *cfg, const char *spec, char *err, size_t errlen);

/* Sets one parameter from already-typed data (copied).  A mapping merges deeply into an
 * existing mapping; anything else replaces.  dotted NULL or "" merges a mapping into the
 * parameters root.  The origin reads "--params"; _from names it (e.g. "flow.run"). */
int config_override_value(struct config *cfg, const char *dotted, const cJSON *value,
                          char *err, size_t errlen);
int config_override_value_from(struct config *cfg, const char *dotted, const cJSON *value,
                               const char *origin, char *err, size_t errlen);

/* Interpolates every section; call after the last override (calling it again after more
 * overrides is fine).  Until it succeeds, lookups see the raw merged values. */
int config_resolve(struct config *cfg, char *err, size_t errlen);

/* A section's tree; never NULL (an empty object for an empty or unknown section). */
const cJSON *config_section(const struct config *cfg, const char *section);

/* The value at a dotted key, or NULL.  dotted NULL or "" is the section itself. */
const cJSON *config_get(const struct config *cfg, const char *section, const char *dotted);

/* Where the value was set: "conf/prod/parameters.yml:12" or "--params"; NULL if unknown.
 * A value inside a mapping or list that was set as a whole reports the whole's origin. */
const char *config_origin(const struct config *cfg, const char *section, const char *dotted);

/* Multi-line, human-readable story of a key: every file that set it, in order, and which
 * one won.  Secrets are masked.  Explains a missing key too (with "did you mean"). */
char *config_explain(const struct config *cfg, const char *section, const char *dotted);

/* YAML text of the resolved config: one section (or all, section NULL), or the value at a
 * dotted key.  mask_secrets replaces credentials with *** and redacts secrets elsewhere.
 * NULL if the section or key does not exist. */
char *config_dump_yaml(const struct config *cfg, const char *section, const char *dotted,
                       int mask_secrets);

/* A copy of text with every secret replaced by ***.  Secrets: string values of at least
 * 4 characters in the credentials section, and the values of environment variables
 * interpolated into it.  Where secrets overlap, the longest one that matches wins. */
char *config_redact(const struct config *cfg, const char *text);
/* Whether there is any secret to redact (else config_redact only copies). */
bool config_has_secrets(const struct config *cfg);

/* Adds text to the secrets config_redact masks, unless shorter than 4 characters: for a
 * credential flow hands to a process in another form than a string (a numeric password). */
void config_add_secret(struct config *cfg, const char *text);

/* The same masking for text that arrives in pieces (a step's output, pipe read by pipe
 * read): appends buf[0..len) masked to out and returns how many bytes it consumed.  With
 * `final` that is all of them; otherwise it stops before a tail that may be the start of
 * a secret (shorter than the longest secret), which the caller passes again in front of
 * the bytes that follow.  Pieces cut anywhere give what config_redact gives the whole. */
struct strbuf;
size_t config_redact_span(const struct config *cfg, const char *buf, size_t len, bool final,
                          struct strbuf *out);

/* The existing dotted key closest to `dotted` (edit distance), for "did you mean"; NULL
 * when nothing is reasonably close. */
char *config_closest_key(const struct config *cfg, const char *section, const char *dotted);

/* Section names in a fixed order, for iteration; NULL past the end. */
const char *config_section_name(size_t i);

/* Environments under conf_dir (non-hidden subdirectories, sorted), NULL-terminated;
 * *n receives the count.  Free with config_list_free.  Never NULL. */
char **config_list_envs(const char *conf_dir, size_t *n);
void config_list_free(char **list);

/* Numbers.  A cJSON number holds a double, exact for integers up to 2^53; an
 * integer beyond that (a long long: "b: 1234567890123456789" in YAML, a Lua
 * integer handed to cfg:set) keeps its exact decimal text in the node's
 * valuestring too, which cJSON_Duplicate copies and cJSON_Delete frees.
 * Whoever reads or prints a number takes the text when it is there. */
cJSON *cfg_integer(long long i);
/* n's exact integer when it is one that needs valuestring; false otherwise. */
bool cfg_big_integer(const cJSON *n, long long *out);
/* A number node's text as YAML writes it: the exact integer, else
 * cfg_format_number's. */
const char *cfg_number_text(const cJSON *n, char buf[40]);
/* "V1,V2,..." as an array of the values --params k=V would set: each typed
 * as a YAML scalar (a number, a boolean, null, text), quoted text, or a
 * [list]; NULL with a message in err that starts with `flag` (the caller
 * deletes the array).  flow sweep's --grid KEY=V1,V2. */
cJSON *config_parse_values(const char *text, const char *flag, char *err, size_t errlen);

#ifdef FLOW_CONFIG_INTERNAL
/* ---- Shared by engine/config*.c only; not part of the API. ---------------------------- */
#include <stdarg.h>
#include "strmap.h"
#include "util.h"

#define CFG_MAX_DEPTH 100              /* nesting of mappings and lists */
#define CFG_MAX_NODES 2000000          /* values per file, and per resolution */
#define CFG_MAX_STRING (16L << 20)     /* bytes of one string interpolation builds */
#define CFG_MAX_RESOLVED (256L << 20)  /* bytes of strings one resolution builds and copies */
#define CFG_MAX_CHAIN 32               /* references resolved inside one another */
#define CFG_SECRET_MIN 4               /* shorter credentials are not redacted from text */
#define CFG_SEP '\x1f'                 /* separates the segments of a canonical path */

enum cfg_section { CFG_PARAMETERS, CFG_CATALOG, CFG_AZUREML, CFG_CREDENTIALS, CFG_GLOBALS,
                   CFG_FLOW, CFG_NSECTIONS };
enum cfg_layer { CFG_LAYER_BASE, CFG_LAYER_ENV, CFG_LAYER_OVERRIDE };

/* One place a value was set; a canonical path ("parameters\x1fmodel\x1flr") keeps them all. */
/* text: a one-line picture of the value set there, or with `raw` the string
 * value itself, quoted only when shown (masked first: quoting a secret would
 * hide it from the masker, and cutting it would show its start) */
struct cfg_origin { char *where; char *text; enum cfg_layer layer; bool raw; };
struct cfg_origin_entry { char *path; struct cfg_origin *v; size_t n, cap; };
struct cfg_origins {
    struct cfg_origin_entry **v; size_t n, cap;    /* every path ever recorded */
    struct strmap index;                           /* path -> position in v */
};

struct config {
    char *dir, *env;
    cJSON *raw[CFG_NSECTIONS];         /* merged files + overrides, uninterpolated */
    cJSON *res[CFG_NSECTIONS];         /* resolved; NULL until config_resolve */
    struct cfg_origins origins;
    char **secrets; size_t nsecrets, capsecrets;
    char **warnings; size_t nwarnings, capwarnings;
};

/* Where merged values come from: a file (with a node -> line map) or an override label. */
struct cfg_source { const char *file; const struct ptrmap *lines;
                    enum cfg_layer layer; enum cfg_section section; };

/* config.c */
extern const char *const cfg_section_names[CFG_NSECTIONS];
int cfg_section_id(const char *name);
char *cfg_key_dup(const char *s, size_t n);  /* allocated the way cJSON frees keys */
void cfg_errorf(const struct config *cfg, char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void cfg_add_secret(struct config *cfg, const char *s);
void cfg_path_push(struct strbuf *path, const char *seg);
void cfg_path_push_index(struct strbuf *path, size_t i);
void cfg_path_display(const char *path, struct strbuf *out);
const char *cfg_path_where(const struct config *cfg, const char *path);
cJSON *cfg_match_key(const cJSON *obj, const char *rest, size_t *keylen);
const cJSON *cfg_step(const cJSON *node, const char **rest, struct strbuf *path);
const cJSON *cfg_walk(const cJSON *root, const char *dotted, struct strbuf *path);
int cfg_merge_member(struct config *cfg, struct strbuf *path, cJSON *dst, cJSON *item,
                     const struct cfg_source *from, int top, char *err, size_t errlen);
int cfg_merge_object(struct config *cfg, struct strbuf *path, cJSON *dst, cJSON *src,
                     const struct cfg_source *from, int top, char *err, size_t errlen);
cJSON *cfg_copy_value(const cJSON *v);      /* deep copy, without its key */
size_t cfg_tree_depth(const cJSON *node);
size_t cfg_tree_size(const cJSON *node);

/* config_yaml.c */
cJSON *cfg_parse_yaml(const char *text, size_t len, const char *file,
                      struct ptrmap *lines, char *err, size_t errlen);
cJSON *cfg_parse_json(const char *text, size_t len, const char *file,
                      struct ptrmap *lines, char *err, size_t errlen);
cJSON *cfg_scalar_infer(const char *s, size_t len, int empty_is_null);
cJSON *cfg_number(double d);
const char *cfg_format_number(double d, char buf[40]);
char *cfg_yaml_emit(const cJSON *node);
#endif /* FLOW_CONFIG_INTERNAL */

#endif
