/*
 * test_netns_direct.c - direct paths on namespaced hosts (issue 39; label slow; the bed of
 * test_netns, tests/sw_netns.h; docs/fault-tolerance.md section 5). A head and a tail with
 * public addresses, the relay RELAY_MS away (one way) from both, a tail behind NAT:
 *
 *   head 10.0.1.2 --+                 +-- 10.0.0.2 relay (RELAY_MS one way)
 *   tail 10.0.2.2 --+------ wan ------+-- 10.0.3.2 client
 *   (its listener DIRECT_MS away)     +-- natt 10.0.5.2 -- ntail 192.168.2.2 (masquerade)
 *
 * The relay runs on 127.0.0.1 behind a shardwire-wanem on its host's address, the tail's
 * listener on 127.0.0.1 behind one on 10.0.2.2 (--listen-public): through the relay a message
 * from the head to the tail takes 2 x RELAY_MS, directly DIRECT_MS. CURVE and sealing on, the
 * bundles of `shardwire cluster init`, --heartbeat-ms 200, `shardwire run` clients on the
 * client host; every output and its logits digest must equal `shardwire generate`.
 *
 *  0. the tail without --listen: every round goes by the relay (its counters for the tail grow);
 *  a. the tail with --listen: the head dials it, status says "direct" both ways and the relay's
 *     counters for the tail stay still while N_GEN tokens go by;
 *  b. the direct link cut mid-request (an nft drop of the listener's port on the wan router,
 *     both ways, past the silence rule, then healed): the round in flight goes again by the
 *     relay (at most once, never the whole session), the tail's relay counters move again;
 *  c. a tail behind NAT with --listen on its private address: the head's dial is given up after
 *     --direct-dial-ms, status says "relay", every round goes by the relay.
 *
 * Each request prints a "measure:" line (path, tokens, rounds, ms) that
 * scripts/bench/bench_direct.py reads; SW_DIRECT_BENCH_REPS (default 1) repeats the requests of
 * 0 and a. Needs root (ip netns, nft): skipped without.
 */
#include "sw_fault.h"
#include "sw_limits.h"
#include "sw_netns.h"

#define N_GEN 120
#define HB_MS 200
#define DIAL_MS 1000
#define RELAY_MS 40  /* one way between the relay and every host */
#define DIRECT_MS 10 /* one way between the head and the tail's listener */
#define RELAY_PORT 7700
#define LISTEN_PORT 7800 /* the tail's listener (on 127.0.0.1; on 192.168.2.2 behind NAT) */
#define PUBLIC_PORT 7810 /* its wanem on 10.0.2.2 */

static swn_bed_t s_bed;
static swf_cluster_t s_c; /* its log: the nodes' */
static char s_dir[256], s_relay[64], s_allow[320], s_home[64];
static const char *s_prompt = "Once upon a time,";

static int s_build(void)
{
    static const char *const hosts[] = {"wan",  "rl",    "head",   "tail",
                                        "natt", "ntail", "client", NULL};
    return swn_build(&s_bed, "d", hosts,
                     "link wan r0 10.0.0.1/24 rl w0 10.0.0.2/24\n"
                     "link wan h0 10.0.1.1/24 head w0 10.0.1.2/24\n"
                     "link wan t0 10.0.2.1/24 tail w0 10.0.2.2/24\n"
                     "link wan c0 10.0.3.1/24 client w0 10.0.3.2/24\n"
                     "link wan n0 10.0.5.1/24 natt w0 10.0.5.2/24\n"
                     "link natt l0 192.168.2.1/24 ntail e0 192.168.2.2/24\n"
                     "ip -n $P-rl route add default via 10.0.0.1\n"
                     "ip -n $P-head route add default via 10.0.1.1\n"
                     "ip -n $P-tail route add default via 10.0.2.1\n"
                     "ip -n $P-client route add default via 10.0.3.1\n"
                     "ip -n $P-natt route add default via 10.0.5.1\n"
                     "ip -n $P-ntail route add default via 192.168.2.1\n"
                     "router wan\n"
                     "nat natt w0\n"
                     "ip netns exec $P-wan nft -f - <<EOF\n"
                     "table inet f {\n chain fw {\n type filter hook forward priority 0;\n }\n}\n"
                     "EOF\n");
}

