/*
 * test_partial.c - partial GGUF files (engine/include/partial.h) without a network:
 * the plan of a range of the default model (SmolLM2, 30 layers, tied
 * embeddings) applied to the local file as the download would, then loaded.
 *
 *  - sw_gguf_open_header validates a header from the file's first bytes
 *    alone (tensor data NULL) and fails on a prefix that ends inside it;
 *  - the fingerprint of the first sw_fingerprint_len bytes is the whole
 *    model's (their sha256), and a partial file announces it;
 *  - head (0:15), middle (5:10, no embeddings: n_vocab from its key) and tail
 *    (15:30, the tied embeddings as LM head) partial files load for their
 *    range and any range inside it, hold only the tensors they need, with
 *    data byte-equal to the whole file's, and refuse a range outside with the
 *    pull command;
 *  - a partial file is not a source for another; bad ranges are refused.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "gguf.h"
#include "model.h"
#include "partial.h"
#include "sha256.h"
#include "sw_test.h"

static sw_backend_t *s_be;

/* Writes the partial file of plan, cut from the whole file's bytes, to path. */
static int s_cut(const uint8_t *whole, const sw_partial_plan_t *plan, const char *path)
{
    uint8_t *buf = calloc(1, (size_t)plan->size);
    if (!buf)
        return -1;
    memcpy(buf, plan->header, plan->header_len);
    for (int i = 0; i < plan->n_segs; i++)
        memcpy(buf + plan->segs[i].part_off, whole + plan->segs[i].src_off, plan->segs[i].len);
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(buf, 1, (size_t)plan->size, f) == plan->size;
    if (f)
        ok = fclose(f) == 0 && ok;
    free(buf);
    return ok ? 0 : -1;
}

/* The partial file of [b, e) of whole (its header g) at path; 0 or -1. */
static int s_make(const sw_gguf_t *g, const char *fp, int b, int e, const char *path)
{
    sw_partial_src_t id = {
        .source = "hf:test-org/smol/smol.gguf@0123456789abcdef0123456789abcdef01234567",
        .size = sw_gguf_file_size(g),
        .sha256 = "",
        .fingerprint = fp};
    sw_partial_plan_t plan;
    char err[256];
    if (sw_partial_plan(g, b, e, &id, &plan, err, sizeof err) != 0) {
        fprintf(stderr, "plan %d:%d: %s\n", b, e, err);
        return -1;
    }
    int rc = s_cut(sw_gguf_bytes(g), &plan, path);
    sw_partial_plan_free(&plan);
    return rc;
}

static int s_has(const sw_gguf_t *g, const char *name)
{
    return sw_gguf_find_tensor(g, name) != NULL;
}

/* 1 when every tensor of part is in whole with the same bytes. */
static int s_same_data(const sw_gguf_t *part, const sw_gguf_t *whole)
{
    for (int64_t i = 0; i < sw_gguf_tensor_count(part); i++) {
        const sw_gguf_tensor_t *t = sw_gguf_tensor(part, i);
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
        const sw_gguf_tensor_t *w = sw_gguf_find_tensor(whole, name);
        if (!w || w->n_bytes != t->n_bytes || w->type != t->type ||
            memcmp(w->data, t->data, t->n_bytes) != 0) {
            fprintf(stderr, "tensor %s differs\n", name);
            return 0;
        }
    }
    return 1;
}

/* Loads path for [b, e): NULL with err. */
static sw_model_t *s_load(const char *path, int b, int e, char *err, size_t len)
{
    return sw_model_load(path, b, e, s_be, err, len);
}

