/*
 * quant_mv_avx512.c - AVX-512 kernels for few activation rows (sw_matmul:
 * generation with nr = 1, and up to S_NRMAX = 8 rows of the K-quants, 15 of
 * the 32-element types (their panels take 16 or more): a speculative round's
 * verification, the head's rows, a draft model's catch-up and tree rows;
 * larger batches of the prompt go to sw_matmul_tiled's kernels elsewhere) of
 * q4_K, q5_K, q6_K, q4_0, q5_0, q4_1, q5_1 and q8_0 weights. Compiled with
 * -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni (the *_avx512.c rule
 * of engine/CMakeLists.txt); quant.c only calls in here after checking the CPU
 * (and the OS's ZMM state) at start-up. Larger batches go
 * to the AVX2 level's kernels (q4_0, q5_0 and q8_0 batches of SW_MMB_ROWS or
 * more to quant_mm_avx512.c's panels).
 *
 * The AVX2 kernels (quant_avx2.c) are compute-bound near the speed a Zen 4
 * core gets from DRAM (q4_K about 19 GB/s of weights per core even from
 * cache, barely above the 16 GB/s a core gets when two share the memory), so
 * generation ran below the bandwidth bound. These kernels make the same
 * numbers with about half the instructions:
 *
 * - K-quants (q4_K, q5_K). GGML's AVX2 order (which sw_vec_dot and every
 *   other level keep) fixes, per super-block, 8 int32 lanes: lane k = sum
 *   over the 8 sub-blocks s of scale_s * (elements 4k..4k+3 of s, weights
 *   times activations). Here one zmm holds two sub-blocks (s in its low half,
 *   s + 2 in its high half: the low nibbles of 64 quant bytes, q5_K's 5th bits
 *   or-ed in), vpdpbusd makes the 4-element sums and vpdpwssd applies both
 *   sub-blocks' scales (two sub-blocks' sums joined as int16 pairs) and adds;
 *   int32 lane k of the low half then holds sub-block s's lane k and lane 8 +
 *   k sub-block s + 2's. Adding the two halves at the end gives the 8 lanes as
 *   GGML's kernel forms them: the same exact integers (no product or sum can
 *   overflow), so the same floats after.
 * - their floats, per (weight row, super-block) exactly as in s_tile_k: acc =
 *   fma(d_x * d_w, float(lanes), acc) over 8 lanes; the minimums q4_K's accm =
 *   fma(-d_x * dmin_w, float(mins . bsum pairs), accm) over 4 lanes, q5_K's
 *   summs = fmaf(-d_x * dmin_w, float(mins . bsums), summs); then GGML's
 *   horizontal sums.
 * - q6_K. GGML's AVX2 order: per super-block 8 int32 lanes, lane k = sum
 *   over the 8 32-element chunks c of scale(c, k < 4 ? first : second 16
 *   elements) * (elements 4k..4k+3 of c, unsigned quants 0..63 times
 *   activations), minus 32 * (bsums[2k] * scale 2k + bsums[2k+1] * scale
 *   2k+1). Here a zmm holds two chunks of a 128-element half (its 64 ql bytes
 *   as loaded, the qh bits joined by one vpternlogd select), vpdpbusd makes
 *   the 4-element sums (they fit int16), chunks c and c + 2 go as int16 pairs
 *   into one vpdpwssd with their scales (sign-extended, paired by vpermb),
 *   started from the -32 term (vpmaddwd of the bsums and -32 * scales); the
 *   two 256-bit halves added are GGML's lanes. Then acc = fma(d_x * d_w,
 *   float(lanes), acc) per super-block and GGML's horizontal sum.
 * - 32-element blocks (q4_0, q5_0, q8_0 against q8_0 activations): GGML's
 *   order keeps per block 8 int32 lanes (lane k = elements 4k..4k+3) and acc
 *   = fma(d_w * d_x, float(lanes), acc). One zmm holds two weight rows' blocks
 *   (a row a 256-bit half), and one vpdpbusd makes their lanes: unsigned
 *   weights (q4_0's nibbles; q5_0's plus 16 where its qh bit is set, one
 *   masked byte add; q8_0's quants + 128) times the activation, started from
 *   -8, -16 resp. -128 times the activation's 4-element sums (made once per
 *   block for all rows): the same exact integers. The fma then runs on both
 *   rows' 8 lanes at once. q5_0 came later (issue 37): llama.cpp's Q4_K_M
 *   gives it the tensors whose rows are not a multiple of 256 wide, as most
 *   of Qwen2.5 0.5B's (896), the usual draft model of the 1.5B-7B Qwens;
 *   there the AVX2 kernel read 14 GB/s with 2 threads, half the machine's
 *   bandwidth. Qwen2.5-Coder-0.5B Q4_K_M, `shardwire generate -n 128
 *   --greedy`, three runs side by side on the 2-core Zen 4 VM: 1 thread
 *   30.4-33.2 tok/s before, 44.9-46.1 after; 2 threads 45.1-52.6 and
 *   60.3-66.2; the same logits digest.
 * - q4_1, q5_1 (against q8_1 activations): the same unsigned lanes with no
 *   offset, and GGML's second chain summs = fma(m_w, s_x, summs) block by
 *   block, the rows' chains in the lanes of one xmm, added to the lanes' sum
 *   last. SmolLM2-135M Q4_1 (the default model), the same command: 1 thread
 *   75.3-89.0 tok/s before, 102.5-120.1 after; 2 threads 124.8-129.0 and
 *   156.7-164.5.
 * - their batches of 2-15 activation rows (a draft model's catch-up and tree
 *   rows, a Q4_0/Q8_0 target's verification): each weight block unpacked
 *   once for up to S32_XMAX activation rows, every row's lanes made as in the
 *   one-row kernel. bench_quant qwen, one core, 4864 x 896, us a call for 2 /
 *   5 / 8 rows against the AVX2 kernels that ran them before: q5_0 295 / 779
 *   / 1166 -> 222 / 510 / 735, q8_0 217 / 550 / 855 -> 186 / 443 / 673; 9
 *   rows q5_0 1379 -> 1119, q8_0 979 -> 781.
 *
 * So every output is bit-identical to sw_vec_dot's (tests/unit/test_quant.c
 * test_onerow_levels compares this level with the scalar one, every type).
 *
 * Several activation rows (the K-quants, issue 37): a call takes S_ROWS
 * weight rows (q4_K/q5_K: S_KXROWS = 4, their minimums one zmm, the
 * activation's per-row work shared by 4; 2 rows were 8-11% slower at nr = 2
 * to 8) and up to S_XMAX = 4 activation rows (nr split evenly: 5 = 3 +
 * 2, 7 = 4 + 3); per super-block each weight row is unpacked once (its quants
 * as vpdpbusd takes them, its scales paired by vpermb) and every activation
 * row's lanes made from it with the one-row kernel's instructions, so per
 * (weight row, activation row) the same integers and the same float
 * operations in the same order: bit-identical to the AVX2 batch kernels and
 * the scalar ones (test_batch_levels, nr 1 to 9 and 17). The group's weights
 * come from DRAM for its first chunk of activation rows only. One Zen 4
 * core, best of 3 runs of tests/bench/bench_quant's qwen set (load average
 * ~1.1, a test suite beside), us a call, against the AVX2 batch kernels
 * (what ran before): q4_K 8960 x 1536 nr = 2 525 against 647, nr = 5 1196 /
 * 1279, nr = 8 1795 / 1970; q6_K 1536 x 8960 514 / 612, 1120 / 1177, 1480 /
 * 1903; q6_K 151936 x 1536 (from DRAM) 12425 / 13455, 22594 / 21782, 29762
 * / 32736. Speculative verification (Qwen2.5-Coder 1.5B, 0.5B draft, K = 4,
 * 2 threads): target time per round 90-100 ms against 96-104.
 *
 * The interleaving: 2 weight rows at a time share each block's activation
 * vectors (loaded and rearranged once). More rows compute faster from cache
 * (q4_K 4 rows 27.9 against 21.5 GB/s a core) but read DRAM worse: rows read
 * side by side (block b of each, then b + 1) defeat the hardware prefetcher,
 * so the kernels prefetch the group S_PF_GROUPS groups below in address
 * order. Two threads on the 2-core Zen 4 VM, a 200 MB q4_K matrix (x1536),
 * load average ~1.8: 2 rows 33.9-34.7 GB/s, 4 rows 17.9-22.2, the AVX2 kernel
 * 16.9-17.8; a plain read 33.5 (median). q6_K prefetches into L2 (T2
 * hint): with T0 (or NTA) its 2 rows read 9-10 GB/s from DRAM on one core,
 * the time stalled in the prefetch loop (its 40 lines a group held in L1's
 * few miss buffers?), with T2 19-23, T1 alike (1 row without software
 * prefetch 15-19, the AVX2 kernel 16-20; one core, the 191 MB 151936 x 1536
 * output matrix, load average 1-4 from another test suite). The other
 * kernels prefetch into L2 as well since the Intel Xeon VM with AMX
 * (2026-12-07, `shardwire generate -n 64 --greedy`, Qwen2.5-Coder 1.5B, two
 * runs each side by side, T0 against T2): Q4_K_M 2 threads 18.9-19.2 against
 * 20.3-20.4 tok/s, 1 thread 9.7 against 11.3; Q8_0 2 threads 11.7-12.0
 * against 13.5-13.6; Q4_0 22.3-22.8 against 23.2-23.4 (without software
 * prefetch: Q4_K_M 16.7). Zen 4 was not measured again with T2 for these.
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
/* Activation rows a kernel call takes at once (each weight super-block is
 * unpacked once for them), and the most a call of sw_matmul's mm takes to
 * these kernels (more go to the AVX2 level's). */
