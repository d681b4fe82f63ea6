/*
 * relay_bench.c - shardwire-relay-bench: what the relay costs.
 *
 *   shardwire-relay-bench [RELAY_BINARY] [--rounds N] [--messages N] [--idle N] [--secure]
 *
 * Starts the relay binary (default: shardwire-relay next to this program) on
 * a loopback port and reports, on stdout:
 *   - the relay's resident memory (VmRSS) with a few idle peers;
 *   - ping-pong round trips A -> relay -> B -> relay -> A against a direct
 *     DEALER -> ROUTER -> DEALER ping-pong with the same frames, for a small
 *     header-only message and for hot-path tensor sizes; the latency the relay
 *     adds per traversal is (median relay RTT - median direct RTT) / 2;
 *   - throughput and VmRSS after forwarding N 64 KiB messages A -> B.
 * Both ends live on this thread, so the numbers include one receive and one
 * send per end, the same in both set-ups. --secure runs the relay with CURVE
 * and an allow-list and the peers with fresh keys and a cluster key (sealed
 * payloads), so that the difference to a plain run is the cost of security;
 * the direct ping-pong stays plain.
 */
#include "args.h"
#include "keys.h"
#include "log.h"
#include "peer.h"

#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static const char *FP = "feedfacefeedfacefeedfacefeedfacefeedfacefeedfacefeedfacefeedface";

static double s_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static long s_rss_kb(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    long kb = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %ld kB", &kb) == 1)
            break;
    fclose(f);
    return kb;
}

static char s_keydir[64]; /* --secure: temporary folder of keys, "" otherwise */
static sw_sec_t s_sec[3]; /* --secure: the keys of A, B (node keys) and the idle peers (client) */

/* Makes relay and peer keys, an allow-list, a cluster key and an access key in a temp folder. */
static int s_make_keys(void)
{
    char err[512] = "", path[128], pub[3][SW_KEY_Z85_LEN + 1];
    static const char *const who[3] = {"a", "b", "idle"};
    snprintf(s_keydir, sizeof s_keydir, "/tmp/sw-bench-keys.XXXXXX");
    if (!mkdtemp(s_keydir))
        return -1;
    snprintf(path, sizeof path, "%s/relay", s_keydir);
    if (sw_keys_generate(path, NULL, err, sizeof err) != 0)
        goto fail;
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s", s_keydir, who[i]);
        if (sw_keys_generate(path, pub[i], err, sizeof err) != 0)
            goto fail;
    }
    snprintf(path, sizeof path, "%s/allow.txt", s_keydir);
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fprintf(f, "%s node A\n%s node B\n%s client\n", pub[0], pub[1], pub[2]);
    fclose(f);
    char ck[128], ak[128];
    snprintf(ck, sizeof ck, "%s/cluster.key", s_keydir);
    snprintf(ak, sizeof ak, "%s/access.key", s_keydir);
    if (sw_cluster_key_generate(ck, err, sizeof err) != 0 ||
        sw_access_key_generate(ak, err, sizeof err) != 0)
        goto fail;
    for (int i = 0; i < 3; i++) {
        char kf[128], rk[128];
        snprintf(kf, sizeof kf, "%s/%s.key", s_keydir, who[i]);
        snprintf(rk, sizeof rk, "%s/relay.pub", s_keydir);
        sw_sec_args_t a = {.key_file = kf, .relay_key = rk};
        if (i < 2) {
            a.cluster_key[0] = ck;
            a.role = SW_SEC_STAGE;
        } else {
            a.access_key[0] = ak;
        }
        if (sw_sec_load(&a, "tcp://127.0.0.1:1", &s_sec[i], err, sizeof err) != 0)
            goto fail;
    }
    return 0;
fail:
    SW_ERR("bench keys: %s", err);
    return -1;
}

