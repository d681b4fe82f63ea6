/*
 * main.c - shardwire-relay: parses the command line, sets up signals and runs
 * the relay loop (relay.c). Prints "listening <endpoint>" on stdout once bound
 * so that scripts and tests can use a wildcard port ("tcp://127.0.0.1:*").
 *
 *   shardwire-relay --listen HOST:PORT --key relay.key --allow allow.txt
 *                   [--heartbeat-ms N] [--hwm N] [--rate N] [--handshake-ms MS]
 *   shardwire-relay --listen 127.0.0.1:PORT --insecure-loopback
 *
 * SIGHUP re-reads the allow-list (it is also re-read when the file changes).
 */
#include "args.h"
#include "log.h"
#include "relay.h"

#include <errno.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

/* Set by the signal handlers; the only way a signal can talk to the loop. */
static volatile sig_atomic_t s_stop;
static volatile sig_atomic_t s_reload;

static void s_on_signal(int sig)
{
    if (sig == SIGHUP)
        s_reload = 1;
    else
        s_stop = 1;
}

/*
 * Raises the open-file limit to the hard limit: each connection is a file, and
 * at the common soft limit of 1024 a crowd of idle connections would leave
 * libzmq's listener unable to accept anyone (it then spins on EMFILE). Says
 * what the relay can hold.
 */
static void s_raise_nofile(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) {
        SW_WARN("relay: getrlimit(RLIMIT_NOFILE): %s", strerror(errno));
        return;
    }
    rlim_t was = rl.rlim_cur;
    if (rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0) {
            SW_WARN("relay: cannot raise the open-file limit from %llu to %llu: %s",
                    (unsigned long long)was, (unsigned long long)rl.rlim_max, strerror(errno));
            rl.rlim_cur = was;
        }
    }
    if (rl.rlim_cur != was)
        SW_INFO("relay: open-file limit raised from %llu to %llu", (unsigned long long)was,
                (unsigned long long)rl.rlim_cur);
    if (rl.rlim_cur < 4096)
        SW_WARN("relay: the open-file limit is %llu: the relay can hold about that many "
                "connections, idle ones included; raise the hard limit (LimitNOFILE= in systemd, "
                "ulimit -Hn) and limit connections per address in the firewall "
                "(docs/security.md)",
                (unsigned long long)rl.rlim_cur);
}

enum {
    O_LISTEN = SW_OPT_OWN,
    O_KEY,
    O_ALLOW,
    O_INSECURE,
    O_HB,
    O_HWM,
    O_RATE,
    O_HANDSHAKE,
    O_CONNS,
    O_QMIB,
    O_QTOTAL,
    O_CMIBS,
    O_NMIBS,
    O_HOLD,
    O_ANNOUNCE,
    O_PREFIX,
};

static const sw_opt_t s_opts[] = {
    {"listen", O_LISTEN, "ENDPOINT",
     "where to listen: HOST:PORT or tcp://HOST:PORT; HOST *\nor 0.0.0.0 = every interface, PORT * "
     "= any free port"},
    {"key", O_KEY, "FILE", "the relay's CURVE secret key file (shardwire keygen)"},
    {"allow", O_ALLOW, "FILE",
     "allow-list: 'KEY head|stage NAME' or 'KEY client [NAME]'\nper line; # comments. Re-read when "
     "it "
     "changes and on\nSIGHUP (docs/security.md)."},
    {"insecure-loopback", O_INSECURE, NULL, "no keys, no encryption; loopback endpoints only"},
    {"heartbeat-ms", O_HB, "MS",
     "ZMTP heartbeat and liveness sweep interval; a peer that\nsends no data for " //
     SW_STR(SW_RELAY_SILENT_IVLS) " intervals is dropped (default "                //
     SW_STR(SW_RELAY_DEFAULT_HEARTBEAT_MS) ")"},
    {"hwm", O_HWM, "N",
     "messages queued per peer and direction (default " SW_STR(SW_RELAY_DEFAULT_HWM) ")"},
    {"rate", O_RATE, "N",
     "messages/s one peer may send to others (default " SW_STR(SW_RELAY_DEFAULT_RATE) ")"},
    {"handshake-ms", O_HANDSHAKE, "MS",
     "time a new connection has to authenticate (default\n" //
     SW_STR(SW_RELAY_DEFAULT_HANDSHAKE_MS) ")"},
    {"max-conns-per-key", O_CONNS, "N",
     "peers one key may hold at once (default " SW_STR(SW_RELAY_DEFAULT_CONNS_PER_KEY) ")"},
    {"max-conns-per-prefix", O_PREFIX, "N",
     "TCP connections kept open from one IPv4 /24 or IPv6\n/64, authenticated or not "
     "(default " SW_STR(SW_RELAY_DEFAULT_CONNS_PER_PREFIX) ")"},
    {"queue-mib", O_QMIB, "N",
     "MiB queued for one destination (default " SW_STR(SW_RELAY_DEFAULT_QUEUE_MIB) ")"},
    {"queue-total-mib", O_QTOTAL, "N",
     "MiB queued for all destinations (default " SW_STR(SW_RELAY_DEFAULT_QUEUE_TOTAL_MIB) ")"},
    {"client-mib-s", O_CMIBS, "N",
     "MiB/s one client peer may send (default " SW_STR(SW_RELAY_DEFAULT_CLIENT_MIB_S) ")"},
    {"node-mib-s", O_NMIBS, "N",
     "MiB/s one node peer may send (default " SW_STR(SW_RELAY_DEFAULT_NODE_MIB_S) ")"},
    {"name-hold-s", O_HOLD, "S",
     "a client's name stays held for its key this long after\nit left (default " //
     SW_STR(SW_RELAY_DEFAULT_NAME_HOLD_S) ", 0 = not at all)"},
    {"announce-ms", O_ANNOUNCE, "MS",
     "a connection that has not announced this long after\nit opened is shut down (default " //
     SW_STR(SW_RELAY_DEFAULT_ANNOUNCE_MS) ")"},
};

