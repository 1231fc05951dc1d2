/* test_template.c — ${inputs.x} / ${outputs.y} / ${params.a.b} / ${credentials.a.b} expansion. */
#include "check.h"
#include "template.h"

#include <stdlib.h>

static int lookup(void *ctx, const char *ns, const char *key, struct strbuf *out,
                  char *err, size_t errlen)
{
    (void)ctx;
    if (strcmp(key, "missing") == 0) {
        errf(err, errlen, "no %s named '%s'", ns, key);
        return -1;
    }
    sb_addf(out, "<%s:%s>", ns, key);
    return 0;
}

static char err[512];

static void expect(const char *tmpl, const char *want)
{
    char *got = template_expand(tmpl, lookup, NULL, err, sizeof err);
    CHECK_STR(got, want);
    free(got);
}

static void expect_error(const char *tmpl, const char *msg)
{
    char *got = template_expand(tmpl, lookup, NULL, err, sizeof err);
    CHECK(got == NULL);
    free(got);
    CHECK_CONTAINS(err, msg);
}

static void test_plain(void) { expect("python3", "python3"); expect("", ""); }
static void test_whole(void) { expect("${inputs.train_set}", "<inputs:train_set>"); }
static void test_embedded(void) { expect("--data=${inputs.x}/part", "--data=<inputs:x>/part"); }
static void test_several(void)
{
    expect("${inputs.a}${outputs.b} ${params.a.b.c}", "<inputs:a><outputs:b> <params:a.b.c>");
}
static void test_dollar_alone(void) { expect("cost $5 and $HOME", "cost $5 and $HOME"); }
static void test_escape(void) { expect("$${inputs.x} ${inputs.x}", "${inputs.x} <inputs:x>"); }
static void test_unterminated(void) { expect_error("${inputs.x", "unterminated '${'"); }
static void test_unknown_namespace(void) { expect_error("${env.HOME}", "unknown reference '${env.HOME}'"); }
static void test_no_key(void) { expect_error("${inputs.}", "bad reference"); expect_error("${.x}", "bad reference"); }
static void test_shell_variables_kept(void)
{
    expect("${HOME}/x ${RANK:-0} ${inputs.a}", "${HOME}/x ${RANK:-0} <inputs:a>");
}
static void test_credentials_namespace(void)
{
    expect("${credentials.db.password}", "<credentials:db.password>");
    expect_error("${credential.db}", "credentials. can be expanded");
}
static void test_lookup_error(void) { expect_error("a ${inputs.missing}", "no inputs named 'missing'"); }

static int count_refs(void *ctx, const char *ns, const char *key)
{
    (void)ns; (void)key;
    (*(int *)ctx)++;
    return 0;
}

static void test_each_ref(void)
{
    int n = 0;
    CHECK(template_each_ref("${inputs.a} $${x} ${params.b}", count_refs, &n, err, sizeof err) == 0);
    CHECK(n == 2);
}

int main(void)
{
    RUN(test_plain);
    RUN(test_whole);
    RUN(test_embedded);
    RUN(test_several);
    RUN(test_dollar_alone);
    RUN(test_escape);
    RUN(test_unterminated);
    RUN(test_unknown_namespace);
    RUN(test_no_key);
    RUN(test_shell_variables_kept);
    RUN(test_lookup_error);
    RUN(test_credentials_namespace);
    RUN(test_each_ref);
    return CHECK_DONE("template");
}
