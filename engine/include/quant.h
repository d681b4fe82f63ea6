/*
 * quant.h - tensor element types, their block layouts (bit-compatible with
 * GGML/GGUF), conversion to f32, and the dot-product kernels the matmuls run.
 *
 * Numerics follow GGML's CPU path so that greedy tokens match llama.cpp: a
 * weight row of type T is multiplied with an activation row that was first
 * quantized to sw_type_vec_dot(T) (Q8_0 for Q4_0/Q8_0, Q8_1 for Q4_1, Q8_K for
 * the K-quants, F16 for F16, BF16 for BF16, F32 for F32).
 *
 * Determinism contract (lesson 4 of the brief): the value a kernel produces for
 * one (weight row, activation row) pair depends only on those two rows and on
 * the kernel level chosen at start-up, never on how many rows are processed
 * together, nor on thread count or on the split of work between threads.
 * sw_matmul() for n rows gives bit-identical results to n calls of
 * sw_vec_dot().
 *
 * Kernels are chosen once at start-up, the best level the CPU has: "avx512"
 * (the AVX2 level plus AVX-512 VNNI kernels for sw_matmul_tiled's K-quants),
 * "avx2" (AVX2+FMA+F16C, using AVX-VNNI's vpdpbusd when present, which yields
 * the same integers), portable scalar C otherwise. SW_CPU=avx2 or
 * SW_CPU=scalar caps the level. Every level reproduces the arithmetic of
 * GGML's AVX2 CPU kernels to the bit (scripts/dev/ggml_bits.sh checks it against
 * a llama.cpp tree; tests/unit/test_quant.c checks the levels against each
 * other).
 */
#ifndef SW_QUANT_H
#define SW_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "half.h" // sw_f16, sw_bf16

