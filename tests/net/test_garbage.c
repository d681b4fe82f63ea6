/*
 * test_garbage.c - hostile traffic while a good session generates.
 *
 * A relay and two stages run with CURVE and the cluster key (real processes,
 * real sockets). While `shardwire run` generates, three flooders send
 * thousands of frames:
 *  - "mallory": an authenticated client key (no cluster or access key): random
 *    multipart messages (1..5 frames, random sizes and bytes, valid and
 *    invalid names), mutated clear Envelopes to the relay and to the stages,
 *    and random "sealed-looking" frames to the stages (the relay passes only
 *    what goes to the head, of a request's size);
 *  - "member": a peer holding the cluster key (a compromised member): mutated
 *    Forward / Verdict / SessionClose / Error envelopes, properly sealed, to
 *    the tail, every 16th a whole Forward whose hop lies past its route, and
 *    each of them again (replays);
 *  - "outsiders": connections without CURVE, with an unknown CURVE key, and
 *    raw TCP writing random bytes to the relay port.
 * Nothing may crash or hang, and every good session's tokens must equal
 * `shardwire generate` exactly. Bounded to about a minute.
 */
#include "codec_pb.h"
#include "keys.h"
#include "seal.h"
#include "sw_test.h"
#include "wire.h"

#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define N_GEN 32
#define N_RUNS 3
#define FLOOD_MAX_S 70

static char s_dir[64];
static char s_ep[64];
static int s_port;
static volatile sig_atomic_t s_quit;

static void s_on_term(int sig)
{
    (void)sig;
    s_quit = 1;
}

static double s_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static const char *s_path(const char *name)
{
    static char buf[16][256];
    static int slot;
    char *p = buf[slot++ % 16];
    snprintf(p, 256, "%s/%s", s_dir, name);
    return p;
}

/* xorshift64*: reproducible garbage from a printed seed. */
static uint64_t s_rng;
static uint64_t s_rand(void)
{
    s_rng ^= s_rng >> 12;
    s_rng ^= s_rng << 25;
    s_rng ^= s_rng >> 27;
    return s_rng * 0x2545F4914F6CDD1DULL;
}

static void s_fill(uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)s_rand();
}

static size_t s_rand_size(void)
{
    uint64_t r = s_rand() % 100;
    if (r < 60)
        return s_rand() % 64;
    if (r < 95)
        return s_rand() % 2048;
    return s_rand() % (256 << 10);
}

static void s_mutate(uint8_t *p, size_t n)
{
    int flips = 1 + (int)(s_rand() % 4);
    for (int i = 0; n && i < flips; i++) {
        size_t at = s_rand() % n;
        switch (s_rand() % 3) {
        case 0:
            p[at] ^= (uint8_t)(1u << (s_rand() % 8));
            break;
        case 1:
            p[at] = (uint8_t)s_rand();
            break;
        default:
            p[at] = (uint8_t)(p[at] + 1);
            break;
        }
    }
}

/* Reads and drops whatever the relay sent back (so our queue never fills). */
static void s_drain(void *s)
{
    for (int i = 0; i < 1000; i++) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        int rc = zmq_msg_recv(&m, s, ZMQ_DONTWAIT);
        zmq_msg_close(&m);
        if (rc < 0)
            return;
    }
}

static void *s_dealer(void *ctx, const char *who)
{
    void *s = zmq_socket(ctx, ZMQ_DEALER);
    int zero = 0, hwm = 1000;
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(s, ZMQ_SNDHWM, &hwm, sizeof hwm);
    if (who) {
        char pub[41], sec[41], relay[41], err[256], key[256];
        snprintf(key, sizeof key, "%s.key", s_path(who));
        if (sw_keys_load_secret(key, pub, sec, err, sizeof err) == 0 &&
            sw_keys_load_public(s_path("relay.pub"), relay, err, sizeof err) == 0) {
            zmq_setsockopt(s, ZMQ_CURVE_SERVERKEY, relay, 41);
            zmq_setsockopt(s, ZMQ_CURVE_PUBLICKEY, pub, 41);
            zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, sec, 41);
        }
    }
    zmq_connect(s, s_ep);
    return s;
}

