/*
 * backend_impl.h - the inside of the compute layer, private to the engine:
 * the table of operations each implementation fills (cpu/, cuda/) and the
 * model code calls, struct sw_backend, the row control block, attention's
 * arguments and the helpers every implementation shares (backend_impl.c).
 * Included by engine/ files only (the model code, cpu/, cuda/) and by the
 * tests and benchmarks that check the implementations; everyone else uses
 * backend.h.
 *
 * The design follows ggml's backend interface: a small table of operations
 * per implementation and buffers that only the backend reads. The model code
 * passes buffers (sw_buf_t) between operations and moves data in and out
 * only with upload/download; it never dereferences a buffer. Element offsets
 * are separate arguments so that a device backend can apply them to device
 * pointers.
 *
 * Errors: every operation returns 0 or -1. On -1 the backend keeps a one-line
 * reason (sw_backend_fail() writes it, sw_backend_error() reads it). A device
 * backend may queue work and report an error of an earlier operation at a
 * later one or at sync.
 *
 * Per-call values that change every decoding step (how many cache slots are
 * filled, each row's position, the token ids) reach the operations through
 * one small int32 buffer, the row control block (SW_CTL_*), instead of host
 * integers: a device backend can then record the operations of a step once
 * (a CUDA graph) and replay them with a new control block.
 *
 * Determinism contract (lesson 4 of the brief): every operation computes each
 * row independently of the other rows in the call, so a row's result is
 * bit-identical whatever the batch size, the thread count or the split of
 * work. The one exception is a matmul called with SW_MM_PROMPT, which allows
 * a backend a faster path whose rows depend on the batch (cuBLAS); the model
 * uses it only for prompt chunks, which every stage and every replay evaluates
 * in the same shapes.
 *
 * Ownership: buf_alloc, buf_weight and buf_view return buffers the caller
 * frees with buf_free on the same backend (a view before its parent); a
 * weight's buffer is freed by whoever made it (the model). struct sw_backend
 * is allocated by its implementation's constructor and freed by
 * sw_backend_free() (backend.h), which calls ops->destroy for impl.
 */
#ifndef SW_BACKEND_IMPL_H
#define SW_BACKEND_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "quant.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A weight matrix (n_out rows of n_in elements of type t) as the backend
 * holds it. */
typedef struct sw_weight {
    enum sw_type type; // element type of the rows
    int64_t n_in;      // elements per row (ne[0])
    int64_t n_out;     // rows (ne[1])
    size_t row_bytes;  // bytes per row
    sw_buf_t *buf;     // (max(1, n_expert), n_out, row_bytes) on the backend
    const void *host;  // the same bytes in the model file's mapping (for the loader's
                       // prefault only: operations never read it)
    int n_expert;      // 0: one matrix; else the buffer holds n_expert matrices of n_out
                       // rows each, one after the other (a mixture-of-experts layer)
} sw_weight_t;

/* The row control block of one forward chunk, int32 in a backend buffer:
 *
 *   ctl[SW_CTL_N]        n, the rows of the chunk
 *   ctl[SW_CTL_SLOT0]    cache slots already filled: row r is stored at slot
 *                        slot0 + r and (without a tree) attends to slots
 *                        [0, slot0 + r]
 *   ctl[SW_CTL_POS + r]  position of row r (rope); slot0 + r for a sequence,
 *                        the depth in the tree for a tree row
 *   ctl[SW_CTL_POS + n + r]  token id of row r (first stage)
 *   ctl[SW_CTL_VIS(n) + r]   token trees only (sw_attn_args_t.tree): the
 *                        offset in ctl of row r's visibility record
 *                        [lin, m, s_1, .., s_m]: the row attends to slots
 *                        0 .. lin - 1 and then s_1 .. s_m (its ancestors in
 *                        the tree, position order, s_m its own slot), in
 *                        that order, which is the order a chain holding the
 *                        same path would attend in, so a tree row's result
 *                        is bit-identical to its path run as a sequence.
 *
 * Positions and slots are separate so that token trees (several rows at the
 * same depth) get positions by depth and an ancestor mask without changing
 * the other operations. */
