/*
 * test_netns_relays.c - two relays in two regions on namespaced hosts
 * (issue 39; label slow; the bed of test_netns, tests/sw_netns.h;
 * docs/fault-tolerance.md section 5). Silent faults, the kind the internet
 * produces, while `shardwire run` streams, on a cluster made by
 * `shardwire cluster init --relay A --relay B` and started from its bundles
 * (tests/sw_relays.h, as test_relays does on loopback):
 *
 *   head 192.168.1.2 -- nath --+              +-- 10.0.0.2 relay A (15 ms one way)
 *        (masquerade 10.0.1.2) +---- wan -----+
 *   tail 192.168.2.2 -- natt --+       |      +-- 10.0.4.2 relay B (40 ms one way)
 *        (masquerade 10.0.2.2)   10.0.3.2 client
 *
 *
 * Each relay host runs its relay on 127.0.0.1 behind a shardwire-wanem on the host's address
 * (the WAN emulator: netem is not available), which holds every byte RA_MS / RB_MS each way:
 * a round of the pipeline through A costs 4 x 15 ms of WAN, through B 4 x 40 ms. The head and
 * the tail are behind NAT routers (nft masquerade): the relays see only the routers'
 * addresses. CURVE and sealing on, every process with --heartbeat-ms 200.
 *
 *  a. the relay in use blackholed mid-request: an nft drop rule on the wan router for its link,
 *     both ways (connections stay open, no reset reaches anyone): every process finds it by the
 *     silence rule (SW_PEER_SILENT_IVLS heartbeats) and the round goes again by the other;
 *  b. later, that other relay's link cut mid-request: its link on the wan router down (the
 *     router's route to it goes with it), then up again;
 *  c. the tail's link to the relay in use cut (an nft drop rule on the tail's NAT router for that
 *     relay's address only) while that relay stays up for the head: the relay drops the tail
 *     after SW_RELAY_SILENT_IVLS of its heartbeats, the head's route check (every
 *     SW_NODE_ROUTE_CHECK_MS while a verdict is late) finds the tail gone from its relay's table
 *     and moves to the other relay (sw_peer_leave), where the tail still is.
 *
 * Every output and its logits digest must equal `shardwire generate`; the round in flight
 * alone goes again (never the whole session), and the extra time of each fault (the head's
 * own measure: found lost + through again - one round) is checked against its detection time
 * plus one round plus SLACK_MS. Needs root (ip netns, nft): skipped without; installs
 * iproute2, nftables and conntrack with scripts/deps.sh when they are missing.
 */
#include "sw_limits.h"
#include "sw_netns.h"
#include "sw_relays.h"

#define N_GEN 120
#define HB_MS 200     /* every process's --heartbeat-ms */
#define SLACK_MS 1000 /* scheduling noise on a loaded 2-core machine, with the WAN's jitter */
#define RA_MS 15      /* one way to relay A's region */
#define RB_MS 40      /* ... B's */
#define RELAY_PORT 7700

static swn_bed_t s_bed;
static swr_t s_w;
static const char *s_prompt = "Once upon a time,";
static const char *const s_host[2] = {"ra", "rb"}; /* the relays' hosts */
static const char *const s_dev[2] = {"r0", "r1"};  /* their links on the wan router */
static const char *const s_addr[2] = {"10.0.0.2", "10.0.4.2"};

static int s_build(void)
{
    static const char *const hosts[] = {"wan",  "ra",   "rb",     "nath", "head",
                                        "natt", "tail", "client", NULL};
    return swn_build(&s_bed, "r", hosts,
                     "link wan r0 10.0.0.1/24 ra w0 10.0.0.2/24\n"
                     "link wan r1 10.0.4.1/24 rb w0 10.0.4.2/24\n"
                     "ip -n $P-ra route add default via 10.0.0.1\n"
                     "ip -n $P-rb route add default via 10.0.4.1\n" SWN_NAT_SITES
                     "ip netns exec $P-wan nft -f - <<EOF\n"
                     "table inet f {\n chain fw {\n type filter hook forward priority 0;\n }\n}\n"
                     "EOF\n");
}

/* Waits until both relays list both nodes again (after a fault healed). */
static void s_settle(void)
{
    SW_CHECK_INT(swr_wait_peers(&s_w, 0, 2), 0);
    SW_CHECK_INT(swr_wait_peers(&s_w, 1, 2), 0);
}

/* a. the relay's link blackholed on the wan router past the silence rule, then healed. */
static void s_blackhole(swr_t *w, int used)
{
    (void)w;
    char in[32], out[32];
    snprintf(in, sizeof in, "iifname %s", s_dev[used]);
    snprintf(out, sizeof out, "oifname %s", s_dev[used]);
    SW_CHECK_INT(swn_drop(&s_bed, "wan", in, out, SW_PEER_SILENT_IVLS * HB_MS + 1500), 0);
}

/* b. the relay's link down on the wan router (its route goes with it) for as long, then up. */
static void s_link_down(swr_t *w, int used)
{
    (void)w;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "ip -n $P-wan link set %s down", s_dev[used]);
    SW_CHECK_INT(swn_sh(&s_bed, cmd), 0);
    usleep((SW_PEER_SILENT_IVLS * HB_MS + 1500) * 1000);
    snprintf(cmd, sizeof cmd,
             "ip -n $P-wan link set %s up; ip -n $P-%s route replace default via %s1", s_dev[used],
             s_host[used], used ? "10.0.4." : "10.0.0.");
    SW_CHECK_INT(swn_sh(&s_bed, cmd), 0);
}

