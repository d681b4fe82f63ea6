/*
 * backend_cuda.cu - the CUDA backend: device selection, buffers, copies,
 * CUDA graphs, hand-over between GPUs (NCCL or peer copies) and the table of
 * operations whose kernels live in the other files of this folder. The
 * helpers the kernels' launchers share with this file (errors, scratch
 * areas, forgetting graphs) are in context.cu, so that the launchers never
 * call back into this file.
 *
 * Graphs: graph_run(key) runs a step's operations eagerly the first time it
 * sees key (so that every scratch area reaches its size outside a capture),
 * records them into a CUDA graph the second time, and replays the graph from
 * then on. The operations read per-step values (slots, positions, tokens)
 * from the row control block in device memory, so one graph serves every
 * step of the same shape. The KV caches are per session: a recorded step's
 * attention reads their addresses from the cache table (kv_dev), which a
 * dry run of the step's operations (s_dry_ops: nothing runs, attention
 * notes its caches) refills before every launch; the key leaves the session
 * out, so one graph serves every session of a model, and closing a session
 * forgets nothing.
 */
#include "backend_cuda.h"
#include "common.cuh"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libs.cuh"

/* A link from this backend to another for hidden-state hand-over. */
struct swc_peer {
    swc *other;        // the receiving backend (its device and stream)
    int to;            // its device
    cudaEvent_t done;  // this device: recorded on this stream after a copy
    cudaEvent_t ready; // the other device: recorded on its stream before a copy
#ifdef SW_HAVE_NCCL
    ncclComm_t comm[2]; // rank 0 = this device, rank 1 = the other
    int have_comm;
#endif
    swc_peer *next;
};

static int s_set_device(sw_backend_t *be)
{
    return swc_use(be);
}

/* ---- memory ---------------------------------------------------------------------------- */

static sw_buf_t *s_buf_alloc(sw_backend_t *be, size_t bytes)
{
    if (s_set_device(be) != 0)
        return NULL;
    swc_buf *b = (swc_buf *)calloc(1, sizeof *b);
    if (!b)
        return NULL;
    cudaError_t e = cudaMalloc((void **)&b->d, bytes ? bytes : 1);
    if (e == cudaSuccess)
        e = cudaMemsetAsync(b->d, 0, bytes, swc_of(be)->stream);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(swc_of(be)->stream);
    if (e != cudaSuccess) {
        cudaGetLastError();
        swc_fail_cuda(be, "allocating a buffer", e);
        if (b->d)
            cudaFree(b->d);
        free(b);
        return NULL;
    }
    b->bytes = bytes;
    b->owned = 1;
    return (sw_buf_t *)(void *)b;
}

static sw_buf_t *s_buf_weight(sw_backend_t *be, const void *host, size_t bytes)
{
    sw_buf_t *b = s_buf_alloc(be, bytes);
    if (!b)
        return NULL;
    cudaError_t e = cudaMemcpy(swc_b(b)->d, host, bytes, cudaMemcpyHostToDevice);
    if (e != cudaSuccess) {
        swc_fail_cuda(be, "copying a weight to the GPU", e);
        cudaFree(swc_b(b)->d);
        cudaGetLastError();
        free(b);
        return NULL;
    }
    return b;
}

static sw_buf_t *s_buf_view(sw_backend_t *be, sw_buf_t *parent, size_t off, size_t bytes)
{
    (void)be;
    swc_buf *p = swc_b(parent);
    if (off > p->bytes || bytes > p->bytes - off)
        return NULL;
    swc_buf *b = (swc_buf *)calloc(1, sizeof *b);
    if (!b)
        return NULL;
    b->d = p->d + off;
    b->bytes = bytes;
    return (sw_buf_t *)(void *)b;
}

static void s_buf_free(sw_backend_t *be, sw_buf_t *buf)
{
    if (!buf)
        return;
    swc_buf *b = swc_b(buf);
    if (b->owned) {
        cudaSetDevice(swc_of(be)->dev);
        cudaFree(b->d);
        cudaGetLastError(); // nothing to report from a free: no later launch must see it
    }
    free(b);
}

