/*
 * norm.cu - RMS norm of rows and the per-head RMS norm of Qwen3 (QK norm).
 *
 * The CPU sums the squares in double precision left to right. Here the
 * threads of a block sum strided parts and a fixed tree adds them; the result
 * is used only when sw_rms_mean_stable() / sw_head_norm_stable() prove that
 * the left-to-right sum rounds to the same float, else thread 0 runs that
 * loop (sw_sumsq_seq, the CPU's code). Either way the output is the CPU's to
 * the bit, and a row never depends on the other rows.
 */
#include "common.cuh"

#define S_THREADS 256

/* Tree sum of part[0..S_THREADS) into part[0] (all threads call it). */
static __device__ void s_tree(double *part)
{
    for (int w = S_THREADS / 2; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w)
            part[threadIdx.x] += part[threadIdx.x + w];
        __syncthreads();
    }
}

/* Block r normalises row r. */
static __global__ void k_rmsnorm(const float *x, const float *w, int dim, float eps, float *y,
                                 int seq)
{
    __shared__ double part[S_THREADS];
    __shared__ float mean_s;
    const float *xr = x + (size_t)blockIdx.x * dim;
    float *yr = y + (size_t)blockIdx.x * dim;
    double p = 0.0;
    for (int i = threadIdx.x; i < dim; i += S_THREADS)
        p += (double)(xr[i] * xr[i]);
    part[threadIdx.x] = p;
    __syncthreads();
    s_tree(part);
    if (threadIdx.x == 0) {
        float mean;
        if (seq || !sw_rms_mean_stable(part[0], dim, dim, &mean))
            mean = sw_rms_mean(sw_sumsq_seq(xr, dim), dim);
        mean_s = mean;
    }
    __syncthreads();
    const float scale = 1.0f / sqrtf(mean_s + eps);
    for (int i = threadIdx.x; i < dim; i += S_THREADS) {
        const float v = xr[i] * scale;
        yr[i] = v * w[i];
    }
}

/* Block (h, r) normalises head h of row r in place. */
static __global__ void k_head_norm(float *x, int n_heads, int hd, const float *w, float eps,
                                   int seq)
{
    __shared__ double part[S_THREADS];
    __shared__ float arg_s;
    float *v = x + ((size_t)blockIdx.y * n_heads + blockIdx.x) * hd;
    double p = 0.0;
    for (int i = threadIdx.x; i < hd; i += S_THREADS)
        p += (double)(v[i] * v[i]);
    part[threadIdx.x] = p;
    __syncthreads();
    s_tree(part);
    if (threadIdx.x == 0) {
        float arg;
        if (seq || !sw_head_norm_stable(part[0], hd, hd, eps, &arg))
            arg = sw_head_norm_arg(sw_sumsq_seq(v, hd), hd, eps);
        arg_s = arg;
    }
    __syncthreads();
    const float scale = 1.0f / sqrtf(arg_s);
    for (int i = threadIdx.x; i < hd; i += S_THREADS) {
        const float t = v[i] * scale;
        v[i] = t * w[i];
    }
}

int swc_rmsnorm(sw_backend_t *be, const sw_buf_t *x, const sw_buf_t *w, int n, int dim, float eps,
                sw_buf_t *out)
{
    swc *c = swc_of(be);
    if (swc_use(be) != 0)
        return -1;
    k_rmsnorm<<<n, S_THREADS, 0, c->stream>>>(swc_ptr<float>(x), swc_ptr<float>(w), dim, eps,
                                              swc_ptr<float>(out), c->seq_sums);
    return swc_launched(be, "rmsnorm");
}

int swc_head_norm(sw_backend_t *be, sw_buf_t *x, int n, int n_heads, int head_dim,
                  const sw_buf_t *w, float eps)
{
    swc *c = swc_of(be);
    if (swc_use(be) != 0)
        return -1;
    k_head_norm<<<dim3(n_heads, n), S_THREADS, 0, c->stream>>>(swc_ptr<float>(x), n_heads, head_dim,
                                                               swc_ptr<float>(w), eps, c->seq_sums);
    return swc_launched(be, "head_norm");
}
