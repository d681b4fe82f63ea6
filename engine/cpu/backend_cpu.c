/*
 * backend_cpu.c - the CPU implementation of the compute layer (the operations
 * of backend_impl.h).
 *
 * Work is split between the threads of one sw_pool by output rows (matmul),
 * by (row, head) pairs (attention) or by rows (the rest), so that every
 * output value is computed by exactly one thread with a fixed reduction
 * order: results never depend on the thread count or on the batch size.
 *
 * Numerics follow llama.cpp's CPU path where it matters for identical greedy
 * tokens: activations are quantized to the weight's vec-dot type before a
 * matmul, RMS norm sums squares in double, the KV cache is f16, queries and
 * attention probabilities are rounded to f16 before their dot products, and
 * rope angles are built by repeated multiplication as GGML does.
 */
#include "backend_cpu.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cpu_state_impl.h"
#include "log.h"
#include "op_math.h"
#include "sw_limits.h"
#include "threadpool.h"

/* ---- memory ---------------------------------------------------------------- */

static sw_buf_t *s_buf_alloc(sw_backend_t *be, size_t bytes)
{
    (void)be;
    sw_buf_t *b = calloc(1, sizeof *b);
    if (!b)
        return NULL;
    size_t rounded = (bytes + 63) & ~(size_t)63;
    if (rounded < bytes || !(b->data = aligned_alloc(64, rounded ? rounded : 64))) {
        free(b);
        return NULL;
    }
    memset(b->data, 0, rounded);
    b->bytes = bytes;
    b->owned = 1;
    return b;
}

/* Weights stay in the model file's mapping: the buffer only refers to them. */
static sw_buf_t *s_buf_weight(sw_backend_t *be, const void *host, size_t bytes)
{
    (void)be;
    sw_buf_t *b = calloc(1, sizeof *b);
    if (!b)
        return NULL;
    b->data = (void *)(uintptr_t)host;
    b->bytes = bytes;
    return b;
}

static sw_buf_t *s_buf_view(sw_backend_t *be, sw_buf_t *parent, size_t off, size_t bytes)
{
    (void)be;
    if (off > parent->bytes || bytes > parent->bytes - off)
        return NULL;
    sw_buf_t *b = calloc(1, sizeof *b);
    if (!b)
        return NULL;
    b->data = (char *)parent->data + off;
    b->bytes = bytes;
    return b;
}

static void s_buf_free(sw_backend_t *be, sw_buf_t *buf)
{
    (void)be;
    if (!buf)
        return;
    if (buf->owned)
        free(buf->data);
    free(buf);
}

void *sw_buf_host(sw_buf_t *buf)
{
    return buf ? buf->data : NULL;
}

static int s_upload(sw_backend_t *be, sw_buf_t *dst, size_t off, const void *src, size_t n)
{
    if (off > dst->bytes || n > dst->bytes - off)
        return sw_backend_fail(be,
                               "cpu backend: upload of %zu bytes at %zu overruns a %zu-byte "
                               "buffer",
                               n, off, dst->bytes);
    memcpy((char *)dst->data + off, src, n);
    return 0;
}

static int s_download(sw_backend_t *be, void *dst, const sw_buf_t *src, size_t off, size_t n)
{
    if (off > src->bytes || n > src->bytes - off)
        return sw_backend_fail(be,
                               "cpu backend: download of %zu bytes at %zu overruns a "
                               "%zu-byte buffer",
                               n, off, src->bytes);
    memcpy(dst, (const char *)src->data + off, n);
    return 0;
}

static int s_copy2d(sw_backend_t *be, sw_buf_t *dst, size_t dst_off, size_t dst_pitch,
                    const sw_buf_t *src, size_t src_off, size_t src_pitch, size_t width, int rows)
{
    if (rows < 1)
        return 0;
    const size_t last = (size_t)(rows - 1);
    if (dst_off + last * dst_pitch + width > dst->bytes ||
        src_off + last * src_pitch + width > src->bytes)
        return sw_backend_fail(be, "cpu backend: a copy of %d rows of %zu bytes overruns a buffer",
                               rows, width);
    for (int r = 0; r < rows; r++)
        memmove((char *)dst->data + dst_off + (size_t)r * dst_pitch,
                (const char *)src->data + src_off + (size_t)r * src_pitch, width);
    return 0;
}

