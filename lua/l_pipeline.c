/* l_pipeline.c — module flow.pipeline_c: a fast path for node{} and
 * pipeline{} (stdlib/flow/pipeline.lua).  A benchmark builds 100,000 nodes in
 * a loop, and the Lua version spends most of its time on checks that pass.
 *
 * The fast path builds exactly the tables the Lua code builds, for the valid
 * shapes only.  It never raises: on anything it does not handle (an error to
 * report, a metatable that could change what pairs/ipairs/# see, an unusual
 * call) it returns nothing and the Lua code runs as before, so every error
 * message and level stays the Lua code's.  The rules mirror M.node (with
 * parse_body, parse_io, parse_tags, variable_name), command.command and
 * M.pipeline: a change there must be made here too, or made to fall back. */
#include "flowlua.h"

#include <ctype.h>
#include <lauxlib.h>
#include <string.h>

/* Upvalues of the closures bind() returns: what the Lua side owns, then
 * node_fast's cache of its last where() string. */
enum { UP_NODE = 1, UP_PIPELINE, UP_COMMAND, UP_DISTRIBUTED, UP_UTIL, N_UP = UP_UTIL,
       UP_WHERE_KEY, UP_WHERE };

/* What the cached where() string was made of: a loop of node{} calls asks
 * for the same line again and again, and formatting it is a snprintf. */
struct where_key { int line; char src[LUA_IDSIZE]; };

/* The raw metatable of a value, among the ones the fast path knows. */
enum meta { MT_NONE, MT_NODE, MT_PIPELINE, MT_COMMAND, MT_DISTRIBUTED, MT_OTHER };

/* Raw, as the Lua side's getmetatable(v) == X is: none of these classes sets
 * __metatable. */
static enum meta meta_of(lua_State *L, int idx)
{
    if (!lua_getmetatable(L, idx)) return MT_NONE;
    enum meta m = MT_OTHER;
    for (int up = UP_NODE; up <= UP_DISTRIBUTED && m == MT_OTHER; up++)
        if (lua_rawequal(L, -1, lua_upvalueindex(up))) m = (enum meta)(MT_NODE + up - UP_NODE);
    lua_pop(L, 1);
    return m;
}

/* A table pairs, ipairs and # see as it is (no metatable). */
static int plain_table(lua_State *L, int idx)
{
    return lua_type(L, idx) == LUA_TTABLE && meta_of(L, idx) == MT_NONE;
}

/* tostring(s) is s: the string metatable has no __tostring. */
static int tostring_keeps_strings(lua_State *L)
{
    lua_pushliteral(L, "");
    int plain = luaL_getmetafield(L, -1, "__tostring") == LUA_TNIL;
    lua_pop(L, plain ? 1 : 2);
    return plain;
}

/* util.is_list: as many keys as the border #t. */
static int is_list(lua_State *L, int idx, lua_Unsigned *len)
{
    lua_Unsigned n = 0;
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        lua_pop(L, 1);
        n++;
    }
    *len = lua_rawlen(L, idx);
    return n == *len;
}

/* ---- node{} ------------------------------------------------------------ */

/* node{}'s fields, in the stack slots they are copied to (spec is slot 1). */
enum { S_FUNC = 2, S_COMMAND, S_INPUTS, S_OUTPUTS, S_NAME, S_TAGS, S_RETRIES, S_TIMEOUT, S_POOL,
       S_NODE, S_BODY };
static const struct { const char *name; size_t len; } node_fields[] = {
    { "func", 4 }, { "command", 7 }, { "inputs", 6 }, { "outputs", 7 }, { "name", 4 }, { "tags", 4 },
    { "retries", 7 }, { "timeout", 7 }, { "pool", 4 },
};

/* util.check_fields: copies each field of spec to its slot; 0 on any other key. */
static int read_spec(lua_State *L)
{
    lua_settop(L, S_NODE - 1);         /* absent fields read as nil */
    lua_pushnil(L);
    while (lua_next(L, 1)) {
        if (lua_type(L, -2) != LUA_TSTRING) return 0;
        size_t len;
        const char *k = lua_tolstring(L, -2, &len);
        int slot = 0;
        for (int i = 0; i < (int)(sizeof node_fields / sizeof *node_fields) && !slot; i++)
            if (node_fields[i].len == len && memcmp(node_fields[i].name, k, len) == 0) slot = S_FUNC + i;
        if (!slot) return 0;
        lua_replace(L, slot);
    }
    return 1;
}

