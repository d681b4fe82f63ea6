/*
 * mksplit.c - shardwire-mksplit: writes a GGUF model as a split set, byte
 * for byte as llama.cpp's gguf-split writes it (llama-gguf-split --split of
 * llama.cpp b-version vendored by llama-cpp-python 0.3.36), so that the
 * split-set tests can make their fixture on a machine without llama.cpp
 * (scripts/ci/split_models.sh, which compares the two tools' output
 * wherever llama.cpp's llama-gguf-split is built).
 *
 *   shardwire-mksplit [--split-max-tensors N | --split-max-size N(M|G)]
 *                     [--no-tensor-first-split] IN.gguf OUT_PREFIX
 *
 * writes OUT_PREFIX-00001-of-0000K.gguf ... as gguf-split does:
 *   - a new part starts at tensor i when i is a multiple of N (by tensors),
 *     or when the part's tensors, each padded to 32 bytes, would pass the
 *     size (by size: M = 10^6 bytes, G = 10^9); --no-tensor-first-split
 *     leaves the first part without tensors;
 *   - every part is GGUF v3; the first holds every key/value of IN in
 *     order, then split.no (u16), split.count (u16), split.tensors.count
 *     (i32); the others only those three;
 *   - each part's tensor infos (n_dims without trailing 1s, as ggml_n_dims)
 *     with offsets in its own data section, the header padded to 32 bytes,
 *     each tensor's data padded with zeros to 32 bytes.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "gguf.h"
#include "gguf_write.h"

#define S_ALIGN 32 /* GGUF_DEFAULT_ALIGNMENT: gguf-split pads with it whatever IN says */

static uint64_t s_pad(uint64_t n)
{
    return (n + S_ALIGN - 1) / S_ALIGN * S_ALIGN;
}

/* A run of IN's tensors: one part. */
typedef struct s_part {
    int64_t first; /* its first tensor (IN's order) */
    int64_t n;     /* its tensor count */
} s_part_t;

/* The parts of g as gguf-split cuts them (max_tensors > 0: by count, else
 * by max_bytes). The part count, or -1 (printed) for a part without tensors
 * that gguf-split refuses too. */
static int s_plan(const sw_gguf_t *g, int max_tensors, uint64_t max_bytes, int no_first,
                  s_part_t *parts)
{
    const int64_t nt = sw_gguf_tensor_count(g);
    int k = 0;
    parts[0] = (s_part_t){0, 0};
    if (no_first)
        parts[++k] = (s_part_t){0, 0};
    uint64_t cur = 0;
    for (int64_t i = 0; i < nt; i++) {
        const uint64_t n = s_pad(sw_gguf_tensor(g, i)->n_bytes), next = cur + n;
        const int split = max_tensors > 0 ? i > 0 && i % max_tensors == 0 : next > max_bytes;
        if (split) {
            if (parts[k].n == 0) {
                fprintf(stderr, "shardwire-mksplit: a part would have no tensors: the size or "
                                "tensor limit is too small\n");
                return -1;
            }
            parts[++k] = (s_part_t){i, 0};
            cur = n;
        } else {
            cur = next;
        }
        parts[k].n++;
    }
    return k + 1;
}

static void s_kv_u16(sw_gguf_out_t *o, const char *key, uint16_t v)
{
    sw_gguf_out_str(o, key, strlen(key));
    sw_gguf_out_u32(o, SW_GGUF_UINT16);
    sw_gguf_out_bytes(o, &v, sizeof v);
}

static void s_kv_i32(sw_gguf_out_t *o, const char *key, int32_t v)
{
    sw_gguf_out_str(o, key, strlen(key));
    sw_gguf_out_u32(o, SW_GGUF_INT32);
    sw_gguf_out_bytes(o, &v, sizeof v);
}

