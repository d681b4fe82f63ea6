/*
 * quant_lowbit_avx512.c - AVX-512 VNNI kernels of q2_K, q3_K, iq4_xs (x
 * q8_K) and iq4_nl (x q8_0): the one-row (decode) order of all four and
 * iq4_nl's sgemm (prompt) order. Compiled with -mavx512f -mavx512bw
 * -mavx512vl -mavx512dq -mavx512vnni; quant.c only calls in here after
 * checking the CPU (and the OS's ZMM state) at start-up.
 *
 * The one-row order is GGML's AVX2 kernels' (quant_math_lowbit.h's header):
 * per super-block (iq4_nl: per block) one 8-lane fused multiply-add of the
 * block's exact int32 lanes, lane k holding elements 4k..4k+3 of every
 * 32-element group with the sub-block scales applied, then GGML's
 * hsum_float_8. Only the integers are formed differently here (they are
 * exact, so any formulation gives the same bits): the quants of two groups
 * in one zmm straight from the block (no unpacked copy of the super-block),
 * vpdpbusd for the products (q3_K's -4 and the iq4 levels' +128 taken out
 * through the activations' 4-element sums), vpmulld for the sub-block
 * scales. iq4_nl's two chains (even and odd blocks) are the two halves of
 * one zmm accumulator. sw_matmul of 2 activation rows or more keeps the AVX2
 * kernels (they unpack a super-block once for 4 rows), but iq4_nl's of
 * S_GW_ROWS rows or more, which take the panels below; the K types' tiled
 * order is quant_avx512.c's. iq4_nl's sgemm order has two kernels: tiles of
 * 4 weight rows x 4 activation rows for small batches, and panels of
 * unpacked weights (one zmm = one lane of 16 weight rows) for prompts.
 * tests/unit/test_quant_lowbit.c checks every level against the scalar
 * kernels, every order and row count.
 */
#include "quant.h"
#include "quant_impl.h"
#include "quant_x86.h" // SW_AI, sw_x86_f16, sw_x86_hsum8, sw_x86_hsum_i32; no contraction

#include <immintrin.h>
#include <math.h>
#include <string.h>

/* The two 8-lane halves of v added (exact int32). */
SW_AI __m256i s_fold(__m512i v)
{
    return _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
}

/* GGML's kvalues_iq4nl + 128 (unsigned, for vpdpbusd) in every 128-bit lane. */
SW_AI __m512i s_levels_u(void)
{
    return _mm512_broadcast_i32x4(_mm_setr_epi8(1, 24, 45, 63, 79, 93, 106, 118, (char)129,
                                                (char)141, (char)153, (char)166, (char)181,
                                                (char)197, (char)217, (char)241));
}

/* 32 bytes [A | B] of nibbles (A: elements 0..15 and 16..31 of one group,
 * B of the next) -> the 64 unsigned levels of the two groups, in element order. */
SW_AI __m512i s_nl64(__m256i v, __m512i lut)
{
    const __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(v), _mm256_srli_epi16(v, 4), 1);
    const __m512i n = _mm512_and_si512(_mm512_shuffle_i64x2(z, z, _MM_SHUFFLE(3, 1, 2, 0)),
                                       _mm512_set1_epi8(0xF)); // [A, A >> 4, B, B >> 4]
    return _mm512_shuffle_epi8(lut, n);
}

/* Lanes i of 16 int32: entry a (i < 4), b (4..7), c (8..11), d (12..15) of a table. */
SW_AI __m512i s_idx4(int a, int b, int c, int d)
{
    return _mm512_setr_epi32(a, a, a, a, b, b, b, b, c, c, c, c, d, d, d, d);
}

/* q2_K/q3_K: the low 2 bits of groups 2j and 2j + 1 (bits 2g..2g+1 of
 * qs[32h..32h+31], group 4h + g), one group a half. */
SW_AI __m512i s_low2x2(const uint8_t *qs, int j)
{
    const __m512i bits =
        _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(qs + 32 * (j >> 1))));
    const __m512i sh = j & 1 ? _mm512_setr_epi64(4, 4, 4, 4, 6, 6, 6, 6)
                             : _mm512_setr_epi64(0, 0, 0, 0, 2, 2, 2, 2);
    return _mm512_and_si512(_mm512_srlv_epi64(bits, sh), _mm512_set1_epi8(3));
}

/* sum + raw times the scales of its sub-blocks 4j..4j+3 (one a 128-bit lane; sc: 16 int32). */
SW_AI __m512i s_add_scaled16(__m512i sum, __m512i raw, __m512i sc, int j)
{
    const __m512i idx = s_idx4(4 * j, 4 * j + 1, 4 * j + 2, 4 * j + 3);
    return _mm512_add_epi32(sum, _mm512_mullo_epi32(raw, _mm512_permutexvar_epi32(idx, sc)));
}

