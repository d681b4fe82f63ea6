/*
 * tokenizer.c - byte-level BPE and SentencePiece tokenizers built from GGUF
 * metadata (see tokenizer.h): loading the vocabulary, merges and special
 * tokens, the partition of a text at its special tokens, sw_tokenize and the
 * accessors. The pre-tokenizers are in tokenizer_pre.c, the hash maps and the
 * merge loops in tokenizer_merge.c, the streaming detokenizer in detok.c
 * (tokenizer_impl.h says what they share).
 */
#include "tokenizer.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "tokenizer_impl.h"
#include "unicode.h"

/* ---- GPT-2 byte alphabet ------------------------------------------------
 * Printable Latin-1 bytes stand for themselves; the other 68 bytes (controls,
 * space, DEL, NBSP, soft hyphen...) are moved to U+0100.. in byte order, so
 * that every byte is a visible character in the vocabulary. */

static void s_alphabet_init(sw_tokenizer_t *t)
{
    uint32_t next = 256;
    for (int i = 0; i < 512; i++)
        t->cp_byte[i] = -1;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        t->byte_cp[b] = printable ? (uint32_t)b : next++;
        t->cp_byte[t->byte_cp[b]] = (int16_t)b;
    }
}

/* ---- loading ------------------------------------------------------------ */

static int s_is_special_type(int type)
{
    return type == SW_TOKEN_CONTROL || type == SW_TOKEN_USER_DEFINED || type == SW_TOKEN_UNKNOWN;
}

static int32_t s_get_id(const sw_gguf_t *g, const sw_tokenizer_t *t, const char *key)
{
    int64_t v;
    if (sw_gguf_get_i64(g, key, &v) != 0)
        return -1;
    if (v < 0 || v >= t->n_vocab) {
        SW_WARN("tokenizer: %s = %lld is outside the vocabulary (%d tokens); ignored", key,
                (long long)v, t->n_vocab);
        return -1;
    }
    return (int32_t)v;
}

static void s_get_flag(const sw_gguf_t *g, const char *key, int *flag)
{
    int v;
    if (sw_gguf_get_bool(g, key, &v) == 0)
        *flag = v != 0;
}

