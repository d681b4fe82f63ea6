/*
 * node.c - start-up and the event loop of shardwire-node: load the layer
 * range, connect to the relay, announce, then serve messages until SIGINT or
 * SIGTERM.
 */
#include "node.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sodium.h>

#include "head.h"
#include "log.h"
#include "placement.h"
#include "sched.h"
#include "stage.h"
#include "sysmem.h"

static sw_role_t s_role(const node_t *n)
{
    int first = sw_model_is_first(n->model), last = sw_model_is_last(n->model);
    if (first && last)
        return SW_ROLE_FULL;
    if (first)
        return SW_ROLE_HEAD;
    return last ? SW_ROLE_TAIL : SW_ROLE_MIDDLE;
}

/* The model's name for clients: --model-name, else the file name without
 * its folder and .gguf, characters outside the wire's alphabet as '-'. */
static void s_model_name(const node_opts_t *o, char *out, size_t len)
{
    if (o->model_name) {
        snprintf(out, len, "%s", o->model_name);
        return;
    }
    const char *base = strrchr(o->model, '/');
    base = base ? base + 1 : o->model;
    snprintf(out, len, "%s", base);
    size_t n = strlen(out);
    if (n > 5 && !strcmp(out + n - 5, ".gguf"))
        out[n - 5] = 0;
    for (char *c = out; *c; c++)
        if (!sw_wire_model_name_ok((char[]){*c, 0}))
            *c = '-';
}

static void s_on_close(node_t *n, const sw_wire_msg_t *m)
{
    sw_msg_t d;
    if (sw_codec_decode(m, SW_MSG_SESSION_CLOSE, &d, NULL, 0) != 0)
        return;
    const sw_msg_session_close_t *sc = &d.session_close;
    node_session_t *s = NULL;
    const char *why;
    s = node_session_get(n, sc->session_id, NULL, 0, 0, &why);
    if (s && s->creator[0] && strcmp(s->creator, m->peer) != 0 && strcmp(s->owner, m->peer) != 0) {
        SW_WARN("ignored a session_close from %s: the session belongs to %s", m->peer, s->creator);
        return;
    }
    if (!s)
        return;
    node_session_close(n, s);
    SW_INFO("session %016llx closed by %s (%s): %d session(s) held; %llu forwards run in %llu "
            "batches so far, the largest shared one %d rows",
            (unsigned long long)sc->session_id, m->peer, sc->reason[0] ? sc->reason : "no reason",
            node_sessions_held(n), (unsigned long long)n->stat_batched,
            (unsigned long long)n->stat_batches, n->stat_shared_rows);
    if (n->prefix) {
        const sw_prefix_stats_t *ps = sw_prefix_stats(n->prefix);
        SW_INFO("prefix cache: %llu of %llu prefills found a prefix, %llu positions reused; %d "
                "blocks held (%.1f MiB)",
                (unsigned long long)ps->hits, (unsigned long long)ps->lookups,
                (unsigned long long)ps->tokens_reused, ps->blocks, (double)ps->bytes / (1 << 20));
    }
}

static void s_on_plan(node_t *n, const sw_wire_msg_t *m);

static void s_dispatch_one(node_t *n, sw_wire_msg_t *m);

/* One message, its answers by the relay it came by (node_t.via). */
static void s_dispatch(node_t *n, sw_wire_msg_t *m)
{
    n->via = m->link;
    s_dispatch_one(n, m);
    n->via = -1;
}

/*
 * Direct paths (issue 39): dials the listeners that this node's neighbours announce in a
 * peer table: the nodes whose layers end where ours begin or begin where ours end, and our
 * model's head when we are its tail (the verdicts go there); of our model, key-bound at a
 * keyed relay. A link carries both ways, so one side listening is enough.
 */