/* The user's node{} call: level 0 is this function, 1 is M.node, 2 its caller.
 * Pushes where(): "short_src:line", or "?" as the Lua code says. */
static int user_frame(lua_State *L, lua_Debug *ar)
{
    int found = lua_getstack(L, 2, ar) && lua_getinfo(L, "Sl", ar);
    if (!found || ar->currentline < 0) {
        lua_pushliteral(L, "?");
        return found;
    }
    struct where_key *key = lua_touserdata(L, lua_upvalueindex(UP_WHERE_KEY));
    if (key->line != ar->currentline || strcmp(key->src, ar->short_src) != 0) {
        lua_pushfstring(L, "%s:%d", ar->short_src, ar->currentline);
        lua_replace(L, lua_upvalueindex(UP_WHERE));
        key->line = ar->currentline;
        memcpy(key->src, ar->short_src, sizeof key->src);
    }
    lua_pushvalue(L, lua_upvalueindex(UP_WHERE));
    return found;
}

/* setmetatable(top, Command) */
static void set_command_class(lua_State *L)
{
    lua_pushvalue(L, lua_upvalueindex(UP_COMMAND));
    lua_setmetatable(L, -2);
}

/* A string argv element or a number as tostring() writes it.  0 when numbers
 * have a metatable (tostring would call its __tostring). */
static int push_arg(lua_State *L, int t)
{
    if (t == LUA_TSTRING) return 1;
    if (t != LUA_TNUMBER) return 0;
    if (lua_getmetatable(L, -1)) { lua_pop(L, 2); return 0; }
    luaL_tolstring(L, -1, NULL);
    lua_remove(L, -2);
    return 1;
}

/* command.command(list) for a list without a metatable: pushes the command. */
static int push_argv_command(lua_State *L, int spec)
{
    if (!tostring_keeps_strings(L)) return 0;
    lua_Unsigned len = lua_rawlen(L, spec);
    lua_createtable(L, len > 64 ? 0 : (int)len, 0);
    int argv = lua_gettop(L);
    lua_Integer n = 0;
    int t;
    while ((t = lua_rawgeti(L, spec, n + 1)) != LUA_TNIL) {    /* ipairs */
        if (!push_arg(L, t)) return 0;
        lua_rawseti(L, argv, ++n);
    }
    lua_pop(L, 1);
    if (n == 0) return 0;
    lua_pushnil(L);
    while (lua_next(L, spec)) {        /* every key an index in 1..#spec, env or cwd */
        lua_pop(L, 1);
        if (lua_type(L, -1) == LUA_TNUMBER) {
            if (!lua_isinteger(L, -1)) return 0;
            lua_Integer k = lua_tointeger(L, -1);
            if (k < 1 || (lua_Unsigned)k > len) return 0;
        } else {
            const char *k = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "";
            if (strcmp(k, "env") != 0 && strcmp(k, "cwd") != 0) return 0;
        }
    }
    int env = lua_getfield(L, spec, "env");
    if (env != LUA_TNIL && env != LUA_TTABLE) return 0;
    lua_createtable(L, 0, 3);
    lua_rotate(L, -2, 1);              /* argv, cmd, env */
    lua_setfield(L, -2, "env");
    lua_getfield(L, spec, "cwd");
    lua_setfield(L, -2, "cwd");
    lua_rotate(L, -2, 1);              /* cmd, argv */
    lua_setfield(L, -2, "argv");
    set_command_class(L);
    return 1;
}

/* command.command(string): a command line with something in it. */
static int push_shell_command(lua_State *L, int spec)
{
    size_t len;
    const char *s = lua_tolstring(L, spec, &len);
    size_t i = 0;
    while (i < len && isspace((unsigned char)s[i])) i++;      /* Lua's %S is !isspace */
    if (i == len) return 0;
    lua_createtable(L, 0, 1);
    lua_pushvalue(L, spec);
    lua_setfield(L, -2, "shell");
    set_command_class(L);
    return 1;
}

