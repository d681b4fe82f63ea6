/*
 * quant_lowbit_avx2.c - AVX2 + FMA + F16C kernels of q2_K, q3_K, iq4_xs (x
 * q8_K) and iq4_nl (x q8_0). Compiled with -mavx2 -mfma -mf16c; quant.c only
 * calls in here after checking the CPU at start-up.
 *
 * Per (weight row, activation row) pair these are GGML's AVX2 kernels'
 * float operations in their order (quant_math_lowbit.h's header); the
 * integer lanes are formed in whatever way is fastest (they are exact).
 * A weight super-block is unpacked once and serves up to 4 activation rows
 * (S_ROWS), so a verification or prompt chunk reads the weights once per 4
 * rows; a row's value never depends on the others. The tiled order
 * (sw_matmul_tiled) and iq4_nl's sgemm order (sw_matmul_sgemm) run the same
 * integer code and end each block differently.
 */
#include "quant.h"
#include "quant_impl.h"
#include "quant_math.h" // sw_q3_k_scale
#include "quant_x86.h"  // SW_AI, sw_x86_f16, sw_x86_hsum8, sw_x86_hsum_i32; no contraction

#include <immintrin.h>
#include <math.h>
#include <string.h>

#define S_ROWS 4 // activation rows one pass over a weight row serves

enum { K_Q2_K, K_Q3_K, K_IQ4_XS, K_IQ4_NL };
enum { O_DOT, O_TILED, O_SGEMM }; // the one-row order, sw_matmul_tiled's, sw_matmul_sgemm's

/* The non-linear levels as a byte table. */
SW_AI __m128i s_levels(void)
{
    return _mm_setr_epi8(-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113);
}

/* 16 bytes of nibbles -> 32 int8 levels (low nibbles first, as the elements). */
SW_AI __m256i s_nl32(const uint8_t *qs, __m128i tab)
{
    const __m128i v = _mm_loadu_si128((const __m128i *)qs), m4 = _mm_set1_epi8(0xF);
    const __m128i lo = _mm_shuffle_epi8(tab, _mm_and_si128(v, m4));
    const __m128i hi = _mm_shuffle_epi8(tab, _mm_and_si128(_mm_srli_epi16(v, 4), m4));
    return _mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1);
}

/* Pairwise int16 sums of signed w times signed y (|w|, |y| <= 127: no saturation). */
SW_AI __m256i s_mul_pairs(__m256i w, __m256i aw, __m256i y)
{
    return _mm256_maddubs_epi16(aw, _mm256_sign_epi8(y, w));
}

/* A weight super-block unpacked for every activation row. */
typedef struct {
    __m256i q[8];  // 32-element group g: q2_K/q3_K unsigned quants (q3_K 0..7), iq4_* levels
    __m256i aq[8]; // iq4_*: |levels|; q3_K: 4 where the third bit is clear, else 0
    __m256i sc[8]; // group g's int16 scales (q2_K/q3_K: lower half sub-block 2g, upper 2g+1)
    __m256i mins;  // q2_K: the 16 minimums as int16
    float d, dmin; // super-scales
} s_wblk;

/* 16 int16 scales (sub-blocks 0..15) -> group g's pair: sub-block 2g's scale
 * in the lower 128 bits, 2g+1's in the upper (byte shuffles, no scalar work). */
SW_AI void s_sc_pairs16(__m256i s16, __m256i *sc)
{
    const __m256i lo = _mm256_permute2x128_si256(s16, s16, 0x00);
    const __m256i hi = _mm256_permute2x128_si256(s16, s16, 0x11);
#pragma GCC unroll 8
    for (int g = 0; g < 8; g++) {
        const int j = g & 3;
        const __m256i ctrl =
            _mm256_setr_m128i(_mm_set1_epi16((short)(((4 * j + 1) << 8) | (4 * j))),
                              _mm_set1_epi16((short)(((4 * j + 3) << 8) | (4 * j + 2))));
        sc[g] = _mm256_shuffle_epi8(g < 4 ? lo : hi, ctrl);
    }
}

