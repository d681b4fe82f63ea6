/*
 * quant.c - element conversions, row (de)quantizers, the portable scalar dot
 * products and the start-up choice between scalar and AVX2 kernels.
 *
 * The scalar kernels compute exactly what GGML's AVX2 kernels compute, in the
 * same order: per block an exact integer dot product split into 8 lanes (lane
 * k holds the elements whose index mod 32 is 4k..4k+3), then per lane a fused
 * multiply-add (fmaf) with the block scale, then the same horizontal sum. So
 * both kernel levels give the same bits; the scalar level is just slower
 * (fmaf is a library call on CPUs without FMA).
 *
 * The activation quantizers (Q8_0, Q8_1, Q8_K) are exact re-implementations of
 * GGML's CPU path and give the same bits at every kernel level.
 */
#include "quant.h"
#include "log.h"
#include "quant_impl.h"
#include "quant_math.h"

#include <float.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
#endif
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* The kernels spell out where GGML's arithmetic fuses a multiply-add (fmaf,
 * _mm256_fmadd_ps) and where it does not; the compiler must not fuse others. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__) && !defined(__STRICT_ANSI__)
#error "build with -std=c11: in GNU mode GCC fuses a*b+c, which changes the results"
#endif

_Static_assert(sizeof(sw_block_q4_0) == 18, "q4_0 block size");
_Static_assert(sizeof(sw_block_q4_1) == 20, "q4_1 block size");
_Static_assert(sizeof(sw_block_q5_0) == 22, "q5_0 block size");
_Static_assert(sizeof(sw_block_q5_1) == 24, "q5_1 block size");
_Static_assert(sizeof(sw_block_q8_0) == 34, "q8_0 block size");
_Static_assert(sizeof(sw_block_q8_1) == 36, "q8_1 block size");
_Static_assert(sizeof(sw_block_q4_k) == 144, "q4_K block size");
_Static_assert(sizeof(sw_block_q5_k) == 176, "q5_K block size");
_Static_assert(sizeof(sw_block_q6_k) == 210, "q6_K block size");
_Static_assert(sizeof(sw_block_q8_k) == 292, "q8_K block size");

/* ---- element conversions (the shared host/device code of quant_math.h) ---- */

float sw_f16_to_f32(sw_f16 h)
{
    return sw_h2f(h);
}

sw_f16 sw_f32_to_f16(float f)
{
    return sw_f2h(f);
}

float sw_bf16_to_f32(sw_bf16 h)
{
    return sw_bf2f(h);
}

sw_bf16 sw_f32_to_bf16(float f)
{
    return sw_f2bf(f);
}

static inline uint32_t s_load_u32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

#define F16(h) sw_f16_to_f32(h)

/* ---- dequantization ----------------------------------------------------- */

static void s_deq_q4_0(const sw_block_q4_0 *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += SW_QK) {
        float d = F16(b[i].d);
        for (int j = 0; j < 16; j++) {
            y[j] = (float)((b[i].qs[j] & 0xF) - 8) * d;
            y[j + 16] = (float)((b[i].qs[j] >> 4) - 8) * d;
        }
    }
}

static void s_deq_q4_1(const sw_block_q4_1 *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += SW_QK) {
        float d = F16(b[i].d), m = F16(b[i].m);
        for (int j = 0; j < 16; j++) {
            y[j] = (float)(b[i].qs[j] & 0xF) * d + m;
            y[j + 16] = (float)(b[i].qs[j] >> 4) * d + m;
        }
    }
}

static void s_deq_q5_0(const sw_block_q5_0 *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += SW_QK) {
        float d = F16(b[i].d);
        uint32_t qh = s_load_u32(b[i].qh);
        for (int j = 0; j < 16; j++) {
            int h0 = (int)((qh >> j) & 1u) << 4, h1 = (int)((qh >> (j + 16)) & 1u) << 4;
            y[j] = (float)(((b[i].qs[j] & 0xF) | h0) - 16) * d;
            y[j + 16] = (float)(((b[i].qs[j] >> 4) | h1) - 16) * d;
        }
    }
}

static void s_deq_q5_1(const sw_block_q5_1 *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += SW_QK) {
        float d = F16(b[i].d), m = F16(b[i].m);
        uint32_t qh = s_load_u32(b[i].qh);
        for (int j = 0; j < 16; j++) {
            int h0 = (int)((qh >> j) & 1u) << 4, h1 = (int)((qh >> (j + 16)) & 1u) << 4;
            y[j] = (float)((b[i].qs[j] & 0xF) | h0) * d + m;
            y[j + 16] = (float)((b[i].qs[j] >> 4) | h1) * d + m;
        }
    }
}

static void s_deq_q8_0(const sw_block_q8_0 *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += SW_QK) {
        float d = F16(b[i].d);
        for (int j = 0; j < SW_QK; j++)
            y[j] = (float)b[i].qs[j] * d;
    }
}

static void s_deq_q8_1(const sw_block_q8_1 *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += SW_QK) {
        float d = F16(b[i].d);
        for (int j = 0; j < SW_QK; j++)
            y[j] = (float)b[i].qs[j] * d;
    }
}

