/*
 * test_gguf_split.c - split GGUF sets (engine/include/gguf.h) on the sets of
 * the split_models fixture (scripts/ci/split_models.sh: the default model cut
 * by shardwire-mksplit, byte-equal to llama.cpp's gguf-split):
 *
 *  - every part's path opens the whole set: the first part's metadata, all
 *    272 tensors with the whole file's types, shapes and bytes; also a set
 *    whose first part holds no tensor;
 *  - no part is mapped at open; a layer range maps exactly the parts that
 *    hold its tensors (the engine's record and /proc/self/maps agree);
 *  - the fingerprint is the same from every part and every range, equals
 *    the sha256 of the parts' headers and the first MiB of the first part's
 *    data computed here from the files, and differs from the whole file's;
 *  - a partial file cut from the set (sw_gguf_open_split_headers, the plan)
 *    has no split keys, records the set, holds the whole file's bytes and
 *    loads with the set's fingerprint;
 *  - one line naming the part for: a missing part, a wrong split.count, a
 *    part of another set (other count; same count but other tensors), a
 *    part under another part's name, a part that is not a split part, a
 *    name that does not say which part it is, a truncated part, a part
 *    changed after the set was opened.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend.h"
#include "gguf.h"
#include "model.h"
#include "partial.h"
#include "sha256.h"
#include "sw_test.h"

static const char *s_fx; /* the fixture folder */
static char s_tmp[512];  /* this test's own folder */
static sw_backend_t *s_be;

static const char *s_part(const char *set, int i, int n)
{
    static char buf[4][600];
    static int slot;
    char *p = buf[slot++ & 3];
    snprintf(p, 600, "%s/%s-%05d-of-%05d.gguf", s_fx, set, i, n);
    return p;
}

/* 1 when err is one line that holds every non-NULL needle. */
static int s_line(const char *err, const char *a, const char *b, const char *c)
{
    const int ok = err[0] && !strchr(err, '\n') && (!a || strstr(err, a)) &&
                   (!b || strstr(err, b)) && (!c || strstr(err, c));
    if (!ok)
        fprintf(stderr, "error line: %s\n", err);
    return ok;
}

/* Opens path, which must fail: its error line. */
static const char *s_fails(const char *path)
{
    static char err[1024];
    err[0] = 0;
    sw_gguf_t *g = sw_gguf_open(path, err, sizeof err);
    SW_CHECK(g == NULL);
    sw_gguf_close(&g);
    return err;
}

/* A folder of this test holding the named links: set-0000i-of-0000n.gguf -> targets[i - 1]. */
static const char *s_dir(const char *name, const char *set, const char *const *targets, int n)
{
    static char dir[600];
    snprintf(dir, sizeof dir, "%s/%s", s_tmp, name);
    mkdir(dir, 0755);
    for (int i = 0; i < n; i++) {
        if (!targets[i])
            continue;
        char link[800];
        snprintf(link, sizeof link, "%s/%s-%05d-of-%05d.gguf", dir, set, i + 1, n);
        unlink(link);
        SW_CHECK_INT(symlink(targets[i], link), 0);
    }
    return dir;
}

static int s_copy(const char *from, const char *to, long keep)
{
    size_t len = 0;
    char *b = sw_test_read_file(from, &len);
    FILE *f = b ? fopen(to, "wb") : NULL;
    const size_t n = keep >= 0 && (size_t)keep < len ? (size_t)keep : len;
    const int ok = f && fwrite(b, 1, n, f) == n;
    if (f)
        fclose(f);
    free(b);
    return ok ? 0 : -1;
}

