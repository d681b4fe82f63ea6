/*
 * test_frame_limit.c - messages sized by bytes (issue 33): the largest
 * Forward the protocol allows (SW_WIRE_MAX_PAYLOAD: 512 rows x 8192 x f32,
 * a 70B model's prompt window, 16 MiB exactly) crosses a keyed relay, sealed
 * end to end and encrypted by CURVE on both links, intact and without
 * dropping a link; before the frame limit counted both overheads, the 40
 * bytes of sealing and the 33 of CURVE's framing took the frame past
 * ZMQ_MAXMSGSIZE and the relay dropped the sender's connection. One value
 * more (512 x 8193 x f32) is refused at the sender with one line naming the
 * message's size and the limit, and never sent: the receiver gets nothing and
 * the relay counts no message from the sender.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec_pb.h"
#include "keys.h"
#include "peer.h"
#include "sw_fault.h"

#define ROWS 512
#define WIDE 8192 /* 512 x 8192 x 4 B = SW_WIRE_MAX_PAYLOAD */

static char s_dir[256], s_ep[64];

/* A node peer `name` with its CURVE key, the relay's public key and the cluster key (the
 * files sw_test_keys made in s_dir). */
static sw_peer_t *s_peer(const char *name)
{
    char key[320], relay_pub[320], cluster[320];
    snprintf(key, sizeof key, "%s/%s.key", s_dir, name);
    snprintf(relay_pub, sizeof relay_pub, "%s/relay.pub", s_dir);
    snprintf(cluster, sizeof cluster, "%s/cluster.key", s_dir);
    sw_sec_args_t a = {.key_file = key,
                       .relay_key = relay_pub,
                       .cluster_key = {cluster, NULL},
                       .role = SW_SEC_STAGE};
    sw_sec_t sec;
    char err[512];
    if (sw_sec_load(&a, s_ep, &sec, err, sizeof err) != 0) {
        fprintf(stderr, "keys of %s: %s\n", name, err);
        return NULL;
    }
    sw_msg_announce_t an = {0};
    an.name = name;
    an.role = SW_ROLE_MIDDLE;
    an.backend = "cpu";
    an.model_fingerprint = "5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e";
    an.layer_begin = 1;
    an.layer_end = 2;
    an.n_layers = 3;
    an.hidden = WIDE;
    sw_peer_opts_t o = {.relay = s_ep,
                        .announce = &an,
                        .connect_timeout_ms = 5000,
                        .heartbeat_ms = 200,
                        .send_timeout_ms = 30000,
                        .sec = &sec};
    sw_peer_t *p = sw_peer_new(&o);
    sw_sec_wipe(&sec);
    return p;
}

/* A Forward of ROWS rows of width hidden from `from` to `to` as an envelope (f, route, toks
 * are the caller's storage). */
static void s_forward(Shardwire__Forward *f, char **route, uint32_t *toks, uint32_t hidden)
{
    Shardwire__Forward f0 = SHARDWIRE__FORWARD__INIT;
    *f = f0;
    f->session_id = 7;
    f->round = 1;
    f->n_rows = ROWS;
    f->dtype = SHARDWIRE__DTYPE__DTYPE_F32;
    f->hidden = hidden;
    f->layer_begin = 1;
    f->n_route = 2;
    f->route = route;
    f->hop = 1;
    f->reply_to = route[0];
    for (int i = 0; i < ROWS; i++)
        toks[i] = (uint32_t)i;
    f->n_tokens = ROWS;
    f->tokens = toks;
}

