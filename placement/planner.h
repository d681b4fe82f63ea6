/*
 * planner.h - placement: which contiguous layer ranges the nodes of a cluster
 * should serve (docs/architecture.md, "Placement").
 *
 * What it minimises: the time of one round of one session, which crosses
 * every stage in turn: the sum over the stages used of (the stage's layers
 * x its measured time per layer at the round's rows) + the LM head on the
 * last stage + each stage's round trip to the relay (a hop from stage a to
 * stage b costs about half a's round trip plus half b's, and every stage is
 * left once and entered once). Constraint: a stage's weights (its layers,
 * the output norm and LM head on the last) plus its sessions' KV cache fit
 * the memory it announced. A node may be left without layers (a standby):
 * with a round trip, one more stage can cost more than it saves.
 *
 * Algorithm: dynamic programming over the layers for one ordering of the
 * nodes (g[j][l] = the cheapest way to cover layers [l, end) with nodes
 * j.. in that order, each taking a contiguous run or none), O(nodes x
 * layers^2); over every ordering when there are at most SW_PLAN_PERMUTE_MAX
 * nodes (the order decides who carries the LM head and its memory), else
 * the nodes sorted fastest first.
 *
 * What it does not model: batching of many sessions (throughput of a full
 * pipeline is bounded by its slowest stage, not by this sum), and link
 * bandwidth (the hidden states of a round are n_embd x rows x 4 bytes:
 * 2.3 KB a row for SmolLM2, small against a round trip).
 */
#ifndef SW_PLAN_H
#define SW_PLAN_H

#include <stdint.h>

#include "codec.h"
#include "gguf.h"

#define SW_PLAN_MAX_NODES 64  /* auto nodes one plan places */
#define SW_PLAN_PERMUTE_MAX 6 /* every ordering up to this many nodes */

/* One node as the planner sees it. */
typedef struct sw_plan_node {
    const char *name;        // peer name
    double us_layer;         // us one layer takes at the planned rows
    double us_out;           // us of the output norm + LM head at those rows (last stage)
    double rtt_us;           // round trip to the relay
    uint64_t mem_bytes;      // weights + KV it can hold (0 = no limit)
    uint64_t kv_layer_bytes; // KV of its sessions per layer
} sw_plan_node_t;

/* The model: bytes of each layer's weights and of the last stage's extra
 * (output norm and LM head). */
typedef struct sw_plan_model {
    int n_layers;
    uint64_t layer_bytes[SW_WIRE_MAX_LAYERS];
    uint64_t out_bytes;
} sw_plan_model_t;

/* The weight bytes of every layer and of the output from a GGUF's tensor
 * table ("blk.N.*"; output_norm + output, or the tied token_embd). 0, or -1
 * with err. */
int sw_plan_model_bytes(const sw_gguf_t *g, int n_layers, sw_plan_model_t *m, char *err,
                        size_t err_len);

/* Bytes node nd needs for layers [b, e) (e == n_layers: with the output). */
uint64_t sw_plan_need_bytes(const sw_plan_model_t *m, const sw_plan_node_t *nd, int b, int e);

/* The cost (us) of node nd serving [b, e): its layers, the output when e
 * is the last layer, its round trip. */
double sw_plan_stage_us(const sw_plan_model_t *m, const sw_plan_node_t *nd, int b, int e);

/*
 * Partitions layers [begin, end) over the n nodes: node i gets
 * [begin_out[i], end_out[i]), or [0, 0) when left as a standby. Returns the
 * plan's cost in us (the sum of sw_plan_stage_us of the nodes used), or a
 * negative value when no assignment fits the memory limits (err says how
 * many bytes the range needs).
 */
double sw_plan_solve(const sw_plan_model_t *m, int begin, int end, const sw_plan_node_t *nodes,
                     int n, int *begin_out, int *end_out, char *err, size_t err_len);

/* The cost (us) of an assignment: the sum of sw_plan_stage_us over the
 * nodes with a range; *fits = 0 when one of them lacks the memory. */
double sw_plan_cost(const sw_plan_model_t *m, const sw_plan_node_t *nodes, int n, const int *begin,
                    const int *end, int *fits);

/* The next permutation of a (n entries) in lexicographic order; 0 after the last. */
int sw_plan_next_perm(int *a, int n);

/*
 * The probe's timing (node/placement.c): after one warm-up call, calls run until
 * at least window_ms of wall time (now_ms) have passed and it ran min_reps
 * times (at most max_reps), and returns the SUSTAINED time of one call in
 * us: the wall time from the first timed call's start to the last one's end
 * over the calls. Not the median of single calls: a node held to a share of
 * a CPU (a cgroup quota, a container's --cpus, other processes on the same
 * cores) runs some calls at full speed and stalls others for the rest of
 * the scheduler's period; the median hides the stalls, which every round of
 * a loaded stage meets (measured: a 0.3-core cgroup probed at the speed of
 * a whole core, 4x below the measured round, docs/benchmarks.md). The window
 * should span several scheduler periods (CFS: 100 ms by default). -1 when a
 * call fails.
 */
typedef struct sw_plan_probe {
    int (*run)(void *ctx);       /* one timed call: 0, or -1 on failure */
    double (*now_ms)(void *ctx); /* a monotonic clock, ms */
    void *ctx;
} sw_plan_probe_t;
double sw_plan_probe_us(const sw_plan_probe_t *p, double window_ms, int min_reps, int max_reps);

/* A node of a peer table for the planner at `rows` rows (1, or the probe's
 * K+1 rows; another value interpolates linearly between the two). */
void sw_plan_node_from(const sw_msg_announce_t *a, int rows, sw_plan_node_t *out);

#endif
