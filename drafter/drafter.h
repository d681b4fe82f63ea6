/*
 * drafter.h - the proposer the head (and `shardwire generate`) hands to
 * sw_generate(): one of the proposers (draft model, n-gram, or both mixed)
 * behind sw_proposer_t, with K chosen per round by the adaptive controller
 * (adaptive.h) or fixed.
 *
 * Modes:
 *   DRAFT_MODE_MODEL  the draft model proposes every round;
 *   DRAFT_MODE_NGRAM  prompt lookup only (point masses);
 *   DRAFT_MODE_MIX    prompt lookup when the last DRAFT_MIX_MIN_N or more
 *                     tokens occurred before, the draft model otherwise.
 *
 * K: cfg.k > 0 fixes K for every round; cfg.k == DRAFT_K_AUTO lets the
 * controller pick K in [0, cfg.k_max] (0: no drafts this round, adaptive.h)
 * from the measured acceptance rate, draft time per token and target round
 * time (network included); cfg.k == 0
 * turns speculation off. Set sw_gen_opts_t.k to draft_gen_k() and
 * .proposer to the draft_proposer() result.
 *
 * Trees (cfg.tree > 1): the draft model proposes a token tree K deep of at
 * most cfg.tree drafts (draft_seq_start: top candidates where it is
 * uncertain, valued by the controller's calibrated acceptance, each worth
 * its row at the rate the controller predicts), the n-gram lookup a trie of
 * earlier occurrences (draft_ngram_propose_tree); with a fixed K the
 * thresholds are fixed too. Drafting ahead (cfg.ahead): the proposer guesses
 * the bonus token and drafts after it while the round travels
 * (sw_proposer_t's guess); the controller stops doing so while its guesses
 * rarely hold (draft_ctl_ahead_k).
 *
 * Drafts depend on the committed tokens only, never on when they were made:
 * the draft model's draws are seeded by position, and a round's outcome
 * reaches the tree calibration only when a proposal for a later position
 * starts, so drafts prepared ahead are the drafts the proposer would make
 * after the verdict (with a fixed K; the adaptive K follows measured times).
 *
 * One generation at a time per draft_t (draft_begin() starts the next one);
 * one draft_t per session when several run at once. The draft model (the
 * weights) is borrowed and shared; each draft_t drafts through its own
 * draft_seq_t (cache, sampler), made by draft_begin() with room for
 * cfg.n_ctx positions.
 */
#ifndef DRAFT_DRAFTER_H
#define DRAFT_DRAFTER_H

#include "adaptive.h"
#include "decode.h"
#include "draft_model.h"

#define DRAFT_K_AUTO (-1)                       // cfg.k: adaptive K
#define DRAFT_K_MAX_AUTO SW_DRAFT_DEFAULT_K_MAX // default ceiling of the adaptive K
#define DRAFT_MIX_MIN_N 2 // mixed mode: shortest n-gram match trusted over the model

enum draft_mode {
    DRAFT_MODE_NONE = 0,
    DRAFT_MODE_MODEL = 1,
    DRAFT_MODE_NGRAM = 2,
    DRAFT_MODE_MIX = 3,
};

typedef struct draft_cfg {
    enum draft_mode mode;     // which proposer
    int k;                    // > 0 fixed K, DRAFT_K_AUTO adaptive, 0 off
    int k_max;                // adaptive ceiling, 1..SW_MAX_DRAFT (0 = DRAFT_K_MAX_AUTO)
    float p_min;              // confidence stop of the draft model, [0, 1]; 0 = off
    sw_sampling_t sampling;   // the target's sampling parameters
    int n_ctx;                // committed positions the generation may reach (0 = the draft
                              // model's default context)
    int tree;                 // > 1: token trees of at most this many drafts; 0 or 1: chains
    int ahead;                // 1: draft ahead while a round travels (sw_gen_opts_t.ahead)
    const draft_load_t *load; // the head's sessions' costs (load.h): K and trees shrink as the
                              // stages fill; NULL = as alone
    const char *prefix_ns;    // the draft model's prefix cache namespace for this generation
                              // (the tenant's; NULL = ""), copied at draft_begin
} draft_cfg_t;

typedef struct draft draft_t;

/* model may be NULL (then only DRAFT_MODE_NGRAM works). NULL on out of memory.
 * Free with draft_free(); the model is not freed. */
draft_t *draft_new(draft_model_t *model) __attribute__((warn_unused_result));
void draft_free(draft_t **self_p);

/* Starts a generation. -1 with one line in err when the configuration cannot
 * work (e.g. DRAFT_MODE_MODEL without a draft model, bad sampling params). */
int draft_begin(draft_t *d, const draft_cfg_t *cfg, char *err, size_t err_len)
    __attribute__((warn_unused_result));
/* The proposer for sw_gen_opts_t.proposer (valid while d lives). */
sw_proposer_t draft_proposer(draft_t *d);
/* The value for sw_gen_opts_t.k: 0 when speculation is off, else the most
 * drafts a round may carry. */
int draft_gen_k(const draft_t *d);
/* Prepares the proposer for the committed sequence ctx[0..n_ctx) while the
 * caller would otherwise wait (the head calls it with the prompt during the
 * prefill round): feeds the draft model's cache when this generation uses
 * it. 0 or -1 (then nothing is lost: propose catches up itself). */
int draft_warm(draft_t *d, const int32_t *ctx, int n_ctx);
/* A round of own_rows rows ran in the head's batch of head_rows rows and the
 * last stage's batch of later_rows rows (0 = not known): what the load
 * controller needs (adaptive.h). */
void draft_observe_batch(draft_t *d, int own_rows, int head_rows, int later_rows);
/* The controller's state (acceptance estimate, times) for reports. */
const draft_ctl_t *draft_ctl(const draft_t *d);
/* This generation's configuration (after draft_begin's defaults). */
const draft_cfg_t *draft_cfg(const draft_t *d);

/* Parses a mode name: "model", "ngram", "mix", "none". -1 if unknown. */
int draft_mode_parse(const char *s, enum draft_mode *out) __attribute__((warn_unused_result));
const char *draft_mode_name(enum draft_mode m);

#endif
