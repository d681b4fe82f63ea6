/*
 * quant_avx2.c - AVX2 + FMA + F16C dot products and multi-row matmuls.
 * Compiled with -mavx2 -mfma -mf16c; quant.c only calls in here after
 * checking the CPU at start-up.
 *
 * Numerics are GGML's AVX2 kernels': per 32-element block an exact integer
 * dot product in 8 int32 lanes, converted to float and fused-multiply-added
 * with the block's scale into 8 float lanes, then GGML's horizontal sum. The
 * multi-row tiles below keep that exact per-pair sequence, only interleaving
 * several pairs (32-element formats: up to 4 weight rows x 2 activation
 * rows; K-quants: one weight row x up to 8 activation rows, the activation
 * rows split into near-equal groups) so that each unpacked weight block and
 * each loaded activation block is used several times. The integer lanes may
 * be formed in any order (exact, wrap-around int32: AVX-VNNI's vpdpbusd /
 * vpdpwssd give the same integers), the float operations per pair never.
 * That makes sw_matmul() bit-identical to sw_vec_dot() per element.
 */
#include "quant.h"
#include "quant_impl.h"

#include "quant_avx2_k.h"
#include "quant_x86.h" // SW_AI, sw_x86_hsum8; turns floating-point contraction off

#include <cpuid.h>
#include <immintrin.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Software prefetch distance of the matmul tiles, in weight rows. Measured on
 * the 49152 x 576 q8_0 output matrix (30 MB, streamed from memory): 8 rows
 * ahead roughly halved the time per block against none, 4 or 16 rows. */
#define SW_PF_ROWS 8

/* ---- helpers ------------------------------------------------------------ */

SW_AI uint16_t s_u16(const uint8_t *p)
{
    uint16_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* 32 bits -> 32 bytes, 0xFF where the bit is set. */
SW_AI __m256i s_bits_to_bytes(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof v);
    const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202,
                                           0x0101010101010101, 0x0000000000000000);
    __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32((int)v), shuf);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    return _mm256_cmpeq_epi8(_mm256_and_si256(bytes, bit), bit);
}

/* acc + per-lane sum of 4 (unsigned u) x (signed s) byte products: AVX-VNNI's
 * vpdpbusd, VEX-encoded. Written as inline asm so that this file needs no
 * extra compiler target; only run when CPUID reports AVX-VNNI. Exact integer
 * arithmetic, so the lanes equal maddubs+madd's whenever those do not saturate. */
SW_AI __m256i s_dpbusd(__m256i acc, __m256i u, __m256i sgn)
{
    __asm__("%{vex%} vpdpbusd %2, %1, %0" : "+x"(acc) : "x"(u), "x"(sgn));
    return acc;
}

/* ---- 32-element block formats: one tile kernel for all ----------------- */

/* f16 -> f32 for every bit pattern (256 KiB), filled once by sw_kernels_avx2().
 * A table load feeds vbroadcastss straight from memory, which keeps the
 * shuffle port free for the tile kernels. */
static float s_f16_tab[1 << 16];

enum { K_Q4_0, K_Q4_1, K_Q5_0, K_Q5_1, K_Q8_0 };

SW_AI int s_wsize(int kind)
{
    return kind == K_Q4_0   ? 18
           : kind == K_Q4_1 ? 20
           : kind == K_Q5_0 ? 22
           : kind == K_Q5_1 ? 24
                            : 34;
}

SW_AI int s_has_min(int kind)
{
    return kind == K_Q4_1 || kind == K_Q5_1;
}

/* 16 bytes of nibbles -> 32 bytes without a cross-lane shuffle: the 16 bytes
 * are loaded into both halves, the high half shifted right by 4. */
SW_AI __m256i s_nibbles_bc(const uint8_t *qs)
{
    const __m256i b = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)qs));
    const __m256i h = _mm256_blend_epi32(b, _mm256_srli_epi16(b, 4), 0xF0);
    return _mm256_and_si256(h, _mm256_set1_epi8(0x0F));
}

/* The weight block's quants as bytes. Default: signed (q - offset) for the
 * symmetric formats, unsigned for the formats with a minimum. With raw != 0
 * the 4/5-bit quants come back unsigned, without the offset. */
SW_AI __m256i s_wquants(int kind, const uint8_t *p, int raw)
{
    switch (kind) {
    case K_Q4_0:
        if (raw)
            return s_nibbles_bc(p + 2);
        return _mm256_sub_epi8(s_nibbles_bc(p + 2), _mm256_set1_epi8(8));
    case K_Q4_1:
        return s_nibbles_bc(p + 4);
    case K_Q5_0: {
        if (raw) {
            const __m256i hi = _mm256_and_si256(s_bits_to_bytes(p + 2), _mm256_set1_epi8(0x10));
            return _mm256_or_si256(s_nibbles_bc(p + 6), hi);
        }
        // (q | h << 4) - 16 == q | (h ? 0 : 0xF0) as a signed byte
        const __m256i hi =
            _mm256_andnot_si256(s_bits_to_bytes(p + 2), _mm256_set1_epi8((char)0xF0));
        return _mm256_or_si256(s_nibbles_bc(p + 6), hi);
    }
    case K_Q5_1: {
        const __m256i hi = _mm256_and_si256(s_bits_to_bytes(p + 4), _mm256_set1_epi8(0x10));
        return _mm256_or_si256(s_nibbles_bc(p + 8), hi);
    }
    default:
        return _mm256_loadu_si256((const __m256i *)(p + 2));
    }
}

