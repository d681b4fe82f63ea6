/*
 * generate.c - `shardwire generate`: the whole model in this process.
 *
 *   shardwire generate --model M.gguf -p "text" -n N [--temp T --seed S --top-k K
 *                      --top-p P --min-p P --repeat-penalty R] [--chat] [--threads N]
 *                      [--ctx N] [--json] [--backend cpu|cuda[:N]|cuda:0,1]
 *                      [--draft-model D.gguf] [--draft model|ngram|mix|none]
 *                      [--draft-k K|auto] [--draft-k-max N] [--draft-p-min P]
 *                      [--draft-threads N] [--draft-backend cpu|cuda[:N]]
 *
 * Speculative decoding: --draft-model loads a draft model with the target's
 * vocabulary (refused otherwise), --draft ngram uses prompt lookup with no
 * model, --draft mix prompt lookup first and the model when it finds no
 * match. --draft-k fixes K (0 = off); auto (the default once a proposer is
 * chosen) picks K per round up to --draft-k-max from the measured acceptance
 * rate and times. The output is the same tokens as without speculation
 * (greedy) or the same distribution (sampling).
 *
 * Text streams to stdout as it is generated; with --json one JSON object is
 * printed at the end instead.
 */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "args.h"
#include "backend.h"
#include "chat.h"
#include "cmds.h"
#include "decode.h"
#include "drafter.h"
#include "hub.h"
#include "log.h"
#include "model.h"
#include "tokenizer.h"

struct s_opts {
    const char *model;
    const char *prompt;
    int n_predict;
    const char *backend; // --backend (NULL = auto)
    int threads;
    int n_ctx;
    int chat;
    int json;
    sw_sampling_t sampling;
    const char *draft_model;   // draft GGUF or NULL
    const char *draft_mode;    // --draft or NULL (= model when --draft-model is given)
    int draft_k;               // fixed K, DRAFT_K_AUTO, or 0 = off
    int draft_k_max;           // adaptive ceiling
    float draft_p_min;         // confidence stop
    int draft_threads;         // draft model threads (0 = as --threads)
    const char *draft_backend; // draft model backend (NULL = the first device of --backend)
};

static void s_usage(FILE *f)
{
    fprintf(f, "usage: shardwire generate --model M.gguf -p TEXT [options]\n"
               "  -m, --model PATH        GGUF model file, or hf:ORG/NAME/FILE (Hugging Face hub)\n"
               "  -p, --prompt TEXT       prompt\n"
               "  -n, --n-predict N       tokens to generate (default 128)\n"
               "      --temp T            temperature, 0 = greedy (default 0)\n"
               "      --seed S            sampling seed (default 0x5eed)\n"
               "      --top-k K           top-k (default 40, 0 = off)\n"
               "      --top-p P           top-p (default 0.95, 1 = off)\n"
               "      --min-p P           min-p (default 0.05, 0 = off)\n"
               "      --repeat-penalty R  repetition penalty (default 1 = off)\n"
               "      --chat              wrap the prompt in the model's chat template\n"
               "  -b, --backend B         cpu, cuda, cuda:N, or cuda:0,1 to split the layers over\n"
               "                          two GPUs (default: cuda when a GPU is found, else cpu)\n"
               "  -t, --threads N         CPU compute threads (default: all cores)\n"
               "  -c, --ctx N             context size in tokens (default 2048)\n"
               "      --json              print one JSON object at the end instead of streaming\n"
               "      --draft-model PATH  draft model GGUF (same vocabulary as the model)\n"
               "      --draft MODE        model, ngram (prompt lookup), mix or none\n"
               "      --draft-k K         drafts per round, 0 = off, auto = adaptive (default)\n"
               "      --draft-k-max N     largest adaptive K (default 16)\n"
               "      --draft-p-min P     stop drafting below this draft probability (default 0)\n"
               "      --draft-threads N   draft model threads (default: as --threads)\n"
               "      --draft-backend B   where the draft model runs, e.g. cuda:1 (default: the\n"
               "                          first device of --backend)\n");
}

