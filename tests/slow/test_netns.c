/*
 * test_netns.c - faults on real (namespaced) networks (issue 21, finding 11;
 * docs/fault-tolerance.md, "Faults on real networks"). Loopback resets a dead
 * peer's connection at once; the internet mostly does not. Here every
 * process runs on a host of its own (ip netns), behind routers:
 *
 *   client 10.0.3.2 --+            +-- 10.0.0.2 relay
 *                     +--- wan ----+
 *   head 192.168.1.2 -- nat_h --+  +-- nat_t -- 192.168.2.2 tail
 *        (masquerade 10.0.1.2)          (masquerade 10.0.2.2)
 *
 * (wan routes between its four links; nat_h and nat_t are NAT routers with
 * an nft masquerade rule, so the relay sees the head and the tail only as
 * their routers' addresses.) CURVE and sealing on, SmolLM2, relay and peer
 * heartbeats at their defaults. For each fault, on the tail's router while
 * `shardwire run --greedy` (96 tokens) streams from the client host:
 *
 *  - blackhole: an nft rule drops every packet the router forwards, for 5 s
 *    (no reset reaches either end);
 *  - link down: the router's wan link down for 5 s, then up;
 *  - NAT mapping flushed: conntrack -F on the router under the live
 *    connection (the next packets get a new mapping; skipped without the
 *    conntrack tool);
 *  - relay restarted: the relay process killed and a new one started on
 *    its host 1 s later.
 *
 * Each request must end with the exact output of `shardwire generate`
 * within 90 s, and no process is restarted by hand but the relay. One
 * longer fault may end either way: the tail router's wan link down for 60 s
 * (the head's recovery waits 60 s from noticing): exact output, or a clear
 * error ("recovery gave up", "deadline") within 90 s; then the next request
 * must be exact. A blackhole of 5 s on the head's router is tried too (the
 * client may take the head for gone and hand the request back to it when it
 * returns). Needs root (ip netns, nft): skipped without.
 */
#include "sw_test.h"

#include "keys.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define N_GEN 96
#define BOUND_S 90

static char s_dir[64];
static char s_pfx[32]; /* namespace prefix: unique per test process */
static char s_ep[64];
static const char *s_prompt = "The history of the printing press";
static double s_took; /* the last fault: seconds from the fault to the end of the request */

static double s_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Runs a shell command (the namespace prefix in $P); 0 when it succeeded. */
static int s_sh(const char *body)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "P=%s; %s", s_pfx, body);
    char *out = NULL;
    int rc = sw_test_sh(cmd, 60, &out);
    if (rc != 0)
        fprintf(stderr, "command failed (%d): %s\n%s\n", rc, body, out ? out : "");
    free(out);
    return rc;
}

/* The hosts and routers; 0 when built. */
static int s_build(void)
{
    return s_sh(
        "set -e\n"
        "for n in wan relay nath head natt tail client; do ip netns add $P-$n; "
        "ip -n $P-$n link set lo up; done\n"
        /* veth between namespace $1 (interface $2, address $3) and $4 ($5, $6) */
        "link() { ip link add $P-x type veth peer name $P-y; "
        "ip link set $P-x netns $P-$1 name $2; ip link set $P-y netns $P-$4 name $5; "
        "ip -n $P-$1 addr add $3 dev $2; ip -n $P-$4 addr add $6 dev $5; "
        "ip -n $P-$1 link set $2 up; ip -n $P-$4 link set $5 up; }\n"
        "link wan r0 10.0.0.1/24 relay w0 10.0.0.2/24\n"
        "link wan h0 10.0.1.1/24 nath w0 10.0.1.2/24\n"
        "link wan t0 10.0.2.1/24 natt w0 10.0.2.2/24\n"
        "link wan c0 10.0.3.1/24 client w0 10.0.3.2/24\n"
        "link nath l0 192.168.1.1/24 head e0 192.168.1.2/24\n"
        "link natt l0 192.168.2.1/24 tail e0 192.168.2.2/24\n"
        "ip -n $P-relay route add default via 10.0.0.1\n"
        "ip -n $P-client route add default via 10.0.3.1\n"
        "ip -n $P-nath route add default via 10.0.1.1\n"
        "ip -n $P-natt route add default via 10.0.2.1\n"
        "ip -n $P-head route add default via 192.168.1.1\n"
        "ip -n $P-tail route add default via 192.168.2.1\n"
        "for n in wan nath natt; do ip netns exec $P-$n sysctl -qw net.ipv4.ip_forward=1; done\n"
        "for n in nath natt; do ip netns exec $P-$n nft -f - <<EOF\n"
        "table ip nat {\n chain post {\n type nat hook postrouting priority 100;\n"
        " oifname \"w0\" masquerade\n }\n}\n"
        "table inet f {\n chain fw {\n type filter hook forward priority 0;\n }\n}\n"
        "EOF\n"
        "done\n");
}