/*
 * y[r * ys + i] = dot(weight row i, activation row r) for i < rw, r < rx.
 * w: first weight row (ws bytes apart), x: first activation row (xs apart),
 * nb blocks per row. rw <= 4, rx <= 2, both compile-time constants.
 *
 * Per pair this is exactly GGML's sequence: acc = fma(d_w * d_x, float(lanes),
 * acc) block by block, then hsum; for q4_1/q5_1 also summs = fma(m_w, s_x,
 * summs) block by block (an independent chain, run as a second pass), added last.
 *
 * q4_0 and q5_0 take their quants unsigned, without the offset (8, 16): the
 * lanes are their products with the activations plus -offset * sum(y) per
 * lane, made once per activation block for the tile's weight rows (exact, so
 * the same integers as GGML's sign trick, with two operations fewer per
 * weight block). vnni != 0 computes the same integer lanes with vpdpbusd:
 * unsigned quants times signed activations; q8_0 x q8_0 as (y + 128) x w -
 * 128 * sum(w).
 */
SW_AI void s_tile32(int kind, int vnni, int rw, int rx, int64_t nb, const uint8_t *w, size_t ws,
                    const uint8_t *x, size_t xs, float *y, int64_t ys)
{
    const int wsz = s_wsize(kind);
    const int hm = s_has_min(kind);
    const int xsz = hm ? 36 : 34; // q8_1 or q8_0
    const int xq = hm ? 4 : 2;    // offset of qs in the activation block
    const float *tab = s_f16_tab;
    const uint8_t *wr[4], *xr[2];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++)
        wr[i] = w + (size_t)(i < rw ? i : 0) * ws;
#pragma GCC unroll 4
    for (int r = 0; r < 2; r++)
        xr[r] = x + (size_t)(r < rx ? r : 0) * xs;
    __m256 acc[4][2];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++)
#pragma GCC unroll 4
        for (int r = 0; r < 2; r++)
            acc[i][r] = _mm256_setzero_ps();
    const __m256i ones = _mm256_set1_epi16(1);

    const int off = kind == K_Q4_0 ? 8 : kind == K_Q5_0 ? 16 : 0; // the weights' offset
    for (int64_t b = 0; b < nb; b++) {
        __m256i qy[2], ybias[2];
        __m256 dy[2];
#pragma GCC unroll 4
        for (int r = 0; r < rx; r++) {
            const uint8_t *px = xr[r] + (size_t)b * xsz;
            qy[r] = _mm256_loadu_si256((const __m256i *)(px + xq));
            dy[r] = _mm256_broadcast_ss(&tab[s_u16(px)]);
            if (off) // -off * sum(y) per lane, once for all weight rows of the tile
                ybias[r] = _mm256_sub_epi32(
                    _mm256_setzero_si256(),
                    vnni ? s_dpbusd(_mm256_setzero_si256(), _mm256_set1_epi8((char)off), qy[r])
                         : _mm256_madd_epi16(
                               _mm256_maddubs_epi16(_mm256_set1_epi8((char)off), qy[r]), ones));
            if (vnni && kind == K_Q8_0) // y + 128 as unsigned bytes
                qy[r] = _mm256_xor_si256(qy[r], _mm256_set1_epi8((char)0x80));
        }
#pragma GCC unroll 4
        for (int i = 0; i < rw; i++) {
            const uint8_t *p = wr[i] + (size_t)b * wsz;
            // the same block SW_PF_ROWS rows below: two tiles ahead when weights stream from DRAM
            s_prefetch(p, SW_PF_ROWS * ws);
            const __m256i q = s_wquants(kind, p, vnni || off);
            const __m256 dw = _mm256_broadcast_ss(&tab[s_u16(p)]);
            __m256i qa = q, wbias = _mm256_setzero_si256();
            if (!vnni && !hm && !off)
                qa = _mm256_sign_epi8(q, q);
            if (vnni && kind == K_Q8_0) // -128 * sum(w) per lane
                wbias = _mm256_sub_epi32(
                    _mm256_setzero_si256(),
                    s_dpbusd(_mm256_setzero_si256(), _mm256_set1_epi8((char)0x80), q));
#pragma GCC unroll 4
            for (int r = 0; r < rx; r++) {
                __m256i lanes;
                if (vnni && kind == K_Q8_0)
                    lanes = s_dpbusd(wbias, qy[r], q);
                else if (vnni)
                    lanes = s_dpbusd(off ? ybias[r] : _mm256_setzero_si256(), q, qy[r]);
                else if (hm)
                    lanes = _mm256_madd_epi16(_mm256_maddubs_epi16(q, qy[r]), ones);
                else if (off) // the unsigned quants' products, then the offset's
                    lanes = _mm256_add_epi32(
                        _mm256_madd_epi16(_mm256_maddubs_epi16(q, qy[r]), ones), ybias[r]);
                else
                    lanes = _mm256_madd_epi16(_mm256_maddubs_epi16(qa, _mm256_sign_epi8(qy[r], q)),
                                              ones);
                const __m256 f = _mm256_cvtepi32_ps(lanes);
                acc[i][r] = _mm256_fmadd_ps(_mm256_mul_ps(dw, dy[r]), f, acc[i][r]);
            }
        }
    }
    float summ[4][2] = {{0.0f}};
    if (hm) {
        for (int64_t b = 0; b < nb; b++)
#pragma GCC unroll 4
            for (int i = 0; i < rw; i++)
#pragma GCC unroll 4
                for (int r = 0; r < rx; r++)
                    summ[i][r] = fmaf(tab[s_u16(wr[i] + (size_t)b * wsz + 2)],
                                      tab[s_u16(xr[r] + (size_t)b * xsz + 2)], summ[i][r]);
    }
