/*
 * plan.c - `shardwire plan`: reads the relay's peer table and prints the
 * layer ranges that minimise the round time for the nodes there
 * (docs/architecture.md, "Placement"; the planner is placement/planner.h).
 *
 *   shardwire plan --model M.gguf --relay HOST:PORT [--rows N] [--json] SECURITY
 *
 * The head and the nodes started with fixed --layers keep their ranges; the
 * layers after them are planned over every auto node of the model (placed
 * or standby), as the head plans them when none is placed yet. Printed: the
 * plan with each stage's predicted time, the predicted round time at 1 row
 * and at the probe's K+1 rows, and for comparison the even split of the
 * same layers over the same auto nodes and the assignment they hold now.
 */
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "backend.h"
#include "client.h"
#include "cmds.h"
#include "hub.h"
#include "model.h"
#include "planner.h"

enum { O_ROWS = SW_OPT_OWN };

static const sw_opt_t s_opts[] = {
    {"model", 'm', "M.gguf", "the model the nodes serve (its fingerprint picks them)"},
    {"rows", O_ROWS, "N",
     "rows of the round to plan for: 1 (decoding without drafts,\ndefault) up to 512; the nodes' "
     "probe at 1 and K+1 rows\nis interpolated"},
    {"json", SW_OPT_JSON, NULL, "print the plan as one JSON object"},
};

static const sw_opt_group_t s_groups[] = {
    SW_ARGS_GROUP(NULL, s_opts),
    SW_ARGS_GROUP_RELAY,
    SW_ARGS_GROUP_SECURITY,
};

static const sw_args_spec_t s_spec = {
    .prog = "shardwire plan",
    .usage = "--model M.gguf --relay HOST:PORT [--rows N] [--json] SECURITY",
    .about = "  The assignment of layer ranges to the auto nodes (--layers auto) that\n"
             "  minimises one round's time: each stage's layers x its probed time per\n"
             "  layer, the LM head on the last, every stage's round trip to the relay;\n"
             "  memory limits respected. The head applies the same plan (--auto-nodes).\n",
    .groups = s_groups,
    .n_groups = SW_ARGS_COUNT(s_groups),
};

/* "B:E" in a static buffer. */
static const char *s_range(int b, int e)
{
    static char buf[24];
    snprintf(buf, sizeof buf, "%d:%d", b, e);
    return buf;
}

/* A table row as the planner's announce. */
static void s_node(const sw_client_peer_t *p, int rows, sw_plan_node_t *out)
{
    const sw_msg_announce_t a = {.name = p->name,
                                 .mem_mib = p->mem_mib,
                                 .us_layer_1 = p->us_layer_1,
                                 .us_layer_k = p->us_layer_k,
                                 .probe_rows = p->probe_rows,
                                 .rtt_us = p->rtt_us,
                                 .kv_kib_layer = p->kv_kib_layer,
                                 .us_out_1 = p->us_out_1,
                                 .us_out_k = p->us_out_k};
    sw_plan_node_from(&a, rows, out);
}

typedef struct s_view {
    const sw_client_peer_t *head;                     // the head of this model
    const sw_client_peer_t *fixed[SW_WIRE_MAX_ROUTE]; // stages with fixed ranges after it
    int n_fixed;
    const sw_client_peer_t *autos[SW_PLAN_MAX_NODES]; // the auto nodes of this model
    int n_auto;
    int begin, end; // the layers planned over them
} s_view_t;

/* Reads the table: the head, the fixed stages that follow it, the auto nodes. */
static int s_view(const sw_client_table_t *t, const char *fp, int L, s_view_t *v)
{
    memset(v, 0, sizeof *v);
    for (int i = 0; i < t->n_peers; i++) {
        const sw_client_peer_t *p = &t->peers[i];
        if (!p->is_node || strcmp(p->model, fp) != 0 || (t->need_key && !p->key_bound))
            continue;
        if (p->auto_place && p->probe_rows && v->n_auto < SW_PLAN_MAX_NODES)
            v->autos[v->n_auto++] = p;
        else if (!p->auto_place && p->layer_begin == 0 && !v->head)
            v->head = p;
    }
    if (!v->head)
        return -1;
    int at = (int)v->head->layer_end;
    for (int moved = 1; moved && at < L;) {
        moved = 0;
        for (int i = 0; i < t->n_peers && v->n_fixed < SW_WIRE_MAX_ROUTE; i++) {
            const sw_client_peer_t *p = &t->peers[i];
            if (p->is_node && !p->auto_place && !strcmp(p->model, fp) &&
                (int)p->layer_begin == at && (int)p->layer_end > at &&
                (!t->need_key || p->key_bound)) {
                v->fixed[v->n_fixed++] = p;
                at = (int)p->layer_end;
                moved = 1;
                break;
            }
        }
    }
    v->begin = at;
    v->end = L;
    for (int i = 0; i < t->n_peers; i++) {
        const sw_client_peer_t *p = &t->peers[i];
        if (p->is_node && !p->auto_place && !strcmp(p->model, fp) && (int)p->layer_begin > at &&
            (int)p->layer_begin < v->end)
            v->end = (int)p->layer_begin;
    }
    return 0;
}