/* q2_K: groups 2j and 2j + 1 in zmm j (bits 2g..2g+1 of qs[32h..32h+31]). */
static float s_dot1_q2_k(int64_t nb, const sw_block_q2_k *w, const sw_block_q8_k *x)
{
    const __m512i zero = _mm512_setzero_si512();
    const __m128i m4 = _mm_set1_epi8(0xF);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const sw_block_q2_k *wb = w + b;
        const sw_block_q8_k *xb = x + b;
        const __m128i sm = _mm_loadu_si128((const __m128i *)wb->scales);
        const __m512i sc = _mm512_cvtepu8_epi32(_mm_and_si128(sm, m4));
        const __m256i mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sm, 4), m4));
        const __m256i prod =
            _mm256_madd_epi16(mins, _mm256_loadu_si256((const __m256i *)xb->bsums));
        __m512i sum = zero;
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            const __m512i q = s_low2x2(wb->qs, j);
            const __m512i y = _mm512_loadu_si512((const void *)(xb->qs + 64 * j));
            const __m512i raw = _mm512_dpbusd_epi32(zero, q, y);
            sum = s_add_scaled16(sum, raw, sc, j);
        }
        const float dmin = -xb->d * sw_x86_f16(&wb->dmin);
        const float d = xb->d * sw_x86_f16(&wb->d);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(prod), acc);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(s_fold(sum)), acc);
    }
    return sw_x86_hsum8(acc);
}

/* q3_K's 16 6-bit scales, minus 32, as int32 (sw_q3_k_scale's arithmetic). */
SW_AI __m512i s_q3_k_scales(const uint8_t *s)
{
    uint64_t lo8;
    uint32_t hi4;
    memcpy(&lo8, s, 8);
    memcpy(&hi4, s + 8, 4);
    const __m128i m4 = _mm_set1_epi8(0xF), v = _mm_cvtsi64_si128((long long)lo8);
    /* j < 8: s[j] & 0xF; j >= 8: s[j - 8] >> 4 */
    const __m128i lo =
        _mm_unpacklo_epi64(_mm_and_si128(v, m4), _mm_and_si128(_mm_srli_epi16(v, 4), m4));
    /* (s[8 + (j & 3)] >> 2 (j >> 2)) & 3: byte j & 3 of dword j >> 2 */
    const __m128i hi = _mm_and_si128(
        _mm_srlv_epi32(_mm_set1_epi32((int)hi4), _mm_setr_epi32(0, 2, 4, 6)), _mm_set1_epi8(3));
    const __m128i sc = _mm_sub_epi8(_mm_or_si128(lo, _mm_slli_epi16(hi, 4)), _mm_set1_epi8(32));
    return _mm512_cvtepi8_epi32(sc);
}

/* q3_K: the 3-bit quant u = low 2 bits | third bit << 2 (0..7); a lane's
 * integer is sum (u - 4) y = vpdpbusd(u, y) - vpdpbusd(4, y). */
static float s_dot1_q3_k(int64_t nb, const sw_block_q3_k *w, const sw_block_q8_k *x)
{
    const __m512i one = _mm512_set1_epi8(1), four = _mm512_set1_epi8(4);
    const __m512i zero = _mm512_setzero_si512();
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const sw_block_q3_k *wb = w + b;
        const sw_block_q8_k *xb = x + b;
        const __m512i sc = s_q3_k_scales(wb->scales);
        const __m512i hm = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)wb->hmask));
        __m512i sum = zero;
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            const __m512i q = s_low2x2(wb->qs, j);
            /* groups 2j, 2j + 1: bits 2j and 2j + 1 of hmask */
            const __m512i hsh = _mm512_setr_epi64(2 * j, 2 * j, 2 * j, 2 * j, 2 * j + 1, 2 * j + 1,
                                                  2 * j + 1, 2 * j + 1);
            const __m512i hb = _mm512_and_si512(_mm512_srlv_epi64(hm, hsh), one);
            const __m512i u = _mm512_or_si512(q, _mm512_slli_epi16(hb, 2));
            const __m512i y = _mm512_loadu_si512((const void *)(xb->qs + 64 * j));
            const __m512i raw = _mm512_sub_epi32(_mm512_dpbusd_epi32(zero, u, y),
                                                 _mm512_dpbusd_epi32(zero, four, y));
            sum = s_add_scaled16(sum, raw, sc, j);
        }
        const float d = xb->d * sw_x86_f16(&wb->d);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(s_fold(sum)), acc);
    }
    return sw_x86_hsum8(acc);
}

/* iq4_xs: sub-blocks 2j and 2j + 1 in zmm j; the levels + 128 by vpdpbusd,
 * minus 128 times the activations' 4-element sums. */