static int s_upload(sw_backend_t *be, sw_buf_t *dst, size_t off, const void *src, size_t n)
{
    swc_buf *b = swc_b(dst);
    if (off > b->bytes || n > b->bytes - off)
        return sw_backend_fail(be, "cuda: upload of %zu bytes at %zu overruns a %zu-byte buffer", n,
                               off, b->bytes);
    if (s_set_device(be) != 0)
        return -1;
    /* From pageable memory the copy is staged before this returns: src may be reused. */
    SWC_CHECK(be, cudaMemcpyAsync(b->d + off, src, n, cudaMemcpyHostToDevice, swc_of(be)->stream));
    return 0;
}

static int s_download(sw_backend_t *be, void *dst, const sw_buf_t *src, size_t off, size_t n)
{
    swc *c = swc_of(be);
    swc_buf *b = swc_b(src);
    if (off > b->bytes || n > b->bytes - off)
        return sw_backend_fail(be, "cuda: download of %zu bytes at %zu overruns a %zu-byte buffer",
                               n, off, b->bytes);
    if (s_set_device(be) != 0)
        return -1;
    /* Small copies (tokens, hidden states, logits of a few rows) go through pinned memory. */
    if (n <= ((size_t)64 << 20)) {
        if (n > c->pinned_bytes) {
            if (c->pinned)
                cudaFreeHost(c->pinned);
            c->pinned = NULL;
            c->pinned_bytes = 0;
            size_t want = n < ((size_t)1 << 20) ? ((size_t)1 << 20) : n;
            SWC_CHECK(be, cudaMallocHost(&c->pinned, want));
            c->pinned_bytes = want;
        }
        SWC_CHECK(be, cudaMemcpyAsync(c->pinned, b->d + off, n, cudaMemcpyDeviceToHost, c->stream));
        SWC_CHECK(be, cudaStreamSynchronize(c->stream));
        memcpy(dst, c->pinned, n);
        return 0;
    }
    SWC_CHECK(be, cudaMemcpyAsync(dst, b->d + off, n, cudaMemcpyDeviceToHost, c->stream));
    SWC_CHECK(be, cudaStreamSynchronize(c->stream));
    return 0;
}

static int s_sync(sw_backend_t *be)
{
    if (s_set_device(be) != 0)
        return -1;
    SWC_CHECK(be, cudaStreamSynchronize(swc_of(be)->stream));
    return 0;
}

/* ---- graphs ------------------------------------------------------------------------------ */

/* What a step's operations do in a dry run: nothing, except that attention
 * notes the caches it would use in the cache table (kv_host). An operation
 * added to the table without a dry version here would launch its kernels in
 * the dry run: swc_launched then fails the step (c->dry). */
static int s_dry_get_rows(sw_backend_t *, const sw_weight_t *, const sw_buf_t *, int, sw_buf_t *)
{
    return 0;
}
static int s_dry_rmsnorm(sw_backend_t *, const sw_buf_t *, const sw_buf_t *, int, int, float,
                         sw_buf_t *)
{
    return 0;
}
static int s_dry_matmul(sw_backend_t *, int, const sw_weight_t *const *, const sw_buf_t *const *,
                        const sw_buf_t *, int, int, sw_buf_t *const *, int)
{
    return 0;
}
static int s_dry_rope(sw_backend_t *, sw_buf_t *, const sw_buf_t *, int, int, int, int,
                      const sw_buf_t *, int)
{
    return 0;
}
static int s_dry_head_norm(sw_backend_t *, sw_buf_t *, int, int, int, const sw_buf_t *, float)
{
    return 0;
}
static int s_dry_attention(sw_backend_t *be, const sw_attn_args_t *a)
{
    swc *c = swc_of(be);
    if (c->kv_n >= SWC_KV_TAB)
        return sw_backend_fail(be, "cuda:%d: a step of more than %d attention calls", c->dev,
                               SWC_KV_TAB);
    c->kv_host[2 * c->kv_n] = swc_b(a->k_cache)->d;
    c->kv_host[2 * c->kv_n + 1] = swc_b(a->v_cache)->d;
    c->kv_n++;
    return 0;
}
static int s_dry_add(sw_backend_t *, sw_buf_t *, const sw_buf_t *, size_t)
{
    return 0;
}
static int s_dry_scale(sw_backend_t *, sw_buf_t *, size_t, float)
{
    return 0;
}
static int s_dry_moe(sw_backend_t *, const sw_moe_args_t *)
{
    return 0;
}
static int s_dry_argmax(sw_backend_t *, const sw_buf_t *, int, sw_buf_t *, size_t, sw_buf_t *,
                        sw_buf_t *, size_t)
{
    return 0;
}

