/*
 * decode.h - one generation, round by round, the same way in one process
 * and across the pipeline.
 *
 * A round sends n rows to the target: the tokens that are new to its cache
 * (the prompt in the first round, then the last committed token t0) followed
 * by n_draft draft tokens, plus kv_keep, the number of cache positions every
 * stage keeps before appending (this is how rejected drafts are rolled back
 * with no extra message). The target runs the rows in one batch, verifies
 * the drafts with the speculative rule and answers with the committed tokens
 * (the accepted drafts and one token of its own). Without drafts a round is
 * one plain decoding step.
 *
 * sw_verifier_t is the part of the target that turns logits into a verdict;
 * the last pipeline stage runs the same code as the local target.
 */
#ifndef SW_DECODE_H
#define SW_DECODE_H

#include <stdint.h>

#include "model.h"
#include "sampler.h"
#include "sw_limits.h"
#include "verify.h"

/* SW_MAX_DRAFT (draft tokens in one round) and SW_PROPOSAL_Q_MAX are in
 * sw_limits.h, where the wire's limits are defined from them: a round holds
 * what one Forward carries. */
_Static_assert(SW_MAX_DRAFT == SW_WIRE_MAX_DRAFT, "a round holds the drafts of one Forward");
_Static_assert(SW_PROPOSAL_Q_MAX == SW_WIRE_MAX_DIST,
               "a proposal's draft distribution is what one Forward carries");
_Static_assert(SW_MAX_DRAFT <= SW_VERIFY_MAX_TREE, "a round's token tree fits the verifier");

typedef struct sw_round {
    int kv_keep;           // cache positions every stage keeps before appending
    int n;                 // rows: n - n_draft new context tokens, then the drafts
    const int32_t *tokens; // (n) row tokens
    int n_draft;           // 0..SW_MAX_DRAFT
    const sw_draft_q_t *q; // (n_draft) draft distributions, NULL = point masses
    const int32_t *parent; // (n_draft) NULL = the drafts are a chain; else a tree (verify.h):
                           // draft i hangs under node parent[i] in [0, i], node 0 being the last
                           // context row and node j draft j - 1. Each draft row sits at the
                           // position of its depth and attends to the context and its ancestors
    /* The accepted path of the previous tree round, kept before kv_keep
     * applies (so a tree round costs no extra message): cache positions
     * kv_path_from + kv_path[j] move to kv_path_from + j, j < n_kv_path
     * (offsets increasing, kv_path[j] >= j), and the cache then holds
     * kv_path_from + n_kv_path positions. n_kv_path = 0: nothing moves. */
    int kv_path_from;       // first cache position of the previous round's drafts
    int n_kv_path;          // 0..SW_MAX_DRAFT
    const int32_t *kv_path; // (n_kv_path) offsets from kv_path_from
    /* Optional (may be NULL): work the target may do while it waits for the
     * round's result (overlapped drafting: sw_gen_work), one bounded step per
     * call; it returns 1 when it has more to do, 0 when idle. Never part of
     * what the round computes: a target may call it any number of times, or
     * never. The head calls it between messages while the round travels; the
     * local target, which has nothing to wait for, runs it until idle before
     * it computes (so one process follows the same logic). */
    int (*idle)(void *idle_ctx);
    void *idle_ctx;
} sw_round_t;

typedef struct sw_verdict {
    int n_commit;                     // 1..n_draft + 1 (accepted drafts + 1)
    int32_t tokens[SW_MAX_DRAFT + 1]; // committed tokens
    int32_t path[SW_MAX_DRAFT];       // (n_commit - 1) node index (1..n_draft) of each accepted
                                      // draft; a chain's are 1, 2, ..
    double compute_ms;                // target compute time of the round
    uint64_t logits_digest;           // running digest of every logits row verified since
                                      // the context last started (kv_keep == 0)
} sw_verdict_t;

/* Fills path (n_kv_path offsets) for keeping the accepted drafts of a tree
 * round whose verdict is v: 0 when they already sit where a chain's would
 * (nothing to move), else n_commit - 1. */
int sw_verdict_kv_path(const sw_verdict_t *v, int32_t *path);

