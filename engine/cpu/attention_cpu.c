/*
 * attention_cpu.c - the CPU backend's attention (backend_impl.h,
 * sw_attn_args_t): scores, softmax and the value sums per (row, head) pair,
 * split between the pool's threads by pairs, over a session's f16 KV cache,
 * for plain rows and token-tree rows; and the KV cache move that keeps an
 * accepted tree path. The numerics are llama.cpp's (backend_cpu.c's header).
 */
#include <assert.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_state_impl.h"
#include "log.h"
#include "quant.h"
#include "quant_impl.h"
#include "sw_limits.h"

struct s_attn_job {
    const sw_attn_args_t *a;
    cpu_state_t *c;
    atomic_int next; // next (row, head) pair, from the first row whose output is read
};

float sw_cpu_dot2_f16_scalar(const sw_f16 *a1, int n1, const sw_f16 *a2, const sw_f16 *b, int n)
{
    float acc[32] = {0}; // as sw_dot_f16_4x8 (op_math.h) with pad32
    for (int i = 0; i < n; i++) {
        const sw_f16 ai = i < n1 ? a1[i] : a2[i - n1];
        acc[i & 31] = fmaf(sw_f16_to_f32(ai), sw_f16_to_f32(b[i]), acc[i & 31]);
    }
    float lane[8];
    for (int l = 0; l < 8; l++) {
        float s02 = acc[l] + acc[16 + l], s13 = acc[8 + l] + acc[24 + l];
        lane[l] = s02 + s13;
    }
    float t[4];
    for (int l = 0; l < 4; l++)
        t[l] = lane[l] + lane[l + 4];
    double sum = (t[0] + t[1]) + (t[2] + t[3]);
    return (float)sum;
}

static float s_dot_split(const cpu_state_t *c, const sw_f16 *a1, int n1, const sw_f16 *a2,
                         const sw_f16 *b, int n)
{
    return c->avx2 ? sw_cpu_dot2_f16_avx2(a1, n1, a2, b, n)
                   : sw_cpu_dot2_f16_scalar(a1, n1, a2, b, n);
}

/* The slots row r attends to: [0, *lin) then tail[0..*m) (a tree row's
 * ancestors, its visibility record), or causally [0, slot0 + r]. Returns the
 * first entry a sliding window leaves visible: entry p of the list is at
 * position p (a tree's ancestors continue its plain prefix), so a window
 * hides p < n_pos - swa; hidden entries count as -inf, exactly like
 * llama.cpp's mask. */
static int s_row_vis(const sw_attn_args_t *a, const int32_t *ctl, int r, int *lin, int *m,
                     const int32_t **tail)
{
    *lin = ctl[SW_CTL_SLOT0] + r + 1;
    *m = 0;
    *tail = NULL;
    if (a->tree) {
        const int32_t *rec = ctl + ctl[SW_CTL_VIS(a->n) + r];
        *lin = rec[0];
        *m = rec[1];
        *tail = rec + 2;
    }
    const int n_pos = *lin + *m;
    return a->swa > 0 && n_pos > a->swa ? n_pos - a->swa : 0;
}