/* ---- elementwise ops ---------------------------------------------------------- */

static int s_get_rows(sw_backend_t *be, const sw_weight_t *emb, const sw_buf_t *ctl, int n,
                      sw_buf_t *out)
{
    (void)be;
    const int32_t *ids = cpu_i32(ctl) + SW_CTL_POS + n;
    for (int r = 0; r < n; r++) {
        const char *row = (const char *)emb->buf->data + (size_t)ids[r] * emb->row_bytes;
        sw_dequantize_row(emb->type, row, cpu_f32(out) + (size_t)r * emb->n_in, emb->n_in);
    }
    return 0;
}

static int s_rmsnorm(sw_backend_t *be, const sw_buf_t *x, const sw_buf_t *wb, int n, int dim,
                     float eps, sw_buf_t *out)
{
    (void)be;
    const float *w = cpu_f32(wb);
    for (int r = 0; r < n; r++) {
        const float *xr = cpu_f32(x) + (size_t)r * dim;
        float *yr = cpu_f32(out) + (size_t)r * dim;
        const float mean = sw_rms_mean(sw_sumsq_seq(xr, dim), dim);
        const float scale = 1.0f / sqrtf(mean + eps);
        for (int i = 0; i < dim; i++) {
            float v = xr[i] * scale;
            yr[i] = v * w[i];
        }
    }
    return 0;
}

static int s_add(sw_backend_t *be, sw_buf_t *x, const sw_buf_t *y, size_t n)
{
    (void)be;
    float *a = cpu_f32(x);
    const float *b = cpu_f32(y);
    for (size_t i = 0; i < n; i++)
        a[i] += b[i];
    return 0;
}

static int s_swiglu(sw_backend_t *be, sw_buf_t *gate, const sw_buf_t *up, size_t n)
{
    const cpu_state_t *c = cpu_impl(be);
    float *g = cpu_f32(gate);
    const float *u = cpu_f32(up);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        if (c->avx2) {
            sw_cpu_swiglu8_avx2(g + i, u + i);
            continue;
        }
        for (size_t l = i; l < i + 8; l++)
            g[l] = sw_swiglu_ggml(g[l], u[l]);
    }
    for (; i < n; i++) {
        float x = g[i];
        float silu = x / (1.0f + expf(-x));
        g[i] = silu * u[i];
    }
    return 0;
}

/* ggml_scale: one multiplication per element. */
static int s_scale(sw_backend_t *be, sw_buf_t *x, size_t n, float v)
{
    (void)be;
    float *a = cpu_f32(x);
    for (size_t i = 0; i < n; i++)
        a[i] *= v;
    return 0;
}

/* GGML's GEGLU on the CPU (ggml_vec_geglu_f32 with GGML_GELU_FP16). */
static int s_geglu(sw_backend_t *be, sw_buf_t *gate, const sw_buf_t *up, size_t n)
{
    (void)be;
    const sw_f16 *table = sw_gelu_f16_table();
    float *g = cpu_f32(gate);
    const float *u = cpu_f32(up);
    for (size_t i = 0; i < n; i++)
        g[i] = sw_geglu_ggml(table, g[i], u[i]);
    return 0;
}

/* Rotary embedding with the model's cos/sin table (sw_rope_table()). */
static int s_rope(sw_backend_t *be, sw_buf_t *x, const sw_buf_t *ctl, int n, int n_heads,
                  int head_dim, int n_rot, const sw_buf_t *cs_buf, int neox)
{
    (void)be;
    const int32_t *pos = cpu_i32(ctl) + SW_CTL_POS;
    for (int r = 0; r < n; r++) {
        const float *cs = cpu_f32(cs_buf) + (size_t)pos[r] * (size_t)n_rot;
        float *row = cpu_f32(x) + (size_t)r * n_heads * head_dim;
        for (int h = 0; h < n_heads; h++) {
            float *v = row + (size_t)h * head_dim;
            for (int i = 0; i < n_rot / 2; i++) {
                int a = neox ? i : 2 * i;
                int b = neox ? i + n_rot / 2 : 2 * i + 1;
                sw_rope_pair(&v[a], &v[b], cs[2 * i], cs[2 * i + 1]);
            }
        }
    }
    return 0;
}

