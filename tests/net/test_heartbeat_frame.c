/*
 * test_heartbeat_frame.c - a peer that is slowly sending (or receiving) one
 * large frame is alive and must not be declared dead, while a stopped peer
 * must be (tests/e2e/test_recover.c checks the stopped one).
 *
 * A 16 MiB Forward payload (the largest frame the protocol allows) crosses a
 * shardwire-wanem link capped at 40 Mbit/s, so it takes about 3.4 s: many
 * times the relay's heartbeat timeout (--heartbeat-ms 200: dead after 1 s of
 * silence) and the peers' (10 x 200 ms). ZMTP answers a PING only between
 * frames, so a liveness rule based on whole messages would drop the link
 * mid-frame. Both directions are tested:
 *
 *  1. upload: "slow-up" (behind the capped link) sends the frame to "sink";
 *  2. download: "fast" sends the frame to "slow-down" (behind the link).
 *
 * Each time the slow peer must stay in the relay's table for the whole
 * transfer, the frame must arrive intact, and no side may reconnect.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "codec_pb.h"
#include "peer.h"
#include "sw_fault.h"

#define ROWS 512
#define HIDDEN 8192 /* 512 x 8192 x 4 B = 16 MiB = SW_WIRE_MAX_PAYLOAD */

static sw_peer_t *s_peer(const char *ep, const char *name)
{
    sw_msg_announce_t an = {0};
    an.name = name;
    an.role = SW_ROLE_CLIENT;
    an.model_fingerprint = "";
    an.backend = "";
    sw_peer_opts_t po = {
        .relay = ep, .announce = &an, .heartbeat_ms = 200, .send_timeout_ms = 30000};
    return sw_peer_new(&po);
}

/* Sends the 16 MiB Forward from `from` to `to`. */
static int s_send_big(sw_peer_t *from, const char *to, const float *payload)
{
    char *route[2] = {(char *)sw_peer_name(from), (char *)to};
    Shardwire__Forward f = SHARDWIRE__FORWARD__INIT;
    f.session_id = 7;
    f.round = 1;
    f.n_rows = ROWS;
    f.dtype = SHARDWIRE__DTYPE__DTYPE_F32;
    f.hidden = HIDDEN;
    f.layer_begin = 1;
    f.n_route = 2;
    f.route = route;
    f.hop = 1;
    f.reply_to = route[0];
    uint32_t toks[ROWS];
    for (int i = 0; i < ROWS; i++)
        toks[i] = (uint32_t)i;
    f.n_tokens = ROWS;
    f.tokens = toks;
    Shardwire__Envelope env = SHARDWIRE__ENVELOPE__INIT;
    env.body_case = SHARDWIRE__ENVELOPE__BODY_FORWARD;
    env.forward = &f;
    return sw_peer_send(from, to, sw_envelope_of(&env), payload,
                        (size_t)ROWS * HIDDEN * sizeof(float), 1);
}

/* Waits for the frame on `at` while checking every 200 ms that `slow` stays
 * in the relay's table. Returns the transfer time in ms, or -1. */
