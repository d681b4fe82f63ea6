/*
 * placement.c - placement on the node (placement.h): the probe, the standby's
 * PlanAssign, the head's plans for the gaps of its route.
 */
#include "placement.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "expiry.h"
#include "kv.h"
#include "log.h"
#include "planner.h"
#include "sysmem.h"

#define S_PROBE_MIN_REPS 9      // timed forwards per probe at least, after one warm-up ...
#define S_PROBE_WINDOW_MS 300.0 // ... and for at least this long (3 default CFS periods) ...
#define S_PROBE_MAX_REPS 2000   // ... but no more forwards than this (sw_plan_probe_us)
#define S_RTT_QUERIES 16        // status queries timed for the round trip to the relay ...
#define S_RTT_PAUSE_US 5000     // ... each after this pause

/* An auto node serving a range, as its head sees it: what it claimed, what its rounds took. */
typedef struct place_watch {
    char name[SW_WIRE_NAME_MAX + 1];
    uint32_t begin, end;                                 // its range
    uint32_t us_layer_1, us_layer_k, us_out_1, us_out_k; // its probe
    uint32_t probe_rows;                                 //
    int seen, slow;                                      // rounds in this window, slow ones
} s_watch_t;

struct node_place {
    int auto_node;      // 1: --layers auto
    sw_hparams_t hp;    // the model's hyper-parameters (n->hp while standby)
    sw_plan_model_t pm; // the model's layer sizes (planner, memory checks)
    uint32_t us_layer_1, us_layer_k, us_out_1, us_out_k; // probe, us
    uint32_t rtt_us;                                     // round trip to the relay
    uint32_t kv_kib_layer;                               // KV of its sessions per layer
    uint32_t mem_mib;                                    // memory for weights + KV
    /* the head: the ranges it assigned and awaits */
    int planned; // a first plan was sent
    int n_pend;
    struct {
        char name[SW_WIRE_NAME_MAX + 1];
        uint32_t begin, end;
    } pend[SW_PLAN_MAX_NODES];
    double pend_ms;                          // when they were sent
    char said[512];                          // the last waiting line logged (logged once)
    sw_expiry_t bench[NODE_PLACE_BENCH_MAX]; // nodes that did not take a range in time, left
                                             // out of plans until then (issue 35)
    /* the head: what the auto nodes serving a range claimed (their probe) and what their
     * rounds took (node_place_observe) */
    int n_watch;
    s_watch_t watch[SW_PLAN_MAX_NODES];
};

/* Leaves name out of plans for NODE_PLACE_BENCH_MS (its claims are not believed meanwhile). */
static void s_bench(node_place_t *p, const char *name, double now)
{
    sw_expiry_put(p->bench, NODE_PLACE_BENCH_MAX, name, now + NODE_PLACE_BENCH_MS);
}

static int s_benched(const node_place_t *p, const char *name, double now)
{
    return sw_expiry_find(p->bench, NODE_PLACE_BENCH_MAX, name, now) >= 0;
}

/* The head keeps the claims of every auto node that serves a range of its
 * model (from each peer table), its measurements kept while name, range and
 * claims stay the same. */
static void s_watch(node_place_t *p, const node_t *n, const sw_msg_table_t *pt, int need_key)
{
    const uint32_t L = (uint32_t)n->hp->n_layer;
    int k = 0;
    const int n_old = p->n_watch;
    s_watch_t old[SW_PLAN_MAX_NODES];
    memcpy(old, p->watch, sizeof old);
    for (uint32_t i = 0; i < pt->n_peers && k < SW_PLAN_MAX_NODES; i++) {
        sw_msg_peer_t pi;
        if (sw_codec_peer_at(pt, i, &pi) != 0 || !sw_codec_peer_routable(&pi, need_key))
            continue;
        const sw_msg_announce_t *a = &pi.announce;
        if (!a->auto_place || a->layer_end <= a->layer_begin || a->n_layers != L ||
            !a->probe_rows || strcmp(a->model_fingerprint, n->fingerprint) != 0)
            continue;
        int seen = 0, slow = 0;
        for (int j = 0; j < n_old; j++)
            if (!strcmp(old[j].name, a->name) && old[j].begin == a->layer_begin &&
                old[j].end == a->layer_end && old[j].us_layer_1 == a->us_layer_1 &&
                old[j].us_layer_k == a->us_layer_k) {
                seen = old[j].seen;
                slow = old[j].slow;
            }
        snprintf(p->watch[k].name, sizeof p->watch[k].name, "%s", a->name);
        p->watch[k].begin = a->layer_begin;
        p->watch[k].end = a->layer_end;
        p->watch[k].us_layer_1 = a->us_layer_1;
        p->watch[k].us_layer_k = a->us_layer_k;
        p->watch[k].us_out_1 = a->us_out_1;
        p->watch[k].us_out_k = a->us_out_k;
        p->watch[k].probe_rows = a->probe_rows;
        p->watch[k].seen = seen;
        p->watch[k].slow = slow;
        k++;
    }
    p->n_watch = k;
}

