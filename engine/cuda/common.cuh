/*
 * common.cuh - what every file of the CUDA backend shares: the buffer and
 * backend state, error checking and scratch memory (context.cu), and the
 * launchers of each operation (one <op>.cu per kind of operation, declared
 * here), which backend_cuda.cu puts in its table.
 *
 * Ownership: a swc_buf belongs to the sw_buf_t it is (freed by buf_free);
 * the scratch areas, the cuBLAS handle and the recorded graphs belong to the
 * swc of one backend and are freed with it (backend_cuda.cu's destroy).
 *
 * Every CUDA call is checked; a failure is recorded on the backend
 * (sw_backend_fail) and the operation returns -1, which the model turns into
 * a request error. Kernel launches are checked with cudaGetLastError; errors
 * of queued work surface at the next synchronising call (download, sync).
 *
 * All work of one backend goes to its one stream, in order. The current
 * device is per thread in CUDA, so every entry point first selects the
 * backend's device (two backends may share a thread: a node on cuda:0 with
 * its draft model on cuda:1).
 */
#ifndef SW_CUDA_COMMON_CUH
#define SW_CUDA_COMMON_CUH

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include "backend_impl.h"
#include "log.h"
#include "op_math.h"
#include "quant_math.h"

/* A device buffer (sw_buf_t is opaque; the CUDA backend's are these). */
typedef struct swc_buf {
    char *d;      // device pointer
    size_t bytes; // size
    int owned;    // 1 = cudaFree with the buffer (0 for a view)
} swc_buf;

static inline swc_buf *swc_b(const sw_buf_t *b)
{
    return (swc_buf *)(void *)b;
}

template <typename T> static inline T *swc_ptr(const sw_buf_t *b)
{
    return (T *)(void *)((swc_buf *)(void *)b)->d;
}

/* Scratch areas, each grown on demand (never inside a graph capture). */
enum swc_scratch_id {
    SWC_SCRATCH_XQ = 0,   // quantized matmul inputs
    SWC_SCRATCH_ATTN = 1, // attention scores, probabilities, group sums
    SWC_SCRATCH_GEMM = 2, // the prompt path's f16 weight tile and inputs
    SWC_SCRATCH_MOE = 3,  // a mixture of experts' routing, plan and expert rows (moe.cu)
    SWC_SCRATCH_COUNT
};

#define SWC_MAX_GRAPHS 48 // recorded graphs kept per backend (least recently used dropped)
#define SWC_KV_TAB 4096   // attention calls one recorded step may make

typedef struct swc_graph {
    uint64_t key;         // 0 = free slot
    int state;            // 1 = seen once, 2 = recorded, -1 = never record this key
    cudaGraphExec_t exec; // when recorded
    uint64_t last_use;    // for eviction
    int kv_n;             // attention calls of its step (entries of the cache table)
} swc_graph;

typedef struct swc_peer swc_peer;