/* Reads tokens, types and scores into t. */
static int s_load_vocab(sw_tokenizer_t *t, const sw_gguf_t *g, char *err, size_t err_len)
{
    enum sw_gguf_vtype et;
    uint64_t n;
    if (sw_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n) != 0 || et != SW_GGUF_STRING) {
        sw_errf(err, err_len, "tokenizer: tokenizer.ggml.tokens is missing or not a string array");
        return -1;
    }
    if (n == 0 || n > TOK_MAX_VOCAB) {
        sw_errf(err, err_len, "tokenizer: vocabulary of %llu tokens (allowed 1..%d)",
                (unsigned long long)n, TOK_MAX_VOCAB);
        return -1;
    }
    t->n_vocab = (int32_t)n;
    uint64_t total = 0;
    for (uint64_t i = 0; i < n; i++) {
        sw_gguf_str_t s;
        if (sw_gguf_arr_str(g, "tokenizer.ggml.tokens", i, &s) != 0 ||
            s.len > TOK_MAX_TOKEN_BYTES) {
            sw_errf(err, err_len, "tokenizer: token %llu is unreadable or longer than %d bytes",
                    (unsigned long long)i, TOK_MAX_TOKEN_BYTES);
            return -1;
        }
        total += s.len;
    }
    if (total > TOK_MAX_TEXT_BYTES) {
        sw_errf(err, err_len, "tokenizer: token strings total %llu bytes (limit %llu)",
                (unsigned long long)total, (unsigned long long)TOK_MAX_TEXT_BYTES);
        return -1;
    }
    t->text = malloc(total + 1);
    t->text_off = malloc((n + 1) * sizeof(*t->text_off));
    t->type = malloc(n);
    t->score = calloc(n, sizeof(*t->score));
    if (!t->text || !t->text_off || !t->type || !t->score) {
        sw_errf(err, err_len, "tokenizer: out of memory for %llu tokens", (unsigned long long)n);
        return -1;
    }
    uint64_t off = 0;
    for (uint64_t i = 0; i < n; i++) {
        sw_gguf_str_t s;
        if (sw_gguf_arr_str(g, "tokenizer.ggml.tokens", i, &s) != 0)
            return -1; // read above already
        t->text_off[i] = off;
        memcpy(t->text + off, s.ptr, s.len);
        off += s.len;
    }
    t->text_off[n] = off;

    memset(t->type, SW_TOKEN_NORMAL, n);
    uint64_t m;
    if (sw_gguf_get_arr(g, "tokenizer.ggml.token_type", &et, &m) == 0) {
        const unsigned char *p = sw_gguf_arr_data(g, "tokenizer.ggml.token_type");
        if (m != n || (et != SW_GGUF_INT32 && et != SW_GGUF_UINT32) || !p) {
            sw_errf(err, err_len,
                    "tokenizer: tokenizer.ggml.token_type has %llu entries of type %d, expected "
                    "%llu int32",
                    (unsigned long long)m, (int)et, (unsigned long long)n);
            return -1;
        }
        for (uint64_t i = 0; i < n; i++) {
            int32_t v;
            memcpy(&v, p + 4 * i, 4);
            /* Unknown types (0 = undefined) behave as normal tokens. */
            t->type[i] = (uint8_t)(v >= SW_TOKEN_NORMAL && v <= SW_TOKEN_BYTE ? v : 1);
        }
    }
    if (sw_gguf_get_arr(g, "tokenizer.ggml.scores", &et, &m) == 0) {
        const unsigned char *p = sw_gguf_arr_data(g, "tokenizer.ggml.scores");
        if (m != n || et != SW_GGUF_FLOAT32 || !p) {
            sw_errf(err, err_len,
                    "tokenizer: tokenizer.ggml.scores has %llu entries of type %d, expected %llu "
                    "float32",
                    (unsigned long long)m, (int)et, (unsigned long long)n);
            return -1;
        }
        memcpy(t->score, p, n * sizeof(float));
    }
    return 0;
}

/* Parses tokenizer.ggml.merges ("left right" strings) into the merge map. */
static int s_load_merges(sw_tokenizer_t *t, const sw_gguf_t *g, char *err, size_t err_len)
{
    enum sw_gguf_vtype et;
    uint64_t n;
    if (sw_gguf_get_arr(g, "tokenizer.ggml.merges", &et, &n) != 0 || et != SW_GGUF_STRING) {
        sw_errf(err, err_len, "tokenizer: tokenizer.ggml.merges is missing or not a string array");
        return -1;
    }
    if (n > INT32_MAX / 4) {
        sw_errf(err, err_len, "tokenizer: %llu merges is too many", (unsigned long long)n);
        return -1;
    }
    uint32_t cap = 16;
    while (cap < 2 * n)
        cap *= 2;
    t->merge = calloc(cap, sizeof(*t->merge));
    char *cat = malloc(2 * TOK_MAX_TOKEN_BYTES + 1);
    if (!t->merge || !cat) {
        free(cat);
        sw_errf(err, err_len, "tokenizer: out of memory for %llu merges", (unsigned long long)n);
        return -1;
    }
    t->merge_cap = cap;
    uint64_t skipped = 0;
    for (uint64_t i = 0; i < n; i++) {
        sw_gguf_str_t s;
        if (sw_gguf_arr_str(g, "tokenizer.ggml.merges", i, &s) != 0) {
            free(cat);
            sw_errf(err, err_len, "tokenizer: merge %llu is unreadable", (unsigned long long)i);
            return -1;
        }
        /* The separator is the first space after the first byte (a left part
         * may itself be a space in non byte-level vocabularies). */
        const char *sp = s.len > 1 ? memchr(s.ptr + 1, ' ', s.len - 1) : NULL;
        if (!sp || s.len > 2 * TOK_MAX_TOKEN_BYTES) {
            free(cat);
            sw_errf(err, err_len, "tokenizer: merge %llu is not \"left right\"",
                    (unsigned long long)i);
            return -1;
        }
        size_t ln = (size_t)(sp - s.ptr), rn = s.len - ln - 1;
        int32_t a = tok_strmap_get(t, &t->vocab, s.ptr, ln);
        int32_t b = tok_strmap_get(t, &t->vocab, sp + 1, rn);
        memcpy(cat, s.ptr, ln);
        memcpy(cat + ln, sp + 1, rn);
        int32_t r = tok_strmap_get(t, &t->vocab, cat, ln + rn);
        if (a < 0 || b < 0 || r < 0) {
            skipped++;
            continue;
        }
        uint64_t key = (((uint64_t)(uint32_t)a << 32) | (uint32_t)b) + 1;
        uint32_t k = tok_merge_slot(key, cap);
        while (t->merge[k].key != 0 && t->merge[k].key != key)
            k = (k + 1) & (cap - 1);
        if (t->merge[k].key == key)
            continue; // a repeated pair keeps its first (lowest) rank
        t->merge[k].key = key;
        t->merge[k].rank = (int32_t)i;
        t->merge[k].result = r;
    }
    free(cat);
    if (skipped)
        SW_DEBUG("tokenizer: %llu merges name strings that are not tokens; ignored",
                 (unsigned long long)skipped);
    return 0;
}

