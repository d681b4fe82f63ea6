/*
 * quant_avx512.c - AVX-512 VNNI kernels for the tiled K-quant order
 * (sw_matmul_tiled: q2_K, q3_K, q4_K, q5_K, q6_K and iq4_xs weights against
 * q8_K activations, the prompt windows of 8 rows or more). Compiled with -mavx512f -mavx512bw
 * -mavx512vl -mavx512dq -mavx512vnni; quant.c only calls in here after
 * checking the CPU (and the OS's ZMM state) at start-up.
 *
 * The tiled order fixes only this per (weight row, activation row) pair and
 * super-block: the exact int32 total t of the block's dot product with the
 * sub-block scales applied, for q4_K/q5_K the exact total m of the minimums
 * times the activation's sub-block sums, then
 *
 *   r = d_w * float(t);  r = fma(-dmin_w, float(m), r);  y = fma(r, d_x, y)
 *
 * over the super-blocks in order. How the integers are formed is free (they
 * are exact), so this file forms them the fast way: the weights of 16 rows
 * are unpacked once into bytes laid out [4-element group][row][4 bytes] (one
 * zmm = the same 4 elements of 16 rows), and vpdpbusd multiplies that with the
 * activation's 4 bytes broadcast from the q8_K row as it is: 64 exact
 * products a instruction, one int32 lane per weight row. The sub-block scale
 * is applied to each sub-block's total (vpmulld), the minimums and q6_K's -32
 * offset through the activation's bsums (vpdpwssd); the three float operations
 * then run on 16 weight rows at once, in exactly the order above. So every
 * element is bit-identical to the scalar and AVX2 sw_matmul_tiled
 * (tests/unit/test_quant.c checks it, every type, odd shapes).
 *
 * Blocking: weight rows in tiles of 32 (2 panels of 16) and the reduction in
 * slabs of 4 super-blocks; a tile's slab is unpacked once (45 KiB of stack) and serves
 * every activation row; activation rows go 1..8 at a time through each panel,
 * their partial sums kept in registers over the slab and in y between slabs
 * (y holds exact floats, so storing and reloading it changes nothing).
 */
#include "quant.h"
#include "quant_impl.h"
#include "quant_math.h" // sw_q3_k_scale, sw_iq4_xs_scale

#include <immintrin.h>
#include <string.h>

/* SW_AI, sw_x86_f16, sw_x86_u32, sw_x86_transpose16; the kernels spell out where the tiled order
 * fuses a multiply-add, so quant_x86.h turns the compiler's contraction off. */
#include "quant_kchunk_avx512.h" // K_*, S_NSUB, S_BSZ, s_chunk
#include "quant_x86.h"

#define S_PANEL 16 // weight rows per panel: the 16 int32 lanes of a zmm
#define S_SLAB 4   // super-blocks per slab
#define S_PANELS 2 // panels per tile (32 weight rows)
#define S_AROWS 8  // most activation rows per microtile (24 zmm of sums)

/* One super-block of a panel, unpacked. 5760 bytes, a multiple of 64. */
struct s_psb {
    uint8_t q[64][S_PANEL][4]; // group g, lane i: elements 4g..4g+3 of row i, unsigned
                               // (q4_K 0..15, q5_K 0..31, q6_K 0..63 before its -32,
                               // q2_K 0..3, q3_K 0..7 before its -4, iq4_xs level + 128)
    int32_t sc[16][S_PANEL];   // sub-block scales (q4_K/q5_K: 8 of 0..63; q6_K: 16, signed;
                               // q2_K: 16 of 0..15; q3_K: 16 of -32..31; iq4_xs: 8 of -32..31)
    int32_t mp[8][S_PANEL];    // int16 pairs: q4_K/q5_K the minimums of sub-blocks 2p, 2p+1
                               // (4 used); q6_K and q3_K the scales of its sub-blocks 2p, 2p+1;
                               // q2_K its minimums 2p, 2p+1; iq4_xs its scales 2p, 2p+1 (4 used)
    float d[S_PANEL];          // super-scale
    float dmin[S_PANEL];       // q4_K/q5_K: super-scale of the minimums
};
_Static_assert(sizeof(struct s_psb) % 64 == 0, "panel blocks stay 64-byte aligned");

/* The int16 pair (a, b) as one int32 lane. */
SW_AI int32_t s_pair16(int a, int b)
{
    return (int32_t)((uint32_t)(uint16_t)(int16_t)a | (uint32_t)(uint16_t)(int16_t)b << 16);
}

