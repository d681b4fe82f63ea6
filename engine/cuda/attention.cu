/*
 * attention.cu - attention over the f16 KV cache, in the CPU's layout and
 * with the CPU's arithmetic (op_math.h), in four kernels:
 *
 *   append   K row-major and V transposed into slots [slot0, slot0 + n)
 *   scores   one thread per (row, head, cache slot): the f16 dot product of
 *            the slot's key and the f16 query (sw_dot_f16_4x8, or the prompt
 *            path's sw_dot_f16_tiled), times the scale
 *   softmax  one block per (row, head): the max, exp by groups of 8 (each
 *            group's sum in GGML's order), the groups' double sum (a tree,
 *            checked by sw_softmax_inv_stable, else left to right), the
 *            normaliser, the f16 probabilities
 *   pv       one warp per output element: lane t accumulates slots t, t+32, ...
 *            (the accumulators of sw_dot_f16_4x8 with padding), lane 0 reduces
 *            them from shared memory; the prompt order uses 8 lanes
 *            (sw_dot_f16_tiled)
 *
 * A sliding window (Gemma 3's local layers, sw_attn_args_t.swa) hides the
 * row's positions p < n_pos - swa as the CPU does: their scores are -inf
 * (probability 0), and a row without a tree starts its P.V sums at the
 * multiple of 32 below the window, on the same lanes; a tree row sums over
 * all its positions, the hidden ones adding exact zeros.
 *
 * Row r of a chunk attends to slots [0, slot0 + r] with slot0 read from the
 * control block, so a recorded graph serves every step. A token tree row
 * attends to the slots of its visibility record instead ([0, lin) and then
 * its ancestors, SW_CTL_VIS): every kernel walks the row's positions p in
 * that order and reads slot(p), which is exactly what a chain holding the
 * same path computes (slot(p) = p), as the CPU backend does. Scores and
 * probabilities live in a scratch area of (rows, heads, n_ctx); long chunks
 * are processed a few rows at a time so that it stays below the backend's
 * attn_scratch_max (256 MiB; SW_CUDA_ATTN_MIB for tests). Every pass over
 * rows computes each row as a pass of one row would.
 *
 * In a recorded step (c->in_graph) the kernels take the caches from an entry
 * of the backend's cache table instead of their arguments, so that the graph
 * serves every session: backend_cuda.cu fills the table before each launch.
 *
 * kv_move (token trees: the accepted path is kept) moves K rows and
 * transposed V columns in one kernel, each thread one element in all moves
 * in order (a later move may read a slot an earlier one wrote).
 */
#include "common.cuh"

#define S_MOVES 64 // slot moves per kv_move kernel (longer lists take several, in order)

/* The positions row r of an n-row chunk attends to: [0, lin), then tail[0..n_pos - lin). */
typedef struct s_vis {
    int lin, n_pos;
    const int32_t *tail;
} s_vis;

static __device__ s_vis s_row_vis(const int32_t *ctl, int n, int tree, int r)
{
    s_vis v;
    if (tree) {
        const int32_t *rec = ctl + ctl[SW_CTL_VIS(n) + r];
        v.lin = rec[0];
        v.n_pos = rec[0] + rec[1];
        v.tail = rec + 2;
    } else {
        v.lin = v.n_pos = ctl[SW_CTL_SLOT0] + r + 1;
        v.tail = NULL;
    }
    return v;
}

static __device__ int s_slot(const s_vis &v, int p)
{
    return p < v.lin ? p : v.tail[p - v.lin];
}

/* The first position a window of swa (0 = none) leaves visible. */
static __device__ int s_window_lo(const s_vis &v, int swa)
{
    return swa > 0 && v.n_pos > swa ? v.n_pos - swa : 0;
}

/* The caches: the arguments, or in a recorded step the entries of the cache table. */
static __device__ void s_caches(sw_f16 *const *tab, sw_f16 **kc, sw_f16 **vc)
{
    if (tab) {
        *kc = tab[0];
        *vc = tab[1];
    }
}

