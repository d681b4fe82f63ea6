/*
 * quant_avx2_k.h - private to the AVX2 kernel files (quant_avx2.c: the
 * one-row and batch kernels in GGML's order; quant_mmt_avx2.c: the tiled
 * order of prompt windows): the K-quant super-block helpers both use, so the
 * two orders unpack and multiply the quants the same way. Include only from
 * files compiled with -mavx2 -mfma -mf16c (the *_avx2.c rule).
 */
#ifndef SW_QUANT_AVX2_K_H
#define SW_QUANT_AVX2_K_H

#include "quant_impl.h"
#include "quant_x86.h"

#include <immintrin.h>
#include <stdint.h>

/* Prefetches p + off. Integer arithmetic: the address may lie past the end of
 * the weights (prefetches never fault), which pointer arithmetic may not. */
SW_AI void s_prefetch(const uint8_t *p, size_t off)
{
    _mm_prefetch((const char *)((uintptr_t)p + off), _MM_HINT_T0);
}

/* acc + per-lane (a0 * b0 + a1 * b1) of int16 pairs: AVX-VNNI's vpdpwssd
 * (not the saturating vpdpwssds), VEX-encoded. The same wrap-around integers
 * as _mm256_add_epi32(acc, _mm256_madd_epi16(a, b)) in one instruction. */
SW_AI __m256i s_dpwssd(__m256i acc, __m256i a, __m256i b)
{
    __asm__("%{vex%} vpdpwssd %2, %1, %0" : "+x"(acc) : "x"(a), "x"(b));
    return acc;
}

/* Unpacks the 12 packed scale bytes of q4_K/q5_K: bytes 0..7 = scales, 8..15 = mins.
 * Scale/min j < 4 is the low 6 bits of byte j / j+4; scale j >= 4 is the low
 * nibble of byte j+4 with bits 7..6 of byte j-4 above, min j >= 4 the high
 * nibble of byte j+4 with bits 7..6 of byte j above. Reads 16 bytes from
 * scales (the 4 after the 12 are the block's first quants). */
SW_AI __m128i s_k4_scales(const uint8_t *scales)
{
    const __m128i v = _mm_loadu_si128((const __m128i *)scales);
    // the byte with the low bits (A) and the one with bits 7..6 (B) of each output byte
    const __m128i a =
        _mm_shuffle_epi8(v, _mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11));
    const __m128i b =
        _mm_shuffle_epi8(v, _mm_setr_epi8(-1, -1, -1, -1, 0, 1, 2, 3, -1, -1, -1, -1, 4, 5, 6, 7));
    const __m128i lo =
        _mm_and_si128(a, _mm_setr_epi8(63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 0, 0, 0, 0));
    const __m128i hn = _mm_and_si128(
        _mm_srli_epi16(a, 4), _mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 15, 15, 15, 15));
    const __m128i top = _mm_and_si128(_mm_srli_epi16(b, 2), _mm_set1_epi8(0x30));
    return _mm_or_si128(_mm_or_si128(lo, hn), top);
}

/* The int16 scale j of an 8-entry int16 vector, broadcast to all 16 lanes. */
SW_AI __m256i s_bcast16(__m256i scales2, int j)
{
    return _mm256_shuffle_epi8(scales2, _mm256_set1_epi16((short)(((2 * j + 1) << 8) | (2 * j))));
}

enum { K_Q4_K, K_Q5_K, K_Q6_K };

/* The 4-bit (q4_K) or 5-bit (q5_K) quants of 32-element chunk 2c (lo) and
 * 2c+1 (hi) of a super-block, as unsigned bytes. */
SW_AI void s_k45_chunk(int kind, const uint8_t *qs, const __m256i hbits, int c, __m256i *lo,
                       __m256i *hi)
{
    const __m256i m4 = _mm256_set1_epi8(0xF);
    const __m256i bits = _mm256_loadu_si256((const __m256i *)(qs + 32 * c));
    *lo = _mm256_and_si256(bits, m4);
    *hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
    if (kind == K_Q5_K) {
        const __m256i one = _mm256_set1_epi8(1);
        const __m256i h0 = _mm256_and_si256(_mm256_srli_epi16(hbits, 2 * c), one);
        const __m256i h1 = _mm256_and_si256(_mm256_srli_epi16(hbits, 2 * c + 1), one);
        *lo = _mm256_or_si256(*lo, _mm256_slli_epi16(h0, 4));
        *hi = _mm256_or_si256(*hi, _mm256_slli_epi16(h1, 4));
    }
}

/* The 6-bit quants (0..63, unsigned) of chunk c (0..3) of half h of a q6_K block. */
SW_AI __m256i s_q6_chunk(const sw_block_q6_k *w, int h, int c)
{
    const __m256i m4 = _mm256_set1_epi8(0xF), m3 = _mm256_set1_epi8(3);
    const __m256i l = _mm256_loadu_si256((const __m256i *)(w->ql + 64 * h + 32 * (c & 1)));
    const __m256i hb = _mm256_loadu_si256((const __m256i *)(w->qh + 32 * h));
    const __m256i lo =
        c < 2 ? _mm256_and_si256(l, m4) : _mm256_and_si256(_mm256_srli_epi16(l, 4), m4);
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(hb, 2 * c), m3);
    return _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));
}

/* The 8 sums of adjacent pairs of a q8_K block's 16 bsums (the sums per 32
 * elements the q4_K/q5_K minimums multiply). */
SW_AI __m128i s_bsum_pairs(__m256i bs)
{
    return _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
}