static void s_deq_q4_k(const sw_block_q4_k *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++) {
        float d = F16(b[i].d), dmin = F16(b[i].dmin);
        const uint8_t *q = b[i].qs;
        for (int c = 0; c < 4; c++, q += 32) {
            uint8_t sc, mn;
            sw_scale_min_k4(2 * c, b[i].scales, &sc, &mn);
            float d1 = d * sc, m1 = dmin * mn;
            sw_scale_min_k4(2 * c + 1, b[i].scales, &sc, &mn);
            float d2 = d * sc, m2 = dmin * mn;
            for (int l = 0; l < 32; l++)
                *y++ = d1 * (float)(q[l] & 0xF) - m1;
            for (int l = 0; l < 32; l++)
                *y++ = d2 * (float)(q[l] >> 4) - m2;
        }
    }
}

static void s_deq_q5_k(const sw_block_q5_k *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++) {
        float d = F16(b[i].d), dmin = F16(b[i].dmin);
        const uint8_t *ql = b[i].qs, *qh = b[i].qh;
        unsigned u1 = 1, u2 = 2;
        for (int c = 0; c < 4; c++, ql += 32, u1 <<= 2, u2 <<= 2) {
            uint8_t sc, mn;
            sw_scale_min_k4(2 * c, b[i].scales, &sc, &mn);
            float d1 = d * sc, m1 = dmin * mn;
            sw_scale_min_k4(2 * c + 1, b[i].scales, &sc, &mn);
            float d2 = d * sc, m2 = dmin * mn;
            for (int l = 0; l < 32; l++)
                *y++ = d1 * (float)((ql[l] & 0xF) + ((qh[l] & u1) ? 16 : 0)) - m1;
            for (int l = 0; l < 32; l++)
                *y++ = d2 * (float)((ql[l] >> 4) + ((qh[l] & u2) ? 16 : 0)) - m2;
        }
    }
}

static void s_deq_q6_k(const sw_block_q6_k *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++) {
        float d = F16(b[i].d);
        const uint8_t *ql = b[i].ql, *qh = b[i].qh;
        const int8_t *sc = b[i].scales;
        for (int h = 0; h < 2; h++, y += 128, ql += 64, qh += 32, sc += 8) {
            for (int l = 0; l < 32; l++) {
                int is = l / 16;
                int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
                int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l] = d * (float)sc[is + 0] * (float)q1;
                y[l + 32] = d * (float)sc[is + 2] * (float)q2;
                y[l + 64] = d * (float)sc[is + 4] * (float)q3;
                y[l + 96] = d * (float)sc[is + 6] * (float)q4;
            }
        }
    }
}

static void s_deq_q8_k(const sw_block_q8_k *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += SW_QK_K)
        for (int j = 0; j < SW_QK_K; j++)
            y[j] = b[i].d * (float)b[i].qs[j];
}

void sw_dequantize_row(enum sw_type t, const void *src, float *dst, int64_t n)
{
    switch (t) {
    case SW_TYPE_F32:
        memcpy(dst, src, (size_t)n * sizeof(float));
        break;
    case SW_TYPE_F16: {
        const sw_f16 *h = src;
        for (int64_t i = 0; i < n; i++)
            dst[i] = sw_f16_to_f32(h[i]);
        break;
    }
    case SW_TYPE_BF16: {
        const sw_bf16 *h = src;
        for (int64_t i = 0; i < n; i++)
            dst[i] = sw_bf16_to_f32(h[i]);
        break;
    }
    case SW_TYPE_Q4_0:
        s_deq_q4_0(src, dst, n / SW_QK);
        break;
    case SW_TYPE_Q4_1:
        s_deq_q4_1(src, dst, n / SW_QK);
        break;
    case SW_TYPE_Q5_0:
        s_deq_q5_0(src, dst, n / SW_QK);
        break;
    case SW_TYPE_Q5_1:
        s_deq_q5_1(src, dst, n / SW_QK);
        break;
    case SW_TYPE_Q8_0:
        s_deq_q8_0(src, dst, n / SW_QK);
        break;
    case SW_TYPE_Q8_1:
        s_deq_q8_1(src, dst, n / SW_QK);
        break;
    case SW_TYPE_Q4_K:
        s_deq_q4_k(src, dst, n / SW_QK_K);
        break;
    case SW_TYPE_Q5_K:
        s_deq_q5_k(src, dst, n / SW_QK_K);
        break;
    case SW_TYPE_Q6_K:
        s_deq_q6_k(src, dst, n / SW_QK_K);
        break;
    case SW_TYPE_Q8_K:
        s_deq_q8_k(src, dst, n / SW_QK_K);
        break;
    default:
        // Unsupported types never reach here: the loader rejects them.
        if (sw_dequantize_lowbit(t, src, dst, n) != 0)
            abort();
    }
}

/* ---- quantization ------------------------------------------------------- */

/* The activation quantizers: one block at a time with quant_math.h's code. */
static void s_quant_q8_0(const float *x, sw_block_q8_0 *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++)
        sw_quant_block_q8_0(x + i * SW_QK, &y[i]);
}

static void s_quant_q8_1(const float *x, sw_block_q8_1 *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++)
        sw_quant_block_q8_1(x + i * SW_QK, &y[i]);
}

static void s_quant_q8_k(const float *x, sw_block_q8_k *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++)
        sw_quant_block_q8_k(x + i * SW_QK_K, &y[i]);
}

