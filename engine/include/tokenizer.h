/*
 * tokenizer.h - text <-> token ids for the models shardwire runs, built from
 * the tokenizer.ggml.* metadata of a GGUF file.
 *
 * Two tokenizer models are supported:
 *   - "gpt2": byte-level BPE (SmolLM2, Llama 3, Qwen2, DeepSeek, Falcon,
 *     StarCoder, GPT-2...). Text is first split by the model's pre-tokenizer
 *     (tokenizer.ggml.pre names which one; each is a hand-written matcher that
 *     behaves like the model's regular expression in Hugging Face tokenizers),
 *     every piece is mapped to the GPT-2 byte alphabet and merged by the rank
 *     of tokenizer.ggml.merges.
 *   - "llama": SentencePiece BPE (Llama 2, Mistral v0.1, Phi-3): score-driven
 *     merges over UTF-8 characters, spaces as U+2581, byte fallback <0xXX>.
 * Special tokens (control, user-defined, unknown) are cut out of the text
 * before the model runs: user-defined tokens always, control tokens only when
 * the caller asks (parse_special), so that user text cannot forge them.
 *
 * Ownership: the tokenizer copies everything it needs out of the GGUF, so the
 * sw_gguf_t may be closed right after sw_tokenizer_from_gguf(). A tokenizer is
 * immutable after construction; every function below may be called from
 * several threads at once (a sw_detok_t belongs to one thread).
 */
#ifndef SW_TOKENIZER_H
#define SW_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "gguf.h"

typedef struct sw_tokenizer sw_tokenizer_t;

/* Token types as stored in tokenizer.ggml.token_type. */
enum sw_token_type {
    SW_TOKEN_NORMAL = 1,
    SW_TOKEN_UNKNOWN = 2,
    SW_TOKEN_CONTROL = 3,
    SW_TOKEN_USER_DEFINED = 4,
    SW_TOKEN_UNUSED = 5,
    SW_TOKEN_BYTE = 6,
};

/* sw_tokenize() result codes. */
enum {
    SW_TOK_ERR_NOMEM = -1,     // allocation failed or input too long
    SW_TOK_ERR_TOO_SMALL = -2, // out[] too short: *n_out holds the count needed
    SW_TOK_ERR_TOO_LONG = -3,  // sw_tokenize_max: more than max_tokens tokens
};

/* Builds the tokenizer of g. Returns NULL and one line in err (err_len bytes,
 * may be 0) when a key is missing or malformed, or the tokenizer model or
 * pre-tokenizer is not supported. Free with sw_tokenizer_free(). */
sw_tokenizer_t *sw_tokenizer_from_gguf(const sw_gguf_t *g, char *err, size_t err_len)
    __attribute__((warn_unused_result));
/* Frees; accepts NULL and NULLs the caller's pointer. */
void sw_tokenizer_free(sw_tokenizer_t **self_p);

/* Tokenizes text[0..len) (any bytes; invalid UTF-8 is kept byte for byte by
 * byte-level BPE and byte-fallback SPM). add_special: add BOS / EOS where the
 * model asks for them (tokenizer.ggml.add_bos_token / add_eos_token).
 * parse_special: recognize control-token strings such as "<|im_start|>" in
 * text. Writes at most max_out ids to out and the count to *n_out. Returns 0,
 * SW_TOK_ERR_TOO_SMALL (with *n_out = the count needed; call again with a
 * larger out) or SW_TOK_ERR_NOMEM. */
int sw_tokenize(const sw_tokenizer_t *t, const char *text, size_t len, int add_special,
                int parse_special, int32_t *out, int max_out, int *n_out)
    __attribute__((warn_unused_result));

/* Same, into a malloc'd array the caller frees; NULL on allocation failure
 * (an empty result is a valid non-NULL array with *n_out = 0). */
int32_t *sw_tokenize_alloc(const sw_tokenizer_t *t, const char *text, size_t len, int add_special,
                           int parse_special, int *n_out) __attribute__((warn_unused_result));

