/*
 * quant_x86.h - the x86 SIMD helpers that the AVX2 and AVX-512 kernel files
 * share (quant_avx2.c, quant_avx512.c, quant_mv_avx512.c, the low-bit types'
 * kernels). Include only from files compiled with -mavx2 -mfma -mf16c or
 * more. It turns floating-point contraction off for the including file: the
 * kernels spell out every fused multiply-add of GGML's order, the compiler
 * must not fuse others.
 */
#ifndef SW_QUANT_X86_H
#define SW_QUANT_X86_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "quant_impl.h" // sw_f16

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__) && !defined(__STRICT_ANSI__)
#error "build with -std=c11: in GNU mode GCC fuses a*b+c, which changes the results"
#endif

#define SW_AI static inline __attribute__((always_inline))

SW_AI float sw_x86_f16(const sw_f16 *p)
{
    uint16_t v;
    memcpy(&v, p, sizeof v);
    return _cvtsh_ss(v);
}

/* An unaligned 32-bit load. */
SW_AI uint32_t sw_x86_u32(const void *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* GGML's hsum_float_8: ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7)). */
SW_AI float sw_x86_hsum8(__m256 x)
{
    __m128 r = _mm_add_ps(_mm256_extractf128_ps(x, 1), _mm256_castps256_ps128(x));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

/* The exact sum of 8 int32 lanes. */
SW_AI int32_t sw_x86_hsum_i32(__m256i v)
{
    __m128i t = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    t = _mm_add_epi32(t, _mm_unpackhi_epi64(t, t));
    t = _mm_add_epi32(t, _mm_shuffle_epi32(t, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(t);
}

#endif
