/*
 * test_codec.c - the wire codec (net/codec.h): every message type makes
 * the whole trip plain struct -> sw_codec_send -> a real ZeroMQ socket ->
 * sw_wire_recv (validation) -> sw_codec_decode with every field intact, and
 * the relay's path (sw_codec_encode -> sw_wire_decode_msg) too; values the
 * protobuf cannot carry or the protocol refuses are refused on the way out,
 * and hand-made Envelopes with counts beyond the plain arrays are refused on
 * the way in; the message-type tables of wire_check.c, codec.c and
 * codec_encode.c cover every body case of the schema; the hidden-state
 * conversions match the engine's bit for bit; sealing still happens below
 * the codec.
 */
#include "codec.h"
#include "codec_pb.h"
#include "quant.h"
#include "seal.h"
#include "sw_test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *FP = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

static void *s_ctx, *s_a, *s_b; /* a PAIR socket pair: a sends, b receives */

/* A trip that should have worked did not: the checks after it would read
 * nothing, so the test ends here. */
static int s_trip_failed(const char *what, const char *err)
{
    fprintf(stderr, "%s: %s\n", what, err);
    sw_test_failures++;
    exit(sw_test_done());
}

/* Sends msg from a, receives it at b (wire_check.c validates) and decodes it into
 * *out; *m keeps the received message (its views point into it). */
static int s_trip(const sw_msg_t *msg, sw_wire_msg_t *m, sw_msg_t *out)
{
    char err[SW_WIRE_ERR_LEN] = "";
    if (sw_codec_send(s_a, "peer-a", msg, 0, NULL, err, sizeof err) != 0)
        return s_trip_failed("send", err);
    sw_wire_msg_clear(m);
    if (sw_wire_recv(s_b, 0, m, err, sizeof err) != 0)
        return s_trip_failed("recv", err);
    SW_CHECK(!strcmp(m->peer, "peer-a"));
    SW_CHECK_INT(sw_wire_msg_type(m), msg->type);
    if (sw_codec_decode(m, msg->type, out, err, sizeof err) != 0)
        return s_trip_failed("decode", err);
    return 0;
}

/* The relay's path: one header frame, decoded again as a control message. */
static int s_trip_frame(const sw_msg_t *msg, sw_wire_msg_t *m, sw_msg_t *out)
{
    char err[SW_WIRE_ERR_LEN] = "";
    zmq_msg_t frame;
    if (sw_codec_encode(msg, &frame, err, sizeof err) != 0)
        return s_trip_failed("encode", err);
    int rc =
        sw_wire_decode_msg(zmq_msg_data(&frame), zmq_msg_size(&frame), 0, 0, m, err, sizeof err);
    zmq_msg_close(&frame);
    if (rc)
        return s_trip_failed("wire decode", err);
    if (sw_codec_decode(m, msg->type, out, err, sizeof err) != 0)
        return s_trip_failed("decode", err);
    return 0;
}

/* 0 when msg would be sent; otherwise the refusal, which must say why. */
static int s_refused(const sw_msg_t *msg)
{
    char err[SW_WIRE_ERR_LEN] = "";
    int rc = sw_codec_validate(msg, err, sizeof err);
    if (rc)
        SW_CHECK(err[0] != '\0');
    return rc;
}

static void s_check_sampling(const sw_sampling_t *a, const sw_sampling_t *b)
{
    SW_CHECK(a->temp == b->temp);
    SW_CHECK_INT(a->top_k, b->top_k);
    SW_CHECK(a->top_p == b->top_p);
    SW_CHECK(a->min_p == b->min_p);
    SW_CHECK(a->rep_penalty == b->rep_penalty);
    SW_CHECK_INT(a->rep_last_n, b->rep_last_n);
    SW_CHECK(a->seed == b->seed);
}

/* A string as sent: NULL goes out as "". */
static const char *s_str(const char *s)
{
    return s ? s : "";
}

/* a decoded, b as sent. */
static void s_check_announce(const sw_msg_announce_t *a, const sw_msg_announce_t *b)
{
    SW_CHECK(!strcmp(a->name, s_str(b->name)));
    SW_CHECK_INT(a->role, b->role);
    SW_CHECK(!strcmp(a->model_fingerprint, s_str(b->model_fingerprint)));
    SW_CHECK_INT(a->layer_begin, b->layer_begin);
    SW_CHECK_INT(a->layer_end, b->layer_end);
    SW_CHECK_INT(a->n_layers, b->n_layers);
    SW_CHECK(!strcmp(a->backend, s_str(b->backend)));
    SW_CHECK_INT(a->max_sessions, b->max_sessions);
    SW_CHECK_INT(a->hidden, b->hidden);
    SW_CHECK(!strcmp(a->model_name, s_str(b->model_name)));
    SW_CHECK_INT(a->n_ctx, b->n_ctx);
    SW_CHECK_INT(a->kv_mib, b->kv_mib);
    SW_CHECK_INT(a->kv_full, b->kv_full);
    SW_CHECK_INT(a->kv_type, b->kv_type);
    SW_CHECK(!strcmp(a->direct, s_str(b->direct)));
    SW_CHECK(!strcmp(a->direct_key, s_str(b->direct_key)));
    SW_CHECK_INT(a->relay_rtt_us, b->relay_rtt_us);
    SW_CHECK_INT(a->n_direct_hops, b->n_direct_hops);
    for (uint32_t i = 0; i < a->n_direct_hops && i < b->n_direct_hops; i++) {
        SW_CHECK(!strcmp(a->direct_hops[i].peer, b->direct_hops[i].peer));
        SW_CHECK_INT(a->direct_hops[i].rtt_us, b->direct_hops[i].rtt_us);
    }
}

static void s_check_timing(const sw_msg_timing_t *a, const sw_msg_timing_t *b, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        SW_CHECK(!strcmp(a[i].name, b[i].name));
        SW_CHECK_INT(a[i].compute_us, b[i].compute_us);
        SW_CHECK_INT(a[i].queue_us, b[i].queue_us);
        SW_CHECK_INT(a[i].batch_rows, b[i].batch_rows);
        SW_CHECK_INT(a[i].batch_rounds, b[i].batch_rounds);
        SW_CHECK_INT(a[i].critical_us, b[i].critical_us);
    }
}

/* ---- the tables -------------------------------------------------------------------------- */

/* A sink that hands the encoder's Envelope straight to the decoder (ctx: an
 * err buffer of SW_WIRE_ERR_LEN bytes). */
static int s_decode_sink(void *ctx, sw_envelope_t *env, const void *payload, size_t payload_len,
                         int has_payload)
{
    (void)payload, (void)payload_len, (void)has_payload;
    sw_wire_msg_t m = {0};
    m.env = env;
    sw_msg_t out;
    return sw_codec_decode(&m, SW_MSG_NONE, &out, ctx, SW_WIRE_ERR_LEN);
}

static void s_test_tables(void)
{
    /* every body case of the schema's oneof has a type, and back */
    const ProtobufCMessageDescriptor *d = &shardwire__envelope__descriptor;
    int n_body = 0;
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        if (!(f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF))
            continue;
        n_body++;
        Shardwire__Envelope env = SHARDWIRE__ENVELOPE__INIT;
        env.body_case = (Shardwire__Envelope__BodyCase)f->id;
        const sw_msg_type_t t = sw_wire_body_type(&env);
        SW_CHECK(t != SW_MSG_NONE);
        SW_CHECK_INT(sw_wire_type_body(t), (int)f->id);
        SW_CHECK(!strcmp(sw_wire_type_name(t), f->name));
    }
    SW_CHECK_INT(n_body, SW_MSG_TYPES - 1);
    /* every type has a row in wire_check.c, in codec_encode.c and in
     * codec.c (an empty message of each type gets as far as validation:
     * refused for its content, never "no known type"; and the encoder's
     * Envelope of it reaches a decoder) */
    for (int t = SW_MSG_NONE + 1; t < SW_MSG_TYPES; t++) {
        SW_CHECK(sw_wire_type_body((sw_msg_type_t)t) != 0);
        sw_msg_t msg;
        memset(&msg, 0, sizeof msg);
        msg.type = (sw_msg_type_t)t;
        char err[SW_WIRE_ERR_LEN] = "";
        (void)!sw_codec_validate(&msg, err, sizeof err);
        SW_CHECK(strstr(err, "no known type") == NULL);
        char derr[SW_WIRE_ERR_LEN] = "";
        (void)!sw_codec_emit(&msg, s_decode_sink, derr, derr, sizeof derr);
        SW_CHECK(strstr(derr, "no known type") == NULL);
    }
    /* none of both: refused */
    SW_CHECK(!strcmp(sw_wire_type_name(SW_MSG_NONE), "none"));
    SW_CHECK_INT(sw_wire_type_body(SW_MSG_NONE), 0);
    SW_CHECK_INT(sw_wire_type_body(SW_MSG_TYPES), 0);
    sw_msg_t none = {.type = SW_MSG_NONE};
    SW_CHECK_INT(s_refused(&none), SW_WIRE_EMALFORMED);
    sw_msg_t beyond = {.type = SW_MSG_TYPES};
    SW_CHECK_INT(s_refused(&beyond), SW_WIRE_EMALFORMED);
    Shardwire__Envelope env = SHARDWIRE__ENVELOPE__INIT;
    env.version = SW_WIRE_VERSION;
    env.body_case = (Shardwire__Envelope__BodyCase)99;
    SW_CHECK_INT(sw_wire_body_type(&env), SW_MSG_NONE);
    SW_CHECK_INT(sw_wire_validate(&env, 0, 0, NULL, 0), SW_WIRE_EMALFORMED);
    /* channels as docs/protocol.md says */
    env.body_case = SHARDWIRE__ENVELOPE__BODY_FORWARD;
    SW_CHECK_INT(sw_wire_body_channel(&env), SW_WIRE_CH_CLUSTER);
    env.body_case = SHARDWIRE__ENVELOPE__BODY_RESUME;
    SW_CHECK_INT(sw_wire_body_channel(&env), SW_WIRE_CH_ACCESS);
    env.body_case = SHARDWIRE__ENVELOPE__BODY_ERROR;
    SW_CHECK_INT(sw_wire_body_channel(&env), 0);
}