/* The backend's table with the operations above (made from it once, thread-safely). */
static const sw_backend_ops_t *s_dry_ops(const sw_backend_ops_t *real)
{
    static const sw_backend_ops_t dry = [real]() {
        sw_backend_ops_t t = *real;
        t.get_rows = s_dry_get_rows;
        t.rmsnorm = s_dry_rmsnorm;
        t.matmul = s_dry_matmul;
        t.rope = s_dry_rope;
        t.head_norm = s_dry_head_norm;
        t.attention = s_dry_attention;
        t.add = s_dry_add;
        t.swiglu = s_dry_add;
        t.scale = s_dry_scale;
        t.geglu = s_dry_add;
        t.moe = s_dry_moe;
        t.argmax = s_dry_argmax;
        return t;
    }();
    return &dry;
}

static swc_graph *s_graph_slot(swc *c, uint64_t key)
{
    swc_graph *free_slot = NULL, *oldest = NULL;
    for (int i = 0; i < SWC_MAX_GRAPHS; i++) {
        swc_graph *g = &c->graphs[i];
        if (g->key == key)
            return g;
        if (!g->key && !free_slot)
            free_slot = g;
        if (g->key && (!oldest || g->last_use < oldest->last_use))
            oldest = g;
    }
    swc_graph *g = free_slot ? free_slot : oldest;
    if (g->state == 2)
        cudaGraphExecDestroy(g->exec);
    memset(g, 0, sizeof *g);
    g->key = key;
    return g;
}

/* The cache table of the step (kv_host, filled by recording or a dry run), then the graph. */
static int s_graph_launch(sw_backend_t *be, const swc_graph *g)
{
    swc *c = swc_of(be);
    /* From pageable memory: taken before this returns, so the next step may refill kv_host. */
    if (g->kv_n > 0)
        SWC_CHECK(be, cudaMemcpyAsync(c->kv_dev, c->kv_host, (size_t)g->kv_n * 2 * sizeof(void *),
                                      cudaMemcpyHostToDevice, c->stream));
    SWC_CHECK(be, cudaGraphLaunch(g->exec, c->stream));
    c->n_replayed++;
    return 0;
}

static int s_graph_run(sw_backend_t *be, uint64_t key, int (*record)(void *ctx), void *ctx)
{
    swc *c = swc_of(be);
    if (s_set_device(be) != 0)
        return -1;
    if (!c->use_graphs || key == 0)
        return record(ctx);
    swc_graph *g = s_graph_slot(c, key);
    g->last_use = ++c->use_clock;
    if (g->state == 2) {
        /* The step's caches: a dry run of its operations notes them. */
        const sw_backend_ops_t *real = be->ops;
        c->kv_n = 0;
        c->dry = 1;
        be->ops = s_dry_ops(real);
        const int rc = record(ctx);
        be->ops = real;
        c->dry = 0;
        if (rc != 0)
            return rc;
        if (c->kv_n != g->kv_n) // the key did not identify the step: never record it
            return sw_backend_fail(be,
                                   "cuda:%d: a step of %d attention calls replays a graph "
                                   "of %d",
                                   c->dev, c->kv_n, g->kv_n);
        return s_graph_launch(be, g);
    }
    if (g->state != 1) { // first sight (or never record): run the operations directly
        if (g->state == 0)
            g->state = 1;
        return record(ctx);
    }
    /* Second sight: record. */
    cudaGraph_t graph = NULL;
    SWC_CHECK(be, cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal));
    c->recording = 1;
    c->in_graph = 1;
    c->kv_n = 0;
    c->capture_broken = 0;
    int rc = record(ctx);
    c->recording = 0;
    c->in_graph = 0;
    cudaError_t e = cudaStreamEndCapture(c->stream, &graph);
    if (rc != 0 || e != cudaSuccess || !graph) {
        cudaGetLastError();
        if (graph)
            cudaGraphDestroy(graph);
        if (!c->capture_broken && rc != 0)
            return rc;
        /* The step cannot be captured (e.g. it needed a larger scratch area):
         * run it directly now and for good. */
        SW_DEBUG("cuda:%d: a step could not be recorded as a graph (%s); running it directly",
                 c->dev, e != cudaSuccess ? cudaGetErrorString(e) : be->err);
        be->err[0] = 0;
        g->state = -1;
        return record(ctx);
    }
    e = cudaGraphInstantiate(&g->exec, graph, 0);
    cudaGraphDestroy(graph);
    if (e != cudaSuccess) {
        cudaGetLastError();
        g->state = -1;
        return record(ctx);
    }
    g->state = 2;
    g->kv_n = c->kv_n;
    c->n_recorded++;
    return s_graph_launch(be, g);
}

