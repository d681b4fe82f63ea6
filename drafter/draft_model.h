/*
 * draft_model.h - a small model with the target's vocabulary that proposes
 * draft tokens, run by the engine on its own backend (the CPU or a GPU).
 *
 * Start-up refuses a draft GGUF whose vocabulary differs from the target's
 * (same token count and byte-identical tokenizer.ggml.tokens): the check
 * reads only the two headers, before any weight is loaded.
 *
 * The draft keeps its own KV cache of the committed sequence. Each proposal
 * (draft_seq_start and its steps, or draft_seq_propose at once) finds the
 * longest common prefix of what its cache holds and the committed sequence
 * it is given (following a tree path the cache holds, which sw_kv_keep then
 * makes plain cache), truncates the cache there (O(1): this is how rejected
 * drafts are rolled back), feeds only the new tokens (usually one or two),
 * then drafts token by token:
 *
 *  - greedy target (temp 0): the draft's argmax (after the same repetition
 *    penalty as the target); the drafts are point masses (q_used = 0).
 *    Without a repetition penalty the K-token loop runs on the backend
 *    (sw_model_greedy_steps(): one CUDA graph per K on a GPU);
 *  - sampling target: a draw from the draft's own distribution under the
 *    target's sampling parameters, restricted to its DRAFT_Q_MAX most likely
 *    tokens and renormalised; the proposer reports q(d) and that sparse
 *    support, so the verifier's rejection rule is exact. The draft's RNG is
 *    seeded for each proposal from the target's seed through a fixed mix and
 *    the position, so a seed fixes the whole run (drafts prepared ahead equal
 *    drafts made later) while the draft's draws stay independent of the
 *    verifier's;
 *  - token trees (draft_seq_start with max_nodes > 1): see there.
 *
 * Confidence stop: after the first draft of a round, drafting stops when the
 * draft's top probability (softmax at temperature 1 for greedy, the top of q
 * when sampling) is below p_min.
 *
 * Sessions: a draft_model_t holds the weights and is shared; each generation
 * drafts through its own draft_seq_t (its cache, sampler and q buffers), so
 * several sessions can draft in turn without disturbing each other's caches
 * or random streams.
 *
 * Ownership: draft_model_t owns its backend, model and scratch; a draft_seq_t
 * owns its cache and buffers and borrows the model, which must outlive it. The
 * q entries written by draft_seq_propose() point into the sequence's buffers
 * and stay valid until its next propose call. One thread at a time: the model's
 * scratch is shared by its sequences.
 */
#ifndef DRAFT_MODEL_H
#define DRAFT_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "decode.h"
#include "gguf.h"
#include "load.h"
#include "prefix.h"
#include "sampler.h"
#include "verify.h"

#define DRAFT_Q_MAX SW_PROPOSAL_Q_MAX // most entries of a sparse draft distribution

typedef struct draft_model draft_model_t;

/* 0 when the two files have the same vocabulary; -1 and one line naming the
 * first difference otherwise. */
int draft_vocab_check(const sw_gguf_t *draft, const sw_gguf_t *target, char *err, size_t err_len)
    __attribute__((warn_unused_result));

/* Checks path's vocabulary against target, then loads all its layers on a new
 * backend opened by name (sw_backend_new(): "cpu", "cuda:1", NULL = auto)
 * with n_threads CPU threads (0 = all cores); n_ctx is the default context of
 * its sequences. NULL with one line in err on failure. Free with
 * draft_model_free(). */
draft_model_t *draft_model_new(const char *path, const sw_gguf_t *target, const char *backend,
                               int n_threads, int n_ctx, char *err, size_t err_len)
    __attribute__((warn_unused_result));
void draft_model_free(draft_model_t **self_p);

typedef struct draft_seq draft_seq_t;
/* A sequence of the model with room for a committed context of n_ctx
 * positions (0 = the model's default) plus one round of drafts; NULL when out
 * of memory. Free with draft_seq_free(). */
