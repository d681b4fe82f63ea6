/*
 * model_impl.h - what the model's files share, private to them: the layer
 * weights, each device's activation buffers, struct sw_model and struct
 * sw_kv, and three helpers. model_load.c fills a sw_model_t from a GGUF
 * file, kv.c makes and edits the KV cache, forward.c runs the forward pass
 * over both; users see only model.h and kv.h.
 *
 * Ownership: a sw_model_t owns its layers, its devices' buffers, the weight
 * buffers in owned[] and the GGUF mapping (sw_model_free); a sw_kv_t owns
 * its per-layer caches and metadata (sw_kv_free). Neither owns a backend.
 */
#ifndef SW_MODEL_IMPL_H
#define SW_MODEL_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "backend_impl.h"
#include "kv.h"
#include "model.h"

typedef struct sw_layer {
    int dev;                  // index of the device (m->devs) holding this layer
    sw_buf_t *attn_norm;      // (n_embd) f32
    sw_weight_t wq;           // (n_head * head_dim, n_embd)
    sw_weight_t wk;           // (n_kv_head * head_dim, n_embd)
    sw_weight_t wv;           // (n_kv_head * head_dim, n_embd)
    sw_weight_t wo;           // (n_embd, n_head * head_dim)
    sw_buf_t *bq;             // (n_head * head_dim) f32 or NULL (Qwen2 has QKV bias)
    sw_buf_t *bk;             // (n_kv_head * head_dim) f32 or NULL
    sw_buf_t *bv;             // (n_kv_head * head_dim) f32 or NULL
    sw_buf_t *q_norm;         // (head_dim) f32 or NULL (Qwen3, Gemma 3)
    sw_buf_t *k_norm;         // (head_dim) f32 or NULL
    sw_buf_t *attn_post_norm; // (n_embd) f32 or NULL: Gemma 3 norms the attention output
    sw_buf_t *ffn_norm;       // (n_embd) f32
    sw_buf_t *ffn_post_norm;  // (n_embd) f32 or NULL: and the feed-forward output
    sw_weight_t w_gate;       // (n_ff, n_embd), dense layers
    sw_weight_t w_up;         // (n_ff, n_embd)
    sw_weight_t w_down;       // (n_embd, n_ff)
    sw_weight_t router;       // (n_expert, n_embd) f32, mixture-of-experts layers
    sw_weight_t gate_exps;    // (n_expert, n_ff_exp, n_embd): n_expert matrices in a row
    sw_weight_t up_exps;      // (n_expert, n_ff_exp, n_embd)
    sw_weight_t down_exps;    // (n_expert, n_embd, n_ff_exp)
    int swa;                  // 1: a sliding-window layer (hp.n_swa; its own rope base)
} sw_layer_t;

/* Most greedy steps one sw_model_greedy_steps() call runs. */
#define SW_MODEL_LOOP_MAX 64
/* Most sessions whose rows share one forward chunk. */
#define SW_MODEL_MAX_PIECES 64

/* One device of the model and the buffers its layers compute in. */
typedef struct sw_dev {
    sw_backend_t *be;   // the device's backend (not owned)
    int l0, l1;         // its layers: m->layers[l0, l1)
    sw_buf_t *x;        // (B, n_embd) residual stream
    sw_buf_t *xn;       // (B, n_embd) normed
    sw_buf_t *q;        // (B, n_head * head_dim)
    sw_buf_t *k;        // (B, n_kv_head * head_dim)
    sw_buf_t *v;        // (B, n_kv_head * head_dim)
    sw_buf_t *att;      // (B, n_head * head_dim)
    sw_buf_t *tmp;      // (B, n_embd)
    sw_buf_t *gate;     // (B, n_ff)
    sw_buf_t *up;       // (B, n_ff)
    sw_buf_t *logits;   // (LB, n_vocab), the last device of the last stage
    sw_buf_t *ctl;      // SW_CTL_CAP(B) int32: the chunk's row control block
    sw_buf_t *rope;     // (rope_n, n_rot) f32 cos/sin table
    sw_buf_t *rope_swa; // (rope_n, n_rot) f32 the sliding-window layers' table, or NULL
    sw_buf_t *loop_ctl; // (SW_MODEL_LOOP_MAX, SW_CTL_LEN(1)) int32, one block per step
    sw_buf_t *loop_step[SW_MODEL_LOOP_MAX]; // views of loop_ctl, one per step
    sw_buf_t *loop_ids;                     // (SW_MODEL_LOOP_MAX) int32 argmax of each step
    sw_buf_t *loop_prob;                    // (SW_MODEL_LOOP_MAX) f32 its probability
    sw_buf_t *pctl; // (SW_MODEL_MAX_PIECES, SW_CTL_CAP(B)) int32: a control block per
                    // session of a chunk that holds rows of several (NULL until
                    // the first such chunk)
    sw_buf_t *pctl_v[SW_MODEL_MAX_PIECES]; // views of pctl, one per block
} sw_dev_t;

