/*
 * quant_mmt_avx2.c - the tiled K-quant order (sw_matmul_tiled: prompt
 * windows of q4_K, q5_K and q6_K weights) at the AVX2 level, for CPUs
 * without AVX-512 (quant_avx512.c has that level's kernel).
 *
 * The order, per (weight row, activation row, super-block): an exact integer
 * total t of the quants' products with their sub-block scales, and for
 * q4_K/q5_K the minimums' total m; then v = d_w * float(t), v = fma(-dmin_w,
 * float(m), v), y = fma(v, d_x, y) (quant.c's s_tdot_*). One weight row meets
 * up to 8 activation rows at a time (S_GROUP): its super-block is unpacked
 * once and its quants multiplied as in quant_avx2.c (the helpers of
 * quant_avx2_k.h). What differs from quant_avx2.c's per-row tiles is the
 * rest, which was about a third of the time on a Zen 3 core: the 8 rows'
 * integer totals are summed in one tree of horizontal adds, the minimums' totals
 * come from a table of the activation blocks' sums laid out row by row in
 * one vector, and the three float steps run on the 8 rows at once. Each lane
 * holds one row's own numbers and the same operations in the same order, so
 * the outputs are bit-identical (test_quant compares every level with the
 * scalar order; the integer sums are exact in any order).
 */
#include "quant.h"
#include "quant_impl.h"

#include "quant_avx2_k.h"
#include "quant_x86.h"

#include <immintrin.h>

#define S_GROUP 8       // activation rows a weight row meets at once (the lanes of a float vector)
#define S_ROWS_MAX 64   // activation rows whose tables are made per pass (they stay in L2)
#define S_TAB 256       // group blocks in the tables: 256 x (32 + 128) bytes of stack
#define S_PF_BYTES 1024 // software prefetch distance along the weight row (q4_K ~7 blocks)

/* The activation side of one super-block of a group of rows, lane r = row r
 * (rows past the group's end: zeros). */
typedef struct {
    __m256 d;      // the rows' q8_K scales
    __m256i bp[4]; // q4_K/q5_K: int16 pairs (bsum pair 2j, 2j + 1) of each row, j < 4
} s_xtab_t;

/* The 8 integer totals of v[0..rx) in one vector (lane r = sum of v[r]'s 8
 * lanes; lanes >= rx zero). */
SW_AI __m256i s_totals(const __m256i *v, int rx)
{
    __m256i s[8];
#pragma GCC unroll 8
    for (int r = 0; r < 8; r++)
        s[r] = r < rx ? v[r] : _mm256_setzero_si256();
    const __m256i a0 = _mm256_hadd_epi32(s[0], s[1]), a1 = _mm256_hadd_epi32(s[2], s[3]);
    const __m256i b0 = _mm256_hadd_epi32(a0, a1);
    if (rx <= 4)
        return _mm256_add_epi32(_mm256_permute2x128_si256(b0, b0, 0x80),
                                _mm256_permute2x128_si256(b0, b0, 0x81));
    const __m256i a2 = _mm256_hadd_epi32(s[4], s[5]), a3 = _mm256_hadd_epi32(s[6], s[7]);
    const __m256i b1 = _mm256_hadd_epi32(a2, a3);
    return _mm256_add_epi32(_mm256_permute2x128_si256(b0, b1, 0x20),
                            _mm256_permute2x128_si256(b0, b1, 0x31));
}

/*
 * y[r * ys] (r < rx, a compile-time constant) for weight row w against the
 * group's rows x (xs bytes apart) over super-blocks [b0, b1): tab holds the
 * group's activation tables from block b0 on. first: start from 0, else
 * continue from y (a row split in slices of blocks; the same chain).
 */
