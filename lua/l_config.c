/* l_config.c — module flow.config: the configuration of one environment as a
 * userdata owning a struct config.  While a config is the active one (set by
 * the CLI), every engine message goes through its redactor, so a secret from
 * credentials.yml never reaches the terminal. */
#include "flowlua.h"
#include "config.h"
#include "ui.h"
#include "util.h"

#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>

#define CONFIG_MT "flow.config"

static struct config **check_config(lua_State *L, int idx)
{
    struct config **c = luaL_checkudata(L, idx, CONFIG_MT);
    if (!*c) luaL_error(L, "the configuration was already freed");
    return c;
}

struct config *flow_check_config(lua_State *L, int idx)
{
    return *check_config(L, idx);
}

/* load(conf_dir, env) -> config | raises "file:line: reason" */
static int l_load(lua_State *L)
{
    const char *dir = luaL_checkstring(L, 1), *env = luaL_optstring(L, 2, NULL);
    struct config **ud = lua_newuserdatauv(L, sizeof *ud, 0);
    *ud = NULL;
    luaL_setmetatable(L, CONFIG_MT);
    char err[2048];
    *ud = config_load(dir, env, err, sizeof err);
    if (!*ud) return flow_raise(L, err);
    return 1;
}

static int l_override(lua_State *L)
{
    struct config *cfg = *check_config(L, 1);
    char err[2048];
    if (config_override_spec(cfg, luaL_checkstring(L, 2), err, sizeof err) != 0)
        return flow_raise(L, err);
    return 0;
}

/* cfg:set(dotted_or_nil, value, origin) — a typed override, e.g. from flow.run */
static int l_set(lua_State *L)
{
    struct config *cfg = *check_config(L, 1);
    const char *dotted = luaL_optstring(L, 2, NULL);
    const char *origin = luaL_optstring(L, 4, "flow.run");
    char err[2048];
    cJSON *value = lua_to_json(L, 3, err, sizeof err);
    if (!value) return flow_raise(L, err);
    int rc = config_override_value_from(cfg, dotted, value, origin, err, sizeof err);
    cJSON_Delete(value);
    if (rc != 0) return flow_raise(L, err);
    return 0;
}

static int l_resolve(lua_State *L)
{
    struct config *cfg = *check_config(L, 1);
    char err[2048];
    if (config_resolve(cfg, err, sizeof err) != 0) return flow_raise(L, err);
    return 0;
}

/* cfg:get(section, dotted) -> value | nil */
static int l_get(lua_State *L)
{
    struct config *cfg = *check_config(L, 1);
    const cJSON *v = config_get(cfg, luaL_checkstring(L, 2), luaL_optstring(L, 3, NULL));
    if (!v) lua_pushnil(L);
    else json_to_lua(L, v);
    return 1;
}

/* Pushes s (or nil) and frees it, even if the push raises. */
static int push_owned(lua_State *L, char *s)
{
    if (!s) lua_pushnil(L);
    else flow_push_owned(L, s, strlen(s), free);
    return 1;
}

static int l_origin(lua_State *L)
{
    struct config *cfg = *check_config(L, 1);
    const char *o = config_origin(cfg, luaL_checkstring(L, 2), luaL_checkstring(L, 3));
    if (o) lua_pushstring(L, o);
    else lua_pushnil(L);
    return 1;
}

static int l_explain(lua_State *L)
{
    struct config *cfg = *check_config(L, 1);
    return push_owned(L, config_explain(cfg, luaL_checkstring(L, 2), luaL_checkstring(L, 3)));
}

/* cfg:dump(section_or_nil, dotted_or_nil, mask) -> YAML text | nil */
static int l_dump(lua_State *L)
{
    struct config *cfg = *check_config(L, 1);
    return push_owned(L, config_dump_yaml(cfg, luaL_optstring(L, 2, NULL), luaL_optstring(L, 3, NULL),
                                          lua_isnone(L, 4) || lua_toboolean(L, 4)));
}

static int l_redact(lua_State *L)
{
    struct config *cfg = *check_config(L, 1);
    return push_owned(L, config_redact(cfg, luaL_checkstring(L, 2)));
}