/* parse_body: sets kind, fn, cmd and dist of the node. */
static int set_body(lua_State *L)
{
    int has_func = !lua_isnil(L, S_FUNC), has_command = !lua_isnil(L, S_COMMAND);
    if (has_func == has_command) return 0;
    lua_pushvalue(L, has_func ? S_FUNC : S_COMMAND);
    lua_replace(L, S_BODY);
    if (lua_type(L, S_BODY) == LUA_TTABLE && meta_of(L, S_BODY) == MT_DISTRIBUTED) {
        lua_getfield(L, S_BODY, "dist");           /* via __index: as body.dist reads it */
        lua_setfield(L, S_NODE, "dist");
        lua_getfield(L, S_BODY, "target");
        lua_replace(L, S_BODY);
    }
    int t = lua_type(L, S_BODY);
    if (t == LUA_TFUNCTION) {
        if (has_command) return 0;
        lua_pushliteral(L, "func");
        lua_setfield(L, S_NODE, "kind");
        lua_pushvalue(L, S_BODY);
        lua_setfield(L, S_NODE, "fn");
        return 1;
    }
    if (t == LUA_TSTRING) {
        if (!push_shell_command(L, S_BODY)) return 0;
    } else if (t == LUA_TTABLE && meta_of(L, S_BODY) == MT_COMMAND) {
        lua_pushvalue(L, S_BODY);                   /* already a flow.command */
    } else if (t == LUA_TTABLE && has_command && meta_of(L, S_BODY) == MT_NONE) {
        if (!push_argv_command(L, S_BODY)) return 0;
    } else {
        return 0;
    }
    lua_setfield(L, S_NODE, "cmd");
    lua_pushliteral(L, "command");
    lua_setfield(L, S_NODE, "kind");
    return 1;
}

/* Lua's string order (lvm.c l_strcmp): strcoll per '\0'-separated segment. */
static int lua_strcmp(const char *l, size_t ll, const char *r, size_t lr)
{
    for (;;) {
        int c = strcoll(l, r);
        if (c != 0) return c;
        size_t len = strlen(l);
        if (len == lr) return len == ll ? 0 : 1;
        if (len == ll) return -1;
        len++;
        l += len; ll -= len; r += len; lr -= len;
    }
}

/* Why `s` cannot name a dataset or a step, or NULL.  Names become C strings
 * and file names: a NUL would cut one short and merge two datasets, and no
 * control character belongs in either.  "params:" alone names no parameter.
 * The Lua code reports what this finds (name_problem below). */
static const char *name_problem(const char *s, size_t len)
{
    if (len == 0) return "is empty";
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7f) return "contains a control character";
    }
    if (len == 7 && memcmp(s, "params:", 7) == 0) return "names no parameter (write params:key)";
    return NULL;
}

/* A string that can name a dataset (and a node). */
static int nonempty_string(lua_State *L, int idx)
{
    if (lua_type(L, idx) != LUA_TSTRING) return 0;
    size_t len;
    const char *s = lua_tolstring(L, idx, &len);
    return !name_problem(s, len);
}

/* Pushes {arg = <string at arg>, dataset = <string at dataset>}. */
static void push_io(lua_State *L, int arg, int dataset)
{
    lua_createtable(L, 0, 2);
    lua_pushvalue(L, arg);
    lua_setfield(L, -2, "arg");
    lua_pushvalue(L, dataset);
    lua_setfield(L, -2, "dataset");
}

/* parse_io for a list: each entry a dataset name.  A hole falls back. */
static int push_io_list(lua_State *L, int v, lua_Unsigned len)
{
    lua_createtable(L, len > 64 ? 0 : (int)len, 0);
    for (lua_Unsigned i = 1; i <= len; i++) {
        lua_rawgeti(L, v, (lua_Integer)i);
        int name = lua_gettop(L);
        if (!nonempty_string(L, name)) return 0;
        push_io(L, name, name);
        lua_rawseti(L, -3, (lua_Integer)i);
        lua_pop(L, 1);
    }
    return 1;
}