/* ---- round trips --------------------------------------------------------------------------- */

static void s_test_announce_ack_status(void)
{
    sw_wire_msg_t m = {0};
    sw_msg_t out;
    const sw_msg_announce_t node = {.name = "stage-1.b",
                                    .role = SW_ROLE_MIDDLE,
                                    .model_fingerprint = FP,
                                    .layer_begin = 4,
                                    .layer_end = 9,
                                    .n_layers = 30,
                                    .backend = "cpu (4 threads)",
                                    .max_sessions = 17,
                                    .hidden = 576,
                                    .model_name = "smol/135m:q4",
                                    .n_ctx = 32768,
                                    .kv_mib = 2500,
                                    .kv_full = 5,
                                    .kv_type = 1};
    sw_msg_t msg = {.type = SW_MSG_ANNOUNCE, .announce = node};
    SW_CHECK_INT(s_trip(&msg, &m, &out), 0);
    s_check_announce(&out.announce, &node);
    SW_CHECK_INT(s_trip_frame(&msg, &m, &out), 0);
    s_check_announce(&out.announce, &node);
    /* a client with NULL strings: sent as "", decoded as "" (never NULL) */
    msg.announce = (sw_msg_announce_t){.name = "client-x", .role = SW_ROLE_CLIENT};
    SW_CHECK_INT(s_trip(&msg, &m, &out), 0);
    SW_CHECK(!strcmp(out.announce.name, "client-x"));
    SW_CHECK_INT(out.announce.role, SW_ROLE_CLIENT);
    SW_CHECK(out.announce.model_fingerprint && !out.announce.model_fingerprint[0]);
    SW_CHECK(out.announce.backend && !out.announce.backend[0]);
    SW_CHECK(out.announce.model_name && !out.announce.model_name[0]);

    msg =
        (sw_msg_t){.type = SW_MSG_ANNOUNCE_ACK,
                   .ack = {.name = "stage-1.b", .heartbeat_ms = 750, .max_frame_bytes = 1u << 30}};
    SW_CHECK_INT(s_trip_frame(&msg, &m, &out), 0);
    SW_CHECK(!strcmp(out.ack.name, "stage-1.b"));
    SW_CHECK_INT(out.ack.heartbeat_ms, 750);
    SW_CHECK(out.ack.max_frame_bytes == 1u << 30);

    msg = (sw_msg_t){.type = SW_MSG_STATUS_QUERY};
    SW_CHECK_INT(s_trip(&msg, &m, &out), 0);
    SW_CHECK_INT(out.type, SW_MSG_STATUS_QUERY);
    sw_wire_msg_clear(&m);
}

static void s_test_peer_table(void)
{
    sw_wire_msg_t m = {0};
    sw_msg_t out;
    sw_msg_peer_t peers[3] = {
        {.announce = {.name = "head",
                      .role = SW_ROLE_HEAD,
                      .model_fingerprint = FP,
                      .layer_end = 10,
                      .n_layers = 30,
                      .backend = "cpu",
                      .max_sessions = 4,
                      .hidden = 576},
         .heartbeat_age_ms = 12,
         .idle_ms = 34,
         .msgs_in = 56,
         .msgs_out = 78,
         .bytes_in = 1ull << 40,
         .key_bound = 1,
         .key_fp = "00112233445566778899aabbccddeeff"},
        {.announce = {.name = "client-7", .role = SW_ROLE_CLIENT},
         .idle_ms = 9,
         .key_fp = "ffeeddccbbaa99887766554433221100"},
        {.announce = {.name = "tail",
                      .role = SW_ROLE_TAIL,
                      .model_fingerprint = FP,
                      .layer_begin = 10,
                      .layer_end = 30,
                      .n_layers = 30,
                      .hidden = 576,
                      .model_name = "m"},
         .msgs_out = 3},
    };
    sw_msg_t msg = {.type = SW_MSG_PEER_TABLE,
                    .table = {.n_peers = 3,
                              .peers = peers,
                              .uptime_ms = 123456789,
                              .msgs_forwarded = 11,
                              .msgs_dropped = 2}};
    SW_CHECK_INT(s_trip_frame(&msg, &m, &out), 0);
    const sw_msg_table_t *t = &out.table;
    SW_CHECK_INT(t->n_peers, 3);
    SW_CHECK(t->peers == NULL); /* a view of the message */
    SW_CHECK(t->uptime_ms == 123456789);
    SW_CHECK(t->msgs_forwarded == 11 && t->msgs_dropped == 2);
    for (uint32_t i = 0; i < 3; i++) {
        sw_msg_peer_t p;
        SW_CHECK_INT(sw_codec_peer_at(t, i, &p), 0);
        s_check_announce(&p.announce, &peers[i].announce);
        SW_CHECK_INT(p.heartbeat_age_ms, peers[i].heartbeat_age_ms);
        SW_CHECK_INT(p.idle_ms, peers[i].idle_ms);
        SW_CHECK(p.msgs_in == peers[i].msgs_in && p.msgs_out == peers[i].msgs_out);
        SW_CHECK(p.bytes_in == peers[i].bytes_in);
        SW_CHECK_INT(p.key_bound, peers[i].key_bound);
        SW_CHECK(!strcmp(p.key_fp, peers[i].key_fp ? peers[i].key_fp : ""));
    }
    /* a key fingerprint is 32 lower-case hex digits or nothing */
    {
        char err[SW_WIRE_ERR_LEN];
        static const char *const bad[] = {"00112233445566778899aabbccddeef",
                                          "00112233445566778899AABBCCDDEEFF",
                                          "00112233445566778899aabbccddeeffa", "client@x"};
        for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++) {
            sw_msg_peer_t one = peers[1];
            one.key_fp = bad[b];
            sw_msg_t bad_msg = {.type = SW_MSG_PEER_TABLE, .table = {.n_peers = 1, .peers = &one}};
            SW_CHECK_INT(sw_codec_validate(&bad_msg, err, sizeof err), SW_WIRE_EMALFORMED);
        }
    }
    sw_msg_peer_t p;
    SW_CHECK_INT(sw_codec_peer_at(t, 3, &p), -1);
    /* the look-up by name, on the decoded table and on the one to send */
    SW_CHECK_INT(sw_codec_peer_find(t, "tail", &p), 1);
    SW_CHECK(!strcmp(p.announce.name, "tail") && p.announce.layer_begin == 10);
    SW_CHECK_INT(sw_codec_peer_find(t, "nobody", &p), 0);
    SW_CHECK_INT(sw_codec_peer_find(&msg.table, "client-7", &p), 1);
    SW_CHECK_INT(p.idle_ms, 9);
    /* routable: a node, key-bound unless no key is needed */
    SW_CHECK_INT(sw_codec_peer_find(t, "head", &p), 1);
    SW_CHECK_INT(sw_codec_peer_routable(&p, 1), 1);
    SW_CHECK_INT(sw_codec_peer_find(t, "tail", &p), 1);
    SW_CHECK_INT(sw_codec_peer_routable(&p, 1), 0);
    SW_CHECK_INT(sw_codec_peer_routable(&p, 0), 1);
    SW_CHECK_INT(sw_codec_peer_find(t, "client-7", &p), 1);
    SW_CHECK_INT(sw_codec_peer_routable(&p, 0), 0);
    /* a decoded table goes out again unchanged */
    sw_wire_msg_t m2 = {0};
    sw_msg_t again;
    sw_msg_t resend = out;
    SW_CHECK_INT(s_trip_frame(&resend, &m2, &again), 0);
    SW_CHECK_INT(sw_codec_peer_find(&again.table, "head", &p), 1);
    SW_CHECK(p.bytes_in == 1ull << 40);
    /* an empty table */
    msg.table = (sw_msg_table_t){0};
    SW_CHECK_INT(s_trip_frame(&msg, &m, &out), 0);
    SW_CHECK_INT(out.table.n_peers, 0);
    SW_CHECK_INT(sw_codec_peer_find(&out.table, "head", &p), 0);
    sw_wire_msg_clear(&m);
    sw_wire_msg_clear(&m2);
}

static void s_test_sessions(void)
{
    sw_wire_msg_t m = {0};
    sw_msg_t out;
    const sw_sampling_t sp = {.temp = 0.7f,
                              .top_k = 40,
                              .top_p = 0.9f,
                              .min_p = 0.05f,
                              .rep_penalty = 1.1f,
                              .rep_last_n = 64,
                              .seed = 0xfeedfacecafebeefull};
    sw_msg_t msg = {.type = SW_MSG_SESSION_OPEN,
                    .session_open = {.session_id = 0x1234567890abcdefull,
                                     .n_ctx = 2048,
                                     .model_fingerprint = FP,
                                     .n_route = 3,
                                     .route = {"head", "mid", "tail"},
                                     .has_sampling = 1,
                                     .sampling = sp}};
    SW_CHECK_INT(s_trip(&msg, &m, &out), 0);
    const sw_msg_session_open_t *o = &out.session_open;
    SW_CHECK(o->session_id == 0x1234567890abcdefull);
    SW_CHECK_INT(o->n_ctx, 2048);
    SW_CHECK(!strcmp(o->model_fingerprint, FP));
    SW_CHECK_INT(o->n_route, 3);
    SW_CHECK(!strcmp(o->route[0], "head") && !strcmp(o->route[1], "mid") &&
             !strcmp(o->route[2], "tail"));
    SW_CHECK_INT(o->has_sampling, 1);
    s_check_sampling(&o->sampling, &sp);

    msg = (sw_msg_t){.type = SW_MSG_SESSION_CLOSE,
                     .session_close = {.session_id = 77, .reason = "cancelled"}};
    SW_CHECK_INT(s_trip(&msg, &m, &out), 0);
    SW_CHECK(out.session_close.session_id == 77);
    SW_CHECK(!strcmp(out.session_close.reason, "cancelled"));
    sw_wire_msg_clear(&m);
}

