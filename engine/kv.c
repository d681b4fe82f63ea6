/*
 * kv.c - the KV cache of a model's layer range (kv.h): one K and one
 * transposed V buffer per layer on that layer's device (q8_0: both in rows),
 * and per slot its parent and position, which token trees need. A cache
 * grows in steps (sw_kv_reserve): new buffers of the next size, what it
 * holds copied over on the device, the old ones freed, the bytes counted
 * in its budget; the rope tables grow to cover its slots. Keeping a tree's
 * accepted path moves slots on the device (the backend's kv_move) and
 * rewrites the metadata; nothing is recomputed.
 */
#include "kv.h"

#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "model_impl.h"
#include "quant_impl.h"

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

const char *sw_kv_type_name(sw_kv_type_t t)
{
    return t == SW_KV_F16 ? "f16" : t == SW_KV_Q8_0 ? "q8_0" : NULL;
}

int sw_kv_type_parse(const char *s)
{
    return !strcmp(s, "f16") ? SW_KV_F16 : !strcmp(s, "q8_0") ? SW_KV_Q8_0 : -1;
}

int sw_model_set_kv_type(sw_model_t *m, sw_kv_type_t t, char *err, size_t err_len)
{
    if (t == SW_KV_F16) {
        m->kv_type = t;
        return 0;
    }
    if (t != SW_KV_Q8_0) {
        sw_errf(err, err_len, "model: unknown KV cache type %d", (int)t);
        return -1;
    }
    if (m->hp.head_dim % SW_QK != 0) {
        sw_errf(err, err_len,
                "model: a q8_0 KV cache needs a head size that is a multiple of %d "
                "(this model's is %d)",
                SW_QK, m->hp.head_dim);
        return -1;
    }
    for (int i = 0; i < m->n_dev; i++)
        if (!m->devs[i].be->ops->attn_q8_0 || !m->devs[i].be->ops->copy2d) {
            sw_errf(err, err_len,
                    "model: the %s backend keeps an f16 KV cache only (q8_0 runs on the CPU "
                    "backend)",
                    m->devs[i].be->name);
            return -1;
        }
    m->kv_type = t;
    return 0;
}

sw_kv_type_t sw_model_kv_type(const sw_model_t *m)
{
    return (sw_kv_type_t)m->kv_type;
}

/* Bytes of one position's K (or V) row of one layer. */
static size_t s_row_bytes(const sw_model_t *m, int type)
{
    const size_t kv_dim = (size_t)m->hp.n_kv_head * (size_t)m->hp.head_dim;
    return type == SW_KV_Q8_0 ? kv_dim / SW_QK * sizeof(sw_block_q8_0) : kv_dim * sizeof(sw_f16);
}

sw_kv_t *sw_kv_new_grow(sw_model_t *m, int n_ctx, sw_kv_budget_t *budget)
{
    if (n_ctx < 1)
        return NULL;
    sw_kv_t *kv = calloc(1, sizeof *kv);
    if (!kv)
        return NULL;
    kv->m = m;
    kv->n_ctx = n_ctx;
    kv->type = m->kv_type;
    kv->budget = budget;
    kv->n_layers = m->end - m->begin;
    kv->k = calloc((size_t)kv->n_layers, sizeof *kv->k);
    kv->v = calloc((size_t)kv->n_layers, sizeof *kv->v);
    if (!kv->k || !kv->v) {
        sw_kv_free(&kv);
        return NULL;
    }
    return kv;
}

sw_kv_t *sw_kv_new(sw_model_t *m, int n_ctx)
{
    sw_kv_t *kv = sw_kv_new_grow(m, n_ctx, NULL);
    char err[256];
    if (kv && sw_kv_reserve(kv, n_ctx, err, sizeof err) != 0)
        sw_kv_free(&kv);
    return kv;
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
    if (kv->budget)
        kv->budget->used -= (int64_t)kv->bytes;
    free(kv->k);
    free(kv->v);
    free(kv->par);
    free(kv->pos);
    free(kv);
    *self_p = NULL;
}

/* Bytes of n positions of every layer in caches of type. */
static size_t s_bytes(const sw_model_t *m, int type, int n)
{
    return (size_t)(m->end - m->begin) * 2 * (size_t)n * s_row_bytes(m, type);
}

