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
 * model the test runs is the one llama.cpp ran. Header-only.
 */
#ifndef SW_ARCH_H
#define SW_ARCH_H

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sha256.h"
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

#endif