static void s_graph_reset(sw_backend_t *be)
{
    cudaSetDevice(swc_of(be)->dev);
    swc_graphs_reset(be);
    cudaGetLastError();
}

/* ---- hand-over between GPUs ---------------------------------------------------------------- */

/* The events of a link: done on this device, ready on the other's (an event
 * is recorded only on a stream of the device it was made on). 0 or -1. */
static int s_peer_events(swc *c, swc_peer *p)
{
    cudaError_t e = cudaEventCreateWithFlags(&p->done, cudaEventDisableTiming);
    if (e == cudaSuccess && (e = cudaSetDevice(p->to)) == cudaSuccess)
        e = cudaEventCreateWithFlags(&p->ready, cudaEventDisableTiming);
    cudaSetDevice(c->dev);
    if (e == cudaSuccess)
        return 0;
    cudaGetLastError();
    if (p->done)
        cudaEventDestroy(p->done);
    return -1;
}

static swc_peer *s_peer(sw_backend_t *be, swc *other)
{
    swc *c = swc_of(be);
    const int to = other->dev;
    for (swc_peer *p = c->peers; p; p = p->next)
        if (p->other == other)
            return p;
    swc_peer *p = (swc_peer *)calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->other = other;
    p->to = to;
    if (s_peer_events(c, p) != 0) {
        free(p);
        return NULL;
    }
    int can = 0;
    if (cudaDeviceCanAccessPeer(&can, c->dev, to) == cudaSuccess && can) {
        cudaError_t e = cudaDeviceEnablePeerAccess(to, 0);
        if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled)
            SW_DEBUG("cuda:%d: no peer access to cuda:%d (%s)", c->dev, to, cudaGetErrorString(e));
        cudaGetLastError();
    }
#ifdef SW_HAVE_NCCL
    const char *why = "";
    const swc_nccl *nc = c->nccl && to != c->dev ? swc_nccl_get(&why) : NULL;
    if (nc) {
        int devs[2] = {c->dev, to};
        ncclResult_t r = nc->comm_init_all(p->comm, 2, devs);
        if (r == ncclSuccess) {
            p->have_comm = 1;
            SW_INFO("cuda:%d -> cuda:%d: hidden states move over NCCL", c->dev, to);
        } else {
            SW_WARN("cuda:%d -> cuda:%d: NCCL did not start (%s); using peer copies", c->dev, to,
                    nc->error_string(r));
        }
        cudaSetDevice(c->dev);
    } else if (c->nccl && to != c->dev) {
        SW_INFO("cuda:%d -> cuda:%d: no NCCL (%s); using peer copies", c->dev, to, why);
    }
#endif
    p->next = c->peers;
    c->peers = p;
    return p;
}