static void s_direct_table(node_t *n, const sw_wire_msg_t *m)
{
    sw_msg_t d;
    if (!n->model || sw_codec_decode(m, SW_MSG_PEER_TABLE, &d, NULL, 0) != 0)
        return;
    const int need_key = n->o.sec && !n->o.sec->insecure;
    const uint32_t begin = (uint32_t)sw_model_layer_begin(n->model);
    const uint32_t end = (uint32_t)sw_model_layer_end(n->model);
    const uint32_t n_layers = (uint32_t)n->hp->n_layer;
    for (uint32_t i = 0; i < d.table.n_peers; i++) {
        sw_msg_peer_t pi;
        if (sw_codec_peer_at(&d.table, i, &pi) != 0 || !pi.announce.direct[0] ||
            !sw_codec_peer_routable(&pi, need_key))
            continue;
        const sw_msg_announce_t *a = &pi.announce;
        if (strcmp(a->model_fingerprint, n->fingerprint) != 0 || a->n_layers != n_layers ||
            a->layer_begin >= a->layer_end)
            continue;
        const int next = a->layer_begin == end, prev = a->layer_end == begin;
        const int head = end == n_layers && a->layer_begin == 0;
        if (next || prev || head)
            (void)sw_peer_direct_dial(n->peer, a->name, a->direct, a->direct_key, pi.key_fp);
    }
}

static void s_dispatch_one(node_t *n, sw_wire_msg_t *m)
{
    const int from_relay = !strcmp(m->peer, SW_WIRE_RELAY_NAME);
    const sw_msg_type_t type = sw_wire_msg_type(m);
    if (type == SW_MSG_PLAN_ASSIGN) {
        s_on_plan(n, m);
        return;
    }
    if (!n->model && type != SW_MSG_ERROR) { /* a standby holds no layers: nothing to run */
        SW_DEBUG("standby: ignoring a %s message from %s", sw_wire_type_name(type), m->peer);
        return;
    }
    switch (type) {
    case SW_MSG_FORWARD:
        node_stage_forward(n, m);
        break;
    case SW_MSG_GENERATE:
        node_head_request(n, m);
        break;
    case SW_MSG_SESSION_CLOSE:
        s_on_close(n, m);
        break;
    case SW_MSG_CANCEL:
        node_head_cancel(n, m);
        break;
    case SW_MSG_RESUME:
        node_head_resume(n, m);
        break;
    case SW_MSG_SPOT_QUERY:
        node_head_spot_query(n, m);
        break;
    case SW_MSG_VERDICT:
        node_head_verdict(n, m);
        break;
    case SW_MSG_PREFILL_ACK:
        node_head_prefill_ack(n, m);
        break;
    case SW_MSG_PEER_TABLE:
        if (from_relay)
            s_direct_table(n, m);
        if (from_relay && n->head)
            node_head_table(n, m);
        else if (from_relay)
            node_stage_table(n, m);
        break;
    case SW_MSG_ERROR: {
        if (n->head) {
            node_head_error(n, m);
            break;
        }
        sw_msg_t d;
        if (sw_codec_decode(m, SW_MSG_ERROR, &d, NULL, 0) != 0)
            break;
        char clean[SW_WIRE_MAX_ERROR_TEXT + 1];
        const char *text = d.error.message;
        sw_text_clean(clean, text, strnlen(text, SW_WIRE_MAX_ERROR_TEXT), 0, NULL);
        SW_WARN("error from %s: %s (%s)", m->peer, clean, sw_wire_error_code_name(d.error.code));
        break;
    }
    default:
        SW_DEBUG("ignoring a %s message from %s", sw_wire_type_name(type), m->peer);
        break;
    }
}

static const char *s_dtype_name(sw_dtype_t t)
{
    return t == SW_DTYPE_F16 ? "f16" : t == SW_DTYPE_BF16 ? "bf16" : "f32";
}

/* The budget's make_room (kv.h): cached prompt prefixes give way to the sessions. */
static void s_kv_room(void *ctx, int64_t need)
{
    node_t *n = ctx;
    node_prefix_room(n, (size_t)n->kv.used, (size_t)need);
}

/*
 * The sessions' context and KV memory, said in one line at start: the
 * context is --ctx, else the model's trained one; the KV memory --kv-mib,
 * else what --max-sessions sessions of that context take, but never more
 * than half the memory available now (the GPUs' free memory when the caches
 * live there, else the host's). A default context that does not fit that
 * memory once is cut to what does (said); an explicit --ctx that does not
 * is refused. Caches grow as they are used (engine/include/kv.h), so
 * sessions shorter than the context fit beyond the count of full ones, up
 * to --max-sessions; when fewer full ones fit than --max-sessions, the line
 * is a warning (never a silent cut). 0, or -1 (logged).
 */
