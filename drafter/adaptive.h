/*
 * adaptive.h - chooses the number of draft tokens K for the next round.
 *
 * A round with K drafts commits on average E(K) = (1 - a^(K+1)) / (1 - a)
 * tokens when each draft is accepted with probability a (independently; the
 * chain stops at the first rejection, and the target always adds one token).
 * It costs the drafting, K * t_draft, plus the target's round: a fixed part
 * (network, per-message overhead) and a compute part that grows with the
 * K + 1 rows verified. The controller measures all of these as the
 * generation runs and picks the K in [1, k_max] that maximises
 *
 *     E(K) / (t_fixed + t_compute(K + 1) + K * t_draft)       tokens per ms.
 *
 * Estimates: a from the accepted / rejected draft counts with exponential
 * forgetting (each round counts its accepted drafts as successes and, when
 * it stopped before the last draft, one failure); t_draft and t_fixed as
 * moving averages; t_compute(rows) as a moving average per row count that
 * was measured, linearly interpolated in between, and beyond the largest
 * measured row count extended with the slope of the last two measured ones
 * (with one point only: proportional to rows, the pessimistic case of no
 * batching gain). A table rather than a line because batched compute is not
 * linear in rows: one row runs matrix-vector kernels, several rows share each
 * weight read, so a line fitted on 1-2 rows overestimates 5-17 rows badly.
 * The first rounds try K = min(4, k_max), then 1, then min(8, k_max), so
 * the table has three points before the controller chooses. When no K >= 1
 * beats a round without drafts (E(0) = 1 token) the controller answers 0,
 * but every DRAFT_CTL_PROBE-th round it drafts one token anyway so that a
 * change in a is noticed.
 *
 * Shape beyond one chain. Token trees: the tree builder adds candidates
 * best first by their value, the estimated probability that the target
 * accepts them: the product along the candidate's path of a calibrated
 * acceptance a(q) of each draft given that its parent was accepted, learnt
 * from the verdicts per bucket of the draft's probability q (with the
 * identity as prior). A candidate is worth a row of the round when its value
 * beats what the row costs at the rate the best chain reaches:
 * value >= R * (t_compute(rows + 1) - t_compute(rows)) with R = E(K*) / T(K*)
 * tokens per ms (draft_ctl_node_min); it is worth a draft step to expand when
 * its expected child value beats R * t_draft (draft_ctl_expand_min). A chain
 * is the tree whose only additions are the best child of the last node.
 *
 * Overlapped drafting: the drafts prepared while a round travels are used
 * only when the verdict is the predicted outcome; the controller tracks that
 * hit rate and stops drafting ahead (but for a probe every DRAFT_CTL_PROBE
 * rounds) when it falls below DRAFT_CTL_AHEAD_MIN, so that a pair whose
 * guesses rarely hold does not burn the CPU a shared machine's stages need.
 * Beyond the hit rate, drafting ahead costs whatever it takes from the
 * stages (on a machine they share it slows them down): the controller runs
 * it in blocks of DRAFT_CTL_ARM_BLOCK rounds on and off, measures tokens per
 * ms of each (verdict to verdict, everything included), keeps the faster
 * and tries the other again every DRAFT_CTL_ARM_PROBE-th block.
 * Only synchronous drafting counts in t_draft, and with drafting ahead on
 * the K model charges a round (1 - h) K t_draft + h max(0, K t_draft - T(K))
 * for drafting, h being the hit rate and T(K) the round the drafts were
 * prepared behind: the overlap hides drafting up to one round's wait, which
 * lets the controller choose longer chains, but not past it.
 *
 * Load (load.h): with other sessions on the head, a draft row also adds
 * work to the batches they wait for. Given the head's shared measurements
 * (draft_ctl_t.load) the controller then picks the K that maximises
 * E(K) - R T(K) - lambda W(K) (R its own best rate, T(K) its round,
 * W(K) the work its drafts add, lambda the others' rate that work delays);
 * with lambda = 0 (alone, or no load measured) that is the K above. A tree
 * node and an expansion pay the same two prices (draft_ctl_node_min,
 * draft_ctl_expand_min). The rows of the other rounds in this session's
 * batches come from draft_ctl_observe_batch; W also holds the draft model's
 * catch-up (draft_ctl_t.lag tokens to read first), spread over the rounds
 * left that it makes draftable (draft_ctl_t.left). While lambda > 0 there are no
 * probes (a probe makes the draft model catch up every token since it last
 * drafted, work the others wait for), and a session drafts ahead only when
 * the critical-path time a held guess saves it (hit rate x R x K x
 * t_draft, in tokens) outweighs lambda times the draft steps' work.
 *
 * A draft_ctl_t is a plain value (no allocation); one per generation.
 */
#ifndef DRAFT_ADAPTIVE_H
#define DRAFT_ADAPTIVE_H

#include "decode.h"
#include "load.h"

#define DRAFT_CTL_PROBE 8        // one probe every this many rounds without drafts (the 8th)
#define DRAFT_CTL_CAL_BUCKETS 10 // calibration buckets of the draft probability
#define DRAFT_CTL_AHEAD_MIN 0.15 // least hit rate for drafting ahead
#define DRAFT_CTL_ARM_BLOCK 6    // rounds per block of drafting ahead on or off
#define DRAFT_CTL_ARM_PROBE 4    // every this many blocks the slower arm is tried again

