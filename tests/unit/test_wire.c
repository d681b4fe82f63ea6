/*
 * test_wire.c - the wire layer: every message type survives encode/decode
 * with its fields intact; malformed headers, payloads and multipart shapes
 * are refused with SW_WIRE_EMALFORMED / SW_WIRE_EVERSION; framing over a real
 * ZeroMQ socket pair keeps the payload bytes and drains bad messages whole.
 *
 * It also keeps the wire fuzzer's seed corpus (tests/fuzz/corpus/wire/) honest:
 * every committed seed must decode, and together they must hold one message
 * of every Envelope type. With SW_WIRE_SEED_DIR set, every message this test
 * round-trips is written there as a seed (fuzz_wire's input layout) - how the
 * committed corpus was made:
 *     SW_WIRE_SEED_DIR=tests/fuzz/corpus/wire build/bin/test_wire
 */
#include "codec_pb.h"
#include "sw_test.h"
#include "wire.h"

#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *FP = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

/* fuzz_wire's input: byte 0 bit 0 = a payload follows, bytes 1..4 its length
 * (little endian), then the header frame. Named after the body type. */
static void s_write_seed(const char *dir, const Shardwire__Envelope *env, int has_payload,
                         size_t payload_len, const zmq_msg_t *frame)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s%s.bin", dir, sw_wire_body_name(env),
             has_payload ? "_payload" : "");
    FILE *f = fopen(path, "wb");
    SW_CHECK(f != NULL);
    if (!f)
        return;
    uint8_t pre[5] = {(uint8_t)(has_payload ? 1 : 0), (uint8_t)payload_len,
                      (uint8_t)(payload_len >> 8), (uint8_t)(payload_len >> 16),
                      (uint8_t)(payload_len >> 24)};
    SW_CHECK(fwrite(pre, 1, 5, f) == 5);
    size_t n = zmq_msg_size((zmq_msg_t *)frame);
    SW_CHECK(fwrite(zmq_msg_data((zmq_msg_t *)frame), 1, n, f) == n);
    fclose(f);
}

/* Encodes env and decodes it again; returns the decode rc. */
static int s_roundtrip(Shardwire__Envelope *env, int has_payload, size_t payload_len,
                       Shardwire__Envelope **out)
{
    zmq_msg_t frame;
    char err[SW_WIRE_ERR_LEN];
    *out = NULL;
    int rc = sw_wire_encode(env, has_payload, payload_len, &frame, err, sizeof err);
    if (rc)
        return rc;
    const char *seed_dir = getenv("SW_WIRE_SEED_DIR");
    if (seed_dir && seed_dir[0])
        s_write_seed(seed_dir, env, has_payload, payload_len, &frame);
    rc = sw_wire_decode(zmq_msg_data(&frame), zmq_msg_size(&frame), has_payload, payload_len, out,
                        err, sizeof err);
    zmq_msg_close(&frame);
    return rc;
}

/* Validates env as if it came off the wire (version set here). */
static int s_check(Shardwire__Envelope *env, int has_payload, size_t payload_len)
{
    char err[SW_WIRE_ERR_LEN] = "";
    env->version = SW_WIRE_VERSION;
    int rc = sw_wire_validate(env, has_payload, payload_len, err, sizeof err);
    if (rc)
        SW_CHECK(err[0] != '\0'); /* every refusal says why */
    return rc;
}

/* A valid drafting Forward: 1 + 3 rows, f16 tensor of hidden 8, 3 stages. */
struct fwd_fixture {
    Shardwire__Forward f;
    Shardwire__SamplingParams s;
    Shardwire__DraftDist d[3];
    Shardwire__DraftDist *dp[3];
    Shardwire__StageTiming t;
    Shardwire__StageTiming *tp[1];
    uint32_t tokens[4];
    uint32_t drafts[3];
    float probs[3];
    uint32_t dist_tok[3][2];
    float dist_p[3][2];
    char *route[3];
    Shardwire__Envelope env;
};

static void s_fwd_init(struct fwd_fixture *x)
{
    static char r0[] = "head", r1[] = "mid-1", r2[] = "tail.gpu_0", reply[] = "head",
                tname[] = "head";
    Shardwire__Forward f = SHARDWIRE__FORWARD__INIT;
    Shardwire__SamplingParams s = SHARDWIRE__SAMPLING_PARAMS__INIT;
    Shardwire__StageTiming t = SHARDWIRE__STAGE_TIMING__INIT;
    Shardwire__Envelope env = SHARDWIRE__ENVELOPE__INIT;
    x->f = f;
    x->s = s;
    x->t = t;
    x->env = env;
    x->s.temperature = 0.7f;
    x->s.top_k = 40;
    x->s.top_p = 0.9f;
    x->s.min_p = 0.05f;
    x->s.repeat_penalty = 1.1f;
    x->s.repeat_last_n = 64;
    x->s.seed = 0xdeadbeefcafeull;
    for (int i = 0; i < 4; i++)
        x->tokens[i] = 100u + (uint32_t)i;
    for (int i = 0; i < 3; i++) {
        Shardwire__DraftDist d = SHARDWIRE__DRAFT_DIST__INIT;
        x->d[i] = d;
        x->drafts[i] = 101u + (uint32_t)i;
        x->probs[i] = 0.5f + 0.1f * (float)i;
        x->dist_tok[i][0] = x->drafts[i];
        x->dist_tok[i][1] = 7;
        x->dist_p[i][0] = x->probs[i];
        x->dist_p[i][1] = 1.0f - x->probs[i];
        x->d[i].n_tokens = 2;
        x->d[i].tokens = x->dist_tok[i];
        x->d[i].n_probs = 2;
        x->d[i].probs = x->dist_p[i];
        x->dp[i] = &x->d[i];
    }
    x->t.name = tname;
    x->t.compute_us = 1234;
    x->t.queue_us = 56;
    x->tp[0] = &x->t;
    x->route[0] = r0;
    x->route[1] = r1;
    x->route[2] = r2;
    x->f.session_id = 42;
    x->f.round = 7;
    x->f.start_pos = 100;
    x->f.kv_keep = 100;
    x->f.n_rows = 4;
    x->f.n_tokens = 4;
    x->f.tokens = x->tokens;
    x->f.sampling = &x->s;
    x->f.n_draft_tokens = 3;
    x->f.draft_tokens = x->drafts;
    x->f.n_draft_probs = 3;
    x->f.draft_probs = x->probs;
    x->f.n_draft_dists = 3;
    x->f.draft_dists = x->dp;
    x->f.dtype = SHARDWIRE__DTYPE__DTYPE_F16;
    x->f.hidden = 8;
    x->f.layer_begin = 10;
    x->f.n_route = 3;
    x->f.route = x->route;
    x->f.hop = 1;
    x->f.reply_to = reply;
    x->f.n_timing = 1;
    x->f.timing = x->tp;
    x->env.body_case = SHARDWIRE__ENVELOPE__BODY_FORWARD;
    x->env.forward = &x->f;
}

#define FWD_BYTES (4 * 8 * 2)

static void test_forward_roundtrip(void)
{
    struct fwd_fixture x;
    s_fwd_init(&x);
    Shardwire__Envelope *out = NULL;
    SW_CHECK_INT(s_roundtrip(&x.env, 1, FWD_BYTES, &out), SW_WIRE_OK);
    SW_CHECK(out != NULL);
    if (!out)
        return;
    SW_CHECK_INT(out->version, SW_WIRE_VERSION);
    SW_CHECK_INT(out->body_case, SHARDWIRE__ENVELOPE__BODY_FORWARD);
    const Shardwire__Forward *f = out->forward;
    SW_CHECK_INT(f->session_id, 42);
    SW_CHECK_INT(f->round, 7);
    SW_CHECK_INT(f->start_pos, 100);
    SW_CHECK_INT(f->kv_keep, 100);
    SW_CHECK_INT(f->n_rows, 4);
    SW_CHECK_INT(f->n_tokens, 4);
    SW_CHECK_INT(f->tokens[3], 103);
    SW_CHECK_INT(f->n_draft_tokens, 3);
    SW_CHECK_INT(f->draft_tokens[2], 103);
    SW_CHECK_NEAR(f->draft_probs[1], 0.6f, 1e-7);
    SW_CHECK_INT(f->n_draft_dists, 3);
    SW_CHECK_INT(f->draft_dists[2]->tokens[1], 7);
    SW_CHECK_NEAR(f->draft_dists[0]->probs[1], 0.5f, 1e-7);
    SW_CHECK(f->sampling != NULL);
    SW_CHECK_NEAR(f->sampling->temperature, 0.7f, 1e-7);
    SW_CHECK_INT(f->sampling->top_k, 40);
    SW_CHECK_INT(f->sampling->seed, 0xdeadbeefcafeull);
    SW_CHECK_INT(f->dtype, SHARDWIRE__DTYPE__DTYPE_F16);
    SW_CHECK_INT(f->hidden, 8);
    SW_CHECK_INT(f->layer_begin, 10);
    SW_CHECK_INT(f->n_route, 3);
    SW_CHECK(strcmp(f->route[2], "tail.gpu_0") == 0);
    SW_CHECK_INT(f->hop, 1);
    SW_CHECK(strcmp(f->reply_to, "head") == 0);
    SW_CHECK_INT(f->n_timing, 1);
    SW_CHECK_INT(f->timing[0]->compute_us, 1234);
    shardwire__envelope__free_unpacked(out, NULL);
}

