/*
 * quant_amx.c - AMX-INT8 kernels for the tiled K-quant order
 * (sw_matmul_tiled with SW_AMX_ROWS activation rows or more: prompt windows
 * and verification batches of q4_K, q5_K and q6_K weights against q8_K
 * activations; a tile takes 16 rows, fewer are padded). Compiled with
 * -mamx-tile -mamx-int8 and the AVX-512 flags (the *_amx.c rule of
 * engine/CMakeLists.txt); quant.c only calls in here after the CPU said it
 * has AMX-TILE and AMX-INT8, the OS saves the tile state and granted this
 * process the tile data (arch_prctl ARCH_REQ_XCOMP_PERM).
 *
 * The order is quant_avx512.c's (the tiled order): per (weight row,
 * activation row, super-block) the exact int32 total t of the quants times
 * their sub-block scales, for q4_K/q5_K the exact total m of the minimums
 * times the activation's sub-block sums, then
 *
 *   r = d_w * float(t);  r = fma(-dmin_w, float(m), r);  y = fma(r, d_x, y)
 *
 * over the super-blocks in order. Only the integers are formed differently,
 * and an exact integer is the same however it is summed, so every output is
 * bit-identical to the other levels' (tests/unit/test_quant.c compares them).
 *
 * How t is formed: each weight row's super-block is unpacked once per call
 * into w = scale * quant (q6_K: scale * (quant - 32)), |w| <= 4096, split
 * into a low byte (unsigned) and a high byte (signed):
 * w = lo + 256 * hi. An AMX tile multiply-add (tdpbusd for lo, tdpbssd for
 * hi) takes 16 weight rows x 64 elements of one plane against 64 elements of
 * 16 activation rows, so
 *
 *   t = sum(lo * x) + 256 * sum(hi * x)
 *
 * is two int32 tiles over the super-block's 4 chunks of 64, with no per
 * sub-block step at all. Bounds: |sum(lo * x)| <= 256 * 255 * 128 < 2^23 and
 * |256 * sum(hi * x)| <= 256 * 256 * 16 * 128 = 2^27, so nothing overflows.
 * The minimums' total m is one vpdpwssd per pair of sub-blocks, as in
 * quant_avx512.c. The float steps run on 16 activation rows at once (a zmm
 * lane per activation row), one weight row at a time.
 *
 * Layout: weights as the A tiles (rows = 16 weight rows, their elements
 * contiguous, as unpacked), activations as the B tiles in the pairs-of-four
 * layout AMX wants ([element / 4][activation row][4 bytes]), built once per
 * call for all activation rows and read by every weight panel.
 *
 * Speed (bench_quant tiled, one core of the 2-vCPU Intel Xeon VM with AMX,
 * 2026-12-07): q4_K 1536 x 1536, 128 rows, 358 GMAC/s against the AVX-512
 * level's 163 (2.2x); 16 rows 1.5x. Where the time goes in a 16 x 16 x 256
 * step (s_panel, 8.5 KiB of weights and 8.8 KiB of activations): the tiles
 * alone ~85 ns, the float steps alone ~75 ns, together ~135 ns; the
 * unpacking of the weights ~230 ns a super-block of 16 rows, shared by all
 * the activation rows.
 */
#include "quant.h"
#include "quant_impl.h"

#include "quant_kchunk_avx512.h" // K_*, S_BSZ, s_chunk
#include "quant_x86.h"

#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#define S_PANEL 16 // weight rows per A tile
#define S_TOK 16   // activation rows per B tile

/* Tile registers, as numbers: GCC's tile intrinsics paste their argument into
 * the instruction's text, so it goes through one more macro to expand. */
#define T_C0LO 0 // sums of token tile 0: low plane
#define T_C0HI 1 // high plane
#define T_C1LO 2 // token tile 1
#define T_C1HI 3
#define T_ALO 4 // weights: low plane
#define T_AHI 5 // high plane
#define T_B0 6  // activations: token tile 0
#define T_B1 7  // token tile 1
#define S_TZERO(t) _tile_zero(t)
#define S_TLOAD(t, p, s) _tile_loadd(t, p, s)
#define S_TSTORE(t, p, s) _tile_stored(t, p, s)
#define S_TDPBUSD(c, a, b) _tile_dpbusd(c, a, b)
#define S_TDPBSSD(c, a, b) _tile_dpbssd(c, a, b)