static const sw_opt_group_t s_groups[] = {SW_ARGS_GROUP(NULL, s_opts)};

static const sw_args_spec_t s_spec = {
    .prog = "shardwire-relay",
    .usage = "--listen HOST:PORT --key FILE --allow FILE [options]\n"
             "       shardwire-relay --listen 127.0.0.1:PORT --insecure-loopback",
    .about = "  The cluster's meeting point: every node and client dials out to it and it\n"
             "  routes their frames (it never sees the payloads, docs/security.md). Prints\n"
             "  \"listening ENDPOINT\" on stdout once bound.\n",
    .groups = s_groups,
    .n_groups = SW_ARGS_COUNT(s_groups),
};

int main(int argc, char **argv)
{
#if defined(__GLIBC__) && !defined(__SANITIZE_ADDRESS__)
    /* Frames of up to 16 MiB come and go: served by mmap, each goes back to the system when
     * freed, so that the relay's resident memory follows what it holds (docs/security.md's
     * bound). glibc would raise its threshold to the largest block freed and keep freed
     * frames in the heap: test_relay_memory's second flood peaked at 248 MiB, 174 with this.
     * (Not under AddressSanitizer: its allocator has no such setting, and mallopt fails.) */
    if (mallopt(M_MMAP_THRESHOLD, 1 << 20) != 1)
        SW_WARN("relay: could not set malloc's mmap threshold; memory may exceed the bound");
#endif
    const char *P = s_spec.prog, *v;
    relay_opts_t opts = {0};
    char listen[SW_ARGS_ENDPOINT_MAX];
    int c, rc = 0;
    sw_args_t a;
    sw_args_init(&a, &s_spec, argc, argv);
    while ((c = sw_args_next(&a, &v)) >= 0) {
        switch (c) {
        case O_LISTEN:
            rc = sw_arg_endpoint(P, "--listen", v, 1, listen, sizeof listen);
            opts.listen = listen;
            break;
        case O_KEY:
            opts.key_file = v;
            break;
        case O_ALLOW:
            opts.allow_file = v;
            break;
        case O_INSECURE:
            opts.insecure_loopback = 1;
            break;
        case O_HB:
            rc = sw_arg_int(P, "--heartbeat-ms", v, 10, 600000, &opts.heartbeat_ms);
            break;
        case O_RATE:
            rc = sw_arg_int(P, "--rate", v, 1, 10000000, &opts.rate);
            break;
        case O_HANDSHAKE:
            rc = sw_arg_int(P, "--handshake-ms", v, 100, 600000, &opts.handshake_ms);
            break;
        case O_HWM:
            rc = sw_arg_int(P, "--hwm", v, 1, 1000000, &opts.hwm);
            break;
        case O_CONNS:
            rc = sw_arg_int(P, "--max-conns-per-key", v, 1, 256, &opts.max_conns_per_key);
            break;
        case O_PREFIX:
            rc = sw_arg_int(P, "--max-conns-per-prefix", v, 1, 65536, &opts.max_conns_per_prefix);
            break;
        case O_QMIB:
            rc = sw_arg_int(P, "--queue-mib", v, SW_RELAY_MIN_FRAME_MIB, 65536, &opts.queue_mib);
            break;
        case O_QTOTAL:
            rc = sw_arg_int(P, "--queue-total-mib", v, SW_RELAY_MIN_FRAME_MIB, 1048576,
                            &opts.queue_total_mib);
            break;
        case O_CMIBS:
            rc = sw_arg_int(P, "--client-mib-s", v, SW_RELAY_MIN_CLIENT_MIB, 65536,
                            &opts.client_mib_s);
            break;
        case O_NMIBS:
            rc =
                sw_arg_int(P, "--node-mib-s", v, SW_RELAY_MIN_FRAME_MIB, 1048576, &opts.node_mib_s);
            break;
        case O_ANNOUNCE:
            rc = sw_arg_int(P, "--announce-ms", v, 100, 600000, &opts.announce_ms);
            break;
        case O_HOLD:
            rc = sw_arg_int(P, "--name-hold-s", v, 0, 86400, &opts.name_hold_s);
            if (rc == 0 && opts.name_hold_s == 0)
                opts.name_hold_s = -1;
            break;
        default:
            return 2;
        }
        if (rc)
            return 2;
    }
    if ((c = sw_args_finish(&a, c, 0)) >= 0)
        return c;
    if (!opts.listen)
        return sw_args_exit(sw_args_fail(&s_spec, "--listen HOST:PORT is required"));
    sw_log_set_tag("relay");
    s_raise_nofile();
    opts.reload = &s_reload;

    /* libzmq's I/O threads inherit this mask: signals then reach the loop's thread. */
    sigset_t set, old;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &set, &old);
    relay_t *relay = relay_new(&opts);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (!relay)
        return 1;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = s_on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    printf("listening %s\n", relay_endpoint(relay));
    fflush(stdout);
    rc = relay_run(relay, &s_stop);
    relay_destroy(&relay);
    return rc == 0 ? 0 : 1;
}
