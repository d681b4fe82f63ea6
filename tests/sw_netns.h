/*
 * sw_netns.h - the namespaced test bed (tests/slow/test_netns*.c; notes on
 * what works in /work/shared/notes/netns.md, docs/fault-tolerance.md
 * section 5): every host and router of a test is a network namespace of its
 * own, named PREFIX-NAME with a prefix unique to the test process (several
 * tests may run at once), joined by veth links; routers forward, NAT routers
 * masquerade with nftables, and WAN latency comes from shardwire-wanem (netem
 * is not available). Faults are shell commands on those namespaces (nft drop
 * rules, links down, conntrack flushes). Header-only (static functions) so
 * that each test executable stays one .c file.
 */
#ifndef SW_NETNS_H
#define SW_NETNS_H

#include "keys.h"
#include "sw_test.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SWN_MAX_HOSTS 12

typedef struct swn_bed {
    char pfx[32];                  /* the namespaces' prefix ($P in the shell commands) */
    char hosts[SWN_MAX_HOSTS][16]; /* the names made by swn_build */
    int n_hosts;
} swn_bed_t;

/* Skips the test unless it can build a bed: root, CURVE, and the tools (iproute2, nftables,
 * conntrack), which scripts/deps.sh installs when missing (a fresh machine once lacked conntrack,
 * and test_netns's NAT flushes were skipped). */
static inline void swn_need(void)
{
    char e[256];
    if (getuid() != 0)
        sw_test_skip("needs root (ip netns, nft)");
    if (sw_keys_curve_check(e, sizeof e) != 0)
        sw_test_skip(e);
    char deps[1024];
    snprintf(deps, sizeof deps,
             "SW_DEPS_EXTRA='iproute2 nftables conntrack' bash %s/scripts/deps.sh",
             sw_test_env("SW_SOURCE_DIR"));
    if (sw_test_sh(deps, 900, NULL) != 0)
        sw_test_skip("iproute2, nftables or conntrack could not be installed (scripts/deps.sh)");
    if (system("ip netns list >/dev/null 2>&1 && nft --version >/dev/null 2>&1") != 0)
        sw_test_skip("ip netns or nft missing");
}

/* Runs a shell command with the bed's prefix in $P; 0 when it succeeded (else one line with
 * its output). */
static inline int swn_sh(const swn_bed_t *b, const char *body)
{
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "P=%s; %s", b->pfx, body);
    char *out = NULL;
    int rc = sw_test_sh(cmd, 60, &out);
    if (rc != 0)
        fprintf(stderr, "command failed (%d): %s\n%s\n", rc, body, out ? out : "");
    free(out);
    return rc;
}

/* The namespace name of host `name` (static buffer per call slot 0..3). */
static inline const char *swn_ns(const swn_bed_t *b, const char *name)
{
    static char buf[4][64];
    static int slot;
    char *o = buf[slot++ & 3];
    snprintf(o, sizeof buf[0], "%s-%s", b->pfx, name);
    return o;
}

/* Processes that sw_test_spawn* start from now on run on host `name` (NULL: the test's own). */
static inline void swn_enter(const swn_bed_t *b, const char *name)
{
    sw_test_netns(name ? swn_ns(b, name) : NULL);
}

/*
 * Makes the hosts (a NULL-terminated list of names; each gets `lo` up) and runs `body` (a shell
 * script, `set -e`) to join them. body may call
 *   link NS1 DEV1 ADDR1/LEN NS2 DEV2 ADDR2/LEN   a veth between two hosts, both ends up
 *   nat ROUTER WAN_DEV                           ROUTER forwards and masquerades what leaves by
 *                                                WAN_DEV; an empty filter chain `inet f fw`
 *                                                (forward) is there for the faults' rules
 *   router NAME                                  NAME forwards
 * 0 when built; otherwise what was made is removed again.
 */
static inline int swn_build(swn_bed_t *b, const char *tag, const char *const *hosts,
                            const char *body)
{
    snprintf(b->pfx, sizeof b->pfx, "sw%s%d", tag, (int)getpid());
    b->n_hosts = 0;
    char script[8192];
    int o = snprintf(script, sizeof script, "set -e\nfor n in");
    for (int i = 0; i < SWN_MAX_HOSTS && hosts[i]; i++) {
        snprintf(b->hosts[b->n_hosts++], sizeof b->hosts[0], "%s", hosts[i]);
        o += snprintf(script + o, sizeof script - (size_t)o, " %s", hosts[i]);
    }
    snprintf(script + o, sizeof script - (size_t)o,
             "; do ip netns add $P-$n; ip -n $P-$n link set lo up; done\n"
             "link() { ip link add $P-x type veth peer name $P-y; "
             "ip link set $P-x netns $P-$1 name $2; ip link set $P-y netns $P-$4 name $5; "
             "ip -n $P-$1 addr add $3 dev $2; ip -n $P-$4 addr add $6 dev $5; "
             "ip -n $P-$1 link set $2 up; ip -n $P-$4 link set $5 up; }\n"
             "router() { ip netns exec $P-$1 sysctl -qw net.ipv4.ip_forward=1; }\n"
             "nat() { router $1; ip netns exec $P-$1 nft -f - <<EOF\n"
             "table ip nat {\n chain post {\n type nat hook postrouting priority 100;\n"
             " oifname \"$2\" masquerade\n }\n}\n"
             "table inet f {\n chain fw {\n type filter hook forward priority 0;\n }\n}\n"
             "EOF\n"
             "}\n"
             "%s",
             body);
    if (swn_sh(b, script) == 0)
        return 0;
    char del[1024];
    o = snprintf(del, sizeof del, "for n in");
    for (int i = 0; i < b->n_hosts; i++)
        o += snprintf(del + o, sizeof del - (size_t)o, " %s", b->hosts[i]);
    snprintf(del + o, sizeof del - (size_t)o, "; do ip netns del $P-$n 2>/dev/null; done; true");
    swn_sh(b, del);
    return -1;
}

