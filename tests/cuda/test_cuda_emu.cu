/*
 * test_cuda_emu.cu - the CPU emulation of the CUDA runtime checked against
 * what it claims (label cuda; built only with SW_CUDA=EMU, through
 * swemu-cu2cc like the backend's sources): that correct kernels compute
 * what a GPU computes, and that each error it promises to find is found,
 * with the kernel named:
 *
 *  - barriers, warp shuffles and votes, static and dynamic shared memory,
 *    atomics, a grid of several blocks, graphs replayed with new data;
 *  - the order check's choice of launches: the first two of each distinct
 *    launch (SW_CUDA_EMU_CHECK: all, 0), counted;
 *  - in a child process each (it aborts): a read one element past an
 *    allocation, a write one element before one (its red zone), a read one
 *    element before one that fills its pages (the guard page before it), a
 *    byte read and a byte written one byte before and one byte after a 400-byte
 *    allocation (red zone, guard page: each named with the kernel, the
 *    argument, the offset; the same bytes just inside pass), an atomicAdd on
 *    the int before one, a tree reduction without
 * its __syncthreads (the reversed run differs), a read of another device's memory, a shuffle whose
 * lane has exited, a write past the dynamic shared memory, a float loaded 2 bytes into an
 * allocation (misaligned: a GPU faults, x86 would not), 256 threads adding 1 to a shared counter
 * without an atomic and a read of another thread's shared slot without a barrier (races in shared
 *    memory the fibers' order cannot show);
 *  - returned errors: a launch into another device's stream, a bad launch
 *    shape, a synchronisation inside a capture (the capture is invalidated),
 *    the last error cleared by cudaGetLastError, an injected failure;
 *  - lazy streams: a consumer stream that does not wait for the producer's
 *    event reads stale data (the emulation does not hide the missing wait),
 *    with the wait it reads the new data; the late=waiters schedule: a
 *    producer that overwrites what a late consumer still reads shows it,
 *    unless it waits for the read;
 *  - a fatal error (700) stays on its device: every later call returns it,
 *    cudaGetLastError never clears it, the other device works;
 *  - the cuBLAS and NCCL stand-ins: a GEMM against a plain loop, a send/recv
 *    pair between two emulated devices.
 */
#include <cublas_v2.h>
#include <nccl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <dlfcn.h>

#include "quant_math.h" // sw_f2h
extern "C" {
#include "sw_test.h" // a C header without extern "C" of its own
}

#define S_OK(call) SW_CHECK_INT((int)(call), 0)

/* ---- kernels that are right ----------------------------------------------------------------- */

/* Block b: out[b] = sum of x[256 b .. 256 b + 255], a tree in shared memory. */
static __global__ void k_sum(const float *x, float *out, int skip_sync)
{
    __shared__ float part[256];
    part[threadIdx.x] = x[blockIdx.x * 256 + threadIdx.x];
    __syncthreads();
    for (int w = 128; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w)
            part[threadIdx.x] += part[threadIdx.x + w];
        if (!skip_sync)
            __syncthreads();
    }
    if (threadIdx.x == 0)
        out[blockIdx.x] = part[0];
}

/* Warp w: the lanes' values summed with xor shuffles, the ballot of odd values,
 * a broadcast from lane 5, a count with an atomic. */
static __global__ void k_warp(const int *x, int *sum, unsigned *ballot, int *bcast, int *count)
{
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    int v = x[threadIdx.x];
    const unsigned b = __ballot_sync(0xffffffffu, v & 1);
    const int from5 = __shfl_sync(0xffffffffu, v, 5);
    for (int s = 16; s > 0; s >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, s);
    if (lane == 0) {
        sum[w] = v;
        ballot[w] = b;
    }
    bcast[threadIdx.x] = from5;
    atomicAdd(count, 1);
}

/* Dynamic shared memory: reversed within the block. */
static __global__ void k_reverse(const float *x, float *y, int n)
{
    extern __shared__ float buf[];
    buf[threadIdx.x] = x[threadIdx.x];
    __syncthreads();
    y[threadIdx.x] = buf[n - 1 - threadIdx.x];
}

/* Uninitialised shared memory reads as 0xff bytes. */
static __global__ void k_uninit(unsigned *out)
{
    __shared__ unsigned junk[4];
    if (threadIdx.x == 0)
        *out = junk[2];
}

static __global__ void k_scale(float *x, int n, float f)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        x[i] *= f;
}

static __global__ void k_copy(const float *x, float *y, int n)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = x[i];
}

/* ---- kernels that are wrong ---------------------------------------------------------------- */

static __global__ void k_write_before(float *y)
{
    y[(int)threadIdx.x - 1] = 1.0f; // thread 0 writes one float before the start
}

