/*
 * half.h - the 16-bit float formats, bit for bit: IEEE half (f16) and
 * bfloat16 to and from f32, round to nearest even, as F16C and GGML convert.
 *
 * Header only and compiled by the C compiler and by nvcc (SW_HD), because
 * three layers convert the same way: the engine's kernels (engine/quant_math.h,
 * the CPU and CUDA backends), and the network runtime, which packs hidden
 * states as f16 or bf16 for the wire (net/codec.c) without linking the
 * engine. One definition keeps a stage's unpacked rows exactly what another
 * stage packed.
 */
#ifndef SW_HALF_H
#define SW_HALF_H

#include <stdint.h>
#include <string.h>

/* Functions compiled for the host and, by nvcc, for the GPU. */
#if defined(__CUDACC__)
#define SW_HD static __host__ __device__ __forceinline__
#else
#define SW_HD static inline
#endif

typedef uint16_t sw_f16;  // IEEE half, raw bits
typedef uint16_t sw_bf16; // bfloat16, raw bits

SW_HD uint32_t sw_bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

SW_HD float sw_float_of(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

SW_HD float sw_h2f(sw_f16 h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    if (exp == 0x1f) // inf / NaN, payload kept
        return sw_float_of(sign | 0x7f800000u | (man << 13));
    if (exp == 0) { // zero or subnormal: man * 2^-24, exact in f32
        float v = (float)man * 0x1p-24f;
        return sw_float_of(sign | sw_bits_of(v));
    }
    return sw_float_of(sign | ((exp + 112u) << 23) | (man << 13));
}

SW_HD sw_f16 sw_f2h(float f)
{
    uint32_t x = sw_bits_of(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) // NaN: quiet, top payload bits kept (like F16C)
        return (sw_f16)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
    if (ax >= 0x477ff000u) // rounds to >= 65536: infinity
        return (sw_f16)(sign | 0x7c00u);
    if (ax < 0x38800000u) {
        /* Below 2^-14: f16 subnormal. Adding 0.5 puts the value's multiple of
         * 2^-24 into the low mantissa bits with round-to-nearest-even. */
        float t = sw_float_of(ax) + 0.5f;
        return (sw_f16)(sign | (sw_bits_of(t) - 0x3f000000u));
    }
    uint32_t odd = (ax >> 13) & 1u;
    ax += 0xc8000fffu + odd; // rebias the exponent by -112 and round to nearest even
    return (sw_f16)(sign | (ax >> 13));
}

SW_HD float sw_bf2f(sw_bf16 h)
{
    return sw_float_of((uint32_t)h << 16);
}

SW_HD sw_bf16 sw_f2bf(float f)
{
    uint32_t u = sw_bits_of(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (sw_bf16)((u >> 16) | 64u); // NaN: force quiet
    return (sw_bf16)((u + (0x7fffu + ((u >> 16) & 1u))) >> 16);
}

#endif