/*
 * Like sw_tokenize_alloc, but stops as soon as the text is known to have more
 * than max_tokens tokens (before each pre-tokenized word, from a lower bound
 * on the tokens the rest needs), so the work is bounded by max_tokens, not by
 * the text: a server tokenizing a client's prompt passes its context length.
 * Returns 0 (*ids malloc'd, caller frees; *n_out tokens), SW_TOK_ERR_TOO_LONG
 * (*ids NULL, *n_out = max_tokens + 1) or SW_TOK_ERR_NOMEM.
 */
int sw_tokenize_max(const sw_tokenizer_t *t, const char *text, size_t len, int add_special,
                    int parse_special, int max_tokens, int32_t **ids, int *n_out)
    __attribute__((warn_unused_result));

int32_t sw_tokenizer_n_vocab(const sw_tokenizer_t *t);
/* Special ids, or -1 when the model has none. eot is the end-of-turn token
 * of chat models (tokenizer.ggml.eot_token_id, else found by its text:
 * <|eot_id|>, <|im_end|>, ...). */
int32_t sw_tokenizer_bos(const sw_tokenizer_t *t);
int32_t sw_tokenizer_eos(const sw_tokenizer_t *t);
int32_t sw_tokenizer_eot(const sw_tokenizer_t *t);
/* Whether add_special adds BOS. */
int sw_tokenizer_add_bos(const sw_tokenizer_t *t);
/* 1 when id ends generation (eos, eot, eom and the usual end markers). */
int sw_tokenizer_is_eog(const sw_tokenizer_t *t, int32_t id);
/* enum sw_token_type of id, or -1 when id is out of range. */
int sw_tokenizer_token_type(const sw_tokenizer_t *t, int32_t id);
/* "gpt2" or "llama", and the pre-tokenizer name in use ("smollm", "default"...). */
const char *sw_tokenizer_model(const sw_tokenizer_t *t);
const char *sw_tokenizer_pre(const sw_tokenizer_t *t);

/* The vocabulary string of id as stored in the GGUF (byte-level encoded for
 * BPE, U+2581 for spaces in SPM); not NUL-terminated, *len bytes, owned by t.
 * NULL when id is out of range. */
const char *sw_tokenizer_token_text(const sw_tokenizer_t *t, int32_t id, size_t *len);
/* The id whose vocabulary string is exactly text[0..len), or -1. */
int32_t sw_tokenizer_find(const sw_tokenizer_t *t, const char *text, size_t len);

/* The raw bytes id stands for (byte-level decoded; U+2581 -> space and
 * <0xXX> -> byte for SPM). Control and unknown tokens give their text when
 * render_special is set and nothing otherwise. Copies min(n, len) bytes to buf
 * (no NUL) and returns n, the piece length, like snprintf; -1 when id is out of
 * range. A piece may be a partial UTF-8 sequence. */
int sw_token_to_piece(const sw_tokenizer_t *t, int32_t id, int render_special, char *buf,
                      size_t len);

/* ---- streaming detokenizer ----
 * Turns ids into text one at a time and only ever emits complete, valid UTF-8:
 * the bytes of a character split across tokens are held until it completes;
 * bytes that can never form a character come out as U+FFFD. SPM models drop
 * the one space their tokenizer prefixed to the text. */
typedef struct sw_detok sw_detok_t;

/* t must outlive the detokenizer. NULL on allocation failure. */
sw_detok_t *sw_detok_new(const sw_tokenizer_t *t, int render_special)
    __attribute__((warn_unused_result));
void sw_detok_free(sw_detok_t **self_p);
/* Adds id; *text / *len receive the newly complete text (possibly empty),
 * valid until the next call on d. Returns 0, or -1 on a bad id or allocation
 * failure (d is unchanged then). */
int sw_detok_push(sw_detok_t *d, int32_t id, const char **text, size_t *len)
    __attribute__((warn_unused_result));
/* Emits what is still held (an unfinished sequence becomes U+FFFD) and
 * resets d for a new text. Same contract as sw_detok_push. */
int sw_detok_flush(sw_detok_t *d, const char **text, size_t *len)
    __attribute__((warn_unused_result));

#endif