static __global__ void k_read_before(const float *x, float *y)
{
    y[threadIdx.x] = x[(int)threadIdx.x - 1]; // thread 0 reads one float before the start
}

static __global__ void k_read_past(const float *x, float *y, int n)
{
    const int i = threadIdx.x;
    y[i] = x[i + 1]; // one past the end for the last thread
    (void)n;
}

/* Thread 0 reads the byte at offset `at` of x (into y[0]), or writes 1 there. */
static __global__ void k_peek(const unsigned char *x, float *y, int at)
{
    if (threadIdx.x == 0)
        y[0] = (float)x[at];
}

static __global__ void k_poke(unsigned char *x, int at)
{
    if (threadIdx.x == 0)
        x[at] = 1;
}

static __global__ void k_atomic_at(int *x, int at)
{
    if (threadIdx.x == 0)
        atomicAdd(x + at, 1);
}

static __global__ void k_lane_exits(float *y)
{
    if (threadIdx.x == 3)
        return;
    y[threadIdx.x] = __shfl_sync(0xffffffffu, 1.0f, 3);
}

/* 256 threads add 1 to one shared counter without an atomic: 256 in any
 * order of the fibers, a race on a GPU. */
static __global__ void k_shared_rmw(int *out)
{
    __shared__ int s;
    if (threadIdx.x == 0)
        s = 0;
    __syncthreads();
    s += 1;
    __syncthreads();
    if (threadIdx.x == 0)
        *out = s;
}

/* Each thread writes its slot, then reads its neighbour's without a barrier. */
static __global__ void k_shared_nobarrier(float *out)
{
    __shared__ float v[64];
    v[threadIdx.x] = (float)threadIdx.x;
    out[threadIdx.x] = v[(threadIdx.x + 1) & 63];
}

/* The same with __syncthreads, and a warp's lanes ordered by __syncwarp: no race. */
static __global__ void k_shared_ok(float *out)
{
    __shared__ float v[64];
    v[threadIdx.x] = (float)threadIdx.x;
    __syncthreads();
    float a = v[(threadIdx.x + 1) & 63];
    __syncthreads();
    v[threadIdx.x] = a;
    __syncwarp();
    out[threadIdx.x] = v[threadIdx.x ^ 1];
}

/* A float read 2 bytes into a byte buffer: x86 reads it, a GPU faults (716). */
static __global__ void k_misaligned(const char *p, float *y)
{
    const float *f = (const float *)(const void *)(p + 2);
    y[threadIdx.x] = f[threadIdx.x];
}

static __global__ void k_shared_past(int n)
{
    extern __shared__ float buf[];
    buf[threadIdx.x + n] = 1.0f;
}

/* ---- helpers -----------------------------------------------------------------------------------
 */

/* Runs fn in a child with stderr in a file: 1 when the child aborted and its
 * stderr holds every one of the needles (n3 may be NULL). */
