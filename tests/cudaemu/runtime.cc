/*
 * runtime.cc - the emulated CUDA runtime API (cuda_runtime.h): devices,
 * memory, streams, events, graphs and errors, on the CPU. The rules it holds
 * the code to are the ones NVIDIA documents, so that what passes here is
 * what a GPU accepts:
 *
 *  - the current device is per host thread; a kernel launched into a
 *    stream of another device fails with cudaErrorInvalidResourceHandle,
 *    an event recorded on another device's stream likewise, while copies and
 *    waits across devices work (CUDA programming guide, "Stream and Event
 *    Behavior");
 *  - every failing call sets the thread's last error, which the next
 *    cudaGetLastError returns (and clears);
 *  - device memory is bounds-checked (see Alloc in emu_impl.h), uninitialised
 *    memory reads as 0xff bytes (NaN in f16 and f32), a device has
 *    SW_CUDA_EMU_MEM_MIB of it, and a kernel can touch another device's
 *    memory only after cudaDeviceEnablePeerAccess;
 *  - work is queued and runs only when the host waits for it (emu_impl.h);
 *    a copy from pageable host memory takes the source at the call, a copy
 *    to pageable memory returns when done, one to pinned memory does not;
 *  - during a stream capture (thread-local or global mode) the calls that
 *    would synchronise or allocate fail with cudaErrorStreamCaptureUnsupported
 *    and invalidate the capture, as does a copy from pageable memory (a graph
 *    would read it at replay time); a captured graph replays its kernels with
 *    the arguments of the capture.
 */
#include "emu_impl.h"

#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <map>
#include <set>
#include <string>

namespace swemu
{

static const size_t S_PAGE = 4096;
static const int S_REDZONE = 0xff;                    // NaN in f32 and f16 (exec.cc checks for it)
static const size_t S_QUARANTINE = (size_t)256 << 20; // freed device memory kept inaccessible

struct Graph {
    std::vector<Op> nodes;
    int dev = 0;
};

struct Device {
    size_t used = 0;                  // bytes allocated
    cudaError_t sticky = cudaSuccess; // a fatal error: every later call on it returns it
    unsigned peers = 0; // devices whose memory kernels here may touch (enabled peer access)
    Stream *legacy = nullptr;
};

struct Config {
    int n_dev = 1;
    size_t mem = (size_t)4096 << 20;
    bool peer = false;
    std::string lib_dir; // where the stand-ins are
    bool no_cublas = false, no_nccl = false;
};

static Config g_cfg;
static std::vector<Device> g_dev;
static std::map<uintptr_t, Alloc *> g_maps;   // by mapping start
static std::map<uintptr_t, Alloc *> g_pinned; // by base
static std::deque<Alloc *> g_freed;
static size_t g_freed_bytes;
static std::set<Stream *> g_streams;
static std::set<swemu_event *> g_events;
static unsigned g_prot; // devices whose memory is accessible now
static std::map<std::string, uint64_t> g_counts;
struct Inject {
    int skip;
    cudaError_t err;
};
static std::map<std::string, Inject> g_inject;

static thread_local int t_dev = 0;
static thread_local cudaError_t t_last = cudaSuccess;
static thread_local int t_capturing = 0; // captures begun by this thread (global/thread-local mode)

std::recursive_mutex &lock()
{
    static std::recursive_mutex mu;
    return mu;
}

void fatal(const char *fmt, ...)
{
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fprintf(stderr, "swemu: %s\n", buf);
    fflush(stderr);
    abort();
}

static int s_env_int(const char *name, int dflt)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return dflt;
    char *end;
    long x = strtol(v, &end, 10);
    if (*end || x < 0 || x > 1 << 20)
        fatal("%s=%s is not a number", name, v);
    return (int)x;
}

static void s_init(void)
{
    static bool done = false;
    if (done)
        return;
    done = true;
    g_cfg.n_dev = s_env_int("SW_CUDA_EMU_DEVICES", 1);
    if (g_cfg.n_dev > 8)
        fatal("SW_CUDA_EMU_DEVICES=%d: at most 8", g_cfg.n_dev);
    g_cfg.mem = (size_t)s_env_int("SW_CUDA_EMU_MEM_MIB", 4096) << 20;
    g_cfg.peer = s_env_int("SW_CUDA_EMU_PEER", 0) != 0;
    if (const char *f = getenv("SW_CUDA_EMU_FAIL")) { // API:SKIP:ERROR, as swemu_fail()
        char api[64];
        int skip = 0, err = 0;
        if (sscanf(f, "%63[^:]:%d:%d", api, &skip, &err) != 3 || skip < 0 || err <= 0)
            fatal("SW_CUDA_EMU_FAIL=%s: API:SKIP:ERROR (e.g. cudaStreamSynchronize:20:700)", f);
        g_inject[api] = Inject{skip, (cudaError_t)err};
    }
    if (!sched_set(getenv("SW_CUDA_EMU_STREAMS")))
        fatal("SW_CUDA_EMU_STREAMS=%s: lazy, eager, late=DEVICE, late=waiters or random=SEED",
              getenv("SW_CUDA_EMU_STREAMS"));
    const char *libs = getenv("SW_CUDA_EMU_LIBS");
    if (libs && *libs) {
        g_cfg.no_cublas = !strstr(libs, "cublas");
        g_cfg.no_nccl = !strstr(libs, "nccl");
    }
    Dl_info info;
    if (dladdr((void *)&s_init, &info) && info.dli_fname) {
        g_cfg.lib_dir = info.dli_fname;
        size_t slash = g_cfg.lib_dir.rfind('/');
        g_cfg.lib_dir = slash == std::string::npos ? "." : g_cfg.lib_dir.substr(0, slash);
    }
    g_dev.resize((size_t)g_cfg.n_dev);
    for (int d = 0; d < g_cfg.n_dev; d++) {
        Stream *s = new Stream();
        s->dev = d;
        s->flags = 0;
        g_dev[(size_t)d].legacy = s;
        g_streams.insert(s);
    }
    g_prot = (1u << g_cfg.n_dev) - 1;
}

