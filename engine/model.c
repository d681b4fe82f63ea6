/*
 * model.c - loading a layer range of a Llama/Qwen-family GGUF and running the
 * transformer forward pass over it on a backend.
 *
 * Every tensor the range needs is looked up by name and its type and shape
 * are checked against the hyper-parameters before anything runs, so that a
 * forward pass can trust them. A forward call processes its rows in chunks
 * (the backend's max_rows); each op computes rows independently, so the split
 * does not change any value.
 *
 * On a backend group (several GPUs in one process) the range's layers are
 * split into consecutive runs, one per device, in order: each device holds
 * its layers' weights and KV cache and its own activation buffers, and the
 * hidden states of a chunk move from one device to the next after its run.
 */
#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend_impl.h"
#include "log.h"
#include "sha256.h"

typedef struct s_layer {
    int dev;             // index of the device (m->devs) holding this layer
    sw_buf_t *attn_norm; // (n_embd) f32
    sw_weight_t wq;      // (n_head * head_dim, n_embd)
    sw_weight_t wk;      // (n_kv_head * head_dim, n_embd)
    sw_weight_t wv;      // (n_kv_head * head_dim, n_embd)
    sw_weight_t wo;      // (n_embd, n_head * head_dim)
    sw_buf_t *bq;        // (n_head * head_dim) f32 or NULL (Qwen2 has QKV bias)
    sw_buf_t *bk;        // (n_kv_head * head_dim) f32 or NULL
    sw_buf_t *bv;        // (n_kv_head * head_dim) f32 or NULL
    sw_buf_t *q_norm;    // (head_dim) f32 or NULL (Qwen3)
    sw_buf_t *k_norm;    // (head_dim) f32 or NULL
    sw_buf_t *ffn_norm;  // (n_embd) f32
    sw_weight_t w_gate;  // (n_ff, n_embd)
    sw_weight_t w_up;    // (n_ff, n_embd)
    sw_weight_t w_down;  // (n_embd, n_ff)
} s_layer_t;

/* Most greedy steps one sw_model_greedy_steps() call runs. */
#define S_LOOP_MAX 64
/* Most sessions whose rows share one forward chunk. */
#define S_MAX_PIECES 64

/* One device of the model and the buffers its layers compute in. */
typedef struct s_dev {
    sw_backend_t *be;                // the device's backend (not owned)
    int l0, l1;                      // its layers: m->layers[l0, l1)
    sw_buf_t *x;                     // (B, n_embd) residual stream
    sw_buf_t *xn;                    // (B, n_embd) normed
    sw_buf_t *q;                     // (B, n_head * head_dim)
    sw_buf_t *k;                     // (B, n_kv_head * head_dim)
    sw_buf_t *v;                     // (B, n_kv_head * head_dim)
    sw_buf_t *att;                   // (B, n_head * head_dim)
    sw_buf_t *tmp;                   // (B, n_embd)
    sw_buf_t *gate;                  // (B, n_ff)
    sw_buf_t *up;                    // (B, n_ff)
    sw_buf_t *logits;                // (LB, n_vocab), the last device of the last stage
    sw_buf_t *ctl;                   // SW_CTL_CAP(B) int32: the chunk's row control block
    sw_buf_t *rope;                  // (rope_n, n_rot) f32 cos/sin table
    sw_buf_t *loop_ctl;              // (S_LOOP_MAX, SW_CTL_LEN(1)) int32, one block per step
    sw_buf_t *loop_step[S_LOOP_MAX]; // views of loop_ctl, one per step
    sw_buf_t *loop_ids;              // (S_LOOP_MAX) int32 argmax of each step
    sw_buf_t *loop_prob;             // (S_LOOP_MAX) f32 its probability
    sw_buf_t *pctl;                  // (S_MAX_PIECES, SW_CTL_CAP(B)) int32: a control block per
                                     // session of a chunk that holds rows of several (NULL until
                                     // the first such chunk)
    sw_buf_t *pctl_v[S_MAX_PIECES];  // views of pctl, one per block
} s_dev_t;

/* A buffer the model made and frees. */
typedef struct s_owned {
    sw_backend_t *be;
    sw_buf_t *buf;
} s_owned_t;

struct sw_model {
    sw_gguf_t *gguf;       // owns the mapping
    sw_backend_t *be;      // what the model was loaded on (a group or one device); not owned
    sw_hparams_t hp;       // hyper-parameters
    int begin, end;        // layer range [begin, end)
    s_layer_t *layers;     // (end - begin)
    sw_weight_t tok_embd;  // (n_vocab, n_embd), first stage, on the first device
    sw_buf_t *out_norm;    // (n_embd) f32, last stage, on the last device
    sw_weight_t output;    // (n_vocab, n_embd), last stage (may share tok_embd's buffer)
    uint64_t weight_bytes; // bytes of the tensors this range uses
    int n_dev;             // devices the range is split over
    s_dev_t devs[SW_BACKEND_MAX_DEVICES]; // (n_dev) in layer order
    int batch;                            // B: rows per forward chunk
    int logit_rows;                       // LB: rows of the logits buffer
    int rope_n;                           // positions the rope tables cover
    int32_t *ctl_host;                    // (SW_CTL_CAP(B) + S_LOOP_MAX * SW_CTL_LEN(1)) staging
    float *gather_host;     // (B, n_embd) staging of a shared chunk's LM-head rows, or NULL
    s_owned_t *owned;       // (n_owned) weight and norm buffers
    int n_owned, cap_owned; //
};

struct sw_kv {
    sw_model_t *m; // owner model
    int n_ctx;     // capacity in positions
    int len;       // positions filled
    int lin;       // slots [0, lin) are a plain sequence (slot s under s - 1, at position s)
    int fwd_plain; // during a forward call: 1 when its rows continue the plain sequence
    int32_t *par;  // (n_ctx) parent slot of each slot, -1 = none (token trees)
    int32_t *pos;  // (n_ctx) position of each slot (rope): its parent's + 1
    sw_buf_t **k;  // (n_layers) each (n_ctx, n_kv_head * head_dim) f16, on its layer's device
    sw_buf_t **v;  // (n_layers) each (n_kv_head * head_dim, n_ctx) f16
    int n_layers;  // end - begin
};

/* ---- hyper-parameters ------------------------------------------------------------ */

static int s_get_int(const sw_gguf_t *g, const char *arch, const char *suffix, int *out, int dflt,
                     int required, char *err, size_t err_len)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    int64_t v;
    if (sw_gguf_get_i64(g, key, &v) != 0) {
        if (required) {
            sw_errf(err, err_len, "model: metadata key '%s' is missing", key);
            return -1;
        }
        *out = dflt;
        return 0;
    }
    if (v < 0 || v > (1 << 24)) {
        sw_errf(err, err_len, "model: metadata key '%s' = %lld is out of range", key, (long long)v);
        return -1;
    }
    *out = (int)v;
    return 0;
}

static float s_get_float(const sw_gguf_t *g, const char *arch, const char *suffix, float dflt)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    double v;
    return sw_gguf_get_f64(g, key, &v) == 0 ? (float)v : dflt;
}

