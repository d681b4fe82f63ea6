/*
 * mkmodel.c - shardwire-mkmodel: writes GGUF models for tests and benchmarks
 * where the real ones cannot go (the GPU check machine reaches no network and
 * receives at most 64 MiB with the checkout).
 *
 *   shardwire-mkmodel --from IN.gguf --layers N [--embd-type q4_0|q8_0] -o OUT.gguf
 *       the first N layers of a real model with its tokenizer and every other
 *       key; block_count becomes N; the embedding (and a tied LM head) may be
 *       re-quantized to a smaller type
 *   shardwire-mkmodel --synth PRESET [--seed S] [--layers N] [--vocab V.gguf] -o OUT.gguf
 *       a model of a real model's shapes and tensor types with random weights
 *       scaled so that activations stay in range; no tokenizer (use token ids),
 *       or with --vocab the tokenizer.* keys of a tokenizer GGUF (llama.cpp's
 *       ggml-vocab-*.gguf), whose token count then sets the vocabulary size
 *
 * Presets (shapes and the type mix of the files named):
 *   qwen2.5-7b    Qwen2.5-7B-Instruct as llama.cpp's Q4_K_M (4.68 GB), and
 *   qwen2.5-14b   the 14B (8.99 GB), qwen2.5-32b (19.9 GB) and
 *   llama3.1-70b  Llama-3.1-70B-Instruct (42.5 GB): q4_K, q6_K attn_v and
 *                 ffn_down in llama.cpp's more-bits layers of the whole model
 *                 (also when --layers N makes a slice of its first N layers)
 *   qwen2.5-1.5b  Qwen2.5-Coder-1.5B-Instruct.Q4_K_M (q4_K, q6_K, biases)
 *   qwen2.5-0.5b  Qwen2.5-Coder-0.5B-Instruct.Q4_K_M (q5_0, q4_K, q8_0, q6_K)
 *                 (both with the real files' types, tensor by tensor)
 *   smollm2-135m  SmolLM2-135M-Instruct.Q4_1 (q4_1, q8_0 tied embedding)
 *   tiny-float    a 4-layer llama with f16, bf16 and f32 matrices
 *   tiny-qwen3    a 4-layer qwen3 (QK norm) with q4_0, q5_1, q5_K and q8_0
 *
 * Miniatures of the families of issue 24 (the real model's head size, head
 * ratio, rope and norm layout and Q4_K_M type mix, fewer and narrower layers;
 * made with --vocab for the llama.cpp parity fixtures, scripts/ref/):
 *   llama3.2-mini  Llama 3.2 1B: head 64, GQA 4:1, rope base 5e5 with the
 *                  llama3 rope_freqs (factor 32, low 1, high 4, 8192), tied q6_K
 *   qwen3-mini     Qwen3 0.6B: head 128 (queries wider than the hidden size),
 *                  GQA 2:1, QK norm, tied q6_K embedding
 *   qwen3moe-mini  Qwen3-30B-A3B: head 128, GQA 8:1, QK norm, 16 experts of
 *                  which 4 per token (q4_K gate/up, q6_K down, f32 router)
 *   gemma3-mini    Gemma 3 270M: head 256, 4 heads on 1 KV head, post-norms,
 *                  GELU, 5 sliding-window (16) layers per global one, the
 *                  270M's q5_0/q8_0/q4_K/q6_K mix, tied q8_0 embedding
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "gguf.h"
#include "gguf_write.h"
#include "quant.h"

/* ---- writing (the engine's GGUF writer, gguf_write.h) ----------------------------------- */

/* A tensor to write: its data, or (data NULL) the recipe of its random
 * values, made only when it is written so that a model of tens of GB never
 * sits in memory whole (the values come from the one random stream in
 * tensor order, as if all were made first). */
typedef struct s_tensor {
    char name[96];
    int n_dims;
    int64_t ne[3];
    enum sw_type type;
    void *data; // owned; NULL: made from the recipe below when written
    uint64_t bytes;
    int vec;              // recipe: 1 = an f32 vector of center +- spread, 0 = a random matrix
    float sd;             // matrix: the elements' standard deviation
    float center, spread; // vector
} s_tensor_t;

/* Creates path and writes the GGUF v3 header's counts. 0 or -1 (printed). */
static int s_open(sw_gguf_out_t *o, const char *path, int64_t n_tensors, int64_t n_kv)
{
    *o = (sw_gguf_out_t){.f = fopen(path, "wb")};
    if (!o->f) {
        fprintf(stderr, "shardwire-mkmodel: cannot write %s: %s\n", path, strerror(errno));
        return -1;
    }
    sw_gguf_out_header(o, 3, (uint64_t)n_tensors, (uint64_t)n_kv);
    return 0;
}