static int s_hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* Decoded bytes of every token (what sw_token_to_piece returns). */
static int s_build_pieces(sw_tokenizer_t *t)
{
    uint64_t total = t->text_off[t->n_vocab];
    /* A BPE alphabet char (<= 2 UTF-8 bytes) decodes to 1 byte; U+2581 (3)
     * to 1; <0xXX> (6) to 1; other text is copied. Never longer than text. */
    t->piece = malloc(total + 1);
    t->piece_off = malloc(((size_t)t->n_vocab + 1) * sizeof(*t->piece_off));
    if (!t->piece || !t->piece_off)
        return -1;
    uint64_t o = 0;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        size_t n;
        const char *s = tok_text(t, id, &n);
        t->piece_off[id] = o;
        int type = t->type[id];
        if (type == SW_TOKEN_UNUSED) {
            continue;
        } else if (type == SW_TOKEN_BYTE) {
            int hi = n == 6 && memcmp(s, "<0x", 3) == 0 && s[5] == '>' ? s_hexval(s[3]) : -1;
            int lo = hi >= 0 ? s_hexval(s[4]) : -1;
            if (lo >= 0)
                t->piece[o++] = (char)(hi * 16 + lo);
            continue;
        } else if (type != SW_TOKEN_NORMAL) {
            memcpy(t->piece + o, s, n); // control, unknown, user-defined: as written
            o += n;
            continue;
        }
        for (size_t i = 0; i < n;) {
            size_t k;
            uint32_t cp = sw_utf8_decode(s + i, n - i, &k);
            if (t->model == TOK_MODEL_BPE && cp < 512 && t->cp_byte[cp] >= 0) {
                t->piece[o++] = (char)t->cp_byte[cp];
            } else if (t->model == TOK_MODEL_SPM && cp == 0x2581) {
                t->piece[o++] = ' ';
            } else {
                memcpy(t->piece + o, s + i, k);
                o += k;
            }
            i += k;
        }
    }
    t->piece_off[t->n_vocab] = o;
    return 0;
}

static int s_build_special(sw_tokenizer_t *t)
{
    size_t n_special = 0;
    for (int32_t id = 0; id < t->n_vocab; id++)
        if (s_is_special_type(t->type[id]) && t->text_off[id + 1] > t->text_off[id])
            n_special++;
    if (tok_strmap_init(&t->special, n_special) != 0)
        return -1;
    memset(t->special_first, 0, sizeof(t->special_first));
    size_t cap = 0;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        size_t n;
        const char *s = tok_text(t, id, &n);
        if (!s_is_special_type(t->type[id]) || n == 0)
            continue;
        tok_strmap_put(t, &t->special, id);
        unsigned char b = (unsigned char)s[0];
        t->special_first[b >> 3] |= (uint8_t)(1u << (b & 7));
        size_t j = 0;
        while (j < t->n_special_len && t->special_len[j] > n)
            j++;
        if (j < t->n_special_len && t->special_len[j] == n)
            continue;
        if (tok_reserve((void **)&t->special_len, &cap, t->n_special_len + 1,
                        sizeof(*t->special_len)) != 0)
            return -1;
        memmove(t->special_len + j + 1, t->special_len + j,
                (t->n_special_len - j) * sizeof(*t->special_len));
        t->special_len[j] = (uint32_t)n;
        t->n_special_len++;
    }
    return 0;
}

