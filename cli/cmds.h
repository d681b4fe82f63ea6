/*
 * cmds.h - the subcommands of the `shardwire` program. Each takes the
 * arguments after its name (argv[0] is the subcommand) and returns the
 * process exit code: 0 success, 1 runtime failure, 2 usage error. Each
 * file parses its command's options into a struct (s_<cmd>_parse) and then
 * runs it (s_<cmd>_run), so that no function does both.
 */
#ifndef SW_CLI_CMDS_H
#define SW_CLI_CMDS_H

int cmd_generate(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_status(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_keygen(int argc, char **argv);
int cmd_pull(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_cluster(int argc, char **argv);
int cmd_plan(int argc, char **argv);

/* ---- shared by the commands that talk to a cluster (connect.c) ---------------------------- */

#include <signal.h>

#include "client.h"
#include "keys.h"

/* The monotonic clock in ms. */
double cli_now_ms(void);
/* --connect-timeout-s (-1 = not given) in ms: the default (SW_CLIENT_DEFAULT_CONNECT_S), or
 * -1 for no limit (0 given). */
int cli_connect_ms(int connect_s);
/* Loads a's keys and joins the relay as a client, trying for connect_s seconds (-1 = the
 * default, 0 = no limit) or until *stop is set (stop may be NULL); progress: the client
 * returns SW_CLIENT_EV_PROGRESS events. NULL after one line on stderr, *exit_code set (2: the
 * keys, 1: the relay). The caller destroys the client. */
sw_client_t *cli_connect(const char *cmd, const sw_sec_args_t *a, const char *relay, int connect_s,
                         volatile sig_atomic_t *stop, int progress, int *exit_code);

#endif
