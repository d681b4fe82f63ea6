/*
 * codec_encode.c - the plain structs of codec.h -> protobuf, for every
 * message type, in one table (codec.c is the way in), and the sinks an
 * Envelope goes to. An encoder builds the protobuf on its own stack,
 * pointing into the caller's struct, refuses what the protobuf cannot carry
 * (a NULL array with a count, a negative count), and hands the Envelope to
 * a sink, whose send or encode validates every field (wire_check.c) before
 * anything leaves.
 */
#include "codec.h"

#include "codec_pb.h"

#include <stdlib.h>

/* Inside the encoders: bail out with a message unless cond holds. */
#define CHECK(cond, ...) SW_PB_CHECK("codec", cond, __VA_ARGS__)

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
        pb[i].critical_us = in[i].critical_us;
        ptrs[i] = &pb[i];
    }
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

/* Room for an announce's direct hops (version 10) while it is encoded. */
typedef struct s_hops {
    Shardwire__DirectHop h[SW_DIRECT_MAX_LINKS];
    Shardwire__DirectHop *p[SW_DIRECT_MAX_LINKS];
} s_hops_t;

static void s_announce_out(const sw_msg_announce_t *in, Shardwire__PeerAnnounce *a, s_hops_t *hops)
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
    a->n_ctx = in->n_ctx;
    a->kv_mib = in->kv_mib;
    a->kv_full = in->kv_full;
    a->kv_type = in->kv_type;
    a->direct = s_out_str(in->direct);
    a->direct_key = s_out_str(in->direct_key);
    a->relay_rtt_us = in->relay_rtt_us;
    /* more than the room is refused by the validator: the count stays, the entries do not */
    const uint32_t n = in->n_direct_hops;
    for (uint32_t i = 0; i < n && i < SW_DIRECT_MAX_LINKS; i++) {
        shardwire__direct_hop__init(&hops->h[i]);
        hops->h[i].peer = s_out_str(in->direct_hops[i].peer);
        hops->h[i].rtt_us = in->direct_hops[i].rtt_us;
        hops->p[i] = &hops->h[i];
    }
    a->n_direct_hops = n <= SW_DIRECT_MAX_LINKS ? n : 0;
    a->direct_hops = n ? hops->p : NULL;
}

/* ---- one encoder per message type ------------------------------------------------------- */

/* Every encoder ends here: the Envelope around body, to the sink. */
static int s_emit_env(Shardwire__Envelope *env, int body, sw_codec_sink_fn sink, void *ctx,
                      const void *payload, size_t payload_len)
{
    env->body_case = (Shardwire__Envelope__BodyCase)body;
    return sink(ctx, sw_envelope_of(env), payload, payload_len, payload != NULL);
}

