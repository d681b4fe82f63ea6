/*
 * sw_attack.h - helpers for the tests that attack a keyed cluster of real
 * processes (tests/net/test_route.c, test_fair.c, tests/slow/
 * test_relay_memory.c): peers holding a node key and the cluster key (a
 * compromised member) or a client key and the access key, the model
 * fingerprint anyone reads from `shardwire status`, and Forwards of any shape
 * with the answer they get. Keys come from sw_test_keys(). Header-only
 * (static functions) so that each test executable stays one .c file.
 */
#ifndef SW_ATTACK_H
#define SW_ATTACK_H

#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <sodium.h>
#include <zmq.h>

#include "client.h"
#include "codec_pb.h"
#include "keys.h"
#include "peer.h"
#include "sw_test.h"
#include "wire.h"

#define SWA_HIDDEN 576 /* SmolLM2-135M */
#define SWA_LAYERS 30
#define SWA_VERDICT 100 /* swa_shape: a Verdict came back */

typedef struct swa {
    const char *dir;        /* sw_test_keys' folder */
    const char *ep;         /* the relay */
    char fp[65];            /* the nodes' model fingerprint */
    const char *model_name; /* the model's name swa_member announces (NULL: none) */
} swa_t;

static __attribute__((unused)) const char *swa_path(const swa_t *a, const char *name,
                                                    const char *ext)
{
    static char buf[8][256];
    static int slot;
    char *p = buf[slot++ % 8];
    snprintf(p, 256, "%s/%s%s", a->dir, name, ext);
    return p;
}

/* The model fingerprint of the nodes, from `shardwire status --json` (anyone may read it);
 * 0 when found. */
static __attribute__((unused)) int swa_fingerprint(swa_t *a)
{
    char *argv[] = {
        (char *)sw_test_bin("shardwire"), "status", "--relay", (char *)a->ep, "--json", NULL};
    char *out = NULL;
    a->fp[0] = 0;
    if (sw_test_run(argv, 20, &out, NULL) == 0 && out) {
        const char *m = strstr(out, "\"model\":\"");
        while (m && m[9] == '"') /* a client's empty fingerprint */
            m = strstr(m + 9, "\"model\":\"");
        if (m)
            snprintf(a->fp, sizeof a->fp, "%.64s", m + 9);
    }
    free(out);
    return strlen(a->fp) == 64 ? 0 : -1;
}

/*
 * A keyed relay for an attack test: skips the test when libzmq lacks CURVE, makes a, keys
 * (sw_test_keys: nodes, clients, NULL-terminated or NULL) in a fresh folder held by dir (64
 * bytes) and a free loopback endpoint held by ep (64 bytes), and starts the relay with extra
 * arguments (or NULL), logging to relay.log. The relay's pid once it listens, or -1.
 */
static __attribute__((unused)) pid_t swa_relay(swa_t *a, char *dir, char *ep, const char **nodes,
                                               const char **clients, const char *const *extra)
{
    char e[256];
    if (sw_keys_curve_check(e, sizeof e) != 0)
        sw_test_skip(e);
    snprintf(dir, 64, "%s", sw_test_tmpdir());
    snprintf(ep, 64, "tcp://127.0.0.1:%d", sw_test_free_port());
    a->dir = dir;
    a->ep = ep;
    if (sw_test_keys(dir, nodes, clients) != 0)
        return -1;
    pid_t relay = sw_test_relay(ep, dir, sw_test_log("relay.log"), extra);
    return relay > 0 && sw_test_wait_listen(ep, 20) == 0 ? relay : -1;
}

/* Seconds on the monotonic clock. */
static __attribute__((unused)) double swa_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/*
 * A raw DEALER socket in ctx with `who`'s key, connecting to the relay (it announces
 * nothing): send and receive high-water marks sndhwm and rcvhwm (-1: libzmq's defaults),
 * redial interval redial_ms (-1: never), receive timeout rcvtimeo_ms and largest message
 * maxmsg (-1: none). Close it with zmq_close(); NULL when the keys do not load.
 */
