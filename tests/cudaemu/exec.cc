/*
 * exec.cc - how the emulation runs a kernel's grid: the blocks one after
 * another, the threads of a block as cooperative fibers on one host thread.
 * A thread runs until it reaches __syncthreads, a warp operation (shuffle,
 * vote, __syncwarp) or its end; when every thread has stopped, the warp
 * operations whose lanes have all arrived complete (each lane gets its
 * value), and __syncthreads releases once every thread that has not exited
 * waits at it. Threads that wait at different barriers, or a warp operation
 * a lane of its mask has exited before, are reported as a deadlock.
 *
 * The order check: before a kernel runs, the allocations its non-const
 * pointer arguments point into are copied; the grid runs once with the
 * blocks and the threads of every barrier interval in forward order, its
 * results are kept, the copies restored, and the grid runs again with the
 * blocks and threads in reverse order. The two results must be identical to
 * the bit: a missing __syncthreads, a race between blocks or threads, or an
 * order-dependent atomic shows up as a difference, reported with the kernel,
 * the argument and the first differing byte. It runs on the first
 * SW_CUDA_EMU_CHECK launches (default S_CHECK_FIRST; "all": every one) of
 * each distinct launch: the kernel (wherever it is launched from), its grid, block and dynamic
 * shared memory, the bytes of its arguments that are not pointers, and which of its pointer
 * arguments share an allocation. A decode step repeats the same launches with other data: the
 * second run of each of them was about half of the emulated suite's time (test_cuda_spec: 300 s
 * with every launch checked, 163 s with none, 2026-12-06).
 *
 * Misaligned loads and stores: the kernels are compiled with
 * -fsanitize=alignment, whose checks call s_misaligned (below) instead of
 * UBSan's runtime, which judges an address as a GPU would.
 *
 * Both ends of an allocation, to the byte, whatever its size: its end is a
 * guard page (an access past it faults); the bytes before its start in its
 * first page are a red zone that every instrumented load and store of the
 * forward run is checked against before it happens (s_access asks
 * redzone.cc's shadow, O(1) an access), the atomics too (atomic_access); an
 * allocation that fills whole pages has a guard page right before its start
 * instead. The red zone reads as NaN and is also checked after each launch
 * (stores the instrumentation does not see: none in the kernels today).
 *
 * Memory faults (SIGSEGV/SIGBUS) while a kernel runs are reported with the
 * kernel, block and thread, and the address described against the
 * allocations (past the end, another device's memory, freed memory, past the
 * dynamic shared memory, a thread's stack overflowing).
 */
#include "emu_impl.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <climits>
#include <unordered_map>

