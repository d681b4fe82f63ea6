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

struct s_plan_opts {
    const char *model;     /* --model M.gguf (or hf:...) */
    int rows;              /* --rows */
    int json;              /* --json */
    sw_sec_args_t sec;     /* the security flags (no access key needed) */
    sw_args_relay_t relay; /* --relay, --connect-timeout-s */
};

/* -1 when the options are good (o filled), else the exit code: 0 after --help /
 * --version, 2 after a usage error's line. */
static int s_plan_parse(int argc, char **argv, struct s_plan_opts *o)
{
    const char *P = s_spec.prog, *v;
    *o =
        (struct s_plan_opts){.rows = 1, .sec = {.e2e_optional = 1}, .relay = SW_ARGS_RELAY_DEFAULT};
    int c;
    sw_args_t a;
    sw_args_init(&a, &s_spec, argc, argv);
    while ((c = sw_args_next(&a, &v)) >= 0) {
        int h = sw_sec_args_opt(&o->sec, c, v);
        if (!h)
            h = sw_args_relay_opt(P, &o->relay, c, v);
        if (!h && c == SW_OPT_JSON)
            h = o->json = 1;
        if (!h && c == 'm') {
            o->model = v;
            h = 1;
        }
        if (!h && c == O_ROWS)
            h = sw_arg_int(P, "--rows", v, 1, SW_WIRE_MAX_ROWS, &o->rows) == 0 ? 1 : -1;
        if (h <= 0)
            return 2;
    }
    if ((c = sw_args_finish(&a, c, 0)) >= 0)
        return c;
    if (!o->model || !o->relay.relay[0])
        return sw_args_exit(
            sw_args_fail(&s_spec, "%s is required", !o->model ? "--model M.gguf" : "--relay"));
    return -1;
}

/* The model as the planner needs it (its fingerprint, layer count and sizes), read from its
 * file mapped on the CPU (no weight read): 0, or -1 after one line. */
static int s_plan_model(const char *model, char *path, size_t path_len, char fp[65], int *L,
                        sw_plan_model_t *pm)
{
    char err[1024] = "";
    if (sw_hub_model_arg(model, NULL, path, path_len, err, sizeof err) != 0) {
        fprintf(stderr, "shardwire plan: %s\n", err);
        return -1;
    }
    sw_backend_t *be = sw_backend_new("cpu", 1, err, sizeof err);
    sw_model_t *m = be ? sw_model_load(path, 0, -1, be, err, sizeof err) : NULL;
    if (m) {
        *L = sw_model_hparams(m)->n_layer;
        sw_model_fingerprint(m, fp);
    }
    int rc = 0;
    if (!m || sw_plan_model_bytes(sw_model_gguf(m), *L, pm, err, sizeof err) != 0) {
        fprintf(stderr, "shardwire plan: %s: %s\n", path, err);
        rc = -1;
    }
    sw_model_free(&m);
    sw_backend_free(&be);
    return rc;
}

/* A plan of the auto nodes of a view, and what it is compared with. Node i is vw.autos[i]. */
typedef struct s_plan {
    const sw_plan_model_t *pm;                        /* the model's sizes */
    const s_view_t *vw;                               /* the table as the planner reads it */
    int rows, K1;                                     /* rows planned for, the probe's K+1 */
    sw_plan_node_t nodes[SW_PLAN_MAX_NODES];          /* the auto nodes at rows */
    sw_plan_node_t nodes_k[SW_PLAN_MAX_NODES];        /* and at K1 rows */
    int b[SW_PLAN_MAX_NODES], e[SW_PLAN_MAX_NODES];   /* the plan: node i holds [b, e) */
    int eb[SW_PLAN_MAX_NODES], ee[SW_PLAN_MAX_NODES]; /* the best even split */
    int cb[SW_PLAN_MAX_NODES], ce[SW_PLAN_MAX_NODES]; /* what they hold now */
    int order[SW_PLAN_MAX_NODES], n_ord;              /* the nodes in the plan's pipeline order */
    double cost, plan_k;                              /* the plan's cost (us) at rows and at K1 */
    double fixed, fixed_k;                            /* the head's and fixed stages' cost */
    double even, cur;                                 /* the even split's, the current one's */
    int fits_k, fits_even, fits_cur, placed; /* each fits memory; placed: all hold a range */
} s_plan_t;

/* The best even split of the plan's layers over its nodes into p->eb / p->ee: in the plan's
 * order, or in the order (of every one up to SW_PLAN_PERMUTE_MAX nodes) that fits their memory
 * and costs least. */