/* GGML's reference q4_0 weight quantizer (d = max / -8). */
static void s_quant_q4_0(const float *x, sw_block_q4_0 *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += SW_QK) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < SW_QK; j++) {
            if (amax < fabsf(x[j])) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        }
        const float d = max / -8;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = sw_f32_to_f16(d);
        for (int j = 0; j < 16; j++) {
            int q0 = (int)(x[j] * id + 8.5f), q1 = (int)(x[j + 16] * id + 8.5f);
            q0 = q0 < 15 ? q0 : 15;
            q1 = q1 < 15 ? q1 : 15;
            y[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

/* GGML's reference q4_1 weight quantizer (d = (max - min) / 15, m = min). */
static void s_quant_q4_1(const float *x, sw_block_q4_1 *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += SW_QK) {
        float min = FLT_MAX, max = -FLT_MAX;
        for (int j = 0; j < SW_QK; j++) {
            min = x[j] < min ? x[j] : min;
            max = x[j] > max ? x[j] : max;
        }
        const float d = (max - min) / 15;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = sw_f32_to_f16(d);
        y[i].m = sw_f32_to_f16(min);
        for (int j = 0; j < 16; j++) {
            int q0 = (int)((x[j] - min) * id + 0.5f), q1 = (int)((x[j + 16] - min) * id + 0.5f);
            q0 = q0 < 15 ? q0 : 15;
            q1 = q1 < 15 ? q1 : 15;
            y[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

static const struct sw_kernels *s_active(void);
static int s_use_avx2_quant;

int sw_quantize_row(enum sw_type t, const float *src, void *dst, int64_t n)
{
    s_active(); // makes sure s_use_avx2_quant is set
    switch (t) {
    case SW_TYPE_F32:
        memcpy(dst, src, (size_t)n * sizeof(float));
        return 0;
    case SW_TYPE_F16: {
        sw_f16 *h = dst;
        for (int64_t i = 0; i < n; i++)
            h[i] = sw_f32_to_f16(src[i]);
        return 0;
    }
    case SW_TYPE_BF16: {
        sw_bf16 *h = dst;
        for (int64_t i = 0; i < n; i++)
            h[i] = sw_f32_to_bf16(src[i]);
        return 0;
    }
    case SW_TYPE_Q8_0:
        if (s_use_avx2_quant)
            sw_quantize_q8_0_avx2(src, dst, n);
        else
            s_quant_q8_0(src, dst, n / SW_QK);
        return 0;
    case SW_TYPE_Q8_1:
        if (s_use_avx2_quant)
            sw_quantize_q8_1_avx2(src, dst, n);
        else
            s_quant_q8_1(src, dst, n / SW_QK);
        return 0;
    case SW_TYPE_Q8_K:
        if (s_use_avx2_quant)
            sw_quantize_q8_k_avx2(src, dst, n);
        else
            s_quant_q8_k(src, dst, n / SW_QK_K);
        return 0;
    case SW_TYPE_Q4_0:
        s_quant_q4_0(src, dst, n / SW_QK);
        return 0;
    case SW_TYPE_Q4_1:
        s_quant_q4_1(src, dst, n / SW_QK);
        return 0;
    default:
        return -1;
    }
}

/* ---- scalar dot products ------------------------------------------------ */

/* Lane sums of a 32-element int8 x int8 block product. */
static inline void s_lanes32(const int8_t *a, const int8_t *b, int32_t lane[8])
{
    for (int k = 0; k < 8; k++) {
        lane[k] = a[4 * k] * b[4 * k] + a[4 * k + 1] * b[4 * k + 1] + a[4 * k + 2] * b[4 * k + 2] +
                  a[4 * k + 3] * b[4 * k + 3];
    }
}

static void s_unpack_q4(const uint8_t *qs, int off, int8_t *q)
{
    for (int j = 0; j < 16; j++) {
        q[j] = (int8_t)((qs[j] & 0xF) - off);
        q[j + 16] = (int8_t)((qs[j] >> 4) - off);
    }
}

static void s_unpack_q5(const uint8_t *qs, const uint8_t *qhp, int off, int8_t *q)
{
    uint32_t qh = s_load_u32(qhp);
    for (int j = 0; j < 16; j++) {
        q[j] = (int8_t)(((qs[j] & 0xF) | (((qh >> j) & 1u) << 4)) - off);
        q[j + 16] = (int8_t)(((qs[j] >> 4) | (((qh >> (j + 16)) & 1u) << 4)) - off);
    }
}

static void s_dot_q4_0(int64_t n, float *s, const void *vw, const void *vx)
{
    const sw_block_q4_0 *w = vw;
    const sw_block_q8_0 *x = vx;
    float acc[8] = {0};
    for (int64_t b = 0; b < n / SW_QK; b++) {
        int8_t q[32];
        int32_t lane[8];
        s_unpack_q4(w[b].qs, 8, q);
        s_lanes32(q, x[b].qs, lane);
        const float d = F16(w[b].d) * F16(x[b].d);
        for (int k = 0; k < 8; k++)
            acc[k] = fmaf(d, (float)lane[k], acc[k]);
    }
    *s = sw_hsum8(acc);
}

static void s_dot_q4_1(int64_t n, float *s, const void *vw, const void *vx)
{
    const sw_block_q4_1 *w = vw;
    const sw_block_q8_1 *x = vx;
    float acc[8] = {0}, summs = 0.0f;
    for (int64_t b = 0; b < n / SW_QK; b++) {
        int8_t q[32];
        int32_t lane[8];
        s_unpack_q4(w[b].qs, 0, q);
        s_lanes32(q, x[b].qs, lane);
        const float d = F16(w[b].d) * F16(x[b].d);
        summs = fmaf(F16(w[b].m), F16(x[b].s), summs);
        for (int k = 0; k < 8; k++)
            acc[k] = fmaf(d, (float)lane[k], acc[k]);
    }
    *s = sw_hsum8(acc) + summs;
}

static void s_dot_q5_0(int64_t n, float *s, const void *vw, const void *vx)
{
    const sw_block_q5_0 *w = vw;
    const sw_block_q8_0 *x = vx;
    float acc[8] = {0};
    for (int64_t b = 0; b < n / SW_QK; b++) {
        int8_t q[32];
        int32_t lane[8];
        s_unpack_q5(w[b].qs, w[b].qh, 16, q);
        s_lanes32(q, x[b].qs, lane);
        const float d = F16(w[b].d) * F16(x[b].d);
        for (int k = 0; k < 8; k++)
            acc[k] = fmaf(d, (float)lane[k], acc[k]);
    }
    *s = sw_hsum8(acc);
}

static void s_dot_q5_1(int64_t n, float *s, const void *vw, const void *vx)
{
    const sw_block_q5_1 *w = vw;
    const sw_block_q8_1 *x = vx;
    float acc[8] = {0}, summs = 0.0f;
    for (int64_t b = 0; b < n / SW_QK; b++) {
        int8_t q[32];
        int32_t lane[8];
        s_unpack_q5(w[b].qs, w[b].qh, 0, q);
        s_lanes32(q, x[b].qs, lane);
        const float d = F16(w[b].d) * F16(x[b].d);
        summs = fmaf(F16(w[b].m), F16(x[b].s), summs);
        for (int k = 0; k < 8; k++)
            acc[k] = fmaf((float)lane[k], d, acc[k]);
    }
    *s = sw_hsum8(acc) + summs;
}

static void s_dot_q8_0(int64_t n, float *s, const void *vw, const void *vx)
{
    const sw_block_q8_0 *w = vw;
    const sw_block_q8_0 *x = vx;
    float acc[8] = {0};
    for (int64_t b = 0; b < n / SW_QK; b++) {
        int32_t lane[8];
        s_lanes32(w[b].qs, x[b].qs, lane);
        const float d = F16(w[b].d) * F16(x[b].d);
        for (int k = 0; k < 8; k++)
            acc[k] = fmaf(d, (float)lane[k], acc[k]);
    }
    *s = sw_hsum8(acc);
}

/* Adds to lane[] the products of one 32-element chunk, scaled by sc. */
static inline void s_lanes_scaled(const int8_t *q, const int8_t *y, int sc, int32_t lane[8])
{
    int32_t l[8];
    s_lanes32(q, y, l);
    for (int k = 0; k < 8; k++)
        lane[k] += sc * l[k];
}

/* The exact integers of one q4_K super-block against its q8_K block, as
 * GGML's AVX2 kernel forms them: lane[8] (sub-block scales applied) and
 * pm[4], the minimums times the bsum pairs, added pairwise. */
static void s_k4_block(const sw_block_q4_k *w, const sw_block_q8_k *x, int32_t lane[8],
                       int32_t pm[4])
{
    uint8_t sc[8], mn[8];
    for (int j = 0; j < 8; j++)
        sw_scale_min_k4(j, w->scales, &sc[j], &mn[j]);
    for (int k = 0; k < 8; k++)
        lane[k] = 0;
    for (int c = 0; c < 4; c++) {
        int8_t lo[32], hi[32];
        for (int l = 0; l < 32; l++) {
            lo[l] = (int8_t)(w->qs[32 * c + l] & 0xF);
            hi[l] = (int8_t)(w->qs[32 * c + l] >> 4);
        }
        s_lanes_scaled(lo, x->qs + 64 * c, sc[2 * c], lane);
        s_lanes_scaled(hi, x->qs + 64 * c + 32, sc[2 * c + 1], lane);
    }
    for (int m = 0; m < 4; m++)
        pm[m] = mn[2 * m] * (x->bsums[4 * m] + x->bsums[4 * m + 1]) +
                mn[2 * m + 1] * (x->bsums[4 * m + 2] + x->bsums[4 * m + 3]);
}

/* q5_K's integers: lane[8] and *pm, the minimums times the bsum pairs. */
static void s_k5_block(const sw_block_q5_k *w, const sw_block_q8_k *x, int32_t lane[8], int32_t *pm)
{
    uint8_t sc[8], mn[8];
    for (int j = 0; j < 8; j++)
        sw_scale_min_k4(j, w->scales, &sc[j], &mn[j]);
    for (int k = 0; k < 8; k++)
        lane[k] = 0;
    for (int c = 0; c < 4; c++) {
        int8_t lo[32], hi[32];
        for (int l = 0; l < 32; l++) {
            uint8_t q = w->qs[32 * c + l], h = w->qh[l];
            lo[l] = (int8_t)((q & 0xF) | (((h >> (2 * c)) & 1) << 4));
            hi[l] = (int8_t)((q >> 4) | (((h >> (2 * c + 1)) & 1) << 4));
        }
        s_lanes_scaled(lo, x->qs + 64 * c, sc[2 * c], lane);
        s_lanes_scaled(hi, x->qs + 64 * c + 32, sc[2 * c + 1], lane);
    }
    int32_t p = 0;
    for (int j = 0; j < 8; j++)
        p += mn[j] * (x->bsums[2 * j] + x->bsums[2 * j + 1]);
    *pm = p;
}

/* q6_K's integers: lane[8], the -32 offset included. */
static void s_k6_block(const sw_block_q6_k *w, const sw_block_q8_k *x, int32_t lane[8])
{
    for (int k = 0; k < 8; k++)
        lane[k] = 0;
    for (int h = 0; h < 2; h++) {
        const uint8_t *ql = w->ql + 64 * h, *qh = w->qh + 32 * h;
        const int8_t *sc = w->scales + 8 * h;
        const int8_t *y = x->qs + 128 * h;
        int8_t q[4][32]; // unsigned 0..63; the -32 is applied below through bsums
        for (int l = 0; l < 32; l++) {
            q[0][l] = (int8_t)((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4));
            q[1][l] = (int8_t)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4));
            q[2][l] = (int8_t)((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
            q[3][l] = (int8_t)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
        }
        for (int c = 0; c < 4; c++) {
            // the first 16 elements of a chunk use scale 2c, the next 16 scale 2c+1
            int32_t l[8];
            s_lanes32(q[c], y + 32 * c, l);
            for (int k = 0; k < 8; k++)
                lane[k] += sc[2 * c + (k >= 4)] * l[k];
        }
    }
    // GGML's lane k subtracts 32 * (bsums[2k] * scales[2k] + bsums[2k+1] * scales[2k+1])
    for (int k = 0; k < 8; k++)
        lane[k] -=
            32 * (x->bsums[2 * k] * w->scales[2 * k] + x->bsums[2 * k + 1] * w->scales[2 * k + 1]);
}

static int32_t s_isum8(const int32_t lane[8])
{
    int32_t t = 0;
    for (int k = 0; k < 8; k++)
        t += lane[k];
    return t;
}

static void s_dot_q4_k(int64_t n, float *s, const void *vw, const void *vx)
{
    const sw_block_q4_k *w = vw;
    const sw_block_q8_k *x = vx;
    float acc[8] = {0}, accm[4] = {0};
    for (int64_t b = 0; b < n / SW_QK_K; b++) {
        const float d = x[b].d * F16(w[b].d);
        const float dmin = -x[b].d * F16(w[b].dmin);
        int32_t lane[8], pm[4];
        s_k4_block(&w[b], &x[b], lane, pm);
        for (int m = 0; m < 4; m++)
            accm[m] = fmaf(dmin, (float)pm[m], accm[m]);
        for (int k = 0; k < 8; k++)
            acc[k] = fmaf(d, (float)lane[k], acc[k]);
    }
    *s = sw_hsum8(acc) + ((accm[0] + accm[2]) + (accm[1] + accm[3]));
}

static void s_dot_q5_k(int64_t n, float *s, const void *vw, const void *vx)
{
    const sw_block_q5_k *w = vw;
    const sw_block_q8_k *x = vx;
    float acc[8] = {0}, summs = 0.0f;
    for (int64_t b = 0; b < n / SW_QK_K; b++) {
        const float d = x[b].d * F16(w[b].d);
        const float dmin = -x[b].d * F16(w[b].dmin);
        int32_t lane[8], p;
        s_k5_block(&w[b], &x[b], lane, &p);
        summs = fmaf(dmin, (float)p, summs);
        for (int k = 0; k < 8; k++)
            acc[k] = fmaf(d, (float)lane[k], acc[k]);
    }
    *s = sw_hsum8(acc) + summs;
}

static void s_dot_q6_k(int64_t n, float *s, const void *vw, const void *vx)
{
    const sw_block_q6_k *w = vw;
    const sw_block_q8_k *x = vx;
    float acc[8] = {0};
    for (int64_t b = 0; b < n / SW_QK_K; b++) {
        const float d = x[b].d * F16(w[b].d);
        int32_t lane[8];
        s_k6_block(&w[b], &x[b], lane);
        for (int k = 0; k < 8; k++)
            acc[k] = fmaf(d, (float)lane[k], acc[k]);
    }
    *s = sw_hsum8(acc);
}

/* The same dot products in the order of llama.cpp's tiled K-quant matmul
 * (sw_matmul_tiled): per super-block r = d_w * float(integer total), minus
 * dmin_w * float(minimums total) in one fused step, then y = fma(r, d_x, y). */
static void s_tdot_q4_k(int64_t n, float *s, const void *vw, const void *vx)
{
    const sw_block_q4_k *w = vw;
    const sw_block_q8_k *x = vx;
    float y = 0.0f;
    for (int64_t b = 0; b < n / SW_QK_K; b++) {
        int32_t lane[8], pm[4];
        s_k4_block(&w[b], &x[b], lane, pm);
        float r = F16(w[b].d) * (float)s_isum8(lane);
        r = fmaf(-F16(w[b].dmin), (float)(pm[0] + pm[1] + pm[2] + pm[3]), r);
        y = fmaf(r, x[b].d, y);
    }
    *s = y;
}

static void s_tdot_q5_k(int64_t n, float *s, const void *vw, const void *vx)
{
    const sw_block_q5_k *w = vw;
    const sw_block_q8_k *x = vx;
    float y = 0.0f;
    for (int64_t b = 0; b < n / SW_QK_K; b++) {
        int32_t lane[8], p;
        s_k5_block(&w[b], &x[b], lane, &p);
        float r = F16(w[b].d) * (float)s_isum8(lane);
        r = fmaf(-F16(w[b].dmin), (float)p, r);
        y = fmaf(r, x[b].d, y);
    }
    *s = y;
}

static void s_tdot_q6_k(int64_t n, float *s, const void *vw, const void *vx)
{
    const sw_block_q6_k *w = vw;
    const sw_block_q8_k *x = vx;
    float y = 0.0f;
    for (int64_t b = 0; b < n / SW_QK_K; b++) {
        int32_t lane[8];
        s_k6_block(&w[b], &x[b], lane);
        y = fmaf(F16(w[b].d) * (float)s_isum8(lane), x[b].d, y);
    }
    *s = y;
}

/* GGML's F16/F32 SIMD loop shape: 4 accumulators of 8 lanes over 32-element
 * steps, a pairwise reduction, then the tail. */
static float s_reduce4x8(float sum[4][8])
{
    float t[8];
    for (int l = 0; l < 8; l++)
        t[l] = (sum[0][l] + sum[2][l]) + (sum[1][l] + sum[3][l]);
    float t0[4];
    for (int l = 0; l < 4; l++)
        t0[l] = t[l] + t[l + 4];
    return (t0[0] + t0[1]) + (t0[2] + t0[3]);
}

static void s_dot_f16(int64_t n, float *s, const void *vw, const void *vx)
{
    const sw_f16 *w = vw, *x = vx;
    const int64_t np = n & ~(int64_t)31;
    float sum[4][8] = {{0}};
    for (int64_t i = 0; i < np; i += 32)
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 8; l++)
                sum[j][l] = fmaf(F16(w[i + 8 * j + l]), F16(x[i + 8 * j + l]), sum[j][l]);
    double sumf = s_reduce4x8(sum);
    for (int64_t i = np; i < n; i++)
        sumf += (double)(F16(w[i]) * F16(x[i]));
    *s = (float)sumf;
}

static void s_dot_f32(int64_t n, float *s, const void *vw, const void *vx)
{
    const float *w = vw, *x = vx;
    const int64_t np = n & ~(int64_t)31;
    float sum[4][8] = {{0}};
    for (int64_t i = 0; i < np; i += 32)
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 8; l++)
                sum[j][l] = fmaf(w[i + 8 * j + l], x[i + 8 * j + l], sum[j][l]);
    float sumf = s_reduce4x8(sum);
    // GGML's tail as GCC compiles it: groups of 8 and 4 unfused, the last 0..3 fused
    int64_t i = np;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++)
            sumf += w[i + k] * x[i + k];
    if (n - i >= 4) {
        for (int k = 0; k < 4; k++)
            sumf += w[i + k] * x[i + k];
        i += 4;
    }
    for (; i < n; i++)
        sumf = fmaf(w[i], x[i], sumf);
    *s = sumf;
}

static void s_dot_bf16(int64_t n, float *s, const void *vw, const void *vx)
{
    const sw_bf16 *w = vw, *x = vx;
    const int64_t np = n & ~(int64_t)31;
    float c[4][8] = {{0}};
    for (int64_t i = 0; i < np; i += 32)
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 8; l++)
                c[j][l] = fmaf(sw_bf16_to_f32(w[i + 8 * j + l]), sw_bf16_to_f32(x[i + 8 * j + l]),
                               c[j][l]);
    float t[8];
    for (int l = 0; l < 8; l++)
        t[l] = (c[0][l] + c[2][l]) + (c[1][l] + c[3][l]);
    double sumf = sw_hsum8(t);
    for (int64_t i = np; i < n; i++)
        sumf += (double)(sw_bf16_to_f32(w[i]) * sw_bf16_to_f32(x[i]));
    *s = (float)sumf;
}

/* ---- dispatch ----------------------------------------------------------- */

/* The kernel tables of every level up to the best (filled once), and the
 * active one (changed only by the test hooks below). */
static struct sw_kernels s_levels[SW_KLEVEL_AMX + 1];
static const char *const s_level_names[] = {"scalar", "avx2", "avx512", "amx"};
static enum sw_kernel_level s_best_level = SW_KLEVEL_SCALAR;
static enum sw_kernel_level s_cur_level = SW_KLEVEL_SCALAR;
static pthread_once_t s_once = PTHREAD_ONCE_INIT;

/* Multi-row matmul by calls to one dot kernel; each weight row stays in L1
 * while it meets every activation row. */
static void s_mm_generic(sw_dot_fn dot, enum sw_type t, int64_t n, const void *w, size_t w_stride,
                         int64_t o0, int64_t o1, const void *x, size_t x_stride, int nr, float *y,
                         int64_t y_stride)
{
    (void)t;
    const uint8_t *wb = w, *xb = x;
    for (int64_t o = o0; o < o1; o++)
        for (int r = 0; r < nr; r++)
            dot(n, &y[r * y_stride + o], wb + (size_t)o * w_stride, xb + (size_t)r * x_stride);
}

#if defined(__x86_64__) || defined(__i386__)
/* CPUID.1:ECX[29]. Asked directly: not every compiler knows "f16c" for
 * __builtin_cpu_supports. OS support for the YMM state comes with "avx2". */
static int s_cpu_has_f16c(void)
{
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && ((c >> 29) & 1u);
}
#endif

int sw_cpu_amx_ready(void)
{
#if defined(__linux__) && defined(__x86_64__)
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !((d >> 24) & 1u) || !((d >> 25) & 1u))
        return 0; // CPUID.7.0:EDX[24] AMX-TILE, [25] AMX-INT8
    if (!__get_cpuid(1, &a, &b, &c, &d) || !((c >> 27) & 1u))
        return 0; // OSXSAVE: XGETBV is there
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if (((lo >> 17) & 3u) != 3u)
        return 0; // XCR0[17] XTILECFG, [18] XTILEDATA: the OS saves the tiles
    /* Linux hands the tile data out per process, on request (ARCH_REQ_XCOMP_PERM
     * with XFEATURE_XTILEDATA); it holds for every thread, made before or after. */
    return syscall(SYS_arch_prctl, 0x1023, 18) == 0;
#else
    return 0;
#endif
}