SW_AI void s_tile(int kind, int vnni, int rx, int64_t b0, int64_t b1, const uint8_t *w,
                  const uint8_t *x, size_t xs, const s_xtab_t *tab, int first, float *y, int64_t ys)
{
    const int wsz = kind == K_Q4_K ? 144 : kind == K_Q5_K ? 176 : 210;
    float out[S_GROUP] = {0.0f};
    if (!first)
        for (int r = 0; r < rx; r++)
            out[r] = y[r * ys];
    __m256 ty = _mm256_loadu_ps(out);
    for (int64_t b = b0; b < b1; b++) {
        const uint8_t *pw = w + (size_t)b * wsz;
        for (int off = 0; off < wsz; off += 64)
            s_prefetch(pw, S_PF_BYTES + (size_t)off);
        const sw_block_q8_k *xb[S_GROUP];
        __m256i sumi[S_GROUP], sumj[S_GROUP];
        const int split = rx <= 2;
#pragma GCC unroll 8
        for (int r = 0; r < rx; r++) {
            xb[r] = (const sw_block_q8_k *)(x + (size_t)r * xs) + b;
            sumi[r] = _mm256_setzero_si256();
            sumj[r] = _mm256_setzero_si256();
        }
        const s_xtab_t *t = &tab[b - b0];
        const sw_block_q4_k *q4 = (const sw_block_q4_k *)pw; // q5_K starts alike
        float dw;
        __m256i ms = _mm256_setzero_si256();
        if (kind == K_Q6_K) {
            float d[S_GROUP]; // (not written in the tiled order)
            dw = s_q6k_block(vnni, split, 1, rx, pw, xb, d, sumi, sumj);
        } else {
            dw = _cvtsh_ss(q4->d);
            ms = s_k45_block(kind, vnni, split, rx, pw, xb, sumi, sumj);
        }
#pragma GCC unroll 8
        for (int r = 0; r < rx; r++)
            if (split)
                sumi[r] = _mm256_add_epi32(sumi[r], sumj[r]);
        __m256 v = _mm256_mul_ps(_mm256_set1_ps(dw), _mm256_cvtepi32_ps(s_totals(sumi, rx)));
        if (kind != K_Q6_K) {
            // the minimums' totals: pairs (min 2j, min 2j + 1) against every row's bsum pairs
            const __m256i m2 = _mm256_permute2x128_si256(ms, ms, 0x11);
            __m256i mt = _mm256_madd_epi16(_mm256_shuffle_epi32(m2, 0x00), t->bp[0]);
            mt = _mm256_add_epi32(mt, _mm256_madd_epi16(_mm256_shuffle_epi32(m2, 0x55), t->bp[1]));
            mt = _mm256_add_epi32(mt, _mm256_madd_epi16(_mm256_shuffle_epi32(m2, 0xAA), t->bp[2]));
            mt = _mm256_add_epi32(mt, _mm256_madd_epi16(_mm256_shuffle_epi32(m2, 0xFF), t->bp[3]));
            v = _mm256_fmadd_ps(_mm256_set1_ps(-_cvtsh_ss(q4->dmin)), _mm256_cvtepi32_ps(mt), v);
        }
        ty = _mm256_fmadd_ps(v, t->d, ty);
    }
    _mm256_storeu_ps(out, ty);
    for (int r = 0; r < rx; r++)
        y[r * ys] = out[r];
}

/* The tables of rows [r0, r0 + rx) (x: the first, xs apart) over blocks [b0, b1). */
static void s_fill(int kind, const uint8_t *x, size_t xs, int rx, int64_t b0, int64_t b1,
                   s_xtab_t *tab)
{
    for (int64_t b = b0; b < b1; b++) {
        float d[S_GROUP] = {0.0f};
        int32_t bp[4][S_GROUP] = {{0}};
        for (int r = 0; r < rx; r++) {
            const sw_block_q8_k *xb = (const sw_block_q8_k *)(x + (size_t)r * xs) + b;
            d[r] = xb->d;
            if (kind != K_Q6_K) {
                int32_t p[4];
                _mm_storeu_si128((__m128i *)p,
                                 s_bsum_pairs(_mm256_loadu_si256((const __m256i *)xb->bsums)));
                for (int j = 0; j < 4; j++)
                    bp[j][r] = p[j];
            }
        }
        s_xtab_t *t = &tab[b - b0];
        t->d = _mm256_loadu_ps(d);
        for (int j = 0; j < 4; j++)
            t->bp[j] = _mm256_loadu_si256((const __m256i *)bp[j]);
    }
}

