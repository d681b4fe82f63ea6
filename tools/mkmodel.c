/*
 * mkmodel.c - shardwire-mkmodel: writes GGUF models for tests and benchmarks
 * where the real ones cannot go (the GPU check machine reaches no network and
 * receives at most 64 MiB with the checkout).
 *
 *   shardwire-mkmodel --from IN.gguf --layers N [--embd-type q4_0|q8_0] -o OUT.gguf
 *       the first N layers of a real model with its tokenizer and every other
 *       key; block_count becomes N; the embedding (and a tied LM head) may be
 *       re-quantized to a smaller type
 *   shardwire-mkmodel --synth PRESET [--seed S] [--layers N] -o OUT.gguf
 *       a model of a real model's shapes and tensor types with random weights
 *       scaled so that activations stay in range (no tokenizer: use token ids)
 *
 * Presets (shapes and the type mix of the files named):
 *   qwen2.5-1.5b  Qwen2.5-Coder-1.5B-Instruct.Q4_K_M (q4_K, q6_K, biases)
 *   qwen2.5-0.5b  Qwen2.5-Coder-0.5B-Instruct.Q4_K_M (q5_0, q8_0, q6_K)
 *   smollm2-135m  SmolLM2-135M-Instruct.Q4_1 (q4_1, q8_0 tied embedding)
 *   tiny-float    a 4-layer llama with f16, bf16 and f32 matrices
 *   tiny-qwen3    a 4-layer qwen3 (QK norm) with q4_0, q5_1, q5_K and q8_0
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "gguf.h"
#include "quant.h"

/* ---- a GGUF v3 writer ------------------------------------------------------------------ */

typedef struct s_tensor {
    char name[96];
    int n_dims;
    int64_t ne[2];
    enum sw_type type;
    void *data; // owned
    uint64_t bytes;
} s_tensor_t;

typedef struct s_out {
    FILE *f;
    int failed;
} s_out_t;

static void s_put(s_out_t *o, const void *p, size_t n)
{
    if (n && fwrite(p, 1, n, o->f) != n)
        o->failed = 1;
}

static void s_u32(s_out_t *o, uint32_t v)
{
    s_put(o, &v, 4);
}

static void s_u64(s_out_t *o, uint64_t v)
{
    s_put(o, &v, 8);
}

static void s_str(s_out_t *o, const char *p, uint64_t n)
{
    s_u64(o, n);
    s_put(o, p, (size_t)n);
}

/* Creates path and writes the GGUF v3 header's counts. 0 or -1 (printed). */
static int s_open(s_out_t *o, const char *path, int64_t n_tensors, int64_t n_kv)
{
    o->f = fopen(path, "wb");
    o->failed = 0;
    if (!o->f) {
        fprintf(stderr, "shardwire-mkmodel: cannot write %s: %s\n", path, strerror(errno));
        return -1;
    }
    s_u32(o, 0x46554747u); // "GGUF"
    s_u32(o, 3);
    s_u64(o, (uint64_t)n_tensors);
    s_u64(o, (uint64_t)n_kv);
    return 0;
}