static int s_load_hparams(const sw_gguf_t *g, sw_hparams_t *hp, char *err, size_t err_len)
{
    memset(hp, 0, sizeof *hp);
    sw_gguf_str_t a;
    if (sw_gguf_get_str(g, "general.architecture", &a) != 0) {
        sw_errf(err, err_len, "model: 'general.architecture' is missing: not a model GGUF?");
        return -1;
    }
    if (a.len >= sizeof hp->arch_name) {
        sw_errf(err, err_len, "model: architecture name is too long");
        return -1;
    }
    memcpy(hp->arch_name, a.ptr, a.len);
    hp->arch_name[a.len] = 0;
    const char *arch = hp->arch_name;
    if (!strcmp(arch, "llama") || !strcmp(arch, "mistral"))
        hp->arch = SW_ARCH_LLAMA;
    else if (!strcmp(arch, "qwen2"))
        hp->arch = SW_ARCH_QWEN2;
    else if (!strcmp(arch, "qwen3"))
        hp->arch = SW_ARCH_QWEN3;
    else {
        sw_errf(
            err, err_len,
            "model: architecture '%s' is not supported (supported: llama, mistral, qwen2, qwen3)",
            arch);
        return -1;
    }
    if (s_get_int(g, arch, "block_count", &hp->n_layer, 0, 1, err, err_len) ||
        s_get_int(g, arch, "embedding_length", &hp->n_embd, 0, 1, err, err_len) ||
        s_get_int(g, arch, "feed_forward_length", &hp->n_ff, 0, 1, err, err_len) ||
        s_get_int(g, arch, "attention.head_count", &hp->n_head, 0, 1, err, err_len) ||
        s_get_int(g, arch, "attention.head_count_kv", &hp->n_kv_head, hp->n_head, 0, err,
                  err_len) ||
        s_get_int(g, arch, "context_length", &hp->n_ctx_train, 4096, 0, err, err_len))
        return -1;
    if (hp->n_layer < 1 || hp->n_embd < 1 || hp->n_ff < 1 || hp->n_head < 1 || hp->n_kv_head < 1 ||
        hp->n_head % hp->n_kv_head != 0) {
        sw_errf(err, err_len,
                "model: inconsistent sizes (layers %d, embd %d, ff %d, heads %d, kv heads %d)",
                hp->n_layer, hp->n_embd, hp->n_ff, hp->n_head, hp->n_kv_head);
        return -1;
    }
    int dflt_hd = hp->n_embd / hp->n_head;
    if (s_get_int(g, arch, "attention.key_length", &hp->head_dim, dflt_hd, 0, err, err_len) ||
        s_get_int(g, arch, "rope.dimension_count", &hp->n_rot, hp->head_dim, 0, err, err_len))
        return -1;
    if (hp->head_dim < 2 || hp->head_dim > 1024 || hp->n_rot < 2 || hp->n_rot > hp->head_dim ||
        hp->n_rot % 2) {
        sw_errf(err, err_len, "model: head size %d / rotary dims %d are not supported",
                hp->head_dim, hp->n_rot);
        return -1;
    }
    hp->rms_eps = s_get_float(g, arch, "attention.layer_norm_rms_epsilon", 1e-5f);
    hp->rope_base = s_get_float(g, arch, "rope.freq_base", 10000.0f);
    hp->rope_freq_scale = 1.0f;
    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    sw_gguf_str_t st;
    if (sw_gguf_get_str(g, key, &st) == 0 && sw_gguf_str_eq(st, "linear")) {
        float f = s_get_float(g, arch, "rope.scaling.factor", 1.0f);
        if (f > 0)
            hp->rope_freq_scale = 1.0f / f;
    } else if (sw_gguf_get_str(g, key, &st) == 0 && !sw_gguf_str_eq(st, "none")) {
        sw_errf(err, err_len, "model: rope scaling '%.*s' is not supported", (int)st.len, st.ptr);
        return -1;
    }
    hp->rope_neox = hp->arch != SW_ARCH_LLAMA;
    if (!(hp->rms_eps > 0) || !(hp->rope_base > 0)) {
        sw_errf(err, err_len, "model: bad rms epsilon or rope base");
        return -1;
    }
    return 0;
}

/* ---- tensors ----------------------------------------------------------------------- */

static const sw_gguf_tensor_t *s_tensor(sw_model_t *m, const char *name, int required, char *err,
                                        size_t err_len)
{
    const sw_gguf_tensor_t *t = sw_gguf_find_tensor(m->gguf, name);
    if (!t && required)
        sw_errf(err, err_len, "model: tensor '%s' is missing from the file", name);
    return t;
}

/* A backend buffer holding bytes of the file (in place on the CPU), freed with the model. */
static sw_buf_t *s_weight_buf(sw_model_t *m, sw_backend_t *be, const char *name, const void *data,
                              uint64_t bytes, char *err, size_t err_len)
{
    if (m->n_owned == m->cap_owned) {
        int cap = m->cap_owned ? 2 * m->cap_owned : 64;
        s_owned_t *o = realloc(m->owned, (size_t)cap * sizeof *o);
        if (!o) {
            sw_errf(err, err_len, "model: out of memory");
            return NULL;
        }
        m->owned = o;
        m->cap_owned = cap;
    }
    sw_buf_t *b = be->ops->buf_weight(be, data, (size_t)bytes);
    if (!b) {
        sw_errf(err, err_len, "model: cannot place tensor '%s' (%llu bytes) on %s: %s", name,
                (unsigned long long)bytes, be->name, be->err[0] ? be->err : "out of device memory");
        return NULL;
    }
    m->owned[m->n_owned++] = (s_owned_t){be, b};
    return b;
}

/* A 1-D f32 tensor of n elements, placed on be. */
static int s_vec(sw_model_t *m, sw_backend_t *be, const char *name, int64_t n, int required,
                 sw_buf_t **out, char *err, size_t err_len)
{
    *out = NULL;
    const sw_gguf_tensor_t *t = s_tensor(m, name, required, err, err_len);
    if (!t)
        return required ? -1 : 0;
    if (t->type != SW_TYPE_F32 || t->n_elements != (uint64_t)n) {
        sw_errf(err, err_len, "model: tensor '%s' must be f32 with %lld elements (has %s, %llu)",
                name, (long long)n, sw_type_name(t->type), (unsigned long long)t->n_elements);
        return -1;
    }
    if ((uintptr_t)t->data % sizeof(float)) {
        sw_errf(err, err_len, "model: tensor '%s' is not 4-byte aligned", name);
        return -1;
    }
    *out = s_weight_buf(m, be, name, t->data, t->n_bytes, err, err_len);
    if (!*out)
        return -1;
    m->weight_bytes += t->n_bytes;
    return 0;
}

/* A 2-D weight of n_out rows by n_in columns, placed on be. */
static int s_mat(sw_model_t *m, sw_backend_t *be, const char *name, int64_t n_in, int64_t n_out,
                 int required, sw_weight_t *w, char *err, size_t err_len)
{
    memset(w, 0, sizeof *w);
    const sw_gguf_tensor_t *t = s_tensor(m, name, required, err, err_len);
    if (!t)
        return required ? -1 : 0;
    if (t->n_dims > 2 || t->ne[0] != n_in || t->ne[1] != n_out) {
        sw_errf(err, err_len, "model: tensor '%s' has shape [%lld, %lld], expected [%lld, %lld]",
                name, (long long)t->ne[0], (long long)t->ne[1], (long long)n_in, (long long)n_out);
        return -1;
    }
    if (!sw_type_supported(t->type) || t->type == SW_TYPE_Q8_1 || t->type == SW_TYPE_Q8_K) {
        sw_errf(err, err_len, "model: tensor '%s' has type %s, which shardwire cannot compute",
                name, sw_type_name(t->type));
        return -1;
    }
    uint64_t rb;
    if (sw_type_row_bytes(t->type, n_in, &rb) != 0) {
        sw_errf(err, err_len, "model: tensor '%s' rows do not fit its type", name);
        return -1;
    }
    w->type = t->type;
    w->n_in = n_in;
    w->n_out = n_out;
    w->row_bytes = (size_t)rb;
    w->host = t->data;
    w->buf = s_weight_buf(m, be, name, t->data, t->n_bytes, err, err_len);
    if (!w->buf)
        return -1;
    m->weight_bytes += t->n_bytes;
    return 0;
}

static int s_load_layer(sw_model_t *m, int il, s_layer_t *L, char *err, size_t err_len)
{
    const sw_hparams_t *hp = &m->hp;
    sw_backend_t *be = m->devs[L->dev].be;
    const int64_t q_dim = (int64_t)hp->n_head * hp->head_dim;
    const int64_t kv_dim = (int64_t)hp->n_kv_head * hp->head_dim;
    const int qk_norm = hp->arch == SW_ARCH_QWEN3;
    char n[96];
#define S_NAME(suffix) (snprintf(n, sizeof n, "blk.%d." suffix, il), n)
    if (s_vec(m, be, S_NAME("attn_norm.weight"), hp->n_embd, 1, &L->attn_norm, err, err_len) ||
        s_mat(m, be, S_NAME("attn_q.weight"), hp->n_embd, q_dim, 1, &L->wq, err, err_len) ||
        s_mat(m, be, S_NAME("attn_k.weight"), hp->n_embd, kv_dim, 1, &L->wk, err, err_len) ||
        s_mat(m, be, S_NAME("attn_v.weight"), hp->n_embd, kv_dim, 1, &L->wv, err, err_len) ||
        s_mat(m, be, S_NAME("attn_output.weight"), q_dim, hp->n_embd, 1, &L->wo, err, err_len) ||
        s_vec(m, be, S_NAME("attn_q.bias"), q_dim, 0, &L->bq, err, err_len) ||
        s_vec(m, be, S_NAME("attn_k.bias"), kv_dim, 0, &L->bk, err, err_len) ||
        s_vec(m, be, S_NAME("attn_v.bias"), kv_dim, 0, &L->bv, err, err_len) ||
        s_vec(m, be, S_NAME("attn_q_norm.weight"), hp->head_dim, qk_norm, &L->q_norm, err,
              err_len) ||
        s_vec(m, be, S_NAME("attn_k_norm.weight"), hp->head_dim, qk_norm, &L->k_norm, err,
              err_len) ||
        s_vec(m, be, S_NAME("ffn_norm.weight"), hp->n_embd, 1, &L->ffn_norm, err, err_len) ||
        s_mat(m, be, S_NAME("ffn_gate.weight"), hp->n_embd, hp->n_ff, 1, &L->w_gate, err,
              err_len) ||
        s_mat(m, be, S_NAME("ffn_up.weight"), hp->n_embd, hp->n_ff, 1, &L->w_up, err, err_len) ||
        s_mat(m, be, S_NAME("ffn_down.weight"), hp->n_ff, hp->n_embd, 1, &L->w_down, err, err_len))
        return -1;
#undef S_NAME
    if (hp->arch == SW_ARCH_QWEN2 && (!L->bq || !L->bk || !L->bv)) {
        sw_errf(err, err_len, "model: qwen2 layer %d lacks its q/k/v bias tensors", il);
        return -1;
    }
    if ((L->q_norm == NULL) != (L->k_norm == NULL)) {
        sw_errf(err, err_len, "model: layer %d has only one of the q/k norm tensors", il);
        return -1;
    }
    return 0;
}