static int s_announce_enc(const sw_msg_t *msg, sw_codec_sink_fn sink, void *ctx, char *err,
                          size_t err_len)
{
    Shardwire__PeerAnnounce a;
    s_hops_t hops;
    CHECK(msg->announce.n_direct_hops <= SW_DIRECT_MAX_LINKS, "announce.direct_hops: %u (max %d)",
          msg->announce.n_direct_hops, SW_DIRECT_MAX_LINKS);
    s_announce_out(&msg->announce, &a, &hops);
    Shardwire__Envelope env = SHARDWIRE__ENVELOPE__INIT;
    env.announce = &a;
    return s_emit_env(&env, SHARDWIRE__ENVELOPE__BODY_ANNOUNCE, sink, ctx, NULL, 0);
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

static int s_status_query_enc(const sw_msg_t *msg, sw_codec_sink_fn sink, void *ctx, char *err,
                              size_t err_len)
{
    (void)msg, (void)err, (void)err_len;
    Shardwire__StatusQuery q = SHARDWIRE__STATUS_QUERY__INIT;
    Shardwire__Envelope env = SHARDWIRE__ENVELOPE__INIT;
    env.status_query = &q;
    return s_emit_env(&env, SHARDWIRE__ENVELOPE__BODY_STATUS_QUERY, sink, ctx, NULL, 0);
}

static int s_table_enc(const sw_msg_t *msg, sw_codec_sink_fn sink, void *ctx, char *err,
                       size_t err_len)
{
    const sw_msg_table_t *t = &msg->table;
    CHECK(t->n_peers <= SW_WIRE_MAX_PEERS, "peer_table has %u peers (max %d)", t->n_peers,
          SW_WIRE_MAX_PEERS);
    Shardwire__PeerAnnounce an[SW_WIRE_MAX_PEERS];
    Shardwire__PeerInfo info[SW_WIRE_MAX_PEERS], *ptrs[SW_WIRE_MAX_PEERS];
    s_hops_t *hops = malloc((t->n_peers ? t->n_peers : 1) * sizeof *hops); /* off the stack */
    CHECK(hops != NULL, "peer_table: out of memory");
    int rc = SW_WIRE_OK;
    for (uint32_t i = 0; i < t->n_peers && rc == SW_WIRE_OK; i++) {
        sw_msg_peer_t p;
        if (sw_codec_peer_at(t, i, &p) != 0 || p.announce.n_direct_hops > SW_DIRECT_MAX_LINKS) {
            rc = sw_pb_fail("codec", SW_WIRE_EMALFORMED, err, err_len,
                            "peer_table entry %u unreadable, or more than %d direct hops", i,
                            SW_DIRECT_MAX_LINKS);
            break;
        }
        s_announce_out(&p.announce, &an[i], &hops[i]);
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
    if (rc == SW_WIRE_OK) {
        Shardwire__PeerTable pt = SHARDWIRE__PEER_TABLE__INIT;
        pt.n_peers = t->n_peers;
        pt.peers = ptrs;
        pt.uptime_ms = t->uptime_ms;
        pt.msgs_forwarded = t->msgs_forwarded;
        pt.msgs_dropped = t->msgs_dropped;
        Shardwire__Envelope env = SHARDWIRE__ENVELOPE__INIT;
        env.peer_table = &pt;
        rc = s_emit_env(&env, SHARDWIRE__ENVELOPE__BODY_PEER_TABLE, sink, ctx, NULL, 0);
    }
    free(hops);
    return rc;
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
    pb.fair_client = f->fair_client;
    pb.fair_tenant = f->fair_tenant;
    Shardwire__Envelope env = SHARDWIRE__ENVELOPE__INIT;
    env.forward = &pb;
    return s_emit_env(&env, SHARDWIRE__ENVELOPE__BODY_FORWARD, sink, ctx, f->payload,
                      f->payload_len);
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
    pb.tenant = s_out_str(g->tenant);
    Shardwire__Envelope env = SHARDWIRE__ENVELOPE__INIT;
    env.generate = &pb;
    return s_emit_env(&env, SHARDWIRE__ENVELOPE__BODY_GENERATE, sink, ctx, NULL, 0);
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
        st.overlap_ms = s->overlap_ms;
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

static int s_progress_enc(const sw_msg_t *msg, sw_codec_sink_fn sink, void *ctx, char *err,
                          size_t err_len)
{
    (void)err, (void)err_len;
    const sw_msg_progress_t *p = &msg->progress;
    Shardwire__Progress pb = SHARDWIRE__PROGRESS__INIT;
    pb.request_id = s_out_str(p->request_id);
    pb.prompt_done = p->prompt_done;
    pb.prompt_total = p->prompt_total;
    pb.generated = p->generated;
    pb.next_ms = p->next_ms;
    pb.prompt_finished = p->prompt_finished;
    Shardwire__Envelope env = SHARDWIRE__ENVELOPE__INIT;
    env.progress = &pb;
    return s_emit_env(&env, SHARDWIRE__ENVELOPE__BODY_PROGRESS, sink, ctx, NULL, 0);
}

static int s_prefill_ack_enc(const sw_msg_t *msg, sw_codec_sink_fn sink, void *ctx, char *err,
                             size_t err_len)
{
    (void)err, (void)err_len;
    Shardwire__PrefillAck pb = SHARDWIRE__PREFILL_ACK__INIT;
    pb.session_id = msg->prefill_ack.session_id;
    pb.round = msg->prefill_ack.round;
    pb.done = msg->prefill_ack.done;
    Shardwire__Envelope env = SHARDWIRE__ENVELOPE__INIT;
    env.prefill_ack = &pb;
    return s_emit_env(&env, SHARDWIRE__ENVELOPE__BODY_PREFILL_ACK, sink, ctx, NULL, 0);
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

static int s_spot_query_enc(const sw_msg_t *msg, sw_codec_sink_fn sink, void *ctx, char *err,
                            size_t err_len)
{
    (void)msg, (void)err, (void)err_len;
    Shardwire__SpotQuery q = SHARDWIRE__SPOT_QUERY__INIT;
    Shardwire__Envelope env = SHARDWIRE__ENVELOPE__INIT;
    env.spot_query = &q;
    return s_emit_env(&env, SHARDWIRE__ENVELOPE__BODY_SPOT_QUERY, sink, ctx, NULL, 0);
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

typedef int (*s_enc_fn)(const sw_msg_t *msg, sw_codec_sink_fn sink, void *ctx, char *err,
                        size_t err_len);

/* One encoder per message type (wire_check.c's table has its body case,
 * name, channel and validator, codec.c's its decoder); a type without one is
 * refused. */
static const s_enc_fn s_encoders[] = {
    [SW_MSG_ANNOUNCE] = s_announce_enc,
    [SW_MSG_ANNOUNCE_ACK] = s_ack_enc,
    [SW_MSG_STATUS_QUERY] = s_status_query_enc,
    [SW_MSG_PEER_TABLE] = s_table_enc,
    [SW_MSG_SESSION_OPEN] = s_session_open_enc,
    [SW_MSG_SESSION_CLOSE] = s_session_close_enc,
    [SW_MSG_FORWARD] = s_forward_enc,
    [SW_MSG_VERDICT] = s_verdict_enc,
    [SW_MSG_GENERATE] = s_generate_enc,
    [SW_MSG_TOKEN_CHUNK] = s_chunk_enc,
    [SW_MSG_ERROR] = s_error_enc,
    [SW_MSG_CANCEL] = s_cancel_enc,
    [SW_MSG_RESUME] = s_resume_enc,
    [SW_MSG_PLAN_ASSIGN] = s_plan_enc,
    [SW_MSG_SPOT_QUERY] = s_spot_query_enc,
    [SW_MSG_SPOT_REPORT] = s_spot_report_enc,
    [SW_MSG_PROGRESS] = s_progress_enc,
    [SW_MSG_PREFILL_ACK] = s_prefill_ack_enc,
};
_Static_assert(sizeof s_encoders / sizeof s_encoders[0] == SW_MSG_TYPES,
               "codec_encode.c: one encoder per message type (sw_msg_type_t)");

int sw_codec_emit(const sw_msg_t *msg, sw_codec_sink_fn sink, void *ctx, char *err, size_t err_len)
{
    CHECK(msg != NULL && sink != NULL, "nothing to encode");
    const s_enc_fn enc =
        (int)msg->type > SW_MSG_NONE && msg->type < SW_MSG_TYPES ? s_encoders[msg->type] : NULL;
    CHECK(enc != NULL, "message of no known type (%d)", (int)msg->type);
    return enc(msg, sink, ctx, err, err_len);
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

static int s_send_sink(void *ctx, sw_envelope_t *env, const void *payload, size_t payload_len,
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

static int s_encode_sink(void *ctx, sw_envelope_t *env, const void *payload, size_t payload_len,
                         int has_payload)
{
    (void)payload;
    const s_encode_ctx_t *c = ctx;
    return sw_wire_encode(&env->pb, has_payload, payload_len, c->frame, c->err, c->err_len);
}

int sw_codec_encode(const sw_msg_t *msg, zmq_msg_t *frame, char *err, size_t err_len)
{
    s_encode_ctx_t c = {frame, err, err_len};
    return sw_codec_emit(msg, s_encode_sink, &c, err, err_len);
}

static int s_validate_sink(void *ctx, sw_envelope_t *env, const void *payload, size_t payload_len,
                           int has_payload)
{
    (void)payload;
    const s_encode_ctx_t *c = ctx;
    env->pb.version = SW_WIRE_VERSION;
    return sw_wire_validate(&env->pb, has_payload, payload_len, c->err, c->err_len);
}

int sw_codec_validate(const sw_msg_t *msg, char *err, size_t err_len)
{
    s_encode_ctx_t c = {NULL, err, err_len};
    return sw_codec_emit(msg, s_validate_sink, &c, err, err_len);
}
