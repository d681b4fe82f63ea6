/*
 * wire_check.c - validation of shardwire messages (see wire.h, codec_pb.h
 * and docs/protocol.md): the one table of message types (body case, name,
 * channel, payload, validator), a validator per type that bounds every
 * count, length and value against sw_limits.h with 64-bit arithmetic, the
 * refusal of unknown fields, and the decode and encode of one header frame,
 * which run them. Everything that arrives from a socket is outside input: no
 * other module looks at a message before it passed here, and one line says
 * what was wrong. The field checks (names, fingerprints, dtypes, tokens,
 * sampling, routes) are wire_check_field.c's, the validators of one round's
 * messages (Forward, Verdict) wire_check_round.c's. Of the rest of net/ it
 * calls only keys.c's sw_wire_direct_ok (wire.c and the codec call it).
 */
#include "codec_pb.h"

#include <errno.h>
#include <string.h>

/* Inside the validators: bail out with a message unless cond holds. */
#define CHECK(cond, ...) SW_PB_CHECK("wire", cond, __VA_ARGS__)

/* The placement fields of an announce (version 7): bounded, a probe's time
 * only with its rows, and none of them on a client; so are its KV cache
 * fields (issue 33). */
static int s_placement(const Shardwire__PeerAnnounce *a, char *err, size_t err_len)
{
    const int client = a->role == SHARDWIRE__ROLE__ROLE_CLIENT;
    CHECK(!client ||
              (!a->auto_place && !a->mem_mib && !a->us_layer_1 && !a->us_layer_k &&
               !a->probe_rows && !a->rtt_us && !a->kv_kib_layer && !a->us_out_1 && !a->us_out_k),
          "a client announces no placement fields");
    CHECK(a->mem_mib <= SW_WIRE_MAX_MEM_MIB, "announce.mem_mib %u > %u", a->mem_mib,
          SW_WIRE_MAX_MEM_MIB);
    CHECK(a->us_layer_1 <= SW_WIRE_MAX_PROBE_US && a->us_layer_k <= SW_WIRE_MAX_PROBE_US &&
              a->us_out_1 <= SW_WIRE_MAX_PROBE_US && a->us_out_k <= SW_WIRE_MAX_PROBE_US &&
              a->rtt_us <= SW_WIRE_MAX_PROBE_US,
          "announce: a probe time over %u us", SW_WIRE_MAX_PROBE_US);
    CHECK(a->probe_rows == 0 || (a->probe_rows >= 2 && a->probe_rows <= SW_WIRE_MAX_ROWS),
          "announce.probe_rows %u not 0 or 2..%d", a->probe_rows, SW_WIRE_MAX_ROWS);
    CHECK(a->probe_rows != 0 || (!a->us_layer_1 && !a->us_layer_k && !a->us_out_1 && !a->us_out_k),
          "announce: probe times without probe_rows");
    CHECK(a->kv_kib_layer <= SW_WIRE_MAX_KV_KIB_LAYER, "announce.kv_kib_layer %u > %u",
          a->kv_kib_layer, SW_WIRE_MAX_KV_KIB_LAYER);
    /* the KV cache fields (issue 33): bounded, none on a client */
    CHECK(!client || (!a->n_ctx && !a->kv_mib && !a->kv_full && !a->kv_type),
          "a client announces no KV cache fields");
    CHECK(a->n_ctx <= SW_WIRE_MAX_POS && a->kv_mib <= SW_WIRE_MAX_MEM_MIB &&
              a->kv_full <= a->max_sessions && a->kv_type <= SW_WIRE_MAX_KV_TYPE,
          "announce: n_ctx %u (max %u), kv_mib %u (max %u), kv_full %u (max_sessions %u), "
          "kv_type %u (max %u)",
          a->n_ctx, SW_WIRE_MAX_POS, a->kv_mib, SW_WIRE_MAX_MEM_MIB, a->kv_full, a->max_sessions,
          a->kv_type, SW_WIRE_MAX_KV_TYPE);
    return SW_WIRE_OK;
}

/* The direct-path fields of an announce (version 10): a listener's address and key, and the
 * live direct links, all bounded; none on a client. */