static int s_head_norm(sw_backend_t *be, sw_buf_t *x, int n, int n_heads, int head_dim,
                       const sw_buf_t *wb, float eps)
{
    (void)be;
    const float *w = cpu_f32(wb);
    for (int r = 0; r < n; r++) {
        for (int h = 0; h < n_heads; h++) {
            float *v = cpu_f32(x) + ((size_t)r * n_heads + h) * head_dim;
            const float scale =
                1.0f / sqrtf(sw_head_norm_arg(sw_sumsq_seq(v, head_dim), head_dim, eps));
            for (int i = 0; i < head_dim; i++) {
                float t = v[i] * scale;
                v[i] = t * w[i];
            }
        }
    }
    return 0;
}

/* ---- matmul ------------------------------------------------------------------- */

struct s_mm_job {
    int n_w;
    const sw_weight_t *w[SW_MATMUL_MAX_W];
    float *y[SW_MATMUL_MAX_W];
    const void *xq[SW_MATMUL_MAX_W]; // quantized input per weight (shared when types agree)
    size_t xq_stride[SW_MATMUL_MAX_W];
    int n;
    int tiled;         // SW_MM_TILED: sw_matmul_tiled (the K-quants)
    int prompt;        // SW_MM_PROMPT: sw_matmul_sgemm (iq4_nl)
    int64_t total;     // sum of n_out
    int64_t chunk;     // output rows per work item (a multiple of 16)
    atomic_llong next; // next work item
};

/* Threads take chunks of the concatenated outputs from a shared counter, so
 * a thread that the OS preempts does not hold the others up; each output is
 * still computed whole by one thread, so the split never changes a value. */
static void s_mm_body(void *ctx, int ith, int nth)
{
    struct s_mm_job *j = ctx;
    (void)ith;
    (void)nth;
    for (;;) {
        const int64_t begin = atomic_fetch_add(&j->next, 1) * j->chunk;
        if (begin >= j->total)
            return;
        const int64_t end = begin + j->chunk < j->total ? begin + j->chunk : j->total;
        int64_t base = 0;
        for (int i = 0; i < j->n_w && base < end; i++) {
            const sw_weight_t *w = j->w[i];
            int64_t lo = begin - base, hi = end - base;
            if (lo < 0)
                lo = 0;
            if (hi > w->n_out)
                hi = w->n_out;
            if (lo < hi && j->prompt) // MUL_MAT's batched paths
                sw_matmul_batch(w->type, j->tiled ? 8 : 2, w->n_in, w->buf->data, w->row_bytes, lo,
                                hi, j->xq[i], j->xq_stride[i], j->n, j->y[i], w->n_out);
            else if (lo < hi) // an expert (MUL_MAT_ID: tiled or not, never sgemm), or decode
                (j->tiled ? sw_matmul_tiled : sw_matmul)(w->type, w->n_in, w->buf->data,
                                                         w->row_bytes, lo, hi, j->xq[i],
                                                         j->xq_stride[i], j->n, j->y[i], w->n_out);
            base += w->n_out;
        }
    }
}

static int s_qbuf_reserve(cpu_state_t *c, size_t bytes)
{
    if (bytes <= c->qbuf_bytes)
        return 0;
    void *p = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    if (!p)
        return -1;
    free(c->qbuf);
    c->qbuf = p;
    c->qbuf_bytes = bytes;
    return 0;
}

