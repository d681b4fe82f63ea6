/*
 * backend.h - the compute layer the model code runs on. A backend owns the
 * memory of the activations, the KV cache and (for devices) the weights, and
 * implements the handful of transformer ops below. The CPU backend is the
 * first implementation; a CUDA backend implements the same table and the
 * model code does not change.
 *
 * Buffers (sw_buf_t) are opaque to the model: it passes them between ops and
 * moves data in and out only with upload/download. Element offsets into a
 * buffer are given as separate arguments so that a device backend can apply
 * them to device pointers.
 *
 * Determinism contract (lesson 4 of the brief): every op computes each row
 * independently of the other rows in the call, so a row's result is
 * bit-identical whatever the batch size, the thread count or the split of
 * work between threads.
 */
#ifndef SW_BACKEND_H
#define SW_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "quant.h"

typedef struct sw_backend sw_backend_t;
typedef struct sw_buf sw_buf_t;

/* A weight matrix (n_out rows of n_in elements of type t) as the backend
 * holds it. For the CPU backend data points into the model's mmap. */
typedef struct sw_weight {
    enum sw_type type; // element type of the rows
    int64_t n_in;      // elements per row (ne[0])
    int64_t n_out;     // rows (ne[1])
    size_t row_bytes;  // bytes per row
    const void *data;  // (n_out, row_bytes) on the host (mmap)
    void *dev;         // backend copy, NULL for the CPU backend
} sw_weight_t;

/* Attention over one layer's cache for n rows at consecutive positions.
 * The cache of the layer holds K as (n_ctx, n_kv_heads * head_dim) f16 and V
 * transposed as (n_kv_heads * head_dim, n_ctx) f16; rows [0, pos0) are
 * already filled, this call appends the n new rows and then attends causally. */
typedef struct sw_attn_args {
    sw_buf_t *q;       // (n, n_head * head_dim) f32, roped
    sw_buf_t *k;       // (n, n_kv_head * head_dim) f32, roped
    sw_buf_t *v;       // (n, n_kv_head * head_dim) f32
    sw_buf_t *out;     // (n, n_head * head_dim) f32
    sw_buf_t *k_cache; // (n_ctx, n_kv_head * head_dim) f16
    sw_buf_t *v_cache; // (n_kv_head * head_dim, n_ctx) f16, transposed
    int n;             // rows
    int pos0;          // position of row 0 = rows already in the cache
    int n_ctx;         // cache capacity in positions
    int n_head;        // query heads
    int n_kv_head;     // key/value heads (GQA: n_head % n_kv_head == 0)
    int head_dim;      // elements per head
    float scale;       // 1/sqrt(head_dim) unless the model says otherwise
    int prompt_order;  // 1: the reduction order of GGML's batched prompt path
                       // (llamafile tinyBLAS); 0: that of its one-token decode
                       // path. Either way a row's result does not depend on n.
} sw_attn_args_t;

typedef struct sw_backend_ops {
    const char *name;
    void (*destroy)(sw_backend_t *be);

    /* Memory. alloc returns NULL on failure; contents are zeroed. */
    sw_buf_t *(*buf_alloc)(sw_backend_t *be, size_t bytes);
    void (*buf_free)(sw_backend_t *be, sw_buf_t *buf);
    void (*upload)(sw_backend_t *be, sw_buf_t *dst, size_t dst_off, const void *src, size_t bytes);
    void (*download)(sw_backend_t *be, void *dst, const sw_buf_t *src, size_t src_off,
                     size_t bytes);
    /* Makes the weight usable by the ops (a no-op on the CPU). 0 or -1. */
    int (*weight_prepare)(sw_backend_t *be, sw_weight_t *w);

    /* out[r] = dequantize(emb row ids[r]), n rows of emb->n_in f32. */
    void (*get_rows)(sw_backend_t *be, const sw_weight_t *emb, const int32_t *ids, int n,
                     sw_buf_t *out);
    /* out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w, rows of dim f32. */
    void (*rmsnorm)(sw_backend_t *be, const sw_buf_t *x, const float *w, int n, int dim, float eps,
                    sw_buf_t *out);
    /* For each of the n_w weights: y_i[r, o] = W_i[o] . x[x_row0 + r] (+ bias_i[o]
     * when bias is non-NULL and bias[i] != NULL) for r in [0, n). x rows are
     * W_i->n_in f32 (all W_i share n_in); y_i is (n, W_i->n_out) f32. Several
     * weights that read the same input (Q/K/V, gate/up) go in one call so the
     * input is quantized once and the threads share one job. */
    void (*matmul)(sw_backend_t *be, int n_w, const sw_weight_t *const *w, const float *const *bias,
                   const sw_buf_t *x, int x_row0, int n, sw_buf_t *const *y);
    /* Rotary embedding in place on n rows of n_heads * head_dim, row r at
     * position pos0 + r. neox = rotate halves (Qwen) instead of pairs (Llama). */
    void (*rope)(sw_backend_t *be, sw_buf_t *x, int n, int n_heads, int head_dim, int n_rot,
                 int pos0, float freq_base, float freq_scale, int neox);
    /* Per-head RMS norm (Qwen3 QK norm): each head_dim slice scaled by w. */
    void (*head_norm)(sw_backend_t *be, sw_buf_t *x, int n, int n_heads, int head_dim,
                      const float *w, float eps);
    void (*attention)(sw_backend_t *be, const sw_attn_args_t *a);
    /* x[i] += y[i] over n * dim elements. */
    void (*add)(sw_backend_t *be, sw_buf_t *x, const sw_buf_t *y, size_t n);
    /* gate[i] = silu(gate[i]) * up[i] over n elements. */
    void (*swiglu)(sw_backend_t *be, sw_buf_t *gate, const sw_buf_t *up, size_t n);
    /* Copies n elements f32 inside the backend. */
    void (*copy)(sw_backend_t *be, sw_buf_t *dst, size_t dst_off, const sw_buf_t *src,
                 size_t src_off, size_t n);
    /* Waits for queued work (device backends); may be NULL. */
    void (*sync)(sw_backend_t *be);
} sw_backend_ops_t;

struct sw_backend {
    const sw_backend_ops_t *ops; // the implementation
    void *impl;                  // its state
};

/* The CPU backend with n_threads compute threads (0 = one per core). NULL on
 * failure. Destroy with sw_backend_free(). */
sw_backend_t *sw_backend_cpu_new(int n_threads) __attribute__((warn_unused_result));
/* Accepts NULL and NULLs the caller's pointer. */
void sw_backend_free(sw_backend_t **self_p);

/* The host pointer of a CPU buffer (for the CPU backend's own helpers and tests). */
void *sw_buf_host(sw_buf_t *buf);

#endif
