/*
 * moe.cu - the mixture-of-experts feed-forward block (Qwen3-MoE,
 * sw_moe_args_t) with the CPU backend's arithmetic, bit for bit, in these
 * steps, all on the device (routing never returns to the host, so a step
 * with experts is recorded as a graph like any other):
 *
 *   router   the f32 router's logits: in a prompt window of 2 counted rows or
 *            more llamafile's tinyBLAS order (k_router_tb: element i on lane
 *            i % 8 by fused multiply-adds, then sw_hsum8), else the exact
 *            matmul's f32 order (mmv.cu), as the CPU's sw_matmul
 *   route    a thread per row: GGML's softmax (groups of 8 with GGML's exp
 *            summed in double, a tail of n_expert % 8 with expf), the n_used
 *            largest (the lowest id on ties), their weights divided by their
 *            sum clamped below at 2^-14
 *   plan     one thread: the (row, slot) pairs grouped by expert in pair
 *            order, in chunks of at most 8 pairs of one expert; an expert to
 *            which 8 or more counted rows go in a prompt window takes the
 *            tiled K-quant order (llama.cpp's MUL_MAT_ID per expert)
 *   experts  gate and up on the rows' inputs quantized once, SwiGLU
 *            (elementwise.cu) over every pair, the down matmul on the pairs'
 *            quantized activations: mmv.cu's kernels on the plan's chunks
 *   combine  each row's expert outputs times their weights, added left to
 *            right (two roundings per term, as ggml_mul then ggml_add)
 *
 * On a GPU the softmax's tail takes CUDA's expf (it may differ from the C
 * library's in the last bit); Qwen3-MoE's 128 experts and Mixtral's 8 leave
 * no tail. Every launch's size depends on (n, n_used, n_expert) only.
 */
#include "common.cuh"

/* Block (expert tile, r): router logit e of row r in tinyBLAS's order. */
static __global__ void k_router_tb(const float *w, size_t w_stride, const float *x, int64_t n_embd,
                                   int n_exp, float *probs)
{
    const int e = blockIdx.x * blockDim.x + threadIdx.x, r = blockIdx.y;
    if (e >= n_exp)
        return;
    const float *wr = (const float *)(const void *)((const char *)w + (size_t)e * w_stride);
    const float *xr = x + (size_t)r * n_embd;
    probs[(size_t)r * n_exp + e] = sw_dot_f32_tinyblas(wr, xr, n_embd);
}

/* Thread r: row r's softmax in place, its k experts (sel) and weights (wts). */
static __global__ void k_route(float *probs, int n, int n_exp, int k, int32_t *sel, float *wts)
{
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= n)
        return;
    sw_moe_route(probs + (size_t)r * n_exp, n_exp, k, sel + (size_t)r * k, wts + (size_t)r * k);
}

/* One thread: the plan of the gathered matmuls (common.cuh, SWC_PLAN_*).
 * cnt: (3, n_exp) int32 of scratch. */
static __global__ void k_plan(const int32_t *sel, int n, int k, int n_exp, int count_row0,
                              int prompt, int32_t *cnt, int32_t *order, int32_t *plan)
{
    int32_t *c = cnt, *counted = cnt + n_exp, *at = cnt + 2 * n_exp;
    const int nk = n * k;
    for (int e = 0; e < n_exp; e++)
        c[e] = counted[e] = 0;
    for (int i = 0; i < nk; i++) {
        c[sel[i]]++;
        counted[sel[i]] += i / k >= count_row0;
    }
    int off = 0;
    for (int e = 0; e < n_exp; e++) {
        at[e] = off;
        off += c[e];
    }
    for (int i = 0; i < nk; i++)
        order[at[sel[i]]++] = i;
    int n_chunks = 0, first = 0;
    for (int e = 0; e < n_exp; e++) {
        for (int s = 0; s < c[e]; s += 8) {
            int32_t *ch = plan + SWC_PLAN_HEAD + SWC_PLAN_CHUNK * n_chunks++;
            ch[0] = e;
            ch[1] = first + s;
            ch[2] = c[e] - s < 8 ? c[e] - s : 8;
            ch[3] = prompt && counted[e] >= 8;
        }
        first += c[e];
    }
    plan[0] = n_chunks;
}

/* Block (tile of i, r): out[r, i] = sum over j of eo[r * k + j, i] * wts[r * k + j]. */
static __global__ void k_combine(const float *eo, const float *wts, int k, int64_t n_embd,
                                 float *out)
{
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int r = blockIdx.y;
    if (i >= n_embd)
        return;
    float o = 0.0f;
    for (int j = 0; j < k; j++) {
        const float t = eo[((size_t)r * k + j) * n_embd + i] * wts[(size_t)r * k + j];
        o = j == 0 ? t : o + t;
    }
    out[(size_t)r * n_embd + i] = o;
}

/* Bytes of one row of n values of the vec-dot type of t, 16-aligned (0: none). */
static size_t s_qrow(enum sw_type t, int64_t n)
{
    uint64_t rb = 0;
    const enum sw_type vt = sw_type_vec_dot(t);
    if (vt == SW_TYPE_COUNT || sw_type_row_bytes(vt, n, &rb) != 0)
        return 0;
    return (size_t)((rb + 15) & ~(uint64_t)15);
}

/* A scratch pointer as a buffer for the operations that take one. */
static sw_buf_t *s_as_buf(swc_buf *b, void *d, size_t bytes)
{
    b->d = (char *)d;
    b->bytes = bytes;
    b->owned = 0;
    return (sw_buf_t *)(void *)b;
}

