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
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cmds.h"
#include "keys.h"

int cmd_keygen(int argc, char **argv)
{
    enum { O_OUT = 256, O_CLUSTER, O_ACCESS, O_HELP };
    static const struct option longs[] = {{"out", required_argument, 0, O_OUT},
                                          {"cluster-key", required_argument, 0, O_CLUSTER},
                                          {"access-key", required_argument, 0, O_ACCESS},
                                          {"help", no_argument, 0, O_HELP},
                                          {0, 0, 0, 0}};
    const char *out = NULL, *cluster = NULL, *access = NULL;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", longs, NULL)) != -1) {
        if (c == O_OUT)
            out = optarg;
        else if (c == O_CLUSTER)
            cluster = optarg;
        else if (c == O_ACCESS)
            access = optarg;
        else if (c == O_HELP) {
            printf("usage: shardwire keygen --out PREFIX | --cluster-key FILE | --access-key FILE\n"
                   "  --out PREFIX        write a CURVE key pair: PREFIX.key (secret, mode 0600)\n"
                   "                      and PREFIX.pub (public key, Z85); prints the public key\n"
                   "  --cluster-key FILE  write a new random cluster key (mode 0600): the nodes'\n"
                   "  --access-key FILE   write a new random access key (mode 0600): the clients'\n"
                   "                      and the heads'\n");
            return 0;
        } else
            return 2;
    }
    if (optind < argc || (!out && !cluster && !access)) {
        fprintf(stderr, "shardwire keygen: --out PREFIX, --cluster-key FILE or --access-key FILE "
                        "is required\n");
        return 2;
    }
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
