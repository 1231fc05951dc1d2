/* l_repl.c — flow.repl_c: what `flow repl` needs of C (stdlib/flow/repl.lua
 * is the REPL itself).
 *
 *   repl_c.open(history | nil, complete) -> editor | nil, why
 *       complete(line, start, finish) -> {candidates}: Tab on line[start+1..finish]
 *   editor:read(prompt) -> line | nil (end of input) | false (Ctrl-C: the line dropped)
 *   editor:remember(line)             add it to the history
 *   editor:close()                    write the history (also when collected)
 *   repl_c.reset_interrupts()         a Ctrl-C ended what it stopped; the session goes on
 *   repl_c.isatty(fd) -> boolean
 *
 * The line editor (engine/line_editor.h) waits on the event loop, so a
 * Ctrl-C at the prompt ends the line, not flow. */
#include "flowlua.h"
#include <signal.h>
#include "line_editor.h"
#include "loop.h"
#include "util.h"

#include <lauxlib.h>
#include <lua.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define EDITOR_CLASS "flow.repl.editor"

struct editor_box {
    struct line_editor *ed;
    lua_State *L;               /* the thread reading now: the completion runs there */
    int complete_ref;           /* the completion function, in the registry */
};

static struct editor_box *check_editor(lua_State *L)
{
    struct editor_box *b = luaL_checkudata(L, 1, EDITOR_CLASS);
    if (!b->ed) luaL_error(L, "the line editor is closed");
    return b;
}

struct completion_call {
    struct editor_box *b;
    const char *line;
    int start, end;
};

/* complete(line, start, finish), protected: called from inside readline,
 * which no Lua error may jump across. */
static int call_completion(lua_State *L)
{
    struct completion_call *c = lua_touserdata(L, 1);
    lua_rawgeti(L, LUA_REGISTRYINDEX, c->b->complete_ref);
    lua_pushstring(L, c->line);
    lua_pushinteger(L, c->start);
    lua_pushinteger(L, c->end);
    lua_call(L, 3, 1);
    return 1;
}

/* The candidates the Lua completion function gives, as the editor takes them.
 * Only strings are taken (a string needs no conversion, so nothing raises
 * while the array is held). */
static char **complete(void *arg, const char *line, int start, int end)
{
    struct editor_box *b = arg;
    lua_State *L = b->L;
    int top = lua_gettop(L);
    char **out = NULL;
    struct completion_call c = { b, line, start, end };
    if (flow_cpcall(L, call_completion, &c, 0, 1) == LUA_OK && lua_istable(L, -1)) {
        size_t n = lua_rawlen(L, -1), k = 0;
        out = xcalloc(n + 1, sizeof *out);
        for (size_t i = 1; i <= n; i++) {
            if (lua_rawgeti(L, -1, (lua_Integer)i) == LUA_TSTRING) out[k++] = xstrdup(lua_tostring(L, -1));
            lua_pop(L, 1);
        }
        if (k == 0) {
            free(out);
            out = NULL;
        }
    }
    lua_settop(L, top);
    return out;
}

static int l_open(lua_State *L)
{
    const char *history = luaL_optstring(L, 1, NULL);
    luaL_checktype(L, 2, LUA_TFUNCTION);
    struct editor_box *b = lua_newuserdatauv(L, sizeof *b, 0);
    *b = (struct editor_box){ .complete_ref = LUA_NOREF };  /* L: set by read, before any completion */
    luaL_setmetatable(L, EDITOR_CLASS);
    lua_pushvalue(L, 2);
    b->complete_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    char err[512];
    b->ed = line_editor_open(flow_state_loop(L), history, complete, b, err, sizeof err);
    if (!b->ed) {
        lua_pushnil(L);
        lua_pushstring(L, err);
        return 2;
    }
    return 1;
}

static int l_read(lua_State *L)
{
    struct editor_box *b = check_editor(L);
    const char *prompt = luaL_checkstring(L, 2);
    b->L = L;
    char *line;
    switch (line_editor_read(b->ed, prompt, &line)) {
    case LINE_OK: flow_push_owned(L, line, strlen(line), free); break;
    case LINE_EOF: lua_pushnil(L); break;
    case LINE_INTERRUPTED: lua_pushboolean(L, 0); break;
    }
    return 1;
}

static int l_remember(lua_State *L)
{
    struct editor_box *b = check_editor(L);
    line_editor_remember(b->ed, luaL_checkstring(L, 2));
    return 0;
}

static int l_close(lua_State *L)
{
    struct editor_box *b = luaL_checkudata(L, 1, EDITOR_CLASS);
    line_editor_close(b->ed);
    b->ed = NULL;
    luaL_unref(L, LUA_REGISTRYINDEX, b->complete_ref);
    b->complete_ref = LUA_NOREF;
    return 0;
}

static int l_reset_interrupts(lua_State *L)
{
    loop_reset_interrupts(flow_state_loop(L));
    return 0;
}

/* terminated() -> the signal that asks the session to end (SIGTERM, or
 * SIGHUP: its terminal closed), or nil: a Ctrl-C only stops what runs. */
static int l_terminated(lua_State *L)
{
    int sig = loop_ending_signal(flow_state_loop(L));      /* (after a Ctrl-C too: a supervisor's INT, TERM) */
    if (sig) lua_pushinteger(L, sig);
    else lua_pushnil(L);
    return 1;
}

static int l_isatty(lua_State *L)
{
    lua_pushboolean(L, isatty((int)luaL_checkinteger(L, 1)));
    return 1;
}

static const luaL_Reg editor_methods[] = {
    { "read", l_read },
    { "remember", l_remember },
    { "close", l_close },
    { NULL, NULL },
};

static const luaL_Reg repl_funcs[] = {
    { "open", l_open },
    { "reset_interrupts", l_reset_interrupts },
    { "terminated", l_terminated },
    { "isatty", l_isatty },
    { NULL, NULL },
};

int luaopen_flow_repl_c(lua_State *L)
{
    flow_new_class(L, EDITOR_CLASS, editor_methods, l_close);
    luaL_newlib(L, repl_funcs);
    return 1;
}
