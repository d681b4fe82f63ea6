/*
 * fuzz_tokenizer.c - libFuzzer target for the tokenizer (net/tokenizer.c):
 * prompts arrive from clients, so any byte string must tokenize and come back.
 *
 * The tokenizer is built once: from the SmolLM2 GGUF when SW_TEST_MODEL (or
 * models/SmolLM2-135M-Instruct.Q4_1.gguf) exists, else from a small byte-level
 * BPE vocabulary written as a GGUF in memory (all 256 byte tokens, a few
 * merges, one control token). Per input (byte 0 = flags):
 *  - tokenize with add_special = bit 1 and parse_special = bit 0; with
 *    neither, and when the vocabulary has a token for every byte of the
 *    input, the pieces of the ids must give back the input bytes exactly;
 *    the streaming detokenizer must always emit valid UTF-8;
 *  - the input read as little-endian int32 ids (in and out of range) goes
 *    through sw_token_to_piece and the streaming detokenizer, which must
 *    refuse bad ids without a crash.
 */
#include "gguf.h"
#include "log.h"
#include "tokenizer.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static sw_tokenizer_t *s_tok;
static int s_byte_ok[256]; /* the vocabulary can spell this byte (SmolLM2 lacks 21 of them) */
static sw_gguf_t *s_gguf;
static uint8_t *s_buf; /* the in-memory GGUF, alive as long as s_gguf */

struct s_w {
    uint8_t *p;
    size_t len, cap;
    uint64_t n_kv;
};

static void s_bytes(struct s_w *w, const void *src, size_t n)
{
    if (w->len + n > w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 4096;
        while (cap < w->len + n)
            cap *= 2;
        uint8_t *q = realloc(w->p, cap);
        if (!q)
            abort();
        w->p = q;
        w->cap = cap;
    }
    memcpy(w->p + w->len, src, n);
    w->len += n;
}

static void s_u32(struct s_w *w, uint32_t v)
{
    s_bytes(w, &v, 4);
}

static void s_u64(struct s_w *w, uint64_t v)
{
    s_bytes(w, &v, 8);
}

static void s_str(struct s_w *w, const char *s, size_t n)
{
    s_u64(w, n);
    s_bytes(w, s, n);
}

static void s_key(struct s_w *w, const char *k, uint32_t type)
{
    s_str(w, k, strlen(k));
    s_u32(w, type);
    w->n_kv++;
}

/* GPT-2's byte-to-character map: printable Latin-1 bytes stand for themselves,
 * the others for U+0100 + n. Writes the UTF-8 of byte b's character. */
static size_t s_byte_char(int b, char *out)
{
    static int map[256];
    static int ready;
    if (!ready) {
        int n = 0;
        for (int i = 0; i < 256; i++) {
            int keep = (i >= 33 && i <= 126) || (i >= 161 && i <= 172) || (i >= 174);
            map[i] = keep ? i : 256 + n++;
        }
        ready = 1;
    }
    int cp = map[b];
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xc0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3f));
    return 2;
}

static sw_gguf_t *s_synthetic(void)
{
    struct s_w w = {0};
    s_bytes(&w, "GGUF", 4);
    s_u32(&w, 3);
    s_u64(&w, 0);
    s_u64(&w, 0);
    s_key(&w, "tokenizer.ggml.model", SW_GGUF_STRING);
    s_str(&w, "gpt2", 4);
    s_key(&w, "tokenizer.ggml.pre", SW_GGUF_STRING);
    s_str(&w, "gpt-2", 5);
    /* tokens: 256 bytes, then merges' results, then a control token */
    static const char *const extra[] = {"th", "the", "\xc4\xa0t", "\xc4\xa0th", "in", "ing"};
    static const char *const merges[] = {"t h", "th e", "\xc4\xa0 t", "\xc4\xa0t h", "i n", "in g"};
    const int n_extra = 6, n_vocab = 256 + n_extra + 1;
    s_key(&w, "tokenizer.ggml.tokens", SW_GGUF_ARRAY);
    s_u32(&w, SW_GGUF_STRING);
    s_u64(&w, (uint64_t)n_vocab);
    for (int b = 0; b < 256; b++) {
        char c[2];
        s_str(&w, c, s_byte_char(b, c));
    }
    for (int i = 0; i < n_extra; i++)
        s_str(&w, extra[i], strlen(extra[i]));
    s_str(&w, "<|end|>", 7);
    s_key(&w, "tokenizer.ggml.token_type", SW_GGUF_ARRAY);
    s_u32(&w, SW_GGUF_INT32);
    s_u64(&w, (uint64_t)n_vocab);
    for (int i = 0; i < n_vocab; i++)
        s_u32(&w, i == n_vocab - 1 ? 3 : 1);
    s_key(&w, "tokenizer.ggml.merges", SW_GGUF_ARRAY);
    s_u32(&w, SW_GGUF_STRING);
    s_u64(&w, (uint64_t)n_extra);
    for (int i = 0; i < n_extra; i++)
        s_str(&w, merges[i], strlen(merges[i]));
    s_key(&w, "tokenizer.ggml.eos_token_id", SW_GGUF_UINT32);
    s_u32(&w, (uint32_t)(n_vocab - 1));
    memcpy(w.p + 16, &w.n_kv, 8);
    while (w.len % 32)
        s_bytes(&w, "", 1);
    s_buf = w.p;
    char err[256];
    sw_gguf_t *g = sw_gguf_open_buffer(w.p, w.len, err, sizeof err);
    if (!g)
        fprintf(stderr, "fuzz_tokenizer: synthetic vocabulary: %s\n", err);
    return g;
}

