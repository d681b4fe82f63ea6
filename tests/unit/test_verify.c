/*
 * test_verify.c - the speculative acceptance rule.
 *
 * Losslessness, statistically: for fixed 8-token target distributions p and
 * draft distributions q (close to p, far from p, a point mass, sparse, a
 * target with an impossible token, a filtered target) the whole
 * draft-then-verify procedure runs 200k times (drafts drawn from q by the
 * test's own RNG) and the first committed token must follow p by chi-square.
 * Two deliberately wrong rules (always accept; accept with p/q but resample
 * from p instead of the residual) go through the same procedure and the same
 * check, which must reject them: the check can fail. For K = 3 with
 * position-dependent (bigram) p and q, with and without a repetition
 * penalty, the joint distribution of the first two committed tokens must
 * match the target's, and the same wrong rules, plus one that does not
 * advance the penalty history between rows, must not.
 *
 * Greedy: hand-built rows give the expected counts and tokens (all accepted
 * + bonus, first rejected, middle rejected, K = 0), the penalty history is
 * advanced between rows, and greedy draws no random numbers. Bad inputs are
 * refused before anything changes.
 *
 * Trees: greedy follows the longest path matching the target's argmax (a
 * later sibling, a deep branch, no match); a chain given as a tree gives the
 * chain's tokens and consumes the same random numbers, in greedy and in
 * sampling mode. Losslessness of the multi-candidate rule: trees of 10
 * drafts (three candidates at the root drawn without replacement from the
 * draft, two under each, one branch three deep) and trees of deterministic
 * top-3 / top-2 candidates, with and without a repetition penalty: the
 * joint law of the first two committed tokens must be the target's by
 * chi-square, while three wrong rules (siblings tested without the residual
 * update, the with-replacement rule on candidates drawn without
 * replacement, the first candidate always kept) must be rejected by the same
 * check. Bad trees (parent out of range, equal siblings, a later sibling's
 * q_tok that does not fit) are refused.
 */
#include "chi2.h"
#include "decode.h"
#include "sw_test.h"
#include "verify.h"

#include <math.h>
#include <string.h>

#define NV 8
#define KMAX 4
#define TRIALS 200000
#define P_MIN 1e-4 /* a correct rule must give p-value > P_MIN; a wrong one below */

typedef int (*rule_fn)(sw_sampler_t *s, const sw_verify_in_t *in, float *work, int32_t *out);

static int rule_correct(sw_sampler_t *s, const sw_verify_in_t *in, float *work, int32_t *out)
{
    return sw_verify(s, in, work, out);
}

/* Wrong: keeps every draft, then a bonus token from p_K. */
static int rule_always_accept(sw_sampler_t *s, const sw_verify_in_t *in, float *work, int32_t *out)
{
    for (int32_t i = 0; i < in->k; i++) {
        out[i] = in->draft[i];
        sw_sampler_accept(s, in->draft[i]);
    }
    if (sw_sampler_probs(s, in->logits + (size_t)in->k * NV, work) != 0)
        return -1;
    out[in->k] = sw_sampler_sample_probs(s, work);
    sw_sampler_accept(s, out[in->k]);
    return in->k + 1;
}

/* Wrong: the right acceptance test, but a rejection resamples from p. */
static int rule_resample_p(sw_sampler_t *s, const sw_verify_in_t *in, float *work, int32_t *out)
{
    for (int32_t i = 0; i <= in->k; i++) {
        if (sw_sampler_probs(s, in->logits + (size_t)i * NV, work) != 0)
            return -1;
        if (i < in->k) {
            int32_t d = in->draft[i];
            double qd = in->q ? in->q[i].q_tok : 1.0;
            if (sw_rng_uniform(sw_sampler_rng(s)) * qd < work[d]) {
                out[i] = d;
                sw_sampler_accept(s, d);
                continue;
            }
        }
        out[i] = sw_sampler_sample_probs(s, work);
        sw_sampler_accept(s, out[i]);
        return i + 1;
    }
    return -1;
}

/* Wrong: the right rule, but every row sees the history as it was before the
 * round (the committed tokens are added only at the end). */
static int rule_stale_history(sw_sampler_t *s, const sw_verify_in_t *in, float *work, int32_t *out)
{
    int n = -1;
    for (int32_t i = 0; i <= in->k && n < 0; i++) {
        if (sw_sampler_probs(s, in->logits + (size_t)i * NV, work) != 0)
            return -1;
        if (i < in->k) {
            int32_t d = in->draft[i];
            if (sw_rng_uniform(sw_sampler_rng(s)) * in->q[i].q_tok < work[d]) {
                out[i] = d;
                continue;
            }
            out[i] = sw_verify_residual(s, work, d, &in->q[i], work + NV);
        } else {
            out[i] = sw_sampler_sample_probs(s, work);
        }
        n = i + 1;
    }
    for (int i = 0; i < n; i++)
        sw_sampler_accept(s, out[i]);
    return n;
}

static int32_t s_draw(sw_rng_t *r, const double *w)
{
    double u = sw_rng_uniform(r), cum = 0.0;
    int32_t last = 0;
    for (int32_t i = 0; i < NV; i++) {
        if (w[i] > 0.0) {
            cum += w[i];
            last = i;
            if (u < cum)
                return i;
        }
    }
    return last;
}

static sw_sampling_t s_params(float temp, int top_k, uint64_t seed)
{
    sw_sampling_t p = sw_sampling_default();
    p.temp = temp;
    p.top_k = top_k;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.rep_penalty = 1.0f;
    p.seed = seed;
    return p;
}

static void s_normalize(double *w)
{
    double z = 0.0;
    for (int i = 0; i < NV; i++)
        z += w[i];
    for (int i = 0; i < NV; i++)
        w[i] /= z;
}

/* One single-position experiment. */
struct pair {
    const char *name;
    double p[NV]; // target base distribution (logits = log p)
    double q[NV]; // draft distribution
    int point;    // >= 0: the draft always proposes this token (q = NULL)
    int sparse;   // pass q as (ids, vals) of its support
    int top_k;    // target filter
    float temp;   // target temperature
};

