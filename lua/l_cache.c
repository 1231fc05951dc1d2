/* l_cache.c — module flow.cache: what the runner needs to skip work that is
 * already done and to record work as it finishes.  SHA-256 of strings, a
 * cache of file and tree hashes, the value serializer, an append-only journal
 * synced in the background, and durable moves of outputs into place.
 *
 * Long file work (hashing a large file or a tree, a commit) runs on a work
 * pool thread so that the loop keeps draining every other step's pipes.  On
 * a step's coroutine the step yields until the job's completion, delivered
 * on the loop's thread, resumes it; elsewhere (the scheduler's up-to-date
 * check, a script's top level) the caller waits by running the loop itself. */
#include "flowlua.h"
#include "commit.h"
#include "fingerprint.h"
#include "hash.h"
#include "hashcache.h"
#include "journal.h"
#include "loop.h"
#include "serialize.h"
#include "step_wait.h"
#include "util.h"
#include "work.h"

#include <errno.h>
#include <lauxlib.h>
#include <stdbool.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define HASHCACHE_CLASS "flow.HashCache"
#define JOURNAL_CLASS "flow.Journal"
#define POOL_CLASS "flow.WorkPool"
#define SHA256_PREFIX_CLASS "flow.Sha256Prefix"
#define POOL_THREADS 4

/* ---- sha256 ----------------------------------------------------------------- */

/* sha256(s1, s2, ...) -> hex of the concatenation, each string fed as it is. */
static int l_sha256(lua_State *L)
{
    int n = lua_gettop(L);
    for (int i = 1; i <= n; i++) luaL_checklstring(L, i, NULL);   /* raise before allocating */
    struct hasher *h = hasher_new();
    for (int i = 1; i <= n; i++) {
        size_t len;
        const char *s = lua_tolstring(L, i, &len);
        hasher_update(h, s, len);
    }
    char hex[SHA256_HEX_SIZE];
    hasher_finish(h, hex);
    hasher_free(h);
    lua_pushstring(L, hex);
    return 1;
}

/* sha256_prefix(s1, ...) -> a prefix whose :sha256(t1, ...) is sha256(s1, ..., t1, ...):
 * the prefix is hashed once however many texts continue it (the bytecode
 * that 100,000 closures of one function share, flow.fingerprint).  The
 * userdata owns both hashers from the moment they exist. */
struct sha256_prefix { struct hasher *prefix, *scratch; };

static int l_sha256_prefix(lua_State *L)
{
    int n = lua_gettop(L);
    for (int i = 1; i <= n; i++) luaL_checklstring(L, i, NULL);
    struct sha256_prefix *p = lua_newuserdatauv(L, sizeof *p, 0);
    *p = (struct sha256_prefix){ NULL, NULL };
    luaL_setmetatable(L, SHA256_PREFIX_CLASS);
    p->prefix = hasher_new();
    p->scratch = hasher_new();
    for (int i = 1; i <= n; i++) {
        size_t len;
        const char *s = lua_tolstring(L, i, &len);
        hasher_update(p->prefix, s, len);
    }
    return 1;
}

static int l_prefix_sha256(lua_State *L)
{
    struct sha256_prefix *p = luaL_checkudata(L, 1, SHA256_PREFIX_CLASS);
    int n = lua_gettop(L);
    for (int i = 2; i <= n; i++) luaL_checklstring(L, i, NULL);
    hasher_copy(p->scratch, p->prefix);
    for (int i = 2; i <= n; i++) {
        size_t len;
        const char *s = lua_tolstring(L, i, &len);
        hasher_update(p->scratch, s, len);
    }
    char hex[SHA256_HEX_SIZE];
    hasher_finish(p->scratch, hex);
    lua_pushstring(L, hex);
    return 1;
}

static int l_prefix_gc(lua_State *L)
{
    struct sha256_prefix *p = lua_touserdata(L, 1);
    hasher_free(p->prefix);
    hasher_free(p->scratch);
    p->prefix = p->scratch = NULL;
    return 0;
}

