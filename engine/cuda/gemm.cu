/*
 * gemm.cu - the prompt path: a prompt chunk longer than the backend's
 * gemm_rows (SW_CUDA_GEMM, default 64) multiplies dequantized f16 weight
 * tiles with f16 activations in cuBLAS (tensor cores, f32 accumulation),
 * instead of re-reading the quantized weights once per 8 rows.
 *
 * Rows are scaled by a power of two before the f16 conversion when their
 * largest value would overflow f16 (65504), and scaled back after, which
 * changes no bit but the ones f16 cannot hold. The results depend on cuBLAS's
 * choice of algorithm for the shape, so a prompt chunk's rows are not
 * bit-identical to the same rows computed by the exact kernels; every stage
 * and every replay evaluates a prompt in the same chunks, so split, whole and
 * recovered runs still agree. Graphs never record this path (prompt chunks
 * are not recorded). cuBLAS is opened on first use (libs.cu); without it
 * swc_gemm returns -2 and the exact kernels take the chunk.
 */
#include "common.cuh"
#include "libs.cuh"

#define S_TILE_BYTES ((size_t)64 << 20) // f16 weight tile

/* Block r: x row r to f16 with a power-of-two scale so that it fits. */
static __global__ void k_x16(const float *x, int64_t n_in, sw_f16 *x16, float *scale)
{
    __shared__ float mx[256];
    const float *xr = x + (size_t)blockIdx.x * n_in;
    float m = 0.0f;
    for (int64_t j = threadIdx.x; j < n_in; j += 256)
        m = fmaxf(m, fabsf(xr[j]));
    mx[threadIdx.x] = m;
    __syncthreads();
    for (int w = 128; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w)
            mx[threadIdx.x] = fmaxf(mx[threadIdx.x], mx[threadIdx.x + w]);
        __syncthreads();
    }
    float s = 1.0f;
    while (mx[0] / s > 32768.0f && s < 0x1p100f)
        s *= 2.0f;
    for (int64_t j = threadIdx.x; j < n_in; j += 256)
        x16[(size_t)blockIdx.x * n_in + j] = sw_f2h(xr[j] / s);
    if (threadIdx.x == 0)
        scale[blockIdx.x] = s;
}

/* Rows [o0, o0 + rows) of the weight as f16. */
static __global__ void k_w16(int type, const uint8_t *w, size_t row_bytes, int64_t n_in, int64_t o0,
                             sw_f16 *out)
{
    const int64_t r = blockIdx.y;
    const uint8_t *row = w + (size_t)(o0 + r) * row_bytes;
    for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < n_in;
         j += (int64_t)gridDim.x * blockDim.x)
        out[(size_t)r * n_in + j] = sw_f2h(sw_deq_elem((enum sw_type)type, row, j));
}

/* y[r, o] = y[r, o] * scale[r] + bias[o]. */
static __global__ void k_finish(float *y, int64_t n_out, const float *scale, const float *bias)
{
    const int r = blockIdx.y;
    for (int64_t o = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; o < n_out;
         o += (int64_t)gridDim.x * blockDim.x) {
        float v = y[(size_t)r * n_out + o] * scale[r];
        if (bias)
            v += bias[o];
        y[(size_t)r * n_out + o] = v;
    }
}

static int s_cublas_fail(sw_backend_t *be, const swc_cublas *cb, const char *what,
                         cublasStatus_t st)
{
    return sw_backend_fail(be, "cuda:%d: cuBLAS %s: %s", swc_of(be)->dev, what,
                           cb->status_string(st));
}

void swc_gemm_free(swc *c)
{
    if (!c->cublas) // never used: do not load cuBLAS just to find nothing to free
        return;
    const swc_cublas *cb = swc_cublas_get(NULL);
    if (cb)
        cb->destroy((cublasHandle_t)c->cublas);
    c->cublas = NULL;
}

int swc_gemm(sw_backend_t *be, const sw_weight_t *w, const sw_buf_t *bias, const float *x, int n,
             float *y)
{
    swc *c = swc_of(be);
    const char *why = "";
    const swc_cublas *cb = swc_cublas_get(&why);
    if (!cb) {
        if (!c->gemm_warned)
            SW_WARN("cuda:%d: %s: prompt chunks use the exact kernels", c->dev, why);
        c->gemm_warned = 1;
        return -2;
    }
    cublasStatus_t st;
    if (!c->cublas) {
        cublasHandle_t h;
        if ((st = cb->create(&h)) != CUBLAS_STATUS_SUCCESS)
            return s_cublas_fail(be, cb, "create", st);
        c->cublas = h;
    }
    cublasHandle_t h = (cublasHandle_t)c->cublas;
    if ((st = cb->set_stream(h, c->stream)) != CUBLAS_STATUS_SUCCESS)
        return s_cublas_fail(be, cb, "set stream", st);

    const int64_t n_in = w->n_in, n_out = w->n_out;
    int64_t tile = (int64_t)(S_TILE_BYTES / ((size_t)n_in * 2));
    tile = tile < 1 ? 1 : tile > n_out ? n_out : tile;
    tile = tile > 65535 ? 65535 : tile; // one grid row per weight row
    const size_t x16_bytes = ((size_t)n * n_in * 2 + 255) & ~(size_t)255;
    const size_t sc_bytes = ((size_t)n * 4 + 255) & ~(size_t)255;
    void *scratch;
    if (swc_scratch(be, SWC_SCRATCH_GEMM, x16_bytes + sc_bytes + (size_t)tile * n_in * 2,
                    &scratch) != 0)
        return -1;
    sw_f16 *x16 = (sw_f16 *)scratch;
    float *scale = (float *)((char *)scratch + x16_bytes);
    sw_f16 *w16 = (sw_f16 *)((char *)scratch + x16_bytes + sc_bytes);

    k_x16<<<n, 256, 0, c->stream>>>(x, n_in, x16, scale);
    if (swc_launched(be, "gemm input") != 0)
        return -1;
    const float one = 1.0f, zero = 0.0f;
    for (int64_t o0 = 0; o0 < n_out; o0 += tile) {
        const int64_t rows = n_out - o0 < tile ? n_out - o0 : tile;
        k_w16<<<dim3(swc_blocks(n_in, 256) < 32 ? swc_blocks(n_in, 256) : 32, (unsigned)rows), 256,
                0, c->stream>>>((int)w->type, swc_ptr<uint8_t>(w->buf), w->row_bytes, n_in, o0,
                                w16);
        if (swc_launched(be, "gemm weight tile") != 0)
            return -1;
        /* Column-major: C (rows x n, ld n_out) = W16^T (rows x n_in) * X16 (n_in x n). */
        st = cb->gemm_ex(h, CUBLAS_OP_T, CUBLAS_OP_N, (int)rows, n, (int)n_in, &one, w16,
                         CUDA_R_16F, (int)n_in, x16, CUDA_R_16F, (int)n_in, &zero, y + o0,
                         CUDA_R_32F, (int)n_out, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        if (st != CUBLAS_STATUS_SUCCESS)
            return s_cublas_fail(be, cb, "GemmEx", st);
    }
    k_finish<<<dim3(swc_blocks(n_out, 256) < 64 ? swc_blocks(n_out, 256) : 64, n), 256, 0,
               c->stream>>>(y, n_out, scale, bias ? swc_ptr<float>(bias) : NULL);
    if (swc_launched(be, "gemm finish") != 0)
        return -1;
    c->n_gemm++;
    return 0;
}
