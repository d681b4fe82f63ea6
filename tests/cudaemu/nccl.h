/*
 * nccl.h - the emulated NCCL's header: the point-to-point calls shardwire
 * uses between the GPUs of one node (backend_cuda.cu), with NCCL's names
 * and values. libswemu_nccl.so (nccl.cc) implements them as copies between
 * emulated devices on their streams; libs.cu opens it by the path
 * swemu_lib("nccl") gives (SWC_NCCL_NAMES), never a real libnccl.
 */
#ifndef SWEMU_NCCL_H
#define SWEMU_NCCL_H

#include "cuda_runtime.h"

#define NCCL_MAJOR 2
#define SWC_NCCL_NAMES swemu_lib("nccl")

typedef enum {
    ncclSuccess = 0,
    ncclUnhandledCudaError = 1,
    ncclSystemError = 2,
    ncclInternalError = 3,
    ncclInvalidArgument = 4,
    ncclInvalidUsage = 5
} ncclResult_t;

typedef enum { ncclInt8 = 0, ncclUint8 = 1, ncclFloat32 = 7 } ncclDataType_t;
typedef struct swemu_nccl_comm *ncclComm_t;

extern "C" {
ncclResult_t ncclCommInitAll(ncclComm_t *comm, int ndev, const int *devlist);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);
ncclResult_t ncclSend(const void *buf, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                      cudaStream_t s);
ncclResult_t ncclRecv(void *buf, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                      cudaStream_t s);
const char *ncclGetErrorString(ncclResult_t r);
}

#endif