static int32_t s_find_cstr(const sw_tokenizer_t *t, const char *s)
{
    return tok_strmap_get(t, &t->vocab, s, strlen(s));
}

/* End-of-turn / end-of-generation markers of the common chat models. */
static const char *const k_eot_texts[] = {
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<EOT>",
    "_<EOT>",
    ("<\xef\xbd\x9c" /* the fullwidth bar of DeepSeek's marker, then the rest */
     "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"),
};

/* The texts llama.cpp (0.3.36, llama-vocab.cpp) makes end-of-generation
 * tokens whatever type the vocabulary gives them (it forces them to control
 * type; here they only stop generation): Qwen2's vocabulary has a normal
 * "</s>" that llama.cpp stops at, for one. */
static const char *const k_eog_any_type[] = {
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "[e~[",
    ("<\xef\xbd\x9c" /* DeepSeek's end of sentence, fullwidth bars */
     "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"),
};

static int s_add_eog(sw_tokenizer_t *t, int32_t id)
{
    if (id < 0)
        return 0;
    for (int i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id)
            return 0;
    int32_t *e = realloc(t->eog, ((size_t)t->n_eog + 1) * sizeof(*e));
    if (!e)
        return -1;
    t->eog = e;
    t->eog[t->n_eog++] = id;
    return 0;
}

static int s_load_specials(sw_tokenizer_t *t, const sw_gguf_t *g)
{
    t->bos = s_get_id(g, t, "tokenizer.ggml.bos_token_id");
    t->eos = s_get_id(g, t, "tokenizer.ggml.eos_token_id");
    t->eot = s_get_id(g, t, "tokenizer.ggml.eot_token_id");
    t->eom = s_get_id(g, t, "tokenizer.ggml.eom_token_id");
    t->unk = s_get_id(g, t, "tokenizer.ggml.unknown_token_id");
    if (t->eot < 0) {
        for (size_t i = 0; i < sizeof(k_eot_texts) / sizeof(k_eot_texts[0]) && t->eot < 0; i++) {
            int32_t id = s_find_cstr(t, k_eot_texts[i]);
            if (id >= 0 && t->type[id] == SW_TOKEN_CONTROL)
                t->eot = id;
        }
    }
    if (s_add_eog(t, t->eos) != 0 || s_add_eog(t, t->eot) != 0 || s_add_eog(t, t->eom) != 0)
        return -1;
    for (size_t i = 0; i < sizeof(k_eot_texts) / sizeof(k_eot_texts[0]); i++) {
        int32_t id = s_find_cstr(t, k_eot_texts[i]);
        if (id >= 0 && t->type[id] == SW_TOKEN_CONTROL && s_add_eog(t, id) != 0)
            return -1;
    }
    for (size_t i = 0; i < sizeof(k_eog_any_type) / sizeof(k_eog_any_type[0]); i++)
        if (s_add_eog(t, s_find_cstr(t, k_eog_any_type[i])) != 0)
            return -1;
    s_get_flag(g, "tokenizer.ggml.add_bos_token", &t->add_bos);
    s_get_flag(g, "tokenizer.ggml.add_eos_token", &t->add_eos);
    s_get_flag(g, "tokenizer.ggml.add_space_prefix", &t->add_space_prefix);
    return 0;
}

