/*
 * bench_rows.c - what one round of speculation can give on this backend:
 * the cost of verifying R rows at once through the whole target (what the
 * stages of a pipeline spend on one round between them), the draft model's
 * cost per step, and from those and a round trip, the speed-up over plain
 * decoding that rounds of R rows can reach at best.
 *
 *   bench_rows [--backend cpu|cuda:N] [--threads N] [--rtt-ms MS[,MS...]] [--accept A]
 *              [--draft D.gguf] [--max-rows R] [--idle-ms MS] TARGET.gguf
 *
 * Rows: one verification call of R rows after a 64-token prompt, median of 5;
 * with --idle-ms each call comes that long after the last, as a stage's does
 * after waiting for a round (an idle CPU computes slower at first: on the
 * shared VMs here a 1-row call after 170-300 ms idle took 1.3-1.5x longer).
 * Bound, for each R (a chain of R-1 drafts, or a tree of R-1 drafts):
 *   plain round  = rtt + c(1)              (one token per round)
 *   round(R)     = rtt + c(R)              (+ (R-1) draft steps when drafting
 *                                           is on the critical path)
 *   "perfect"    = R tokens per round: every draft accepted, drafting free;
 *                  no drafter and no tree shape commits more from R rows, so
 *                  this column bounds every speculation of R rows
 *   "accept A"   = (1 - A^R) / (1 - A) tokens per round: a chain whose drafts
 *                  are each accepted with probability A (independently),
 *                  drafting hidden (drafted ahead, every guess right), and with
 *                  the draft steps in the round (--draft)
 * speed-up = (tokens per round / round(R)) / (1 / plain round). The network
 * is taken as the round trip alone (relay and framing are not added), so the
 * bound is optimistic.
 */
#include <math.h>

#include "bench_util.h"

static const int s_rows[] = {1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 24, 32, 48, 64};

/* The bound table for one round trip, from the row costs c[0..n) (rows s_rows[]). */
static void s_bound(double rtt, double accept, const double *c, int n, double step, int have_draft)
{
    enum { N = sizeof s_rows / sizeof s_rows[0] };
    const double plain = rtt + c[0];
    printf("\nround trip %.0f ms: plain decoding %.0f ms per token (%.2f tok/s)\n\n", rtt, plain,
           1e3 / plain);
    printf("| rows | round ms | perfect: tok/round | perfect: speed-up | accept %.2f: tok/round | "
           "drafting hidden | drafting in the round |\n|---|---|---|---|---|---|---|\n",
           accept);
    int best_p = 0, best_h = 0, best_d = 0;
    double sp[N] = {0}, sh[N] = {0}, sd[N] = {0};
    if (n < 1 || n > N)
        return;
    for (int i = 0; i < n; i++) {
        const int R = s_rows[i];
        const double round = rtt + c[i], tok = (1 - pow(accept, R)) / (1 - accept);
        sp[i] = R * plain / round;
        sh[i] = tok * plain / round;
        sd[i] = tok * plain / (round + (R - 1) * step);
        best_p = sp[i] > sp[best_p] ? i : best_p;
        best_h = sh[i] > sh[best_h] ? i : best_h;
        best_d = sd[i] > sd[best_d] ? i : best_d;
        printf("| %d | %.0f | %d | %.2fx | %.2f | %.2fx | ", R, round, R, sp[i], tok, sh[i]);
        if (have_draft)
            printf("%.2fx |\n", sd[i]);
        else
            printf("- |\n");
    }
    printf("\nbest: perfect drafter %.2fx (%d rows); accept %.2f, drafting hidden %.2fx (%d rows)",
           sp[best_p], s_rows[best_p], accept, sh[best_h], s_rows[best_h]);
    if (have_draft)
        printf("; drafting in the round %.2fx (%d rows)", sd[best_d], s_rows[best_d]);
    printf("\n");
}

