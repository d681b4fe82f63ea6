/*
 * info.c - `shardwire info --model M.gguf [--json] [--backend B]`: what a
 * model file is (architecture, sizes, tokenizer, chat template family,
 * fingerprint), read from the GGUF header. On the CPU (the default) no weight
 * is read; --backend cuda places the weights on the GPU as a node would, which
 * checks that they fit, and reports the device.
 */
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "backend.h"
#include "chat.h"
#include "cmds.h"
#include "gguf.h"
#include "hub.h"
#include "model.h"
#include "partial.h"
#include "tokenizer.h"

/* --backend is info's own: its default is cpu (read no weight), not a node's "cuda when a GPU
 * is found" of the shared table */
static const sw_opt_t s_opts[] = {
    {"backend", SW_OPT_BACKEND, "B",
     "cpu (reads no weight), or cuda, cuda:N, cuda:0,1: the\nweights placed as a node would "
     "(default: cpu)"},
    {"json", SW_OPT_JSON, NULL, "print one JSON object instead of a table"}};

static const sw_opt_group_t s_groups[] = {
    SW_ARGS_SHARED_TO("model", MODEL, MODEL), /* --model */
    SW_ARGS_GROUP(NULL, s_opts),
};

static const sw_args_spec_t s_spec = {
    .prog = "shardwire info",
    .usage = "-m M.gguf [--json] [--backend B]",
    .about = "  What a model file is: architecture, sizes, tokenizer, fingerprint. On the CPU\n"
             "  (the default) no weight is read; --backend cuda places the weights on the\n"
             "  GPU as a node would, which checks that they fit.\n",
    .groups = s_groups,
    .n_groups = SW_ARGS_COUNT(s_groups),
};

struct s_info_opts {
    sw_args_model_t m; /* --model, --backend (default cpu) */
    int json;          /* --json */
};

/* -1 when the options are good (o filled), else the exit code: 0 after --help /
 * --version, 2 after a usage error's line. */
static int s_info_parse(int argc, char **argv, struct s_info_opts *o)
{
    *o = (struct s_info_opts){.m = SW_ARGS_MODEL_DEFAULT};
    o->m.backend = "cpu";
    int c;
    const char *v;
    sw_args_t a;
    sw_args_init(&a, &s_spec, argc, argv);
    while ((c = sw_args_next(&a, &v)) >= 0) {
        int h = sw_args_model_opt(s_spec.prog, &o->m, c, v);
        if (!h && c == SW_OPT_JSON)
            h = o->json = 1;
        if (h <= 0)
            return 2;
    }
    if ((c = sw_args_finish(&a, c, 0)) >= 0)
        return c;
    if (!o->m.model)
        return sw_args_exit(sw_args_fail(&s_spec, "--model M.gguf is required"));
    return -1;
}

/* What the model at path is, as one JSON object (new reference); part: its partial-file
 * header when partial is 1. */
