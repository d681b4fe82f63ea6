/*
 * test_gguf.c - the GGUF reader on the real SmolLM2 model (when present), on
 * small synthetic files written here, and on broken files: every one of a
 * list of deliberate defects, every truncation of the synthetic file, a
 * couple of hundred truncations of the model's header, and a few thousand
 * seeded random mutations must be refused with an error line (or parse into
 * something every accessor can walk), never crash.
 */
#include "gguf.h"
#include "sw_test.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- a tiny GGUF writer ---- */

struct wbuf {
    uint8_t *p; // (cap) bytes written so far: len
    size_t len; // bytes used
    size_t cap; // bytes allocated
};

static void w_bytes(struct wbuf *b, const void *src, size_t n)
{
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n)
            cap *= 2;
        uint8_t *p = realloc(b->p, cap);
        if (!p) {
            fprintf(stderr, "out of memory\n");
            exit(1);
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, src, n);
    b->len += n;
}

static void w_u8(struct wbuf *b, uint8_t v)
{
    w_bytes(b, &v, 1);
}

static void w_u16(struct wbuf *b, uint16_t v)
{
    w_bytes(b, &v, 2);
}

static void w_u32(struct wbuf *b, uint32_t v)
{
    w_bytes(b, &v, 4);
}

static void w_u64(struct wbuf *b, uint64_t v)
{
    w_bytes(b, &v, 8);
}

/* A string whose length field says len_field (the true length when 0). */
static void w_str_len(struct wbuf *b, const char *s, uint64_t len_field)
{
    w_u64(b, len_field ? len_field : strlen(s));
    w_bytes(b, s, strlen(s));
}

static void w_str(struct wbuf *b, const char *s)
{
    w_str_len(b, s, 0);
}

static void w_key(struct wbuf *b, const char *key, uint32_t type)
{
    w_str(b, key);
    w_u32(b, type);
}

static void w_pad(struct wbuf *b, uint64_t align)
{
    while (b->len % align)
        w_u8(b, 0);
}

/* Knobs for the synthetic file; synth_default() gives a valid file. */
struct synth {
    char magic[4];       // "GGUF"
    uint32_t version;    // 3
    int64_t n_tensors;   // tensor count written in the header; -1: the true count (2)
    uint64_t n_kv;       // kv count written in the header; 0: the true count
    uint64_t key0_len;   // length field of the first key; 0: true length
    uint64_t arr_count;  // count field of the string array; 0: true count (3)
    uint32_t arr_elem;   // element type field of the i32 array
    uint32_t n_dims;     // n_dims of tensor 1 (2); extra dims are written as 1
    uint64_t ne1;        // ne[1] of tensor 1 (2)
    uint32_t type1;      // type of tensor 1 (Q8_0)
    uint64_t off1_add;   // added to tensor 1's offset field
    const char *name1;   // name of tensor 1 ("t1.q8")
    uint32_t align_type; // value type of general.alignment (UINT32); ARRAY: omit the key
    uint64_t alignment;  // its value (64)
    int dup_key;         // 1: write "t.u8" a second time
};

static struct synth synth_default(void)
{
    struct synth s = {
        .magic = {'G', 'G', 'U', 'F'},
        .version = 3,
        .n_tensors = -1,
        .arr_elem = SW_GGUF_INT32,
        .n_dims = 2,
        .ne1 = 2,
        .type1 = SW_TYPE_Q8_0,
        .name1 = "t1.q8",
        .align_type = SW_GGUF_UINT32,
        .alignment = 64,
    };
    return s;
}

#define SYNTH_T1_BYTES (2 * 2 * 34) // 64 x 2 Q8_0 = 4 blocks of 34 bytes

