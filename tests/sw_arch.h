/*
 * sw_arch.h - the models of the families of issue 24 for the tests that use
 * them (tests/slow/test_arch.c, tests/e2e/test_arch_cluster.c): which fixture
 * goes with which model, and the model file itself.
 *
 * Each family has a parity fixture tests/fixtures/arch_<set>.json made by
 * scripts/ref/make_arch_fixtures.py with llama.cpp. Its model is either a
 * real GGUF in the model cache ($SW_MODELS_DIR, scripts/fetch_model.sh) or a
 * miniature that shardwire-mkmodel writes deterministically (the fixture's
 * "mkmodel" entry: preset, tokenizer file from $SW_TEST_VOCAB_DIR, seed):
 * swa_model() makes it on first use in $SW_BUILD_DIR/arch-models (written to
 * a temporary name and renamed, so tests running at once never read half a
 * file) and checks its sha256 against the fixture's model_sha256, so the
 * model the test runs is the one llama.cpp ran. swa_greedy() replays a
 * fixture's case step by step and checks every step's logits bits.
 * Header-only.
 */
#ifndef SW_ARCH_H
#define SW_ARCH_H

#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "decode.h"
#include "model.h"
#include "sha256.h"
#include "sw_result.h"
#include "sw_test.h"

/* The sets, in the order the tests run them, and the layer split of each
 * model's 2-stage tests. */
static const struct {
    const char *set;   // tests/fixtures/arch_<set>.json
    const char *split; // "0:a" and "a:L" ranges for two stages
    const char *mid;   // a
} swa_sets[] = {
    {"llama32", "4", "2"},   {"qwen3", "4", "2"},   {"qwen3moe", "4", "2"},
    {"gemma3swa", "6", "3"}, {"gemma3", "18", "9"},
};
#define SWA_N_SETS (int)(sizeof swa_sets / sizeof swa_sets[0])

/* sha256 of the file at path as 64 hex digits; 0, or -1 when unreadable. */
static inline int swa_file_sha256(const char *path, char out[65])
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    sw_sha256_t s;
    sw_sha256_init(&s);
    static unsigned char buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0)
        sw_sha256_update(&s, buf, n);
    fclose(f);
    uint8_t h[32];
    sw_sha256_final(&s, h);
    sw_hex(h, sizeof h, out);
    return 0;
}

/* The fixture of set (a new reference the caller frees with json_decref), or
 * NULL after a failed check. */
static inline json_t *swa_fixture(const char *set)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/arch_%s.json", sw_test_env("SW_FIXTURES"), set);
    json_error_t je;
    json_t *doc = json_load_file(path, 0, &je);
    if (!doc)
        fprintf(stderr, "%s: %s\n", path, je.text);
    SW_CHECK(doc != NULL);
    return doc;
}

/* Writes the path of the fixture's model to out and returns 0 once the file
 * there has the fixture's sha256 (made by shardwire-mkmodel when synthetic);
 * skips the part (returns 1) when a real model or the tokenizer file is not
 * on this machine; -1 after a failed check. */
static inline int swa_model(const json_t *doc, char *out, size_t out_len)
{
    const char *want = json_string_value(json_object_get(doc, "model_sha256"));
    const char *file = json_string_value(json_object_get(doc, "model_file"));
    const json_t *mk = json_object_get(doc, "mkmodel");
    char why[1200], sha[65];
    if (!want || !file) {
        SW_CHECK(!"the fixture names its model");
        return -1;
    }
    if (!json_is_object(mk)) { // a real model from the cache
        snprintf(out, out_len, "%s/%s", sw_test_env("SW_MODELS_DIR"), file);
        if (access(out, R_OK) != 0) {
            const char *rq = json_string_value(json_object_get(doc, "requant"));
            if (rq) // a model of a low-bit quant type, made from a fetched one
                snprintf(why, sizeof why, "%s is absent (run: bash scripts/requant_model.sh %s)",
                         out, rq);
            else
                snprintf(why, sizeof why, "%s is absent (scripts/fetch_model.sh)", out);
            sw_test_skip_part(why);
            return 1;
        }
        SW_CHECK(swa_file_sha256(out, sha) == 0 && !strcmp(sha, want));
        return 0;
    }
    const char *preset = json_string_value(json_object_get(mk, "preset"));
    const char *vocab = json_string_value(json_object_get(mk, "vocab"));
    const json_int_t seed = json_integer_value(json_object_get(mk, "seed"));
    const char *vdir = getenv("SW_TEST_VOCAB_DIR");
    char vpath[1024], dir[512], tmp[1100], seed_s[32];
    snprintf(vpath, sizeof vpath, "%s/%s", vdir ? vdir : "", vocab ? vocab : "");
    if (!preset || !vocab || access(vpath, R_OK) != 0) {
        snprintf(why, sizeof why, "tokenizer file %s is absent (scripts/ci/fetch_vocab.sh)", vpath);
        sw_test_skip_part(why);
        return 1;
    }
    snprintf(dir, sizeof dir, "%s/arch-models", sw_test_env("SW_BUILD_DIR"));
    mkdir(dir, 0755);
    if ((size_t)snprintf(out, out_len, "%s/%s", dir, file) >= out_len) {
        SW_CHECK(!"the model path fits");
        return -1;
    }
    if (swa_file_sha256(out, sha) == 0 && !strcmp(sha, want))
        return 0;
    snprintf(tmp, sizeof tmp, "%s/.%s.%ld", dir, file, (long)getpid());
    snprintf(seed_s, sizeof seed_s, "%lld", (long long)seed);
    char *argv[] = {(char *)sw_test_bin("shardwire-mkmodel"),
                    "--synth",
                    (char *)preset,
                    "--seed",
                    seed_s,
                    "--vocab",
                    vpath,
                    "-o",
                    tmp,
                    NULL};
    char *o = NULL, *e = NULL;
    int rc = sw_test_run(argv, 120, &o, &e);
    if (rc != 0)
        fprintf(stderr, "shardwire-mkmodel %s: %s\n", preset, e ? e : "");
    free(o);
    free(e);
    SW_CHECK_INT(rc, 0);
    /* the very bytes llama.cpp ran: mkmodel is deterministic */
    const int same = rc == 0 && swa_file_sha256(tmp, sha) == 0 && !strcmp(sha, want);
    if (!same)
        fprintf(stderr, "%s: sha256 %s, the fixture's %s\n", tmp, sha, want);
    SW_CHECK(same);
    if (!same || rename(tmp, out) != 0) {
        unlink(tmp);
        return -1;
    }
    return 0;
}