static int s_kv_budget(node_t *n)
{
    node_opts_t *o = &n->o;
    char err[256] = "";
    if (sw_model_set_kv_type(n->model, (sw_kv_type_t)o->kv_type, err, sizeof err) != 0) {
        SW_ERR("--kv-type %s: %s", sw_kv_type_name((sw_kv_type_t)o->kv_type), err);
        return -1;
    }
    const int trained = n->hp->n_ctx_train, given = o->n_ctx > 0;
    if (!given)
        o->n_ctx = trained;
    else if (o->n_ctx > trained)
        SW_WARN("--ctx %d is beyond the %d positions the model was trained for: output past "
                "them may degrade",
                o->n_ctx, trained);
    const int64_t per_pos = (int64_t)sw_kv_bytes(n->model, 1);
    const int64_t dev_free = sw_backend_mem_free(n->be);
    const int64_t avail = dev_free >= 0 ? dev_free : sw_host_mem_available();
    char from[128];
    if (o->kv_bytes == 0) {
        o->kv_bytes = per_pos * o->n_ctx * o->max_sessions;
        snprintf(from, sizeof from, "--max-sessions %d full sessions", o->max_sessions);
        if (avail > 0 && o->kv_bytes > avail / 2) {
            o->kv_bytes = avail / 2;
            snprintf(from, sizeof from, "half of the %lld MiB %s free now (--kv-mib to change)",
                     (long long)(avail >> 20), dev_free >= 0 ? "of GPU memory" : "of memory");
        }
    } else {
        snprintf(from, sizeof from, "--kv-mib");
        if (avail > 0 && o->kv_bytes > avail)
            SW_WARN("--kv-mib %lld is more than the %lld MiB of memory available now",
                    (long long)(o->kv_bytes >> 20), (long long)(avail >> 20));
    }
    if (per_pos * o->n_ctx > o->kv_bytes) {
        const int64_t fit = o->kv_bytes / per_pos;
        if (given || fit < 1) {
            SW_ERR("--ctx %d needs %.1f MiB of KV cache for one session, more than the %.1f "
                   "MiB of KV memory (%s): lower --ctx or raise --kv-mib",
                   o->n_ctx, (double)(per_pos * o->n_ctx) / (1 << 20),
                   (double)o->kv_bytes / (1 << 20), from);
            return -1;
        }
        SW_WARN("context cut to %lld positions: the %d the model was trained for take %.1f MiB "
                "of KV cache, more than the %.1f MiB of KV memory (%s)",
                (long long)fit, o->n_ctx, (double)(per_pos * o->n_ctx) / (1 << 20),
                (double)o->kv_bytes / (1 << 20), from);
        o->n_ctx = (int)fit;
    }
    n->ctx_from = given                 ? "--ctx"
                  : o->n_ctx == trained ? "the model's trained context"
                                        : "what --kv-mib holds";
    const int64_t full = o->kv_bytes / (per_pos * o->n_ctx);
    n->kv_full = full < o->max_sessions ? (int)full : o->max_sessions;
    n->kv = (sw_kv_budget_t){.limit = o->kv_bytes, .make_room = s_kv_room, .ctx = n};
    char line[512];
    snprintf(line, sizeof line,
             "KV cache: %s, %lld MiB (%s), %.1f KiB a position: %d session%s of %d positions "
             "(%s) fit%s at full length; caches grow as sessions use them",
             sw_kv_type_name((sw_kv_type_t)o->kv_type), (long long)(o->kv_bytes >> 20), from,
             (double)per_pos / 1024, n->kv_full, n->kv_full == 1 ? "" : "s", o->n_ctx, n->ctx_from,
             n->kv_full == 1 ? "s" : "");
    if (n->kv_full < o->max_sessions)
        SW_WARN("%s; %d of the --max-sessions %d fit only while sessions are shorter", line,
                o->max_sessions - n->kv_full, o->max_sessions);
    else
        SW_INFO("%s (--max-sessions %d)", line, o->max_sessions);
    return 0;
}

/* The stage's session slots, batch and pending list and the hidden-state
 * and logits buffers. 0, or -1 (logged). */
