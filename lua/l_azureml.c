/* l_azureml.c — flow.azureml: the Azure ML backend as the stdlib sees it.
 *
 *   azureml.load(config) -> client | nil        nil: the environment has no azureml.yml
 *   client:info() -> {dispatch =, workspace =, workspace_id = ARM id, computes = {tag = cluster}, …}
 *   client:compute_for({tags}) -> cluster | nil, why
 *   client:environment_id(env) -> environmentId | nil, why   ("name@latest": asks Azure ML)
 *   client:environment_yaml(env) -> the az ml CLI's reference | nil, why
 *   client:register_component(name, version, body_json) -> ARM id | nil, why
 *   client:connect{ca_file =} -> true | nil, why      picks the credential (no request yet)
 *   client:whoami() -> description, token_error      fetches a token (waits)
 *   client:set_detach(bool)
 *   client:run_job{name =, command =, compute =, …} -> {status =, studio =, error =, …}
 *   client:transfer{op =, datastore =, blob =, path =, folder =, step =, label =} -> {bytes_sent =, …} | nil, why
 *   azureml.job_name(run_id, step, fingerprint, attempt) -> name
 *
 * run_job yields on a step's coroutine (the job is one of the step's waits:
 * stopping the step cancels it) and elsewhere drives the loop until the job
 * is over.  The Lua side hands plain data; settings, the body and the
 * protocol are C's (engine/azureml/). */
#include "flowlua.h"
#include "azureml/amlignore.h"
#include "azureml/blob.h"
#include "azureml/code.h"
#include "azureml/components.h"
#include "azureml/datastore.h"
#include "azureml/environments.h"
#include "azureml/job_body.h"
#include "azureml/jobs.h"
#include "azureml/settings.h"
#include "azureml/snapshot.h"
#include "loop.h"
#include "ui.h"
#include "util.h"

#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>

#define CLIENT_CLASS "flow.azureml.client"
#define JOB_CLASS "flow.azureml.job"

struct lclient {
    struct aml_settings settings;
    bool loaded;
    struct aml_client *client;
};

static struct lclient *check_client(lua_State *L)
{
    struct lclient *c = luaL_checkudata(L, 1, CLIENT_CLASS);
    if (!c->loaded) luaL_error(L, "the Azure ML settings were already freed");
    return c;
}

static int client_gc(lua_State *L)
{
    struct lclient *c = luaL_checkudata(L, 1, CLIENT_CLASS);
    aml_client_free(c->client);
    c->client = NULL;
    if (c->loaded) aml_settings_free(&c->settings);
    c->loaded = false;
    return 0;
}

/* load(config) -> client | nil; raises the settings' error as it is */
static int l_load(lua_State *L)
{
    struct config *cfg = flow_check_config(L, 1);
    struct lclient *c = lua_newuserdatauv(L, sizeof *c, 0);
    memset(c, 0, sizeof *c);
    luaL_setmetatable(L, CLIENT_CLASS);
    char err[1024];
    int rc = aml_settings_load(cfg, &c->settings, err, sizeof err);
    if (rc < 0) return flow_raise(L, err);
    if (rc > 0) return 0;
    c->loaded = true;
    return 1;
}

static void set_field_string(lua_State *L, const char *key, const char *value)
{
    if (!value) return;
    lua_pushstring(L, value);
    lua_setfield(L, -2, key);
}

static void set_bool(lua_State *L, const char *key, bool value)
{
    lua_pushboolean(L, value);
    lua_setfield(L, -2, key);
}