/* Takes the lock and starts the runtime once. */
struct Guard {
    std::lock_guard<std::recursive_mutex> g;
    Guard() : g(lock())
    {
        s_init();
    }
};

int current_device()
{
    return t_dev;
}

int device_count()
{
    Guard g;
    return g_cfg.n_dev;
}

void count(const char *what)
{
    g_counts[what]++;
}

cudaError_t ret(cudaError_t e)
{
    if (e != cudaSuccess)
        t_last = e;
    return e;
}

bool is_sticky(cudaError_t e)
{
    return e == 700 || e == 702 || e == 710 || (e >= 714 && e <= 719);
}

cudaError_t sticky_of(int dev)
{
    return dev >= 0 && dev < (int)g_dev.size() ? g_dev[(size_t)dev].sticky : cudaSuccess;
}

/* A fatal error on dev: its context is lost, its queued work never runs. */
static void s_poison(int dev, cudaError_t e)
{
    if (dev < 0 || dev >= (int)g_dev.size() || g_dev[(size_t)dev].sticky)
        return;
    g_dev[(size_t)dev].sticky = e;
    for (Stream *s : g_streams)
        if (s->dev == dev) {
            s->done += s->q.size();
            s->q.clear();
        }
    fprintf(stderr, "swemu: cuda:%d: error %d is fatal: every later call on this device fails\n",
            dev, (int)e);
}

cudaError_t injected(const char *api)
{
    /* selecting and counting devices always work: the error shows at the device's next call */
    const bool any = !strcmp(api, "cudaSetDevice") || !strcmp(api, "cudaGetDeviceCount");
    if (cudaError_t e = any ? cudaSuccess : sticky_of(t_dev))
        return e;
    auto it = g_inject.find(api);
    if (it == g_inject.end())
        return cudaSuccess;
    if (it->second.skip-- > 0)
        return cudaSuccess;
    cudaError_t e = it->second.err;
    g_inject.erase(it);
    if (is_sticky(e))
        s_poison(t_dev, e);
    return e;
}

static double s_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* ---- memory -------------------------------------------------------------------------- */

Alloc *find_mapping(const void *a)
{
    const uintptr_t x = (uintptr_t)a;
    auto it = g_maps.upper_bound(x);
    if (it == g_maps.begin())
        return nullptr;
    --it;
    Alloc *al = it->second;
    return x < (uintptr_t)al->map + al->map_bytes ? al : nullptr;
}

Alloc *find(const void *p, size_t n)
{
    const uintptr_t x = (uintptr_t)p;
    Alloc *a = find_mapping(p);
    if (!a) {
        auto it = g_pinned.upper_bound(x);
        if (it == g_pinned.begin())
            return nullptr;
        a = (--it)->second;
    }
    if (a->freed || x < (uintptr_t)a->base || x > (uintptr_t)a->base + a->bytes ||
        n > (uintptr_t)a->base + a->bytes - x)
        return nullptr;
    return a;
}

static bool s_accessible(const Alloc *a)
{
    return a->dev < 0 || ((g_prot >> a->dev) & 1u);
}

Access::Access(Alloc *al) : a(al), flipped(false)
{
    if (a && a->map && !s_accessible(a)) {
        mprotect(a->data, a->data_bytes, PROT_READ | PROT_WRITE);
        flipped = true;
    }
}

Access::~Access()
{
    if (flipped)
        mprotect(a->data, a->data_bytes, PROT_NONE);
}

void protect_for(unsigned mask)
{
    if (mask == g_prot)
        return;
    for (auto &kv : g_maps) {
        Alloc *a = kv.second;
        if (a->freed)
            continue;
        const bool was = (g_prot >> a->dev) & 1u, now = (mask >> a->dev) & 1u;
        if (was != now)
            mprotect(a->data, a->data_bytes, now ? PROT_READ | PROT_WRITE : PROT_NONE);
    }
    g_prot = mask;
}

unsigned reach(int dev)
{
    return (1u << dev) | g_dev[(size_t)dev].peers;
}