int main(void)
{
    const char *model = sw_test_model();
    char err[512];
    s_be = sw_backend_new("cpu", 1, err, sizeof err);
    SW_CHECK(s_be != NULL);
    if (!s_be)
        return sw_test_done();
    sw_gguf_t *g = sw_gguf_open(model, err, sizeof err);
    SW_CHECK(g != NULL);
    if (!g)
        return sw_test_done();
    const uint8_t *bytes = sw_gguf_bytes(g);
    const uint64_t size = sw_gguf_file_size(g);

    /* 1. the header alone, and a prefix that ends inside it */
    const uint64_t hl = sw_gguf_data_offset(g);
    sw_gguf_t *h = sw_gguf_open_header(bytes, (size_t)hl, size, err, sizeof err);
    SW_CHECK(h != NULL);
    if (h) {
        SW_CHECK_INT(sw_gguf_tensor_count(h), sw_gguf_tensor_count(g));
        const sw_gguf_tensor_t *a = sw_gguf_find_tensor(h, "blk.3.attn_q.weight"),
                               *b = sw_gguf_find_tensor(g, "blk.3.attn_q.weight");
        SW_CHECK(a && b && a->data == NULL && a->offset == b->offset &&
                 (const uint8_t *)b->data == bytes + b->offset);
        sw_gguf_close(&h);
    }
    SW_CHECK(sw_gguf_open_header(bytes, (size_t)hl / 2, size, err, sizeof err) == NULL);
    SW_CHECK(strstr(err, "runs past the end") || strstr(err, "left"));
    /* a header whose tensors lie past the size the server announced */
    SW_CHECK(sw_gguf_open_header(bytes, (size_t)hl, size / 2, err, sizeof err) == NULL);
    SW_CHECK(strstr(err, "runs past the end of the file") != NULL);

    /* 2. the fingerprint from the first bytes is the whole model's */
    char whole_fp[65], fp[65];
    sw_model_t *m = s_load(model, 0, -1, err, sizeof err);
    SW_CHECK(m != NULL);
    if (m)
        sw_model_fingerprint(m, whole_fp);
    sw_model_free(&m);
    h = sw_gguf_open_header(bytes, (size_t)(hl + (1u << 20)), size, err, sizeof err);
    SW_CHECK(h != NULL);
    if (h) {
        SW_CHECK(sw_fingerprint_len(h) == hl + (1u << 20));
        sw_fingerprint_of(h, bytes + hl, fp);
        SW_CHECK(!strcmp(fp, whole_fp));
        /* a file of its own: the sha256 of its first sw_fingerprint_len bytes, as always */
        uint8_t d[32];
        sw_sha256(bytes, (size_t)sw_fingerprint_len(h), d);
        sw_hex(d, sizeof d, fp);
        SW_CHECK(!strcmp(fp, whole_fp));
    }

    /* 3. head, middle and tail partial files */
    static const struct {
        int b, e;
        int embd, out_norm;
    } parts[] = {{0, 15, 1, 0}, {5, 10, 0, 0}, {15, 30, 1, 1}};
    for (size_t i = 0; h && i < sizeof parts / sizeof parts[0]; i++) {
        const int b = parts[i].b, e = parts[i].e;
        char path[600];
        snprintf(path, sizeof path, "%s",
                 sw_test_log(i == 0   ? "head.gguf"
                             : i == 1 ? "mid.gguf"
                                      : "tail.gguf"));
        SW_CHECK_INT(s_make(h, whole_fp, b, e, path), 0);
        sw_gguf_t *p = sw_gguf_open(path, err, sizeof err);
        SW_CHECK(p != NULL);
        if (!p)
            continue;
        SW_CHECK(s_same_data(p, g));
        SW_CHECK_INT(s_has(p, "token_embd.weight"), parts[i].embd);
        SW_CHECK_INT(s_has(p, "output_norm.weight"), parts[i].out_norm);
        char name[64];
        snprintf(name, sizeof name, "blk.%d.ffn_down.weight", b);
        SW_CHECK(s_has(p, name));
        snprintf(name, sizeof name, "blk.%d.ffn_down.weight", e - 1);
        SW_CHECK(s_has(p, name));
        snprintf(name, sizeof name, "blk.%d.ffn_down.weight", e % 30);
        SW_CHECK(!s_has(p, name));
        sw_partial_info_t pi;
        SW_CHECK_INT(sw_partial_info(p, 30, &pi, err, sizeof err), 1);
        SW_CHECK(pi.begin == b && pi.end == e && pi.n_vocab == 49152 && pi.source_size == size);
        /* a partial file is no source */
        sw_partial_plan_t plan;
        sw_partial_src_t id = {.source = "x", .size = 1, .sha256 = "", .fingerprint = whole_fp};
        SW_CHECK(sw_partial_plan(p, b, e, &id, &plan, err, sizeof err) != 0);
        SW_CHECK(strstr(err, "itself a partial file") != NULL);
        sw_gguf_close(&p);
        /* loads for its range and inside it, announcing the whole file's fingerprint */
        m = s_load(path, b, e, err, sizeof err);
        SW_CHECK(m != NULL);
        if (m) {
            sw_model_fingerprint(m, fp);
            SW_CHECK(!strcmp(fp, whole_fp));
            SW_CHECK_INT(sw_model_hparams(m)->n_vocab, 49152);
        }
        sw_model_free(&m);
        m = s_load(path, b + 1, e, err, sizeof err);
        SW_CHECK(m != NULL);
        sw_model_free(&m);
        /* a range outside: refused, naming the pull */
        m = s_load(path, b > 0 ? b - 1 : 0, e < 30 ? e + 1 : e, err, sizeof err);
        SW_CHECK(m == NULL);
        char want[128];
        snprintf(want, sizeof want, "this partial file holds layers %d:%d of the 30-layer model", b,
                 e);
        SW_CHECK(strstr(err, want) && strstr(err, "shardwire pull hf:test-org/smol/smol.gguf@"));
    }

    /* 4. bad ranges */
    if (h) {
        sw_partial_plan_t plan;
        sw_partial_src_t id = {.source = "x", .size = size, .sha256 = "", .fingerprint = whole_fp};
        SW_CHECK(sw_partial_plan(h, 10, 5, &id, &plan, err, sizeof err) != 0);
        SW_CHECK(sw_partial_plan(h, 0, 31, &id, &plan, err, sizeof err) != 0);
        SW_CHECK(strstr(err, "invalid for a 30-layer model") != NULL);
    }
    sw_gguf_close(&h);
    sw_gguf_close(&g);
    sw_backend_free(&s_be);
    return sw_test_done();
}
