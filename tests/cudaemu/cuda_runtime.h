/*
 * cuda_runtime.h - the emulated CUDA runtime's header: what the .cu files of engine/cuda/
 * include instead of NVIDIA's when the backend is built for the CPU
 * emulation (SW_CUDA=EMU, tests/cudaemu/CMakeLists.txt). The .cu files go
 * through swemu-cu2cc (launch syntax, __shared__) and are compiled as C++17
 * with this folder first on the include path; they then run unchanged on
 * libswemu_cudart.so (runtime.cc, exec.cc) instead of a GPU.
 *
 * Two halves:
 *  - the runtime API the backend calls (devices, memory, streams, events,
 *    graphs, errors), with NVIDIA's names, types and error values; the
 *    rules the emulation enforces are in runtime.cc;
 *  - the device side a kernel sees: dim3, threadIdx/blockIdx/blockDim/
 *    gridDim, __syncthreads, warp shuffles and votes, atomics, __dp4a, and
 *    swemu_launch(), which a rewritten launch calls (exec.cc runs the grid:
 *    each thread a fiber, each block's threads taking turns between
 *    barriers).
 *
 * Only what shardwire's kernels and host code use is declared; a missing
 * function is a compile error in the emulated build, never a silent stub.
 * __CUDA_ARCH__ is defined (750) so that device-only branches of shared
 * headers (quant_math.h's __dp4a and 16-bit loads) are the ones that run.
 */
#ifndef SWEMU_CUDA_RUNTIME_H
#define SWEMU_CUDA_RUNTIME_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <functional>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "swemu.h"

#define CUDART_VERSION 13000
#ifndef __CUDA_ARCH__
#define __CUDA_ARCH__ 750
#endif

/* ---- qualifiers --------------------------------------------------------------------- */

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __restrict__ __restrict
/* Every __shared__ must have been rewritten by swemu-cu2cc. */
#define __shared__ swemu_shared_was_not_rewritten_by_cu2cc

/* ---- types -------------------------------------------------------------------------- */

struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_)
    {
    }
};

struct uint3 {
    unsigned x, y, z;
};

enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidDevicePointer = 17,
    cudaErrorInvalidMemcpyDirection = 21,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
    cudaErrorPeerAccessUnsupported = 217,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorNotReady = 600,
    cudaErrorIllegalAddress = 700,
    cudaErrorLaunchOutOfResources = 701,
    cudaErrorPeerAccessAlreadyEnabled = 704,
    cudaErrorPeerAccessNotEnabled = 705,
    cudaErrorLaunchFailure = 719,
    cudaErrorNotSupported = 801,
    cudaErrorStreamCaptureUnsupported = 900,
    cudaErrorStreamCaptureInvalidated = 901,
    cudaErrorStreamCaptureImplicit = 906,
    cudaErrorStreamCaptureWrongThread = 908,
    cudaErrorUnknown = 999
};
typedef enum cudaError cudaError_t;

enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4
};

enum cudaStreamCaptureMode {
    cudaStreamCaptureModeGlobal = 0,
    cudaStreamCaptureModeThreadLocal = 1,
    cudaStreamCaptureModeRelaxed = 2
};

#define cudaStreamDefault 0x00
#define cudaStreamNonBlocking 0x01
#define cudaEventDefault 0x00
#define cudaEventDisableTiming 0x02

typedef struct swemu_stream *cudaStream_t;
typedef struct swemu_event *cudaEvent_t;
typedef struct swemu_graph *cudaGraph_t;
typedef struct swemu_graph_exec *cudaGraphExec_t;

/* The fields shardwire reads; the rest of NVIDIA's struct is left out. */
struct cudaDeviceProp {
    char name[256];
    size_t totalGlobalMem;
    int multiProcessorCount;
    int major, minor;
    int warpSize;
    int maxThreadsPerBlock;
    size_t sharedMemPerBlock;
};

/* library_types.h */
typedef enum cudaDataType_t {
    CUDA_R_32F = 0,
    CUDA_R_64F = 1,
    CUDA_R_16F = 2,
    CUDA_R_8I = 3,
    CUDA_R_16BF = 14
} cudaDataType;

/* ---- the runtime API (runtime.cc) ------------------------------------------------------ */

extern "C" {
const char *cudaGetErrorString(cudaError_t e);
const char *cudaGetErrorName(cudaError_t e);
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);
cudaError_t cudaDriverGetVersion(int *v);
cudaError_t cudaRuntimeGetVersion(int *v);

cudaError_t cudaGetDeviceCount(int *n);
cudaError_t cudaSetDevice(int dev);
cudaError_t cudaGetDevice(int *dev);
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int dev);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaDeviceCanAccessPeer(int *can, int dev, int peer);
cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned flags);
cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total);

cudaError_t cudaMalloc(void **p, size_t bytes);
cudaError_t cudaFree(void *p);
cudaError_t cudaMallocHost(void **p, size_t bytes);
cudaError_t cudaFreeHost(void *p);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind,
                            cudaStream_t s);
cudaError_t cudaMemcpyPeerAsync(void *dst, int dst_dev, const void *src, int src_dev, size_t n,
                                cudaStream_t s);
