/* dag.c — graph construction, validation with messages a user can act on,
 * and Kahn's algorithm with a min-heap so that ready steps keep declaration order. */
#include "dag.h"
#include "heap.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct dag *dag_new(void)
{
    struct dag *dag = xcalloc(1, sizeof(struct dag));
    dag->own_keys.borrowed_keys = true;
    dag->keys = &dag->own_keys;
    return dag;
}

void dag_free(struct dag *dag)
{
    if (!dag) return;
    free(dag->steps);
    free(dag->datasets);
    free(dag->order);
    free(dag->read);
    strmap_free(&dag->own_keys);
    free(dag->step_of_key);
    free(dag->dataset_of_key);
    arena_free(&dag->mem);
    free(dag);
}

const char *dag_param_key(const char *dataset)
{
    return strncmp(dataset, "params:", 7) == 0 ? dataset + 7 : NULL;
}

bool dag_is_param_input(const char *dataset)
{
    /* (asked of every input and output when a graph is finalized: most
     * names are told by their first byte) */
    return dataset[0] == 'p' && (dag_param_key(dataset) || strcmp(dataset, "parameters") == 0);
}

long dag_count_max(enum dist_count c)
{
    switch (c) {
    case DIST_NUM_NODES: return DIST_MAX_NODES;
    case DIST_PROCESSES_PER_NODE: return DIST_MAX_PROCESSES_PER_NODE;
    case DIST_PARAMETER_SERVERS: return DIST_MAX_NODES;
    }
    return 0;
}

bool dag_count_ok(enum dist_count c, long long v)
{
    return v >= 1 && v <= dag_count_max(c);
}

long long dag_local_processes(long num_nodes, long processes_per_node, long parameter_servers)
{
    return (long long)num_nodes * processes_per_node + parameter_servers;
}

void dag_reserve(struct dag *dag, size_t n_steps)
{
    if (n_steps > dag->cap_steps) {
        dag->steps = xrealloc(dag->steps, n_steps * sizeof *dag->steps);
        dag->cap_steps = n_steps;
    }
    if (n_steps > dag->cap_datasets) {
        dag->datasets = xrealloc(dag->datasets, n_steps * sizeof *dag->datasets);
        dag->cap_datasets = n_steps;
    }
    if (dag->keys == &dag->own_keys) strmap_reserve(&dag->own_keys, 2 * n_steps);   /* (a name and an output a step) */
}

/* ---- names as keys (dag.h) ------------------------------------------------ */

/* Room for key k in the arrays. */
static void key_room(struct dag *dag, uint32_t k)
{
    if (k < dag->n_keys) return;
    size_t n = dag->n_keys ? dag->n_keys : 64;
    while (n <= k) n *= 2;
    dag->step_of_key = xrealloc(dag->step_of_key, n * sizeof *dag->step_of_key);
    dag->dataset_of_key = xrealloc(dag->dataset_of_key, n * sizeof *dag->dataset_of_key);
    memset(dag->step_of_key + dag->n_keys, 0, (n - dag->n_keys) * sizeof *dag->step_of_key);
    memset(dag->dataset_of_key + dag->n_keys, 0, (n - dag->n_keys) * sizeof *dag->dataset_of_key);
    dag->n_keys = n;
}

void dag_key_names(struct dag *dag, const struct strmap *ids, size_t n_keys)
{
    dag->keys = ids;
    free(dag->step_of_key);
    free(dag->dataset_of_key);
    /* (read before they are written, as a hash map's slots: xcalloc_written) */
    dag->step_of_key = xcalloc_written(n_keys + 1, sizeof *dag->step_of_key);
    dag->dataset_of_key = xcalloc_written(n_keys + 1, sizeof *dag->dataset_of_key);
    dag->n_keys = n_keys + 1;
}

/* The key of `name`, if the graph has met it. */
static bool find_key(const struct dag *dag, const char *name, uint32_t *k)
{
    size_t v;
    if (!strmap_get(dag->keys, name, &v) || v >= dag->n_keys) return false;
    *k = (uint32_t)v;
    return true;
}

/* The graph's own key of `name`, a string it keeps: made if it is new. */
static uint32_t own_key(struct dag *dag, const char *name)
{
    struct strmap_slot *slot = strmap_slot(&dag->own_keys, name);
    if (!slot->key) strmap_fill(&dag->own_keys, slot, name, dag->own_keys.count);
    uint32_t k = slot->value;
    key_room(dag, k);
    return k;
}

