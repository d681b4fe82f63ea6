/*
 * tokenizer.c - byte-level BPE and SentencePiece tokenizers built from GGUF
 * metadata, with hand-written pre-tokenizers (see tokenizer.h).
 *
 * Layout of this file: string and pair hash maps; the GPT-2 byte alphabet;
 * the pre-tokenizers (one matcher per regular-expression shape, sequenced per
 * model); loading from GGUF; special-token partitioning; the BPE and SPM merge
 * loops; the public API; the streaming detokenizer.
 *
 * The merge loops follow the reference implementations' tie-breaking exactly
 * (lowest rank / highest score first, leftmost on ties), because a different
 * but "equally good" segmentation would change the ids the model sees.
 */
#include "tokenizer.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "unicode.h"

/* Bounds on untrusted metadata: far above any real vocabulary. */
#define S_MAX_VOCAB (1 << 24)          // tokens
#define S_MAX_TOKEN_BYTES (1 << 16)    // bytes in one token string
#define S_MAX_TEXT_BYTES (1ull << 30)  // bytes of all token strings together
#define S_MAX_INPUT_BYTES (1ull << 28) // bytes sw_tokenize accepts in one call
#define S_TOO_LONG (-2)                // internal: the text has more tokens than allowed

/* ---- growable arrays ---------------------------------------------------- */

typedef struct s_ivec {
    int32_t *v; // (cap) ids
    size_t n;   // used
    size_t cap; // allocated
} s_ivec_t;

static int s_ivec_push(s_ivec_t *a, int32_t x)
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
static int s_reserve(void **p, size_t *cap, size_t n, size_t sz)
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

typedef struct s_strmap {
    int32_t *slot; // (cap) token id or -1
    uint32_t cap;  // power of two
} s_strmap_t;

static uint64_t s_hash(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull; // FNV-1a 64
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ull;
    }
    return h;
}

/* ---- (left id, right id) -> merge rank map ------------------------------ */

typedef struct s_merge {
    uint64_t key;   // (left << 32 | right) + 1; 0 = empty slot
    int32_t rank;   // position in tokenizer.ggml.merges (lower merges first)
    int32_t result; // id of the merged token
} s_merge_t;

/* ---- the tokenizer ------------------------------------------------------ */

enum s_model { S_MODEL_BPE, S_MODEL_SPM };

struct s_pre; // pre-tokenizer description, below

struct sw_tokenizer {
    enum s_model model;
    const struct s_pre *pre;   // BPE only; NULL for SPM
    int32_t n_vocab;           // token count
    char *text;                // all token strings back to back
    uint64_t *text_off;        // (n_vocab + 1) offsets into text
    char *piece;               // all decoded pieces back to back
    uint64_t *piece_off;       // (n_vocab + 1) offsets into piece
    float *score;              // (n_vocab) SPM merge scores (0 when absent)
    uint8_t *type;             // (n_vocab) enum sw_token_type
    s_strmap_t vocab;          // token string -> id (last id wins on duplicates)
    s_strmap_t special;        // control / user-defined / unknown string -> id
    uint8_t special_first[32]; // bitset of the first bytes of special strings
    uint32_t *special_len;     // (n_special_len) distinct special lengths, descending
    size_t n_special_len;
    s_merge_t *merge;      // (merge_cap) BPE merge map
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

static const char *s_text(const sw_tokenizer_t *t, int32_t id, size_t *len)
{
    *len = (size_t)(t->text_off[id + 1] - t->text_off[id]);
    return t->text + t->text_off[id];
}

static int s_strmap_init(s_strmap_t *m, size_t n)
{
    uint32_t cap = 16;
    while (cap < 2 * n)
        cap *= 2;
    m->slot = malloc(cap * sizeof(*m->slot));
    if (!m->slot)
        return -1;
    memset(m->slot, 0xff, cap * sizeof(*m->slot));
    m->cap = cap;
    return 0;
}

static void s_strmap_put(const sw_tokenizer_t *t, s_strmap_t *m, int32_t id)
{
    size_t n;
    const char *s = s_text(t, id, &n);
    uint32_t i = (uint32_t)s_hash(s, n) & (m->cap - 1);
    while (m->slot[i] >= 0) {
        size_t n2;
        const char *s2 = s_text(t, m->slot[i], &n2);
        if (n2 == n && memcmp(s, s2, n) == 0)
            break; // duplicate string: the later id replaces it
        i = (i + 1) & (m->cap - 1);
    }
    m->slot[i] = id;
}

static int32_t s_strmap_get(const sw_tokenizer_t *t, const s_strmap_t *m, const char *s, size_t n)
{
    if (!m->slot)
        return -1;
    uint32_t i = (uint32_t)s_hash(s, n) & (m->cap - 1);
    while (m->slot[i] >= 0) {
        size_t n2;
        const char *s2 = s_text(t, m->slot[i], &n2);
        if (n2 == n && memcmp(s, s2, n) == 0)
            return m->slot[i];
        i = (i + 1) & (m->cap - 1);
    }
    return -1;
}

static uint32_t s_merge_slot(uint64_t key, uint32_t cap)
{
    uint64_t h = key * 0x9E3779B97F4A7C15ull;
    return (uint32_t)(h >> 32) & (cap - 1);
}

static const s_merge_t *s_merge_get(const sw_tokenizer_t *t, int32_t a, int32_t b)
{
    if (t->merge_cap == 0 || a < 0 || b < 0)
        return NULL;
    uint64_t key = (((uint64_t)(uint32_t)a << 32) | (uint32_t)b) + 1;
    uint32_t i = s_merge_slot(key, t->merge_cap);
    while (t->merge[i].key != 0) {
        if (t->merge[i].key == key)
            return &t->merge[i];
        i = (i + 1) & (t->merge_cap - 1);
    }
    return NULL;
}

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

/* ---- pre-tokenizers -----------------------------------------------------
 * Each model's pre-tokenizer is a sequence of regular expressions applied in
 * turn; each splits every current piece into its matches and the text between
 * them (both kept). Every expression shape used by the supported models has a
 * matcher below: it returns the length of the match that starts exactly at
 * pos within [pos, end), or 0 when the expression does not match there. */

typedef struct s_cpt {
    uint32_t cp;  // code point (U+FFFD for an invalid byte)
    uint32_t off; // byte offset in the text
    uint8_t len;  // bytes (1..4)
    uint8_t fl;   // enum sw_ucat flags
} s_cpt_t;

typedef int (*s_class_fn)(const s_cpt_t *c);

static int s_is_letter(const s_cpt_t *c)
{
    return (c->fl & SW_UCAT_LETTER) != 0;
}

static int s_is_number(const s_cpt_t *c)
{
    return (c->fl & SW_UCAT_NUMBER) != 0;
}

static int s_is_space(const s_cpt_t *c)
{
    return (c->fl & SW_UCAT_SPACE) != 0;
}

static int s_is_punct(const s_cpt_t *c)
{
    return (c->fl & SW_UCAT_PUNCT) != 0;
}

/* [^\s\p{L}\p{N}] */
static int s_is_other(const s_cpt_t *c)
{
    return (c->fl & (SW_UCAT_SPACE | SW_UCAT_LETTER | SW_UCAT_NUMBER)) == 0;
}

static int s_is_newline(const s_cpt_t *c)
{
    return c->cp == '\r' || c->cp == '\n';
}

static int s_is_ascii_digit(const s_cpt_t *c)
{
    return c->cp >= '0' && c->cp <= '9';
}

/* [\p{P}\$\+<=>\^~\|] (the "default" BPE pre-tokenizer) */
static int s_is_punct_default(const s_cpt_t *c)
{
    return s_is_punct(c) || (c->cp < 128 && strchr("$+<=>^~|", (int)c->cp) && c->cp != 0);
}

/* [\p{P}\$\+<=>\^~\|`] (Falcon) */
static int s_is_punct_falcon(const s_cpt_t *c)
{
    return s_is_punct_default(c) || c->cp == '`';
}

static int s_in_ranges(uint32_t cp, const uint32_t (*r)[2], size_t n)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cp < r[mid][0])
            hi = mid;
        else if (cp > r[mid][1])
            lo = mid + 1;
        else
            return 1;
    }
    return 0;
}

