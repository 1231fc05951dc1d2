/* flowlua.h — the C↔Lua boundary: how the engine's Lua state is set up, how
 * user chunks are read and called, and the C modules the stdlib builds on.
 * Each module is one luaL_Reg table in its own file (l_*.c). */
#ifndef FLOW_FLOWLUA_H
#define FLOW_FLOWLUA_H

#include "uptodate.h"

#include <cjson/cJSON.h>
#include <lua.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct loop;

/* A fresh engine state: standard libraries, the embedded stdlib searcher,
 * the C modules (flow.core, flow.dag, flow.proc, flow.sched) and the globals
 * that pipeline scripts see.  The state owns `loop`.  NULL with the reason in
 * err if the event loop or the state cannot be made. */
lua_State *flow_state_new(char *err, size_t errlen);
void flow_state_close(lua_State *L);

/* The state's allocator (alloc.c): small blocks from size classes, freed
 * with the state by flow_alloc_free. */
struct flow_alloc;
struct flow_alloc *flow_alloc_new(void);
lua_Alloc flow_alloc_fn(void);
void flow_alloc_free(struct flow_alloc *a);
struct loop *flow_state_loop(lua_State *L);

/* Reads a script, desugars `distributed_job<…>` and pushes the chunk.
 * On error pushes a message "file:line: reason" and returns non-zero. */
int flow_load_file(lua_State *L, const char *path);
/* A script's text: a regular file of at most 64 MiB (/dev/zero or a FIFO would
 * never end).  NULL with "cannot read DISPLAY: …", "DISPLAY is not a regular
 * file" or "DISPLAY is larger than 64 MiB" in err.  The caller frees it. */
char *flow_read_script(const char *path, const char *display, size_t *len, char *err, size_t errlen);
int flow_load_buffer(lua_State *L, const char *buf, size_t len, const char *chunkname);
/* Makes require (for files on package.path), dofile and loadfile read project
 * files through the same reader, desugared.  Call before flow_open_stdlib, whose
 * searcher goes ahead of it. */
void flow_open_project_loaders(lua_State *L);
/* core.loaded_source(path) -> the SHA-256 of the text require loaded the
 * module at path from, or nil (not loaded by require). */
int flow_l_loaded_source(lua_State *L);
/* lua_pcall with a traceback handler; on error the message has a traceback. */
int flow_pcall(lua_State *L, int nargs, int nresults);
int flow_traceback(lua_State *L);

/* Embedded stdlib (generated into build/stdlib_embed.c). */
struct flow_embedded { const char *name; const unsigned char *data; size_t len; };
extern const struct flow_embedded flow_stdlib[];
void flow_open_stdlib(lua_State *L);

/* Value conversion.  lua_to_json returns NULL with a message naming the
 * offending key path on values JSON cannot hold (functions, userdata, cycles);
 * if the walk raises (out of memory) it frees what it converted, then raises. */
cJSON *lua_to_json(lua_State *L, int idx, char *err, size_t errlen);
void json_to_lua(lua_State *L, const cJSON *item);
/* Pushes j's JSON text (compact, or indented when `pretty`) and deletes j. */
void flow_push_json_text(lua_State *L, cJSON *j, bool pretty);
/* Pushes j's value (json_to_lua) and deletes j, even when a push raises. */
void flow_push_json_tree(lua_State *L, cJSON *j);
/* Pushes flow.core.json_null, which lua_to_json turns into null. */
void flow_push_json_null(lua_State *L);

/* Step coroutines (l_sched.c).  A C function that waits (flow.proc.spawn)
 * yields only when it runs on a step's own coroutine; anywhere else it drives
 * the loop itself until the wait is over. */
struct proc;
struct dag;
struct dag *flow_check_dag(lua_State *L, int idx);
int flow_step_can_yield(lua_State *co);
/* The step's coroutine is about to yield on `w` (step_wait.h): it is listed,
 * so that stopping the step cancels it.  Whoever completes the wait calls
 * flow_step_wake, which takes it off the list and resumes the step. */
struct step_wait;
void flow_step_wait(lua_State *co, struct step_wait *w);
/* A step's body in C (l_values.c) gives the outputs of the outputs text
 * `json` it returns as the state record's fields (statestore.h; strings
 * that live as long as the run, the hashes copied): the attempt's end then
 * puts the record without reading the text.  Nothing when co is not a
 * step's coroutine or there are more than FLOW_KEPT_OUTPUTS_MAX. */
#define FLOW_KEPT_OUTPUTS_MAX 64
struct state_out;
void flow_step_keep_outputs(lua_State *co, const char *json, const struct state_out *outs, size_t n);
/* Forgets them: the attempt goes on in the stdlib, whose text may be
 * another (its address that of the first, once that is collected). */