/* Expected distribution of the target sampler for base p (top_k, temp). */
static void s_target(const struct pair *pr, double *out)
{
    int keep[NV];
    for (int i = 0; i < NV; i++) {
        int rank = 0; /* tokens strictly before i in (prob desc, id asc) order */
        for (int j = 0; j < NV; j++)
            rank += pr->p[j] > pr->p[i] || (j < i && pr->p[j] == pr->p[i]);
        keep[i] = pr->top_k == 0 || rank < pr->top_k;
    }
    for (int i = 0; i < NV; i++)
        out[i] = keep[i] && pr->p[i] > 0.0 ? pow(pr->p[i], 1.0 / pr->temp) : 0.0;
    s_normalize(out);
}

/* Runs TRIALS rounds of K = 2 drafts from q through rule; counts the first
 * committed token. Returns the number of failed rounds. */
static int s_first_token(const struct pair *pr, rule_fn rule, uint64_t seed, uint64_t *counts)
{
    enum { K = 2 };
    sw_sampling_t sp = s_params(pr->temp, pr->top_k, seed);
    sw_sampler_t *s = sw_sampler_new(&sp, NV);
    if (!s)
        return TRIALS;
    float logits[(K + 1) * NV];
    for (int r = 0; r <= K; r++)
        for (int i = 0; i < NV; i++)
            logits[r * NV + i] = pr->p[i] > 0.0 ? (float)log(pr->p[i]) : -INFINITY;
    float qdense[NV], qvals[NV], work[2 * NV];
    int32_t qids[NV], nq = 0;
    for (int i = 0; i < NV; i++) {
        qdense[i] = (float)pr->q[i];
        if (pr->q[i] > 0.0) {
            qids[nq] = i;
            qvals[nq++] = (float)pr->q[i];
        }
    }
    sw_rng_t dr;
    sw_rng_seed(&dr, seed ^ 0xd1a5ULL);
    memset(counts, 0, NV * sizeof(*counts));
    int failed = 0;
    for (int t = 0; t < TRIALS; t++) {
        int32_t draft[K], out[K + 1];
        sw_draft_q_t q[K];
        for (int i = 0; i < K; i++) {
            draft[i] = pr->point >= 0 ? pr->point : s_draw(&dr, pr->q);
            q[i].q_tok = qdense[draft[i]];
            q[i].n = pr->sparse ? nq : NV;
            q[i].ids = pr->sparse ? qids : NULL;
            q[i].vals = pr->sparse ? qvals : qdense;
        }
        sw_verify_in_t in = {
            .k = K, .draft = draft, .q = pr->point >= 0 ? NULL : q, .logits = logits};
        int n = rule(s, &in, work, out);
        if (n < 1 || n > K + 1 || out[0] < 0 || out[0] >= NV) {
            failed++;
            continue;
        }
        for (int i = 0; i < n - 1; i++)
            failed += out[i] != draft[i]; /* accepted tokens are the drafts */
        counts[out[0]]++;
    }
    sw_sampler_free(&s);
    return failed;
}

static void test_first_token(void)
{
    struct pair pairs[] = {
        {.name = "q close to p",
         .p = {0.30, 0.20, 0.15, 0.10, 0.10, 0.07, 0.05, 0.03},
         .q = {0.25, 0.22, 0.15, 0.12, 0.08, 0.08, 0.06, 0.04},
         .point = -1,
         .sparse = 0,
         .top_k = 0,
         .temp = 1.0f},
        {.name = "q far from p",
         .p = {0.30, 0.20, 0.15, 0.10, 0.10, 0.07, 0.05, 0.03},
         .q = {0.02, 0.03, 0.05, 0.05, 0.10, 0.15, 0.25, 0.35},
         .point = -1,
         .sparse = 0,
         .top_k = 0,
         .temp = 1.0f},
        {.name = "q point mass at 5",
         .p = {0.10, 0.10, 0.15, 0.10, 0.15, 0.25, 0.10, 0.05},
         .q = {0, 0, 0, 0, 0, 1, 0, 0},
         .point = 5,
         .sparse = 0,
         .top_k = 0,
         .temp = 1.0f},
        {.name = "q sparse on {1, 3, 6}",
         .p = {0.12, 0.18, 0.10, 0.20, 0.08, 0.12, 0.10, 0.10},
         .q = {0, 0.6, 0, 0.3, 0, 0, 0.1, 0},
         .point = -1,
         .sparse = 1,
         .top_k = 0,
         .temp = 1.0f},
        {.name = "p has an impossible token",
         .p = {0.20, 0.0, 0.20, 0.15, 0.15, 0.10, 0.10, 0.10},
         .q = {0.05, 0.50, 0.05, 0.05, 0.05, 0.10, 0.10, 0.10},
         .point = -1,
         .sparse = 0,
         .top_k = 0,
         .temp = 1.0f},
        {.name = "target top_k 5 temp 0.7",
         .p = {0.30, 0.05, 0.15, 0.10, 0.20, 0.07, 0.10, 0.03},
         .q = {0.10, 0.20, 0.10, 0.10, 0.10, 0.20, 0.10, 0.10},
         .point = -1,
         .sparse = 0,
         .top_k = 5,
         .temp = 0.7f},
    };
    uint64_t counts[NV];
    for (size_t c = 0; c < sizeof(pairs) / sizeof(pairs[0]); c++) {
        const struct pair *pr = &pairs[c];
        double expect[NV], stat;
        s_target(pr, expect);
        int failed = s_first_token(pr, rule_correct, 100 + c, counts);
        SW_CHECK_INT(failed, 0);
        double pv = chi2_pvalue(counts, expect, NV, &stat);
        printf("%-26s correct rule:        chi2 %8.2f p %.4f\n", pr->name, stat, pv);
        SW_CHECK(pv > P_MIN);

        rule_fn wrong[2] = {rule_always_accept, rule_resample_p};
        const char *wname[2] = {"always accept", "resample from p"};
        for (int w = 0; w < 2; w++) {
            (void)s_first_token(pr, wrong[w], 100 + c, counts);
            double pw = chi2_pvalue(counts, expect, NV, &stat);
            printf("%-26s wrong: %-13s chi2 %8.2f p %.3g\n", pr->name, wname[w], stat, pw);
            SW_CHECK(pw < P_MIN);
        }
    }
}

