/*
 * quant_mv_avx512.c - AVX-512 kernels for one activation row (generation:
 * sw_matmul with nr = 1) of q4_K weights. Compiled with -mavx512f -mavx512bw
 * -mavx512vl -mavx512dq -mavx512vnni (the *_avx512.c rule of
 * engine/CMakeLists.txt); quant.c only calls in here after checking the CPU
 * (and the OS's ZMM state) at start-up.
 *
 * The AVX2 kernel (quant_avx2.c, s_tile_k) is compute-bound at about 19 GB/s
 * of weights per Zen 4 core even from cache, barely above the 16 GB/s a core
 * gets from DRAM when two share the memory: generation then runs below the
 * bandwidth bound. This kernel makes the same numbers with about half the
 * instructions:
 *
 * - the integers. GGML's AVX2 order (which sw_vec_dot and every other level
 *   keep) fixes, per super-block, 8 int32 lanes: lane k = sum over the 8
 *   sub-blocks s of scale_s * (elements 4k..4k+3 of s, weights times
 *   activations). Here one zmm holds two sub-blocks (s in its low half, s + 2
 *   in its high half: the low nibbles of 64 quant bytes), vpmaddubsw makes the
 *   pair products and vpdpwssd applies both sub-blocks' scales and adds; int32
 *   lane k of the low half then holds sub-block s's lane k and lane 8 + k
 *   sub-block s + 2's. Adding the two halves at the end gives the 8 lanes as
 *   GGML's kernel forms them: the same exact integers (no product or sum can
 *   overflow), so the same floats after.
 * - the floats, per (weight row, super-block) exactly as in s_tile_k: acc =
 *   fma(d_x * d_w, float(lanes), acc) over 8 lanes, accm = fma(-d_x * dmin_w,
 *   float(mins . bsum pairs), accm) over 4, then GGML's horizontal sums. So
 *   every output is bit-identical to sw_vec_dot's (tests/unit/test_quant.c
 *   compares this level with the others, every shape).
 * - the interleaving: 2 weight rows at a time share each super-block's
 *   activation vectors (loaded and rearranged once) and bsum pairs. With 4
 *   the kernel computes faster from cache (27.9 against 21.5 GB/s a core) but
 *   reads DRAM worse: 4 rows read side by side (super-block b of each, then b
 *   + 1) defeat the hardware prefetcher. Two threads on the 2-core Zen 4 VM,
 *   a 200 MB q4_K matrix (x1536), load average ~1.8: 2 rows 33.9-34.7 GB/s,
 *   4 rows 17.9-22.2, the AVX2 kernel 16.9-17.8; a plain read 33.5 (median).
 */
#include "quant.h"
#include "quant_impl.h"
#include "quant_x86.h"

/* vpermb (AVX512_VBMI): only these functions, called after the check in
 * sw_kernels_avx512_mv(). */
#define SW_VBMI __attribute__((target("avx512vbmi")))

#define S_ROWS 2 // weight rows interleaved (the lanes below have room for 4)
/* Software prefetch distance in groups of S_ROWS rows: each super-block step
 * prefetches its share of the group S_PF_GROUPS groups below, in address
 * order (the hardware prefetcher does not follow rows read side by side:
 * without this, 4 rows read 8 GB/s from DRAM on one Zen 4 core where a
 * sequential read makes 27). One core, 200 MB matrix: 2 rows 20.7 GB/s at 3
 * or 4 groups ahead, 20.1 at 6. */
#ifndef S_PF_GROUPS
#define S_PF_GROUPS 4
#endif

/* A 128-bit pattern in every lane of a zmm. */
SW_AI __m512i s_lanes(__m128i v)
{
    return _mm512_broadcast_i32x4(v);
}

/* The scales and minimums of 4 q4_K/q5_K blocks (one per 128-bit lane): the
 * 12 packed bytes of lane i (read as 16 from p[i]) -> bytes 0..7 its 8 scales,
 * 8..15 its 8 minimums, 6 bits each (quant_avx2.c's s_k4_scales per lane). */
SW_AI __m512i s_scales_mins4(const uint8_t *const p[4])
{
    __m512i v = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)p[0]));
    v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)p[1]), 1);
    v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)p[2]), 2);
    v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)p[3]), 3);
    // the byte with the low bits (a) and the one with bits 7..6 (b) of each output byte
    const __m512i a = _mm512_shuffle_epi8(
        v, s_lanes(_mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11)));
    const __m512i b = _mm512_shuffle_epi8(
        v, s_lanes(_mm_setr_epi8(-1, -1, -1, -1, 0, 1, 2, 3, -1, -1, -1, -1, 4, 5, 6, 7)));
    const __m512i lo = _mm512_and_si512(
        a, s_lanes(_mm_setr_epi8(63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 0, 0, 0, 0)));
    const __m512i hn = _mm512_and_si512(
        _mm512_srli_epi16(a, 4),
        s_lanes(_mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 15, 15, 15, 15)));
    const __m512i top = _mm512_and_si512(_mm512_srli_epi16(b, 2), _mm512_set1_epi8(0x30));
    return _mm512_or_si512(_mm512_or_si512(lo, hn), top);
}