#ifdef __cplusplus
extern "C" {
#endif

/* Values are GGML's type ids, as stored in GGUF files. */
enum sw_type {
    SW_TYPE_F32 = 0,
    SW_TYPE_F16 = 1,
    SW_TYPE_Q4_0 = 2,
    SW_TYPE_Q4_1 = 3,
    SW_TYPE_Q5_0 = 6,
    SW_TYPE_Q5_1 = 7,
    SW_TYPE_Q8_0 = 8,
    SW_TYPE_Q8_1 = 9,
    SW_TYPE_Q2_K = 10,
    SW_TYPE_Q3_K = 11,
    SW_TYPE_Q4_K = 12,
    SW_TYPE_Q5_K = 13,
    SW_TYPE_Q6_K = 14,
    SW_TYPE_Q8_K = 15,
    SW_TYPE_IQ4_NL = 20,
    SW_TYPE_IQ4_XS = 23,
    SW_TYPE_BF16 = 30,
    SW_TYPE_COUNT = 43, // one past the largest id GGML defines (for range checks)
};

/* 1 when shardwire can load tensors of this type (F32, F16, BF16, Q8_0, Q4_0,
 * Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS; Q8_1 and
 * Q8_K are activation types). The other ids GGML defines (the IQ1/IQ2/IQ3
 * types, ternary, MXFP4/NVFP4, Q1_0/Q2_0, the integer types) have their
 * block layouts here, so a file using them opens and the model loader
 * names the tensor it refuses. */
int sw_type_supported(enum sw_type t);
/* Name ("q4_K"), or "unknown". */
const char *sw_type_name(enum sw_type t);
/* Elements per block (1 for F32/F16/BF16, 32 or 256 for quantized); 0 for an unknown id. */
int64_t sw_type_block_elems(enum sw_type t);
/* Bytes per block; 0 for an unknown id. */
size_t sw_type_block_bytes(enum sw_type t);
/* Bytes of a row of n elements into *out. Returns -1 when t is unknown, n is
 * negative or not a multiple of the block size, or the size overflows. */
int sw_type_row_bytes(enum sw_type t, int64_t n, uint64_t *out) __attribute__((warn_unused_result));
/* The activation type weight rows of type t are multiplied with. */
enum sw_type sw_type_vec_dot(enum sw_type t);

float sw_f16_to_f32(sw_f16 h);
sw_f16 sw_f32_to_f16(float f); // round to nearest even, like F16C
float sw_bf16_to_f32(sw_bf16 h);
sw_bf16 sw_f32_to_bf16(float f); // round to nearest even

/* Converts n elements of a row of type t (n a multiple of the block size) to f32. */
void sw_dequantize_row(enum sw_type t, const void *src, float *dst, int64_t n);
/* Quantizes n f32 values into a row of type t; t is one of the activation
 * types (F32, F16, BF16, Q8_0, Q8_1, Q8_K) or any type sw_type_supported says
 * can be written (used by tests to build weights). Returns -1 if t cannot be
 * written. */
int sw_quantize_row(enum sw_type t, const float *src, void *dst, int64_t n)
    __attribute__((warn_unused_result));

/* *s = dot(w, x): w is a row of n elements of weight type t, x a row of
 * sw_type_vec_dot(t). */
void sw_vec_dot(enum sw_type t, int64_t n, float *s, const void *w, const void *x);

/* Multi-row matmul over an output slice, reading each weight row once for all
 * activation rows (the verifier's K+1 rows, a prefill chunk):
 *
 *   y[r * y_stride + o] = dot(W row o, x row r)   for o in [o0, o1), r in [0, nr)
 *
 * W: rows of n elements of type t, w_stride bytes apart. x: nr rows of
 * sw_type_vec_dot(t), x_stride bytes apart. y: f32, y_stride elements per row.
 * Bit-identical to sw_vec_dot() per element. Callers parallelise by splitting
 * [o0, o1) between threads; splits at multiples of 4 rows keep the kernels'
 * 4-row tiles whole (faster; the results never depend on the split). */
void sw_matmul(enum sw_type t, int64_t n, const void *w, size_t w_stride, int64_t o0, int64_t o1,
               const void *x, size_t x_stride, int nr, float *y, int64_t y_stride);

/* sw_matmul in the order llama.cpp's CPU backend uses for a batch of 8 rows
 * or more of a K-quant weight (its "tiled" matmul, ggml-cpu/tiled/): per
 * super-block the exact int32 total t of the block's dot product (sub-block
 * scales applied) and, for q4_K/q5_K, the total m of the minimums times the
 * activation's bsums, then
 *
 *   r = d_w * float(t);  r = fma(-dmin_w, float(m), r);  y = fma(r, d_x, y)
 *
 * over the super-blocks in order (y starts at 0); q2_K like q4_K (its
 * minimums per 16 elements), q3_K and iq4_xs like q6_K (no minimums). Other
 * types: sw_matmul.
 * Each element still depends only on its two rows (the kernel level aside),
 * but the value differs from sw_matmul's; the model uses it only for prompt
 * windows of 8 rows or more (SW_MM_TILED), where llama.cpp does. */
void sw_matmul_tiled(enum sw_type t, int64_t n, const void *w, size_t w_stride, int64_t o0,
                     int64_t o1, const void *x, size_t x_stride, int nr, float *y,
                     int64_t y_stride);

/* sw_matmul in the order llama.cpp's CPU backend uses for a matmul of 2 rows
 * or more that llamafile's sgemm serves (prompt batches): for iq4_nl weights
 * one 8-lane chain over the blocks, where its one-row vec_dot alternates two
 * chains (even and odd blocks) and takes an odd last block apart. Other
 * types: sw_matmul (llamafile's order equals vec_dot's for q4_0, q5_0,
 * q8_0, and it does not serve the rest). The model uses it for prompt
 * windows of 2 rows or more (SW_MM_PROMPT), where llama.cpp does. */
void sw_matmul_sgemm(enum sw_type t, int64_t n, const void *w, size_t w_stride, int64_t o0,
                     int64_t o1, const void *x, size_t x_stride, int nr, float *y,
                     int64_t y_stride);

/* The matmul llama.cpp's CPU backend runs for weight type t in a batch of
 * batch_rows rows (MUL_MAT, its counting): sw_matmul_tiled when it has 8
 * rows or more and t is a type of its tiled matmul, sw_matmul_sgemm when it
 * has 2 or more, else sw_matmul. */
void sw_matmul_batch(enum sw_type t, int batch_rows, int64_t n, const void *w, size_t w_stride,
                     int64_t o0, int64_t o1, const void *x, size_t x_stride, int nr, float *y,
                     int64_t y_stride);

/* Kernel levels, each a superset of the one before. */
enum sw_kernel_level {
    SW_KLEVEL_SCALAR = 0, // portable C
    SW_KLEVEL_AVX2 = 1,   // AVX2 + FMA + F16C (+ AVX-VNNI where present)
    SW_KLEVEL_AVX512 = 2, // the AVX2 level + AVX-512 VNNI tiled K-quant kernels
    SW_KLEVEL_AMX = 3,    // the AVX-512 level + AMX-INT8 K-quant prompt kernels
};

/* Which kernel level is active: "amx", "avx512", "avx2" or "scalar". */
const char *sw_cpu_kernels(void);
/* The active level, and the best one this CPU (and SW_CPU) allows. */
enum sw_kernel_level sw_quant_level(void);
enum sw_kernel_level sw_quant_best_level(void);

/* Tests and benchmarks only: on != 0 switches to the scalar kernels, 0 back to
 * the best level the CPU (and SW_CPU) allow. Not safe while other threads run
 * kernels. */
void sw_quant_force_scalar(int on);
/* Tests and benchmarks only: switches to level l; -1 (and no change) when l is
 * above sw_quant_best_level(). Not safe while other threads run kernels. */
int sw_quant_force_level(enum sw_kernel_level l) __attribute__((warn_unused_result));

#ifdef __cplusplus
}
#endif

#endif
