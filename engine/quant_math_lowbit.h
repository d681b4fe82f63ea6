/*
 * quant_math_lowbit.h - the arithmetic of q2_K, q3_K, iq4_nl and iq4_xs,
 * written once for the host and the GPU (included by quant_math.h, whose
 * rules it follows: no floating-point contraction, every fused operation an
 * explicit fmaf).
 *
 *  - element j of a dequantized row, exactly as GGML's dequantize_row_*
 *    (ggml-base, compiled without FMA) computes it;
 *  - the dot products in the shape the GPU kernels run them, lane k (0..7)
 *    of GGML's AVX2 8-lane accumulation, lane k covering elements 4k..4k+3
 *    of every 32-element group (quant_math.h's header says how wl, step and
 *    combine are used):
 *      q2_K  per block fma(-d_x dmin_w, float(mins . bsums of lane k), acc)
 *            then fma(d_x d_w, float(lane k), acc) in the same accumulator;
 *      q3_K  fma(d_x d_w, float(lane k), acc), the -4 offset in the lane;
 *      iq4_xs fma(d_w d_x, float(lane k), acc), sub-block scales in the lane;
 *      iq4_nl the q4_0 shape against q8_0 with the non-linear values: its
 *            one-row vec_dot runs two chains, even blocks in acc and odd
 *            blocks in acc2, adds them lane by lane, sums the lanes and
 *            then adds an odd last block's d * total with one fused
 *            multiply-add (sw_iq4_nl_combine2); llamafile's sgemm (prompt
 *            batches) runs one chain, sw_iq4_nl_step on every block.
 *    The K-quants also have sw_<fmt>_ints (a lane's integers alone) and
 *    sw_<fmt>_tiled (sw_matmul_tiled's block update).
 */
#ifndef SW_QUANT_MATH_LOWBIT_H
#define SW_QUANT_MATH_LOWBIT_H

#include <stdint.h>

#include "half.h"
#include "quant_impl.h"

/* GGML's kvalues_iq4nl[i], i < 16: the non-linear 4-bit levels. */
SW_HD int sw_iq4nl_value(int i)
{
    const uint64_t lo = 0xF6EADDCFBFAD9881ull; // -127 -104 -83 -65 -49 -35 -22 -10
    const uint64_t hi = 0x7159453526190D01ull; //    1   13  25  38  53  69  89 113
    return (int)(int8_t)(uint8_t)(((i < 8 ? lo : hi) >> (8 * (i & 7))) & 0xFF);
}

/* Four 4-bit indices (the low nibbles of the bytes of v) as four int8 levels. */
SW_HD uint32_t sw_iq4nl_map4(uint32_t v)
{
    uint32_t r = 0;
    for (int i = 0; i < 4; i++)
        r |= (uint32_t)(uint8_t)(int8_t)sw_iq4nl_value((int)((v >> (8 * i)) & 0xF)) << (8 * i);
    return r;
}

/* The 6-bit scale of sub-block j (0..15) of a q3_K block, minus 32. */
SW_HD int sw_q3_k_scale(const uint8_t *s, int j)
{
    const int lo = j < 8 ? (s[j] & 0xF) : (s[j - 8] >> 4);
    const int hi = (s[8 + (j & 3)] >> (2 * (j >> 2))) & 3;
    return (lo | hi << 4) - 32;
}

/* The 6-bit scale of sub-block s (0..7) of an iq4_xs block, minus 32. */
SW_HD int sw_iq4_xs_scale(const sw_block_iq4_xs *b, int s)
{
    return (((b->scales_l[s / 2] >> (4 * (s % 2))) & 0xF) | (((b->scales_h >> (2 * s)) & 3) << 4)) -
           32;
}

/* ---- elements ------------------------------------------------------------------------ */

SW_HD float sw_q2_k_elem(const sw_block_q2_k *b, int i)
{
    const int h = i / 128, g = (i % 128) / 32, l = i % 32, s = i / 16;
    const float dl = sw_h2f(b->d) * (float)(b->scales[s] & 0xF);
    const float ml = sw_h2f(b->dmin) * (float)(b->scales[s] >> 4);
    return dl * (float)((b->qs[32 * h + l] >> (2 * g)) & 3) - ml;
}

SW_HD float sw_q3_k_elem(const sw_block_q3_k *b, int i)
{
    const int h = i / 128, g = (i % 128) / 32, l = i % 32;
    const float dl = sw_h2f(b->d) * (float)sw_q3_k_scale(b->scales, i / 16);
    const int q = ((b->qs[32 * h + l] >> (2 * g)) & 3) - ((b->hmask[l] >> (4 * h + g)) & 1 ? 0 : 4);
    return dl * (float)q;
}

SW_HD float sw_iq4_nl_elem(const sw_block_iq4_nl *b, int i)
{
    const int q = i < 16 ? (b->qs[i] & 0xF) : (b->qs[i - 16] >> 4);
    return sw_h2f(b->d) * (float)sw_iq4nl_value(q);
}