/* Announces name as a client, or (node) as a middle stage of layers [10, 15) of 30 (a node
 * key may announce as nothing else). */
static void s_announce(void *s, const char *name, int node)
{
    Shardwire__PeerAnnounce an = SHARDWIRE__PEER_ANNOUNCE__INIT;
    an.name = (char *)name;
    an.role = node ? SHARDWIRE__ROLE__ROLE_MIDDLE : SHARDWIRE__ROLE__ROLE_CLIENT;
    an.backend = node ? "cpu" : "";
    an.model_fingerprint =
        node ? "5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e" : "";
    an.layer_begin = node ? 10 : 0;
    an.layer_end = node ? 15 : 0;
    an.n_layers = node ? 30 : 0;
    an.hidden = node ? 576 : 0;
    Shardwire__Envelope env = SHARDWIRE__ENVELOPE__INIT;
    env.body_case = SHARDWIRE__ENVELOPE__BODY_ANNOUNCE;
    env.announce = &an;
    char err[256];
    for (int i = 0; i < 50; i++) { /* until the handshake is through */
        if (sw_wire_send(s, SW_WIRE_RELAY_NAME, sw_envelope_of(&env), NULL, 0, 0, ZMQ_DONTWAIT, err,
                         sizeof err) == 0)
            break;
        usleep(20000);
    }
    usleep(100000);
    s_drain(s);
}

static const char *s_dest(void)
{
    static const char *const d[] = {"relay",  "stage0", "stage1", "nobody", "stage0",
                                    "stage1", "relay",  "",       "x/y",    "\xff\xfe"};
    return d[s_rand() % (sizeof d / sizeof d[0])];
}

/* An Envelope of kind 0-5 (a Forward at hop `hop` of its two-stage route, a Verdict, a
 * SessionClose, an Announce, a StatusQuery, an Error), packed. */