namespace swemu
{

Lane *g_lane;
Block g_block;

static const int S_MAX_THREADS = 1024;
static const size_t S_STACK = (size_t)32 << 10; // per thread
static const size_t S_PAGE = 4096;

enum State { READY, AT_WARP, AT_BLOCK, DONE };

struct Fiber {
#if defined(__x86_64__)
    void *sp; // saved stack pointer
#else
    ucontext_t uc;
#endif
    State state;
    Lane lane;
    int linear; // index in the block
    /* A warp operation waited at. */
    int wop;
    unsigned wmask;
    uint64_t wval, wres;
    int warg, wwidth;
    /* __syncthreads variant waited at. */
    int bop, bpred, bres;
};

static Fiber g_fib[S_MAX_THREADS];
static char *g_stacks;         // S_MAX_THREADS stacks, each below a guard page
static Fiber *g_cur;           // the fiber running now
static const Kernel *g_kernel; // the kernel running now (NULL: none)
static int g_kdev;
/* Set on the host thread running a kernel's forward run: its accesses are
 * checked against the red zones (the hooks below also run in the instrumented
 * host code of other threads, which they leave alone; the reversed run of the
 * order check repeats the forward run's accesses unchecked, as the race
 * check does). */
static __thread bool t_in_kernel __attribute__((tls_model("initial-exec")));
static char *g_dyn_map; // dynamic shared memory mapping (with a guard page after)
/* How many times each distinct launch has had the order check (exec_kernel). */
static std::unordered_map<uint64_t, int> g_checked;
static const int S_CHECK_FIRST = 2;
static size_t g_dyn_map_bytes;
static uint64_t g_gen;

/* ---- fibers ---------------------------------------------------------------------------- */

#if defined(__x86_64__)
extern "C" void swemu_swap(void **save, void *load);
/* Saves the callee-saved registers and the stack pointer in *save, loads the
 * other stack and returns into it. */
asm(".text\n"
    ".globl swemu_swap\n"
    ".hidden swemu_swap\n"
    ".type swemu_swap,@function\n"
    "swemu_swap:\n"
    "    pushq %rbp\n"
    "    pushq %rbx\n"
    "    pushq %r12\n"
    "    pushq %r13\n"
    "    pushq %r14\n"
    "    pushq %r15\n"
    "    movq %rsp, (%rdi)\n"
    "    movq %rsi, %rsp\n"
    "    popq %r15\n"
    "    popq %r14\n"
    "    popq %r13\n"
    "    popq %r12\n"
    "    popq %rbx\n"
    "    popq %rbp\n"
    "    ret\n"
    ".size swemu_swap,.-swemu_swap\n");
static void *g_sched_sp;
#else
static ucontext_t g_sched_uc;
#endif

static int g_n;    // threads in the running block
static bool g_rev; // its threads run in reverse order

/* ---- shared-memory races ------------------------------------------------------------------
 * The kernels are compiled with -fsanitize=thread's instrumentation (no
 * ThreadSanitizer runtime: the __tsan_* calls land below), so every load and
 * store of a kernel reaches s_access first. While a block runs forward, each
 * byte of its shared memory (the static __shared__ arrays as they are
 * declared, the dynamic part) remembers the last thread that wrote it and
 * the last that read it, with the barrier interval (g_epoch: __syncthreads
 * ends one) and their warp's synchronisations (g_wsync: a completed warp
 * operation, __syncwarp or a shuffle, orders the lanes of its warp). Any
 * access to a byte another thread wrote, or a write of a byte another thread
 * read, in the same interval and not ordered by a warp synchronisation, is a race
 * a GPU may or may not show (the fibers of a block switch only at barriers,
 * so `s += 1` by 256 threads gives 256 here in either order): reported with
 * the kernel, the two threads, the array and the byte. Two writes alone are
 * reported too (s_check looks at the last writer whatever the access), even
 * of the same value, which a GPU would leave harmless: no kernel does that. */
struct ShCell {
    int16_t w = -1, r = -1;      // last writer and reader (thread in the block), -1 none
    uint32_t w_ep = 0, r_ep = 0; // their barrier intervals
    uint32_t w_ws = 0, r_ws = 0; // their warps' synchronisation counts then
    bool r_many = false;         // another thread read it in r_ep too
};
struct ShRegion {
    char *p;
    size_t n;
    const char *name;
    std::vector<ShCell> cells;
};
static std::vector<ShRegion> g_sh; // the running block's shared memory
static bool g_track;               // checking now (the forward run of a block)
static bool g_racecheck = true;    // SW_CUDA_EMU_RACECHECK=0 turns the checks off
static uint32_t g_epoch;           // barrier intervals of the block so far
static uint32_t g_wsync[32];       // completed warp operations per warp

static void s_where_str(char *out, size_t len);

static void s_race(const ShRegion &r, size_t off, int other, bool other_wrote, bool write)
{
    char where[300];
    s_where_str(where, sizeof where);
    g_track = false;
    fatal("%s: a race in shared memory: this thread %s byte %zu of %s (%zu bytes) that thread %d "
          "%s in the same barrier interval (no __syncthreads or warp synchronisation between)",
          where, write ? "writes" : "reads", off, r.name, r.n, other,
          other_wrote ? "wrote" : "read");
}

static void s_check(ShRegion &r, size_t off, size_t n, bool write)
{
    const int t = g_cur->linear, w = t >> 5;
    auto ordered = [&](int other, uint32_t ws) { return (other >> 5) == w && g_wsync[w] != ws; };
    for (size_t i = off; i < off + n && i < r.n; i++) {
        ShCell &c = r.cells[i];
        if (c.w >= 0 && c.w != t && c.w_ep == g_epoch && !ordered(c.w, c.w_ws))
            s_race(r, i, c.w, true, write);
        if (write) {
            if (c.r >= 0 && c.r_ep == g_epoch && (c.r != t || c.r_many) && !ordered(c.r, c.r_ws))
                s_race(r, i, c.r, false, true);
            c.w = (int16_t)t;
            c.w_ep = g_epoch;
            c.w_ws = g_wsync[w];
        } else {
            c.r_many = c.r_ep == g_epoch && c.r >= 0 && (c.r != t || c.r_many);
            c.r = (int16_t)t;
            c.r_ep = g_epoch;
            c.r_ws = g_wsync[w];
        }
    }
}

[[noreturn]] static void s_out_of_bounds(const Alloc *a, const void *p, size_t n, const char *what);

static inline void s_access(const void *p, size_t n, bool write)
{
    if (!t_in_kernel)
        return;
    if (const Alloc *a = n ? redzone_of(p) : nullptr) // n: a range's size may be 0
        s_out_of_bounds(a, p, n, write ? "write" : "read");
    if (!g_track || !g_cur)
        return;
    const uintptr_t a = (uintptr_t)p;
    for (ShRegion &r : g_sh)
        if (a >= (uintptr_t)r.p && a < (uintptr_t)r.p + r.n) {
            s_check(r, a - (uintptr_t)r.p, n, write);
            return;
        }
}

static void s_shared_region(void *p, size_t n, const char *name)
{
    ShRegion r;
    r.p = (char *)p;
    r.n = n;
    r.name = name;
    r.cells.assign(n, ShCell());
    g_sh.push_back(std::move(r));
}

/* ", argument 2" when argument 2 of the running kernel points into a, else "". */
static void s_arg_of(const Alloc *a, char *out, size_t len)
{
    out[0] = 0;
    if (g_kernel)
        for (const ArgPtr &p : g_kernel->ptrs)
            if (p.p && find_mapping(p.p) == a) {
                snprintf(out, len, ", argument %d", p.index);
                return;
            }
}

/* An access that touches a's red zone (the bytes before its start). */
static void s_out_of_bounds(const Alloc *a, const void *p, size_t n, const char *what)
{
    char where[300], desc[200], arg[40];
    s_where_str(where, sizeof where);
    describe(p, desc, sizeof desc);
    s_arg_of(a, arg, sizeof arg);
    g_track = false;
    fatal("%s: out of bounds: a %zu-byte %s %s%s (at %p: a GPU faults or touches another "
          "allocation)",
          where, n, what, desc, arg, p);
}

void atomic_access(const void *p, size_t n)
{
    if (!t_in_kernel)
        return;
    if (const Alloc *a = redzone_of(p))
        s_out_of_bounds(a, p, n, "atomic read-modify-write");
}

/* From the running fiber f to fiber n (NULL: the scheduler); returns when
 * some fiber or the scheduler switches back to f. */
static void s_switch(Fiber *f, Fiber *n)
{
    if (n == f)
        return;
    g_cur = n;
    g_lane = n ? &n->lane : nullptr;
#if defined(__x86_64__)
    swemu_swap(&f->sp, n ? n->sp : g_sched_sp);
#else
    swapcontext(&f->uc, n ? &n->uc : &g_sched_uc);
#endif
}

/* The first runnable lane of f's warp after f in the running order (all of
 * them with from_start), or NULL. */
static Fiber *s_next_lane(const Fiber *f, bool from_start)
{
    const int l0 = f->linear & ~31, l1 = l0 + 32 < g_n ? l0 + 32 : g_n;
    if (!from_start) { // the usual case: the very next lane
        const int l = g_rev ? f->linear - 1 : f->linear + 1;
        if (l >= l0 && l < l1 && g_fib[l].state == READY)
            return &g_fib[l];
    }
    if (!g_rev) {
        for (int l = from_start ? l0 : f->linear + 1; l < l1; l++)
            if (g_fib[l].state == READY)
                return &g_fib[l];
    } else {
        for (int l = from_start ? l1 - 1 : f->linear - 1; l >= l0; l--)
            if (g_fib[l].state == READY)
                return &g_fib[l];
    }
    return nullptr;
}

static bool s_warp_resolve(int w, int n);

/* The running fiber has stopped (at a barrier, a warp operation or its
 * end): the next lane of its warp runs, else the warp's operation completes
 * when this was its last lane, else the scheduler takes over. */
static void s_stop(Fiber *f)
{
    Fiber *n = s_next_lane(f, false);
    if (!n && f->state == AT_WARP && s_warp_resolve(f->linear >> 5, g_n))
        n = s_next_lane(f, true);
    s_switch(f, n);
}

[[noreturn]] static void s_fiber_main(void)
{
    Fiber *f = g_cur;
    g_kernel->body();
    f->state = DONE;
    s_stop(f);
    abort(); // a finished fiber is never resumed
}

static char *s_stack_top(int i)
{
    return g_stacks + (size_t)(i + 1) * (S_STACK + S_PAGE);
}

static void s_fiber_reset(Fiber *f, int i)
{
#if defined(__x86_64__)
    void **sp = (void **)(void *)s_stack_top(i);
    *--sp = nullptr;               // s_fiber_main's return address (never used)
    *--sp = (void *)&s_fiber_main; // where swemu_swap's ret goes
    for (int r = 0; r < 6; r++)
        *--sp = nullptr; // rbp rbx r12 r13 r14 r15
    f->sp = sp;
#else
    getcontext(&f->uc);
    f->uc.uc_stack.ss_sp = s_stack_top(i) - S_STACK;
    f->uc.uc_stack.ss_size = S_STACK;
    f->uc.uc_link = nullptr;
    makecontext(&f->uc, (void (*)(void))s_fiber_main, 0);
#endif
}

/* From the scheduler: runs f (and the lanes it hands over to) until control
 * comes back. */
static void s_resume(Fiber *f)
{
    g_cur = f;
    g_lane = &f->lane;
#if defined(__x86_64__)
    swemu_swap(&g_sched_sp, f->sp);
#else
    swapcontext(&g_sched_uc, &f->uc);
#endif
    g_cur = nullptr;
}

static void s_where_str(char *out, size_t len)
{
    if (!g_kernel) {
        snprintf(out, len, "host code");
        return;
    }
    if (g_cur)
        snprintf(out, len, "kernel %s (%s:%d) on cuda:%d, block (%u,%u,%u) thread (%u,%u,%u)",
                 g_kernel->name, g_kernel->file, g_kernel->line, g_kdev, g_block.bid.x,
                 g_block.bid.y, g_block.bid.z, g_cur->lane.tid.x, g_cur->lane.tid.y,
                 g_cur->lane.tid.z);
    else
        snprintf(out, len, "kernel %s (%s:%d) on cuda:%d, block (%u,%u,%u)", g_kernel->name,
                 g_kernel->file, g_kernel->line, g_kdev, g_block.bid.x, g_block.bid.y,
                 g_block.bid.z);
}

uint64_t warp_op(int op, unsigned mask, uint64_t value, int arg, int width)
{
    Fiber *f = g_cur;
    if (!f)
        fatal("a warp operation outside a kernel");
    if (width <= 0 || width > 32 || (width & (width - 1)))
        fatal("a warp operation with width %d in kernel %s", width, g_kernel->name);
    if (!(mask & (1u << (f->linear & 31)))) {
        char w[300];
        s_where_str(w, sizeof w);
        fatal("%s: a warp operation whose mask 0x%08x leaves out the calling lane", w, mask);
    }
    f->wop = op;
    f->wmask = mask;
    f->wval = value;
    f->warg = arg;
    f->wwidth = width;
    f->state = AT_WARP;
    s_stop(f);
    return f->wres;
}

int block_sync(int op, int pred)
{
    Fiber *f = g_cur;
    if (!f)
        fatal("__syncthreads outside a kernel");
    f->bop = op;
    f->bpred = pred;
    f->state = AT_BLOCK;
    s_stop(f);
    return f->bres;
}

void shared_init(void *p, size_t n, unsigned long long *gen, const char *name)
{
    if (*gen != g_block.gen) { // the first thread of this block to get here
        memset(p, 0xff, n);
        *gen = g_block.gen;
        if (g_track)
            s_shared_region(p, n, name);
    }
}

static const char *s_op_name(int op)
{
    static const char *names[] = {"__syncwarp",       "__shfl_sync",     "__shfl_up_sync",
                                  "__shfl_down_sync", "__shfl_xor_sync", "__ballot_sync",
                                  "__any_sync",       "__all_sync"};
    return op >= 0 && op < 8 ? names[op] : "?";
}

/* Completes warp w's operation when every lane of its mask waits at it. */
static bool s_warp_resolve(int w, int n)
{
    const int l0 = w * 32, l1 = l0 + 32 < n ? l0 + 32 : n;
    int first = -1;
    for (int l = l0; l < l1; l++)
        if (g_fib[l].state == AT_WARP) {
            first = l;
            break;
        }
    if (first < 0)
        return false;
    const unsigned mask = g_fib[first].wmask;
    const int op = g_fib[first].wop;
    for (int l = l0; l < l1; l++) {
        if (!(mask & (1u << (l - l0))))
            continue;
        const Fiber &x = g_fib[l];
        if (x.state == DONE) {
            char where[300];
            s_where_str(where, sizeof where);
            fatal("%s: lane %d of warp %d has exited, but lane %d waits for it at %s (mask "
                  "0x%08x)",
                  where, l - l0, w, first - l0, s_op_name(op), mask);
        }
        if (x.state != AT_WARP)
            return false; // not there yet (or at __syncthreads: a deadlock, reported later)
        if (x.wop != op || x.wmask != mask) {
            char where[300];
            s_where_str(where, sizeof where);
            fatal("%s: lanes of warp %d wait at different warp operations (%s mask 0x%08x, %s "
                  "mask 0x%08x)",
                  where, w, s_op_name(op), mask, s_op_name(x.wop), x.wmask);
        }
    }
    uint64_t vote = 0;
    int any = 0, all = 1;
    for (int l = l0; l < l1; l++)
        if (mask & (1u << (l - l0))) {
            const int p = g_fib[l].wval != 0;
            vote |= (uint64_t)p << (l - l0);
            any |= p;
            all &= p;
        }
    for (int l = l0; l < l1; l++) {
        if (!(mask & (1u << (l - l0))))
            continue;
        Fiber &x = g_fib[l];
        const int lane = l - l0, wd = x.wwidth, seg = lane & ~(wd - 1);
        int src = lane;
        switch (op) {
        case W_IDX:
            src = seg + (x.warg & (wd - 1));
            break;
        case W_UP:
            src = lane - x.warg >= seg ? lane - x.warg : lane;
            break;
        case W_DOWN:
            src = lane + x.warg < seg + wd ? lane + x.warg : lane;
            break;
        case W_XOR:
            src = (lane ^ x.warg) < seg + wd && (lane ^ x.warg) >= seg ? lane ^ x.warg : lane;
            break;
        default:
            break;
        }
        if (op >= W_IDX && op <= W_XOR) {
            if (l0 + src >= l1 || !(mask & (1u << src))) {
                char where[300];
                s_where_str(where, sizeof where);
                fatal("%s: lane %d reads lane %d, which is not in the mask 0x%08x of %s", where,
                      lane, src, mask, s_op_name(op));
            }
            x.wres = g_fib[l0 + src].wval;
        } else {
            x.wres = op == W_BALLOT ? vote
                     : op == W_ANY  ? (uint64_t)any
                     : op == W_ALL  ? (uint64_t)all
                                    : 0;
        }
    }
    for (int l = l0; l < l1; l++)
        if (mask & (1u << (l - l0)))
            g_fib[l].state = READY;
    g_wsync[w & 31]++;
    return true;
}

[[noreturn]] static void s_deadlock(int n)
{
    int at_block = 0, at_warp = 0, done = 0, ex_block = -1, ex_warp = -1;
    for (int i = 0; i < n; i++) {
        if (g_fib[i].state == AT_BLOCK) {
            at_block++;
            ex_block = ex_block < 0 ? i : ex_block;
        } else if (g_fib[i].state == AT_WARP) {
            at_warp++;
            ex_warp = ex_warp < 0 ? i : ex_warp;
        } else if (g_fib[i].state == DONE) {
            done++;
        }
    }
    char where[300];
    s_where_str(where, sizeof where);
    fatal("%s: the block cannot go on: %d threads wait at __syncthreads (thread %d first), %d at "
          "a warp operation (thread %d first), %d have exited",
          where, at_block, ex_block, at_warp, ex_warp, done);
}

/* Runs one block to its end, the warps and the lanes of each taken in
 * forward or reverse order: a warp's lanes run one after another, each up to
 * its next barrier or warp operation, the last to arrive at a warp operation
 * completes it, and the warp goes on until it waits at __syncthreads or
 * ends; then the next warp. */
static void s_run_block(int n, bool reverse)
{
    g_block.gen = ++g_gen;
    g_n = n;
    g_rev = reverse;
    if (g_block.ndyn)
        memset(g_block.dyn, 0xff, g_block.ndyn); // shared memory starts undefined
    g_sh.clear();
    g_track = !reverse && g_racecheck;
    g_epoch = 1;
    memset(g_wsync, 0, sizeof g_wsync);
    if (g_track && g_block.ndyn)
        s_shared_region(g_block.dyn, g_block.ndyn, "the dynamic shared memory");
    const dim3 bd = g_block.bdim;
    for (int i = 0; i < n; i++) {
        Fiber *f = &g_fib[i];
        f->state = READY;
        f->linear = i;
        f->lane.tid.x = (unsigned)i % bd.x;
        f->lane.tid.y = (unsigned)i / bd.x % bd.y;
        f->lane.tid.z = (unsigned)i / (bd.x * bd.y);
        s_fiber_reset(f, i);
    }
    const int n_warps = (n + 31) / 32;
    for (;;) {
        for (int k = 0; k < n_warps; k++) {
            const int w = reverse ? n_warps - 1 - k : k;
            Fiber *f = s_next_lane(&g_fib[w * 32], true);
            if (f)
                s_resume(f);
        }
        int done = 0;
        for (int i = 0; i < n; i++)
            done += g_fib[i].state == DONE;
        if (done == n)
            return;
        bool progress = false;
        for (int w = 0; w < n_warps; w++)
            progress |= s_warp_resolve(w, n);
        if (progress)
            continue;
        int waiting = 0, cnt = 0, all = 1, any = 0;
        for (int i = 0; i < n; i++) {
            const Fiber &f = g_fib[i];
            if (f.state == AT_BLOCK) {
                waiting++;
                cnt += f.bpred != 0;
                all &= f.bpred != 0;
                any |= f.bpred != 0;
            }
        }
        if (waiting != n - done)
            s_deadlock(n);
        for (int i = 0; i < n; i++) {
            Fiber &f = g_fib[i];
            if (f.state != AT_BLOCK)
                continue;
            f.bres = f.bop == B_COUNT ? cnt : f.bop == B_AND ? all : f.bop == B_OR ? any : 0;
            f.state = READY;
        }
        g_epoch++; // a new barrier interval
    }
}

/* ---- memory faults ------------------------------------------------------------------------- */

static void s_fault(int sig, siginfo_t *si, void *ctx)
{
    const void *addr = si->si_addr;
    const bool in_stacks =
        g_stacks && (const char *)addr >= g_stacks &&
        (const char *)addr < g_stacks + (size_t)S_MAX_THREADS * (S_STACK + S_PAGE);
    const bool in_dyn = g_dyn_map && (const char *)addr >= g_dyn_map &&
                        (const char *)addr < g_dyn_map + g_dyn_map_bytes;
    Alloc *a = find_mapping(addr);
    if (!g_kernel && !a) {
        /* Not ours: the default action (a crash with a core file). */
        signal(sig, SIG_DFL);
        return;
    }
    int is_write = -1;
#if defined(__x86_64__)
    const ucontext_t *uc = (const ucontext_t *)ctx;
    is_write = (uc->uc_mcontext.gregs[REG_ERR] & 2) != 0;
#else
    (void)ctx;
#endif
    char where[300], what[300];
    s_where_str(where, sizeof where);
    if (in_stacks)
        snprintf(what, sizeof what, "a thread's stack overflowed (%zu KiB each)", S_STACK >> 10);
    else if (in_dyn)
        snprintf(what, sizeof what,
                 "%zu bytes past the end of the %zu bytes of dynamic shared "
                 "memory",
                 (size_t)((const char *)addr - (g_dyn_map + g_dyn_map_bytes - S_PAGE)),
                 g_block.ndyn);
    else if (a && !a->freed && (const char *)addr >= a->base &&
             (const char *)addr < a->base + a->bytes)
        snprintf(what, sizeof what,
                 "byte %zu of a %zu-byte allocation of cuda:%d, another "
                 "device's memory (no peer access from cuda:%d)",
                 (size_t)((const char *)addr - a->base), a->bytes, a->dev, g_kdev);
    else
        describe(addr, what, sizeof what);
    char line[900], arg[40] = "";
    if (a)
        s_arg_of(a, arg, sizeof arg);
    const int len = snprintf(line, sizeof line, "swemu: %s: %s %p: %s%s\n", where,
                             is_write < 0 ? "access to"
                             : is_write   ? "write to"
                                          : "read of",
                             addr, what, arg);
    if (len > 0)
        (void)!write(2, line, (size_t)len < sizeof line ? (size_t)len : sizeof line - 1);
    abort();
}

static void s_install(void)
{
    static bool done = false;
    static thread_local bool alt = false;
    if (!alt) { // the handler runs on its own stack: a fiber's may be the one that overflowed
        alt = true;
        stack_t ss;
        ss.ss_sp = malloc(1 << 16);
        ss.ss_size = 1 << 16;
        ss.ss_flags = 0;
        sigaltstack(&ss, nullptr);
    }
    if (done)
        return;
    done = true;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = s_fault;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, nullptr);
    sigaction(SIGBUS, &sa, nullptr);
    void *m = mmap(nullptr, (size_t)S_MAX_THREADS * (S_STACK + S_PAGE), PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED)
        fatal("cannot map the threads' stacks");
    g_stacks = (char *)m;
    for (int i = 0; i < S_MAX_THREADS; i++) // each stack above its guard page
        mprotect(g_stacks + (size_t)i * (S_STACK + S_PAGE) + S_PAGE, S_STACK,
                 PROT_READ | PROT_WRITE);
}