static __global__ void k_append(const float *k, const float *v, sw_f16 *kc, sw_f16 *vc,
                                sw_f16 *const *tab, const int32_t *ctl, int kv_dim, int n_ctx)
{
    s_caches(tab, &kc, &vc);
    const int r = blockIdx.y;
    const int slot = ctl[SW_CTL_SLOT0] + r;
    for (int d = blockIdx.x * blockDim.x + threadIdx.x; d < kv_dim; d += gridDim.x * blockDim.x) {
        kc[(size_t)slot * kv_dim + d] = sw_f2h(k[(size_t)r * kv_dim + d]);
        vc[(size_t)d * n_ctx + slot] = sw_f2h(v[(size_t)r * kv_dim + d]);
    }
}

/* Block (slot tile, h, rr): scores of row r0 + rr, head h, for the tile's slots. */
static __global__ void k_scores(const float *q, sw_f16 *kc, sw_f16 *const *tab, const int32_t *ctl,
                                int n, int tree, int r0, int n_head, int group, int hd, int kv_dim,
                                int n_ctx, float scale, int prompt_order, int swa, float *S)
{
    extern __shared__ sw_f16 q16[];
    sw_f16 *vc_unused = NULL;
    s_caches(tab, &kc, &vc_unused);
    const int rr = blockIdx.z, r = r0 + rr, h = blockIdx.y;
    const s_vis vis = s_row_vis(ctl, n, tree, r);
    const int n_pos = vis.n_pos;
    const int p0 = blockIdx.x * blockDim.x;
    if (p0 >= n_pos)
        return;
    const float *qr = q + ((size_t)r * n_head + h) * hd;
    for (int i = threadIdx.x; i < hd; i += blockDim.x)
        q16[i] = sw_f2h(qr[i]);
    __syncthreads();
    const int p = p0 + threadIdx.x;
    if (p >= n_pos)
        return;
    if (p < s_window_lo(vis, swa)) { // hidden by the window, as llama.cpp's mask
        S[((size_t)rr * n_head + h) * n_ctx + p] = -INFINITY;
        return;
    }
    const sw_f16 *krow = kc + (size_t)s_slot(vis, p) * kv_dim + (size_t)(h / group) * hd;
    const float s =
        prompt_order ? sw_dot_f16_tiled(krow, q16, hd) : sw_dot_f16_4x8(krow, q16, hd, 0);
    S[((size_t)rr * n_head + h) * n_ctx + p] = s * scale;
}

#define S_SM_THREADS 256