static float s_dot1_iq4_xs(int64_t nb, const sw_block_iq4_xs *w, const sw_block_q8_k *x)
{
    const __m512i lut = s_levels_u(), off = _mm512_set1_epi8((char)0x80);
    const __m512i zero = _mm512_setzero_si512();
    const __m512i idx[4] = {s_idx4(0, 0, 1, 1), s_idx4(2, 2, 3, 3), s_idx4(4, 4, 5, 5),
                            s_idx4(6, 6, 7, 7)};
    const __m256i nsh = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
    const __m256i hsh = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const sw_block_iq4_xs *wb = w + b;
        const sw_block_q8_k *xb = x + b;
        uint32_t sl;
        memcpy(&sl, wb->scales_l, 4);
        /* sub-block s: nibble s of scales_l | bits 2s..2s+1 of scales_h << 4, minus 32 */
        const __m256i ls = _mm256_sub_epi32(
            _mm256_or_si256(
                _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)sl), nsh),
                                 _mm256_set1_epi32(0xF)),
                _mm256_slli_epi32(
                    _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)wb->scales_h), hsh),
                                     _mm256_set1_epi32(3)),
                    4)),
            _mm256_set1_epi32(32));
        const __m512i sc = _mm512_castsi256_si512(ls);
        __m512i sum = zero;
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            const __m512i q = s_nl64(_mm256_loadu_si256((const __m256i *)(wb->qs + 32 * j)), lut);
            const __m512i y = _mm512_loadu_si512((const void *)(xb->qs + 64 * j));
            const __m512i raw = _mm512_sub_epi32(_mm512_dpbusd_epi32(zero, q, y),
                                                 _mm512_dpbusd_epi32(zero, off, y));
            sum = _mm512_add_epi32(sum,
                                   _mm512_mullo_epi32(raw, _mm512_permutexvar_epi32(idx[j], sc)));
        }
        const float d = sw_x86_f16(&wb->d) * xb->d;
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(s_fold(sum)), acc);
    }
    return sw_x86_hsum8(acc);
}

/* 8 f16 values step bytes apart, as floats. */
SW_AI __m256 s_f16x8(const uint8_t *p, size_t step)
{
    uint16_t h[8];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++)
        memcpy(&h[i], p + (size_t)i * step, 2);
    return _mm256_cvtph_ps(_mm_setr_epi16((short)h[0], (short)h[1], (short)h[2], (short)h[3],
                                          (short)h[4], (short)h[5], (short)h[6], (short)h[7]));
}

/* The levels + 128 of iq4_nl blocks wb[0] and wb[1], 128-bit lanes [elements
 * 0..15 of wb[0], 0..15 of wb[1], 16..31 of wb[0], 16..31 of wb[1]] (no
 * cross-lane shuffle: the activations are put in the same order instead). */
SW_AI __m512i s_nl_pair(const sw_block_iq4_nl *wb, __m512i lut)
{
    const __m256i v =
        _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)wb[0].qs)),
                                _mm_loadu_si128((const __m128i *)wb[1].qs), 1);
    const __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(v), _mm256_srli_epi16(v, 4), 1);
    return _mm512_shuffle_epi8(lut, _mm512_and_si512(z, _mm512_set1_epi8(0xF)));
}

/* q8_0 blocks xb[0] and xb[1] in s_nl_pair's order and -128 x their 4-element sums (*no):
 * int32 lanes [0..3 of xb[0], 0..3 of xb[1], 4..7 of xb[0], 4..7 of xb[1]]. */
SW_AI __m512i s_q8_pair(const sw_block_q8_0 *xb, __m512i *no)
{
    const __m512i y =
        _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)xb[0].qs)),
                           _mm256_loadu_si256((const __m256i *)xb[1].qs), 1);
    const __m512i yp = _mm512_shuffle_i64x2(y, y, _MM_SHUFFLE(3, 1, 2, 0));
    *no = _mm512_sub_epi32(
        _mm512_setzero_si512(),
        _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8((char)0x80), yp));
    return yp;
}

/* Float lane i of s_q8_pair's order: entry a (blocks 2j) or b (2j + 1) of a table. */
SW_AI __m512i s_pair_idx(int a, int b)
{
    return _mm512_setr_epi32(a, a, a, a, b, b, b, b, a, a, a, a, b, b, b, b);
}

/*
 * iq4_nl's one-row order for R weight rows (w, ws bytes apart) against one
 * activation row: blocks b (the even chain) and b + 1 (the odd chain) in one
 * zmm, lanes in s_q8_pair's order; the odd last block apart, as GGML's tail.
 * The rows share the activation's loads and offsets; the scales d_x d_w of 8
 * blocks are made at once (8 f16 each side, one multiply) and each pair's
 * taken from them by a permute.
 */