/* One key/value of src, re-serialized (block_count replaced by n_layers when >= 0). */
static int s_copy_kv(s_out_t *o, const sw_gguf_t *g, int64_t i, const char *block_key, int n_layers)
{
    sw_gguf_str_t k = sw_gguf_kv_key(g, i);
    char key[256];
    if (k.len >= sizeof key)
        return -1;
    memcpy(key, k.ptr, k.len);
    key[k.len] = 0;
    enum sw_gguf_vtype t = sw_gguf_kv_type(g, i);
    s_str(o, key, k.len);
    if (n_layers >= 0 && !strcmp(key, block_key)) {
        s_u32(o, SW_GGUF_UINT32);
        s_u32(o, (uint32_t)n_layers);
        return 0;
    }
    s_u32(o, (uint32_t)t);
    if (t == SW_GGUF_STRING) {
        sw_gguf_str_t v;
        if (sw_gguf_get_str(g, key, &v) != 0)
            return -1;
        s_str(o, v.ptr, v.len);
        return 0;
    }
    if (t == SW_GGUF_ARRAY) {
        enum sw_gguf_vtype et;
        uint64_t n;
        if (sw_gguf_get_arr(g, key, &et, &n) != 0)
            return -1;
        s_u32(o, (uint32_t)et);
        s_u64(o, n);
        if (et == SW_GGUF_STRING) {
            for (uint64_t j = 0; j < n; j++) {
                sw_gguf_str_t v;
                if (sw_gguf_arr_str(g, key, j, &v) != 0)
                    return -1;
                s_str(o, v.ptr, v.len);
            }
            return 0;
        }
        const size_t es = (size_t)sw_gguf_vtype_size(et);
        const void *data = sw_gguf_arr_data(g, key);
        if (!es || !data)
            return -1;
        s_put(o, data, (size_t)n * es);
        return 0;
    }
    /* Scalars: read back through the typed getters in the stored width. */
    const size_t es = (size_t)sw_gguf_vtype_size(t);
    unsigned char buf[8] = {0};
    if (t == SW_GGUF_FLOAT32 || t == SW_GGUF_FLOAT64) {
        double d;
        if (sw_gguf_get_f64(g, key, &d) != 0)
            return -1;
        float f = (float)d;
        memcpy(buf, t == SW_GGUF_FLOAT32 ? (void *)&f : (void *)&d, es);
    } else if (t == SW_GGUF_BOOL) {
        int b;
        if (sw_gguf_get_bool(g, key, &b) != 0)
            return -1;
        buf[0] = (unsigned char)(b != 0);
    } else if (t == SW_GGUF_UINT64) {
        uint64_t u;
        if (sw_gguf_get_u64(g, key, &u) != 0)
            return -1;
        memcpy(buf, &u, 8);
    } else {
        int64_t v;
        if (sw_gguf_get_i64(g, key, &v) != 0)
            return -1;
        memcpy(buf, &v, es); // little-endian: the low bytes hold the value
    }
    s_put(o, buf, es);
    return 0;
}

/* Header key/values written by the synthetic mode. */
typedef struct s_kv {
    const char *key;
    int is_str;
    const char *s;
    uint32_t u;
    float f;
    int is_f;
} s_kv_t;

static void s_write_kv(s_out_t *o, const s_kv_t *kv)
{
    s_str(o, kv->key, strlen(kv->key));
    if (kv->is_str) {
        s_u32(o, SW_GGUF_STRING);
        s_str(o, kv->s, strlen(kv->s));
    } else if (kv->is_f) {
        s_u32(o, SW_GGUF_FLOAT32);
        s_put(o, &kv->f, 4);
    } else {
        s_u32(o, SW_GGUF_UINT32);
        s_u32(o, kv->u);
    }
}

static void s_write_tensors(s_out_t *o, const s_tensor_t *ts, int n)
{
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        s_str(o, ts[i].name, strlen(ts[i].name));
        s_u32(o, (uint32_t)ts[i].n_dims);
        for (int d = 0; d < ts[i].n_dims; d++)
            s_u64(o, (uint64_t)ts[i].ne[d]);
        s_u32(o, (uint32_t)ts[i].type);
        s_u64(o, off);
        off += (ts[i].bytes + 31) & ~(uint64_t)31;
    }
    static const unsigned char zero[32] = {0};
    long pos = ftell(o->f);
    if (pos < 0)
        o->failed = 1;
    else if (pos % 32)
        s_put(o, zero, (size_t)(32 - pos % 32));
    for (int i = 0; i < n; i++) {
        s_put(o, ts[i].data, (size_t)ts[i].bytes);
        if (ts[i].bytes % 32)
            s_put(o, zero, (size_t)(32 - ts[i].bytes % 32));
    }
}

/* ---- random weights ------------------------------------------------------------------------ */

static uint64_t s_rng;

static uint32_t s_rand(void)
{
    s_rng ^= s_rng << 13;
    s_rng ^= s_rng >> 7;
    s_rng ^= s_rng << 17;
    return (uint32_t)(s_rng >> 32);
}

static float s_unif(float a) // uniform in [-a, a)
{
    return a * (2.0f * (float)(s_rand() >> 8) / 16777216.0f - 1.0f);
}