static void test_forward_refusals(void)
{
    struct fwd_fixture x;
    s_fwd_init(&x);
    SW_CHECK_INT(s_check(&x.env, 1, FWD_BYTES), SW_WIRE_OK);

    /* payload size must equal rows x hidden x dtype */
    SW_CHECK_INT(s_check(&x.env, 1, FWD_BYTES - 1), SW_WIRE_EMALFORMED);
    SW_CHECK_INT(s_check(&x.env, 1, FWD_BYTES + 2), SW_WIRE_EMALFORMED);
    SW_CHECK_INT(s_check(&x.env, 1, 0), SW_WIRE_EMALFORMED);
    x.f.dtype = SHARDWIRE__DTYPE__DTYPE_F32;
    SW_CHECK_INT(s_check(&x.env, 1, FWD_BYTES), SW_WIRE_EMALFORMED);
    SW_CHECK_INT(s_check(&x.env, 1, 2 * FWD_BYTES), SW_WIRE_OK);
    x.f.dtype = (Shardwire__DType)3;
    SW_CHECK_INT(s_check(&x.env, 1, FWD_BYTES), SW_WIRE_EMALFORMED);
    s_fwd_init(&x);
    /* hidden too large, and a product that would overflow 32 bits */
    x.f.hidden = SW_WIRE_MAX_HIDDEN + 1;
    SW_CHECK_INT(s_check(&x.env, 1, (size_t)4 * (SW_WIRE_MAX_HIDDEN + 1) * 2), SW_WIRE_EMALFORMED);
    x.f.hidden = 0xffffffffu;
    SW_CHECK_INT(s_check(&x.env, 1, 0), SW_WIRE_EMALFORMED);
    /* a tensor payload above the frame limit */
    s_fwd_init(&x);
    x.f.n_draft_tokens = x.f.n_draft_probs = x.f.n_draft_dists = 0;
    x.f.n_tokens = 0;
    x.f.n_rows = SW_WIRE_MAX_ROWS;
    x.f.hidden = SW_WIRE_MAX_HIDDEN;
    x.f.dtype = SHARDWIRE__DTYPE__DTYPE_F32;
    SW_CHECK_INT(s_check(&x.env, 1, (size_t)SW_WIRE_MAX_ROWS * SW_WIRE_MAX_HIDDEN * 4),
                 SW_WIRE_EMALFORMED);
    x.f.hidden = 4096;
    x.f.dtype = SHARDWIRE__DTYPE__DTYPE_BF16;
    SW_CHECK_INT(s_check(&x.env, 1, (size_t)SW_WIRE_MAX_ROWS * 4096 * 2), SW_WIRE_OK);

    /* rows, positions, kv_keep */
    s_fwd_init(&x);
    x.f.n_draft_tokens = x.f.n_draft_probs = x.f.n_draft_dists = 0;
    x.f.n_tokens = 0;
    x.f.n_rows = 0;
    SW_CHECK_INT(s_check(&x.env, 1, 0), SW_WIRE_EMALFORMED);
    x.f.n_rows = SW_WIRE_MAX_ROWS + 1;
    SW_CHECK_INT(s_check(&x.env, 1, (size_t)(SW_WIRE_MAX_ROWS + 1) * 16), SW_WIRE_EMALFORMED);
    x.f.n_rows = 4;
    x.f.start_pos = SW_WIRE_MAX_POS - 3;
    x.f.kv_keep = 0;
    SW_CHECK_INT(s_check(&x.env, 1, FWD_BYTES), SW_WIRE_EMALFORMED);
    x.f.start_pos = 0xfffffffeu;
    SW_CHECK_INT(s_check(&x.env, 1, FWD_BYTES), SW_WIRE_EMALFORMED);
    x.f.start_pos = 50;
    x.f.kv_keep = 51;
    SW_CHECK_INT(s_check(&x.env, 1, FWD_BYTES), SW_WIRE_EMALFORMED);
    x.f.kv_keep = 20;
    SW_CHECK_INT(s_check(&x.env, 1, FWD_BYTES), SW_WIRE_OK);
    x.f.session_id = 0;
    SW_CHECK_INT(s_check(&x.env, 1, FWD_BYTES), SW_WIRE_EMALFORMED);

    /* drafts: rows must be K + 1, probs and dists 0 or K, values in range */
    s_fwd_init(&x);
    x.f.n_rows = 5;
    x.f.n_tokens = 0;
    SW_CHECK_INT(s_check(&x.env, 1, 5 * 8 * 2), SW_WIRE_EMALFORMED);
    s_fwd_init(&x);
    x.f.n_draft_probs = 2;
    SW_CHECK_INT(s_check(&x.env, 1, FWD_BYTES), SW_WIRE_EMALFORMED);
    s_fwd_init(&x);
    x.probs[1] = NAN;
    SW_CHECK_INT(s_check(&x.env, 1, FWD_BYTES), SW_WIRE_EMALFORMED);
    x.probs[1] = 1.5f;
    SW_CHECK_INT(s_check(&x.env, 1, FWD_BYTES), SW_WIRE_EMALFORMED);
    s_fwd_init(&x);
    x.d[1].n_probs = 1;
    SW_CHECK_INT(s_check(&x.env, 1, FWD_BYTES), SW_WIRE_EMALFORMED);
    s_fwd_init(&x);
    x.drafts[0] = SW_WIRE_MAX_TOKEN;
    SW_CHECK_INT(s_check(&x.env, 1, FWD_BYTES), SW_WIRE_EMALFORMED);
    s_fwd_init(&x);
    x.f.prefill_more = 1;
    SW_CHECK_INT(s_check(&x.env, 1, FWD_BYTES), SW_WIRE_EMALFORMED);
    s_fwd_init(&x);
    x.f.n_tokens = 3;
    SW_CHECK_INT(s_check(&x.env, 1, FWD_BYTES), SW_WIRE_EMALFORMED);
    s_fwd_init(&x);
    x.s.temperature = INFINITY;
    SW_CHECK_INT(s_check(&x.env, 1, FWD_BYTES), SW_WIRE_EMALFORMED);
    s_fwd_init(&x);
    x.s.top_p = -0.1f;
    SW_CHECK_INT(s_check(&x.env, 1, FWD_BYTES), SW_WIRE_EMALFORMED);

    /* no tensor: tokens required, hidden must be 0 */
    s_fwd_init(&x);
    SW_CHECK_INT(s_check(&x.env, 0, 0), SW_WIRE_EMALFORMED); /* hidden set */
    x.f.hidden = 0;
    SW_CHECK_INT(s_check(&x.env, 0, 0), SW_WIRE_OK);
    x.f.n_tokens = 0;
    SW_CHECK_INT(s_check(&x.env, 0, 0), SW_WIRE_EMALFORMED);

    /* routes */
    s_fwd_init(&x);
    x.f.hop = 3;
    SW_CHECK_INT(s_check(&x.env, 1, FWD_BYTES), SW_WIRE_EMALFORMED);
    x.f.hop = 2;
    SW_CHECK_INT(s_check(&x.env, 1, FWD_BYTES), SW_WIRE_OK);
    x.f.hop = 0; /* the head's own place: every stage refuses it, so the first hop does */
    SW_CHECK_INT(s_check(&x.env, 1, FWD_BYTES), SW_WIRE_EMALFORMED);
    x.f.hop = 2;
    static char bad[] = "mid 1", empty[] = "";
    x.route[1] = bad;
    SW_CHECK_INT(s_check(&x.env, 1, FWD_BYTES), SW_WIRE_EMALFORMED);
    s_fwd_init(&x);
    x.f.reply_to = empty;
    SW_CHECK_INT(s_check(&x.env, 1, FWD_BYTES), SW_WIRE_EMALFORMED);
    s_fwd_init(&x);
    x.f.n_route = 0;
    x.f.hop = 0;
    SW_CHECK_INT(s_check(&x.env, 1, FWD_BYTES), SW_WIRE_EMALFORMED);
    s_fwd_init(&x);
    x.f.n_route = SW_WIRE_MAX_ROUTE + 1;
    SW_CHECK_INT(s_check(&x.env, 1, FWD_BYTES), SW_WIRE_EMALFORMED);
    /* n_ctx: 0 (the stage's default) or room for the rows */
    s_fwd_init(&x);
    x.f.n_ctx = x.f.start_pos + x.f.n_rows;
    SW_CHECK_INT(s_check(&x.env, 1, FWD_BYTES), SW_WIRE_OK);
    x.f.n_ctx = x.f.start_pos + x.f.n_rows - 1;
    SW_CHECK_INT(s_check(&x.env, 1, FWD_BYTES), SW_WIRE_EMALFORMED);
    x.f.n_ctx = SW_WIRE_MAX_POS + 1;
    SW_CHECK_INT(s_check(&x.env, 1, FWD_BYTES), SW_WIRE_EMALFORMED);
}