/* The set opened from part `from` equals the whole file w tensor by tensor. */
static void s_check_set(const sw_gguf_t *w, const char *set, int n, int from)
{
    char err[512];
    sw_gguf_t *g = sw_gguf_open(s_part(set, from, n), err, sizeof err);
    SW_CHECK(g != NULL);
    if (!g) {
        fprintf(stderr, "%s\n", err);
        return;
    }
    SW_CHECK_INT(sw_gguf_part_count(g), n);
    SW_CHECK_INT(sw_gguf_tensor_count(g), sw_gguf_tensor_count(w));
    SW_CHECK_INT(sw_gguf_kv_count(g), sw_gguf_kv_count(w) + 3);
    uint64_t nl = 0;
    SW_CHECK(sw_gguf_get_u64(g, "llama.block_count", &nl) == 0 && nl == 30);
    for (int i = 0; i < n; i++) {
        SW_CHECK(!sw_gguf_part_mapped(g, i));
        SW_CHECK(!strcmp(sw_gguf_part_path(g, i), s_part(set, i + 1, n)));
    }
    int same = 1, parts_seen = 0;
    for (int64_t i = 0; i < sw_gguf_tensor_count(w); i++) {
        const sw_gguf_tensor_t *a = sw_gguf_tensor(w, i);
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)a->name.len, a->name.ptr);
        const sw_gguf_tensor_t *b = sw_gguf_find_tensor(g, name);
        const void *d = b ? sw_gguf_tensor_data(g, b, err, sizeof err) : NULL;
        same = same && b && d && b->type == a->type && b->n_bytes == a->n_bytes &&
               !memcmp(b->ne, a->ne, sizeof a->ne) && !memcmp(d, a->data, (size_t)a->n_bytes);
        if (b)
            parts_seen |= 1 << b->part;
    }
    SW_CHECK(same);
    /* every part but a first one without tensors holds some */
    SW_CHECK_INT(parts_seen, set[4] == 'n' ? ((1 << n) - 2) : ((1 << n) - 1));
    sw_gguf_close(&g);
}

/* 1 when /proc/self/maps maps path. */
static int s_in_maps(const char *path)
{
    FILE *f = fopen("/proc/self/maps", "r"); /* procfs: no size to read by */
    char line[1024];
    int in = 0;
    while (f && !in && fgets(line, sizeof line, f))
        in = strstr(line, path) != NULL;
    if (f)
        fclose(f);
    return in;
}

/* Loads [b, e) of the 3-part set from part `from`: the parts mapped are those
 * holding a tensor the range needs; the fingerprint into fp. */
static void s_check_range(const char *set, int b, int e, int from, char fp[65])
{
    char err[512];
    sw_model_t *m = sw_model_load(s_part(set, from, 3), b, e, s_be, err, sizeof err);
    SW_CHECK(m != NULL);
    if (!m) {
        fprintf(stderr, "%s\n", err);
        return;
    }
    const sw_gguf_t *g = sw_model_gguf(m);
    int need[3] = {0, 0, 0};
    for (int64_t i = 0; i < sw_gguf_tensor_count(g); i++) {
        const sw_gguf_tensor_t *t = sw_gguf_tensor(g, i);
        int blk = -1;
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
        const int in = sscanf(name, "blk.%d.", &blk) == 1   ? blk >= b && blk < e
                       : !strcmp(name, "token_embd.weight") ? b == 0 || e == 30 /* tied */
                                                            : e == 30;
        need[t->part] |= in;
    }
    for (int i = 0; i < 3; i++) {
        SW_CHECK_INT(sw_gguf_part_mapped(g, i), need[i]);
        SW_CHECK_INT(s_in_maps(s_part(set, i + 1, 3)), need[i]);
    }
    printf("layers %d:%d from part %d: parts mapped %d%d%d\n", b, e, from, need[0], need[1],
           need[2]);
    sw_model_fingerprint(m, fp);
    sw_model_free(&m);
}

