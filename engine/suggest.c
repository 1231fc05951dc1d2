/* suggest.c — see suggest.h. */
#include "suggest.h"

#include <stdint.h>
#include <string.h>

/* The optimal-string-alignment variant of Damerau-Levenshtein: a swap of
 * neighbours is one edit ("prdo" is one away from "prod"), the typo people
 * make; three rows are all it needs. */
size_t edit_distance(const char *a, const char *b)
{
    size_t n = strlen(a), m = strlen(b), rows[3][257];
    if (n > 256 || m > 256) return SIZE_MAX;
    for (size_t j = 0; j <= m; j++) rows[0][j] = j;
    for (size_t i = 1; i <= n; i++) {
        size_t *cur = rows[i % 3], *prev = rows[(i - 1) % 3], *prev2 = rows[(i + 1) % 3];
        cur[0] = i;
        for (size_t j = 1; j <= m; j++) {
            size_t best = prev[j - 1] + (a[i - 1] != b[j - 1]);
            if (prev[j] + 1 < best) best = prev[j] + 1;
            if (cur[j - 1] + 1 < best) best = cur[j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && prev2[j - 2] + 1 < best)
                best = prev2[j - 2] + 1;
            cur[j] = best;
        }
    }
    return rows[n % 3][m];
}

bool near_enough(const char *query, size_t distance)
{
    size_t limit = strlen(query) / 3;
    return distance <= (limit < 1 ? 1 : limit);
}

const char *closest_word(const char *word, const char *const *candidates, size_t n)
{
    const char *best = NULL;
    size_t best_d = SIZE_MAX;
    for (size_t i = 0; i < n; i++) {
        size_t d = edit_distance(word, candidates[i]);
        if (d < best_d) best = candidates[i], best_d = d;
    }
    return best && near_enough(word, best_d) ? best : NULL;
}
