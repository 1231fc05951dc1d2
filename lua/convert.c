/* convert.c — Lua values ↔ cJSON.  A table is a JSON array when its keys are
 * exactly 1..n (an empty table is an object: {} round-trips as {}), else an
 * object with string keys; integer keys of a sparse table become strings.
 * Output meant for other programs (flow list --format json) says what Lua
 * cannot: flow.core.json_list(t) is an array even when empty, and
 * flow.core.json_null is null where a key must be present.
 * Object keys are sorted: the same value always encodes to the same bytes,
 * whatever order its table was filled in (a json dataset's content hash
 * decides whether the steps reading it rerun). */
#include "flowlua.h"
#include "config.h"
#include "json_text.h"
#include "util.h"

#include <lauxlib.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 200

/* One conversion.  The walk runs protected (a Lua call in it can raise) and
 * every node hangs from root from the moment it exists (attached to its parent
 * before it is filled), so whatever stops the walk, deleting root frees all. */
struct conversion {
    struct strbuf path;        /* where the walk is, for messages: "[2].name" */
    cJSON *root;
    bool ok;
    char *err;
    size_t errlen;
};

static bool convert(lua_State *L, int idx, cJSON *parent, const char *key, struct conversion *c, int depth);

static const char json_null_key;       /* its address is the json_null light userdata */

void flow_push_json_null(lua_State *L)
{
    lua_pushlightuserdata(L, (void *)&json_null_key);
}

static bool empty_table(lua_State *L, int idx)
{
    lua_pushnil(L);
    if (!lua_next(L, idx)) return true;
    lua_pop(L, 2);
    return false;
}

/* A table marked by flow.core.json_list: its metatable's __json is "array". */
static bool marked_list(lua_State *L, int idx)
{
    if (luaL_getmetafield(L, idx, "__json") == LUA_TNIL) return false;
    bool list = lua_type(L, -1) == LUA_TSTRING && strcmp(lua_tostring(L, -1), "array") == 0;
    lua_pop(L, 1);
    return list;
}

static bool is_array(lua_State *L, int idx, size_t *n_out)
{
    size_t n = 0;
    lua_Integer max = 0;
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        lua_pop(L, 1);
        if (!lua_isinteger(L, -1) || lua_tointeger(L, -1) < 1) { lua_pop(L, 1); return false; }
        if (lua_tointeger(L, -1) > max) max = lua_tointeger(L, -1);
        n++;
    }
    *n_out = n;
    return n > 0 && (lua_Integer)n == max;
}

static int compare_keys(const void *a, const void *b)
{
    return strcmp((*(cJSON *const *)a)->string, (*(cJSON *const *)b)->string);
}

static void sort_object(cJSON *obj)
{
    size_t n = 0;
    for (cJSON *c = obj->child; c; c = c->next) n++;
    if (n < 2) return;
    cJSON **items = xmalloc(n * sizeof *items);
    n = 0;
    for (cJSON *c = obj->child; c; c = c->next) items[n++] = c;
    qsort(items, n, sizeof *items, compare_keys);
    for (size_t i = 0; i < n; i++) {
        items[i]->next = i + 1 < n ? items[i + 1] : NULL;
        items[i]->prev = i > 0 ? items[i - 1] : items[n - 1];   /* cJSON: the head's prev is the tail */
    }
    obj->child = items[0];
    free(items);
}

/* A new node, attached where it goes: root, parent's next item, or parent[key]. */
static void attach(struct conversion *c, cJSON *parent, const char *key, cJSON *item)
{
    if (!item) abort();                    /* out of memory, as everywhere in flow */
    if (!parent) c->root = item;
    else if (key) cJSON_AddItemToObject(parent, key, item);
    else cJSON_AddItemToArray(parent, item);
}

static const char *where(const struct conversion *c)
{
    return c->path.len ? c->path.buf : "value";
}

static bool convert_table(lua_State *L, int idx, cJSON *parent, const char *key, struct conversion *c, int depth)
{
    /* A level's worth of stack at each level: as deep as the value, no deeper. */
    luaL_checkstack(L, 4, "value too deeply nested");
    size_t n = 0, mark = c->path.len;
    if (is_array(L, idx, &n) || (empty_table(L, idx) && marked_list(L, idx))) {
        cJSON *arr = cJSON_CreateArray();
        attach(c, parent, key, arr);
        for (size_t i = 1; i <= n; i++) {
            lua_rawgeti(L, idx, (lua_Integer)i);
            sb_addf(&c->path, "[%zu]", i);
            bool ok = convert(L, lua_gettop(L), arr, NULL, c, depth + 1);
            c->path.len = mark; c->path.buf[mark] = '\0';
            lua_pop(L, 1);
            if (!ok) return false;
        }
        return true;
    }
    cJSON *obj = cJSON_CreateObject();
    attach(c, parent, key, obj);
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        char buf[64];
        const char *k;
        if (lua_type(L, -2) == LUA_TSTRING) k = lua_tostring(L, -2);
        else if (lua_isinteger(L, -2)) { snprintf(buf, sizeof buf, "%lld", (long long)lua_tointeger(L, -2)); k = buf; }
        else {
            errf(c->err, c->errlen, "%s has a %s key; only string and integer keys can be saved",
                 where(c), luaL_typename(L, -2));
            lua_pop(L, 2);
            return false;
        }
        sb_addf(&c->path, ".%s", k);
        bool ok = convert(L, lua_gettop(L), obj, k, c, depth + 1);
        c->path.len = mark; c->path.buf[mark] = '\0';
        lua_pop(L, ok ? 1 : 2);
        if (!ok) return false;
    }
    sort_object(obj);
    return true;
}

