/*
 * model.c - loading a layer range of a Llama/Qwen-family GGUF and running the
 * transformer forward pass over it on a backend.
 *
 * Every tensor the range needs is looked up by name and its type and shape
 * are checked against the hyper-parameters before anything runs, so that a
 * forward pass can trust them. A forward call processes its rows in chunks
 * of SW_MODEL_BATCH; each op computes rows independently, so the split does
 * not change any value.
 */
#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sodium.h>

#include "log.h"

typedef struct s_layer {
    const float *attn_norm; // (n_embd) f32
    sw_weight_t wq;         // (n_head * head_dim, n_embd)
    sw_weight_t wk;         // (n_kv_head * head_dim, n_embd)
    sw_weight_t wv;         // (n_kv_head * head_dim, n_embd)
    sw_weight_t wo;         // (n_embd, n_head * head_dim)
    const float *bq;        // (n_head * head_dim) f32 or NULL (Qwen2 has QKV bias)
    const float *bk;        // (n_kv_head * head_dim) f32 or NULL
    const float *bv;        // (n_kv_head * head_dim) f32 or NULL
    const float *q_norm;    // (head_dim) f32 or NULL (Qwen3)
    const float *k_norm;    // (head_dim) f32 or NULL
    const float *ffn_norm;  // (n_embd) f32
    sw_weight_t w_gate;     // (n_ff, n_embd)
    sw_weight_t w_up;       // (n_ff, n_embd)
    sw_weight_t w_down;     // (n_embd, n_ff)
} s_layer_t;

struct sw_model {
    sw_gguf_t *gguf;       // owns the mapping
    sw_backend_t *be;      // not owned
    sw_hparams_t hp;       // hyper-parameters
    int begin, end;        // layer range [begin, end)
    s_layer_t *layers;     // (end - begin)
    sw_weight_t tok_embd;  // (n_vocab, n_embd), first stage
    const float *out_norm; // (n_embd) f32, last stage
    sw_weight_t output;    // (n_vocab, n_embd), last stage (tied to tok_embd when absent)
    uint64_t weight_bytes; // bytes of the tensors this range uses
    /* scratch, SW_MODEL_BATCH rows each */
    sw_buf_t *x;      // (B, n_embd) residual stream
    sw_buf_t *xn;     // (B, n_embd) normed
    sw_buf_t *q;      // (B, n_head * head_dim)
    sw_buf_t *k;      // (B, n_kv_head * head_dim)
    sw_buf_t *v;      // (B, n_kv_head * head_dim)
    sw_buf_t *att;    // (B, n_head * head_dim)
    sw_buf_t *tmp;    // (B, n_embd)
    sw_buf_t *gate;   // (B, n_ff)
    sw_buf_t *up;     // (B, n_ff)
    sw_buf_t *logits; // (B, n_vocab), last stage
};

struct sw_kv {
    sw_model_t *m; // owner model
    int n_ctx;     // capacity in positions
    int len;       // positions filled
    sw_buf_t **k;  // (n_layers) each (n_ctx, n_kv_head * head_dim) f16
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

/* A 1-D f32 tensor of n elements. */
static int s_vec(sw_model_t *m, const char *name, int64_t n, int required, const float **out,
                 char *err, size_t err_len)
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
    *out = t->data;
    m->weight_bytes += t->n_bytes;
    return 0;
}

/* A 2-D weight of n_out rows by n_in columns. */
static int s_mat(sw_model_t *m, const char *name, int64_t n_in, int64_t n_out, int required,
                 sw_weight_t *w, char *err, size_t err_len)
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
    w->data = t->data;
    m->weight_bytes += t->n_bytes;
    return m->be->ops->weight_prepare(m->be, w) == 0 ? 0 : -1;
}