/* Builds the synthetic file into b (emptied first). */
static void synth_build(struct wbuf *b, const struct synth *s)
{
    b->len = 0;
    int with_align = s->align_type != SW_GGUF_ARRAY;
    // the padding the writer uses (a bad alignment value is still written into the key)
    uint64_t align = with_align && s->alignment && s->alignment <= 4096 ? s->alignment : 32;
    uint64_t n_kv = 14 + (uint64_t)with_align + (uint64_t)(s->dup_key != 0);
    w_bytes(b, s->magic, 4);
    w_u32(b, s->version);
    w_u64(b, s->n_tensors >= 0 ? (uint64_t)s->n_tensors : 2);
    w_u64(b, s->n_kv ? s->n_kv : n_kv);

    w_str_len(b, "general.architecture", s->key0_len);
    w_u32(b, SW_GGUF_STRING);
    w_str(b, "llama");
    w_key(b, "t.u8", SW_GGUF_UINT8);
    w_u8(b, 200);
    w_key(b, "t.i8", SW_GGUF_INT8);
    w_u8(b, (uint8_t)-5);
    w_key(b, "t.u16", SW_GGUF_UINT16);
    w_u16(b, 60000);
    w_key(b, "t.i16", SW_GGUF_INT16);
    w_u16(b, (uint16_t)-3000);
    w_key(b, "t.u32", SW_GGUF_UINT32);
    w_u32(b, 4000000000u);
    w_key(b, "t.i32", SW_GGUF_INT32);
    w_u32(b, (uint32_t)-2000000000);
    w_key(b, "t.f32", SW_GGUF_FLOAT32);
    float f = 1.5f;
    w_bytes(b, &f, 4);
    w_key(b, "t.bool", SW_GGUF_BOOL);
    w_u8(b, 1);
    w_key(b, "t.u64", SW_GGUF_UINT64);
    w_u64(b, (1ull << 40) + 7);
    w_key(b, "t.i64", SW_GGUF_INT64);
    w_u64(b, (uint64_t) - (1ll << 40));
    w_key(b, "t.f64", SW_GGUF_FLOAT64);
    double d = 3.25;
    w_bytes(b, &d, 8);
    w_key(b, "t.arr_i32", SW_GGUF_ARRAY);
    w_u32(b, s->arr_elem);
    w_u64(b, 3);
    w_u32(b, 1);
    w_u32(b, (uint32_t)-2);
    w_u32(b, 3);
    w_key(b, "t.arr_str", SW_GGUF_ARRAY);
    w_u32(b, SW_GGUF_STRING);
    w_u64(b, s->arr_count ? s->arr_count : 3);
    w_str(b, "a");
    w_str(b, "bc");
    w_str(b, "");
    if (with_align) {
        w_key(b, "general.alignment", s->align_type);
        if (s->align_type == SW_GGUF_UINT64)
            w_u64(b, s->alignment);
        else
            w_u32(b, (uint32_t)s->alignment);
    }
    if (s->dup_key) {
        w_key(b, "t.u8", SW_GGUF_UINT8);
        w_u8(b, 1);
    }

    // tensor 0: f32 (4, 3) at offset 0; tensor 1: (64, ne1) at the next aligned offset
    w_str(b, "t0.f32");
    w_u32(b, 2);
    w_u64(b, 4);
    w_u64(b, 3);
    w_u32(b, SW_TYPE_F32);
    w_u64(b, 0);
    w_str(b, s->name1);
    w_u32(b, s->n_dims);
    for (uint32_t i = 0; i < s->n_dims && i < 8; i++)
        w_u64(b, i == 0 ? 64 : i == 1 ? s->ne1 : 1);
    w_u32(b, s->type1);
    uint64_t off1 = (48 + align - 1) / align * align;
    w_u64(b, off1 + s->off1_add);

    w_pad(b, align);
    for (int i = 0; i < 12; i++) {
        float v = (float)i * 0.5f;
        w_bytes(b, &v, 4);
    }
    w_pad(b, align);
    for (int i = 0; i < SYNTH_T1_BYTES; i++)
        w_u8(b, (uint8_t)(i * 7 + 1));
}

/* ---- walking a parsed file the way the loader and the fuzzer do ---- */

/* Reads every value and every tensor byte range end; returns a checksum so
 * that the reads cannot be optimised away. Checks data pointers lie inside
 * [base, base + len]. */