#define S_XMAX 4
/* q4_K/q5_K weight rows a call takes for 2 activation rows or more (4: one
 * zmm holds their minimums; the activation's per-row work shared by more). */
#define S_KXROWS 4
#ifndef S_XCHUNK
#define S_XCHUNK S_XMAX
#endif
#ifndef S_NRMAX
#define S_NRMAX 8
#endif
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

SW_AI uint16_t s_u16(const void *p)
{
    uint16_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

enum { K_Q4_K, K_Q5_K };

/* Two vpdpbusd results (true sums that fit int16) as int16 pairs: r0 in the
 * low halves, r1 in the high. */
SW_AI __m512i s_pair5(__m512i r0, __m512i r1)
{
    return _mm512_mask_blend_epi16((__mmask32)0xAAAAAAAAu, r0, _mm512_slli_epi32(r1, 16));
}

/* q5_K: (v & 15) | 16 * (bit s of h) for the sub-blocks s = 4 - l of the low
 * 256-bit half and 4 - hh of the high (shift counts of h, to the left, or with
 * right != 0 the bits s = 4 + l, 4 + hh to the right). h is qh in both halves;
 * bits shifted in from the neighbouring byte never reach bit 4. */
SW_AI __m512i s_q5_bits(__m512i v, __m512i h, int right, int l, int hh)
{
    const __m512i sh = _mm512_setr_epi64(l, l, l, l, hh, hh, hh, hh);
    const __m512i b = right ? _mm512_srlv_epi64(h, sh) : _mm512_sllv_epi64(h, sh);
    /* (v & 15) | (b & 16): vpternlogd (A & B) | C with C = b & 16 */
    return _mm512_ternarylogic_epi32(v, _mm512_set1_epi8(0xF),
                                     _mm512_and_si512(b, _mm512_set1_epi8(0x10)), 0xEA);
}

/*
 * One q4_K/q5_K super-block blk's weights unpacked for the activation vectors
 * of the sub-block pairs (0, 2), (1, 3), (4, 6), (5, 7): u[j] the unsigned
 * quants (q4_K's high nibbles left in place), sc[0..1] the scales as int16
 * pairs; sm: the scales of the group's rows, pk: this row's s_pick indices.
 */
SW_AI SW_VBMI void s_k45_unpack(int kind, const uint8_t *blk, const __m512i pk[2], __m512i sm,
                                __m512i u[4], __m512i sc[2])
{
    const __m512i m4 = _mm512_set1_epi8(0xF);
    const uint8_t *qs = blk + (kind == K_Q5_K ? 48 : 16);
    const __m512i v0 = _mm512_loadu_si512((const void *)qs);
    const __m512i v1 = _mm512_loadu_si512((const void *)(qs + 64));
    if (kind == K_Q4_K) { // the high nibbles stay in place: 16 times the sums
        const __m512i mh = _mm512_set1_epi8((char)0xF0);
        u[0] = _mm512_and_si512(v0, m4);
        u[1] = _mm512_and_si512(v0, mh);
        u[2] = _mm512_and_si512(v1, m4);
        u[3] = _mm512_and_si512(v1, mh);
    } else { // element 32s + l: bit s of qh[l]
        const __m512i h = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(blk + 16)));
        u[0] = s_q5_bits(v0, h, 0, 4, 2);
        u[1] = s_q5_bits(_mm512_srli_epi16(v0, 4), h, 0, 3, 1);
        u[2] = s_q5_bits(v1, h, 1, 0, 2);
        u[3] = s_q5_bits(_mm512_srli_epi16(v1, 4), h, 1, 1, 3);
    }
    const __mmask64 ev = 0x5555555555555555ull;
    sc[0] = _mm512_maskz_permutexvar_epi8(ev, pk[0], sm);
    sc[1] = _mm512_maskz_permutexvar_epi8(ev, pk[1], sm);
}

