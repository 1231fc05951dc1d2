/* reader.c — the chunk reader: whole file in, desugared, loaded under the
 * user's file name so every message points at their line.  The same reader
 * serves every project file: the script, and what it loads with require,
 * dofile or loadfile (one file per pipeline, as Kedro projects keep them). */
#include "flowlua.h"
#include "desugar.h"
#include "hash.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SCRIPT_MAX (64L << 20)

struct load_error { const char *name; int line; const char *msg; };

/* (load_error) -> "name:line: msg" */
static int push_load_error(lua_State *L)
{
    const struct load_error *e = lua_touserdata(L, 1);
    lua_pushfstring(L, "%s:%d: %s", e->name, e->line, e->msg);
    return 1;
}

int flow_load_buffer(lua_State *L, const char *buf, size_t len, const char *chunkname)
{
    size_t out_len;
    int err_line = 0;
    char err[512];
    char *code = desugar_chunk(buf, len, &out_len, &err_line, err, sizeof err);
    if (!code) {
        /* The caller holds buf: the message is pushed protected, and a failure
         * to push it is this load's error (LUA_ERRMEM, "not enough memory"),
         * as it is when lua_load runs out of memory. */
        struct load_error e = { chunkname[0] == '@' || chunkname[0] == '=' ? chunkname + 1 : chunkname,
                                err_line, err };
        int rc = flow_cpcall(L, push_load_error, &e, 0, 1);
        return rc == LUA_OK ? LUA_ERRSYNTAX : rc;
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
    const char *chunkname = lua_pushfstring(L, "@%s", path);   /* before the file is read: */
    size_t len;                                                 /* no C memory held if it raises */
    char err[1024];
    char *buf = flow_read_script(path, path, &len, err, sizeof err);
    if (!buf) {
        lua_pop(L, 1);
        lua_pushstring(L, err);
        return LUA_ERRFILE;
    }
    int rc = flow_load_buffer(L, buf, len, chunkname);
    free(buf);
    lua_remove(L, -2);                 /* the chunk name; the chunk or error stays */
    return rc;
}

/* The registry's table of the modules require loaded: path -> the SHA-256
 * of the text it ran (flow_l_loaded_source). */
static const char sources_key = 'S';

/* Reads path and pushes its chunk, named "@path" (so messages say "path:line"),
 * or an error message; returns LUA_OK or the error.  A precompiled chunk is
 * loaded as it is; `mode` is load's ("t", "b", "bt" or NULL).  No C memory is
 * held across a Lua call that can raise: the name is pushed before the file is
 * read, and lua_load itself runs protected.  `hash`, when not NULL, gets the
 * SHA-256 of the file's text as read. */
static int load_project_file(lua_State *L, const char *path, const char *mode, char hash[SHA256_HEX_SIZE])
{
    const char *chunkname = lua_pushfstring(L, "@%s", path);
    size_t len;
    char ferr[1024];
    /* As the script itself: a regular file of at most SCRIPT_MAX (a FIFO or
     * /dev/zero is refused, not read until it ends or memory does). */
    char *buf = flow_read_script(path, path, &len, ferr, sizeof ferr);
    if (!buf) {
        lua_pop(L, 1);
        lua_pushstring(L, ferr);
        return LUA_ERRFILE;
    }
    if (hash) sha256_hex(buf, len, hash);
    int rc;
    if (len > 0 && buf[0] == LUA_SIGNATURE[0]) {
        rc = luaL_loadbufferx(L, buf, len, chunkname, mode);
        free(buf);
    } else {
        char err[512];
        int err_line = 0;
        size_t out_len;
        char *code = desugar_chunk(buf, len, &out_len, &err_line, err, sizeof err);
        free(buf);
        if (!code) {
            lua_pop(L, 1);
            lua_pushfstring(L, "%s:%d: %s", path, err_line, err);
            return LUA_ERRSYNTAX;
        }
        rc = luaL_loadbufferx(L, code, out_len, chunkname, mode);
        free(code);
    }
    lua_remove(L, -2);                 /* the chunk name; the chunk or error stays */
    return rc;
}

/* loadfile([filename [, mode [, env]]]), as Lua's own (stdin when no name). */
static int l_loadfile(lua_State *L)
{
    const char *path = luaL_optstring(L, 1, NULL);
    const char *mode = luaL_optstring(L, 2, NULL);
    bool has_env = !lua_isnone(L, 3);
    int rc = path ? load_project_file(L, path, mode, NULL) : luaL_loadfilex(L, NULL, mode);
    if (rc != LUA_OK) {
        luaL_pushfail(L);
        lua_insert(L, -2);
        return 2;
    }
    if (has_env) {                     /* the chunk's first upvalue is its _ENV */
        lua_pushvalue(L, 3);
        if (!lua_setupvalue(L, -2, 1)) lua_pop(L, 1);
    }
    return 1;
}

static int dofile_done(lua_State *L, int status, lua_KContext ctx)
{
    (void)status;
    (void)ctx;
    return lua_gettop(L) - 1;
}

/* dofile([filename]), as Lua's own: the chunk may yield (a step waiting on a process). */
static int l_dofile(lua_State *L)
{
    const char *path = luaL_optstring(L, 1, NULL);
    lua_settop(L, 1);
    int rc = path ? load_project_file(L, path, NULL, NULL) : luaL_loadfilex(L, NULL, NULL);
    if (rc != LUA_OK) return lua_error(L);
    lua_callk(L, 0, LUA_MULTRET, 0, dofile_done);
    return dofile_done(L, LUA_OK, 0);
}

/* require's searcher for Lua files on package.path, in place of Lua's own. */
static int search_project(lua_State *L)
{
    const char *name = luaL_checkstring(L, 1);
    lua_getglobal(L, "package");
    if (lua_getfield(L, -1, "path") != LUA_TSTRING) return luaL_error(L, "'package.path' must be a string");
    /* As package.searchpath, but without opening the candidates (its fopen
     * would wait forever on a FIFO): the first that exists is the module, and
     * load_project_file refuses one that is not a regular file. */
    const char *templates = lua_tostring(L, -1);
    const char *file_name = luaL_gsub(L, name, ".", LUA_DIRSEP);
    struct strbuf tried = STRBUF_INIT;
    const char *path = NULL;
    for (const char *t = templates; !path && *t; ) {
        const char *end = strchr(t, ';');
        size_t n = end ? (size_t)(end - t) : strlen(t);
        if (n > 0) {
            lua_pushlstring(L, t, n);
            const char *candidate = luaL_gsub(L, lua_tostring(L, -1), "?", file_name);
            lua_remove(L, -2);
            struct stat st;
            if (stat(candidate, &st) == 0) path = candidate;     /* stays on the stack */
            else {
                sb_addf(&tried, "%sno file '%s'", tried.len ? "\n\t" : "", candidate);
                lua_pop(L, 1);
            }
        }
        t += n + (end ? 1 : 0);
    }
    if (!path) {
        lua_pushlstring(L, tried.buf ? tried.buf : "", tried.len);
        sb_release(&tried);
        return 1;                      /* not here: the message lists where it looked */
    }
    sb_release(&tried);
    lua_pushnil(L);                    /* the layout below: path under one slot */
    char hash[SHA256_HEX_SIZE];
    if (load_project_file(L, path, NULL, hash) != LUA_OK)
        return luaL_error(L, "error loading module '%s' from file '%s':\n\t%s", name, path, lua_tostring(L, -1));
    /* what the module runs is this text, whatever the file holds later (a
     * REPL's module edited but not reloaded): its fingerprint's */
    if (lua_rawgetp(L, LUA_REGISTRYINDEX, &sources_key) != LUA_TTABLE) {
        lua_pop(L, 1);
        lua_newtable(L);
        lua_pushvalue(L, -1);
        lua_rawsetp(L, LUA_REGISTRYINDEX, &sources_key);
    }
    lua_pushstring(L, hash);
    lua_setfield(L, -2, path);
    lua_pop(L, 1);
    lua_pushvalue(L, -3);              /* the file name: the loader's second argument */
    return 2;
}

int flow_l_loaded_source(lua_State *L)
{
    const char *path = luaL_checkstring(L, 1);
    if (lua_rawgetp(L, LUA_REGISTRYINDEX, &sources_key) != LUA_TTABLE) {
        lua_pushnil(L);
        return 1;
    }
    lua_getfield(L, -1, path);
    return 1;
}

void flow_open_project_loaders(lua_State *L)
{
    lua_pushcfunction(L, l_loadfile);
    lua_setglobal(L, "loadfile");
    lua_pushcfunction(L, l_dofile);
    lua_setglobal(L, "dofile");
    lua_getglobal(L, "package");
    lua_getfield(L, -1, "searchers");
    lua_pushcfunction(L, search_project);
    lua_rawseti(L, -2, 2);             /* Lua's own searcher for Lua files */
    lua_pop(L, 2);
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