#define SW_CTL_N 0
#define SW_CTL_SLOT0 1
#define SW_CTL_POS 2
/* int32 entries of a control block of n rows without a tree. */
#define SW_CTL_LEN(n) (SW_CTL_POS + 2 * (n))
/* Where a tree's record offsets start. */
#define SW_CTL_VIS(n) (SW_CTL_POS + 2 * (n))
/* Most int32 entries of the visibility records of one chunk. */
#define SW_CTL_TREE_MAX 4096
/* int32 entries a control block of n rows may hold, records included. */
#define SW_CTL_CAP(n) (SW_CTL_LEN(n) + (n) + SW_CTL_TREE_MAX)

/* Attention over one layer's cache for the n rows of a chunk. The cache holds
 * K as (n_ctx, n_kv_head * head_dim) f16 and V transposed as
 * (n_kv_head * head_dim, n_ctx) f16, or with kv_q8 both as (n_ctx) rows of
 * n_kv_head * head_dim in q8_0 blocks. The call first stores the n new rows at
 * slots [slot0, slot0 + n), then row r attends to slots [0, slot0 + r], or
 * with tree to the slots of its visibility record. n_ctx is the cache's
 * allocated size (kv.h: a growing cache's grows), never a limit on results. */
typedef struct sw_attn_args {
    sw_buf_t *q;         // (n, n_head * head_dim) f32, roped
    sw_buf_t *k;         // (n, n_kv_head * head_dim) f32, roped
    sw_buf_t *v;         // (n, n_kv_head * head_dim) f32
    sw_buf_t *out;       // (n, n_head * head_dim) f32
    sw_buf_t *k_cache;   // (n_ctx, n_kv_head * head_dim) f16, or q8_0 rows (kv_q8)
    sw_buf_t *v_cache;   // (n_kv_head * head_dim, n_ctx) f16, transposed, or q8_0 rows
    const sw_buf_t *ctl; // row control block (slot0, visibility records)
    int n;               // rows
    int n_ctx;           // cache capacity in slots
    int n_head;          // query heads
    int n_kv_head;       // key/value heads (GQA: n_head % n_kv_head == 0)
    int head_dim;        // elements per head
    float scale;         // 1/sqrt(head_dim) unless the model says otherwise
    int prompt_order;    // 1: the reduction order of GGML's batched prompt path
                         // (llamafile tinyBLAS); 0: that of its one-token decode
                         // path. Either way a row's result does not depend on n.
    int tree;            // 1: each row attends to the slots of its visibility record
                         // (SW_CTL_VIS) instead of [0, slot0 + r]; never with prompt_order
    int swa;             // sliding window (Gemma 3's local layers): the row at position p
                         // sees only positions > p - swa (llama.cpp's standard window); its
                         // sums still run over every visible slot's index as without the
                         // window, the hidden ones adding exact zeros. 0 = no window. Only
                         // backends whose ops say attn_swa get a non-zero window.
    int kv_q8;           // 1: a q8_0 cache (kv.h, SW_KV_Q8_0), in llama.cpp's flash attention
                         // arithmetic; only backends whose ops say attn_q8_0 get it
    int out_row0;        // rows [0, out_row0) are only stored in the cache: nobody reads
                         // their output, which a backend may leave unwritten (the last
                         // layer's rows that want no logits, forward.c); 0 = every row
} sw_attn_args_t;

/* The feed-forward block of a mixture-of-experts layer (Qwen3-MoE), as
 * llama.cpp's build_moe_ffn computes it with softmax gating and normalised
 * top-k weights: per row, router logits (f32 weight; in a prompt window of 2
 * counted rows or more the order of llamafile's f32 tinyBLAS, 8 lanes of
 * fused multiply-adds then the lanes' sum, else ggml_vec_dot_f32's), their
 * softmax (GGML's), the n_used largest, their weights divided by their sum
 * (clamped below at 2^-14), then for each chosen expert e in that order
 * down_e(silu(gate_e(x)) * up_e(x)) times its weight, the n_used results added
 * left to right. Each expert's matmuls quantize their input as a dense matmul
 * does; in a prompt window (prompt = 1) an expert to which 8 or more of the
 * rows [count_row0, n) are routed computes its K-quant matmuls in the tiled
 * order (sw_matmul_tiled), as llama.cpp's MUL_MAT_ID does per expert. */