static int s_matmul(sw_backend_t *be, int n_w, const sw_weight_t *const *w,
                    const sw_buf_t *const *bias, const sw_buf_t *x, int x_row0, int n,
                    sw_buf_t *const *y, int flags)
{
    cpu_state_t *c = cpu_impl(be);
    if (n_w < 1 || n_w > SW_MATMUL_MAX_W)
        return sw_backend_fail(be, "cpu backend: matmul of %d weights (1..%d)", n_w,
                               SW_MATMUL_MAX_W);
    struct s_mm_job job = {.n_w = n_w,
                           .n = n,
                           .tiled = (flags & (SW_MM_PROMPT | SW_MM_TILED)) ==
                                    (SW_MM_PROMPT | SW_MM_TILED),
                           .prompt = (flags & SW_MM_PROMPT) != 0};
    const int64_t n_in = w[0]->n_in;
    const float *xs = cpu_f32(x) + (size_t)x_row0 * n_in;

    /* Quantize the input once per distinct vec-dot type. */
    enum sw_type types[SW_MATMUL_MAX_W];
    size_t offs[SW_MATMUL_MAX_W], strides[SW_MATMUL_MAX_W], need = 0;
    int n_types = 0;
    for (int i = 0; i < n_w; i++) {
        enum sw_type vt = sw_type_vec_dot(w[i]->type);
        int k = 0;
        while (k < n_types && types[k] != vt)
            k++;
        if (k == n_types) {
            uint64_t rb = 0;
            if (vt == SW_TYPE_COUNT || sw_type_row_bytes(vt, n_in, &rb) != 0)
                return sw_backend_fail(be,
                                       "cpu backend: a %s weight of %lld columns cannot be "
                                       "multiplied",
                                       sw_type_name(w[i]->type), (long long)n_in);
            types[k] = vt;
            strides[k] = (size_t)((rb + 63) & ~(uint64_t)63);
            offs[k] = need;
            need += strides[k] * (size_t)n;
            n_types++;
        }
        job.xq_stride[i] = strides[k];
        job.xq[i] = (const void *)(uintptr_t)offs[k]; // rebased below
        job.w[i] = w[i];
        job.y[i] = cpu_f32(y[i]);
        job.total += w[i]->n_out;
    }
    if (s_qbuf_reserve(c, need) != 0)
        return sw_backend_fail(be, "cpu backend: out of memory for a %zu-byte matmul input", need);
    for (int k = 0; k < n_types; k++)
        for (int r = 0; r < n; r++)
            if (sw_quantize_row(types[k], xs + (size_t)r * n_in,
                                (char *)c->qbuf + offs[k] + strides[k] * (size_t)r, n_in) != 0)
                return sw_backend_fail(be, "cpu backend: cannot quantize activations to %s",
                                       sw_type_name(types[k]));
    for (int i = 0; i < n_w; i++)
        job.xq[i] = (const char *)c->qbuf + (uintptr_t)job.xq[i];

    /* About 8 work items per thread, at least 16 rows each. */
    job.chunk = job.total / ((int64_t)c->n_threads * 8);
    job.chunk = job.chunk < 16 ? 16 : (job.chunk + 15) & ~(int64_t)15;
    atomic_init(&job.next, 0);
    sw_pool_run(c->pool, s_mm_body, &job);

    if (bias) {
        for (int i = 0; i < n_w; i++) {
            if (!bias[i])
                continue;
            const float *bi = cpu_f32(bias[i]);
            for (int r = 0; r < n; r++) {
                float *yr = job.y[i] + (size_t)r * w[i]->n_out;
                for (int64_t o = 0; o < w[i]->n_out; o++)
                    yr[o] += bi[o];
            }
        }
    }
    return 0;
}

/* ---- mixture of experts --------------------------------------------------------- */

/* A view of expert e of a 3-D weight as a plain weight. */
static void s_expert(const sw_weight_t *w, int e, sw_weight_t *out, sw_buf_t *buf)
{
    *out = *w;
    out->n_expert = 0;
    buf->data = (char *)w->buf->data + (size_t)e * (size_t)w->n_out * w->row_bytes;
    buf->bytes = (size_t)w->n_out * w->row_bytes;
    buf->owned = 0;
    out->buf = buf;
}

/* Multiplies the n_w (<= 2) weights by the nr quantized rows xq (stride
 * xs) into y_i (nr, n_out), over the pool. */
