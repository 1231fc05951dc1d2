/* l_core.c — module flow.core: the small file-system, JSON and template
 * primitives the stdlib is written with. */
#include "flowlua.h"
#include "suggest.h"
#include "duration.h"
#include "nofollow.h"
#include "template.h"
#include "json_text.h"
#include "loop.h"
#include "proctree.h"
#include "reaper.h"
#include "ui.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <lauxlib.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>


static int l_json_encode(lua_State *L)
{
    char err[512];
    luaL_checkany(L, 1);
    cJSON *j = lua_to_json(L, 1, err, sizeof err);
    if (!j) { lua_pushnil(L); lua_pushstring(L, err); return 2; }
    flow_push_json_text(L, j, lua_toboolean(L, 2));
    return 1;
}

/* number_text(n) -> n as tostring writes it, but with every digit that
 * matters: an integer exactly, a float as the shortest text that reads back
 * as the same double (tostring's %.14g turns 0.1 + 0.2 into "0.3") */
static int l_number_text(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TNUMBER);
    double d = lua_tonumber(L, 1);
    if (lua_isinteger(L, 1) || !isfinite(d)) {       /* tostring is exact for these */
        lua_pushstring(L, luaL_tolstring(L, 1, NULL));
        return 1;
    }
    char buf[40];
    lua_pushstring(L, json_format_float(d, buf));      /* still reads as a float, as tostring's does */
    return 1;
}

/* json_list(t) -> t, encoded as a JSON array even when it is empty */
static int l_json_list(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_settop(L, 1);
    luaL_setmetatable(L, "flow.json_list");
    return 1;
}

static int l_json_decode(lua_State *L)
{
    size_t len;
    const char *s = luaL_checklstring(L, 1, &len);
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(s, len, &end, 0);
    if (!j) {
        lua_pushnil(L);
        lua_pushfstring(L, "invalid JSON near byte %d", (int)(end ? end - s : 0));
        return 2;
    }
    flow_push_json_tree(L, j);         /* deletes j, even if a push raises */
    return 1;
}

/* template_expand holds C memory while it calls back, so the Lua function runs
 * protected; an error it raises stays on the stack and is raised again once
 * template_expand has freed what it held. */
struct lua_lookup { lua_State *L; bool raised; };

/* (fn, ns, key as light userdata) -> fn's two results, a message made a string here */
static int call_lookup(lua_State *L)
{
    const char *ns = lua_touserdata(L, 2), *key = lua_touserdata(L, 3);
    lua_settop(L, 1);
    lua_pushstring(L, ns);
    lua_pushstring(L, key);
    lua_call(L, 2, 2);
    if (lua_type(L, -1) == LUA_TNUMBER) lua_tostring(L, -1);
    return 2;
}

static int lookup_via_lua(void *ctx, const char *ns, const char *key, struct strbuf *out,
                          char *err, size_t errlen)
{
    struct lua_lookup *lk = ctx;
    lua_State *L = lk->L;
    /* Nothing here allocates outside the protected call: a light C function,
     * a copy of a stack slot, two light userdata. */
    lua_pushcfunction(L, call_lookup);
    lua_pushvalue(L, 2);
    lua_pushlightuserdata(L, (void *)ns);
    lua_pushlightuserdata(L, (void *)key);
    if (lua_pcall(L, 3, 2, 0) != LUA_OK) {
        lk->raised = true;
        return -1;
    }
    int rc = 0;
    if (lua_type(L, -2) == LUA_TSTRING) sb_adds(out, lua_tostring(L, -2));
    else {
        errf(err, errlen, "%s", lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "unknown reference");
        rc = -1;
    }
    lua_pop(L, 2);
    return rc;
}

/* expand(template, function(ns, key) -> string | nil, err) */
static int l_expand(lua_State *L)
{
    const char *tmpl = luaL_checkstring(L, 1);
    luaL_checktype(L, 2, LUA_TFUNCTION);
    lua_settop(L, 2);
    char err[1024];
    struct lua_lookup lk = { L, false };
    char *s = template_expand(tmpl, lookup_via_lua, &lk, err, sizeof err);
    if (lk.raised) return lua_error(L);          /* the function's own error, on top */
    if (!s) { lua_pushnil(L); lua_pushstring(L, err); return 2; }
    flow_push_owned(L, s, strlen(s), free);
    return 1;
}