size_t sw_kv_bytes(const sw_model_t *m, int n_ctx)
{
    return s_bytes(m, m->kv_type, n_ctx);
}

int sw_kv_step(int n, int n_ctx)
{
    int64_t step = SW_KV_BLOCK;
    while (step < n) {
        const int64_t half = step + step / 2;
        step = half >= n ? half : 2 * step;
    }
    return step < n_ctx ? (int)step : n_ctx;
}

/* Copies the first n positions of one layer's K and V from (k0, v0) of
 * capacity cap0 into (k1, v1) of capacity cap1 on be: K rows (and q8_0 V
 * rows) in one piece, a transposed f16 V as kv_dim rows of n. */
static int s_copy_layer(const sw_kv_t *kv, sw_backend_t *be, sw_buf_t *k1, sw_buf_t *v1, int cap1,
                        const sw_buf_t *k0, const sw_buf_t *v0, int cap0, int n)
{
    const size_t row = s_row_bytes(kv->m, kv->type), hsz = sizeof(sw_f16);
    const int kv_dim = kv->m->hp.n_kv_head * kv->m->hp.head_dim;
    const int vt = kv->type == SW_KV_F16; // V transposed
    if (be->ops->copy2d)
        return be->ops->copy2d(be, k1, 0, 0, k0, 0, 0, (size_t)n * row, 1) ||
               (vt ? be->ops->copy2d(be, v1, 0, (size_t)cap1 * hsz, v0, 0, (size_t)cap0 * hsz,
                                     (size_t)n * hsz, kv_dim)
                   : be->ops->copy2d(be, v1, 0, 0, v0, 0, 0, (size_t)n * row, 1));
    /* through the host: K, then V row by row */
    const size_t vb = vt ? (size_t)n * hsz : (size_t)n * row;
    char *tmp = malloc((size_t)n * row > vb ? (size_t)n * row : vb);
    if (!tmp)
        return sw_backend_fail(be, "out of memory for a KV cache copy");
    int rc = be->ops->download(be, tmp, k0, 0, (size_t)n * row) ||
             be->ops->upload(be, k1, 0, tmp, (size_t)n * row);
    for (int d = 0; d < (vt ? kv_dim : 1) && rc == 0; d++)
        rc = be->ops->download(be, tmp, v0, (size_t)d * (size_t)cap0 * hsz, vb) ||
             be->ops->upload(be, v1, (size_t)d * (size_t)cap1 * hsz, tmp, vb);
    free(tmp);
    return rc ? -1 : 0;
}

/* Frees the first n of bufs on their layers' devices. */
static void s_free_bufs(sw_kv_t *kv, sw_buf_t **k, sw_buf_t **v, int n)
{
    sw_model_t *m = kv->m;
    for (int i = 0; i < n; i++) {
        sw_backend_t *be = m->devs[m->layers[i].dev].be;
        sw_model_buf_free(be, &k[i]);
        sw_model_buf_free(be, &v[i]);
    }
}

/* Grows the metadata to cap positions. 0 or -1. */
static int s_grow_meta(sw_kv_t *kv, int cap)
{
    int32_t *par = realloc(kv->par, (size_t)cap * sizeof *par);
    if (par)
        kv->par = par;
    int32_t *pos = par ? realloc(kv->pos, (size_t)cap * sizeof *pos) : NULL;
    if (pos)
        kv->pos = pos;
    return par && pos ? 0 : -1;
}

