/* command_refs.c — what the plan's checks need of every command step's
 * templates (the words of its command line, its shell line, its environment
 * values: command.template_strings), found in one pass in C.
 *
 * plan.lua and credentials.lua each walked every command step's template
 * strings in Lua: for a ${inputs.x} or ${outputs.y} naming nothing or a
 * malformed reference (check_templates), for ${params.…} (check_params), for
 * "${credentials." (credentials.check).  Three walks that find nothing in
 * nearly every run took about 25 ms of a 0.2 s no-op rerun of 10,000
 * command steps.
 * Here the walk says which steps to look at; the Lua checks then look at
 * those only, as before, and word every message (check_templates: the first
 * step found wrong, whose message it makes; the others: the few steps
 * listed).  t_errors.sh puts wrong steps after many right ones. */
#include "flowlua.h"
#include "step_decl.h"
#include "template.h"

#include <lauxlib.h>
#include <string.h>

/* The command walked last, kept so that the steps of one command line
 * (node{} gives them one Command) walk its strings once: what they say
 * whatever the step, and their references to the step's own arguments, to
 * check against each step's names ('i' or 'o', the key, NUL, in a buffer of
 * the stack: a command whose references do not fit is walked each time). */
struct walked {
    const void *cmd;                    /* NULL: none kept */
    bool malformed, params, credentials;
    size_t len;                         /* of refs; SIZE_MAX once they did not fit */
    char refs[1024];
};

/* One step's strings, looked at. */
struct look {
    const struct step_decls *d;
    const struct step_decl *rec;
    bool wrong;                         /* a reference names no argument, or is malformed */
    bool params;                        /* a ${params.…} reference */
    bool credentials;                   /* "${credentials." anywhere (credentials.lua's test) */
    struct walked *w;                   /* kept here as the walk goes */
};

static void keep_ref(struct walked *w, bool output, const char *key)
{
    size_t n = strlen(key) + 2;
    if (w->len == SIZE_MAX || w->len + n > sizeof w->refs) {
        w->len = SIZE_MAX;
        return;
    }
    w->refs[w->len] = output ? 'o' : 'i';
    memcpy(w->refs + w->len + 1, key, n - 1);
    w->len += n;
}

static int visit_ref(void *ctx, const char *ns, const char *key)
{
    struct look *lk = ctx;
    if (strcmp(ns, "params") == 0) {
        lk->params = lk->w->params = true;
    } else if (strcmp(ns, "inputs") == 0 || strcmp(ns, "outputs") == 0) {
        keep_ref(lk->w, ns[0] == 'o', key);
        if (!step_decls_has_arg(lk->d, lk->rec, ns[0] == 'o', key)) lk->wrong = true;
    }
    return 0;
}

/* The string at idx, if it is one (a number in argv is its text already). */
static void look_at(lua_State *L, int idx, struct look *lk)
{
    if (lua_type(L, idx) != LUA_TSTRING) return;
    const char *s = lua_tostring(L, idx);
    char err[256];
    if (template_each_ref(s, visit_ref, lk, err, sizeof err) != 0) lk->wrong = lk->w->malformed = true;
    if (strstr(s, "${credentials.")) lk->credentials = lk->w->credentials = true;
}

/* lk as a walk of the command kept in w would leave it, for lk's step. */
static void look_again(struct look *lk, const struct walked *w)
{
    lk->params = w->params;
    lk->credentials = w->credentials;
    lk->wrong = w->malformed;
    for (size_t at = 0; at < w->len && !lk->wrong; at += strlen(w->refs + at) + 1)
        lk->wrong = !step_decls_has_arg(lk->d, lk->rec, w->refs[at] == 'o', w->refs + at + 1);
}

/* The template strings of the command at idx (a Command: argv or shell,
 * and env), in any order: only whether one of them is wrong matters here. */
static void look_at_command(lua_State *L, int cmd, struct look *lk)
{
    if (lua_getfield(L, cmd, "argv") == LUA_TTABLE) {
        for (lua_Integer k = 1; lua_rawgeti(L, -1, k) != LUA_TNIL; k++) {
            look_at(L, -1, lk);
            lua_pop(L, 1);
        }
        lua_pop(L, 1);
    } else {
        lua_getfield(L, cmd, "shell");
        look_at(L, -1, lk);
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    if (lua_getfield(L, cmd, "env") == LUA_TTABLE) {
        lua_pushnil(L);
        while (lua_next(L, -2)) {
            look_at(L, -1, lk);
            lua_pop(L, 1);
        }
    }
    lua_pop(L, 1);
}

static void append(lua_State *L, int list, lua_Integer i)
{
    lua_pushinteger(L, i);
    lua_rawseti(L, list, (lua_Integer)lua_rawlen(L, list) + 1);
}

/* command_refs(nodes, commands) -> wrong, params, credentials: the first
 * index i in the list `commands` whose step nodes[i] has a reference that
 * check_templates refuses (or nil), and the lists of the indices whose
 * steps have a ${params.…} reference, and "${credentials." in a string. */
int flow_l_command_refs(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    luaL_checktype(L, 2, LUA_TTABLE);
    lua_settop(L, 2);
    lua_pushnil(L);                     /* 3: wrong */
    lua_newtable(L);                    /* 4: params */
    lua_newtable(L);                    /* 5: credentials */
    lua_Integer n = (lua_Integer)lua_rawlen(L, 2);
    struct walked w = { .cmd = NULL };
    for (lua_Integer k = 1; k <= n; k++) {
        struct step_decls *d;
        struct step_decl rec;
        lua_Integer i = flow_push_listed_node(L, 1, 2, k, "command_refs", &d, &rec);
        struct look lk = { d, &rec, false, false, false, &w };
        if (flow_node_push_body(L, -1) == LUA_TTABLE) {
            const void *cmd = lua_topointer(L, -1);   /* (held by the node: the same table while this runs) */
            if (cmd == w.cmd) {
                look_again(&lk, &w);
            } else {
                w.cmd = NULL;
                w.malformed = w.params = w.credentials = false;
                w.len = 0;
                look_at_command(L, lua_gettop(L), &lk);
                if (w.len != SIZE_MAX) w.cmd = cmd;
            }
        }
        lua_pop(L, 2);
        if (lk.wrong && lua_isnil(L, 3)) {
            lua_pushinteger(L, i);
            lua_replace(L, 3);
        }
        if (lk.params) append(L, 4, i);
        if (lk.credentials) append(L, 5, i);
    }
    return 3;
}