/* Lane i of p's scales, pairs and super-scales from a q2_K, q3_K or iq4_xs block. */
SW_AI void s_scales_lowbit(int kind, const uint8_t *blk, int i, struct s_psb *p)
{
    int sc[16] = {0}, mp[16] = {0};
    if (kind == K_Q2_K) {
        const sw_block_q2_k *b = (const sw_block_q2_k *)blk;
        for (int s = 0; s < 16; s++) {
            sc[s] = b->scales[s] & 0xF;
            mp[s] = b->scales[s] >> 4; // the minimums
        }
        p->d[i] = sw_x86_f16(&b->d);
        p->dmin[i] = sw_x86_f16(&b->dmin);
    } else if (kind == K_Q3_K) {
        const sw_block_q3_k *b = (const sw_block_q3_k *)blk;
        for (int s = 0; s < 16; s++)
            sc[s] = mp[s] = sw_q3_k_scale(b->scales, s);
        p->d[i] = sw_x86_f16(&b->d);
        p->dmin[i] = 0.0f;
    } else {
        const sw_block_iq4_xs *b = (const sw_block_iq4_xs *)blk;
        for (int s = 0; s < 8; s++)
            sc[s] = mp[s] = sw_iq4_xs_scale(b, s);
        p->d[i] = sw_x86_f16(&b->d);
        p->dmin[i] = 0.0f;
    }
    for (int s = 0; s < 16; s++)
        p->sc[s][i] = sc[s];
    for (int q = 0; q < 8; q++)
        p->mp[q][i] = s_pair16(mp[2 * q], mp[2 * q + 1]);
}

/* Unpacks super-block b of rows [0, nrows) (nrows <= 16; w: row 0, ws bytes
 * apart) into p; the lanes of missing rows are zero. */
SW_AI void s_unpack(int kind, const uint8_t *w, size_t ws, int nrows, int64_t b, struct s_psb *p)
{
    const size_t bsz = S_BSZ(kind);
    const uint8_t *blk[S_PANEL];
    for (int i = 0; i < S_PANEL; i++)
        blk[i] = w + (size_t)(i < nrows ? i : 0) * ws + (size_t)b * bsz;
    for (int c = 0; c < 4; c++) {
        __m512i v[16];
#pragma GCC unroll 16
        for (int i = 0; i < S_PANEL; i++)
            v[i] = i < nrows ? s_chunk(kind, blk[i], c) : _mm512_setzero_si512();
        sw_x86_transpose16(v);
#pragma GCC unroll 16
        for (int j = 0; j < 16; j++)
            _mm512_store_si512((__m512i *)p->q[16 * c + j], v[j]);
    }
    for (int i = 0; i < S_PANEL; i++) {
        if (i >= nrows) {
            for (int s = 0; s < 16; s++)
                p->sc[s][i] = 0;
            for (int s = 0; s < 8; s++)
                p->mp[s][i] = 0;
            p->d[i] = p->dmin[i] = 0.0f;
            continue;
        }
        if (kind == K_Q2_K || kind == K_Q3_K || kind == K_IQ4_XS) {
            s_scales_lowbit(kind, blk[i], i, p);
        } else if (kind == K_Q6_K) {
            const sw_block_q6_k *q6 = (const sw_block_q6_k *)blk[i];
            for (int s = 0; s < 16; s++)
                p->sc[s][i] = q6->scales[s];
            for (int s = 0; s < 8; s++)
                p->mp[s][i] = (int32_t)((uint32_t)(uint16_t)(int16_t)q6->scales[2 * s] |
                                        (uint32_t)(uint16_t)(int16_t)q6->scales[2 * s + 1] << 16);
            p->d[i] = sw_x86_f16(&q6->d);
            p->dmin[i] = 0.0f;
        } else {
            uint8_t sc[8], mn[8];
            for (int s = 0; s < 8; s++)
                sw_scale_min_k4(s, blk[i] + 4, &sc[s], &mn[s]);
            for (int s = 0; s < 8; s++) {
                p->sc[s][i] = sc[s];
                p->sc[8 + s][i] = 0;
            }
            for (int s = 0; s < 4; s++) {
                p->mp[s][i] = (int32_t)((uint32_t)mn[2 * s] | (uint32_t)mn[2 * s + 1] << 16);
                p->mp[4 + s][i] = 0;
            }
            p->d[i] = sw_x86_f16((const sw_f16 *)blk[i]);
            p->dmin[i] = sw_x86_f16((const sw_f16 *)(blk[i] + 2));
        }
    }
}