/* Layers [begin, end) split evenly over the n nodes in order (the later ones one
 * more when it does not divide), into eb / ee: the cost, *fits. */
static double s_even(const sw_plan_model_t *pm, const sw_plan_node_t *nodes, int n,
                     const int *order, int begin, int end, int *eb, int *ee, int *fits)
{
    const int span = end - begin;
    for (int j = 0, l = begin; j < n; j++) {
        const int share = span / n + (j >= n - span % n ? 1 : 0);
        eb[order[j]] = l;
        ee[order[j]] = l + share;
        l += share;
    }
    return sw_plan_cost(pm, nodes, n, eb, ee, fits);
}

/* The fixed stages' cost at rows: the head's and the fixed stages' probed layers (0
 * when they did not probe) and round trips. */
static double s_fixed_us(const sw_plan_model_t *pm, const s_view_t *v, int rows)
{
    sw_plan_node_t nd;
    s_node(v->head, rows, &nd);
    double c = sw_plan_stage_us(pm, &nd, 0, (int)v->head->layer_end);
    for (int i = 0; i < v->n_fixed; i++) {
        s_node(v->fixed[i], rows, &nd);
        c += sw_plan_stage_us(pm, &nd, (int)v->fixed[i]->layer_begin, (int)v->fixed[i]->layer_end);
    }
    return c;
}

