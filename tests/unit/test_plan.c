/*
 * test_plan.c - the placement planner (placement/planner.h) on hand-made nodes and
 * on the test model's real layer sizes: the dynamic programme against an
 * exhaustive search of every assignment of contiguous runs, memory limits,
 * the LM head's node, a standby left out when its stage costs more than it
 * saves, and a plan that cannot fit.
 */
#include <float.h>
#include <stdio.h>
#include <string.h>

#include "gguf.h"
#include "planner.h"
#include "sw_test.h"

static sw_plan_model_t s_m;

/* The cheapest way to cover [at, end) with the nodes not in used, each
 * taking one contiguous run (any order), by trying them all. */
static double s_brute(const sw_plan_node_t *nodes, int n, int at, int end, int *used)
{
    if (at == end)
        return 0;
    double best = DBL_MAX;
    for (int i = 0; i < n; i++) {
        if (used[i])
            continue;
        used[i] = 1;
        for (int e = at + 1; e <= end; e++) {
            const uint64_t need = sw_plan_need_bytes(&s_m, &nodes[i], at, e);
            if (nodes[i].mem_bytes && need > nodes[i].mem_bytes)
                continue;
            const double rest = s_brute(nodes, n, e, end, used);
            if (rest < DBL_MAX) {
                const double c = sw_plan_stage_us(&s_m, &nodes[i], at, e) + rest;
                if (c < best)
                    best = c;
            }
        }
        used[i] = 0;
    }
    return best;
}

/* A uniform toy model: L layers of 10 MiB, an LM head of 30 MiB. */
static void s_toy(int L)
{
    memset(&s_m, 0, sizeof s_m);
    s_m.n_layers = L;
    for (int l = 0; l < L; l++)
        s_m.layer_bytes[l] = 10u << 20;
    s_m.out_bytes = 30u << 20;
}

static void test_against_brute(void)
{
    s_toy(12);
    uint32_t seed = 7;
    for (int trial = 0; trial < 200; trial++) {
        sw_plan_node_t nodes[4];
        const int n = 1 + trial % 4;
        for (int i = 0; i < n; i++) {
            seed = seed * 1103515245u + 12345u;
            nodes[i] = (sw_plan_node_t){
                .name = "n",
                .us_layer = 100 + (seed >> 8) % 900,
                .us_out = 200 + (seed >> 4) % 3000,
                .rtt_us = (seed >> 12) % 2000,
                .mem_bytes =
                    ((seed >> 16) % 3 == 0) ? 0 : (uint64_t)(40 + (seed >> 18) % 120) << 20,
                .kv_layer_bytes = 1u << 20};
        }
        const int begin = 2 + trial % 3;
        int b[4], e[4], used[4] = {0};
        char err[256];
        const double dp = sw_plan_solve(&s_m, begin, 12, nodes, n, b, e, err, sizeof err);
        const double brute = s_brute(nodes, n, begin, 12, used);
        if (brute == DBL_MAX) {
            SW_CHECK(dp < 0);
            continue;
        }
        SW_CHECK_NEAR(dp, brute, 1e-6);
        /* the assignment is a cover of [begin, 12) that fits and costs dp */
        int fits, covered = 0;
        SW_CHECK_NEAR(sw_plan_cost(&s_m, nodes, n, b, e, &fits), dp, 1e-6);
        SW_CHECK(fits);
        for (int i = 0; i < n; i++)
            covered += e[i] - b[i];
        SW_CHECK_INT(covered, 12 - begin);
    }
}

static void test_cases(void)
{
    s_toy(12);
    char err[256];
    int b[3], e[3];
    /* no limits, no round trip: everything on the fastest node, the others stand by */
    sw_plan_node_t nodes[3] = {
        {.name = "slow", .us_layer = 500, .us_out = 1000},
        {.name = "fast", .us_layer = 200, .us_out = 1000},
        {.name = "mid", .us_layer = 300, .us_out = 1000},
    };
    double c = sw_plan_solve(&s_m, 2, 12, nodes, 3, b, e, err, sizeof err);
    SW_CHECK_NEAR(c, 10 * 200 + 1000, 1e-9);
    SW_CHECK(b[1] == 2 && e[1] == 12 && b[0] == e[0] && b[2] == e[2]);
    /* the fast node holds 4 layers at most (40 MiB): it takes 4, the next fastest the rest */
    nodes[1].mem_bytes = 40u << 20;
    c = sw_plan_solve(&s_m, 2, 12, nodes, 3, b, e, err, sizeof err);
    SW_CHECK_INT(e[1] - b[1], 4);
    SW_CHECK_INT(e[2] - b[2], 6);
    SW_CHECK_INT(e[2], 12); /* the LM head on the node with room for it */
    SW_CHECK_NEAR(c, 4 * 200 + 6 * 300 + 1000, 1e-9);
    /* a round trip larger than the saving keeps a node out */
    nodes[1].mem_bytes = 0;
    nodes[1].rtt_us = 5000;
    nodes[2].rtt_us = 10;
    c = sw_plan_solve(&s_m, 2, 12, nodes, 3, b, e, err, sizeof err);
    SW_CHECK(b[1] == e[1]);                       /* fast, far away: left out */
    SW_CHECK_NEAR(c, 10 * 300 + 1000 + 10, 1e-9); /* mid alone */
    /* nothing fits: a plan is refused with the bytes it needs */
    for (int i = 0; i < 3; i++)
        nodes[i].mem_bytes = 20u << 20;
    SW_CHECK(sw_plan_solve(&s_m, 2, 12, nodes, 3, b, e, err, sizeof err) < 0);
    SW_CHECK(strstr(err, "MiB") != NULL);
    printf("refused: %s\n", err);
    /* a range that does not end at the last layer carries no LM head */
    nodes[0].mem_bytes = 0;
    c = sw_plan_solve(&s_m, 2, 6, nodes, 3, b, e, err, sizeof err);
    SW_CHECK(c > 0 && c < 4 * 500 + 1); /* within some node's limits, no LM head */
}

