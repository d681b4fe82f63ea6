/*
 * quant_math.h - the arithmetic of every block format, written once for the
 * host and the GPU: compiled by the C compiler (quant.c, the tests) and by
 * nvcc (engine/cuda/), as inline __host__ __device__ functions.
 *
 *  - element conversions f16/bf16 <-> f32 (bit-exact, round to nearest even);
 *  - the activation quantizers (Q8_0, Q8_1, Q8_K), which quant.c uses too;
 *  - element j of a dequantized row of any type (the embedding lookup, the
 *    GPU's f16 prompt path);
 *  - the quantized dot products in the shape the GPU kernels run them: lane
 *    k (0..7) of GGML's 8-lane accumulation, one thread per lane, walking
 *    the blocks in order (sw_<fmt>_wl unpacks a weight block's share for
 *    lane k once, sw_<fmt>_step applies it to one activation row's block,
 *    sw_<fmt>_combine reduces the 8 lanes). The integer part of a lane is
 *    exact whatever the formulation; the float part is the same sequence of
 *    fused multiply-adds and additions as quant.c's kernels, so every row
 *    dot product is bit-identical to sw_vec_dot() (tests/unit/test_quant_math.c
 *    checks every type against both CPU kernel levels). For the K-quants,
 *    sw_<fmt>_ints gives a lane's integers alone and sw_<fmt>_tiled applies a
 *    block's totals in the order of sw_matmul_tiled (the GPU's prompt
 *    windows of 8 rows or more).
 *
 * The caller compiles without floating-point contraction (C11 mode with GCC;
 * nvcc with -fmad=false): a*b+c written here means two roundings, and every
 * fused operation is an explicit fmaf.
 *
 * Block layouts: quant_impl.h. Weight blocks in a GGUF row are 2-byte
 * aligned (every block size is even), so 32-bit words are read as two 16-bit
 * halves.
 */
#ifndef SW_QUANT_MATH_H
#define SW_QUANT_MATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "half.h"       // sw_h2f, sw_f2h, sw_bf2f, sw_f2bf and the SW_HD marker
#include "quant_impl.h" // block layouts

/* ---- bits and conversions ------------------------------------------------ */

/* The AVX2 horizontal sum of 8 lanes: ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7)). */
SW_HD float sw_hsum8(const float a[8])
{
    float r0 = a[4] + a[0], r1 = a[5] + a[1], r2 = a[6] + a[2], r3 = a[7] + a[3];
    return (r0 + r2) + (r1 + r3);
}

/* Four bytes at p (2-byte aligned), little-endian. */
SW_HD uint32_t sw_ld32(const uint8_t *p)
{
#if defined(__CUDA_ARCH__)
    const uint16_t *h = (const uint16_t *)(const void *)p;
    return (uint32_t)h[0] | (uint32_t)h[1] << 16;
#else
    uint16_t lo, hi;
    memcpy(&lo, p, 2);
    memcpy(&hi, p + 2, 2);
    return (uint32_t)lo | (uint32_t)hi << 16;
#endif
}

/* Sum of the four signed byte products of a and b, plus c (the GPU's dp4a). */
SW_HD int32_t sw_dp4a(uint32_t a, uint32_t b, int32_t c)
{
#if defined(__CUDA_ARCH__)
    return __dp4a((int)a, (int)b, c);
#else
    for (int i = 0; i < 4; i++)
        c += (int32_t)(int8_t)(uint8_t)(a >> (8 * i)) * (int32_t)(int8_t)(uint8_t)(b >> (8 * i));
    return c;
#endif
}

/* ---- activation quantizers (GGML's CPU path, bit for bit) ---------------------- */

/* Round to nearest, ties to even, for |v| < 2^22 (GGML's nearest_int). */
SW_HD int sw_nearest_int(float v)
{
    float t = v + 12582912.f;
    int32_t i;
    memcpy(&i, &t, sizeof i);
    return (i & 0x007fffff) - 0x00400000;
}

/* x * id rounded to nearest-even and saturated to int8 like cvtps+packs (NaN -> -128). */
SW_HD int sw_q8_round(float v)
{
    if (!(v >= -128.f))
        return -128;
    if (v > 127.f)
        return 127;
    return sw_nearest_int(v);
}