static int s_buffers(node_t *n)
{
    const node_opts_t *o = &n->o;
    const size_t E = (size_t)n->hp->n_embd;
    if (E > SW_WIRE_MAX_HIDDEN) {
        SW_ERR("the model's hidden states are %zu wide; the protocol carries at most %d "
               "(SW_WIRE_MAX_HIDDEN), so it cannot be split over nodes",
               E, SW_WIRE_MAX_HIDDEN);
        return -1;
    }
    n->rows_cap = o->max_batch_rows > SW_WIRE_MAX_ROWS ? o->max_batch_rows : SW_WIRE_MAX_ROWS;
    n->logit_cap = o->max_batch_rows > SW_MAX_DRAFT + 1 ? o->max_batch_rows : SW_MAX_DRAFT + 1;
    n->sessions = calloc((size_t)o->max_sessions, sizeof *n->sessions);
    n->batch = calloc(NODE_MAX_BATCH, sizeof *n->batch);
    n->pending = calloc(NODE_PENDING_MAX, sizeof *n->pending);
    n->hidden_in = malloc((size_t)n->rows_cap * E * sizeof(float));
    n->hidden_out = malloc((size_t)n->rows_cap * E * sizeof(float));
    n->wire_buf = malloc(SW_WIRE_MAX_ROWS * E * sizeof(float));
    if (sw_model_is_last(n->model))
        n->logits = malloc((size_t)n->logit_cap * n->hp->n_vocab * sizeof(float));
    if (!n->sessions || !n->batch || !n->pending || !n->hidden_in || !n->hidden_out ||
        !n->wire_buf || (sw_model_is_last(n->model) && !n->logits)) {
        SW_ERR("out of memory for the buffers of %d sessions and batches of %d rows (lower "
               "--max-sessions or --max-batch-rows)",
               o->max_sessions, o->max_batch_rows);
        return -1;
    }
    return 0;
}

/* Loads the layer range on the backend, sizes the KV memory, allocates the
 * buffers and, on the head, the head. 0, or -1 (logged). */
static int s_load(node_t *n)
{
    const node_opts_t *o = &n->o;
    char err[512] = "";
    n->model = sw_model_load(o->model, o->layer_begin, o->layer_end, n->be, err, sizeof err);
    if (!n->model) {
        SW_ERR("%s: %s", o->model, err);
        return -1;
    }
    n->hp = sw_model_hparams(n->model);
    sw_model_fingerprint(n->model, n->fingerprint);
    sw_model_prefault(n->model, NULL, NULL);
    if (s_kv_budget(n) != 0)
        return -1;
    if (s_buffers(n) != 0)
        return -1;
    if (o->prefix_cache) {
        /* Prompt prefixes' KV, in --kv-mib beside the sessions' caches
         * (engine/include/prefix.h); its hash buckets keyed by a secret. */
        uint64_t seed;
        randombytes_buf(&seed, sizeof seed);
        n->prefix = sw_prefix_new(n->model, 0, seed);
        if (!n->prefix) {
            SW_ERR("out of memory for the prefix cache");
            return -1;
        }
    }
    if (sw_model_is_first(n->model) && node_head_new(n, err, sizeof err) != 0) {
        SW_ERR("%s: %s", o->model, err);
        return -1;
    }
    if (sw_model_is_first(n->model) && node_head_public_prefix(n, err, sizeof err) != 0) {
        SW_ERR("%s", err);
        return -1;
    }
    if (sw_model_is_first(n->model) && o->auto_nodes > 0 && node_place_head(n) != 0)
        return -1;
    return 0;
}

/* The backend, then the layer range (s_load), or for an auto node its probe
 * (it loads a range when its head assigns one). 0, or -1 (logged). */
static int s_open(node_t *n)
{
    const node_opts_t *o = &n->o;
    char err[512] = "";
    n->be = sw_backend_new(o->backend, o->threads, err, sizeof err);
    if (!n->be) {
        SW_ERR("--backend: %s", err);
        return -1;
    }
    return o->layer_auto ? node_place_standby(n) : s_load(n);
}

/* What n announces (the strings into backend and model_name). */
static void s_announce(const node_t *n, sw_msg_announce_t *an, char *backend, char *model_name)
{
    const node_opts_t *o = &n->o;
    snprintf(backend, SW_WIRE_NAME_MAX + 1, "%s", sw_backend_desc(n->be));
    s_model_name(o, model_name, SW_WIRE_NAME_MAX + 1);
    *an = (sw_msg_announce_t){
        .name = o->name,
        .role = n->model ? s_role(n) : SW_ROLE_MIDDLE,
        .model_fingerprint = n->fingerprint,
        .layer_begin = n->model ? (uint32_t)sw_model_layer_begin(n->model) : 0,
        .layer_end = n->model ? (uint32_t)sw_model_layer_end(n->model) : 0,
        .n_layers = (uint32_t)n->hp->n_layer,
        .backend = backend,
        .max_sessions = (uint32_t)o->max_sessions,
        .hidden = (uint32_t)n->hp->n_embd,
        .model_name = model_name,
        .n_ctx = n->model ? (uint32_t)o->n_ctx : 0,
        .kv_mib = n->model ? (uint32_t)(o->kv_bytes >> 20) : 0,
        .kv_full = n->model ? (uint32_t)n->kv_full : 0,
        .kv_type = (uint32_t)o->kv_type,
    };
    node_place_announce(n, an);
}