int sw_kv_reserve(sw_kv_t *kv, int n, char *err, size_t err_len)
{
    sw_model_t *m = kv->m;
    if (n <= kv->cap)
        return 0;
    if (n > kv->n_ctx) {
        sw_errf(err, err_len, "model: %d positions do not fit the %d-position context", n,
                kv->n_ctx);
        return -1;
    }
    const int cap = sw_kv_step(n, kv->n_ctx);
    const size_t bytes = s_bytes(m, kv->type, cap);
    const int64_t more = (int64_t)(bytes - kv->bytes);
    sw_kv_budget_t *b = kv->budget;
    if (b && b->limit > 0 && b->used + more > b->limit && b->make_room)
        b->make_room(b->ctx, more);
    if (b && b->limit > 0 && b->used + more > b->limit) {
        sw_errf(err, err_len,
                "KV cache memory is full: growing a session's cache to %d positions needs "
                "%.1f MiB more, %.1f of %.1f MiB are in use",
                cap, (double)more / (1 << 20), (double)b->used / (1 << 20),
                (double)b->limit / (1 << 20));
        return -1;
    }
    sw_buf_t **k = calloc((size_t)kv->n_layers, sizeof *k);
    sw_buf_t **v = calloc((size_t)kv->n_layers, sizeof *v);
    const size_t each = s_bytes(m, kv->type, cap) / (size_t)kv->n_layers / 2;
    int ok = k && v;
    if (!ok)
        sw_errf(err, err_len, "model: out of memory growing a KV cache");
    for (int i = 0; ok && i < kv->n_layers; i++) {
        sw_backend_t *be = m->devs[m->layers[i].dev].be;
        k[i] = be->ops->buf_alloc(be, each);
        v[i] = k[i] ? be->ops->buf_alloc(be, each) : NULL;
        if (!v[i]) {
            sw_errf(err, err_len,
                    "model: %s: out of memory growing a KV cache to %d positions (%.1f MiB)",
                    be->name, cap, (double)bytes / (1 << 20));
            ok = 0;
        } else if (kv->len > 0 && s_copy_layer(kv, be, k[i], v[i], cap, kv->k[i], kv->v[i], kv->cap,
                                               kv->len) != 0) {
            sw_model_fail(be, err, err_len);
            ok = 0;
        }
    }
    /* The rope tables cover every slot of the largest cache, and the metadata
     * this one's (after the cache itself fits: they are a small fraction of it). */
    if (ok && (s_rope_reserve(m, cap) != 0 || s_grow_meta(kv, cap) != 0)) {
        sw_errf(err, err_len, "model: out of memory for the tables of %d cache positions", cap);
        ok = 0;
    }
    if (!ok) {
        if (k && v)
            s_free_bufs(kv, k, v, kv->n_layers);
        free(k);
        free(v);
        return -1;
    }
    for (int d = 0; d < m->n_dev; d++)
        if (m->devs[d].be->ops->sync && m->devs[d].be->ops->sync(m->devs[d].be) != 0) {
            sw_model_fail(m->devs[d].be, err, err_len);
            s_free_bufs(kv, k, v, kv->n_layers);
            free(k);
            free(v);
            return -1;
        }
    s_free_bufs(kv, kv->k, kv->v, kv->n_layers);
    free(kv->k);
    free(kv->v);
    kv->k = k;
    kv->v = v;
    kv->cap = cap;
    if (b)
        b->used += more;
    kv->bytes = bytes;
    return 0;
}

int sw_kv_allocated(const sw_kv_t *kv)
{
    return kv->cap;
}

