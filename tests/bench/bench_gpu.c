/*
 * bench_gpu.c - the engine on a GPU: prompt and decode speed, K+1-row
 * verification, achieved memory bandwidth against the measured copy
 * bandwidth, and speculative rounds (K = 8, draft model on the GPU) against
 * the CPU. Prints one table (scripts/gpu_check.sh runs it; docs/benchmarks.md
 * has the results and the command).
 *
 *   bench_gpu [--backend cuda:0] [--cpu-threads N] [--draft D.gguf] MODEL.gguf...
 *
 * Per model: pp512 (a 512-token prompt; the cuBLAS path, and the exact
 * kernels with SW_CUDA_GEMM=off), tg (128 one-row steps after a 64-token
 * prompt; CUDA graphs, and without them), verify (one call of 9 and of 33
 * rows), GB/s = bytes of weights one step reads x tokens/s. Round: K = 8
 * greedy draft steps of the draft model (one graph) + a 9-row verification
 * of the target, on the GPU and on the CPU with --cpu-threads threads.
 * Times are medians of 5 after a warm-up.
 */
#include "bench_util.h"

/* Median ms of a 512-token prompt. */
static double s_pp(sw_model_t *m, sw_kv_t *kv, float *logits)
{
    double t[BENCH_REPS];
    for (int r = -1; r < BENCH_REPS; r++) {
        if (sw_kv_truncate(kv, 0) != 0)
            return -1;
        double t0 = bench_now();
        if (bench_fwd(m, kv, bench_tok, 512, logits, 1, 1) != 0)
            return -1;
        if (r >= 0)
            t[r] = bench_now() - t0;
    }
    return bench_median(t, BENCH_REPS);
}

/* Median tokens/s of 128 one-row steps after a 64-token prompt. */
static double s_tg(sw_model_t *m, sw_kv_t *kv, float *logits)
{
    double t[BENCH_REPS];
    for (int r = -1; r < BENCH_REPS; r++) {
        if (sw_kv_truncate(kv, 0) != 0 || bench_fwd(m, kv, bench_tok, 64, logits, 1, 1) != 0)
            return -1;
        double t0 = bench_now();
        for (int i = 0; i < 128; i++)
            if (bench_fwd(m, kv, &bench_tok[64 + i], 1, logits, 1, 0) != 0)
                return -1;
        if (r >= 0)
            t[r] = 128 * 1e3 / (bench_now() - t0);
    }
    return bench_median(t, BENCH_REPS);
}

static sw_backend_t *s_backend(const char *name, int threads, const char *env, const char *val)
{
    char err[256];
    if (env)
        setenv(env, val, 1);
    sw_backend_t *be = sw_backend_new(name, threads, err, sizeof err);
    if (env)
        unsetenv(env);
    if (!be)
        fprintf(stderr, "bench_gpu: %s\n", err);
    return be;
}

