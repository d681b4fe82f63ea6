/*
 * kv.c - the KV cache of a model's layer range (kv.h): one K and one
 * transposed V buffer per layer on that layer's device, and per slot its
 * parent and position, which token trees need. Making a cache also makes
 * the model's rope tables cover its slots. Keeping a tree's accepted path
 * moves slots on the device (the backend's kv_move) and rewrites the
 * metadata; nothing is recomputed.
 */
#include "kv.h"

#include <stdlib.h>

#include "log.h"
#include "model_impl.h"

/* Makes the rope tables cover n_pos positions (kept at the largest size asked). */
static int s_rope_reserve(sw_model_t *m, int n_pos)
{
    if (n_pos <= m->rope_n)
        return 0;
    const int n_rot = m->hp.n_rot;
    const size_t bytes = (size_t)n_pos * (size_t)n_rot * sizeof(float);
    int swa = 0; // a sliding-window layer in the range: its table too
    for (int l = 0; l < m->end - m->begin; l++)
        swa |= m->layers[l].swa;
    float *cs = malloc(bytes), *cs_swa = swa ? malloc(bytes) : NULL;
    if (!cs || (swa && !cs_swa)) {
        free(cs);
        free(cs_swa);
        return -1;
    }
    sw_rope_table_ff(cs, n_pos, n_rot, m->hp.rope_base, m->hp.rope_freq_scale, m->rope_freqs);
    if (swa) // llama.cpp: the local layers' own base, no scaling
        sw_rope_table(cs_swa, n_pos, n_rot, m->hp.rope_base_swa, 1.0f);
    int rc = 0;
    for (int i = 0; i < m->n_dev && rc == 0; i++) {
        sw_dev_t *d = &m->devs[i];
        sw_buf_t *b = d->be->ops->buf_alloc(d->be, bytes);
        sw_buf_t *b2 = swa ? d->be->ops->buf_alloc(d->be, bytes) : NULL;
        if (!b || d->be->ops->upload(d->be, b, 0, cs, bytes) != 0 ||
            (swa && (!b2 || d->be->ops->upload(d->be, b2, 0, cs_swa, bytes) != 0))) {
            if (b)
                d->be->ops->buf_free(d->be, b);
            if (b2)
                d->be->ops->buf_free(d->be, b2);
            rc = -1;
            break;
        }
        sw_model_buf_free(d->be, &d->rope);
        sw_model_buf_free(d->be, &d->rope_swa);
        d->rope = b;
        d->rope_swa = b2;
        if (d->be->ops->graph_reset) // recorded graphs read the old table
            d->be->ops->graph_reset(d->be);
    }
    free(cs);
    free(cs_swa);
    if (rc == 0)
        m->rope_n = n_pos;
    return rc;
}

sw_kv_t *sw_kv_new(sw_model_t *m, int n_ctx)
{
    if (n_ctx < 1)
        return NULL;
    sw_kv_t *kv = calloc(1, sizeof *kv);
    if (!kv)
        return NULL;
    kv->m = m;
    kv->n_ctx = n_ctx;
    kv->n_layers = m->end - m->begin;
    kv->k = calloc((size_t)kv->n_layers, sizeof *kv->k);
    kv->v = calloc((size_t)kv->n_layers, sizeof *kv->v);
    kv->par = malloc((size_t)n_ctx * sizeof *kv->par);
    kv->pos = malloc((size_t)n_ctx * sizeof *kv->pos);
    if (!kv->k || !kv->v || !kv->par || !kv->pos)
        goto err;
    const size_t bytes = (size_t)n_ctx * m->hp.n_kv_head * m->hp.head_dim * sizeof(sw_f16);
    for (int i = 0; i < kv->n_layers; i++) {
        sw_backend_t *be = m->devs[m->layers[i].dev].be;
        kv->k[i] = be->ops->buf_alloc(be, bytes);
        kv->v[i] = be->ops->buf_alloc(be, bytes);
        if (!kv->k[i] || !kv->v[i])
            goto err;
    }
    /* The rope table covers every slot of the largest cache (after the cache
     * itself fits: the table is a small fraction of it). */
    if (s_rope_reserve(m, n_ctx) != 0)
        goto err;
    return kv;
err:
    sw_kv_free(&kv);
    return NULL;
}

