/*
 * codec.c - protobuf <-> the plain structs of codec.h, for every message
 * type, in one table. A decoder reads a message wire.c has validated, yet
 * still bounds every count by the plain array it fills and refuses a value
 * its plain field cannot hold; it copies numbers and points at strings,
 * arrays and the tensor, so a Forward or a Verdict costs no allocation and
 * no copy of its data. An encoder builds the protobuf on its own stack,
 * pointing into the caller's struct, refuses what the protobuf cannot carry
 * (a NULL array with a count, a negative count), and hands the Envelope to
 * a sink, whose send or encode validates every field (wire.c) before
 * anything leaves.
 */
#include "codec.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "half.h"
#include "log.h"

/* The plain enums carry the protobuf values, so a validated value converts
 * by a cast; these say so at compile time. */
#define S_SAME(plain, pb) ((int)(plain) == (int)(pb))
_Static_assert(S_SAME(SW_ROLE_NONE, SHARDWIRE__ROLE__ROLE_UNSPECIFIED) &&
                   S_SAME(SW_ROLE_HEAD, SHARDWIRE__ROLE__ROLE_HEAD) &&
                   S_SAME(SW_ROLE_MIDDLE, SHARDWIRE__ROLE__ROLE_MIDDLE) &&
                   S_SAME(SW_ROLE_TAIL, SHARDWIRE__ROLE__ROLE_TAIL) &&
                   S_SAME(SW_ROLE_FULL, SHARDWIRE__ROLE__ROLE_FULL) &&
                   S_SAME(SW_ROLE_CLIENT, SHARDWIRE__ROLE__ROLE_CLIENT),
               "sw_role_t and Role disagree");
_Static_assert(S_SAME(SW_DTYPE_F32, SHARDWIRE__DTYPE__DTYPE_F32) &&
                   S_SAME(SW_DTYPE_F16, SHARDWIRE__DTYPE__DTYPE_F16) &&
                   S_SAME(SW_DTYPE_BF16, SHARDWIRE__DTYPE__DTYPE_BF16),
               "sw_dtype_t and DType disagree");
_Static_assert(S_SAME(SW_DRAFT_AUTO, SHARDWIRE__DRAFT_MODE__DRAFT_AUTO) &&
                   S_SAME(SW_DRAFT_NONE, SHARDWIRE__DRAFT_MODE__DRAFT_NONE) &&
                   S_SAME(SW_DRAFT_MODEL, SHARDWIRE__DRAFT_MODE__DRAFT_MODEL) &&
                   S_SAME(SW_DRAFT_NGRAM, SHARDWIRE__DRAFT_MODE__DRAFT_NGRAM) &&
                   S_SAME(SW_DRAFT_MIX, SHARDWIRE__DRAFT_MODE__DRAFT_MIX),
               "sw_draft_mode_t and DraftMode disagree");
_Static_assert(S_SAME(SW_AHEAD_DEFAULT, SHARDWIRE__DRAFT_AHEAD__AHEAD_DEFAULT) &&
                   S_SAME(SW_AHEAD_OFF, SHARDWIRE__DRAFT_AHEAD__AHEAD_OFF) &&
                   S_SAME(SW_AHEAD_ON, SHARDWIRE__DRAFT_AHEAD__AHEAD_ON),
               "sw_draft_ahead_t and DraftAhead disagree");
_Static_assert(S_SAME(SW_FINISH_NONE, SHARDWIRE__FINISH_REASON__FINISH_NONE) &&
                   S_SAME(SW_FINISH_LENGTH, SHARDWIRE__FINISH_REASON__FINISH_LENGTH) &&
                   S_SAME(SW_FINISH_EOS, SHARDWIRE__FINISH_REASON__FINISH_EOS) &&
                   S_SAME(SW_FINISH_STOP, SHARDWIRE__FINISH_REASON__FINISH_STOP) &&
                   S_SAME(SW_FINISH_DEADLINE, SHARDWIRE__FINISH_REASON__FINISH_DEADLINE) &&
                   S_SAME(SW_FINISH_ERROR, SHARDWIRE__FINISH_REASON__FINISH_ERROR) &&
                   S_SAME(SW_FINISH_CANCELLED, SHARDWIRE__FINISH_REASON__FINISH_CANCELLED),
               "sw_finish_t and FinishReason disagree");
_Static_assert(S_SAME(SW_ERROR_UNSPECIFIED, SHARDWIRE__ERROR_CODE__ERR_UNSPECIFIED) &&
                   S_SAME(SW_ERROR_VERSION_MISMATCH, SHARDWIRE__ERROR_CODE__ERR_VERSION_MISMATCH) &&
                   S_SAME(SW_ERROR_MALFORMED, SHARDWIRE__ERROR_CODE__ERR_MALFORMED) &&
                   S_SAME(SW_ERROR_NAME_TAKEN, SHARDWIRE__ERROR_CODE__ERR_NAME_TAKEN) &&
                   S_SAME(SW_ERROR_NOT_ANNOUNCED, SHARDWIRE__ERROR_CODE__ERR_NOT_ANNOUNCED) &&
                   S_SAME(SW_ERROR_UNKNOWN_DEST, SHARDWIRE__ERROR_CODE__ERR_UNKNOWN_DEST) &&
                   S_SAME(SW_ERROR_DEST_BUSY, SHARDWIRE__ERROR_CODE__ERR_DEST_BUSY) &&
                   S_SAME(SW_ERROR_DEST_GONE, SHARDWIRE__ERROR_CODE__ERR_DEST_GONE) &&
                   S_SAME(SW_ERROR_RELAY_FULL, SHARDWIRE__ERROR_CODE__ERR_RELAY_FULL) &&
                   S_SAME(SW_ERROR_UNKNOWN_SESSION, SHARDWIRE__ERROR_CODE__ERR_UNKNOWN_SESSION) &&
                   S_SAME(SW_ERROR_BAD_REQUEST, SHARDWIRE__ERROR_CODE__ERR_BAD_REQUEST) &&
                   S_SAME(SW_ERROR_MODEL_MISMATCH, SHARDWIRE__ERROR_CODE__ERR_MODEL_MISMATCH) &&
                   S_SAME(SW_ERROR_INTERNAL, SHARDWIRE__ERROR_CODE__ERR_INTERNAL) &&
                   S_SAME(SW_ERROR_DEADLINE, SHARDWIRE__ERROR_CODE__ERR_DEADLINE) &&
                   S_SAME(SW_ERROR_UNAUTHORIZED, SHARDWIRE__ERROR_CODE__ERR_UNAUTHORIZED) &&
                   S_SAME(SW_ERROR_BUSY, SHARDWIRE__ERROR_CODE__ERR_BUSY) &&
                   S_SAME(SW_ERROR_PLAN_REFUSED, SHARDWIRE__ERROR_CODE__ERR_PLAN_REFUSED),
               "sw_error_code_t and ErrorCode disagree");

/* Writes one line into err (or logs it) and returns SW_WIRE_EMALFORMED. */
static int s_fail(char *err, size_t err_len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int s_fail(char *err, size_t err_len, const char *fmt, ...)
{
    char line[SW_WIRE_ERR_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (err && err_len > 0)
        snprintf(err, err_len, "%s", line);
    else
        SW_WARN("codec: %s", line);
    return SW_WIRE_EMALFORMED;
}

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond))                                                                               \
            return s_fail(err, err_len, __VA_ARGS__);                                              \
    } while (0)

/* A received string: never NULL. */
static const char *s_in_str(const char *s)
{
    return s ? s : "";
}

/* A string to send: protobuf-c wants a char * (it only reads it); NULL is "". */
static char *s_out_str(const char *s)
{
    return (char *)(s ? s : "");
}

/* An array to send (read only by the packer). */
static uint32_t *s_out_u32(const uint32_t *p)
{
    return (uint32_t *)p;
}

/* ---- shared pieces --------------------------------------------------------------------- */

/* SamplingParams as the protocol reads them: absent = every field 0; top_p
 * 0 and repeat_penalty 0 mean 1 (off). */
static int s_sampling_in(const Shardwire__SamplingParams *w, int *has, sw_sampling_t *out,
                         char *err, size_t err_len)
{
    static const Shardwire__SamplingParams zero = SHARDWIRE__SAMPLING_PARAMS__INIT;
    *has = w != NULL;
    if (!w)
        w = &zero;
    CHECK(w->top_k <= INT_MAX, "sampling.top_k %u too large", w->top_k);
    CHECK(w->repeat_last_n <= INT_MAX, "sampling.repeat_last_n %u too large", w->repeat_last_n);
    out->temp = w->temperature;
    out->top_k = (int)w->top_k;
    out->top_p = w->top_p > 0 ? w->top_p : 1.0f;
    out->min_p = w->min_p;
    out->rep_penalty = w->repeat_penalty > 0 ? w->repeat_penalty : 1.0f;
    out->rep_last_n = (int)w->repeat_last_n;
    out->seed = w->seed;
    return SW_WIRE_OK;
}

