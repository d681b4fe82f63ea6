/*
 * test_adaptive.c - the K controller of drafter/adaptive.h against a
 * simulated pipeline whose costs and acceptance rate are known:
 *
 *  - E(K) = (1 - a^(K+1)) / (1 - a) (and K + 1 at a = 1);
 *  - fed rounds from a simulator (acceptance a per draft, round time
 *    fixed + c0 + c1 * rows, draft time per token), the controller settles
 *    on a K whose predicted throughput is within 3% of the best K's true
 *    throughput, in a WAN-like setting (86 ms fixed: large K) and a local one
 *    (no network, costly drafts: K small);
 *  - the same when one row is much cheaper than the line through many rows
 *    (a kernel switch between one and several rows);
 *  - when drafting does not pay (low a, costly drafts) it drafts only on
 *    the periodic one-token probes;
 *  - the acceptance estimate tracks a (where K is large); a fixed K is returned as is (capped);
 *  - malformed observations are ignored;
 *  - shape: the calibration learns a(q) = P(accepted | parent accepted) per
 *    draft-probability bucket from tree verdicts (tested = parent on the
 *    accepted path), starting from a(q) = q; a candidate's row threshold is
 *    the best rate times the marginal compute of one more row (higher when
 *    rows are costly, lower over a long round trip); drafting ahead stops
 *    when its guesses rarely hold, but for periodic probes, and resumes;
 *  - drafting ahead as two arms measured in blocks: the faster one is kept
 *    (on when it pays, off when it slows the rounds down, as on a machine
 *    that the stages share), the other tried again every few blocks; with
 *    the hit rate high, a hidden draft costs nothing up to one round's wait
 *    and the chain grows;
 *  - under load (load.h) the same rounds give the one-session K alone, a
 *    smaller K with 16 sessions sharing the batches (none when the draft
 *    model must first catch up on 200 tokens for the last 8), none when the stages are
 *    saturated (and then no probes, no drafting ahead, and a new session
 *    starts plain).
 */
#include <math.h>
#include <stdint.h>

#include "adaptive.h"
#include "rng.h"
#include "sw_test.h"

typedef struct sim {
    double a, fixed, c0, c1, t_draft;
    int gemv; // 1: one row costs c0 alone, more rows c0 * 1.5 + c1 * rows (kernel switch)
} sim_t;

static double s_compute(const sim_t *s, int rows)
{
    if (s->gemv)
        return rows == 1 ? s->c0 : 1.5 * s->c0 + s->c1 * rows;
    return s->c0 + s->c1 * rows;
}

static double s_true_rate(const sim_t *s, int k)
{
    return draft_expected_tokens(s->a, k) / (s->fixed + s_compute(s, k + 1) + k * s->t_draft);
}

static int s_best_k(const sim_t *s, int k_max)
{
    int best = 0;
    for (int k = 1; k <= k_max; k++)
        if (s_true_rate(s, k) > s_true_rate(s, best))
            best = k;
    return best;
}

static void s_simulate(const sim_t *s, int k_max, uint64_t seed, const char *name)
{
    draft_ctl_t c;
    draft_ctl_init(&c, 0, k_max);
    sw_rng_t rng;
    sw_rng_seed(&rng, seed);
    int k = 0;
    double sum_rate = 0;
    int n_tail = 0;
    for (int round = 0; round < 400; round++) {
        k = draft_ctl_next_k(&c, 64);
        SW_CHECK(k >= 0 && k <= k_max);
        int acc = 0;
        while (acc < k && sw_rng_uniform(&rng) < s->a)
            acc++;
        draft_ctl_draft_time(&c, k, k * s->t_draft);
        double compute = s_compute(s, k + 1);
        draft_ctl_observe(&c, k, k, acc, s->fixed + compute, compute);
        if (round >= 200) {
            sum_rate += s_true_rate(s, k);
            n_tail++;
        }
    }
    const int best = s_best_k(s, k_max);
    const double got = sum_rate / n_tail, want = s_true_rate(s, best);
    fprintf(stderr,
            "%s: best K %d (%.4f tok/ms), controller's last K %d, mean %.4f tok/ms, a %.3f\n", name,
            best, want, k, got, draft_ctl_accept_rate(&c));
    SW_CHECK(got >= 0.97 * want);
    /* a is measured only on drafts: check it where the controller drafts a lot. */
    if (best >= 4)
        SW_CHECK_NEAR(draft_ctl_accept_rate(&c), s->a, 0.12);
}