struct ref { const char *ns, *key; };

/* (ref, list): appends {ns, key} to list */
static int append_ref(lua_State *L)
{
    const struct ref *r = lua_touserdata(L, 1);
    lua_createtable(L, 2, 0);
    lua_pushstring(L, r->ns);
    lua_rawseti(L, -2, 1);
    lua_pushstring(L, r->key);
    lua_rawseti(L, -2, 2);
    lua_rawseti(L, 2, (lua_Integer)lua_rawlen(L, 2) + 1);
    return 0;
}

/* template_each_ref holds a copy of the key while it calls back: the pushes
 * run protected, and an error stays on top until l_template_refs raises it. */
struct ref_list { lua_State *L; bool raised; };

static int collect_ref(void *ctx, const char *ns, const char *key)
{
    struct ref_list *refs = ctx;
    lua_State *L = refs->L;
    struct ref r = { ns, key };
    lua_pushvalue(L, -1);                          /* the list */
    if (flow_cpcall(L, append_ref, &r, 1, 0) == LUA_OK) return 0;
    refs->raised = true;
    return -1;
}

/* template_refs(template) -> {{ns, key}, ...}[, error], parsed exactly as expand
 * does; a malformed template yields the references before the error and the
 * error itself, so a pipeline can be checked before anything runs. */
static int l_template_refs(lua_State *L)
{
    const char *tmpl = luaL_checkstring(L, 1);
    char err[512];
    lua_settop(L, 1);
    lua_newtable(L);
    struct ref_list refs = { L, false };
    if (template_each_ref(tmpl, collect_ref, &refs, err, sizeof err) == 0) return 1;
    if (refs.raised) return lua_error(L);
    lua_pushstring(L, err);
    return 2;
}

/* write_atomic, mkdir_p, remove_tree, symlink and lock are for flow's own
 * files under .flow/: they never follow a symbolic link (nofollow.h), and a
 * failure raises a file-system error (flow_raise_fs). */
static int l_write_atomic(lua_State *L)
{
    const char *path = luaL_checkstring(L, 1);
    size_t len;
    const char *data = luaL_checklstring(L, 2, &len);
    char err[1024];
    if (nofollow_write_atomic(path, data, len, err, sizeof err) != 0) return flow_raise_fs(L, err);
    return 0;
}

/* open_write(path[, append]) -> file | nil, message.  A file under .flow/
 * (a staging output, a Lua step's print log) opened for writing without
 * following a link anywhere on its path (nofollow.h): a link a step planted
 * there fails the open, naming the path.  file:write(s) and file:close() go
 * straight to write(2)/close(2) and return true or nil, message, so a full
 * disk or a file-size limit is seen at the write that met it. */
struct wfile { int fd; };

static int l_open_write(lua_State *L)
{
    const char *path = luaL_checkstring(L, 1);
    int flags = O_WRONLY | O_CREAT | (lua_toboolean(L, 2) ? O_APPEND : O_TRUNC);
    char err[1024];
    struct wfile *f = lua_newuserdatauv(L, sizeof *f, 0);
    f->fd = -1;
    luaL_setmetatable(L, "flow.WFile");
    f->fd = nofollow_open(path, flags, 0644, err, sizeof err);
    if (f->fd < 0) { lua_pushnil(L); lua_pushstring(L, err); return 2; }
    return 1;
}

static int wfile_write(lua_State *L)
{
    struct wfile *f = luaL_checkudata(L, 1, "flow.WFile");
    size_t len;
    const char *s = luaL_checklstring(L, 2, &len);
    if (f->fd < 0) return luaL_error(L, "write to a closed file");
    while (len > 0) {
        ssize_t n = write(f->fd, s, len);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            int e = n < 0 ? errno : EIO;
            lua_pushnil(L);
            lua_pushfstring(L, "%s%s", strerror(e), errno_hint(e));
            return 2;
        }
        s += n;
        len -= (size_t)n;
    }
    lua_pushboolean(L, 1);
    return 1;
}

