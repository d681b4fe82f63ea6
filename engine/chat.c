/*
 * chat.c - chat prompt rendering for the ChatML, Llama 3, Llama 3.1, Qwen3,
 * Gemma and Llama 2 template families (see chat.h). Output is counted as it is written, so a
 * too-small buffer costs one extra call and no allocation.
 */
#include "chat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "unicode.h"

/* Writes into out[0..cap) while counting the full length. */
typedef struct s_out {
    char *buf;  // caller's buffer
    size_t cap; // its size in bytes
    size_t len; // bytes the prompt needs so far (may exceed cap)
} s_out_t;

static void s_put(s_out_t *o, const char *s, size_t n)
{
    if (o->len < o->cap && n > 0) {
        size_t room = o->cap - o->len;
        memcpy(o->buf + o->len, s, n < room ? n : room);
    }
    o->len += n;
}

static void s_puts(s_out_t *o, const char *s)
{
    s_put(o, s, strlen(s));
}

/* What Python's str.isspace() accepts (jinja's trim and str.strip use it):
 * Unicode White_Space plus the four information separators U+001C..U+001F. */
static int s_is_py_space(uint32_t cp)
{
    return (cp >= 0x1C && cp <= 0x1F) || (sw_unicode_flags(cp) & SW_UCAT_SPACE);
}

/* Bounds [*b, *e) of s[0..n) without leading and trailing whitespace. */
static void s_strip(const char *s, size_t n, size_t *b, size_t *e)
{
    size_t i = 0;
    while (i < n) {
        size_t k;
        uint32_t cp = sw_utf8_decode(s + i, n - i, &k);
        if (!s_is_py_space(cp))
            break;
        i += k;
    }
    size_t j = n;
    while (j > i) {
        /* Step back to the start of the last character. */
        size_t st = j - 1;
        while (st > i && j - st < 4 && ((unsigned char)s[st] & 0xC0) == 0x80)
            st--;
        size_t k;
        uint32_t cp = sw_utf8_decode(s + st, j - st, &k);
        if (st + k != j || !s_is_py_space(cp))
            break;
        j = st;
    }
    *b = i;
    *e = j;
}

static const char *s_find(const char *hay, size_t n, const char *needle)
{
    size_t m = strlen(needle);
    if (m == 0 || m > n)
        return NULL;
    for (size_t i = 0; i + m <= n; i++)
        if (hay[i] == needle[0] && memcmp(hay + i, needle, m) == 0)
            return hay + i;
    return NULL;
}

enum sw_chat_format sw_chat_detect(const char *tmpl, size_t len)
{
    static const struct {
        const char *name;
        enum sw_chat_format f;
    } names[] = {{"chatml", SW_CHAT_CHATML}, {"llama3", SW_CHAT_LLAMA3},
                 {"llama2", SW_CHAT_LLAMA2}, {"llama3.1", SW_CHAT_LLAMA31},
                 {"qwen3", SW_CHAT_QWEN3},   {"gemma", SW_CHAT_GEMMA}};
    if (!tmpl)
        return SW_CHAT_UNKNOWN;
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (len == strlen(names[i].name) && memcmp(tmpl, names[i].name, len) == 0)
            return names[i].f;
    if (s_find(tmpl, len, "<|im_start|>"))
        return s_find(tmpl, len, "</think>") ? SW_CHAT_QWEN3 : SW_CHAT_CHATML;
    if (s_find(tmpl, len, "<|start_header_id|>"))
        return s_find(tmpl, len, "Cutting Knowledge Date") ? SW_CHAT_LLAMA31 : SW_CHAT_LLAMA3;
    if (s_find(tmpl, len, "<start_of_turn>"))
        return SW_CHAT_GEMMA;
    if (s_find(tmpl, len, "[INST]"))
        return SW_CHAT_LLAMA2;
    return SW_CHAT_UNKNOWN;
}

const char *sw_chat_format_name(enum sw_chat_format f)
{
    switch (f) {
    case SW_CHAT_CHATML:
        return "chatml";
    case SW_CHAT_LLAMA3:
        return "llama3";
    case SW_CHAT_LLAMA2:
        return "llama2";
    case SW_CHAT_LLAMA31:
        return "llama3.1";
    case SW_CHAT_QWEN3:
        return "qwen3";
    case SW_CHAT_GEMMA:
        return "gemma";
    case SW_CHAT_UNKNOWN:
        break;
    }
    return "unknown";
}