static void test_other_messages(void)
{
    /* Verdict */
    uint32_t toks[3] = {5, 6, 9};
    static char nm[] = "tail";
    Shardwire__StageTiming t = SHARDWIRE__STAGE_TIMING__INIT;
    t.name = nm;
    t.compute_us = 77;
    Shardwire__StageTiming *tp[1] = {&t};
    Shardwire__Verdict v = SHARDWIRE__VERDICT__INIT;
    v.session_id = 3;
    v.round = 11;
    v.n_accepted = 2;
    v.n_tokens = 3;
    v.tokens = toks;
    v.next_token = 9;
    v.n_timing = 1;
    v.timing = tp;
    Shardwire__Envelope env = SHARDWIRE__ENVELOPE__INIT;
    env.body_case = SHARDWIRE__ENVELOPE__BODY_VERDICT;
    env.verdict = &v;
    Shardwire__Envelope *out = NULL;
    SW_CHECK_INT(s_roundtrip(&env, 0, 0, &out), SW_WIRE_OK);
    if (out) {
        SW_CHECK_INT(out->verdict->n_accepted, 2);
        SW_CHECK_INT(out->verdict->tokens[2], 9);
        SW_CHECK_INT(out->verdict->timing[0]->compute_us, 77);
        shardwire__envelope__free_unpacked(out, NULL);
    }
    SW_CHECK_INT(s_check(&env, 1, 4), SW_WIRE_EMALFORMED); /* no payload on a verdict */
    v.next_token = 6;
    SW_CHECK_INT(s_check(&env, 0, 0), SW_WIRE_EMALFORMED);
    v.next_token = 9;
    v.n_accepted = 3;
    SW_CHECK_INT(s_check(&env, 0, 0), SW_WIRE_EMALFORMED);
    /* a tree round's path: n_accepted increasing node indices in 1..64 */
    v.n_accepted = 2;
    uint32_t path[3] = {2, 5, 6};
    v.n_path = 2;
    v.path = path;
    SW_CHECK_INT(s_roundtrip(&env, 0, 0, &out), SW_WIRE_OK);
    if (out) {
        SW_CHECK_INT(out->verdict->n_path, 2);
        SW_CHECK_INT(out->verdict->path[1], 5);
        shardwire__envelope__free_unpacked(out, NULL);
    }
    v.n_path = 3; // more entries than accepted drafts
    SW_CHECK_INT(s_check(&env, 0, 0), SW_WIRE_EMALFORMED);
    v.n_path = 2;
    path[1] = 2; // not increasing
    SW_CHECK_INT(s_check(&env, 0, 0), SW_WIRE_EMALFORMED);
    path[0] = 0; // node 0 is the root, never a draft
    path[1] = 3;
    SW_CHECK_INT(s_check(&env, 0, 0), SW_WIRE_EMALFORMED);
    path[0] = 1;
    path[1] = SW_WIRE_MAX_DRAFT + 1;
    SW_CHECK_INT(s_check(&env, 0, 0), SW_WIRE_EMALFORMED);
    v.n_path = 0;

    /* PeerAnnounce: roles must match layer ranges */
    static char name[] = "node-a", be[] = "cuda:0", fp[65];
    memcpy(fp, FP, 65);
    Shardwire__PeerAnnounce a = SHARDWIRE__PEER_ANNOUNCE__INIT;
    a.name = name;
    a.role = SHARDWIRE__ROLE__ROLE_HEAD;
    a.model_fingerprint = fp;
    a.layer_begin = 0;
    a.layer_end = 12;
    a.n_layers = 30;
    a.backend = be;
    a.max_sessions = 4;
    a.hidden = 576;
    Shardwire__Envelope ea = SHARDWIRE__ENVELOPE__INIT;
    ea.body_case = SHARDWIRE__ENVELOPE__BODY_ANNOUNCE;
    ea.announce = &a;
    SW_CHECK_INT(s_roundtrip(&ea, 0, 0, &out), SW_WIRE_OK);
    if (out) {
        SW_CHECK(strcmp(out->announce->name, "node-a") == 0);
        SW_CHECK(strcmp(out->announce->model_fingerprint, FP) == 0);
        SW_CHECK_INT(out->announce->layer_end, 12);
        SW_CHECK_INT(out->announce->hidden, 576);
        shardwire__envelope__free_unpacked(out, NULL);
    }
    a.role = SHARDWIRE__ROLE__ROLE_TAIL;
    SW_CHECK_INT(s_check(&ea, 0, 0), SW_WIRE_EMALFORMED);
    a.layer_begin = 12;
    a.layer_end = 30;
    SW_CHECK_INT(s_check(&ea, 0, 0), SW_WIRE_OK);
    a.layer_end = 31;
    SW_CHECK_INT(s_check(&ea, 0, 0), SW_WIRE_EMALFORMED);
    a.layer_end = 30;
    fp[10] = 'G';
    SW_CHECK_INT(s_check(&ea, 0, 0), SW_WIRE_EMALFORMED);
    fp[10] = 'a';
    a.role = (Shardwire__Role)9;
    SW_CHECK_INT(s_check(&ea, 0, 0), SW_WIRE_EMALFORMED);
    a.role = SHARDWIRE__ROLE__ROLE_CLIENT;
    SW_CHECK_INT(s_check(&ea, 0, 0), SW_WIRE_EMALFORMED); /* clients hold no layers */
    a.layer_begin = a.layer_end = a.n_layers = 0;
    SW_CHECK_INT(s_check(&ea, 0, 0), SW_WIRE_OK);

    /* GenerateRequest: exactly one of prompt / prompt_tokens */
    static char rid[] = "req-1", prompt[] = "Hello there";
    Shardwire__GenerateRequest g = SHARDWIRE__GENERATE_REQUEST__INIT;
    g.request_id = rid;
    g.prompt = prompt;
    g.n_predict = 32;
    g.chat = 1;
    Shardwire__DraftParams dp = SHARDWIRE__DRAFT_PARAMS__INIT;
    dp.mode = SHARDWIRE__DRAFT_MODE__DRAFT_MODEL;
    dp.n_draft = 8;
    dp.tree = 16;
    dp.ahead = SHARDWIRE__DRAFT_AHEAD__AHEAD_ON;
    g.draft = &dp;
    Shardwire__Envelope eg = SHARDWIRE__ENVELOPE__INIT;
    eg.body_case = SHARDWIRE__ENVELOPE__BODY_GENERATE;
    eg.generate = &g;
    SW_CHECK_INT(s_roundtrip(&eg, 0, 0, &out), SW_WIRE_OK);
    if (out) {
        SW_CHECK(strcmp(out->generate->prompt, prompt) == 0);
        SW_CHECK_INT(out->generate->draft->n_draft, 8);
        SW_CHECK_INT(out->generate->draft->tree, 16);
        SW_CHECK_INT(out->generate->draft->ahead, SHARDWIRE__DRAFT_AHEAD__AHEAD_ON);
        SW_CHECK_INT(out->generate->chat, 1);
        shardwire__envelope__free_unpacked(out, NULL);
    }
    g.n_prompt_tokens = 3;
    g.prompt_tokens = toks;
    SW_CHECK_INT(s_check(&eg, 0, 0), SW_WIRE_EMALFORMED);
    static char none[] = "";
    g.prompt = none;
    SW_CHECK_INT(s_check(&eg, 0, 0), SW_WIRE_OK);
    g.n_prompt_tokens = 0;
    SW_CHECK_INT(s_check(&eg, 0, 0), SW_WIRE_EMALFORMED);
    g.prompt = prompt;
    dp.n_draft = SW_WIRE_MAX_DRAFT + 1;
    SW_CHECK_INT(s_check(&eg, 0, 0), SW_WIRE_EMALFORMED);
    dp.n_draft = 4;
    dp.tree = SW_WIRE_MAX_DRAFT + 1; // a tree larger than a round carries
    SW_CHECK_INT(s_check(&eg, 0, 0), SW_WIRE_EMALFORMED);
    dp.tree = 1;
    dp.ahead = (Shardwire__DraftAhead)3; // no such value
    SW_CHECK_INT(s_check(&eg, 0, 0), SW_WIRE_EMALFORMED);
    dp.ahead = SHARDWIRE__DRAFT_AHEAD__AHEAD_OFF;
    g.n_predict = 0;
    SW_CHECK_INT(s_check(&eg, 0, 0), SW_WIRE_EMALFORMED);
    g.n_predict = 32;

    /* chat messages: exclusive with prompt, roles 1..16 bytes, at most 256 turns */
    static char role_sys[] = "system", role_user[] = "user", role_long[] = "a-role-of-17-byte";
    static char hi[] = "hi", sys_text[] = "Be brief.";
    Shardwire__ChatMessage cm[2];
    Shardwire__ChatMessage *cmp[SW_WIRE_MAX_MESSAGES + 1];
    shardwire__chat_message__init(&cm[0]);
    shardwire__chat_message__init(&cm[1]);
    cm[0].role = role_sys;
    cm[0].content = sys_text;
    cm[1].role = role_user;
    cm[1].content = hi;
    for (int i = 0; i <= SW_WIRE_MAX_MESSAGES; i++)
        cmp[i] = &cm[i % 2];
    g.messages = cmp;
    g.n_messages = 2;
    SW_CHECK_INT(s_check(&eg, 0, 0), SW_WIRE_EMALFORMED); /* and a prompt */
    g.prompt = none;
    SW_CHECK_INT(s_roundtrip(&eg, 0, 0, &out), SW_WIRE_OK);
    if (out) {
        SW_CHECK_INT(out->generate->n_messages, 2);
        SW_CHECK(strcmp(out->generate->messages[1]->content, hi) == 0);
        shardwire__envelope__free_unpacked(out, NULL);
    }
    cm[1].role = role_long;
    SW_CHECK_INT(s_check(&eg, 0, 0), SW_WIRE_EMALFORMED);
    cm[1].role = none;
    SW_CHECK_INT(s_check(&eg, 0, 0), SW_WIRE_EMALFORMED);
    cm[1].role = role_user;
    g.n_messages = SW_WIRE_MAX_MESSAGES + 1;
    SW_CHECK_INT(s_check(&eg, 0, 0), SW_WIRE_EMALFORMED);
    g.n_messages = SW_WIRE_MAX_MESSAGES;
    SW_CHECK_INT(s_check(&eg, 0, 0), SW_WIRE_OK);

    /* TokenChunk: done and finish agree */
    Shardwire__TokenChunk c = SHARDWIRE__TOKEN_CHUNK__INIT;
    c.request_id = rid;
    c.n_tokens = 3;
    c.tokens = toks;
    c.text.data = (uint8_t *)"abc";
    c.text.len = 3;
    Shardwire__Envelope ec = SHARDWIRE__ENVELOPE__INIT;
    ec.body_case = SHARDWIRE__ENVELOPE__BODY_TOKEN_CHUNK;
    ec.token_chunk = &c;
    SW_CHECK_INT(s_roundtrip(&ec, 0, 0, &out), SW_WIRE_OK);
    if (out) {
        SW_CHECK_INT(out->token_chunk->text.len, 3);
        SW_CHECK(memcmp(out->token_chunk->text.data, "abc", 3) == 0);
        shardwire__envelope__free_unpacked(out, NULL);
    }
    c.done = 1;
    SW_CHECK_INT(s_check(&ec, 0, 0), SW_WIRE_EMALFORMED);
    c.finish = SHARDWIRE__FINISH_REASON__FINISH_EOS;
    SW_CHECK_INT(s_check(&ec, 0, 0), SW_WIRE_OK);
    c.finish = SHARDWIRE__FINISH_REASON__FINISH_CANCELLED;
    SW_CHECK_INT(s_check(&ec, 0, 0), SW_WIRE_OK);
    c.finish = (Shardwire__FinishReason)7;
    SW_CHECK_INT(s_check(&ec, 0, 0), SW_WIRE_EMALFORMED);
    c.finish = SHARDWIRE__FINISH_REASON__FINISH_EOS;
    c.index = SW_WIRE_MAX_POS - 3; /* tokens [index, index + 3) must stay below the limit */
    SW_CHECK_INT(s_check(&ec, 0, 0), SW_WIRE_OK);
    c.index = SW_WIRE_MAX_POS - 2;
    SW_CHECK_INT(s_check(&ec, 0, 0), SW_WIRE_EMALFORMED);
    c.index = 0;

    /* Cancel and Resume name a request */
    Shardwire__Cancel cn = SHARDWIRE__CANCEL__INIT;
    static char why[] = "interrupted", bad_rid[] = "req 1";
    cn.request_id = rid;
    cn.reason = why;
    Shardwire__Envelope ecn = SHARDWIRE__ENVELOPE__INIT;
    ecn.body_case = SHARDWIRE__ENVELOPE__BODY_CANCEL;
    ecn.cancel = &cn;
    SW_CHECK_INT(s_roundtrip(&ecn, 0, 0, &out), SW_WIRE_OK);
    if (out) {
        SW_CHECK(strcmp(out->cancel->request_id, rid) == 0);
        shardwire__envelope__free_unpacked(out, NULL);
    }
    cn.request_id = bad_rid;
    SW_CHECK_INT(s_check(&ecn, 0, 0), SW_WIRE_EMALFORMED);
    cn.request_id = NULL;
    SW_CHECK_INT(s_check(&ecn, 0, 0), SW_WIRE_EMALFORMED);
    Shardwire__Resume rs = SHARDWIRE__RESUME__INIT;
    rs.request_id = rid;
    rs.from_index = 17;
    Shardwire__Envelope ers = SHARDWIRE__ENVELOPE__INIT;
    ers.body_case = SHARDWIRE__ENVELOPE__BODY_RESUME;
    ers.resume = &rs;
    SW_CHECK_INT(s_roundtrip(&ers, 0, 0, &out), SW_WIRE_OK);
    if (out) {
        SW_CHECK_INT(out->resume->from_index, 17);
        shardwire__envelope__free_unpacked(out, NULL);
    }
    rs.from_index = SW_WIRE_MAX_POS + 1;
    SW_CHECK_INT(s_check(&ers, 0, 0), SW_WIRE_EMALFORMED);

    /* Error, SessionOpen/Close, StatusQuery */
    Shardwire__Error e = SHARDWIRE__ERROR__INIT;
    static char msg[] = "no such peer", dest[] = "ghost";
    e.code = SHARDWIRE__ERROR_CODE__ERR_UNKNOWN_DEST;
    e.message = msg;
    e.dest = dest;
    Shardwire__Envelope ee = SHARDWIRE__ENVELOPE__INIT;
    ee.body_case = SHARDWIRE__ENVELOPE__BODY_ERROR;
    ee.error = &e;
    SW_CHECK_INT(s_roundtrip(&ee, 0, 0, &out), SW_WIRE_OK);
    if (out) {
        SW_CHECK_INT(out->error->code, SHARDWIRE__ERROR_CODE__ERR_UNKNOWN_DEST);
        SW_CHECK(strcmp(out->error->dest, "ghost") == 0);
        shardwire__envelope__free_unpacked(out, NULL);
    }
    e.code = SHARDWIRE__ERROR_CODE__ERR_BUSY;
    e.queue_position = 65;
    SW_CHECK_INT(s_check(&ee, 0, 0), SW_WIRE_OK);
    e.queue_position = SW_WIRE_MAX_QUEUE + 1;
    SW_CHECK_INT(s_check(&ee, 0, 0), SW_WIRE_EMALFORMED);
    e.queue_position = 0;
    e.code = (Shardwire__ErrorCode)99;
    SW_CHECK_INT(s_check(&ee, 0, 0), SW_WIRE_EMALFORMED);

    char *route[2] = {name, nm};
    Shardwire__SessionOpen so = SHARDWIRE__SESSION_OPEN__INIT;
    so.session_id = 9;
    so.n_ctx = 2048;
    so.model_fingerprint = fp;
    so.n_route = 2;
    so.route = route;
    Shardwire__Envelope eo = SHARDWIRE__ENVELOPE__INIT;
    eo.body_case = SHARDWIRE__ENVELOPE__BODY_SESSION_OPEN;
    eo.session_open = &so;
    SW_CHECK_INT(s_check(&eo, 0, 0), SW_WIRE_OK);
    so.n_ctx = 0;
    SW_CHECK_INT(s_check(&eo, 0, 0), SW_WIRE_EMALFORMED);

    Shardwire__StatusQuery q = SHARDWIRE__STATUS_QUERY__INIT;
    Shardwire__Envelope eq = SHARDWIRE__ENVELOPE__INIT;
    eq.body_case = SHARDWIRE__ENVELOPE__BODY_STATUS_QUERY;
    eq.status_query = &q;
    SW_CHECK_INT(s_check(&eq, 0, 0), SW_WIRE_OK);
    Shardwire__Envelope empty_env = SHARDWIRE__ENVELOPE__INIT;
    SW_CHECK_INT(s_check(&empty_env, 0, 0), SW_WIRE_EMALFORMED); /* no body */
}