/* ---- a grid ------------------------------------------------------------------------------- */

struct Region {
    Alloc *a;
    int index; // argument
    std::vector<char> before, first;
};

static void s_run_grid(const Kernel &k, bool reverse)
{
    const dim3 g = k.grid;
    const int n = (int)(k.block.x * k.block.y * k.block.z);
    const uint64_t blocks = (uint64_t)g.x * g.y * g.z;
    for (uint64_t i = 0; i < blocks; i++) {
        const uint64_t b = reverse ? blocks - 1 - i : i;
        g_block.bid.x = (unsigned)(b % g.x);
        g_block.bid.y = (unsigned)(b / g.x % g.y);
        g_block.bid.z = (unsigned)(b / ((uint64_t)g.x * g.y));
        s_run_block(n, reverse);
    }
}

/* The bytes before an allocation's start in its first page (runtime.cc's
 * red zone): a kernel that wrote there wrote before the allocation. */
static void s_redzones(const Kernel &k, int dev, const std::vector<Region> &regions)
{
    for (const Region &r : regions) {
        const Alloc *a = r.a;
        if (!a->map)
            continue; // pinned host memory
        for (const char *p = a->data; p < a->base; p++)
            if (*(const unsigned char *)p != 0xff)
                fatal("kernel %s (%s:%d) on cuda:%d: argument %d's %zu-byte allocation was "
                      "written %zu bytes before its start",
                      k.name, k.file, k.line, dev, r.index, a->bytes, (size_t)(a->base - p));
    }
}

