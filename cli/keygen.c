/*
 * keygen.c - `shardwire keygen`: makes the keys of a cluster (docs/security.md).
 *
 *   shardwire keygen --out PREFIX        CURVE key pair: PREFIX.key (secret, 0600)
 *                                        and PREFIX.pub (public, Z85)
 *   shardwire keygen --cluster-key FILE  a new random 32-byte cluster key (0600), for
 *                                        the nodes (stage-to-stage traffic)
 *   shardwire keygen --access-key FILE   a new random 32-byte access key (0600), for
 *                                        the clients and the heads
 *
 * Existing files are never overwritten.
 */
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "cmds.h"
#include "keys.h"

enum { O_OUT = SW_OPT_OWN, O_CLUSTER, O_ACCESS };

static const sw_opt_t s_opts[] = {
    {"out", O_OUT, "PREFIX",
     "write a CURVE key pair: PREFIX.key (secret, mode 0600)\nand PREFIX.pub (public key, Z85); "
     "prints the public key"},
    {"cluster-key", O_CLUSTER, "FILE",
     "write a new random cluster key (mode 0600): the nodes'\n(seals stage-to-stage traffic)"},
    {"access-key", O_ACCESS, "FILE",
     "write a new random access key (mode 0600): the\nclients' and the heads' (seals requests and "
     "tokens)"},
};

static const sw_opt_group_t s_groups[] = {SW_ARGS_GROUP(NULL, s_opts)};

static const sw_args_spec_t s_spec = {
    .prog = "shardwire keygen",
    .usage = "--out PREFIX | --cluster-key FILE | --access-key FILE",
    .about = "  Makes the keys of a cluster (docs/security.md). Existing files are never\n"
             "  overwritten.\n",
    .groups = s_groups,
    .n_groups = SW_ARGS_COUNT(s_groups),
};

int cmd_keygen(int argc, char **argv)
{
    const char *out = NULL, *cluster = NULL, *access = NULL, *v;
    int c;
    sw_args_t a;
    sw_args_init(&a, &s_spec, argc, argv);
    while ((c = sw_args_next(&a, &v)) >= 0) {
        if (c == O_OUT)
            out = v;
        else if (c == O_CLUSTER)
            cluster = v;
        else if (c == O_ACCESS)
            access = v;
    }
    if ((c = sw_args_finish(&a, c, 0)) >= 0)
        return c;
    if (!out && !cluster && !access)
        return sw_args_exit(sw_args_fail(
            &s_spec, "--out PREFIX, --cluster-key FILE or --access-key FILE is required"));
    char err[512], pub[SW_KEY_Z85_LEN + 1];
    if (out) {
        if (sw_keys_generate(out, pub, err, sizeof err) != 0) {
            fprintf(stderr, "shardwire keygen: %s\n", err);
            return 1;
        }
        printf("%s\n", pub);
    }
    if (cluster && sw_cluster_key_generate(cluster, err, sizeof err) != 0) {
        fprintf(stderr, "shardwire keygen: %s\n", err);
        return 1;
    }
    if (access && sw_access_key_generate(access, err, sizeof err) != 0) {
        fprintf(stderr, "shardwire keygen: %s\n", err);
        return 1;
    }
    return 0;
}