#define MAX_MAP 32     /* a bigger map is rare: the Lua code sorts it */

/* parse_io for a map {arg = dataset}: entries in sorted_keys order (tostring
 * of each key, compared as Lua compares strings). */
static int push_io_map(lua_State *L, int v)
{
    if (!tostring_keeps_strings(L) || !lua_checkstack(L, 2 * MAX_MAP + 8)) return 0;
    int base = lua_gettop(L), n = 0;
    lua_pushnil(L);
    while (lua_next(L, v)) {                /* leaves key, value pairs on the stack */
        if (n == MAX_MAP || lua_type(L, -2) != LUA_TSTRING || !nonempty_string(L, -1)) return 0;
        lua_pushvalue(L, -2);
        n++;
    }
    int order[MAX_MAP];
    for (int i = 0; i < n; i++) {           /* insertion sort: a handful of keys */
        size_t li, lj;
        const char *ki = lua_tolstring(L, base + 1 + 2 * i, &li);
        int j = i;
        for (; j > 0; j--) {
            const char *kj = lua_tolstring(L, base + 1 + 2 * order[j - 1], &lj);
            if (lua_strcmp(kj, lj, ki, li) <= 0) break;
            order[j] = order[j - 1];
        }
        order[j] = i;
    }
    lua_createtable(L, n, 0);
    for (int i = 0; i < n; i++) {
        int k = base + 1 + 2 * order[i];
        push_io(L, k, k + 1);
        lua_rawseti(L, -2, i + 1);
    }
    lua_replace(L, base + 1);
    lua_settop(L, base + 1);
    return 1;
}

/* parse_io: sets the node's <what> and <what>_style. */
static int set_io(lua_State *L, int v, const char *what, const char *style_field)
{
    const char *style = "list";
    int t = lua_type(L, v);
    if (t == LUA_TNIL) {
        lua_createtable(L, 0, 0);
    } else if (t == LUA_TSTRING) {
        if (!nonempty_string(L, v)) return 0;
        lua_createtable(L, 1, 0);
        push_io(L, v, v);
        lua_rawseti(L, -2, 1);
        style = "single";
    } else if (plain_table(L, v)) {
        lua_Unsigned len;
        if (is_list(L, v, &len)) {
            if (!push_io_list(L, v, len)) return 0;
        } else {
            if (!push_io_map(L, v)) return 0;
            style = "map";
        }
    } else {
        return 0;
    }
    lua_setfield(L, S_NODE, what);
    lua_pushstring(L, style);
    lua_setfield(L, S_NODE, style_field);
    return 1;
}

/* parse_tags: a copy of the list of strings. */
static int set_tags(lua_State *L)
{
    int t = lua_type(L, S_TAGS);
    if (t == LUA_TNIL) {
        lua_createtable(L, 0, 0);
    } else if (t == LUA_TSTRING) {
        lua_createtable(L, 1, 0);
        lua_pushvalue(L, S_TAGS);
        lua_rawseti(L, -2, 1);
    } else if (plain_table(L, S_TAGS)) {
        lua_Unsigned len;
        /* a long list: table.unpack's limit is the Lua code's to report */
        if (!is_list(L, S_TAGS, &len) || len > 1000) return 0;
        lua_createtable(L, (int)len, 0);
        for (lua_Unsigned i = 1; i <= len; i++) {
            if (lua_rawgeti(L, S_TAGS, (lua_Integer)i) != LUA_TSTRING) return 0;
            lua_rawseti(L, -2, (lua_Integer)i);
        }
    } else {
        return 0;
    }
    lua_setfield(L, S_NODE, "tags");
    return 1;
}

/* variable_name: a local of the user's frame holding `value` (not a
 * "(temporary)"), then a global. */