static int s_transfer(sw_backend_t *be, const sw_buf_t *src, size_t src_off, sw_backend_t *to,
                      sw_buf_t *dst, size_t dst_off, size_t bytes)
{
    swc *a = swc_of(be), *b = swc_of(to);
    swc_buf *s = swc_b(src), *d = swc_b(dst);
    if (src_off > s->bytes || bytes > s->bytes - src_off || dst_off > d->bytes ||
        bytes > d->bytes - dst_off)
        return sw_backend_fail(be, "cuda: a %zu-byte copy between GPUs overruns its buffers",
                               bytes);
    if (s_set_device(be) != 0)
        return -1;
    swc_peer *p = s_peer(be, b);
    if (!p)
        return sw_backend_fail(be, "cuda:%d: cannot link to cuda:%d", a->dev, b->dev);
#ifdef SW_HAVE_NCCL
    if (p->have_comm && a->dev != b->dev) {
        const swc_nccl *nc = swc_nccl_get(NULL); // loaded: the link was made with it
        ncclResult_t r = nc->group_start();
        if (r == ncclSuccess)
            r = nc->send(s->d + src_off, bytes, ncclUint8, 1, p->comm[0], a->stream);
        if (r == ncclSuccess)
            r = nc->recv(d->d + dst_off, bytes, ncclUint8, 0, p->comm[1], b->stream);
        ncclResult_t r2 = nc->group_end();
        if (r != ncclSuccess || r2 != ncclSuccess)
            return sw_backend_fail(be, "cuda:%d -> cuda:%d: NCCL: %s", a->dev, b->dev,
                                   nc->error_string(r != ncclSuccess ? r : r2));
        a->n_nccl++;
        return 0;
    }
#endif
    /* A peer copy on this stream, after the receiving stream's work so far
     * (the receiver may still read the previous chunk from dst: forward.c
     * synchronises only for logits); the receiving stream waits for it. */
    SWC_CHECK(be, cudaSetDevice(b->dev));
    cudaError_t e = cudaEventRecord(p->ready, b->stream);
    cudaSetDevice(a->dev);
    if (e != cudaSuccess)
        return swc_fail_cuda(be, "cudaEventRecord on the receiving GPU", e);
    SWC_CHECK(be, cudaStreamWaitEvent(a->stream, p->ready, 0));
    SWC_CHECK(
        be, cudaMemcpyPeerAsync(d->d + dst_off, b->dev, s->d + src_off, a->dev, bytes, a->stream));
    SWC_CHECK(be, cudaEventRecord(p->done, a->stream));
    SWC_CHECK(be, cudaSetDevice(b->dev));
    e = cudaStreamWaitEvent(b->stream, p->done, 0);
    cudaSetDevice(a->dev);
    if (e != cudaSuccess)
        return swc_fail_cuda(be, "cudaStreamWaitEvent", e);
    a->n_peer++;
    return 0;
}

static int64_t s_mem_free(sw_backend_t *be)
{
    size_t free_b = 0, total = 0;
    if (cudaSetDevice(swc_of(be)->dev) != cudaSuccess ||
        cudaMemGetInfo(&free_b, &total) != cudaSuccess) {
        cudaGetLastError();
        return -1;
    }
    return (int64_t)free_b;
}

/* ---- lifecycle ------------------------------------------------------------------------------ */

static void s_destroy(sw_backend_t *be)
{
    swc *c = swc_of(be);
    if (!c)
        return;
    cudaSetDevice(c->dev);
    if (c->stream)
        cudaStreamSynchronize(c->stream);
    swc_graphs_reset(be);
    while (c->peers) {
        swc_peer *p = c->peers;
        c->peers = p->next;
#ifdef SW_HAVE_NCCL
        if (p->have_comm) {
            const swc_nccl *nc = swc_nccl_get(NULL);
            nc->comm_destroy(p->comm[0]);
            nc->comm_destroy(p->comm[1]);
        }
#endif
        cudaEventDestroy(p->done);
        cudaSetDevice(p->to); // an event is destroyed on its device
        cudaEventDestroy(p->ready);
        cudaSetDevice(c->dev);
        free(p);
    }
    cudaSetDevice(c->dev);
    swc_gemm_free(c);
    for (int i = 0; i < SWC_SCRATCH_COUNT; i++)
        if (c->scratch[i])
            cudaFree(c->scratch[i]);
    cudaFree(c->kv_dev);
    if (c->gelu)
        cudaFree(c->gelu);
    free(c->kv_host);
    if (c->pinned)
        cudaFreeHost(c->pinned);
    if (c->stream)
        cudaStreamDestroy(c->stream);
    cudaGetLastError(); // what failed here has no one to report to
    free(c);
    be->impl = NULL;
}