static sw_buf_t *s_alloc(sw_backend_t *be, size_t n_floats)
{
    return be->ops->buf_alloc(be, n_floats * sizeof(float));
}

/* Activation buffers of device d. */
static int s_dev_buffers(sw_model_t *m, s_dev_t *d, int last, char *err, size_t err_len)
{
    const sw_hparams_t *hp = &m->hp;
    sw_backend_t *be = d->be;
    const size_t B = (size_t)m->batch;
    const size_t q_dim = (size_t)hp->n_head * hp->head_dim;
    const size_t kv_dim = (size_t)hp->n_kv_head * hp->head_dim;
    d->x = s_alloc(be, B * hp->n_embd);
    d->xn = s_alloc(be, B * hp->n_embd);
    d->q = s_alloc(be, B * q_dim);
    d->k = s_alloc(be, B * kv_dim);
    d->v = s_alloc(be, B * kv_dim);
    d->att = s_alloc(be, B * q_dim);
    d->tmp = s_alloc(be, B * hp->n_embd);
    d->gate = s_alloc(be, B * hp->n_ff);
    d->up = s_alloc(be, B * hp->n_ff);
    d->ctl = be->ops->buf_alloc(be, SW_CTL_CAP(B) * sizeof(int32_t));
    int ok =
        d->x && d->xn && d->q && d->k && d->v && d->att && d->tmp && d->gate && d->up && d->ctl;
    if (ok && last) {
        d->logits = s_alloc(be, (size_t)m->logit_rows * hp->n_vocab);
        d->loop_ctl = be->ops->buf_alloc(be, S_LOOP_MAX * SW_CTL_LEN(1) * sizeof(int32_t));
        d->loop_ids = be->ops->buf_alloc(be, S_LOOP_MAX * sizeof(int32_t));
        d->loop_prob = s_alloc(be, S_LOOP_MAX);
        ok = d->logits && d->loop_ctl && d->loop_ids && d->loop_prob;
        for (int i = 0; ok && i < S_LOOP_MAX; i++) {
            const size_t blk = SW_CTL_LEN(1) * sizeof(int32_t);
            d->loop_step[i] = be->ops->buf_view(be, d->loop_ctl, (size_t)i * blk, blk);
            ok = d->loop_step[i] != NULL;
        }
    }
    if (!ok) {
        sw_errf(err, err_len, "model: out of memory for activation buffers on %s", be->name);
        return -1;
    }
    return 0;
}

sw_model_t *sw_model_load(const char *path, int layer_begin, int layer_end, sw_backend_t *be,
                          char *err, size_t err_len)
{
    sw_model_t *m = calloc(1, sizeof *m);
    if (!m) {
        sw_errf(err, err_len, "model: out of memory");
        return NULL;
    }
    m->be = be;
    m->gguf = sw_gguf_open(path, err, err_len);
    if (!m->gguf)
        goto err;
    if (s_load_hparams(m->gguf, &m->hp, err, err_len) != 0)
        goto err;
    sw_hparams_t *hp = &m->hp;
    if (layer_end < 0)
        layer_end = hp->n_layer;
    if (layer_begin < 0 || layer_begin >= layer_end || layer_end > hp->n_layer) {
        sw_errf(err, err_len, "model: layer range %d:%d is invalid for a %d-layer model",
                layer_begin, layer_end, hp->n_layer);
        goto err;
    }
    m->begin = layer_begin;
    m->end = layer_end;

    /* The vocabulary size comes from the embedding matrix, which every
     * stage can read the header of without touching its data. */
    const sw_gguf_tensor_t *te = sw_gguf_find_tensor(m->gguf, "token_embd.weight");
    if (!te || te->n_dims != 2 || te->ne[0] != hp->n_embd || te->ne[1] < 1 ||
        te->ne[1] > (1 << 22)) {
        sw_errf(err, err_len, "model: tensor 'token_embd.weight' is missing or not [%d, n_vocab]",
                hp->n_embd);
        goto err;
    }
    hp->n_vocab = (int)te->ne[1];
    if (sw_gguf_find_tensor(m->gguf, "rope_freqs.weight")) {
        sw_errf(err, err_len,
                "model: per-dimension rope frequencies (rope_freqs.weight, Llama 3.1 "
                "style scaling) are not supported yet");
        goto err;
    }

    /* Devices: the layers are split evenly, in order. */
    sw_backend_t **devs;
    m->n_dev = sw_backend_devices(be, &devs);
    const int n_layers = layer_end - layer_begin;
    if (m->n_dev > n_layers) {
        sw_errf(err, err_len, "model: %d layers cannot be split over %d devices", n_layers,
                m->n_dev);
        goto err;
    }
    m->batch = be->max_rows > 0 ? be->max_rows : SW_MODEL_BATCH;
    m->logit_rows = m->batch < SW_MODEL_BATCH ? m->batch : SW_MODEL_BATCH;
    m->layers = calloc((size_t)n_layers, sizeof *m->layers);
    m->ctl_host =
        malloc((SW_CTL_CAP((size_t)m->batch) + S_LOOP_MAX * SW_CTL_LEN(1)) * sizeof *m->ctl_host);
    if (!m->layers || !m->ctl_host) {
        sw_errf(err, err_len, "model: out of memory");
        goto err;
    }
    for (int i = 0; i < m->n_dev; i++) {
        s_dev_t *d = &m->devs[i];
        d->be = devs[i];
        d->l0 = (int)((int64_t)n_layers * i / m->n_dev);
        d->l1 = (int)((int64_t)n_layers * (i + 1) / m->n_dev);
        for (int l = d->l0; l < d->l1; l++)
            m->layers[l].dev = i;
    }
    sw_backend_t *first = m->devs[0].be, *last = m->devs[m->n_dev - 1].be;

    if (sw_model_is_first(m) && s_mat(m, first, "token_embd.weight", hp->n_embd, hp->n_vocab, 1,
                                      &m->tok_embd, err, err_len))
        goto err;
    if (sw_model_is_last(m)) {
        if (s_vec(m, last, "output_norm.weight", hp->n_embd, 1, &m->out_norm, err, err_len) ||
            s_mat(m, last, "output.weight", hp->n_embd, hp->n_vocab, 0, &m->output, err, err_len))
            goto err;
        if (!m->output.buf) { // tied embeddings
            if (m->tok_embd.buf && first == last) {
                m->output = m->tok_embd;
            } else {
                const uint64_t before = m->weight_bytes;
                if (s_mat(m, last, "token_embd.weight", hp->n_embd, hp->n_vocab, 1, &m->output, err,
                          err_len))
                    goto err;
                if (m->tok_embd.buf) // the same bytes of the file, counted once
                    m->weight_bytes = before;
            }
        }
    }
    for (int il = layer_begin; il < layer_end; il++)
        if (s_load_layer(m, il, &m->layers[il - layer_begin], err, err_len) != 0)
            goto err;
    for (int i = 0; i < m->n_dev; i++)
        if (s_dev_buffers(m, &m->devs[i], i == m->n_dev - 1 && sw_model_is_last(m), err, err_len))
            goto err;
    return m;
err:
    sw_model_free(&m);
    return NULL;
}

static void s_free_buf(sw_backend_t *be, sw_buf_t **b)
{
    if (*b)
        be->ops->buf_free(be, *b);
    *b = NULL;
}

void sw_model_free(sw_model_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    sw_model_t *m = *self_p;
    for (int i = 0; i < m->n_dev; i++) {
        s_dev_t *d = &m->devs[i];
        sw_backend_t *be = d->be;
        for (int j = 0; j < S_LOOP_MAX; j++)
            s_free_buf(be, &d->loop_step[j]);
        for (int j = 0; j < S_MAX_PIECES; j++)
            s_free_buf(be, &d->pctl_v[j]);
        sw_buf_t **bufs[] = {&d->x,        &d->xn,       &d->q,         &d->k,
                             &d->v,        &d->att,      &d->tmp,       &d->gate,
                             &d->up,       &d->logits,   &d->ctl,       &d->rope,
                             &d->loop_ctl, &d->loop_ids, &d->loop_prob, &d->pctl};
        for (size_t j = 0; j < sizeof bufs / sizeof bufs[0]; j++)
            s_free_buf(be, bufs[j]);
        if (be->ops->graph_reset)
            be->ops->graph_reset(be);
    }
    for (int i = 0; i < m->n_owned; i++)
        m->owned[i].be->ops->buf_free(m->owned[i].be, m->owned[i].buf);
    free(m->owned);
    free(m->layers);
    free(m->ctl_host);
    free(m->gather_host);
    sw_gguf_close(&m->gguf);
    free(m);
    *self_p = NULL;
}

const sw_hparams_t *sw_model_hparams(const sw_model_t *m)
{
    return &m->hp;
}

const sw_gguf_t *sw_model_gguf(const sw_model_t *m)
{
    return m->gguf;
}

int sw_model_layer_begin(const sw_model_t *m)
{
    return m->begin;
}