/* Step s's keys (its name's, then its inputs' and outputs'), in the graph's
 * arena: the caller's, or the graph's own made from the strings s keeps. */
static uint32_t *keep_keys(struct dag *dag, const struct dag_step *s, const uint32_t *given)
{
    size_t n = 1 + s->n_inputs + s->n_outputs;
    uint32_t *keys = arena_calloc(&dag->mem, n, sizeof *keys);
    if (dag->keys != &dag->own_keys) {
        memcpy(keys, given, n * sizeof *keys);
        for (size_t k = 0; k < n; k++) key_room(dag, keys[k]);
        return keys;
    }
    keys[0] = own_key(dag, s->name);
    for (size_t k = 0; k < s->n_inputs; k++) keys[1 + k] = own_key(dag, s->inputs[k].dataset);
    for (size_t k = 0; k < s->n_outputs; k++) keys[1 + s->n_inputs + k] = own_key(dag, s->outputs[k].dataset);
    return keys;
}

/* The index of the step named as spec is, or -1. */
static long step_named(const struct dag *dag, const struct dag_step *spec)
{
    uint32_t k;
    if (dag->keys != &dag->own_keys) k = spec->keys[0];
    else if (!find_key(dag, spec->name, &k)) return -1;
    return k < dag->n_keys ? (long)dag->step_of_key[k] - 1 : -1;
}

/* A copy of s for the graph: s itself when the caller's strings outlive it.
 * NULL stays NULL. */
static char *keep_string(struct dag *dag, const char *s)
{
    return dag->borrowed_names ? (char *)s : arena_strdup(&dag->mem, s);
}

/* An input's or output's arg is its dataset's name unless the step names it
 * otherwise: one string for both. */
static struct dag_io *copy_io(struct dag *dag, const struct dag_io *io, size_t n)
{
    struct dag_io *c = arena_calloc(&dag->mem, n, sizeof *c);
    for (size_t i = 0; i < n; i++) {
        c[i].dataset = keep_string(dag, io[i].dataset);
        c[i].di = DAG_NO_DATASET;                   /* (dag_finalize's) */
        c[i].arg = io[i].arg && strcmp(io[i].arg, io[i].dataset) != 0 ? keep_string(dag, io[i].arg) : c[i].dataset;
    }
    return c;
}

/* A new dataset named `name` (a string that lives as long as the graph: the
 * dataset keeps it); its index. */
static size_t append_dataset(struct dag *dag, char *name)
{
    ARRAY_GROW(dag->datasets, dag->n_datasets, dag->cap_datasets);
    dag->datasets[dag->n_datasets] = (struct dag_dataset){ name, -1, false };
    return dag->n_datasets++;
}

/* The dataset of key k, named `name` when it is new (append_dataset). */
static size_t intern_dataset(struct dag *dag, char *name, uint32_t k)
{
    uint32_t *slot = &dag->dataset_of_key[k];
    if (!*slot) *slot = (uint32_t)append_dataset(dag, name) + 1;
    return *slot - 1;
}

/* A dataset the caller's keys do not name (one the catalog declares that no
 * step reads or writes), found by name in own_keys, which holds such names
 * (with their dataset's index) when the keys are the caller's. */
static size_t unkeyed_dataset(struct dag *dag, const char *name)
{
    struct strmap_slot *slot = strmap_slot(&dag->own_keys, name);
    if (slot->key) return slot->value;
    char *kept = arena_strdup(&dag->mem, name);
    size_t di = append_dataset(dag, kept);
    strmap_fill(&dag->own_keys, slot, kept, di);
    return di;
}

