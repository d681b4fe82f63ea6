/*
 * model_load.c - loading a layer range of a GGUF of the supported families
 * (Llama 2/3.x, Qwen2, Qwen3, Gemma 3, Qwen3-MoE) onto a backend (model.h):
 * the hyper-parameters, every tensor the range needs, the activation buffers
 * of each device, and the model's accessors.
 *
 * Every tensor the range needs is looked up by name and its type and shape
 * are checked against the hyper-parameters before anything runs, so that a
 * forward pass (forward.c) can trust them; every metadata value is range
 * checked; and each device's backend must have the operations the family
 * needs (s_check_backends), else the load fails with one line.
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

#include "log.h"
#include "model_impl.h"
#include "partial.h"

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

/* The architectures the engine runs, by general.architecture. */
static const struct {
    const char *name;
    enum sw_arch arch;
} s_archs[] = {
    {"llama", SW_ARCH_LLAMA}, {"mistral", SW_ARCH_LLAMA}, {"qwen2", SW_ARCH_QWEN2},
    {"qwen3", SW_ARCH_QWEN3}, {"gemma3", SW_ARCH_GEMMA3}, {"qwen3moe", SW_ARCH_QWEN3MOE},
};

/* A float key that must be finite and in [lo, hi] when present. */
static int s_get_float_in(const sw_gguf_t *g, const char *arch, const char *suffix, float *out,
                          float dflt, float lo, float hi, char *err, size_t err_len)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    double v;
    if (sw_gguf_get_f64(g, key, &v) != 0) {
        *out = dflt;
        return 0;
    }
    if (!(v >= lo && v <= hi)) {
        sw_errf(err, err_len, "model: metadata key '%s' = %g is out of range [%g, %g]", key, v,
                (double)lo, (double)hi);
        return -1;
    }
    *out = (float)v;
    return 0;
}

/* Gemma 3's sliding-window layers: <arch>.attention.sliding_window_pattern
 * as a period n (layer il is local when il % n < n - 1; default 6, as
 * llama.cpp) or as an array of one bool per layer. */
static int s_swa_pattern(const sw_gguf_t *g, const sw_hparams_t *hp, int il, int *out, char *err,
                         size_t err_len)
{
    char key[128];
    snprintf(key, sizeof key, "%s.attention.sliding_window_pattern", hp->arch_name);
    enum sw_gguf_vtype et;
    uint64_t n;
    if (sw_gguf_get_arr(g, key, &et, &n) == 0) {
        const unsigned char *b = sw_gguf_arr_data(g, key);
        if (et != SW_GGUF_BOOL || n != (uint64_t)hp->n_layer || !b) {
            sw_errf(err, err_len, "model: '%s' must be an array of %d bools", key, hp->n_layer);
            return -1;
        }
        *out = b[il] != 0;
        return 0;
    }
    int period = 6;
    if (s_get_int(g, hp->arch_name, "attention.sliding_window_pattern", &period, 6, 0, err,
                  err_len))
        return -1;
    *out = period == 0 || il % period < period - 1;
    return 0;
}

/* hp->arch_name and hp->arch from general.architecture; -1 (err) when it is
 * missing, too long or not one the engine runs. */
static int s_load_arch(const sw_gguf_t *g, sw_hparams_t *hp, char *err, size_t err_len)
{
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
    size_t ai = 0;
    while (ai < sizeof s_archs / sizeof s_archs[0] && strcmp(s_archs[ai].name, arch))
        ai++;
    if (ai == sizeof s_archs / sizeof s_archs[0]) {
        sw_errf(err, err_len,
                "model: architecture '%s' is not supported (supported: llama, mistral, qwen2, "
                "qwen3, gemma3, qwen3moe)",
                arch);
        return -1;
    }
    hp->arch = s_archs[ai].arch;
    return 0;
}

/* The mixture-of-experts keys (qwen3moe): the expert feed-forward size and
 * counts, checked against what the engine runs (no shared experts, softmax
 * gating without scale, a router over a hidden size divisible by 8). */
