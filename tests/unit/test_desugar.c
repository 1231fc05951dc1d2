/* test_desugar.c — the distributed_job<...> rewrite: exact output for each form,
 * line breaks kept, and every result checked by the real Lua 5.4 parser. */
#include "check.h"
#include "desugar.h"

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include <stdint.h>
#include <stdlib.h>
#include <time.h>

/* ---------- helpers ---------- */

static size_t count_char(const char *s, size_t len, char c)
{
    size_t k = 0;
    for (size_t i = 0; i < len; i++) k += s[i] == c;
    return k;
}

/* Line breaks as Lua counts them: "\r\n" and "\n\r" are one. */
static size_t lua_breaks(const char *s, size_t len)
{
    size_t k = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] != '\n' && s[i] != '\r') continue;
        if (i + 1 < len && (s[i + 1] == '\n' || s[i + 1] == '\r') && s[i + 1] != s[i]) i++;
        k++;
    }
    return k;
}

/* Compiles with the real parser; on failure copies Lua's message into msg. */
static int lua_loads(const char *s, size_t len, char *msg, size_t msglen)
{
    lua_State *L = luaL_newstate();
    int ok = luaL_loadbuffer(L, s, len, "=test") == LUA_OK;
    if (!ok && msg) snprintf(msg, msglen, "%s", lua_tostring(L, -1));
    lua_close(L);
    return ok;
}

/* Desugars src and checks what holds for every successful rewrite: the same
 * number of '\n' and of Lua line breaks. Returns the output or NULL. */
static char *desugar_ok(const char *src, size_t len, size_t *out_len)
{
    int line = -1;
    char err[256];
    char *out = desugar_chunk(src, len, out_len, &line, err, sizeof err);
    CHECK(out != NULL);
    if (!out) {
        fprintf(stderr, "    unexpected error at line %d: %s\n", line, err);
        return NULL;
    }
    CHECK(strlen(out) == *out_len || memchr(src, '\0', len));
    CHECK(count_char(out, *out_len, '\n') == count_char(src, len, '\n'));
    CHECK(count_char(out, *out_len, '\r') == count_char(src, len, '\r'));
    CHECK(lua_breaks(out, *out_len) == lua_breaks(src, len));
    return out;
}

/* EXPECT(src, want): exact output, lines kept, and Lua can load the output. */
#define EXPECT(src, want) expect(__LINE__, (src), (want), 1)
/* EXPECT_RAW: the same, for outputs that are not meant to load. */
#define EXPECT_RAW(src, want) expect(__LINE__, (src), (want), 0)

static void expect(int at, const char *src, const char *want, int must_load)
{
    int before = check_cur_failed;
    size_t len = 0;
    char msg[512];
    char *out;
    check_cur_failed = 0;
    out = desugar_ok(src, strlen(src), &len);
    if (out) {
        CHECK_STR(out, want);
        if (must_load && !lua_loads(out, len, msg, sizeof msg)) {
            check_cur_failed = 1;
            fprintf(stderr, "    Lua rejects the output: %s\n", msg);
        }
    }
    if (check_cur_failed) fprintf(stderr, "    (case at line %d)\n", at);
    check_cur_failed |= before;
    free(out);
}

/* EXPECT_ERROR(src, line, text): desugaring fails at that line with that message. */
#define EXPECT_ERROR(src, line, text) expect_error(__LINE__, (src), (line), (text))

static void expect_error(int at, const char *src, int want_line, const char *want_msg)
{
    int before = check_cur_failed, line = -1;
    size_t len = 12345;
    char err[256] = "untouched";
    char *out;
    check_cur_failed = 0;
    out = desugar_chunk(src, strlen(src), &len, &line, err, sizeof err);
    CHECK(out == NULL);
    CHECK(len == 12345);
    CHECK(line == want_line);
    CHECK_CONTAINS(err, want_msg);
    if (check_cur_failed) fprintf(stderr, "    got line %d: %s\n    (case at line %d)\n", line, err, at);
    check_cur_failed |= before;
    free(out);
}

/* ---------- form 1: distributed_job<...>(fn) ---------- */