static void s_put_f16(uint8_t *p, float f)
{
    sw_f16 h = sw_f32_to_f16(f);
    memcpy(p, &h, 2);
}

/* Random blocks of type t whose elements have about standard deviation sd. */
static int s_random_matrix(enum sw_type t, int64_t n_in, int64_t n_out, float sd, void **out,
                           uint64_t *bytes)
{
    uint64_t rb;
    if (sw_type_row_bytes(t, n_in, &rb) != 0)
        return -1;
    *bytes = rb * (uint64_t)n_out;
    uint8_t *p = malloc((size_t)*bytes);
    if (!p)
        return -1;
    for (uint64_t i = 0; i + 4 <= *bytes; i += 4) {
        uint32_t r = s_rand();
        memcpy(p + i, &r, 4);
    }
    const float a = sd * 1.7320508f; // uniform [-a, a) has deviation sd
    const size_t bb = sw_type_block_bytes(t);
    const uint64_t nb = *bytes / bb;
    for (uint64_t b = 0; b < nb; b++) {
        uint8_t *q = p + b * bb;
        switch (t) {
        case SW_TYPE_Q4_0:
            s_put_f16(q, a / 8);
            break;
        case SW_TYPE_Q5_0:
            s_put_f16(q, a / 16);
            break;
        case SW_TYPE_Q4_1:
            s_put_f16(q, 2 * a / 15);
            s_put_f16(q + 2, -a);
            break;
        case SW_TYPE_Q5_1:
            s_put_f16(q, 2 * a / 31);
            s_put_f16(q + 2, -a);
            break;
        case SW_TYPE_Q8_0:
            s_put_f16(q, a / 127);
            for (int j = 0; j < 32; j++)
                if (q[2 + j] == 0x80)
                    q[2 + j] = 0x81;
            break;
        case SW_TYPE_Q4_K:
            s_put_f16(q, sd / 263);
            s_put_f16(q + 2, sd / 263 * 7.5f);
            break;
        case SW_TYPE_Q5_K:
            s_put_f16(q, sd / 520);
            s_put_f16(q + 2, sd / 520 * 15.5f);
            break;
        case SW_TYPE_Q6_K:
            s_put_f16(q + 208, sd / 1370);
            break;
        case SW_TYPE_F16:
            s_put_f16(q, s_unif(a));
            break;
        case SW_TYPE_BF16: {
            sw_bf16 v = sw_f32_to_bf16(s_unif(a));
            memcpy(q, &v, 2);
            break;
        }
        case SW_TYPE_F32: {
            float v = s_unif(a);
            memcpy(q, &v, 4);
            break;
        }
        default:
            free(p);
            return -1;
        }
    }
    *out = p;
    return 0;
}

static int s_random_vec(int64_t n, float center, float spread, void **out, uint64_t *bytes)
{
    float *v = malloc((size_t)n * sizeof *v);
    if (!v)
        return -1;
    for (int64_t i = 0; i < n; i++)
        v[i] = center + s_unif(spread);
    *out = v;
    *bytes = (uint64_t)n * sizeof *v;
    return 0;
}

/* ---- presets -------------------------------------------------------------------------------- */

typedef struct s_preset {
    const char *name;
    const char *arch;
    int n_layer, n_embd, n_ff, n_head, n_kv_head, n_vocab, n_ctx;
    float rope_base, eps;
    enum sw_type embd, out; // out = SW_TYPE_COUNT: tied to the embedding
    enum sw_type q, k, v, o, gate, up, down;
    enum sw_type v_first, down_first; // in the first two layers (Q4_K_M's mix)
    int bias, qk_norm;
} s_preset_t;

