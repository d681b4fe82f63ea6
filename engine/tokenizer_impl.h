/*
 * tokenizer_impl.h - what the tokenizer's files share, private to the engine:
 * the tokenizer's struct, its hash maps and growable arrays, the per-call
 * scratch space, and the functions one file of the tokenizer calls in another.
 *
 *   tokenizer.c        loading from GGUF, special tokens, sw_tokenize, accessors
 *   tokenizer_pre.c    the pre-tokenizers (regular-expression shapes per model)
 *   tokenizer_merge.c  the hash maps and the BPE and SentencePiece merge loops
 *   detok.c            the streaming detokenizer
 *
 * Calls go one way: tokenizer.c calls the pre-tokenizers and the merge loops,
 * the merge loops call the pre-tokenizers, detok.c calls the public API.
 */
#ifndef SW_TOKENIZER_IMPL_H
#define SW_TOKENIZER_IMPL_H

#include <stdint.h>
#include <stdlib.h>

#include "tokenizer.h"

/* Bounds on untrusted metadata: far above any real vocabulary. */
#define TOK_MAX_VOCAB (1 << 24)          // tokens
#define TOK_MAX_TOKEN_BYTES (1 << 16)    // bytes in one token string
#define TOK_MAX_TEXT_BYTES (1ull << 30)  // bytes of all token strings together
#define TOK_MAX_INPUT_BYTES (1ull << 28) // bytes sw_tokenize accepts in one call
#define TOK_TOO_LONG (-2)                // internal: the text has more tokens than allowed

/* ---- growable arrays ---------------------------------------------------- */

typedef struct tok_ivec {
    int32_t *v; // (cap) ids
    size_t n;   // used
    size_t cap; // allocated
} tok_ivec_t;

static inline int tok_ivec_push(tok_ivec_t *a, int32_t x)
{
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 64;
        int32_t *v = realloc(a->v, cap * sizeof(*v));
        if (!v)
            return -1;
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = x;
    return 0;
}

/* Ensures room for n elements of size sz in *p (capacity *cap, in elements). */
static inline int tok_reserve(void **p, size_t *cap, size_t n, size_t sz)
{
    if (n <= *cap)
        return 0;
    size_t c = *cap ? *cap : 64;
    while (c < n)
        c *= 2;
    if (c > SIZE_MAX / sz)
        return -1;
    void *q = realloc(*p, c * sz);
    if (!q)
        return -1;
    *p = q;
    *cap = c;
    return 0;
}

/* ---- string -> id map (open addressing over token strings) --------------- */

typedef struct tok_strmap {
    int32_t *slot; // (cap) token id or -1
    uint32_t cap;  // power of two
} tok_strmap_t;

/* ---- (left id, right id) -> merge rank map ------------------------------ */

typedef struct tok_merge {
    uint64_t key;   // (left << 32 | right) + 1; 0 = empty slot
    int32_t rank;   // position in tokenizer.ggml.merges (lower merges first)
    int32_t result; // id of the merged token
} tok_merge_t;

/* ---- the tokenizer ------------------------------------------------------ */

enum tok_model { TOK_MODEL_BPE, TOK_MODEL_SPM };

struct tok_pre; // pre-tokenizer description, below

struct sw_tokenizer {
    enum tok_model model;
    const struct tok_pre *pre; // BPE only; NULL for SPM
    int32_t n_vocab;           // token count
    char *text;                // all token strings back to back
    uint64_t *text_off;        // (n_vocab + 1) offsets into text
    char *piece;               // all decoded pieces back to back
    uint64_t *piece_off;       // (n_vocab + 1) offsets into piece
    float *score;              // (n_vocab) SPM merge scores (0 when absent)
    uint8_t *type;             // (n_vocab) enum sw_token_type
    tok_strmap_t vocab;        // token string -> id (last id wins on duplicates)
    tok_strmap_t special;      // control / user-defined / unknown string -> id
    uint8_t special_first[32]; // bitset of the first bytes of special strings
    uint32_t *special_len;     // (n_special_len) distinct special lengths, descending
    size_t n_special_len;
    tok_merge_t *merge;    // (merge_cap) BPE merge map
    uint32_t merge_cap;    // power of two (0 for SPM)
    int32_t byte_tok[256]; // BPE: token of the byte's alphabet char; SPM: <0xXX>; -1 if none
    uint32_t byte_cp[256]; // BPE alphabet: byte -> code point
    int16_t cp_byte[512];  // BPE alphabet: code point (< 512) -> byte, or -1
    int32_t bos, eos, eot, eom, unk; // special ids or -1
    int32_t *eog;                    // (n_eog) end-of-generation ids
    int n_eog;
    int add_bos, add_eos; // what add_special adds
    int add_space_prefix; // SPM: prefix a space to the text
    int ignore_merges;    // BPE: a word that is a whole token skips merging (Llama 3)
    char pre_name[64];    // pre-tokenizer name in use
    size_t max_tok_bytes; // most input bytes one token can stand for (>= 4)
};