static int push_variable_name(lua_State *L, lua_Debug *ar, int value)
{
    const char *name;
    for (int i = 1; (name = lua_getlocal(L, ar, i)) != NULL; i++) {
        int hit = lua_rawequal(L, -1, value) && name[0] != '(';
        lua_pop(L, 1);
        if (hit) { lua_pushstring(L, name); return 1; }
    }
    /* pairs(_G): _G read from the globals, both without metatables so that
     * neither the read nor the traversal runs user code. */
    lua_pushglobaltable(L);
    int plain = meta_of(L, -1) == MT_NONE && lua_getfield(L, -1, "_G") == LUA_TTABLE && plain_table(L, -1);
    if (!plain) return 0;
    int g = lua_gettop(L);
    lua_pushnil(L);
    while (lua_next(L, g)) {
        if (lua_rawequal(L, -1, value) && lua_type(L, -2) == LUA_TSTRING) {
            lua_pop(L, 1);
            lua_replace(L, g - 1);        /* the name where the globals were */
            lua_pop(L, 1);
            return 1;
        }
        lua_pop(L, 1);
    }
    return 0;
}

/* The name: spec.name, or the variable holding func (or command). */
static int set_name(lua_State *L, lua_Debug *ar, int have_frame)
{
    int t = lua_type(L, S_NAME);
    if (t != LUA_TNIL) {
        if (!nonempty_string(L, S_NAME)) return 0;    /* a non-empty string, as a dataset name */
        lua_pushvalue(L, S_NAME);
    } else {
        /* without the frame, debug.getlocal raises "level out of range" */
        if (!have_frame || !push_variable_name(L, ar, lua_isnil(L, S_FUNC) ? S_COMMAND : S_FUNC)) return 0;
    }
    lua_setfield(L, S_NODE, "name");
    return 1;
}

/* retries (default 0), timeout (util.parse_duration) and pool (a name,
 * checked against flow.yml when the run is planned). */
static int set_limits(lua_State *L)
{
    if (!lua_isnil(L, S_POOL)) {
        if (lua_type(L, S_POOL) != LUA_TSTRING || lua_rawlen(L, S_POOL) == 0) return 0;
        lua_pushvalue(L, S_POOL);
        lua_setfield(L, S_NODE, "pool");
    }
    if (lua_isnil(L, S_RETRIES)) lua_pushinteger(L, 0);
    else if (lua_isinteger(L, S_RETRIES) && lua_tointeger(L, S_RETRIES) >= 0) lua_pushvalue(L, S_RETRIES);
    else return 0;
    lua_setfield(L, S_NODE, "retries");
    int t = lua_type(L, S_TIMEOUT);
    if (t == LUA_TNIL) return 1;
    if (t == LUA_TNUMBER) {
        if (!(lua_tonumber(L, S_TIMEOUT) > 0)) return 0;
        lua_pushvalue(L, S_TIMEOUT);
    } else if (t == LUA_TSTRING) {                   /* "90s": the Lua parser, protected */
        if (lua_getfield(L, lua_upvalueindex(UP_UTIL), "parse_duration") != LUA_TFUNCTION) return 0;
        lua_pushvalue(L, S_TIMEOUT);
        if (lua_pcall(L, 1, 1, 0) != LUA_OK || !lua_toboolean(L, -1)) return 0;
    } else {
        return 0;
    }
    lua_setfield(L, S_NODE, "timeout");
    return 1;
}

/* node_fast(spec) -> the node, or nothing for the Lua code to handle. */
static int l_node(lua_State *L)
{
    if (lua_gettop(L) != 1 || !plain_table(L, 1) || !lua_checkstack(L, 40) || !read_spec(L)) return 0;
    lua_createtable(L, 0, 12);                      /* S_NODE */
    lua_pushnil(L);                                 /* S_BODY */
    lua_Debug ar;
    int have_frame = user_frame(L, &ar);
    lua_setfield(L, S_NODE, "where");
    if (!set_body(L) || !set_io(L, S_INPUTS, "inputs", "input_style") ||
        !set_io(L, S_OUTPUTS, "outputs", "output_style") || !set_tags(L) ||
        !set_name(L, &ar, have_frame) || !set_limits(L))
        return 0;
    lua_settop(L, S_NODE);
    lua_pushvalue(L, lua_upvalueindex(UP_NODE));
    lua_setmetatable(L, S_NODE);
    return 1;
}

/* ---- pipeline{} ---------------------------------------------------------- */

#define MAX_DEPTH 100  /* deeper nesting (or a list that holds itself) falls back */

