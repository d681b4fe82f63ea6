/*
 * tokenizer_pre.c - the pre-tokenizers of the byte-level BPE models: each
 * model's pre-tokenizer is a sequence of regular expressions, and every
 * expression shape the supported models use has a hand-written matcher here
 * (tokenizer_impl.h). Also the UTF-8 decoding of a fragment into code points.
 */
#include <string.h>

#include "tokenizer_impl.h"
#include "unicode.h"

/* ---- pre-tokenizers -----------------------------------------------------
 * Each model's pre-tokenizer is a sequence of regular expressions applied in
 * turn; each splits every current piece into its matches and the text between
 * them (both kept). Every expression shape used by the supported models has a
 * matcher below: it returns the length of the match that starts exactly at
 * pos within [pos, end), or 0 when the expression does not match there. */

typedef int (*s_class_fn)(const tok_cpt_t *c);

static int s_is_letter(const tok_cpt_t *c)
{
    return (c->fl & SW_UCAT_LETTER) != 0;
}

static int s_is_number(const tok_cpt_t *c)
{
    return (c->fl & SW_UCAT_NUMBER) != 0;
}

static int s_is_space(const tok_cpt_t *c)
{
    return (c->fl & SW_UCAT_SPACE) != 0;
}

static int s_is_punct(const tok_cpt_t *c)
{
    return (c->fl & SW_UCAT_PUNCT) != 0;
}

/* [^\s\p{L}\p{N}] */
static int s_is_other(const tok_cpt_t *c)
{
    return (c->fl & (SW_UCAT_SPACE | SW_UCAT_LETTER | SW_UCAT_NUMBER)) == 0;
}

static int s_is_newline(const tok_cpt_t *c)
{
    return c->cp == '\r' || c->cp == '\n';
}

static int s_is_ascii_digit(const tok_cpt_t *c)
{
    return c->cp >= '0' && c->cp <= '9';
}

/* [\p{P}\$\+<=>\^~\|] (the "default" BPE pre-tokenizer) */
static int s_is_punct_default(const tok_cpt_t *c)
{
    return s_is_punct(c) || (c->cp < 128 && strchr("$+<=>^~|", (int)c->cp) && c->cp != 0);
}

/* [\p{P}\$\+<=>\^~\|`] (Falcon) */
static int s_is_punct_falcon(const tok_cpt_t *c)
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
static int s_is_ds_cjk(const tok_cpt_t *c)
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

static int s_is_ds_latin(const tok_cpt_t *c)
{
    return s_in_ranges(c->cp, k_ds_latin, sizeof(k_ds_latin) / sizeof(k_ds_latin[0]));
}

/* [!-/:-~！-／：-～‘-‟　-。] (DeepSeek-LLM punctuation) */
static const uint32_t k_ds_punct[][2] = {
    {0x21, 0x2F},     {0x3A, 0x7E},     {0x2018, 0x201F},
    {0x3000, 0x3002}, {0xFF01, 0xFF0F}, {0xFF1A, 0xFF5E},
};

static int s_is_ds_punct(const tok_cpt_t *c)
{
    return s_in_ranges(c->cp, k_ds_punct, sizeof(k_ds_punct) / sizeof(k_ds_punct[0]));
}

static size_t s_run(const tok_cpt_t *c, size_t p, size_t end, s_class_fn cls)
{
    while (p < end && cls(&c[p]))
        p++;
    return p;
}

/* 's|'t|'re|'ve|'m|'ll|'d, ASCII case folded when ci. */
static size_t s_contraction(const tok_cpt_t *c, size_t pos, size_t end, int ci)
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
static size_t s_space_tail(const tok_cpt_t *c, size_t pos, size_t end)
{
    size_t q = s_run(c, pos, end, s_is_space);
    if (q == end || q - pos == 1)
        return q - pos;
    return q - pos - 1;
}