static const s_preset_t s_presets[] = {
    {"qwen2.5-1.5b",
     "qwen2",
     28,
     1536,
     8960,
     12,
     2,
     151936,
     32768,
     1e6f,
     1e-6f,
     SW_TYPE_Q4_K,
     SW_TYPE_Q6_K,
     SW_TYPE_Q4_K,
     SW_TYPE_Q4_K,
     SW_TYPE_Q4_K,
     SW_TYPE_Q4_K,
     SW_TYPE_Q4_K,
     SW_TYPE_Q4_K,
     SW_TYPE_Q4_K,
     SW_TYPE_Q6_K,
     SW_TYPE_Q6_K,
     1,
     0},
    {"qwen2.5-0.5b",
     "qwen2",
     24,
     896,
     4864,
     14,
     2,
     151936,
     32768,
     1e6f,
     1e-6f,
     SW_TYPE_Q5_0,
     SW_TYPE_Q8_0,
     SW_TYPE_Q5_0,
     SW_TYPE_Q5_0,
     SW_TYPE_Q8_0,
     SW_TYPE_Q5_0,
     SW_TYPE_Q5_0,
     SW_TYPE_Q5_0,
     SW_TYPE_Q6_K,
     SW_TYPE_Q8_0,
     SW_TYPE_Q6_K,
     1,
     0},
    {"smollm2-135m",
     "llama",
     30,
     576,
     1536,
     9,
     3,
     49152,
     8192,
     1e5f,
     1e-5f,
     SW_TYPE_Q8_0,
     SW_TYPE_COUNT,
     SW_TYPE_Q4_1,
     SW_TYPE_Q4_1,
     SW_TYPE_Q4_1,
     SW_TYPE_Q4_1,
     SW_TYPE_Q4_1,
     SW_TYPE_Q4_1,
     SW_TYPE_Q4_1,
     SW_TYPE_Q4_1,
     SW_TYPE_Q4_1,
     0,
     0},
    {"tiny-float",
     "llama",
     4,
     256,
     640,
     4,
     2,
     4096,
     2048,
     1e4f,
     1e-5f,
     SW_TYPE_F16,
     SW_TYPE_F32,
     SW_TYPE_F16,
     SW_TYPE_BF16,
     SW_TYPE_F32,
     SW_TYPE_F16,
     SW_TYPE_BF16,
     SW_TYPE_F16,
     SW_TYPE_F32,
     SW_TYPE_BF16,
     SW_TYPE_F16,
     0,
     0},
    {"tiny-qwen3",
     "qwen3",
     4,
     512,
     1536,
     8,
     4,
     8192,
     4096,
     1e6f,
     1e-6f,
     SW_TYPE_Q8_0,
     SW_TYPE_Q5_K,
     SW_TYPE_Q4_0,
     SW_TYPE_Q5_1,
     SW_TYPE_Q8_0,
     SW_TYPE_Q4_0,
     SW_TYPE_Q5_K,
     SW_TYPE_Q4_0,
     SW_TYPE_Q5_1,
     SW_TYPE_Q8_0,
     SW_TYPE_Q6_K,
     0,
     1},
};

static int s_add(s_tensor_t *ts, int *n, const char *name, int n_dims, int64_t ne0, int64_t ne1,
                 enum sw_type t, void *data, uint64_t bytes)
{
    s_tensor_t *x = &ts[(*n)++];
    snprintf(x->name, sizeof x->name, "%s", name);
    x->n_dims = n_dims;
    x->ne[0] = ne0;
    x->ne[1] = ne1;
    x->type = t;
    x->data = data;
    x->bytes = bytes;
    return 0;
}