/*
 * y[a * ys + i] (lane i of mask m) for a < ma: the sums of one panel (nsb
 * super-blocks of it, from p) with activation rows x + a * xs (pointing at
 * the slab's first q8_K block), continued from y (first == 0) or from zero.
 */
SW_AI void s_micro(int kind, int ma, const struct s_psb *p, int nsb, const uint8_t *x, size_t xs,
                   int first, float *y, int64_t ys, __mmask16 m)
{
    const int nsub = S_NSUB(kind), gps = 64 / nsub;
    __m512 acc[S_AROWS];
#pragma GCC unroll 8
    for (int a = 0; a < ma; a++)
        acc[a] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m, y + a * ys);
    for (int sb = 0; sb < nsb; sb++) {
        const struct s_psb *ps = p + sb;
        const sw_block_q8_k *xb[S_AROWS];
#pragma GCC unroll 8
        for (int a = 0; a < ma; a++)
            xb[a] = (const sw_block_q8_k *)(x + (size_t)a * xs) + sb;
        __m512i t[S_AROWS];
#pragma GCC unroll 8
        for (int a = 0; a < ma; a++)
            t[a] = _mm512_setzero_si512();
        for (int s = 0; s < nsub; s++) {
            __m512i raw[S_AROWS];
#pragma GCC unroll 8
            for (int a = 0; a < ma; a++)
                raw[a] = _mm512_setzero_si512();
#pragma GCC unroll 8
            for (int g = 0; g < gps; g++) {
                const int kg = s * gps + g;
                const __m512i wv = _mm512_load_si512((const __m512i *)ps->q[kg]);
#pragma GCC unroll 8
                for (int a = 0; a < ma; a++)
                    raw[a] = _mm512_dpbusd_epi32(
                        raw[a], wv, _mm512_set1_epi32((int)sw_x86_u32(xb[a]->qs + 4 * kg)));
            }
            const __m512i sc = _mm512_load_si512((const __m512i *)ps->sc[s]);
#pragma GCC unroll 8
            for (int a = 0; a < ma; a++)
                t[a] = _mm512_add_epi32(t[a], _mm512_mullo_epi32(raw[a], sc));
        }
        const __m512 dw = _mm512_load_ps(ps->d);
        const __m512 dmin = _mm512_load_ps(ps->dmin);
#pragma GCC unroll 8
        for (int a = 0; a < ma; a++) {
            __m512i s2 = _mm512_setzero_si512();
            __m512 r;
            if (nsub == 16) {
                /* sum_s mp_s * bsums_s over the 16-element sub-blocks: q6_K and q3_K
                 * subtract their offset (32, 4) times it, q2_K its minimums */
#pragma GCC unroll 8
                for (int q = 0; q < 8; q++)
                    s2 = _mm512_dpwssd_epi32(
                        s2, _mm512_load_si512((const __m512i *)ps->mp[q]),
                        _mm512_set1_epi32((int)sw_x86_u32(&xb[a]->bsums[2 * q])));
                if (kind == K_Q2_K) {
                    r = _mm512_mul_ps(_mm512_cvtepi32_ps(t[a]), dw);
                    r = _mm512_fnmadd_ps(dmin, _mm512_cvtepi32_ps(s2), r);
                } else {
                    r = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(
                                          t[a], _mm512_slli_epi32(s2, kind == K_Q6_K ? 5 : 2))),
                                      dw);
                }
            } else {
                /* the sums of the 32-element sub-blocks, as int16 pairs */
                const __m256i bs = _mm256_loadu_si256((const __m256i *)xb[a]->bsums);
                const __m128i b32 =
                    _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
#pragma GCC unroll 4
                for (int q = 0; q < 4; q++)
                    s2 = _mm512_dpwssd_epi32(s2, _mm512_load_si512((const __m512i *)ps->mp[q]),
                                             /* lane q of b32 in every lane (clang wants a
                                              * constant for _mm_extract_epi32's lane) */
                                             _mm512_permutexvar_epi32(_mm512_set1_epi32(q),
                                                                      _mm512_castsi128_si512(b32)));
                if (kind == K_IQ4_XS) { // the levels' +128 times the scales and sums
                    r = _mm512_mul_ps(
                        _mm512_cvtepi32_ps(_mm512_sub_epi32(t[a], _mm512_slli_epi32(s2, 7))), dw);
                } else {
                    r = _mm512_mul_ps(_mm512_cvtepi32_ps(t[a]), dw);
                    r = _mm512_fnmadd_ps(dmin, _mm512_cvtepi32_ps(s2), r);
                }
            }
            acc[a] = _mm512_fmadd_ps(r, _mm512_set1_ps(xb[a]->d), acc[a]);
        }
    }
