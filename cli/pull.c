/*
 * pull.c - `shardwire pull REPO[:FILE|:TAG][@REVISION]`: downloads a GGUF
 * from the Hugging Face hub into its standard cache (hub.h) and prints the
 * file's path on stdout, so that `M=$(shardwire pull ...)` works. A
 * progress bar on a terminal, a line every 10 % otherwise; Ctrl-C stops the
 * download and a later pull resumes it. With --layers A:B only the GGUF
 * header and the tensors of those layers are fetched (HTTP range requests)
 * into a partial file the engine loads for that range (engine/include/partial.h).
 */
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "args.h"
#include "cmds.h"
#include "hub.h"

static volatile sig_atomic_t s_stop;

static void s_on_signal(int sig)
{
    (void)sig;
    s_stop = 1;
}

enum { O_QUIET = 'q', O_LAYERS = 'l' };

static const sw_opt_t s_opts[] = {
    {"quiet", O_QUIET, NULL, "no progress output"},
    {"layers", O_LAYERS, "A:B",
     "only what a node of layers [A, B) needs (B may be 'end'):\nthe header, the first MiB of "
     "tensor data (the\nfingerprint), those blocks, the embeddings from 0, the\noutput norm and "
     "head to the end"},
};

static const sw_opt_group_t s_groups[] = {SW_ARGS_GROUP(NULL, s_opts)};

static const sw_args_spec_t s_spec = {
    .prog = "shardwire pull",
    .usage = "ORG/NAME[:FILE|:TAG][@REVISION] [--layers A:B] [--quiet]",
    .about = "  Downloads a model file from the Hugging Face hub into its cache and prints\n"
             "  the file's path. Without FILE the repository's only .gguf is taken; a TAG\n"
             "  such as Q4_K_M picks the .gguf whose name contains it. Resumes an interrupted\n"
             "  download; checks the size and sha256 the hub announces. The file is also\n"
             "  usable as --model hf:ORG/NAME/FILE wherever a model path goes. --layers\n"
             "  downloads a partial file of those layers only (range requests; resumable;\n"
             "  the whole-file sha256 cannot be checked on a part: docs/deploy.md).\n",
    .groups = s_groups,
    .n_groups = SW_ARGS_COUNT(s_groups),
    .footer = "environment: HF_HOME, HF_HUB_CACHE (cache folder), HF_TOKEN (private or gated\n"
              "repositories; else $HF_HOME/token), HF_ENDPOINT (a mirror), HF_HUB_OFFLINE=1.\n",
};

struct s_pull_opts {
    sw_hub_ref_t ref; /* the repository and file */
    int quiet;        /* --quiet */
    int begin, end;   /* --layers A:B (end -1 = 'end'); begin -1 = the whole file */
};

/* -1 when the options are good (o filled), else the exit code: 0 after --help /
 * --version, 2 after a usage error's line. */
static int s_pull_parse(int argc, char **argv, struct s_pull_opts *o)
{
    *o = (struct s_pull_opts){.begin = -1, .end = -1};
    int c;
    const char *v;
    sw_args_t a;
    sw_args_init(&a, &s_spec, argc, argv);
    while ((c = sw_args_next(&a, &v)) >= 0)
        if (c == O_QUIET)
            o->quiet = 1;
        else if (c == O_LAYERS &&
                 sw_arg_layers(s_spec.prog, "--layers", v, &o->begin, &o->end) != 0)
            return 2;
    if ((c = sw_args_finish(&a, c, 1)) >= 0)
        return c;
    if (a.first_arg >= argc)
        return sw_args_exit(sw_args_fail(&s_spec, "the repository ORG/NAME is required"));
    char err[1024];
    const char *arg = argv[a.first_arg];
    if (!strncmp(arg, SW_HUB_PREFIX, strlen(SW_HUB_PREFIX))
            ? sw_hub_uri_parse(arg, &o->ref, err, sizeof err)
            : sw_hub_ref_parse(arg, &o->ref, err, sizeof err)) {
        fprintf(stderr, "shardwire pull: %s\n", err);
        return 2;
    }
    return -1;
}

/* Downloads (or resumes) the file and prints its path: the exit code (130 after Ctrl-C). */
static int s_pull_run(const struct s_pull_opts *o)
{
    struct sigaction sa = {0};
    sa.sa_handler = s_on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sw_hub_opts_t ho = {.progress = o->quiet                ? SW_HUB_QUIET
                                    : isatty(STDERR_FILENO) ? SW_HUB_BAR
                                                            : SW_HUB_LINES,
                        .stop = &s_stop};
    char path[PATH_MAX], err[1024];
    if ((o->begin >= 0 ? sw_hub_fetch_layers(&o->ref, &ho, o->begin, o->end, path, sizeof path, err,
                                             sizeof err)
                       : sw_hub_fetch(&o->ref, &ho, path, sizeof path, err, sizeof err)) != 0) {
        fprintf(stderr, "shardwire pull: %s\n", err);
        return s_stop ? 130 : 1;
    }
    printf("%s\n", path);
    return 0;
}

int cmd_pull(int argc, char **argv)
{
    static struct s_pull_opts o;
    const int rc = s_pull_parse(argc, argv, &o);
    return rc >= 0 ? rc : s_pull_run(&o);
}
