/*
 * fuzz_gguf.c - libFuzzer target for the GGUF reader: every input is opened
 * with sw_gguf_open_buffer(); when it parses, every key is read through every
 * typed getter, every string-array element and both ends of every numeric
 * array and of every tensor's data are touched, so that ASan/UBSan see any
 * accessor that would step outside the input. An input holding the marker
 * "\nSWPART\n" is also taken as the parts of a split set (the bytes between
 * markers, 2 to 8 of them) and opened with sw_gguf_open_split_headers(), as
 * the hub's partial download opens the headers it fetched; its tensors must
 * name a part and lie inside it, and no data may be handed out. Run by
 * scripts/ci/fuzz.sh. The split seed corpus/gguf/split3.bin is
 * gguf_py_small.gguf cut by shardwire-mksplit --split-max-tensors 1 into 3
 * parts, joined with the marker:
 *   shardwire-mksplit --split-max-tensors 1 gguf_py_small.gguf s &&
 *   { cat s-00001-of-00003.gguf; printf '\nSWPART\n'; cat s-00002-of-00003.gguf;
 *     printf '\nSWPART\n'; cat s-00003-of-00003.gguf; } > split3.bin
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

#define S_MARK "\nSWPART\n"
#define S_MARK_LEN 8
#define S_MAX_PARTS 8

/* The next marker in [p, end), or NULL. */
static const uint8_t *s_mark(const uint8_t *p, const uint8_t *end)
{
    for (; end - p >= S_MARK_LEN; p++)
        if (!memcmp(p, S_MARK, S_MARK_LEN))
            return p;
    return NULL;
}

/* The input as the parts of a split set, when it holds a marker. */
static void s_fuzz_split(const uint8_t *data, size_t size)
{
    const void *heads[S_MAX_PARTS];
    size_t lens[S_MAX_PARTS];
    uint64_t sizes[S_MAX_PARTS];
    static const char *const names[S_MAX_PARTS] = {"p1", "p2", "p3", "p4", "p5", "p6", "p7", "p8"};
    const uint8_t *p = data, *end = data + size;
    int n = 0;
    while (n < S_MAX_PARTS) {
        const uint8_t *m = s_mark(p, end);
        heads[n] = p;
        lens[n] = (size_t)((m ? m : end) - p);
        sizes[n] = lens[n];
        n++;
        if (!m)
            break;
        p = m + S_MARK_LEN;
    }
    if (n < 2)
        return;
    char err[512] = "";
    sw_gguf_t *g = sw_gguf_open_split_headers(heads, lens, sizes, names, n, err, sizeof err);
    if (!g) {
        if (!err[0])
            abort(); // a refusal always says why
        return;
    }
    if (sw_gguf_part_count(g) != n)
        abort();
    for (int i = 0; i < n; i++) {
        uint64_t len;
        const uint8_t *h = sw_gguf_part_header(g, i, &len);
        if (len > lens[i] || (len && !h) || sw_gguf_part_mapped(g, i))
            abort();
    }
    for (int64_t i = 0; i < sw_gguf_kv_count(g); i++)
        s_walk_kv(g, i);
    for (int64_t i = 0; i < sw_gguf_tensor_count(g); i++) {
        const sw_gguf_tensor_t *t = sw_gguf_tensor(g, i);
        if (t->part < 0 || t->part >= n || t->data || t->offset > sizes[t->part] ||
            t->n_bytes > sizes[t->part] - t->offset)
            abort(); // every tensor inside its part, and no data handed out
        char e2[256] = "";
        if (sw_gguf_tensor_data(g, t, e2, sizeof e2) != NULL || !e2[0])
            abort();
        char name[128];
        size_t k = t->name.len < sizeof name - 1 ? (size_t)t->name.len : sizeof name - 1;
        memcpy(name, t->name.ptr, k);
        name[k] = 0;
        if (k == t->name.len && !memchr(name, 0, k) && sw_gguf_find_tensor(g, name) != t)
            abort();
    }
    sw_gguf_close(&g);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    s_fuzz_split(data, size);
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
