/*
 * main.c - shardwire-node: parses the command line and runs the node.
 *
 *   shardwire-node -m M.gguf --layers A:B --relay HOST:PORT --name NAME SECURITY
 *                  [node options] [model, relay and drafting options of args.h]
 *
 * The --draft* flags matter on the head (layers from 0) only: they set the
 * drafting a request gets when its DraftParams leave it to the head.
 */
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "head.h"
#include "hub.h"
#include "keys.h"
#include "node.h"
#include "sched.h"
#include "wire.h"

static volatile sig_atomic_t s_stop;

static void s_on_signal(int sig)
{
    (void)sig;
    s_stop = 1;
}

enum {
    O_NAME = SW_OPT_OWN,
    O_LAYERS,
    O_MODEL_NAME,
    O_MAXS,
    O_MAXQ,
    O_QPC,
    O_SPC,
    O_MAXROWS,
    O_KVMIB,
    O_KVTYPE,
    O_DTYPE,
    O_IDLE,
    O_ROUND,
    O_RECOVER,
    O_HB,
    O_PREFIX,
    O_DLOAD,
    O_DGATE,
    O_DBATCH,
    O_MEM,
    O_AUTO_NODES,
    O_SPOT,
    O_FLIP,
    O_FAKE,
    O_PIECES,
    O_PDTYPE,
    O_SLOW,
    O_SLOWX,
    O_SKEW,
    O_PUBPREFIX,
    O_LISTEN,
    O_LISTEN_PUB,
    O_ALLOW,
    O_DIAL,
};

