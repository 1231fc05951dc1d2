/* test_suggest.c — "did you mean": the edit distance (a swap of neighbours is
 * one edit) and when a candidate is near enough to suggest. */
#include "check.h"
#include "suggest.h"

#include <stdint.h>

static void test_edit_distance(void)
{
    CHECK(edit_distance("prod", "prod") == 0);
    CHECK(edit_distance("prdo", "prod") == 1);            /* a swap */
    CHECK(edit_distance("rpeprocses", "preprocess") == 2); /* two swaps: Levenshtein says 4 */
    CHECK(edit_distance("", "abc") == 3);
    CHECK(edit_distance("kitten", "sitting") == 3);
    char long_word[300];
    memset(long_word, 'a', sizeof long_word - 1);
    long_word[sizeof long_word - 1] = '\0';
    CHECK(edit_distance(long_word, "a") == SIZE_MAX);
}

static void test_closest_word(void)
{
    const char *steps[] = { "load", "preprocess", "train", "evaluate" };
    CHECK_STR(closest_word("trian", steps, 4), "train");
    CHECK_STR(closest_word("rpeprocses", steps, 4), "preprocess");
    CHECK(closest_word("lo", steps, 4) == NULL);          /* 2 edits: too far for a short word */
    CHECK(closest_word("xyz", steps, 4) == NULL);
    CHECK(closest_word("x", steps, 0) == NULL);
    const char *ties[] = { "ab", "ba" };
    CHECK_STR(closest_word("aa", ties, 2), "ab");         /* the first among equals */
}

int main(void)
{
    RUN(test_edit_distance);
    RUN(test_closest_word);
    return CHECK_DONE("suggest");
}
