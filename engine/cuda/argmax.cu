/*
 * argmax.cu - the greedy step of the draft loop: the first largest logit
 * (the CPU's rule: strictly larger wins, so the lowest index on ties) and,
 * on request, its softmax probability at temperature 1.
 *
 * A NaN or +inf logit makes the result -1, which the host reports as an
 * error (the CPU backend fails at once); -1 also reaches the next step's
 * embedding lookup, which then reads nothing out of bounds.
 *
 * The probability is summed in double with a tree, not left to right as on
 * the CPU: it only decides the draft model's confidence stop.
 */
#include "common.cuh"

#define S_THREADS 1024

static __device__ int s_better(float v, int i, float bv, int bi)
{
    return bi < 0 || v > bv || (v == bv && i < bi);
}

static __global__ void k_argmax(const float *x, int dim, int32_t *tok, int32_t *ids, float *prob)
{
    __shared__ float val[S_THREADS];
    __shared__ int idx[S_THREADS];
    __shared__ int bad;
    __shared__ double part[S_THREADS];
    if (threadIdx.x == 0)
        bad = 0;
    __syncthreads();
    float bv = -INFINITY;
    int bi = -1;
    for (int i = threadIdx.x; i < dim; i += S_THREADS) {
        const float v = x[i];
        if (isnan(v) || v == INFINITY) {
            bad = 1;
        } else if (bi < 0 || v > bv) {
            bv = v;
            bi = i;
        }
    }
    val[threadIdx.x] = bv;
    idx[threadIdx.x] = bi;
    __syncthreads();
    for (int w = S_THREADS / 2; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w && idx[threadIdx.x + w] >= 0 &&
            s_better(val[threadIdx.x + w], idx[threadIdx.x + w], val[threadIdx.x],
                     idx[threadIdx.x])) {
            val[threadIdx.x] = val[threadIdx.x + w];
            idx[threadIdx.x] = idx[threadIdx.x + w];
        }
        __syncthreads();
    }
    const float best = val[0];
    const int best_i = bad || best == -INFINITY ? -1 : idx[0];
    if (prob) {
        double p = 0.0;
        for (int i = threadIdx.x; i < dim; i += S_THREADS)
            p += exp((double)(x[i] - best));
        part[threadIdx.x] = p;
        __syncthreads();
        for (int w = S_THREADS / 2; w > 0; w >>= 1) {
            if ((int)threadIdx.x < w)
                part[threadIdx.x] += part[threadIdx.x + w];
            __syncthreads();
        }
    }
    if (threadIdx.x == 0) {
        if (tok)
            *tok = best_i;
        *ids = best_i;
        if (prob)
            *prob = best_i >= 0 ? (float)(1.0 / part[0]) : 0.0f;
    }
}

int swc_argmax(sw_backend_t *be, const sw_buf_t *x, int dim, sw_buf_t *tok, size_t tok_off,
               sw_buf_t *ids, sw_buf_t *prob, size_t ids_off)
{
    if (swc_use(be) != 0)
        return -1;
    k_argmax<<<1, S_THREADS, 0, swc_of(be)->stream>>>(
        swc_ptr<float>(x), dim, tok ? swc_ptr<int32_t>(tok) + tok_off : NULL,
        swc_ptr<int32_t>(ids) + ids_off, prob ? swc_ptr<float>(prob) + ids_off : NULL);
    return swc_launched(be, "argmax");
}
