/*
 * test_seal_queue.c - a sealed message is judged by its age when it reached
 * the receiver, not when the receiver read it (issue 33). A keyed relay (CURVE
 * and sealing on) and real peers: `head`, whose clock runs SW_SEAL_MAX_AGE_MS
 * - 5 s behind (machines whose clocks are apart, within what the seal allows),
 * and `tail`, which reads at once, then "computes" for 8 s without reading
 * (as a slow stage's batch holds its event loop) while head's next message
 * waits in its queue:
 *
 *  - both messages are delivered: the second reached tail about 115 s "old"
 *    and waited 8 s more in tail's own queue. It used to be dropped as a
 *    replay when read ("sent more than 120000 ms ago"), which on a 7B tail at
 *    load 25 lost a prompt chunk and left a hole that the next chunk found
 *    ("the round keeps 1777 positions but this stage has 1536");
 *  - a message that was already too old when it came (from `late`, whose
 *    clock runs SW_SEAL_MAX_AGE_MS + 3 s behind) is still dropped.
 *
 * tests/unit/test_seal.c covers the rule itself (replays stay refused).
 */
#include "sw_attack.h"

#include "seal.h"

#include <unistd.h>

static sw_peer_t *s_peer(swa_t *a, const char *who, sw_role_t role, int skew_ms)
{
    sw_sec_args_t sa = {.key_file = swa_path(a, who, ".key"),
                        .relay_key = swa_path(a, "relay", ".pub"),
                        .cluster_key = {swa_path(a, "cluster.key", ""), NULL},
                        .role = SW_SEC_STAGE};
    sw_sec_t sec;
    char err[512];
    if (sw_sec_load(&sa, a->ep, &sec, err, sizeof err) != 0) {
        fprintf(stderr, "%s keys: %s\n", who, err);
        return NULL;
    }
    sw_msg_announce_t an = {0};
    an.name = who;
    an.role = role;
    an.model_fingerprint = a->fp;
    an.model_name = "";
    an.layer_begin = role == SW_ROLE_HEAD ? 0 : 15;
    an.layer_end = role == SW_ROLE_HEAD ? 15 : 30;
    an.n_layers = SWA_LAYERS;
    an.backend = "cpu";
    an.max_sessions = 1;
    an.hidden = SWA_HIDDEN;
    sw_peer_opts_t o = {.relay = a->ep,
                        .announce = &an,
                        .connect_timeout_ms = 5000,
                        .sec = &sec,
                        .test_clock_skew_ms = skew_ms};
    sw_peer_t *p = sw_peer_new(&o);
    sw_sec_wipe(&sec);
    return p;
}

/* Sends a SessionClose of session id from p to tail; 0 when sent. */
static int s_send(sw_peer_t *p, uint64_t id)
{
    const sw_msg_t m = {.type = SW_MSG_SESSION_CLOSE,
                        .session_close = {.session_id = id, .reason = "test"}};
    return sw_peer_send_msg(p, "tail", &m);
}

/* The session id of the next SessionClose tail reads within ms, 0 for none. */
static uint64_t s_read(sw_peer_t *tail, int ms)
{
    const double until = swa_now() + ms / 1e3;
    while (swa_now() < until) {
        sw_wire_msg_t m = {0};
        const int left = (int)((until - swa_now()) * 1e3);
        if (sw_peer_recv(tail, &m, left > 0 ? left : 0) != 0)
            continue;
        sw_msg_t d;
        uint64_t id = 0;
        if (sw_codec_decode(&m, SW_MSG_SESSION_CLOSE, &d, NULL, 0) == 0)
            id = d.session_close.session_id;
        sw_wire_msg_clear(&m);
        if (id)
            return id;
    }
    return 0;
}

int main(void)
{
    static char dir[64], ep[64];
    swa_t a = {0};
    const char *nodes[] = {"head", "tail", "late", NULL};
    const char *clients[] = {NULL};
    const pid_t relay = swa_relay(&a, dir, ep, nodes, clients, NULL);
    SW_CHECK(relay > 0);
    memset(a.fp, 'a', 64);
    sw_peer_t *head = s_peer(&a, "head", SW_ROLE_HEAD, -(SW_SEAL_MAX_AGE_MS - 5000));
    sw_peer_t *late = s_peer(&a, "late", SW_ROLE_HEAD, -(SW_SEAL_MAX_AGE_MS + 3000));
    sw_peer_t *tail = s_peer(&a, "tail", SW_ROLE_TAIL, 0);
    SW_CHECK(head && late && tail);
    if (!head || !late || !tail)
        goto out;

    /* read at once: 115 s old by tail's clock, within the limit */
    SW_CHECK_INT(s_send(head, 1), 0);
    SW_CHECK(s_read(tail, 3000) == 1);
    /* tail computes for 8 s; the message waits in its queue meanwhile */
    SW_CHECK_INT(s_read(tail, 300) != 0, 0); /* nothing waits: the queue was seen empty */
    SW_CHECK_INT(s_send(head, 2), 0);
    sleep(8);
    SW_CHECK(s_read(tail, 3000) == 2); /* used to be dropped: 123 s old when read */
    /* too old when it came: dropped (the tail sees its queue empty first, so the message's
     * arrival is judged after that, not at the empty queue of before the 8 s) */
    SW_CHECK_INT(s_read(tail, 300) != 0, 0);
    SW_CHECK_INT(s_send(late, 3), 0);
    SW_CHECK(s_read(tail, 2000) == 0);
    /* and the link still works */
    SW_CHECK_INT(s_send(head, 4), 0);
    SW_CHECK(s_read(tail, 3000) == 4);

out:
    sw_peer_destroy(&head);
    sw_peer_destroy(&late);
    sw_peer_destroy(&tail);
    sw_test_kill(relay);
    swa_rmdir(dir);
    return sw_test_done();
}
