/*
 * wanem_main.c - shardwire-wanem: parses the command line, prints the one
 * start line and runs the WAN emulator proxy (wanem.c) until SIGINT/SIGTERM.
 * Bad flags exit 2 with one line on stderr; runtime failures exit 1.
 */
#include "args.h"
#include "log.h"
#include "wanem.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WANEM_BUFFER_DEFAULT_MIB 64 // --buffer-mib: MiB queued per direction and connection
#define WANEM_BUFFER_DEFAULT ((unsigned long long)WANEM_BUFFER_DEFAULT_MIB << 20)
#define WANEM_SEED_DEFAULT 1              // --seed: the jitter's random stream
#define WANEM_DELAY_MAX_MS 600000.0       // 10 minutes
#define WANEM_RATE_MAX_KBPS 1000000000ull // 1 Tbit/s
#define WANEM_BUFFER_MAX_MIB 65536ull     // 64 GiB

static volatile sig_atomic_t s_stop;

static void s_on_signal(int sig)
{
    (void)sig;
    s_stop = 1;
}

enum {
    O_LISTEN = SW_OPT_OWN,
    O_CONNECT,
    O_DELAY,
    O_JITTER,
    O_RATE,
    O_SEED,
    O_BUFFER,
};

static const sw_opt_t s_opts[] = {
    {"listen", O_LISTEN, "HOST:PORT",
     "where clients connect (tcp:// optional; port 0 = any\nfree port, printed at start)"},
    {"connect", O_CONNECT, "HOST:PORT",
     "the upstream each client is proxied to (tcp://\noptional)"},
    {"delay-ms", O_DELAY, "D", "one-way delay of every byte, each direction (0 = none)"},
    {"jitter-ms", O_JITTER, "J",
     "plus a uniform jitter in [-J, +J] ms that never\nreorders a stream (J <= D)"},
    {"rate-kbps", O_RATE, "R", "pace each direction to R kbit/s (default unlimited)"},
    {"seed", O_SEED, "S", "jitter seed (default " SW_STR(WANEM_SEED_DEFAULT) ")"},
    {"buffer-mib", O_BUFFER, "M",
     "MiB queued per direction before reading pauses\n(default " SW_STR(
         WANEM_BUFFER_DEFAULT_MIB) ")"},
};

static const sw_opt_group_t s_groups[] = {SW_ARGS_GROUP(NULL, s_opts)};

static const sw_args_spec_t s_spec = {
    .prog = "shardwire-wanem",
    .usage = "--listen HOST:PORT --connect HOST:PORT --delay-ms D [options]",
    .about = "  A TCP proxy that emulates a WAN link (docs/wanem.md): every byte is held D\n"
             "  ms (one way, each direction), plus a jitter, then paced to R kbit/s per\n"
             "  direction. Each accepted client gets its own upstream connection.\n",
    .groups = s_groups,
    .n_groups = SW_ARGS_COUNT(s_groups),
};

static int s_bad(const char *fmt, const char *a, const char *b)
{
    fprintf(stderr, "shardwire-wanem: ");
    fprintf(stderr, fmt, a, b);
    fprintf(stderr, " (see --help)\n");
    return 2;
}

/* Parses a non-negative decimal number of milliseconds within [0, max] into ns. */
static int s_parse_ms(const char *text, double max, uint64_t *ns)
{
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (!text[0] || *end || errno || !isfinite(v) || v < 0 || v > max)
        return -1;
    *ns = (uint64_t)llround(v * 1e6);
    return 0;
}