sw_tokenizer_t *sw_tokenizer_from_gguf(const sw_gguf_t *g, char *err, size_t err_len)
{
    sw_tokenizer_t *t = calloc(1, sizeof(*t));
    if (!t) {
        sw_errf(err, err_len, "tokenizer: out of memory");
        return NULL;
    }
    sw_gguf_str_t model;
    if (sw_gguf_get_str(g, "tokenizer.ggml.model", &model) != 0) {
        sw_errf(err, err_len, "tokenizer: tokenizer.ggml.model is missing");
        goto fail;
    }
    if (sw_gguf_str_eq(model, "gpt2")) {
        t->model = TOK_MODEL_BPE;
    } else if (sw_gguf_str_eq(model, "llama")) {
        t->model = TOK_MODEL_SPM;
        t->add_bos = 1;
        t->add_space_prefix = 1;
    } else {
        sw_errf(err, err_len,
                "tokenizer: tokenizer model \"%.*s\" is not supported (supported: gpt2, llama)",
                (int)(model.len > 64 ? 64 : model.len), model.ptr);
        goto fail;
    }
    if (s_load_vocab(t, g, err, err_len) != 0)
        goto fail;
    if (tok_strmap_init(&t->vocab, (size_t)t->n_vocab) != 0) {
        sw_errf(err, err_len, "tokenizer: out of memory for the vocabulary map");
        goto fail;
    }
    for (int32_t id = 0; id < t->n_vocab; id++)
        tok_strmap_put(t, &t->vocab, id);
    s_alphabet_init(t);

    if (t->model == TOK_MODEL_BPE) {
        sw_gguf_str_t pre;
        const char *canon = "default";
        t->pre = tok_pre_find(canon, strlen(canon), &canon);
        if (sw_gguf_get_str(g, "tokenizer.ggml.pre", &pre) == 0) {
            t->pre = tok_pre_find(pre.ptr, pre.len, &canon);
            if (!t->pre) {
                sw_errf(err, err_len, "tokenizer: pre-tokenizer \"%.*s\" is not supported",
                        (int)(pre.len > 64 ? 64 : pre.len), pre.ptr);
                goto fail;
            }
        } else {
            SW_WARN("tokenizer: tokenizer.ggml.pre is missing; using the default pre-tokenizer");
        }
        snprintf(t->pre_name, sizeof(t->pre_name), "%s", canon);
        t->ignore_merges = tok_pre_ignore_merges(t->pre);
        t->add_bos = tok_pre_add_bos(t->pre);
        if (s_load_merges(t, g, err, err_len) != 0)
            goto fail;
        for (int b = 0; b < 256; b++) {
            char u[4];
            size_t n = sw_utf8_encode(t->byte_cp[b], u);
            t->byte_tok[b] = tok_strmap_get(t, &t->vocab, u, n);
        }
    } else {
        snprintf(t->pre_name, sizeof(t->pre_name), "spm");
        for (int b = 0; b < 256; b++) {
            char u[8];
            snprintf(u, sizeof(u), "<0x%02X>", b);
            t->byte_tok[b] = tok_strmap_get(t, &t->vocab, u, 6);
        }
    }
    if (s_build_special(t) != 0 || s_build_pieces(t) != 0 || s_load_specials(t, g) != 0) {
        sw_errf(err, err_len, "tokenizer: out of memory");
        goto fail;
    }
    /* Stored strings are never shorter than the input they match (byte-level and
     * U+2581 escapes only grow), nor are decoded pieces: their longest bounds how
     * much text one token covers, so how many tokens a text has at least. */
    t->max_tok_bytes = 4;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        size_t a = (size_t)(t->text_off[id + 1] - t->text_off[id]);
        size_t b = (size_t)(t->piece_off[id + 1] - t->piece_off[id]);
        if (a > t->max_tok_bytes)
            t->max_tok_bytes = a;
        if (b > t->max_tok_bytes)
            t->max_tok_bytes = b;
    }
    return t;
fail:
    sw_tokenizer_free(&t);
    return NULL;
}

