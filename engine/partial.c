/*
 * partial.c - partial GGUF files (partial.h): which tensors a layer range
 * keeps, the partial file's header, and reading its keys back.
 */
#include "partial.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "sha256.h"

/* A growing byte buffer for the header. */
typedef struct s_out {
    uint8_t *p;
    size_t len, cap;
    int oom;
} s_out_t;

static void s_put(s_out_t *o, const void *b, size_t n)
{
    if (o->oom)
        return;
    if (o->len + n > o->cap) {
        size_t cap = o->cap ? o->cap : 4096;
        while (cap < o->len + n)
            cap *= 2;
        uint8_t *g = realloc(o->p, cap);
        if (!g) {
            o->oom = 1;
            return;
        }
        o->p = g;
        o->cap = cap;
    }
    memcpy(o->p + o->len, b, n);
    o->len += n;
}

static void s_u32(s_out_t *o, uint32_t v)
{
    s_put(o, &v, 4);
}

static void s_u64(s_out_t *o, uint64_t v)
{
    s_put(o, &v, 8);
}

static void s_str(s_out_t *o, const char *s, size_t n)
{
    s_u64(o, n);
    s_put(o, s, n);
}

static void s_key(s_out_t *o, const char *suffix, enum sw_gguf_vtype t)
{
    char k[96];
    int n = snprintf(k, sizeof k, SW_PARTIAL_KEY "%s", suffix);
    s_str(o, k, (size_t)n);
    s_u32(o, (uint32_t)t);
}

static void s_kv_u32(s_out_t *o, const char *suffix, uint32_t v)
{
    s_key(o, suffix, SW_GGUF_UINT32);
    s_u32(o, v);
}

static void s_kv_u64(s_out_t *o, const char *suffix, uint64_t v)
{
    s_key(o, suffix, SW_GGUF_UINT64);
    s_u64(o, v);
}

static void s_kv_str(s_out_t *o, const char *suffix, const char *v)
{
    s_key(o, suffix, SW_GGUF_STRING);
    s_str(o, v, strlen(v));
}

/* The block number of a "blk.N." tensor name, or -1 for any other name. */
static long s_block(sw_gguf_str_t name)
{
    if (name.len < 6 || memcmp(name.ptr, "blk.", 4) != 0)
        return -1;
    long n = 0;
    uint64_t i = 4;
    for (; i < name.len && name.ptr[i] >= '0' && name.ptr[i] <= '9' && n < 1000000; i++)
        n = n * 10 + (name.ptr[i] - '0');
    return i > 4 && i < name.len && name.ptr[i] == '.' ? n : -1;
}

/* 1 when layers [begin, end) of an n_layer model need tensor t. */
static int s_keep(sw_gguf_str_t name, int begin, int end, int n_layer, int tied)
{
    long b = s_block(name);
    if (b >= 0)
        return b >= begin && b < end;
    if (sw_gguf_str_eq(name, "token_embd.weight"))
        return begin == 0 || (end == n_layer && tied);
    if (sw_gguf_str_eq(name, "output_norm.weight") || sw_gguf_str_eq(name, "output.weight"))
        return end == n_layer;
    return 1; /* rope_freqs.weight and whatever else sits outside the blocks: small, kept */
}

int sw_partial_layers_err(const sw_gguf_t *g, int *n_layer, char *err, size_t err_len)
{
    sw_gguf_str_t a;
    char key[160];
    uint64_t n;
    if (sw_gguf_get_str(g, "general.architecture", &a) != 0 || a.len > 100) {
        sw_errf(err, err_len, "partial: 'general.architecture' is missing: not a model GGUF?");
        return -1;
    }
    snprintf(key, sizeof key, "%.*s.block_count", (int)a.len, a.ptr);
    if (sw_gguf_get_u64(g, key, &n) != 0 || n < 1 || n > 100000) {
        sw_errf(err, err_len, "partial: '%s' is missing or out of range", key);
        return -1;
    }
    *n_layer = (int)n;
    return 0;
}