/* Closes the file of s_open: 0, or -1 (printed) when a write failed. */
static int s_close(sw_gguf_out_t *o, const char *path)
{
    if (fclose(o->f) != 0 || o->failed) {
        fprintf(stderr, "shardwire-mkmodel: writing %s failed\n", path);
        return -1;
    }
    return 0;
}

static int s_make(s_tensor_t *t);

/* The tensor infos, then the tensors' data, each 32-aligned (the default
 * alignment); a tensor with a recipe is made, written and freed in turn.
 * 0, or -1 when one could not be made (out of memory). */
static int s_write_tensors(sw_gguf_out_t *o, s_tensor_t *ts, int n)
{
    uint64_t off = 0;
    for (int i = 0; i < n; i++)
        sw_gguf_out_tensor_info(o, ts[i].name, strlen(ts[i].name), (uint32_t)ts[i].n_dims, ts[i].ne,
                                ts[i].type, ts[i].bytes, 32, &off);
    sw_gguf_out_pad(o, 32);
    for (int i = 0; i < n; i++) {
        const int made = !ts[i].data;
        if (made && s_make(&ts[i]) != 0) {
            fprintf(stderr, "shardwire-mkmodel: out of memory making %s (%llu bytes)\n", ts[i].name,
                    (unsigned long long)ts[i].bytes);
            return -1;
        }
        sw_gguf_out_bytes(o, ts[i].data, (size_t)ts[i].bytes);
        sw_gguf_out_pad(o, 32);
        if (made) {
            free(ts[i].data);
            ts[i].data = NULL;
        }
    }
    return 0;
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

/* Random blocks of type t (bytes of them) whose elements have about standard deviation sd. */
static int s_random_matrix(enum sw_type t, uint64_t bytes, float sd, void **out)
{
    uint8_t *p = malloc((size_t)bytes);
    if (!p)
        return -1;
    for (uint64_t i = 0; i + 4 <= bytes; i += 4) {
        uint32_t r = s_rand();
        memcpy(p + i, &r, 4);
    }
    const float a = sd * 1.7320508f; // uniform [-a, a) has deviation sd
    const size_t bb = sw_type_block_bytes(t);
    const uint64_t nb = bytes / bb;
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

static int s_random_vec(int64_t n, float center, float spread, void **out)
{
    float *v = malloc((size_t)n * sizeof *v);
    if (!v)
        return -1;
    for (int64_t i = 0; i < n; i++)
        v[i] = center + s_unif(spread);
    *out = v;
    return 0;
}

/* Makes t's data from its recipe. 0 or -1 (out of memory). */
static int s_make(s_tensor_t *t)
{
    return t->vec ? s_random_vec(t->ne[0], t->center, t->spread, &t->data)
                  : s_random_matrix(t->type, t->bytes, t->sd, &t->data);
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
    /* The fields below came with the families of issue 24 (0 above). */
    int head_dim;                      // 0: n_embd / n_head
    float rope_factor;                 // llama3 rope scaling (rope_freqs.weight), 0 = none
    float rope_low, rope_high;         // its low and high frequency factors
    int rope_orig_ctx;                 // and original context length
    int n_expert, n_expert_used;       // mixture of experts, 0 = dense
    int n_ff_exp;                      // one expert's feed-forward size
    enum sw_type gate_exps, down_exps; // expert types (gate and up share one)
    int n_swa, swa_pattern;            // Gemma 3: sliding window and its period
    float rope_base_swa;               // the sliding-window layers' rope base
    /* The big shapes of issue 33. */
    int q4km; // 1: attn_v and ffn_down take v_first / down_first in the layers where
              // llama.cpp's Q4_K_M gives them more bits (s_more_bits), else only in 0 and 1
} s_preset_t;

/* The layers of an n-layer model whose attn_v and ffn_down llama.cpp's
 * Q4_K_M quantizes with more bits: use_more_bits(i, n) of its llama-quant.cpp,
 * where i counts those tensors in the order llama-quantize meets them, the
 * file's, which has the layers sorted by name (blk.0, blk.1, blk.10, blk.11,
 * ..., blk.2, ...). i is layer l's rank in that order. The real
 * Qwen2.5-Coder-1.5B and 0.5B Q4_K_M files give exactly these layers the
 * larger types (14 of 28, 12 of 24); picked by the layer index, 16 layers of
 * each would have the other type. */
static int s_more_bits(int l, int n)
{
    char me[16], other[16];
    snprintf(me, sizeof me, "%d", l);
    int i = 0;
    for (int o = 0; o < n; o++) {
        snprintf(other, sizeof other, "%d", o);
        i += strcmp(other, me) < 0;
    }
    return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

/* Qwen2.5 7B/14B/32B Instruct and Llama 3.1 70B Instruct as llama.cpp quantizes them to
 * Q4_K_M: q4_K matrices, q6_K attn_v and ffn_down in s_more_bits layers (Llama 70B: q5_K
 * attn_v elsewhere, llama.cpp's rule for 80-layer GQA llamas), q4_K embedding, q6_K output. */
#define S_Q4KM(nm, ar, L, E, F, H, KV, V, C, RB, EPS, B, VT, ...)                                  \
    {                                                                                              \
        .name = nm, .arch = ar, .n_layer = L, .n_embd = E, .n_ff = F, .n_head = H,                 \
        .n_kv_head = KV, .n_vocab = V, .n_ctx = C, .rope_base = RB, .eps = EPS,                    \
        .embd = SW_TYPE_Q4_K, .out = SW_TYPE_Q6_K, .q = SW_TYPE_Q4_K, .k = SW_TYPE_Q4_K, .v = VT,  \
        .o = SW_TYPE_Q4_K, .gate = SW_TYPE_Q4_K, .up = SW_TYPE_Q4_K, .down = SW_TYPE_Q4_K,         \
        .v_first = SW_TYPE_Q6_K, .down_first = SW_TYPE_Q6_K, .bias = B, .q4km = 1, __VA_ARGS__     \
    }

static const s_preset_t s_presets[] = {
    S_Q4KM("qwen2.5-7b", "qwen2", 28, 3584, 18944, 28, 4, 152064, 32768, 1e6f, 1e-6f, 1,
           SW_TYPE_Q4_K),
    S_Q4KM("qwen2.5-14b", "qwen2", 48, 5120, 13824, 40, 8, 152064, 32768, 1e6f, 1e-5f, 1,
           SW_TYPE_Q4_K),
    S_Q4KM("qwen2.5-32b", "qwen2", 64, 5120, 27648, 40, 8, 152064, 32768, 1e6f, 1e-5f, 1,
           SW_TYPE_Q4_K),
    S_Q4KM("llama3.1-70b", "llama", 80, 8192, 28672, 64, 8, 128256, 131072, 500000.0f, 1e-5f, 0,
           SW_TYPE_Q5_K, .rope_factor = 8.0f, .rope_low = 1.0f, .rope_high = 4.0f,
           .rope_orig_ctx = 8192),
    {.name = "qwen2.5-1.5b",
     .arch = "qwen2",
     .n_layer = 28,
     .n_embd = 1536,
     .n_ff = 8960,
     .n_head = 12,
     .n_kv_head = 2,
     .n_vocab = 151936,
     .n_ctx = 32768,
     .rope_base = 1e6f,
     .eps = 1e-6f,
     .embd = SW_TYPE_Q4_K,
     .out = SW_TYPE_Q6_K,
     .q = SW_TYPE_Q4_K,
     .k = SW_TYPE_Q4_K,
     .v = SW_TYPE_Q4_K,
     .o = SW_TYPE_Q4_K,
     .gate = SW_TYPE_Q4_K,
     .up = SW_TYPE_Q4_K,
     .down = SW_TYPE_Q4_K,
     .v_first = SW_TYPE_Q6_K,
     .down_first = SW_TYPE_Q6_K,
     .bias = 1,
     .q4km = 1},
    {.name = "qwen2.5-0.5b",
     .arch = "qwen2",
     .n_layer = 24,
     .n_embd = 896,
     .n_ff = 4864,
     .n_head = 14,
     .n_kv_head = 2,
     .n_vocab = 151936,
     .n_ctx = 32768,
     .rope_base = 1e6f,
     .eps = 1e-6f,
     .embd = SW_TYPE_Q5_0,
     .out = SW_TYPE_Q8_0,
     .q = SW_TYPE_Q5_0,
     .k = SW_TYPE_Q5_0,
     .v = SW_TYPE_Q5_0,
     .o = SW_TYPE_Q5_0,
     .gate = SW_TYPE_Q5_0,
     .up = SW_TYPE_Q5_0,
     .down = SW_TYPE_Q4_K,
     .v_first = SW_TYPE_Q8_0,
     .down_first = SW_TYPE_Q6_K,
     .bias = 1,
     .q4km = 1},
    {.name = "smollm2-135m",
     .arch = "llama",
     .n_layer = 30,
     .n_embd = 576,
     .n_ff = 1536,
     .n_head = 9,
     .n_kv_head = 3,
     .n_vocab = 49152,
     .n_ctx = 8192,
     .rope_base = 1e5f,
     .eps = 1e-5f,
     .embd = SW_TYPE_Q8_0,
     .out = SW_TYPE_COUNT,
     .q = SW_TYPE_Q4_1,
     .k = SW_TYPE_Q4_1,
     .v = SW_TYPE_Q4_1,
     .o = SW_TYPE_Q4_1,
     .gate = SW_TYPE_Q4_1,
     .up = SW_TYPE_Q4_1,
     .down = SW_TYPE_Q4_1,
     .v_first = SW_TYPE_Q4_1,
     .down_first = SW_TYPE_Q4_1},
    {.name = "tiny-float",
     .arch = "llama",
     .n_layer = 4,
     .n_embd = 256,
     .n_ff = 640,
     .n_head = 4,
     .n_kv_head = 2,
     .n_vocab = 4096,
     .n_ctx = 2048,
     .rope_base = 1e4f,
     .eps = 1e-5f,
     .embd = SW_TYPE_F16,
     .out = SW_TYPE_F32,
     .q = SW_TYPE_F16,
     .k = SW_TYPE_BF16,
     .v = SW_TYPE_F32,
     .o = SW_TYPE_F16,
     .gate = SW_TYPE_BF16,
     .up = SW_TYPE_F16,
     .down = SW_TYPE_F32,
     .v_first = SW_TYPE_BF16,
     .down_first = SW_TYPE_F16},
    {.name = "tiny-qwen3",
     .arch = "qwen3",
     .n_layer = 4,
     .n_embd = 512,
     .n_ff = 1536,
     .n_head = 8,
     .n_kv_head = 4,
     .n_vocab = 8192,
     .n_ctx = 4096,
     .rope_base = 1e6f,
     .eps = 1e-6f,
     .embd = SW_TYPE_Q8_0,
     .out = SW_TYPE_Q5_K,
     .q = SW_TYPE_Q4_0,
     .k = SW_TYPE_Q5_1,
     .v = SW_TYPE_Q8_0,
     .o = SW_TYPE_Q4_0,
     .gate = SW_TYPE_Q5_K,
     .up = SW_TYPE_Q4_0,
     .down = SW_TYPE_Q5_1,
     .v_first = SW_TYPE_Q8_0,
     .down_first = SW_TYPE_Q6_K,
     .qk_norm = 1},
    {.name = "llama3.2-mini",
     .arch = "llama",
     .n_layer = 4,
     .n_embd = 256,
     .n_ff = 1024,
     .n_head = 4,
     .n_kv_head = 1,
     .n_vocab = 128256,
     .n_ctx = 131072,
     .rope_base = 500000.0f,
     .eps = 1e-5f,
     .embd = SW_TYPE_Q6_K,
     .out = SW_TYPE_COUNT,
     .q = SW_TYPE_Q4_K,
     .k = SW_TYPE_Q4_K,
     .v = SW_TYPE_Q4_K,
     .o = SW_TYPE_Q4_K,
     .gate = SW_TYPE_Q4_K,
     .up = SW_TYPE_Q4_K,
     .down = SW_TYPE_Q4_K,
     .v_first = SW_TYPE_Q6_K,
     .down_first = SW_TYPE_Q6_K,
     .head_dim = 64,
     .rope_factor = 32.0f,
     .rope_low = 1.0f,
     .rope_high = 4.0f,
     .rope_orig_ctx = 8192},
    {.name = "qwen3-mini",
     .arch = "qwen3",
     .n_layer = 4,
     .n_embd = 256,
     .n_ff = 768,
     .n_head = 4,
     .n_kv_head = 2,
     .n_vocab = 151936,
     .n_ctx = 40960,
     .rope_base = 1e6f,
     .eps = 1e-6f,
     .embd = SW_TYPE_Q6_K,
     .out = SW_TYPE_COUNT,
     .q = SW_TYPE_Q4_K,
     .k = SW_TYPE_Q4_K,
     .v = SW_TYPE_Q4_K,
     .o = SW_TYPE_Q4_K,
     .gate = SW_TYPE_Q4_K,
     .up = SW_TYPE_Q4_K,
     .down = SW_TYPE_Q4_K,
     .v_first = SW_TYPE_Q6_K,
     .down_first = SW_TYPE_Q6_K,
     .qk_norm = 1,
     .head_dim = 128},
    {.name = "qwen3moe-mini",
     .arch = "qwen3moe",
     .n_layer = 4,
     .n_embd = 256,
     .n_ff = 1024,
     .n_head = 8,
     .n_kv_head = 1,
     .n_vocab = 151936,
     .n_ctx = 40960,
     .rope_base = 1e6f,
     .eps = 1e-6f,
     .embd = SW_TYPE_Q4_K,
     .out = SW_TYPE_Q6_K,
     .q = SW_TYPE_Q4_K,
     .k = SW_TYPE_Q4_K,
     .v = SW_TYPE_Q4_K,
     .o = SW_TYPE_Q4_K,
     .v_first = SW_TYPE_Q6_K,
     .qk_norm = 1,
     .head_dim = 128,
     .n_expert = 16,
     .n_expert_used = 4,
     .n_ff_exp = 256,
     .gate_exps = SW_TYPE_Q4_K,
     .down_exps = SW_TYPE_Q6_K},
    {.name = "gemma3-mini",
     .arch = "gemma3",
     .n_layer = 6,
     .n_embd = 256,
     .n_ff = 512,
     .n_head = 4,
     .n_kv_head = 1,
     .n_vocab = 262144,
     .n_ctx = 32768,
     .rope_base = 1e6f,
     .eps = 1e-6f,
     .embd = SW_TYPE_Q8_0,
     .out = SW_TYPE_COUNT,
     .q = SW_TYPE_Q5_0,
     .k = SW_TYPE_Q5_0,
     .v = SW_TYPE_Q5_0,
     .o = SW_TYPE_Q4_K,
     .gate = SW_TYPE_Q5_0,
     .up = SW_TYPE_Q5_0,
     .down = SW_TYPE_Q4_K,
     .v_first = SW_TYPE_Q8_0,
     .down_first = SW_TYPE_Q6_K,
     .qk_norm = 1,
     .head_dim = 256,
     .n_swa = 16,
     .swa_pattern = 6,
     .rope_base_swa = 10000.0f},
};

static int s_add(s_tensor_t *ts, int *n, const char *name, int n_dims, int64_t ne0, int64_t ne1,
                 int64_t ne2, enum sw_type t, void *data, uint64_t bytes)
{
    s_tensor_t *x = &ts[(*n)++];
    snprintf(x->name, sizeof x->name, "%s", name);
    x->n_dims = n_dims;
    x->ne[0] = ne0;
    x->ne[1] = ne1;
    x->ne[2] = ne2;
    x->type = t;
    x->data = data;
    x->bytes = bytes;
    return 0;
}

/* Llama 3's rope_freqs.weight as convert_hf_to_gguf.py computes it from the
 * llama3 rope_scaling of config.json: per rotary pair, 1 for the high
 * frequencies, factor for the low ones, a smooth blend between. */
static float *s_llama3_rope_freqs(const s_preset_t *p, int head_dim)
{
    const int n = head_dim / 2;
    float *f = malloc((size_t)n * sizeof *f);
    if (!f)
        return NULL;
    const double low_wavelen = p->rope_orig_ctx / p->rope_low;
    const double high_wavelen = p->rope_orig_ctx / p->rope_high;
    for (int i = 0; i < n; i++) {
        const float freq = (float)(1.0 / pow(p->rope_base, (double)(2 * i) / head_dim));
        const double wavelen = 2 * 3.14159265358979323846 / freq;
        if (wavelen < high_wavelen)
            f[i] = 1.0f;
        else if (wavelen > low_wavelen)
            f[i] = p->rope_factor;
        else {
            const double smooth =
                (p->rope_orig_ctx / wavelen - p->rope_low) / (p->rope_high - p->rope_low);
            f[i] = (float)(1.0 / ((1 - smooth) / p->rope_factor + smooth));
        }
    }
    return f;
}

/* The tokenizer.* keys of vocab (indices into its key table) and its token count. */
static int s_vocab_keys(const sw_gguf_t *v, int64_t *keys, int *n_keys, int *n_vocab)
{
    *n_keys = 0;
    for (int64_t i = 0; i < sw_gguf_kv_count(v); i++) {
        sw_gguf_str_t k = sw_gguf_kv_key(v, i);
        if (k.len > 10 && !memcmp(k.ptr, "tokenizer.", 10) && *n_keys < 64)
            keys[(*n_keys)++] = i;
    }
    enum sw_gguf_vtype et;
    uint64_t nt;
    if (sw_gguf_get_arr(v, "tokenizer.ggml.tokens", &et, &nt) != 0 || et != SW_GGUF_STRING ||
        nt < 1 || nt > (1u << 22))
        return -1;
    *n_vocab = (int)nt;
    return 0;
}

/* Adds the recipe of a random tensor of type t, n_exp matrices of n_out rows
 * of n_in (n_dims 2 or 3), to ts. 0 or -1 (a row that t cannot hold). */
static int s_mat3(s_tensor_t *ts, int *n, const char *name, int n_dims, enum sw_type t,
                  int64_t n_in, int64_t n_out, int64_t n_exp, float sd)
{
    uint64_t rb;
    if (sw_type_row_bytes(t, n_in, &rb) != 0)
        return -1;
    s_add(ts, n, name, n_dims, n_in, n_out, n_exp, t, NULL, rb * (uint64_t)(n_out * n_exp));
    ts[*n - 1].sd = sd;
    return 0;
}

/* Adds a random matrix (n_out rows of n_in) of type t to ts. 0 or -1. */
static int s_mat(s_tensor_t *ts, int *n, const char *name, enum sw_type t, int64_t n_in,
                 int64_t n_out, float sd)
{
    return s_mat3(ts, n, name, 2, t, n_in, n_out, 1, sd);
}

/* Adds the random matrices of p's experts, one 3-D tensor. 0 or -1. */
static int s_exps(s_tensor_t *ts, int *n, const s_preset_t *p, const char *name, enum sw_type t,
                  int64_t n_in, int64_t n_out, float sd)
{
    return s_mat3(ts, n, name, 3, t, n_in, n_out, p->n_expert, sd);
}

/* Adds an f32 vector of len values in center +- spread. 0 or -1. */
static int s_vec(s_tensor_t *ts, int *n, const char *name, int64_t len, float center, float spread)
{
    s_add(ts, n, name, 1, len, 1, 1, SW_TYPE_F32, NULL, (uint64_t)len * sizeof(float));
    ts[*n - 1].vec = 1;
    ts[*n - 1].center = center;
    ts[*n - 1].spread = spread;
    return 0;
}

/* The random tensors of layer l (blk.l.*) of p with head size hd. 0 or -1. */
static int s_synth_layer(const s_preset_t *p, int l, int hd, s_tensor_t *ts, int *n)
{
    const int qd = hd * p->n_head, kvd = hd * p->n_kv_head, gemma = !strcmp(p->arch, "gemma3");
    const float sd_e = 1.0f / sqrtf((float)p->n_embd), sd_f = 1.0f / sqrtf((float)p->n_ff);
    const float sd_q = 1.0f / sqrtf((float)qd);
    const int more = p->q4km ? s_more_bits(l, p->n_layer) : l < 2; // layer l of the whole model
    char nm[96];
#define S_NM(s) (snprintf(nm, sizeof nm, "blk.%d." s, l), nm)
    if (s_vec(ts, n, S_NM("attn_norm.weight"), p->n_embd, 1.0f, 0.1f) != 0 ||
        s_mat(ts, n, S_NM("attn_q.weight"), p->q, p->n_embd, qd, sd_e) != 0 ||
        s_mat(ts, n, S_NM("attn_k.weight"), p->k, p->n_embd, kvd, sd_e) != 0 ||
        s_mat(ts, n, S_NM("attn_v.weight"), more ? p->v_first : p->v, p->n_embd, kvd, sd_e) != 0 ||
        s_mat(ts, n, S_NM("attn_output.weight"), p->o, qd, p->n_embd, sd_q) != 0)
        return -1;
    if (p->bias && (s_vec(ts, n, S_NM("attn_q.bias"), qd, 0.0f, 0.1f) != 0 ||
                    s_vec(ts, n, S_NM("attn_k.bias"), kvd, 0.0f, 0.1f) != 0 ||
                    s_vec(ts, n, S_NM("attn_v.bias"), kvd, 0.0f, 0.1f) != 0))
        return -1;
    if (p->qk_norm && (s_vec(ts, n, S_NM("attn_q_norm.weight"), hd, 1.0f, 0.1f) != 0 ||
                       s_vec(ts, n, S_NM("attn_k_norm.weight"), hd, 1.0f, 0.1f) != 0))
        return -1;
    if (gemma && s_vec(ts, n, S_NM("post_attention_norm.weight"), p->n_embd, 1.0f, 0.1f) != 0)
        return -1;
    if (s_vec(ts, n, S_NM("ffn_norm.weight"), p->n_embd, 1.0f, 0.1f) != 0)
        return -1;
    if (p->n_expert > 0) {
        const float sd_x = 1.0f / sqrtf((float)p->n_ff_exp);
        if (s_mat(ts, n, S_NM("ffn_gate_inp.weight"), SW_TYPE_F32, p->n_embd, p->n_expert, sd_e) !=
                0 ||
            s_exps(ts, n, p, S_NM("ffn_gate_exps.weight"), p->gate_exps, p->n_embd, p->n_ff_exp,
                   sd_e) != 0 ||
            s_exps(ts, n, p, S_NM("ffn_up_exps.weight"), p->gate_exps, p->n_embd, p->n_ff_exp,
                   sd_e) != 0 ||
            s_exps(ts, n, p, S_NM("ffn_down_exps.weight"), p->down_exps, p->n_ff_exp, p->n_embd,
                   sd_x) != 0)
            return -1;
    } else if (s_mat(ts, n, S_NM("ffn_gate.weight"), p->gate, p->n_embd, p->n_ff, sd_e) != 0 ||
               s_mat(ts, n, S_NM("ffn_up.weight"), p->up, p->n_embd, p->n_ff, sd_e) != 0 ||
               s_mat(ts, n, S_NM("ffn_down.weight"), more ? p->down_first : p->down, p->n_ff,
                     p->n_embd, sd_f) != 0) {
        return -1;
    }
    if (gemma && s_vec(ts, n, S_NM("post_ffw_norm.weight"), p->n_embd, 1.0f, 0.1f) != 0)
        return -1;
#undef S_NM
    return 0;
}

/* The random tensors of p with L layers and n_vocab rows, in the order of the real files:
 * 0, or -1 with the tensors made so far in ts[0..*n) (the caller frees them). */
static int s_synth_tensors(const s_preset_t *p, int L, int hd, int n_vocab, s_tensor_t *ts, int *n)
{
    const float sd_e = 1.0f / sqrtf((float)p->n_embd);
    if (s_mat(ts, n, "token_embd.weight", p->embd, p->n_embd, n_vocab, sd_e) != 0 ||
        s_vec(ts, n, "output_norm.weight", p->n_embd, 1.0f, 0.1f) != 0)
        return -1;
    if (p->out != SW_TYPE_COUNT &&
        s_mat(ts, n, "output.weight", p->out, p->n_embd, n_vocab, sd_e) != 0)
        return -1;
    if (p->rope_factor > 0) {
        float *d = s_llama3_rope_freqs(p, hd);
        if (!d)
            return -1;
        s_add(ts, n, "rope_freqs.weight", 1, hd / 2, 1, 1, SW_TYPE_F32, d,
              (uint64_t)(hd / 2) * sizeof(float));
    }
    for (int l = 0; l < L; l++)
        if (s_synth_layer(p, l, hd, ts, n) != 0)
            return -1;
    return 0;
}

/* The synthetic model's key/values (general.*, then <arch>.*) into o: their count. */
static int s_synth_kvs(sw_gguf_out_t *o, const s_preset_t *p, int L, int hd)
{
    char label[96], key[96];
    snprintf(label, sizeof label, "synthetic %s (shardwire-mkmodel)", p->name);
    sw_gguf_out_kv_str(o, "general.architecture", p->arch);
    sw_gguf_out_kv_str(o, "general.name", label);
    int n = 2;
#define S_KEY(sfx) (snprintf(key, sizeof key, "%s.%s", p->arch, (sfx)), n++, key)
#define S_U32(sfx, v) sw_gguf_out_kv_u32(o, S_KEY(sfx), (uint32_t)(v))
#define S_F32(sfx, v) sw_gguf_out_kv_f32(o, S_KEY(sfx), (v))
    S_U32("block_count", L);
    S_U32("embedding_length", p->n_embd);
    S_U32("feed_forward_length", p->n_ff);
    S_U32("attention.head_count", p->n_head);
    S_U32("attention.head_count_kv", p->n_kv_head);
    S_U32("context_length", p->n_ctx);
    S_F32("rope.freq_base", p->rope_base);
    S_F32("attention.layer_norm_rms_epsilon", p->eps);
    if (p->head_dim) {
        S_U32("attention.key_length", hd);
        S_U32("attention.value_length", hd);
        S_U32("rope.dimension_count", hd);
    }
    if (p->n_expert > 0) {
        S_U32("expert_count", p->n_expert);
        S_U32("expert_used_count", p->n_expert_used);
        S_U32("expert_feed_forward_length", p->n_ff_exp);
    }
    if (p->n_swa > 0) {
        S_U32("attention.sliding_window", p->n_swa);
        S_U32("attention.sliding_window_pattern", p->swa_pattern);
        S_F32("rope.freq_base_swa", p->rope_base_swa);
    }
#undef S_F32
#undef S_U32
#undef S_KEY
    return n;
}

static int s_synth(const s_preset_t *p, int n_layers, const sw_gguf_t *vocab, const char *path)
{
    const int L = n_layers > 0 ? n_layers : p->n_layer;
    const int hd = p->head_dim ? p->head_dim : p->n_embd / p->n_head;
    int64_t vkeys[64];
    int n_vkeys = 0, n_vocab = p->n_vocab;
    if (vocab && s_vocab_keys(vocab, vkeys, &n_vkeys, &n_vocab) != 0) {
        fprintf(stderr, "shardwire-mkmodel: --vocab: no tokenizer.ggml.tokens list\n");
        return -1;
    }
    s_tensor_t *ts = calloc((size_t)L * 20 + 8, sizeof *ts);
    if (!ts)
        return -1;
    int n = 0, rc = -1;
    sw_gguf_out_t kv = {0}, o; /* the key/values in memory: the header counts them first */
    if (s_synth_tensors(p, L, hd, n_vocab, ts, &n) != 0)
        goto out;
    const int n_kv = s_synth_kvs(&kv, p, L, hd);
    if (kv.failed || s_open(&o, path, n, n_kv + n_vkeys) != 0)
        goto out;
    sw_gguf_out_bytes(&o, kv.buf, kv.len);
    for (int i = 0; i < n_vkeys; i++)
        if (sw_gguf_out_kv_copy(&o, vocab, vkeys[i]) != 0)
            break;
    rc = s_write_tensors(&o, ts, n);
    rc = s_close(&o, path) == 0 ? rc : -1;
out:
    for (int i = 0; i < n; i++)
        free(ts[i].data);
    free(ts);
    free(kv.buf);
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
        s_add(ts, &n, name, (int)t->n_dims, t->ne[0], t->n_dims > 1 ? t->ne[1] : 1, 1, type, data,
              bytes);
    }
    const int64_t nkv = sw_gguf_kv_count(g);
    const int64_t skip = sw_gguf_find_key(g, "general.alignment"); // our tensors are 32-aligned
    sw_gguf_out_t o;
    if (s_open(&o, path, n, nkv - (skip >= 0)) != 0)
        goto out;
    for (int64_t i = 0; i < nkv; i++) {
        if (i == skip)
            continue;
        if (sw_gguf_str_eq(sw_gguf_kv_key(g, i), block_key))
            sw_gguf_out_kv_u32(&o, block_key, (uint32_t)n_layers); // the layers kept
        else if (sw_gguf_out_kv_copy(&o, g, i) != 0)
            break;
    }
    rc = s_write_tensors(&o, ts, n);
    rc = s_close(&o, path) == 0 ? rc : -1;
out:
    for (int i = 0; i < n; i++)
        free(ts[i].data);
    free(ts);
    sw_gguf_close(&g);
    return rc;
}

#define S_DEFAULT_SEED                                                                             \
    1 /* --seed: the weights the fixtures (tests/fixtures/arch_*.json) were made with */

enum { O_FROM = SW_OPT_OWN, O_SYNTH, O_LAYERS, O_EMBD, O_SEED, O_VOCAB, O_OUT = 'o' };

static const sw_opt_t s_opts[] = {
    {"from", O_FROM, "IN.gguf", "cut a real model to its first --layers N layers"},
    {"synth", O_SYNTH, "PRESET",
     "random weights in the shapes and types of a preset:\nqwen2.5-7b, qwen2.5-14b, qwen2.5-32b, "
     "llama3.1-70b,\nqwen2.5-1.5b, qwen2.5-0.5b, smollm2-135m, tiny-float,\ntiny-qwen3, "
     "llama3.2-mini, qwen3-mini, qwen3moe-mini,\ngemma3-mini"},
    {"layers", O_LAYERS, "N", "layers to keep (--from, required) or to make (--synth)"},
    {"embd-type", O_EMBD, "T", "--from: re-quantize the embedding to q4_0 or q8_0"},
    {"seed", O_SEED, "S", "--synth: weight seed (default " SW_STR(S_DEFAULT_SEED) ")"},
    {"vocab", O_VOCAB, "V.gguf", "--synth: copy the tokenizer of V.gguf (its tokenizer.* keys)"},
    {"out", O_OUT, "OUT.gguf", "the file to write"},
};

static const sw_opt_group_t s_groups[] = {SW_ARGS_GROUP(NULL, s_opts)};

static const sw_args_spec_t s_spec = {
    .prog = "shardwire-mkmodel",
    .usage = "--from IN.gguf --layers N [--embd-type q4_0|q8_0] -o OUT.gguf\n"
             "       shardwire-mkmodel --synth PRESET [--layers N] [--seed S] [--vocab V.gguf] "
             "-o OUT.gguf",
    .about = "  Writes GGUF models for tests and benchmarks (docs/benchmarks.md).\n",
    .groups = s_groups,
    .n_groups = SW_ARGS_COUNT(s_groups),
};

int main(int argc, char **argv)
{
    const char *from = NULL, *synth = NULL, *out = NULL, *vocab = NULL, *v;
    int layers = -1, seed = S_DEFAULT_SEED, c;
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
        case O_VOCAB:
            vocab = v;
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
    sw_gguf_t *vg = NULL;
    if (vocab) {
        char err[256];
        if (!(vg = sw_gguf_open(vocab, err, sizeof err))) {
            fprintf(stderr, "shardwire-mkmodel: %s: %s\n", vocab, err);
            return 1;
        }
    }
    for (size_t i = 0; i < sizeof s_presets / sizeof s_presets[0]; i++)
        if (!strcmp(s_presets[i].name, synth)) {
            const int rc = s_synth(&s_presets[i], layers, vg, out);
            sw_gguf_close(&vg);
            return rc == 0 ? 0 : 1;
        }
    sw_gguf_close(&vg);
    return sw_args_exit(sw_args_fail(&s_spec, "unknown preset '%s'", synth));
}