void describe(const void *addr, char *out, size_t len)
{
    const uintptr_t x = (uintptr_t)addr;
    Alloc *a = find_mapping(addr);
    if (!a) {
        for (auto &kv : g_pinned)
            if (x >= (uintptr_t)kv.second->base &&
                x < (uintptr_t)kv.second->base + kv.second->bytes) {
                snprintf(out, len, "byte %zu of a %zu-byte pinned host allocation",
                         (size_t)(x - (uintptr_t)kv.second->base), kv.second->bytes);
                return;
            }
        snprintf(out, len,
                 "an address that is no device memory (a host pointer, or a "
                 "freed allocation long ago)");
        return;
    }
    const uintptr_t b = (uintptr_t)a->base, e = b + a->bytes;
    if (a->freed)
        snprintf(out, len, "byte %zu of a freed %zu-byte allocation of cuda:%d", (size_t)(x - b),
                 a->bytes, a->dev);
    else if (x >= e)
        snprintf(out, len, "%zu byte%s past the end of a %zu-byte allocation of cuda:%d",
                 (size_t)(x - e), x - e == 1 ? "" : "s", a->bytes, a->dev);
    else if (x < b)
        snprintf(out, len, "%zu byte%s before the start of a %zu-byte allocation of cuda:%d",
                 (size_t)(b - x), b - x == 1 ? "" : "s", a->bytes, a->dev);
    else
        snprintf(out, len, "byte %zu of a %zu-byte allocation of cuda:%d", (size_t)(x - b),
                 a->bytes, a->dev);
}

static void s_unmap(Alloc *a)
{
    g_maps.erase((uintptr_t)a->map);
    munmap(a->map, a->map_bytes);
    delete a;
}

/* ---- streams ----------------------------------------------------------------------------- */

Stream *stream(cudaStream_t h)
{
    if (!h)
        return t_dev < (int)g_dev.size() ? g_dev[(size_t)t_dev].legacy : nullptr;
    Stream *s = (Stream *)(void *)h;
    return g_streams.count(s) ? s : nullptr;
}

static void s_exec(Stream *s, Op &op)
{
    switch (op.kind) {
    case Op::KERNEL:
        count("launch");
        exec_kernel(*op.k, s->dev);
        break;
    case Op::COPY: {
        Access da(find(op.dst, op.n));
        const char *src = op.staged ? op.staged->data() : op.src;
        Access sa(op.staged ? nullptr : find(op.src, op.n));
        memmove(op.dst, src, op.n);
        break;
    }
    case Op::SET: {
        Access da(find(op.dst, op.n));
        memset(op.dst, op.value, op.n);
        break;
    }
    case Op::RECORD:
        op.stamp->done = true;
        op.stamp->ms = s_now_ms();
        break;
    case Op::WAIT:
        run_until(op.on, op.upto);
        break;
    case Op::HOST:
        op.fn();
        break;
    }
}

void run_until(Stream *s, uint64_t upto)
{
    if (s->done >= upto)
        return;
    if (s->running)
        fatal("streams wait for each other in a cycle (cuda:%d)", s->dev);
    s->running = true;
    while (s->done < upto && !s->q.empty()) {
        Op op = std::move(s->q.front());
        s->q.pop_front();
        s_exec(s, op);
        s->done++;
    }
    s->running = false;
}

static void s_run_all(int dev)
{
    for (Stream *s : g_streams)
        if (dev < 0 || s->dev == dev)
            run_until(s, s->enq);
}

/* Marks the thread's capture (if any) invalid: a call that a capture forbids. */
static cudaError_t s_capture_violation(const char *what)
{
    if (!t_capturing)
        return cudaSuccess;
    for (Stream *s : g_streams)
        if (s->capture && s->capture_owner == &t_capturing &&
            s->capture_mode != cudaStreamCaptureModeRelaxed && !s->capture_bad) {
            s->capture_bad = true;
            fprintf(stderr,
                    "swemu: %s during a stream capture (cudaErrorStreamCaptureUnsupported)\n",
                    what);
        }
    return cudaErrorStreamCaptureUnsupported;
}

cudaError_t enqueue(Stream *s, Op op)
{
    if (s->capture) {
        if (op.kind == Op::WAIT || op.kind == Op::HOST) {
            s->capture_bad = true;
            fprintf(stderr, "swemu: %s inside a stream capture is not emulated\n", op.what);
            return cudaErrorStreamCaptureUnsupported;
        }
        s->capture->nodes.push_back(std::move(op));
        return cudaSuccess;
    }
    s->waited |= op.kind == Op::WAIT && op.on != s;
    s->q.push_back(std::move(op));
    s->enq++;
    if (!s->running && sched_runs_now(s)) // an eager stream: the GPU takes it at once
        run_until(s, s->enq);
    return cudaSuccess;
}

} // namespace swemu

using namespace swemu;

struct swemu_event {
    int dev;
    unsigned flags;
    Stream *s = nullptr; // where it was last recorded
    uint64_t seq = 0;    // that stream's position then
    std::shared_ptr<Stamp> stamp;
};

struct swemu_graph {
    Graph g;
};

struct swemu_graph_exec {
    Graph g;
};

/* ---- errors and versions ------------------------------------------------------------------ */

