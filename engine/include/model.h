/*
 * model.h - a transformer (Llama 2/3.x and Mistral, Qwen2, Qwen3, Gemma 3 and
 * the Qwen3 mixture-of-experts families) restricted to a contiguous layer
 * range [begin, end) of a GGUF file, and its KV cache.
 *
 * The stage that holds layer 0 embeds tokens; the stage that holds the last
 * layer applies the final norm and the LM head and produces logits. A stage
 * in the middle maps hidden states to hidden states. Loading a range touches
 * only that range's tensors (plus the embeddings for the first stage and the
 * final norm and LM head for the last), so a process holds only its share of
 * the weights in memory. A stage that holds a layer of a mixture-of-experts
 * model holds all of that layer's experts (any token may be routed to any of
 * them), so its share of the weights is its layers' share of all experts.
 *
 * The KV cache's functions are in kv.h (included here). The code: loading in
 * model_load.c, the cache in kv.c, the forward pass in forward.c.
 *
 * Ownership: sw_model_t owns its GGUF mapping and backend buffers but not the
 * backend, which must outlive it. A sw_kv_t belongs to one model and must be
 * freed before it.
 */
#ifndef SW_MODEL_H
#define SW_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "gguf.h"
#include "kv.h"
#include "sw_limits.h"

enum sw_arch {
    SW_ARCH_LLAMA = 0,
    SW_ARCH_QWEN2 = 1,
    SW_ARCH_QWEN3 = 2,
    SW_ARCH_GEMMA3 = 3,   // post-norms, GELU, sliding-window layers, scaled embeddings
    SW_ARCH_QWEN3MOE = 4, // Qwen3 attention, mixture-of-experts feed-forward
};

typedef struct sw_hparams {
    enum sw_arch arch;     // model family
    char arch_name[32];    // general.architecture
    int n_layer;           // layers of the whole model
    int n_embd;            // hidden size
    int n_ff;              // feed-forward size
    int n_head;            // query heads
    int n_kv_head;         // key/value heads
    int head_dim;          // elements per head
    int n_rot;             // rotary dimensions per head
    int n_vocab;           // rows of the embedding / LM head
    int n_ctx_train;       // context length the model was trained with
    float rms_eps;         // RMS norm epsilon
    float rope_base;       // rope.freq_base
    float rope_freq_scale; // 1 / linear rope scaling factor
    int rope_neox;         // 1 = rotate halves (Qwen, Gemma), 0 = adjacent pairs (Llama)
    int rope_freqs;        // 1: per-dimension frequency factors (rope_freqs.weight, the
                           // llama3 scaling of Llama 3.1/3.2) divide each angle
    int n_swa;             // sliding window of the local layers (Gemma 3), 0 = none
    float rope_base_swa;   // rope.freq_base of the sliding-window layers
    float embd_scale;      // token embeddings are multiplied by this (Gemma 3), 0 = not
    float q_scale;         // queries are multiplied by this before attention, which then
                           // scales by 1 (Gemma 3); 0 = attention scales by 1/sqrt(head_dim)
    int n_expert;          // experts per layer (mixture of experts), 0 = a dense FFN
    int n_expert_used;     // experts each token is routed to
    int n_ff_exp;          // feed-forward size of one expert
} sw_hparams_t;

typedef struct sw_model sw_model_t;
typedef struct sw_kv sw_kv_t;

/* Most rows one forward call processes internally at once when a backend
 * does not say (sw_backend_t.max_rows: the CPU and CUDA backends take a whole
 * prompt window, SW_MODEL_PROMPT_WINDOW); longer inputs are split into chunks
 * of that size (results do not depend on the split). Also the most rows of
 * logits one LM-head call computes. */
#define SW_MODEL_BATCH 64

/* A prompt is evaluated in windows of SW_MODEL_PROMPT_WINDOW rows from its
 * start (sw_limits.h, where the wire's SW_WIRE_MAX_ROWS is defined from it),
 * as llama.cpp evaluates a prompt in micro-batches of its default n_ubatch:
 * the reduction order of a prompt row depends on how many rows its window
 * holds (2 or more: the batched attention order; 8 or more: also the tiled
 * K-quant matmul order, sw_matmul_tiled). A stage that receives a prompt in
 * Forwards of at most this many rows therefore computes what one process
 * computes. */

/* Opens path and loads layers [layer_begin, layer_end) (layer_end = -1: to the
 * last layer) onto be; on a backend group the layers are split evenly over
 * its devices, in order. path may be any part of a split set (gguf.h): the
 * range maps only the parts holding its tensors. NULL with a one-line reason
 * in err on failure. */
sw_model_t *sw_model_load(const char *path, int layer_begin, int layer_end, sw_backend_t *be,
                          char *err, size_t err_len) __attribute__((warn_unused_result));
/* Accepts NULL and NULLs the caller's pointer. */
void sw_model_free(sw_model_t **self_p);

const sw_hparams_t *sw_model_hparams(const sw_model_t *m);
const sw_gguf_t *sw_model_gguf(const sw_model_t *m);
int sw_model_layer_begin(const sw_model_t *m);
int sw_model_layer_end(const sw_model_t *m);
int sw_model_is_first(const sw_model_t *m);
int sw_model_is_last(const sw_model_t *m);
/* The model's identity, the same on every stage whatever its range: sha256
 * over the GGUF header (metadata and tensor table) and the first MiB of
 * tensor data, as 64 lower-case hex digits and a NUL; for a split set over
 * every part's header and the first MiB of the first part's data, whichever
 * part the set was opened from (partial.h, sw_fingerprint_of). Computed at
 * load. */
