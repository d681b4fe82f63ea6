/*
 * cpu_state_impl.h - the CPU backend's state and the small kernels its files
 * share (backend_cpu.c: buffers, elementwise ops, matmul, mixture of experts,
 * the operations table; attention_cpu.c: attention and the KV cache moves).
 * Private to engine/cpu/.
 */
#ifndef SW_CPU_STATE_IMPL_H
#define SW_CPU_STATE_IMPL_H

#include <math.h>

#include "backend_cpu_impl.h"
#include "backend_impl.h"
#include "op_math.h"
#include "threadpool.h"

struct sw_buf {
    size_t bytes; // usable size
    void *data;   // 64-byte aligned and zeroed when owned; else host memory of a weight or a view
    int owned;    // 1 = data is freed with the buffer
};

typedef struct cpu_state {
    sw_pool_t *pool;   // compute threads (the caller is thread 0)
    int n_threads;     // pool size
    int avx2;          // 1 = AVX2/FMA/F16C kernels
    void *qbuf;        // quantized matmul input, qbuf_bytes long
    size_t qbuf_bytes; //
    void *scratch;     // per-thread attention scratch, n_threads * scratch_each bytes
    size_t scratch_each;
    void *moe;        // mixture-of-experts scratch (s_moe_layout), moe_bytes long
    size_t moe_bytes; //
} cpu_state_t;

static inline cpu_state_t *cpu_impl(sw_backend_t *be)
{
    return be->impl;
}

static inline float *cpu_f32(const sw_buf_t *b)
{
    return (float *)b->data;
}

static inline const int32_t *cpu_i32(const sw_buf_t *b)
{
    return (const int32_t *)b->data;
}

/* ---- kernels: AVX2, or the scalar code shared with the GPU (op_math.h) ---- */

static inline float cpu_dot_f16(const cpu_state_t *c, const sw_f16 *a, const sw_f16 *b, int n,
                                int pad32)
{
    return c->avx2 ? sw_cpu_dot_f16_avx2(a, b, n, pad32) : sw_dot_f16_4x8(a, b, n, pad32);
}

/* In place: x[i] = exp(x[i] - max) over n values; returns their sum. Values
 * go 8 at a time (the tail padded with exp(-inf) = 0), each group summed in
 * f32 and the groups in double, as GGML's soft_max does. */
static inline double cpu_softmax_exp(const cpu_state_t *c, float *x, int n, float max)
{
    double sum = 0.0;
    for (int i = 0; i < n; i += 8) {
        float v[8], e[8];
        for (int l = 0; l < 8; l++)
            v[l] = i + l < n ? x[i + l] - max : -INFINITY;
        if (c->avx2)
            sw_cpu_expf8_avx2(v, e);
        else
            for (int l = 0; l < 8; l++)
                e[l] = sw_expf_ggml(v[l]);
        for (int l = 0; l < 8 && i + l < n; l++)
            x[i + l] = e[l];
        sum += (double)sw_hsum8(e);
    }
    return sum;
}

static inline void cpu_to_f16(const cpu_state_t *c, const float *x, sw_f16 *y, int n)
{
    if (c->avx2) {
        sw_cpu_f32_to_f16_avx2(x, y, n);
        return;
    }
    for (int i = 0; i < n; i++)
        y[i] = sw_f32_to_f16(x[i]);
}

/* The attention operation and the KV cache move of the operations table
 * (backend_impl.h, sw_backend_ops_t.attention / kv_move). */
int cpu_attention(sw_backend_t *be, const sw_attn_args_t *a);
int cpu_kv_move(sw_backend_t *be, sw_buf_t *k_cache, sw_buf_t *v_cache, int n_ctx, int kv_dim,
                const int32_t *src, const int32_t *dst, int n);

#endif
