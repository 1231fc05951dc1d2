/* serialize.c — see serialize.h.
 *
 * Output is canonical, so equal values give equal bytes and a hash of the
 * text can key a cache: a table is its sequence 1..n written positionally,
 * then the other keys sorted (booleans, then numbers by value, then strings
 * bytewise) as `name=v` for identifiers that are not keywords and `[k]=v`
 * otherwise; no whitespace.  Numbers keep their subtype: a float always
 * carries a '.' or an exponent (or is 1e9999, -1e9999, (0/0) or -(0/0): NaN
 * keeps its sign), and
 * math.mininteger, which has no decimal literal, is the wrapping hex literal
 * 0x8000000000000000.  Strings are quoted with \\ \" \n \r escaped and every
 * other control byte as \ddd (three digits, so a following digit cannot join
 * it); bytes >= 0x80 stay as they are.
 *
 * What would not read back as it was is refused, as a function or a cycle
 * is: a table reached twice (written twice, it would come back as two
 * tables, and a value of tables that share halves doubles a level), a table
 * with a metatable (it would come back without its methods), and text that
 * Lua cannot compile (nested list constructors run out of registers). */
#include "serialize.h"
#include "json_text.h"
#include "util.h"

#include <lauxlib.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 100
/* Lua compiles a table constructor with up to 49 list items pending in
 * registers, plus the table and a key: at most 51 of its 255 registers a
 * level, so text up to this deep always compiles; deeper text is compiled
 * once to be sure (a chain of 4-item lists runs out at 64 levels). */
#define ALWAYS_COMPILES_DEPTH 4
#define SERIALIZER_CLASS "flow.Serializer"

/* Lives in a userdata so a Lua error (out of memory) in the middle frees it. */
struct ser {
    struct strbuf out;
    struct strbuf path;            /* where the value being written sits: value.a[3] */
    struct strbuf err;
    int visiting;                  /* stack index of a table: table being written -> length of its path,
                                      table written -> true */
    int depth, max_depth;
    size_t max_len;                /* 0: any length; else give up once the text is longer */
};

enum key_rank { RANK_BOOLEAN, RANK_NUMBER, RANK_STRING };

struct key {
    enum key_rank rank;
    bool is_int, boolean;
    lua_Integer i;
    lua_Number n;
    const char *s;                 /* the table being written keeps the string alive */
    size_t len;
};

static int ser_gc(lua_State *L)
{
    struct ser *s = lua_touserdata(L, 1);
    sb_release(&s->out);
    sb_release(&s->path);
    sb_release(&s->err);
    return 0;
}

