/*
 * test_security.c - every security rule of docs/security.md against a real
 * shardwire-relay process with CURVE, a ZAP allow-list and sealed payloads:
 *
 *  - keys: keygen writes 0600 secrets; a 0644 secret key and the ZeroMQ
 *    documentation's test keys are refused by the loader, the relay and the CLI;
 *  - the relay refuses to start without an allow-list, and insecure mode
 *    refuses non-loopback endpoints (relay, node, client);
 *  - a key not on the allow-list, a connection without CURVE and a peer that
 *    pins the wrong relay key get nowhere;
 *  - a key may announce only the name its allow-list entry names (the old
 *    "KEY NAME" form still reads as a node key), and no other key can take
 *    over a live name;
 *  - removing a key from the allow-list cuts that peer off within 3 s;
 *  - what the relay forwards between peers is ciphertext (no prompt text, no
 *    token ids, no tensor bytes), and a member replaying or tampering with a
 *    sealed frame gets it dropped.
 */
#include "codec_pb.h"
#include "keys.h"
#include "peer.h"
#include "seal.h"
#include "sw_test.h"
#include "wire.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char s_dir[64];
static char s_ep[64];
/* a model fingerprint for the nodes announced here (they serve no model) */
#define S_FP "5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e"

static double s_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static const char *s_path(const char *name)
{
    static char buf[8][256];
    static int slot;
    char *p = buf[slot++ % 8];
    snprintf(p, 256, "%s/%s", s_dir, name);
    return p;
}

static void s_write(const char *path, const char *text, mode_t mode)
{
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
    chmod(path, mode);
}

static char *s_slurp_line(const char *path)
{
    static char line[8][128];
    static int slot;
    char *l = line[slot++ % 8];
    l[0] = 0;
    FILE *f = fopen(path, "r");
    if (f) {
        if (!fgets(l, 128, f))
            l[0] = 0;
        fclose(f);
    }
    l[strcspn(l, "\n")] = 0;
    return l;
}

/* `shardwire keygen --out DIR/who`. */
static int s_keygen(const char *who)
{
    char *argv[] = {(char *)sw_test_bin("shardwire"), "keygen", "--out", (char *)s_path(who), NULL};
    return sw_test_run(argv, 20, NULL, NULL);
}

/* Runs a program and returns its exit code; stderr into *err when wanted. */
static int s_exit_code(char *const argv[], char **err)
{
    return sw_test_run(argv, 20, NULL, err);
}

/* A node peer with the CURVE key of `who`, pinning relay_pub, holding the cluster key and
 * the access key (as a head does). */
static sw_peer_t *s_peer(const char *name, const char *who, const char *relay_pub)
{
    char key[256];
    snprintf(key, sizeof key, "%s.key", s_path(who));
    sw_sec_args_t a = {.key_file = key,
                       .relay_key = relay_pub,
                       .cluster_key = {s_path("cluster.key"), NULL},
                       .access_key = {s_path("access.key"), NULL},
                       .role = SW_SEC_HEAD};
    sw_sec_t sec;
    char err[512];
    if (sw_sec_load(&a, s_ep, &sec, err, sizeof err) != 0) {
        fprintf(stderr, "sec load: %s\n", err);
        return NULL;
    }
    sw_msg_announce_t an = {0};
    an.name = name;
    an.role = SW_ROLE_MIDDLE;
    an.backend = "cpu";
    an.model_fingerprint = (char *)S_FP;
    an.layer_begin = 1;
    an.layer_end = 2;
    an.n_layers = 3;
    an.hidden = 8;
    sw_peer_opts_t o = {.relay = s_ep, .announce = &an, .connect_timeout_ms = 3000, .sec = &sec};
    sw_peer_t *p = sw_peer_new(&o);
    sw_sec_wipe(&sec);
    return p;
}

