/*
 * quant_mm_avx512.c - AVX-512 VNNI kernels for batches of activation rows
 * (sw_matmul with nr >= SW_MMB_ROWS = 16: prompts, and verification rounds
 * of that many rows) of q8_0, q4_0 and q5_0 weights against q8_0
 * activations (q5_0 later, issue 37: the type of most of Qwen2.5 0.5B
 * Q4_K_M's weights, whose prompts ran at 0.77-0.79x llama.cpp's on the
 * 2-core Zen 4 with the AVX2 tiles; a 126-token prompt, `shardwire generate`,
 * 3 runs side by side: 2 threads 152-186 tok/s before, 305-335 after; 1
 * thread 98-102 and 192-195; the same logits digest).
 * Compiled with -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni (the
 * *_avx512.c rule of engine/CMakeLists.txt); quant.c only calls in here after
 * checking the CPU (and the OS's ZMM state) at start-up.
 *
 * The order: GGML's (and sw_vec_dot's, every level's) per (weight row,
 * activation row) pair and 32-element block b is 8 int32 lanes, lane k the
 * exact sum of elements 4k..4k+3 (weights times activations), then
 *
 *   acc_k = fma(d_w[b] * d_x[b], float(lane_k), acc_k)     k = 0..7
 *
 * block by block, and at the end GGML's horizontal sum of the 8 lanes,
 * ((acc_0 + acc_4) + (acc_2 + acc_6)) + ((acc_1 + acc_5) + (acc_3 + acc_7)).
 * llama.cpp's batched path for these types (llamafile's tinyBLAS) keeps the
 * same order, so prompts and generation share it.
 *
 * How it runs here: the weights of 16 rows (a panel) are unpacked once per
 * call into bytes laid out [block][group k][row][4 bytes]: one zmm holds group
 * k of a block for 16 rows (unsigned: q8_0's quants + 128, q4_0's nibbles,
 * q5_0's plus 16 where its qh bit is set),
 * next to the 16 rows' f32 scales. vpdpbusd multiplies that zmm with the
 * activation's 4 bytes of group k broadcast from the q8_0 row as it is, each
 * int32 lane started from -128 (q8_0), -16 (q5_0) or -8 (q4_0) times the activation's
 * 4-element sum: lane i is weight row i's lane k, the same exact integer as
 * GGML's. The conversion and the fma then run on 16 weight rows at once, one
 * zmm per (activation row, k), in exactly the order above: every output is
 * bit-identical to sw_vec_dot's (tests/unit/test_quant.c, test_batch_levels).
 * Per 64 multiply-adds: one vpdpbusd, one conversion, one fma (and a broadcast
 * load of the start value), where the AVX2 kernel without AVX-VNNI needs about
 * twice the instructions (sign, vpmaddubsw, vpmaddwd, conversion, product of
 * the scales, fma per 32).
 *
 * Activation rows go S_AROWS at a time through a panel (8 accumulators each,
 * in registers over the whole row); the panel (576 bytes a block: 27 KiB for
 * a 1536-wide row, in L1; 158 KiB for 8960, in L2) is read once per group of
 * activation rows.
 */
#include "quant.h"
#include "quant_impl.h"
#include "quant_x86.h"

#include <stdlib.h>

enum { K_Q4_0, K_Q8_0, K_Q5_0 };

#define S_PANEL 16 // weight rows per panel: the 16 int32 lanes of a zmm
#define S_AROWS 3  // most activation rows per pass over a panel (24 zmm of sums)

/* One block of a panel, unpacked. 576 bytes, a multiple of 64. */
struct s_blk {
    uint8_t q[8][S_PANEL][4]; // group k, lane i: elements 4k..4k+3 of row i, unsigned
    float d[S_PANEL];         // the rows' scales
};
_Static_assert(sizeof(struct s_blk) % 64 == 0, "panel blocks stay 64-byte aligned");

/* The kernels these replace for fewer rows (the AVX2 level's), kept by
 * sw_kernels_avx512_mm. */
static sw_mm_fn s_prev_q4_0, s_prev_q5_0, s_prev_q8_0;

SW_AI int s_bsz(int kind)
{
    return kind == K_Q8_0   ? (int)sizeof(sw_block_q8_0)
           : kind == K_Q5_0 ? (int)sizeof(sw_block_q5_0)
                            : (int)sizeof(sw_block_q4_0);
}