int node_place_observe(node_t *n, const char *name, int rows, double compute_ms, double now)
{
    node_place_t *p = n->place;
    if (!p || rows < 1)
        return 0;
    for (int j = 0; j < p->n_watch; j++) {
        if (strcmp(p->watch[j].name, name) != 0)
            continue;
        const sw_msg_announce_t a = {.name = p->watch[j].name,
                                     .us_layer_1 = p->watch[j].us_layer_1,
                                     .us_layer_k = p->watch[j].us_layer_k,
                                     .us_out_1 = p->watch[j].us_out_1,
                                     .us_out_k = p->watch[j].us_out_k,
                                     .probe_rows = p->watch[j].probe_rows};
        sw_plan_node_t nd;
        sw_plan_node_from(&a, rows, &nd);
        nd.rtt_us = 0;
        const double claim_ms =
            sw_plan_stage_us(&p->pm, &nd, (int)p->watch[j].begin, (int)p->watch[j].end) / 1e3;
        p->watch[j].seen++;
        p->watch[j].slow += compute_ms > NODE_PLACE_SLOW_X * claim_ms &&
                            compute_ms - claim_ms > NODE_PLACE_SLOW_MIN_MS;
        if (p->watch[j].seen < NODE_PLACE_SLOW_WINDOW)
            return 0;
        const int slow = p->watch[j].slow >= NODE_PLACE_SLOW_ROUNDS;
        p->watch[j].seen = p->watch[j].slow = 0;
        if (!slow)
            return 0;
        SW_WARN("placement: '%s' computed layers [%u, %u) more than %dx slower than its probe "
                "claimed (%.1f ms for %d rows, claimed %.1f ms) in %d of its last %d rounds: its "
                "claims are left out of plans for %d s and its range is planned again over "
                "the standby nodes",
                name, p->watch[j].begin, p->watch[j].end, NODE_PLACE_SLOW_X, compute_ms, rows,
                claim_ms, NODE_PLACE_SLOW_ROUNDS, NODE_PLACE_SLOW_WINDOW,
                NODE_PLACE_BENCH_MS / 1000);
        s_bench(p, name, now);
        p->said[0] = 0;
        return 1;
    }
    return 0;
}

/* ---- the probe ------------------------------------------------------------------------------ */

/* One probe forward (sw_plan_probe_us's run): the KV emptied, then the forward. */
typedef struct s_probe_ctx {
    sw_model_t *m;
    sw_kv_t *kv;
    const sw_forward_t *f;
} s_probe_ctx_t;

static int s_probe_run(void *ctx)
{
    s_probe_ctx_t *c = ctx;
    char err[256];
    if (sw_kv_truncate(c->kv, 0) != 0)
        return -1;
    if (sw_model_forward(c->m, c->kv, c->f, err, sizeof err) != 0) {
        SW_WARN("probe: %s", err);
        return -1;
    }
    return 0;
}

static double s_probe_now(void *ctx)
{
    (void)ctx;
    return sw_now_ms();
}

/* The sustained time (us) of one forward of `rows` decode rows through m's
 * layers (and its LM head when it is the last stage): what a round meets on
 * this machine as it is loaded now, other processes and CPU quotas included
 * (sw_plan_probe_us says why not the median). -1 on failure. */