static void test_bad_bytes(void)
{
    char err[SW_WIRE_ERR_LEN];
    Shardwire__Envelope *out = NULL;
    /* version other than ours */
    Shardwire__StatusQuery q = SHARDWIRE__STATUS_QUERY__INIT;
    Shardwire__Envelope eq = SHARDWIRE__ENVELOPE__INIT;
    eq.version = SW_WIRE_VERSION + 1;
    eq.body_case = SHARDWIRE__ENVELOPE__BODY_STATUS_QUERY;
    eq.status_query = &q;
    uint8_t buf[64];
    size_t n = shardwire__envelope__pack(&eq, buf);
    SW_CHECK_INT(sw_wire_decode(buf, n, 0, 0, &out, err, sizeof err), SW_WIRE_EVERSION);
    SW_CHECK(out == NULL);
    SW_CHECK(strstr(err, "version") != NULL);

    /* an unknown field (number 99) after a valid body is refused */
    eq.version = SW_WIRE_VERSION;
    n = shardwire__envelope__pack(&eq, buf);
    SW_CHECK_INT(sw_wire_decode(buf, n, 0, 0, &out, err, sizeof err), SW_WIRE_OK);
    shardwire__envelope__free_unpacked(out, NULL);
    buf[n] = 0x98;
    buf[n + 1] = 0x06;
    buf[n + 2] = 0x01;
    SW_CHECK_INT(sw_wire_decode(buf, n + 3, 0, 0, &out, err, sizeof err), SW_WIRE_EMALFORMED);
    SW_CHECK(strstr(err, "unknown field") != NULL);

    /* truncated Forward header, garbage, empty frame */
    struct fwd_fixture x;
    s_fwd_init(&x);
    x.env.version = SW_WIRE_VERSION;
    size_t fn = shardwire__envelope__get_packed_size(&x.env);
    uint8_t fbuf[1024];
    SW_CHECK(fn < sizeof fbuf);
    shardwire__envelope__pack(&x.env, fbuf);
    SW_CHECK_INT(sw_wire_decode(fbuf, fn, 1, FWD_BYTES, &out, err, sizeof err), SW_WIRE_OK);
    shardwire__envelope__free_unpacked(out, NULL);
    int refused = 0;
    for (size_t cut = 1; cut < fn; cut++) {
        int rc = sw_wire_decode(fbuf, cut, 1, FWD_BYTES, &out, err, sizeof err);
        if (rc != SW_WIRE_OK)
            refused++;
        else
            shardwire__envelope__free_unpacked(out, NULL);
    }
    SW_CHECK_INT(refused, fn - 1); /* every prefix is missing a required part */
    uint8_t junk[32];
    for (size_t i = 0; i < sizeof junk; i++)
        junk[i] = (uint8_t)(0xff - i * 7);
    SW_CHECK_INT(sw_wire_decode(junk, sizeof junk, 0, 0, &out, err, sizeof err),
                 SW_WIRE_EMALFORMED);
    SW_CHECK_INT(sw_wire_decode(junk, 0, 0, 0, &out, err, sizeof err), SW_WIRE_EMALFORMED);

    /* names */
    SW_CHECK(sw_wire_name_ok("a", 1));
    SW_CHECK(sw_wire_name_ok("Node_1.x-y", 10));
    SW_CHECK(!sw_wire_name_ok("", 0));
    SW_CHECK(!sw_wire_name_ok("a/b", 3));
    SW_CHECK(!sw_wire_name_ok("a\0b", 3));
    char longname[SW_WIRE_NAME_MAX + 2];
    memset(longname, 'x', sizeof longname);
    SW_CHECK(sw_wire_name_ok(longname, SW_WIRE_NAME_MAX));
    SW_CHECK(!sw_wire_name_ok(longname, SW_WIRE_NAME_MAX + 1));

    /* name frames with a key: "NAME@FP", FP exactly 32 lower-case hex digits */
    char name[SW_WIRE_NAME_MAX + 1], key[SW_WIRE_KEY_FP_LEN + 1], addr[SW_WIRE_ADDR_MAX + 1];
    const char *fp = "0123456789abcdef0123456789abcdef";
    snprintf(addr, sizeof addr, "client-1@%s", fp);
    SW_CHECK_INT(sw_wire_addr_split(addr, strlen(addr), name, key), 0);
    SW_CHECK(!strcmp(name, "client-1") && !strcmp(key, fp));
    SW_CHECK_INT(sw_wire_addr_split("head", 4, name, key), 0);
    SW_CHECK(!strcmp(name, "head") && key[0] == 0);
    char again[SW_WIRE_ADDR_MAX + 1];
    sw_wire_addr(again, "client-1", fp);
    SW_CHECK(!strcmp(again, addr));
    sw_wire_addr(again, "head", "");
    SW_CHECK(!strcmp(again, "head"));
    static const char *const bad_addr[] = {
        "@0123456789abcdef0123456789abcdef",   "c@",
        "c@0123456789abcdef0123456789abcde",   "c@0123456789abcdef0123456789abcdef0",
        "c@0123456789ABCDEF0123456789abcdef",  "c@0123456789abcdef0123456789abcdef@",
        "c/x@0123456789abcdef0123456789abcdef"};
    for (size_t i = 0; i < sizeof bad_addr / sizeof bad_addr[0]; i++)
        SW_CHECK_INT(sw_wire_addr_split(bad_addr[i], strlen(bad_addr[i]), name, key), -1);
    char longaddr[SW_WIRE_ADDR_MAX + 2];
    memset(longaddr, 'x', SW_WIRE_NAME_MAX + 1); /* a name one byte too long */
    longaddr[SW_WIRE_NAME_MAX + 1] = '@';
    memcpy(longaddr + SW_WIRE_NAME_MAX + 2, fp, SW_WIRE_KEY_FP_LEN - 1);
    SW_CHECK_INT(sw_wire_addr_split(longaddr, sizeof longaddr - 1, name, key), -1);
}