typedef struct swc {
    int dev;                          // CUDA device ordinal
    cudaStream_t stream;              // every operation's stream
    void *cublas;                     // cublasHandle_t, made on first use
    void *scratch[SWC_SCRATCH_COUNT]; // device scratch areas
    size_t scratch_bytes[SWC_SCRATCH_COUNT];
    void *pinned; // host staging for downloads
    size_t pinned_bytes;
    swc_graph graphs[SWC_MAX_GRAPHS]; // recorded steps
    uint64_t use_clock;               // graph LRU clock
    int recording;                    // 1 while a stream capture is open
    int capture_broken;               // an op could not run inside the capture
    int use_graphs;                   // SW_CUDA_GRAPHS=0 turns recording off
    int seq_sums;                     // SW_CUDA_SEQ_SUMS=1: always the left-to-right sums
    int gemm_rows;                    // prompt chunks above this many rows use cuBLAS (0 = never)
    int gemm_warned;                  // said once that cuBLAS is missing
    int nccl;                         // 1 = NCCL between devices (SW_NCCL=0 turns it off)
    swc_peer *peers;                  // links to other devices (transfer)
    int sm_count;                     // multiprocessors
    size_t mem_total;                 // device memory
    size_t attn_scratch_max;          // attention's scratch for one pass of rows (SW_CUDA_ATTN_MIB)
    /* A recorded step reads the KV caches of its attention calls from a table
     * that is refreshed before every launch, so that one graph serves every
     * session (backend_cuda.cu, graphs). */
    int in_graph;     // 1 while recording: attention takes its caches from kv_dev
    void **kv_host;   // (SWC_KV_TAB, 2) K and V cache addresses, in call order
    void **kv_dev;    // the same on the device
    int kv_n;         // entries of the step being recorded or dry-run
    int dry;          // 1 during a dry run: a kernel launched then is a missing dry operation
    cudaError_t dead; // a sticky error (700 and the like): the context is lost, every call fails
    sw_f16 *gelu;     // (65536) GGML's f16 GELU table on the device (GEGLU), made on first use
    /* What ran (sw_cuda_paths). */
    uint64_t n_gemm, n_nccl, n_peer, n_recorded, n_replayed;
} swc;

static inline swc *swc_of(sw_backend_t *be)
{
    return (swc *)be->impl;
}