static __attribute__((unused)) void *swa_raw_opts(const swa_t *a, void *ctx, const char *who,
                                                  int sndhwm, int rcvhwm, int redial_ms,
                                                  int rcvtimeo_ms, int64_t maxmsg)
{
    char pub[41], sec[41], rpub[41], err[256];
    if (sw_keys_load_secret(swa_path(a, who, ".key"), pub, sec, err, sizeof err) != 0 ||
        sw_keys_load_public(swa_path(a, "relay", ".pub"), rpub, err, sizeof err) != 0) {
        fprintf(stderr, "keys of %s: %s\n", who, err);
        return NULL;
    }
    void *d = zmq_socket(ctx, ZMQ_DEALER);
    int zero = 0;
    zmq_setsockopt(d, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(d, ZMQ_RECONNECT_IVL, &redial_ms, sizeof redial_ms);
    zmq_setsockopt(d, ZMQ_RCVTIMEO, &rcvtimeo_ms, sizeof rcvtimeo_ms);
    zmq_setsockopt(d, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg);
    if (sndhwm >= 0)
        zmq_setsockopt(d, ZMQ_SNDHWM, &sndhwm, sizeof sndhwm);
    if (rcvhwm >= 0)
        zmq_setsockopt(d, ZMQ_RCVHWM, &rcvhwm, sizeof rcvhwm);
    zmq_setsockopt(d, ZMQ_CURVE_SERVERKEY, rpub, 41);
    zmq_setsockopt(d, ZMQ_CURVE_PUBLICKEY, pub, 41);
    zmq_setsockopt(d, ZMQ_CURVE_SECRETKEY, sec, 41);
    sodium_memzero(sec, sizeof sec);
    zmq_connect(d, a->ep);
    return d;
}

/* A raw DEALER with `who`'s client key (swa_raw_opts): send high-water mark hwm, redial
 * interval redial_ms (-1: never). */
static __attribute__((unused)) void *swa_raw(const swa_t *a, void *ctx, const char *who, int hwm,
                                             int redial_ms)
{
    return swa_raw_opts(a, ctx, who, hwm, -1, redial_ms, -1, -1);
}

/*
 * A raw DEALER with `who`'s key (node or client; swa_raw_opts): queues of hwm messages each
 * way (0: libzmq's defaults; 1 for a sender keeps no backlog in this process, for a reader
 * makes it stop reading its TCP link when it does not read), receive timeout 3 s, frames up
 * to the wire's limit. It announces nothing (swa_raw_announce).
 */
static __attribute__((unused)) void *swa_raw_peer(const swa_t *a, void *ctx, const char *who,
                                                  int hwm)
{
    return swa_raw_opts(a, ctx, who, hwm > 0 ? hwm : -1, hwm > 0 ? hwm : -1, 100, 3000,
                        SW_WIRE_MAX_FRAME);
}

/* Announces raw socket s as a client, or (node) as a middle stage of [10, 20) of 30 with
 * model fingerprint fp; 0 when the relay acked within 5 s. */
static __attribute__((unused)) int swa_raw_announce(void *s, const char *name, int node,
                                                    const char *fp)
{
    Shardwire__PeerAnnounce an = SHARDWIRE__PEER_ANNOUNCE__INIT;
    an.name = (char *)name;
    an.role = node ? SHARDWIRE__ROLE__ROLE_MIDDLE : SHARDWIRE__ROLE__ROLE_CLIENT;
    an.backend = node ? "cpu" : "";
    an.model_fingerprint = node ? (char *)fp : "";
    an.layer_begin = node ? 10 : 0;
    an.layer_end = node ? 20 : 0;
    an.n_layers = node ? 30 : 0;
    an.hidden = node ? SWA_HIDDEN : 0;
    Shardwire__Envelope env = SHARDWIRE__ENVELOPE__INIT;
    env.body_case = SHARDWIRE__ENVELOPE__BODY_ANNOUNCE;
    env.announce = &an;
    char err[256];
    if (sw_wire_send(s, SW_WIRE_RELAY_NAME, sw_envelope_of(&env), NULL, 0, 0, 0, err, sizeof err) !=
        0)
        return -1;
    for (const double until = swa_now() + 5; swa_now() < until;) {
        sw_wire_msg_t m = {0};
        int rc = sw_wire_recv(s, 0, &m, err, sizeof err);
        if (rc == SW_WIRE_PROBE)
            continue; /* the relay's probes: the answer is still to come */
        int ok = rc == SW_WIRE_OK && m.env->pb.body_case == SHARDWIRE__ENVELOPE__BODY_ANNOUNCE_ACK;
        sw_wire_msg_clear(&m);
        return ok ? 0 : -1;
    }
    return -1;
}

/* Messages the relay forwarded to `name` so far (out: PeerInfo.msgs_out), or took from it for
 * other peers (!out: msgs_in, counted before any limit), from its table as the peer obs reads
 * it; -1 when the table or the peer is missing. */
static __attribute__((unused)) long swa_msgs(sw_peer_t *obs, const char *name, int out_not_in)
{
    sw_wire_msg_t t = {0};
    long out = -1;
    if (sw_peer_status(obs, &t, 3000) != 0)
        return -1;
    sw_msg_t d;
    if (sw_codec_decode(&t, SW_MSG_PEER_TABLE, &d, NULL, 0) == 0)
        for (uint32_t i = 0; i < d.table.n_peers; i++) {
            sw_msg_peer_t p;
            if (sw_codec_peer_at(&d.table, i, &p) == 0 && !strcmp(p.announce.name, name))
                out = (long)(out_not_in ? p.msgs_out : p.msgs_in);
        }
    sw_wire_msg_clear(&t);
    return out;
}

/* Starts `shardwire serve` on 127.0.0.1:port with client `who`'s keys and the access key,
 * the API keys in api_keys (one per line, written to the test folder's api.keys, 0600),
 * logging to log: its pid, or -1. */
static __attribute__((unused)) pid_t swa_serve(const swa_t *a, const char *who, int port,
                                               const char *api_keys, const char *log)
{
    char keyfile[256], listen[32];
    snprintf(keyfile, sizeof keyfile, "%s/api.keys", a->dir);
    snprintf(listen, sizeof listen, "127.0.0.1:%d", port);
    FILE *kf = fopen(keyfile, "w");
    if (!kf || fputs(api_keys, kf) < 0 || fclose(kf) != 0 || chmod(keyfile, 0600) != 0)
        return -1;
    char *argv[] = {(char *)sw_test_bin("shardwire"),
                    "serve",
                    "--relay",
                    (char *)a->ep,
                    "--key",
                    (char *)swa_path(a, who, ".key"),
                    "--relay-key",
                    (char *)swa_path(a, "relay", ".pub"),
                    "--access-key",
                    (char *)swa_path(a, "access.key", ""),
                    "--listen",
                    listen,
                    "--api-key-file",
                    keyfile,
                    NULL};
    return sw_test_spawn(argv, log);
}

/* Removes the test's folder (swa_relay's dir) and what it holds. */
static __attribute__((unused)) void swa_rmdir(const char *dir)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
}