static const sw_backend_ops_t s_cuda_ops = {
    /* name */ "cuda",
    /* destroy */ s_destroy,
    /* buf_alloc */ s_buf_alloc,
    /* buf_weight */ s_buf_weight,
    /* buf_view */ s_buf_view,
    /* buf_free */ s_buf_free,
    /* upload */ s_upload,
    /* download */ s_download,
    /* get_rows */ swc_get_rows,
    /* rmsnorm */ swc_rmsnorm,
    /* matmul */ swc_matmul,
    /* rope */ swc_rope,
    /* head_norm */ swc_head_norm,
    /* attention */ swc_attention,
    /* add */ swc_add,
    /* swiglu */ swc_swiglu,
    /* argmax */ swc_argmax,
    /* sync */ s_sync,
    /* kv_move */ swc_kv_move,
    /* graph_run */ s_graph_run,
    /* graph_reset */ s_graph_reset,
    /* transfer */ s_transfer,
    /* mem_free */ s_mem_free,
    /* scale */ swc_scale,
    /* geglu */ swc_geglu,
    /* moe */ swc_moe,
    /* attn_swa */ 1,
    /* copy2d */ swc_copy2d,
    /* attn_q8_0 */ 0,
};

int sw_cuda_devices(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
}

static int s_env_int(const char *name, int dflt)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return dflt;
    if (!strcmp(v, "off") || !strcmp(v, "no"))
        return 0;
    char *end;
    long x = strtol(v, &end, 10);
    return *end || x < 0 || x > 1 << 20 ? dflt : (int)x;
}

/*
 * Why cudaGetDeviceCount failed, as the advice a user needs: the runtime says
 * "CUDA driver version is insufficient" also where no NVIDIA driver is
 * installed at all, so the kernel module's /proc file tells the two apart.
 */
static void s_no_driver_text(int dev, cudaError_t e, char *err, size_t err_len)
{
    const char *proc = getenv("SW_NVIDIA_PROC"); /* tests point it elsewhere */
    if (!proc || !*proc)
        proc = "/proc/driver/nvidia/version";
    char ver[256] = "";
    FILE *f = fopen(proc, "r");
    if (f) {
        if (!fgets(ver, sizeof ver, f))
            ver[0] = 0;
        fclose(f);
        ver[strcspn(ver, "\n")] = 0;
    }
    if (!f)
        snprintf(err, err_len,
                 "cuda:%d: no NVIDIA driver on this machine (%s not found): install the NVIDIA "
                 "driver, or use --backend cpu",
                 dev, proc);
    else if (e == cudaErrorNoDevice)
        snprintf(err, err_len,
                 "cuda:%d: the NVIDIA driver sees no GPU (check nvidia-smi and "
                 "CUDA_VISIBLE_DEVICES), or use --backend cpu",
                 dev);
    else
        snprintf(err, err_len,
                 "cuda:%d: the NVIDIA driver cannot run this build (%s; driver: %.120s): update "
                 "the driver, or use --backend cpu",
                 dev, cudaGetErrorString(e), ver);
}