static int fail(struct ser *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(struct ser *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    sb_vaddf(&s->err, fmt, ap);
    va_end(ap);
    return -1;
}

static int too_long(struct ser *s)
{
    return fail(s, "the value takes more than %zu bytes", s->max_len);
}

/* ---- scalars ---------------------------------------------------------------- */

static void format_integer(lua_Integer i, char *buf, size_t size)
{
    if (i == LUA_MININTEGER) snprintf(buf, size, "0x8000000000000000");
    else snprintf(buf, size, LUA_INTEGER_FMT, i);
}

/* The shortest of %.15g..%.17g that reads back as the same double (%.17g
 * always does).  The point is '.': os.setlocale keeps LC_NUMERIC at C
 * (lua/state.c). */
static void format_float(lua_Number x, char *buf, size_t size)
{
    if (isnan(x)) {                 /* the NaN 0/0 makes here (-nan on x86), or its negation */
        volatile double zero = 0.0;
        bool plain = !signbit(x) == !signbit(zero / zero);
        snprintf(buf, size, plain ? "(0/0)" : "-(0/0)");
        return;
    }
    if (isinf(x)) { snprintf(buf, size, x > 0 ? "1e9999" : "-1e9999"); return; }
    char text[40];
    snprintf(buf, size, "%s", json_format_float((double)x, text));
}

static void format_number(lua_State *L, int idx, char *buf, size_t size)
{
    if (lua_isinteger(L, idx)) format_integer(lua_tointeger(L, idx), buf, size);
    else format_float(lua_tonumber(L, idx), buf, size);
}

static bool plain_byte(unsigned char c)
{
    return c >= 0x20 && c != 0x7f && c != '\\' && c != '"';
}

static void add_quoted(struct strbuf *sb, const char *str, size_t len)
{
    sb_addc(sb, '"');
    for (size_t i = 0; i < len;) {
        size_t run = i;
        while (run < len && plain_byte((unsigned char)str[run])) run++;
        sb_add(sb, str + i, run - i);                   /* most strings are one run */
        if (run == len) break;
        unsigned char c = (unsigned char)str[run];
        if (c == '\\' || c == '"') { sb_addc(sb, '\\'); sb_addc(sb, (char)c); }
        else if (c == '\n') sb_adds(sb, "\\n");
        else if (c == '\r') sb_adds(sb, "\\r");
        else sb_addf(sb, "\\%03u", c);
        i = run + 1;
    }
    sb_addc(sb, '"');
}

static bool is_keyword(const char *s, size_t len)
{
#define KW(w) { w, sizeof w - 1 }
    static const struct { const char *word; size_t len; } words[] = {
        KW("and"), KW("break"), KW("do"), KW("else"), KW("elseif"), KW("end"), KW("false"),
        KW("for"), KW("function"), KW("goto"), KW("if"), KW("in"), KW("local"), KW("nil"),
        KW("not"), KW("or"), KW("repeat"), KW("return"), KW("then"), KW("true"), KW("until"),
        KW("while"),
    };
#undef KW
    if (len < 2 || len > 8) return false;
    for (size_t i = 0; i < sizeof words / sizeof *words; i++)
        if (words[i].len == len && memcmp(words[i].word, s, len) == 0) return true;
    return false;
}

/* A key that can be written `name=` (and shown as value.name). */
static bool is_name(const char *s, size_t len)
{
    if (len == 0 || (s[0] >= '0' && s[0] <= '9')) return false;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (!(c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')))
            return false;
    }
    return !is_keyword(s, len);
}

/* ---- keys ------------------------------------------------------------------- */

/* Exact, although a double cannot hold every integer; f is never NaN (not a key). */
static int compare_int_float(lua_Integer i, lua_Number f)
{
    if (f >= 0x1p63) return -1;
    if (f < -0x1p63) return 1;
    lua_Number whole = floor(f);
    lua_Integer w = (lua_Integer)whole;
    if (i != w) return i < w ? -1 : 1;
    return whole < f ? -1 : 0;
}

static int compare_keys(const void *pa, const void *pb)
{
    const struct key *a = pa, *b = pb;
    if (a->rank != b->rank) return a->rank < b->rank ? -1 : 1;
    switch (a->rank) {
    case RANK_BOOLEAN:
        return (int)a->boolean - (int)b->boolean;
    case RANK_NUMBER:
        if (a->is_int && b->is_int) return (a->i > b->i) - (a->i < b->i);
        if (!a->is_int && !b->is_int) return (a->n > b->n) - (a->n < b->n);
        return a->is_int ? compare_int_float(a->i, b->n) : -compare_int_float(b->i, a->n);
    case RANK_STRING:
        return bytes_compare(a->s, a->len, b->s, b->len);
    }
    return 0;
}

/* Describes the key at idx; -1 when a key of that type cannot be written. */
static int read_key(lua_State *L, int idx, struct key *k)
{
    memset(k, 0, sizeof *k);
    switch (lua_type(L, idx)) {
    case LUA_TBOOLEAN:
        k->rank = RANK_BOOLEAN;
        k->boolean = lua_toboolean(L, idx);
        return 0;
    case LUA_TNUMBER:
        k->rank = RANK_NUMBER;
        k->is_int = lua_isinteger(L, idx);
        if (k->is_int) k->i = lua_tointeger(L, idx);
        else k->n = lua_tonumber(L, idx);
        return 0;
    case LUA_TSTRING:
        k->rank = RANK_STRING;
        k->s = lua_tolstring(L, idx, &k->len);
        return 0;
    default:
        return -1;
    }
}

static void push_key(lua_State *L, const struct key *k)
{
    switch (k->rank) {
    case RANK_BOOLEAN: lua_pushboolean(L, k->boolean); break;
    case RANK_NUMBER: if (k->is_int) lua_pushinteger(L, k->i); else lua_pushnumber(L, k->n); break;
    case RANK_STRING: lua_pushlstring(L, k->s, k->len); break;
    }
}

/* `name` when the key is a name, else `[key]` — the same text serves as the
 * key in the output (followed by '=') and in a path (after '.' for a name). */
static void add_key(struct strbuf *sb, const struct key *k)
{
    char num[64];
    if (k->rank == RANK_STRING && is_name(k->s, k->len)) { sb_add(sb, k->s, k->len); return; }
    sb_addc(sb, '[');
    if (k->rank == RANK_BOOLEAN) sb_adds(sb, k->boolean ? "true" : "false");
    else if (k->rank == RANK_STRING) add_quoted(sb, k->s, k->len);
    else {
        if (k->is_int) format_integer(k->i, num, sizeof num);
        else format_float(k->n, num, sizeof num);
        sb_adds(sb, num);
    }
    sb_addc(sb, ']');
}

static void path_add_key(struct strbuf *path, const struct key *k)
{
    if (k->rank == RANK_STRING && is_name(k->s, k->len)) sb_addc(path, '.');
    add_key(path, k);
}

static void path_cut(struct strbuf *path, size_t len)
{
    path->len = len;
    path->buf[len] = '\0';
}

/* ---- tables ----------------------------------------------------------------- */

static int write_value(lua_State *L, struct ser *s, int idx);

/* Whether `entries` more table entries may still fit the length limit: each
 * takes 2 bytes at least ("1," or "k=1"), so a table with more than the
 * room left is too long before its keys are read, let alone sorted. */
static bool room_for(const struct ser *s, size_t entries)
{
    return !s->max_len || (s->out.len <= s->max_len && entries <= (s->max_len - s->out.len) / 2);
}

/* The length n of the sequence 1..n: those keys are written positionally
 * (counting stops once they cannot fit: room_for). */
static lua_Integer sequence_length(lua_State *L, const struct ser *s, int t)
{
    lua_Integer n = 0;
    while (lua_rawgeti(L, t, n + 1) != LUA_TNIL) {
        lua_pop(L, 1);
        n++;
        if (!room_for(s, (size_t)n)) return n;
    }
    lua_pop(L, 1);
    return n;
}

static bool in_sequence(const struct key *k, lua_Integer n)
{
    return k->rank == RANK_NUMBER && k->is_int && k->i >= 1 && k->i <= n;
}

/* Pushes a userdata holding the sorted keys of table t outside 1..n and sets
 * *count; -1 (nothing pushed) at a key that cannot be written. */
static int sorted_keys(lua_State *L, struct ser *s, int t, lua_Integer n, size_t *count)
{
    size_t total = 0;
    struct key k;
    lua_pushnil(L);
    while (lua_next(L, t)) {
        lua_pop(L, 1);
        if (read_key(L, -1, &k) != 0) {
            int type = lua_type(L, -1);
            lua_pop(L, 1);
            return fail(s, "a table key at %s is a %s", s->path.buf, lua_typename(L, type));
        }
        total += !in_sequence(&k, n);
        if (!room_for(s, total)) {             /* (the sequence is written already) */
            lua_pop(L, 1);
            return too_long(s);
        }
    }
    struct key *keys = lua_newuserdatauv(L, total * sizeof *keys, 0);
    size_t i = 0;
    lua_pushnil(L);
    while (lua_next(L, t)) {
        lua_pop(L, 1);
        read_key(L, -1, &k);
        if (!in_sequence(&k, n)) keys[i++] = k;
    }
    qsort(keys, total, sizeof *keys, compare_keys);
    *count = total;
    return 0;
}

/* Writes the value under key k of table t, with the path extended by k. */
static int write_field(lua_State *L, struct ser *s, int t, const struct key *k)
{
    size_t len = s->path.len;
    path_add_key(&s->path, k);
    push_key(L, k);
    lua_rawget(L, t);
    int rc = write_value(L, s, lua_gettop(L));
    lua_pop(L, 1);
    path_cut(&s->path, len);
    return rc;
}

static int write_entries(lua_State *L, struct ser *s, int t)
{
    lua_Integer n = sequence_length(L, s, t);
    if (!room_for(s, (size_t)n)) return too_long(s);
    for (lua_Integer i = 1; i <= n; i++) {
        struct key k = { .rank = RANK_NUMBER, .is_int = true, .i = i };
        if (i > 1) sb_addc(&s->out, ',');
        if (write_field(L, s, t, &k) != 0) return -1;
    }
    size_t count = 0;
    if (sorted_keys(L, s, t, n, &count) != 0) return -1;
    const struct key *keys = lua_touserdata(L, -1);
    for (size_t i = 0; i < count; i++) {
        if (n > 0 || i > 0) sb_addc(&s->out, ',');
        add_key(&s->out, &keys[i]);
        sb_addc(&s->out, '=');
        if (write_field(L, s, t, &keys[i]) != 0) return -1;   /* the caller resets the stack */
    }
    lua_pop(L, 1);
    return 0;
}

static int write_table(lua_State *L, struct ser *s, int t)
{
    if (s->depth >= MAX_DEPTH) return fail(s, "nested deeper than %d levels", MAX_DEPTH);
    luaL_checkstack(L, 8, "serializing a value");
    lua_pushvalue(L, t);
    int seen = lua_rawget(L, s->visiting);
    if (seen == LUA_TNUMBER) {
        size_t len = (size_t)lua_tointeger(L, -1);
        lua_pop(L, 1);
        return fail(s, "%s refers back to %.*s (a cycle)", s->path.buf, (int)len, s->path.buf);
    }
    lua_pop(L, 1);
    if (seen != LUA_TNIL)
        return fail(s, "%s is a table the value holds twice (read back, it would be two tables: give each "
                    "place a table of its own)", s->path.buf);
    if (lua_getmetatable(L, t)) {
        lua_pop(L, 1);
        return fail(s, "%s has a metatable (read back, it would be a plain table, without its methods)",
                    s->path.buf);
    }
    lua_pushvalue(L, t);
    lua_pushinteger(L, (lua_Integer)s->path.len);    /* its path is a prefix of every path below */
    lua_rawset(L, s->visiting);
    if (++s->depth > s->max_depth) s->max_depth = s->depth;
    sb_addc(&s->out, '{');
    if (write_entries(L, s, t) != 0) return -1;
    sb_addc(&s->out, '}');
    s->depth--;
    lua_pushvalue(L, t);
    lua_pushboolean(L, 1);
    lua_rawset(L, s->visiting);
    return 0;
}

/* The literal of nil, a boolean or a number (made in buf), else NULL. */
static const char *scalar_literal(lua_State *L, int idx, char *buf, size_t size)
{
    switch (lua_type(L, idx)) {
    case LUA_TNIL: return "nil";
    case LUA_TBOOLEAN: return lua_toboolean(L, idx) ? "true" : "false";
    case LUA_TNUMBER: format_number(L, idx, buf, size); return buf;
    default: return NULL;
    }
}

static int write_value(lua_State *L, struct ser *s, int idx)
{
    if (s->max_len && s->out.len > s->max_len) return too_long(s);
    char num[64];
    const char *literal = scalar_literal(L, idx, num, sizeof num);
    if (literal) {
        sb_adds(&s->out, literal);
        return 0;
    }
    switch (lua_type(L, idx)) {
    case LUA_TSTRING: {
        size_t len;
        const char *str = lua_tolstring(L, idx, &len);
        if (s->max_len && len > s->max_len) return too_long(s);
        add_quoted(&s->out, str, len);
        return 0;
    }
    case LUA_TTABLE:
        return write_table(L, s, idx);
    default:
        return fail(s, "%s is a %s", s->path.buf, luaL_typename(L, idx));
    }
}

int flow_serialize(lua_State *L, int idx) { return flow_serialize_max(L, idx, 0); }

int flow_serialize_max(lua_State *L, int idx, size_t max_len)
{
    idx = lua_absindex(L, idx);
    /* A number or a boolean needs neither buffers nor a walk (most of the
     * values of a run of many small Lua steps): the same bytes at once. */
    char num[64];
    const char *literal = scalar_literal(L, idx, num, sizeof num);
    if (literal) {
        lua_pushfstring(L, "return %s", literal);
        return 1;
    }
    struct ser *s = lua_newuserdatauv(L, sizeof *s, 0);
    memset(s, 0, sizeof *s);
    s->max_len = max_len;
    if (luaL_newmetatable(L, SERIALIZER_CLASS)) {
        lua_pushcfunction(L, ser_gc);
        lua_setfield(L, -2, "__gc");
    }
    lua_setmetatable(L, -2);
    int box = lua_gettop(L);
    lua_newtable(L);
    s->visiting = lua_gettop(L);
    sb_adds(&s->path, "value");
    sb_adds(&s->out, "return ");
    int rc = write_value(L, s, idx);
    if (rc == 0 && max_len && s->out.len > max_len) rc = too_long(s);
    lua_settop(L, box);
    if (rc == 0 && s->max_depth > ALWAYS_COMPILES_DEPTH) {
        if (luaL_loadbufferx(L, s->out.buf, s->out.len, "=value", "t") != LUA_OK)
            rc = fail(s, "value is nested too deeply to be read back (%s)", lua_tostring(L, -1));
        lua_settop(L, box);
    }
    if (rc == 0) lua_pushlstring(L, s->out.buf, s->out.len);
    else lua_pushstring(L, s->err.buf);
    lua_remove(L, box);               /* the buffers go with the next collection */
    return rc == 0;
}

int flow_deserialize(lua_State *L, const char *text, size_t len, const char *name)
{
    int top = lua_gettop(L);
    lua_pushfstring(L, "=%s", name);
    int rc = luaL_loadbufferx(L, text, len, lua_tostring(L, -1), "t");
    lua_remove(L, top + 1);
    if (rc == LUA_OK) {
        lua_newtable(L);                          /* _ENV: nothing to call, nothing to change */
        lua_setupvalue(L, -2, 1);
        rc = lua_pcall(L, 0, LUA_MULTRET, 0);
    }
    if (rc != LUA_OK) {
        const char *msg = luaL_tolstring(L, -1, NULL);
        /* Positions already read "NAME:line:"; a few messages carry none. */
        if (strncmp(msg, name, strlen(name)) == 0 && msg[strlen(name)] == ':')
            lua_pushstring(L, msg);
        else
            lua_pushfstring(L, "%s: %s", name, msg);
        lua_replace(L, top + 1);
        lua_settop(L, top + 1);
        return 0;
    }
    int n = lua_gettop(L) - top;
    if (n == 1) return 1;
    lua_settop(L, top);
    lua_pushfstring(L, "%s: returned %d values, not exactly one", name, n);
    return 0;
}
