/*
 * mmv.cu - the exact matmul: activations quantized to the weight's vec-dot
 * type (Q8_0, Q8_1, Q8_K, or f16/bf16/f32), then integer dot products.
 *
 * Quantized weights: 8 threads per output row, thread k computing lane k of
 * GGML's 8-lane accumulation with quant_math.h's code (sw_<fmt>_wl unpacks a
 * weight block once, sw_<fmt>_step applies it to each activation row), the
 * blocks in order; the lanes' sums meet in shared memory and lane 0 of the 8
 * calls sw_<fmt>_combine. A kernel handles up to 8 activation rows at once
 * (the verification of K+1 rows reads the weights once per 8 rows); every
 * row's value is computed by the same sequence whatever the number of rows,
 * so results are batch invariant and equal to the CPU's sw_vec_dot to the
 * bit.
 *
 * iq4_nl weights run their own body (s_body_nl): two chains in the one-row
 * order, one in llamafile's sgemm order for prompt matmuls of 2 rows or more
 * (SW_MM_PROMPT), as the CPU's sw_matmul and sw_matmul_sgemm.
 *
 * K-quant weights in a prompt window of 8 rows or more (SW_MM_PROMPT |
 * SW_MM_TILED) take the order of the CPU's sw_matmul_tiled instead (llama.cpp's
 * tiled prompt matmul): per block the 8 lanes' integers are summed across
 * the group with xor shuffles (exact), then every lane applies
 * sw_<fmt>_tiled. Six shuffles per block and row more than the decode
 * order; the same reads of the weights.
 *
 * f16/bf16/f32 weights: a warp per (output, row), lane t taking elements
 * t, t+32, ... (GGML's 4x8 accumulators), lane 0 combining with the tail.
 *
 * Prompt chunks longer than the backend's gemm_rows go to gemm.cu (cuBLAS)
 * instead, which is faster and batch dependent (allowed by SW_MM_PROMPT).
 *
 * The same kernels' bodies serve the experts of a mixture of experts
 * (swc_matmul_experts, for moe.cu): a block takes a chunk of up to 8 rows
 * routed to one expert from moe.cu's plan (each chunk in the tiled order or
 * not, as the plan says), or for float experts one (row, expert) pair, so
 * every expert row is computed by the dense matmul's sequence.
 */
#include "common.cuh"

#define S_THREADS 128 // 16 outputs per block for quantized weights, 4 for float weights

/* ---- activation quantization ---------------------------------------------------------- */

/* Thread (b, r): block b of row r of the input, written to row r of xq. */
static __global__ void k_quantize(int vt, const float *x, int64_t n_in, uint8_t *xq, size_t stride)
{
    const int r = blockIdx.y;
    const int64_t b = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const float *xr = x + (size_t)r * n_in;
    uint8_t *yr = xq + (size_t)r * stride;
    switch (vt) {
    case SW_TYPE_Q8_0:
        if (b < n_in / SW_QK)
            sw_quant_block_q8_0(xr + b * SW_QK, (sw_block_q8_0 *)yr + b);
        break;
    case SW_TYPE_Q8_1:
        if (b < n_in / SW_QK)
            sw_quant_block_q8_1(xr + b * SW_QK, (sw_block_q8_1 *)yr + b);
        break;
    case SW_TYPE_Q8_K:
        if (b < n_in / SW_QK_K)
            sw_quant_block_q8_k(xr + b * SW_QK_K, (sw_block_q8_k *)yr + b);
        break;
    case SW_TYPE_F16:
        if (b < n_in)
            ((sw_f16 *)yr)[b] = sw_f2h(xr[b]);
        break;
    case SW_TYPE_BF16:
        if (b < n_in)
            ((sw_bf16 *)yr)[b] = sw_f2bf(xr[b]);
        break;
    default: // f32
        if (b < n_in)
            ((float *)yr)[b] = xr[b];
        break;
    }
}

/* ---- quantized weights --------------------------------------------------------------- */

/* The per-format code of quant_math.h behind one interface. */
#define S_FMT(T, fmt, WB, XB, WL, qk)                                                              \
    struct s_fmt_##fmt {                                                                           \
        typedef WB W;                                                                              \
        typedef XB X;                                                                              \
        typedef WL L;                                                                              \
        static constexpr int QK = qk;                                                              \
        static constexpr int TYPE = T;                                                             \
        static __device__ void wl(const W *w, int k, L *o)                                         \
        {                                                                                          \
            sw_##fmt##_wl(w, k, o);                                                                \
        }                                                                                          \
        static __device__ void step(const L *l, const X *x, int k, float *acc, float *acc2)        \
        {                                                                                          \
            sw_##fmt##_step(l, x, k, acc, acc2);                                                   \
        }                                                                                          \
        static __device__ float combine(const float *acc, const float *acc2)                       \
        {                                                                                          \
            return sw_##fmt##_combine(acc, acc2);                                                  \
        }                                                                                          \
    };
