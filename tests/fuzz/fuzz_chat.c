/*
 * fuzz_chat.c - libFuzzer target for the chat template renderer
 * (net/chat.c): templates come from model files and message contents from
 * clients, so both are outside input.
 *
 * Input: NUL-separated fields. Field 0 is the template: its first byte picks
 * a family name ("chatml", "llama3", "llama2", "llama3.1", "qwen3", "gemma")
 * when < 6, else the field itself
 * is the template text (the renderer detects the family by its markers). Each
 * further field is one message: its first byte picks the role (system, user,
 * assistant, tool, or the rest of the field as a free role name), the rest is
 * the content. The last input byte's bit 0 is add_generation_prompt.
 *
 * Properties: a too-small buffer gives SW_CHAT_ERR_SMALL with the length
 * needed; a buffer of that length + 1 then succeeds with exactly that many
 * bytes and a NUL; every message content appears in the output (contents are
 * copied, not interpreted) for ChatML, which renders contents verbatim.
 */
#include "chat.h"
#include "log.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define S_MAX_MSGS 8

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    sw_log_set_level(SW_LOG_ERROR + 1);
    if (size < 2)
        return 0;
    char *copy = malloc(size + 1);
    if (!copy)
        return 0;
    memcpy(copy, data, size);
    copy[size] = 0;
    const int add_gen = data[size - 1] & 1;
    /* split into NUL-terminated fields */
    char *field[S_MAX_MSGS + 1] = {copy};
    int nf = 0;
    for (char *p = copy; nf < S_MAX_MSGS + 1 && p <= copy + size;) {
        field[nf++] = p;
        p += strlen(p) + 1;
    }
    static const char *const families[] = {"chatml",   "llama3", "llama2",
                                           "llama3.1", "qwen3",  "gemma"};
    const char *tmpl = field[0];
    size_t tmpl_len = strlen(tmpl);
    if (tmpl_len >= 1 && (unsigned char)tmpl[0] < 6) {
        tmpl = families[(unsigned char)tmpl[0]];
        tmpl_len = strlen(tmpl);
    }
    static const char *const roles[] = {"system", "user", "assistant", "tool"};
    sw_chat_msg_t msgs[S_MAX_MSGS];
    int n = 0;
    for (int i = 1; i < nf; i++) {
        const char *f = field[i];
        if (!f[0])
            continue;
        unsigned r = (unsigned char)f[0];
        msgs[n].role = r < 4 * 60 ? roles[r % 4] : f + 1;
        msgs[n].content = f + 1;
        n++;
    }
    enum sw_chat_format fam = sw_chat_detect(tmpl, tmpl_len);
    (void)sw_chat_format_name(fam);
    char small[16];
    size_t need = 0;
    int rc = sw_chat_apply(tmpl, tmpl_len, msgs, n, add_gen, small, sizeof small, &need);
    if (rc == SW_CHAT_ERR_SMALL || rc == 0) {
        if (rc == 0 && (need >= sizeof small || strlen(small) != need))
            abort();
        char *out = malloc(need + 1);
        if (!out)
            abort();
        size_t need2 = 0;
        if (sw_chat_apply(tmpl, tmpl_len, msgs, n, add_gen, out, need + 1, &need2) != 0 ||
            need2 != need || strlen(out) != need)
            abort(); /* the announced size must be enough, and exact */
        for (int i = 0; fam == SW_CHAT_CHATML && i < n; i++)
            if (!strstr(out, msgs[i].content))
                abort(); /* a content went missing */
        free(out);
    } else if (rc != SW_CHAT_ERR) {
        abort();
    }
    free(copy);
    return 0;
}