/* The 8 int32 lanes of an unpacked q4_K/q5_K super-block (s_k45_unpack)
 * against the activation vectors yv. */
SW_AI __m256i s_k45_dot(int kind, const __m512i u[4], const __m512i sc[2], const __m512i yv[4])
{
    const __m512i z = _mm512_setzero_si512();
    __m512i p0, p1;
    if (kind == K_Q4_K) {
        p0 = s_pair(_mm512_dpbusd_epi32(z, u[0], yv[0]), _mm512_dpbusd_epi32(z, u[1], yv[1]));
        p1 = s_pair(_mm512_dpbusd_epi32(z, u[2], yv[2]), _mm512_dpbusd_epi32(z, u[3], yv[3]));
    } else {
        p0 = s_pair5(_mm512_dpbusd_epi32(z, u[0], yv[0]), _mm512_dpbusd_epi32(z, u[1], yv[1]));
        p1 = s_pair5(_mm512_dpbusd_epi32(z, u[2], yv[2]), _mm512_dpbusd_epi32(z, u[3], yv[3]));
    }
    __m512i s = _mm512_dpwssd_epi32(z, sc[0], p0);
    s = _mm512_dpwssd_epi32(s, sc[1], p1);
    return _mm256_add_epi32(_mm512_castsi512_si256(s), _mm512_extracti64x4_epi64(s, 1));
}

/* A q8_K block's activation vectors of the sub-block pairs (0, 2), (1, 3),
 * (4, 6), (5, 7), and its bsum pairs in every 128-bit lane (*q8s). */
SW_AI void s_k45_x(const sw_block_q8_k *xb, __m512i yv[4], __m512i *q8s)
{
    const __m512i y0 = _mm512_loadu_si512((const void *)xb->qs);
    const __m512i y1 = _mm512_loadu_si512((const void *)(xb->qs + 64));
    const __m512i y2 = _mm512_loadu_si512((const void *)(xb->qs + 128));
    const __m512i y3 = _mm512_loadu_si512((const void *)(xb->qs + 192));
    yv[0] = _mm512_shuffle_i64x2(y0, y1, 0x44);
    yv[1] = _mm512_shuffle_i64x2(y0, y1, 0xEE);
    yv[2] = _mm512_shuffle_i64x2(y2, y3, 0x44);
    yv[3] = _mm512_shuffle_i64x2(y2, y3, 0xEE);
    const __m256i bs = _mm256_loadu_si256((const __m256i *)xb->bsums);
    *q8s = s_lanes(_mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1)));
}

/* The minimum term of the rows (a row a 128-bit lane) for one super-block:
 * accm + (d_x * -dmin_w) * float(mins . bsum pairs), q5_K's sum in all 4 lanes
 * of its row; mins: the rows' minimums as int16 (s_scales_mins4 then pmin),
 * dd: [d_x * d_w, -d_x * dmin_w] per row. */
SW_AI __m512 s_k45_min(int kind, __m512i mins, __m512i q8s, __m256 dd, __m512 accm)
{
    const __m512i dsel = _mm512_setr_epi32(1, 1, 1, 1, 3, 3, 3, 3, 5, 5, 5, 5, 7, 7, 7, 7);
    __m512i prod = _mm512_madd_epi16(mins, q8s);
    if (kind == K_Q5_K) { // the row's total in each of its 4 lanes (exact)
        prod = _mm512_add_epi32(prod, _mm512_shuffle_epi32(prod, (_MM_PERM_ENUM)0xB1));
        prod = _mm512_add_epi32(prod, _mm512_shuffle_epi32(prod, (_MM_PERM_ENUM)0x4E));
    }
    return _mm512_fmadd_ps(_mm512_permutexvar_ps(dsel, _mm512_castps256_ps512(dd)),
                           _mm512_cvtepi32_ps(prod), accm);
}

/* A row's result: GGML's horizontal sums of acc and of its minimum lanes m. */
SW_AI float s_k45_out(int kind, __m256 acc, const float *m)
{
    const __m128 am = _mm_loadu_ps(m);
    __m128 s = _mm_add_ps(am, _mm_movehl_ps(am, am));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return sw_x86_hsum8(acc) + (kind == K_Q5_K ? m[0] : _mm_cvtss_f32(s));
}

/* The packed-scale rows of super-block b: q4[i] row i's block (row 0's for
 * i >= rw), sp[i] its packed scales; returns [d_w, dmin_w] per row. */
SW_AI __m256 s_k45_w(int kind, int rw, const uint8_t *w, size_t ws, int64_t b, const uint8_t *q4[4],
                     const uint8_t *sp[4])
{
    const size_t bsz = kind == K_Q5_K ? sizeof(sw_block_q5_k) : sizeof(sw_block_q4_k);
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        q4[i] = w + (size_t)(i < rw ? i : 0) * ws + (size_t)b * bsz;
        sp[i] = q4[i] + 4; // the packed scales
    }
    return _mm256_cvtph_ps(_mm_setr_epi32((int)sw_x86_u32(q4[0]), (int)sw_x86_u32(q4[1]),
                                          (int)sw_x86_u32(q4[2]), (int)sw_x86_u32(q4[3])));
}

/* The prefetches of super-block b's share of the group at pf (lines cache
 * lines in all, over nb super-blocks); integer arithmetic: prefetches never
 * fault, the rows may end before. */