static int s_load_moe(const sw_gguf_t *g, sw_hparams_t *hp, char *err, size_t err_len)
{
    const char *arch = hp->arch_name;
    int shared = 0;
    if (s_get_int(g, arch, "expert_feed_forward_length", &hp->n_ff_exp, 0, 0, err, err_len) ||
        s_get_int(g, arch, "expert_shared_feed_forward_length", &shared, 0, 0, err, err_len))
        return -1;
    if (hp->n_ff_exp == 0 && hp->n_expert_used > 0) // llama.cpp's default
        hp->n_ff_exp = hp->n_ff / hp->n_expert_used;
    if (hp->n_expert < 1 || hp->n_expert > SW_MOE_MAX_EXPERTS || hp->n_expert_used < 1 ||
        hp->n_expert_used > hp->n_expert || hp->n_expert_used > SW_MOE_MAX_USED ||
        hp->n_ff_exp < 1) {
        sw_errf(err, err_len,
                "model: expert counts not supported (%d experts, %d used per token, expert "
                "ff %d; at most %d experts and %d used)",
                hp->n_expert, hp->n_expert_used, hp->n_ff_exp, SW_MOE_MAX_EXPERTS, SW_MOE_MAX_USED);
        return -1;
    }
    if (shared > 0) {
        sw_errf(err, err_len,
                "model: shared experts (%s.expert_shared_feed_forward_length) "
                "are not supported",
                arch);
        return -1;
    }
    float w_scale = 0;
    if (s_get_float_in(g, arch, "expert_weights_scale", &w_scale, 0, 0, 1e9f, err, err_len))
        return -1;
    int gating = 1;
    if (s_get_int(g, arch, "expert_gating_func", &gating, 1, 0, err, err_len))
        return -1;
    if ((w_scale != 0 && w_scale != 1) || gating != 1) {
        sw_errf(err, err_len,
                "model: expert weight scale %g / gating function %d are not supported "
                "(softmax gating, no scale)",
                (double)w_scale, gating);
        return -1;
    }
    if (hp->n_embd % 8) {
        sw_errf(err, err_len, "model: the router needs a hidden size divisible by 8 (has %d)",
                hp->n_embd);
        return -1;
    }
    if (hp->n_ff < 1)
        hp->n_ff = hp->n_ff_exp;
    return 0;
}