/* A raw DEALER with CURVE keys of `who` (NULL = no CURVE at all). */
static void *s_raw(void *ctx, const char *who)
{
    void *s = zmq_socket(ctx, ZMQ_DEALER);
    int zero = 0, tmo = 3000;
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(s, ZMQ_RCVTIMEO, &tmo, sizeof tmo);
    zmq_setsockopt(s, ZMQ_SNDTIMEO, &tmo, sizeof tmo);
    if (who) {
        char pub[41], sec[41], relay[41], err[256];
        char key[256];
        snprintf(key, sizeof key, "%s.key", s_path(who));
        if (sw_keys_load_secret(key, pub, sec, err, sizeof err) != 0 ||
            sw_keys_load_public(s_path("relay.pub"), relay, err, sizeof err) != 0) {
            fprintf(stderr, "raw keys: %s\n", err);
        }
        zmq_setsockopt(s, ZMQ_CURVE_SERVERKEY, relay, 41);
        zmq_setsockopt(s, ZMQ_CURVE_PUBLICKEY, pub, 41);
        zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, sec, 41);
    }
    zmq_connect(s, s_ep);
    return s;
}

/* Announces name on a raw socket, as a node (middle of layers [1, 2) of 3) or a client;
 * returns the relay's answer: 0 ack, an error code, -1 none. */
static int s_raw_announce(void *s, const char *name, int node)
{
    Shardwire__PeerAnnounce an = SHARDWIRE__PEER_ANNOUNCE__INIT;
    an.name = (char *)name;
    an.role = node ? SHARDWIRE__ROLE__ROLE_MIDDLE : SHARDWIRE__ROLE__ROLE_CLIENT;
    an.backend = node ? "cpu" : "";
    an.model_fingerprint = node ? (char *)S_FP : "";
    an.layer_begin = node ? 1 : 0;
    an.layer_end = node ? 2 : 0;
    an.n_layers = node ? 3 : 0;
    an.hidden = node ? 8 : 0;
    Shardwire__Envelope env = SHARDWIRE__ENVELOPE__INIT;
    env.body_case = SHARDWIRE__ENVELOPE__BODY_ANNOUNCE;
    env.announce = &an;
    char err[256];
    if (sw_wire_send(s, SW_WIRE_RELAY_NAME, sw_envelope_of(&env), NULL, 0, 0, 0, err, sizeof err) !=
        0)
        return -1;
    sw_wire_msg_t m = {0};
    if (sw_wire_recv(s, 0, &m, err, sizeof err) != SW_WIRE_OK)
        return -1;
    int rc = -1;
    if (m.env->pb.body_case == SHARDWIRE__ENVELOPE__BODY_ANNOUNCE_ACK)
        rc = 0;
    else if (m.env->pb.body_case == SHARDWIRE__ENVELOPE__BODY_ERROR)
        rc = m.env->pb.error->code;
    sw_wire_msg_clear(&m);
    return rc;
}

/* Receives one raw multipart message into frames (up to 3); returns the count, -1 on timeout. */
static int s_raw_recv(void *s, zmq_msg_t *f, int max)
{
    int n = 0, more = 1;
    while (more) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, s, 0) < 0) {
            zmq_msg_close(&m);
            return n ? n : -1;
        }
        more = zmq_msg_more(&m);
        if (zmq_msg_size(&m) == 0 && n == 0 && !more) { /* relay probe */
            zmq_msg_close(&m);
            more = 1;
            continue;
        }
        if (n < max) {
            zmq_msg_init(&f[n]);
            zmq_msg_move(&f[n], &m);
            n++;
        }
        zmq_msg_close(&m);
    }
    return n;
}

static const void *s_memmem(const void *hay, size_t hl, const void *needle, size_t nl)
{
    return memmem(hay, hl, needle, nl);
}

/* Waits up to ms for a message on peer; 0 got one (cleared), 1 none. */
static int s_expect(sw_peer_t *p, int ms, sw_wire_msg_t *out)
{
    sw_wire_msg_t m = {0};
    int rc = sw_peer_recv(p, &m, ms);
    if (rc == 0 && out)
        sw_wire_msg_move(out, &m);
    else if (rc == 0)
        sw_wire_msg_clear(&m);
    return rc;
}

static Shardwire__Envelope *s_forward_env(Shardwire__Forward *f, char **route, uint32_t *toks)
{
    static Shardwire__Envelope env;
    shardwire__envelope__init(&env);
    shardwire__forward__init(f);
    f->session_id = 0x1234;
    f->round = 1;
    f->n_rows = 4;
    f->n_tokens = 4;
    f->tokens = toks;
    f->dtype = SHARDWIRE__DTYPE__DTYPE_F32;
    f->hidden = 8;
    f->layer_begin = 1;
    f->n_route = 2;
    f->route = route;
    f->hop = 1;
    f->reply_to = route[0];
    env.body_case = SHARDWIRE__ENVELOPE__BODY_FORWARD;
    env.forward = f;
    return &env;
}