/* info() -> the settings as a table (what `flow list` and the plan need) */
static int l_info(lua_State *L)
{
    const struct aml_settings *s = &check_client(L)->settings;
    static const char *const dispatch[] = { "distributed", "tagged", "all", "none" };
    lua_createtable(L, 0, 20);
    set_field_string(L, "dispatch", dispatch[s->dispatch]);
    set_field_string(L, "subscription_id", s->subscription_id);
    set_field_string(L, "resource_group", s->resource_group);
    set_field_string(L, "workspace", s->workspace);
    char *ws_id = aml_workspace_id(s);
    flow_push_owned(L, ws_id, strlen(ws_id), free);
    lua_setfield(L, -2, "workspace_id");
    set_field_string(L, "experiment_name", s->experiment_name);
    set_field_string(L, "default_compute", s->default_compute);
    set_field_string(L, "environment", s->environment);
    set_field_string(L, "instance_type", s->instance_type);
    set_field_string(L, "shm_size", s->shm_size);
    set_field_string(L, "where", s->where);
    set_field_string(L, "datastore", s->datastore);
    set_field_string(L, "input_mode", s->input_mode);
    set_field_string(L, "output_mode", s->output_mode);
    set_bool(L, "flow_installed", s->flow_installed);
    lua_pushnumber(L, s->timeout);
    lua_setfield(L, -2, "timeout");
    lua_createtable(L, 0, (int)s->n_computes);
    for (size_t i = 0; i < s->n_computes; i++) {
        lua_pushstring(L, s->computes[i].cluster);
        lua_setfield(L, -2, s->computes[i].tag);
    }
    lua_setfield(L, -2, "computes");
    lua_createtable(L, 0, (int)s->n_env_vars);
    for (size_t i = 0; i < s->n_env_vars; i++) {
        lua_pushstring(L, s->env_vars[i].value);
        lua_setfield(L, -2, s->env_vars[i].name);
    }
    lua_setfield(L, -2, "environment_variables");
    return 1;
}

/* The strings of the list at idx, on a userdata the GC frees (they stay
 * alive in the list). */
static const char **string_list(lua_State *L, int idx, size_t *n)
{
    *n = lua_istable(L, idx) ? lua_rawlen(L, idx) : 0;
    const char **v = lua_newuserdatauv(L, (*n + 1) * sizeof *v, 0);
    for (size_t i = 0; i < *n; i++) {
        lua_rawgeti(L, idx, (lua_Integer)i + 1);
        v[i] = lua_tostring(L, -1);
        lua_pop(L, 1);
        if (!v[i]) luaL_error(L, "expected a list of strings");
    }
    return v;
}

/* compute_for(tags) -> cluster | nil, why */
static int l_compute_for(lua_State *L)
{
    struct lclient *c = check_client(L);
    size_t n;
    const char **tags = string_list(L, 2, &n);
    char err[1024];
    const char *cluster = aml_compute_for(&c->settings, tags, n, err, sizeof err);
    if (cluster) {
        lua_pushstring(L, cluster);
        return 1;
    }
    lua_pushnil(L);
    lua_pushstring(L, err);
    return 2;
}

/* tags_name_compute(tags) -> bool */
static int l_tags_name_compute(lua_State *L)
{
    struct lclient *c = check_client(L);
    size_t n;
    const char **tags = string_list(L, 2, &n);
    lua_pushboolean(L, aml_tags_name_compute(&c->settings, tags, n));
    return 1;
}

/* `-v`: each HTTP attempt, as http.c words it (no query string, no header). */
static void trace_line(void *ctx, const char *line)
{
    (void)ctx;
    if (ui_level() >= UI_VERBOSE) ui_info("azureml: %s", line);
}

/* connect{ca_file =} -> true | nil, why */
static int l_connect(lua_State *L)
{
    struct lclient *c = check_client(L);
    if (c->client) {
        lua_pushboolean(L, 1);
        return 1;
    }
    const char *ca = lua_istable(L, 2) ? flow_field_string(L, 2, "ca_file") : NULL;
    struct aml_client_options o = { .ca_file = ca, .trace = trace_line, .pool = flow_work_pool(L) };
    char err[1024];
    c->client = aml_client_new(flow_state_loop(L), &c->settings, &o, err, sizeof err);
    if (!c->client) {
        lua_pushnil(L);
        lua_pushstring(L, err);
        return 2;
    }
    lua_pushboolean(L, 1);
    return 1;
}

static struct aml_client *connected(lua_State *L)
{
    struct lclient *c = check_client(L);
    if (!c->client) luaL_error(L, "azureml: connect first");
    return c->client;
}

static int l_set_detach(lua_State *L)
{
    aml_client_set_detach(connected(L), lua_toboolean(L, 2));
    return 0;
}

/* ---- whoami: the credential and a token fetched with it ----------------- */

struct token_wait {
    bool done;
    char *error;
    double expires_in;
};

static void on_token(void *arg, const char *token, const char *error)
{
    struct token_wait *t = arg;
    t->done = true;
    t->error = token ? NULL : xstrdup(error ? error : "no token");
}

