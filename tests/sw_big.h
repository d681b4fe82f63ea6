/*
 * sw_big.h - the big-model tests' helpers (tests/big/test_big_*.c, issue 33):
 * models of real shapes with random weights made once by shardwire-mkmodel
 * into $SW_MODELS_DIR/synth/ (several checkouts and test runs share them; one
 * maker at a time under a lock, the file renamed into place only when
 * complete), a node's resident memory, and the share of a model file a layer
 * range keeps resident. Header-only, with sw_fault.h.
 */
#ifndef SW_BIG_H
#define SW_BIG_H

#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>

#include "backend.h"
#include "kv.h"
#include "model.h"
#include "sw_fault.h"

/* $SW_MODELS_DIR/synth/NAME.gguf of mkmodel's preset (with layers > 0: that many of its first
 * layers) and the tokenizer of the shared vocab file vocab (llama.cpp's ggml-vocab-*.gguf);
 * made when absent. The path (static storage), or skips the test when the vocab data or the
 * model folder are absent or the model cannot be made. */
static inline const char *swb_model(const char *preset, int layers, const char *vocab)
{
    static char path[1024];
    const char *models = sw_test_env("SW_MODELS_DIR");
    const char *vdir = sw_test_env("SW_TEST_VOCAB_DIR");
    char dir[900], vpath[1024], lock[1100], tmp[1100], n[16];
    snprintf(dir, sizeof dir, "%s/synth", models);
    snprintf(vpath, sizeof vpath, "%s/%s", vdir, vocab);
    if (access(vpath, R_OK) != 0) {
        char why[1200];
        snprintf(why, sizeof why, "the tokenizer data %s is absent", vpath);
        sw_test_skip(why);
    }
    if (layers > 0)
        snprintf(path, sizeof path, "%s/%s-%dL.gguf", dir, preset, layers);
    else
        snprintf(path, sizeof path, "%s/%s.gguf", dir, preset);
    if (access(path, R_OK) == 0)
        return path;
    mkdir(dir, 0755);
    snprintf(lock, sizeof lock, "%s/.%s.lock", dir, preset);
    const int fd = open(lock, O_CREAT | O_RDWR, 0644);
    if (fd < 0 || flock(fd, LOCK_EX) != 0)
        sw_test_skip("cannot lock the synthetic model folder");
    if (access(path, R_OK) != 0) { // nobody made it while we waited
        snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
        snprintf(n, sizeof n, "%d", layers);
        char *argv[12] = {(char *)sw_test_bin("shardwire-mkmodel"),
                          "--synth",
                          (char *)preset,
                          "--vocab",
                          vpath,
                          "-o",
                          tmp};
        int k = 7;
        if (layers > 0) {
            argv[k++] = "--layers";
            argv[k++] = n;
        }
        argv[k] = NULL;
        fprintf(stderr, "making %s (once; later runs reuse it)\n", path);
        char *err = NULL;
        const int rc = sw_test_run(argv, 1800, NULL, &err);
        if (rc != 0 || rename(tmp, path) != 0) {
            fprintf(stderr, "mkmodel failed (%d): %s\n", rc, err ? err : "");
            unlink(tmp);
            free(err);
            close(fd);
            sw_test_skip("cannot make the synthetic model (disk full?)");
        }
        free(err);
    }
    close(fd);
    return path;
}

/* A process's resident memory (VmRSS), bytes; -1 when unknown. */
static inline long long swb_rss(pid_t pid)
{
    char p[64], line[256];
    snprintf(p, sizeof p, "/proc/%d/status", (int)pid);
    FILE *f = fopen(p, "r");
    long long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6))
            kb = strtoll(line + 6, NULL, 10);
    if (f)
        fclose(f);
    return kb < 0 ? -1 : kb * 1024;
}

/* The weight bytes layers [a, b) of path keep (their share of the file: their blocks, the
 * embedding on the first, the output on the last) and the KV bytes of one session of n_ctx
 * positions there. 0 or -1. */