static int s_synth(const s_preset_t *p, int n_layers, const char *path)
{
    const int L = n_layers > 0 ? n_layers : p->n_layer;
    const int hd = p->n_embd / p->n_head, kvd = hd * p->n_kv_head;
    s_tensor_t *ts = calloc((size_t)L * 16 + 8, sizeof *ts);
    if (!ts)
        return -1;
    int n = 0, rc = -1;
    void *d;
    uint64_t b;
    const float sd_e = 1.0f / sqrtf((float)p->n_embd), sd_f = 1.0f / sqrtf((float)p->n_ff);
#define S_MAT(name, t, n_in, n_out, sd)                                                            \
    do {                                                                                           \
        if (s_random_matrix((t), (n_in), (n_out), (sd), &d, &b) != 0)                              \
            goto out;                                                                              \
        s_add(ts, &n, (name), 2, (n_in), (n_out), (t), d, b);                                      \
    } while (0)
#define S_VEC(name, len, c, s)                                                                     \
    do {                                                                                           \
        if (s_random_vec((len), (c), (s), &d, &b) != 0)                                            \
            goto out;                                                                              \
        s_add(ts, &n, (name), 1, (len), 1, SW_TYPE_F32, d, b);                                     \
    } while (0)
    S_MAT("token_embd.weight", p->embd, p->n_embd, p->n_vocab, sd_e);
    S_VEC("output_norm.weight", p->n_embd, 1.0f, 0.1f);
    if (p->out != SW_TYPE_COUNT)
        S_MAT("output.weight", p->out, p->n_embd, p->n_vocab, sd_e);
    char nm[96];
    for (int l = 0; l < L; l++) {
#define S_NM(s) (snprintf(nm, sizeof nm, "blk.%d." s, l), nm)
        S_VEC(S_NM("attn_norm.weight"), p->n_embd, 1.0f, 0.1f);
        S_MAT(S_NM("attn_q.weight"), p->q, p->n_embd, p->n_embd, sd_e);
        S_MAT(S_NM("attn_k.weight"), p->k, p->n_embd, kvd, sd_e);
        S_MAT(S_NM("attn_v.weight"), l < 2 ? p->v_first : p->v, p->n_embd, kvd, sd_e);
        S_MAT(S_NM("attn_output.weight"), p->o, p->n_embd, p->n_embd, sd_e);
        if (p->bias) {
            S_VEC(S_NM("attn_q.bias"), p->n_embd, 0.0f, 0.1f);
            S_VEC(S_NM("attn_k.bias"), kvd, 0.0f, 0.1f);
            S_VEC(S_NM("attn_v.bias"), kvd, 0.0f, 0.1f);
        }
        if (p->qk_norm) {
            S_VEC(S_NM("attn_q_norm.weight"), hd, 1.0f, 0.1f);
            S_VEC(S_NM("attn_k_norm.weight"), hd, 1.0f, 0.1f);
        }
        S_VEC(S_NM("ffn_norm.weight"), p->n_embd, 1.0f, 0.1f);
        S_MAT(S_NM("ffn_gate.weight"), p->gate, p->n_embd, p->n_ff, sd_e);
        S_MAT(S_NM("ffn_up.weight"), p->up, p->n_embd, p->n_ff, sd_e);
        S_MAT(S_NM("ffn_down.weight"), l < 2 ? p->down_first : p->down, p->n_ff, p->n_embd, sd_f);
#undef S_NM
    }
#undef S_MAT
#undef S_VEC
    char k_block[64], k_embd[64], k_ff[64], k_head[64], k_kv[64], k_ctx[64], k_rope[64], k_eps[64];
    snprintf(k_block, sizeof k_block, "%s.block_count", p->arch);
    snprintf(k_embd, sizeof k_embd, "%s.embedding_length", p->arch);
    snprintf(k_ff, sizeof k_ff, "%s.feed_forward_length", p->arch);
    snprintf(k_head, sizeof k_head, "%s.attention.head_count", p->arch);
    snprintf(k_kv, sizeof k_kv, "%s.attention.head_count_kv", p->arch);
    snprintf(k_ctx, sizeof k_ctx, "%s.context_length", p->arch);
    snprintf(k_rope, sizeof k_rope, "%s.rope.freq_base", p->arch);
    snprintf(k_eps, sizeof k_eps, "%s.attention.layer_norm_rms_epsilon", p->arch);
    char label[96];
    snprintf(label, sizeof label, "synthetic %s (shardwire-mkmodel)", p->name);
    const s_kv_t kvs[] = {
        {"general.architecture", 1, p->arch, 0, 0, 0}, {"general.name", 1, label, 0, 0, 0},
        {k_block, 0, NULL, (uint32_t)L, 0, 0},         {k_embd, 0, NULL, (uint32_t)p->n_embd, 0, 0},
        {k_ff, 0, NULL, (uint32_t)p->n_ff, 0, 0},      {k_head, 0, NULL, (uint32_t)p->n_head, 0, 0},
        {k_kv, 0, NULL, (uint32_t)p->n_kv_head, 0, 0}, {k_ctx, 0, NULL, (uint32_t)p->n_ctx, 0, 0},
        {k_rope, 0, NULL, 0, p->rope_base, 1},         {k_eps, 0, NULL, 0, p->eps, 1},
    };
    const int n_kv = (int)(sizeof kvs / sizeof kvs[0]);
    s_out_t o;
    if (s_open(&o, path, n, n_kv) != 0)
        goto out;
    for (int i = 0; i < n_kv; i++)
        s_write_kv(&o, &kvs[i]);
    s_write_tensors(&o, ts, n);
    if (fclose(o.f) != 0 || o.failed)
        fprintf(stderr, "shardwire-mkmodel: writing %s failed\n", path);
    else
        rc = 0;
out:
    for (int i = 0; i < n; i++)
        free(ts[i].data);
    free(ts);
    return rc;
}

