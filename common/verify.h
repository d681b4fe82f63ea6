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

/* One verification round. The pointers are borrowed for the call. */
typedef struct sw_verify_in {
    int32_t k;             // number of draft tokens K, >= 0
    const int32_t *draft;  // (K) d_1..d_K, each in [0, n_vocab)
    const sw_draft_q_t *q; // (K) draft distributions; NULL: every q_i is a point mass at d_i
    const float *logits;   // (K + 1, n_vocab) row-major target logits; row i follows d_1..d_i
} sw_verify_in_t;

/* Runs the rule with sampler s (its parameters say greedy or sampling).
 * work: 2 * n_vocab floats of caller-owned scratch. tokens_out: K + 1 slots;
 * it receives the committed tokens: the accepted drafts d_1..d_n, then the
 * correction or bonus token.
 * Returns the number of committed tokens n + 1 (1..K+1; n_accepted is the
 * return value - 1), or -1 on invalid input (bad draft id, q out of range or
 * inconsistent with q_tok: checked before anything changes) or bad logits
 * (NaN/+inf: found while walking the rows, after part of the history may have
 * been advanced; reset the sampler or drop the session). */
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