SW_AI void s_dotr_iq4_nl(int R, int64_t nb, const uint8_t *w, size_t ws, const sw_block_q8_0 *x,
                         float *out)
{
    const __m512i lut = s_levels_u();
    __m512 acc[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
    int64_t b = 0;
    for (; b + 8 <= nb; b += 8) {
        const __m256 dx = s_f16x8((const uint8_t *)&x[b].d, sizeof(sw_block_q8_0));
        __m512 d[2];
#pragma GCC unroll 2
        for (int r = 0; r < R; r++) {
            const sw_block_iq4_nl *wr = (const sw_block_iq4_nl *)(w + (size_t)r * ws) + b;
            d[r] = _mm512_castps256_ps512(
                _mm256_mul_ps(dx, s_f16x8((const uint8_t *)&wr->d, sizeof(sw_block_iq4_nl))));
        }
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            __m512i no;
            const __m512i y = s_q8_pair(x + b + 2 * j, &no);
            const __m512i idx = s_pair_idx(2 * j, 2 * j + 1);
#pragma GCC unroll 2
            for (int r = 0; r < R; r++) {
                const sw_block_iq4_nl *wr = (const sw_block_iq4_nl *)(w + (size_t)r * ws) + b;
                const __m512i p = _mm512_dpbusd_epi32(no, s_nl_pair(wr + 2 * j, lut), y);
                acc[r] = _mm512_fmadd_ps(_mm512_permutexvar_ps(idx, d[r]), _mm512_cvtepi32_ps(p),
                                         acc[r]);
            }
        }
    }
    for (; b + 1 < nb; b += 2) {
        __m512i no;
        const __m512i y = s_q8_pair(x + b, &no);
#pragma GCC unroll 2
        for (int r = 0; r < R; r++) {
            const sw_block_iq4_nl *wr = (const sw_block_iq4_nl *)(w + (size_t)r * ws) + b;
            const __m512i p = _mm512_dpbusd_epi32(no, s_nl_pair(wr, lut), y);
            const float d0 = sw_x86_f16(&x[b].d) * sw_x86_f16(&wr[0].d);
            const float d1 = sw_x86_f16(&x[b + 1].d) * sw_x86_f16(&wr[1].d);
            const __m512 d = _mm512_permutexvar_ps(
                s_pair_idx(0, 1), _mm512_castps128_ps512(_mm_setr_ps(d0, d1, 0.0f, 0.0f)));
            acc[r] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(p), acc[r]);
        }
    }
#pragma GCC unroll 2
    for (int r = 0; r < R; r++) {
        const sw_block_iq4_nl *wr = (const sw_block_iq4_nl *)(w + (size_t)r * ws);
        /* the even chain's lanes 0..7 and the odd chain's, added lane by lane */
        const __m256 lo = _mm512_castps512_ps256(acc[r]), hi = _mm512_extractf32x8_ps(acc[r], 1);
        float v = sw_x86_hsum8(_mm256_add_ps(_mm256_permute2f128_ps(lo, hi, 0x20),
                                             _mm256_permute2f128_ps(lo, hi, 0x31)));
        if (b < nb) { // the odd last block: one fused multiply-add of its total
            const __m256i q = _mm512_castsi512_si256(
                s_nl64(_mm256_zextsi128_si256(_mm_loadu_si128((const __m128i *)wr[b].qs)), lut));
            const __m256i y = _mm256_loadu_si256((const __m256i *)x[b].qs);
            const __m256i p = _mm256_sub_epi32(
                _mm256_dpbusd_epi32(_mm256_setzero_si256(), q, y),
                _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8((char)0x80), y));
            v = fmaf(sw_x86_f16(&x[b].d) * sw_x86_f16(&wr[b].d), (float)sw_x86_hsum_i32(p), v);
        }
        out[r] = v;
    }
}

static float s_dot1_iq4_nl(int64_t nb, const sw_block_iq4_nl *w, const sw_block_q8_0 *x)
{
    float v;
    s_dotr_iq4_nl(1, nb, (const uint8_t *)w, 0, x, &v);
    return v;
}

/*
 * iq4_nl in llamafile's sgemm order (sw_matmul_sgemm): per (weight row,
 * activation row) one 8-lane chain of fma(d_w d_x, float(lanes), acc) over
 * every block in order, then hsum_float_8. A tile of W weight rows and RP
 * pairs of activation rows, a pair in the two halves of a zmm (odd: the last
 * pair's upper half repeats its row and is dropped); a weight block's levels
 * serve every pair, an activation block's 4-element sums (the levels' +128
 * times them, negated: where each row's vpdpbusd starts) every weight row.
 */
SW_AI void s_nlg_tile(int W, int RP, int last, int64_t nb, const uint8_t *w, size_t ws,
                      const uint8_t *x, size_t xs, float *y, int64_t ys)
{
    const __m512i lut = s_levels_u(), off = _mm512_set1_epi8((char)0x80);
    const __m512i zero = _mm512_setzero_si512();
    __m512 acc[4][2];
#pragma GCC unroll 4
    for (int i = 0; i < W; i++)
#pragma GCC unroll 2
        for (int p = 0; p < RP; p++)
            acc[i][p] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m512i yv[2], yo[2];
        __m512 dx[2];
#pragma GCC unroll 2
        for (int p = 0; p < RP; p++) {
            const sw_block_q8_0 *x0 = (const sw_block_q8_0 *)(x + (size_t)(2 * p) * xs) + b;
            const sw_block_q8_0 *x1 =
                p == RP - 1 && last == 1
                    ? x0
                    : (const sw_block_q8_0 *)(x + (size_t)(2 * p + 1) * xs) + b;
            yv[p] = _mm512_inserti64x4(
                _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)x0->qs)),
                _mm256_loadu_si256((const __m256i *)x1->qs), 1);
            yo[p] = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, off, yv[p])); // -128 sums
            dx[p] = _mm512_insertf32x8(_mm512_set1_ps(sw_x86_f16(&x0->d)),
                                       _mm256_set1_ps(sw_x86_f16(&x1->d)), 1);
        }
