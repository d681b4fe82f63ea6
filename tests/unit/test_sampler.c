/*
 * test_sampler.c - the sampler against hand-computed expectations: the RNG
 * stream against an independent implementation, greedy ties and bad logits,
 * seeds, the kept sets of top-k/top-p/min-p and their order in the chain,
 * the repetition penalty and its window, draw frequencies against softmax by
 * chi-square (and the same check rejecting a wrong temperature), and top-k /
 * top-p on a 152064-token vocabulary against a full reference sort.
 */
#include "chi2.h"
#include "sampler.h"
#include "sw_test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static sw_sampling_t s_params(float temp, int top_k, float top_p, float min_p, uint64_t seed)
{
    sw_sampling_t p = sw_sampling_default();
    p.temp = temp;
    p.top_k = top_k;
    p.top_p = top_p;
    p.min_p = min_p;
    p.rep_penalty = 1.0f;
    p.seed = seed;
    return p;
}

static double s_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Standard normal from the test's own RNG (Box-Muller). */
static float s_gauss(sw_rng_t *r)
{
    double u1 = sw_rng_uniform(r), u2 = sw_rng_uniform(r);
    return (float)(sqrt(-2.0 * log(1.0 - u1)) * cos(6.283185307179586 * u2));
}

static void test_rng(void)
{
    /* Reference values from an independent Python implementation of
     * splitmix64 seeding + xoshiro256**. */
    static const uint64_t want0[4] = {0x99ec5f36cb75f2b4ULL, 0xbf6e1f784956452aULL,
                                      0x1a5f849d4933e6e0ULL, 0x6aa594f1262d2d2cULL};
    static const uint64_t want5eed[4] = {0xef33f17055244b74ULL, 0xe1f591112fb5051bULL,
                                         0xd8ab05640214863aULL, 0xf985e1f2fb897b03ULL};
    sw_rng_t r;
    sw_rng_seed(&r, 0);
    for (int i = 0; i < 4; i++)
        SW_CHECK(sw_rng_next(&r) == want0[i]);
    sw_rng_seed(&r, 0x5eed);
    for (int i = 0; i < 4; i++)
        SW_CHECK(sw_rng_next(&r) == want5eed[i]);
    double lo = 1.0, hi = 0.0, sum = 0.0;
    for (int i = 0; i < 100000; i++) {
        double u = sw_rng_uniform(&r);
        lo = u < lo ? u : lo;
        hi = u > hi ? u : hi;
        sum += u;
    }
    SW_CHECK(lo >= 0.0 && hi < 1.0);
    SW_CHECK_NEAR(sum / 100000.0, 0.5, 0.005);
}

static void test_params(void)
{
    sw_sampling_t p = sw_sampling_default();
    SW_CHECK_INT(sw_sampling_check(&p), 0);
    SW_CHECK_NEAR(p.temp, 0.8, 1e-6);
    SW_CHECK_INT(p.top_k, 40);
    sw_sampling_t bad[7];
    for (int i = 0; i < 7; i++)
        bad[i] = p;
    bad[0].temp = -0.1f;
    bad[1].temp = NAN;
    bad[2].top_k = -1;
    bad[3].top_p = 0.0f;
    bad[4].min_p = 1.5f;
    bad[5].rep_penalty = 0.0f;
    bad[6].rep_last_n = -3;
    for (int i = 0; i < 7; i++) {
        SW_CHECK_INT(sw_sampling_check(&bad[i]), -1);
        sw_sampler_t *s = sw_sampler_new(&bad[i], 10);
        SW_CHECK(s == NULL);
        sw_sampler_free(&s);
    }
    sw_sampler_t *s = sw_sampler_new(&p, 0);
    SW_CHECK(s == NULL);
    sw_sampler_free(&s); /* NULL is accepted */
    sw_sampler_free(NULL);
}