#define S_PREFETCH(pf, b, lines, nb, hint)                                                         \
    do {                                                                                           \
        if ((pf) != 0)                                                                             \
            for (uintptr_t l_ = (uintptr_t)(b) * (lines) / (uintptr_t)(nb);                        \
                 l_ < (uintptr_t)((b) + 1) * (lines) / (uintptr_t)(nb); l_++)                      \
                _mm_prefetch((const char *)((pf) + 64 * l_), hint);                                \
    } while (0)

/*
 * y[r * ys + i] = dot(weight row i, x row r) for i < rw (<= 4) and r < xr
 * (<= S_XMAX), both compile-time constants: q4_K/q5_K rows of nb
 * super-blocks ws bytes apart, x q8_K rows xs bytes apart. Per super-block:
 * each weight row is unpacked once (s_k45_unpack) and every activation row's
 * 8 lanes made from it (s_k45_dot); the minimums of the rows go through one
 * zmm per activation row (a weight row per 128-bit lane), so do q4_K's accm
 * (4 floats each, as in s_tile_k) and q5_K's summs (its lanes all equal). The
 * operations per (weight row, activation row) are those of one activation row.
 */
SW_AI SW_VBMI void s_k45_rows(int kind, int rw, int xr, int64_t nb, const uint8_t *w, size_t ws,
                              uintptr_t pf, const uint8_t *x, size_t xs, float *y, int64_t ys)
{
    const uintptr_t lines = ((uintptr_t)rw * ws + 63) / 64; // of the group at pf
    __m512i pk[4][2];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        pk[i][0] = s_pick(i, 0);
        pk[i][1] = s_pick(i, 4);
    }
    const __m512i pmin =
        s_lanes(_mm_setr_epi8(8, -1, 9, -1, 10, -1, 11, -1, 12, -1, 13, -1, 14, -1, 15, -1));
    __m256 acc[S_XMAX][4];
    __m512 accm[S_XMAX]; // row i's minimum lanes in 128-bit lane i
#pragma GCC unroll 4
    for (int r = 0; r < xr; r++) {
        accm[r] = _mm512_setzero_ps();
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++)
            acc[r][i] = _mm256_setzero_ps();
    }
    for (int64_t b = 0; b < nb; b++) {
        S_PREFETCH(pf, b, lines, nb, _MM_HINT_T2);
        const uint8_t *q4[4], *sp[4];
        const __m256 dw = s_k45_w(kind, rw, w, ws, b, q4, sp); // [d0, m0, d1, m1, ...]
        const __m512i sm = s_scales_mins4(sp);
        const __m512i mins = _mm512_shuffle_epi8(sm, pmin);
        __m512i u[4][4], sc[4][2];
#pragma GCC unroll 4
        for (int i = 0; i < rw; i++)
            s_k45_unpack(kind, q4[i], pk[i], sm, u[i], sc[i]);
#pragma GCC unroll 4
        for (int r = 0; r < xr; r++) {
            const sw_block_q8_k *xb = (const sw_block_q8_k *)(x + (size_t)r * xs) + b;
            __m512i yv[4], q8s;
            s_k45_x(xb, yv, &q8s);
            const float dx = xb->d;
            /* d_x * d_w and -d_x * dmin_w of the rows: [d0, m0, d1, m1, ...] */
            const __m256 dd = _mm256_mul_ps(_mm256_setr_ps(dx, -dx, dx, -dx, dx, -dx, dx, -dx), dw);
            accm[r] = s_k45_min(kind, mins, q8s, dd, accm[r]);
            float d[8];
            _mm256_storeu_ps(d, dd);
#pragma GCC unroll 4
            for (int i = 0; i < rw; i++)
                acc[r][i] = _mm256_fmadd_ps(_mm256_set1_ps(d[2 * i]),
                                            _mm256_cvtepi32_ps(s_k45_dot(kind, u[i], sc[i], yv)),
                                            acc[r][i]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < xr; r++) {
        float m4s[16];
        _mm512_storeu_ps(m4s, accm[r]);
#pragma GCC unroll 4
        for (int i = 0; i < rw; i++)
            y[r * ys + i] = s_k45_out(kind, acc[r][i], m4s + 4 * i);
    }
}

/* ---- q6_K against q8_K activations ---------------------------------------- */

/* The 6-bit quants (0..63) of half h of a q6_K block blk: *a chunks 0 and 1
 * of the half (elements 128h + 0..63, a chunk a 256-bit half), *b chunks 2
 * and 3 (128h + 64..127). Chunk c: the low (c < 2) or high nibbles of
 * ql[64h + 32(c & 1) + l] with bits 2c..2c+1 of qh[32h + l] above. */
SW_AI void s_q6_bits(const uint8_t *blk, int h, __m512i *a, __m512i *b)
{
    const __m512i m4 = _mm512_set1_epi8(0xF);
    const __m512i l = _mm512_loadu_si512((const void *)(blk + 64 * h));
    const __m512i qh =
        _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(blk + 128 + 32 * h)));
    /* qh in the low half, qh >> 2 in the high: bits 0..1 of each byte chunk
     * 0's (resp. 1's) top bits, bits 4..5 chunk 2's (3's); bits of the next
     * byte shifted in are masked off */
    const __m512i t = _mm512_and_si512(
        _mm512_srlv_epi64(qh, _mm512_setr_epi64(0, 0, 0, 0, 2, 2, 2, 2)), _mm512_set1_epi8(0x33));
    /* vpternlogd 0xCA: A ? B : C bitwise; bits 0..3 the nibble, 4..7 from t */
    *a = _mm512_ternarylogic_epi32(m4, l, _mm512_slli_epi64(t, 4), 0xCA);
    *b = _mm512_ternarylogic_epi32(m4, _mm512_srli_epi16(l, 4), t, 0xCA);
}

/* vpermb indices into the int16 scales of two rows (row r's 16 at int16
 * 16r..16r+15) that pair, in dword i, the scales of the lanes s_q6_rows joins
 * in half h: chunk i / 8's (low int16) and chunk 2 + i / 8's (high), 4-element
 * group i % 8 (its first 16 elements scale 2c, the next 16 scale 2c + 1). */
SW_AI __m512i s_q6_pick(int r, int h)
{
    int32_t v[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++) {
        const int a = 16 * r + 8 * h + 2 * (i / 8) + (i % 8) / 4;
        v[i] = (2 * a) | (2 * a + 1) << 8 | (2 * a + 8) << 16 | (2 * a + 9) << 24;
    }
    return _mm512_loadu_si512((const void *)v);
}