/* Resident memory of pid, KiB (-1: unknown). */
static __attribute__((unused)) long swa_rss_kb(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %ld kB", &kb) == 1)
            break;
    if (f)
        fclose(f);
    return kb;
}

/* A peer with `who`'s node key and the cluster key, announced as a head of layers [0, end),
 * or (begin > 0) a middle stage of [begin, end): what a compromised node can do. */
static __attribute__((unused)) sw_peer_t *swa_member(const swa_t *a, const char *who,
                                                     uint32_t begin, uint32_t end)
{
    sw_sec_args_t sa = {.key_file = swa_path(a, who, ".key"),
                        .relay_key = swa_path(a, "relay", ".pub"),
                        .cluster_key = {swa_path(a, "cluster.key", ""), NULL},
                        .role = SW_SEC_STAGE};
    sw_sec_t sec;
    char err[512];
    if (sw_sec_load(&sa, a->ep, &sec, err, sizeof err) != 0) {
        fprintf(stderr, "member keys: %s\n", err);
        return NULL;
    }
    sw_msg_announce_t an = {0};
    an.name = who;
    an.role = begin ? SW_ROLE_MIDDLE : SW_ROLE_HEAD;
    an.model_fingerprint = (char *)a->fp;
    an.model_name = a->model_name ? a->model_name : "";
    an.layer_begin = begin;
    an.layer_end = end;
    an.n_layers = SWA_LAYERS;
    an.backend = "cpu";
    an.max_sessions = 1;
    an.hidden = SWA_HIDDEN;
    sw_peer_opts_t o = {.relay = a->ep, .announce = &an, .connect_timeout_ms = 5000, .sec = &sec};
    sw_peer_t *p = sw_peer_new(&o);
    sw_sec_wipe(&sec);
    return p;
}

/* A client of the client library with `who`'s client key and the access key, joined through
 * ep (NULL: a->ep, the relay) within 10 s; NULL after a line on stderr. Free it with
 * sw_client_destroy(). */