/* c. the tail's link to the relay in use, only: dropped both ways on the tail's NAT router for
 * CUT_TAIL_MS (longer than the bound, so that a request waiting for the heal fails it). */
#define CUT_TAIL_MS 10000
static void s_cut_tail(swr_t *w, int used)
{
    (void)w;
    char to[32], from[32];
    snprintf(to, sizeof to, "ip daddr %s", s_addr[used]);
    snprintf(from, sizeof from, "ip saddr %s", s_addr[used]);
    SW_CHECK_INT(swn_drop(&s_bed, "natt", to, from, CUT_TAIL_MS), 0);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    swn_need();
    const char *model = sw_test_model();
    swf_result_t ref;
    swf_reference(model, s_prompt, N_GEN, NULL, &ref);
    SW_CHECK(ref.ok && ref.n == N_GEN);
    if (s_build() != 0)
        sw_test_skip("could not build the namespaces");

    s_w.hb_ms = HB_MS;
    s_w.slack_ms = SLACK_MS;
    snprintf(s_w.c.log, sizeof s_w.c.log, "%s", sw_test_log("nodes.log"));
    snprintf(s_w.home, sizeof s_w.home, "%s", swn_ns(&s_bed, "client"));
    snprintf(s_w.node_ns[0], sizeof s_w.node_ns[0], "%s", swn_ns(&s_bed, "head"));
    snprintf(s_w.node_ns[1], sizeof s_w.node_ns[1], "%s", swn_ns(&s_bed, "tail"));
    pid_t wanem[2] = {0, 0};
    for (int i = 0; i < 2; i++) {
        swr_relay_t *r = &s_w.r[i];
        snprintf(r->ep, sizeof r->ep, "tcp://%s:%d", s_addr[i], RELAY_PORT);
        snprintf(r->listen, sizeof r->listen, "tcp://127.0.0.1:%d", RELAY_PORT + 1);
        snprintf(r->ns, sizeof r->ns, "%s", swn_ns(&s_bed, s_host[i]));
        char listen[32], up[32], log[32];
        snprintf(listen, sizeof listen, "%s:%d", s_addr[i], RELAY_PORT);
        snprintf(up, sizeof up, "127.0.0.1:%d", RELAY_PORT + 1);
        snprintf(log, sizeof log, "wanem-%s.log", s_host[i]);
        wanem[i] = swn_wanem(&s_bed, s_host[i], listen, up, i ? RB_MS : RA_MS, log);
        SW_CHECK(wanem[i] > 0);
    }
    swr_ns(s_w.home);
    SW_CHECK_INT(swr_init(&s_w, sw_test_log("keys")), 0);
    for (int i = 0; i < 2; i++)
        SW_CHECK(swr_start_relay(&s_w, i) > 0);
    swr_start_node(&s_w, 0, "head", "0:15");
    swr_start_node(&s_w, 1, "tail", "15:30");
    s_settle();
    printf("WAN: relay A %d ms one way from every host, relay B %d ms (shardwire-wanem on the "
           "relays' hosts); head and tail behind NAT routers\n",
           RA_MS, RB_MS);
    fflush(stdout);

    /* The time of a round by the relay the head chose (the rule: the lowest round trip the
     * kernel measured, which does not see the emulator's delay, so either may be chosen). */
    double round[2] = {0, 0};
    const int u = swr_head_relay(&s_w);
    SW_CHECK(u == 0 || u == 1);
    if (u < 0) {
        swr_stop(&s_w);
        swn_teardown(&s_bed);
        return sw_test_done();
    }
    round[u] = swr_base(&s_w, "no fault", s_prompt, N_GEN, &ref);
    const double silent_ms = (SW_PEER_SILENT_IVLS + 1) * HB_MS;
    /* a. the relay in use blackholed: the request goes on by the other */
    swr_fault_run(&s_w, "a. the relay in use blackholed", s_prompt, N_GEN, &ref, round[u],
                  s_blackhole, silent_ms);
    s_settle();
    /* the time of a round by the other, where the head stays while it lives */
    round[!u] = swr_base(&s_w, "no fault, by the other relay", s_prompt, N_GEN, &ref);
    SW_CHECK_INT(swr_head_relay(&s_w), !u);
    /* b. the other's link down: back to the first */
    swr_fault_run(&s_w, "b. the other relay's link down", s_prompt, N_GEN, &ref, round[!u],
                  s_link_down, silent_ms);
    s_settle();
    /* c. the tail's link to the relay in use cut, that relay up for the head: the relay drops
     * the tail (its silence rule, swept once a heartbeat), the head's next route check sees it
     * and leaves that relay */
    const double cut_ms = (SW_RELAY_SILENT_IVLS + 1) * HB_MS + SW_NODE_ROUTE_CHECK_MS;
    swr_fault_run(&s_w, "c. the tail's link to the relay in use cut", s_prompt, N_GEN, &ref,
                  round[0] > round[1] ? round[0] : round[1], s_cut_tail, cut_ms);
    s_settle();
    /* after all that, a request without a fault */
    swr_base(&s_w, "after the faults, no fault", s_prompt, N_GEN, &ref);

    for (int i = 0; i < 2; i++)
        SW_CHECK(waitpid(wanem[i], NULL, WNOHANG) == 0);
    swr_stop(&s_w);
    for (int i = 0; i < 2; i++)
        sw_test_kill(wanem[i]);
    swr_ns(NULL);
    swn_teardown(&s_bed);
    return sw_test_done();
}
