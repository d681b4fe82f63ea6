/*
 * backend_cuda.h - the CUDA backend's entry points for the registry
 * (backend.c). Only built when CMake finds nvcc (SW_HAVE_CUDA).
 */
#ifndef SW_BACKEND_CUDA_H
#define SW_BACKEND_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* GPUs visible to this process (0 when there is no driver or no device). */
int sw_cuda_devices(void);
/* A backend on GPU dev. NULL with one line in err (no such GPU, no driver,
 * out of memory). Environment knobs (read once here):
 *   SW_CUDA_GRAPHS=0    never record CUDA graphs
 *   SW_CUDA_GEMM=off    prompt chunks use the exact kernels too (no cuBLAS);
 *   SW_CUDA_GEMM=N      cuBLAS for prompt chunks of more than N rows (default 64)
 *   SW_CUDA_SEQ_SUMS=1  always take the left-to-right double sums (tests)
 *   SW_CUDA_ATTN_MIB=M  attention's scratch for one pass of rows (default 256;
 *                       small values make long chunks take several passes: tests)
 *   SW_NCCL=0           peer copies instead of NCCL between GPUs
 *   SW_NVIDIA_PROC=F    the driver's version file a no-driver error quotes (tests) */
sw_backend_t *sw_backend_cuda_new(int dev, char *err, size_t err_len);
/* Device-to-device copy bandwidth of GPU dev (GB/s read + written), 0 on error. */
double sw_cuda_measure_copy(int dev);

/* What a CUDA backend ran, for the GPU tests and scripts/gpu_check.sh. */
typedef struct sw_cuda_paths {
    uint64_t gemm;     // weight matrices multiplied through cuBLAS (prompt chunks)
    uint64_t nccl;     // hand-overs to another GPU through NCCL
    uint64_t peer;     // hand-overs by peer copies
    uint64_t recorded; // steps recorded as CUDA graphs
    uint64_t replayed; // graph launches
} sw_cuda_paths_t;
/* Adds the counts of be (a CUDA backend, or a group's CUDA members) to *out. */
void sw_cuda_paths(sw_backend_t *be, sw_cuda_paths_t *out);

#ifdef __cplusplus
}
#endif

#endif