int swc_moe(sw_backend_t *be, const sw_moe_args_t *a)
{
    swc *c = swc_of(be);
    const int n = a->n, k = a->n_used, n_exp = a->gate->n_expert;
    const int64_t n_embd = a->router->n_in, n_ff = a->gate->n_out;
    if (k < 1 || k > SW_MOE_MAX_USED || n_exp < k || n_exp > SW_MOE_MAX_EXPERTS ||
        a->router->n_out != n_exp || a->router->type != SW_TYPE_F32 || n_embd % 8 ||
        a->up->n_expert != n_exp || a->up->type != a->gate->type || a->down->n_expert != n_exp ||
        a->down->n_in != n_ff || a->down->n_out != n_embd || n < 1)
        return sw_backend_fail(be, "cuda: inconsistent mixture-of-experts shapes");
    const size_t qg = s_qrow(a->gate->type, n_embd), qd = s_qrow(a->down->type, n_ff);
    if (!qg || !qd)
        return sw_backend_fail(be, "cuda: expert types %s/%s cannot be multiplied",
                               sw_type_name(a->gate->type), sw_type_name(a->down->type));
    if (swc_use(be) != 0)
        return -1;
    const int nk = n * k;
    /* A chunk holds up to 8 pairs of one expert: at most nk / 8 full ones
     * and one partial per expert in use. */
    const int max_chunks = nk / 8 + (n_exp < nk ? n_exp : nk);
    /* Scratch: probs (n, n_exp) f32 | wts (nk) f32 | sel (nk) | order (nk) |
     * cnt (3, n_exp) | plan | xq (n, qg) | gate, up (nk, n_ff) f32 |
     * aq (nk, qd) | eo (nk, n_embd) f32. */
    const size_t sizes[11] = {
        (size_t)n * n_exp * 4,  (size_t)nk * 4,
        (size_t)nk * 4,         (size_t)nk * 4,
        (size_t)3 * n_exp * 4,  (size_t)(SWC_PLAN_HEAD + SWC_PLAN_CHUNK * max_chunks) * 4,
        (size_t)n * qg,         (size_t)nk * n_ff * 4,
        (size_t)nk * n_ff * 4,  (size_t)nk * qd,
        (size_t)nk * n_embd * 4};
    size_t off[11], need = 0;
    for (int i = 0; i < 11; i++) {
        off[i] = need;
        need += (sizes[i] + 255) & ~(size_t)255;
    }
    void *scratch;
    if (swc_scratch(be, SWC_SCRATCH_MOE, need, &scratch) != 0)
        return -1;
    char *base = (char *)scratch;
    float *probs = (float *)(void *)(base + off[0]), *wts = (float *)(void *)(base + off[1]);
    int32_t *sel = (int32_t *)(void *)(base + off[2]), *order = (int32_t *)(void *)(base + off[3]);
    int32_t *cnt = (int32_t *)(void *)(base + off[4]), *plan = (int32_t *)(void *)(base + off[5]);
    uint8_t *xq = (uint8_t *)(base + off[6]), *aq = (uint8_t *)(base + off[9]);
    float *gate = (float *)(void *)(base + off[7]), *up = (float *)(void *)(base + off[8]);
    float *eo = (float *)(void *)(base + off[10]);
    const float *x = swc_ptr<float>(a->x);

    /* Router logits (llama.cpp hands a matmul of 2 counted rows or more to
     * llamafile; one row to ggml_vec_dot_f32, the exact matmul's f32 order). */
    swc_buf pb;
    if (a->prompt && n - a->count_row0 >= 2) {
        k_router_tb<<<dim3(swc_blocks(n_exp, 64), n), 64, 0, c->stream>>>(
            swc_ptr<float>(a->router->buf), a->router->row_bytes, x, n_embd, n_exp, probs);
        if (swc_launched(be, "router") != 0)
            return -1;
    } else {
        sw_buf_t *y = s_as_buf(&pb, probs, sizes[0]);
        const sw_weight_t *ws[1] = {a->router};
        if (swc_matmul(be, 1, ws, NULL, a->x, 0, n, &y, 0) != 0)
            return -1;
    }
    k_route<<<swc_blocks(n, 64), 64, 0, c->stream>>>(probs, n, n_exp, k, sel, wts);
    if (swc_launched(be, "route") != 0)
        return -1;
    k_plan<<<1, 1, 0, c->stream>>>(sel, n, k, n_exp, a->count_row0, a->prompt ? 1 : 0, cnt, order,
                                   plan);
    if (swc_launched(be, "expert plan") != 0)
        return -1;

    /* Gate and up on the rows' inputs, quantized once; SwiGLU over every pair. */
    const enum sw_type vg = sw_type_vec_dot(a->gate->type), vd = sw_type_vec_dot(a->down->type);
    if (swc_quantize(be, vg, x, n_embd, n, xq, qg) != 0 ||
        swc_matmul_experts(be, a->gate, xq, qg, k, nk, plan, order, sel, max_chunks, gate) != 0 ||
        swc_matmul_experts(be, a->up, xq, qg, k, nk, plan, order, sel, max_chunks, up) != 0)
        return -1;
    swc_buf gb, ub;
    if (swc_swiglu(be, s_as_buf(&gb, gate, sizes[7]), s_as_buf(&ub, up, sizes[8]),
                   (size_t)nk * (size_t)n_ff) != 0)
        return -1;
    /* Down on each pair's activations, then the weighted sum of each row's. */
    if (swc_quantize(be, vd, gate, n_ff, nk, aq, qd) != 0 ||
        swc_matmul_experts(be, a->down, aq, qd, 1, nk, plan, order, sel, max_chunks, eo) != 0)
        return -1;
    k_combine<<<dim3(swc_blocks(n_embd, 256), n), 256, 0, c->stream>>>(eo, wts, k, n_embd,
                                                                       swc_ptr<float>(a->out));
    return swc_launched(be, "combine");
}