S_FMT(SW_TYPE_Q4_0, q4_0, sw_block_q4_0, sw_block_q8_0, sw_wl_q4_0, SW_QK)
S_FMT(SW_TYPE_Q4_1, q4_1, sw_block_q4_1, sw_block_q8_1, sw_wl_q4_1, SW_QK)
S_FMT(SW_TYPE_Q5_0, q5_0, sw_block_q5_0, sw_block_q8_0, sw_wl_q5, SW_QK)
S_FMT(SW_TYPE_Q5_1, q5_1, sw_block_q5_1, sw_block_q8_1, sw_wl_q5, SW_QK)
S_FMT(SW_TYPE_Q8_0, q8_0, sw_block_q8_0, sw_block_q8_0, sw_wl_q8_0, SW_QK)
S_FMT(SW_TYPE_Q4_K, q4_k, sw_block_q4_k, sw_block_q8_k, sw_wl_q4_k, SW_QK_K)
S_FMT(SW_TYPE_Q5_K, q5_k, sw_block_q5_k, sw_block_q8_k, sw_wl_q5_k, SW_QK_K)
S_FMT(SW_TYPE_Q6_K, q6_k, sw_block_q6_k, sw_block_q8_k, sw_wl_q6_k, SW_QK_K)
S_FMT(SW_TYPE_Q2_K, q2_k, sw_block_q2_k, sw_block_q8_k, sw_wl_q2_k, SW_QK_K)
S_FMT(SW_TYPE_Q3_K, q3_k, sw_block_q3_k, sw_block_q8_k, sw_wl_q3_k, SW_QK_K)
S_FMT(SW_TYPE_IQ4_XS, iq4_xs, sw_block_iq4_xs, sw_block_q8_k, sw_wl_iq4_xs, SW_QK_K)
S_FMT(SW_TYPE_IQ4_NL, iq4_nl, sw_block_iq4_nl, sw_block_q8_0, sw_wl_iq4_nl, SW_QK)
#undef S_FMT

/* The K-quants' integer lanes and tiled block update (sw_matmul_tiled's order). */
#define S_FMT_K(fmt)                                                                               \
    struct s_fmtk_##fmt : s_fmt_##fmt {                                                            \
        static __device__ void ints(const L *l, const X *x, int k, int32_t *t, int32_t *m)         \
        {                                                                                          \
            sw_##fmt##_ints(l, x, k, t, m);                                                        \
        }                                                                                          \
        static __device__ float tiled(const L *l, const X *x, int32_t t, int32_t m, float y)       \
        {                                                                                          \
            return sw_##fmt##_tiled(l, x, t, m, y);                                                \
        }                                                                                          \
    };
S_FMT_K(q4_k)
S_FMT_K(q5_k)
S_FMT_K(q6_k)
S_FMT_K(q2_k)
S_FMT_K(q3_k)
S_FMT_K(iq4_xs)
#undef S_FMT_K

/* The activation rows of one block (r < nr <= NR) and the output rows they
 * go to: y[r][o] = dot(W row o, x[r]). */
template <int NR> struct s_rows {
    const uint8_t *x[NR]; // quantized activation rows
    float *y[NR];         // output rows
    int nr;               // rows in use
};

/* Rows r < nr of x (stride xs) and y (stride ys); the unused ones repeat row 0. */
template <int NR>
static __device__ s_rows<NR> s_dense_rows(const uint8_t *x, size_t xs, float *y, int64_t ys, int nr)
{
    s_rows<NR> rw;
    rw.nr = nr;
    for (int r = 0; r < NR; r++) {
        rw.x[r] = x + (size_t)(r < nr ? r : 0) * xs;
        rw.y[r] = y + (size_t)(r < nr ? r : 0) * (size_t)ys;
    }
    return rw;
}

/* The decode order: 8 lanes per output of the block, lane 0 combines (the
 * header). s_acc, s_acc2: (NR, S_THREADS) f32 of the block's shared memory. */