/*
 * One q6_K weight super-block pw against activation blocks xb[r], r < rx:
 * d[r] = d_x * d_w (not tiled) and the integer lanes into sumi/sumj (sumj: the odd
 * chunks when split). Returns the block's d_w.
 * The -32 offset is applied per lane at the end as 32 * (bsums . scales),
 * like GGML's AVX2 q6_K kernel, so the lanes hold the same integers as GGML's.
 */
SW_AI float s_q6k_block(int vnni, int split, int tiled, int rx, const uint8_t *pw,
                        const sw_block_q8_k *const *xb, float *d, __m256i *sumi, __m256i *sumj)
{
    const sw_block_q6_k *q6 = (const sw_block_q6_k *)pw;
    const float dw = _cvtsh_ss(q6->d);
    const __m128i scales = _mm_loadu_si128((const __m128i *)q6->scales);
    const __m256i scales16 = _mm256_cvtepi8_epi16(scales);
#pragma GCC unroll 8
    for (int r = 0; r < rx; r++) {
        if (!tiled) // (tiled: the block's sum is scaled at the end)
            d[r] = xb[r]->d * dw;
        const __m256i bs = _mm256_loadu_si256((const __m256i *)xb[r]->bsums);
        // sumi starts at -32 * (bsums . scales) (subtracted last by GGML: same integers)
        sumi[r] = _mm256_sub_epi32(_mm256_setzero_si256(),
                                   _mm256_slli_epi32(_mm256_madd_epi16(bs, scales16), 5));
    }
    /* Both loops unrolled: left to GCC, the 2-row instance (split) kept h as a
     * loop, built the scale shuffles at run time and chose sumi/sumj through
     * memory: 2.7x the one-row time for 2 rows instead of 1.4x. */
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
#pragma GCC unroll 8
        for (int c = 0; c < 4; c++) {
            const __m256i q = s_q6_chunk(q6, h, c);
            // scales 8h+2c for the chunk's first 16 elements, 8h+2c+1 for the next 16
            const int j = 8 * h + 2 * c;
            const __m128i sh =
                _mm_setr_epi8((char)j, (char)j, (char)j, (char)j, (char)j, (char)j, (char)j,
                              (char)j, (char)(j + 1), (char)(j + 1), (char)(j + 1), (char)(j + 1),
                              (char)(j + 1), (char)(j + 1), (char)(j + 1), (char)(j + 1));
            const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(scales, sh));
#pragma GCC unroll 8
            for (int r = 0; r < rx; r++) {
                const __m256i y8 =
                    _mm256_loadu_si256((const __m256i *)(xb[r]->qs + 128 * h + 32 * c));
                const __m256i p = _mm256_maddubs_epi16(q, y8);
                __m256i *sum = split && (c & 1) ? &sumj[r] : &sumi[r];
                if (vnni)
                    *sum = s_dpwssd(*sum, sc16, p);
                else
                    *sum = _mm256_add_epi32(*sum, _mm256_madd_epi16(sc16, p));
            }
        }
    }
    return dw;
}

/* The quants of a q4_K/q5_K super-block (quants qs, high bits hbits, scales
 * sc2 in both halves) against activation blocks xb[r], r < rx: the integer
 * lanes into sumi/sumj (sumj: the odd sub-blocks when split). */
SW_AI void s_k45_quants(int kind, int vnni, int split, int rx, const uint8_t *qs, __m256i hbits,
                        __m256i sc2, const sw_block_q8_k *const *xb, __m256i *sumi, __m256i *sumj)
{
#pragma GCC unroll 8
    for (int c = 0; c < 4; c++) {
        __m256i lo, hi;
        s_k45_chunk(kind, qs, hbits, c, &lo, &hi);
        const __m256i scl = s_bcast16(sc2, 2 * c), sch = s_bcast16(sc2, 2 * c + 1);
#pragma GCC unroll 8
        for (int r = 0; r < rx; r++) {
            const int8_t *q8 = xb[r]->qs + 64 * c;
            __m256i pl = _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)q8));
            __m256i ph = _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(q8 + 32)));
            if (vnni && split) {
                sumi[r] = s_dpwssd(sumi[r], scl, pl);
                sumj[r] = s_dpwssd(sumj[r], sch, ph);
            } else if (vnni) {
                sumi[r] = s_dpwssd(s_dpwssd(sumi[r], scl, pl), sch, ph);
            } else {
                pl = _mm256_madd_epi16(scl, pl);
                ph = _mm256_madd_epi16(sch, ph);
                sumi[r] = _mm256_add_epi32(sumi[r], _mm256_add_epi32(pl, ph));
            }
        }
    }
}

/* A q4_K/q5_K super-block pw against activation blocks xb[r], r < rx: its
 * scales unpacked and its quants' integer lanes into sumi/sumj (as
 * s_k45_quants). Returns the unpacked 6-bit values as int16: the 8 scales in
 * the low 128 bits, the 8 minimums in the high. */
SW_AI __m256i s_k45_block(int kind, int vnni, int split, int rx, const uint8_t *pw,
                          const sw_block_q8_k *const *xb, __m256i *sumi, __m256i *sumj)
{
    const sw_block_q4_k *q4 = (const sw_block_q4_k *)pw; // q5_K starts alike
    const __m256i ms = _mm256_cvtepu8_epi16(s_k4_scales(q4->scales));
    const __m128i sc = _mm256_castsi256_si128(ms);
    const __m256i sc2 = _mm256_inserti128_si256(_mm256_castsi128_si256(sc), sc, 1);
    const uint8_t *qs = kind == K_Q5_K ? pw + 48 : pw + 16;
    const __m256i hbits =
        kind == K_Q5_K ? _mm256_loadu_si256((const __m256i *)(pw + 16)) : _mm256_setzero_si256();
    s_k45_quants(kind, vnni, split, rx, qs, hbits, sc2, xb, sumi, sumj);
    return ms;
}

#endif