static double s_transfer(const char *relay_ep, sw_peer_t *at, const char *slow,
                         const float *payload, double t0, int *dropped)
{
    double last_check = 0;
    *dropped = 0;
    while (swf_now_ms() - t0 < 60000) {
        sw_wire_msg_t m = {0};
        int rc = sw_peer_recv(at, &m, 100);
        if (rc < 0)
            return -1;
        if (rc == 0) {
            size_t len = 0;
            const void *p = sw_wire_msg_payload(&m, &len);
            int ok = m.env->pb.body_case == SHARDWIRE__ENVELOPE__BODY_FORWARD && p &&
                     len == (size_t)ROWS * HIDDEN * sizeof(float) && !memcmp(p, payload, len);
            if (m.env->pb.body_case == SHARDWIRE__ENVELOPE__BODY_ERROR)
                fprintf(stderr, "error: %s\n", m.env->pb.error->message);
            sw_wire_msg_clear(&m);
            if (ok)
                return swf_now_ms() - t0;
            continue;
        }
        if (swf_now_ms() - last_check > 200) {
            last_check = swf_now_ms();
            if (swf_peer(relay_ep, slow, NULL, NULL) == 0) {
                fprintf(stderr, "%s left the relay's table %.0f ms into the transfer\n", slow,
                        swf_now_ms() - t0);
                (*dropped)++;
            }
        }
    }
    return -1;
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const int port = sw_test_free_port();
    char ep[64], wan_ep[64], listen[32], connect[32];
    snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", port);
    snprintf(connect, sizeof connect, "127.0.0.1:%d", port);
    char *ra[] = {(char *)sw_test_bin("shardwire-relay"),
                  "--listen",
                  ep,
                  "--heartbeat-ms",
                  "200",
                  "--insecure-loopback",
                  NULL};
    pid_t relay = sw_test_spawn(ra, sw_test_log("relay_wanem.log"));
    const int wport = sw_test_free_port();
    snprintf(listen, sizeof listen, "127.0.0.1:%d", wport);
    snprintf(wan_ep, sizeof wan_ep, "tcp://127.0.0.1:%d", wport);
    char *wa[] = {(char *)sw_test_bin("shardwire-wanem"),
                  "--listen",
                  listen,
                  "--connect",
                  connect,
                  "--delay-ms",
                  "5",
                  "--rate-kbps",
                  "40000",
                  NULL};
    pid_t wan = sw_test_spawn(wa, sw_test_log("relay_wanem.log"));
    SW_CHECK_INT(sw_test_wait_listen(ep, 30), 0);
    SW_CHECK_INT(sw_test_wait_listen(wan_ep, 30), 0);

    float *payload = malloc((size_t)ROWS * HIDDEN * sizeof(float));
    SW_CHECK(payload != NULL);
    for (size_t i = 0; payload && i < (size_t)ROWS * HIDDEN; i++)
        payload[i] = (float)(i % 1000) * 0.5f;

    sw_peer_t *up = s_peer(wan_ep, "slow-up");
    sw_peer_t *sink = s_peer(ep, "sink");
    SW_CHECK(up && sink);
    if (up && sink && payload) {
        /* 1. slow upload */
        const double t0 = swf_now_ms();
        SW_CHECK_INT(s_send_big(up, "sink", payload), 0);
        int dropped = 0;
        double ms = s_transfer(ep, sink, "slow-up", payload, t0, &dropped);
        fprintf(stderr, "upload: 16 MiB through 40 Mbit/s in %.0f ms, dropped %d time(s)\n", ms,
                dropped);
        SW_CHECK(ms > 2000); // it really was slow (several heartbeat timeouts)
        SW_CHECK_INT(dropped, 0);
        SW_CHECK_INT(swf_peer(ep, "slow-up", NULL, NULL), 1);
    }
    sw_peer_destroy(&up);
    sw_peer_destroy(&sink);

    sw_peer_t *down = s_peer(wan_ep, "slow-down");
    sw_peer_t *fast = s_peer(ep, "fast");
    SW_CHECK(down && fast);
    if (down && fast && payload) {
        /* 2. slow download */
        const double t0 = swf_now_ms();
        SW_CHECK_INT(s_send_big(fast, "slow-down", payload), 0);
        int dropped = 0;
        double ms = s_transfer(ep, down, "slow-down", payload, t0, &dropped);
        fprintf(stderr, "download: 16 MiB through 40 Mbit/s in %.0f ms, dropped %d time(s)\n", ms,
                dropped);
        SW_CHECK(ms > 2000);
        SW_CHECK_INT(dropped, 0);
        SW_CHECK_INT(swf_peer(ep, "slow-down", NULL, NULL), 1);
    }
    sw_peer_destroy(&down);
    sw_peer_destroy(&fast);
    free(payload);
    sw_test_kill(wan);
    sw_test_kill(relay);
    return sw_test_done();
}