/* vpermb indices (zero-masked to the even bytes) that make, from the scale
 * bytes of row (128-bit lane) i, int16 pairs (scale s, scale s + 1) in every
 * dword of the low 256 bits and (s + 2, s + 3) in the high: the scales of the
 * sub-block pairs s_pair() forms. */
SW_AI __m512i s_pick(int i, int s)
{
    const int a = ((16 * i + s + 1) << 16) | (16 * i + s);
    const int b = ((16 * i + s + 3) << 16) | (16 * i + s + 2);
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi32(a)), _mm256_set1_epi32(b),
                              1);
}

/* Two vpdpbusd results as int16 pairs: r0 (int32 lanes that fit int16) in the
 * low halves, r1 / 16 in the high (r1: sums of the high nibbles left in place,
 * 16 times the quants, so 16 times sums that fit int16). */
SW_AI __m512i s_pair(__m512i r0, __m512i r1)
{
    return _mm512_mask_blend_epi16((__mmask32)0xAAAAAAAAu, r0, _mm512_slli_epi32(r1, 12));
}

SW_AI uint32_t s_u32(const void *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/*
 * y[i] = dot(weight row i, x) for i < rw (<= S_ROWS, a compile-time
 * constant): q4_K rows of nb super-blocks ws bytes apart, x one q8_K row.
 * Per super-block: vpdpbusd makes each sub-block's 4-element sums (exact,
 * within int16), s_pair joins two sub-blocks' sums as int16 pairs and
 * vpdpwssd applies both scales; the minimums of the rows go through one zmm
 * (a row per 128-bit lane), so do their accm (4 floats each, as in s_tile_k).
 */
SW_AI SW_VBMI void s_q4k_rows(int rw, int64_t nb, const uint8_t *w, size_t ws, uintptr_t pf,
                              const sw_block_q8_k *x, float *y)
{
    const uintptr_t lines = ((uintptr_t)rw * ws + 63) / 64; // of the group at pf
    const __m512i m4 = _mm512_set1_epi8(0xF);
    const __m512i mh = _mm512_set1_epi8((char)0xF0);
    __m512i pk[S_ROWS][2];
#pragma GCC unroll 4
    for (int i = 0; i < S_ROWS; i++) {
        pk[i][0] = s_pick(i, 0);
        pk[i][1] = s_pick(i, 4);
    }
    const __m512i pmin =
        s_lanes(_mm_setr_epi8(8, -1, 9, -1, 10, -1, 11, -1, 12, -1, 13, -1, 14, -1, 15, -1));
    const __m512i dsel = _mm512_setr_epi32(1, 1, 1, 1, 3, 3, 3, 3, 5, 5, 5, 5, 7, 7, 7, 7);
    __m256 acc[S_ROWS];
    __m512 accm = _mm512_setzero_ps(); // row i's 4 minimum lanes in 128-bit lane i
#pragma GCC unroll 4
    for (int i = 0; i < S_ROWS; i++)
        acc[i] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const sw_block_q8_k *xb = &x[b];
        /* the activations of the sub-block pairs (0, 2), (1, 3), (4, 6), (5, 7) */
        const __m512i y0 = _mm512_loadu_si512((const void *)xb->qs);
        const __m512i y1 = _mm512_loadu_si512((const void *)(xb->qs + 64));
        const __m512i y2 = _mm512_loadu_si512((const void *)(xb->qs + 128));
        const __m512i y3 = _mm512_loadu_si512((const void *)(xb->qs + 192));
        const __m512i ya = _mm512_shuffle_i64x2(y0, y1, 0x44);
        const __m512i yb = _mm512_shuffle_i64x2(y0, y1, 0xEE);
        const __m512i yc = _mm512_shuffle_i64x2(y2, y3, 0x44);
        const __m512i yd = _mm512_shuffle_i64x2(y2, y3, 0xEE);
        const __m256i bs = _mm256_loadu_si256((const __m256i *)xb->bsums);
        const __m512i q8s =
            s_lanes(_mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1)));
        const float dx = xb->d;
        if (pf != 0) // integer arithmetic: prefetches never fault, the rows may end before
            for (uintptr_t l = (uintptr_t)b * lines / (uintptr_t)nb;
                 l < (uintptr_t)(b + 1) * lines / (uintptr_t)nb; l++)
                _mm_prefetch((const char *)(pf + 64 * l), _MM_HINT_T0);
        const sw_block_q4_k *q4[4];
        const uint8_t *sp[4];
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++) {
            q4[i] = (const sw_block_q4_k *)(w + (size_t)(i < rw ? i : 0) * ws) + b;
            sp[i] = q4[i]->scales;
        }
        /* d_x * d_w and -d_x * dmin_w of the rows: [d0, m0, d1, m1, ...] */
        const __m128i dh = _mm_setr_epi32((int)s_u32(q4[0]), (int)s_u32(q4[1]), (int)s_u32(q4[2]),
                                          (int)s_u32(q4[3]));
        const __m256 dd =
            _mm256_mul_ps(_mm256_setr_ps(dx, -dx, dx, -dx, dx, -dx, dx, -dx), _mm256_cvtph_ps(dh));
        const __m512i sm = s_scales_mins4(sp);
        const __m512i prod = _mm512_madd_epi16(_mm512_shuffle_epi8(sm, pmin), q8s);
        accm = _mm512_fmadd_ps(_mm512_permutexvar_ps(dsel, _mm512_castps256_ps512(dd)),
                               _mm512_cvtepi32_ps(prod), accm);
        float d[8];
        _mm256_storeu_ps(d, dd);