#pragma GCC unroll 8
    for (int a = 0; a < ma; a++)
        _mm512_mask_storeu_ps(y + a * ys, m, acc[a]);
}

SW_AI void s_mmt(int kind, int64_t n, const void *w, size_t w_stride, int64_t o0, int64_t o1,
                 const void *x, size_t x_stride, int nr, float *y, int64_t y_stride)
{
    const int64_t nb = n / SW_QK_K;
    const uint8_t *wb = w, *xb = x;
    _Alignas(64) struct s_psb buf[S_PANELS * S_SLAB];
    for (int64_t sb0 = 0; sb0 < nb; sb0 += S_SLAB) {
        const int nsb = nb - sb0 < S_SLAB ? (int)(nb - sb0) : S_SLAB;
        for (int64_t t0 = o0; t0 < o1; t0 += S_PANEL * S_PANELS) {
            int np = 0, rows[S_PANELS];
            for (; np < S_PANELS && t0 + S_PANEL * np < o1; np++) {
                const int64_t left = o1 - (t0 + S_PANEL * np);
                rows[np] = left < S_PANEL ? (int)left : S_PANEL;
                for (int sb = 0; sb < nsb; sb++)
                    s_unpack(kind, wb + (size_t)(t0 + S_PANEL * np) * w_stride, w_stride, rows[np],
                             sb0 + sb, &buf[np * S_SLAB + sb]);
            }
            /* activation rows in near-equal groups of at most 8 */
            const int groups = (nr + S_AROWS - 1) / S_AROWS;
            int r = 0;
            for (int g = 0; g < groups; g++) {
                const int ma = nr / groups + (g < nr % groups ? 1 : 0);
                const uint8_t *xr = xb + (size_t)r * x_stride + (size_t)sb0 * sizeof(sw_block_q8_k);
                for (int pi = 0; pi < np; pi++) {
                    const __mmask16 m = (__mmask16)((1u << rows[pi]) - 1u);
                    float *yr = y + r * y_stride + t0 + S_PANEL * pi;
                    const struct s_psb *pp = &buf[pi * S_SLAB];
                    switch (ma) {
#define SW_CASE(k)                                                                                 \
    case k:                                                                                        \
        s_micro(kind, k, pp, nsb, xr, x_stride, sb0 == 0, yr, y_stride, m);                        \
        break;
                        SW_CASE(1)
                        SW_CASE(2)
                        SW_CASE(3)
                        SW_CASE(4)
                        SW_CASE(5)
                        SW_CASE(6)
                        SW_CASE(7)
                        SW_CASE(8)
#undef SW_CASE
                    default:
                        break;
                    }
                }
                r += ma;
            }
        }
    }
}

#define SW_DEFT(name, kind)                                                                        \
    static void s_mmt_##name(int64_t n, const void *w, size_t w_stride, int64_t o0, int64_t o1,    \
                             const void *x, size_t x_stride, int nr, float *y, int64_t y_stride)   \
    {                                                                                              \
        s_mmt(kind, n, w, w_stride, o0, o1, x, x_stride, nr, y, y_stride);                         \
    }

SW_DEFT(q4_k, K_Q4_K)
SW_DEFT(q5_k, K_Q5_K)
SW_DEFT(q6_k, K_Q6_K)
SW_DEFT(q2_k, K_Q2_K)
SW_DEFT(q3_k, K_Q3_K)
SW_DEFT(iq4_xs, K_IQ4_XS)

void sw_kernels_avx512(struct sw_kernels *k)
{
    k->mmtw[SW_TYPE_Q4_K] = s_mmt_q4_k;
    k->mmtw[SW_TYPE_Q5_K] = s_mmt_q5_k;
    k->mmtw[SW_TYPE_Q6_K] = s_mmt_q6_k;
    k->mmtw[SW_TYPE_Q2_K] = s_mmt_q2_k;
    k->mmtw[SW_TYPE_Q3_K] = s_mmt_q3_k;
    k->mmtw[SW_TYPE_IQ4_XS] = s_mmt_iq4_xs;
}