SW_AI void s_unpack(int kind, const uint8_t *blk, s_wblk *u)
{
    const __m256i m3 = _mm256_set1_epi8(3);
    if (kind == K_Q2_K) {
        const sw_block_q2_k *b = (const sw_block_q2_k *)blk;
        for (int h = 0; h < 2; h++) {
            const __m256i bits = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * h));
            for (int i = 0; i < 4; i++)
                u->q[4 * h + i] = _mm256_and_si256(_mm256_srli_epi16(bits, 2 * i), m3);
        }
        const __m128i sm = _mm_loadu_si128((const __m128i *)b->scales);
        s_sc_pairs16(_mm256_cvtepu8_epi16(_mm_and_si128(sm, _mm_set1_epi8(0xF))), u->sc);
        u->mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sm, 4), _mm_set1_epi8(0xF)));
        u->d = sw_x86_f16(&b->d);
        u->dmin = sw_x86_f16(&b->dmin);
    } else if (kind == K_Q3_K) {
        const sw_block_q3_k *b = (const sw_block_q3_k *)blk;
        const __m256i hb = _mm256_loadu_si256((const __m256i *)b->hmask);
        const __m256i one = _mm256_set1_epi8(1);
        for (int h = 0; h < 2; h++) {
            const __m256i bits = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * h));
            for (int i = 0; i < 4; i++) {
                const int g = 4 * h + i;
                u->q[g] = _mm256_and_si256(_mm256_srli_epi16(bits, 2 * i), m3);
                const __m256i hbit = _mm256_and_si256(_mm256_srli_epi16(hb, g), one);
                u->aq[g] = _mm256_slli_epi16(_mm256_xor_si256(hbit, one), 2); // 4 when clear
            }
        }
        int16_t s16[16];
        for (int i = 0; i < 16; i++)
            s16[i] = (int16_t)sw_q3_k_scale(b->scales, i);
        s_sc_pairs16(_mm256_loadu_si256((const __m256i *)s16), u->sc);
        u->d = sw_x86_f16(&b->d);
    } else { // iq4_xs
        const sw_block_iq4_xs *b = (const sw_block_iq4_xs *)blk;
        const __m128i tab = s_levels();
        for (int s = 0; s < 8; s++) {
            u->q[s] = s_nl32(b->qs + 16 * s, tab);
            u->aq[s] = _mm256_sign_epi8(u->q[s], u->q[s]);
            const int ls = (((b->scales_l[s / 2] >> (4 * (s % 2))) & 0xF) |
                            (((b->scales_h >> (2 * s)) & 3) << 4)) -
                           32;
            u->sc[s] = _mm256_set1_epi16((short)ls);
        }
        u->d = sw_x86_f16(&b->d);
    }
}

/* The integer lanes of unpacked block u against activation block x: *sumi
 * (lane k: elements 4k..4k+3 of every group, scales applied) and, q2_K,
 * *prod (lane k: minimums 2k, 2k+1 times their bsums). */
SW_AI void s_ints(int kind, const s_wblk *u, const sw_block_q8_k *x, __m256i *sumi, __m256i *prod)
{
    __m256i a = _mm256_setzero_si256(), b = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int g = 0; g < 8; g++) {
        const __m256i y = _mm256_loadu_si256((const __m256i *)(x->qs + 32 * g));
        __m256i p;
        if (kind == K_Q2_K)
            p = _mm256_maddubs_epi16(u->q[g], y);
        else if (kind == K_Q3_K)
            p = _mm256_sub_epi16(_mm256_maddubs_epi16(u->q[g], y),
                                 _mm256_maddubs_epi16(u->aq[g], y));
        else
            p = s_mul_pairs(u->q[g], u->aq[g], y);
        p = _mm256_madd_epi16(u->sc[g], p);
        if (g & 1) // two chains (exact: the same integers)
            b = _mm256_add_epi32(b, p);
        else
            a = _mm256_add_epi32(a, p);
    }
    *sumi = _mm256_add_epi32(a, b);
    if (kind == K_Q2_K)
        *prod = _mm256_madd_epi16(u->mins, _mm256_loadu_si256((const __m256i *)x->bsums));
}

/*
 * y[r * ys] = dot(one weight row w, activation row r) for r < R (a
 * compile-time constant), the rows xs bytes apart, nb super-blocks, in
 * order ord (O_DOT or O_TILED).
 */