static const sw_opt_t s_opts[] = {
    {"name", O_NAME, "NAME", "this node's name on the relay (1-63 of [A-Za-z0-9._-])"},
    {"layers", O_LAYERS, "A:B|auto",
     "serve layers [A, B) (B may be 'end'); from 0 = the head;\nauto: probe this machine, "
     "announce it and serve the\nrange the head's plan assigns (docs/deploy.md)"},
    {"mem-mib", O_MEM, "M",
     "placement: memory for weights and KV cache that the plan\nmay use (default: half the "
     "memory available at start:\nthe GPUs' free memory on a GPU backend, else the host's)"},
    {"auto-nodes", O_AUTO_NODES, "N",
     "head: place the --layers auto nodes (plan the layers\nafter the head's over them); the "
     "first plan waits\nfor N of them (default 0: no placement)"},
    {"model-name", O_MODEL_NAME, "NAME",
     "the model's name for clients and the HTTP API\n(default: the file name without .gguf)"},
    {"max-sessions", O_MAXS, "N",
     "sessions held at once; on the head, requests served at\nonce (default " //
     SW_STR(SW_NODE_DEFAULT_MAX_SESSIONS) ")"},
    {"max-queue", O_MAXQ, "N",
     "head: requests waiting for a session beyond that; more\nare refused as busy (default " //
     SW_STR(SW_NODE_DEFAULT_MAX_QUEUE) ")"},
    {"max-queue-per-client", O_QPC, "N",
     "head: of those, from one client at most (default " //
     SW_STR(SW_NODE_DEFAULT_MAX_QUEUE_PER_CLIENT) ",\n0 = any)"},
    {"max-sessions-per-client", O_SPC, "N",
     "head: sessions one client key runs at once; its other\nrequests wait while others' pass "
     "(default: all but a\nquarter of --max-sessions, at least one kept for\nothers (with 1: "
     "that one), and only while another\nkey's request waits: a key alone may take every\n"
     "session; given: a hard cap; 0 = any)"},
    {"prefill-pieces", O_PIECES, "N",
     "head: long prompts go in pieces of about N one-row\nforwards' time while alone, each "
     "stage interleaving\nthem fairly with other sessions' rounds: a request\nthat arrives "
     "meanwhile waits about that long at\neach stage, the prompt loses about 1/N of its speed\n"
     "(while others run: " SW_STR(NODE_SCHED_PIECE_SHARED) "; default " SW_STR(
         NODE_SCHED_PIECE_ALONE) ";\n0: chunks sized by bytes)"},
    {"max-batch-rows", O_MAXROWS, "N",
     "rows run through the layers in one batch, summed over\nsessions (default " //
     SW_STR(SW_NODE_DEFAULT_MAX_BATCH_ROWS) ")"},
    {"kv-mib", O_KVMIB, "M",
     "memory for the sessions' KV caches, which grow as they\nare used (" SW_STR(
         SW_KV_BLOCK) " positions, then 1.5x/2x\nsteps); a session whose prompt does not fit waits "
                      "(head)\nor is refused, one that cannot grow ends with an error\n(default: "
                      "what --max-sessions sessions of --ctx\npositions take, at most half the "
                      "memory available at\nstart: the GPUs' free memory when the caches live "
                      "there,\nelse the host's; the node says at start how many full\nsessions "
                      "fit)"},
    {"kv-type", O_KVTYPE, "T",
     "KV cache type: f16 (default; llama.cpp's) or q8_0 (half\nthe memory, CPU only; not "
     "bit-exact with f16,\nllama.cpp's -ctk q8_0 -ctv q8_0 arithmetic)"},
    {"dtype", O_DTYPE, "T", "hidden states sent as f32, f16 or bf16 (default f32)"},
    {"prefill-dtype", O_PDTYPE, "T",
     "a prompt's hidden states sent as f32, f16 or bf16\n(default: --dtype); f16 and bf16 halve "
     "a long prompt's\nbytes but are not bit-exact (docs/benchmarks.md)"},
    {"idle-timeout-s", O_IDLE, "S",
     "free a session unused for S seconds (default " SW_STR(SW_NODE_DEFAULT_IDLE_TIMEOUT_S) ")"},
    {"round-timeout-ms", O_ROUND, "MS",
     "head: recover a round with no verdict after MS\n(default " //
     SW_STR(SW_NODE_DEFAULT_ROUND_TIMEOUT_MS) ")"},
    {"recover-timeout-s", O_RECOVER, "S",
     "head: wait up to S s for a failed stage to come back\n(default " //
     SW_STR(SW_NODE_DEFAULT_RECOVER_TIMEOUT_S) "; 0 = fail at once)"},
    {"heartbeat-ms", O_HB, "MS",
     "this node's heartbeat to the relay, in ms; the relay is\ntaken as gone after " //
     SW_STR(SW_PEER_SILENT_IVLS) " intervals without data from it\n(default "        //
     SW_STR(SW_NODE_DEFAULT_HEARTBEAT_MS) ")"},
    {"listen", O_LISTEN, "HOST:PORT",
     "accept direct links from the stages next to this one\nthere (CURVE with --key, the keys "
     "--allow lists); the\nrelay stays the fallback (docs/deploy.md)"},
    {"listen-public", O_LISTEN_PUB, "HOST:PORT",
     "the address other nodes reach --listen at, when it is\nnot the one bound (0.0.0.0, a "
     "forwarded port)"},
    {"allow", O_ALLOW, "FILE",
     "with --listen: the allow-list dialling keys are checked\nagainst (the relay's allow.txt)"},
    {"direct-dial-ms", O_DIAL, "MS",
     "a direct dial not through its handshake by then keeps\nthe relay path (default " SW_STR(
         SW_DIRECT_DIAL_MS) ")"},
    {"prefix-cache", O_PREFIX, "on|off",
     "keep the KV of prompt prefixes for later requests that\nstart the same way, within --kv-mib "
     "(default on)"},
    {"public-prefix", O_PUBPREFIX, "FILE",
     "head: the start of prompts (a system prompt, as text)\nthat every tenant may reuse from the "
     "prefix cache;\nother prefixes are reused only by whoever sent them\n(docs/security.md; at "
     "most " SW_STR(HEAD_PUBLIC_PREFIX_MAX) " bytes)"},
    {"draft-load", O_DLOAD, "on|off",
     "head: the adaptive K and trees shrink as other sessions\nfill the batches (default on)"},
    {"draft-gate", O_DGATE, "on|off",
     "head: with several sessions, measure rounds with and\nwithout drafts and keep the faster "
     "(default on;\noff with --draft-load off)"},
    {"draft-batch", O_DBATCH, "on|off",
     "head: every session's draft step in one forward of the\ndraft model (default on)"},
    {"spot-check", O_SPOT, "P",
     "head: check this share of sessions, each whole, against\nshadow routes of other nodes "
     "serving the same layers\n(0..1, default 0; docs/security.md)"},
    {"test-flip-bit", O_FLIP, "N",
     "FOR TESTS ONLY: a dishonest stage that flips one bit in\nevery Nth hidden-state payload it "
     "passes on (default 0 = off)"},
    {"test-fake-digest", O_FAKE, "N",
     "FOR TESTS ONLY: a dishonest tail that reports a made-up\ndigest of what it received in every "
     "Nth verdict (default 0 = off)"},
    {"test-slow-ms", O_SLOW, "MS",
     "FOR TESTS ONLY: a slow stage: every batch it runs holds\nits event loop MS ms longer, as a "
     "slow computation\nwould (default 0 = off)"},
    {"test-slow-x", O_SLOWX, "X",
     "FOR TESTS ONLY: an auto node slower than it claimed: every\nbatch holds its event loop X "
     "times what its probe\nclaimed for it (default 0 = off)"},
    {"test-clock-skew-ms", O_SKEW, "MS",
     "FOR TESTS ONLY: seal and open messages as if this\nmachine's clock ran MS ms ahead "
     "(negative: behind;\ndefault 0)"},
};