static int s_direct(const Shardwire__PeerAnnounce *a, char *err, size_t err_len)
{
    const int client = a->role == SHARDWIRE__ROLE__ROLE_CLIENT;
    const size_t n = sw_pb_strlen_max(a->direct, SW_WIRE_DIRECT_MAX);
    const size_t k = sw_pb_strlen_max(a->direct_key, SW_WIRE_KEY_Z85_LEN);
    CHECK(n == 0 || sw_wire_direct_ok(a->direct),
          "announce.direct is not tcp://HOST:PORT of at most %d bytes", SW_WIRE_DIRECT_MAX);
    uint8_t raw[32];
    CHECK(k == 0 || (k == SW_WIRE_KEY_Z85_LEN && zmq_z85_decode(raw, a->direct_key)),
          "announce.direct_key is not a Z85 public key");
    CHECK(n || !k, "announce.direct_key without announce.direct");
    CHECK(!client || (!n && !a->n_direct_hops), "a client announces no direct path");
    CHECK(a->n_direct_hops <= SW_DIRECT_MAX_LINKS, "announce.direct_hops: %zu (max %d)",
          a->n_direct_hops, SW_DIRECT_MAX_LINKS);
    CHECK(a->relay_rtt_us <= SW_WIRE_MAX_PROBE_US, "announce.relay_rtt_us %u > %u", a->relay_rtt_us,
          SW_WIRE_MAX_PROBE_US);
    for (size_t i = 0; i < a->n_direct_hops; i++) {
        CHECK(a->direct_hops[i] != NULL, "announce.direct_hops[%zu] missing", i);
        int rc =
            sw_pb_check_name("announce.direct_hops.peer", a->direct_hops[i]->peer, 1, err, err_len);
        if (rc)
            return rc;
        CHECK(a->direct_hops[i]->rtt_us <= SW_WIRE_MAX_PROBE_US,
              "announce.direct_hops[%zu].rtt_us %u > %u", i, a->direct_hops[i]->rtt_us,
              SW_WIRE_MAX_PROBE_US);
    }
    return SW_WIRE_OK;
}

static int s_announce(const Shardwire__PeerAnnounce *a, char *err, size_t err_len)
{
    CHECK(a != NULL, "announce missing");
    int rc = sw_pb_check_name("announce.name", a->name, 1, err, err_len);
    if (rc)
        return rc;
    CHECK(a->role >= SHARDWIRE__ROLE__ROLE_HEAD && a->role <= SHARDWIRE__ROLE__ROLE_CLIENT,
          "announce.role %d unknown", (int)a->role);
    if ((rc = sw_pb_check_text("announce.backend", a->backend, SW_WIRE_NAME_MAX, err, err_len)))
        return rc;
    for (const char *c = a->backend; c && *c; c++) /* shown in logs and `shardwire status` */
        CHECK(*c >= 0x20 && *c <= 0x7e, "announce.backend has a non-printable byte");
    CHECK(a->max_sessions <= 65536, "announce.max_sessions %u > 65536", a->max_sessions);
    CHECK(sw_wire_model_name_ok(a->model_name), "announce.model_name is not 0..63 bytes of "
                                                "[A-Za-z0-9._:/-]");
    if ((rc = s_placement(a, err, err_len)) || (rc = s_direct(a, err, err_len)))
        return rc;
    if (a->role == SHARDWIRE__ROLE__ROLE_CLIENT) {
        CHECK(a->layer_begin == 0 && a->layer_end == 0 && a->n_layers == 0,
              "a client announces no layers");
        size_t n = sw_pb_strlen_max(a->model_fingerprint, 64);
        if (n != 0)
            return sw_pb_check_fingerprint(a->model_fingerprint, err, err_len);
        return SW_WIRE_OK;
    }
    if ((rc = sw_pb_check_fingerprint(a->model_fingerprint, err, err_len)))
        return rc;
    CHECK(a->n_layers >= 1 && a->n_layers <= SW_WIRE_MAX_LAYERS,
          "announce.n_layers %u not in 1..%d", a->n_layers, SW_WIRE_MAX_LAYERS);
    CHECK(a->hidden >= 1 && a->hidden <= SW_WIRE_MAX_HIDDEN, "announce.hidden %u not in 1..%d",
          a->hidden, SW_WIRE_MAX_HIDDEN);
    if (sw_wire_standby(a->auto_place, a->layer_begin, a->layer_end)) {
        CHECK(a->role == SHARDWIRE__ROLE__ROLE_MIDDLE, "a standby auto node announces as a middle");
        return SW_WIRE_OK;
    }
    CHECK(a->layer_begin < a->layer_end && a->layer_end <= a->n_layers,
          "announce layer range [%u, %u) not inside [0, %u)", a->layer_begin, a->layer_end,
          a->n_layers);
    int first = a->layer_begin == 0, last = a->layer_end == a->n_layers;
    switch (a->role) {
    case SHARDWIRE__ROLE__ROLE_HEAD:
        CHECK(first && !last, "a head holds [0, e) with e < n_layers");
        break;
    case SHARDWIRE__ROLE__ROLE_MIDDLE:
        CHECK(!first && !last, "a middle stage holds neither the first nor the last layer");
        break;
    case SHARDWIRE__ROLE__ROLE_TAIL:
        CHECK(!first && last, "a tail holds [b, n_layers) with b > 0");
        break;
    default: /* FULL */
        CHECK(first && last, "a full node holds [0, n_layers)");
        break;
    }
    return SW_WIRE_OK;
}

