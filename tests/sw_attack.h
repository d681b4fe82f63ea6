/*
 * sw_attack.h - helpers for the tests that attack a keyed cluster of real
 * processes (tests/net/test_route.c, test_fair.c, tests/slow/
 * test_relay_memory.c): peers holding a node key and the cluster key (a
 * compromised member) or a client key and the access key, the model
 * fingerprint anyone reads from `shardwire status`, and Forwards of any shape
 * with the answer they get. Keys come from sw_test_keys(). Header-only
 * (static functions) so that each test executable stays one .c file.
 */
#ifndef SW_ATTACK_H
#define SW_ATTACK_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "keys.h"
#include "peer.h"
#include "sw_test.h"
#include "wire.h"

#define SWA_HIDDEN 576 /* SmolLM2-135M */
#define SWA_LAYERS 30
#define SWA_VERDICT 100 /* swa_shape: a Verdict came back */

typedef struct swa {
    const char *dir; /* sw_test_keys' folder */
    const char *ep;  /* the relay */
    char fp[65];     /* the nodes' model fingerprint */
} swa_t;

static __attribute__((unused)) const char *swa_path(const swa_t *a, const char *name,
                                                    const char *ext)
{
    static char buf[8][256];
    static int slot;
    char *p = buf[slot++ % 8];
    snprintf(p, 256, "%s/%s%s", a->dir, name, ext);
    return p;
}

/* The model fingerprint of the nodes, from `shardwire status --json` (anyone may read it);
 * 0 when found. */
static __attribute__((unused)) int swa_fingerprint(swa_t *a)
{
    char *argv[] = {
        (char *)sw_test_bin("shardwire"), "status", "--relay", (char *)a->ep, "--json", NULL};
    char *out = NULL;
    a->fp[0] = 0;
    if (sw_test_run(argv, 20, &out, NULL) == 0 && out) {
        const char *m = strstr(out, "\"model\":\"");
        while (m && m[9] == '"') /* a client's empty fingerprint */
            m = strstr(m + 9, "\"model\":\"");
        if (m)
            snprintf(a->fp, sizeof a->fp, "%.64s", m + 9);
    }
    free(out);
    return strlen(a->fp) == 64 ? 0 : -1;
}

/* A peer with `who`'s node key and the cluster key, announced as a head of layers [0, end),
 * or (begin > 0) a middle stage of [begin, end): what a compromised node can do. */
static __attribute__((unused)) sw_peer_t *swa_member(const swa_t *a, const char *who,
                                                     uint32_t begin, uint32_t end)
{
    sw_sec_args_t sa = {.key_file = swa_path(a, who, ".key"),
                        .relay_key = swa_path(a, "relay", ".pub"),
                        .cluster_key = {swa_path(a, "cluster.key", ""), NULL},
                        .role = SW_SEC_STAGE};
    sw_sec_t sec;
    char err[512];
    if (sw_sec_load(&sa, a->ep, &sec, err, sizeof err) != 0) {
        fprintf(stderr, "member keys: %s\n", err);
        return NULL;
    }
    sw_msg_announce_t an = {0};
    an.name = who;
    an.role = begin ? SW_ROLE_MIDDLE : SW_ROLE_HEAD;
    an.model_fingerprint = (char *)a->fp;
    an.layer_begin = begin;
    an.layer_end = end;
    an.n_layers = SWA_LAYERS;
    an.backend = "cpu";
    an.max_sessions = 1;
    an.hidden = SWA_HIDDEN;
    sw_peer_opts_t o = {.relay = a->ep, .announce = &an, .connect_timeout_ms = 5000, .sec = &sec};
    sw_peer_t *p = sw_peer_new(&o);
    sw_sec_wipe(&sec);
    return p;
}

/* A client peer with `who`'s client key and the access key. */
static __attribute__((unused)) sw_peer_t *swa_client(const swa_t *a, const char *who)
{
    sw_sec_args_t sa = {.key_file = swa_path(a, who, ".key"),
                        .relay_key = swa_path(a, "relay", ".pub"),
                        .access_key = {swa_path(a, "access.key", ""), NULL}};
    sw_sec_t sec;
    char err[512];
    if (sw_sec_load(&sa, a->ep, &sec, err, sizeof err) != 0) {
        fprintf(stderr, "client keys: %s\n", err);
        return NULL;
    }
    sw_msg_announce_t an = {0};
    an.name = who;
    an.role = SW_ROLE_CLIENT;
    an.backend = "";
    an.model_fingerprint = "";
    sw_peer_opts_t o = {.relay = a->ep,
                        .announce = &an,
                        .connect_timeout_ms = 5000,
                        .sec = &sec,
                        .accept_clear_errors = 1};
    sw_peer_t *p = sw_peer_new(&o);
    sw_sec_wipe(&sec);
    return p;
}

/*
 * Sends one Forward of 2 rows (f32 hidden states, tokens {1, last}) from p to dest:
 * layer_begin, the route (n names), hop and reply_to; with draft != 0 the second row is a
 * draft of token `last` = draft (a draft outside the vocabulary fails verification at the
 * tail). Returns what came back within 3 s: the code of an Error from dest, SWA_VERDICT for
 * a Verdict, -1 for nothing (-2: not sent).
 */
static __attribute__((unused)) int swa_shape(sw_peer_t *p, const char *dest, uint32_t layer_begin,
                                             const char **route, int n, uint32_t hop,
                                             const char *reply_to, uint64_t sid, uint32_t draft)
{
    static float hidden[2 * SWA_HIDDEN];
    uint32_t toks[2] = {1, draft ? draft : 2}, drafts[1] = {draft};
    Shardwire__Forward f = SHARDWIRE__FORWARD__INIT;
    f.session_id = sid;
    f.round = 1;
    f.n_rows = 2;
    f.n_tokens = 2;
    f.tokens = toks;
    f.n_draft_tokens = draft ? 1 : 0;
    f.draft_tokens = drafts;
    f.dtype = SHARDWIRE__DTYPE__DTYPE_F32;
    f.hidden = SWA_HIDDEN;
    f.layer_begin = layer_begin;
    f.n_route = (size_t)n;
    f.route = (char **)route;
    f.hop = hop;
    f.reply_to = (char *)reply_to;
    Shardwire__Envelope env = SHARDWIRE__ENVELOPE__INIT;
    env.body_case = SHARDWIRE__ENVELOPE__BODY_FORWARD;
    env.forward = &f;
    if (sw_peer_send(p, dest, &env, hidden, sizeof hidden, 1) != 0)
        return -2;
    int wait_ms = 3000;
    for (;;) {
        sw_wire_msg_t m = {0};
        if (sw_peer_recv(p, &m, wait_ms) != 0)
            return -1;
        int got = -1;
        if (!strcmp(m.peer, dest) && m.env->body_case == SHARDWIRE__ENVELOPE__BODY_ERROR)
            got = m.env->error->code;
        else if (m.env->body_case == SHARDWIRE__ENVELOPE__BODY_VERDICT &&
                 m.env->verdict->session_id == sid)
            got = SWA_VERDICT;
        sw_wire_msg_clear(&m);
        if (got != -1)
            return got;
        wait_ms = 1000;
    }
}

#endif
