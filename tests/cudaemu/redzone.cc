/*
 * redzone.cc - the shadow of the device allocations' red zones, which the
 * kernels' every load and store consults (exec.cc's s_access, through the
 * -fsanitize=thread instrumentation's hooks).
 *
 * runtime.cc places an allocation's end at a guard page; one that does not
 * fill its pages therefore starts inside its first page, after a red zone
 * (the bytes from the page's start to the allocation's). The shadow is a
 * hash table of those first pages (open addressing, linear probing, kept at
 * most a quarter full) behind a direct-mapped cache of the pages looked up
 * last (g_rz_cache, 64 entries by the page's low bits: the table is as big
 * as the allocations are many, the cache stays in L1). An access looks up
 * its page in the cache (emu_impl.h's redzone_of), on a miss in the table,
 * and touches a red zone when the page is a first page and the address is
 * below the allocation's start. O(1) an access, however many allocations
 * there are; a search of the allocations (find_mapping) only to describe an
 * error.
 *
 * Changed only under the runtime's lock (cudaMalloc, cudaFree), read by the
 * thread that runs a kernel, which holds that lock.
 */
#include "emu_impl.h"

#include <string.h>

#include <vector>

namespace swemu
{

static const uintptr_t S_PAGE_MASK = 4095;
static const uintptr_t S_REMOVED = 1; // a slot whose entry was removed (0: never used)

struct Slot {
    uintptr_t page; // the allocation's first page, 0 or S_REMOVED
    const Alloc *a; //
};
static std::vector<Slot> g_slots(64);
RzCache g_rz_cache[S_RZ_CACHE];
static size_t g_taken; // slots used or removed
static size_t g_live;  // entries

static inline size_t s_home(uintptr_t page, size_t mask)
{
    return (size_t)(((page >> 12) * 0x9E3779B97F4A7C15ull) >> 32) & mask;
}

static void s_put(std::vector<Slot> &t, uintptr_t page, const Alloc *a)
{
    const size_t mask = t.size() - 1;
    size_t i = s_home(page, mask);
    while (t[i].page != 0)
        i = (i + 1) & mask;
    t[i] = Slot{page, a};
}

void redzone_add(const Alloc *a)
{
    memset(g_rz_cache, 0, sizeof g_rz_cache); // the page may be cached as no first page
    if (a->base == a->data)
        return; // fills its pages: the guard page before it faults instead
    if ((g_taken + 1) * 4 > g_slots.size()) { // rehash without the removed slots
        size_t n = 64;
        while (n < 8 * (g_live + 1))
            n *= 2;
        std::vector<Slot> t(n);
        for (const Slot &s : g_slots)
            if (s.page > S_REMOVED)
                s_put(t, s.page, s.a);
        g_slots.swap(t);
        g_taken = g_live;
    }
    s_put(g_slots, (uintptr_t)a->data, a);
    g_taken++;
    g_live++;
}

void redzone_drop(const Alloc *a)
{
    memset(g_rz_cache, 0, sizeof g_rz_cache);
    if (a->base == a->data)
        return;
    const uintptr_t page = (uintptr_t)a->data;
    const size_t mask = g_slots.size() - 1;
    for (size_t i = s_home(page, mask); g_slots[i].page != 0; i = (i + 1) & mask)
        if (g_slots[i].page == page) {
            g_slots[i] = Slot{S_REMOVED, nullptr};
            g_live--;
            return;
        }
}

const Alloc *redzone_miss(uintptr_t x)
{
    const uintptr_t page = x & ~S_PAGE_MASK;
    const Slot *t = g_slots.data();
    const size_t mask = g_slots.size() - 1;
    RzCache &c = g_rz_cache[(x >> 12) & (S_RZ_CACHE - 1)];
    c = RzCache{page, page, nullptr}; // no first page: no address of it is below page
    for (size_t i = s_home(page, mask); t[i].page != 0; i = (i + 1) & mask)
        if (t[i].page == page) {
            c = RzCache{page, (uintptr_t)t[i].a->base, t[i].a};
            break;
        }
    return x < c.limit ? c.a : nullptr;
}

} // namespace swemu
