/*
 * planner.c - the placement planner (planner.h): a dynamic programme over the
 * layers, for every ordering of a few nodes.
 */
#include "planner.h"

#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int sw_plan_model_bytes(const sw_gguf_t *g, int n_layers, sw_plan_model_t *m, char *err,
                        size_t err_len)
{
    if (n_layers < 1 || n_layers > SW_WIRE_MAX_LAYERS) {
        snprintf(err, err_len, "the model has %d layers (1..%d)", n_layers, SW_WIRE_MAX_LAYERS);
        return -1;
    }
    memset(m, 0, sizeof *m);
    m->n_layers = n_layers;
    uint64_t embd = 0;
    int has_output = 0;
    for (int64_t i = 0; i < sw_gguf_tensor_count(g); i++) {
        const sw_gguf_tensor_t *t = sw_gguf_tensor(g, i);
        char name[96];
        const size_t len = t->name.len < sizeof name - 1 ? (size_t)t->name.len : sizeof name - 1;
        memcpy(name, t->name.ptr, len);
        name[len] = 0;
        int layer = -1, at = 0;
        if (sscanf(name, "blk.%d.%n", &layer, &at) == 1 && at > 0) {
            if (layer >= 0 && layer < n_layers)
                m->layer_bytes[layer] += t->n_bytes;
        } else if (!strcmp(name, "output.weight")) {
            m->out_bytes += t->n_bytes;
            has_output = 1;
        } else if (!strcmp(name, "output_norm.weight")) {
            m->out_bytes += t->n_bytes;
        } else if (!strcmp(name, "token_embd.weight")) {
            embd = t->n_bytes;
        }
    }
    if (!has_output)
        m->out_bytes += embd; /* tied embeddings: the tail maps token_embd as its LM head */
    return 0;
}

uint64_t sw_plan_need_bytes(const sw_plan_model_t *m, const sw_plan_node_t *nd, int b, int e)
{
    uint64_t need = 0;
    for (int l = b; l < e; l++)
        need += m->layer_bytes[l] + nd->kv_layer_bytes;
    if (e == m->n_layers)
        need += m->out_bytes;
    return need;
}

double sw_plan_stage_us(const sw_plan_model_t *m, const sw_plan_node_t *nd, int b, int e)
{
    return (e - b) * nd->us_layer + (e == m->n_layers ? nd->us_out : 0) + nd->rtt_us;
}

/* One ordering: g over (node j, first layer l); choice[j][l] = layers node j takes. */
static double s_dp(const sw_plan_model_t *m, int begin, int end, const sw_plan_node_t *nodes,
                   const int *ord, int n, double *g, int *choice, int *b_out, int *e_out)
{
    const int W = end - begin + 1;
#define G(j, l) g[(size_t)(j) * (size_t)W + (size_t)((l)-begin)]
#define C(j, l) choice[(size_t)(j) * (size_t)W + (size_t)((l)-begin)]
    for (int l = begin; l <= end; l++)
        G(n, l) = l == end ? 0 : DBL_MAX;
    for (int j = n - 1; j >= 0; j--) {
        const sw_plan_node_t *nd = &nodes[ord[j]];
        for (int l = begin; l <= end; l++) {
            G(j, l) = G(j + 1, l); /* node j stays a standby */
            C(j, l) = 0;
            uint64_t need = 0;
            for (int e = l + 1; e <= end; e++) {
                need += m->layer_bytes[e - 1] + nd->kv_layer_bytes;
                const uint64_t tot = need + (e == m->n_layers ? m->out_bytes : 0);
                if (nd->mem_bytes && tot > nd->mem_bytes) {
                    if (e < m->n_layers)
                        break; /* more layers only need more */
                    continue;
                }
                if (G(j + 1, e) == DBL_MAX)
                    continue;
                const double c = sw_plan_stage_us(m, nd, l, e) + G(j + 1, e);
                if (c < G(j, l)) {
                    G(j, l) = c;
                    C(j, l) = e - l;
                }
            }
        }
    }
    const double best = G(0, begin);
    if (best == DBL_MAX)
        return -1;
    for (int j = 0, l = begin; j < n; j++) {
        const int c = C(j, l);
        b_out[ord[j]] = c ? l : 0;
        e_out[ord[j]] = c ? l + c : 0;
        l += c;
    }
    return best;
#undef G
#undef C
}

int sw_plan_next_perm(int *a, int n)
{
    int i = n - 2;
    while (i >= 0 && a[i] >= a[i + 1])
        i--;
    if (i < 0)
        return 0;
    int j = n - 1;
    while (a[j] <= a[i])
        j--;
    int t = a[i];
    a[i] = a[j];
    a[j] = t;
    for (int x = i + 1, y = n - 1; x < y; x++, y--) {
        t = a[x];
        a[x] = a[y];
        a[y] = t;
    }
    return 1;
}