static int s_load_layer(sw_model_t *m, int il, s_layer_t *L, char *err, size_t err_len)
{
    const sw_hparams_t *hp = &m->hp;
    const int64_t q_dim = (int64_t)hp->n_head * hp->head_dim;
    const int64_t kv_dim = (int64_t)hp->n_kv_head * hp->head_dim;
    char n[96];
#define S_NAME(suffix) (snprintf(n, sizeof n, "blk.%d." suffix, il), n)
    if (s_vec(m, S_NAME("attn_norm.weight"), hp->n_embd, 1, &L->attn_norm, err, err_len) ||
        s_mat(m, S_NAME("attn_q.weight"), hp->n_embd, q_dim, 1, &L->wq, err, err_len) ||
        s_mat(m, S_NAME("attn_k.weight"), hp->n_embd, kv_dim, 1, &L->wk, err, err_len) ||
        s_mat(m, S_NAME("attn_v.weight"), hp->n_embd, kv_dim, 1, &L->wv, err, err_len) ||
        s_mat(m, S_NAME("attn_output.weight"), q_dim, hp->n_embd, 1, &L->wo, err, err_len) ||
        s_vec(m, S_NAME("attn_q.bias"), q_dim, 0, &L->bq, err, err_len) ||
        s_vec(m, S_NAME("attn_k.bias"), kv_dim, 0, &L->bk, err, err_len) ||
        s_vec(m, S_NAME("attn_v.bias"), kv_dim, 0, &L->bv, err, err_len) ||
        s_vec(m, S_NAME("attn_q_norm.weight"), hp->head_dim, hp->arch == SW_ARCH_QWEN3, &L->q_norm,
              err, err_len) ||
        s_vec(m, S_NAME("attn_k_norm.weight"), hp->head_dim, hp->arch == SW_ARCH_QWEN3, &L->k_norm,
              err, err_len) ||
        s_vec(m, S_NAME("ffn_norm.weight"), hp->n_embd, 1, &L->ffn_norm, err, err_len) ||
        s_mat(m, S_NAME("ffn_gate.weight"), hp->n_embd, hp->n_ff, 1, &L->w_gate, err, err_len) ||
        s_mat(m, S_NAME("ffn_up.weight"), hp->n_embd, hp->n_ff, 1, &L->w_up, err, err_len) ||
        s_mat(m, S_NAME("ffn_down.weight"), hp->n_ff, hp->n_embd, 1, &L->w_down, err, err_len))
        return -1;
#undef S_NAME
    if (hp->arch == SW_ARCH_QWEN2 && (!L->bq || !L->bk || !L->bv)) {
        sw_errf(err, err_len, "model: qwen2 layer %d lacks its q/k/v bias tensors", il);
        return -1;
    }
    return 0;
}

static sw_buf_t *s_alloc(sw_model_t *m, size_t n_floats)
{
    return m->be->ops->buf_alloc(m->be, n_floats * sizeof(float));
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

    if (sw_model_is_first(m) &&
        s_mat(m, "token_embd.weight", hp->n_embd, hp->n_vocab, 1, &m->tok_embd, err, err_len))
        goto err;
    if (sw_model_is_last(m)) {
        if (s_vec(m, "output_norm.weight", hp->n_embd, 1, &m->out_norm, err, err_len) ||
            s_mat(m, "output.weight", hp->n_embd, hp->n_vocab, 0, &m->output, err, err_len))
            goto err;
        if (!m->output.data) { // tied embeddings
            if (m->tok_embd.data)
                m->output = m->tok_embd;
            else if (s_mat(m, "token_embd.weight", hp->n_embd, hp->n_vocab, 1, &m->output, err,
                           err_len))
                goto err;
        }
    }
    m->layers = calloc((size_t)(layer_end - layer_begin), sizeof *m->layers);
    if (!m->layers) {
        sw_errf(err, err_len, "model: out of memory");
        goto err;
    }
    for (int il = layer_begin; il < layer_end; il++)
        if (s_load_layer(m, il, &m->layers[il - layer_begin], err, err_len) != 0)
            goto err;

    const size_t B = SW_MODEL_BATCH;
    const size_t q_dim = (size_t)hp->n_head * hp->head_dim;
    const size_t kv_dim = (size_t)hp->n_kv_head * hp->head_dim;
    m->x = s_alloc(m, B * hp->n_embd);
    m->xn = s_alloc(m, B * hp->n_embd);
    m->q = s_alloc(m, B * q_dim);
    m->k = s_alloc(m, B * kv_dim);
    m->v = s_alloc(m, B * kv_dim);
    m->att = s_alloc(m, B * q_dim);
    m->tmp = s_alloc(m, B * hp->n_embd);
    m->gate = s_alloc(m, B * hp->n_ff);
    m->up = s_alloc(m, B * hp->n_ff);
    if (sw_model_is_last(m))
        m->logits = s_alloc(m, B * (size_t)hp->n_vocab);
    if (!m->x || !m->xn || !m->q || !m->k || !m->v || !m->att || !m->tmp || !m->gate || !m->up ||
        (sw_model_is_last(m) && !m->logits)) {
        sw_errf(err, err_len, "model: out of memory for activation buffers");
        goto err;
    }
    return m;
err:
    sw_model_free(&m);
    return NULL;
}