static void test_calibration(void)
{
    draft_ctl_t c;
    draft_ctl_init(&c, 0, 16);
    SW_CHECK_NEAR(draft_ctl_calib(&c, 0.93), 0.95, 1e-9); // prior: the bucket's middle
    /* A hand tree: root -> 1 -> 3, root -> 2; accepted path {1}. Tested: 1, 2
     * (under the root) and 3 (under the accepted 1); accepted: 1. */
    const int32_t parent[3] = {0, 0, 1}, path[1] = {1};
    const float q[3] = {0.95f, 0.05f, 0.55f};
    draft_ctl_observe_tree(&c, 3, q, parent, path, 1);
    SW_CHECK_NEAR(c.cal_test[9], 1, 1e-9);
    SW_CHECK_NEAR(c.cal_acc[9], 1, 1e-9);
    SW_CHECK_NEAR(c.cal_test[0], 1, 1e-9);
    SW_CHECK_NEAR(c.cal_acc[0], 0, 1e-9);
    SW_CHECK_NEAR(c.cal_test[5], 1, 1e-9);
    /* Bad input changes nothing. */
    const int32_t bad_parent[3] = {0, 2, 1};
    draft_ctl_observe_tree(&c, 3, q, bad_parent, path, 1);
    draft_ctl_observe_tree(&c, 3, q, parent, path, 4);
    SW_CHECK_NEAR(c.cal_test[9], 1, 1e-9);

    /* A drafter that is overconfident: true acceptance 0.6 q. */
    sw_rng_t r;
    sw_rng_seed(&r, 9);
    for (int round = 0; round < 3000; round++) {
        float qq[1] = {(float)sw_rng_uniform(&r)};
        int32_t p1[1] = {0}, pa[1] = {1};
        int acc = sw_rng_uniform(&r) < 0.6 * qq[0];
        draft_ctl_observe_tree(&c, 1, qq, p1, pa, acc);
    }
    for (int b = 1; b < DRAFT_CTL_CAL_BUCKETS; b++) {
        double mid = (b + 0.5) / DRAFT_CTL_CAL_BUCKETS;
        SW_CHECK_NEAR(draft_ctl_calib(&c, mid), 0.6 * mid, 0.12);
    }
}

static void test_thresholds(void)
{
    /* The same pipeline, rows cheap (c1 = 2 ms) or costly (c1 = 20 ms). */
    draft_ctl_t cheap, dear;
    draft_ctl_init(&cheap, 0, 16);
    draft_ctl_init(&dear, 0, 16);
    SW_CHECK_NEAR(draft_ctl_node_min(&cheap, 1), 0.05, 1e-12); // nothing measured yet
    for (int round = 0; round < 30; round++) {
        int k = 1 + round % 8;
        draft_ctl_draft_time(&cheap, k, k * 5.0);
        draft_ctl_draft_time(&dear, k, k * 5.0);
        draft_ctl_observe(&cheap, k, k, k * 3 / 4, 172 + 20 + 2.0 * (k + 1), 20 + 2.0 * (k + 1));
        draft_ctl_observe(&dear, k, k, k * 3 / 4, 172 + 20 + 20.0 * (k + 1), 20 + 20.0 * (k + 1));
    }
    double mc = draft_ctl_node_min(&cheap, 5), md = draft_ctl_node_min(&dear, 5);
    fprintf(stderr, "node thresholds: cheap rows %.3f, costly rows %.3f; expand %.3f\n", mc, md,
            draft_ctl_expand_min(&cheap));
    SW_CHECK(mc > 0 && mc < 0.2); // a 2 ms row pays for a rather unlikely candidate
    SW_CHECK(md > 3 * mc);        // a 20 ms row needs a likely one
    SW_CHECK(md < 1.0);
    SW_CHECK(draft_ctl_expand_min(&cheap) > 0);
}

