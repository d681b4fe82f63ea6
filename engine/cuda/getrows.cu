/*
 * getrows.cu - the embedding lookup: row ctl.tok[r] of the embedding matrix,
 * dequantized with quant_math.h's element code (what sw_dequantize_row gives).
 */
#include "common.cuh"

/* Block (x, r): elements of output row r. A token id outside the matrix
 * (only possible after a NaN logit in the draft loop, which the host then
 * reports) gives a row of zeros instead of a read out of bounds. */
static __global__ void k_get_rows(int type, const uint8_t *emb, size_t row_bytes, int64_t n_in,
                                  int64_t n_rows, const int32_t *ctl, int n, float *out)
{
    const int r = blockIdx.y;
    const int32_t id = ctl[SW_CTL_POS + n + r];
    float *o = out + (size_t)r * n_in;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < n_in; j += stride)
        o[j] = id >= 0 && id < n_rows
                   ? sw_deq_elem((enum sw_type)type, emb + (size_t)id * row_bytes, j)
                   : 0.0f;
}

int swc_get_rows(sw_backend_t *be, const sw_weight_t *emb, const sw_buf_t *ctl, int n,
                 sw_buf_t *out)
{
    if (swc_use(be) != 0)
        return -1;
    const dim3 grid(swc_blocks(emb->n_in, 256) < 64 ? swc_blocks(emb->n_in, 256) : 64, n);
    k_get_rows<<<grid, 256, 0, swc_of(be)->stream>>>((int)emb->type, swc_ptr<uint8_t>(emb->buf),
                                                     emb->row_bytes, emb->n_in, emb->n_out,
                                                     swc_ptr<int32_t>(ctl), n, swc_ptr<float>(out));
    return swc_launched(be, "get_rows");
}
