/*
 * pull.c - `shardwire pull REPO[:FILE|:TAG][@REVISION]`: downloads a GGUF
 * from the Hugging Face hub into its standard cache (hub.h) and prints the
 * file's path on stdout, so that `M=$(shardwire pull ...)` works. A
 * progress bar on a terminal, a line every 10 % otherwise; Ctrl-C stops the
 * download and a later pull resumes it.
 */
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cmds.h"
#include "hub.h"

static volatile sig_atomic_t s_stop;

static void s_on_signal(int sig)
{
    (void)sig;
    s_stop = 1;
}

static void s_usage(FILE *f)
{
    fprintf(f,
            "usage: shardwire pull ORG/NAME[:FILE|:TAG][@REVISION] [--quiet]\n"
            "  Downloads a model file from the Hugging Face hub into its cache and prints the\n"
            "  file's path. Without FILE the repository's only .gguf is taken; a TAG such as\n"
            "  Q4_K_M picks the .gguf whose name contains it. Resumes an interrupted download;\n"
            "  checks the size and sha256 the hub announces.\n"
            "  --quiet   no progress output\n"
            "  environment: HF_HOME, HF_HUB_CACHE (cache folder), HF_TOKEN (private or gated\n"
            "  repositories; else $HF_HOME/token), HF_ENDPOINT (a mirror), HF_HUB_OFFLINE=1.\n"
            "  The file is also usable as --model hf:ORG/NAME/FILE wherever a model path goes.\n");
}

int cmd_pull(int argc, char **argv)
{
    enum { O_QUIET = 256, O_HELP };
    static const struct option longs[] = {
        {"quiet", no_argument, 0, O_QUIET}, {"help", no_argument, 0, O_HELP}, {0, 0, 0, 0}};
    int quiet = 0, c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "q", longs, NULL)) != -1) {
        if (c == O_QUIET || c == 'q') {
            quiet = 1;
        } else if (c == O_HELP) {
            s_usage(stdout);
            return 0;
        } else {
            s_usage(stderr);
            return 2;
        }
    }
    if (optind != argc - 1) {
        s_usage(stderr);
        return 2;
    }
    char err[1024];
    sw_hub_ref_t ref;
    const char *arg = argv[optind];
    if (!strncmp(arg, SW_HUB_PREFIX, strlen(SW_HUB_PREFIX))
            ? sw_hub_uri_parse(arg, &ref, err, sizeof err)
            : sw_hub_ref_parse(arg, &ref, err, sizeof err)) {
        fprintf(stderr, "shardwire pull: %s\n", err);
        return 2;
    }
    struct sigaction sa = {0};
    sa.sa_handler = s_on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sw_hub_opts_t o = {.progress = quiet                   ? SW_HUB_QUIET
                                   : isatty(STDERR_FILENO) ? SW_HUB_BAR
                                                           : SW_HUB_LINES,
                       .stop = &s_stop};
    char path[PATH_MAX];
    if (sw_hub_fetch(&ref, &o, path, sizeof path, err, sizeof err) != 0) {
        fprintf(stderr, "shardwire pull: %s\n", err);
        return s_stop ? 130 : 1;
    }
    printf("%s\n", path);
    return 0;
}