static size_t s_envelope(uint8_t *buf, size_t cap, int kind, uint32_t hop)
{
    Shardwire__Envelope env = SHARDWIRE__ENVELOPE__INIT;
    env.version = SW_WIRE_VERSION;
    Shardwire__Forward f = SHARDWIRE__FORWARD__INIT;
    Shardwire__Verdict v = SHARDWIRE__VERDICT__INIT;
    Shardwire__SessionClose sc = SHARDWIRE__SESSION_CLOSE__INIT;
    Shardwire__PeerAnnounce an = SHARDWIRE__PEER_ANNOUNCE__INIT;
    Shardwire__StatusQuery sq = SHARDWIRE__STATUS_QUERY__INIT;
    Shardwire__Error er = SHARDWIRE__ERROR__INIT;
    uint32_t toks[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    char *route[] = {"stage0", "stage1"};
    switch (kind) {
    case 0:
        f.session_id = s_rand() | 1;
        f.round = s_rand() % 100;
        f.start_pos = (uint32_t)(s_rand() % 1000);
        f.kv_keep = f.start_pos;
        f.n_rows = 1 + (uint32_t)(s_rand() % 8);
        f.n_tokens = f.n_rows;
        f.tokens = toks;
        f.n_route = 2;
        f.route = route;
        f.hop = hop;
        f.layer_begin = 15;
        f.reply_to = "mallory";
        env.body_case = SHARDWIRE__ENVELOPE__BODY_FORWARD;
        env.forward = &f;
        break;
    case 1:
        v.session_id = s_rand() | 1;
        v.n_accepted = 0;
        v.n_tokens = 1;
        v.tokens = toks;
        v.next_token = 1;
        env.body_case = SHARDWIRE__ENVELOPE__BODY_VERDICT;
        env.verdict = &v;
        break;
    case 2:
        sc.session_id = s_rand() | 1;
        sc.reason = "bye";
        env.body_case = SHARDWIRE__ENVELOPE__BODY_SESSION_CLOSE;
        env.session_close = &sc;
        break;
    case 3:
        an.name = (s_rand() & 1) ? "stage0" : "mallory";
        an.role = SHARDWIRE__ROLE__ROLE_CLIENT;
        an.backend = "";
        an.model_fingerprint = "";
        env.body_case = SHARDWIRE__ENVELOPE__BODY_ANNOUNCE;
        env.announce = &an;
        break;
    case 4:
        env.body_case = SHARDWIRE__ENVELOPE__BODY_STATUS_QUERY;
        env.status_query = &sq;
        break;
    default:
        er.code = (Shardwire__ErrorCode)(s_rand() % 15);
        er.message = "garbage";
        er.session_id = s_rand();
        env.body_case = SHARDWIRE__ENVELOPE__BODY_ERROR;
        env.error = &er;
        break;
    }
    size_t n = shardwire__envelope__get_packed_size(&env);
    if (n > cap)
        return 0;
    return shardwire__envelope__pack(&env, buf);
}

/* An Envelope worth mutating: a clear one of a kind chosen at random, packed. */
static size_t s_valid_envelope(uint8_t *buf, size_t cap)
{
    return s_envelope(buf, cap, (int)(s_rand() % 6), 1);
}

static long s_count(const char *who);

static void s_report(const char *who, long count)
{
    FILE *f = fopen(s_path(who), "w");
    if (f) {
        fprintf(f, "%ld\n", count);
        fclose(f);
    }
}

/* An authenticated client (no cluster key, no access key): the relay lets its messages
 * reach the head (stage0) only. */
static void s_mallory(void)
{
    void *ctx = zmq_ctx_new();
    void *s = s_dealer(ctx, "mallory");
    s_announce(s, "mallory", 0);
    s_report("mallory.ready", 1);
    static uint8_t buf[256 << 10];
    long sent = 0, iter = 0;
    double t_end = s_now() + FLOOD_MAX_S;
    while (!s_quit && s_now() < t_end) {
        int kind = (int)(s_rand() % 4);
        int frames = 1 + (int)(s_rand() % 5);
        for (int i = 0; i < frames; i++) {
            size_t n;
            if (i == 0 && kind != 0) {
                const char *d = s_dest();
                n = strlen(d);
                memcpy(buf, d, n);
            } else if (i == 1 && kind == 2) {
                n = s_valid_envelope(buf, sizeof buf);
                s_mutate(buf, n);
            } else if (i == 1 && kind == 3) {
                n = SW_SEAL_HDR_OVERHEAD + s_rand() % 512;
                s_fill(buf, n);
                buf[0] = SW_SEAL_MAGIC0;
                buf[1] = SW_SEAL_MAGIC1;
            } else {
                n = s_rand_size();
                s_fill(buf, n);
            }
            /* once the first frame is queued the others go with it (multipart is atomic) */
            if (zmq_send(s, buf, n, ZMQ_DONTWAIT | (i + 1 < frames ? ZMQ_SNDMORE : 0)) < 0)
                break;
            if (i == 0)
                sent++; /* counted when it left */
        }
        if (++iter % 64 == 0) {
            s_drain(s);
            usleep(2000);
        }
    }
    s_report("mallory.count", sent);
    zmq_close(s);
    zmq_ctx_term(ctx);
}

/* A member with the cluster key: sealed, mutated envelopes to the tail, and replays. */
static void s_member(void)
{
    void *ctx = zmq_ctx_new();
    void *s = s_dealer(ctx, "member");
    s_announce(s, "member", 1);
    s_report("member.ready", 1);
    uint8_t key[1][SW_CLUSTER_KEY_BYTES];
    char err[256];
    if (sw_cluster_key_load(s_path("cluster.key"), key[0], err, sizeof err) != 0)
        _exit(3);
    sw_seal_t *seal = sw_seal_new(key, 1, SW_SEAL_CLUSTER);
    uint8_t buf[4096];
    long sent = 0, iter = 0;
    double t_end = s_now() + FLOOD_MAX_S;
    while (!s_quit && s_now() < t_end) {
        size_t n;
        if (iter % 16 == 0) {
            /* every 16th: a whole Forward whose hop lies past its 2-stage route (2, 3, 15,
             * 2^20): random flips reach the hop field too seldom to count on */
            static const uint32_t bad_hop[] = {2, 3, 15, 1u << 20};
            n = s_envelope(buf, sizeof buf, 0, bad_hop[(iter / 16) % 4]);
        } else {
            n = s_valid_envelope(buf, sizeof buf);
            if (s_rand() % 4)
                s_mutate(buf, n);
        }
        const char *dest = "stage1";
        zmq_msg_t h, p;
        int has_payload = (s_rand() % 4) == 0;
        uint8_t payload[512];
        size_t pl = has_payload ? s_rand() % sizeof payload : 0;
        s_fill(payload, pl);
        if (sw_seal_message(seal, "member", dest, buf, n, payload, pl, has_payload, &h, &p) != 0)
            break;
        for (int rep = 0; rep < 2; rep++) { /* the second one is a replay */
            zmq_msg_t hc, pc;
            if (zmq_send(s, dest, strlen(dest), ZMQ_DONTWAIT | ZMQ_SNDMORE) < 0)
                break; /* our queue is full: nothing was queued */
            zmq_msg_init(&hc);
            zmq_msg_copy(&hc, &h);
            zmq_msg_send(&hc, s, has_payload ? ZMQ_SNDMORE : 0);
            zmq_msg_close(&hc);
            if (has_payload) {
                zmq_msg_init(&pc);
                zmq_msg_copy(&pc, &p);
                zmq_msg_send(&pc, s, 0);
                zmq_msg_close(&pc);
            }
            sent++;
        }
        zmq_msg_close(&h);
        if (has_payload)
            zmq_msg_close(&p);
        if (++iter % 32 == 0) {
            s_drain(s);
            usleep(2000);
        }
    }
    s_report("member.count", sent);
    sw_seal_destroy(&seal);
    zmq_close(s);
    zmq_ctx_term(ctx);
}

/* Connections that never authenticate: no CURVE, an unknown key, raw TCP bytes. */
static void s_outsiders(void)
{
    void *ctx = zmq_ctx_new();
    static uint8_t buf[4096];
    long sent = 0;
    double t_end = s_now() + FLOOD_MAX_S;
    while (!s_quit && s_now() < t_end) {
        void *a = s_dealer(ctx, NULL), *b = s_dealer(ctx, "outsider");
        for (int i = 0; i < 50; i++) {
            size_t n = s_rand() % 256;
            s_fill(buf, n);
            zmq_send(a, "stage0", 6, ZMQ_DONTWAIT | ZMQ_SNDMORE);
            zmq_send(a, buf, n, ZMQ_DONTWAIT);
            zmq_send(b, "relay", 5, ZMQ_DONTWAIT | ZMQ_SNDMORE);
            zmq_send(b, buf, n, ZMQ_DONTWAIT);
            sent += 2;
        }
        zmq_close(a);
        zmq_close(b);
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)s_port)};
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0) {
            size_t n = s_rand() % sizeof buf;
            s_fill(buf, n);
            if (s_rand() % 2 && n > 10) { /* a ZMTP greeting start, then junk */
                buf[0] = 0xff;
                buf[9] = 0x7f;
            }
            if (write(fd, buf, n) > 0)
                sent++;
        }
        if (fd >= 0)
            close(fd);
        if (sent > 0 && s_count("outsiders.ready") < 0)
            s_report("outsiders.ready", 1);
        usleep(20000);
    }
    s_report("outsiders.count", sent);
    zmq_ctx_term(ctx);
}