/* *w from p, or NULL into *wp when has is 0. */
static int s_sampling_out(int has, const sw_sampling_t *p, Shardwire__SamplingParams *w,
                          Shardwire__SamplingParams **wp, char *err, size_t err_len)
{
    *wp = NULL;
    if (!has)
        return SW_WIRE_OK;
    CHECK(p->top_k >= 0, "sampling.top_k %d is negative", p->top_k);
    CHECK(p->rep_last_n >= 0, "sampling.repeat_last_n %d is negative", p->rep_last_n);
    shardwire__sampling_params__init(w);
    w->temperature = p->temp;
    w->top_k = (uint32_t)p->top_k;
    w->top_p = p->top_p;
    w->min_p = p->min_p;
    w->repeat_penalty = p->rep_penalty;
    w->repeat_last_n = (uint32_t)p->rep_last_n;
    w->seed = p->seed;
    *wp = w;
    return SW_WIRE_OK;
}

static int s_timing_in(const char *what, Shardwire__StageTiming *const *t, size_t n,
                       sw_msg_timing_t *out, uint32_t *n_out, char *err, size_t err_len)
{
    CHECK(n <= SW_WIRE_MAX_ROUTE, "%s has %zu entries (max %d)", what, n, SW_WIRE_MAX_ROUTE);
    for (size_t i = 0; i < n; i++) {
        CHECK(t[i] != NULL, "%s[%zu] missing", what, i);
        out[i].name = s_in_str(t[i]->name);
        out[i].compute_us = t[i]->compute_us;
        out[i].queue_us = t[i]->queue_us;
        out[i].batch_rows = t[i]->batch_rows;
        out[i].batch_rounds = t[i]->batch_rounds;
    }
    *n_out = (uint32_t)n;
    return SW_WIRE_OK;
}

static int s_timing_out(const char *what, const sw_msg_timing_t *in, uint32_t n,
                        Shardwire__StageTiming *pb, Shardwire__StageTiming **ptrs, char *err,
                        size_t err_len)
{
    CHECK(n <= SW_WIRE_MAX_ROUTE, "%s has %u entries (max %d)", what, n, SW_WIRE_MAX_ROUTE);
    for (uint32_t i = 0; i < n; i++) {
        shardwire__stage_timing__init(&pb[i]);
        pb[i].name = s_out_str(in[i].name);
        CHECK(in[i].batch_rows <= SW_WIRE_MAX_BATCH_ROWS &&
                  in[i].batch_rounds <= SW_WIRE_MAX_BATCH_ROUNDS,
              "%s[%u]: a batch of %u rows in %u rounds", what, i, in[i].batch_rows,
              in[i].batch_rounds);
        pb[i].compute_us = in[i].compute_us;
        pb[i].queue_us = in[i].queue_us;
        pb[i].batch_rows = in[i].batch_rows;
        pb[i].batch_rounds = in[i].batch_rounds;
        ptrs[i] = &pb[i];
    }
    return SW_WIRE_OK;
}

static int s_route_in(const char *what, char *const *route, size_t n, const char **out,
                      uint32_t *n_out, char *err, size_t err_len)
{
    CHECK(n <= SW_WIRE_MAX_ROUTE, "%s has %zu stages (max %d)", what, n, SW_WIRE_MAX_ROUTE);
    for (size_t i = 0; i < n; i++)
        out[i] = s_in_str(route[i]);
    *n_out = (uint32_t)n;
    return SW_WIRE_OK;
}

static int s_route_out(const char *what, const char *const *route, uint32_t n, char **out,
                       char *err, size_t err_len)
{
    CHECK(n <= SW_WIRE_MAX_ROUTE, "%s has %u stages (max %d)", what, n, SW_WIRE_MAX_ROUTE);
    for (uint32_t i = 0; i < n; i++)
        out[i] = s_out_str(route[i]);
    return SW_WIRE_OK;
}

static int s_announce_in(const Shardwire__PeerAnnounce *a, sw_msg_announce_t *out, char *err,
                         size_t err_len)
{
    CHECK(a != NULL, "announce missing");
    CHECK(a->role >= SHARDWIRE__ROLE__ROLE_UNSPECIFIED && a->role <= SHARDWIRE__ROLE__ROLE_CLIENT,
          "announce.role %d unknown", (int)a->role);
    out->name = s_in_str(a->name);
    out->role = (sw_role_t)a->role;
    out->model_fingerprint = s_in_str(a->model_fingerprint);
    out->layer_begin = a->layer_begin;
    out->layer_end = a->layer_end;
    out->n_layers = a->n_layers;
    out->backend = s_in_str(a->backend);
    out->max_sessions = a->max_sessions;
    out->hidden = a->hidden;
    out->model_name = s_in_str(a->model_name);
    out->mem_mib = a->mem_mib;
    out->us_layer_1 = a->us_layer_1;
    out->us_layer_k = a->us_layer_k;
    out->probe_rows = a->probe_rows;
    out->rtt_us = a->rtt_us;
    out->auto_place = a->auto_place != 0;
    out->kv_kib_layer = a->kv_kib_layer;
    out->us_out_1 = a->us_out_1;
    out->us_out_k = a->us_out_k;
    return SW_WIRE_OK;
}

static void s_announce_out(const sw_msg_announce_t *in, Shardwire__PeerAnnounce *a)
{
    shardwire__peer_announce__init(a);
    a->name = s_out_str(in->name);
    a->role = (Shardwire__Role)in->role;
    a->model_fingerprint = s_out_str(in->model_fingerprint);
    a->layer_begin = in->layer_begin;
    a->layer_end = in->layer_end;
    a->n_layers = in->n_layers;
    a->backend = s_out_str(in->backend);
    a->max_sessions = in->max_sessions;
    a->hidden = in->hidden;
    a->model_name = s_out_str(in->model_name);
    a->mem_mib = in->mem_mib;
    a->us_layer_1 = in->us_layer_1;
    a->us_layer_k = in->us_layer_k;
    a->probe_rows = in->probe_rows;
    a->rtt_us = in->rtt_us;
    a->auto_place = in->auto_place != 0;
    a->kv_kib_layer = in->kv_kib_layer;
    a->us_out_1 = in->us_out_1;
    a->us_out_k = in->us_out_k;
}

static int s_peer_in(const Shardwire__PeerInfo *pi, sw_msg_peer_t *out, char *err, size_t err_len)
{
    CHECK(pi != NULL, "peer_table entry missing");
    int rc = s_announce_in(pi->announce, &out->announce, err, err_len);
    if (rc)
        return rc;
    out->heartbeat_age_ms = pi->heartbeat_age_ms;
    out->idle_ms = pi->idle_ms;
    out->msgs_in = pi->msgs_in;
    out->msgs_out = pi->msgs_out;
    out->bytes_in = pi->bytes_in;
    /* a value this reader does not know binds no more than the name */
    out->key_bound = pi->key_bound == SW_KEY_BOUND_ROLE ? SW_KEY_BOUND_ROLE
                     : pi->key_bound                    ? SW_KEY_BOUND_NAME
                                                        : 0;
    out->key_fp = s_in_str(pi->key_fp);
    return SW_WIRE_OK;
}

/* ---- one decoder and one encoder per message type ---------------------------------------- */

/* Every encoder ends here: the Envelope around body, to the sink. */
static int s_emit_env(Shardwire__Envelope *env, int body, sw_codec_sink_fn sink, void *ctx,
                      const void *payload, size_t payload_len)
{
    env->body_case = (Shardwire__Envelope__BodyCase)body;
    return sink(ctx, env, payload, payload_len, payload != NULL);
}

static int s_announce_dec(const sw_wire_msg_t *m, sw_msg_t *out, char *err, size_t err_len)
{
    return s_announce_in(m->env->announce, &out->announce, err, err_len);
}

static int s_announce_enc(const sw_msg_t *msg, sw_codec_sink_fn sink, void *ctx, char *err,
                          size_t err_len)
{
    (void)err, (void)err_len;
    Shardwire__PeerAnnounce a;
    s_announce_out(&msg->announce, &a);
    Shardwire__Envelope env = SHARDWIRE__ENVELOPE__INIT;
    env.announce = &a;
    return s_emit_env(&env, SHARDWIRE__ENVELOPE__BODY_ANNOUNCE, sink, ctx, NULL, 0);
}