SW_HD float sw_absmax32(const float *x)
{
    float amax = 0.0f;
    for (int j = 0; j < SW_QK; j++) {
        float a = fabsf(x[j]);
        amax = a > amax ? a : amax;
    }
    return amax;
}

/* GGML's quantize_row_q8_0 on x86 for one block: d = amax/127, q = rne(x * (127/amax)). */
SW_HD void sw_quant_block_q8_0(const float *x, sw_block_q8_0 *y)
{
    float amax = sw_absmax32(x);
    float d = amax / 127.f;
    float id = amax != 0.0f ? 127.f / amax : 0.0f;
    y->d = sw_f2h(d);
    for (int j = 0; j < SW_QK; j++)
        y->qs[j] = (int8_t)sw_q8_round(x[j] * id);
}

/* As q8_0, plus s = f16(d * sum(q)) with the f32 d. */
SW_HD void sw_quant_block_q8_1(const float *x, sw_block_q8_1 *y)
{
    float amax = sw_absmax32(x);
    float d = amax / 127.f;
    float id = amax != 0.0f ? 127.f / amax : 0.0f;
    int sum = 0;
    y->d = sw_f2h(d);
    for (int j = 0; j < SW_QK; j++) {
        int q = sw_q8_round(x[j] * id);
        y->qs[j] = (int8_t)q;
        sum += q;
    }
    y->s = sw_f2h(d * (float)sum);
}

/* GGML's quantize_row_q8_K_ref for one 256-element block: scale from the
 * signed extreme, -127/max. */
SW_HD void sw_quant_block_q8_k(const float *x, sw_block_q8_k *y)
{
    float max = 0.0f, amax = 0.0f;
    for (int j = 0; j < SW_QK_K; j++) {
        float ax = fabsf(x[j]);
        if (ax > amax) {
            amax = ax;
            max = x[j];
        }
    }
    if (amax == 0.0f) {
        memset(y, 0, sizeof *y);
        return;
    }
    const float iscale = -127.f / max;
    for (int j = 0; j < SW_QK_K; j++) {
        int v = sw_nearest_int(iscale * x[j]);
        y->qs[j] = (int8_t)(v < 127 ? v : 127);
    }
    for (int g = 0; g < SW_QK_K / 16; g++) {
        int sum = 0;
        for (int j = 0; j < 16; j++)
            sum += y->qs[g * 16 + j];
        y->bsums[g] = (int16_t)sum;
    }
    y->d = 1 / iscale;
}

/* q2_K, q3_K, iq4_nl, iq4_xs: their elements and lanes (uses the helpers above). */
#include "quant_math_lowbit.h"

/* ---- dequantization: element j of a row ------------------------------------------ */

/* The 6-bit scale and minimum of sub-block j (0..7) of a q4_K/q5_K block as
 * floats multiplied by the super-scales: d * sc, dmin * mn. */
SW_HD void sw_k4_scale(const uint8_t *scales, int j, float d, float dmin, float *ds, float *dm)
{
    uint8_t sc, mn;
    sw_scale_min_k4(j, scales, &sc, &mn);
    *ds = d * sc;
    *dm = dmin * mn;
}

/* Element j of a row of type t (j < the row's length; the row is a whole
 * number of blocks). Computes exactly what sw_dequantize_row() stores. */