static void s_plan_even(s_plan_t *p)
{
    const s_view_t *vw = p->vw;
    p->even = s_even(p->pm, p->nodes, vw->n_auto, p->order, vw->begin, vw->end, p->eb, p->ee,
                     &p->fits_even);
    if (vw->n_auto > SW_PLAN_PERMUTE_MAX)
        return;
    int perm[SW_PLAN_MAX_NODES], pb[SW_PLAN_MAX_NODES], pe[SW_PLAN_MAX_NODES], pf;
    for (int i = 0; i < vw->n_auto; i++)
        perm[i] = i;
    do {
        const double c2 =
            s_even(p->pm, p->nodes, vw->n_auto, perm, vw->begin, vw->end, pb, pe, &pf);
        if ((pf && !p->fits_even) || (pf == p->fits_even && c2 < p->even)) {
            p->even = c2;
            p->fits_even = pf;
            memcpy(p->eb, pb, sizeof pb[0] * (size_t)vw->n_auto);
            memcpy(p->ee, pe, sizeof pe[0] * (size_t)vw->n_auto);
        }
    } while (sw_plan_next_perm(perm, vw->n_auto));
}

/* Plans vw's auto nodes for rows and costs the alternatives into *p: 0, or -1 after one
 * line. */
static int s_plan_solve(const sw_plan_model_t *pm, const s_view_t *vw, int rows, s_plan_t *p)
{
    char err[1024] = "";
    memset(p, 0, sizeof *p);
    p->pm = pm;
    p->vw = vw;
    p->rows = rows;
    p->K1 = (int)vw->autos[0]->probe_rows;
    for (int i = 0; i < vw->n_auto; i++) {
        s_node(vw->autos[i], rows, &p->nodes[i]);
        s_node(vw->autos[i], p->K1, &p->nodes_k[i]);
    }
    p->cost =
        sw_plan_solve(pm, vw->begin, vw->end, p->nodes, vw->n_auto, p->b, p->e, err, sizeof err);
    if (p->cost < 0) {
        fprintf(stderr, "shardwire plan: %s\n", err);
        return -1;
    }
    p->fixed = s_fixed_us(pm, vw, rows);
    p->fixed_k = s_fixed_us(pm, vw, p->K1);
    p->fits_cur = 1;
    p->placed = 1;
    p->plan_k = sw_plan_cost(pm, p->nodes_k, vw->n_auto, p->b, p->e, &p->fits_k);
    for (int l = vw->begin; l < vw->end;)
        for (int i = 0; i < vw->n_auto; i++)
            if (p->b[i] == l && p->e[i] > l) {
                p->order[p->n_ord++] = i;
                l = p->e[i];
                break;
            }
    for (int i = 0; i < vw->n_auto; i++)
        if (p->b[i] == p->e[i])
            p->order[p->n_ord++] = i;
    s_plan_even(p);
    for (int i = 0; i < vw->n_auto; i++) {
        p->cb[i] = (int)vw->autos[i]->layer_begin;
        p->ce[i] = (int)vw->autos[i]->layer_end;
        p->placed &= !vw->autos[i]->standby || p->b[i] == p->e[i];
    }
    p->cur = sw_plan_cost(pm, p->nodes, vw->n_auto, p->cb, p->ce, &p->fits_cur);
    return 0;
}

/* MiB node i needs for the plan's range (0 on standby). */
static double s_need_mib(const s_plan_t *p, int i)
{
    return p->b[i] < p->e[i]
               ? (double)sw_plan_need_bytes(p->pm, &p->nodes[i], p->b[i], p->e[i]) / (1 << 20)
               : 0;
}

/* --json: the plan as one line. */
static void s_print_json(const s_plan_t *p, const char *fp, int L)
{
    const s_view_t *vw = p->vw;
    json_t *j = json_object(), *arr = json_array();
    json_object_set_new(j, "model", json_string(fp));
    json_object_set_new(j, "n_layers", json_integer(L));
    json_object_set_new(j, "rows", json_integer(p->rows));
    json_object_set_new(j, "probe_rows", json_integer(p->K1));
    json_object_set_new(j, "head", json_string(vw->head->name));
    json_object_set_new(j, "head_layers", json_integer(vw->head->layer_end));
    json_object_set_new(j, "plan_begin", json_integer(vw->begin));
    json_object_set_new(j, "plan_end", json_integer(vw->end));
    json_object_set_new(j, "predicted_us", json_real(p->fixed + p->cost));
    json_object_set_new(j, "predicted_us_k", json_real(p->fixed_k + p->plan_k));
    json_object_set_new(j, "even_us", json_real(p->fixed + p->even));
    json_object_set_new(j, "even_fits", json_boolean(p->fits_even));
    json_object_set_new(j, "current_us", p->placed ? json_real(p->fixed + p->cur) : json_null());
    json_object_set_new(j, "fixed_us", json_real(p->fixed)); /* the head's and fixed stages' */
    sw_plan_node_t hn;
    s_node(vw->head, p->rows, &hn);
    json_object_set_new(j, "head_us_layer", json_real(hn.us_layer));
    json_object_set_new(j, "head_rtt_us", json_real(hn.rtt_us));
    for (int i = 0; i < vw->n_auto; i++) {
        json_t *o = json_object();
        json_object_set_new(o, "name", json_string(vw->autos[i]->name));
        json_object_set_new(o, "begin", json_integer(p->b[i]));
        json_object_set_new(o, "end", json_integer(p->e[i]));
        json_object_set_new(o, "even_begin", json_integer(p->eb[i]));
        json_object_set_new(o, "even_end", json_integer(p->ee[i]));
        json_object_set_new(o, "now_begin", json_integer(p->cb[i]));
        json_object_set_new(o, "now_end", json_integer(p->ce[i]));
        json_object_set_new(o, "us_layer", json_real(p->nodes[i].us_layer));
        json_object_set_new(o, "us_out", json_real(p->nodes[i].us_out));
        json_object_set_new(o, "rtt_us", json_real(p->nodes[i].rtt_us));
        json_object_set_new(o, "mem_mib", json_integer(vw->autos[i]->mem_mib));
        json_object_set_new(o, "need_mib", json_real(s_need_mib(p, i)));
        json_array_append_new(arr, o);
    }
    json_object_set_new(j, "nodes", arr);
    char *s = json_dumps(j, JSON_COMPACT);
    if (s)
        printf("%s\n", s);
    free(s);
    json_decref(j);
}