static void test_greedy(void)
{
    sw_sampling_t p = s_params(0.0f, 40, 0.9f, 0.1f, 1);
    sw_sampler_t *s = sw_sampler_new(&p, 6);
    if (!s) {
        SW_CHECK(s != NULL);
        return;
    }
    float l1[6] = {0.5f, 2.0f, -1.0f, 2.0f, 1.99f, -INFINITY};
    SW_CHECK_INT(sw_sampler_sample(s, l1), 1); /* tie between 1 and 3: lowest index */
    SW_CHECK_INT(sw_sampler_argmax(s, l1), 1);
    float l2[6] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -3.0f};
    SW_CHECK_INT(sw_sampler_sample(s, l2), 5);
    float l3[6] = {-5.0f, -5.0f, -5.0f, -5.0f, -5.0f, -5.0f};
    SW_CHECK_INT(sw_sampler_sample(s, l3), 0);
    float probs[6];
    SW_CHECK_INT(sw_sampler_probs(s, l1, probs), 0);
    for (int i = 0; i < 6; i++)
        SW_CHECK(probs[i] == (i == 1 ? 1.0f : 0.0f));
    /* Greedy consumes no random numbers. */
    sw_rng_t before = *sw_sampler_rng(s);
    for (int i = 0; i < 10; i++)
        SW_CHECK_INT(sw_sampler_sample(s, l1), 1);
    SW_CHECK(memcmp(&before, sw_sampler_rng(s), sizeof(before)) == 0);
    /* Bad logits. */
    float bad[6] = {0.0f, 1.0f, NAN, 0.0f, 0.0f, 0.0f};
    SW_CHECK_INT(sw_sampler_sample(s, bad), -1);
    bad[2] = INFINITY;
    SW_CHECK_INT(sw_sampler_sample(s, bad), -1);
    float all_inf[6] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY};
    SW_CHECK_INT(sw_sampler_sample(s, all_inf), -1);
    SW_CHECK_INT(sw_sampler_probs(s, all_inf, probs), -1);
    sw_sampler_free(&s);
    SW_CHECK(s == NULL);

    /* Greedy over a large random vocabulary = a plain argmax loop. */
    enum { NV = 49152 };
    float *lg = malloc(NV * sizeof(float));
    p = s_params(0.0f, 0, 1.0f, 0.0f, 1);
    s = sw_sampler_new(&p, NV);
    if (lg && s) {
        sw_rng_t r;
        sw_rng_seed(&r, 77);
        for (int rep = 0; rep < 20; rep++) {
            for (int i = 0; i < NV; i++)
                lg[i] = (float)(int)(s_gauss(&r) * 8.0f); /* many exact ties */
            int best = 0;
            for (int i = 1; i < NV; i++)
                if (lg[i] > lg[best])
                    best = i;
            SW_CHECK_INT(sw_sampler_sample(s, lg), best);
        }
    }
    free(lg);
    sw_sampler_free(&s);
}

static void test_seeds(void)
{
    enum { NV = 50, N = 200 };
    float lg[NV];
    for (int i = 0; i < NV; i++)
        lg[i] = (float)sin(i * 1.3) * 2.0f;
    sw_sampling_t pa = s_params(1.0f, 0, 1.0f, 0.0f, 1234);
    sw_sampling_t pb = pa;
    pb.seed = 1235;
    sw_sampler_t *a = sw_sampler_new(&pa, NV), *a2 = sw_sampler_new(&pa, NV),
                 *b = sw_sampler_new(&pb, NV);
    if (!a || !a2 || !b) {
        SW_CHECK(0);
        goto out;
    }
    int32_t ta[N], tb[N];
    int same_a2 = 1, diff_b = 0;
    float probs[NV];
    for (int i = 0; i < N; i++) {
        ta[i] = sw_sampler_sample(a, lg);
        /* The probs + sample_probs path gives the same token from the same state. */
        int ok = sw_sampler_probs(a2, lg, probs) == 0;
        int32_t t2 = ok ? sw_sampler_sample_probs(a2, probs) : -1;
        tb[i] = sw_sampler_sample(b, lg);
        same_a2 &= t2 == ta[i];
        diff_b += tb[i] != ta[i];
        SW_CHECK(ta[i] >= 0 && ta[i] < NV);
    }
    SW_CHECK(same_a2);
    SW_CHECK(diff_b > N / 2);
    /* reset() replays the stream. */
    sw_sampler_reset(a);
    int replay = 1;
    for (int i = 0; i < N; i++)
        replay &= sw_sampler_sample(a, lg) == ta[i];
    SW_CHECK(replay);
out:
    sw_sampler_free(&a);
    sw_sampler_free(&a2);
    sw_sampler_free(&b);
}