#pragma GCC unroll 4
    for (int r = 0; r < rx; r++)
#pragma GCC unroll 4
        for (int i = 0; i < rw; i++) {
            float v = sw_x86_hsum8(acc[i][r]);
            if (hm)
                v = v + summ[i][r];
            y[r * ys + i] = v;
        }
}

#define SW_RCHUNK 64 // activation rows kept hot (in L2) while the weights stream past

SW_AI void s_mm32(int kind, int vnni, int64_t n, const void *w, size_t w_stride, int64_t o0,
                  int64_t o1, const void *x, size_t x_stride, int nr, float *y, int64_t y_stride)
{
    const int64_t nb = n / SW_QK;
    const uint8_t *wb = w, *xb = x;
    for (int r0 = 0; r0 < nr; r0 += SW_RCHUNK) {
        const int r1 = nr - r0 > SW_RCHUNK ? r0 + SW_RCHUNK : nr;
        int64_t o = o0;
        for (; o + 4 <= o1; o += 4) {
            const uint8_t *wo = wb + (size_t)o * w_stride;
            int r = r0;
            for (; r + 2 <= r1; r += 2)
                s_tile32(kind, vnni, 4, 2, nb, wo, w_stride, xb + (size_t)r * x_stride, x_stride,
                         y + r * y_stride + o, y_stride);
            for (; r < r1; r++)
                s_tile32(kind, vnni, 4, 1, nb, wo, w_stride, xb + (size_t)r * x_stride, x_stride,
                         y + r * y_stride + o, y_stride);
        }
        for (; o < o1; o++) {
            const uint8_t *wo = wb + (size_t)o * w_stride;
            int r = r0;
            for (; r + 2 <= r1; r += 2)
                s_tile32(kind, vnni, 1, 2, nb, wo, w_stride, xb + (size_t)r * x_stride, x_stride,
                         y + r * y_stride + o, y_stride);
            for (; r < r1; r++)
                s_tile32(kind, vnni, 1, 1, nb, wo, w_stride, xb + (size_t)r * x_stride, x_stride,
                         y + r * y_stride + o, y_stride);
        }
    }
}

#define SW_DEF32(name, kind, vnni)                                                                 \
    static void s_dot_##name(int64_t n, float *s, const void *w, const void *x)                    \
    {                                                                                              \
        s_tile32(kind, vnni, 1, 1, n / SW_QK, w, 0, x, 0, s, 0);                                   \
    }                                                                                              \
    static void s_mm_##name(int64_t n, const void *w, size_t w_stride, int64_t o0, int64_t o1,     \
                            const void *x, size_t x_stride, int nr, float *y, int64_t y_stride)    \
    {                                                                                              \
        s_mm32(kind, vnni, n, w, w_stride, o0, o1, x, x_stride, nr, y, y_stride);                  \
    }

SW_DEF32(q4_0, K_Q4_0, 0)
SW_DEF32(q4_1, K_Q4_1, 0)
SW_DEF32(q5_0, K_Q5_0, 0)
SW_DEF32(q5_1, K_Q5_1, 0)
SW_DEF32(q8_0, K_Q8_0, 0)
SW_DEF32(q4_0_vnni, K_Q4_0, 1)
SW_DEF32(q4_1_vnni, K_Q4_1, 1)
SW_DEF32(q5_0_vnni, K_Q5_0, 1)
SW_DEF32(q5_1_vnni, K_Q5_1, 1)
SW_DEF32(q8_0_vnni, K_Q8_0, 1)

/* ---- K-quants ----------------------------------------------------------- */

/*
 * The minimums of a q4_K/q5_K super-block (b of nb, unpacked mins; scales
 * dw, dminw) against activation blocks xb[r], r < rx: d[r] = d_x * d_w, and
 * mins . bsums into mt[r] (tiled), accm[r] (q4_K) or summs[r] (q5_K). q8p as
 * in s_tile_k.
 */