/* Block (h, rr): softmax of row r0 + rr, head h. S becomes the exps, P the probabilities. */
static __global__ void k_softmax(float *S, float *G, sw_f16 *P, const int32_t *ctl, int n, int tree,
                                 int r0, int n_head, int n_ctx, int seq)
{
    __shared__ float mx[S_SM_THREADS];
    __shared__ double part[S_SM_THREADS];
    __shared__ float inv_s;
    const int rr = blockIdx.y, h = blockIdx.x;
    const int n_pos = s_row_vis(ctl, n, tree, r0 + rr).n_pos;
    const size_t base = ((size_t)rr * n_head + h) * n_ctx;
    float *s = S + base;
    float *g = G + ((size_t)rr * n_head + h) * (size_t)(n_ctx / 8 + 1);
    sw_f16 *pr = P + base;
    const int tid = threadIdx.x;

    /* The max (order-free; NaN never wins, as on the CPU). */
    float m = -INFINITY;
    for (int p = tid; p < n_pos; p += S_SM_THREADS)
        if (s[p] > m)
            m = s[p];
    mx[tid] = m;
    __syncthreads();
    for (int w = S_SM_THREADS / 2; w > 0; w >>= 1) {
        if (tid < w && mx[tid + w] > mx[tid])
            mx[tid] = mx[tid + w];
        __syncthreads();
    }
    const float max = mx[0];

    /* exp by groups of 8 and each group's sum. */
    const int n_groups = (n_pos + 7) / 8;
    double p_sum = 0.0;
    for (int gi = tid; gi < n_groups; gi += S_SM_THREADS) {
        const int cnt = n_pos - 8 * gi < 8 ? n_pos - 8 * gi : 8;
        const float gs = sw_softmax_group8(s + 8 * gi, cnt, max);
        g[gi] = gs;
        p_sum += (double)gs;
    }
    part[tid] = p_sum;
    __syncthreads();
    for (int w = S_SM_THREADS / 2; w > 0; w >>= 1) {
        if (tid < w)
            part[tid] += part[tid + w];
        __syncthreads();
    }
    if (tid == 0) {
        float inv;
        if (seq || !sw_softmax_inv_stable(part[0], n_groups, &inv)) {
            double sum = 0.0;
            for (int gi = 0; gi < n_groups; gi++)
                sum += (double)g[gi];
            inv = sw_softmax_inv(sum);
        }
        inv_s = inv;
    }
    __syncthreads();
    const float inv = inv_s;
    for (int p = tid; p < n_pos; p += S_SM_THREADS) {
        const float v = s[p] * inv;
        pr[p] = sw_f2h(v);
    }
}

/* Block (d tile, h, rr), 4 warps: output elements d of row r0 + rr, head h.
 * Decode order: a warp per element; prompt order: 8 lanes per element. */
static __global__ void k_pv(sw_f16 *vc, sw_f16 *const *tab, const sw_f16 *P, const int32_t *ctl,
                            int n, int tree, int r0, int n_head, int group, int hd, int n_ctx,
                            int prompt_order, int swa, float *out)
{
    sw_f16 *kc_unused = NULL;
    s_caches(tab, &kc_unused, &vc);
    const int rr = blockIdx.y, h = blockIdx.z;
    const s_vis vis = s_row_vis(ctl, n, tree, r0 + rr);
    const int n_pos = vis.n_pos;
    const int lo32 = tree ? 0 : s_window_lo(vis, swa) & ~31; // the window's zeros skipped
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const sw_f16 *pr = P + ((size_t)rr * n_head + h) * n_ctx;
    float *o = out + ((size_t)(r0 + rr) * n_head + h) * hd;
    __shared__ float s_acc[128]; // the lanes' sums, read by the lane that reduces them
    if (!prompt_order) {
        const int d = blockIdx.x * 4 + warp;
        const int dd = d < hd ? d : hd - 1; // every lane reaches the __syncwarp
        const sw_f16 *vrow = vc + ((size_t)(h / group) * hd + dd) * n_ctx;
        float acc = 0.0f;
        for (int p = lo32 + lane; p < n_pos; p += 32)
            acc = fmaf(sw_h2f(vrow[s_slot(vis, p)]), sw_h2f(pr[p]), acc);
        s_acc[threadIdx.x] = acc;
        __syncwarp();
        if (lane == 0 && d < hd)
            o[d] = (float)(double)sw_reduce4x8(&s_acc[threadIdx.x]);
    } else {
        const int l = lane % 8;
        const int d = (blockIdx.x * 4 + warp) * 4 + lane / 8;
        const int dd = d < hd ? d : hd - 1;
        const sw_f16 *vrow = vc + ((size_t)(h / group) * hd + dd) * n_ctx;
        float acc = 0.0f;
        for (int p = lo32 + l; p < n_pos; p += 8)
            acc = fmaf(sw_h2f(vrow[s_slot(vis, p)]), sw_h2f(pr[p]), acc);
        s_acc[threadIdx.x] = acc;
        __syncwarp();
        if (l == 0 && d < hd)
            o[d] = sw_hsum8(&s_acc[threadIdx.x]);
    }
}

