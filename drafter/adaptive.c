/*
 * adaptive.c - the K controller (see adaptive.h).
 */
#include "adaptive.h"

#include <math.h>

#include "decode.h"

#define S_ACC_DECAY 0.95 // per round: about the last 20 rounds count
#define S_TIME_DECAY 0.8 // moving averages of times
#define S_FIT_DECAY 0.7  // compute per row count: the last few measurements
#define S_K_START 4      // before anything is measured
#define S_CAL_DECAY 0.97 // per observation in a bucket: about the last 30 count
#define S_CAL_PRIOR 4.0  // the calibration prior is worth this many observations

void draft_ctl_init(draft_ctl_t *c, int k_fixed, int k_max)
{
    *c = (draft_ctl_t){0};
    c->k_fixed = k_fixed > SW_MAX_DRAFT ? SW_MAX_DRAFT : (k_fixed < 0 ? 0 : k_fixed);
    c->k_max = k_max < 1 ? 1 : (k_max > SW_MAX_DRAFT ? SW_MAX_DRAFT : k_max);
    c->draft_ms = -1;
    c->oth_head = c->oth_later = -1;
}

double draft_expected_tokens(double a, int k)
{
    if (a >= 1.0 - 1e-9)
        return k + 1.0;
    return (1.0 - pow(a, k + 1)) / (1.0 - a);
}

double draft_ctl_accept_rate(const draft_ctl_t *c)
{
    /* One pseudo-success and one pseudo-failure keep the estimate off 0 and 1. */
    return (c->acc_s + 1.0) / (c->acc_s + c->acc_f + 2.0);
}

/* The critical-path cost of a draft token (see draft_ctl_draft_time). */
static double s_td(const draft_ctl_t *c)
{
    double td = c->draft_ms > 0 ? c->draft_ms : 0;
    if (c->ahead_on && c->ahead_all > 0)
        td *= 1.0 - c->ahead_hit / c->ahead_all;
    return td;
}

/* Predicted compute ms for `rows` rows from the measured table (see adaptive.h). */
static double s_compute(const draft_ctl_t *c, int rows)
{
    const int top = SW_MAX_DRAFT + 1;
    if (rows < 1)
        rows = 1;
    if (rows > top)
        rows = top;
    if (c->seen[rows])
        return c->comp_ms[rows];
    int lo = rows - 1, hi = rows + 1;
    while (lo >= 1 && !c->seen[lo])
        lo--;
    while (hi <= top && !c->seen[hi])
        hi++;
    if (lo >= 1 && hi <= top) // between two measurements
        return c->comp_ms[lo] + (c->comp_ms[hi] - c->comp_ms[lo]) * (rows - lo) / (double)(hi - lo);
    if (hi <= top) // below every measurement: proportional
        return c->comp_ms[hi] * rows / hi;
    if (lo < 1)
        return 0;
    int lo2 = lo - 1;
    while (lo2 >= 1 && !c->seen[lo2])
        lo2--;
    double slope = lo2 >= 1 ? (c->comp_ms[lo] - c->comp_ms[lo2]) / (lo - lo2) : c->comp_ms[lo] / lo;
    if (slope < 0)
        slope = 0;
    return c->comp_ms[lo] + slope * (rows - lo);
}

double draft_ctl_round_ms(const draft_ctl_t *c, int k)
{
    return c->fixed_ms + s_compute(c, k + 1);
}

/* Drafting k tokens on the critical path: all of it without drafting ahead;
 * with it, what is left after the round before (its wait) for the rounds
 * whose guess held, all of it for the others. */
static double s_draft_crit(const draft_ctl_t *c, int k)
{
    const double td = c->draft_ms > 0 ? c->draft_ms : 0, all = k * td;
    if (!c->ahead_on || !(c->ahead_all > 0))
        return all;
    const double h = c->ahead_hit / c->ahead_all, wait = draft_ctl_round_ms(c, k);
    return (1 - h) * all + h * (all > wait ? all - wait : 0);
}

static double s_best_rate(const draft_ctl_t *c);

/* The work (ms) that `extra` rows more (after `own`) and `drafts` draft
 * model steps add to the batches the other sessions share (load.h). */