static void test_top_k1(void)
{
    enum { NV = 1000 };
    static float lg[NV];
    sw_sampling_t p = s_params(1.5f, 1, 1.0f, 0.0f, 9);
    sw_sampler_t *s = sw_sampler_new(&p, NV);
    if (!s) {
        SW_CHECK(0);
        return;
    }
    sw_rng_t r;
    sw_rng_seed(&r, 3);
    int ok = 1;
    for (int rep = 0; rep < 200; rep++) {
        for (int i = 0; i < NV; i++)
            lg[i] = (float)(int)(s_gauss(&r) * 4.0f);
        int32_t g = sw_sampler_argmax(s, lg);
        ok &= sw_sampler_sample(s, lg) == g;
    }
    SW_CHECK(ok);
    sw_sampler_free(&s);
}

/* probs_out for logits log(base) under params; compares with want (0 = dropped). */
static void s_check_probs(const char *what, const float *base, int n, sw_sampling_t p,
                          const double *want)
{
    float lg[16], probs[16];
    for (int i = 0; i < n; i++)
        lg[i] = logf(base[i]);
    sw_sampler_t *s = sw_sampler_new(&p, n);
    if (!s) {
        SW_CHECK(0);
        return;
    }
    SW_CHECK_INT(sw_sampler_probs(s, lg, probs), 0);
    for (int i = 0; i < n; i++) {
        if (want[i] == 0.0 ? probs[i] != 0.0f : fabs(probs[i] - want[i]) > 1e-5) {
            fprintf(stderr, "%s: token %d prob %g, expected %g\n", what, i, (double)probs[i],
                    want[i]);
            SW_CHECK(0);
        }
    }
    sw_sampler_free(&s);
}

static void test_filters(void)
{
    /* Probabilities deliberately not in index order. */
    const float b[5] = {0.15f, 0.5f, 0.05f, 0.2f, 0.1f};
    /* top_p 0.8: 0.5 + 0.2 + 0.15 = 0.85 >= 0.8, three kept. */
    const double tp[5] = {0.15 / 0.85, 0.5 / 0.85, 0, 0.2 / 0.85, 0};
    s_check_probs("top_p 0.8", b, 5, s_params(1.0f, 0, 0.8f, 0.0f, 1), tp);
    /* top_p 0.4 keeps the max only. */
    const double tp1[5] = {0, 1, 0, 0, 0};
    s_check_probs("top_p 0.4", b, 5, s_params(1.0f, 0, 0.4f, 0.0f, 1), tp1);
    /* min_p 0.25: keep p >= 0.125. */
    s_check_probs("min_p 0.25", b, 5, s_params(1.0f, 0, 1.0f, 0.25f, 1), tp);
    /* min_p 0.35: keep p >= 0.175. */
    const double mp[5] = {0, 0.5 / 0.7, 0, 0.2 / 0.7, 0};
    s_check_probs("min_p 0.35", b, 5, s_params(1.0f, 0, 1.0f, 0.35f, 1), mp);
    /* top_p and min_p together: the smaller set wins. */
    s_check_probs("top_p 0.8 min_p 0.35", b, 5, s_params(1.0f, 0, 0.8f, 0.35f, 1), mp);
    s_check_probs("top_k 2", b, 5, s_params(1.0f, 2, 1.0f, 0.0f, 1), mp);
    /* top_k before top_p: after top_k 2 the max has 0.714 >= 0.7 alone (top_p
     * over the full distribution would keep two). */
    s_check_probs("top_k 2 top_p 0.7", b, 5, s_params(1.0f, 2, 0.7f, 0.0f, 1), tp1);
    /* Temperature after top_p: top_p 0.8 still keeps three (at temp 2 first it
     * would keep four), then p ~ p^(1/2) over them. */
    double z = sqrt(0.15) + sqrt(0.5) + sqrt(0.2);
    const double tt[5] = {sqrt(0.15) / z, sqrt(0.5) / z, 0, sqrt(0.2) / z, 0};
    s_check_probs("top_p 0.8 temp 2", b, 5, s_params(2.0f, 0, 0.8f, 0.0f, 1), tt);
    /* No filter at temp 0.5: p ~ p^2. */
    double z2 = 0.15 * 0.15 + 0.25 + 0.0025 + 0.04 + 0.01;
    const double t2[5] = {0.0225 / z2, 0.25 / z2, 0.0025 / z2, 0.04 / z2, 0.01 / z2};
    s_check_probs("temp 0.5", b, 5, s_params(0.5f, 0, 1.0f, 0.0f, 1), t2);
    /* top_k larger than the vocabulary is no filter. */
    const double all[5] = {0.15, 0.5, 0.05, 0.2, 0.1};
    s_check_probs("top_k 100", b, 5, s_params(1.0f, 100, 1.0f, 0.0f, 1), all);
}