static void s_init(void)
{
    struct sw_kernels *sc = &s_levels[SW_KLEVEL_SCALAR];
    sc->dot[SW_TYPE_F32] = s_dot_f32;
    sc->dot[SW_TYPE_F16] = s_dot_f16;
    sc->dot[SW_TYPE_BF16] = s_dot_bf16;
    sc->dot[SW_TYPE_Q4_0] = s_dot_q4_0;
    sc->dot[SW_TYPE_Q4_1] = s_dot_q4_1;
    sc->dot[SW_TYPE_Q5_0] = s_dot_q5_0;
    sc->dot[SW_TYPE_Q5_1] = s_dot_q5_1;
    sc->dot[SW_TYPE_Q8_0] = s_dot_q8_0;
    sc->dot[SW_TYPE_Q4_K] = s_dot_q4_k;
    sc->dot[SW_TYPE_Q5_K] = s_dot_q5_k;
    sc->dot[SW_TYPE_Q6_K] = s_dot_q6_k;
    sc->tdot[SW_TYPE_Q4_K] = s_tdot_q4_k;
    sc->tdot[SW_TYPE_Q5_K] = s_tdot_q5_k;
    sc->tdot[SW_TYPE_Q6_K] = s_tdot_q6_k;
    sw_kernels_lowbit(sc); // q2_K, q3_K, iq4_nl, iq4_xs (quant_lowbit.c)
    const char *env = getenv("SW_CPU");
    enum sw_kernel_level cap = SW_KLEVEL_AMX;
    if (env != NULL && strcasecmp(env, "scalar") == 0)
        cap = SW_KLEVEL_SCALAR;
    else if (env != NULL && strcasecmp(env, "avx2") == 0)
        cap = SW_KLEVEL_AVX2;
    else if (env != NULL && strcasecmp(env, "avx512") == 0)
        cap = SW_KLEVEL_AVX512;
    else if (env != NULL && *env != '\0' && strcasecmp(env, "amx") != 0)
        SW_WARN("SW_CPU=%s is not a kernel level (scalar, avx2, avx512 or amx): using the best "
                "one the CPU has",
                env);
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (cap >= SW_KLEVEL_AVX2 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
        s_cpu_has_f16c()) {
        s_levels[SW_KLEVEL_AVX2] = *sc;
        sw_kernels_avx2(&s_levels[SW_KLEVEL_AVX2]);
        sw_kernels_lowbit_avx2(&s_levels[SW_KLEVEL_AVX2]);
        s_best_level = SW_KLEVEL_AVX2;
        /* libgcc reports the AVX-512 features only when the OS saves the ZMM state */
        if (cap >= SW_KLEVEL_AVX512 && __builtin_cpu_supports("avx512f") &&
            __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
            __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vnni")) {
            s_levels[SW_KLEVEL_AVX512] = s_levels[SW_KLEVEL_AVX2];
            sw_kernels_avx512(&s_levels[SW_KLEVEL_AVX512]);
            sw_kernels_lowbit_avx512(&s_levels[SW_KLEVEL_AVX512]);
            sw_kernels_avx512_mm(&s_levels[SW_KLEVEL_AVX512]);
            sw_kernels_avx512_mv(&s_levels[SW_KLEVEL_AVX512]);
            s_best_level = SW_KLEVEL_AVX512;
            if (cap >= SW_KLEVEL_AMX && __builtin_cpu_supports("avx512vbmi") &&
                sw_cpu_amx_ready()) {
                s_levels[SW_KLEVEL_AMX] = s_levels[SW_KLEVEL_AVX512];
                sw_kernels_amx(&s_levels[SW_KLEVEL_AMX]);
                s_best_level = SW_KLEVEL_AMX;
            }
        }
    }
#else
    (void)cap;
#endif
    s_cur_level = s_best_level;
    s_use_avx2_quant = s_cur_level >= SW_KLEVEL_AVX2;
}