void flow_step_forget_outputs(lua_State *co);
void flow_step_wake(lua_State *co, struct step_wait *w);
void flow_step_resume(lua_State *co, int nargs);
/* The journal userdata at idx (flow.cache.journal), raising if closed; the
 * work pool of the state (started now if need be), or NULL (l_cache.c). */
struct journal;
struct work_pool;
struct journal *flow_check_journal(lua_State *L, int idx);
struct work_pool *flow_work_pool(lua_State *L);
/* Monotonic time by which the step must finish (0: none); the instruction-count
 * hook stops a busy Lua step past it. */
double flow_step_deadline(lua_State *co);
/* The instruction-count hook (l_sched.c): it stops a step's code on Ctrl-C
 * or at its timeout, and a script's top level on Ctrl-C.  The main thread has
 * it, a step's coroutine while its own code runs (sched.guard); sched.run's
 * callbacks run without it. */
#define FLOW_HOOK_COUNT 1000000
void flow_count_hook(lua_State *L, lua_Debug *ar);
/* Replaces pcall, xpcall, coroutine.create/wrap/resume/close, os.exit and
 * os.execute by versions that keep a stopped step stopped (see l_sched.c). */
void flow_install_guards(lua_State *L);

/* The position-independent code of the Lua function at idx (bytecode.c):
 * pushes it (and with `strings` a list of its string constants, nested
 * functions' included) and returns how many values it pushed; 0 for a C
 * function. */
int flow_push_code(lua_State *L, int idx, int strings);
/* Which prototype the Lua closure at idx was made from (proto.c): closures of
 * one function expression share it.  NULL for a C function, or for every
 * function when the state's self-check failed (the fingerprint then hashes
 * each closure).  It stays valid while a closure of that prototype is alive. */
const void *flow_proto_id(lua_State *L, int idx);
/* The self-check that proto.c's reading of Lua's closure layout holds, run by
 * flow_state_new; its result turns flow_proto_id on or off for the state. */
bool flow_proto_check(lua_State *L);

/* Shared by the C modules (support.c). */
struct luaL_Reg;
/* Lua raises on a failed allocation (lua_push*string, lua_createtable, ...),
 * longjmp-ing past any free: C code that holds heap memory makes its Lua calls
 * protected with these, frees, then raises the error again (lua_error). */
/* Calls fn(L) protected, as Lua 5.1's lua_cpcall did: fn finds ud as a light
 * userdata at index 1 and the nargs values that were on top of the stack at
 * 2..nargs+1.  Returns lua_pcall's status: fn's nresults on top, or the error.
 * Pushing fn and ud allocates nothing (every C function has LUA_MINSTACK free
 * slots for them). */
int flow_cpcall(lua_State *L, lua_CFunction fn, void *ud, int nargs, int nresults);
/* Pushes a copy of s[0..len) and frees s with `release` (free, cJSON_free):
 * s is freed even when the push raises, and that error is raised after. */
void flow_push_owned(lua_State *L, char *s, size_t len, void (*release)(void *));
/* Pushes {v[0], ..., v[n-1]} protected: LUA_OK, or the error on top for the
 * caller to raise once it has freed v. */
int flow_push_string_list(lua_State *L, char *const *v, size_t n);
/* Raise `msg` as it is: no "file:line:" of the C function in front. */
int flow_raise(lua_State *L, const char *msg);
/* Raise a failure of the file system or the disk (not of the script nor of
 * flow): {fs_error = msg}, which prints as msg.  The stdlib reports it as a
 * message, without a traceback (util.is_fs_error). */
int flow_raise_fs(lua_State *L, const char *msg);
/* Field `key` of the table at idx as a string (it stays alive in the table), or NULL. */
const char *flow_field_string(lua_State *L, int idx, const char *key);
/* Whether field `key` of the table at idx is true as Lua has it (neither nil nor
 * false: a `retries = 0` is). */
bool flow_field_bool(lua_State *L, int idx, const char *key);
/* The catalog entry of dataset d (a string at index d) as Catalog:entry
 * finds it without searching the patterns (flow.catalog): pushes exact[d]
 * or, when the catalog has patterns, memo[d] (the tables at exact and memo),
 * or nil for a memory dataset no pattern can match; false, with nothing
 * pushed, when only a search of the patterns can tell. */
bool flow_push_known_entry(lua_State *L, int exact, int memo, int d, bool patterns);
/* The run's values table (values_table.c): dataset d's entry at 1 + its
 * index in the graph, names mapped by the metatable for Lua. */