/* The cache size of the parity runs (the fixtures' n_ctx). */
#define SWA_N_CTX 512

typedef struct swa_case {
    const char *name;
    int32_t *prompt; // llama.cpp's prompt ids
    int n_prompt;
    int32_t *gen; // llama.cpp's greedy tokens
    int n_gen;
    const json_t *hashes; // logits_sha256, one per generated token
} swa_case_t;

static inline void swa_hash(const float *logits, int n, char out[65])
{
    uint8_t h[32];
    sw_sha256(logits, (size_t)n * sizeof *logits, h); // little-endian float32, as the fixture
    sw_hex(h, sizeof h, out);
}

static inline int32_t swa_argmax(const float *l, int n)
{
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (l[i] > l[best])
            best = i;
    return best;
}

/* Greedy decoding of c on the stages st[0..n_st) (consecutive layer ranges,
 * f32 hidden states between them) as llama.cpp ran it; checks each step's
 * token and logits hash. Returns the steps that matched both. */
static inline int swa_greedy(sw_model_t *const *st, int n_st, const swa_case_t *c,
                             const json_t *top5, const char *what)
{
    char err[512] = "";
    const sw_hparams_t *hp = sw_model_hparams(st[0]);
    const int V = hp->n_vocab, E = hp->n_embd;
    sw_kv_t *kv[2] = {NULL, NULL};
    for (int i = 0; i < n_st; i++)
        kv[i] = sw_kv_new(st[i], SWA_N_CTX);
    float *logits = malloc((size_t)V * sizeof *logits);
    float *h0 = malloc((size_t)c->n_prompt * E * sizeof *h0);
    SW_CHECK(kv[0] && (n_st == 1 || kv[1]) && logits && h0);
    int32_t tok = 0;
    int ok = 0, first_bad = -1;
    for (int step = 0; kv[0] && logits && h0 && step < c->n_gen; step++) {
        const int n = step == 0 ? c->n_prompt : 1;
        const int32_t *ids = step == 0 ? c->prompt : &tok;
        int rc = 0;
        if (n_st == 1) {
            sw_forward_t f = {
                .n = n, .tokens = ids, .logits = logits, .n_logits = 1, .prompt = step == 0};
            rc = sw_model_forward(st[0], kv[0], &f, err, sizeof err);
        } else {
            sw_forward_t f0 = {.n = n, .tokens = ids, .out_hidden = h0, .prompt = step == 0};
            sw_forward_t f1 = {
                .n = n, .hidden = h0, .logits = logits, .n_logits = 1, .prompt = step == 0};
            rc = sw_model_forward(st[0], kv[0], &f0, err, sizeof err);
            if (rc == 0)
                rc = sw_model_forward(st[1], kv[1], &f1, err, sizeof err);
        }
        SW_CHECK_INT(rc, 0);
        if (rc != 0) {
            fprintf(stderr, "%s %s: forward: %s\n", what, c->name, err);
            break;
        }
        char h[65];
        swa_hash(logits, V, h);
        tok = swa_argmax(logits, V);
        const char *want = json_string_value(json_array_get(c->hashes, (size_t)step));
        const int same = tok == c->gen[step] && want && !strcmp(h, want);
        if (!same && first_bad < 0) {
            first_bad = step;
            fprintf(stderr, "%s %s: step %d: token %d (llama.cpp %d), logits %s\n", what, c->name,
                    step, tok, c->gen[step], want && !strcmp(h, want) ? "equal" : "DIFFER");
        }
        ok += same;
        if (step == 0 && top5) // the first position's best logits, to the float
            for (size_t k = 0; k < json_array_size(top5); k++) {
                const json_t *e = json_array_get(top5, k);
                const int id = (int)json_integer_value(json_object_get(e, "id"));
                const float ref = (float)json_real_value(json_object_get(e, "logit"));
                SW_CHECK(id >= 0 && id < V && logits[id] == ref);
            }
        tok = c->gen[step]; // llama.cpp's token is fed back, as it was there
    }
    SW_CHECK_INT(ok, c->n_gen);
    for (int i = 0; i < n_st; i++)
        sw_kv_free(&kv[i]);
    free(logits);
    free(h0);
    return ok;
}

