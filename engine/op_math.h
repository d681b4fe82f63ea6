/*
 * op_math.h - the per-element arithmetic of the transformer operations other
 * than the matmuls (see quant_math.h for those), shared by the CPU backend
 * and the CUDA kernels: the f16 dot products of attention in GGML's two
 * reduction orders, GGML's vectorised exp, the softmax's 8-value groups, the
 * RMS norm's scale, the rope rotation and SwiGLU.
 *
 * The GPU computes the same values in the same order: a dot product is split
 * between threads exactly along its accumulators (lane t of the 32 or 8), and
 * the one sum GGML takes in double precision along a loop (RMS norm's sum of
 * squares, the softmax's sum of group sums) is taken in parallel on the GPU
 * and accepted only when sw_*_stable() proves that the left-to-right loop
 * rounds to the same float; otherwise the kernel runs that loop (rare).
 */
#ifndef SW_OP_MATH_H
#define SW_OP_MATH_H

#include "quant_math.h"

/* dot(a, b) over n f16 values the way GGML's ggml_vec_dot_f16 does it on
 * AVX2: 32 accumulators (element i on accumulator i % 32), reduced by
 * sw_reduce4x8. With pad32 the n % 32 tail joins the accumulators (GGML pads
 * the KV length); otherwise it is added in double precision at the end. */
SW_HD float sw_dot_f16_4x8(const sw_f16 *a, const sw_f16 *b, int n, int pad32)
{
    float acc[32];
    for (int i = 0; i < 32; i++)
        acc[i] = 0.0f;
    const int np = n & ~31;
    const int end = pad32 ? n : np;
    for (int i = 0; i < end; i++)
        acc[i & 31] = fmaf(sw_h2f(a[i]), sw_h2f(b[i]), acc[i & 31]);
    double sum = sw_reduce4x8(acc);
    if (!pad32)
        for (int i = np; i < n; i++)
            sum += (double)(sw_h2f(a[i]) * sw_h2f(b[i]));
    return (float)sum;
}

/* dot(a, b) over n f16 values the way GGML's batched prompt path (llamafile
 * tinyBLAS) does it: 8 accumulators (element i on i % 8), sw_hsum8. */
SW_HD float sw_dot_f16_tiled(const sw_f16 *a, const sw_f16 *b, int n)
{
    float lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int i = 0; i < n; i++)
        lane[i & 7] = fmaf(sw_h2f(a[i]), sw_h2f(b[i]), lane[i & 7]);
    return sw_hsum8(lane);
}

/* exp(x) with GGML's vectorised approximation (ggml_v_expf): 2^(x/ln2) split
 * into an integer exponent and a degree-5 polynomial, with a slow path for
 * |n| > 126 (over/underflow). exp(-inf) = 0. */
SW_HD float sw_expf_ggml(float x)
{
    const float shift = 0x1.8p23f;
    const float z = fmaf(x, 0x1.715476p+0f, shift);
    const float n = z - shift;
    const float b = fmaf(-n, 0x1.7f7d1cp-20f, fmaf(-n, 0x1.62e4p-1f, x));
    const uint32_t e = sw_bits_of(z) << 23;
    const float k = sw_float_of(e + sw_bits_of(1.0f));
    const float u = b * b;
    const float p_hi = fmaf(0x1.0e4020p-7f, b, 0x1.573e2ep-5f);
    const float p_lo = fmaf(0x1.555e66p-3f, b, 0x1.fffdb6p-2f);
    const float j = fmaf(fmaf(p_hi, u, p_lo), u, 0x1.ffffecp-1f * b);
    const float absn = fabsf(n);
    if (!(absn > 126.0f))
        return fmaf(k, j, k);
    const uint32_t g = n <= 0.0f ? 0x82000000u : 0u;
    const float s1 = sw_float_of(g + 0x7f000000u);
    const float s2 = sw_float_of(e - g);
    if (absn > 192.0f)
        return s1 * s1;
    return fmaf(s2, j, s2) * s1;
}

/* One group of the softmax: x[l] = exp(x[l] - max) for the cnt (<= 8) valid
 * values (the others count as exp(-inf) = 0); returns the group's sum in
 * GGML's order. The caller adds the group sums in double precision. */
SW_HD float sw_softmax_group8(float *x, int cnt, float max)
{
    float e[8];
    for (int l = 0; l < 8; l++)
        e[l] = sw_expf_ggml(l < cnt ? x[l] - max : -INFINITY);
    for (int l = 0; l < cnt; l++)
        x[l] = e[l];
    return sw_hsum8(e);
}

/* silu(g) * u with GGML's exp, as the CPU computes every full group of 8. */
SW_HD float sw_swiglu_ggml(float g, float u)
{
    const float silu = g / (1.0f + sw_expf_ggml(0.0f - g));
    return silu * u;
}

/* GGML's GEGLU of one element with its f16 GELU table (sw_gelu_f16_table()):
 * 0 at or below -10, g * u at or above 10, else table[f16(g)] * u. */
SW_HD float sw_geglu_ggml(const sw_f16 *table, float g, float u)
{
    if (g <= -10.0f)
        return 0.0f;
    if (g >= 10.0f)
        return g * u;
    return sw_h2f(table[sw_f2h(g)]) * u;
}