int sw_model_layer_end(const sw_model_t *m)
{
    return m->end;
}

int sw_model_is_first(const sw_model_t *m)
{
    return m->begin == 0;
}

int sw_model_is_last(const sw_model_t *m)
{
    return m->end == m->hp.n_layer;
}

uint64_t sw_model_weight_bytes(const sw_model_t *m)
{
    return m->weight_bytes;
}

uint64_t sw_model_bytes_per_token(const sw_model_t *m)
{
    /* Everything but the embedding matrix, of which a step reads one row
     * (unless it is also the LM head, which reads it all). */
    uint64_t b = m->weight_bytes;
    if (m->tok_embd.buf && m->output.host != m->tok_embd.host)
        b -= m->tok_embd.row_bytes * (uint64_t)m->tok_embd.n_out;
    return b;
}

sw_backend_t *sw_model_backend(const sw_model_t *m)
{
    return m->be;
}

void sw_model_fingerprint(const sw_model_t *m, char out[65])
{
    const uint64_t size = sw_gguf_file_size(m->gguf);
    uint64_t n = sw_gguf_data_offset(m->gguf) + (1u << 20);
    if (n > size)
        n = size;
    uint8_t h[32];
    sw_sha256(sw_gguf_bytes(m->gguf), (size_t)n, h);
    sw_hex(h, sizeof h, out);
}

static volatile unsigned char s_sink;

static uint64_t s_touch(const void *p, uint64_t n, uint64_t done, uint64_t total,
                        void (*progress)(uint64_t, uint64_t, void *), void *ctx)
{
    const unsigned char *b = p;
    const uint64_t page = 4096;
    unsigned char acc = 0;
    for (uint64_t off = 0; off < n; off += page) {
        acc ^= b[off];
        if (progress && ((done + off) / (8u << 20)) != ((done + off + page) / (8u << 20)))
            progress(done + off, total, ctx);
    }
    s_sink ^= acc;
    return done + n;
}

void sw_model_prefault(sw_model_t *m, void (*progress)(uint64_t, uint64_t, void *), void *ctx)
{
    uint64_t total = m->weight_bytes, done = 0;
    /* Weights copied to a device at load were read then; only the CPU reads the mapping. */
    for (int i = 0; i < m->n_dev; i++)
        if (strcmp(m->devs[i].be->ops->name, "cpu") != 0) {
            if (progress)
                progress(total, total, ctx);
            return;
        }
    if (m->tok_embd.host)
        done = s_touch(m->tok_embd.host, m->tok_embd.row_bytes * (uint64_t)m->tok_embd.n_out, done,
                       total, progress, ctx);
    for (int i = 0; i < m->end - m->begin; i++) {
        const s_layer_t *L = &m->layers[i];
        const sw_weight_t *ws[] = {&L->wq,     &L->wk,   &L->wv,    &L->wo,
                                   &L->w_gate, &L->w_up, &L->w_down};
        for (size_t j = 0; j < sizeof ws / sizeof ws[0]; j++)
            done = s_touch(ws[j]->host, ws[j]->row_bytes * (uint64_t)ws[j]->n_out, done, total,
                           progress, ctx);
    }
    if (m->output.host && m->output.host != m->tok_embd.host)
        done = s_touch(m->output.host, m->output.row_bytes * (uint64_t)m->output.n_out, done, total,
                       progress, ctx);
    if (progress)
        progress(total, total, ctx);
}

/* ---- KV cache ------------------------------------------------------------------------ */

/* Makes the rope tables cover n_pos positions (kept at the largest size asked). */
static int s_rope_reserve(sw_model_t *m, int n_pos)
{
    if (n_pos <= m->rope_n)
        return 0;
    const int n_rot = m->hp.n_rot;
    const size_t bytes = (size_t)n_pos * (size_t)n_rot * sizeof(float);
    float *cs = malloc(bytes);
    if (!cs)
        return -1;
    sw_rope_table(cs, n_pos, n_rot, m->hp.rope_base, m->hp.rope_freq_scale);
    int rc = 0;
    for (int i = 0; i < m->n_dev && rc == 0; i++) {
        s_dev_t *d = &m->devs[i];
        sw_buf_t *b = d->be->ops->buf_alloc(d->be, bytes);
        if (!b || d->be->ops->upload(d->be, b, 0, cs, bytes) != 0) {
            if (b)
                d->be->ops->buf_free(d->be, b);
            rc = -1;
            break;
        }
        s_free_buf(d->be, &d->rope);
        d->rope = b;
        if (d->be->ops->graph_reset) // recorded graphs read the old table
            d->be->ops->graph_reset(d->be);
    }
    free(cs);
    if (rc == 0)
        m->rope_n = n_pos;
    return rc;
}

static int s_fail(sw_backend_t *be, char *err, size_t err_len);

sw_kv_t *sw_kv_new(sw_model_t *m, int n_ctx)
{
    if (n_ctx < 1)
        return NULL;
    sw_kv_t *kv = calloc(1, sizeof *kv);
    if (!kv)
        return NULL;
    kv->m = m;
    kv->n_ctx = n_ctx;
    kv->n_layers = m->end - m->begin;
    kv->k = calloc((size_t)kv->n_layers, sizeof *kv->k);
    kv->v = calloc((size_t)kv->n_layers, sizeof *kv->v);
    kv->par = malloc((size_t)n_ctx * sizeof *kv->par);
    kv->pos = malloc((size_t)n_ctx * sizeof *kv->pos);
    if (!kv->k || !kv->v || !kv->par || !kv->pos)
        goto err;
    const size_t bytes = (size_t)n_ctx * m->hp.n_kv_head * m->hp.head_dim * sizeof(sw_f16);
    for (int i = 0; i < kv->n_layers; i++) {
        sw_backend_t *be = m->devs[m->layers[i].dev].be;
        kv->k[i] = be->ops->buf_alloc(be, bytes);
        kv->v[i] = be->ops->buf_alloc(be, bytes);
        if (!kv->k[i] || !kv->v[i])
            goto err;
    }
    /* The rope table covers every slot of the largest cache (after the cache
     * itself fits: the table is a small fraction of it). */
    if (s_rope_reserve(m, n_ctx) != 0)
        goto err;
    return kv;
err:
    sw_kv_free(&kv);
    return NULL;
}

void sw_kv_free(sw_kv_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    sw_kv_t *kv = *self_p;
    sw_model_t *m = kv->m;
    for (int i = 0; i < kv->n_layers; i++) {
        sw_backend_t *be = m->devs[m->layers[i].dev].be;
        if (kv->k && kv->k[i])
            be->ops->buf_free(be, kv->k[i]);
        if (kv->v && kv->v[i])
            be->ops->buf_free(be, kv->v[i]);
    }
    /* Graphs recorded for this cache hold its buffers. */
    for (int i = 0; i < m->n_dev; i++)
        if (m->devs[i].be->ops->graph_reset)
            m->devs[i].be->ops->graph_reset(m->devs[i].be);
    free(kv->k);
    free(kv->v);
    free(kv->par);
    free(kv->pos);
    free(kv);
    *self_p = NULL;
}

size_t sw_kv_bytes(const sw_model_t *m, int n_ctx)
{
    return (size_t)(m->end - m->begin) * 2 * (size_t)n_ctx * (size_t)m->hp.n_kv_head *
           (size_t)m->hp.head_dim * sizeof(sw_f16);
}

int sw_kv_len(const sw_kv_t *kv)
{
    return kv->len;
}

int sw_kv_capacity(const sw_kv_t *kv)
{
    return kv->n_ctx;
}

int sw_kv_truncate(sw_kv_t *kv, int n)
{
    if (n < 0 || n > kv->len)
        return -1;
    kv->len = n;
    if (kv->lin > n)
        kv->lin = n;
    return 0;
}

int sw_kv_pos(const sw_kv_t *kv, int s)
{
    return s >= 0 && s < kv->len ? kv->pos[s] : -1;
}

int sw_kv_parent(const sw_kv_t *kv, int s)
{
    return s >= 0 && s < kv->len ? kv->par[s] : -2;
}

int sw_model_trees(const sw_model_t *m)
{
    for (int d = 0; d < m->n_dev; d++)
        if (!m->devs[d].be->ops->kv_move)
            return 0;
    return 1;
}

int sw_kv_linear(const sw_kv_t *kv)
{
    return kv->lin;
}

/* Extends kv->lin over the slots that continue the plain sequence. */
static void s_kv_relin(sw_kv_t *kv)
{
    while (kv->lin < kv->len && kv->par[kv->lin] == kv->lin - 1 && kv->pos[kv->lin] == kv->lin)
        kv->lin++;
}

