/*
 * quant_lowbit.c - the portable scalar kernels of the low-bit types people
 * choose to fit big models: q2_K and q3_K (256-element super-blocks of 16
 * sub-blocks, 2 and 3 bits), iq4_xs (256 elements, 8 sub-blocks of 4-bit
 * indices into a non-linear table) against q8_K activations, and iq4_nl
 * (32-element blocks of the same indices) against q8_0. Their rows as f32.
 *
 * Each kernel computes exactly what GGML's AVX2 kernel computes, in its
 * order (quant_math_lowbit.h's header lists the float operations): the
 * integer lanes are exact, so any formulation gives the same integers; the
 * float operations per lane are GGML's. sw_matmul_tiled's order (q2_K,
 * q3_K, iq4_xs: llama.cpp's tiled prompt matmul) and sw_matmul_sgemm's
 * (iq4_nl: llamafile's sgemm) are here too. quant_lowbit_avx2.c has the
 * same kernels with AVX2; tests/unit/test_quant_lowbit.c checks the levels
 * against each other and against quant_math_lowbit.h's lanes, and
 * scripts/dev/ggml_bits.sh against GGML itself.
 */
#include "quant.h"
#include "quant_impl.h"
#include "quant_math.h"

#include <math.h>
#include <string.h>

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__) && !defined(__STRICT_ANSI__)
#error "build with -std=c11: in GNU mode GCC fuses a*b+c, which changes the results"
#endif

_Static_assert(sizeof(sw_block_q2_k) == 84, "q2_K block size");
_Static_assert(sizeof(sw_block_q3_k) == 110, "q3_K block size");
_Static_assert(sizeof(sw_block_iq4_nl) == 18, "iq4_nl block size");
_Static_assert(sizeof(sw_block_iq4_xs) == 136, "iq4_xs block size");

/* ---- rows as f32 ---------------------------------------------------------- */

int sw_dequantize_lowbit(enum sw_type t, const void *src, float *dst, int64_t n)
{
    switch (t) {
    case SW_TYPE_Q2_K:
        for (int64_t i = 0; i < n; i++)
            dst[i] = sw_q2_k_elem((const sw_block_q2_k *)src + i / SW_QK_K, (int)(i % SW_QK_K));
        return 0;
    case SW_TYPE_Q3_K:
        for (int64_t i = 0; i < n; i++)
            dst[i] = sw_q3_k_elem((const sw_block_q3_k *)src + i / SW_QK_K, (int)(i % SW_QK_K));
        return 0;
    case SW_TYPE_IQ4_NL:
        for (int64_t i = 0; i < n; i++)
            dst[i] = sw_iq4_nl_elem((const sw_block_iq4_nl *)src + i / SW_QK, (int)(i % SW_QK));
        return 0;
    case SW_TYPE_IQ4_XS:
        for (int64_t i = 0; i < n; i++)
            dst[i] = sw_iq4_xs_elem((const sw_block_iq4_xs *)src + i / SW_QK_K, (int)(i % SW_QK_K));
        return 0;
    default:
        return -1;
    }
}

/* ---- integers of one block pair --------------------------------------------
 *
 * lane[k] (k < 8): the elements 4k..4k+3 of every 32-element group, times
 * their sub-block's scale, summed (exact). */

