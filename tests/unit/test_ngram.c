/*
 * test_ngram.c - the n-gram (prompt lookup) tree proposer of drafter/ngram.h:
 *
 *  - width 1 is the chain proposer's answer, node for node;
 *  - several earlier occurrences that continue differently become branches
 *    of a trie: shared prefixes once, siblings distinct, every parent before
 *    its child, the first branch the chain's, later branches at most
 *    depth / 2 new nodes, the node budget respected;
 *  - no match gives no tree; a suffix of length 1 still finds branches when
 *    longer ones do not match.
 */
#include <string.h>

#include "ngram.h"
#include "sw_test.h"

/* Checks the tree invariants; returns 1 when they hold. */
static int s_valid(const int32_t *out, const int32_t *parent, int n)
{
    int ok = 1;
    for (int i = 0; i < n; i++) {
        ok &= parent[i] >= 0 && parent[i] <= i;
        for (int c = 0; c < i; c++)
            ok &= !(parent[c] == parent[i] && out[c] == out[i]);
    }
    return ok;
}

static void test_chain_equivalence(void)
{
    const int32_t ctx[] = {5, 6, 7, 8, 9, 5, 6, 7};
    int32_t chain[6], tree[6], parent[6];
    int m1 = 0, m2 = 0;
    int n1 = draft_ngram_propose(ctx, 8, 3, 1, 6, chain, &m1);
    int n2 = draft_ngram_propose_tree(ctx, 8, 3, 1, 6, 1, 6, tree, parent, &m2);
    SW_CHECK_INT(n1, 6);
    SW_CHECK_INT(n2, n1);
    SW_CHECK_INT(m2, m1);
    SW_CHECK(!memcmp(chain, tree, sizeof chain));
    for (int i = 0; i < n2; i++)
        SW_CHECK_INT(parent[i], i);
}

static void test_branches(void)
{
    /* "1 2" was followed by 3 4 5, then by 7 8, then by 3 9 (most recent). */
    const int32_t ctx[] = {1, 2, 3, 4, 5, 0, 1, 2, 7, 8, 0, 1, 2, 3, 9, 0, 1, 2};
    const int n_ctx = (int)(sizeof ctx / sizeof ctx[0]);
    int32_t out[16], parent[16];
    int m = 0;
    int n = draft_ngram_propose_tree(ctx, n_ctx, 3, 1, 4, 3, 16, out, parent, &m);
    SW_CHECK_INT(m, 3); // "0 1 2" matched
    SW_CHECK(s_valid(out, parent, n));
    /* The chain (most recent occurrence): 3 9 0 1. */
    int32_t chain[4];
    SW_CHECK_INT(draft_ngram_propose(ctx, n_ctx, 3, 1, 4, chain, NULL), 4);
    SW_CHECK(!memcmp(out, chain, sizeof chain));
    for (int i = 0; i < 4; i++)
        SW_CHECK_INT(parent[i], i);
    /* Then 7 8 (under the root, 2 = depth / 2 new nodes), then 3 4 sharing the 3. */
    SW_CHECK_INT(n, 8);
    SW_CHECK(out[4] == 7 && parent[4] == 0 && out[5] == 8 && parent[5] == 5);
    SW_CHECK(out[6] == 4 && parent[6] == 1 && out[7] == 5 && parent[7] == 7);

    /* The node budget and the width. */
    n = draft_ngram_propose_tree(ctx, n_ctx, 3, 1, 4, 3, 5, out, parent, &m);
    SW_CHECK_INT(n, 5);
    SW_CHECK(s_valid(out, parent, n));
    n = draft_ngram_propose_tree(ctx, n_ctx, 3, 1, 4, 2, 16, out, parent, &m);
    SW_CHECK_INT(n, 6);

    /* Depth 1: one level of candidates, all under the root. */
    n = draft_ngram_propose_tree(ctx, n_ctx, 3, 1, 1, 3, 16, out, parent, &m);
    SW_CHECK_INT(n, 2); // 3 (both 3 4 5 and 3 9 start with it) and 7
    SW_CHECK(out[0] == 3 && out[1] == 7 && parent[0] == 0 && parent[1] == 0);
}

static void test_no_match(void)
{
    const int32_t none[] = {1, 2, 3, 4};
    int32_t out[4], parent[4];
    int m = 7;
    SW_CHECK_INT(draft_ngram_propose_tree(none, 4, 3, 1, 4, 3, 4, out, parent, &m), 0);
    SW_CHECK_INT(m, 0);
    /* Only a 1-token suffix matches: its occurrences still branch. */
    const int32_t one[] = {9, 4, 1, 9, 5, 2, 9};
    int n = draft_ngram_propose_tree(one, 7, 3, 1, 2, 3, 8, out, parent, &m);
    SW_CHECK_INT(m, 1);
    SW_CHECK(s_valid(out, parent, n));
    SW_CHECK(n == 3 && out[0] == 5 && out[1] == 2 && out[2] == 4 && parent[2] == 0);
    SW_CHECK_INT(draft_ngram_propose_tree(one, 7, 3, 1, 0, 3, 8, out, parent, &m), 0);
}

int main(void)
{
    test_chain_equivalence();
    test_branches();
    test_no_match();
    return sw_test_done();
}
