/*
 * main.c - `shardwire <command> [options]`: dispatches to the subcommands.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "cmds.h"
#include "log.h"

struct s_cmd {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *help;
};

static const struct s_cmd s_cmds[] = {
    {"generate", cmd_generate, "generate text with a local model (all layers in this process)"},
    {"run", cmd_run, "generate through a cluster: send a request to the head via the relay"},
    {"serve", cmd_serve, "an OpenAI-compatible HTTP API in front of a cluster (docs/api.md)"},
    {"status", cmd_status, "print the relay's peers, their layer ranges and heartbeat ages"},
    {"plan", cmd_plan, "the layer ranges that minimise the round time for the relay's nodes"},
    {"info", cmd_info, "describe a GGUF model file (architecture, sizes, fingerprint)"},
    {"keygen", cmd_keygen, "make a CURVE key pair (--out PREFIX), a cluster key or an access key"},
    {"cluster", cmd_cluster, "set up a cluster's keys: one bundle per machine (cluster init)"},
    {"pull", cmd_pull, "download a GGUF from the Hugging Face hub into its cache (REPO[:FILE])"},
};

static void s_usage(FILE *f)
{
    fprintf(f, "usage: shardwire <command> [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof s_cmds / sizeof s_cmds[0]; i++)
        fprintf(f, "  %-10s %s\n", s_cmds[i].name, s_cmds[i].help);
    fprintf(f, "\n'shardwire <command> --help' describes a command's options;\n"
               "'shardwire --version' prints the version.\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        s_usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        s_usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "-V") || !strcmp(argv[1], "--version")) {
        printf("shardwire %s\n", sw_version());
        return 0;
    }
    /* The client prints results; only warnings and errors go to stderr
     * unless SW_LOG_LEVEL asks for more. */
    if (!getenv("SW_LOG_LEVEL"))
        sw_log_set_level(SW_LOG_WARN);
    for (size_t i = 0; i < sizeof s_cmds / sizeof s_cmds[0]; i++)
        if (!strcmp(argv[1], s_cmds[i].name))
            return s_cmds[i].fn(argc - 1, argv + 1);
    if (argv[1][0] == '-')
        fprintf(stderr,
                "shardwire: unknown option '%s': a command comes first, its options after it "
                "(see 'shardwire --help')\n",
                argv[1]);
    else
        fprintf(stderr, "shardwire: unknown command '%s' (see 'shardwire --help' for the list)\n",
                argv[1]);
    return 2;
}