static void test_penalty(void)
{
    sw_sampling_t p = s_params(1.0f, 0, 1.0f, 0.0f, 1);
    p.rep_penalty = 2.0f;
    p.rep_last_n = 3;
    sw_sampler_t *s = sw_sampler_new(&p, 5);
    if (!s) {
        SW_CHECK(0);
        return;
    }
    const float lg[5] = {2.0f, -1.0f, 0.5f, 3.0f, 1.0f};
    float probs[5];
    SW_CHECK_INT(sw_sampler_argmax(s, lg), 3);
    sw_sampler_accept(s, 3);
    sw_sampler_accept(s, 1);
    sw_sampler_accept(s, 3); /* counted once: 3 / 2, not / 4 */
    /* Penalised: {2, -2, 0.5, 1.5, 1}. */
    SW_CHECK_INT(sw_sampler_argmax(s, lg), 0);
    SW_CHECK_INT(sw_sampler_probs(s, lg, probs), 0);
    const double pl[5] = {2.0, -2.0, 0.5, 1.5, 1.0};
    double z = 0.0;
    for (int i = 0; i < 5; i++)
        z += exp(pl[i]);
    for (int i = 0; i < 5; i++)
        SW_CHECK_NEAR(probs[i], exp(pl[i]) / z, 1e-6);
    /* The window holds the last 3: after 0 and 4 it is {3, 0, 4}. */
    sw_sampler_accept(s, 0);
    sw_sampler_accept(s, 4);
    SW_CHECK_INT(sw_sampler_argmax(s, lg), 3); /* {1, -1, 0.5, 1.5, 0.5} */
    SW_CHECK_INT(sw_sampler_probs(s, lg, probs), 0);
    const double pl2[5] = {1.0, -1.0, 0.5, 1.5, 0.5};
    z = 0.0;
    for (int i = 0; i < 5; i++)
        z += exp(pl2[i]);
    for (int i = 0; i < 5; i++)
        SW_CHECK_NEAR(probs[i], exp(pl2[i]) / z, 1e-6);
    /* Out-of-range ids penalise nothing; reset clears the history. */
    sw_sampler_accept(s, -7);
    sw_sampler_accept(s, 99);
    sw_sampler_accept(s, 1000000);
    SW_CHECK_INT(sw_sampler_argmax(s, lg), 3);
    SW_CHECK_INT(sw_sampler_probs(s, lg, probs), 0);
    z = 0.0;
    for (int i = 0; i < 5; i++)
        z += exp(lg[i]);
    SW_CHECK_NEAR(probs[1], exp(-1.0) / z, 1e-6);
    sw_sampler_accept(s, 3);
    sw_sampler_reset(s);
    SW_CHECK_INT(sw_sampler_argmax(s, lg), 3);
    sw_sampler_free(&s);
}