/* whoami() -> description, nil | description, token_error  (blocks) */
static int l_whoami(lua_State *L)
{
    struct aml_client *client = connected(L);
    struct aml_auth *auth = aml_client_auth(client);
    struct token_wait t = { 0 };
    aml_auth_get_token(auth, on_token, &t);
    struct loop *loop = flow_state_loop(L);
    int seen = loop_interrupts(loop);
    while (!t.done && loop_interrupts(loop) == seen) loop_run_once(loop, -1);
    if (!t.done) aml_auth_forget(auth, &t);
    lua_pushstring(L, aml_auth_describe(auth));
    if (!t.done) lua_pushliteral(L, "interrupted");
    else if (t.error) flow_push_owned(L, t.error, strlen(t.error), free);
    else lua_pushnil(L);
    lua_pushnumber(L, aml_auth_expires_in(auth));
    return 3;
}

/* ---- environments -------------------------------------------------------- */

/* One request answered with an ARM id or why not (an environment's latest
 * version, a component's registration), waited for by driving the loop. */
struct id_wait {
    bool done;
    char *id, *error;
};

static void on_id(void *arg, const char *id, const char *error)
{
    struct id_wait *w = arg;
    w->done = true;
    w->id = id ? xstrdup(id) : NULL;
    w->error = error ? xstrdup(error) : NULL;
}

/* -> id | nil, why */
static int await_id(lua_State *L, struct id_wait *w)
{
    struct loop *loop = flow_state_loop(L);
    while (!w->done) loop_run_once(loop, -1);     /* one request; its retries are bounded */
    if (w->id) {
        free(w->error);
        flow_push_owned(L, w->id, strlen(w->id), free);
        return 1;
    }
    lua_pushnil(L);
    flow_push_owned(L, w->error, strlen(w->error), free);
    return 2;
}

/* environment_yaml(environment) -> the reference the az ml CLI's YAML takes
 * | nil, why (flow compile: no request, no credential). */
static int l_environment_yaml(lua_State *L)
{
    check_client(L);
    char err[1024];
    char *ref = aml_environment_yaml(luaL_checkstring(L, 2), err, sizeof err);
    if (!ref) {
        lua_pushnil(L);
        lua_pushstring(L, err);
        return 2;
    }
    flow_push_owned(L, ref, strlen(ref), free);
    return 1;
}

/* environment_id(environment) -> what to send as environmentId | nil, why.
 * Blocks for "name@latest" (one request): call it before the run's steps
 * start, not from one. */
static int l_environment_id(lua_State *L)
{
    struct aml_client *client = connected(L);
    const char *env = luaL_checkstring(L, 2);
    char err[1024];
    bool latest;
    char *id = aml_environment_id(aml_client_settings(client), env, &latest, err, sizeof err);
    if (id) {
        flow_push_owned(L, id, strlen(id), free);
        return 1;
    }
    if (!latest) {
        lua_pushnil(L);
        lua_pushstring(L, err);
        return 2;
    }
    const char *bare = strncmp(env, "azureml:", 8) == 0 ? env + 8 : env;
    char *name = xstrndup(bare, strcspn(bare, "@"));
    struct id_wait w = { 0 };
    aml_environment_latest(client, name, on_id, &w);
    free(name);
    return await_id(L, &w);
}

/* register_component(name, version, body_json) -> the version's ARM id | nil, why.  Blocks (one request): called before a pipeline job is
 * submitted, not from a step. */
static int l_register_component(lua_State *L)
{
    struct aml_client *client = connected(L);
    const char *name = luaL_checkstring(L, 2), *version = luaL_checkstring(L, 3);
    const char *body = luaL_checkstring(L, 4);
    struct id_wait w = { 0 };
    aml_component_register(client, name, version, body, on_id, &w);
    return await_id(L, &w);
}

/* ---- waiting: what run_job, code_id and transfer share ------------------- */

/* A wait of a binding, owned by a userdata on the caller's stack (its __gc
 * frees a wait the step never woke from: the step was dropped).  First in
 * each box, so the box is the wait's callback argument. */
struct wait_box {
    struct step_wait *wait;
    lua_State *co;              /* the step's coroutine, or NULL when blocking */
    bool done;
};

static void box_done(struct step_wait *w, void *arg)
{
    struct wait_box *b = arg;
    b->done = true;
    if (b->co) flow_step_wake(b->co, w);          /* last: the step may drop the box */
}

/* Waits on b->wait, then continues with k: yields on a step's coroutine,
 * else drives the loop (Ctrl-C cancels the wait). */
