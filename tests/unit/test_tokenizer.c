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
 *      token parsing, plus decode(encode(s)) == s; and 400 seeded random
 *      strings from the same file;
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
#include <time.h>
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

/* The 12 vocabularies of llama.cpp's test data (../shared/testdata/vocab or
 * scripts/ci/fetch_vocab.sh): all must be present and match. */
static const char *const k_vocabs[] = {"gpt-2",        "llama-spm", "starcoder", "deepseek-coder",
                                       "deepseek-llm", "falcon",    "llama-bpe", "qwen2",
                                       "refact",       "command-r", "mpt",       "phi-3"};

#define VOCAB_SEP "\n__ggml_vocab_test__\n"

/* A GGUF that went through a text-mode UTF-8 decode/encode has every byte
 * that is not valid UTF-8 replaced by EF BF BD; says so and returns 1 when
 * that is why a file does not open. */
static int explain_corrupt(const char *path)
{
    size_t len = 0;
    char *buf = sw_test_read_file(path, &len);
    size_t n = 0;
    for (size_t i = 0; buf && i + 3 <= len && i < 4096; i++)
        n += memcmp(buf + i, "\xef\xbf\xbd", 3) == 0;
    if (n > 0)
        fprintf(stderr,
                "%s: %zu U+FFFD sequences in its first 4 KiB: this copy was mangled by a UTF-8 "
                "text conversion and cannot be read; replace it with llama.cpp's original "
                "(models/ggml-vocab-*.gguf, e.g. vendor/llama.cpp/models in the "
                "llama-cpp-python sdist)\n",
                path, n);
    free(buf);
    return n > 0;
}

static void check_vocab(const char *dir, const char *name)
{
    char path[1024], inp_path[1100], out_path[1100];
    snprintf(path, sizeof path, "%s/ggml-vocab-%s.gguf", dir, name);
    snprintf(inp_path, sizeof inp_path, "%s.inp", path);
    snprintf(out_path, sizeof out_path, "%s.out", path);
    if (access(path, R_OK) != 0 || access(inp_path, R_OK) != 0 || access(out_path, R_OK) != 0) {
        fprintf(stderr, "vocab %s: files missing in %s (run: bash scripts/ci/fetch_vocab.sh)\n",
                name, dir);
        SW_CHECK(!"vocab files present");
        return;
    }
    sw_tokenizer_t *t = load_tokenizer(path, NULL);
    if (!t) {
        /* Unreadable data is not a tokenizer defect: report it loudly and
         * leave this vocabulary unchecked; any other failure fails. */
        if (explain_corrupt(path)) {
            char why[256];
            snprintf(why, sizeof why, "vocab %s: the data file is corrupt (see stderr)", name);
            sw_test_skip_part(why);
            return;
        }
        SW_CHECK(!"vocab file opens and has a supported tokenizer");
        return;
    }
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
        char why[1200];
        snprintf(why, sizeof why,
                 "vocab conformance: no folder %s (run: bash scripts/ci/fetch_vocab.sh, then "
                 "configure again)",
                 dir && dir[0] ? dir : "(SW_TEST_VOCAB_DIR unset)");
        sw_test_skip_part(why);
        return;
    }
    for (size_t i = 0; i < sizeof(k_vocabs) / sizeof(k_vocabs[0]); i++)
        check_vocab(dir, k_vocabs[i]);
}

/* ---- 2. SmolLM2 corpus against Hugging Face tokenizers ---- */

static int json_ids(json_t *arr, int32_t *ids, int max)
{
    if (!json_is_array(arr) || (int)json_array_size(arr) > max)
        return -1;
    for (size_t i = 0; i < json_array_size(arr); i++)
        ids[i] = (int32_t)json_integer_value(json_array_get(arr, i));
    return (int)json_array_size(arr);
}

static const char *model_path_or_null(void)
{
    const char *p = getenv("SW_TEST_MODEL");
    return p && p[0] && access(p, R_OK) == 0 ? p : NULL;
}

