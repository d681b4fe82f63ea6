/*
 * test_draft_prefix.c - the draft model's prefix cache keeps tenants apart
 * as the head's does (issue 35, finding 3): a prompt warmed in namespace
 * "tenant:a" is reused by a later sequence of "tenant:a" and by none of
 * "tenant:b" (its own prompt computed whole: the draft's prefill time tells
 * b nothing of a's prompts), on the default model as its own draft model.
 * Before, every sequence used one namespace ("") and b reused a's blocks.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sw_draft.h"

#define N_CTX 1024
#define N_PROMPT 200

/* A fresh sequence of dm in namespace ns warmed with prompt: the positions its
 * prompt took from the prefix cache. */
static long s_warm(draft_model_t *dm, const char *ns, const int32_t *prompt)
{
    draft_seq_t *s = draft_seq_new(dm, N_CTX);
    SW_CHECK(s != NULL);
    if (!s)
        return -1;
    const uint64_t before = draft_model_prefix_stats(dm)->tokens_reused;
    draft_seq_set_prefix_ns(s, ns);
    sw_sampling_t sp = sw_sampling_default();
    SW_CHECK_INT(draft_seq_begin(s, &sp), 0);
    SW_CHECK_INT(draft_seq_warm(s, prompt, N_PROMPT), 0);
    const long reused = (long)(draft_model_prefix_stats(dm)->tokens_reused - before);
    draft_seq_free(&s);
    return reused;
}

int main(void)
{
    sw_gguf_t *g = NULL;
    draft_model_t *dm = sw_test_draft_model(&g, 1, N_CTX);
    if (!dm)
        return sw_test_done();
    SW_CHECK_INT(draft_model_set_prefix(dm, (size_t)64 << 20, 12345), 0);
    int32_t prompt[N_PROMPT];
    for (int i = 0; i < N_PROMPT; i++)
        prompt[i] = 100 + (i * 37) % 5000; /* any tokens of the vocabulary */
    const long a1 = s_warm(dm, "tenant:a", prompt);
    const long b1 = s_warm(dm, "tenant:b", prompt);
    const long a2 = s_warm(dm, "tenant:a", prompt);
    printf("draft model prefix cache: tenant a's prompt reused %ld; tenant b's same prompt %ld; "
           "tenant a again %ld\n",
           a1, b1, a2);
    SW_CHECK_INT(a1, 0);
    SW_CHECK_INT(b1, 0);
    SW_CHECK(a2 >= 128);
    draft_model_free(&dm);
    sw_gguf_close(&g);
    return sw_test_done();
}