/* Announces n again on its connection (a measured round trip, a range). */
static void s_reannounce(node_t *n)
{
    char backend[SW_WIRE_NAME_MAX + 1], model_name[SW_WIRE_NAME_MAX + 1];
    sw_msg_announce_t an;
    s_announce(n, &an, backend, model_name);
    if (sw_peer_reannounce(n->peer, &an) != 0)
        SW_WARN("could not announce again");
}

/* A PlanAssign: an auto node that takes its range loads it and announces it. */
static void s_on_plan(node_t *n, const sw_wire_msg_t *m)
{
    if (!node_place_assign(n, m))
        return;
    if (s_load(n) != 0) {
        SW_ERR("could not load the assigned layers [%d, %d): stopping", n->o.layer_begin,
               n->o.layer_end);
        *n->stop = 1;
        return;
    }
    s_reannounce(n);
    SW_INFO("serving layers [%d, %d) of %d on %s (%s, placed by %s)",
            sw_model_layer_begin(n->model), sw_model_layer_end(n->model), n->hp->n_layer,
            sw_backend_desc(n->be), sw_wire_role_name(s_role(n)), m->peer);
}

/* Joins the relay and announces the node. 0, 1 when stopped while waiting
 * for the relay, or -1 (logged). */
static int s_join(node_t *n)
{
    const node_opts_t *o = &n->o;
    char backend[SW_WIRE_NAME_MAX + 1], model_name[SW_WIRE_NAME_MAX + 1];
    sw_msg_announce_t an;
    s_announce(n, &an, backend, model_name);
    sw_peer_opts_t po = {.relay = o->relay,
                         .announce = &an,
                         .heartbeat_ms = o->heartbeat_ms,
                         .connect_timeout_ms = o->connect_timeout_ms,
                         .sec = o->sec,
                         .stop = n->stop,
                         .test_clock_skew_ms = o->test_skew_ms,
                         .listen = o->listen[0] ? o->listen : NULL,
                         .listen_public = o->listen_public[0] ? o->listen_public : NULL,
                         .allow_file = o->allow_file,
                         .direct_dial_ms = o->direct_dial_ms};
    n->via = -1;
    n->peer = sw_peer_new(&po);
    if (!n->peer) {
        if (*n->stop)
            return 1; /* Ctrl-C while waiting for the relay */
        SW_ERR("could not join the relay at %s", o->relay);
        return -1;
    }
    if (node_place_rtt(n))
        s_reannounce(n);
    if (!n->model) {
        SW_INFO("standby auto node (model %.12s..., %d layers) via %s", n->fingerprint,
                n->hp->n_layer, o->relay);
        return 0;
    }
    SW_INFO("serving layers [%d, %d) of %d on %s (%s, model %.12s...) via %s",
            sw_model_layer_begin(n->model), sw_model_layer_end(n->model), n->hp->n_layer,
            sw_backend_desc(n->be), sw_wire_role_name(an.role), n->fingerprint, o->relay);
    if (o->spot_share > 0 && !n->head)
        SW_WARN("--spot-check does nothing here: only the head (layers from 0) checks sessions");
    if (o->spot_share > 0 && n->head)
        SW_INFO("spot checks: %.3g of the sessions go down shadow routes too (docs/security.md)",
                o->spot_share);
    if (o->prefill_dtype != o->dtype)
        SW_WARN("--prefill-dtype %s: a prompt's hidden states leave this node as %s, other rounds "
                "as %s: output is not bit-identical to a single process (docs/benchmarks.md)",
                s_dtype_name(o->prefill_dtype), s_dtype_name(o->prefill_dtype),
                s_dtype_name(o->dtype));
    if (o->test_slow_ms > 0)
        SW_WARN("--test-slow-ms %d: FOR TESTS ONLY, every batch of this stage takes %d ms longer",
                o->test_slow_ms, o->test_slow_ms);
    if (o->test_slow_x > 0)
        SW_WARN("--test-slow-x %g: FOR TESTS ONLY, every batch of this stage is held %g times "
                "what its probe claimed for it",
                o->test_slow_x, o->test_slow_x);
    if (o->test_skew_ms)
        SW_WARN("--test-clock-skew-ms %d: FOR TESTS ONLY, this node seals and opens messages as if "
                "its clock were %d ms off",
                o->test_skew_ms, o->test_skew_ms);
    if (o->test_flip_bit > 0)
        SW_WARN("--test-flip-bit %d: FOR TESTS ONLY, this node lies: %s", o->test_flip_bit,
                n->head || sw_model_is_last(n->model)
                    ? "but only a middle stage flips bits: here it does nothing"
                    : "one bit of every Nth hidden-state payload it passes on is flipped");
    if (o->test_fake_digest > 0)
        SW_WARN("--test-fake-digest %d: FOR TESTS ONLY, this node lies: %s", o->test_fake_digest,
                !n->head && sw_model_is_last(n->model)
                    ? "every Nth verdict reports a made-up digest of what it received"
                    : "but only a tail reports digests: here it does nothing");
    return 0;
}