static int wfile_close(lua_State *L)
{
    struct wfile *f = luaL_checkudata(L, 1, "flow.WFile");
    int fd = f->fd;
    f->fd = -1;
    if (fd >= 0 && close(fd) != 0 && errno != EINTR) {
        int e = errno;
        lua_pushnil(L);
        lua_pushfstring(L, "%s%s", strerror(e), errno_hint(e));
        return 2;
    }
    lua_pushboolean(L, 1);
    return 1;
}

static int wfile_gc(lua_State *L)
{
    struct wfile *f = luaL_checkudata(L, 1, "flow.WFile");
    if (f->fd >= 0) close(f->fd);
    f->fd = -1;
    return 0;
}

static int l_read_file(lua_State *L)
{
    size_t len;
    char *s = read_file(luaL_checkstring(L, 1), &len);
    if (!s) { lua_pushnil(L); lua_pushstring(L, strerror(errno)); return 2; }
    flow_push_owned(L, s, len, free);
    return 1;
}

static int l_mkdir_p(lua_State *L)
{
    char err[1024];
    if (nofollow_mkdir_p(luaL_checkstring(L, 1), 0755, err, sizeof err) != 0) return flow_raise_fs(L, err);
    return 0;
}

/* exists(path) -> "directory", "file" (a regular one), "other" (a FIFO, a
 * device, a socket) or nil; links followed */
static int l_exists(lua_State *L)
{
    struct stat st;
    if (stat(luaL_checkstring(L, 1), &st) != 0) lua_pushnil(L);
    else lua_pushstring(L, S_ISDIR(st.st_mode) ? "directory" : S_ISREG(st.st_mode) ? "file" : "other");
    return 1;
}

static int l_remove_tree(lua_State *L)
{
    char err[1024];
    if (nofollow_remove_tree(luaL_checkstring(L, 1), err, sizeof err) != 0) return flow_raise_fs(L, err);
    return 0;
}

static int l_safe_name(lua_State *L)
{
    size_t len;
    const char *name = luaL_checklstring(L, 1, &len);
    if (safe_file_name_is_itself(name, len)) {      /* most names: no copy */
        lua_settop(L, 1);
        return 1;
    }
    char *s = safe_file_name(name);
    flow_push_owned(L, s, strlen(s), free);
    return 1;
}

static int l_time(lua_State *L)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    lua_pushnumber(L, (double)ts.tv_sec + (double)ts.tv_nsec / 1e9);
    return 1;
}

/* run_id(runs_dir) -> a new run's id, its directory runs_dir/<id> created.
 * The id sorts by time (20261122-031500-123456-1: UTC to the microsecond,
 * then a counter); it is unique because mkdir() made its directory, so two
 * runs in the same microsecond, or a clock set back, take the next counter. */
static int l_run_id(lua_State *L)
{
    static unsigned long counter;      /* one process, many flow.run calls */
    const char *dir = luaL_checkstring(L, 1);
    char err[1024];
    /* Under .flow/: made and opened without following a link (nofollow.h). */
    if (nofollow_mkdir_p(dir, 0755, err, sizeof err) != 0) return flow_raise_fs(L, err);
    int dfd = nofollow_open(dir, O_RDONLY | O_DIRECTORY, 0, err, sizeof err);
    if (dfd < 0) return flow_raise_fs(L, err);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char stamp[32], id[64];
    strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
    int e = EEXIST;
    for (int tries = 0; tries < 1000 && e == EEXIST; tries++) {
        snprintf(id, sizeof id, "%s-%06ld-%lu", stamp, ts.tv_nsec / 1000, ++counter);
        e = mkdirat(dfd, id, 0755) == 0 ? 0 : errno;
    }
    close(dfd);
    if (e == 0) {
        lua_pushstring(L, id);
        return 1;
    }
    if (e == EEXIST) errf(err, sizeof err, "cannot find a free run id in %s", dir);
    else errf(err, sizeof err, "cannot create directory %s/%s: %s", dir, id, strerror(e));
    return flow_raise_fs(L, err);
}