#pragma GCC unroll 4
        for (int i = 0; i < W; i++) {
            const sw_block_iq4_nl *wb = (const sw_block_iq4_nl *)(w + (size_t)i * ws) + b;
            const __m512i q =
                s_nl64(_mm256_zextsi128_si256(_mm_loadu_si128((const __m128i *)wb->qs)), lut);
            const __m512i q2 = _mm512_shuffle_i64x2(q, q, _MM_SHUFFLE(1, 0, 1, 0));
            const __m512 dw = _mm512_set1_ps(sw_x86_f16(&wb->d));
#pragma GCC unroll 2
            for (int p = 0; p < RP; p++) {
                const __m512i l = _mm512_dpbusd_epi32(yo[p], q2, yv[p]);
                acc[i][p] =
                    _mm512_fmadd_ps(_mm512_mul_ps(dw, dx[p]), _mm512_cvtepi32_ps(l), acc[i][p]);
            }
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < W; i++)
#pragma GCC unroll 2
        for (int p = 0; p < RP; p++) {
            y[(2 * p) * ys + i] = sw_x86_hsum8(_mm512_castps512_ps256(acc[i][p]));
            if (p < RP - 1 || last == 2)
                y[(2 * p + 1) * ys + i] = sw_x86_hsum8(_mm512_extractf32x8_ps(acc[i][p], 1));
        }
}

/*
 * The same sgemm order for many activation rows (S_GW_ROWS or more): the
 * weights of 16 rows (a panel) unpacked once per slab of S_GSLAB blocks into
 * [block][group k][row][4 bytes] (one zmm = lane k of 16 weight rows), and
 * vpdpbusd against an activation's 4 bytes broadcast from the q8_0 block as
 * it is: lane k of 16 (weight row, activation row) pairs an instruction,
 * starting from the activation's -128 x 4-element sum (the levels' +128).
 * Each pair's 8-lane chain is then 8 zmm accumulators, lane i = weight row
 * i: the same fma(d_w d_x, float(lane), acc) per block in block order and
 * the same hsum_float_8 at the end, only across registers. Activation rows
 * go S_GA at a time (their accumulators live in acc between slabs: floats
 * stored and reloaded, exact); a tile of S_GP panels shares each
 * activation's broadcast and offsets (a lone panel: S_GM activation rows
 * share its weight loads). bench_quant tiled: 75-80 GMAC/s a core against
 * the 4 x 4 tiles' 36-38 (128 rows, Zen 4).
 */
#define S_GW_ROWS 8 // activation rows from which the panel kernel runs
#define S_GSLAB 16  // blocks a slab
#define S_GA 64     // activation rows a pass
#define S_GM 2      // activation rows a microtile of one panel
#define S_GP 2      // panels a tile (its microtiles: one activation row)

struct s_gpan {
    uint8_t q[S_GSLAB][8][16][4]; // block b, lane k, weight row i: elements 4k..4k+3, level + 128
    float d[S_GSLAB][16];         // weight row i's scale of block b (0 past the panel's rows)
};

/* Blocks [b0, b0 + nsb) of weight rows [0, nrows) (nrows <= 16, ws bytes apart) into p. */
static void s_gunpack(const uint8_t *w, size_t ws, int nrows, int64_t b0, int nsb, struct s_gpan *p)
{
    const __m512i lut = s_levels_u();
    for (int b = 0; b < nsb; b += 2) {
        __m512i v[16];
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++) {
            if (i >= nrows) {
                v[i] = _mm512_setzero_si512();
                continue;
            }
            const sw_block_iq4_nl *wb = (const sw_block_iq4_nl *)(w + (size_t)i * ws) + b0 + b;
            const __m128i lo = _mm_loadu_si128((const __m128i *)wb[0].qs);
            const __m128i hi = b + 1 < nsb ? _mm_loadu_si128((const __m128i *)wb[1].qs) : lo;
            v[i] = s_nl64(_mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1), lut);
        }
        sw_x86_transpose16(v); // v[j]: dword j (block b + j / 8, lane j % 8) of the 16 rows
        const int nj = b + 1 < nsb ? 16 : 8;
        for (int j = 0; j < nj; j++)
            _mm512_store_si512((__m512i *)p->q[b + j / 8][j % 8], v[j]);
    }
    for (int b = 0; b < nsb; b++)
        for (int i = 0; i < 16; i++)
            p->d[b][i] =
                i < nrows ? sw_x86_f16(&((const sw_block_iq4_nl *)(w + (size_t)i * ws) + b0 + b)->d)
                          : 0.0f;
}

/* s_gmicro's accumulators a (M x P x 8) from acc (io = 1), zero (0), or into acc (2). */
SW_AI void s_gacc(int M, int P, __m512 a[S_GM][S_GP][8], __m512 *acc, int io)
{
#pragma GCC unroll 2
    for (int m = 0; m < M; m++)
#pragma GCC unroll 2
        for (int c = 0; c < P; c++)
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++) {
                __m512 *v = &acc[8 * (P * m + c) + k];
                if (io == 2)
                    *v = a[m][c][k];
                else
                    a[m][c][k] = io ? *v : _mm512_setzero_ps();
            }
}

/* M activation rows (x: row 0 at the slab's first block, xs bytes apart) over
 * the slab's nsb blocks of P panels p; their accumulators in acc (8P a row),
 * zero at the first slab. */
