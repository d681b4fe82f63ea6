/*
 * nccl.cc - libswemu_nccl.so, the emulated NCCL behind libs.cu's dlopen:
 * communicators over emulated devices (ncclCommInitAll) and point-to-point
 * send/recv inside groups, as copies between the devices' memory on their
 * streams with NCCL's ordering: a pair completes when both streams have
 * reached it (the send's stream waits for the receiver to arrive, the
 * receiver's stream for the copy). A send without its matching receive in
 * the same group (which would hang a real NCCL in one thread), a buffer
 * outside its communicator's device memory, a stream of another device, or a
 * send/recv inside a stream capture fail with ncclInvalidUsage or
 * ncclInvalidArgument and one line on stderr.
 */
#include "nccl.h"
#include "emu_impl.h"

#include <stdio.h>

using namespace swemu;

struct swemu_nccl_comm {
    int clique; // communicators made by one ncclCommInitAll
    int rank;
    int nranks;
    int dev;
};

struct P2P {
    bool send;
    char *buf;
    size_t bytes;
    int peer;
    ncclComm_t comm;
    Stream *s;
    bool matched;
};

static int g_cliques;
static thread_local int t_depth;
static thread_local std::vector<P2P> t_pending;

__attribute__((constructor)) static void s_loaded(void)
{
    std::lock_guard<std::recursive_mutex> g(lock());
    count("dlopen_nccl");
}

extern "C" {

const char *ncclGetErrorString(ncclResult_t r)
{
    switch (r) {
    case ncclSuccess:
        return "no error";
    case ncclInvalidArgument:
        return "invalid argument";
    case ncclInvalidUsage:
        return "invalid usage";
    default:
        return "internal error";
    }
}

ncclResult_t ncclCommInitAll(ncclComm_t *comm, int ndev, const int *devlist)
{
    std::lock_guard<std::recursive_mutex> g(lock());
    if (ndev < 1)
        return ncclInvalidArgument;
    for (int i = 0; i < ndev; i++) {
        const int d = devlist ? devlist[i] : i;
        if (d < 0 || d >= device_count())
            return ncclInvalidArgument;
        for (int j = 0; j < i; j++)
            if ((devlist ? devlist[j] : j) == d) // NCCL wants one rank per device
                return ncclInvalidUsage;
    }
    const int clique = ++g_cliques;
    for (int i = 0; i < ndev; i++)
        comm[i] = new swemu_nccl_comm{clique, i, ndev, devlist ? devlist[i] : i};
    return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
    std::lock_guard<std::recursive_mutex> g(lock());
    delete comm;
    return ncclSuccess;
}

ncclResult_t ncclGroupStart(void)
{
    t_depth++;
    return ncclSuccess;
}

static ncclResult_t s_fail(ncclResult_t r, const char *why)
{
    fprintf(stderr, "swemu: nccl: %s\n", why);
    t_pending.clear();
    return r;
}

/* Matches the group's sends with its receives and queues each pair. */
static ncclResult_t s_flush(void)
{
    for (P2P &x : t_pending) {
        if (!x.send)
            continue;
        P2P *r = nullptr;
        for (P2P &y : t_pending)
            if (!y.send && !y.matched && y.comm->clique == x.comm->clique &&
                y.comm->rank == x.peer && y.peer == x.comm->rank) {
                r = &y;
                break;
            }
        if (!r)
            return s_fail(ncclInvalidUsage, "a send without its receive in the group (a real "
                                            "NCCL would wait for it forever)");
        if (r->bytes != x.bytes)
            return s_fail(ncclInvalidUsage, "a send and its receive of different sizes");
        r->matched = x.matched = true;
        Stream *a = x.s, *b = r->s;
        const uint64_t b_before = b->enq;
        auto done = std::make_shared<bool>(false);
        char *src = x.buf, *dst = r->buf;
        const size_t n = x.bytes;
        Op send;
        send.kind = Op::HOST;
        send.what = "ncclSend";
        send.fn = [a, b, b_before, done, src, dst, n]() {
            run_until(b, b_before); // the receiver has arrived
            Access sa(find(src, n)), da(find(dst, n));
            memcpy(dst, src, n);
            *done = true;
        };
        enqueue(a, std::move(send));
        const uint64_t a_at = a->enq;
        Op recv;
        recv.kind = Op::HOST;
        recv.what = "ncclRecv";
        recv.fn = [a, a_at, done]() {
            run_until(a, a_at);
            if (!*done)
                fatal("nccl: a receive completed before its send");
        };
        enqueue(b, std::move(recv));
        count("nccl_send");
    }
    for (P2P &y : t_pending)
        if (!y.matched)
            return s_fail(ncclInvalidUsage, "a receive without its send in the group");
    t_pending.clear();
    return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void)
{
    std::lock_guard<std::recursive_mutex> g(lock());
    if (t_depth <= 0)
        return ncclInvalidUsage;
    if (--t_depth > 0)
        return ncclSuccess;
    return s_flush();
}

static ncclResult_t s_p2p(bool send, const void *buf, size_t count_, ncclDataType_t type, int peer,
                          ncclComm_t comm, cudaStream_t h)
{
    std::lock_guard<std::recursive_mutex> g(lock());
    const size_t size = type == ncclFloat32 ? 4 : 1;
    Stream *s = stream(h);
    if (!comm || !s || peer < 0 || peer >= comm->nranks || peer == comm->rank)
        return s_fail(ncclInvalidArgument, "a send/recv with a bad communicator, stream or peer");
    if (s->dev != comm->dev)
        return s_fail(ncclInvalidArgument, "a stream of another device than the communicator's");
    if (sticky_of(s->dev))
        return s_fail(ncclUnhandledCudaError, "the device failed for good (a fatal CUDA error)");
    if (s->capture)
        return s_fail(ncclInvalidUsage, "send/recv inside a stream capture is not emulated");
    Alloc *a = find(buf, count_ * size);
    if (!a || a->dev != comm->dev)
        return s_fail(ncclInvalidArgument, "a buffer outside the communicator's device memory");
    t_pending.push_back(P2P{send, (char *)buf, count_ * size, peer, comm, s, false});
    if (t_depth == 0)
        return s_flush();
    return ncclSuccess;
}

ncclResult_t ncclSend(const void *buf, size_t count_, ncclDataType_t type, int peer,
                      ncclComm_t comm, cudaStream_t s)
{
    return s_p2p(true, buf, count_, type, peer, comm, s);
}

ncclResult_t ncclRecv(void *buf, size_t count_, ncclDataType_t type, int peer, ncclComm_t comm,
                      cudaStream_t s)
{
    return s_p2p(false, buf, count_, type, peer, comm, s);
}

} // extern "C"