static void test_plain_annotation(void)
{
    EXPECT("distributed_job<framework=\"pytorch\", nodes=4>(fn)",
           "distributed_job{framework=\"pytorch\", nodes=4}(fn)");
    EXPECT("local j = flow.distributed_job<nodes=2>(fn)",
           "local j = flow.distributed_job{nodes=2}(fn)");
    EXPECT("local j = distributed_job<>(fn)", "local j = distributed_job{}(fn)");
    EXPECT("distributed_job <nodes=1>(fn)", "distributed_job {nodes=1}(fn)");
    EXPECT("x = a .. distributed_job<nodes=1>(fn)", "x = a .. distributed_job{nodes=1}(fn)");
    EXPECT("jobs = { distributed_job<nodes=1>(a), distributed_job<nodes=2>(b) }",
           "jobs = { distributed_job{nodes=1}(a), distributed_job{nodes=2}(b) }");
}

static void test_multiline_annotation(void)
{
    EXPECT("distributed_job<\n  framework = \"pytorch\",\n  nodes = 4,\n>(fn)\nx = 1\n",
           "distributed_job{\n  framework = \"pytorch\",\n  nodes = 4,\n}(fn)\nx = 1\n");
    EXPECT("distributed_job\n\n<nodes=1>(fn)", "distributed_job\n\n{nodes=1}(fn)");
    EXPECT("distributed_job<\r\n  nodes = 4\r\n>(fn)\r\n", "distributed_job{\r\n  nodes = 4\r\n}(fn)\r\n");
}

static void test_nested_brackets(void)
{
    EXPECT("distributed_job<nodes=f(1,{2}), hosts={\"a\",\"b\"}, first=t[1]>(fn)",
           "distributed_job{nodes=f(1,{2}), hosts={\"a\",\"b\"}, first=t[1]}(fn)");
    /* '>' inside brackets and '>=' do not close the annotation */
    EXPECT("distributed_job<big=(n > 4), ok=n >= 2, t={a > b}, u=v[x > y]>(fn)",
           "distributed_job{big=(n > 4), ok=n >= 2, t={a > b}, u=v[x > y]}(fn)");
    /* an annotation inside another one's arguments */
    EXPECT("distributed_job<setup=distributed_job<nodes=1>(f)>(g)",
           "distributed_job{setup=distributed_job{nodes=1}(f)}(g)");
}

static void test_strings_in_annotation(void)
{
    EXPECT("distributed_job<a=\">\", b='\\'>', c=\"\\\">\", d='distributed_job<x'>(fn)",
           "distributed_job{a=\">\", b='\\'>', c=\"\\\">\", d='distributed_job<x'}(fn)");
    EXPECT("distributed_job<script=[==[ a > b ]] ]=] ]==], x=[[>]]>(fn)",
           "distributed_job{script=[==[ a > b ]] ]=] ]==], x=[[>]]}(fn)");
    /* "\z" skips the line break after it; "\<newline>" is an escaped break */
    EXPECT("distributed_job<s=\"a\\z\n   >b\", t=\"c\\\n>d\", u=\"e\\\r\n>\">(fn)",
           "distributed_job{s=\"a\\z\n   >b\", t=\"c\\\n>d\", u=\"e\\\r\n>\"}(fn)");
}

static void test_comments_in_annotation(void)
{
    EXPECT("distributed_job<nodes=4, -- more > than one\n  gpus=8 --[[ > ]]>(fn)",
           "distributed_job{nodes=4, -- more > than one\n  gpus=8 --[[ > ]]}(fn)");
    EXPECT("distributed_job<nodes=4 --[==[ >\n ]] ]==]\n>(fn)",
           "distributed_job{nodes=4 --[==[ >\n ]] ]==]\n}(fn)");
}

static void test_untouched_code(void)
{
    static const char *const same[] = {
        "s = \"distributed_job<x>\" .. 'distributed_job<y> function f()'",
        "s = [[distributed_job<x>]] .. [=[distributed_job<y ]] >]=] .. [==[\n]==]",
        "-- distributed_job<x> function f()\n--[==[ distributed_job<y>\n]] ]==] x = 1",
        "--[[distributed_job<]] x = 1 --[=[\n>]=]",
        "ok = distributed_job <= 3 or distributed_job<<1 == 2",
        "ok = my_distributed_job<x and distributed_jobs<y and x.my_distributed_job<z",
        "local distributed_job <const> = flow.distributed_job",
        "local a <close>, distributed_job <const> = nil, 1",
        "x = 0x1p4 + 3e-2 + .5 > 1e+3 and a[1] > 2",
        "",
    };
    for (size_t i = 0; i < sizeof same / sizeof *same; i++) EXPECT(same[i], same[i]);
}