SW_AI void s_mmt(int kind, int vnni, int64_t n, const void *w, size_t w_stride, int64_t o0,
                 int64_t o1, const void *x, size_t x_stride, int nr, float *y, int64_t y_stride)
{
    const int64_t nb = n / SW_QK_K;
    const uint8_t *wb = w, *xb = x;
    s_xtab_t tab[S_TAB];
    // rows per pass: whole groups whose tables fit; a longer row goes in slices of blocks
    int64_t groups = S_TAB / (nb > 0 ? nb : 1);
    if (groups > S_ROWS_MAX / S_GROUP)
        groups = S_ROWS_MAX / S_GROUP;
    if (groups < 1)
        groups = 1;
    const int64_t slice = nb < S_TAB ? nb : S_TAB;
    for (int r0 = 0; r0 < nr; r0 += (int)groups * S_GROUP) {
        const int r1 = nr - r0 > groups * S_GROUP ? r0 + (int)groups * S_GROUP : nr;
        for (int64_t b0 = 0; b0 < nb; b0 += slice) {
            const int64_t b1 = nb - b0 > slice ? b0 + slice : nb;
            const int ng = (r1 - r0 + S_GROUP - 1) / S_GROUP;
            for (int g = 0; g < ng; g++) {
                const int rg = r0 + g * S_GROUP, rx = r1 - rg < S_GROUP ? r1 - rg : S_GROUP;
                s_fill(kind, xb + (size_t)rg * x_stride, x_stride, rx, b0, b1,
                       &tab[(size_t)g * (size_t)(b1 - b0)]);
            }
            for (int64_t o = o0; o < o1; o++) {
                const uint8_t *wo = wb + (size_t)o * w_stride;
                for (int g = 0; g < ng; g++) {
                    const int rg = r0 + g * S_GROUP, rx = r1 - rg < S_GROUP ? r1 - rg : S_GROUP;
                    const uint8_t *xr = xb + (size_t)rg * x_stride;
                    const s_xtab_t *tg = &tab[(size_t)g * (size_t)(b1 - b0)];
                    float *yr = y + (int64_t)rg * y_stride + o;
                    switch (rx) {
#define S_CASE(m)                                                                                  \
    case m:                                                                                        \
        s_tile(kind, vnni, m, b0, b1, wo, xr, x_stride, tg, b0 == 0, yr, y_stride);                \
        break;
                        S_CASE(1)
                        S_CASE(2)
                        S_CASE(3)
                        S_CASE(4)
                        S_CASE(5)
                        S_CASE(6)
                        S_CASE(7)
                        S_CASE(8)
#undef S_CASE
                    default:
                        break;
                    }
                }
            }
        }
    }
}

#define S_DEF(name, kind, vnni)                                                                    \
    static void s_mmt_##name(int64_t n, const void *w, size_t w_stride, int64_t o0, int64_t o1,    \
                             const void *x, size_t x_stride, int nr, float *y, int64_t y_stride)   \
    {                                                                                              \
        s_mmt(kind, vnni, n, w, w_stride, o0, o1, x, x_stride, nr, y, y_stride);                   \
    }

S_DEF(q4_k, K_Q4_K, 0)
S_DEF(q5_k, K_Q5_K, 0)
S_DEF(q6_k, K_Q6_K, 0)
S_DEF(q4_k_vnni, K_Q4_K, 1)
S_DEF(q5_k_vnni, K_Q5_K, 1)
S_DEF(q6_k_vnni, K_Q6_K, 1)

void sw_kernels_avx2_mmt(struct sw_kernels *k, int vnni)
{
    k->mmt[SW_TYPE_Q4_K] = vnni ? s_mmt_q4_k_vnni : s_mmt_q4_k;
    k->mmt[SW_TYPE_Q5_K] = vnni ? s_mmt_q5_k_vnni : s_mmt_q5_k;
    k->mmt[SW_TYPE_Q6_K] = vnni ? s_mmt_q6_k_vnni : s_mmt_q6_k;
}