static __attribute__((unused)) sw_client_t *swa_client_lib(const swa_t *a, const char *who,
                                                           const char *ep)
{
    sw_sec_args_t sa = {.key_file = swa_path(a, who, ".key"),
                        .relay_key = swa_path(a, "relay", ".pub"),
                        .access_key = {swa_path(a, "access.key", ""), NULL}};
    sw_sec_t sec;
    char err[512];
    if (sw_sec_load(&sa, ep ? ep : a->ep, &sec, err, sizeof err) != 0) {
        fprintf(stderr, "%s keys: %s\n", who, err);
        return NULL;
    }
    sw_client_opts_t o = {
        .relay = ep ? ep : a->ep, .sec = &sec, .name = who, .connect_timeout_ms = 10000};
    sw_client_t *c = sw_client_new(&o, err, sizeof err);
    sw_sec_wipe(&sec);
    if (!c)
        fprintf(stderr, "%s: %s\n", who, err);
    return c;
}

/* Up to SWA_REQS_MAX requests of one client in flight, each to give the tokens ref (cap of
 * them): swa_reqs_take files each event of theirs, keeping its tokens in got (the caller's
 * n x cap array), and counts the requests that gave a token, that ended, and that ended with
 * ref's tokens; t_done is swa_now() when the first one ended (-1 before). */
#define SWA_REQS_MAX 8
typedef struct {
    int n, cap;
    const int32_t *ref;
    int32_t *got;
    const char *who; /* named in the line of a failed request */
    char ids[SWA_REQS_MAX][SW_CLIENT_ID_LEN];
    int n_got[SWA_REQS_MAX];
    int first, done, exact;
    double t_done;
} swa_reqs_t;

/* The index of the request ev belongs to (its tokens kept, its end counted), or -1. */
static __attribute__((unused)) int swa_reqs_take(swa_reqs_t *r, const sw_client_event_t *ev)
{
    for (int k = 0; k < r->n; k++) {
        if (strcmp(ev->id, r->ids[k]) != 0)
            continue;
        int32_t *got = r->got + (size_t)k * (size_t)r->cap;
        r->first += r->n_got[k] == 0 && ev->n_tokens > 0;
        for (int j = 0; j < ev->n_tokens && r->n_got[k] < r->cap; j++)
            got[r->n_got[k]++] = (int32_t)ev->tokens[j];
        if (ev->type == SW_CLIENT_EV_ERROR)
            fprintf(stderr, "%s's request %d failed: %s\n", r->who, k, ev->message);
        if (ev->type == SW_CLIENT_EV_DONE || ev->type == SW_CLIENT_EV_ERROR) {
            r->done++;
            if (r->t_done < 0)
                r->t_done = swa_now();
            r->exact += ev->type == SW_CLIENT_EV_DONE && r->n_got[k] == r->cap &&
                        !memcmp(got, r->ref, (size_t)r->cap * sizeof *got);
        }
        return k;
    }
    return -1;
}

/* Takes c's events until every request of r has given a token or timeout_s passed: how many
 * have. */
static __attribute__((unused)) int swa_reqs_first(swa_reqs_t *r, sw_client_t *c, double timeout_s)
{
    const double t0 = swa_now();
    while (r->first < r->n && swa_now() - t0 < timeout_s) {
        sw_client_event_t ev;
        if (sw_client_next(c, &ev, 100) == 0)
            swa_reqs_take(r, &ev);
    }
    return r->first;
}

/* A client peer with `who`'s client key and the access key, announced as name (one key may
 * hold several connections, each under its own name). */
static __attribute__((unused)) sw_peer_t *swa_client_named(const swa_t *a, const char *who,
                                                           const char *name)
{
    sw_sec_args_t sa = {.key_file = swa_path(a, who, ".key"),
                        .relay_key = swa_path(a, "relay", ".pub"),
                        .access_key = {swa_path(a, "access.key", ""), NULL}};
    sw_sec_t sec;
    char err[512];
    if (sw_sec_load(&sa, a->ep, &sec, err, sizeof err) != 0) {
        fprintf(stderr, "client keys: %s\n", err);
        return NULL;
    }
    sw_msg_announce_t an = {0};
    an.name = name;
    an.role = SW_ROLE_CLIENT;
    an.backend = "";
    an.model_fingerprint = "";
    sw_peer_opts_t o = {.relay = a->ep,
                        .announce = &an,
                        .connect_timeout_ms = 5000,
                        .sec = &sec,
                        .accept_clear_errors = 1};
    sw_peer_t *p = sw_peer_new(&o);
    sw_sec_wipe(&sec);
    return p;
}