/* symlink(target, path): path becomes a link to target, replaced atomically */
static int l_symlink(lua_State *L)
{
    const char *target = luaL_checkstring(L, 1), *link = luaL_checkstring(L, 2);
    char err[1024];
    if (nofollow_symlink(target, link, err, sizeof err) != 0) return flow_raise_fs(L, err);
    return 0;
}

static int l_cpu_count(lua_State *L)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    lua_pushinteger(L, n > 0 ? n : 1);
    return 1;
}

/* A TCP port free on 127.0.0.1 now (the kernel picks it), for MASTER_PORT and
 * TF_CONFIG.  As torchrun does; a small race remains until the job binds it. */
static int l_free_port(lua_State *L)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = 0 };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
        if (fd >= 0) close(fd);
        return luaL_error(L, "cannot find a free port: %s", strerror(errno));
    }
    close(fd);
    lua_pushinteger(L, ntohs(a.sin_port));
    return 1;
}

/* closest(word, candidates) -> the candidate "did you mean" suggests, or nil:
 * engine/suggest.c's rule, the one every message of flow uses. */
static int l_closest(lua_State *L)
{
    const char *word = luaL_checkstring(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    lua_Integer n = (lua_Integer)lua_rawlen(L, 2);
    const char **words = lua_newuserdatauv(L, (size_t)n * sizeof *words + 1, 0);   /* the GC frees it */
    size_t count = 0;
    for (lua_Integer i = 1; i <= n; i++) {
        if (lua_rawgeti(L, 2, i) == LUA_TSTRING) words[count++] = lua_tostring(L, -1);   /* alive in the table */
        lua_pop(L, 1);
    }
    const char *best = closest_word(word, words, count);
    if (best) lua_pushstring(L, best);
    else lua_pushnil(L);
    return 1;
}

/* parse_duration(text [, allow_zero]) -> seconds, or nil (duration.h: the one rule) */
static int l_parse_duration(lua_State *L)
{
    double seconds;
    if (!duration_parse(luaL_checkstring(L, 1), lua_toboolean(L, 2), &seconds)) return 0;
    if (seconds < 9e15 && seconds == (double)(lua_Integer)seconds) lua_pushinteger(L, (lua_Integer)seconds);   /* "90m" is 5400 */
    else lua_pushnumber(L, seconds);
    return 1;
}

/* code(f [, strings]) -> f's bytecode without debug information or line
 * numbers (nil for a C function) [, the list of its string constants] */
static int l_code(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TFUNCTION);
    int n = flow_push_code(L, 1, lua_toboolean(L, 2));
    if (n == 0) lua_pushnil(L);
    return n ? n : 1;
}

/* proto_id(f) -> a light userdata naming the prototype f was made from (one
 * for all closures of one function expression), or nil: a C function, or
 * the state's self-check of the closure layout failed (proto.c) */
static int l_proto_id(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TFUNCTION);
    const void *id = flow_proto_id(L, 1);
    if (id) lua_pushlightuserdata(L, (void *)id);
    else lua_pushnil(L);
    return 1;
}

/* readlink(path) -> target, or nil if path is not a symlink */
static int l_readlink(lua_State *L)
{
    char buf[4096];
    ssize_t n = readlink(luaL_checkstring(L, 1), buf, sizeof buf);
    if (n < 0 || n == (ssize_t)sizeof buf) { lua_pushnil(L); return 1; }
    lua_pushlstring(L, buf, (size_t)n);
    return 1;
}

/* open_files(want) -> how many files this process may have open: the soft
 * limit, raised towards `want` as far as the hard limit allows.  Raised
 * only as far as asked, since the children inherit it. */