draft_seq_t *draft_seq_new(draft_model_t *dm, int n_ctx) __attribute__((warn_unused_result));
void draft_seq_free(draft_seq_t **self_p);
/* The committed context the sequence has room for. */
int draft_seq_capacity(const draft_seq_t *s);
/* Tokens of ctx[0..n_ctx) the sequence's cache does not hold yet: what its
 * next draft must read first (its catch-up). */
int draft_seq_lag(const draft_seq_t *s, const int32_t *ctx, int n_ctx);
/* The namespace of s's prompts in the draft model's prefix cache (the
 * tenant's, as the head's own cache: a prefix is reused only for whoever
 * sent it); "" until set. Longer names are cut (SW_PREFIX_NS_LEN). */
void draft_seq_set_prefix_ns(draft_seq_t *s, const char *ns);
/* Starts a generation with the target's sampling parameters (reseeds the
 * draft's RNG) and an empty cache: the prompt is then evaluated as one
 * prompt batch, as the target evaluates it (rows kept from another request
 * would not be bit-identical to that). 0, or -1 on invalid parameters. */
int draft_seq_begin(draft_seq_t *s, const sw_sampling_t *params)
    __attribute__((warn_unused_result));
/* The shape of one proposal (draft_seq_start). */
typedef struct draft_shape {
    int k;         // deepest drafts, >= 1
    int max_nodes; // > 1: a token tree of at most this many drafts (when the backend runs
                   // trees); else a chain of k
    float p_min;   // chain: the confidence stop
    int guess;     // 1: first guess the token after ctx (the draft's argmax: the bonus token
                   // of a round whose drafts were all accepted), then propose after it
    int32_t extra; // >= 0: a token known to follow ctx (another proposer's guess): propose
                   // after ctx + extra; -1 = none
    /* Trees: P(accepted | parent accepted) of a draft with draft probability q
     * (NULL = q itself), the least value the row after `rows` rows must add
     * (NULL = 0), and the least value of a node worth a draft step. */
    double (*calib)(void *ctx, double q);
    double (*node_min)(void *ctx, int rows);
    double expand_min;
    void *ctx; // for calib and node_min
} draft_shape_t;

/* Starts a proposal after ctx[0..n_ctx) (and the guessed or extra token)
 * into *out (all of it written; ctx and out must stay valid until done), to
 * be advanced by draft_seq_step. Trees: the draft model's top candidates
 * (S_TREE_CHILDREN of each expanded node, point masses) where it is
 * uncertain: every step feeds the best nodes not yet expanded
 * (DRAFT_TREE_WIDTH rows in one forward call, each attending to its ancestors)
 * whose value, the product of calibrated acceptances along the path, is at
 * least expand_min; after k steps or when none is left, the best nodes by
 * value that are worth their rows form the tree, depth first with the best
 * child first (so nodes 1..n_main are the most likely path). The draws of a
 * sampling chain come from the RNG seeded by (seed, position), so drafts
 * prepared ahead equal drafts made later for the same position. Returns 1
 * (steps follow) or 0 (nothing to propose: out->n = 0). A new start or a
 * warm-up drops an unfinished proposal. */
int draft_seq_start(draft_seq_t *s, const int32_t *ctx, int n_ctx, const draft_shape_t *shape,
                    sw_proposal_t *out) __attribute__((warn_unused_result));
/* One bounded piece of the proposal (one draft forward call, or as many
 * chained greedy steps as take about S_SLICE_MS): 1 more, 0 done (*out
 * written; out->guess as soon as known), -1 on error. */
int draft_seq_step(draft_seq_t *s) __attribute__((warn_unused_result));
/* 1 when the draft model's backend runs token trees. */
int draft_seq_trees(const draft_seq_t *s);
/* Proposes up to k tokens after ctx[0..n_ctx) as a chain (draft_seq_start
 * and its steps at once). Returns the count (0..k), or -1 on error (context
 * full, bad token). */