SW_HD float sw_deq_elem(enum sw_type t, const void *row, int64_t j)
{
    const uint8_t *r = (const uint8_t *)row;
    switch (t) {
    case SW_TYPE_F32: {
        float v;
        memcpy(&v, r + 4 * j, 4);
        return v;
    }
    case SW_TYPE_F16: {
        sw_f16 h;
        memcpy(&h, r + 2 * j, 2);
        return sw_h2f(h);
    }
    case SW_TYPE_BF16: {
        sw_bf16 h;
        memcpy(&h, r + 2 * j, 2);
        return sw_bf2f(h);
    }
    case SW_TYPE_Q4_0: {
        const sw_block_q4_0 *b = (const sw_block_q4_0 *)r + j / SW_QK;
        const int i = (int)(j % SW_QK);
        const int q = i < 16 ? (b->qs[i] & 0xF) : (b->qs[i - 16] >> 4);
        return (float)(q - 8) * sw_h2f(b->d);
    }
    case SW_TYPE_Q4_1: {
        const sw_block_q4_1 *b = (const sw_block_q4_1 *)r + j / SW_QK;
        const int i = (int)(j % SW_QK);
        const int q = i < 16 ? (b->qs[i] & 0xF) : (b->qs[i - 16] >> 4);
        return (float)q * sw_h2f(b->d) + sw_h2f(b->m);
    }
    case SW_TYPE_Q5_0:
    case SW_TYPE_Q5_1: {
        const int i = (int)(j % SW_QK);
        const uint8_t *qs, *qhp;
        float d, m = 0.0f;
        int off;
        if (t == SW_TYPE_Q5_0) {
            const sw_block_q5_0 *b = (const sw_block_q5_0 *)r + j / SW_QK;
            qs = b->qs;
            qhp = b->qh;
            d = sw_h2f(b->d);
            off = 16;
        } else {
            const sw_block_q5_1 *b = (const sw_block_q5_1 *)r + j / SW_QK;
            qs = b->qs;
            qhp = b->qh;
            d = sw_h2f(b->d);
            m = sw_h2f(b->m);
            off = 0;
        }
        const uint32_t qh = (uint32_t)qhp[0] | (uint32_t)qhp[1] << 8 | (uint32_t)qhp[2] << 16 |
                            (uint32_t)qhp[3] << 24;
        const int lo = i < 16 ? (qs[i] & 0xF) : (qs[i - 16] >> 4);
        const int q = lo | (int)((qh >> i) & 1u) << 4;
        if (t == SW_TYPE_Q5_0)
            return (float)(q - off) * d;
        return (float)q * d + m;
    }
    case SW_TYPE_Q8_0: {
        const sw_block_q8_0 *b = (const sw_block_q8_0 *)r + j / SW_QK;
        return (float)b->qs[j % SW_QK] * sw_h2f(b->d);
    }
    case SW_TYPE_Q8_1: {
        const sw_block_q8_1 *b = (const sw_block_q8_1 *)r + j / SW_QK;
        return (float)b->qs[j % SW_QK] * sw_h2f(b->d);
    }
    case SW_TYPE_Q4_K:
    case SW_TYPE_Q5_K: {
        const int i = (int)(j % SW_QK_K), c = i / 64, hi = (i / 32) & 1, l = i % 32;
        const uint8_t *scales, *qs;
        float d, dmin;
        int bit5 = 0;
        if (t == SW_TYPE_Q4_K) {
            const sw_block_q4_k *b = (const sw_block_q4_k *)r + j / SW_QK_K;
            scales = b->scales;
            qs = b->qs;
            d = sw_h2f(b->d);
            dmin = sw_h2f(b->dmin);
        } else {
            const sw_block_q5_k *b = (const sw_block_q5_k *)r + j / SW_QK_K;
            scales = b->scales;
            qs = b->qs;
            d = sw_h2f(b->d);
            dmin = sw_h2f(b->dmin);
            bit5 = (b->qh[l] >> (2 * c + hi)) & 1 ? 16 : 0;
        }
        float ds, dm;
        sw_k4_scale(scales, 2 * c + hi, d, dmin, &ds, &dm);
        const int q = (hi ? qs[32 * c + l] >> 4 : qs[32 * c + l] & 0xF) + bit5;
        return ds * (float)q - dm;
    }
    case SW_TYPE_Q6_K: {
        const sw_block_q6_k *b = (const sw_block_q6_k *)r + j / SW_QK_K;
        const int i = (int)(j % SW_QK_K), h = i / 128, w = i % 128, part = w / 32, l = w % 32;
        const uint8_t *ql = b->ql + 64 * h, *qh = b->qh + 32 * h;
        const int8_t *sc = b->scales + 8 * h;
        const int lo = part == 0   ? ql[l] & 0xF
                       : part == 1 ? ql[l + 32] & 0xF
                       : part == 2 ? ql[l] >> 4
                                   : ql[l + 32] >> 4;
        const int q = (lo | ((qh[l] >> (2 * part)) & 3) << 4) - 32;
        return sw_h2f(b->d) * (float)sc[l / 16 + 2 * part] * (float)q;
    }
    case SW_TYPE_Q8_K: {
        const sw_block_q8_k *b = (const sw_block_q8_k *)r + j / SW_QK_K;
        return b->d * (float)b->qs[j % SW_QK_K];
    }
    case SW_TYPE_Q2_K:
        return sw_q2_k_elem((const sw_block_q2_k *)r + j / SW_QK_K, (int)(j % SW_QK_K));
    case SW_TYPE_Q3_K:
        return sw_q3_k_elem((const sw_block_q3_k *)r + j / SW_QK_K, (int)(j % SW_QK_K));
    case SW_TYPE_IQ4_NL:
        return sw_iq4_nl_elem((const sw_block_iq4_nl *)r + j / SW_QK, (int)(j % SW_QK));
    case SW_TYPE_IQ4_XS:
        return sw_iq4_xs_elem((const sw_block_iq4_xs *)r + j / SW_QK_K, (int)(j % SW_QK_K));
    default:
        return 0.0f; // the loader admits only the types above
    }
}