SW_AI void s_k45_mins(int kind, int tiled, int rx, int64_t nb, int64_t b, __m128i mins, float dw,
                      float dminw, const sw_block_q8_k *const *xb, const __m128i *q8p, float *d,
                      __m128 *accm, float *summs, int32_t *mt)
{
#pragma GCC unroll 8
    for (int r = 0; r < rx; r++) {
        const float yd = xb[r]->d;
        d[r] = yd * dw;
        const float dmin = -yd * dminw;
        __m128i q8s;
        if (q8p != NULL) {
            q8s = _mm_load_si128(q8p + (size_t)r * nb + b);
        } else {
            const __m256i bs = _mm256_loadu_si256((const __m256i *)xb[r]->bsums);
            q8s = s_bsum_pairs(bs);
        }
        const __m128i prod = _mm_madd_epi16(mins, q8s);
        if (tiled) {
            const __m128i z = _mm_setzero_si128();
            mt[r] = _mm_cvtsi128_si32(_mm_hadd_epi32(_mm_hadd_epi32(prod, z), z));
        } else if (kind == K_Q4_K) {
            accm[r] = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(prod), accm[r]);
        } else {
            const __m128i z = _mm_setzero_si128();
            const __m128i hs = _mm_hadd_epi32(_mm_hadd_epi32(prod, z), z);
            summs[r] = fmaf(dmin, (float)_mm_cvtsi128_si32(hs), summs[r]);
        }
    }
}

/* s_tile_k's horizontal sums: y[r * ys] for r < rx from the per-row
 * accumulators (tiled: ty, already summed per block). */
SW_AI void s_k_store(int kind, int tiled, int rx, const __m256 *acc, const __m128 *accm,
                     const float *summs, const float *ty, float *y, int64_t ys)
{
#pragma GCC unroll 8
    for (int r = 0; r < rx; r++) {
        if (tiled) {
            y[r * ys] = ty[r];
            continue;
        }
        float v = sw_x86_hsum8(acc[r]);
        if (kind == K_Q4_K) {
            __m128 m = _mm_add_ps(accm[r], _mm_movehl_ps(accm[r], accm[r]));
            m = _mm_add_ss(m, _mm_movehdup_ps(m));
            v = v + _mm_cvtss_f32(m);
        } else if (kind == K_Q5_K) {
            v = v + summs[r];
        }
        y[r * ys] = v;
    }
}

/*
 * y[r * ys] = dot(one K-quant weight row, activation row r) for r < rx (<= 8,
 * a compile-time constant); x rows xs bytes apart. Per pair this is GGML's
 * AVX2 sequence: per super-block an exact int32 8-lane sum (sub-block scales
 * applied with madd), acc = fma(d_x * d_w, float(lanes), acc); q4_K adds
 * accm = fma(dmin, float(mins . bsums), accm) in 4 lanes, q5_K summs =
 * fma(dmin, sum, summs); then the horizontal sums. q8p (q4_K/q5_K; NULL:
 * computed here) holds those blocks' s_bsum_pairs, nb per row. Unpacking the weight
 * super-block once serves all rx activation rows. The integer lanes are exact
 * (no saturation can occur), so vnni != 0 may fuse each madd + add into one
 * vpdpwssd and the lanes stay the same integers.
 */
SW_AI void s_tile_k(int kind, int vnni, int tiled, int rx, int64_t nb, const uint8_t *w, size_t pf,
                    const uint8_t *x, size_t xs, const __m128i *q8p, float *y, int64_t ys)
{
    const int wsz = kind == K_Q4_K ? 144 : kind == K_Q5_K ? 176 : 210;
    __m256 acc[8];
    __m128 accm[8];
    float summs[8], ty[8];
    int32_t mt[8]; // tiled: the block's minimums total per row
#pragma GCC unroll 8
    for (int r = 0; r < 8; r++) {
        acc[r] = _mm256_setzero_ps();
        accm[r] = _mm_setzero_ps();
        summs[r] = ty[r] = 0.0f;
        mt[r] = 0;
    }
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *pw = w + (size_t)b * wsz;
        if (pf) // the same super-block SW_PF_ROWS rows below
            for (int off = 0; off < wsz; off += 64)
                s_prefetch(pw, pf + (size_t)off);
        const sw_block_q8_k *xb[8];
        /* Integer lanes; for one or two rows a second set (sumj) halves the
         * dependency chains, added at the end (exact, so the same integers). */
        __m256i sumi[8], sumj[8];
        const int split = rx <= 2;
        float d[8], dw = 0.0f, dminw = 0.0f;
#pragma GCC unroll 8
        for (int r = 0; r < rx; r++) {
            xb[r] = (const sw_block_q8_k *)(x + (size_t)r * xs) + b;
            sumi[r] = _mm256_setzero_si256();
            sumj[r] = _mm256_setzero_si256();
        }
        if (kind == K_Q6_K) {
            dw = s_q6k_block(vnni, split, tiled, rx, pw, xb, d, sumi, sumj);
        } else {
            const sw_block_q4_k *q4 = (const sw_block_q4_k *)pw; // q5_K starts alike
            dw = _cvtsh_ss(q4->d);
            dminw = _cvtsh_ss(q4->dmin);
            const __m256i ms = s_k45_block(kind, vnni, split, rx, pw, xb, sumi, sumj);
            s_k45_mins(kind, tiled, rx, nb, b, _mm256_extracti128_si256(ms, 1), dw, dminw, xb, q8p,
                       d, accm, summs, mt);
        }
#pragma GCC unroll 8
        for (int r = 0; r < rx; r++) {
            if (split)
                sumi[r] = _mm256_add_epi32(sumi[r], sumj[r]);
        }
        if (tiled) {
#pragma GCC unroll 8
            for (int r = 0; r < rx; r++) {
                __m128i t = _mm_add_epi32(_mm256_castsi256_si128(sumi[r]),
                                          _mm256_extracti128_si256(sumi[r], 1));
                t = _mm_hadd_epi32(_mm_hadd_epi32(t, t), t);
                float v = dw * (float)_mm_cvtsi128_si32(t);
                if (kind != K_Q6_K)
                    v = fmaf(-dminw, (float)mt[r], v);
                ty[r] = fmaf(v, xb[r]->d, ty[r]);
            }
            continue;
        }
#pragma GCC unroll 8
        for (int r = 0; r < rx; r++)
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d[r]), _mm256_cvtepi32_ps(sumi[r]), acc[r]);
    }
    s_k_store(kind, tiled, rx, acc, accm, summs, ty, y, ys);
}

