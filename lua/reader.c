/* reader.c — the chunk reader: whole file in, desugared, loaded under the
 * user's file name so every message points at their line. */
#include "flowlua.h"
#include "desugar.h"
#include "util.h"

#include <errno.h>
#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>

int flow_load_buffer(lua_State *L, const char *buf, size_t len, const char *chunkname)
{
    size_t out_len;
    int err_line = 0;
    char err[512];
    char *code = desugar_chunk(buf, len, &out_len, &err_line, err, sizeof err);
    if (!code) {
        const char *name = chunkname[0] == '@' || chunkname[0] == '=' ? chunkname + 1 : chunkname;
        lua_pushfstring(L, "%s:%d: %s", name, err_line, err);
        return LUA_ERRSYNTAX;
    }
    int rc = luaL_loadbufferx(L, code, out_len, chunkname, "t");
    free(code);
    return rc;
}

int flow_load_file(lua_State *L, const char *path)
{
    size_t len;
    char *buf = read_file(path, &len);
    if (!buf) {
        lua_pushfstring(L, "cannot read %s: %s", path, strerror(errno));
        return LUA_ERRFILE;
    }
    lua_pushfstring(L, "@%s", path);
    int rc = flow_load_buffer(L, buf, len, lua_tostring(L, -1));
    lua_remove(L, -2);                 /* the chunk name; the chunk or error stays */
    free(buf);
    return rc;
}

int flow_traceback(lua_State *L)
{
    const char *msg = lua_tostring(L, 1);
    if (!msg) {
        if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING) return 1;
        msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
    }
    luaL_traceback(L, L, msg, 1);
    return 1;
}

int flow_pcall(lua_State *L, int nargs, int nresults)
{
    int base = lua_gettop(L) - nargs;
    lua_pushcfunction(L, flow_traceback);
    lua_insert(L, base);
    int rc = lua_pcall(L, nargs, nresults, base);
    lua_remove(L, base);
    return rc;
}