static int s_generate(const Shardwire__GenerateRequest *g, char *err, size_t err_len)
{
    int rc;
    CHECK(g != NULL, "generate missing");
    if ((rc = sw_pb_check_name("generate.request_id", g->request_id, 1, err, err_len)))
        return rc;
    if ((rc = sw_pb_check_name("generate.tenant", g->tenant, 0, err, err_len)))
        return rc;
    size_t plen = sw_pb_strlen_max(g->prompt, SW_WIRE_MAX_PROMPT_BYTES);
    CHECK(plen <= SW_WIRE_MAX_PROMPT_BYTES, "generate.prompt longer than %u bytes",
          SW_WIRE_MAX_PROMPT_BYTES);
    CHECK(g->n_prompt_tokens <= SW_WIRE_MAX_PROMPT_TOKENS,
          "generate has %zu prompt tokens (max %u)", g->n_prompt_tokens, SW_WIRE_MAX_PROMPT_TOKENS);
    CHECK(g->n_messages <= SW_WIRE_MAX_MESSAGES, "generate has %zu messages (max %d)",
          g->n_messages, SW_WIRE_MAX_MESSAGES);
    size_t mlen = 0;
    for (size_t i = 0; i < g->n_messages; i++) {
        const Shardwire__ChatMessage *m = g->messages[i];
        CHECK(m != NULL, "generate.messages[%zu] missing", i);
        size_t rl = sw_pb_strlen_max(m->role, 17);
        CHECK(rl >= 1 && rl <= 16, "generate.messages[%zu].role not 1..16 bytes", i);
        mlen += sw_pb_strlen_max(m->content, SW_WIRE_MAX_PROMPT_BYTES + 1);
        CHECK(mlen <= SW_WIRE_MAX_PROMPT_BYTES, "generate.messages longer than %u bytes",
              SW_WIRE_MAX_PROMPT_BYTES);
    }
    CHECK((plen > 0) + (g->n_prompt_tokens > 0) + (g->n_messages > 0) == 1,
          "generate needs exactly one of prompt, prompt_tokens and messages");
    if ((rc = sw_pb_check_tokens("generate.prompt_tokens", g->prompt_tokens, g->n_prompt_tokens,
                                 err, err_len)))
        return rc;
    CHECK(g->n_predict >= 1 && g->n_predict <= SW_WIRE_MAX_POS,
          "generate.n_predict %u not in 1..%u", g->n_predict, SW_WIRE_MAX_POS);
    CHECK(g->n_resume_tokens < g->n_predict,
          "generate has %zu resume tokens, not fewer than n_predict %u", g->n_resume_tokens,
          g->n_predict);
    if ((rc = sw_pb_check_tokens("generate.resume_tokens", g->resume_tokens, g->n_resume_tokens,
                                 err, err_len)))
        return rc;
    if ((rc = sw_pb_check_sampling(g->sampling, err, err_len)))
        return rc;
    if (g->draft) {
        CHECK(g->draft->mode >= SHARDWIRE__DRAFT_MODE__DRAFT_AUTO &&
                  g->draft->mode <= SHARDWIRE__DRAFT_MODE__DRAFT_MIX,
              "generate.draft.mode %d unknown", (int)g->draft->mode);
        CHECK(g->draft->n_draft <= SW_WIRE_MAX_DRAFT, "generate.draft.n_draft %u > %d",
              g->draft->n_draft, SW_WIRE_MAX_DRAFT);
        CHECK(sw_pb_upto(g->draft->p_min, 1.0f), "generate.draft.p_min not in [0, 1]");
        CHECK(g->draft->tree <= SW_WIRE_MAX_DRAFT, "generate.draft.tree %u > %d", g->draft->tree,
              SW_WIRE_MAX_DRAFT);
        CHECK(g->draft->ahead >= SHARDWIRE__DRAFT_AHEAD__AHEAD_DEFAULT &&
                  g->draft->ahead <= SHARDWIRE__DRAFT_AHEAD__AHEAD_ON,
              "generate.draft.ahead %d unknown", (int)g->draft->ahead);
    }
    CHECK(g->n_stop <= SW_WIRE_MAX_STOP, "generate has %zu stop strings (max %d)", g->n_stop,
          SW_WIRE_MAX_STOP);
    for (size_t i = 0; i < g->n_stop; i++) {
        size_t n = sw_pb_strlen_max(g->stop[i], SW_WIRE_MAX_STOP_LEN);
        CHECK(n >= 1 && n <= SW_WIRE_MAX_STOP_LEN, "generate.stop[%zu] not 1..%d bytes", i,
              SW_WIRE_MAX_STOP_LEN);
    }
    return SW_WIRE_OK;
}