void sw_model_fingerprint(const sw_model_t *m, char out[65]);
/* Bytes of weights this range uses (what it keeps resident). */
uint64_t sw_model_weight_bytes(const sw_model_t *m);
/* Bytes of weights one decoding step reads (all but the embedding rows not
 * looked up): the numerator of achieved memory bandwidth. */
uint64_t sw_model_bytes_per_token(const sw_model_t *m);
/* The backend the model was loaded on. */
sw_backend_t *sw_model_backend(const sw_model_t *m);

/* Reads every page of this range's weights so that the first forward does
 * not fault them in; calls progress(done, total, ctx) now and then (may be
 * NULL). Nothing to do when the weights were copied to a device at load. */
void sw_model_prefault(sw_model_t *m, void (*progress)(uint64_t done, uint64_t total, void *ctx),
                       void *ctx);

/* 1 when the model's backends run token trees (every device has kv_move). */
int sw_model_trees(const sw_model_t *m);

/* One forward pass over n rows appended at positions [len, len + n).
 * Input: tokens (first stage) or hidden states (n, n_embd) f32 (other stages).
 * Output: the last stage writes logits of the last n_logits rows into logits
 * (n_logits, n_vocab) f32; other stages write hidden (n, n_embd) f32.
 * Returns 0, or -1 with a one-line reason in err (bad token id, cache full,
 * bad sizes); on error the cache is left as it was. */
typedef struct sw_forward {
    int n;                 // rows
    const int32_t *tokens; // (n) token ids, first stage only
    const float *hidden;   // (n, n_embd) input hidden states, other stages
    float *out_hidden;     // (n, n_embd) output, non-last stages
    float *logits;         // (n_logits, n_vocab) output, last stage
    int n_logits;          // 0..n: logits for the last n_logits rows
    int prompt;            // 1: the rows are a prompt (no drafts). llama.cpp reduces
                           // attention in another order when it evaluates two or more
                           // prompt tokens at once; with prompt = 1 and n >= 2 this
                           // engine does the same, so that greedy tokens match
                           // llama.cpp's. Decode and verification rows (prompt = 0)
                           // always use the one-token order: a row's result is then
                           // the same alone or in a batch of any size.
    const int32_t *parent; // (n) NULL: a sequence (row r follows the slot before it). Else
                           // token tree rows (prompt = 0): row r, stored at slot len + r,
                           // hangs under slot parent[r] (a cached slot or an earlier row
                           // of the call), or -1. Its position is its parent's + 1 and it
                           // attends to its ancestors only, so its result is bit-identical
                           // to the same path evaluated as a sequence. The backend must
                           // support trees (kv_move, backend_impl.h).
    int prompt_cont;       // prompt rows only: 1 = they continue a prompt that starts at
                           // position 0 of the cache, whose first rows are cached (a prefix
                           // restored by engine/include/prefix.h, or an earlier window): windows
                           // are counted from position 0 and a window's rows before the
                           // call count in it, so each row computes what it computes in
                           // the whole prompt evaluated at once (the call must end at a
                           // window's end or at the prompt's). 0: windows from the call's
                           // first row.
} sw_forward_t;

int sw_model_forward(sw_model_t *m, sw_kv_t *kv, const sw_forward_t *f, char *err, size_t err_len)
    __attribute__((warn_unused_result));

/* One forward pass over the rows of several sessions at once (a stage that
 * serves many users): fs[s] are session s's rows, appended to its own cache
 * kvs[s] (n_seg distinct caches), with its own positions, outputs and prompt
 * flag, exactly as n_seg sw_model_forward calls would; every session's
 * results are bit-identical to running it alone (each row is computed on its
 * own; only attention is per session, and a prompt of two rows or more is
 * cut into chunks on its own, as alone). Decode and verification rows of
 * different sessions share chunks, so each weight is read once for all of
 * them. 0, or -1 with err (then no cache's length changed). */
int sw_model_forward_batch(sw_model_t *m, sw_kv_t *const *kvs, const sw_forward_t *fs, int n_seg,
                           char *err, size_t err_len) __attribute__((warn_unused_result));

/* Greedy decoding steps that stay on the backend (a draft model's K-token
 * loop): appends token tok at the end of the cache, then n_steps - 1 times
 * the argmax of the last row's logits. out[i] is the argmax after step i and
 * prob[i] (prob may be NULL) its softmax probability at temperature 1; the cache grows by
 * n_steps rows. The logits are those of n_steps one-row forward calls (the
 * argmax is the first largest logit, as sw_sampler_argmax() without a
 * repetition penalty). A device backend records the whole loop as one graph
 * and copies only the n_steps tokens and probabilities back. The model must
 * hold every layer on one device; n_steps <= 64. 0, or -1 with err (then
 * the cache length is unchanged). */
int sw_model_greedy_steps(sw_model_t *m, sw_kv_t *kv, int32_t tok, int n_steps, int32_t *out,
                          float *prob, char *err, size_t err_len)
    __attribute__((warn_unused_result));

#endif