static int s_ack_dec(const sw_wire_msg_t *m, sw_msg_t *out, char *err, size_t err_len)
{
    const Shardwire__AnnounceAck *a = m->env->announce_ack;
    CHECK(a != NULL, "announce_ack missing");
    out->ack.name = s_in_str(a->name);
    out->ack.heartbeat_ms = a->heartbeat_ms;
    out->ack.max_frame_bytes = a->max_frame_bytes;
    return SW_WIRE_OK;
}

static int s_ack_enc(const sw_msg_t *msg, sw_codec_sink_fn sink, void *ctx, char *err,
                     size_t err_len)
{
    (void)err, (void)err_len;
    Shardwire__AnnounceAck a = SHARDWIRE__ANNOUNCE_ACK__INIT;
    a.name = s_out_str(msg->ack.name);
    a.heartbeat_ms = msg->ack.heartbeat_ms;
    a.max_frame_bytes = msg->ack.max_frame_bytes;
    Shardwire__Envelope env = SHARDWIRE__ENVELOPE__INIT;
    env.announce_ack = &a;
    return s_emit_env(&env, SHARDWIRE__ENVELOPE__BODY_ANNOUNCE_ACK, sink, ctx, NULL, 0);
}

static int s_status_query_dec(const sw_wire_msg_t *m, sw_msg_t *out, char *err, size_t err_len)
{
    (void)out;
    CHECK(m->env->status_query != NULL, "status_query missing");
    return SW_WIRE_OK;
}

static int s_status_query_enc(const sw_msg_t *msg, sw_codec_sink_fn sink, void *ctx, char *err,
                              size_t err_len)
{
    (void)msg, (void)err, (void)err_len;
    Shardwire__StatusQuery q = SHARDWIRE__STATUS_QUERY__INIT;
    Shardwire__Envelope env = SHARDWIRE__ENVELOPE__INIT;
    env.status_query = &q;
    return s_emit_env(&env, SHARDWIRE__ENVELOPE__BODY_STATUS_QUERY, sink, ctx, NULL, 0);
}

static int s_table_dec(const sw_wire_msg_t *m, sw_msg_t *out, char *err, size_t err_len)
{
    const Shardwire__PeerTable *t = m->env->peer_table;
    CHECK(t != NULL, "peer_table missing");
    CHECK(t->n_peers <= SW_WIRE_MAX_PEERS, "peer_table has %zu peers (max %d)", t->n_peers,
          SW_WIRE_MAX_PEERS);
    for (size_t i = 0; i < t->n_peers; i++)
        CHECK(t->peers[i] != NULL && t->peers[i]->announce != NULL,
              "peer_table.peers[%zu] has no announce", i);
    sw_msg_table_t *o = &out->table;
    o->n_peers = (uint32_t)t->n_peers;
    o->peers = NULL;
    o->pb = t;
    o->uptime_ms = t->uptime_ms;
    o->msgs_forwarded = t->msgs_forwarded;
    o->msgs_dropped = t->msgs_dropped;
    return SW_WIRE_OK;
}

static int s_table_enc(const sw_msg_t *msg, sw_codec_sink_fn sink, void *ctx, char *err,
                       size_t err_len)
{
    const sw_msg_table_t *t = &msg->table;
    CHECK(t->n_peers <= SW_WIRE_MAX_PEERS, "peer_table has %u peers (max %d)", t->n_peers,
          SW_WIRE_MAX_PEERS);
    Shardwire__PeerAnnounce an[SW_WIRE_MAX_PEERS];
    Shardwire__PeerInfo info[SW_WIRE_MAX_PEERS], *ptrs[SW_WIRE_MAX_PEERS];
    for (uint32_t i = 0; i < t->n_peers; i++) {
        sw_msg_peer_t p;
        CHECK(sw_codec_peer_at(t, i, &p) == 0, "peer_table entry %u unreadable", i);
        s_announce_out(&p.announce, &an[i]);
        shardwire__peer_info__init(&info[i]);
        info[i].announce = &an[i];
        info[i].heartbeat_age_ms = p.heartbeat_age_ms;
        info[i].idle_ms = p.idle_ms;
        info[i].msgs_in = p.msgs_in;
        info[i].msgs_out = p.msgs_out;
        info[i].bytes_in = p.bytes_in;
        info[i].key_bound = (uint32_t)p.key_bound;
        info[i].key_fp = (char *)(p.key_fp ? p.key_fp : "");
        ptrs[i] = &info[i];
    }
    Shardwire__PeerTable pt = SHARDWIRE__PEER_TABLE__INIT;
    pt.n_peers = t->n_peers;
    pt.peers = ptrs;
    pt.uptime_ms = t->uptime_ms;
    pt.msgs_forwarded = t->msgs_forwarded;
    pt.msgs_dropped = t->msgs_dropped;
    Shardwire__Envelope env = SHARDWIRE__ENVELOPE__INIT;
    env.peer_table = &pt;
    return s_emit_env(&env, SHARDWIRE__ENVELOPE__BODY_PEER_TABLE, sink, ctx, NULL, 0);
}

static int s_session_open_dec(const sw_wire_msg_t *m, sw_msg_t *out, char *err, size_t err_len)
{
    const Shardwire__SessionOpen *so = m->env->session_open;
    CHECK(so != NULL, "session_open missing");
    sw_msg_session_open_t *o = &out->session_open;
    o->session_id = so->session_id;
    o->n_ctx = so->n_ctx;
    o->model_fingerprint = s_in_str(so->model_fingerprint);
    int rc = s_route_in("session_open.route", so->route, so->n_route, o->route, &o->n_route, err,
                        err_len);
    if (rc)
        return rc;
    return s_sampling_in(so->sampling, &o->has_sampling, &o->sampling, err, err_len);
}

static int s_session_open_enc(const sw_msg_t *msg, sw_codec_sink_fn sink, void *ctx, char *err,
                              size_t err_len)
{
    const sw_msg_session_open_t *o = &msg->session_open;
    Shardwire__SessionOpen so = SHARDWIRE__SESSION_OPEN__INIT;
    Shardwire__SamplingParams sp;
    char *route[SW_WIRE_MAX_ROUTE];
    int rc = s_route_out("session_open.route", o->route, o->n_route, route, err, err_len);
    if (rc || (rc = s_sampling_out(o->has_sampling, &o->sampling, &sp, &so.sampling, err, err_len)))
        return rc;
    so.session_id = o->session_id;
    so.n_ctx = o->n_ctx;
    so.model_fingerprint = s_out_str(o->model_fingerprint);
    so.n_route = o->n_route;
    so.route = route;
    Shardwire__Envelope env = SHARDWIRE__ENVELOPE__INIT;
    env.session_open = &so;
    return s_emit_env(&env, SHARDWIRE__ENVELOPE__BODY_SESSION_OPEN, sink, ctx, NULL, 0);
}

static int s_session_close_dec(const sw_wire_msg_t *m, sw_msg_t *out, char *err, size_t err_len)
{
    const Shardwire__SessionClose *sc = m->env->session_close;
    CHECK(sc != NULL, "session_close missing");
    out->session_close.session_id = sc->session_id;
    out->session_close.reason = s_in_str(sc->reason);
    return SW_WIRE_OK;
}

static int s_session_close_enc(const sw_msg_t *msg, sw_codec_sink_fn sink, void *ctx, char *err,
                               size_t err_len)
{
    (void)err, (void)err_len;
    Shardwire__SessionClose sc = SHARDWIRE__SESSION_CLOSE__INIT;
    sc.session_id = msg->session_close.session_id;
    sc.reason = s_out_str(msg->session_close.reason);
    Shardwire__Envelope env = SHARDWIRE__ENVELOPE__INIT;
    env.session_close = &sc;
    return s_emit_env(&env, SHARDWIRE__ENVELOPE__BODY_SESSION_CLOSE, sink, ctx, NULL, 0);
}

