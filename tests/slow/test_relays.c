/*
 * test_relays.c - several relays (issue 39; label slow). Real processes on
 * loopback, from the bundles of `shardwire cluster init --relay A --relay B`
 * and their own scripts: two shardwire-relay processes (relay/start.sh,
 * relay-2/start.sh), each with its own CURVE key and the same allow-list, a
 * head and a tail (head/start.sh, tail/start.sh: --relay A,B --relay-key
 * relay.pub,relay-2.pub), sealed end to end, and `shardwire run` clients
 * with the client bundle's keys for both relays. Every output is compared token for
 * token (and by its logits digest) with the single-process `shardwire
 * generate`.
 *
 *  1. the relay the head uses is SIGKILLed mid-request: every process moves
 *     to the other relay; the request costs at most the detection time plus
 *     one replayed round (the head's log says the round alone went again,
 *     never the whole session);
 *  2. that relay is started again and the other one killed mid-request: the
 *     restarted relay carries the request (restarted relays are used again);
 *  3. the relay in use falls silent (SIGSTOP: connections stay open, nothing
 *     arrives, as with a blackholed link) mid-request: found by the silence
 *     rule (SW_PEER_SILENT_IVLS heartbeats) and the request goes on by the
 *     other; the extra time is checked against that detection time plus one
 *     round.
 *
 * The extra time of a fault is the head's own measure: how long after it
 * was sent the round was found lost, plus how long the round took once sent
 * again, minus the time a round takes without a fault.
 */
#include "sw_limits.h"
#include "sw_relays.h"

#define N_GEN 120
#define HB_MS 200    /* every process's --heartbeat-ms */
#define STOP_MS 300  /* the relay stopped this long before the SIGKILL: a round is inside it */
#define SLACK_MS 400 /* scheduling noise on a loaded 2-core machine */

static swr_t s_w;
static const char *s_prompt = "Once upon a time,";

/* Starts the relay that was killed again; both tables list both nodes. */
static void s_restart_relays(void)
{
    for (int i = 0; i < 2; i++)
        if (!s_w.r[i].pid)
            SW_CHECK(swr_start_relay(&s_w, i) > 0);
    SW_CHECK_INT(swr_wait_peers(&s_w, 0, 2), 0);
    SW_CHECK_INT(swr_wait_peers(&s_w, 1, 2), 0);
}

/* SIGSTOP, STOP_MS, SIGKILL: the round in flight is inside the relay when it dies. */
static void s_kill(swr_t *w, int used)
{
    kill(w->r[used].pid, SIGSTOP);
    usleep(STOP_MS * 1000);
    swf_kill9(&w->r[used].pid);
}

/* Silent: stopped for longer than the silence rule, then let go (its links come back). */
static void s_silence(swr_t *w, int used)
{
    kill(w->r[used].pid, SIGSTOP);
    usleep((SW_PEER_SILENT_IVLS * HB_MS + 1500) * 1000);
    kill(w->r[used].pid, SIGCONT);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const char *model = sw_test_model();
    swf_result_t ref;
    swf_reference(model, s_prompt, N_GEN, NULL, &ref);
    SW_CHECK(ref.ok && ref.n == N_GEN);

    s_w.hb_ms = HB_MS;
    s_w.slack_ms = SLACK_MS;
    snprintf(s_w.c.log, sizeof s_w.c.log, "%s", sw_test_log("relays_nodes.log"));
    unlink(s_w.c.log);
    for (int i = 0; i < 2; i++)
        snprintf(s_w.r[i].ep, sizeof s_w.r[i].ep, "tcp://127.0.0.1:%d", sw_test_free_port());
    SW_CHECK_INT(swr_init(&s_w, sw_test_log("relays_keys")), 0);
    for (int i = 0; i < 2; i++)
        SW_CHECK(swr_start_relay(&s_w, i) > 0);
    swr_start_node(&s_w, 0, "head", "0:15");
    swr_start_node(&s_w, 1, "tail", "15:30");
    SW_CHECK_INT(swr_wait_peers(&s_w, 0, 2), 0);
    SW_CHECK_INT(swr_wait_peers(&s_w, 1, 2), 0);

    /* No fault: the time of a round, and the output through the relays. */
    const double round_ms = swr_base(&s_w, "no fault", s_prompt, N_GEN, &ref);

    /* 1. SIGKILL; detection: the kernel closes the connections (one heartbeat allowed). */
    swr_fault_run(&s_w, "kill", s_prompt, N_GEN, &ref, round_ms, s_kill, STOP_MS + HB_MS);
    /* 2. restarted, and the other one killed: the request goes by the restarted relay */
    s_restart_relays();
    swr_fault_run(&s_w, "kill the other", s_prompt, N_GEN, &ref, round_ms, s_kill, STOP_MS + HB_MS);
    s_restart_relays();
    /* 3. silent: detection is the silence rule (checked once a heartbeat) */
    swr_fault_run(&s_w, "silent", s_prompt, N_GEN, &ref, round_ms, s_silence,
                  (SW_PEER_SILENT_IVLS + 1) * HB_MS);

    swr_stop(&s_w);
    return sw_test_done();
}