/* SW_CUDA_EMU_CHECK: how many launches of each distinct launch get the
 * order check (0 none, "all" every one; default S_CHECK_FIRST). Read at
 * each launch, so that a test can change it. */
static int s_check_first(void)
{
    const char *v = getenv("SW_CUDA_EMU_CHECK");
    if (!v || !*v)
        return S_CHECK_FIRST;
    if (!strcmp(v, "all"))
        return INT_MAX;
    char *end;
    const long n = strtol(v, &end, 10);
    if (*end || n < 0 || n > INT_MAX - 1)
        fatal("SW_CUDA_EMU_CHECK=%s: 0 (no order check), N (the first N launches of each "
              "distinct launch) or all",
              v);
    return (int)n;
}

void exec_kernel(const Kernel &k, int dev)
{
    s_install();
    protect_for(reach(dev));
    char where[300];
    /* What makes this launch distinct (the order check, s_check_first). */
    uint64_t key = fnv1a(k.scalars, &k.fn, sizeof k.fn);
    const unsigned shape[6] = {k.grid.x, k.grid.y, k.grid.z, k.block.x, k.block.y, k.block.z};
    key = fnv1a(fnv1a(key, shape, sizeof shape), &k.shmem, sizeof k.shmem);
    std::vector<const Alloc *> allocs; // each pointer argument's (NULL for NULL)
    /* Every pointer argument must be memory this device can touch. */
    std::vector<Region> regions;
    for (const ArgPtr &p : k.ptrs) {
        Alloc *a = p.p ? find(p.p, 0) : nullptr;
        /* the key holds the first argument sharing its allocation (itself when none) */
        size_t alias = 0;
        while (allocs.size() > alias && allocs[alias] != a)
            alias++;
        allocs.push_back(a);
        key = fnv1a(key, &alias, sizeof alias);
        if (!p.p)
            continue;
        if (!a || (a->dev >= 0 && !((reach(dev) >> a->dev) & 1u))) {
            char what[300];
            describe(p.p, what, sizeof what);
            fatal("kernel %s (%s:%d) on cuda:%d: argument %d points to %s%s", k.name, k.file,
                  k.line, dev, p.index, what, a ? " (no peer access to that device)" : "");
        }
        if (!p.writable)
            continue;
        bool seen = false;
        for (const Region &r : regions)
            seen |= r.a == a;
        if (!seen)
            regions.push_back(Region{a, p.index, {}, {}});
    }
    const int first = s_check_first();
    const bool check = first == INT_MAX || (first > 0 && g_checked[key]++ < first);
    g_racecheck =
        !getenv("SW_CUDA_EMU_RACECHECK") || strcmp(getenv("SW_CUDA_EMU_RACECHECK"), "0") != 0;
    if (check)
        for (Region &r : regions)
            r.before.assign(r.a->base, r.a->base + r.a->bytes);

    /* Dynamic shared memory ends at a guard page. */
    if (k.shmem) {
        g_dyn_map_bytes = (k.shmem + S_PAGE - 1) / S_PAGE * S_PAGE + S_PAGE;
        void *m = mmap(nullptr, g_dyn_map_bytes, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED)
            fatal("cannot map %zu bytes of shared memory", k.shmem);
        g_dyn_map = (char *)m;
        mprotect(g_dyn_map + g_dyn_map_bytes - S_PAGE, S_PAGE, PROT_NONE);
        g_block.dyn = g_dyn_map + g_dyn_map_bytes - S_PAGE - k.shmem;
    } else {
        g_block.dyn = nullptr;
    }
    g_block.ndyn = k.shmem;
    g_block.bdim = k.block;
    g_block.gdim = k.grid;
    g_kernel = &k;
    g_kdev = dev;

    t_in_kernel = true;
    s_run_grid(k, false);
    t_in_kernel = false;
    s_redzones(k, dev, regions);
    if (check && !regions.empty()) {
        count("order_check");
        for (Region &r : regions) {
            r.first.assign(r.a->base, r.a->base + r.a->bytes);
            memcpy(r.a->base, r.before.data(), r.a->bytes);
        }
        s_run_grid(k, true);
        for (Region &r : regions) {
            if (!memcmp(r.a->base, r.first.data(), r.a->bytes))
                continue;
            size_t off = 0;
            while (r.a->base[off] == r.first[off])
                off++;
            g_cur = nullptr;
            snprintf(where, sizeof where,
                     "kernel %s (%s:%d) on cuda:%d, grid (%u,%u,%u) block "
                     "(%u,%u,%u)",
                     k.name, k.file, k.line, dev, k.grid.x, k.grid.y, k.grid.z, k.block.x,
                     k.block.y, k.block.z);
            fatal("%s: the result depends on the order of threads or blocks (a missing "
                  "__syncthreads or a race): argument %d's %zu-byte allocation differs at byte "
                  "%zu (0x%02x forward, 0x%02x reversed)",
                  where, r.index, r.a->bytes, off, (unsigned char)r.first[off],
                  (unsigned char)r.a->base[off]);
        }
    }
    g_kernel = nullptr;
    g_lane = nullptr;
    g_track = false;
    g_sh.clear();
    if (g_dyn_map) {
        munmap(g_dyn_map, g_dyn_map_bytes);
        g_dyn_map = nullptr;
        g_dyn_map_bytes = 0;
    }
}

