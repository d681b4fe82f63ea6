/*
 * backend_cpu_avx2.c - AVX2/FMA/F16C kernels of the CPU backend's attention
 * and activation. Compiled with -mavx2 -mfma -mf16c and called only after
 * the runtime check.
 *
 * Each kernel reproduces the rounding sequence of the corresponding GGML
 * CPU kernel (so that greedy tokens match llama.cpp), and the scalar twins
 * in backend_cpu.c compute exactly the same sequence, so both paths give
 * bit-identical results.
 */
#include "backend_cpu_impl.h"

#include <immintrin.h>
#include <string.h>

static float s_hsum(__m256 v)
{
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    __m128 t = _mm_hadd_ps(x, x);
    return _mm_cvtss_f32(_mm_hadd_ps(t, t));
}

static __m256 s_load8(const sw_f16 *p)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

float sw_cpu_dot_f16_avx2(const sw_f16 *a, const sw_f16 *b, int n, int pad32)
{
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                     _mm256_setzero_ps()};
    const int np = n & ~31;
    for (int i = 0; i < np; i += 32)
        for (int j = 0; j < 4; j++)
            acc[j] = _mm256_fmadd_ps(s_load8(a + i + 8 * j), s_load8(b + i + 8 * j), acc[j]);
    if (pad32 && np < n) {
        sw_f16 ta[32] = {0}, tb[32] = {0};
        memcpy(ta, a + np, (size_t)(n - np) * sizeof *ta);
        memcpy(tb, b + np, (size_t)(n - np) * sizeof *tb);
        for (int j = 0; j < 4; j++)
            acc[j] = _mm256_fmadd_ps(s_load8(ta + 8 * j), s_load8(tb + 8 * j), acc[j]);
    }
    acc[0] = _mm256_add_ps(acc[0], acc[2]);
    acc[1] = _mm256_add_ps(acc[1], acc[3]);
    acc[0] = _mm256_add_ps(acc[0], acc[1]);
    double sum = s_hsum(acc[0]);
    if (!pad32)
        for (int i = np; i < n; i++)
            sum += (double)(_cvtsh_ss(a[i]) * _cvtsh_ss(b[i]));
    return (float)sum;
}

float sw_cpu_dot2_f16_avx2(const sw_f16 *a1, int n1, const sw_f16 *a2, const sw_f16 *b, int n)
{
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                     _mm256_setzero_ps()};
    for (int i = 0; i < n1; i += 32)
        for (int j = 0; j < 4; j++)
            acc[j] = _mm256_fmadd_ps(s_load8(a1 + i + 8 * j), s_load8(b + i + 8 * j), acc[j]);
    const int n2 = n - n1, np = n2 & ~31;
    const sw_f16 *b2 = b + n1;
    for (int i = 0; i < np; i += 32)
        for (int j = 0; j < 4; j++)
            acc[j] = _mm256_fmadd_ps(s_load8(a2 + i + 8 * j), s_load8(b2 + i + 8 * j), acc[j]);
    if (np < n2) {
        sw_f16 ta[32] = {0}, tb[32] = {0};
        memcpy(ta, a2 + np, (size_t)(n2 - np) * sizeof *ta);
        memcpy(tb, b2 + np, (size_t)(n2 - np) * sizeof *tb);
        for (int j = 0; j < 4; j++)
            acc[j] = _mm256_fmadd_ps(s_load8(ta + 8 * j), s_load8(tb + 8 * j), acc[j]);
    }
    acc[0] = _mm256_add_ps(acc[0], acc[2]);
    acc[1] = _mm256_add_ps(acc[1], acc[3]);
    acc[0] = _mm256_add_ps(acc[0], acc[1]);
    return (float)(double)s_hsum(acc[0]);
}