static const sw_opt_group_t s_groups[] = {
    SW_ARGS_GROUP(NULL, s_opts),
    SW_ARGS_GROUP_MODEL,
    SW_ARGS_GROUP_RELAY,
    SW_ARGS_SHARED("speculative decoding (the head's defaults for requests that leave it to it)",
                   DRAFT),
    SW_ARGS_GROUP_SECURITY,
};

static const sw_args_spec_t s_spec = {
    .prog = "shardwire-node",
    .usage = "-m M.gguf --layers A:B --relay HOST:PORT --name NAME SECURITY [options]",
    .about = "  Serves one layer range of a model through the relay: the node whose range\n"
             "  starts at 0 is the head (sessions, drafting), the one that ends at the last\n"
             "  layer the tail (verifier); docs/deploy.md.\n",
    .groups = s_groups,
    .n_groups = SW_ARGS_COUNT(s_groups),
};

/* What the command line gives beyond node_opts_t: the option groups of
 * args.h and the flags whose units node_opts_t does not take as they are. */
typedef struct s_cli {
    sw_sec_args_t sargs;   // SECURITY
    sw_args_model_t mo;    // -m, --backend, --threads, --ctx
    sw_args_relay_t ra;    // --relay, --connect-timeout-s
    sw_args_draft_t dr;    // --draft*
    int kv_mib;            // --kv-mib (-1 = unset)
    int idle_s, recover_s; // --idle-timeout-s, --recover-timeout-s
} s_cli_t;

/* One of the test-only options (faults planted on purpose): 0, or nonzero
 * after an error line. */
static int s_opt_test(node_opts_t *o, int c, const char *v)
{
    const char *P = s_spec.prog;
    switch (c) {
    case O_FLIP:
        return sw_arg_int(P, "--test-flip-bit", v, 0, 1 << 30, &o->test_flip_bit);
    case O_FAKE:
        return sw_arg_int(P, "--test-fake-digest", v, 0, 1 << 30, &o->test_fake_digest);
    case O_SLOW:
        return sw_arg_int(P, "--test-slow-ms", v, 0, 600000, &o->test_slow_ms);
    case O_SLOWX:
        return sw_arg_double(P, "--test-slow-x", v, 0, 1000, &o->test_slow_x);
    case O_SKEW:
        return sw_arg_int(P, "--test-clock-skew-ms", v, -600000, 600000, &o->test_skew_ms);
    default:
        return -1;
    }
}

/* One option of this program (not of a shared group): 0, or nonzero after
 * an error line. */
