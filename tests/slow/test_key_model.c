/*
 * test_key_model.c - the allow-list binds every key to a role and a name, and
 * the relay, the head and the client library keep to it. A keyed cluster
 * (real relay, head 0:15 and tail 15:30 of SmolLM2, CURVE and sealing on) and
 * attackers holding client keys ("mal0".."mal16": "KEY client"):
 *
 *  - hijack: a client key announcing itself as a tail ("a-tail", a name that
 *    sorts first) or a head ("a-head"), with the model fingerprint anyone
 *    reads from `shardwire status`, is refused; the table marks the nodes,
 *    and only them, key-bound; `shardwire run` without --head gets the real
 *    head's exact tokens; with a second key-bound head it refuses to guess;
 *  - least privilege: a client cannot send a Forward (it holds no cluster
 *    key); one sealed with the access key is refused by the head; the relay
 *    passes nothing of a client's to a stage, nothing larger than a request,
 *    and no payload frame;
 *  - squat: the tail is killed and a client key keeps announcing "tail" (as
 *    a tail and as a client): refused every time, the restarted tail joins;
 *  - full table: one client key opens 40 connections: the relay's
 *    --max-conns-per-key get in, SW_RELAY_UNANNOUNCED_PER_KEY hear relay_full,
 *    the rest are refused in the handshake, and another client still gets in; 17 client keys fill
 * the table, and a restarted tail still joins while they keep asking (room is kept for the nodes of
 *    the allow-list).
 *
 * After each part the cluster answers exactly what `shardwire generate` does.
 */
#include "codec_pb.h"
#include "keys.h"
#include "peer.h"
#include "seal.h"
#include "sw_test.h"
#include "wire.h"

#include <jansson.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define N_GEN 12
#define N_MAL 17   /* attacker client keys */
#define PER_KEY 16 /* the relay's default --max-conns-per-key */
#define MAX_RAW 600

static char s_dir[64];
static char s_ep[64];
static char s_fp[65];
static const char *s_prompt = "The capital of France is";

static double s_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static const char *s_path(const char *name, const char *ext)
{
    static char buf[8][256];
    static int slot;
    char *p = buf[slot++ % 8];
    snprintf(p, 256, "%s/%s%s", s_dir, name, ext);
    return p;
}

/* `shardwire run` (head given or not): its exit code; tokens into got, stderr into *err. */
static int s_run(const char *head, int32_t *got, int *n_got, char **err)
{
    char n_gen[16];
    snprintf(n_gen, sizeof n_gen, "%d", N_GEN);
    char *argv[] = {(char *)sw_test_bin("shardwire"),
                    "run",
                    "--greedy",
                    "--relay",
                    s_ep,
                    "-p",
                    (char *)s_prompt,
                    "-n",
                    n_gen,
                    "--json",
                    "--timeout-s",
                    "60",
                    head ? "--head" : NULL,
                    (char *)head,
                    NULL};
    char *out = NULL;
    int rc = sw_test_run(argv, 90, &out, err);
    *n_got = sw_test_json_tokens(out, got, N_GEN + 8);
    free(out);
    return rc;
}

/* 1 when `shardwire run` gives exactly the reference tokens. */
static int s_exact(const int32_t *ref, int n_ref)
{
    int32_t got[N_GEN + 8];
    int n = 0;
    char *err = NULL;
    int rc = s_run(NULL, got, &n, &err);
    int ok = rc == 0 && n == n_ref && !memcmp(got, ref, sizeof(int32_t) * (size_t)n_ref);
    if (!ok)
        fprintf(stderr, "run (exit %d, %d tokens): %s\n", rc, n, err ? err : "");
    free(err);
    return ok;
}

/* A raw DEALER to the relay with the CURVE keys of `who`. */
static void *s_raw(void *ctx, const char *who)
{
    void *s = zmq_socket(ctx, ZMQ_DEALER);
    int zero = 0, tmo = 3000;
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(s, ZMQ_RCVTIMEO, &tmo, sizeof tmo);
    zmq_setsockopt(s, ZMQ_SNDTIMEO, &tmo, sizeof tmo);
    char pub[41], sec[41], relay[41], err[256];
    if (sw_keys_load_secret(s_path(who, ".key"), pub, sec, err, sizeof err) != 0 ||
        sw_keys_load_public(s_path("relay", ".pub"), relay, err, sizeof err) != 0)
        fprintf(stderr, "raw keys: %s\n", err);
    zmq_setsockopt(s, ZMQ_CURVE_SERVERKEY, relay, 41);
    zmq_setsockopt(s, ZMQ_CURVE_PUBLICKEY, pub, 41);
    zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, sec, 41);
    zmq_connect(s, s_ep);
    return s;
}

