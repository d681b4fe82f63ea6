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
#include "sw_fault.h"
#include "sw_limits.h"

#define N_GEN 120
#define HB_MS 200    /* every process's --heartbeat-ms */
#define STOP_MS 300  /* the relay stopped this long before the SIGKILL: a round is inside it */
#define SLACK_MS 400 /* scheduling noise on a loaded 2-core machine */

typedef struct s_relay {
    char ep[64];
    char script[320], pub[320]; /* its start.sh; its public key */
    pid_t pid;
} s_relay_t;

static char s_dir[256];
static s_relay_t s_r[2];
static char s_eps[160], s_pubs[700];
static swf_cluster_t s_c; /* its log (the nodes' log) and swf_log_* */
static pid_t s_nodes[2];

/* The relay by its bundle's script. The process that runs is the relay (exec), so SIGSTOP
 * and SIGKILL reach it. */
static pid_t s_start_relay(s_relay_t *r)
{
    char log[300];
    snprintf(log, sizeof log, "%s.%s", s_c.log, r->ep + 16);
    setenv("SHARDWIRE_BIN", sw_test_env("SW_BIN_DIR"), 1);
    char *argv[] = {"/bin/sh", r->script, "--heartbeat-ms", "200", NULL};
    r->pid = sw_test_spawn(argv, log);
    return r->pid;
}

/* A node by its bundle's start.sh (the model and layers by SW_MODEL / SW_LAYERS). */
static void s_start_node(int i, const char *name, const char *layers)
{
    char script[320];
    snprintf(script, sizeof script, "%s/%s/start.sh", s_dir, name);
    setenv("SW_MODEL", sw_test_model(), 1);
    setenv("SW_LAYERS", layers, 1);
    setenv("SHARDWIRE_BIN", sw_test_env("SW_BIN_DIR"), 1);
    char *argv[] = {
        "/bin/sh", script, "--threads", "1", "--heartbeat-ms", "200", "--recover-timeout-s",
        "60",      NULL};
    s_nodes[i] = sw_test_spawn(argv, s_c.log);
}

/* The relay i's table, asked with its own key. */
static int s_peer(int i, const char *name, long *in)
{
    setenv("SW_RELAY_KEY", s_r[i].pub, 1);
    const int rc = swf_peer(s_r[i].ep, name, in, NULL);
    setenv("SW_RELAY_KEY", s_pubs, 1);
    return rc;
}

static int s_wait_peers(int i, int n)
{
    setenv("SW_RELAY_KEY", s_r[i].pub, 1);
    const int rc = sw_test_wait_peers(s_r[i].ep, n, 60);
    setenv("SW_RELAY_KEY", s_pubs, 1);
    return rc;
}

/* The relay the head sends by now (its last "messages go by" line), or -1. */
static int s_head_relay(void)
{
    size_t len = 0;
    char *text = sw_test_read_file(s_c.log, &len);
    const char *last = NULL, *needle = "peer head: messages go by the relay ";
    for (const char *p = text; p && (p = strstr(p, needle)); p += strlen(needle))
        last = p + strlen(needle);
    int which = -1;
    for (int i = 0; last && i < 2; i++)
        if (!strncmp(last, s_r[i].ep, strlen(s_r[i].ep)) && last[strlen(s_r[i].ep)] == ' ')
            which = i;
    free(text);
    return which;
}

/* One request with a fault: when the tail has sent 20 more messages by the relay the head
 * uses, fault(relay) runs. Checks the output and the extra time against bound_ms + one round;
 * returns the extra time. */
static double s_fault_run(const char *what, const swf_result_t *ref, double round_ms,
                          void (*fault)(s_relay_t *), double bound_ms)
{
    const int used = s_head_relay();
    SW_CHECK(used >= 0);
    if (used < 0)
        return -1;
    const int one_round_before = swf_log_count(&s_c, "recovery: sending the round");
    const int whole_before = swf_log_count(&s_c, "recovery: replaying");
    long in0 = 0;
    SW_CHECK_INT(s_peer(used, "tail", &in0), 1);
    swf_client_t cl = {0};
    swf_result_t got;
    SW_CHECK_INT(swf_client_start(&cl, s_eps, "Once upon a time,", N_GEN, 300, NULL, what), 0);
    setenv("SW_RELAY_KEY", s_r[used].pub, 1); /* that relay's table, with its own key */
    SW_CHECK_INT(swf_wait_msgs_in(s_r[used].ep, "tail", in0 + 20, 120), 0);
    setenv("SW_RELAY_KEY", s_pubs, 1);
    fault(&s_r[used]);
    swf_client_wait(&cl, &got);
    SW_CHECK_INT(got.rc, 0);
    SW_CHECK(swf_same(&got, ref));
    SW_CHECK(!strcmp(got.digest, ref->digest));
    if (!swf_same(&got, ref))
        fprintf(stderr, "%s: tokens differ at %d: %s\n", what, swf_diff_at(&got, ref), got.err);
    const int moved = s_head_relay();
    SW_CHECK(moved >= 0 && moved != used);
    /* the round alone went again, by the other relay */
    SW_CHECK_INT(swf_log_count(&s_c, "recovery: sending the round") - one_round_before, 1);
    SW_CHECK_INT(swf_log_count(&s_c, "recovery: replaying") - whole_before, 0);
    const double found = swf_log_ms(&s_c, "failed after "),
                 again = swf_log_ms(&s_c, "went through again ");
    const double extra = found + again - round_ms;
    fprintf(stderr,
            "%s: the round was found lost %.0f ms after it was sent and went through %.0f ms "
            "after that by %s; extra time %.0f ms (bound %.0f ms: detection %.0f + one round "
            "%.0f + noise %d); request %.0f ms\n",
            what, found, again, s_r[moved >= 0 ? moved : 0].ep, extra,
            bound_ms + round_ms + SLACK_MS, bound_ms, round_ms, SLACK_MS, got.total_ms);
    SW_CHECK(found > 0 && again > 0);
    SW_CHECK(extra <= bound_ms + round_ms + SLACK_MS);
    return extra;
}