template <typename F, int NR>
static __device__ void s_body_q(const uint8_t *w, size_t w_stride, int64_t n_out, int nb,
                                const s_rows<NR> &rw, const float *bias, float *s_acc,
                                float *s_acc2)
{
    const int k = threadIdx.x & 7;
    const int64_t o = (int64_t)blockIdx.x * (S_THREADS / 8) + (threadIdx.x >> 3);
    const int nr = rw.nr;
    float acc[NR], acc2[NR];
    for (int r = 0; r < NR; r++)
        acc[r] = acc2[r] = 0.0f;
    if (o < n_out) {
        const typename F::W *wr = (const typename F::W *)(w + (size_t)o * w_stride);
        for (int b = 0; b < nb; b++) {
            typename F::L l;
            F::wl(&wr[b], k, &l);
#pragma unroll
            for (int r = 0; r < NR; r++)
                if (r < nr)
                    F::step(&l, (const typename F::X *)rw.x[r] + b, k, &acc[r], &acc2[r]);
        }
    }
    /* The lanes meet in shared memory; lane 0 of each group of 8 combines them
     * (every thread of the warp reaches the __syncwarp). */
#pragma unroll
    for (int r = 0; r < NR; r++) {
        s_acc[r * S_THREADS + threadIdx.x] = acc[r];
        s_acc2[r * S_THREADS + threadIdx.x] = acc2[r];
    }
    __syncwarp();
    if (k != 0 || o >= n_out)
        return;
    for (int r = 0; r < nr; r++) {
        float a[8], a2[8];
        for (int j = 0; j < 8; j++) {
            a[j] = s_acc[r * S_THREADS + threadIdx.x + j];
            a2[j] = s_acc2[r * S_THREADS + threadIdx.x + j];
        }
        float v = F::combine(a, a2);
        if (bias)
            v += bias[o];
        rw.y[r][o] = v;
    }
}

/* The tiled order of the K-quants (the header). */
template <typename F, int NR>
static __device__ void s_body_qt(const uint8_t *w, size_t w_stride, int64_t n_out, int nb,
                                 const s_rows<NR> &rw, const float *bias)
{
    const int k = threadIdx.x & 7;
    const int64_t o = (int64_t)blockIdx.x * (S_THREADS / 8) + (threadIdx.x >> 3);
    const int64_t oo = o < n_out ? o : n_out - 1; // every lane takes part in the shuffles
    const int nr = rw.nr;
    float acc[NR];
    for (int r = 0; r < NR; r++)
        acc[r] = 0.0f;
    const typename F::W *wr = (const typename F::W *)(w + (size_t)oo * w_stride);
    for (int b = 0; b < nb; b++) {
        typename F::L l;
        F::wl(&wr[b], k, &l);
#pragma unroll
        for (int r = 0; r < NR; r++) {
            if (r >= nr) // the same for every lane
                break;
            const typename F::X *xb = (const typename F::X *)rw.x[r] + b;
            int32_t t, m;
            F::ints(&l, xb, k, &t, &m);
            for (int s = 1; s < 8; s <<= 1) {
                t += __shfl_xor_sync(0xffffffffu, t, s);
                m += __shfl_xor_sync(0xffffffffu, m, s);
            }
            acc[r] = F::tiled(&l, xb, t, m, acc[r]);
        }
    }
    if (k != 0 || o >= n_out)
        return;
    for (int r = 0; r < nr; r++) {
        float v = acc[r];
        if (bias)
            v += bias[o];
        rw.y[r][o] = v;
    }
}

/* iq4_nl (quant_math_lowbit.h): its one-row order runs two chains, even
 * blocks in acc and odd ones in acc2, and takes an odd last block apart (its
 * 8 lanes' integers summed with xor shuffles, as the tiled order does);
 * sgemm (a prompt matmul of 2 rows or more, llamafile's order) runs one
 * chain. s_acc, s_acc2 as in s_body_q. */