/* K = 3 with bigram target P[prev][x] and draft Q[prev][x]: the joint law of
 * the first two committed tokens (continuing with a second round when the
 * first commits only one) must be P~(a | t0) P~(b | a), where P~ applies the
 * repetition penalty of the history (t0, then t0 a). */
static double s_joint_pvalue(rule_fn rule, const double P[NV][NV], const double Q[NV][NV],
                             float penalty, uint64_t seed, int *failed)
{
    enum { K = 3, T0 = 0 };
    sw_sampling_t sp = s_params(1.0f, 0, seed);
    sp.rep_penalty = penalty;
    sp.rep_last_n = 16;
    sw_sampler_t *s = sw_sampler_new(&sp, NV);
    if (!s) {
        *failed = TRIALS;
        return 0.0;
    }
    /* Expected joint, penalty applied by hand (log P < 0: logit * penalty). */
    double expect[NV * NV];
    double pa[NV];
    for (int a = 0; a < NV; a++)
        pa[a] = exp(log(P[T0][a]) * (a == T0 ? penalty : 1.0));
    s_normalize(pa);
    for (int a = 0; a < NV; a++) {
        double pb[NV];
        for (int b = 0; b < NV; b++)
            pb[b] = exp(log(P[a][b]) * (b == T0 || b == a ? penalty : 1.0));
        s_normalize(pb);
        for (int b = 0; b < NV; b++)
            expect[a * NV + b] = pa[a] * pb[b];
    }
    float qrow[NV][NV], lp[NV][NV];
    for (int i = 0; i < NV; i++) {
        for (int j = 0; j < NV; j++) {
            qrow[i][j] = (float)Q[i][j];
            lp[i][j] = (float)log(P[i][j]);
        }
    }
    sw_rng_t dr;
    sw_rng_seed(&dr, seed ^ 0xbeefULL);
    uint64_t counts[NV * NV] = {0};
    *failed = 0;
    for (int t = 0; t < TRIALS; t++) {
        sw_sampler_clear_history(s);
        sw_sampler_accept(s, T0);
        int32_t seq[2 * (K + 1)], nseq = 0, prev = T0;
        while (nseq < 2) {
            int32_t draft[K], out[K + 1];
            sw_draft_q_t q[K];
            float logits[(K + 1) * NV];
            int32_t ctx = prev;
            for (int i = 0; i <= K; i++) {
                memcpy(logits + i * NV, lp[ctx], sizeof(lp[ctx]));
                if (i == K)
                    break;
                draft[i] = s_draw(&dr, Q[ctx]);
                q[i] = (sw_draft_q_t){
                    .q_tok = qrow[ctx][draft[i]], .n = NV, .ids = NULL, .vals = qrow[ctx]};
                ctx = draft[i];
            }
            sw_verify_in_t in = {.k = K, .draft = draft, .q = q, .logits = logits};
            float work[2 * NV];
            int n = rule(s, &in, work, out);
            if (n < 1 || n > K + 1) {
                (*failed)++;
                break;
            }
            for (int i = 0; i < n; i++)
                seq[nseq++] = out[i];
            prev = out[n - 1];
        }
        if (nseq >= 2)
            counts[seq[0] * NV + seq[1]]++;
    }
    sw_sampler_free(&s);
    double stat, pv = chi2_pvalue(counts, expect, NV * NV, &stat);
    printf("    chi2 %.2f dof %d p %.4g\n", stat, NV * NV - 1, pv);
    return pv;
}

static void test_joint(void)
{
    double P[NV][NV], Q[NV][NV];
    sw_rng_t r;
    sw_rng_seed(&r, 4242);
    for (int i = 0; i < NV; i++) {
        for (int j = 0; j < NV; j++) {
            P[i][j] = exp(1.2 * (sw_rng_uniform(&r) - 0.5) * 2.0);
            Q[i][j] = exp(1.5 * (sw_rng_uniform(&r) - 0.5) * 2.0);
        }
        s_normalize(P[i]);
        s_normalize(Q[i]);
    }
    const float penalties[2] = {1.0f, 1.5f};
    for (int c = 0; c < 2; c++) {
        int failed;
        printf("joint of two tokens, K = 3, penalty %.1f, correct rule:\n", (double)penalties[c]);
        double pv = s_joint_pvalue(rule_correct, P, Q, penalties[c], 7 + c, &failed);
        SW_CHECK_INT(failed, 0);
        SW_CHECK(pv > P_MIN);
        printf("  wrong rule (always accept):\n");
        pv = s_joint_pvalue(rule_always_accept, P, Q, penalties[c], 7 + c, &failed);
        SW_CHECK(pv < P_MIN);
        printf("  wrong rule (resample from p):\n");
        pv = s_joint_pvalue(rule_resample_p, P, Q, penalties[c], 7 + c, &failed);
        SW_CHECK(pv < P_MIN);
        if (penalties[c] != 1.0f) {
            printf("  wrong rule (history not advanced between rows):\n");
            pv = s_joint_pvalue(rule_stale_history, P, Q, penalties[c], 7 + c, &failed);
            SW_CHECK(pv < P_MIN);
        }
    }
}

/* Row r of logits with the argmax at token a (others small, distinct). */
static void s_row(float *row, int a)
{
    for (int i = 0; i < NV; i++)
        row[i] = -0.1f * (float)i;
    row[a] = 5.0f;
}