/* Framing over a real socket pair: payload bytes survive; bad shapes are drained whole. */
static void test_framing(void)
{
    void *ctx = zmq_ctx_new();
    void *a = zmq_socket(ctx, ZMQ_PAIR), *b = zmq_socket(ctx, ZMQ_PAIR);
    SW_CHECK_INT(zmq_bind(a, "inproc://wire-test"), 0);
    SW_CHECK_INT(zmq_connect(b, "inproc://wire-test"), 0);
    char err[SW_WIRE_ERR_LEN];
    struct fwd_fixture x;
    s_fwd_init(&x);
    uint8_t payload[FWD_BYTES];
    for (int i = 0; i < FWD_BYTES; i++)
        payload[i] = (uint8_t)(i * 13 + 1);
    SW_CHECK_INT(
        sw_wire_send(a, "tail", sw_envelope_of(&x.env), payload, FWD_BYTES, 1, 0, err, sizeof err),
        0);
    sw_wire_msg_t m = {0};
    SW_CHECK_INT(sw_wire_recv(b, 0, &m, err, sizeof err), SW_WIRE_OK);
    SW_CHECK(strcmp(m.peer, "tail") == 0);
    size_t plen = 0;
    const uint8_t *p = sw_wire_msg_payload(&m, &plen);
    SW_CHECK_INT(plen, FWD_BYTES);
    SW_CHECK(p && memcmp(p, payload, FWD_BYTES) == 0);
    SW_CHECK_INT(m.env->pb.forward->round, 7);
    sw_wire_msg_clear(&m);

    /* an invalid envelope is never sent */
    x.f.n_rows = 0;
    SW_CHECK_INT(
        sw_wire_send(a, "tail", sw_envelope_of(&x.env), payload, FWD_BYTES, 1, 0, err, sizeof err),
        SW_WIRE_EMALFORMED);
    s_fwd_init(&x);
    SW_CHECK_INT(sw_wire_send(a, "bad name", sw_envelope_of(&x.env), payload, FWD_BYTES, 1, 0, err,
                              sizeof err),
                 SW_WIRE_EMALFORMED);

    /* probe; payload size mismatch; too many frames; bad name; one non-empty frame */
    zmq_send(a, "", 0, 0);
    SW_CHECK_INT(sw_wire_recv(b, 0, &m, err, sizeof err), SW_WIRE_PROBE);
    zmq_msg_t hdr;
    SW_CHECK_INT(sw_wire_encode(&x.env, 1, FWD_BYTES, &hdr, err, sizeof err), 0);
    size_t hn = zmq_msg_size(&hdr);
    uint8_t hbytes[1024];
    memcpy(hbytes, zmq_msg_data(&hdr), hn);
    zmq_msg_close(&hdr);
    zmq_send(a, "src", 3, ZMQ_SNDMORE);
    zmq_send(a, hbytes, hn, ZMQ_SNDMORE);
    zmq_send(a, payload, FWD_BYTES - 2, 0);
    SW_CHECK_INT(sw_wire_recv(b, 0, &m, err, sizeof err), SW_WIRE_EMALFORMED);
    SW_CHECK(strstr(err, "payload") != NULL);
    for (int i = 0; i < 5; i++)
        zmq_send(a, "src", 3, i < 4 ? ZMQ_SNDMORE : 0);
    SW_CHECK_INT(sw_wire_recv(b, 0, &m, err, sizeof err), SW_WIRE_EMALFORMED);
    zmq_send(a, "s c", 3, ZMQ_SNDMORE);
    zmq_send(a, hbytes, hn, ZMQ_SNDMORE);
    zmq_send(a, payload, FWD_BYTES, 0);
    SW_CHECK_INT(sw_wire_recv(b, 0, &m, err, sizeof err), SW_WIRE_EMALFORMED);
    zmq_send(a, "src", 3, 0);
    SW_CHECK_INT(sw_wire_recv(b, 0, &m, err, sizeof err), SW_WIRE_EMALFORMED);
    /* and the stream is still in step */
    SW_CHECK_INT(
        sw_wire_send(a, "tail", sw_envelope_of(&x.env), payload, FWD_BYTES, 1, 0, err, sizeof err),
        0);
    SW_CHECK_INT(sw_wire_recv(b, 0, &m, err, sizeof err), SW_WIRE_OK);
    SW_CHECK(m.env != NULL && m.has_payload);
    sw_wire_msg_clear(&m);
    SW_CHECK_INT(sw_wire_recv(b, ZMQ_DONTWAIT, &m, err, sizeof err), SW_WIRE_ESOCKET);

    /* the error helper */
    SW_CHECK_INT(sw_wire_send_error(a, "relay", SHARDWIRE__ERROR_CODE__ERR_DEST_BUSY, 5, "r-1",
                                    "bad name!", "queue full", 0),
                 0);
    SW_CHECK_INT(sw_wire_recv(b, 0, &m, err, sizeof err), SW_WIRE_OK);
    SW_CHECK_INT(m.env->pb.error->code, SHARDWIRE__ERROR_CODE__ERR_DEST_BUSY);
    SW_CHECK(strcmp(m.env->pb.error->request_id, "r-1") == 0);
    SW_CHECK(strcmp(m.env->pb.error->dest, "") == 0);
    sw_wire_msg_clear(&m);

    zmq_close(a);
    zmq_close(b);
    zmq_ctx_term(ctx);
}

/* The message types test_other_messages leaves out, each valid and round-tripped
 * (so that the seed corpus has one of every type). */
static void test_remaining_messages(void)
{
    Shardwire__Envelope *out = NULL;
    static char name[] = "tail", route0[] = "head", route1[] = "tail", reason[] = "done",
                fp[] = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
                be[] = "cpu";
    char *route[2] = {route0, route1};

    Shardwire__AnnounceAck ack = SHARDWIRE__ANNOUNCE_ACK__INIT;
    ack.name = name;
    ack.heartbeat_ms = 1000;
    ack.max_frame_bytes = 16u << 20;
    Shardwire__Envelope e1 = SHARDWIRE__ENVELOPE__INIT;
    e1.body_case = SHARDWIRE__ENVELOPE__BODY_ANNOUNCE_ACK;
    e1.announce_ack = &ack;
    SW_CHECK_INT(s_roundtrip(&e1, 0, 0, &out), SW_WIRE_OK);
    if (out) {
        SW_CHECK(strcmp(out->announce_ack->name, "tail") == 0);
        SW_CHECK_INT(out->announce_ack->heartbeat_ms, 1000);
        shardwire__envelope__free_unpacked(out, NULL);
    }

    Shardwire__StatusQuery q = SHARDWIRE__STATUS_QUERY__INIT;
    Shardwire__Envelope e2 = SHARDWIRE__ENVELOPE__INIT;
    e2.body_case = SHARDWIRE__ENVELOPE__BODY_STATUS_QUERY;
    e2.status_query = &q;
    SW_CHECK_INT(s_roundtrip(&e2, 0, 0, &out), SW_WIRE_OK);
    if (out) {
        SW_CHECK_INT(out->body_case, SHARDWIRE__ENVELOPE__BODY_STATUS_QUERY);
        shardwire__envelope__free_unpacked(out, NULL);
    }

    Shardwire__PeerAnnounce a = SHARDWIRE__PEER_ANNOUNCE__INIT;
    a.name = name;
    a.role = SHARDWIRE__ROLE__ROLE_TAIL;
    a.model_fingerprint = fp;
    a.layer_begin = 15;
    a.layer_end = 30;
    a.n_layers = 30;
    a.backend = be;
    a.max_sessions = 4;
    a.hidden = 576;
    Shardwire__PeerInfo pi = SHARDWIRE__PEER_INFO__INIT;
    pi.announce = &a;
    pi.heartbeat_age_ms = 12;
    pi.msgs_in = 5;
    pi.msgs_out = 6;
    pi.bytes_in = 700;
    Shardwire__PeerInfo *pis[1] = {&pi};
    Shardwire__PeerTable pt = SHARDWIRE__PEER_TABLE__INIT;
    pt.n_peers = 1;
    pt.peers = pis;
    pt.uptime_ms = 1234;
    pt.msgs_forwarded = 11;
    Shardwire__Envelope e3 = SHARDWIRE__ENVELOPE__INIT;
    e3.body_case = SHARDWIRE__ENVELOPE__BODY_PEER_TABLE;
    e3.peer_table = &pt;
    SW_CHECK_INT(s_roundtrip(&e3, 0, 0, &out), SW_WIRE_OK);
    if (out) {
        SW_CHECK_INT(out->peer_table->n_peers, 1);
        SW_CHECK_INT(out->peer_table->peers[0]->msgs_out, 6);
        SW_CHECK_INT(out->peer_table->peers[0]->announce->layer_end, 30);
        shardwire__envelope__free_unpacked(out, NULL);
    }

    Shardwire__SamplingParams sp = SHARDWIRE__SAMPLING_PARAMS__INIT;
    sp.temperature = 0.8f;
    sp.top_k = 40;
    sp.seed = 7;
    Shardwire__SessionOpen so = SHARDWIRE__SESSION_OPEN__INIT;
    so.session_id = 9;
    so.n_ctx = 2048;
    so.model_fingerprint = fp;
    so.n_route = 2;
    so.route = route;
    so.sampling = &sp;
    Shardwire__Envelope e4 = SHARDWIRE__ENVELOPE__INIT;
    e4.body_case = SHARDWIRE__ENVELOPE__BODY_SESSION_OPEN;
    e4.session_open = &so;
    SW_CHECK_INT(s_roundtrip(&e4, 0, 0, &out), SW_WIRE_OK);
    if (out) {
        SW_CHECK_INT(out->session_open->n_ctx, 2048);
        SW_CHECK_INT(out->session_open->n_route, 2);
        shardwire__envelope__free_unpacked(out, NULL);
    }

    Shardwire__SessionClose sc = SHARDWIRE__SESSION_CLOSE__INIT;
    sc.session_id = 9;
    sc.reason = reason;
    Shardwire__Envelope e5 = SHARDWIRE__ENVELOPE__INIT;
    e5.body_case = SHARDWIRE__ENVELOPE__BODY_SESSION_CLOSE;
    e5.session_close = &sc;
    SW_CHECK_INT(s_roundtrip(&e5, 0, 0, &out), SW_WIRE_OK);
    if (out) {
        SW_CHECK_INT(out->session_close->session_id, 9);
        shardwire__envelope__free_unpacked(out, NULL);
    }

    static char rid[] = "req-1";
    Shardwire__Progress pg = SHARDWIRE__PROGRESS__INIT;
    pg.request_id = rid;
    pg.prompt_done = 512;
    pg.prompt_total = 1900;
    pg.next_ms = 4000;
    Shardwire__Envelope e6 = SHARDWIRE__ENVELOPE__INIT;
    e6.body_case = SHARDWIRE__ENVELOPE__BODY_PROGRESS;
    e6.progress = &pg;
    SW_CHECK_INT(s_roundtrip(&e6, 0, 0, &out), SW_WIRE_OK);
    if (out) {
        SW_CHECK_INT(out->progress->prompt_done, 512);
        SW_CHECK_INT(out->progress->next_ms, 4000);
        shardwire__envelope__free_unpacked(out, NULL);
    }

    Shardwire__PrefillAck pa = SHARDWIRE__PREFILL_ACK__INIT;
    pa.session_id = 9;
    pa.round = 1;
    pa.done = 448;
    Shardwire__Envelope e7 = SHARDWIRE__ENVELOPE__INIT;
    e7.body_case = SHARDWIRE__ENVELOPE__BODY_PREFILL_ACK;
    e7.prefill_ack = &pa;
    SW_CHECK_INT(s_roundtrip(&e7, 0, 0, &out), SW_WIRE_OK);
    if (out) {
        SW_CHECK_INT(out->prefill_ack->done, 448);
        shardwire__envelope__free_unpacked(out, NULL);
    }
    pa.done = 0; // a chunk acknowledges at least one position
    SW_CHECK_INT(s_roundtrip(&e7, 0, 0, &out), SW_WIRE_EMALFORMED);
    pa.done = SW_WIRE_MAX_POS + 1;
    SW_CHECK_INT(s_roundtrip(&e7, 0, 0, &out), SW_WIRE_EMALFORMED);
}