static const struct sw_kernels *s_active(void)
{
    pthread_once(&s_once, s_init);
    return &s_levels[s_cur_level];
}

void sw_quant_force_scalar(int on)
{
    pthread_once(&s_once, s_init);
    s_cur_level = on ? SW_KLEVEL_SCALAR : s_best_level;
    s_use_avx2_quant = s_cur_level >= SW_KLEVEL_AVX2;
}

int sw_quant_force_level(enum sw_kernel_level l)
{
    pthread_once(&s_once, s_init);
    if (l < SW_KLEVEL_SCALAR || l > s_best_level)
        return -1;
    s_cur_level = l;
    s_use_avx2_quant = s_cur_level >= SW_KLEVEL_AVX2;
    return 0;
}

enum sw_kernel_level sw_quant_level(void)
{
    pthread_once(&s_once, s_init);
    return s_cur_level;
}

enum sw_kernel_level sw_quant_best_level(void)
{
    pthread_once(&s_once, s_init);
    return s_best_level;
}

const char *sw_cpu_kernels(void)
{
    pthread_once(&s_once, s_init);
    return s_level_names[s_cur_level];
}

void sw_vec_dot(enum sw_type t, int64_t n, float *s, const void *w, const void *x)
{
    const struct sw_kernels *k = s_active();
    if (t < 0 || t >= SW_TYPE_COUNT || k->dot[t] == NULL)
        abort(); // programmer error: the loader only admits supported types
    k->dot[t](n, s, w, x);
}

