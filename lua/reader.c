/* reader.c — the chunk reader: whole file in, desugared, loaded under the
 * user's file name so every message points at their line. */
#include "flowlua.h"
#include "desugar.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SCRIPT_MAX (64L << 20)

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

char *flow_read_script(const char *path, const char *display, size_t *len, char *err, size_t errlen)
{
    struct stat st;
    /* stat first: opening a FIFO that has no writer would wait forever */
    if (stat(path, &st) != 0) {
        errf(err, errlen, "cannot read %s: %s", display, strerror(errno));
        return NULL;
    }
    int fd = S_ISREG(st.st_mode) ? open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY) : -1;
    if (fd < 0 && S_ISREG(st.st_mode)) {
        errf(err, errlen, "cannot read %s: %s", display, strerror(errno));
        return NULL;
    }
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {   /* or replaced since the stat */
        if (fd >= 0) close(fd);
        errf(err, errlen, "%s is not a regular file", display);
        return NULL;
    }
    struct strbuf sb = STRBUF_INIT;
    char chunk[65536];
    int rc = 0;
    for (;;) {
        ssize_t n = read(fd, chunk, sizeof chunk);
        if (n < 0 && errno == EINTR) continue;
        if (n == 0) break;
        if (n < 0) {
            errf(err, errlen, "cannot read %s: %s", display, strerror(errno));
            rc = -1;
            break;
        }
        if (sb.len + (size_t)n > SCRIPT_MAX) {                    /* a file still growing stops here too */
            errf(err, errlen, "%s is larger than %ld MiB", display, SCRIPT_MAX >> 20);
            rc = -1;
            break;
        }
        sb_add(&sb, chunk, (size_t)n);
    }
    close(fd);
    if (rc != 0) {
        sb_release(&sb);
        return NULL;
    }
    *len = sb.len;
    return sb_detach(&sb);
}

int flow_load_file(lua_State *L, const char *path)
{
    size_t len;
    char err[1024];
    char *buf = flow_read_script(path, path, &len, err, sizeof err);
    if (!buf) {
        lua_pushstring(L, err);
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
