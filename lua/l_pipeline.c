/* l_pipeline.c — module flow.pipeline_c: node{} and flow.command, the one
 * implementation of their rules (fields, body, inputs/outputs, tags, names,
 * retries, timeout, argv) and of every error they report.  A benchmark builds
 * 100,000 nodes in a loop; this is where that time goes, so it is C.  node{}
 * writes each step as a record (engine/step_decl.h) and returns a handle on
 * it (node_decl.c).
 *
 * stdlib/flow/pipeline.lua and command.lua own the classes (Node, Command,
 * Distributed) and hand them to bind(); pipeline{} composition (namespaces,
 * remapping, tags, + and -) stays in pipeline.lua, which checks names with
 * check_name below.
 *
 * Errors name the user's file:line as error(msg, level) would: `level`
 * counts frames from the C function (1 is its caller).  Nothing here holds C
 * heap memory of its own (what a node{} adds to the store is the store's,
 * a userdata's), so a Lua error anywhere cannot leak. */
#include "flowlua.h"
#include "azureml/settings.h"
#include "step_decl.h"
#include "suggest.h"
#include "utf8.h"

#include <ctype.h>
#include <lauxlib.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* Upvalues of the closures bind() returns, then node's cache of its last
 * where() string. */
enum { UP_NODE = 1, UP_COMMAND, UP_DISTRIBUTED, UP_UTIL, N_UP = UP_UTIL, UP_WHERE_KEY, UP_WHERE, UP_LAST_COMMAND,
       N_NODE_UP = UP_LAST_COMMAND };

/* What the cached where() string was made of, and its id in the store
 * (by serial) that interned it last: a loop of node{} calls asks for the
 * same line again and again, and formatting it is a snprintf. */
struct where_key { int line; char src[LUA_IDSIZE]; uint64_t decls; name_id id; };

/* error(fmt..., level): the message with the position of frame `level`.
 * Does not return (lua_error longjmps). */
static void fail(lua_State *L, int level, const char *fmt, ...)
{
    va_list ap;
    luaL_where(L, level);
    va_start(ap, fmt);
    lua_pushvfstring(L, fmt, ap);
    va_end(ap);
    lua_concat(L, 2);
    lua_error(L);
}

/* Whether the value at idx has the metatable held in upvalue `up` (raw, as
 * getmetatable(v) == X is: none of these classes sets __metatable). */
static bool has_class(lua_State *L, int idx, int up)
{
    if (!lua_getmetatable(L, idx)) return false;
    bool same = lua_rawequal(L, -1, lua_upvalueindex(up));
    lua_pop(L, 1);
    return same;
}

/* What one walk of a table's keys (raw) tells: how many there are, how many
 * are positive integers, and the largest of those. */
struct key_count { lua_Integer all, positive, max; };

static struct key_count count_keys(lua_State *L, int idx)
{
    idx = lua_absindex(L, idx);
    struct key_count c = { 0, 0, 0 };
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        lua_pop(L, 1);
        c.all++;
        if (!lua_isinteger(L, -1)) continue;
        lua_Integer k = lua_tointeger(L, -1);
        if (k < 1) continue;
        c.positive++;
        if (k > c.max) c.max = k;
    }
    return c;
}

/* util.is_list of the table at idx, whose keys c counted: as many keys as
 * its length (#, so __len). */
static bool counted_is_list(lua_State *L, int idx, struct key_count c)
{
    if (!lua_getmetatable(L, idx)) return c.all == (lua_Integer)lua_rawlen(L, idx);
    lua_pop(L, 1);
    return c.all == luaL_len(L, idx);   /* # through __len, as util.is_list's */
}

/* The first nil below the largest positive integer key of the table at idx
 * (raw), whose keys c counted, or 0 when its integer keys run 1..n without
 * a gap.  ipairs and # stop at such a nil, so { a, b, c } with b a misspelt
 * (so nil) variable would silently lose b and c; the callers report the
 * position instead. */
static lua_Integer counted_first_hole(lua_State *L, int idx, struct key_count c)
{
    if (c.positive == c.max) return 0;
    for (lua_Integer i = 1; i < c.max; i++) {
        bool nil = lua_rawgeti(L, idx, i) == LUA_TNIL;
        lua_pop(L, 1);
        if (nil) return i;
    }
    return 0;
}

static lua_Integer first_hole(lua_State *L, int idx)
{
    return counted_first_hole(L, idx, count_keys(L, idx));
}

/* tostring(v) without the type name of a failure: pushes it, returns it. */
static const char *push_tostring(lua_State *L, int idx)
{
    return luaL_tolstring(L, idx, NULL);
}

/* util.did_you_mean(word, candidates): " (did you mean 'x'?)" or "". */
static void push_did_you_mean(lua_State *L, const char *word, const char *const *cands, size_t n)
{
    const char *c = closest_word(word, cands, n);
    if (c) lua_pushfstring(L, " (did you mean '%s'?)", c);
    else lua_pushliteral(L, "");
}

/* ---- names ------------------------------------------------------------- */

/* Why `s` cannot name a dataset, a step or a tag, or NULL.  Names become C
 * strings and file names: a NUL would cut one short and merge two datasets,
 * and no control character belongs in either.  A name must also be one that
 * the selections can give back (--nodes a,b, --tags, --from-inputs split
 * their lists at commas and trim spaces), so a comma or a space is refused
 * here, where the step is written, as Kedro refuses them.  "params:" alone
 * names no parameter. */
/* Whether s[i] starts a C1 control character (U+0080..U+009F, "\xc2\x80".."\xc2\x9f"). */
static bool is_c1(const char *s, size_t i, size_t len)
{
    return (unsigned char)s[i] == 0xc2 && i + 1 < len && (unsigned char)s[i + 1] >= 0x80 &&
           (unsigned char)s[i + 1] <= 0x9f;
}

/* name_problem, and the name's strmap_hash in *hash when it has none: node{}
 * checks and interns every name it is given, and this is one pass over its
 * bytes where the check, a search for "..", strlen and the map's hash were
 * four. */
static const char *name_problem_hashed(const char *s, size_t len, uint32_t *hash)
{
    if (len == 0) return "is empty";
    bool ascii = true, two_dots = false;
    unsigned char prev = 0;
    uint32_t h = STRMAP_HASH_SEED;
    for (size_t i = 0; i < len; prev = (unsigned char)s[i++]) {
        unsigned char c = (unsigned char)s[i];
        h = strmap_hash_step(h, c);
        if (c > ' ' && c < 0x7f && c != ',') {          /* (the common byte first) */
            two_dots |= c == '.' && prev == '.';
            continue;
        }
        if (c < 0x20 || c == 0x7f) return "contains a control character";
        if (c == ',') return "contains a comma (--nodes, --tags, --from-inputs and --to-outputs split names at commas)";
        if (c == ' ') return "contains a space (a name is one word, so that --nodes, --tags and the other selections can give it)";
        if (is_c1(s, i, len)) return "contains a control character";
        ascii = false;
    }
    if (!ascii && !utf8_valid(s, len, NULL)) return "is not UTF-8 text";
    /* a dot joins a namespace to a name (ns.step): an empty part breaks that */
    if (s[0] == '.' || s[len - 1] == '.' || two_dots)
        return "has an empty part between dots (a dot joins a namespace and a name: ns.name)";
    if (len == 7 && memcmp(s, "params:", 7) == 0) return "names no parameter (write params:key)";
    *hash = h;
    return NULL;
}

