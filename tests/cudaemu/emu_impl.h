/*
 * emu_impl.h - the inside of the emulated CUDA runtime, shared by its files:
 * runtime.cc (devices, memory, streams, events, graphs, the API), exec.cc
 * (running a kernel's grid as fibers, the order check, the fault handler)
 * and the cuBLAS and NCCL stand-ins (cublas.cc, nccl.cc), which queue their
 * work on the runtime's streams.
 *
 * One process-wide lock (lock()) covers every call: the state below is only
 * touched under it, and kernels run under it, one at a time, which is also
 * what makes a kernel's static __shared__ arrays private to its block.
 *
 * Work is lazy by default: a stream keeps its operations queued until the
 * host waits for them (cudaStreamSynchronize, an event, a copy to pageable
 * memory, cudaFree, ...), and a stream that waits for an event runs the
 * other stream up to that event first. So a GPU that is arbitrarily late is
 * what the code runs against: a missing wait or synchronisation reads stale
 * data here instead of working by luck. sched.cc's other policies
 * (SW_CUDA_EMU_STREAMS) run some or all streams eagerly, which shows the
 * opposite race: a producer overwriting what a late consumer still reads.
 */
#ifndef SWEMU_IMPL_H
#define SWEMU_IMPL_H

#include "cuda_runtime.h"

#include <deque>
#include <mutex>

namespace swemu
{

std::recursive_mutex &lock();

/* A cudaMalloc'd (dev >= 0) or cudaMallocHost'd (dev < 0) allocation. Device
 * memory is its own mapping: a guard page, the data ending exactly at a
 * second guard page (so a read one byte past the end faults), pages of
 * another GPU made inaccessible while a kernel runs. */
struct Alloc {
    char *base;        // what the caller got
    size_t bytes;      // its size
    char *map;         // the mapping (guards included); NULL for pinned host memory
    size_t map_bytes;  //
    char *data;        // first page of the data
    size_t data_bytes; // pages of the data
    int dev;           // GPU, or -1 for pinned host memory
    bool freed;        // kept inaccessible for a while (use after free)
};

/* The allocation that holds [p, p + n) (n may be 0), or NULL. */
Alloc *find(const void *p, size_t n);
/* The allocation whose mapping (guards included) holds address a, or NULL. */
Alloc *find_mapping(const void *a);
/* redzone.cc: the red zone before an allocation that does not fill its
 * pages (from its first page's start to its own), in a shadow an access
 * looks up in O(1). redzone_add and redzone_drop under the lock (cudaMalloc,
 * cudaFree); redzone_of gives the allocation whose red zone holds p, or NULL
 * (the kernel's thread only: it fills the cache). */
#define SWEMU_HIDDEN __attribute__((visibility("hidden")))
SWEMU_HIDDEN void redzone_add(const Alloc *a);
SWEMU_HIDDEN void redzone_drop(const Alloc *a);
struct RzCache {
    uintptr_t page;  // the page looked up (0: none)
    uintptr_t limit; // its addresses below this are a red zone (page: none are)
    const Alloc *a;  // whose
};
static const size_t S_RZ_CACHE = 64;
extern SWEMU_HIDDEN RzCache g_rz_cache[S_RZ_CACHE];
SWEMU_HIDDEN const Alloc *redzone_miss(uintptr_t x);
static inline const Alloc *redzone_of(const void *p)
{
    const uintptr_t x = (uintptr_t)p;
    const RzCache &c = g_rz_cache[(x >> 12) & (S_RZ_CACHE - 1)];
    if (c.page == (x & ~(uintptr_t)4095))
        return x < c.limit ? c.a : nullptr;
    return redzone_miss(x);
}
/* Makes a's pages accessible to the host for the object's lifetime. */
struct Access {
    explicit Access(Alloc *a);
    ~Access();
    Access(const Access &) = delete;
    Access &operator=(const Access &) = delete;
    Alloc *a;
    bool flipped;
};
/* Makes the memory of the devices in mask accessible and every other
 * device's not (what a kernel on one device may touch). */
void protect_for(unsigned mask);
/* The devices a kernel on dev may touch: itself and the peers it enabled. */
unsigned reach(int dev);

struct Stream;
struct Stamp {
    bool done = false;
    double ms = 0; // when the event's point was reached
};

/* A queued operation. */
struct Op {
    enum Kind { KERNEL, COPY, SET, RECORD, WAIT, HOST } kind;
    std::shared_ptr<Kernel> k;                 // KERNEL
    char *dst = nullptr;                       // COPY, SET
    const char *src = nullptr;                 // COPY (NULL: from staged)
    size_t n = 0;                              // COPY, SET
    int value = 0;                             // SET
    std::shared_ptr<std::vector<char>> staged; // COPY from pageable memory, taken at the call
    std::shared_ptr<Stamp> stamp;              // RECORD
    Stream *on = nullptr;                      // WAIT: run `on` up to `upto` first
    uint64_t upto = 0;                         //
    std::function<void()> fn;                  // HOST
    const char *what = "";                     // for messages
};

struct Graph;
struct Stream {
    int dev;
    unsigned flags;
    std::deque<Op> q;  // queued, not yet run
    uint64_t enq = 0;  // operations ever queued
    uint64_t done = 0; // of those, run
    bool running = false;
    Graph *capture = nullptr; // the graph being captured into
    bool capture_bad = false; // an unsupported call invalidated it
    int capture_mode = 0;
    const void *capture_owner = nullptr; // the capturing thread (a thread-local's address)
    int sched_eager = -1;                // random=SEED: 1 while this stream runs eagerly
    bool waited = false;                 // it has queued a wait for another stream
};

/* The stream behind a handle (NULL: the current device's legacy stream), or
 * NULL when the handle is not a live stream. */
Stream *stream(cudaStream_t s);
/* Queues op on s (into its graph while s is captured). 0 or an error. */
cudaError_t enqueue(Stream *s, Op op);
/* sched.cc: the policy of SW_CUDA_EMU_STREAMS (false for a spec it does not
 * know), and whether work just queued on s runs at once under it. */
bool sched_set(const char *spec);
bool sched_runs_now(Stream *s);
/* Runs s until `upto` of its operations have run. */
void run_until(Stream *s, uint64_t upto);
/* The device the calling thread has selected. */
int current_device();
int device_count();
/* Counts an event for swemu_count(). */
void count(const char *what);
/* Sets the calling thread's last error (when e != cudaSuccess) and returns e. */
cudaError_t ret(cudaError_t e);
/* An injected failure for api (swemu_fail, SW_CUDA_EMU_FAIL), else the
 * current device's fatal error, else cudaSuccess. An injected error that is
 * fatal on a GPU (700, 702, 710, 714-719: is_sticky) stays: the device's
 * queued work is dropped and every later call on it returns the error, as
 * CUDA does after such an error until the process restarts. */
cudaError_t injected(const char *api);
bool is_sticky(cudaError_t e);
/* The fatal error of device dev, or cudaSuccess. */
cudaError_t sticky_of(int dev);
/* Prints "swemu: ..." and aborts. */
[[noreturn]] void fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* exec.cc: runs a kernel's grid on dev (twice, the second time in reverse order,
 * on the first SW_CUDA_EMU_CHECK launches of each distinct launch). */
void exec_kernel(const Kernel &k, int dev);
/* Describes address a ("4 bytes past the end of a 256-byte allocation of cuda:0"). */
void describe(const void *a, char *out, size_t len);

} // namespace swemu

#endif