/* A drafting tree round of 1 + 3 rows with an f16 tensor, as a middle stage gets it. */
static void s_test_forward(void)
{
    sw_wire_msg_t m = {0};
    sw_msg_t out;
    enum { ROWS = 4, HIDDEN = 8 };
    static const uint32_t toks[ROWS] = {17, 101, 102, 103};
    static const uint32_t drafts[3] = {101, 102, 103};
    static const float probs[3] = {0.5f, 0.25f, 0.125f};
    static const uint32_t parents[3] = {0, 0, 1};
    static const uint32_t d0_tok[2] = {101, 102}, d2_tok[1] = {103}; /* draft 1 is drawn from d0 */
    static const float d0_p[2] = {0.5f, 0.25f}, d2_p[1] = {0.125f};
    static const uint32_t kv_path[2] = {0, 2};
    uint16_t tensor[ROWS * HIDDEN];
    for (int i = 0; i < ROWS * HIDDEN; i++)
        tensor[i] = (uint16_t)(0x3c00 + i);
    sw_msg_t msg = {.type = SW_MSG_FORWARD};
    sw_msg_forward_t *f = &msg.forward;
    f->session_id = 0xabcdef;
    f->round = 42;
    f->start_pos = f->kv_keep = 100;
    f->n_rows = ROWS;
    f->n_tokens = ROWS;
    f->tokens = toks;
    f->has_sampling = 1;
    f->sampling = (sw_sampling_t){.temp = 0.5f, .top_k = 3, .top_p = 0.8f, .seed = 9};
    f->n_draft = 3;
    f->draft_tokens = drafts;
    f->draft_probs = probs;
    f->n_dists = 3;
    f->dists[0] = (sw_msg_dist_t){2, d0_tok, d0_p};
    f->dists[1] = (sw_msg_dist_t){0, NULL, NULL}; /* a later sibling: its first one's applies */
    f->dists[2] = (sw_msg_dist_t){1, d2_tok, d2_p};
    f->draft_parents = parents;
    f->dtype = SW_DTYPE_F16;
    f->hidden = HIDDEN;
    f->layer_begin = 12;
    f->n_route = 3;
    f->route[0] = "head";
    f->route[1] = "mid";
    f->route[2] = "tail";
    f->hop = 1;
    f->reply_to = "head";
    f->n_timing = 1;
    f->timing[0] = (sw_msg_timing_t){"head", 1500, 20, 12, 3, 4200};
    f->kv_path_from = 98;
    f->n_kv_path = 2;
    f->kv_path = kv_path;
    f->n_ctx = 4096;
    f->fair_client = 0xfedcba9876543210ull;
    f->fair_tenant = 7;
    f->payload = tensor;
    f->payload_len = sizeof tensor;
    SW_CHECK_INT(s_trip(&msg, &m, &out), 0);
    const sw_msg_forward_t *g = &out.forward;
    SW_CHECK(g->fair_client == 0xfedcba9876543210ull && g->fair_tenant == 7);
    SW_CHECK(g->session_id == 0xabcdef && g->round == 42);
    SW_CHECK_INT(g->start_pos, 100);
    SW_CHECK_INT(g->kv_keep, 100);
    SW_CHECK_INT(g->n_rows, ROWS);
    SW_CHECK_INT(g->n_tokens, ROWS);
    SW_CHECK(!memcmp(g->tokens, toks, sizeof toks));
    SW_CHECK_INT(g->has_sampling, 1);
    /* top_p as sent; repeat_penalty 0 is read as 1 (off) */
    sw_sampling_t want = f->sampling;
    want.rep_penalty = 1.0f;
    s_check_sampling(&g->sampling, &want);
    SW_CHECK_INT(g->n_draft, 3);
    SW_CHECK(!memcmp(g->draft_tokens, drafts, sizeof drafts));
    SW_CHECK(g->draft_probs && !memcmp(g->draft_probs, probs, sizeof probs));
    SW_CHECK_INT(g->n_dists, 3);
    SW_CHECK_INT(g->dists[0].n, 2);
    SW_CHECK(!memcmp(g->dists[0].tokens, d0_tok, sizeof d0_tok));
    SW_CHECK(!memcmp(g->dists[0].probs, d0_p, sizeof d0_p));
    SW_CHECK_INT(g->dists[1].n, 0);
    SW_CHECK_INT(g->dists[2].n, 1);
    SW_CHECK(g->dists[2].tokens[0] == 103 && g->dists[2].probs[0] == 0.125f);
    SW_CHECK(g->draft_parents && !memcmp(g->draft_parents, parents, sizeof parents));
    SW_CHECK_INT(g->dtype, SW_DTYPE_F16);
    SW_CHECK_INT(g->hidden, HIDDEN);
    SW_CHECK_INT(g->layer_begin, 12);
    SW_CHECK_INT(g->n_route, 3);
    SW_CHECK(!strcmp(g->route[0], "head") && !strcmp(g->route[2], "tail"));
    SW_CHECK_INT(g->hop, 1);
    SW_CHECK(!strcmp(g->reply_to, "head"));
    SW_CHECK_INT(g->prefill_more, 0);
    SW_CHECK_INT(g->n_timing, 1);
    s_check_timing(g->timing, f->timing, 1);
    SW_CHECK_INT(g->kv_path_from, 98);
    SW_CHECK_INT(g->n_kv_path, 2);
    SW_CHECK(g->kv_path && !memcmp(g->kv_path, kv_path, sizeof kv_path));
    SW_CHECK_INT(g->n_ctx, 4096);
    SW_CHECK_INT(g->payload_len, sizeof tensor);
    SW_CHECK(g->payload && !memcmp(g->payload, tensor, sizeof tensor));
    /* the tensor is not copied: it is the received frame */
    size_t plen = 0;
    SW_CHECK(g->payload == sw_wire_msg_payload(&m, &plen) && plen == sizeof tensor);

    /* the next hop's Forward is the decoded one with a few fields changed */
    sw_msg_t next = out;
    next.forward.hop = 2;
    next.forward.layer_begin = 20;
    next.forward.timing[next.forward.n_timing++] = (sw_msg_timing_t){"mid", 900, 5, 37, 4, 7100};
    sw_wire_msg_t m2 = {0};
    sw_msg_t out2;
    SW_CHECK_INT(s_trip(&next, &m2, &out2), 0);
    SW_CHECK_INT(out2.forward.hop, 2);
    SW_CHECK_INT(out2.forward.n_timing, 2);
    s_check_timing(out2.forward.timing, next.forward.timing, 2);
    SW_CHECK_INT(out2.forward.n_dists, 3);
    SW_CHECK(!memcmp(out2.forward.payload, tensor, sizeof tensor));
    sw_wire_msg_clear(&m2);

    /* a chain prefill chunk of tokens, no tensor, no sampling, no drafts */
    msg = (sw_msg_t){.type = SW_MSG_FORWARD};
    f->session_id = 5;
    f->n_rows = 2;
    f->n_tokens = 2;
    f->tokens = toks;
    f->n_route = 2;
    f->route[0] = "a";
    f->route[1] = "b";
    f->hop = 1;
    f->reply_to = "a";
    f->prefill_more = 1;
    SW_CHECK_INT(s_trip(&msg, &m, &out), 0);
    g = &out.forward;
    SW_CHECK_INT(g->has_sampling, 0);
    /* absent sampling reads as all zero, with top_p and repeat_penalty off */
    SW_CHECK(g->sampling.temp == 0 && g->sampling.top_k == 0 && g->sampling.top_p == 1.0f &&
             g->sampling.min_p == 0 && g->sampling.rep_penalty == 1.0f &&
             g->sampling.rep_last_n == 0 && g->sampling.seed == 0);
    SW_CHECK_INT(g->n_draft, 0);
    SW_CHECK(g->draft_probs == NULL && g->draft_parents == NULL && g->kv_path == NULL);
    SW_CHECK_INT(g->n_dists, 0);
    SW_CHECK_INT(g->prefill_more, 1);
    SW_CHECK(g->payload == NULL && g->payload_len == 0);
    SW_CHECK_INT(g->n_timing, 0);
    SW_CHECK_INT(g->prefix_len, 0);
    SW_CHECK(g->prefix_tokens == NULL);

    /* a prefill after a prefix taken from the stages' caches */
    static uint32_t prefix[2 * SW_PREFIX_BLOCK];
    for (int i = 0; i < 2 * SW_PREFIX_BLOCK; i++)
        prefix[i] = (uint32_t)(i * 7 + 3);
    f->prefill_more = 0;
    f->start_pos = f->kv_keep = 2 * SW_PREFIX_BLOCK;
    f->prefix_len = 2 * SW_PREFIX_BLOCK;
    f->prefix_tokens = prefix;
    SW_CHECK_INT(s_trip(&msg, &m, &out), 0);
    g = &out.forward;
    SW_CHECK_INT(g->prefix_len, 2 * SW_PREFIX_BLOCK);
    SW_CHECK(g->prefix_tokens && !memcmp(g->prefix_tokens, prefix, sizeof prefix));
    SW_CHECK_INT(g->kv_keep, 2 * SW_PREFIX_BLOCK);
    sw_wire_msg_clear(&m);
}