/* The hot path: every field assigned, arrays filled only up to their counts. */
static int s_forward_dec(const sw_wire_msg_t *m, sw_msg_t *out, char *err, size_t err_len)
{
    const Shardwire__Forward *f = m->env->forward;
    sw_msg_forward_t *o = &out->forward;
    int rc;
    CHECK(f != NULL, "forward missing");
    const size_t k = f->n_draft_tokens;
    CHECK(f->n_tokens <= SW_WIRE_MAX_ROWS, "forward has %zu tokens (max %d)", f->n_tokens,
          SW_WIRE_MAX_ROWS);
    CHECK(k <= SW_WIRE_MAX_DRAFT, "forward has %zu drafts (max %d)", k, SW_WIRE_MAX_DRAFT);
    CHECK(f->n_draft_probs == 0 || f->n_draft_probs == k,
          "forward has %zu draft_probs for %zu drafts", f->n_draft_probs, k);
    CHECK(f->n_draft_parents == 0 || f->n_draft_parents == k,
          "forward has %zu draft_parents for %zu drafts", f->n_draft_parents, k);
    CHECK(f->n_draft_dists == 0 || f->n_draft_dists == k,
          "forward has %zu draft_dists for %zu drafts", f->n_draft_dists, k);
    CHECK(f->n_kv_path <= SW_WIRE_MAX_DRAFT, "forward.kv_path has %zu entries (max %d)",
          f->n_kv_path, SW_WIRE_MAX_DRAFT);
    CHECK(f->dtype >= SHARDWIRE__DTYPE__DTYPE_F32 && f->dtype <= SHARDWIRE__DTYPE__DTYPE_BF16,
          "forward.dtype %d unknown", (int)f->dtype);
    o->session_id = f->session_id;
    o->round = f->round;
    o->start_pos = f->start_pos;
    o->kv_keep = f->kv_keep;
    o->n_rows = f->n_rows;
    o->n_tokens = (uint32_t)f->n_tokens;
    o->tokens = f->tokens;
    if ((rc = s_sampling_in(f->sampling, &o->has_sampling, &o->sampling, err, err_len)))
        return rc;
    o->n_draft = (uint32_t)k;
    o->draft_tokens = f->draft_tokens;
    o->draft_probs = f->n_draft_probs ? f->draft_probs : NULL;
    o->n_dists = (uint32_t)f->n_draft_dists;
    for (size_t i = 0; i < f->n_draft_dists; i++) {
        const Shardwire__DraftDist *d = f->draft_dists[i];
        CHECK(d != NULL && d->n_tokens == d->n_probs && d->n_tokens <= SW_WIRE_MAX_DIST,
              "forward.draft_dists[%zu] malformed", i);
        o->dists[i].n = (uint32_t)d->n_tokens;
        o->dists[i].tokens = d->tokens;
        o->dists[i].probs = d->probs;
    }
    o->draft_parents = f->n_draft_parents ? f->draft_parents : NULL;
    o->dtype = (sw_dtype_t)f->dtype;
    o->hidden = f->hidden;
    o->layer_begin = f->layer_begin;
    if ((rc = s_route_in("forward.route", f->route, f->n_route, o->route, &o->n_route, err,
                         err_len)))
        return rc;
    o->hop = f->hop;
    o->reply_to = s_in_str(f->reply_to);
    o->prefill_more = f->prefill_more != 0;
    if ((rc = s_timing_in("forward.timing", f->timing, f->n_timing, o->timing, &o->n_timing, err,
                          err_len)))
        return rc;
    o->kv_path_from = f->kv_path_from;
    o->n_kv_path = (uint32_t)f->n_kv_path;
    o->kv_path = f->n_kv_path ? f->kv_path : NULL;
    o->n_ctx = f->n_ctx;
    o->prefix_len = f->prefix_len;
    o->prefix_tokens = f->prefix_len ? f->prefix_tokens : NULL;
    CHECK(f->n_hop_digests < SW_WIRE_MAX_ROUTE, "forward has %zu hop_digests", f->n_hop_digests);
    o->n_hop_digests = (uint32_t)f->n_hop_digests;
    if (f->n_hop_digests)
        memcpy(o->hop_digests, f->hop_digests, f->n_hop_digests * sizeof *o->hop_digests);
    /* zmq_msg_data only reads; the frame stays m's */
    o->payload = m->has_payload ? zmq_msg_data((zmq_msg_t *)&m->payload) : NULL;
    o->payload_len = m->has_payload ? zmq_msg_size((zmq_msg_t *)&m->payload) : 0;
    return SW_WIRE_OK;
}

static int s_forward_enc(const sw_msg_t *msg, sw_codec_sink_fn sink, void *ctx, char *err,
                         size_t err_len)
{
    const sw_msg_forward_t *f = &msg->forward;
    Shardwire__Forward pb = SHARDWIRE__FORWARD__INIT;
    Shardwire__SamplingParams sp;
    Shardwire__DraftDist dd[SW_WIRE_MAX_DRAFT], *ddp[SW_WIRE_MAX_DRAFT];
    char *route[SW_WIRE_MAX_ROUTE];
    Shardwire__StageTiming tm[SW_WIRE_MAX_ROUTE], *tmp[SW_WIRE_MAX_ROUTE];
    int rc;
    CHECK(f->n_tokens == 0 || f->tokens, "forward.tokens missing");
    CHECK(f->n_draft <= SW_WIRE_MAX_DRAFT, "forward has %u drafts (max %d)", f->n_draft,
          SW_WIRE_MAX_DRAFT);
    CHECK(f->n_draft == 0 || f->draft_tokens, "forward.draft_tokens missing");
    CHECK(f->n_dists <= SW_WIRE_MAX_DRAFT, "forward has %u draft_dists (max %d)", f->n_dists,
          SW_WIRE_MAX_DRAFT);
    CHECK(f->n_kv_path == 0 || f->kv_path, "forward.kv_path missing");
    CHECK(f->prefix_len == 0 || f->prefix_tokens, "forward.prefix_tokens missing");
    CHECK(f->prefix_len <= SW_WIRE_MAX_PREFIX, "forward.prefix_len %u (max %u)", f->prefix_len,
          (unsigned)SW_WIRE_MAX_PREFIX);
    CHECK(!f->payload || f->payload_len > 0, "forward payload of 0 bytes");
    CHECK(f->n_hop_digests < SW_WIRE_MAX_ROUTE, "forward has %u hop_digests", f->n_hop_digests);
    if ((rc = s_sampling_out(f->has_sampling, &f->sampling, &sp, &pb.sampling, err, err_len)) ||
        (rc = s_route_out("forward.route", f->route, f->n_route, route, err, err_len)) ||
        (rc = s_timing_out("forward.timing", f->timing, f->n_timing, tm, tmp, err, err_len)))
        return rc;
    for (uint32_t i = 0; i < f->n_dists; i++) {
        const sw_msg_dist_t *d = &f->dists[i];
        CHECK(d->n == 0 || (d->tokens && d->probs), "forward.draft_dists[%u] arrays missing", i);
        shardwire__draft_dist__init(&dd[i]);
        dd[i].n_tokens = dd[i].n_probs = d->n;
        dd[i].tokens = s_out_u32(d->tokens);
        dd[i].probs = (float *)d->probs;
        ddp[i] = &dd[i];
    }
    pb.session_id = f->session_id;
    pb.round = f->round;
    pb.start_pos = f->start_pos;
    pb.kv_keep = f->kv_keep;
    pb.n_rows = f->n_rows;
    pb.n_tokens = f->n_tokens;
    pb.tokens = s_out_u32(f->tokens);
    pb.n_draft_tokens = f->n_draft;
    pb.draft_tokens = s_out_u32(f->draft_tokens);
    pb.n_draft_probs = f->draft_probs ? f->n_draft : 0;
    pb.draft_probs = (float *)f->draft_probs;
    pb.n_draft_dists = f->n_dists;
    pb.draft_dists = ddp;
    pb.n_draft_parents = f->draft_parents ? f->n_draft : 0;
    pb.draft_parents = s_out_u32(f->draft_parents);
    pb.dtype = (Shardwire__DType)f->dtype;
    pb.hidden = f->hidden;
    pb.layer_begin = f->layer_begin;
    pb.n_route = f->n_route;
    pb.route = route;
    pb.hop = f->hop;
    pb.reply_to = s_out_str(f->reply_to);
    pb.prefill_more = f->prefill_more != 0;
    pb.n_timing = f->n_timing;
    pb.timing = tmp;
    pb.kv_path_from = f->kv_path_from;
    pb.n_kv_path = f->n_kv_path;
    pb.kv_path = s_out_u32(f->kv_path);
    pb.n_ctx = f->n_ctx;
    pb.prefix_len = f->prefix_len;
    pb.n_prefix_tokens = f->prefix_len;
    pb.prefix_tokens = s_out_u32(f->prefix_tokens);
    pb.n_hop_digests = f->n_hop_digests;
    pb.hop_digests = (uint64_t *)f->hop_digests;
    Shardwire__Envelope env = SHARDWIRE__ENVELOPE__INIT;
    env.forward = &pb;
    return s_emit_env(&env, SHARDWIRE__ENVELOPE__BODY_FORWARD, sink, ctx, f->payload,
                      f->payload_len);
}