SW_AI void s_tile(int kind, int ord, int R, int64_t nb, const uint8_t *w, const uint8_t *x,
                  size_t xs, float *y, int64_t ys)
{
    const size_t wsz = kind == K_Q2_K ? 84 : kind == K_Q3_K ? 110 : 136;
    __m256 acc[S_ROWS];
    float ty[S_ROWS];
#pragma GCC unroll 4
    for (int r = 0; r < S_ROWS; r++) {
        acc[r] = _mm256_setzero_ps();
        ty[r] = 0.0f;
    }
    for (int64_t b = 0; b < nb; b++) {
        s_wblk u;
        s_unpack(kind, w + (size_t)b * wsz, &u);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const sw_block_q8_k *xb = (const sw_block_q8_k *)(x + (size_t)r * xs) + b;
            __m256i sumi, prod = _mm256_setzero_si256();
            s_ints(kind, &u, xb, &sumi, &prod);
            if (ord == O_TILED) {
                float v = u.d * (float)sw_x86_hsum_i32(sumi);
                if (kind == K_Q2_K)
                    v = fmaf(-u.dmin, (float)sw_x86_hsum_i32(prod), v);
                ty[r] = fmaf(v, xb->d, ty[r]);
                continue;
            }
            if (kind == K_Q2_K) {
                const float dmin = -xb->d * u.dmin;
                acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(prod), acc[r]);
            }
            const float d = kind == K_IQ4_XS ? u.d * xb->d : xb->d * u.d;
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc[r]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
        y[r * ys] = ord == O_TILED ? ty[r] : sw_x86_hsum8(acc[r]);
}

/* iq4_nl block b of R activation rows into the accumulators a[r]. */
SW_AI void s_nl_block(int R, int64_t b, const sw_block_iq4_nl *wb, const uint8_t *x, size_t xs,
                      __m128i tab, __m256i ones, __m256 *a)
{
    const __m256i q = s_nl32(wb[b].qs, tab), aq = _mm256_sign_epi8(q, q);
    const float dw = sw_x86_f16(&wb[b].d);
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) {
        const sw_block_q8_0 *xb = (const sw_block_q8_0 *)(x + (size_t)r * xs) + b;
        const __m256i yv = _mm256_loadu_si256((const __m256i *)xb->qs);
        const __m256i l = _mm256_madd_epi16(s_mul_pairs(q, aq, yv), ones);
        const float d = sw_x86_f16(&xb->d) * dw;
        a[r] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(l), a[r]);
    }
}

/* iq4_nl: y[r * ys] for r < R over nb 32-element blocks, in order ord
 * (O_DOT: two chains, even and odd blocks, and the odd tail; O_SGEMM: one
 * chain). The chains are unrolled so that their accumulators stay in
 * registers. */
SW_AI void s_tile_nl(int ord, int R, int64_t nb, const uint8_t *w, const uint8_t *x, size_t xs,
                     float *y, int64_t ys)
{
    const __m128i tab = s_levels();
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[2][S_ROWS];
#pragma GCC unroll 4
    for (int r = 0; r < S_ROWS; r++)
        acc[0][r] = acc[1][r] = _mm256_setzero_ps();
    const sw_block_iq4_nl *wb = (const sw_block_iq4_nl *)w;
    if (ord == O_DOT) {
        for (int64_t b = 0; b + 1 < nb; b += 2) {
            s_nl_block(R, b, wb, x, xs, tab, ones, acc[0]);
            s_nl_block(R, b + 1, wb, x, xs, tab, ones, acc[1]);
        }
    } else {
        for (int64_t b = 0; b < nb; b++)
            s_nl_block(R, b, wb, x, xs, tab, ones, acc[0]);
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) {
        if (ord != O_DOT) {
            y[r * ys] = sw_x86_hsum8(acc[0][r]);
            continue;
        }
        float v = sw_x86_hsum8(_mm256_add_ps(acc[0][r], acc[1][r]));
        if (nb & 1) { // the odd last block: one fused multiply-add of its total
            const int64_t b = nb - 1;
            const sw_block_q8_0 *xb = (const sw_block_q8_0 *)(x + (size_t)r * xs) + b;
            const __m256i q = s_nl32(wb[b].qs, tab), aq = _mm256_sign_epi8(q, q);
            const __m256i yv = _mm256_loadu_si256((const __m256i *)xb->qs);
            const int32_t t = sw_x86_hsum_i32(_mm256_madd_epi16(s_mul_pairs(q, aq, yv), ones));
            v = fmaf(sw_x86_f16(&xb->d) * sw_x86_f16(&wb[b].d), (float)t, v);
        }
        y[r * ys] = v;
    }
}