int sw_partial_plan(const sw_gguf_t *src, int begin, int end, const sw_partial_src_t *id,
                    sw_partial_plan_t *plan, char *err, size_t err_len)
{
    memset(plan, 0, sizeof *plan);
    int n_layer;
    if (sw_partial_layers_err(src, &n_layer, err, err_len) != 0)
        return -1;
    if (end < 0)
        end = n_layer;
    if (begin < 0 || begin >= end || end > n_layer) {
        sw_errf(err, err_len, "layer range %d:%d is invalid for a %d-layer model", begin, end,
                n_layer);
        return -1;
    }
    for (int64_t i = 0; i < sw_gguf_kv_count(src); i++) {
        sw_gguf_str_t k = sw_gguf_kv_key(src, i);
        if (k.len >= strlen(SW_PARTIAL_KEY) &&
            !memcmp(k.ptr, SW_PARTIAL_KEY, strlen(SW_PARTIAL_KEY))) {
            sw_errf(err, err_len, "the source is itself a partial file: pull from a whole one");
            return -1;
        }
    }
    const sw_gguf_tensor_t *te = sw_gguf_find_tensor(src, "token_embd.weight");
    if (!te || te->n_dims != 2 || te->ne[1] < 1 || te->ne[1] > (1 << 22)) {
        sw_errf(err, err_len, "partial: tensor 'token_embd.weight' is missing or not 2-D");
        return -1;
    }
    const int tied = sw_gguf_find_tensor(src, "output.weight") == NULL;
    const int64_t nt = sw_gguf_tensor_count(src);
    /* kept tensors, by source offset */
    int64_t *idx = malloc((size_t)(nt ? nt : 1) * sizeof *idx);
    if (!idx) {
        sw_errf(err, err_len, "partial: out of memory");
        return -1;
    }
    int64_t n = 0;
    for (int64_t i = 0; i < nt; i++)
        if (s_keep(sw_gguf_tensor(src, i)->name, begin, end, n_layer, tied))
            idx[n++] = i;
    for (int64_t i = 1; i < n; i++) /* insertion sort: files are almost always in order */
        for (int64_t j = i;
             j > 0 && sw_gguf_tensor(src, idx[j - 1])->offset > sw_gguf_tensor(src, idx[j])->offset;
             j--) {
            int64_t t = idx[j];
            idx[j] = idx[j - 1];
            idx[j - 1] = t;
        }
    for (int64_t i = 1; i < n; i++) {
        const sw_gguf_tensor_t *a = sw_gguf_tensor(src, idx[i - 1]),
                               *b = sw_gguf_tensor(src, idx[i]);
        if (b->offset < a->offset + a->n_bytes) {
            sw_errf(err, err_len, "partial: the data of tensors '%.*s' and '%.*s' overlap",
                    (int)(a->name.len < 80 ? a->name.len : 80), a->name.ptr,
                    (int)(b->name.len < 80 ? b->name.len : 80), b->name.ptr);
            free(idx);
            return -1;
        }
    }
    const uint64_t align = sw_gguf_alignment(src);
    s_out_t o = {0};
    const uint8_t *bytes = sw_gguf_bytes(src);
    uint64_t n_kv = (uint64_t)sw_gguf_kv_count(src) + 8;
    s_put(&o, "GGUF", 4);
    s_u32(&o, sw_gguf_version(src));
    s_u64(&o, (uint64_t)n);
    s_u64(&o, n_kv);
    s_put(&o, bytes + 24, (size_t)(sw_gguf_kv_end(src) - 24)); /* the source's kvs as they are */
    s_kv_u32(&o, "layer_begin", (uint32_t)begin);
    s_kv_u32(&o, "layer_end", (uint32_t)end);
    s_kv_str(&o, "source", id->source);
    s_kv_u64(&o, "source_size", id->size);
    s_kv_str(&o, "source_sha256", id->sha256 ? id->sha256 : "");
    s_kv_u64(&o, "source_tensors", (uint64_t)nt);
    s_kv_str(&o, "fingerprint", id->fingerprint);
    s_kv_u32(&o, "n_vocab", (uint32_t)te->ne[1]);
    plan->segs = calloc((size_t)(n ? n : 1), sizeof *plan->segs);
    if (!plan->segs) {
        free(idx);
        free(o.p);
        sw_errf(err, err_len, "partial: out of memory");
        return -1;
    }
    uint64_t off = 0;
    for (int64_t i = 0; i < n; i++) {
        const sw_gguf_tensor_t *t = sw_gguf_tensor(src, idx[i]);
        s_str(&o, t->name.ptr, t->name.len);
        s_u32(&o, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims; d++)
            s_u64(&o, (uint64_t)t->ne[d]);
        s_u32(&o, (uint32_t)t->type);
        off = (off + align - 1) / align * align;
        s_u64(&o, off);
        plan->segs[i] =
            (sw_partial_seg_t){.src_off = t->offset, .part_off = off, .len = t->n_bytes};
        off += t->n_bytes;
        plan->data_bytes += t->n_bytes;
    }
    free(idx);
    static const uint8_t zero[64] = {0};
    while (!o.oom && o.len % align)
        s_put(&o, zero, align - o.len % align < sizeof zero ? align - o.len % align : sizeof zero);
    if (o.oom) {
        free(o.p);
        sw_partial_plan_free(plan);
        sw_errf(err, err_len, "partial: out of memory");
        return -1;
    }
    for (int64_t i = 0; i < n; i++)
        plan->segs[i].part_off += o.len;
    plan->header = o.p;
    plan->header_len = o.len;
    plan->n_segs = (int)n;
    plan->size = o.len + off;
    return 0;
}