static const char *name_problem(const char *s, size_t len)
{
    uint32_t hash;
    return name_problem_hashed(s, len, &hash);
}

/* Raises "<prefix><what>: '<name>' <problem>" at `level` if the string at
 * idx cannot be a name; control characters and backslashes are shown as
 * \<byte>.  (Two parts, so that a passing check formats nothing.) */
static void check_name(lua_State *L, int idx, const char *prefix, const char *what, int level)
{
    size_t len;
    const char *s = lua_tolstring(L, idx, &len);
    const char *problem = name_problem(s, len);
    if (!problem) return;
    luaL_where(L, level);
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    luaL_addstring(&b, prefix);
    luaL_addstring(&b, what);
    luaL_addstring(&b, ": '");
    bool utf8 = utf8_valid(s, len, NULL);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        bool c1 = is_c1(s, i, len);
        if (c1 || (c >= 0x80 && !utf8)) {                  /* shown as bytes, as the C0 ones */
            char esc[16];
            int n = c1 ? snprintf(esc, sizeof esc, "\\%u\\%u", (unsigned)c, (unsigned)(unsigned char)s[++i])
                       : snprintf(esc, sizeof esc, "\\%u", (unsigned)c);
            luaL_addlstring(&b, esc, (size_t)n);
        } else if (iscntrl(c) || c == '\\') {
            char esc[8];
            int n = snprintf(esc, sizeof esc, "\\%u", (unsigned)c);
            luaL_addlstring(&b, esc, (size_t)n);
        } else {
            luaL_addchar(&b, (char)c);
        }
    }
    luaL_addstring(&b, "' ");
    luaL_addstring(&b, problem);
    luaL_pushresult(&b);
    lua_concat(L, 2);
    lua_error(L);
}

/* ---- flow.command ---------------------------------------------------------- */

static const char *const command_fields[] = { "env", "cwd" };

/* Raises for a key of the command spec at idx (an argument list of `len`)
 * that is neither an argument nor env or cwd. */
static void check_command_keys(lua_State *L, int spec, lua_Integer len, int level)
{
    lua_pushnil(L);
    while (lua_next(L, spec)) {
        lua_pop(L, 1);
        if (lua_type(L, -1) != LUA_TNUMBER) {
            const char *k = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
            if (!k || (strcmp(k, "env") != 0 && strcmp(k, "cwd") != 0)) {
                const char *shown = push_tostring(L, -1);
                push_did_you_mean(L, shown, command_fields, 2);
                fail(L, level, "flow.command: unknown field '%s'%s", shown, lua_tostring(L, -1));
            }
        } else if (!lua_isinteger(L, -1) || lua_tointeger(L, -1) < 1 || lua_tointeger(L, -1) > len) {
            fail(L, level, "flow.command: the argument list has a hole at [%s]", push_tostring(L, -1));
        }
    }
}

/* Whether the command spec at idx (a shell line, or an argument list
 * without a hole) says what the Command at `made` says, and has neither env
 * nor cwd: the same line, or the same strings in the same order (a number
 * is not compared: its text would have to be made).  The raw strings are
 * compared (a short string by its pointer, Lua interns them). */
static bool same_command(lua_State *L, int spec, int made)
{
    if (lua_type(L, made) != LUA_TTABLE) return false;
    if (lua_type(L, spec) == LUA_TSTRING) {
        bool same = lua_getfield(L, made, "shell") == LUA_TSTRING && lua_rawequal(L, -1, spec);
        lua_pop(L, 1);
        return same;
    }
    if (lua_getfield(L, made, "argv") != LUA_TTABLE) {
        lua_pop(L, 1);
        return false;
    }
    int argv = lua_gettop(L);
    bool same = true;
    for (lua_Integer k = 1; same; k++) {
        int at = lua_geti(L, spec, k);                  /* as push_command reads it: through __index */
        same = lua_rawgeti(L, argv, k) == at && (at == LUA_TNIL || (at == LUA_TSTRING && lua_rawequal(L, -1, -2)));
        lua_pop(L, 2);
        if (at == LUA_TNIL) break;
    }
    lua_pop(L, 1);
    if (!same) return false;
    same = lua_getfield(L, spec, "env") == LUA_TNIL && lua_getfield(L, spec, "cwd") == LUA_TNIL;
    lua_settop(L, argv - 1);
    return same;
}

/* The Command at the top kept in the slot `last` (0: none) for the next
 * spec that says the same (push_command). */
static void keep_as_last(lua_State *L, int last)
{
    if (!last) return;
    lua_pushvalue(L, -1);
    lua_replace(L, last);
}

/* command(spec) with the user's frame at `level`; `cls` is the Command class.
 * Pushes the command.  `last` (0 for none) is a slot that keeps the last
 * Command made without env or cwd: a spec that says the same is given that
 * Command again, as a user who wrote `local c = command{...}` once and
 * named it in each node{} would have.  A generated pipeline names one
 * command line in thousands of node{}s ({ "python3", "prep.py",
 * "${inputs.raw}", "${outputs.clean}" }, a command's references being the
 * step's own); it then holds one Command, not two tables a step, and the
 * plan's walks over commands meet one (lua/uptodate_describe.c memoises
 * by it). */