static int s_opt(node_opts_t *o, s_cli_t *cli, int c, const char *v)
{
    const char *P = s_spec.prog;
    switch (c) {
    case O_LAYERS:
        if (!strcmp(v, "auto")) {
            o->layer_auto = 1;
            o->layer_begin = o->layer_end = 0; /* until the head assigns a range */
            return 0;
        }
        o->layer_auto = 0;
        return sw_arg_layers(P, "--layers", v, &o->layer_begin, &o->layer_end);
    case O_MEM:
        return sw_arg_int(P, "--mem-mib", v, 1, (int)SW_WIRE_MAX_MEM_MIB, &o->mem_mib);
    case O_AUTO_NODES:
        return sw_arg_int(P, "--auto-nodes", v, 0, 64, &o->auto_nodes);
    case O_MODEL_NAME:
        o->model_name = v;
        if (!sw_wire_model_name_ok(v)) {
            fprintf(stderr,
                    "shardwire-node: --model-name '%s' must be up to 63 characters of "
                    "[A-Za-z0-9._:/-]\n",
                    v);
            return -1;
        }
        return 0;
    case O_NAME:
        o->name = v;
        return 0;
    case O_MAXS:
        return sw_arg_int(P, "--max-sessions", v, 1, 4096, &o->max_sessions);
    case O_IDLE:
        return sw_arg_int(P, "--idle-timeout-s", v, 1, 86400 * 7, &cli->idle_s);
    case O_ROUND:
        return sw_arg_int(P, "--round-timeout-ms", v, 100, 3600000, &o->round_timeout_ms);
    case O_RECOVER:
        return sw_arg_int(P, "--recover-timeout-s", v, 0, 86400, &cli->recover_s);
    case O_HB:
        return sw_arg_int(P, "--heartbeat-ms", v, 50, 60000, &o->heartbeat_ms);
    case O_LISTEN:
    case O_LISTEN_PUB: {
        char *to = c == O_LISTEN ? o->listen : o->listen_public;
        return sw_arg_endpoint(P, c == O_LISTEN ? "--listen" : "--listen-public", v, c == O_LISTEN,
                               to, SW_ARGS_ENDPOINT_MAX);
    }
    case O_ALLOW:
        o->allow_file = v;
        return 0;
    case O_DIAL:
        return sw_arg_int(P, "--direct-dial-ms", v, 50, 600000, &o->direct_dial_ms);
    case O_PUBPREFIX:
        o->public_prefix = v;
        return 0;
    case O_PREFIX:
    case O_DLOAD:
    case O_DGATE:
    case O_DBATCH: {
        const char *flag = c == O_PREFIX  ? "--prefix-cache"
                           : c == O_DLOAD ? "--draft-load"
                           : c == O_DGATE ? "--draft-gate"
                                          : "--draft-batch";
        int *to = c == O_PREFIX  ? &o->prefix_cache
                  : c == O_DLOAD ? &o->draft_load
                  : c == O_DGATE ? &o->draft_gate
                                 : &o->draft_batch;
        if (strcmp(v, "on") != 0 && strcmp(v, "off") != 0) {
            fprintf(stderr, "shardwire-node: %s '%s' must be on or off\n", flag, v);
            return -1;
        }
        *to = !strcmp(v, "on");
        return 0;
    }
    case O_DTYPE:
    case O_PDTYPE: {
        sw_dtype_t *to = c == O_DTYPE ? &o->dtype : &o->prefill_dtype;
        if (!strcmp(v, "f32"))
            *to = SW_DTYPE_F32;
        else if (!strcmp(v, "f16"))
            *to = SW_DTYPE_F16;
        else if (!strcmp(v, "bf16"))
            *to = SW_DTYPE_BF16;
        else {
            fprintf(stderr, "shardwire-node: %s '%s' must be f32, f16 or bf16\n",
                    c == O_DTYPE ? "--dtype" : "--prefill-dtype", v);
            return -1;
        }
        return 0;
    }
    case O_MAXQ:
        return sw_arg_int(P, "--max-queue", v, 0, SW_WIRE_MAX_QUEUE, &o->max_queue);
    case O_QPC:
        return sw_arg_int(P, "--max-queue-per-client", v, 0, SW_WIRE_MAX_QUEUE,
                          &o->max_queue_per_client);
    case O_SPC:
        return sw_arg_int(P, "--max-sessions-per-client", v, 0, 4096, &o->max_sessions_per_client);
    case O_PIECES:
        return sw_arg_int(P, "--prefill-pieces", v, 0, 64, &o->prefill_pieces);
    case O_MAXROWS:
        return sw_arg_int(P, "--max-batch-rows", v, 1, 65536, &o->max_batch_rows);
    case O_KVMIB:
        return sw_arg_int(P, "--kv-mib", v, 1, 1 << 24, &cli->kv_mib);
    case O_KVTYPE:
        if ((o->kv_type = sw_kv_type_parse(v)) < 0) {
            fprintf(stderr, "shardwire-node: --kv-type '%s' must be f16 or q8_0\n", v);
            return -1;
        }
        return 0;
    case O_SPOT:
        return sw_arg_double(P, "--spot-check", v, 0, 1, &o->spot_share);
    default:
        return s_opt_test(o, c, v);
    }
}