static void test_smollm2_corpus(const sw_tokenizer_t *t)
{
    const char *fixtures = sw_test_env("SW_FIXTURES");
    char path[1024];
    snprintf(path, sizeof path, "%s/tokenizer/smollm2_corpus.json", fixtures);
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    SW_CHECK(root != NULL);
    if (!root) {
        fprintf(stderr, "%s: %s (line %d)\n", path, jerr.text, jerr.line);
        return;
    }
    SW_CHECK_INT(json_integer_value(json_object_get(root, "n_vocab")), sw_tokenizer_n_vocab(t));
    json_t *cases = json_object_get(root, "cases");
    SW_CHECK_INT(json_array_size(cases), 100);
    int n_ok = 0, n_ok_nospecial = 0, n_round = 0;
    size_t i;
    json_t *c;
    json_array_foreach(cases, i, c)
    {
        const char *text = json_string_value(json_object_get(c, "text"));
        size_t len = json_string_length(json_object_get(c, "text"));
        static int32_t want[4096], got[4096];
        int n_want = json_ids(json_object_get(c, "ids"), want, 4096);
        int n_got = 0;
        SW_CHECK(text && n_want >= 0);
        if (!text || n_want < 0)
            continue;
        int rc = sw_tokenize(t, text, len, 0, 1, got, 4096, &n_got);
        if (rc == 0 && ids_equal(got, n_got, want, n_want)) {
            n_ok++;
        } else {
            fprintf(stderr, "corpus case %zu: \"%.60s\"\n", i, text);
            print_ids("want", want, n_want);
            print_ids("got ", got, n_got);
        }
        size_t dlen = 0;
        char *dec = detok_all(t, got, n_got, 1, &dlen);
        if (dec && dlen == len && memcmp(dec, text, len) == 0)
            n_round++;
        else
            fprintf(stderr, "corpus case %zu: decode(encode(s)) = \"%s\"\n", i,
                    dec ? dec : "(null)");
        free(dec);
        /* parse_special = 0: control-token strings are plain text. */
        n_want = json_ids(json_object_get(c, "ids_nospecial"), want, 4096);
        if (n_want >= 0) {
            rc = sw_tokenize(t, text, len, 0, 0, got, 4096, &n_got);
            if (rc == 0 && ids_equal(got, n_got, want, n_want))
                n_ok_nospecial++;
            else
                fprintf(stderr, "corpus case %zu (no special parsing) differs\n", i);
        }
    }
    printf("smollm2 corpus: %d/100 match, %d/100 without special parsing, %d/100 round-trip\n",
           n_ok, n_ok_nospecial, n_round);
    SW_CHECK_INT(n_ok, 100);
    SW_CHECK_INT(n_ok_nospecial, 100);
    SW_CHECK_INT(n_round, 100);

    /* Seeded random strings (special-token parsing on, as the reference). */
    json_t *randoms = json_object_get(root, "random_cases");
    int n_rand_ok = 0, n_rand_round = 0;
    json_array_foreach(randoms, i, c)
    {
        const char *text = json_string_value(json_object_get(c, "text"));
        size_t len = json_string_length(json_object_get(c, "text"));
        static int32_t want[4096], got[4096];
        int n_want = json_ids(json_object_get(c, "ids"), want, 4096);
        int n_got = 0;
        if (!text || n_want < 0)
            continue;
        if (sw_tokenize(t, text, len, 0, 1, got, 4096, &n_got) == 0 &&
            ids_equal(got, n_got, want, n_want))
            n_rand_ok++;
        else
            fprintf(stderr, "random case %zu differs: \"%s\"\n", i, text);
        size_t dlen = 0;
        char *dec = detok_all(t, got, n_got, 1, &dlen);
        n_rand_round += dec && dlen == len && memcmp(dec, text, len) == 0;
        free(dec);
    }
    printf("smollm2 random strings: %d/%zu match, %d round-trip\n", n_rand_ok,
           json_array_size(randoms), n_rand_round);
    SW_CHECK(json_array_size(randoms) >= 400);
    SW_CHECK_INT(n_rand_ok, json_array_size(randoms));
    SW_CHECK_INT(n_rand_round, json_array_size(randoms));
    json_decref(root);
}