static const luaL_Reg prefix_methods[] = { { "sha256", l_prefix_sha256 }, { NULL, NULL } };

/* ---- the work pool ---------------------------------------------------------- */

static const char pool_key = 'W';  /* its address keys the pool in the registry */

static int l_pool_gc(lua_State *L)
{
    struct work_pool **box = lua_touserdata(L, 1);
    work_pool_free(*box);
    *box = NULL;
    return 0;
}

static const luaL_Reg no_methods[] = { { NULL, NULL } };

/* The pool, started at the first job; NULL if it cannot be (or the state has
 * no loop): the caller then does the work itself. */
static struct work_pool *run_pool(lua_State *L)
{
    lua_rawgetp(L, LUA_REGISTRYINDEX, &pool_key);
    struct work_pool **box = lua_touserdata(L, -1);
    lua_pop(L, 1);
    if (box) return *box;
    struct loop *loop = flow_state_loop(L);
    if (!loop) return NULL;
    box = lua_newuserdatauv(L, sizeof *box, 0);
    *box = NULL;
    luaL_setmetatable(L, POOL_CLASS);
    *box = work_pool_new(loop, POOL_THREADS, NULL, 0);
    if (*box) lua_rawsetp(L, LUA_REGISTRYINDEX, &pool_key);
    else lua_pop(L, 1);
    return *box;
}

/* ---- hash cache ------------------------------------------------------------- */

struct hashcache *flow_check_hashcache(lua_State *L, int idx)
{
    struct hashcache **box = luaL_checkudata(L, idx, HASHCACHE_CLASS);
    if (!*box) luaL_error(L, "the hash cache is closed");
    return *box;
}

/* hashes(path) -> HashCache (a missing or damaged file is an empty cache) */
static int l_hashes(lua_State *L)
{
    const char *path = luaL_checkstring(L, 1);
    struct hashcache **box = lua_newuserdatauv(L, sizeof *box, 0);
    *box = NULL;
    luaL_setmetatable(L, HASHCACHE_CLASS);
    if (!(*box = flow_preloaded_hashes(L, path))) *box = hashcache_load(path);
    return 1;
}

/* What the loop's thread hashes itself (hashcache.h has the measurements);
 * anything longer goes to the pool. */
#define HASH_INLINE_MAX HASHCACHE_LOOP_MAX_READ
#define HASH_INLINE_ENTRIES HASHCACHE_LOOP_MAX_ENTRIES
/* How often a hash outside a step (the up-to-date check, waiting by running
 * the loop) looks for Ctrl-C, to cut the read short. */
#define HASH_CANCEL_LOOK_S 0.1

/* A userdata on the waiting stack, as a commit_job (below): no __gc; the
 * HashCache and the path stay on that stack until the job is done. */
struct hash_wait {
    struct hashcache_job job;
    struct loop *loop;
    bool done;                     /* set on the loop's thread */
    lua_State *co;                 /* the step waiting for it, or NULL */
    struct step_wait wait;         /* what that step waits on (hash_wait_ops) */
};

/* Stopping a step stops its hash at the next block read (either mode: a
 * read cannot be stopped more forcibly); the completion still runs. */
static void hash_wait_cancel(struct step_wait *sw, enum cancel_mode mode)
{
    (void)mode;
    struct hash_wait *w = (struct hash_wait *)((char *)sw - offsetof(struct hash_wait, wait));
    atomic_store(&w->job.cancel, true);
}

static void hash_wait_free(struct step_wait *sw) { (void)sw; }   /* owned by its userdata */

static const struct step_wait_ops hash_wait_ops = { "hash", hash_wait_cancel, hash_wait_free };

static int push_hash(lua_State *L, int rc, const char *hex, enum hash_kind kind, const char *err)
{
    if (rc != 0) {
        lua_pushnil(L);
        lua_pushstring(L, err);
        return 2;
    }
    lua_pushstring(L, hex);
    lua_pushstring(L, kind == HASH_KIND_FILE ? "file" : "directory");
    return 2;
}

static void hash_done(void *arg)
{
    struct hash_wait *w = arg;
    w->done = true;
    lua_State *co = w->co;
    if (!co) return;
    w->co = NULL;
    flow_step_wake(co, &w->wait);
}