static int s_verdict_dec(const sw_wire_msg_t *m, sw_msg_t *out, char *err, size_t err_len)
{
    const Shardwire__Verdict *v = m->env->verdict;
    sw_msg_verdict_t *o = &out->verdict;
    CHECK(v != NULL, "verdict missing");
    CHECK(v->n_tokens <= SW_WIRE_MAX_DRAFT + 1, "verdict has %zu tokens (max %d)", v->n_tokens,
          SW_WIRE_MAX_DRAFT + 1);
    CHECK(v->n_path <= SW_WIRE_MAX_DRAFT, "verdict has %zu path entries (max %d)", v->n_path,
          SW_WIRE_MAX_DRAFT);
    o->session_id = v->session_id;
    o->round = v->round;
    o->n_accepted = v->n_accepted;
    o->n_tokens = (uint32_t)v->n_tokens;
    o->tokens = v->tokens;
    o->next_token = v->next_token;
    o->n_path = (uint32_t)v->n_path;
    o->path = v->n_path ? v->path : NULL;
    o->logits_digest = v->logits_digest;
    CHECK(v->n_hop_digests < SW_WIRE_MAX_ROUTE, "verdict has %zu hop_digests", v->n_hop_digests);
    o->n_hop_digests = (uint32_t)v->n_hop_digests;
    if (v->n_hop_digests)
        memcpy(o->hop_digests, v->hop_digests, v->n_hop_digests * sizeof *o->hop_digests);
    return s_timing_in("verdict.timing", v->timing, v->n_timing, o->timing, &o->n_timing, err,
                       err_len);
}

static int s_verdict_enc(const sw_msg_t *msg, sw_codec_sink_fn sink, void *ctx, char *err,
                         size_t err_len)
{
    const sw_msg_verdict_t *v = &msg->verdict;
    Shardwire__Verdict pb = SHARDWIRE__VERDICT__INIT;
    Shardwire__StageTiming tm[SW_WIRE_MAX_ROUTE], *tmp[SW_WIRE_MAX_ROUTE];
    CHECK(v->n_tokens == 0 || v->tokens, "verdict.tokens missing");
    CHECK(v->n_path == 0 || v->path, "verdict.path missing");
    int rc = s_timing_out("verdict.timing", v->timing, v->n_timing, tm, tmp, err, err_len);
    if (rc)
        return rc;
    pb.session_id = v->session_id;
    pb.round = v->round;
    pb.n_accepted = v->n_accepted;
    pb.n_tokens = v->n_tokens;
    pb.tokens = s_out_u32(v->tokens);
    pb.next_token = v->next_token;
    pb.n_path = v->n_path;
    pb.path = s_out_u32(v->path);
    pb.n_timing = v->n_timing;
    pb.timing = tmp;
    pb.logits_digest = v->logits_digest;
    CHECK(v->n_hop_digests < SW_WIRE_MAX_ROUTE, "verdict has %u hop_digests", v->n_hop_digests);
    pb.n_hop_digests = v->n_hop_digests;
    pb.hop_digests = (uint64_t *)v->hop_digests;
    Shardwire__Envelope env = SHARDWIRE__ENVELOPE__INIT;
    env.verdict = &pb;
    return s_emit_env(&env, SHARDWIRE__ENVELOPE__BODY_VERDICT, sink, ctx, NULL, 0);
}

static int s_generate_dec(const sw_wire_msg_t *m, sw_msg_t *out, char *err, size_t err_len)
{
    const Shardwire__GenerateRequest *g = m->env->generate;
    sw_msg_generate_t *o = &out->generate;
    CHECK(g != NULL, "generate missing");
    CHECK(g->n_prompt_tokens <= SW_WIRE_MAX_PROMPT_TOKENS, "generate has %zu prompt tokens",
          g->n_prompt_tokens);
    CHECK(g->n_stop <= SW_WIRE_MAX_STOP, "generate has %zu stop strings (max %d)", g->n_stop,
          SW_WIRE_MAX_STOP);
    CHECK(g->n_messages <= SW_WIRE_MAX_MESSAGES, "generate has %zu messages (max %d)",
          g->n_messages, SW_WIRE_MAX_MESSAGES);
    for (size_t i = 0; i < g->n_messages; i++)
        CHECK(g->messages[i] != NULL, "generate.messages[%zu] missing", i);
    *o = (sw_msg_generate_t){0};
    o->request_id = s_in_str(g->request_id);
    o->prompt = s_in_str(g->prompt);
    o->n_prompt_tokens = (uint32_t)g->n_prompt_tokens;
    o->prompt_tokens = g->prompt_tokens;
    CHECK(g->n_resume_tokens < g->n_predict, "generate has %zu resume tokens", g->n_resume_tokens);
    o->n_resume_tokens = (uint32_t)g->n_resume_tokens;
    o->resume_tokens = g->resume_tokens;
    o->n_predict = g->n_predict;
    int rc = s_sampling_in(g->sampling, &o->has_sampling, &o->sampling, err, err_len);
    if (rc)
        return rc;
    o->chat = g->chat != 0;
    o->has_draft = g->draft != NULL;
    if (g->draft) {
        CHECK(g->draft->mode >= SHARDWIRE__DRAFT_MODE__DRAFT_AUTO &&
                  g->draft->mode <= SHARDWIRE__DRAFT_MODE__DRAFT_MIX,
              "generate.draft.mode %d unknown", (int)g->draft->mode);
        CHECK(g->draft->ahead >= SHARDWIRE__DRAFT_AHEAD__AHEAD_DEFAULT &&
                  g->draft->ahead <= SHARDWIRE__DRAFT_AHEAD__AHEAD_ON,
              "generate.draft.ahead %d unknown", (int)g->draft->ahead);
        o->draft.mode = (sw_draft_mode_t)g->draft->mode;
        o->draft.n_draft = g->draft->n_draft;
        o->draft.p_min = g->draft->p_min;
        o->draft.tree = g->draft->tree;
        o->draft.ahead = (sw_draft_ahead_t)g->draft->ahead;
    }
    o->timeout_ms = g->timeout_ms;
    o->n_stop = (uint32_t)g->n_stop;
    for (size_t i = 0; i < g->n_stop; i++)
        o->stop[i] = s_in_str(g->stop[i]);
    o->n_messages = (uint32_t)g->n_messages;
    o->messages = NULL;
    o->pb = g;
    return SW_WIRE_OK;
}

static int s_generate_enc(const sw_msg_t *msg, sw_codec_sink_fn sink, void *ctx, char *err,
                          size_t err_len)
{
    const sw_msg_generate_t *g = &msg->generate;
    Shardwire__GenerateRequest pb = SHARDWIRE__GENERATE_REQUEST__INIT;
    Shardwire__SamplingParams sp;
    Shardwire__DraftParams dp = SHARDWIRE__DRAFT_PARAMS__INIT;
    char *stop[SW_WIRE_MAX_STOP];
    Shardwire__ChatMessage turn[SW_WIRE_MAX_MESSAGES], *turn_p[SW_WIRE_MAX_MESSAGES];
    CHECK(g->n_prompt_tokens == 0 || g->prompt_tokens, "generate.prompt_tokens missing");
    CHECK(g->n_resume_tokens == 0 || g->resume_tokens, "generate.resume_tokens missing");
    CHECK(g->n_stop <= SW_WIRE_MAX_STOP, "generate has %u stop strings (max %d)", g->n_stop,
          SW_WIRE_MAX_STOP);
    CHECK(g->n_messages <= SW_WIRE_MAX_MESSAGES, "generate has %u messages (max %d)", g->n_messages,
          SW_WIRE_MAX_MESSAGES);
    int rc = s_sampling_out(g->has_sampling, &g->sampling, &sp, &pb.sampling, err, err_len);
    if (rc)
        return rc;
    for (uint32_t i = 0; i < g->n_stop; i++)
        stop[i] = s_out_str(g->stop[i]);
    for (uint32_t i = 0; i < g->n_messages; i++) {
        sw_msg_turn_t t;
        CHECK(sw_codec_turn_at(g, i, &t) == 0, "generate.messages[%u] missing", i);
        shardwire__chat_message__init(&turn[i]);
        turn[i].role = s_out_str(t.role);
        turn[i].content = s_out_str(t.content);
        turn_p[i] = &turn[i];
    }
    if (g->has_draft) {
        dp.mode = (Shardwire__DraftMode)g->draft.mode;
        dp.n_draft = g->draft.n_draft;
        dp.p_min = g->draft.p_min;
        dp.tree = g->draft.tree;
        dp.ahead = (Shardwire__DraftAhead)g->draft.ahead;
        pb.draft = &dp;
    }
    pb.request_id = s_out_str(g->request_id);
    pb.prompt = s_out_str(g->prompt);
    pb.n_prompt_tokens = g->n_prompt_tokens;
    pb.prompt_tokens = s_out_u32(g->prompt_tokens);
    pb.n_resume_tokens = g->n_resume_tokens;
    pb.resume_tokens = s_out_u32(g->resume_tokens);
    pb.n_predict = g->n_predict;
    pb.chat = g->chat != 0;
    pb.timeout_ms = g->timeout_ms;
    pb.n_stop = g->n_stop;
    pb.stop = stop;
    pb.n_messages = g->n_messages;
    pb.messages = turn_p;
    Shardwire__Envelope env = SHARDWIRE__ENVELOPE__INIT;
    env.generate = &pb;
    return s_emit_env(&env, SHARDWIRE__ENVELOPE__BODY_GENERATE, sink, ctx, NULL, 0);
}