/* collect(): appends the nodes of the list at idx (its ipairs prefix) to
 * `out`, once each (`seen`); pipelines and nested lists are flattened. */
static int collect(lua_State *L, int idx, int out, int seen, lua_Integer *n, int depth)
{
    if (depth > MAX_DEPTH || !lua_checkstack(L, 8)) return 0;
    for (lua_Integer i = 1;; i++) {
        if (lua_rawgeti(L, idx, i) == LUA_TNIL) break;
        int item = lua_gettop(L), ok = 1;
        enum meta m = lua_type(L, item) == LUA_TTABLE ? meta_of(L, item) : MT_OTHER;
        if (m == MT_NODE) {
            lua_pushvalue(L, item);
            if (lua_rawget(L, seen) == LUA_TNIL) {
                lua_pushvalue(L, item);
                lua_pushboolean(L, 1);
                lua_rawset(L, seen);
                lua_pushvalue(L, item);
                lua_rawseti(L, out, ++*n);
            }
        } else if (m == MT_PIPELINE) {
            lua_getfield(L, item, "nodes");         /* item.nodes: ipairs, no is_list check */
            ok = plain_table(L, -1) && collect(L, lua_gettop(L), out, seen, n, depth + 1);
        } else if (m == MT_NONE) {
            lua_Unsigned len;
            ok = is_list(L, item, &len) && collect(L, item, out, seen, n, depth + 1);
        } else {
            ok = 0;
        }
        if (!ok) return 0;
        lua_settop(L, item - 1);
    }
    lua_pop(L, 1);
    return 1;
}

/* pipeline_fast(spec) -> the pipeline, for a list of nodes, pipelines and
 * lists without options; nothing otherwise. */
static int l_pipeline(lua_State *L)
{
    if (!plain_table(L, 1)) return 0;
    lua_settop(L, 1);
    lua_pushnil(L);
    while (lua_next(L, 1)) {           /* options (and errors about them) are the Lua code's */
        lua_pop(L, 1);
        if (lua_type(L, -1) != LUA_TNUMBER) return 0;
    }
    int len = lua_rawlen(L, 1) > 1000000 ? 0 : (int)lua_rawlen(L, 1);
    lua_createtable(L, 0, 1);          /* 2: the pipeline */
    lua_createtable(L, len, 0);        /* 3: its nodes */
    lua_createtable(L, 0, len);        /* 4: seen */
    lua_Integer n = 0;
    if (!collect(L, 1, 3, 4, &n, 0)) return 0;
    lua_settop(L, 3);
    lua_setfield(L, 2, "nodes");
    lua_pushvalue(L, lua_upvalueindex(UP_PIPELINE));
    lua_setmetatable(L, 2);
    return 1;
}

/* bind(Node, Pipeline, Command, Distributed, util) -> node_fast, pipeline_fast:
 * the classes live in Lua; the closures keep them as upvalues. */
static int l_bind(lua_State *L)
{
    for (int i = 1; i <= N_UP; i++) luaL_checktype(L, i, LUA_TTABLE);
    lua_settop(L, N_UP);
    for (int i = 1; i <= N_UP; i++) lua_pushvalue(L, i);
    struct where_key *key = lua_newuserdatauv(L, sizeof *key, 0);
    key->line = -1;                    /* matches no line */
    key->src[0] = '\0';
    lua_pushliteral(L, "?");
    lua_pushcclosure(L, l_node, UP_WHERE);
    for (int i = 1; i <= N_UP; i++) lua_pushvalue(L, i);
    lua_pushcclosure(L, l_pipeline, N_UP);
    return 2;
}

/* name_problem(s) -> why s cannot name a dataset or a step, or nil */
static int l_name_problem(lua_State *L)
{
    size_t len;
    const char *s = luaL_checklstring(L, 1, &len);
    const char *problem = name_problem(s, len);
    if (!problem) return 0;
    lua_pushstring(L, problem);
    return 1;
}

static const luaL_Reg pipeline_funcs[] = {
    { "bind", l_bind },
    { "name_problem", l_name_problem },
    { NULL, NULL }
};

int luaopen_flow_pipeline_c(lua_State *L)
{
    luaL_newlib(L, pipeline_funcs);
    return 1;
}