static int hash_continue(lua_State *L, int status, lua_KContext ctx)
{
    (void)status;
    struct hash_wait *w = (struct hash_wait *)ctx;
    return push_hash(L, w->job.rc, w->job.hex, w->job.kind, w->job.err);
}

/* Outside a step: wait by running the loop, which goes on draining pipes and
 * resuming steps, until the completion arrives; Ctrl-C cuts the read short. */
static int hash_block(lua_State *L, struct hash_wait *w)
{
    int interrupts = loop_interrupts(w->loop);
    while (!w->done) {
        loop_run_once(w->loop, HASH_CANCEL_LOOK_S);
        if (loop_interrupts(w->loop) != interrupts) atomic_store(&w->job.cancel, true);
    }
    return push_hash(L, w->job.rc, w->job.hex, w->job.kind, w->job.err);
}

/* hc:file(path) -> hex, "file" | "directory"  or  nil, message
 * A cached hash or a small file is answered at once; anything longer is
 * read on the pool while the loop runs on. */
static int l_hc_file(lua_State *L)
{
    struct hashcache *hc = flow_check_hashcache(L, 1);
    const char *path = luaL_checkstring(L, 2);
    char hex[SHA256_HEX_SIZE], err[1024];
    enum hash_kind kind;
    int rc = hashcache_hash_cheap(hc, path, HASH_INLINE_MAX, HASH_INLINE_ENTRIES, hex, &kind, err, sizeof err);
    if (rc <= 0) return push_hash(L, rc, hex, kind, err);
    struct hash_wait *w = lua_newuserdatauv(L, sizeof *w, 0);
    *w = (struct hash_wait){ .job = { .hc = hc, .path = path } };
    atomic_init(&w->job.cancel, false);
    struct work_pool *pool = run_pool(L);
    if (!pool || work_submit(pool, hashcache_job_run, hash_done, w, NULL, 0) != 0) {
        hashcache_job_run(w);                /* no thread to be had: here, then */
        return push_hash(L, w->job.rc, w->job.hex, w->job.kind, w->job.err);
    }
    w->loop = flow_state_loop(L);
    if (!flow_step_can_yield(L)) return hash_block(L, w);
    w->co = L;
    step_wait_init(&w->wait, &hash_wait_ops);
    flow_step_wait(L, &w->wait);
    return lua_yieldk(L, 0, (lua_KContext)w, hash_continue);
}

/* hc:save(): writes the cache if it changed; raises on failure */
static int l_hc_save(lua_State *L)
{
    char err[1024];
    if (hashcache_save(flow_check_hashcache(L, 1), err, sizeof err) != 0) return flow_raise_fs(L, err);
    return 0;
}

/* hc:prune() -> number of entries dropped */
static int l_hc_prune(lua_State *L)
{
    lua_pushinteger(L, (lua_Integer)hashcache_prune(flow_check_hashcache(L, 1)));
    return 1;
}

static int l_hc_gc(lua_State *L)
{
    struct hashcache **box = luaL_checkudata(L, 1, HASHCACHE_CLASS);
    hashcache_free(*box);
    *box = NULL;
    return 0;
}

static const luaL_Reg hashcache_methods[] = {
    { "file", l_hc_file },
    { "save", l_hc_save },
    { "prune", l_hc_prune },
    { NULL, NULL }
};

/* ---- serializer ------------------------------------------------------------- */

/* serialize(v [, max_len]) -> "return <expr>"  or  nil, message (also when
 * the text would take more than max_len bytes) */
static int l_serialize(lua_State *L)
{
    luaL_checkany(L, 1);
    lua_Integer max = luaL_optinteger(L, 2, 0);
    luaL_argcheck(L, max >= 0, 2, "a length");
    lua_settop(L, 1);
    if (flow_serialize_max(L, 1, (size_t)max)) return 1;
    lua_pushnil(L);
    lua_insert(L, -2);
    return 2;
}