#pragma GCC unroll 4
        for (int i = 0; i < rw; i++) {
            const __m512i v0 = _mm512_loadu_si512((const void *)q4[i]->qs);
            const __m512i v1 = _mm512_loadu_si512((const void *)(q4[i]->qs + 64));
            const __m512i z = _mm512_setzero_si512();
            const __m512i ra = _mm512_dpbusd_epi32(z, _mm512_and_si512(v0, m4), ya);
            const __m512i rb = _mm512_dpbusd_epi32(z, _mm512_and_si512(v0, mh), yb);
            const __m512i rc = _mm512_dpbusd_epi32(z, _mm512_and_si512(v1, m4), yc);
            const __m512i rd = _mm512_dpbusd_epi32(z, _mm512_and_si512(v1, mh), yd);
            const __mmask64 ev = 0x5555555555555555ull;
            __m512i s = _mm512_dpwssd_epi32(z, _mm512_maskz_permutexvar_epi8(ev, pk[i][0], sm),
                                            s_pair(ra, rb));
            s = _mm512_dpwssd_epi32(s, _mm512_maskz_permutexvar_epi8(ev, pk[i][1], sm),
                                    s_pair(rc, rd));
            const __m256i lanes =
                _mm256_add_epi32(_mm512_castsi512_si256(s), _mm512_extracti64x4_epi64(s, 1));
            acc[i] = _mm256_fmadd_ps(_mm256_set1_ps(d[2 * i]), _mm256_cvtepi32_ps(lanes), acc[i]);
        }
    }
    float m4s[16];
    _mm512_storeu_ps(m4s, accm);
#pragma GCC unroll 4
    for (int i = 0; i < rw; i++) {
        const __m128 am = _mm_loadu_ps(m4s + 4 * i);
        __m128 m = _mm_add_ps(am, _mm_movehl_ps(am, am));
        m = _mm_add_ss(m, _mm_movehdup_ps(m));
        y[i] = sw_x86_hsum8(acc[i]) + _mm_cvtss_f32(m);
    }
}

static sw_mm_fn s_mm_q4_k_rows; // the AVX2 level's kernel: batches of 2 rows or more

SW_VBMI static void s_dot_q4_k(int64_t n, float *s, const void *w, const void *x)
{
    s_q4k_rows(1, n / SW_QK_K, w, 0, 0, x, s);
}

SW_VBMI static void s_mm_q4_k(int64_t n, const void *w, size_t w_stride, int64_t o0, int64_t o1,
                              const void *x, size_t x_stride, int nr, float *y, int64_t y_stride)
{
    if (nr != 1) {
        s_mm_q4_k_rows(n, w, w_stride, o0, o1, x, x_stride, nr, y, y_stride);
        return;
    }
    const int64_t nb = n / SW_QK_K;
    const uint8_t *wb = w;
    const uintptr_t ahead = (uintptr_t)S_PF_GROUPS * S_ROWS * w_stride;
    int64_t o = o0;
    for (; o + S_ROWS <= o1; o += S_ROWS)
        s_q4k_rows(S_ROWS, nb, wb + (size_t)o * w_stride, w_stride,
                   (uintptr_t)(wb + (size_t)o * w_stride) + ahead, x, y + o);
    for (; o < o1; o++)
        s_q4k_rows(1, nb, wb + (size_t)o * w_stride, w_stride, 0, x, y + o);
}

void sw_kernels_avx512_mv(struct sw_kernels *k)
{
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512vbmi") || k->mm[SW_TYPE_Q4_K] == NULL ||
        k->mm[SW_TYPE_Q4_K] == s_mm_q4_k)
        return;
    s_mm_q4_k_rows = k->mm[SW_TYPE_Q4_K];
    k->dot[SW_TYPE_Q4_K] = s_dot_q4_k;
    k->mm[SW_TYPE_Q4_K] = s_mm_q4_k;
}
