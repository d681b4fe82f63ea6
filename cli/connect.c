/*
 * connect.c - the relay connection of the commands that talk to a cluster
 * (run, status, plan, serve's gateway; cmds.h): the keys loaded from the security flags, and
 * the join retried for --connect-timeout-s (default
 * SW_CLIENT_DEFAULT_CONNECT_S; 0 = no limit), one progress line while it waits, so that a
 * client started before the relay keeps trying.
 */
#include <stdio.h>
#include <time.h>

#include "cmds.h"

#define S_CONNECT_MS (SW_CLIENT_DEFAULT_CONNECT_S * 1000) /* default --connect-timeout-s */

double cli_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int cli_connect_ms(int connect_s)
{
    if (connect_s < 0)
        return S_CONNECT_MS;
    return connect_s > 0 ? connect_s * 1000 : -1;
}

sw_client_t *cli_connect(const char *cmd, const sw_sec_args_t *a, const char *relay, int connect_s,
                         volatile sig_atomic_t *stop, int progress, int *exit_code)
{
    char err[512];
    sw_sec_t sec;
    if (sw_sec_load(a, relay, &sec, err, sizeof err) != 0) {
        fprintf(stderr, "shardwire %s: %s\n", cmd, err);
        *exit_code = 2;
        return NULL;
    }
    sw_client_opts_t co = {.relay = relay,
                           .sec = &sec,
                           .connect_timeout_ms = cli_connect_ms(connect_s),
                           .stop = stop,
                           .join_err_logged = 1,
                           .progress = progress};
    sw_client_t *c = sw_client_new(&co, err, sizeof err);
    sw_sec_wipe(&sec);
    if (!c) {
        if (err[0]) /* else the peer's line said why */
            fprintf(stderr, "shardwire %s: %s\n", cmd, err);
        *exit_code = 1;
    }
    return c;
}
