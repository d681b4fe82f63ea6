/*
 * sw_draft.h - what the tests of the draft model (drafter/draft_model.h)
 * share: the default model opened as its own draft model.
 */
#ifndef SW_TEST_DRAFT_H
#define SW_TEST_DRAFT_H

#include <stdio.h>

#include "draft_model.h"
#include "gguf.h"
#include "sw_test.h"

/* The default model as its own draft model on the CPU with `threads` threads and
 * sequences of n_ctx positions; *g holds its GGUF (the caller closes it after
 * draft_model_free). NULL (a failed check, the reason on stderr) when it cannot load. */
static __attribute__((unused)) draft_model_t *sw_test_draft_model(sw_gguf_t **g, int threads,
                                                                  int n_ctx)
{
    const char *path = sw_test_model();
    char err[512] = "";
    *g = sw_gguf_open(path, err, sizeof err);
    SW_CHECK(*g != NULL);
    if (!*g) {
        fprintf(stderr, "%s\n", err);
        return NULL;
    }
    draft_model_t *dm = draft_model_new(path, *g, "cpu", threads, n_ctx, err, sizeof err);
    SW_CHECK(dm != NULL);
    if (!dm) {
        fprintf(stderr, "%s\n", err);
        sw_gguf_close(g);
    }
    return dm;
}

#endif