/* The next message on a raw socket that is not a probe, within the socket's receive timeout
 * (the relay's probes do not extend it): 0, or -1. */
static int s_raw_recv(void *s, sw_wire_msg_t *m)
{
    char err[256];
    int tmo = 3000;
    size_t len = sizeof tmo;
    zmq_getsockopt(s, ZMQ_RCVTIMEO, &tmo, &len);
    const double until = s_now() + tmo / 1e3;
    while (s_now() < until) {
        int rc = sw_wire_recv(s, 0, m, err, sizeof err);
        if (rc == SW_WIRE_OK)
            return 0;
        if (rc != SW_WIRE_PROBE)
            return -1;
    }
    return -1;
}

/* Announces on a raw socket as role with the cluster's fingerprint (layers [begin, end));
 * sends only when answer is 0. The relay's answer: 0 ack, an error code, -1 none. */
static int s_raw_announce(void *s, const char *name, int role, uint32_t begin, uint32_t end,
                          int answer)
{
    Shardwire__PeerAnnounce an = SHARDWIRE__PEER_ANNOUNCE__INIT;
    const int node = role != SHARDWIRE__ROLE__ROLE_CLIENT;
    an.name = (char *)name;
    an.role = role;
    an.backend = node ? "cpu" : "";
    an.model_fingerprint = node ? s_fp : "";
    an.layer_begin = begin;
    an.layer_end = end;
    an.n_layers = node ? 30 : 0;
    an.hidden = node ? 576 : 0;
    an.max_sessions = 8;
    Shardwire__Envelope env = SHARDWIRE__ENVELOPE__INIT;
    env.body_case = SHARDWIRE__ENVELOPE__BODY_ANNOUNCE;
    env.announce = &an;
    char err[256];
    if (sw_wire_send(s, SW_WIRE_RELAY_NAME, sw_envelope_of(&env), NULL, 0, 0, ZMQ_DONTWAIT, err,
                     sizeof err) != 0)
        return -1;
    if (!answer)
        return 0;
    sw_wire_msg_t m = {0};
    if (s_raw_recv(s, &m) != 0)
        return -1;
    int rc = -1;
    if (m.env->pb.body_case == SHARDWIRE__ENVELOPE__BODY_ANNOUNCE_ACK)
        rc = 0;
    else if (m.env->pb.body_case == SHARDWIRE__ENVELOPE__BODY_ERROR)
        rc = m.env->pb.error->code;
    sw_wire_msg_clear(&m);
    return rc;
}

/* Sends [dest][hdr of hdr_len bytes][payload of pl bytes]? raw; the relay's error code, or 0
 * when nothing came back within ms. */
static int s_raw_frames(void *s, const char *dest, size_t hdr_len, size_t pl, int ms)
{
    char *buf = calloc(1, hdr_len > pl ? hdr_len : pl);
    zmq_send(s, dest, strlen(dest), ZMQ_SNDMORE);
    zmq_send(s, buf, hdr_len, pl ? ZMQ_SNDMORE : 0);
    if (pl)
        zmq_send(s, buf, pl, 0);
    free(buf);
    zmq_setsockopt(s, ZMQ_RCVTIMEO, &ms, sizeof ms);
    sw_wire_msg_t m = {0};
    int rc = 0;
    if (s_raw_recv(s, &m) == 0) {
        if (m.env->pb.body_case == SHARDWIRE__ENVELOPE__BODY_ERROR)
            rc = m.env->pb.error->code;
        sw_wire_msg_clear(&m);
    }
    int tmo = 3000;
    zmq_setsockopt(s, ZMQ_RCVTIMEO, &tmo, sizeof tmo);
    return rc;
}