enum catalog_kind {
    CATALOG_UNNAMED,      /* no exact entry: a memory dataset unless a pattern matches it */
    CATALOG_MEMORY,       /* an exact entry of type memory */
    CATALOG_KEPT,         /* an exact entry the catalog keeps (a file, a datastore) */
};
struct values_keys {
    const struct dag *dag;          /* the graph whose indices key it; NULL: a table by name */
    const unsigned char *kinds;     /* a dataset's enum catalog_kind by index, or NULL */
    bool patterns;                  /* whether the catalog has patterns */
};
/* What C needs of the table at t: its graph, and with `exact` (the stack
 * index of a catalog's exact entries; 0: not asked) the kinds read from
 * them when the table was made for that catalog.  Both live as long as t. */
struct values_keys flow_values_keys(lua_State *L, int t, int exact);
/* Pushes the raw entry of dataset di of graph dag (named `name`) of the
 * table at t: by index when t is that graph's values table, else by name;
 * returns its type. */
int flow_values_get(lua_State *L, int t, const struct dag *dag, size_t di, const char *name);
/* Adds table() and on_miss() to the module table on top (flow.values_c). */
void flow_values_table_open(lua_State *L);
/* A userdata metatable `name` with `methods` as __index and `gc` as __gc. */
void flow_new_class(lua_State *L, const char *name, const struct luaL_Reg *methods, lua_CFunction gc);

/* Nodes as handles on records of declared steps (node_decl.c). */
struct step_decls;
struct step_decl;
/* Registers the stores' class (luaopen_flow_pipeline_c, before any store). */
void flow_open_decls(lua_State *L);
/* Pushes the store node{} adds to (made on first use), and returns it. */
struct step_decls *flow_push_current_decls(lua_State *L);
/* The record behind the node at idx, with its store and id; NULL when idx
 * holds no node.  The pointer is valid until a record is added. */
const struct step_decl *flow_node_decl(lua_State *L, int idx, struct step_decls **decls, uint32_t *id);
/* Pushes the store of the node at idx (flow_node_decl found it one): what
 * keeps its records' strings alive. */
void flow_push_node_store(lua_State *L, int idx);
/* Adds *rec (its lists already in the store) to the store at `decls`, with
 * the body at `body` and the extras table at `extras` (0: none); pushes its
 * node, of class `cls`. */
void flow_node_add(lua_State *L, int decls, const struct step_decl *rec, int body, int extras, int cls);
/* Push the body (function or command) of the node at idx, or its extra
 * field `key` (dist, cmd_params, origin); nil for none or no node.  Return
 * the type pushed. */
int flow_node_push_body(lua_State *L, int idx);
int flow_node_push_extra(lua_State *L, int idx, const char *key);
/* Pushes the table of the Lua strings of the names of the store of the node
 * at idx, by id (made on first use); flow_push_store_names that of the store
 * at `store`, and returns it (nil pushed and NULL for a value that is not a
 * store).  flow_push_name_of pushes name `id` of store d from such a table at
 * `names`, adding it there when it is not yet. */
void flow_push_node_names(lua_State *L, int idx);
struct step_decls *flow_push_store_names(lua_State *L, int store);
void flow_push_name_of(lua_State *L, int names, const struct step_decls *d, uint32_t id);
/* Makes the Node class at cls read its fields from records (__index, with
 * the empty tags list at no_tags) and refuse writes (__newindex). */
void flow_node_class(lua_State *L, int cls, int no_tags);
/* The id of the string at idx in store d; raises when it is not a string
 * without NUL bytes, or past 2^32 - 1 names. */
uint32_t flow_decls_intern(lua_State *L, struct step_decls *d, int idx);
/* The same for s (checked by the caller: no NUL byte), whose strmap_hash is
 * `hash`. */
uint32_t flow_decls_intern_hashed(lua_State *L, struct step_decls *d, const char *s, uint32_t hash);
int flow_l_derive(lua_State *L);
int flow_l_same_decl(lua_State *L);
int flow_l_io_datasets(lua_State *L);
int flow_l_io_names(lua_State *L);
/* name_map.c: a map from the names of a store of declared steps to a number
 * each (a table by name as Lua sees it), kept by name id.  Values are names
 * of the store (read as their strings) or whole numbers.  new pushes an
 * empty map; meet gives it d, the store of the node at `node`, the first
 * time, for a pass over about `steps` steps (a name of another store is
 * looked up in it by its text, or kept in a Lua table when it has none; a
 * store far larger than the pass is not taken: the table holds every name).
 * set_name sets `key` to the name `value` (both of store d), set_integer to
 * the number; has says whether `key` has a value. */