static void s_teardown(void)
{
    s_sh("for n in wan relay nath head natt tail client; do ip netns del $P-$n 2>/dev/null; "
         "done; true");
}

/* Waits until the relay's log shows `needle` more than `before` times; 0, or -1 after s. */
static int s_wait_log(const char *log, const char *needle, int before, int s)
{
    for (int i = 0; i < s * 10; i++) {
        if (sw_test_count_in_file(log, needle) > before)
            return 0;
        usleep(100000);
    }
    return -1;
}

/*
 * One fault: `shardwire run` from the client host; 1 s after the head
 * started the request, `fault` runs (a shell command; NULL: the relay is
 * restarted), then `heal` after hold_s. 1 when the run gave exactly ref
 * within BOUND_S.
 */
static int s_fault(const char *what, const char *fault, const char *heal, int hold_s, pid_t *relay,
                   const int32_t *ref, int n_ref)
{
    const char *log = sw_test_log("cluster.log");
    const int before = sw_test_count_in_file(log, "prompt tokens, 96 to generate");
    char n_gen[16], out[256], err[256];
    snprintf(n_gen, sizeof n_gen, "%d", N_GEN);
    snprintf(out, sizeof out, "%s", sw_test_log("run.json"));
    snprintf(err, sizeof err, "%s", sw_test_log("run.err"));
    char *argv[SW_TEST_RUN_ARGC];
    sw_test_run_argv(argv, s_ep, s_prompt, n_gen, "80");
    char ns[64];
    snprintf(ns, sizeof ns, "%s-client", s_pfx);
    sw_test_netns(ns);
    pid_t run = sw_test_spawn_io(argv, out, err);
    sw_test_netns(NULL);
    const double t0 = s_now();
    s_wait_log(log, "prompt tokens, 96 to generate", before, 60);
    usleep(1000000);
    const double t_fault = s_now();
    if (fault) {
        s_sh(fault);
        sleep((unsigned)hold_s);
        s_sh(heal);
    } else {
        sw_test_kill(*relay);
        sleep(1);
        snprintf(ns, sizeof ns, "%s-relay", s_pfx);
        sw_test_netns(ns);
        *relay = sw_test_relay(s_ep, s_dir, log, NULL);
        sw_test_netns(NULL);
    }
    const int rc = sw_test_wait(run, BOUND_S);
    const double took = s_now() - t_fault;
    char *text = sw_test_read_file(out, NULL);
    int32_t got[N_GEN + 8];
    const int n = text ? sw_test_json_tokens(text, got, N_GEN + 8) : 0;
    const int exact = rc == 0 && n == n_ref && !memcmp(got, ref, sizeof(int32_t) * (size_t)n_ref);
    printf("%s: run exit %d, %d tokens, %s, %.1f s from the fault to the end (%.1f s in all)\n",
           what, rc, n, exact ? "equal to `shardwire generate`" : "DIFFERENT", took, s_now() - t0);
    int clear = 0;
    if (!exact) {
        char *e = sw_test_read_file(err, NULL);
        fprintf(stderr, "%s: run stderr: %s\n", what, e ? e : "");
        clear = rc > 0 && rc < 128 && e && strstr(e, "shardwire run: ") &&
                (strstr(e, "recovery gave up") || strstr(e, "deadline"));
        free(e);
    }
    free(text);
    s_took = took;
    if (took >= BOUND_S)
        return 0;
    return exact ? 1 : clear ? 2 : 0;
}