static int s_dies3(void (*fn)(void), const char *n1, const char *n2, const char *n3)
{
    char path[256];
    snprintf(path, sizeof path, "%s", sw_test_log("child_stderr.txt"));
    fflush(stdout);
    fflush(stderr);
    const pid_t pid = fork();
    if (pid == 0) {
        FILE *f = freopen(path, "w", stderr);
        (void)f;
        fn();
        fflush(stderr);
        _exit(0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    char *err = sw_test_read_file(path, NULL);
    const int ok = WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT && err && strstr(err, n1) &&
                   (!n2 || strstr(err, n2)) && (!n3 || strstr(err, n3));
    if (!ok)
        fprintf(stderr,
                "expected an abort with \"%s\", \"%s\" and \"%s\"; got status 0x%x and:\n%s\n", n1,
                n2 ? n2 : "", n3 ? n3 : "", st, err ? err : "(nothing)");
    else
        printf("caught: %s", strstr(err, "swemu:") ? strstr(err, "swemu:") : err);
    free(err);
    return ok;
}

static int s_dies(void (*fn)(void), const char *n1, const char *n2)
{
    return s_dies3(fn, n1, n2, NULL);
}

static float *s_dev_floats(const float *host, int n)
{
    float *d = NULL;
    if (cudaMalloc(&d, (size_t)n * sizeof *d) != cudaSuccess)
        return NULL;
    if (host && cudaMemcpy(d, host, (size_t)n * sizeof *d, cudaMemcpyHostToDevice) != cudaSuccess)
        return NULL;
    return d;
}

static void s_case_read_past(void)
{
    float h[64] = {0};
    float *x = s_dev_floats(h, 64), *y = s_dev_floats(NULL, 64);
    k_read_past<<<1, 64>>>(x, y, 64);
    cudaDeviceSynchronize();
}

static void s_case_write_before(void)
{
    float *y = s_dev_floats(NULL, 48);
    k_write_before<<<1, 48>>>(y);
    cudaDeviceSynchronize();
}

/* One byte read or written at g_at of a 100-float allocation: it fills no
 * page, so its start is inside its first page, after the red zone. */
static int g_at;

static void s_case_peek(void)
{
    float *x = s_dev_floats(NULL, 100), *y = s_dev_floats(NULL, 1);
    k_peek<<<1, 32>>>((const unsigned char *)x, y, g_at);
    cudaDeviceSynchronize();
}

static void s_case_poke(void)
{
    float *x = s_dev_floats(NULL, 100);
    k_poke<<<1, 32>>>((unsigned char *)x, g_at);
    cudaDeviceSynchronize();
}

static void s_case_atomic(void)
{
    float *x = s_dev_floats(NULL, 100);
    k_atomic_at<<<1, 32>>>((int *)x, g_at);
    cudaDeviceSynchronize();
}

/* Both ends of a 400-byte allocation, to the byte: the first and the last byte
 * read and written in place, the byte before and the byte after each reported
 * (a child each) with the kernel, the access, the allocation and the offset. */
static void s_bounds_checks(void)
{
    float h[100], *x = s_dev_floats(NULL, 100), *y = s_dev_floats(NULL, 1), got = 0;
    for (int i = 0; i < 100; i++)
        h[i] = 0.0f;
    h[99] = 1.0f / 256; // last byte 0x3b, first 0x00
    S_OK(cudaMemcpy(x, h, sizeof h, cudaMemcpyHostToDevice));
    k_poke<<<1, 32>>>((unsigned char *)x, 0);
    k_peek<<<1, 32>>>((const unsigned char *)x, y, 0);
    S_OK(cudaMemcpy(&got, y, sizeof got, cudaMemcpyDeviceToHost));
    SW_CHECK(got == 1.0f);
    k_peek<<<1, 32>>>((const unsigned char *)x, y, 399);
    S_OK(cudaMemcpy(&got, y, sizeof got, cudaMemcpyDeviceToHost));
    SW_CHECK(got == (float)0x3b);
    k_poke<<<1, 32>>>((unsigned char *)x, 399);
    k_peek<<<1, 32>>>((const unsigned char *)x, y, 399);
    S_OK(cudaMemcpy(&got, y, sizeof got, cudaMemcpyDeviceToHost));
    SW_CHECK(got == 1.0f);
    cudaFree(x);
    cudaFree(y);
    static const char *const before = "1 byte before the start of a 400-byte allocation of cuda:0, "
                                      "argument 0 (";
    static const char *const past = "0 bytes past the end of a 400-byte allocation of cuda:0, "
                                    "argument 0\n";
    g_at = -1;
    SW_CHECK(s_dies3(s_case_peek, "kernel k_peek", "thread (0,0,0): out of bounds: a 1-byte read",
                     before));
    SW_CHECK(s_dies3(s_case_poke, "kernel k_poke", "thread (0,0,0): out of bounds: a 1-byte write",
                     before));
    SW_CHECK(s_dies(s_case_atomic, "kernel k_atomic_at",
                    "a 4-byte atomic read-modify-write 4 bytes before the start of a 400-byte"));
    g_at = 400;
    SW_CHECK(s_dies3(s_case_peek, "kernel k_peek", "thread (0,0,0): read of 0x", past));
    SW_CHECK(s_dies3(s_case_poke, "kernel k_poke", "thread (0,0,0): write to 0x", past));
}

/* A read before an allocation that fills its pages: the guard page before it. */
static void s_case_read_before(void)
{
    float *x = s_dev_floats(NULL, 1024), *y = s_dev_floats(NULL, 1024); // 4096 bytes each
    k_read_before<<<1, 32>>>(x, y);
    cudaDeviceSynchronize();
}

static void s_case_no_sync(void)
{
    float h[256];
    for (int i = 0; i < 256; i++)
        h[i] = (float)(i % 7) + 0.25f;
    float *x = s_dev_floats(h, 256), *o = s_dev_floats(NULL, 1);
    k_sum<<<1, 256>>>(x, o, 1);
    cudaDeviceSynchronize();
}

/* The same without the shared-memory race check: the order check sees it. */
static void s_case_no_sync_order(void)
{
    setenv("SW_CUDA_EMU_RACECHECK", "0", 1);
    s_case_no_sync();
}

static void s_case_other_device(void)
{
    cudaSetDevice(1);
    float *far = s_dev_floats(NULL, 64);
    cudaSetDevice(0);
    float *near = s_dev_floats(NULL, 64);
    k_copy<<<1, 64>>>(far, near, 64);
    cudaDeviceSynchronize();
}

static void s_case_lane_exits(void)
{
    float *y = s_dev_floats(NULL, 32);
    k_lane_exits<<<1, 32>>>(y);
    cudaDeviceSynchronize();
}

static void s_case_shared_past(void)
{
    k_shared_past<<<1, 32, 32 * sizeof(float)>>>(1);
    cudaDeviceSynchronize();
}

static void s_case_shared_rmw(void)
{
    int *o = NULL;
    cudaMalloc(&o, sizeof(int));
    k_shared_rmw<<<1, 256>>>(o);
    cudaDeviceSynchronize();
}

static void s_case_shared_nobarrier(void)
{
    float *o = s_dev_floats(NULL, 64);
    k_shared_nobarrier<<<1, 64>>>(o);
    cudaDeviceSynchronize();
}

static void s_case_misaligned(void)
{
    char *p = NULL;
    float *y = s_dev_floats(NULL, 8);
    cudaMalloc(&p, 64);
    cudaMemset(p, 0, 64);
    k_misaligned<<<1, 8>>>(p, y);
    cudaDeviceSynchronize();
}

/* A fatal error (700) stays, as on a GPU: every later call on the device
 * returns it, cudaGetLastError included, and its queued work never runs;
 * the other device still works. Exits 0 when all of that holds (a child:
 * the device stays failed). */
static void s_case_sticky(void)
{
    float h[32], got[32];
    for (int i = 0; i < 32; i++)
        h[i] = (float)i;
    cudaSetDevice(1);
    float *x1 = s_dev_floats(h, 32);
    cudaSetDevice(0);
    float *x = s_dev_floats(h, 32);
    int bad = x && x1 ? 0 : 1;
    k_scale<<<1, 32>>>(x, 32, 2.0f); // queued, never run: the device fails before
    swemu_fail("cudaStreamSynchronize", 0, 700);
    bad |= (cudaStreamSynchronize(0) != 700) << 1;
    bad |= (cudaGetLastError() != 700 || cudaGetLastError() != 700) << 2; // never cleared
    bad |= (cudaMemcpy(got, x, sizeof got, cudaMemcpyDeviceToHost) != 700) << 3;
    float *y = NULL;
    bad |= (cudaMalloc(&y, 64) != 700) << 4;
    k_scale<<<1, 32>>>(x, 32, 2.0f);
    bad |= (cudaGetLastError() != 700) << 5;
    cudaSetDevice(1); // the other device is not touched: the thread's last error clears there
    cudaGetLastError();
    bad |= (cudaGetLastError() != cudaSuccess) << 6;
    bad |=
        (cudaMemcpy(got, x1, sizeof got, cudaMemcpyDeviceToHost) != cudaSuccess || got[5] != 5.0f)
        << 7;
    if (bad)
        fprintf(stderr, "s_case_sticky: checks 0x%x failed\n", bad);
    fflush(stdout);
    fflush(stderr);
    _exit(bad ? 3 : 0);
}

/* Runs fn in a child: 1 when it exits 0. */
static int s_child_ok(void (*fn)(void))
{
    fflush(stdout);
    fflush(stderr);
    const pid_t pid = fork();
    if (pid == 0) {
        fn();
        _exit(0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

int main(void)
{
    setenv("SW_CUDA_EMU_DEVICES", "2", 1); // before the runtime starts
    int n_dev = 0;
    S_OK(cudaGetDeviceCount(&n_dev));
    SW_CHECK_INT(n_dev, 2);

    /* A reduction over 4 blocks. */
    {
        float h[1024], want[4] = {0}, got[4];
        for (int i = 0; i < 1024; i++) {
            h[i] = (float)((i * 37) % 101) * 0.5f;
            want[i / 256] += h[i]; // exact: small multiples of 0.5
        }
        float *x = s_dev_floats(h, 1024), *o = s_dev_floats(NULL, 4);
        k_sum<<<4, 256>>>(x, o, 0);
        S_OK(cudaGetLastError());
        S_OK(cudaMemcpy(got, o, sizeof got, cudaMemcpyDeviceToHost));
        for (int b = 0; b < 4; b++)
            SW_CHECK(got[b] == want[b]);
        cudaFree(x);
        cudaFree(o);
    }
    /* Warp operations and an atomic. */
    {
        int h[64], *x, *sum, *bcast, *count;
        unsigned *ballot;
        for (int i = 0; i < 64; i++)
            h[i] = i * 3 + (i % 5);
        S_OK(cudaMalloc(&x, sizeof h));
        S_OK(cudaMalloc(&sum, 2 * sizeof(int)));
        S_OK(cudaMalloc(&ballot, 2 * sizeof(unsigned)));
        S_OK(cudaMalloc(&bcast, 64 * sizeof(int)));
        S_OK(cudaMalloc(&count, sizeof(int)));
        S_OK(cudaMemcpy(x, h, sizeof h, cudaMemcpyHostToDevice));
        S_OK(cudaMemset(count, 0, sizeof(int)));
        k_warp<<<1, 64>>>(x, sum, ballot, bcast, count);
        int gs[2], gb[64], gc;
        unsigned gbal[2];
        S_OK(cudaMemcpy(gs, sum, sizeof gs, cudaMemcpyDeviceToHost));
        S_OK(cudaMemcpy(gbal, ballot, sizeof gbal, cudaMemcpyDeviceToHost));
        S_OK(cudaMemcpy(gb, bcast, sizeof gb, cudaMemcpyDeviceToHost));
        S_OK(cudaMemcpy(&gc, count, sizeof gc, cudaMemcpyDeviceToHost));
        for (int w = 0; w < 2; w++) {
            int s = 0;
            unsigned b = 0;
            for (int l = 0; l < 32; l++) {
                s += h[32 * w + l];
                b |= (unsigned)(h[32 * w + l] & 1) << l;
            }
            SW_CHECK_INT(gs[w], s);
            SW_CHECK(gbal[w] == b);
        }
        for (int i = 0; i < 64; i++)
            SW_CHECK_INT(gb[i], h[(i & ~31) + 5]);
        SW_CHECK_INT(gc, 64);
        cudaFree(x);
        cudaFree(sum);
        cudaFree(ballot);
        cudaFree(bcast);
        cudaFree(count);
    }
    /* Dynamic shared memory; uninitialised shared memory. */
    {
        float h[48], got[48];
        for (int i = 0; i < 48; i++)
            h[i] = (float)i;
        float *x = s_dev_floats(h, 48), *y = s_dev_floats(NULL, 48);
        k_reverse<<<1, 48, 48 * sizeof(float)>>>(x, y, 48);
        S_OK(cudaMemcpy(got, y, sizeof got, cudaMemcpyDeviceToHost));
        for (int i = 0; i < 48; i++)
            SW_CHECK(got[i] == h[47 - i]);
        unsigned *u, gu = 0;
        S_OK(cudaMalloc(&u, sizeof *u));
        k_uninit<<<1, 32>>>(u);
        S_OK(cudaMemcpy(&gu, u, sizeof gu, cudaMemcpyDeviceToHost));
        SW_CHECK(gu == 0xffffffffu);
        cudaFree(x);
        cudaFree(y);
        cudaFree(u);
    }
    /* The order check runs on the first SW_CUDA_EMU_CHECK (default 2) launches of
     * each distinct launch: another non-pointer argument, grid, or pointer
     * arguments sharing an allocation make a launch distinct; "all" checks every
     * launch and 0 none. */
    {
        float *x = s_dev_floats(NULL, 128), *y = s_dev_floats(NULL, 128);
        const uint64_t c0 = swemu_count("order_check");
        for (int i = 0; i < 5; i++)
            k_copy<<<1, 64>>>(x, y, 64);
        S_OK(cudaDeviceSynchronize());
        SW_CHECK_INT((int)(swemu_count("order_check") - c0), 2);
        k_copy<<<1, 64>>>(x, y, 63);      // another n
        k_copy<<<2, 64>>>(x, y, 64);      // another grid
        k_copy<<<1, 64>>>(y, y + 64, 64); // x and y in one allocation
        k_copy<<<1, 64>>>(x, y + 64, 64); // the same as the first: pointers are not the key
        k_copy<<<1, 64>>>(x, y + 64, 64);
        S_OK(cudaDeviceSynchronize());
        SW_CHECK_INT((int)(swemu_count("order_check") - c0), 5);
        setenv("SW_CUDA_EMU_CHECK", "all", 1);
        k_copy<<<1, 64>>>(x, y, 64);
        k_copy<<<1, 64>>>(x, y, 64);
        S_OK(cudaDeviceSynchronize());
        SW_CHECK_INT((int)(swemu_count("order_check") - c0), 7);
        setenv("SW_CUDA_EMU_CHECK", "0", 1);
        k_copy<<<1, 64>>>(x, y, 32);
        S_OK(cudaDeviceSynchronize());
        SW_CHECK_INT((int)(swemu_count("order_check") - c0), 7);
        unsetenv("SW_CUDA_EMU_CHECK");
        cudaFree(x);
        cudaFree(y);
    }
    /* Returned errors. */
    {
        cudaStream_t s1;
        S_OK(cudaSetDevice(1));
        S_OK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
        S_OK(cudaSetDevice(0));
        float *x = s_dev_floats(NULL, 32);
        k_scale<<<1, 32, 0, s1>>>(x, 32, 2.0f); // cuda:1's stream while cuda:0 is current
        SW_CHECK_INT((int)cudaGetLastError(), (int)cudaErrorInvalidResourceHandle);
        SW_CHECK_INT((int)cudaGetLastError(), 0); // cleared
        k_scale<<<1, 2048>>>(x, 32, 2.0f);        // too many threads
        SW_CHECK_INT((int)cudaGetLastError(), (int)cudaErrorInvalidConfiguration);
        /* A failed call stays the last error until read. */
        SW_CHECK_INT((int)cudaSetDevice(7), (int)cudaErrorInvalidDevice);
        SW_CHECK_INT((int)cudaPeekAtLastError(), (int)cudaErrorInvalidDevice);
        SW_CHECK_INT((int)cudaGetLastError(), (int)cudaErrorInvalidDevice);
        SW_CHECK_INT((int)cudaGetLastError(), 0);
        /* An injected failure, once. */
        swemu_fail("cudaMemcpy", 1, cudaErrorMemoryAllocation);
        float h[32] = {0};
        S_OK(cudaMemcpy(x, h, sizeof h, cudaMemcpyHostToDevice));
        SW_CHECK_INT((int)cudaMemcpy(x, h, sizeof h, cudaMemcpyHostToDevice),
                     (int)cudaErrorMemoryAllocation);
        S_OK(cudaMemcpy(x, h, sizeof h, cudaMemcpyHostToDevice));
        cudaGetLastError();
        /* A synchronisation inside a capture invalidates it. */
        cudaStream_t s;
        cudaGraph_t g = NULL;
        S_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        S_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
        k_scale<<<1, 32, 0, s>>>(x, 32, 2.0f);
        SW_CHECK_INT((int)cudaStreamSynchronize(s), (int)cudaErrorStreamCaptureUnsupported);
        SW_CHECK_INT((int)cudaStreamEndCapture(s, &g), (int)cudaErrorStreamCaptureInvalidated);
        SW_CHECK(g == NULL);
        cudaGetLastError();
        /* A graph replays its kernels with the captured arguments on new data. */
        S_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
        k_scale<<<1, 32, 0, s>>>(x, 32, 3.0f);
        S_OK(cudaStreamEndCapture(s, &g));
        cudaGraphExec_t ge;
        S_OK(cudaGraphInstantiate(&ge, g, 0));
        for (int i = 0; i < 32; i++)
            h[i] = (float)i;
        S_OK(cudaMemcpy(x, h, sizeof h, cudaMemcpyHostToDevice));
        S_OK(cudaGraphLaunch(ge, s));
        S_OK(cudaGraphLaunch(ge, s));
        float got[32];
        S_OK(cudaMemcpyAsync(got, x, sizeof got, cudaMemcpyDeviceToHost, s)); // pageable: waits
        for (int i = 0; i < 32; i++)
            SW_CHECK(got[i] == 9.0f * (float)i);
        cudaGraphExecDestroy(ge);
        cudaGraphDestroy(g);
        cudaStreamDestroy(s);
        cudaStreamDestroy(s1);
        cudaFree(x);
    }
    /* Lazy streams: without the wait the consumer reads stale data. */
    {
        float h[32], got[32];
        for (int i = 0; i < 32; i++)
            h[i] = 1.0f;
        float *a = s_dev_floats(h, 32), *b = s_dev_floats(NULL, 32);
        cudaStream_t prod, cons;
        cudaEvent_t e;
        S_OK(cudaStreamCreateWithFlags(&prod, cudaStreamNonBlocking));
        S_OK(cudaStreamCreateWithFlags(&cons, cudaStreamNonBlocking));
        S_OK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
        for (int wait = 0; wait < 2; wait++) {
            S_OK(cudaMemcpy(a, h, sizeof h, cudaMemcpyHostToDevice));
            k_scale<<<1, 32, 0, prod>>>(a, 32, 5.0f);
            S_OK(cudaEventRecord(e, prod));
            if (wait)
                S_OK(cudaStreamWaitEvent(cons, e, 0));
            k_copy<<<1, 32, 0, cons>>>(a, b, 32);
            S_OK(cudaStreamSynchronize(cons));
            S_OK(cudaMemcpy(got, b, sizeof got, cudaMemcpyDeviceToHost));
            SW_CHECK(got[0] == (wait ? 5.0f : 1.0f));
            S_OK(cudaStreamSynchronize(prod));
        }
        cudaEventDestroy(e);
        cudaStreamDestroy(prod);
        cudaStreamDestroy(cons);
        cudaFree(a);
        cudaFree(b);
    }
    /* The stand-ins, opened as libs.cu opens them. */
    {
        void *hb = dlopen(swemu_lib("cublas"), RTLD_NOW | RTLD_LOCAL);
        void *hn = dlopen(swemu_lib("nccl"), RTLD_NOW | RTLD_LOCAL);
        SW_CHECK(hb && hn);
        SW_CHECK(swemu_count("dlopen_cublas") == 1 && swemu_count("dlopen_nccl") == 1);
        typedef cublasStatus_t (*create_t)(cublasHandle_t *);
        typedef cublasStatus_t (*gemm_t)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int,
                                         int, int, const void *, const void *, cudaDataType, int,
                                         const void *, cudaDataType, int, const void *, void *,
                                         cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
        create_t create = hb ? (create_t)dlsym(hb, "cublasCreate_v2") : NULL;
        gemm_t gemm = hb ? (gemm_t)dlsym(hb, "cublasGemmEx") : NULL;
        SW_CHECK(create && gemm);
        enum { M = 5, N = 3, K = 37 };
        sw_f16 ha[M * K], hbm[K * N];
        float want[M * N], got[M * N];
        for (int i = 0; i < M * K; i++)
            ha[i] = sw_f2h((float)(i % 9) - 4.0f);
        for (int i = 0; i < K * N; i++)
            hbm[i] = sw_f2h((float)(i % 5) * 0.5f);
        for (int j = 0; j < N; j++)
            for (int i = 0; i < M; i++) {
                float s = 0; // small integers and halves: exact in any order
                for (int p = 0; p < K; p++)
                    s += sw_h2f(ha[i * K + p]) * sw_h2f(hbm[j * K + p]);
                want[j * M + i] = s;
            }
        sw_f16 *da, *db;
        float *dc;
        S_OK(cudaMalloc(&da, sizeof ha));
        S_OK(cudaMalloc(&db, sizeof hbm));
        S_OK(cudaMalloc(&dc, sizeof got));
        S_OK(cudaMemcpy(da, ha, sizeof ha, cudaMemcpyHostToDevice));
        S_OK(cudaMemcpy(db, hbm, sizeof hbm, cudaMemcpyHostToDevice));
        cublasHandle_t cb = NULL;
        const float one = 1, zero = 0;
        if (create && gemm && create(&cb) == CUBLAS_STATUS_SUCCESS) {
            SW_CHECK_INT(gemm(cb, CUBLAS_OP_T, CUBLAS_OP_N, M, N, K, &one, da, CUDA_R_16F, K, db,
                              CUDA_R_16F, K, &zero, dc, CUDA_R_32F, M, CUBLAS_COMPUTE_32F,
                              CUBLAS_GEMM_DEFAULT),
                         0);
            S_OK(cudaMemcpy(got, dc, sizeof got, cudaMemcpyDeviceToHost));
            SW_CHECK(!memcmp(got, want, sizeof got));
            /* An operand beyond its allocation is refused. */
            SW_CHECK(gemm(cb, CUBLAS_OP_T, CUBLAS_OP_N, M + 1, N, K, &one, da, CUDA_R_16F, K, db,
                          CUDA_R_16F, K, &zero, dc, CUDA_R_32F, M + 1, CUBLAS_COMPUTE_32F,
                          CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS);
        } else {
            SW_CHECK(!"cublasCreate");
        }
        /* NCCL: cuda:0 sends 64 floats to cuda:1. */
        typedef ncclResult_t (*init_t)(ncclComm_t *, int, const int *);
        typedef ncclResult_t (*grp_t)(void);
        typedef ncclResult_t (*send_t)(const void *, size_t, ncclDataType_t, int, ncclComm_t,
                                       cudaStream_t);
        typedef ncclResult_t (*recv_t)(void *, size_t, ncclDataType_t, int, ncclComm_t,
                                       cudaStream_t);
        init_t init = hn ? (init_t)dlsym(hn, "ncclCommInitAll") : NULL;
        grp_t gs = hn ? (grp_t)dlsym(hn, "ncclGroupStart") : NULL;
        grp_t ge = hn ? (grp_t)dlsym(hn, "ncclGroupEnd") : NULL;
        send_t send = hn ? (send_t)dlsym(hn, "ncclSend") : NULL;
        recv_t recv = hn ? (recv_t)dlsym(hn, "ncclRecv") : NULL;
        SW_CHECK(init && gs && ge && send && recv);
        if (init && gs && ge && send && recv) {
            ncclComm_t comm[2];
            const int devs[2] = {0, 1};
            SW_CHECK_INT(init(comm, 2, devs), 0);
            float h[64], out[64];
            for (int i = 0; i < 64; i++)
                h[i] = (float)i * 1.5f;
            cudaStream_t s0, s1;
            S_OK(cudaSetDevice(0));
            float *src = s_dev_floats(h, 64);
            S_OK(cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking));
            S_OK(cudaSetDevice(1));
            float *dst = s_dev_floats(NULL, 64);
            S_OK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
            SW_CHECK_INT(gs(), 0);
            SW_CHECK_INT(send(src, 64 * 4, ncclUint8, 1, comm[0], s0), 0);
            SW_CHECK_INT(recv(dst, 64 * 4, ncclUint8, 0, comm[1], s1), 0);
            SW_CHECK_INT(ge(), 0);
            S_OK(cudaStreamSynchronize(s1));
            S_OK(cudaMemcpy(out, dst, sizeof out, cudaMemcpyDeviceToHost));
            SW_CHECK(!memcmp(out, h, sizeof h));
            /* A send alone in its group would hang a real NCCL: refused. */
            SW_CHECK(send(src, 4, ncclUint8, 1, comm[0], s0) != 0);
            S_OK(cudaSetDevice(0));
        }
    }
    /* Shared memory written and read across a barrier and a __syncwarp: no race. */
    {
        float *o = s_dev_floats(NULL, 64), got[64];
        k_shared_ok<<<1, 64>>>(o);
        S_OK(cudaMemcpy(got, o, sizeof got, cudaMemcpyDeviceToHost));
        int ok = 1;
        for (int i = 0; i < 64; i++)
            ok &= got[i] == (float)(((i ^ 1) + 1) & 63);
        SW_CHECK(ok);
        cudaFree(o);
    }
    /* Schedules: with the producer's stream eager and the consumer's late
     * (late=waiters), a consumer that reads, then a producer that
     * overwrites without waiting for it, shows the overwrite; with the wait
     * it does not. */
    {
        SW_CHECK_INT(swemu_streams("no such schedule"), -1);
        SW_CHECK_INT(swemu_streams("late=waiters"), 0);
        float h[32], got[32];
        for (int i = 0; i < 32; i++)
            h[i] = 1.0f;
        float *a = s_dev_floats(h, 32), *b = s_dev_floats(NULL, 32);
        cudaStream_t prod, cons;
        cudaEvent_t e, free_e;
        S_OK(cudaStreamCreateWithFlags(&prod, cudaStreamNonBlocking));
        S_OK(cudaStreamCreateWithFlags(&cons, cudaStreamNonBlocking));
        S_OK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
        S_OK(cudaEventCreateWithFlags(&free_e, cudaEventDisableTiming));
        for (int wait = 0; wait < 2; wait++) {
            S_OK(cudaMemcpy(a, h, sizeof h, cudaMemcpyHostToDevice));
            S_OK(cudaEventRecord(e, prod));
            S_OK(cudaStreamWaitEvent(cons, e, 0)); // cons waits: it is late from now on
            k_copy<<<1, 32, 0, cons>>>(a, b, 32);  // reads a (1.0)
            if (wait) {                            // the producer waits for the read
                S_OK(cudaEventRecord(free_e, cons));
                S_OK(cudaStreamWaitEvent(prod, free_e, 0));
            }
            k_scale<<<1, 32, 0, prod>>>(a, 32, 5.0f); // overwrites a
            S_OK(cudaStreamSynchronize(cons));
            S_OK(cudaStreamSynchronize(prod));
            S_OK(cudaMemcpy(got, b, sizeof got, cudaMemcpyDeviceToHost));
            SW_CHECK(got[0] == (wait ? 1.0f : 5.0f));
        }
        SW_CHECK_INT(swemu_streams("lazy"), 0);
        cudaEventDestroy(e);
        cudaEventDestroy(free_e);
        cudaStreamDestroy(prod);
        cudaStreamDestroy(cons);
        cudaFree(a);
        cudaFree(b);
    }
    /* A fatal error stays (a child: it leaves the device failed). */
    SW_CHECK(s_child_ok(s_case_sticky));
    /* Errors found in kernels, each in a child process. */
    SW_CHECK(s_dies(s_case_read_past, "kernel k_read_past", "0 bytes past the end of a 256-byte"));
    SW_CHECK(s_dies(s_case_write_before, "kernel k_write_before",
                    "a 4-byte write 4 bytes before the start of a 192-byte"));
    SW_CHECK(s_dies(s_case_read_before, "kernel k_read_before",
                    "4 bytes before the start of a 4096-byte"));
    s_bounds_checks();
    SW_CHECK(s_dies(s_case_no_sync, "kernel k_sum", "a race in shared memory"));
    SW_CHECK(s_dies(s_case_no_sync_order, "kernel k_sum", "depends on the order"));
    SW_CHECK(s_dies(s_case_other_device, "kernel k_copy", "cuda:1"));
    SW_CHECK(s_dies(s_case_lane_exits, "kernel k_lane_exits", "has exited"));
    SW_CHECK(s_dies(s_case_shared_past, "kernel k_shared_past", "dynamic shared memory"));
    SW_CHECK(s_dies(s_case_shared_rmw, "kernel k_shared_rmw", "a race in shared memory"));
    SW_CHECK(
        s_dies(s_case_shared_nobarrier, "kernel k_shared_nobarrier", "a race in shared memory"));
    SW_CHECK(
        s_dies(s_case_misaligned, "kernel k_misaligned", "a misaligned load of 'const float'"));
    return sw_test_done();
}