/* GPT-2:
 * 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
static size_t s_match_gpt2(const tok_cpt_t *c, size_t pos, size_t end)
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
static size_t s_match_llama3(const tok_cpt_t *c, size_t pos, size_t end, int max_digits)
{
    size_t n = s_contraction(c, pos, end, 1);
    if (n)
        return n;
    const tok_cpt_t *c0 = &c[pos];
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

static size_t s_match(const s_pass_t *ps, const tok_cpt_t *c, size_t pos, size_t end)
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

struct tok_pre {
    const char *name;              // canonical name
    s_pass_t passes[S_MAX_PASSES]; // applied in order
    int n_passes;
    int ignore_merges; // whole-token words skip merging
    int add_bos;       // default of add_bos_token
};

/* [\p{P}\$\+<=>\^~\|]+ | GPT-2 | \p{N}+ | [0-9][0-9][0-9] */
static const struct tok_pre k_pre_default = {
    .name = "default",
    .passes = {{S_PASS_RUN, s_is_punct_default, 0},
               {S_PASS_GPT2, NULL, 0},
               {S_PASS_RUN, s_is_number, 0},
               {S_PASS_DIGITS3, NULL, 0}},
    .n_passes = 4,
};
/* GPT-2 */
static const struct tok_pre k_pre_gpt2 = {
    .name = "gpt-2",
    .passes = {{S_PASS_GPT2, NULL, 0}},
    .n_passes = 1,
};
/* \p{N} | GPT-2 (StarCoder, SmolLM, Refact, Command-R: every digit alone) */
static const struct tok_pre k_pre_starcoder = {
    .name = "starcoder",
    .passes = {{S_PASS_ONE, s_is_number, 0}, {S_PASS_GPT2, NULL, 0}},
    .n_passes = 2,
};
static const struct tok_pre k_pre_llama3 = {
    .name = "llama3",
    .passes = {{S_PASS_LLAMA3, NULL, 3}},
    .n_passes = 1,
    .ignore_merges = 1,
    .add_bos = 1,
};
static const struct tok_pre k_pre_qwen2 = {
    .name = "qwen2",
    .passes = {{S_PASS_LLAMA3, NULL, 1}},
    .n_passes = 1,
};
/* [\p{P}\$\+<=>\^~\|`]+ | GPT-2 | [0-9][0-9][0-9] */
static const struct tok_pre k_pre_falcon = {
    .name = "falcon",
    .passes = {{S_PASS_RUN, s_is_punct_falcon, 0},
               {S_PASS_GPT2, NULL, 0},
               {S_PASS_DIGITS3, NULL, 0}},
    .n_passes = 3,
};
/* [\r\n] | \s?[Latin...]+ | \s?[!-/:-~...]+ | \s+$ | [CJK]+ | \p{N}+ */
static const struct tok_pre k_pre_deepseek_llm = {
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
static const struct tok_pre k_pre_deepseek_coder = {
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
    const struct tok_pre *pre;
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

int tok_decode(tok_work_t *w, const char *text, size_t len)
{
    if (tok_reserve((void **)&w->cpt, &w->cap_cpt, len + 1, sizeof(*w->cpt)) != 0)
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

int tok_pretokenize(tok_work_t *w, const struct tok_pre *pre)
{
    if (tok_reserve((void **)&w->seg, &w->cap_seg, 2, sizeof(size_t)) != 0)
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
            if (tok_reserve((void **)&w->seg2, &w->cap_seg2, 2 * (n_out + (end - start) + 1),
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

const struct tok_pre *tok_pre_find(const char *name, size_t len, const char **canon)
{
    for (size_t i = 0; i < sizeof(k_pre_names) / sizeof(k_pre_names[0]); i++) {
        if (strlen(k_pre_names[i].name) == len && memcmp(k_pre_names[i].name, name, len) == 0) {
            *canon = k_pre_names[i].name;
            return k_pre_names[i].pre;
        }
    }
    return NULL;
}

int tok_pre_ignore_merges(const struct tok_pre *pre)
{
    return pre->ignore_merges;
}

int tok_pre_add_bos(const struct tok_pre *pre)
{
    return pre->add_bos;
}