void sw_tokenizer_free(sw_tokenizer_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    sw_tokenizer_t *t = *self_p;
    free(t->text);
    free(t->text_off);
    free(t->piece);
    free(t->piece_off);
    free(t->score);
    free(t->type);
    free(t->vocab.slot);
    free(t->special.slot);
    free(t->special_len);
    free(t->merge);
    free(t->eog);
    free(t);
    *self_p = NULL;
}

/* ---- tokenize ----------------------------------------------------------- */

/* Longest special token that starts at text[pos], or -1. User-defined tokens
 * always match; control and unknown ones only with parse_special. */
static int32_t s_special_at(const sw_tokenizer_t *t, const char *text, size_t len, size_t pos,
                            int parse_special, size_t *n)
{
    unsigned char b = (unsigned char)text[pos];
    if (!(t->special_first[b >> 3] & (1u << (b & 7))))
        return -1;
    for (size_t k = 0; k < t->n_special_len; k++) {
        size_t l = t->special_len[k];
        if (l > len - pos)
            continue;
        int32_t id = tok_strmap_get(t, &t->special, text + pos, l);
        if (id >= 0 && (parse_special || t->type[id] == SW_TOKEN_USER_DEFINED)) {
            *n = l;
            return id;
        }
    }
    return -1;
}

static void s_work_free(tok_work_t *w)
{
    free(w->cpt);
    free(w->seg);
    free(w->seg2);
    free(w->buf);
    free(w->sym);
    free(w->heap);
}

/* Tokenizes into out; -1 on allocation failure, TOK_TOO_LONG once out passes max tokens
 * (checked before each word or fragment, so an overlong text costs about max tokens' work). */
static int s_tokenize_vec(const sw_tokenizer_t *t, const char *text, size_t len, int add_special,
                          int parse_special, size_t max, tok_ivec_t *out)
{
    if (len > TOK_MAX_INPUT_BYTES) {
        SW_ERR("tokenizer: input of %zu bytes exceeds the %llu byte limit", len,
               (unsigned long long)TOK_MAX_INPUT_BYTES);
        return -1;
    }
    if (tok_past_max(t, out, len, max + 2)) /* BOS and EOS cover no text */
        return TOK_TOO_LONG;
    tok_work_t w;
    memset(&w, 0, sizeof(w));
    int rc = 0;
    if (add_special && t->add_bos && t->bos >= 0)
        rc |= tok_ivec_push(out, t->bos);
    int prev_special = 1; // SPM prefixes a space to the text and after each special token
    size_t frag = 0;
    for (size_t pos = 0; pos <= len && rc == 0;) {
        size_t n = 0;
        int32_t sid = pos < len ? s_special_at(t, text, len, pos, parse_special, &n) : -1;
        if (pos < len && sid < 0) {
            pos++;
            continue;
        }
        /* text[frag..pos) is raw text, followed by special token sid (or the end). */
        if (pos > frag) {
            if (t->model == TOK_MODEL_BPE)
                rc = tok_bpe_fragment(t, &w, text + frag, pos - frag, max, out);
            else if (tok_past_max(t, out, pos - frag, max))
                rc = TOK_TOO_LONG;
            else
                rc = tok_spm_fragment(t, &w, text + frag, pos - frag,
                                      t->add_space_prefix && prev_special, out);
            prev_special = 0;
        }
        if (sid < 0 || rc != 0)
            break;
        rc = tok_ivec_push(out, sid);
        prev_special = 1;
        pos += n;
        frag = pos;
    }
    if (rc == 0 && add_special && t->add_eos && t->eos >= 0)
        rc = tok_ivec_push(out, t->eos);
    if (rc == 0 && out->n > max)
        rc = TOK_TOO_LONG;
    s_work_free(&w);
    return rc;
}

int sw_tokenize(const sw_tokenizer_t *t, const char *text, size_t len, int add_special,
                int parse_special, int32_t *out, int max_out, int *n_out)
{
    tok_ivec_t v = {0};
    *n_out = 0;
    if (s_tokenize_vec(t, text, len, add_special, parse_special, SIZE_MAX - 2, &v) != 0 ||
        v.n > INT_MAX) {
        free(v.v);
        return SW_TOK_ERR_NOMEM;
    }
    *n_out = (int)v.n;
    int rc = 0;
    size_t n = v.n;
    if (max_out < 0 || v.n > (size_t)max_out) {
        rc = SW_TOK_ERR_TOO_SMALL;
        n = max_out > 0 ? (size_t)max_out : 0;
    }
    if (n > 0)
        memcpy(out, v.v, n * sizeof(*out));
    free(v.v);
    return rc;
}