/* ---- quantized dot products, one lane per thread --------------------------------------
 *
 * For a weight row w and an activation row x of nb blocks, lane k (0..7)
 * runs for b = 0 .. nb-1:
 *
 *     sw_<fmt>_wl(&w[b], k, &wl);  sw_<fmt>_step(&wl, &x[b], k, &acc, &acc2);
 *
 * from acc = acc2 = 0, and sw_<fmt>_combine(acc of lanes 0..7, acc2 of lanes
 * 0..7) is the dot product. acc2 holds the formats' second chain (the minimum
 * terms of q4_1/q5_1/q5_K on lane 0, the four of q4_K on lanes 0..3); the
 * other lanes leave it 0. Lane k covers elements 4k..4k+3 of every 32-element
 * group of the block, as GGML's AVX2 lanes do. */

/* Bytes 0..15 (low nibbles) or the high nibbles of a 4-byte word, as bytes. */
SW_HD uint32_t sw_nib_lo(uint32_t v)
{
    return v & 0x0F0F0F0Fu;
}

SW_HD uint32_t sw_nib_hi(uint32_t v)
{
    return (v >> 4) & 0x0F0F0F0Fu;
}

/* The 4 bits (bits0..3 of b) spread to bit 4 of four bytes. */
SW_HD uint32_t sw_bit4x(uint32_t b)
{
    return ((b & 1u) << 4) | ((b & 2u) << 11) | ((b & 4u) << 18) | ((b & 8u) << 25);
}

/* q4_0 x q8_0 */
typedef struct sw_wl_q4_0 {
    uint32_t q; // four 4-bit quants of lane k, as bytes 0..15
    float d;    // weight block scale
} sw_wl_q4_0;

SW_HD void sw_q4_0_wl(const sw_block_q4_0 *w, int k, sw_wl_q4_0 *o)
{
    const uint32_t v = sw_ld32(w->qs + 4 * (k & 3));
    o->q = k < 4 ? sw_nib_lo(v) : sw_nib_hi(v);
    o->d = sw_h2f(w->d);
}

SW_HD void sw_q4_0_step(const sw_wl_q4_0 *wl, const sw_block_q8_0 *x, int k, float *acc,
                        float *acc2)
{
    (void)acc2;
    const uint32_t xv = sw_ld32((const uint8_t *)x->qs + 4 * k);
    const int32_t lane = sw_dp4a(wl->q, xv, 0) - 8 * sw_dp4a(0x01010101u, xv, 0);
    *acc = fmaf(wl->d * sw_h2f(x->d), (float)lane, *acc);
}

SW_HD float sw_q4_0_combine(const float acc[8], const float acc2[8])
{
    (void)acc2;
    return sw_hsum8(acc);
}

/* q4_1 x q8_1 */
typedef struct sw_wl_q4_1 {
    uint32_t q; // four 4-bit quants of lane k
    float d;    // weight block scale
    float m;    // weight block minimum
} sw_wl_q4_1;

SW_HD void sw_q4_1_wl(const sw_block_q4_1 *w, int k, sw_wl_q4_1 *o)
{
    const uint32_t v = sw_ld32(w->qs + 4 * (k & 3));
    o->q = k < 4 ? sw_nib_lo(v) : sw_nib_hi(v);
    o->d = sw_h2f(w->d);
    o->m = sw_h2f(w->m);
}