int main(int argc, char **argv)
{
    const char *backend = "cpu", *draft = NULL, *target = NULL;
    int threads = 0, max_rows = 32, idle_ms = 0;
    double rtt[8] = {172}, accept = 0.85;
    int n_rtt = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end = NULL;
        if (!strcmp(a, "--backend") && v)
            backend = argv[++i];
        else if (!strcmp(a, "--threads") && v)
            threads = (int)strtol(argv[++i], &end, 10);
        else if (!strcmp(a, "--rtt-ms") && v) { // MS[,MS...]
            const char *p = argv[++i];
            for (n_rtt = 0; n_rtt < 8; p = end + 1) {
                rtt[n_rtt] = strtod(p, &end);
                if (end == p || !(rtt[n_rtt] >= 0)) {
                    end = (char *)"x";
                    break;
                }
                n_rtt++;
                if (*end != ',')
                    break;
            }
        } else if (!strcmp(a, "--accept") && v)
            accept = strtod(argv[++i], &end);
        else if (!strcmp(a, "--draft") && v)
            draft = argv[++i];
        else if (!strcmp(a, "--idle-ms") && v)
            idle_ms = (int)strtol(argv[++i], &end, 10);
        else if (!strcmp(a, "--max-rows") && v)
            max_rows = (int)strtol(argv[++i], &end, 10);
        else if (a[0] != '-' && !target)
            target = a;
        else {
            fprintf(stderr,
                    "usage: bench_rows [--backend cpu|cuda:N] [--threads N] [--rtt-ms MS[,MS...]] "
                    "[--accept A] [--draft D.gguf] [--max-rows R] [--idle-ms MS] TARGET.gguf\n");
            return 2;
        }
        if (end && *end) {
            fprintf(stderr,
                    "bench_rows: '%s' is not a number (or, for --rtt-ms, up to 8 "
                    "numbers >= 0 separated by commas) for %s\n",
                    argv[i], a);
            return 2;
        }
    }
    if (!target) {
        fprintf(stderr, "bench_rows: no target model given (TARGET.gguf)\n");
        return 2;
    }
    if (threads < 0 || !(accept >= 0 && accept < 1) || max_rows < 1 || max_rows > 64 ||
        idle_ms < 0 || idle_ms > 10000) {
        fprintf(stderr, "bench_rows: need --threads >= 0, --accept in [0, 1), "
                        "--max-rows in [1, 64], --idle-ms in [0, 10000]\n");
        return 2;
    }
    char err[256];
    sw_backend_t *be = sw_backend_new(backend, threads, err, sizeof err);
    if (!be) {
        fprintf(stderr, "bench_rows: %s\n", err);
        return 1;
    }
    int rc = 1;
    sw_model_t *t = bench_load(target, be), *d = draft ? bench_load(draft, be) : NULL;
    sw_kv_t *kt = t ? sw_kv_new(t, 256) : NULL, *kd = d ? sw_kv_new(d, 256) : NULL;
    float *logits = NULL;
    if (t && kt && (!draft || (d && kd))) {
        int V = sw_model_hparams(t)->n_vocab;
        if (d && sw_model_hparams(d)->n_vocab < V)
            V = sw_model_hparams(d)->n_vocab; // token ids valid for both
        bench_fill(V);
        int vmax = sw_model_hparams(t)->n_vocab;
        if (d && sw_model_hparams(d)->n_vocab > vmax)
            vmax = sw_model_hparams(d)->n_vocab;
        logits = malloc((size_t)64 * vmax * sizeof *logits);
    }
    if (!logits) {
        if (t && (!draft || d))
            fprintf(stderr, "bench_rows: out of memory\n");
        goto out;
    }

    const int n_r = (int)(sizeof s_rows / sizeof s_rows[0]);
    double c[sizeof s_rows / sizeof s_rows[0]];
    int n = 0;
    printf("backend: %s; target %s; each call %d ms after the last\n\n", sw_backend_desc(be),
           bench_base(target), idle_ms);
    printf("| rows | verify ms | ms per row | ms per row past the first |\n|---|---|---|---|\n");
    for (; n < n_r && s_rows[n] <= max_rows; n++) {
        if ((c[n] = bench_verify(t, kt, s_rows[n], logits, idle_ms)) < 0)
            goto out;
        printf("| %d | %.1f | %.1f | %s", s_rows[n], c[n], c[n] / s_rows[n], n ? "" : "- |\n");
        if (n)
            printf("%.1f |\n", (c[n] - c[0]) / (s_rows[n] - 1));
        fflush(stdout);
    }
    double step = 0;
    if (d) {
        double k8 = bench_draft(d, kd, 8, logits);
        if (k8 < 0)
            goto out;
        step = k8 / 8;
        printf("\ndraft model %s: %.1f ms per greedy step (8 steps: %.1f ms)\n", bench_base(draft),
               step, k8);
    }

    for (int i = 0; i < n_rtt; i++)
        s_bound(rtt[i], accept, c, n, step, d != NULL);
    rc = 0;
out:
    free(logits);
    sw_kv_free(&kt);
    sw_kv_free(&kd);
    sw_model_free(&t);
    sw_model_free(&d);
    sw_backend_free(&be);
    return rc;
}