static uint64_t walk(const sw_gguf_t *g, const uint8_t *base, size_t len)
{
    uint64_t sum = 0;
    for (int64_t i = 0; i < sw_gguf_kv_count(g); i++) {
        sw_gguf_str_t k = sw_gguf_kv_key(g, i);
        char key[256];
        size_t n = k.len < sizeof key - 1 ? (size_t)k.len : sizeof key - 1;
        memcpy(key, k.ptr, n);
        key[n] = 0;
        uint64_t u;
        int64_t s;
        double d;
        int bo;
        sw_gguf_str_t str;
        enum sw_gguf_vtype et;
        uint64_t count;
        if (sw_gguf_get_u64(g, key, &u) == 0)
            sum += u;
        if (sw_gguf_get_i64(g, key, &s) == 0)
            sum += (uint64_t)s;
        if (sw_gguf_get_f64(g, key, &d) == 0)
            sum += d == d;
        if (sw_gguf_get_bool(g, key, &bo) == 0)
            sum += (uint64_t)bo;
        if (sw_gguf_get_str(g, key, &str) == 0 && str.len)
            sum += (uint8_t)str.ptr[0] + (uint8_t)str.ptr[str.len - 1];
        if (sw_gguf_get_arr(g, key, &et, &count) == 0) {
            const uint8_t *data = sw_gguf_arr_data(g, key);
            if (data && count) {
                SW_CHECK(data >= base && data < base + len);
                sum += data[0];
            }
            for (uint64_t j = 0; et == SW_GGUF_STRING && j < count; j++) {
                if (sw_gguf_arr_str(g, key, j, &str) != 0) {
                    SW_CHECK(0);
                    break;
                }
                SW_CHECK((const uint8_t *)str.ptr >= base &&
                         str.len <= (uint64_t)(base + len - (const uint8_t *)str.ptr));
                if (str.len)
                    sum += (uint8_t)str.ptr[0] + (uint8_t)str.ptr[str.len - 1];
            }
            if (et == SW_GGUF_STRING)
                SW_CHECK(sw_gguf_arr_str(g, key, count, &str) == -1);
        }
    }
    for (int64_t i = 0; i < sw_gguf_tensor_count(g); i++) {
        const sw_gguf_tensor_t *t = sw_gguf_tensor(g, i);
        const uint8_t *p = t->data;
        SW_CHECK(p >= base && t->n_bytes <= (uint64_t)(base + len - p));
        if (t->n_bytes)
            sum += p[0] + p[t->n_bytes - 1];
    }
    return sum;
}

/* ---- tests ---- */