static int l_open_files(lua_State *L)
{
    lua_Integer want = luaL_checkinteger(L, 1);
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return luaL_error(L, "getrlimit: %s", strerror(errno));
    if (want > 0 && (rlim_t)want > rl.rlim_cur && rl.rlim_cur != RLIM_INFINITY) {
        struct rlimit raised = rl;
        raised.rlim_cur = rl.rlim_max == RLIM_INFINITY || (rlim_t)want < rl.rlim_max ? (rlim_t)want : rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &raised) == 0) rl = raised;
    }
    lua_pushinteger(L, rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur > (rlim_t)LUA_MAXINTEGER
                       ? LUA_MAXINTEGER : (lua_Integer)rl.rlim_cur);
    return 1;
}

/* The running binary, so a distributed Lua step can start its ranks. */
static int l_exe_path(lua_State *L)
{
    char buf[4096];
    ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (n < 0) return luaL_error(L, "cannot find the flow binary: %s", strerror(errno));
    lua_pushlstring(L, buf, (size_t)n);
    return 1;
}

/* list_dir(path [, listed_file]) -> sorted names (no "." or ".."), less
 * those listed_file holds (a name a line), or nil, message */
static int l_list_dir(lua_State *L)
{
    const char *path = luaL_checkstring(L, 1), *listed = luaL_optstring(L, 2, NULL);
    size_t n;
    char **names = dir_list_unlisted(path, listed, &n);
    if (!names) { lua_pushnil(L); lua_pushfstring(L, "%s: %s", path, strerror(errno)); return 2; }
    int rc = flow_push_string_list(L, names, n);
    dir_list_free(names, n);
    if (rc != LUA_OK) return lua_error(L);
    return 1;
}

/* sort_bytes(list): sorts a list of strings in place, bytewise (NUL bytes
 * and all; a prefix first), whatever the C library's collation: the order
 * of a step's output parts in its fingerprint, which the engine's check
 * (lua/uptodate_describe.c) sorts the same way. */
struct sort_item { const char *s; size_t len; int at; };

static int compare_sort_items(const void *a, const void *b)
{
    const struct sort_item *x = a, *y = b;
    return bytes_compare(x->s, x->len, y->s, y->len);
}

static int l_sort_bytes(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_Integer n = luaL_len(L, 1);
    luaL_argcheck(L, n >= 0 && n < 1000000, 1, "too many strings");
    luaL_checkstack(L, (int)n + 1, "sort_bytes");
    struct sort_item *v = lua_newuserdatauv(L, ((size_t)n + 1) * sizeof *v, 0);     /* collected: nothing leaks */
    int base = lua_gettop(L);
    for (lua_Integer i = 1; i <= n; i++) {
        if (lua_rawgeti(L, 1, i) != LUA_TSTRING) return luaL_error(L, "sort_bytes: item %d is not a string", (int)i);
        v[i - 1].s = lua_tolstring(L, -1, &v[i - 1].len);    /* held on the stack */
        v[i - 1].at = base + (int)i;
    }
    if (n > 1) qsort(v, (size_t)n, sizeof *v, compare_sort_items);
    for (lua_Integer i = 1; i <= n; i++) {
        lua_pushvalue(L, v[i - 1].at);
        lua_rawseti(L, 1, i);
    }
    return 0;
}

/* lock(path) -> true | false, holder text.  An exclusive flock on path, held
 * until the process exits (the kernel drops it even after kill -9) and its
 * reaper with it; the file holds the holder's pid for the message another
 * process shows. */
#define LOCK_WAIT_TRIES 150           /* 15 s: the reaper's 5 s grace, and then some */
static int lock_fd = -1;              /* lock()'s, held until unlock() or the end */

/* Whether process pid is gone: no such process, or a zombie (killed, its
 * parent yet to reap it). */
static bool process_gone(long pid)
{
    if (pid <= 0) return false;
    if (kill((pid_t)pid, 0) != 0) return errno == ESRCH;
    char state;
    pid_t ppid, pgid;
    return proctree_stat((pid_t)pid, &state, &ppid, &pgid) && state == 'Z';
}