SW_HD void sw_q4_1_step(const sw_wl_q4_1 *wl, const sw_block_q8_1 *x, int k, float *acc,
                        float *acc2)
{
    const uint32_t xv = sw_ld32((const uint8_t *)x->qs + 4 * k);
    const int32_t lane = sw_dp4a(wl->q, xv, 0);
    if (k == 0)
        *acc2 = fmaf(wl->m, sw_h2f(x->s), *acc2);
    *acc = fmaf(wl->d * sw_h2f(x->d), (float)lane, *acc);
}

SW_HD float sw_q4_1_combine(const float acc[8], const float acc2[8])
{
    return sw_hsum8(acc) + acc2[0];
}

/* q5_0 x q8_0 and q5_1 x q8_1 */
typedef struct sw_wl_q5 {
    uint32_t q; // four 5-bit quants of lane k, as bytes 0..31
    float d;    // weight block scale
    float m;    // weight block minimum (q5_1)
} sw_wl_q5;

SW_HD uint32_t sw_q5_quants(const uint8_t *qs, const uint8_t *qhp, int k)
{
    const uint32_t v = sw_ld32(qs + 4 * (k & 3));
    const uint32_t qh = sw_ld32(qhp);
    return (k < 4 ? sw_nib_lo(v) : sw_nib_hi(v)) | sw_bit4x((qh >> (4 * k)) & 0xFu);
}

SW_HD void sw_q5_0_wl(const sw_block_q5_0 *w, int k, sw_wl_q5 *o)
{
    o->q = sw_q5_quants(w->qs, w->qh, k);
    o->d = sw_h2f(w->d);
    o->m = 0.0f;
}

SW_HD void sw_q5_0_step(const sw_wl_q5 *wl, const sw_block_q8_0 *x, int k, float *acc, float *acc2)
{
    (void)acc2;
    const uint32_t xv = sw_ld32((const uint8_t *)x->qs + 4 * k);
    const int32_t lane = sw_dp4a(wl->q, xv, 0) - 16 * sw_dp4a(0x01010101u, xv, 0);
    *acc = fmaf(wl->d * sw_h2f(x->d), (float)lane, *acc);
}

SW_HD float sw_q5_0_combine(const float acc[8], const float acc2[8])
{
    (void)acc2;
    return sw_hsum8(acc);
}

SW_HD void sw_q5_1_wl(const sw_block_q5_1 *w, int k, sw_wl_q5 *o)
{
    o->q = sw_q5_quants(w->qs, w->qh, k);
    o->d = sw_h2f(w->d);
    o->m = sw_h2f(w->m);
}

SW_HD void sw_q5_1_step(const sw_wl_q5 *wl, const sw_block_q8_1 *x, int k, float *acc, float *acc2)
{
    const uint32_t xv = sw_ld32((const uint8_t *)x->qs + 4 * k);
    const int32_t lane = sw_dp4a(wl->q, xv, 0);
    if (k == 0)
        *acc2 = fmaf(wl->m, sw_h2f(x->s), *acc2);
    *acc = fmaf((float)lane, wl->d * sw_h2f(x->d), *acc);
}

SW_HD float sw_q5_1_combine(const float acc[8], const float acc2[8])
{
    return sw_hsum8(acc) + acc2[0];
}

/* q8_0 x q8_0 */
typedef struct sw_wl_q8_0 {
    uint32_t q; // four int8 quants of lane k
    float d;    // weight block scale
} sw_wl_q8_0;

SW_HD void sw_q8_0_wl(const sw_block_q8_0 *w, int k, sw_wl_q8_0 *o)
{
    o->q = sw_ld32((const uint8_t *)w->qs + 4 * k);
    o->d = sw_h2f(w->d);
}

SW_HD void sw_q8_0_step(const sw_wl_q8_0 *wl, const sw_block_q8_0 *x, int k, float *acc,
                        float *acc2)
{
    (void)acc2;
    const uint32_t xv = sw_ld32((const uint8_t *)x->qs + 4 * k);
    *acc = fmaf(wl->d * sw_h2f(x->d), (float)sw_dp4a(wl->q, xv, 0), *acc);
}

SW_HD float sw_q8_0_combine(const float acc[8], const float acc2[8])
{
    (void)acc2;
    return sw_hsum8(acc);
}

/* q4_K x q8_K: lane k reads 4 bytes of each 64-element chunk (low nibbles =
 * the chunk's first 32 elements, high = the next 32). */
