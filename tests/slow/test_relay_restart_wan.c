/*
 * test_relay_restart_wan.c - the relay restarts of test_multi_slow.c as users
 * meet them (label slow, a few minutes): a keyed cluster (CURVE, allow-list,
 * sealing, the keys sw_test_keys makes with the real `shardwire keygen`)
 * behind the WAN emulator at 172 ms per round trip (43 ms each way on every
 * peer's link to the relay), a head and a tail node, and three clients
 * streaming at once (greedy, seeded sampling, n-gram drafts). The relay is
 * SIGKILLed and restarted on its port 6 times, each at another moment and for
 * another 0.3 to 1.5 s; every peer dials it again through the emulator, does
 * the CURVE handshake again and announces itself again, and every client must
 * get its full, exact output (the report: "received 63 of the 64
 * generated tokens" with keys on over an emulated WAN).
 */
#include "sw_fault.h"

#define N_GEN 48
#define RUNS 6

int main(void)
{
    const char *model = sw_test_model();
    signal(SIGPIPE, SIG_IGN);
    swf_cluster_t c = {0};
    snprintf(c.keys, sizeof c.keys, "%s", sw_test_tmpdir());
    c.wan_ms = 43;
    static const char *const head[] = {"--recover-timeout-s", "60", "--round-timeout-ms", "10000",
                                       NULL};
    swf_node(&c.nodes[0], "head", "0:15", head);
    swf_node(&c.nodes[1], "tail", "15:30", NULL);
    if (swf_start(&c, model, 2, sw_test_log("nodes_wan.log")) != 0) {
        SW_CHECK(!"a keyed relay, the WAN emulator and both nodes started");
        swf_stop(&c);
        return sw_test_done();
    }

    int exact = swf_relay_restarts(&c, N_GEN, N_GEN, RUNS, 100);
    fprintf(stderr,
            "keyed, 172 ms per round trip: %d of %d runs exact for all three clients; %d Resumes "
            "answered by the head\n",
            exact, RUNS, swf_log_count(&c, "resumed from token"));
    SW_CHECK_INT(exact, RUNS);
    swf_stop(&c);
    return sw_test_done();
}