/*
 * y[r * ys + i] = dot(weight row i, x row r) for i < rw (<= S_ROWS) and r <
 * xr (<= S_XMAX), both compile-time constants: q6_K rows of nb super-blocks
 * ws bytes apart, x q8_K rows xs bytes apart. Per super-block, each weight
 * row's quants are unpacked (s_q6_bits) and its scales paired once; per
 * activation row: vpdpbusd of the unsigned quants against the activation
 * makes each chunk's 8 4-element sums (they fit int16); chunks c and c + 2 of
 * a half go as int16 pairs into one vpdpwssd with their scales, started from
 * -32 * (bsums . scales) (GGML's offset term, in the low 256 bits for weight
 * row 0, the high for row 1); the two 256-bit halves added give GGML's 8
 * lanes. Then acc = fma(d_x * d_w, float(lanes), acc) and GGML's horizontal
 * sum, as s_tile_k.
 */
SW_AI SW_VBMI void s_q6_rows(int rw, int xr, int64_t nb, const uint8_t *w, size_t ws, uintptr_t pf,
                             const uint8_t *x, size_t xs, float *y, int64_t ys)
{
    const size_t bsz = sizeof(sw_block_q6_k);
    const uintptr_t lines = ((uintptr_t)rw * ws + 63) / 64; // of the group at pf
    _Static_assert(S_ROWS == 2, "s_q6_rows: two rows' scales in one zmm");
    __m512i pk[S_ROWS][2];
#pragma GCC unroll 4
    for (int i = 0; i < S_ROWS; i++) {
        pk[i][0] = s_q6_pick(i, 0);
        pk[i][1] = s_q6_pick(i, 1);
    }
    __m256 acc[S_XMAX][S_ROWS];
#pragma GCC unroll 4
    for (int r = 0; r < xr; r++)
#pragma GCC unroll 4
        for (int i = 0; i < S_ROWS; i++)
            acc[r][i] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        S_PREFETCH(pf, b, lines, nb, _MM_HINT_T2);
        const uint8_t *q6[S_ROWS];
#pragma GCC unroll 4
        for (int i = 0; i < S_ROWS; i++)
            q6[i] = w + (size_t)(i < rw ? i : 0) * ws + (size_t)b * bsz;
        /* the rows' scales as int16 (row i at int16 16i), and times -32 */
        const __m512i sc = _mm512_cvtepi8_epi16(_mm256_inserti128_si256(
            _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(q6[0] + 192))),
            _mm_loadu_si128((const __m128i *)(q6[1] + 192)), 1));
        const __m512i nsc = _mm512_mullo_epi16(sc, _mm512_set1_epi16(-32));
        const __m128 dw = _mm_cvtph_ps(
            _mm_setr_epi16((short)s_u16(q6[0] + 208), (short)s_u16(q6[1] + 208), 0, 0, 0, 0, 0, 0));
        __m512i qv[S_ROWS][4], scp[S_ROWS][2]; // the quants, the paired scales
#pragma GCC unroll 4
        for (int i = 0; i < rw; i++)
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++) {
                s_q6_bits(q6[i], h, &qv[i][2 * h], &qv[i][2 * h + 1]);
                scp[i][h] = _mm512_permutexvar_epi8(pk[i][h], sc);
            }
#pragma GCC unroll 4
        for (int r = 0; r < xr; r++) {
            const sw_block_q8_k *xb = (const sw_block_q8_k *)(x + (size_t)r * xs) + b;
            const __m512i yv[4] = {_mm512_loadu_si512((const void *)xb->qs),
                                   _mm512_loadu_si512((const void *)(xb->qs + 64)),
                                   _mm512_loadu_si512((const void *)(xb->qs + 128)),
                                   _mm512_loadu_si512((const void *)(xb->qs + 192))};
            const __m256i bs = _mm256_loadu_si256((const __m256i *)xb->bsums);
            /* the bsums in row i's half (the other zero) */
            const __m512i bsx[S_ROWS] = {_mm512_zextsi256_si512(bs),
                                         _mm512_inserti64x4(_mm512_setzero_si512(), bs, 1)};
            float d[4];
            _mm_storeu_ps(d, _mm_mul_ps(_mm_set1_ps(xb->d), dw));
#pragma GCC unroll 4
            for (int i = 0; i < rw; i++) {
                const __m512i z = _mm512_setzero_si512();
                __m512i s = _mm512_madd_epi16(bsx[i], nsc);
#pragma GCC unroll 2
                for (int h = 0; h < 2; h++) {
                    const __m512i p =
                        s_pair5(_mm512_dpbusd_epi32(z, qv[i][2 * h], yv[2 * h]),
                                _mm512_dpbusd_epi32(z, qv[i][2 * h + 1], yv[2 * h + 1]));
                    s = _mm512_dpwssd_epi32(s, scp[i][h], p);
                }
                const __m256i lanes =
                    _mm256_add_epi32(_mm512_castsi512_si256(s), _mm512_extracti64x4_epi64(s, 1));
                acc[r][i] =
                    _mm256_fmadd_ps(_mm256_set1_ps(d[i]), _mm256_cvtepi32_ps(lanes), acc[r][i]);
            }
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < xr; r++)
#pragma GCC unroll 4
        for (int i = 0; i < rw; i++)
            y[r * ys + i] = sw_x86_hsum8(acc[r][i]);
}

/* ---- 32-element blocks: q4_0, q5_0, q8_0 against q8_0 activations ------- */

enum { K_Q4_0, K_Q8_0, K_Q5_0, K_Q4_1, K_Q5_1 };

SW_AI size_t s_bsz32(int kind)
{
    return kind == K_Q8_0   ? sizeof(sw_block_q8_0)
           : kind == K_Q5_0 ? sizeof(sw_block_q5_0)
           : kind == K_Q4_1 ? sizeof(sw_block_q4_1)
           : kind == K_Q5_1 ? sizeof(sw_block_q5_1)
                            : sizeof(sw_block_q4_0);
}

/* q4_1 and q5_1: a minimum after the scale, q8_1 activations (their sum term). */
SW_AI int s_has_min32(int kind)
{
    return kind == K_Q4_1 || kind == K_Q5_1;
}