static void test_greedy(void)
{
    sw_sampling_t sp = s_params(0.0f, 0, 1);
    sw_sampler_t *s = sw_sampler_new(&sp, NV);
    if (!s) {
        SW_CHECK(0);
        return;
    }
    float logits[(KMAX + 1) * NV], work[2 * NV];
    int32_t out[KMAX + 1];
    const int32_t draft[3] = {4, 1, 6};
    sw_rng_t before = *sw_sampler_rng(s);

    /* All accepted + bonus. */
    s_row(logits, 4);
    s_row(logits + NV, 1);
    s_row(logits + 2 * NV, 6);
    s_row(logits + 3 * NV, 2);
    sw_verify_in_t in = {.k = 3, .draft = draft, .q = NULL, .logits = logits};
    SW_CHECK_INT(sw_verify(s, &in, work, out), 4);
    SW_CHECK(out[0] == 4 && out[1] == 1 && out[2] == 6 && out[3] == 2);

    /* First rejected: the target's argmax of row 0. */
    s_row(logits, 3);
    SW_CHECK_INT(sw_verify(s, &in, work, out), 1);
    SW_CHECK_INT(out[0], 3);

    /* Middle rejected. */
    s_row(logits, 4);
    s_row(logits + NV, 1);
    s_row(logits + 2 * NV, 7);
    SW_CHECK_INT(sw_verify(s, &in, work, out), 3);
    SW_CHECK(out[0] == 4 && out[1] == 1 && out[2] == 7);
    s_row(logits + NV, 0);
    SW_CHECK_INT(sw_verify(s, &in, work, out), 2);
    SW_CHECK(out[0] == 4 && out[1] == 0);

    /* Tie in a row: the lowest index wins, so draft 6 against a 5/6 tie is rejected. */
    s_row(logits + NV, 1);
    s_row(logits + 2 * NV, 6);
    logits[2 * NV + 5] = 5.0f;
    SW_CHECK_INT(sw_verify(s, &in, work, out), 3);
    SW_CHECK_INT(out[2], 5);

    /* K = 0: just the argmax. */
    sw_verify_in_t in0 = {.k = 0, .draft = NULL, .q = NULL, .logits = logits};
    SW_CHECK_INT(sw_verify(s, &in0, work, out), 1);
    SW_CHECK_INT(out[0], 4);

    /* A q is ignored in greedy mode. */
    float qv[NV] = {0.125f, 0.125f, 0.125f, 0.125f, 0.125f, 0.125f, 0.125f, 0.125f};
    sw_draft_q_t q[3];
    for (int i = 0; i < 3; i++)
        q[i] = (sw_draft_q_t){.q_tok = 0.125f, .n = NV, .ids = NULL, .vals = qv};
    s_row(logits + 2 * NV, 6);
    sw_verify_in_t inq = {.k = 3, .draft = draft, .q = q, .logits = logits};
    SW_CHECK_INT(sw_verify(s, &inq, work, out), 4);

    SW_CHECK(memcmp(&before, sw_sampler_rng(s), sizeof(before)) == 0);
    sw_sampler_free(&s);
}

/* The penalty history advances between rows: d1 = 2 is accepted, so row 1
 * (raw argmax 2, runner-up 3) sees 2 penalised and accepts d2 = 3. */
static void test_greedy_history(void)
{
    sw_sampling_t sp = s_params(0.0f, 0, 1);
    sp.rep_penalty = 3.0f;
    sp.rep_last_n = 8;
    sw_sampler_t *s = sw_sampler_new(&sp, NV);
    if (!s) {
        SW_CHECK(0);
        return;
    }
    float logits[3 * NV], work[2 * NV];
    for (int r = 0; r < 3; r++)
        for (int i = 0; i < NV; i++)
            logits[r * NV + i] = -1.0f;
    logits[0 * NV + 2] = 2.0f;
    logits[1 * NV + 2] = 1.0f;
    logits[1 * NV + 3] = 0.9f;
    logits[2 * NV + 3] = 1.0f; /* 3 penalised to 0.33 once committed */
    logits[2 * NV + 5] = 0.5f;
    const int32_t draft[2] = {2, 3};
    int32_t out[3];
    sw_verify_in_t in = {.k = 2, .draft = draft, .q = NULL, .logits = logits};
    SW_CHECK_INT(sw_verify(s, &in, work, out), 3);
    SW_CHECK(out[0] == 2 && out[1] == 3 && out[2] == 5);
    /* The committed tokens are in the history afterwards: 5 is penalised now. */
    float probe[NV] = {-1, -1, -1, -1, -1, 0.6f, 0.3f, -1};
    SW_CHECK_INT(sw_sampler_argmax(s, probe), 6);
    sw_sampler_free(&s);
}

static void test_deterministic(void)
{
    enum { K = 3, ROUNDS = 500 };
    sw_sampling_t sp = s_params(0.9f, 0, 31337);
    sw_sampler_t *a = sw_sampler_new(&sp, NV), *b = sw_sampler_new(&sp, NV);
    if (!a || !b) {
        SW_CHECK(0);
        goto out;
    }
    const double p[NV] = {0.3, 0.2, 0.15, 0.1, 0.1, 0.07, 0.05, 0.03};
    float logits[(K + 1) * NV], work[2 * NV];
    for (int r = 0; r <= K; r++)
        for (int i = 0; i < NV; i++)
            logits[r * NV + i] = (float)log(p[(i + r) % NV]);
    int same = 1, accepted = 0;
    sw_rng_t dr;
    sw_rng_seed(&dr, 1);
    for (int t = 0; t < ROUNDS; t++) {
        int32_t draft[K], oa[K + 1], ob[K + 1];
        for (int i = 0; i < K; i++)
            draft[i] = (int32_t)(sw_rng_next(&dr) % NV);
        sw_verify_in_t in = {.k = K, .draft = draft, .q = NULL, .logits = logits};
        int na = sw_verify(a, &in, work, oa), nb = sw_verify(b, &in, work, ob);
        same &= na == nb && na >= 1 && memcmp(oa, ob, (size_t)na * sizeof(*oa)) == 0;
        accepted += na - 1;
    }
    SW_CHECK(same);
    SW_CHECK(accepted > 0);
out:
    sw_sampler_free(&a);
    sw_sampler_free(&b);
}