/* A node by its bundle's start.sh on host `host`; listen/public_ep NULL: no --listen. */
static pid_t s_node(const char *host, const char *name, const char *layers, const char *listen,
                    const char *public_ep)
{
    char script[320], dial[16], hb[16];
    snprintf(script, sizeof script, "%s/%s/start.sh", s_dir, name);
    snprintf(dial, sizeof dial, "%d", DIAL_MS);
    snprintf(hb, sizeof hb, "%d", HB_MS);
    setenv("SW_MODEL", sw_test_model(), 1);
    setenv("SW_LAYERS", layers, 1);
    setenv("SHARDWIRE_BIN", sw_test_env("SW_BIN_DIR"), 1);
    char *argv[20] = {"/bin/sh",          script, "--threads",           "1",
                      "--heartbeat-ms",   hb,     "--recover-timeout-s", "60",
                      "--direct-dial-ms", dial};
    int k = 10;
    if (listen) {
        argv[k++] = "--listen";
        argv[k++] = (char *)listen;
        if (public_ep) {
            argv[k++] = "--listen-public";
            argv[k++] = (char *)public_ep;
        }
        argv[k++] = "--allow";
        argv[k++] = s_allow;
    }
    argv[k] = NULL;
    swn_enter(&s_bed, host);
    const pid_t pid = sw_test_spawn(argv, s_c.log);
    sw_test_netns(s_home);
    return pid;
}

/* One request from the client host; checks it against ref; the relay's counters for the tail
 * (messages from it, to it) moved by *in_d, *out_d. Prints a "measure:" line. The time of a
 * round (ms: the request's time over the head's rounds). */
static double s_request(const char *what, const swf_result_t *ref, long *in_d, long *out_d)
{
    long in0 = 0, out0 = 0, in1 = 0, out1 = 0;
    SW_CHECK_INT(swf_peer(s_relay, "tail", &in0, &out0), 1);
    swf_client_t cl = {0};
    swf_result_t got;
    SW_CHECK_INT(swf_client_start(&cl, s_relay, s_prompt, N_GEN, 300, NULL, what), 0);
    swf_client_wait(&cl, &got);
    SWF_CHECK_SAME(what, &got, ref);
    SW_CHECK_INT(swf_peer(s_relay, "tail", &in1, &out1), 1);
    *in_d = in1 - in0;
    *out_d = out1 - out0;
    const double rounds = swf_log_ms(&s_c, "tokens in ");
    fprintf(stderr,
            "%s: %d tokens in %.0f rounds, %.0f ms (%.1f ms a token, %.1f ms a round); the relay "
            "carried %ld messages from the tail and %ld to it\n",
            what, got.n, rounds, got.total_ms, got.n > 0 ? got.total_ms / got.n : 0,
            rounds > 0 ? got.total_ms / rounds : 0, *in_d, *out_d);
    printf("measure: what=%s tokens=%d rounds=%.0f ms=%.1f relay_in=%ld relay_out=%ld\n", what,
           got.n, rounds, got.total_ms, *in_d, *out_d);
    fflush(stdout);
    return rounds > 0 ? got.total_ms / rounds : got.total_ms;
}

/* Checks status's hops head -> tail and tail -> head against path ("direct" or "relay"). */
static void s_hops(const char *path)
{
    char hp[16] = "";
    double rtt = -1;
    SW_CHECK_INT(swf_hop(s_relay, "head", "tail", hp, sizeof hp, &rtt), 0);
    SW_CHECK(!strcmp(hp, path) && rtt > 0);
    if (strcmp(hp, path))
        fprintf(stderr, "status: hop head -> tail by '%s', expected %s\n", hp, path);
    SW_CHECK_INT(swf_hop(s_relay, "tail", "head", hp, sizeof hp, &rtt), 0);
    SW_CHECK(!strcmp(hp, path));
}

/* Waits up to timeout_s for the nodes' log to hold needle more than `before` times. */
static int s_wait_log(const char *needle, int before, int timeout_s)
{
    return swn_wait_log(s_c.log, needle, before, timeout_s);
}

/* b. the direct link cut mid-request: the listener's public port dropped on the wan router
 * past the silence rule, then healed. The extra time (the head's measure: found lost + through
 * again by the relay - one direct round) within detection + one relay round + SLACK_MS. */