/* A client peer with who's key and the access key. */
static sw_peer_t *s_client(const char *who)
{
    sw_sec_args_t a = {.key_file = s_path(who, ".key"),
                       .relay_key = s_path("relay", ".pub"),
                       .access_key = {s_path("access.key", ""), NULL}};
    sw_sec_t sec;
    char err[512];
    if (sw_sec_load(&a, s_ep, &sec, err, sizeof err) != 0) {
        fprintf(stderr, "sec: %s\n", err);
        return NULL;
    }
    sw_msg_announce_t an = {0};
    an.name = who;
    an.role = SW_ROLE_CLIENT;
    an.backend = "";
    an.model_fingerprint = "";
    sw_peer_opts_t o = {.relay = s_ep, .announce = &an, .connect_timeout_ms = 5000, .sec = &sec};
    sw_peer_t *p = sw_peer_new(&o);
    sw_sec_wipe(&sec);
    return p;
}

/* The fingerprint and the key_bound marks from `shardwire status --json`: 1 when every node
 * and no client is marked. */
static int s_status_marks(void)
{
    char *argv[] = {(char *)sw_test_bin("shardwire"), "status", "--relay", s_ep, "--json", NULL};
    char *out = NULL;
    int ok = 0;
    if (sw_test_run(argv, 20, &out, NULL) == 0 && out) {
        json_error_t je;
        json_t *j = json_loads(out, 0, &je);
        json_t *peers = j ? json_object_get(j, "peers") : NULL;
        int nodes = 0, bad = 0;
        for (size_t i = 0; i < json_array_size(peers); i++) {
            json_t *p = json_array_get(peers, i);
            const char *role = json_string_value(json_object_get(p, "role"));
            int bound = json_is_true(json_object_get(p, "key_bound"));
            int node = role && strcmp(role, "client") != 0;
            nodes += node;
            bad += node != bound;
            const char *fp = json_string_value(json_object_get(p, "model"));
            if (node && fp && strlen(fp) == 64)
                snprintf(s_fp, sizeof s_fp, "%s", fp);
        }
        ok = nodes >= 2 && !bad;
        json_decref(j);
    }
    free(out);
    return ok;
}

/* Part 1: client keys cannot become nodes; run picks the key-bound head only. */
static void s_hijack(void *ctx, const int32_t *ref, int n_ref)
{
    void *m = s_raw(ctx, "mal0");
    SW_CHECK_INT(s_raw_announce(m, "a-tail", SHARDWIRE__ROLE__ROLE_TAIL, 15, 30, 1),
                 SHARDWIRE__ERROR_CODE__ERR_UNAUTHORIZED);
    SW_CHECK_INT(s_raw_announce(m, "a-head", SHARDWIRE__ROLE__ROLE_HEAD, 0, 15, 1),
                 SHARDWIRE__ERROR_CODE__ERR_UNAUTHORIZED);
    SW_CHECK_INT(s_raw_announce(m, "head", SHARDWIRE__ROLE__ROLE_CLIENT, 0, 0, 1),
                 SHARDWIRE__ERROR_CODE__ERR_UNAUTHORIZED); /* a node's name */
    /* a node key: only its own name, only as a node */
    void *t = s_raw(ctx, "spare");
    SW_CHECK_INT(s_raw_announce(t, "spare", SHARDWIRE__ROLE__ROLE_CLIENT, 0, 0, 1),
                 SHARDWIRE__ERROR_CODE__ERR_UNAUTHORIZED);
    SW_CHECK_INT(s_raw_announce(t, "a-spare", SHARDWIRE__ROLE__ROLE_TAIL, 15, 30, 1),
                 SHARDWIRE__ERROR_CODE__ERR_UNAUTHORIZED);
    zmq_close(t);
    SW_CHECK(s_status_marks());
    SW_CHECK(s_exact(ref, n_ref));
    /* a second key-bound head: run does not guess between them */
    void *h2 = s_raw(ctx, "head2");
    SW_CHECK_INT(s_raw_announce(h2, "head2", SHARDWIRE__ROLE__ROLE_HEAD, 0, 15, 1), 0);
    int32_t got[N_GEN + 8];
    int n = 0;
    char *err = NULL;
    SW_CHECK(s_run(NULL, got, &n, &err) != 0);
    SW_CHECK(err && strstr(err, "2 heads serve") && strstr(err, "--head"));
    free(err);
    zmq_close(h2);
    /* the client still marked the attacker's key as a client: it may make requests */
    SW_CHECK_INT(s_raw_announce(m, "mal0-client", SHARDWIRE__ROLE__ROLE_CLIENT, 0, 0, 1), 0);
    zmq_close(m);
}