/* Weight rows a call interleaves (2 or 4: two a zmm, their f16 scales in one
 * 64-bit word). One core, 1024 x 1536 matrices from L2: q4_0 2 rows 16.7 GB/s,
 * 4 rows 21.4; q8_0 33.8 and 44.4. */
#ifndef S32_ROWS
#define S32_ROWS 4
#endif
_Static_assert(S32_ROWS == 2 || S32_ROWS == 4, "S32_ROWS: 2 or 4");
/* Activation rows a pass over a group of weight rows takes (each weight block
 * unpacked once for them); batches of up to SW_MMB_ROWS - 1 rows split evenly. */
#define S32_XMAX 4

/* Two rows' 16 bytes of nibbles p0, p1 (q4_0's layout: element j the low
 * nibble of byte j, j + 16 the high) as 32 unsigned bytes each, one row a
 * 256-bit half, byte j element j. */
SW_AI __m512i s_nib32(const uint8_t *p0, const uint8_t *p1)
{
    const __m512i v = _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)p0))),
        _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)p1)), 1);
    // 128-bit lanes 1 and 3 (int16 words 8..15, 24..31) take the high nibbles
    return _mm512_and_si512(_mm512_mask_srli_epi16(v, (__mmask32)0xFF00FF00u, v, 4),
                            _mm512_set1_epi8(0xF));
}

/* Two rows' blocks p0, p1 (what follows the f16 scale) as unsigned bytes,
 * one row a 256-bit half, byte j element j: q4_0 its nibbles, q4_1 those
 * after its minimum, q5_0 (q5_1 after its minimum) its nibbles plus 16 where
 * bit j of its qh is set, q8_0 its quants + 128. */
SW_AI __m512i s_w32(int kind, const uint8_t *p0, const uint8_t *p1)
{
    if (kind == K_Q4_1) // after the minimum
        return s_nib32(p0 + 2, p1 + 2);
    if (kind == K_Q5_1) {
        p0 += 2;
        p1 += 2;
        kind = K_Q5_0;
    }
    if (kind == K_Q5_0) {
        uint32_t h0, h1;
        memcpy(&h0, p0, 4);
        memcpy(&h1, p1, 4);
        const __m512i n = s_nib32(p0 + 4, p1 + 4);
        return _mm512_mask_add_epi8(n, (__mmask64)h0 | (__mmask64)h1 << 32, n,
                                    _mm512_set1_epi8(16));
    }
    if (kind == K_Q8_0) {
        const __m512i v =
            _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)p0)),
                               _mm256_loadu_si256((const __m256i *)p1), 1);
        return _mm512_xor_si512(v, _mm512_set1_epi8((char)0x80));
    }
    return s_nib32(p0, p1);
}

/*
 * y[i] = dot(weight row i, x) for i < rw (<= S32_ROWS, a compile-time
 * constant): rows of nb blocks ws bytes apart, x one q8_0 row (q8_1 for
 * q4_1/q5_1). Each block's lanes start from -offset * (4-element sums of the
 * activation), offset 8 (q4_0), 16 (q5_0) or 128 (q8_0), or from 0 (q4_1,
 * q5_1), so vpdpbusd on the unsigned weights gives GGML's integers; then acc =
 * fma(d_w * d_x, float(lanes), acc), two rows a zmm. q4_1/q5_1 also keep
 * GGML's minimum chain summs = fma(m_w, s_x, summs) (block by block, the
 * rows' chains in the lanes of one xmm), added to the lanes' sum last.
 */
SW_AI void s_rows32(int kind, int rw, int xr, int64_t nb, const uint8_t *w, size_t ws, uintptr_t pf,
                    const uint8_t *x, size_t xs, float *y, int64_t ys)
{
    const size_t bsz = s_bsz32(kind);
    const int hm = s_has_min32(kind);
    const size_t xsz = hm ? sizeof(sw_block_q8_1) : sizeof(sw_block_q8_0);
    const int xq = hm ? 4 : 2; // the activation's quants in its block
    __m128 summ[S32_XMAX];
    const int np = (rw + 1) / 2; // zmm pairs in use
    const uint8_t *wr[S32_ROWS];
#pragma GCC unroll 8
    for (int i = 0; i < S32_ROWS; i++)
        wr[i] = w + (size_t)(i < rw ? i : 0) * ws;
    __m512 acc[S32_XMAX][S32_ROWS / 2];
    __m512i pidx[S32_ROWS / 2];
#pragma GCC unroll 8
    for (int k = 0; k < S32_ROWS / 2; k++) {
        pidx[k] = _mm512_inserti64x4(_mm512_set1_epi32(2 * k), _mm256_set1_epi32(2 * k + 1), 1);
#pragma GCC unroll 4
        for (int a = 0; a < S32_XMAX; a++)
            acc[a][k] = _mm512_setzero_ps();
    }
#pragma GCC unroll 4
    for (int a = 0; a < S32_XMAX; a++)
        summ[a] = _mm_setzero_ps();
    const __m512i off = _mm512_set1_epi8((char)(kind == K_Q8_0 ? 0x80 : kind == K_Q5_0 ? 16 : 8));
    const uintptr_t step = (uintptr_t)rw * ws / (uintptr_t)nb; // of the group at pf, a block
    uintptr_t pn = pf & ~(uintptr_t)63;
    for (int64_t b = 0; b < nb; b++) {
        if (pf != 0) // integer arithmetic: prefetches never fault, the rows may end before
            for (; pn < pf + (uintptr_t)(b + 1) * step; pn += 64)
                _mm_prefetch((const char *)pn, _MM_HINT_T2);
        uint64_t dbits = 0, mbits = 0; // the rows' f16 scales (and minimums)
#pragma GCC unroll 8
        for (int i = 0; i < S32_ROWS; i++) {
            dbits |= (uint64_t)s_u16(wr[i] + (size_t)b * bsz) << (16 * i);
            if (hm)
                mbits |= (uint64_t)s_u16(wr[i] + (size_t)b * bsz + 2) << (16 * i);
        }
        const __m128 dw = _mm_cvtph_ps(_mm_cvtsi64_si128((long long)dbits));
        __m512i u[S32_ROWS / 2]; // the weight blocks, unpacked once for every activation row
#pragma GCC unroll 8
        for (int k = 0; k < np; k++)
            u[k] =
                s_w32(kind, wr[2 * k] + (size_t)b * bsz + 2, wr[2 * k + 1] + (size_t)b * bsz + 2);
#pragma GCC unroll 4
        for (int a = 0; a < xr; a++) {
            const uint8_t *xb = x + (size_t)a * xs + (size_t)b * xsz;
            const __m512i yv =
                _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(xb + xq)));
            const __m512i z = _mm512_setzero_si512();
            const __m512i bias = hm ? z : _mm512_sub_epi32(z, _mm512_dpbusd_epi32(z, off, yv));
            const __m128 dwx = _mm_mul_ps(dw, _mm_set1_ps(sw_x86_f16((const sw_f16 *)xb)));
            if (hm) // the rows' minimums times the activation's s
                summ[a] = _mm_fmadd_ps(_mm_cvtph_ps(_mm_cvtsi64_si128((long long)mbits)),
                                       _mm_set1_ps(sw_x86_f16((const sw_f16 *)(xb + 2))), summ[a]);
#pragma GCC unroll 8
            for (int k = 0; k < np; k++) {
                const __m512 f = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(bias, u[k], yv));
                acc[a][k] = _mm512_fmadd_ps(
                    _mm512_permutexvar_ps(pidx[k], _mm512_castps128_ps512(dwx)), f, acc[a][k]);
            }
        }
    }