int sw_partial_layers(const sw_gguf_t *g, int *n_layer)
{
    return sw_partial_layers_err(g, n_layer, NULL, 0);
}

void sw_partial_plan_free(sw_partial_plan_t *plan)
{
    free(plan->header);
    free(plan->segs);
    memset(plan, 0, sizeof *plan);
}

static int s_get_str(const sw_gguf_t *g, const char *suffix, char *out, size_t len, int hex)
{
    char key[96];
    snprintf(key, sizeof key, SW_PARTIAL_KEY "%s", suffix);
    sw_gguf_str_t s;
    if (sw_gguf_get_str(g, key, &s) != 0 || s.len >= len)
        return -1;
    for (uint64_t i = 0; i < s.len; i++) {
        char c = s.ptr[i];
        if (hex ? !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')) : (c < 0x20 || c > 0x7e))
            return -1;
    }
    memcpy(out, s.ptr, s.len);
    out[s.len] = 0;
    return 0;
}

int sw_partial_info(const sw_gguf_t *g, int n_layer, sw_partial_info_t *info, char *err,
                    size_t err_len)
{
    memset(info, 0, sizeof *info);
    uint64_t b, e, nv;
    const int has = sw_gguf_find_key(g, SW_PARTIAL_KEY "layer_begin") >= 0;
    if (!has)
        return 0;
    if (sw_gguf_get_u64(g, SW_PARTIAL_KEY "layer_begin", &b) != 0 ||
        sw_gguf_get_u64(g, SW_PARTIAL_KEY "layer_end", &e) != 0 || b >= e ||
        e > (uint64_t)n_layer || sw_gguf_get_u64(g, SW_PARTIAL_KEY "n_vocab", &nv) != 0 || nv < 1 ||
        nv > (1u << 22) ||
        sw_gguf_get_u64(g, SW_PARTIAL_KEY "source_size", &info->source_size) != 0 ||
        s_get_str(g, "source", info->source, sizeof info->source, 0) != 0 ||
        s_get_str(g, "source_sha256", info->sha256, sizeof info->sha256, 1) != 0 ||
        s_get_str(g, "fingerprint", info->fingerprint, sizeof info->fingerprint, 1) != 0 ||
        strlen(info->fingerprint) != 64) {
        sw_errf(err, err_len,
                "model: this partial file's " SW_PARTIAL_KEY "* keys are malformed; pull it "
                "again");
        return -1;
    }
    info->begin = (int)b;
    info->end = (int)e;
    info->n_vocab = (int)nv;
    return 1;
}

uint64_t sw_fingerprint_len(const sw_gguf_t *g)
{
    const uint64_t size = sw_gguf_file_size(g);
    uint64_t n = sw_gguf_data_offset(g) + SW_FINGERPRINT_DATA;
    return n > size ? size : n;
}

void sw_fingerprint_bytes(const void *bytes, uint64_t len, char out[65])
{
    uint8_t h[32];
    sw_sha256(bytes, (size_t)len, h);
    sw_hex(h, sizeof h, out);
}
