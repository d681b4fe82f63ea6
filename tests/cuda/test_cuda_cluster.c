/*
 * test_cuda_cluster.c - GPU nodes in the real pipeline (label cuda; skips
 * without a GPU): a shardwire-relay and two shardwire-node processes on
 * loopback, driven by `shardwire run`, against `shardwire generate` in one
 * process (the helpers of sw_fault.h).
 *
 *  - two GPU nodes (--backend cuda:0, or cuda:0 and cuda:1) with f32 hidden
 *    states == one GPU process: the same tokens and the same digest of every
 *    logits row, also for a prompt of more than 64 rows (a GPU's prompt
 *    arithmetic depends on how a window is cut: the head sends it whole to a
 *    route with a GPU, not in the CPU's pieces);
 *  - a GPU head and a CPU tail == one CPU process (the kernels reproduce the
 *    CPU's arithmetic, so the same tokens are expected; test_cuda_model
 *    measures any logit difference);
 *  - the nodes announce their GPU: the relay logs "backend 'cuda:..." for them.
 *
 * The model needs a tokenizer: the first of SW_CUDA_TOKENIZER_MODELS, else
 * the default test model.
 */
#include <signal.h>

#include "cuda_test.h"
#include "sw_fault.h"

#define N_GEN 24

static char s_long[2048]; /* a prompt of more than 64 rows: see main */
static const char *s_prompts[] = {"The capital of France is", "def add(a, b):\n    return",
                                  "Once upon a time", s_long};
#define N_PROMPTS (int)(sizeof s_prompts / sizeof s_prompts[0])

/* Relay + node 0 on backend b0 with layers [0, half), node 1 on b1 with the rest. */
static int s_start(swf_cluster_t *c, const char *model, int half, const char *b0, const char *b1)
{
    memset(c, 0, sizeof *c);
    const char *bes[2] = {b0, b1};
    for (int i = 0; i < 2; i++) {
        swf_node_t *nd = &c->nodes[i];
        snprintf(nd->name, sizeof nd->name, "gpu%d", i);
        if (i == 0)
            snprintf(nd->layers, sizeof nd->layers, "0:%d", half);
        else
            snprintf(nd->layers, sizeof nd->layers, "%d:end", half);
        snprintf(nd->extra[0], sizeof nd->extra[0], "--backend");
        snprintf(nd->extra[1], sizeof nd->extra[1], "%s", bes[i]);
        snprintf(nd->extra[2], sizeof nd->extra[2], "--dtype");
        snprintf(nd->extra[3], sizeof nd->extra[3], "f32");
    }
    return swf_start(c, model, 2, sw_test_log("nodes.log"));
}

/* Each prompt through the cluster; counts equal tokens and equal digests against ref.
 * The deadline is long: on the CPU emulation of a busy 2-core machine a
 * request of 24 tokens through two emulated GPU nodes takes minutes. */
static void s_compare(swf_cluster_t *c, const swf_result_t *ref, int *tokens, int *digests)
{
    *tokens = *digests = 0;
    for (int i = 0; i < N_PROMPTS; i++) {
        swf_client_t cl = {0};
        static swf_result_t got;
        SW_CHECK_INT(swf_client_start(&cl, c->ep, s_prompts[i], N_GEN, 600, NULL, "cuda"), 0);
        swf_client_wait(&cl, &got);
        if (got.rc != 0)
            fprintf(stderr, "run: %s\n", got.err);
        const int same = swf_same(&got, &ref[i]);
        const int dig = got.digest[0] && !strcmp(got.digest, ref[i].digest);
        if (!same || !dig)
            fprintf(stderr, "prompt %d: %s tokens, logits digest %s (want %s)\n", i,
                    same ? "the same" : "other", got.digest, ref[i].digest);
        *tokens += same;
        *digests += dig;
    }
}