static int s_token_chunk(const Shardwire__TokenChunk *c, char *err, size_t err_len)
{
    CHECK(c != NULL, "token_chunk missing");
    int rc = sw_pb_check_name("token_chunk.request_id", c->request_id, 1, err, err_len);
    if (rc)
        return rc;
    CHECK(c->n_tokens <= SW_WIRE_MAX_CHUNK_TOKENS, "token_chunk has %zu tokens (max %d)",
          c->n_tokens, SW_WIRE_MAX_CHUNK_TOKENS);
    if ((rc = sw_pb_check_tokens("token_chunk.tokens", c->tokens, c->n_tokens, err, err_len)))
        return rc;
    CHECK(c->text.len <= SW_WIRE_MAX_CHUNK_TEXT, "token_chunk.text has %zu bytes (max %u)",
          c->text.len, SW_WIRE_MAX_CHUNK_TEXT);
    CHECK(c->finish >= SHARDWIRE__FINISH_REASON__FINISH_NONE &&
              c->finish <= SHARDWIRE__FINISH_REASON__FINISH_CANCELLED,
          "token_chunk.finish %d unknown", (int)c->finish);
    CHECK(c->done == (c->finish != SHARDWIRE__FINISH_REASON__FINISH_NONE),
          "token_chunk.done and finish disagree");
    CHECK((uint64_t)c->index + c->n_tokens <= SW_WIRE_MAX_POS,
          "token_chunk tokens [%u, %u + %zu) pass the position limit", c->index, c->index,
          c->n_tokens);
    if (c->stats) {
        CHECK(c->stats->n_stages <= SW_WIRE_MAX_ROUTE, "token_chunk.stats has %zu stages (max %d)",
              c->stats->n_stages, SW_WIRE_MAX_ROUTE);
        for (size_t i = 0; i < c->stats->n_stages; i++)
            CHECK(c->stats->stages[i] && c->stats->stages[i]->name &&
                      strlen(c->stats->stages[i]->name) <= SW_WIRE_NAME_MAX,
                  "token_chunk.stats stage %zu is malformed", i);
    }
    return SW_WIRE_OK;
}

static int s_error(const Shardwire__Error *e, char *err, size_t err_len)
{
    int rc;
    CHECK(e != NULL, "error missing");
    CHECK(SW_PB_ERROR_CODE_KNOWN(e->code), "error.code %d unknown", (int)e->code);
    CHECK(e->queue_position <= SW_WIRE_MAX_QUEUE, "error.queue_position %u > %d", e->queue_position,
          SW_WIRE_MAX_QUEUE);
    if ((rc = sw_pb_check_text("error.message", e->message, SW_WIRE_MAX_ERROR_TEXT, err, err_len)))
        return rc;
    if ((rc = sw_pb_check_name("error.request_id", e->request_id, 0, err, err_len)))
        return rc;
    return sw_pb_check_name("error.dest", e->dest, 0, err, err_len);
}

static int s_check_plan_assign(const Shardwire__Envelope *env, int has_payload, size_t payload_len,
                               char *err, size_t err_len)
{
    (void)has_payload, (void)payload_len;
    const Shardwire__PlanAssign *p = env->plan_assign;
    CHECK(p != NULL, "plan_assign missing");
    int rc = sw_pb_check_fingerprint(p->model_fingerprint, err, err_len);
    if (rc)
        return rc;
    CHECK(p->n_layers >= 2 && p->n_layers <= SW_WIRE_MAX_LAYERS,
          "plan_assign.n_layers %u not in 2..%d", p->n_layers, SW_WIRE_MAX_LAYERS);
    CHECK(p->layer_begin > 0 && p->layer_begin < p->layer_end && p->layer_end <= p->n_layers,
          "plan_assign range [%u, %u) not inside [1, %u)", p->layer_begin, p->layer_end,
          p->n_layers);
    CHECK(p->plan_us <= SW_WIRE_MAX_PROBE_US, "plan_assign.plan_us %u > %u", p->plan_us,
          SW_WIRE_MAX_PROBE_US);
    return SW_WIRE_OK;
}

static int s_check_announce(const Shardwire__Envelope *env, int has_payload, size_t payload_len,
                            char *err, size_t err_len)
{
    (void)has_payload, (void)payload_len;
    return s_announce(env->announce, err, err_len);
}

static int s_check_announce_ack(const Shardwire__Envelope *env, int has_payload, size_t payload_len,
                                char *err, size_t err_len)
{
    (void)has_payload, (void)payload_len;
    CHECK(env->announce_ack != NULL, "announce_ack missing");
    CHECK(env->announce_ack->heartbeat_ms <= 3600000, "announce_ack.heartbeat_ms too large");
    return sw_pb_check_name("announce_ack.name", env->announce_ack->name, 1, err, err_len);
}

