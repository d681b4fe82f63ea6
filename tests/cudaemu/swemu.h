/*
 * swemu.h - what a test may ask the emulated CUDA runtime (libswemu_cudart)
 * beyond the CUDA API: how often something happened, and a failure to
 * inject into the next call of a runtime function. C and C++.
 *
 * The emulation is configured by the environment, read once when the
 * runtime starts:
 *   SW_CUDA_EMU_DEVICES=N    emulated GPUs (default 1; 0 = none visible)
 *   SW_CUDA_EMU_MEM_MIB=M    memory of each (default 4096)
 *   SW_CUDA_EMU_PEER=1       GPUs can map each other's memory (cudaDeviceCanAccessPeer;
 *                            default 0, as on two T4s without P2P)
 *   SW_CUDA_EMU_CHECK=N      the second, reversed run (the order check) on the first
 *                            N launches of each distinct launch (default S_CHECK_FIRST, exec.cc);
 *                            "all" every launch, 0 none (faster, for benchmarks of
 *                            the emulation only)
 *   SW_CUDA_EMU_LIBS=none    cuBLAS and NCCL are absent (dlopen fails), as on a
 *                            machine without them; "nccl" or "cublas" keeps only that one
 *   SW_CUDA_EMU_FAIL=A:S:E   swemu_fail(A, S, E) at start (a fault for a whole program:
 *                            e.g. cudaStreamSynchronize:20:700)
 *   SW_CUDA_EMU_RACECHECK=0  no check of unordered writes to the same memory (exec.cc;
 *                            on by default)
 *   SW_CUDA_EMU_STREAMS=P    when streams run their work (sched.cc): lazy (default:
 *                            only when waited for), eager (at once), late=D (device
 *                            D's streams lazy, the others eager), late=waiters (a
 *                            stream that waited for another lazy, the others
 *                            eager), random=SEED
 * Every error the emulation finds in a kernel (an access outside device
 * memory, to another GPU's memory, a result that depends on the order of
 * threads, a barrier some threads never reach) is printed with the kernel's
 * name and aborts the process: nothing can swallow it.
 */
#ifndef SWEMU_H
#define SWEMU_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* How often `what` happened in this process:
 *   "launch"        kernel launches executed (graph replays included)
 *   "order_check"   launches run a second time in reverse order (SW_CUDA_EMU_CHECK)
 *   "capture"       stream captures begun
 *   "graph_launch"  graph launches
 *   "peer_copy"     cudaMemcpyPeerAsync copies
 *   "nccl_send"     NCCL send/recv pairs completed
 *   "gemm"          cublasGemmEx calls
 *   "dlopen_cublas", "dlopen_nccl"  the stand-ins loaded
 * 0 for a name it does not know. */
uint64_t swemu_count(const char *what);
/* The next call of the runtime function `api` (e.g. "cudaMemcpy") after
 * `skip` more successful ones fails with error `err` (a cudaError_t value),
 * once. An error that is fatal on a GPU (700 an illegal address, 702, 710,
 * 714-719) stays, as on a GPU: the device drops its queued work and every
 * later call on it, cudaGetLastError included, returns that error. */
void swemu_fail(const char *api, int skip, int err);
/* Switches the streams' policy (as SW_CUDA_EMU_STREAMS) from now on; work
 * already queued stays queued. 0, or -1 for a spec it does not know. */
int swemu_streams(const char *spec);
/* The path of the stand-in library `which` ("cublas" or "nccl") for dlopen,
 * or a path that does not exist when SW_CUDA_EMU_LIBS leaves it out. */
const char *swemu_lib(const char *which);

#ifdef __cplusplus
}
#endif

#endif