static int box_await(lua_State *L, struct wait_box *b, lua_KFunction k)
{
    b->done = false;
    if (b->co) {
        flow_step_wait(L, b->wait);
        return lua_yieldk(L, 0, (lua_KContext)b, k);
    }
    step_wait_block(flow_state_loop(L), b->wait, &b->done);
    return k(L, LUA_OK, (lua_KContext)b);
}

static void box_release(struct wait_box *b)
{
    step_wait_free(b->wait);
    b->wait = NULL;
}

/* ---- run_job ------------------------------------------------------------ */

struct job_box {
    struct wait_box w;
    char *step;
};

static int job_gc(lua_State *L)
{
    struct job_box *b = luaL_checkudata(L, 1, JOB_CLASS);
    box_release(&b->w);
    free(b->step);
    b->step = NULL;
    return 0;
}

static void job_event(void *arg, const struct aml_job_info *info)
{
    struct job_box *b = arg;
    if (info->submitted && info->status && strcmp(info->status, "") != 0)
        ui_info("%s: Azure ML job %s is %s%s%s", b->step, info->name, info->status,
                info->studio_url ? " — " : "", info->studio_url ? info->studio_url : "");
}

static int job_continue(lua_State *L, int status, lua_KContext ctx)
{
    (void)status;
    struct wait_box *b = (struct wait_box *)ctx;
    const struct aml_job_info *info = aml_job_wait_info(b->wait);
    lua_createtable(L, 0, 8);
    set_field_string(L, "name", info->name);
    set_field_string(L, "status", info->status);
    set_field_string(L, "studio", info->studio_url);
    set_field_string(L, "error", info->error);
    set_bool(L, "submitted", info->submitted);
    set_bool(L, "cancelled", info->cancelled);
    set_bool(L, "detached", info->detached);
    set_bool(L, "timed_out", info->timed_out);
    set_bool(L, "not_found", info->not_found);
    set_bool(L, "terminal", info->terminal);
    set_bool(L, "ok", info->status && strcmp(info->status, "Completed") == 0);
    box_release(b);
    return 1;
}

static int int_field(lua_State *L, int t, const char *key)
{
    lua_getfield(L, t, key);
    int v = (int)lua_tointeger(L, -1);
    lua_pop(L, 1);
    return v;
}

/* The spec's {K = V} table at field `key` as a sorted env list (strings
 * kept alive in the table). */
static struct aml_env_var *env_list(lua_State *L, int t, const char *key, size_t *n)
{
    *n = 0;
    if (lua_getfield(L, t, key) != LUA_TTABLE) {
        lua_pop(L, 1);
        return NULL;
    }
    int tbl = lua_gettop(L);
    size_t count = 0;
    for (lua_pushnil(L); lua_next(L, tbl); lua_pop(L, 1)) count++;
    struct aml_env_var *v = lua_newuserdatauv(L, (count + 1) * sizeof *v, 0);
    lua_insert(L, tbl);                           /* keep it below the table */
    tbl++;
    for (lua_pushnil(L); lua_next(L, tbl); lua_pop(L, 1)) {
        if (lua_type(L, -2) != LUA_TSTRING || !lua_isstring(L, -1)) luaL_error(L, "run_job: %s must map names to strings", key);
        lua_pushvalue(L, -1);
        lua_tostring(L, -1);                     /* numbers become strings in place */
        lua_pop(L, 1);
        v[*n].name = (char *)lua_tostring(L, -2);
        v[*n].value = (char *)lua_tostring(L, -1);
        (*n)++;
    }
    lua_pop(L, 1);                               /* the table; the userdata stays */
    return v;
}

/* Settings' environment_variables, then the step's (which win). */
static struct aml_env_var *merged_env(lua_State *L, const struct aml_settings *s, int spec, size_t *n)
{
    size_t n_step;
    struct aml_env_var *step = env_list(L, spec, "env", &n_step);
    struct aml_env_var *all = lua_newuserdatauv(L, (s->n_env_vars + n_step + 1) * sizeof *all, 0);
    *n = 0;
    for (size_t i = 0; i < s->n_env_vars; i++) {
        bool overridden = false;
        for (size_t k = 0; k < n_step && !overridden; k++) overridden = strcmp(step[k].name, s->env_vars[i].name) == 0;
        if (!overridden) all[(*n)++] = s->env_vars[i];
    }
    for (size_t k = 0; k < n_step; k++) all[(*n)++] = step[k];
    return all;
}