static void test_ahead(void)
{
    draft_ctl_t c;
    draft_ctl_init(&c, 0, 16);
    SW_CHECK_INT(draft_ctl_ahead_k(&c, 0), 0);
    SW_CHECK_INT(draft_ctl_ahead_k(&c, 6), 6); // optimistic start
    for (int i = 0; i < 40; i++)
        draft_ctl_observe_ahead(&c, 0);
    int ahead = 0;
    for (int i = 0; i < 4 * DRAFT_CTL_PROBE; i++)
        ahead += draft_ctl_ahead_k(&c, 6) > 0;
    SW_CHECK_INT(ahead, 4); // only the probes
    for (int i = 0; i < 40; i++)
        draft_ctl_observe_ahead(&c, 1);
    SW_CHECK_INT(draft_ctl_ahead_k(&c, 6), 6);

    /* Arms: rounds of 4 tokens; with drafting ahead a cycle takes 300 ms,
     * without 250 ms (it slows the stages): after the first two blocks the
     * controller drafts ahead only in the probe blocks. */
    for (int slow_on = 1; slow_on >= 0; slow_on--) {
        draft_ctl_init(&c, 0, 16);
        c.ahead_on = 1;
        int on = 0, rounds = 0;
        for (int b = 0; b < 2 + 4 * DRAFT_CTL_ARM_PROBE; b++)
            for (int r = 0; r < DRAFT_CTL_ARM_BLOCK; r++, rounds++) {
                const int arm = draft_ctl_ahead_k(&c, 6) > 0;
                if (b >= 2)
                    on += arm;
                draft_ctl_observe_cycle(&c, 4, arm == slow_on ? 300 : 250);
            }
        const int measured = 4 * DRAFT_CTL_ARM_PROBE * DRAFT_CTL_ARM_BLOCK;
        if (slow_on)
            SW_CHECK(on <= measured / DRAFT_CTL_ARM_PROBE + 1); // only the probes
        else
            SW_CHECK(on >= measured - measured / DRAFT_CTL_ARM_PROBE - 1); // all but probes
        SW_CHECK(c.arm_rate[0] > 0 && c.arm_rate[1] > 0);
    }

    /* Hidden drafting: with every guess holding, drafts cost nothing up to the
     * round's wait, so the controller picks a longer chain than without. */
    draft_ctl_t sync, hid;
    draft_ctl_init(&sync, 0, 16);
    draft_ctl_init(&hid, 0, 16);
    hid.ahead_on = 1;
    for (int r = 0; r < 30; r++) {
        const int k = 1 + r % 8;
        draft_ctl_observe(&sync, k, k, k * 3 / 4, 172 + 20 + 8.0 * (k + 1), 20 + 8.0 * (k + 1));
        draft_ctl_observe(&hid, k, k, k * 3 / 4, 172 + 20 + 8.0 * (k + 1), 20 + 8.0 * (k + 1));
        draft_ctl_draft_time(&sync, k, 30.0 * k);
        draft_ctl_draft_time(&hid, k, 30.0 * k);
        draft_ctl_observe_ahead(&hid, 1);
    }
    const int k_sync = draft_ctl_next_k(&sync, 64), k_hid = draft_ctl_next_k(&hid, 64);
    fprintf(stderr, "K without drafting ahead %d, with it (all guesses hold) %d\n", k_sync, k_hid);
    SW_CHECK(k_hid > k_sync);
}

/* Load (load.h, issue 22): two controllers fed the same rounds, one with the
 * head's load attached. Alone on the head (one session: lambda 0) both pick
 * the same K; with 16 sessions sharing batches and the stages partly busy
 * the loaded one drafts less, and with the stages saturated and rows
 * costly it drafts nothing (plain rounds); the price it weighs grows with
 * the load. */
