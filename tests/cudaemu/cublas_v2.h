/*
 * cublas_v2.h - the emulated cuBLAS's header: the types and the functions
 * shardwire's prompt path (gemm.cu) opens with dlopen (libs.cu), with
 * NVIDIA's names and values. The library behind it is libswemu_cublas.so
 * (cublas.cc), a reference GEMM on the emulated streams; libs.cu opens it
 * by the path swemu_lib("cublas") gives (SWC_CUBLAS_NAMES below), never a
 * real libcublas that the machine may have.
 */
#ifndef SWEMU_CUBLAS_V2_H
#define SWEMU_CUBLAS_V2_H

#include "cuda_runtime.h"

#define CUBLAS_VER_MAJOR 13
#define SWC_CUBLAS_NAMES swemu_lib("cublas")

typedef enum {
    CUBLAS_STATUS_SUCCESS = 0,
    CUBLAS_STATUS_NOT_INITIALIZED = 1,
    CUBLAS_STATUS_ALLOC_FAILED = 3,
    CUBLAS_STATUS_INVALID_VALUE = 7,
    CUBLAS_STATUS_EXECUTION_FAILED = 13,
    CUBLAS_STATUS_INTERNAL_ERROR = 14,
    CUBLAS_STATUS_NOT_SUPPORTED = 15
} cublasStatus_t;

typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1, CUBLAS_OP_C = 2 } cublasOperation_t;
typedef enum { CUBLAS_GEMM_DEFAULT = -1 } cublasGemmAlgo_t;
typedef enum { CUBLAS_COMPUTE_32F = 68 } cublasComputeType_t;
typedef struct swemu_cublas *cublasHandle_t;

extern "C" {
cublasStatus_t cublasCreate_v2(cublasHandle_t *h);
cublasStatus_t cublasDestroy_v2(cublasHandle_t h);
cublasStatus_t cublasSetStream_v2(cublasHandle_t h, cudaStream_t s);
cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                            int n, int k, const void *alpha, const void *A, cudaDataType at,
                            int lda, const void *B, cudaDataType bt, int ldb, const void *beta,
                            void *C, cudaDataType ct, int ldc, cublasComputeType_t compute,
                            cublasGemmAlgo_t algo);
const char *cublasGetStatusString(cublasStatus_t s);
}

#endif