extern "C" {

const char *cudaGetErrorName(cudaError_t e)
{
    switch (e) {
#define S_E(x)                                                                                     \
    case x:                                                                                        \
        return #x;
        S_E(cudaSuccess)
        S_E(cudaErrorInvalidValue)
        S_E(cudaErrorMemoryAllocation)
        S_E(cudaErrorInvalidConfiguration)
        S_E(cudaErrorInvalidDevicePointer)
        S_E(cudaErrorInvalidMemcpyDirection)
        S_E(cudaErrorNoDevice)
        S_E(cudaErrorInvalidDevice)
        S_E(cudaErrorPeerAccessUnsupported)
        S_E(cudaErrorInvalidResourceHandle)
        S_E(cudaErrorNotReady)
        S_E(cudaErrorIllegalAddress)
        S_E(cudaErrorLaunchOutOfResources)
        S_E(cudaErrorPeerAccessAlreadyEnabled)
        S_E(cudaErrorPeerAccessNotEnabled)
        S_E(cudaErrorLaunchFailure)
        S_E(cudaErrorNotSupported)
        S_E(cudaErrorStreamCaptureUnsupported)
        S_E(cudaErrorStreamCaptureInvalidated)
        S_E(cudaErrorStreamCaptureImplicit)
        S_E(cudaErrorStreamCaptureWrongThread)
        S_E(cudaErrorUnknown)
#undef S_E
    }
    return "cudaErrorUnknown";
}

const char *cudaGetErrorString(cudaError_t e)
{
    switch (e) {
    case cudaSuccess:
        return "no error";
    case cudaErrorInvalidValue:
        return "invalid argument";
    case cudaErrorMemoryAllocation:
        return "out of memory";
    case cudaErrorInvalidConfiguration:
        return "invalid configuration argument";
    case cudaErrorNoDevice:
        return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice:
        return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle:
        return "invalid resource handle";
    case cudaErrorPeerAccessAlreadyEnabled:
        return "peer access is already enabled";
    case cudaErrorPeerAccessUnsupported:
        return "peer access is not supported between these two devices";
    case cudaErrorStreamCaptureUnsupported:
        return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated:
        return "operation failed due to a previous error during capture";
    default:
        return cudaGetErrorName(e);
    }
}

cudaError_t cudaGetLastError(void)
{
    Guard g;
    cudaError_t e = t_last;
    t_last = cudaSuccess;
    if (cudaError_t s = sticky_of(t_dev)) // the device's fatal error is never cleared
        return s;
    return e;
}

cudaError_t cudaPeekAtLastError(void)
{
    Guard g;
    if (cudaError_t e = sticky_of(t_dev))
        return e;
    return t_last;
}

cudaError_t cudaDriverGetVersion(int *v)
{
    *v = CUDART_VERSION;
    return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int *v)
{
    *v = CUDART_VERSION;
    return cudaSuccess;
}

/* ---- devices ------------------------------------------------------------------------------- */

cudaError_t cudaGetDeviceCount(int *n)
{
    Guard g;
    if (cudaError_t e = injected("cudaGetDeviceCount"))
        return ret(e);
    *n = g_cfg.n_dev;
    return g_cfg.n_dev ? cudaSuccess : ret(cudaErrorNoDevice);
}

cudaError_t cudaSetDevice(int dev)
{
    Guard g;
    if (cudaError_t e = injected("cudaSetDevice"))
        return ret(e);
    if (dev < 0 || dev >= g_cfg.n_dev)
        return ret(g_cfg.n_dev ? cudaErrorInvalidDevice : cudaErrorNoDevice);
    t_dev = dev;
    return cudaSuccess;
}

cudaError_t cudaGetDevice(int *dev)
{
    *dev = t_dev;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int dev)
{
    Guard g;
    if (dev < 0 || dev >= g_cfg.n_dev)
        return ret(cudaErrorInvalidDevice);
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "emulated GPU %d (CPU)", dev);
    p->totalGlobalMem = g_cfg.mem;
    p->multiProcessorCount = 4;
    p->major = 7;
    p->minor = 5;
    p->warpSize = 32;
    p->maxThreadsPerBlock = 1024;
    p->sharedMemPerBlock = 48 << 10;
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void)
{
    Guard g;
    if (cudaError_t e = sticky_of(t_dev))
        return ret(e);
    if (cudaError_t e = s_capture_violation("cudaDeviceSynchronize"))
        return ret(e);
    s_run_all(t_dev);
    return cudaSuccess;
}

cudaError_t cudaDeviceCanAccessPeer(int *can, int dev, int peer)
{
    Guard g;
    if (dev < 0 || dev >= g_cfg.n_dev || peer < 0 || peer >= g_cfg.n_dev)
        return ret(cudaErrorInvalidDevice);
    *can = g_cfg.peer && dev != peer;
    return cudaSuccess;
}

cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned flags)
{
    Guard g;
    if (peer < 0 || peer >= g_cfg.n_dev || flags != 0)
        return ret(peer < 0 || peer >= g_cfg.n_dev ? cudaErrorInvalidDevice
                                                   : cudaErrorInvalidValue);
    if (!g_cfg.peer || peer == t_dev)
        return ret(cudaErrorPeerAccessUnsupported);
    Device &d = g_dev[(size_t)t_dev];
    if (d.peers & (1u << peer))
        return ret(cudaErrorPeerAccessAlreadyEnabled);
    d.peers |= 1u << peer;
    return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total)
{
    Guard g;
    if (cudaError_t e = injected("cudaMemGetInfo"))
        return ret(e);
    if (t_dev >= g_cfg.n_dev)
        return ret(cudaErrorNoDevice);
    *total = g_cfg.mem;
    *free_b = g_cfg.mem - g_dev[(size_t)t_dev].used;
    return cudaSuccess;
}

/* ---- memory ---------------------------------------------------------------------------- */

cudaError_t cudaMalloc(void **p, size_t bytes)
{
    Guard g;
    *p = nullptr;
    if (cudaError_t e = injected("cudaMalloc"))
        return ret(e);
    if (cudaError_t e = s_capture_violation("cudaMalloc"))
        return ret(e);
    if (t_dev >= g_cfg.n_dev)
        return ret(cudaErrorNoDevice);
    if (bytes == 0)
        return cudaSuccess;
    Device &d = g_dev[(size_t)t_dev];
    if (bytes > g_cfg.mem - d.used)
        return ret(cudaErrorMemoryAllocation);
    const size_t data_bytes = (bytes + S_PAGE - 1) / S_PAGE * S_PAGE;
    const size_t map_bytes = data_bytes + 2 * S_PAGE;
    void *m =
        mmap(nullptr, map_bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED)
        return ret(cudaErrorMemoryAllocation);
    Alloc *a = new Alloc();
    a->map = (char *)m;
    a->map_bytes = map_bytes;
    a->data = a->map + S_PAGE;
    a->data_bytes = data_bytes;
    a->base = a->data + data_bytes - bytes; // ends at the guard page
    a->bytes = bytes;
    a->dev = t_dev;
    a->freed = false;
    if (mprotect(a->data, data_bytes, PROT_READ | PROT_WRITE) != 0) {
        munmap(m, map_bytes);
        delete a;
        return ret(cudaErrorMemoryAllocation);
    }
    memset(a->base, 0xff, bytes); // uninitialised device memory: NaN in f16 and f32
    /* Before the start, in the first data page: a red zone (redzone.cc) that a
     * kernel's loads and stores are checked against as they happen (exec.cc);
     * NaN to read, and checked after each launch for the stores that are not
     * instrumented. */
    memset(a->data, S_REDZONE, (size_t)(a->base - a->data));
    if (!s_accessible(a))
        mprotect(a->data, data_bytes, PROT_NONE);
    g_maps[(uintptr_t)a->map] = a;
    redzone_add(a);
    d.used += bytes;
    *p = a->base;
    return cudaSuccess;
}

cudaError_t cudaFree(void *p)
{
    Guard g;
    if (!p)
        return cudaSuccess;
    if (cudaError_t e = sticky_of(t_dev))
        return ret(e);
    if (cudaError_t e = s_capture_violation("cudaFree"))
        return ret(e);
    Alloc *a = find_mapping(p);
    if (!a || a->freed || p != a->base) {
        char what[200];
        describe(p, what, sizeof what);
        fatal("cudaFree of %p: %s", p, what);
    }
    s_run_all(-1); // cudaFree waits for the device's work
    g_dev[(size_t)a->dev].used -= a->bytes;
    a->freed = true;
    redzone_drop(a);
    mprotect(a->data, a->data_bytes, PROT_NONE);
    g_freed.push_back(a);
    g_freed_bytes += a->bytes;
    while (g_freed_bytes > S_QUARANTINE) {
        Alloc *old = g_freed.front();
        g_freed.pop_front();
        g_freed_bytes -= old->bytes;
        s_unmap(old);
    }
    return cudaSuccess;
}

cudaError_t cudaMallocHost(void **p, size_t bytes)
{
    Guard g;
    *p = nullptr;
    if (cudaError_t e = injected("cudaMallocHost"))
        return ret(e);
    if (cudaError_t e = s_capture_violation("cudaMallocHost"))
        return ret(e);
    Alloc *a = new Alloc();
    a->base = (char *)malloc(bytes ? bytes : 1);
    if (!a->base) {
        delete a;
        return ret(cudaErrorMemoryAllocation);
    }
    a->bytes = bytes;
    a->map = nullptr;
    a->map_bytes = 0;
    a->dev = -1;
    a->freed = false;
    g_pinned[(uintptr_t)a->base] = a;
    *p = a->base;
    return cudaSuccess;
}

cudaError_t cudaFreeHost(void *p)
{
    Guard g;
    if (!p)
        return cudaSuccess;
    auto it = g_pinned.find((uintptr_t)p);
    if (it == g_pinned.end())
        fatal("cudaFreeHost of %p, which cudaMallocHost did not return", p);
    s_run_all(-1);
    free(it->second->base);
    delete it->second;
    g_pinned.erase(it);
    return cudaSuccess;
}