int sw_kv_keep(sw_kv_t *kv, int from, const int32_t *slots, int n, char *err, size_t err_len)
{
    sw_model_t *m = kv->m;
    if (from < 0 || from > kv->len || n < 0 || (int64_t)from + n > kv->len || (n && !slots)) {
        sw_errf(err, err_len, "model: keeping %d slots from %d of a %d-slot cache", n, from,
                kv->len);
        return -1;
    }
    int32_t dst[SW_CTL_TREE_MAX];
    if (n > SW_CTL_TREE_MAX) {
        sw_errf(err, err_len, "model: keeping %d tree slots (max %d)", n, SW_CTL_TREE_MAX);
        return -1;
    }
    int moved = 0;
    for (int j = 0; j < n; j++) {
        const int32_t sl = slots[j], p = sl >= 0 && sl < kv->len ? kv->par[sl] : -2;
        int parent_ok = p < from; // -1 or the kept prefix
        for (int i = 0; i < j && !parent_ok; i++)
            parent_ok = slots[i] == p;
        if (sl < from || sl >= kv->len || (j && sl <= slots[j - 1]) || !parent_ok) {
            sw_errf(err, err_len, "model: slot %d cannot be kept (after %d, parent %d, from %d)",
                    sl, j ? slots[j - 1] : -1, p, from);
            return -1;
        }
        dst[j] = from + j;
        moved |= sl != dst[j];
    }
    if (moved) {
        if (!m->devs[0].be->ops->kv_move) {
            sw_errf(err, err_len, "model: backend %s cannot move cache slots (no token trees)",
                    m->devs[0].be->name);
            return -1;
        }
        const int kv_dim = m->hp.n_kv_head * m->hp.head_dim;
        for (int i = 0; i < kv->n_layers; i++) {
            sw_backend_t *be = m->devs[m->layers[i].dev].be;
            if (be->ops->kv_move(be, kv->k[i], kv->v[i], kv->n_ctx, kv_dim, slots, dst, n) != 0)
                return s_fail(be, err, err_len);
        }
    }
    /* Metadata: each kept slot's parent is now where that parent went. */
    for (int j = 0; j < n; j++) {
        int32_t p = kv->par[slots[j]];
        for (int i = 0; i < j && p >= from; i++)
            if (slots[i] == p) {
                p = dst[i];
                break;
            }
        kv->par[dst[j]] = p;
        kv->pos[dst[j]] = kv->pos[slots[j]];
    }
    kv->len = from + n;
    if (kv->lin > from)
        kv->lin = from;
    s_kv_relin(kv);
    return 0;
}

/* ---- forward ---------------------------------------------------------------------------- */

#define S_TRY(call)                                                                                \
    do {                                                                                           \
        if ((call) != 0)                                                                           \
            return -1;                                                                             \
    } while (0)

/* A session's rows inside a forward chunk that holds rows of several. */
typedef struct s_piece {
    sw_kv_t *kv; // the session's cache
    int row0;    // its first row in the chunk
    int n;       // its rows
    int slot0;   // the cache slot of its first row
    int tree;    // 1: its rows are token tree rows (visibility records, positions by depth)
} s_piece_t;

/* What one device does for one chunk, recorded as one graph on backends
 * that have them: the embedding lookup (first device of the first stage),
 * its layers, and the final norm (last device of the last stage). A chunk
 * holds the rows of one session (kv), or rows of several (pieces): then
 * everything but attention runs over all rows at once (each row is computed
 * on its own, so a row's result is what it would be alone), and attention
 * runs per session on views of its rows, against that session's cache and
 * control block. */
typedef struct s_step {
    sw_model_t *m;
    sw_kv_t *kv; // the session, when the chunk holds one
    s_dev_t *d;
    const sw_buf_t *ctl;     // the chunk's control block on d (positions, tokens of every row)
    int n;                   // rows
    int prompt_order;        // attention order and SW_MM_PROMPT
    int tiled;               // SW_MM_TILED for the layers' matmuls
    int tiled_out;           // SW_MM_TILED for the last layer's FFN before the final norm:
                             // llama.cpp runs that FFN on the rows that want logits only,
                             // so only those rows count
    int embed;               // 1: get_rows first
    int final_norm;          // 1: output norm last (into d->xn)
    const s_piece_t *pieces; // (n_pieces) sessions of a shared chunk, NULL = one session (kv)
    int n_pieces;            //
    sw_buf_t *const *views;  // (n_pieces, 4) views of d->q, d->k, d->v, d->att on each piece
    int tree;                // one session's chunk of token tree rows
} s_step_t;

/* Attention of one layer over the chunk's rows: per session when the chunk is shared. */
static int s_attention(const s_step_t *s, int li)
{
    const sw_hparams_t *hp = &s->m->hp;
    s_dev_t *d = s->d;
    for (int j = 0; j < (s->pieces ? s->n_pieces : 1); j++) {
        sw_kv_t *kv = s->pieces ? s->pieces[j].kv : s->kv;
        sw_buf_t *const *v = s->pieces ? s->views + 4 * j : NULL;
        sw_attn_args_t a = {
            .q = v ? v[0] : d->q,
            .k = v ? v[1] : d->k,
            .v = v ? v[2] : d->v,
            .out = v ? v[3] : d->att,
            .k_cache = kv->k[li],
            .v_cache = kv->v[li],
            .ctl = s->pieces ? d->pctl_v[j] : s->ctl,
            .n = s->pieces ? s->pieces[j].n : s->n,
            .n_ctx = kv->n_ctx,
            .n_head = hp->n_head,
            .n_kv_head = hp->n_kv_head,
            .head_dim = hp->head_dim,
            .scale = 1.0f / sqrtf((float)hp->head_dim),
            .prompt_order = s->prompt_order,
            .tree = s->pieces ? s->pieces[j].tree : s->tree,
        };
        S_TRY(d->be->ops->attention(d->be, &a));
    }
    return 0;
}

/* One layer over the n rows in d->x. */
static int s_layer_forward(const s_step_t *s, int li)
{
    sw_model_t *m = s->m;
    s_dev_t *d = s->d;
    sw_backend_t *be = d->be;
    const sw_backend_ops_t *ops = be->ops;
    const sw_hparams_t *hp = &m->hp;
    const s_layer_t *L = &m->layers[li];
    const int n = s->n;

    S_TRY(ops->rmsnorm(be, d->x, L->attn_norm, n, hp->n_embd, hp->rms_eps, d->xn));
    const sw_weight_t *qkv[3] = {&L->wq, &L->wk, &L->wv};
    const sw_buf_t *bias[3] = {L->bq, L->bk, L->bv};
    sw_buf_t *qkv_out[3] = {d->q, d->k, d->v};
    const int mm_flags = s->prompt_order ? SW_MM_PROMPT | (s->tiled ? SW_MM_TILED : 0) : 0;
    S_TRY(ops->matmul(be, 3, qkv, bias, d->xn, 0, n, qkv_out, mm_flags));
    if (L->q_norm) {
        S_TRY(ops->head_norm(be, d->q, n, hp->n_head, hp->head_dim, L->q_norm, hp->rms_eps));
        S_TRY(ops->head_norm(be, d->k, n, hp->n_kv_head, hp->head_dim, L->k_norm, hp->rms_eps));
    }
    S_TRY(ops->rope(be, d->q, s->ctl, n, hp->n_head, hp->head_dim, hp->n_rot, d->rope,
                    hp->rope_neox));
    S_TRY(ops->rope(be, d->k, s->ctl, n, hp->n_kv_head, hp->head_dim, hp->n_rot, d->rope,
                    hp->rope_neox));
    S_TRY(s_attention(s, li));
    const sw_weight_t *wo[1] = {&L->wo};
    S_TRY(ops->matmul(be, 1, wo, NULL, d->att, 0, n, &d->tmp, mm_flags));
    S_TRY(ops->add(be, d->x, d->tmp, (size_t)n * hp->n_embd));

    S_TRY(ops->rmsnorm(be, d->x, L->ffn_norm, n, hp->n_embd, hp->rms_eps, d->xn));
    const int ffn_flags = s->final_norm && li == d->l1 - 1 && s->prompt_order
                              ? SW_MM_PROMPT | (s->tiled_out ? SW_MM_TILED : 0)
                              : mm_flags;
    const sw_weight_t *gu[2] = {&L->w_gate, &L->w_up};
    sw_buf_t *gu_out[2] = {d->gate, d->up};
    S_TRY(ops->matmul(be, 2, gu, NULL, d->xn, 0, n, gu_out, ffn_flags));
    S_TRY(ops->swiglu(be, d->gate, d->up, (size_t)n * hp->n_ff));
    const sw_weight_t *wd[1] = {&L->w_down};
    S_TRY(ops->matmul(be, 1, wd, NULL, d->gate, 0, n, &d->tmp, ffn_flags));
    S_TRY(ops->add(be, d->x, d->tmp, (size_t)n * hp->n_embd));
    return 0;
}

static int s_step_record(void *ctx)
{
    const s_step_t *s = ctx;
    sw_model_t *m = s->m;
    s_dev_t *d = s->d;
    const sw_backend_ops_t *ops = d->be->ops;
    if (s->embed)
        S_TRY(ops->get_rows(d->be, &m->tok_embd, s->ctl, s->n, d->x));
    for (int li = d->l0; li < d->l1; li++)
        S_TRY(s_layer_forward(s, li));
    if (s->final_norm)
        S_TRY(ops->rmsnorm(d->be, d->x, m->out_norm, s->n, m->hp.n_embd, m->hp.rms_eps, d->xn));
    return 0;
}