static int s_check_status_query(const Shardwire__Envelope *env, int has_payload, size_t payload_len,
                                char *err, size_t err_len)
{
    (void)has_payload, (void)payload_len;
    CHECK(env->status_query != NULL, "status_query missing");
    return SW_WIRE_OK;
}

static int s_check_peer_table(const Shardwire__Envelope *env, int has_payload, size_t payload_len,
                              char *err, size_t err_len)
{
    (void)has_payload, (void)payload_len;
    const Shardwire__PeerTable *t = env->peer_table;
    CHECK(t != NULL, "peer_table missing");
    CHECK(t->n_peers <= SW_WIRE_MAX_PEERS, "peer_table has %zu peers (max %d)", t->n_peers,
          SW_WIRE_MAX_PEERS);
    for (size_t i = 0; i < t->n_peers; i++) {
        CHECK(t->peers[i] != NULL, "peer_table.peers[%zu] missing", i);
        int rc = s_announce(t->peers[i]->announce, err, err_len);
        if (rc)
            return rc;
        const char *fp = t->peers[i]->key_fp;
        size_t fl = sw_pb_strlen_max(fp, SW_WIRE_KEY_FP_LEN);
        CHECK(fl == 0 || sw_wire_key_fp_ok(fp, fl),
              "peer_table.peers[%zu].key_fp is not %d lower-case hex digits", i,
              SW_WIRE_KEY_FP_LEN);
    }
    return SW_WIRE_OK;
}

static int s_check_session_open(const Shardwire__Envelope *env, int has_payload, size_t payload_len,
                                char *err, size_t err_len)
{
    (void)has_payload, (void)payload_len;
    int rc;
    const Shardwire__SessionOpen *o = env->session_open;
    CHECK(o != NULL, "session_open missing");
    CHECK(o->session_id != 0, "session_open.session_id is 0");
    CHECK(o->n_ctx >= 1 && o->n_ctx <= SW_WIRE_MAX_POS, "session_open.n_ctx %u not in 1..%u",
          o->n_ctx, SW_WIRE_MAX_POS);
    if ((rc = sw_pb_check_fingerprint(o->model_fingerprint, err, err_len)))
        return rc;
    if ((rc = sw_pb_check_route("session_open.route", o->route, o->n_route, 1, err, err_len)))
        return rc;
    return sw_pb_check_sampling(o->sampling, err, err_len);
}

static int s_check_session_close(const Shardwire__Envelope *env, int has_payload,
                                 size_t payload_len, char *err, size_t err_len)
{
    (void)has_payload, (void)payload_len;
    CHECK(env->session_close != NULL, "session_close missing");
    CHECK(env->session_close->session_id != 0, "session_close.session_id is 0");
    return sw_pb_check_text("session_close.reason", env->session_close->reason, 256, err, err_len);
}

static int s_check_generate(const Shardwire__Envelope *env, int has_payload, size_t payload_len,
                            char *err, size_t err_len)
{
    (void)has_payload, (void)payload_len;
    return s_generate(env->generate, err, err_len);
}

static int s_check_token_chunk(const Shardwire__Envelope *env, int has_payload, size_t payload_len,
                               char *err, size_t err_len)
{
    (void)has_payload, (void)payload_len;
    return s_token_chunk(env->token_chunk, err, err_len);
}

static int s_check_error(const Shardwire__Envelope *env, int has_payload, size_t payload_len,
                         char *err, size_t err_len)
{
    (void)has_payload, (void)payload_len;
    return s_error(env->error, err, err_len);
}

static int s_check_cancel(const Shardwire__Envelope *env, int has_payload, size_t payload_len,
                          char *err, size_t err_len)
{
    (void)has_payload, (void)payload_len;
    CHECK(env->cancel != NULL, "cancel missing");
    int rc = sw_pb_check_name("cancel.request_id", env->cancel->request_id, 1, err, err_len);
    if (rc)
        return rc;
    return sw_pb_check_text("cancel.reason", env->cancel->reason, 256, err, err_len);
}

static int s_check_resume(const Shardwire__Envelope *env, int has_payload, size_t payload_len,
                          char *err, size_t err_len)
{
    (void)has_payload, (void)payload_len;
    CHECK(env->resume != NULL, "resume missing");
    CHECK(env->resume->from_index <= SW_WIRE_MAX_POS, "resume.from_index %u > %u",
          env->resume->from_index, SW_WIRE_MAX_POS);
    return sw_pb_check_name("resume.request_id", env->resume->request_id, 1, err, err_len);
}