/* One super-block of 16 activation rows, as B tiles. 4416 bytes. */
struct s_xsb {
    int8_t q[64][S_TOK][4]; // element group g (elements 4g..4g+3) of each row
    float d[S_TOK];         // the rows' q8_K scales (0 past the last row)
    int32_t bp[4][S_TOK];   // q4_K/q5_K: int16 pairs (sum of sub-block 2p, of 2p + 1)
};
_Static_assert(sizeof(struct s_xsb) % 64 == 0, "activation blocks stay 64-byte aligned");

/* One super-block of 16 weight rows, as A tiles. 8576 bytes. */
struct s_wsb {
    uint8_t lo[S_PANEL][256]; // the low bytes of scale * quant, element order
    int8_t hi[S_PANEL][256];  // the high bytes
    float d[S_PANEL];         // super-scale
    float dmin[S_PANEL];      // q4_K/q5_K: super-scale of the minimums
    int32_t mp[4][S_PANEL];   // q4_K/q5_K: int16 pairs (minimum of sub-block 2p, of 2p + 1)
};
_Static_assert(sizeof(struct s_wsb) % 64 == 0, "weight blocks stay 64-byte aligned");

/* The kernels these replace (the AVX-512 level's), kept by sw_kernels_amx. */
static sw_mm_fn s_prev[3];

/* The palette-1 configuration: every tile 16 rows of 64 bytes. */
struct s_tilecfg {
    uint8_t palette;
    uint8_t start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
};

SW_AI void s_tiles_on(void)
{
    _Alignas(64) struct s_tilecfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = T_C0LO; t <= T_B1; t++) {
        cfg.colsb[t] = 64;
        cfg.rows[t] = 16;
    }
    _tile_loadconfig(&cfg);
}

/* Activation rows [0, rows) of one token tile (x: row 0, xs bytes apart) into
 * p[0..nb); rows past the end are zero. */
static void s_pack_x(int kind, const uint8_t *x, size_t xs, int rows, int64_t nb, struct s_xsb *p)
{
    for (int64_t b = 0; b < nb; b++) {
        const sw_block_q8_k *xb[S_TOK];
        for (int j = 0; j < S_TOK; j++)
            xb[j] = j < rows ? (const sw_block_q8_k *)(x + (size_t)j * xs) + b : NULL;
        for (int c = 0; c < 4; c++) {
            __m512i v[16];
#pragma GCC unroll 16
            for (int j = 0; j < S_TOK; j++)
                v[j] = xb[j] ? _mm512_loadu_si512((const void *)(xb[j]->qs + 64 * c))
                             : _mm512_setzero_si512();
            sw_x86_transpose16(v);
#pragma GCC unroll 16
            for (int k = 0; k < 16; k++)
                _mm512_store_si512((__m512i *)p[b].q[16 * c + k], v[k]);
        }
        for (int j = 0; j < S_TOK; j++) {
            p[b].d[j] = xb[j] ? xb[j]->d : 0.0f;
            for (int q = 0; q < 4; q++) {
                int32_t pair = 0;
                if (xb[j] && kind != K_Q6_K) {
                    const int16_t *bs = xb[j]->bsums;
                    const int s0 = bs[4 * q] + bs[4 * q + 1], s1 = bs[4 * q + 2] + bs[4 * q + 3];
                    pair = (int32_t)((uint32_t)(uint16_t)s0 | (uint32_t)(uint16_t)s1 << 16);
                }
                p[b].bp[q][j] = pair;
            }
        }
    }
}

/* The low bytes (lo) and high bytes (hi) of w = scale * q for the 64
 * elements of one chunk: q unsigned, sc the elements' scales as signed bytes;
 * q6_K takes 32 off q (as 32 * scale off w). vpmaddubsw forms the products of
 * the even and of the odd elements as int16 (exact: |w| <= 63 * 128), vpermt2b
 * gathers their low and high bytes back into element order. */