/* Every seed of tests/fuzz/corpus/wire/ decodes, and every body type has one. */
static void test_seed_corpus(void)
{
    const char *src = getenv("SW_SOURCE_DIR");
    if (!src || !src[0]) {
        sw_test_skip_part("wire seed corpus: SW_SOURCE_DIR is not set");
        return;
    }
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/tests/fuzz/corpus/wire", src);
    DIR *d = opendir(dir);
    SW_CHECK(d != NULL);
    if (!d)
        return;
    int seen[64] = {0}, n_files = 0;
    for (struct dirent *de; (de = readdir(d));) {
        if (de->d_name[0] == '.')
            continue;
        char path[2048];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        size_t len = 0;
        char *buf = sw_test_read_file(path, &len);
        SW_CHECK(buf != NULL && len >= 5);
        if (!buf || len < 5) {
            free(buf);
            continue;
        }
        const uint8_t *b = (const uint8_t *)buf;
        size_t pl = (size_t)b[1] | (size_t)b[2] << 8 | (size_t)b[3] << 16 | (size_t)b[4] << 24;
        Shardwire__Envelope *env = NULL;
        char err[SW_WIRE_ERR_LEN] = "";
        int rc = sw_wire_decode(b + 5, len - 5, b[0] & 1, pl, &env, err, sizeof err);
        if (rc != SW_WIRE_OK)
            fprintf(stderr, "seed %s does not decode: %s\n", path, err);
        SW_CHECK_INT(rc, SW_WIRE_OK);
        if (env && env->body_case > 0 && env->body_case < 64)
            seen[env->body_case] = 1;
        if (env)
            shardwire__envelope__free_unpacked(env, NULL);
        free(buf);
        n_files++;
    }
    closedir(d);
    /* every member of the Envelope's oneof, from the protobuf descriptor, so that a
     * message type added later needs its seed too */
    const ProtobufCMessageDescriptor *desc = &shardwire__envelope__descriptor;
    for (unsigned i = 0; i < desc->n_fields; i++) {
        const ProtobufCFieldDescriptor *fd = &desc->fields[i];
        if (!(fd->flags & PROTOBUF_C_FIELD_FLAG_ONEOF))
            continue;
        SW_CHECK(fd->id < 64);
        if (fd->id < 64 && !seen[fd->id])
            fprintf(stderr,
                    "the wire seed corpus has no '%s' message (regenerate it: see the top "
                    "of this file)\n",
                    fd->name);
        SW_CHECK(fd->id < 64 && seen[fd->id]);
    }
    printf("wire seed corpus: %d seeds, every message type present\n", n_files);
}

/* A tree Forward: draft 0 and 1 under the root, draft 2 under draft 0; the
 * previous round's path kept; every field refused when hostile. */
static void test_forward_tree(void)
{
    struct fwd_fixture x;
    s_fwd_init(&x);
    uint32_t parents[3] = {0, 0, 1}, kv_path[2] = {1, 3};
    x.f.n_draft_parents = 3;
    x.f.draft_parents = parents;
    x.d[1].n_tokens = x.d[1].n_probs = 0; // a later sibling: its first sibling's q applies
    x.dist_tok[0][1] = x.drafts[1];       // which gives it 1 - 0.5
    x.probs[1] = 0.5f;
    x.f.kv_path_from = 90;
    x.f.n_kv_path = 2;
    x.f.kv_path = kv_path;
    x.f.kv_keep = 92;
    Shardwire__Envelope *out = NULL;
    SW_CHECK_INT(s_roundtrip(&x.env, 1, FWD_BYTES, &out), SW_WIRE_OK);
    if (out) {
        SW_CHECK_INT(out->forward->n_draft_parents, 3);
        SW_CHECK_INT(out->forward->draft_parents[2], 1);
        SW_CHECK_INT(out->forward->draft_dists[1]->n_tokens, 0);
        SW_CHECK_INT(out->forward->kv_path_from, 90);
        SW_CHECK_INT(out->forward->n_kv_path, 2);
        SW_CHECK_INT(out->forward->kv_path[1], 3);
        shardwire__envelope__free_unpacked(out, NULL);
    }
    /* parents: 0 or K entries, each <= its draft index, siblings distinct */
    x.f.n_draft_parents = 2;
    SW_CHECK_INT(s_check(&x.env, 1, FWD_BYTES), SW_WIRE_EMALFORMED);
    x.f.n_draft_parents = 3;
    parents[2] = 3; // under itself
    SW_CHECK_INT(s_check(&x.env, 1, FWD_BYTES), SW_WIRE_EMALFORMED);
    parents[2] = 0xffffffffu;
    SW_CHECK_INT(s_check(&x.env, 1, FWD_BYTES), SW_WIRE_EMALFORMED);
    parents[2] = 1;
    x.drafts[1] = x.drafts[0]; // two root candidates with one token
    SW_CHECK_INT(s_check(&x.env, 1, FWD_BYTES), SW_WIRE_EMALFORMED);
    x.drafts[1] = 102;
    SW_CHECK_INT(s_check(&x.env, 1, FWD_BYTES), SW_WIRE_OK);
    /* an empty dist only for a later sibling */
    x.d[2].n_tokens = x.d[2].n_probs = 0; // draft 2 is the first child of draft 0
    SW_CHECK_INT(s_check(&x.env, 1, FWD_BYTES), SW_WIRE_EMALFORMED);
    x.d[2].n_tokens = x.d[2].n_probs = 2;
    x.f.n_draft_parents = 0; // a chain: draft 1 is no later sibling
    x.f.n_kv_path = 0;
    x.f.kv_path_from = 0;
    SW_CHECK_INT(s_check(&x.env, 1, FWD_BYTES), SW_WIRE_EMALFORMED);
    x.f.n_draft_parents = 3;
    x.f.n_kv_path = 2;
    x.f.kv_path_from = 90;
    SW_CHECK_INT(s_check(&x.env, 1, FWD_BYTES), SW_WIRE_OK);
    /* kv_path: increasing, kv_path[j] in [j, 64), kv_keep within it, from set only with it */
    kv_path[1] = 1;
    SW_CHECK_INT(s_check(&x.env, 1, FWD_BYTES), SW_WIRE_EMALFORMED);
    kv_path[1] = SW_WIRE_MAX_DRAFT;
    SW_CHECK_INT(s_check(&x.env, 1, FWD_BYTES), SW_WIRE_EMALFORMED);
    kv_path[1] = 3;
    x.f.kv_keep = 93;
    SW_CHECK_INT(s_check(&x.env, 1, FWD_BYTES), SW_WIRE_EMALFORMED);
    x.f.kv_keep = 92;
    x.f.kv_path_from = SW_WIRE_MAX_POS - 2;
    SW_CHECK_INT(s_check(&x.env, 1, FWD_BYTES), SW_WIRE_EMALFORMED);
    x.f.kv_path_from = 90;
    x.f.n_kv_path = SW_WIRE_MAX_DRAFT + 1;
    SW_CHECK_INT(s_check(&x.env, 1, FWD_BYTES), SW_WIRE_EMALFORMED);
    x.f.n_kv_path = 0;
    SW_CHECK_INT(s_check(&x.env, 1, FWD_BYTES), SW_WIRE_EMALFORMED); // from without a path
    x.f.kv_path_from = 0;
    SW_CHECK_INT(s_check(&x.env, 1, FWD_BYTES), SW_WIRE_OK);
}