static int s_parse(int argc, char **argv, struct s_opts *o)
{
    enum {
        O_TEMP = 256,
        O_SEED,
        O_TOPK,
        O_TOPP,
        O_MINP,
        O_REP,
        O_CHAT,
        O_JSON,
        O_DMODEL,
        O_DMODE,
        O_DK,
        O_DKMAX,
        O_DPMIN,
        O_DTHREADS,
        O_DBACKEND
    };
    static const struct option longs[] = {{"model", required_argument, 0, 'm'},
                                          {"prompt", required_argument, 0, 'p'},
                                          {"n-predict", required_argument, 0, 'n'},
                                          {"threads", required_argument, 0, 't'},
                                          {"ctx", required_argument, 0, 'c'},
                                          {"temp", required_argument, 0, O_TEMP},
                                          {"seed", required_argument, 0, O_SEED},
                                          {"top-k", required_argument, 0, O_TOPK},
                                          {"top-p", required_argument, 0, O_TOPP},
                                          {"min-p", required_argument, 0, O_MINP},
                                          {"repeat-penalty", required_argument, 0, O_REP},
                                          {"chat", no_argument, 0, O_CHAT},
                                          {"json", no_argument, 0, O_JSON},
                                          {"draft-model", required_argument, 0, O_DMODEL},
                                          {"draft", required_argument, 0, O_DMODE},
                                          {"draft-k", required_argument, 0, O_DK},
                                          {"draft-k-max", required_argument, 0, O_DKMAX},
                                          {"draft-p-min", required_argument, 0, O_DPMIN},
                                          {"draft-threads", required_argument, 0, O_DTHREADS},
                                          {"backend", required_argument, 0, 'b'},
                                          {"draft-backend", required_argument, 0, O_DBACKEND},
                                          {"help", no_argument, 0, 'h'},
                                          {0, 0, 0, 0}};
    memset(o, 0, sizeof *o);
    o->n_predict = 128;
    o->n_ctx = 2048;
    o->sampling = sw_sampling_default();
    o->sampling.temp = 0.0f;
    o->draft_k = DRAFT_K_AUTO;
    o->draft_k_max = DRAFT_K_MAX_AUTO;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "m:p:n:t:c:b:h", longs, NULL)) != -1) {
        int rc = 0;
        switch (c) {
        case 'm':
            o->model = optarg;
            break;
        case 'p':
            o->prompt = optarg;
            break;
        case 'n':
            rc = sw_arg_int("shardwire generate", "--n-predict", optarg, 0, 1 << 20, &o->n_predict);
            break;
        case 't':
            rc = sw_arg_int("shardwire generate", "--threads", optarg, 1, 512, &o->threads);
            break;
        case 'c':
            rc = sw_arg_int("shardwire generate", "--ctx", optarg, 16, 1 << 20, &o->n_ctx);
            break;
        case O_TEMP:
            rc = sw_arg_float("shardwire generate", "--temp", optarg, 0, 100, &o->sampling.temp);
            break;
        case O_SEED: {
            char *end;
            errno = 0;
            unsigned long long v = strtoull(optarg, &end, 0);
            if (errno || end == optarg || *end) {
                fprintf(stderr, "shardwire generate: --seed '%s' is not an integer\n", optarg);
                rc = -1;
            }
            o->sampling.seed = v;
            break;
        }
        case O_TOPK:
            rc =
                sw_arg_int("shardwire generate", "--top-k", optarg, 0, INT_MAX, &o->sampling.top_k);
            break;
        case O_TOPP:
            rc = sw_arg_float("shardwire generate", "--top-p", optarg, 0, 1, &o->sampling.top_p);
            break;
        case O_MINP:
            rc = sw_arg_float("shardwire generate", "--min-p", optarg, 0, 1, &o->sampling.min_p);
            break;
        case O_REP:
            rc = sw_arg_float("shardwire generate", "--repeat-penalty", optarg, 0.01, 100,
                              &o->sampling.rep_penalty);
            break;
        case O_CHAT:
            o->chat = 1;
            break;
        case O_JSON:
            o->json = 1;
            break;
        case O_DMODEL:
            o->draft_model = optarg;
            break;
        case O_DMODE:
            o->draft_mode = optarg;
            break;
        case O_DK:
            if (!strcmp(optarg, "auto"))
                o->draft_k = DRAFT_K_AUTO;
            else
                rc = sw_arg_int("shardwire generate", "--draft-k", optarg, 0, SW_MAX_DRAFT,
                                &o->draft_k);
            break;
        case O_DKMAX:
            rc = sw_arg_int("shardwire generate", "--draft-k-max", optarg, 1, SW_MAX_DRAFT,
                            &o->draft_k_max);
            break;
        case O_DPMIN:
            rc = sw_arg_float("shardwire generate", "--draft-p-min", optarg, 0, 1, &o->draft_p_min);
            break;
        case O_DTHREADS:
            rc = sw_arg_int("shardwire generate", "--draft-threads", optarg, 1, 512,
                            &o->draft_threads);
            break;
        case 'b':
            o->backend = optarg;
            break;
        case O_DBACKEND:
            o->draft_backend = optarg;
            break;
        case 'h':
            s_usage(stdout);
            exit(0);
        default:
            s_usage(stderr);
            return -1;
        }
        if (rc)
            return -1;
    }
    if (optind < argc) {
        fprintf(stderr, "shardwire generate: unexpected argument '%s'\n", argv[optind]);
        return -1;
    }
    if (!o->model || !o->prompt) {
        fprintf(stderr, "shardwire generate: --model and --prompt are required (see --help)\n");
        return -1;
    }
    if (sw_sampling_check(&o->sampling) != 0)
        return -1;
    enum draft_mode dm;
    if (o->draft_mode && draft_mode_parse(o->draft_mode, &dm) != 0) {
        fprintf(stderr, "shardwire generate: --draft '%s' must be model, ngram, mix or none\n",
                o->draft_mode);
        return -1;
    }
    if (o->draft_mode && (dm == DRAFT_MODE_MODEL || dm == DRAFT_MODE_MIX) && !o->draft_model) {
        fprintf(stderr, "shardwire generate: --draft %s needs --draft-model\n", o->draft_mode);
        return -1;
    }
    return 0;
}

