/* test_names.c — file names made from dataset and step names: one file per
 * name (injective), always a single portable path component. */
#include "check.h"
#include "util.h"

#include <stdlib.h>

static char *enc(const char *name)
{
    static char *last;
    free(last);
    last = safe_file_name(name);
    return last;
}

static void test_readable_names_stay_as_they_are(void)
{
    CHECK_STR(enc("train_set"), "train_set");
    CHECK_STR(enc("ns.model-v2"), "ns.model-v2");
    CHECK_STR(enc("modèle"), "modèle");
}

static void test_unsafe_bytes_are_percent_encoded(void)
{
    CHECK_STR(enc("m/n"), "m%2Fn");
    CHECK_STR(enc("m_n"), "m_n");
    CHECK_STR(enc("50%"), "50%25");
    CHECK_STR(enc("a b"), "a%20b");
    CHECK_STR(enc(".hidden"), "%2Ehidden");
    CHECK_STR(enc(".."), "%2E.");
    CHECK_STR(enc(""), "%");
    CHECK_STR(enc("a+b~c"), "a%2Bb%7Ec");
}

/* Every pair of these names once collided (or could have) under '_' replacement. */
static void test_different_names_give_different_files(void)
{
    static const char *const names[] = { "m/n", "m_n", "m%2Fn", "m n", "m\tn", "_m", ".m", "%2Em",
                                         "a.json", "a", "m:n", "m\\n", "", "%", "%25", NULL };
    for (size_t i = 0; names[i]; i++) {
        char *a = safe_file_name(names[i]);
        CHECK(strchr(a, '/') == NULL);
        CHECK(a[0] != '\0' && a[0] != '.');
        for (size_t j = i + 1; names[j]; j++) {
            char *b = safe_file_name(names[j]);
            if (strcmp(a, b) == 0) {
                check_cur_failed = 1;
                fprintf(stderr, "  '%s' and '%s' both give '%s'\n", names[i], names[j], a);
            }
            free(b);
        }
        free(a);
    }
}

static void test_long_names_fit_a_file_name_and_stay_distinct(void)
{
    char a[1001], b[1001];
    memset(a, '/', 1000);
    a[1000] = '\0';
    memcpy(b, a, sizeof a);
    b[999] = 'x';                          /* same start, different end */
    char *ea = safe_file_name(a), *eb = safe_file_name(b);
    CHECK(strlen(ea) <= 200);
    CHECK(strlen(eb) <= 200);
    CHECK(strcmp(ea, eb) != 0);
    CHECK(strchr(ea, '~') != NULL);
    /* cut at a whole %XX: what precedes the '~' is complete escapes */
    CHECK((strchr(ea, '~') - ea) % 3 == 0);
    free(ea);
    free(eb);
}

/* The shortcut a caller may take (core.safe_name returns such a name as it
 * is) agrees with the encoding: true exactly when the name comes back
 * unchanged. */
static void test_names_that_encode_to_themselves_are_known(void)
{
    char at_max[201], past_max[202];
    memset(at_max, 'a', 200);
    at_max[200] = '\0';
    memset(past_max, 'a', 201);
    past_max[201] = '\0';
    static const char *const names[] = { "train_set", "ns.model-v2", "modèle", "m/n", "50%", "a b", ".hidden",
                                         "a.", "..", ".", "", "a+b", "x~1", "A-Z_09", "\xff", "tab\there", NULL };
    for (size_t i = 0; names[i]; i++) {
        char *e = safe_file_name(names[i]);
        CHECK(safe_file_name_is_itself(names[i], strlen(names[i])) == (strcmp(e, names[i]) == 0));
        free(e);
    }
    CHECK(safe_file_name_is_itself(at_max, 200) && !safe_file_name_is_itself(past_max, 201));
    char *e = safe_file_name(past_max);
    CHECK(strcmp(e, past_max) != 0);
    free(e);
    CHECK(!safe_file_name_is_itself("a\0b", 3));       /* (a Lua string may hold a NUL) */
}

int main(void)
{
    RUN(test_readable_names_stay_as_they_are);
    RUN(test_unsafe_bytes_are_percent_encoded);
    RUN(test_different_names_give_different_files);
    RUN(test_long_names_fit_a_file_name_and_stay_distinct);
    RUN(test_names_that_encode_to_themselves_are_known);
    free(enc("x"));
    return CHECK_DONE("names");
}