SW_AI void s_split(int kind, __m512i q, __m512i sc, uint8_t *lo, int8_t *hi)
{
    const __m512i even = _mm512_set1_epi16(0x00FF);
    const __m512i se = _mm512_and_si512(sc, even), so = _mm512_andnot_si512(even, sc);
    __m512i we = _mm512_maddubs_epi16(q, se), wo = _mm512_maddubs_epi16(q, so);
    if (kind == K_Q6_K) {
        const __m512i k32 = _mm512_set1_epi8(32);
        we = _mm512_sub_epi16(we, _mm512_maddubs_epi16(k32, se));
        wo = _mm512_sub_epi16(wo, _mm512_maddubs_epi16(k32, so));
    }
    /* byte j of the result: j even: byte j of we (word j / 2, low), j odd:
     * byte j - 1 of wo; the high bytes one further */
    const __m512i ilo = _mm512_set_epi8(
        126, 62, 124, 60, 122, 58, 120, 56, 118, 54, 116, 52, 114, 50, 112, 48, 110, 46, 108, 44,
        106, 42, 104, 40, 102, 38, 100, 36, 98, 34, 96, 32, 94, 30, 92, 28, 90, 26, 88, 24, 86, 22,
        84, 20, 82, 18, 80, 16, 78, 14, 76, 12, 74, 10, 72, 8, 70, 6, 68, 4, 66, 2, 64, 0);
    const __m512i ihi = _mm512_add_epi8(ilo, _mm512_set1_epi8(1));
    _mm512_store_si512((__m512i *)lo, _mm512_permutex2var_epi8(we, ilo, wo));
    _mm512_store_si512((__m512i *)hi, _mm512_permutex2var_epi8(we, ihi, wo));
}

/* Super-blocks [0, nb) of weight rows [0, nrows) (w: row 0, ws bytes apart)
 * into p[0..nb); rows past the end are zero. Row by row, each read in order
 * (no faster than super-block by super-block on the Intel VM: Qwen2.5-Coder
 * 1.5B Q4_K_M prompts 270-284 tok/s against 271-276). */