#pragma GCC unroll 4
    for (int a = 0; a < xr; a++) {
        float m[4];
        _mm_storeu_ps(m, summ[a]);
#pragma GCC unroll 8
        for (int i = 0; i < rw; i++) {
            const __m512 v = acc[a][i / 2];
            float r =
                sw_x86_hsum8(i % 2 ? _mm512_extractf32x8_ps(v, 1) : _mm512_castps512_ps256(v));
            if (hm)
                r = r + m[i];
            y[a * ys + i] = r;
        }
    }
}

/* ---- entry points --------------------------------------------------------- */

/* The previous level's kernels: batches of 2 activation rows or more. */
static sw_mm_fn s_rows_q4_k, s_rows_q5_k, s_rows_q6_k, s_rows_q4_0, s_rows_q5_0, s_rows_q4_1,
    s_rows_q5_1, s_rows_q8_0;

enum { K_Q6_K = K_Q5_K + 1 };

/* The activation rows of the next chunk when `left` remain and a chunk takes
 * at most `max`: near-equal chunks (5 = 3 + 2, 7 = 4 + 3). */
SW_AI int s_xsplit(int left, int max)
{
    const int chunks = (left + max - 1) / max;
    return (left + chunks - 1) / chunks;
}

/* rw weight rows against xr activation rows (rw 1, S_ROWS or, q4_K/q5_K only,
 * S_KXROWS; xr 1..S_XMAX): the kernel of kind, with both counts compile-time
 * constants. */
SW_AI SW_VBMI void s_kblock(int kind, int rw, int xr, int64_t nb, const uint8_t *w, size_t ws,
                            uintptr_t pf, const uint8_t *x, size_t xs, float *y, int64_t ys)
{
    _Static_assert(S_XMAX == 4 && S_KXROWS == 4, "s_kblock: one case per row count");
#define S_KCASE(RW, XR)                                                                            \
    if (rw == (RW) && xr == (XR)) {                                                                \
        if (kind == K_Q6_K)                                                                        \
            s_q6_rows(RW, XR, nb, w, ws, pf, x, xs, y, ys);                                        \
        else                                                                                       \
            s_k45_rows(kind, RW, XR, nb, w, ws, pf, x, xs, y, ys);                                 \
        return;                                                                                    \
    }
    S_KCASE(S_ROWS, 1)
    S_KCASE(S_ROWS, 2)
    S_KCASE(S_ROWS, 3)
    S_KCASE(S_ROWS, 4)
    S_KCASE(1, 1)
    S_KCASE(1, 2)
    S_KCASE(1, 3)
    S_KCASE(1, 4)
#undef S_KCASE
    if (kind == K_Q6_K || rw != S_KXROWS)
        return;
    /* q4_K/q5_K only */
    if (xr == 1)
        s_k45_rows(kind, S_KXROWS, 1, nb, w, ws, pf, x, xs, y, ys);
    else if (xr == 2)
        s_k45_rows(kind, S_KXROWS, 2, nb, w, ws, pf, x, xs, y, ys);
    else if (xr == 3)
        s_k45_rows(kind, S_KXROWS, 3, nb, w, ws, pf, x, xs, y, ys);
    else if (xr == 4)
        s_k45_rows(kind, S_KXROWS, 4, nb, w, ws, pf, x, xs, y, ys);
}

/*
 * The K-quants' mm for nr <= S_NRMAX activation rows: groups of S_ROWS
 * weight rows (q4_K/q5_K with nr >= 2: S_KXROWS; the rows left over one at a
 * time; the prefetch distance S_PF_GROUPS groups), each against the
 * activation rows in chunks of at most S_XMAX, split evenly (5 = 3 + 2, 7 = 4
 * + 3); the group's weights come from DRAM for the first chunk only (that one
 * prefetches ahead).
 */
SW_AI SW_VBMI void s_mm_kx(int kind, int64_t n, const void *w, size_t w_stride, int64_t o0,
                           int64_t o1, const void *x, size_t x_stride, int nr, float *y,
                           int64_t y_stride)
{
    const int64_t nb = n / SW_QK_K;
    const uint8_t *wb = w, *xb = x;
    const int g = kind != K_Q6_K && nr >= 2 ? S_KXROWS : S_ROWS; // weight rows a group
    const uintptr_t ahead = (uintptr_t)S_PF_GROUPS * (uintptr_t)g * w_stride;
    for (int64_t o = o0; o < o1;) {
        const int rw = o1 - o >= g ? g : 1;
        const uint8_t *wo = wb + (size_t)o * w_stride;
        uintptr_t pf = rw == g ? (uintptr_t)wo + ahead : 0;
        for (int r0 = 0; r0 < nr;) {
            const int xr = s_xsplit(nr - r0, S_XCHUNK);
            s_kblock(kind, rw, xr, nb, wo, w_stride, pf, xb + (size_t)r0 * x_stride, x_stride,
                     y + (int64_t)r0 * y_stride + o, y_stride);
            pf = 0;
            r0 += xr;
        }
        o += rw;
    }
}

/* rw weight rows (S32_ROWS, 2 or 1) against xr activation rows (1..S32_XMAX),
 * both compile-time constants. */