static const sw_plan_node_t *s_sort_nodes;
static int s_by_speed(const void *a, const void *b)
{
    const double x = s_sort_nodes[*(const int *)a].us_layer;
    const double y = s_sort_nodes[*(const int *)b].us_layer;
    if (x != y)
        return x < y ? -1 : 1;
    return *(const int *)a - *(const int *)b;
}

double sw_plan_solve(const sw_plan_model_t *m, int begin, int end, const sw_plan_node_t *nodes,
                     int n, int *begin_out, int *end_out, char *err, size_t err_len)
{
    if (begin < 0 || end > m->n_layers || begin >= end || n < 1 || n > SW_PLAN_MAX_NODES) {
        snprintf(err, err_len, "nothing to plan: layers [%d, %d) of %d over %d node(s)", begin, end,
                 m->n_layers, n);
        return -1;
    }
    const size_t cells = (size_t)(n + 1) * (size_t)(end - begin + 1);
    double *g = malloc(cells * sizeof *g);
    int *choice = malloc(cells * sizeof *choice);
    int ord[SW_PLAN_MAX_NODES], b[SW_PLAN_MAX_NODES], e[SW_PLAN_MAX_NODES];
    double best = -1;
    if (!g || !choice) {
        snprintf(err, err_len, "out of memory for the plan");
        free(g);
        free(choice);
        return -1;
    }
    for (int i = 0; i < n; i++)
        ord[i] = i;
    if (n > SW_PLAN_PERMUTE_MAX) {
        s_sort_nodes = nodes;
        qsort(ord, (size_t)n, sizeof ord[0], s_by_speed);
    }
    do {
        const double c = s_dp(m, begin, end, nodes, ord, n, g, choice, b, e);
        if (c >= 0 && (best < 0 || c < best)) {
            best = c;
            memcpy(begin_out, b, sizeof b[0] * (size_t)n);
            memcpy(end_out, e, sizeof e[0] * (size_t)n);
        }
    } while (n <= SW_PLAN_PERMUTE_MAX && sw_plan_next_perm(ord, n));
    free(g);
    free(choice);
    if (best < 0) {
        uint64_t need = 0, have = 0;
        for (int l = begin; l < end; l++)
            need += m->layer_bytes[l];
        if (end == m->n_layers)
            need += m->out_bytes;
        for (int i = 0; i < n; i++)
            have += nodes[i].mem_bytes;
        snprintf(err, err_len,
                 "layers [%d, %d) need %.1f MiB of weights (plus KV) and the %d node(s) offer "
                 "%.1f MiB: start more nodes or give them more --mem-mib",
                 begin, end, (double)need / (1 << 20), n, (double)have / (1 << 20));
    }
    return best;
}

double sw_plan_cost(const sw_plan_model_t *m, const sw_plan_node_t *nodes, int n, const int *begin,
                    const int *end, int *fits)
{
    double c = 0;
    *fits = 1;
    for (int i = 0; i < n; i++) {
        if (begin[i] >= end[i])
            continue;
        c += sw_plan_stage_us(m, &nodes[i], begin[i], end[i]);
        if (nodes[i].mem_bytes &&
            sw_plan_need_bytes(m, &nodes[i], begin[i], end[i]) > nodes[i].mem_bytes)
            *fits = 0;
    }
    return c;
}

void sw_plan_node_from(const sw_msg_announce_t *a, int rows, sw_plan_node_t *out)
{
    memset(out, 0, sizeof *out);
    out->name = a->name;
    double t = a->us_layer_1, o = a->us_out_1;
    if (rows > 1 && a->probe_rows >= 2) {
        const double f = (double)(rows - 1) / (double)(a->probe_rows - 1);
        t = a->us_layer_1 + f * ((double)a->us_layer_k - a->us_layer_1);
        o = a->us_out_1 + f * ((double)a->us_out_k - a->us_out_1);
    }
    out->us_layer = t;
    out->us_out = o > 0 ? o : 0;
    out->rtt_us = a->rtt_us;
    out->mem_bytes = (uint64_t)a->mem_mib << 20;
    out->kv_layer_bytes = (uint64_t)a->kv_kib_layer << 10;
}

double sw_plan_probe_us(const sw_plan_probe_t *p, double window_ms, int min_reps, int max_reps)
{
    if (p->run(p->ctx) != 0) /* the warm-up: caches, page faults, lazy allocations */
        return -1;
    const double t0 = p->now_ms(p->ctx);
    int reps = 0;
    double t = t0;
    while (reps < max_reps && (reps < min_reps || t - t0 < window_ms)) {
        if (p->run(p->ctx) != 0)
            return -1;
        reps++;
        t = p->now_ms(p->ctx);
    }
    return reps ? (t - t0) * 1e3 / reps : -1;
}