/* cfg:add_secret(text) — text flow hands to a process from credentials, masked from now on */
static int l_add_secret(lua_State *L)
{
    struct config *cfg = *check_config(L, 1);
    config_add_secret(cfg, luaL_checkstring(L, 2));
    return 0;
}

/* The active configuration (see activate), or NULL. */
static struct config *active_config(lua_State *L)
{
    lua_getfield(L, LUA_REGISTRYINDEX, "flow.config.active");
    struct config **c = luaL_testudata(L, -1, CONFIG_MT);
    lua_pop(L, 1);                            /* the registry keeps it alive */
    return c ? *c : NULL;
}

/* redact(text) -> text with the secrets of the active configuration (the one
 * flow's messages are masked with) masked; as it is when none is active.
 * What flow writes into its own files goes through it. */
static int l_redact_active(lua_State *L)
{
    const char *text = luaL_checkstring(L, 1);
    struct config *cfg = active_config(L);
    char *safe = config_has_secrets(cfg) ? config_redact(cfg, text) : NULL;
    if (!safe || strcmp(safe, text) == 0) {   /* nothing masked: the same string, not a copy */
        free(safe);
        lua_settop(L, 1);
        return 1;
    }
    return push_owned(L, safe);
}

/* Keys whose values are never masked: content hashes (a short credential of
 * hex digits could match inside one, and a damaged hash would make a step
 * look changed for ever) and a cached value's serialised text (a value that
 * holds a credential is never cached; masking "return 2026" would only break
 * it).  Numbers are never masked either: a credential "2026" must not break a
 * time. */
static bool unmasked_key(const char *key)
{
    static const char *const keys[] = { "fp", "fingerprint", "hash", "parts", "params_hash", "value", NULL };
    for (const char *const *k = keys; *k; k++)
        if (strcmp(key, *k) == 0) return true;
    return false;
}

/* Masks the credentials in every string value and key under node.  Flow's
 * records are a few levels deep, so recursion is bounded by what it builds. */
static void mask_tree(const struct config *cfg, cJSON *node)
{
    for (cJSON *c = node->child; c; c = c->next) {
        if (c->string && !(c->type & cJSON_StringIsConst)) {
            char *key = config_redact(cfg, c->string);
            if (!key) abort();                          /* out of memory */
            if (strcmp(key, c->string) == 0) free(key);
            else {
                cJSON_free(c->string);                  /* cJSON's default hooks: malloc and free */
                c->string = key;
            }
        }
        if (c->string && unmasked_key(c->string)) continue;
        if (cJSON_IsString(c) && c->valuestring) {
            char *safe = config_redact(cfg, c->valuestring);
            if (!safe) abort();
            /* "***" is never longer than what it masks: set in place, no allocation */
            if (strcmp(safe, c->valuestring) != 0 && !cJSON_SetValuestring(c, safe)) abort();
            free(safe);
        } else if (cJSON_IsObject(c) || cJSON_IsArray(c)) {
            mask_tree(cfg, c);
        }
    }
}

/* record_json(value [, pretty]) -> JSON text for one of flow's own files
 * (journal, run.json, state.log), every credential of the active
 * configuration masked in its strings and keys; or nil, message. */
static int l_record_json(lua_State *L)
{
    luaL_checkany(L, 1);
    struct config *cfg = active_config(L);    /* before j exists: no Lua call while it is held */
    char err[512];
    cJSON *j = lua_to_json(L, 1, err, sizeof err);
    if (!j) {
        lua_pushnil(L);
        lua_pushstring(L, err);
        return 2;
    }
    if (config_has_secrets(cfg)) mask_tree(cfg, j);
    flow_push_json_text(L, j, lua_toboolean(L, 2));
    return 1;
}

bool flow_active_has_secrets(lua_State *L) { return config_has_secrets(active_config(L)); }

/* has_secrets() -> whether the active configuration has any secret to mask */
static int l_has_secrets(lua_State *L)
{
    lua_pushboolean(L, flow_active_has_secrets(L));
    return 1;
}