SW_AI void s_block32(int kind, int rw, int xr, int64_t nb, const uint8_t *w, size_t ws,
                     uintptr_t pf, const uint8_t *x, size_t xs, float *y, int64_t ys)
{
#define S_32CASE(RW, XR)                                                                           \
    if (rw == (RW) && xr == (XR)) {                                                                \
        s_rows32(kind, RW, XR, nb, w, ws, pf, x, xs, y, ys);                                       \
        return;                                                                                    \
    }
    S_32CASE(S32_ROWS, 1)
    S_32CASE(S32_ROWS, 2)
    S_32CASE(S32_ROWS, 3)
    S_32CASE(S32_ROWS, 4)
    S_32CASE(2, 1)
    S_32CASE(2, 2)
    S_32CASE(2, 3)
    S_32CASE(2, 4)
    S_32CASE(1, 1)
    S_32CASE(1, 2)
    S_32CASE(1, 3)
    S_32CASE(1, 4)
#undef S_32CASE
}

/* nr < SW_MMB_ROWS activation rows: groups of S32_ROWS weight rows (the rest by 2
 * and 1), each against the activation rows in chunks of at most S32_XMAX,
 * split evenly; the group's weights come from DRAM for the first chunk only
 * (that one prefetches ahead). The walk of s_mm_kx, kept apart: that one is
 * compiled for AVX512_VBMI, which these kernels must run without. */
SW_AI void s_mm_32(int kind, int64_t n, const void *w, size_t w_stride, int64_t o0, int64_t o1,
                   const void *x, size_t x_stride, int nr, float *y, int64_t y_stride)
{
    const int64_t nb = n / SW_QK;
    const uint8_t *wb = w, *xb = x;
    const uintptr_t ahead = (uintptr_t)S_PF_GROUPS * S32_ROWS * w_stride;
    for (int64_t o = o0; o < o1;) {
        const int rw = o1 - o >= S32_ROWS ? S32_ROWS : o1 - o >= 2 ? 2 : 1;
        const uint8_t *wo = wb + (size_t)o * w_stride;
        uintptr_t pf = rw == S32_ROWS ? (uintptr_t)wo + ahead : 0;
        for (int r0 = 0; r0 < nr;) {
            const int xr = s_xsplit(nr - r0, S32_XMAX);
            s_block32(kind, rw, xr, nb, wo, w_stride, pf, xb + (size_t)r0 * x_stride, x_stride,
                      y + (int64_t)r0 * y_stride + o, y_stride);
            pf = 0;
            r0 += xr;
        }
        o += rw;
    }
}

#define S_DEF_K(name, kind)                                                                        \
    SW_VBMI static void s_dot_##name(int64_t n, float *s, const void *w, const void *x)            \
    {                                                                                              \
        s_kblock(kind, 1, 1, n / SW_QK_K, w, 0, 0, x, 0, s, 0);                                    \
    }                                                                                              \
    SW_VBMI static void s_mm_##name(int64_t n, const void *w, size_t w_stride, int64_t o0,         \
                                    int64_t o1, const void *x, size_t x_stride, int nr, float *y,  \
                                    int64_t y_stride)                                              \
    {                                                                                              \
        if (nr > S_NRMAX)                                                                          \
            s_rows_##name(n, w, w_stride, o0, o1, x, x_stride, nr, y, y_stride);                   \
        else                                                                                       \
            s_mm_kx(kind, n, w, w_stride, o0, o1, x, x_stride, nr, y, y_stride);                   \
    }

#define S_DEF_32(name, kind)                                                                       \
    static void s_dot_##name(int64_t n, float *s, const void *w, const void *x)                    \
    {                                                                                              \
        s_rows32(kind, 1, 1, n / SW_QK, w, 0, 0, x, 0, s, 0);                                      \
    }                                                                                              \
    static void s_mm_##name(int64_t n, const void *w, size_t w_stride, int64_t o0, int64_t o1,     \
                            const void *x, size_t x_stride, int nr, float *y, int64_t y_stride)    \
    {                                                                                              \
        if (nr >= SW_MMB_ROWS)                                                                     \
            s_rows_##name(n, w, w_stride, o0, o1, x, x_stride, nr, y, y_stride);                   \
        else                                                                                       \
            s_mm_32(kind, n, w, w_stride, o0, o1, x, x_stride, nr, y, y_stride);                   \
    }

S_DEF_K(q4_k, K_Q4_K)
S_DEF_K(q5_k, K_Q5_K)
S_DEF_K(q6_k, K_Q6_K)
S_DEF_32(q4_0, K_Q4_0)
S_DEF_32(q5_0, K_Q5_0)
S_DEF_32(q4_1, K_Q4_1)
S_DEF_32(q5_1, K_Q5_1)
S_DEF_32(q8_0, K_Q8_0)

/* Puts dot/mm in k's slots of type t, keeping the slot's kernel in *rows for
 * batches (once: a second call finds mm there already). */
static void s_take(struct sw_kernels *k, enum sw_type t, sw_dot_fn dot, sw_mm_fn mm, sw_mm_fn *rows)
{
    if (k->mm[t] == NULL || k->mm[t] == mm)
        return;
    *rows = k->mm[t];
    k->dot[t] = dot;
    k->mm[t] = mm;
}

void sw_kernels_avx512_mv(struct sw_kernels *k)
{
    s_take(k, SW_TYPE_Q4_0, s_dot_q4_0, s_mm_q4_0, &s_rows_q4_0);
    s_take(k, SW_TYPE_Q5_0, s_dot_q5_0, s_mm_q5_0, &s_rows_q5_0);
    s_take(k, SW_TYPE_Q4_1, s_dot_q4_1, s_mm_q4_1, &s_rows_q4_1);
    s_take(k, SW_TYPE_Q5_1, s_dot_q5_1, s_mm_q5_1, &s_rows_q5_1);
    s_take(k, SW_TYPE_Q8_0, s_dot_q8_0, s_mm_q8_0, &s_rows_q8_0);
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512vbmi")) // vpermb: the K-quants' scales
        return;
    s_take(k, SW_TYPE_Q4_K, s_dot_q4_k, s_mm_q4_k, &s_rows_q4_k);
    s_take(k, SW_TYPE_Q5_K, s_dot_q5_k, s_mm_q5_k, &s_rows_q5_k);
    s_take(k, SW_TYPE_Q6_K, s_dot_q6_k, s_mm_q6_k, &s_rows_q6_k);
}
