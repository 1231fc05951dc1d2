/* dag.h — the pipeline graph: steps, the datasets between them, validation
 * and a stable topological order.  Plain data in, plain data out: the Lua side
 * describes each step with a dag_step_spec and keeps its own handle in `udata`. */
#ifndef FLOW_DAG_H
#define FLOW_DAG_H

#include "arena.h"
#include "strmap.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum step_kind { STEP_FUNC, STEP_COMMAND };
enum dist_framework { DIST_NONE, DIST_PYTORCH, DIST_TENSORFLOW, DIST_MPI };

/* One input or output: `arg` is the name the step uses (a function's table key,
 * `${inputs.arg}`), `dataset` the name in the graph (namespaced), and `di`
 * its index in the graph's datasets, set by dag_finalize (DAG_NO_DATASET for
 * a parameter input): the graph's passes and its readers index by it rather
 * than look the name up again, several times a step. */
#define DAG_NO_DATASET ((size_t)-1)
struct dag_io { char *arg, *dataset; size_t di; };

/* The counts of a distributed_job step, one rule for a literal count (at
 * node{} and distributed_job{} time), a "params:" count (when a run is
 * planned) and the graph.  A count is a whole number from 1 to its maximum.
 * Azure ML clusters are at most a few thousand nodes and a VM has at most a
 * few hundred cores, so 10000 nodes of 1024 processes is past any real job
 * while a typo (1e300, 2^63) is refused; their product, 10,240,000 ranks,
 * cannot overflow and fits the int of a job's body.  Parameter servers run
 * on the cluster's nodes: no more of them than nodes. */
enum dist_count { DIST_NUM_NODES, DIST_PROCESSES_PER_NODE, DIST_PARAMETER_SERVERS };
#define DIST_MAX_NODES 10000
#define DIST_MAX_PROCESSES_PER_NODE 1024
/* --distributed=local starts every rank (and parameter server) on this
 * machine: past some hundreds of processes that is a production count or a
 * forgotten override, not a test, and would exhaust the machine. */
#define DIST_MAX_LOCAL_PROCESSES 1024

long dag_count_max(enum dist_count c);
bool dag_count_ok(enum dist_count c, long long v);
/* How many processes --distributed=local starts for counts that are each
 * dag_count_ok: workers, plus parameter servers (TensorFlow; else 0). */
long long dag_local_processes(long num_nodes, long processes_per_node, long parameter_servers);

/* Distribution settings of a distributed_job step.  A count given as
 * "params:…" keeps its reference until the parameters are resolved (its
 * value is then 1); dag_add_step refuses a count that is not dag_count_ok. */
struct dag_dist {
    enum dist_framework framework;
    long num_nodes, processes_per_node;
    char *num_nodes_ref, *processes_per_node_ref;
};

struct dag_step {
    char *name;
    char *where;                    /* where the owner declared it ("pipeline.lua:12"), or
                                     * NULL: every error that names the step says where */
    enum step_kind kind;
    struct dag_io *inputs, *outputs;
    size_t n_inputs, n_outputs;
    char **tags;
    size_t n_tags;
    struct dag_dist dist;
    int retries;                    /* further attempts after a failure, 0 to 1,000,000 */
    double timeout;                 /* seconds per attempt; 0: none */
    int udata;                      /* the owner's handle for this step */
    /* The keys of its name, its inputs' datasets and its outputs' (in that
     * order): given to dag_add_step when the graph's names are keyed by the
     * caller (dag_key_names), else made by it; the graph's copy after. */
    uint32_t *keys;
    /* Filled by dag_finalize: unique upstream and downstream step indices
     * (slices of one array in the graph's arena). */
    size_t *deps, *dependents;
    size_t n_deps, n_dependents;
};

struct dag_dataset {
    char *name;
    long producer;                  /* step index, or -1 */
    bool declared;                  /* exists outside the graph (catalog, persisted) */
};