static void s_test_verdict(void)
{
    sw_wire_msg_t m = {0};
    sw_msg_t out;
    static const uint32_t toks[3] = {11, 12, 13}, path[2] = {1, 3};
    sw_msg_t msg = {.type = SW_MSG_VERDICT,
                    .verdict = {.session_id = 9,
                                .round = 1ull << 40,
                                .n_accepted = 2,
                                .n_tokens = 3,
                                .tokens = toks,
                                .next_token = 13,
                                .n_path = 2,
                                .path = path,
                                .n_timing = 2,
                                .timing = {{"head", 1, 2, 0, 0}, {"tail", 3, 4, 9, 2}},
                                .logits_digest = 0x0123456789abcdefull}};
    SW_CHECK_INT(s_trip(&msg, &m, &out), 0);
    const sw_msg_verdict_t *v = &out.verdict;
    SW_CHECK(v->session_id == 9 && v->round == 1ull << 40);
    SW_CHECK_INT(v->n_accepted, 2);
    SW_CHECK_INT(v->n_tokens, 3);
    SW_CHECK(!memcmp(v->tokens, toks, sizeof toks));
    SW_CHECK_INT(v->next_token, 13);
    SW_CHECK_INT(v->n_path, 2);
    SW_CHECK(v->path && !memcmp(v->path, path, sizeof path));
    SW_CHECK_INT(v->n_timing, 2);
    s_check_timing(v->timing, msg.verdict.timing, 2);
    SW_CHECK(v->logits_digest == 0x0123456789abcdefull);
    /* a chain round: no path */
    msg.verdict.n_path = 0;
    msg.verdict.path = NULL;
    SW_CHECK_INT(s_trip(&msg, &m, &out), 0);
    SW_CHECK(out.verdict.n_path == 0 && out.verdict.path == NULL);
    sw_wire_msg_clear(&m);
}

static void s_test_generate(void)
{
    sw_wire_msg_t m = {0};
    sw_msg_t out;
    const sw_sampling_t sp = {.temp = 1.5f,
                              .top_k = 7,
                              .top_p = 0.0f, /* read as 1 */
                              .min_p = 0.1f,
                              .rep_penalty = 0.0f, /* read as 1 */
                              .rep_last_n = 32,
                              .seed = 3};
    sw_msg_t msg = {.type = SW_MSG_GENERATE,
                    .generate = {.request_id = "req-1",
                                 .prompt = "Once upon a time",
                                 .n_predict = 64,
                                 .has_sampling = 1,
                                 .sampling = sp,
                                 .chat = 1,
                                 .has_draft = 1,
                                 .draft = {.mode = SW_DRAFT_MIX,
                                           .n_draft = 6,
                                           .p_min = 0.25f,
                                           .tree = 9,
                                           .ahead = SW_AHEAD_ON},
                                 .timeout_ms = 30000,
                                 .n_stop = 2,
                                 .stop = {"\n\n", "END"},
                                 .tenant = "api-3f2a"}};
    SW_CHECK_INT(s_trip(&msg, &m, &out), 0);
    const sw_msg_generate_t *g = &out.generate;
    SW_CHECK(!strcmp(g->tenant, "api-3f2a"));
    SW_CHECK(!strcmp(g->request_id, "req-1"));
    SW_CHECK(!strcmp(g->prompt, "Once upon a time"));
    SW_CHECK_INT(g->n_prompt_tokens, 0);
    SW_CHECK_INT(g->n_predict, 64);
    SW_CHECK_INT(g->has_sampling, 1);
    sw_sampling_t want = sp;
    want.top_p = want.rep_penalty = 1.0f;
    s_check_sampling(&g->sampling, &want);
    SW_CHECK_INT(g->chat, 1);
    SW_CHECK_INT(g->has_draft, 1);
    SW_CHECK_INT(g->draft.mode, SW_DRAFT_MIX);
    SW_CHECK_INT(g->draft.n_draft, 6);
    SW_CHECK(g->draft.p_min == 0.25f);
    SW_CHECK_INT(g->draft.tree, 9);
    SW_CHECK_INT(g->draft.ahead, SW_AHEAD_ON);
    SW_CHECK_INT(g->timeout_ms, 30000);
    SW_CHECK_INT(g->n_stop, 2);
    SW_CHECK(!strcmp(g->stop[0], "\n\n") && !strcmp(g->stop[1], "END"));
    SW_CHECK_INT(g->n_messages, 0);

    /* a conversation, no sampling, no draft */
    const sw_msg_turn_t turns[3] = {{"system", "Be brief."}, {"user", "Hi"}, {"assistant", ""}};
    msg = (sw_msg_t){
        .type = SW_MSG_GENERATE,
        .generate = {.request_id = "req-2", .n_predict = 1, .n_messages = 3, .messages = turns}};
    SW_CHECK_INT(s_trip(&msg, &m, &out), 0);
    g = &out.generate;
    SW_CHECK_INT(g->n_messages, 3);
    SW_CHECK(g->messages == NULL); /* a view of the message */
    for (uint32_t i = 0; i < 3; i++) {
        sw_msg_turn_t t;
        SW_CHECK_INT(sw_codec_turn_at(g, i, &t), 0);
        SW_CHECK(!strcmp(t.role, turns[i].role) && !strcmp(t.content, turns[i].content));
    }
    sw_msg_turn_t t;
    SW_CHECK_INT(sw_codec_turn_at(g, 3, &t), -1);
    SW_CHECK_INT(g->has_sampling, 0);
    SW_CHECK(g->sampling.temp == 0 && g->sampling.top_p == 1.0f);
    SW_CHECK_INT(g->has_draft, 0);
    SW_CHECK(!strcmp(g->prompt, ""));
    SW_CHECK(!strcmp(g->tenant, "")); /* not sent: the key's own */

    /* prompt tokens */
    static const uint32_t ptoks[4] = {1, 2, 3, (1u << 22) - 1};
    msg = (sw_msg_t){.type = SW_MSG_GENERATE,
                     .generate = {.request_id = "req-3",
                                  .n_prompt_tokens = 4,
                                  .prompt_tokens = ptoks,
                                  .n_predict = 1u << 24}};
    SW_CHECK_INT(s_trip(&msg, &m, &out), 0);
    SW_CHECK_INT(out.generate.n_prompt_tokens, 4);
    SW_CHECK(!memcmp(out.generate.prompt_tokens, ptoks, sizeof ptoks));
    SW_CHECK_INT(out.generate.n_predict, 1u << 24);
    sw_wire_msg_clear(&m);
}

static void s_test_chunk(void)
{
    sw_wire_msg_t m = {0};
    sw_msg_t out;
    static const uint32_t toks[2] = {5, 6};
    sw_msg_t msg = {.type = SW_MSG_TOKEN_CHUNK,
                    .chunk = {.request_id = "req-9",
                              .n_tokens = 2,
                              .tokens = toks,
                              .text = "ab\xc3",
                              .text_len = 3,
                              .index = 40}};
    SW_CHECK_INT(s_trip(&msg, &m, &out), 0);
    const sw_msg_chunk_t *c = &out.chunk;
    SW_CHECK(!strcmp(c->request_id, "req-9"));
    SW_CHECK_INT(c->n_tokens, 2);
    SW_CHECK(!memcmp(c->tokens, toks, sizeof toks));
    SW_CHECK_INT(c->text_len, 3);
    SW_CHECK(!memcmp(c->text, "ab\xc3", 3));
    SW_CHECK_INT(c->done, 0);
    SW_CHECK_INT(c->finish, SW_FINISH_NONE);
    SW_CHECK_INT(c->has_stats, 0);
    SW_CHECK_INT(c->index, 40);

    sw_msg_stats_t st = {.n_prompt = 1,
                         .n_generated = 2,
                         .n_rounds = 3,
                         .n_drafted = 4,
                         .n_accepted = 5,
                         .prompt_ms = 6,
                         .generate_ms = 7,
                         .ttft_ms = 8.5f,
                         .decode_ms = 9.5f,
                         .draft_ms = 10.5f,
                         .head_ms = 11.5f,
                         .network_ms = 12.5f,
                         .draft_ahead_ms = 13.5f,
                         .n_ahead_hits = 14,
                         .n_ahead_misses = 15,
                         .n_tree_rounds = 16,
                         .n_kv_moves = 17,
                         .n_prefix_reused = 18,
                         .overlap_ms = 19.5f,
                         .n_stages = 2,
                         .stages = {{"mid", 100, 0, 0, 0, 90}, {"tail", 200, 0, 0, 0, 150}},
                         .logits_digest = 0xdeadbeefull};
    msg = (sw_msg_t){.type = SW_MSG_TOKEN_CHUNK,
                     .chunk = {.request_id = "req-9",
                               .done = 1,
                               .finish = SW_FINISH_CANCELLED,
                               .has_stats = 1,
                               .stats = st,
                               .index = 42}};
    SW_CHECK_INT(s_trip(&msg, &m, &out), 0);
    c = &out.chunk;
    SW_CHECK_INT(c->n_tokens, 0);
    SW_CHECK(c->text == NULL && c->text_len == 0);
    SW_CHECK_INT(c->done, 1);
    SW_CHECK_INT(c->finish, SW_FINISH_CANCELLED);
    SW_CHECK_INT(c->has_stats, 1);
    const sw_msg_stats_t *s = &c->stats;
    SW_CHECK(s->n_prompt == 1 && s->n_generated == 2 && s->n_rounds == 3 && s->n_drafted == 4 &&
             s->n_accepted == 5 && s->prompt_ms == 6 && s->generate_ms == 7);
    SW_CHECK(s->ttft_ms == 8.5f && s->decode_ms == 9.5f && s->draft_ms == 10.5f &&
             s->head_ms == 11.5f && s->network_ms == 12.5f && s->draft_ahead_ms == 13.5f);
    SW_CHECK(s->n_ahead_hits == 14 && s->n_ahead_misses == 15 && s->n_tree_rounds == 16 &&
             s->n_kv_moves == 17 && s->n_prefix_reused == 18 && s->overlap_ms == 19.5f);
    SW_CHECK_INT(s->n_stages, 2);
    s_check_timing(s->stages, st.stages, 2);
    SW_CHECK(s->logits_digest == 0xdeadbeefull);
    sw_wire_msg_clear(&m);
}

