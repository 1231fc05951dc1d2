/* fixtures.h — graphs the unit tests share. */
#ifndef FLOW_TEST_FIXTURES_H
#define FLOW_TEST_FIXTURES_H

#include "dag.h"

#include <stdio.h>
#include <stdlib.h>

/* A chain s0 -> s1 -> ... of n steps, each reading the one before (d0, d1, ...). */
static inline struct dag *chain(size_t n)
{
    struct dag *d = dag_new();
    char err[256], name[32], in[32], out[32];
    for (size_t i = 0; i < n; i++) {
        snprintf(name, sizeof name, "s%zu", i);
        snprintf(in, sizeof in, "d%zu", i ? i - 1 : 0);
        snprintf(out, sizeof out, "d%zu", i);
        struct dag_io o = { .dataset = out }, inp = { .dataset = in };
        struct dag_step s = { .name = name, .inputs = &inp, .n_inputs = i ? 1 : 0, .outputs = &o, .n_outputs = 1 };
        if (dag_add_step(d, &s, err, sizeof err) < 0) { fprintf(stderr, "%s\n", err); exit(2); }
    }
    if (dag_finalize(d, err, sizeof err) != 0) { fprintf(stderr, "%s\n", err); exit(2); }
    return d;
}

#endif
