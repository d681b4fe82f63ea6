/*
 * keys.h - key files and the security settings of a shardwire process.
 *
 * Four kinds of keys (docs/security.md has the whole model):
 *
 * - CURVE key pairs (transport, CurveZMQ): the relay has one, every peer
 *   (node, client) has one. A secret key file holds the Z85 secret key (40
 *   characters) on its first line that is not a '#' comment; the public key
 *   is derived from it. A public key file (or a literal argument) holds the
 *   Z85 public key. Secret key files must not be readable by group or others
 *   (mode 0600 or stricter), and the well-known test keys printed in the
 *   ZeroMQ documentation (zmq_curve(7)) are refused wherever a key is loaded.
 * - The cluster key (end-to-end sealing of stage-to-stage traffic: Forward,
 *   Verdict, session messages; seal.h): 32 random bytes, stored as Z85 in a
 *   0600 file, held by the nodes only (head, middle, tail), never by clients
 *   or the relay.
 * - The access key (end-to-end sealing of client <-> head traffic:
 *   GenerateRequest, TokenChunk, Cancel, Resume, errors): the same format,
 *   held by the clients and the heads. Holding it never lets anyone open or
 *   forge stage-to-stage traffic. During a rotation a process may hold two
 *   keys of each kind.
 * - The relay's allow-list: one key per line bound to a role and a name,
 *   "KEY head NAME", "KEY stage NAME" (middle or tail), "KEY client [NAME]"
 *   ("KEY node NAME": a node key bound to its name only); '#' starts a comment.
 *
 * sw_sec_t bundles what a peer needs; sw_sec_load() fills it from command-line
 * flags (or the SW_KEY / SW_RELAY_KEY / SW_CLUSTER_KEY / SW_ACCESS_KEY
 * environment variables when a flag is absent), checks that the process's
 * role holds the right symmetric keys, and enforces the loopback-only rule of
 * the insecure development mode. Secrets live in the struct; sw_sec_wipe()
 * zeroes them.
 */
#ifndef SW_KEYS_H
#define SW_KEYS_H

#include <stddef.h>
#include <stdint.h>

#include "sw_limits.h"

#define SW_KEY_Z85_LEN 40       /* characters of a Z85 CURVE key */
#define SW_CLUSTER_KEY_BYTES 32 /* crypto_aead_xchacha20poly1305_ietf_KEYBYTES */
#define SW_CLUSTER_KEYS_MAX 2   /* keys of one kind accepted at once (rotation) */
#define SW_ALLOW_MAX 4096       /* entries in an allow-list */
#define SW_KEY_FP_LEN 32        /* hex digits of a key fingerprint (SW_WIRE_KEY_FP_LEN) */

/* 0 when this libzmq has CURVE; -1 with a line in err otherwise. */
int sw_keys_curve_check(char *err, size_t err_len) __attribute__((warn_unused_result));

/* 1 when z85 (40 chars) is one of the ZeroMQ documentation's test keys. */
int sw_keys_is_test_key(const char *z85);

/*
 * Writes a new CURVE key pair: PREFIX.key (secret, mode 0600, created
 * exclusively: an existing file is not overwritten) and PREFIX.pub (public).
 * pub_out (41 bytes) receives the public key when not NULL.
 */
int sw_keys_generate(const char *prefix, char *pub_out, char *err, size_t err_len)
    __attribute__((warn_unused_result));

/* Writes a new random cluster key to path (mode 0600, created exclusively). */
int sw_cluster_key_generate(const char *path, char *err, size_t err_len)
    __attribute__((warn_unused_result));

/* Writes a new random access key to path (mode 0600, created exclusively). */
int sw_access_key_generate(const char *path, char *err, size_t err_len)
    __attribute__((warn_unused_result));

/*
 * Loads a CURVE secret key file: refuses a file others can read, a malformed
 * key and a test key. pub and sec are 41-byte buffers (Z85 + NUL).
 */
int sw_keys_load_secret(const char *path, char *pub, char *sec, char *err, size_t err_len)
    __attribute__((warn_unused_result));

/* Loads a public key given literally (40 Z85 chars) or as a file path. */
int sw_keys_load_public(const char *file_or_z85, char *pub, char *err, size_t err_len)
    __attribute__((warn_unused_result));