static int s_check_progress(const Shardwire__Envelope *env, int has_payload, size_t payload_len,
                            char *err, size_t err_len)
{
    (void)has_payload, (void)payload_len;
    const Shardwire__Progress *p = env->progress;
    CHECK(p != NULL, "progress missing");
    CHECK(p->prompt_total <= SW_WIRE_MAX_POS && p->prompt_done <= p->prompt_total,
          "progress: %u of %u prompt positions (at most %u)", p->prompt_done, p->prompt_total,
          SW_WIRE_MAX_POS);
    CHECK(p->generated <= SW_WIRE_MAX_POS, "progress.generated %u > %u", p->generated,
          SW_WIRE_MAX_POS);
    CHECK(p->next_ms <= SW_WIRE_MAX_PROGRESS_MS, "progress.next_ms %u > %u", p->next_ms,
          SW_WIRE_MAX_PROGRESS_MS);
    CHECK(p->prompt_finished <= p->prompt_done,
          "progress: %u positions through every stage, %u "
          "through the head",
          p->prompt_finished, p->prompt_done);
    return sw_pb_check_name("progress.request_id", p->request_id, 1, err, err_len);
}

static int s_check_prefill_ack(const Shardwire__Envelope *env, int has_payload, size_t payload_len,
                               char *err, size_t err_len)
{
    (void)has_payload, (void)payload_len;
    const Shardwire__PrefillAck *p = env->prefill_ack;
    CHECK(p != NULL, "prefill_ack missing");
    CHECK(p->done >= 1 && p->done <= SW_WIRE_MAX_POS, "prefill_ack.done %u not in 1..%u", p->done,
          SW_WIRE_MAX_POS);
    return SW_WIRE_OK;
}

static int s_check_spot_query(const Shardwire__Envelope *env, int has_payload, size_t payload_len,
                              char *err, size_t err_len)
{
    (void)has_payload, (void)payload_len;
    CHECK(env->spot_query != NULL, "spot_query missing");
    return SW_WIRE_OK;
}

static int s_check_spot_report(const Shardwire__Envelope *env, int has_payload, size_t payload_len,
                               char *err, size_t err_len)
{
    (void)has_payload, (void)payload_len;
    const Shardwire__SpotReport *r = env->spot_report;
    CHECK(r != NULL, "spot_report missing");
    CHECK(r->share >= 0 && r->share <= 1, "spot_report.share %g not in [0, 1]", (double)r->share);
    CHECK(r->n_nodes <= SW_WIRE_MAX_SPOT_NODES, "spot_report has %zu nodes (max %d)", r->n_nodes,
          SW_WIRE_MAX_SPOT_NODES);
    for (size_t i = 0; i < r->n_nodes; i++) {
        CHECK(r->nodes[i] != NULL, "spot_report.nodes[%zu] missing", i);
        CHECK(r->nodes[i]->avoid_s <= SW_WIRE_MAX_SPOT_AVOID_S,
              "spot_report.nodes[%zu].avoid_s %u > %d", i, r->nodes[i]->avoid_s,
              SW_WIRE_MAX_SPOT_AVOID_S);
        int rc = sw_pb_check_name("spot_report.nodes.name", r->nodes[i]->name, 1, err, err_len);
        if (rc)
            return rc;
    }
    return SW_WIRE_OK;
}

/* ---- the message types ------------------------------------------------------ */

typedef int (*s_check_fn)(const Shardwire__Envelope *env, int has_payload, size_t payload_len,
                          char *err, size_t err_len);

/*
 * One row per message type, indexed by sw_msg_type_t: its body case in the
 * Envelope, its name, the channel it is sealed on between peers (0: an
 * Error, either), whether a payload frame may follow it, and its validator.
 * A body case no row names is refused as malformed (sw_wire_validate); a
 * type without a row fails the static assertion below.
 */