/* Waits up to ms for a Forward on p: 1 when one came with payload (len bytes) intact. */
static int s_received(sw_peer_t *p, const float *payload, size_t len, int ms)
{
    const double t0 = swf_now_ms();
    while (swf_now_ms() - t0 < ms) {
        sw_wire_msg_t m = {0};
        if (sw_peer_recv(p, &m, 100) != 0)
            continue;
        size_t got = 0;
        const void *d = sw_wire_msg_payload(&m, &got);
        const int fwd = m.env->pb.body_case == SHARDWIRE__ENVELOPE__BODY_FORWARD;
        const int ok = fwd && d && got == len && !memcmp(d, payload, len);
        if (m.env->pb.body_case == SHARDWIRE__ENVELOPE__BODY_ERROR)
            fprintf(stderr, "error: %s\n", m.env->pb.error->message);
        sw_wire_msg_clear(&m);
        if (fwd)
            return ok;
    }
    return 0;
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    snprintf(s_dir, sizeof s_dir, "%s", sw_test_tmpdir());
    const char *nodes[] = {"big-a", "big-b", NULL}, *clients[] = {"client", NULL};
    SW_CHECK_INT(sw_test_keys(s_dir, nodes, clients), 0);
    sw_test_client_env(s_dir, "client"); /* shardwire status reads the relay's table */
    snprintf(s_ep, sizeof s_ep, "tcp://127.0.0.1:%d", sw_test_free_port());
    char relay_key[320], allow[320];
    snprintf(relay_key, sizeof relay_key, "%s/relay.key", s_dir);
    snprintf(allow, sizeof allow, "%s/allow.txt", s_dir);
    char *ra[] = {(char *)sw_test_bin("shardwire-relay"),
                  "--listen",
                  s_ep,
                  "--heartbeat-ms",
                  "200",
                  "--key",
                  relay_key,
                  "--allow",
                  allow,
                  NULL};
    pid_t relay = sw_test_spawn(ra, sw_test_log("relay.log"));
    SW_CHECK_INT(sw_test_wait_listen(s_ep, 30), 0);
    sw_peer_t *a = s_peer("big-a"), *b = s_peer("big-b");
    SW_CHECK(a && b);
    const size_t len = (size_t)ROWS * WIDE * sizeof(float);
    float *payload = malloc(len + (size_t)ROWS * sizeof(float));
    SW_CHECK(payload != NULL);
    if (!a || !b || !payload)
        goto out;
    for (size_t i = 0; i < len / sizeof(float) + ROWS; i++)
        payload[i] = (float)(i % 1000) * 0.25f;
    char *route[2] = {"big-a", "big-b"};
    uint32_t toks[ROWS];
    Shardwire__Forward f;
    Shardwire__Envelope env = SHARDWIRE__ENVELOPE__INIT;
    env.body_case = SHARDWIRE__ENVELOPE__BODY_FORWARD;
    env.forward = &f;

    /* 1. exactly the limit: sealed, through CURVE both ways, intact, no link dropped */
    SW_CHECK_INT(len, SW_WIRE_MAX_PAYLOAD);
    s_forward(&f, route, toks, WIDE);
    SW_CHECK_INT(sw_peer_send(a, "big-b", sw_envelope_of(&env), payload, len, 1), 0);
    SW_CHECK_INT(s_received(b, payload, len, 20000), 1);
    SW_CHECK_INT(sw_peer_announces(a), 1); // the same connection all along
    SW_CHECK_INT(sw_peer_announces(b), 1);
    long in0 = -1, out0 = -1;
    SW_CHECK_INT(swf_peer(s_ep, "big-a", &in0, NULL), 1);
    SW_CHECK_INT(swf_peer(s_ep, "big-b", NULL, &out0), 1);
    SW_CHECK_INT(in0, 1);
    SW_CHECK_INT(out0, 1);

    /* 2. one value per row more: refused at the sender with its size and the limit */
    s_forward(&f, route, toks, WIDE + 1);
    char err[512] = "";
    const size_t big = (size_t)ROWS * (WIDE + 1) * sizeof(float);
    SW_CHECK_INT(sw_wire_validate(&env, 1, big, err, sizeof err), SW_WIRE_EMALFORMED);
    fprintf(stderr, "refused: %s\n", err);
    char size_s[32], limit_s[32];
    snprintf(size_s, sizeof size_s, "%zu bytes", big);
    snprintf(limit_s, sizeof limit_s, "limit of %u bytes", SW_WIRE_MAX_PAYLOAD);
    SW_CHECK(strstr(err, size_s) != NULL && strstr(err, limit_s) != NULL);
    SW_CHECK_INT(sw_peer_send(a, "big-b", sw_envelope_of(&env), payload, big, 1),
                 SW_WIRE_EMALFORMED);
    SW_CHECK_INT(s_received(b, payload, big, 1500), 0);
    long in1 = -1;
    SW_CHECK_INT(swf_peer(s_ep, "big-a", &in1, NULL), 1);
    SW_CHECK_INT(in1, in0); // nothing went to the relay
    SW_CHECK_INT(sw_peer_announces(a), 1);
out:
    free(payload);
    sw_peer_destroy(&a);
    sw_peer_destroy(&b);
    sw_test_kill(relay);
    return sw_test_done();
}