/* Where a pointer lives: -1 pageable host memory, -2 pinned host memory, else its device. */
static int s_where(const void *p, size_t n, const char *api, const char *which)
{
    Alloc *a = find_mapping(p);
    if (a) {
        if (!find(p, n)) {
            char what[200];
            describe(p, what, sizeof what);
            fatal("%s: the %zu bytes at %s %p overrun device memory: %s", api, n, which, p, what);
        }
        return a->dev;
    }
    for (auto it = g_pinned.upper_bound((uintptr_t)p); it != g_pinned.begin();) {
        --it;
        Alloc *h = it->second;
        if ((uintptr_t)p < (uintptr_t)h->base + h->bytes) {
            if (!find(p, n))
                fatal("%s: the %zu bytes at %s %p overrun a %zu-byte pinned allocation", api, n,
                      which, p, h->bytes);
            return -2;
        }
        break;
    }
    return -1;
}

static cudaError_t s_copy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind,
                          cudaStream_t h, bool sync, const char *api)
{
    if (cudaError_t e = injected(api))
        return ret(e);
    if (n == 0)
        return cudaSuccess;
    const int wd = s_where(dst, n, api, "destination"), ws = s_where(src, n, api, "source");
    const bool dd = wd >= 0, sd = ws >= 0;
    const enum cudaMemcpyKind real = dd && sd ? cudaMemcpyDeviceToDevice
                                     : dd     ? cudaMemcpyHostToDevice
                                     : sd     ? cudaMemcpyDeviceToHost
                                              : cudaMemcpyHostToHost;
    if (kind != cudaMemcpyDefault && kind != real) {
        fprintf(stderr, "swemu: %s: kind %d but the pointers say %d\n", api, (int)kind, (int)real);
        return ret(cudaErrorInvalidMemcpyDirection);
    }
    Stream *s = stream(h);
    if (!s)
        return ret(cudaErrorInvalidResourceHandle);
    if (sync)
        if (cudaError_t e = s_capture_violation(api))
            return ret(e);
    Op op;
    op.kind = Op::COPY;
    op.dst = (char *)dst;
    op.n = n;
    op.what = api;
    if (ws == -1 && !sync) {
        if (s->capture) { // a graph would read the host memory when it replays
            s->capture_bad = true;
            fprintf(stderr, "swemu: %s from pageable memory during a stream capture\n", api);
            return ret(cudaErrorStreamCaptureUnsupported);
        }
        op.staged = std::make_shared<std::vector<char>>((const char *)src, (const char *)src + n);
    } else {
        op.src = (const char *)src;
    }
    if (cudaError_t e = enqueue(s, std::move(op)))
        return ret(e);
    if (sync || (wd == -1 && !s->capture)) // to pageable memory: returns when done
        run_until(s, s->enq);
    return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind)
{
    Guard g;
    return s_copy(dst, src, n, kind, nullptr, true, "cudaMemcpy");
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind,
                            cudaStream_t s)
{
    Guard g;
    return s_copy(dst, src, n, kind, s, false, "cudaMemcpyAsync");
}

cudaError_t cudaMemcpyPeerAsync(void *dst, int dst_dev, const void *src, int src_dev, size_t n,
                                cudaStream_t h)
{
    Guard g;
    if (cudaError_t e = injected("cudaMemcpyPeerAsync"))
        return ret(e);
    if (dst_dev < 0 || dst_dev >= g_cfg.n_dev || src_dev < 0 || src_dev >= g_cfg.n_dev)
        return ret(cudaErrorInvalidDevice);
    if (n == 0)
        return cudaSuccess;
    const int wd = s_where(dst, n, "cudaMemcpyPeerAsync", "destination");
    const int ws = s_where(src, n, "cudaMemcpyPeerAsync", "source");
    if (wd != dst_dev || ws != src_dev)
        fatal("cudaMemcpyPeerAsync: the destination is on %d (said %d), the source on %d (said %d)",
              wd, dst_dev, ws, src_dev);
    Stream *s = stream(h);
    if (!s)
        return ret(cudaErrorInvalidResourceHandle);
    Op op;
    op.kind = Op::COPY;
    op.dst = (char *)dst;
    op.src = (const char *)src;
    op.n = n;
    op.what = "cudaMemcpyPeerAsync";
    count("peer_copy");
    return ret(enqueue(s, std::move(op)));
}

static cudaError_t s_set(void *p, int value, size_t n, cudaStream_t h, bool sync, const char *api)
{
    if (cudaError_t e = injected(api))
        return ret(e);
    if (n == 0)
        return cudaSuccess;
    if (s_where(p, n, api, "destination") < 0)
        fatal("%s of %p: not device memory", api, p);
    Stream *s = stream(h);
    if (!s)
        return ret(cudaErrorInvalidResourceHandle);
    if (sync)
        if (cudaError_t e = s_capture_violation(api))
            return ret(e);
    Op op;
    op.kind = Op::SET;
    op.dst = (char *)p;
    op.n = n;
    op.value = value;
    op.what = api;
    if (cudaError_t e = enqueue(s, std::move(op)))
        return ret(e);
    if (sync)
        run_until(s, s->enq);
    return cudaSuccess;
}

