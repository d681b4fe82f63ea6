/*
 * cluster.c - `shardwire cluster init`: every key of a cluster in one command,
 * and one ready-to-use bundle per machine (docs/deploy.md, docs/security.md).
 *
 *   shardwire cluster init --relay HOST:PORT [--relay HOST2:PORT2 ...] --nodes head,tail[,...]
 *                          --out DIR
 *                          [--clients NAME,...] [--model M] [--layers A:B,B:C,...]
 *                          [--listen tcp://0.0.0.0:PORT] [--force]
 *
 * DIR (mode 0700, every file 0600 but the start scripts start.sh and shardwire.sh, 0700):
 *   README.txt                     what goes where, and the start commands
 *   allow.txt relay.pub            the relay's allow-list and public key
 *   cluster.key access.key         the two sealing keys (nodes; clients and the head)
 *   relay/                         relay.key relay.pub allow.txt start.sh relay.env
 *   relay-2/ ... (more --relay)    the same for each further relay: its own key pair, the
 *                                  same allow-list (relay-2.pub, ... beside relay.pub here
 *                                  and in every bundle; the start commands name them all)
 *   NODE/ (each node)              NODE.key NODE.pub relay.pub cluster.key [access.key: head]
 *                                  allow.txt (for --listen --allow: direct links)
 *                                  start.sh node.env kaggle-secrets.txt
 *   CLIENT/ (each client)          CLIENT.key CLIENT.pub relay.pub access.key shardwire.sh
 *                                  client.env kaggle-secrets.txt api.keys (one HTTP API key
 *                                  for `shardwire.sh serve --api-key-file`)
 *
 * The allow-list binds each node key to its name and role (`KEY head NAME`
 * for the first node, `KEY stage NAME` for the others) and each
 * client key to its name (`KEY client NAME`: it announces NAME-SUFFIX, no
 * other key may). The head (the first node,
 * layers from 0) holds both sealing keys, the other nodes the cluster key,
 * the clients the access key; the relay none.
 *
 * Everything is written into a fresh folder beside DIR and moved into place
 * at the end, so a failure leaves no half-made DIR. An existing DIR is never
 * touched without --force; with it, the files named above are replaced and
 * nothing else in DIR is.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include "args.h"
#include "backend.h"
#include "cmds.h"
#include "keys.h"
#include "model.h"
#include "wire.h"

#include "cluster_impl.h"

/* Splits a comma list into names (checked as peer names); the count or -1. */
static int s_names(const char *what, const char *list, char (*out)[SW_WIRE_NAME_MAX + 1], int max)
{
    int n = 0;
    const char *p = list;
    while (1) {
        size_t len = strcspn(p, ",");
        if (!sw_wire_name_ok(p, len))
            return cl_fail("--%s: '%.*s' is not a name (1-63 of A-Z a-z 0-9 . _ -)", what,
                           (int)(len > 80 ? 80 : len), p);
        if (n == max)
            return cl_fail("--%s: more than %d names", what, max);
        memcpy(out[n], p, len);
        out[n][len] = 0;
        n++;
        if (!p[len])
            break;
        p += len + 1;
    }
    return n;
}

/* --relay HOST:PORT (or tcp://HOST:PORT) into tcp://HOST:PORT and the port. */
static int s_relay_arg(const char *arg, char *ep, size_t ep_len, int *port)
{
    const char *hp = strncmp(arg, "tcp://", 6) == 0 ? arg + 6 : arg;
    const char *colon = strrchr(hp, ':');
    size_t hl = colon ? (size_t)(colon - hp) : 0;
    int ok = colon && hl > 0 && hl < 256;
    for (size_t i = 0; ok && i < hl; i++) {
        char c = hp[i];
        ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
             c == '.' || c == '-' || c == '_' || c == ':' || c == '[' || c == ']';
    }
    char *end = NULL;
    long p = ok ? strtol(colon + 1, &end, 10) : 0;
    if (!ok || !end || *end || end == colon + 1 || p < 1 || p > 65535)
        return cl_fail("--relay '%.100s': expected HOST:PORT (the address the nodes and clients "
                       "dial, e.g. 203.0.113.7:5555 or relay.example.org:5555)",
                       arg);
    snprintf(ep, ep_len, "tcp://%.*s:%ld", (int)hl, hp, p);
    *port = (int)p;
    return 0;
}

/* The layer count of a local GGUF (the header only; no weight is read), or -1. */
static int s_model_layers(const char *path)
{
    char err[1024];
    sw_backend_t *be = sw_backend_new("cpu", 1, err, sizeof err);
    sw_model_t *m = be ? sw_model_load(path, 0, -1, be, err, sizeof err) : NULL;
    int n = m ? sw_model_hparams(m)->n_layer : -1;
    if (!m)
        cl_fail("--model %s: %s", path, err);
    sw_model_free(&m);
    sw_backend_free(&be);
    return n;
}