static pid_t s_fork(void (*fn)(void), uint64_t seed)
{
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGTERM, s_on_term);
        s_rng = seed;
        fn();
        _exit(0);
    }
    return pid;
}

static long s_count(const char *who)
{
    char *t = sw_test_read_file(s_path(who), NULL);
    long v = t ? atol(t) : -1;
    free(t);
    return v;
}

static int s_alive(pid_t pid)
{
    return waitpid(pid, NULL, WNOHANG) == 0;
}

int main(void)
{
    const char *model = sw_test_model();
    char e[256];
    if (sw_keys_curve_check(e, sizeof e) != 0)
        sw_test_skip(e);
    signal(SIGPIPE, SIG_IGN);
    snprintf(s_dir, sizeof s_dir, "%s", sw_test_tmpdir());
    s_port = sw_test_free_port();
    snprintf(s_ep, sizeof s_ep, "tcp://127.0.0.1:%d", s_port);
    const char *who[] = {"relay", "stage0", "stage1", "client", "mallory", "member", "outsider"};
    for (size_t i = 0; i < sizeof who / sizeof who[0]; i++) {
        char *kg[] = {(char *)sw_test_bin("shardwire"), "keygen", "--out", (char *)s_path(who[i]),
                      NULL};
        SW_CHECK_INT(sw_test_run(kg, 20, NULL, NULL), 0);
    }
    char *kc[] = {(char *)sw_test_bin("shardwire"), "keygen", "--cluster-key",
                  (char *)s_path("cluster.key"), NULL};
    SW_CHECK_INT(sw_test_run(kc, 20, NULL, NULL), 0);
    char *ka[] = {(char *)sw_test_bin("shardwire"), "keygen", "--access-key",
                  (char *)s_path("access.key"), NULL};
    SW_CHECK_INT(sw_test_run(ka, 20, NULL, NULL), 0);
    char allow[2048] = "", line[128];
    const char *names[] = {"node stage0", "node stage1", "client", "client", "node member"};
    const char *keys[] = {"stage0", "stage1", "client", "mallory", "member"};
    for (int i = 0; i < 5; i++) {
        char pubf[256];
        snprintf(pubf, sizeof pubf, "%s.pub", s_path(keys[i]));
        char *pub = sw_test_read_file(pubf, NULL);
        if (pub)
            pub[strcspn(pub, "\n")] = 0;
        snprintf(line, sizeof line, "%s %s\n", pub ? pub : "", names[i]);
        strcat(allow, line);
        free(pub);
    }
    FILE *af = fopen(s_path("allow.txt"), "w");
    if (af) {
        fputs(allow, af);
        fclose(af);
    }

    /* the reference: the whole model in one process */
    const char *prompt = "List three colors of the rainbow:\n1.";
    char n_gen[16];
    snprintf(n_gen, sizeof n_gen, "%d", N_GEN);
    int32_t ref[N_GEN + 8], got[N_GEN + 8];
    char *out = NULL;
    int n_ref = sw_test_generate(model, prompt, N_GEN, ref, N_GEN + 8);
    SW_CHECK(n_ref > 0);

    char relay_key[256], cluster_key[256], client_key[256], access_key[256];
    snprintf(relay_key, sizeof relay_key, "%s.pub", s_path("relay"));
    snprintf(cluster_key, sizeof cluster_key, "%s", s_path("cluster.key"));
    snprintf(access_key, sizeof access_key, "%s", s_path("access.key"));
    snprintf(client_key, sizeof client_key, "%s.key", s_path("client"));
    char rk[256];
    snprintf(rk, sizeof rk, "%s.key", s_path("relay"));
    char *ra[] = {(char *)sw_test_bin("shardwire-relay"),
                  "--listen",
                  s_ep,
                  "--key",
                  rk,
                  "--allow",
                  (char *)s_path("allow.txt"),
                  NULL};
    pid_t relay = sw_test_spawn(ra, sw_test_log("relay.log"));
    pid_t nodes[2];
    for (int i = 0; i < 2; i++) {
        char name[16], key[256];
        snprintf(name, sizeof name, "stage%d", i);
        snprintf(key, sizeof key, "%s.key", s_path(name));
        char *na[] = {(char *)sw_test_bin("shardwire-node"),
                      "--model",
                      (char *)model,
                      "--layers",
                      i == 0 ? "0:15" : "15:30",
                      "--relay",
                      s_ep,
                      "--name",
                      name,
                      "--threads",
                      "1",
                      "--dtype",
                      "f32",
                      "--round-timeout-ms",
                      "20000",
                      "--key",
                      key,
                      "--relay-key",
                      relay_key,
                      "--cluster-key",
                      cluster_key,
                      i == 0 ? "--access-key" : NULL,
                      access_key,
                      NULL};
        nodes[i] = sw_test_spawn(na, sw_test_log("nodes.log"));
    }
    setenv("SW_KEY", client_key, 1); /* for sw_test_wait_peers and the runs below */
    setenv("SW_RELAY_KEY", relay_key, 1);
    setenv("SW_ACCESS_KEY", access_key, 1);
    SW_CHECK_INT(sw_test_wait_peers(s_ep, 2, 60), 0);

    /* SW_GARBAGE_SEED=<printed seed> replays a run's garbage. */
    const char *seed_env = getenv("SW_GARBAGE_SEED");
    uint64_t seed = seed_env && seed_env[0] ? strtoull(seed_env, NULL, 10) | 1
                                            : (uint64_t)time(NULL) * 2654435761u | 1;
    printf("garbage seed %llu (SW_GARBAGE_SEED=%llu repeats it)\n", (unsigned long long)seed,
           (unsigned long long)seed);
    pid_t flood[3] = {s_fork(s_mallory, seed), s_fork(s_member, seed * 3 + 1),
                      s_fork(s_outsiders, seed * 7 + 1)};
    /* the flood is on before the good session starts: each flooder says so
     * once it is through the handshake and sending */
    const char *ready[] = {"mallory.ready", "member.ready", "outsiders.ready"};
    for (int i = 0; i < 3; i++) {
        double t_ready = s_now() + 30;
        while (s_count(ready[i]) < 1 && s_now() < t_ready)
            usleep(10000);
        SW_CHECK_INT(s_count(ready[i]), 1);
    }
    double t0 = s_now();
    char *rn[] = {(char *)sw_test_bin("shardwire"),
                  "run",
                  "--greedy",
                  "--relay",
                  s_ep,
                  "-p",
                  (char *)prompt,
                  "-n",
                  n_gen,
                  "--json",
                  "--timeout-s",
                  "60",
                  NULL};
    for (int r = 0; r < N_RUNS; r++) {
        char *err = NULL;
        out = NULL;
        int rc = sw_test_run(rn, 70, &out, &err);
        SW_CHECK_INT(rc, 0);
        int n = sw_test_json_tokens(out, got, N_GEN + 8);
        SW_CHECK(n == n_ref && n > 0 && !memcmp(got, ref, sizeof(int32_t) * (size_t)n_ref));
        if (rc != 0)
            fprintf(stderr, "run %d: %s\n", r, err ? err : "");
        free(out);
        free(err);
    }
    double t_good = s_now() - t0;
    for (int i = 0; i < 3; i++)
        kill(flood[i], SIGTERM);
    for (int i = 0; i < 3; i++) {
        int st = 0;
        SW_CHECK(waitpid(flood[i], &st, 0) == flood[i] && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    long c_m = s_count("mallory.count"), c_b = s_count("member.count"),
         c_o = s_count("outsiders.count");
    printf("%d good sessions in %.1f s under %ld malicious-peer, %ld member and %ld outsider "
           "messages\n",
           N_RUNS, t_good, c_m, c_b, c_o);
    SW_CHECK(c_m + c_b + c_o >= 3000);
    SW_CHECK(c_m >= 500 && c_b >= 500 && c_o >= 100);

    /* nobody crashed, and the cluster still answers exactly */
    SW_CHECK(s_alive(relay));
    SW_CHECK(s_alive(nodes[0]));
    SW_CHECK(s_alive(nodes[1]));
    out = NULL;
    SW_CHECK_INT(sw_test_run(rn, 70, &out, NULL), 0);
    SW_CHECK_INT(sw_test_json_tokens(out, got, N_GEN + 8), n_ref);
    SW_CHECK(n_ref > 0 && !memcmp(got, ref, sizeof(int32_t) * (size_t)n_ref));
    free(out);

    sw_test_kill(nodes[0]);
    sw_test_kill(nodes[1]);
    sw_test_kill(relay);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", s_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", s_dir);
    return sw_test_done();
}
