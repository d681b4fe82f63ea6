/*
 * verify.h - the acceptance rule of speculative decoding (Leviathan et al.
 * 2023, Chen et al. 2023): given K draft tokens d_1..d_K and the target's
 * logits for the K+1 positions that follow t0, d_1, ..., d_K, decide how many
 * drafts to keep and which one token to add, so that the committed tokens
 * have exactly the distribution the target sampler alone would give.
 *
 * Greedy (temp <= 0): accept d_{i+1} while it equals the argmax of row i;
 * at the first mismatch commit the row's argmax instead; if all K match,
 * commit the argmax of row K (the bonus token). Uses no random numbers.
 *
 * Sampling: p_i = sw_sampler_probs(row i) (after every filter of the chain).
 * Accept d_{i+1} with probability min(1, p_i(d_{i+1}) / q_i(d_{i+1})); on the
 * first rejection commit a draw from norm(max(0, p_i - q_i)); if all K are
 * accepted commit a draw from p_K. The acceptance test needs only the draft's
 * probability of its own token (sw_draft_q_t.q_tok); the draft's full
 * distribution is read only at the one rejected position, and may be sparse
 * (the support left by the draft's own top-k), which keeps it small enough to
 * ship with the drafts. A deterministic proposer (n-gram, greedy draft model)
 * has q_i = point mass at d_i: pass q = NULL, and the residual is p_i with
 * d_i zeroed. A sampling draft model must pass the very distribution its
 * token was drawn from (e.g. its own sw_sampler_probs() row, whose non-zero
 * entries are the sparse support), else the output is no longer the
 * target's distribution. All random numbers come from the sampler's RNG, so one seed
 * gives one output.
 *
 * History: p_i depends on the repetition-penalty history including
 * d_1..d_i. sw_verify() walks the rows in order and calls sw_sampler_accept()
 * on each committed token before it computes the next row, so when it
 * returns, the sampler's history already holds every committed token: the
 * caller must not accept them again. Rows after the first rejection are never
 * evaluated (the work is proportional to the tokens committed).
 *
 * Trees (sw_verify_in_t.parent): the drafts form a tree under the root (the
 * token before the drafts, row 0); node i >= 1 is draft i - 1 and its logits
 * are row i. The children of a node (in index order, distinct tokens) are
 * alternative candidates for the same position. Greedy walks from the root:
 * commit the row's argmax and move to the child holding it, until no child
 * does (the longest path matching the target's argmax). Sampling uses the
 * multi-candidate rejection rule (SpecInfer's multi-step speculative
 * sampling, in its recursive form for candidates drawn without replacement):
 * at a node with target distribution p_1 = p and candidates x_1..x_m whose
 * draft distributions were q_1..q_m, candidate s is accepted with
 * probability min(1, p_s(x_s) / q_s(x_s)); on rejection
 * p_{s+1} = norm(max(0, p_s - q_s)) and the next candidate is tried; if all
 * are rejected the token is a draw from p_{m+1}. Each stage is the chain
 * rule for (p_s, q_s), so the output is distributed as p whatever q_s is, as
 * long as x_s really was drawn from q_s. Two kinds of candidates:
 *  - point masses (q NULL, or the first sibling's q a point mass): the
 *    candidates are deterministic (e.g. the draft's top tokens), q_s is the
 *    point mass at x_s, and the residual zeroes x_s;
 *  - drawn without replacement from one draft distribution q (the first
 *    sibling's q): x_1 ~ q, x_2 ~ q without x_1 renormalised, ...; so
 *    q_s = q with x_1..x_{s-1} removed, renormalised. Later siblings give
 *    only their q_tok = q(x_s) (their n/ids/vals are not read).
 * A chain is the tree where node i's only child is node i + 1, and both
 * paths compute bit-identical results and consume the same random numbers.
 */
#ifndef SW_VERIFY_H
#define SW_VERIFY_H

#include "sampler.h"

#include <stdint.h>

/* What is known of the draft distribution q_i at one draft position. */
typedef struct sw_draft_q {
    float q_tok;        // q_i(d_i), in (0, 1]: what the acceptance test uses
    int32_t n;          // entries in ids/vals; 0 = q_i is a point mass at d_i (q_tok must be 1)
    const int32_t *ids; // (n) token ids of q_i's support (sparse), or NULL: vals is dense
    const float *vals;  // (n) q_i(ids[j]); dense: (n_vocab) q_i by token id, n == n_vocab
} sw_draft_q_t;

/* Most drafts of a tree (a chain has no limit of its own). */
#define SW_VERIFY_MAX_TREE 256

/* One verification round. The pointers are borrowed for the call. */
typedef struct sw_verify_in {
    int32_t k;             // number of draft tokens K, >= 0
    const int32_t *draft;  // (K) d_1..d_K, each in [0, n_vocab)
    const sw_draft_q_t *q; // (K) draft distributions; NULL: every q_i is a point mass at d_i
    const float *logits;   // (K + 1, n_vocab) row-major target logits; row 0 follows the root,
                           // row i follows node i (draft i - 1) and its ancestors
    const int32_t *parent; // (K) NULL: a chain. Else a tree: draft i is node i + 1 and hangs
                           // under node parent[i] in [0, i] (0 = the root), K <= SW_VERIFY_MAX_TREE
} sw_verify_in_t;

/* Runs the rule with sampler s (its parameters say greedy or sampling).
 * work: 2 * n_vocab floats of caller-owned scratch. tokens_out: K + 1 slots;
 * it receives the committed tokens: the accepted drafts d_1..d_n, then the
 * correction or bonus token. path_out (K slots, may be NULL) receives the node
 * index (1..K) of each accepted draft, root first: for a chain 1, 2, .., n.
 * Returns the number of committed tokens n + 1 (1..K+1; n_accepted is the
 * return value - 1), or -1 on invalid input (bad draft id or parent, equal
 * siblings, q out of range or inconsistent with q_tok: checked before anything
 * changes) or bad logits (NaN/+inf: found while walking the rows, after part
 * of the history may have been advanced; reset the sampler or drop the
 * session). */
int sw_verify_path(sw_sampler_t *s, const sw_verify_in_t *in, float *work, int32_t *tokens_out,
                   int32_t *path_out) __attribute__((warn_unused_result));

/* sw_verify_path() without the path. */
int sw_verify(sw_sampler_t *s, const sw_verify_in_t *in, float *work, int32_t *tokens_out)
    __attribute__((warn_unused_result));

/* The draw after a rejection, for callers that run the acceptance tests and
 * the residual in different places: a token from norm(max(0, p - q)), where
 * p is a full target distribution (n_vocab) and q is the draft distribution
 * at that position (NULL: point mass at d, so the residual is p with d
 * zeroed). When the residual has no mass (p <= q everywhere, which only
 * rounding allows after a rejection) it draws from p. Consumes one uniform.
 * work: n_vocab floats. The token, or -1 on invalid input. Does not touch the
 * history. */
int32_t sw_verify_residual(sw_sampler_t *s, const float *p, int32_t d, const sw_draft_q_t *q,
                           float *work) __attribute__((warn_unused_result));

#endif
