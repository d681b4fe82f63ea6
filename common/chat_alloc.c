/* temporary: folded into chat.c once the tokenizer branch lands */
#include <stdlib.h>

#include "chat.h"

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