/* ---- alignment (the kernels are compiled with -fsanitize=alignment) ------------------------ */

/* UBSan's description of a checked access (its ABI, ubsan_handlers.h). */
struct UbsanLoc {
    const char *file;
    uint32_t line, column;
};
struct UbsanType {
    uint16_t kind, info;
    char name[1];
};
struct UbsanMismatch {
    UbsanLoc loc;
    const UbsanType *type;
    unsigned char log_alignment;
    unsigned char check_kind; // 0 load, 1 store, 2 reference binding, 3 member access, ...
};

/* A GPU faults (716, misaligned address) on a load or store that is not
 * aligned to its size. The compiler's check sees the host address, and the
 * emulation places an allocation's end, not its start, at a page boundary:
 * so an address is judged by its offset from its allocation's start (which
 * cudaMalloc aligns to 256 bytes) or from the block's dynamic shared memory,
 * and by itself elsewhere (static shared arrays, registers, host memory). */
static void s_misaligned(const UbsanMismatch *d, uintptr_t ptr)
{
    const uintptr_t align = (uintptr_t)1 << d->log_alignment;
    if (!ptr || align <= 1)
        return;
    std::lock_guard<std::recursive_mutex> g(lock());
    uintptr_t off = ptr;
    const Alloc *a = find_mapping((const void *)ptr);
    const char *dyn = (const char *)g_block.dyn;
    if (a && ptr >= (uintptr_t)a->base)
        off = ptr - (uintptr_t)a->base;
    else if (g_kernel && dyn && ptr >= (uintptr_t)dyn && ptr < (uintptr_t)dyn + g_block.ndyn)
        off = ptr - (uintptr_t)dyn;
    if ((off & (align - 1)) == 0)
        return; // aligned on a GPU: only the emulation's placement made it look otherwise
    static const char *const kinds[] = {"load", "store", "reference", "member access"};
    char where[300], what[300] = "";
    s_where_str(where, sizeof where);
    if (a)
        describe((const void *)ptr, what, sizeof what);
    fatal("%s: a misaligned %s of %s (%zu-byte alignment) at %p%s%s, %s:%u (a GPU stops with "
          "error 716, misaligned address)",
          where, d->check_kind < 4 ? kinds[d->check_kind] : "access", d->type ? d->type->name : "?",
          (size_t)align, (void *)ptr, a ? ": " : "", what, d->loc.file ? d->loc.file : "?",
          d->loc.line);
}

} // namespace swemu