/* The plan as a table with the predicted times, for people. */
static void s_print_text(const s_plan_t *p, const char *path, const char *fp, int L)
{
    const s_view_t *vw = p->vw;
    printf("plan for %s (%.12s..., %d layers), rounds of %d row(s):\n", path, fp, L, p->rows);
    printf("%-24s %-9s %10s %9s %9s %10s\n", "NODE", "LAYERS", "US/LAYER", "MEM MiB", "NEED MiB",
           "STAGE MS");
    sw_plan_node_t hn;
    s_node(vw->head, p->rows, &hn);
    printf("%-24s %-9s %10.0f %9s %9s %10.2f  (head, fixed)\n", vw->head->name,
           s_range(0, (int)vw->head->layer_end), hn.us_layer, "-", "-",
           sw_plan_stage_us(p->pm, &hn, 0, (int)vw->head->layer_end) / 1e3);
    for (int k = 0; k < p->n_ord; k++) {
        const int i = p->order[k];
        char lay[24] = "standby";
        if (p->b[i] < p->e[i])
            snprintf(lay, sizeof lay, "%d:%d", p->b[i], p->e[i]);
        printf("%-24s %-9s %10.0f %9u %9.1f %10.2f\n", vw->autos[i]->name, lay,
               p->nodes[i].us_layer, vw->autos[i]->mem_mib, s_need_mib(p, i),
               p->b[i] < p->e[i] ? sw_plan_stage_us(p->pm, &p->nodes[i], p->b[i], p->e[i]) / 1e3
                                 : 0.0);
    }
    printf("predicted round time: %.2f ms at %d row(s), %.2f ms at %d rows\n",
           (p->fixed + p->cost) / 1e3, p->rows, (p->fixed_k + p->plan_k) / 1e3, p->K1);
    printf("even split of layers [%d, %d) over the same nodes: %.2f ms%s\n", vw->begin, vw->end,
           (p->fixed + p->even) / 1e3, p->fits_even ? "" : " (does not fit their memory)");
    if (p->placed)
        printf("the assignment they hold now: %.2f ms%s\n", (p->fixed + p->cur) / 1e3,
               p->fits_cur ? "" : " (over a node's memory)");
}

/* Reads the model and the relay's table, plans and prints: the exit code. */
static int s_plan_run(const struct s_plan_opts *o)
{
    static char path[PATH_MAX];
    static sw_plan_model_t pm;
    char fp[65] = "", err[1024] = "";
    int L = 0, rc = 1;
    if (s_plan_model(o->model, path, sizeof path, fp, &L, &pm) != 0)
        return 1;
    sw_client_t *cl =
        cli_connect("plan", &o->sec, o->relay.relay, o->relay.connect_s, NULL, 0, &rc);
    if (!cl)
        return rc;
    sw_client_table_t t;
    if (sw_client_status(cl, &t, 5000, err, sizeof err) != 0) {
        fprintf(stderr, "shardwire plan: the relay at %s did not answer: %s\n", o->relay.relay,
                err);
        sw_client_destroy(&cl);
        return 1;
    }
    s_view_t vw;
    static s_plan_t plan;
    rc = 1;
    if (s_view(&t, fp, L, &vw) != 0)
        fprintf(stderr,
                "shardwire plan: no head of %s (fingerprint %.12s...) is connected to the relay\n",
                path, fp);
    else if (vw.n_auto == 0 || vw.begin >= vw.end)
        fprintf(stderr,
                "shardwire plan: %s: start nodes with --layers auto (the head and the fixed "
                "stages cover layers [0, %d) of %d)\n",
                vw.n_auto ? "nothing to plan" : "no auto node of this model is connected", vw.begin,
                L);
    else if (s_plan_solve(&pm, &vw, o->rows, &plan) == 0) {
        if (o->json)
            s_print_json(&plan, fp, L);
        else
            s_print_text(&plan, path, fp, L);
        rc = 0;
    }
    sw_client_table_clear(&t);
    sw_client_destroy(&cl);
    return rc;
}

int cmd_plan(int argc, char **argv)
{
    struct s_plan_opts o;
    const int rc = s_plan_parse(argc, argv, &o);
    return rc >= 0 ? rc : s_plan_run(&o);
}
