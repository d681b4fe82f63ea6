/*
 * rope.cu - rotary embedding from the model's cos/sin table (computed on the
 * host with the CPU's formula), so the angles are the CPU's to the bit.
 */
#include "common.cuh"

/* Block (h, r): the n_rot / 2 pairs of head h of row r. */
static __global__ void k_rope(float *x, const int32_t *ctl, int n_heads, int hd, int n_rot,
                              const float *cs, int neox)
{
    const int r = blockIdx.y, h = blockIdx.x;
    const int32_t pos = ctl[SW_CTL_POS + r];
    const float *t = cs + (size_t)pos * n_rot;
    float *v = x + ((size_t)r * n_heads + h) * hd;
    for (int i = threadIdx.x; i < n_rot / 2; i += blockDim.x) {
        const int a = neox ? i : 2 * i;
        const int b = neox ? i + n_rot / 2 : 2 * i + 1;
        sw_rope_pair(&v[a], &v[b], t[2 * i], t[2 * i + 1]);
    }
}

int swc_rope(sw_backend_t *be, sw_buf_t *x, const sw_buf_t *ctl, int n, int n_heads, int head_dim,
             int n_rot, const sw_buf_t *cs, int neox)
{
    if (swc_use(be) != 0)
        return -1;
    k_rope<<<dim3(n_heads, n), 64, 0, swc_of(be)->stream>>>(
        swc_ptr<float>(x), swc_ptr<int32_t>(ctl), n_heads, head_dim, n_rot, swc_ptr<float>(cs),
        neox);
    return swc_launched(be, "rope");
}
