/*
 * gguf_write.c - the GGUF writer (gguf_write.h): fields appended to memory
 * (a partial file's header) or to a FILE (shardwire-mkmodel's models), and
 * the re-serialization of one key/value read through gguf.h's getters.
 */
#include "gguf_write.h"

#include <stdlib.h>
#include <string.h>

void sw_gguf_out_bytes(sw_gguf_out_t *o, const void *b, size_t n)
{
    if (o->failed || n == 0)
        return;
    if (o->f) {
        if (fwrite(b, 1, n, o->f) != n)
            o->failed = 1;
        o->len += n;
        return;
    }
    if (o->len + n > o->cap) {
        size_t cap = o->cap ? o->cap : 4096;
        while (cap < o->len + n)
            cap *= 2;
        uint8_t *g = realloc(o->buf, cap);
        if (!g) {
            o->failed = 1;
            return;
        }
        o->buf = g;
        o->cap = cap;
    }
    memcpy(o->buf + o->len, b, n);
    o->len += n;
}

void sw_gguf_out_u32(sw_gguf_out_t *o, uint32_t v)
{
    sw_gguf_out_bytes(o, &v, 4);
}

void sw_gguf_out_u64(sw_gguf_out_t *o, uint64_t v)
{
    sw_gguf_out_bytes(o, &v, 8);
}

void sw_gguf_out_str(sw_gguf_out_t *o, const char *s, uint64_t n)
{
    sw_gguf_out_u64(o, n);
    sw_gguf_out_bytes(o, s, (size_t)n);
}

void sw_gguf_out_header(sw_gguf_out_t *o, uint32_t version, uint64_t n_tensors, uint64_t n_kv)
{
    sw_gguf_out_bytes(o, "GGUF", 4);
    sw_gguf_out_u32(o, version);
    sw_gguf_out_u64(o, n_tensors);
    sw_gguf_out_u64(o, n_kv);
}

static void s_key(sw_gguf_out_t *o, const char *key, enum sw_gguf_vtype t)
{
    sw_gguf_out_str(o, key, strlen(key));
    sw_gguf_out_u32(o, (uint32_t)t);
}

void sw_gguf_out_kv_u32(sw_gguf_out_t *o, const char *key, uint32_t v)
{
    s_key(o, key, SW_GGUF_UINT32);
    sw_gguf_out_u32(o, v);
}

void sw_gguf_out_kv_u64(sw_gguf_out_t *o, const char *key, uint64_t v)
{
    s_key(o, key, SW_GGUF_UINT64);
    sw_gguf_out_u64(o, v);
}

void sw_gguf_out_kv_f32(sw_gguf_out_t *o, const char *key, float v)
{
    s_key(o, key, SW_GGUF_FLOAT32);
    sw_gguf_out_bytes(o, &v, 4);
}

void sw_gguf_out_kv_str(sw_gguf_out_t *o, const char *key, const char *v)
{
    s_key(o, key, SW_GGUF_STRING);
    sw_gguf_out_str(o, v, strlen(v));
}

/* An array value of key (its element type, count and elements). 0 or -1. */
static int s_copy_arr(sw_gguf_out_t *o, const sw_gguf_t *g, const char *key)
{
    enum sw_gguf_vtype et;
    uint64_t n;
    if (sw_gguf_get_arr(g, key, &et, &n) != 0)
        return -1;
    sw_gguf_out_u32(o, (uint32_t)et);
    sw_gguf_out_u64(o, n);
    if (et == SW_GGUF_STRING) {
        for (uint64_t j = 0; j < n; j++) {
            sw_gguf_str_t v;
            if (sw_gguf_arr_str(g, key, j, &v) != 0)
                return -1;
            sw_gguf_out_str(o, v.ptr, v.len);
        }
        return 0;
    }
    const size_t es = (size_t)sw_gguf_vtype_size(et);
    const void *data = sw_gguf_arr_data(g, key);
    if (!es || !data)
        return -1;
    sw_gguf_out_bytes(o, data, (size_t)n * es);
    return 0;
}

/* A scalar value of key of type t, read back through the typed getters in the stored width. */
static int s_copy_scalar(sw_gguf_out_t *o, const sw_gguf_t *g, const char *key,
                         enum sw_gguf_vtype t)
{
    const size_t es = (size_t)sw_gguf_vtype_size(t);
    unsigned char buf[8] = {0};
    if (t == SW_GGUF_FLOAT32 || t == SW_GGUF_FLOAT64) {
        double d;
        if (sw_gguf_get_f64(g, key, &d) != 0)
            return -1;
        float f = (float)d;
        memcpy(buf, t == SW_GGUF_FLOAT32 ? (void *)&f : (void *)&d, es);
    } else if (t == SW_GGUF_BOOL) {
        int b;
        if (sw_gguf_get_bool(g, key, &b) != 0)
            return -1;
        buf[0] = (unsigned char)(b != 0);
    } else if (t == SW_GGUF_UINT64) {
        uint64_t u;
        if (sw_gguf_get_u64(g, key, &u) != 0)
            return -1;
        memcpy(buf, &u, 8);
    } else {
        int64_t v;
        if (sw_gguf_get_i64(g, key, &v) != 0)
            return -1;
        memcpy(buf, &v, es); // little-endian: the low bytes hold the value
    }
    sw_gguf_out_bytes(o, buf, es);
    return 0;
}

int sw_gguf_out_kv_copy(sw_gguf_out_t *o, const sw_gguf_t *g, int64_t i)
{
    sw_gguf_str_t k = sw_gguf_kv_key(g, i);
    char key[256];
    if (k.len >= sizeof key) {
        o->failed = 1;
        return -1;
    }
    memcpy(key, k.ptr, k.len);
    key[k.len] = 0;
    enum sw_gguf_vtype t = sw_gguf_kv_type(g, i);
    s_key(o, key, t);
    int rc;
    if (t == SW_GGUF_STRING) {
        sw_gguf_str_t v;
        rc = sw_gguf_get_str(g, key, &v);
        if (rc == 0)
            sw_gguf_out_str(o, v.ptr, v.len);
    } else if (t == SW_GGUF_ARRAY) {
        rc = s_copy_arr(o, g, key);
    } else {
        rc = s_copy_scalar(o, g, key, t);
    }
    if (rc != 0)
        o->failed = 1;
    return rc;
}

uint64_t sw_gguf_out_tensor_info(sw_gguf_out_t *o, const char *name, size_t name_len,
                                 uint32_t n_dims, const int64_t *ne, enum sw_type type,
                                 uint64_t n_bytes, uint64_t align, uint64_t *off)
{
    sw_gguf_out_str(o, name, name_len);
    sw_gguf_out_u32(o, n_dims);
    for (uint32_t d = 0; d < n_dims; d++)
        sw_gguf_out_u64(o, (uint64_t)ne[d]);
    sw_gguf_out_u32(o, (uint32_t)type);
    *off = (*off + align - 1) / align * align;
    const uint64_t at = *off;
    sw_gguf_out_u64(o, at);
    *off += n_bytes;
    return at;
}

void sw_gguf_out_pad(sw_gguf_out_t *o, uint64_t align)
{
    static const uint8_t zero[64] = {0};
    while (!o->failed && o->len % align) {
        uint64_t n = align - o->len % align;
        sw_gguf_out_bytes(o, zero, n < sizeof zero ? (size_t)n : sizeof zero);
    }
}
