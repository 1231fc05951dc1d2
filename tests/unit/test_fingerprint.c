/* test_fingerprint.c — engine/fingerprint.c against vectors computed
 * independently (Python's hashlib over the NUL-joined items, the rule
 * fingerprint.lua applied before the rule moved to C): a changed rule would
 * rerun every step of every project, so these must never change. */
#include "check.h"
#include "fingerprint.h"

#define S(x) { x, sizeof x - 1 }

static void test_full_parts_vector(void)
{
    /* maps given out of order: the rule sorts them */

    struct fp_kv files[] = { { S("src/b.py"), S("h2") }, { S("src/a.py"), S("h1") } };
    struct fp_kv params[] = { { S("lr"), S("p1") } };
    struct fp_kv inputs[] = { { S("b"), S("i2") }, { S("a"), S("i1") } };
    struct fp_parts p = { .code = S("CODE"), .outputs = S("o\0memory\0"), .files = files, .n_files = 2,
                          .params = params, .n_params = 1, .inputs = inputs, .n_inputs = 2 };
    char hex[SHA256_HEX_SIZE];
    /* python: sha256("\0".join(["flow-fingerprint-1","CODE","-","o\0memory\0","files","src/a.py","h1",
     *   "src/b.py","h2","params","lr","p1","inputs","a","i1","b","i2"])) */
    fp_combine(&p, hex);
    CHECK_STR(hex, "4d46a75e1d4b0fff934a0273ec55c960ec4a309c953de7e85c63c2ea86de5891");
}

static void test_minimal_parts_vector(void)
{
    struct fp_parts p = { .code = S("C2"), .dist = S("DIST"), .outputs = S("o") };
    char hex[SHA256_HEX_SIZE];
    fp_combine(&p, hex);
    CHECK_STR(hex, "59dd148fa97c75feb3ad75c4b5750f4ab5537ee60d5c556ae42971aea2139fa7");
}

/* Parts longer than fp_combine's buffer go to a hasher, from the start or
 * from an item part of the way in: the same rule either way. */
static void test_long_parts_vectors(void)
{
    static char x[3001], y[2021];
    memset(x, 'x', 3000);
    memset(y, 'y', 2020);
    struct fp_kv params[] = { { S("lr"), S("p1") } };
    struct fp_parts p = { .code = { x, 3000 }, .outputs = S("o"), .params = params, .n_params = 1 };
    char hex[SHA256_HEX_SIZE];
    /* python: sha256("\0".join(["flow-fingerprint-1", "x" * 3000, "-", "o", "params", "lr", "p1"])) */
    fp_combine(&p, hex);
    CHECK_STR(hex, "f8a3ad92159578e0daeff749f73bc1b117844842f6a1fd856e3cc670eed3143f");
    p.code = (struct fp_str){ y, 2020 };                     /* "params" is the item that does not fit */
    fp_combine(&p, hex);
    CHECK_STR(hex, "6f21b72e31216e4385f7b8111cde81a2ecdc44f1019141f3cfde6876daed7225");
}

int main(void)
{
    RUN(test_full_parts_vector);
    RUN(test_minimal_parts_vector);
    RUN(test_long_parts_vectors);
    return CHECK_DONE("fingerprint");
}