int draft_seq_propose(draft_seq_t *s, const int32_t *ctx, int n_ctx, int k, float p_min,
                      int32_t *out, sw_draft_q_t *q, int *q_used);
/* Feeds ctx[0..n_ctx) into the draft's cache (as the catch-up of a
 * propose call would) without drafting: the head calls it with the prompt
 * while the pipeline computes the prefill, so the draft's own prefill is off
 * the critical path. 0 or -1. */
int draft_seq_warm(draft_seq_t *s, const int32_t *ctx, int n_ctx)
    __attribute__((warn_unused_result));
/* Time of the last propose call spent drafting (ms, without the catch-up of
 * more than two new context tokens, e.g. the prompt) and how many drafts it
 * made: what a draft token costs. */
void draft_seq_last_cost(const draft_seq_t *s, double *ms, int *n_tokens);
const char *draft_model_path(const draft_model_t *d);
/* What drafting ahead was measured to reach on this model's machine, kept
 * across generations (adaptive.h's arms): tokens per ms with (rate[1]) and
 * without (rate[0]) it, 0 = not measured. Owned by the model. */
typedef struct draft_ahead_mem {
    double rate[2]; // tokens per ms without / with drafting ahead
} draft_ahead_mem_t;
draft_ahead_mem_t *draft_model_ahead_mem(draft_model_t *d);
/* What the draft model runs on ("cuda:1 (Tesla T4, ...)"). */
const char *draft_model_backend(const draft_model_t *d);

/* Batched drafting, for a caller that drafts for many sequences in turns
 * (the head). With batching on, a step of any of the model's sequences that
 * needs a forward of the draft model (the catch-up of a few new tokens, the
 * guessed token, a chain step, a tree step) posts it and returns 1 without
 * computing; draft_model_flush() then runs every posted forward as ONE
 * engine call (sw_model_forward_batch: each sequence on its own cache, each
 * row computed as it would be alone, so every sequence drafts exactly what it
 * drafts alone), and each sequence's next step takes its result. A lone
 * greedy chain step runs as several steps on the backend, as without
 * batching. A sequence that steps again before a flush flushes itself (with
 * whatever else is posted), so a caller that never flushes still gets every
 * proposal. Prompt rows (a new request's catch-up) are not posted: they run
 * at once, as one prompt. Turning batching off runs what is posted. */
void draft_model_set_batching(draft_model_t *d, int on);
/* Runs every posted forward; the sequences run (0: none), or -1 when one
 * failed (its next step returns -1; the others' results are there). */
int draft_model_flush(draft_model_t *d);
/* What the flushes that ran posted forwards in one engine call did. */
typedef struct draft_batch_stats {
    uint64_t flushes; // engine calls
    uint64_t seqs;    // sequences they served
    uint64_t rows;    // rows they computed
    double ms;        // their time
    int last_seqs;    // the last call: sequences
    int last_rows;    // rows
    double last_ms;   // ms
} draft_batch_stats_t;
const draft_batch_stats_t *draft_model_batch_stats(const draft_model_t *d);
/* What its prefix cache did (NULL when it has none: draft_model_set_prefix). */
const sw_prefix_stats_t *draft_model_prefix_stats(const draft_model_t *d);
/* A prefix cache for the draft model (engine/include/prefix.h) of at most max_bytes
 * (0: none, the default): a sequence's prompt then takes the positions the
 * cache holds and evaluates the rest as the prompt's continuation (the same
 * logits, so the same drafts, as without), and leaves its blocks there.
 * seed keys its hash buckets. 0, or -1 when out of memory. */
int draft_model_set_prefix(draft_model_t *d, size_t max_bytes, uint64_t seed)
    __attribute__((warn_unused_result));
/* Where the model reports the cost of its steps (load.h; NULL = nowhere);
 * borrowed, must outlive the model or be set back to NULL. */
void draft_model_set_load(draft_model_t *d, draft_load_t *load);

#endif