template <int NR>
static __device__ void s_body_nl(const uint8_t *w, size_t w_stride, int64_t n_out, int nb,
                                 const s_rows<NR> &rw, const float *bias, float *s_acc,
                                 float *s_acc2, int sgemm)
{
    const int k = threadIdx.x & 7;
    const int64_t o = (int64_t)blockIdx.x * (S_THREADS / 8) + (threadIdx.x >> 3);
    const int64_t oo = o < n_out ? o : n_out - 1; // every lane takes part in the shuffles
    const int nr = rw.nr, tail = !sgemm && (nb & 1);
    float acc[NR], acc2[NR], td[NR];
    int32_t tt[NR];
    for (int r = 0; r < NR; r++) {
        acc[r] = acc2[r] = td[r] = 0.0f;
        tt[r] = 0;
    }
    const sw_block_iq4_nl *wr = (const sw_block_iq4_nl *)(w + (size_t)oo * w_stride);
    for (int b = 0; b < nb - tail; b++) {
        sw_wl_iq4_nl l;
        sw_iq4_nl_wl(&wr[b], k, &l);
#pragma unroll
        for (int r = 0; r < NR; r++)
            if (r < nr)
                sw_iq4_nl_step(&l, (const sw_block_q8_0 *)rw.x[r] + b, k,
                               sgemm || !(b & 1) ? &acc[r] : &acc2[r], NULL);
    }
    if (tail) {
        sw_wl_iq4_nl l;
        sw_iq4_nl_wl(&wr[nb - 1], k, &l);
#pragma unroll
        for (int r = 0; r < NR; r++) {
            if (r >= nr) // the same for every lane
                break;
            const sw_block_q8_0 *xb = (const sw_block_q8_0 *)rw.x[r] + nb - 1;
            int32_t t = sw_iq4_nl_ints(&l, xb, k);
            for (int sh = 1; sh < 8; sh <<= 1)
                t += __shfl_xor_sync(0xffffffffu, t, sh);
            tt[r] = t;
            td[r] = sw_h2f(xb->d) * l.d;
        }
    }
#pragma unroll
    for (int r = 0; r < NR; r++) {
        s_acc[r * S_THREADS + threadIdx.x] = acc[r];
        s_acc2[r * S_THREADS + threadIdx.x] = acc2[r];
    }
    __syncwarp();
    if (k != 0 || o >= n_out)
        return;
    for (int r = 0; r < nr; r++) {
        float a[8], a2[8];
        for (int j = 0; j < 8; j++) {
            a[j] = s_acc[r * S_THREADS + threadIdx.x + j];
            a2[j] = s_acc2[r * S_THREADS + threadIdx.x + j];
        }
        float v = sgemm ? sw_iq4_nl_combine(a, a2) : sw_iq4_nl_combine2(a, a2, tail, td[r], tt[r]);
        if (bias)
            v += bias[o];
        rw.y[r][o] = v;
    }
}

/* y[r * y_stride + o] = dot(W row o, x row r) (+ bias[o]) for r < nr <= NR. */
template <typename F, int NR>
static __global__ void k_mmv_q(const uint8_t *w, size_t w_stride, int64_t n_out, int nb,
                               const uint8_t *x, size_t x_stride, int nr, const float *bias,
                               float *y, int64_t y_stride)
{
    __shared__ float s_acc[NR * S_THREADS];
    __shared__ float s_acc2[NR * S_THREADS];
    s_body_q<F, NR>(w, w_stride, n_out, nb, s_dense_rows<NR>(x, x_stride, y, y_stride, nr), bias,
                    s_acc, s_acc2);
}

/* k_mmv_q for iq4_nl, in its one-row order or (sgemm) llamafile's. */
template <int NR>
static __global__ void k_mmv_nl(const uint8_t *w, size_t w_stride, int64_t n_out, int nb,
                                const uint8_t *x, size_t x_stride, int nr, const float *bias,
                                float *y, int64_t y_stride, int sgemm)
{
    __shared__ float s_acc[NR * S_THREADS];
    __shared__ float s_acc2[NR * S_THREADS];
    s_body_nl<NR>(w, w_stride, n_out, nb, s_dense_rows<NR>(x, x_stride, y, y_stride, nr), bias,
                  s_acc, s_acc2, sgemm);
}

static void s_launch_nl(cudaStream_t st, const uint8_t *w, size_t w_stride, int64_t n_out,
                        int64_t n_in, const uint8_t *x, size_t x_stride, int nr, const float *bias,
                        float *y, int64_t y_stride, int sgemm)
{
    const unsigned grid = swc_blocks(n_out, S_THREADS / 8);
    const int nb = (int)(n_in / SW_QK);
    if (nr <= 1)
        k_mmv_nl<1><<<grid, S_THREADS, 0, st>>>(w, w_stride, n_out, nb, x, x_stride, nr, bias, y,
                                                y_stride, sgemm);
    else if (nr <= 2)
        k_mmv_nl<2><<<grid, S_THREADS, 0, st>>>(w, w_stride, n_out, nb, x, x_stride, nr, bias, y,
                                                y_stride, sgemm);
    else if (nr <= 4)
        k_mmv_nl<4><<<grid, S_THREADS, 0, st>>>(w, w_stride, n_out, nb, x, x_stride, nr, bias, y,
                                                y_stride, sgemm);
    else
        k_mmv_nl<8><<<grid, S_THREADS, 0, st>>>(w, w_stride, n_out, nb, x, x_stride, nr, bias, y,
                                                y_stride, sgemm);
}