/*
 * The fingerprint of a CURVE public key given in Z85 (40 characters):
 * BLAKE2b-128 of its 32 bytes, as 32 lower-case hex digits and a NUL in out.
 * It is what the relay says a peer's key is (the source frame "NAME@FP",
 * PeerInfo.key_fp) and what the head binds a client's requests to. 0, or -1
 * (out "") when z85 is not a key.
 */
int sw_keys_fingerprint(const char *z85, char out[SW_KEY_FP_LEN + 1]);

/* Loads a cluster or access key file (0600, Z85 of 32 bytes; both kinds share the format). */
int sw_cluster_key_load(const char *path, uint8_t key[SW_CLUSTER_KEY_BYTES], char *err,
                        size_t err_len) __attribute__((warn_unused_result));

/* The role an allow-list entry gives its key. */
enum sw_allow_role {
    SW_ALLOW_CLIENT = 0, /* "KEY client [NAME]" (or the old "KEY"): may announce as a client only */
    SW_ALLOW_NODE = 1,   /* "KEY head|stage|node NAME" (or the old "KEY NAME"): a node */
};

/* The node roles a node key's entry permits (issue 21, finding 9). */
enum sw_allow_bind {
    SW_BIND_ANY = 0,   /* "KEY node NAME" (or "KEY NAME"): head, middle or tail, as it likes */
    SW_BIND_HEAD = 1,  /* "KEY head NAME": a head only (layers from 0, or all of them) */
    SW_BIND_STAGE = 2, /* "KEY stage NAME": a middle or tail node only (auto nodes too) */
};

/* One allow-list entry. */
typedef struct sw_allow_entry {
    char key[SW_KEY_Z85_LEN + 1]; /* Z85 public key */
    char name[64];                /* the only name it may announce; "" = any (clients only) */
    int role;                     /* enum sw_allow_role */
    int bind;                     /* nodes: enum sw_allow_bind; SW_BIND_ANY for clients */
    int line;                     /* its line in the file */
    int legacy; /* line number when written in the old "KEY [NAME]" form, else 0 */
} sw_allow_entry_t;

/*
 * Parses an allow-list file into *entries (malloc'd, caller frees) and *n.
 * Lines: "KEY head NAME", "KEY stage NAME" (a node key bound to its name and
 * role), "KEY node NAME" (bound to its name only), "KEY client [NAME]", and
 * the old forms "KEY NAME" (= node NAME) and "KEY" (= client). A key may appear on one line only.
 * Any bad line fails the whole file (a half-read list could lock out or let in the wrong peer). An
 * empty list is valid (nobody gets in).
 */
int sw_allow_load(const char *path, sw_allow_entry_t **entries, int *n, char *err, size_t err_len)
    __attribute__((warn_unused_result));

/* The entry of Z85 key `key` in list[0..n), or NULL (not on the list, or key NULL). */
const sw_allow_entry_t *sw_allow_find(const sw_allow_entry_t *list, int n, const char *key);

/*
 * Whether key `key` may announce as `name` with `role` (enum sw_role, codec.h) under the
 * allow-list list[0..n): its entry binds a role and maybe a name, and a name listed for
 * some key is reserved for the keys that list it. The relay checks every announce with it,
 * a node's listener every dialling key (net/direct.c). 0, or -1 with the reason in why.
 */
int sw_allow_permit(const sw_allow_entry_t *list, int n, const char *key, const char *name,
                    int role, char *why, size_t why_len);

/* 1 when the endpoint is loopback only: tcp://127.x.x.x, localhost, [::1], ipc://, inproc://;
 * a list of relays "A,B" (args.h) when every one of them is. */
int sw_endpoint_is_loopback(const char *endpoint);
/* What sw_endpoint_is_loopback takes, for the refusals that name it. */
#define SW_LOOPBACK_FORMS "tcp:// to 127.x.y.z, localhost or [::1], or ipc://, inproc://"

/* What a process is, for the keys it must (not) hold: set by the caller. */
enum sw_sec_role {
    SW_SEC_CLIENT =
        0,           /* run, status, serve, the client library: --access-key, never --cluster-key */
    SW_SEC_HEAD = 1, /* a node whose layers start at 0: --cluster-key and --access-key */
    SW_SEC_STAGE = 2, /* a middle or tail node: --cluster-key only */
};

