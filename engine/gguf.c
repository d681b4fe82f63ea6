/*
 * gguf.c - the GGUF (v2/v3, little-endian) reader declared in gguf.h.
 *
 * The file is mapped read-only and parsed once, front to back, by a bounded
 * cursor: every read first checks that its byte count fits in what is left,
 * and every count is compared with the bytes that remain before anything is
 * allocated for it, so no input can make the parser read outside the buffer
 * or allocate more than a small multiple of the file size. The parse only
 * touches the header (metadata and tensor infos); tensor data are checked by
 * arithmetic on offsets and sizes, never read.
 *
 * Layout (all integers little-endian):
 *   "GGUF" u32 version, u64 n_tensors, u64 n_kv,
 *   n_kv x (string key, u32 type, value),
 *   n_tensors x (string name, u32 n_dims, n_dims x u64 ne, u32 type, u64 offset),
 *   padding to general.alignment (default 32), tensor data.
 * A string is u64 length + bytes (no NUL). An array value is u32 element type,
 * u64 count, then the elements.
 */
#include "gguf.h"
#include "gguf_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "gguf.c reads little-endian integers with memcpy: port it for big-endian hosts"
#endif

_Static_assert(offsetof(sw_gguf_tensor_t, name) == 0, "the index needs the name first");
_Static_assert(offsetof(struct sw_gguf_kv, key) == 0, "the index needs the name first");

#define S_DEFAULT_ALIGNMENT 32
#define S_N_VTYPES 13
/* Upper bounds on header counts, far above any real model (a few thousand
 * tensors, a few dozen keys), checked before the byte-based bounds. */
#define S_MAX_TENSORS (1u << 24)
#define S_MAX_KV (1u << 24)
/* Smallest encodings: a kv is key length (8) + type (4) + a 1-byte value; a
 * tensor info is name length (8) + n_dims (4) + one ne (8) + type (4) +
 * offset (8). */
#define S_MIN_KV_BYTES 13u
#define S_MIN_TENSOR_BYTES 32u
/* Longest name quoted in an error message. */
#define S_NAME_QUOTE 80

/* ---- bounded cursor ---- */

typedef struct s_rd {
    const uint8_t *buf; // (size) input
    uint64_t size;      // input size
    uint64_t pos;       // next byte to read
    char *err;          // caller's error buffer (may be NULL)
    size_t err_len;     // its size
    char ctx[256];      // what is being parsed, for error messages
} s_rd_t;