/* One weight row against rows [r0, r1) of x, in near-equal groups of at most
 * 8 activation rows: each weight super-block is unpacked once per group. */
SW_AI void s_row_k(int kind, int vnni, int tiled, int64_t nb, const uint8_t *wo, size_t pf,
                   const uint8_t *x, size_t xs, const __m128i *q8p, int r0, int r1, float *y,
                   int64_t ys)
{
    const int len = r1 - r0, groups = (len + 7) / 8;
    int r = r0;
    for (int g = 0; g < groups; g++) {
        const int sz = len / groups + (g < len % groups ? 1 : 0);
        const uint8_t *xr = x + (size_t)r * xs;
        const __m128i *q8r = q8p != NULL ? q8p + (size_t)(r - r0) * nb : NULL;
        float *yr = y + r * ys;
        switch (sz) {
#define SW_CASEK(m)                                                                                \
    case m:                                                                                        \
        s_tile_k(kind, vnni, tiled, m, nb, wo, pf, xr, xs, q8r, yr, ys);                           \
        break;
            SW_CASEK(1)
            SW_CASEK(2)
            SW_CASEK(3)
            SW_CASEK(4)
            SW_CASEK(5)
            SW_CASEK(6)
            SW_CASEK(7)
            SW_CASEK(8)
#undef SW_CASEK
        default:
            break;
        }
        r += sz;
    }
}

SW_AI void s_mm_k(int kind, int vnni, int tiled, int64_t n, const void *w, size_t w_stride,
                  int64_t o0, int64_t o1, const void *x, size_t x_stride, int nr, float *y,
                  int64_t y_stride)
{
    const int64_t nb = n / SW_QK_K;
    const uint8_t *wb = w, *xb = x;
    const size_t pf = SW_PF_ROWS * w_stride;
    /* q4_K/q5_K: the activation blocks' bsum pairs, computed once per call
     * instead of once per (weight row, activation row, super-block). */
    enum { PRE_MAX = 2048 }; // 32 KiB of stack
    __m128i pre[kind == K_Q6_K ? 1 : PRE_MAX];
    int rchunk = SW_RCHUNK;
    if (kind != K_Q6_K) {
        if (nb > PRE_MAX) { // a row longer than 512Ki elements: per-pair kernel
            for (int r = 0; r < nr; r++)
                for (int64_t o = o0; o < o1; o++)
                    s_tile_k(kind, vnni, tiled, 1, nb, wb + (size_t)o * w_stride, 0,
                             xb + (size_t)r * x_stride, 0, NULL, y + r * y_stride + o, 0);
            return;
        }
        if (rchunk > PRE_MAX / nb)
            rchunk = (int)(PRE_MAX / nb);
    }
    for (int r0 = 0; r0 < nr; r0 += rchunk) {
        const int r1 = nr - r0 > rchunk ? r0 + rchunk : nr;
        if (kind != K_Q6_K)
            for (int r = r0; r < r1; r++) {
                const sw_block_q8_k *xr = (const sw_block_q8_k *)(xb + (size_t)r * x_stride);
                for (int64_t b = 0; b < nb; b++)
                    pre[(size_t)(r - r0) * nb + b] =
                        s_bsum_pairs(_mm256_loadu_si256((const __m256i *)xr[b].bsums));
            }
        for (int64_t o = o0; o < o1; o++)
            s_row_k(kind, vnni, tiled, nb, wb + (size_t)o * w_stride, pf, xb, x_stride,
                    kind == K_Q6_K ? NULL : pre, r0, r1, y + o, y_stride);
    }
}