/* Finds the system prompt a ChatML template writes as a literal when the
 * conversation brings none: "<|im_start|>system" + newline + text without
 * quotes or Jinja tags + "<|im_end|>", inside one string literal. Returns the
 * raw (still escaped) text in *sys / *sys_len, or 0 when there is none. */
static int s_chatml_default_system(const char *t, size_t n, const char **sys, size_t *sys_len)
{
    static const char marker[] = "<|im_start|>system";
    static const char end[] = "<|im_end|>";
    const size_t ml = sizeof(marker) - 1, el = sizeof(end) - 1;
    for (const char *p = s_find(t, n, marker); p;
         p = s_find(p + 1, n - (size_t)(p + 1 - t), marker)) {
        size_t i = (size_t)(p - t) + ml;
        if (i < n && t[i] == '\n')
            i += 1;
        else if (i + 1 < n && t[i] == '\\' && t[i + 1] == 'n')
            i += 2;
        else
            continue;
        size_t start = i;
        int ok = 0;
        while (i < n) {
            if (i + el <= n && memcmp(t + i, end, el) == 0) {
                ok = 1;
                break;
            }
            if (t[i] == '\\') {
                i += 2;
                continue;
            }
            if (t[i] == '\'' || t[i] == '"' ||
                (t[i] == '{' && i + 1 < n && (t[i + 1] == '{' || t[i + 1] == '%')))
                break; // the literal ends: the system text is an expression
            i++;
        }
        if (ok && i > start) {
            *sys = t + start;
            *sys_len = i - start;
            return 1;
        }
    }
    return 0;
}

/* Appends a Jinja string literal's contents, resolving its escapes. */
static void s_put_unescaped(s_out_t *o, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == '\\' && i + 1 < n) {
            char e = s[++i];
            c = e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e;
            if (e != 'n' && e != 't' && e != 'r' && e != '\\' && e != '\'' && e != '"') {
                s_put(o, "\\", 1); // unknown escape: kept as written
                c = e;
            }
        }
        s_put(o, &c, 1);
    }
}

static int s_render_chatml(const char *tmpl, size_t tmpl_len, const sw_chat_msg_t *msgs, int n,
                           int add_gen, s_out_t *o)
{
    const char *sys;
    size_t sys_len;
    if (n > 0 && strcmp(msgs[0].role, "system") != 0 &&
        s_chatml_default_system(tmpl, tmpl_len, &sys, &sys_len)) {
        s_puts(o, "<|im_start|>system\n");
        s_put_unescaped(o, sys, sys_len);
        s_puts(o, "<|im_end|>\n");
    }
    for (int i = 0; i < n; i++) {
        s_puts(o, "<|im_start|>");
        s_puts(o, msgs[i].role);
        s_puts(o, "\n");
        s_puts(o, msgs[i].content);
        s_puts(o, "<|im_end|>\n");
    }
    if (add_gen)
        s_puts(o, "<|im_start|>assistant\n");
    return 0;
}

static void s_put_stripped(s_out_t *o, const char *s)
{
    size_t b, e;
    s_strip(s, strlen(s), &b, &e);
    s_put(o, s + b, e - b);
}

static int s_render_llama3(const sw_chat_msg_t *msgs, int n, int add_gen, s_out_t *o)
{
    for (int i = 0; i < n; i++) {
        s_puts(o, "<|start_header_id|>");
        s_puts(o, msgs[i].role);
        s_puts(o, "<|end_header_id|>\n\n");
        s_put_stripped(o, msgs[i].content);
        s_puts(o, "<|eot_id|>");
    }
    if (add_gen)
        s_puts(o, "<|start_header_id|>assistant<|end_header_id|>\n\n");
    return 0;
}

/* s as a JSON string, as Python's json.dumps(s, ensure_ascii=False) writes
 * it (transformers' tojson): quotes, backslashes and control characters
 * escaped, everything else as is. */