/* The event loop: read everything the relay has for us (Forwards wait in
 * the stage's batch), run the batch, advance the head's sessions, and wait
 * for the next message only as long as no timer is due. 0 when stopped, -1
 * when the relay connection is lost or the GPU failed for good (logged). */
static int s_loop(node_t *n)
{
    double next_expire = sw_now_ms() + 1000;
    while (!*n->stop) {
        sw_wire_msg_t m = {0};
        /* Forwards waiting at the stage: a batch each pass, new messages read between */
        int r = sw_peer_recv(n->peer, &m, node_stage_busy(n) ? 0 : node_head_timeout(n));
        for (int budget = 1024; r == 0; budget--) {
            s_dispatch(n, &m);
            sw_wire_msg_clear(&m);
            if (budget == 0 || *n->stop)
                break;
            r = sw_peer_recv(n->peer, &m, 0);
        }
        if (r < 0) {
            SW_ERR("lost the relay connection");
            return -1;
        }
        if (!n->model)
            continue; /* a standby: only a PlanAssign does anything */
        node_stage_flush(n);
        node_head_step(n);
        if (n->gpu_failed) {
            SW_ERR("%s; this node leaves the cluster so that %s", n->gpu_err,
                   n->head ? "its clients fail over to another head of the model"
                           : "the head routes around it");
            return -1;
        }
        double now = sw_now_ms();
        node_stage_step(n, now);
        if (now > next_expire) {
            node_sessions_expire(n, now);
            next_expire = now + 1000;
        }
    }
    return 0;
}

/* Frees everything of n (the head first: it still tells its clients and
 * stages). Whatever s_open got to is freed; the rest is NULL. */
static void s_close(node_t *n)
{
    node_head_free(n);
    for (int i = 0; n->batch && i < n->n_batch; i++)
        sw_wire_msg_clear(&n->batch[i].msg);
    n->n_batch = 0;
    for (int i = 0; n->sessions && i < n->o.max_sessions; i++)
        node_session_free(n, &n->sessions[i]);
    for (int i = 0; n->pending && i < n->n_pending; i++)
        sw_wire_msg_clear(&n->pending[i].msg);
    sw_wire_msg_clear(&n->table);
    free(n->pending);
    sw_peer_destroy(&n->peer);
    free(n->sessions);
    free(n->batch);
    free(n->hidden_in);
    free(n->hidden_out);
    free(n->wire_buf);
    free(n->logits);
    sw_prefix_free(&n->prefix);
    node_sched_free(&n->sched);
    sw_model_free(&n->model);
    node_place_free(n);
    sw_backend_free(&n->be);
}

int node_run(const node_opts_t *o, volatile sig_atomic_t *stop)
{
    node_t n = {.o = *o, .stop = stop};
    int rc = 1;
    sw_log_set_tag(o->name);
    if (s_open(&n) != 0)
        goto out;
    const int joined = s_join(&n);
    if (joined != 0) {
        rc = joined > 0 ? 0 : 1;
        goto out;
    }
    if (s_loop(&n) != 0)
        goto out;
    SW_INFO("shutting down");
    rc = 0;
out:
    s_close(&n);
    return rc;
}