static void s_attn_body(void *ctx, int ith, int nth)
{
    struct s_attn_job *j = ctx;
    const sw_attn_args_t *a = j->a;
    const cpu_state_t *c = j->c;
    const int hd = a->head_dim, group = a->n_head / a->n_kv_head;
    const size_t kv_dim = (size_t)a->n_kv_head * hd;
    const size_t pad_ctx = (size_t)((a->n_ctx + 31) & ~31);
    void *mine = (char *)c->scratch + c->scratch_each * (size_t)ith;
    float *score = mine;                                  // (n_ctx) f32
    sw_f16 *prob = (void *)((char *)mine + a->n_ctx * 4); // (n_ctx) f16
    sw_f16 *q16 = prob + pad_ctx;                         // (head_dim) f16
    sw_f16 *vg = q16 + ((hd + 31) & ~31);                 // (n_ctx + 32) f16, tree gather
    float *qf = (float *)(void *)(vg + pad_ctx + 32);     // (head_dim) f32: q16 as f32
    const sw_f16 *kc = (const sw_f16 *)a->k_cache->data;
    const sw_f16 *vc = (const sw_f16 *)a->v_cache->data;

    const int32_t *ctl = cpu_i32(a->ctl);
    (void)nth;
    for (int job; (job = atomic_fetch_add(&j->next, 1)) < a->n * a->n_head;) {
        const int r = job / a->n_head, h = job % a->n_head, g = h / group;
        int lin, m;
        const int32_t *tail;
        const int lo = s_row_vis(a, ctl, r, &lin, &m, &tail), n_pos = lin + m;
        const float *q = cpu_f32(a->q) + ((size_t)r * a->n_head + h) * hd;
        cpu_to_f16(c, q, q16, hd);
        float max = -INFINITY;
        /* The prompt order never has tree rows: slots [lo, n_pos), K rows
         * kv_dim apart, V rows n_ctx apart, the dots 8 at a time. */
        const int batched = a->prompt_order && c->avx2;
        if (batched) {
            sw_cpu_f16_to_f32_avx2(q16, qf, hd);
            sw_cpu_dots_f16_tiled_avx2(kc + (size_t)lo * kv_dim + (size_t)g * hd, kv_dim,
                                       n_pos - lo, qf, hd, score + lo);
        }
        for (int p = 0; p < lo; p++)
            score[p] = -INFINITY;
        for (int p = lo; p < n_pos; p++) {
            const size_t slot = (size_t)(p < lin ? p : tail[p - lin]);
            const sw_f16 *krow = kc + slot * kv_dim + (size_t)g * hd;
            float s = batched            ? score[p]
                      : !a->prompt_order ? cpu_dot_f16(c, krow, q16, hd, 0)
                                         : sw_dot_f16_tiled(krow, q16, hd);
            s *= a->scale;
            score[p] = s;
            if (s > max)
                max = s;
        }
        double sum = cpu_softmax_exp(c, score, n_pos, max);
        const float inv = (float)(1.0 / sum);
        for (int p = 0; p < n_pos; p++)
            score[p] *= inv;
        cpu_to_f16(c, score, prob, n_pos);
        float *out = cpu_f32(a->out) + ((size_t)r * a->n_head + h) * hd;
        /* Hidden entries (below the sliding window) have probability 0 and
         * add exact zeros: the V dots start at a multiple of 32 below it, on
         * the same lanes. */
        const int lo32 = lo & ~31;
        if (batched) {
            sw_cpu_f16_to_f32_avx2(prob + lo32, score + lo32, n_pos - lo32);
            sw_cpu_dots_f16_tiled_avx2(vc + (size_t)g * hd * (size_t)a->n_ctx + lo32,
                                       (size_t)a->n_ctx, hd, score + lo32, n_pos - lo32, out);
            continue;
        }
        /* A tree row reads V of its prefix in place up to a multiple of 32
         * and gathers the rest, so the sum runs in the chain's order. */
        const int lin32 = lin & ~31;
        for (int d = 0; d < hd; d++) {
            const sw_f16 *vrow = vc + ((size_t)g * hd + d) * a->n_ctx;
            if (m > 0) {
                int k = 0;
                for (int p = lin32; p < lin; p++)
                    vg[k++] = vrow[p];
                for (int t = 0; t < m; t++)
                    vg[k++] = vrow[tail[t]];
                out[d] = s_dot_split(c, vrow, lin32, vg, prob, n_pos);
                continue;
            }
            out[d] = !a->prompt_order ? cpu_dot_f16(c, vrow + lo32, prob + lo32, n_pos - lo32, 1)
                                      : sw_dot_f16_tiled(vrow + lo32, prob + lo32, n_pos - lo32);
        }
    }
}

/* ---- q8_0 cache (kv.h, SW_KV_Q8_0): llama.cpp's flash attention ------------------------------
 *
 * The arithmetic of GGML's CPU flash attention over a q8_0 cache
 * (ggml_compute_forward_flash_attn_ext_f16_one_chunk, which every row of a
 * q8_0 cache takes, decode and prompt alike): the query quantized to q8_0,
 * per visible slot in order the q8_0 dot with its key times the scale, an
 * online softmax (expf of the new maximum's step; the sums in f32, fused as
 * GCC fuses them), the slot's V row dequantized and added with a fused
 * multiply-add per element, the total divided by the sum at the end. */

/* x (n, a multiple of SW_QK) as q8_0 blocks into y, as GGML's quantize_row_q8_0. */
static void s_q8(const float *x, void *y, int64_t n)
{
    const int rc = sw_quantize_row(SW_TYPE_Q8_0, x, y, n);
    assert(rc == 0); // q8_0 rows of whole blocks always quantize
    (void)rc;
}