/* Reads the command line into o and cli: -1 when the program goes on, else
 * its exit code (--help, a usage error, a missing or bad required flag). */
static int s_parse(int argc, char **argv, node_opts_t *o, s_cli_t *cli)
{
    const char *P = s_spec.prog, *v;
    int c;
    sw_args_t a;
    sw_args_init(&a, &s_spec, argc, argv);
    while ((c = sw_args_next(&a, &v)) >= 0) {
        int h = sw_sec_args_opt(&cli->sargs, c, v);
        if (!h)
            h = sw_args_model_opt(P, &cli->mo, c, v);
        if (!h)
            h = sw_args_relay_opt(P, &cli->ra, c, v);
        if (!h)
            h = sw_args_draft_opt(P, &cli->dr, c, v);
        if (h < 0)
            return 2;
        if (!h && s_opt(o, cli, c, v) != 0)
            return 2;
    }
    if ((c = sw_args_finish(&a, c, 0)) >= 0)
        return c;
    if (!cli->mo.model || o->layer_begin < 0 || !cli->ra.relay[0] || !o->name)
        return sw_args_exit(sw_args_fail(&s_spec, "%s is required",
                                         !cli->mo.model       ? "--model"
                                         : o->layer_begin < 0 ? "--layers"
                                         : !cli->ra.relay[0]  ? "--relay"
                                                              : "--name"));
    if (!sw_wire_name_ok(o->name, strlen(o->name))) {
        fprintf(stderr, "shardwire-node: --name '%s' must be 1-63 characters of [A-Za-z0-9._-]\n",
                o->name);
        return 2;
    }
    if (sw_args_draft_check(&s_spec, &cli->dr) != 0)
        return 2;
    if (o->auto_nodes > 0 && (o->layer_auto || o->layer_begin != 0)) {
        fprintf(stderr, "shardwire-node: --auto-nodes is for the head (--layers 0:B)\n");
        return 2;
    }
    if (o->public_prefix && (o->layer_auto || o->layer_begin != 0)) {
        fprintf(stderr, "shardwire-node: --public-prefix is for the head (--layers 0:B)\n");
        return 2;
    }
    return -1;
}

/* The shared groups' values and the flags in other units, into o. */
static void s_apply(node_opts_t *o, const s_cli_t *cli)
{
    o->model = cli->mo.model;
    o->backend = cli->mo.backend;
    o->threads = cli->mo.threads;
    o->n_ctx = cli->mo.n_ctx;
    o->relay = cli->ra.relay;
    o->draft_model = cli->dr.model;
    o->draft_mode = cli->dr.mode;
    o->draft_k = cli->dr.k;
    o->draft_k_max = cli->dr.k_max;
    o->draft_p_min = cli->dr.p_min;
    o->draft_threads = cli->dr.threads;
    o->draft_backend = cli->dr.backend;
    o->draft_tree = cli->dr.tree;
    o->draft_ahead = cli->dr.ahead < 0 ? 1 : cli->dr.ahead;
    o->idle_timeout_ms = cli->idle_s * 1000;
    o->kv_bytes = cli->kv_mib > 0 ? (int64_t)cli->kv_mib << 20 : 0; /* 0: node_run sizes it */
    o->recover_timeout_ms = cli->recover_s * 1000;
    o->connect_timeout_ms =
        cli->ra.connect_s > 0 ? cli->ra.connect_s * 1000 : -1; /* 0, unset: no limit */
}

