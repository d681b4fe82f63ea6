/*
 * test_direct.c - direct paths between nodes (issue 39; label slow). Real processes on
 * loopback from the bundles of `shardwire cluster init` and their own start scripts: one
 * relay, a head and a tail, CURVE keys and sealing, `shardwire run` clients. Every output is
 * compared token for token and by its logits digest with the single-process `generate`.
 *
 *  1. no --listen: the relay carries every round (its counters for the tail grow with the
 *     rounds): what a node without --listen always gets;
 *  2. the tail restarted with --listen (reached through a shardwire-wanem proxy, its
 *     --listen-public): the head dials it and every message between the two skips the relay
 *     (the tail's relay counters stay still while 120 tokens go by);
 *  3. the direct link cut mid-request (the proxy stopped for STOP_MS, so that a round is
 *     certainly inside it, then SIGKILLed: the kernel closes both TCP connections, as a
 *     middlebox dropping the link would; what it held is lost): the head finds the link lost,
 *     sends the round in flight again by the relay (never the whole session), the tail's
 *     counters grow again, output identical;
 *  4. keys that may not dial the listener: a fresh CURVE key (not on the allow-list) and the
 *     client's key (on it, as a client) are refused by the tail's ZAP handler, one line each;
 *  5. a listener that never answers (a TCP port that accepts and stays silent, as behind a NAT
 *     or a firewall that swallows the handshake): the dial gives up after --direct-dial-ms and
 *     the relay keeps the path; output identical.
 */
#include "sw_fault.h"
#include "sw_limits.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <zmq.h>

#define N_GEN 120
#define DIAL_MS 1000
#define STOP_MS 300 /* the proxy stopped this long before the SIGKILL: a round is inside it */

static char s_dir[256], s_relay[64], s_pub[320], s_allow[320];
static swf_cluster_t s_c; /* its log: the nodes' */
static pid_t s_relay_pid, s_head, s_tail;

static pid_t s_start_node(const char *name, const char *layers, const char *listen,
                          const char *public_ep)
{
    char script[320], dial[16];
    snprintf(script, sizeof script, "%s/%s/start.sh", s_dir, name);
    snprintf(dial, sizeof dial, "%d", DIAL_MS);
    setenv("SW_MODEL", sw_test_model(), 1);
    setenv("SW_LAYERS", layers, 1);
    setenv("SHARDWIRE_BIN", sw_test_env("SW_BIN_DIR"), 1);
    char *argv[20] = {"/bin/sh",          script, "--threads",           "1",
                      "--heartbeat-ms",   "200",  "--recover-timeout-s", "60",
                      "--direct-dial-ms", dial};
    int k = 10;
    if (listen) {
        argv[k++] = "--listen";
        argv[k++] = (char *)listen;
        argv[k++] = "--listen-public";
        argv[k++] = (char *)public_ep;
        argv[k++] = "--allow";
        argv[k++] = s_allow;
    }
    argv[k] = NULL;
    return sw_test_spawn(argv, s_c.log);
}

/* One request; checks it against ref; the tail's relay counters before and after. Its time. */
static double s_request(const char *what, const swf_result_t *ref, long *in_delta, long *out_delta)
{
    long in0 = 0, out0 = 0, in1 = 0, out1 = 0;
    SW_CHECK_INT(swf_peer(s_relay, "tail", &in0, &out0), 1);
    swf_client_t cl = {0};
    swf_result_t got;
    SW_CHECK_INT(swf_client_start(&cl, s_relay, "Once upon a time,", N_GEN, 300, NULL, what), 0);
    swf_client_wait(&cl, &got);
    SWF_CHECK_SAME(what, &got, ref);
    SW_CHECK_INT(swf_peer(s_relay, "tail", &in1, &out1), 1);
    *in_delta = in1 - in0;
    *out_delta = out1 - out0;
    fprintf(stderr,
            "%s: %d tokens in %.0f ms; the relay carried %ld messages from the tail and "
            "%ld to it\n",
            what, got.n, got.total_ms, *in_delta, *out_delta);
    return got.total_ms;
}