static void s_mad(const cpu_state_t *c, float *y, const float *x, float v, int n)
{
    if (c->avx2) {
        sw_cpu_mad_f32_avx2(y, x, v, n);
        return;
    }
    for (int i = 0; i < n; i++)
        y[i] = fmaf(x[i], v, y[i]);
}

static void s_attn_q8_body(void *ctx, int ith, int nth)
{
    struct s_attn_job *j = ctx;
    const sw_attn_args_t *a = j->a;
    const cpu_state_t *c = j->c;
    const int hd = a->head_dim, group = a->n_head / a->n_kv_head, nb = hd / SW_QK;
    const size_t row = (size_t)a->n_kv_head * (size_t)nb * sizeof(sw_block_q8_0);
    float *acc = (float *)(void *)((char *)c->scratch + c->scratch_each * (size_t)ith); // (hd)
    float *v32 = acc + hd;                                                              // (hd)
    sw_block_q8_0 *qq = (sw_block_q8_0 *)(void *)(v32 + hd);                            // (nb)
    const char *kc = a->k_cache->data, *vc = a->v_cache->data;
    const int32_t *ctl = cpu_i32(a->ctl);
    (void)nth;
    for (int job; (job = atomic_fetch_add(&j->next, 1)) < a->n * a->n_head;) {
        const int r = job / a->n_head, h = job % a->n_head;
        const size_t head = (size_t)(h / group) * (size_t)nb * sizeof(sw_block_q8_0);
        int lin, m;
        const int32_t *tail;
        const int lo = s_row_vis(a, ctl, r, &lin, &m, &tail), n_pos = lin + m; // hidden: skipped
        s_q8(cpu_f32(a->q) + ((size_t)r * a->n_head + h) * hd, qq, hd);
        float S = 0.0f, M = -INFINITY;
        memset(acc, 0, (size_t)hd * sizeof *acc);
        for (int p = lo; p < n_pos; p++) {
            const size_t slot = (size_t)(p < lin ? p : tail[p - lin]);
            float s;
            sw_vec_dot(SW_TYPE_Q8_0, hd, &s, kc + slot * row + head, qq);
            s = s * a->scale;
            const float m_old = M;
            float ms = 1.0f, vs = 1.0f;
            if (s > M) {
                M = s;
                ms = expf(m_old - M);
                for (int d = 0; d < hd; d++)
                    acc[d] *= ms;
            } else {
                vs = expf(s - M);
            }
            sw_dequantize_row(SW_TYPE_Q8_0, vc + slot * row + head, v32, hd);
            s_mad(c, acc, v32, vs, hd);
            S = fmaf(S, ms, vs);
        }
        const float inv = S == 0.0f ? 0.0f : 1.0f / S;
        float *out = cpu_f32(a->out) + ((size_t)r * a->n_head + h) * hd;
        for (int d = 0; d < hd; d++)
            out[d] = acc[d] * inv;
    }
}

/* Checks every visibility record of a tree chunk (they come from the model's
 * metadata, but a bad one would read outside the cache). */
static int s_check_tree(sw_backend_t *be, const sw_attn_args_t *a, int slot0)
{
    const int32_t *ctl = cpu_i32(a->ctl);
    const int64_t cap = SW_CTL_CAP(a->n);
    for (int r = 0; r < a->n; r++) {
        const int64_t off = ctl[SW_CTL_VIS(a->n) + r];
        if (off < SW_CTL_VIS(a->n) + a->n || off + 2 > cap)
            return sw_backend_fail(be, "cpu backend: tree record of row %d at %lld", r,
                                   (long long)off);
        const int32_t *rec = ctl + off;
        const int lin = rec[0], m = rec[1];
        if (lin < 0 || m < 1 || off + 2 + m > cap || (int64_t)lin + m > a->n_ctx ||
            rec[2 + m - 1] != slot0 + r)
            return sw_backend_fail(be, "cpu backend: bad tree record of row %d", r);
        for (int t = 0; t < m; t++)
            if (rec[2 + t] < lin || rec[2 + t] > slot0 + r || (t && rec[2 + t] <= rec[1 + t]))
                return sw_backend_fail(be, "cpu backend: tree row %d sees slot %d", r, rec[2 + t]);
    }
    return 0;
}

/* Runs body over the (row, head) pairs on the pool, each thread with
 * `need` bytes of scratch. */