cudaError_t cudaMemset(void *p, int value, size_t n)
{
    Guard g;
    return s_set(p, value, n, nullptr, true, "cudaMemset");
}

cudaError_t cudaMemsetAsync(void *p, int value, size_t n, cudaStream_t s)
{
    Guard g;
    return s_set(p, value, n, s, false, "cudaMemsetAsync");
}

/* ---- streams ------------------------------------------------------------------------------ */

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *out, unsigned flags)
{
    Guard g;
    if (cudaError_t e = injected("cudaStreamCreateWithFlags"))
        return ret(e);
    if (t_dev >= g_cfg.n_dev)
        return ret(cudaErrorNoDevice);
    Stream *s = new Stream();
    s->dev = t_dev;
    s->flags = flags;
    g_streams.insert(s);
    *out = (cudaStream_t)(void *)s;
    return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *out)
{
    return cudaStreamCreateWithFlags(out, cudaStreamDefault);
}

cudaError_t cudaStreamDestroy(cudaStream_t h)
{
    Guard g;
    Stream *s = stream(h);
    if (!s || !h)
        return ret(cudaErrorInvalidResourceHandle);
    if (s->capture)
        return ret(cudaErrorStreamCaptureUnsupported);
    run_until(s, s->enq); // queued work still completes
    g_streams.erase(s);
    delete s;
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t h)
{
    Guard g;
    if (cudaError_t e = injected("cudaStreamSynchronize"))
        return ret(e);
    Stream *s = stream(h);
    if (!s)
        return ret(cudaErrorInvalidResourceHandle);
    if (s->capture) {
        s->capture_bad = true;
        return ret(cudaErrorStreamCaptureUnsupported);
    }
    run_until(s, s->enq);
    return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t h)
{
    Guard g;
    if (cudaError_t e = sticky_of(t_dev))
        return ret(e);
    Stream *s = stream(h);
    if (!s)
        return ret(cudaErrorInvalidResourceHandle);
    run_until(s, s->enq);
    return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t h, cudaEvent_t e, unsigned flags)
{
    Guard g;
    if (cudaError_t err = sticky_of(t_dev))
        return ret(err);
    Stream *s = stream(h);
    if (!s || !g_events.count(e) || flags != 0)
        return ret(!s || !g_events.count(e) ? cudaErrorInvalidResourceHandle
                                            : cudaErrorInvalidValue);
    if (!e->s) // never recorded: nothing to wait for
        return cudaSuccess;
    Op op;
    op.kind = Op::WAIT;
    op.on = e->s;
    op.upto = e->seq;
    op.what = "cudaStreamWaitEvent";
    return ret(enqueue(s, std::move(op)));
}

cudaError_t cudaStreamBeginCapture(cudaStream_t h, enum cudaStreamCaptureMode mode)
{
    Guard g;
    if (cudaError_t e = injected("cudaStreamBeginCapture"))
        return ret(e);
    Stream *s = stream(h);
    if (!s || !h) // the legacy stream cannot be captured
        return ret(!s ? cudaErrorInvalidResourceHandle : cudaErrorStreamCaptureUnsupported);
    if (s->capture)
        return ret(cudaErrorStreamCaptureUnsupported);
    s->capture = new Graph();
    s->capture->dev = s->dev;
    s->capture_bad = false;
    s->capture_mode = mode;
    s->capture_owner = &t_capturing;
    if (mode != cudaStreamCaptureModeRelaxed)
        t_capturing++;
    count("capture");
    return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t h, cudaGraph_t *out)
{
    Guard g;
    *out = nullptr;
    Stream *s = stream(h);
    if (!s || !s->capture)
        return ret(!s ? cudaErrorInvalidResourceHandle : cudaErrorInvalidValue);
    Graph *gr = s->capture;
    const bool bad = s->capture_bad;
    s->capture = nullptr;
    s->capture_bad = false;
    if (s->capture_mode != cudaStreamCaptureModeRelaxed)
        t_capturing--;
    if (bad) {
        delete gr;
        return ret(cudaErrorStreamCaptureInvalidated);
    }
    swemu_graph *sg = new swemu_graph();
    sg->g = std::move(*gr);
    delete gr;
    *out = sg;
    return cudaSuccess;
}

/* ---- events -------------------------------------------------------------------------------- */

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *out, unsigned flags)
{
    Guard g;
    if (cudaError_t e = injected("cudaEventCreateWithFlags"))
        return ret(e);
    swemu_event *e = new swemu_event();
    e->dev = t_dev;
    e->flags = flags;
    g_events.insert(e);
    *out = e;
    return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *out)
{
    return cudaEventCreateWithFlags(out, cudaEventDefault);
}