int cmd_plan(int argc, char **argv)
{
    const char *P = s_spec.prog, *v, *model = NULL;
    sw_args_relay_t ra = SW_ARGS_RELAY_DEFAULT;
    sw_sec_args_t sa = {.e2e_optional = 1};
    int json = 0, rows = 1, c, rc = 1;
    sw_args_t a;
    sw_args_init(&a, &s_spec, argc, argv);
    while ((c = sw_args_next(&a, &v)) >= 0) {
        int h = sw_sec_args_opt(&sa, c, v);
        if (!h)
            h = sw_args_relay_opt(P, &ra, c, v);
        if (!h && c == SW_OPT_JSON)
            h = json = 1;
        if (!h && c == 'm') {
            model = v;
            h = 1;
        }
        if (!h && c == O_ROWS)
            h = sw_arg_int(P, "--rows", v, 1, SW_WIRE_MAX_ROWS, &rows) == 0 ? 1 : -1;
        if (h <= 0)
            return 2;
    }
    if ((c = sw_args_finish(&a, c, 0)) >= 0)
        return c;
    if (!model || !ra.relay[0])
        return sw_args_exit(
            sw_args_fail(&s_spec, "%s is required", !model ? "--model M.gguf" : "--relay"));
    char err[1024] = "";
    static char path[PATH_MAX];
    if (sw_hub_model_arg(model, NULL, path, sizeof path, err, sizeof err) != 0) {
        fprintf(stderr, "shardwire plan: %s\n", err);
        return 1;
    }
    /* the whole model mapped on the CPU: its fingerprint and layer sizes, no weight read */
    sw_backend_t *be = sw_backend_new("cpu", 1, err, sizeof err);
    sw_model_t *m = be ? sw_model_load(path, 0, -1, be, err, sizeof err) : NULL;
    static sw_plan_model_t pm;
    char fp[65] = "";
    int L = 0;
    if (m) {
        L = sw_model_hparams(m)->n_layer;
        sw_model_fingerprint(m, fp);
    }
    if (!m || sw_plan_model_bytes(sw_model_gguf(m), L, &pm, err, sizeof err) != 0) {
        fprintf(stderr, "shardwire plan: %s: %s\n", path, err);
        sw_model_free(&m);
        sw_backend_free(&be);
        return 1;
    }
    sw_model_free(&m);
    sw_backend_free(&be);
    sw_client_t *cl = cli_connect("plan", &sa, ra.relay, ra.connect_s, &rc);
    if (!cl)
        return rc;
    sw_client_table_t t;
    if (sw_client_status(cl, &t, 5000, err, sizeof err) != 0) {
        fprintf(stderr, "shardwire plan: the relay at %s did not answer: %s\n", ra.relay, err);
        sw_client_destroy(&cl);
        return 1;
    }
    s_view_t vw;
    rc = 1;
    if (s_view(&t, fp, L, &vw) != 0) {
        fprintf(stderr,
                "shardwire plan: no head of %s (fingerprint %.12s...) is connected to the relay\n",
                path, fp);
        goto out;
    }
    if (vw.n_auto == 0 || vw.begin >= vw.end) {
        fprintf(stderr,
                "shardwire plan: %s: start nodes with --layers auto (the head and the fixed "
                "stages cover layers [0, %d) of %d)\n",
                vw.n_auto ? "nothing to plan" : "no auto node of this model is connected", vw.begin,
                L);
        goto out;
    }
    sw_plan_node_t nodes[SW_PLAN_MAX_NODES], nodes_k[SW_PLAN_MAX_NODES];
    const int K1 = (int)vw.autos[0]->probe_rows;
    for (int i = 0; i < vw.n_auto; i++) {
        s_node(vw.autos[i], rows, &nodes[i]);
        s_node(vw.autos[i], K1, &nodes_k[i]);
    }
    int b[SW_PLAN_MAX_NODES], e[SW_PLAN_MAX_NODES], eb[SW_PLAN_MAX_NODES], ee[SW_PLAN_MAX_NODES],
        cb[SW_PLAN_MAX_NODES], ce[SW_PLAN_MAX_NODES];
    const double cost =
        sw_plan_solve(&pm, vw.begin, vw.end, nodes, vw.n_auto, b, e, err, sizeof err);
    if (cost < 0) {
        fprintf(stderr, "shardwire plan: %s\n", err);
        goto out;
    }
    const double fixed = s_fixed_us(&pm, &vw, rows), fixed_k = s_fixed_us(&pm, &vw, K1);
    int fits_k, fits_even, fits_cur = 1, placed = 1;
    const double plan_k = sw_plan_cost(&pm, nodes_k, vw.n_auto, b, e, &fits_k);
    /* the even split of the same layers over the same nodes: in the plan's order, or in
     * the order (of every one up to SW_PLAN_PERMUTE_MAX nodes) that fits their memory and
     * costs least */
    int order[SW_PLAN_MAX_NODES], n_ord = 0;
    for (int l = vw.begin; l < vw.end;)
        for (int i = 0; i < vw.n_auto; i++)
            if (b[i] == l && e[i] > l) {
                order[n_ord++] = i;
                l = e[i];
                break;
            }
    for (int i = 0; i < vw.n_auto; i++)
        if (b[i] == e[i])
            order[n_ord++] = i;
    double even = s_even(&pm, nodes, vw.n_auto, order, vw.begin, vw.end, eb, ee, &fits_even);
    if (vw.n_auto <= SW_PLAN_PERMUTE_MAX) {
        int perm[SW_PLAN_MAX_NODES], pb[SW_PLAN_MAX_NODES], pe[SW_PLAN_MAX_NODES], pf;
        for (int i = 0; i < vw.n_auto; i++)
            perm[i] = i;
        do {
            const double c2 = s_even(&pm, nodes, vw.n_auto, perm, vw.begin, vw.end, pb, pe, &pf);
            if ((pf && !fits_even) || (pf == fits_even && c2 < even)) {
                even = c2;
                fits_even = pf;
                memcpy(eb, pb, sizeof pb[0] * (size_t)vw.n_auto);
                memcpy(ee, pe, sizeof pe[0] * (size_t)vw.n_auto);
            }
        } while (sw_plan_next_perm(perm, vw.n_auto));
    }
    for (int i = 0; i < vw.n_auto; i++) {
        cb[i] = (int)vw.autos[i]->layer_begin;
        ce[i] = (int)vw.autos[i]->layer_end;
        placed &= !vw.autos[i]->standby || b[i] == e[i];
    }
    const double cur = sw_plan_cost(&pm, nodes, vw.n_auto, cb, ce, &fits_cur);
    if (json) {
        json_t *j = json_object(), *arr = json_array();
        json_object_set_new(j, "model", json_string(fp));
        json_object_set_new(j, "n_layers", json_integer(L));
        json_object_set_new(j, "rows", json_integer(rows));
        json_object_set_new(j, "probe_rows", json_integer(K1));
        json_object_set_new(j, "head", json_string(vw.head->name));
        json_object_set_new(j, "head_layers", json_integer(vw.head->layer_end));
        json_object_set_new(j, "plan_begin", json_integer(vw.begin));
        json_object_set_new(j, "plan_end", json_integer(vw.end));
        json_object_set_new(j, "predicted_us", json_real(fixed + cost));
        json_object_set_new(j, "predicted_us_k", json_real(fixed_k + plan_k));
        json_object_set_new(j, "even_us", json_real(fixed + even));
        json_object_set_new(j, "even_fits", json_boolean(fits_even));
        json_object_set_new(j, "current_us", placed ? json_real(fixed + cur) : json_null());
        json_object_set_new(j, "fixed_us", json_real(fixed)); /* the head's and fixed stages' */
        sw_plan_node_t hn;
        s_node(vw.head, rows, &hn);
        json_object_set_new(j, "head_us_layer", json_real(hn.us_layer));
        json_object_set_new(j, "head_rtt_us", json_real(hn.rtt_us));
        for (int i = 0; i < vw.n_auto; i++) {
            json_t *o = json_object();
            json_object_set_new(o, "name", json_string(vw.autos[i]->name));
            json_object_set_new(o, "begin", json_integer(b[i]));
            json_object_set_new(o, "end", json_integer(e[i]));
            json_object_set_new(o, "even_begin", json_integer(eb[i]));
            json_object_set_new(o, "even_end", json_integer(ee[i]));
            json_object_set_new(o, "now_begin", json_integer(cb[i]));
            json_object_set_new(o, "now_end", json_integer(ce[i]));
            json_object_set_new(o, "us_layer", json_real(nodes[i].us_layer));
            json_object_set_new(o, "us_out", json_real(nodes[i].us_out));
            json_object_set_new(o, "rtt_us", json_real(nodes[i].rtt_us));
            json_object_set_new(o, "mem_mib", json_integer(vw.autos[i]->mem_mib));
            json_object_set_new(
                o, "need_mib",
                json_real(b[i] < e[i]
                              ? (double)sw_plan_need_bytes(&pm, &nodes[i], b[i], e[i]) / (1 << 20)
                              : 0));
            json_array_append_new(arr, o);
        }
        json_object_set_new(j, "nodes", arr);
        char *s = json_dumps(j, JSON_COMPACT);
        if (s)
            printf("%s\n", s);
        free(s);
        json_decref(j);
    } else {
        printf("plan for %s (%.12s..., %d layers), rounds of %d row(s):\n", path, fp, L, rows);
        printf("%-24s %-9s %10s %9s %9s %10s\n", "NODE", "LAYERS", "US/LAYER", "MEM MiB",
               "NEED MiB", "STAGE MS");
        sw_plan_node_t hn;
        s_node(vw.head, rows, &hn);
        printf("%-24s %-9s %10.0f %9s %9s %10.2f  (head, fixed)\n", vw.head->name,
               s_range(0, (int)vw.head->layer_end), hn.us_layer, "-", "-",
               sw_plan_stage_us(&pm, &hn, 0, (int)vw.head->layer_end) / 1e3);
        for (int k = 0; k < n_ord; k++) {
            const int i = order[k];
            char lay[24] = "standby";
            if (b[i] < e[i])
                snprintf(lay, sizeof lay, "%d:%d", b[i], e[i]);
            printf("%-24s %-9s %10.0f %9u %9.1f %10.2f\n", vw.autos[i]->name, lay,
                   nodes[i].us_layer, vw.autos[i]->mem_mib,
                   b[i] < e[i] ? (double)sw_plan_need_bytes(&pm, &nodes[i], b[i], e[i]) / (1 << 20)
                               : 0.0,
                   b[i] < e[i] ? sw_plan_stage_us(&pm, &nodes[i], b[i], e[i]) / 1e3 : 0.0);
        }
        printf("predicted round time: %.2f ms at %d row(s), %.2f ms at %d rows\n",
               (fixed + cost) / 1e3, rows, (fixed_k + plan_k) / 1e3, K1);
        printf("even split of layers [%d, %d) over the same nodes: %.2f ms%s\n", vw.begin, vw.end,
               (fixed + even) / 1e3, fits_even ? "" : " (does not fit their memory)");
        if (placed)
            printf("the assignment they hold now: %.2f ms%s\n", (fixed + cur) / 1e3,
                   fits_cur ? "" : " (over a node's memory)");
    }
    rc = 0;
out:
    sw_client_table_clear(&t);
    sw_client_destroy(&cl);
    return rc;
}