cudaError_t cudaMemset(void *p, int value, size_t n);
cudaError_t cudaMemsetAsync(void *p, int value, size_t n, cudaStream_t s);

cudaError_t cudaStreamCreate(cudaStream_t *s);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaStreamQuery(cudaStream_t s);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags);
cudaError_t cudaStreamBeginCapture(cudaStream_t s, enum cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g);

cudaError_t cudaEventCreate(cudaEvent_t *e);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventQuery(cudaEvent_t e);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b);

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t g, unsigned long long flags);
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec);
cudaError_t cudaGraphDestroy(cudaGraph_t g);
}

template <typename T> static inline cudaError_t cudaMalloc(T **p, size_t bytes)
{
    return cudaMalloc((void **)(void *)p, bytes);
}

/* ---- the device side (exec.cc) ------------------------------------------------------------ */

namespace swemu
{

/* The thread a kernel's code runs as now (exec.cc switches it with the fiber). */
struct Lane {
    uint3 tid; // threadIdx
};
struct Block {
    uint3 bid;    // blockIdx
    dim3 bdim;    // blockDim
    dim3 gdim;    // gridDim
    void *dyn;    // dynamic shared memory (launch's shmem bytes)
    size_t ndyn;  // its size
    uint64_t gen; // changes with every block run (shared memory poisoning)
};
extern Lane *g_lane;
extern Block g_block;

enum WarpOp { W_SYNC, W_IDX, W_UP, W_DOWN, W_XOR, W_BALLOT, W_ANY, W_ALL };
enum BlockOp { B_SYNC, B_COUNT, B_AND, B_OR };
uint64_t warp_op(int op, unsigned mask, uint64_t value, int arg, int width);
int block_sync(int op, int pred);
void shared_init(void *p, size_t n, unsigned long long *gen, const char *name);
/* An atomic's n bytes at p, checked against the allocations' red zones. */
void atomic_access(const void *p, size_t n);

/* A pointer argument of a launch: checked against the device's memory, and
 * snapshotted for the order check when the kernel may write through it. */
struct ArgPtr {
    const void *p;
    int index;
    bool writable;
};

/* One launch: name, where, shape, its body with the arguments bound, and a
 * digest of the arguments that are not pointers (exec.cc's order check
 * tells launches apart by it). */
struct Kernel {
    const char *name;
    const char *file;
    int line;
    uintptr_t fn; // the kernel function's address
    dim3 grid, block;
    size_t shmem;
    std::function<void()> body;
    std::vector<ArgPtr> ptrs;
    uint64_t scalars = 14695981039346656037ull; // FNV-1a of the other arguments' bytes
};
void launch(std::shared_ptr<Kernel> k, cudaStream_t s);

static inline uint64_t fnv1a(uint64_t h, const void *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        h = (h ^ ((const unsigned char *)p)[i]) * 1099511628211ull;
    return h;
}

/* A pointer argument goes to k.ptrs; any other one's bytes into k.scalars
 * (padding bytes included: at worst two equal launches look different). */
template <typename T> static void add_arg(Kernel &k, int i, const T &x)
{
    static_assert(std::is_trivially_copyable_v<T>, "a kernel argument is copied to the GPU");
    if constexpr (std::is_pointer_v<T>)
        k.ptrs.push_back({(const void *)x, i, !std::is_const_v<std::remove_pointer_t<T>>});
    else
        k.scalars = fnv1a(fnv1a(k.scalars, &i, sizeof i), &x, sizeof x);
}

template <typename Tuple, size_t... I>
static void add_args(Kernel &k, const Tuple &t, std::index_sequence<I...>)
{
    (add_arg(k, (int)I, std::get<I>(t)), ...);
}

template <typename T> static inline uint64_t bits(T v)
{
    static_assert(sizeof(T) <= 8, "warp operations move at most 8 bytes");
    uint64_t u = 0;
    memcpy(&u, &v, sizeof v);
    return u;
}

template <typename T> static inline T from_bits(uint64_t u)
{
    T v;
    memcpy(&v, &u, sizeof v);
    return v;
}

} // namespace swemu

#define threadIdx (::swemu::g_lane->tid)
#define blockIdx (::swemu::g_block.bid)
#define blockDim (::swemu::g_block.bdim)
#define gridDim (::swemu::g_block.gdim)
static constexpr int warpSize = 32;

/* What a rewritten launch calls: the arguments converted to the kernel's
 * parameter types and kept by value (as CUDA copies them at launch). */
template <typename... P, typename... A>
static inline void swemu_launch(const char *name, const char *file, int line, dim3 grid, dim3 block,
                                size_t shmem, cudaStream_t s, void (*k)(P...), A &&...args)
{
    static_assert(sizeof...(P) == sizeof...(A), "a launch with the wrong number of arguments");
    auto t = std::make_shared<std::tuple<std::decay_t<P>...>>(std::forward<A>(args)...);
    auto kd = std::make_shared<swemu::Kernel>();
    kd->name = name;
    kd->file = file;
    kd->line = line;
    kd->fn = reinterpret_cast<uintptr_t>(k);
    kd->grid = grid;
    kd->block = block;
    kd->shmem = shmem;
    kd->body = [t, k]() { std::apply(k, *t); };
    swemu::add_args(*kd, *t, std::index_sequence_for<P...>{});
    swemu::launch(kd, s);
}

