/*
 * sw_result.h - what the cluster tests share about a `--json` answer of
 * `shardwire generate` or `shardwire run`: its tokens, logits digest,
 * rounds and drafts, and `generate`'s answer as the reference.
 */
#ifndef SW_TEST_RESULT_H
#define SW_TEST_RESULT_H

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sw_test.h"

typedef struct sw_result {
    int ok;           // the answer held a token list
    int n;            // tokens
    int32_t ids[512]; // generated ids
    char digest[17];  // logits digest
    int rounds;       // rounds after the prefill
    int drafted;      // drafts the head proposed
} sw_result_t;

/* r from the first JSON object in text (NULL or none: r->ok 0). */
static __attribute__((unused)) void sw_result_parse(const char *text, sw_result_t *r)
{
    memset(r, 0, sizeof *r);
    json_error_t je;
    const char *brace = text ? strchr(text, '{') : NULL;
    json_t *j = brace ? json_loads(brace, JSON_DISABLE_EOF_CHECK, &je) : NULL;
    if (!j)
        return;
    json_t *ids = json_object_get(j, "tokens");
    for (size_t i = 0; json_is_array(ids) && i < json_array_size(ids) && i < 512; i++)
        r->ids[r->n++] = (int32_t)json_integer_value(json_array_get(ids, i));
    const char *dg = json_string_value(json_object_get(j, "logits_digest"));
    snprintf(r->digest, sizeof r->digest, "%s", dg ? dg : "");
    r->rounds = (int)json_integer_value(json_object_get(j, "rounds"));
    r->drafted = (int)json_integer_value(json_object_get(j, "drafted"));
    r->ok = json_is_array(ids);
    json_decref(j);
}

/* 1 when both answered and their tokens are equal. */
static __attribute__((unused)) int sw_result_same(const sw_result_t *a, const sw_result_t *b)
{
    return a->ok && b->ok && a->n == b->n && !memcmp(a->ids, b->ids, (size_t)a->n * 4);
}

/* `shardwire generate --greedy --json` of prompt, n_gen tokens, one thread, within
 * timeout_s, into r (r->ok 0 when it failed; why on stderr). */
static __attribute__((unused)) void sw_result_generate(const char *model, const char *prompt,
                                                       int n_gen, int timeout_s, sw_result_t *r)
{
    char *out = NULL, *err = NULL;
    const int rc = sw_test_generate_run(model, prompt, n_gen, NULL, timeout_s, &out, &err);
    if (rc != 0)
        fprintf(stderr, "generate failed (%d): %s\n", rc, err ? err : "");
    sw_result_parse(out, r);
    free(out);
    free(err);
}

#endif