static void s_mm_rows(cpu_state_t *c, int n_w, const sw_weight_t *const *w, const void *xq,
                      size_t xs, int nr, float *const *y, int tiled)
{
    struct s_mm_job job = {.n_w = n_w, .n = nr, .tiled = tiled};
    for (int i = 0; i < n_w; i++) {
        job.w[i] = w[i];
        job.xq[i] = xq;
        job.xq_stride[i] = xs;
        job.y[i] = y[i];
        job.total += w[i]->n_out;
    }
    job.chunk = job.total / ((int64_t)c->n_threads * 8);
    job.chunk = job.chunk < 16 ? 16 : (job.chunk + 15) & ~(int64_t)15;
    atomic_init(&job.next, 0);
    sw_pool_run(c->pool, s_mm_body, &job);
}

/* Bytes of one quantized row of n values of the vec-dot type of t, 64-aligned. */
static size_t s_qrow(enum sw_type t, int64_t n)
{
    uint64_t rb = 0;
    if (sw_type_row_bytes(sw_type_vec_dot(t), n, &rb) != 0)
        return 0;
    return (size_t)((rb + 63) & ~(uint64_t)63);
}

/* The parts of the mixture-of-experts scratch (c->moe) for one call of n rows
 * of k experts each (nk = n * k (row, slot) pairs), n_exp experts, n_embd
 * inputs, n_ff expert outputs, quantized rows of qg (gate/up input) and qd
 * (down input) bytes. */
struct s_moe_scratch {
    float *probs;  // (n, n_exp) the router's softmax
    float *wts;    // (nk) the chosen experts' weights
    int32_t *sel;  // (nk) the chosen experts
    int32_t *rows; // (nk) the pairs routed to one expert
    char *xq;      // (n, qg) the input quantized for gate and up
    char *gq;      // (n, max(qg, qd)) one expert's rows gathered (a row picks an expert once)
    float *gate;   // (nk, n_ff) f32
    float *up;     // (nk, n_ff) f32
    char *aq;      // (nk, qd) silu(gate) * up quantized for down
    float *eo;     // (nk, n_embd) f32 each pair's expert output
    float *y0;     // (n, max(n_ff, n_embd)) f32 one expert's output
    float *y1;     // (n, max(n_ff, n_embd)) f32
};

/* Cuts c->moe (grown as needed) into *s for the shapes of a; 0, or -1 with
 * the backend's error. */
static int s_moe_scratch(sw_backend_t *be, const sw_moe_args_t *a, size_t qg, size_t qd,
                         struct s_moe_scratch *s)
{
    cpu_state_t *c = cpu_impl(be);
    const int n = a->n, nk = n * a->n_used, n_exp = a->gate->n_expert;
    const int64_t n_embd = a->router->n_in, n_ff = a->gate->n_out;
    const size_t mx = (size_t)(n_ff > n_embd ? n_ff : n_embd);
    size_t off[12], need = 0;
    const size_t sizes[12] = {
        (size_t)n * n_exp * 4,   (size_t)nk * 4,        (size_t)nk * 4,
        (size_t)nk * 4,          (size_t)n * qg,        (size_t)n * (qg > qd ? qg : qd),
        (size_t)nk * n_ff * 4,   (size_t)nk * n_ff * 4, (size_t)nk * qd,
        (size_t)nk * n_embd * 4, (size_t)n * mx * 4,    (size_t)n * mx * 4};
    for (int i = 0; i < 12; i++) {
        off[i] = need;
        need += (sizes[i] + 63) & ~(size_t)63;
    }
    if (need > c->moe_bytes) {
        void *p = aligned_alloc(64, need);
        if (!p)
            return sw_backend_fail(be, "cpu backend: out of memory for a %zu-byte expert scratch",
                                   need);
        free(c->moe);
        c->moe = p;
        c->moe_bytes = need;
    }
    void *at[12];
    for (int i = 0; i < 12; i++)
        at[i] = (char *)c->moe + off[i];
    *s = (struct s_moe_scratch){.probs = at[0],
                                .wts = at[1],
                                .sel = at[2],
                                .rows = at[3],
                                .xq = at[4],
                                .gq = at[5],
                                .gate = at[6],
                                .up = at[7],
                                .aq = at[8],
                                .eo = at[9],
                                .y0 = at[10],
                                .y1 = at[11]};
    return 0;
}