/* The spec's list at field `key` of {name =, type =, uri =, mode =} as
 * bindings (strings kept alive in the list, the array in a userdata left on
 * the stack); raises for a type or mode Azure ML does not take. */
static struct aml_data_binding *binding_list(lua_State *L, int spec, const char *key, bool output, size_t *n)
{
    *n = 0;
    lua_getfield(L, spec, key);
    int list = lua_gettop(L);
    size_t count = lua_istable(L, list) ? (size_t)luaL_len(L, list) : 0;
    struct aml_data_binding *b = lua_newuserdatauv(L, (count + 1) * sizeof *b, 0);
    lua_insert(L, list);                          /* the userdata below the list, which stays too */
    list++;
    for (size_t i = 0; i < count; i++) {
        lua_rawgeti(L, list, (lua_Integer)i + 1);
        int t = lua_gettop(L);
        if (!lua_istable(L, t)) luaL_error(L, "run_job: %s[%d] must be a table", key, (int)i + 1);
        b[i] = (struct aml_data_binding){ flow_field_string(L, t, "name"), flow_field_string(L, t, "type"),
                                          flow_field_string(L, t, "uri"), flow_field_string(L, t, "mode") };
        if (!b[i].name) luaL_error(L, "run_job: %s[%d] has no name", key, (int)i + 1);
        if (b[i].type && strcmp(b[i].type, "uri_file") != 0 && strcmp(b[i].type, "uri_folder") != 0)
            luaL_error(L, "run_job: %s.%s: type must be uri_file or uri_folder", key, b[i].name);
        if (b[i].mode && !aml_valid_data_mode(b[i].mode, output))
            luaL_error(L, "run_job: %s.%s: mode %s is not one for %s", key, b[i].name, b[i].mode, key);
        lua_pop(L, 1);                            /* the strings live in the list */
    }
    *n = count;
    return b;
}

/* The body of the job from spec (every string alive on the Lua stack);
 * raises a message for a spec Azure ML cannot take.  Making the body is its
 * last act: nothing raises while the caller holds it. */
static char *build_body(lua_State *L, struct aml_client *client, int spec)
{
    const struct aml_settings *s = aml_client_settings(client);
    const char *env = flow_field_string(L, spec, "environment_id");   /* resolved before the run */
    const char *compute = flow_field_string(L, spec, "compute");
    const char *command = flow_field_string(L, spec, "command");
    if (!command || !*command) luaL_error(L, "run_job: no command");
    if (!compute) luaL_error(L, "run_job: no compute");
    char err[1024];
    bool latest;
    char *env_id = env ? xstrdup(env) : aml_environment_id(s, s->environment, &latest, err, sizeof err);
    if (!env_id) luaL_error(L, "%s", latest ? "the environment's @latest version was not looked up" : err);
    flow_push_owned(L, env_id, strlen(env_id), free);
    int env_idx = lua_gettop(L);
    char *ws = aml_workspace_id(s);
    flow_push_owned(L, ws, strlen(ws), free);
    lua_pushfstring(L, "%s/computes/%s", lua_tostring(L, -1), compute);
    int compute_idx = lua_gettop(L);
    size_t n_env, n_tags;
    struct aml_env_var *vars = merged_env(L, s, spec, &n_env);
    struct aml_env_var *tag_vars = env_list(L, spec, "tags", &n_tags);
    struct aml_tag *tags = lua_newuserdatauv(L, (n_tags + 1) * sizeof *tags, 0);
    for (size_t i = 0; i < n_tags; i++) tags[i] = (struct aml_tag){ tag_vars[i].name, tag_vars[i].value };
    lua_getfield(L, spec, "timeout");
    double timeout = lua_isnumber(L, -1) ? lua_tonumber(L, -1) : s->timeout;
    lua_pop(L, 1);
    size_t n_inputs, n_outputs;
    struct aml_data_binding *inputs = binding_list(L, spec, "inputs", false, &n_inputs);
    struct aml_data_binding *outputs = binding_list(L, spec, "outputs", true, &n_outputs);
    const char *it = flow_field_string(L, spec, "instance_type"), *shm = flow_field_string(L, spec, "shm_size");
    struct aml_job_spec js = {
        .display_name = flow_field_string(L, spec, "display_name"), .experiment = s->experiment_name,
        .command = command, .code_id = flow_field_string(L, spec, "code_id"),
        .environment_id = lua_tostring(L, env_idx), .compute_id = lua_tostring(L, compute_idx),
        .instance_count = int_field(L, spec, "instance_count"),
        .instance_type = it ? it : s->instance_type, .shm_size = shm ? shm : s->shm_size,
        .framework = aml_framework_from_name(flow_field_string(L, spec, "framework")),
        .processes_per_node = int_field(L, spec, "processes_per_node"),
        .worker_count = int_field(L, spec, "worker_count"),
        .parameter_server_count = int_field(L, spec, "parameter_server_count"),
        .timeout = timeout, .env = vars, .n_env = n_env, .tags = tags, .n_tags = n_tags,
        .inputs = inputs, .n_inputs = n_inputs, .outputs = outputs, .n_outputs = n_outputs,
        .sweep_json = flow_field_string(L, spec, "sweep"),
    };
    char *body = aml_job_body(&js);
    if (!body) luaL_error(L, "run_job: sweep must be a JSON object");
    return body;
}