#define SLACK_MS 1000
static void s_cut(const swf_result_t *ref, double direct_round, double relay_round)
{
    const char *resend = "a direct link was lost while the round travelled: sending it again";
    const int lost_before = swf_log_count(&s_c, resend);
    const int one_before = swf_log_count(&s_c, "recovery: sending the round");
    const int whole_before = swf_log_count(&s_c, "recovery: replaying");
    const int down_before = swf_log_count(&s_c, "direct: link to tail lost");
    long hin0 = 0, tin0 = 0, tin1 = 0;
    SW_CHECK_INT(swf_peer(s_relay, "head", &hin0, NULL), 1);
    SW_CHECK_INT(swf_peer(s_relay, "tail", &tin0, NULL), 1);
    swf_client_t cl = {0};
    swf_result_t got;
    SW_CHECK_INT(swf_client_start(&cl, s_relay, s_prompt, N_GEN, 300, NULL, "cut"), 0);
    SW_CHECK_INT(swf_wait_msgs_in(s_relay, "head", hin0 + 20, 120), 0); /* tokens flow */
    char dport[32], sport[32];
    snprintf(dport, sizeof dport, "tcp dport %d", PUBLIC_PORT);
    snprintf(sport, sizeof sport, "tcp sport %d", PUBLIC_PORT);
    const double t0 = swf_now_ms();
    SW_CHECK_INT(swn_drop(&s_bed, "wan", dport, sport, SW_PEER_SILENT_IVLS * HB_MS + 1500), 0);
    const double held = swf_now_ms() - t0;
    swf_client_wait(&cl, &got);
    SW_CHECK_INT(got.rc, 0);
    SW_CHECK(swf_same(&got, ref));
    SW_CHECK(!strcmp(got.digest, ref->digest));
    if (!swf_same(&got, ref))
        fprintf(stderr, "cut: tokens differ at %d: %s\n", swf_diff_at(&got, ref), got.err);
    SW_CHECK(swf_log_count(&s_c, "direct: link to tail lost") > down_before);
    /* the round in flight alone went again (at most one round), never the whole session */
    const int again = swf_log_count(&s_c, resend) - lost_before;
    SW_CHECK(again <= 1);
    SW_CHECK(swf_log_count(&s_c, "recovery: sending the round") - one_before <= 1);
    SW_CHECK_INT(swf_log_count(&s_c, "recovery: replaying") - whole_before, 0);
    SW_CHECK_INT(swf_peer(s_relay, "tail", &tin1, NULL), 1);
    SW_CHECK(tin1 > tin0); /* the rounds after the cut went by the relay */
    double extra = 0;
    const double bound = (SW_PEER_SILENT_IVLS + 1) * HB_MS + relay_round + SLACK_MS;
    if (again == 1) {
        const double found = swf_log_ms(&s_c, "failed after "),
                     through = swf_log_ms(&s_c, "went through again ");
        extra = found + through - direct_round;
        SW_CHECK(found > 0 && through > 0);
        SW_CHECK(extra <= bound);
    }
    fprintf(stderr,
            "b. cut: %d tokens in %.0f ms (the drop held %.0f ms); the round in flight sent "
            "again %d time(s), extra time %.0f ms (bound %.0f ms: detection %d + one relay round "
            "%.0f + noise %d); the relay carried %ld messages from the tail after the cut\n",
            got.n, got.total_ms, held, again, extra, bound, (SW_PEER_SILENT_IVLS + 1) * HB_MS,
            relay_round, SLACK_MS, tin1 - tin0);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    swn_need();
    swf_result_t ref;
    swf_reference(sw_test_model(), s_prompt, N_GEN, NULL, &ref);
    SW_CHECK(ref.ok && ref.n == N_GEN);
    const char *reps_env = getenv("SW_DIRECT_BENCH_REPS");
    const int reps = reps_env && atoi(reps_env) > 0 ? atoi(reps_env) : 1;
    if (s_build() != 0)
        sw_test_skip("could not build the namespaces");
    snprintf(s_home, sizeof s_home, "%s", swn_ns(&s_bed, "client"));
    snprintf(s_c.log, sizeof s_c.log, "%s", sw_test_log("dnetns_nodes.log"));
    unlink(s_c.log);
    snprintf(s_dir, sizeof s_dir, "%s", sw_test_log("dnetns_keys"));
    snprintf(s_allow, sizeof s_allow, "%s/allow.txt", s_dir);
    snprintf(s_relay, sizeof s_relay, "tcp://10.0.0.2:%d", RELAY_PORT);

    /* the relay on 127.0.0.1 of its host, RELAY_MS away behind a wanem */
    char lsn[32], up[32];
    snprintf(lsn, sizeof lsn, "10.0.0.2:%d", RELAY_PORT);
    snprintf(up, sizeof up, "127.0.0.1:%d", RELAY_PORT + 1);
    const pid_t wr = swn_wanem(&s_bed, "rl", lsn, up, RELAY_MS, "dnetns_wanem_relay.log");
    SW_CHECK(wr > 0);
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "%s cluster init --relay 10.0.0.2:%d --listen tcp://127.0.0.1:%d --nodes head,tail "
             "--out %s",
             sw_test_bin("shardwire"), RELAY_PORT, RELAY_PORT + 1, s_dir);
    SW_CHECK_INT(sw_test_sh(cmd, 60, NULL), 0);
    char script[320], path[400];
    snprintf(script, sizeof script, "%s/relay/start.sh", s_dir);
    setenv("SHARDWIRE_BIN", sw_test_env("SW_BIN_DIR"), 1);
    char *ra[] = {"/bin/sh", script, "--heartbeat-ms", "200", NULL};
    swn_enter(&s_bed, "rl");
    const pid_t relay = sw_test_spawn(ra, sw_test_log("dnetns_relay.log"));
    sw_test_netns(s_home);
    snprintf(path, sizeof path, "%s/client/client.key", s_dir);
    setenv("SW_KEY", path, 1);
    snprintf(path, sizeof path, "%s/client/access.key", s_dir);
    setenv("SW_ACCESS_KEY", path, 1);
    unsetenv("SW_CLUSTER_KEY");
    snprintf(path, sizeof path, "%s/client/relay.pub", s_dir);
    setenv("SW_RELAY_KEY", path, 1);
    printf("WAN: the relay %d ms one way from every host (head -> relay -> tail %d ms), the "
           "tail's listener %d ms from the head (shardwire-wanem)\n",
           RELAY_MS, 2 * RELAY_MS, DIRECT_MS);
    fflush(stdout);

    /* 0. no --listen: every round by the relay */
    const pid_t head = s_node("head", "head", "0:15", NULL, NULL);
    pid_t tail = s_node("tail", "tail", "15:30", NULL, NULL);
    SW_CHECK_INT(sw_test_wait_peers(s_relay, 2, 60), 0);
    long in = 0, out = 0;
    double relay_round = 0;
    for (int i = 0; i < reps; i++) {
        relay_round = s_request("relay", &ref, &in, &out);
        SW_CHECK(in >= N_GEN / 16 && out >= N_GEN / 16);
    }
    SW_CHECK_INT(swf_log_count(&s_c, "direct:"), 0);
    s_hops("relay");

    /* a. the tail listens, DIRECT_MS from the head: the head dials it, the relay stays out */
    sw_test_kill(tail);
    char tl[32], pub[32];
    snprintf(tl, sizeof tl, "127.0.0.1:%d", LISTEN_PORT);
    snprintf(pub, sizeof pub, "10.0.2.2:%d", PUBLIC_PORT);
    const pid_t wt = swn_wanem(&s_bed, "tail", pub, tl, DIRECT_MS, "dnetns_wanem_tail.log");
    SW_CHECK(wt > 0);
    sw_test_netns(s_home);
    const int up_before = swf_log_count(&s_c, "direct: link to tail");
    tail = s_node("tail", "tail", "15:30", tl, pub);
    SW_CHECK_INT(s_wait_log("direct: link to tail", up_before, 60), 0);
    usleep((SW_DIRECT_QUIET_MS + 300) * 1000); /* whatever went to it by the relay is there */
    double direct_round = 0;
    for (int i = 0; i < reps; i++) {
        direct_round = s_request("direct", &ref, &in, &out);
        SW_CHECK(in <= 1 && out <= 1);
    }
    SW_CHECK(swf_log_count(&s_c, "direct: messages to tail go by the direct link now") >= 1);
    s_hops("direct");

    /* b. the direct link cut mid-request */
    s_cut(&ref, direct_round, relay_round);

    /* c. a tail behind NAT listening on its private address: the relay keeps the path */
    sw_test_kill(tail);
    sw_test_kill(wt);
    snprintf(tl, sizeof tl, "192.168.2.2:%d", LISTEN_PORT);
    char needle[128];
    snprintf(needle, sizeof needle, "listener at tcp://%s did not answer within %d ms", tl,
             DIAL_MS);
    tail = s_node("ntail", "tail", "15:30", tl, NULL);
    SW_CHECK_INT(s_wait_log(needle, 0, 60), 0);
    SW_CHECK_INT(sw_test_wait_peers(s_relay, 2, 60), 0);
    s_request("nat", &ref, &in, &out);
    SW_CHECK(in >= N_GEN / 16 && out >= N_GEN / 16);
    s_hops("relay");

    SW_CHECK(waitpid(wr, NULL, WNOHANG) == 0);
    sw_test_kill(head);
    sw_test_kill(tail);
    sw_test_kill(relay);
    sw_test_kill(wr);
    sw_test_netns(NULL);
    swn_teardown(&s_bed);
    return sw_test_done();
}