typedef struct sw_wl_q4_k {
    uint32_t q[4]; // chunk c: four bytes holding lane k's low and high nibbles
    uint8_t sc[8]; // 6-bit sub-block scales
    uint8_t mn[8]; // 6-bit sub-block minimums
    float d, dmin; // super-scales
} sw_wl_q4_k;

SW_HD void sw_q4_k_wl(const sw_block_q4_k *w, int k, sw_wl_q4_k *o)
{
    for (int c = 0; c < 4; c++)
        o->q[c] = sw_ld32(w->qs + 32 * c + 4 * k);
    for (int j = 0; j < 8; j++)
        sw_scale_min_k4(j, w->scales, &o->sc[j], &o->mn[j]);
    o->d = sw_h2f(w->d);
    o->dmin = sw_h2f(w->dmin);
}

/* The integers of lane k of a block pair: the quants' dot product with the
 * sub-block scales (*lane) and, for k < 4, the term of minimum pair k (*mins,
 * 0 on the other lanes). */
SW_HD void sw_q4_k_ints(const sw_wl_q4_k *wl, const sw_block_q8_k *x, int k, int32_t *lane,
                        int32_t *mins)
{
    const uint8_t *xq = (const uint8_t *)x->qs;
    int32_t l = 0;
    for (int c = 0; c < 4; c++) {
        l += wl->sc[2 * c] * sw_dp4a(sw_nib_lo(wl->q[c]), sw_ld32(xq + 64 * c + 4 * k), 0);
        l += wl->sc[2 * c + 1] * sw_dp4a(sw_nib_hi(wl->q[c]), sw_ld32(xq + 64 * c + 32 + 4 * k), 0);
    }
    *lane = l;
    *mins = 0;
    if (k < 4) {
        const int m = k;
        *mins = wl->mn[2 * m] * (x->bsums[4 * m] + x->bsums[4 * m + 1]) +
                wl->mn[2 * m + 1] * (x->bsums[4 * m + 2] + x->bsums[4 * m + 3]);
    }
}

SW_HD void sw_q4_k_step(const sw_wl_q4_k *wl, const sw_block_q8_k *x, int k, float *acc,
                        float *acc2)
{
    int32_t lane, p;
    sw_q4_k_ints(wl, x, k, &lane, &p);
    if (k < 4)
        *acc2 = fmaf(-x->d * wl->dmin, (float)p, *acc2);
    *acc = fmaf(x->d * wl->d, (float)lane, *acc);
}

/* The tiled order (sw_matmul_tiled) of one block from the totals of its 8
 * lanes' integers (t of the lanes, m of the minimums): y + (d_w t - dmin_w m) d_x
 * with the CPU's roundings. */
SW_HD float sw_q4_k_tiled(const sw_wl_q4_k *wl, const sw_block_q8_k *x, int32_t t, int32_t m,
                          float y)
{
    float r = wl->d * (float)t;
    r = fmaf(-wl->dmin, (float)m, r);
    return fmaf(r, x->d, y);
}

SW_HD float sw_q4_k_combine(const float acc[8], const float acc2[8])
{
    return sw_hsum8(acc) + ((acc2[0] + acc2[2]) + (acc2[1] + acc2[3]));
}

/* q5_K x q8_K: as q4_K plus the fifth bits. */
typedef struct sw_wl_q5_k {
    uint32_t q[4]; // chunk c: lane k's low 4 bits, low and high nibbles
    uint32_t qh;   // qh[4k .. 4k+3]: bit 2c = fifth bit in chunk c low, 2c+1 high
    uint8_t sc[8]; // 6-bit sub-block scales
    uint8_t mn[8]; // 6-bit sub-block minimums
    float d, dmin; // super-scales
} sw_wl_q5_k;

SW_HD void sw_q5_k_wl(const sw_block_q5_k *w, int k, sw_wl_q5_k *o)
{
    for (int c = 0; c < 4; c++)
        o->q[c] = sw_ld32(w->qs + 32 * c + 4 * k);
    o->qh = sw_ld32(w->qh + 4 * k);
    for (int j = 0; j < 8; j++)
        sw_scale_min_k4(j, w->scales, &o->sc[j], &o->mn[j]);
    o->d = sw_h2f(w->d);
    o->dmin = sw_h2f(w->dmin);
}