/* FNV-1a over the words that identify a recorded step. */
static uint64_t s_key(const uint64_t *w, int n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (int i = 0; i < n; i++)
        for (int b = 0; b < 8; b++) {
            h ^= (w[i] >> (8 * b)) & 0xff;
            h *= 0x100000001b3ull;
        }
    return h ? h : 1;
}

/* Decode and verification chunks (up to this many rows, not prompts) are recorded as graphs. */
#define S_GRAPH_MAX_ROWS 65

static int s_run_step(s_step_t *s, int dev_index)
{
    sw_backend_t *be = s->d->be;
    if (!be->ops->graph_run)
        return s_step_record(s);
    uint64_t key = 0;
    if (s->n <= S_GRAPH_MAX_ROWS && !s->prompt_order && !s->pieces) {
        const uint64_t w[] = {(uint64_t)(uintptr_t)s->kv,
                              (uint64_t)dev_index,
                              (uint64_t)s->n,
                              (uint64_t)s->prompt_order,
                              (uint64_t)s->embed,
                              (uint64_t)s->final_norm,
                              (uint64_t)s->tree,
                              0x57e9};
        key = s_key(w, (int)(sizeof w / sizeof w[0]));
    }
    return be->ops->graph_run(be, key, s_step_record, s);
}

static int s_fail(sw_backend_t *be, char *err, size_t err_len)
{
    sw_errf(err, err_len, "model: %s: %s", be->name, sw_backend_error(be));
    return -1;
}

/* Writes the visibility record of the row at slot sl to rec (at most cap
 * entries): [lin, m, s_1..s_m], its ancestors from the first one past the
 * plain prefix down to itself. Returns the entries written, or -1 when cap is
 * too small. */
static int s_record(const sw_kv_t *kv, int sl, int32_t *rec, int cap)
{
    int m = 0, x = sl;
    while (x >= kv->lin) { // x >= 0 too: kv->lin >= 0
        if (2 + m >= cap)
            return -1;
        rec[2 + m++] = x;
        x = kv->par[x];
    }
    rec[0] = x + 1; // slots [0, x] are a plain prefix (or none: x = -1)
    rec[1] = m;
    for (int i = 0; i < m / 2; i++) { // root first
        int32_t t = rec[2 + i];
        rec[2 + i] = rec[2 + m - 1 - i];
        rec[2 + m - 1 - i] = t;
    }
    return 2 + m;
}

/* Fills the control block c for the n rows of pieces pc[0..np) (their slots,
 * positions from the cache's metadata, tokens tok[j] or none, and when a
 * piece is tree rows and recs is set, the visibility records of every row).
 * -1 when the records do not fit. */
static int s_fill_ctl(int32_t *c, const s_piece_t *pc, int np, int n, const int32_t *const *tok,
                      int recs)
{
    c[SW_CTL_N] = n;
    c[SW_CTL_SLOT0] = pc[0].slot0;
    int at = SW_CTL_VIS(n) + n; // next free entry of the records area
    for (int j = 0; j < np; j++)
        for (int r = 0; r < pc[j].n; r++) {
            const int row = pc[j].row0 + r, sl = pc[j].slot0 + r;
            c[SW_CTL_POS + row] = pc[j].kv->pos[sl];
            c[SW_CTL_POS + n + row] = tok ? tok[j][r] : 0;
            if (!recs || !pc[j].tree)
                continue;
            c[SW_CTL_VIS(n) + row] = at;
            int w = s_record(pc[j].kv, sl, c + at, SW_CTL_CAP(n) - at);
            if (w < 0)
                return -1;
            at += w;
        }
    return 0;
}

/* Entries of a filled control block to upload. */
static size_t s_ctl_used(const int32_t *c, int n, int tree)
{
    if (!tree)
        return SW_CTL_LEN((size_t)n);
    int32_t end = SW_CTL_VIS(n) + n;
    for (int r = 0; r < n; r++) {
        const int32_t off = c[SW_CTL_VIS(n) + r];
        if (off + 2 + c[off + 1] > end)
            end = off + 2 + c[off + 1];
    }
    return (size_t)end;
}

/* The control block of a chunk to every device: row r of piece j sits at
 * slot pc[j].slot0 + r, at the position the cache's metadata gives it, and
 * carries token tok[j][r] (tok may be NULL). With several pieces, each also
 * gets its own block (its slots, its visibility records) for its attention,
 * in d->pctl; one piece's records go in the chunk's block. */
static int s_put_ctl(sw_model_t *m, const s_piece_t *pc, int np, int n, const int32_t *const *tok,
                     sw_backend_t **bad)
{
    int32_t *c = m->ctl_host;
    const int tree1 = np == 1 && pc[0].tree;
    if (s_fill_ctl(c, pc, np, n, tok, np == 1) != 0) {
        *bad = m->devs[0].be;
        return sw_backend_fail(*bad, "the token tree of a chunk is too deep (%d entries at most)",
                               SW_CTL_TREE_MAX);
    }
    const size_t used = s_ctl_used(c, n, tree1);
    for (int i = 0; i < m->n_dev; i++) {
        s_dev_t *d = &m->devs[i];
        *bad = d->be;
        if (d->be->ops->upload(d->be, d->ctl, 0, c, used * sizeof *c) != 0)
            return -1;
    }
    if (np < 2)
        return 0;
    const size_t blk = SW_CTL_CAP((size_t)m->batch) * sizeof(int32_t);
    for (int j = 0; j < np; j++) {
        s_piece_t one = pc[j];
        one.row0 = 0;
        const int32_t *tj = tok ? tok[j] : NULL;
        if (s_fill_ctl(c, &one, 1, pc[j].n, tok ? &tj : NULL, 1) != 0) {
            *bad = m->devs[0].be;
            return sw_backend_fail(*bad, "the token tree of a session is too deep");
        }
        const size_t used_j = s_ctl_used(c, pc[j].n, pc[j].tree);
        for (int i = 0; i < m->n_dev; i++) {
            s_dev_t *d = &m->devs[i];
            *bad = d->be;
            if (d->be->ops->upload(d->be, d->pctl, (size_t)j * blk, c, used_j * sizeof *c) != 0)
                return -1;
        }
    }
    return 0;
}

/* Makes the per-session control blocks of shared chunks on every device
 * (once) and, for this chunk, views of q, k, v and att on each piece's rows
 * (views: (n_dev, np, 4), freed by s_free_views). */
static int s_make_views(sw_model_t *m, const s_piece_t *pc, int np, sw_buf_t **views,
                        sw_backend_t **bad)
{
    const sw_hparams_t *hp = &m->hp;
    const size_t q_row = (size_t)hp->n_head * hp->head_dim * sizeof(float);
    const size_t kv_row = (size_t)hp->n_kv_head * hp->head_dim * sizeof(float);
    const size_t blk = SW_CTL_CAP((size_t)m->batch) * sizeof(int32_t);
    for (int i = 0; i < m->n_dev; i++) {
        s_dev_t *d = &m->devs[i];
        const sw_backend_ops_t *ops = d->be->ops;
        *bad = d->be;
        if (!d->pctl) {
            d->pctl = ops->buf_alloc(d->be, S_MAX_PIECES * blk);
            for (int j = 0; d->pctl && j < S_MAX_PIECES; j++)
                if (!(d->pctl_v[j] = ops->buf_view(d->be, d->pctl, (size_t)j * blk, blk)))
                    return -1;
            if (!d->pctl)
                return -1;
        }
        for (int j = 0; j < np; j++) {
            sw_buf_t **v = views + ((size_t)i * np + j) * 4;
            const size_t r0 = (size_t)pc[j].row0, n = (size_t)pc[j].n;
            v[0] = ops->buf_view(d->be, d->q, r0 * q_row, n * q_row);
            v[1] = ops->buf_view(d->be, d->k, r0 * kv_row, n * kv_row);
            v[2] = ops->buf_view(d->be, d->v, r0 * kv_row, n * kv_row);
            v[3] = ops->buf_view(d->be, d->att, r0 * q_row, n * q_row);
            if (!v[0] || !v[1] || !v[2] || !v[3])
                return -1;
        }
    }
    return 0;
}

static void s_free_views(sw_model_t *m, int np, sw_buf_t **views)
{
    for (int i = 0; i < m->n_dev; i++)
        for (int j = 0; j < np * 4; j++)
            s_free_buf(m->devs[i].be, &views[(size_t)i * np * 4 + j]);
}