/* Relay startup refusals and key-file rules (no relay needed). */
static void s_refusals(void)
{
    char *err = NULL;
    /* 0644 secret key */
    char bad[4096];
    snprintf(bad, sizeof bad, "%s", s_path("open.key"));
    char *k = sw_test_read_file(s_path("relay.key"), NULL);
    s_write(bad, k ? k : "", 0644);
    free(k);
    char pub[41], sec[41], e[512] = "";
    SW_CHECK(sw_keys_load_secret(bad, pub, sec, e, sizeof e) != 0);
    SW_CHECK(strstr(e, "too open") != NULL);
    char port[80];
    snprintf(port, sizeof port, "tcp://127.0.0.1:%d", sw_test_free_port());
    char *r1[] = {(char *)sw_test_bin("shardwire-relay"),
                  "--listen",
                  port,
                  "--key",
                  bad,
                  "--allow",
                  (char *)s_path("allow.txt"),
                  NULL};
    SW_CHECK_INT(s_exit_code(r1, &err), 1);
    SW_CHECK(err && strstr(err, "too open"));
    free(err);
    err = NULL;
    char *c1[] = {(char *)sw_test_bin("shardwire"),
                  "status",
                  "--relay",
                  s_ep,
                  "--key",
                  bad,
                  "--relay-key",
                  (char *)s_path("relay.pub"),
                  "--access-key",
                  (char *)s_path("access.key"),
                  NULL};
    SW_CHECK_INT(s_exit_code(c1, &err), 2);
    SW_CHECK(err && strstr(err, "too open"));
    free(err);
    err = NULL;
    /* a .pub (mode 0644, as keygen writes it) given as --key: one line that names
     * it a public key and the .key to give, not "too open ... chmod 600" */
    char *c1p[] = {(char *)sw_test_bin("shardwire"),
                   "status",
                   "--relay",
                   s_ep,
                   "--key",
                   (char *)s_path("bob.pub"),
                   "--relay-key",
                   (char *)s_path("relay.pub"),
                   "--access-key",
                   (char *)s_path("access.key"),
                   NULL};
    SW_CHECK_INT(s_exit_code(c1p, &err), 2);
    SW_CHECK(err && strstr(err, "bob.pub is a public key") && strstr(err, "bob.key"));
    SW_CHECK(err && !strstr(err, "too open") && strchr(err, '\n') == err + strlen(err) - 1);
    if (err)
        fprintf(stderr, "the .pub as --key: %s", err);
    free(err);
    err = NULL;

    /* the zmq_curve(7) test keys: as a secret key, as a pinned relay key, in the allow-list */
    const char *test_sec = "JTKVSB%%)wK0E.X)V>+}o?pNmC{O&4W4b!Ni{Lh6";
    const char *test_pub = "Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID";
    char tk[256];
    snprintf(tk, sizeof tk, "%s\n", test_sec);
    s_write(s_path("test.key"), tk, 0600);
    SW_CHECK(sw_keys_load_secret(s_path("test.key"), pub, sec, e, sizeof e) != 0);
    SW_CHECK(strstr(e, "test key") != NULL);
    SW_CHECK(sw_keys_load_public(test_pub, pub, e, sizeof e) != 0);
    char *r2[] = {(char *)sw_test_bin("shardwire-relay"),
                  "--listen",
                  port,
                  "--key",
                  (char *)s_path("test.key"),
                  "--allow",
                  (char *)s_path("allow.txt"),
                  NULL};
    SW_CHECK_INT(s_exit_code(r2, &err), 1);
    SW_CHECK(err && strstr(err, "test key"));
    free(err);
    err = NULL;
    char al[256];
    snprintf(al, sizeof al, "%s alice\n", test_pub);
    s_write(s_path("allow_test.txt"), al, 0644);
    char *r3[] = {(char *)sw_test_bin("shardwire-relay"),
                  "--listen",
                  port,
                  "--key",
                  (char *)s_path("relay.key"),
                  "--allow",
                  (char *)s_path("allow_test.txt"),
                  NULL};
    SW_CHECK_INT(s_exit_code(r3, &err), 1);
    free(err);
    err = NULL;

    /* no allow-list: refused (no ZAP handler = anyone gets in) */
    char *r4[] = {(char *)sw_test_bin("shardwire-relay"),
                  "--listen",
                  port,
                  "--key",
                  (char *)s_path("relay.key"),
                  NULL};
    SW_CHECK_INT(s_exit_code(r4, &err), 1);
    SW_CHECK(err && strstr(err, "allow"));
    free(err);
    err = NULL;

    /* insecure mode: loopback only, for the relay, a node and the client */
    char *r5[] = {(char *)sw_test_bin("shardwire-relay"), "--listen", "tcp://0.0.0.0:1",
                  "--insecure-loopback", NULL};
    SW_CHECK_INT(s_exit_code(r5, &err), 1);
    SW_CHECK(err && strstr(err, "loopback"));
    free(err);
    err = NULL;
    char *n5[] = {(char *)sw_test_bin("shardwire-node"),
                  "--model",
                  "/nonexistent.gguf",
                  "--layers",
                  "0:1",
                  "--relay",
                  "tcp://10.1.2.3:5555",
                  "--name",
                  "x",
                  "--insecure-loopback",
                  NULL};
    SW_CHECK_INT(s_exit_code(n5, &err), 2);
    SW_CHECK(err && strstr(err, "loopback"));
    free(err);
    err = NULL;
    char *c5[] = {(char *)sw_test_bin("shardwire"),
                  "status",
                  "--relay",
                  "tcp://127.evil.com:1",
                  "--insecure-loopback",
                  NULL};
    SW_CHECK_INT(s_exit_code(c5, &err), 2);
    free(err);
    err = NULL;
    /* each role its keys: a client given the cluster key, a stage given the access key, a
     * head without the access key: one line each, before any connection */
    char *c7[] = {(char *)sw_test_bin("shardwire"),
                  "run",
                  "--relay",
                  s_ep,
                  "--key",
                  (char *)s_path("other.key"),
                  "--relay-key",
                  (char *)s_path("relay.pub"),
                  "--cluster-key",
                  (char *)s_path("cluster.key"),
                  "-p",
                  "hi",
                  NULL};
    SW_CHECK_INT(s_exit_code(c7, &err), 2);
    SW_CHECK(err && strstr(err, "clients use --access-key now"));
    free(err);
    err = NULL;
    for (int head = 0; head < 2; head++) {
        char *n7[] = {(char *)sw_test_bin("shardwire-node"),
                      "--model",
                      "/nonexistent.gguf",
                      "--layers",
                      head ? "0:1" : "1:2",
                      "--relay",
                      s_ep,
                      "--name",
                      "x",
                      "--key",
                      (char *)s_path("carol.key"),
                      "--relay-key",
                      (char *)s_path("relay.pub"),
                      "--cluster-key",
                      (char *)s_path("cluster.key"),
                      head ? NULL : "--access-key",
                      (char *)s_path("access.key"),
                      NULL};
        SW_CHECK_INT(s_exit_code(n7, &err), 2);
        SW_CHECK(err && strstr(err, head ? "needs --access-key" : "only the head"));
        free(err);
        err = NULL;
    }
    /* and no keys and no flag: refused before any connection */
    char *c6[] = {(char *)sw_test_bin("shardwire"), "status", "--relay", s_ep, NULL};
    unsetenv("SW_KEY");
    SW_CHECK_INT(s_exit_code(c6, &err), 2);
    SW_CHECK(err && strstr(err, "keys missing"));
    free(err);
    SW_CHECK(sw_endpoint_is_loopback("tcp://127.0.0.1:5"));
    SW_CHECK(sw_endpoint_is_loopback("tcp://[::1]:5"));
    SW_CHECK(sw_endpoint_is_loopback("tcp://localhost:5"));
    SW_CHECK(!sw_endpoint_is_loopback("tcp://127.0.0.1.evil.com:5"));
    SW_CHECK(!sw_endpoint_is_loopback("tcp://0.0.0.0:5"));
    SW_CHECK(!sw_endpoint_is_loopback("tcp://*:5"));
}