#define SW_DEFK(name, kind, vnni, tiled)                                                           \
    static void s_dot_##name(int64_t n, float *s, const void *w, const void *x)                    \
    {                                                                                              \
        s_tile_k(kind, vnni, tiled, 1, n / SW_QK_K, w, 0, x, 0, NULL, s, 0);                       \
    }                                                                                              \
    static void s_mm_##name(int64_t n, const void *w, size_t w_stride, int64_t o0, int64_t o1,     \
                            const void *x, size_t x_stride, int nr, float *y, int64_t y_stride)    \
    {                                                                                              \
        s_mm_k(kind, vnni, tiled, n, w, w_stride, o0, o1, x, x_stride, nr, y, y_stride);           \
    }

SW_DEFK(q4_k, K_Q4_K, 0, 0)
SW_DEFK(q5_k, K_Q5_K, 0, 0)
SW_DEFK(q6_k, K_Q6_K, 0, 0)
SW_DEFK(q4_k_vnni, K_Q4_K, 1, 0)
SW_DEFK(q5_k_vnni, K_Q5_K, 1, 0)
SW_DEFK(q6_k_vnni, K_Q6_K, 1, 0)
/* The tiled order (sw_matmul_tiled): one pair here, the matmuls in quant_mmt_avx2.c. */
#define SW_DEFKT(name, kind, vnni)                                                                 \
    static void s_dot_##name(int64_t n, float *s, const void *w, const void *x)                    \
    {                                                                                              \
        s_tile_k(kind, vnni, 1, 1, n / SW_QK_K, w, 0, x, 0, NULL, s, 0);                           \
    }
SW_DEFKT(q4_k_t, K_Q4_K, 0)
SW_DEFKT(q5_k_t, K_Q5_K, 0)
SW_DEFKT(q6_k_t, K_Q6_K, 0)
SW_DEFKT(q4_k_t_vnni, K_Q4_K, 1)
SW_DEFKT(q5_k_t_vnni, K_Q5_K, 1)
SW_DEFKT(q6_k_t_vnni, K_Q6_K, 1)

/* ---- F16 / F32 / BF16 --------------------------------------------------- */

/* GGML_F32x8_REDUCE: (s0+s2)+(s1+s3), then low+high halves, then two hadds. */
SW_AI float s_reduce4(__m256 s0, __m256 s1, __m256 s2, __m256 s3)
{
    s0 = _mm256_add_ps(s0, s2);
    s1 = _mm256_add_ps(s1, s3);
    s0 = _mm256_add_ps(s0, s1);
    const __m128 t0 = _mm_add_ps(_mm256_castps256_ps128(s0), _mm256_extractf128_ps(s0, 1));
    const __m128 t1 = _mm_hadd_ps(t0, t0);
    return _mm_cvtss_f32(_mm_hadd_ps(t1, t1));
}

static void s_dot_f16(int64_t n, float *s, const void *vw, const void *vx)
{
    const sw_f16 *w = vw, *x = vx;
    const int64_t np = n & ~(int64_t)31;
    __m256 sum[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                     _mm256_setzero_ps()};
    for (int64_t i = 0; i < np; i += 32)
        for (int j = 0; j < 4; j++) {
            const __m256 a = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + i + 8 * j)));
            const __m256 c = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i + 8 * j)));
            sum[j] = _mm256_fmadd_ps(a, c, sum[j]);
        }
    double sumf = s_reduce4(sum[0], sum[1], sum[2], sum[3]);
    for (int64_t i = np; i < n; i++)
        sumf += (double)(_cvtsh_ss(w[i]) * _cvtsh_ss(x[i]));
    *s = (float)sumf;
}

static void s_dot_f32(int64_t n, float *s, const void *vw, const void *vx)
{
    const float *w = vw, *x = vx;
    const int64_t np = n & ~(int64_t)31;
    __m256 sum[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                     _mm256_setzero_ps()};
    for (int64_t i = 0; i < np; i += 32)
        for (int j = 0; j < 4; j++)
            sum[j] = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 8 * j), _mm256_loadu_ps(x + i + 8 * j),
                                     sum[j]);
    float sumf = s_reduce4(sum[0], sum[1], sum[2], sum[3]);
    /* GGML's tail is "sumf += x[i]*y[i]" compiled by GCC with contraction on:
     * it vectorises the products of groups of 8 and then 4 (separate multiply
     * and add) and fuses only the last 0..3. Mirrored so that the bits match. */
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