/* Checks a CUDA runtime call; on failure records it on be and returns -1. */
#define SWC_CHECK(be, call)                                                                        \
    do {                                                                                           \
        cudaError_t swc_e_ = (call);                                                               \
        if (swc_e_ != cudaSuccess)                                                                 \
            return swc_fail_cuda((be), #call, swc_e_);                                             \
    } while (0)

/* ---- helpers (context.cu) ---- */

/* Records "cuda:N: what: error" on be and clears the thread's last CUDA
 * error (it is reported here, not by the next launch); returns -1. A sticky
 * error (swc_sticky) marks the backend failed for good (be->fatal): the
 * GPU's context is lost, so every later entry point fails at once with it. */
int swc_fail_cuda(sw_backend_t *be, const char *what, cudaError_t e);
/* 1 for the errors after which CUDA fails every later call of the process on
 * that device (CUDA runtime API, cudaError: "the process must be terminated
 * and relaunched"): an illegal address, a launch timeout, a device assert, a
 * hardware stack error, an illegal or misaligned instruction or address, an
 * invalid PC, a launch failure. */
static inline int swc_sticky(cudaError_t e)
{
    return e == 700 || e == 702 || e == 710 || (e >= 714 && e <= 719);
}
/* Selects be's device for the calling thread, as every entry point does
 * first (the current device is per thread, and two backends may share one);
 * fails at once on a backend whose GPU failed for good. 0 or -1. */
int swc_use(sw_backend_t *be);
/* After a kernel launch: 0, or -1 with the launch error recorded. */
int swc_launched(sw_backend_t *be, const char *kernel);
/* Makes scratch area id at least bytes long; *out is its device pointer. Growing
 * forgets recorded graphs (they point at the old area); inside a capture it
 * marks the capture broken and fails. 0 or -1. */
int swc_scratch(sw_backend_t *be, enum swc_scratch_id id, size_t bytes, void **out);
/* Forgets every recorded graph. */
void swc_graphs_reset(sw_backend_t *be);
/* Blocks (threads) for n items of `threads` each, at least 1. */
static inline unsigned swc_blocks(int64_t n, int threads)
{
    return (unsigned)(n <= 0 ? 1 : (n + threads - 1) / threads);
}

/* ---- operations (one file each) ---- */

/* getrows.cu */
int swc_get_rows(sw_backend_t *be, const sw_weight_t *emb, const sw_buf_t *ctl, int n,
                 sw_buf_t *out);
/* norm.cu */
int swc_rmsnorm(sw_backend_t *be, const sw_buf_t *x, const sw_buf_t *w, int n, int dim, float eps,
                sw_buf_t *out);
int swc_head_norm(sw_backend_t *be, sw_buf_t *x, int n, int n_heads, int head_dim,
                  const sw_buf_t *w, float eps);
/* rope.cu */
int swc_rope(sw_backend_t *be, sw_buf_t *x, const sw_buf_t *ctl, int n, int n_heads, int head_dim,
             int n_rot, const sw_buf_t *cs, int neox);
/* attention.cu */
int swc_attention(sw_backend_t *be, const sw_attn_args_t *a);
int swc_kv_move(sw_backend_t *be, sw_buf_t *k_cache, sw_buf_t *v_cache, int n_ctx, int kv_dim,
                const int32_t *src, const int32_t *dst, int n);
int swc_copy2d(sw_backend_t *be, sw_buf_t *dst, size_t dst_off, size_t dst_pitch,
               const sw_buf_t *src, size_t src_off, size_t src_pitch, size_t width, int rows);
/* elementwise.cu */
int swc_add(sw_backend_t *be, sw_buf_t *x, const sw_buf_t *y, size_t n);
int swc_swiglu(sw_backend_t *be, sw_buf_t *gate, const sw_buf_t *up, size_t n);
int swc_scale(sw_backend_t *be, sw_buf_t *x, size_t n, float v);
int swc_geglu(sw_backend_t *be, sw_buf_t *gate, const sw_buf_t *up, size_t n);
/* argmax.cu */
int swc_argmax(sw_backend_t *be, const sw_buf_t *x, int dim, sw_buf_t *tok, size_t tok_off,
               sw_buf_t *ids, sw_buf_t *prob, size_t ids_off);
/* mmv.cu: the exact matmul (quantized activations, one lane per thread) */
int swc_matmul(sw_backend_t *be, int n_w, const sw_weight_t *const *w, const sw_buf_t *const *bias,
               const sw_buf_t *x, int x_row0, int n, sw_buf_t *const *y, int flags);
/* mmv.cu: n rows of x (n_in f32 each) quantized to vt, row r at xq + r * stride. */
int swc_quantize(sw_backend_t *be, enum sw_type vt, const float *x, int64_t n_in, int n,
                 uint8_t *xq, size_t stride);
/* The plan of a gathered expert matmul (moe.cu writes it on the device):
 * plan[0] = chunks, then from plan[SWC_PLAN_HEAD] per chunk SWC_PLAN_CHUNK
 * int32 {expert, first entry of order, rows (1..8), tiled (0/1)}; order
 * holds (row, slot) pair ids grouped by expert. */
#define SWC_PLAN_HEAD 4
#define SWC_PLAN_CHUNK 4
/* mmv.cu: y[p] = W_e . x[p / x_div] for every pair p (y rows of w->n_out f32),
 * e the pair's expert: quantized experts by the plan's chunks (grid of
 * max_chunks, the plan's bound), float experts by sel[p] (n_pairs). xq holds
 * x quantized to w's vec-dot type, rows xs bytes apart. 0 or -1. */
int swc_matmul_experts(sw_backend_t *be, const sw_weight_t *w, const uint8_t *xq, size_t xs,
                       int x_div, int n_pairs, const int32_t *plan, const int32_t *order,
                       const int32_t *sel, int max_chunks, float *y);
/* moe.cu: the mixture-of-experts feed-forward block (sw_moe_args_t) */
int swc_moe(sw_backend_t *be, const sw_moe_args_t *a);
/* gemm.cu: the prompt path (f16 weight tiles and cuBLAS) for one weight; -2 when
 * cuBLAS is not installed (then nothing was queued: use the exact kernels) */
int swc_gemm(sw_backend_t *be, const sw_weight_t *w, const sw_buf_t *bias, const float *x, int n,
             float *y);
void swc_gemm_free(swc *c);

#endif