static void test_unfinished_outside(void)
{
    /* not our error: copied through for Lua's parser to report */
    EXPECT_RAW("x = \"abc\ny = distributed_job<n=1>(f)", "x = \"abc\ny = distributed_job{n=1}(f)");
    EXPECT_RAW("x = [==[ abc ]=] distributed_job<n=1>", "x = [==[ abc ]=] distributed_job<n=1>");
    EXPECT_RAW("x = 1 --[[ distributed_job<n=1>", "x = 1 --[[ distributed_job<n=1>");
    EXPECT_RAW("distributed_job<n=1> function f --[[ open", "distributed_job{n=1} function f --[[ open");
    EXPECT_RAW("x = 'abc\\", "x = 'abc\\");
}

/* ---------- form 2: decorated functions ---------- */

static void test_named_function(void)
{
    EXPECT("distributed_job<framework=\"pytorch\", nodes=4> function train(a, b) return a + b end",
           "train = distributed_job{framework=\"pytorch\", nodes=4} .. function(a, b) return a + b end");
    EXPECT("distributed_job<nodes=1> function M.sub.train(a) end",
           "M.sub.train = distributed_job{nodes=1} .. function(a) end");
    EXPECT("flow.distributed_job<nodes=1> function f() end",
           "f = flow.distributed_job{nodes=1} .. function() end");
    EXPECT("a.b:distributed_job<nodes=1> function f(...) end",
           "f = a.b:distributed_job{nodes=1} .. function(...) end");
    EXPECT("distributed_job<n=1>function f()end", "f = distributed_job{n=1}.. function()end");
    EXPECT("x = 1; distributed_job<n=1> function f() end",
           "x = 1; f = distributed_job{n=1} .. function() end");
}

static void test_local_function(void)
{
    EXPECT("distributed_job<nodes=2> local function train(a) return train end",
           "local train; train = distributed_job{nodes=2} .. function(a) return train end");
    EXPECT("flow.distributed_job<nodes=2>\nlocal --[[why]] function train()\nend",
           "local train; train = flow.distributed_job{nodes=2}\n .. function()\nend");
}

static void test_method(void)
{
    EXPECT("distributed_job<nodes=1> function M:train(a) end",
           "M.train = distributed_job{nodes=1} .. function(self, a) end");
    EXPECT("distributed_job<nodes=1> function M.sub:train() end",
           "M.sub.train = distributed_job{nodes=1} .. function(self) end");
    EXPECT("distributed_job<nodes=1> function M:train( ) end",
           "M.train = distributed_job{nodes=1} .. function(self ) end");
    EXPECT("distributed_job<nodes=1> function M:train(\n  a,\n  b\n) end",
           "M.train = distributed_job{nodes=1} .. function(self, \n  a,\n  b\n) end");
    EXPECT("distributed_job<nodes=1> function M:train(\n) end",
           "M.train = distributed_job{nodes=1} .. function(self\n) end");
    EXPECT("distributed_job<n=1> function M . sub --[[c]] : train (a) end",
           "M.sub.train = distributed_job{n=1} .. function(self, a) end");
}

static void test_anonymous_function(void)
{
    EXPECT("local f = distributed_job<nodes=2> function(x) return x end",
           "local f = distributed_job{nodes=2} .. function(x) return x end");
    EXPECT("return distributed_job<nodes=2>\n  function\n(x) end",
           "return distributed_job{nodes=2}\n  .. function\n(x) end");
    EXPECT("f = distributed_job<setup = distributed_job<n=1> function(x) end> function() end",
           "f = distributed_job{setup = distributed_job{n=1} .. function(x) end} .. function() end");
}

static void test_not_a_declaration(void)
{
    /* after the '>' but not a function: form 1 */
    EXPECT("distributed_job<n=1> local x = 1", "distributed_job{n=1} local x = 1");
    EXPECT("distributed_job<n=1>\nfunction_table = 1", "distributed_job{n=1}\nfunction_table = 1");
    EXPECT("distributed_job<n=1> localf = 1", "distributed_job{n=1} localf = 1");
}

