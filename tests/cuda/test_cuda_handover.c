/*
 * test_cuda_handover.c - hidden states handed from one GPU of a group to the
 * next while both still work (label cuda; skips without a GPU): a prompt of
 * more than one chunk (512 rows on a GPU) on the groups "cuda:0,0" and, with
 * two GPUs, "cuda:0,1" by peer copies (SW_NCCL=0) and by NCCL, then decode
 * rows, must give the logits of the same rows on one GPU bit for bit.
 *
 * What it guards: the copy of chunk c + 1 into the next GPU's input must wait
 * until that GPU has finished chunk c (a write after a read across streams).
 * forward.c synchronises a chunk only when it wants logits, so the prompt's
 * first chunk is still in flight on the second GPU when the first GPU hands
 * over the second chunk; only the last rows want logits here, so nothing
 * synchronises in between.
 *
 * On the CPU emulation each group runs under several of the emulation's
 * stream schedules (tests/cudaemu/sched.cc; s_group says which): late=waiters
 * is the order in which a copy that does not wait for its receiver overwrites
 * the previous chunk's input. On a GPU the hardware picks the order, once per
 * group. The order check of every launch is off here (SW_CUDA_EMU_CHECK=0,
 * tests/CMakeLists.txt): the other cuda tests run these kernels with it.
 */
#include "cuda_test.h"

enum {
    S_PROMPT = 600, // rows: a chunk of 512 and one of 88
    S_WANT = 4,     // the prompt's last rows that want logits
    S_DECODE = 3,   // single rows after it
    S_ROWS = S_WANT + S_DECODE
};

static int32_t s_tok[S_PROMPT + S_DECODE];

/* The logits of the prompt's last S_WANT rows and of S_DECODE single rows on m. */
static int s_run(sw_model_t *m, float *logits, int V)
{
    sw_kv_t *kv = sw_kv_new(m, S_PROMPT + S_DECODE + 8);
    if (!kv)
        return -1;
    float *at = logits;
    int rc = cuda_test_fwd(m, kv, s_tok, NULL, S_PROMPT, NULL, at, S_WANT, 1);
    for (int i = 0; rc == 0 && i < S_DECODE; i++) {
        at = logits + (size_t)(S_WANT + i) * V;
        rc = cuda_test_fwd(m, kv, &s_tok[S_PROMPT + i], NULL, 1, NULL, at, 1, 0);
    }
    sw_kv_free(&kv);
    return rc;
}

/* The schedules of the emulation each group runs under (one run on a GPU):
 * late=waiters is the adversarial one for a hand-over (the receiving stream
 * late, the sender ahead of it); lazy is the default's; eager and a random
 * one on the peer copies between two GPUs, the path Kaggle's T4s take
 * without NCCL. */
#ifdef SW_CUDA_EMU
static const char *const s_sched_short[] = {"lazy", "late=waiters"};
static const char *const s_sched_long[] = {"lazy", "late=waiters", "eager", "random=1"};
#endif

/* The group `name` (NCCL off when nccl is 0) against ref. */
static void s_group(const char *path, const char *name, int nccl, const float *ref, float *got,
                    int V)
{
#ifdef SW_CUDA_EMU
    const int many = !nccl && strcmp(name, "cuda:0,0") != 0;
    const char *const *sched = many ? s_sched_long : s_sched_short;
    const size_t n_sched = many ? 4 : 2;
#else
    static const char *const sched[] = {"the GPU's"};
    const size_t n_sched = 1;
#endif
    if (!nccl)
        setenv("SW_NCCL", "0", 1);
    sw_backend_t *be = cuda_test_backend(name);
    unsetenv("SW_NCCL");
    sw_model_t *m = cuda_test_load(path, be, 0, -1);
    SW_CHECK(m != NULL);
    for (size_t k = 0; m && k < n_sched; k++) {
#ifdef SW_CUDA_EMU
        SW_CHECK_INT(swemu_streams(sched[k]), 0);
#endif
        const cuda_paths_t p0 = cuda_test_paths(be);
        const int ok = s_run(m, got, V) == 0;
        const int same = ok && !memcmp(got, ref, (size_t)S_ROWS * V * sizeof(float));
        const cuda_paths_t p1 = cuda_test_paths(be);
        char what[160];
        snprintf(what, sizeof what, "%s%s, %d-row prompt + %d rows, %s schedule vs one GPU", name,
                 nccl ? "" : " (SW_NCCL=0)", S_PROMPT, S_DECODE, sched[k]);
        cuda_test_row(what, !ok ? "FAILED" : same ? "bit-identical" : "DIFFERS");
        SW_CHECK(ok);
        SW_CHECK(same);
        /* The hand-overs went the way the group was asked to take. */
        if (!nccl || !strcmp(name, "cuda:0,0"))
            SW_CHECK(p1.peer > p0.peer && p1.nccl == p0.nccl);
        else if (p1.nccl == p0.nccl)
            sw_test_skip_part("cuda:0,1 handed over without NCCL (libnccl missing?)");
    }
#ifdef SW_CUDA_EMU
    SW_CHECK_INT(swemu_streams("lazy"), 0);
#endif
    sw_model_free(&m);
    sw_backend_free(&be);
}

int main(void)
{
    cuda_test_require_gpu();
    char paths[8][512];
    cuda_test_models(paths, 8);
    const char *path = paths[0]; // the first model: what is tested does not depend on it
    sw_backend_t *gpu = cuda_test_backend("cuda:0");
    sw_model_t *mg = cuda_test_load(path, gpu, 0, -1);
    SW_CHECK(mg != NULL);
    if (!mg) {
        sw_backend_free(&gpu);
        return sw_test_done();
    }
    const int V = sw_model_hparams(mg)->n_vocab;
    uint32_t x = 4242;
    for (int i = 0; i < S_PROMPT + S_DECODE; i++) {
        x = x * 1664525u + 1013904223u;
        s_tok[i] = (int32_t)((x >> 8) % (uint32_t)V);
    }
    float *ref = malloc((size_t)S_ROWS * V * sizeof(float));
    float *got = malloc((size_t)S_ROWS * V * sizeof(float));
    SW_CHECK(ref && got);
    if (ref && got && s_run(mg, ref, V) == 0) {
        SW_CHECK(cuda_test_finite(ref, (size_t)S_ROWS * V));
        s_group(path, "cuda:0,0", 0, ref, got, V);
        if (sw_cuda_device_count() > 1) {
            s_group(path, "cuda:0,1", 0, ref, got, V);
            s_group(path, "cuda:0,1", 1, ref, got, V);
        } else {
            cuda_test_one_gpu("cuda:0,1 (the group cuda:0,0 ran)");
        }
    } else {
        SW_CHECK(!"the reference run on cuda:0");
    }
    free(ref);
    free(got);
    sw_model_free(&mg);
    sw_backend_free(&gpu);
    return sw_test_done();
}