int main(void)
{
    char e[512];
    if (sw_keys_curve_check(e, sizeof e) != 0)
        sw_test_skip(e);
    snprintf(s_dir, sizeof s_dir, "%s", sw_test_tmpdir());
    snprintf(s_ep, sizeof s_ep, "tcp://127.0.0.1:%d", sw_test_free_port());
    const char *who[] = {"relay", "alice", "bob", "carol", "mallory", "outsider", "other"};
    for (size_t i = 0; i < sizeof who / sizeof who[0]; i++)
        SW_CHECK_INT(s_keygen(who[i]), 0);
    struct stat st;
    SW_CHECK(stat(s_path("alice.key"), &st) == 0 && (st.st_mode & 0777) == 0600);
    char *kg[] = {(char *)sw_test_bin("shardwire"), "keygen", "--cluster-key",
                  (char *)s_path("cluster.key"), NULL};
    SW_CHECK_INT(sw_test_run(kg, 20, NULL, NULL), 0);
    char *kg2[] = {(char *)sw_test_bin("shardwire"), "keygen", "--cluster-key",
                   (char *)s_path("other_cluster.key"), NULL};
    SW_CHECK_INT(sw_test_run(kg2, 20, NULL, NULL), 0);
    SW_CHECK(stat(s_path("cluster.key"), &st) == 0 && (st.st_mode & 0777) == 0600);
    SW_CHECK(sw_test_run(kg, 20, NULL, NULL) != 0); /* never overwrites */
    char *kg3[] = {(char *)sw_test_bin("shardwire"), "keygen", "--access-key",
                   (char *)s_path("access.key"), NULL};
    SW_CHECK_INT(sw_test_run(kg3, 20, NULL, NULL), 0);
    SW_CHECK(stat(s_path("access.key"), &st) == 0 && (st.st_mode & 0777) == 0600);

    /* bob and other in the old form: "KEY NAME" is a node, "KEY" a client */
    char allow[2048];
    snprintf(allow, sizeof allow,
             "# test allow-list\n%s node alice\n%s bob   # bob's laptop\n%s node carol\n%s\n%s "
             "node mallory\n",
             s_slurp_line(s_path("alice.pub")), s_slurp_line(s_path("bob.pub")),
             s_slurp_line(s_path("carol.pub")), s_slurp_line(s_path("other.pub")),
             s_slurp_line(s_path("mallory.pub")));
    s_write(s_path("allow.txt"), allow, 0644);

    s_refusals();

    char *ra[] = {(char *)sw_test_bin("shardwire-relay"),
                  "--listen",
                  s_ep,
                  "--key",
                  (char *)s_path("relay.key"),
                  "--allow",
                  (char *)s_path("allow.txt"),
                  NULL};
    pid_t relay = sw_test_spawn(ra, sw_test_log("relay.log"));
    SW_CHECK_INT(sw_test_wait_listen(s_ep, 30), 0); /* ZAP is up before the relay listens */
    void *ctx = zmq_ctx_new();

    /* allowed peers get in */
    sw_peer_t *alice = s_peer("alice", "alice", s_path("relay.pub"));
    sw_peer_t *bob = s_peer("bob", "bob", s_path("relay.pub"));
    SW_CHECK(alice != NULL && bob != NULL);
    if (!alice || !bob)
        goto out;

    /* an unknown key, the wrong pinned relay key, and no CURVE at all: refused */
    double t0 = s_now();
    sw_peer_t *outsider = s_peer("outsider", "outsider", s_path("relay.pub"));
    SW_CHECK(outsider == NULL);
    SW_CHECK(s_now() - t0 < 3.0); /* refused by the handshake, not by a timeout */
    /* ... by the ZAP handler itself (the announce check behind it would refuse it too) */
    SW_CHECK(sw_test_count_in_file(sw_test_log("relay.log"), "key not on the allow-list") >= 1);
    sw_peer_destroy(&outsider);
    sw_peer_t *wrong = s_peer("bob2", "other", s_path("bob.pub"));
    SW_CHECK(wrong == NULL);
    sw_peer_destroy(&wrong);
    void *plain = s_raw(ctx, NULL);
    SW_CHECK_INT(s_raw_announce(plain, "plain", 0), -1);
    zmq_close(plain);

    /* names are bound to keys; a listed name is reserved even for a key that may take any
     * name; the old form of bob's line made it a node key */
    void *carol = s_raw(ctx, "carol");
    SW_CHECK_INT(s_raw_announce(carol, "alice", 1), SHARDWIRE__ERROR_CODE__ERR_UNAUTHORIZED);
    SW_CHECK_INT(s_raw_announce(carol, "carol", 1), 0);
    void *other = s_raw(ctx, "other"); /* a client key: any name that is not listed */
    SW_CHECK_INT(s_raw_announce(other, "bob", 0), SHARDWIRE__ERROR_CODE__ERR_UNAUTHORIZED);
    SW_CHECK_INT(s_raw_announce(other, "other-ok", 0), 0);
    SW_CHECK(sw_test_count_in_file(sw_test_log("relay.log"), "old 'KEY [NAME]' form") == 1);

    /* what the relay forwards is ciphertext: mallory (allowed, no cluster key) receives
     * exactly the bytes the relay handled */
    void *mallory = s_raw(ctx, "mallory");
    SW_CHECK_INT(s_raw_announce(mallory, "mallory", 1), 0);
    {
        const char *secret = "The launch code is SWORDFISH-42";
        Shardwire__GenerateRequest g = SHARDWIRE__GENERATE_REQUEST__INIT;
        g.request_id = "req-1";
        g.prompt = (char *)secret;
        g.n_predict = 8;
        Shardwire__Envelope env = SHARDWIRE__ENVELOPE__INIT;
        env.body_case = SHARDWIRE__ENVELOPE__BODY_GENERATE;
        env.generate = &g;
        SW_CHECK_INT(sw_peer_send(alice, "mallory", sw_envelope_of(&env), NULL, 0, 0), 0);
        zmq_msg_t f[3];
        int n = s_raw_recv(mallory, f, 3);
        SW_CHECK_INT(n, 2);
        if (n == 2) {
            /* the source frame: alice's name and her key's fingerprint ("alice@FP") */
            SW_CHECK(zmq_msg_size(&f[0]) == 6 + SW_WIRE_KEY_FP_LEN &&
                     !memcmp(zmq_msg_data(&f[0]), "alice@", 6));
            SW_CHECK(sw_seal_is_sealed(zmq_msg_data(&f[1]), zmq_msg_size(&f[1])));
            SW_CHECK(!s_memmem(zmq_msg_data(&f[1]), zmq_msg_size(&f[1]), "SWORDFISH", 9));
            SW_CHECK(!s_memmem(zmq_msg_data(&f[1]), zmq_msg_size(&f[1]), "req-1", 5));
        }
        for (int i = 0; i < (n > 0 ? n : 0); i++)
            zmq_msg_close(&f[i]);

        /* a Forward: token ids and the tensor */
        char *route[] = {"alice", "mallory"};
        uint32_t toks[4] = {0x11223u, 0x11224u, 0x11225u, 0x11226u};
        Shardwire__Forward fw;
        Shardwire__Envelope *fe = s_forward_env(&fw, route, toks);
        float tensor[32];
        for (int i = 0; i < 32; i++)
            tensor[i] = 1000.0f + (float)i;
        SW_CHECK_INT(sw_peer_send(alice, "mallory", sw_envelope_of(fe), tensor, sizeof tensor, 1),
                     0);
        n = s_raw_recv(mallory, f, 3);
        SW_CHECK_INT(n, 3);
        if (n == 3) {
            uint8_t clear[4096];
            size_t cl = shardwire__envelope__pack(fe, clear); /* what an unsealed header is */
            SW_CHECK(sw_seal_is_sealed(zmq_msg_data(&f[1]), zmq_msg_size(&f[1])));
            SW_CHECK_INT(zmq_msg_size(&f[1]), cl + SW_SEAL_HDR_OVERHEAD);
            SW_CHECK_INT(zmq_msg_size(&f[2]), sizeof tensor + SW_SEAL_PAYLOAD_OVERHEAD);
            /* the packed token list (varints) and any 8 tensor bytes are absent */
            uint8_t v[3] = {0xa3, 0xa4, 0x04}; /* varint of 0x11223 */
            SW_CHECK(!s_memmem(zmq_msg_data(&f[1]), zmq_msg_size(&f[1]), v, 3));
            SW_CHECK(s_memmem(clear, cl, v, 3) != NULL); /* the check above can fail */
            for (int i = 0; i + 8 <= (int)sizeof tensor; i += 8)
                SW_CHECK(!s_memmem(zmq_msg_data(&f[2]), zmq_msg_size(&f[2]),
                                   (const uint8_t *)tensor + i, 8));

            /* mallory re-sends alice's captured frames to bob: bob must drop them (the
             * relay names mallory as the source, the seal says alice) */
            zmq_send(mallory, "bob", 3, ZMQ_SNDMORE);
            zmq_msg_send(&f[1], mallory, ZMQ_SNDMORE);
            zmq_msg_send(&f[2], mallory, 0);
            SW_CHECK_INT(s_expect(bob, 700, NULL), 1);
        }
        for (int i = 0; i < (n > 0 ? n : 0); i++)
            zmq_msg_close(&f[i]);
    }

    /* a member with the cluster key (carol, raw) seals one message to bob and sends it
     * three times, then a tampered copy: bob takes exactly the first */
    {
        uint8_t ck[1][SW_CLUSTER_KEY_BYTES];
        SW_CHECK_INT(sw_cluster_key_load(s_path("cluster.key"), ck[0], e, sizeof e), 0);
        sw_seal_t *seal = sw_seal_new(ck, 1, SW_SEAL_CLUSTER);
        Shardwire__Error er = SHARDWIRE__ERROR__INIT;
        er.message = "hello bob";
        Shardwire__Envelope env = SHARDWIRE__ENVELOPE__INIT;
        env.body_case = SHARDWIRE__ENVELOPE__BODY_ERROR;
        env.error = &er;
        zmq_msg_t hdr, sealed, pl;
        SW_CHECK_INT(sw_wire_encode(&env, 0, 0, &hdr, e, sizeof e), 0);
        SW_CHECK_INT(sw_seal_message(seal, "carol", "bob", zmq_msg_data(&hdr), zmq_msg_size(&hdr),
                                     NULL, 0, 0, &sealed, &pl),
                     0);
        for (int rep = 0; rep < 4; rep++) {
            zmq_msg_t copy; /* a deep copy: zmq_msg_copy would share (and tamper) the buffer */
            zmq_msg_init_size(&copy, zmq_msg_size(&sealed));
            memcpy(zmq_msg_data(&copy), zmq_msg_data(&sealed), zmq_msg_size(&sealed));
            if (rep == 3) /* tamper: one ciphertext bit */
                ((uint8_t *)zmq_msg_data(&copy))[zmq_msg_size(&copy) - 20] ^= 1;
            zmq_send(carol, "bob", 3, ZMQ_SNDMORE);
            zmq_msg_send(&copy, carol, 0);
            zmq_msg_close(&copy);
        }
        sw_wire_msg_t got = {0};
        SW_CHECK_INT(s_expect(bob, 2000, &got), 0);
        SW_CHECK(got.env && got.sealed && !strcmp(got.peer, "carol") &&
                 got.env->pb.body_case == SHARDWIRE__ENVELOPE__BODY_ERROR &&
                 !strcmp(got.env->pb.error->message, "hello bob"));
        sw_wire_msg_clear(&got);
        SW_CHECK_INT(s_expect(bob, 700, NULL), 1); /* two replays and a tampered copy: dropped */
        /* a clear message from a peer is refused too */
        SW_CHECK_INT(sw_wire_send(carol, "bob", sw_envelope_of(&env), NULL, 0, 0, 0, e, sizeof e),
                     0);
        SW_CHECK_INT(s_expect(bob, 500, NULL), 1);
        zmq_msg_close(&hdr);
        zmq_msg_close(&sealed);
        sw_seal_destroy(&seal);
    }

    /* normal traffic works both ways */
    {
        Shardwire__Error er = SHARDWIRE__ERROR__INIT;
        er.message = "ping";
        Shardwire__Envelope env = SHARDWIRE__ENVELOPE__INIT;
        env.body_case = SHARDWIRE__ENVELOPE__BODY_ERROR;
        env.error = &er;
        SW_CHECK_INT(sw_peer_send(bob, "alice", sw_envelope_of(&env), NULL, 0, 0), 0);
        sw_wire_msg_t got = {0};
        SW_CHECK_INT(s_expect(alice, 2000, &got), 0);
        SW_CHECK(got.env && got.sealed && !strcmp(got.peer, "bob"));
        sw_wire_msg_clear(&got);
    }

    /* `shardwire status` needs no access key (the relay operator has none), and lists
     * the peers; with a node key it is refused (it announces a client with a random name) */
    {
        char okey[256], *out = NULL, *err = NULL;
        snprintf(okey, sizeof okey, "%s.key", s_path("other"));
        char *sa[] = {(char *)sw_test_bin("shardwire"),
                      "status",
                      "--relay",
                      s_ep,
                      "--key",
                      okey,
                      "--relay-key",
                      (char *)s_path("relay.pub"),
                      NULL};
        SW_CHECK_INT(sw_test_run(sa, 20, &out, &err), 0);
        SW_CHECK(out && strstr(out, "alice") && strstr(out, "bob"));
        free(out);
        free(err);
        out = err = NULL;
        snprintf(okey, sizeof okey, "%s.key", s_path("carol"));
        SW_CHECK(sw_test_run(sa, 20, &out, &err) != 0);
        free(out);
        free(err);
    }

    /* revocation: alice's key leaves the allow-list; within 3 s she can neither be
     * reached nor send */
    {
        snprintf(allow, sizeof allow, "%s node bob\n%s node carol\n%s client\n%s node mallory\n",
                 s_slurp_line(s_path("bob.pub")), s_slurp_line(s_path("carol.pub")),
                 s_slurp_line(s_path("other.pub")), s_slurp_line(s_path("mallory.pub")));
        char tmp[256];
        snprintf(tmp, sizeof tmp, "%s.new", s_path("allow.txt"));
        s_write(tmp, allow, 0644);
        rename(tmp, s_path("allow.txt"));
        double t_rev = s_now();
        int cut = 0;
        Shardwire__Error er = SHARDWIRE__ERROR__INIT;
        er.message = "are you there";
        Shardwire__Envelope env = SHARDWIRE__ENVELOPE__INIT;
        env.body_case = SHARDWIRE__ENVELOPE__BODY_ERROR;
        env.error = &er;
        while (!cut && s_now() - t_rev < 3.0) {
            if (sw_peer_send(bob, "alice", sw_envelope_of(&env), NULL, 0, 0) != 0)
                break;
            sw_wire_msg_t got = {0};
            if (s_expect(bob, 200, &got) == 0) {
                if (!strcmp(got.peer, SW_WIRE_RELAY_NAME) &&
                    got.env->pb.body_case == SHARDWIRE__ENVELOPE__BODY_ERROR &&
                    got.env->pb.error->code == SHARDWIRE__ERROR_CODE__ERR_UNKNOWN_DEST)
                    cut = 1;
                sw_wire_msg_clear(&got);
            }
            sw_wire_msg_t drain = {0};
            while (sw_peer_recv(alice, &drain, 0) == 0)
                sw_wire_msg_clear(&drain);
        }
        double dt = s_now() - t_rev;
        printf("revocation: alice unreachable %.2f s after the allow-list changed\n", dt);
        SW_CHECK(cut);
        SW_CHECK(dt < 3.0);
        /* alice's own messages are refused, and her peer object gives up */
        int alice_dead = 0;
        for (int i = 0; i < 20 && !alice_dead; i++) {
            if (sw_peer_send(alice, "bob", sw_envelope_of(&env), NULL, 0, 0) != 0) {
                alice_dead = 1;
                break;
            }
            sw_wire_msg_t got = {0};
            int rc = sw_peer_recv(alice, &got, 100);
            if (rc < 0)
                alice_dead = 1;
            if (rc == 0)
                sw_wire_msg_clear(&got);
        }
        SW_CHECK(alice_dead);
        SW_CHECK(s_now() - t_rev < 5.0);
        /* bob saw none of them */
        sw_wire_msg_t got = {0};
        int rc = s_expect(bob, 300, &got);
        SW_CHECK(rc == 1 || (rc == 0 && !strcmp(got.peer, SW_WIRE_RELAY_NAME)));
        if (rc == 0)
            sw_wire_msg_clear(&got);
        /* and a new connection with the revoked key is refused */
        sw_peer_t *again = s_peer("alice", "alice", s_path("relay.pub"));
        SW_CHECK(again == NULL);
        sw_peer_destroy(&again);
    }
    zmq_close(carol);
    zmq_close(other);
    zmq_close(mallory);
out:
    sw_peer_destroy(&alice);
    sw_peer_destroy(&bob);
    zmq_ctx_term(ctx);
    sw_test_kill(relay);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", s_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", s_dir);
    return sw_test_done();
}