/* Progress (version 8): every field through, and the bounds refused on the way out. */
static void s_test_progress(void)
{
    sw_wire_msg_t m = {0};
    sw_msg_t out;
    const sw_msg_t msg = {.type = SW_MSG_PROGRESS,
                          .progress = {.request_id = "req-7",
                                       .prompt_done = 1024,
                                       .prompt_total = 1900,
                                       .generated = 3,
                                       .next_ms = 15000,
                                       .prompt_finished = 640}};
    SW_CHECK_INT(s_trip(&msg, &m, &out), 0);
    SW_CHECK(!strcmp(out.progress.request_id, "req-7"));
    SW_CHECK_INT(out.progress.prompt_done, 1024);
    SW_CHECK_INT(out.progress.prompt_total, 1900);
    SW_CHECK_INT(out.progress.generated, 3);
    SW_CHECK_INT(out.progress.next_ms, 15000);
    SW_CHECK_INT(out.progress.prompt_finished, 640);
    SW_CHECK_INT(sw_wire_body_channel(&m.env->pb), SW_WIRE_CH_ACCESS); // head <-> client keys
    sw_wire_msg_clear(&m);
    sw_msg_t bad = msg;
    bad.progress.prompt_done = 1901; // more done than there is
    SW_CHECK_INT(s_refused(&bad), SW_WIRE_EMALFORMED);
    bad = msg;
    bad.progress.prompt_done = bad.progress.prompt_total = SW_WIRE_MAX_POS + 1;
    SW_CHECK_INT(s_refused(&bad), SW_WIRE_EMALFORMED);
    bad = msg;
    bad.progress.generated = SW_WIRE_MAX_POS + 1;
    SW_CHECK_INT(s_refused(&bad), SW_WIRE_EMALFORMED);
    bad = msg;
    bad.progress.next_ms = SW_WIRE_MAX_PROGRESS_MS + 1; // a promise of more than 10 minutes
    SW_CHECK_INT(s_refused(&bad), SW_WIRE_EMALFORMED);
    bad = msg;
    bad.progress.request_id = "no spaces";
    SW_CHECK_INT(s_refused(&bad), SW_WIRE_EMALFORMED);
    bad = msg;
    bad.progress.prompt_finished = 1025; // more through every stage than through the head
    SW_CHECK_INT(s_refused(&bad), SW_WIRE_EMALFORMED);

    const sw_msg_t ack = {.type = SW_MSG_PREFILL_ACK,
                          .prefill_ack = {.session_id = 77, .round = 3, .done = 448}};
    SW_CHECK_INT(s_trip(&ack, &m, &out), 0);
    SW_CHECK(out.prefill_ack.session_id == 77 && out.prefill_ack.round == 3);
    SW_CHECK_INT(out.prefill_ack.done, 448);
    SW_CHECK_INT(sw_wire_body_channel(&m.env->pb), SW_WIRE_CH_CLUSTER); // stage -> head
    sw_wire_msg_clear(&m);
    sw_msg_t bad_ack = ack;
    bad_ack.prefill_ack.done = 0;
    SW_CHECK_INT(s_refused(&bad_ack), SW_WIRE_EMALFORMED);
}

static void s_test_error_cancel_resume(void)
{
    sw_wire_msg_t m = {0};
    sw_msg_t out;
    sw_msg_t msg = {.type = SW_MSG_ERROR,
                    .error = {.code = SW_ERROR_BUSY,
                              .message = "the head is busy",
                              .session_id = 3,
                              .request_id = "req-4",
                              .dest = "head-2",
                              .queue_position = 65536}};
    SW_CHECK_INT(s_trip(&msg, &m, &out), 0);
    const sw_msg_error_t *e = &out.error;
    SW_CHECK_INT(e->code, SW_ERROR_BUSY);
    SW_CHECK(!strcmp(e->message, "the head is busy"));
    SW_CHECK(e->session_id == 3);
    SW_CHECK(!strcmp(e->request_id, "req-4") && !strcmp(e->dest, "head-2"));
    SW_CHECK_INT(e->queue_position, 65536);
    /* the relay's kind: no context; strings never NULL */
    msg.error = (sw_msg_error_t){.code = SW_ERROR_NOT_ANNOUNCED};
    SW_CHECK_INT(s_trip_frame(&msg, &m, &out), 0);
    SW_CHECK_INT(out.error.code, SW_ERROR_NOT_ANNOUNCED);
    SW_CHECK(out.error.message && out.error.request_id && out.error.dest && !out.error.dest[0]);

    msg = (sw_msg_t){.type = SW_MSG_CANCEL, .cancel = {.request_id = "req-5", .reason = "bye"}};
    SW_CHECK_INT(s_trip(&msg, &m, &out), 0);
    SW_CHECK(!strcmp(out.cancel.request_id, "req-5") && !strcmp(out.cancel.reason, "bye"));

    msg = (sw_msg_t){.type = SW_MSG_RESUME, .resume = {.request_id = "req-6", .from_index = 99}};
    SW_CHECK_INT(s_trip(&msg, &m, &out), 0);
    SW_CHECK(!strcmp(out.resume.request_id, "req-6"));
    SW_CHECK_INT(out.resume.from_index, 99);
    /* decoding as another type is refused */
    SW_CHECK_INT(sw_codec_decode(&m, SW_MSG_CANCEL, &out, NULL, 0), SW_WIRE_EMALFORMED);
    SW_CHECK_INT(sw_codec_decode(&m, SW_MSG_NONE, &out, NULL, 0), 0);
    SW_CHECK_INT(out.type, SW_MSG_RESUME);
    sw_wire_msg_clear(&m);
    SW_CHECK_INT(sw_codec_decode(&m, SW_MSG_NONE, &out, NULL, 0), SW_WIRE_EMALFORMED);
}

/* ---- refusals ------------------------------------------------------------------------------- */

/* On the way out: what the protobuf cannot carry (the codec) and what the
 * protocol refuses (wire_check.c, through the codec). Nothing is sent. */