void sw_model_free(sw_model_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    sw_model_t *m = *self_p;
    sw_buf_t **bufs[] = {&m->x,   &m->xn,  &m->q,    &m->k,  &m->v,
                         &m->att, &m->tmp, &m->gate, &m->up, &m->logits};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
        if (*bufs[i])
            m->be->ops->buf_free(m->be, *bufs[i]);
        *bufs[i] = NULL;
    }
    free(m->layers);
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

void sw_model_fingerprint(const sw_model_t *m, char out[65])
{
    const uint64_t size = sw_gguf_file_size(m->gguf);
    uint64_t n = sw_gguf_data_offset(m->gguf) + (1u << 20);
    if (n > size)
        n = size;
    unsigned char h[crypto_hash_sha256_BYTES];
    crypto_hash_sha256(h, sw_gguf_bytes(m->gguf), n);
    sodium_bin2hex(out, 65, h, sizeof h);
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
    if (m->tok_embd.data)
        done = s_touch(m->tok_embd.data, m->tok_embd.row_bytes * (uint64_t)m->tok_embd.n_out, done,
                       total, progress, ctx);
    for (int i = 0; i < m->end - m->begin; i++) {
        const s_layer_t *L = &m->layers[i];
        const sw_weight_t *ws[] = {&L->wq,     &L->wk,   &L->wv,    &L->wo,
                                   &L->w_gate, &L->w_up, &L->w_down};
        for (size_t j = 0; j < sizeof ws / sizeof ws[0]; j++)
            done = s_touch(ws[j]->data, ws[j]->row_bytes * (uint64_t)ws[j]->n_out, done, total,
                           progress, ctx);
    }
    if (m->output.data && m->output.data != m->tok_embd.data)
        done = s_touch(m->output.data, m->output.row_bytes * (uint64_t)m->output.n_out, done, total,
                       progress, ctx);
    if (progress)
        progress(total, total, ctx);
}

/* ---- KV cache ------------------------------------------------------------------------ */

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
    if (!kv->k || !kv->v)
        goto err;
    const size_t bytes = (size_t)n_ctx * m->hp.n_kv_head * m->hp.head_dim * sizeof(sw_f16);
    for (int i = 0; i < kv->n_layers; i++) {
        kv->k[i] = m->be->ops->buf_alloc(m->be, bytes);
        kv->v[i] = m->be->ops->buf_alloc(m->be, bytes);
        if (!kv->k[i] || !kv->v[i])
            goto err;
    }
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
    sw_backend_t *be = kv->m->be;
    for (int i = 0; i < kv->n_layers; i++) {
        if (kv->k && kv->k[i])
            be->ops->buf_free(be, kv->k[i]);
        if (kv->v && kv->v[i])
            be->ops->buf_free(be, kv->v[i]);
    }
    free(kv->k);
    free(kv->v);
    free(kv);
    *self_p = NULL;
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
    return 0;
}

/* ---- forward ---------------------------------------------------------------------------- */