static void s_set_err(char *err, size_t err_len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void s_set_err(char *err, size_t err_len, const char *fmt, ...)
{
    if (!err || err_len == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_len, fmt, ap);
    va_end(ap);
}

static int s_fail(s_rd_t *rd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Writes "gguf: <ctx>: <message>" into the error buffer; returns -1. */
static int s_fail(s_rd_t *rd, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    s_set_err(rd->err, rd->err_len, "gguf: %s: %s", rd->ctx, msg);
    return -1;
}

/* Copies a name into out as a printable, quoted-safe C string (at most
 * S_NAME_QUOTE bytes, '?' for bytes outside printable ASCII, "..." if cut). */
static void s_quote(const uint8_t *p, uint64_t len, char *out, size_t out_len)
{
    size_t n = 0;
    for (uint64_t i = 0; i < len && i < S_NAME_QUOTE && n + 1 < out_len; i++) {
        uint8_t c = p[i];
        out[n++] = (c >= 0x20 && c < 0x7f && c != '\'') ? (char)c : '?';
    }
    if (len > S_NAME_QUOTE && n + 4 < out_len) {
        memcpy(out + n, "...", 3);
        n += 3;
    }
    out[n] = 0;
}

/* Reserves n bytes at the cursor; *at receives their offset. */
static int s_take(s_rd_t *rd, uint64_t n, const char *what, uint64_t *at)
{
    *at = rd->pos;
    if (n > rd->size - rd->pos)
        return s_fail(
            rd, "%s (%llu bytes at offset %llu) runs past the end of the file (size %llu)", what,
            (unsigned long long)n, (unsigned long long)rd->pos, (unsigned long long)rd->size);
    *at = rd->pos;
    rd->pos += n;
    return 0;
}

static int s_u32(s_rd_t *rd, const char *what, uint32_t *out)
{
    uint64_t at;
    if (s_take(rd, 4, what, &at) != 0)
        return -1;
    memcpy(out, rd->buf + at, 4);
    return 0;
}

static int s_u64(s_rd_t *rd, const char *what, uint64_t *out)
{
    uint64_t at;
    if (s_take(rd, 8, what, &at) != 0)
        return -1;
    memcpy(out, rd->buf + at, 8);
    return 0;
}

/* Reads a string (u64 length + bytes) into a view of the buffer. */
static int s_str(s_rd_t *rd, const char *what, sw_gguf_str_t *out)
{
    uint64_t len, at;
    if (s_u64(rd, what, &len) != 0)
        return -1;
    if (len > rd->size - rd->pos)
        return s_fail(rd, "%s has length %llu but only %llu bytes are left in the file", what,
                      (unsigned long long)len, (unsigned long long)(rd->size - rd->pos));
    if (s_take(rd, len, what, &at) != 0)
        return -1;
    out->ptr = (const char *)rd->buf + at;
    out->len = len;
    return 0;
}

/* ---- name index ---- */

static uint64_t s_hash(const char *p, uint64_t len)
{
    uint64_t h = 1469598103934665603ull; // FNV-1a
    for (uint64_t i = 0; i < len; i++) {
        h ^= (uint8_t)p[i];
        h *= 1099511628211ull;
    }
    return h;
}

static int s_index_init(struct sw_gguf_index *ix, uint64_t n)
{
    uint64_t slots = 16;
    while (slots < 2 * n)
        slots *= 2;
    ix->slots = calloc(slots, sizeof *ix->slots);
    ix->mask = slots - 1;
    return ix->slots ? 0 : -1;
}

/* Finds name among entries (structs stride bytes apart whose first field is
 * their sw_gguf_str_t name); returns its index or -1. */
static int64_t s_index_find(const struct sw_gguf_index *ix, const void *entries, size_t stride,
                            const char *name, uint64_t len)
{
    if (!ix->slots)
        return -1;
    for (uint64_t s = s_hash(name, len) & ix->mask;; s = (s + 1) & ix->mask) {
        uint32_t v = ix->slots[s];
        if (v == 0)
            return -1;
        const sw_gguf_str_t *e =
            (const sw_gguf_str_t *)((const char *)entries + (size_t)(v - 1) * stride);
        if (e->len == len && memcmp(e->ptr, name, len) == 0)
            return (int64_t)(v - 1);
    }
}

/* Inserts entry i; returns the index of an entry with the same name, or -1
 * when the name was new. */
static int64_t s_index_add(struct sw_gguf_index *ix, const void *entries, size_t stride, uint32_t i)
{
    const sw_gguf_str_t *name = (const sw_gguf_str_t *)((const char *)entries + (size_t)i * stride);
    uint64_t s = s_hash(name->ptr, name->len) & ix->mask;
    for (;; s = (s + 1) & ix->mask) {
        uint32_t v = ix->slots[s];
        if (v == 0)
            break;
        const sw_gguf_str_t *e =
            (const sw_gguf_str_t *)((const char *)entries + (size_t)(v - 1) * stride);
        if (e->len == name->len && memcmp(e->ptr, name->ptr, name->len) == 0)
            return (int64_t)(v - 1);
    }
    ix->slots[s] = i + 1;
    return -1;
}

/* ---- metadata ---- */

uint64_t sw_gguf_vtype_size(enum sw_gguf_vtype t)
{
    switch (t) {
    case SW_GGUF_UINT8:
    case SW_GGUF_INT8:
    case SW_GGUF_BOOL:
        return 1;
    case SW_GGUF_UINT16:
    case SW_GGUF_INT16:
        return 2;
    case SW_GGUF_UINT32:
    case SW_GGUF_INT32:
    case SW_GGUF_FLOAT32:
        return 4;
    case SW_GGUF_UINT64:
    case SW_GGUF_INT64:
    case SW_GGUF_FLOAT64:
        return 8;
    default:
        return 0; // string, array, or not a type
    }
}

static int s_parse_value(s_rd_t *rd, struct sw_gguf_kv *kv, uint32_t type)
{
    uint64_t at;
    if (type >= S_N_VTYPES)
        return s_fail(rd, "value type %u is not a GGUF type", type);
    kv->type = (enum sw_gguf_vtype)type;
    kv->count = 1;
    kv->off = rd->pos;
    if (type == SW_GGUF_STRING) {
        sw_gguf_str_t s;
        return s_str(rd, "string value", &s);
    }
    if (type != SW_GGUF_ARRAY)
        return s_take(rd, sw_gguf_vtype_size((enum sw_gguf_vtype)type), "value", &at);

    uint32_t et;
    uint64_t count;
    if (s_u32(rd, "array element type", &et) != 0 || s_u64(rd, "array count", &count) != 0)
        return -1;
    if (et == SW_GGUF_ARRAY)
        return s_fail(rd, "nested arrays are not supported");
    if (et >= S_N_VTYPES)
        return s_fail(rd, "array element type %u is not a GGUF type", et);
    kv->elem_type = (enum sw_gguf_vtype)et;
    kv->count = count;
    kv->off = rd->pos;
    uint64_t left = rd->size - rd->pos;
    if (et != SW_GGUF_STRING) {
        uint64_t esz = sw_gguf_vtype_size((enum sw_gguf_vtype)et);
        if (count > left / esz)
            return s_fail(
                rd, "array of %llu elements of %llu bytes needs more than the %llu bytes left",
                (unsigned long long)count, (unsigned long long)esz, (unsigned long long)left);
        return s_take(rd, count * esz, "array", &at);
    }
    if (count > left / 8)
        return s_fail(rd, "array of %llu strings needs more than the %llu bytes left",
                      (unsigned long long)count, (unsigned long long)left);
    if (count == 0)
        return 0;
    kv->str_off = malloc(count * sizeof *kv->str_off);
    if (!kv->str_off)
        return s_fail(rd, "out of memory for an index of %llu strings", (unsigned long long)count);
    for (uint64_t i = 0; i < count; i++) {
        sw_gguf_str_t s;
        kv->str_off[i] = rd->pos;
        if (s_str(rd, "array string", &s) != 0)
            return -1;
    }
    return 0;
}

static int s_parse_kvs(sw_gguf_t *g, s_rd_t *rd)
{
    char q[S_NAME_QUOTE + 8];
    g->kv = calloc(g->n_kv ? (size_t)g->n_kv : 1, sizeof *g->kv);
    if (!g->kv || s_index_init(&g->kv_index, (uint64_t)g->n_kv) != 0)
        return s_fail(rd, "out of memory for %lld kvs", (long long)g->n_kv);
    for (int64_t i = 0; i < g->n_kv; i++) {
        struct sw_gguf_kv *kv = &g->kv[i];
        uint32_t type;
        snprintf(rd->ctx, sizeof rd->ctx, "kv %lld", (long long)i);
        if (s_str(rd, "key", &kv->key) != 0)
            return -1;
        s_quote((const uint8_t *)kv->key.ptr, kv->key.len, q, sizeof q);
        snprintf(rd->ctx, sizeof rd->ctx, "kv %lld ('%s')", (long long)i, q);
        if (s_u32(rd, "value type", &type) != 0 || s_parse_value(rd, kv, type) != 0)
            return -1;
        if (s_index_add(&g->kv_index, g->kv, sizeof *g->kv, (uint32_t)i) >= 0)
            return s_fail(rd, "duplicate key");
    }
    return 0;
}

/* Reads an integer value of any width; -1 if not an integer or it does not
 * fit. */
static int s_kv_int(const sw_gguf_t *g, const struct sw_gguf_kv *kv, int is_signed, uint64_t *u,
                    int64_t *s)
{
    const uint8_t *p = g->base + kv->off;
    int64_t sv = 0;
    uint64_t uv = 0;
    int neg = 0;
    switch (kv->type) {
    case SW_GGUF_UINT8:
        uv = p[0];
        break;
    case SW_GGUF_INT8: {
        int8_t v;
        memcpy(&v, p, 1);
        sv = v;
        neg = 1;
        break;
    }
    case SW_GGUF_UINT16: {
        uint16_t v;
        memcpy(&v, p, 2);
        uv = v;
        break;
    }
    case SW_GGUF_INT16: {
        int16_t v;
        memcpy(&v, p, 2);
        sv = v;
        neg = 1;
        break;
    }
    case SW_GGUF_UINT32: {
        uint32_t v;
        memcpy(&v, p, 4);
        uv = v;
        break;
    }
    case SW_GGUF_INT32: {
        int32_t v;
        memcpy(&v, p, 4);
        sv = v;
        neg = 1;
        break;
    }
    case SW_GGUF_UINT64:
        memcpy(&uv, p, 8);
        break;
    case SW_GGUF_INT64:
        memcpy(&sv, p, 8);
        neg = 1;
        break;
    default:
        return -1;
    }
    // neg: the value is in sv (a signed type); otherwise in uv.
    if (is_signed) {
        if (!neg && uv > (uint64_t)INT64_MAX)
            return -1;
        *s = neg ? sv : (int64_t)uv;
    } else {
        if (neg && sv < 0)
            return -1;
        *u = neg ? (uint64_t)sv : uv;
    }
    return 0;
}

static int s_parse_alignment(sw_gguf_t *g, s_rd_t *rd)
{
    g->alignment = S_DEFAULT_ALIGNMENT;
    int64_t i = sw_gguf_find_key(g, "general.alignment");
    if (i < 0)
        return 0;
    uint64_t a;
    snprintf(rd->ctx, sizeof rd->ctx, "general.alignment");
    if (s_kv_int(g, &g->kv[i], 0, &a, NULL) != 0)
        return s_fail(rd, "must be a non-negative integer (it has value type %u)", g->kv[i].type);
    if (a == 0 || (a & (a - 1)) != 0 || a > UINT32_MAX)
        return s_fail(rd, "%llu is not a power of two in [1, 2^31]", (unsigned long long)a);
    g->alignment = a;
    return 0;
}

/* ---- tensors ---- */

static int s_parse_tensor_info(s_rd_t *rd, sw_gguf_tensor_t *t, uint64_t *offset, int64_t i)
{
    char q[S_NAME_QUOTE + 8];
    uint32_t type;
    snprintf(rd->ctx, sizeof rd->ctx, "tensor %lld", (long long)i);
    if (s_str(rd, "name", &t->name) != 0)
        return -1;
    s_quote((const uint8_t *)t->name.ptr, t->name.len, q, sizeof q);
    snprintf(rd->ctx, sizeof rd->ctx, "tensor '%s'", q);
    if (s_u32(rd, "n_dims", &t->n_dims) != 0)
        return -1;
    if (t->n_dims < 1 || t->n_dims > SW_GGUF_MAX_DIMS)
        return s_fail(rd, "n_dims %u is outside 1..%d", t->n_dims, SW_GGUF_MAX_DIMS);
    uint64_t n_el = 1;
    for (uint32_t d = 0; d < SW_GGUF_MAX_DIMS; d++) {
        uint64_t ne = 1;
        if (d < t->n_dims && s_u64(rd, "ne", &ne) != 0)
            return -1;
        if (ne > (uint64_t)INT64_MAX)
            return s_fail(rd, "ne[%u] = %lld is negative", d, (long long)ne);
        if (ne != 0 && n_el > (uint64_t)INT64_MAX / ne)
            return s_fail(rd, "the element count overflows at ne[%u] = %llu", d,
                          (unsigned long long)ne);
        n_el *= ne;
        t->ne[d] = (int64_t)ne;
    }
    t->n_elements = n_el;
    if (s_u32(rd, "type", &type) != 0)
        return -1;
    if (type >= SW_TYPE_COUNT)
        return s_fail(rd, "type id %u is unknown (ids known here: 0..%d)", type, SW_TYPE_COUNT - 1);
    t->type = (enum sw_type)type;
    int64_t blck = sw_type_block_elems(t->type);
    if (blck == 0)
        return s_fail(rd, "type %s (id %u) has a block layout shardwire does not know",
                      sw_type_name(t->type), type);
    uint64_t row;
    if (sw_type_row_bytes(t->type, t->ne[0], &row) != 0)
        return s_fail(rd, "ne[0] = %lld is not a multiple of the %s block size %lld",
                      (long long)t->ne[0], sw_type_name(t->type), (long long)blck);
    uint64_t rows = n_el ? n_el / (uint64_t)t->ne[0] : 0;
    if (rows != 0 && row > UINT64_MAX / rows)
        return s_fail(rd, "the byte size overflows");
    t->n_bytes = row * rows;
    return s_u64(rd, "data offset", offset);
}

/* Checks the offsets (relative to the data section) and resolves data pointers. */
static int s_place_tensors(sw_gguf_t *g, s_rd_t *rd, const uint64_t *offsets)
{
    char q[S_NAME_QUOTE + 8];
    for (int64_t i = 0; i < g->n_tensors; i++) {
        sw_gguf_tensor_t *t = &g->tensors[i];
        uint64_t off = offsets[i];
        s_quote((const uint8_t *)t->name.ptr, t->name.len, q, sizeof q);
        snprintf(rd->ctx, sizeof rd->ctx, "tensor '%s'", q);
        if (off % g->alignment != 0)
            return s_fail(rd, "data offset %llu is not a multiple of the alignment %llu",
                          (unsigned long long)off, (unsigned long long)g->alignment);
        if (g->data_off > g->size || off > g->size - g->data_off ||
            t->n_bytes > g->size - g->data_off - off)
            return s_fail(rd,
                          "data [offset %llu, %llu bytes) runs past the end of the file (size "
                          "%llu, data section at %llu)",
                          (unsigned long long)off, (unsigned long long)t->n_bytes,
                          (unsigned long long)g->size, (unsigned long long)g->data_off);
        t->offset = g->data_off + off;
        t->data = t->n_bytes <= g->buf_len && t->offset <= g->buf_len - t->n_bytes
                      ? g->base + t->offset
                      : NULL; /* a header-only open: the data are not here */
        if (s_index_add(&g->tensor_index, g->tensors, sizeof *g->tensors, (uint32_t)i) >= 0)
            return s_fail(rd, "duplicate tensor name");
    }
    return 0;
}

static int s_parse_tensors(sw_gguf_t *g, s_rd_t *rd)
{
    g->tensors = calloc(g->n_tensors ? (size_t)g->n_tensors : 1, sizeof *g->tensors);
    uint64_t *offsets = calloc(g->n_tensors ? (size_t)g->n_tensors : 1, sizeof *offsets);
    int rc = -1;
    if (!g->tensors || !offsets || s_index_init(&g->tensor_index, (uint64_t)g->n_tensors) != 0) {
        s_fail(rd, "out of memory for %lld tensors", (long long)g->n_tensors);
        goto out;
    }
    g->kv_end = rd->pos;
    for (int64_t i = 0; i < g->n_tensors; i++)
        if (s_parse_tensor_info(rd, &g->tensors[i], &offsets[i], i) != 0)
            goto out;
    // rd->pos <= size <= UINT64_MAX / 2 in practice; alignment <= 2^31.
    g->data_off = (rd->pos + g->alignment - 1) / g->alignment * g->alignment;
    rc = s_place_tensors(g, rd, offsets);
out:
    free(offsets);
    return rc;
}

/* ---- open / close ---- */

static void s_free(sw_gguf_t *g)
{
    if (!g)
        return;
    if (g->kv)
        for (int64_t i = 0; i < g->n_kv; i++)
            free(g->kv[i].str_off);
    free(g->kv);
    free(g->tensors);
    free(g->kv_index.slots);
    free(g->tensor_index.slots);
    for (int i = 0; i < g->n_parts; i++) {
        struct sw_gguf_part *p = &g->parts[i];
        free(p->path);
        s_free(p->hdr);
        if (p->map)
            munmap((void *)p->map, (size_t)p->size);
    }
    free(g->parts);
    if (g->mapped)
        munmap((void *)g->base, (size_t)g->size);
    if (g->owns_base)
        free((void *)g->base);
    free(g);
}

sw_gguf_t *sw_gguf_parse(const uint8_t *buf, uint64_t len, uint64_t size, char *err, size_t err_len)
{
    s_rd_t rd = {.buf = buf, .size = len, .err = err, .err_len = err_len};
    snprintf(rd.ctx, sizeof rd.ctx, "header");
    if (size > UINT64_MAX / 4 || len > size) {
        s_fail(&rd, "size %llu is absurd", (unsigned long long)size);
        return NULL;
    }
    sw_gguf_t *g = calloc(1, sizeof *g);
    if (!g) {
        s_fail(&rd, "out of memory");
        return NULL;
    }
    g->base = buf;
    g->size = size;
    g->buf_len = len;
    uint64_t at, n_tensors, n_kv;
    if (s_take(&rd, 4, "magic", &at) != 0)
        goto fail;
    if (memcmp(buf, "GGUF", 4) != 0) {
        s_fail(&rd, "bad magic %02x %02x %02x %02x (expected 'GGUF'): not a GGUF file", buf[0],
               buf[1], buf[2], buf[3]);
        goto fail;
    }
    if (s_u32(&rd, "version", &g->version) != 0)
        goto fail;
    if (g->version != 2 && g->version != 3) {
        uint32_t swapped = __builtin_bswap32(g->version);
        s_fail(&rd, "version %u is not supported (only 2 and 3)%s", g->version,
               swapped == 2 || swapped == 3 ? ": this is a big-endian file" : "");
        goto fail;
    }
    if (s_u64(&rd, "tensor count", &n_tensors) != 0 || s_u64(&rd, "kv count", &n_kv) != 0)
        goto fail;
    uint64_t left = len - rd.pos;
    if (n_kv > S_MAX_KV || n_kv > left / S_MIN_KV_BYTES) {
        s_fail(&rd, "kv count %llu is impossible for %llu header bytes", (unsigned long long)n_kv,
               (unsigned long long)left);
        goto fail;
    }
    if (n_tensors > S_MAX_TENSORS || n_tensors > left / S_MIN_TENSOR_BYTES) {
        s_fail(&rd, "tensor count %llu is impossible for %llu header bytes",
               (unsigned long long)n_tensors, (unsigned long long)left);
        goto fail;
    }
    g->n_kv = (int64_t)n_kv;
    g->n_tensors = (int64_t)n_tensors;
    if (s_parse_kvs(g, &rd) != 0 || s_parse_alignment(g, &rd) != 0 || s_parse_tensors(g, &rd) != 0)
        goto fail;
    return g;
fail:
    s_free(g);
    return NULL;
}

sw_gguf_t *sw_gguf_open_buffer(const void *buf, size_t len, char *err, size_t err_len)
{
    if (!buf && len != 0) {
        s_set_err(err, err_len, "gguf: NULL buffer of %zu bytes", len);
        return NULL;
    }
    static const uint8_t empty[1];
    return sw_gguf_parse(buf ? buf : empty, len, len, err, err_len);
}

sw_gguf_t *sw_gguf_open_header(const void *buf, size_t len, uint64_t file_size, char *err,
                               size_t err_len)
{
    if (!buf || len == 0) {
        s_set_err(err, err_len, "gguf: no header bytes");
        return NULL;
    }
    return sw_gguf_parse(buf, len, file_size, err, err_len);
}

sw_gguf_t *sw_gguf_open_file(const char *path, char *err, size_t err_len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        s_set_err(err, err_len, "gguf: cannot open '%s': %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        s_set_err(err, err_len, "gguf: cannot stat '%s': %s", path, strerror(errno));
        close(fd);
        return NULL;
    }
    if (!S_ISREG(st.st_mode)) {
        s_set_err(err, err_len, "gguf: '%s' is not a regular file", path);
        close(fd);
        return NULL;
    }
    if (st.st_size == 0 || (uint64_t)st.st_size > SIZE_MAX) {
        s_set_err(err, err_len, "gguf: '%s' has size %lld: not a GGUF file", path,
                  (long long)st.st_size);
        close(fd);
        return NULL;
    }
    size_t size = (size_t)st.st_size;
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int map_errno = errno;
    close(fd);
    if (map == MAP_FAILED) {
        s_set_err(err, err_len, "gguf: cannot map '%s' (%zu bytes): %s", path, size,
                  strerror(map_errno));
        return NULL;
    }
    sw_gguf_t *g = sw_gguf_parse(map, size, size, err, err_len);
    if (!g) {
        munmap(map, size);
        return NULL;
    }
    g->mapped = 1;
    return g;
}

void sw_gguf_close(sw_gguf_t **self_p)
{
    if (!self_p)
        return;
    s_free(*self_p);
    *self_p = NULL;
}

uint32_t sw_gguf_version(const sw_gguf_t *g)
{
    return g->version;
}

uint64_t sw_gguf_file_size(const sw_gguf_t *g)
{
    return g->size;
}

const void *sw_gguf_bytes(const sw_gguf_t *g)
{
    return g->base;
}

uint64_t sw_gguf_data_offset(const sw_gguf_t *g)
{
    return g->data_off;
}

uint64_t sw_gguf_kv_end(const sw_gguf_t *g)
{
    return g->kv_end;
}

uint64_t sw_gguf_alignment(const sw_gguf_t *g)
{
    return g->alignment;
}

/* ---- metadata accessors ---- */

int64_t sw_gguf_kv_count(const sw_gguf_t *g)
{
    return g->n_kv;
}

int64_t sw_gguf_find_key(const sw_gguf_t *g, const char *key)
{
    return s_index_find(&g->kv_index, g->kv, sizeof *g->kv, key, strlen(key));
}

sw_gguf_str_t sw_gguf_kv_key(const sw_gguf_t *g, int64_t i)
{
    sw_gguf_str_t none = {NULL, 0};
    return i >= 0 && i < g->n_kv ? g->kv[i].key : none;
}

enum sw_gguf_vtype sw_gguf_kv_type(const sw_gguf_t *g, int64_t i)
{
    // An index outside [0, n_kv) is a programmer error; answer something harmless.
    return i >= 0 && i < g->n_kv ? g->kv[i].type : SW_GGUF_ARRAY;
}

static const struct sw_gguf_kv *s_kv_get(const sw_gguf_t *g, const char *key)
{
    int64_t i = sw_gguf_find_key(g, key);
    return i >= 0 ? &g->kv[i] : NULL;
}

int sw_gguf_get_u64(const sw_gguf_t *g, const char *key, uint64_t *out)
{
    const struct sw_gguf_kv *kv = s_kv_get(g, key);
    return kv ? s_kv_int(g, kv, 0, out, NULL) : -1;
}

int sw_gguf_get_i64(const sw_gguf_t *g, const char *key, int64_t *out)
{
    const struct sw_gguf_kv *kv = s_kv_get(g, key);
    return kv ? s_kv_int(g, kv, 1, NULL, out) : -1;
}

int sw_gguf_get_f64(const sw_gguf_t *g, const char *key, double *out)
{
    const struct sw_gguf_kv *kv = s_kv_get(g, key);
    if (!kv)
        return -1;
    if (kv->type == SW_GGUF_FLOAT32) {
        float f;
        memcpy(&f, g->base + kv->off, 4);
        *out = f;
        return 0;
    }
    if (kv->type == SW_GGUF_FLOAT64) {
        memcpy(out, g->base + kv->off, 8);
        return 0;
    }
    return -1;
}

int sw_gguf_get_bool(const sw_gguf_t *g, const char *key, int *out)
{
    const struct sw_gguf_kv *kv = s_kv_get(g, key);
    if (!kv || kv->type != SW_GGUF_BOOL)
        return -1;
    *out = g->base[kv->off] != 0;
    return 0;
}

/* The string whose u64 length field is at file offset off (validated at open). */
static sw_gguf_str_t s_str_at(const sw_gguf_t *g, uint64_t off)
{
    sw_gguf_str_t s;
    memcpy(&s.len, g->base + off, 8);
    s.ptr = (const char *)g->base + off + 8;
    return s;
}

int sw_gguf_get_str(const sw_gguf_t *g, const char *key, sw_gguf_str_t *out)
{
    const struct sw_gguf_kv *kv = s_kv_get(g, key);
    if (!kv || kv->type != SW_GGUF_STRING)
        return -1;
    *out = s_str_at(g, kv->off);
    return 0;
}

int sw_gguf_get_arr(const sw_gguf_t *g, const char *key, enum sw_gguf_vtype *elem_type,
                    uint64_t *count)
{
    const struct sw_gguf_kv *kv = s_kv_get(g, key);
    if (!kv || kv->type != SW_GGUF_ARRAY)
        return -1;
    *elem_type = kv->elem_type;
    *count = kv->count;
    return 0;
}

int sw_gguf_arr_str(const sw_gguf_t *g, const char *key, uint64_t i, sw_gguf_str_t *out)
{
    const struct sw_gguf_kv *kv = s_kv_get(g, key);
    if (!kv || kv->type != SW_GGUF_ARRAY || kv->elem_type != SW_GGUF_STRING || i >= kv->count)
        return -1;
    *out = s_str_at(g, kv->str_off[i]);
    return 0;
}

const void *sw_gguf_arr_data(const sw_gguf_t *g, const char *key)
{
    const struct sw_gguf_kv *kv = s_kv_get(g, key);
    if (!kv || kv->type != SW_GGUF_ARRAY ||
        sw_gguf_vtype_size((enum sw_gguf_vtype)kv->elem_type) == 0)
        return NULL;
    return g->base + kv->off;
}

int sw_gguf_kv_span(const sw_gguf_t *g, int64_t i, uint64_t *off, uint64_t *len)
{
    if (i < 0 || i >= g->n_kv)
        return -1;
    /* a key/value starts with its key's u64 length, 8 bytes before the key */
    *off = (uint64_t)((const uint8_t *)g->kv[i].key.ptr - g->base) - 8;
    const uint64_t end = i + 1 < g->n_kv
                             ? (uint64_t)((const uint8_t *)g->kv[i + 1].key.ptr - g->base) - 8
                             : g->kv_end;
    *len = end - *off;
    return 0;
}

/* ---- tensor accessors ---- */

int sw_gguf_index_tensors(sw_gguf_t *g, int64_t *first, int64_t *second)
{
    free(g->tensor_index.slots);
    g->tensor_index.slots = NULL;
    if (g->n_tensors > (int64_t)UINT32_MAX - 1 ||
        s_index_init(&g->tensor_index, (uint64_t)g->n_tensors) != 0)
        return -1;
    for (int64_t i = 0; i < g->n_tensors; i++) {
        const int64_t dup =
            s_index_add(&g->tensor_index, g->tensors, sizeof *g->tensors, (uint32_t)i);
        if (dup >= 0) {
            *first = dup;
            *second = i;
            return 1;
        }
    }
    return 0;
}

int64_t sw_gguf_tensor_count(const sw_gguf_t *g)
{
    return g->n_tensors;
}

const sw_gguf_tensor_t *sw_gguf_tensor(const sw_gguf_t *g, int64_t i)
{
    return i >= 0 && i < g->n_tensors ? &g->tensors[i] : NULL;
}

const sw_gguf_tensor_t *sw_gguf_find_tensor(const sw_gguf_t *g, const char *name)
{
    int64_t i = s_index_find(&g->tensor_index, g->tensors, sizeof *g->tensors, name, strlen(name));
    return i >= 0 ? &g->tensors[i] : NULL;
}

int sw_gguf_str_eq(sw_gguf_str_t s, const char *cstr)
{
    size_t n = strlen(cstr);
    return s.len == n && (n == 0 || memcmp(s.ptr, cstr, n) == 0);
}
