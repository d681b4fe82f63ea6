/*
 * fuzz_gguf.c - libFuzzer target for the GGUF reader: every input is opened
 * with sw_gguf_open_buffer(); when it parses, every key is read through every
 * typed getter, every string-array element and both ends of every numeric
 * array and of every tensor's data are touched, so that ASan/UBSan see any
 * accessor that would step outside the input. Run by scripts/ci/fuzz.sh.
 */
#include "gguf.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static volatile uint64_t s_sink; // keeps the reads from being optimised away

static void s_walk_kv(const sw_gguf_t *g, int64_t i)
{
    sw_gguf_str_t k = sw_gguf_kv_key(g, i);
    char key[128];
    size_t n = k.len < sizeof key - 1 ? (size_t)k.len : sizeof key - 1;
    memcpy(key, k.ptr, n);
    key[n] = 0;
    uint64_t u, count, sum = (uint64_t)sw_gguf_kv_type(g, i);
    int64_t s;
    double d;
    int b;
    sw_gguf_str_t str;
    enum sw_gguf_vtype et;
    if (sw_gguf_get_u64(g, key, &u) == 0)
        sum += u;
    if (sw_gguf_get_i64(g, key, &s) == 0)
        sum += (uint64_t)s;
    if (sw_gguf_get_f64(g, key, &d) == 0)
        sum += d > 0;
    if (sw_gguf_get_bool(g, key, &b) == 0)
        sum += (uint64_t)b;
    if (sw_gguf_get_str(g, key, &str) == 0 && str.len)
        sum += (uint8_t)str.ptr[0] + (uint8_t)str.ptr[str.len - 1];
    if (sw_gguf_get_arr(g, key, &et, &count) == 0) {
        const uint8_t *data = sw_gguf_arr_data(g, key);
        if (data && count)
            sum += data[0];
        for (uint64_t j = 0; et == SW_GGUF_STRING && j < count; j++)
            if (sw_gguf_arr_str(g, key, j, &str) == 0 && str.len)
                sum += (uint8_t)str.ptr[0] + (uint8_t)str.ptr[str.len - 1];
        if (et == SW_GGUF_STRING && sw_gguf_arr_str(g, key, count, &str) == 0)
            abort(); // out of range must be refused
    }
    s_sink += sum;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[256] = "";
    sw_gguf_t *g = sw_gguf_open_buffer(data, size, err, sizeof err);
    if (!g) {
        if (!err[0])
            abort(); // a refusal always says why
        return 0;
    }
    for (int64_t i = 0; i < sw_gguf_kv_count(g); i++)
        s_walk_kv(g, i);
    for (int64_t i = 0; i < sw_gguf_tensor_count(g); i++) {
        const sw_gguf_tensor_t *t = sw_gguf_tensor(g, i);
        const uint8_t *p = t->data;
        if (p < data || t->n_bytes > (uint64_t)(data + size - p))
            abort();
        if (t->n_bytes)
            s_sink += p[0] + p[t->n_bytes - 1];
        char name[128];
        size_t n = t->name.len < sizeof name - 1 ? (size_t)t->name.len : sizeof name - 1;
        memcpy(name, t->name.ptr, n);
        name[n] = 0;
        if (n == t->name.len && !memchr(name, 0, n) && sw_gguf_find_tensor(g, name) != t)
            abort(); // names are unique, so lookup finds this very tensor
    }
    sw_gguf_close(&g);
    return 0;
}