static void s_layer_forward(sw_model_t *m, sw_kv_t *kv, int li, int n, int pos0, int prompt_order)
{
    sw_backend_t *be = m->be;
    const sw_backend_ops_t *ops = be->ops;
    const sw_hparams_t *hp = &m->hp;
    const s_layer_t *L = &m->layers[li];

    ops->rmsnorm(be, m->x, L->attn_norm, n, hp->n_embd, hp->rms_eps, m->xn);
    const sw_weight_t *qkv[3] = {&L->wq, &L->wk, &L->wv};
    const float *bias[3] = {L->bq, L->bk, L->bv};
    sw_buf_t *qkv_out[3] = {m->q, m->k, m->v};
    ops->matmul(be, 3, qkv, bias, m->xn, 0, n, qkv_out);
    if (L->q_norm) {
        ops->head_norm(be, m->q, n, hp->n_head, hp->head_dim, L->q_norm, hp->rms_eps);
        ops->head_norm(be, m->k, n, hp->n_kv_head, hp->head_dim, L->k_norm, hp->rms_eps);
    }
    ops->rope(be, m->q, n, hp->n_head, hp->head_dim, hp->n_rot, pos0, hp->rope_base,
              hp->rope_freq_scale, hp->rope_neox);
    ops->rope(be, m->k, n, hp->n_kv_head, hp->head_dim, hp->n_rot, pos0, hp->rope_base,
              hp->rope_freq_scale, hp->rope_neox);
    sw_attn_args_t a = {
        .q = m->q,
        .k = m->k,
        .v = m->v,
        .out = m->att,
        .k_cache = kv->k[li],
        .v_cache = kv->v[li],
        .n = n,
        .pos0 = pos0,
        .n_ctx = kv->n_ctx,
        .n_head = hp->n_head,
        .n_kv_head = hp->n_kv_head,
        .head_dim = hp->head_dim,
        .scale = 1.0f / sqrtf((float)hp->head_dim),
        .prompt_order = prompt_order,
    };
    ops->attention(be, &a);
    const sw_weight_t *wo[1] = {&L->wo};
    ops->matmul(be, 1, wo, NULL, m->att, 0, n, &m->tmp);
    ops->add(be, m->x, m->tmp, (size_t)n * hp->n_embd);

    ops->rmsnorm(be, m->x, L->ffn_norm, n, hp->n_embd, hp->rms_eps, m->xn);
    const sw_weight_t *gu[2] = {&L->w_gate, &L->w_up};
    sw_buf_t *gu_out[2] = {m->gate, m->up};
    ops->matmul(be, 2, gu, NULL, m->xn, 0, n, gu_out);
    ops->swiglu(be, m->gate, m->up, (size_t)n * hp->n_ff);
    const sw_weight_t *wd[1] = {&L->w_down};
    ops->matmul(be, 1, wd, NULL, m->gate, 0, n, &m->tmp);
    ops->add(be, m->x, m->tmp, (size_t)n * hp->n_embd);
}

int sw_model_forward(sw_model_t *m, sw_kv_t *kv, const sw_forward_t *f, char *err, size_t err_len)
{
    const sw_hparams_t *hp = &m->hp;
    sw_backend_t *be = m->be;
    const sw_backend_ops_t *ops = be->ops;
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

    const size_t row_bytes = (size_t)hp->n_embd * sizeof(float);
    const int first_logit_row = f->n - f->n_logits;
    for (int c0 = 0; c0 < f->n; c0 += SW_MODEL_BATCH) {
        const int n = f->n - c0 < SW_MODEL_BATCH ? f->n - c0 : SW_MODEL_BATCH;
        const int pos0 = kv->len + c0;
        if (sw_model_is_first(m))
            ops->get_rows(be, &m->tok_embd, f->tokens + c0, n, m->x);
        else
            ops->upload(be, m->x, 0, f->hidden + (size_t)c0 * hp->n_embd, (size_t)n * row_bytes);
        for (int li = 0; li < m->end - m->begin; li++)
            s_layer_forward(m, kv, li, n, pos0, f->prompt && f->n >= 2);
        if (!sw_model_is_last(m)) {
            ops->download(be, f->out_hidden + (size_t)c0 * hp->n_embd, m->x, 0,
                          (size_t)n * row_bytes);
            continue;
        }
        /* Rows of this chunk whose logits are wanted: [lo, n). */
        int lo = first_logit_row - c0;
        if (lo < 0)
            lo = 0;
        if (lo >= n)
            continue;
        const int nl = n - lo;
        ops->rmsnorm(be, m->x, m->out_norm, n, hp->n_embd, hp->rms_eps, m->xn);
        const sw_weight_t *out[1] = {&m->output};
        ops->matmul(be, 1, out, NULL, m->xn, lo, nl, &m->logits);
        ops->download(be, f->logits + (size_t)(c0 + lo - first_logit_row) * hp->n_vocab, m->logits,
                      0, (size_t)nl * hp->n_vocab * sizeof(float));
    }
    if (ops->sync)
        ops->sync(be);
    kv->len += f->n;
    return 0;
}