/* [一-龥ࠀ-一가-퟿] (DeepSeek: CJK ideographs, U+0800..U+4E00, Hangul) */
static int s_is_ds_cjk(const s_cpt_t *c)
{
    return (c->cp >= 0x0800 && c->cp <= 0x9FA5) || (c->cp >= 0xAC00 && c->cp <= 0xD7FF);
}

/* The letter class of DeepSeek-LLM's second expression (Latin, Greek,
 * Cyrillic, Armenian, Georgian, Cherokee... cased letters), as code point
 * ranges, sorted. */
static const uint32_t k_ds_latin[][2] = {
    {0x41, 0x5A},       {0x61, 0x7A},       {0xB5, 0xB5},       {0xC0, 0xD6},
    {0xD8, 0xF6},       {0xF8, 0x1BA},      {0x1BC, 0x1BF},     {0x1C4, 0x293},
    {0x295, 0x2AF},     {0x370, 0x373},     {0x376, 0x377},     {0x37B, 0x37D},
    {0x37F, 0x37F},     {0x386, 0x386},     {0x388, 0x38A},     {0x38C, 0x38C},
    {0x38E, 0x3A1},     {0x3A3, 0x3F5},     {0x3F7, 0x481},     {0x48A, 0x52F},
    {0x531, 0x556},     {0x10A0, 0x10C5},   {0x13A0, 0x13F5},   {0x13F8, 0x13FD},
    {0x1C90, 0x1CBA},   {0x1CBD, 0x1CBF},   {0x1D00, 0x1D2B},   {0x1D6B, 0x1D77},
    {0x1D79, 0x1D9A},   {0x1E00, 0x1F15},   {0x1F18, 0x1F1D},   {0x1F20, 0x1F45},
    {0x1F48, 0x1F4D},   {0x1F50, 0x1F57},   {0x1F59, 0x1F59},   {0x1F5B, 0x1F5B},
    {0x1F5D, 0x1F5D},   {0x1F5F, 0x1F7D},   {0x1F80, 0x1FB4},   {0x1FB6, 0x1FBC},
    {0x1FBE, 0x1FBE},   {0x1FC2, 0x1FC4},   {0x1FC6, 0x1FCC},   {0x1FD0, 0x1FD3},
    {0x1FD6, 0x1FDB},   {0x1FE0, 0x1FEC},   {0x1FF2, 0x1FF4},   {0x1FF6, 0x1FFC},
    {0x2102, 0x2102},   {0x2107, 0x2107},   {0x210A, 0x2113},   {0x2115, 0x2115},
    {0x2119, 0x211D},   {0x2124, 0x2124},   {0x2126, 0x2126},   {0x2128, 0x2128},
    {0x212A, 0x212D},   {0x212F, 0x2134},   {0x2139, 0x2139},   {0x213C, 0x213F},
    {0x2145, 0x2149},   {0x214E, 0x214E},   {0x2183, 0x2184},   {0x2C00, 0x2C7B},
    {0x2C7E, 0x2CE4},   {0x2CEB, 0x2CEE},   {0x2CF2, 0x2CF3},   {0xA640, 0xA66D},
    {0xA680, 0xA69B},   {0xA722, 0xA76F},   {0xA771, 0xA787},   {0xA78B, 0xA78E},
    {0xAB70, 0xABBF},   {0xFB00, 0xFB06},   {0xFB13, 0xFB17},   {0xFF21, 0xFF3A},
    {0xFF41, 0xFF5A},   {0x10400, 0x1044F}, {0x104B0, 0x104D3}, {0x104D8, 0x104FB},
    {0x10C80, 0x10CB2}, {0x10CC0, 0x10CF2}, {0x118A0, 0x118DF}, {0x1E900, 0x1E943},
};

static int s_is_ds_latin(const s_cpt_t *c)
{
    return s_in_ranges(c->cp, k_ds_latin, sizeof(k_ds_latin) / sizeof(k_ds_latin[0]));
}

/* [!-/:-~！-／：-～‘-‟　-。] (DeepSeek-LLM punctuation) */
static const uint32_t k_ds_punct[][2] = {
    {0x21, 0x2F},     {0x3A, 0x7E},     {0x2018, 0x201F},
    {0x3000, 0x3002}, {0xFF01, 0xFF0F}, {0xFF1A, 0xFF5E},
};

static int s_is_ds_punct(const s_cpt_t *c)
{
    return s_in_ranges(c->cp, k_ds_punct, sizeof(k_ds_punct) / sizeof(k_ds_punct[0]));
}