static double s_work(const draft_ctl_t *c, int own, int extra, int drafts)
{
    const draft_load_t *l = c->load;
    const double dr = l->draft_rows > 1 ? l->draft_rows - 1 : 0;
    double w =
        draft_load_work(l, own, extra, c->oth_head > 0 ? c->oth_head : 0,
                        c->oth_later > 0 ? c->oth_later : 0, c->model_drafts ? drafts : 0, dr);
    /* the draft model reads what it has not seen first (beyond the row its
     * first step carries anyway): after rounds without drafts, or a prompt.
     * Paid once for every round left that then drafts: spread over them. */
    if (drafts > 0 && c->model_drafts && c->lag > 1) {
        const double per_round = draft_expected_tokens(draft_ctl_accept_rate(c), drafts);
        const double rounds = c->left > 0 ? c->left / per_round : 1;
        w += draft_cost_ms(&l->draft, c->lag - 1) / (rounds > 1 ? rounds : 1);
    }
    return w;
}

double draft_ctl_lambda(const draft_ctl_t *c)
{
    if (!c->load || c->n_obs < 3)
        return 0;
    return draft_load_ext(c->load, s_best_rate(c));
}

int draft_ctl_next_k(draft_ctl_t *c, int cap)
{
    if (cap < 1)
        return 0;
    if (c->k_fixed > 0)
        return c->k_fixed < cap ? c->k_fixed : cap;
    if (!draft_load_drafts_allowed(c->load)) // the head measures plain rounds now (load.h)
        return 0;
    const int hi = c->k_max < cap ? c->k_max : cap;
    /* Three different K first, so the compute table has a shape; but not
     * while the head is so loaded that one draft row costs the other
     * sessions a token or more (lambda W(1) >= 1, lambda taken for a session
     * at the mean rate): no draft can return that, and the first draft would
     * also make the draft model read the whole prompt. Those rounds go
     * plain (they still count as observed). */
    static const int start[] = {S_K_START, 1, 2 * S_K_START};
    if (c->n_obs < 3) {
        const draft_load_t *l = c->load;
        if (l && l->n_active > 1 &&
            draft_load_ext(l, l->rate / l->n_active) * s_work(c, 1, 1, 1) >= 1.0)
            return 0;
        return start[c->n_obs] < hi ? start[c->n_obs] : hi;
    }
    const double a = draft_ctl_accept_rate(c);
    int best = 0;
    const double lam = draft_ctl_lambda(c);
    if (lam > 0) {
        /* Others wait for this session's extra work: E - R T - lambda W. */
        const double r = s_best_rate(c);
        double best_v = 1.0 - r * draft_ctl_round_ms(c, 0);
        for (int k = 1; k <= hi; k++) {
            const double t = draft_ctl_round_ms(c, k) + s_draft_crit(c, k);
            const double v = draft_expected_tokens(a, k) - r * t - lam * s_work(c, 1, k, k);
            if (v > best_v + 1e-9) { // the smallest K among near-ties
                best_v = v;
                best = k;
            }
        }
    } else {
        double best_rate =
            1.0 / (draft_ctl_round_ms(c, 0) > 1e-6 ? draft_ctl_round_ms(c, 0) : 1e-6);
        for (int k = 1; k <= hi; k++) {
            double t = draft_ctl_round_ms(c, k) + s_draft_crit(c, k);
            double rate = draft_expected_tokens(a, k) / (t > 1e-6 ? t : 1e-6);
            if (rate > best_rate * (1 + 1e-9)) { // the smallest K among near-ties
                best_rate = rate;
                best = k;
            }
        }
    }
    /* A probe (one draft to measure the acceptance again) makes the draft
     * model catch up every token since it last drafted: while others wait
     * for that work (lambda > 0) no probe; once the load falls they resume. */
    if (best == 0 && lam <= 0 && ++c->n_idle >= DRAFT_CTL_PROBE) {
        c->n_idle = 0;
        best = 1;
    } else if (best > 0) {
        c->n_idle = 0;
    }
    return best;
}