static void test_bad_input(void)
{
    sw_sampling_t sp = s_params(1.0f, 0, 1);
    sw_sampler_t *s = sw_sampler_new(&sp, NV);
    if (!s) {
        SW_CHECK(0);
        return;
    }
    float logits[3 * NV], work[2 * NV], qv[NV];
    for (int i = 0; i < 3 * NV; i++)
        logits[i] = 0.0f;
    for (int i = 0; i < NV; i++)
        qv[i] = 0.125f;
    int32_t out[3];
    int32_t draft[2] = {1, 2};
    sw_draft_q_t q[2] = {{.q_tok = 0.125f, .n = NV, .ids = NULL, .vals = qv},
                         {.q_tok = 0.125f, .n = NV, .ids = NULL, .vals = qv}};
    sw_verify_in_t in = {.k = 2, .draft = draft, .q = q, .logits = logits};
    SW_CHECK(sw_verify(s, &in, work, out) >= 1);

    draft[1] = NV; /* outside the vocabulary */
    SW_CHECK_INT(sw_verify(s, &in, work, out), -1);
    draft[1] = -1;
    SW_CHECK_INT(sw_verify(s, &in, work, out), -1);
    draft[1] = 2;
    q[1].q_tok = 0.0f;
    SW_CHECK_INT(sw_verify(s, &in, work, out), -1);
    q[1].q_tok = 0.5f; /* inconsistent with q(2) = 0.125 */
    SW_CHECK_INT(sw_verify(s, &in, work, out), -1);
    q[1].q_tok = 0.5f;
    q[1].n = 0; /* a point mass must have q_tok 1 */
    SW_CHECK_INT(sw_verify(s, &in, work, out), -1);
    q[1] = q[0];
    q[1].n = 5; /* dense q must have n_vocab entries */
    SW_CHECK_INT(sw_verify(s, &in, work, out), -1);
    int32_t bad_ids[2] = {2, 99};
    float bad_vals[2] = {0.125f, 0.5f};
    q[1] = (sw_draft_q_t){.q_tok = 0.125f, .n = 2, .ids = bad_ids, .vals = bad_vals};
    SW_CHECK_INT(sw_verify(s, &in, work, out), -1);
    bad_ids[1] = 3;
    bad_vals[1] = NAN;
    SW_CHECK_INT(sw_verify(s, &in, work, out), -1);
    bad_vals[1] = 0.5f;
    SW_CHECK(sw_verify(s, &in, work, out) >= 1); /* now valid */
    in.k = -1;
    SW_CHECK_INT(sw_verify(s, &in, work, out), -1);
    in.k = 2;
    logits[0] = NAN;
    SW_CHECK_INT(sw_verify(s, &in, work, out), -1);
    sw_sampler_free(&s);
}

/* The residual on its own: p minus a point mass, minus a dense q, and p == q
 * (no residual mass: falls back to p). */
static void test_residual(void)
{
    sw_sampling_t sp = s_params(1.0f, 0, 5);
    sw_sampler_t *s = sw_sampler_new(&sp, NV);
    if (!s) {
        SW_CHECK(0);
        return;
    }
    const float p[NV] = {0.5f, 0.3f, 0.2f, 0, 0, 0, 0, 0};
    const float qd[NV] = {0.5f, 0.5f, 0, 0, 0, 0, 0, 0};
    float work[NV];
    sw_draft_q_t qq = {.q_tok = 0.5f, .n = NV, .ids = NULL, .vals = qd};
    int ok = 1;
    uint64_t c_point[NV] = {0};
    for (int i = 0; i < 2000; i++) {
        int32_t t = sw_verify_residual(s, p, 0, NULL, work);
        ok &= t == 1 || t == 2;
        if (t >= 0 && t < NV)
            c_point[t]++;
        ok &= sw_verify_residual(s, p, 0, &qq, work) == 2; /* max(0, p - q) = {0, 0, 0.2} */
        int32_t f =
            sw_verify_residual(s, p, 0, &(sw_draft_q_t){.q_tok = 0.5f, .n = NV, .vals = p}, work);
        ok &= f >= 0 && f <= 2;
    }
    SW_CHECK(ok);
    SW_CHECK(c_point[1] > c_point[2]); /* 0.6 vs 0.4 */
    SW_CHECK_INT(sw_verify_residual(s, p, NV, NULL, work), -1);
    sw_sampler_free(&s);
}

/* ---- trees ---------------------------------------------------------------------- */

/* A tree rule: sw_verify_path, or a deliberately wrong variant. */
enum tree_rule {
    TREE_CORRECT = 0,
    TREE_NO_RESIDUAL = 1, // wrong: every sibling is tested against the node's p, no update
    TREE_IID = 2,   // wrong: q_s = q (the with-replacement rule) for draws without replacement
    TREE_FIRST = 3, // wrong: the first candidate is always kept
};

/* The wrong rules, written out (the correct one is the library's). */
static int s_tree_wrong(enum tree_rule rule, sw_sampler_t *s, const sw_verify_in_t *in, float *work,
                        int32_t *out)
{
    float *p = work, *r = work + NV;
    int32_t node = 0, n = 0;
    for (;;) {
        if (sw_sampler_probs(s, in->logits + (size_t)node * NV, p) != 0)
            return -1;
        int32_t first = 0;
        for (int32_t c = node + 1; c <= in->k && !first; c++)
            if (in->parent[c - 1] == node)
                first = c;
        if (!first) {
            out[n] = sw_sampler_sample_probs(s, p);
            sw_sampler_accept(s, out[n]);
            return n + 1;
        }
        if (rule == TREE_FIRST) {
            out[n++] = in->draft[first - 1];
            sw_sampler_accept(s, in->draft[first - 1]);
            node = first;
            continue;
        }
        const sw_draft_q_t *q = in->q ? &in->q[first - 1] : NULL;
        int32_t acc = 0;
        memcpy(r, p, NV * sizeof *r);
        for (int32_t c = first; c <= in->k && !acc; c++) {
            if (in->parent[c - 1] != node)
                continue;
            const int32_t d = in->draft[c - 1];
            double qd = q ? in->q[c - 1].q_tok : 1.0;
            double z = 0;
            for (int i = 0; i < NV; i++)
                z += r[i];
            const float *test = rule == TREE_NO_RESIDUAL ? p : r;
            double pd = rule == TREE_NO_RESIDUAL ? test[d] : test[d] / z;
            if (sw_rng_uniform(sw_sampler_rng(s)) * qd < pd) {
                acc = c;
                break;
            }
            for (int i = 0; i < NV; i++) { // r = max(0, r / z - q), q not renormalised
                float qi = q ? q->vals[i] : (i == d ? 1.0f : 0.0f);
                float v = r[i] / (float)z - qi;
                r[i] = v > 0 ? v : 0;
            }
        }
        if (acc) {
            out[n++] = in->draft[acc - 1];
            sw_sampler_accept(s, in->draft[acc - 1]);
            node = acc;
            continue;
        }
        double z = 0;
        for (int i = 0; i < NV; i++)
            z += r[i];
        out[n] = sw_sampler_sample_probs(s, z > 0 ? r : p);
        sw_sampler_accept(s, out[n]);
        return n + 1;
    }
}