/* Head size, rotary dimensions, rms epsilon, rope base and scaling. */
static int s_load_rope(const sw_gguf_t *g, sw_hparams_t *hp, char *err, size_t err_len)
{
    const char *arch = hp->arch_name;
    int dflt_hd = hp->n_embd / hp->n_head, v_len = 0;
    if (s_get_int(g, arch, "attention.key_length", &hp->head_dim, dflt_hd, 0, err, err_len) ||
        s_get_int(g, arch, "attention.value_length", &v_len, hp->head_dim, 0, err, err_len) ||
        s_get_int(g, arch, "rope.dimension_count", &hp->n_rot, hp->head_dim, 0, err, err_len))
        return -1;
    if (hp->head_dim < 2 || hp->head_dim > 1024 || hp->n_rot < 2 || hp->n_rot > hp->head_dim ||
        hp->n_rot % 2 || v_len != hp->head_dim) {
        sw_errf(err, err_len, "model: head size %d (values %d) / rotary dims %d are not supported",
                hp->head_dim, v_len, hp->n_rot);
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

/* Gemma 3: the sliding window, the local layers' rope base, no logit
 * soft-capping, and the embedding and query scales. */
static int s_load_gemma3(const sw_gguf_t *g, sw_hparams_t *hp, char *err, size_t err_len)
{
    const char *arch = hp->arch_name;
    /* llama.cpp's gemma3 graph: embeddings times sqrt(n_embd), queries
     * times 1/sqrt(head_dim) (1/sqrt(n_embd / n_head) for the 62-layer
     * 27B) before an attention that scales by 1, local layers with their
     * own rope base (default 10000) and no rope scaling. */
    if (s_get_int(g, arch, "attention.sliding_window", &hp->n_swa, 0, 0, err, err_len) ||
        s_get_float_in(g, arch, "rope.freq_base_swa", &hp->rope_base_swa, 10000.0f, 1e-3f, 1e12f,
                       err, err_len))
        return -1;
    float softcap = 0;
    if (s_get_float_in(g, arch, "final_logit_softcapping", &softcap, 0, -1e9f, 1e9f, err,
                       err_len) ||
        s_get_float_in(g, arch, "attn_logit_softcapping", &softcap, softcap, -1e9f, 1e9f, err,
                       err_len))
        return -1;
    if (softcap != 0) {
        sw_errf(err, err_len, "model: gemma3 with logit soft-capping is not supported");
        return -1;
    }
    hp->embd_scale = sqrtf((float)hp->n_embd);
    hp->q_scale = hp->n_layer == 62 ? 1.0f / sqrtf((float)(hp->n_embd / hp->n_head))
                                    : 1.0f / sqrtf((float)hp->head_dim);
    return 0;
}

/* *hp from g's metadata, every value range checked and each family's own keys
 * read; 0, or -1 with one line in err. */
static int s_load_hparams(const sw_gguf_t *g, sw_hparams_t *hp, char *err, size_t err_len)
{
    memset(hp, 0, sizeof *hp);
    if (s_load_arch(g, hp, err, err_len) != 0)
        return -1;
    const char *arch = hp->arch_name;
    const int moe = hp->arch == SW_ARCH_QWEN3MOE;
    if (s_get_int(g, arch, "block_count", &hp->n_layer, 0, 1, err, err_len) ||
        s_get_int(g, arch, "embedding_length", &hp->n_embd, 0, 1, err, err_len) ||
        s_get_int(g, arch, "feed_forward_length", &hp->n_ff, 0, !moe, err, err_len) ||
        s_get_int(g, arch, "attention.head_count", &hp->n_head, 0, 1, err, err_len) ||
        s_get_int(g, arch, "attention.head_count_kv", &hp->n_kv_head, hp->n_head, 0, err,
                  err_len) ||
        s_get_int(g, arch, "context_length", &hp->n_ctx_train, 4096, 0, err, err_len) ||
        s_get_int(g, arch, "expert_count", &hp->n_expert, 0, 0, err, err_len) ||
        s_get_int(g, arch, "expert_used_count", &hp->n_expert_used, 0, 0, err, err_len))
        return -1;
    if (hp->n_layer < 1 || hp->n_embd < 1 || (hp->n_ff < 1 && !moe) || hp->n_head < 1 ||
        hp->n_kv_head < 1 || hp->n_head % hp->n_kv_head != 0) {
        sw_errf(err, err_len,
                "model: inconsistent sizes (layers %d, embd %d, ff %d, heads %d, kv heads %d)",
                hp->n_layer, hp->n_embd, hp->n_ff, hp->n_head, hp->n_kv_head);
        return -1;
    }
    if (!moe && hp->n_expert > 0) {
        sw_errf(err, err_len,
                "model: %s with %d experts per layer (a mixture of experts such as Mixtral) is "
                "not supported; of the mixture-of-experts families only qwen3moe is",
                arch, hp->n_expert);
        return -1;
    }
    if (moe && s_load_moe(g, hp, err, err_len) != 0)
        return -1;
    if (s_load_rope(g, hp, err, err_len) != 0)
        return -1;
    if (hp->arch == SW_ARCH_GEMMA3 && s_load_gemma3(g, hp, err, err_len) != 0)
        return -1;
    return 0;
}

/* ---- tensors ----------------------------------------------------------------------- */

/* Tensor name, its data in reach (a split set maps the part holding it): 0
 * with *t; 1 when it is absent and not required; -1 with err. */
static int s_tensor(sw_model_t *m, const char *name, int required, const sw_gguf_tensor_t **t,
                    char *err, size_t err_len)
{
    *t = sw_gguf_find_tensor(m->gguf, name);
    if (!*t && required)
        sw_errf(err, err_len, "model: tensor '%s' is missing from the file", name);
    if (!*t)
        return required ? -1 : 1;
    return sw_gguf_tensor_data(m->gguf, *t, err, err_len) ? 0 : -1;
}

/* A backend buffer holding bytes of the file (in place on the CPU), freed with the model. */
static sw_buf_t *s_weight_buf(sw_model_t *m, sw_backend_t *be, const char *name, const void *data,
                              uint64_t bytes, char *err, size_t err_len)
{
    if (m->n_owned == m->cap_owned) {
        int cap = m->cap_owned ? 2 * m->cap_owned : 64;
        sw_owned_t *o = realloc(m->owned, (size_t)cap * sizeof *o);
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
    m->owned[m->n_owned++] = (sw_owned_t){be, b};
    return b;
}

/* A 1-D f32 tensor of n elements, placed on be. */
static int s_vec(sw_model_t *m, sw_backend_t *be, const char *name, int64_t n, int required,
                 sw_buf_t **out, char *err, size_t err_len)
{
    *out = NULL;
    const sw_gguf_tensor_t *t;
    const int found = s_tensor(m, name, required, &t, err, err_len);
    if (found != 0)
        return found < 0 ? -1 : 0;
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

/* 1 when weights of type t can be computed (Q8_1 and Q8_K are activation types). */
static int s_weight_type_ok(enum sw_type t)
{
    return sw_type_supported(t) && t != SW_TYPE_Q8_1 && t != SW_TYPE_Q8_K;
}

/* The one line refusing tensor name of type t: the type, the tensor, the
 * types that can be computed and what to do. */
static void s_type_refusal(const char *name, enum sw_type t, char *err, size_t err_len)
{
    char list[256] = "";
    size_t at = 0;
    for (int i = 0; i < SW_TYPE_COUNT && at < sizeof list; i++)
        if (s_weight_type_ok((enum sw_type)i))
            at += (size_t)snprintf(list + at, sizeof list - at, "%s%s", at ? ", " : "",
                                   sw_type_name((enum sw_type)i));
    sw_errf(err, err_len,
            "model: tensor '%s' has type %s, which shardwire cannot compute (it computes %s): "
            "use a file of one of those types, e.g. llama-quantize --allow-requantize to Q4_K_M",
            name, sw_type_name(t), list);
}

/* A 2-D weight of n_out rows by n_in columns, placed on be. */
static int s_mat(sw_model_t *m, sw_backend_t *be, const char *name, int64_t n_in, int64_t n_out,
                 int required, sw_weight_t *w, char *err, size_t err_len)
{
    memset(w, 0, sizeof *w);
    const sw_gguf_tensor_t *t;
    const int found = s_tensor(m, name, required, &t, err, err_len);
    if (found != 0)
        return found < 0 ? -1 : 0;
    if (t->n_dims > 2 || t->ne[0] != n_in || t->ne[1] != n_out) {
        sw_errf(err, err_len, "model: tensor '%s' has shape [%lld, %lld], expected [%lld, %lld]",
                name, (long long)t->ne[0], (long long)t->ne[1], (long long)n_in, (long long)n_out);
        return -1;
    }
    if (!s_weight_type_ok(t->type)) {
        s_type_refusal(name, t->type, err, err_len);
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

/* A 3-D weight: n_expert matrices of n_out rows by n_in columns, one after
 * the other (a mixture-of-experts layer's expert tensors), placed on be. */
static int s_mat3(sw_model_t *m, sw_backend_t *be, const char *name, int64_t n_in, int64_t n_out,
                  int64_t n_expert, sw_weight_t *w, char *err, size_t err_len)
{
    memset(w, 0, sizeof *w);
    const sw_gguf_tensor_t *t;
    if (s_tensor(m, name, 1, &t, err, err_len) != 0)
        return -1;
    if (t->n_dims != 3 || t->ne[0] != n_in || t->ne[1] != n_out || t->ne[2] != n_expert) {
        sw_errf(err, err_len,
                "model: tensor '%s' has shape [%lld, %lld, %lld], expected [%lld, %lld, %lld]",
                name, (long long)t->ne[0], (long long)t->ne[1],
                (long long)(t->n_dims > 2 ? t->ne[2] : 1), (long long)n_in, (long long)n_out,
                (long long)n_expert);
        return -1;
    }
    if (!s_weight_type_ok(t->type) || sw_type_vec_dot(t->type) == SW_TYPE_COUNT) {
        s_type_refusal(name, t->type, err, err_len);
        return -1;
    }
    uint64_t rb;
    if (sw_type_row_bytes(t->type, n_in, &rb) != 0 ||
        rb * (uint64_t)n_out * (uint64_t)n_expert != t->n_bytes) {
        sw_errf(err, err_len, "model: tensor '%s' rows do not fit its type", name);
        return -1;
    }
    w->type = t->type;
    w->n_in = n_in;
    w->n_out = n_out;
    w->n_expert = (int)n_expert;
    w->row_bytes = (size_t)rb;
    w->host = t->data;
    w->buf = s_weight_buf(m, be, name, t->data, t->n_bytes, err, err_len);
    if (!w->buf)
        return -1;
    m->weight_bytes += t->n_bytes;
    return 0;
}

static int s_load_layer(sw_model_t *m, int il, sw_layer_t *L, char *err, size_t err_len)
{
    const sw_hparams_t *hp = &m->hp;
    sw_backend_t *be = m->devs[L->dev].be;
    const int64_t q_dim = (int64_t)hp->n_head * hp->head_dim;
    const int64_t kv_dim = (int64_t)hp->n_kv_head * hp->head_dim;
    const int qk_norm =
        hp->arch == SW_ARCH_QWEN3 || hp->arch == SW_ARCH_QWEN3MOE || hp->arch == SW_ARCH_GEMMA3;
    const int gemma = hp->arch == SW_ARCH_GEMMA3, moe = hp->n_expert > 0;
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
        s_vec(m, be, S_NAME("ffn_norm.weight"), hp->n_embd, 1, &L->ffn_norm, err, err_len))
        return -1;
    if (gemma && (s_vec(m, be, S_NAME("post_attention_norm.weight"), hp->n_embd, 1,
                        &L->attn_post_norm, err, err_len) ||
                  s_vec(m, be, S_NAME("post_ffw_norm.weight"), hp->n_embd, 1, &L->ffn_post_norm,
                        err, err_len)))
        return -1;
    if (moe) {
        if (s_mat(m, be, S_NAME("ffn_gate_inp.weight"), hp->n_embd, hp->n_expert, 1, &L->router,
                  err, err_len) ||
            s_mat3(m, be, S_NAME("ffn_gate_exps.weight"), hp->n_embd, hp->n_ff_exp, hp->n_expert,
                   &L->gate_exps, err, err_len) ||
            s_mat3(m, be, S_NAME("ffn_up_exps.weight"), hp->n_embd, hp->n_ff_exp, hp->n_expert,
                   &L->up_exps, err, err_len) ||
            s_mat3(m, be, S_NAME("ffn_down_exps.weight"), hp->n_ff_exp, hp->n_embd, hp->n_expert,
                   &L->down_exps, err, err_len))
            return -1;
        if (L->router.type != SW_TYPE_F32) {
            sw_errf(err, err_len, "model: the router of layer %d is %s; only f32 is supported", il,
                    sw_type_name(L->router.type));
            return -1;
        }
        if (L->gate_exps.type != L->up_exps.type) {
            sw_errf(err, err_len, "model: layer %d's gate and up experts differ in type (%s, %s)",
                    il, sw_type_name(L->gate_exps.type), sw_type_name(L->up_exps.type));
            return -1;
        }
    } else if (s_mat(m, be, S_NAME("ffn_gate.weight"), hp->n_embd, hp->n_ff, 1, &L->w_gate, err,
                     err_len) ||
               s_mat(m, be, S_NAME("ffn_up.weight"), hp->n_embd, hp->n_ff, 1, &L->w_up, err,
                     err_len) ||
               s_mat(m, be, S_NAME("ffn_down.weight"), hp->n_ff, hp->n_embd, 1, &L->w_down, err,
                     err_len))
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
    if (gemma && hp->n_swa > 0 && s_swa_pattern(m->gguf, hp, il, &L->swa, err, err_len) != 0)
        return -1;
    return 0;
}

/* What the range needs of each device's backend beyond the operations every
 * backend has: one line naming what is missing. */
static int s_check_backends(sw_model_t *m, char *err, size_t err_len)
{
    const sw_hparams_t *hp = &m->hp;
    for (int i = 0; i < m->n_dev; i++) {
        const sw_dev_t *d = &m->devs[i];
        const sw_backend_ops_t *ops = d->be->ops;
        int swa = 0;
        for (int l = d->l0; l < d->l1; l++)
            swa |= m->layers[l].swa;
        const char *missing = NULL;
        if (hp->arch == SW_ARCH_GEMMA3 && (!ops->scale || !ops->geglu))
            missing = "the scale and GELU operations";
        else if (swa && !ops->attn_swa)
            missing = "sliding-window attention";
        else if (hp->n_expert > 0 && !ops->moe)
            missing = "the mixture-of-experts operation";
        if (missing) {
            sw_errf(err, err_len,
                    "model: the %s backend cannot run %s models yet (it lacks %s); use the cpu "
                    "backend",
                    d->be->name, hp->arch_name, missing);
            return -1;
        }
    }
    return 0;
}

/* Llama 3.1/3.2's rope frequency factors (rope_freqs.weight, n_rot / 2 f32
 * values > 0), copied to m->rope_freqs; llama.cpp reads them for llama only. */
static int s_rope_freqs(sw_model_t *m, char *err, size_t err_len)
{
    const sw_hparams_t *hp = &m->hp;
    const sw_gguf_tensor_t *t;
    const int found = s_tensor(m, "rope_freqs.weight", 0, &t, err, err_len);
    if (found != 0)
        return found < 0 ? -1 : 0;
    if (hp->arch != SW_ARCH_LLAMA) {
        sw_errf(err, err_len, "model: rope_freqs.weight in a %s model is not supported",
                hp->arch_name);
        return -1;
    }
    const int n = hp->n_rot / 2;
    if (t->type != SW_TYPE_F32 || t->n_dims != 1 || t->n_elements != (uint64_t)n) {
        sw_errf(err, err_len, "model: tensor 'rope_freqs.weight' must be f32 with %d elements", n);
        return -1;
    }
    m->rope_freqs = malloc((size_t)n * sizeof *m->rope_freqs);
    if (!m->rope_freqs) {
        sw_errf(err, err_len, "model: out of memory");
        return -1;
    }
    memcpy(m->rope_freqs, t->data, (size_t)n * sizeof *m->rope_freqs);
    for (int i = 0; i < n; i++)
        if (!(m->rope_freqs[i] > 0) || !isfinite(m->rope_freqs[i])) {
            sw_errf(err, err_len, "model: rope_freqs.weight[%d] = %g is not a positive number", i,
                    (double)m->rope_freqs[i]);
            return -1;
        }
    m->hp.rope_freqs = 1;
    return 0;
}

static sw_buf_t *s_alloc(sw_backend_t *be, size_t n_floats)
{
    return be->ops->buf_alloc(be, n_floats * sizeof(float));
}

/* Activation buffers of device d. */
static int s_dev_buffers(sw_model_t *m, sw_dev_t *d, int last, char *err, size_t err_len)
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
    const size_t ff = hp->n_expert > 0 ? 1 : (size_t)hp->n_ff; // the MoE op keeps its own
    d->gate = s_alloc(be, B * ff);
    d->up = s_alloc(be, B * ff);
    d->ctl = be->ops->buf_alloc(be, SW_CTL_CAP(B) * sizeof(int32_t));
    int ok =
        d->x && d->xn && d->q && d->k && d->v && d->att && d->tmp && d->gate && d->up && d->ctl;
    if (ok && last) {
        d->logits = s_alloc(be, (size_t)m->logit_rows * hp->n_vocab);
        d->loop_ctl = be->ops->buf_alloc(be, SW_MODEL_LOOP_MAX * SW_CTL_LEN(1) * sizeof(int32_t));
        d->loop_ids = be->ops->buf_alloc(be, SW_MODEL_LOOP_MAX * sizeof(int32_t));
        d->loop_prob = s_alloc(be, SW_MODEL_LOOP_MAX);
        ok = d->logits && d->loop_ctl && d->loop_ids && d->loop_prob;
        for (int i = 0; ok && i < SW_MODEL_LOOP_MAX; i++) {
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

/* m->fingerprint: a partial file's records the whole file's; a file or a
 * split set hashes its headers and first MiB of data (partial.h). */
static int s_fingerprint(sw_model_t *m, const sw_partial_info_t *part, char *err, size_t err_len)
{
    if (part) {
        memcpy(m->fingerprint, part->fingerprint, 65); /* the whole file's, recorded by the pull */
        return 0;
    }
    const uint64_t n = sw_fingerprint_data_len(m->gguf);
    uint8_t *data = malloc(n ? (size_t)n : 1);
    if (!data) {
        sw_errf(err, err_len, "model: out of memory");
        return -1;
    }
    const int rc =
        sw_gguf_read(m->gguf, 0, sw_gguf_data_offset(m->gguf), data, (size_t)n, err, err_len);
    if (rc == 0)
        sw_fingerprint_of(m->gguf, data, m->fingerprint);
    free(data);
    return rc;
}

/* What a partial file says (sw_partial_info), checked against m's range, and
 * m->fingerprint: 1 for a partial file, 0 for a whole one, -1 with err. */
static int s_partial(sw_model_t *m, sw_partial_info_t *part, char *err, size_t err_len)
{
    const int partial = sw_partial_info(m->gguf, m->hp.n_layer, part, err, err_len);
    if (partial < 0)
        return -1;
    if (partial && (m->begin < part->begin || m->end > part->end)) {
        sw_errf(err, err_len,
                "model: this partial file holds layers %d:%d of the %d-layer model, not %d:%d; "
                "download them with: shardwire pull %s --layers %d:%d",
                part->begin, part->end, m->hp.n_layer, m->begin, m->end, part->source, m->begin,
                m->end);
        return -1;
    }
    return s_fingerprint(m, partial ? part : NULL, err, err_len) == 0 ? partial : -1;
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
    sw_partial_info_t part;
    const int partial = s_partial(m, &part, err, err_len);
    if (partial < 0)
        goto err;

    /* The vocabulary size comes from the embedding matrix, which every
     * stage can read the header of without touching its data (a partial
     * file without it records its row count). */
    const sw_gguf_tensor_t *te = sw_gguf_find_tensor(m->gguf, "token_embd.weight");
    if (!te && partial) {
        hp->n_vocab = part.n_vocab;
    } else if (!te || te->n_dims != 2 || te->ne[0] != hp->n_embd || te->ne[1] < 1 ||
               te->ne[1] > (1 << 22)) {
        sw_errf(err, err_len, "model: tensor 'token_embd.weight' is missing or not [%d, n_vocab]",
                hp->n_embd);
        goto err;
    } else {
        hp->n_vocab = (int)te->ne[1];
    }
    if (s_rope_freqs(m, err, err_len) != 0)
        goto err;

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
    /* A mixture-of-experts layer computes an expert in the tiled order when
     * 8 rows of the prompt window go to it (as llama.cpp's MUL_MAT_ID per
     * ubatch): on the CPU a whole window is one chunk, so the count is the
     * window's. */
    if (hp->n_expert > 0 && m->n_dev == 1 && !strcmp(be->ops ? be->ops->name : "", "cpu"))
        m->batch = SW_MODEL_PROMPT_WINDOW;
    m->logit_rows = m->batch < SW_MODEL_BATCH ? m->batch : SW_MODEL_BATCH;
    m->layers = calloc((size_t)n_layers, sizeof *m->layers);
    m->ctl_host = malloc((SW_CTL_CAP((size_t)m->batch) + SW_MODEL_LOOP_MAX * SW_CTL_LEN(1)) *
                         sizeof *m->ctl_host);
    if (!m->layers || !m->ctl_host) {
        sw_errf(err, err_len, "model: out of memory");
        goto err;
    }
    for (int i = 0; i < m->n_dev; i++) {
        sw_dev_t *d = &m->devs[i];
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
    if (s_check_backends(m, err, err_len) != 0)
        goto err;
    for (int i = 0; i < m->n_dev; i++)
        if (s_dev_buffers(m, &m->devs[i], i == m->n_dev - 1 && sw_model_is_last(m), err, err_len))
            goto err;
    return m;
err:
    sw_model_free(&m);
    return NULL;
}

void sw_model_buf_free(sw_backend_t *be, sw_buf_t **b)
{
    if (*b)
        be->ops->buf_free(be, *b);
    *b = NULL;
}

int sw_model_fail(sw_backend_t *be, char *err, size_t err_len)
{
    sw_errf(err, err_len, "model: %s: %s", be->name, sw_backend_error(be));
    return -1;
}

void sw_model_free(sw_model_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    sw_model_t *m = *self_p;
    for (int i = 0; i < m->n_dev; i++) {
        sw_dev_t *d = &m->devs[i];
        sw_backend_t *be = d->be;
        if (!be) /* a load that failed before its devices were set up */
            continue;
        for (int j = 0; j < SW_MODEL_LOOP_MAX; j++)
            sw_model_buf_free(be, &d->loop_step[j]);
        for (int j = 0; j < SW_MODEL_MAX_PIECES; j++)
            sw_model_buf_free(be, &d->pctl_v[j]);
        sw_buf_t **bufs[] = {&d->x,         &d->xn,   &d->q,        &d->k,        &d->v,
                             &d->att,       &d->tmp,  &d->gate,     &d->up,       &d->logits,
                             &d->ctl,       &d->rope, &d->rope_swa, &d->loop_ctl, &d->loop_ids,
                             &d->loop_prob, &d->pctl};
        for (size_t j = 0; j < sizeof bufs / sizeof bufs[0]; j++)
            sw_model_buf_free(be, bufs[j]);
        if (be->ops->graph_reset)
            be->ops->graph_reset(be);
    }
    for (int i = 0; i < m->n_owned; i++)
        m->owned[i].be->ops->buf_free(m->owned[i].be, m->owned[i].buf);
    free(m->owned);
    free(m->layers);
    free(m->ctl_host);
    free(m->gather_host);
    free(m->rope_freqs);
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
     * (unless it is also the LM head, which reads it all), and of each
     * mixture-of-experts layer only the experts a token is routed to. */
    uint64_t b = m->weight_bytes;
    if (m->tok_embd.buf && m->output.host != m->tok_embd.host)
        b -= m->tok_embd.row_bytes * (uint64_t)m->tok_embd.n_out;
    for (int i = 0; m->hp.n_expert > 0 && i < m->end - m->begin; i++) {
        const sw_layer_t *L = &m->layers[i];
        const sw_weight_t *ws[] = {&L->gate_exps, &L->up_exps, &L->down_exps};
        for (size_t j = 0; j < sizeof ws / sizeof ws[0]; j++) {
            const uint64_t one = ws[j]->row_bytes * (uint64_t)ws[j]->n_out;
            b -= one * (uint64_t)(m->hp.n_expert - m->hp.n_expert_used);
        }
    }
    return b;
}

sw_backend_t *sw_model_backend(const sw_model_t *m)
{
    return m->be;
}

int sw_model_trees(const sw_model_t *m)
{
    for (int d = 0; d < m->n_dev; d++)
        if (!m->devs[d].be->ops->kv_move)
            return 0;
    return 1;
}

void sw_model_fingerprint(const sw_model_t *m, char out[65])
{
    memcpy(out, m->fingerprint, 65);
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
        const sw_layer_t *L = &m->layers[i];
        const sw_weight_t *ws[] = {&L->wq,        &L->wk,      &L->wv,       &L->wo,
                                   &L->w_gate,    &L->w_up,    &L->w_down,   &L->router,
                                   &L->gate_exps, &L->up_exps, &L->down_exps};
        for (size_t j = 0; j < sizeof ws / sizeof ws[0]; j++) {
            const uint64_t mats = ws[j]->n_expert > 0 ? (uint64_t)ws[j]->n_expert : 1;
            if (ws[j]->host)
                done = s_touch(ws[j]->host, ws[j]->row_bytes * (uint64_t)ws[j]->n_out * mats, done,
                               total, progress, ctx);
        }
    }
    if (m->output.host && m->output.host != m->tok_embd.host)
        done = s_touch(m->output.host, m->output.row_bytes * (uint64_t)m->output.n_out, done, total,
                       progress, ctx);
    if (progress)
        progress(total, total, ctx);
}