static void push_command(lua_State *L, int spec, int level, int cls, int last)
{
    spec = lua_absindex(L, spec);
    int t = lua_type(L, spec);
    if (t == LUA_TSTRING) {
        if (last && same_command(L, spec, last)) {
            lua_pushvalue(L, last);
            return;
        }
        size_t len;
        const char *s = lua_tolstring(L, spec, &len);
        size_t i = 0;
        while (i < len && isspace((unsigned char)s[i])) i++;  /* Lua's %S is !isspace */
        if (i == len) fail(L, level, "flow.command: empty command line");
        if (memchr(s, 0, len)) fail(L, level, "flow.command: the command line holds a NUL byte (\\0), where it would end");
        lua_createtable(L, 0, 1);
        lua_pushvalue(L, spec);
        lua_setfield(L, -2, "shell");
        lua_pushvalue(L, cls);
        lua_setmetatable(L, -2);
        keep_as_last(L, last);
        return;
    }
    if (t != LUA_TTABLE)
        fail(L, level, "flow.command: expected a list of arguments or a command string, got %s", luaL_typename(L, spec));
    lua_Integer hole = first_hole(L, spec);
    if (hole) fail(L, level, "flow.command: argument %d is nil (a misspelt or unset variable?)", (int)hole);
    if (last && same_command(L, spec, last)) {
        check_command_keys(L, spec, luaL_len(L, spec), level);
        lua_pushvalue(L, last);
        return;
    }
    lua_createtable(L, 0, 3);
    int cmd = lua_gettop(L);
    size_t hint = lua_rawlen(L, spec);          /* (a table that grows as it is filled is rebuilt each doubling) */
    lua_createtable(L, hint < 64 ? (int)hint : 0, 0);
    int argv = lua_gettop(L);
    lua_Integer n = 0;
    for (;;) {                         /* ipairs: through __index, to the first nil */
        int at = lua_geti(L, spec, n + 1);
        if (at == LUA_TNIL) break;
        if (at != LUA_TSTRING && at != LUA_TNUMBER)
            fail(L, level, "flow.command: argument %d is a %s; arguments are strings or numbers", (int)(n + 1),
                 lua_typename(L, at));
        size_t alen;
        const char *arg = at == LUA_TSTRING ? lua_tolstring(L, -1, &alen) : luaL_tolstring(L, -1, &alen);
        if (memchr(arg, 0, alen))
            fail(L, level, "flow.command: argument %d holds a NUL byte (\\0), where it would end", (int)(n + 1));
        lua_rawseti(L, argv, ++n);
        if (at != LUA_TSTRING) lua_pop(L, 1);   /* (a number's text was pushed above it) */
    }
    lua_pop(L, 1);
    check_command_keys(L, spec, luaL_len(L, spec), level);
    if (n == 0) fail(L, level, "flow.command: empty argument list");
    int env = lua_getfield(L, spec, "env");
    if (env != LUA_TNIL && env != LUA_TTABLE) fail(L, level, "flow.command: env must be a table of NAME = value");
    if (env == LUA_TTABLE) {
        lua_pushnil(L);
        while (lua_next(L, -2)) {
            size_t vlen;
            const char *v = lua_type(L, -1) == LUA_TSTRING ? lua_tolstring(L, -1, &vlen) : NULL;
            if (v && memchr(v, 0, vlen))
                fail(L, level, "flow.command: env %s holds a NUL byte (\\0), where it would end", push_tostring(L, -2));
            lua_pop(L, 1);
        }
    }
    if (env != LUA_TNIL) lua_setfield(L, cmd, "env");
    else lua_pop(L, 1);
    int cwd = lua_getfield(L, spec, "cwd");
    if (cwd != LUA_TNIL && (cwd != LUA_TSTRING || lua_rawlen(L, -1) == 0))
        fail(L, level, "flow.command: cwd must be a directory's path, got %s",
             cwd == LUA_TSTRING ? "\"\"" : lua_typename(L, cwd));
    if (cwd != LUA_TNIL) lua_setfield(L, cmd, "cwd");
    else lua_pop(L, 1);
    lua_setfield(L, cmd, "argv");
    lua_pushvalue(L, cls);
    lua_setmetatable(L, cmd);
    if (env == LUA_TNIL && cwd == LUA_TNIL) keep_as_last(L, last);     /* (the command is on top) */
}

/* flow.command(spec [, level]) */
static int l_command(lua_State *L)
{
    int level = (int)luaL_optinteger(L, 2, 1);
    lua_settop(L, 1);
    push_command(L, 1, level, lua_upvalueindex(1), 0);
    return 1;
}

/* ---- node{} ------------------------------------------------------------ */

/* node{}'s fields, in the stack slots they are copied to (spec is slot 1,
 * the level slot 2).  To add a field: a slot, an entry, and its check in
 * l_node; the error lists the names sorted. */
enum { S_FUNC = 3, S_COMMAND, S_INPUTS, S_OUTPUTS, S_NAME, S_TAGS, S_RETRIES, S_TIMEOUT, S_POOL,
       S_ENV, S_COMPUTE, S_ENVIRONMENT, S_INSTANCE_TYPE, S_SHM_SIZE, S_INPUT_MODE, S_OUTPUT_MODE, S_METRICS,
       S_DECLS, S_BODY, S_DIST, S_IOBUF, S_IOBUF_OUT, S_TAG_LIST };
#define FIELD(name) { name, sizeof name - 1 }
static const struct node_field { const char *name; size_t len; } node_fields[] = {
    FIELD("func"), FIELD("command"), FIELD("inputs"), FIELD("outputs"), FIELD("name"), FIELD("tags"),
    FIELD("retries"), FIELD("timeout"), FIELD("pool"), FIELD("env"), FIELD("compute"), FIELD("environment"),
    FIELD("instance_type"), FIELD("shm_size"), FIELD("input_mode"), FIELD("output_mode"), FIELD("metrics"),
};
#undef FIELD
#define N_NODE_FIELDS (sizeof node_fields / sizeof *node_fields)

/* After the fields' slots: the store the node goes to, its body (function or
 * command), its distribution, the buffers of inputs and outputs past
 * DRAFT_INLINE, and its list of tags. */

/* What node{} has read so far: the record, and the inputs and outputs it
 * appends to the store once every field is checked.  (Appending them as
 * they are read could interleave with a node{} that a user's __index or
 * __tostring calls meanwhile, and a record's inputs and outputs are one
 * run of the store's array.)  On the C stack: an error just drops it. */
#define DRAFT_INLINE 8
struct draft {
    struct step_decls *decls;
    struct step_decl rec;
    struct step_io *io[2];              /* inputs, outputs */
    uint32_t n_io[2], cap_io[2];
    struct step_io inline_io[2][DRAFT_INLINE];
    name_id aml[STEP_N_AML];
    bool has_aml;
};

/* The id of the string at idx (node{} has checked it, with its own message). */
static name_id intern(lua_State *L, struct draft *dr, int idx)
{
    return flow_decls_intern(L, dr->decls, idx);
}

/* check_name of the string at idx (node: <what>), then its id: the check's
 * pass over its bytes hashes it for the store's map. */
static name_id take_name(lua_State *L, struct draft *dr, int idx, const char *what, int level)
{
    size_t len;
    const char *s = lua_tolstring(L, idx, &len);
    uint32_t hash;
    if (name_problem_hashed(s, len, &hash)) check_name(L, idx, "node: ", what, level);     /* (raises) */
    return flow_decls_intern_hashed(L, dr->decls, s, hash);      /* (no NUL: a control character) */
}

/* Adds an input (which 0) or an output (1) to the draft. */
static void draft_io(lua_State *L, struct draft *dr, int which, name_id arg, name_id dataset)
{
    if (dr->n_io[which] == dr->cap_io[which]) {     /* a userdata in slot S_IOBUF + which: the collector owns it */
        uint32_t cap = dr->cap_io[which] * 2;
        struct step_io *more = lua_newuserdatauv(L, cap * sizeof *more, 0);
        memcpy(more, dr->io[which], dr->n_io[which] * sizeof *more);
        lua_replace(L, S_IOBUF + which);
        dr->io[which] = more;
        dr->cap_io[which] = cap;
    }
    dr->io[which][dr->n_io[which]++] = (struct step_io){ arg, dataset };
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The unknown key at the top of the stack: the error util.check_fields gives. */
static void bad_field(lua_State *L, int level)
{
    const char *sorted[N_NODE_FIELDS];
    for (size_t i = 0; i < N_NODE_FIELDS; i++) sorted[i] = node_fields[i].name;
    qsort(sorted, N_NODE_FIELDS, sizeof *sorted, cmp_names);
    bool named = lua_type(L, -1) == LUA_TSTRING;
    const char *k = push_tostring(L, -1);
    if (!named) {
        luaL_Buffer b;
        luaL_buffinit(L, &b);
        for (size_t i = 0; i < N_NODE_FIELDS; i++) {
            if (i) luaL_addstring(&b, ", ");
            luaL_addstring(&b, sorted[i]);
        }
        luaL_pushresult(&b);
        fail(L, level, "node: unexpected positional value %s (fields are %s)", k, lua_tostring(L, -1));
    }
    push_did_you_mean(L, k, sorted, N_NODE_FIELDS);
    fail(L, level, "node: unknown field '%s'%s", k, lua_tostring(L, -1));
}

/* The fields a step declared in a loop gives (a bit a field, by its index in
 * node_fields): when a spec has no other, node{} skips the checks of the
 * rest, each of which would find its slot nil. */
#define FIELD_BIT(slot) (1u << ((slot) - S_FUNC))
#define COMMON_FIELDS (FIELD_BIT(S_FUNC) | FIELD_BIT(S_COMMAND) | FIELD_BIT(S_INPUTS) | FIELD_BIT(S_OUTPUTS) | \
                       FIELD_BIT(S_NAME))