static void s_init(void)
{
    sw_log_set_level(SW_LOG_ERROR);
    const char *model = getenv("SW_TEST_MODEL");
    if (!model)
        model = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
    char err[256];
    s_gguf = sw_gguf_open(model, err, sizeof err);
    if (s_gguf)
        fprintf(stderr, "fuzz_tokenizer: vocabulary of %s\n", model);
    else
        s_gguf = s_synthetic();
    if (!s_gguf)
        abort();
    s_tok = sw_tokenizer_from_gguf(s_gguf, err, sizeof err);
    if (!s_tok) {
        fprintf(stderr, "fuzz_tokenizer: %s\n", err);
        abort();
    }
    /* A byte with no token of its own cannot come back (the tokenizer drops it, as
     * Hugging Face's does): the exact round trip is only asked of spellable input. */
    for (int b = 0; b < 256; b++) {
        char c = (char)b, piece[16];
        int n = 0;
        int32_t *ids = sw_tokenize_alloc(s_tok, &c, 1, 0, 0, &n);
        s_byte_ok[b] = ids && n == 1 &&
                       sw_token_to_piece(s_tok, ids[0], 0, piece, sizeof piece) == 1 &&
                       piece[0] == c;
        free(ids);
    }
}

static int s_utf8_valid(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned char c = (unsigned char)s[i];
        size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (!len || i + len > n)
            return 0;
        for (size_t k = 1; k < len; k++)
            if (((unsigned char)s[i + k] >> 6) != 2)
                return 0;
        i += len;
    }
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!s_tok)
        s_init();
    if (size < 1)
        return 0;
    const int flags = data[0];
    const char *text = (const char *)data + 1;
    const size_t len = size - 1;
    int spellable = 1;
    for (size_t i = 0; i < len && spellable; i++)
        spellable = s_byte_ok[(unsigned char)text[i]];
    const int exact = !(flags & 3) && spellable; /* the pieces must give back the input */
    int n = 0;
    int32_t *ids = sw_tokenize_alloc(s_tok, text, len, flags & 2, flags & 1, &n);
    if (!ids)
        abort(); /* inputs are small: memory cannot run out */
    const int32_t nv = sw_tokenizer_n_vocab(s_tok);
    char *back = malloc(len * 4 + 64);
    size_t blen = 0;
    sw_detok_t *d = sw_detok_new(s_tok, 0);
    if (!back || !d)
        abort();
    for (int i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= nv)
            abort();
        char piece[256];
        int pl = sw_token_to_piece(s_tok, ids[i], 0, piece, sizeof piece);
        if (pl < 0 || pl > (int)sizeof piece)
            abort();
        if (exact) {
            if (blen + (size_t)pl > len)
                abort(); /* more bytes out than in */
            memcpy(back + blen, piece, (size_t)pl);
            blen += (size_t)pl;
        }
        const char *t;
        size_t tl;
        if (sw_detok_push(d, ids[i], &t, &tl) != 0 || !s_utf8_valid(t, tl))
            abort();
    }
    const char *t;
    size_t tl;
    if (sw_detok_flush(d, &t, &tl) != 0 || !s_utf8_valid(t, tl))
        abort();
    if (exact && (blen != len || memcmp(back, text, len) != 0))
        abort(); /* byte-level BPE gives back every byte */
    free(ids);

    /* the input as token ids, most in range, some not */
    for (size_t i = 1; i + 4 <= size; i += 4) {
        int32_t id;
        memcpy(&id, data + i, 4);
        if (flags & 4)
            id = (int32_t)((uint32_t)id % (uint32_t)(nv + 2)) - 1;
        char piece[8]; /* small on purpose: the snprintf-like length contract */
        int pl = sw_token_to_piece(s_tok, id, flags & 8, piece, sizeof piece);
        if ((id < 0 || id >= nv) != (pl < 0))
            abort();
        int rc = sw_detok_push(d, id, &t, &tl);
        if ((id < 0 || id >= nv) ? rc == 0 : (rc != 0 || !s_utf8_valid(t, tl)))
            abort();
    }
    if (sw_detok_flush(d, &t, &tl) != 0 || !s_utf8_valid(t, tl))
        abort();
    sw_detok_free(&d);
    free(back);
    return 0;
}