typedef struct sw_moe_args {
    const sw_buf_t *x;         // (n, n_embd) f32, the normed input
    const sw_weight_t *router; // (n_expert, n_embd) f32
    const sw_weight_t *gate;   // (n_expert, n_ff_exp, n_embd) expert matrices
    const sw_weight_t *up;     // (n_expert, n_ff_exp, n_embd)
    const sw_weight_t *down;   // (n_expert, n_embd, n_ff_exp)
    int n;                     // rows
    int n_used;                // experts per row (<= SW_MOE_MAX_USED)
    int prompt;                // 1: a prompt window (the tiled order may apply)
    int count_row0;            // rows counted for the tiled order's 8-row floor
    sw_buf_t *out;             // (n, n_embd) f32
} sw_moe_args_t;

/* Most experts one row is routed to, and most experts a layer has. */
#define SW_MOE_MAX_USED 16
#define SW_MOE_MAX_EXPERTS 512

/* Most weights one matmul call takes (forward.c passes up to 3: Q, K, V); the
 * backends size their per-call arrays by it. */
#define SW_MATMUL_MAX_W 4

/* matmul flags */
/* The rows are a prompt chunk whose matmul llama.cpp runs with 2 rows or
 * more (its batched path): a batch-dependent faster path is allowed, and
 * iq4_nl weights take llamafile's sgemm order (sw_matmul_sgemm) on the CPU. */
#define SW_MM_PROMPT 1
/* With SW_MM_PROMPT, in a prompt window of 8 rows or more: K-quant weights
 * use llama.cpp's tiled order (sw_matmul_tiled) on the CPU. */
#define SW_MM_TILED 2