/* util.check_fields: copies each field of spec to its slot; raises on any
 * other key.  A spec with a metatable is read through it (spec.func).
 * Returns the fields given (FIELD_BIT), every one through a metatable. */
static unsigned read_spec(lua_State *L, int level)
{
    unsigned given = 0;
    lua_settop(L, S_DECLS - 1);        /* absent fields read as nil */
    lua_pushnil(L);
    while (lua_next(L, 1)) {           /* key, value */
        int slot = 0;
        if (lua_type(L, -2) == LUA_TSTRING) {
            size_t len;
            const char *k = lua_tolstring(L, -2, &len);
            for (size_t i = 0; i < N_NODE_FIELDS && !slot; i++)
                if (node_fields[i].len == len && memcmp(node_fields[i].name, k, len) == 0) slot = S_FUNC + (int)i;
        }
        if (!slot) {
            lua_pop(L, 1);
            bad_field(L, level);
        }
        lua_replace(L, slot);
        given |= FIELD_BIT(slot);
    }
    if (lua_getmetatable(L, 1)) {      /* spec.func and the others through __index */
        lua_pop(L, 1);
        for (int i = 0; i < (int)N_NODE_FIELDS; i++) {
            lua_getfield(L, 1, node_fields[i].name);
            lua_replace(L, S_FUNC + i);
        }
        given = ~0u;
    }
    return given;
}

/* The user's frame, and where() into the draft: "short_src:line", or "?". */
static bool user_frame(lua_State *L, int level, lua_Debug *ar, struct draft *dr)
{
    bool found = lua_getstack(L, level, ar) && lua_getinfo(L, "Sl", ar);
    if (!found || ar->currentline < 0) {
        dr->rec.where = step_decls_intern(dr->decls, "?");
        return found;
    }
    struct where_key *key = lua_touserdata(L, lua_upvalueindex(UP_WHERE_KEY));
    if (key->line != ar->currentline || strcmp(key->src, ar->short_src) != 0) {
        lua_pushfstring(L, "%s:%d", ar->short_src, ar->currentline);
        lua_replace(L, lua_upvalueindex(UP_WHERE));
        key->line = ar->currentline;
        memcpy(key->src, ar->short_src, sizeof key->src);
        key->decls = 0;
    }
    if (key->decls != dr->decls->serial) {
        lua_pushvalue(L, lua_upvalueindex(UP_WHERE));
        key->id = intern(L, dr, -1);
        key->decls = dr->decls->serial;
        lua_pop(L, 1);
    }
    dr->rec.where = key->id;
    return found;
}

/* func or command: the draft's kind, the body in S_BODY (the function or
 * the command) and the distribution in S_DIST. */