static void s_progress(uint64_t done, uint64_t total, void *ctx)
{
    (void)ctx;
    fprintf(stderr, "\rloading weights %3d%%", total ? (int)(done * 100 / total) : 100);
    if (done >= total)
        fprintf(stderr, "\n");
}

struct s_stream {
    sw_detok_t *detok; // streaming detokenizer
    int json;          // 1 = collect only
    char *text;        // collected text
    size_t len, cap;   //
};

static int s_emit(struct s_stream *s, const char *bytes, size_t n)
{
    if (s->len + n + 1 > s->cap) {
        size_t cap = (s->cap ? s->cap * 2 : 4096) + n;
        char *t = realloc(s->text, cap);
        if (!t)
            return -1;
        s->text = t;
        s->cap = cap;
    }
    memcpy(s->text + s->len, bytes, n);
    s->len += n;
    s->text[s->len] = 0;
    if (!s->json && n) {
        fwrite(bytes, 1, n, stdout);
        fflush(stdout);
    }
    return 0;
}

static int s_on_tokens(void *ctx, const int32_t *tokens, int n)
{
    struct s_stream *s = ctx;
    for (int i = 0; i < n; i++) {
        const char *text;
        size_t len;
        if (sw_detok_push(s->detok, tokens[i], &text, &len) != 0 || s_emit(s, text, len) != 0)
            return 1;
    }
    return 0;
}

static int s_is_eog(void *ctx, int32_t token)
{
    return sw_tokenizer_is_eog((const sw_tokenizer_t *)ctx, token);
}