static double s_time(sw_model_t *m, int rows)
{
    const sw_hparams_t *hp = sw_model_hparams(m);
    const size_t E = (size_t)hp->n_embd;
    const int first = sw_model_is_first(m), last = sw_model_is_last(m);
    sw_kv_t *kv = sw_kv_new(m, 64 + rows);
    float *in = calloc((size_t)rows * E, sizeof *in), *out = calloc((size_t)rows * E, sizeof *out);
    float *logits = last ? calloc((size_t)rows * (size_t)hp->n_vocab, sizeof *logits) : NULL;
    int32_t tok[SW_WIRE_MAX_ROWS];
    double best = -1;
    if (!kv || !in || !out || (last && !logits))
        goto out;
    for (size_t i = 0; i < (size_t)rows * E; i++)
        in[i] = (float)((int)(i % 17) - 8) * 0.01f;
    for (int i = 0; i < rows; i++)
        tok[i] = 1 + i;
    const sw_forward_t f = {.n = rows,
                            .tokens = first ? tok : NULL,
                            .hidden = first ? NULL : in,
                            .out_hidden = last ? NULL : out,
                            .logits = logits,
                            .n_logits = last ? rows : 0};
    s_probe_ctx_t ctx = {.m = m, .kv = kv, .f = &f};
    const sw_plan_probe_t pr = {.run = s_probe_run, .now_ms = s_probe_now, .ctx = &ctx};
    best = sw_plan_probe_us(&pr, S_PROBE_WINDOW_MS, S_PROBE_MIN_REPS, S_PROBE_MAX_REPS);
out:
    free(in);
    free(out);
    free(logits);
    sw_kv_free(&kv);
    return best;
}

static uint32_t s_us(double us)
{
    if (us < 0)
        return 0;
    return us > SW_WIRE_MAX_PROBE_US ? SW_WIRE_MAX_PROBE_US : (uint32_t)(us + 0.5);
}

/* Times layers [b, e) of the node's model file at 1 and NODE_PROBE_ROWS rows,
 * per layer: 0 or -1 (logged). On success *m_out keeps the model when asked. */
static int s_probe_range(node_t *n, int b, int e, double *t1, double *tk, sw_model_t **m_out)
{
    char err[512] = "";
    sw_model_t *m = sw_model_load(n->o.model, b, e, n->be, err, sizeof err);
    if (!m) {
        SW_ERR("%s: %s", n->o.model, err);
        return -1;
    }
    *t1 = s_time(m, 1);
    *tk = s_time(m, NODE_PROBE_ROWS);
    if (*t1 < 0 || *tk < 0) {
        SW_ERR("the probe of layers [%d, %d) failed", b, e);
        sw_model_free(&m);
        return -1;
    }
    if (m_out)
        *m_out = m;
    else
        sw_model_free(&m);
    return 0;
}

/* Memory for weights and KV: --mem-mib, else half of what is available now
 * (the GPUs' free memory when the backend has devices, else the host's). */
static uint32_t s_mem_mib(const node_t *n)
{
    if (n->o.mem_mib > 0)
        return (uint32_t)n->o.mem_mib;
    const int64_t dev = sw_backend_mem_free(n->be);
    const int64_t avail = dev >= 0 ? dev : sw_host_mem_available();
    int64_t mib = avail > 0 ? (avail / 2) >> 20 : 0;
    return mib > SW_WIRE_MAX_MEM_MIB ? SW_WIRE_MAX_MEM_MIB : (uint32_t)mib;
}

static uint32_t s_kv_kib_layer(const node_t *n, const sw_model_t *m)
{
    const int nl = sw_model_layer_end(m) - sw_model_layer_begin(m);
    /* --max-sessions full sessions of the node's context (--ctx, else the model's trained one;
     * its caches grow as they are used, this is what they may reach) */
    const int ctx = n->o.n_ctx > 0 ? n->o.n_ctx : sw_model_hparams(m)->n_ctx_train;
    const uint64_t b = (uint64_t)sw_kv_bytes(m, ctx) * (uint64_t)n->o.max_sessions;
    const uint64_t kib = (b / (uint64_t)nl + 1023) >> 10;
    return kib > SW_WIRE_MAX_KV_KIB_LAYER ? SW_WIRE_MAX_KV_KIB_LAYER : (uint32_t)kib;
}

static node_place_t *s_new(node_t *n, const sw_model_t *m)
{
    node_place_t *p = calloc(1, sizeof *p);
    char err[256];
    if (!p || sw_plan_model_bytes(sw_model_gguf(m), sw_model_hparams(m)->n_layer, &p->pm, err,
                                  sizeof err) != 0) {
        SW_ERR("placement: %s", p ? err : "out of memory");
        free(p);
        return NULL;
    }
    p->mem_mib = s_mem_mib(n);
    p->kv_kib_layer = s_kv_kib_layer(n, m);
    n->place = p;
    return p;
}