int main(void)
{
    const char *model = sw_test_model();
    char e[256];
    if (getuid() != 0)
        sw_test_skip("needs root (ip netns, nft)");
    if (sw_keys_curve_check(e, sizeof e) != 0)
        sw_test_skip(e);
    if (system("ip netns list >/dev/null 2>&1 && nft --version >/dev/null 2>&1") != 0)
        sw_test_skip("ip netns or nft missing");
    signal(SIGPIPE, SIG_IGN);
    snprintf(s_dir, sizeof s_dir, "%s", sw_test_tmpdir());
    snprintf(s_pfx, sizeof s_pfx, "swn%d", (int)getpid());
    snprintf(s_ep, sizeof s_ep, "tcp://10.0.0.2:%d", 7700);
    const char *nodes[] = {"head", "tail", NULL};
    const char *clients[] = {"alice", NULL};
    SW_CHECK_INT(sw_test_keys(s_dir, nodes, clients), 0);
    int32_t ref[N_GEN + 8];
    const int n_ref = sw_test_generate(model, s_prompt, N_GEN, ref, N_GEN + 8);
    SW_CHECK_INT(n_ref, N_GEN);
    if (s_build() != 0) {
        s_teardown();
        sw_test_skip("could not build the namespaces");
    }
    const char *log = sw_test_log("cluster.log");
    char ns[64];
    snprintf(ns, sizeof ns, "%s-relay", s_pfx);
    sw_test_netns(ns);
    pid_t relay = sw_test_relay(s_ep, s_dir, log, NULL);
    snprintf(ns, sizeof ns, "%s-head", s_pfx);
    sw_test_netns(ns);
    pid_t head = sw_test_node(s_ep, s_dir, "head", "0:15", log, NULL);
    snprintf(ns, sizeof ns, "%s-tail", s_pfx);
    sw_test_netns(ns);
    pid_t tail = sw_test_node(s_ep, s_dir, "tail", "15:30", log, NULL);
    sw_test_netns(NULL);
    sw_test_client_env(s_dir, "alice");
    SW_CHECK_INT(s_wait_log(log, "peer tail joined", 0, 60), 0);
    SW_CHECK_INT(s_wait_log(log, "peer head joined", 0, 60), 0);

    SW_CHECK_INT(s_fault("blackhole 5 s on the tail's router",
                         "ip netns exec $P-natt nft add rule inet f fw drop",
                         "ip netns exec $P-natt nft flush chain inet f fw", 5, &relay, ref, n_ref),
                 1);
    /* (a router's routes through a link go with it: the heal puts the default route back) */
    SW_CHECK_INT(
        s_fault("the tail router's wan link down 5 s", "ip -n $P-natt link set w0 down",
                "ip -n $P-natt link set w0 up; ip -n $P-natt route replace default via 10.0.2.1", 5,
                &relay, ref, n_ref),
        1);
    if (system("conntrack --version >/dev/null 2>&1") == 0)
        SW_CHECK_INT(s_fault("the tail router's NAT mappings flushed",
                             "ip netns exec $P-natt conntrack -F 2>/dev/null", "true", 1, &relay,
                             ref, n_ref),
                     1);
    else
        sw_test_skip_part("conntrack missing: the NAT flush is not tried");
    SW_CHECK_INT(s_fault("relay killed and started again", NULL, "true", 0, &relay, ref, n_ref), 1);
    SW_CHECK_INT(s_fault("blackhole 5 s on the head's router",
                         "ip netns exec $P-nath nft add rule inet f fw drop",
                         "ip netns exec $P-nath nft flush chain inet f fw", 5, &relay, ref, n_ref),
                 1);
    /* the relay dropped the head and what it held for it, the Verdict too: the head replays
     * the round when its connection is renewed (before: after --round-timeout-ms, 63 s) */
    SW_CHECK(s_took < 30);
    SW_CHECK(s_fault("the tail router's wan link down 60 s", "ip -n $P-natt link set w0 down",
                     "ip -n $P-natt link set w0 up; ip -n $P-natt route replace default via "
                     "10.0.2.1",
                     60, &relay, ref, n_ref) > 0);
    SW_CHECK_INT(s_fault("after that, no fault", "true", "true", 0, &relay, ref, n_ref), 1);
    /* no process was restarted by hand but the relay */
    SW_CHECK(waitpid(head, NULL, WNOHANG) == 0);
    SW_CHECK(waitpid(tail, NULL, WNOHANG) == 0);

    sw_test_kill(head);
    sw_test_kill(tail);
    sw_test_kill(relay);
    s_teardown();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", s_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", s_dir);
    return sw_test_done();
}