/* deserialize(text, name) -> value; raises "NAME:..." */
static int l_deserialize(lua_State *L)
{
    size_t len;
    const char *text = luaL_checklstring(L, 1, &len);
    const char *name = luaL_optstring(L, 2, "serialized value");
    if (flow_deserialize(L, text, len, name)) return 1;
    return lua_error(L);
}

/* ---- journal ---------------------------------------------------------------- */

static struct journal **journal_box(lua_State *L)
{
    return luaL_checkudata(L, 1, JOURNAL_CLASS);
}

struct journal *flow_check_journal(lua_State *L, int idx)
{
    struct journal *j = *(struct journal **)luaL_checkudata(L, idx, JOURNAL_CLASS);
    if (!j) luaL_error(L, "the journal is closed");
    return j;
}

struct work_pool *flow_work_pool(lua_State *L)
{
    return run_pool(L);
}

/* journal(path) -> Journal, opened for appending; raises on failure */
static int l_journal(lua_State *L)
{
    const char *path = luaL_checkstring(L, 1);
    struct journal **box = lua_newuserdatauv(L, sizeof *box, 0);
    *box = NULL;
    luaL_setmetatable(L, JOURNAL_CLASS);
    char err[1024];
    if (!(*box = journal_open(path, err, sizeof err))) return flow_raise_fs(L, err);
    return 1;
}

/* j:append(line [, note]): one write, a sync requested but not waited for;
 * with note, a line that need not be durable on its own (not synced until one that must be) */
static int l_journal_append(lua_State *L)
{
    struct journal *j = flow_check_journal(L, 1);
    size_t len;
    const char *line = luaL_checklstring(L, 2, &len);
    char err[1024];
    int rc = journal_append(j, line, len, !lua_toboolean(L, 3), err, sizeof err);
    if (rc != 0) return flow_raise_fs(L, err);
    return 0;
}

/* j:sync(), below with the pool's jobs */
static int l_journal_sync(lua_State *L);

/* j:close(): sync, stop the syncer, close; a second close does nothing */
static int l_journal_close(lua_State *L)
{
    struct journal **box = journal_box(L);
    if (!*box) return 0;
    char err[1024];
    int rc = journal_close(*box, err, sizeof err);
    *box = NULL;
    return rc != 0 ? flow_raise_fs(L, err) : 0;
}

/* A finalizer cannot report: the journal is closed all the same. */
static int l_journal_gc(lua_State *L)
{
    struct journal **box = journal_box(L);
    if (*box) journal_close(*box, NULL, 0);
    *box = NULL;
    return 0;
}

static const luaL_Reg journal_methods[] = {
    { "append", l_journal_append },
    { "sync", l_journal_sync },
    { "close", l_journal_close },
    { NULL, NULL }
};

/* ---- commit ----------------------------------------------------------------- */

/* On a step's coroutine the commit runs on a pool thread and the step yields
 * until the completion, delivered on the loop's thread, resumes it.  Ctrl-C
 * does not cut the wait short: a commit in flight always finishes (it is
 * bounded) before the step sees the interruption. */

/* A userdata on the waiting coroutine's stack: no __gc, and Lua frees object
 * memory only after every finalizer ran, the pool's (which joins its threads)
 * included — a pool thread never writes into freed memory. */
struct commit_job {
    const char *staging, *final;   /* the Lua strings stay on the coroutine's stack */
    struct journal *sync;          /* or: wait until this journal is on disk */
    int rc;
    char err[1024];
    bool copy;                     /* cache.copy: copy_tree instead of commit_output_unsynced */
    bool done;                     /* set on the loop's thread */
    lua_State *co;                 /* the step waiting for it, or NULL */
    struct step_wait wait;         /* what that step waits on (step_wait_job_ops) */
};

static void commit_run(void *arg)
{
    struct commit_job *job = arg;
    if (job->sync) {
        job->rc = journal_sync(job->sync, job->err, sizeof job->err);      /* safe from any thread */
        return;
    }
    job->rc = job->copy ? copy_tree(job->staging, job->final, job->err, sizeof job->err)
                        : commit_output_unsynced(job->staging, job->final, job->err, sizeof job->err);
}