static void test_multiline_declaration(void)
{
    EXPECT("flow.distributed_job<\n"
           "  framework = \"pytorch\",\n"
           "  nodes = 4,\n"
           "> -- four nodes\n"
           "local function train(\n"
           "  a, b)\n"
           "end\n",
           "local train; train = flow.distributed_job{\n"
           "  framework = \"pytorch\",\n"
           "  nodes = 4,\n"
           "} -- four nodes\n"
           " .. function(\n"
           "  a, b)\n"
           "end\n");
    EXPECT("distributed_job<n=1>\nfunction\n  train\n  (a) end",
           "train = distributed_job{n=1}\n.. function\n \n (a) end");
    EXPECT("distributed_job<\r\n  n=1\r\n>\r\nlocal\r\nfunction f()\r\nend\r\n",
           "local f; f = distributed_job{\r\n  n=1\r\n}\r\n \r\n.. function()\r\nend\r\n");
    /* "\n" and "\r" on two lines stay two breaks when the text between goes */
    EXPECT("distributed_job<n=1> local\n--x\rfunction f() end",
           "local f; f = distributed_job{n=1} \n \r.. function() end");
    EXPECT("distributed_job<n=1> function M.\r--[[\n]]\nf() end",
           "M.f = distributed_job{n=1} .. function\r \n \n () end");
}

static void test_shebang(void)
{
    EXPECT("#!/usr/bin/env flow\ndistributed_job<n=1> function f() end\n",
           "--#!/usr/bin/env flow\nf = distributed_job{n=1} .. function() end\n");
    EXPECT("#!/usr/bin/env flow", "--#!/usr/bin/env flow");
    EXPECT("#!x [[\nx = 1", "--#!x [[\nx = 1");
    EXPECT_RAW("x = 1\n#!/not/first", "x = 1\n#!/not/first");
}

/* ---------- errors ---------- */

static void test_unterminated(void)
{
    const char *u = "unterminated distributed_job<...> annotation (no matching '>')";
    EXPECT_ERROR("x = 1\n\ndistributed_job<nodes=4\nfunction f() end\n", 3, u);
    EXPECT_ERROR("x = 1\ndistributed_job\n\n<nodes=4", 2, u);
    EXPECT_ERROR("distributed_job<name=\"abc\n>(f)", 1, u);
    EXPECT_ERROR("x = 1\r\n\r\ndistributed_job<s=[[abc>", 3, u);
    EXPECT_ERROR("distributed_job<--[==[ > ]=]\n>", 1, u);
    EXPECT_ERROR("distributed_job<s='\\z   \n\n   '\n", 1, u);
    EXPECT_ERROR("distributed_job<a=distributed_job<x>", 1, u);
    EXPECT_ERROR("distributed_job<a=1,\n distributed_job<x", 2, u);
    /* a bracket opened before the '<' cannot close inside the annotation */
    EXPECT_ERROR("f(distributed_job < x)\nif a > b then end", 1, u);
    EXPECT_ERROR("distributed_job<", 1, u);
}

static void test_bad_declaration(void)
{
    const char *name = "expected a function name after distributed_job<...>";
    const char *paren = "expected '(' after the function name";
    EXPECT_ERROR("distributed_job<n=1> local function(x) end", 1, name);
    EXPECT_ERROR("distributed_job<n=1>\nfunction 1() end", 2, name);
    EXPECT_ERROR("distributed_job<n=1> function end() end", 1, name);
    EXPECT_ERROR("distributed_job<n=1> function M.\n(x) end", 2, name);
    EXPECT_ERROR("distributed_job<n=1> function M:(x) end", 1, name);
    EXPECT_ERROR("distributed_job<n=1> function", 1, name);
    EXPECT_ERROR("distributed_job<n=1> function M:a.b(x) end", 1, paren);
    EXPECT_ERROR("distributed_job<n=1> local function M.f(x) end", 1, paren);
    EXPECT_ERROR("distributed_job<n=1> function f\n\nx", 3, paren);
    EXPECT_ERROR("x = 1\nt[1].distributed_job<n=1> function f() end", 2, "needs a plain name");
    EXPECT_ERROR("f().distributed_job<n=1> function g() end", 1, "needs a plain name");
}