SW_HD float sw_iq4_xs_elem(const sw_block_iq4_xs *b, int i)
{
    const int s = i / 32, j = i % 32;
    const float dl = sw_h2f(b->d) * (float)sw_iq4_xs_scale(b, s);
    const uint8_t *qs = b->qs + 16 * s;
    const int q = j < 16 ? (qs[j] & 0xF) : (qs[j - 16] >> 4);
    return dl * (float)sw_iq4nl_value(q);
}

/* ---- lanes ------------------------------------------------------------------------------ */

/* The four bytes of lane k in 32-element group g of a q2_K/q3_K block's qs,
 * as 2-bit values in the low bits of each byte. */
SW_HD uint32_t sw_k23_low2(const uint8_t *qs, int g, int k)
{
    return (sw_ld32(qs + 32 * (g / 4) + 4 * k) >> (2 * (g % 4))) & 0x03030303u;
}

/* q2_K x q8_K */
typedef struct sw_wl_q2_k {
    uint32_t q[8];  // group g: lane k's four 2-bit quants as bytes
    uint8_t sc[16]; // 4-bit sub-block scales
    uint8_t mn[16]; // 4-bit sub-block minimums
    float d, dmin;  // super-scales
} sw_wl_q2_k;

SW_HD void sw_q2_k_wl(const sw_block_q2_k *w, int k, sw_wl_q2_k *o)
{
    for (int g = 0; g < 8; g++)
        o->q[g] = sw_k23_low2(w->qs, g, k);
    for (int s = 0; s < 16; s++) {
        o->sc[s] = w->scales[s] & 0xF;
        o->mn[s] = w->scales[s] >> 4;
    }
    o->d = sw_h2f(w->d);
    o->dmin = sw_h2f(w->dmin);
}

/* Lane k's integers: the quants' dot product with the sub-block scales
 * (*lane) and the minimums of sub-blocks 2k, 2k+1 times their bsums (*mins). */
SW_HD void sw_q2_k_ints(const sw_wl_q2_k *wl, const sw_block_q8_k *x, int k, int32_t *lane,
                        int32_t *mins)
{
    const uint8_t *xq = (const uint8_t *)x->qs;
    int32_t l = 0;
    for (int g = 0; g < 8; g++)
        l += wl->sc[2 * g + (k >= 4)] * sw_dp4a(wl->q[g], sw_ld32(xq + 32 * g + 4 * k), 0);
    *lane = l;
    *mins = wl->mn[2 * k] * x->bsums[2 * k] + wl->mn[2 * k + 1] * x->bsums[2 * k + 1];
}

SW_HD void sw_q2_k_step(const sw_wl_q2_k *wl, const sw_block_q8_k *x, int k, float *acc,
                        float *acc2)
{
    (void)acc2;
    int32_t lane, m;
    sw_q2_k_ints(wl, x, k, &lane, &m);
    *acc = fmaf(-x->d * wl->dmin, (float)m, *acc);
    *acc = fmaf(x->d * wl->d, (float)lane, *acc);
}

SW_HD float sw_q2_k_tiled(const sw_wl_q2_k *wl, const sw_block_q8_k *x, int32_t t, int32_t m,
                          float y)
{
    float r = wl->d * (float)t;
    r = fmaf(-wl->dmin, (float)m, r);
    return fmaf(r, x->d, y);
}

SW_HD float sw_q2_k_combine(const float acc[8], const float acc2[8])
{
    (void)acc2;
    return sw_hsum8(acc);
}

/* q3_K x q8_K */
typedef struct sw_wl_q3_k {
    uint32_t q[8]; // group g: lane k's four 3-bit quants (0..7, before the -4) as bytes
    int8_t sc[16]; // sub-block scales, -32..31
    float d;       // super-scale
} sw_wl_q3_k;

SW_HD void sw_q3_k_wl(const sw_block_q3_k *w, int k, sw_wl_q3_k *o)
{
    const uint32_t hm = sw_ld32(w->hmask + 4 * k);
    for (int g = 0; g < 8; g++)
        o->q[g] = sw_k23_low2(w->qs, g, k) | (((hm >> g) & 0x01010101u) << 2);
    for (int s = 0; s < 16; s++)
        o->sc[s] = (int8_t)sw_q3_k_scale(w->scales, s);
    o->d = sw_h2f(w->d);
}

SW_HD void sw_q3_k_ints(const sw_wl_q3_k *wl, const sw_block_q8_k *x, int k, int32_t *lane,
                        int32_t *mins)
{
    const uint8_t *xq = (const uint8_t *)x->qs;
    int32_t l = 0;
    for (int g = 0; g < 8; g++) {
        const uint32_t xv = sw_ld32(xq + 32 * g + 4 * k);
        l +=
            wl->sc[2 * g + (k >= 4)] * (sw_dp4a(wl->q[g], xv, 0) - 4 * sw_dp4a(0x01010101u, xv, 0));
    }
    *lane = l;
    *mins = 0;
}