typedef struct draft_ctl {
    int k_fixed;                      // > 0: every round asks for exactly this K; 0: adaptive
    int k_max;                        // adaptive: the largest K tried, 1..SW_MAX_DRAFT
    int n_obs;                        // rounds observed
    double acc_s;                     // decayed count of accepted drafts
    double acc_f;                     // decayed count of rejected drafts
    double draft_ms;                  // moving average: ms per draft token (-1 = not measured)
    double fixed_ms;                  // moving average: round wall time minus target compute (ms)
    double comp_ms[SW_MAX_DRAFT + 2]; // moving average of compute ms by rows (index 1..K+1)
    unsigned char seen[SW_MAX_DRAFT + 2];   // 1 where comp_ms holds a measurement
    int n_idle;                             // rounds in a row the controller chose K = 0
    double cal_acc[DRAFT_CTL_CAL_BUCKETS];  // decayed accepted candidates per q bucket
    double cal_test[DRAFT_CTL_CAL_BUCKETS]; // decayed tested candidates (parent accepted)
    double ahead_hit;                       // decayed prepared rounds whose outcome held
    double ahead_all;                       // decayed prepared rounds
    int ahead_idle;                         // rounds in a row without drafting ahead
    int ahead_on;                           // 1: drafts are prepared while rounds travel
    int arm;                                // the current block drafts ahead (1) or not (0)
    int arm_rounds;                         // rounds of the current block so far
    double arm_tok, arm_ms;                 // its tokens and cycle time so far
    double arm_rate[2];                     // tokens per ms of each arm (0 = not measured)
    int arm_blocks;                         // blocks measured
    const draft_load_t *load;               // the head's sessions' costs (load.h); NULL = alone
    int model_drafts;                       // 1: drafts are draft model steps (they cost its rows)
    double oth_head;  // moving average: other rounds' rows in the head's batches of this session's
    double oth_later; // rounds, and in the last stage's batches (-1 = not measured)
    int lag;          // tokens the draft model must read before this round's drafts (per round)
    int left;         // tokens the generation may still commit (0 = unknown; per round)
} draft_ctl_t;

/* k_fixed > 0: fixed K; k_fixed == 0: adaptive up to k_max. */
void draft_ctl_init(draft_ctl_t *c, int k_fixed, int k_max);
/* K for the next round, at most cap (the room left in the generation).
 * Counts the rounds it chooses no drafts (for the probes). */
int draft_ctl_next_k(draft_ctl_t *c, int cap);
/* A round's outcome: n_draft sent (its compute is that of n_draft + 1 rows),
 * `depth` deep (a chain: n_draft; the acceptance rate counts the accepted
 * drafts against it, as for a chain that long), n_accepted kept, wall ms of
 * the target's round and the part that was compute. */
void draft_ctl_observe(draft_ctl_t *c, int n_draft, int depth, int n_accepted, double round_ms,
                       double compute_ms);
/* Drafting cost: ms spent producing n_tokens drafts (n_tokens >= 1) on the
 * critical path (not ahead). With drafting ahead on, the controller counts a
 * draft token at draft_ms times the share of rounds whose prepared drafts
 * were not used (the others cost nothing on the critical path). */
void draft_ctl_draft_time(draft_ctl_t *c, int n_tokens, double ms);
/* The current acceptance estimate, in (0, 1). */
double draft_ctl_accept_rate(const draft_ctl_t *c);
/* Expected tokens committed by a round of k drafts at acceptance rate a. */
double draft_expected_tokens(double a, int k);
/* The predicted target round time (ms) with k drafts. */
double draft_ctl_round_ms(const draft_ctl_t *c, int k);

/* A tree round's outcome: n drafts with draft probabilities q (n entries,
 * NULL = point masses, counted as q = 1) in verify.h's tree layout (parent
 * NULL = a chain) and the accepted path (n_accepted node indices, 1-based).
 * Feeds the calibration; call draft_ctl_observe() for the times as well,
 * with n_draft = n and the depth of the tree as what a chain of that
 * length would be. */
void draft_ctl_observe_tree(draft_ctl_t *c, int n, const float *q, const int32_t *parent,
                            const int32_t *path, int n_accepted);
/* Calibrated probability that a draft with draft probability q is accepted
 * when its parent is, in (0, 1). */
double draft_ctl_calib(const draft_ctl_t *c, double q);
/* The least value (expected accepted tokens) a candidate must add to become
 * the row after `rows` rows (rows >= 1: the round's context row counts). */
double draft_ctl_node_min(const draft_ctl_t *c, int rows);
/* The least value a node must have for expanding it (one more draft step for
 * its children) to pay. */
double draft_ctl_expand_min(const draft_ctl_t *c);
/* Overlapped drafting: how many drafts to prepare for the next round while
 * this one travels (0 = do not draft ahead this round), given the K of this
 * round. Counts the rounds it declines (for the probes). */
int draft_ctl_ahead_k(draft_ctl_t *c, int k_round);
/* Whether the prepared drafts of a round were used (its outcome held). */
void draft_ctl_observe_ahead(draft_ctl_t *c, int hit);
/* A round committed n_tokens in cycle_ms (verdict to verdict): the rate the
 * current arm of drafting ahead reaches (see above). */
void draft_ctl_observe_cycle(draft_ctl_t *c, int n_tokens, double cycle_ms);
/* A round of own_rows rows ran in the head's batch of head_rows rows and in
 * the last stage's batch of later_rows rows (0 = not known). */
void draft_ctl_observe_batch(draft_ctl_t *c, int own_rows, int head_rows, int later_rows);
/* The rate (tokens per ms) of the others that this session's extra work
 * delays (0 alone; load.h). */
double draft_ctl_lambda(const draft_ctl_t *c);

#endif