/* Draws w distinct tokens from q (NV entries) one after the other without
 * replacement (deterministic: the w most likely, ties by id). */
static int s_draw_wo(sw_rng_t *r, const double *q, int w, int deterministic, int32_t *out)
{
    double left[NV];
    memcpy(left, q, sizeof left);
    int n = 0;
    for (; n < w; n++) {
        double z = 0;
        for (int i = 0; i < NV; i++)
            z += left[i];
        if (!(z > 1e-12))
            break;
        int32_t t = 0;
        if (deterministic) {
            for (int i = 1; i < NV; i++)
                if (left[i] > left[t])
                    t = i;
        } else {
            double u = sw_rng_uniform(r) * z, cum = 0;
            t = -1;
            for (int i = 0; i < NV && t < 0; i++) {
                cum += left[i];
                if (left[i] > 0 && u < cum)
                    t = i;
            }
            if (t < 0)
                for (int i = 0; i < NV; i++)
                    if (left[i] > 0)
                        t = i;
        }
        out[n] = t;
        left[t] = 0;
    }
    return n;
}

/* The joint law of the first two committed tokens with tree rounds (see the
 * top of the file); deterministic = top candidates as point masses. */
static double s_tree_joint(enum tree_rule rule, const double P[NV][NV], const double Q[NV][NV],
                           float penalty, int deterministic, uint64_t seed, int *failed)
{
    enum { MAXN = 16, T0 = 0 };
    sw_sampling_t sp = s_params(1.0f, 0, seed);
    sp.rep_penalty = penalty;
    sp.rep_last_n = 16;
    sw_sampler_t *s = sw_sampler_new(&sp, NV);
    if (!s) {
        *failed = TRIALS;
        return 0.0;
    }
    double expect[NV * NV], pa[NV];
    for (int a = 0; a < NV; a++)
        pa[a] = exp(log(P[T0][a]) * (a == T0 ? penalty : 1.0));
    s_normalize(pa);
    for (int a = 0; a < NV; a++) {
        double pb[NV];
        for (int b = 0; b < NV; b++)
            pb[b] = exp(log(P[a][b]) * (b == T0 || b == a ? penalty : 1.0));
        s_normalize(pb);
        for (int b = 0; b < NV; b++)
            expect[a * NV + b] = pa[a] * pb[b];
    }
    float qrow[NV][NV], lp[NV][NV];
    for (int i = 0; i < NV; i++)
        for (int j = 0; j < NV; j++) {
            qrow[i][j] = (float)Q[i][j];
            lp[i][j] = (float)log(P[i][j]);
        }
    sw_rng_t dr;
    sw_rng_seed(&dr, seed ^ 0x7eeULL);
    uint64_t counts[NV * NV] = {0};
    *failed = 0;
    for (int t = 0; t < TRIALS; t++) {
        sw_sampler_clear_history(s);
        sw_sampler_accept(s, T0);
        int32_t seq[2 * MAXN], nseq = 0, prev = T0;
        while (nseq < 2) {
            /* The tree: 3 (or 2 deterministic) candidates at the root, 2 under
             * each, and one more under the first grandchild. */
            int32_t draft[MAXN], parent[MAXN], tokn[MAXN + 1], out[MAXN + 1], kids[3];
            sw_draft_q_t q[MAXN];
            int k = 0;
            tokn[0] = prev;
            int nroot = s_draw_wo(&dr, Q[prev], deterministic ? 2 : 3, deterministic, kids);
            int root_kids[3];
            for (int i = 0; i < nroot; i++) {
                draft[k] = kids[i];
                parent[k] = 0;
                q[k] = (sw_draft_q_t){.q_tok = qrow[prev][kids[i]], .n = NV, .vals = qrow[prev]};
                root_kids[i] = ++k;
                tokn[k] = kids[i];
            }
            for (int i = 0; i < nroot; i++) {
                const int32_t at = root_kids[i], tok = tokn[at];
                int m = s_draw_wo(&dr, Q[tok], 2, deterministic, kids);
                for (int j = 0; j < m; j++) {
                    draft[k] = kids[j];
                    parent[k] = at;
                    q[k] = (sw_draft_q_t){.q_tok = qrow[tok][kids[j]], .n = NV, .vals = qrow[tok]};
                    tokn[++k] = kids[j];
                    if (i == 0 && j == 0) {
                        int32_t g;
                        if (s_draw_wo(&dr, Q[kids[0]], 1, deterministic, &g) == 1) {
                            draft[k] = g;
                            parent[k] = k;
                            q[k] = (sw_draft_q_t){
                                .q_tok = qrow[kids[0]][g], .n = NV, .vals = qrow[kids[0]]};
                            tokn[++k] = g;
                        }
                    }
                }
            }
            float logits[(MAXN + 1) * NV];
            for (int i = 0; i <= k; i++)
                memcpy(logits + i * NV, lp[tokn[i]], sizeof lp[0]);
            sw_verify_in_t in = {.k = k,
                                 .draft = draft,
                                 .q = deterministic ? NULL : q,
                                 .logits = logits,
                                 .parent = parent};
            float work[2 * NV];
            int32_t path[MAXN];
            int n = rule == TREE_CORRECT ? sw_verify_path(s, &in, work, out, path)
                                         : s_tree_wrong(rule, s, &in, work, out);
            if (n < 1 || n > k + 1) {
                (*failed)++;
                break;
            }
            /* The path is a real root-down path whose tokens are the committed ones. */
            for (int i = 0; rule == TREE_CORRECT && i < n - 1; i++)
                *failed += path[i] < 1 || path[i] > k || draft[path[i] - 1] != out[i] ||
                           parent[path[i] - 1] != (i ? path[i - 1] : 0);
            for (int i = 0; i < n; i++)
                seq[nseq++] = out[i];
            prev = out[n - 1];
        }
        if (nseq >= 2)
            counts[seq[0] * NV + seq[1]]++;
    }
    sw_sampler_free(&s);
    double stat, pv = chi2_pvalue(counts, expect, NV * NV, &stat);
    printf("    chi2 %.2f dof %d p %.4g\n", stat, NV * NV - 1, pv);
    return pv;
}