/* Routing: logits, softmax, the k best in descending order (lowest id first
 * on ties), their weights normalised by their double-precision sum clamped at
 * 2^-14 (llama.cpp's weights_sum with its f16 floor), into s->sel and s->wts. */
static void s_moe_route(const sw_moe_args_t *a, const struct s_moe_scratch *s)
{
    const int n = a->n, k = a->n_used, n_exp = a->gate->n_expert;
    const int64_t n_embd = a->router->n_in;
    const float *x = cpu_f32(a->x);
    const float *wr = cpu_f32(a->router->buf);
    /* llama.cpp hands a matmul of 2 rows or more to llamafile (prompts; in
     * the last layer only the rows that want logits count), one row to
     * ggml_vec_dot_f32 (sw_matmul's f32 order). */
    const int tinyblas = a->prompt && n - a->count_row0 >= 2;
    for (int r = 0; r < n; r++) {
        float *p = s->probs + (size_t)r * n_exp;
        if (tinyblas)
            for (int e = 0; e < n_exp; e++)
                p[e] = sw_dot_f32_tinyblas(wr + (size_t)e * n_embd, x + (size_t)r * n_embd, n_embd);
        else
            sw_matmul(SW_TYPE_F32, n_embd, wr, a->router->row_bytes, 0, n_exp,
                      x + (size_t)r * n_embd, (size_t)n_embd * sizeof(float), 1, p, n_exp);
        sw_moe_route(p, n_exp, k, s->sel + (size_t)r * k, s->wts + (size_t)r * k);
    }
}

/* The (row, slot) pairs routed to expert e, ascending, into s->rows; *cnt
 * their number (0: none), *tiled whether the expert's matmuls take the tiled
 * order (a prompt window with 8 or more of them counted). 0, or -1 with the
 * backend's error when more than n pairs picked e. */
static int s_moe_pick(sw_backend_t *be, const sw_moe_args_t *a, const struct s_moe_scratch *s,
                      int e, int *cnt, int *tiled)
{
    const int n = a->n, k = a->n_used, nk = n * k;
    int m = 0, counted = 0;
    for (int i = 0; i < nk; i++)
        if (s->sel[i] == e) {
            s->rows[m++] = i;
            counted += i / k >= a->count_row0;
        }
    *cnt = m;
    *tiled = a->prompt && counted >= 8;
    if (m > n) // a row picks each expert at most once: the buffers hold n rows
        return sw_backend_fail(be, "cpu backend: expert %d picked %d times by %d rows", e, m, n);
    return 0;
}

/* Gate and up, expert by expert over the rows routed to it: s->gate and
 * s->up from the quantized input s->xq (rows of qg bytes). */
static int s_moe_gate_up(sw_backend_t *be, const sw_moe_args_t *a, const struct s_moe_scratch *s,
                         size_t qg)
{
    const int k = a->n_used, n_exp = a->gate->n_expert;
    const int64_t n_ff = a->gate->n_out;
    for (int e = 0; e < n_exp; e++) {
        int cnt, tiled;
        if (s_moe_pick(be, a, s, e, &cnt, &tiled) != 0)
            return -1;
        if (cnt == 0)
            continue;
        for (int j = 0; j < cnt; j++)
            memcpy(s->gq + (size_t)j * qg, s->xq + (size_t)(s->rows[j] / k) * qg, qg);
        sw_buf_t bg, bu;
        sw_weight_t wg, wu;
        s_expert(a->gate, e, &wg, &bg);
        s_expert(a->up, e, &wu, &bu);
        const sw_weight_t *ws[2] = {&wg, &wu};
        float *ys[2] = {s->y0, s->y1};
        s_mm_rows(cpu_impl(be), 2, ws, s->gq, qg, cnt, ys, tiled);
        for (int j = 0; j < cnt; j++) {
            memcpy(s->gate + (size_t)s->rows[j] * n_ff, s->y0 + (size_t)j * n_ff, (size_t)n_ff * 4);
            memcpy(s->up + (size_t)s->rows[j] * n_ff, s->y1 + (size_t)j * n_ff, (size_t)n_ff * 4);
        }
    }
    return 0;
}