static size_t s_run(const s_cpt_t *c, size_t p, size_t end, s_class_fn cls)
{
    while (p < end && cls(&c[p]))
        p++;
    return p;
}

/* 's|'t|'re|'ve|'m|'ll|'d, ASCII case folded when ci. */
static size_t s_contraction(const s_cpt_t *c, size_t pos, size_t end, int ci)
{
    if (c[pos].cp != '\'' || pos + 1 >= end)
        return 0;
    uint32_t a = c[pos + 1].cp;
    if (ci && a >= 'A' && a <= 'Z')
        a += 32;
    if (a == 's' || a == 't' || a == 'm' || a == 'd')
        return 2;
    if (pos + 2 >= end)
        return 0;
    uint32_t b = c[pos + 2].cp;
    if (ci && b >= 'A' && b <= 'Z')
        b += 32;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l'))
        return 3;
    return 0;
}

/* \s+(?!\S) followed by a last-resort \s+: a whitespace run leaves its last
 * character to the word after it. */
static size_t s_space_tail(const s_cpt_t *c, size_t pos, size_t end)
{
    size_t q = s_run(c, pos, end, s_is_space);
    if (q == end || q - pos == 1)
        return q - pos;
    return q - pos - 1;
}

/* GPT-2:
 * 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
static size_t s_match_gpt2(const s_cpt_t *c, size_t pos, size_t end)
{
    size_t n = s_contraction(c, pos, end, 0);
    if (n)
        return n;
    /* After an optional literal space, one of three classes runs. */
    size_t p = (c[pos].cp == ' ' && pos + 1 < end) ? pos + 1 : pos;
    static const s_class_fn classes[3] = {s_is_letter, s_is_number, s_is_other};
    for (int k = 0; k < 3; k++) {
        if (classes[k](&c[p]))
            return s_run(c, p, end, classes[k]) - pos;
        if (classes[k](&c[pos]))
            return s_run(c, pos, end, classes[k]) - pos;
    }
    if (s_is_space(&c[pos]))
        return s_space_tail(c, pos, end);
    return 0;
}

/* Llama 3 (max_digits 3) and Qwen2 (max_digits 1):
 * (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *  ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+ */
static size_t s_match_llama3(const s_cpt_t *c, size_t pos, size_t end, int max_digits)
{
    size_t n = s_contraction(c, pos, end, 1);
    if (n)
        return n;
    const s_cpt_t *c0 = &c[pos];
    if (s_is_letter(c0))
        return s_run(c, pos, end, s_is_letter) - pos;
    if (!s_is_newline(c0) && !s_is_number(c0) && pos + 1 < end && s_is_letter(&c[pos + 1]))
        return s_run(c, pos + 1, end, s_is_letter) - pos;
    if (s_is_number(c0)) {
        size_t q = pos;
        while (q < end && q - pos < (size_t)max_digits && s_is_number(&c[q]))
            q++;
        return q - pos;
    }
    size_t p = (c0->cp == ' ' && pos + 1 < end && s_is_other(&c[pos + 1])) ? pos + 1 : pos;
    if (s_is_other(&c[p])) {
        size_t q = s_run(c, p, end, s_is_other);
        return s_run(c, q, end, s_is_newline) - pos;
    }
    if (s_is_space(c0)) {
        /* \s*[\r\n]+ backtracks to the last newline of the whitespace run. */
        size_t q = s_run(c, pos, end, s_is_space);
        for (size_t k = q; k > pos; k--)
            if (s_is_newline(&c[k - 1]))
                return k - pos;
        return s_space_tail(c, pos, end);
    }
    return 0;
}

enum s_pass_kind {
    S_PASS_GPT2,      // the GPT-2 expression
    S_PASS_LLAMA3,    // the Llama 3 / Qwen2 expression (arg = max digits)
    S_PASS_RUN,       // cls+ ; with arg = 1: \s?cls+
    S_PASS_ONE,       // exactly one cls
    S_PASS_DIGITS3,   // [0-9][0-9][0-9]
    S_PASS_SPACE_END, // \s+$
};

typedef struct s_pass {
    enum s_pass_kind kind;
    s_class_fn cls; // for RUN and ONE
    int arg;        // see enum s_pass_kind
} s_pass_t;

static size_t s_match(const s_pass_t *ps, const s_cpt_t *c, size_t pos, size_t end)
{
    switch (ps->kind) {
    case S_PASS_GPT2:
        return s_match_gpt2(c, pos, end);
    case S_PASS_LLAMA3:
        return s_match_llama3(c, pos, end, ps->arg);
    case S_PASS_RUN:
        if (ps->arg && s_is_space(&c[pos]) && pos + 1 < end && ps->cls(&c[pos + 1]))
            return s_run(c, pos + 1, end, ps->cls) - pos;
        return s_run(c, pos, end, ps->cls) - pos;
    case S_PASS_ONE:
        return ps->cls(&c[pos]) ? 1 : 0;
    case S_PASS_DIGITS3:
        if (pos + 3 <= end && s_is_ascii_digit(&c[pos]) && s_is_ascii_digit(&c[pos + 1]) &&
            s_is_ascii_digit(&c[pos + 2]))
            return 3;
        return 0;
    case S_PASS_SPACE_END: {
        size_t q = s_run(c, pos, end, s_is_space);
        return (q > pos && q == end) ? q - pos : 0;
    }
    }
    return 0;
}

#define S_MAX_PASSES 6

struct s_pre {
    const char *name;              // canonical name
    s_pass_t passes[S_MAX_PASSES]; // applied in order
    int n_passes;
    int ignore_merges; // whole-token words skip merging
    int add_bos;       // default of add_bos_token
};