/* The real test model: blk.N bytes add up with the output to what it holds. */
static void test_model(void)
{
    char err[256];
    sw_gguf_t *g = sw_gguf_open(sw_test_model(), err, sizeof err);
    SW_CHECK(g != NULL);
    if (!g)
        return;
    SW_CHECK_INT(sw_plan_model_bytes(g, 30, &s_m, err, sizeof err), 0);
    uint64_t sum = 0;
    for (int l = 0; l < 30; l++) {
        SW_CHECK(s_m.layer_bytes[l] > 0);
        sum += s_m.layer_bytes[l];
    }
    SW_CHECK(s_m.out_bytes > 0);
    printf("test model: %.1f MiB of layers, %.1f MiB for the output (LM head)\n",
           (double)sum / (1 << 20), (double)s_m.out_bytes / (1 << 20));
    SW_CHECK(sum + s_m.out_bytes <= sw_gguf_file_size(g));
    sw_gguf_close(&g);
    /* the announce's numbers as the planner reads them, interpolated between 1 and K+1 rows */
    sw_msg_announce_t a = {.name = "x",
                           .us_layer_1 = 100,
                           .us_layer_k = 900,
                           .probe_rows = 9,
                           .us_out_1 = 50,
                           .us_out_k = 450,
                           .rtt_us = 7,
                           .mem_mib = 3,
                           .kv_kib_layer = 2};
    sw_plan_node_t nd;
    sw_plan_node_from(&a, 5, &nd);
    SW_CHECK_NEAR(nd.us_layer, 500, 1e-9);
    SW_CHECK_NEAR(nd.us_out, 250, 1e-9);
    SW_CHECK(nd.mem_bytes == 3u << 20 && nd.kv_layer_bytes == 2048 && nd.rtt_us == 7);
}

/* A fake clock and forward: every 5th timed call stalls 8 ms (a CPU quota's
 * throttled rest of a period), the others take 0.5 ms. */
typedef struct {
    double now;
    int calls, fail_at;
} s_fake_t;

static int s_fake_run(void *ctx)
{
    s_fake_t *f = ctx;
    if (++f->calls == f->fail_at)
        return -1;
    f->now += (f->calls - 1) % 5 == 0 && f->calls > 1 ? 8.0 : 0.5; /* timed call k: k % 5 == 0 */
    return 0;
}

static double s_fake_now(void *ctx)
{
    return ((s_fake_t *)ctx)->now;
}

/* The probe reports the sustained time of a call, stalls included: the
 * median (the old probe) would say 0.5 ms where a round meets 2 ms. */
static void test_probe(void)
{
    s_fake_t f = {0};
    const sw_plan_probe_t p = {.run = s_fake_run, .now_ms = s_fake_now, .ctx = &f};
    /* the warm-up (call 1) is not counted; timed calls 1..100 span 20 periods of 5 */
    double us = sw_plan_probe_us(&p, 199.0, 9, 2000);
    const int reps = f.calls - 1;
    printf("probe: %d timed calls, %.1f us a call (median of single calls: 500)\n", reps, us);
    SW_CHECK(reps >= 9 && reps % 5 == 0); /* the window ends on a stall at 200 ms */
    SW_CHECK_NEAR(us, 2000.0, 1e-6);
    /* at least min_reps even when the window is over sooner */
    f = (s_fake_t){0};
    us = sw_plan_probe_us(&p, 0.1, 9, 2000);
    SW_CHECK_INT(f.calls, 10);
    SW_CHECK_NEAR(us, (8.0 + 8 * 0.5) * 1e3 / 9, 1e-6); /* timed calls 1..9: the 5th stalls */
    /* no more than max_reps */
    f = (s_fake_t){0};
    (void)sw_plan_probe_us(&p, 1e9, 9, 50);
    SW_CHECK_INT(f.calls, 51);
    /* a failing call: -1, in the warm-up or later */
    f = (s_fake_t){.fail_at = 1};
    SW_CHECK(sw_plan_probe_us(&p, 100, 9, 2000) < 0);
    f = (s_fake_t){.fail_at = 7};
    SW_CHECK(sw_plan_probe_us(&p, 100, 9, 2000) < 0);
}

int main(void)
{
    test_cases();
    test_against_brute();
    test_model();
    test_probe();
    return sw_test_done();
}
