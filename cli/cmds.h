/*
 * cmds.h - the subcommands of the `shardwire` program. Each takes the
 * arguments after its name (argv[0] is the subcommand) and returns the
 * process exit code: 0 success, 1 runtime failure, 2 usage error.
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

/* Joins the relay as a client with a's keys (run.c), trying for connect_s
 * seconds (-1 = the default, 0 = no limit); NULL after one line on stderr,
 * *exit_code set. */
#include "client.h"
#include "keys.h"
sw_client_t *cli_connect(const char *cmd, const sw_sec_args_t *a, const char *relay, int connect_s,
                         int *exit_code);

#endif