/* Down, expert by expert: s->eo from the quantized s->aq (rows of qd bytes). */
static int s_moe_down(sw_backend_t *be, const sw_moe_args_t *a, const struct s_moe_scratch *s,
                      size_t qd)
{
    const int n_exp = a->gate->n_expert;
    const int64_t n_embd = a->router->n_in;
    for (int e = 0; e < n_exp; e++) {
        int cnt, tiled;
        if (s_moe_pick(be, a, s, e, &cnt, &tiled) != 0)
            return -1;
        if (cnt == 0)
            continue;
        for (int j = 0; j < cnt; j++)
            memcpy(s->gq + (size_t)j * qd, s->aq + (size_t)s->rows[j] * qd, qd);
        sw_buf_t bd;
        sw_weight_t wd;
        s_expert(a->down, e, &wd, &bd);
        const sw_weight_t *ws[1] = {&wd};
        float *ys[1] = {s->y0};
        s_mm_rows(cpu_impl(be), 1, ws, s->gq, qd, cnt, ys, tiled);
        for (int j = 0; j < cnt; j++)
            memcpy(s->eo + (size_t)s->rows[j] * n_embd, s->y0 + (size_t)j * n_embd,
                   (size_t)n_embd * 4);
    }
    return 0;
}

static int s_moe(sw_backend_t *be, const sw_moe_args_t *a)
{
    const int n = a->n, k = a->n_used, n_exp = a->gate->n_expert;
    const int64_t n_embd = a->router->n_in, n_ff = a->gate->n_out;
    if (k < 1 || k > SW_MOE_MAX_USED || n_exp < k || a->router->n_out != n_exp ||
        a->router->type != SW_TYPE_F32 || n_embd % 8 || a->up->n_expert != n_exp ||
        a->down->n_expert != n_exp || a->down->n_in != n_ff || a->down->n_out != n_embd)
        return sw_backend_fail(be, "cpu backend: inconsistent mixture-of-experts shapes");
    const int nk = n * k;
    const size_t qg = s_qrow(a->gate->type, n_embd), qd = s_qrow(a->down->type, n_ff);
    if (!qg || !qd)
        return sw_backend_fail(be, "cpu backend: expert types %s/%s cannot be multiplied",
                               sw_type_name(a->gate->type), sw_type_name(a->down->type));
    struct s_moe_scratch s;
    if (s_moe_scratch(be, a, qg, qd, &s) != 0)
        return -1;
    s_moe_route(a, &s);

    /* The input rows quantized once for the gate and up experts. */
    const float *x = cpu_f32(a->x);
    const enum sw_type vg = sw_type_vec_dot(a->gate->type), vd = sw_type_vec_dot(a->down->type);
    for (int r = 0; r < n; r++)
        if (sw_quantize_row(vg, x + (size_t)r * n_embd, s.xq + (size_t)r * qg, n_embd) != 0)
            return sw_backend_fail(be, "cpu backend: cannot quantize activations to %s",
                                   sw_type_name(vg));
    if (s_moe_gate_up(be, a, &s, qg) != 0)
        return -1;
    /* SwiGLU, as the dense FFN's (groups of 8 with GGML's exp). */
    {
        sw_buf_t g = {.bytes = (size_t)nk * n_ff * 4, .data = s.gate, .owned = 0};
        sw_buf_t u = {.bytes = (size_t)nk * n_ff * 4, .data = s.up, .owned = 0};
        if (s_swiglu(be, &g, &u, (size_t)nk * (size_t)n_ff) != 0)
            return -1;
    }
    for (int i = 0; i < nk; i++)
        if (sw_quantize_row(vd, s.gate + (size_t)i * n_ff, s.aq + (size_t)i * qd, n_ff) != 0)
            return sw_backend_fail(be, "cpu backend: cannot quantize activations to %s",
                                   sw_type_name(vd));
    if (s_moe_down(be, a, &s, qd) != 0)
        return -1;
    /* Each expert's output times its weight, then added left to right. */
    float *out = cpu_f32(a->out);
    for (int r = 0; r < n; r++) {
        float *o = out + (size_t)r * n_embd;
        for (int j = 0; j < k; j++) {
            const float *er = s.eo + ((size_t)r * k + j) * n_embd;
            const float w = s.wts[(size_t)r * k + j];
            for (int64_t i = 0; i < n_embd; i++) {
                const float t = er[i] * w; // ggml_mul, then ggml_add: two roundings
                o[i] = j == 0 ? t : o[i] + t;
            }
        }
    }
    return 0;
}