static void test_load(void)
{
    const sim_t wan = {.a = 0.8, .fixed = 86, .c0 = 20, .c1 = 2, .t_draft = 3};
    draft_load_t load;
    draft_load_init(&load);
    for (int rows = 1; rows <= 256; rows *= 2) { // batches: 4 ms + 0.25 ms a row, each stage
        draft_load_head_batch(&load, rows, 4 + 0.25 * rows, 1);
        draft_load_verdict(&load, 1, 4 + 0.25 * rows, rows, 1, 1);
        draft_load_draft_batch(&load, rows, 2 + 0.1 * rows, 1);
    }
    draft_ctl_t alone, loaded;
    draft_ctl_init(&alone, 0, 16);
    draft_ctl_init(&loaded, 0, 16);
    loaded.load = &load;
    alone.model_drafts = loaded.model_drafts = 1;
    sw_rng_t rng;
    sw_rng_seed(&rng, 7);
    for (int round = 0; round < 60; round++) {
        const int k = 2 + 4 * (round % 3); // a spread of K: 2, 6, 10
        int acc = 0;
        while (acc < k && sw_rng_uniform(&rng) < wan.a)
            acc++;
        const double compute = s_compute(&wan, k + 1);
        for (draft_ctl_t *c = &alone; c; c = c == &alone ? &loaded : NULL) {
            draft_ctl_draft_time(c, k, k * wan.t_draft);
            draft_ctl_observe(c, k, k, acc, wan.fixed + compute, compute);
        }
        draft_ctl_observe_batch(&loaded, k + 1, 16 * (k + 1), 16 * (k + 1));
    }
    load.n_active = 1; // alone: the one-session choice
    load.rate = 0.04;
    SW_CHECK_NEAR(draft_ctl_lambda(&loaded), 0, 1e-12);
    const int k_alone = draft_ctl_next_k(&alone, 64);
    SW_CHECK_INT(draft_ctl_next_k(&loaded, 64), k_alone);
    SW_CHECK(k_alone >= 4);
    /* 16 sessions, 4 rounds in a batch, the stages busy a third of the time */
    load.n_active = 16;
    load.rounds = 4;
    load.busy = 0.3;
    load.rate = 16 * 0.04;
    const double lam_mid = draft_ctl_lambda(&loaded);
    const int k_mid = draft_ctl_next_k(&loaded, 64);
    /* the same load after a stretch without drafts: the draft model would
     * first read 200 tokens, which the others wait for */
    loaded.lag = 200;
    loaded.left = 8;
    SW_CHECK_INT(draft_ctl_next_k(&loaded, 64), 0);
    loaded.left = 2000; // worth it when the generation has long to go
    SW_CHECK(draft_ctl_next_k(&loaded, 64) >= 1);
    loaded.lag = loaded.left = 0;
    /* saturated: busy all the time, every round in the same batches, rows 8x dearer */
    load.busy = 1;
    for (int rows = 1; rows <= 256; rows *= 2)
        for (int i = 0; i < 30; i++) {
            draft_load_head_batch(&load, rows, 4 + 2 * rows, 1);
            draft_load_verdict(&load, 1, 4 + 2 * rows, rows, 16, 1);
        }
    load.rounds = 16;
    load.rate = 16 * 0.04;
    const double lam_hi = draft_ctl_lambda(&loaded);
    const int k_hi = draft_ctl_next_k(&loaded, 64);
    fprintf(stderr,
            "load: K alone %d; 16 sessions, busy 0.3: lambda %.3f tok/ms, K %d; saturated: "
            "lambda %.3f, K %d\n",
            k_alone, lam_mid, k_mid, lam_hi, k_hi);
    SW_CHECK(lam_mid > 0 && lam_hi > lam_mid);
    SW_CHECK(k_mid >= 1 && k_mid < k_alone);
    SW_CHECK_INT(k_hi, 0);
    /* saturated: no probes (each would make the draft model catch up), and
     * no drafting ahead: its draft steps cost the others more than a held
     * guess saves this session */
    int drafted = 0;
    for (int i = 0; i < 3 * DRAFT_CTL_PROBE; i++)
        drafted += draft_ctl_next_k(&loaded, 64);
    SW_CHECK_INT(drafted, 0);
    loaded.ahead_on = 1;
    SW_CHECK_INT(draft_ctl_ahead_k(&loaded, 4), 0);
    /* a new session on the saturated head starts plain, not with the
     * three measuring rounds of drafts (nor does it alone) */
    draft_ctl_t fresh;
    draft_ctl_init(&fresh, 0, 16);
    fresh.load = &load;
    fresh.model_drafts = 1;
    SW_CHECK_INT(draft_ctl_next_k(&fresh, 64), 0);
    load.n_active = 1;
    SW_CHECK(draft_ctl_next_k(&fresh, 64) > 0);
    load.n_active = 16;
    /* alone again: drafting ahead comes back */
    load.n_active = 1;
    SW_CHECK(draft_ctl_ahead_k(&loaded, 4) == 4);
}