/* The set's fingerprint by its definition, from the files. */
static void s_expected_fp(const char *set, int n, char out[65])
{
    sw_sha256_t s;
    sw_sha256_init(&s);
    uint8_t *data = malloc(1u << 20);
    uint64_t len = 0;
    for (int i = 1; data && i <= n; i++) {
        char err[256];
        sw_gguf_t *f = sw_gguf_open_file(s_part(set, i, n), err, sizeof err);
        SW_CHECK(f != NULL);
        if (!f)
            break;
        const uint64_t at = sw_gguf_data_offset(f), size = sw_gguf_file_size(f);
        sw_sha256_update(&s, sw_gguf_bytes(f), (size_t)at);
        if (i == 1) { /* the first part's first MiB of data, hashed after every header */
            len = size - at < (1u << 20) ? size - at : (1u << 20);
            memcpy(data, (const uint8_t *)sw_gguf_bytes(f) + at, (size_t)len);
        }
        sw_gguf_close(&f);
    }
    if (data)
        sw_sha256_update(&s, data, (size_t)len);
    free(data);
    uint8_t h[32];
    sw_sha256_final(&s, h);
    sw_hex(h, sizeof h, out);
}

/* A partial file of [b, e) cut from the 3-part set as the hub's download would. */
static void s_check_partial(const sw_gguf_t *w, int b, int e, const char *fp)
{
    char *bufs[3] = {0};
    size_t lens[3] = {0};
    uint64_t sizes[3];
    const char *names[3];
    for (int i = 0; i < 3; i++) {
        names[i] = s_part("smol", i + 1, 3);
        bufs[i] = sw_test_read_file(names[i], &lens[i]);
        sizes[i] = lens[i];
        /* the hub fetches each part's header only (and the first part's first MiB) */
        if (i > 0 && lens[i] > 20000)
            lens[i] = 20000;
    }
    char err[512];
    sw_gguf_t *h = sw_gguf_open_split_headers((const void *const *)bufs, lens, sizes, names, 3, err,
                                              sizeof err);
    SW_CHECK(h != NULL);
    sw_partial_plan_t plan;
    sw_partial_src_t id = {.source = "hf:org/smol/smol-00001-of-00003.gguf@0",
                           .size = sizes[0] + sizes[1] + sizes[2],
                           .sha256 = "",
                           .fingerprint = fp};
    char fp2[65] = "";
    if (h)
        sw_fingerprint_of(h, bufs[0] + sw_gguf_data_offset(h), fp2);
    SW_CHECK(!strcmp(fp2, fp));
    if (h && sw_partial_plan(h, b, e, &id, &plan, err, sizeof err) == 0) {
        uint8_t *out = calloc(1, (size_t)plan.size);
        memcpy(out, plan.header, plan.header_len);
        for (int i = 0; i < plan.n_segs; i++) {
            const sw_partial_seg_t *s = &plan.segs[i];
            SW_CHECK(i == 0 || s->part_off > plan.segs[i - 1].part_off);
            SW_CHECK(s->src_off + s->len <= sizes[s->part]);
            memcpy(out + s->part_off, bufs[s->part] + s->src_off, (size_t)s->len);
        }
        char path[700];
        snprintf(path, sizeof path, "%s/partial-%d-%d.gguf", s_tmp, b, e);
        FILE *f = fopen(path, "wb");
        SW_CHECK(f && fwrite(out, 1, (size_t)plan.size, f) == plan.size);
        if (f)
            fclose(f);
        free(out);
        sw_gguf_t *p = sw_gguf_open(path, err, sizeof err);
        SW_CHECK(p != NULL);
        sw_partial_info_t pi;
        if (p) {
            SW_CHECK_INT(sw_gguf_part_count(p), 1);
            SW_CHECK(sw_gguf_find_key(p, SW_GGUF_SPLIT_COUNT) < 0);
            SW_CHECK_INT(sw_partial_info(p, 30, &pi, err, sizeof err), 1);
            SW_CHECK_INT(pi.source_parts, 3);
            int same = 1;
            for (int64_t i = 0; i < sw_gguf_tensor_count(p); i++) {
                const sw_gguf_tensor_t *a = sw_gguf_tensor(p, i);
                char name[128];
                snprintf(name, sizeof name, "%.*s", (int)a->name.len, a->name.ptr);
                const sw_gguf_tensor_t *t = sw_gguf_find_tensor(w, name);
                same = same && t && t->n_bytes == a->n_bytes &&
                       !memcmp(t->data, a->data, (size_t)a->n_bytes);
            }
            SW_CHECK(same);
        }
        sw_gguf_close(&p);
        sw_model_t *m = sw_model_load(path, b, e, s_be, err, sizeof err);
        SW_CHECK(m != NULL);
        char got[65] = "";
        if (m)
            sw_model_fingerprint(m, got);
        SW_CHECK(!strcmp(got, fp));
        sw_model_free(&m);
        sw_partial_plan_free(&plan);
    } else {
        SW_CHECK(!"the plan of a split set");
        fprintf(stderr, "%s\n", err);
    }
    sw_gguf_close(&h);
    for (int i = 0; i < 3; i++)
        free(bufs[i]);
}

