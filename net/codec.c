/*
 * codec.c - protobuf -> the plain structs of codec.h, for every message
 * type, in one table (codec_encode.c is the way back), and what reads or
 * keeps a plain message: peer tables and chat turns either way they were
 * made, a kept announce, the hidden-state pack and unpack, the spot checks'
 * digest. A decoder reads a message wire_check.c has validated, yet still
 * bounds every count by the plain array it fills and refuses a value its
 * plain field cannot hold; it copies numbers and points at strings, arrays
 * and the tensor, so a Forward or a Verdict costs no allocation and no copy
 * of its data.
 */
#include "codec.h"

#include <limits.h>
#include <string.h>

#include "codec_pb.h"
#include "half.h"

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
                   S_SAME(SW_ERROR_PLAN_REFUSED, SHARDWIRE__ERROR_CODE__ERR_PLAN_REFUSED) &&
                   S_SAME(SW_ERROR_HEAD_LEAVING, SHARDWIRE__ERROR_CODE__ERR_HEAD_LEAVING),
               "sw_error_code_t and ErrorCode disagree");

/* Inside the decoders: bail out with a message unless cond holds. */
#define CHECK(cond, ...) SW_PB_CHECK("codec", cond, __VA_ARGS__)

/* A received string: never NULL. */
static const char *s_in_str(const char *s)
{
    return s ? s : "";
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
        out[i].critical_us = t[i]->critical_us;
    }
    *n_out = (uint32_t)n;
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
    out->n_ctx = a->n_ctx;
    out->kv_mib = a->kv_mib;
    out->kv_full = a->kv_full;
    out->kv_type = a->kv_type;
    out->direct = s_in_str(a->direct);
    out->direct_key = s_in_str(a->direct_key);
    CHECK(a->n_direct_hops <= SW_DIRECT_MAX_LINKS, "announce.direct_hops: %zu (max %d)",
          a->n_direct_hops, SW_DIRECT_MAX_LINKS);
    out->n_direct_hops = (uint32_t)a->n_direct_hops;
    out->relay_rtt_us = a->relay_rtt_us;
    for (size_t i = 0; i < a->n_direct_hops; i++) {
        CHECK(a->direct_hops[i] != NULL, "announce.direct_hops[%zu] missing", i);
        out->direct_hops[i].peer = s_in_str(a->direct_hops[i]->peer);
        out->direct_hops[i].rtt_us = a->direct_hops[i]->rtt_us;
    }
    return SW_WIRE_OK;
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

/* ---- one decoder per message type ------------------------------------------------------- */

static int s_announce_dec(const sw_wire_msg_t *m, sw_msg_t *out, char *err, size_t err_len)
{
    return s_announce_in(m->env->pb.announce, &out->announce, err, err_len);
}

static int s_ack_dec(const sw_wire_msg_t *m, sw_msg_t *out, char *err, size_t err_len)
{
    const Shardwire__AnnounceAck *a = m->env->pb.announce_ack;
    CHECK(a != NULL, "announce_ack missing");
    out->ack.name = s_in_str(a->name);
    out->ack.heartbeat_ms = a->heartbeat_ms;
    out->ack.max_frame_bytes = a->max_frame_bytes;
    return SW_WIRE_OK;
}

static int s_status_query_dec(const sw_wire_msg_t *m, sw_msg_t *out, char *err, size_t err_len)
{
    (void)out;
    CHECK(m->env->pb.status_query != NULL, "status_query missing");
    return SW_WIRE_OK;
}