static json_t *s_info_json(const char *path, const sw_model_t *m, const sw_tokenizer_t *tok,
                           const sw_backend_t *be, int partial, const sw_partial_info_t *part)
{
    const sw_hparams_t *hp = sw_model_hparams(m);
    char fp[65];
    sw_model_fingerprint(m, fp);
    json_t *j = json_object();
    json_object_set_new(j, "path", json_string(path));
    json_object_set_new(j, "arch", json_string(hp->arch_name));
    json_object_set_new(j, "n_layers", json_integer(hp->n_layer));
    json_object_set_new(j, "n_embd", json_integer(hp->n_embd));
    json_object_set_new(j, "n_ff", json_integer(hp->n_ff));
    json_object_set_new(j, "n_head", json_integer(hp->n_head));
    json_object_set_new(j, "n_kv_head", json_integer(hp->n_kv_head));
    json_object_set_new(j, "head_dim", json_integer(hp->head_dim));
    json_object_set_new(j, "n_vocab", json_integer(hp->n_vocab));
    json_object_set_new(j, "n_ctx_train", json_integer(hp->n_ctx_train));
    json_object_set_new(j, "rope_base", json_real(hp->rope_base));
    json_object_set_new(j, "weight_bytes", json_integer((json_int_t)sw_model_weight_bytes(m)));
    json_object_set_new(j, "tokenizer", json_string(tok ? sw_tokenizer_model(tok) : "?"));
    json_object_set_new(j, "pre_tokenizer", json_string(tok ? sw_tokenizer_pre(tok) : "?"));
    json_object_set_new(j, "fingerprint", json_string(fp));
    const sw_gguf_t *g = sw_model_gguf(m);
    if (sw_gguf_part_count(g) > 1) { /* a split set: its parts, in order */
        json_t *pa = json_array();
        for (int i = 0; i < sw_gguf_part_count(g); i++)
            json_array_append_new(pa, json_string(sw_gguf_part_path(g, i)));
        json_object_set_new(j, "split_parts", pa);
    }
    if (partial) { /* a partial file (engine/include/partial.h): which layers, cut from what */
        json_t *pj = json_object();
        json_object_set_new(pj, "layer_begin", json_integer(part->begin));
        json_object_set_new(pj, "layer_end", json_integer(part->end));
        json_object_set_new(pj, "source", json_string(part->source));
        json_object_set_new(pj, "source_size", json_integer((json_int_t)part->source_size));
        json_object_set_new(pj, "source_sha256", json_string(part->sha256));
        if (part->source_parts > 1)
            json_object_set_new(pj, "source_parts", json_integer(part->source_parts));
        json_object_set_new(j, "partial", pj);
    }
    json_object_set_new(j, "backend", json_string(sw_backend_desc(be)));
    return j;
}

/* j as one line (--json), or one line per key for people. */
static void s_info_print(json_t *j, int json)
{
    if (json) {
        char *s = json_dumps(j, JSON_COMPACT);
        if (s)
            printf("%s\n", s);
        free(s);
        return;
    }
    const char *key;
    json_t *val;
    json_object_foreach(j, key, val)
    {
        char *s = json_dumps(val, JSON_ENCODE_ANY);
        printf("%-14s %s\n", key, s ? s : "");
        free(s);
    }
}

/* Loads the model on the backend and prints what it is: the exit code. */
static int s_info_run(const struct s_info_opts *o)
{
    char err[1024] = "";
    static char path[PATH_MAX];
    if (sw_hub_model_arg(o->m.model, NULL, path, sizeof path, err, sizeof err) != 0) {
        fprintf(stderr, "shardwire info: %s\n", err);
        return 1;
    }
    sw_backend_t *be = sw_backend_new(o->m.backend, 1, err, sizeof err);
    if (!be) {
        fprintf(stderr, "shardwire info: --backend: %s\n", err);
        return 1;
    }
    /* Loading maps the file and checks every tensor the engine needs; on the
     * CPU no weight page is read. */
    sw_partial_info_t part = {0};
    int partial = 0;
    {
        sw_gguf_t *g = sw_gguf_open(path, err, sizeof err);
        partial = g ? sw_partial_info(g, INT_MAX, &part, err, sizeof err) : 0;
        sw_gguf_close(&g);
    }
    sw_model_t *m = partial >= 0 ? sw_model_load(path, partial ? part.begin : 0,
                                                 partial ? part.end : -1, be, err, sizeof err)
                                 : NULL;
    if (!m) {
        fprintf(stderr, "shardwire info: %s: %s\n", path, err);
        sw_backend_free(&be);
        return 1;
    }
    sw_tokenizer_t *tok = sw_tokenizer_from_gguf(sw_model_gguf(m), err, sizeof err);
    json_t *j = s_info_json(path, m, tok, be, partial, &part);
    s_info_print(j, o->json);
    json_decref(j);
    sw_tokenizer_free(&tok);
    sw_model_free(&m);
    sw_backend_free(&be);
    return 0;
}

int cmd_info(int argc, char **argv)
{
    struct s_info_opts o;
    const int rc = s_info_parse(argc, argv, &o);
    return rc >= 0 ? rc : s_info_run(&o);
}