/* Part 3 with its split.count made 4, into path. */
static void s_count4(const char *p3, const char *path)
{
    SW_CHECK_INT(s_copy(p3, path, -1), 0);
    size_t len = 0;
    char *b = sw_test_read_file(path, &len);
    char *k = NULL;
    for (size_t i = 0; b && !k && i + 11 < 200 && i + 11 < len; i++)
        if (!memcmp(b + i, "split.count", 11))
            k = b + i;
    SW_CHECK(k != NULL);
    if (k) {
        k[11 + 4] = 4; /* the u16 after the value type */
        FILE *f = fopen(path, "wb");
        SW_CHECK(f && fwrite(b, 1, len, f) == len);
        if (f)
            fclose(f);
    }
    free(b);
}

static void s_check_errors(const char *whole)
{
    char p[6][600], count4[700], cut[700], changed[700];
    snprintf(p[0], sizeof p[0], "%s", s_part("smol", 1, 3));
    snprintf(p[1], sizeof p[1], "%s", s_part("smol", 2, 3));
    snprintf(p[2], sizeof p[2], "%s", s_part("smol", 3, 3));
    snprintf(p[3], sizeof p[3], "%s", s_part("smolnf", 2, 4));
    snprintf(p[4], sizeof p[4], "%s", s_part("smol100", 2, 3));
    snprintf(p[5], sizeof p[5], "%s", whole);
    snprintf(count4, sizeof count4, "%s/count-p3.gguf", s_tmp);
    s_count4(p[2], count4);
    snprintf(cut, sizeof cut, "%s/cut-p3.gguf", s_tmp);
    SW_CHECK_INT(s_copy(p[2], cut, 3000000), 0);
    /* sets of 3 links name-0000i-of-00003.gguf to targets (-1: none), opened from part `open` */
    const struct {
        const char *name;
        const char *targets[3];
        int open;
        const char *a, *b, *c;
    } cases[] = {
        {"m",
         {p[0], NULL, p[2]},
         3,
         "part 2 of 3 of the split set is missing",
         "m-00002-of-00003.gguf'",
         "beside the others"},
        {"c",
         {p[0], p[1], count4},
         1,
         "c-00003-of-00003.gguf' is part 3 of a set of 4",
         "is of a set of 3",
         "another split set"},
        {"o",
         {p[0], p[3], p[2]},
         1,
         "o-00002-of-00003.gguf' is part 2 of a set of 4",
         "another split set",
         NULL},
        {"s",
         {p[0], p[4], p[2]},
         2,
         "is in both",
         "s-00002-of-00003.gguf",
         "a part of another split set"},
        {"w",
         {p[0], p[2], p[2]},
         1,
         "w-00002-of-00003.gguf' holds part 3 of its set",
         "not part 2 as its name says",
         NULL},
        {"f",
         {p[5], p[1], p[2]},
         2,
         "f-00001-of-00003.gguf' is not part 1 of a split set of 3",
         NULL,
         NULL},
        {"t",
         {p[0], p[1], cut},
         1,
         "part 3 of 3 of a split set",
         "t-00003-of-00003.gguf'",
         "runs past the end of the file"},
    };
    char path[900];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *d = s_dir(cases[i].name, cases[i].name, cases[i].targets, 3);
        snprintf(path, sizeof path, "%s/%s-%05d-of-00003.gguf", d, cases[i].name, cases[i].open);
        SW_CHECK(s_line(s_fails(path), cases[i].a, cases[i].b, cases[i].c));
    }
    /* a part whose name does not say which part it is */
    snprintf(path, sizeof path, "%s/renamed.gguf", s_tmp);
    SW_CHECK_INT(symlink(p[1], path), 0);
    SW_CHECK(s_line(s_fails(path), "renamed.gguf' is part 2 of a split set of 3",
                    "-00002-of-00003.gguf", NULL));
    /* a part changed after the set was opened */
    char err[512];
    snprintf(changed, sizeof changed, "%s/changed-p3.gguf", s_tmp);
    SW_CHECK_INT(s_copy(p[2], changed, -1), 0);
    const char *chg[] = {p[0], p[1], changed};
    snprintf(path, sizeof path, "%s/x-00001-of-00003.gguf", s_dir("x", "x", chg, 3));
    sw_gguf_t *g = sw_gguf_open(path, err, sizeof err);
    SW_CHECK(g != NULL);
    SW_CHECK_INT(s_copy(p[1], changed, -1), 0); /* another file in its place */
    const sw_gguf_tensor_t *t = g ? sw_gguf_tensor(g, sw_gguf_tensor_count(g) - 1) : NULL;
    SW_CHECK(t && t->part == 2);
    err[0] = 0;
    SW_CHECK(t && sw_gguf_tensor_data(g, t, err, sizeof err) == NULL);
    SW_CHECK(s_line(err, "x-00003-of-00003.gguf' changed since it was opened", NULL, NULL));
    sw_gguf_close(&g);
}

