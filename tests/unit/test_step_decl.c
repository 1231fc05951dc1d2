/* test_step_decl.c — the store of declared steps: interning, records and
 * their shared lists, node identity within and across stores. */
#include "check.h"
#include "step_decl.h"

static void test_intern_gives_one_id_per_string(void)
{
    struct step_decls d;
    step_decls_init(&d);
    CHECK(step_decls_intern(&d, NULL) == 0);
    name_id a = step_decls_intern(&d, "a"), b = step_decls_intern(&d, "b");
    CHECK(a != 0 && b != 0 && a != b);
    CHECK(step_decls_intern(&d, "a") == a);
    char buf[32];
    for (int i = 0; i < 5000; i++) {          /* grows the table and the map past their first sizes */
        snprintf(buf, sizeof buf, "name%d", i);
        CHECK(step_decls_intern(&d, buf) == (name_id)(i + 3));
    }
    CHECK_STR(step_decls_str(&d, a), "a");
    CHECK_STR(step_decls_str(&d, 3 + 4321), "name4321");
    CHECK(step_decls_str(&d, 0) == NULL);
    step_decls_free(&d);
}

/* A record with inputs `in` and outputs `out` (datasets named by themselves). */
static uint32_t add_step(struct step_decls *d, const char *name, const char *in, const char *out)
{
    struct step_decl rec = { .name = step_decls_intern(d, name), .io = (uint32_t)d->n_io };
    if (in) {
        name_id id = step_decls_intern(d, in);
        step_decls_add_io(d, (struct step_io){ id, id });
        rec.n_inputs = 1;
    }
    if (out) {
        name_id id = step_decls_intern(d, out);
        step_decls_add_io(d, (struct step_io){ id, id });
        rec.n_outputs = 1;
    }
    return step_decls_add(d, &rec);
}

static void test_records_keep_their_lists(void)
{
    struct step_decls d;
    step_decls_init(&d);
    uint32_t s[300];
    char name[16], in[16], out[16];
    for (int i = 0; i < 300; i++) {
        snprintf(name, sizeof name, "s%d", i);
        snprintf(in, sizeof in, "d%d", i);
        snprintf(out, sizeof out, "d%d", i + 1);
        s[i] = add_step(&d, name, i ? in : NULL, out);
        CHECK(s[i] == (uint32_t)i);
    }
    const struct step_decl *r = &d.recs[s[150]];
    CHECK_STR(step_decls_str(&d, r->name), "s150");
    CHECK(r->n_inputs == 1 && r->n_outputs == 1);
    CHECK(step_io_count(r, false) == 1 && step_io_count(r, true) == 1);
    CHECK_STR(step_decls_str(&d, d.io[step_io_first(r, false)].dataset), "d150");
    CHECK_STR(step_decls_str(&d, d.io[step_io_first(r, true)].dataset), "d151");
    CHECK(d.recs[s[0]].n_inputs == 0 && d.io[step_io_first(&d.recs[s[0]], true)].dataset == step_decls_intern(&d, "d1"));
    /* an argument is looked for among the inputs or the outputs asked for (${inputs.x}, ${outputs.y}) */
    CHECK(step_decls_has_arg(&d, r, false, "d150") && !step_decls_has_arg(&d, r, true, "d150"));
    CHECK(step_decls_has_arg(&d, r, true, "d151") && !step_decls_has_arg(&d, r, false, "d151"));
    CHECK(!step_decls_has_arg(&d, r, false, "s150"));        /* interned, but no argument of it */
    CHECK(!step_decls_has_arg(&d, r, false, "never seen"));
    CHECK(!step_decls_has_arg(&d, &d.recs[s[0]], false, "d0"));
    name_id aml[STEP_N_AML] = { step_decls_intern(&d, "gpu") };
    CHECK(step_decls_add_aml(&d, aml) == 0);
    CHECK(d.aml[0][AML_COMPUTE] == aml[0] && d.aml[0][AML_ENVIRONMENT] == 0);
    step_decls_free(&d);
}

/* Node identity: name, inputs, outputs and every setting; not where it was
 * written nor its tags; the same across two stores as within one. */
static void test_same_within_and_across_stores(void)
{
    struct step_decls d, e;
    step_decls_init(&d);
    step_decls_init(&e);
    step_decls_intern(&e, "something else first");      /* other ids in e */
    uint32_t a = add_step(&d, "s", "x", "y"), b = add_step(&d, "s", "x", "y"), c = add_step(&e, "s", "x", "y");
    d.recs[b].where = step_decls_intern(&d, "pipeline.lua:2");
    d.recs[b].tags = (uint32_t)d.n_tags;
    d.recs[b].n_tags = 1;
    step_decls_add_tag(&d, step_decls_intern(&d, "t"));
    CHECK(step_decls_same(&d, &d.recs[a], &d, &d.recs[b]));
    CHECK(step_decls_same(&d, &d.recs[a], &e, &e.recs[c]));
    uint32_t other_in = add_step(&e, "s", "z", "y"), other_name = add_step(&e, "t", "x", "y");
    CHECK(!step_decls_same(&d, &d.recs[a], &e, &e.recs[other_in]));
    CHECK(!step_decls_same(&d, &d.recs[a], &e, &e.recs[other_name]));
    struct step_decl retried = e.recs[c];
    retried.retries = 2;
    CHECK(!step_decls_same(&d, &d.recs[a], &e, &retried));
    struct step_decl timed = e.recs[c], timed_too = d.recs[a];
    timed.flags |= STEP_TIMEOUT;
    timed.timeout = 5;
    timed_too.flags |= STEP_TIMEOUT;
    timed_too.timeout = 6;
    CHECK(!step_decls_same(&d, &timed_too, &e, &timed));
    timed_too.timeout = 5;
    CHECK(step_decls_same(&d, &timed_too, &e, &timed));
    struct step_decl pooled = e.recs[c];
    pooled.pool = step_decls_intern(&e, "gpu");
    CHECK(!step_decls_same(&d, &d.recs[a], &e, &pooled));
    step_decls_free(&d);
    step_decls_free(&e);
}

int main(void)
{
    RUN(test_intern_gives_one_id_per_string);
    RUN(test_records_keep_their_lists);
    RUN(test_same_within_and_across_stores);
    return CHECK_DONE("step_decl");
}