/* [\p{P}\$\+<=>\^~\|]+ | GPT-2 | \p{N}+ | [0-9][0-9][0-9] */
static const struct s_pre k_pre_default = {
    .name = "default",
    .passes = {{S_PASS_RUN, s_is_punct_default, 0},
               {S_PASS_GPT2, NULL, 0},
               {S_PASS_RUN, s_is_number, 0},
               {S_PASS_DIGITS3, NULL, 0}},
    .n_passes = 4,
};
/* GPT-2 */
static const struct s_pre k_pre_gpt2 = {
    .name = "gpt-2",
    .passes = {{S_PASS_GPT2, NULL, 0}},
    .n_passes = 1,
};
/* \p{N} | GPT-2 (StarCoder, SmolLM, Refact, Command-R: every digit alone) */
static const struct s_pre k_pre_starcoder = {
    .name = "starcoder",
    .passes = {{S_PASS_ONE, s_is_number, 0}, {S_PASS_GPT2, NULL, 0}},
    .n_passes = 2,
};
static const struct s_pre k_pre_llama3 = {
    .name = "llama3",
    .passes = {{S_PASS_LLAMA3, NULL, 3}},
    .n_passes = 1,
    .ignore_merges = 1,
    .add_bos = 1,
};
static const struct s_pre k_pre_qwen2 = {
    .name = "qwen2",
    .passes = {{S_PASS_LLAMA3, NULL, 1}},
    .n_passes = 1,
};
/* [\p{P}\$\+<=>\^~\|`]+ | GPT-2 | [0-9][0-9][0-9] */
static const struct s_pre k_pre_falcon = {
    .name = "falcon",
    .passes = {{S_PASS_RUN, s_is_punct_falcon, 0},
               {S_PASS_GPT2, NULL, 0},
               {S_PASS_DIGITS3, NULL, 0}},
    .n_passes = 3,
};
/* [\r\n] | \s?[Latin...]+ | \s?[!-/:-~...]+ | \s+$ | [CJK]+ | \p{N}+ */
static const struct s_pre k_pre_deepseek_llm = {
    .name = "deepseek-llm",
    .passes = {{S_PASS_ONE, s_is_newline, 0},
               {S_PASS_RUN, s_is_ds_latin, 1},
               {S_PASS_RUN, s_is_ds_punct, 1},
               {S_PASS_SPACE_END, NULL, 0},
               {S_PASS_RUN, s_is_ds_cjk, 0},
               {S_PASS_RUN, s_is_number, 0}},
    .n_passes = 6,
};
/* [\r\n] | \s?\p{L}+ | \s?\p{P}+ | [CJK]+ | \p{N} */
static const struct s_pre k_pre_deepseek_coder = {
    .name = "deepseek-coder",
    .passes = {{S_PASS_ONE, s_is_newline, 0},
               {S_PASS_RUN, s_is_letter, 1},
               {S_PASS_RUN, s_is_punct, 1},
               {S_PASS_RUN, s_is_ds_cjk, 0},
               {S_PASS_ONE, s_is_number, 0}},
    .n_passes = 5,
};

/* tokenizer.ggml.pre values and the pre-tokenizer each one means. */
static const struct {
    const char *name;
    const struct s_pre *pre;
} k_pre_names[] = {
    {"default", &k_pre_default},
    {"gpt-2", &k_pre_gpt2},
    {"phi-2", &k_pre_gpt2},
    {"mpt", &k_pre_gpt2},
    {"olmo", &k_pre_gpt2},
    {"jais", &k_pre_gpt2},
    {"roberta-bpe", &k_pre_gpt2},
    {"starcoder", &k_pre_starcoder},
    {"smollm", &k_pre_starcoder},
    {"refact", &k_pre_starcoder},
    {"command-r", &k_pre_starcoder},
    {"codeshell", &k_pre_starcoder},
    {"exaone", &k_pre_starcoder},
    {"minerva-7b", &k_pre_starcoder},
    {"llama3", &k_pre_llama3},
    {"llama-v3", &k_pre_llama3},
    {"llama-bpe", &k_pre_llama3},
    {"falcon3", &k_pre_llama3},
    {"dbrx", &k_pre_llama3},
    {"smaug-bpe", &k_pre_llama3},
    {"qwen2", &k_pre_qwen2},
    {"deepseek-r1-qwen", &k_pre_qwen2},
    {"stablelm2", &k_pre_qwen2},
    {"falcon", &k_pre_falcon},
    {"deepseek-llm", &k_pre_deepseek_llm},
    {"deepseek-coder", &k_pre_deepseek_coder},
};

/* Per-call scratch space, freed at the end of sw_tokenize(). */
typedef struct s_work {
    s_cpt_t *cpt; // (n_cpt) code points of the current fragment
    size_t n_cpt, cap_cpt;
    size_t *seg; // (n_seg) piece boundaries as [start, end) code point index pairs, flattened
    size_t n_seg, cap_seg;
    size_t *seg2; // second buffer for the next pass
    size_t cap_seg2;
    char *buf; // byte scratch (SPM text, byte-level words)
    size_t cap_buf;
    struct s_sym *sym; // merge symbols
    size_t cap_sym;
    struct s_heap_ent *heap; // merge candidates
    size_t n_heap, cap_heap;
} s_work_t;

/* Decodes text[0..len) into w->cpt. */
static int s_decode(s_work_t *w, const char *text, size_t len)
{
    if (s_reserve((void **)&w->cpt, &w->cap_cpt, len + 1, sizeof(*w->cpt)) != 0)
        return -1;
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        size_t k;
        uint32_t cp = sw_utf8_decode(text + i, len - i, &k);
        w->cpt[n].cp = cp;
        w->cpt[n].off = (uint32_t)i;
        w->cpt[n].len = (uint8_t)k;
        w->cpt[n].fl = (uint8_t)sw_unicode_flags(cp);
        n++;
        i += k;
    }
    w->n_cpt = n;
    return 0;
}

/* Runs the pre-tokenizer over w->cpt; leaves the pieces in w->seg. */
static int s_pretokenize(s_work_t *w, const struct s_pre *pre)
{
    if (s_reserve((void **)&w->seg, &w->cap_seg, 2, sizeof(size_t)) != 0)
        return -1;
    w->n_seg = 0;
    if (w->n_cpt == 0)
        return 0;
    w->seg[0] = 0;
    w->seg[1] = w->n_cpt;
    w->n_seg = 1;
    for (int k = 0; k < pre->n_passes; k++) {
        const s_pass_t *ps = &pre->passes[k];
        size_t n_out = 0;
        for (size_t s = 0; s < w->n_seg; s++) {
            size_t start = w->seg[2 * s], end = w->seg[2 * s + 1];
            size_t gap = start, pos = start;
            /* A piece splits into at most (end - start) pieces. */
            if (s_reserve((void **)&w->seg2, &w->cap_seg2, 2 * (n_out + (end - start) + 1),
                          sizeof(size_t)) != 0)
                return -1;
            while (pos < end) {
                size_t m = s_match(ps, w->cpt, pos, end);
                if (m == 0) {
                    pos++;
                    continue;
                }
                if (gap < pos) {
                    w->seg2[2 * n_out] = gap;
                    w->seg2[2 * n_out + 1] = pos;
                    n_out++;
                }
                w->seg2[2 * n_out] = pos;
                w->seg2[2 * n_out + 1] = pos + m;
                n_out++;
                pos += m;
                gap = pos;
            }
            if (gap < end) {
                w->seg2[2 * n_out] = gap;
                w->seg2[2 * n_out + 1] = end;
                n_out++;
            }
        }
        size_t *tmp = w->seg;
        size_t tcap = w->cap_seg;
        w->seg = w->seg2;
        w->cap_seg = w->cap_seg2;
        w->seg2 = tmp;
        w->cap_seg2 = tcap;
        w->n_seg = n_out;
    }
    return 0;
}