static void set_body(lua_State *L, struct draft *dr, int level)
{
    bool has_func = !lua_isnil(L, S_FUNC), has_command = !lua_isnil(L, S_COMMAND);
    /* spec.func ~= nil and spec.func or spec.command */
    lua_pushvalue(L, has_func && lua_toboolean(L, S_FUNC) ? S_FUNC : S_COMMAND);
    lua_replace(L, S_BODY);
    if (has_func && has_command) fail(L, level, "node: give either func or command, not both");
    if (lua_isnil(L, S_BODY))
        fail(L, level, "node: a step needs func = <function> or command = <flow.command or argv list or string>");
    if (has_class(L, S_BODY, UP_DISTRIBUTED)) {
        if (lua_getfield(L, S_BODY, "dist") != LUA_TNIL) dr->rec.flags |= STEP_DIST;
        lua_replace(L, S_DIST);
        lua_getfield(L, S_BODY, "target");
        lua_replace(L, S_BODY);
    }
    int t = lua_type(L, S_BODY);
    if (t == LUA_TFUNCTION) {
        if (has_command) fail(L, level, "node: command must be a command, not a function (use func =)");
        dr->rec.kind = STEP_DECL_FUNC;
        return;
    }
    bool is_cmd = has_class(L, S_BODY, UP_COMMAND);
    if (t == LUA_TSTRING || (t == LUA_TTABLE && !is_cmd && has_command)) {
        push_command(L, S_BODY, level, lua_upvalueindex(UP_COMMAND), lua_upvalueindex(UP_LAST_COMMAND));
    } else if (is_cmd) {
        lua_pushvalue(L, S_BODY);
    } else {
        fail(L, level, "node: func must be a function or a flow.command, got %s", luaL_typename(L, S_BODY));
    }
    lua_replace(L, S_BODY);
    dr->rec.kind = STEP_DECL_COMMAND;
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

/* '""' for an empty string, else the type's name: how a bad entry is shown. */
static const char *shown_kind(lua_State *L, int idx)
{
    return lua_type(L, idx) == LUA_TSTRING ? "\"\"" : luaL_typename(L, idx);
}

static bool nonempty_string(lua_State *L, int idx)
{
    return lua_type(L, idx) == LUA_TSTRING && lua_rawlen(L, idx) > 0;
}

/* inputs/outputs as a list: each entry a dataset name. */
static void read_io_list(lua_State *L, struct draft *dr, int which, int v, const char *what, int level)
{
    for (lua_Integer i = 1;; i++) {    /* ipairs */
        if (lua_geti(L, v, i) == LUA_TNIL) break;
        int name = lua_gettop(L);
        if (!nonempty_string(L, name))
            fail(L, level, "node: %s[%d] must be a dataset name (a non-empty string), got %s", what, (int)i,
                 shown_kind(L, name));
        name_id id = take_name(L, dr, name, what, level);
        draft_io(L, dr, which, id, id);
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
}

#define MAX_SORTED 32  /* keys sorted on the stack; a bigger map asks util.sorted_keys */

/* The keys of a table in util.sorted_keys order (tostring of each, compared
 * as Lua compares strings).  A small map's keys stay where order_keys
 * pushed them, with their texts, sorted by index in `order` (no list made:
 * node{} orders each map it is given); a larger one's are util.sorted_keys's
 * list.  push_key pushes the i-th (0-based). */
struct key_order { int base, n; bool list; int order[MAX_SORTED]; };

static void order_keys(lua_State *L, int v, struct key_order *o)
{
    o->base = lua_gettop(L);
    o->n = 0;
    o->list = false;
    luaL_checkstack(L, 2 * MAX_SORTED + 8, "node: too many keys");
    lua_pushnil(L);
    while (lua_next(L, v)) {           /* leaves key, tostring(key) pairs on the stack */
        lua_pop(L, 1);
        if (o->n == MAX_SORTED) break;
        lua_pushvalue(L, -1);
        if (lua_type(L, -1) != LUA_TSTRING) {   /* (a string is its own text: no call) */
            push_tostring(L, -1);
            lua_replace(L, -2);
        }
        lua_pushvalue(L, -2);
        o->n++;
    }
    if (o->n == MAX_SORTED) {          /* a large map: the Lua sort */
        lua_settop(L, o->base);
        lua_getfield(L, lua_upvalueindex(UP_UTIL), "sorted_keys");
        lua_pushvalue(L, v);
        lua_call(L, 1, 1);
        o->list = true;
        o->n = (int)(lua_rawlen(L, -1) < INT_MAX ? lua_rawlen(L, -1) : INT_MAX);
        return;
    }
    for (int i = 0; i < o->n; i++) {   /* insertion sort: a handful of keys */
        size_t li, lj;
        const char *ki = lua_tolstring(L, o->base + 2 + 2 * i, &li);
        int j = i;
        for (; j > 0; j--) {
            const char *kj = lua_tolstring(L, o->base + 2 + 2 * o->order[j - 1], &lj);
            if (lua_strcmp(kj, lj, ki, li) <= 0) break;
            o->order[j] = o->order[j - 1];
        }
        o->order[j] = i;
    }
}

static void push_key(lua_State *L, const struct key_order *o, int i)
{
    if (o->list) lua_rawgeti(L, o->base + 1, (lua_Integer)i + 1);
    else lua_pushvalue(L, o->base + 1 + 2 * o->order[i]);
}

/* inputs/outputs as a map {arg = dataset}, in sorted key order. */
static void read_io_map(lua_State *L, struct draft *dr, int which, int v, const char *what, int level)
{
    struct key_order keys;
    order_keys(L, v, &keys);
    int top = lua_gettop(L);
    for (int i = 0; i < keys.n; i++) {
        push_key(L, &keys, i);
        int k = lua_gettop(L);
        lua_pushvalue(L, k);
        lua_gettable(L, v);
        int d = lua_gettop(L);
        if (lua_type(L, k) != LUA_TSTRING || !nonempty_string(L, d)) {
            const char *ks = push_tostring(L, k);
            fail(L, level, "node: %s must map names to dataset names (strings); %s = %s is not", what, ks,
                 shown_kind(L, d));
        }
        name_id dataset = take_name(L, dr, d, what, level);
        if (strlen(lua_tostring(L, k)) != lua_rawlen(L, k))
            fail(L, level, "node: %s: the name of an argument holds a NUL byte (\\0)", what);
        draft_io(L, dr, which, intern(L, dr, k), dataset);
        lua_settop(L, top);
    }
    lua_settop(L, keys.base);
}

/* inputs (which 0) or outputs (1): a name, a list (positional, the
 * default) or a map, into the draft. */
static void set_io(lua_State *L, struct draft *dr, int which, int v, const char *what, int level)
{
    lua_Integer hole;
    struct key_count keys;
    int t = lua_type(L, v);
    if (t == LUA_TNIL) return;
    if (t == LUA_TSTRING) {
        name_id id = take_name(L, dr, v, what, level);
        draft_io(L, dr, which, id, id);
    } else if (t != LUA_TTABLE) {
        fail(L, level, "node: %s must be a dataset name, a list of names or a map, got %s", what, lua_typename(L, t));
    } else if ((hole = counted_first_hole(L, v, keys = count_keys(L, v))) != 0) {
        fail(L, level, "node: %s[%d] is nil (a misspelt or unset variable?)", what, (int)hole);
    } else if (counted_is_list(L, v, keys)) {
        read_io_list(L, dr, which, v, what, level);
    } else {
        read_io_map(L, dr, which, v, what, level);
        dr->rec.flags |= which ? STEP_OUTPUTS_MAP : STEP_INPUTS_MAP;
    }
}

/* tags: a copy of the list of strings (a string is a list of one). */
static void push_tags(lua_State *L, int tags, const char *what, int level)
{
    int t = lua_type(L, tags);
    if (t == LUA_TNIL) {
        lua_createtable(L, 0, 0);
        return;
    }
    if (t == LUA_TSTRING) {
        check_name(L, tags, what, ": tag", level);
        lua_createtable(L, 1, 0);
        lua_pushvalue(L, tags);
        lua_rawseti(L, -2, 1);
        return;
    }
    struct key_count keys = { 0, 0, 0 };
    if (t == LUA_TTABLE) {
        lua_Integer hole = counted_first_hole(L, tags, keys = count_keys(L, tags));
        if (hole) fail(L, level, "%s: tags[%d] is nil (a misspelt or unset variable?)", what, (int)hole);
    }
    if (t != LUA_TTABLE || !counted_is_list(L, tags, keys))
        fail(L, level, "%s: tags must be a string or a list of strings", what);
    lua_Integer n = luaL_len(L, tags);
    for (lua_Integer i = 1;; i++) {    /* ipairs checks each */
        int at = lua_geti(L, tags, i);
        if (at == LUA_TNIL) {
            lua_pop(L, 1);
            break;
        }
        if (at != LUA_TSTRING)
            fail(L, level, "%s: tags[%d] must be a string, got %s", what, (int)i, lua_typename(L, at));
        check_name(L, -1, what, ": tag", level);
        lua_pop(L, 1);
    }
    lua_createtable(L, (int)(n > 1000 ? 0 : n), 0);
    for (lua_Integer i = 1; i <= n; i++) {  /* { table.unpack(tags) } */
        lua_geti(L, tags, i);
        lua_rawseti(L, -2, i);
    }
}

/* variable_name: a local of the user's frame holding `value` (not a
 * "(temporary)"), then a global (pairs(_G)).  Pushes it, or returns false. */
static bool push_variable_name(lua_State *L, lua_Debug *ar, bool have_frame, int value)
{
    const char *name;
    for (int i = 1; have_frame && (name = lua_getlocal(L, ar, i)) != NULL; i++) {
        bool hit = lua_rawequal(L, -1, value) && name[0] != '(';
        lua_pop(L, 1);
        if (hit) {
            lua_pushstring(L, name);
            return true;
        }
    }
    lua_pushglobaltable(L);
    if (lua_getfield(L, -1, "_G") != LUA_TTABLE) {
        lua_pop(L, 2);
        return false;
    }
    int g = lua_gettop(L);
    lua_pushnil(L);
    while (lua_next(L, g)) {
        if (lua_rawequal(L, -1, value) && lua_type(L, -2) == LUA_TSTRING) {
            lua_pop(L, 1);
            lua_replace(L, g - 1);     /* the name where the globals were */
            lua_pop(L, 1);
            return true;
        }
        lua_pop(L, 1);
    }
    lua_pop(L, 2);
    return false;
}

/* The name: spec.name, or the variable holding func (or command). */
static void set_name(lua_State *L, struct draft *dr, lua_Debug *ar, bool have_frame, int level)
{
    if (!lua_isnil(L, S_NAME)) {
        if (!nonempty_string(L, S_NAME)) fail(L, level, "node: name must be a non-empty string");
        dr->rec.name = take_name(L, dr, S_NAME, "name", level);
        return;
    }
    int body = !lua_isnil(L, S_FUNC) && lua_toboolean(L, S_FUNC) ? S_FUNC : S_COMMAND;
    if (!push_variable_name(L, ar, have_frame, body))
        fail(L, level, "node: this step has no name and its %s is not held in a variable: add name = \"...\"",
             dr->rec.kind == STEP_DECL_FUNC ? "function" : "command");
    dr->rec.name = intern(L, dr, -1);
    lua_pop(L, 1);
}

/* Whether the values at a and b are the same once turned into text (the
 * environment a process gets): 1 and "1" are. */
static bool same_text(lua_State *L, int a, int b)
{
    if (lua_rawequal(L, a, b)) return true;
    size_t la, lb;
    const char *sa = luaL_tolstring(L, a, &la);
    const char *sb = luaL_tolstring(L, b, &lb);
    bool same = la == lb && memcmp(sa, sb, la) == 0;
    lua_pop(L, 2);
    return same;
}

/* env = {NAME = value}: more environment for a command step's process, merged
 * with its command's own env into a copy of the command (a command several
 * nodes share keeps its own).  A name both set to different values is an
 * error.  ${credentials.…} in a value reaches the process through its
 * environment only (flow.credentials), and the fingerprint covers the values
 * as written, as it does the command's env. */
static void set_env(lua_State *L, struct draft *dr, int level)
{
    if (lua_isnil(L, S_ENV)) return;
    if (dr->rec.kind == STEP_DECL_FUNC)
        fail(L, level, "node: env = {...} is the environment of a command's process; this step runs a Lua "
             "function (func =), which has no process of its own: pass the values as parameters or inputs");
    if (lua_type(L, S_ENV) != LUA_TTABLE)
        fail(L, level, "node: env must be a table of NAME = value, got %s", luaL_typename(L, S_ENV));
    lua_pushvalue(L, S_BODY);
    int cmd = lua_gettop(L);
    lua_createtable(L, 0, 4);          /* the copy of the command */
    int copy = lua_gettop(L);
    lua_pushnil(L);
    while (lua_next(L, cmd)) {
        lua_pushvalue(L, -2);
        lua_insert(L, -2);
        lua_rawset(L, copy);
    }
    lua_newtable(L);                   /* its env: the command's, then the node's */
    int env = lua_gettop(L);
    if (lua_getfield(L, cmd, "env") == LUA_TTABLE) {
        lua_pushnil(L);
        while (lua_next(L, env + 1)) {
            lua_pushvalue(L, -2);
            lua_insert(L, -2);
            lua_rawset(L, env);
        }
    }
    lua_pop(L, 1);
    struct key_order keys;             /* the first bad name is the same one every time */
    order_keys(L, S_ENV, &keys);
    int top = lua_gettop(L);
    for (int i = 0; i < keys.n; i++) {
        push_key(L, &keys, i);
        int k = lua_gettop(L);
        lua_pushvalue(L, k);
        lua_gettable(L, S_ENV);
        int v = lua_gettop(L);
        size_t len;
        const char *name = lua_type(L, k) == LUA_TSTRING ? lua_tolstring(L, k, &len) : NULL;
        if (!name || len == 0 || strlen(name) != len || strchr(name, '='))
            fail(L, level, "node: env names must be variable names (NAME = value), got %s",
                 lua_type(L, k) == LUA_TSTRING ? lua_pushfstring(L, "'%s'", name) : push_tostring(L, k));
        int vt = lua_type(L, v);
        if (vt != LUA_TSTRING && vt != LUA_TNUMBER)
            fail(L, level, "node: env %s must be a string or a number, got %s", name, luaL_typename(L, v));
        if (vt == LUA_TSTRING && memchr(lua_tostring(L, v), 0, lua_rawlen(L, v)))
            fail(L, level, "node: env %s holds a NUL byte (\\0), where it would end", name);
        lua_pushvalue(L, k);
        int had = lua_rawget(L, env), old = lua_gettop(L);
        if (had != LUA_TNIL && !same_text(L, old, v))
            fail(L, level, "node: env %s is set both by the node and by its command's env, to different "
                 "values", name);
        lua_pop(L, 1);
        lua_pushvalue(L, k);
        lua_pushvalue(L, v);
        lua_rawset(L, env);
        lua_settop(L, top);
    }
    lua_settop(L, keys.base);
    lua_setfield(L, copy, "env");
    lua_pushvalue(L, lua_upvalueindex(UP_COMMAND));
    lua_setmetatable(L, copy);
    lua_replace(L, S_BODY);
    lua_settop(L, cmd - 1);
}

/* retries (default 0), timeout (util.parse_duration) and pool (a name,
 * checked against flow.yml when the run is planned). */
static void set_limits(lua_State *L, struct draft *dr, int level)
{
    if (!lua_isnil(L, S_POOL)) {
        if (lua_type(L, S_POOL) != LUA_TSTRING || lua_rawlen(L, S_POOL) == 0)
            fail(L, level, "node: pool must be the name of a pool (flow.yml pools:), got %s",
                 lua_type(L, S_POOL) == LUA_TSTRING ? "\"\"" : luaL_typename(L, S_POOL));
        if (strlen(lua_tostring(L, S_POOL)) != lua_rawlen(L, S_POOL))
            fail(L, level, "node: pool holds a NUL byte (\\0)");
        dr->rec.pool = intern(L, dr, S_POOL);
    }
    if (!lua_isnil(L, S_RETRIES)) {
        if (!lua_isinteger(L, S_RETRIES) || lua_tointeger(L, S_RETRIES) < 0)
            fail(L, level, "node: retries must be a non-negative integer");
        lua_Integer retries = lua_tointeger(L, S_RETRIES);    /* (the graph bounds it further) */
        dr->rec.retries = retries > INT32_MAX ? INT32_MAX : (int32_t)retries;
    }
    if (lua_isnil(L, S_TIMEOUT)) return;
    lua_getfield(L, lua_upvalueindex(UP_UTIL), "parse_duration");
    lua_pushvalue(L, S_TIMEOUT);
    lua_call(L, 1, 1);
    if (!lua_toboolean(L, -1))
        fail(L, level, "node: timeout must be seconds or a duration like \"90s\", \"30m\", \"1h30m\", got %s",
             push_tostring(L, S_TIMEOUT));
    dr->rec.timeout = lua_tonumber(L, -1);
    dr->rec.flags |= STEP_TIMEOUT | (lua_isinteger(L, -1) ? STEP_TIMEOUT_INTEGER : 0);
    lua_pop(L, 1);
}

/* Where the step runs on Azure ML, when it does (azureml.yml's settings,
 * for this step): compute, environment, instance_type, shm_size, input_mode,
 * output_mode, each a non-empty string; a compute is an Azure ML name, a
 * shm_size a size, a mode one of Azure ML's delivery modes. */
static void set_azureml(lua_State *L, struct draft *dr, int level)
{
    static const char *const names[] = { "compute", "environment", "instance_type", "shm_size", "input_mode",
                                         "output_mode" };
    for (int k = 0; k < 6; k++) {
        int slot = S_COMPUTE + k;
        if (lua_isnil(L, slot)) continue;
        size_t len = 0;
        const char *v = lua_type(L, slot) == LUA_TSTRING ? lua_tolstring(L, slot, &len) : NULL;
        if (!v || len == 0 || strlen(v) != len)
            fail(L, level, "node: %s must be a non-empty string, got %s", names[k],
                 v ? "\"\"" : luaL_typename(L, slot));
        /* the rules azureml.yml's values follow (engine/azureml/settings.c) */
        bool ok = slot == S_COMPUTE ? aml_valid_name(v) : slot == S_SHM_SIZE ? aml_valid_shm_size(v)
                  : slot == S_INPUT_MODE || slot == S_OUTPUT_MODE ? aml_valid_data_mode(v, slot == S_OUTPUT_MODE)
                                                                  : true;
        if (!ok)
            fail(L, level, slot == S_COMPUTE ? "node: compute must name an Azure ML compute cluster (letters, digits, "
                 "- and _), got \"%s\"" : slot == S_SHM_SIZE ? "node: shm_size must be a size like \"16g\" or "
                 "\"512m\", got \"%s\"" : slot == S_INPUT_MODE ? "node: input_mode must be ReadOnlyMount or Download, "
                 "got \"%s\"" : "node: output_mode must be ReadWriteMount or Upload, got \"%s\"", v);
        dr->aml[k] = intern(L, dr, slot);
        dr->has_aml = true;
    }
}

/* metrics = true: the Lua function returns its metrics (a table) after its
 * outputs.  A command reports them in the file ${outputs.metrics}. */
static void set_metrics(lua_State *L, struct draft *dr, int level)
{
    if (lua_isnil(L, S_METRICS) || (lua_isboolean(L, S_METRICS) && !lua_toboolean(L, S_METRICS))) return;
    if (!lua_isboolean(L, S_METRICS))
        fail(L, level, "node: metrics must be true or false, got %s", luaL_typename(L, S_METRICS));
    if (dr->rec.kind != STEP_DECL_FUNC)
        fail(L, level, "node: metrics = true is for Lua function steps (they return their metrics after their "
             "outputs); a command writes its metrics as JSON to ${outputs.metrics}: add an output named metrics");
    dr->rec.flags |= STEP_METRICS;
}

static void add_record(lua_State *L, struct draft *dr);

/* The slots of the node's name and datasets in the store's map of names,
 * asked for before they are interned.  In a script of 100,000 steps each
 * lookup was a cache miss, one after the other: the map's probe was 6-10 %
 * of a no-op rerun's samples, 4 % with the misses overlapping.  Only what
 * can be read raw (names, and the first entries of lists); what is not a
 * string is left to the checks that follow. */
#define PREFETCH_LIST 8

static void prefetch_name(lua_State *L, const struct step_decls *d, int idx)
{
    if (lua_type(L, idx) == LUA_TSTRING) strmap_prefetch(&d->ids, lua_tostring(L, idx));
}

static void prefetch_names(lua_State *L, const struct step_decls *d)
{
    prefetch_name(L, d, S_NAME);
    for (int v = S_INPUTS; v <= S_OUTPUTS; v++) {
        prefetch_name(L, d, v);
        if (lua_type(L, v) != LUA_TTABLE) continue;
        for (lua_Integer i = 1; i <= PREFETCH_LIST; i++) {
            bool more = lua_rawgeti(L, v, i) == LUA_TSTRING;
            prefetch_name(L, d, -1);
            lua_pop(L, 1);
            if (!more) break;
        }
    }
}

/* node(spec [, level]) -> the node.  `level` is the user's frame (1: the
 * caller of node). */
static int l_node(lua_State *L)
{
    int level = (int)luaL_optinteger(L, 2, 1);
    lua_settop(L, 2);
    luaL_checkstack(L, 40, "node");
    if (lua_type(L, 1) != LUA_TTABLE || has_class(L, 1, UP_NODE))
        fail(L, level, "node: expected node{func = ..., inputs = ..., outputs = ...}, got %s",
             has_class(L, 1, UP_NODE) ? "a node" : luaL_typename(L, 1));
    bool more = read_spec(L, level) & ~COMMON_FIELDS;            /* fields past the common ones */
    struct draft dr = { .decls = flow_push_current_decls(L) };   /* S_DECLS */
    prefetch_names(L, dr.decls);
    for (int k = 0; k < 2; k++) {
        dr.io[k] = dr.inline_io[k];
        dr.cap_io[k] = DRAFT_INLINE;
    }
    lua_settop(L, S_TAG_LIST);          /* S_BODY ... S_TAG_LIST: nil */
    lua_Debug ar;
    bool have_frame = user_frame(L, level, &ar, &dr);
    set_body(L, &dr, level);
    if (more) set_env(L, &dr, level);
    set_io(L, &dr, 0, S_INPUTS, "inputs", level);
    set_io(L, &dr, 1, S_OUTPUTS, "outputs", level);
    if (more && !lua_isnil(L, S_TAGS)) {
        push_tags(L, S_TAGS, "node", level);
        lua_replace(L, S_TAG_LIST);
    }
    set_name(L, &dr, &ar, have_frame, level);
    if (more) {
        set_limits(L, &dr, level);
        set_azureml(L, &dr, level);
        set_metrics(L, &dr, level);
    }
    add_record(L, &dr);
    return 1;
}

/* Appends the draft's lists to the store and the record after them; pushes
 * the node.  No user code runs from here on. */
static void add_record(lua_State *L, struct draft *dr)
{
    struct step_decls *d = dr->decls;
    struct step_decl *rec = &dr->rec;
    rec->io = (uint32_t)d->n_io;
    rec->n_inputs = dr->n_io[0];
    rec->n_outputs = dr->n_io[1];
    for (int k = 0; k < 2; k++)
        for (uint32_t i = 0; i < dr->n_io[k]; i++)
            if (step_decls_add_io(d, dr->io[k][i]) == UINT32_MAX) luaL_error(L, "node: too many inputs and outputs");
    rec->tags = (uint32_t)d->n_tags;
    for (lua_Integer i = 1; lua_istable(L, S_TAG_LIST) && lua_rawgeti(L, S_TAG_LIST, i) != LUA_TNIL; i++) {
        if (step_decls_add_tag(d, intern(L, dr, -1)) == UINT32_MAX) luaL_error(L, "node: too many tags");
        rec->n_tags++;
        lua_pop(L, 1);
    }
    if (dr->has_aml) {
        rec->aml = step_decls_add_aml(d, dr->aml);
        if (rec->aml == UINT32_MAX) luaL_error(L, "node: too many steps");
        rec->flags |= STEP_AML;
    }
    int extras = 0;
    if (rec->flags & STEP_DIST) {
        lua_createtable(L, 0, 1);
        lua_pushvalue(L, S_DIST);
        lua_setfield(L, -2, "dist");
        extras = lua_gettop(L);
    }
    flow_node_add(L, S_DECLS, rec, S_BODY, extras, lua_upvalueindex(UP_NODE));
}

/* ---- the module ---------------------------------------------------------- */

/* bind(Node, Command, Distributed, util) -> node: the classes live in Lua;
 * the closure keeps them as upvalues. */
static int no_tags_newindex(lua_State *L)
{
    return luaL_error(L, "a node's tags are read-only (pipeline{ ..., tags = ... } adds tags)");
}

static int l_bind(lua_State *L)
{
    for (int i = 1; i <= N_UP; i++) luaL_checktype(L, i, LUA_TTABLE);
    lua_settop(L, N_UP);
    /* the tags of every node given none: one read-only empty list */
    lua_newtable(L);
    lua_createtable(L, 0, 1);
    lua_pushcfunction(L, no_tags_newindex);
    lua_setfield(L, -2, "__newindex");
    lua_setmetatable(L, -2);
    flow_node_class(L, UP_NODE, lua_gettop(L));
    lua_settop(L, N_UP);
    struct where_key *key = lua_newuserdatauv(L, sizeof *key, 0);
    key->line = -1;                    /* matches no line */
    key->src[0] = '\0';
    key->decls = 0;                    /* no store's serial */
    lua_pushliteral(L, "?");
    lua_pushnil(L);                    /* no command made yet (push_command) */
    lua_pushcclosure(L, l_node, N_NODE_UP);
    return 1;
}

/* f as a closure over argument 1, which must be of type `type`. */
static int bind_closure(lua_State *L, int type, lua_CFunction f)
{
    luaL_checktype(L, 1, type);
    lua_settop(L, 1);
    lua_pushcclosure(L, f, 1);
    return 1;
}

/* bind_command(Command) -> command(spec [, level]) */
static int l_bind_command(lua_State *L)
{
    return bind_closure(L, LUA_TTABLE, l_command);
}

/* pipeline(spec) -> compose(spec, 2).  The entry is C because a C function
 * called in tail position (`return pipeline{...}`, the usual last line of a
 * script) runs with its caller's frame still there, where a tail call to a
 * Lua function drops it, and with it the file:line of every error the
 * pipeline reports. */
static int l_pipeline(lua_State *L)
{
    int n = lua_gettop(L);
    if (n != 1)
        fail(L, 1, "pipeline: expected one list of nodes and pipelines (pipeline{a, b}), got %d arguments", n);
    if (lua_isnil(L, 1))
        fail(L, 1, "pipeline: expected a list of nodes and pipelines, got nil (a misspelt or unset variable?)");
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_pushinteger(L, 2);             /* compose's user: its caller's caller (this function, then the user) */
    lua_call(L, 2, 1);
    return 1;
}

/* bind_pipeline(compose) -> pipeline(spec) */
static int l_bind_pipeline(lua_State *L)
{
    return bind_closure(L, LUA_TFUNCTION, l_pipeline);
}

/* take_nodes(items, i, out, count, by_name) -> count, j: pipeline{}'s
 * common case, for compose (pipeline.lua).  Appends items[i], items[i + 1],
 * ... to out[count + 1 ...] while each is a node (its class is upvalue 1)
 * whose name by_name (a map of names to positions, names()) does not hold
 * yet, recording by_name[name] = its position; returns the new count and j,
 * the first item it left (nil, or one for compose to place).  Items are
 * read as ipairs reads them. */
static int l_take_nodes(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_Integer i = luaL_checkinteger(L, 2);
    luaL_checktype(L, 3, LUA_TTABLE);
    lua_Integer count = luaL_checkinteger(L, 4);
    struct name_map *by_name = flow_check_name_map(L, 5);
    lua_settop(L, 5);
    size_t n_items = (size_t)lua_rawlen(L, 1);
    for (; lua_geti(L, 1, i) != LUA_TNIL && has_class(L, 6, 1); i++) {
        struct step_decls *d;
        const struct step_decl *r = flow_node_decl(L, 6, &d, NULL);
        if (!r) break;                                   /* (a Node is a node) */
        name_id name = r->name;                          /* (r may move when the map allocates) */
        flow_name_map_meet(L, 5, by_name, d, 6, n_items);
        if (flow_name_map_has(L, 5, by_name, d, name)) break;     /* a name met before: compose's add_step */
        if (count >= UINT32_MAX - 1) return luaL_error(L, "pipeline: more than 4,294,967,294 steps");
        lua_pushvalue(L, 6);
        lua_rawseti(L, 3, ++count);
        flow_name_map_set_integer(L, 5, by_name, d, name, (uint32_t)count);
        lua_settop(L, 5);
    }
    lua_pushinteger(L, count);
    lua_pushinteger(L, i);
    return 2;
}

/* bind_take_nodes(Node) -> take_nodes */
static int l_bind_take_nodes(lua_State *L)
{
    return bind_closure(L, LUA_TTABLE, l_take_nodes);
}

/* bind_derive(Node) -> derive(n, changes) (node_decl.c) */
static int l_bind_derive(lua_State *L)
{
    return bind_closure(L, LUA_TTABLE, flow_l_derive);
}

/* unknown_key(t, fields) -> a key of t that is neither a whole number (a
 * list item's) nor a key of the set `fields`, or nothing.  pipeline{}'s
 * options check, which met each of 100,000 list keys in Lua. */
static int l_unknown_key(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    luaL_checktype(L, 2, LUA_TTABLE);
    lua_settop(L, 2);
    lua_pushnil(L);
    while (lua_next(L, 1)) {
        lua_pop(L, 1);
        if (lua_isinteger(L, -1)) continue;
        lua_pushvalue(L, -1);
        if (lua_type(L, -1) != LUA_TNUMBER && lua_rawget(L, 2) != LUA_TNIL && lua_toboolean(L, -1)) {
            lua_pop(L, 1);
            continue;
        }
        lua_pop(L, 1);
        return 1;
    }
    return 0;
}

/* check_name(s, what [, level]): raises "<what>: '<s>' <problem>" at `level`
 * (as error's; 1 is the caller) when s cannot name a dataset or a step. */
static int l_check_name(lua_State *L)
{
    luaL_checkstring(L, 1);
    luaL_checkstring(L, 2);
    int level = (int)luaL_optinteger(L, 3, 1);
    check_name(L, 1, "", lua_tostring(L, 2), level);
    return 0;
}

/* tags(value, what [, level]) -> a copy of the list of tags (pipeline{tags =}). */
static int l_tags(lua_State *L)
{
    luaL_checkstring(L, 2);
    int level = (int)luaL_optinteger(L, 3, 1);
    push_tags(L, 1, lua_tostring(L, 2), level);
    return 1;
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

/* first_hole(t) -> the first nil below t's largest integer key, or nil */
static int l_first_hole(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_Integer hole = first_hole(L, 1);
    if (!hole) return 0;
    lua_pushinteger(L, hole);
    return 1;
}

static const luaL_Reg pipeline_funcs[] = {
    { "bind", l_bind },
    { "bind_command", l_bind_command },
    { "bind_pipeline", l_bind_pipeline },
    { "bind_take_nodes", l_bind_take_nodes },
    { "bind_derive", l_bind_derive },
    { "same_decl", flow_l_same_decl },
    { "io_datasets", flow_l_io_datasets },
    { "io_names", flow_l_io_names },
    { "data_file_clash", flow_l_data_file_clash },
    { "command_refs", flow_l_command_refs },
    { "has_arg", flow_l_has_arg },
    { "new_store", flow_l_new_store },
    { "check_name", l_check_name },
    { "tags", l_tags },
    { "name_problem", l_name_problem },
    { "first_hole", l_first_hole },
    { "unknown_key", l_unknown_key },
    { "names", flow_l_name_positions },
    { NULL, NULL }
};

int luaopen_flow_pipeline_c(lua_State *L)
{
    flow_open_decls(L);
    flow_open_name_map(L);
    luaL_newlib(L, pipeline_funcs);
    return 1;
}