/* run_job(spec) -> {name =, status =, ok =, studio =, error =, submitted =, cancelled =, detached =}
 * | nil, why (the job could not be started).  spec.body: the job's body as
 * JSON text, made by the caller (a pipeline job), instead of one built from
 * the spec's fields; spec.sweep: a Sweep job's own fields as JSON text (the
 * spec's command job becomes its trial: job_body.h); spec.label: what the
 * status lines are about (default "step '<display_name>'"). */
static int l_run_job(lua_State *L)
{
    struct aml_client *client = connected(L);
    luaL_checktype(L, 2, LUA_TTABLE);
    const char *name = flow_field_string(L, 2, "name");
    const char *step = flow_field_string(L, 2, "display_name");
    if (!name || !step) return luaL_error(L, "run_job: the spec needs a name and a display_name");
    struct job_box *b = lua_newuserdatauv(L, sizeof *b, 0);
    memset(b, 0, sizeof *b);
    luaL_setmetatable(L, JOB_CLASS);
    int box = lua_gettop(L);
    lua_getfield(L, 2, "attach_only");
    lua_getfield(L, 2, "peek");
    lua_getfield(L, 2, "cancel");
    bool peek = lua_toboolean(L, -2), cancel = lua_toboolean(L, -1);
    bool attach_only = lua_toboolean(L, -3) || peek || cancel;      /* an existing job: no body */
    lua_pop(L, 3);
    /* a pipeline job's body comes made (flow.compile); else build_body's last
     * act is making the body: nothing raises after it */
    const char *made = flow_field_string(L, 2, "body"), *label = flow_field_string(L, 2, "label");
    b->step = label ? xstrdup(label) : xasprintf("step '%s'", step);     /* the box frees it */
    char *body = attach_only ? NULL : made ? xstrdup(made) : build_body(L, client, 2);
    lua_settop(L, box);
    b->w.co = flow_step_can_yield(L) ? L : NULL;
    char err[1024];
    struct step_wait *w = peek ? aml_job_peek(client, name, box_done, b, err, sizeof err)
                          : cancel ? aml_job_cancel_existing(client, name, job_event, box_done, b, err, sizeof err)
                                   : aml_job_start(client, name, body, job_event, box_done, b, err, sizeof err);
    free(body);
    if (!w) {
        lua_pushnil(L);
        lua_pushstring(L, err);
        return 2;
    }
    b->w.wait = w;
    double deadline = flow_step_deadline(L);
    if (deadline > 0 && !peek) aml_job_set_deadline(w, deadline);
    return box_await(L, &b->w, job_continue);
}

static int code_continue(lua_State *L, int status, lua_KContext ctx)
{
    (void)status;
    struct wait_box *b = (struct wait_box *)ctx;
    const char *id = aml_code_wait_id(b->wait);
    int n = 1;
    if (id) lua_pushstring(L, id);
    else {
        const char *err = aml_code_wait_error(b->wait);
        lua_pushnil(L);
        lua_pushstring(L, err ? err : "the code snapshot was not made");
        n = 2;
    }
    box_release(b);
    return n;
}

/* code_id(root) -> the ARM id of the run's code asset | nil, why.  The first
 * call scans, hashes and (unless Azure ML has the same files) uploads the
 * project; later ones wait for the same result. */