/* Parses an unsigned decimal integer within [lo, hi]. */
static int s_parse_u64(const char *text, uint64_t lo, uint64_t hi, uint64_t *out)
{
    char *end;
    errno = 0;
    if (!text[0] || text[0] == '-' || text[0] == '+')
        return -1;
    unsigned long long v = strtoull(text, &end, 10);
    if (*end || errno || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

int main(int argc, char **argv)
{
    sw_log_set_tag("wanem");
    struct wanem_config cfg = {.buffer_max = WANEM_BUFFER_DEFAULT, .seed = WANEM_SEED_DEFAULT};
    const char *listen_s = NULL, *connect_s = NULL, *delay_s = NULL, *jitter_s = NULL;
    const char *rate_s = NULL;
    char err[256];

    char listen_ep[SW_ARGS_ENDPOINT_MAX], connect_ep[SW_ARGS_ENDPOINT_MAX];
    const char *v;
    int c;
    sw_args_t a;
    sw_args_init(&a, &s_spec, argc, argv);
    while ((c = sw_args_next(&a, &v)) >= 0) {
        switch (c) {
        case O_LISTEN: /* the one endpoint syntax of every program; wanem wants HOST:PORT */
            if (sw_arg_endpoint(s_spec.prog, "--listen", v, 1, listen_ep, sizeof listen_ep) != 0)
                return 2;
            if (strncmp(listen_ep, "tcp://", 6) != 0)
                return s_bad("--listen '%s': the emulator proxies TCP only%s", v, "");
            listen_s = listen_ep + 6;
            break;
        case O_CONNECT:
            if (sw_arg_endpoint(s_spec.prog, "--connect", v, 0, connect_ep, sizeof connect_ep) != 0)
                return 2;
            if (strncmp(connect_ep, "tcp://", 6) != 0)
                return s_bad("--connect '%s': the emulator proxies TCP only%s", v, "");
            connect_s = connect_ep + 6;
            break;
        case O_DELAY:
            delay_s = v;
            break;
        case O_JITTER:
            jitter_s = v;
            break;
        case O_RATE:
            rate_s = v;
            break;
        case O_SEED:
            if (s_parse_u64(v, 0, UINT64_MAX, &cfg.seed) != 0)
                return s_bad("--seed '%s' is not an unsigned 64-bit integer%s", v, "");
            break;
        default: {
            uint64_t mib;
            if (s_parse_u64(v, 1, WANEM_BUFFER_MAX_MIB, &mib) != 0)
                return s_bad("--buffer-mib '%s' must be an integer in 1..65536%s", v, "");
            cfg.buffer_max = mib << 20;
            break;
        }
        }
    }
    if ((c = sw_args_finish(&a, c, 0)) >= 0)
        return c;
    if (!listen_s)
        return s_bad("--listen HOST:PORT is required%s%s", "", "");
    if (!connect_s)
        return s_bad("--connect HOST:PORT is required%s%s", "", "");
    if (!delay_s)
        return s_bad("--delay-ms is required (one-way latency in ms, 0 for none)%s%s", "", "");
    if (s_parse_ms(delay_s, WANEM_DELAY_MAX_MS, &cfg.delay_ns) != 0)
        return s_bad("--delay-ms '%s' must be a number of ms in 0..600000%s", delay_s, "");
    if (jitter_s) {
        if (s_parse_ms(jitter_s, WANEM_DELAY_MAX_MS, &cfg.jitter_ns) != 0)
            return s_bad("--jitter-ms '%s' must be a number of ms in 0..600000%s", jitter_s, "");
        if (cfg.jitter_ns > cfg.delay_ns)
            return s_bad("--jitter-ms %s must not exceed --delay-ms %s", jitter_s, delay_s);
    }
    if (rate_s && s_parse_u64(rate_s, 1, WANEM_RATE_MAX_KBPS, &cfg.rate_kbps) != 0)
        return s_bad("--rate-kbps '%s' must be an integer in 1..1000000000%s", rate_s, "");
    if (wanem_parse_addr(listen_s, &cfg.listen_addr, &cfg.listen_len, err, sizeof err) != 0)
        return s_bad("--listen: %s%s", err, "");
    if (wanem_parse_addr(connect_s, &cfg.connect_addr, &cfg.connect_len, err, sizeof err) != 0)
        return s_bad("--connect: %s%s", err, "");

    // The stop signals stay blocked except inside ppoll(), so none is lost between
    // checking the flag and going to sleep.
    struct sigaction sa = {.sa_handler = s_on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    sigset_t block, wait_mask;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    sigprocmask(SIG_BLOCK, &block, &wait_mask);
    sigdelset(&wait_mask, SIGINT);
    sigdelset(&wait_mask, SIGTERM);

    wanem_t *w = wanem_new(&cfg);
    if (!w)
        return 1;
    char from[128], to[128], rate[64];
    wanem_bound_addr(w, from, sizeof from);
    wanem_format_addr((const struct sockaddr *)&cfg.connect_addr, cfg.connect_len, to, sizeof to);
    if (cfg.rate_kbps)
        snprintf(rate, sizeof rate, "%llu kbit/s", (unsigned long long)cfg.rate_kbps);
    else
        snprintf(rate, sizeof rate, "unlimited");
    fprintf(stderr,
            "wanem: %s -> %s, one-way %g ms (RTT %g ms), jitter +-%g ms, rate %s per direction, "
            "seed %llu, buffer %llu MiB\n",
            from, to, (double)cfg.delay_ns / 1e6, 2.0 * (double)cfg.delay_ns / 1e6,
            (double)cfg.jitter_ns / 1e6, rate, (unsigned long long)cfg.seed,
            (unsigned long long)(cfg.buffer_max >> 20));
    fflush(stderr);

    int rc = wanem_run(w, &wait_mask, &s_stop);
    fprintf(stderr, "wanem: stopped after %llu connections\n",
            (unsigned long long)wanem_accepted(w));
    wanem_destroy(&w);
    return rc == 0 ? 0 : 1;
}