static void test_smollm2_api(const sw_tokenizer_t *t)
{
    SW_CHECK_INT(sw_tokenizer_n_vocab(t), 49152);
    SW_CHECK(strcmp(sw_tokenizer_model(t), "gpt2") == 0);
    SW_CHECK(strcmp(sw_tokenizer_pre(t), "smollm") == 0);
    SW_CHECK_INT(sw_tokenizer_bos(t), 1);
    SW_CHECK_INT(sw_tokenizer_eos(t), 2);
    SW_CHECK_INT(sw_tokenizer_eot(t), 2); // <|im_end|>
    SW_CHECK(sw_tokenizer_is_eog(t, 2));
    SW_CHECK(sw_tokenizer_is_eog(t, 0)); // <|endoftext|>
    SW_CHECK(!sw_tokenizer_is_eog(t, 1));
    SW_CHECK(!sw_tokenizer_is_eog(t, 4093));
    SW_CHECK_INT(sw_tokenizer_add_bos(t), 0); // add_bos_token = false in the GGUF
    SW_CHECK_INT(sw_tokenizer_token_type(t, 1), SW_TOKEN_CONTROL);
    SW_CHECK_INT(sw_tokenizer_token_type(t, 4093), SW_TOKEN_NORMAL);
    SW_CHECK_INT(sw_tokenizer_token_type(t, -1), -1);
    SW_CHECK_INT(sw_tokenizer_token_type(t, 49152), -1);
    SW_CHECK_INT(sw_tokenizer_find(t, "<|im_start|>", 12), 1);
    SW_CHECK_INT(sw_tokenizer_find(t, "no such token at all", 20), -1);

    /* Pieces: byte-level decoded; specials only when rendered. */
    char buf[64];
    int32_t ids[64];
    int n = 0;
    SW_CHECK_INT(sw_tokenize(t, " Hello", 6, 1, 0, ids, 64, &n), 0);
    SW_CHECK_INT(n, 1);
    SW_CHECK_INT(sw_token_to_piece(t, ids[0], 0, buf, sizeof buf), 6);
    SW_CHECK(memcmp(buf, " Hello", 6) == 0);
    SW_CHECK_INT(sw_token_to_piece(t, 1, 0, buf, sizeof buf), 0);
    SW_CHECK_INT(sw_token_to_piece(t, 1, 1, buf, sizeof buf), 12);
    SW_CHECK(memcmp(buf, "<|im_start|>", 12) == 0);
    SW_CHECK_INT(sw_token_to_piece(t, 1, 1, buf, 3), 12); // truncated copy, full length
    SW_CHECK_INT(sw_token_to_piece(t, 49152, 1, buf, sizeof buf), -1);
    size_t tl = 0;
    const char *tt = sw_tokenizer_token_text(t, ids[0], &tl);
    SW_CHECK(tt && tl == 7 && memcmp(tt, "\xc4\xa0Hello", 7) == 0); // "ĠHello"

    /* Too-small output: the count needed comes back. */
    const char *txt = "one two three four five";
    SW_CHECK_INT(sw_tokenize(t, txt, strlen(txt), 0, 0, ids, 2, &n), SW_TOK_ERR_TOO_SMALL);
    SW_CHECK_INT(n, 5);
    int n2 = 0;
    int32_t *all = sw_tokenize_alloc(t, txt, strlen(txt), 0, 0, &n2);
    SW_CHECK(all != NULL && n2 == 5);
    SW_CHECK(all && ids[0] == all[0] && ids[1] == all[1]);
    free(all);
    all = sw_tokenize_alloc(t, "", 0, 1, 1, &n2);
    SW_CHECK(all != NULL && n2 == 0);
    free(all);

    /* A cap on the token count: the same ids up to it, TOO_LONG past it, and a
     * 2 MiB text past a small cap is refused in far less time than tokenizing it. */
    int32_t *cap = NULL;
    SW_CHECK_INT(sw_tokenize_max(t, txt, strlen(txt), 0, 0, 5, &cap, &n2), 0);
    SW_CHECK(cap && n2 == 5 && !memcmp(cap, ids, 2 * sizeof *ids));
    free(cap);
    SW_CHECK_INT(sw_tokenize_max(t, txt, strlen(txt), 0, 0, 4, &cap, &n2), SW_TOK_ERR_TOO_LONG);
    SW_CHECK(cap == NULL && n2 == 5);
    size_t big_len = 2u << 20;
    char *big = malloc(big_len + 1);
    for (size_t i = 0; big && i < big_len; i++)
        big[i] = (i % 7 == 6) ? ' ' : (char)('a' + i % 26);
    if (big) {
        big[big_len] = 0;
        struct timespec a0, a1;
        clock_gettime(CLOCK_MONOTONIC, &a0);
        SW_CHECK_INT(sw_tokenize_max(t, big, 64 << 10, 0, 0, 2048, &cap, &n2),
                     SW_TOK_ERR_TOO_LONG); /* 64 KiB of short words: well over 2048 */
        SW_CHECK_INT(sw_tokenize_max(t, big, big_len, 0, 0, 2048, &cap, &n2), SW_TOK_ERR_TOO_LONG);
        memset(big, 'a', big_len); /* one 2 MiB word */
        SW_CHECK_INT(sw_tokenize_max(t, big, big_len, 0, 0, 2048, &cap, &n2), SW_TOK_ERR_TOO_LONG);
        clock_gettime(CLOCK_MONOTONIC, &a1);
        double ms = (a1.tv_sec - a0.tv_sec) * 1e3 + (a1.tv_nsec - a0.tv_nsec) / 1e6;
        printf("capped tokenization of 64 KiB and 2 x 2 MiB past 2048 tokens: %.1f ms\n", ms);
        SW_CHECK(ms < 1000);
        free(big);
    }

    /* Invalid UTF-8 made of bytes the vocabulary has survives a byte-level
     * round trip through the pieces; the detokenizer turns each byte that
     * cannot start or continue a character into U+FFFD. */
    const char raw[] = "ok \x80 bad \xc3 \xe2\x82 sur \xed\xa0\x80 tail \xf0\x9f\x98";
    size_t raw_len = sizeof raw - 1;
    int32_t *rid = sw_tokenize_alloc(t, raw, raw_len, 0, 0, &n2);
    SW_CHECK(rid != NULL);
    if (rid) {
        char piece_all[256] = {0};
        size_t o = 0;
        for (int i = 0; i < n2; i++) {
            int k = sw_token_to_piece(t, rid[i], 1, piece_all + o, sizeof piece_all - o);
            SW_CHECK(k >= 0);
            o += k > 0 ? (size_t)k : 0;
        }
        SW_CHECK(o == raw_len && memcmp(piece_all, raw, raw_len) == 0);
        size_t dl = 0;
        char *dec = detok_all(t, rid, n2, 1, &dl);
#define FFFD "\xef\xbf\xbd"
        const char *want =
            "ok " FFFD " bad " FFFD " " FFFD FFFD " sur " FFFD FFFD FFFD " tail " FFFD FFFD FFFD;
#undef FFFD
        SW_CHECK(dec && strcmp(dec, want) == 0);
        if (dec && strcmp(dec, want) != 0)
            fprintf(stderr, "detok of invalid bytes: \"%s\"\n", dec);
        free(dec);
        free(rid);
    }
    /* Bytes SmolLM2's alphabet lacks (0xC0, 0xC1, 0xF5..0xFF, a few controls)
     * have no token: they are dropped, as the reference tokenizers do. */
    rid = sw_tokenize_alloc(t,
                            "a\xff\xfe"
                            "b",
                            4, 0, 0, &n2);
    SW_CHECK(rid != NULL && n2 == 2);
    free(rid);
}

