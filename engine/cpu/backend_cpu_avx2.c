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
#include <math.h>
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

/* Lanes summed as sw_cpu_dot_f16_tiled_avx2 does, for 8 accumulators at
 * once: out[k] = ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)) of acc[k]. The same
 * additions of the same pairs (addition commutes bit for bit), so the same
 * bits. */
static void s_hsum8x8(const __m256 acc[8], float *out, int k)
{
    __m256 b[4], c[2];
    for (int i = 0; i < 4; i++)
        b[i] = _mm256_add_ps(_mm256_permute2f128_ps(acc[2 * i], acc[2 * i + 1], 0x20),
                             _mm256_permute2f128_ps(acc[2 * i], acc[2 * i + 1], 0x31));
    /* b[i] = [r0..r3 of acc 2i | r0..r3 of acc 2i+1], r_j = l_j + l_(j+4) */
    for (int i = 0; i < 2; i++)
        c[i] = _mm256_add_ps(_mm256_shuffle_ps(b[2 * i], b[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm256_shuffle_ps(b[2 * i], b[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    /* c[i] = [r0+r2, r1+r3 of acc 4i, of acc 4i+2 | of acc 4i+1, of acc 4i+3] */
    const __m256 d = _mm256_hadd_ps(c[0], c[1]); // accs 0 2 4 6 | 1 3 5 7
    const __m256 o = _mm256_permutevar8x32_ps(d, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    if (k == 8) {
        _mm256_storeu_ps(out, o);
        return;
    }
    float t[8];
    _mm256_storeu_ps(t, o);
    memcpy(out, t, (size_t)k * sizeof *t);
}

void sw_cpu_dots_f16_tiled_avx2(const sw_f16 *a, size_t a_stride, int na, const float *b, int n,
                                float *out)
{
    const int n8 = n & ~7;
    float tb[8] = {0};
    if (n8 < n)
        memcpy(tb, b + n8, (size_t)(n - n8) * sizeof *tb);
    for (int j = 0; j < na; j += 8) {
        const int k = na - j < 8 ? na - j : 8;
        const sw_f16 *r[8];
        __m256 acc[8];
        for (int i = 0; i < 8; i++) {
            r[i] = a + (size_t)(j + (i < k ? i : 0)) * a_stride;
            acc[i] = _mm256_setzero_ps();
        }
        if (k == 8) {
            for (int i = 0; i < n8; i += 8) {
                const __m256 bv = _mm256_loadu_ps(b + i);
#pragma GCC unroll 8
                for (int q = 0; q < 8; q++)
                    acc[q] = _mm256_fmadd_ps(s_load8(r[q] + i), bv, acc[q]);
            }
        } else {
            for (int i = 0; i < n8; i += 8) {
                const __m256 bv = _mm256_loadu_ps(b + i);
                for (int q = 0; q < k; q++)
                    acc[q] = _mm256_fmadd_ps(s_load8(r[q] + i), bv, acc[q]);
            }
        }
        if (n8 < n) {
            const __m256 bv = _mm256_loadu_ps(tb);
            for (int q = 0; q < k; q++) {
                sw_f16 ta[8] = {0};
                memcpy(ta, r[q] + n8, (size_t)(n - n8) * sizeof *ta);
                acc[q] = _mm256_fmadd_ps(s_load8(ta), bv, acc[q]);
            }
        }
        s_hsum8x8(acc, out + j, k);
    }
}

void sw_cpu_f16_to_f32_avx2(const sw_f16 *x, float *y, int n)
{
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, s_load8(x + i));
    for (; i < n; i++)
        y[i] = _cvtsh_ss(x[i]);
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

void sw_cpu_mad_f32_avx2(float *y, const float *x, float v, int n)
{
    const __m256 vv = _mm256_set1_ps(v);
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i,
                         _mm256_fmadd_ps(_mm256_loadu_ps(x + i), vv, _mm256_loadu_ps(y + i)));
    for (; i < n; i++)
        y[i] = fmaf(x[i], v, y[i]);
}