SW_AI void s_gmicro(int M, int P, const struct s_gpan *p, int nsb, const uint8_t *x, size_t xs,
                    int first, __m512 *acc)
{
    const __m256i off = _mm256_set1_epi8((char)0x80);
    __m512 a[S_GM][S_GP][8];
    s_gacc(M, P, a, acc, first ? 0 : 1);
    for (int b = 0; b < nsb; b++) {
        const sw_block_q8_0 *xb[S_GM];
        __m512 d[S_GM][S_GP];
        __m512i no[S_GM]; // lanes 0..7: -128 x the activation's 4-element sums
#pragma GCC unroll 2
        for (int m = 0; m < M; m++) {
            xb[m] = (const sw_block_q8_0 *)(x + (size_t)m * xs) + b;
            const __m256i s = _mm256_dpbusd_epi32(_mm256_setzero_si256(), off,
                                                  _mm256_loadu_si256((const __m256i *)xb[m]->qs));
            no[m] = _mm512_castsi256_si512(_mm256_sub_epi32(_mm256_setzero_si256(), s));
            const __m512 dx = _mm512_set1_ps(sw_x86_f16(&xb[m]->d));
#pragma GCC unroll 2
            for (int c = 0; c < P; c++)
                d[m][c] = _mm512_mul_ps(_mm512_load_ps(p[c].d[b]), dx);
        }
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) {
            __m512i q[S_GP];
#pragma GCC unroll 2
            for (int c = 0; c < P; c++)
                q[c] = _mm512_load_si512((const __m512i *)p[c].q[b][k]);
#pragma GCC unroll 2
            for (int m = 0; m < M; m++) {
                uint32_t y4;
                memcpy(&y4, xb[m]->qs + 4 * k, 4);
                const __m512i o = _mm512_permutexvar_epi32(_mm512_set1_epi32(k), no[m]);
                const __m512i yb = _mm512_set1_epi32((int)y4);
#pragma GCC unroll 2
                for (int c = 0; c < P; c++) {
                    const __m512i l = _mm512_dpbusd_epi32(o, q[c], yb);
                    a[m][c][k] = _mm512_fmadd_ps(d[m][c], _mm512_cvtepi32_ps(l), a[m][c][k]);
                }
            }
        }
    }
    s_gacc(M, P, a, acc, 2);
}

/* The 8 lanes' exact int32 of block b of panel p (16 weight rows) with q8_0 block xb. */
SW_AI void s_gints(const struct s_gpan *p, int b, const sw_block_q8_0 *xb, __m512i l[8])
{
    const __m256i s = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8((char)0x80),
                                          _mm256_loadu_si256((const __m256i *)xb->qs));
    const __m512i no = _mm512_castsi256_si512(_mm256_sub_epi32(_mm256_setzero_si256(), s));
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++) {
        uint32_t y4;
        memcpy(&y4, xb->qs + 4 * k, 4);
        l[k] = _mm512_dpbusd_epi32(_mm512_permutexvar_epi32(_mm512_set1_epi32(k), no),
                                   _mm512_load_si512((const __m512i *)p->q[b][k]),
                                   _mm512_set1_epi32((int)y4));
    }
}

/* The one-row order (sw_matmul) on the panels: one activation row's two
 * chains, blocks of even index in acc[0..8) and odd in acc[8..16), over nsb
 * blocks of panel p (nsb even; the slab starts at an even block), zero at the
 * first slab. */
SW_AI void s_dmicro(const struct s_gpan *p, int nsb, const sw_block_q8_0 *x, int first, __m512 *acc)
{
    __m512 a[2][8];
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++)
        a[i / 8][i % 8] = first ? _mm512_setzero_ps() : acc[i];
    for (int b = 0; b < nsb; b += 2)
#pragma GCC unroll 2
        for (int c = 0; c < 2; c++) {
            __m512i l[8];
            s_gints(p, b + c, x + b + c, l);
            const __m512 d =
                _mm512_mul_ps(_mm512_load_ps(p->d[b + c]), _mm512_set1_ps(sw_x86_f16(&x[b + c].d)));
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++)
                a[c][k] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(l[k]), a[c][k]);
        }
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++)
        acc[i] = a[i / 8][i % 8];
}

/* GGML's hsum_float_8 across 8 zmm: lane i of the result is weight row i's. */
SW_AI __m512 s_hsum8x16(const __m512 *v)
{
    return _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(v[0], v[4]), _mm512_add_ps(v[2], v[6])),
                         _mm512_add_ps(_mm512_add_ps(v[1], v[5]), _mm512_add_ps(v[3], v[7])));
}

/* The sums of activation rows [0, na) (x: row 0 at the slab's first block)
 * over one slab of nsb blocks of the tile's np panels: the sgemm order
 * (dot = 0) or, one panel, the one-row order's chains without an odd last
 * block of the row (dot = 1; tail: the slab holds that block last). */
