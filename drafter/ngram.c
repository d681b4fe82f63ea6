/*
 * ngram.c - prompt lookup (see ngram.h). A backwards scan per suffix length:
 * O(n_ctx * n) per call, a few microseconds for contexts of some thousand
 * tokens, which is nothing next to a round trip.
 */
#include "ngram.h"

#include <string.h>

#define S_TREE_MAX_WIDTH 64 // branches of one tree at most

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

/* Adds the sequence seq[0..n) under the root of the trie (out, parent, *n_nodes):
 * follows the nodes that already hold its prefix, then appends new nodes while
 * the budgets allow. Returns the number of new nodes. */
static int s_trie_add(const int32_t *seq, int n, int max_new, int max_nodes, int32_t *out,
                      int32_t *parent, int *n_nodes)
{
    int at = 0, added = 0; // node index (0 = root)
    for (int i = 0; i < n; i++) {
        int child = 0;
        for (int c = at + 1; c <= *n_nodes && !child; c++) // children have larger indices
            if (parent[c - 1] == at && out[c - 1] == seq[i])
                child = c;
        if (child) {
            at = child;
            continue;
        }
        if (added == max_new || *n_nodes == max_nodes)
            break;
        out[*n_nodes] = seq[i];
        parent[*n_nodes] = at;
        at = ++*n_nodes;
        added++;
    }
    return added;
}

int draft_ngram_propose_tree(const int32_t *ctx, int n_ctx, int n_max, int n_min, int depth,
                             int width, int max_nodes, int32_t *out, int32_t *parent, int *match_n)
{
    if (match_n)
        *match_n = 0;
    if (depth > max_nodes)
        depth = max_nodes;
    if (n_min < 1)
        n_min = 1;
    if (!ctx || depth < 1 || width < 1 || n_ctx < 2)
        return 0;
    /* The first branch: the chain proposer's answer. */
    int m = 0;
    const int n0 = draft_ngram_propose(ctx, n_ctx, n_max, n_min, depth, out, &m);
    if (n0 < 1)
        return 0;
    if (match_n)
        *match_n = m;
    for (int i = 0; i < n0; i++)
        parent[i] = i;
    int n_nodes = n0, branches = 1;
    const int branch_depth = depth / 2 > 1 ? depth / 2 : 1;
    /* Continuations already used (one occurrence matches several suffix lengths). */
    int used[S_TREE_MAX_WIDTH], n_used = 0;
    if (width > S_TREE_MAX_WIDTH)
        width = S_TREE_MAX_WIDTH;
    /* Later branches: other occurrences of suffixes of length m down to n_min. */
    for (int n = m; n >= n_min && branches < width && n_nodes < max_nodes; n--) {
        const int32_t *suffix = ctx + n_ctx - n;
        for (int j = n_ctx - n - 1; j >= 0 && branches < width && n_nodes < max_nodes; j--) {
            if (ctx[j] != suffix[0] || memcmp(ctx + j, suffix, (size_t)n * sizeof *ctx) != 0)
                continue;
            const int from = j + n, len = n_ctx - from < depth ? n_ctx - from : depth;
            int seen = len < 1;
            for (int u = 0; u < n_used && !seen; u++)
                seen = used[u] == from;
            if (seen)
                continue;
            if (n_used < S_TREE_MAX_WIDTH)
                used[n_used++] = from;
            if (s_trie_add(ctx + from, len, branch_depth, max_nodes, out, parent, &n_nodes) > 0)
                branches++;
        }
    }
    return n_nodes;
}