/* The 32 quants of a weight block as unsigned bytes in element order. */
SW_AI __m256i s_quants(int kind, const uint8_t *blk)
{
    if (kind == K_Q8_0) // q + 128
        return _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(blk + 2)),
                                _mm256_set1_epi8((char)0x80));
    /* q4_0: element j in the low nibble of qs[j], j + 16 in the high; q5_0
     * the same after its qh, plus 16 where bit j of qh is set */
    const int qs = kind == K_Q5_0 ? 6 : 2;
    const __m256i b = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(blk + qs)));
    const __m256i h = _mm256_blend_epi32(b, _mm256_srli_epi16(b, 4), 0xF0);
    const __m256i n = _mm256_and_si256(h, _mm256_set1_epi8(0x0F));
    if (kind != K_Q5_0)
        return n;
    uint32_t qh;
    memcpy(&qh, blk + 2, 4);
    return _mm256_mask_add_epi8(n, (__mmask32)qh, n, _mm256_set1_epi8(16));
}

/* Unpacks blocks [0, nb) of rows [0, nrows) (nrows <= 16; w: row 0, ws bytes
 * apart) into p; the lanes of missing rows are zero. */
SW_AI void s_unpack(int kind, const uint8_t *w, size_t ws, int nrows, int64_t nb, struct s_blk *p)
{
    const size_t bsz = (size_t)s_bsz(kind);
    for (int64_t b = 0; b < nb; b += 2) {
        const int two = b + 1 < nb;
        __m512i v[16];
#pragma GCC unroll 16
        for (int i = 0; i < S_PANEL; i++) {
            if (i >= nrows) {
                v[i] = _mm512_setzero_si512();
                continue;
            }
            const uint8_t *blk = w + (size_t)i * ws + (size_t)b * bsz;
            const __m256i lo = s_quants(kind, blk);
            const __m256i hi = two ? s_quants(kind, blk + bsz) : _mm256_setzero_si256();
            v[i] = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
        }
        sw_x86_transpose16(v); // v[j]: dword j (group j of block b, j - 8 of b + 1) of each row
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) {
            _mm512_store_si512((__m512i *)p[b].q[k], v[k]);
            if (two)
                _mm512_store_si512((__m512i *)p[b + 1].q[k], v[8 + k]);
        }
        for (int j = 0; j < 1 + two; j++) {
            _Alignas(32) uint16_t h[S_PANEL] = {0};
            for (int i = 0; i < nrows; i++)
                memcpy(&h[i], w + (size_t)i * ws + (size_t)(b + j) * bsz, sizeof h[i]);
            _mm512_store_ps(p[b + j].d, _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)h)));
        }
    }
}

/*
 * y[a * ys + i] (lane i of mask m) for a < ma: the dot products of a panel's
 * rows (p, nb blocks) with activation rows x + a * xs, in GGML's order.
 */
SW_AI void s_micro(int kind, int ma, const struct s_blk *p, int64_t nb, const uint8_t *x, size_t xs,
                   float *y, int64_t ys, __mmask16 m)
{
    const __m256i off = _mm256_set1_epi8(kind == K_Q8_0 ? (char)0x80 : kind == K_Q5_0 ? 16 : 8);
    __m512 acc[S_AROWS][8];
#pragma GCC unroll 3
    for (int a = 0; a < ma; a++)
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++)
            acc[a][k] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const struct s_blk *pb = p + b;
        const sw_block_q8_0 *xb[S_AROWS];
        __m512 dp[S_AROWS];
        _Alignas(32) int32_t start[S_AROWS][8]; // -offset * the activation's 4-element sums
#pragma GCC unroll 3
        for (int a = 0; a < ma; a++) {
            xb[a] = (const sw_block_q8_0 *)(x + (size_t)a * xs) + b;
            const __m256i q = _mm256_loadu_si256((const __m256i *)xb[a]->qs);
            _mm256_store_si256(
                (__m256i *)start[a],
                _mm256_sub_epi32(_mm256_setzero_si256(),
                                 _mm256_dpbusd_epi32(_mm256_setzero_si256(), off, q)));
            dp[a] = _mm512_mul_ps(_mm512_load_ps(pb->d), _mm512_set1_ps(sw_x86_f16(&xb[a]->d)));
        }
        /* Make the compiler read start[][] back from memory below: a broadcast
         * from memory is a load alone, where GCC's own choice (keeping the
         * vector and broadcasting each lane out of it) takes two shuffles a
         * zmm on the port the fma needs too (q8_0, 128 rows, one core of the
         * Intel VM with AMX: 67-73 -> 83-95 GMAC/s). */
        __asm__ volatile("" : : "r"(start) : "memory");
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) {
            const __m512i wv = _mm512_load_si512((const __m512i *)pb->q[k]);
#pragma GCC unroll 3
            for (int a = 0; a < ma; a++) {
                const __m512i lanes =
                    _mm512_dpbusd_epi32(_mm512_set1_epi32(start[a][k]), wv,
                                        _mm512_set1_epi32((int)sw_x86_u32(xb[a]->qs + 4 * k)));
                acc[a][k] = _mm512_fmadd_ps(dp[a], _mm512_cvtepi32_ps(lanes), acc[a][k]);
            }
        }
    }