float sw_cpu_dot_f16_tiled_avx2(const sw_f16 *a, const sw_f16 *b, int n)
{
    __m256 acc = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= n; i += 8)
        acc = _mm256_fmadd_ps(s_load8(a + i), s_load8(b + i), acc);
    if (i < n) {
        sw_f16 ta[8] = {0}, tb[8] = {0};
        memcpy(ta, a + i, (size_t)(n - i) * sizeof *ta);
        memcpy(tb, b + i, (size_t)(n - i) * sizeof *tb);
        acc = _mm256_fmadd_ps(s_load8(ta), s_load8(tb), acc);
    }
    __m128 x = _mm_add_ps(_mm256_extractf128_ps(acc, 1), _mm256_castps256_ps128(acc));
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    x = _mm_add_ss(x, _mm_movehdup_ps(x));
    return _mm_cvtss_f32(x);
}

void sw_cpu_f32_to_f16_avx2(const float *x, sw_f16 *y, int n)
{
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT);
        _mm_storeu_si128((__m128i *)(y + i), h);
    }
    for (; i < n; i++)
        y[i] = (sw_f16)_cvtss_sh(x[i], _MM_FROUND_TO_NEAREST_INT);
}

/* exp via 2^(x/ln2) split into an integer exponent and a degree-5
 * polynomial, with a slow path for |n| > 126 (over/underflow). */
static __m256 s_expf8(__m256 x)
{
    const __m256 shift = _mm256_set1_ps(0x1.8p23f);
    const __m256 z = _mm256_fmadd_ps(x, _mm256_set1_ps(0x1.715476p+0f), shift);
    const __m256 n = _mm256_sub_ps(z, shift);
    const __m256 b = _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.7f7d1cp-20f),
                                      _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.62e4p-1f), x));
    const __m256i e = _mm256_slli_epi32(_mm256_castps_si256(z), 23);
    const __m256 k =
        _mm256_castsi256_ps(_mm256_add_epi32(e, _mm256_castps_si256(_mm256_set1_ps(1.0f))));
    const __m256 absn = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), n);
    const __m256 big = _mm256_cmp_ps(absn, _mm256_set1_ps(126.0f), _CMP_GT_OQ);
    const __m256 u = _mm256_mul_ps(b, b);
    const __m256 p_hi =
        _mm256_fmadd_ps(_mm256_set1_ps(0x1.0e4020p-7f), b, _mm256_set1_ps(0x1.573e2ep-5f));
    const __m256 p_lo =
        _mm256_fmadd_ps(_mm256_set1_ps(0x1.555e66p-3f), b, _mm256_set1_ps(0x1.fffdb6p-2f));
    const __m256 j = _mm256_fmadd_ps(_mm256_fmadd_ps(p_hi, u, p_lo), u,
                                     _mm256_mul_ps(_mm256_set1_ps(0x1.ffffecp-1f), b));
    const __m256 normal = _mm256_fmadd_ps(k, j, k);
    if (!_mm256_movemask_ps(big))
        return normal;
    const __m256i g =
        _mm256_and_si256(_mm256_castps_si256(_mm256_cmp_ps(n, _mm256_setzero_ps(), _CMP_LE_OQ)),
                         _mm256_set1_epi32((int)0x82000000u));
    const __m256 s1 = _mm256_castsi256_ps(_mm256_add_epi32(g, _mm256_set1_epi32(0x7f000000)));
    const __m256 s2 = _mm256_castsi256_ps(_mm256_sub_epi32(e, g));
    const __m256 huge = _mm256_cmp_ps(absn, _mm256_set1_ps(192.0f), _CMP_GT_OQ);
    const __m256 scaled = _mm256_mul_ps(_mm256_fmadd_ps(s2, j, s2), s1);
    __m256 r = _mm256_blendv_ps(normal, scaled, big);
    return _mm256_blendv_ps(r, _mm256_mul_ps(s1, s1), huge);
}

void sw_cpu_expf8_avx2(const float *x, float *y)
{
    _mm256_storeu_ps(y, s_expf8(_mm256_loadu_ps(x)));
}

void sw_cpu_swiglu8_avx2(float *g, const float *u)
{
    const __m256 x = _mm256_loadu_ps(g);
    const __m256 e = s_expf8(_mm256_sub_ps(_mm256_setzero_ps(), x));
    const __m256 silu = _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
    _mm256_storeu_ps(g, _mm256_mul_ps(silu, _mm256_loadu_ps(u)));
}