/* The gate (load.h): a head with sessions whose tokens come faster under one
 * arm (drafts as the controllers choose them, or plain rounds for all) ends
 * up holding that arm nearly all the time, with either arm the winner; one
 * session keeps the gate open; a closed gate makes the adaptive K 0 and
 * leaves a fixed K alone. Events every 100 ms, noise-free rates. */
/* rate[arm]: tokens per session-ms under each arm; n_arms 2 or 3. The share
 * of the time after the first two seconds spent in arm `best`. */
static double s_gate_ratio; // of the last s_gate_run: tokens over the best arm's, whole run

static int s_gate_dip_every, s_gate_dip_ms; // requests ending and beginning together (ms; 0: never)

static double s_gate_run(const double rate[3], int n_arms, int best, int n_sess, int secs,
                         int *arm_end)
{
    double all = 0;
    draft_load_t l;
    draft_load_init(&l);
    draft_load_gate(&l, 1, n_arms);
    draft_load_active(&l, n_sess, n_sess);
    int in_best = 0, events = 0;
    double owed = 0; // the fraction of a token carried to the next event (rates that differ
                     // by less than a token per event must still differ)
    for (int i = 1; i <= secs * 10; i++) {
        /* every s_gate_dip_every ms all requests end, and the next ones wait
         * s_gate_dip_ms for their first token (running, not decoding) */
        const int dip = s_gate_dip_every > 0 && (i * 100) % s_gate_dip_every < s_gate_dip_ms;
        draft_load_active(&l, n_sess, dip ? 0 : n_sess);
        owed += dip ? 0 : rate[draft_load_arm(&l)] * 100 * n_sess;
        const int tokens = (int)owed;
        owed -= tokens;
        all += tokens;
        draft_load_verdict(&l, tokens, 0, 0, 0, 100.0 * i);
        if (i > 20) { // after the first two seconds
            events++;
            in_best += draft_load_arm(&l) == best;
        }
    }
    s_gate_ratio = all / (rate[best] * n_sess * 1000.0 * secs);
    *arm_end = l.gate.last_win; // the last decision (the arm now may be on trial)
    return (double)in_best / events;
}