static void test_synthetic_ok(void)
{
    struct wbuf b = {0};
    struct synth s = synth_default();
    synth_build(&b, &s);
    char err[512] = "";
    sw_gguf_t *g = sw_gguf_open_buffer(b.p, b.len, err, sizeof err);
    SW_CHECK(g != NULL);
    if (!g) {
        fprintf(stderr, "synthetic file refused: %s\n", err);
        free(b.p);
        return;
    }
    SW_CHECK_INT(sw_gguf_version(g), 3);
    SW_CHECK_INT(sw_gguf_file_size(g), b.len);
    SW_CHECK_INT(sw_gguf_kv_count(g), 15);
    SW_CHECK_INT(sw_gguf_tensor_count(g), 2);
    SW_CHECK(sw_gguf_str_eq(sw_gguf_kv_key(g, 0), "general.architecture"));
    SW_CHECK_INT(sw_gguf_kv_type(g, 12), SW_GGUF_ARRAY);
    SW_CHECK_INT(sw_gguf_find_key(g, "t.f64"), 11);
    SW_CHECK_INT(sw_gguf_find_key(g, "t.f6"), -1);
    SW_CHECK_INT(sw_gguf_find_key(g, "nope"), -1);

    sw_gguf_str_t str;
    SW_CHECK(sw_gguf_get_str(g, "general.architecture", &str) == 0 && sw_gguf_str_eq(str, "llama"));
    uint64_t u = 0;
    int64_t i = 0;
    double d = 0;
    int bo = 0;
    SW_CHECK(sw_gguf_get_u64(g, "t.u8", &u) == 0 && u == 200);
    SW_CHECK(sw_gguf_get_i64(g, "t.u8", &i) == 0 && i == 200);
    SW_CHECK(sw_gguf_get_i64(g, "t.i8", &i) == 0 && i == -5);
    SW_CHECK(sw_gguf_get_u64(g, "t.i8", &u) == -1); // negative does not fit
    SW_CHECK(sw_gguf_get_u64(g, "t.u16", &u) == 0 && u == 60000);
    SW_CHECK(sw_gguf_get_i64(g, "t.i16", &i) == 0 && i == -3000);
    SW_CHECK(sw_gguf_get_u64(g, "t.u32", &u) == 0 && u == 4000000000u);
    SW_CHECK(sw_gguf_get_i64(g, "t.i32", &i) == 0 && i == -2000000000);
    SW_CHECK(sw_gguf_get_f64(g, "t.f32", &d) == 0 && d == 1.5);
    SW_CHECK(sw_gguf_get_u64(g, "t.f32", &u) == -1);
    SW_CHECK(sw_gguf_get_bool(g, "t.bool", &bo) == 0 && bo == 1);
    SW_CHECK(sw_gguf_get_bool(g, "t.u8", &bo) == -1);
    SW_CHECK(sw_gguf_get_u64(g, "t.u64", &u) == 0 && u == (1ull << 40) + 7);
    SW_CHECK(sw_gguf_get_i64(g, "t.i64", &i) == 0 && i == -(1ll << 40));
    SW_CHECK(sw_gguf_get_f64(g, "t.f64", &d) == 0 && d == 3.25);
    SW_CHECK(sw_gguf_get_str(g, "t.u8", &str) == -1);
    SW_CHECK(sw_gguf_get_u64(g, "absent", &u) == -1);
    SW_CHECK(sw_gguf_get_u64(g, "general.alignment", &u) == 0 && u == 64);

    enum sw_gguf_vtype et;
    uint64_t count = 0;
    SW_CHECK(sw_gguf_get_arr(g, "t.arr_i32", &et, &count) == 0 && et == SW_GGUF_INT32 &&
             count == 3);
    const uint8_t *ad = sw_gguf_arr_data(g, "t.arr_i32");
    SW_CHECK(ad != NULL);
    if (ad) {
        int32_t v[3];
        memcpy(v, ad, sizeof v);
        SW_CHECK(v[0] == 1 && v[1] == -2 && v[2] == 3);
    }
    SW_CHECK(sw_gguf_arr_str(g, "t.arr_i32", 0, &str) == -1);
    SW_CHECK(sw_gguf_get_arr(g, "t.arr_str", &et, &count) == 0 && et == SW_GGUF_STRING &&
             count == 3);
    SW_CHECK(sw_gguf_arr_data(g, "t.arr_str") == NULL);
    SW_CHECK(sw_gguf_arr_str(g, "t.arr_str", 1, &str) == 0 && sw_gguf_str_eq(str, "bc"));
    SW_CHECK(sw_gguf_arr_str(g, "t.arr_str", 2, &str) == 0 && sw_gguf_str_eq(str, ""));
    SW_CHECK(sw_gguf_arr_str(g, "t.arr_str", 0, &str) == 0 && sw_gguf_str_eq(str, "a"));
    SW_CHECK(sw_gguf_arr_str(g, "t.arr_str", 3, &str) == -1);
    SW_CHECK(sw_gguf_get_arr(g, "t.u8", &et, &count) == -1);

    const sw_gguf_tensor_t *t0 = sw_gguf_find_tensor(g, "t0.f32");
    const sw_gguf_tensor_t *t1 = sw_gguf_find_tensor(g, "t1.q8");
    SW_CHECK(sw_gguf_find_tensor(g, "t1") == NULL);
    SW_CHECK(t0 == sw_gguf_tensor(g, 0) && t1 == sw_gguf_tensor(g, 1));
    SW_CHECK(sw_gguf_tensor(g, 2) == NULL && sw_gguf_tensor(g, -1) == NULL);
    // the data section starts after the header, aligned to 64; tensor 1 ends the file
    size_t t1_at = b.len - SYNTH_T1_BYTES;
    if (t0 && t1) {
        SW_CHECK_INT(t0->type, SW_TYPE_F32);
        SW_CHECK_INT(t0->n_dims, 2);
        SW_CHECK(t0->ne[0] == 4 && t0->ne[1] == 3 && t0->ne[2] == 1 && t0->ne[3] == 1);
        SW_CHECK_INT(t0->n_elements, 12);
        SW_CHECK_INT(t0->n_bytes, 48);
        SW_CHECK((const uint8_t *)t0->data == b.p + t1_at - 64);
        float v;
        memcpy(&v, (const uint8_t *)t0->data + 11 * 4, 4);
        SW_CHECK_NEAR(v, 5.5, 0);
        SW_CHECK_INT(t1->type, SW_TYPE_Q8_0);
        SW_CHECK(t1->ne[0] == 64 && t1->ne[1] == 2);
        SW_CHECK_INT(t1->n_elements, 128);
        SW_CHECK_INT(t1->n_bytes, SYNTH_T1_BYTES);
        SW_CHECK((const uint8_t *)t1->data == b.p + t1_at);
        SW_CHECK_INT(((const uint8_t *)t1->data)[5], 36);
    }
    walk(g, b.p, b.len);
    sw_gguf_close(&g);
    SW_CHECK(g == NULL);
    sw_gguf_close(&g); // idempotent
    sw_gguf_close(NULL);

    // v2, the default alignment (no key), a 4-dim tensor, 32-byte alignment
    struct synth v = synth_default();
    v.version = 2;
    v.align_type = SW_GGUF_ARRAY;
    v.n_dims = 4;
    synth_build(&b, &v);
    g = sw_gguf_open_buffer(b.p, b.len, err, sizeof err);
    SW_CHECK(g != NULL);
    if (g) {
        SW_CHECK_INT(sw_gguf_version(g), 2);
        SW_CHECK_INT(sw_gguf_find_key(g, "general.alignment"), -1);
        const sw_gguf_tensor_t *t = sw_gguf_find_tensor(g, "t1.q8");
        SW_CHECK(t && t->n_dims == 4 && (const uint8_t *)t->data == b.p + b.len - SYNTH_T1_BYTES);
        SW_CHECK(t && ((uintptr_t)t->data - (uintptr_t)b.p) % 32 == 0);
    } else {
        fprintf(stderr, "v2 file refused: %s\n", err);
    }
    sw_gguf_close(&g);
    free(b.p);
}