static void s_put_json_string(s_out_t *o, const char *s)
{
    s_puts(o, "\"");
    for (; *s; s++) {
        const unsigned char c = (unsigned char)*s;
        const char *e = c == '"'    ? "\\\""
                        : c == '\\' ? "\\\\"
                        : c == '\n' ? "\\n"
                        : c == '\r' ? "\\r"
                        : c == '\t' ? "\\t"
                        : c == '\b' ? "\\b"
                        : c == '\f' ? "\\f"
                                    : NULL;
        char u[8];
        if (!e && c < 0x20) {
            snprintf(u, sizeof u, "\\u%04x", c);
            e = u;
        }
        if (e)
            s_puts(o, e);
        else
            s_put(o, s, 1);
    }
    s_puts(o, "\"");
}

/* Llama 3.1 / 3.2 (meta-llama/Llama-3.2-3B-Instruct's template without
 * tools): the system turn always, with the knowledge cut-off and the
 * template's default date, then every other turn trimmed; tool results as
 * ipython turns, through tojson (a string is iterable to Jinja). */
static int s_render_llama31(const sw_chat_msg_t *msgs, int n, int add_gen, s_out_t *o)
{
    int first = 0;
    s_puts(o, "<|start_header_id|>system<|end_header_id|>\n\n"
              "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n");
    if (n > 0 && strcmp(msgs[0].role, "system") == 0) {
        s_put_stripped(o, msgs[0].content);
        first = 1;
    }
    s_puts(o, "<|eot_id|>");
    for (int i = first; i < n; i++) {
        if (!strcmp(msgs[i].role, "tool") || !strcmp(msgs[i].role, "ipython")) {
            s_puts(o, "<|start_header_id|>ipython<|end_header_id|>\n\n");
            s_put_json_string(o, msgs[i].content);
        } else {
            s_puts(o, "<|start_header_id|>");
            s_puts(o, msgs[i].role);
            s_puts(o, "<|end_header_id|>\n\n");
            s_put_stripped(o, msgs[i].content);
        }
        s_puts(o, "<|eot_id|>");
    }
    if (add_gen)
        s_puts(o, "<|start_header_id|>assistant<|end_header_id|>\n\n");
    return 0;
}

/* Bounds of s[b, e) without the characters c at either end (Python's
 * str.strip(c) for one character; lstrip / rstrip with only one side). */
static void s_strip_ch(const char *s, size_t *b, size_t *e, char c, int left, int right)
{
    while (left && *b < *e && s[*b] == c)
        (*b)++;
    while (right && *e > *b && s[*e - 1] == c)
        (*e)--;
}

/* The last occurrence of needle in s[0..n), or NULL. */
static const char *s_find_last(const char *s, size_t n, const char *needle)
{
    const char *last = NULL;
    for (const char *p = s_find(s, n, needle); p;
         p = s_find(p + 1, n - (size_t)(p + 1 - s), needle))
        last = p;
    return last;
}

static int s_is_tool_response(const char *c)
{
    static const char open[] = "<tool_response>", close[] = "</tool_response>";
    const size_t n = strlen(c), lo = sizeof open - 1, lc = sizeof close - 1;
    return n >= lo && n >= lc && !memcmp(c, open, lo) && !memcmp(c + n - lc, close, lc);
}

/* Qwen3's template (Qwen/Qwen3-0.6B, the same in the MoE models) without
 * tool definitions or tool calls. */