int node_place_standby(node_t *n)
{
    double t1, tk, o1, ok;
    sw_model_t *m = NULL;
    char err[512] = "";
    /* the first middle layer tells the model's size; then two layers if there are enough */
    m = sw_model_load(n->o.model, 1, 2, n->be, err, sizeof err);
    if (!m) {
        SW_ERR("%s: %s", n->o.model, err);
        return -1;
    }
    const int L = sw_model_hparams(m)->n_layer;
    if (L < 3) {
        SW_ERR("%s: %d layers: --layers auto needs 3 or more", n->o.model, L);
        sw_model_free(&m);
        return -1;
    }
    node_place_t *p = s_new(n, m);
    if (!p) {
        sw_model_free(&m);
        return -1;
    }
    p->auto_node = 1;
    p->hp = *sw_model_hparams(m);
    sw_model_fingerprint(m, n->fingerprint);
    sw_model_free(&m);
    const int pe = L >= 4 ? 3 : 2;
    if (s_probe_range(n, 1, pe, &t1, &tk, NULL) != 0 || s_probe_range(n, L - 1, L, &o1, &ok, NULL))
        return -1;
    t1 /= pe - 1;
    tk /= pe - 1;
    p->us_layer_1 = s_us(t1);
    p->us_layer_k = s_us(tk);
    p->us_out_1 = s_us(o1 - t1);
    p->us_out_k = s_us(ok - tk);
    n->hp = &p->hp;
    SW_INFO("auto: probe on %s: %.0f us a layer for 1 row, %.0f for %d rows; LM head %u / %u us; "
            "%u MiB for weights and KV (%u KiB of KV a layer); standby until the head assigns "
            "a range",
            sw_backend_desc(n->be), t1, tk, NODE_PROBE_ROWS, p->us_out_1, p->us_out_k, p->mem_mib,
            p->kv_kib_layer);
    return 0;
}

int node_place_head(node_t *n)
{
    node_place_t *p = s_new(n, n->model);
    if (!p)
        return -1;
    const int h = sw_model_layer_end(n->model);
    const double t1 = s_time(n->model, 1), tk = s_time(n->model, NODE_PROBE_ROWS);
    if (t1 < 0 || tk < 0) {
        SW_ERR("the probe of the head's layers failed");
        return -1;
    }
    p->us_layer_1 = s_us(t1 / h);
    p->us_layer_k = s_us(tk / h);
    SW_INFO("placement: this head's %d layers take %.0f us for 1 row, %.0f for %d rows; it "
            "plans for the auto nodes%s",
            h, t1, tk, NODE_PROBE_ROWS, n->o.auto_nodes > 1 ? " once enough of them are up" : "");
    return 0;
}

void node_place_announce(const node_t *n, sw_msg_announce_t *an)
{
    const node_place_t *p = n->place;
    if (!p)
        return;
    an->mem_mib = p->mem_mib;
    an->us_layer_1 = p->us_layer_1;
    an->us_layer_k = p->us_layer_k;
    an->probe_rows = NODE_PROBE_ROWS;
    an->rtt_us = p->rtt_us;
    an->auto_place = p->auto_node;
    an->kv_kib_layer = p->kv_kib_layer;
    an->us_out_1 = p->us_out_1;
    an->us_out_k = p->us_out_k;
    if (p->auto_node && !n->model) { /* standby */
        an->role = SW_ROLE_MIDDLE;
        an->layer_begin = an->layer_end = 0;
    }
}

double node_place_claim_ms(const node_t *n, int rows)
{
    const node_place_t *p = n->place;
    if (!p || !p->auto_node || !n->model || rows < 1)
        return 0;
    sw_msg_announce_t a = {0};
    node_place_announce(n, &a);
    sw_plan_node_t nd;
    sw_plan_node_from(&a, rows, &nd);
    nd.rtt_us = 0;
    return sw_plan_stage_us(&p->pm, &nd, sw_model_layer_begin(n->model),
                            sw_model_layer_end(n->model)) /
           1e3;
}