/* k_mmv_q in the tiled order of the K-quants. */
template <typename F, int NR>
static __global__ void k_mmv_qt(const uint8_t *w, size_t w_stride, int64_t n_out, int nb,
                                const uint8_t *x, size_t x_stride, int nr, const float *bias,
                                float *y, int64_t y_stride)
{
    s_body_qt<F, NR>(w, w_stride, n_out, nb, s_dense_rows<NR>(x, x_stride, y, y_stride, nr), bias);
}

template <typename F>
static void s_launch_qt(cudaStream_t st, const uint8_t *w, size_t w_stride, int64_t n_out,
                        int64_t n_in, const uint8_t *x, size_t x_stride, int nr, const float *bias,
                        float *y, int64_t y_stride)
{
    const unsigned grid = swc_blocks(n_out, S_THREADS / 8);
    const int nb = (int)(n_in / F::QK);
    if (nr <= 1)
        k_mmv_qt<F, 1><<<grid, S_THREADS, 0, st>>>(w, w_stride, n_out, nb, x, x_stride, nr, bias, y,
                                                   y_stride);
    else if (nr <= 2)
        k_mmv_qt<F, 2><<<grid, S_THREADS, 0, st>>>(w, w_stride, n_out, nb, x, x_stride, nr, bias, y,
                                                   y_stride);
    else if (nr <= 4)
        k_mmv_qt<F, 4><<<grid, S_THREADS, 0, st>>>(w, w_stride, n_out, nb, x, x_stride, nr, bias, y,
                                                   y_stride);
    else
        k_mmv_qt<F, 8><<<grid, S_THREADS, 0, st>>>(w, w_stride, n_out, nb, x, x_stride, nr, bias, y,
                                                   y_stride);
}

template <typename F>
static void s_launch_q(cudaStream_t st, const uint8_t *w, size_t w_stride, int64_t n_out,
                       int64_t n_in, const uint8_t *x, size_t x_stride, int nr, const float *bias,
                       float *y, int64_t y_stride)
{
    const unsigned grid = swc_blocks(n_out, S_THREADS / 8);
    const int nb = (int)(n_in / F::QK);
    if (nr <= 1)
        k_mmv_q<F, 1><<<grid, S_THREADS, 0, st>>>(w, w_stride, n_out, nb, x, x_stride, nr, bias, y,
                                                  y_stride);
    else if (nr <= 2)
        k_mmv_q<F, 2><<<grid, S_THREADS, 0, st>>>(w, w_stride, n_out, nb, x, x_stride, nr, bias, y,
                                                  y_stride);
    else if (nr <= 4)
        k_mmv_q<F, 4><<<grid, S_THREADS, 0, st>>>(w, w_stride, n_out, nb, x, x_stride, nr, bias, y,
                                                  y_stride);
    else
        k_mmv_q<F, 8><<<grid, S_THREADS, 0, st>>>(w, w_stride, n_out, nb, x, x_stride, nr, bias, y,
                                                  y_stride);
}

/* ---- f16 / bf16 / f32 weights ------------------------------------------------------------- */

/* Warp o of the block: y[o] = dot(W row o, x) (+ bias[o]); s_acc: (S_THREADS) f32 shared. */
static __device__ void s_body_f(int type, const uint8_t *w, size_t w_stride, int64_t n_out,
                                int64_t n, const uint8_t *x, const float *bias, float *y,
                                float *s_acc)
{
    const int lane = threadIdx.x & 31;
    const int64_t o = (int64_t)blockIdx.x * (S_THREADS / 32) + (threadIdx.x >> 5);
    const int64_t oo = o < n_out ? o : n_out - 1; // every lane reaches the __syncwarp
    const void *wr = w + (size_t)oo * w_stride, *xr = x;
    const int64_t np = n & ~(int64_t)31;
    float acc;
    if (type == SW_TYPE_F16)
        acc = sw_f16_lane((const sw_f16 *)wr, (const sw_f16 *)xr, np, lane);
    else if (type == SW_TYPE_BF16)
        acc = sw_bf16_lane((const sw_bf16 *)wr, (const sw_bf16 *)xr, np, lane);
    else
        acc = sw_f32_lane((const float *)wr, (const float *)xr, np, lane);
    s_acc[threadIdx.x] = acc;
    __syncwarp();
    if (lane != 0 || o >= n_out)
        return;
    float a[32];
    for (int j = 0; j < 32; j++)
        a[j] = s_acc[threadIdx.x + j];
    float v;
    if (type == SW_TYPE_F16)
        v = sw_f16_combine(a, (const sw_f16 *)wr, (const sw_f16 *)xr, n);
    else if (type == SW_TYPE_BF16)
        v = sw_bf16_combine(a, (const sw_bf16 *)wr, (const sw_bf16 *)xr, n);
    else
        v = sw_f32_combine(a, (const float *)wr, (const float *)xr, n);
    if (bias)
        v += bias[o];
    y[o] = v;
}