static inline int32_t *swa_ids(const json_t *a, int *n)
{
    *n = (int)json_array_size(a);
    int32_t *v = malloc((size_t)(*n > 0 ? *n : 1) * sizeof *v);
    for (int i = 0; v && i < *n; i++)
        v[i] = (int32_t)json_integer_value(json_array_get(a, (size_t)i));
    return v;
}

/* ---- through the programs: shardwire generate, and a relay with two stages ---- */

/* The answers: sw_result.h (tokens, logits digest, drafts; `generate` as the reference). */

static inline int swa_run(const char *ep, const char *prompt, int n_gen, const char *draft,
                          sw_result_t *r)
{
    char n[16];
    snprintf(n, sizeof n, "%d", n_gen);
    char *argv[] = {(char *)sw_test_bin("shardwire"),
                    "run",
                    "--greedy",
                    "--relay",
                    (char *)ep,
                    "-p",
                    (char *)prompt,
                    "-n",
                    n,
                    "--json",
                    "--timeout-s",
                    "150",
                    "--insecure-loopback",
                    draft ? "--draft" : NULL,
                    (char *)draft,
                    NULL};
    char *out = NULL, *err = NULL;
    const int rc = sw_test_run(argv, 180, &out, &err);
    if (rc != 0)
        fprintf(stderr, "run exit %d: %s", rc, err ? err : "");
    sw_result_parse(out, r);
    free(out);
    free(err);
    return rc;
}

/* A relay and two stages [0, mid) of models[0] and [mid, L) of models[1] (one file, or two
 * parts of one split set); -1 when they did not come up. */
static inline int swa_start_files(const char *const models[2], const char *mid, const char *n_layer,
                                  char *ep, size_t ep_len, pid_t *relay, pid_t nodes[2])
{
    snprintf(ep, ep_len, "tcp://127.0.0.1:%d", sw_test_free_port());
    char *ra[] = {(char *)sw_test_bin("shardwire-relay"), "--listen", ep, "--insecure-loopback",
                  NULL};
    *relay = sw_test_spawn(ra, sw_test_log("relay.log"));
    char r0[32], r1[32];
    snprintf(r0, sizeof r0, "0:%s", mid);
    snprintf(r1, sizeof r1, "%s:%s", mid, n_layer);
    const char *ranges[2] = {r0, r1};
    for (int i = 0; i < 2; i++) {
        char name[16];
        snprintf(name, sizeof name, "stage%d", i);
        char *na[] = {(char *)sw_test_bin("shardwire-node"),
                      "--model",
                      (char *)models[i],
                      "--layers",
                      (char *)ranges[i],
                      "--relay",
                      ep,
                      "--name",
                      name,
                      "--threads",
                      "1",
                      "--dtype",
                      "f32",
                      "--round-timeout-ms",
                      "30000",
                      "--insecure-loopback",
                      i == 0 ? "--draft-model" : NULL, // the head drafts with the model itself
                      (char *)models[i],
                      NULL};
        nodes[i] = sw_test_spawn(na, sw_test_log("nodes.log"));
    }
    return sw_test_wait_peers(ep, 2, 90);
}

/* A relay and two stages [0, mid) and [mid, L) of model; -1 when they did not come up. */
static inline int swa_start(const char *model, const char *mid, const char *n_layer, char *ep,
                            size_t ep_len, pid_t *relay, pid_t nodes[2])
{
    const char *const models[2] = {model, model};
    return swa_start_files(models, mid, n_layer, ep, ep_len, relay, nodes);
}

static inline void swa_stop(pid_t relay, pid_t nodes[2])
{
    for (int i = 0; i < 2; i++)
        sw_test_kill(nodes[i]);
    sw_test_kill(relay);
}

#endif