static void test_frequencies(void)
{
    enum { NV = 16, N = 100000 };
    float lg[NV];
    double soft[NV], wrong[NV], z = 0.0, zw = 0.0;
    for (int i = 0; i < NV; i++) {
        lg[i] = 0.3f * (float)((i * 7) % NV) - 2.0f;
        z += exp(lg[i]);
        zw += exp(lg[i] / 1.1);
    }
    for (int i = 0; i < NV; i++) {
        soft[i] = exp(lg[i]) / z;
        wrong[i] = exp(lg[i] / 1.1) / zw;
    }
    sw_sampling_t p = s_params(1.0f, 0, 1.0f, 0.0f, 2024);
    sw_sampler_t *s = sw_sampler_new(&p, NV);
    if (!s) {
        SW_CHECK(0);
        return;
    }
    uint64_t counts[NV] = {0};
    int bad = 0;
    for (int i = 0; i < N; i++) {
        int32_t t = sw_sampler_sample(s, lg);
        if (t < 0 || t >= NV)
            bad++;
        else
            counts[t]++;
    }
    SW_CHECK_INT(bad, 0);
    double stat, pv = chi2_pvalue(counts, soft, NV, &stat);
    printf("temp 1 frequencies vs softmax: chi2 %.2f dof %d p %.4f\n", stat, NV - 1, pv);
    SW_CHECK(pv > 1e-4);
    /* The same counts against temp 1.1's softmax must be rejected. */
    double pw = chi2_pvalue(counts, wrong, NV, &stat);
    printf("same counts vs temp 1.1 softmax: chi2 %.2f p %.3g\n", stat, pw);
    SW_CHECK(pw < 1e-4);
    sw_sampler_free(&s);
}

static void test_chi2_math(void)
{
    /* Critical values at p = 0.05 from the standard tables. */
    SW_CHECK_NEAR(chi2_sf(3.841459, 1), 0.05, 1e-5);
    SW_CHECK_NEAR(chi2_sf(14.06714, 7), 0.05, 1e-5);
    SW_CHECK_NEAR(chi2_sf(24.99579, 15), 0.05, 1e-5);
    SW_CHECK_NEAR(chi2_sf(82.52873, 63), 0.05, 1e-5);
    SW_CHECK_NEAR(chi2_sf(2.0, 2), exp(-1.0), 1e-12); /* dof 2: exp(-x/2) */
    SW_CHECK_NEAR(chi2_sf(0.0, 5), 1.0, 1e-12);
}

/* Reference order for the large-vocabulary test: logit descending, then id. */
static const float *s_ref_logits;

static int s_cmp_ref(const void *pa, const void *pb)
{
    int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
    float la = s_ref_logits[a], lb = s_ref_logits[b];
    if (la != lb)
        return la > lb ? -1 : 1;
    return a < b ? -1 : a > b;
}

/* The kept count by the definitions, on the full reference order. */
static int s_ref_kept(const float *lg, const int32_t *order, int nv, int top_k, float top_p,
                      float min_p)
{
    double mx = lg[order[0]];
    int n = top_k > 0 && top_k < nv ? top_k : nv;
    int kept = n;
    if (top_p < 1.0f) {
        double z = 0.0, cum = 0.0;
        for (int i = 0; i < n; i++)
            z += exp(lg[order[i]] - mx);
        for (int i = 0; i < n; i++) {
            cum += exp(lg[order[i]] - mx);
            if (cum >= top_p * z) {
                kept = i + 1;
                break;
            }
        }
    }
    if (min_p > 0.0f) {
        double thr = mx + log(min_p);
        int km = 1;
        while (km < kept && lg[order[km]] >= thr)
            km++;
        kept = km;
    }
    return kept;
}

/* 152064 logits (Gaussian; then quantised with many exact ties, a few far
 * below and some -inf): the kept sets must be exactly the first `kept` of a
 * full (logit, id) sort, and timings are printed. */