void draft_ctl_observe(draft_ctl_t *c, int n_draft, int depth, int n_accepted, double round_ms,
                       double compute_ms)
{
    if (n_draft < 0 || depth < 0 || depth > n_draft || (n_draft > 0 && depth < 1) ||
        n_accepted < 0 || n_accepted > depth || !(round_ms >= 0) || !(compute_ms >= 0))
        return;
    if (compute_ms > round_ms)
        compute_ms = round_ms;
    if (n_draft > 0) {
        c->acc_s = c->acc_s * S_ACC_DECAY + n_accepted;
        c->acc_f = c->acc_f * S_ACC_DECAY + (n_accepted < depth ? 1 : 0);
    }
    const double fixed = round_ms - compute_ms;
    c->fixed_ms = c->n_obs ? c->fixed_ms * S_TIME_DECAY + fixed * (1 - S_TIME_DECAY) : fixed;
    const int rows = n_draft + 1 < SW_MAX_DRAFT + 1 ? n_draft + 1 : SW_MAX_DRAFT + 1;
    c->comp_ms[rows] = c->seen[rows]
                           ? c->comp_ms[rows] * S_FIT_DECAY + compute_ms * (1 - S_FIT_DECAY)
                           : compute_ms;
    c->seen[rows] = 1;
    c->n_obs++;
}

void draft_ctl_draft_time(draft_ctl_t *c, int n_tokens, double ms)
{
    if (n_tokens < 1 || !(ms >= 0))
        return;
    const double per = ms / n_tokens;
    c->draft_ms = c->draft_ms < 0 ? per : c->draft_ms * S_TIME_DECAY + per * (1 - S_TIME_DECAY);
}

/* ---- shape ------------------------------------------------------------------------- */

static int s_bucket(double q)
{
    int b = (int)(q * DRAFT_CTL_CAL_BUCKETS);
    return b < 0 ? 0 : (b >= DRAFT_CTL_CAL_BUCKETS ? DRAFT_CTL_CAL_BUCKETS - 1 : b);
}

double draft_ctl_calib(const draft_ctl_t *c, double q)
{
    if (!(q >= 0))
        q = 0;
    if (q > 1)
        q = 1;
    /* Prior: the bucket's middle, worth S_CAL_PRIOR observations. */
    const int b = s_bucket(q);
    const double prior = (b + 0.5) / DRAFT_CTL_CAL_BUCKETS;
    double a = (c->cal_acc[b] + S_CAL_PRIOR * prior) / (c->cal_test[b] + S_CAL_PRIOR);
    return a < 1e-3 ? 1e-3 : (a > 1 - 1e-3 ? 1 - 1e-3 : a);
}

void draft_ctl_observe_tree(draft_ctl_t *c, int n, const float *q, const int32_t *parent,
                            const int32_t *path, int n_accepted)
{
    if (n < 1 || n > SW_MAX_DRAFT || n_accepted < 0 || n_accepted > n || !path)
        return;
    for (int i = 0; i < n; i++) // check everything before anything changes
        if (parent && (parent[i] < 0 || parent[i] > i))
            return;
    /* A candidate was tested when its parent was accepted (or is the root).
     * Each bucket forgets per observation it gets, so rare buckets keep theirs. */
    for (int i = 0; i < n; i++) {
        const int par = parent ? parent[i] : i;
        int tested = par == 0, accepted = 0;
        for (int j = 0; j < n_accepted; j++) {
            tested |= path[j] == par;
            accepted |= path[j] == i + 1;
        }
        if (!tested)
            continue;
        const int b = s_bucket(q ? q[i] : 1.0);
        c->cal_test[b] = c->cal_test[b] * S_CAL_DECAY + 1;
        c->cal_acc[b] = c->cal_acc[b] * S_CAL_DECAY + accepted;
    }
}

/* The best rate (tokens per ms) the chain model predicts. */
static double s_best_rate(const draft_ctl_t *c)
{
    const double a = draft_ctl_accept_rate(c);
    double best = 0;
    for (int k = 0; k <= c->k_max; k++) {
        double t = draft_ctl_round_ms(c, k) + s_draft_crit(c, k);
        double r = draft_expected_tokens(a, k) / (t > 1e-6 ? t : 1e-6);
        best = r > best ? r : best;
    }
    return best;
}