/* The 2-bit value of element e of a q2_K/q3_K block's qs. */
static inline int s_low2(const uint8_t *qs, int e)
{
    return (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
}

/* q2_K: the lanes and pm[k], the minimums of sub-blocks 2k, 2k+1 times their bsums. */
static void s_q2k_ints(const sw_block_q2_k *w, const sw_block_q8_k *x, int32_t lane[8],
                       int32_t pm[8])
{
    for (int k = 0; k < 8; k++) {
        lane[k] = 0;
        pm[k] = (w->scales[2 * k] >> 4) * x->bsums[2 * k] +
                (w->scales[2 * k + 1] >> 4) * x->bsums[2 * k + 1];
    }
    for (int e = 0; e < SW_QK_K; e++)
        lane[(e % 32) / 4] += (w->scales[e / 16] & 0xF) * s_low2(w->qs, e) * x->qs[e];
}

/* q3_K: the lanes, the -4 offset of the quants whose third bit is clear included. */
static void s_q3k_ints(const sw_block_q3_k *w, const sw_block_q8_k *x, int32_t lane[8])
{
    int sc[16];
    for (int s = 0; s < 16; s++)
        sc[s] = sw_q3_k_scale(w->scales, s);
    for (int k = 0; k < 8; k++)
        lane[k] = 0;
    for (int e = 0; e < SW_QK_K; e++) {
        const int hb = (w->hmask[e % 32] >> (e / 32)) & 1;
        lane[(e % 32) / 4] += sc[e / 16] * (s_low2(w->qs, e) - (hb ? 0 : 4)) * x->qs[e];
    }
}

/* The non-linear level of element e of a 32-element group of nibbles. */
static inline int s_level(const uint8_t *qs, int e)
{
    return sw_iq4nl_value(e < 16 ? (qs[e] & 0xF) : (qs[e - 16] >> 4));
}

static void s_iq4xs_ints(const sw_block_iq4_xs *w, const sw_block_q8_k *x, int32_t lane[8])
{
    for (int k = 0; k < 8; k++)
        lane[k] = 0;
    for (int s = 0; s < 8; s++) {
        const int sc = sw_iq4_xs_scale(w, s);
        for (int e = 0; e < 32; e++)
            lane[e / 4] += sc * s_level(w->qs + 16 * s, e) * x->qs[32 * s + e];
    }
}

static void s_iq4nl_ints(const sw_block_iq4_nl *w, const sw_block_q8_0 *x, int32_t lane[8])
{
    for (int k = 0; k < 8; k++)
        lane[k] = 0;
    for (int e = 0; e < 32; e++)
        lane[e / 4] += s_level(w->qs, e) * x->qs[e];
}

static int32_t s_sum8(const int32_t v[8])
{
    int32_t t = 0;
    for (int k = 0; k < 8; k++)
        t += v[k];
    return t;
}

/* ---- dot products (GGML's AVX2 order) ---------------------------------------- */

static void s_dot_q2_k(int64_t n, float *s, const void *vw, const void *vx)
{
    const sw_block_q2_k *w = vw;
    const sw_block_q8_k *x = vx;
    float acc[8] = {0};
    for (int64_t b = 0; b < n / SW_QK_K; b++) {
        const float d = x[b].d * sw_h2f(w[b].d);
        const float dmin = -x[b].d * sw_h2f(w[b].dmin);
        int32_t lane[8], pm[8];
        s_q2k_ints(&w[b], &x[b], lane, pm);
        for (int k = 0; k < 8; k++)
            acc[k] = fmaf(dmin, (float)pm[k], acc[k]);
        for (int k = 0; k < 8; k++)
            acc[k] = fmaf(d, (float)lane[k], acc[k]);
    }
    *s = sw_hsum8(acc);
}

static void s_dot_q3_k(int64_t n, float *s, const void *vw, const void *vx)
{
    const sw_block_q3_k *w = vw;
    const sw_block_q8_k *x = vx;
    float acc[8] = {0};
    for (int64_t b = 0; b < n / SW_QK_K; b++) {
        const float d = x[b].d * sw_h2f(w[b].d);
        int32_t lane[8];
        s_q3k_ints(&w[b], &x[b], lane);
        for (int k = 0; k < 8; k++)
            acc[k] = fmaf(d, (float)lane[k], acc[k]);
    }
    *s = sw_hsum8(acc);
}

static void s_dot_iq4_xs(int64_t n, float *s, const void *vw, const void *vx)
{
    const sw_block_iq4_xs *w = vw;
    const sw_block_q8_k *x = vx;
    float acc[8] = {0};
    for (int64_t b = 0; b < n / SW_QK_K; b++) {
        const float d = sw_h2f(w[b].d) * x[b].d;
        int32_t lane[8];
        s_iq4xs_ints(&w[b], &x[b], lane);
        for (int k = 0; k < 8; k++)
            acc[k] = fmaf(d, (float)lane[k], acc[k]);
    }
    *s = sw_hsum8(acc);
}

/* iq4_nl's one-row order: even blocks in acc, odd in acc2, an odd last block
 * apart (one fused multiply-add of its total, as GCC compiles GGML's tail). */
static void s_dot_iq4_nl(int64_t n, float *s, const void *vw, const void *vx)
{
    const sw_block_iq4_nl *w = vw;
    const sw_block_q8_0 *x = vx;
    const int64_t nb = n / SW_QK;
    float acc[2][8] = {{0}};
    int32_t lane[8];
    int64_t b = 0;
    for (; b + 1 < nb; b += 2)
        for (int p = 0; p < 2; p++) {
            const float d = sw_h2f(x[b + p].d) * sw_h2f(w[b + p].d);
            s_iq4nl_ints(&w[b + p], &x[b + p], lane);
            for (int k = 0; k < 8; k++)
                acc[p][k] = fmaf(d, (float)lane[k], acc[p][k]);
        }
    float d = 0.0f;
    int32_t t = 0;
    if (b < nb) {
        d = sw_h2f(x[b].d) * sw_h2f(w[b].d);
        s_iq4nl_ints(&w[b], &x[b], lane);
        t = s_sum8(lane);
    }
    *s = sw_iq4_nl_combine2(acc[0], acc[1], b < nb, d, t);
}

/* iq4_nl in llamafile's sgemm order: one chain. */
static void s_gdot_iq4_nl(int64_t n, float *s, const void *vw, const void *vx)
{
    const sw_block_iq4_nl *w = vw;
    const sw_block_q8_0 *x = vx;
    float acc[8] = {0};
    for (int64_t b = 0; b < n / SW_QK; b++) {
        const float d = sw_h2f(w[b].d) * sw_h2f(x[b].d);
        int32_t lane[8];
        s_iq4nl_ints(&w[b], &x[b], lane);
        for (int k = 0; k < 8; k++)
            acc[k] = fmaf(d, (float)lane[k], acc[k]);
    }
    *s = sw_hsum8(acc);
}

/* ---- the tiled order (sw_matmul_tiled) ---------------------------------------- */

static void s_tdot_q2_k(int64_t n, float *s, const void *vw, const void *vx)
{
    const sw_block_q2_k *w = vw;
    const sw_block_q8_k *x = vx;
    float y = 0.0f;
    for (int64_t b = 0; b < n / SW_QK_K; b++) {
        int32_t lane[8], pm[8];
        s_q2k_ints(&w[b], &x[b], lane, pm);
        float r = sw_h2f(w[b].d) * (float)s_sum8(lane);
        r = fmaf(-sw_h2f(w[b].dmin), (float)s_sum8(pm), r);
        y = fmaf(r, x[b].d, y);
    }
    *s = y;
}

static void s_tdot_q3_k(int64_t n, float *s, const void *vw, const void *vx)
{
    const sw_block_q3_k *w = vw;
    const sw_block_q8_k *x = vx;
    float y = 0.0f;
    for (int64_t b = 0; b < n / SW_QK_K; b++) {
        int32_t lane[8];
        s_q3k_ints(&w[b], &x[b], lane);
        y = fmaf(sw_h2f(w[b].d) * (float)s_sum8(lane), x[b].d, y);
    }
    *s = y;
}

static void s_tdot_iq4_xs(int64_t n, float *s, const void *vw, const void *vx)
{
    const sw_block_iq4_xs *w = vw;
    const sw_block_q8_k *x = vx;
    float y = 0.0f;
    for (int64_t b = 0; b < n / SW_QK_K; b++) {
        int32_t lane[8];
        s_iq4xs_ints(&w[b], &x[b], lane);
        y = fmaf(sw_h2f(w[b].d) * (float)s_sum8(lane), x[b].d, y);
    }
    *s = y;
}

void sw_kernels_lowbit(struct sw_kernels *k)
{
    k->dot[SW_TYPE_Q2_K] = s_dot_q2_k;
    k->dot[SW_TYPE_Q3_K] = s_dot_q3_k;
    k->dot[SW_TYPE_IQ4_XS] = s_dot_iq4_xs;
    k->dot[SW_TYPE_IQ4_NL] = s_dot_iq4_nl;
    k->tdot[SW_TYPE_Q2_K] = s_tdot_q2_k;
    k->tdot[SW_TYPE_Q3_K] = s_tdot_q3_k;
    k->tdot[SW_TYPE_IQ4_XS] = s_tdot_iq4_xs;
    k->gdot[SW_TYPE_IQ4_NL] = s_gdot_iq4_nl;
}