static int s_render_qwen3(const sw_chat_msg_t *msgs, int n, int add_gen, s_out_t *o)
{
    if (n > 0 && !strcmp(msgs[0].role, "system")) {
        s_puts(o, "<|im_start|>system\n");
        s_puts(o, msgs[0].content);
        s_puts(o, "<|im_end|>\n");
    }
    int last_query = n - 1; // the last user turn that is not a tool result
    for (int i = n - 1; i >= 0; i--)
        if (!strcmp(msgs[i].role, "user") && !s_is_tool_response(msgs[i].content)) {
            last_query = i;
            break;
        }
    for (int i = 0; i < n; i++) {
        const char *role = msgs[i].role, *c = msgs[i].content;
        if (!strcmp(role, "user") || (!strcmp(role, "system") && i > 0)) {
            s_puts(o, "<|im_start|>");
            s_puts(o, role);
            s_puts(o, "\n");
            s_puts(o, c);
            s_puts(o, "<|im_end|>\n");
        } else if (!strcmp(role, "assistant")) {
            const size_t len = strlen(c);
            size_t cb = 0, ce = len, rb = 0, re = 0; // content and reasoning bounds
            const char *end_think = s_find(c, len, "</think>");
            if (end_think) {
                /* content: after the last </think>, lstrip('\n'); reasoning:
                 * before the first </think>, rstrip('\n'), after its last
                 * <think>, lstrip('\n') */
                cb = (size_t)(s_find_last(c, len, "</think>") - c) + 8;
                s_strip_ch(c, &cb, &ce, '\n', 1, 0);
                re = (size_t)(end_think - c);
                s_strip_ch(c, &rb, &re, '\n', 0, 1);
                const char *open = s_find_last(c, re, "<think>");
                rb = open ? (size_t)(open - c) + 7 : 0;
                s_strip_ch(c, &rb, &re, '\n', 1, 0);
            }
            const int has_reasoning = re > rb;
            if (i > last_query && (i == n - 1 || has_reasoning)) {
                s_strip_ch(c, &rb, &re, '\n', 1, 1);
                s_puts(o, "<|im_start|>assistant\n<think>\n");
                s_put(o, c + rb, re - rb);
                s_puts(o, "\n</think>\n\n");
                s_strip_ch(c, &cb, &ce, '\n', 1, 0);
                s_put(o, c + cb, ce - cb);
            } else {
                s_puts(o, "<|im_start|>assistant\n");
                s_put(o, c + cb, ce - cb);
            }
            s_puts(o, "<|im_end|>\n");
        } else if (!strcmp(role, "tool")) {
            if (i == 0 || strcmp(msgs[i - 1].role, "tool") != 0)
                s_puts(o, "<|im_start|>user");
            s_puts(o, "\n<tool_response>\n");
            s_puts(o, c);
            s_puts(o, "\n</tool_response>");
            if (i == n - 1 || strcmp(msgs[i + 1].role, "tool") != 0)
                s_puts(o, "<|im_end|>\n");
        }
    }
    if (add_gen)
        s_puts(o, "<|im_start|>assistant\n");
    return 0;
}

/* Gemma 3's template (google/gemma-3-4b-it, text contents): the system
 * message and a blank line open the first turn, contents trimmed, the
 * assistant is "model", turns must alternate user/assistant. */
static int s_render_gemma(const sw_chat_msg_t *msgs, int n, int add_gen, s_out_t *o)
{
    int first = 0;
    if (n > 0 && !strcmp(msgs[0].role, "system"))
        first = 1;
    for (int i = first; i < n; i++) {
        const int k = i - first, is_user = !strcmp(msgs[i].role, "user");
        if (is_user != (k % 2 == 0)) {
            SW_ERR("chat: the gemma template needs alternating user/assistant turns (message %d "
                   "is \"%s\")",
                   i, msgs[i].role);
            return -1;
        }
        s_puts(o, "<start_of_turn>");
        s_puts(o, !strcmp(msgs[i].role, "assistant") ? "model" : msgs[i].role);
        s_puts(o, "\n");
        if (k == 0 && first) {
            s_puts(o, msgs[0].content);
            s_puts(o, "\n\n");
        }
        s_put_stripped(o, msgs[i].content);
        s_puts(o, "<end_of_turn>\n");
    }
    if (add_gen)
        s_puts(o, "<start_of_turn>model\n");
    return 0;
}

/* Meta's Llama 2 chat template: every user turn is "<s>[INST] ... [/INST]"
 * (the first <s> comes from the tokenizer), every assistant turn
 * " ... </s>"; the system prompt opens the first user turn in <<SYS>>. The
 * template always ends ready for the assistant, so add_gen changes nothing. */
static int s_render_llama2(const sw_chat_msg_t *msgs, int n, s_out_t *o)
{
    const char *sys = NULL;
    int first = 0;
    if (n > 0 && strcmp(msgs[0].role, "system") == 0) {
        sys = msgs[0].content;
        first = 1;
    }
    for (int i = first; i < n; i++) {
        int k = i - first;
        int is_user = strcmp(msgs[i].role, "user") == 0;
        if (is_user != (k % 2 == 0)) {
            SW_ERR("chat: llama2 template needs alternating user/assistant turns (message %d is "
                   "\"%s\")",
                   i, msgs[i].role);
            return -1;
        }
        if (is_user) {
            s_puts(o, k == 0 ? "[INST] " : "<s>[INST] ");
            if (k == 0 && sys) {
                /* strip() of "<<SYS>>\n" + sys + "\n<</SYS>>\n\n" + content:
                 * only the end can be whitespace, and when the content is all
                 * whitespace the strip reaches back into the block. */
                size_t b, e;
                s_puts(o, "<<SYS>>\n");
                s_puts(o, sys);
                s_strip(msgs[i].content, strlen(msgs[i].content), &b, &e);
                if (e > b) {
                    s_puts(o, "\n<</SYS>>\n\n");
                    s_put(o, msgs[i].content, e);
                } else {
                    s_puts(o, "\n<</SYS>>");
                }
            } else {
                s_put_stripped(o, msgs[i].content);
            }
            s_puts(o, " [/INST]");
        } else if (strcmp(msgs[i].role, "assistant") == 0) {
            s_puts(o, " ");
            s_put_stripped(o, msgs[i].content);
            s_puts(o, " </s>");
        }
    }
    return 0;
}