#pragma GCC unroll 3
    for (int a = 0; a < ma; a++) {
        const __m512 s04 = _mm512_add_ps(acc[a][0], acc[a][4]);
        const __m512 s26 = _mm512_add_ps(acc[a][2], acc[a][6]);
        const __m512 s15 = _mm512_add_ps(acc[a][1], acc[a][5]);
        const __m512 s37 = _mm512_add_ps(acc[a][3], acc[a][7]);
        _mm512_mask_storeu_ps(y + a * ys, m,
                              _mm512_add_ps(_mm512_add_ps(s04, s26), _mm512_add_ps(s15, s37)));
    }
}

SW_AI void s_mmb(int kind, int64_t n, const void *w, size_t w_stride, int64_t o0, int64_t o1,
                 const void *x, size_t x_stride, int nr, float *y, int64_t y_stride)
{
    const int64_t nb = n / SW_QK;
    struct s_blk *p = aligned_alloc(64, (size_t)nb * sizeof *p);
    if (!p) { // the same numbers, more slowly
        (kind == K_Q8_0   ? s_prev_q8_0
         : kind == K_Q5_0 ? s_prev_q5_0
                          : s_prev_q4_0)(n, w, w_stride, o0, o1, x, x_stride, nr, y, y_stride);
        return;
    }
    const uint8_t *wb = w, *xb = x;
    for (int64_t o = o0; o < o1; o += S_PANEL) {
        const int rows = o1 - o < S_PANEL ? (int)(o1 - o) : S_PANEL;
        const __mmask16 m = (__mmask16)((1u << rows) - 1u);
        s_unpack(kind, wb + (size_t)o * w_stride, w_stride, rows, nb, p);
        /* activation rows in near-equal groups of at most S_AROWS */
        const int groups = (nr + S_AROWS - 1) / S_AROWS;
        for (int g = 0, r = 0; g < groups; g++) {
            const int ma = nr / groups + (g < nr % groups ? 1 : 0);
            const uint8_t *xr = xb + (size_t)r * x_stride;
            float *yr = y + r * y_stride + o;
            if (ma == 3)
                s_micro(kind, 3, p, nb, xr, x_stride, yr, y_stride, m);
            else if (ma == 2)
                s_micro(kind, 2, p, nb, xr, x_stride, yr, y_stride, m);
            else
                s_micro(kind, 1, p, nb, xr, x_stride, yr, y_stride, m);
            r += ma;
        }
    }
    free(p);
}

#define S_DEF(name, kind)                                                                          \
    static void s_mm_##name(int64_t n, const void *w, size_t w_stride, int64_t o0, int64_t o1,     \
                            const void *x, size_t x_stride, int nr, float *y, int64_t y_stride)    \
    {                                                                                              \
        if (nr < SW_MMB_ROWS)                                                                      \
            s_prev_##name(n, w, w_stride, o0, o1, x, x_stride, nr, y, y_stride);                   \
        else if (o1 > o0)                                                                          \
            s_mmb(kind, n, w, w_stride, o0, o1, x, x_stride, nr, y, y_stride);                     \
    }

S_DEF(q4_0, K_Q4_0)
S_DEF(q5_0, K_Q5_0)
S_DEF(q8_0, K_Q8_0)

void sw_kernels_avx512_mm(struct sw_kernels *k)
{
    if (k->mm[SW_TYPE_Q4_0] == NULL || k->mm[SW_TYPE_Q8_0] == NULL ||
        k->mm[SW_TYPE_Q8_0] == s_mm_q8_0)
        return;
    s_prev_q4_0 = k->mm[SW_TYPE_Q4_0];
    s_prev_q8_0 = k->mm[SW_TYPE_Q8_0];
    k->mm[SW_TYPE_Q4_0] = s_mm_q4_0;
    k->mm[SW_TYPE_Q8_0] = s_mm_q8_0;
    if (k->mm[SW_TYPE_Q5_0] != NULL) {
        s_prev_q5_0 = k->mm[SW_TYPE_Q5_0];
        k->mm[SW_TYPE_Q5_0] = s_mm_q5_0;
    }
}