SW_AI __m256 s_bf16x8(const sw_bf16 *p)
{
    const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

static void s_dot_bf16(int64_t n, float *s, const void *vw, const void *vx)
{
    const sw_bf16 *w = vw, *x = vx;
    const int64_t np = n & ~(int64_t)31;
    __m256 c[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps()};
    for (int64_t i = 0; i < np; i += 32)
        for (int j = 0; j < 4; j++)
            c[j] = _mm256_fmadd_ps(s_bf16x8(w + i + 8 * j), s_bf16x8(x + i + 8 * j), c[j]);
    const __m256 t = _mm256_add_ps(_mm256_add_ps(c[0], c[2]), _mm256_add_ps(c[1], c[3]));
    double sumf = sw_x86_hsum8(t);
    for (int64_t i = np; i < n; i++) {
        float a, b;
        uint32_t ua = (uint32_t)w[i] << 16, ub = (uint32_t)x[i] << 16;
        memcpy(&a, &ua, 4);
        memcpy(&b, &ub, 4);
        sumf += (double)(a * b);
    }
    *s = (float)sumf;
}

/* ---- activation quantizers (bit-identical to quant.c's) ----------------- */

/* Quantizes 32 floats: returns the 4 int32 vectors (rounded, before packing) and amax. */
SW_AI float s_q8_block(const float *x, __m256i out[4], float *d_out)
{
    __m256 v[4];
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 mx = _mm256_setzero_ps();
    for (int k = 0; k < 4; k++) {
        v[k] = _mm256_loadu_ps(x + 8 * k);
        mx = _mm256_max_ps(mx, _mm256_andnot_ps(sign, v[k]));
    }
    __m128 m4 = _mm_max_ps(_mm256_extractf128_ps(mx, 1), _mm256_castps256_ps128(mx));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float amax = _mm_cvtss_f32(m4);
    const float d = amax / 127.f;
    const float id = amax != 0.0f ? 127.f / amax : 0.0f;
    const __m256 mul = _mm256_set1_ps(id);
    for (int k = 0; k < 4; k++)
        out[k] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v[k], mul),
                                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    *d_out = d;
    return amax;
}

SW_AI __m256i s_pack8(const __m256i i[4])
{
    const __m256i a = _mm256_packs_epi32(i[0], i[1]);
    const __m256i b = _mm256_packs_epi32(i[2], i[3]);
    const __m256i c = _mm256_packs_epi16(a, b);
    return _mm256_permutevar8x32_epi32(c, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

void sw_quantize_q8_0_avx2(const float *x, void *vy, int64_t n)
{
    sw_block_q8_0 *y = vy;
    for (int64_t b = 0; b < n / SW_QK; b++, x += SW_QK) {
        __m256i q[4];
        float d;
        s_q8_block(x, q, &d);
        y[b].d = _cvtss_sh(d, 0);
        _mm256_storeu_si256((__m256i *)y[b].qs, s_pack8(q));
    }
}

void sw_quantize_q8_1_avx2(const float *x, void *vy, int64_t n)
{
    sw_block_q8_1 *y = vy;
    for (int64_t b = 0; b < n / SW_QK; b++, x += SW_QK) {
        __m256i q[4];
        float d;
        s_q8_block(x, q, &d);
        y[b].d = _cvtss_sh(d, 0);
        const __m256i s8 =
            _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
        y[b].s = _cvtss_sh(d * (float)sw_x86_hsum_i32(s8), 0);
        _mm256_storeu_si256((__m256i *)y[b].qs, s_pack8(q));
    }
}

/* sw_quant_block_q8_k with AVX2, the very same operations per element: the
 * largest |x| (NaN never wins, as in the scalar comparison), the first
 * element that has it, iscale * x rounded through the 1.5 * 2^23 trick,
 * capped at 127, the group sums in integers. */
void sw_quantize_q8_k_avx2(const float *x, void *vy, int64_t n)
{
    sw_block_q8_k *y = vy;
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t b = 0; b < n / SW_QK_K; b++, x += SW_QK_K) {
        __m256 am = _mm256_setzero_ps();
        for (int j = 0; j < SW_QK_K; j += 8)
            am = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)), am);
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(am), _mm256_extractf128_ps(am, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        const float amax = _mm_cvtss_f32(m4);
        if (amax == 0.0f) {
            memset(&y[b], 0, sizeof y[b]);
            continue;
        }
        float max = 0.0f;
        const __m256 av = _mm256_set1_ps(amax);
        for (int j = 0; j < SW_QK_K; j += 8) {
            const __m256 v = _mm256_loadu_ps(x + j);
            const int m =
                _mm256_movemask_ps(_mm256_cmp_ps(_mm256_andnot_ps(sign, v), av, _CMP_EQ_OQ));
            if (m != 0) {
                max = x[j + __builtin_ctz((unsigned)m)];
                break;
            }
        }
        const float iscale = -127.f / max;
        const __m256 is = _mm256_set1_ps(iscale), magic = _mm256_set1_ps(12582912.f);
        const __m256i mant = _mm256_set1_epi32(0x007fffff), half = _mm256_set1_epi32(0x00400000);
        const __m256i cap = _mm256_set1_epi32(127);
        const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
        __m256i s4[8]; // per 32 elements: the sums of 4 consecutive quants
        for (int c = 0; c < 8; c++) {
            __m256i q[4];
            for (int k = 0; k < 4; k++) {
                const __m256 t =
                    _mm256_add_ps(_mm256_mul_ps(is, _mm256_loadu_ps(x + 32 * c + 8 * k)), magic);
                const __m256i i =
                    _mm256_sub_epi32(_mm256_and_si256(_mm256_castps_si256(t), mant), half);
                q[k] = _mm256_min_epi32(i, cap);
            }
            const __m256i p = s_pack8(q);
            _mm256_storeu_si256((__m256i *)(y[b].qs + 32 * c), p);
            s4[c] = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, p), ones16);
        }
        int32_t g[16];
        for (int c = 0; c < 8; c += 4) {
            /* [c: lanes 0-3, c+1: 0-3, c+2, c+3 | the same of lanes 4-7] */
            const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(s4[c], s4[c + 1]),
                                                _mm256_hadd_epi32(s4[c + 2], s4[c + 3]));
            int32_t t[8];
            _mm256_storeu_si256((__m256i *)t, h);
            for (int k = 0; k < 4; k++) {
                g[2 * (c + k)] = t[k];
                g[2 * (c + k) + 1] = t[4 + k];
            }
        }
        for (int k = 0; k < 16; k++)
            y[b].bsums[k] = (int16_t)g[k];
        y[b].d = 1 / iscale;
    }
}