/* ThreadSanitizer's instrumentation of the kernels (tests/cudaemu/CMakeLists.txt):
 * the shared-memory race check, and nothing else (no ThreadSanitizer runtime). */
#define S_TSAN(n)                                                                                  \
    extern "C" void __tsan_read##n(void *p)                                                        \
    {                                                                                              \
        swemu::s_access(p, n, false);                                                              \
    }                                                                                              \
    extern "C" void __tsan_write##n(void *p)                                                       \
    {                                                                                              \
        swemu::s_access(p, n, true);                                                               \
    }                                                                                              \
    extern "C" void __tsan_unaligned_read##n(void *p)                                              \
    {                                                                                              \
        swemu::s_access(p, n, false);                                                              \
    }                                                                                              \
    extern "C" void __tsan_unaligned_write##n(void *p)                                             \
    {                                                                                              \
        swemu::s_access(p, n, true);                                                               \
    }
S_TSAN(1)
S_TSAN(2)
S_TSAN(4)
S_TSAN(8)
S_TSAN(16)
#undef S_TSAN
extern "C" void __tsan_read_range(void *p, unsigned long n)
{
    swemu::s_access(p, n, false);
}
extern "C" void __tsan_write_range(void *p, unsigned long n)
{
    swemu::s_access(p, n, true);
}
/* The atomics the instrumented code makes (std::shared_ptr's counts, static
 * initialisation guards): done, sequentially consistent, unseen by the check. */