static int s_chunk_dec(const sw_wire_msg_t *m, sw_msg_t *out, char *err, size_t err_len)
{
    const Shardwire__TokenChunk *c = m->env->token_chunk;
    sw_msg_chunk_t *o = &out->chunk;
    CHECK(c != NULL, "token_chunk missing");
    CHECK(c->n_tokens <= SW_WIRE_MAX_CHUNK_TOKENS, "token_chunk has %zu tokens (max %d)",
          c->n_tokens, SW_WIRE_MAX_CHUNK_TOKENS);
    CHECK(c->finish >= SHARDWIRE__FINISH_REASON__FINISH_NONE &&
              c->finish <= SHARDWIRE__FINISH_REASON__FINISH_CANCELLED,
          "token_chunk.finish %d unknown", (int)c->finish);
    *o = (sw_msg_chunk_t){0};
    o->request_id = s_in_str(c->request_id);
    o->n_tokens = (uint32_t)c->n_tokens;
    o->tokens = c->tokens;
    o->text = c->text.len ? c->text.data : NULL;
    o->text_len = c->text.len;
    o->done = c->done != 0;
    o->finish = (sw_finish_t)c->finish;
    o->index = c->index;
    o->has_stats = c->stats != NULL;
    if (!c->stats)
        return SW_WIRE_OK;
    const Shardwire__GenerateStats *st = c->stats;
    sw_msg_stats_t *s = &o->stats;
    s->n_prompt = st->n_prompt;
    s->n_generated = st->n_generated;
    s->n_rounds = st->n_rounds;
    s->n_drafted = st->n_drafted;
    s->n_accepted = st->n_accepted;
    s->prompt_ms = st->prompt_ms;
    s->generate_ms = st->generate_ms;
    s->ttft_ms = st->ttft_ms;
    s->decode_ms = st->decode_ms;
    s->draft_ms = st->draft_ms;
    s->head_ms = st->head_ms;
    s->network_ms = st->network_ms;
    s->draft_ahead_ms = st->draft_ahead_ms;
    s->n_ahead_hits = st->n_ahead_hits;
    s->n_ahead_misses = st->n_ahead_misses;
    s->n_tree_rounds = st->n_tree_rounds;
    s->n_kv_moves = st->n_kv_moves;
    s->n_prefix_reused = st->n_prefix_reused;
    s->logits_digest = st->logits_digest;
    return s_timing_in("token_chunk.stats.stages", st->stages, st->n_stages, s->stages,
                       &s->n_stages, err, err_len);
}

static int s_chunk_enc(const sw_msg_t *msg, sw_codec_sink_fn sink, void *ctx, char *err,
                       size_t err_len)
{
    const sw_msg_chunk_t *c = &msg->chunk;
    Shardwire__TokenChunk pb = SHARDWIRE__TOKEN_CHUNK__INIT;
    Shardwire__GenerateStats st = SHARDWIRE__GENERATE_STATS__INIT;
    Shardwire__StageTiming tm[SW_WIRE_MAX_ROUTE], *tmp[SW_WIRE_MAX_ROUTE];
    CHECK(c->n_tokens == 0 || c->tokens, "token_chunk.tokens missing");
    CHECK(c->text_len == 0 || c->text, "token_chunk.text missing");
    if (c->has_stats) {
        const sw_msg_stats_t *s = &c->stats;
        int rc =
            s_timing_out("token_chunk.stats.stages", s->stages, s->n_stages, tm, tmp, err, err_len);
        if (rc)
            return rc;
        st.n_prompt = s->n_prompt;
        st.n_generated = s->n_generated;
        st.n_rounds = s->n_rounds;
        st.n_drafted = s->n_drafted;
        st.n_accepted = s->n_accepted;
        st.prompt_ms = s->prompt_ms;
        st.generate_ms = s->generate_ms;
        st.ttft_ms = s->ttft_ms;
        st.decode_ms = s->decode_ms;
        st.draft_ms = s->draft_ms;
        st.head_ms = s->head_ms;
        st.network_ms = s->network_ms;
        st.draft_ahead_ms = s->draft_ahead_ms;
        st.n_ahead_hits = s->n_ahead_hits;
        st.n_ahead_misses = s->n_ahead_misses;
        st.n_tree_rounds = s->n_tree_rounds;
        st.n_kv_moves = s->n_kv_moves;
        st.n_prefix_reused = s->n_prefix_reused;
        st.n_stages = s->n_stages;
        st.stages = tmp;
        st.logits_digest = s->logits_digest;
        pb.stats = &st;
    }
    pb.request_id = s_out_str(c->request_id);
    pb.n_tokens = c->n_tokens;
    pb.tokens = s_out_u32(c->tokens);
    pb.text.data = (uint8_t *)c->text;
    pb.text.len = c->text_len;
    pb.done = c->done != 0;
    pb.finish = (Shardwire__FinishReason)c->finish;
    pb.index = c->index;
    Shardwire__Envelope env = SHARDWIRE__ENVELOPE__INIT;
    env.token_chunk = &pb;
    return s_emit_env(&env, SHARDWIRE__ENVELOPE__BODY_TOKEN_CHUNK, sink, ctx, NULL, 0);
}

static int s_error_dec(const sw_wire_msg_t *m, sw_msg_t *out, char *err, size_t err_len)
{
    const Shardwire__Error *e = m->env->error;
    CHECK(e != NULL, "error missing");
    CHECK((e->code >= SHARDWIRE__ERROR_CODE__ERR_UNSPECIFIED &&
           e->code <= SHARDWIRE__ERROR_CODE__ERR_BUSY) ||
              e->code == SHARDWIRE__ERROR_CODE__ERR_PLAN_REFUSED,
          "error.code %d unknown", (int)e->code);
    out->error.code = (sw_error_code_t)e->code;
    out->error.message = s_in_str(e->message);
    out->error.session_id = e->session_id;
    out->error.request_id = s_in_str(e->request_id);
    out->error.dest = s_in_str(e->dest);
    out->error.queue_position = e->queue_position;
    return SW_WIRE_OK;
}

static int s_error_enc(const sw_msg_t *msg, sw_codec_sink_fn sink, void *ctx, char *err,
                       size_t err_len)
{
    (void)err, (void)err_len;
    const sw_msg_error_t *e = &msg->error;
    Shardwire__Error pb = SHARDWIRE__ERROR__INIT;
    pb.code = (Shardwire__ErrorCode)e->code;
    pb.message = s_out_str(e->message);
    pb.session_id = e->session_id;
    pb.request_id = s_out_str(e->request_id);
    pb.dest = s_out_str(e->dest);
    pb.queue_position = e->queue_position;
    Shardwire__Envelope env = SHARDWIRE__ENVELOPE__INIT;
    env.error = &pb;
    return s_emit_env(&env, SHARDWIRE__ENVELOPE__BODY_ERROR, sink, ctx, NULL, 0);
}

static int s_cancel_dec(const sw_wire_msg_t *m, sw_msg_t *out, char *err, size_t err_len)
{
    const Shardwire__Cancel *c = m->env->cancel;
    CHECK(c != NULL, "cancel missing");
    out->cancel.request_id = s_in_str(c->request_id);
    out->cancel.reason = s_in_str(c->reason);
    return SW_WIRE_OK;
}

static int s_cancel_enc(const sw_msg_t *msg, sw_codec_sink_fn sink, void *ctx, char *err,
                        size_t err_len)
{
    (void)err, (void)err_len;
    Shardwire__Cancel pb = SHARDWIRE__CANCEL__INIT;
    pb.request_id = s_out_str(msg->cancel.request_id);
    pb.reason = s_out_str(msg->cancel.reason);
    Shardwire__Envelope env = SHARDWIRE__ENVELOPE__INIT;
    env.cancel = &pb;
    return s_emit_env(&env, SHARDWIRE__ENVELOPE__BODY_CANCEL, sink, ctx, NULL, 0);
}