/* in->layers from --layers (checked: contiguous from 0) or an even split of n_layer. */
static int s_layers(s_init_t *in, const char *arg, int n_layer)
{
    if (!arg) {
        if (n_layer < 0)
            return 0; /* unknown: the bundles leave SW_LAYERS to the user */
        if (n_layer < in->n_nodes)
            return cl_fail("--model has %d layers, fewer than the %d nodes", n_layer, in->n_nodes);
        for (int i = 0; i < in->n_nodes; i++)
            snprintf(in->layers[i], sizeof in->layers[i], "%d:%d", i * n_layer / in->n_nodes,
                     (i + 1) * n_layer / in->n_nodes);
        return 0;
    }
    const char *p = arg;
    int n = 0, prev = 0;
    while (*p) {
        char *e1 = NULL, *e2 = NULL;
        long a = strtol(p, &e1, 10), b = -1;
        if (e1 == p || *e1 != ':')
            return cl_fail("--layers '%.100s': expected A:B,B:C,... (e.g. 0:15,15:30)", arg);
        if (!strncmp(e1 + 1, "end", 3)) {
            e2 = e1 + 4;
        } else {
            b = strtol(e1 + 1, &e2, 10);
            if (e2 == e1 + 1)
                return cl_fail("--layers '%.100s': expected A:B,B:C,... (e.g. 0:15,15:30)", arg);
        }
        if (*e2 && *e2 != ',')
            return cl_fail("--layers '%.100s': expected A:B,B:C,... (e.g. 0:15,15:30)", arg);
        if (n == in->n_nodes)
            return cl_fail("--layers has more ranges than --nodes has names (%d)", in->n_nodes);
        if (a != prev || (b >= 0 && b <= a) || b > 100000)
            return cl_fail("--layers: range %d (%ld:%ld) must start where the previous ends (%d) "
                           "and be non-empty",
                           n + 1, a, b, prev);
        if (b < 0 && e2[0])
            return cl_fail("--layers: only the last range may end at 'end'");
        if (b < 0)
            snprintf(in->layers[n], sizeof in->layers[n], "%ld:end", a);
        else
            snprintf(in->layers[n], sizeof in->layers[n], "%ld:%ld", a, b);
        prev = (int)b;
        n++;
        p = *e2 ? e2 + 1 : e2;
    }
    if (n != in->n_nodes)
        return cl_fail("--layers has %d ranges for %d nodes", n, in->n_nodes);
    if (n_layer >= 0 && prev >= 0 && prev != n_layer)
        return cl_fail("--layers ends at %d but --model has %d layers", prev, n_layer);
    return 0;
}