static int l_lock(lua_State *L)
{
    const char *path = luaL_checkstring(L, 1);
    char err[1024];
    int fd = nofollow_open(path, O_RDWR | O_CREAT, 0644, err, sizeof err);
    if (fd < 0) return flow_raise_fs(L, err);
    /* A holder that is gone (killed) leaves its lock to its reaper until the
     * steps it left are stopped (reaper_hold: 5 s at most): waited for. */
    for (int tries = 0; flock(fd, LOCK_EX | LOCK_NB) != 0; tries++) {
        char buf[64] = "";
        ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
        buf[n > 0 ? n : 0] = 0;
        long holder = strtol(buf, NULL, 10);
        /* (Ctrl-C ends the wait: the loop's signal descriptor holds it) */
        if (!process_gone(holder) || tries == LOCK_WAIT_TRIES || loop_interrupts(flow_state_loop(L)) > 0) {
            close(fd);
            lua_pushboolean(L, 0);
            lua_pushstring(L, buf);
            return 2;
        }
        if (tries == 0) ui_info("waiting for the steps of a flow run that was killed (pid %ld) to stop", holder);
        struct timespec tick = { 0, 100 * 1000 * 1000 };
        nanosleep(&tick, NULL);
    }
    char pid[32];
    int len = snprintf(pid, sizeof pid, "%ld", (long)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)len, 0) != len) { /* the pid is only for messages */ }
    reaper_hold(fd);                 /* and as long as its reaper, after a kill -9 */
    lock_fd = fd;
    lua_pushboolean(L, 1);           /* fd stays open: the lock lives as long as the process */
    return 1;
}

/* unlock(): the lock lock() took released, for the reaper's copy too (one
 * open file: flock's lock is the open file's). */
static int l_unlock(lua_State *L)
{
    (void)L;
    if (lock_fd >= 0) {
        flock(lock_fd, LOCK_UN);
        close(lock_fd);
        lock_fd = -1;
    }
    return 0;
}

static int l_cwd(lua_State *L)
{
    char buf[4096];
    if (!getcwd(buf, sizeof buf)) return luaL_error(L, "getcwd: %s", strerror(errno));
    lua_pushstring(L, buf);
    return 1;
}

static int l_chdir(lua_State *L)
{
    const char *dir = luaL_checkstring(L, 1);
    flow_preload_wait(L);           /* its thread reads relative to the working directory */
    if (chdir(dir) != 0) return luaL_error(L, "cannot change to %s: %s", dir, strerror(errno));
    return 0;
}

/* load_script(path, display_name) -> chunk | nil, "file:line: message".
 * The chunk name is pushed before the file is read: no C memory is held
 * across a Lua call that can raise (flow_load_buffer's load runs protected). */
static int l_load_script(lua_State *L)
{
    const char *path = luaL_checkstring(L, 1);
    const char *display = luaL_optstring(L, 2, path);
    const char *chunkname = lua_pushfstring(L, "@%s", display);
    size_t len;
    char err[1024];
    char *buf = flow_read_script(path, display, &len, err, sizeof err);
    if (!buf) {
        lua_pushnil(L);
        lua_pushstring(L, err);
        return 2;
    }
    int rc = flow_load_buffer(L, buf, len, chunkname);
    free(buf);
    if (rc == LUA_OK) return 1;
    lua_pushnil(L);
    lua_insert(L, -2);
    return 2;
}

/* load_text(text, chunkname) -> chunk | nil, "file:line: message": Lua's
 * load("t") of a project source through the reader require, dofile and
 * loadfile use, so `distributed_job<…>` compiles as it does when the file runs. */
static int l_load_text(lua_State *L)
{
    size_t len;
    const char *text = luaL_checklstring(L, 1, &len);
    const char *chunkname = luaL_checkstring(L, 2);
    if (flow_load_buffer(L, text, len, chunkname) == LUA_OK) return 1;
    lua_pushnil(L);
    lua_insert(L, -2);
    return 2;
}

