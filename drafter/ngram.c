/*
 * ngram.c - prompt lookup (see ngram.h). A backwards scan per suffix length:
 * O(n_ctx * n) per call, a few microseconds for contexts of some thousand
 * tokens, which is nothing next to a round trip.
 */
#include "ngram.h"

#include <string.h>

int draft_ngram_propose(const int32_t *ctx, int n_ctx, int n_max, int n_min, int k_max,
                        int32_t *out, int *match_n)
{
    if (match_n)
        *match_n = 0;
    if (n_min < 1)
        n_min = 1;
    if (!ctx || k_max < 1 || n_ctx < 2)
        return 0;
    for (int n = n_max < n_ctx - 1 ? n_max : n_ctx - 1; n >= n_min; n--) {
        const int32_t *suffix = ctx + n_ctx - n;
        /* Earlier occurrences start at j with j + n < n_ctx (at least one
         * token follows them); the most recent one first. */
        for (int j = n_ctx - n - 1; j >= 0; j--) {
            if (ctx[j] != suffix[0] || memcmp(ctx + j, suffix, (size_t)n * sizeof *ctx) != 0)
                continue;
            /* Copy what followed; past the end of ctx the copy reads its own
             * output, so a repeating pattern keeps repeating. */
            for (int i = 0; i < k_max; i++) {
                const int at = j + n + i;
                out[i] = at < n_ctx ? ctx[at] : out[at - n_ctx];
            }
            if (match_n)
                *match_n = n;
            return k_max;
        }
    }
    return 0;
}