/* A Forward of 2 rows for the tail: with a payload of hidden states, or tokens only. */
static Shardwire__Envelope *s_forward(int payload)
{
    static char *route[] = {"head", "tail"};
    static uint32_t toks[2] = {1, 2};
    static Shardwire__Forward f;
    static Shardwire__Envelope env;
    shardwire__forward__init(&f);
    shardwire__envelope__init(&env);
    f.session_id = 7;
    f.round = 1;
    f.n_rows = 2;
    f.n_tokens = 2;
    f.tokens = toks;
    f.hidden = payload ? 576 : 0;
    f.layer_begin = 15;
    f.n_route = 2;
    f.route = route;
    f.hop = 1;
    f.reply_to = "head";
    env.body_case = SHARDWIRE__ENVELOPE__BODY_FORWARD;
    env.forward = &f;
    return &env;
}

/* Part 2: what a client key can send. */
static void s_least_privilege(void *ctx)
{
    static float hidden[2 * 576];
    /* no cluster key: a client cannot even seal a Forward */
    sw_peer_t *p = s_client("mal1");
    SW_CHECK(p != NULL);
    if (p)
        SW_CHECK_INT(
            sw_peer_send(p, "tail", sw_envelope_of(s_forward(1)), hidden, sizeof hidden, 1),
            SW_WIRE_ESEAL);
    sw_peer_destroy(&p);
    /* sealed by hand with the access key and sent to the head: it opens it and refuses the
     * type on that channel */
    void *r = s_raw(ctx, "mal1");
    SW_CHECK_INT(s_raw_announce(r, "mal1r", SHARDWIRE__ROLE__ROLE_CLIENT, 0, 0, 1), 0);
    void *other = s_raw(ctx, "mal2");
    SW_CHECK_INT(s_raw_announce(other, "mal2r", SHARDWIRE__ROLE__ROLE_CLIENT, 0, 0, 1), 0);
    uint8_t ak[1][SW_CLUSTER_KEY_BYTES];
    char e[256];
    SW_CHECK_INT(sw_cluster_key_load(s_path("access.key", ""), ak[0], e, sizeof e), 0);
    sw_seal_t *seal = sw_seal_new(ak, 1, SW_SEAL_ACCESS);
    zmq_msg_t hdr, sh, sp;
    SW_CHECK_INT(sw_wire_encode(s_forward(0), 0, 0, &hdr, e, sizeof e), 0);
    SW_CHECK_INT(sw_seal_message(seal, "mal1r", "head", zmq_msg_data(&hdr), zmq_msg_size(&hdr),
                                 NULL, 0, 0, &sh, &sp),
                 0);
    zmq_send(r, "head", 4, ZMQ_SNDMORE);
    zmq_msg_send(&sh, r, 0);
    zmq_msg_close(&hdr);
    sw_seal_destroy(&seal);
    /* to a stage and to another client, a client sends nothing at all */
    SW_CHECK_INT(s_raw_frames(r, "tail", 100, 0, 2000), SHARDWIRE__ERROR_CODE__ERR_UNAUTHORIZED);
    SW_CHECK_INT(s_raw_frames(r, "mal2r", 100, 0, 2000), SHARDWIRE__ERROR_CODE__ERR_UNAUTHORIZED);
    /* to the head: nothing larger than a request, no payload frame */
    SW_CHECK_INT(s_raw_frames(r, "head", 3u << 20, 0, 3000), SHARDWIRE__ERROR_CODE__ERR_MALFORMED);
    SW_CHECK_INT(s_raw_frames(r, "head", 100, 4096, 3000), SHARDWIRE__ERROR_CODE__ERR_MALFORMED);
    zmq_close(r);
    zmq_close(other);
    usleep(500000);
    SW_CHECK(sw_test_count_in_file(sw_test_log("cluster.log"),
                                   "forward from mal1r sealed with the access key refused") >= 1);
}