int swc_attention(sw_backend_t *be, const sw_attn_args_t *a)
{
    swc *c = swc_of(be);
    if (a->tree && a->prompt_order)
        return sw_backend_fail(be, "cuda: a tree chunk in prompt order");
    if (swc_use(be) != 0)
        return -1;
    const int tree = a->tree ? 1 : 0;
    const int kv_dim = a->n_kv_head * a->head_dim, hd = a->head_dim;
    const int group = a->n_head / a->n_kv_head;
    const int32_t *ctl = swc_ptr<int32_t>(a->ctl);
    sw_f16 *kc = swc_ptr<sw_f16>(a->k_cache), *vc = swc_ptr<sw_f16>(a->v_cache);
    sw_f16 *const *tab = NULL;
    if (c->in_graph) { // a recorded step: the caches come from the table (backend_cuda.cu)
        if (c->kv_n >= SWC_KV_TAB) {
            c->capture_broken = 1;
            return sw_backend_fail(be, "cuda:%d: a step of more than %d attention calls", c->dev,
                                   SWC_KV_TAB);
        }
        c->kv_host[2 * c->kv_n] = kc;
        c->kv_host[2 * c->kv_n + 1] = vc;
        tab = (sw_f16 *const *)(c->kv_dev + 2 * c->kv_n);
        c->kv_n++;
        kc = vc = NULL;
    }

    k_append<<<dim3(swc_blocks(kv_dim, 256), a->n), 256, 0, c->stream>>>(
        swc_ptr<float>(a->k), swc_ptr<float>(a->v), kc, vc, tab, ctl, kv_dim, a->n_ctx);
    if (swc_launched(be, "attention append") != 0)
        return -1;

    /* Scratch per row: scores (f32), probabilities (f16), group sums (f32). */
    const size_t per_head =
        (size_t)a->n_ctx * 4 + (size_t)a->n_ctx * 2 + ((size_t)a->n_ctx / 8 + 1) * 4;
    const size_t per_row = per_head * (size_t)a->n_head;
    int rows = (int)(c->attn_scratch_max / per_row);
    if (rows < 1)
        rows = 1;
    if (rows > a->n)
        rows = a->n;
    void *scratch;
    if (swc_scratch(be, SWC_SCRATCH_ATTN, per_row * (size_t)rows + 256, &scratch) != 0)
        return -1;
    float *S = (float *)scratch;
    sw_f16 *P = (sw_f16 *)(S + (size_t)rows * a->n_head * a->n_ctx);
    float *G = (float *)(void *)(((uintptr_t)(P + (size_t)rows * a->n_head * a->n_ctx) + 15) &
                                 ~(uintptr_t)15);

    for (int r0 = 0; r0 < a->n; r0 += rows) {
        const int nr = a->n - r0 < rows ? a->n - r0 : rows;
        k_scores<<<dim3(swc_blocks(a->n_ctx, 128), a->n_head, nr), 128, (size_t)hd * 2,
                   c->stream>>>(swc_ptr<float>(a->q), kc, tab, ctl, a->n, tree, r0, a->n_head,
                                group, hd, kv_dim, a->n_ctx, a->scale, a->prompt_order, a->swa, S);
        k_softmax<<<dim3(a->n_head, nr), S_SM_THREADS, 0, c->stream>>>(
            S, G, P, ctl, a->n, tree, r0, a->n_head, a->n_ctx, c->seq_sums);
        const int per_block = a->prompt_order ? 16 : 4; // outputs per 4-warp block
        k_pv<<<dim3(swc_blocks(hd, per_block), nr, a->n_head), 128, 0, c->stream>>>(
            vc, tab, P, ctl, a->n, tree, r0, a->n_head, group, hd, a->n_ctx, a->prompt_order,
            a->swa, swc_ptr<float>(a->out));
        if (swc_launched(be, "attention") != 0)
            return -1;
    }
    return 0;
}