/* A CURVE client with the secret key sec (Z85) dials the listener at ep (server key pub): 1
 * when the handshake was refused (ZMQ_EVENT_HANDSHAKE_FAILED_AUTH within 5 s), 0 when it went
 * through, -1 when neither happened. */
static int s_dial_refused(const char *ep, const char *pub, const char *sec)
{
    void *ctx = zmq_ctx_new(), *s = zmq_socket(ctx, ZMQ_DEALER), *mon = zmq_socket(ctx, ZMQ_PAIR);
    char own_pub[41];
    zmq_curve_public(own_pub, sec);
    int zero = 0, rc = -1;
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(mon, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(s, ZMQ_CURVE_SERVERKEY, pub, 41);
    zmq_setsockopt(s, ZMQ_CURVE_PUBLICKEY, own_pub, 41);
    zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, sec, 41);
    zmq_socket_monitor(s, "inproc://test-direct-mon",
                       ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH);
    zmq_connect(mon, "inproc://test-direct-mon");
    zmq_connect(s, ep);
    int t = 5000;
    zmq_setsockopt(mon, ZMQ_RCVTIMEO, &t, sizeof t);
    zmq_msg_t ev;
    zmq_msg_init(&ev);
    if (zmq_msg_recv(&ev, mon, 0) >= 2) {
        uint16_t e;
        memcpy(&e, zmq_msg_data(&ev), 2);
        rc = e == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH ? 1 : 0;
    }
    zmq_msg_close(&ev);
    zmq_socket_monitor(s, NULL, 0);
    zmq_close(s);
    zmq_close(mon);
    zmq_ctx_term(ctx);
    return rc;
}

/* The Z85 key on the first line of path that is not a comment. */
static void s_key_of(const char *path, char out[41])
{
    size_t len = 0;
    char *text = sw_test_read_file(path, &len);
    out[0] = 0;
    for (char *line = text; line && *line;) {
        char *end = strchr(line, '\n');
        if (line[0] != '#' && (end ? end - line : (long)strlen(line)) >= 40) {
            memcpy(out, line, 40);
            out[40] = 0;
            break;
        }
        line = end ? end + 1 : NULL;
    }
    free(text);
}