static int s_resume_dec(const sw_wire_msg_t *m, sw_msg_t *out, char *err, size_t err_len)
{
    const Shardwire__Resume *r = m->env->resume;
    CHECK(r != NULL, "resume missing");
    out->resume.request_id = s_in_str(r->request_id);
    out->resume.from_index = r->from_index;
    return SW_WIRE_OK;
}

static int s_resume_enc(const sw_msg_t *msg, sw_codec_sink_fn sink, void *ctx, char *err,
                        size_t err_len)
{
    (void)err, (void)err_len;
    Shardwire__Resume pb = SHARDWIRE__RESUME__INIT;
    pb.request_id = s_out_str(msg->resume.request_id);
    pb.from_index = msg->resume.from_index;
    Shardwire__Envelope env = SHARDWIRE__ENVELOPE__INIT;
    env.resume = &pb;
    return s_emit_env(&env, SHARDWIRE__ENVELOPE__BODY_RESUME, sink, ctx, NULL, 0);
}

static int s_plan_dec(const sw_wire_msg_t *m, sw_msg_t *out, char *err, size_t err_len)
{
    const Shardwire__PlanAssign *p = m->env->plan_assign;
    CHECK(p != NULL, "plan_assign missing");
    out->plan.model_fingerprint = s_in_str(p->model_fingerprint);
    out->plan.n_layers = p->n_layers;
    out->plan.layer_begin = p->layer_begin;
    out->plan.layer_end = p->layer_end;
    out->plan.plan_us = p->plan_us;
    return SW_WIRE_OK;
}

static int s_plan_enc(const sw_msg_t *msg, sw_codec_sink_fn sink, void *ctx, char *err,
                      size_t err_len)
{
    (void)err, (void)err_len;
    Shardwire__PlanAssign pb = SHARDWIRE__PLAN_ASSIGN__INIT;
    pb.model_fingerprint = s_out_str(msg->plan.model_fingerprint);
    pb.n_layers = msg->plan.n_layers;
    pb.layer_begin = msg->plan.layer_begin;
    pb.layer_end = msg->plan.layer_end;
    pb.plan_us = msg->plan.plan_us;
    Shardwire__Envelope env = SHARDWIRE__ENVELOPE__INIT;
    env.plan_assign = &pb;
    return s_emit_env(&env, SHARDWIRE__ENVELOPE__BODY_PLAN_ASSIGN, sink, ctx, NULL, 0);
}

static int s_spot_query_dec(const sw_wire_msg_t *m, sw_msg_t *out, char *err, size_t err_len)
{
    (void)out;
    CHECK(m->env->spot_query != NULL, "spot_query missing");
    return SW_WIRE_OK;
}

static int s_spot_query_enc(const sw_msg_t *msg, sw_codec_sink_fn sink, void *ctx, char *err,
                            size_t err_len)
{
    (void)msg, (void)err, (void)err_len;
    Shardwire__SpotQuery q = SHARDWIRE__SPOT_QUERY__INIT;
    Shardwire__Envelope env = SHARDWIRE__ENVELOPE__INIT;
    env.spot_query = &q;
    return s_emit_env(&env, SHARDWIRE__ENVELOPE__BODY_SPOT_QUERY, sink, ctx, NULL, 0);
}

static int s_spot_report_dec(const sw_wire_msg_t *m, sw_msg_t *out, char *err, size_t err_len)
{
    const Shardwire__SpotReport *r = m->env->spot_report;
    sw_msg_spot_report_t *o = &out->spot;
    CHECK(r != NULL, "spot_report missing");
    CHECK(r->n_nodes <= SW_WIRE_MAX_SPOT_NODES, "spot_report has %zu nodes", r->n_nodes);
    o->share = r->share;
    o->sessions_checked = r->sessions_checked;
    o->rounds_compared = r->rounds_compared;
    o->mismatches = r->mismatches;
    o->n_nodes = (uint32_t)r->n_nodes;
    for (size_t i = 0; i < r->n_nodes; i++) {
        CHECK(r->nodes[i] != NULL, "spot_report.nodes[%zu] missing", i);
        o->nodes[i].name = s_in_str(r->nodes[i]->name);
        o->nodes[i].convicted = r->nodes[i]->convicted != 0;
        o->nodes[i].avoid_s = r->nodes[i]->avoid_s;
    }
    return SW_WIRE_OK;
}

static int s_spot_report_enc(const sw_msg_t *msg, sw_codec_sink_fn sink, void *ctx, char *err,
                             size_t err_len)
{
    const sw_msg_spot_report_t *o = &msg->spot;
    CHECK(o->n_nodes <= SW_WIRE_MAX_SPOT_NODES, "spot_report has %u nodes", o->n_nodes);
    Shardwire__SpotNode nd[SW_WIRE_MAX_SPOT_NODES], *ndp[SW_WIRE_MAX_SPOT_NODES];
    for (uint32_t i = 0; i < o->n_nodes; i++) {
        shardwire__spot_node__init(&nd[i]);
        nd[i].name = s_out_str(o->nodes[i].name);
        nd[i].convicted = o->nodes[i].convicted != 0;
        nd[i].avoid_s = o->nodes[i].avoid_s;
        ndp[i] = &nd[i];
    }
    Shardwire__SpotReport pb = SHARDWIRE__SPOT_REPORT__INIT;
    pb.share = o->share;
    pb.sessions_checked = o->sessions_checked;
    pb.rounds_compared = o->rounds_compared;
    pb.mismatches = o->mismatches;
    pb.n_nodes = o->n_nodes;
    pb.nodes = ndp;
    Shardwire__Envelope env = SHARDWIRE__ENVELOPE__INIT;
    env.spot_report = &pb;
    return s_emit_env(&env, SHARDWIRE__ENVELOPE__BODY_SPOT_REPORT, sink, ctx, NULL, 0);
}

/* ---- the table ------------------------------------------------------------------------------ */

typedef int (*s_dec_fn)(const sw_wire_msg_t *m, sw_msg_t *out, char *err, size_t err_len);
typedef int (*s_enc_fn)(const sw_msg_t *msg, sw_codec_sink_fn sink, void *ctx, char *err,
                        size_t err_len);

/* One row per message type (wire.c's table has its body case, name, channel
 * and validator); a type without a row is refused both ways. */
static const struct s_codec {
    s_dec_fn dec; /* received protobuf -> plain view */
    s_enc_fn enc; /* plain -> protobuf, to a sink */
} s_codecs[] = {
    [SW_MSG_ANNOUNCE] = {s_announce_dec, s_announce_enc},
    [SW_MSG_ANNOUNCE_ACK] = {s_ack_dec, s_ack_enc},
    [SW_MSG_STATUS_QUERY] = {s_status_query_dec, s_status_query_enc},
    [SW_MSG_PEER_TABLE] = {s_table_dec, s_table_enc},
    [SW_MSG_SESSION_OPEN] = {s_session_open_dec, s_session_open_enc},
    [SW_MSG_SESSION_CLOSE] = {s_session_close_dec, s_session_close_enc},
    [SW_MSG_FORWARD] = {s_forward_dec, s_forward_enc},
    [SW_MSG_VERDICT] = {s_verdict_dec, s_verdict_enc},
    [SW_MSG_GENERATE] = {s_generate_dec, s_generate_enc},
    [SW_MSG_TOKEN_CHUNK] = {s_chunk_dec, s_chunk_enc},
    [SW_MSG_ERROR] = {s_error_dec, s_error_enc},
    [SW_MSG_CANCEL] = {s_cancel_dec, s_cancel_enc},
    [SW_MSG_RESUME] = {s_resume_dec, s_resume_enc},
    [SW_MSG_PLAN_ASSIGN] = {s_plan_dec, s_plan_enc},
    [SW_MSG_SPOT_QUERY] = {s_spot_query_dec, s_spot_query_enc},
    [SW_MSG_SPOT_REPORT] = {s_spot_report_dec, s_spot_report_enc},
};
_Static_assert(sizeof s_codecs / sizeof s_codecs[0] == SW_MSG_TYPES,
               "codec.c: one row per message type (sw_msg_type_t)");

static const struct s_codec *s_codec_row(sw_msg_type_t type)
{
    if ((int)type <= SW_MSG_NONE || type >= SW_MSG_TYPES || !s_codecs[type].dec ||
        !s_codecs[type].enc)
        return NULL;
    return &s_codecs[type];
}