/* The values of the array at upvalue-less argument 1 (a light pointer) as a
 * list; a null is flow.core.json_null (a list holds no nil).  Protected. */
static int push_values(lua_State *L)
{
    const cJSON *list = lua_touserdata(L, 1);
    lua_createtable(L, cJSON_GetArraySize(list), 0);
    lua_Integer i = 1;
    for (const cJSON *v = list->child; v; v = v->next) {
        if (cJSON_IsNull(v)) flow_push_json_null(L);
        else json_to_lua(L, v);
        lua_rawseti(L, -2, i++);
    }
    return 1;
}

/* parse_values(text, flag) -> {values} | nil, message: "V1,V2,..." typed
 * as --params types a value (config_parse_values). */
static int l_parse_values(lua_State *L)
{
    const char *text = luaL_checkstring(L, 1), *flag = luaL_checkstring(L, 2);
    char err[512];
    cJSON *list = config_parse_values(text, flag, err, sizeof err);
    if (!list) {
        lua_pushnil(L);
        lua_pushstring(L, err);
        return 2;
    }
    int rc = flow_cpcall(L, push_values, list, 0, 1);
    cJSON_Delete(list);
    if (rc != LUA_OK) return lua_error(L);
    return 1;
}

static int l_closest(lua_State *L)
{
    struct config *cfg = *check_config(L, 1);
    return push_owned(L, config_closest_key(cfg, luaL_checkstring(L, 2), luaL_checkstring(L, 3)));
}

static int l_env(lua_State *L)
{
    lua_pushstring(L, config_env(*check_config(L, 1)));
    return 1;
}

static int l_warnings(lua_State *L)
{
    size_t n;
    const char *const *w = config_warnings(*check_config(L, 1), &n);
    lua_createtable(L, (int)n, 0);
    for (size_t i = 0; i < n; i++) {
        lua_pushstring(L, w[i]);
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    return 1;
}

static size_t redact_with(void *ctx, const char *buf, size_t len, bool final, struct strbuf *out)
{
    return config_redact_span(ctx, buf, len, final, out);
}

/* cfg:activate() — route every engine message through this config's redactor. */
static int l_activate(lua_State *L)
{
    struct config *cfg = *check_config(L, 1);
    ui_set_redactor(redact_with, cfg);
    lua_pushvalue(L, 1);                      /* keep it alive while active */
    lua_setfield(L, LUA_REGISTRYINDEX, "flow.config.active");
    return 0;
}

static int l_gc(lua_State *L)
{
    struct config **c = luaL_checkudata(L, 1, CONFIG_MT);
    if (*c && ui_redactor_ctx() == *c) ui_set_redactor(NULL, NULL);
    config_free(*c);
    *c = NULL;
    return 0;
}

/* list_envs(conf_dir) -> {"local", "prod", ...} */
static int l_list_envs(lua_State *L)
{
    size_t n;
    char **envs = config_list_envs(luaL_checkstring(L, 1), &n);
    int rc = flow_push_string_list(L, envs, envs ? n : 0);
    config_list_free(envs);
    if (rc != LUA_OK) return lua_error(L);
    return 1;
}

static const luaL_Reg config_methods[] = {
    { "override", l_override },
    { "set", l_set },
    { "resolve", l_resolve },
    { "get", l_get },
    { "origin", l_origin },
    { "explain", l_explain },
    { "dump", l_dump },
    { "redact", l_redact },
    { "add_secret", l_add_secret },
    { "closest", l_closest },
    { "env", l_env },
    { "warnings", l_warnings },
    { "activate", l_activate },
    { NULL, NULL }
};

static const luaL_Reg config_funcs[] = {
    { "load", l_load },
    { "list_envs", l_list_envs },
    { "redact", l_redact_active },
    { "has_secrets", l_has_secrets },
    { "record_json", l_record_json },
    { "parse_values", l_parse_values },
    { NULL, NULL }
};

int luaopen_flow_config(lua_State *L)
{
    flow_new_class(L, CONFIG_MT, config_methods, l_gc);
    luaL_newlib(L, config_funcs);
    return 1;
}