static int s_table_dec(const sw_wire_msg_t *m, sw_msg_t *out, char *err, size_t err_len)
{
    const Shardwire__PeerTable *t = m->env->pb.peer_table;
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

static int s_session_open_dec(const sw_wire_msg_t *m, sw_msg_t *out, char *err, size_t err_len)
{
    const Shardwire__SessionOpen *so = m->env->pb.session_open;
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

static int s_session_close_dec(const sw_wire_msg_t *m, sw_msg_t *out, char *err, size_t err_len)
{
    const Shardwire__SessionClose *sc = m->env->pb.session_close;
    CHECK(sc != NULL, "session_close missing");
    out->session_close.session_id = sc->session_id;
    out->session_close.reason = s_in_str(sc->reason);
    return SW_WIRE_OK;
}

/* The hot path: every field assigned, arrays filled only up to their counts. */
static int s_forward_dec(const sw_wire_msg_t *m, sw_msg_t *out, char *err, size_t err_len)
{
    const Shardwire__Forward *f = m->env->pb.forward;
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
    o->fair_client = f->fair_client;
    o->fair_tenant = f->fair_tenant;
    /* zmq_msg_data only reads; the frame stays m's */
    o->payload = m->has_payload ? zmq_msg_data((zmq_msg_t *)&m->payload) : NULL;
    o->payload_len = m->has_payload ? zmq_msg_size((zmq_msg_t *)&m->payload) : 0;
    return SW_WIRE_OK;
}

static int s_verdict_dec(const sw_wire_msg_t *m, sw_msg_t *out, char *err, size_t err_len)
{
    const Shardwire__Verdict *v = m->env->pb.verdict;
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

static int s_generate_dec(const sw_wire_msg_t *m, sw_msg_t *out, char *err, size_t err_len)
{
    const Shardwire__GenerateRequest *g = m->env->pb.generate;
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
    o->tenant = s_in_str(g->tenant);
    o->pb = g;
    return SW_WIRE_OK;
}

static int s_chunk_dec(const sw_wire_msg_t *m, sw_msg_t *out, char *err, size_t err_len)
{
    const Shardwire__TokenChunk *c = m->env->pb.token_chunk;
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
    s->overlap_ms = st->overlap_ms;
    s->logits_digest = st->logits_digest;
    return s_timing_in("token_chunk.stats.stages", st->stages, st->n_stages, s->stages,
                       &s->n_stages, err, err_len);
}

static int s_error_dec(const sw_wire_msg_t *m, sw_msg_t *out, char *err, size_t err_len)
{
    const Shardwire__Error *e = m->env->pb.error;
    CHECK(e != NULL, "error missing");
    CHECK(SW_PB_ERROR_CODE_KNOWN(e->code), "error.code %d unknown", (int)e->code);
    out->error.code = (sw_error_code_t)e->code;
    out->error.message = s_in_str(e->message);
    out->error.session_id = e->session_id;
    out->error.request_id = s_in_str(e->request_id);
    out->error.dest = s_in_str(e->dest);
    out->error.queue_position = e->queue_position;
    return SW_WIRE_OK;
}

static int s_cancel_dec(const sw_wire_msg_t *m, sw_msg_t *out, char *err, size_t err_len)
{
    const Shardwire__Cancel *c = m->env->pb.cancel;
    CHECK(c != NULL, "cancel missing");
    out->cancel.request_id = s_in_str(c->request_id);
    out->cancel.reason = s_in_str(c->reason);
    return SW_WIRE_OK;
}

static int s_resume_dec(const sw_wire_msg_t *m, sw_msg_t *out, char *err, size_t err_len)
{
    const Shardwire__Resume *r = m->env->pb.resume;
    CHECK(r != NULL, "resume missing");
    out->resume.request_id = s_in_str(r->request_id);
    out->resume.from_index = r->from_index;
    return SW_WIRE_OK;
}

static int s_progress_dec(const sw_wire_msg_t *m, sw_msg_t *out, char *err, size_t err_len)
{
    const Shardwire__Progress *p = m->env->pb.progress;
    CHECK(p != NULL, "progress missing");
    out->progress.request_id = s_in_str(p->request_id);
    out->progress.prompt_done = p->prompt_done;
    out->progress.prompt_total = p->prompt_total;
    out->progress.generated = p->generated;
    out->progress.next_ms = p->next_ms;
    out->progress.prompt_finished = p->prompt_finished;
    return SW_WIRE_OK;
}

static int s_prefill_ack_dec(const sw_wire_msg_t *m, sw_msg_t *out, char *err, size_t err_len)
{
    const Shardwire__PrefillAck *p = m->env->pb.prefill_ack;
    CHECK(p != NULL, "prefill_ack missing");
    out->prefill_ack.session_id = p->session_id;
    out->prefill_ack.round = p->round;
    out->prefill_ack.done = p->done;
    return SW_WIRE_OK;
}

static int s_plan_dec(const sw_wire_msg_t *m, sw_msg_t *out, char *err, size_t err_len)
{
    const Shardwire__PlanAssign *p = m->env->pb.plan_assign;
    CHECK(p != NULL, "plan_assign missing");
    out->plan.model_fingerprint = s_in_str(p->model_fingerprint);
    out->plan.n_layers = p->n_layers;
    out->plan.layer_begin = p->layer_begin;
    out->plan.layer_end = p->layer_end;
    out->plan.plan_us = p->plan_us;
    return SW_WIRE_OK;
}

static int s_spot_query_dec(const sw_wire_msg_t *m, sw_msg_t *out, char *err, size_t err_len)
{
    (void)out;
    CHECK(m->env->pb.spot_query != NULL, "spot_query missing");
    return SW_WIRE_OK;
}

static int s_spot_report_dec(const sw_wire_msg_t *m, sw_msg_t *out, char *err, size_t err_len)
{
    const Shardwire__SpotReport *r = m->env->pb.spot_report;
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

/* ---- the table ------------------------------------------------------------------------------ */

typedef int (*s_dec_fn)(const sw_wire_msg_t *m, sw_msg_t *out, char *err, size_t err_len);

/* One decoder per message type (wire_check.c's table has its body case,
 * name, channel and validator, codec_encode.c's its encoder); a type without
 * one is refused. */
static const s_dec_fn s_decoders[] = {
    [SW_MSG_ANNOUNCE] = s_announce_dec,
    [SW_MSG_ANNOUNCE_ACK] = s_ack_dec,
    [SW_MSG_STATUS_QUERY] = s_status_query_dec,
    [SW_MSG_PEER_TABLE] = s_table_dec,
    [SW_MSG_SESSION_OPEN] = s_session_open_dec,
    [SW_MSG_SESSION_CLOSE] = s_session_close_dec,
    [SW_MSG_FORWARD] = s_forward_dec,
    [SW_MSG_VERDICT] = s_verdict_dec,
    [SW_MSG_GENERATE] = s_generate_dec,
    [SW_MSG_TOKEN_CHUNK] = s_chunk_dec,
    [SW_MSG_ERROR] = s_error_dec,
    [SW_MSG_CANCEL] = s_cancel_dec,
    [SW_MSG_RESUME] = s_resume_dec,
    [SW_MSG_PLAN_ASSIGN] = s_plan_dec,
    [SW_MSG_SPOT_QUERY] = s_spot_query_dec,
    [SW_MSG_SPOT_REPORT] = s_spot_report_dec,
    [SW_MSG_PROGRESS] = s_progress_dec,
    [SW_MSG_PREFILL_ACK] = s_prefill_ack_dec,
};
_Static_assert(sizeof s_decoders / sizeof s_decoders[0] == SW_MSG_TYPES,
               "codec.c: one decoder per message type (sw_msg_type_t)");

int sw_codec_decode(const sw_wire_msg_t *m, sw_msg_type_t want, sw_msg_t *out, char *err,
                    size_t err_len)
{
    CHECK(m != NULL && m->env != NULL, "no message to decode");
    const sw_msg_type_t type = sw_wire_body_type(&m->env->pb);
    const s_dec_fn dec = (int)type > SW_MSG_NONE && type < SW_MSG_TYPES ? s_decoders[type] : NULL;
    CHECK(dec != NULL, "message of no known type (body case %d)", (int)m->env->pb.body_case);
    CHECK(want == SW_MSG_NONE || want == type, "a %s message where a %s was expected",
          sw_wire_type_name(type), sw_wire_type_name(want));
    CHECK(!m->has_payload || type == SW_MSG_FORWARD, "a %s message carries no payload frame",
          sw_wire_type_name(type));
    out->type = type;
    return dec(m, out, err, err_len);
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
        s_keep(c.model_name, sizeof c.model_name, src->model_name, &c.a.model_name) ||
        s_keep(c.direct, sizeof c.direct, src->direct, &c.a.direct) ||
        s_keep(c.direct_key, sizeof c.direct_key, src->direct_key, &c.a.direct_key) ||
        src->n_direct_hops > SW_DIRECT_MAX_LINKS)
        return -1;
    for (uint32_t i = 0; i < src->n_direct_hops; i++)
        if (s_keep(c.hop_peer[i], sizeof c.hop_peer[i], src->direct_hops[i].peer,
                   &c.a.direct_hops[i].peer))
            return -1;
    /* the views must point into dst, not into this copy */
    *dst = c;
    dst->a.name = dst->name;
    dst->a.model_fingerprint = dst->model_fingerprint;
    dst->a.backend = dst->backend;
    dst->a.model_name = dst->model_name;
    dst->a.direct = dst->direct;
    dst->a.direct_key = dst->direct_key;
    for (uint32_t i = 0; i < src->n_direct_hops; i++)
        dst->a.direct_hops[i].peer = dst->hop_peer[i];
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