/* ---- merge loops -------------------------------------------------------- */

typedef struct s_sym {
    int32_t id;   // BPE: token id of the symbol (-1 if none); SPM: unused
    uint32_t off; // first byte in the word / text
    uint32_t len; // bytes; 0 once merged into its left neighbour
    int32_t prev; // index of the previous live symbol, -1 at the start
    int32_t next; // index of the next live symbol, -1 at the end
} s_sym_t;

typedef struct s_heap_ent {
    double key;    // BPE: merge rank; SPM: -score (smaller pops first)
    int32_t left;  // left symbol index (ties: smaller pops first)
    int32_t right; // right symbol index
    int32_t a, b;  // BPE: left/right ids when queued; SPM: a = merged byte length
    int32_t res;   // BPE: id of the merged token
} s_heap_ent_t;

static int s_heap_less(const s_heap_ent_t *x, const s_heap_ent_t *y)
{
    return x->key < y->key || (x->key == y->key && x->left < y->left);
}

static int s_heap_push(s_work_t *w, const s_heap_ent_t *e)
{
    if (s_reserve((void **)&w->heap, &w->cap_heap, w->n_heap + 1, sizeof(*w->heap)) != 0)
        return -1;
    size_t i = w->n_heap++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!s_heap_less(e, &w->heap[p]))
            break;
        w->heap[i] = w->heap[p];
        i = p;
    }
    w->heap[i] = *e;
    return 0;
}

static s_heap_ent_t s_heap_pop(s_work_t *w)
{
    s_heap_ent_t top = w->heap[0];
    s_heap_ent_t last = w->heap[--w->n_heap];
    size_t i = 0, n = w->n_heap;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const s_heap_ent_t *best = &last;
        if (l < n && s_heap_less(&w->heap[l], best)) {
            m = l;
            best = &w->heap[l];
        }
        if (r < n && s_heap_less(&w->heap[r], best))
            m = r;
        if (m == i)
            break;
        w->heap[i] = w->heap[m];
        i = m;
    }
    if (n > 0)
        w->heap[i] = last;
    return top;
}

static int s_bpe_queue(const sw_tokenizer_t *t, s_work_t *w, int32_t left, int32_t right)
{
    if (left < 0 || right < 0)
        return 0;
    const s_merge_t *m = s_merge_get(t, w->sym[left].id, w->sym[right].id);
    if (!m)
        return 0;
    s_heap_ent_t e = {(double)m->rank, left, right, w->sym[left].id, w->sym[right].id, m->result};
    return s_heap_push(w, &e);
}

/* Byte-level BPE of one pre-tokenized word (raw bytes). */
static int s_bpe_word(const sw_tokenizer_t *t, s_work_t *w, const char *word, size_t len,
                      s_ivec_t *out)
{
    if (t->ignore_merges) {
        /* Llama 3: a word that is itself a token is emitted whole. */
        if (s_reserve((void **)&w->buf, &w->cap_buf, 2 * len + 1, 1) != 0)
            return -1;
        size_t n = 0;
        for (size_t i = 0; i < len; i++)
            n += sw_utf8_encode(t->byte_cp[(unsigned char)word[i]], w->buf + n);
        int32_t id = s_strmap_get(t, &t->vocab, w->buf, n);
        if (id >= 0)
            return s_ivec_push(out, id);
    }
    if (s_reserve((void **)&w->sym, &w->cap_sym, len, sizeof(*w->sym)) != 0)
        return -1;
    for (size_t i = 0; i < len; i++) {
        w->sym[i].id = t->byte_tok[(unsigned char)word[i]];
        w->sym[i].off = (uint32_t)i;
        w->sym[i].len = 1;
        w->sym[i].prev = (int32_t)i - 1;
        w->sym[i].next = i + 1 < len ? (int32_t)i + 1 : -1;
    }
    w->n_heap = 0;
    for (size_t i = 1; i < len; i++)
        if (s_bpe_queue(t, w, (int32_t)i - 1, (int32_t)i) != 0)
            return -1;
    while (w->n_heap > 0) {
        s_heap_ent_t e = s_heap_pop(w);
        s_sym_t *l = &w->sym[e.left], *r = &w->sym[e.right];
        /* Stale when either side changed since the pair was queued. */
        if (l->len == 0 || r->len == 0 || l->next != e.right || l->id != e.a || r->id != e.b)
            continue;
        l->id = e.res;
        l->len += r->len;
        r->len = 0;
        l->next = r->next;
        if (r->next >= 0)
            w->sym[r->next].prev = e.left;
        if (s_bpe_queue(t, w, l->prev, e.left) != 0 || s_bpe_queue(t, w, e.left, l->next) != 0)
            return -1;
    }
    for (int32_t i = 0; i >= 0 && len > 0; i = w->sym[i].next) {
        /* A byte whose alphabet character is missing from the vocabulary has
         * no token; the reference tokenizers drop it too. */
        if (w->sym[i].id >= 0 && s_ivec_push(out, w->sym[i].id) != 0)
            return -1;
    }
    return 0;
}

/* 1 when out, grown by the tokens at least len more bytes need, passes max. */
static int s_past_max(const sw_tokenizer_t *t, const s_ivec_t *out, size_t len, size_t max)
{
    return out->n > max || (len + t->max_tok_bytes - 1) / t->max_tok_bytes > max - out->n;
}

