/* data_files.c — data_file_clash: whether two datasets of a plan's command
 * steps would be kept at one file in .flow/data, checked in C.
 *
 * plan.lua's check_paths gives every dataset a place of its own.  With a
 * catalog without patterns, and no catalog path that meets .flow/data, the
 * only places left to check are the files flow keeps there for commands: a
 * command's output d at safe_name(d), a value d a command reads at
 * safe_name(d) .. ".json" and ".txt".  For 10,000 command steps that was
 * the plan's largest Lua loop (half the Lua instructions of a no-op rerun,
 * more than the script's own); here it is a pass over the steps' records.
 * check_paths's Lua loop (`place`) keeps the rule for a catalog with
 * patterns, and t_outputs.sh runs each clash through both and compares the
 * messages. */
#include "flowlua.h"
#include "step_decl.h"
#include "dag.h"
#include "strmap.h"
#include "util.h"

#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>

/* A dataset the commands name, in io_names's order ("all": a step's inputs,
 * then its outputs). */
struct named { const char *name; bool output, skipped; };

/* The datasets of the listed steps, each as often as it is named, into a
 * userdata at the top of the stack (the Lua calls here may raise: nothing
 * of the C heap is held yet).  skip: a set of names to leave out. */
static struct named *list_named(lua_State *L, int nodes, int indices, int skip, size_t *n_out)
{
    lua_Integer n = (lua_Integer)lua_rawlen(L, indices);
    size_t total = 0;
    for (lua_Integer k = 1; k <= n; k++) {
        struct step_decls *d;
        struct step_decl rec;
        flow_push_listed_node(L, nodes, indices, k, "data_file_clash", &d, &rec);
        total += (size_t)rec.n_inputs + rec.n_outputs;
        lua_pop(L, 1);
    }
    lua_pushnil(L);
    bool skips = lua_next(L, skip) != 0;                 /* (most catalogs keep no command's dataset) */
    lua_settop(L, lua_gettop(L) - (skips ? 2 : 0));
    struct named *all = lua_newuserdatauv(L, (total + 1) * sizeof *all, 0);
    int box = lua_gettop(L);
    size_t at = 0;
    for (lua_Integer k = 1; k <= n; k++) {
        struct step_decls *d;
        struct step_decl rec;
        flow_push_listed_node(L, nodes, indices, k, "data_file_clash", &d, &rec);
        for (int outputs = 0; outputs < 2; outputs++) {
            uint32_t first = step_io_first(&rec, outputs), count = step_io_count(&rec, outputs);
            for (uint32_t i = 0; i < count && at < total; i++) {
                const char *name = step_decls_str(d, d->io[first + i].dataset);   /* the store's: the node holds it */
                bool skipped = false;
                if (skips) {
                    lua_pushstring(L, name);
                    skipped = lua_rawget(L, skip) != LUA_TNIL;
                    lua_pop(L, 1);
                }
                all[at++] = (struct named){ name, outputs == 1, skipped };
            }
        }
        lua_pop(L, 1);
    }
    lua_settop(L, box);
    *n_out = at;
    return all;
}

/* The file `file` claimed for dataset k; the index of another dataset that
 * claimed it first, or SIZE_MAX. */
static size_t claim(struct strmap *files, const char *file, size_t k, const struct named *all)
{
    struct strmap_slot *slot = strmap_slot(files, file);
    if (!slot->key) {
        strmap_fill(files, slot, file, k);
        return SIZE_MAX;
    }
    return strcmp(all[slot->value].name, all[k].name) != 0 ? slot->value : SIZE_MAX;
}

/* The first clash among all[0..n): sets *file (the caller frees it) and
 * *second (the dataset that met it) and returns the index of the dataset
 * that claimed the file first; SIZE_MAX when none.  No Lua call: the maps
 * are freed here. */
static size_t first_clash(const struct named *all, size_t n, char **file, size_t *second)
{
    struct strmap by_command = { .borrowed_keys = true }, seen = { .borrowed_keys = true }, files = { 0 };
    for (size_t k = 0; k < n; k++)
        if (all[k].output) strmap_put(&by_command, all[k].name, k);
    size_t owner = SIZE_MAX;
    *file = NULL;
    for (size_t k = 0; k < n && owner == SIZE_MAX; k++) {
        struct strmap_slot *met = strmap_slot(&seen, all[k].name);
        if (met->key) continue;                                 /* each name once, where first met */
        strmap_fill(&seen, met, all[k].name, k);
        if (all[k].skipped || dag_is_param_input(all[k].name)) continue;
        char *safe = safe_file_name(all[k].name);
        if (strmap_get(&by_command, all[k].name, NULL)) {       /* a command writes it there */
            owner = claim(&files, safe, k, all);
            *file = safe;
        } else {                                                /* a value a command reads: .json, then .txt */
            for (int t = 0; t < 2 && owner == SIZE_MAX; t++) {
                free(*file);
                *file = xasprintf("%s%s", safe, t == 0 ? ".json" : ".txt");
                owner = claim(&files, *file, k, all);
            }
            free(safe);
        }
        if (owner != SIZE_MAX) {
            *second = k;
        } else {
            free(*file);
            *file = NULL;
        }
    }
    strmap_free(&by_command);
    strmap_free(&seen);
    strmap_free(&files);
    return owner;
}

/* data_file_clash(nodes, indices, skip) -> nil, or file, first, second: the
 * first file in .flow/data that two datasets of the steps nodes[i] (i in
 * `indices`: the plan's commands) would both be kept at, as check_paths's
 * `place` claims them with a catalog without patterns, and the dataset that
 * claimed it first and the one that met it.  Each name counts once, where
 * io_names(nodes, indices, "all") first meets it; a parameter, or a name in
 * the set `skip` (the catalog's own paths, claimed apart), claims nothing. */
int flow_l_data_file_clash(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    luaL_checktype(L, 2, LUA_TTABLE);
    luaL_checktype(L, 3, LUA_TTABLE);
    lua_settop(L, 3);
    size_t n;
    const struct named *all = list_named(L, 1, 2, 3, &n);      /* 4: held until the end */
    char *file;
    size_t second = SIZE_MAX;
    size_t owner = first_clash(all, n, &file, &second);
    if (owner == SIZE_MAX) {
        lua_pushnil(L);
        return 1;
    }
    flow_push_owned(L, file, strlen(file), free);
    lua_pushstring(L, all[owner].name);
    lua_pushstring(L, all[second].name);
    return 3;
}
