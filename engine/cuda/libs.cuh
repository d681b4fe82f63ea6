/*
 * libs.cuh - cuBLAS and NCCL, opened with dlopen on first use (libs.cu), so
 * that no program pays for loading them at start and a CUDA build still runs
 * where they are missing (the callers then take another path).
 */
#ifndef SW_CUDA_LIBS_CUH
#define SW_CUDA_LIBS_CUH

#include <cublas_v2.h>
#ifdef SW_HAVE_NCCL
#include <nccl.h>
#endif

/* The cuBLAS functions the prompt path calls; all NULL when libcublas is absent. */
typedef struct swc_cublas {
    decltype(&cublasCreate_v2) create;
    decltype(&cublasDestroy_v2) destroy;
    decltype(&cublasSetStream_v2) set_stream;
    /* The C entry point (C++ also sees an overload with a cudaDataType compute type). */
    cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                              const void *, const void *, cudaDataType, int, const void *,
                              cudaDataType, int, const void *, void *, cudaDataType, int,
                              cublasComputeType_t, cublasGemmAlgo_t);
    decltype(&cublasGetStatusString) status_string;
} swc_cublas;

/* The loaded table, or NULL (then why holds the reason). Thread-safe, loads once. */
const swc_cublas *swc_cublas_get(const char **why);

#ifdef SW_HAVE_NCCL
typedef struct swc_nccl {
    decltype(&ncclCommInitAll) comm_init_all;
    decltype(&ncclCommDestroy) comm_destroy;
    decltype(&ncclGroupStart) group_start;
    decltype(&ncclGroupEnd) group_end;
    decltype(&ncclSend) send;
    decltype(&ncclRecv) recv;
    decltype(&ncclGetErrorString) error_string;
} swc_nccl;

const swc_nccl *swc_nccl_get(const char **why);
#endif

#endif