static void test_too_deep(void)
{
    char src[4096] = "x = 1\n";
    for (int i = 0; i < 40; i++) strcat(src, "distributed_job<a=");
    EXPECT_ERROR(src, 2, "nested too deeply");
}

static void test_error_buffers(void)
{
    int line = 0;
    char small[8];
    size_t len = 0;
    char *out = desugar_chunk("distributed_job<", 16, &len, &line, small, sizeof small);
    CHECK(out == NULL && line == 1);
    CHECK_STR(small, "untermi");
    CHECK(desugar_chunk("distributed_job<", 16, NULL, NULL, NULL, 0) == NULL);
    out = desugar_chunk(NULL, 0, &len, NULL, NULL, 0);
    CHECK(out != NULL && len == 0);
    if (out) CHECK_STR(out, "");
    free(out);
}

/* Only len bytes are read: no NUL needed, NULs inside are copied. */
static void test_explicit_length(void)
{
    static const char src[] = "f(distributed_job<n=1>)\0distributed_job<";
    size_t len = 0;
    char *out = desugar_chunk(src, sizeof src - 1, &len, NULL, NULL, 0);
    CHECK(out == NULL);
    out = desugar_chunk(src, 23, &len, NULL, NULL, 0);
    CHECK(out != NULL && len == 23);
    if (out) CHECK_STR(out, "f(distributed_job{n=1})");
    free(out);
    out = desugar_chunk("x = '\0' distributed_job<n=1>(f)", 31, &len, NULL, NULL, 0);
    CHECK(out != NULL && len == 31);
    if (out) CHECK(memcmp(out, "x = '\0' distributed_job{n=1}(f)", 31) == 0);
    free(out);
}

/* ---------- the real Lua ---------- */

/* A syntax error after a multi-line annotation is reported on the user's line. */
static void test_lua_syntax_error_line(void)
{
    const char *src =
        "local x = 1\n"             /* 1 */
        "distributed_job<\n"        /* 2 */
        "  framework = \"jax\",\n"  /* 3 */
        "  nodes = 4,\n"            /* 4 */
        ">\n"                       /* 5 */
        "local function step(\n"    /* 6 */
        "  a, b)\n"                 /* 7 */
        "  return a +\n"            /* 8 */
        "end\n";                    /* 9: unexpected symbol near 'end' */
    size_t len;
    char msg[512] = "";
    char *out = desugar_ok(src, strlen(src), &len);
    CHECK(out && !lua_loads(out, len, msg, sizeof msg));
    CHECK_CONTAINS(msg, ":9:");
    free(out);

    src = "distributed_job<nodes = 1,\n  bad = = 2>(f)\n";
    out = desugar_ok(src, strlen(src), &len);
    msg[0] = '\0';
    CHECK(out && !lua_loads(out, len, msg, sizeof msg));
    CHECK_CONTAINS(msg, ":2:");
    free(out);
}

static const char PRELUDE[] =
    "calls = {}\n"
    "function distributed_job(opts)\n"
    "  return setmetatable({ opts = opts }, {\n"
    "    __concat = function(self, fn)\n"
    "      return setmetatable({ fn = fn, opts = self.opts }, {\n"
    "        __call = function(job, ...)\n"
    "          calls[#calls + 1] = job.opts.nodes\n"
    "          return job.fn(...)\n"
    "        end })\n"
    "    end,\n"
    "    __call = function(self, fn) return self .. fn end })\n"
    "end\n";

static const char JOBS[] =
    "distributed_job<framework = \"pytorch\",\n"                          /* 1 */
    "                nodes = 4>\n"                                        /* 2 */
    "function train(a, b)\n"                                              /* 3 */
    "  return a + b\n"                                                    /* 4 */
    "end\n"                                                               /* 5 */
    "distributed_job<nodes = 2> local function fact(n)\n"                 /* 6 */
    "  if n <= 1 then return 1 end\n"                                     /* 7 */
    "  return n * fact(n - 1)\n"                                          /* 8 */
    "end\n"                                                               /* 9 */
    "M = { k = 3 }\n"                                                     /* 10 */
    "distributed_job<nodes = 8>\n"                                        /* 11 */
    "function M:scale(x) return self.k * x end\n"                         /* 12 */
    "local plain = distributed_job<nodes = 1>(function(x) return -x end)\n" /* 13 */
    "result = train(1, 2) + fact(4) + M:scale(2) + plain(5)\n"            /* 14 */
    "fact_ref = fact\n"                                                   /* 15 */
    "train_line = debug.getinfo(train.fn, 'S').linedefined\n"             /* 16 */
    "scale_line = debug.getinfo(M.scale.fn, 'S').linedefined\n"           /* 17 */
    "distributed_job<\n"                                                  /* 18 */
    "  nodes = 16\n"                                                      /* 19 */
    ">\n"                                                                 /* 20 */
    "function fail_here()\n"                                              /* 21 */
    "  error('boom')\n"                                                   /* 22 */
    "end\n";                                                              /* 23 */