/* Applies a round's cache instructions to kv: keeps the previous tree
 * round's accepted path (kv_path), then truncates to kv_keep. 0, or -1 with
 * err (nothing changed when the path does not fit the cache). */
int sw_round_kv(sw_kv_t *kv, const sw_round_t *r, char *err, size_t err_len)
    __attribute__((warn_unused_result));
/* The cache slot each of the round's rows [row0, row0 + rows) hangs under
 * (sw_forward_t.parent) once sw_round_kv applied: 1 and out filled for a
 * tree round, 0 (out untouched: the rows are a sequence) otherwise. */
int sw_round_parents(const sw_round_t *r, int row0, int rows, int32_t *out);
/* Checks a round's tree and kept path (shapes only, not the tokens): 0, or -1
 * with one line in err. */
int sw_round_check(const sw_round_t *r, char *err, size_t err_len)
    __attribute__((warn_unused_result));

/* ---- verifier ---- */

typedef struct sw_verifier sw_verifier_t;

sw_verifier_t *sw_verifier_new(const sw_sampling_t *params, int n_vocab)
    __attribute__((warn_unused_result));
void sw_verifier_free(sw_verifier_t **self_p);
/* Verifies a round given the logits of its last n_draft + 1 rows. Feeds the
 * round's context tokens and the committed tokens to the sampler's history
 * (each position once, whatever kv_keep says; kv_keep == 0 restarts the
 * history and the logits digest). The round's random numbers come from the RNG reseeded with a hash
 * of (seed, the round's first drawing position: kv_keep + its context rows), not from a stream that
 * runs across rounds, so a round retried after its stage restarted and the session was replayed
 * commits the same tokens (each round on its own is still the exact speculative rule). The same
 * round verified again at once (its kv_keep is the last run's: the head sent it again because the
 * verdict was lost with a relay) first puts the history and the digest back as they were before
 * that run, so that the second verdict and everything after it equal a run without the loss. 0, or
 * -1 with err. */
int sw_verifier_run(sw_verifier_t *v, const sw_round_t *r, const float *logits, sw_verdict_t *out,
                    char *err, size_t err_len) __attribute__((warn_unused_result));

/* Feeds context tokens at positions [kv_keep, kv_keep + n) to the sampler's
 * history without verifying (a prefill or replay chunk that more chunks
 * follow; kv_keep == 0 restarts the history). */
int sw_verifier_feed(sw_verifier_t *v, int kv_keep, const int32_t *tokens, int n, char *err,
                     size_t err_len) __attribute__((warn_unused_result));

/* ---- targets ---- */

typedef struct sw_target {
    /* Runs one round; 0, or -1 with a one-line reason in err. */
    int (*round)(void *ctx, const sw_round_t *r, sw_verdict_t *out, char *err, size_t err_len);
    void *ctx;
} sw_target_t;

/* A target that runs the whole model in this process. */
typedef struct sw_local_target sw_local_target_t;
sw_local_target_t *sw_local_target_new(sw_model_t *m, int n_ctx, const sw_sampling_t *params,
                                       char *err, size_t err_len)
    __attribute__((warn_unused_result));
void sw_local_target_free(sw_local_target_t **self_p);
sw_target_t sw_local_target(sw_local_target_t *t);

/* ---- proposers ---- */

/* A proposal's draft distributions carry at most SW_PROPOSAL_Q_MAX entries
 * each (sw_limits.h; the draft model's DRAFT_Q_MAX). */

/* The drafts a proposer offers for one round: a chain, or a token tree in
 * verify.h's layout. The q entries point into the proposer's memory and stay
 * valid until its next proposal starts (sw_gen_t copies what it keeps). */
typedef struct sw_proposal {
    int n;                        // drafts, 0..SW_MAX_DRAFT
    int32_t tokens[SW_MAX_DRAFT]; // (n) draft tokens (draft i is tree node i + 1)
    int tree;                     // 1: parent holds a tree; 0: a chain
    int32_t parent[SW_MAX_DRAFT]; // (n) tree only: node of each draft's parent, in [0, i]
    int q_used;                   // 1: q holds each draft's distribution (else point masses)
    sw_draft_q_t q[SW_MAX_DRAFT]; // (n) when q_used
    float conf[SW_MAX_DRAFT];     // (n) the proposer's probability of each draft, for its
                                  // calibration; -1 = none
    int n_main;                   // the most likely path: nodes 1..n_main, each the first
                                  // child of the one before (a chain: n)
    int32_t guess;                // a proposal asked with guess: the token guessed after ctx,
                                  // which the drafts follow (-1: no guess; then n is 0)
    int kind;                     // the proposer's own tag (e.g. which proposer made it)
    double ms; // compute that a batching proposer ran for it outside its start and step calls
               // (one forward for many sessions' drafts): the caller counts it as drafting
               // and sets it back to 0
} sw_proposal_t;