/* The operations of one implementation. Members marked optional may be NULL. */
typedef struct sw_backend_ops {
    const char *name; // "cpu", "cuda"
    void (*destroy)(sw_backend_t *be);

    /* Memory. buf_alloc returns a zeroed buffer or NULL. buf_weight returns a
     * read-only buffer with the given bytes, or NULL: the CPU backend refers
     * to host memory in place (it must outlive the buffer), a device backend
     * copies it. */
    sw_buf_t *(*buf_alloc)(sw_backend_t *be, size_t bytes);
    sw_buf_t *(*buf_weight)(sw_backend_t *be, const void *host, size_t bytes);
    /* A buffer for bytes [off, off + bytes) of parent, sharing its memory;
     * free it (before parent) with buf_free, which then frees only the view. */
    sw_buf_t *(*buf_view)(sw_backend_t *be, sw_buf_t *parent, size_t off, size_t bytes);
    void (*buf_free)(sw_backend_t *be, sw_buf_t *buf);
    /* upload may return before the copy is done but the source can be reused
     * at once; download returns when dst holds the bytes. */
    int (*upload)(sw_backend_t *be, sw_buf_t *dst, size_t dst_off, const void *src, size_t bytes);
    int (*download)(sw_backend_t *be, void *dst, const sw_buf_t *src, size_t src_off, size_t bytes);

    /* out[r] = dequantize(emb row ctl.tok[r]), n rows of emb->n_in f32. */
    int (*get_rows)(sw_backend_t *be, const sw_weight_t *emb, const sw_buf_t *ctl, int n,
                    sw_buf_t *out);
    /* out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w, rows of dim f32, w (dim) f32. */
    int (*rmsnorm)(sw_backend_t *be, const sw_buf_t *x, const sw_buf_t *w, int n, int dim,
                   float eps, sw_buf_t *out);
    /* For each of the n_w (<= SW_MATMUL_MAX_W) weights: y_i[r, o] = W_i[o] . x[x_row0 + r]
     * (+ bias_i[o] when bias and bias[i] are non-NULL) for r in [0, n). x rows
     * are W_i->n_in f32 (all W_i share n_in); y_i is (n, W_i->n_out) f32.
     * Weights that read the same input (Q/K/V, gate/up) go in one call so the
     * input is quantized once. flags: SW_MM_*. */
    int (*matmul)(sw_backend_t *be, int n_w, const sw_weight_t *const *w,
                  const sw_buf_t *const *bias, const sw_buf_t *x, int x_row0, int n,
                  sw_buf_t *const *y, int flags);
    /* Rotary embedding in place on n rows of n_heads * head_dim; row r is at
     * position ctl.pos[r]; cs is the model's table (positions, n_rot / 2, 2)
     * f32 of cos and sin (sw_rope_table()). neox = rotate halves (Qwen)
     * instead of adjacent pairs (Llama). */
    int (*rope)(sw_backend_t *be, sw_buf_t *x, const sw_buf_t *ctl, int n, int n_heads,
                int head_dim, int n_rot, const sw_buf_t *cs, int neox);
    /* Per-head RMS norm (Qwen3 QK norm): each head_dim slice scaled by w (head_dim) f32. */
    int (*head_norm)(sw_backend_t *be, sw_buf_t *x, int n, int n_heads, int head_dim,
                     const sw_buf_t *w, float eps);
    int (*attention)(sw_backend_t *be, const sw_attn_args_t *a);
    /* x[i] += y[i] over n elements f32. */
    int (*add)(sw_backend_t *be, sw_buf_t *x, const sw_buf_t *y, size_t n);
    /* gate[i] = silu(gate[i]) * up[i] over n elements f32. */
    int (*swiglu)(sw_backend_t *be, sw_buf_t *gate, const sw_buf_t *up, size_t n);
    /* Greedy step of a draft loop: over the dim f32 values of x, writes the
     * index of the largest (the lowest index on ties) as int32 to
     * tok[tok_off] (tok may be NULL) and to ids[ids_off], and the softmax
     * probability of that value at temperature 1 as f32 to prob[ids_off]
     * (prob may be NULL: not computed). */
    int (*argmax)(sw_backend_t *be, const sw_buf_t *x, int dim, sw_buf_t *tok, size_t tok_off,
                  sw_buf_t *ids, sw_buf_t *prob, size_t ids_off);
    /* Waits for queued work and reports its errors (optional: NULL = nothing queued). */
    int (*sync)(sw_backend_t *be);
    /* Optional, token trees: moves cache slot src[i] to dst[i] (i < n, both
     * ascending, dst[i] <= src[i]) in one layer's K (n_ctx, kv_dim) and
     * transposed V (kv_dim, n_ctx) f16 caches: how the accepted path of a
     * tree is kept. A backend that has it also implements sw_attn_args_t.tree;
     * without it the model refuses trees. src and dst are host arrays. */
    int (*kv_move)(sw_backend_t *be, sw_buf_t *k_cache, sw_buf_t *v_cache, int n_ctx, int kv_dim,
                   const int32_t *src, const int32_t *dst, int n);

    /* Optional: runs record(ctx), which issues this backend's operations for
     * one step, possibly from a recorded graph. The backend may record the
     * operations the second time it sees key and replay them afterwards;
     * key must identify every value the operations take from the host
     * (buffers, shapes) except attention's KV caches (k_cache, v_cache),
     * which may change between replays like the values in buffers (the
     * control block, activations): before a replay the backend calls record
     * with a table whose operations only note the caches, so record must do
     * nothing but call operations. */
    int (*graph_run)(sw_backend_t *be, uint64_t key, int (*record)(void *ctx), void *ctx);
    /* Optional: forgets every recorded graph (buffers they use were freed). */
    void (*graph_reset)(sw_backend_t *be);
    /* Optional: copies bytes from src (on be) to dst on another backend
     * `to` of the same kind (GPU to GPU); NULL or -2 = use download + upload. */
    int (*transfer)(sw_backend_t *be, const sw_buf_t *src, size_t src_off, sw_backend_t *to,
                    sw_buf_t *dst, size_t dst_off, size_t bytes);
    /* Optional: bytes of device memory free now (NULL: the backend uses host memory). */
    int64_t (*mem_free)(sw_backend_t *be);
    /* The members below came with Gemma 3 and the mixture-of-experts family
     * (the CPU and CUDA backends have them); a backend that leaves them NULL /
     * 0 gets those architectures refused at load with one line. */
    /* Optional (Gemma 3): x[i] *= s over n elements f32, as ggml_scale. */
    int (*scale)(sw_backend_t *be, sw_buf_t *x, size_t n, float s);
    /* Optional (Gemma 3): gate[i] = gelu(gate[i]) * up[i] over n elements f32 as
     * GGML's CPU computes GEGLU: 0 at or below -10, gate[i] * up[i] at or above
     * 10, else GGML's f16 GELU table (sw_gelu_f16_table()) at the f16 value of
     * gate[i], times up[i]. */
    int (*geglu)(sw_backend_t *be, sw_buf_t *gate, const sw_buf_t *up, size_t n);
    /* Optional: a mixture-of-experts feed-forward block (sw_moe_args_t). */
    int (*moe)(sw_backend_t *be, const sw_moe_args_t *a);
    /* 1: attention honours sw_attn_args_t.swa (sliding windows); 0: the model refuses
     * architectures with sliding-window layers on this backend. */
    int attn_swa;
    /* Optional (growing KV caches, kv.c): copies rows strided bytes of src
     * (from src_off, src_pitch apart) to dst (from dst_off, dst_pitch apart),
     * both on be; NULL = kv.c copies through the host. */
    int (*copy2d)(sw_backend_t *be, sw_buf_t *dst, size_t dst_off, size_t dst_pitch,
                  const sw_buf_t *src, size_t src_off, size_t src_pitch, size_t width, int rows);
    /* 1: attention and kv_move take q8_0 caches (sw_attn_args_t.kv_q8); 0: the
     * model refuses SW_KV_Q8_0 on this backend. */
    int attn_q8_0;
} sw_backend_ops_t;