long dag_add_step(struct dag *dag, const struct dag_step *spec, char *err, size_t errlen)
{
    if (step_named(dag, spec) >= 0) {
        errf(err, errlen, "two steps are named '%s': step names must be unique "
             "(give one of them name = \"...\")", spec->name);
        return -1;
    }
    if (spec->dist.framework != DIST_NONE) {
        if (!dag_count_ok(DIST_NUM_NODES, spec->dist.num_nodes)) {
            errf(err, errlen, "step '%s': num_nodes must be a whole number from 1 to %ld", spec->name,
                 dag_count_max(DIST_NUM_NODES));
            return -1;
        }
        if (!dag_count_ok(DIST_PROCESSES_PER_NODE, spec->dist.processes_per_node)) {
            errf(err, errlen, "step '%s': processes_per_node must be a whole number from 1 to %ld", spec->name,
                 dag_count_max(DIST_PROCESSES_PER_NODE));
            return -1;
        }
    }
    struct arena *mem = &dag->mem;
    ARRAY_GROW(dag->steps, dag->n_steps, dag->cap_steps);
    struct dag_step *s = &dag->steps[dag->n_steps];
    *s = *spec;
    s->name = keep_string(dag, spec->name);
    /* the steps a loop makes share one line: one copy for a run of them */
    const struct dag_step *prev = dag->n_steps ? &dag->steps[dag->n_steps - 1] : NULL;
    s->where = prev && prev->where && spec->where && strcmp(prev->where, spec->where) == 0
               ? prev->where : keep_string(dag, spec->where);
    s->inputs = copy_io(dag, spec->inputs, spec->n_inputs);
    s->outputs = copy_io(dag, spec->outputs, spec->n_outputs);
    s->tags = arena_calloc(mem, spec->n_tags, sizeof *s->tags);
    for (size_t i = 0; i < spec->n_tags; i++) s->tags[i] = keep_string(dag, spec->tags[i]);
    s->dist.num_nodes_ref = arena_strdup(mem, spec->dist.num_nodes_ref);
    s->dist.processes_per_node_ref = arena_strdup(mem, spec->dist.processes_per_node_ref);
    s->deps = s->dependents = NULL;
    s->n_deps = s->n_dependents = 0;
    s->keys = keep_keys(dag, s, spec->keys);
    if (dag->n_steps >= UINT32_MAX) out_of_memory(dag->n_steps);
    dag->step_of_key[s->keys[0]] = (uint32_t)dag->n_steps + 1;
    return (long)dag->n_steps++;
}

void dag_declare_dataset(struct dag *dag, const char *name)
{
    uint32_t k;
    size_t di;
    if (find_key(dag, name, &k)) {
        di = dag->dataset_of_key[k] ? dag->dataset_of_key[k] - 1 : intern_dataset(dag, arena_strdup(&dag->mem, name), k);
    } else if (dag->keys == &dag->own_keys) {
        char *kept = arena_strdup(&dag->mem, name);
        di = intern_dataset(dag, kept, own_key(dag, kept));
    } else {
        di = unkeyed_dataset(dag, name);
    }
    dag->datasets[di].declared = true;
}

long dag_find_step(const struct dag *dag, const char *name)
{
    uint32_t k;
    return find_key(dag, name, &k) ? (long)dag->step_of_key[k] - 1 : -1;
}

long dag_find_dataset(const struct dag *dag, const char *name)
{
    uint32_t k;
    size_t di;
    if (find_key(dag, name, &k)) return (long)dag->dataset_of_key[k] - 1;
    if (dag->keys != &dag->own_keys && strmap_get(&dag->own_keys, name, &di)) return (long)di;
    return -1;
}

const bool *dag_read_flags(struct dag *dag)
{
    if (dag->read) return dag->read;
    bool *read = dag->read = xcalloc(dag->n_datasets + 1, sizeof *read);
    for (size_t i = 0; i < dag->n_steps; i++) {
        const struct dag_step *s = &dag->steps[i];
        for (size_t k = 0; k < s->n_inputs; k++)
            if (s->inputs[k].di != DAG_NO_DATASET) read[s->inputs[k].di] = true;
    }
    return read;
}

bool dag_outputs_all_read(struct dag *dag, size_t i)
{
    const bool *read = dag_read_flags(dag);
    const struct dag_step *s = &dag->steps[i];
    for (size_t k = 0; k < s->n_outputs; k++)
        if (s->outputs[k].di == DAG_NO_DATASET || !read[s->outputs[k].di]) return false;
    return s->n_outputs > 0;
}

const char *dag_framework_name(enum dist_framework f)
{
    switch (f) {
    case DIST_PYTORCH: return "PyTorch";
    case DIST_TENSORFLOW: return "TensorFlow";
    case DIST_MPI: return "MPI";
    default: return "none";
    }
}

#define MAX_LISTED 20   /* culprits an error lists one by one; the rest are counted */

/* Appends "'a' (pipeline.lua:3)", or "a (pipeline.lua:3)" unquoted: a step as
 * every graph error names it, with where it was declared when that is known. */