/* Warp (o, r): y[r, o] = dot(W row o, x row r) (+ bias[o]). */
static __global__ void k_mmv_f(int type, const uint8_t *w, size_t w_stride, int64_t n_out,
                               int64_t n, const uint8_t *x, size_t x_stride, const float *bias,
                               float *y, int64_t y_stride)
{
    __shared__ float s_acc[S_THREADS];
    const int r = blockIdx.y;
    s_body_f(type, w, w_stride, n_out, n, x + (size_t)r * x_stride, bias,
             y + (size_t)r * (size_t)y_stride, s_acc);
}

/* ---- experts (moe.cu's plan) ------------------------------------------------------------- */

/* Block (output tile, chunk c of the plan): the chunk's rows (pair ids in
 * order[first ..]) times its expert's matrix; pair p reads x row p / x_div
 * and writes y row p. K: F has the tiled order (K-quants). */
template <typename F, bool K>
static __global__ void k_mmv_experts_q(const uint8_t *w, size_t w_stride, size_t w_expert,
                                       int64_t n_out, int nb, const uint8_t *x, size_t x_stride,
                                       int x_div, const int32_t *plan, const int32_t *order,
                                       float *y, int64_t y_stride)
{
    __shared__ float s_acc[8 * S_THREADS];
    __shared__ float s_acc2[8 * S_THREADS];
    if ((int)blockIdx.y >= plan[0]) // fewer chunks than the bound the grid was sized for
        return;
    const int32_t *ch = plan + SWC_PLAN_HEAD + SWC_PLAN_CHUNK * blockIdx.y;
    const int expert = ch[0], first = ch[1], tiled = ch[3];
    s_rows<8> rw;
    rw.nr = ch[2];
    for (int r = 0; r < 8; r++) {
        const int p = order[first + (r < rw.nr ? r : 0)];
        rw.x[r] = x + (size_t)(p / x_div) * x_stride;
        rw.y[r] = y + (size_t)p * (size_t)y_stride;
    }
    const uint8_t *we = w + (size_t)expert * w_expert;
    if constexpr (F::TYPE == SW_TYPE_IQ4_NL) { // its own order (MUL_MAT_ID: never sgemm)
        s_body_nl<8>(we, w_stride, n_out, nb, rw, NULL, s_acc, s_acc2, 0);
        return;
    }
    if constexpr (K) {
        if (tiled) {
            s_body_qt<F, 8>(we, w_stride, n_out, nb, rw, NULL);
            return;
        }
    }
    s_body_q<F, 8>(we, w_stride, n_out, nb, rw, NULL, s_acc, s_acc2);
}

/* Block (output tile, pair p): float experts, expert sel[p]. */
static __global__ void k_mmv_experts_f(int type, const uint8_t *w, size_t w_stride, size_t w_expert,
                                       int64_t n_out, int64_t n, const uint8_t *x, size_t x_stride,
                                       int x_div, const int32_t *sel, float *y, int64_t y_stride)
{
    __shared__ float s_acc[S_THREADS];
    const int p = blockIdx.y;
    s_body_f(type, w + (size_t)sel[p] * w_expert, w_stride, n_out, n,
             x + (size_t)(p / x_div) * x_stride, NULL, y + (size_t)p * (size_t)y_stride, s_acc);
}

/* ---- the operation -------------------------------------------------------------------------- */

int swc_quantize(sw_backend_t *be, enum sw_type vt, const float *x, int64_t n_in, int n,
                 uint8_t *xq, size_t stride)
{
    const int64_t items = sw_type_block_elems(vt) > 1 ? n_in / sw_type_block_elems(vt) : n_in;
    k_quantize<<<dim3(swc_blocks(items, 64), n), 64, 0, swc_of(be)->stream>>>((int)vt, x, n_in, xq,
                                                                              stride);
    return swc_launched(be, "quantize");
}

template <typename F, bool K>
static void s_launch_experts(cudaStream_t st, const uint8_t *wd, const sw_weight_t *w,
                             const uint8_t *xq, size_t xs, int x_div, const int32_t *plan,
                             const int32_t *order, int max_chunks, float *y)
{
    const dim3 grid(swc_blocks(w->n_out, S_THREADS / 8), (unsigned)max_chunks);
    k_mmv_experts_q<F, K><<<grid, S_THREADS, 0, st>>>(
        wd, w->row_bytes, (size_t)w->n_out * w->row_bytes, w->n_out, (int)(w->n_in / F::QK), xq, xs,
        x_div, plan, order, y, w->n_out);
}