#define S_TSAN_ATOMIC(bits, T)                                                                     \
    extern "C" T __tsan_atomic##bits##_load(const volatile T *p, int)                              \
    {                                                                                              \
        return __atomic_load_n(p, __ATOMIC_SEQ_CST);                                               \
    }                                                                                              \
    extern "C" void __tsan_atomic##bits##_store(volatile T *p, T v, int)                           \
    {                                                                                              \
        __atomic_store_n(p, v, __ATOMIC_SEQ_CST);                                                  \
    }                                                                                              \
    extern "C" T __tsan_atomic##bits##_fetch_add(volatile T *p, T v, int)                          \
    {                                                                                              \
        return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);                                         \
    }                                                                                              \
    extern "C" T __tsan_atomic##bits##_fetch_sub(volatile T *p, T v, int)                          \
    {                                                                                              \
        return __atomic_fetch_sub(p, v, __ATOMIC_SEQ_CST);                                         \
    }                                                                                              \
    extern "C" T __tsan_atomic##bits##_exchange(volatile T *p, T v, int)                           \
    {                                                                                              \
        return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST);                                        \
    }                                                                                              \
    extern "C" int __tsan_atomic##bits##_compare_exchange_strong(volatile T *p, T *e, T v, int,    \
                                                                 int)                              \
    {                                                                                              \
        return __atomic_compare_exchange_n(p, e, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);    \
    }
S_TSAN_ATOMIC(8, uint8_t)
S_TSAN_ATOMIC(16, uint16_t)
S_TSAN_ATOMIC(32, uint32_t)
S_TSAN_ATOMIC(64, uint64_t)
#undef S_TSAN_ATOMIC
extern "C" void __tsan_atomic_thread_fence(int)
{
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
}

extern "C" void __tsan_init(void)
{
}
extern "C" void __tsan_func_entry(void *)
{
}
extern "C" void __tsan_func_exit(void)
{
}
extern "C" void __tsan_vptr_update(void **, void *)
{
}
extern "C" void __tsan_vptr_read(void **)
{
}

extern "C" void __ubsan_handle_type_mismatch_v1(void *data, uintptr_t ptr)
{
    swemu::s_misaligned((const swemu::UbsanMismatch *)data, ptr);
}

extern "C" void __ubsan_handle_type_mismatch_v1_abort(void *data, uintptr_t ptr)
{
    swemu::s_misaligned((const swemu::UbsanMismatch *)data, ptr);
}