static void commit_done(void *arg)
{
    struct commit_job *job = arg;
    job->done = true;
    lua_State *co = job->co;
    if (!co) return;
    job->co = NULL;
    flow_step_wake(co, &job->wait);
}

static int commit_result(lua_State *L, struct commit_job *job)
{
    if (job->rc != 0) return flow_raise_fs(L, job->err);
    return 0;
}

static int commit_wait(lua_State *L, struct commit_job *job);

static int commit_continue(lua_State *L, int status, lua_KContext ctx)
{
    (void)status;
    return commit_wait(L, (struct commit_job *)ctx);
}

static int commit_wait(lua_State *L, struct commit_job *job)
{
    if (job->done) return commit_result(L, job);
    job->co = L;
    step_wait_init(&job->wait, &step_wait_job_ops);
    flow_step_wait(L, &job->wait);
    return lua_yieldk(L, 0, (lua_KContext)job, commit_continue);
}

/* commit(staging, final) / copy(from, final): staging (a file or a tree)
 * replaces final — or a copy of `from` does, leaving it as it was — not yet
 * durably: the step's end, journaled by engine/step.c, flushes it first
 * (group commit).  Raises "cannot move STAGING to FINAL: reason", final
 * untouched. */
static int commit_or_copy(lua_State *L, bool copy)
{
    const char *staging = luaL_checkstring(L, 1), *final = luaL_checkstring(L, 2);
    /* most outputs are one rename: made here, without a pool thread's round trip */
    if (!copy && commit_output_by_rename(staging, final)) return 0;
    struct commit_job *job = lua_newuserdatauv(L, sizeof *job, 0);
    *job = (struct commit_job){ .staging = staging, .final = final, .copy = copy };
    struct work_pool *pool = flow_step_can_yield(L) ? run_pool(L) : NULL;
    if (pool && work_submit(pool, commit_run, commit_done, job, NULL, 0) == 0)
        return commit_wait(L, job);
    commit_run(job);                          /* outside a step, or no thread to be had */
    return commit_result(L, job);
}

static int l_commit(lua_State *L) { return commit_or_copy(L, false); }

/* copy(src, dst): src (a file or a tree) copied to dst, which must not exist,
 * on the work pool as commit is; raises "cannot …: reason". */
static int l_copy(lua_State *L) { return commit_or_copy(L, true); }

/* j:sync(): returns once everything appended is on disk (raises a
 * file-system error if it cannot be).  A step waits for it on the pool, so
 * the loop goes on, and the journal's syncer folds many steps' waits into
 * one fdatasync (an Azure ML job's name is synced before its PUT). */
static int l_journal_sync(lua_State *L)
{
    struct journal *j = flow_check_journal(L, 1);
    struct commit_job *job = lua_newuserdatauv(L, sizeof *job, 0);
    *job = (struct commit_job){ .sync = j };
    struct work_pool *pool = flow_step_can_yield(L) ? run_pool(L) : NULL;
    if (pool && work_submit(pool, commit_run, commit_done, job, NULL, 0) == 0)
        return commit_wait(L, job);
    commit_run(job);
    return commit_result(L, job);
}

/* stat(path) -> size, mtime (seconds, float), "file" | "directory" | "other"
 * or nil, message */
static int l_stat(lua_State *L)
{
    const char *path = luaL_checkstring(L, 1);
    struct stat st;
    if (stat(path, &st) != 0) {
        lua_pushnil(L);
        lua_pushfstring(L, "%s: %s", path, strerror(errno));
        return 2;
    }
    lua_pushinteger(L, (lua_Integer)st.st_size);
    lua_pushnumber(L, (lua_Number)st.st_mtim.tv_sec + (lua_Number)st.st_mtim.tv_nsec / 1e9);
    lua_pushstring(L, S_ISREG(st.st_mode) ? "file" : S_ISDIR(st.st_mode) ? "directory" : "other");
    return 3;
}

/* realpath(path) -> the path with symbolic links, "." and ".." resolved, or
 * nil, message: where an output really is, before it is moved into place. */