double draft_ctl_node_min(const draft_ctl_t *c, int rows)
{
    if (c->n_obs < 3)
        return 0.05; // before the table has a shape: any plausible candidate
    const double dt = s_compute(c, rows + 1) - s_compute(c, rows);
    const double lam = draft_ctl_lambda(c);
    return s_best_rate(c) * (dt > 0 ? dt : 0) + (lam > 0 ? lam * s_work(c, rows, 1, 0) : 0);
}

double draft_ctl_expand_min(const draft_ctl_t *c)
{
    if (c->n_obs < 3 || c->draft_ms < 0)
        return 0.1;
    const double lam = draft_ctl_lambda(c);
    return s_best_rate(c) * s_td(c) + (lam > 0 ? lam * s_work(c, 0, 0, 1) : 0);
}

int draft_ctl_ahead_k(draft_ctl_t *c, int k_round)
{
    if (k_round < 1 || (c->ahead_on && c->arm_blocks > 0 && !c->arm))
        return 0;
    /* One pseudo-hit in two pseudo-rounds: start optimistic. */
    const double rate = (c->ahead_hit + 1.0) / (c->ahead_all + 2.0);
    /* Under load the draft steps done ahead delay the others' rounds
     * (lambda W) and save this session at most their time on the critical
     * path when the guess holds (rate R t_draft per draft). */
    const double lam = draft_ctl_lambda(c);
    if (lam > 0 && c->draft_ms > 0 &&
        lam * s_work(c, 0, 0, k_round) > rate * s_best_rate(c) * k_round * c->draft_ms)
        return 0;
    if (rate < DRAFT_CTL_AHEAD_MIN && ++c->ahead_idle < DRAFT_CTL_PROBE)
        return 0;
    c->ahead_idle = 0;
    return k_round;
}

void draft_ctl_observe_ahead(draft_ctl_t *c, int hit)
{
    c->ahead_hit = c->ahead_hit * S_ACC_DECAY + (hit ? 1 : 0);
    c->ahead_all = c->ahead_all * S_ACC_DECAY + 1;
}

void draft_ctl_observe_cycle(draft_ctl_t *c, int n_tokens, double cycle_ms)
{
    if (!c->ahead_on || n_tokens < 1 || !(cycle_ms > 0))
        return;
    if (c->arm_blocks == 0 && c->arm_rounds == 0)
        c->arm = 1; // the first block drafts ahead
    c->arm_tok += n_tokens;
    c->arm_ms += cycle_ms;
    if (++c->arm_rounds < DRAFT_CTL_ARM_BLOCK)
        return;
    const double rate = c->arm_tok / c->arm_ms;
    c->arm_rate[c->arm] = c->arm_rate[c->arm] > 0 ? 0.5 * c->arm_rate[c->arm] + 0.5 * rate : rate;
    c->arm_rounds = 0;
    c->arm_tok = c->arm_ms = 0;
    c->arm_blocks++;
    if (!(c->arm_rate[0] > 0) || !(c->arm_rate[1] > 0)) {
        c->arm = c->arm_rate[0] > 0 ? 1 : 0; // measure the other arm once
        return;
    }
    const int better = c->arm_rate[1] >= c->arm_rate[0];
    c->arm = c->arm_blocks % DRAFT_CTL_ARM_PROBE == 0 ? !better : better;
}

void draft_ctl_observe_batch(draft_ctl_t *c, int own_rows, int head_rows, int later_rows)
{
    if (own_rows < 1)
        return;
    if (head_rows >= own_rows) {
        const double o = head_rows - own_rows;
        c->oth_head = c->oth_head < 0 ? o : c->oth_head * S_TIME_DECAY + o * (1 - S_TIME_DECAY);
    }
    if (later_rows >= own_rows) {
        const double o = later_rows - own_rows;
        c->oth_later = c->oth_later < 0 ? o : c->oth_later * S_TIME_DECAY + o * (1 - S_TIME_DECAY);
    }
}