/* The file with one defect must be refused with an error naming it. */
static void expect_refused(const struct synth *s, const char *what, const char *needle)
{
    struct wbuf b = {0};
    synth_build(&b, s);
    char err[512] = "";
    sw_gguf_t *g = sw_gguf_open_buffer(b.p, b.len, err, sizeof err);
    SW_CHECK(g == NULL);
    SW_CHECK(strlen(err) > 0 && strchr(err, '\n') == NULL);
    if (g || !strstr(err, needle)) {
        fprintf(stderr, "%s: %s; error was '%s', expected it to mention '%s'\n", what,
                g ? "accepted" : "refused", err, needle);
        sw_test_failures++;
    }
    sw_gguf_close(&g);
    free(b.p);
}

static void test_broken(void)
{
    struct synth s;
#define BROKEN(field_assign, needle)                                                               \
    do {                                                                                           \
        s = synth_default();                                                                       \
        field_assign;                                                                              \
        expect_refused(&s, #field_assign, needle);                                                 \
    } while (0)
    BROKEN(s.magic[3] = 'X', "magic");
    BROKEN(s.version = 1, "version 1");
    BROKEN(s.version = 4, "version 4");
    BROKEN(s.version = 0x03000000, "big-endian");
    BROKEN(s.n_tensors = 1ll << 40, "tensor count");
    BROKEN(s.n_tensors = 3, "n_dims 0"); // reads the data padding
    BROKEN(s.n_kv = UINT64_MAX, "kv count");
    BROKEN(s.n_kv = 1ull << 30, "kv count");
    BROKEN(s.n_kv = 16, "length");
    BROKEN(s.key0_len = UINT64_MAX, "length");
    BROKEN(s.key0_len = 1ull << 62, "length");
    BROKEN(s.key0_len = 100000, "length");
    BROKEN(s.arr_count = UINT64_MAX, "array of");
    BROKEN(s.arr_count = (UINT64_MAX / 8) + 1, "array of");
    BROKEN(s.arr_count = 4, "length");
    BROKEN(s.arr_elem = SW_GGUF_ARRAY, "nested");
    BROKEN(s.arr_elem = 13, "not a GGUF type");
    BROKEN(s.arr_elem = SW_GGUF_UINT64, "length"); // 3 u64 eat the next key
    BROKEN(s.n_dims = 5, "n_dims 5");
    BROKEN(s.n_dims = 0, "n_dims 0");
    BROKEN(s.n_dims = UINT32_MAX, "n_dims");
    BROKEN(s.ne1 = (uint64_t)-1, "negative");
    BROKEN(s.ne1 = 1ull << 62, "overflows");
    BROKEN(s.ne1 = 1ull << 40, "past the end");
    BROKEN(s.type1 = SW_TYPE_COUNT, "type id 43 is unknown");
    BROKEN(s.type1 = 1000, "type id 1000 is unknown");
    BROKEN(s.type1 = 4, "(id 4) has a block layout");
    BROKEN(s.type1 = SW_TYPE_Q4_K, "multiple");
    BROKEN(s.off1_add = 1, "alignment");
    BROKEN(s.off1_add = 32, "alignment");
    BROKEN(s.off1_add = 64, "past the end");
    BROKEN(s.off1_add = 1ull << 20, "past the end");
    BROKEN(s.off1_add = UINT64_MAX - 127, "past the end"); // offset 2^64 - 64
    BROKEN(s.name1 = "t0.f32", "duplicate tensor");
    BROKEN(s.dup_key = 1, "duplicate key");
    BROKEN(s.alignment = 0, "power of two");
    BROKEN(s.alignment = 48, "power of two");
    BROKEN((s.align_type = SW_GGUF_UINT64, s.alignment = 1ull << 40), "power of two");
    BROKEN(s.align_type = SW_GGUF_FLOAT32, "integer");
    BROKEN(s.align_type = 77, "not a GGUF type");
#undef BROKEN

    char err[128] = "";
    SW_CHECK(sw_gguf_open_buffer(NULL, 0, err, sizeof err) == NULL && err[0]);
    err[0] = 0;
    SW_CHECK(sw_gguf_open("/nonexistent/x.gguf", err, sizeof err) == NULL && err[0]);
    err[0] = 0;
    SW_CHECK(sw_gguf_open("/", err, sizeof err) == NULL && err[0]);
    SW_CHECK(sw_gguf_open_buffer("GGUF", 4, NULL, 0) == NULL); // no error buffer: fine
}

/* Every proper prefix of the synthetic file is refused (its last byte is
 * tensor data). Each prefix is copied into its own allocation so that ASan
 * sees any read past it. */
static void test_truncated(void)
{
    struct wbuf b = {0};
    struct synth s = synth_default();
    synth_build(&b, &s);
    int refused = 0;
    for (size_t len = 0; len < b.len; len++) {
        uint8_t *p = malloc(len ? len : 1);
        memcpy(p, b.p, len);
        char err[512] = "";
        sw_gguf_t *g = sw_gguf_open_buffer(p, len, err, sizeof err);
        refused += g == NULL && err[0] != 0;
        sw_gguf_close(&g);
        free(p);
    }
    SW_CHECK_INT(refused, b.len);
    free(b.p);
}

static uint64_t s_rng;

static uint64_t rnd(void)
{
    s_rng ^= s_rng << 13;
    s_rng ^= s_rng >> 7;
    s_rng ^= s_rng << 17;
    return s_rng;
}

/* Seeded random mutations: each result is refused with an error or walks
 * cleanly. Byte flips, interesting 64-bit values over length/count fields,
 * and truncations. */
static void test_mutations(void)
{
    struct wbuf b = {0};
    struct synth s = synth_default();
    synth_build(&b, &s);
    static const uint64_t interesting[] = {0,
                                           1,
                                           2,
                                           4,
                                           5,
                                           31,
                                           32,
                                           63,
                                           64,
                                           255,
                                           0x7fffffffffffffffull,
                                           0x8000000000000000ull,
                                           UINT64_MAX,
                                           1ull << 32};
    s_rng = 0x9e3779b97f4a7c15ull;
    int opened = 0;
    const int n = 4000;
    uint8_t *p = malloc(b.len);
    for (int it = 0; it < n; it++) {
        memcpy(p, b.p, b.len);
        size_t len = b.len;
        int edits = 1 + (int)(rnd() % 4);
        for (int e = 0; e < edits; e++) {
            size_t at = (size_t)(rnd() % len);
            switch (rnd() % 4) {
            case 0:
                p[at] ^= (uint8_t)(1u << (rnd() % 8));
                break;
            case 1:
                p[at] = (uint8_t)rnd();
                break;
            case 2:
                if (at + 8 <= len) {
                    uint64_t v = interesting[rnd() % (sizeof interesting / sizeof *interesting)];
                    memcpy(p + at, &v, 8);
                }
                break;
            default:
                if (rnd() % 4 == 0)
                    len = at + 1;
                break;
            }
        }
        uint8_t *q = malloc(len); // exact size so ASan sees overreads
        memcpy(q, p, len);
        char err[512] = "";
        sw_gguf_t *g = sw_gguf_open_buffer(q, len, err, sizeof err);
        if (g) {
            opened++;
            walk(g, q, len);
        } else {
            SW_CHECK(err[0] != 0);
        }
        sw_gguf_close(&g);
        free(q);
    }
    printf("mutations: %d of %d still parse\n", opened, n);
    SW_CHECK(opened > 0 && opened < n); // the mutator does reach both outcomes
    free(p);
    free(b.p);
}

static void test_model(void)
{
    const char *path = getenv("SW_TEST_MODEL");
    if (!path || access(path, R_OK) != 0) {
        sw_test_skip_part("model part: SW_TEST_MODEL absent (run: bash scripts/fetch_model.sh)");
        return;
    }
    char err[512] = "";
    sw_gguf_t *g = sw_gguf_open(path, err, sizeof err);
    SW_CHECK(g != NULL);
    if (!g) {
        fprintf(stderr, "model refused: %s\n", err);
        return;
    }
    sw_gguf_str_t arch;
    SW_CHECK(sw_gguf_get_str(g, "general.architecture", &arch) == 0 &&
             sw_gguf_str_eq(arch, "llama"));
    uint64_t u = 0;
    SW_CHECK(sw_gguf_get_u64(g, "llama.block_count", &u) == 0);
    SW_CHECK_INT(u, 30);
    const sw_gguf_tensor_t *q = sw_gguf_find_tensor(g, "blk.0.attn_q.weight");
    SW_CHECK(q != NULL);
    if (q) {
        SW_CHECK_INT(q->n_dims, 2);
        SW_CHECK(q->ne[0] == 576 && q->ne[1] == 576);
        uint64_t row;
        SW_CHECK(sw_type_row_bytes(q->type, 576, &row) == 0 && q->n_bytes == row * 576);
    }
    enum sw_gguf_vtype et;
    uint64_t count = 0;
    SW_CHECK(sw_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &count) == 0);
    SW_CHECK_INT(et, SW_GGUF_STRING);
    SW_CHECK_INT(count, 49152);
    sw_gguf_str_t tok;
    SW_CHECK(sw_gguf_arr_str(g, "tokenizer.ggml.tokens", 0, &tok) == 0 && tok.len > 0);
    SW_CHECK(sw_gguf_arr_str(g, "tokenizer.ggml.tokens", count - 1, &tok) == 0 && tok.len > 0);
    SW_CHECK(sw_gguf_arr_str(g, "tokenizer.ggml.tokens", count, &tok) == -1);
    printf("model: %lld kvs, %lld tensors, %llu bytes\n", (long long)sw_gguf_kv_count(g),
           (long long)sw_gguf_tensor_count(g), (unsigned long long)sw_gguf_file_size(g));
    sw_gguf_close(&g);

    // Over our own mapping, to check pointers against it and that opening
    // never touches tensor data: the data pages are made inaccessible.
    int fd = open(path, O_RDONLY);
    struct stat st;
    SW_CHECK(fd >= 0 && fstat(fd, &st) == 0);
    size_t size = (size_t)st.st_size;
    uint8_t *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    SW_CHECK(map != MAP_FAILED);
    if (map == MAP_FAILED)
        return;
    g = sw_gguf_open_buffer(map, size, err, sizeof err);
    SW_CHECK(g != NULL);
    if (!g)
        return;
    size_t data_start = size;
    int inside = 0;
    for (int64_t i = 0; i < sw_gguf_tensor_count(g); i++) {
        const sw_gguf_tensor_t *t = sw_gguf_tensor(g, i);
        const uint8_t *p = t->data;
        inside += p >= map && p + t->n_bytes <= map + size;
        if ((size_t)(p - map) < data_start)
            data_start = (size_t)(p - map);
    }
    SW_CHECK_INT(inside, sw_gguf_tensor_count(g));
    sw_gguf_close(&g);
    printf("model: header is %zu bytes\n", data_start);

    // ~200 truncations of the header region (first 2 MB), each refused
    size_t region = data_start < (2u << 20) ? data_start : (2u << 20);
    int refused = 0, tries = 0;
    s_rng = 12345;
    for (int k = 0; k < 200; k++) {
        size_t len = region * (size_t)k / 200 + (size_t)(rnd() % 64);
        if (len >= size)
            continue;
        uint8_t *p = malloc(len ? len : 1);
        memcpy(p, map, len);
        err[0] = 0;
        sw_gguf_t *t = sw_gguf_open_buffer(p, len, err, sizeof err);
        tries++;
        refused += t == NULL && err[0] != 0;
        sw_gguf_close(&t);
        free(p);
    }
    SW_CHECK_INT(refused, tries);

    long page = sysconf(_SC_PAGESIZE);
    size_t prot = (data_start + (size_t)page - 1) / (size_t)page * (size_t)page;
    SW_CHECK(prot < size && mprotect(map + prot, size - prot, PROT_NONE) == 0);
    g = sw_gguf_open_buffer(map, size, err, sizeof err); // a SIGSEGV here fails the test
    SW_CHECK(g != NULL);
    sw_gguf_close(&g);
    munmap(map, size);
}