/* --listen's allow-list, read before the model loads so that a missing or bad file is one
 * line at once (net/direct.c reads it again when the listener opens). 0, or 2 (printed). */
static int s_check_listen(const node_opts_t *o, const sw_sec_t *sec)
{
    if (o->allow_file && !o->listen[0]) {
        fprintf(stderr, "shardwire-node: --allow is the allow-list of --listen's listener: "
                        "add --listen HOST:PORT, or leave --allow out\n");
        return 2;
    }
    if (!o->listen[0] || sec->insecure)
        return 0;
    if (!o->allow_file) {
        fprintf(stderr, "shardwire-node: --listen needs --allow FILE (the relay's allow-list, "
                        "allow.txt in the cluster folder): the listener admits the node keys "
                        "it lists\n");
        return 2;
    }
    char err[512];
    sw_allow_entry_t *list = NULL;
    int n = 0;
    if (sw_allow_load(o->allow_file, &list, &n, err, sizeof err) != 0) {
        fprintf(stderr, "shardwire-node: --allow: %s\n", err);
        return 2;
    }
    free(list);
    return 0;
}

int main(int argc, char **argv)
{
    s_cli_t cli = {
        .mo = SW_ARGS_MODEL_DEFAULT,
        .ra = SW_ARGS_RELAY_DEFAULT,
        .dr = SW_ARGS_DRAFT_DEFAULT,
        .kv_mib = -1,
        .idle_s = SW_NODE_DEFAULT_IDLE_TIMEOUT_S,
        .recover_s = SW_NODE_DEFAULT_RECOVER_TIMEOUT_S,
    };
    static sw_sec_t sec; /* lives until the process exits */
    node_opts_t o = {
        .layer_begin = -1,
        .layer_end = -1,
        .max_sessions = SW_NODE_DEFAULT_MAX_SESSIONS,
        .round_timeout_ms = SW_NODE_DEFAULT_ROUND_TIMEOUT_MS,
        .dtype = SW_DTYPE_F32,
        .prefill_dtype = (sw_dtype_t)-1,
        .heartbeat_ms = SW_NODE_DEFAULT_HEARTBEAT_MS,
        .max_queue = SW_NODE_DEFAULT_MAX_QUEUE,
        .max_queue_per_client = SW_NODE_DEFAULT_MAX_QUEUE_PER_CLIENT,
        .max_sessions_per_client = -1,
        .max_batch_rows = SW_NODE_DEFAULT_MAX_BATCH_ROWS,
        .prefix_cache = 1,
        .draft_load = 1,
        .draft_gate = 1,
        .draft_batch = 1,
        .prefill_pieces = NODE_SCHED_PIECE_ALONE,
    };
    const int rc = s_parse(argc, argv, &o, &cli);
    if (rc >= 0)
        return rc;
    o.sessions_per_client_hard = o.max_sessions_per_client >= 0;
    if ((int)o.prefill_dtype < 0)
        o.prefill_dtype = o.dtype;
    if (o.max_sessions_per_client < 0)
        o.max_sessions_per_client = SW_NODE_DEFAULT_SESSIONS_PER_CLIENT(o.max_sessions);
    s_apply(&o, &cli);
    char err[512];
    cli.sargs.role = o.layer_begin == 0 && !o.layer_auto ? SW_SEC_HEAD : SW_SEC_STAGE;
    if (sw_sec_load(&cli.sargs, o.relay, &sec, err, sizeof err) != 0) {
        fprintf(stderr, "shardwire-node: %s\n", err);
        return 2;
    }
    o.sec = &sec;
    if (s_check_listen(&o, &sec) != 0) {
        sw_sec_wipe(&sec);
        return 2;
    }
    struct sigaction sa = {0};
    sa.sa_handler = s_on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    /* hf:ORG/NAME/FILE: fetched into the Hugging Face cache first (resumable) */
    static char model_path[PATH_MAX], draft_path[PATH_MAX];
    char herr[1024];
    /* a hub model and a layer range: only the tensors of the range (a partial file) */
    if (sw_hub_model_arg_layers(o.model, o.layer_begin, o.layer_end, &s_stop, model_path,
                                sizeof model_path, herr, sizeof herr) != 0 ||
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