static inline int swb_share(const char *path, int a, int b, int n_ctx, uint64_t *weights,
                            uint64_t *kv)
{
    char err[256];
    sw_backend_t *be = sw_backend_new("cpu", 1, err, sizeof err);
    sw_model_t *m = be ? sw_model_load(path, a, b, be, err, sizeof err) : NULL;
    if (!m) {
        fprintf(stderr, "cannot load %s [%d, %d): %s\n", path, a, b, err);
        sw_backend_free(&be);
        return -1;
    }
    *weights = sw_model_weight_bytes(m);
    *kv = sw_kv_bytes(m, n_ctx);
    sw_model_free(&m);
    sw_backend_free(&be);
    return 0;
}

/* A prompt of about n_words * 16 tokens (sentences that do not repeat exactly). Static storage. */
static inline const char *swb_prompt(int n_words)
{
    static char prompt[65536];
    size_t at = 0;
    for (int i = 0; i < n_words && at + 160 < sizeof prompt; i++)
        at += (size_t)snprintf(prompt + at, sizeof prompt - at,
                               "Section %d: the relay forwards frames by name and never decodes "
                               "tensors. ",
                               i);
    return prompt;
}

/*
 * The test of a big model over n nodes (ranges[i]: node i's layers, the
 * first the head): `shardwire generate` on the whole file, then the cluster
 * (keyed when keys, else loopback; extra flags for every node), one greedy
 * request: its tokens and logits digest equal generate's, no recovery, no
 * Resume; and with mem_check each node's resident memory within its share of
 * the file + the KV of n_ctx positions + 256 MiB. The request's result in
 * *got.
 */
static inline void swb_cluster_test(const char *model, int n, const int ranges[][2], int keys,
                                    const char *prompt, int n_gen, int n_ctx, int mem_check,
                                    const char *const *flags, swf_result_t *got)
{
    static swf_result_t ref;
    const double t0 = swf_now_ms();
    swf_reference_s(model, prompt, n_gen, NULL, 1800, &ref);
    SW_CHECK(ref.ok && ref.n == n_gen);
    fprintf(stderr, "generate in one process: %.0f s\n", (swf_now_ms() - t0) / 1e3);
    static swf_cluster_t c;
    memset(&c, 0, sizeof c);
    if (keys)
        snprintf(c.keys, sizeof c.keys, "%s", sw_test_tmpdir());
    static const char *const names[] = {"head", "mid", "mid2", "tail"};
    for (int i = 0; i < n; i++) {
        char layers[16];
        snprintf(layers, sizeof layers, "%d:%d", ranges[i][0], ranges[i][1]);
        swf_node(&c.nodes[i], i == n - 1 ? "tail" : names[i], layers, flags);
    }
    SW_CHECK_INT(swf_start(&c, model, n, sw_test_log("nodes.log")), 0);
    swf_client_t cl = {0};
    SW_CHECK_INT(swf_client_start(&cl, c.ep, prompt, n_gen, 1500, NULL, "big"), 0);
    swf_client_wait(&cl, got);
    SW_CHECK_INT(got->rc, 0);
    SW_CHECK(swf_same(got, &ref));
    SW_CHECK(!strcmp(got->digest, ref.digest));
    SW_CHECK_INT(swf_log_count(&c, "recovery:"), 0);
    SW_CHECK_INT(got->resumes, 0);
    fprintf(stderr, "%d nodes: TTFT %.0f ms, %d of %d tokens equal to generate's\n", n,
            got->ttft_ms, swf_diff_at(got, &ref), n_gen);
    for (int i = 0; i < n && mem_check; i++) {
        uint64_t w = 0, kv = 0;
        SW_CHECK_INT(swb_share(model, ranges[i][0], ranges[i][1], n_ctx, &w, &kv), 0);
        const long long rss = swb_rss(c.nodes[i].pid);
        fprintf(stderr, "%s [%d, %d): resident %.1f MiB, share %.1f MiB + KV %.1f MiB\n",
                c.nodes[i].name, ranges[i][0], ranges[i][1], rss / 1048576.0, w / 1048576.0,
                kv / 1048576.0);
        SW_CHECK(rss > 0 && (uint64_t)rss <= w + kv + (256ull << 20));
        SW_CHECK((uint64_t)rss >= w * 95 / 100); // it holds its layers (prefaulted)
    }
    swf_stop(&c);
}

#endif