static void s_pack_w(int kind, const uint8_t *w, size_t ws, int nrows, int64_t nb, struct s_wsb *p)
{
    const size_t bsz = S_BSZ(kind);
    for (int i = 0; i < S_PANEL; i++)
        for (int64_t b = 0; b < nb; b++) {
            struct s_wsb *pb = p + b;
            if (i >= nrows) {
                memset(pb->lo[i], 0, sizeof pb->lo[i]);
                memset(pb->hi[i], 0, sizeof pb->hi[i]);
                pb->d[i] = pb->dmin[i] = 0.0f;
                for (int q = 0; q < 4; q++)
                    pb->mp[q][i] = 0;
                continue;
            }
            const uint8_t *blk = w + (size_t)i * ws + (size_t)b * bsz;
            __m128i tab; // the sub-block scales, bytes 0..15 (q4_K/q5_K: 0..7)
            if (kind == K_Q6_K) {
                const sw_block_q6_k *q6 = (const sw_block_q6_k *)blk;
                tab = _mm_loadu_si128((const __m128i *)q6->scales);
                pb->d[i] = sw_x86_f16(&q6->d);
                pb->dmin[i] = 0.0f;
                for (int q = 0; q < 4; q++)
                    pb->mp[q][i] = 0;
            } else {
                /* the 12 bytes of 6-bit scales and minimums (sw_scale_min_k4) as
                 * scales in bytes 0..7, minimums in 8..15, in 32-bit words */
                const uint32_t u0 = sw_x86_u32(blk + 4), u1 = sw_x86_u32(blk + 8),
                               u2 = sw_x86_u32(blk + 12);
                const uint32_t m6 = 0x3f3f3f3fu, m4 = 0x0f0f0f0fu, m2 = 0x03030303u;
                tab =
                    _mm_set_epi32((int)(((u2 >> 4) & m4) | (((u1 >> 6) & m2) << 4)), (int)(u1 & m6),
                                  (int)((u2 & m4) | (((u0 >> 6) & m2) << 4)), (int)(u0 & m6));
                /* the minimums as int16 pairs (2q, 2q + 1) */
                const __m128i mp = _mm_cvtepu8_epi16(_mm_srli_si128(tab, 8));
                pb->mp[0][i] = _mm_cvtsi128_si32(mp);
                pb->mp[1][i] = _mm_extract_epi32(mp, 1);
                pb->mp[2][i] = _mm_extract_epi32(mp, 2);
                pb->mp[3][i] = _mm_extract_epi32(mp, 3);
                pb->d[i] = sw_x86_f16((const sw_f16 *)blk);
                pb->dmin[i] = sw_x86_f16((const sw_f16 *)(blk + 2));
            }
            /* each element's scale: byte e of chunk c is sub-block 2c + e / 32 (q4_K,
             * q5_K) or 4c + e / 16 (q6_K) of the table */
            const __m512i st = _mm512_broadcast_i32x4(tab);
            const __m512i e = _mm512_set_epi8(
                63, 62, 61, 60, 59, 58, 57, 56, 55, 54, 53, 52, 51, 50, 49, 48, 47, 46, 45, 44, 43,
                42, 41, 40, 39, 38, 37, 36, 35, 34, 33, 32, 31, 30, 29, 28, 27, 26, 25, 24, 23, 22,
                21, 20, 19, 18, 17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
            const __m512i sub0 =
                kind == K_Q6_K ? _mm512_srli_epi16(_mm512_and_si512(e, _mm512_set1_epi8(0x30)), 4)
                               : _mm512_srli_epi16(_mm512_and_si512(e, _mm512_set1_epi8(0x20)), 5);
            for (int c = 0; c < 4; c++) {
                const __m512i idx =
                    _mm512_add_epi8(sub0, _mm512_set1_epi8((char)(kind == K_Q6_K ? 4 * c : 2 * c)));
                s_split(kind, s_chunk(kind, blk, c), _mm512_permutexvar_epi8(idx, st),
                        pb->lo[i] + 64 * c, pb->hi[i] + 64 * c);
            }
        }
}

/* Chunk k (elements 64k..64k+63) of a super-block's tiles: weights w against
 * the activations of x0 (tiles T_C0LO/T_C0HI) and, when two, x1 (T_C1LO/T_C1HI). */
SW_AI void s_amx_chunk(int two, int k, const struct s_wsb *w, const struct s_xsb *x0,
                       const struct s_xsb *x1)
{
    S_TLOAD(T_ALO, w->lo[0] + 64 * k, 256);
    S_TLOAD(T_B0, x0->q[16 * k], 64);
    S_TDPBUSD(T_C0LO, T_ALO, T_B0);
    if (two) {
        S_TLOAD(T_B1, x1->q[16 * k], 64);
        S_TDPBUSD(T_C1LO, T_ALO, T_B1);
    }
    S_TLOAD(T_AHI, w->hi[0] + 64 * k, 256);
    S_TDPBSSD(T_C0HI, T_AHI, T_B0);
    if (two)
        S_TDPBSSD(T_C1HI, T_AHI, T_B1);
}

/* Weight rows [i0, i0 + 4) of one super-block's float steps: acc[i] lane j +=
 * the steps for weight row i and activation row j, from the two int32 tiles
 * c (sum(lo * x), sum(hi * x)). */
SW_AI void s_post4(int kind, int i0, const struct s_wsb *w, const struct s_xsb *x,
                   const int32_t (*c)[S_PANEL][S_TOK], float (*acc)[S_TOK])
{
    const __m512 dx = _mm512_load_ps(x->d);
#pragma GCC unroll 4
    for (int i = i0; i < i0 + 4; i++) {
        const __m512i t =
            _mm512_add_epi32(_mm512_load_si512((const __m512i *)c[0][i]),
                             _mm512_slli_epi32(_mm512_load_si512((const __m512i *)c[1][i]), 8));
        __m512 r = _mm512_mul_ps(_mm512_set1_ps(w->d[i]), _mm512_cvtepi32_ps(t));
        if (kind != K_Q6_K) {
            __m512i m = _mm512_setzero_si512();
#pragma GCC unroll 4
            for (int q = 0; q < 4; q++)
                m = _mm512_dpwssd_epi32(m, _mm512_set1_epi32(w->mp[q][i]),
                                        _mm512_load_si512((const __m512i *)x->bp[q]));
            r = _mm512_fnmadd_ps(_mm512_set1_ps(w->dmin[i]), _mm512_cvtepi32_ps(m), r);
        }
        _mm512_store_ps(acc[i], _mm512_fmadd_ps(r, dx, _mm512_load_ps(acc[i])));
    }
}

/* y[j * ys + i] for the ma activation rows of acc's tile and weight rows i < mw. */
SW_AI void s_store_y(float (*acc)[S_TOK], int mw, int ma, float *y, int64_t ys)
{
    __m512i v[16];
#pragma GCC unroll 16
    for (int i = 0; i < S_PANEL; i++)
        v[i] = _mm512_castps_si512(_mm512_load_ps(acc[i])); // lane j: activation row j
    sw_x86_transpose16(v);
    const __mmask16 m = (__mmask16)((1u << mw) - 1u);
    for (int j = 0; j < ma; j++)
        _mm512_mask_storeu_ps(y + j * ys, m, _mm512_castsi512_ps(v[j]));
}

/*
 * One panel (pw: nb super-blocks of mw weight rows) against every token tile
 * (px: ntok tiles of nb super-blocks; nr activation rows in all), every
 * super-block in order from zero, the partial sums in acc (ntok tiles of
 * 16 x 16, zeroed here), and then into y. Super-block by super-block, each
 * against the token tiles two at a time (an item), so that the super-block's
 * weights (8.5 KiB) stay in L1 while every tile meets them.
 * Software-pipelined: the tiles of the next item are issued in four parts
 * between the float steps of this one's weight rows (its tiles already
 * stored), so that the AMX unit and the vector units work at the same time:
 * the float steps of a whole item are more instructions than the core looks
 * ahead.
 */
/* Item it of a panel: super-block it / npair against token tiles
 * 2 * (it % npair) and, when two, the next (x1 is x0 when not). */
struct s_item {
    const struct s_wsb *w;
    const struct s_xsb *x0, *x1;
    int t, two;
};

SW_AI struct s_item s_item_at(int64_t it, int npair, int ntok, int64_t nb, const struct s_wsb *pw,
                              const struct s_xsb *px)
{
    const int64_t b = it / npair;
    const int t = 2 * (int)(it % npair), two = t + 1 < ntok;
    const struct s_xsb *x0 = px + (int64_t)t * nb + b;
    return (struct s_item){pw + b, x0, two ? x0 + nb : x0, t, two};
}

SW_AI void s_tiles_zero(void)
{
    S_TZERO(T_C0LO);
    S_TZERO(T_C0HI);
    S_TZERO(T_C1LO);
    S_TZERO(T_C1HI);
}

static void s_panel(int kind, const struct s_wsb *pw, const struct s_xsb *px, int64_t nb, int ntok,
                    int nr, int mw, float (*acc)[S_PANEL][S_TOK], float *y, int64_t ys)
{
    _Alignas(64) int32_t c[2][2][S_PANEL][S_TOK]; // [token tile of the item][lo, hi]
    memset(acc, 0, (size_t)ntok * sizeof *acc);
    const int npair = (ntok + 1) / 2;
    const int64_t items = nb * npair;
    struct s_item cur = s_item_at(0, npair, ntok, nb, pw, px);
    s_tiles_zero();
    for (int k = 0; k < 4; k++)
        s_amx_chunk(cur.two, k, cur.w, cur.x0, cur.x1);
    for (int64_t it = 0; it < items; it++) {
        S_TSTORE(T_C0LO, c[0][0], 64);
        S_TSTORE(T_C0HI, c[0][1], 64);
        if (cur.two) {
            S_TSTORE(T_C1LO, c[1][0], 64);
            S_TSTORE(T_C1HI, c[1][1], 64);
        }
        const int more = it + 1 < items;
        const struct s_item next = more ? s_item_at(it + 1, npair, ntok, nb, pw, px) : cur;
        if (more)
            s_tiles_zero();
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            if (more)
                s_amx_chunk(next.two, k, next.w, next.x0, next.x1);
            s_post4(kind, 4 * k, cur.w, cur.x0, (const int32_t(*)[S_PANEL][S_TOK])c[0], acc[cur.t]);
            if (cur.two)
                s_post4(kind, 4 * k, cur.w, cur.x1, (const int32_t(*)[S_PANEL][S_TOK])c[1],
                        acc[cur.t + 1]);
        }
        cur = next;
    }
    for (int t = 0; t < ntok; t++) {
        const int ma = nr - S_TOK * t < S_TOK ? nr - S_TOK * t : S_TOK;
        s_store_y(acc[t], mw, ma, y + (int64_t)S_TOK * t * ys, ys);
    }
}