/* Phase 4: keys that may not dial the tail's listener. */
static void s_wrong_keys(const char *listen_ep)
{
    char tail_pub[41], client_sec[41], path[400], fresh_pub[41], fresh_sec[41];
    snprintf(path, sizeof path, "%s/tail/tail.pub", s_dir);
    s_key_of(path, tail_pub);
    snprintf(path, sizeof path, "%s/client/client.key", s_dir);
    s_key_of(path, client_sec);
    SW_CHECK(tail_pub[0] && client_sec[0]);
    SW_CHECK_INT(zmq_curve_keypair(fresh_pub, fresh_sec), 0);
    const int before = swf_log_count(&s_c, "refused a direct link from");
    SW_CHECK_INT(s_dial_refused(listen_ep, tail_pub, fresh_sec), 1);
    SW_CHECK_INT(swf_wait_log(&s_c, "key not on this node's allow-list", 1, 10), 0);
    SW_CHECK_INT(s_dial_refused(listen_ep, tail_pub, client_sec), 1);
    SW_CHECK_INT(
        swf_wait_log(&s_c, "a client key: only the nodes of the cluster dial a node", 1, 10), 0);
    SW_CHECK(swf_log_count(&s_c, "refused a direct link from") >= before + 2);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    swf_result_t ref;
    swf_reference(sw_test_model(), "Once upon a time,", N_GEN, NULL, &ref);
    SW_CHECK(ref.ok && ref.n == N_GEN);

    snprintf(s_dir, sizeof s_dir, "%s", sw_test_log("direct_keys"));
    snprintf(s_c.log, sizeof s_c.log, "%s", sw_test_log("direct_nodes.log"));
    unlink(s_c.log);
    snprintf(s_relay, sizeof s_relay, "tcp://127.0.0.1:%d", sw_test_free_port());
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s cluster init --relay %s --listen %s --nodes head,tail --out %s",
             sw_test_bin("shardwire"), s_relay + 6, s_relay, s_dir);
    SW_CHECK_INT(sw_test_sh(cmd, 60, NULL), 0);
    snprintf(s_allow, sizeof s_allow, "%s/allow.txt", s_dir);
    snprintf(s_pub, sizeof s_pub, "%s/client/relay.pub", s_dir);
    char script[320], path[400];
    snprintf(script, sizeof script, "%s/relay/start.sh", s_dir);
    setenv("SHARDWIRE_BIN", sw_test_env("SW_BIN_DIR"), 1);
    char *ra[] = {"/bin/sh", script, "--heartbeat-ms", "200", NULL};
    s_relay_pid = sw_test_spawn(ra, sw_test_log("direct_relay.log"));
    snprintf(path, sizeof path, "%s/client/client.key", s_dir);
    setenv("SW_KEY", path, 1);
    snprintf(path, sizeof path, "%s/client/access.key", s_dir);
    setenv("SW_ACCESS_KEY", path, 1);
    unsetenv("SW_CLUSTER_KEY");
    setenv("SW_RELAY_KEY", s_pub, 1);

    /* 1. no --listen: every round goes by the relay */
    s_head = s_start_node("head", "0:15", NULL, NULL);
    s_tail = s_start_node("tail", "15:30", NULL, NULL);
    SW_CHECK_INT(sw_test_wait_peers(s_relay, 2, 60), 0);
    long in = 0, out = 0;
    s_request("relay", &ref, &in, &out);
    SW_CHECK(in >= N_GEN / 16 && out >= N_GEN / 16); /* at least a round per 16 tokens */
    SW_CHECK_INT(swf_log_count(&s_c, "direct:"), 0);
    char hp[16] = "";
    double rtt = -1;
    SW_CHECK_INT(swf_hop(s_relay, "head", "tail", hp, sizeof hp, &rtt), 0);
    SW_CHECK(!strcmp(hp, "relay") && rtt > 0);
    SW_CHECK_INT(swf_hop(s_relay, "tail", "head", hp, sizeof hp, &rtt), 0);
    SW_CHECK(!strcmp(hp, "relay"));

    /* 2. the tail listens (behind a proxy): the head dials it; nothing goes by the relay */
    sw_test_kill(s_tail);
    char lsn[64], wan[64], wan_ep[80], listen_ep[80];
    const int lport = sw_test_free_port(), wport = sw_test_free_port();
    snprintf(lsn, sizeof lsn, "127.0.0.1:%d", lport);
    snprintf(listen_ep, sizeof listen_ep, "tcp://%s", lsn);
    snprintf(wan, sizeof wan, "127.0.0.1:%d", wport);
    snprintf(wan_ep, sizeof wan_ep, "tcp://%s", wan);
    pid_t wanem = sw_test_spawn_wanem(wan, lsn, 1, sw_test_log("direct_wanem.log"));
    SW_CHECK_INT(sw_test_wait_listen(wan_ep, 30), 0);
    s_tail = s_start_node("tail", "15:30", lsn, wan);
    SW_CHECK_INT(swf_wait_log(&s_c, "direct: link to tail", 1, 60), 0);
    usleep((SW_DIRECT_QUIET_MS + 300) * 1000); /* whatever went to it by the relay is there */
    const double direct_ms = s_request("direct", &ref, &in, &out);
    SW_CHECK(in <= 1 && out <= 1);
    SW_CHECK(swf_log_count(&s_c, "direct: messages to tail go by the direct link now") >= 1);
    /* status shows it per hop, both ways, with the link's round trip */
    SW_CHECK_INT(swf_hop(s_relay, "head", "tail", hp, sizeof hp, &rtt), 0);
    SW_CHECK(!strcmp(hp, "direct") && rtt > 0);
    SW_CHECK_INT(swf_hop(s_relay, "tail", "head", hp, sizeof hp, &rtt), 0);
    SW_CHECK(!strcmp(hp, "direct"));

    /* 3. the link cut mid-request: the proxy dies, both its connections close */
    const int lost_before =
        swf_log_count(&s_c, "a direct link was lost while the round travelled: sending");
    const int whole_before = swf_log_count(&s_c, "recovery: replaying");
    long hin0 = 0, tin0 = 0, tin1 = 0;
    SW_CHECK_INT(swf_peer(s_relay, "head", &hin0, NULL), 1);
    SW_CHECK_INT(swf_peer(s_relay, "tail", &tin0, NULL), 1);
    swf_client_t cl = {0};
    swf_result_t got;
    SW_CHECK_INT(swf_client_start(&cl, s_relay, "Once upon a time,", N_GEN, 300, NULL, "cut"), 0);
    SW_CHECK_INT(swf_wait_msgs_in(s_relay, "head", hin0 + 20, 120), 0); /* tokens flow */
    kill(wanem, SIGSTOP); /* the round in flight is inside the proxy when it dies */
    usleep(STOP_MS * 1000);
    swf_kill9(&wanem);
    swf_client_wait(&cl, &got);
    SW_CHECK_INT(got.rc, 0);
    SW_CHECK(swf_same(&got, &ref));
    SW_CHECK(!strcmp(got.digest, ref.digest));
    if (!swf_same(&got, &ref))
        fprintf(stderr, "cut: tokens differ at %d: %s\n", swf_diff_at(&got, &ref), got.err);
    SW_CHECK(swf_log_count(&s_c, "direct: link to tail lost") >= 1);
    SW_CHECK_INT(swf_log_count(&s_c, "recovery: replaying") - whole_before, 0);
    const int again =
        swf_log_count(&s_c, "a direct link was lost while the round travelled: sending") -
        lost_before;
    SW_CHECK(again <= 1);
    /* the fallback is at once: not a round timeout (--round-timeout-ms) */
    SW_CHECK(got.total_ms < direct_ms + 5000);
    SW_CHECK_INT(swf_peer(s_relay, "tail", &tin1, NULL), 1);
    SW_CHECK(tin1 > tin0); /* the rest went by the relay */
    fprintf(stderr,
            "cut: %d tokens in %.0f ms (%.0f without the cut); the round in flight sent "
            "again %d time(s); the relay carried %ld messages from the tail after the "
            "cut\n",
            got.n, got.total_ms, direct_ms, again, tin1 - tin0);

    /* 4. keys that may not dial */
    s_wrong_keys(listen_ep);

    /* 5. a listener address that never answers: the relay keeps the path */
    sw_test_kill(s_tail);
    int hole = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    setsockopt(hole, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    SW_CHECK(hole >= 0 && bind(hole, (struct sockaddr *)&sa, sizeof sa) == 0 &&
             listen(hole, 16) == 0);
    socklen_t sl = sizeof sa;
    getsockname(hole, (struct sockaddr *)&sa, &sl);
    char silent[64];
    snprintf(silent, sizeof silent, "127.0.0.1:%d", ntohs(sa.sin_port));
    char needle[128];
    snprintf(needle, sizeof needle, "listener at tcp://%s did not answer within", silent);
    s_tail = s_start_node("tail", "15:30", lsn, silent);
    SW_CHECK_INT(swf_wait_log(&s_c, needle, 1, 60), 0);
    s_request("silent listener", &ref, &in, &out);
    SW_CHECK(in >= N_GEN / 16 && out >= N_GEN / 16);
    close(hole);

    sw_test_kill(s_head);
    sw_test_kill(s_tail);
    sw_test_kill(s_relay_pid);
    return sw_test_done();
}