static const struct s_type {
    int body;         /* SHARDWIRE__ENVELOPE__BODY_* */
    const char *name; /* for logs and errors */
    int channel;      /* SW_WIRE_CH_CLUSTER, SW_WIRE_CH_ACCESS, or 0 (either) */
    int payload;      /* 1: a payload frame may follow (only the Forward's tensor) */
    s_check_fn check; /* every field against the protocol's limits */
} s_types[] = {
    [SW_MSG_ANNOUNCE] = {SHARDWIRE__ENVELOPE__BODY_ANNOUNCE, "announce", SW_WIRE_CH_CLUSTER, 0,
                         s_check_announce},
    [SW_MSG_ANNOUNCE_ACK] = {SHARDWIRE__ENVELOPE__BODY_ANNOUNCE_ACK, "announce_ack",
                             SW_WIRE_CH_CLUSTER, 0, s_check_announce_ack},
    [SW_MSG_STATUS_QUERY] = {SHARDWIRE__ENVELOPE__BODY_STATUS_QUERY, "status_query",
                             SW_WIRE_CH_CLUSTER, 0, s_check_status_query},
    [SW_MSG_PEER_TABLE] = {SHARDWIRE__ENVELOPE__BODY_PEER_TABLE, "peer_table", SW_WIRE_CH_CLUSTER,
                           0, s_check_peer_table},
    [SW_MSG_SESSION_OPEN] = {SHARDWIRE__ENVELOPE__BODY_SESSION_OPEN, "session_open",
                             SW_WIRE_CH_CLUSTER, 0, s_check_session_open},
    [SW_MSG_SESSION_CLOSE] = {SHARDWIRE__ENVELOPE__BODY_SESSION_CLOSE, "session_close",
                              SW_WIRE_CH_CLUSTER, 0, s_check_session_close},
    [SW_MSG_FORWARD] = {SHARDWIRE__ENVELOPE__BODY_FORWARD, "forward", SW_WIRE_CH_CLUSTER, 1,
                        sw_pb_check_forward},
    [SW_MSG_VERDICT] = {SHARDWIRE__ENVELOPE__BODY_VERDICT, "verdict", SW_WIRE_CH_CLUSTER, 0,
                        sw_pb_check_verdict},
    [SW_MSG_GENERATE] = {SHARDWIRE__ENVELOPE__BODY_GENERATE, "generate", SW_WIRE_CH_ACCESS, 0,
                         s_check_generate},
    [SW_MSG_TOKEN_CHUNK] = {SHARDWIRE__ENVELOPE__BODY_TOKEN_CHUNK, "token_chunk", SW_WIRE_CH_ACCESS,
                            0, s_check_token_chunk},
    [SW_MSG_ERROR] = {SHARDWIRE__ENVELOPE__BODY_ERROR, "error", 0, 0, s_check_error},
    [SW_MSG_CANCEL] = {SHARDWIRE__ENVELOPE__BODY_CANCEL, "cancel", SW_WIRE_CH_ACCESS, 0,
                       s_check_cancel},
    [SW_MSG_RESUME] = {SHARDWIRE__ENVELOPE__BODY_RESUME, "resume", SW_WIRE_CH_ACCESS, 0,
                       s_check_resume},
    [SW_MSG_PLAN_ASSIGN] = {SHARDWIRE__ENVELOPE__BODY_PLAN_ASSIGN, "plan_assign",
                            SW_WIRE_CH_CLUSTER, 0, s_check_plan_assign},
    [SW_MSG_SPOT_QUERY] = {SHARDWIRE__ENVELOPE__BODY_SPOT_QUERY, "spot_query", SW_WIRE_CH_ACCESS, 0,
                           s_check_spot_query},
    [SW_MSG_SPOT_REPORT] = {SHARDWIRE__ENVELOPE__BODY_SPOT_REPORT, "spot_report", SW_WIRE_CH_ACCESS,
                            0, s_check_spot_report},
    [SW_MSG_PROGRESS] = {SHARDWIRE__ENVELOPE__BODY_PROGRESS, "progress", SW_WIRE_CH_ACCESS, 0,
                         s_check_progress},
    [SW_MSG_PREFILL_ACK] = {SHARDWIRE__ENVELOPE__BODY_PREFILL_ACK, "prefill_ack",
                            SW_WIRE_CH_CLUSTER, 0, s_check_prefill_ack},
};
_Static_assert(sizeof s_types / sizeof s_types[0] == SW_MSG_TYPES,
               "wire_check.c: one row per message type (sw_msg_type_t)");

/* The row of a type, or NULL (SW_MSG_NONE, out of range, or a hole in the table). */
static const struct s_type *s_type_row(sw_msg_type_t type)
{
    if ((int)type <= SW_MSG_NONE || type >= SW_MSG_TYPES || !s_types[type].check)
        return NULL;
    return &s_types[type];
}

sw_msg_type_t sw_wire_body_type(const Shardwire__Envelope *env)
{
    if (!env)
        return SW_MSG_NONE;
    for (int t = SW_MSG_NONE + 1; t < SW_MSG_TYPES; t++)
        if (s_types[t].check && s_types[t].body == (int)env->body_case)
            return (sw_msg_type_t)t;
    return SW_MSG_NONE;
}

int sw_wire_type_body(sw_msg_type_t type)
{
    const struct s_type *row = s_type_row(type);
    return row ? row->body : 0;
}

const char *sw_wire_type_name(sw_msg_type_t type)
{
    const struct s_type *row = s_type_row(type);
    return row ? row->name : "none";
}

const char *sw_wire_body_name(const Shardwire__Envelope *env)
{
    return sw_wire_type_name(sw_wire_body_type(env));
}

int sw_wire_body_channel(const Shardwire__Envelope *env)
{
    const struct s_type *row = s_type_row(sw_wire_body_type(env));
    /* an unknown body never gets this far (validation refuses it first); if
     * it did, the cluster channel is the one that admits the least */
    return row ? row->channel : SW_WIRE_CH_CLUSTER;
}