int main(void)
{
    cuda_test_require_gpu();
    signal(SIGPIPE, SIG_IGN);
    /* A prompt of more than 64 rows: a GPU's prompt path depends on how a window is cut (the
     * exact kernel up to SW_CUDA_GEMM's 64 rows, cuBLAS above), so the head must send it as one
     * process computes it, not in the CPU's growing pieces. */
    for (int i = 0; i < 12; i++)
        strcat(s_long, "The quick brown fox jumps over the lazy dog near the river bank. ");
    char paths[8][512];
    const char *tok_model = getenv("SW_CUDA_TOKENIZER_MODELS");
    if (tok_model && *tok_model)
        setenv("SW_CUDA_TEST_MODELS", tok_model, 1);
    cuda_test_models(paths, 8);
    const char *model = paths[0];
    sw_backend_t *cpu = cuda_test_backend("cpu");
    sw_model_t *m = cuda_test_load(model, cpu, 0, -1);
    if (!m) {
        SW_CHECK(!"model loads");
        return sw_test_done();
    }
    const int half = sw_model_hparams(m)->n_layer / 2;
    sw_model_free(&m);
    sw_backend_free(&cpu);
    const char *second = sw_cuda_device_count() > 1 ? "cuda:1" : "cuda:0";
    cuda_test_one_gpu("the second GPU node on cuda:1");

    static const char *const on_gpu[] = {"--backend", "cuda:0", NULL};
    static const char *const on_cpu[] = {"--backend", "cpu", NULL};
    swf_result_t ref_gpu[N_PROMPTS], ref_cpu[N_PROMPTS];
    for (int i = 0; i < N_PROMPTS; i++) {
        swf_reference(model, s_prompts[i], N_GEN, on_gpu, &ref_gpu[i]);
        swf_reference(model, s_prompts[i], N_GEN, on_cpu, &ref_cpu[i]);
        SW_CHECK(ref_gpu[i].ok && ref_gpu[i].n == N_GEN && ref_gpu[i].digest[0]);
    }

    /* Two GPU nodes == one GPU process, bit for bit. */
    swf_cluster_t c;
    SW_CHECK_INT(s_start(&c, model, half, "cuda:0", second), 0);
    char *status = NULL;
    char *sa[] = {(char *)sw_test_bin("shardwire"),
                  "status",
                  "--relay",
                  c.ep,
                  "--json",
                  "--insecure-loopback",
                  NULL};
    SW_CHECK_INT(sw_test_run(sa, 30, &status, NULL), 0);
    SW_CHECK(status && strstr(status, "\"peers\"") != NULL);
    free(status);
    /* The nodes announce their GPU: the relay logs each peer's backend. */
    char relay_log[256];
    snprintf(relay_log, sizeof relay_log, "%s.relay", c.log);
    SW_CHECK(sw_test_wait_text(relay_log, "backend 'cuda:", 30));
    int tok, dig;
    s_compare(&c, ref_gpu, &tok, &dig);
    char r[128];
    snprintf(r, sizeof r, "%d of %d prompts: %d same tokens, %d same logits digest", N_PROMPTS,
             N_PROMPTS, tok, dig);
    cuda_test_row("relay + 2 gpu nodes vs 1 gpu process", r);
    SW_CHECK_INT(tok, N_PROMPTS);
    SW_CHECK_INT(dig, N_PROMPTS);
    swf_stop(&c);

    /* A GPU head and a CPU tail == one CPU process. */
    SW_CHECK_INT(s_start(&c, model, half, "cuda:0", "cpu"), 0);
    s_compare(&c, ref_cpu, &tok, &dig);
    snprintf(r, sizeof r, "%d of %d prompts: %d same tokens, %d same logits digest", N_PROMPTS,
             N_PROMPTS, tok, dig);
    cuda_test_row("relay + gpu head + cpu tail vs 1 cpu process", r);
    SW_CHECK_INT(tok, N_PROMPTS);
    swf_stop(&c);
    return sw_test_done();
}