int cmd_generate(int argc, char **argv)
{
    struct s_opts o;
    if (s_parse(argc, argv, &o) != 0)
        return 2;
    char err[1024] = "";
    static char model_path[PATH_MAX], draft_path[PATH_MAX];
    if (sw_hub_model_arg(o.model, NULL, model_path, sizeof model_path, err, sizeof err) != 0 ||
        (o.draft_model &&
         sw_hub_model_arg(o.draft_model, NULL, draft_path, sizeof draft_path, err, sizeof err))) {
        fprintf(stderr, "shardwire generate: %s\n", err);
        return 1;
    }
    o.model = model_path;
    if (o.draft_model)
        o.draft_model = draft_path;
    int rc = 1;
    sw_backend_t *be = sw_backend_new(o.backend, o.threads, err, sizeof err);
    sw_model_t *m = NULL;
    sw_tokenizer_t *tok = NULL;
    sw_local_target_t *lt = NULL;
    draft_model_t *dmodel = NULL;
    draft_t *drafter = NULL;
    int32_t *prompt = NULL, *out = NULL;
    char *text = NULL;
    struct s_stream st = {0};
    if (!be) {
        fprintf(stderr, "shardwire generate: --backend: %s\n", err);
        goto done;
    }
    m = sw_model_load(o.model, 0, -1, be, err, sizeof err);
    if (!m) {
        fprintf(stderr, "shardwire generate: %s: %s\n", o.model, err);
        goto done;
    }
    sw_model_prefault(m, isatty(STDERR_FILENO) ? s_progress : NULL, NULL);
    tok = sw_tokenizer_from_gguf(sw_model_gguf(m), err, sizeof err);
    if (!tok) {
        fprintf(stderr, "shardwire generate: %s: %s\n", o.model, err);
        goto done;
    }
    const char *input = o.prompt;
    if (o.chat) {
        sw_chat_msg_t msg = {.role = "user", .content = o.prompt};
        text = sw_chat_format_alloc(sw_model_gguf(m), &msg, 1, 1);
        if (!text) {
            fprintf(stderr, "shardwire generate: --chat: the model has no usable chat template\n");
            goto done;
        }
        input = text;
    }
    int n_prompt = 0;
    prompt = sw_tokenize_alloc(tok, input, strlen(input), 1, o.chat, &n_prompt);
    out = malloc(((size_t)o.n_predict + 1) * sizeof *out);
    if (!prompt || !out) {
        fprintf(stderr, "shardwire generate: out of memory\n");
        goto done;
    }
    if (n_prompt + o.n_predict > o.n_ctx) {
        fprintf(stderr,
                "shardwire generate: %d prompt + %d new tokens exceed the %d-token context "
                "(use --ctx or -n)\n",
                n_prompt, o.n_predict, o.n_ctx);
        goto done;
    }
    lt = sw_local_target_new(m, o.n_ctx, &o.sampling, err, sizeof err);
    if (!lt) {
        fprintf(stderr, "shardwire generate: %s\n", err);
        goto done;
    }
    st.json = o.json;
    st.detok = sw_detok_new(tok, 0);
    if (!st.detok) {
        fprintf(stderr, "shardwire generate: out of memory\n");
        goto done;
    }
    sw_target_t target = sw_local_target(lt);
    enum draft_mode dmode = o.draft_model ? DRAFT_MODE_MODEL : DRAFT_MODE_NONE;
    if (o.draft_mode && draft_mode_parse(o.draft_mode, &dmode) != 0)
        goto done;
    if (o.draft_model && (dmode == DRAFT_MODE_MODEL || dmode == DRAFT_MODE_MIX)) {
        const char *dbe =
            o.draft_backend ? o.draft_backend : sw_backend_name(sw_backend_primary(be));
        dmodel = draft_model_new(o.draft_model, sw_model_gguf(m), dbe,
                                 o.draft_threads ? o.draft_threads : o.threads,
                                 n_prompt + o.n_predict, err, sizeof err);
        if (!dmodel) {
            fprintf(stderr, "shardwire generate: %s\n", err);
            goto done;
        }
    }
    drafter = draft_new(dmodel);
    draft_cfg_t dc = {.mode = dmode,
                      .k = o.draft_k,
                      .k_max = o.draft_k_max,
                      .p_min = o.draft_p_min,
                      .sampling = o.sampling};
    if (!drafter || draft_begin(drafter, &dc, err, sizeof err) != 0) {
        fprintf(stderr, "shardwire generate: %s\n", drafter ? err : "out of memory");
        goto done;
    }
    sw_proposer_t proposer = draft_proposer(drafter);
    sw_gen_opts_t go = {
        .k = draft_gen_k(drafter),
        .proposer = &proposer,
        .n_predict = o.n_predict,
        .stop_at_eog = 1,
        .on_tokens = s_on_tokens,
        .on_tokens_ctx = &st,
        .is_eog = s_is_eog,
        .is_eog_ctx = tok,
    };
    sw_gen_stats_t gs;
    if (sw_generate(&target, prompt, n_prompt, &go, out, &gs, err, sizeof err) != 0) {
        fprintf(stderr, "shardwire generate: %s\n", err);
        goto done;
    }
    const char *tail;
    size_t tl;
    if (sw_detok_flush(st.detok, &tail, &tl) != 0 || s_emit(&st, tail, tl) != 0)
        goto done;
    if (o.json) {
        json_t *j = json_object();
        json_t *ids = json_array();
        for (int i = 0; i < gs.n_gen; i++)
            json_array_append_new(ids, json_integer(out[i]));
        json_object_set_new(j, "text", json_stringn(st.text ? st.text : "", st.len));
        json_object_set_new(j, "tokens", ids);
        json_object_set_new(j, "n_prompt", json_integer(gs.n_prompt));
        json_object_set_new(j, "n_gen", json_integer(gs.n_gen));
        json_object_set_new(j, "ttft_ms", json_real(gs.ttft_ms));
        json_object_set_new(j, "prefill_tok_s",
                            json_real(gs.prefill_ms > 0 ? gs.n_prompt * 1e3 / gs.prefill_ms : 0));
        json_object_set_new(
            j, "decode_tok_s",
            json_real(gs.decode_ms > 0 && gs.n_gen > 1 ? (gs.n_gen - 1) * 1e3 / gs.decode_ms : 0));
        json_object_set_new(j, "rounds", json_integer(gs.rounds));
        json_object_set_new(j, "drafted", json_integer(gs.drafted));
        json_object_set_new(j, "accepted", json_integer(gs.accepted));
        json_object_set_new(j, "draft", json_string(draft_mode_name(dmode)));
        json_object_set_new(j, "backend", json_string(sw_backend_desc(be)));
        if (dmodel)
            json_object_set_new(j, "draft_backend", json_string(draft_model_backend(dmodel)));
        json_object_set_new(j, "draft_ms", json_real(gs.draft_ms));
        json_object_set_new(j, "target_ms", json_real(gs.target_ms));
        char dg[17];
        snprintf(dg, sizeof dg, "%016llx", (unsigned long long)gs.logits_digest);
        json_object_set_new(j, "logits_digest", json_string(dg));
        char *s = json_dumps(j, JSON_COMPACT | JSON_ENSURE_ASCII);
        if (s)
            printf("%s\n", s);
        free(s);
        json_decref(j);
    } else {
        printf("\n");
        fprintf(
            stderr, "prompt %d tokens in %.1f ms (%.1f tok/s), generated %d tokens, %.2f tok/s\n",
            gs.n_prompt, gs.prefill_ms, gs.prefill_ms > 0 ? gs.n_prompt * 1e3 / gs.prefill_ms : 0,
            gs.n_gen, gs.decode_ms > 0 && gs.n_gen > 1 ? (gs.n_gen - 1) * 1e3 / gs.decode_ms : 0);
    }
    rc = 0;
done:
    sw_detok_free(&st.detok);
    free(st.text);
    free(text);
    free(prompt);
    free(out);
    sw_local_target_free(&lt);
    draft_free(&drafter);
    draft_model_free(&dmodel);
    sw_tokenizer_free(&tok);
    sw_model_free(&m);
    sw_backend_free(&be);
    return rc;
}