static int s_run(sw_backend_t *be, cpu_state_t *c, const sw_attn_args_t *a,
                 void (*body)(void *, int, int), size_t need)
{
    const size_t each = (need + 64 + 63) & ~(size_t)63;
    if (each > c->scratch_each) {
        void *p = aligned_alloc(64, each * (size_t)c->n_threads);
        if (!p)
            return sw_backend_fail(be, "cpu backend: out of memory for attention scratch");
        free(c->scratch);
        c->scratch = p;
        c->scratch_each = each;
    }
    struct s_attn_job job = {.a = a, .c = c};
    atomic_init(&job.next, a->out_row0 * a->n_head);
    sw_pool_run(c->pool, body, &job);
    return 0;
}

int cpu_attention(sw_backend_t *be, const sw_attn_args_t *a)
{
    cpu_state_t *c = cpu_impl(be);
    const size_t kv_dim = (size_t)a->n_kv_head * a->head_dim;
    sw_f16 *kc = (sw_f16 *)a->k_cache->data;
    sw_f16 *vc = (sw_f16 *)a->v_cache->data;
    const int slot0 = cpu_i32(a->ctl)[SW_CTL_SLOT0];
    if (slot0 < 0 || slot0 + a->n > a->n_ctx)
        return sw_backend_fail(be, "cpu backend: %d rows at slot %d overrun a %d-slot cache", a->n,
                               slot0, a->n_ctx);
    if (a->out_row0 < 0 || a->out_row0 > a->n)
        return sw_backend_fail(be, "cpu backend: attention output from row %d of %d", a->out_row0,
                               a->n);
    if (a->tree && (a->prompt_order || s_check_tree(be, a, slot0) != 0))
        return a->prompt_order ? sw_backend_fail(be, "cpu backend: a tree chunk in prompt order")
                               : -1;

    if (a->kv_q8) { /* the new rows as q8_0 rows, then llama.cpp's flash attention */
        const size_t row = kv_dim / SW_QK * sizeof(sw_block_q8_0);
        for (int r = 0; r < a->n; r++) {
            const size_t at = (size_t)(slot0 + r) * row;
            s_q8(cpu_f32(a->k) + (size_t)r * kv_dim, (char *)a->k_cache->data + at,
                 (int64_t)kv_dim);
            s_q8(cpu_f32(a->v) + (size_t)r * kv_dim, (char *)a->v_cache->data + at,
                 (int64_t)kv_dim);
        }
        return s_run(be, c, a, s_attn_q8_body,
                     (size_t)a->head_dim * 8 + (size_t)a->head_dim / SW_QK * sizeof(sw_block_q8_0));
    }
    /* Append the new rows: K row-major, V transposed. */
    for (int r = 0; r < a->n; r++) {
        const int pos = slot0 + r;
        cpu_to_f16(c, cpu_f32(a->k) + (size_t)r * kv_dim, kc + (size_t)pos * kv_dim, (int)kv_dim);
        const float *v = cpu_f32(a->v) + (size_t)r * kv_dim;
        for (size_t d = 0; d < kv_dim; d++)
            vc[d * (size_t)a->n_ctx + (size_t)pos] = sw_f32_to_f16(v[d]);
    }

    const size_t pad_ctx = (size_t)((a->n_ctx + 31) & ~31);
    return s_run(be, c, a, s_attn_body,
                 (size_t)a->n_ctx * sizeof(float) + pad_ctx * 2 +
                     (size_t)((a->head_dim + 31) & ~31) * 2 + (pad_ctx + 32) * 2 +
                     (size_t)a->head_dim * 4);
}

/* Moves cache slots (token trees: the accepted path is kept). */
int cpu_kv_move(sw_backend_t *be, sw_buf_t *k_cache, sw_buf_t *v_cache, int n_ctx, int kv_dim,
                const int32_t *src, const int32_t *dst, int n)
{
    sw_f16 *kc = (sw_f16 *)k_cache->data, *vc = (sw_f16 *)v_cache->data;
    for (int i = 0; i < n; i++) {
        if (src[i] < 0 || src[i] >= n_ctx || dst[i] < 0 || dst[i] > src[i] ||
            (i && dst[i] <= dst[i - 1]))
            return sw_backend_fail(be, "cpu backend: cache move %d -> %d", src[i], dst[i]);
        if (src[i] == dst[i])
            continue;
        memmove(kc + (size_t)dst[i] * kv_dim, kc + (size_t)src[i] * kv_dim,
                (size_t)kv_dim * sizeof *kc);
        for (size_t d = 0; d < (size_t)kv_dim; d++)
            vc[d * (size_t)n_ctx + (size_t)dst[i]] = vc[d * (size_t)n_ctx + (size_t)src[i]];
    }
    return 0;
}
