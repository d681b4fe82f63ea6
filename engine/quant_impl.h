/*
 * quant_impl.h - private to the engine: its quant files (quant.c, the kernel
 * files quant_*.c), and kv.c and cpu/attention_cpu.c for the q8_0 KV cache: the GGML block layouts
 * as C structs and the kernel table that start-up dispatch fills.
 *
 * Every block struct has exactly GGML's size and field order (static_asserts
 * in quant.c), so a row of blocks in a memory-mapped GGUF file can be read in
 * place. GGUF aligns tensor data to 32 bytes and every block size is even, so
 * the 16-bit fields are always 2-byte aligned.
 */
#ifndef SW_QUANT_IMPL_H
#define SW_QUANT_IMPL_H

#include "quant.h"

#include <stddef.h>
#include <stdint.h>

#include "half.h" // SW_HD: functions compiled for the host and, by nvcc, for the GPU

#define SW_QK 32    // elements per block of the 32-element formats
#define SW_QK_K 256 // elements per super-block of the K-quants

typedef struct {
    sw_f16 d;       // scale
    uint8_t qs[16]; // element j in the low nibble of qs[j], j+16 in the high; x = (q - 8) * d
} sw_block_q4_0;

typedef struct {
    sw_f16 d;       // scale
    sw_f16 m;       // minimum; x = q * d + m
    uint8_t qs[16]; // nibbles as in q4_0
} sw_block_q4_1;

typedef struct {
    sw_f16 d;       // scale
    uint8_t qh[4];  // bit j = 5th bit of element j (little-endian 32-bit word)
    uint8_t qs[16]; // low 4 bits as in q4_0; x = (q - 16) * d
} sw_block_q5_0;

typedef struct {
    sw_f16 d;       // scale
    sw_f16 m;       // minimum; x = q * d + m
    uint8_t qh[4];  // 5th bits as in q5_0
    uint8_t qs[16]; // low 4 bits as in q4_0
} sw_block_q5_1;

typedef struct {
    sw_f16 d;      // scale
    int8_t qs[32]; // x = q * d
} sw_block_q8_0;

typedef struct {
    sw_f16 d;      // scale
    sw_f16 s;      // d * sum(qs), used by the q4_1/q5_1 dot products for the minimum term
    int8_t qs[32]; // x = q * d
} sw_block_q8_1;

typedef struct {
    sw_f16 d;           // super-scale of the 8 sub-block scales
    sw_f16 dmin;        // super-scale of the 8 sub-block minimums
    uint8_t scales[12]; // 8 scales + 8 mins, 6 bits each, packed (see s_scale_min_k4)
    uint8_t qs[128];    // 4-bit quants: 64-element chunk c uses qs[32c..32c+31], low nibbles first
} sw_block_q4_k;

typedef struct {
    sw_f16 d;           // super-scale of the sub-block scales
    sw_f16 dmin;        // super-scale of the sub-block minimums
    uint8_t scales[12]; // packed like q4_K
    uint8_t qh[32];     // 5th bit: element 32s + l has bit s of qh[l]
    uint8_t qs[128];    // low 4 bits, laid out as in q4_K
} sw_block_q5_k;

typedef struct {
    uint8_t ql[128];   // low 4 bits
    uint8_t qh[64];    // high 2 bits
    int8_t scales[16]; // one signed scale per 16 elements
    sw_f16 d;          // super-scale
} sw_block_q6_k;

typedef struct {
    uint8_t scales[16]; // sub-block s (16 elements): scale in the low nibble, minimum in the high
    uint8_t qs[64];     // 2-bit quants: element 128h + 32g + l is bits 2g..2g+1 of qs[32h + l]
    sw_f16 d;           // super-scale of the scales
    sw_f16 dmin;        // super-scale of the minimums; x = d * sc * q - dmin * mn
} sw_block_q2_k;

typedef struct {
    uint8_t hmask[32];  // third bit: element 128h + 32g + l has bit 4h + g of hmask[l]
    uint8_t qs[64];     // low 2 bits, laid out as in q2_K
    uint8_t scales[12]; // 16 6-bit scales, packed (sw_q3_k_scale), stored + 32
    sw_f16 d;           // super-scale; x = d * (sc - 32) * ((q | bit << 2) - 4)
} sw_block_q3_k;

typedef struct {
    sw_f16 d;       // scale; x = d * sw_iq4nl_value(q)
    uint8_t qs[16]; // 4-bit indices into the non-linear table, laid out as in q4_0
} sw_block_iq4_nl;

typedef struct {
    sw_f16 d;            // super-scale
    uint16_t scales_h;   // bits 2s..2s+1: the top bits of sub-block s's 6-bit scale
    uint8_t scales_l[4]; // the low 4 bits: sub-block s in nibble s % 2 of byte s / 2
    uint8_t qs[128];     // sub-block s (32 elements) = qs[16s..16s+15] laid out as in q4_0;
                         // x = d * (scale - 32) * sw_iq4nl_value(q)
} sw_block_iq4_xs;

typedef struct {
    float d;           // scale (f32)
    int8_t qs[256];    // x = q * d
    int16_t bsums[16]; // sum of each group of 16 quants
} sw_block_q8_k;

/* *s = dot(w, x) for one row pair; n elements. */
typedef void (*sw_dot_fn)(int64_t n, float *s, const void *w, const void *x);
/* The multi-row kernel, same contract as sw_matmul(). */
typedef void (*sw_mm_fn)(int64_t n, const void *w, size_t w_stride, int64_t o0, int64_t o1,
                         const void *x, size_t x_stride, int nr, float *y, int64_t y_stride);