void sw_kv_free(sw_kv_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    sw_kv_t *kv = *self_p;
    sw_model_t *m = kv->m;
    for (int i = 0; i < kv->n_layers; i++) {
        sw_backend_t *be = m->devs[m->layers[i].dev].be;
        if (kv->k && kv->k[i])
            be->ops->buf_free(be, kv->k[i]);
        if (kv->v && kv->v[i])
            be->ops->buf_free(be, kv->v[i]);
    }
    free(kv->k);
    free(kv->v);
    free(kv->par);
    free(kv->pos);
    free(kv);
    *self_p = NULL;
}

size_t sw_kv_bytes(const sw_model_t *m, int n_ctx)
{
    return (size_t)(m->end - m->begin) * 2 * (size_t)n_ctx * (size_t)m->hp.n_kv_head *
           (size_t)m->hp.head_dim * sizeof(sw_f16);
}

int sw_kv_len(const sw_kv_t *kv)
{
    return kv->len;
}

int sw_kv_capacity(const sw_kv_t *kv)
{
    return kv->n_ctx;
}

int sw_kv_truncate(sw_kv_t *kv, int n)
{
    if (n < 0 || n > kv->len)
        return -1;
    kv->len = n;
    if (kv->lin > n)
        kv->lin = n;
    return 0;
}

int sw_kv_pos(const sw_kv_t *kv, int s)
{
    return s >= 0 && s < kv->len ? kv->pos[s] : -1;
}

int sw_kv_parent(const sw_kv_t *kv, int s)
{
    return s >= 0 && s < kv->len ? kv->par[s] : -2;
}

int sw_kv_linear(const sw_kv_t *kv)
{
    return kv->lin;
}

void sw_kv_relin(sw_kv_t *kv)
{
    while (kv->lin < kv->len && kv->par[kv->lin] == kv->lin - 1 && kv->pos[kv->lin] == kv->lin)
        kv->lin++;
}

int sw_kv_keep(sw_kv_t *kv, int from, const int32_t *slots, int n, char *err, size_t err_len)
{
    sw_model_t *m = kv->m;
    if (from < 0 || from > kv->len || n < 0 || (int64_t)from + n > kv->len || (n && !slots)) {
        sw_errf(err, err_len, "model: keeping %d slots from %d of a %d-slot cache", n, from,
                kv->len);
        return -1;
    }
    int32_t dst[SW_CTL_TREE_MAX];
    if (n > SW_CTL_TREE_MAX) {
        sw_errf(err, err_len, "model: keeping %d tree slots (max %d)", n, SW_CTL_TREE_MAX);
        return -1;
    }
    int moved = 0;
    for (int j = 0; j < n; j++) {
        const int32_t sl = slots[j], p = sl >= 0 && sl < kv->len ? kv->par[sl] : -2;
        int parent_ok = p < from; // -1 or the kept prefix
        for (int i = 0; i < j && !parent_ok; i++)
            parent_ok = slots[i] == p;
        if (sl < from || sl >= kv->len || (j && sl <= slots[j - 1]) || !parent_ok) {
            sw_errf(err, err_len, "model: slot %d cannot be kept (after %d, parent %d, from %d)",
                    sl, j ? slots[j - 1] : -1, p, from);
            return -1;
        }
        dst[j] = from + j;
        moved |= sl != dst[j];
    }
    if (moved) {
        if (!m->devs[0].be->ops->kv_move) {
            sw_errf(err, err_len, "model: backend %s cannot move cache slots (no token trees)",
                    m->devs[0].be->name);
            return -1;
        }
        const int kv_dim = m->hp.n_kv_head * m->hp.head_dim;
        for (int i = 0; i < kv->n_layers; i++) {
            sw_backend_t *be = m->devs[m->layers[i].dev].be;
            if (be->ops->kv_move(be, kv->k[i], kv->v[i], kv->n_ctx, kv_dim, slots, dst, n) != 0)
                return sw_model_fail(be, err, err_len);
        }
    }
    /* Metadata: each kept slot's parent is now where that parent went. */
    for (int j = 0; j < n; j++) {
        int32_t p = kv->par[slots[j]];
        for (int i = 0; i < j && p >= from; i++)
            if (slots[i] == p) {
                p = dst[i];
                break;
            }
        kv->par[dst[j]] = p;
        kv->pos[dst[j]] = kv->pos[slots[j]];
    }
    kv->len = from + n;
    if (kv->lin > from)
        kv->lin = from;
    sw_kv_relin(kv);
    return 0;
}