/* A client peer with `who`'s client key and the access key, announced as who. */
static __attribute__((unused)) sw_peer_t *swa_client(const swa_t *a, const char *who)
{
    return swa_client_named(a, who, who);
}

/* Sends one Forward of `rows` f32 rows of hidden (rows x SWA_HIDDEN floats), no tokens, from p
 * to dest: session sid, round, layer_begin, the route {route[0], route[1]} at hop 1, replies to
 * route[0]; 0 when it was queued. For budgets and queues: what they hold, not what a stage does. */
static __attribute__((unused)) int swa_forward_rows(sw_peer_t *p, const char *dest,
                                                    const char *const route[2],
                                                    uint32_t layer_begin, uint64_t sid,
                                                    uint64_t round, int rows, const float *hidden)
{
    Shardwire__Forward f = SHARDWIRE__FORWARD__INIT;
    f.session_id = sid;
    f.round = round;
    f.n_rows = (uint32_t)rows;
    f.dtype = SHARDWIRE__DTYPE__DTYPE_F32;
    f.hidden = SWA_HIDDEN;
    f.layer_begin = layer_begin;
    f.n_route = 2;
    f.route = (char **)route;
    f.hop = 1;
    f.reply_to = (char *)route[0];
    Shardwire__Envelope env = SHARDWIRE__ENVELOPE__INIT;
    env.body_case = SHARDWIRE__ENVELOPE__BODY_FORWARD;
    env.forward = &f;
    return sw_peer_send(p, dest, sw_envelope_of(&env), hidden,
                        (size_t)rows * SWA_HIDDEN * sizeof *hidden, 1);
}

/*
 * Sends one Forward of 2 rows (f32 hidden states, tokens {1, last}) from p to dest:
 * layer_begin, the route (n names), hop and reply_to; with draft != 0 the second row is a
 * draft of token `last` = draft (a draft outside the vocabulary fails verification at the
 * tail). Returns what came back within 3 s: the code of an Error from dest, SWA_VERDICT for
 * a Verdict, -1 for nothing (-2: not sent).
 */
static __attribute__((unused)) int swa_shape(sw_peer_t *p, const char *dest, uint32_t layer_begin,
                                             const char **route, int n, uint32_t hop,
                                             const char *reply_to, uint64_t sid, uint32_t draft)
{
    static float hidden[2 * SWA_HIDDEN];
    uint32_t toks[2] = {1, draft ? draft : 2}, drafts[1] = {draft};
    Shardwire__Forward f = SHARDWIRE__FORWARD__INIT;
    f.session_id = sid;
    f.round = 1;
    f.n_rows = 2;
    f.n_tokens = 2;
    f.tokens = toks;
    f.n_draft_tokens = draft ? 1 : 0;
    f.draft_tokens = drafts;
    f.dtype = SHARDWIRE__DTYPE__DTYPE_F32;
    f.hidden = SWA_HIDDEN;
    f.layer_begin = layer_begin;
    f.n_route = (size_t)n;
    f.route = (char **)route;
    f.hop = hop;
    f.reply_to = (char *)reply_to;
    Shardwire__Envelope env = SHARDWIRE__ENVELOPE__INIT;
    env.body_case = SHARDWIRE__ENVELOPE__BODY_FORWARD;
    env.forward = &f;
    if (sw_peer_send(p, dest, sw_envelope_of(&env), hidden, sizeof hidden, 1) != 0)
        return -2;
    int wait_ms = 3000;
    for (;;) {
        sw_wire_msg_t m = {0};
        if (sw_peer_recv(p, &m, wait_ms) != 0)
            return -1;
        int got = -1;
        if (!strcmp(m.peer, dest) && m.env->pb.body_case == SHARDWIRE__ENVELOPE__BODY_ERROR)
            got = m.env->pb.error->code;
        else if (m.env->pb.body_case == SHARDWIRE__ENVELOPE__BODY_VERDICT &&
                 m.env->pb.verdict->session_id == sid)
            got = SWA_VERDICT;
        sw_wire_msg_clear(&m);
        if (got != -1)
            return got;
        wait_ms = 1000;
    }
}