static void s_test_refused_out(void)
{
    static const uint32_t toks[2] = {1, 2};
    sw_msg_t ok = {.type = SW_MSG_FORWARD,
                   .forward = {.session_id = 1,
                               .n_rows = 2,
                               .n_tokens = 2,
                               .tokens = toks,
                               .n_route = 2,
                               .route = {"a", "b"},
                               .hop = 1,
                               .reply_to = "a"}};
    SW_CHECK_INT(s_refused(&ok), 0);
    sw_msg_t bad = ok;
    bad.forward.has_sampling = 1;
    bad.forward.sampling = sw_sampling_default();
    SW_CHECK_INT(s_refused(&bad), 0);
    bad.forward.sampling.top_k = -1; /* would wrap to 4 billion */
    SW_CHECK_INT(s_refused(&bad), SW_WIRE_EMALFORMED);
    bad.forward.sampling = sw_sampling_default();
    bad.forward.sampling.rep_last_n = -5;
    SW_CHECK_INT(s_refused(&bad), SW_WIRE_EMALFORMED);
    bad.forward.sampling = sw_sampling_default();
    bad.forward.sampling.temp = 101.0f;
    SW_CHECK_INT(s_refused(&bad), SW_WIRE_EMALFORMED);
    bad.forward.sampling.temp = NAN;
    SW_CHECK_INT(s_refused(&bad), SW_WIRE_EMALFORMED);
    bad = ok;
    bad.forward.n_route = SW_WIRE_MAX_ROUTE + 1; /* more than the plain array holds */
    SW_CHECK_INT(s_refused(&bad), SW_WIRE_EMALFORMED);
    bad = ok;
    bad.forward.n_timing = SW_WIRE_MAX_ROUTE + 1;
    SW_CHECK_INT(s_refused(&bad), SW_WIRE_EMALFORMED);
    bad = ok;
    bad.forward.n_draft = SW_WIRE_MAX_DRAFT + 1;
    bad.forward.draft_tokens = toks;
    SW_CHECK_INT(s_refused(&bad), SW_WIRE_EMALFORMED);
    bad = ok;
    bad.forward.n_dists = SW_WIRE_MAX_DRAFT + 1;
    SW_CHECK_INT(s_refused(&bad), SW_WIRE_EMALFORMED);
    bad = ok;
    bad.forward.tokens = NULL; /* a count without its array */
    SW_CHECK_INT(s_refused(&bad), SW_WIRE_EMALFORMED);
    bad = ok;
    bad.forward.n_kv_path = 1;
    SW_CHECK_INT(s_refused(&bad), SW_WIRE_EMALFORMED);
    /* a prefix: in whole blocks, with its tokens, at the start of a prefill */
    static uint32_t prefix[SW_PREFIX_BLOCK + 1];
    sw_msg_t pre = ok;
    pre.forward.prefix_len = SW_PREFIX_BLOCK;
    pre.forward.prefix_tokens = prefix;
    pre.forward.start_pos = pre.forward.kv_keep = SW_PREFIX_BLOCK;
    SW_CHECK_INT(s_refused(&pre), 0);
    bad = pre;
    bad.forward.prefix_tokens = NULL; /* a count without its array */
    SW_CHECK_INT(s_refused(&bad), SW_WIRE_EMALFORMED);
    bad = pre;
    bad.forward.prefix_len = SW_PREFIX_BLOCK + 1; /* not a whole block */
    bad.forward.start_pos = bad.forward.kv_keep = SW_PREFIX_BLOCK + 1;
    SW_CHECK_INT(s_refused(&bad), SW_WIRE_EMALFORMED);
    bad = pre;
    bad.forward.kv_keep = 0; /* rows that do not start after the prefix */
    SW_CHECK_INT(s_refused(&bad), SW_WIRE_EMALFORMED);
    bad = pre;
    bad.forward.n_draft = 1; /* a prefix starts a prefill, not a drafting round */
    bad.forward.draft_tokens = toks;
    SW_CHECK_INT(s_refused(&bad), SW_WIRE_EMALFORMED);
    prefix[0] = SW_WIRE_MAX_TOKEN; /* not a token id */
    SW_CHECK_INT(s_refused(&pre), SW_WIRE_EMALFORMED);
    prefix[0] = 0;
    bad = ok;
    bad.forward.timing[0] = (sw_msg_timing_t){"a", 1, 1, SW_WIRE_MAX_BATCH_ROWS + 1, 1, 0};
    bad.forward.n_timing = 1;
    SW_CHECK_INT(s_refused(&bad), SW_WIRE_EMALFORMED);
    bad = ok;
    bad.forward.dtype = (sw_dtype_t)7;
    SW_CHECK_INT(s_refused(&bad), SW_WIRE_EMALFORMED);
    bad = ok;
    bad.forward.n_rows = 0;
    bad.forward.n_tokens = 0;
    SW_CHECK_INT(s_refused(&bad), SW_WIRE_EMALFORMED);
    bad = ok;
    bad.forward.session_id = 0;
    SW_CHECK_INT(s_refused(&bad), SW_WIRE_EMALFORMED);
    bad = ok;
    bad.forward.hop = 2;
    SW_CHECK_INT(s_refused(&bad), SW_WIRE_EMALFORMED);
    bad = ok;
    bad.forward.route[1] = "no spaces";
    SW_CHECK_INT(s_refused(&bad), SW_WIRE_EMALFORMED);
    bad = ok;
    bad.forward.hidden = 8; /* a width without a tensor */
    SW_CHECK_INT(s_refused(&bad), SW_WIRE_EMALFORMED);
    uint16_t tensor[2 * 8] = {0};
    bad = ok;
    bad.forward.dtype = SW_DTYPE_F16;
    bad.forward.hidden = 8;
    bad.forward.payload = tensor;
    bad.forward.payload_len = sizeof tensor;
    SW_CHECK_INT(s_refused(&bad), 0);
    bad.forward.payload_len = sizeof tensor - 2; /* not [n_rows, hidden] of f16 */
    SW_CHECK_INT(s_refused(&bad), SW_WIRE_EMALFORMED);
    bad.forward.payload_len = 0;
    SW_CHECK_INT(s_refused(&bad), SW_WIRE_EMALFORMED);

    sw_msg_t a = {.type = SW_MSG_ANNOUNCE, .announce = {.name = "c", .role = SW_ROLE_CLIENT}};
    SW_CHECK_INT(s_refused(&a), 0);
    a.announce.role = (sw_role_t)9;
    SW_CHECK_INT(s_refused(&a), SW_WIRE_EMALFORMED);
    a.announce.role = SW_ROLE_NONE;
    SW_CHECK_INT(s_refused(&a), SW_WIRE_EMALFORMED);
    a.announce.role = SW_ROLE_CLIENT;
    a.announce.name = NULL; /* sent as "", which is no name */
    SW_CHECK_INT(s_refused(&a), SW_WIRE_EMALFORMED);

    sw_msg_t e = {.type = SW_MSG_ERROR, .error = {.code = SW_ERROR_BUSY}};
    SW_CHECK_INT(s_refused(&e), 0);
    e.error.code = (sw_error_code_t)16;
    SW_CHECK_INT(s_refused(&e), SW_WIRE_EMALFORMED);
    e.error.code = SW_ERROR_PLAN_REFUSED;
    SW_CHECK_INT(s_refused(&e), 0);
    e.error.code = SW_ERROR_HEAD_LEAVING;
    SW_CHECK_INT(s_refused(&e), 0);
    e.error.code = (sw_error_code_t)22;
    SW_CHECK_INT(s_refused(&e), SW_WIRE_EMALFORMED);
    e.error.code = SW_ERROR_BUSY;
    e.error.queue_position = SW_WIRE_MAX_QUEUE + 1;
    SW_CHECK_INT(s_refused(&e), SW_WIRE_EMALFORMED);

    sw_msg_t c = {.type = SW_MSG_TOKEN_CHUNK,
                  .chunk = {.request_id = "r", .done = 1, .finish = SW_FINISH_EOS}};
    SW_CHECK_INT(s_refused(&c), 0);
    c.chunk.finish = (sw_finish_t)7;
    SW_CHECK_INT(s_refused(&c), SW_WIRE_EMALFORMED);
    c.chunk.finish = SW_FINISH_NONE; /* done without a finish */
    SW_CHECK_INT(s_refused(&c), SW_WIRE_EMALFORMED);
    c.chunk = (sw_msg_chunk_t){.request_id = "r", .has_stats = 1};
    c.chunk.stats.n_stages = SW_WIRE_MAX_ROUTE + 1;
    SW_CHECK_INT(s_refused(&c), SW_WIRE_EMALFORMED);
    c.chunk = (sw_msg_chunk_t){.request_id = "r", .text_len = 3}; /* text missing */
    SW_CHECK_INT(s_refused(&c), SW_WIRE_EMALFORMED);

    sw_msg_t g = {.type = SW_MSG_GENERATE,
                  .generate = {.request_id = "r", .prompt = "x", .n_predict = 1}};
    SW_CHECK_INT(s_refused(&g), 0);
    g.generate.n_stop = SW_WIRE_MAX_STOP + 1;
    SW_CHECK_INT(s_refused(&g), SW_WIRE_EMALFORMED);
    g.generate.n_stop = 0;
    g.generate.has_draft = 1;
    g.generate.draft.mode = (sw_draft_mode_t)5;
    SW_CHECK_INT(s_refused(&g), SW_WIRE_EMALFORMED);
    g.generate.draft.mode = SW_DRAFT_AUTO;
    g.generate.draft.ahead = (sw_draft_ahead_t)3;
    SW_CHECK_INT(s_refused(&g), SW_WIRE_EMALFORMED);
    g.generate.draft.ahead = SW_AHEAD_OFF;
    g.generate.draft.n_draft = SW_WIRE_MAX_DRAFT + 1;
    SW_CHECK_INT(s_refused(&g), SW_WIRE_EMALFORMED);
    g.generate.draft.n_draft = 0;
    g.generate.n_messages = 1; /* a count without its turns */
    SW_CHECK_INT(s_refused(&g), SW_WIRE_EMALFORMED);
    g.generate.n_messages = SW_WIRE_MAX_MESSAGES + 1;
    SW_CHECK_INT(s_refused(&g), SW_WIRE_EMALFORMED);
    g.generate.n_messages = 0;
    g.generate.tenant = "no spaces"; /* a tenant is a name: 0..63 of [A-Za-z0-9._-] */
    SW_CHECK_INT(s_refused(&g), SW_WIRE_EMALFORMED);
    g.generate.tenant = "0123456789012345678901234567890123456789012345678901234567890123";
    SW_CHECK_INT(s_refused(&g), SW_WIRE_EMALFORMED);
    g.generate.tenant = "012345678901234567890123456789012345678901234567890123456789012";
    SW_CHECK_INT(s_refused(&g), 0);
    g.generate.tenant = NULL;
    g.generate.n_predict = 0;
    SW_CHECK_INT(s_refused(&g), SW_WIRE_EMALFORMED);

    sw_msg_t r = {.type = SW_MSG_RESUME, .resume = {.request_id = "r", .from_index = 1u << 24}};
    SW_CHECK_INT(s_refused(&r), 0);
    r.resume.from_index = (1u << 24) + 1;
    SW_CHECK_INT(s_refused(&r), SW_WIRE_EMALFORMED);

    sw_msg_t v = {.type = SW_MSG_VERDICT,
                  .verdict = {.session_id = 1, .n_tokens = 1, .tokens = toks, .next_token = 1}};
    SW_CHECK_INT(s_refused(&v), 0);
    v.verdict.next_token = 2;
    SW_CHECK_INT(s_refused(&v), SW_WIRE_EMALFORMED);
    v.verdict.next_token = 1;
    v.verdict.n_path = 1; /* path missing */
    SW_CHECK_INT(s_refused(&v), SW_WIRE_EMALFORMED);
    v.verdict.n_path = 0;

    sw_msg_t t = {.type = SW_MSG_PEER_TABLE, .table = {.n_peers = SW_WIRE_MAX_PEERS + 1}};
    SW_CHECK_INT(s_refused(&t), SW_WIRE_EMALFORMED);
    t.table.n_peers = 1; /* neither peers nor a decoded table behind it */
    SW_CHECK_INT(s_refused(&t), SW_WIRE_EMALFORMED);

    /* sw_codec_send sends nothing when it refuses */
    char err[SW_WIRE_ERR_LEN] = "";
    SW_CHECK_INT(sw_codec_send(s_a, "peer-a", &bad, 0, NULL, err, sizeof err), SW_WIRE_EMALFORMED);
    SW_CHECK(err[0] != '\0');
    sw_wire_msg_t m = {0};
    SW_CHECK_INT(sw_wire_recv(s_b, ZMQ_DONTWAIT, &m, NULL, 0), SW_WIRE_ESOCKET);
}