/* ---- truncation of a real model ------------------------------------------------------------- */

static int s_truncate(const char *in, int n_layers, enum sw_type embd_type, const char *path)
{
    char err[256];
    sw_gguf_t *g = sw_gguf_open(in, err, sizeof err);
    if (!g) {
        fprintf(stderr, "shardwire-mkmodel: %s: %s\n", in, err);
        return -1;
    }
    int rc = -1, n = 0;
    const int64_t nt = sw_gguf_tensor_count(g);
    s_tensor_t *ts = calloc((size_t)nt + 1, sizeof *ts);
    sw_gguf_str_t arch;
    char block_key[96];
    if (!ts || sw_gguf_get_str(g, "general.architecture", &arch) != 0 || arch.len > 40) {
        fprintf(stderr, "shardwire-mkmodel: %s: not a model\n", in);
        goto out;
    }
    snprintf(block_key, sizeof block_key, "%.*s.block_count", (int)arch.len, arch.ptr);
    for (int64_t i = 0; i < nt; i++) {
        const sw_gguf_tensor_t *t = sw_gguf_tensor(g, i);
        char name[96];
        if (t->name.len >= sizeof name || t->n_dims > 2)
            continue;
        memcpy(name, t->name.ptr, t->name.len);
        name[t->name.len] = 0;
        int layer = -1;
        if (sscanf(name, "blk.%d.", &layer) == 1 && layer >= n_layers)
            continue;
        enum sw_type type = t->type;
        void *data = NULL;
        uint64_t bytes = t->n_bytes;
        const int is_embd = !strcmp(name, "token_embd.weight");
        if (is_embd && embd_type != SW_TYPE_COUNT && embd_type != t->type) {
            /* Re-quantize row by row (the embedding, and with it a tied LM head). */
            uint64_t src_rb, rb;
            if (sw_type_row_bytes(t->type, t->ne[0], &src_rb) != 0 ||
                sw_type_row_bytes(embd_type, t->ne[0], &rb) != 0)
                goto out;
            float *row = malloc((size_t)t->ne[0] * sizeof *row);
            data = malloc((size_t)(rb * (uint64_t)t->ne[1]));
            if (!row || !data) {
                free(row);
                free(data);
                goto out;
            }
            for (int64_t r = 0; r < t->ne[1]; r++) {
                sw_dequantize_row(t->type, (const char *)t->data + r * src_rb, row, t->ne[0]);
                if (sw_quantize_row(embd_type, row, (char *)data + r * rb, t->ne[0]) != 0) {
                    fprintf(stderr, "shardwire-mkmodel: cannot write %s rows\n",
                            sw_type_name(embd_type));
                    free(row);
                    free(data);
                    goto out;
                }
            }
            free(row);
            type = embd_type;
            bytes = rb * (uint64_t)t->ne[1];
        } else {
            data = malloc((size_t)bytes);
            if (!data)
                goto out;
            memcpy(data, t->data, (size_t)bytes);
        }
        s_add(ts, &n, name, (int)t->n_dims, t->ne[0], t->n_dims > 1 ? t->ne[1] : 1, type, data,
              bytes);
    }
    const int64_t nkv = sw_gguf_kv_count(g);
    const int64_t skip = sw_gguf_find_key(g, "general.alignment"); // our tensors are 32-aligned
    s_out_t o;
    if (s_open(&o, path, n, nkv - (skip >= 0)) != 0)
        goto out;
    for (int64_t i = 0; i < nkv; i++)
        if (i != skip && s_copy_kv(&o, g, i, block_key, n_layers) != 0)
            o.failed = 1;
    s_write_tensors(&o, ts, n);
    if (fclose(o.f) != 0 || o.failed)
        fprintf(stderr, "shardwire-mkmodel: writing %s failed\n", path);
    else
        rc = 0;
out:
    for (int i = 0; i < n; i++)
        free(ts[i].data);
    free(ts);
    sw_gguf_close(&g);
    return rc;
}