/* Part 3: the tail dies; a client key tries to take its name until it is back. */
static void s_squat(void *ctx, pid_t *tail, const int32_t *ref, int n_ref)
{
    kill(*tail, SIGKILL);
    waitpid(*tail, NULL, 0);
    pid_t restarted = 0;
    int acks = 0, tries = 0, refused = 0;
    void *held = NULL;
    const double t0 = s_now();
    while (s_now() - t0 < 4.0) {
        void *m = s_raw(ctx, "mal3");
        const int client = tries % 2;
        int rc = client ? s_raw_announce(m, "tail", SHARDWIRE__ROLE__ROLE_CLIENT, 0, 0, 1)
                        : s_raw_announce(m, "tail", SHARDWIRE__ROLE__ROLE_TAIL, 15, 30, 1);
        refused += rc == SHARDWIRE__ERROR_CODE__ERR_UNAUTHORIZED;
        tries++;
        if (rc == 0 && !held) /* a squatter keeps what it took */
            held = m;
        else
            zmq_close(m);
        acks += rc == 0;
        if (!restarted && s_now() - t0 > 0.3)
            restarted =
                sw_test_node(s_ep, s_dir, "tail", "15:30", sw_test_log("cluster.log"), NULL);
    }
    printf("squat: %d announces of 'tail' by a client key while the tail was away: %d refused as "
           "unauthorized, %d taken\n",
           tries, refused, acks);
    SW_CHECK(tries >= 10);
    SW_CHECK_INT(acks, 0);
    SW_CHECK(refused >= tries - 2); /* the last ones may meet the restarted tail: name taken */
    if (held)
        zmq_close(held);
    *tail = restarted;
    SW_CHECK_INT(sw_test_wait_peers(s_ep, 2, 60), 0);
    SW_CHECK(waitpid(restarted, NULL, WNOHANG) == 0); /* not refused for its name */
    SW_CHECK(s_exact(ref, n_ref));
}

/* Part 4: client keys fill the table; another client and a restarted node still get in. */
static void s_full_table(void *ctx, pid_t *tail, const int32_t *ref, int n_ref)
{
    static void *raw[MAX_RAW];
    int n_raw = 0, in = 0, full = 0, none = 0;
    /* one key, 40 connections: 16 peers, 4 connections refused relay_full that stay (a key's
     * share of connections that have not announced), the rest refused in the handshake (no
     * answer; issue 21, finding 7) */
    for (int i = 0; i < 40 && n_raw < MAX_RAW; i++) {
        char name[32];
        snprintf(name, sizeof name, "flood0-%d", i);
        void *s = raw[n_raw++] = s_raw(ctx, "mal0");
        int tmo = 1000;
        zmq_setsockopt(s, ZMQ_RCVTIMEO, &tmo, sizeof tmo);
        int rc = s_raw_announce(s, name, SHARDWIRE__ROLE__ROLE_CLIENT, 0, 0, 1);
        in += rc == 0;
        full += rc == SHARDWIRE__ERROR_CODE__ERR_RELAY_FULL;
        none += rc == -1;
    }
    printf("full table: one client key, 40 connections: %d in, %d refused relay_full, %d refused "
           "in the handshake\n",
           in, full, none);
    SW_CHECK_INT(in, PER_KEY);
    SW_CHECK_INT(full, SW_RELAY_UNANNOUNCED_PER_KEY);
    SW_CHECK_INT(none, 40 - PER_KEY - SW_RELAY_UNANNOUNCED_PER_KEY);
    SW_CHECK(s_exact(ref, n_ref)); /* another client's key gets in */
    /* 16 more keys: the table fills with clients */
    int in2 = 0;
    for (int k = 1; k < N_MAL; k++) {
        char who[16];
        snprintf(who, sizeof who, "mal%d", k);
        for (int i = 0; i < PER_KEY && n_raw < MAX_RAW; i++) {
            char name[32];
            snprintf(name, sizeof name, "flood%d-%d", k, i);
            void *s = raw[n_raw++] = s_raw(ctx, who);
            in2 += s_raw_announce(s, name, SHARDWIRE__ROLE__ROLE_CLIENT, 0, 0, 1) == 0;
        }
    }
    printf("full table: %d keys hold %d peers\n", N_MAL, in + in2);
    /* head, tail, the clients, and room for the two nodes of the allow-list that are away
     * (head2, spare): full */
    SW_CHECK_INT(in + in2 + 2 + 2, SW_WIRE_MAX_PEERS);
    /* the tail restarts while every refused connection keeps asking (`shardwire status`
     * could not get in now: the tail's joining is read from the relay's log) */
    const char *log = sw_test_log("cluster.log");
    const int joined = sw_test_count_in_file(log, "peer tail joined");
    kill(*tail, SIGKILL);
    waitpid(*tail, NULL, 0);
    *tail = sw_test_node(s_ep, s_dir, "tail", "15:30", log, NULL);
    int took = 0;
    const double t0 = s_now();
    while (s_now() - t0 < 5.0) {
        for (int i = 0; i < n_raw; i++) {
            char name[32];
            snprintf(name, sizeof name, "late-%d", i);
            s_raw_announce(raw[i], name, SHARDWIRE__ROLE__ROLE_CLIENT, 0, 0, 0);
        }
        usleep(50000);
        for (int i = 0; i < n_raw; i++) { /* count what they got */
            sw_wire_msg_t m = {0};
            char err[256];
            while (sw_wire_recv(raw[i], ZMQ_DONTWAIT, &m, err, sizeof err) >= 0 && m.env) {
                took += m.env->pb.body_case == SHARDWIRE__ENVELOPE__BODY_ANNOUNCE_ACK &&
                        !strncmp(m.env->pb.announce_ack->name, "late-", 5);
                sw_wire_msg_clear(&m);
            }
        }
    }
    for (int i = 0; i < 600 && sw_test_count_in_file(log, "peer tail joined") == joined; i++)
        usleep(100000);
    printf("full table: while the tail restarted, %d of the crowd's announces got in\n", took);
    SW_CHECK_INT(took, 0);
    SW_CHECK_INT(sw_test_count_in_file(log, "peer tail joined"), joined + 1);
    SW_CHECK(waitpid(*tail, NULL, WNOHANG) == 0);
    for (int i = 0; i < n_raw; i++)
        zmq_close(raw[i]);
    usleep(2500000); /* the relay sees them gone */
    SW_CHECK(s_exact(ref, n_ref));
}

