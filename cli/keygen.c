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

struct s_keygen_opts {
    const char *out;     /* --out PREFIX, or NULL */
    const char *cluster; /* --cluster-key FILE, or NULL */
    const char *access;  /* --access-key FILE, or NULL */
};

/* -1 when the options are good (o filled), else the exit code: 0 after --help /
 * --version, 2 after a usage error's line. */
static int s_keygen_parse(int argc, char **argv, struct s_keygen_opts *o)
{
    *o = (struct s_keygen_opts){0};
    const char *v;
    int c;
    sw_args_t a;
    sw_args_init(&a, &s_spec, argc, argv);
    while ((c = sw_args_next(&a, &v)) >= 0) {
        if (c == O_OUT)
            o->out = v;
        else if (c == O_CLUSTER)
            o->cluster = v;
        else if (c == O_ACCESS)
            o->access = v;
    }
    if ((c = sw_args_finish(&a, c, 0)) >= 0)
        return c;
    if (!o->out && !o->cluster && !o->access)
        return sw_args_exit(sw_args_fail(
            &s_spec, "--out PREFIX, --cluster-key FILE or --access-key FILE is required"));
    return -1;
}

/* Writes the keys asked for: the exit code. */
static int s_keygen_run(const struct s_keygen_opts *o)
{
    char err[512], pub[SW_KEY_Z85_LEN + 1];
    if (o->out) {
        if (sw_keys_generate(o->out, pub, err, sizeof err) != 0) {
            fprintf(stderr, "shardwire keygen: %s\n", err);
            return 1;
        }
        printf("%s\n", pub);
    }
    if (o->cluster && sw_cluster_key_generate(o->cluster, err, sizeof err) != 0) {
        fprintf(stderr, "shardwire keygen: %s\n", err);
        return 1;
    }
    if (o->access && sw_access_key_generate(o->access, err, sizeof err) != 0) {
        fprintf(stderr, "shardwire keygen: %s\n", err);
        return 1;
    }
    return 0;
}

int cmd_keygen(int argc, char **argv)
{
    struct s_keygen_opts o;
    const int rc = s_keygen_parse(argc, argv, &o);
    return rc >= 0 ? rc : s_keygen_run(&o);
}