/* How a round went, for sw_proposer_t.observe. */
typedef struct sw_round_obs {
    const sw_proposal_t *prop; // the round's drafts (prop->n == 0: a round without any)
    int n_accepted;            // drafts kept
    const int32_t *path;       // (n_accepted) their nodes (1..n), root first
    double round_ms;           // the target's wall time (compute and network, no proposing)
    double compute_ms;         // the part the target reported as compute
    double cycle_ms;           // from the verdict before to this one: drafting on the critical
                               // path, the round, and whatever else the thread did meanwhile
    int n_ctx;                 // committed positions after the round
    int ahead;                 // drafting ahead for this round's outcome: -1 none, 0 the
                               // outcome was another, 1 the prepared drafts were used
} sw_round_obs_t;

typedef struct sw_proposer {
    /* Proposes drafts (a chain at most k_max deep, or a tree of at most
     * SW_MAX_DRAFT nodes none deeper than k_max) that follow the committed
     * sequence ctx[0..n_ctx) into *out (every field written). guess = 1:
     * first guess the token that would follow ctx (the bonus token of a round
     * whose drafts were all accepted), write it to out->guess and propose
     * what follows ctx + guess; a proposer that does not guess (or declines
     * to draft ahead) sets out->guess = -1 and out->n = 0. Returns 0, or -1
     * on error. */
    int (*propose)(void *self, const int32_t *ctx, int n_ctx, int k_max, int guess,
                   sw_proposal_t *out);
    /* Optional (NULL: propose is quick): the same proposal in bounded pieces,
     * so that one thread can draft for many sessions and between messages.
     * start begins what propose would compute (ctx must stay valid until it
     * is done; a new start drops an unfinished one), then step does one
     * piece and returns 1 while more remains, 0 when *out holds exactly what
     * propose would have written (out->guess may be set earlier, as soon as
     * it is known, -1 until then), -1 on error. */
    int (*start)(void *self, const int32_t *ctx, int n_ctx, int k_max, int guess,
                 sw_proposal_t *out);
    int (*step)(void *self);
    void *self;
    /* Optional (may be NULL): told after every decode round of a generation
     * with drafting on how it went. Adaptive proposers tune K, the tree and
     * drafting ahead on it. */
    void (*observe)(void *self, const sw_round_obs_t *o);
} sw_proposer_t;

/* ---- generation ---- */

typedef struct sw_gen_stats {
    int n_prompt;           // prompt tokens
    int n_gen;              // generated tokens
    int rounds;             // rounds after the prefill
    int drafted;            // draft tokens sent
    int accepted;           // draft tokens accepted
    double ttft_ms;         // request start to the first generated token
    double prefill_ms;      // prefill round
    double decode_ms;       // from the first generated token to the last
    double draft_ms;        // time spent proposing with no round out (on the critical path)
    double ahead_ms;        // time spent drafting ahead while a round was out
    double target_ms;       // time the target reported computing
    int tree_rounds;        // rounds whose drafts were a tree
    int kv_moves;           // rounds that moved a tree round's accepted path in the caches
    int ahead_hits;         // rounds that left with drafts prepared while the one before travelled
    int ahead_misses;       // rounds whose prepared drafts were dropped (another outcome)
    uint64_t logits_digest; // the target's running digest of every logits row it verified
                            // since the context last started (a replay restarts it):
                            // equal digests = bit-identical logits (tests compare runs)
} sw_gen_stats_t;