/* A buffer the model made and frees. */
typedef struct sw_owned {
    sw_backend_t *be;
    sw_buf_t *buf;
} sw_owned_t;

struct sw_model {
    sw_gguf_t *gguf;       // owns the mapping (the parts' mappings of a split set)
    char fingerprint[65];  // sw_model_fingerprint, computed at load
    sw_backend_t *be;      // what the model was loaded on (a group or one device); not owned
    sw_hparams_t hp;       // hyper-parameters
    int begin, end;        // layer range [begin, end)
    sw_layer_t *layers;    // (end - begin)
    sw_weight_t tok_embd;  // (n_vocab, n_embd), first stage, on the first device
    sw_buf_t *out_norm;    // (n_embd) f32, last stage, on the last device
    sw_weight_t output;    // (n_vocab, n_embd), last stage (may share tok_embd's buffer)
    uint64_t weight_bytes; // bytes of the tensors this range uses
    int n_dev;             // devices the range is split over
    sw_dev_t devs[SW_BACKEND_MAX_DEVICES]; // (n_dev) in layer order
    int batch;                             // B: rows per forward chunk
    int logit_rows;                        // LB: rows of the logits buffer
    int rope_n;                            // positions the rope tables cover
    int kv_type;                           // sw_kv_type_t of the caches made for it (kv.h)
    float *rope_freqs;                     // (n_rot / 2) rope frequency factors, or NULL
    int32_t *ctl_host;      // (SW_CTL_CAP(B) + SW_MODEL_LOOP_MAX * SW_CTL_LEN(1)) staging
    float *gather_host;     // (B, n_embd) staging of a shared chunk's LM-head rows, or NULL
    sw_owned_t *owned;      // (n_owned) weight and norm buffers
    int n_owned, cap_owned; //
};

struct sw_kv {
    sw_model_t *m; // owner model
    int n_ctx;     // positions the cache may reach (its context)
    int cap;       // positions allocated: the stride of the buffers below (<= n_ctx)
    int len;       // positions filled
    int lin;       // slots [0, lin) are a plain sequence (slot s under s - 1, at position s)
    int fwd_plain; // during a forward call: 1 when its rows continue the plain sequence
    int type;      // sw_kv_type_t, the model's when the cache was made
    int32_t *par;  // (cap) parent slot of each slot, -1 = none (token trees)
    int32_t *pos;  // (cap) position of each slot (rope): its parent's + 1
    sw_buf_t **k;  // (n_layers) each (cap, n_kv_head * head_dim) f16, or (cap) q8_0 rows of
                   // n_kv_head * head_dim, on its layer's device; NULL while cap is 0
    sw_buf_t **v;  // (n_layers) each (n_kv_head * head_dim, cap) f16, or q8_0 rows as k
    int n_layers;  // end - begin
    size_t bytes;  // bytes of k and v allocated now
    sw_kv_budget_t *budget; // counts bytes (not owned), or NULL
};

/* Frees *b on be when set and NULLs it (model_load.c). */
void sw_model_buf_free(sw_backend_t *be, sw_buf_t **b);
/* Writes "model: <backend>: <its error>" to err; returns -1 (model_load.c). */
int sw_model_fail(sw_backend_t *be, char *err, size_t err_len);
/* Extends kv->lin over the slots that continue the plain sequence (kv.c). */
void sw_kv_relin(sw_kv_t *kv);

#endif