/* Writes part i of n (p) of g to path. 0, or -1 (printed). */
static int s_write_part(const sw_gguf_t *g, const s_part_t *p, int i, int n, const char *path)
{
    sw_gguf_out_t o = {.f = fopen(path, "wb")};
    if (!o.f) {
        fprintf(stderr, "shardwire-mksplit: cannot write %s: %s\n", path, strerror(errno));
        return -1;
    }
    const int64_t n_kv = i == 0 ? sw_gguf_kv_count(g) + 3 : 3;
    sw_gguf_out_header(&o, 3, (uint64_t)p->n, (uint64_t)n_kv);
    const uint8_t *bytes = sw_gguf_bytes(g);
    for (int64_t k = 0; i == 0 && k < sw_gguf_kv_count(g); k++) {
        uint64_t off, len;
        if (sw_gguf_kv_span(g, k, &off, &len) == 0)
            sw_gguf_out_bytes(&o, bytes + off, (size_t)len);
    }
    /* gguf-split sets split.count last (a placeholder at first, replaced once
     * the parts are counted: gguf moves a replaced key to the end) */
    s_kv_u16(&o, SW_GGUF_SPLIT_NO, (uint16_t)i);
    s_kv_i32(&o, SW_GGUF_SPLIT_TENSORS, (int32_t)sw_gguf_tensor_count(g));
    s_kv_u16(&o, SW_GGUF_SPLIT_COUNT, (uint16_t)n);
    uint64_t off = 0;
    for (int64_t k = p->first; k < p->first + p->n; k++) {
        const sw_gguf_tensor_t *t = sw_gguf_tensor(g, k);
        uint32_t dims = t->n_dims; /* ggml_n_dims: trailing dimensions of 1 are not written */
        while (dims > 1 && t->ne[dims - 1] == 1)
            dims--;
        sw_gguf_out_tensor_info(&o, t->name.ptr, (size_t)t->name.len, dims, t->ne, t->type,
                                t->n_bytes, S_ALIGN, &off);
    }
    sw_gguf_out_pad(&o, S_ALIGN);
    for (int64_t k = p->first; k < p->first + p->n; k++) {
        const sw_gguf_tensor_t *t = sw_gguf_tensor(g, k);
        sw_gguf_out_bytes(&o, t->data, (size_t)t->n_bytes);
        sw_gguf_out_pad(&o, S_ALIGN);
    }
    if (fclose(o.f) != 0 || o.failed) {
        fprintf(stderr, "shardwire-mksplit: writing %s failed\n", path);
        return -1;
    }
    return 0;
}

/* Splits in into the set prefix-*-of-*.gguf. 0, or -1 (printed). */
static int s_split(const char *in, const char *prefix, int max_tensors, uint64_t max_bytes,
                   int no_first)
{
    char err[512];
    sw_gguf_t *g = sw_gguf_open_file(in, err, sizeof err);
    if (!g) {
        fprintf(stderr, "shardwire-mksplit: %s\n", err);
        return -1;
    }
    int rc = -1;
    const int64_t nt = sw_gguf_tensor_count(g);
    s_part_t *parts = calloc((size_t)nt + 2, sizeof *parts);
    if (sw_gguf_find_key(g, SW_GGUF_SPLIT_COUNT) >= 0) {
        fprintf(stderr, "shardwire-mksplit: %s is a part of a split set already\n", in);
        goto out;
    }
    if (sw_gguf_alignment(g) != S_ALIGN || nt > INT32_MAX || !parts) {
        fprintf(stderr, "shardwire-mksplit: %s: %s\n", in,
                !parts ? "out of memory"
                       : "an alignment other than 32 (gguf-split would pad "
                         "its data wrongly) or too many tensors");
        goto out;
    }
    const int n = s_plan(g, max_tensors, max_bytes, no_first, parts);
    if (n < 0)
        goto out;
    if (n > SW_GGUF_SPLIT_MAX) {
        fprintf(stderr, "shardwire-mksplit: %d parts: more than split.count can hold\n", n);
        goto out;
    }
    const size_t len = strlen(prefix) + 32;
    char *path = malloc(len);
    for (int i = 0; path && i < n; i++) {
        if (sw_gguf_split_path(path, len, prefix, strlen(prefix), i, n) != 0 ||
            s_write_part(g, &parts[i], i, n, path) != 0) {
            free(path);
            goto out;
        }
        printf("%s: %lld tensors\n", path, (long long)parts[i].n);
    }
    rc = path ? 0 : -1;
    free(path);
out:
    free(parts);
    sw_gguf_close(&g);
    return rc;
}