enum { O_FROM = SW_OPT_OWN, O_SYNTH, O_LAYERS, O_EMBD, O_SEED, O_OUT = 'o' };

static const sw_opt_t s_opts[] = {
    {"from", O_FROM, "IN.gguf", "cut a real model to its first --layers N layers"},
    {"synth", O_SYNTH, "PRESET",
     "random weights in the shapes and types of a preset:\nqwen2.5-1.5b, qwen2.5-0.5b, "
     "smollm2-135m, tiny-float,\ntiny-qwen3"},
    {"layers", O_LAYERS, "N", "layers to keep (--from, required) or to make (--synth)"},
    {"embd-type", O_EMBD, "T", "--from: re-quantize the embedding to q4_0 or q8_0"},
    {"seed", O_SEED, "S", "--synth: weight seed (default 1)"},
    {"out", O_OUT, "OUT.gguf", "the file to write"},
};

static const sw_opt_group_t s_groups[] = {SW_ARGS_GROUP(NULL, s_opts)};

static const sw_args_spec_t s_spec = {
    .prog = "shardwire-mkmodel",
    .usage = "--from IN.gguf --layers N [--embd-type q4_0|q8_0] -o OUT.gguf\n"
             "       shardwire-mkmodel --synth PRESET [--layers N] [--seed S] -o OUT.gguf",
    .about = "  Writes GGUF models for tests and benchmarks (docs/benchmarks.md).\n",
    .groups = s_groups,
    .n_groups = SW_ARGS_COUNT(s_groups),
};

int main(int argc, char **argv)
{
    const char *from = NULL, *synth = NULL, *out = NULL, *v;
    int layers = -1, seed = 1, c;
    enum sw_type embd = SW_TYPE_COUNT;
    sw_args_t a;
    sw_args_init(&a, &s_spec, argc, argv);
    while ((c = sw_args_next(&a, &v)) >= 0) {
        switch (c) {
        case O_FROM:
            from = v;
            break;
        case O_SYNTH:
            synth = v;
            break;
        case O_LAYERS:
            if (sw_arg_int("shardwire-mkmodel", "--layers", v, 1, 4096, &layers) != 0)
                return 2;
            break;
        case O_SEED:
            if (sw_arg_int("shardwire-mkmodel", "--seed", v, 1, 1 << 30, &seed) != 0)
                return 2;
            break;
        case O_EMBD:
            if (!strcmp(v, "q4_0"))
                embd = SW_TYPE_Q4_0;
            else if (!strcmp(v, "q8_0"))
                embd = SW_TYPE_Q8_0;
            else {
                fprintf(stderr, "shardwire-mkmodel: --embd-type must be q4_0 or q8_0\n");
                return 2;
            }
            break;
        default:
            out = v;
            break;
        }
    }
    if ((c = sw_args_finish(&a, c, 0)) >= 0)
        return c;
    if (!out || (!from == !synth) || (from && layers < 1))
        return sw_args_exit(sw_args_fail(&s_spec, "%s",
                                         !out ? "-o OUT.gguf is required"
                                         : from && synth
                                             ? "give one of --from and --synth, not both"
                                         : from ? "--from needs --layers N"
                                                : "--from IN.gguf or --synth PRESET is required"));
    if (from)
        return s_truncate(from, layers, embd, out) == 0 ? 0 : 1;
    s_rng = 0x9e3779b97f4a7c15ull ^ ((uint64_t)seed * 0x100000001b3ull);
    for (size_t i = 0; i < sizeof s_presets / sizeof s_presets[0]; i++)
        if (!strcmp(s_presets[i].name, synth))
            return s_synth(&s_presets[i], layers, out) == 0 ? 0 : 1;
    return sw_args_exit(sw_args_fail(&s_spec, "unknown preset '%s'", synth));
}