/* Command-line security flags of a peer (node or client). NULL = not given. */
typedef struct sw_sec_args {
    const char *key_file;                         /* --key: own CURVE secret key file */
    const char *relay_key;                        /* --relay-key: relay public key (file or Z85) */
    const char *cluster_key[SW_CLUSTER_KEYS_MAX]; /* --cluster-key (twice during a rotation) */
    const char *access_key[SW_CLUSTER_KEYS_MAX];  /* --access-key (twice during a rotation) */
    int insecure_loopback;                        /* --insecure-loopback */
    int role;         /* enum sw_sec_role, set by the caller (0 = client) */
    int e2e_optional; /* set by the caller: talks only to the relay (shardwire status) */
} sw_sec_args_t;

/* getopt_long entries for the five flags above (include <getopt.h> first). */
#define SW_SEC_OPT_BASE 0x5e00
#define SW_SEC_LONGOPTS                                                                            \
    {"key", required_argument, 0, SW_SEC_OPT_BASE},                                                \
        {"relay-key", required_argument, 0, SW_SEC_OPT_BASE + 1},                                  \
        {"cluster-key", required_argument, 0, SW_SEC_OPT_BASE + 2},                                \
        {"insecure-loopback", no_argument, 0, SW_SEC_OPT_BASE + 3},                                \
    {                                                                                              \
        "access-key", required_argument, 0, SW_SEC_OPT_BASE + 4                                    \
    }
#define SW_SEC_USAGE                                                                               \
    "  --key FILE             own CURVE secret key (shardwire keygen --out PREFIX; env SW_KEY)\n"  \
    "  --relay-key FILE|Z85   the relay's public key (PREFIX.pub; env SW_RELAY_KEY); with\n"       \
    "                         several relays one per relay, in --relay's order: K1,K2\n"           \
    "  --access-key FILE      clients and heads: the client<->head key; twice while rotating\n"    \
    "                         (shardwire keygen --access-key FILE; env SW_ACCESS_KEY)\n"           \
    "  --cluster-key FILE     nodes only: the stage-to-stage key; twice while rotating\n"          \
    "                         (env SW_CLUSTER_KEY)\n"                                              \
    "  --insecure-loopback    no keys, no encryption: loopback relay only (tests)\n"

/*
 * Handles getopt_long's value c when it is one of SW_SEC_LONGOPTS: 1 handled,
 * 0 not a security flag, -1 error (a line on stderr, e.g. a third --cluster-key).
 * Role checks (a client given --cluster-key) happen in sw_sec_load.
 */
int sw_sec_args_opt(sw_sec_args_t *a, int c, const char *arg);

/* A peer's loaded security settings. */
typedef struct sw_sec {
    int insecure;                                           /* 1 = no CURVE (loopback only) */
    char pub[SW_KEY_Z85_LEN + 1];                           /* own CURVE public key */
    char sec[SW_KEY_Z85_LEN + 1];                           /* own CURVE secret key */
    char relay_pub[SW_PEER_MAX_RELAYS][SW_KEY_Z85_LEN + 1]; /* each relay's pinned public key */
    int n_relay_pub;                                        /* keys in relay_pub (one per relay) */
    int n_cluster;                                          /* cluster keys held (0..2) */
    uint8_t cluster[SW_CLUSTER_KEYS_MAX][SW_CLUSTER_KEY_BYTES]; /* [0] seals; all open */
    int n_access;                                               /* access keys held (0..2) */
    uint8_t access[SW_CLUSTER_KEYS_MAX][SW_CLUSTER_KEY_BYTES];  /* [0] seals; all open */
} sw_sec_t;

/*
 * Loads the keys named by args (falling back to the environment variables
 * SW_KEY, SW_RELAY_KEY, SW_CLUSTER_KEY and SW_ACCESS_KEY for absent flags).
 * Without --insecure-loopback the CURVE keys are required, and the symmetric
 * keys of the role: a client needs an access key (unless e2e_optional) and
 * is refused a cluster key; a head needs both; a stage needs the cluster key
 * and is refused an access key given as a flag (the variable is ignored). An
 * access key equal to a cluster key is refused. With --insecure-loopback the
 * endpoint must be loopback and the symmetric keys are optional. One error
 * line in err on failure.
 */
int sw_sec_load(const sw_sec_args_t *args, const char *endpoint, sw_sec_t *out, char *err,
                size_t err_len) __attribute__((warn_unused_result));

/* Zeroes the secrets in s. */
void sw_sec_wipe(sw_sec_t *s);

#endif