/* The fuzzer's seed corpus: every file parses. gguf_py_small.gguf was written
 * by the reference writer (tests/fuzz/make_gguf_seed.py, gguf-py 0.19): our
 * reading of it must match what that script wrote. */
static void test_reference_seed(void)
{
    const char *src = getenv("SW_SOURCE_DIR");
    if (!src) {
        sw_test_skip_part("reference seed: SW_SOURCE_DIR is not set");
        return;
    }
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/fuzz/corpus/gguf/gguf_py_small.gguf", src);
    char err[512] = "";
    sw_gguf_t *g = sw_gguf_open(path, err, sizeof err);
    SW_CHECK(g != NULL);
    if (!g) {
        fprintf(stderr, "%s refused: %s\n", path, err);
        return;
    }
    SW_CHECK_INT(sw_gguf_version(g), 3);
    SW_CHECK_INT(sw_gguf_kv_count(g), 12);
    sw_gguf_str_t str;
    uint64_t u = 0;
    int64_t i = 0;
    double d = 0;
    int bo = 0;
    SW_CHECK(sw_gguf_get_str(g, "general.architecture", &str) == 0 && sw_gguf_str_eq(str, "llama"));
    SW_CHECK(sw_gguf_get_u64(g, "llama.block_count", &u) == 0 && u == 2);
    SW_CHECK(sw_gguf_get_u64(g, "llama.context_length", &u) == 0 && u == 128);
    SW_CHECK(sw_gguf_get_u64(g, "seed.u8", &u) == 0 && u == 7);
    SW_CHECK(sw_gguf_get_i64(g, "seed.i16", &i) == 0 && i == -300);
    SW_CHECK(sw_gguf_get_i64(g, "seed.i64", &i) == 0 && i == -(1ll << 35));
    SW_CHECK(sw_gguf_get_f64(g, "seed.f32", &d) == 0 && d == 0.25);
    SW_CHECK(sw_gguf_get_f64(g, "seed.f64", &d) == 0 && d == -2.5);
    SW_CHECK(sw_gguf_get_bool(g, "seed.bool", &bo) == 0 && bo == 1);
    SW_CHECK(sw_gguf_get_str(g, "seed.str", &str) == 0 && sw_gguf_str_eq(str, "h\xc3\xa9llo"));
    SW_CHECK(sw_gguf_arr_str(g, "seed.arr_str", 1, &str) == 0 && sw_gguf_str_eq(str, "</s>"));
    SW_CHECK(sw_gguf_arr_str(g, "seed.arr_str", 3, &str) == 0 && sw_gguf_str_eq(str, "bc"));
    const uint8_t *f = sw_gguf_arr_data(g, "seed.arr_f32");
    float v[3] = {0};
    if (f)
        memcpy(v, f, sizeof v);
    SW_CHECK(v[0] == 1.0f && v[1] == 2.0f && v[2] == 3.0f);
    const sw_gguf_tensor_t *t = sw_gguf_find_tensor(g, "tok_embd.weight");
    SW_CHECK(t && t->type == SW_TYPE_F32 && t->ne[0] == 32 && t->ne[1] == 3 && t->n_bytes == 384);
    if (t) {
        memcpy(v, (const uint8_t *)t->data + 95 * 4, 4);
        SW_CHECK(v[0] == 95.0f);
    }
    t = sw_gguf_find_tensor(g, "norm.weight");
    SW_CHECK(t && t->type == SW_TYPE_F16 && t->n_dims == 1 && t->n_bytes == 64);
    t = sw_gguf_find_tensor(g, "blk.0.q8.weight");
    SW_CHECK(t && t->type == SW_TYPE_Q8_0 && t->ne[0] == 64 && t->ne[1] == 1 && t->n_bytes == 68);
    SW_CHECK(t && ((const uint8_t *)t->data)[67] == 67);
    sw_gguf_close(&g);

    // the committed synthetic seed is the default synthetic file
    snprintf(path, sizeof path, "%s/tests/fuzz/corpus/gguf/synthetic.gguf", src);
    size_t len = 0;
    char *seed = sw_test_read_file(path, &len);
    struct wbuf b = {0};
    struct synth s = synth_default();
    synth_build(&b, &s);
    SW_CHECK(seed && len == b.len && memcmp(seed, b.p, len) == 0);
    free(seed);
    free(b.p);
}

/* test_gguf --write-seed PATH writes the synthetic file (the fuzzer's seed). */
static int write_seed(const char *path)
{
    struct wbuf b = {0};
    struct synth s = synth_default();
    synth_build(&b, &s);
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(b.p, 1, b.len, f) == b.len;
    if (f && fclose(f) != 0)
        ok = 0;
    free(b.p);
    if (!ok)
        fprintf(stderr, "cannot write %s\n", path);
    return ok ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--write-seed") == 0)
        return write_seed(argv[2]);
    test_synthetic_ok();
    test_reference_seed();
    test_broken();
    test_truncated();
    test_mutations();
    test_model();
    return sw_test_done();
}