int32_t *sw_tokenize_alloc(const sw_tokenizer_t *t, const char *text, size_t len, int add_special,
                           int parse_special, int *n_out)
{
    int32_t *ids = NULL;
    if (sw_tokenize_max(t, text, len, add_special, parse_special, INT_MAX - 1, &ids, n_out) != 0)
        return NULL;
    return ids;
}

int sw_tokenize_max(const sw_tokenizer_t *t, const char *text, size_t len, int add_special,
                    int parse_special, int max_tokens, int32_t **ids, int *n_out)
{
    tok_ivec_t v = {0};
    *ids = NULL;
    *n_out = 0;
    if (max_tokens < 0 || max_tokens >= INT_MAX)
        max_tokens = INT_MAX - 1;
    int rc = s_tokenize_vec(t, text, len, add_special, parse_special, (size_t)max_tokens, &v);
    if (rc == 0 && tok_ivec_push(&v, -1) != 0) // the sentinel makes an empty result non-NULL
        rc = -1;
    if (rc != 0) {
        free(v.v);
        *n_out = rc == TOK_TOO_LONG ? max_tokens + 1 : 0;
        return rc == TOK_TOO_LONG ? SW_TOK_ERR_TOO_LONG : SW_TOK_ERR_NOMEM;
    }
    *n_out = (int)v.n - 1;
    *ids = v.v;
    return 0;
}

/* ---- accessors ---------------------------------------------------------- */

int32_t sw_tokenizer_n_vocab(const sw_tokenizer_t *t)
{
    return t->n_vocab;
}

int32_t sw_tokenizer_bos(const sw_tokenizer_t *t)
{
    return t->bos;
}

int32_t sw_tokenizer_eos(const sw_tokenizer_t *t)
{
    return t->eos;
}

int32_t sw_tokenizer_eot(const sw_tokenizer_t *t)
{
    return t->eot;
}

int sw_tokenizer_add_bos(const sw_tokenizer_t *t)
{
    return t->add_bos && t->bos >= 0;
}

int sw_tokenizer_is_eog(const sw_tokenizer_t *t, int32_t id)
{
    for (int i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id)
            return 1;
    return 0;
}

int sw_tokenizer_token_type(const sw_tokenizer_t *t, int32_t id)
{
    if (id < 0 || id >= t->n_vocab)
        return -1;
    return t->type[id];
}

const char *sw_tokenizer_model(const sw_tokenizer_t *t)
{
    return t->model == TOK_MODEL_BPE ? "gpt2" : "llama";
}

const char *sw_tokenizer_pre(const sw_tokenizer_t *t)
{
    return t->pre_name;
}

const char *sw_tokenizer_token_text(const sw_tokenizer_t *t, int32_t id, size_t *len)
{
    if (id < 0 || id >= t->n_vocab) {
        *len = 0;
        return NULL;
    }
    return tok_text(t, id, len);
}

int32_t sw_tokenizer_find(const sw_tokenizer_t *t, const char *text, size_t len)
{
    return tok_strmap_get(t, &t->vocab, text, len);
}

/* Control and unknown tokens are hidden unless rendering specials. */
int sw_token_to_piece(const sw_tokenizer_t *t, int32_t id, int render_special, char *buf,
                      size_t len)
{
    if (id < 0 || id >= t->n_vocab)
        return -1;
    if (tok_hidden(t, id, render_special))
        return 0;
    size_t n = (size_t)(t->piece_off[id + 1] - t->piece_off[id]);
    if (n > INT_MAX)
        return -1;
    if (len > 0)
        memcpy(buf, t->piece + t->piece_off[id], n < len ? n : len);
    return (int)n;
}