SW_AI void s_wslab(int dot, int np, const struct s_gpan *pan, int nsb, int tail, const uint8_t *x,
                   size_t xs, int na, int first, __m512 *acc)
{
    int a = 0;
    if (dot) {
        for (; a < na; a++)
            s_dmicro(pan, nsb - tail, (const sw_block_q8_0 *)(x + (size_t)a * xs), first,
                     acc + 16 * a);
        return;
    }
    if (np == 2)
        for (; a < na; a++)
            s_gmicro(1, 2, pan, nsb, x + (size_t)a * xs, xs, first, acc + 16 * a);
    for (; a + S_GM <= na; a += S_GM)
        s_gmicro(S_GM, 1, pan, nsb, x + (size_t)a * xs, xs, first, acc + 8 * a);
    for (; a < na; a++)
        s_gmicro(1, 1, pan, nsb, x + (size_t)a * xs, xs, first, acc + 8 * a);
}

/* Rows [o0, o1) of W against nr activation rows by panels: the sgemm order
 * (dot = 0, tiles of S_GP panels) or the one-row order (dot = 1, one panel:
 * the chains added lane by lane, hsum_float_8, then the odd last block's
 * total in one fused multiply-add, as s_dotr_iq4_nl). */
SW_AI void s_mmw(int dot, int64_t n, const void *w, size_t w_stride, int64_t o0, int64_t o1,
                 const void *x, size_t x_stride, int nr, float *y, int64_t y_stride)
{
    const int64_t nb = n / SW_QK;
    const uint8_t *wb = w, *xb = x;
    const int tp = dot ? 1 : S_GP, per = dot ? 16 : 8; // panels a tile, accumulators a pair
    _Alignas(64) struct s_gpan pan[S_GP];
    _Alignas(64) __m512 acc[S_GA * 16];
    for (int64_t o = o0; o < o1; o += 16 * tp) {
        const int64_t left = o1 - o;
        const int np = left > 16 && tp > 1 ? 2 : 1; // panels in this tile
        for (int r0 = 0; r0 < nr; r0 += S_GA) {
            const int na = nr - r0 < S_GA ? nr - r0 : S_GA;
            int nsb = 0;
            for (int64_t b0 = 0; b0 < nb; b0 += S_GSLAB) {
                nsb = nb - b0 < S_GSLAB ? (int)(nb - b0) : S_GSLAB;
                for (int c = 0; c < np; c++) {
                    const int64_t lc = left - 16 * c;
                    s_gunpack(wb + (size_t)(o + 16 * c) * w_stride, w_stride,
                              lc < 16 ? (int)lc : 16, b0, nsb, &pan[c]);
                }
                s_wslab(dot, np, pan, nsb, b0 + nsb == nb && (nb & 1),
                        xb + (size_t)r0 * x_stride + (size_t)b0 * sizeof(sw_block_q8_0), x_stride,
                        na, b0 == 0, acc);
            }
            for (int c = 0; c < np; c++) {
                const int64_t lc = left - 16 * c;
                const __mmask16 mask = (__mmask16)((1u << (lc < 16 ? lc : 16)) - 1u);
                for (int a = 0; a < na; a++) {
                    const __m512 *v = acc + per * (np * a + c);
                    __m512 s;
                    if (!dot) {
                        s = s_hsum8x16(v);
                    } else {
                        __m512 e[8];
                        for (int k = 0; k < 8; k++)
                            e[k] = _mm512_add_ps(v[k], v[8 + k]);
                        s = s_hsum8x16(e);
                    }
                    if (dot && (nb & 1)) { // the odd last block: the last of the last slab
                        const sw_block_q8_0 *xt =
                            (const sw_block_q8_0 *)(xb + (size_t)(r0 + a) * x_stride) + nb - 1;
                        __m512i l[8];
                        s_gints(&pan[0], nsb - 1, xt, l);
                        const __m512i t =
                            _mm512_add_epi32(_mm512_add_epi32(_mm512_add_epi32(l[0], l[1]),
                                                              _mm512_add_epi32(l[2], l[3])),
                                             _mm512_add_epi32(_mm512_add_epi32(l[4], l[5]),
                                                              _mm512_add_epi32(l[6], l[7])));
                        const __m512 d = _mm512_mul_ps(_mm512_set1_ps(sw_x86_f16(&xt->d)),
                                                       _mm512_load_ps(pan[0].d[nsb - 1]));
                        s = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(t), s);
                    }
                    _mm512_mask_storeu_ps(y + (int64_t)(r0 + a) * y_stride + o + 16 * c, mask, s);
                }
            }
        }
    }
}

static void s_mmgw_iq4_nl(int64_t n, const void *w, size_t w_stride, int64_t o0, int64_t o1,
                          const void *x, size_t x_stride, int nr, float *y, int64_t y_stride)
{
    s_mmw(0, n, w, w_stride, o0, o1, x, x_stride, nr, y, y_stride);
}

