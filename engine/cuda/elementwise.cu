/*
 * elementwise.cu - residual add and SwiGLU.
 *
 * SwiGLU: the CPU computes every full group of 8 of the n values with GGML's
 * exp (sw_swiglu_ggml) and the last n % 8 with the C library's expf; here the
 * same split, with CUDA's expf for that tail (it may differ from the C
 * library's in the last bit; models have n_ff a multiple of 8, so no row has
 * a tail in practice).
 */
#include "common.cuh"

static __global__ void k_add(float *x, const float *y, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        x[i] += y[i];
}

static __global__ void k_swiglu(float *g, const float *u, size_t n)
{
    const size_t full = n & ~(size_t)7;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        if (i < full) {
            g[i] = sw_swiglu_ggml(g[i], u[i]);
        } else {
            const float x = g[i];
            const float silu = x / (1.0f + expf(-x));
            g[i] = silu * u[i];
        }
    }
}

static unsigned s_grid(size_t n)
{
    const size_t b = (n + 255) / 256;
    return (unsigned)(b < 4096 ? (b ? b : 1) : 4096);
}

int swc_add(sw_backend_t *be, sw_buf_t *x, const sw_buf_t *y, size_t n)
{
    if (swc_use(be) != 0)
        return -1;
    k_add<<<s_grid(n), 256, 0, swc_of(be)->stream>>>(swc_ptr<float>(x), swc_ptr<float>(y), n);
    return swc_launched(be, "add");
}

int swc_swiglu(sw_backend_t *be, sw_buf_t *gate, const sw_buf_t *up, size_t n)
{
    if (swc_use(be) != 0)
        return -1;
    k_swiglu<<<s_grid(n), 256, 0, swc_of(be)->stream>>>(swc_ptr<float>(gate), swc_ptr<float>(up),
                                                        n);
    return swc_launched(be, "swiglu");
}