/* As sw_q4_k_ints; lane 0 holds the whole minimums total. */
SW_HD void sw_q5_k_ints(const sw_wl_q5_k *wl, const sw_block_q8_k *x, int k, int32_t *lane,
                        int32_t *mins)
{
    const uint8_t *xq = (const uint8_t *)x->qs;
    int32_t l = 0;
    for (int c = 0; c < 4; c++) {
        const uint32_t lo = sw_nib_lo(wl->q[c]) | (((wl->qh >> (2 * c)) & 0x01010101u) << 4);
        const uint32_t hi = sw_nib_hi(wl->q[c]) | (((wl->qh >> (2 * c + 1)) & 0x01010101u) << 4);
        l += wl->sc[2 * c] * sw_dp4a(lo, sw_ld32(xq + 64 * c + 4 * k), 0);
        l += wl->sc[2 * c + 1] * sw_dp4a(hi, sw_ld32(xq + 64 * c + 32 + 4 * k), 0);
    }
    *lane = l;
    *mins = 0;
    if (k == 0)
        for (int j = 0; j < 8; j++)
            *mins += wl->mn[j] * (x->bsums[2 * j] + x->bsums[2 * j + 1]);
}

SW_HD void sw_q5_k_step(const sw_wl_q5_k *wl, const sw_block_q8_k *x, int k, float *acc,
                        float *acc2)
{
    int32_t lane, p;
    sw_q5_k_ints(wl, x, k, &lane, &p);
    if (k == 0)
        *acc2 = fmaf(-x->d * wl->dmin, (float)p, *acc2);
    *acc = fmaf(x->d * wl->d, (float)lane, *acc);
}

SW_HD float sw_q5_k_tiled(const sw_wl_q5_k *wl, const sw_block_q8_k *x, int32_t t, int32_t m,
                          float y)
{
    float r = wl->d * (float)t;
    r = fmaf(-wl->dmin, (float)m, r);
    return fmaf(r, x->d, y);
}

SW_HD float sw_q5_k_combine(const float acc[8], const float acc2[8])
{
    return sw_hsum8(acc) + acc2[0];
}

/* q6_K x q8_K: lane k covers elements 4k..4k+3 of each of the 8 32-element
 * chunks; the first 16 of a chunk use one scale, the next 16 the other, so
 * lanes 0..3 and 4..7 use different scales. */
typedef struct sw_wl_q6_k {
    uint32_t q[2][4]; // half h, chunk c: lane k's four 6-bit quants (0..63) as bytes
    int8_t sc[16];    // signed scales
    float d;          // super-scale
} sw_wl_q6_k;

SW_HD void sw_q6_k_wl(const sw_block_q6_k *w, int k, sw_wl_q6_k *o)
{
    for (int h = 0; h < 2; h++) {
        const uint32_t l0 = sw_ld32(w->ql + 64 * h + 4 * k);
        const uint32_t l1 = sw_ld32(w->ql + 64 * h + 32 + 4 * k);
        const uint32_t qh = sw_ld32(w->qh + 32 * h + 4 * k);
        o->q[h][0] = sw_nib_lo(l0) | ((qh & 0x03030303u) << 4);
        o->q[h][1] = sw_nib_lo(l1) | (((qh >> 2) & 0x03030303u) << 4);
        o->q[h][2] = sw_nib_hi(l0) | (((qh >> 4) & 0x03030303u) << 4);
        o->q[h][3] = sw_nib_hi(l1) | (((qh >> 6) & 0x03030303u) << 4);
    }
    memcpy(o->sc, w->scales, 16);
    o->d = sw_h2f(w->d);
}

/* As sw_q4_k_ints; q6_K has no minimums (the -32 offset is in the lane). */
SW_HD void sw_q6_k_ints(const sw_wl_q6_k *wl, const sw_block_q8_k *x, int k, int32_t *lane,
                        int32_t *mins)
{
    const uint8_t *xq = (const uint8_t *)x->qs;
    int32_t l = 0;
    for (int h = 0; h < 2; h++)
        for (int c = 0; c < 4; c++)
            l += wl->sc[8 * h + 2 * c + (k >= 4)] *
                 sw_dp4a(wl->q[h][c], sw_ld32(xq + 128 * h + 32 * c + 4 * k), 0);
    l -= 32 * (x->bsums[2 * k] * wl->sc[2 * k] + x->bsums[2 * k + 1] * wl->sc[2 * k + 1]);
    *lane = l;
    *mins = 0;
}