size_t sw_kv_alloc_bytes(const sw_kv_t *kv)
{
    return kv->bytes;
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

/* Moves slot src[i] to dst[i] (i < n, in order) in every layer: the
 * backend's kv_move for f16 caches, row copies for q8_0 rows. */
static int s_move(sw_kv_t *kv, const int32_t *src, const int32_t *dst, int n, char *err,
                  size_t err_len)
{
    sw_model_t *m = kv->m;
    if (!m->devs[0].be->ops->kv_move) {
        sw_errf(err, err_len, "model: backend %s cannot move cache slots (no token trees)",
                m->devs[0].be->name);
        return -1;
    }
    const int kv_dim = m->hp.n_kv_head * m->hp.head_dim;
    const size_t row = s_row_bytes(m, kv->type);
    for (int i = 0; i < kv->n_layers; i++) {
        sw_backend_t *be = m->devs[m->layers[i].dev].be;
        if (kv->type == SW_KV_F16) {
            if (be->ops->kv_move(be, kv->k[i], kv->v[i], kv->cap, kv_dim, src, dst, n) != 0)
                return sw_model_fail(be, err, err_len);
            continue;
        }
        for (int j = 0; j < n; j++) {
            if (src[j] == dst[j])
                continue;
            const size_t from = (size_t)src[j] * row, to = (size_t)dst[j] * row;
            if (be->ops->copy2d(be, kv->k[i], to, 0, kv->k[i], from, 0, row, 1) != 0 ||
                be->ops->copy2d(be, kv->v[i], to, 0, kv->v[i], from, 0, row, 1) != 0)
                return sw_model_fail(be, err, err_len);
        }
    }
    return 0;
}

int sw_kv_keep(sw_kv_t *kv, int from, const int32_t *slots, int n, char *err, size_t err_len)
{
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
    if (moved && s_move(kv, slots, dst, n, err, err_len) != 0)
        return -1;
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

/* ---- prefix reuse (issue 22): positions as host bytes -----------------------------------------
 */

size_t sw_kv_span_bytes(const sw_model_t *m, int n)
{
    return sw_kv_bytes(m, n);
}

/* The K (rows) and V (f16: transposed, a row of the cache's capacity per
 * dimension; q8_0: rows) bytes of positions [at, at + n) of layer i, to or
 * from buf. */
static int s_span(const sw_kv_t *kv, int i, int at, int n, char *buf, int up)
{
    const sw_model_t *m = kv->m;
    sw_backend_t *be = m->devs[m->layers[i].dev].be;
    sw_buf_t *k = kv->k[i], *v = kv->v[i];
    const size_t hsz = sizeof(sw_f16), row = s_row_bytes(m, kv->type);
    const size_t kb = (size_t)n * row;
    if (up ? be->ops->upload(be, k, (size_t)at * row, buf, kb)
           : be->ops->download(be, buf, k, (size_t)at * row, kb))
        return -1;
    buf += kb;
    if (kv->type != SW_KV_F16)
        return up ? be->ops->upload(be, v, (size_t)at * row, buf, kb)
                  : be->ops->download(be, buf, v, (size_t)at * row, kb);
    const int kv_dim = m->hp.n_kv_head * m->hp.head_dim;
    for (int d = 0; d < kv_dim; d++, buf += (size_t)n * hsz) {
        const size_t off = ((size_t)d * (size_t)kv->cap + (size_t)at) * hsz;
        if (up ? be->ops->upload(be, v, off, buf, (size_t)n * hsz)
               : be->ops->download(be, buf, v, off, (size_t)n * hsz))
            return -1;
    }
    return 0;
}

int sw_kv_export(const sw_kv_t *kv, int from, int n, void *dst, char *err, size_t err_len)
{
    const sw_model_t *m = kv->m;
    if (from < 0 || n < 1 || (int64_t)from + n > kv->lin) {
        sw_errf(err, err_len, "model: exporting positions [%d, %d) of a cache with %d plain", from,
                from + n, kv->lin);
        return -1;
    }
    char *at = dst;
    const size_t per_layer = s_bytes(m, kv->type, n) / (size_t)kv->n_layers;
    for (int i = 0; i < kv->n_layers; i++, at += per_layer) {
        sw_backend_t *be = m->devs[m->layers[i].dev].be;
        if (s_span(kv, i, from, n, at, 0) != 0 || (be->ops->sync && be->ops->sync(be) != 0))
            return sw_model_fail(be, err, err_len);
    }
    return 0;
}

int sw_kv_import(sw_kv_t *kv, const void *src, int n, char *err, size_t err_len)
{
    sw_model_t *m = kv->m;
    if (n < 1 || kv->lin != kv->len || (int64_t)kv->len + n > kv->n_ctx) {
        sw_errf(err, err_len, "model: importing %d positions after %d of a %d-slot cache", n,
                kv->len, kv->n_ctx);
        return -1;
    }
    if (sw_kv_reserve(kv, kv->len + n, err, err_len) != 0)
        return -1;
    const char *at = src;
    const size_t per_layer = s_bytes(m, kv->type, n) / (size_t)kv->n_layers;
    for (int i = 0; i < kv->n_layers; i++, at += per_layer) {
        sw_backend_t *be = m->devs[m->layers[i].dev].be;
        if (s_span(kv, i, kv->len, n, (char *)at, 1) != 0)
            return sw_model_fail(be, err, err_len);
    }
    for (int i = 0; i < m->n_dev; i++)
        if (m->devs[i].be->ops->sync && m->devs[i].be->ops->sync(m->devs[i].be) != 0)
            return sw_model_fail(m->devs[i].be, err, err_len);
    for (int s = kv->len; s < kv->len + n; s++) {
        kv->par[s] = s - 1;
        kv->pos[s] = s;
    }
    kv->len += n;
    kv->lin = kv->len;
    return 0;
}