/* Node `name` in the head's spot-check report (`shardwire status --spot head --json` at
 * ep): 1 when listed (*convicted, *avoid_s: its mark and seconds left), 0 when not, -1 when
 * the head did not answer; *rounds (NULL: not wanted) its rounds compared. */
static __attribute__((unused)) int swa_spot_node(const char *ep, const char *name, int *convicted,
                                                 long *avoid_s, long long *rounds)
{
    char *argv[] = {(char *)sw_test_bin("shardwire"),
                    "status",
                    "--relay",
                    (char *)ep,
                    "--spot",
                    "head",
                    "--json",
                    NULL};
    char *out = NULL;
    int v = -1;
    *convicted = 0;
    if (sw_test_run(argv, 20, &out, NULL) == 0 && out) {
        json_t *j = json_loads(out, 0, NULL);
        json_t *spot = j ? json_object_get(j, "spot") : NULL;
        json_t *nodes = spot ? json_object_get(spot, "nodes") : NULL;
        if (nodes) {
            v = 0;
            if (rounds)
                *rounds = (long long)json_integer_value(json_object_get(spot, "rounds_compared"));
        }
        for (size_t i = 0; nodes && i < json_array_size(nodes); i++) {
            json_t *nd = json_array_get(nodes, i);
            const char *nm = json_string_value(json_object_get(nd, "name"));
            if (nm && !strcmp(nm, name)) {
                v = 1;
                *convicted = json_is_true(json_object_get(nd, "convicted"));
                if (avoid_s)
                    *avoid_s = (long)json_integer_value(json_object_get(nd, "avoid_s"));
            }
        }
        json_decref(j);
    }
    free(out);
    return v;
}

/* A TCP connection to 127.0.0.1:port bound to the source address 127.0.0.0 | addr (host
 * order: 0x0105 is 127.0.1.5), reads timing out after timeout_s; -1 when it could not connect. */
static __attribute__((unused)) int swa_tcp_from(int port, uint32_t addr, int timeout_s)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in src = {.sin_family = AF_INET};
    src.sin_addr.s_addr = htonl(0x7f000000u | addr);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct timeval tv = {.tv_sec = timeout_s};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (bind(fd, (struct sockaddr *)&src, sizeof src) != 0 ||
        connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* 1 while the server has not closed fd (nothing to read yet, no end of stream). */
static __attribute__((unused)) int swa_tcp_open(int fd)
{
    char b;
    ssize_t r = recv(fd, &b, 1, MSG_DONTWAIT);
    return r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

/* GET /health on 127.0.0.1:port from source address addr (swa_tcp_from): the HTTP status
 * (0 = no answer within timeout_s). */
static __attribute__((unused)) int swa_http_health(int port, uint32_t addr, int timeout_s)
{
    int fd = swa_tcp_from(port, addr, timeout_s);
    if (fd < 0)
        return 0;
    const char *req = "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    int status = 0;
    if (write(fd, req, strlen(req)) == (ssize_t)strlen(req)) {
        char line[64] = "";
        ssize_t r = read(fd, line, sizeof line - 1);
        if (r > 0)
            line[r] = 0;
        if (sscanf(line, "HTTP/1.%*d %d", &status) != 1)
            status = 0;
    }
    close(fd);
    return status;
}

/* GET /health on fd, an open connection (swa_tcp_from), kept alive (no "Connection: close"):
 * reads the whole answer (its headers and Content-Length bytes of body) and leaves fd open for
 * the next request. The HTTP status, 0 when no whole answer came within fd's timeout. */
static __attribute__((unused)) int swa_http_health_keep(int fd)
{
    const char *req = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
    if (fd < 0 || send(fd, req, strlen(req), MSG_NOSIGNAL) != (ssize_t)strlen(req))
        return 0;
    char buf[4096];
    size_t len = 0;
    for (;;) {
        ssize_t r = recv(fd, buf + len, sizeof buf - 1 - len, 0);
        if (r <= 0)
            return 0;
        len += (size_t)r;
        buf[len] = 0;
        const char *end = strstr(buf, "\r\n\r\n");
        const char *cl = strstr(buf, "\r\nContent-Length: ");
        if (end && len >= (size_t)(end + 4 - buf) + (cl ? strtoul(cl + 18, NULL, 10) : 0))
            break;
        if (len == sizeof buf - 1)
            return 0;
    }
    int status = 0;
    return sscanf(buf, "HTTP/1.%*d %d", &status) == 1 ? status : 0;
}

#endif