SW_HD void sw_q6_k_step(const sw_wl_q6_k *wl, const sw_block_q8_k *x, int k, float *acc,
                        float *acc2)
{
    (void)acc2;
    int32_t lane, p;
    sw_q6_k_ints(wl, x, k, &lane, &p);
    *acc = fmaf(x->d * wl->d, (float)lane, *acc);
}

SW_HD float sw_q6_k_tiled(const sw_wl_q6_k *wl, const sw_block_q8_k *x, int32_t t, int32_t m,
                          float y)
{
    (void)m;
    return fmaf(wl->d * (float)t, x->d, y);
}

SW_HD float sw_q6_k_combine(const float acc[8], const float acc2[8])
{
    (void)acc2;
    return sw_hsum8(acc);
}

/* ---- f16 / bf16 / f32 weights: 32 lanes, element i+t on lane t ------------------------------- */

/* Lane t (0..31) of GGML's 4x8 accumulators over the first np = n & ~31 elements. */
SW_HD float sw_f16_lane(const sw_f16 *w, const sw_f16 *x, int64_t np, int t)
{
    float acc = 0.0f;
    for (int64_t i = t; i < np; i += 32)
        acc = fmaf(sw_h2f(w[i]), sw_h2f(x[i]), acc);
    return acc;
}

SW_HD float sw_bf16_lane(const sw_bf16 *w, const sw_bf16 *x, int64_t np, int t)
{
    float acc = 0.0f;
    for (int64_t i = t; i < np; i += 32)
        acc = fmaf(sw_bf2f(w[i]), sw_bf2f(x[i]), acc);
    return acc;
}

SW_HD float sw_f32_lane(const float *w, const float *x, int64_t np, int t)
{
    float acc = 0.0f;
    for (int64_t i = t; i < np; i += 32)
        acc = fmaf(w[i], x[i], acc);
    return acc;
}

/* GGML's reduction of the 4x8 accumulators (acc[8j + l]): (a0+a2)+(a1+a3) per
 * lane, then pairs 4 apart, then ((0+1)+(2+3)). */
SW_HD float sw_reduce4x8(const float acc[32])
{
    float t[8];
    for (int l = 0; l < 8; l++)
        t[l] = (acc[l] + acc[16 + l]) + (acc[8 + l] + acc[24 + l]);
    float t0[4];
    for (int l = 0; l < 4; l++)
        t0[l] = t[l] + t[l + 4];
    return (t0[0] + t0[1]) + (t0[2] + t0[3]);
}

SW_HD float sw_f16_combine(const float acc[32], const sw_f16 *w, const sw_f16 *x, int64_t n)
{
    double sum = sw_reduce4x8(acc);
    for (int64_t i = n & ~(int64_t)31; i < n; i++)
        sum += (double)(sw_h2f(w[i]) * sw_h2f(x[i]));
    return (float)sum;
}

SW_HD float sw_bf16_combine(const float acc[32], const sw_bf16 *w, const sw_bf16 *x, int64_t n)
{
    float t[8];
    for (int l = 0; l < 8; l++)
        t[l] = (acc[l] + acc[16 + l]) + (acc[8 + l] + acc[24 + l]);
    double sum = sw_hsum8(t);
    for (int64_t i = n & ~(int64_t)31; i < n; i++)
        sum += (double)(sw_bf2f(w[i]) * sw_bf2f(x[i]));
    return (float)sum;
}

/* The f32 tail as GCC compiles GGML's: groups of 8 and 4 unfused, the last 0..3 fused. */
SW_HD float sw_f32_combine(const float acc[32], const float *w, const float *x, int64_t n)
{
    float sum = sw_reduce4x8(acc);
    int64_t i = n & ~(int64_t)31;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++)
            sum += w[i + k] * x[i + k];
    if (n - i >= 4) {
        for (int k = 0; k < 4; k++)
            sum += w[i + k] * x[i + k];
        i += 4;
    }
    for (; i < n; i++)
        sum = fmaf(w[i], x[i], sum);
    return sum;
}

#endif