static void add_step_ref(struct strbuf *sb, const struct dag_step *s, bool quoted)
{
    sb_addf(sb, quoted ? "'%s'" : "%s", s->name);
    if (s->where) sb_addf(sb, " (%s)", s->where);
}

/* "'a' (pipeline.lua:3)" in sb (emptied first), for a message about one step. */
static const char *step_ref(struct strbuf *sb, const struct dag_step *s)
{
    sb_truncate(sb, 0);
    add_step_ref(sb, s, true);
    return sb->buf;
}

/* Appends "'a', 'b' and 'c'" (each with its position): the steps that make
 * `dataset`; returns how many. */
static size_t add_producer_names(struct strbuf *sb, const struct dag *dag, const char *dataset)
{
    size_t n = 0, last = 0;
    for (size_t i = 0; i < dag->n_steps; i++)
        for (size_t o = 0; o < dag->steps[i].n_outputs; o++)
            if (strcmp(dag->steps[i].outputs[o].dataset, dataset) == 0) {
                if (n++) {
                    sb_adds(sb, n > 2 ? ", " : "");
                    add_step_ref(sb, &dag->steps[last], true);
                }
                last = i;
                break;
            }
    sb_adds(sb, n > 1 ? " and " : "");
    add_step_ref(sb, &dag->steps[last], true);
    return n;
}

/* The error for the datasets in `clash` (each made by two or more steps):
 * every one of them, with every step that makes it. */
static void report_producer_clashes(const struct dag *dag, const size_t *clash, size_t n, char *err,
                                    size_t errlen)
{
    struct strbuf sb = STRBUF_INIT;
    if (n == 1) {
        size_t makers = add_producer_names(&sb, dag, dag->datasets[clash[0]].name);
        errf(err, errlen, "dataset '%s' is produced by %s steps, %s: a dataset has exactly one producer",
             dag->datasets[clash[0]].name, makers == 2 ? "two" : "several", sb.buf);
        sb_release(&sb);
        return;
    }
    for (size_t c = 0; c < n && c < MAX_LISTED; c++) {
        sb_addf(&sb, "\n  '%s', by ", dag->datasets[clash[c]].name);
        add_producer_names(&sb, dag, dag->datasets[clash[c]].name);
    }
    if (n > MAX_LISTED) sb_addf(&sb, "\n  ... and %zu more", n - MAX_LISTED);
    errf(err, errlen, "%zu datasets are produced by more than one step (a dataset has exactly one producer):%s",
         n, sb.buf);
    sb_release(&sb);
}

/* Each dataset gets its producer.  A dataset with a second producer is an
 * error naming every such dataset and every step that makes each, so that
 * one run shows them all. */
static int assign_producers(struct dag *dag, char *err, size_t errlen)
{
    size_t *clash = NULL, n_clash = 0, cap_clash = 0;
    struct strbuf who = STRBUF_INIT;
    for (size_t i = 0; i < dag->n_steps; i++) {
        struct dag_step *s = &dag->steps[i];
        for (size_t o = 0; o < s->n_outputs; o++) {
            if (dag_is_param_input(s->outputs[o].dataset)) {
                errf(err, errlen, "step %s declares '%s' as an output: parameters are read-only",
                     step_ref(&who, s), s->outputs[o].dataset);
                goto fail;
            }
            size_t di = s->outputs[o].di = intern_dataset(dag, s->outputs[o].dataset, s->keys[1 + s->n_inputs + o]);
            struct dag_dataset *d = &dag->datasets[di];
            if (d->producer == (long)i) {
                errf(err, errlen, "step %s lists output '%s' twice", step_ref(&who, s), d->name);
                goto fail;
            }
            if (d->producer < 0) {
                d->producer = (long)i;
                continue;
            }
            bool listed = false;       /* a third producer: the dataset is listed once */
            for (size_t c = 0; c < n_clash && !listed; c++) listed = clash[c] == di;
            if (listed) continue;
            ARRAY_GROW(clash, n_clash, cap_clash);
            clash[n_clash++] = di;
        }
    }
    if (n_clash) report_producer_clashes(dag, clash, n_clash, err, errlen);
    free(clash);
    return n_clash ? -1 : 0;
fail:
    sb_release(&who);
    free(clash);
    return -1;
}

