/* proto.c — which function prototype a Lua closure was made from.
 *
 * A loop that builds 100,000 steps with `func = function(a, b) … end` makes
 * 100,000 closures of one prototype: one bytecode, dumped and hashed once per
 * run if the fingerprint can tell that they share it (flow.fingerprint).
 *
 * Lua's public C API has no prototype identity: lua_topointer gives the
 * closure, lua_upvalueid an upvalue, lua_getinfo a source and line that two
 * functions on one line share, and string.dump the bytes (the cost this saves).
 * So this reads the `p` field of the closure itself, through a copy of Lua
 * 5.4's LClosure layout (lobject.h):
 *
 *     CommonHeader (GCObject *next; lu_byte tt; lu_byte marked);
 *     lu_byte nupvalues; GCObject *gclist; struct Proto *p; UpVal *upvals[1];
 *
 * That layout is Lua's private business, so it is guarded twice.
 * flow_proto_check, run when a state is made, checks the version and that two
 * closures of one function expression give one id, two functions on one line
 * two ids, and a C function none; if it fails, proto_id is nil for every
 * function of that state and the fingerprint hashes every closure (correct,
 * only slower).  And every call checks what the public API can confirm: the
 * closure's type tag, its upvalue count against lua_getupvalue's (upvalue n
 * exists, n + 1 does not), its first and last upvalue pointers against
 * lua_upvalueid's (the field just after `p`), and the type tag of the
 * prototype `p` points to; any mismatch gives nil. */
#include "flowlua.h"

#include <lauxlib.h>
#include <stddef.h>
#include <string.h>

/* lobject.h's variant tags (5.4): makevariant(LUA_TFUNCTION, 0) is a Lua
 * closure, makevariant(LUA_NUMTYPES + 1, 0) a prototype. */
#define TAG_LUA_CLOSURE 6
#define TAG_PROTO 10

struct gc_header_mirror {              /* CommonHeader */
    void *next;
    unsigned char tt, marked;
};

struct lclosure_mirror {               /* LClosure */
    void *next;
    unsigned char tt, marked;
    unsigned char nupvalues;
    void *gclist;
    const void *p;
    void *upvals[1];
};

static const char proto_ok_key = 'P';  /* its address keys the self-check's result in the registry */

/* The prototype of the Lua closure at idx, read through the mirror and
 * checked against the public API; NULL for anything else or on a mismatch. */
static const void *read_proto(lua_State *L, int idx)
{
    if (lua_type(L, idx) != LUA_TFUNCTION || lua_iscfunction(L, idx)) return NULL;
    idx = lua_absindex(L, idx);
    const struct lclosure_mirror *cl = lua_topointer(L, idx);
    if (!cl || cl->tt != TAG_LUA_CLOSURE) return NULL;
    /* its upvalue count: upvalue n exists and n + 1 does not (what
     * lua_getinfo's "u" reports, at less cost: flow_proto_id took 447
     * instructions a call with it, 343 so, and the up-to-date check asks it
     * of every Lua step) */
    unsigned n = cl->nupvalues;
    if (n > 0) {
        if (!lua_getupvalue(L, idx, (int)n)) return NULL;
        lua_pop(L, 1);
    }
    if (lua_getupvalue(L, idx, (int)n + 1)) {
        lua_pop(L, 1);
        return NULL;
    }
    if (cl->nupvalues > 0) {
        if (cl->upvals[0] != lua_upvalueid(L, idx, 1)) return NULL;
        void *last;                    /* upvals is declared [1]: read the last one as Lua does, past it */
        memcpy(&last, (const char *)cl + offsetof(struct lclosure_mirror, upvals) + (cl->nupvalues - 1u) * sizeof last,
               sizeof last);
        if (last != lua_upvalueid(L, idx, cl->nupvalues)) return NULL;
    }
    const struct gc_header_mirror *p = cl->p;
    if (!p || p->tt != TAG_PROTO) return NULL;
    return p;
}

/* The self-check's closures: f1, f2 from one expression (with upvalues),
 * g and h from two expressions on one line, and print, a C function. */
static const char check_chunk[] =
    "local x, y = {}, {}\n"
    "local function make() return function(a) return a, x, y end end\n"
    "local g, h = function() return x end, function() return x end\n"
    "return make(), make(), g, h, print\n";

static int run_check(lua_State *L)
{
    if (luaL_loadbufferx(L, check_chunk, sizeof check_chunk - 1, "=proto_check", "t") != LUA_OK) return 0;
    lua_call(L, 0, 5);
    int base = lua_gettop(L) - 5;
    const void *f1 = read_proto(L, base + 1), *f2 = read_proto(L, base + 2);
    const void *g = read_proto(L, base + 3), *h = read_proto(L, base + 4);
    bool ok = f1 && f1 == f2 && lua_topointer(L, base + 1) != lua_topointer(L, base + 2)
              && g && h && g != h && g != f1 && h != f1 && !read_proto(L, base + 5);
    lua_pushboolean(L, ok);
    return 1;
}

bool flow_proto_check(lua_State *L)
{
    bool ok = false;
    if (LUA_VERSION_NUM == 504 && lua_version(L) == 504) {
        int top = lua_gettop(L);
        /* protected: out of memory here only turns the shortcut off */
        ok = flow_cpcall(L, run_check, NULL, 0, 1) == LUA_OK && lua_toboolean(L, -1);
        lua_settop(L, top);
    }
    lua_pushboolean(L, ok);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &proto_ok_key);
    return ok;
}

const void *flow_proto_id(lua_State *L, int idx)
{
    lua_rawgetp(L, LUA_REGISTRYINDEX, &proto_ok_key);
    bool ok = lua_toboolean(L, -1);
    lua_pop(L, 1);
    return ok ? read_proto(L, idx) : NULL;
}
