/*
 * context.cu - the helpers every file of the CUDA backend calls (declared in
 * common.cuh): recording a CUDA error on the backend, checking a kernel
 * launch, the scratch areas grown on demand, and forgetting recorded graphs
 * (which a scratch area that moves makes stale). backend_cuda.cu and the
 * kernels' launchers (argmax.cu, attention.cu, ...) call them; they call
 * nothing of those files.
 */
#include "common.cuh"

#include <string.h>

int swc_fail_cuda(sw_backend_t *be, const char *what, cudaError_t e)
{
    swc *c = swc_of(be);
    cudaGetLastError(); // reported now: the next launch's check must not see it again
    if (c && swc_sticky(e) && !c->dead) {
        c->dead = e;
        be->fatal = 1;
        return sw_backend_fail(be,
                               "cuda:%d: %s: %s (error %d): the GPU failed for good; restart "
                               "the process to use it again",
                               c->dev, what, cudaGetErrorString(e), (int)e);
    }
    return sw_backend_fail(be, "cuda:%d: %s: %s", c ? c->dev : -1, what, cudaGetErrorString(e));
}

int swc_use(sw_backend_t *be)
{
    const swc *c = swc_of(be);
    if (c->dead)
        return sw_backend_fail(be,
                               "cuda:%d: the GPU failed for good earlier (%s, error %d); restart "
                               "the process to use it again",
                               c->dev, cudaGetErrorString(c->dead), (int)c->dead);
    SWC_CHECK(be, cudaSetDevice(c->dev));
    return 0;
}

int swc_launched(sw_backend_t *be, const char *kernel)
{
    if (swc_of(be)->dry) // an operation s_dry_ops (backend_cuda.cu) does not stub
        return sw_backend_fail(be, "cuda:%d: %s launched during a graph's dry run", swc_of(be)->dev,
                               kernel);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return swc_fail_cuda(be, kernel, e);
    return 0;
}

void swc_graphs_reset(sw_backend_t *be)
{
    swc *c = swc_of(be);
    for (int i = 0; i < SWC_MAX_GRAPHS; i++) {
        if (c->graphs[i].state == 2)
            cudaGraphExecDestroy(c->graphs[i].exec);
        memset(&c->graphs[i], 0, sizeof c->graphs[i]);
    }
}

int swc_scratch(sw_backend_t *be, enum swc_scratch_id id, size_t bytes, void **out)
{
    swc *c = swc_of(be);
    if (bytes <= c->scratch_bytes[id]) {
        *out = c->scratch[id];
        return 0;
    }
    if (c->recording) {
        c->capture_broken = 1;
        return sw_backend_fail(be, "cuda:%d: scratch must grow inside a graph capture", c->dev);
    }
    /* Grow with headroom so that a slowly growing context does not reallocate every step. */
    size_t want = bytes + bytes / 4;
    void *p = NULL;
    if (c->scratch[id]) {
        SWC_CHECK(be, cudaStreamSynchronize(c->stream));
        cudaFree(c->scratch[id]);
        c->scratch[id] = NULL;
        c->scratch_bytes[id] = 0;
    }
    swc_graphs_reset(be); // recorded graphs point at the old area
    cudaError_t e = cudaMalloc(&p, want);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return sw_backend_fail(be, "cuda:%d: out of device memory for %zu bytes of scratch (%s)",
                               c->dev, want, cudaGetErrorString(e));
    }
    c->scratch[id] = p;
    c->scratch_bytes[id] = want;
    *out = p;
    return 0;
}
