/*
 * main.c - shardwire-relay: parses the command line, sets up signals and runs
 * the relay loop (relay.c). Prints "listening <endpoint>" on stdout once bound
 * so that scripts and tests can use a wildcard port ("tcp://127.0.0.1:*").
 *
 *   shardwire-relay --listen tcp://HOST:PORT --key relay.key --allow allow.txt
 *                   [--heartbeat-ms N] [--hwm N]
 *   shardwire-relay --listen tcp://127.0.0.1:PORT --insecure-loopback
 *
 * SIGHUP re-reads the allow-list (it is also re-read when the file changes).
 */
#include "args.h"
#include "log.h"
#include "relay.h"

#include <errno.h>
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

static void s_usage(FILE *out)
{
    fprintf(out, "usage: shardwire-relay --listen tcp://HOST:PORT --key FILE --allow FILE "
                 "[--heartbeat-ms N] [--hwm N]\n"
                 "  --listen        endpoint to bind (port * = any free port)\n"
                 "  --key           the relay's CURVE secret key file (shardwire keygen)\n"
                 "  --allow         allow-list: 'KEY node NAME' or 'KEY client [NAME]' per line;\n"
                 "                  # comments. Re-read when it changes and on SIGHUP.\n"
                 "  --insecure-loopback  no keys, no encryption; loopback endpoints only\n"
                 "  --heartbeat-ms  ZMTP heartbeat and liveness sweep interval; a peer that sends "
                 "no data for 5 intervals is dropped (default 1000)\n"
                 "  --hwm           messages queued per peer and direction (default 128)\n"
                 "  --rate          messages/s one peer may send to others (default 2000)\n"
                 "  --handshake-ms  time a new connection has to authenticate (default 5000)\n"
                 "  --max-conns-per-key N  peers one key may hold at once (default 16)\n"
                 "  --queue-mib N   bytes queued for one destination (default 64)\n"
                 "  --queue-total-mib N  bytes queued for all destinations (default 256)\n"
                 "  --client-mib-s N  bytes/s one client peer may send (default 4)\n"
                 "  --node-mib-s N  bytes/s one node peer may send (default 256)\n");
}

int main(int argc, char **argv)
{
    relay_opts_t opts = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            s_usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--insecure-loopback")) {
            opts.insecure_loopback = 1;
            continue;
        }
        if (i + 1 >= argc) {
            s_usage(stderr);
            return 2;
        }
        if (!strcmp(a, "--listen")) {
            opts.listen = argv[++i];
        } else if (!strcmp(a, "--key")) {
            opts.key_file = argv[++i];
        } else if (!strcmp(a, "--allow")) {
            opts.allow_file = argv[++i];
        } else if (!strcmp(a, "--heartbeat-ms")) {
            if (sw_arg_int("shardwire-relay", a, argv[++i], 10, 600000, &opts.heartbeat_ms))
                return 2;
        } else if (!strcmp(a, "--rate")) {
            if (sw_arg_int("shardwire-relay", a, argv[++i], 1, 10000000, &opts.rate))
                return 2;
        } else if (!strcmp(a, "--handshake-ms")) {
            if (sw_arg_int("shardwire-relay", a, argv[++i], 100, 600000, &opts.handshake_ms))
                return 2;
        } else if (!strcmp(a, "--hwm")) {
            if (sw_arg_int("shardwire-relay", a, argv[++i], 1, 1000000, &opts.hwm))
                return 2;
        } else if (!strcmp(a, "--max-conns-per-key")) {
            if (sw_arg_int("shardwire-relay", a, argv[++i], 1, 256, &opts.max_conns_per_key))
                return 2;
        } else if (!strcmp(a, "--queue-mib")) {
            if (sw_arg_int("shardwire-relay", a, argv[++i], 17, 65536, &opts.queue_mib))
                return 2;
        } else if (!strcmp(a, "--queue-total-mib")) {
            if (sw_arg_int("shardwire-relay", a, argv[++i], 17, 1048576, &opts.queue_total_mib))
                return 2;
        } else if (!strcmp(a, "--client-mib-s")) {
            if (sw_arg_int("shardwire-relay", a, argv[++i], 3, 65536, &opts.client_mib_s))
                return 2;
        } else if (!strcmp(a, "--node-mib-s")) {
            if (sw_arg_int("shardwire-relay", a, argv[++i], 17, 1048576, &opts.node_mib_s))
                return 2;
        } else {
            fprintf(stderr, "shardwire-relay: unknown option '%s'\n", a);
            s_usage(stderr);
            return 2;
        }
    }
    if (!opts.listen) {
        s_usage(stderr);
        return 2;
    }
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
    int rc = relay_run(relay, &s_stop);
    relay_destroy(&relay);
    return rc == 0 ? 0 : 1;
}
