/*
 * sampler.h - turns one row of logits into the next token: greedy argmax, or
 * a random draw after repetition penalty, top-k, top-p, min-p and temperature.
 *
 * The filter chain follows llama.cpp's default order:
 *
 *   penalties -> top_k -> top_p -> min_p -> temperature -> draw
 *
 * so top-p and min-p see the temperature-1 softmax of the penalised logits,
 * and temperature only reshapes the set they kept. temp <= 0 means greedy:
 * the argmax of the penalised logits, lowest index on ties, with no other
 * float arithmetic (the result is bit-stable). The other filters never remove
 * the argmax, so greedy ignores them.
 *
 * Repetition penalty (llama.cpp semantics): every distinct token among the
 * last rep_last_n accepted tokens gets logit / penalty when its logit is > 0
 * and logit * penalty otherwise, once however often it occurs.
 *
 * Speculative decoding needs the full final distribution rather than one
 * draw: sw_sampler_probs() writes it (zeros outside the kept set) and
 * sw_sampler_sample_probs() draws from such a vector. sw_sampler_sample() is
 * exactly those two calls, so a draw through either path consumes the same
 * random numbers and gives the same token.
 *
 * Determinism: the RNG (rng.h) is exact integer arithmetic; the probabilities
 * use the C library's exp(), so two machines with different libm versions can
 * in principle round a probability differently and, rarely, flip a draw that
 * lands within an ulp of a boundary. Greedy is exact everywhere.
 *
 * One owner thread per sampler. All scratch memory is allocated by
 * sw_sampler_new(); sampling a token never allocates.
 */
#ifndef SW_SAMPLER_H
#define SW_SAMPLER_H

#include "rng.h"
#include "sw_limits.h"

#include <stdint.h>

/* sw_sampling_t and sw_sampling_default() are in sw_limits.h (shared with the wire). */

typedef struct sw_sampler sw_sampler_t;

/* Checks every field's range (parameters may come from a client over the
 * wire). 0 if valid; -1 and one error line naming the field otherwise. */
int sw_sampling_check(const sw_sampling_t *params) __attribute__((warn_unused_result));

/* A sampler for a vocabulary of n_vocab tokens (>= 1), with its RNG seeded
 * from params->seed and an empty history. NULL on invalid parameters or out of
 * memory. Free with sw_sampler_free(). */
sw_sampler_t *sw_sampler_new(const sw_sampling_t *params, int32_t n_vocab)
    __attribute__((warn_unused_result));
/* Frees the sampler; accepts NULL and NULLs the caller's pointer. */
void sw_sampler_free(sw_sampler_t **self_p);

/* Clears the history and reseeds the RNG from params.seed: the sampler is
 * then in the state sw_sampler_new() returned. */
void sw_sampler_reset(sw_sampler_t *s);

/* Clears the history only (a new conversation); the RNG stream goes on. */
void sw_sampler_clear_history(sw_sampler_t *s);

/* The history as it is before at most n more sw_sampler_accept calls: the
 * entries those would overwrite go to buf (min(n, rep_last_n) of them), so
 * that sw_sampler_history_rewind can put the history back exactly (a round
 * verified a second time, see sw_verifier_run). */
typedef struct sw_sampler_mark {
    int32_t len, pos, n; /* the ring's length and write index, entries saved in buf */
} sw_sampler_mark_t;
void sw_sampler_history_mark(const sw_sampler_t *s, int n, int32_t *buf, sw_sampler_mark_t *m);
void sw_sampler_history_rewind(sw_sampler_t *s, const int32_t *buf, const sw_sampler_mark_t *m);
/* The history's capacity (rep_last_n): a mark's buf needs at most that many entries. */
int sw_sampler_history_cap(const sw_sampler_t *s);

/* Appends a token to the repetition-penalty history (prompt tokens and every
 * committed token, in order). Ids outside [0, n_vocab) are kept in the window
 * but penalise nothing. */
void sw_sampler_accept(sw_sampler_t *s, int32_t token);

/* The next token for one row of n_vocab logits (not modified): greedy when
 * temp <= 0, else a draw from sw_sampler_probs(). Does NOT add the token to
 * the history (call sw_sampler_accept() once it is committed).
 * -1 when the logits hold a NaN or +inf, or every logit is -inf. */
int32_t sw_sampler_sample(sw_sampler_t *s, const float *logits) __attribute__((warn_unused_result));

/* Greedy argmax of the penalised logits (lowest index on ties), whatever
 * temp is; consumes no random numbers. -1 as for sw_sampler_sample(). */
int32_t sw_sampler_argmax(sw_sampler_t *s, const float *logits) __attribute__((warn_unused_result));

/* The final distribution after the whole chain, written to probs_out
 * (n_vocab floats, caller-owned): zeros outside the kept set, the rest sums
 * to 1. With temp <= 0 it is a point mass at the greedy argmax. Uses the
 * current history; consumes no random numbers. 0, or -1 as for
 * sw_sampler_sample() (probs_out is then undefined). */
int sw_sampler_probs(sw_sampler_t *s, const float *logits, float *probs_out)
    __attribute__((warn_unused_result));

/* Draws a token from a non-negative vector of n_vocab weights (it need not be
 * normalised; zeros are never drawn), consuming one uniform from the RNG.
 * -1 when a weight is negative or not finite, or all are zero. */
int32_t sw_sampler_sample_probs(sw_sampler_t *s, const float *probs)
    __attribute__((warn_unused_result));

/* The sampler's parameters, vocabulary size and RNG (the verifier draws its
 * acceptance tests from the same stream, so one seed fixes a whole run). */
const sw_sampling_t *sw_sampler_params(const sw_sampler_t *s);
int32_t sw_sampler_n_vocab(const sw_sampler_t *s);
sw_rng_t *sw_sampler_rng(sw_sampler_t *s);

#endif