void sw_matmul(enum sw_type t, int64_t n, const void *w, size_t w_stride, int64_t o0, int64_t o1,
               const void *x, size_t x_stride, int nr, float *y, int64_t y_stride)
{
    const struct sw_kernels *k = s_active();
    if (t < 0 || t >= SW_TYPE_COUNT || k->dot[t] == NULL)
        abort();
    if (o1 <= o0 || nr <= 0)
        return;
    if (k->mm[t] != NULL)
        k->mm[t](n, w, w_stride, o0, o1, x, x_stride, nr, y, y_stride);
    else
        s_mm_generic(k->dot[t], t, n, w, w_stride, o0, o1, x, x_stride, nr, y, y_stride);
}

void sw_matmul_tiled(enum sw_type t, int64_t n, const void *w, size_t w_stride, int64_t o0,
                     int64_t o1, const void *x, size_t x_stride, int nr, float *y, int64_t y_stride)
{
    const struct sw_kernels *k = s_active();
    if (t < 0 || t >= SW_TYPE_COUNT || k->tdot[t] == NULL) {
        sw_matmul(t, n, w, w_stride, o0, o1, x, x_stride, nr, y, y_stride);
        return;
    }
    if (o1 <= o0 || nr <= 0)
        return;
    if (k->mmtw[t] != NULL && nr >= (k->mmtw_rows[t] > 0 ? k->mmtw_rows[t] : SW_MMTW_ROWS))
        k->mmtw[t](n, w, w_stride, o0, o1, x, x_stride, nr, y, y_stride);
    else if (k->mmt[t] != NULL)
        k->mmt[t](n, w, w_stride, o0, o1, x, x_stride, nr, y, y_stride);
    else
        s_mm_generic(k->tdot[t], t, n, w, w_stride, o0, o1, x, x_stride, nr, y, y_stride);
}