cudaError_t cudaEventDestroy(cudaEvent_t e)
{
    Guard g;
    if (!g_events.count(e))
        return ret(cudaErrorInvalidResourceHandle);
    g_events.erase(e);
    delete e;
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t h)
{
    Guard g;
    if (cudaError_t err = injected("cudaEventRecord"))
        return ret(err);
    Stream *s = stream(h);
    if (!s || !g_events.count(e) || e->dev != s->dev)
        return ret(cudaErrorInvalidResourceHandle);
    if (s->capture) {
        s->capture_bad = true;
        fprintf(stderr, "swemu: cudaEventRecord inside a stream capture is not emulated\n");
        return ret(cudaErrorStreamCaptureUnsupported);
    }
    Op op;
    op.kind = Op::RECORD;
    op.stamp = std::make_shared<Stamp>();
    op.what = "cudaEventRecord";
    e->stamp = op.stamp;
    enqueue(s, std::move(op));
    e->s = s;
    e->seq = s->enq;
    return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t e)
{
    Guard g;
    if (cudaError_t err = sticky_of(t_dev))
        return ret(err);
    if (!g_events.count(e))
        return ret(cudaErrorInvalidResourceHandle);
    if (e->s)
        run_until(e->s, e->seq);
    return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t e)
{
    return cudaEventSynchronize(e);
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b)
{
    Guard g;
    if (!g_events.count(a) || !g_events.count(b) || a->dev != b->dev ||
        (a->flags & cudaEventDisableTiming) || (b->flags & cudaEventDisableTiming))
        return ret(cudaErrorInvalidResourceHandle);
    if (!a->stamp || !b->stamp || !a->stamp->done || !b->stamp->done)
        return ret(cudaErrorNotReady);
    *ms = (float)(b->stamp->ms - a->stamp->ms);
    return cudaSuccess;
}

/* ---- graphs -------------------------------------------------------------------------------- */

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t gr, unsigned long long flags)
{
    Guard g;
    if (cudaError_t e = injected("cudaGraphInstantiate"))
        return ret(e);
    if (!gr || flags != 0)
        return ret(cudaErrorInvalidValue);
    swemu_graph_exec *x = new swemu_graph_exec();
    x->g = gr->g;
    *exec = x;
    return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t h)
{
    Guard g;
    if (cudaError_t e = injected("cudaGraphLaunch"))
        return ret(e);
    Stream *s = stream(h);
    if (!s || !exec)
        return ret(cudaErrorInvalidResourceHandle);
    if (s->dev != exec->g.dev || s->capture)
        return ret(s->capture ? cudaErrorStreamCaptureUnsupported : cudaErrorInvalidResourceHandle);
    count("graph_launch");
    for (const Op &op : exec->g.nodes)
        enqueue(s, op);
    return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec)
{
    Guard g;
    delete exec;
    return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t gr)
{
    Guard g;
    delete gr;
    return cudaSuccess;
}

/* ---- swemu.h ------------------------------------------------------------------------------- */

uint64_t swemu_count(const char *what)
{
    Guard g;
    auto it = g_counts.find(what);
    return it == g_counts.end() ? 0 : it->second;
}

void swemu_fail(const char *api, int skip, int err)
{
    Guard g;
    g_inject[api] = Inject{skip, (cudaError_t)err};
}

const char *swemu_lib(const char *which)
{
    Guard g;
    static std::string paths[2];
    const bool cublas = !strcmp(which, "cublas");
    std::string &p = paths[cublas ? 0 : 1];
    const bool absent = cublas ? g_cfg.no_cublas : g_cfg.no_nccl;
    p = g_cfg.lib_dir + (absent ? "/absent-" : "/") + "libswemu_" + which + ".so";
    return p.c_str();
}

} // extern "C"

/* A launch (cuda_runtime.h's swemu_launch): checked as a GPU checks it, then queued. */
void swemu::launch(std::shared_ptr<Kernel> k, cudaStream_t h)
{
    Guard g;
    if (cudaError_t e = injected("launch")) {
        ret(e);
        return;
    }
    Stream *s = stream(h);
    if (!s || t_dev >= g_cfg.n_dev) {
        ret(cudaErrorInvalidResourceHandle);
        return;
    }
    /* A kernel launch fails if its stream is not of the current device. */
    if (s->dev != t_dev) {
        fprintf(stderr,
                "swemu: kernel %s (%s:%d) launched on cuda:%d's stream while cuda:%d is "
                "current\n",
                k->name, k->file, k->line, s->dev, t_dev);
        ret(cudaErrorInvalidResourceHandle);
        return;
    }
    const dim3 b = k->block, gr = k->grid;
    const unsigned long long threads = (unsigned long long)b.x * b.y * b.z;
    if (b.x == 0 || b.y == 0 || b.z == 0 || gr.x == 0 || gr.y == 0 || gr.z == 0 || threads > 1024 ||
        b.x > 1024 || b.y > 1024 || b.z > 64 || gr.y > 65535 || gr.z > 65535 ||
        gr.x > 0x7fffffffu) {
        fprintf(stderr,
                "swemu: kernel %s (%s:%d): grid (%u,%u,%u) block (%u,%u,%u) is not a "
                "valid launch\n",
                k->name, k->file, k->line, gr.x, gr.y, gr.z, b.x, b.y, b.z);
        ret(cudaErrorInvalidConfiguration);
        return;
    }
    if (k->shmem > (48u << 10)) {
        ret(cudaErrorInvalidValue);
        return;
    }
    Op op;
    op.kind = Op::KERNEL;
    op.k = std::move(k);
    op.what = op.k->name;
    ret(enqueue(s, std::move(op)));
}