static inline void *swemu_dyn_shared(void)
{
    return swemu::g_block.dyn;
}

template <typename T>
static inline void swemu_shared_init(T *p, size_t n, unsigned long long *gen, const char *name)
{
    swemu::shared_init((void *)p, n, gen, name);
}

static inline void __syncthreads(void)
{
    swemu::block_sync(swemu::B_SYNC, 0);
}
static inline int __syncthreads_count(int p)
{
    return swemu::block_sync(swemu::B_COUNT, p);
}
static inline int __syncthreads_and(int p)
{
    return swemu::block_sync(swemu::B_AND, p);
}
static inline int __syncthreads_or(int p)
{
    return swemu::block_sync(swemu::B_OR, p);
}
static inline void __syncwarp(unsigned mask = 0xffffffffu)
{
    swemu::warp_op(swemu::W_SYNC, mask, 0, 0, 32);
}
template <typename T> static inline T __shfl_sync(unsigned mask, T v, int src, int width = 32)
{
    return swemu::from_bits<T>(swemu::warp_op(swemu::W_IDX, mask, swemu::bits(v), src, width));
}
template <typename T>
static inline T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32)
{
    return swemu::from_bits<T>(
        swemu::warp_op(swemu::W_UP, mask, swemu::bits(v), (int)delta, width));
}
template <typename T>
static inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32)
{
    return swemu::from_bits<T>(
        swemu::warp_op(swemu::W_DOWN, mask, swemu::bits(v), (int)delta, width));
}
template <typename T>
static inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32)
{
    return swemu::from_bits<T>(
        swemu::warp_op(swemu::W_XOR, mask, swemu::bits(v), lane_mask, width));
}
static inline unsigned __ballot_sync(unsigned mask, int pred)
{
    return (unsigned)swemu::warp_op(swemu::W_BALLOT, mask, pred != 0, 0, 32);
}
static inline int __any_sync(unsigned mask, int pred)
{
    return (int)swemu::warp_op(swemu::W_ANY, mask, pred != 0, 0, 32);
}
static inline int __all_sync(unsigned mask, int pred)
{
    return (int)swemu::warp_op(swemu::W_ALL, mask, pred != 0, 0, 32);
}
static inline void __threadfence(void)
{
}
static inline void __threadfence_block(void)
{
}

/* Atomics: a block's threads are fibers of one OS thread that switch only
 * at barriers and warp operations, so a read-modify-write is atomic. Not
 * seen by the shared-memory race check (exec.cc): an atomic is no race; its
 * address is checked against the allocations' red zones (atomic_access). */
#define SWEMU_ATOMIC __attribute__((no_sanitize_thread, noinline))
template <typename T> SWEMU_ATOMIC static T atomicAdd(T *p, T v)
{
    swemu::atomic_access(p, sizeof *p);
    T old = *p;
    *p = old + v;
    return old;
}
template <typename T> SWEMU_ATOMIC static T atomicSub(T *p, T v)
{
    swemu::atomic_access(p, sizeof *p);
    T old = *p;
    *p = old - v;
    return old;
}
template <typename T> SWEMU_ATOMIC static T atomicExch(T *p, T v)
{
    swemu::atomic_access(p, sizeof *p);
    T old = *p;
    *p = v;
    return old;
}
template <typename T> SWEMU_ATOMIC static T atomicMax(T *p, T v)
{
    swemu::atomic_access(p, sizeof *p);
    T old = *p;
    *p = old > v ? old : v;
    return old;
}
template <typename T> SWEMU_ATOMIC static T atomicMin(T *p, T v)
{
    swemu::atomic_access(p, sizeof *p);
    T old = *p;
    *p = old < v ? old : v;
    return old;
}
template <typename T> SWEMU_ATOMIC static T atomicCAS(T *p, T cmp, T v)
{
    swemu::atomic_access(p, sizeof *p);
    T old = *p;
    if (old == cmp)
        *p = v;
    return old;
}

/* The four signed byte products of a and b, plus c. */
static inline int __dp4a(int a, int b, int c)
{
    for (int i = 0; i < 4; i++)
        c += (int)(int8_t)(uint8_t)((unsigned)a >> (8 * i)) *
             (int)(int8_t)(uint8_t)((unsigned)b >> (8 * i));
    return c;
}
static inline int __popc(unsigned x)
{
    return __builtin_popcount(x);
}
static inline int __clz(int x)
{
    return x ? __builtin_clz((unsigned)x) : 32;
}
static inline int __ffs(int x)
{
    return __builtin_ffs(x);
}
static inline float __int_as_float(int x)
{
    return swemu::from_bits<float>((uint32_t)x);
}
static inline int __float_as_int(float x)
{
    return (int)(uint32_t)swemu::bits(x);
}
template <typename T> static inline T __ldg(const T *p)
{
    return *p;
}

#endif