void sw_matmul_sgemm(enum sw_type t, int64_t n, const void *w, size_t w_stride, int64_t o0,
                     int64_t o1, const void *x, size_t x_stride, int nr, float *y, int64_t y_stride)
{
    const struct sw_kernels *k = s_active();
    if (t < 0 || t >= SW_TYPE_COUNT || k->gdot[t] == NULL) {
        sw_matmul(t, n, w, w_stride, o0, o1, x, x_stride, nr, y, y_stride);
        return;
    }
    if (o1 <= o0 || nr <= 0)
        return;
    if (k->mmg[t] != NULL)
        k->mmg[t](n, w, w_stride, o0, o1, x, x_stride, nr, y, y_stride);
    else
        s_mm_generic(k->gdot[t], t, n, w, w_stride, o0, o1, x, x_stride, nr, y, y_stride);
}

void sw_matmul_batch(enum sw_type t, int batch_rows, int64_t n, const void *w, size_t w_stride,
                     int64_t o0, int64_t o1, const void *x, size_t x_stride, int nr, float *y,
                     int64_t y_stride)
{
    const struct sw_kernels *k = s_active();
    if (batch_rows >= 8 && t >= 0 && t < SW_TYPE_COUNT && k->tdot[t] != NULL)
        sw_matmul_tiled(t, n, w, w_stride, o0, o1, x, x_stride, nr, y, y_stride);
    else if (batch_rows >= 2)
        sw_matmul_sgemm(t, n, w, w_stride, o0, o1, x, x_stride, nr, y, y_stride);
    else
        sw_matmul(t, n, w, w_stride, o0, o1, x, x_stride, nr, y, y_stride);
}