int swc_matmul_experts(sw_backend_t *be, const sw_weight_t *w, const uint8_t *xq, size_t xs,
                       int x_div, int n_pairs, const int32_t *plan, const int32_t *order,
                       const int32_t *sel, int max_chunks, float *y)
{
    cudaStream_t st = swc_of(be)->stream;
    const uint8_t *wd = swc_ptr<uint8_t>(w->buf);
    switch (w->type) {
#define S_CASE(T, F, K)                                                                            \
    case T:                                                                                        \
        s_launch_experts<F, K>(st, wd, w, xq, xs, x_div, plan, order, max_chunks, y);              \
        break;
        S_CASE(SW_TYPE_Q4_0, s_fmt_q4_0, false)
        S_CASE(SW_TYPE_Q4_1, s_fmt_q4_1, false)
        S_CASE(SW_TYPE_Q5_0, s_fmt_q5_0, false)
        S_CASE(SW_TYPE_Q5_1, s_fmt_q5_1, false)
        S_CASE(SW_TYPE_Q8_0, s_fmt_q8_0, false)
        S_CASE(SW_TYPE_Q4_K, s_fmtk_q4_k, true)
        S_CASE(SW_TYPE_Q5_K, s_fmtk_q5_k, true)
        S_CASE(SW_TYPE_Q6_K, s_fmtk_q6_k, true)
        S_CASE(SW_TYPE_Q2_K, s_fmtk_q2_k, true)
        S_CASE(SW_TYPE_Q3_K, s_fmtk_q3_k, true)
        S_CASE(SW_TYPE_IQ4_XS, s_fmtk_iq4_xs, true)
        S_CASE(SW_TYPE_IQ4_NL, s_fmt_iq4_nl, false)
#undef S_CASE
    case SW_TYPE_F16:
    case SW_TYPE_BF16:
    case SW_TYPE_F32:
        k_mmv_experts_f<<<dim3(swc_blocks(w->n_out, S_THREADS / 32), (unsigned)n_pairs), S_THREADS,
                          0, st>>>((int)w->type, wd, w->row_bytes, (size_t)w->n_out * w->row_bytes,
                                   w->n_out, w->n_in, xq, xs, x_div, sel, y, w->n_out);
        break;
    default:
        return sw_backend_fail(be, "cuda: no kernel for %s experts", sw_type_name(w->type));
    }
    return swc_launched(be, "experts");
}

static int s_one_weight(sw_backend_t *be, const sw_weight_t *w, const float *bias,
                        const uint8_t *xq, size_t xs, int n, float *y, int tiled, int prompt)
{
    cudaStream_t st = swc_of(be)->stream;
    const uint8_t *wd = swc_ptr<uint8_t>(w->buf);
    for (int r0 = 0; r0 < n; r0 += 8) {
        const int nr = n - r0 < 8 ? n - r0 : 8;
        const uint8_t *xr = xq + (size_t)r0 * xs;
        float *yr = y + (size_t)r0 * w->n_out;
        switch (tiled ? w->type : SW_TYPE_COUNT) { // K-quants in the tiled order
#define S_CASE(T, fmt)                                                                             \
    case T:                                                                                        \
        s_launch_qt<s_fmtk_##fmt>(st, wd, w->row_bytes, w->n_out, w->n_in, xr, xs, nr, bias, yr,   \
                                  w->n_out);                                                       \
        break;
            S_CASE(SW_TYPE_Q4_K, q4_k)
            S_CASE(SW_TYPE_Q5_K, q5_k)
            S_CASE(SW_TYPE_Q6_K, q6_k)
            S_CASE(SW_TYPE_Q2_K, q2_k)
            S_CASE(SW_TYPE_Q3_K, q3_k)
            S_CASE(SW_TYPE_IQ4_XS, iq4_xs)
#undef S_CASE
        default: // every other weight, and K-quants in the decode order
            switch (w->type) {
#define S_CASE(T, fmt)                                                                             \
    case T:                                                                                        \
        s_launch_q<s_fmt_##fmt>(st, wd, w->row_bytes, w->n_out, w->n_in, xr, xs, nr, bias, yr,     \
                                w->n_out);                                                         \
        break;
                S_CASE(SW_TYPE_Q4_0, q4_0)
                S_CASE(SW_TYPE_Q4_1, q4_1)
                S_CASE(SW_TYPE_Q5_0, q5_0)
                S_CASE(SW_TYPE_Q5_1, q5_1)
                S_CASE(SW_TYPE_Q8_0, q8_0)
                S_CASE(SW_TYPE_Q4_K, q4_k)
                S_CASE(SW_TYPE_Q5_K, q5_k)
                S_CASE(SW_TYPE_Q6_K, q6_k)
                S_CASE(SW_TYPE_Q2_K, q2_k)
                S_CASE(SW_TYPE_Q3_K, q3_k)
                S_CASE(SW_TYPE_IQ4_XS, iq4_xs)
#undef S_CASE
            case SW_TYPE_IQ4_NL: // llamafile's sgemm order in a prompt matmul of 2 rows or more
                s_launch_nl(st, wd, w->row_bytes, w->n_out, w->n_in, xr, xs, nr, bias, yr, w->n_out,
                            prompt);
                break;
            case SW_TYPE_F16:
            case SW_TYPE_BF16:
            case SW_TYPE_F32:
                k_mmv_f<<<dim3(swc_blocks(w->n_out, S_THREADS / 32), nr), S_THREADS, 0, st>>>(
                    (int)w->type, wd, w->row_bytes, w->n_out, w->n_in, xr, xs, bias, yr, w->n_out);
                break;
            default:
                return sw_backend_fail(be, "cuda: no kernel for %s weights", sw_type_name(w->type));
            }
        }
        if (swc_launched(be, "matmul") != 0)
            return -1;
    }
    return 0;
}