static bool convert(lua_State *L, int idx, cJSON *parent, const char *key, struct conversion *c, int depth)
{
    if (depth > MAX_DEPTH) {
        errf(c->err, c->errlen, "%s is nested more than %d levels deep (a table that contains itself?)",
             where(c), MAX_DEPTH);
        return false;
    }
    switch (lua_type(L, idx)) {
    case LUA_TNIL: attach(c, parent, key, cJSON_CreateNull()); return true;
    case LUA_TBOOLEAN: attach(c, parent, key, cJSON_CreateBool(lua_toboolean(L, idx))); return true;
    case LUA_TNUMBER: {
        double d = lua_tonumber(L, idx);
        if (!isfinite(d)) {
            errf(c->err, c->errlen, "%s is %g, which JSON cannot represent", where(c), d);
            return false;
        }
        if (lua_isinteger(L, idx)) attach(c, parent, key, cfg_integer((long long)lua_tointeger(L, idx)));
        else attach(c, parent, key, cJSON_CreateNumber(d));
        return true;
    }
    case LUA_TSTRING: attach(c, parent, key, cJSON_CreateString(lua_tostring(L, idx))); return true;
    case LUA_TTABLE: return convert_table(L, idx, parent, key, c, depth);
    case LUA_TLIGHTUSERDATA:
        if (lua_touserdata(L, idx) == &json_null_key) {
            attach(c, parent, key, cJSON_CreateNull());
            return true;
        }
        /* fall through */
    default:
        errf(c->err, c->errlen, "%s is a %s, which cannot be saved as data", where(c), luaL_typename(L, idx));
        return false;
    }
}

/* (conversion, value): the walk, protected by lua_to_json */
static int convert_protected(lua_State *L)
{
    struct conversion *c = lua_touserdata(L, 1);
    c->ok = convert(L, 2, NULL, NULL, c, 0);
    return 0;
}

cJSON *lua_to_json(lua_State *L, int idx, char *err, size_t errlen)
{
    struct conversion c = { STRBUF_INIT, NULL, false, err, errlen };
    lua_pushvalue(L, idx);
    int rc = flow_cpcall(L, convert_protected, &c, 1, 0);
    sb_release(&c.path);
    if (rc == LUA_OK && c.ok) return c.root;
    cJSON_Delete(c.root);                  /* what was converted before the walk stopped */
    if (rc != LUA_OK) lua_error(L);        /* the walk's own error, on top */
    return NULL;
}

/* cJSON's print_number settles for 15 digits when they come within an epsilon
 * (0.1 + 0.2 printed as 0.3) and prints integers past 2^53 as doubles, so
 * every number is made raw text before printing: the exact integer, or the
 * shortest text that reads back as the same double.  Recursion as deep as
 * the tree, which lua_to_json bounds (MAX_DEPTH). */
static void exact_numbers(cJSON *item)
{
    for (; item; item = item->next) {
        if (item->child) exact_numbers(item->child);
        if (!cJSON_IsNumber(item)) continue;
        char buf[40];
        long long i;
        double d = item->valuedouble;
        const char *text = buf;
        if (cfg_big_integer(item, &i)) text = item->valuestring;
        else if (d == floor(d) && fabs(d) <= 9007199254740992.0) snprintf(buf, sizeof buf, "%.0f", d);
        else json_format_double(d, buf);
        char *raw = cJSON_malloc(strlen(text) + 1);
        if (!raw) abort();                 /* out of memory, as everywhere in flow */
        strcpy(raw, text);
        cJSON_free(item->valuestring);
        item->valuestring = raw;
        item->type = cJSON_Raw;            /* printed as it is */
    }
}

void flow_push_json_text(lua_State *L, cJSON *j, bool pretty)
{
    exact_numbers(j);
    char *s = pretty ? cJSON_Print(j) : cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    if (!s) abort();                       /* out of memory, as everywhere in flow */
    flow_push_owned(L, s, strlen(s), cJSON_free);
}

/* (tree) -> its value: json_to_lua, protected by flow_push_json_tree */
static int push_tree(lua_State *L)
{
    json_to_lua(L, lua_touserdata(L, 1));
    return 1;
}

void flow_push_json_tree(lua_State *L, cJSON *j)
{
    int rc = flow_cpcall(L, push_tree, j, 0, 1);
    cJSON_Delete(j);
    if (rc != LUA_OK) lua_error(L);
}

void json_to_lua(lua_State *L, const cJSON *item)
{
    luaL_checkstack(L, 4, "JSON too deeply nested");
    if (cJSON_IsNull(item) || !item) lua_pushnil(L);
    else if (cJSON_IsBool(item)) lua_pushboolean(L, cJSON_IsTrue(item));
    else if (cJSON_IsNumber(item)) {
        double d = item->valuedouble;
        long long i;
        if (cfg_big_integer(item, &i)) lua_pushinteger(L, (lua_Integer)i);
        else if (d == floor(d) && fabs(d) < 9007199254740992.0) lua_pushinteger(L, (lua_Integer)d);
        else lua_pushnumber(L, d);
    } else if (cJSON_IsString(item)) lua_pushstring(L, item->valuestring);
    else if (cJSON_IsArray(item)) {
        lua_createtable(L, cJSON_GetArraySize(item), 0);
        lua_Integer i = 1;
        for (const cJSON *c = item->child; c; c = c->next) {
            json_to_lua(L, c);
            lua_rawseti(L, -2, i++);
        }
    } else {
        int n = 0;
        for (const cJSON *c = item->child; c; c = c->next) n++;
        lua_createtable(L, 0, n);                /* sized once: no rehash while filling */
        for (const cJSON *c = item->child; c; c = c->next) {
            json_to_lua(L, c);
            lua_setfield(L, -2, c->string);
        }
    }
}