static void s_mm(int kind, int64_t n, const void *w, size_t w_stride, int64_t o0, int64_t o1,
                 const void *x, size_t x_stride, int nr, float *y, int64_t y_stride)
{
    const int64_t nb = n / SW_QK_K;
    const int ntok = (nr + S_TOK - 1) / S_TOK;
    struct s_xsb *px = aligned_alloc(64, (size_t)ntok * (size_t)nb * sizeof *px);
    struct s_wsb *pw = aligned_alloc(64, (size_t)nb * sizeof *pw);
    float(*acc)[S_PANEL][S_TOK] = aligned_alloc(64, (size_t)ntok * sizeof *acc);
    if (px == NULL || pw == NULL || acc == NULL) { // the same numbers, more slowly
        free(px);
        free(pw);
        free(acc);
        s_prev[kind](n, w, w_stride, o0, o1, x, x_stride, nr, y, y_stride);
        return;
    }
    const uint8_t *wb = w, *xb = x;
    for (int t = 0; t < ntok; t++) {
        const int rows = nr - S_TOK * t < S_TOK ? nr - S_TOK * t : S_TOK;
        s_pack_x(kind, xb + (size_t)(S_TOK * t) * x_stride, x_stride, rows, nb, px + t * nb);
    }
    s_tiles_on();
    for (int64_t o = o0; o < o1; o += S_PANEL) {
        const int mw = o1 - o < S_PANEL ? (int)(o1 - o) : S_PANEL;
        s_pack_w(kind, wb + (size_t)o * w_stride, w_stride, mw, nb, pw);
        s_panel(kind, pw, px, nb, ntok, nr, mw, acc, y + o, y_stride);
    }
    _tile_release();
    free(px);
    free(pw);
    free(acc);
}

