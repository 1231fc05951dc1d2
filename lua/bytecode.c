/* bytecode.c — a Lua function's code as bytes that do not depend on where
 * the function sits in its file.
 *
 * A step's fingerprint includes its function's bytecode.  string.dump(f, true)
 * strips debug information but keeps each prototype's linedefined and
 * lastlinedefined, so adding a line above a function would change the hash
 * of every function below it and rerun their steps.  This walks the dump
 * (Lua 5.4's format, ldump.c) and writes those two numbers as 0. */
#include "flowlua.h"
#include "util.h"

#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>

/* Where a string constant's bytes sit in the output. */
struct span { size_t at, len; };

/* The buffers of one walk, owned by a userdata from before they are first
 * filled: pushing the results can raise (out of memory), and the userdata's
 * __gc then frees them. */
struct code_bufs {
    struct strbuf dump, out;
    struct span *strings;              /* the string constants, when asked for */
    size_t nstrings, cap;
};

struct reader {
    const unsigned char *p, *end;
    struct strbuf *out;
    struct code_bufs *keep;            /* records string constants; NULL: none */
    int ok;
};

static int writer(lua_State *L, const void *p, size_t n, void *ud)
{
    (void)L;
    sb_add(ud, p, n);
    return 0;
}

static void copy(struct reader *r, size_t n)
{
    if (!r->ok || (size_t)(r->end - r->p) < n) { r->ok = 0; return; }
    sb_add(r->out, (const char *)r->p, n);
    r->p += n;
}

/* ldump.c's dumpSize: 7 bits a byte, most significant first, the last byte
 * marked with 0x80.  copy_size copies one; read_size reads it too. */
static size_t read_size(struct reader *r, int keep)
{
    size_t x = 0;
    for (;;) {
        if (!r->ok || r->p >= r->end) { r->ok = 0; return 0; }
        unsigned char b = *r->p++;
        if (keep) sb_addc(r->out, (char)b);
        x = (x << 7) | (b & 0x7f);
        if (b & 0x80) return x;
    }
}

static void copy_string(struct reader *r)
{
    size_t n = read_size(r, 1);
    if (n > 0) copy(r, n - 1);
}

/* A string constant: copied, and its place recorded when constants are wanted. */
static void copy_constant(struct reader *r)
{
    size_t n = read_size(r, 1);
    if (n == 0) return;
    size_t at = r->out->len;
    copy(r, n - 1);
    struct code_bufs *k = r->keep;
    if (k && r->ok) {
        ARRAY_GROW(k->strings, k->nstrings, k->cap);
        k->strings[k->nstrings++] = (struct span){ at, n - 1 };
    }
}

enum { VNIL = 0, VFALSE = 1, VTRUE = 17, VNUMINT = 3, VNUMFLT = 19, VSHRSTR = 4, VLNGSTR = 20 };

static void copy_function(struct reader *r, int depth)
{
    if (depth > 200) { r->ok = 0; return; }
    copy_string(r);                                  /* source (NULL when stripped) */
    read_size(r, 0);                                 /* linedefined */
    read_size(r, 0);                                 /* lastlinedefined */
    sb_addc(r->out, (char)0x80);
    sb_addc(r->out, (char)0x80);
    copy(r, 3);                                      /* numparams, is_vararg, maxstacksize */
    copy(r, read_size(r, 1) * 4);                    /* code */
    size_t nk = read_size(r, 1);
    for (size_t i = 0; i < nk && r->ok; i++) {
        if (r->p >= r->end) { r->ok = 0; return; }
        unsigned char tag = *r->p;
        copy(r, 1);
        if (tag == VNUMFLT || tag == VNUMINT) copy(r, 8);
        else if (tag == VSHRSTR || tag == VLNGSTR) copy_constant(r);
        else if (tag != VNIL && tag != VFALSE && tag != VTRUE) r->ok = 0;
    }
    copy(r, read_size(r, 1) * 3);                    /* upvalues: instack, idx, kind */
    size_t np = read_size(r, 1);
    for (size_t i = 0; i < np && r->ok; i++) copy_function(r, depth + 1);
    /* Debug information: empty in a stripped dump, but copy it faithfully. */
    copy(r, read_size(r, 1));                        /* lineinfo */
    size_t nabs = read_size(r, 1);
    for (size_t i = 0; i < nabs && r->ok; i++) { read_size(r, 1); read_size(r, 1); }
    size_t nloc = read_size(r, 1);
    for (size_t i = 0; i < nloc && r->ok; i++) { copy_string(r); read_size(r, 1); read_size(r, 1); }
    size_t nup = read_size(r, 1);
    for (size_t i = 0; i < nup && r->ok; i++) copy_string(r);
}

/* Header: signature 4, version 1, format 1, LUAC_DATA 6, three sizes, LUAC_INT 8,
 * LUAC_NUM 8; then the main function's upvalue count (1 byte). */
#define HEADER_SIZE (4 + 1 + 1 + 6 + 3 + 8 + 8 + 1)

static void code_bufs_release(struct code_bufs *b)
{
    sb_release(&b->dump);
    sb_release(&b->out);
    free(b->strings);
    b->strings = NULL;
    b->nstrings = b->cap = 0;
}

static int code_bufs_gc(lua_State *L)
{
    code_bufs_release(lua_touserdata(L, 1));
    return 0;
}

/* Pushes the position-independent code of the Lua function at idx and, with
 * `strings`, a table listing its string constants and those of the functions
 * nested in it (what a module name passed to require() would be).  Returns
 * the number of values pushed: 0 (nothing) for a C function. */
int flow_push_code(lua_State *L, int idx, int strings)
{
    if (!lua_isfunction(L, idx) || lua_iscfunction(L, idx)) return 0;
    idx = lua_absindex(L, idx);
    struct code_bufs *b = lua_newuserdatauv(L, sizeof *b, 0);
    *b = (struct code_bufs){ STRBUF_INIT, STRBUF_INIT, NULL, 0, 0 };
    if (luaL_newmetatable(L, "flow.code_bufs")) {
        lua_pushcfunction(L, code_bufs_gc);
        lua_setfield(L, -2, "__gc");
    }
    lua_setmetatable(L, -2);
    int owner = lua_gettop(L);
    lua_pushvalue(L, idx);
    lua_dump(L, writer, &b->dump, 1);
    lua_pop(L, 1);
    struct reader r = { (const unsigned char *)b->dump.buf, (const unsigned char *)b->dump.buf + b->dump.len,
                        &b->out, strings ? b : NULL, 1 };
    copy(&r, HEADER_SIZE);
    copy_function(&r, 0);
    int parsed = r.ok && r.p == r.end;
    if (parsed) lua_pushlstring(L, b->out.buf ? b->out.buf : "", b->out.len);
    else lua_pushlstring(L, b->dump.buf ? b->dump.buf : "", b->dump.len);   /* an unknown format: the plain dump */
    if (strings) {
        lua_createtable(L, parsed ? (int)b->nstrings : 0, 0);
        for (size_t i = 0; parsed && i < b->nstrings; i++) {
            lua_pushlstring(L, b->out.buf + b->strings[i].at, b->strings[i].len);
            lua_rawseti(L, -2, (lua_Integer)i + 1);
        }
    }
    code_bufs_release(b);              /* now, not at the next collection */
    lua_remove(L, owner);
    return strings ? 2 : 1;
}