/* The argument checks of one session's rows. */
static int s_check_forward(sw_model_t *m, const sw_kv_t *kv, const sw_forward_t *f, char *err,
                           size_t err_len)
{
    const sw_hparams_t *hp = &m->hp;
    if (!kv || kv->m != m) {
        sw_errf(err, err_len, "model: the KV cache belongs to another model");
        return -1;
    }
    if (f->n < 1 || f->n_logits < 0 || f->n_logits > f->n) {
        sw_errf(err, err_len, "model: bad row count %d (logits %d)", f->n, f->n_logits);
        return -1;
    }
    if ((int64_t)kv->len + f->n > kv->n_ctx) {
        sw_errf(err, err_len, "model: %d rows do not fit the context (%d of %d positions used)",
                f->n, kv->len, kv->n_ctx);
        return -1;
    }
    if (sw_model_is_first(m)) {
        if (!f->tokens) {
            sw_errf(err, err_len, "model: the first stage needs token ids");
            return -1;
        }
        for (int i = 0; i < f->n; i++)
            if (f->tokens[i] < 0 || f->tokens[i] >= hp->n_vocab) {
                sw_errf(err, err_len, "model: token id %d is outside the vocabulary (0..%d)",
                        f->tokens[i], hp->n_vocab - 1);
                return -1;
            }
    } else if (!f->hidden) {
        sw_errf(err, err_len, "model: a later stage needs hidden states");
        return -1;
    }
    if (sw_model_is_last(m) ? (f->n_logits > 0 && !f->logits) : !f->out_hidden) {
        sw_errf(err, err_len, "model: no output buffer");
        return -1;
    }
    if (f->parent) {
        if (f->prompt) {
            sw_errf(err, err_len, "model: token tree rows cannot be a prompt");
            return -1;
        }
        for (int d = 0; d < m->n_dev; d++)
            if (!m->devs[d].be->ops->kv_move) {
                sw_errf(err, err_len, "model: backend %s does not run token trees",
                        m->devs[d].be->name);
                return -1;
            }
        for (int r = 0; r < f->n; r++)
            if (f->parent[r] < -1 || f->parent[r] >= kv->len + r) {
                sw_errf(err, err_len, "model: tree row %d hangs under slot %d (allowed -1..%d)", r,
                        f->parent[r], kv->len + r - 1);
                return -1;
            }
    }
    return 0;
}

/* Writes the parent and position of each of f's rows into kv's metadata
 * (past len: nothing is committed until the call succeeds) and returns 1
 * when they continue the plain sequence, 0 when they are tree rows (or
 * follow one). */
static int s_meta(sw_kv_t *kv, const sw_forward_t *f)
{
    int plain = kv->lin == kv->len;
    for (int r = 0; r < f->n; r++) {
        const int sl = kv->len + r;
        const int32_t p = f->parent ? f->parent[r] : sl - 1;
        kv->par[sl] = p;
        kv->pos[sl] = p < 0 ? 0 : kv->pos[p] + 1;
        plain &= p == sl - 1 && kv->pos[sl] == sl;
    }
    return plain;
}

/* The rows of a forward call, cut into chunks of at most m->batch rows. */
typedef struct s_chunk {
    s_piece_t pc[S_MAX_PIECES]; // sessions in the chunk, in row order
    int seg[S_MAX_PIECES];      // each piece's segment (index into the call's rows)
    int off[S_MAX_PIECES];      // and its first row within that segment
    int np;                     // pieces
    int n;                      // rows
    int prompt_order;           // 1: one prompt segment (alone, as a single call would cut it)
    int tiled;                  // its window holds 8 rows or more (SW_MM_TILED)
    int tiled_logits;           // its window wants 8 rows of logits or more
} s_chunk_t;

/* The rows of the prompt window (SW_MODEL_PROMPT_WINDOW) of segment f that
 * holds row off, and how many of them want logits. */
static int s_window_rows(const sw_forward_t *f, int off, int *n_logits)
{
    const int w0 = off / SW_MODEL_PROMPT_WINDOW * SW_MODEL_PROMPT_WINDOW;
    const int w1 = f->n - w0 < SW_MODEL_PROMPT_WINDOW ? f->n : w0 + SW_MODEL_PROMPT_WINDOW;
    const int l0 = f->n - f->n_logits > w0 ? f->n - f->n_logits : w0;
    *n_logits = w1 > l0 ? w1 - l0 : 0;
    return w1 - w0;
}

/* Fills ch with the next chunk from (*seg, *off) on and advances them. A
 * prompt window (SW_MODEL_PROMPT_WINDOW) of two rows or more takes its
 * chunks alone, cut at multiples of m->batch from the window's start,
 * exactly as a call of its own would (the prompt path may depend on the
 * window); other rows are packed. */
static void s_next_chunk(sw_model_t *m, sw_kv_t *const *kvs, const sw_forward_t *fs, int n_seg,
                         int *seg, int *off, s_chunk_t *ch)
{
    int wl = 0;
    const int wr = fs[*seg].prompt ? s_window_rows(&fs[*seg], *off, &wl) : 0;
    ch->np = ch->n = 0;
    ch->prompt_order = wr >= 2;
    ch->tiled = wr >= 8;
    ch->tiled_logits = ch->prompt_order && wl >= 8;
    while (*seg < n_seg && ch->n < m->batch && ch->np < S_MAX_PIECES) {
        const sw_forward_t *f = &fs[*seg];
        int wl2 = 0;
        const int po = f->prompt && s_window_rows(f, *off, &wl2) >= 2;
        if (ch->np > 0 && (po || ch->prompt_order))
            break;
        int c = f->n - *off;
        if (c > m->batch - ch->n)
            c = m->batch - ch->n;
        if (po) { // a chunk never crosses a window's end
            const int w_end = (*off / SW_MODEL_PROMPT_WINDOW + 1) * SW_MODEL_PROMPT_WINDOW;
            if (c > w_end - *off)
                c = w_end - *off;
        }
        s_piece_t *p = &ch->pc[ch->np];
        p->kv = kvs[*seg];
        p->row0 = ch->n;
        p->n = c;
        p->slot0 = kvs[*seg]->len + *off;
        p->tree = !kvs[*seg]->fwd_plain;
        ch->seg[ch->np] = *seg;
        ch->off[ch->np++] = *off;
        ch->n += c;
        *off += c;
        if (*off == f->n) {
            (*seg)++;
            *off = 0;
        }
        if (po)
            break;
    }
}

/* The last stage's LM head for the rows of ch whose logits are wanted. One
 * piece: straight from d->xn; several: their normed rows are gathered into
 * d->tmp first so that the LM head reads its weights once for all of them. */
static int s_chunk_logits(sw_model_t *m, const sw_forward_t *fs, const s_chunk_t *ch,
                          sw_backend_t **bad)
{
    const sw_hparams_t *hp = &m->hp;
    s_dev_t *dl = &m->devs[m->n_dev - 1];
    const sw_backend_ops_t *ops = dl->be->ops;
    const size_t row_bytes = (size_t)hp->n_embd * sizeof(float);
    const size_t logit_bytes = (size_t)hp->n_vocab * sizeof(float);
    const int mm_flags = ch->prompt_order ? SW_MM_PROMPT | (ch->tiled_logits ? SW_MM_TILED : 0) : 0;
    const sw_weight_t *out[1] = {&m->output};
    *bad = dl->be;
    /* rows wanted: [lo, n) of piece j, lo relative to the piece */
    int lo[S_MAX_PIECES], n_want = 0, only = -1;
    for (int j = 0; j < ch->np; j++) {
        const sw_forward_t *f = &fs[ch->seg[j]];
        lo[j] = f->n - f->n_logits - ch->off[j];
        if (lo[j] < 0)
            lo[j] = 0;
        if (lo[j] < ch->pc[j].n) {
            n_want += ch->pc[j].n - lo[j];
            only = only == -1 ? j : -2;
        }
    }
    if (n_want == 0)
        return 0;
    const sw_buf_t *src = dl->xn;
    int src_row0 = only >= 0 ? ch->pc[only].row0 + lo[only] : 0;
    if (only == -2) {
        if (!m->gather_host && !(m->gather_host = malloc((size_t)m->batch * row_bytes)))
            return -1;
        for (int j = 0, at = 0; j < ch->np; j++) {
            const int nw = ch->pc[j].n - lo[j];
            if (nw <= 0)
                continue;
            if (ops->download(dl->be, m->gather_host + (size_t)at * hp->n_embd, dl->xn,
                              (size_t)(ch->pc[j].row0 + lo[j]) * row_bytes,
                              (size_t)nw * row_bytes) != 0)
                return -1;
            at += nw;
        }
        if (ops->upload(dl->be, dl->tmp, 0, m->gather_host, (size_t)n_want * row_bytes) != 0)
            return -1;
        src = dl->tmp;
    }
    /* LM head over the gathered rows, logit_rows at a time; each row's logits
     * go to its session's output. */
    int j = only >= 0 ? only : 0, jr = lo[j]; // the piece and row the next logits row is
    for (int r0 = 0; r0 < n_want; r0 += m->logit_rows) {
        const int nl = n_want - r0 < m->logit_rows ? n_want - r0 : m->logit_rows;
        if (ops->matmul(dl->be, 1, out, NULL, src, src_row0 + r0, nl, &dl->logits, mm_flags) != 0)
            return -1;
        for (int r = 0; r < nl;) {
            while (jr >= ch->pc[j].n) {
                j++;
                jr = lo[j];
            }
            const sw_forward_t *f = &fs[ch->seg[j]];
            int run = ch->pc[j].n - jr < nl - r ? ch->pc[j].n - jr : nl - r;
            const int at = ch->off[j] + jr - (f->n - f->n_logits); // row of f->logits
            if (ops->download(dl->be, f->logits + (size_t)at * hp->n_vocab, dl->logits,
                              (size_t)r * logit_bytes, (size_t)run * logit_bytes) != 0)
                return -1;
            r += run;
            jr += run;
        }
    }
    return 0;
}