/* The sites of a cluster on a router `wan` (a swn_build body part; hosts nath, head, natt, tail,
 * client, wan): a head 192.168.1.2 behind the NAT router nath (10.0.1.2 on wan's link h0), a tail
 * 192.168.2.2 behind natt (10.0.2.2, t0), a client host 10.0.3.2 on wan's link c0. Each NAT
 * router has the filter chain `inet f fw` for faults. */
#define SWN_NAT_SITES                                                                              \
    "link wan h0 10.0.1.1/24 nath w0 10.0.1.2/24\n"                                                \
    "link wan t0 10.0.2.1/24 natt w0 10.0.2.2/24\n"                                                \
    "link wan c0 10.0.3.1/24 client w0 10.0.3.2/24\n"                                              \
    "link nath l0 192.168.1.1/24 head e0 192.168.1.2/24\n"                                         \
    "link natt l0 192.168.2.1/24 tail e0 192.168.2.2/24\n"                                         \
    "ip -n $P-client route add default via 10.0.3.1\n"                                             \
    "ip -n $P-nath route add default via 10.0.1.1\n"                                               \
    "ip -n $P-natt route add default via 10.0.2.1\n"                                               \
    "ip -n $P-head route add default via 192.168.1.1\n"                                            \
    "ip -n $P-tail route add default via 192.168.2.1\n"                                            \
    "router wan\n"                                                                                 \
    "nat nath w0\n"                                                                                \
    "nat natt w0\n"

/* A silent fault: on host `router`, nft drops what its forward chain `inet f fw` matches by `a`
 * or by `b` (e.g. "iifname r0", "ip daddr 10.0.0.2") for hold_ms, then the chain is flushed.
 * 0 when both commands ran. */
static inline int swn_drop(const swn_bed_t *b, const char *router, const char *a,
                           const char *b_match, int hold_ms)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd,
             "ip netns exec $P-%s nft 'add rule inet f fw %s drop; add rule inet f fw %s drop'",
             router, a, b_match);
    int rc = swn_sh(b, cmd);
    usleep((useconds_t)hold_ms * 1000);
    snprintf(cmd, sizeof cmd, "ip netns exec $P-%s nft flush chain inet f fw", router);
    return swn_sh(b, cmd) | rc;
}

/* Removes every namespace of the bed (also after a failure). */
static inline void swn_teardown(const swn_bed_t *b)
{
    char del[1024];
    int o = snprintf(del, sizeof del, "for n in");
    for (int i = 0; i < b->n_hosts; i++)
        o += snprintf(del + o, sizeof del - (size_t)o, " %s", b->hosts[i]);
    snprintf(del + o, sizeof del - (size_t)o, "; do ip netns del $P-$n 2>/dev/null; done; true");
    swn_sh(b, del);
}

/* A shardwire-wanem on host `name`: connections to listen (HOST:PORT) are passed on to up
 * (HOST:PORT), each byte ms later each way; logging to the test's file `log`. Its pid once it
 * listens, or -1. */
static inline pid_t swn_wanem(const swn_bed_t *b, const char *name, const char *listen,
                              const char *up, int ms, const char *log)
{
    swn_enter(b, name);
    const char *path = sw_test_log(log);
    pid_t pid = sw_test_spawn_wanem(listen, up, ms, path);
    swn_enter(b, NULL);
    if (pid > 0 && !sw_test_wait_text(path, "wanem: ", 10)) {
        sw_test_kill(pid);
        return -1;
    }
    return pid;
}

/* Waits until the file `log` holds `needle` more than `before` times; 0, or -1 after s. */
static inline int swn_wait_log(const char *log, const char *needle, int before, int s)
{
    for (int i = 0; i < s * 10; i++) {
        if (sw_test_count_in_file(log, needle) > before)
            return 0;
        usleep(100000);
    }
    return -1;
}

#endif
