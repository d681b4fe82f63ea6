/*
 * elementwise.cu - residual add, SwiGLU, and Gemma 3's scale and GEGLU.
 *
 * SwiGLU: the CPU computes every full group of 8 of the n values with GGML's
 * exp (sw_swiglu_ggml) and the last n % 8 with the C library's expf; here the
 * same split, with CUDA's expf for that tail (it may differ from the C
 * library's in the last bit; models have n_ff a multiple of 8, so no row has
 * a tail in practice).
 *
 * GEGLU reads GGML's f16 GELU table (sw_gelu_f16_table(), the CPU's own
 * values) from a device copy the backend makes on its first GEGLU, so the
 * GPU computes the CPU's bits: no tanh runs on the device.
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

static __global__ void k_scale(float *x, size_t n, float v)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        x[i] *= v;
}

static __global__ void k_geglu(float *g, const float *u, const sw_f16 *table, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        g[i] = sw_geglu_ggml(table, g[i], u[i]);
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

int swc_scale(sw_backend_t *be, sw_buf_t *x, size_t n, float v)
{
    if (swc_use(be) != 0)
        return -1;
    k_scale<<<s_grid(n), 256, 0, swc_of(be)->stream>>>(swc_ptr<float>(x), n, v);
    return swc_launched(be, "scale");
}

/* The device copy of GGML's GELU table, made once per backend (not inside a
 * capture: the first GEGLU of a step runs before any recording). */
static int s_gelu_table(sw_backend_t *be, const sw_f16 **out)
{
    swc *c = swc_of(be);
    if (!c->gelu) {
        if (c->recording) {
            c->capture_broken = 1;
            return sw_backend_fail(be, "cuda:%d: the GELU table inside a graph capture", c->dev);
        }
        const size_t bytes = (size_t)65536 * sizeof(sw_f16);
        void *p = NULL;
        SWC_CHECK(be, cudaMalloc(&p, bytes));
        const cudaError_t e = cudaMemcpy(p, sw_gelu_f16_table(), bytes, cudaMemcpyHostToDevice);
        if (e != cudaSuccess) {
            cudaFree(p);
            return swc_fail_cuda(be, "the GELU table", e);
        }
        c->gelu = (sw_f16 *)p;
    }
    *out = c->gelu;
    return 0;
}

int swc_geglu(sw_backend_t *be, sw_buf_t *gate, const sw_buf_t *up, size_t n)
{
    const sw_f16 *table = NULL;
    if (swc_use(be) != 0 || s_gelu_table(be, &table) != 0)
        return -1;
    k_geglu<<<s_grid(n), 256, 0, swc_of(be)->stream>>>(swc_ptr<float>(gate), swc_ptr<float>(up),
                                                       table, n);
    return swc_launched(be, "geglu");
}
