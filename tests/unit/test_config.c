/* test_config.c — the config loader: layout, merging, interpolation, overrides, origins,
 * dumps and secrets.  Each test builds a throwaway project under /tmp and works from
 * inside it, so origins read like the user sees them ("conf/base/parameters.yml:3"). */
#include "check.h"
#include "config.h"
#include "util.h"

#include <ftw.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char project[PATH_MAX], home[PATH_MAX];

/* Creates a fresh project directory and makes it the working directory. */
static void project_new(void)
{
    snprintf(project, sizeof project, "/tmp/flow_test_config_XXXXXX");
    if (!mkdtemp(project) || chdir(project) != 0) {
        perror(project);
        exit(2);
    }
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static void project_done(void)
{
    if (chdir(home) != 0)
        perror(home);
    nftw(project, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static void mkdirs(const char *path)
{
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            mkdir(tmp, 0755);
            *p = '/';
        }
    mkdir(tmp, 0755);
}

/* Writes n bytes to a path relative to the project, creating directories on the way. */
static void put_n(const char *rel, const char *text, size_t n)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", rel);
    char *slash = strrchr(dir, '/');
    if (slash) {
        *slash = '\0';
        mkdirs(dir);
    }
    FILE *f = fopen(rel, "wb");
    if (!f) {
        perror(rel);
        exit(2);
    }
    fwrite(text, 1, n, f);
    fclose(f);
}

static void put(const char *rel, const char *text) { put_n(rel, text, strlen(text)); }

static struct config *load(const char *env, char *err, size_t errlen)
{
    err[0] = '\0';
    return config_load("conf", env, err, errlen);
}

/* Loads and resolves; a failure is reported and yields NULL. */
static struct config *load_ok(const char *env)
{
    char err[1024];
    struct config *cfg = load(env, err, sizeof err);
    if (cfg && config_resolve(cfg, err, sizeof err) != 0) {
        config_free(cfg);
        cfg = NULL;
    }
    if (!cfg)
        fprintf(stderr, "  unexpected error: %s\n", err);
    return cfg;
}

static double num(const struct config *cfg, const char *section, const char *key)
{
    const cJSON *v = config_get(cfg, section, key);
    return cJSON_IsNumber(v) ? v->valuedouble : -12345.678;
}

static const char *str(const struct config *cfg, const char *section, const char *key)
{
    const cJSON *v = config_get(cfg, section, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* ---- layout and typing -------------------------------------------------------------- */

static void test_base_only_and_scalar_types(void)
{
    project_new();
    put("conf/base/parameters.yml",
        "int: 42\nneg: -7\nhex: 0x1F\noct: 0o17\nfloat: 2.5\nexp: 1e3\nbool: true\nBool: True\n"
        "no: false\nnil: null\ntilde: ~\nempty:\nquoted_int: \"42\"\nsingle: 'true'\n"
        "word: hello world\ninf: .inf\nninf: -.inf\nnan: .nan\nyes_is_string: yes\n"
        "tagged: !!str 12\nversion: 1.10.2\nbighex: 0x20000000000001\nmaxhex: 0x7FFFFFFFFFFFFFFF\n"
        "overhex: 0x8000000000000000\nbigoct: 0o400000000000000001\n");
    struct config *cfg = load_ok(NULL);
    CHECK(cfg != NULL);
    CHECK_STR(config_env(cfg), "base");
    CHECK(num(cfg, "parameters", "int") == 42);
    CHECK(num(cfg, "params", "neg") == -7);
    CHECK(num(cfg, "parameters", "hex") == 31);
    CHECK(num(cfg, "parameters", "oct") == 15);
    CHECK(num(cfg, "parameters", "float") == 2.5);
    CHECK(num(cfg, "parameters", "exp") == 1000);
    CHECK(cJSON_IsTrue(config_get(cfg, "parameters", "bool")));
    CHECK(cJSON_IsTrue(config_get(cfg, "parameters", "Bool")));
    CHECK(cJSON_IsFalse(config_get(cfg, "parameters", "no")));
    CHECK(cJSON_IsNull(config_get(cfg, "parameters", "nil")));
    CHECK(cJSON_IsNull(config_get(cfg, "parameters", "tilde")));
    CHECK(cJSON_IsNull(config_get(cfg, "parameters", "empty")));
    CHECK_STR(str(cfg, "parameters", "quoted_int"), "42");
    CHECK_STR(str(cfg, "parameters", "single"), "true");
    CHECK_STR(str(cfg, "parameters", "word"), "hello world");
    CHECK(isinf(num(cfg, "parameters", "inf")) && num(cfg, "parameters", "inf") > 0);
    CHECK(isinf(num(cfg, "parameters", "ninf")) && num(cfg, "parameters", "ninf") < 0);
    CHECK(isnan(num(cfg, "parameters", "nan")));
    CHECK_STR(str(cfg, "parameters", "yes_is_string"), "yes");
    CHECK_STR(str(cfg, "parameters", "tagged"), "12");
    /* 0x and 0o integers are exact to a long long (they were read through a double) */
    long long big = 0;
    CHECK(cfg_big_integer(config_get(cfg, "parameters", "bighex"), &big) && big == 9007199254740993LL);
    CHECK(cfg_big_integer(config_get(cfg, "parameters", "maxhex"), &big) && big == 9223372036854775807LL);
    CHECK(cfg_big_integer(config_get(cfg, "parameters", "bigoct"), &big) && big == 9007199254740993LL);
    CHECK(!cfg_big_integer(config_get(cfg, "parameters", "overhex"), &big));    /* beyond: a float */
    CHECK(num(cfg, "parameters", "overhex") == 9223372036854775808.0);
    CHECK_STR(str(cfg, "parameters", "version"), "1.10.2");
    CHECK(config_get(cfg, "parameters", "missing") == NULL);
    CHECK(config_get(cfg, "nosuchsection", "int") == NULL);
    CHECK(config_section(cfg, "catalog") != NULL && config_section(cfg, "catalog")->child == NULL);
    CHECK(config_section(cfg, "bogus") != NULL);
    config_free(cfg);
    project_done();
}

static void test_sections_by_file_prefix(void)
{
    project_new();
    put("conf/base/parameters.yml", "a: 1\n");
    put("conf/base/catalog.yml", "raw: {type: json, path: data/raw.json}\n");
    put("conf/base/azureml.yml", "workspace: ws\n");
    put("conf/base/credentials.yml", "token: abcdefgh\n");
    put("conf/base/globals.yaml", "bucket: b\n");
    put("conf/base/flow.yml", "jobs: 4\n");
    put("conf/base/catalog_extra.json", "{\"more\": {\"type\": \"text\"}}\n");
    put("conf/base/.hidden.yml", "a: 2\n");
    put("conf/base/logging.yml", "x: 1\n");
    put("conf/base/README.md", "not config\n");
    struct config *cfg = load_ok(NULL);
    CHECK(cfg != NULL);
    CHECK(num(cfg, "parameters", "a") == 1);
    CHECK_STR(str(cfg, "catalog", "raw.path"), "data/raw.json");
    CHECK_STR(str(cfg, "catalog", "more.type"), "text");
    CHECK_STR(str(cfg, "azureml", "workspace"), "ws");
    CHECK_STR(str(cfg, "credentials", "token"), "abcdefgh");
    CHECK_STR(str(cfg, "globals", "bucket"), "b");
    CHECK(num(cfg, "flow", "jobs") == 4);
    size_t n = 0;
    const char *const *w = config_warnings(cfg, &n);
    CHECK(n == 1);
    if (n == 1)
        CHECK_CONTAINS(w[0], "conf/base/logging.yml");
    for (size_t i = 0; config_section_name(i); i++)
        CHECK(config_section(cfg, config_section_name(i)) != NULL);
    CHECK(config_section_name(6) == NULL);
    config_free(cfg);
    project_done();
}

static void test_env_deep_merge(void)
{
    project_new();
    put("conf/base/parameters.yml",
        "model:\n  lr: 0.1\n  layers: 3\n  opt:\n    name: adam\n    beta: 0.9\nepochs: 10\n");
    put("conf/prod/parameters.yml", "model:\n  lr: 0.01\n  opt:\n    beta: 0.95\nextra: yes please\n");
    struct config *cfg = load_ok("prod");
    CHECK(cfg != NULL);
    CHECK_STR(config_env(cfg), "prod");
    CHECK(num(cfg, "parameters", "model.lr") == 0.01);
    CHECK(num(cfg, "parameters", "model.layers") == 3);
    CHECK_STR(str(cfg, "parameters", "model.opt.name"), "adam");
    CHECK(num(cfg, "parameters", "model.opt.beta") == 0.95);
    CHECK(num(cfg, "parameters", "epochs") == 10);
    CHECK_STR(str(cfg, "parameters", "extra"), "yes please");
    config_free(cfg);
    /* base only ignores the overlay */
    cfg = load_ok("base");
    CHECK(cfg && num(cfg, "parameters", "model.lr") == 0.1);
    config_free(cfg);
    project_done();
}

static void test_lists_and_scalars_replace(void)
{
    project_new();
    put("conf/base/parameters.yml", "sizes: [1, 2, 3]\nopt: {name: adam}\nname: base\n");
    put("conf/prod/parameters.yml", "sizes:\n  - 9\nopt: sgd\nname: [a]\n");
    struct config *cfg = load_ok("prod");
    CHECK(cfg != NULL);
    const cJSON *sizes = config_get(cfg, "parameters", "sizes");
    CHECK(cJSON_GetArraySize(sizes) == 1);
    CHECK(num(cfg, "parameters", "sizes.0") == 9);
    CHECK(config_get(cfg, "parameters", "sizes.1") == NULL);
    CHECK_STR(str(cfg, "parameters", "opt"), "sgd");
    CHECK(cJSON_IsArray(config_get(cfg, "parameters", "name")));
    CHECK_STR(config_origin(cfg, "parameters", "sizes.0"), "conf/prod/parameters.yml:2");
    CHECK(config_origin(cfg, "parameters", "opt.name") == NULL);
    config_free(cfg);
    project_done();
}

static void test_duplicate_key_in_one_env(void)
{
    char err[1024];
    project_new();
    put("conf/base/parameters.yml", "a: 1\nmodel:\n  lr: 0.1\n");
    put("conf/base/parameters/model.yml", "# the model\nmodel:\n  depth: 3\n");
    put("conf/base/catalog.yml", "model: {type: file}\n");   /* another section: fine */
    struct config *cfg = load(NULL, err, sizeof err);
    CHECK(cfg == NULL);
    CHECK_CONTAINS(err, "conf/base/parameters.yml:2");
    CHECK_CONTAINS(err, "conf/base/parameters/model.yml:2");
    CHECK_CONTAINS(err, "'model'");
    config_free(cfg);
    project_done();

    /* the same key in base and in an overlay is the normal case, not a duplicate */
    project_new();
    put("conf/base/parameters.yml", "model: 1\n");
    put("conf/dev/parameters.yml", "model: 2\n");
    put("conf/dev/parameters_more.yml", "model: 3\n");
    cfg = load("dev", err, sizeof err);
    CHECK(cfg == NULL);
    CHECK_CONTAINS(err, "conf/dev/parameters.yml:1");
    CHECK_CONTAINS(err, "conf/dev/parameters_more.yml:1");
    config_free(cfg);
    project_done();

    project_new();
    put("conf/base/parameters.yml", "a: 1\nb: 2\na: 3\n");
    cfg = load(NULL, err, sizeof err);
    CHECK(cfg == NULL);
    CHECK_STR(err, "conf/base/parameters.yml:3: duplicate key 'a' (first defined at line 1)");
    project_done();
}

static void test_unknown_env_lists_existing(void)
{
    char err[1024];
    project_new();
    put("conf/base/parameters.yml", "a: 1\n");
    put("conf/local/parameters.yml", "a: 2\n");
    put("conf/prod/parameters.yml", "a: 3\n");
    mkdirs("conf/.git");
    struct config *cfg = load("prdo", err, sizeof err);
    CHECK(cfg == NULL);
    CHECK_CONTAINS(err, "environment 'prdo' not found");
    CHECK_CONTAINS(err, "base, local, prod)");
    CHECK_CONTAINS(err, "did you mean 'prod'?");
    CHECK(strstr(err, ".git") == NULL);
    cfg = load("../etc", err, sizeof err);
    CHECK(cfg == NULL);
    CHECK_CONTAINS(err, "invalid environment name");
    size_t n = 0;
    char **envs = config_list_envs("conf", &n);
    CHECK(envs && n == 3);
    if (envs && n == 3) {
        CHECK_STR(envs[0], "base");
        CHECK_STR(envs[2], "prod");
        CHECK(envs[3] == NULL);
    }
    config_list_free(envs);
    project_done();
}

static void test_missing_base_is_empty(void)
{
    project_new();
    put("conf/prod/parameters.yml", "a: 3\n");
    struct config *cfg = load_ok("prod");
    CHECK(cfg && num(cfg, "parameters", "a") == 3);
    config_free(cfg);
    project_done();

    project_new();                     /* no conf at all, base only: empty, fine */
    cfg = load_ok(NULL);
    CHECK(cfg && config_section(cfg, "parameters")->child == NULL);
    config_free(cfg);
    char err[512];
    cfg = load("local", err, sizeof err);
    CHECK(cfg == NULL);
    CHECK_CONTAINS(err, "environment 'local' not found");
    project_done();
}

static void test_yaml_syntax_error(void)
{
    char err[1024];
    project_new();
    put("conf/base/parameters.yml", "a: 1\nb: [1, 2\nc: 3\n");
    struct config *cfg = load(NULL, err, sizeof err);
    CHECK(cfg == NULL);
    CHECK_CONTAINS(err, "conf/base/parameters.yml:3:2: did not find expected ',' or ']'");
    CHECK_CONTAINS(err, "line 2");
    project_done();

    project_new();
    put("conf/base/parameters.yml", "a:\n  b: 1\n c: 2\n");
    cfg = load(NULL, err, sizeof err);
    CHECK(cfg == NULL);
    CHECK_CONTAINS(err, "conf/base/parameters.yml:3:2: ");
    project_done();

    project_new();
    put("conf/base/parameters.yml", "- just\n- a list\n");
    cfg = load(NULL, err, sizeof err);
    CHECK(cfg == NULL);
    CHECK_CONTAINS(err, "conf/base/parameters.yml:1:1: the top level of a config file must be a mapping");
    project_done();

    project_new();
    put("conf/base/parameters.yml", "a: 1\n---\nb: 2\n");
    cfg = load(NULL, err, sizeof err);
    CHECK(cfg == NULL);
    CHECK_CONTAINS(err, "conf/base/parameters.yml:2:1: only one YAML document");
    project_done();
}

static void test_json_files(void)
{
    char err[1024];
    project_new();
    put("conf/base/parameters.json", "{\n  \"model\": {\n    \"lr\": 0.5,\n    \"tags\": [\"a\", \"b\"]\n  },\n"
                                     "  \"n\": 3\n}\n");
    struct config *cfg = load_ok(NULL);
    CHECK(cfg != NULL);
    CHECK(num(cfg, "parameters", "model.lr") == 0.5);
    CHECK_STR(str(cfg, "parameters", "model.tags.1"), "b");
    CHECK_STR(config_origin(cfg, "parameters", "model.lr"), "conf/base/parameters.json:3");
    CHECK_STR(config_origin(cfg, "parameters", "n"), "conf/base/parameters.json:6");
    config_free(cfg);
    project_done();

    project_new();
    put("conf/base/parameters.json", "{\n  \"a\": 1\n  \"b\": 2\n}\n");
    cfg = load(NULL, err, sizeof err);
    CHECK(cfg == NULL);
    CHECK_CONTAINS(err, "conf/base/parameters.json:3:3: invalid JSON");
    project_done();

    project_new();
    put("conf/base/parameters.json", "{\"a\": [1, 2");
    cfg = load(NULL, err, sizeof err);
    CHECK(cfg == NULL);
    CHECK_CONTAINS(err, "conf/base/parameters.json:1:");
    CHECK_CONTAINS(err, "unexpected end of input");
    project_done();

    project_new();
    put("conf/base/parameters.json", "{\"a\": 1,\n \"a\": 2}");
    cfg = load(NULL, err, sizeof err);
    CHECK(cfg == NULL);
    CHECK_CONTAINS(err, "conf/base/parameters.json:2: duplicate key 'a' (first defined at line 1)");
    project_done();

    /* integers beyond 2^53 are exact, as YAML's are (cJSON read them as doubles) */
    project_new();
    put("conf/base/parameters.json", "{\"big\": 1234567890123456789, \"neg\": -9007199254740993, \"n\": [7, 2.5]}");
    cfg = load_ok(NULL);
    long long big = 0;
    CHECK(cfg && cfg_big_integer(config_get(cfg, "parameters", "big"), &big) && big == 1234567890123456789LL);
    CHECK(cfg && cfg_big_integer(config_get(cfg, "parameters", "neg"), &big) && big == -9007199254740993LL);
    CHECK(cfg && num(cfg, "parameters", "n.0") == 7 && num(cfg, "parameters", "n.1") == 2.5);
    config_free(cfg);
    project_done();

    /* a \u0000 would cut the string short ("x\u0000y" read as "x"): refused, as YAML refuses a NUL */
    project_new();
    put("conf/base/parameters.json", "{\"ok\": \"\\\\u0000\",\n \"a\": \"x\\u0000y\"}");
    cfg = load(NULL, err, sizeof err);
    CHECK(cfg == NULL);
    CHECK_CONTAINS(err, "conf/base/parameters.json:2:9: a NUL character (\\u0000) in a string");
    project_done();
}

static void test_anchors_aliases_merge_keys(void)
{
    project_new();
    put("conf/base/parameters.yml",
        "defaults: &defaults\n  lr: 0.1\n  layers: [64, 32]\n  opt: adam\n"
        "small:\n  <<: *defaults\n  lr: 0.5\n"
        "copy: *defaults\n"
        "both:\n  <<: [{a: 1, lr: 9}, *defaults]\n"
        "sizes: &s [1, 2]\nagain: *s\n");
    struct config *cfg = load_ok(NULL);
    CHECK(cfg != NULL);
    CHECK(num(cfg, "parameters", "small.lr") == 0.5);
    CHECK_STR(str(cfg, "parameters", "small.opt"), "adam");
    CHECK(num(cfg, "parameters", "small.layers.1") == 32);
    CHECK(num(cfg, "parameters", "copy.lr") == 0.1);
    CHECK(num(cfg, "parameters", "both.lr") == 9);
    CHECK(num(cfg, "parameters", "both.a") == 1);
    CHECK_STR(str(cfg, "parameters", "both.opt"), "adam");
    CHECK(cJSON_GetArraySize(config_get(cfg, "parameters", "again")) == 2);
    CHECK(config_get(cfg, "parameters", "small.<<") == NULL);
    CHECK_STR(config_origin(cfg, "parameters", "copy"), "conf/base/parameters.yml:8");
    config_free(cfg);
    project_done();
}

/* An anchor on a `<<:` value outlives the mapping it was merged into (it was freed with
 * the mapping's merge list, and a later alias read freed memory). */
static void test_anchor_on_merge_value(void)
{
    project_new();
    put("conf/base/parameters.yml",
        "a: {<<: &base {x: 1, y: [2, 3]}}\n"
        "b: *base\n"
        "c:\n  <<: [&two {z: 4}]\n"
        "d: {<<: *two, w: 5}\n");
    struct config *cfg = load_ok(NULL);
    CHECK(cfg != NULL);
    CHECK(num(cfg, "parameters", "a.x") == 1);
    CHECK(num(cfg, "parameters", "b.x") == 1);
    CHECK(num(cfg, "parameters", "b.y.1") == 3);
    CHECK(num(cfg, "parameters", "c.z") == 4);
    CHECK(num(cfg, "parameters", "d.z") == 4);
    CHECK(num(cfg, "parameters", "d.w") == 5);
    CHECK_STR(config_origin(cfg, "parameters", "b"), "conf/base/parameters.yml:2");
    config_free(cfg);
    project_done();
}

static void test_parameters_subdirectory(void)
{
    project_new();
    put("conf/base/parameters/model.yml", "model: {depth: 3}\n");
    put("conf/base/parameters/data/split.yaml", "split: {train: 0.8}\n");
    put("conf/base/parameters/data/.swap.yml", "junk: [\n");
    put("conf/base/parameters.yml", "seed: 1\n");
    put("conf/prod/parameters/model.yml", "model: {depth: 5}\n");
    put("conf/base/pipelines/train/parameters_train.yml", "train: {steps: 100}\n");
    put("conf/base/pipelines/train/notes.yml", "not: config\n");
    struct config *cfg = load_ok("prod");
    CHECK(cfg != NULL);
    CHECK(num(cfg, "parameters", "train.steps") == 100);
    CHECK(config_get(cfg, "parameters", "not") == NULL);
    size_t nwarn = 9;
    const char *const *warn = config_warnings(cfg, &nwarn);
    CHECK(nwarn == 1);                 /* pipelines/ is no section: notes.yml picks none */
    if (nwarn == 1)
        CHECK_CONTAINS(warn[0], "conf/base/pipelines/train/notes.yml: ignored");
    CHECK(num(cfg, "parameters", "model.depth") == 5);
    CHECK(num(cfg, "parameters", "split.train") == 0.8);
    CHECK(num(cfg, "parameters", "seed") == 1);
    CHECK_STR(config_origin(cfg, "parameters", "split.train"), "conf/base/parameters/data/split.yaml:1");
    config_free(cfg);
    project_done();
}

/* A config file in a subdirectory that is not a section, whose name picks no section,
 * is reported like one at the top (it used to vanish: conf/prod/overrides/model.yml);
 * so is a directory too deep to be read, never dropped in silence. */
static void test_unread_files_in_subdirectories_warn(void)
{
    project_new();
    put("conf/base/parameters.yml", "lr: 0.1\n");
    put("conf/prod/overrides/model.yml", "lr: 0.5\n");
    put("conf/prod/parameters/a/b/c/d/e/f/g/ok.yml", "ok: 1\n");          /* 8 deep: read */
    put("conf/prod/parameters/a/b/c/d/e/f/g/h/deep.yml", "deep: 1\n");   /* 9 deep */
    struct config *cfg = load_ok("prod");
    CHECK(cfg != NULL);
    CHECK(num(cfg, "parameters", "lr") == 0.1);
    CHECK(num(cfg, "parameters", "ok") == 1);
    size_t nwarn = 0;
    const char *const *warn = config_warnings(cfg, &nwarn);
    CHECK(nwarn == 2);
    struct strbuf all = STRBUF_INIT;
    for (size_t i = 0; i < nwarn; i++)
        sb_addf(&all, "%s\n", warn[i]);
    CHECK_CONTAINS(all.buf, "conf/prod/overrides/model.yml: ignored");
    CHECK_CONTAINS(all.buf, "conf/prod/parameters/a/b/c/d/e/f/g/h: ignored: directories more than 8 deep");
    sb_release(&all);
    config_free(cfg);
    project_done();
}

/* An entry named like a config file that is no regular file is an error naming it and
 * what it is, never skipped (which surfaced later as "parameter not defined"); a FIFO is
 * not opened, so the load does not wait for a writer (alarm: a hang fails the test). */
static void expect_bad_entry(const char *rel, const char *needle)
{
    char err[1024];
    struct config *cfg = load(NULL, err, sizeof err);
    CHECK(cfg == NULL);
    CHECK_CONTAINS(err, needle);
    config_free(cfg);
    CHECK(unlink(rel) == 0);
}

static void test_config_names_that_are_not_files(void)
{
    project_new();
    put("conf/base/catalog.yml", "{}\n");
    alarm(20);
    CHECK(symlink("missing.yml", "conf/base/parameters.yml") == 0);
    expect_bad_entry("conf/base/parameters.yml",
                     "conf/base/parameters.yml: a symbolic link to 'missing.yml', which does not exist");
    CHECK(symlink("/dev/zero", "conf/base/parameters.yml") == 0);
    expect_bad_entry("conf/base/parameters.yml", "conf/base/parameters.yml: not a regular file: a symbolic "
                     "link to '/dev/zero', which is a character device");
    CHECK(mkfifo("conf/base/parameters.yml", 0644) == 0);
    expect_bad_entry("conf/base/parameters.yml", "conf/base/parameters.yml: not a regular file but a FIFO");
    CHECK(symlink("globals.json", "conf/base/globals.json") == 0);
    expect_bad_entry("conf/base/globals.json", "conf/base/globals.json: cannot read: Too many levels");
    mkdirs("conf/base/parameters");
    CHECK(symlink("../../gone.yml", "conf/base/parameters/model.yml") == 0);
    expect_bad_entry("conf/base/parameters/model.yml", "conf/base/parameters/model.yml: a symbolic link to "
                     "'../../gone.yml', which does not exist");
    /* named like no config file: not config, as before */
    CHECK(mkfifo("conf/base/notes.yml", 0644) == 0);
    CHECK(symlink("missing", "conf/base/parameters_notes.txt") == 0);
    struct config *cfg = load_ok(NULL);
    CHECK(cfg != NULL);
    config_free(cfg);
    alarm(0);
    project_done();
}

/* ---- interpolation ------------------------------------------------------------------ */

static void test_interpolation_env(void)
{
    project_new();
    setenv("FLOW_TEST_ROOT", "/data", 1);
    setenv("FLOW_TEST_PORT", "8080", 1);
    unsetenv("FLOW_TEST_UNSET");
    put("conf/base/parameters.yml",
        "root: ${env:FLOW_TEST_ROOT}\nport: ${env:FLOW_TEST_PORT}\n"
        "url: \"http://host:${env:FLOW_TEST_PORT}/x\"\n"
        "fallback: ${env:FLOW_TEST_UNSET,/tmp/default}\n"
        "n: ${env:FLOW_TEST_UNSET,4}\n"
        "q: ${env:FLOW_TEST_UNSET,'a, b'}\n"
        "nested: ${env:FLOW_TEST_UNSET,${env:FLOW_TEST_ROOT}/sub}\n");
    struct config *cfg = load_ok(NULL);
    CHECK(cfg != NULL);
    CHECK_STR(str(cfg, "parameters", "root"), "/data");
    CHECK(num(cfg, "parameters", "port") == 8080);
    CHECK_STR(str(cfg, "parameters", "url"), "http://host:8080/x");
    CHECK_STR(str(cfg, "parameters", "fallback"), "/tmp/default");
    CHECK(num(cfg, "parameters", "n") == 4);
    CHECK_STR(str(cfg, "parameters", "q"), "a, b");
    CHECK_STR(str(cfg, "parameters", "nested"), "/data/sub");
    config_free(cfg);
    project_done();
}

/* Embedded in a longer string, an environment variable (or a default) gives its text as
 * written: typing it first turned 0042 into 42, 1.10 into 1.1, 0x1F into 31 and NULL into
 * nothing.  Only a whole ${env:VAR} is typed.  A quoted default may hold '}'. */
static void test_interpolation_env_embedded_text(void)
{
    project_new();
    setenv("FLOW_TEST_ID", "0042", 1);
    setenv("FLOW_TEST_VER", "1.10", 1);
    setenv("FLOW_TEST_HEX", "0x1F", 1);
    setenv("FLOW_TEST_NULL", "NULL", 1);
    setenv("FLOW_TEST_TILDE", "~", 1);
    unsetenv("FLOW_TEST_UNSET");
    put("conf/base/parameters.yml",
        "path: \"/data/${env:FLOW_TEST_ID}/x\"\n"
        "ver: \"v${env:FLOW_TEST_VER}\"\n"
        "hex: \"id-${env:FLOW_TEST_HEX}\"\n"
        "nulls: \"n-${env:FLOW_TEST_NULL}-${env:FLOW_TEST_TILDE}\"\n"
        "whole_id: ${env:FLOW_TEST_ID}\n"
        "whole_null: ${env:FLOW_TEST_NULL}\n"
        "def_text: \"v${env:FLOW_TEST_UNSET,1.10}\"\n"
        "def_typed: ${env:FLOW_TEST_UNSET,1.10}\n"
        "def_nested: \"x${env:FLOW_TEST_UNSET,${env:FLOW_TEST_VER}}\"\n"
        "brace: ${env:FLOW_TEST_UNSET,'x}y'}\n"
        "brace_embedded: \"a-${env:FLOW_TEST_UNSET, \\\"x}y\\\" }-b\"\n"
        "apostrophe: \"${env:FLOW_TEST_UNSET,it's}\"\n");
    struct config *cfg = load_ok(NULL);
    CHECK(cfg != NULL);
    CHECK_STR(str(cfg, "parameters", "path"), "/data/0042/x");
    CHECK_STR(str(cfg, "parameters", "ver"), "v1.10");
    CHECK_STR(str(cfg, "parameters", "hex"), "id-0x1F");
    CHECK_STR(str(cfg, "parameters", "nulls"), "n-NULL-~");
    CHECK(num(cfg, "parameters", "whole_id") == 42);
    CHECK(cJSON_IsNull(config_get(cfg, "parameters", "whole_null")));
    CHECK_STR(str(cfg, "parameters", "def_text"), "v1.10");
    CHECK(num(cfg, "parameters", "def_typed") == 1.1);
    CHECK_STR(str(cfg, "parameters", "def_nested"), "x1.10");
    CHECK_STR(str(cfg, "parameters", "brace"), "x}y");
    CHECK_STR(str(cfg, "parameters", "brace_embedded"), "a-x}y-b");
    CHECK_STR(str(cfg, "parameters", "apostrophe"), "it's");
    config_free(cfg);
    project_done();
}

static void test_interpolation_missing_env(void)
{
    char err[1024];
    project_new();
    unsetenv("FLOW_TEST_UNSET");
    put("conf/base/parameters.yml", "a: 1\ndata:\n  path: \"${env:FLOW_TEST_UNSET}/raw\"\n");
    struct config *cfg = load(NULL, err, sizeof err);
    CHECK(cfg != NULL);
    CHECK(config_resolve(cfg, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "conf/base/parameters.yml:3: parameters key 'data.path': "
                        "environment variable FLOW_TEST_UNSET is not set");
    config_free(cfg);
    project_done();
}

static void test_interpolation_globals(void)
{
    char err[1024];
    project_new();
    put("conf/base/globals.yml", "bucket: my-bucket\nsizes: {big: 512}\nprefix: \"s3://${globals:bucket}\"\n");
    put("conf/base/parameters.yml",
        "path: \"s3://${globals:bucket}/x\"\nbig: ${globals:sizes.big}\n"
        "other: ${globals:nope,7}\nlabel: \"n=${globals:sizes.big}\"\nfull: ${globals:prefix}/y\n"
        "sizes: ${globals:sizes}\n");
    put("conf/base/catalog.yml", "raw:\n  type: json\n  path: ${globals:prefix}/raw.json\n");
    struct config *cfg = load_ok(NULL);
    CHECK(cfg != NULL);
    CHECK_STR(str(cfg, "parameters", "path"), "s3://my-bucket/x");
    CHECK(num(cfg, "parameters", "big") == 512);
    CHECK(num(cfg, "parameters", "other") == 7);
    CHECK_STR(str(cfg, "parameters", "label"), "n=512");
    CHECK_STR(str(cfg, "parameters", "full"), "s3://my-bucket/y");
    CHECK(num(cfg, "parameters", "sizes.big") == 512);
    CHECK_STR(str(cfg, "catalog", "raw.path"), "s3://my-bucket/raw.json");
    config_free(cfg);
    project_done();

    project_new();
    put("conf/base/globals.yml", "bucket: b\n");
    put("conf/base/parameters.yml", "x: ${globals:buckte}\n");
    cfg = load(NULL, err, sizeof err);
    CHECK(cfg && config_resolve(cfg, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "conf/base/parameters.yml:1: parameters key 'x': ${globals:buckte} does not "
                        "exist; did you mean 'bucket'?");
    config_free(cfg);
    project_done();
}

static void test_interpolation_params_typed(void)
{
    project_new();
    put("conf/base/parameters.yml",
        "model:\n  lr: 0.01\n  layers: [64, 32]\n  name: net\n"
        "lr: ${params:model.lr}\nmodel_copy: ${params:model}\nfirst: ${params:model.layers.0}\n"
        "tag: \"${params:model.name}-lr${params:model.lr}\"\nchain: ${params:lr}\n"
        "through: ${params:model_copy.name}\nflag: ${params:missing,false}\n"
        "empty: \"[${params:nothing,}]\"\n");
    struct config *cfg = load_ok(NULL);
    CHECK(cfg != NULL);
    CHECK(num(cfg, "parameters", "lr") == 0.01);
    CHECK(cJSON_IsObject(config_get(cfg, "parameters", "model_copy")));
    CHECK(num(cfg, "parameters", "model_copy.layers.1") == 32);
    CHECK(num(cfg, "parameters", "first") == 64);
    CHECK_STR(str(cfg, "parameters", "tag"), "net-lr0.01");
    CHECK(num(cfg, "parameters", "chain") == 0.01);
    CHECK_STR(str(cfg, "parameters", "through"), "net");
    CHECK(cJSON_IsFalse(config_get(cfg, "parameters", "flag")));
    CHECK_STR(str(cfg, "parameters", "empty"), "[]");
    config_free(cfg);
    project_done();
}

static void test_interpolation_cycle(void)
{
    char err[1024];
    project_new();
    put("conf/base/parameters.yml", "a: ${params:b}\nb: \"x${params:c}\"\nc: ${params:a}\n");
    struct config *cfg = load(NULL, err, sizeof err);
    CHECK(cfg && config_resolve(cfg, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "interpolation cycle: params:a (conf/base/parameters.yml:1) -> params:b "
                        "(conf/base/parameters.yml:2) -> params:c (conf/base/parameters.yml:3) -> params:a");
    config_free(cfg);
    project_done();

    project_new();
    put("conf/base/parameters.yml", "x:\n  y: ${params:x}\n");
    cfg = load(NULL, err, sizeof err);
    CHECK(cfg && config_resolve(cfg, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "interpolation cycle: params:x.y (conf/base/parameters.yml:2) -> params:x "
                        "(conf/base/parameters.yml:1) -> params:x.y");
    config_free(cfg);
    project_done();
}

static void test_interpolation_escapes_and_errors(void)
{
    char err[1024];
    project_new();
    put("conf/base/parameters.yml",
        "lit: \"$${not_a_ref}\"\nmixed: \"a$${x}b${params:n}\"\nn: 5\naml: \"${{inputs.data}}\"\n"
        "dollar: \"cost: $5\"\n");
    struct config *cfg = load_ok(NULL);
    CHECK(cfg != NULL);
    CHECK_STR(str(cfg, "parameters", "lit"), "${not_a_ref}");
    CHECK_STR(str(cfg, "parameters", "mixed"), "a${x}b5");
    CHECK_STR(str(cfg, "parameters", "aml"), "${{inputs.data}}");
    CHECK_STR(str(cfg, "parameters", "dollar"), "cost: $5");
    /* resolving again (after an override) must not re-read an escaped ${ */
    CHECK(config_override_spec(cfg, "n=6", err, sizeof err) == 0);
    CHECK(config_resolve(cfg, err, sizeof err) == 0);
    CHECK_STR(str(cfg, "parameters", "lit"), "${not_a_ref}");
    CHECK_STR(str(cfg, "parameters", "mixed"), "a${x}b6");
    config_free(cfg);
    project_done();

    static const char *const bad[][2] = {
        {"x: \"${params:n\"\n", "unterminated ${"},
        {"x: ${oops}\n", "${oops} is not a reference"},
        {"x: ${foo:bar}\n", "unknown reference kind 'foo'"},
        {"m: {a: 1}\nx: \"v=${params:m}\"\n", "a mapping cannot be embedded"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        project_new();
        put("conf/base/parameters.yml", bad[i][0]);
        cfg = load(NULL, err, sizeof err);
        CHECK(cfg && config_resolve(cfg, err, sizeof err) == -1);
        CHECK_CONTAINS(err, bad[i][1]);
        CHECK_CONTAINS(err, "conf/base/parameters.yml:");
        config_free(cfg);
        project_done();
    }
}

/* ---- overrides ---------------------------------------------------------------------- */

static void test_override_spec_types(void)
{
    char err[1024];
    project_new();
    put("conf/base/parameters.yml", "model:\n  lr: 0.1\n  depth: 3\nname: x\n");
    struct config *cfg = load(NULL, err, sizeof err);
    CHECK(cfg != NULL);
    int rc = config_override_spec(cfg,
        "model.lr=0.5,i=7,h=0x10,f=2.5e-3,b=true,B=False,n=null,s=hello,l=[1, 2.5, x, 'y,z', [3]],"
        "g=\"quoted, string\",q='true',e=,sp = spaced out ,new.deep.key=3,url=a=b,el=[]", err, sizeof err);
    CHECK(rc == 0);
    if (rc)
        fprintf(stderr, "  %s\n", err);
    CHECK(config_resolve(cfg, err, sizeof err) == 0);
    CHECK(num(cfg, "parameters", "model.lr") == 0.5);
    CHECK(num(cfg, "parameters", "model.depth") == 3);      /* siblings survive */
    CHECK(num(cfg, "parameters", "i") == 7);
    CHECK(num(cfg, "parameters", "h") == 16);
    CHECK(num(cfg, "parameters", "f") == 2.5e-3);
    CHECK(cJSON_IsTrue(config_get(cfg, "parameters", "b")));
    CHECK(cJSON_IsFalse(config_get(cfg, "parameters", "B")));
    CHECK(cJSON_IsNull(config_get(cfg, "parameters", "n")));
    CHECK_STR(str(cfg, "parameters", "s"), "hello");
    const cJSON *l = config_get(cfg, "parameters", "l");
    CHECK(cJSON_GetArraySize(l) == 5);
    CHECK(num(cfg, "parameters", "l.0") == 1);
    CHECK(num(cfg, "parameters", "l.1") == 2.5);
    CHECK_STR(str(cfg, "parameters", "l.2"), "x");
    CHECK_STR(str(cfg, "parameters", "l.3"), "y,z");
    CHECK(num(cfg, "parameters", "l.4.0") == 3);
    CHECK_STR(str(cfg, "parameters", "g"), "quoted, string");
    CHECK_STR(str(cfg, "parameters", "q"), "true");
    CHECK_STR(str(cfg, "parameters", "e"), "");
    CHECK_STR(str(cfg, "parameters", "sp"), "spaced out");
    CHECK(num(cfg, "parameters", "new.deep.key") == 3);
    CHECK(cJSON_IsObject(config_get(cfg, "parameters", "new.deep")));
    CHECK_STR(str(cfg, "parameters", "url"), "a=b");
    CHECK(cJSON_IsArray(config_get(cfg, "parameters", "el")));
    CHECK_STR(config_origin(cfg, "parameters", "new.deep.key"), "--params");
    CHECK_STR(config_origin(cfg, "parameters", "model.lr"), "--params");
    CHECK_STR(config_origin(cfg, "parameters", "model.depth"), "conf/base/parameters.yml:3");
    config_free(cfg);
    project_done();
}

static void test_override_spec_errors(void)
{
    static const char *const bad[][2] = {
        {"novalue", "expected key=value"},
        {"a=1,b", "expected key=value"},
        {"=3", "missing parameter name"},
        {"a=\"open", "unterminated quoted string"},
        {"a=[1,2", "unterminated list"},
        {"a=[1,,2]", "empty list item"},
        {"a='x'y", "expected ','"},
        {"name.sub=1", "'name' is a string (set at conf/base/parameters.yml:1), not a mapping"},
        {"a..b=1", "invalid parameter name 'a..b'"},
        {"a=1 b=2", "separate overrides with commas"},
        {"a=x\tb=[1]", "separate overrides with commas"},
    };
    char err[1024];
    project_new();
    put("conf/base/parameters.yml", "name: x\n");
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        struct config *cfg = load(NULL, err, sizeof err);
        CHECK(cfg && config_override_spec(cfg, bad[i][0], err, sizeof err) == -1);
        CHECK_CONTAINS(err, bad[i][1]);
        CHECK_CONTAINS(err, "--params");
        config_free(cfg);
    }
    char deep[400] = "";
    for (int i = 0; i < 150; i++)
        strcat(deep, i ? ".k" : "k");
    strcat(deep, "=1");
    struct config *deep_cfg = load(NULL, err, sizeof err);
    CHECK(deep_cfg && config_override_spec(deep_cfg, deep, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "nests deeper than 100 levels");
    config_free(deep_cfg);

    /* nothing is applied when the text does not parse */
    struct config *cfg = load(NULL, err, sizeof err);
    CHECK(cfg && config_override_spec(cfg, "name=y,broken", err, sizeof err) == -1);
    CHECK(config_resolve(cfg, err, sizeof err) == 0);
    CHECK_STR(str(cfg, "parameters", "name"), "x");
    config_free(cfg);
    project_done();
}

static void test_override_value(void)
{
    char err[1024];
    project_new();
    put("conf/base/parameters.yml", "model:\n  lr: 0.1\n  depth: 3\nkeep: 1\n");
    struct config *cfg = load(NULL, err, sizeof err);
    CHECK(cfg != NULL);
    cJSON *v = cJSON_Parse("{\"lr\": 0.25, \"opt\": {\"name\": \"sgd\"}}");
    CHECK(config_override_value_from(cfg, "model", v, "flow.run", err, sizeof err) == 0);
    cJSON_Delete(v);
    v = cJSON_CreateNumber(11);
    CHECK(config_override_value(cfg, "epochs", v, err, sizeof err) == 0);
    cJSON_Delete(v);
    v = cJSON_Parse("{\"top\": true}");
    CHECK(config_override_value(cfg, NULL, v, err, sizeof err) == 0);
    CHECK(config_override_value(cfg, "keep.sub", v, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "'keep' is a number");
    cJSON_Delete(v);
    v = cJSON_CreateRaw("{oops");
    CHECK(config_override_value(cfg, "r", v, err, sizeof err) == -1);
    cJSON_Delete(v);
    CHECK(config_resolve(cfg, err, sizeof err) == 0);
    CHECK(num(cfg, "parameters", "model.lr") == 0.25);
    CHECK(num(cfg, "parameters", "model.depth") == 3);
    CHECK_STR(str(cfg, "parameters", "model.opt.name"), "sgd");
    CHECK(num(cfg, "parameters", "epochs") == 11);
    CHECK(cJSON_IsTrue(config_get(cfg, "parameters", "top")));
    CHECK_STR(config_origin(cfg, "parameters", "model.lr"), "flow.run");
    CHECK_STR(config_origin(cfg, "parameters", "epochs"), "--params");
    config_free(cfg);
    project_done();
}

/* ---- origins, explain, lookups ------------------------------------------------------ */

static void test_origins_and_explain(void)
{
    char err[1024];
    project_new();
    put("conf/base/parameters.yml", "# comment\nmodel:\n  lr: 0.1\n  depth: 3\nseed: 1\n");
    put("conf/prod/parameters.yml", "model:\n  lr: 0.01\n");
    struct config *cfg = load("prod", err, sizeof err);
    CHECK(cfg != NULL);
    CHECK(config_override_spec(cfg, "seed=42", err, sizeof err) == 0);
    CHECK(config_resolve(cfg, err, sizeof err) == 0);
    CHECK_STR(config_origin(cfg, "parameters", "model.depth"), "conf/base/parameters.yml:4");
    CHECK_STR(config_origin(cfg, "parameters", "model.lr"), "conf/prod/parameters.yml:2");
    CHECK_STR(config_origin(cfg, "parameters", "seed"), "--params");
    CHECK(config_origin(cfg, "parameters", "nope") == NULL);

    char *text = config_explain(cfg, "parameters", "model.lr");
    CHECK_CONTAINS(text, "parameters: model.lr = 0.01\n");
    CHECK_CONTAINS(text, "conf/base/parameters.yml:3  base");
    CHECK_CONTAINS(text, "0.1\n");
    CHECK_CONTAINS(text, "conf/prod/parameters.yml:2  env prod");
    CHECK_CONTAINS(text, "0.01   <- wins");
    CHECK(text && strstr(text, "base") < strstr(text, "env prod"));
    free(text);

    text = config_explain(cfg, "parameters", "seed");
    CHECK_CONTAINS(text, "conf/base/parameters.yml:5  base");
    CHECK_CONTAINS(text, "--params                    override      42   <- wins");
    free(text);

    text = config_explain(cfg, "parameters", "model");
    CHECK_CONTAINS(text, "parameters: model = {mapping}");
    CHECK_CONTAINS(text, "mappings merge");
    free(text);

    config_free(cfg);
    project_done();

    /* explain shows what was written; the header shows the resolved value */
    project_new();
    put("conf/base/globals.yml", "lr: 0.3\n");
    put("conf/base/parameters.yml", "lr: ${globals:lr}\nmodel: ${params:base}\nbase: {depth: 2}\n");
    cfg = load_ok(NULL);
    CHECK(cfg != NULL);
    text = config_explain(cfg, "parameters", "lr");
    CHECK_CONTAINS(text, "parameters: lr = 0.3\n");
    CHECK_CONTAINS(text, "\"${globals:lr}\"   <- wins");
    free(text);
    text = config_explain(cfg, "parameters", "model.depth");
    CHECK_CONTAINS(text, "parameters: model.depth = 2\n  set as part of 'model':\n");
    CHECK_CONTAINS(text, "conf/base/parameters.yml:2");
    free(text);
    CHECK_STR(config_origin(cfg, "parameters", "model.depth"), "conf/base/parameters.yml:2");

    text = config_explain(cfg, "parameters", "model.lrr");
    CHECK_STR(text, "parameters: model.lrr is not set\n");
    free(text);
    text = config_explain(cfg, "parameters", "bas.depth");
    CHECK_STR(text, "parameters: bas.depth is not set; did you mean 'base.depth'?\n");
    free(text);
    text = config_explain(cfg, "nosection", "x");
    CHECK_CONTAINS(text, "unknown config section 'nosection'");
    free(text);
    config_free(cfg);
    project_done();
}

static void test_dotted_keys_and_closest(void)
{
    project_new();
    put("conf/base/parameters.yml",
        "model:\n  learning_rate: 0.1\n  layers: [{size: 8}, {size: 4}]\n\"v1.2\": {ok: yes}\nepochs: 3\n");
    struct config *cfg = load_ok(NULL);
    CHECK(cfg != NULL);
    CHECK(num(cfg, "parameters", "model.layers.1.size") == 4);
    CHECK_STR(str(cfg, "parameters", "v1.2.ok"), "yes");
    CHECK(config_get(cfg, "parameters", "model.layers.9") == NULL);
    CHECK(config_get(cfg, "parameters", "model.") == NULL);
    CHECK(config_get(cfg, "parameters", "") == config_section(cfg, "parameters"));
    char *near = config_closest_key(cfg, "parameters", "model.learning_rat");
    CHECK_STR(near, "model.learning_rate");
    free(near);
    near = config_closest_key(cfg, "parameters", "epoch");
    CHECK_STR(near, "epochs");
    free(near);
    near = config_closest_key(cfg, "parameters", "completely.different");
    CHECK(near == NULL);
    free(near);
    config_free(cfg);
    project_done();
}

/* ---- dump --------------------------------------------------------------------------- */

/* Like cJSON_Compare, but exact on numbers, infinities and NaN included (cJSON's own
 * comparison subtracts, which never holds for infinities). */
static int same_tree(const cJSON *a, const cJSON *b)
{
    if (!a || !b || (a->type & 0xFF) != (b->type & 0xFF))
        return 0;
    if ((a->string || b->string) && (!a->string || !b->string || strcmp(a->string, b->string) != 0))
        return 0;
    if (cJSON_IsNumber(a))
        return a->valuedouble == b->valuedouble || (isnan(a->valuedouble) && isnan(b->valuedouble));
    if (cJSON_IsString(a))
        return strcmp(a->valuestring, b->valuestring) == 0;
    for (a = a->child, b = b->child; a || b; a = a->next, b = b->next)
        if (!same_tree(a, b))
            return 0;
    return 1;
}

static void test_dump_round_trip(void)
{
    char err[1024];
    project_new();
    put("conf/base/parameters.yml",
        "s_int: \"123\"\ns_bool: \"true\"\ns_null: \"null\"\ns_empty: \"\"\ns_yes: \"yes\"\n"
        "s_colon: \"a: b\"\ns_dash: \"- x\"\ns_hash: \"#c\"\ns_star: \"*x\"\ns_multi: \"line1\\nline2\\n\"\n"
        "s_unicode: \"caf\\u00e9 \\u2603\"\ns_ctrl: \"tab\\there\\u0001\"\ns_space: \" lead\"\n"
        "s_float: \"1.5\"\ns_tilde: \"~\"\ns_brace: \"{a}\"\ns_quote: \"it's \\\"q\\\"\"\n"
        "n_int: -17\nn_float: 0.1\nn_big: 1.0e+300\nn_inf: -.inf\nn_nan: .NaN\nn_third: 0.3333333333333333\n"
        "b: false\nz: null\n"
        "list: [1, \"2\", [], {}, {k: v}]\nmap: {nested: {deep: [a, b]}}\n\"key with: colon\": 1\n"
        "\"123\": numeric key\n");
    struct config *cfg = load_ok(NULL);
    CHECK(cfg != NULL);
    char *yaml = config_dump_yaml(cfg, "parameters", NULL, 0);
    CHECK(yaml != NULL);
    project_done();

    project_new();
    put("conf/base/parameters.yml", yaml ? yaml : "");
    struct config *again = load(NULL, err, sizeof err);
    if (!again || !same_tree(config_section(cfg, "parameters"), config_section(again, "parameters")))
        fprintf(stderr, "  reload differs (%s):\n%s\n", again ? "" : err, yaml);
    CHECK(again != NULL);
    CHECK(again && same_tree(config_section(cfg, "parameters"), config_section(again, "parameters")));
    free(yaml);

    yaml = config_dump_yaml(cfg, "parameters", "map.nested", 0);
    CHECK_STR(yaml, "deep:\n- a\n- b\n");
    free(yaml);
    yaml = config_dump_yaml(cfg, "parameters", "n_int", 0);
    CHECK_CONTAINS(yaml, "-17");
    free(yaml);
    CHECK(config_dump_yaml(cfg, "parameters", "no.such.key", 0) == NULL);
    CHECK(config_dump_yaml(cfg, "nosection", NULL, 0) == NULL);
    yaml = config_dump_yaml(cfg, NULL, NULL, 0);
    CHECK_CONTAINS(yaml, "parameters:\n  s_int: \"123\"\n");
    free(yaml);
    config_free(again);
    config_free(cfg);
    project_done();
}

/* ---- secrets ------------------------------------------------------------------------ */

static void test_credentials_redaction(void)
{
    char err[1024];
    project_new();
    setenv("FLOW_TEST_TOKEN", "tok-from-env-9876", 1);
    put("conf/local/credentials.yml",
        "db:\n  user: bob\n  password: hunter2secret\n  port: 5432\napi:\n  token: ${env:FLOW_TEST_TOKEN}\n");
    put("conf/base/parameters.yml", "note: \"uses hunter2secret\"\n");
    struct config *cfg = load_ok("local");
    CHECK(cfg != NULL);
    CHECK_STR(str(cfg, "credentials", "db.password"), "hunter2secret");
    CHECK_STR(str(cfg, "credentials", "api.token"), "tok-from-env-9876");

    char *r = config_redact(cfg, "login bob:hunter2secret with tok-from-env-9876!");
    CHECK_STR(r, "login bob:*** with ***!");
    free(r);

    char *masked = config_dump_yaml(cfg, NULL, NULL, 1);
    CHECK(masked && !strstr(masked, "hunter2secret") && !strstr(masked, "tok-from-env"));
    CHECK_CONTAINS(masked, "password: '***'");
    CHECK_CONTAINS(masked, "note: uses ***");
    free(masked);
    char *plain = config_dump_yaml(cfg, "credentials", NULL, 0);
    CHECK_CONTAINS(plain, "hunter2secret");
    free(plain);
    masked = config_dump_yaml(cfg, "credentials", "db.password", 1);
    CHECK_CONTAINS(masked, "***");
    free(masked);

    char *text = config_explain(cfg, "credentials", "db.password");
    CHECK(text && !strstr(text, "hunter2secret"));
    CHECK_CONTAINS(text, "conf/local/credentials.yml:3");
    free(text);

    /* a number is no secret until flow hands it to a process as text; short text never is */
    r = config_redact(cfg, "port 5432, bob");
    CHECK_STR(r, "port 5432, bob");
    free(r);
    config_add_secret(cfg, "5432");
    config_add_secret(cfg, "bob");
    r = config_redact(cfg, "port 5432, bob");
    CHECK_STR(r, "port ***, bob");
    free(r);
    config_free(cfg);
    project_done();

    /* an interpolation error inside credentials names the key, never the value */
    project_new();
    unsetenv("FLOW_TEST_UNSET");
    put("conf/base/credentials.yml",
        "api_key: sup3rs3cretvalue\nconn: \"user:sup3rs3cretvalue@${env:FLOW_TEST_UNSET}\"\n");
    cfg = load(NULL, err, sizeof err);
    CHECK(cfg && config_resolve(cfg, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "conf/base/credentials.yml:2: credentials key 'conn'");
    CHECK_CONTAINS(err, "FLOW_TEST_UNSET is not set");
    CHECK(!strstr(err, "sup3rs3cret"));
    config_free(cfg);
    project_done();

    project_new();
    put("conf/base/credentials.yml", "password: \"pa55${word_not_a_ref}\"\n");
    cfg = load(NULL, err, sizeof err);
    CHECK(cfg && config_resolve(cfg, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "credentials key 'password'");
    CHECK(!strstr(err, "word_not_a_ref") && !strstr(err, "pa55"));
    config_free(cfg);
    project_done();
}

/* ---- hostile input ------------------------------------------------------------------ */

static void expect_load_error(const char *file, const char *text, const char *needle)
{
    char err[1024];
    project_new();
    put(file, text);
    struct config *cfg = load(NULL, err, sizeof err);
    CHECK(cfg == NULL);
    CHECK_CONTAINS(err, needle);
    config_free(cfg);
    project_done();
}

static void test_hostile_input(void)
{
    char deep[4096] = "a: ", *p = deep + 3;
    for (int i = 0; i < 500; i++)
        *p++ = '[';
    *p = '\0';
    expect_load_error("conf/base/parameters.yml", deep, "nesting deeper than 100 levels");
    char jdeep[4096] = "{\"a\": ";
    p = jdeep + strlen(jdeep);
    for (int i = 0; i < 300; i++)
        *p++ = '[';
    for (int i = 0; i < 300; i++)
        *p++ = ']';
    strcpy(p, "}");
    expect_load_error("conf/base/parameters.json", jdeep, "nesting deeper than 100 levels");
    expect_load_error("conf/base/parameters.yml",
        "a: &a [x, x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
        "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
        "e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]\n"
        "g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f, *f]\n", "too many values");
    expect_load_error("conf/base/parameters.yml", "a: *nope\n", "undefined alias *nope");
    expect_load_error("conf/base/parameters.yml", "a: &x [1, *x]\n", "refers to a value that contains it");
    expect_load_error("conf/base/parameters.yml", "? [a, b]\n: 1\n", "mapping keys must be scalars");
    expect_load_error("conf/base/parameters.yml", "a: \"\xff\xfe\"\n", "conf/base/parameters.yml:");
    expect_load_error("conf/base/parameters.yml", "a:\tb\n\t- c\n", "conf/base/parameters.yml:");
    /* a bad `<<` is reported at its own line, not where its mapping ends */
    expect_load_error("conf/base/parameters.yml", "min_count: 2\n<<: 5\na: 1\nb: 2\nc: 3\n",
                      "conf/base/parameters.yml:2: `<<` merges a mapping");
    expect_load_error("conf/base/parameters.yml", "m:\n  <<:\n    - {a: 1}\n    - 7\n  z: 1\nn: 2\n",
                      "conf/base/parameters.yml:4: `<<` merges a mapping");
    expect_load_error("conf/base/parameters.json", "[1, 2]", "must be an object");
    {
        char err[1024];
        project_new();
        put_n("conf/base/parameters.json", "{\"a\": 1}\0{}", 11);
        CHECK(load(NULL, err, sizeof err) == NULL);
        CHECK_CONTAINS(err, "conf/base/parameters.json:1:9: NUL byte");
        project_done();
    }
    {   /* a file over 64 MiB is refused by name, not read whole (sparse: costs no disk) */
        char err[1024];
        project_new();
        put("conf/base/parameters.yml", "a: 1\n");
        CHECK(truncate("conf/base/parameters.yml", (64L << 20) + 1) == 0);
        CHECK(load(NULL, err, sizeof err) == NULL);
        CHECK_CONTAINS(err, "conf/base/parameters.yml: file larger than 64 MiB");
        CHECK(truncate("conf/base/parameters.yml", 64L << 20) == 0);   /* at the limit: read */
        CHECK(load(NULL, err, sizeof err) == NULL);
        CHECK_CONTAINS(err, "conf/base/parameters.yml:2:1:");   /* parsed: the zeros are bad YAML */
        chmod("conf/base/parameters.yml", 0);
        if (geteuid() != 0) {          /* root reads it anyway */
            CHECK(load(NULL, err, sizeof err) == NULL);
            CHECK_CONTAINS(err, "conf/base/parameters.yml: cannot open: Permission denied");
        }
        project_done();
    }

    /* garbage of every byte value never crashes */
    unsigned seed = 12345;
    for (int round = 0; round < 200; round++) {
        char junk[256];
        for (size_t i = 0; i + 1 < sizeof junk; i++) {
            seed = seed * 1103515245u + 12345u;
            static const char alphabet[] = "ab:-[]{}&*!|>'\"#,? \n\t%@`0.~$";
            junk[i] = alphabet[(seed >> 16) % (sizeof alphabet - 1)];
        }
        junk[sizeof junk - 1] = '\0';
        char err[1024];
        project_new();
        put(round % 2 ? "conf/base/parameters.yml" : "conf/base/parameters.json", junk);
        struct config *cfg = load(NULL, err, sizeof err);
        if (cfg) {
            config_resolve(cfg, err, sizeof err);
            free(config_dump_yaml(cfg, NULL, NULL, 1));
        }
        config_free(cfg);
        project_done();
    }

    /* references that multiply: bounded, not exponential */
    project_new();
    put("conf/base/parameters.yml",
        "a: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\n"
        "b: [\"${params:a}\", \"${params:a}\", \"${params:a}\", \"${params:a}\", \"${params:a}\", "
        "\"${params:a}\", \"${params:a}\", \"${params:a}\", \"${params:a}\", \"${params:a}\"]\n"
        "c: [\"${params:b}\", \"${params:b}\", \"${params:b}\", \"${params:b}\", \"${params:b}\", "
        "\"${params:b}\", \"${params:b}\", \"${params:b}\", \"${params:b}\", \"${params:b}\"]\n"
        "d: [\"${params:c}\", \"${params:c}\", \"${params:c}\", \"${params:c}\", \"${params:c}\", "
        "\"${params:c}\", \"${params:c}\", \"${params:c}\", \"${params:c}\", \"${params:c}\"]\n"
        "e: [\"${params:d}\", \"${params:d}\", \"${params:d}\", \"${params:d}\", \"${params:d}\", "
        "\"${params:d}\", \"${params:d}\", \"${params:d}\", \"${params:d}\", \"${params:d}\"]\n"
        "f: [\"${params:e}\", \"${params:e}\", \"${params:e}\", \"${params:e}\", \"${params:e}\", "
        "\"${params:e}\", \"${params:e}\", \"${params:e}\", \"${params:e}\", \"${params:e}\"]\n"
        "g: [\"${params:f}\", \"${params:f}\", \"${params:f}\", \"${params:f}\", \"${params:f}\", "
        "\"${params:f}\", \"${params:f}\", \"${params:f}\", \"${params:f}\", \"${params:f}\"]\n");
    char err[1024];
    struct config *cfg = load(NULL, err, sizeof err);
    CHECK(cfg && config_resolve(cfg, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "more than");
    config_free(cfg);
    project_done();

    /* NULL and odd arguments are tolerated */
    config_free(NULL);
    CHECK(config_get(NULL, "parameters", "a") == NULL);
    CHECK(config_section(NULL, "parameters") != NULL);
    CHECK(config_redact(NULL, NULL) == NULL);
    char *r = config_redact(NULL, "plain");
    CHECK_STR(r, "plain");
    free(r);
    CHECK(config_resolve(NULL, NULL, 0) == -1);
}

/* A step's output reaches the redactor in pieces cut anywhere (pipe reads): the
 * result must be the same as redacting the whole text, whatever the cuts. */
static char *redact_in_pieces(const struct config *cfg, const char *text, size_t piece)
{
    struct strbuf out = STRBUF_INIT, carry = STRBUF_INIT;
    size_t len = strlen(text);
    for (size_t at = 0; at < len; at += piece) {
        size_t n = len - at < piece ? len - at : piece;
        sb_add(&carry, text + at, n);
        size_t used = config_redact_span(cfg, carry.buf, carry.len, false, &out);
        CHECK(carry.len - used < strlen("hunter2secret"));      /* held back: less than a secret */
        memmove(carry.buf, carry.buf + used, carry.len - used);
        carry.len -= used;
    }
    CHECK(config_redact_span(cfg, carry.buf ? carry.buf : "", carry.len, true, &out) == carry.len);
    sb_release(&carry);
    return sb_detach(&out);
}

static void test_streaming_redaction(void)
{
    project_new();
    put("conf/local/credentials.yml", "db:\n  password: hunter2secret\n  short: hunt\n");
    struct config *cfg = load_ok("local");
    CHECK(cfg != NULL);
    const char *text = "login bob:hunter2secret, hunt, hunter2sec at the end: hunter2secr";
    char *whole = config_redact(cfg, text);
    CHECK_STR(whole, "login bob:***, ***, ***er2sec at the end: ***er2secr");
    for (size_t piece = 1; piece <= strlen(text); piece++) {
        char *r = redact_in_pieces(cfg, text, piece);
        CHECK_STR(r, whole);
        free(r);
    }
    /* without secrets nothing is held back */
    struct strbuf out = STRBUF_INIT;
    CHECK(config_redact_span(NULL, "hunter2", 7, false, &out) == 7);
    CHECK_STR(out.buf, "hunter2");
    sb_release(&out);
    free(whole);
    config_free(cfg);
    project_done();
}

int main(void)
{
    if (!getcwd(home, sizeof home))
        return 2;
    RUN(test_base_only_and_scalar_types);
    RUN(test_sections_by_file_prefix);
    RUN(test_env_deep_merge);
    RUN(test_lists_and_scalars_replace);
    RUN(test_duplicate_key_in_one_env);
    RUN(test_unknown_env_lists_existing);
    RUN(test_missing_base_is_empty);
    RUN(test_yaml_syntax_error);
    RUN(test_json_files);
    RUN(test_anchors_aliases_merge_keys);
    RUN(test_anchor_on_merge_value);
    RUN(test_parameters_subdirectory);
    RUN(test_unread_files_in_subdirectories_warn);
    RUN(test_config_names_that_are_not_files);
    RUN(test_interpolation_env);
    RUN(test_interpolation_env_embedded_text);
    RUN(test_interpolation_missing_env);
    RUN(test_interpolation_globals);
    RUN(test_interpolation_params_typed);
    RUN(test_interpolation_cycle);
    RUN(test_interpolation_escapes_and_errors);
    RUN(test_override_spec_types);
    RUN(test_override_spec_errors);
    RUN(test_override_value);
    RUN(test_origins_and_explain);
    RUN(test_dotted_keys_and_closest);
    RUN(test_dump_round_trip);
    RUN(test_credentials_redaction);
    RUN(test_streaming_redaction);
    RUN(test_hostile_input);
    return CHECK_DONE("config");
}