int sw_model_forward_batch(sw_model_t *m, sw_kv_t *const *kvs, const sw_forward_t *fs, int n_seg,
                           char *err, size_t err_len)
{
    const sw_hparams_t *hp = &m->hp;
    if (n_seg < 1) {
        sw_errf(err, err_len, "model: a forward call of %d sessions", n_seg);
        return -1;
    }
    for (int s = 0; s < n_seg; s++) {
        if (s_check_forward(m, kvs[s], &fs[s], err, err_len) != 0)
            return -1;
        for (int t = 0; t < s; t++)
            if (kvs[t] == kvs[s]) {
                sw_errf(err, err_len, "model: one cache twice in a forward call");
                return -1;
            }
    }
    for (int s = 0; s < n_seg; s++)
        kvs[s]->fwd_plain = s_meta(kvs[s], &fs[s]);
    const size_t row_bytes = (size_t)hp->n_embd * sizeof(float);
    s_dev_t *d0 = &m->devs[0], *dl = &m->devs[m->n_dev - 1];
    s_chunk_t ch;
    sw_buf_t *views[SW_BACKEND_MAX_DEVICES * S_MAX_PIECES * 4] = {0};
    int seg = 0, off = 0;
    while (seg < n_seg) {
        s_next_chunk(m, kvs, fs, n_seg, &seg, &off, &ch);
        const int n = ch.n, shared = ch.np > 1;
        const int32_t *tok[S_MAX_PIECES];
        for (int j = 0; j < ch.np; j++)
            tok[j] = sw_model_is_first(m) ? fs[ch.seg[j]].tokens + ch.off[j] : NULL;
        sw_backend_t *bad = NULL;
        if ((shared && s_make_views(m, ch.pc, ch.np, views, &bad) != 0) ||
            s_put_ctl(m, ch.pc, ch.np, n, sw_model_is_first(m) ? tok : NULL, &bad) != 0)
            goto fail;
        for (int j = 0; j < ch.np && !sw_model_is_first(m); j++) {
            bad = d0->be;
            if (d0->be->ops->upload(d0->be, d0->x, (size_t)ch.pc[j].row0 * row_bytes,
                                    fs[ch.seg[j]].hidden + (size_t)ch.off[j] * hp->n_embd,
                                    (size_t)ch.pc[j].n * row_bytes) != 0)
                goto fail;
        }
        for (int i = 0; i < m->n_dev; i++) {
            s_dev_t *d = &m->devs[i];
            s_step_t st = {.m = m,
                           .kv = ch.pc[0].kv,
                           .d = d,
                           .ctl = d->ctl,
                           .n = n,
                           .prompt_order = ch.prompt_order,
                           .tiled = ch.tiled,
                           .tiled_out = ch.tiled_logits,
                           .embed = i == 0 && sw_model_is_first(m),
                           .final_norm = d == dl && sw_model_is_last(m),
                           .pieces = shared ? ch.pc : NULL,
                           .n_pieces = ch.np,
                           .views = shared ? views + (size_t)i * ch.np * 4 : NULL,
                           .tree = ch.pc[0].tree};
            bad = d->be;
            if (s_run_step(&st, i) != 0)
                goto fail;
            if (d != dl && sw_backend_copy(d->be, d->x, 0, m->devs[i + 1].be, m->devs[i + 1].x, 0,
                                           (size_t)n * row_bytes) != 0)
                goto fail;
        }
        if (shared)
            s_free_views(m, ch.np, views);
        if (sw_model_is_last(m)) {
            if (s_chunk_logits(m, fs, &ch, &bad) != 0)
                goto fail;
            continue;
        }
        for (int j = 0; j < ch.np; j++) {
            bad = dl->be;
            if (dl->be->ops->download(
                    dl->be, fs[ch.seg[j]].out_hidden + (size_t)ch.off[j] * hp->n_embd, dl->x,
                    (size_t)ch.pc[j].row0 * row_bytes, (size_t)ch.pc[j].n * row_bytes) != 0)
                goto fail;
        }
        continue;
    fail:
        if (shared)
            s_free_views(m, ch.np, views);
        return s_fail(bad ? bad : d0->be, err, err_len);
    }
    for (int i = 0; i < m->n_dev; i++)
        if (m->devs[i].be->ops->sync && m->devs[i].be->ops->sync(m->devs[i].be) != 0)
            return s_fail(m->devs[i].be, err, err_len);
    for (int s = 0; s < n_seg; s++) {
        kvs[s]->len += fs[s].n;
        s_kv_relin(kvs[s]);
    }
    return 0;
}

int sw_model_forward(sw_model_t *m, sw_kv_t *kv, const sw_forward_t *f, char *err, size_t err_len)
{
    return sw_model_forward_batch(m, &kv, f, 1, err, err_len);
}

/* ---- greedy draft loop ------------------------------------------------------------------- */

typedef struct s_loop {
    sw_model_t *m;
    sw_kv_t *kv;
    int n_steps;
    int want_prob; // 1: the argmax steps also compute the top probability
} s_loop_t;

static int s_loop_record(void *ctx)
{
    const s_loop_t *lp = ctx;
    sw_model_t *m = lp->m;
    s_dev_t *d = &m->devs[0];
    const sw_backend_ops_t *ops = d->be->ops;
    const sw_weight_t *out[1] = {&m->output};
    for (int i = 0; i < lp->n_steps; i++) {
        s_step_t st = {.m = m,
                       .kv = lp->kv,
                       .d = d,
                       .ctl = d->loop_step[i],
                       .n = 1,
                       .embed = 1,
                       .final_norm = 1};
        S_TRY(s_step_record(&st));
        S_TRY(ops->matmul(d->be, 1, out, NULL, d->xn, 0, 1, &d->logits, 0));
        /* The argmax is the next step's token (SW_CTL_POS + 1 in its block). */
        const int next = i + 1 < lp->n_steps;
        S_TRY(ops->argmax(d->be, d->logits, m->hp.n_vocab, next ? d->loop_ctl : NULL,
                          (size_t)(i + 1) * SW_CTL_LEN(1) + SW_CTL_POS + 1, d->loop_ids,
                          lp->want_prob ? d->loop_prob : NULL, (size_t)i));
    }
    return 0;
}

int sw_model_greedy_steps(sw_model_t *m, sw_kv_t *kv, int32_t tok, int n_steps, int32_t *out,
                          float *prob, char *err, size_t err_len)
{
    const sw_hparams_t *hp = &m->hp;
    if (!kv || kv->m != m || m->n_dev != 1 || !sw_model_is_first(m) || !sw_model_is_last(m)) {
        sw_errf(err, err_len, "model: greedy steps need the whole model on one device");
        return -1;
    }
    if (n_steps < 1 || n_steps > S_LOOP_MAX || (int64_t)kv->len + n_steps > kv->n_ctx) {
        sw_errf(err, err_len, "model: %d greedy steps do not fit (at most %d; %d of %d used)",
                n_steps, S_LOOP_MAX, kv->len, kv->n_ctx);
        return -1;
    }
    if (tok < 0 || tok >= hp->n_vocab) {
        sw_errf(err, err_len, "model: token id %d is outside the vocabulary (0..%d)", tok,
                hp->n_vocab - 1);
        return -1;
    }
    if (kv->lin != kv->len) {
        sw_errf(err, err_len, "model: greedy steps need a cache without a token tree part");
        return -1;
    }
    s_dev_t *d = &m->devs[0];
    sw_backend_t *be = d->be;
    int32_t *c = m->ctl_host;
    for (int i = 0; i < n_steps; i++) {
        int32_t *b = c + (size_t)i * SW_CTL_LEN(1);
        b[SW_CTL_N] = 1;
        b[SW_CTL_SLOT0] = kv->len + i;
        b[SW_CTL_POS] = kv->len + i;
        b[SW_CTL_POS + 1] = i == 0 ? tok : 0;
    }
    s_loop_t lp = {.m = m, .kv = kv, .n_steps = n_steps, .want_prob = prob != NULL};
    const uint64_t w[] = {(uint64_t)(uintptr_t)kv, (uint64_t)n_steps, (uint64_t)lp.want_prob,
                          0x100b};
    if (be->ops->upload(be, d->loop_ctl, 0, c, (size_t)n_steps * SW_CTL_LEN(1) * sizeof *c) != 0 ||
        (be->ops->graph_run ? be->ops->graph_run(be, s_key(w, 4), s_loop_record, &lp)
                            : s_loop_record(&lp)) != 0 ||
        be->ops->download(be, out, d->loop_ids, 0, (size_t)n_steps * sizeof *out) != 0 ||
        (prob &&
         be->ops->download(be, prob, d->loop_prob, 0, (size_t)n_steps * sizeof *prob) != 0) ||
        (be->ops->sync && be->ops->sync(be) != 0))
        return s_fail(be, err, err_len);
    for (int i = 0; i < n_steps; i++) {
        kv->par[kv->len + i] = kv->len + i - 1;
        kv->pos[kv->len + i] = kv->len + i;
    }
    kv->len += n_steps;
    kv->lin = kv->len;
    return 0;
}