static void s_remove_keys(void)
{
    const char *files[] = {"relay.key", "relay.pub",   "a.key",     "a.pub",
                           "b.key",     "b.pub",       "idle.key",  "idle.pub",
                           "allow.txt", "cluster.key", "access.key"};
    char path[128];
    for (size_t i = 0; s_keydir[0] && i < sizeof files / sizeof files[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", s_keydir, files[i]);
        unlink(path);
    }
    if (s_keydir[0])
        rmdir(s_keydir);
    for (int i = 0; i < 3; i++)
        sw_sec_wipe(&s_sec[i]);
}

static pid_t s_start_relay(const char *bin, char *endpoint, size_t len)
{
    char key[128], allow[128];
    snprintf(key, sizeof key, "%s/relay.key", s_keydir);
    snprintf(allow, sizeof allow, "%s/allow.txt", s_keydir);
    int fds[2];
    if (pipe(fds) != 0)
        return -1;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    posix_spawn_file_actions_addclose(&fa, fds[0]);
    /* Loopback without keys (or with them, --secure), and no rate limit in the way of a
     * throughput measurement. */
    char *argv[16] = {(char *)bin, "--listen", "tcp://127.0.0.1:*",   "--hwm", "1000",
                      "--rate",    "10000000", "--insecure-loopback", NULL};
    if (s_keydir[0]) {
        argv[7] = "--key";
        argv[8] = key;
        argv[9] = "--allow";
        argv[10] = allow;
        argv[11] = "--max-conns-per-key"; /* the idle peers share one client key */
        argv[12] = "256";
    }
    pid_t pid;
    int rc = posix_spawn(&pid, bin, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    if (rc != 0) {
        SW_ERR("cannot start %s: %s", bin, strerror(rc));
        close(fds[0]);
        return -1;
    }
    FILE *f = fdopen(fds[0], "r");
    char line[512] = "";
    if (!f || !fgets(line, sizeof line, f) || strncmp(line, "listening ", 10) != 0) {
        SW_ERR("relay did not report its endpoint");
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        return -1;
    }
    fclose(f);
    line[strcspn(line, "\n")] = '\0';
    size_t n = strlen(line + 10);
    if (n >= len)
        n = len - 1;
    memcpy(endpoint, line + 10, n);
    endpoint[n] = '\0';
    return pid;
}

/* A node peer (who 0 = A, 1 = B) or an idle client (who 2). */
static sw_peer_t *s_peer(const char *ep, const char *name, int who)
{
    const sw_msg_announce_t a = {
        .name = name,
        .role = who < 2 ? SW_ROLE_FULL : SW_ROLE_CLIENT,
        .model_fingerprint = who < 2 ? FP : "",
        .layer_begin = 0,
        .layer_end = who < 2 ? 30 : 0,
        .n_layers = who < 2 ? 30 : 0,
        .hidden = who < 2 ? 576 : 0,
        .backend = who < 2 ? "cpu" : "",
        .max_sessions = 1,
    };
    sw_peer_opts_t o = {.relay = ep, .announce = &a, .sec = s_keydir[0] ? &s_sec[who] : NULL};
    return sw_peer_new(&o);
}

/* A Forward of rows x hidden f16 (rows = 0: header only, tokens instead of a tensor). */
struct msg {
    sw_msg_t msg;                      /* msg.forward */
    uint32_t tokens[SW_WIRE_MAX_ROWS]; /* header only: its one token */
    uint8_t *payload;                  /* (payload_len) the tensor, or NULL */
    size_t payload_len;                /* bytes */
};

static void s_msg_init(struct msg *m, uint32_t rows, uint32_t hidden)
{
    memset(m, 0, sizeof *m);
    m->payload_len = rows ? (size_t)rows * hidden * 2 : 0;
    m->payload = rows ? calloc(1, m->payload_len) : NULL;
    m->msg.type = SW_MSG_FORWARD;
    sw_msg_forward_t *f = &m->msg.forward;
    f->session_id = 1;
    f->n_rows = rows ? rows : 1;
    f->n_tokens = rows ? 0 : 1;
    f->tokens = m->tokens;
    f->dtype = SW_DTYPE_F16;
    f->hidden = rows ? hidden : 0;
    f->n_route = 2;
    f->route[0] = "A";
    f->route[1] = "B";
    f->hop = 1;
    f->reply_to = "A";
    f->payload = m->payload;
    f->payload_len = m->payload_len;
}

static int s_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Prints the distribution; returns the median. */
static double s_report(const char *what, double *rtt, int n)
{
    qsort(rtt, (size_t)n, sizeof *rtt, s_cmp);
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += rtt[i];
    printf("%-34s mean %8.1f us  p50 %8.1f us  p99 %8.1f us\n", what, sum / n, rtt[n / 2],
           rtt[(int)(n * 0.99)]);
    return rtt[n / 2];
}

/* A -> relay -> B -> relay -> A, n times; median RTT in us. */
static double s_pingpong_relay(sw_peer_t *a, sw_peer_t *b, struct msg *m, int n, const char *what)
{
    double *rtt = calloc((size_t)n, sizeof *rtt);
    sw_wire_msg_t r = {0};
    for (int i = 0; i < n; i++) {
        double t0 = s_now_us();
        m->msg.forward.round = (uint64_t)i;
        if (sw_peer_send_msg(a, "B", &m->msg) || sw_peer_recv(b, &r, 5000) != 0 ||
            sw_peer_send_msg(b, "A", &m->msg) || sw_peer_recv(a, &r, 5000) != 0) {
            SW_ERR("relay ping-pong failed at %d", i);
            free(rtt);
            return -1;
        }
        rtt[i] = s_now_us() - t0;
    }
    sw_wire_msg_clear(&r);
    double p50 = s_report(what, rtt, n);
    free(rtt);
    return p50;
}

/* The same frames DEALER -> ROUTER -> DEALER with no relay in between. */
static double s_pingpong_direct(struct msg *m, int n, const char *what)
{
    void *ctx = zmq_ctx_new();
    void *router = zmq_socket(ctx, ZMQ_ROUTER), *dealer = zmq_socket(ctx, ZMQ_DEALER);
    char ep[256];
    size_t len = sizeof ep;
    int zero = 0;
    zmq_setsockopt(router, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(dealer, ZMQ_LINGER, &zero, sizeof zero);
    zmq_bind(router, "tcp://127.0.0.1:*");
    zmq_getsockopt(router, ZMQ_LAST_ENDPOINT, ep, &len);
    zmq_connect(dealer, ep);
    double *rtt = calloc((size_t)n, sizeof *rtt);
    sw_wire_msg_t r = {0};
    char err[SW_WIRE_ERR_LEN];
    for (int i = 0; i < n; i++) {
        double t0 = s_now_us();
        m->msg.forward.round = (uint64_t)i;
        /* dealer -> router: [name][header][payload] (what a peer sends the relay) */
        if (sw_codec_send(dealer, "B", &m->msg, 0, NULL, err, sizeof err)) {
            SW_ERR("direct: %s", err);
            break;
        }
        zmq_msg_t id;
        zmq_msg_init(&id);
        zmq_msg_recv(&id, router, 0);
        if (sw_wire_recv(router, 0, &r, err, sizeof err) != SW_WIRE_OK) {
            SW_ERR("direct: %s", err);
            break;
        }
        /* router -> dealer: [id][name][header][payload] */
        zmq_msg_send(&id, router, ZMQ_SNDMORE);
        if (sw_codec_send(router, "A", &m->msg, 0, NULL, err, sizeof err) ||
            sw_wire_recv(dealer, 0, &r, err, sizeof err) != SW_WIRE_OK) {
            SW_ERR("direct: %s", err);
            break;
        }
        rtt[i] = s_now_us() - t0;
    }
    sw_wire_msg_clear(&r);
    double p50 = s_report(what, rtt, n);
    free(rtt);
    zmq_close(router);
    zmq_close(dealer);
    zmq_ctx_term(ctx);
    return p50;
}

int main(int argc, char **argv)
{
    char bin[1024];
    int rounds = 2000, messages = 10000, n_idle = 4, secure = 0;
    snprintf(bin, sizeof bin, "%s", argv[0]);
    char *slash = strrchr(bin, '/');
    snprintf(slash ? slash + 1 : bin, sizeof bin - (size_t)(slash ? slash + 1 - bin : 0), "%s",
             "shardwire-relay");
    static const char usage[] =
        "usage: shardwire-relay-bench [RELAY] [--rounds N] [--messages N] [--idle N] [--secure]\n"
        "  RELAY          the shardwire-relay binary to measure (default: the one beside this)\n"
        "  --rounds N     request/reply rounds per payload size for the latency (default 2000)\n"
        "  --messages N   messages for the throughput (default 10000)\n"
        "  --idle N       idle peers connected meanwhile, <= 254 (default 4)\n"
        "  --secure       CURVE keys and an allow-list instead of --insecure-loopback\n"
        "  -h, --help     this text\n"
        "  -V, --version  the version\n";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(usage, stdout);
            return 0;
        }
        if (!strcmp(argv[i], "--version") || !strcmp(argv[i], "-V")) {
            printf("shardwire-relay-bench %s\n", sw_version());
            return 0;
        }
        if (argv[i][0] == '-' && strcmp(argv[i], "--secure") &&
            ((strcmp(argv[i], "--rounds") && strcmp(argv[i], "--messages") &&
              strcmp(argv[i], "--idle")) ||
             i + 1 >= argc)) {
            fprintf(stderr,
                    "shardwire-relay-bench: unknown option or missing value '%s' (see "
                    "'shardwire-relay-bench --help')\n",
                    argv[i]);
            return 2;
        }
        if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--messages") && i + 1 < argc)
            messages = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--idle") && i + 1 < argc)
            n_idle = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--secure"))
            secure = 1;
        else
            snprintf(bin, sizeof bin, "%s", argv[i]);
    }
    if (rounds < 1 || messages < 1 || n_idle < 0 || n_idle > SW_WIRE_MAX_PEERS - 2) {
        fputs(usage, stderr);
        return 2;
    }
    sw_log_set_level(SW_LOG_WARN);
    if (secure && s_make_keys() != 0) {
        s_remove_keys();
        return 1;
    }
    char ep[256];
    pid_t relay = s_start_relay(bin, ep, sizeof ep);
    if (relay <= 0) {
        s_remove_keys();
        return 1;
    }
    printf("relay %s pid %d%s\n", ep, (int)relay,
           secure ? " (CURVE, allow-list, sealed payloads)" : "");
    printf("relay VmRSS at start: %ld kB\n", s_rss_kb(relay));

    sw_peer_t *a = s_peer(ep, "A", 0), *b = s_peer(ep, "B", 1);
    sw_peer_t **idle = calloc((size_t)n_idle + 1, sizeof *idle);
    char name[16];
    int rc = 1, up = 0;
    for (int i = 0; i < n_idle; i++) {
        snprintf(name, sizeof name, "idle-%d", i);
        idle[i] = s_peer(ep, name, 2);
        up += idle[i] != NULL;
    }
    if (!a || !b || up != n_idle)
        goto out;
    usleep(300 * 1000);
    printf("relay VmRSS with %d idle peers: %ld kB\n", n_idle + 2, s_rss_kb(relay));

    /* header only; one K=8 round of SmolLM2-135M (9 x 576 f16); of a 7B model
     * with hidden 3584 (9 x 3584 f16); a 32 x 1024 f16 = 64 KiB block */
    static const uint32_t shapes[][2] = {{0, 0}, {9, 576}, {9, 3584}, {32, 1024}};
    struct msg m;
    s_msg_init(&m, 0, 0);
    s_pingpong_relay(a, b, &m, rounds / 10 + 1, "warm-up");
    free(m.payload);
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        char label[96];
        s_msg_init(&m, shapes[k][0], shapes[k][1]);
        if (shapes[k][0])
            snprintf(label, sizeof label, "%u x %u f16 (%zu B)", shapes[k][0], shapes[k][1],
                     m.payload_len);
        else
            snprintf(label, sizeof label, "header only");
        printf("-- %s\n", label);
        double r = s_pingpong_relay(a, b, &m, rounds, "   relay  RTT");
        double d = s_pingpong_direct(&m, rounds, "   direct RTT");
        printf("   added per relay traversal (medians): %.1f us\n", (r - d) / 2);
        free(m.payload);
    }

    struct msg big;
    s_msg_init(&big, 32, 1024);
    /* N payload messages A -> B in windows of 64 (the relay's queues hold 1000) */
    double t0 = s_now_us();
    sw_wire_msg_t r = {0};
    int got = 0;
    for (int sent = 0; sent < messages;) {
        int w = messages - sent < 64 ? messages - sent : 64;
        for (int i = 0; i < w; i++)
            if (sw_peer_send_msg(a, "B", &big.msg) != 0)
                goto out;
        sent += w;
        for (int i = 0; i < w; i++) {
            if (sw_peer_recv(b, &r, 5000) != 0) {
                SW_ERR("lost messages: %d of %d arrived", got, sent);
                goto out;
            }
            got++;
        }
    }
    sw_wire_msg_clear(&r);
    double dt = (s_now_us() - t0) / 1e6;
    printf("forwarded %d x %zu B in %.2f s: %.0f msg/s, %.1f MB/s\n", got, big.payload_len, dt,
           got / dt, got * (double)big.payload_len / dt / 1e6);
    printf("relay VmRSS after %d x %zu B: %ld kB\n", got, big.payload_len, s_rss_kb(relay));
    free(big.payload);
    rc = 0;
out:
    sw_peer_destroy(&a);
    sw_peer_destroy(&b);
    for (int i = 0; idle && i < n_idle; i++)
        sw_peer_destroy(&idle[i]);
    free(idle);
    kill(relay, SIGTERM);
    waitpid(relay, NULL, 0);
    s_remove_keys();
    return rc;
}