int sw_wire_validate(const Shardwire__Envelope *env, int has_payload, size_t payload_len, char *err,
                     size_t err_len)
{
    CHECK(env != NULL, "no envelope");
    if (env->version != SW_WIRE_VERSION)
        return sw_pb_fail("wire", SW_WIRE_EVERSION, err, err_len,
                          "protocol version %u, this build speaks %u", env->version,
                          SW_WIRE_VERSION);
    const struct s_type *row = s_type_row(sw_wire_body_type(env));
    CHECK(!has_payload || (row && row->payload), "a %s message carries no payload frame",
          sw_wire_body_name(env));
    CHECK(row != NULL, "envelope has no known body (case %d)", (int)env->body_case);
    return row->check(env, has_payload, payload_len, err, err_len);
}

/*
 * Refuses unknown fields anywhere in the tree: peers of one protocol version
 * share one schema, so an unknown field means a broken or hostile sender (and
 * protobuf-c would keep it and write it back out on a re-encode).
 */
static int s_no_unknown(const ProtobufCMessage *m, int depth, char *err, size_t err_len)
{
    CHECK(depth < 8, "message nesting deeper than 8");
    CHECK(m->n_unknown_fields == 0, "%s carries %u unknown field(s)", m->descriptor->short_name,
          m->n_unknown_fields);
    const ProtobufCMessageDescriptor *d = m->descriptor;
    const char *base = (const char *)m;
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        if (f->type != PROTOBUF_C_TYPE_MESSAGE)
            continue;
        if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
            uint32_t which;
            memcpy(&which, base + f->quantifier_offset, sizeof which);
            if (which != f->id)
                continue;
        }
        if (f->label == PROTOBUF_C_LABEL_REPEATED) {
            size_t n;
            ProtobufCMessage **arr;
            memcpy(&n, base + f->quantifier_offset, sizeof n);
            memcpy(&arr, base + f->offset, sizeof arr);
            for (size_t j = 0; j < n; j++) {
                CHECK(arr[j] != NULL, "%s.%s[%zu] missing", d->short_name, f->name, j);
                int rc = s_no_unknown(arr[j], depth + 1, err, err_len);
                if (rc)
                    return rc;
            }
        } else {
            ProtobufCMessage *sub;
            memcpy(&sub, base + f->offset, sizeof sub);
            if (sub) {
                int rc = s_no_unknown(sub, depth + 1, err, err_len);
                if (rc)
                    return rc;
            }
        }
    }
    return SW_WIRE_OK;
}

/* ---- encode / decode -------------------------------------------------------- */

int sw_wire_decode(const void *header, size_t header_len, int has_payload, size_t payload_len,
                   Shardwire__Envelope **out, char *err, size_t err_len)
{
    *out = NULL;
    CHECK(header_len >= 1 && header_len <= SW_WIRE_MAX_HEADER, "header frame of %zu bytes (1..%u)",
          header_len, SW_WIRE_MAX_HEADER);
    Shardwire__Envelope *env = shardwire__envelope__unpack(NULL, header_len, header);
    CHECK(env != NULL, "header frame (%zu bytes) is not a valid Envelope protobuf", header_len);
    int rc = sw_wire_validate(env, has_payload, payload_len, err, err_len);
    if (rc == SW_WIRE_OK)
        rc = s_no_unknown(&env->base, 0, err, err_len);
    if (rc) {
        shardwire__envelope__free_unpacked(env, NULL);
        return rc;
    }
    *out = env;
    return SW_WIRE_OK;
}

int sw_wire_encode(Shardwire__Envelope *env, int has_payload, size_t payload_len, zmq_msg_t *frame,
                   char *err, size_t err_len)
{
    CHECK(env != NULL, "no envelope to encode");
    env->version = SW_WIRE_VERSION;
    int rc = sw_wire_validate(env, has_payload, payload_len, err, err_len);
    if (rc)
        return rc;
    size_t n = shardwire__envelope__get_packed_size(env);
    CHECK(n <= SW_WIRE_MAX_HEADER, "encoded %s header of %zu bytes exceeds %u",
          sw_wire_body_name(env), n, SW_WIRE_MAX_HEADER);
    if (zmq_msg_init_size(frame, n) != 0)
        return sw_pb_fail("wire", SW_WIRE_ESOCKET, err, err_len, "zmq_msg_init_size(%zu): %s", n,
                          zmq_strerror(errno));
    size_t w = shardwire__envelope__pack(env, zmq_msg_data(frame));
    if (w != n) {
        zmq_msg_close(frame);
        CHECK(0, "protobuf pack wrote %zu of %zu bytes", w, n);
    }
    return SW_WIRE_OK;
}