/* Starts the relay that was killed again; both tables list both nodes. */
static void s_restart_relays(void)
{
    for (int i = 0; i < 2; i++)
        if (!s_r[i].pid)
            SW_CHECK(s_start_relay(&s_r[i]) > 0);
    SW_CHECK_INT(s_wait_peers(0, 2), 0);
    SW_CHECK_INT(s_wait_peers(1, 2), 0);
}

/* SIGSTOP, STOP_MS, SIGKILL: the round in flight is inside the relay when it dies. */
static void s_kill(s_relay_t *r)
{
    kill(r->pid, SIGSTOP);
    usleep(STOP_MS * 1000);
    swf_kill9(&r->pid);
}

/* Silent: stopped for longer than the silence rule, then let go (its links come back). */
static void s_silence(s_relay_t *r)
{
    kill(r->pid, SIGSTOP);
    usleep((SW_PEER_SILENT_IVLS * HB_MS + 1500) * 1000);
    kill(r->pid, SIGCONT);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const char *model = sw_test_model();
    swf_result_t ref, base;
    swf_reference(model, "Once upon a time,", N_GEN, NULL, &ref);
    SW_CHECK(ref.ok && ref.n == N_GEN);

    snprintf(s_dir, sizeof s_dir, "%s", sw_test_log("relays_keys"));
    snprintf(s_c.log, sizeof s_c.log, "%s", sw_test_log("relays_nodes.log"));
    unlink(s_c.log);
    for (int i = 0; i < 2; i++)
        snprintf(s_r[i].ep, sizeof s_r[i].ep, "tcp://127.0.0.1:%d", sw_test_free_port());
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "%s cluster init --relay %s --relay %s --listen %s --listen %s --nodes head,tail "
             "--out %s",
             sw_test_bin("shardwire"), s_r[0].ep + 6, s_r[1].ep + 6, s_r[0].ep, s_r[1].ep, s_dir);
    SW_CHECK_INT(sw_test_sh(cmd, 60, NULL), 0);
    for (int i = 0; i < 2; i++) {
        const char *d = i ? "relay-2" : "relay";
        snprintf(s_r[i].script, sizeof s_r[i].script, "%s/%s/start.sh", s_dir, d);
        snprintf(s_r[i].pub, sizeof s_r[i].pub, "%s/client/%s.pub", s_dir, d);
        SW_CHECK(s_start_relay(&s_r[i]) > 0);
    }
    snprintf(s_eps, sizeof s_eps, "%s,%s", s_r[0].ep, s_r[1].ep);
    snprintf(s_pubs, sizeof s_pubs, "%s,%s", s_r[0].pub, s_r[1].pub);
    char path[400];
    snprintf(path, sizeof path, "%s/client/client.key", s_dir);
    setenv("SW_KEY", path, 1);
    snprintf(path, sizeof path, "%s/client/access.key", s_dir);
    setenv("SW_ACCESS_KEY", path, 1);
    unsetenv("SW_CLUSTER_KEY");
    setenv("SW_RELAY_KEY", s_pubs, 1);
    s_start_node(0, "head", "0:15");
    s_start_node(1, "tail", "15:30");
    SW_CHECK_INT(s_wait_peers(0, 2), 0);
    SW_CHECK_INT(s_wait_peers(1, 2), 0);

    /* No fault: the time of a round, and the output through the relays. */
    swf_client_t cl = {0};
    SW_CHECK_INT(swf_client_start(&cl, s_eps, "Once upon a time,", N_GEN, 300, NULL, "base"), 0);
    swf_client_wait(&cl, &base);
    SW_CHECK_INT(base.rc, 0);
    SW_CHECK(swf_same(&base, &ref));
    const double rounds = swf_log_ms(&s_c, "tokens in ");
    SW_CHECK(rounds > 0);
    const double round_ms = rounds > 0 ? base.total_ms / rounds : 1e9;
    fprintf(stderr, "no fault: %d tokens in %.0f rounds, %.0f ms, %.1f ms a round\n", base.n,
            rounds, base.total_ms, round_ms);

    /* 1. SIGKILL; detection: the kernel closes the connections (one heartbeat allowed). */
    s_fault_run("kill", &ref, round_ms, s_kill, STOP_MS + HB_MS);
    /* 2. restarted, and the other one killed: the request goes by the restarted relay */
    s_restart_relays();
    s_fault_run("kill the other", &ref, round_ms, s_kill, STOP_MS + HB_MS);
    s_restart_relays();
    /* 3. silent: detection is the silence rule (checked once a heartbeat) */
    s_fault_run("silent", &ref, round_ms, s_silence, (SW_PEER_SILENT_IVLS + 1) * HB_MS);

    for (int i = 0; i < 2; i++)
        sw_test_kill(s_nodes[i]);
    for (int i = 0; i < 2; i++)
        if (s_r[i].pid)
            sw_test_kill(s_r[i].pid);
    return sw_test_done();
}
