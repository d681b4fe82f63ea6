/*
 * backend_cpu_impl.h - private declarations shared by the CPU backend's
 * portable file and its AVX2 file. Each AVX2 kernel computes exactly what
 * its scalar twin in op_math.h computes (the code the GPU runs too).
 */
#ifndef SW_BACKEND_CPU_IMPL_H
#define SW_BACKEND_CPU_IMPL_H

#include "quant.h"

/* dot(a, b) over n f16 values the way GGML's ggml_vec_dot_f16 does it on
 * AVX2: four accumulators of eight f32 lanes take 32 elements per step with
 * fused multiply-adds; they are reduced (a0+a2)+(a1+a3), then the lanes as
 * ((l0+l4)+(l1+l5)) + ((l2+l6)+(l3+l7)). With pad32 the n % 32 tail is
 * zero-padded into one more step (as over GGML's padded KV length);
 * otherwise it is added in double precision after the reduction. */
float sw_cpu_dot_f16_avx2(const sw_f16 *a, const sw_f16 *b, int n, int pad32); // sw_dot_f16_4x8
/* The pad32 dot above over a split first operand: element i is a1[i] for
 * i < n1 and a2[i - n1] after (n1 a multiple of 32), b[i] throughout; the
 * very same roundings as the dot over the joined vector. */
float sw_cpu_dot2_f16_avx2(const sw_f16 *a1, int n1, const sw_f16 *a2, const sw_f16 *b, int n);
float sw_cpu_dot2_f16_scalar(const sw_f16 *a1, int n1, const sw_f16 *a2, const sw_f16 *b, int n);
void sw_cpu_f32_to_f16_avx2(const float *x, sw_f16 *y, int n);
void sw_cpu_f16_to_f32_avx2(const sw_f16 *x, float *y, int n); // exact
/* dot(a, b) over n f16 values the way GGML's batched (llamafile tinyBLAS)
 * path does it: one accumulator of eight f32 lanes takes 8 elements per step
 * (the tail zero-padded), lanes summed as ((l0+l4)+(l2+l6)) +
 * ((l1+l5)+(l3+l7)). */
float sw_cpu_dot_f16_tiled_avx2(const sw_f16 *a, const sw_f16 *b, int n); // sw_dot_f16_tiled
/* out[j] = sw_cpu_dot_f16_tiled_avx2(a + j * a_stride, b16, n) for j < na, where
 * b holds the f16 values b16 as f32 (exact): the same bits, with 8 rows in
 * flight at a time (one accumulator chain per dot is bound by the latency of
 * its multiply-adds) and b converted once. */
void sw_cpu_dots_f16_tiled_avx2(const sw_f16 *a, size_t a_stride, int na, const float *b, int n,
                                float *out);

/* exp(x) for 8 values with GGML's vectorised approximation (ggml_v_expf);
 * the scalar twin computes the same roundings one value at a time. */
void sw_cpu_expf8_avx2(const float *x, float *y); // sw_expf_ggml
/* y[i] = silu(g[i]) * u[i] for 8 values, silu(x) = x / (1 + exp(-x)). */
void sw_cpu_swiglu8_avx2(float *g, const float *u);
/* y[i] = fma(x[i], v, y[i]) over n values: GGML's ggml_vec_mad_f32 on AVX2
 * with FMA (the q8_0 cache's flash attention, attention_cpu.c). */
void sw_cpu_mad_f32_avx2(float *y, const float *x, float v, int n);

#endif