static int l_realpath(lua_State *L)
{
    const char *path = luaL_checkstring(L, 1);
    char real[PATH_MAX];                 /* not malloc'd: pushing it may raise */
    if (!realpath(path, real)) {
        lua_pushnil(L);
        lua_pushfstring(L, "%s: %s", path, strerror(errno));
        return 2;
    }
    lua_pushstring(L, real);
    return 1;
}

/* ---- fingerprints ------------------------------------------------------------ */

/* The map parts[field] ({key = hash}) into kv (room for n); returns how many. */
static size_t read_map(lua_State *L, int parts, const char *field, struct fp_kv **out)
{
    *out = NULL;
    if (lua_getfield(L, parts, field) != LUA_TTABLE) { lua_pop(L, 1); return 0; }
    int t = lua_gettop(L);
    size_t n = 0;
    for (lua_pushnil(L); lua_next(L, t); lua_pop(L, 1)) n++;
    /* a userdata, so that a bad entry below raises without a leak; left on the stack */
    struct fp_kv *kv = lua_newuserdatauv(L, (n ? n : 1) * sizeof *kv, 0);
    size_t i = 0;
    for (lua_pushnil(L); lua_next(L, t); lua_pop(L, 1)) {
        if (lua_type(L, -2) != LUA_TSTRING || lua_type(L, -1) != LUA_TSTRING)
            luaL_error(L, "fingerprint parts: %s maps names to hashes (strings)", field);
        struct fp_kv *e = &kv[i++];                      /* the strings are held by the table */
        e->key.s = lua_tolstring(L, -2, &e->key.len);
        e->value.s = lua_tolstring(L, -1, &e->value.len);
    }
    *out = kv;
    return n;
}

/* fp_combine(parts) -> fingerprint (engine/fingerprint.c: the one rule) */
static int l_fp_combine(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    struct fp_parts p = { 0 };
    static const char *const names[] = { "code", "dist", "outputs" };
    struct fp_str *fields[] = { &p.code, &p.dist, &p.outputs };
    for (int k = 0; k < 3; k++) {
        int t = lua_getfield(L, 1, names[k]);
        if (t == LUA_TSTRING) fields[k]->s = lua_tolstring(L, -1, &fields[k]->len);
        else if (t != LUA_TNIL || k != 1) return luaL_error(L, "fingerprint parts: %s is a string", names[k]);
        lua_pop(L, 1);                               /* the string stays alive: it is in the table */
    }
    p.n_files = read_map(L, 1, "files", &p.files);
    p.n_params = read_map(L, 1, "params", &p.params);
    p.n_inputs = read_map(L, 1, "inputs", &p.inputs);
    char hex[SHA256_HEX_SIZE];
    fp_combine(&p, hex);
    lua_pushstring(L, hex);
    return 1;
}

static const luaL_Reg cache_funcs[] = {
    { "fp_combine", l_fp_combine },
    { "sha256", l_sha256 },
    { "sha256_prefix", l_sha256_prefix },
    { "hashes", l_hashes },
    { "serialize", l_serialize },
    { "deserialize", l_deserialize },
    { "journal", l_journal },
    { "commit", l_commit },
    { "copy", l_copy },
    { "stat", l_stat },
    { "realpath", l_realpath },
    { NULL, NULL }
};

int luaopen_flow_cache(lua_State *L)
{
    flow_new_class(L, HASHCACHE_CLASS, hashcache_methods, l_hc_gc);
    flow_new_class(L, JOURNAL_CLASS, journal_methods, l_journal_gc);
    flow_new_class(L, POOL_CLASS, no_methods, l_pool_gc);
    flow_new_class(L, SHA256_PREFIX_CLASS, prefix_methods, l_prefix_gc);
    luaL_newlib(L, cache_funcs);
    lua_pushinteger(L, FP_SHORT);             /* fingerprint.short's length: one constant */
    lua_setfield(L, -2, "FP_SHORT");
    flow_open_state_store(L);
    flow_open_preload(L);
    flow_open_uptodate(L);
    return 1;
}