struct dag {
    struct dag_step *steps;
    size_t n_steps, cap_steps;
    struct dag_dataset *datasets;
    size_t n_datasets, cap_datasets;
    /* Every name the graph meets has a key, and its steps and datasets are
     * found by key: step_of_key[k] and dataset_of_key[k] are 1 + the index
     * of the step or dataset named by key k, or 0.  The keys are the ids of
     * the caller's interned names (dag_key_names: each a step's record's,
     * so the graph hashes no name) or, by default, the graph's own, given
     * in order as names are first met (own_keys, whose keys are the names
     * the graph keeps). */
    const struct strmap *keys;      /* name -> key: &own_keys, or the caller's */
    struct strmap own_keys;         /* (with the caller's keys: a declared dataset's name that
                                     * none of them names -> its index) */
    uint32_t *step_of_key, *dataset_of_key;
    size_t n_keys;                  /* the two arrays' length */
    struct arena mem;               /* every step's and dataset's strings and lists */
    bool borrowed_names;            /* set before the first step: the strings of the steps given
                                     * (names, where, inputs, outputs, tags) are the caller's and
                                     * outlive the graph, which keeps pointers to them, not copies
                                     * (the steps' records, l_dag.c) */
    size_t *order;                  /* topological order, after dag_finalize */
    bool *read;                     /* dag_read_flags's, made on first use */
};

struct dag *dag_new(void);
void dag_free(struct dag *dag);
/* Room for n_steps steps (and as many datasets) before any is added. */
void dag_reserve(struct dag *dag, size_t n_steps);
/* Before any step is added: the graph's names are keyed by `ids` (name ->
 * key, each key below n_keys; the caller's, outliving the graph, each name
 * one key), and each step given to dag_add_step comes with its keys.  A
 * dataset declared by a name `ids` does not hold is one no step names. */
void dag_key_names(struct dag *dag, const struct strmap *ids, size_t n_keys);

/* Deep-copies `spec` into the graph's arena (its deps/dependents are
 * ignored).  Returns the new step's index, or -1 with a message when the name
 * is already taken or a distributed step's count is out of range. */
long dag_add_step(struct dag *dag, const struct dag_step *spec, char *err, size_t errlen);
/* A dataset that exists without a producer: declared in the catalog, say. */
void dag_declare_dataset(struct dag *dag, const char *name);
/* Inputs like "params:a.b" and "parameters" read parameters, not datasets.
 * dag_param_key: "a.b" for "params:a.b", NULL for anything else ("parameters"
 * reads them all).  The Lua side asks these too (flow.dag.is_param_input). */
bool dag_is_param_input(const char *dataset);
const char *dag_param_key(const char *dataset);

/* Checks the graph and computes edges and the order: each dataset has at most
 * one producer, every input is produced or declared, no cycles.  Among steps
 * that are ready at once, declaration order wins, so runs are reproducible. */
int dag_finalize(struct dag *dag, char *err, size_t errlen);

/* Slicing (after dag_finalize): set mark[i] for every step reachable from the
 * n seed steps, following edges downstream (dependents) or upstream (deps).
 * Seeds are marked too; marks already set are kept. */
void dag_mark_downstream(const struct dag *dag, const size_t *seeds, size_t n, bool *mark);
void dag_mark_upstream(const struct dag *dag, const size_t *seeds, size_t n, bool *mark);

long dag_find_step(const struct dag *dag, const char *name);
long dag_find_dataset(const struct dag *dag, const char *name);
/* read[d]: whether some step reads dataset d (after dag_finalize; made on
 * the first call, the graph keeps it). */
const bool *dag_read_flags(struct dag *dag);
/* Whether step i has outputs and some step reads each of them (after
 * dag_finalize). */
bool dag_outputs_all_read(struct dag *dag, size_t i);
const char *dag_framework_name(enum dist_framework f);

#endif