/* The rope rotation of the pair (x0, x1) by (c, s) = (cos, sin). */
SW_HD void sw_rope_pair(float *x0, float *x1, float c, float s)
{
    const float a = *x0, b = *x1;
    *x0 = fmaf(a, c, -(b * s));
    *x1 = fmaf(a, s, b * c);
}

/* Sum of x[i]^2 (f32 products) in double, left to right: RMS norm's sum. */
SW_HD double sw_sumsq_seq(const float *x, int n)
{
    double sum = 0.0;
    for (int i = 0; i < n; i++)
        sum += (double)(x[i] * x[i]);
    return sum;
}

/* RMS norm's mean from the sum of squares: (float)(sum / dim). */
SW_HD float sw_rms_mean(double sum, int dim)
{
    return (float)(sum / dim);
}

/* QK norm's argument of the square root: GGML's rms_norm over one head,
 * the float mean plus eps in float, (float)(sum / head_dim) + eps (not the
 * sum in double: that rounds once where GGML rounds twice). */
SW_HD float sw_head_norm_arg(double sum, int head_dim, float eps)
{
    return sw_rms_mean(sum, head_dim) + eps;
}

/* The softmax's normaliser from the sum of group sums. */
SW_HD float sw_softmax_inv(double sum)
{
    return (float)(1.0 / sum);
}

/* Half-width, relative to a parallel sum of m non-negative doubles, of an
 * interval that holds the left-to-right sum of the same terms: each is within
 * about m * 2^-53 of the exact sum, and the margin covers the rounding of the
 * interval's ends. */
SW_HD double sw_sum_delta(int m)
{
    return ((double)m + 8.0) * 0x1p-52;
}

/* Each returns 1 and the float the CPU derives from its left-to-right sum
 * when a parallel sum s of m non-negative terms proves it (the function of
 * the sum is monotonic, so equal values at both ends of the interval mean the
 * same value inside), else 0: then take the left-to-right sum. */
SW_HD int sw_rms_mean_stable(double s, int m, int dim, float *out)
{
    const double d = sw_sum_delta(m);
    const float lo = sw_rms_mean(s - s * d, dim), hi = sw_rms_mean(s + s * d, dim);
    if (!(lo == hi))
        return 0;
    *out = lo;
    return 1;
}

SW_HD int sw_head_norm_stable(double s, int m, int head_dim, float eps, float *out)
{
    const double d = sw_sum_delta(m);
    const float lo = sw_head_norm_arg(s - s * d, head_dim, eps);
    const float hi = sw_head_norm_arg(s + s * d, head_dim, eps);
    if (!(lo == hi))
        return 0;
    *out = lo;
    return 1;
}

SW_HD int sw_softmax_inv_stable(double s, int m, float *out)
{
    const double d = sw_sum_delta(m);
    const float lo = sw_softmax_inv(s + s * d), hi = sw_softmax_inv(s - s * d);
    if (!(lo == hi))
        return 0;
    *out = lo;
    return 1;
}

/* ---- mixture of experts (both backends' routing) ---- */

/* dot(w, x) over n f32 (n % 8 == 0) in the order of llamafile's f32 tinyBLAS,
 * which llama.cpp uses for an f32 weight (the router) when 2 rows or more are
 * multiplied: element i on lane i % 8 by fused multiply-adds, then the
 * lanes' sum. */
SW_HD float sw_dot_f32_tinyblas(const float *w, const float *x, int64_t n)
{
    float lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t i = 0; i < n; i++)
        lane[i & 7] = fmaf(w[i], x[i], lane[i & 7]);
    return sw_hsum8(lane);
}

/* The routing of one row as llama.cpp's build_moe_ffn with softmax gating and
 * normalised weights. p (n_exp router logits) becomes GGML's soft_max
 * (ggml_vec_soft_max_f32 on AVX2: groups of 8 with GGML's exp, each group's
 * sum in f32 and the groups in double, the n_exp % 8 tail with expf, then a
 * scale by the float of 1 / sum); sel (k) gets the k largest in descending
 * order (the lowest id on ties), w (k) their probabilities divided by their
 * double sum rounded to float and clamped below at 2^-14 (ggml_clamp: NaN
 * stays NaN). */
SW_HD void sw_moe_route(float *p, int n_exp, int k, int32_t *sel, float *w)
{
    float max = -INFINITY;
    for (int e = 0; e < n_exp; e++)
        max = p[e] > max ? p[e] : max;
    double sum = 0.0;
    int i = 0;
    for (; i + 7 < n_exp; i += 8)
        sum += (double)sw_softmax_group8(p + i, 8, max);
    for (; i < n_exp; i++) {
        const float v = expf(p[i] - max);
        sum += (double)v;
        p[i] = v;
    }
    const float inv = sw_softmax_inv(sum);
    for (int e = 0; e < n_exp; e++)
        p[e] *= inv;
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int e = 0; e < n_exp; e++) {
            int taken = 0;
            for (int t = 0; t < j && !taken; t++)
                taken = sel[t] == e;
            if (!taken && (best < 0 || p[e] > p[best]))
                best = e;
        }
        sel[j] = best;
    }
    double s = 0.0;
    for (int j = 0; j < k; j++)
        s += (double)p[sel[j]];
    float fs = (float)s;
    if (!(fs >= 6.103515625e-5f) && fs == fs)
        fs = 6.103515625e-5f;
    for (int j = 0; j < k; j++)
        w[j] = p[sel[j]] / fs;
}

#endif
