/*
 * main.c - shardwire-node: parses the command line and runs the node.
 *
 *   shardwire-node --model M.gguf --layers A:B --relay tcp://HOST:PORT --name NAME
 *                  [--backend cpu|cuda[:N]|cuda:0,1] [--threads N] [--ctx N]
 *                  [--max-sessions N] [--dtype f32|f16|bf16]
 *                  [--idle-timeout-s S] [--round-timeout-ms MS] [--heartbeat-ms MS]
 *                  [--recover-timeout-s S] [--connect-timeout-s S]
 *                  --key FILE --relay-key FILE|Z85 --cluster-key FILE
 *                  [--access-key FILE (the head)] | --insecure-loopback
 *                  [--draft-model D.gguf] [--draft model|ngram|mix|none] [--draft-k K|auto]
 *                  [--draft-k-max N] [--draft-p-min P] [--draft-threads N]
 *                  [--draft-backend cpu|cuda[:N]]
 *                  [--max-queue N] [--max-queue-per-client N] [--max-sessions-per-client N]
 *                  [--max-batch-rows N] [--kv-mib M]
 *
 * The --draft* flags matter on the head (layers from 0) only: they set the
 * drafting a request gets when its DraftParams leave it to the head.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "drafter.h"
#include "hub.h"
#include "keys.h"
#include "node.h"
#include "wire.h"

static volatile sig_atomic_t s_stop;

static void s_on_signal(int sig)
{
    (void)sig;
    s_stop = 1;
}

static void s_usage(FILE *f)
{
    fprintf(f, "usage: shardwire-node --model M.gguf --layers A:B --relay tcp://HOST:PORT "
               "--name NAME [options]\n"
               "  --model PATH           GGUF file, or hf:ORG/NAME/FILE (fetched into the Hugging\n"
               "                         Face cache; HF_HOME, HF_TOKEN)\n"
               "  --model-name NAME      the model's name for clients and the HTTP API\n"
               "                         (default: the file name without .gguf)\n"
               "  --layers A:B           serve layers [A, B) (B may be 'end')\n"
               "  --backend B            cpu, cuda, cuda:N, or cuda:0,1 to split the layers over\n"
               "                         two GPUs (default: cuda when a GPU is found, else cpu)\n"
               "  --threads N            CPU compute threads (default: all cores)\n"
               "  --ctx N                positions per session (default 2048)\n"
               "  --max-sessions N       sessions held at once; on the head, requests served at\n"
               "                         once (default 8)\n"
               "  --max-queue N          head: requests waiting for a session beyond that; more\n"
               "                         are refused as busy (default 64)\n"
               "  --max-queue-per-client N  head: of them from one client (default 16, 0 = any)\n"
               "  --max-sessions-per-client N  head: sessions one client runs at once; its\n"
               "                         other requests wait while others' pass (default 0 = any)\n"
               "  --max-batch-rows N     rows run through the layers in one batch, summed over\n"
               "                         sessions (default 256)\n"
               "  --kv-mib M             memory for the sessions' KV caches; a session that does\n"
               "                         not fit waits (head) or is refused (default: what\n"
               "                         --max-sessions caches of --ctx positions take)\n"
               "  --dtype T              hidden states sent as f32, f16 or bf16 (default f32)\n"
               "  --idle-timeout-s S     free a session unused for S seconds (default 300)\n"
               "  --round-timeout-ms MS  head: recover a round with no verdict after MS (default "
               "60000)\n"
               "  --recover-timeout-s S  head: wait up to S s for a failed stage to come back "
               "(default 60; 0 = fail at once)\n"
               "  --heartbeat-ms MS      relay heartbeat interval (default 1000)\n"
               "  --connect-timeout-s S  at start, keep trying to reach the relay for S s\n"
               "                         (default 0 = until it answers; one line per attempt)\n"
               "  --draft-model PATH     head: draft model GGUF (the model's vocabulary)\n"
               "  --draft MODE           head: default proposer: model, ngram, mix or none\n"
               "                         (default: model with --draft-model, else none)\n"
               "  --draft-k K            head: default drafts per round, 0 = off, auto = adaptive\n"
               "                         (default auto)\n"
               "  --draft-k-max N        head: largest adaptive K (default 16)\n"
               "  --draft-p-min P        head: stop drafting below this draft probability "
               "(default 0)\n"
               "  --draft-threads N      head: draft model threads (default: as "
               "--threads)\n"
               "  --draft-backend B      head: where the draft model runs, e.g. cuda:1 (default:\n"
               "                         the first device of --backend)\n" SW_SEC_USAGE);
}

static int s_layers(const char *s, int *a, int *b)
{
    const char *colon = strchr(s, ':');
    char first[32];
    if (!colon || (size_t)(colon - s) >= sizeof first)
        goto bad;
    memcpy(first, s, (size_t)(colon - s));
    first[colon - s] = 0;
    if (sw_arg_int("shardwire-node", "--layers", first, 0, SW_WIRE_MAX_LAYERS, a) != 0)
        return -1;
    if (!strcmp(colon + 1, "end")) {
        *b = -1;
        return 0;
    }
    if (sw_arg_int("shardwire-node", "--layers", colon + 1, 1, SW_WIRE_MAX_LAYERS, b) != 0)
        return -1;
    if (*b <= *a)
        goto bad;
    return 0;
bad:
    fprintf(stderr, "shardwire-node: --layers '%s' must be A:B with A < B (e.g. 0:15)\n", s);
    return -1;
}

int main(int argc, char **argv)
{
    enum {
        O_MODEL = 256,
        O_LAYERS,
        O_RELAY,
        O_NAME,
        O_THREADS,
        O_CTX,
        O_MAXS,
        O_DTYPE,
        O_IDLE,
        O_ROUND,
        O_HB,
        O_RECOVER,
        O_CONNECT,
        O_DMODEL,
        O_DMODE,
        O_DK,
        O_DKMAX,
        O_DPMIN,
        O_DTHREADS,
        O_MAXQ,
        O_MAXROWS,
        O_KVMIB,
        O_BACKEND,
        O_DBACKEND,
        O_HELP,
        O_MODEL_NAME,
        O_QPC,
        O_SPC
    };
    static const struct option longs[] = {{"model", required_argument, 0, O_MODEL},
                                          {"layers", required_argument, 0, O_LAYERS},
                                          {"relay", required_argument, 0, O_RELAY},
                                          {"name", required_argument, 0, O_NAME},
                                          {"model-name", required_argument, 0, O_MODEL_NAME},
                                          {"threads", required_argument, 0, O_THREADS},
                                          {"ctx", required_argument, 0, O_CTX},
                                          {"max-sessions", required_argument, 0, O_MAXS},
                                          {"dtype", required_argument, 0, O_DTYPE},
                                          {"idle-timeout-s", required_argument, 0, O_IDLE},
                                          {"round-timeout-ms", required_argument, 0, O_ROUND},
                                          {"heartbeat-ms", required_argument, 0, O_HB},
                                          {"recover-timeout-s", required_argument, 0, O_RECOVER},
                                          {"connect-timeout-s", required_argument, 0, O_CONNECT},
                                          {"draft-model", required_argument, 0, O_DMODEL},
                                          {"draft", required_argument, 0, O_DMODE},
                                          {"draft-k", required_argument, 0, O_DK},
                                          {"draft-k-max", required_argument, 0, O_DKMAX},
                                          {"draft-p-min", required_argument, 0, O_DPMIN},
                                          {"draft-threads", required_argument, 0, O_DTHREADS},
                                          {"backend", required_argument, 0, O_BACKEND},
                                          {"draft-backend", required_argument, 0, O_DBACKEND},
                                          {"max-queue", required_argument, 0, O_MAXQ},
                                          {"max-queue-per-client", required_argument, 0, O_QPC},
                                          {"max-sessions-per-client", required_argument, 0, O_SPC},
                                          {"max-batch-rows", required_argument, 0, O_MAXROWS},
                                          {"kv-mib", required_argument, 0, O_KVMIB},
                                          {"help", no_argument, 0, O_HELP},
                                          SW_SEC_LONGOPTS,
                                          {0, 0, 0, 0}};
    sw_sec_args_t sargs = {0};
    static sw_sec_t sec; /* lives until the process exits */
    node_opts_t o = {
        .layer_begin = -1,
        .layer_end = -1,
        .n_ctx = 2048,
        .max_sessions = 8,
        .idle_timeout_ms = 300000,
        .round_timeout_ms = 60000,
        .recover_timeout_ms = 60000,
        .dtype = SHARDWIRE__DTYPE__DTYPE_F32,
        .heartbeat_ms = 1000,
        .draft_k = DRAFT_K_AUTO,
        .max_queue = 64,
        .max_queue_per_client = 16,
        .max_batch_rows = 256,
    };
    int kv_mib = -1;
    int c, idle_s = 300, recover_s = 60, connect_s = 0, rc = 0;
    while ((c = getopt_long(argc, argv, "", longs, NULL)) != -1) {
        int h = sw_sec_args_opt(&sargs, c, optarg);
        if (h < 0)
            return 2;
        if (h)
            continue;
        switch (c) {
        case O_MODEL:
            o.model = optarg;
            break;
        case O_LAYERS:
            rc = s_layers(optarg, &o.layer_begin, &o.layer_end);
            break;
        case O_RELAY:
            o.relay = optarg;
            break;
        case O_MODEL_NAME:
            o.model_name = optarg;
            if (!sw_wire_model_name_ok(optarg)) {
                fprintf(stderr,
                        "shardwire-node: --model-name '%s' must be up to 63 characters of "
                        "[A-Za-z0-9._:/-]\n",
                        optarg);
                rc = -1;
            }
            break;
        case O_NAME:
            o.name = optarg;
            break;
        case O_THREADS:
            rc = sw_arg_int("shardwire-node", "--threads", optarg, 1, 512, &o.threads);
            break;
        case O_CTX:
            rc = sw_arg_int("shardwire-node", "--ctx", optarg, 16, 1 << 24, &o.n_ctx);
            break;
        case O_MAXS:
            rc = sw_arg_int("shardwire-node", "--max-sessions", optarg, 1, 4096, &o.max_sessions);
            break;
        case O_IDLE:
            rc = sw_arg_int("shardwire-node", "--idle-timeout-s", optarg, 1, 86400 * 7, &idle_s);
            break;
        case O_ROUND:
            rc = sw_arg_int("shardwire-node", "--round-timeout-ms", optarg, 100, 3600000,
                            &o.round_timeout_ms);
            break;
        case O_RECOVER:
            rc = sw_arg_int("shardwire-node", "--recover-timeout-s", optarg, 0, 86400, &recover_s);
            break;
        case O_CONNECT:
            rc = sw_arg_int("shardwire-node", "--connect-timeout-s", optarg, 0, 86400 * 24,
                            &connect_s);
            break;
        case O_HB:
            rc = sw_arg_int("shardwire-node", "--heartbeat-ms", optarg, 50, 60000, &o.heartbeat_ms);
            break;
        case O_DTYPE:
            if (!strcmp(optarg, "f32"))
                o.dtype = SHARDWIRE__DTYPE__DTYPE_F32;
            else if (!strcmp(optarg, "f16"))
                o.dtype = SHARDWIRE__DTYPE__DTYPE_F16;
            else if (!strcmp(optarg, "bf16"))
                o.dtype = SHARDWIRE__DTYPE__DTYPE_BF16;
            else {
                fprintf(stderr, "shardwire-node: --dtype '%s' must be f32, f16 or bf16\n", optarg);
                rc = -1;
            }
            break;
        case O_DMODEL:
            o.draft_model = optarg;
            break;
        case O_DMODE: {
            enum draft_mode dm;
            o.draft_mode = optarg;
            if (draft_mode_parse(optarg, &dm) != 0) {
                fprintf(stderr, "shardwire-node: --draft '%s' must be model, ngram, mix or none\n",
                        optarg);
                rc = -1;
            }
            break;
        }
        case O_DK:
            if (!strcmp(optarg, "auto"))
                o.draft_k = DRAFT_K_AUTO;
            else
                rc = sw_arg_int("shardwire-node", "--draft-k", optarg, 0, SW_MAX_DRAFT, &o.draft_k);
            break;
        case O_DKMAX:
            rc = sw_arg_int("shardwire-node", "--draft-k-max", optarg, 1, SW_MAX_DRAFT,
                            &o.draft_k_max);
            break;
        case O_DPMIN: {
            char *end;
            errno = 0;
            double v = strtod(optarg, &end);
            if (errno || end == optarg || *end || !(v >= 0 && v <= 1)) {
                fprintf(stderr, "shardwire-node: --draft-p-min '%s' is not a number in [0, 1]\n",
                        optarg);
                rc = -1;
            }
            o.draft_p_min = (float)v;
            break;
        }
        case O_DTHREADS:
            rc = sw_arg_int("shardwire-node", "--draft-threads", optarg, 1, 512, &o.draft_threads);
            break;
        case O_BACKEND:
            o.backend = optarg;
            break;
        case O_DBACKEND:
            o.draft_backend = optarg;
            break;
        case O_MAXQ:
            rc = sw_arg_int("shardwire-node", "--max-queue", optarg, 0, SW_WIRE_MAX_QUEUE,
                            &o.max_queue);
            break;
        case O_QPC:
            rc = sw_arg_int("shardwire-node", "--max-queue-per-client", optarg, 0,
                            SW_WIRE_MAX_QUEUE, &o.max_queue_per_client);
            break;
        case O_SPC:
            rc = sw_arg_int("shardwire-node", "--max-sessions-per-client", optarg, 0, 4096,
                            &o.max_sessions_per_client);
            break;
        case O_MAXROWS:
            rc = sw_arg_int("shardwire-node", "--max-batch-rows", optarg, 1, 65536,
                            &o.max_batch_rows);
            break;
        case O_KVMIB:
            rc = sw_arg_int("shardwire-node", "--kv-mib", optarg, 1, 1 << 24, &kv_mib);
            break;
        case O_HELP:
            s_usage(stdout);
            return 0;
        default:
            s_usage(stderr);
            return 2;
        }
        if (rc)
            return 2;
    }
    if (optind < argc) {
        fprintf(stderr, "shardwire-node: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (!o.model || o.layer_begin < 0 || !o.relay || !o.name) {
        fprintf(stderr, "shardwire-node: --model, --layers, --relay and --name are required "
                        "(see --help)\n");
        return 2;
    }
    if (!sw_wire_name_ok(o.name, strlen(o.name))) {
        fprintf(stderr, "shardwire-node: --name '%s' must be 1-63 characters of [A-Za-z0-9._-]\n",
                o.name);
        return 2;
    }
    if (o.draft_mode && (!strcmp(o.draft_mode, "model") || !strcmp(o.draft_mode, "mix")) &&
        !o.draft_model) {
        fprintf(stderr, "shardwire-node: --draft %s needs --draft-model\n", o.draft_mode);
        return 2;
    }
    o.idle_timeout_ms = idle_s * 1000;
    o.kv_bytes = kv_mib > 0 ? (int64_t)kv_mib << 20 : 0; /* 0: node_run sizes it */
    o.recover_timeout_ms = recover_s * 1000;
    o.connect_timeout_ms = connect_s > 0 ? connect_s * 1000 : -1;
    char err[512];
    sargs.role = o.layer_begin == 0 ? SW_SEC_HEAD : SW_SEC_STAGE;
    if (sw_sec_load(&sargs, o.relay, &sec, err, sizeof err) != 0) {
        fprintf(stderr, "shardwire-node: %s\n", err);
        return 2;
    }
    o.sec = &sec;
    struct sigaction sa = {0};
    sa.sa_handler = s_on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    /* hf:ORG/NAME/FILE: fetched into the Hugging Face cache first (resumable) */
    static char model_path[PATH_MAX], draft_path[PATH_MAX];
    char herr[1024];
    if (sw_hub_model_arg(o.model, &s_stop, model_path, sizeof model_path, herr, sizeof herr) != 0 ||
        (o.draft_model && sw_hub_model_arg(o.draft_model, &s_stop, draft_path, sizeof draft_path,
                                           herr, sizeof herr) != 0)) {
        fprintf(stderr, "shardwire-node: %s\n", herr);
        sw_sec_wipe(&sec);
        return s_stop ? 0 : 1;
    }
    o.model = model_path;
    if (o.draft_model)
        o.draft_model = draft_path;
    int rc_run = node_run(&o, &s_stop);
    sw_sec_wipe(&sec);
    return rc_run;
}