/* --split-max-tensors' default: llama.cpp's gguf-split's (LLAMA_SPLIT_MAX_TENSORS). */
#define S_DEFAULT_MAX_TENSORS 128

enum { O_TENSORS = SW_OPT_OWN, O_SIZE, O_NO_FIRST };

static const sw_opt_t s_opts[] = {
    {"split-max-tensors", O_TENSORS, "N",
     "max tensors in each part (default " SW_STR(S_DEFAULT_MAX_TENSORS) ")"},
    {"split-max-size", O_SIZE, "N(M|G)", "max bytes of tensors in each part (M = 10^6, G = 10^9)"},
    {"no-tensor-first-split", O_NO_FIRST, NULL, "no tensors in the first part"},
};

static const sw_opt_group_t s_groups[] = {SW_ARGS_GROUP(NULL, s_opts)};

static const sw_args_spec_t s_spec = {
    .prog = "shardwire-mksplit",
    .usage = "[--split-max-tensors N | --split-max-size N(M|G)]\n"
             "       [--no-tensor-first-split] IN.gguf OUT_PREFIX",
    .about = "  Writes IN.gguf as the split set OUT_PREFIX-00001-of-0000K.gguf ..., byte for\n"
             "  byte as llama.cpp's gguf-split --split does (for tests: docs/testing.md).\n",
    .groups = s_groups,
    .n_groups = SW_ARGS_COUNT(s_groups),
};

/* gguf-split's N(M|G): 0 with *out, or -1 (printed). */
static int s_size_arg(const char *v, uint64_t *out)
{
    char *end;
    errno = 0;
    const long n = strtol(v, &end, 10);
    const uint64_t unit = *end == 'M' ? 1000000ull : *end == 'G' ? 1000000000ull : 0;
    if (errno || end == v || n <= 0 || n > 1000000 || !unit || end[1]) {
        fprintf(stderr,
                "shardwire-mksplit: --split-max-size '%s': a positive number of M "
                "(megabytes) or G (gigabytes), such as 500M\n",
                v);
        return -1;
    }
    *out = (uint64_t)n * unit;
    return 0;
}

int main(int argc, char **argv)
{
    int max_tensors = S_DEFAULT_MAX_TENSORS, no_first = 0, c, by_tensors = 0;
    uint64_t max_bytes = 0;
    const char *v;
    sw_args_t a;
    sw_args_init(&a, &s_spec, argc, argv);
    while ((c = sw_args_next(&a, &v)) >= 0) {
        if (c == O_TENSORS) {
            if (sw_arg_int(s_spec.prog, "--split-max-tensors", v, 1, 1 << 30, &max_tensors) != 0)
                return 2;
            by_tensors = 1;
        } else if (c == O_SIZE) {
            if (s_size_arg(v, &max_bytes) != 0)
                return 2;
        } else {
            no_first = 1;
        }
    }
    if ((c = sw_args_finish(&a, c, 2)) >= 0)
        return c;
    if (argc - a.first_arg != 2)
        return sw_args_exit(sw_args_fail(&s_spec, "IN.gguf and OUT_PREFIX are required"));
    if (by_tensors && max_bytes)
        return sw_args_exit(
            sw_args_fail(&s_spec, "give --split-max-tensors or --split-max-size, not both"));
    if (max_bytes)
        max_tensors = 0;
    return s_split(argv[a.first_arg], argv[a.first_arg + 1], max_tensors, max_bytes, no_first) == 0
               ? 0
               : 1;
}