static void s_mmg_iq4_nl(int64_t n, const void *w, size_t w_stride, int64_t o0, int64_t o1,
                         const void *x, size_t x_stride, int nr, float *y, int64_t y_stride)
{
    if (nr >= S_GW_ROWS) {
        s_mmgw_iq4_nl(n, w, w_stride, o0, o1, x, x_stride, nr, y, y_stride);
        return;
    }
    const int64_t nb = n / SW_QK;
    const uint8_t *wb = w, *xb = x;
    for (int64_t o = o0; o < o1; o += 4) {
        const int W = o1 - o < 4 ? (int)(o1 - o) : 4;
        const uint8_t *wo = wb + (size_t)o * w_stride;
        for (int r = 0; r < nr; r += 4) {
            const int R = nr - r < 4 ? nr - r : 4, RP = (R + 1) / 2, last = R - 2 * (RP - 1);
            const uint8_t *xr = xb + (size_t)r * x_stride;
            float *yr = y + r * y_stride + o;
            switch (4 * (W - 1) + 2 * (RP - 1) + (last - 1)) {
#define S_CASE(w_, rp_, last_)                                                                     \
    case 4 * ((w_)-1) + 2 * ((rp_)-1) + ((last_)-1):                                               \
        s_nlg_tile(w_, rp_, last_, nb, wo, w_stride, xr, x_stride, yr, y_stride);                  \
        break;
#define S_CASES(w_) S_CASE(w_, 1, 1) S_CASE(w_, 1, 2) S_CASE(w_, 2, 1) S_CASE(w_, 2, 2)
                S_CASES(1)
                S_CASES(2)
                S_CASES(3)
                S_CASES(4)
#undef S_CASES
#undef S_CASE
            default:
                break;
            }
        }
    }
}

/* The AVX2 kernels of sw_matmul, for 2 activation rows or more. */
static sw_mm_fn s_mm_avx2[SW_TYPE_COUNT];

#define S_DEF(name, type, wt, xt, nbe)                                                             \
    static void s_dot_##name(int64_t n, float *s, const void *w, const void *x)                    \
    {                                                                                              \
        *s = s_dot1_##name(n / (nbe), (const wt *)w, (const xt *)x);                               \
    }                                                                                              \
    static void s_mm_##name(int64_t n, const void *w, size_t w_stride, int64_t o0, int64_t o1,     \
                            const void *x, size_t x_stride, int nr, float *y, int64_t y_stride)    \
    {                                                                                              \
        if (nr > 1) {                                                                              \
            s_mm_avx2[type](n, w, w_stride, o0, o1, x, x_stride, nr, y, y_stride);                 \
            return;                                                                                \
        }                                                                                          \
        const uint8_t *wb = w;                                                                     \
        for (int64_t o = o0; o < o1; o++)                                                          \
            y[o] =                                                                                 \
                s_dot1_##name(n / (nbe), (const wt *)(wb + (size_t)o * w_stride), (const xt *)x);  \
    }

S_DEF(q2_k, SW_TYPE_Q2_K, sw_block_q2_k, sw_block_q8_k, SW_QK_K)
S_DEF(q3_k, SW_TYPE_Q3_K, sw_block_q3_k, sw_block_q8_k, SW_QK_K)
S_DEF(iq4_xs, SW_TYPE_IQ4_XS, sw_block_iq4_xs, sw_block_q8_k, SW_QK_K)

static void s_dot_iq4_nl(int64_t n, float *s, const void *w, const void *x)
{
    *s = s_dot1_iq4_nl(n / SW_QK, w, x);
}

/* iq4_nl: two weight rows a pass share the activation's loads (decode). */
static void s_mm_iq4_nl(int64_t n, const void *w, size_t w_stride, int64_t o0, int64_t o1,
                        const void *x, size_t x_stride, int nr, float *y, int64_t y_stride)
{
    if (nr >= S_GW_ROWS) { // a prompt's last layer (every row, the one-row order)
        s_mmw(1, n, w, w_stride, o0, o1, x, x_stride, nr, y, y_stride);
        return;
    }
    if (nr > 1) {
        s_mm_avx2[SW_TYPE_IQ4_NL](n, w, w_stride, o0, o1, x, x_stride, nr, y, y_stride);
        return;
    }
    const uint8_t *wb = w;
    int64_t o = o0;
    for (; o + 2 <= o1; o += 2)
        s_dotr_iq4_nl(2, n / SW_QK, wb + (size_t)o * w_stride, w_stride, x, y + o);
    if (o < o1)
        s_dotr_iq4_nl(1, n / SW_QK, wb + (size_t)o * w_stride, w_stride, x, y + o);
}

void sw_kernels_lowbit_avx512(struct sw_kernels *k)
{
    static const enum sw_type types[] = {SW_TYPE_Q2_K, SW_TYPE_Q3_K, SW_TYPE_IQ4_XS,
                                         SW_TYPE_IQ4_NL};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        s_mm_avx2[types[i]] = k->mm[types[i]]; // the AVX2 table's (quant.c copies it first)
    k->dot[SW_TYPE_Q2_K] = s_dot_q2_k;
    k->dot[SW_TYPE_Q3_K] = s_dot_q3_k;
    k->dot[SW_TYPE_IQ4_XS] = s_dot_iq4_xs;
    k->dot[SW_TYPE_IQ4_NL] = s_dot_iq4_nl;
    k->mm[SW_TYPE_Q2_K] = s_mm_q2_k;
    k->mm[SW_TYPE_Q3_K] = s_mm_q3_k;
    k->mm[SW_TYPE_IQ4_XS] = s_mm_iq4_xs;
    k->mm[SW_TYPE_IQ4_NL] = s_mm_iq4_nl;
    k->mmg[SW_TYPE_IQ4_NL] = s_mmg_iq4_nl;
}