static void test_tree_joint(void)
{
    double P[NV][NV], Q[NV][NV];
    sw_rng_t r;
    sw_rng_seed(&r, 777);
    for (int i = 0; i < NV; i++) {
        for (int j = 0; j < NV; j++) {
            P[i][j] = exp(1.2 * (sw_rng_uniform(&r) - 0.5) * 2.0);
            Q[i][j] = exp(1.8 * (sw_rng_uniform(&r) - 0.5) * 2.0);
        }
        s_normalize(P[i]);
        s_normalize(Q[i]);
    }
    static const char *names[] = {"correct", "no residual between siblings", "with-replacement",
                                  "first candidate kept"};
    for (int det = 0; det < 2; det++) {
        for (int c = 0; c < 2; c++) {
            const float pen = c ? 1.5f : 1.0f;
            for (int rule = TREE_CORRECT; rule <= TREE_FIRST; rule++) {
                if (det && rule == TREE_IID)
                    continue; // point masses: nothing to renormalise
                int failed = 0;
                printf("tree, %s candidates, penalty %.1f, %s rule:\n",
                       det ? "top-k point-mass" : "sampled", (double)pen, names[rule]);
                double pv = s_tree_joint((enum tree_rule)rule, P, Q, pen, det, 11 + c, &failed);
                if (rule == TREE_CORRECT) {
                    SW_CHECK_INT(failed, 0);
                    SW_CHECK(pv > P_MIN);
                } else {
                    SW_CHECK(pv < P_MIN);
                }
            }
        }
    }
}

/* Greedy over a hand-built tree:
 *   root -> 4 (node 1) -> 1 (node 3) -> 6 (node 5)
 *        -> 2 (node 2) -> 7 (node 4)
 *                      -> 5 (node 6)                                       */
static void test_tree_greedy(void)
{
    sw_sampling_t sp = s_params(0.0f, 0, 1);
    sw_sampler_t *s = sw_sampler_new(&sp, NV);
    if (!s) {
        SW_CHECK(0);
        return;
    }
    const int32_t draft[6] = {4, 2, 1, 7, 6, 5};
    const int32_t parent[6] = {0, 0, 1, 2, 3, 2};
    float logits[7 * NV], work[2 * NV];
    int32_t out[7], path[6];
    sw_rng_t before = *sw_sampler_rng(s);
    sw_verify_in_t in = {.k = 6, .draft = draft, .logits = logits, .parent = parent};

    /* The first branch all the way: 4 1 6, bonus 3. */
    s_row(logits, 4);
    s_row(logits + 1 * NV, 1);
    s_row(logits + 2 * NV, 0);
    s_row(logits + 3 * NV, 6);
    s_row(logits + 4 * NV, 0);
    s_row(logits + 5 * NV, 3);
    s_row(logits + 6 * NV, 0);
    SW_CHECK_INT(sw_verify_path(s, &in, work, out, path), 4);
    SW_CHECK(out[0] == 4 && out[1] == 1 && out[2] == 6 && out[3] == 3);
    SW_CHECK(path[0] == 1 && path[1] == 3 && path[2] == 5);

    /* The second sibling, then its second child: 2 5, bonus from node 6. */
    s_row(logits, 2);
    s_row(logits + 2 * NV, 5);
    s_row(logits + 6 * NV, 7);
    SW_CHECK_INT(sw_verify_path(s, &in, work, out, path), 3);
    SW_CHECK(out[0] == 2 && out[1] == 5 && out[2] == 7);
    SW_CHECK(path[0] == 2 && path[1] == 6);

    /* No candidate matches at the root: the root's argmax alone. */
    s_row(logits, 3);
    SW_CHECK_INT(sw_verify_path(s, &in, work, out, path), 1);
    SW_CHECK_INT(out[0], 3);

    /* A leaf in the middle: 4 then 1 mismatched (row 1 says 0). */
    s_row(logits, 4);
    s_row(logits + 1 * NV, 0);
    SW_CHECK_INT(sw_verify_path(s, &in, work, out, path), 2);
    SW_CHECK(out[0] == 4 && out[1] == 0 && path[0] == 1);
    SW_CHECK(memcmp(&before, sw_sampler_rng(s), sizeof before) == 0);

    /* Bad trees are refused. */
    int32_t bad_parent[6] = {0, 0, 1, 2, 5, 2}; // node 5 under itself
    sw_verify_in_t bad = in;
    bad.parent = bad_parent;
    SW_CHECK_INT(sw_verify_path(s, &bad, work, out, path), -1);
    bad_parent[4] = -1;
    SW_CHECK_INT(sw_verify_path(s, &bad, work, out, path), -1);
    const int32_t same[6] = {4, 4, 1, 7, 6, 5}; // two root candidates with token 4
    bad = in;
    bad.draft = same;
    SW_CHECK_INT(sw_verify_path(s, &bad, work, out, path), -1);
    sw_sampler_free(&s);

    /* A later sibling's q_tok must be its first sibling's q of its token. */
    sp = s_params(1.0f, 0, 1);
    s = sw_sampler_new(&sp, NV);
    if (!s) {
        SW_CHECK(0);
        return;
    }
    float qv[NV] = {0.3f, 0.1f, 0.2f, 0.1f, 0.1f, 0.1f, 0.05f, 0.05f};
    sw_draft_q_t q[6];
    for (int i = 0; i < 6; i++)
        q[i] = (sw_draft_q_t){.q_tok = qv[draft[i]], .n = NV, .vals = qv};
    sw_verify_in_t inq = in;
    inq.q = q;
    SW_CHECK(sw_verify_path(s, &inq, work, out, path) >= 1);
    q[1].q_tok = 0.5f; // node 2 is the second root candidate: q(2) is 0.2
    q[1].n = 0;
    q[1].vals = NULL;
    SW_CHECK_INT(sw_verify_path(s, &inq, work, out, path), -1);
    q[1].q_tok = 0.2f; // later siblings need only q_tok
    SW_CHECK(sw_verify_path(s, &inq, work, out, path) >= 1);
    sw_sampler_free(&s);
}