/* Rows [o0, o1) of W against nr activation rows, S_ROWS at a time. */
SW_AI void s_mm(int kind, int ord, int64_t n, const void *w, size_t w_stride, int64_t o0,
                int64_t o1, const void *x, size_t x_stride, int nr, float *y, int64_t y_stride)
{
    const int64_t nb = n / (kind == K_IQ4_NL ? SW_QK : SW_QK_K);
    const uint8_t *wb = w, *xb = x;
    for (int64_t o = o0; o < o1; o++) {
        const uint8_t *wo = wb + (size_t)o * w_stride;
        for (int r = 0; r < nr; r += S_ROWS) {
            const int R = nr - r < S_ROWS ? nr - r : S_ROWS;
            const uint8_t *xr = xb + (size_t)r * x_stride;
            float *yr = y + r * y_stride + o;
            switch (R) {
#define S_CASE(m)                                                                                  \
    case m:                                                                                        \
        if (kind == K_IQ4_NL)                                                                      \
            s_tile_nl(ord, m, nb, wo, xr, x_stride, yr, y_stride);                                 \
        else                                                                                       \
            s_tile(kind, ord, m, nb, wo, xr, x_stride, yr, y_stride);                              \
        break;
                S_CASE(1)
                S_CASE(2)
                S_CASE(3)
                S_CASE(4)
#undef S_CASE
            default:
                break;
            }
        }
    }
}

#define S_DEF(name, kind, ord)                                                                     \
    static void s_dot_##name(int64_t n, float *s, const void *w, const void *x)                    \
    {                                                                                              \
        s_mm(kind, ord, n, w, 0, 0, 1, x, 0, 1, s, 1);                                             \
    }                                                                                              \
    static void s_mm_##name(int64_t n, const void *w, size_t w_stride, int64_t o0, int64_t o1,     \
                            const void *x, size_t x_stride, int nr, float *y, int64_t y_stride)    \
    {                                                                                              \
        s_mm(kind, ord, n, w, w_stride, o0, o1, x, x_stride, nr, y, y_stride);                     \
    }

S_DEF(q2_k, K_Q2_K, O_DOT)
S_DEF(q3_k, K_Q3_K, O_DOT)
S_DEF(iq4_xs, K_IQ4_XS, O_DOT)
S_DEF(iq4_nl, K_IQ4_NL, O_DOT)
S_DEF(q2_k_t, K_Q2_K, O_TILED)
S_DEF(q3_k_t, K_Q3_K, O_TILED)
S_DEF(iq4_xs_t, K_IQ4_XS, O_TILED)
S_DEF(iq4_nl_g, K_IQ4_NL, O_SGEMM)

void sw_kernels_lowbit_avx2(struct sw_kernels *k)
{
    k->dot[SW_TYPE_Q2_K] = s_dot_q2_k;
    k->dot[SW_TYPE_Q3_K] = s_dot_q3_k;
    k->dot[SW_TYPE_IQ4_XS] = s_dot_iq4_xs;
    k->dot[SW_TYPE_IQ4_NL] = s_dot_iq4_nl;
    k->mm[SW_TYPE_Q2_K] = s_mm_q2_k;
    k->mm[SW_TYPE_Q3_K] = s_mm_q3_k;
    k->mm[SW_TYPE_IQ4_XS] = s_mm_iq4_xs;
    k->mm[SW_TYPE_IQ4_NL] = s_mm_iq4_nl;
    k->tdot[SW_TYPE_Q2_K] = s_dot_q2_k_t;
    k->tdot[SW_TYPE_Q3_K] = s_dot_q3_k_t;
    k->tdot[SW_TYPE_IQ4_XS] = s_dot_iq4_xs_t;
    k->mmt[SW_TYPE_Q2_K] = s_mm_q2_k_t;
    k->mmt[SW_TYPE_Q3_K] = s_mm_q3_k_t;
    k->mmt[SW_TYPE_IQ4_XS] = s_mm_iq4_xs_t;
    k->gdot[SW_TYPE_IQ4_NL] = s_dot_iq4_nl_g;
    k->mmg[SW_TYPE_IQ4_NL] = s_mm_iq4_nl_g;
}