/* sw_matmul_tiled calls these for SW_AMX_ROWS rows or more (mmtw_rows) and a
 * non-empty range. */
#define S_DEF(name, kind)                                                                          \
    static void s_mm_##name(int64_t n, const void *w, size_t w_stride, int64_t o0, int64_t o1,     \
                            const void *x, size_t x_stride, int nr, float *y, int64_t y_stride)    \
    {                                                                                              \
        s_mm(kind, n, w, w_stride, o0, o1, x, x_stride, nr, y, y_stride);                          \
    }

S_DEF(q4_k, K_Q4_K)
S_DEF(q5_k, K_Q5_K)
S_DEF(q6_k, K_Q6_K)

void sw_kernels_amx(struct sw_kernels *k)
{
    if (k->mmtw[SW_TYPE_Q4_K] == s_mm_q4_k || k->mmtw[SW_TYPE_Q4_K] == NULL ||
        k->mmtw[SW_TYPE_Q5_K] == NULL || k->mmtw[SW_TYPE_Q6_K] == NULL)
        return;
    s_prev[K_Q4_K] = k->mmtw[SW_TYPE_Q4_K];
    s_prev[K_Q5_K] = k->mmtw[SW_TYPE_Q5_K];
    s_prev[K_Q6_K] = k->mmtw[SW_TYPE_Q6_K];
    k->mmtw[SW_TYPE_Q4_K] = s_mm_q4_k;
    k->mmtw[SW_TYPE_Q5_K] = s_mm_q5_k;
    k->mmtw[SW_TYPE_Q6_K] = s_mm_q6_k;
    k->mmtw_rows[SW_TYPE_Q4_K] = k->mmtw_rows[SW_TYPE_Q5_K] = k->mmtw_rows[SW_TYPE_Q6_K] =
        SW_AMX_ROWS;
}
