/*
 * cluster_impl.h - what cluster.c (`shardwire cluster init`) and
 * cluster_files.c (its file and key helpers) share: the plan of one run and
 * the helpers that write it into a fresh folder. cluster_files.c never calls
 * cluster.c.
 */
#ifndef SW_CLUSTER_IMPL_H
#define SW_CLUSTER_IMPL_H

#include <limits.h>
#include <stddef.h>
#include <sys/types.h>

#include "keys.h"
#include "wire.h"

#define S_NODES_MAX 64
#define S_CLIENTS_MAX 16
#define S_FILES_MAX 1024
#define S_TEXT_MAX 16384

typedef struct s_init {
    char out[PATH_MAX];                      /* DIR, without a trailing '/' */
    char tmp[PATH_MAX];                      /* where everything is made first */
    int n_relays;                            /* --relay given (1..SW_PEER_MAX_RELAYS) */
    char relay_eps[SW_PEER_MAX_RELAYS][300]; /* each tcp://HOST:PORT, for peers */
    char listens[SW_PEER_MAX_RELAYS][300];   /* each relay's --listen */
    char relay_ep[SW_PEER_MAX_RELAYS * 300]; /* the list "A,B" peers are given (--relay) */
    char listen[300];                        /* the first relay's --listen */
    const char *model;                       /* --model as given, or NULL */
    int n_nodes, n_clients;                  /* counts */
    char nodes[S_NODES_MAX][SW_WIRE_NAME_MAX + 1];
    char clients[S_CLIENTS_MAX][SW_WIRE_NAME_MAX + 1];
    char layers[S_NODES_MAX][32]; /* "A:B" per node, "" when unknown */
    int n_files;                  /* files written, relative to tmp */
    char *files[S_FILES_MAX];
    char relay_pub[SW_PEER_MAX_RELAYS * (SW_KEY_Z85_LEN + 1)]; /* "Z1,Z2": --relay-key values */
    char relay_key_sh[SW_PEER_MAX_RELAYS * 32]; /* "$here/relay.pub,$here/relay-2.pub" */
    char cluster_z85[SW_KEY_Z85_LEN + 1];
    char access_z85[SW_KEY_Z85_LEN + 1];
} s_init_t;

int cl_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* snprintf into buf that fails (-1) instead of truncating. */
int cl_fmt(char *buf, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Appends printf text to a bounded buffer; sets *ovf on overflow. */
void cl_cat(char *buf, size_t cap, int *ovf, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* s quoted for sh: '...' with each ' written as '\''. */
const char *cl_shq(const char *s);
/* tmp/rel (one of four static buffers). */
const char *cl_path(const s_init_t *in, const char *rel);
int cl_track(s_init_t *in, const char *rel);
/* Makes tmp/rel a folder (0700). */
int cl_mkdir(s_init_t *in, const char *rel);
/* Writes text to tmp/rel, created exclusively with mode (0600 or 0700). */
int cl_write(s_init_t *in, const char *rel, const char *text, mode_t mode);
/* A CURVE pair as tmp/dir/name.key + .pub (0600); pub and sec (Z85) out. */
int cl_keypair(s_init_t *in, const char *dir, const char *name, char *pub, char *sec);
/* A sealing key (32 random bytes, Z85) in tmp/rel, made by gen; its Z85 text out. */
int cl_sealing_key(s_init_t *in, const char *rel, int (*gen)(const char *, char *, size_t),
                   char *z85);
/* Copies the text of tmp/from into tmp/to (0600). */
int cl_copy(s_init_t *in, const char *from, const char *to);

#endif