sw_backend_t *sw_backend_cuda_new(int dev, char *err, size_t err_len)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        cudaGetLastError();
        s_no_driver_text(dev, e, err, err_len);
        return NULL;
    }
    if (dev < 0 || dev >= n) {
        snprintf(err, err_len, "cuda:%d: no such GPU (%d visible%s)", dev, n,
                 n ? ", numbered from 0" : "");
        return NULL;
    }
    cudaDeviceProp prop;
    if ((e = cudaSetDevice(dev)) != cudaSuccess ||
        (e = cudaGetDeviceProperties(&prop, dev)) != cudaSuccess) {
        cudaGetLastError();
        snprintf(err, err_len, "cuda:%d: %s", dev, cudaGetErrorString(e));
        return NULL;
    }
    sw_backend_t *be = (sw_backend_t *)calloc(1, sizeof *be);
    swc *c = (swc *)calloc(1, sizeof *c);
    if (!be || !c) {
        free(be);
        free(c);
        snprintf(err, err_len, "out of memory");
        return NULL;
    }
    c->dev = dev;
    c->kv_host = (void **)calloc(2 * SWC_KV_TAB, sizeof(void *));
    if (!c->kv_host) {
        snprintf(err, err_len, "out of memory");
        free(be);
        free(c);
        return NULL;
    }
    if ((e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking)) != cudaSuccess ||
        (e = cudaMalloc((void **)&c->kv_dev, 2 * SWC_KV_TAB * sizeof(void *))) != cudaSuccess) {
        cudaGetLastError();
        if (swc_sticky(e))
            snprintf(err, err_len,
                     "cuda:%d: the GPU failed for good earlier in this process (%s, error %d); "
                     "restart the process to use it again",
                     dev, cudaGetErrorString(e), (int)e);
        else
            snprintf(err, err_len, "cuda:%d: cannot create a stream: %s", dev,
                     cudaGetErrorString(e));
        if (c->stream)
            cudaStreamDestroy(c->stream);
        free(c->kv_host);
        free(be);
        free(c);
        return NULL;
    }
    c->use_graphs = s_env_int("SW_CUDA_GRAPHS", 1) != 0;
    c->seq_sums = s_env_int("SW_CUDA_SEQ_SUMS", 0) != 0;
    c->gemm_rows = s_env_int("SW_CUDA_GEMM", 64);
    c->nccl = s_env_int("SW_NCCL", 1) != 0;
    c->attn_scratch_max = (size_t)s_env_int("SW_CUDA_ATTN_MIB", 256) << 20;
    if (c->attn_scratch_max == 0)
        c->attn_scratch_max = 1; // one row per pass
    c->sm_count = prop.multiProcessorCount;
    c->mem_total = prop.totalGlobalMem;
    be->ops = &s_cuda_ops;
    be->impl = c;
    be->max_rows = 512;
    snprintf(be->name, sizeof be->name, "cuda:%d", dev);
    snprintf(be->desc, sizeof be->desc, "cuda:%d (%.60s, %.0f GiB, sm_%d%d)", dev, prop.name,
             (double)prop.totalGlobalMem / (1u << 30), prop.major, prop.minor);
    return be;
}

void sw_cuda_paths(sw_backend_t *be, sw_cuda_paths_t *out)
{
    /* the members of a group, or the backend itself (read here rather than
     * through sw_backend_devices: backend.c calls into this file, and the
     * object files must not call each other in a circle, test_layers) */
    sw_backend_t *one[1] = {be};
    sw_backend_t **devs = be->n_members > 0 ? be->members : one;
    const int n = be->n_members > 0 ? be->n_members : 1;
    for (int i = 0; i < n; i++) {
        if (devs[i]->ops != &s_cuda_ops)
            continue;
        const swc *c = swc_of(devs[i]);
        out->gemm += c->n_gemm;
        out->nccl += c->n_nccl;
        out->peer += c->n_peer;
        out->recorded += c->n_recorded;
        out->replayed += c->n_replayed;
    }
}

double sw_cuda_measure_copy(int dev)
{
    const size_t bytes = (size_t)1 << 30;
    void *a = NULL, *b = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    float ms = 0;
    double gbps = 0;
    if (cudaSetDevice(dev) != cudaSuccess || cudaMalloc(&a, bytes) != cudaSuccess ||
        cudaMalloc(&b, bytes) != cudaSuccess || cudaEventCreate(&e0) != cudaSuccess ||
        cudaEventCreate(&e1) != cudaSuccess)
        goto out;
    if (cudaMemset(a, 1, bytes) != cudaSuccess ||
        cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice) != cudaSuccess)
        goto out;
    cudaEventRecord(e0, 0);
    for (int i = 0; i < 10; i++)
        cudaMemcpyAsync(i & 1 ? a : b, i & 1 ? b : a, bytes, cudaMemcpyDeviceToDevice, 0);
    cudaEventRecord(e1, 0);
    if (cudaEventSynchronize(e1) == cudaSuccess &&
        cudaEventElapsedTime(&ms, e0, e1) == cudaSuccess && ms > 0)
        gbps = 10.0 * 2.0 * (double)bytes / (ms * 1e-3) / 1e9;
out:
    cudaGetLastError();
    if (e0)
        cudaEventDestroy(e0);
    if (e1)
        cudaEventDestroy(e1);
    cudaFree(a);
    cudaFree(b);
    return gbps;
}