/* ---- 3. streaming detokenizer over split characters ---- */

/* Id of the single-byte token for byte b (byte-level alphabet). */
static int32_t byte_token(const sw_tokenizer_t *t, unsigned char b)
{
    char in[1] = {(char)b};
    int32_t id = -1;
    int n = 0;
    if (sw_tokenize(t, in, 1, 0, 0, &id, 1, &n) != 0 || n != 1)
        return -1;
    return id;
}

static void test_detok_stream(const sw_tokenizer_t *t)
{
    /* "a🦙b€" fed one byte token at a time: the emoji (4 bytes) and the euro
     * sign (3 bytes) must come out whole, at the push of their last byte. */
    const unsigned char bytes[] = {'a', 0xF0, 0x9F, 0xA6, 0x99, 'b', 0xE2, 0x82, 0xAC};
    const char *expect[] = {"a", "", "", "", "\xf0\x9f\xa6\x99", "b", "", "", "\xe2\x82\xac"};
    sw_detok_t *d = sw_detok_new(t, 0);
    SW_CHECK(d != NULL);
    if (!d)
        return;
    for (size_t i = 0; i < sizeof bytes; i++) {
        int32_t id = byte_token(t, bytes[i]);
        SW_CHECK(id >= 0);
        const char *p;
        size_t n;
        SW_CHECK_INT(sw_detok_push(d, id, &p, &n), 0);
        SW_CHECK(n == strlen(expect[i]) && memcmp(p, expect[i], n) == 0);
    }
    const char *p;
    size_t n;
    SW_CHECK_INT(sw_detok_flush(d, &p, &n), 0);
    SW_CHECK_INT(n, 0);

    /* An unfinished emoji at the end is flushed as one U+FFFD per byte held. */
    SW_CHECK_INT(sw_detok_push(d, byte_token(t, 0xF0), &p, &n), 0);
    SW_CHECK_INT(n, 0);
    SW_CHECK_INT(sw_detok_push(d, byte_token(t, 0x9F), &p, &n), 0);
    SW_CHECK_INT(n, 0);
    SW_CHECK_INT(sw_detok_flush(d, &p, &n), 0);
    SW_CHECK(n == 6 && memcmp(p, "\xef\xbf\xbd\xef\xbf\xbd", 6) == 0);

    /* A lead byte followed by a non-continuation: the lead is replaced, the
     * next character is kept. */
    SW_CHECK_INT(sw_detok_push(d, byte_token(t, 0xE2), &p, &n), 0);
    SW_CHECK_INT(n, 0);
    SW_CHECK_INT(sw_detok_push(d, byte_token(t, 'x'), &p, &n), 0);
    SW_CHECK(n == 4 && memcmp(p, "\xef\xbf\xbdx", 4) == 0);

    /* Specials: hidden by default, rendered on request; bad ids refused. */
    SW_CHECK_INT(sw_detok_push(d, 1, &p, &n), 0);
    SW_CHECK_INT(n, 0);
    SW_CHECK(sw_detok_push(d, -5, &p, &n) != 0);
    SW_CHECK(sw_detok_push(d, sw_tokenizer_n_vocab(t), &p, &n) != 0);
    sw_detok_free(&d);
    SW_CHECK(d == NULL);
    sw_detok_free(&d); // idempotent
    d = sw_detok_new(t, 1);
    SW_CHECK(d != NULL);
    if (d) {
        SW_CHECK_INT(sw_detok_push(d, 1, &p, &n), 0);
        SW_CHECK(n == 12 && memcmp(p, "<|im_start|>", 12) == 0);
        sw_detok_free(&d);
    }

    /* Emoji tokens of a real sentence, streamed: the concatenation equals the
     * text and every emitted chunk is valid UTF-8 on its own. */
    const char *text = "🚀 (normal) 😶‍🌫️ ✅ 🦙🦙 done";
    int n_ids = 0;
    int32_t *ids = sw_tokenize_alloc(t, text, strlen(text), 0, 0, &n_ids);
    SW_CHECK(ids != NULL);
    d = sw_detok_new(t, 0);
    if (ids && d) {
        char acc[256] = {0};
        size_t o = 0;
        int chunks_ok = 1;
        for (int i = 0; i <= n_ids; i++) {
            int rc = i < n_ids ? sw_detok_push(d, ids[i], &p, &n) : sw_detok_flush(d, &p, &n);
            SW_CHECK_INT(rc, 0);
            for (size_t k = 0; k < n;) {
                unsigned char b = (unsigned char)p[k];
                size_t need = b < 0x80 ? 1 : b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : 2;
                if (k + need > n)
                    chunks_ok = 0;
                k += need;
            }
            if (o + n < sizeof acc) {
                memcpy(acc + o, p, n);
                o += n;
            }
        }
        SW_CHECK(chunks_ok);
        SW_CHECK(o == strlen(text) && memcmp(acc, text, o) == 0);
    }
    free(ids);
    sw_detok_free(&d);
}

