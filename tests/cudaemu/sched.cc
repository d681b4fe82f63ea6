/*
 * sched.cc - when the emulated GPUs run the work queued on their streams
 * (SW_CUDA_EMU_STREAMS, swemu_streams()). A GPU runs a stream's work in
 * order, but when, relative to the host and to the other streams, is up to
 * the hardware: only a host synchronisation and an event wait order it. Each
 * policy below is one legal schedule; code whose results depend on which one
 * ran has a race that a GPU may or may not show. The schedules are made by
 * the one host thread, deterministically (a failing seed replays the same
 * order), at operation granularity: when a stream is "eager" its operation
 * runs inside the call that queued it, when it is "late" it waits until the
 * host or another stream's wait needs it (runtime.cc, run_until).
 *
 *   lazy        every stream late (the default): a consumer that does not wait
 *               for its producer reads stale data
 *   eager       every stream runs its work at once: a producer that overwrites
 *               what an unfinished consumer still reads shows, when the
 *               consumer is the host's last wait
 *   late=D      the streams of device D late, every other eager: the
 *               adversarial order for hand-overs into D (the sender runs ahead
 *               of the receiver, which still reads the previous chunk)
 *   late=waiters  a stream that has waited for another stream's event is late
 *               from then on, every other eager: the same order for any
 *               hand-over, between devices or between two streams of one
 *   random=SEED each stream flips between eager and late at random (1 in 8
 *               operations) from SEED: random lags, reproducible by the seed
 */
#include "emu_impl.h"

#include <stdlib.h>
#include <string.h>

namespace swemu
{

enum Mode { S_LAZY, S_EAGER, S_LATE, S_WAITERS, S_RANDOM };

struct Sched {
    Mode mode = S_LAZY;
    int dev = -1;     // late=D
    uint64_t rng = 0; // random=SEED: the generator's state
};
static Sched g_sched;

static uint64_t s_next(uint64_t *x) // splitmix64
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

bool sched_set(const char *spec)
{
    Sched s;
    char *end = nullptr;
    if (!spec || !*spec || !strcmp(spec, "lazy")) {
        s.mode = S_LAZY;
    } else if (!strcmp(spec, "eager")) {
        s.mode = S_EAGER;
    } else if (!strcmp(spec, "late=waiters")) {
        s.mode = S_WAITERS;
    } else if (!strncmp(spec, "late=", 5)) {
        s.mode = S_LATE;
        const long d = strtol(spec + 5, &end, 10);
        if (end == spec + 5 || *end || d < 0 || d > 7)
            return false;
        s.dev = (int)d;
    } else if (!strncmp(spec, "random=", 7)) {
        s.mode = S_RANDOM;
        s.rng = strtoull(spec + 7, &end, 10);
        if (end == spec + 7 || *end)
            return false;
    } else {
        return false;
    }
    g_sched = s;
    return true;
}

bool sched_runs_now(Stream *s)
{
    switch (g_sched.mode) {
    case S_LAZY:
        return false;
    case S_EAGER:
        return true;
    case S_LATE:
        return s->dev != g_sched.dev;
    case S_WAITERS:
        return !s->waited;
    case S_RANDOM:
        if (s->sched_eager < 0 || (s_next(&g_sched.rng) & 7) == 0)
            s->sched_eager = (int)(s_next(&g_sched.rng) & 1);
        return s->sched_eager != 0;
    }
    return false;
}

} // namespace swemu

extern "C" int swemu_streams(const char *spec)
{
    std::lock_guard<std::recursive_mutex> g(swemu::lock());
    return swemu::sched_set(spec) ? 0 : -1;
}