typedef struct sw_gen_opts {
    int n_predict;           // tokens to generate at most
    int k;                   // deepest drafts of a round (0 = no speculation)
    sw_proposer_t *proposer; // NULL = no speculation
    int ahead;               // 1: draft the next round ahead while one is out (sw_gen_work)
    int stop_at_eog;         // stop after an end-of-generation token
    /* Called with each batch of committed tokens; return non-zero to stop. */
    int (*on_tokens)(void *ctx, const int32_t *tokens, int n);
    void *on_tokens_ctx;
    /* 1 when a token ends generation (EOS/EOT). */
    int (*is_eog)(void *ctx, int32_t token);
    void *is_eog_ctx;
} sw_gen_opts_t;

/* A generation driven one round at a time, so that one thread can run many
 * at once (the head interleaves its sessions this way; sw_generate() is the
 * plain loop over it). The round logic lives here only: the prefill first,
 * then each round the last committed token and the proposer's drafts (a
 * chain or a tree; after a tree round, the next round's kv_path keeps the
 * accepted path's cache entries); each verdict is cut at n_predict and at an
 * end-of-generation token and handed to on_tokens.
 *
 * Drafting ahead (o->ahead): while a round is out, sw_gen_work() drafts the
 * round after it for the most likely outcome (every draft on the main path
 * accepted, and the proposer's guess of the bonus token). When the verdict
 * is that outcome, the next round takes those drafts (no drafting on the
 * critical path); otherwise they are dropped and the proposer drafts for
 * the real outcome (its cache rolls back as after any rejection). Drafts
 * depend only on the committed tokens, never on timing, so the output does
 * not change (proposers guarantee it: see drafter.h).
 *
 * sw_gen_new copies the prompt and o (o's callbacks and their contexts are
 * borrowed and must outlive the generation). NULL with err on failure. */
typedef struct sw_gen sw_gen_t;
sw_gen_t *sw_gen_new(const int32_t *prompt, int n_prompt, const sw_gen_opts_t *o, char *err,
                     size_t err_len) __attribute__((warn_unused_result));
void sw_gen_free(sw_gen_t **self_p);
/* One bounded piece of drafting (one step of the proposer): for the next
 * round when none is out, or ahead (o->ahead) for the likely outcome of the
 * round that is out. Returns 1 when more remains, 0 when there is nothing to
 * do now, -1 with err when the proposer failed. Optional: sw_gen_next does
 * what is left itself. Also the round's idle hook (sw_round_t.idle). */
int sw_gen_work(sw_gen_t *g, char *err, size_t err_len) __attribute__((warn_unused_result));
/* The next round to run (*r points into g and stays valid until the verdict
 * is committed): 0, 1 when the generation is over (*r NULL), or -1 with err
 * (the proposer failed). Drafting happens here (what sw_gen_work left).
 * Asked again before the verdict, it gives the same round. */
int sw_gen_next(sw_gen_t *g, const sw_round_t **r, char *err, size_t err_len)
    __attribute__((warn_unused_result));
/* Commits the verdict of the round sw_gen_next gave: the tokens it adds to
 * the output (after the cut) come back in *tokens / *n (pointing into g) and
 * went to on_tokens; the proposer is told how the round went. A tree round's
 * verdict must name its accepted path (v->path) and it must be a path of the
 * tree holding the committed drafts. 0, or -1 with err (no round out, or a
 * verdict that does not fit it). */
int sw_gen_commit(sw_gen_t *g, const sw_verdict_t *v, const int32_t **tokens, int *n, char *err,
                  size_t err_len) __attribute__((warn_unused_result));
/* 1 when the generation is over (n_predict, end of generation, or on_tokens said stop). */
int sw_gen_done(const sw_gen_t *g);
/* Totals so far (ttft and prefill from sw_gen_new). */
const sw_gen_stats_t *sw_gen_stats(const sw_gen_t *g);
/* The generated tokens so far (*n of them; points into g). */
const int32_t *sw_gen_output(const sw_gen_t *g, int *n);

/* Runs a whole generation against target. out_tokens receives the generated
 * ids (n_predict slots). 0, or -1 with a one-line reason in err. */
int sw_generate(sw_target_t *target, const int32_t *prompt, int n_prompt, const sw_gen_opts_t *o,
                int32_t *out_tokens, sw_gen_stats_t *stats, char *err, size_t err_len)
    __attribute__((warn_unused_result));

/* Monotonic milliseconds. */
double sw_now_ms(void);

#endif