static lua_Integer global_int(lua_State *L, const char *name)
{
    lua_Integer v;
    lua_getglobal(L, name);
    v = lua_tointeger(L, -1);
    lua_pop(L, 1);
    return v;
}

/* The decorated functions really are wrapped, called through the wrapper and
 * defined on the lines the user wrote them. */
static void test_lua_runtime(void)
{
    lua_State *L = luaL_newstate();
    size_t len;
    char *out = desugar_ok(JOBS, sizeof JOBS - 1, &len);
    luaL_openlibs(L);
    CHECK(luaL_dostring(L, PRELUDE) == LUA_OK);
    if (!out) { lua_close(L); return; }
    if (luaL_loadbuffer(L, out, len, "=jobs") != LUA_OK || lua_pcall(L, 0, 0, 0) != LUA_OK) {
        CHECK(!"jobs chunk runs");
        fprintf(stderr, "    %s\n", lua_tostring(L, -1));
    } else {
        CHECK(global_int(L, "result") == 3 + 24 + 6 - 5);
        CHECK(luaL_dostring(L, "n = 0 for _, v in ipairs(calls) do n = n + v end "
                               "count = #calls") == LUA_OK);
        CHECK(global_int(L, "count") == 1 + 4 + 1 + 1);     /* fact recursed through the wrapper */
        CHECK(global_int(L, "n") == 4 + 2 * 4 + 8 + 1);
        CHECK(luaL_dostring(L, "wrapped = type(train) == 'table' and type(fact_ref) == 'table'"
                               " and type(M.scale) == 'table' and train.opts.framework == 'pytorch'"
                               " and 1 or 0") == LUA_OK);
        CHECK(global_int(L, "wrapped") == 1);
        CHECK(global_int(L, "train_line") == 3);
        CHECK(global_int(L, "scale_line") == 12);
        lua_getglobal(L, "fail_here");
        CHECK(lua_pcall(L, 0, 0, 0) != LUA_OK);
        CHECK_CONTAINS(lua_tostring(L, -1), "jobs:22: boom");
        CHECK(global_int(L, "n") == 21);
    }
    lua_close(L);
    free(out);
}

/* ---------- robustness and speed ---------- */

static uint32_t rng_state = 12345;

static uint32_t rng(void)
{
    rng_state = rng_state * 1103515245u + 12345u;
    return rng_state >> 16;
}

/* Random token soup: no crash (ASan watches), lines kept, errors well-formed,
 * and text without an annotation comes back unchanged. */
static void test_fuzz(void)
{
    static const char *const bits[] = {
        "distributed_job", "distributed_job<", "<", ">", "<=", ">=", "<<", "(", ")", "{", "}",
        "[", "]", "[[", "]]", "[=[", "]=]", "--", "--[[", "\"", "'", "\\", "\\z", "\n", "\r",
        " ", "function", "local", "f", ".", ":", "..", "x", "=", ",", "1", "#", "0x", "e-", "const",
    };
    char src[1024], err[128];
    int bad = 0;
    for (int iter = 0; iter < 20000 && !bad; iter++) {
        size_t len = 0, out_len = 0;
        int line = -1, parts = (int)(rng() % 40);
        char *out;
        for (int i = 0; i < parts; i++) {
            const char *b = bits[rng() % (sizeof bits / sizeof *bits)];
            size_t k = strlen(b);
            memcpy(src + len, b, k);
            len += k;
        }
        src[len] = '\0';
        out = desugar_chunk(src, len, &out_len, &line, err, sizeof err);
        if (out) {
            bad |= count_char(out, out_len, '\n') != count_char(src, len, '\n');
            bad |= lua_breaks(out, out_len) != lua_breaks(src, len);
            if (!strstr(src, "distributed_job") && src[0] != '#')
                bad |= out_len != len || memcmp(out, src, len) != 0;
        } else {
            bad |= line < 1 || (size_t)line > lua_breaks(src, len) + 1 || err[0] == '\0';
        }
        if (bad) fprintf(stderr, "    fuzz case failed: [%s] -> [%s]\n", src, out ? out : err);
        free(out);
    }
    CHECK(!bad);
}

