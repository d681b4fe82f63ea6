/*
 * quant_kchunk_avx512.h - the K-quant super-block unpackers that the AVX-512
 * tiled kernels (quant_avx512.c) and the AMX ones (quant_amx.c) share: a
 * super-block's quants as unsigned bytes in element order, 64 at a time.
 * Include only from files compiled with the AVX-512 flags, after
 * quant_x86.h.
 */
#ifndef SW_QUANT_KCHUNK_AVX512_H
#define SW_QUANT_KCHUNK_AVX512_H

#include "quant_impl.h"
#include "quant_math.h" // sw_q3_k_scale, sw_iq4_xs_scale
#include "quant_x86.h"

enum { K_Q4_K, K_Q5_K, K_Q6_K, K_Q2_K, K_Q3_K, K_IQ4_XS };

/* 16 sub-blocks of 16 elements (q6_K, q2_K, q3_K), else 8 of 32. */
#define S_NSUB(kind) ((kind) == K_Q6_K || (kind) == K_Q2_K || (kind) == K_Q3_K ? 16 : 8)
/* Bytes of a super-block. */
#define S_BSZ(kind)                                                                                \
    ((kind) == K_Q4_K   ? 144                                                                      \
     : (kind) == K_Q5_K ? 176                                                                      \
     : (kind) == K_Q6_K ? 210                                                                      \
     : (kind) == K_Q2_K ? 84                                                                       \
     : (kind) == K_Q3_K ? 110                                                                      \
                        : 136)

SW_AI __m512i s_join(__m256i lo, __m256i hi)
{
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

/* q2_K, q3_K, iq4_xs: elements 64c..64c+63 of one super-block, unsigned
 * bytes (q2_K/q3_K: element 128h + 32g + l is bits 2g..2g+1 of qs[32h + l],
 * q3_K's third bit bit 4h + g of hmask[l]; iq4_xs: its levels + 128). */
SW_AI __m512i s_chunk_lowbit(int kind, const uint8_t *blk, int c)
{
    if (kind == K_IQ4_XS) {
        const sw_block_iq4_xs *b = (const sw_block_iq4_xs *)blk;
        const __m128i lut = _mm_setr_epi8(1, 24, 45, 63, 79, 93, 106, 118, (char)129, (char)141,
                                          (char)153, (char)166, (char)181, (char)197, (char)217,
                                          (char)241); // kvalues_iq4nl + 128
        const __m128i m4 = _mm_set1_epi8(0xF);
        __m128i v[4];
        for (int j = 0; j < 2; j++) { // sub-blocks 2c + j
            const __m128i q = _mm_loadu_si128((const __m128i *)(b->qs + 16 * (2 * c + j)));
            v[2 * j] = _mm_shuffle_epi8(lut, _mm_and_si128(q, m4));
            v[2 * j + 1] = _mm_shuffle_epi8(lut, _mm_and_si128(_mm_srli_epi16(q, 4), m4));
        }
        const __m256i lo = _mm256_inserti128_si256(_mm256_castsi128_si256(v[0]), v[1], 1);
        const __m256i hi = _mm256_inserti128_si256(_mm256_castsi128_si256(v[2]), v[3], 1);
        return s_join(lo, hi);
    }
    const int h = c >> 1, g0 = 2 * (c & 1);
    const uint8_t *qs = blk + (kind == K_Q2_K ? 16 : 32) + 32 * h;
    const __m256i m3 = _mm256_set1_epi8(3);
    const __m256i v = _mm256_loadu_si256((const __m256i *)qs);
    __m256i lo = _mm256_and_si256(_mm256_srli_epi16(v, 2 * g0), m3);
    __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 2 * g0 + 2), m3);
    if (kind == K_Q3_K) {
        const __m256i one = _mm256_set1_epi8(1);
        const __m256i hm = _mm256_loadu_si256((const __m256i *)blk);
        const int bit = 4 * h + g0;
        lo = _mm256_or_si256(
            lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hm, bit), one), 2));
        hi = _mm256_or_si256(
            hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hm, bit + 1), one), 2));
    }
    return s_join(lo, hi);
}

/* Elements 64c..64c+63 of one super-block of a weight row, unsigned bytes. */
SW_AI __m512i s_chunk(int kind, const uint8_t *blk, int c)
{
    if (kind == K_Q2_K || kind == K_Q3_K || kind == K_IQ4_XS)
        return s_chunk_lowbit(kind, blk, c);
    const __m256i m4 = _mm256_set1_epi8(0xF);
    if (kind == K_Q6_K) {
        /* element 128h + l, l < 32: ql[64h + l] low nibble, qh[32h + l] bits 1..0;
         * + 32: ql[64h + 32 + l] low, bits 3..2; + 64: ql[64h + l] high, bits 5..4;
         * + 96: ql[64h + 32 + l] high, bits 7..6 */
        const sw_block_q6_k *b = (const sw_block_q6_k *)blk;
        const int h = c >> 1, up = c & 1;
        const __m256i a = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h));
        const __m256i bb = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h + 32));
        const __m256i hb = _mm256_loadu_si256((const __m256i *)(b->qh + 32 * h));
        const __m256i m3 = _mm256_set1_epi8(3);
        __m256i lo = up ? _mm256_srli_epi16(a, 4) : a;
        __m256i hi = up ? _mm256_srli_epi16(bb, 4) : bb;
        lo = _mm256_or_si256(
            _mm256_and_si256(lo, m4),
            _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, up ? 4 : 0), m3), 4));
        hi = _mm256_or_si256(
            _mm256_and_si256(hi, m4),
            _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, up ? 6 : 2), m3), 4));
        return s_join(lo, hi);
    }
    /* q4_K/q5_K: chunk c's 32 bytes hold sub-block 2c in the low nibbles and
     * 2c + 1 in the high; q5_K's 5th bit of element 32s + l is bit s of qh[l] */
    const uint8_t *qs = blk + (kind == K_Q5_K ? 48 : 16) + 32 * c;
    const __m256i v = _mm256_loadu_si256((const __m256i *)qs);
    __m256i lo = _mm256_and_si256(v, m4);
    __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
    if (kind == K_Q5_K) {
        const __m256i one = _mm256_set1_epi8(1);
        const __m256i qh = _mm256_loadu_si256((const __m256i *)(blk + 16));
        lo = _mm256_or_si256(
            lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * c), one), 4));
        hi = _mm256_or_si256(
            hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * c + 1), one), 4));
    }
    return s_join(lo, hi);
}

#endif