int sw_cpu_has_avxvnni(void)
{
    unsigned a, b, c, d;
    if (getenv("SW_NO_VNNI") != NULL) // tests and benchmarks: compare with the plain AVX2 tiles
        return 0;
    if (!__get_cpuid_count(7, 1, &a, &b, &c, &d))
        return 0;
    return (a >> 4) & 1u; // CPUID.(EAX=7,ECX=1):EAX[4] = AVX-VNNI
}

void sw_kernels_avx2(struct sw_kernels *k)
{
    for (uint32_t h = 0; h < (1u << 16); h++)
        s_f16_tab[h] = _cvtsh_ss((unsigned short)h);
    if (sw_cpu_has_avxvnni()) {
        k->dot[SW_TYPE_Q4_0] = s_dot_q4_0_vnni;
        k->dot[SW_TYPE_Q4_1] = s_dot_q4_1_vnni;
        k->dot[SW_TYPE_Q5_0] = s_dot_q5_0_vnni;
        k->dot[SW_TYPE_Q5_1] = s_dot_q5_1_vnni;
        k->dot[SW_TYPE_Q8_0] = s_dot_q8_0_vnni;
        k->mm[SW_TYPE_Q4_0] = s_mm_q4_0_vnni;
        k->mm[SW_TYPE_Q4_1] = s_mm_q4_1_vnni;
        k->mm[SW_TYPE_Q5_0] = s_mm_q5_0_vnni;
        k->mm[SW_TYPE_Q5_1] = s_mm_q5_1_vnni;
        k->mm[SW_TYPE_Q8_0] = s_mm_q8_0_vnni;
    } else {
        k->dot[SW_TYPE_Q4_0] = s_dot_q4_0;
        k->dot[SW_TYPE_Q4_1] = s_dot_q4_1;
        k->dot[SW_TYPE_Q5_0] = s_dot_q5_0;
        k->dot[SW_TYPE_Q5_1] = s_dot_q5_1;
        k->dot[SW_TYPE_Q8_0] = s_dot_q8_0;
        k->mm[SW_TYPE_Q4_0] = s_mm_q4_0;
        k->mm[SW_TYPE_Q4_1] = s_mm_q4_1;
        k->mm[SW_TYPE_Q5_0] = s_mm_q5_0;
        k->mm[SW_TYPE_Q5_1] = s_mm_q5_1;
        k->mm[SW_TYPE_Q8_0] = s_mm_q8_0;
    }
    const int vnni = sw_cpu_has_avxvnni();
    k->dot[SW_TYPE_Q4_K] = vnni ? s_dot_q4_k_vnni : s_dot_q4_k;
    k->dot[SW_TYPE_Q5_K] = vnni ? s_dot_q5_k_vnni : s_dot_q5_k;
    k->dot[SW_TYPE_Q6_K] = vnni ? s_dot_q6_k_vnni : s_dot_q6_k;
    k->dot[SW_TYPE_F16] = s_dot_f16;
    k->dot[SW_TYPE_F32] = s_dot_f32;
    k->dot[SW_TYPE_BF16] = s_dot_bf16;
    // the float types use the generic per-pair matmul (each weight row stays in L1)
    k->mm[SW_TYPE_Q4_K] = vnni ? s_mm_q4_k_vnni : s_mm_q4_k;
    k->mm[SW_TYPE_Q5_K] = vnni ? s_mm_q5_k_vnni : s_mm_q5_k;
    k->mm[SW_TYPE_Q6_K] = vnni ? s_mm_q6_k_vnni : s_mm_q6_k;
    k->tdot[SW_TYPE_Q4_K] = vnni ? s_dot_q4_k_t_vnni : s_dot_q4_k_t;
    k->tdot[SW_TYPE_Q5_K] = vnni ? s_dot_q5_k_t_vnni : s_dot_q5_k_t;
    k->tdot[SW_TYPE_Q6_K] = vnni ? s_dot_q6_k_t_vnni : s_dot_q6_k_t;
    sw_kernels_avx2_mmt(k, vnni);
    k->mm[SW_TYPE_F16] = NULL;
    k->mm[SW_TYPE_F32] = NULL;
    k->mm[SW_TYPE_BF16] = NULL;
}