/* ---- 4. synthetic vocabularies ---- */

/* A GGUF (v3, no tensors) written in memory, key by key. */
struct gw {
    unsigned char *p; // (cap) bytes
    size_t len, cap;  // used, allocated
    uint64_t n_kv;    // keys written
};

static void gw_bytes(struct gw *w, const void *src, size_t n)
{
    if (w->len + n > w->cap) {
        size_t cap = w->cap ? w->cap : 1024;
        while (cap < w->len + n)
            cap *= 2;
        unsigned char *q = realloc(w->p, cap);
        if (!q) {
            fprintf(stderr, "out of memory\n");
            exit(1);
        }
        w->p = q;
        w->cap = cap;
    }
    memcpy(w->p + w->len, src, n);
    w->len += n;
}

static void gw_u32(struct gw *w, uint32_t v)
{
    gw_bytes(w, &v, 4);
}

static void gw_u64(struct gw *w, uint64_t v)
{
    gw_bytes(w, &v, 8);
}

static void gw_s(struct gw *w, const char *s)
{
    gw_u64(w, strlen(s));
    gw_bytes(w, s, strlen(s));
}

static void gw_init(struct gw *w)
{
    memset(w, 0, sizeof *w);
    gw_bytes(w, "GGUF", 4);
    gw_u32(w, 3);
    gw_u64(w, 0); // tensors
    gw_u64(w, 0); // kv count, patched by gw_finish
}

static void gw_key(struct gw *w, const char *key, uint32_t type)
{
    gw_s(w, key);
    gw_u32(w, type);
    w->n_kv++;
}

static void gw_str(struct gw *w, const char *key, const char *v)
{
    gw_key(w, key, SW_GGUF_STRING);
    gw_s(w, v);
}

static void gw_u32kv(struct gw *w, const char *key, uint32_t v)
{
    gw_key(w, key, SW_GGUF_UINT32);
    gw_u32(w, v);
}

static void gw_bool(struct gw *w, const char *key, int v)
{
    unsigned char b = (unsigned char)(v != 0);
    gw_key(w, key, SW_GGUF_BOOL);
    gw_bytes(w, &b, 1);
}

static void gw_strs(struct gw *w, const char *key, const char *const *v, size_t n)
{
    gw_key(w, key, SW_GGUF_ARRAY);
    gw_u32(w, SW_GGUF_STRING);
    gw_u64(w, n);
    for (size_t i = 0; i < n; i++)
        gw_s(w, v[i]);
}

static void gw_i32s(struct gw *w, const char *key, const int32_t *v, size_t n)
{
    gw_key(w, key, SW_GGUF_ARRAY);
    gw_u32(w, SW_GGUF_INT32);
    gw_u64(w, n);
    gw_bytes(w, v, n * 4);
}

static void gw_f32s(struct gw *w, const char *key, const float *v, size_t n)
{
    gw_key(w, key, SW_GGUF_ARRAY);
    gw_u32(w, SW_GGUF_FLOAT32);
    gw_u64(w, n);
    gw_bytes(w, v, n * 4);
}

