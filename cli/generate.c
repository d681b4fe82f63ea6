/*
 * generate.c - `shardwire generate`: the whole model in this process.
 *
 *   shardwire generate -m M.gguf -p "text" [-n N] [model, request, sampling and
 *                      drafting options of args.h]
 *
 * Speculative decoding: --draft-model loads a draft model with the target's
 * vocabulary (refused otherwise), --draft ngram uses prompt lookup with no
 * model, --draft mix prompt lookup first and the model when it finds no
 * match. --draft-k fixes K (0 = off); auto (the default once a proposer is
 * chosen) picks K per round up to --draft-k-max from the measured acceptance
 * rate and times. --draft-tree N proposes token trees of at most N drafts;
 * --draft-ahead on follows the pipeline's logic of drafting ahead (in one
 * process nothing overlaps: it only costs time, and exists so that one
 * process and a cluster draft alike). The output is the same tokens as
 * without speculation (greedy) or the same distribution (sampling).
 *
 * Text streams to stdout as it is generated, the timings follow on stderr
 * on a line of their own; with --json one JSON object is printed at the end
 * instead.
 */
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

struct s_gen_opts {
    sw_args_model_t m;    // model, backend, threads, ctx
    sw_args_request_t rq; // prompt, n_predict, chat, json
    sw_sampling_t sampling;
    sw_args_draft_t d; // speculative decoding
};

static const sw_opt_group_t s_groups[] = {
    SW_ARGS_GROUP_MODEL,
    SW_ARGS_GROUP_REQUEST,
    SW_ARGS_GROUP_SAMPLING,
    SW_ARGS_GROUP_DRAFT,
};

static const sw_args_spec_t s_spec = {
    .prog = "shardwire generate",
    .usage = "-m M.gguf -p TEXT [options]",
    .about = "  The whole model in this process; the text streams to stdout, the timings to\n"
             "  stderr. With a draft model or --draft ngram the output is the same tokens as\n"
             "  without (greedy) or the same distribution (sampling), in fewer target passes.\n",
    .groups = s_groups,
    .n_groups = SW_ARGS_COUNT(s_groups),
};

/* -1 when the options are good, else the exit code: 0 after --help / --version,
 * 2 after a usage error's line. */