/* Byte-level BPE of one raw-text fragment; S_TOO_LONG as soon as out passes max tokens. */
static int s_bpe_fragment(const sw_tokenizer_t *t, s_work_t *w, const char *text, size_t len,
                          size_t max, s_ivec_t *out)
{
    if (s_decode(w, text, len) != 0 || s_pretokenize(w, t->pre) != 0)
        return -1;
    for (size_t s = 0; s < w->n_seg; s++) {
        size_t a = w->seg[2 * s], b = w->seg[2 * s + 1];
        size_t off = w->cpt[a].off;
        size_t end = w->cpt[b - 1].off + w->cpt[b - 1].len;
        if (s_past_max(t, out, end - off, max))
            return S_TOO_LONG;
        if (s_bpe_word(t, w, text + off, end - off, out) != 0)
            return -1;
    }
    return out->n > max ? S_TOO_LONG : 0;
}

static int s_spm_queue(const sw_tokenizer_t *t, s_work_t *w, int32_t left, int32_t right)
{
    if (left < 0 || right < 0)
        return 0;
    const s_sym_t *l = &w->sym[left], *r = &w->sym[right];
    int32_t id = s_strmap_get(t, &t->vocab, w->buf + l->off, l->len + r->len);
    if (id < 0)
        return 0;
    s_heap_ent_t e = {-(double)t->score[id], left, right, (int32_t)(l->len + r->len), 0, id};
    return s_heap_push(w, &e);
}