/* One kernel level: NULL entries are not implemented at that level. */
struct sw_kernels {
    sw_dot_fn dot[SW_TYPE_COUNT];  // indexed by weight type
    sw_mm_fn mm[SW_TYPE_COUNT];    // indexed by weight type
    sw_dot_fn tdot[SW_TYPE_COUNT]; // the tiled order (sw_matmul_tiled): K-quants only
    sw_mm_fn mmt[SW_TYPE_COUNT];   // its multi-row kernel
    sw_mm_fn mmtw[SW_TYPE_COUNT];  // optional: its kernel for batches of mmtw_rows[t] rows or
                                   // more (the same bits; faster when the rows are many)
    int mmtw_rows[SW_TYPE_COUNT];  // that threshold; 0: SW_MMTW_ROWS
    sw_dot_fn gdot[SW_TYPE_COUNT]; // the order of llamafile's sgemm (sw_matmul_sgemm) where it
                                   // differs from dot's: iq4_nl only
    sw_mm_fn mmg[SW_TYPE_COUNT];   // its multi-row kernel
};

/* Below this many activation rows the AVX-512 tiled kernels' unpacking of the
 * weights costs more than it saves (bench_quant tiled: 8 rows of the 8960 x
 * 1536 q4_K matrix 0.86x the AVX2 kernel's speed, 16 rows 1.03x). */
#define SW_MMTW_ROWS 16

/* Fills the AVX2+FMA+F16C kernels (quant_avx2.c); only call when the CPU has them. */
void sw_kernels_avx2(struct sw_kernels *k);
/* Sets its tiled K-quant matmuls (mmt; quant_mmt_avx2.c), vnni: with AVX-VNNI. */
void sw_kernels_avx2_mmt(struct sw_kernels *k, int vnni);
/* Adds the AVX-512 VNNI tiled K-quant kernels (quant_avx512.c) to an AVX2
 * table (mmtw); only call when the CPU and OS have AVX512F/BW/VL/DQ and
 * AVX512_VNNI. */
void sw_kernels_avx512(struct sw_kernels *k);
/* Fills the scalar kernels of q2_K, q3_K, iq4_nl and iq4_xs (quant_lowbit.c). */
void sw_kernels_lowbit(struct sw_kernels *k);
/* Their AVX2 kernels (quant_lowbit_avx2.c); only call when the CPU has AVX2+FMA+F16C. */
void sw_kernels_lowbit_avx2(struct sw_kernels *k);
/* Their AVX-512 VNNI one-row kernels (quant_lowbit_avx512.c) over an AVX2 table; only
 * call when sw_kernels_avx512 may be called. */
void sw_kernels_lowbit_avx512(struct sw_kernels *k);
/* Their rows as f32 (sw_dequantize_row); 0, or -1 for another type. */
int sw_dequantize_lowbit(enum sw_type t, const void *src, float *dst, int64_t n);
/* Adds the AVX-512 kernels for few activation rows (quant_mv_avx512.c: generation,
 * and K-quant batches of up to 8 rows) to the table sw_kernels_avx512 filled; same
 * conditions. */
void sw_kernels_avx512_mv(struct sw_kernels *k);
/* From this many activation rows on, sw_matmul of q8_0 and q4_0 weights runs
 * the AVX-512 batch kernels (quant_mm_avx512.c; the same bits as the AVX2
 * kernels, which take fewer rows: bench_quant tiled, one Zen 4 core, 8 rows
 * of the 8960 x 1536 q8_0 matrix 0.88x the AVX2 kernel's speed, 16 rows
 * 1.26x, 128 rows 1.65x). */
#define SW_MMB_ROWS 16
/* Adds those kernels to the table sw_kernels_avx512 filled (before
 * sw_kernels_avx512_mv); same conditions. */
void sw_kernels_avx512_mm(struct sw_kernels *k);
/* From this many activation rows on, sw_matmul_tiled of q4_K, q5_K and q6_K
 * weights runs the AMX kernels (quant_amx.c; the same bits): a tile takes 16
 * activation rows, so 10 cost about what 16 do, and below ~10 the AVX2
 * level's kernel is faster (bench_quant tiled, one core of the Intel VM). */
#define SW_AMX_ROWS 10
/* Adds those kernels to an AVX-512 table (mmtw); only call when the CPU has
 * AMX-TILE and AMX-INT8 and the OS granted this process the tile data
 * (sw_cpu_amx_ready). */
void sw_kernels_amx(struct sw_kernels *k);
/* 1 when the CPU has AMX-TILE and AMX-INT8, the OS saves the tile state and
 * this process may use it (each call asks Linux for it; s_init calls it once). */
int sw_cpu_amx_ready(void);
/* 1 when the CPU has AVX-VNNI (and SW_NO_VNNI is unset). */
int sw_cpu_has_avxvnni(void);
/* Quantizes activations to Q8_0/Q8_1/Q8_K with AVX2 (bit-identical to the scalar code). */
void sw_quantize_q8_0_avx2(const float *x, void *y, int64_t n);
void sw_quantize_q8_1_avx2(const float *x, void *y, int64_t n);
void sw_quantize_q8_k_avx2(const float *x, void *y, int64_t n);

/* The 6-bit scale and minimum of sub-block j (0..7) of a q4_K/q5_K block. */
SW_HD void sw_scale_min_k4(int j, const uint8_t *q, uint8_t *sc, uint8_t *mn)
{
    if (j < 4) {
        *sc = q[j] & 63;
        *mn = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *mn = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

#endif