int main(void)
{
    const char *model = sw_test_model();
    char e[256];
    if (sw_keys_curve_check(e, sizeof e) != 0)
        sw_test_skip(e);
    signal(SIGPIPE, SIG_IGN);
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max; /* some 600 sockets below */
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    snprintf(s_dir, sizeof s_dir, "%s", sw_test_tmpdir());
    snprintf(s_ep, sizeof s_ep, "tcp://127.0.0.1:%d", sw_test_free_port());
    const char *nodes[] = {"head", "tail", "head2", "spare", NULL};
    const char *clients[N_MAL + 2] = {"client"};
    static char names[N_MAL][16];
    for (int i = 0; i < N_MAL; i++) {
        snprintf(names[i], sizeof names[i], "mal%d", i);
        clients[i + 1] = names[i];
    }
    SW_CHECK_INT(sw_test_keys(s_dir, nodes, clients), 0);
    int32_t ref[N_GEN + 8];
    int n_ref = sw_test_generate(model, s_prompt, N_GEN, ref, N_GEN + 8);
    SW_CHECK(n_ref > 0);

    const char *log = sw_test_log("cluster.log");
    /* connections that have not announced stay 60 s (not 10): part 4 counts them while it
     * opens 40 connections, which takes longer than 10 s on a loaded machine */
    static const char *const relay_flags[] = {"--announce-ms", "60000", NULL};
    pid_t relay = sw_test_relay(s_ep, s_dir, log, relay_flags);
    pid_t head = sw_test_node(s_ep, s_dir, "head", "0:15", log, NULL);
    pid_t tail = sw_test_node(s_ep, s_dir, "tail", "15:30", log, NULL);
    sw_test_client_env(s_dir, "client");
    SW_CHECK_INT(sw_test_wait_peers(s_ep, 2, 60), 0);
    SW_CHECK(s_status_marks());
    SW_CHECK_INT(strlen(s_fp), 64);
    void *ctx = zmq_ctx_new();
    zmq_ctx_set(ctx, ZMQ_MAX_SOCKETS, 4096);

    s_hijack(ctx, ref, n_ref);
    s_least_privilege(ctx);
    s_squat(ctx, &tail, ref, n_ref);
    s_full_table(ctx, &tail, ref, n_ref);

    zmq_ctx_term(ctx);
    sw_test_kill(head);
    sw_test_kill(tail);
    sw_test_kill(relay);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", s_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", s_dir);
    return sw_test_done();
}