/* Kaggle secret label for a peer's own key: SHARDWIRE_KEY_<NAME> (A-Z 0-9 _). */
static const char *s_key_label(const char *name)
{
    static char buf[2][96];
    static int slot;
    char *o = buf[slot++ & 1];
    int n = snprintf(o, sizeof buf[0], "SHARDWIRE_KEY_");
    for (const char *p = name; *p && n < (int)sizeof buf[0] - 1; p++)
        o[n++] = (*p >= 'a' && *p <= 'z')                                 ? (char)(*p - 32)
                 : ((*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9')) ? *p
                                                                          : '_';
    o[n] = 0;
    return o;
}

/* A bundle's three files in folder name: the start script (0700), the env
 * file and the Kaggle secret values (0600, wiped from memory after). */
static int s_write_bundle(s_init_t *in, const char *name, const char *script, const char *sh,
                          const char *env_file, char *env, size_t env_len, char *kag,
                          size_t kag_len)
{
    char rel[256];
    int rc = 0;
    cl_fmt(rel, sizeof rel, "%s/%s", name, script);
    rc |= cl_write(in, rel, sh, 0700);
    cl_fmt(rel, sizeof rel, "%s/%s", name, env_file);
    rc |= cl_write(in, rel, env, 0600);
    cl_fmt(rel, sizeof rel, "%s/kaggle-secrets.txt", name);
    rc |= cl_write(in, rel, kag, 0600);
    sodium_memzero(env, env_len);
    sodium_memzero(kag, kag_len);
    return rc ? -1 : 0;
}

/* Relay r's folder and key name: "relay", "relay-2", ... */
static void s_relay_name(int r, char *buf, size_t len)
{
    if (r == 0)
        snprintf(buf, len, "relay");
    else
        snprintf(buf, len, "relay-%d", r + 1);
}

/* Relay r's key pair in its folder, its .pub beside the bundles; in->relay_pub and
 * in->relay_key_sh grow by it. */
static int s_relay_keys(s_init_t *in, int r)
{
    char dir[32], pub[SW_KEY_Z85_LEN + 1], sec[SW_KEY_Z85_LEN + 1], rel[64], top[64];
    s_relay_name(r, dir, sizeof dir);
    if (cl_mkdir(in, dir) != 0 || cl_keypair(in, dir, dir, pub, sec) != 0)
        return -1;
    sodium_memzero(sec, sizeof sec);
    cl_fmt(rel, sizeof rel, "%s/%s.pub", dir, dir);
    cl_fmt(top, sizeof top, "%s.pub", dir);
    if (cl_copy(in, rel, top) != 0)
        return -1;
    int ovf = 0;
    cl_cat(in->relay_pub, sizeof in->relay_pub, &ovf, "%s%s", r ? "," : "", pub);
    cl_cat(in->relay_key_sh, sizeof in->relay_key_sh, &ovf, "%s$here/%s.pub", r ? "," : "", dir);
    return ovf ? cl_fail("internal: the relay keys do not fit") : 0;
}

/* Every relay's public key into the bundle folder name. */
static int s_copy_relay_pubs(s_init_t *in, const char *name)
{
    for (int r = 0; r < in->n_relays; r++) {
        char dir[32], from[64], to[300];
        s_relay_name(r, dir, sizeof dir);
        cl_fmt(from, sizeof from, "%s.pub", dir);
        cl_fmt(to, sizeof to, "%s/%s.pub", name, dir);
        if (cl_copy(in, from, to) != 0)
            return -1;
    }
    return 0;
}

static int s_node_bundle(s_init_t *in, int i, char *allow, size_t allow_cap, int *ovf)
{
    const char *name = in->nodes[i];
    int head = i == 0;
    char pub[SW_KEY_Z85_LEN + 1], sec[SW_KEY_Z85_LEN + 1], rel[256], rel2[256];
    if (cl_mkdir(in, name) != 0 || cl_keypair(in, name, name, pub, sec) != 0)
        return -1;
    /* bound to its role too: no other node key may announce a second head */
    cl_cat(allow, allow_cap, ovf, "%s %s %s\n", pub, head ? "head" : "stage", name);
    cl_fmt(rel2, sizeof rel2, "%s/cluster.key", name);
    if (s_copy_relay_pubs(in, name) != 0 || cl_copy(in, "cluster.key", rel2) != 0)
        return -1;
    if (head) {
        cl_fmt(rel, sizeof rel, "%s/access.key", name);
        if (cl_copy(in, "access.key", rel) != 0)
            return -1;
    }
    const char *role = head ? "head (layers from 0: owns the sessions, runs the drafter)"
                       : i == in->n_nodes - 1 ? "tail (the last layers: LM head and verifier)"
                                              : "middle";
    char sh[S_TEXT_MAX] = "", env[S_TEXT_MAX] = "", kag[S_TEXT_MAX] = "";
    /* start.sh: the exact command, with the files beside it. */
    cl_cat(sh, sizeof sh, ovf,
           "#!/bin/sh\n"
           "# shardwire node '%s', %s: made by shardwire cluster init.\n"
           "# Starts the node with the keys in this folder. SW_MODEL and SW_LAYERS override the\n"
           "# model and layer range below; more arguments go to shardwire-node (e.g. --backend "
           "cuda).\n"
           "set -eu\n"
           "here=$(cd \"$(dirname \"$0\")\" && pwd)\n"
           "model=${SW_MODEL:-%s}\n"
           "layers=${SW_LAYERS:-%s}\n"
           "[ -n \"$model\" ] || { echo \"start.sh: set SW_MODEL=FILE.gguf or "
           "hf:ORG/NAME/FILE.gguf (cluster init had no --model)\" >&2; exit 2; }\n"
           "[ -n \"$layers\" ] || { echo \"start.sh: set SW_LAYERS=A:B, this node's layer range "
           "(shardwire info --model M gives the count; cluster init had no --layers)\" >&2; exit "
           "2; }\n"
           "exec \"${SHARDWIRE_BIN:+$SHARDWIRE_BIN/}shardwire-node\" --model \"$model\" --layers "
           "\"$layers\" \\\n"
           "    --relay %s --name %s --key \"$here/%s.key\" --relay-key \"%s\" \\\n"
           "    --cluster-key \"$here/cluster.key\"%s \"$@\"\n",
           name, role, in->model ? cl_shq(in->model) : "", in->layers[i], cl_shq(in->relay_ep),
           name, name, in->relay_key_sh, head ? " --access-key \"$here/access.key\"" : "");
    /* node.env: the same, as values to paste into an environment. */
    cl_cat(
        env, sizeof env, ovf,
        "# shardwire node '%s', %s: made by shardwire cluster init.\n"
        "# SECRET: this file holds the node's secret key and the cluster's sealing key%s.\n"
        "# Start with the files of this folder:  sh start.sh\n"
        "# or with these values alone (a shell with this file sourced, `set -a; . ./node.env`):\n"
        "#   umask 077; d=$(mktemp -d)\n"
        "#   printf '%%s\\n' \"$%s\" > $d/node.key\n"
        "#   printf '%%s\\n' \"$SHARDWIRE_CLUSTER_KEY\" > $d/cluster.key\n"
        "%s"
        "#   shardwire-node --model \"$SHARDWIRE_MODEL\" --layers \"$SHARDWIRE_LAYERS\" "
        "--relay \"$SHARDWIRE_RELAY\" --name \"$SHARDWIRE_NAME\" \\\n"
        "#       --key $d/node.key --relay-key \"$SHARDWIRE_RELAY_PUB\" --cluster-key "
        "$d/cluster.key%s\n"
        "SHARDWIRE_NAME='%s'\n"
        "SHARDWIRE_RELAY='%s'\n"
        "SHARDWIRE_RELAY_PUB='%s'\n"
        "%s='%s'\n"
        "SHARDWIRE_CLUSTER_KEY='%s'\n",
        name, role, head ? "s" : "", s_key_label(name),
        head ? "#   printf '%s\\n' \"$SHARDWIRE_ACCESS_KEY\" > $d/access.key\n" : "",
        head ? " --access-key $d/access.key" : "", name, in->relay_ep, in->relay_pub,
        s_key_label(name), sec, in->cluster_z85);
    if (head)
        cl_cat(env, sizeof env, ovf, "SHARDWIRE_ACCESS_KEY='%s'\n", in->access_z85);
    cl_cat(env, sizeof env, ovf, "SHARDWIRE_MODEL=%s\nSHARDWIRE_LAYERS='%s'\n",
           cl_shq(in->model ? in->model : ""), in->layers[i]);
    /* kaggle-secrets.txt: the secrets deploy/kaggle/node.ipynb reads. */
    cl_cat(kag, sizeof kag, ovf,
           "# Kaggle secrets of node '%s' (deploy/kaggle/%s.ipynb with NODE_NAME = '%s'):\n"
           "# in the notebook, Add-ons > Secrets > Add a new secret, one per line below\n"
           "# (label, then value), and attach each to the notebook. SECRET values.\n"
           "SHARDWIRE_RELAY     %s\n"
           "SHARDWIRE_RELAY_PUB %s\n"
           "%s %s\n"
           "SHARDWIRE_CLUSTER_KEY %s\n",
           name, head ? "head" : "node", name, in->relay_ep, in->relay_pub, s_key_label(name), sec,
           in->cluster_z85);
    if (head)
        cl_cat(kag, sizeof kag, ovf, "SHARDWIRE_ACCESS_KEY %s\n", in->access_z85);
    sodium_memzero(sec, sizeof sec);
    return s_write_bundle(in, name, "start.sh", sh, "node.env", env, sizeof env, kag, sizeof kag);
}

static int s_client_bundle(s_init_t *in, int i, char *allow, size_t allow_cap, int *ovf)
{
    const char *name = in->clients[i];
    char pub[SW_KEY_Z85_LEN + 1], sec[SW_KEY_Z85_LEN + 1], rel[256], rel2[256];
    if (cl_mkdir(in, name) != 0 || cl_keypair(in, name, name, pub, sec) != 0)
        return -1;
    /* bound to its name: only this key may announce NAME or NAME-SUFFIX (shardwire.sh sets
     * SW_CLIENT_NAME, the prefix the client library takes), across relay restarts too */
    cl_cat(allow, allow_cap, ovf, "# client '%s'\n%s client %s\n", name, pub, name);
    cl_fmt(rel2, sizeof rel2, "%s/access.key", name);
    if (s_copy_relay_pubs(in, name) != 0 || cl_copy(in, "access.key", rel2) != 0)
        return -1;
    /* an HTTP API key for the client's `serve` (the compose file's serve service reads it):
     * 32 random bytes, URL-safe base64 without padding (43 characters) */
    unsigned char api_bin[32];
    char api_line[160],
        api_b64[sodium_base64_ENCODED_LEN(32, sodium_base64_VARIANT_URLSAFE_NO_PADDING)];
    randombytes_buf(api_bin, sizeof api_bin);
    sodium_bin2base64(api_b64, sizeof api_b64, api_bin, sizeof api_bin,
                      sodium_base64_VARIANT_URLSAFE_NO_PADDING);
    cl_fmt(api_line, sizeof api_line,
           "# shardwire serve --api-key-file: the HTTP API key of client '%s' (SECRET)\n%s\n", name,
           api_b64);
    cl_fmt(rel, sizeof rel, "%s/api.keys", name);
    int api_rc = cl_write(in, rel, api_line, 0600);
    sodium_memzero(api_bin, sizeof api_bin);
    sodium_memzero(api_b64, sizeof api_b64);
    sodium_memzero(api_line, sizeof api_line);
    if (api_rc != 0)
        return -1;
    char sh[S_TEXT_MAX] = "", env[S_TEXT_MAX] = "", kag[S_TEXT_MAX] = "";
    cl_cat(sh, sizeof sh, ovf,
           "#!/bin/sh\n"
           "# shardwire client '%s': made by shardwire cluster init. Runs a shardwire command\n"
           "# against the cluster with the keys in this folder:\n"
           "#   sh shardwire.sh run -p \"Hello\" -n 64 [--chat]\n"
           "#   sh shardwire.sh status [--expect %s]\n"
           "#   sh shardwire.sh serve --listen 127.0.0.1:8080 --api-key-file api.keys\n"
           "set -eu\n"
           "here=$(cd \"$(dirname \"$0\")\" && pwd)\n"
           "[ $# -ge 1 ] || { echo \"usage: sh $0 COMMAND [options] (a shardwire command that "
           "dials the relay: run, status, serve, plan)\" >&2; exit 2; }\n"
           "cmd=$1\n"
           "shift\n"
           "# the relay's allow-list binds this key to the name '%s' (and '%s-...')\n"
           "SW_CLIENT_NAME=${SW_CLIENT_NAME:-%s}\n"
           "export SW_CLIENT_NAME\n"
           "exec \"${SHARDWIRE_BIN:+$SHARDWIRE_BIN/}shardwire\" \"$cmd\" --relay %s --key "
           "\"$here/%s.key\" \\\n"
           "    --relay-key \"%s\" --access-key \"$here/access.key\" \"$@\"\n",
           name, in->nodes[0], name, name, name, cl_shq(in->relay_ep), name, in->relay_key_sh);
    cl_cat(env, sizeof env, ovf,
           "# shardwire client '%s': made by shardwire cluster init.\n"
           "# SECRET: this file holds the client's secret key and the access key.\n"
           "# Run with the files of this folder:  sh shardwire.sh run -p \"Hello\"\n"
           "# or with these values alone (a shell with this file sourced, `set -a; . "
           "./client.env`):\n"
           "#   umask 077; d=$(mktemp -d)\n"
           "#   printf '%%s\\n' \"$%s\" > $d/client.key\n"
           "#   printf '%%s\\n' \"$SHARDWIRE_ACCESS_KEY\" > $d/access.key\n"
           "#   shardwire run --relay \"$SHARDWIRE_RELAY\" --key $d/client.key --relay-key "
           "\"$SHARDWIRE_RELAY_PUB\" --access-key $d/access.key -p \"Hello\"\n"
           "SHARDWIRE_RELAY='%s'\n"
           "SHARDWIRE_RELAY_PUB='%s'\n"
           "%s='%s'\n"
           "SHARDWIRE_ACCESS_KEY='%s'\n",
           name, s_key_label(name), in->relay_ep, in->relay_pub, s_key_label(name), sec,
           in->access_z85);
    cl_cat(kag, sizeof kag, ovf,
           "# Kaggle secrets of client '%s' (deploy/kaggle/client.ipynb with CLIENT_NAME = '%s'):\n"
           "# in the notebook, Add-ons > Secrets > Add a new secret, one per line below\n"
           "# (label, then value), and attach each to the notebook. SECRET values.\n"
           "SHARDWIRE_RELAY     %s\n"
           "SHARDWIRE_RELAY_PUB %s\n"
           "%s %s\n"
           "SHARDWIRE_ACCESS_KEY %s\n",
           name, name, in->relay_ep, in->relay_pub, s_key_label(name), sec, in->access_z85);
    sodium_memzero(sec, sizeof sec);
    return s_write_bundle(in, name, "shardwire.sh", sh, "client.env", env, sizeof env, kag,
                          sizeof kag);
}

static int s_relay_bundle(s_init_t *in, int r, const char *allow);
static int s_readme(s_init_t *in);

static int s_make(s_init_t *in)
{
    int ovf = 0;
    for (int r = 0; r < in->n_relays; r++)
        if (s_relay_keys(in, r) != 0)
            return -1;
    if (cl_sealing_key(in, "cluster.key", sw_cluster_key_generate, in->cluster_z85) != 0 ||
        cl_sealing_key(in, "access.key", sw_access_key_generate, in->access_z85) != 0)
        return -1;
    static char allow[S_NODES_MAX * 128 + S_CLIENTS_MAX * 200 + 512];
    allow[0] = 0;
    cl_cat(allow, sizeof allow, &ovf,
           "# shardwire relay allow-list, made by shardwire cluster init (docs/security.md).\n"
           "# Each node key is bound to its name and role (head or stage); client keys get\n"
           "# the client role.\n"
           "# Revoke a key by deleting its line: the relay re-reads this file when it\n"
           "# changes (and on SIGHUP).\n");
    for (int i = 0; i < in->n_nodes; i++)
        if (s_node_bundle(in, i, allow, sizeof allow, &ovf) != 0)
            return -1;
    for (int i = 0; i < in->n_clients; i++)
        if (s_client_bundle(in, i, allow, sizeof allow, &ovf) != 0)
            return -1;
    if (ovf)
        return cl_fail("internal: a generated file did not fit its buffer");
    if (cl_write(in, "allow.txt", allow, 0600) != 0)
        return -1;
    for (int i = 0; i < in->n_nodes; i++) { /* a node's --listen checks dialling keys with it */
        char rel[128];
        cl_fmt(rel, sizeof rel, "%s/allow.txt", in->nodes[i]);
        if (cl_write(in, rel, allow, 0600) != 0)
            return -1;
    }
    for (int r = 0; r < in->n_relays; r++)
        if (s_relay_bundle(in, r, allow) != 0)
            return -1;
    return s_readme(in);
}

/* Relay r's folder (relay/, relay-2/, ...): the same allow-list, start.sh and relay.env. */
static int s_relay_bundle(s_init_t *in, int r, const char *allow)
{
    int ovf = 0;
    char dir[32], rel[64], rel2[64];
    s_relay_name(r, dir, sizeof dir);
    cl_fmt(rel, sizeof rel, "%s/allow.txt", dir);
    if (cl_write(in, rel, allow, 0600) != 0)
        return -1;
    char sh[S_TEXT_MAX] = "", env[S_TEXT_MAX] = "";
    cl_cat(sh, sizeof sh, &ovf,
           "#!/bin/sh\n"
           "# The shardwire relay: made by shardwire cluster init. More arguments go to\n"
           "# shardwire-relay. On a VM, deploy/vm/ runs it under systemd instead.\n"
           "set -eu\n"
           "here=$(cd \"$(dirname \"$0\")\" && pwd)\n"
           "exec \"${SHARDWIRE_BIN:+$SHARDWIRE_BIN/}shardwire-relay\" --listen %s --key "
           "\"$here/%s.key\" \\\n"
           "    --allow \"$here/allow.txt\" \"$@\"\n",
           cl_shq(in->listens[r]), dir);
    cl_cat(env, sizeof env, &ovf,
           "# The shardwire relay's listen address: made by shardwire cluster init.\n"
           "# deploy/vm/shardwire-relay.service reads it as /etc/shardwire/relay.env;\n"
           "# deploy/vm/relay.nft limits port 5555 only (docs/deploy.md).\n"
           "SHARDWIRE_LISTEN='%s'\n",
           in->listens[r]);
    if (ovf)
        return cl_fail("internal: a generated file did not fit its buffer");
    cl_fmt(rel, sizeof rel, "%s/start.sh", dir);
    cl_fmt(rel2, sizeof rel2, "%s/relay.env", dir);
    return cl_write(in, rel, sh, 0700) != 0 || cl_write(in, rel2, env, 0600) != 0 ? -1 : 0;
}

/* README.txt: what goes where, and the start commands. */
static int s_readme(s_init_t *in)
{
    int ovf = 0;

    static char readme[S_TEXT_MAX * 2];
    readme[0] = 0;
    cl_cat(readme, sizeof readme, &ovf,
           "shardwire cluster: keys and one bundle per machine, made by shardwire cluster init.\n"
           "Everything here is SECRET except the *.pub files. docs/deploy.md walks through it.\n\n"
           "Relay (reachable at %s, listening on %s):\n"
           "  copy relay/ to the relay machine and run  sh relay/start.sh\n"
           "  (or deploy/vm/: the relay under systemd with these files in /etc/shardwire)\n\n",
           in->relay_eps[0], in->listens[0]);
    for (int r = 1; r < in->n_relays; r++)
        cl_cat(readme, sizeof readme, &ovf,
               "Relay %d (reachable at %s, listening on %s): relay-%d/ on its own machine,\n"
               "  sh relay-%d/start.sh (every node and client keeps a link to each relay)\n\n",
               r + 1, in->relay_eps[r], in->listens[r], r + 1, r + 1);
    cl_cat(readme, sizeof readme, &ovf,
           "Nodes (copy each folder to its machine; any start order works):\n");
    for (int i = 0; i < in->n_nodes; i++)
        cl_cat(readme, sizeof readme, &ovf, "  %-16s layers %-10s  sh %s/start.sh%s\n",
               in->nodes[i], in->layers[i][0] ? in->layers[i] : "(SW_LAYERS)", in->nodes[i],
               in->model ? "" : "   (set SW_MODEL=...)");
    cl_cat(readme, sizeof readme, &ovf, "\nClients:\n");
    char all[S_NODES_MAX * (SW_WIRE_NAME_MAX + 1) + 1] = "";
    for (int i = 0; i < in->n_nodes; i++)
        cl_cat(all, sizeof all, &ovf, "%s%s", i ? "," : "", in->nodes[i]);
    for (int i = 0; i < in->n_clients; i++)
        cl_cat(readme, sizeof readme, &ovf,
               "  %-16s sh %s/shardwire.sh status --expect %s\n"
               "  %-16s sh %s/shardwire.sh run -p \"Hello\" -n 64 --chat\n",
               in->clients[i], in->clients[i], all, "", in->clients[i]);
    cl_cat(readme, sizeof readme, &ovf,
           "\nWithout files (an environment, Kaggle secrets): each bundle's *.env holds the\n"
           "same keys as values and kaggle-secrets.txt the secrets deploy/kaggle/ reads.\n"
           "Keys: the head holds cluster.key and access.key, the other nodes cluster.key,\n"
           "clients access.key, the relay neither. allow.txt is the relay's allow-list.\n");
    if (ovf)
        return cl_fail("internal: a generated file did not fit its buffer");
    return cl_write(in, "README.txt", readme, 0600);
}

/* Removes the files written under tmp and the folders, deepest first. */
static void s_cleanup(s_init_t *in)
{
    for (int i = in->n_files - 1; i >= 0; i--) {
        unlink(cl_path(in, in->files[i]));
        char *slash = strrchr(in->files[i], '/');
        if (slash) {
            *slash = 0;
            rmdir(cl_path(in, in->files[i]));
        }
    }
    rmdir(in->tmp);
}

/* Moves every file from tmp into out (making folders), replacing the same names. */
static int s_install(s_init_t *in)
{
    struct stat st;
    if (stat(in->out, &st) != 0)
        return rename(in->tmp, in->out) == 0 ? 0 : cl_fail("%s: %s", in->out, strerror(errno));
    if (chmod(in->out, 0700) != 0) /* --force into a folder that was there: 0700 as a new one */
        return cl_fail("%s: %s", in->out, strerror(errno));
    for (int i = 0; i < in->n_files; i++) {
        char dst[PATH_MAX];
        if (cl_fmt(dst, sizeof dst, "%s/%s", in->out, in->files[i]) != 0)
            return cl_fail("%s: path too long", in->out);
        char *slash = strrchr(dst, '/');
        if (strchr(in->files[i], '/')) {
            *slash = 0;
            if (mkdir(dst, 0700) != 0 && (errno != EEXIST || chmod(dst, 0700) != 0))
                return cl_fail("%s: %s", dst, strerror(errno));
            *slash = '/';
        }
        if (rename(cl_path(in, in->files[i]), dst) != 0)
            return cl_fail("%s: %s", dst, strerror(errno));
    }
    s_cleanup(in); /* only the emptied folders are left */
    return 0;
}

enum { O_NODES = SW_OPT_OWN, O_CLIENTS, O_OUT, O_LAYERS, O_LISTEN, O_FORCE };

static const sw_opt_t s_init_opts_table[] = {
    {"relay", SW_OPT_RELAY, "HOST:PORT",
     "where nodes and clients reach the relay; again for each\nfurther relay (at most "
     "SW_PEER_MAX_RELAYS = " SW_STR(SW_PEER_MAX_RELAYS) "): each its own\nkey pair and folder "
                                                        "(relay-2/, ...), the same allow-list"},
    {"nodes", O_NODES, "A,B,...",
     "node names in pipeline order: the first is the head,\nthe last "
     "the tail"},
    {"clients", O_CLIENTS, "A,...", "client names (default: client)"},
    {"out", O_OUT, "DIR", "the folder to write (made 0700)"},
    {"model", SW_OPT_MODEL, "M",
     "the model the start commands use (a path or\nhf:ORG/NAME/FILE); a local file also gives the "
     "layer\ncount for an even split"},
    {"layers", O_LAYERS, "A:B,...", "one layer range per node (default: even split of --model)"},
    {"listen", O_LISTEN, "EP",
     "the relay's bind endpoint (default tcp://0.0.0.0:PORT);\nwith several relays one per "
     "--relay, in order"},
    {"force", O_FORCE, NULL, "DIR exists: replace the files cluster init writes"},
};

static const sw_opt_group_t s_init_groups[] = {SW_ARGS_GROUP(NULL, s_init_opts_table)};

static const sw_args_spec_t s_init_spec = {
    .prog = "shardwire cluster init",
    .usage = "--relay HOST:PORT [--relay ...] --nodes head,tail[,...] --out DIR\n"
             "       [--clients NAME,...] [--model M] [--layers A:B,B:C,...]\n"
             "       [--listen tcp://0.0.0.0:PORT] [--force]",
    .about = "  Writes every key of a cluster into DIR (0700; files 0600, the start scripts\n"
             "  0700): the relay's key pair and allow-list, a key pair per node and client,\n"
             "  the cluster key (nodes) and the access key (clients and the head), and for\n"
             "  each machine a bundle with its keys, the exact start command (start.sh /\n"
             "  shardwire.sh), an env file and the Kaggle secret values. docs/deploy.md has\n"
             "  the whole walk-through.\n",
    .groups = s_init_groups,
    .n_groups = SW_ARGS_COUNT(s_init_groups),
};

/* cluster init's options as given (strings point into argv). */
struct s_init_opts {
    const char *relay[SW_PEER_MAX_RELAYS + 1];  /* --relay HOST:PORT, once per relay */
    const char *listen[SW_PEER_MAX_RELAYS + 1]; /* --listen, once per relay (or none) */
    int n_relay, n_listen;
    const char *nodes;   /* --nodes A,B,... */
    const char *clients; /* --clients A,... (default: client) */
    const char *out;     /* --out DIR */
    const char *model;   /* --model M, or NULL */
    const char *layers;  /* --layers A:B,..., or NULL */
    int force;           /* --force */
};

/* Reads the command line into *o: -1 when it is good, else the exit code (0 after --help or
 * --version, 2 after an error line). */
static int s_init_getopt(int argc, char **argv, struct s_init_opts *o)
{
    *o = (struct s_init_opts){.clients = "client"};
    const char *v;
    int c;
    sw_args_t a;
    sw_args_init(&a, &s_init_spec, argc, argv);
    while ((c = sw_args_next(&a, &v)) >= 0) {
        switch (c) {
        case SW_OPT_RELAY:
            if (o->n_relay == SW_PEER_MAX_RELAYS)
                return sw_args_exit(sw_args_fail(
                    &s_init_spec, "more than %d --relay (SW_PEER_MAX_RELAYS)", SW_PEER_MAX_RELAYS));
            o->relay[o->n_relay++] = v;
            break;
        case O_NODES:
            o->nodes = v;
            break;
        case O_CLIENTS:
            o->clients = v;
            break;
        case O_OUT:
            o->out = v;
            break;
        case SW_OPT_MODEL:
            o->model = v;
            break;
        case O_LAYERS:
            o->layers = v;
            break;
        case O_LISTEN:
            if (o->n_listen == SW_PEER_MAX_RELAYS)
                return sw_args_exit(sw_args_fail(&s_init_spec,
                                                 "more than %d --listen (one per "
                                                 "--relay)",
                                                 SW_PEER_MAX_RELAYS));
            o->listen[o->n_listen++] = v;
            break;
        case O_FORCE:
            o->force = 1;
            break;
        default:
            return 2;
        }
    }
    if ((c = sw_args_finish(&a, c, 0)) >= 0)
        return c;
    if (!o->n_relay || !o->nodes || !o->out || !*o->out)
        return sw_args_exit(sw_args_fail(&s_init_spec, "--relay HOST:PORT, --nodes NAME,... and "
                                                       "--out DIR are required"));
    return -1;
}

/* The node and client names of o into in: distinct, and none is 'relay'. 0, or -1 after one
 * line. */
static int s_init_names(const struct s_init_opts *o, s_init_t *in)
{
    if ((in->n_nodes = s_names("nodes", o->nodes, in->nodes, S_NODES_MAX)) < 0 ||
        (in->n_clients = s_names("clients", o->clients, in->clients, S_CLIENTS_MAX)) < 0)
        return -1;
    for (int i = 0; i < in->n_nodes + in->n_clients; i++) {
        const char *a = i < in->n_nodes ? in->nodes[i] : in->clients[i - in->n_nodes];
        if (!strcmp(a, "relay") || (!strncmp(a, "relay-", 6) && a[6] >= '2' && a[6] <= '9'))
            return cl_fail("'%s' is a relay's own folder: choose another node or client name", a);
        for (int j = 0; j < i; j++)
            if (!strcmp(a, j < in->n_nodes ? in->nodes[j] : in->clients[j - in->n_nodes]))
                return cl_fail(
                    "the name '%s' is given twice (nodes and clients need distinct names)", a);
    }
    return 0;
}

/* The relays of o into in (endpoints, listens, the list peers are given). 0, or -1 after one
 * line. */
static int s_init_relays(const struct s_init_opts *o, s_init_t *in)
{
    if (o->n_listen && o->n_listen != o->n_relay)
        return cl_fail("%d --relay but %d --listen: give one --listen per --relay, in order, or "
                       "none (each relay then listens on tcp://0.0.0.0:ITS_PORT)",
                       o->n_relay, o->n_listen);
    int ovf = 0;
    in->n_relays = o->n_relay;
    for (int r = 0; r < o->n_relay; r++) {
        int port = 0;
        const char *l = r < o->n_listen ? o->listen[r] : NULL;
        if (s_relay_arg(o->relay[r], in->relay_eps[r], sizeof in->relay_eps[r], &port) != 0)
            return -1;
        for (int q = 0; q < r; q++)
            if (!strcmp(in->relay_eps[q], in->relay_eps[r]))
                return cl_fail("--relay %s is given twice", in->relay_eps[r]);
        if (l && (strncmp(l, "tcp://", 6) != 0 || strlen(l) >= sizeof in->listens[r] ||
                  strpbrk(l, "'\"\\ \t\n$`")))
            return cl_fail("--listen '%.100s': expected tcp://ADDRESS:PORT", l);
        if (l)
            snprintf(in->listens[r], sizeof in->listens[r], "%s", l);
        else
            snprintf(in->listens[r], sizeof in->listens[r], "tcp://0.0.0.0:%d", port);
        cl_cat(in->relay_ep, sizeof in->relay_ep, &ovf, "%s%s", r ? "," : "", in->relay_eps[r]);
    }
    snprintf(in->listen, sizeof in->listen, "%s", in->listens[0]);
    return ovf ? cl_fail("--relay: the list is too long") : 0;
}

/*
 * Parses the command line into *in (everything cluster init will write) and *force: -1 when
 * it is good, else the exit code: 0 after --help, 2 after a usage error's line, 1 when the
 * model's layer count cannot be read.
 */
static int s_init_parse(int argc, char **argv, s_init_t *in, int *force)
{
    struct s_init_opts o;
    int rc = s_init_getopt(argc, argv, &o);
    if (rc >= 0)
        return rc;
    memset(in, 0, sizeof *in);
    in->model = o.model;
    *force = o.force;
    if (strlen(o.out) >= sizeof in->out - 64) {
        cl_fail("--out: path too long");
        return 2;
    }
    snprintf(in->out, sizeof in->out, "%s", o.out);
    for (size_t l = strlen(in->out); l > 1 && in->out[l - 1] == '/'; l--)
        in->out[l - 1] = 0;
    if (s_init_relays(&o, in) != 0)
        return 2;
    if (in->model && (strlen(in->model) >= PATH_MAX || strchr(in->model, '\n'))) {
        cl_fail("--model: not a usable path");
        return 2;
    }
    if (s_init_names(&o, in) != 0)
        return 2;
    int n_layer = -1;
    if (in->model && strncmp(in->model, "hf:", 3) != 0 && (n_layer = s_model_layers(in->model)) < 0)
        return 1;
    return s_layers(in, o.layers, n_layer) != 0 ? 2 : -1;
}

/* Where in->out is made: a fresh folder beside it (in->tmp), after checking that out may be
 * written (a folder, and --force when it exists). 0, or -1 after one line. */
static int s_init_tmp(s_init_t *in, int force)
{
    struct stat st;
    if (stat(in->out, &st) == 0) {
        if (!S_ISDIR(st.st_mode))
            return cl_fail("%s exists and is not a folder", in->out);
        if (!force)
            return cl_fail("%s exists: not overwriting a cluster's keys (pass --force to replace "
                           "the files cluster init writes there, or choose another --out)",
                           in->out);
    } else if (errno != ENOENT) {
        return cl_fail("%s: %s", in->out, strerror(errno));
    }
    int tl = snprintf(in->tmp, sizeof in->tmp, "%s.tmp-XXXXXX", in->out);
    if (tl < 0 || (size_t)tl >= sizeof in->tmp)
        return cl_fail("--out %s: the path is too long", in->out);
    if (!mkdtemp(in->tmp))
        return cl_fail("cannot make a folder beside %s: %s", in->out, strerror(errno));
    return 0;
}

/* Makes every key and bundle of in and moves them into in->out: the exit code. */
static int s_init_run(s_init_t *in, int force)
{
    if (s_init_tmp(in, force) != 0)
        return 1;
    if (sodium_init() < 0) {
        cl_fail("libsodium failed to initialise");
        rmdir(in->tmp);
        return 1;
    }
    int rc = s_make(in);
    if (rc == 0)
        rc = s_install(in);
    else
        s_cleanup(in);
    for (int i = 0; i < in->n_files; i++)
        free(in->files[i]);
    sodium_memzero(in->cluster_z85, sizeof in->cluster_z85);
    sodium_memzero(in->access_z85, sizeof in->access_z85);
    if (rc != 0)
        return 1;
    printf("cluster keys and bundles in %s (see %s/README.txt):\n", in->out, in->out);
    printf("  relay/   -> the relay machine (listens on %s; nodes and clients dial %s)\n",
           in->listen, in->relay_eps[0]);
    for (int r = 1; r < in->n_relays; r++)
        printf("  relay-%d/ -> relay %d's machine (listens on %s; dialled at %s)\n", r + 1, r + 1,
               in->listens[r], in->relay_eps[r]);
    for (int i = 0; i < in->n_nodes; i++)
        printf("  %s/ -> node %d (layers %s)\n", in->nodes[i], i,
               in->layers[i][0] ? in->layers[i] : "not set: SW_LAYERS");
    for (int i = 0; i < in->n_clients; i++)
        printf("  %s/ -> a client\n", in->clients[i]);
    return 0;
}

static int s_init(int argc, char **argv)
{
    static s_init_t in;
    int force = 0;
    const int rc = s_init_parse(argc, argv, &in, &force);
    return rc >= 0 ? rc : s_init_run(&in, force);
}

int cmd_cluster(int argc, char **argv)
{
    if (argc >= 2 && !strcmp(argv[1], "init"))
        return s_init(argc - 1, argv + 1);
    if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") ||
                      !strcmp(argv[1], "--version") || !strcmp(argv[1], "-V")))
        return s_init(argc, argv); /* init's help and version */
    fprintf(stderr, "shardwire cluster: expected 'init' (see 'shardwire cluster init --help')\n");
    return 2;
}