int swc_matmul(sw_backend_t *be, int n_w, const sw_weight_t *const *w, const sw_buf_t *const *bias,
               const sw_buf_t *x, int x_row0, int n, sw_buf_t *const *y, int flags)
{
    swc *c = swc_of(be);
    if (n_w < 1 || n_w > SW_MATMUL_MAX_W)
        return sw_backend_fail(be, "cuda: matmul of %d weights (1..%d)", n_w, SW_MATMUL_MAX_W);
    if (swc_use(be) != 0)
        return -1;
    const int64_t n_in = w[0]->n_in;
    const float *xs = swc_ptr<float>(x) + (size_t)x_row0 * n_in;

    if ((flags & SW_MM_PROMPT) && c->gemm_rows > 0 && n > c->gemm_rows) {
        int rc = 0;
        for (int i = 0; i < n_w && rc == 0; i++)
            rc = swc_gemm(be, w[i], bias ? bias[i] : NULL, xs, n, swc_ptr<float>(y[i]));
        if (rc != -2) // -2: no cuBLAS here, nothing queued: the exact kernels below
            return rc;
    }

    /* Quantize the input once per distinct vec-dot type, rows 16-byte aligned. */
    enum sw_type types[SW_MATMUL_MAX_W];
    size_t offs[SW_MATMUL_MAX_W], strides[SW_MATMUL_MAX_W], need = 0;
    int n_types = 0, which[SW_MATMUL_MAX_W];
    for (int i = 0; i < n_w; i++) {
        const enum sw_type vt = sw_type_vec_dot(w[i]->type);
        int k = 0;
        while (k < n_types && types[k] != vt)
            k++;
        if (k == n_types) {
            uint64_t rb = 0;
            if (vt == SW_TYPE_COUNT || sw_type_row_bytes(vt, n_in, &rb) != 0)
                return sw_backend_fail(be, "cuda: a %s weight of %lld columns cannot be multiplied",
                                       sw_type_name(w[i]->type), (long long)n_in);
            types[k] = vt;
            strides[k] = (size_t)((rb + 15) & ~(uint64_t)15);
            offs[k] = need;
            need += strides[k] * (size_t)n;
            n_types++;
        }
        which[i] = k;
    }
    void *scratch;
    if (swc_scratch(be, SWC_SCRATCH_XQ, need, &scratch) != 0)
        return -1;
    uint8_t *xq = (uint8_t *)scratch;
    for (int k = 0; k < n_types; k++)
        if (swc_quantize(be, types[k], xs, n_in, n, xq + offs[k], strides[k]) != 0)
            return -1;
    const int tiled = (flags & (SW_MM_PROMPT | SW_MM_TILED)) == (SW_MM_PROMPT | SW_MM_TILED);
    for (int i = 0; i < n_w; i++)
        if (s_one_weight(be, w[i], bias && bias[i] ? swc_ptr<float>(bias[i]) : NULL,
                         xq + offs[which[i]], strides[which[i]], n, swc_ptr<float>(y[i]), tiled,
                         (flags & SW_MM_PROMPT) != 0) != 0)
            return -1;
    return 0;
}
