/*
 * cublas.cc - libswemu_cublas.so, the emulated cuBLAS behind libs.cu's
 * dlopen: handles bound to a device and a stream, and cublasGemmEx for the
 * one case the prompt path uses (f16 A and B, f32 C, f32 compute), queued on
 * the handle's stream as a reference GEMM. The GEMM sums in its own order
 * (8 partial sums over k), not the CPU backend's: like the real cuBLAS, its
 * results are close to the exact kernels' but not equal, which is what the
 * GPU tests' margin rule for the cuBLAS path is for.
 *
 * Every operand must lie in device memory of the handle's device (else the
 * call fails naming the operand), and the handle's device must be the
 * current one.
 */
#include "cublas_v2.h"
#include "emu_impl.h"

#include <stdio.h>

#include "quant_math.h" // sw_h2f

using namespace swemu;

struct swemu_cublas {
    int dev;
    cudaStream_t stream;
};

__attribute__((constructor)) static void s_loaded(void)
{
    std::lock_guard<std::recursive_mutex> g(lock());
    count("dlopen_cublas");
}

extern "C" {

cublasStatus_t cublasCreate_v2(cublasHandle_t *h)
{
    std::lock_guard<std::recursive_mutex> g(lock());
    if (current_device() >= device_count())
        return CUBLAS_STATUS_NOT_INITIALIZED;
    *h = new swemu_cublas{current_device(), nullptr};
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t h)
{
    std::lock_guard<std::recursive_mutex> g(lock());
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t h, cudaStream_t s)
{
    std::lock_guard<std::recursive_mutex> g(lock());
    Stream *st = stream(s);
    if (!h || !st || st->dev != h->dev)
        return CUBLAS_STATUS_INVALID_VALUE;
    h->stream = s;
    return CUBLAS_STATUS_SUCCESS;
}

const char *cublasGetStatusString(cublasStatus_t s)
{
    switch (s) {
    case CUBLAS_STATUS_SUCCESS:
        return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
        return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_INVALID_VALUE:
        return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_EXECUTION_FAILED:
        return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_NOT_SUPPORTED:
        return "CUBLAS_STATUS_NOT_SUPPORTED";
    default:
        return "CUBLAS_STATUS_INTERNAL_ERROR";
    }
}

/* The operand of `elems` elements of `size` bytes at p, on dev; else NULL. */
static Alloc *s_operand(const void *p, size_t elems, size_t size, int dev, const char *which)
{
    Alloc *a = find(p, elems * size);
    if (!a || a->dev != dev) {
        char what[300];
        describe(p, what, sizeof what);
        fprintf(stderr,
                "swemu: cublasGemmEx: operand %s (%zu elements at %p) is not on cuda:%d: %s\n",
                which, elems, p, dev, what);
        return nullptr;
    }
    return a;
}

cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                            int n, int k, const void *alpha, const void *A, cudaDataType at,
                            int lda, const void *B, cudaDataType bt, int ldb, const void *beta,
                            void *C, cudaDataType ct, int ldc, cublasComputeType_t compute,
                            cublasGemmAlgo_t algo)
{
    std::lock_guard<std::recursive_mutex> g(lock());
    (void)algo;
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (at != CUDA_R_16F || bt != CUDA_R_16F || ct != CUDA_R_32F || compute != CUBLAS_COMPUTE_32F ||
        ta == CUBLAS_OP_C || tb == CUBLAS_OP_C)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if (m < 0 || n < 0 || k < 0 || lda < (ta == CUBLAS_OP_N ? m : k) ||
        ldb < (tb == CUBLAS_OP_N ? k : n) || ldc < m)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (h->dev != current_device()) {
        fprintf(stderr, "swemu: cublasGemmEx with a cuda:%d handle while cuda:%d is current\n",
                h->dev, current_device());
        return CUBLAS_STATUS_EXECUTION_FAILED;
    }
    if (m == 0 || n == 0)
        return CUBLAS_STATUS_SUCCESS;
    const size_t a_el = ta == CUBLAS_OP_N ? (size_t)(k - 1) * lda + m : (size_t)(m - 1) * lda + k;
    const size_t b_el = tb == CUBLAS_OP_N ? (size_t)(n - 1) * ldb + k : (size_t)(k - 1) * ldb + n;
    const size_t c_el = (size_t)(n - 1) * ldc + m;
    if (k > 0 && (!s_operand(A, a_el, 2, h->dev, "A") || !s_operand(B, b_el, 2, h->dev, "B")))
        return CUBLAS_STATUS_EXECUTION_FAILED;
    if (!s_operand(C, c_el, 4, h->dev, "C"))
        return CUBLAS_STATUS_EXECUTION_FAILED;
    Stream *s = stream(h->stream);
    if (!s)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (sticky_of(s->dev)) // the device's context is lost
        return CUBLAS_STATUS_EXECUTION_FAILED;
    const float al = *(const float *)alpha, be = *(const float *)beta;
    Op op;
    op.kind = Op::HOST;
    op.what = "cublasGemmEx";
    op.fn = [=]() {
        Access aa(find(A, k > 0 ? a_el * 2 : 0)), ba(find(B, k > 0 ? b_el * 2 : 0)),
            ca(find(C, c_el * 4));
        const sw_f16 *a = (const sw_f16 *)A, *b = (const sw_f16 *)B;
        float *c = (float *)C;
        std::vector<float> arow((size_t)k), bcol((size_t)k);
        for (int j = 0; j < n; j++) {
            for (int p = 0; p < k; p++)
                bcol[(size_t)p] =
                    sw_h2f(tb == CUBLAS_OP_N ? b[(size_t)j * ldb + p] : b[(size_t)p * ldb + j]);
            for (int i = 0; i < m; i++) {
                for (int p = 0; p < k; p++)
                    arow[(size_t)p] =
                        sw_h2f(ta == CUBLAS_OP_N ? a[(size_t)p * lda + i] : a[(size_t)i * lda + p]);
                float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
                int p = 0;
                for (; p + 8 <= k; p += 8)
                    for (int l = 0; l < 8; l++)
                        acc[l] += arow[(size_t)(p + l)] * bcol[(size_t)(p + l)];
                for (; p < k; p++)
                    acc[p & 7] += arow[(size_t)p] * bcol[(size_t)p];
                const float dot = ((acc[0] + acc[4]) + (acc[2] + acc[6])) +
                                  ((acc[1] + acc[5]) + (acc[3] + acc[7]));
                float &out = c[(size_t)j * ldc + i];
                out = be == 0.0f ? al * dot : al * dot + be * out;
            }
        }
    };
    if (enqueue(s, std::move(op)) != cudaSuccess)
        return CUBLAS_STATUS_EXECUTION_FAILED;
    count("gemm");
    return CUBLAS_STATUS_SUCCESS;
}

} // extern "C"
