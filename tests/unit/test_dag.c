/* test_dag.c — graph construction, validation messages and topological order. */
#include "check.h"
#include "dag.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Every test runs twice: with the graph's own keys for its names, and with
 * keys of the caller's (dag_key_names), as flow.dag.build gives the ids of
 * the names node{} interned: `ids` stands for that store, which has every
 * name a step gives (a declared dataset's only if a step names it). */
static bool keyed;
static struct strmap ids;

static struct dag *new_dag(void)
{
    struct dag *d = dag_new();
    if (keyed) dag_key_names(d, &ids, ids.count);
    return d;
}

static uint32_t key_of(const char *name)
{
    struct strmap_slot *slot = strmap_slot(&ids, name);
    if (!slot->key) strmap_fill(&ids, slot, name, ids.count);
    return slot->value;
}

/* dag_add_step, with the step's keys when the graph takes them. */
static long add_spec(struct dag *d, struct dag_step *s, char *err, size_t errlen)
{
    uint32_t keys[40];
    if (keyed) {
        keys[0] = key_of(s->name);
        for (size_t k = 0; k < s->n_inputs; k++) keys[1 + k] = key_of(s->inputs[k].dataset);
        for (size_t k = 0; k < s->n_outputs; k++) keys[1 + s->n_inputs + k] = key_of(s->outputs[k].dataset);
        s->keys = keys;
    }
    long rc = dag_add_step(d, s, err, errlen);
    s->keys = NULL;
    return rc;
}

/* Adds a step declared at `where` (NULL: unknown): ins and outs are
 * NULL-terminated dataset lists. */
static long add_at(struct dag *d, const char *name, const char *where, const char *const *ins,
                   const char *const *outs, char *err, size_t errlen)
{
    struct dag_io in[16] = { { 0 } }, out[16] = { { 0 } };
    struct dag_step s = { 0 };
    s.name = (char *)name;
    s.where = (char *)where;
    for (; ins && ins[s.n_inputs]; s.n_inputs++) in[s.n_inputs].dataset = (char *)ins[s.n_inputs];
    for (; outs && outs[s.n_outputs]; s.n_outputs++) out[s.n_outputs].dataset = (char *)outs[s.n_outputs];
    s.inputs = in;
    s.outputs = out;
    return add_spec(d, &s, err, errlen);
}

static long add(struct dag *d, const char *name, const char *const *ins, const char *const *outs,
                char *err, size_t errlen)
{
    return add_at(d, name, NULL, ins, outs, err, errlen);
}

#define L(...) ((const char *const[]){ __VA_ARGS__, NULL })

static char err[4096];

static const char *order_names(struct dag *d)
{
    static char buf[1024];
    buf[0] = '\0';
    for (size_t k = 0; k < d->n_steps; k++) {
        if (k) strcat(buf, " ");
        strcat(buf, d->steps[d->order[k]].name);
    }
    return buf;
}

static void test_linear_order(void)
{
    struct dag *d = new_dag();
    add(d, "c", L("y"), L("z"), err, sizeof err);
    add(d, "b", L("x"), L("y"), err, sizeof err);
    add(d, "a", NULL, L("x"), err, sizeof err);
    CHECK(dag_finalize(d, err, sizeof err) == 0);
    CHECK_STR(order_names(d), "a b c");
    CHECK(d->steps[0].n_deps == 1 && d->steps[0].deps[0] == 1);
    CHECK(d->steps[2].n_dependents == 1 && d->steps[2].dependents[0] == 1);
    dag_free(d);
}

/* Among ready steps, declaration order decides. */
static void test_stable_order(void)
{
    struct dag *d = new_dag();
    add(d, "late_root", NULL, L("r2"), err, sizeof err);
    add(d, "join", L("r1", "r2"), L("j"), err, sizeof err);
    add(d, "early_root", NULL, L("r1"), err, sizeof err);
    add(d, "independent", NULL, L("i"), err, sizeof err);
    CHECK(dag_finalize(d, err, sizeof err) == 0);
    CHECK_STR(order_names(d), "late_root early_root join independent");
    dag_free(d);
}

static void test_diamond_deps_unique(void)
{
    struct dag *d = new_dag();
    add(d, "src", NULL, L("a", "b"), err, sizeof err);
    add(d, "use", L("a", "b", "a"), L("c"), err, sizeof err);
    CHECK(dag_finalize(d, err, sizeof err) == 0);
    CHECK(d->steps[1].n_deps == 1);
    CHECK(d->steps[0].n_dependents == 1);
    dag_free(d);
}

/* Deps keep input order, dependents step order, each a slice of the graph's
 * one edge array; the graph's names are its own copies (the caller's buffers
 * change after dag_add_step) and an arg not given is the dataset's name.  A
 * graph whose finalize failed on a cycle keeps its edges (for the message)
 * and is freed whole. */
static void test_edges_and_copies(void)
{
    struct dag *d = new_dag();
    char name[16], ds[16];
    strcpy(name, "p");
    strcpy(ds, "x");
    add(d, name, NULL, L(ds), err, sizeof err);
    strcpy(name, "q");
    strcpy(ds, "y");
    add(d, name, NULL, L(ds), err, sizeof err);
    strcpy(name, "zzzz");
    strcpy(ds, "zzzz");
    add(d, "use1", L("y", "x", "parameters", "params:a", "y"), L("u1"), err, sizeof err);
    add(d, "use2", L("x"), L("u2"), err, sizeof err);
    add(d, "use3", L("u1", "u2", "y"), L("u3"), err, sizeof err);
    CHECK(dag_finalize(d, err, sizeof err) == 0);
    CHECK_STR(d->steps[0].name, "p");
    CHECK_STR(d->steps[1].outputs[0].dataset, "y");
    CHECK(d->steps[1].outputs[0].arg == d->steps[1].outputs[0].dataset);
    CHECK(d->steps[2].n_deps == 2 && d->steps[2].deps[0] == 1 && d->steps[2].deps[1] == 0);
    CHECK(d->steps[4].n_deps == 3 && d->steps[4].deps[0] == 2 && d->steps[4].deps[1] == 3 &&
          d->steps[4].deps[2] == 1);
    CHECK(d->steps[0].n_dependents == 2 && d->steps[0].dependents[0] == 2 && d->steps[0].dependents[1] == 3);
    CHECK(d->steps[1].n_dependents == 2 && d->steps[1].dependents[0] == 2 && d->steps[1].dependents[1] == 4);
    CHECK(d->steps[4].n_dependents == 0);
    CHECK(dag_find_step(d, "q") == 1 && dag_find_dataset(d, "u3") >= 0 && dag_find_step(d, "zzzz") < 0);
    dag_free(d);

    d = new_dag();
    add(d, "a", L("b_out"), L("a_out"), err, sizeof err);
    add(d, "b", L("a_out"), L("b_out"), err, sizeof err);
    CHECK(dag_finalize(d, err, sizeof err) != 0);
    CHECK_CONTAINS(err, "cycle");
    CHECK(d->steps[0].n_deps == 1 && d->steps[0].n_dependents == 1);
    dag_free(d);
}

static void test_cycle_path(void)
{
    struct dag *d = new_dag();
    add(d, "start", NULL, L("s"), err, sizeof err);
    add(d, "a", L("s", "c_out"), L("a_out"), err, sizeof err);
    add(d, "b", L("a_out"), L("b_out"), err, sizeof err);
    add(d, "c", L("b_out"), L("c_out"), err, sizeof err);
    CHECK(dag_finalize(d, err, sizeof err) != 0);
    CHECK_CONTAINS(err, "cycle: a -> b -> c -> a");
    dag_free(d);
}

static void test_self_cycle(void)
{
    struct dag *d = new_dag();
    add(d, "loop", L("x"), L("x"), err, sizeof err);
    CHECK(dag_finalize(d, err, sizeof err) != 0);
    CHECK_CONTAINS(err, "cycle: loop -> loop");
    dag_free(d);
}

static void test_produced_twice(void)
{
    struct dag *d = new_dag();
    add(d, "first", NULL, L("model"), err, sizeof err);
    add(d, "second", NULL, L("model"), err, sizeof err);
    CHECK(dag_finalize(d, err, sizeof err) != 0);
    CHECK_CONTAINS(err, "dataset 'model' is produced by two steps, 'first' and 'second'");
    dag_free(d);
}

/* Every dataset with more than one producer, each with all its producers,
 * and a count past the twentieth. */
static void test_produced_twice_lists_every_clash(void)
{
    struct dag *d = new_dag();
    add(d, "a", NULL, L("x", "y"), err, sizeof err);
    add(d, "b", NULL, L("x", "y"), err, sizeof err);
    add(d, "c", NULL, L("x"), err, sizeof err);
    CHECK(dag_finalize(d, err, sizeof err) != 0);
    CHECK_CONTAINS(err, "2 datasets are produced by more than one step");
    CHECK_CONTAINS(err, "'x', by 'a', 'b' and 'c'");
    CHECK_CONTAINS(err, "'y', by 'a' and 'b'");
    dag_free(d);

    d = new_dag();
    add(d, "m", NULL, L("model"), err, sizeof err);
    add(d, "n", NULL, L("model"), err, sizeof err);
    add(d, "o", NULL, L("model"), err, sizeof err);
    CHECK(dag_finalize(d, err, sizeof err) != 0);
    CHECK_CONTAINS(err, "dataset 'model' is produced by several steps, 'm', 'n' and 'o'");
    dag_free(d);

    d = new_dag();
    char name[32], out[32];
    for (int i = 0; i < 25; i++) {
        snprintf(out, sizeof out, "d%d", i);
        for (int k = 0; k < 2; k++) {
            snprintf(name, sizeof name, "s%d_%d", i, k);
            add(d, name, NULL, L(out), err, sizeof err);
        }
    }
    CHECK(dag_finalize(d, err, sizeof err) != 0);
    CHECK_CONTAINS(err, "25 datasets are produced by more than one step");
    CHECK_CONTAINS(err, "'d19', by 's19_0' and 's19_1'");
    CHECK(strstr(err, "'d20'") == NULL);
    CHECK_CONTAINS(err, "... and 5 more");
    dag_free(d);
}

static void test_output_twice_in_one_step(void)
{
    struct dag *d = new_dag();
    add(d, "s", NULL, L("m", "m"), err, sizeof err);
    CHECK(dag_finalize(d, err, sizeof err) != 0);
    CHECK_CONTAINS(err, "step 's' lists output 'm' twice");
    dag_free(d);
}

/* Every graph error names each step it blames with where the step was declared. */
static void test_errors_name_where_steps_are(void)
{
    struct dag *d = new_dag();
    add_at(d, "a", "p.lua:3", L("y"), L("x"), err, sizeof err);
    add_at(d, "b", "p.lua:4", L("x"), L("y"), err, sizeof err);
    CHECK(dag_finalize(d, err, sizeof err) != 0);
    CHECK_CONTAINS(err, "the pipeline has a cycle: a (p.lua:3) -> b (p.lua:4) -> a\n");
    dag_free(d);

    d = new_dag();
    add_at(d, "a", "p.lua:3", NULL, L("x"), err, sizeof err);
    add_at(d, "b", "p.lua:4", NULL, L("x"), err, sizeof err);
    CHECK(dag_finalize(d, err, sizeof err) != 0);
    CHECK_CONTAINS(err, "dataset 'x' is produced by two steps, 'a' (p.lua:3) and 'b' (p.lua:4):");
    dag_free(d);

    d = new_dag();
    add_at(d, "a", "p.lua:3", NULL, L("x", "y"), err, sizeof err);
    add_at(d, "b", "p.lua:4", NULL, L("x", "y"), err, sizeof err);
    add_at(d, "c", "p.lua:5", NULL, L("x"), err, sizeof err);
    CHECK(dag_finalize(d, err, sizeof err) != 0);
    CHECK_CONTAINS(err, "'x', by 'a' (p.lua:3), 'b' (p.lua:4) and 'c' (p.lua:5)");
    dag_free(d);

    d = new_dag();
    add_at(d, "s", "p.lua:7", NULL, L("m", "m"), err, sizeof err);
    CHECK(dag_finalize(d, err, sizeof err) != 0);
    CHECK_STR(err, "step 's' (p.lua:7) lists output 'm' twice");
    dag_free(d);

    d = new_dag();
    add_at(d, "s", "p.lua:8", NULL, L("params:x"), err, sizeof err);
    CHECK(dag_finalize(d, err, sizeof err) != 0);
    CHECK_CONTAINS(err, "step 's' (p.lua:8) declares 'params:x' as an output");
    dag_free(d);

    d = new_dag();
    add_at(d, "a", "p.lua:9", L("raw"), L("x"), err, sizeof err);
    CHECK(dag_finalize(d, err, sizeof err) != 0);
    CHECK_CONTAINS(err, "'raw', needed by 'a' (p.lua:9)");
    dag_free(d);
}

static void test_missing_inputs(void)
{
    struct dag *d = new_dag();
    add(d, "a", L("raw"), L("x"), err, sizeof err);
    add(d, "b", L("raw", "other"), L("y"), err, sizeof err);
    add(d, "c", L("x", "params:lr", "parameters"), L("z"), err, sizeof err);
    CHECK(dag_finalize(d, err, sizeof err) != 0);
    CHECK_CONTAINS(err, "2 input datasets");
    CHECK_CONTAINS(err, "'raw', needed by 'a', 'b'");
    CHECK_CONTAINS(err, "'other', needed by 'b'");
    CHECK(strstr(err, "params:lr") == NULL);
    dag_free(d);
}

static void test_declared_input_ok(void)
{
    struct dag *d = new_dag();
    add(d, "a", L("raw"), L("x"), err, sizeof err);
    dag_declare_dataset(d, "raw");
    CHECK(dag_finalize(d, err, sizeof err) == 0);
    CHECK(dag_find_dataset(d, "raw") >= 0);
    dag_free(d);
}

static void test_duplicate_name(void)
{
    struct dag *d = new_dag();
    CHECK(add(d, "same", NULL, L("a"), err, sizeof err) == 0);
    CHECK(add(d, "same", NULL, L("b"), err, sizeof err) == -1);
    CHECK_CONTAINS(err, "two steps are named 'same'");
    CHECK(dag_find_step(d, "same") == 0);
    dag_free(d);
}

static void test_param_output_rejected(void)
{
    struct dag *d = new_dag();
    add(d, "s", NULL, L("params:x"), err, sizeof err);
    CHECK(dag_finalize(d, err, sizeof err) != 0);
    CHECK_CONTAINS(err, "parameters are read-only");
    dag_free(d);
}

/* 100,000 steps in a chain: no recursion, no quadratic work. */
static void test_large_chain(void)
{
    struct dag *d = new_dag();
    char name[32], in[32], out[32];
    for (int i = 0; i < 100000; i++) {
        snprintf(name, sizeof name, "s%d", i);
        snprintf(in, sizeof in, "d%d", i - 1);
        snprintf(out, sizeof out, "d%d", i);
        add(d, name, i ? L(in) : NULL, L(out), err, sizeof err);
    }
    CHECK(dag_finalize(d, err, sizeof err) == 0);
    CHECK(d->order[0] == 0 && d->order[99999] == 99999);
    dag_free(d);
}

/*  a -> b -> d,  a -> c -> d,  e alone */
static struct dag *diamond(void)
{
    struct dag *d = new_dag();
    add(d, "a", NULL, L("x"), err, sizeof err);
    add(d, "b", L("x"), L("y"), err, sizeof err);
    add(d, "c", L("x"), L("z"), err, sizeof err);
    add(d, "d", L("y", "z"), L("w"), err, sizeof err);
    add(d, "e", NULL, L("v"), err, sizeof err);
    dag_finalize(d, err, sizeof err);
    return d;
}

static const char *marked(const struct dag *d, const bool *mark)
{
    static char buf[64];
    size_t n = 0;
    for (size_t i = 0; i < d->n_steps; i++)
        if (mark[i]) n += (size_t)snprintf(buf + n, sizeof buf - n, "%s", d->steps[i].name);
    buf[n] = '\0';
    return buf;
}

static void test_slicing_downstream(void)
{
    struct dag *d = diamond();
    bool mark[5] = { 0 };
    size_t seed = 1;                                     /* b */
    dag_mark_downstream(d, &seed, 1, mark);
    CHECK_STR(marked(d, mark), "bd");
    memset(mark, 0, sizeof mark);
    seed = 0;
    dag_mark_downstream(d, &seed, 1, mark);
    CHECK_STR(marked(d, mark), "abcd");
    dag_free(d);
}

static void test_slicing_upstream(void)
{
    struct dag *d = diamond();
    bool mark[5] = { 0 };
    size_t seeds[] = { 3, 4 };                           /* d and e */
    dag_mark_upstream(d, seeds, 2, mark);
    CHECK_STR(marked(d, mark), "abcde");
    memset(mark, 0, sizeof mark);
    size_t c = 2;
    dag_mark_upstream(d, &c, 1, mark);
    CHECK_STR(marked(d, mark), "ac");
    dag_free(d);
}

static void test_framework_names(void)
{
    CHECK_STR(dag_framework_name(DIST_PYTORCH), "PyTorch");
    CHECK_STR(dag_framework_name(DIST_MPI), "MPI");
    CHECK(dag_is_param_input("params:a.b"));
    CHECK(dag_is_param_input("parameters"));
    CHECK(!dag_is_param_input("params"));
    CHECK_STR(dag_param_key("params:a.b"), "a.b");
    CHECK(dag_param_key("parameters") == NULL);
    CHECK(dag_param_key("raw") == NULL);
}

/* The bounds of a distributed step's counts, and a graph that refuses a
 * step whose count is out of them whoever builds it. */
static void test_dist_counts_bounded(void)
{
    CHECK(dag_count_ok(DIST_NUM_NODES, 1) && dag_count_ok(DIST_NUM_NODES, DIST_MAX_NODES));
    CHECK(!dag_count_ok(DIST_NUM_NODES, 0) && !dag_count_ok(DIST_NUM_NODES, -1));
    CHECK(!dag_count_ok(DIST_NUM_NODES, DIST_MAX_NODES + 1) && !dag_count_ok(DIST_NUM_NODES, 0x4000000000000000LL));
    CHECK(dag_count_ok(DIST_PROCESSES_PER_NODE, DIST_MAX_PROCESSES_PER_NODE));
    CHECK(!dag_count_ok(DIST_PROCESSES_PER_NODE, DIST_MAX_PROCESSES_PER_NODE + 1));
    CHECK(dag_count_max(DIST_PARAMETER_SERVERS) == DIST_MAX_NODES);
    CHECK(dag_local_processes(DIST_MAX_NODES, DIST_MAX_PROCESSES_PER_NODE, DIST_MAX_NODES)
          == 10000LL * 1024 + 10000);
    CHECK(dag_local_processes(2, 2, 1) == 5);

    struct dag *d = new_dag();
    struct dag_step s = { .name = "ok", .dist = { .framework = DIST_MPI, .num_nodes = 2, .processes_per_node = 4 } };
    CHECK(add_spec(d, &s, err, sizeof err) == 0);
    s.name = "wide", s.dist.processes_per_node = DIST_MAX_PROCESSES_PER_NODE + 1;
    CHECK(add_spec(d, &s, err, sizeof err) < 0);
    CHECK_CONTAINS(err, "step 'wide': processes_per_node must be a whole number from 1 to 1024");
    s.name = "none", s.dist.num_nodes = 0, s.dist.processes_per_node = 1;
    CHECK(add_spec(d, &s, err, sizeof err) < 0);
    CHECK_CONTAINS(err, "step 'none': num_nodes must be a whole number from 1 to 10000");
    s.name = "plain", s.dist = (struct dag_dist){ 0 };          /* not distributed: no counts */
    CHECK(add_spec(d, &s, err, sizeof err) == 1);
    dag_free(d);
}

static void run_all(void)
{
    RUN(test_linear_order);
    RUN(test_stable_order);
    RUN(test_diamond_deps_unique);
    RUN(test_edges_and_copies);
    RUN(test_cycle_path);
    RUN(test_self_cycle);
    RUN(test_produced_twice);
    RUN(test_produced_twice_lists_every_clash);
    RUN(test_output_twice_in_one_step);
    RUN(test_errors_name_where_steps_are);
    RUN(test_missing_inputs);
    RUN(test_declared_input_ok);
    RUN(test_duplicate_name);
    RUN(test_param_output_rejected);
    RUN(test_large_chain);
    RUN(test_slicing_downstream);
    RUN(test_slicing_upstream);
    RUN(test_framework_names);
    RUN(test_dist_counts_bounded);
}

int main(void)
{
    run_all();
    keyed = true;
    run_all();
    strmap_free(&ids);
    return CHECK_DONE("dag");
}