static void test_gate(void)
{
    int arm;
    /* drafting slower (0.8x): plain rounds hold most of the time */
    const double slow[3] = {0.003, 0.0024, 0};
    const double plain_share = s_gate_run(slow, 2, DRAFT_ARM_PLAIN, 16, 120, &arm);
    SW_CHECK_INT(arm, DRAFT_ARM_PLAIN);
    /* drafting faster (1.5x): it holds most of the time */
    const double fast[3] = {0.003, 0.0045, 0};
    const double chosen_share = s_gate_run(fast, 2, DRAFT_ARM_CHOSEN, 16, 120, &arm);
    SW_CHECK_INT(arm, DRAFT_ARM_CHOSEN);
    /* three arms, the n-gram lookup best (1.1x plain, the model 0.8x) */
    const double ngram[3] = {0.003, 0.0024, 0.0033};
    const double ngram_share = s_gate_run(ngram, 3, DRAFT_ARM_NGRAM, 16, 120, &arm);
    SW_CHECK_INT(arm, DRAFT_ARM_NGRAM);
    /* three arms, the model best */
    const double model3[3] = {0.003, 0.0045, 0.0033};
    const double model3_share = s_gate_run(model3, 3, DRAFT_ARM_CHOSEN, 16, 120, &arm);
    SW_CHECK_INT(arm, DRAFT_ARM_CHOSEN);
    /* drafting far slower (0.5x, n-gram 0.9x): measured one window at a time */
    const double bad[3] = {0.003, 0.0015, 0.0027};
    const double bad_share = s_gate_run(bad, 3, DRAFT_ARM_PLAIN, 16, 120, &arm);
    SW_CHECK_INT(arm, DRAFT_ARM_PLAIN);
    fprintf(stderr,
            "gate: share of time in the best arm: plain (drafting 0.8x) %.2f, drafting (1.5x) "
            "%.2f; of three: n-gram %.2f, model %.2f, plain (model 0.5x) %.2f\n",
            plain_share, chosen_share, ngram_share, model3_share, bad_share);
    SW_CHECK(bad_share > 0.75);
    /* the 16-client bench's case: the n-gram lookup best (1.18x plain), the
     * draft model far behind (0.73x n-gram): sits out cycles after its loss,
     * so over a minute's load it runs only its first measurement and about
     * every third cycle after */
    const double bench16[3] = {0.0029, 0.0025, 0.0034};
    const double bench16_share = s_gate_run(bench16, 3, DRAFT_ARM_NGRAM, 16, 60, &arm);
    SW_CHECK_INT(arm, DRAFT_ARM_NGRAM);
    SW_CHECK(bench16_share > 0.68); // 0.58 when every arm was measured every cycle
    /* and over the 30 s such a step of the bench lasts: the tokens of the best arm's rate */
    s_gate_run(bench16, 3, DRAFT_ARM_NGRAM, 16, 30, &arm);
    fprintf(stderr,
            "gate: n-gram best, model far behind: %.2f of one minute in n-gram; over 30 s "
            "%.3f of its rate\n",
            bench16_share, s_gate_ratio);
    SW_CHECK(s_gate_ratio > 0.91); // 0.88 when every arm was measured every cycle
    /* the bench's requests end together every 14 s and the next ones wait
     * 1.2 s for their first token: a window with no session decoding is not
     * "one session or none" (which opens the gate and starts over with the
     * draft model's arm), and the windows around it measure nothing
     * (before: 0.34 of the time in plain rounds, 0.695 of their tokens) */
    s_gate_dip_every = 14000;
    s_gate_dip_ms = 1200;
    const double dip_share = s_gate_run(bad, 3, DRAFT_ARM_PLAIN, 16, 120, &arm);
    const double dip_ratio = s_gate_ratio;
    s_gate_dip_every = s_gate_dip_ms = 0;
    fprintf(stderr,
            "gate: requests ending together every 14 s (model 0.5x): %.2f of the time in plain "
            "rounds, %.3f of their tokens\n",
            dip_share, dip_ratio);
    SW_CHECK_INT(arm, DRAFT_ARM_PLAIN);
    SW_CHECK(dip_share > 0.7);
    SW_CHECK(plain_share > 0.8);
    SW_CHECK(chosen_share > 0.8);
    SW_CHECK(ngram_share > 0.7);
    SW_CHECK(model3_share > 0.7);
    /* one session: always open, whatever the rates */
    const double alone = s_gate_run(slow, 3, DRAFT_ARM_CHOSEN, 1, 60, &arm);
    SW_CHECK_NEAR(alone, 1.0, 1e-12);
    SW_CHECK_INT(arm, -1); // and no comparison was ever made
    /* a closed gate: the adaptive K is 0, a fixed K stays */
    draft_load_t l;
    draft_load_init(&l);
    draft_load_gate(&l, 1, 2);
    l.gate.arm = DRAFT_ARM_PLAIN;
    draft_ctl_t adaptive, fixed;
    draft_ctl_init(&adaptive, 0, 8);
    draft_ctl_init(&fixed, 4, 8);
    adaptive.load = fixed.load = &l;
    SW_CHECK_INT(draft_ctl_next_k(&adaptive, 8), 0);
    SW_CHECK_INT(draft_ctl_next_k(&fixed, 8), 4);
    l.gate.arm = DRAFT_ARM_CHOSEN;
    SW_CHECK(draft_ctl_next_k(&adaptive, 8) >= 1);
    draft_load_gate(&l, 0, 2); // off: never closed
    l.gate.arm = DRAFT_ARM_PLAIN;
    SW_CHECK(draft_load_drafts_allowed(&l));
    SW_CHECK(draft_load_drafts_allowed(NULL));
}