int sw_codec_decode(const sw_wire_msg_t *m, sw_msg_type_t want, sw_msg_t *out, char *err,
                    size_t err_len)
{
    CHECK(m != NULL && m->env != NULL, "no message to decode");
    const sw_msg_type_t type = sw_wire_body_type(m->env);
    const struct s_codec *row = s_codec_row(type);
    CHECK(row != NULL, "message of no known type (body case %d)", (int)m->env->body_case);
    CHECK(want == SW_MSG_NONE || want == type, "a %s message where a %s was expected",
          sw_wire_type_name(type), sw_wire_type_name(want));
    CHECK(!m->has_payload || type == SW_MSG_FORWARD, "a %s message carries no payload frame",
          sw_wire_type_name(type));
    out->type = type;
    return row->dec(m, out, err, err_len);
}

int sw_codec_emit(const sw_msg_t *msg, sw_codec_sink_fn sink, void *ctx, char *err, size_t err_len)
{
    CHECK(msg != NULL && sink != NULL, "nothing to encode");
    const struct s_codec *row = s_codec_row(msg->type);
    CHECK(row != NULL, "message of no known type (%d)", (int)msg->type);
    return row->enc(msg, sink, ctx, err, err_len);
}

/* ---- sinks ------------------------------------------------------------------------------------
 */

typedef struct s_send_ctx {
    void *sock;
    const char *name;
    int flags;
    const sw_wire_crypto_t *crypto;
    char *err;
    size_t err_len;
} s_send_ctx_t;

static int s_send_sink(void *ctx, Shardwire__Envelope *env, const void *payload, size_t payload_len,
                       int has_payload)
{
    const s_send_ctx_t *c = ctx;
    return sw_wire_send_ex(c->sock, c->name, env, payload, payload_len, has_payload, c->flags,
                           c->crypto, c->err, c->err_len);
}

int sw_codec_send(void *sock, const char *name, const sw_msg_t *msg, int flags,
                  const sw_wire_crypto_t *crypto, char *err, size_t err_len)
{
    s_send_ctx_t c = {sock, name, flags, crypto, err, err_len};
    return sw_codec_emit(msg, s_send_sink, &c, err, err_len);
}

typedef struct s_encode_ctx {
    zmq_msg_t *frame;
    char *err;
    size_t err_len;
} s_encode_ctx_t;

static int s_encode_sink(void *ctx, Shardwire__Envelope *env, const void *payload,
                         size_t payload_len, int has_payload)
{
    (void)payload;
    const s_encode_ctx_t *c = ctx;
    return sw_wire_encode(env, has_payload, payload_len, c->frame, c->err, c->err_len);
}

int sw_codec_encode(const sw_msg_t *msg, zmq_msg_t *frame, char *err, size_t err_len)
{
    s_encode_ctx_t c = {frame, err, err_len};
    return sw_codec_emit(msg, s_encode_sink, &c, err, err_len);
}

static int s_validate_sink(void *ctx, Shardwire__Envelope *env, const void *payload,
                           size_t payload_len, int has_payload)
{
    (void)payload;
    const s_encode_ctx_t *c = ctx;
    env->version = SW_WIRE_VERSION;
    return sw_wire_validate(env, has_payload, payload_len, c->err, c->err_len);
}

int sw_codec_validate(const sw_msg_t *msg, char *err, size_t err_len)
{
    s_encode_ctx_t c = {NULL, err, err_len};
    return sw_codec_emit(msg, s_validate_sink, &c, err, err_len);
}

/* ---- peer tables and chat turns ------------------------------------------------------------- */

int sw_codec_peer_at(const sw_msg_table_t *t, uint32_t i, sw_msg_peer_t *out)
{
    if (!t || i >= t->n_peers)
        return -1;
    if (t->peers) {
        *out = t->peers[i];
        return 0;
    }
    const Shardwire__PeerTable *pb = t->pb;
    if (!pb || i >= pb->n_peers)
        return -1;
    char err[SW_WIRE_ERR_LEN];
    return s_peer_in(pb->peers[i], out, err, sizeof err) == SW_WIRE_OK ? 0 : -1;
}

int sw_codec_peer_find(const sw_msg_table_t *t, const char *name, sw_msg_peer_t *out)
{
    if (!t || !name)
        return 0;
    const Shardwire__PeerTable *pb = t->peers ? NULL : t->pb;
    for (uint32_t i = 0; i < t->n_peers; i++) {
        /* compare before converting: one conversion per look-up */
        const char *have = t->peers ? t->peers[i].announce.name
                           : pb && i < pb->n_peers && pb->peers[i] && pb->peers[i]->announce
                               ? pb->peers[i]->announce->name
                               : NULL;
        if (have && !strcmp(have, name))
            return sw_codec_peer_at(t, i, out) == 0;
    }
    return 0;
}

int sw_codec_peer_routable(const sw_msg_peer_t *p, int need_key)
{
    const sw_role_t role = p->announce.role;
    if (role < SW_ROLE_HEAD || role > SW_ROLE_FULL)
        return 0;
    return p->key_bound || !need_key;
}

int sw_codec_turn_at(const sw_msg_generate_t *g, uint32_t i, sw_msg_turn_t *out)
{
    if (!g || i >= g->n_messages)
        return -1;
    if (g->messages) {
        *out = g->messages[i];
        return 0;
    }
    const Shardwire__GenerateRequest *pb = g->pb;
    if (!pb || i >= pb->n_messages || !pb->messages[i])
        return -1;
    out->role = s_in_str(pb->messages[i]->role);
    out->content = s_in_str(pb->messages[i]->content);
    return 0;
}

/* ---- keeping an announce ----------------------------------------------------------------------
 */

/* src (NULL = "") into buf; -1 when it does not fit. */
static int s_keep(char *buf, size_t size, const char *src, const char **view)
{
    const char *s = src ? src : "";
    size_t n = strnlen(s, size);
    if (n >= size)
        return -1;
    memcpy(buf, s, n + 1);
    *view = buf;
    return 0;
}

int sw_codec_announce_copy(sw_announce_copy_t *dst, const sw_msg_announce_t *src)
{
    sw_announce_copy_t c;
    c.a = *src;
    if (s_keep(c.name, sizeof c.name, src->name, &c.a.name) ||
        s_keep(c.model_fingerprint, sizeof c.model_fingerprint, src->model_fingerprint,
               &c.a.model_fingerprint) ||
        s_keep(c.backend, sizeof c.backend, src->backend, &c.a.backend) ||
        s_keep(c.model_name, sizeof c.model_name, src->model_name, &c.a.model_name))
        return -1;
    /* the views must point into dst, not into this copy */
    *dst = c;
    dst->a.name = dst->name;
    dst->a.model_fingerprint = dst->model_fingerprint;
    dst->a.backend = dst->backend;
    dst->a.model_name = dst->model_name;
    return 0;
}

/* ---- the hidden-state payload ------------------------------------------------------------------
 */

const void *sw_codec_hidden_pack(sw_dtype_t dtype, const float *src, void *scratch, size_t n)
{
    if (dtype == SW_DTYPE_F16) {
        uint16_t *d = scratch;
        for (size_t i = 0; i < n; i++)
            d[i] = sw_f2h(src[i]);
        return scratch;
    }
    if (dtype == SW_DTYPE_BF16) {
        uint16_t *d = scratch;
        for (size_t i = 0; i < n; i++)
            d[i] = sw_f2bf(src[i]);
        return scratch;
    }
    return src; // f32 travels as computed: the send copies it once into the frame
}

void sw_codec_hidden_unpack(sw_dtype_t dtype, const void *src, float *dst, size_t n)
{
    if (dtype == SW_DTYPE_F16) {
        const uint16_t *s = src;
        for (size_t i = 0; i < n; i++)
            dst[i] = sw_h2f(s[i]);
    } else if (dtype == SW_DTYPE_BF16) {
        const uint16_t *s = src;
        for (size_t i = 0; i < n; i++)
            dst[i] = sw_bf2f(s[i]);
    } else {
        memcpy(dst, src, n * sizeof(float));
    }
}

/* 8 bytes at a time (the tail byte by byte), each step a multiply and a
 * shift: a 590 KB prefill chunk costs well under a millisecond. */
uint64_t sw_codec_digest_fold(uint64_t h, sw_dtype_t dtype, const void *payload, size_t len)
{
    const uint64_t k = 0x9e3779b97f4a7c15ull;
    const unsigned char *p = payload;
    uint64_t x = 0xcbf29ce484222325ull ^ ((uint64_t)dtype << 56) ^ (uint64_t)len;
    size_t i = 0;
    for (; p && i + 8 <= len; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, sizeof w);
        x = (x ^ w) * k;
        x ^= x >> 29;
    }
    for (; p && i < len; i++) {
        x = (x ^ p[i]) * k;
        x ^= x >> 29;
    }
    h = (h ^ x) * 0xbf58476d1ce4e5b9ull;
    return h ^ (h >> 31);
}