static int l_code_id(lua_State *L)
{
    struct aml_client *client = connected(L);
    const char *root = luaL_checkstring(L, 2);
    struct job_box *b = lua_newuserdatauv(L, sizeof *b, 0);
    memset(b, 0, sizeof *b);
    luaL_setmetatable(L, JOB_CLASS);
    b->w.co = flow_step_can_yield(L) ? L : NULL;
    b->w.wait = aml_code_wait(client, root, box_done, b);
    return box_await(L, &b->w, code_continue);
}


/* ---- transfer: data between this machine and a datastore ----------------- */

#define TRANSFER_CLASS "flow.azureml.transfer"
#define TRANSFER_PROGRESS_MIN (32ull << 20)    /* a progress line for transfers this large */

/* One upload or download.  Two waits in turn: the datastore's container,
 * then the transfer itself. */
enum transfer_op { T_UPLOAD, T_DOWNLOAD, T_STAT };

struct transfer_box {
    struct wait_box w;
    enum transfer_op op;
    bool folder;
    char *label;                /* "input 'train_set'": what a message is about */
    char *step;                 /* the step's name, or NULL */
    char *path, *blob;
    double started;
};

static int transfer_gc(lua_State *L)
{
    struct transfer_box *b = luaL_checkudata(L, 1, TRANSFER_CLASS);
    box_release(&b->w);
    free(b->label);
    free(b->step);
    free(b->path);
    free(b->blob);
    b->label = b->step = b->path = b->blob = NULL;
    return 0;
}

/* Large transfers show their bytes and rate as blob.c reports them (every
 * 2 s; the live display keeps messages above it). */
static void transfer_progress(void *arg, const struct blob_progress *p)
{
    struct transfer_box *b = arg;
    if (p->bytes_total < TRANSFER_PROGRESS_MIN || ui_level() < UI_NORMAL) return;
    double secs = monotonic_seconds() - b->started;
    ui_info("%s%s%s%s: %s %.1f of %.1f MB (%zu of %zu files)%s%.1f MB/s", b->step ? "step '" : "",
            b->step ? b->step : "", b->step ? "': " : "", b->label,
            b->op == T_UPLOAD ? "uploaded" : "downloaded", (double)p->bytes_done / 1e6, (double)p->bytes_total / 1e6,
            p->files_done, p->files_total, secs > 0 ? ", " : "", secs > 0 ? (double)p->bytes_sent / 1e6 / secs : 0);
}

static int transfer_fail(lua_State *L, struct transfer_box *b, const char *why)
{
    lua_pushnil(L);
    lua_pushfstring(L, "%s: %s", b->label, why);
    box_release(&b->w);
    return 2;
}

static int transfer_finished(lua_State *L, int status, lua_KContext ctx)
{
    (void)status;
    struct transfer_box *b = (struct transfer_box *)ctx;
    const char *err = blob_wait_error(b->w.wait);
    if (err) return transfer_fail(L, b, err);
    const struct blob_progress *p = blob_wait_progress(b->w.wait);
    lua_createtable(L, 0, 5);
    if (b->op == T_STAT) {
        lua_pushstring(L, blob_wait_stat_hash(b->w.wait));
        lua_setfield(L, -2, "hash");
    }
    lua_pushinteger(L, (lua_Integer)p->bytes_total);
    lua_setfield(L, -2, "bytes");
    lua_pushinteger(L, (lua_Integer)p->bytes_sent);
    lua_setfield(L, -2, "bytes_sent");
    lua_pushinteger(L, (lua_Integer)p->files_total);
    lua_setfield(L, -2, "files");
    lua_pushinteger(L, (lua_Integer)p->files_skipped);
    lua_setfield(L, -2, "files_skipped");
    box_release(&b->w);
    return 1;
}

static int transfer_with_container(lua_State *L, int status, lua_KContext ctx)
{
    (void)status;
    struct transfer_box *b = (struct transfer_box *)ctx;
    struct blob_container *c = aml_datastore_wait_container(b->w.wait);
    if (!c) return transfer_fail(L, b, aml_datastore_wait_error(b->w.wait));
    box_release(&b->w);
    b->started = monotonic_seconds();
    b->w.wait = b->op == T_UPLOAD ? blob_upload(c, b->path, b->blob, transfer_progress, box_done, b)
                : b->op == T_DOWNLOAD ? blob_download(c, b->blob, b->folder, b->path, transfer_progress, box_done, b)
                                      : blob_stat(c, b->blob, b->folder, box_done, b);
    return box_await(L, &b->w, transfer_finished);
}