int sw_chat_apply(const char *tmpl, size_t tmpl_len, const sw_chat_msg_t *msgs, int n,
                  int add_generation_prompt, char *out, size_t out_len, size_t *needed)
{
    *needed = 0;
    if (n < 0 || (n > 0 && !msgs)) {
        SW_ERR("chat: invalid message list");
        return SW_CHAT_ERR;
    }
    for (int i = 0; i < n; i++) {
        if (!msgs[i].role || !msgs[i].content) {
            SW_ERR("chat: message %d has no role or content", i);
            return SW_CHAT_ERR;
        }
    }
    enum sw_chat_format f = sw_chat_detect(tmpl, tmpl_len);
    s_out_t o = {out, out_len, 0};
    int rc;
    switch (f) {
    case SW_CHAT_CHATML:
        rc = s_render_chatml(tmpl, tmpl_len, msgs, n, add_generation_prompt, &o);
        break;
    case SW_CHAT_LLAMA3:
        rc = s_render_llama3(msgs, n, add_generation_prompt, &o);
        break;
    case SW_CHAT_LLAMA2:
        rc = s_render_llama2(msgs, n, &o);
        break;
    case SW_CHAT_LLAMA31:
        rc = s_render_llama31(msgs, n, add_generation_prompt, &o);
        break;
    case SW_CHAT_QWEN3:
        rc = s_render_qwen3(msgs, n, add_generation_prompt, &o);
        break;
    case SW_CHAT_GEMMA:
        rc = s_render_gemma(msgs, n, add_generation_prompt, &o);
        break;
    default:
        SW_ERR("chat: the chat template is not one of the supported families (ChatML, Qwen3, "
               "Llama 3, Llama 3.1/3.2, Gemma, Llama 2)");
        return SW_CHAT_ERR;
    }
    if (rc != 0)
        return SW_CHAT_ERR;
    *needed = o.len;
    if (o.len >= out_len)
        return SW_CHAT_ERR_SMALL;
    out[o.len] = 0;
    return 0;
}

int sw_chat_format(const sw_gguf_t *g, const sw_chat_msg_t *msgs, int n, int add_generation_prompt,
                   char *out, size_t out_len, size_t *needed)
{
    sw_gguf_str_t tmpl;
    *needed = 0;
    if (sw_gguf_get_str(g, "tokenizer.chat_template", &tmpl) != 0) {
        sw_gguf_str_t arch;
        if (sw_gguf_get_str(g, "general.architecture", &arch) == 0 &&
            sw_gguf_str_eq(arch, "gemma3")) // the family's template, as llama.cpp falls back
            return sw_chat_apply("gemma", 5, msgs, n, add_generation_prompt, out, out_len, needed);
        SW_ERR("chat: the model has no tokenizer.chat_template");
        return SW_CHAT_ERR;
    }
    return sw_chat_apply(tmpl.ptr, (size_t)tmpl.len, msgs, n, add_generation_prompt, out, out_len,
                         needed);
}

char *sw_chat_format_alloc(const sw_gguf_t *g, const sw_chat_msg_t *msgs, int n, int add_gen)
{
    size_t need = 0;
    char probe[1];
    int rc = sw_chat_format(g, msgs, n, add_gen, probe, sizeof probe, &need);
    if (rc != 0 && rc != SW_CHAT_ERR_SMALL)
        return NULL;
    char *out = malloc(need + 1);
    if (!out)
        return NULL;
    if (sw_chat_format(g, msgs, n, add_gen, out, need + 1, &need) != 0) {
        free(out);
        return NULL;
    }
    return out;
}