int main(void)
{
    const char *whole = sw_test_model();
    s_fx = getenv("SW_SPLIT_DIR");
    if (!s_fx || access(s_part("smol", 1, 3), R_OK) != 0)
        sw_test_skip("the split_models fixture is absent (scripts/ci/split_models.sh)");
    snprintf(s_tmp, sizeof s_tmp, "%s", sw_test_tmpdir());
    char err[512];
    s_be = sw_backend_new("cpu", 1, err, sizeof err);
    sw_gguf_t *w = sw_gguf_open(whole, err, sizeof err);
    SW_CHECK(s_be && w);
    if (!s_be || !w)
        return sw_test_done();
    SW_CHECK_INT(sw_gguf_part_count(w), 1);

    /* 1. every part opens the whole set */
    for (int i = 1; i <= 3; i++)
        s_check_set(w, "smol", 3, i);
    s_check_set(w, "smolnf", 4, 4);

    /* 2. ranges map their parts; 3. one fingerprint */
    char fp[3][65], want[65], whole_fp[65] = "";
    s_check_range("smol", 0, 5, 2, fp[0]);
    s_check_range("smol", 20, 30, 1, fp[1]);
    s_check_range("smol", 10, 20, 3, fp[2]);
    s_expected_fp("smol", 3, want);
    for (int i = 0; i < 3; i++)
        SW_CHECK(!strcmp(fp[i], want));
    sw_model_t *m = sw_model_load(whole, 0, 5, s_be, err, sizeof err);
    SW_CHECK(m != NULL);
    if (m)
        sw_model_fingerprint(m, whole_fp);
    sw_model_free(&m);
    SW_CHECK(strcmp(whole_fp, want) != 0);
    printf("the set's fingerprint %.16s... (the whole file's %.16s...)\n", want, whole_fp);

    /* 4. a partial file cut from the set */
    s_check_partial(w, 0, 15, want);
    s_check_partial(w, 15, 30, want);

    /* 5. broken sets: one line each */
    s_check_errors(whole);

    sw_gguf_close(&w);
    sw_backend_free(&s_be);
    return sw_test_done();
}