/* The draft loop's greedy step: the first largest value and its softmax
 * probability, computed as the draft model's host code does. */
static int s_argmax(sw_backend_t *be, const sw_buf_t *x, int dim, sw_buf_t *tok, size_t tok_off,
                    sw_buf_t *ids, sw_buf_t *prob, size_t ids_off)
{
    const float *l = cpu_f32(x);
    float best = -INFINITY;
    int32_t best_id = -1;
    for (int i = 0; i < dim; i++) {
        if (isnan(l[i]) || l[i] == INFINITY)
            return sw_backend_fail(be, "cpu backend: logit %d is %g", i, (double)l[i]);
        if (l[i] > best) {
            best = l[i];
            best_id = i;
        }
    }
    if (best_id < 0)
        return sw_backend_fail(be, "cpu backend: every logit is -inf");
    if (tok)
        ((int32_t *)tok->data)[tok_off] = best_id;
    ((int32_t *)ids->data)[ids_off] = best_id;
    if (prob) {
        double sum = 0;
        for (int i = 0; i < dim; i++)
            sum += exp((double)(l[i] - best));
        cpu_f32(prob)[ids_off] = (float)(1.0 / sum);
    }
    return 0;
}

/* ---- lifecycle -------------------------------------------------------------------- */

static void s_destroy(sw_backend_t *be)
{
    cpu_state_t *c = cpu_impl(be);
    if (!c)
        return;
    sw_pool_destroy(&c->pool);
    free(c->qbuf);
    free(c->scratch);
    free(c->moe);
    free(c);
    be->impl = NULL;
}

static const sw_backend_ops_t s_cpu_ops = {
    .name = "cpu",
    .destroy = s_destroy,
    .buf_alloc = s_buf_alloc,
    .buf_weight = s_buf_weight,
    .buf_view = s_buf_view,
    .buf_free = s_buf_free,
    .upload = s_upload,
    .download = s_download,
    .get_rows = s_get_rows,
    .rmsnorm = s_rmsnorm,
    .matmul = s_matmul,
    .rope = s_rope,
    .kv_move = cpu_kv_move,
    .head_norm = s_head_norm,
    .attention = cpu_attention,
    .add = s_add,
    .swiglu = s_swiglu,
    .scale = s_scale,
    .geglu = s_geglu,
    .moe = s_moe,
    .argmax = s_argmax,
    .sync = NULL,
    .graph_run = NULL,
    .graph_reset = NULL,
    .transfer = NULL,
    .mem_free = NULL,
    .attn_swa = 1,
    .copy2d = s_copy2d,
    .attn_q8_0 = 1,
};

sw_backend_t *sw_backend_cpu_new(int n_threads)
{
    if (n_threads <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = n > 0 ? (int)n : 1;
    }
    sw_backend_t *be = calloc(1, sizeof *be);
    cpu_state_t *c = calloc(1, sizeof *c);
    if (!be || !c)
        goto err;
    c->n_threads = n_threads;
    c->pool = sw_pool_new(n_threads);
    if (!c->pool)
        goto err;
    c->avx2 = sw_quant_level() >= SW_KLEVEL_AVX2;
    be->ops = &s_cpu_ops;
    be->impl = c;
    /* A whole prompt window (512 rows) in one forward chunk: each weight is
     * then read and unpacked once per window, not once per 64 rows (the
     * results do not depend on the chunking). */
    be->max_rows = SW_MODEL_PROMPT_WINDOW;
    snprintf(be->name, sizeof be->name, "cpu");
    snprintf(be->desc, sizeof be->desc, "cpu (%d thread%s, %s kernels)", n_threads,
             n_threads == 1 ? "" : "s", sw_cpu_kernels());
    return be;
err:
    free(c);
    free(be);
    return NULL;
}