static int s_gen_parse(int argc, char **argv, struct s_gen_opts *o)
{
    const char *P = s_spec.prog;
    *o = (struct s_gen_opts){.m = SW_ARGS_MODEL_DEFAULT,
                             .rq = SW_ARGS_REQUEST_DEFAULT,
                             .sampling = sw_args_sampling_default(),
                             .d = SW_ARGS_DRAFT_DEFAULT};
    sw_args_t a;
    sw_args_init(&a, &s_spec, argc, argv);
    const char *v;
    int c;
    while ((c = sw_args_next(&a, &v)) >= 0) {
        int h = sw_args_model_opt(P, &o->m, c, v);
        if (!h)
            h = sw_args_request_opt(P, &o->rq, c, v);
        if (!h)
            h = sw_args_sampling_opt(P, &o->sampling, c, v);
        if (!h)
            h = sw_args_draft_opt(P, &o->d, c, v);
        if (h <= 0)
            return 2;
    }
    if ((c = sw_args_finish(&a, c, 0)) >= 0)
        return c;
    if (!o->m.model || !o->rq.prompt)
        return sw_args_exit(
            sw_args_fail(&s_spec, "%s is required", !o->m.model ? "--model" : "--prompt"));
    if (sw_sampling_check(&o->sampling) != 0)
        return 2;
    return sw_args_draft_check(&s_spec, &o->d) ? 2 : -1;
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

/* What one generation holds; s_gen_free frees it all. */
struct s_gen {
    sw_backend_t *be;      // the backend (--backend)
    sw_model_t *m;         // the whole model on it
    sw_tokenizer_t *tok;   // its tokenizer
    sw_local_target_t *lt; // the target the decoding loop verifies with
    draft_model_t *dmodel; // the draft model, or NULL
    draft_t *drafter;      // the proposer
    enum draft_mode dmode; // which one
    char *chat;            // the prompt in the chat template (--chat), or NULL
    int32_t *prompt;       // (n_prompt) the prompt's tokens
    int n_prompt;          //
    int n_ctx;             // the context: --ctx, else the model's trained one
    int32_t *out;          // (n_predict + 1) the generated tokens
    struct s_stream st;    // the text as it streams
};

static void s_gen_free(struct s_gen *g)
{
    sw_detok_free(&g->st.detok);
    free(g->st.text);
    free(g->chat);
    free(g->prompt);
    free(g->out);
    sw_local_target_free(&g->lt);
    draft_free(&g->drafter);
    draft_model_free(&g->dmodel);
    sw_tokenizer_free(&g->tok);
    sw_model_free(&g->m);
    sw_backend_free(&g->be);
}

/* The model paths of o as local files (hf:... downloaded into the cache): 0, or -1 after one
 * line. */
static int s_gen_paths(struct s_gen_opts *o)
{
    char err[1024] = "";
    static char model_path[PATH_MAX], draft_path[PATH_MAX];
    if (sw_hub_model_arg(o->m.model, NULL, model_path, sizeof model_path, err, sizeof err) != 0 ||
        (o->d.model &&
         sw_hub_model_arg(o->d.model, NULL, draft_path, sizeof draft_path, err, sizeof err))) {
        fprintf(stderr, "shardwire generate: %s\n", err);
        return -1;
    }
    o->m.model = model_path;
    if (o->d.model)
        o->d.model = draft_path;
    return 0;
}

/* The backend, the model (its pages read in) and its tokenizer: 0, or -1 after one line. */
static int s_gen_load(const struct s_gen_opts *o, struct s_gen *g)
{
    char err[1024] = "";
    g->be = sw_backend_new(o->m.backend, o->m.threads, err, sizeof err);
    if (!g->be) {
        fprintf(stderr, "shardwire generate: --backend: %s\n", err);
        return -1;
    }
    g->m = sw_model_load(o->m.model, 0, -1, g->be, err, sizeof err);
    if (!g->m) {
        fprintf(stderr, "shardwire generate: %s: %s\n", o->m.model, err);
        return -1;
    }
    sw_model_prefault(g->m, isatty(STDERR_FILENO) ? s_progress : NULL, NULL);
    g->tok = sw_tokenizer_from_gguf(sw_model_gguf(g->m), err, sizeof err);
    if (!g->tok) {
        fprintf(stderr, "shardwire generate: %s: %s\n", o->m.model, err);
        return -1;
    }
    return 0;
}

/* The prompt's tokens (in the chat template with --chat) and room for the output, checked
 * against the context: 0, or -1 after one line. */
static int s_gen_prompt(const struct s_gen_opts *o, struct s_gen *g)
{
    const char *input = o->rq.prompt;
    if (o->rq.chat) {
        sw_chat_msg_t msg = {.role = "user", .content = o->rq.prompt};
        g->chat = sw_chat_format_alloc(sw_model_gguf(g->m), &msg, 1, 1);
        if (!g->chat) {
            fprintf(stderr, "shardwire generate: --chat: the model has no usable chat template\n");
            return -1;
        }
        input = g->chat;
    }
    g->prompt = sw_tokenize_alloc(g->tok, input, strlen(input), 1, o->rq.chat, &g->n_prompt);
    g->out = malloc(((size_t)o->rq.n_predict + 1) * sizeof *g->out);
    if (!g->prompt || !g->out) {
        fprintf(stderr, "shardwire generate: out of memory\n");
        return -1;
    }
    /* the cache grows as it is used (engine/include/kv.h): the whole trained
     * context costs nothing up front */
    g->n_ctx = o->m.n_ctx > 0 ? o->m.n_ctx : sw_model_hparams(g->m)->n_ctx_train;
    if ((int64_t)g->n_prompt + o->rq.n_predict > g->n_ctx) {
        fprintf(stderr,
                "shardwire generate: %d prompt + %d new tokens exceed the %d-token context "
                "(use --ctx or -n)\n",
                g->n_prompt, o->rq.n_predict, g->n_ctx);
        return -1;
    }
    return 0;
}

/* The proposer of --draft / --draft-model (the draft model loaded), begun: 0, or -1 after one
 * line. */
static int s_gen_drafter(const struct s_gen_opts *o, struct s_gen *g)
{
    char err[1024] = "";
    g->dmode = o->d.model ? DRAFT_MODE_MODEL : DRAFT_MODE_NONE;
    if (o->d.mode && draft_mode_parse(o->d.mode, &g->dmode) != 0)
        return -1;
    if (o->d.model && (g->dmode == DRAFT_MODE_MODEL || g->dmode == DRAFT_MODE_MIX)) {
        const char *dbe = o->d.backend ? o->d.backend : sw_backend_name(sw_backend_primary(g->be));
        g->dmodel = draft_model_new(o->d.model, sw_model_gguf(g->m), dbe,
                                    o->d.threads ? o->d.threads : o->m.threads,
                                    g->n_prompt + o->rq.n_predict, err, sizeof err);
        if (!g->dmodel) {
            fprintf(stderr, "shardwire generate: %s\n", err);
            return -1;
        }
    }
    g->drafter = draft_new(g->dmodel);
    draft_cfg_t dc = {.mode = g->dmode,
                      .k = o->d.k,
                      .k_max = o->d.k_max,
                      .p_min = o->d.p_min,
                      .sampling = o->sampling,
                      .tree = sw_model_trees(g->m) ? o->d.tree : 0,
                      .ahead = o->d.ahead > 0};
    if (!g->drafter || draft_begin(g->drafter, &dc, err, sizeof err) != 0) {
        fprintf(stderr, "shardwire generate: %s\n", g->drafter ? err : "out of memory");
        return -1;
    }
    return 0;
}

/* --json: the text, the tokens and the statistics as one line. */
static void s_print_json(const struct s_gen *g, const sw_gen_stats_t *gs)
{
    json_t *j = json_object();
    json_t *ids = json_array();
    for (int i = 0; i < gs->n_gen; i++)
        json_array_append_new(ids, json_integer(g->out[i]));
    json_object_set_new(j, "text", json_stringn(g->st.text ? g->st.text : "", g->st.len));
    json_object_set_new(j, "tokens", ids);
    json_object_set_new(j, "n_prompt", json_integer(gs->n_prompt));
    json_object_set_new(j, "n_gen", json_integer(gs->n_gen));
    json_object_set_new(j, "ttft_ms", json_real(gs->ttft_ms));
    json_object_set_new(j, "prefill_tok_s",
                        json_real(gs->prefill_ms > 0 ? gs->n_prompt * 1e3 / gs->prefill_ms : 0));
    json_object_set_new(
        j, "decode_tok_s",
        json_real(gs->decode_ms > 0 && gs->n_gen > 1 ? (gs->n_gen - 1) * 1e3 / gs->decode_ms : 0));
    json_object_set_new(j, "rounds", json_integer(gs->rounds));
    json_object_set_new(j, "drafted", json_integer(gs->drafted));
    json_object_set_new(j, "accepted", json_integer(gs->accepted));
    json_object_set_new(j, "draft", json_string(draft_mode_name(g->dmode)));
    json_object_set_new(j, "backend", json_string(sw_backend_desc(g->be)));
    if (g->dmodel)
        json_object_set_new(j, "draft_backend", json_string(draft_model_backend(g->dmodel)));
    json_object_set_new(j, "draft_ms", json_real(gs->draft_ms));
    json_object_set_new(j, "draft_ahead_ms", json_real(gs->ahead_ms));
    json_object_set_new(j, "tree_rounds", json_integer(gs->tree_rounds));
    json_object_set_new(j, "kv_moves", json_integer(gs->kv_moves));
    json_object_set_new(j, "ahead_hits", json_integer(gs->ahead_hits));
    json_object_set_new(j, "ahead_misses", json_integer(gs->ahead_misses));
    json_object_set_new(j, "target_ms", json_real(gs->target_ms));
    char dg[17];
    snprintf(dg, sizeof dg, "%016llx", (unsigned long long)gs->logits_digest);
    json_object_set_new(j, "logits_digest", json_string(dg));
    char *s = json_dumps(j, JSON_COMPACT | JSON_ENSURE_ASCII);
    if (s)
        printf("%s\n", s);
    free(s);
    json_decref(j);
}

/* Loads, generates and prints: the exit code. */
static int s_gen_run(struct s_gen_opts *o)
{
    if (s_gen_paths(o) != 0)
        return 1;
    char err[1024] = "";
    int rc = 1;
    static struct s_gen g;
    memset(&g, 0, sizeof g);
    if (s_gen_load(o, &g) != 0 || s_gen_prompt(o, &g) != 0)
        goto done;
    g.lt = sw_local_target_new(g.m, g.n_ctx, &o->sampling, err, sizeof err);
    if (!g.lt) {
        fprintf(stderr, "shardwire generate: %s\n", err);
        goto done;
    }
    g.st.json = o->rq.json;
    g.st.detok = sw_detok_new(g.tok, 0);
    if (!g.st.detok) {
        fprintf(stderr, "shardwire generate: out of memory\n");
        goto done;
    }
    sw_target_t target = sw_local_target(g.lt);
    if (s_gen_drafter(o, &g) != 0)
        goto done;
    sw_proposer_t proposer = draft_proposer(g.drafter);
    sw_gen_opts_t go = {
        .k = draft_gen_k(g.drafter),
        .proposer = &proposer,
        .ahead = o->d.ahead > 0,
        .n_predict = o->rq.n_predict,
        .stop_at_eog = 1,
        .on_tokens = s_on_tokens,
        .on_tokens_ctx = &g.st,
        .is_eog = s_is_eog,
        .is_eog_ctx = g.tok,
    };
    sw_gen_stats_t gs;
    if (sw_generate(&target, g.prompt, g.n_prompt, &go, g.out, &gs, err, sizeof err) != 0) {
        fprintf(stderr, "shardwire generate: %s\n", err);
        goto done;
    }
    const char *tail;
    size_t tl;
    if (sw_detok_flush(g.st.detok, &tail, &tl) != 0 || s_emit(&g.st, tail, tl) != 0)
        goto done;
    if (o->rq.json) {
        s_print_json(&g, &gs);
    } else {
        /* the text's last line ends before the stats start, also when stdout
         * and stderr go to one pipe */
        printf("\n");
        fflush(stdout);
        fprintf(
            stderr, "prompt %d tokens in %.1f ms (%.1f tok/s), generated %d tokens, %.2f tok/s\n",
            gs.n_prompt, gs.prefill_ms, gs.prefill_ms > 0 ? gs.n_prompt * 1e3 / gs.prefill_ms : 0,
            gs.n_gen, gs.decode_ms > 0 && gs.n_gen > 1 ? (gs.n_gen - 1) * 1e3 / gs.decode_ms : 0);
    }
    rc = 0;
done:
    s_gen_free(&g);
    return rc;
}

int cmd_generate(int argc, char **argv)
{
    struct s_gen_opts o;
    const int rc = s_gen_parse(argc, argv, &o);
    return rc >= 0 ? rc : s_gen_run(&o);
}
