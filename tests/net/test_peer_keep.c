/*
 * test_peer_keep.c - what arrives while a peer waits for a peer table is kept
 * for it, in order, up to the bound (net/peer_impl.h SW_PEER_QUEUE_MAX). A
 * keyed relay and real peers: `head` sends N SessionClose messages to `mid`
 * while `mid` is not reading; then `mid` asks the relay for its peer table
 * (sw_peer_status, as the gateway's dispatcher does at most once a second
 * while it streams every generation's tokens), which reads all N first and
 * keeps them.
 *
 *  - N = 1000: all 1000 come out of sw_peer_recv after the table, in the
 *    order sent. The ring was 64 messages long: 936 were dropped ("queue
 *    full, dropped a session_close"), which on a gateway with many streams
 *    lost token chunks (the client library recovered them by a Resume, at a
 *    round trip's cost);
 *  - 70 Forwards of about 1 MiB each: the queue holds at most
 *    SW_PEER_QUEUE_BYTES of them (the first), drops the rest, and the peer
 *    still works. (Its count bound, SW_PEER_QUEUE_MAX, is not reached through
 *    a relay: the relay's per-peer queue, rate and the socket's own queue
 *    hold far fewer in one round trip.)
 */
#include "sw_attack.h"

#include "peer_impl.h"

#include <unistd.h>

/* Sends SessionClose id first..last from p to mid, one every gap_us; the number sent. */
static int s_send(sw_peer_t *p, uint64_t first, uint64_t last, int gap_us)
{
    int n = 0;
    for (uint64_t id = first; id <= last; id++) {
        const sw_msg_t m = {.type = SW_MSG_SESSION_CLOSE,
                            .session_close = {.session_id = id, .reason = "k"}};
        n += sw_peer_send_msg(p, "mid", &m) == 0;
        if (gap_us)
            usleep((useconds_t)gap_us);
    }
    return n;
}

#define S_BIG_ROWS 448 /* rows of one big Forward: 448 x 576 x 4 bytes = 1,032,192 */

/* Sends n Forwards of S_BIG_ROWS rows (session ids first, first + 1, ...) from p to mid, one
 * every 20 ms (within the relay's byte rate); the number sent. */
static int s_send_big(sw_peer_t *p, uint64_t first, int n)
{
    static float hidden[S_BIG_ROWS * SWA_HIDDEN];
    const char *const route[] = {"head", "mid"};
    int sent = 0;
    for (int k = 0; k < n; k++) {
        sent +=
            swa_forward_rows(p, "mid", route, 10, first + (uint64_t)k, 1, S_BIG_ROWS, hidden) == 0;
        usleep(20000);
    }
    return sent;
}

/* Waits until mid's socket has had time to take what head sent (the relay forwards at once on
 * loopback), then asks for the table: 0 when it came. */
static int s_table(sw_peer_t *mid)
{
    usleep(1500 * 1000);
    sw_wire_msg_t t = {0};
    const int rc = sw_peer_status(mid, &t, 10000);
    sw_wire_msg_clear(&t);
    return rc;
}

/* Reads mid's messages until none comes for 500 ms: how many of type, and whether their session
 * ids ran first, first + 1, ... without a gap. */
static int s_drain(sw_peer_t *mid, sw_msg_type_t type, uint64_t first, int *in_order)
{
    int n = 0;
    *in_order = 1;
    for (;;) {
        sw_wire_msg_t m = {0};
        if (sw_peer_recv(mid, &m, 500) != 0)
            break;
        sw_msg_t d;
        if (sw_codec_decode(&m, type, &d, NULL, 0) == 0) {
            const uint64_t id =
                type == SW_MSG_FORWARD ? d.forward.session_id : d.session_close.session_id;
            *in_order &= id == first + (uint64_t)n;
            n++;
        }
        sw_wire_msg_clear(&m);
    }
    return n;
}

int main(void)
{
    static char dir[64], ep[64];
    swa_t a = {0};
    const char *nodes[] = {"head", "mid", NULL};
    const char *clients[] = {NULL};
    const pid_t relay = swa_relay(&a, dir, ep, nodes, clients, NULL);
    SW_CHECK(relay > 0);
    memset(a.fp, 'a', 64);
    sw_peer_t *head = swa_member(&a, "head", 0, 10);
    sw_peer_t *mid = swa_member(&a, "mid", 10, 20);
    SW_CHECK(head && mid);
    if (!head || !mid)
        goto out;

    /* 1000 at 1 a millisecond (within the relay's rate), while mid reads nothing */
    int in_order = 0;
    SW_CHECK_INT(s_send(head, 1, 1000, 1000), 1000);
    SW_CHECK_INT(s_table(mid), 0);
    SW_CHECK_INT(sw_peer_pending(mid), 1000);
    const int got = s_drain(mid, SW_MSG_SESSION_CLOSE, 1, &in_order);
    printf("1000 sent while mid waited for its peer table: %d kept, in order: %s\n", got,
           in_order ? "yes" : "no");
    SW_CHECK_INT(got, 1000);
    SW_CHECK(in_order);

    /* the byte bound: 70 MiB sent, at most SW_PEER_QUEUE_BYTES kept (the first ones) */
    const size_t one = (size_t)S_BIG_ROWS * SWA_HIDDEN * sizeof(float);
    SW_CHECK_INT(s_send_big(head, 5001, 70), 70);
    SW_CHECK_INT(s_table(mid), 0);
    const int pending = sw_peer_pending(mid);
    const int kept = s_drain(mid, SW_MSG_FORWARD, 5001, &in_order);
    printf("70 Forwards of %zu bytes sent: %d kept (%d pending), bound %u bytes, in order: %s\n",
           one, kept, pending, SW_PEER_QUEUE_BYTES, in_order ? "yes" : "no");
    SW_CHECK_INT(kept, pending);
    SW_CHECK(kept >= 60 && kept < 70);
    SW_CHECK((size_t)kept * one <= SW_PEER_QUEUE_BYTES);
    SW_CHECK(in_order);

    /* and it still works */
    SW_CHECK_INT(s_send(head, 90001, 90003, 0), 3);
    SW_CHECK_INT(s_drain(mid, SW_MSG_SESSION_CLOSE, 90001, &in_order), 3);
    SW_CHECK(in_order);

out:
    sw_peer_destroy(&head);
    sw_peer_destroy(&mid);
    sw_test_kill(relay);
    swa_rmdir(dir);
    return sw_test_done();
}