int main(int argc, char **argv)
{
    const char *gpu_name = "cuda:0", *draft = NULL;
    int cpu_threads = 0, first = 1;
    for (; first < argc && argv[first][0] == '-'; first++) {
        if (!strcmp(argv[first], "--backend") && first + 1 < argc)
            gpu_name = argv[++first];
        else if (!strcmp(argv[first], "--cpu-threads") && first + 1 < argc)
            cpu_threads = atoi(argv[++first]);
        else if (!strcmp(argv[first], "--draft") && first + 1 < argc)
            draft = argv[++first];
        else {
            fprintf(stderr, "usage: bench_gpu [--backend cuda:0] [--cpu-threads N] [--draft D] "
                            "MODEL...\n");
            return 2;
        }
    }
    if (first >= argc) {
        fprintf(stderr, "bench_gpu: no model given\n");
        return 2;
    }
    sw_backend_t *gpu = s_backend(gpu_name, 0, NULL, NULL);
    sw_backend_t *exact = s_backend(gpu_name, 0, "SW_CUDA_GEMM", "off");
    sw_backend_t *nograph = s_backend(gpu_name, 0, "SW_CUDA_GRAPHS", "0");
    sw_backend_t *cpu = s_backend("cpu", cpu_threads, NULL, NULL);
    if (!gpu || !exact || !nograph || !cpu)
        return 1;
    const double peak = sw_cuda_copy_gbps(0);
    printf("device: %s; copy bandwidth %.0f GB/s (read + write); cpu: %s\n", sw_backend_desc(gpu),
           peak, sw_backend_desc(cpu));
    printf("| model | GB/token | pp512 tok/s (cuBLAS) | pp512 tok/s (exact) | tg tok/s (graphs) | "
           "tg tok/s (no graphs) | verify 9 rows ms | verify 33 rows ms | GB/s | %% of copy |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|\n");
    int rc = 0;
    for (int a = first; a < argc; a++) {
        sw_model_t *m = bench_load(argv[a], gpu), *me = bench_load(argv[a], exact),
                   *mn = bench_load(argv[a], nograph);
        if (!m || !me || !mn) {
            rc = 1;
            goto next;
        }
        const int V = sw_model_hparams(m)->n_vocab;
        bench_fill(V);
        float *logits = malloc((size_t)33 * V * sizeof(float));
        sw_kv_t *kv = sw_kv_new(m, 1024), *kve = sw_kv_new(me, 1024), *kvn = sw_kv_new(mn, 1024);
        if (!logits || !kv || !kve || !kvn) {
            fprintf(stderr, "bench_gpu: out of memory\n");
            rc = 1;
        } else {
            const double gb = (double)sw_model_bytes_per_token(m) / 1e9;
            const double pp = s_pp(m, kv, logits), ppe = s_pp(me, kve, logits);
            const double tg = s_tg(m, kv, logits), tgn = s_tg(mn, kvn, logits);
            const double v9 = bench_verify(m, kv, 9, logits, 0),
                         v33 = bench_verify(m, kv, 33, logits, 0);
            printf("| %s | %.3f | %.0f | %.0f | %.1f | %.1f | %.2f | %.2f | %.0f | %.0f%% |\n",
                   bench_base(argv[a]), gb, 512e3 / pp, 512e3 / ppe, tg, tgn, v9, v33, gb * tg,
                   peak > 0 ? 100 * gb * tg / peak : 0);
        }
        sw_kv_free(&kv);
        sw_kv_free(&kve);
        sw_kv_free(&kvn);
        free(logits);
    next:
        sw_model_free(&m);
        sw_model_free(&me);
        sw_model_free(&mn);
    }

    /* Speculative rounds: target = the first model, draft = --draft. */
    if (draft) {
        printf("\n| round (K = 8) | draft 8 steps ms | verify 9 rows ms | round ms | rounds/s |\n");
        printf("|---|---|---|---|---|\n");
        double round[2] = {0, 0};
        for (int side = 0; side < 2; side++) {
            sw_backend_t *be = side == 0 ? gpu : cpu;
            sw_model_t *t = bench_load(argv[first], be), *d = bench_load(draft, be);
            float *logits = NULL;
            sw_kv_t *kt = t ? sw_kv_new(t, 256) : NULL, *kd = d ? sw_kv_new(d, 256) : NULL;
            if (t && d && kt && kd) {
                const int V = sw_model_hparams(t)->n_vocab > sw_model_hparams(d)->n_vocab
                                  ? sw_model_hparams(t)->n_vocab
                                  : sw_model_hparams(d)->n_vocab;
                logits = malloc((size_t)9 * V * sizeof(float));
            }
            if (logits) {
                const double dr = bench_draft(d, kd, 8, logits),
                             ve = bench_verify(t, kt, 9, logits, 0);
                round[side] = dr + ve;
                printf("| %s: %s + %s | %.2f | %.2f | %.2f | %.1f |\n", side == 0 ? "gpu" : "cpu",
                       bench_base(argv[first]), bench_base(draft), dr, ve, dr + ve,
                       1e3 / (dr + ve));
            } else {
                rc = 1;
            }
            free(logits);
            sw_kv_free(&kt);
            sw_kv_free(&kd);
            sw_model_free(&t);
            sw_model_free(&d);
        }
        if (round[0] > 0 && round[1] > 0)
            printf("\nspeculative round on the gpu: %.1fx faster than on the cpu (goal: >= 4x)\n",
                   round[1] / round[0]);
    }
    sw_backend_free(&gpu);
    sw_backend_free(&exact);
    sw_backend_free(&nograph);
    sw_backend_free(&cpu);
    return rc;
}