/* Hand-made Envelopes that wire_check.c would refuse, handed to the decoder
 * directly: counts beyond the plain arrays and values beyond the plain
 * enums are refused, never copied. */
static int s_decode_raw(Shardwire__Envelope *env, sw_msg_t *out)
{
    sw_wire_msg_t m = {0};
    m.env = sw_envelope_of(env);
    char err[SW_WIRE_ERR_LEN] = "";
    int rc = sw_codec_decode(&m, SW_MSG_NONE, out, err, sizeof err);
    if (rc)
        SW_CHECK(err[0] != '\0');
    return rc; /* m is not cleared: env is the caller's */
}

static void s_test_refused_in(void)
{
    sw_msg_t out;
    char *route[SW_WIRE_MAX_ROUTE + 1];
    for (int i = 0; i <= SW_WIRE_MAX_ROUTE; i++)
        route[i] = "s";
    uint32_t toks[1] = {1};
    Shardwire__Forward f = SHARDWIRE__FORWARD__INIT;
    f.session_id = 1;
    f.n_rows = 1;
    f.n_tokens = 1;
    f.tokens = toks;
    f.n_route = 2;
    f.route = route;
    f.hop = 1;
    f.reply_to = "s";
    Shardwire__Envelope env = SHARDWIRE__ENVELOPE__INIT;
    env.body_case = SHARDWIRE__ENVELOPE__BODY_FORWARD;
    env.forward = &f;
    SW_CHECK_INT(s_decode_raw(&env, &out), 0);
    f.n_route = SW_WIRE_MAX_ROUTE + 1;
    SW_CHECK_INT(s_decode_raw(&env, &out), SW_WIRE_EMALFORMED);
    f.n_route = 2;
    f.dtype = (Shardwire__DType)3;
    SW_CHECK_INT(s_decode_raw(&env, &out), SW_WIRE_EMALFORMED);
    f.dtype = SHARDWIRE__DTYPE__DTYPE_F32;
    f.n_draft_tokens = SW_WIRE_MAX_DRAFT + 1;
    SW_CHECK_INT(s_decode_raw(&env, &out), SW_WIRE_EMALFORMED);
    f.n_draft_tokens = 0;
    f.n_draft_dists = 1; /* dists for no drafts */
    SW_CHECK_INT(s_decode_raw(&env, &out), SW_WIRE_EMALFORMED);
    f.n_draft_dists = 0;
    Shardwire__SamplingParams sp = SHARDWIRE__SAMPLING_PARAMS__INIT;
    sp.top_k = 0x80000000u; /* does not fit an int */
    f.sampling = &sp;
    SW_CHECK_INT(s_decode_raw(&env, &out), SW_WIRE_EMALFORMED);
    f.sampling = NULL;
    Shardwire__StageTiming st = SHARDWIRE__STAGE_TIMING__INIT, *stp[SW_WIRE_MAX_ROUTE + 1];
    for (int i = 0; i <= SW_WIRE_MAX_ROUTE; i++)
        stp[i] = &st;
    f.n_timing = SW_WIRE_MAX_ROUTE + 1;
    f.timing = stp;
    SW_CHECK_INT(s_decode_raw(&env, &out), SW_WIRE_EMALFORMED);
    f.n_timing = 1;
    stp[0] = NULL;
    SW_CHECK_INT(s_decode_raw(&env, &out), SW_WIRE_EMALFORMED);
    env.forward = NULL;
    SW_CHECK_INT(s_decode_raw(&env, &out), SW_WIRE_EMALFORMED);

    Shardwire__Error e = SHARDWIRE__ERROR__INIT;
    e.code = (Shardwire__ErrorCode)16;
    env.body_case = SHARDWIRE__ENVELOPE__BODY_ERROR;
    env.error = &e;
    SW_CHECK_INT(s_decode_raw(&env, &out), SW_WIRE_EMALFORMED);
    e.code = SHARDWIRE__ERROR_CODE__ERR_BUSY;
    e.message = NULL;
    e.dest = NULL;
    SW_CHECK_INT(s_decode_raw(&env, &out), 0);
    SW_CHECK(out.error.message && out.error.dest && !out.error.dest[0]); /* never NULL */

    Shardwire__PeerAnnounce an = SHARDWIRE__PEER_ANNOUNCE__INIT;
    an.role = (Shardwire__Role)6;
    env.body_case = SHARDWIRE__ENVELOPE__BODY_ANNOUNCE;
    env.announce = &an;
    SW_CHECK_INT(s_decode_raw(&env, &out), SW_WIRE_EMALFORMED);

    Shardwire__TokenChunk c = SHARDWIRE__TOKEN_CHUNK__INIT;
    c.finish = (Shardwire__FinishReason)7;
    env.body_case = SHARDWIRE__ENVELOPE__BODY_TOKEN_CHUNK;
    env.token_chunk = &c;
    SW_CHECK_INT(s_decode_raw(&env, &out), SW_WIRE_EMALFORMED);
    c.finish = SHARDWIRE__FINISH_REASON__FINISH_NONE;
    c.n_tokens = SW_WIRE_MAX_CHUNK_TOKENS + 1;
    SW_CHECK_INT(s_decode_raw(&env, &out), SW_WIRE_EMALFORMED);

    char *stop[SW_WIRE_MAX_STOP + 1];
    for (int i = 0; i <= SW_WIRE_MAX_STOP; i++)
        stop[i] = "x";
    Shardwire__GenerateRequest g = SHARDWIRE__GENERATE_REQUEST__INIT;
    g.n_stop = SW_WIRE_MAX_STOP + 1;
    g.stop = stop;
    env.body_case = SHARDWIRE__ENVELOPE__BODY_GENERATE;
    env.generate = &g;
    SW_CHECK_INT(s_decode_raw(&env, &out), SW_WIRE_EMALFORMED);
    g.n_stop = 0;
    Shardwire__DraftParams dp = SHARDWIRE__DRAFT_PARAMS__INIT;
    dp.mode = (Shardwire__DraftMode)5;
    g.draft = &dp;
    SW_CHECK_INT(s_decode_raw(&env, &out), SW_WIRE_EMALFORMED);

    Shardwire__PeerTable t = SHARDWIRE__PEER_TABLE__INIT;
    Shardwire__PeerInfo pi = SHARDWIRE__PEER_INFO__INIT, *pip[1] = {&pi};
    t.n_peers = 1;
    t.peers = pip; /* an entry without its announce */
    env.body_case = SHARDWIRE__ENVELOPE__BODY_PEER_TABLE;
    env.peer_table = &t;
    SW_CHECK_INT(s_decode_raw(&env, &out), SW_WIRE_EMALFORMED);

    env.body_case = SHARDWIRE__ENVELOPE__BODY__NOT_SET;
    SW_CHECK_INT(s_decode_raw(&env, &out), SW_WIRE_EMALFORMED);
}

/* ---- sealing stays below the codec --------------------------------------------------------- */

static void s_test_sealed(void)
{
    uint8_t key[1][SW_CLUSTER_KEY_BYTES];
    memset(key, 7, sizeof key);
    sw_seal_t *seal = sw_seal_new(key, 1, SW_SEAL_CLUSTER);
    SW_CHECK(seal != NULL);
    sw_wire_crypto_t crypto = {.seal = seal, .self = "head"};
    static const uint32_t toks[1] = {1};
    float tensor[4] = {1, 2, 3, 4};
    sw_msg_t msg = {.type = SW_MSG_FORWARD,
                    .forward = {.session_id = 1,
                                .n_rows = 1,
                                .n_tokens = 1,
                                .tokens = toks,
                                .dtype = SW_DTYPE_F32,
                                .hidden = 4,
                                .n_route = 2,
                                .route = {"head", "tail"},
                                .hop = 1,
                                .reply_to = "head",
                                .payload = tensor,
                                .payload_len = sizeof tensor}};
    char err[SW_WIRE_ERR_LEN] = "";
    SW_CHECK_INT(sw_codec_send(s_a, "tail", &msg, 0, &crypto, err, sizeof err), 0);
    zmq_msg_t fr[3];
    for (int i = 0; i < 3; i++) {
        zmq_msg_init(&fr[i]);
        SW_CHECK(zmq_msg_recv(&fr[i], s_b, 0) >= 0);
    }
    SW_CHECK_INT(zmq_msg_more(&fr[2]), 0);
    SW_CHECK(zmq_msg_size(&fr[0]) == 4 && !memcmp(zmq_msg_data(&fr[0]), "tail", 4));
    SW_CHECK(sw_seal_is_sealed(zmq_msg_data(&fr[1]), zmq_msg_size(&fr[1])));
    SW_CHECK_INT(zmq_msg_size(&fr[2]), sizeof tensor + SW_SEAL_PAYLOAD_OVERHEAD);
    for (int i = 0; i < 3; i++)
        zmq_msg_close(&fr[i]);
    /* an access-channel type with no access key: refused, nothing sent */
    sw_msg_t resume = {.type = SW_MSG_RESUME, .resume = {.request_id = "r"}};
    SW_CHECK_INT(sw_codec_send(s_a, "tail", &resume, 0, &crypto, err, sizeof err), SW_WIRE_ESEAL);
    sw_wire_msg_t m = {0};
    SW_CHECK_INT(sw_wire_recv(s_b, ZMQ_DONTWAIT, &m, NULL, 0), SW_WIRE_ESOCKET);
    sw_seal_destroy(&seal);
}

/* ---- keeping an announce ------------------------------------------------------------------- */

/* Direct paths (version 10): the listener's address and key, the live links, the relay's
 * round trip: round trips, the copy, and every refusal (issue 39). */
