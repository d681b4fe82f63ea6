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

#endif