int main(void)
{
    test_calibration();
    test_gate();
    test_load();
    test_thresholds();
    test_ahead();
    SW_CHECK_NEAR(draft_expected_tokens(0.5, 0), 1.0, 1e-12);
    SW_CHECK_NEAR(draft_expected_tokens(0.5, 1), 1.5, 1e-12);
    SW_CHECK_NEAR(draft_expected_tokens(0.5, 3), 1.875, 1e-12);
    SW_CHECK_NEAR(draft_expected_tokens(1.0, 7), 8.0, 1e-12);

    /* WAN: 86 ms per round trip dominates, cheap drafts: K goes high. */
    sim_t wan = {.a = 0.8, .fixed = 86, .c0 = 20, .c1 = 2, .t_draft = 3};
    s_simulate(&wan, 32, 1, "wan a=0.8");
    SW_CHECK(s_best_k(&wan, 32) >= 6);
    /* Local: no network, the draft costs half a target step: K small. */
    sim_t local = {.a = 0.6, .fixed = 0.5, .c0 = 20, .c1 = 3, .t_draft = 10};
    s_simulate(&local, 32, 2, "local a=0.6");
    SW_CHECK(s_best_k(&local, 32) <= 3);
    /* High acceptance over a WAN. */
    sim_t easy = {.a = 0.95, .fixed = 86, .c0 = 15, .c1 = 1, .t_draft = 2};
    s_simulate(&easy, 32, 3, "wan a=0.95");

    /* Compute not linear in rows (one-row kernel, then shared weight reads):
     * a line through rows 1 and 2 would keep K tiny. */
    sim_t gemv = {.a = 0.9, .fixed = 86, .c0 = 100, .c1 = 10, .t_draft = 20, .gemv = 1};
    SW_CHECK(s_best_k(&gemv, 32) >= 6);
    s_simulate(&gemv, 32, 5, "wan a=0.9, one-row kernel");

    /* Drafting does not pay: K = 0 except the probes, which still measure a. */
    sim_t bad = {.a = 0.1, .fixed = 86, .c0 = 20, .c1 = 2, .t_draft = 30};
    SW_CHECK_INT(s_best_k(&bad, 32), 0);
    s_simulate(&bad, 32, 4, "wan a=0.1, costly drafts");

    /* Fixed K. */
    draft_ctl_t c;
    draft_ctl_init(&c, 8, 16);
    SW_CHECK_INT(draft_ctl_next_k(&c, 64), 8);
    SW_CHECK_INT(draft_ctl_next_k(&c, 3), 3);
    SW_CHECK_INT(draft_ctl_next_k(&c, 0), 0);
    draft_ctl_observe(&c, 8, 8, 0, 100, 10);
    SW_CHECK_INT(draft_ctl_next_k(&c, 64), 8);

    /* Adaptive: the first K, and bad observations change nothing. */
    draft_ctl_init(&c, 0, 16);
    SW_CHECK_INT(draft_ctl_next_k(&c, 64), 4);
    SW_CHECK_INT(draft_ctl_next_k(&c, 2), 2);
    draft_ctl_observe(&c, 4, 4, 5, 100, 10);
    draft_ctl_observe(&c, -1, -1, 0, 100, 10);
    draft_ctl_observe(&c, 4, 4, 2, NAN, 10);
    draft_ctl_draft_time(&c, 0, 5);
    SW_CHECK_INT(c.n_obs, 0);
    SW_CHECK(c.draft_ms < 0);
    return sw_test_done();
}