static void test_large_vocab(void)
{
    enum { NV = 152064 };
    float *lg = malloc(NV * sizeof(float)), *probs = malloc(NV * sizeof(float));
    int32_t *order = malloc(NV * sizeof(int32_t));
    uint8_t *in_ref = malloc(NV);
    if (!lg || !probs || !order || !in_ref) {
        SW_CHECK(0);
        goto out;
    }
    struct {
        int top_k;
        float top_p, min_p;
    } cfg[] = {{40, 1.0f, 0.0f},
               {0, 0.9f, 0.0f},
               {0, 1.0f, 0.01f},
               {1000, 0.95f, 0.05f},
               {5000, 0.9f, 0.0f},
               {0, 0.999f, 0.0f},
               {0, 0.5f, 0.02f},
               /* k > n_vocab / 16: quickselect rather than the heap */
               {20000, 1.0f, 0.0f},
               {60000, 0.95f, 0.0f}};
    for (int pattern = 0; pattern < 2; pattern++) {
        sw_rng_t r;
        sw_rng_seed(&r, 5 + pattern);
        for (int i = 0; i < NV; i++) {
            float g = s_gauss(&r) * 3.0f;
            if (pattern == 1) {
                g = floorf(g * 2.0f); /* ties everywhere */
                if (i % 97 == 0)
                    g = -INFINITY;
                else if (i % 89 == 0)
                    g -= 200.0f; /* far below: shares the last bucket */
            }
            lg[i] = g;
            order[i] = i;
        }
        s_ref_logits = lg;
        qsort(order, NV, sizeof(int32_t), s_cmp_ref);
        for (size_t c = 0; c < sizeof(cfg) / sizeof(cfg[0]); c++) {
            sw_sampling_t p = s_params(0.7f, cfg[c].top_k, cfg[c].top_p, cfg[c].min_p, 11);
            sw_sampler_t *s = sw_sampler_new(&p, NV);
            if (!s) {
                SW_CHECK(0);
                continue;
            }
            int kept = s_ref_kept(lg, order, NV, cfg[c].top_k, cfg[c].top_p, cfg[c].min_p);
            memset(in_ref, 0, NV);
            for (int i = 0; i < kept; i++)
                in_ref[order[i]] = 1;
            int reps = 10, ok = 1;
            double t0 = s_now();
            for (int rep = 0; rep < reps; rep++)
                ok &= sw_sampler_probs(s, lg, probs) == 0;
            double dt = (s_now() - t0) / reps;
            SW_CHECK(ok);
            int nz = 0, mismatch = 0;
            double sum = 0.0;
            for (int i = 0; i < NV; i++) {
                sum += probs[i];
                nz += probs[i] > 0.0f;
                /* -inf logits may be kept with probability 0: only check
                 * that nothing outside the set has mass and nothing finite
                 * inside is zero. */
                if (in_ref[i] ? (lg[i] > -INFINITY && !(probs[i] > 0.0f)) : probs[i] != 0.0f)
                    mismatch++;
            }
            SW_CHECK_INT(mismatch, 0);
            SW_CHECK(nz <= kept);
            SW_CHECK_NEAR(sum, 1.0, 1e-4);
            t0 = s_now();
            int valid = 1;
            for (int rep = 0; rep < reps; rep++) {
                int32_t t = sw_sampler_sample(s, lg);
                valid &= t >= 0 && in_ref[t];
            }
            double ds = (s_now() - t0) / reps;
            SW_CHECK(valid);
            printf("n_vocab %d logits %s top_k %d top_p %.3f min_p %.2f: kept %d, probs %.2f ms, "
                   "sample %.2f ms\n",
                   NV, pattern ? "ties" : "gauss", cfg[c].top_k, (double)cfg[c].top_p,
                   (double)cfg[c].min_p, kept, dt * 1e3, ds * 1e3);
            sw_sampler_free(&s);
        }
    }
out:
    free(lg);
    free(probs);
    free(order);
    free(in_ref);
}

static void test_sample_probs(void)
{
    sw_sampling_t p = s_params(1.0f, 0, 1.0f, 0.0f, 1);
    sw_sampler_t *s = sw_sampler_new(&p, 4);
    if (!s) {
        SW_CHECK(0);
        return;
    }
    const float point[4] = {0.0f, 0.0f, 3.0f, 0.0f}; /* unnormalised is fine */
    int ok = 1;
    for (int i = 0; i < 100; i++)
        ok &= sw_sampler_sample_probs(s, point) == 2;
    SW_CHECK(ok);
    const float neg[4] = {0.5f, -0.1f, 0.6f, 0.0f};
    SW_CHECK_INT(sw_sampler_sample_probs(s, neg), -1);
    const float zero[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    SW_CHECK_INT(sw_sampler_sample_probs(s, zero), -1);
    const float nan[4] = {0.5f, NAN, 0.5f, 0.0f};
    SW_CHECK_INT(sw_sampler_sample_probs(s, nan), -1);
    sw_sampler_free(&s);
}

int main(void)
{
    test_rng();
    test_params();
    test_greedy();
    test_seeds();
    test_top_k1();
    test_filters();
    test_penalty();
    test_chi2_math();
    test_frequencies();
    test_sample_probs();
    test_large_vocab();
    return sw_test_done();
}