/* x without draft_dists: every draft a point mass, so all-1 probs pass and any other does not
 * (as the head's greedy, n-gram and tree rounds say their drafts). */
static void s_point_masses(struct fwd_fixture *x)
{
    x->f.n_draft_probs = x->f.n_draft_dists = 0;
    SW_CHECK_INT(s_check(&x->env, 1, FWD_BYTES), SW_WIRE_OK);
    x->f.n_draft_probs = 3;
    x->probs[0] = x->probs[1] = x->probs[2] = 1.0f;
    SW_CHECK_INT(s_check(&x->env, 1, FWD_BYTES), SW_WIRE_OK);
    x->probs[1] = 0.6f;
    SW_CHECK_INT(s_check(&x->env, 1, FWD_BYTES), SW_WIRE_EMALFORMED);
}

/* Issue 40: a Forward's draft_probs and draft_dists held to the rule of the one stage that
 * reads them, the tail's verifier (engine/verify.c): what it would refuse with ERR_BAD_REQUEST
 * (or ignore) is malformed at the first hop, and what the head sends passes. */
static void test_forward_draft_q(void)
{
    struct fwd_fixture x;
    Shardwire__Envelope *out = NULL;
    /* the head's shapes: sampled drafts with their q (the fixture), greedy or n-gram drafts
     * without any (no probs, no dists), and point masses said as such (every prob 1) */
    s_fwd_init(&x);
    SW_CHECK_INT(s_check(&x.env, 1, FWD_BYTES), SW_WIRE_OK);
    s_point_masses(&x);
    /* draft_dists without draft_probs (the tail would ignore them) */
    s_fwd_init(&x);
    x.f.n_draft_probs = 0;
    SW_CHECK_INT(s_check(&x.env, 1, FWD_BYTES), SW_WIRE_EMALFORMED);
    SW_CHECK_INT(s_roundtrip(&x.env, 1, FWD_BYTES, &out), SW_WIRE_EMALFORMED); // nor sent
    SW_CHECK(out == NULL);
    /* a prob of 0, even where its distribution says 0 too */
    s_fwd_init(&x);
    x.probs[0] = 0.0f;
    x.dist_p[0][0] = 0.0f;
    SW_CHECK_INT(s_check(&x.env, 1, FWD_BYTES), SW_WIRE_EMALFORMED);
    /* a prob its distribution does not give its draft (within SW_DRAFT_Q_TOL passes) */
    s_fwd_init(&x);
    x.probs[1] = 0.3f;
    SW_CHECK_INT(s_check(&x.env, 1, FWD_BYTES), SW_WIRE_EMALFORMED);
    x.probs[1] = 0.6f + 5e-5f;
    SW_CHECK_INT(s_check(&x.env, 1, FWD_BYTES), SW_WIRE_OK);
    x.dist_tok[2][0] = 9; // draft 2 not among its distribution's tokens: q = 0
    SW_CHECK_INT(s_check(&x.env, 1, FWD_BYTES), SW_WIRE_EMALFORMED);
    /* an empty distribution is a point mass at its draft (as the verifier reads q with n 0):
     * its prob must be 1; a later sibling under a point-mass first sibling is one too (the
     * verifier takes exactly 1 there: engine/verify.c s_check_tree) */
    s_fwd_init(&x);
    x.d[1].n_tokens = x.d[1].n_probs = 0;
    SW_CHECK_INT(s_check(&x.env, 1, FWD_BYTES), SW_WIRE_EMALFORMED); // 0.6 is not 1
    x.probs[1] = 1.0f;
    SW_CHECK_INT(s_check(&x.env, 1, FWD_BYTES), SW_WIRE_OK);
    {
        uint32_t pm_parents[3] = {0, 0, 1};
        x.f.n_draft_parents = 3;
        x.f.draft_parents = pm_parents;
        x.d[0].n_tokens = x.d[0].n_probs = 0; // drafts 0 and 1 are siblings: 1's q under 0's
        x.probs[0] = 1.0f;
        SW_CHECK_INT(s_check(&x.env, 1, FWD_BYTES), SW_WIRE_OK);
        x.probs[1] = 1e-4f; // what the wire took before, and the tail then refused
        SW_CHECK_INT(s_check(&x.env, 1, FWD_BYTES), SW_WIRE_EMALFORMED);
    }
    /* a tree: a later sibling's prob is what its first sibling's distribution gives it */
    s_fwd_init(&x);
    uint32_t parents[3] = {0, 0, 1};
    x.f.n_draft_parents = 3;
    x.f.draft_parents = parents;
    x.d[1].n_tokens = x.d[1].n_probs = 0;
    x.dist_tok[0][1] = x.drafts[1]; // 1 - 0.5
    x.probs[1] = 0.5f;
    SW_CHECK_INT(s_check(&x.env, 1, FWD_BYTES), SW_WIRE_OK);
    x.probs[1] = 0.6f;
    SW_CHECK_INT(s_check(&x.env, 1, FWD_BYTES), SW_WIRE_EMALFORMED);
    x.d[1].n_tokens = x.d[1].n_probs = 2; // its own gives 0.6, but the verifier reads draft 0's
    SW_CHECK_INT(s_check(&x.env, 1, FWD_BYTES), SW_WIRE_EMALFORMED);
    x.probs[1] = 0.5f;
    SW_CHECK_INT(s_check(&x.env, 1, FWD_BYTES), SW_WIRE_OK);
    /* the head's tree rounds carry no q; point masses pass too, other probs do not */
    s_point_masses(&x);
    /* a round without drafts carries neither */
    s_fwd_init(&x);
    x.f.n_draft_tokens = x.f.n_draft_probs = x.f.n_draft_dists = 0;
    x.f.n_rows = x.f.n_tokens = 1;
    SW_CHECK_INT(s_check(&x.env, 1, 8 * 2), SW_WIRE_OK);
}

/* Version 7: the placement fields of PeerAnnounce and PlanAssign, each bound. */
static void test_placement(void)
{
    static char name[] = "auto-1", be[] = "cpu", fp[65];
    memcpy(fp, FP, 65);
    Shardwire__PeerAnnounce a = SHARDWIRE__PEER_ANNOUNCE__INIT;
    a.name = name;
    a.role = SHARDWIRE__ROLE__ROLE_MIDDLE;
    a.model_fingerprint = fp;
    a.n_layers = 30;
    a.backend = be;
    a.max_sessions = 2;
    a.hidden = 576;
    a.auto_place = 1; /* a standby: [0, 0) */
    a.mem_mib = 4096;
    a.us_layer_1 = 250;
    a.us_layer_k = 1900;
    a.probe_rows = 9;
    a.rtt_us = 180;
    a.kv_kib_layer = 768;
    a.us_out_1 = 1400;
    a.us_out_k = 12000;
    Shardwire__Envelope ea = SHARDWIRE__ENVELOPE__INIT;
    ea.body_case = SHARDWIRE__ENVELOPE__BODY_ANNOUNCE;
    ea.announce = &a;
    Shardwire__Envelope *out = NULL;
    SW_CHECK_INT(s_roundtrip(&ea, 0, 0, &out), SW_WIRE_OK);
    if (out) {
        SW_CHECK(out->announce->auto_place);
        SW_CHECK_INT(out->announce->us_layer_k, 1900);
        SW_CHECK_INT(out->announce->kv_kib_layer, 768);
        shardwire__envelope__free_unpacked(out, NULL);
    }
    a.auto_place = 0; /* [0, 0) without auto: no range */
    SW_CHECK_INT(s_check(&ea, 0, 0), SW_WIRE_EMALFORMED);
    a.auto_place = 1;
    a.role = SHARDWIRE__ROLE__ROLE_TAIL; /* a standby is a middle */
    SW_CHECK_INT(s_check(&ea, 0, 0), SW_WIRE_EMALFORMED);
    a.role = SHARDWIRE__ROLE__ROLE_MIDDLE;
    a.mem_mib = SW_WIRE_MAX_MEM_MIB + 1;
    SW_CHECK_INT(s_check(&ea, 0, 0), SW_WIRE_EMALFORMED);
    a.mem_mib = 4096;
    a.us_layer_1 = SW_WIRE_MAX_PROBE_US + 1;
    SW_CHECK_INT(s_check(&ea, 0, 0), SW_WIRE_EMALFORMED);
    a.us_layer_1 = 250;
    a.rtt_us = SW_WIRE_MAX_PROBE_US + 1;
    SW_CHECK_INT(s_check(&ea, 0, 0), SW_WIRE_EMALFORMED);
    a.rtt_us = 180;
    a.probe_rows = 1; /* 0 or 2..512 */
    SW_CHECK_INT(s_check(&ea, 0, 0), SW_WIRE_EMALFORMED);
    a.probe_rows = SW_WIRE_MAX_ROWS + 1;
    SW_CHECK_INT(s_check(&ea, 0, 0), SW_WIRE_EMALFORMED);
    a.probe_rows = 0; /* times without their rows */
    SW_CHECK_INT(s_check(&ea, 0, 0), SW_WIRE_EMALFORMED);
    a.probe_rows = 9;
    a.kv_kib_layer = SW_WIRE_MAX_KV_KIB_LAYER + 1;
    SW_CHECK_INT(s_check(&ea, 0, 0), SW_WIRE_EMALFORMED);
    a.kv_kib_layer = 768;
    a.layer_begin = 12; /* placed: a middle range */
    a.layer_end = 20;
    SW_CHECK_INT(s_check(&ea, 0, 0), SW_WIRE_OK);
    /* its KV cache (issue 33): bounded, kv_full <= max_sessions, a known type */
    a.n_ctx = 32768;
    a.kv_mib = 1024;
    a.kv_full = 2;
    a.kv_type = 1;
    SW_CHECK_INT(s_roundtrip(&ea, 0, 0, &out), SW_WIRE_OK);
    if (out) {
        SW_CHECK_INT(out->announce->n_ctx, 32768);
        SW_CHECK_INT(out->announce->kv_mib, 1024);
        SW_CHECK_INT(out->announce->kv_full, 2);
        SW_CHECK_INT(out->announce->kv_type, 1);
        shardwire__envelope__free_unpacked(out, NULL);
    }
    /* each field one past its bound (kv_full: more than max_sessions 2) is refused */
    uint32_t *const kv_field[4] = {&a.n_ctx, &a.kv_mib, &a.kv_full, &a.kv_type};
    const uint32_t kv_bad[4] = {SW_WIRE_MAX_POS + 1, SW_WIRE_MAX_MEM_MIB + 1, 3,
                                SW_WIRE_MAX_KV_TYPE + 1};
    for (int i = 0; i < 4; i++) {
        const uint32_t keep = *kv_field[i];
        *kv_field[i] = kv_bad[i];
        SW_CHECK_INT(s_check(&ea, 0, 0), SW_WIRE_EMALFORMED);
        *kv_field[i] = keep;
    }
    SW_CHECK_INT(s_check(&ea, 0, 0), SW_WIRE_OK);
    /* a client announces none of it */
    a.role = SHARDWIRE__ROLE__ROLE_CLIENT;
    a.layer_begin = a.layer_end = a.n_layers = 0;
    a.model_fingerprint = (char *)"";
    SW_CHECK_INT(s_check(&ea, 0, 0), SW_WIRE_EMALFORMED);

    /* PlanAssign: a range after the head's first layer, inside the model */
    Shardwire__PlanAssign pa = SHARDWIRE__PLAN_ASSIGN__INIT;
    pa.model_fingerprint = fp;
    pa.n_layers = 30;
    pa.layer_begin = 6;
    pa.layer_end = 30;
    pa.plan_us = 12000;
    Shardwire__Envelope ep = SHARDWIRE__ENVELOPE__INIT;
    ep.body_case = SHARDWIRE__ENVELOPE__BODY_PLAN_ASSIGN;
    ep.plan_assign = &pa;
    SW_CHECK_INT(s_roundtrip(&ep, 0, 0, &out), SW_WIRE_OK);
    if (out) {
        SW_CHECK_INT(out->plan_assign->layer_begin, 6);
        shardwire__envelope__free_unpacked(out, NULL);
    }
    SW_CHECK_INT(sw_wire_body_channel(&ep), SW_WIRE_CH_CLUSTER); /* node keys only */
    pa.layer_begin = 0; /* the head's layers are never assigned */
    SW_CHECK_INT(s_check(&ep, 0, 0), SW_WIRE_EMALFORMED);
    pa.layer_begin = 6;
    pa.layer_end = 31;
    SW_CHECK_INT(s_check(&ep, 0, 0), SW_WIRE_EMALFORMED);
    pa.layer_end = 6;
    SW_CHECK_INT(s_check(&ep, 0, 0), SW_WIRE_EMALFORMED);
    pa.layer_end = 30;
    pa.plan_us = SW_WIRE_MAX_PROBE_US + 1;
    SW_CHECK_INT(s_check(&ep, 0, 0), SW_WIRE_EMALFORMED);
    pa.plan_us = 0;
    fp[3] = 'x';
    SW_CHECK_INT(s_check(&ep, 0, 0), SW_WIRE_EMALFORMED);
    fp[3] = 'a';
    SW_CHECK_INT(s_check(&ep, 1, 8), SW_WIRE_EMALFORMED); /* no payload */
}

