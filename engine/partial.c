/*
 * partial.c - partial GGUF files (partial.h): which tensors a layer range
 * keeps, the partial file's header (written with gguf_write.h), reading its
 * keys back, and the model fingerprint of a file or split set.
 */
#include "partial.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf_write.h"
#include "log.h"
#include "sha256.h"

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

/* 1 when tensor a's data come after b's (by part, then offset). */
static int s_after(const sw_gguf_tensor_t *a, const sw_gguf_tensor_t *b)
{
    return a->part != b->part ? a->part > b->part : a->offset > b->offset;
}

/* 1 for a split.* key, which a partial file (one file) leaves out. */
static int s_is_split_key(sw_gguf_str_t k)
{
    return k.len > 6 && !memcmp(k.ptr, "split.", 6);
}

static int64_t s_split_keys(const sw_gguf_t *g)
{
    int64_t n = 0;
    for (int64_t i = 0; i < sw_gguf_kv_count(g); i++)
        n += s_is_split_key(sw_gguf_kv_key(g, i));
    return n;
}

/* The source's key/values as they are, but for the split.* keys. */
static void s_copy_kvs(sw_gguf_out_t *o, const sw_gguf_t *src)
{
    const uint8_t *bytes = sw_gguf_bytes(src);
    for (int64_t i = 0; i < sw_gguf_kv_count(src); i++) {
        uint64_t off, len;
        if (!s_is_split_key(sw_gguf_kv_key(src, i)) && sw_gguf_kv_span(src, i, &off, &len) == 0)
            sw_gguf_out_bytes(o, bytes + off, (size_t)len);
    }
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
             j > 0 && s_after(sw_gguf_tensor(src, idx[j - 1]), sw_gguf_tensor(src, idx[j])); j--) {
            int64_t t = idx[j];
            idx[j] = idx[j - 1];
            idx[j - 1] = t;
        }
    for (int64_t i = 1; i < n; i++) {
        const sw_gguf_tensor_t *a = sw_gguf_tensor(src, idx[i - 1]),
                               *b = sw_gguf_tensor(src, idx[i]);
        if (a->part == b->part && b->offset < a->offset + a->n_bytes) {
            sw_errf(err, err_len, "partial: the data of tensors '%.*s' and '%.*s' overlap",
                    (int)(a->name.len < 80 ? a->name.len : 80), a->name.ptr,
                    (int)(b->name.len < 80 ? b->name.len : 80), b->name.ptr);
            free(idx);
            return -1;
        }
    }
    const uint64_t align = sw_gguf_alignment(src);
    const int parts = sw_gguf_part_count(src);
    sw_gguf_out_t o = {0};
    uint64_t n_kv = (uint64_t)(sw_gguf_kv_count(src) - s_split_keys(src)) + 8 + (parts > 1);
    sw_gguf_out_header(&o, sw_gguf_version(src), (uint64_t)n, n_kv);
    s_copy_kvs(&o, src);
    sw_gguf_out_kv_u32(&o, SW_PARTIAL_KEY "layer_begin", (uint32_t)begin);
    sw_gguf_out_kv_u32(&o, SW_PARTIAL_KEY "layer_end", (uint32_t)end);
    sw_gguf_out_kv_str(&o, SW_PARTIAL_KEY "source", id->source);
    sw_gguf_out_kv_u64(&o, SW_PARTIAL_KEY "source_size", id->size);
    sw_gguf_out_kv_str(&o, SW_PARTIAL_KEY "source_sha256", id->sha256 ? id->sha256 : "");
    sw_gguf_out_kv_u64(&o, SW_PARTIAL_KEY "source_tensors", (uint64_t)nt);
    sw_gguf_out_kv_str(&o, SW_PARTIAL_KEY "fingerprint", id->fingerprint);
    sw_gguf_out_kv_u32(&o, SW_PARTIAL_KEY "n_vocab", (uint32_t)te->ne[1]);
    if (parts > 1)
        sw_gguf_out_kv_u32(&o, SW_PARTIAL_KEY "source_parts", (uint32_t)parts);
    plan->segs = calloc((size_t)(n ? n : 1), sizeof *plan->segs);
    if (!plan->segs) {
        free(idx);
        free(o.buf);
        sw_errf(err, err_len, "partial: out of memory");
        return -1;
    }
    uint64_t off = 0;
    for (int64_t i = 0; i < n; i++) {
        const sw_gguf_tensor_t *t = sw_gguf_tensor(src, idx[i]);
        const uint64_t at = sw_gguf_out_tensor_info(&o, t->name.ptr, (size_t)t->name.len, t->n_dims,
                                                    t->ne, t->type, t->n_bytes, align, &off);
        plan->segs[i] = (sw_partial_seg_t){
            .part = t->part, .src_off = t->offset, .part_off = at, .len = t->n_bytes};
        plan->data_bytes += t->n_bytes;
    }
    free(idx);
    sw_gguf_out_pad(&o, align);
    if (o.failed) {
        free(o.buf);
        sw_partial_plan_free(plan);
        sw_errf(err, err_len, "partial: out of memory");
        return -1;
    }
    for (int64_t i = 0; i < n; i++)
        plan->segs[i].part_off += o.len;
    plan->header = o.buf;
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
    uint64_t np = 1;
    if (sw_gguf_find_key(g, SW_PARTIAL_KEY "source_parts") >= 0 &&
        (sw_gguf_get_u64(g, SW_PARTIAL_KEY "source_parts", &np) != 0 || np < 2 ||
         np > SW_GGUF_SPLIT_MAX)) {
        sw_errf(err, err_len,
                "model: this partial file's " SW_PARTIAL_KEY "source_parts is malformed; pull it "
                "again");
        return -1;
    }
    info->source_parts = (int)np;
    info->begin = (int)b;
    info->end = (int)e;
    info->n_vocab = (int)nv;
    return 1;
}

uint64_t sw_fingerprint_data_len(const sw_gguf_t *g)
{
    const uint64_t size = sw_gguf_file_size(g), at = sw_gguf_data_offset(g);
    if (at >= size)
        return 0;
    return size - at < SW_FINGERPRINT_DATA ? size - at : SW_FINGERPRINT_DATA;
}

uint64_t sw_fingerprint_len(const sw_gguf_t *g)
{
    uint64_t head;
    sw_gguf_part_header(g, 0, &head);
    return head + sw_fingerprint_data_len(g);
}

void sw_fingerprint_of(const sw_gguf_t *g, const void *data, char out[65])
{
    sw_sha256_t s;
    uint8_t h[32];
    sw_sha256_init(&s);
    for (int i = 0; i < sw_gguf_part_count(g); i++) {
        uint64_t len;
        const void *head = sw_gguf_part_header(g, i, &len);
        sw_sha256_update(&s, head, (size_t)len);
    }
    sw_sha256_update(&s, data, (size_t)sw_fingerprint_data_len(g));
    sw_sha256_final(&s, h);
    sw_hex(h, sizeof h, out);
}