static const char UNIT[] =
    "-- distributed_job<not this> comment\n"
    "s = \"distributed_job<not this>\" .. [==[ long ]] ]==]\n"
    "distributed_job<framework=\"pytorch\", nodes=f(1,{2}),\n"
    "  tags = { \"a>b\" }>\n"
    "function M.train(a, b)\n"
    "  return a > b and a or b\n"
    "end\n"
    "x = distributed_job<nodes=1>(function() end)\n";

/* 10 MB of annotated code: time the rewrite alone, then check it. */
static void test_big_chunk(void)
{
    size_t unit = sizeof UNIT - 1, reps = 10 * 1024 * 1024 / unit + 1, len = 0, out_len = 0;
    size_t growth = strlen("M.train = ") + strlen(".. ") - strlen(" M.train");
    char *src = malloc(reps * unit + 32), *out, msg[256] = "";
    clock_t t0;
    double secs;
    CHECK(src != NULL);
    if (!src) return;
    memcpy(src, "M = {} f = print\n", 17);
    len = 17;
    for (size_t i = 0; i < reps; i++, len += unit) memcpy(src + len, UNIT, unit);
    t0 = clock();
    out = desugar_chunk(src, len, &out_len, NULL, NULL, 0);
    secs = (double)(clock() - t0) / CLOCKS_PER_SEC;
    printf("  desugared %.1f MB in %.3f s\n", (double)len / (1024 * 1024), secs);
    CHECK(secs < 2.0);          /* about 0.05 s optimised, a few times that under ASan */
    free(out);
    out = desugar_ok(src, len, &out_len);
    CHECK(out_len == len + reps * growth);
    CHECK(out && lua_loads(out, out_len, msg, sizeof msg));
    if (msg[0]) fprintf(stderr, "    %s\n", msg);
    free(out);
    free(src);
}

/* One annotation 10 MB long, and 10 MB of annotations inside one: still linear. */
static void test_big_annotation(void)
{
    static const char inner[] = "distributed_job<n=1>(f), ";
    size_t k = strlen(inner), reps = 10 * 1024 * 1024 / k, len = 0, out_len = 0;
    char *src = malloc(reps * k + 64), *out;
    clock_t t0 = clock();
    CHECK(src != NULL);
    if (!src) return;
    len = (size_t)sprintf(src, "x = distributed_job<a={");
    for (size_t i = 0; i < reps; i++, len += k) memcpy(src + len, inner, k);
    len += (size_t)sprintf(src + len, "}>(g)");
    out = desugar_ok(src, len, &out_len);
    CHECK(out && out_len == len);
    CHECK((double)(clock() - t0) / CLOCKS_PER_SEC < 5.0);
    free(out);
    free(src);
}

int main(void)
{
    RUN(test_plain_annotation);
    RUN(test_multiline_annotation);
    RUN(test_nested_brackets);
    RUN(test_strings_in_annotation);
    RUN(test_comments_in_annotation);
    RUN(test_untouched_code);
    RUN(test_unfinished_outside);
    RUN(test_named_function);
    RUN(test_local_function);
    RUN(test_method);
    RUN(test_anonymous_function);
    RUN(test_not_a_declaration);
    RUN(test_multiline_declaration);
    RUN(test_shebang);
    RUN(test_unterminated);
    RUN(test_bad_declaration);
    RUN(test_too_deep);
    RUN(test_error_buffers);
    RUN(test_explicit_length);
    RUN(test_lua_syntax_error_line);
    RUN(test_lua_runtime);
    RUN(test_fuzz);
    RUN(test_big_chunk);
    RUN(test_big_annotation);
    return CHECK_DONE("desugar");
}
