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
#include "util.h"

#include <lauxlib.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 200

static cJSON *convert(lua_State *L, int idx, struct strbuf *path, int depth, char *err, size_t errlen);

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

static cJSON *convert_table(lua_State *L, int idx, struct strbuf *path, int depth,
                            char *err, size_t errlen)
{
    size_t n = 0, mark = path->len;
    if (is_array(L, idx, &n) || (empty_table(L, idx) && marked_list(L, idx))) {
        cJSON *arr = cJSON_CreateArray();
        for (size_t i = 1; i <= n; i++) {
            lua_rawgeti(L, idx, (lua_Integer)i);
            sb_addf(path, "[%zu]", i);
            cJSON *item = convert(L, lua_gettop(L), path, depth + 1, err, errlen);
            path->len = mark; path->buf[mark] = '\0';
            lua_pop(L, 1);
            if (!item) { cJSON_Delete(arr); return NULL; }
            cJSON_AddItemToArray(arr, item);
        }
        return arr;
    }
    cJSON *obj = cJSON_CreateObject();
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        char key[64];
        const char *k;
        if (lua_type(L, -2) == LUA_TSTRING) k = lua_tostring(L, -2);
        else if (lua_isinteger(L, -2)) { snprintf(key, sizeof key, "%lld", (long long)lua_tointeger(L, -2)); k = key; }
        else {
            errf(err, errlen, "%s has a %s key; only string and integer keys can be saved",
                 path->len ? path->buf : "value", luaL_typename(L, -2));
            lua_pop(L, 2); cJSON_Delete(obj); return NULL;
        }
        sb_addf(path, ".%s", k);
        cJSON *item = convert(L, lua_gettop(L), path, depth + 1, err, errlen);
        path->len = mark; path->buf[mark] = '\0';
        if (!item) { lua_pop(L, 2); cJSON_Delete(obj); return NULL; }
        cJSON_AddItemToObject(obj, k, item);
        lua_pop(L, 1);
    }
    sort_object(obj);
    return obj;
}

static cJSON *convert(lua_State *L, int idx, struct strbuf *path, int depth, char *err, size_t errlen)
{
    if (depth > MAX_DEPTH) {
        errf(err, errlen, "%s is nested more than %d levels deep (a table that contains itself?)",
             path->len ? path->buf : "value", MAX_DEPTH);
        return NULL;
    }
    switch (lua_type(L, idx)) {
    case LUA_TNIL: return cJSON_CreateNull();
    case LUA_TBOOLEAN: return cJSON_CreateBool(lua_toboolean(L, idx));
    case LUA_TNUMBER: {
        double d = lua_tonumber(L, idx);
        if (!isfinite(d)) {
            errf(err, errlen, "%s is %g, which JSON cannot represent", path->len ? path->buf : "value", d);
            return NULL;
        }
        return cJSON_CreateNumber(d);
    }
    case LUA_TSTRING: return cJSON_CreateString(lua_tostring(L, idx));
    case LUA_TTABLE: return convert_table(L, idx, path, depth, err, errlen);
    case LUA_TLIGHTUSERDATA:
        if (lua_touserdata(L, idx) == &json_null_key) return cJSON_CreateNull();
        /* fall through */
    default:
        errf(err, errlen, "%s is a %s, which cannot be saved as data",
             path->len ? path->buf : "value", luaL_typename(L, idx));
        return NULL;
    }
}

cJSON *lua_to_json(lua_State *L, int idx, char *err, size_t errlen)
{
    struct strbuf path = STRBUF_INIT;
    luaL_checkstack(L, MAX_DEPTH * 2 + 20, "value too deeply nested");
    cJSON *j = convert(L, lua_absindex(L, idx), &path, 0, err, errlen);
    sb_release(&path);
    return j;
}

void flow_push_json_text(lua_State *L, cJSON *j, bool pretty)
{
    char *s = pretty ? cJSON_Print(j) : cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    if (!s) abort();                       /* out of memory, as everywhere in flow */
    lua_pushstring(L, s);
    cJSON_free(s);
}

void json_to_lua(lua_State *L, const cJSON *item)
{
    luaL_checkstack(L, 4, "JSON too deeply nested");
    if (cJSON_IsNull(item) || !item) lua_pushnil(L);
    else if (cJSON_IsBool(item)) lua_pushboolean(L, cJSON_IsTrue(item));
    else if (cJSON_IsNumber(item)) {
        double d = item->valuedouble;
        if (d == floor(d) && fabs(d) < 9007199254740992.0) lua_pushinteger(L, (lua_Integer)d);
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