#define SW_BACKEND_MAX_DEVICES 8 // members of one backend group

struct sw_backend {
    const sw_backend_ops_t *ops; // the implementation; NULL for a group
    void *impl;                  // its state
    char name[64];               // "cpu", "cuda:0", "cuda:0,1": what PeerAnnounce carries
    char desc[128];              // "cuda:0 (Tesla T4, 15 GiB)", "cpu (4 threads, avx2)"
    char err[256];               // the last error, one line
    int fatal;                   // 1 after an error the device cannot recover from (CUDA's
                                 // sticky errors, 700 and the like): every later call fails
    int max_rows;                // most rows one forward chunk should hold
    /* A group ("cuda:0,1"): the devices a model's layer range is split over,
     * in order. n_members is 0 for a single backend. */
    int n_members;
    sw_backend_t *members[SW_BACKEND_MAX_DEVICES];
};

/* ---- helpers (backend_impl.c) ---- */

/* Records an error on be (printf style) and returns -1, for implementations. */
int sw_backend_fail(sw_backend_t *be, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The rope table: for positions [0, n_pos) and pairs i in [0, n_rot / 2),
 * cs[(p * n_rot / 2 + i) * 2 + {0, 1}] = {cos, sin} of p * base^(-2i/n_rot) *
 * freq_scale, the angle built by repeated multiplication as GGML does. */
void sw_rope_table(float *cs, int n_pos, int n_rot, float freq_base, float freq_scale);
/* The same with per-pair frequency factors ff (n_rot / 2, or NULL = all 1):
 * the angle of pair i is freq_scale * (theta_i / ff[i]), as GGML's rope with
 * freq_factors (Llama 3.1/3.2's rope_freqs) computes it. */
void sw_rope_table_ff(float *cs, int n_pos, int n_rot, float freq_base, float freq_scale,
                      const float *ff);
/* GGML's f16 GELU table: for every f16 bit pattern h, the f16 of
 * 0.5x(1 + tanh(sqrt(2/pi) x (1 + 0.044715 x^2))) at x = h, computed as the
 * CPU backend of llama.cpp computes it at start-up. Filled once (thread-safe),
 * 65536 entries, never freed. */
const sw_f16 *sw_gelu_f16_table(void);

#ifdef __cplusplus
}
#endif

#endif