static int l_ui_error(lua_State *L) { ui_error("%s", luaL_checkstring(L, 1)); return 0; }
static int l_ui_warn(lua_State *L) { ui_warn("%s", luaL_checkstring(L, 1)); return 0; }
static int l_ui_info(lua_State *L) { ui_info("%s", luaL_checkstring(L, 1)); return 0; }

/* How many SIGINT/SIGTERM arrived: a step killed after one was stopped, not failed. */
static int l_interrupted(lua_State *L)
{
    lua_pushinteger(L, loop_interrupts(flow_state_loop(L)));
    return 1;
}

/* ui_setup(level, progress): level quiet|normal|verbose, progress auto|live|plain */
static int l_ui_setup(lua_State *L)
{
    static const char *const levels[] = { "quiet", "normal", "verbose", NULL };
    static const char *const modes[] = { "auto", "live", "plain", NULL };
    ui_init((enum ui_level)luaL_checkoption(L, 1, "normal", levels),
            (enum ui_progress)luaL_checkoption(L, 2, "auto", modes));
    return 0;
}

/* ui_set_json(on): --log-format json (ui.h) */
static int l_ui_set_json(lua_State *L)
{
    ui_set_json(lua_toboolean(L, 1));
    return 0;
}

/* ui_level() -> "quiet" | "normal" | "verbose", as ui_setup left it */
static int l_ui_level(lua_State *L)
{
    static const char *const names[] = { [UI_QUIET] = "quiet", [UI_NORMAL] = "normal", [UI_VERBOSE] = "verbose" };
    lua_pushstring(L, names[ui_level()]);
    return 1;
}

/* ui_print(text): stdout text that keeps clear of the live display */
static int l_ui_print(lua_State *L)
{
    size_t len;
    const char *s = luaL_checklstring(L, 1, &len);
    ui_stdout(s, len);
    return 0;
}

static const luaL_Reg core_funcs[] = {
    { "load_script", l_load_script },
    { "load_text", l_load_text },
    { "loaded_source", flow_l_loaded_source },
    { "ui_error", l_ui_error },
    { "ui_warn", l_ui_warn },
    { "ui_info", l_ui_info },
    { "ui_setup", l_ui_setup },
    { "ui_set_json", l_ui_set_json },
    { "ui_print", l_ui_print },
    { "ui_level", l_ui_level },
    { "interrupted", l_interrupted },
    { "json_encode", l_json_encode },
    { "number_text", l_number_text },
    { "json_decode", l_json_decode },
    { "json_list", l_json_list },
    { "expand", l_expand },
    { "template_refs", l_template_refs },
    { "write_atomic", l_write_atomic },
    { "read_file", l_read_file },
    { "open_write", l_open_write },
    { "mkdir_p", l_mkdir_p },
    { "exists", l_exists },
    { "remove_tree", l_remove_tree },
    { "safe_name", l_safe_name },
    { "time", l_time },
    { "run_id", l_run_id },
    { "symlink", l_symlink },
    { "cpu_count", l_cpu_count },
    { "cwd", l_cwd },
    { "exe_path", l_exe_path },
    { "free_port", l_free_port },
    { "chdir", l_chdir },
    { "list_dir", l_list_dir },
    { "sort_bytes", l_sort_bytes },
    { "lock", l_lock },
    { "unlock", l_unlock },
    { "readlink", l_readlink },
    { "open_files", l_open_files },
    { "code", l_code },
    { "proto_id", l_proto_id },
    { "closest", l_closest },
    { "parse_duration", l_parse_duration },
    { NULL, NULL }
};

int luaopen_flow_core(lua_State *L)
{
    luaL_newlib(L, core_funcs);
    static const luaL_Reg wfile_methods[] = { { "write", wfile_write }, { "close", wfile_close }, { NULL, NULL } };
    flow_new_class(L, "flow.WFile", wfile_methods, wfile_gc);
    flow_push_json_null(L);
    lua_setfield(L, -2, "json_null");
    luaL_newmetatable(L, "flow.json_list");
    lua_pushliteral(L, "array");
    lua_setfield(L, -2, "__json");
    lua_pop(L, 1);
    return 1;
}