/* Spot checks (version 7): at most one hop digest per stage before the
 * receiver, fewer than SW_WIRE_MAX_ROUTE; a verdict's list bounded too. */
static void test_hop_digests(void)
{
    struct fwd_fixture x;
    s_fwd_init(&x);
    uint64_t dg[SW_WIRE_MAX_ROUTE + 1];
    for (int i = 0; i <= SW_WIRE_MAX_ROUTE; i++)
        dg[i] = 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1);
    x.f.n_hop_digests = 1;
    x.f.hop_digests = dg;
    Shardwire__Envelope *out = NULL;
    SW_CHECK_INT(s_roundtrip(&x.env, 1, FWD_BYTES, &out), SW_WIRE_OK);
    if (out) {
        SW_CHECK_INT(out->forward->n_hop_digests, 1);
        SW_CHECK(out->forward->hop_digests[0] == dg[0]);
        shardwire__envelope__free_unpacked(out, NULL);
    }
    x.f.n_hop_digests = 2; // more than the stages before hop 1
    SW_CHECK_INT(s_check(&x.env, 1, FWD_BYTES), SW_WIRE_EMALFORMED);
    x.f.hop = 2;
    SW_CHECK_INT(s_check(&x.env, 1, FWD_BYTES), SW_WIRE_OK);
    x.f.n_hop_digests = SW_WIRE_MAX_ROUTE; // never that many, whatever the hop
    x.f.hop = 2;
    SW_CHECK_INT(s_check(&x.env, 1, FWD_BYTES), SW_WIRE_EMALFORMED);

    uint32_t toks[1] = {9};
    Shardwire__Verdict v = SHARDWIRE__VERDICT__INIT;
    v.session_id = 3;
    v.round = 11;
    v.n_tokens = 1;
    v.tokens = toks;
    v.next_token = 9;
    v.n_hop_digests = SW_WIRE_MAX_ROUTE - 1;
    v.hop_digests = dg;
    Shardwire__Envelope env = SHARDWIRE__ENVELOPE__INIT;
    env.body_case = SHARDWIRE__ENVELOPE__BODY_VERDICT;
    env.verdict = &v;
    SW_CHECK_INT(s_roundtrip(&env, 0, 0, &out), SW_WIRE_OK);
    if (out) {
        SW_CHECK_INT(out->verdict->n_hop_digests, SW_WIRE_MAX_ROUTE - 1);
        SW_CHECK(out->verdict->hop_digests[SW_WIRE_MAX_ROUTE - 2] == dg[SW_WIRE_MAX_ROUTE - 2]);
        shardwire__envelope__free_unpacked(out, NULL);
    }
    v.n_hop_digests = SW_WIRE_MAX_ROUTE;
    SW_CHECK_INT(s_check(&env, 0, 0), SW_WIRE_EMALFORMED);

    /* SpotQuery / SpotReport (head <-> client): share in [0, 1], at most 16
     * nodes with valid names, avoid_s bounded */
    Shardwire__SpotQuery sq = SHARDWIRE__SPOT_QUERY__INIT;
    Shardwire__Envelope qe = SHARDWIRE__ENVELOPE__INIT;
    qe.body_case = SHARDWIRE__ENVELOPE__BODY_SPOT_QUERY;
    qe.spot_query = &sq;
    SW_CHECK_INT(s_roundtrip(&qe, 0, 0, &out), SW_WIRE_OK);
    if (out)
        shardwire__envelope__free_unpacked(out, NULL);
    static char nm[] = "mid-bad", bad_nm[] = "mid bad";
    Shardwire__SpotNode nd[SW_WIRE_MAX_SPOT_NODES + 1], *ndp[SW_WIRE_MAX_SPOT_NODES + 1];
    for (int i = 0; i <= SW_WIRE_MAX_SPOT_NODES; i++) {
        shardwire__spot_node__init(&nd[i]);
        nd[i].name = nm;
        nd[i].convicted = 1;
        nd[i].avoid_s = 3599;
        ndp[i] = &nd[i];
    }
    Shardwire__SpotReport sr = SHARDWIRE__SPOT_REPORT__INIT;
    sr.share = 0.25f;
    sr.sessions_checked = 3;
    sr.rounds_compared = 70;
    sr.mismatches = 1;
    sr.n_nodes = 1;
    sr.nodes = ndp;
    Shardwire__Envelope re = SHARDWIRE__ENVELOPE__INIT;
    re.body_case = SHARDWIRE__ENVELOPE__BODY_SPOT_REPORT;
    re.spot_report = &sr;
    SW_CHECK_INT(s_roundtrip(&re, 0, 0, &out), SW_WIRE_OK);
    if (out) {
        SW_CHECK_INT(out->spot_report->n_nodes, 1);
        SW_CHECK(!strcmp(out->spot_report->nodes[0]->name, "mid-bad"));
        SW_CHECK_INT(out->spot_report->rounds_compared, 70);
        shardwire__envelope__free_unpacked(out, NULL);
    }
    sr.share = 1.5f;
    SW_CHECK_INT(s_check(&re, 0, 0), SW_WIRE_EMALFORMED);
    sr.share = NAN;
    SW_CHECK_INT(s_check(&re, 0, 0), SW_WIRE_EMALFORMED);
    sr.share = 1;
    sr.n_nodes = SW_WIRE_MAX_SPOT_NODES + 1;
    SW_CHECK_INT(s_check(&re, 0, 0), SW_WIRE_EMALFORMED);
    sr.n_nodes = SW_WIRE_MAX_SPOT_NODES;
    SW_CHECK_INT(s_check(&re, 0, 0), SW_WIRE_OK);
    nd[3].avoid_s = SW_WIRE_MAX_SPOT_AVOID_S + 1;
    SW_CHECK_INT(s_check(&re, 0, 0), SW_WIRE_EMALFORMED);
    nd[3].avoid_s = 1;
    nd[5].name = bad_nm;
    SW_CHECK_INT(s_check(&re, 0, 0), SW_WIRE_EMALFORMED);
    nd[5].name = NULL;
    SW_CHECK_INT(s_check(&re, 0, 0), SW_WIRE_EMALFORMED);
    nd[5].name = nm;
    ndp[7] = NULL;
    SW_CHECK_INT(s_check(&re, 0, 0), SW_WIRE_EMALFORMED);
    ndp[7] = &nd[7];
    sr.n_nodes = 1;
}

int main(void)
{
    test_placement();
    test_forward_roundtrip();
    test_hop_digests();
    test_forward_refusals();
    test_forward_tree();
    test_forward_draft_q();
    test_other_messages();
    test_remaining_messages();
    test_seed_corpus();
    test_bad_bytes();
    test_framing();
    return sw_test_done();
}