static inline const char *tok_text(const sw_tokenizer_t *t, int32_t id, size_t *len)
{
    *len = (size_t)(t->text_off[id + 1] - t->text_off[id]);
    return t->text + t->text_off[id];
}

/* 1 when token id's text is not shown: a control or unknown token without render_special. */
static inline int tok_hidden(const sw_tokenizer_t *t, int32_t id, int render_special)
{
    int type = t->type[id];
    return !render_special && (type == SW_TOKEN_CONTROL || type == SW_TOKEN_UNKNOWN);
}

/* ---- hash maps (tokenizer_merge.c) --------------------------------------- */

/* Sizes m for n strings: 0, or -1 when out of memory. */
int tok_strmap_init(tok_strmap_t *m, size_t n);
/* Adds token id's string (the later of two equal strings wins). */
void tok_strmap_put(const sw_tokenizer_t *t, tok_strmap_t *m, int32_t id);
/* The id of the string s[0..n), or -1. */
int32_t tok_strmap_get(const sw_tokenizer_t *t, const tok_strmap_t *m, const char *s, size_t n);
/* The first slot to probe for a merge key in a map of cap slots (a power of two). */
uint32_t tok_merge_slot(uint64_t key, uint32_t cap);

/* ---- pre-tokenizers (tokenizer_pre.c) ------------------------------------ */

typedef struct tok_cpt {
    uint32_t cp;  // code point (U+FFFD for an invalid byte)
    uint32_t off; // byte offset in the text
    uint8_t len;  // bytes (1..4)
    uint8_t fl;   // enum sw_ucat flags
} tok_cpt_t;

/* Per-call scratch space, freed at the end of sw_tokenize(). */
typedef struct tok_work {
    tok_cpt_t *cpt; // (n_cpt) code points of the current fragment
    size_t n_cpt, cap_cpt;
    size_t *seg; // (n_seg) piece boundaries as [start, end) code point index pairs, flattened
    size_t n_seg, cap_seg;
    size_t *seg2; // second buffer for the next pass
    size_t cap_seg2;
    char *buf; // byte scratch (SPM text, byte-level words)
    size_t cap_buf;
    struct tok_sym *sym; // merge symbols
    size_t cap_sym;
    struct tok_heap_ent *heap; // merge candidates
    size_t n_heap, cap_heap;
} tok_work_t;

/* The pre-tokenizer named name[0..len) (a tokenizer.ggml.pre value), with its
 * canonical name in *canon; NULL when none is known. */
const struct tok_pre *tok_pre_find(const char *name, size_t len, const char **canon);
/* Whether whole-token words skip merging, and add_bos_token's default. */
int tok_pre_ignore_merges(const struct tok_pre *pre);
int tok_pre_add_bos(const struct tok_pre *pre);
/* Decodes text[0..len) into w->cpt. */
int tok_decode(tok_work_t *w, const char *text, size_t len);
/* Runs the pre-tokenizer over w->cpt; leaves the pieces in w->seg. */
int tok_pretokenize(tok_work_t *w, const struct tok_pre *pre);

/* ---- merge loops (tokenizer_merge.c) ------------------------------------- */

/* 1 when out, grown by the tokens at least len more bytes need, passes max. */
static inline int tok_past_max(const sw_tokenizer_t *t, const tok_ivec_t *out, size_t len,
                               size_t max)
{
    return out->n > max || (len + t->max_tok_bytes - 1) / t->max_tok_bytes > max - out->n;
}
/* Byte-level BPE of one raw-text fragment; TOK_TOO_LONG as soon as out passes max tokens. */
int tok_bpe_fragment(const sw_tokenizer_t *t, tok_work_t *w, const char *text, size_t len,
                     size_t max, tok_ivec_t *out);
/* SentencePiece BPE of one raw-text fragment. */
int tok_spm_fragment(const sw_tokenizer_t *t, tok_work_t *w, const char *text, size_t len,
                     int prefix_space, tok_ivec_t *out);

#endif
