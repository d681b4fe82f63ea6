/*
 * info.c - `shardwire info --model M.gguf [--json] [--backend B]`: what a
 * model file is (architecture, sizes, tokenizer, chat template family,
 * fingerprint), read from the GGUF header. On the CPU (the default) no weight
 * is read; --backend cuda places the weights on the GPU as a node would, which
 * checks that they fit, and reports the device.
 */
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "chat.h"
#include "cmds.h"
#include "hub.h"
#include "model.h"
#include "tokenizer.h"

int cmd_info(int argc, char **argv)
{
    enum { O_MODEL = 256, O_JSON };
    static const struct option longs[] = {{"model", required_argument, 0, O_MODEL},
                                          {"json", no_argument, 0, O_JSON},
                                          {"backend", required_argument, 0, 'b'},
                                          {0, 0, 0, 0}};
    const char *path = NULL, *backend = "cpu";
    int json = 0, c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "m:b:", longs, NULL)) != -1) {
        if (c == O_MODEL || c == 'm')
            path = optarg;
        else if (c == O_JSON)
            json = 1;
        else if (c == 'b')
            backend = optarg;
        else
            return 2;
    }
    if (!path) {
        fprintf(stderr, "shardwire info: --model M.gguf is required\n");
        return 2;
    }
    char err[1024] = "";
    static char resolved[PATH_MAX];
    if (sw_hub_model_arg(path, NULL, resolved, sizeof resolved, err, sizeof err) != 0) {
        fprintf(stderr, "shardwire info: %s\n", err);
        return 1;
    }
    path = resolved;
    sw_backend_t *be = sw_backend_new(backend, 1, err, sizeof err);
    if (!be) {
        fprintf(stderr, "shardwire info: --backend: %s\n", err);
        return 1;
    }
    /* Loading maps the file and checks every tensor the engine needs; on the
     * CPU no weight page is read. */
    sw_model_t *m = sw_model_load(path, 0, -1, be, err, sizeof err);
    if (!m) {
        fprintf(stderr, "shardwire info: %s: %s\n", path, err);
        sw_backend_free(&be);
        return 1;
    }
    const sw_hparams_t *hp = sw_model_hparams(m);
    char fp[65];
    sw_model_fingerprint(m, fp);
    sw_tokenizer_t *tok = sw_tokenizer_from_gguf(sw_model_gguf(m), err, sizeof err);
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
    json_object_set_new(j, "backend", json_string(sw_backend_desc(be)));
    if (json) {
        char *s = json_dumps(j, JSON_COMPACT);
        if (s)
            printf("%s\n", s);
        free(s);
    } else {
        const char *key;
        json_t *v;
        json_object_foreach(j, key, v)
        {
            char *s = json_dumps(v, JSON_ENCODE_ANY);
            printf("%-14s %s\n", key, s ? s : "");
            free(s);
        }
    }
    json_decref(j);
    sw_tokenizer_free(&tok);
    sw_model_free(&m);
    sw_backend_free(&be);
    return 0;
}