/* Inputs that nothing produces and nothing declares, each with the steps that need it. */
static int check_missing_inputs(struct dag *dag, char *err, size_t errlen)
{
    struct strbuf sb = STRBUF_INIT;
    size_t missing = 0;
    for (size_t i = 0; i < dag->n_steps; i++)        /* every input gets its index first */
        for (size_t k = 0; k < dag->steps[i].n_inputs; k++) {
            struct dag_io *in = &dag->steps[i].inputs[k];
            in->di = dag_is_param_input(in->dataset) ? DAG_NO_DATASET
                                                     : intern_dataset(dag, in->dataset, dag->steps[i].keys[1 + k]);
        }
    bool *reported = xcalloc(dag->n_datasets + 1, sizeof *reported);
    for (size_t i = 0; i < dag->n_steps; i++) {
        const struct dag_step *s = &dag->steps[i];
        for (size_t k = 0; k < s->n_inputs; k++) {
            const char *name = s->inputs[k].dataset;
            size_t di = s->inputs[k].di;
            if (di == DAG_NO_DATASET) continue;
            const struct dag_dataset *d = &dag->datasets[di];
            if (d->producer >= 0 || d->declared || reported[di]) continue;
            reported[di] = true;
            if (missing++ < MAX_LISTED) {
                sb_addf(&sb, "\n  '%s', needed by", name);
                const char *sep = " ";
                for (size_t j = i; j < dag->n_steps; j++)
                    for (size_t m = 0; m < dag->steps[j].n_inputs; m++)
                        if (strcmp(dag->steps[j].inputs[m].dataset, name) == 0) {
                            sb_adds(&sb, sep);
                            add_step_ref(&sb, &dag->steps[j], true);
                            sep = ", ";
                            break;
                        }
            }
        }
    }
    free(reported);
    if (missing) {
        if (missing > MAX_LISTED) sb_addf(&sb, "\n  ... and %zu more", missing - MAX_LISTED);
        errf(err, errlen, "%zu input dataset%s that no step produces and the catalog does not "
             "declare:%s\n(add a step that outputs it, or declare it in conf/base/catalog.yml)",
             missing, missing == 1 ? "" : "s", sb.buf);
    }
    sb_release(&sb);
    return missing ? -1 : 0;
}

/* Every step's deps (its inputs' producers, each once, in input order) and
 * dependents (in step order), as slices of one array for the whole graph,
 * not two arrays a step.  No step has more deps than inputs.  (Built once:
 * a second dag_finalize after a failed one fails before it gets here.) */
static void build_edges(struct dag *dag)
{
    size_t max_deps = 0;
    for (size_t i = 0; i < dag->n_steps; i++) max_deps += dag->steps[i].n_inputs;
    size_t *edges = arena_calloc(&dag->mem, 2 * max_deps, sizeof *edges), n_edges = 0;
    for (size_t i = 0; i < dag->n_steps; i++) {
        struct dag_step *s = &dag->steps[i];
        s->deps = edges + n_edges;
        for (size_t k = 0; k < s->n_inputs; k++) {
            if (s->inputs[k].di == DAG_NO_DATASET) continue;
            long p = dag->datasets[s->inputs[k].di].producer;
            bool seen = p < 0;
            for (size_t m = 0; m < s->n_deps && !seen; m++) seen = s->deps[m] == (size_t)p;
            if (seen) continue;
            s->deps[s->n_deps++] = (size_t)p;
            dag->steps[p].n_dependents++;
        }
        n_edges += s->n_deps;
    }
    for (size_t i = 0; i < dag->n_steps; i++) {
        dag->steps[i].dependents = edges + n_edges;
        n_edges += dag->steps[i].n_dependents;
        dag->steps[i].n_dependents = 0;            /* counted again as they are placed */
    }
    for (size_t i = 0; i < dag->n_steps; i++)
        for (size_t k = 0; k < dag->steps[i].n_deps; k++) {
            struct dag_step *up = &dag->steps[dag->steps[i].deps[k]];
            up->dependents[up->n_dependents++] = i;
        }
}

/* Walk dependencies among the unordered steps until one repeats: that is a cycle.
 * Report it in data-flow order, each step with its position once:
 * "a (pipeline.lua:3) -> b (pipeline.lua:4) -> a". */
