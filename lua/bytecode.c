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
#include <string.h>

struct reader {
    const unsigned char *p, *end;
    struct strbuf *out;
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
        else if (tag == VSHRSTR || tag == VLNGSTR) copy_string(r);
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

/* Pushes the position-independent code of the Lua function at idx, or
 * returns 0 (pushing nothing) for a C function. */
int flow_push_code(lua_State *L, int idx)
{
    if (!lua_isfunction(L, idx) || lua_iscfunction(L, idx)) return 0;
    struct strbuf dump = STRBUF_INIT, out = STRBUF_INIT;
    lua_pushvalue(L, idx);
    lua_dump(L, writer, &dump, 1);
    lua_pop(L, 1);
    struct reader r = { (const unsigned char *)dump.buf, (const unsigned char *)dump.buf + dump.len, &out, 1 };
    copy(&r, HEADER_SIZE);
    copy_function(&r, 0);
    if (r.ok && r.p == r.end) lua_pushlstring(L, out.buf ? out.buf : "", out.len);
    else lua_pushlstring(L, dump.buf ? dump.buf : "", dump.len);   /* an unknown format: the plain dump */
    sb_release(&dump);
    sb_release(&out);
    return 1;
}