SW_HD void sw_q3_k_step(const sw_wl_q3_k *wl, const sw_block_q8_k *x, int k, float *acc,
                        float *acc2)
{
    (void)acc2;
    int32_t lane, m;
    sw_q3_k_ints(wl, x, k, &lane, &m);
    *acc = fmaf(x->d * wl->d, (float)lane, *acc);
}

SW_HD float sw_q3_k_tiled(const sw_wl_q3_k *wl, const sw_block_q8_k *x, int32_t t, int32_t m,
                          float y)
{
    (void)m;
    return fmaf(wl->d * (float)t, x->d, y);
}

SW_HD float sw_q3_k_combine(const float acc[8], const float acc2[8])
{
    (void)acc2;
    return sw_hsum8(acc);
}

/* iq4_xs x q8_K */
typedef struct sw_wl_iq4_xs {
    uint32_t q[8]; // sub-block s: lane k's four levels as int8
    int8_t sc[8];  // sub-block scales, -32..31
    float d;       // super-scale
} sw_wl_iq4_xs;

SW_HD void sw_iq4_xs_wl(const sw_block_iq4_xs *w, int k, sw_wl_iq4_xs *o)
{
    for (int s = 0; s < 8; s++) {
        const uint32_t v = sw_ld32(w->qs + 16 * s + 4 * (k & 3));
        o->q[s] = sw_iq4nl_map4(k < 4 ? v : v >> 4);
        o->sc[s] = (int8_t)sw_iq4_xs_scale(w, s);
    }
    o->d = sw_h2f(w->d);
}

SW_HD void sw_iq4_xs_ints(const sw_wl_iq4_xs *wl, const sw_block_q8_k *x, int k, int32_t *lane,
                          int32_t *mins)
{
    const uint8_t *xq = (const uint8_t *)x->qs;
    int32_t l = 0;
    for (int s = 0; s < 8; s++)
        l += wl->sc[s] * sw_dp4a(wl->q[s], sw_ld32(xq + 32 * s + 4 * k), 0);
    *lane = l;
    *mins = 0;
}

SW_HD void sw_iq4_xs_step(const sw_wl_iq4_xs *wl, const sw_block_q8_k *x, int k, float *acc,
                          float *acc2)
{
    (void)acc2;
    int32_t lane, m;
    sw_iq4_xs_ints(wl, x, k, &lane, &m);
    *acc = fmaf(wl->d * x->d, (float)lane, *acc);
}

SW_HD float sw_iq4_xs_tiled(const sw_wl_iq4_xs *wl, const sw_block_q8_k *x, int32_t t, int32_t m,
                            float y)
{
    (void)m;
    return fmaf(wl->d * (float)t, x->d, y);
}

SW_HD float sw_iq4_xs_combine(const float acc[8], const float acc2[8])
{
    (void)acc2;
    return sw_hsum8(acc);
}

/* iq4_nl x q8_0 */
typedef struct sw_wl_iq4_nl {
    uint32_t q; // lane k's four levels as int8
    float d;    // weight block scale
} sw_wl_iq4_nl;

SW_HD void sw_iq4_nl_wl(const sw_block_iq4_nl *w, int k, sw_wl_iq4_nl *o)
{
    const uint32_t v = sw_ld32(w->qs + 4 * (k & 3));
    o->q = sw_iq4nl_map4(k < 4 ? v : v >> 4);
    o->d = sw_h2f(w->d);
}

SW_HD int32_t sw_iq4_nl_ints(const sw_wl_iq4_nl *wl, const sw_block_q8_0 *x, int k)
{
    return sw_dp4a(wl->q, sw_ld32((const uint8_t *)x->qs + 4 * k), 0);
}

/* One block into one chain (the caller picks acc or acc2 in the decode order). */
SW_HD void sw_iq4_nl_step(const sw_wl_iq4_nl *wl, const sw_block_q8_0 *x, int k, float *acc,
                          float *acc2)
{
    (void)acc2;
    *acc = fmaf(sw_h2f(x->d) * wl->d, (float)sw_iq4_nl_ints(wl, x, k), *acc);
}

/* The sgemm order: one chain. */
SW_HD float sw_iq4_nl_combine(const float acc[8], const float acc2[8])
{
    (void)acc2;
    return sw_hsum8(acc);
}

/* The decode order: the two chains' lanes added, summed, then the odd last
 * block (tail: 1 when there is one; d its d_x * d_w, t its lanes' total). */
SW_HD float sw_iq4_nl_combine2(const float acc[8], const float acc2[8], int tail, float d,
                               int32_t t)
{
    float a[8];
    for (int i = 0; i < 8; i++)
        a[i] = acc[i] + acc2[i];
    const float s = sw_hsum8(a);
    return tail ? fmaf(d, (float)t, s) : s;
}

#endif