/* SentencePiece BPE of one raw-text fragment. */
static int s_spm_fragment(const sw_tokenizer_t *t, s_work_t *w, const char *text, size_t len,
                          int prefix_space, s_ivec_t *out)
{
    /* Escape: optional leading space, every ' ' becomes U+2581 (3 bytes). */
    if (s_reserve((void **)&w->buf, &w->cap_buf, 3 * (len + 1), 1) != 0)
        return -1;
    size_t n = 0;
    for (size_t i = 0; i < len + (prefix_space ? 1 : 0); i++) {
        char ch = prefix_space ? (i == 0 ? ' ' : text[i - 1]) : text[i];
        if (ch == ' ') {
            memcpy(w->buf + n, "\xe2\x96\x81", 3);
            n += 3;
        } else {
            w->buf[n++] = ch;
        }
    }
    if (n == 0)
        return 0;
    if (s_reserve((void **)&w->sym, &w->cap_sym, n, sizeof(*w->sym)) != 0)
        return -1;
    int32_t n_sym = 0;
    for (size_t i = 0; i < n;) {
        /* Symbols are UTF-8 characters; a bad byte is a symbol of its own. */
        size_t k;
        (void)sw_utf8_decode(w->buf + i, n - i, &k);
        w->sym[n_sym].off = (uint32_t)i;
        w->sym[n_sym].len = (uint32_t)k;
        w->sym[n_sym].prev = n_sym - 1;
        w->sym[n_sym].next = i + k < n ? n_sym + 1 : -1;
        n_sym++;
        i += k;
    }
    w->n_heap = 0;
    for (int32_t i = 1; i < n_sym; i++)
        if (s_spm_queue(t, w, i - 1, i) != 0)
            return -1;
    while (w->n_heap > 0) {
        s_heap_ent_t e = s_heap_pop(w);
        s_sym_t *l = &w->sym[e.left], *r = &w->sym[e.right];
        if (l->len == 0 || r->len == 0 || l->next != e.right || l->len + r->len != (uint32_t)e.a)
            continue;
        l->len += r->len;
        r->len = 0;
        l->next = r->next;
        if (r->next >= 0)
            w->sym[r->next].prev = e.left;
        if (s_spm_queue(t, w, l->prev, e.left) != 0 || s_spm_queue(t, w, e.left, l->next) != 0)
            return -1;
    }
    for (int32_t i = 0; i >= 0; i = w->sym[i].next) {
        const s_sym_t *s = &w->sym[i];
        int32_t id = s_strmap_get(t, &t->vocab, w->buf + s->off, s->len);
        if (id >= 0) {
            if (s_ivec_push(out, id) != 0)
                return -1;
            continue;
        }
        /* Byte fallback: one <0xXX> token per byte, else unk. */
        for (uint32_t j = 0; j < s->len; j++) {
            int32_t b = t->byte_tok[(unsigned char)w->buf[s->off + j]];
            if (b < 0)
                b = t->unk;
            if (b >= 0 && s_ivec_push(out, b) != 0)
                return -1;
        }
    }
    return 0;
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
    if (n == 0 || n > S_MAX_VOCAB) {
        sw_errf(err, err_len, "tokenizer: vocabulary of %llu tokens (allowed 1..%d)",
                (unsigned long long)n, S_MAX_VOCAB);
        return -1;
    }
    t->n_vocab = (int32_t)n;
    uint64_t total = 0;
    for (uint64_t i = 0; i < n; i++) {
        sw_gguf_str_t s;
        if (sw_gguf_arr_str(g, "tokenizer.ggml.tokens", i, &s) != 0 || s.len > S_MAX_TOKEN_BYTES) {
            sw_errf(err, err_len, "tokenizer: token %llu is unreadable or longer than %d bytes",
                    (unsigned long long)i, S_MAX_TOKEN_BYTES);
            return -1;
        }
        total += s.len;
    }
    if (total > S_MAX_TEXT_BYTES) {
        sw_errf(err, err_len, "tokenizer: token strings total %llu bytes (limit %llu)",
                (unsigned long long)total, (unsigned long long)S_MAX_TEXT_BYTES);
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
    char *cat = malloc(2 * S_MAX_TOKEN_BYTES + 1);
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
        if (!sp || s.len > 2 * S_MAX_TOKEN_BYTES) {
            free(cat);
            sw_errf(err, err_len, "tokenizer: merge %llu is not \"left right\"",
                    (unsigned long long)i);
            return -1;
        }
        size_t ln = (size_t)(sp - s.ptr), rn = s.len - ln - 1;
        int32_t a = s_strmap_get(t, &t->vocab, s.ptr, ln);
        int32_t b = s_strmap_get(t, &t->vocab, sp + 1, rn);
        memcpy(cat, s.ptr, ln);
        memcpy(cat + ln, sp + 1, rn);
        int32_t r = s_strmap_get(t, &t->vocab, cat, ln + rn);
        if (a < 0 || b < 0 || r < 0) {
            skipped++;
            continue;
        }
        uint64_t key = (((uint64_t)(uint32_t)a << 32) | (uint32_t)b) + 1;
        uint32_t k = s_merge_slot(key, cap);
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
        const char *s = s_text(t, id, &n);
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
            if (t->model == S_MODEL_BPE && cp < 512 && t->cp_byte[cp] >= 0) {
                t->piece[o++] = (char)t->cp_byte[cp];
            } else if (t->model == S_MODEL_SPM && cp == 0x2581) {
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
    if (s_strmap_init(&t->special, n_special) != 0)
        return -1;
    memset(t->special_first, 0, sizeof(t->special_first));
    size_t cap = 0;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        size_t n;
        const char *s = s_text(t, id, &n);
        if (!s_is_special_type(t->type[id]) || n == 0)
            continue;
        s_strmap_put(t, &t->special, id);
        unsigned char b = (unsigned char)s[0];
        t->special_first[b >> 3] |= (uint8_t)(1u << (b & 7));
        size_t j = 0;
        while (j < t->n_special_len && t->special_len[j] > n)
            j++;
        if (j < t->n_special_len && t->special_len[j] == n)
            continue;
        if (s_reserve((void **)&t->special_len, &cap, t->n_special_len + 1,
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
    return s_strmap_get(t, &t->vocab, s, strlen(s));
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
        t->model = S_MODEL_BPE;
    } else if (sw_gguf_str_eq(model, "llama")) {
        t->model = S_MODEL_SPM;
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
    if (s_strmap_init(&t->vocab, (size_t)t->n_vocab) != 0) {
        sw_errf(err, err_len, "tokenizer: out of memory for the vocabulary map");
        goto fail;
    }
    for (int32_t id = 0; id < t->n_vocab; id++)
        s_strmap_put(t, &t->vocab, id);
    s_alphabet_init(t);

    if (t->model == S_MODEL_BPE) {
        sw_gguf_str_t pre;
        t->pre = &k_pre_default;
        snprintf(t->pre_name, sizeof(t->pre_name), "default");
        if (sw_gguf_get_str(g, "tokenizer.ggml.pre", &pre) == 0) {
            t->pre = NULL;
            for (size_t i = 0; i < sizeof(k_pre_names) / sizeof(k_pre_names[0]); i++) {
                if (sw_gguf_str_eq(pre, k_pre_names[i].name)) {
                    t->pre = k_pre_names[i].pre;
                    snprintf(t->pre_name, sizeof(t->pre_name), "%s", k_pre_names[i].name);
                }
            }
            if (!t->pre) {
                sw_errf(err, err_len, "tokenizer: pre-tokenizer \"%.*s\" is not supported",
                        (int)(pre.len > 64 ? 64 : pre.len), pre.ptr);
                goto fail;
            }
        } else {
            SW_WARN("tokenizer: tokenizer.ggml.pre is missing; using the default pre-tokenizer");
        }
        t->ignore_merges = t->pre->ignore_merges;
        t->add_bos = t->pre->add_bos;
        if (s_load_merges(t, g, err, err_len) != 0)
            goto fail;
        for (int b = 0; b < 256; b++) {
            char u[4];
            size_t n = sw_utf8_encode(t->byte_cp[b], u);
            t->byte_tok[b] = s_strmap_get(t, &t->vocab, u, n);
        }
    } else {
        snprintf(t->pre_name, sizeof(t->pre_name), "spm");
        for (int b = 0; b < 256; b++) {
            char u[8];
            snprintf(u, sizeof(u), "<0x%02X>", b);
            t->byte_tok[b] = s_strmap_get(t, &t->vocab, u, 6);
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
        int32_t id = s_strmap_get(t, &t->special, text + pos, l);
        if (id >= 0 && (parse_special || t->type[id] == SW_TOKEN_USER_DEFINED)) {
            *n = l;
            return id;
        }
    }
    return -1;
}

static void s_work_free(s_work_t *w)
{
    free(w->cpt);
    free(w->seg);
    free(w->seg2);
    free(w->buf);
    free(w->sym);
    free(w->heap);
}

/* Tokenizes into out; -1 on allocation failure, S_TOO_LONG once out passes max tokens
 * (checked before each word or fragment, so an overlong text costs about max tokens' work). */
static int s_tokenize_vec(const sw_tokenizer_t *t, const char *text, size_t len, int add_special,
                          int parse_special, size_t max, s_ivec_t *out)
{
    if (len > S_MAX_INPUT_BYTES) {
        SW_ERR("tokenizer: input of %zu bytes exceeds the %llu byte limit", len,
               (unsigned long long)S_MAX_INPUT_BYTES);
        return -1;
    }
    if (s_past_max(t, out, len, max + 2)) /* BOS and EOS cover no text */
        return S_TOO_LONG;
    s_work_t w;
    memset(&w, 0, sizeof(w));
    int rc = 0;
    if (add_special && t->add_bos && t->bos >= 0)
        rc |= s_ivec_push(out, t->bos);
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
            if (t->model == S_MODEL_BPE)
                rc = s_bpe_fragment(t, &w, text + frag, pos - frag, max, out);
            else if (s_past_max(t, out, pos - frag, max))
                rc = S_TOO_LONG;
            else
                rc = s_spm_fragment(t, &w, text + frag, pos - frag,
                                    t->add_space_prefix && prev_special, out);
            prev_special = 0;
        }
        if (sid < 0 || rc != 0)
            break;
        rc = s_ivec_push(out, sid);
        prev_special = 1;
        pos += n;
        frag = pos;
    }
    if (rc == 0 && add_special && t->add_eos && t->eos >= 0)
        rc = s_ivec_push(out, t->eos);
    if (rc == 0 && out->n > max)
        rc = S_TOO_LONG;
    s_work_free(&w);
    return rc;
}

int sw_tokenize(const sw_tokenizer_t *t, const char *text, size_t len, int add_special,
                int parse_special, int32_t *out, int max_out, int *n_out)
{
    s_ivec_t v = {0};
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
    s_ivec_t v = {0};
    *ids = NULL;
    *n_out = 0;
    if (max_tokens < 0 || max_tokens >= INT_MAX)
        max_tokens = INT_MAX - 1;
    int rc = s_tokenize_vec(t, text, len, add_special, parse_special, (size_t)max_tokens, &v);
    if (rc == 0 && s_ivec_push(&v, -1) != 0) // the sentinel makes an empty result non-NULL
        rc = -1;
    if (rc != 0) {
        free(v.v);
        *n_out = rc == S_TOO_LONG ? max_tokens + 1 : 0;
        return rc == S_TOO_LONG ? SW_TOK_ERR_TOO_LONG : SW_TOK_ERR_NOMEM;
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
    return t->model == S_MODEL_BPE ? "gpt2" : "llama";
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
    return s_text(t, id, len);
}

int32_t sw_tokenizer_find(const sw_tokenizer_t *t, const char *text, size_t len)
{
    return s_strmap_get(t, &t->vocab, text, len);
}

/* Control and unknown tokens are hidden unless rendering specials. */
static int s_hidden(const sw_tokenizer_t *t, int32_t id, int render_special)
{
    int type = t->type[id];
    return !render_special && (type == SW_TOKEN_CONTROL || type == SW_TOKEN_UNKNOWN);
}

int sw_token_to_piece(const sw_tokenizer_t *t, int32_t id, int render_special, char *buf,
                      size_t len)
{
    if (id < 0 || id >= t->n_vocab)
        return -1;
    if (s_hidden(t, id, render_special))
        return 0;
    size_t n = (size_t)(t->piece_off[id + 1] - t->piece_off[id]);
    if (n > INT_MAX)
        return -1;
    if (len > 0)
        memcpy(buf, t->piece + t->piece_off[id], n < len ? n : len);
    return (int)n;
}

/* ---- streaming detokenizer ---------------------------------------------- */

struct sw_detok {
    const sw_tokenizer_t *t; // borrowed
    int render_special;      // emit control/unknown token text
    int strip_space;         // SPM: drop one leading space of the next text piece
    unsigned char hold[4];   // start of a UTF-8 sequence still missing bytes
    size_t n_hold;           // bytes in hold (0..3)
    char *out;               // output of the last call
    size_t cap_out;          // allocated bytes of out
};

sw_detok_t *sw_detok_new(const sw_tokenizer_t *t, int render_special)
{
    sw_detok_t *d = calloc(1, sizeof(*d));
    if (!d)
        return NULL;
    d->t = t;
    d->render_special = render_special;
    d->strip_space = t->model == S_MODEL_SPM && t->add_space_prefix;
    return d;
}

void sw_detok_free(sw_detok_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    free((*self_p)->out);
    free(*self_p);
    *self_p = NULL;
}

/* Whether s[0..n) (n >= 1) is the start of a valid UTF-8 sequence that more
 * bytes could still complete. */
static int s_utf8_incomplete(const unsigned char *s, size_t n)
{
    size_t need = sw_utf8_seq_len(s[0]);
    if (need == 1 || n >= need)
        return 0;
    if (n >= 2) {
        unsigned char lo = 0x80, hi = 0xBF;
        if (s[0] == 0xE0)
            lo = 0xA0;
        else if (s[0] == 0xED)
            hi = 0x9F;
        else if (s[0] == 0xF0)
            lo = 0x90;
        else if (s[0] == 0xF4)
            hi = 0x8F;
        if (s[1] < lo || s[1] > hi)
            return 0;
    }
    for (size_t i = 2; i < n; i++)
        if ((s[i] & 0xC0) != 0x80)
            return 0;
    return 1;
}

/* Appends hold + piece to d->out as valid UTF-8, keeping an incomplete tail in
 * hold unless final. */
static int s_detok_emit(sw_detok_t *d, const char *piece, size_t n, int final, size_t *out_len)
{
    size_t total = d->n_hold + n;
    /* Every input byte yields at most 3 output bytes (U+FFFD). */
    if (total > (SIZE_MAX - 1) / 3 ||
        s_reserve((void **)&d->out, &d->cap_out, 3 * total + 1, 1) != 0)
        return -1;
    unsigned char *in = malloc(total ? total : 1);
    if (!in)
        return -1;
    memcpy(in, d->hold, d->n_hold);
    if (n)
        memcpy(in + d->n_hold, piece, n);
    d->n_hold = 0;
    size_t o = 0;
    for (size_t i = 0; i < total;) {
        size_t k;
        uint32_t cp = sw_utf8_decode((const char *)in + i, total - i, &k);
        if (cp == SW_UNICODE_REPLACEMENT && k == 1) {
            if (!final && s_utf8_incomplete(in + i, total - i)) {
                memcpy(d->hold, in + i, total - i);
                d->n_hold = total - i;
                break;
            }
            o += sw_utf8_encode(SW_UNICODE_REPLACEMENT, d->out + o);
            i++;
            continue;
        }
        memcpy(d->out + o, in + i, k);
        o += k;
        i += k;
    }
    free(in);
    *out_len = o;
    return 0;
}

int sw_detok_push(sw_detok_t *d, int32_t id, const char **text, size_t *len)
{
    const sw_tokenizer_t *t = d->t;
    *text = "";
    *len = 0;
    if (id < 0 || id >= t->n_vocab)
        return -1;
    int type = t->type[id];
    if (type == SW_TOKEN_CONTROL || type == SW_TOKEN_UNKNOWN) {
        /* A special token ends any pending character first. */
        if (!s_hidden(t, id, d->render_special)) {
            size_t n = (size_t)(t->piece_off[id + 1] - t->piece_off[id]);
            if (s_detok_emit(d, t->piece + t->piece_off[id], n, 1, len) != 0)
                return -1;
            *text = d->out;
        }
        d->strip_space = t->model == S_MODEL_SPM && t->add_space_prefix;
        return 0;
    }
    const char *p = t->piece + t->piece_off[id];
    size_t n = (size_t)(t->piece_off[id + 1] - t->piece_off[id]);
    if (d->strip_space && n > 0) {
        if (p[0] == ' ') {
            p++;
            n--;
        }
        d->strip_space = 0;
    }
    if (s_detok_emit(d, p, n, 0, len) != 0)
        return -1;
    *text = d->out;
    return 0;
}

int sw_detok_flush(sw_detok_t *d, const char **text, size_t *len)
{
    *text = "";
    *len = 0;
    if (s_detok_emit(d, NULL, 0, 1, len) != 0)
        return -1;
    *text = d->out;
    d->strip_space = d->t->model == S_MODEL_SPM && d->t->add_space_prefix;
    return 0;
}