int node_place_rtt(node_t *n)
{
    node_place_t *p = n->place;
    if (!p)
        return 0;
    /* the mean, not the fastest: every hop of every round pays the waits of
     * a loaded machine (the relay and the receiver woken, scheduled, perhaps
     * throttled), which the fastest of a few queries left out (measured: 0.1
     * ms predicted for 4 ms a hop, docs/benchmarks.md); each query after a
     * pause, as a stage waits between rounds */
    double sum = 0;
    int got = 0;
    for (int i = 0; i < S_RTT_QUERIES; i++) {
        usleep(S_RTT_PAUSE_US);
        sw_wire_msg_t t = {0};
        const double t0 = sw_now_ms();
        if (sw_peer_status(n->peer, &t, 3000) != 0)
            continue;
        sum += (sw_now_ms() - t0) * 1e3;
        got++;
        sw_wire_msg_clear(&t);
    }
    if (!got)
        return 0;
    const double mean = sum / got;
    p->rtt_us = s_us(mean < 1 ? 1 : mean);
    SW_DEBUG("placement: round trip to the relay %.0f us (the mean of %d)", mean, got);
    return 1;
}

/* ---- the auto node: a PlanAssign --------------------------------------------------------------
 */

static void s_refuse(node_t *n, const sw_wire_msg_t *m, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void s_refuse(node_t *n, const sw_wire_msg_t *m, const char *fmt, ...)
{
    char why[SW_WIRE_MAX_ERROR_TEXT];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    char clean[SW_WIRE_NAME_MAX + 1];
    sw_text_clean(clean, m->peer, strnlen(m->peer, SW_WIRE_NAME_MAX), 0, NULL);
    SW_WARN("refused a plan_assign from %s: %s", clean, why);
    const sw_msg_t e = {.type = SW_MSG_ERROR,
                        .error = {.code = SW_ERROR_PLAN_REFUSED, .message = why}};
    if (sw_peer_try_send_msg(n->peer, m->peer, &e) != 0)
        SW_DEBUG("could not answer %s", clean);
}

int node_place_assign(node_t *n, const sw_wire_msg_t *m)
{
    node_place_t *p = n->place;
    sw_msg_t d;
    if (sw_codec_decode(m, SW_MSG_PLAN_ASSIGN, &d, NULL, 0) != 0)
        return 0;
    const sw_msg_plan_t *pa = &d.plan;
    if (!p || !p->auto_node) {
        s_refuse(n, m, "this node was not started with --layers auto");
        return 0;
    }
    if (n->model) {
        if (pa->layer_begin != (uint32_t)sw_model_layer_begin(n->model) ||
            pa->layer_end != (uint32_t)sw_model_layer_end(n->model))
            s_refuse(n, m, "this node serves layers [%d, %d) already (restart it to move it)",
                     sw_model_layer_begin(n->model), sw_model_layer_end(n->model));
        return 0;
    }
    /* who sent it: the key-bound head of this model, in the relay's table now */
    sw_wire_msg_t tm = {0};
    sw_msg_t td;
    sw_msg_peer_t pi;
    int from_head = 0;
    if (sw_peer_status(n->peer, &tm, 3000) == 0 &&
        sw_codec_decode(&tm, SW_MSG_PEER_TABLE, &td, NULL, 0) == 0 &&
        sw_codec_peer_find(&td.table, m->peer, &pi)) {
        const int need_key = n->o.sec && !n->o.sec->insecure;
        from_head = sw_codec_peer_routable(&pi, need_key) && pi.announce.role == SW_ROLE_HEAD &&
                    !strcmp(pi.announce.model_fingerprint, n->fingerprint) &&
                    (!m->peer_key[0] || !strcmp(pi.key_fp, m->peer_key));
    }
    sw_wire_msg_clear(&tm);
    if (!from_head) {
        s_refuse(n, m, "only the key-bound head of this model may assign a range");
        return 0;
    }
    const uint32_t L = (uint32_t)n->hp->n_layer;
    if (strcmp(pa->model_fingerprint, n->fingerprint) != 0 || pa->n_layers != L ||
        pa->layer_end > L) {
        s_refuse(n, m, "the range [%u, %u) of %u layers does not fit this node's model (%u layers)",
                 pa->layer_begin, pa->layer_end, pa->n_layers, L);
        return 0;
    }
    sw_plan_node_t nd = {.kv_layer_bytes = (uint64_t)p->kv_kib_layer << 10,
                         .mem_bytes = (uint64_t)p->mem_mib << 20};
    const uint64_t need = sw_plan_need_bytes(&p->pm, &nd, (int)pa->layer_begin, (int)pa->layer_end);
    if (need > nd.mem_bytes) {
        s_refuse(n, m, "layers [%u, %u) need %.1f MiB with their KV, more than this node's %u MiB",
                 pa->layer_begin, pa->layer_end, (double)need / (1 << 20), p->mem_mib);
        return 0;
    }
    SW_INFO("auto: head %s assigns layers [%u, %u) (plan: %.2f ms a round): loading them", m->peer,
            pa->layer_begin, pa->layer_end, pa->plan_us / 1e3);
    n->o.layer_begin = (int)pa->layer_begin;
    n->o.layer_end = (int)pa->layer_end;
    return 1;
}

/* ---- the head: plans for the gaps --------------------------------------------------------------
 */

/* Logs a waiting line once (until another is said). */
static void s_say(node_place_t *p, const char *line)
{
    if (strcmp(p->said, line) != 0) {
        snprintf(p->said, sizeof p->said, "%s", line);
        SW_INFO("placement: %s", line);
    }
}

/* The first layer no stage of this model covers after the head's range, and
 * where the next covered part begins (*gap_end, n_layers when none). A
 * benched stage (slower than it claimed: node_place_observe) covers nothing,
 * so that its range is planned again over the standbys. */
static uint32_t s_gap(const node_place_t *p, const node_t *n, const sw_msg_table_t *pt,
                      int need_key, double now, uint32_t *gap_end)
{
    const uint32_t L = (uint32_t)n->hp->n_layer;
    uint32_t at = (uint32_t)sw_model_layer_end(n->model);
    for (int moved = 1; moved && at < L;) {
        moved = 0;
        for (uint32_t i = 0; i < pt->n_peers; i++) {
            sw_msg_peer_t pi;
            if (sw_codec_peer_at(pt, i, &pi) != 0 || !sw_codec_peer_routable(&pi, need_key) ||
                s_benched(p, pi.announce.name, now))
                continue;
            const sw_msg_announce_t *a = &pi.announce;
            if ((a->role == SW_ROLE_MIDDLE || a->role == SW_ROLE_TAIL) && a->layer_begin == at &&
                a->layer_end > at && !strcmp(a->model_fingerprint, n->fingerprint)) {
                at = a->layer_end;
                moved = 1;
            }
        }
    }
    *gap_end = L;
    for (uint32_t i = 0; i < pt->n_peers; i++) {
        sw_msg_peer_t pi;
        if (sw_codec_peer_at(pt, i, &pi) != 0 || !sw_codec_peer_routable(&pi, need_key) ||
            s_benched(p, pi.announce.name, now))
            continue;
        const sw_msg_announce_t *a = &pi.announce;
        if ((a->role == SW_ROLE_MIDDLE || a->role == SW_ROLE_TAIL) && a->layer_begin > at &&
            a->layer_begin < *gap_end && !strcmp(a->model_fingerprint, n->fingerprint))
            *gap_end = a->layer_begin;
    }
    return at;
}

/* 1 while ranges sent are not announced yet (and not NODE_PLACE_LOAD_MS old).
 * A node still a standby after that is left out of plans for
 * NODE_PLACE_BENCH_MS: a claim it did not live up to is not believed again at
 * once (a rogue announcing an impossible probe is chosen once, not forever). */
static int s_pending(node_place_t *p, const sw_msg_table_t *pt, double now)
{
    if (!p->n_pend)
        return 0;
    int waiting = 0;
    for (int i = 0; i < p->n_pend; i++) {
        sw_msg_peer_t pi;
        if (sw_codec_peer_find(pt, p->pend[i].name, &pi) &&
            sw_wire_standby(pi.announce.auto_place, pi.announce.layer_begin, pi.announce.layer_end))
            waiting = 1;
    }
    if (waiting && now - p->pend_ms < NODE_PLACE_LOAD_MS)
        return 1;
    for (int i = 0; waiting && i < p->n_pend; i++) {
        sw_msg_peer_t pi;
        if (!sw_codec_peer_find(pt, p->pend[i].name, &pi) ||
            !sw_wire_standby(pi.announce.auto_place, pi.announce.layer_begin,
                             pi.announce.layer_end))
            continue;
        SW_WARN("placement: '%s' did not announce layers [%u, %u) within %d s: left out of plans "
                "for %d s, planning again",
                p->pend[i].name, p->pend[i].begin, p->pend[i].end, NODE_PLACE_LOAD_MS / 1000,
                NODE_PLACE_BENCH_MS / 1000);
        s_bench(p, p->pend[i].name, now);
    }
    p->n_pend = 0;
    return 0;
}

void node_place_table(node_t *n, const sw_msg_table_t *pt, int route_ok)
{
    node_place_t *p = n->place;
    const double now = sw_now_ms();
    if (!p)
        return;
    const int need_key = n->o.sec && !n->o.sec->insecure;
    s_watch(p, n, pt, need_key);
    if (s_pending(p, pt, now))
        return;
    uint32_t gap_end;
    const uint32_t gap = s_gap(p, n, pt, need_key, now, &gap_end);
    const uint32_t L = (uint32_t)n->hp->n_layer;
    if (gap >= L)
        return; /* whole, or the route fails for another reason (head_route.c says which) */
    sw_plan_node_t nodes[SW_PLAN_MAX_NODES];
    sw_msg_peer_t peers[SW_PLAN_MAX_NODES];
    int k = 0;
    for (uint32_t i = 0; i < pt->n_peers && k < SW_PLAN_MAX_NODES; i++) {
        sw_msg_peer_t *pi = &peers[k];
        if (sw_codec_peer_at(pt, i, pi) != 0 || !sw_codec_peer_routable(pi, need_key))
            continue;
        const sw_msg_announce_t *a = &pi->announce;
        if (!sw_wire_standby(a->auto_place, a->layer_begin, a->layer_end) ||
            strcmp(a->model_fingerprint, n->fingerprint) != 0 || a->n_layers != L ||
            !a->probe_rows || !a->rtt_us || s_benched(p, a->name, now))
            continue; /* not probed, its round trip not measured yet, or benched */
        sw_plan_node_from(a, 1, &nodes[k]);
        k++;
    }
    char line[256];
    const int want = p->planned ? 1 : (n->o.auto_nodes > 0 ? n->o.auto_nodes : 1);
    if (k < want && route_ok)
        return; /* only a benched stage's range is open, and no standby can take it */
    if (k < want) {
        snprintf(line, sizeof line,
                 "layers [%u, %u) have no stage: waiting for %d standby auto "
                 "node(s), %d up",
                 gap, gap_end, want, k);
        s_say(p, line);
        return;
    }
    int b[SW_PLAN_MAX_NODES], e[SW_PLAN_MAX_NODES];
    char err[512];
    const double cost =
        sw_plan_solve(&p->pm, (int)gap, (int)gap_end, nodes, k, b, e, err, sizeof err);
    if (cost < 0) {
        s_say(p, err);
        return;
    }
    const double head_us = (double)p->us_layer_1 * sw_model_layer_end(n->model) + p->rtt_us;
    const int whole = gap == (uint32_t)sw_model_layer_end(n->model) && gap_end == L;
    SW_INFO("placement: plan for layers [%u, %u) over %d standby node(s): their stages %.2f ms "
            "a round of 1 row%s",
            gap, gap_end, k, cost / 1e3, whole ? "" : " (other stages keep their ranges)");
    if (whole)
        SW_INFO("placement: predicted round time %.2f ms (1 row, this head's stage included)",
                (cost + head_us) / 1e3);
    p->n_pend = 0;
    p->pend_ms = now;
    for (int i = 0; i < k; i++) {
        if (b[i] == e[i])
            continue;
        const sw_msg_t pm = {.type = SW_MSG_PLAN_ASSIGN,
                             .plan = {.model_fingerprint = n->fingerprint,
                                      .n_layers = L,
                                      .layer_begin = (uint32_t)b[i],
                                      .layer_end = (uint32_t)e[i],
                                      .plan_us = s_us(cost + head_us)}};
        SW_INFO("placement: %s gets layers [%d, %d) (%.0f us a layer, %u MiB)", nodes[i].name, b[i],
                e[i], nodes[i].us_layer, peers[i].announce.mem_mib);
        if (sw_peer_try_send_msg(n->peer, nodes[i].name, &pm) != 0)
            continue;
        snprintf(p->pend[p->n_pend].name, sizeof p->pend[0].name, "%s", nodes[i].name);
        p->pend[p->n_pend].begin = (uint32_t)b[i];
        p->pend[p->n_pend].end = (uint32_t)e[i];
        p->n_pend++;
    }
    p->planned = 1;
    p->said[0] = 0;
}

void node_place_free(node_t *n)
{
    free(n->place);
    n->place = NULL;
}