/* A chain given as a tree commits the same tokens from the same random
 * numbers, greedy and sampling, point masses and sparse q. */
static void test_tree_chain_same(void)
{
    enum { K = 5, ROUNDS = 2000 };
    int same = 1, accepted = 0;
    for (int mode = 0; mode < 3; mode++) {
        sw_sampling_t sp = s_params(mode == 0 ? 0.0f : 0.9f, 0, 99 + mode);
        sp.rep_penalty = 1.3f;
        sp.rep_last_n = 8;
        sw_sampler_t *a = sw_sampler_new(&sp, NV), *b = sw_sampler_new(&sp, NV);
        if (!a || !b) {
            SW_CHECK(0);
            sw_sampler_free(&a);
            sw_sampler_free(&b);
            return;
        }
        sw_rng_t dr;
        sw_rng_seed(&dr, 5 + mode);
        const int32_t parent[K] = {0, 1, 2, 3, 4};
        float qv[NV] = {0.25f, 0.05f, 0.3f, 0.1f, 0.1f, 0.05f, 0.1f, 0.05f};
        int32_t qids[3] = {0, 2, 6};
        float qsp[3] = {0.4f, 0.4f, 0.2f};
        for (int t = 0; t < ROUNDS; t++) {
            float logits[(K + 1) * NV], work[2 * NV];
            for (int i = 0; i < (K + 1) * NV; i++)
                logits[i] = (float)(2.0 * sw_rng_uniform(&dr));
            int32_t draft[K], oa[K + 1], ob[K + 1], path[K];
            sw_draft_q_t q[K];
            for (int i = 0; i < K; i++) {
                if (mode == 2) {
                    int j = (int)(sw_rng_next(&dr) % 3);
                    draft[i] = qids[j];
                    q[i] = (sw_draft_q_t){.q_tok = qsp[j], .n = 3, .ids = qids, .vals = qsp};
                } else {
                    draft[i] = (int32_t)(sw_rng_next(&dr) % NV);
                    q[i] = (sw_draft_q_t){.q_tok = qv[draft[i]], .n = NV, .vals = qv};
                }
            }
            sw_verify_in_t in = {.k = K, .draft = draft, .q = mode ? q : NULL, .logits = logits};
            sw_verify_in_t it = in;
            it.parent = parent;
            int na = sw_verify(a, &in, work, oa), nb = sw_verify_path(b, &it, work, ob, path);
            same &= na == nb && na >= 1 && !memcmp(oa, ob, (size_t)na * sizeof *oa);
            for (int i = 0; i < nb - 1; i++)
                same &= path[i] == i + 1;
            same &= !memcmp(sw_sampler_rng(a), sw_sampler_rng(b), sizeof(sw_rng_t));
            accepted += na - 1;
        }
        sw_sampler_free(&a);
        sw_sampler_free(&b);
    }
    SW_CHECK(same);
    SW_CHECK(accepted > 0);
}

/* The verifier's logits digest after a replay (issue 20): a tail that survives
 * a fault verifies the replayed rounds (from kv_keep 0, the same rows, bit
 * for bit) a second time; its digest must end as a run without the fault's,
 * while another row anywhere must change it. */
static uint64_t s_replay_digest(int replay_at, int other_row)
{
    enum { ROUNDS = 6 };
    sw_sampling_t sp = s_params(0.0f, 0, 1);
    sw_verifier_t *v = sw_verifier_new(&sp, NV);
    if (!v) {
        SW_CHECK(0);
        return 0;
    }
    uint64_t digest = 0;
    int32_t toks[ROUNDS + 3] = {1, 2, 3};
    for (int i = 3; i < ROUNDS + 3; i++)
        toks[i] = (int32_t)(i % NV);
    /* Round 0: the prompt (3 rows); round k: one decode row at position k + 2. */
    for (int k = 0, pass = 0; k < ROUNDS; k++) {
        float row[NV];
        s_row(row, toks[k + 3] % NV);
        if (k == other_row)
            row[0] += 1e-6f;
        sw_round_t r = {.kv_keep = k == 0 ? 0 : k + 2,
                        .n = k == 0 ? 3 : 1,
                        .tokens = k == 0 ? toks : toks + k + 2};
        sw_verdict_t out;
        char err[128];
        SW_CHECK_INT(sw_verifier_run(v, &r, row, &out, err, sizeof err), 0);
        SW_CHECK_INT(out.tokens[0], toks[k + 3] % NV);
        digest = out.logits_digest;
        if (k == replay_at && pass++ == 0)
            k = -1; // the fault: every round again from the prompt
    }
    sw_verifier_free(&v);
    return digest;
}

static void test_replay_digest(void)
{
    const uint64_t clean = s_replay_digest(-1, -1);
    SW_CHECK(clean != 0);
    SW_CHECK(s_replay_digest(0, -1) == clean);
    SW_CHECK(s_replay_digest(3, -1) == clean);
    SW_CHECK(s_replay_digest(5, -1) == clean);
    SW_CHECK(s_replay_digest(-1, 4) != clean);
}

int main(void)
{
    test_greedy();
    test_greedy_history();
    test_deterministic();
    test_bad_input();
    test_residual();
    test_first_token();
    test_joint();
    test_tree_greedy();
    test_tree_chain_same();
    test_tree_joint();
    test_replay_digest();
    return sw_test_done();
}