/* The moves of one kv_move kernel (by value: no upload). */
typedef struct s_moves {
    int n;
    int32_t src[S_MOVES], dst[S_MOVES];
} s_moves;

static __global__ void k_kv_move(sw_f16 *kc, sw_f16 *vc, int n_ctx, int kv_dim, s_moves mv)
{
    const int d = blockIdx.x * blockDim.x + threadIdx.x;
    if (d >= kv_dim)
        return;
    for (int i = 0; i < mv.n; i++) { // in order: a move may read what an earlier one wrote
        kc[(size_t)mv.dst[i] * kv_dim + d] = kc[(size_t)mv.src[i] * kv_dim + d];
        vc[(size_t)d * n_ctx + mv.dst[i]] = vc[(size_t)d * n_ctx + mv.src[i]];
    }
}

int swc_kv_move(sw_backend_t *be, sw_buf_t *k_cache, sw_buf_t *v_cache, int n_ctx, int kv_dim,
                const int32_t *src, const int32_t *dst, int n)
{
    swc *c = swc_of(be);
    for (int i = 0; i < n; i++)
        if (src[i] < 0 || src[i] >= n_ctx || dst[i] < 0 || dst[i] > src[i] ||
            (i && dst[i] <= dst[i - 1]))
            return sw_backend_fail(be, "cuda: cache move %d -> %d", src[i], dst[i]);
    if (swc_use(be) != 0)
        return -1;
    sw_f16 *kc = swc_ptr<sw_f16>(k_cache), *vc = swc_ptr<sw_f16>(v_cache);
    for (int i = 0; i < n;) {
        s_moves mv;
        mv.n = 0;
        for (; i < n && mv.n < S_MOVES; i++)
            if (src[i] != dst[i]) {
                mv.src[mv.n] = src[i];
                mv.dst[mv.n++] = dst[i];
            }
        if (mv.n == 0)
            continue;
        k_kv_move<<<swc_blocks(kv_dim, 256), 256, 0, c->stream>>>(kc, vc, n_ctx, kv_dim, mv);
        if (swc_launched(be, "kv_move") != 0)
            return -1;
    }
    return 0;
}

/* copy2d (a growing KV cache's step, kv.c): rows of `width` bytes in 2-byte
 * units (every cache row is), one block row per copied row. */
static __global__ void k_copy2d(uint16_t *dst, size_t dst_pitch, const uint16_t *src,
                                size_t src_pitch, size_t width)
{
    const size_t r = blockIdx.y;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < width;
         i += (size_t)gridDim.x * blockDim.x)
        dst[r * dst_pitch + i] = src[r * src_pitch + i];
}

int swc_copy2d(sw_backend_t *be, sw_buf_t *dst, size_t dst_off, size_t dst_pitch,
               const sw_buf_t *src, size_t src_off, size_t src_pitch, size_t width, int rows)
{
    if (rows < 1 || width == 0)
        return 0;
    const size_t last = (size_t)(rows - 1);
    if ((dst_off | dst_pitch | src_off | src_pitch | width) & 1 || rows > 65535 ||
        dst_off + last * dst_pitch + width > swc_b(dst)->bytes ||
        src_off + last * src_pitch + width > swc_b(src)->bytes)
        return sw_backend_fail(be, "cuda: a copy of %d rows of %zu bytes does not fit its buffers",
                               rows, width);
    if (swc_use(be) != 0)
        return -1;
    swc *c = swc_of(be);
    const size_t w = width / 2;
    int blocks = (int)((w + 255) / 256);
    if (blocks > 1024)
        blocks = 1024;
    k_copy2d<<<dim3(blocks, rows), 256, 0, c->stream>>>(
        (uint16_t *)(void *)(swc_ptr<char>(dst) + dst_off), dst_pitch / 2,
        (const uint16_t *)(const void *)(swc_ptr<char>(src) + src_off), src_pitch / 2, w);
    return swc_launched(be, "copy2d");
}