enum name_map_values { NAME_MAP_NAMES, NAME_MAP_INTEGERS };
struct name_map;
struct name_map *flow_name_map_new(lua_State *L, enum name_map_values values);
struct name_map *flow_check_name_map(lua_State *L, int idx);
int flow_l_name_positions(lua_State *L);
void flow_name_map_meet(lua_State *L, int idx, struct name_map *m, const struct step_decls *d, int node,
                        size_t steps);
void flow_name_map_set_name(lua_State *L, int idx, struct name_map *m, const struct step_decls *d, uint32_t key,
                            uint32_t value);
void flow_name_map_set_integer(lua_State *L, int idx, struct name_map *m, const struct step_decls *d, uint32_t key,
                               uint32_t value);
bool flow_name_map_has(lua_State *L, int idx, const struct name_map *m, const struct step_decls *d, uint32_t key);
void flow_open_name_map(lua_State *L);
/* For a pass over the steps nodes[i], i in the list `indices` (the nodes at
 * those slots): pushes the k-th listed node, copies its record into *rec (a
 * copy: a finalizer run by a later Lua call may add records and move the
 * array) and its store into *d, and returns i; raises naming `who` if it is
 * no node. */
lua_Integer flow_push_listed_node(lua_State *L, int nodes, int indices, lua_Integer k, const char *who,
                                  struct step_decls **d, struct step_decl *rec);
/* plain_step.c: functions of flow.values_c (the attempt of a plain Lua step) */
int flow_l_keeps(lua_State *L);
int flow_l_plain_steps(lua_State *L);
int flow_l_plain_attempt(lua_State *L);
int flow_l_plain_done(lua_State *L);
/* command_refs.c */
int flow_l_command_refs(lua_State *L);
/* data_files.c */
int flow_l_data_file_clash(lua_State *L);
int flow_l_has_arg(lua_State *L);
int flow_l_new_store(lua_State *L);

/* flow.cache.state (l_state.c): adds `state` to the module table on top of the stack. */
void flow_open_state_store(lua_State *L);
/* The state store userdata at idx (flow.cache.state), raising if closed:
 * to read (flow_check_state_store), or to change (..._to_change, which
 * first stops the stats of its files taken ahead: they read the store).
 * flow_state_store_take_ahead hands those stats over (NULL: none, or
 * stopped), to the up-to-date check. */
struct state_store;
struct stat_prefetch;
struct state_store *flow_check_state_store(lua_State *L, int idx);
struct state_store *flow_check_state_store_to_change(lua_State *L, int idx);
struct stat_prefetch *flow_state_store_take_ahead(lua_State *L, int idx);
/* The hash cache userdata at idx (flow.cache.hashes), raising if closed. */
struct hashcache;
struct hashcache *flow_check_hashcache(lua_State *L, int idx);

/* flow.cache.preload (l_preload.c): adds `preload` to the module table on
 * top of the stack.  What it read ahead of the state file or the hash cache
 * at path, when it still stands (the caller owns it), or NULL. */
void flow_open_preload(lua_State *L);
struct state_store *flow_preloaded_state(lua_State *L, const char *path, const char **warning,
                                         struct stat_prefetch **ahead);
struct hashcache *flow_preloaded_hashes(lua_State *L, const char *path);
/* Waits for a preload's thread, if one runs (before a chdir). */
void flow_preload_wait(lua_State *L);

/* flow.cache.uptodate (l_uptodate.c): adds `uptodate` to the module table on
 * top of the stack.  flow_check_uptodate: the check at idx (raises if it is
 * not one, or is closed). */
void flow_open_uptodate(lua_State *L);
struct utd;
struct utd *flow_check_uptodate(lua_State *L, int idx);

int luaopen_flow_core(lua_State *L);
int luaopen_flow_dag(lua_State *L);
int luaopen_flow_proc(lua_State *L);
int luaopen_flow_sched(lua_State *L);
int luaopen_flow_config(lua_State *L);
int luaopen_flow_cache(lua_State *L);
int luaopen_flow_pipeline_c(lua_State *L);
int luaopen_flow_values_c(lua_State *L);
int luaopen_flow_azureml(lua_State *L);
int luaopen_flow_repl_c(lua_State *L);
/* The configuration userdata at idx (flow.config), raising if freed. */
struct config;
struct config *flow_check_config(lua_State *L, int idx);
/* Whether the active configuration (flow.config's activate) has a secret to
 * mask: config.has_secrets() of the stdlib. */
bool flow_active_has_secrets(lua_State *L);

#endif