/* transfer{op = "upload"|"download"|"stat", datastore =, blob =, path =, folder =, step =, label =}
 *   -> {bytes =, bytes_sent =, files =, files_skipped =, hash =} | nil, why
 * upload: the file or folder at path to blob (a folder: under blob/);
 * download: blob (or every blob under blob/, folder = true) to path;
 * stat: what is there (no path), as a hash that changes when it does. */
static int l_transfer(lua_State *L)
{
    struct aml_client *client = connected(L);
    luaL_checktype(L, 2, LUA_TTABLE);
    const char *op = flow_field_string(L, 2, "op"), *ds = flow_field_string(L, 2, "datastore");
    const char *blob = flow_field_string(L, 2, "blob"), *path = flow_field_string(L, 2, "path");
    const char *label = flow_field_string(L, 2, "label"), *step = flow_field_string(L, 2, "step");
    static const char *const ops[] = { "upload", "download", "stat" };
    int k = 0;
    while (op && k < 3 && strcmp(op, ops[k]) != 0) k++;
    if (!op || k == 3 || !ds || !blob || (!path && k != T_STAT))
        return luaL_error(L, "transfer: needs op (upload, download or stat), datastore, blob and path");
    lua_getfield(L, 2, "folder");
    bool folder = lua_toboolean(L, -1);
    lua_pop(L, 1);
    struct transfer_box *b = lua_newuserdatauv(L, sizeof *b, 0);
    memset(b, 0, sizeof *b);
    luaL_setmetatable(L, TRANSFER_CLASS);
    *b = (struct transfer_box){ .w.co = flow_step_can_yield(L) ? L : NULL, .op = (enum transfer_op)k,
                                .folder = folder, .label = xstrdup(label ? label : "azureml"),
                                .step = step ? xstrdup(step) : NULL, .path = xstrdup(path ? path : ""),
                                .blob = xstrdup(blob) };
    b->w.wait = aml_datastore_wait(client, ds, box_done, b);
    return box_await(L, &b->w, transfer_with_container);
}

static const luaL_Reg client_methods[] = {
    { "code_id", l_code_id },
    { "environment_id", l_environment_id },
    { "environment_yaml", l_environment_yaml },
    { "register_component", l_register_component },
    { "info", l_info },
    { "compute_for", l_compute_for },
    { "tags_name_compute", l_tags_name_compute },
    { "connect", l_connect },
    { "set_detach", l_set_detach },
    { "whoami", l_whoami },
    { "run_job", l_run_job },
    { "transfer", l_transfer },
    { NULL, NULL }
};

/* job_name(run_id, step, fingerprint, attempt) -> name */
static int l_job_name(lua_State *L)
{
    char *name = aml_job_name(luaL_checkstring(L, 1), luaL_checkstring(L, 2), luaL_optstring(L, 3, ""),
                              (int)luaL_optinteger(L, 4, 1));
    flow_push_owned(L, name, strlen(name), free);
    return 1;
}

/* code_ignores(root, rel) -> whether the directory rel (relative to root) is
 * left out of the code az ml uploads from root (its .amlignore, else its
 * .gitignore, read as the snapshot reads them) | nil, why */
static int l_code_ignores(lua_State *L)
{
    const char *root = luaL_checkstring(L, 1), *rel = luaL_checkstring(L, 2);
    struct amlignore *ig = amlignore_new();
    const char *which;
    char err[1024];
    int rc = snapshot_load_ignore_file(root, ig, &which, err, sizeof err);
    bool excluded = rc == 0 && amlignore_excludes_dir(ig, rel);
    amlignore_free(ig);                                  /* before anything that may raise */
    if (rc != 0) {
        lua_pushnil(L);
        lua_pushstring(L, err);
        return 2;
    }
    lua_pushboolean(L, excluded);
    return 1;
}

static const luaL_Reg azureml_funcs[] = {
    { "load", l_load },
    { "code_ignores", l_code_ignores },
    { "job_name", l_job_name },
    { NULL, NULL }
};

int luaopen_flow_azureml(lua_State *L)
{
    flow_new_class(L, CLIENT_CLASS, client_methods, client_gc);
    static const luaL_Reg no_methods[] = { { NULL, NULL } };
    flow_new_class(L, JOB_CLASS, no_methods, job_gc);
    flow_new_class(L, TRANSFER_CLASS, no_methods, transfer_gc);
    luaL_newlib(L, azureml_funcs);
    return 1;
}