static sw_gguf_t *gw_finish(struct gw *w)
{
    memcpy(w->p + 16, &w->n_kv, 8);
    while (w->len % 32)
        gw_bytes(w, "", 1);
    char err[256];
    sw_gguf_t *g = sw_gguf_open_buffer(w->p, w->len, err, sizeof err);
    if (!g)
        fprintf(stderr, "synthetic gguf: %s\n", err);
    return g;
}

/* A byte-level BPE vocabulary: a, b, c, Ġ (space), ab, abc, Ġa, <|x|>. */
enum {
    BPE_DEFECT_NONE,
    BPE_NO_MODEL,
    BPE_BAD_MODEL,
    BPE_BAD_PRE,
    BPE_NO_MERGES,
    BPE_BAD_MERGE,
    BPE_TYPES_SHORT,
    BPE_TOKENS_INT,
    BPE_BOS_RANGE,
    BPE_SCORES_INT
};

static sw_tokenizer_t *make_bpe(int defect, char *err, size_t err_len, struct gw *w, sw_gguf_t **g)
{
    static const char *const toks[] = {"a",
                                       "b",
                                       "c",
                                       "\xc4\xa0",
                                       "ab",
                                       "abc",
                                       "\xc4\xa0"
                                       "a",
                                       "<|x|>"};
    static const int32_t types[] = {1, 1, 1, 1, 1, 1, 1, 3};
    static const char *const merges[] = {"a b", "ab c", "\xc4\xa0 a"};
    static const char *const bad_merges[] = {"a b", "abc"};
    gw_init(w);
    if (defect != BPE_NO_MODEL)
        gw_str(w, "tokenizer.ggml.model", defect == BPE_BAD_MODEL ? "bert" : "gpt2");
    gw_str(w, "tokenizer.ggml.pre", defect == BPE_BAD_PRE ? "no-such-pre" : "gpt-2");
    if (defect == BPE_TOKENS_INT)
        gw_i32s(w, "tokenizer.ggml.tokens", types, 8);
    else
        gw_strs(w, "tokenizer.ggml.tokens", toks, 8);
    gw_i32s(w, "tokenizer.ggml.token_type", types, defect == BPE_TYPES_SHORT ? 7 : 8);
    if (defect == BPE_SCORES_INT)
        gw_i32s(w, "tokenizer.ggml.scores", types, 8);
    if (defect == BPE_BAD_MERGE)
        gw_strs(w, "tokenizer.ggml.merges", bad_merges, 2);
    else if (defect != BPE_NO_MERGES)
        gw_strs(w, "tokenizer.ggml.merges", merges, 3);
    gw_u32kv(w, "tokenizer.ggml.bos_token_id", defect == BPE_BOS_RANGE ? 8 : 7);
    gw_u32kv(w, "tokenizer.ggml.eos_token_id", 7);
    gw_bool(w, "tokenizer.ggml.add_bos_token", 1);
    *g = gw_finish(w);
    if (!*g)
        return NULL;
    return sw_tokenizer_from_gguf(*g, err, err_len);
}