static void describe_cycle(const struct dag *dag, const size_t *pending, char *err, size_t errlen)
{
    size_t start = 0;
    while (!pending[start]) start++;
    long *seen_at = xmalloc(dag->n_steps * sizeof *seen_at);
    size_t *path = xmalloc((dag->n_steps + 1) * sizeof *path);
    for (size_t i = 0; i < dag->n_steps; i++) seen_at[i] = -1;
    size_t len = 0, cur = start;
    while (seen_at[cur] < 0) {
        seen_at[cur] = (long)len;
        path[len++] = cur;
        const struct dag_step *s = &dag->steps[cur];
        for (size_t k = 0; k < s->n_deps; k++)
            if (pending[s->deps[k]]) { cur = s->deps[k]; break; }
    }
    struct strbuf sb = STRBUF_INIT;
    add_step_ref(&sb, &dag->steps[cur], false);  /* path is upstream-walking: print reversed */
    for (long i = (long)len - 1; i >= seen_at[cur]; i--) {
        sb_adds(&sb, " -> ");
        if (i > seen_at[cur]) add_step_ref(&sb, &dag->steps[path[i]], false);
        else sb_adds(&sb, dag->steps[path[i]].name);    /* back where it started */
    }
    errf(err, errlen, "the pipeline has a cycle: %s\n(a step cannot depend, even indirectly, "
         "on its own output)", sb.buf);
    sb_release(&sb);
    free(seen_at);
    free(path);
}

static int topo_sort(struct dag *dag, char *err, size_t errlen)
{
    size_t *pending = xmalloc((dag->n_steps + 1) * sizeof *pending);
    struct index_heap h = { xmalloc((dag->n_steps + 1) * sizeof(size_t)), 0 };
    dag->order = xmalloc((dag->n_steps + 1) * sizeof *dag->order);
    for (size_t i = 0; i < dag->n_steps; i++) {
        pending[i] = dag->steps[i].n_deps;
        if (!pending[i]) heap_push(&h, i);
    }
    size_t n = 0;
    while (h.n) {
        size_t i = heap_pop(&h);
        dag->order[n++] = i;
        for (size_t k = 0; k < dag->steps[i].n_dependents; k++)
            if (--pending[dag->steps[i].dependents[k]] == 0) heap_push(&h, dag->steps[i].dependents[k]);
    }
    free(h.a);
    int rc = 0;
    if (n < dag->n_steps) {
        describe_cycle(dag, pending, err, errlen);
        rc = -1;
    }
    free(pending);
    return rc;
}

/* The step and dataset arrays without the room doubling left for more
 * (a quarter of 100,000 steps' array, say): none are added after this. */
static void fit_arrays(struct dag *dag)
{
    dag->cap_steps = dag->n_steps + 1;
    dag->steps = xrealloc(dag->steps, dag->cap_steps * sizeof *dag->steps);
    dag->cap_datasets = dag->n_datasets + 1;
    dag->datasets = xrealloc(dag->datasets, dag->cap_datasets * sizeof *dag->datasets);
}

int dag_finalize(struct dag *dag, char *err, size_t errlen)
{
    if (dag->order) return 0;
    if (assign_producers(dag, err, errlen) != 0) return -1;
    if (check_missing_inputs(dag, err, errlen) != 0) return -1;
    fit_arrays(dag);
    build_edges(dag);
    if (topo_sort(dag, err, errlen) != 0) {
        free(dag->order);
        dag->order = NULL;
        return -1;
    }
    return 0;
}

/* Iterative walk: a 100,000-step chain must not overflow the C stack. */
static void mark_reachable(const struct dag *dag, const size_t *seeds, size_t n, bool *mark,
                           bool downstream)
{
    size_t *stack = xmalloc((dag->n_steps + n + 1) * sizeof *stack), top = 0;
    for (size_t k = 0; k < n; k++)
        if (!mark[seeds[k]]) { mark[seeds[k]] = true; stack[top++] = seeds[k]; }
    while (top) {
        const struct dag_step *s = &dag->steps[stack[--top]];
        const size_t *next = downstream ? s->dependents : s->deps;
        size_t count = downstream ? s->n_dependents : s->n_deps;
        for (size_t k = 0; k < count; k++)
            if (!mark[next[k]]) { mark[next[k]] = true; stack[top++] = next[k]; }
    }
    free(stack);
}

void dag_mark_downstream(const struct dag *dag, const size_t *seeds, size_t n, bool *mark)
{
    mark_reachable(dag, seeds, n, mark, true);
}

void dag_mark_upstream(const struct dag *dag, const size_t *seeds, size_t n, bool *mark)
{
    mark_reachable(dag, seeds, n, mark, false);
}