static void s_test_direct_fields(void)
{
    sw_wire_msg_t m = {0};
    sw_msg_t out;
    const char *key = "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7"; /* zmq_curve(7)'s server key */
    sw_msg_announce_t a = {.name = "tail",
                           .role = SW_ROLE_TAIL,
                           .model_fingerprint = FP,
                           .layer_begin = 15,
                           .layer_end = 30,
                           .n_layers = 30,
                           .hidden = 576,
                           .direct = "tcp://[2001:db8::1]:7000",
                           .direct_key = key,
                           .n_direct_hops = 2,
                           .direct_hops = {{"head", 1234}, {"mid.2", 0}},
                           .relay_rtt_us = 40000};
    sw_msg_t msg = {.type = SW_MSG_ANNOUNCE, .announce = a};
    SW_CHECK_INT(s_trip(&msg, &m, &out), 0);
    s_check_announce(&out.announce, &a);
    sw_announce_copy_t *c = malloc(sizeof *c);
    SW_CHECK_INT(sw_codec_announce_copy(c, &a), 0);
    SW_CHECK(c->a.direct == c->direct && !strcmp(c->direct, a.direct));
    SW_CHECK(c->a.direct_hops[1].peer == c->hop_peer[1] && !strcmp(c->hop_peer[1], "mid.2"));
    free(c);
    /* a client sends its relay's round trip, nothing else of these */
    msg.announce =
        (sw_msg_announce_t){.name = "client-x", .role = SW_ROLE_CLIENT, .relay_rtt_us = 5};
    SW_CHECK_INT(s_refused(&msg), 0);
    const struct {
        const char *direct, *key;
        uint32_t n_hops, rtt;
        const char *hop;
        int client;
    } bad[] = {
        {"udp://h:1", "", 0, 0, "x", 0},
        {"tcp://h", "", 0, 0, "x", 0},
        {"tcp://h:0", "", 0, 0, "x", 0},
        {"tcp://h:65536", "", 0, 0, "x", 0},
        {"tcp://a b:1", "", 0, 0, "x", 0},
        {"tcp://:1", "", 0, 0, "x", 0},
        {"tcp://[::1:1", "", 0, 0, "x", 0},
        {"tcp://h:1", "short", 0, 0, "x", 0},
        {"", key, 0, 0, "x", 0},
        {"tcp://h:1", "", 1, 0, "bad name", 0},
        {"tcp://h:1", "", 1, 60000001, "x", 0},
        {"tcp://h:1", "", 0, 0, "x", 1},
        {"tcp://h:1", "", SW_DIRECT_MAX_LINKS + 1, 0, "x", 0},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        sw_msg_t b = {.type = SW_MSG_ANNOUNCE, .announce = a};
        b.announce.direct = bad[i].direct;
        b.announce.direct_key = bad[i].key;
        b.announce.n_direct_hops = bad[i].n_hops;
        for (uint32_t k = 0; k < SW_DIRECT_MAX_LINKS; k++)
            b.announce.direct_hops[k] = (sw_msg_direct_hop_t){bad[i].hop, bad[i].rtt};
        if (bad[i].client)
            b.announce =
                (sw_msg_announce_t){.name = "c", .role = SW_ROLE_CLIENT, .direct = bad[i].direct};
        if (s_refused(&b) != SW_WIRE_EMALFORMED)
            fprintf(stderr, "direct case %zu was not refused\n", i);
        SW_CHECK_INT(s_refused(&b), SW_WIRE_EMALFORMED);
    }
    char longep[SW_WIRE_DIRECT_MAX + 8];
    memset(longep, 'a', sizeof longep - 1);
    longep[sizeof longep - 1] = 0;
    memcpy(longep, "tcp://", 6);
    memcpy(longep + sizeof longep - 4, ":12", 3);
    msg.announce = a;
    msg.announce.direct = longep;
    SW_CHECK_INT(s_refused(&msg), SW_WIRE_EMALFORMED);
    SW_CHECK(sw_wire_direct_ok("tcp://node-1.example.org:65535"));
    SW_CHECK(sw_wire_direct_ok("tcp://10.0.0.1:1"));
    SW_CHECK(!sw_wire_direct_ok("tcp://*:7000"));
    sw_wire_msg_clear(&m);
}

static void s_test_announce_copy(void)
{
    char name[] = "node-1";
    const sw_msg_announce_t a = {.name = name,
                                 .role = SW_ROLE_TAIL,
                                 .model_fingerprint = FP,
                                 .layer_begin = 3,
                                 .layer_end = 6,
                                 .n_layers = 6,
                                 .backend = "cuda:0",
                                 .max_sessions = 2,
                                 .hidden = 64};
    sw_announce_copy_t *c = malloc(sizeof *c);
    SW_CHECK_INT(sw_codec_announce_copy(c, &a), 0);
    name[0] = 'X'; /* the copy keeps its own strings */
    SW_CHECK(!strcmp(c->a.name, "node-1") && c->a.name == c->name);
    SW_CHECK(c->a.model_fingerprint == c->model_fingerprint && !strcmp(c->a.model_fingerprint, FP));
    SW_CHECK(c->a.backend == c->backend && !strcmp(c->backend, "cuda:0"));
    SW_CHECK(c->a.model_name == c->model_name && !c->model_name[0]);
    SW_CHECK(c->a.role == SW_ROLE_TAIL && c->a.layer_begin == 3 && c->a.hidden == 64);
    char longname[SW_WIRE_NAME_MAX + 2];
    memset(longname, 'a', sizeof longname - 1);
    longname[sizeof longname - 1] = 0;
    sw_msg_announce_t b = a;
    b.name = longname;
    SW_CHECK_INT(sw_codec_announce_copy(c, &b), -1);
    free(c);
}

/* ---- the hidden-state payload -------------------------------------------------------------- */

static void s_test_hidden(void)
{
    /* every f16 and bf16 value converts to f32 as the engine does */
    enum { N = 65536 };
    uint16_t *h = malloc(N * sizeof *h);
    float *f = malloc(N * sizeof *f);
    for (int i = 0; i < N; i++)
        h[i] = (uint16_t)i;
    sw_codec_hidden_unpack(SW_DTYPE_F16, h, f, N);
    int bad = 0;
    for (int i = 0; i < N; i++) {
        float want = sw_f16_to_f32((sw_f16)i);
        bad += memcmp(&f[i], &want, sizeof want) != 0;
    }
    SW_CHECK_INT(bad, 0);
    sw_codec_hidden_unpack(SW_DTYPE_BF16, h, f, N);
    bad = 0;
    for (int i = 0; i < N; i++) {
        float want = sw_bf16_to_f32((sw_bf16)i);
        bad += memcmp(&f[i], &want, sizeof want) != 0;
    }
    SW_CHECK_INT(bad, 0);
    /* a spread of f32 bit patterns (every sign, exponent, rounding case)
     * converts to f16 and bf16 as the engine does */
    enum { M = 1 << 20 };
    float *src = malloc(M * sizeof *src);
    uint16_t *out = malloc(M * sizeof *out);
    for (uint32_t i = 0; i < M; i++) {
        uint32_t u = i * 4099u + (i & 1 ? 0x80000000u : 0) + (i % 7 == 0 ? 0x1000u : 0);
        if (i < 64) /* the edges: zeros, infinities, NaNs, the f16 range limits */
            u = (uint32_t[]){0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u,
                             0x7fc00000u, 0x7f800001u, 0xffc00001u, 0x477ff000u,
                             0x477fefffu, 0x38800000u, 0x387fffffu, 0x33800000u,
                             0x337fffffu, 0x00000001u, 0x3f800000u, 0x3f801000u}[i % 16] +
                (uint32_t)(i / 16);
        memcpy(&src[i], &u, sizeof u);
    }
    SW_CHECK(sw_codec_hidden_pack(SW_DTYPE_F16, src, out, M) == out);
    bad = 0;
    for (uint32_t i = 0; i < M; i++)
        bad += out[i] != sw_f32_to_f16(src[i]);
    SW_CHECK_INT(bad, 0);
    SW_CHECK(sw_codec_hidden_pack(SW_DTYPE_BF16, src, out, M) == out);
    bad = 0;
    for (uint32_t i = 0; i < M; i++)
        bad += out[i] != sw_f32_to_bf16(src[i]);
    SW_CHECK_INT(bad, 0);
    /* f32 travels as computed: no copy, and back exactly */
    SW_CHECK(sw_codec_hidden_pack(SW_DTYPE_F32, src, out, M) == src);
    float back[16];
    sw_codec_hidden_unpack(SW_DTYPE_F32, src, back, 16);
    SW_CHECK(!memcmp(back, src, sizeof back));
    free(h);
    free(f);
    free(src);
    free(out);
}

int main(void)
{
    s_ctx = zmq_ctx_new();
    s_a = zmq_socket(s_ctx, ZMQ_PAIR);
    s_b = zmq_socket(s_ctx, ZMQ_PAIR);
    SW_CHECK_INT(zmq_bind(s_b, "inproc://codec-test"), 0);
    SW_CHECK_INT(zmq_connect(s_a, "inproc://codec-test"), 0);
    s_test_tables();
    s_test_announce_ack_status();
    s_test_peer_table();
    s_test_sessions();
    s_test_forward();
    s_test_verdict();
    s_test_generate();
    s_test_chunk();
    s_test_error_cancel_resume();
    s_test_progress();
    s_test_refused_out();
    s_test_refused_in();
    s_test_sealed();
    s_test_direct_fields();
    s_test_announce_copy();
    s_test_hidden();
    zmq_close(s_a);
    zmq_close(s_b);
    zmq_ctx_term(s_ctx);
    return sw_test_done();
}