static void test_synthetic_bpe(void)
{
    char err[256] = "";
    struct gw w;
    sw_gguf_t *g = NULL;
    sw_tokenizer_t *t = make_bpe(BPE_DEFECT_NONE, err, sizeof err, &w, &g);
    SW_CHECK(t != NULL);
    if (t) {
        int32_t ids[16];
        int n = 0;
        /* "abc" merges a+b (rank 0) then ab+c (rank 1); " ab" merges a+b
         * before Ġ+a because rank 0 < rank 2, leaving Ġ alone. */
        SW_CHECK_INT(sw_tokenize(t, "abc ab", 6, 0, 0, ids, 16, &n), 0);
        SW_CHECK(n == 3 && ids[0] == 5 && ids[1] == 3 && ids[2] == 4);
        SW_CHECK_INT(sw_tokenize(t, " a", 2, 1, 0, ids, 16, &n), 0);
        SW_CHECK(n == 2 && ids[0] == 7 && ids[1] == 6); // BOS then Ġa
        /* Control text is plain text unless parse_special. */
        SW_CHECK_INT(sw_tokenize(t, "a<|x|>", 6, 0, 1, ids, 16, &n), 0);
        SW_CHECK(n == 2 && ids[0] == 0 && ids[1] == 7);
        SW_CHECK_INT(sw_tokenize(t, "a<|x|>", 6, 0, 0, ids, 16, &n), 0);
        SW_CHECK_INT(n, 1); // '<', '|', 'x', '>' have no tokens here: dropped
        SW_CHECK(sw_tokenizer_is_eog(t, 7));
        sw_tokenizer_free(&t);
    }
    sw_gguf_close(&g);
    free(w.p);

    static const struct {
        int defect;
        const char *why;
    } bad[] = {
        {BPE_NO_MODEL, "tokenizer.ggml.model"},
        {BPE_BAD_MODEL, "bert"},
        {BPE_BAD_PRE, "no-such-pre"},
        {BPE_NO_MERGES, "merges"},
        {BPE_BAD_MERGE, "merge 1"},
        {BPE_TYPES_SHORT, "token_type"},
        {BPE_TOKENS_INT, "tokens"},
        {BPE_SCORES_INT, "scores"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = 0;
        t = make_bpe(bad[i].defect, err, sizeof err, &w, &g);
        SW_CHECK(g != NULL && t == NULL);
        SW_CHECK(strstr(err, bad[i].why) != NULL);
        if (t || !strstr(err, bad[i].why))
            fprintf(stderr, "defect %d: \"%s\"\n", bad[i].defect, err);
        sw_tokenizer_free(&t);
        sw_gguf_close(&g);
        free(w.p);
    }
    /* An out-of-range special id is ignored, not fatal. */
    t = make_bpe(BPE_BOS_RANGE, err, sizeof err, &w, &g);
    SW_CHECK(t != NULL);
    if (t) {
        SW_CHECK_INT(sw_tokenizer_bos(t), -1);
        SW_CHECK_INT(sw_tokenizer_add_bos(t), 0);
        sw_tokenizer_free(&t);
    }
    sw_gguf_close(&g);
    free(w.p);
}

/* A SentencePiece vocabulary: <unk> <s> </s>, 256 byte tokens, then pieces. */
static void test_synthetic_spm(void)
{
    enum { N_BASE = 3 + 256 };
    static const char *const pieces[] = {"\xe2\x96\x81",
                                         "a",
                                         "b",
                                         "\xe2\x96\x81"
                                         "a",
                                         "ab",
                                         "\xe2\x96\x81"
                                         "ab",
                                         "\xe2\x96\x81\xe2\x96\x81"};
    static const float piece_scores[] = {-1, -2, -3, -4, -5, -6, -7};
    const size_t n_pieces = sizeof pieces / sizeof pieces[0];
    const size_t n = N_BASE + n_pieces;
    const char **toks = calloc(n, sizeof *toks);
    char(*bytes)[8] = calloc(256, 8);
    int32_t *types = calloc(n, sizeof *types);
    float *scores = calloc(n, sizeof *scores);
    SW_CHECK(toks && bytes && types && scores);
    if (!toks || !bytes || !types || !scores)
        goto out;
    toks[0] = "<unk>";
    toks[1] = "<s>";
    toks[2] = "</s>";
    types[0] = SW_TOKEN_UNKNOWN;
    types[1] = types[2] = SW_TOKEN_CONTROL;
    for (int b = 0; b < 256; b++) {
        snprintf(bytes[b], 8, "<0x%02X>", b);
        toks[3 + b] = bytes[b];
        types[3 + b] = SW_TOKEN_BYTE;
    }
    for (size_t i = 0; i < n_pieces; i++) {
        toks[N_BASE + i] = pieces[i];
        types[N_BASE + i] = SW_TOKEN_NORMAL;
        scores[N_BASE + i] = piece_scores[i];
    }
    struct gw w;
    gw_init(&w);
    gw_str(&w, "tokenizer.ggml.model", "llama");
    gw_strs(&w, "tokenizer.ggml.tokens", toks, n);
    gw_i32s(&w, "tokenizer.ggml.token_type", types, n);
    gw_f32s(&w, "tokenizer.ggml.scores", scores, n);
    gw_u32kv(&w, "tokenizer.ggml.bos_token_id", 1);
    gw_u32kv(&w, "tokenizer.ggml.eos_token_id", 2);
    gw_u32kv(&w, "tokenizer.ggml.unknown_token_id", 0);
    sw_gguf_t *g = gw_finish(&w);
    char err[256];
    sw_tokenizer_t *t = g ? sw_tokenizer_from_gguf(g, err, sizeof err) : NULL;
    SW_CHECK(t != NULL);
    if (t) {
        int32_t ids[32];
        int k = 0;
        const int32_t P = N_BASE; // first piece id
        /* "ab" is escaped to "▁ab": the pair "▁a" (score -4) beats "ab" (-5),
         * then "▁a"+"b" = "▁ab" merges. BOS by default. */
        SW_CHECK_INT(sw_tokenize(t, "ab", 2, 1, 0, ids, 32, &k), 0);
        SW_CHECK(k == 2 && ids[0] == 1 && ids[1] == P + 5);
        /* "b a": "▁b" is no token, so [▁, b, ▁a]. */
        SW_CHECK_INT(sw_tokenize(t, "b a", 3, 0, 0, ids, 32, &k), 0);
        SW_CHECK(k == 3 && ids[0] == P + 0 && ids[1] == P + 2 && ids[2] == P + 3);
        /* "c" and "é" have no pieces: byte fallback <0x63>, <0xC3><0xA9>. */
        SW_CHECK_INT(sw_tokenize(t, "c\xc3\xa9", 3, 0, 0, ids, 32, &k), 0);
        SW_CHECK(k == 4 && ids[0] == P + 0 && ids[1] == 3 + 0x63 && ids[2] == 3 + 0xC3 &&
                 ids[3] == 3 + 0xA9);
        /* Two spaces: "▁▁▁" -> [▁▁, ▁]. */
        SW_CHECK_INT(sw_tokenize(t, "  ", 2, 0, 0, ids, 32, &k), 0);
        SW_CHECK(k == 2 && ids[0] == P + 6 && ids[1] == P + 0);
        /* Decoding drops the prefixed space, maps bytes back, keeps the rest. */
        const char *text = "ab c\xc3\xa9  b";
        int32_t *all = sw_tokenize_alloc(t, text, strlen(text), 1, 0, &k);
        size_t dl = 0;
        char *dec = all ? detok_all(t, all, k, 0, &dl) : NULL;
        SW_CHECK(dec && strcmp(dec, text) == 0);
        if (dec && strcmp(dec, text) != 0)
            fprintf(stderr, "spm decode: \"%s\"\n", dec);
        free(dec);
        free(all);
        /* The unknown token is a special: matched only with parse_special;
         * raw text after a special token gets the space prefix again. */
        SW_CHECK_INT(sw_tokenize(t, "<unk>a", 6, 0, 1, ids, 32, &k), 0);
        SW_CHECK(k == 2 && ids[0] == 0 && ids[1] == P + 3);
        SW_CHECK_INT(sw_tokenize(t, "<unk>", 5, 0, 0, ids, 32, &k), 0);
        SW_CHECK(k == 6 && ids[0] == P + 0 && ids[1] == 3 + '<');
        sw_tokenizer_free(&t);
    } else {
        fprintf(stderr, "spm: %s\n", g ? err : "no gguf");
    }
    sw_gguf_close(&g);
    free(w.p);
out:
    free(toks);
    free(bytes);
    free(types);
    free(scores);
}

/* Random byte strings (valid and invalid UTF-8, biased toward bytes that
 * matter to the pre-tokenizer): tokenizing never fails, and the pieces give
 * back every byte that has a token in the alphabet, in order. */
static void test_random_bytes(const sw_tokenizer_t *t)
{
    static const unsigned char bias[] = {' ',  ' ',  '\n', '\r', '\t', '\'', 's',  'a',  '1', '.',
                                         0xC3, 0xA9, 0xE2, 0x80, 0x99, 0xF0, 0x9F, 0xA6, 0x99};
    int has_tok[256];
    for (int b = 0; b < 256; b++)
        has_tok[b] = byte_token(t, (unsigned char)b) >= 0;
    uint64_t x = 0x9E3779B97F4A7C15ull;
    int n_ok = 0;
    const int n_cases = 2000;
    for (int k = 0; k < n_cases; k++) {
        unsigned char in[80], want[80];
        char got[1024];
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        size_t len = (size_t)(x >> 58); // 0..63
        size_t n_want = 0;
        for (size_t i = 0; i < len; i++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            unsigned v = (unsigned)(x >> 33);
            in[i] = (v & 1) ? bias[(v >> 1) % sizeof bias] : (unsigned char)(v >> 8);
            if (has_tok[in[i]])
                want[n_want++] = in[i];
        }
        int n = 0;
        int32_t *ids = sw_tokenize_alloc(t, (const char *)in, len, 0, 0, &n);
        if (!ids)
            continue;
        size_t o = 0;
        int ok = 1;
        for (int i = 0; i < n && ok; i++) {
            int m = sw_token_to_piece(t, ids[i], 1, got + o, sizeof got - o);
            ok = m >= 0 && o + (size_t)m <= sizeof got;
            o += ok ? (size_t)m : 0;
        }
        n_ok += ok && o == n_want && memcmp(got, want, o) == 0;
        free(ids);
    }
    printf("random bytes: %d/%d strings give their bytes back\n", n_ok, n_cases);
    SW_CHECK_INT(n_ok, n_cases);
}

int main(void)
{
    test_synthetic_bpe();
    test_synthetic_spm();
    test_vocab_dir();

    const char *model = model_path_or_null();
    if (!model) {
        sw_test_skip_part("SmolLM2 corpus and detokenizer parts: the model is absent "
                          "(run: bash scripts/fetch_model.sh)");
        return sw_test_done();
    }
    sw_tokenizer_t *t = load_tokenizer(model, NULL);
    SW_CHECK(t != NULL);
    if (t) {
        test_smollm2_api(t);
        test_smollm2_corpus(t);
        test_detok_stream(t);
        test_random_bytes(t);
        sw_tokenizer_free(&t);
        SW_CHECK(t == NULL);
    }
    return sw_test_done();
}
