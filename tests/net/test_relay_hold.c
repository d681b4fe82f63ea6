/*
 * test_relay_hold.c - the relay's hold of messages for a full destination
 * (docs/protocol.md section 5, "dest's queue is full"; docs/security.md
 * section 6): up to 8 messages per sender and destination are held and go
 * out first, in order, when the destination takes messages again; beyond 8
 * a message is dropped with ERR_DEST_BUSY naming the destination, and a
 * held message that waited 5 s is dropped with ERR_DEST_BUSY too.
 *
 * A keyed relay (real process) with --queue-mib 17 (its smallest budget) and
 * four node keys on raw CURVE sockets of this process: "dst" reads nothing
 * for a while (its receive queue is one message, so its libzmq stops reading
 * the TCP link and the relay's budget for it fills); "c" fills that budget
 * (72 messages: what passes, 8 held, the rest refused), then "a" and "b"
 * send 20 each. Messages are 1 MiB, their header carries a sequence number.
 * c's held messages go first, so the counts of a and b are exact even though
 * a full TCP link still takes a frame now and then (a partly written frame
 * completes, and the budget frees a whole one):
 *
 *  1. a and b each hear 12 ERR_DEST_BUSY naming dst: 8 of each are held;
 *  2. dst reads within 5 s: it gets everything the relay counts as forwarded
 *     to it (PeerInfo.msgs_out), c's, then a's 0..7 and b's 0..7, in order,
 *     and no sender hears of a drop;
 *  3. c fills again, a sends 20 and dst reads nothing for 8 s: a hears its 12
 *     refusals at once and 8 ERR_DEST_BUSY ("took no messages for 5000 ms")
 *     5 to 8 s after sending; dst, reading again, never gets any of them.
 *
 * The relay's heartbeat is 5 s (a peer silent for 25 s is dropped), so dst's
 * pauses do not end it.
 */
#include "codec_pb.h"
#include "sw_attack.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MSG_BYTES (1u << 20)
#define HOLD 8       /* docs: per sender and destination */
#define HOLD_S 5.0   /* docs: then dropped */
#define N_FILL 72    /* c's: more than the budget and the kernel's buffers take + HOLD */
#define N_AB 20      /* a's and b's: more than HOLD */
#define SEQ_BASE 100 /* part 3's sequence numbers start here */

static swa_t s_a;
static char s_dir[64];
static char s_ep[64];
static uint8_t s_payload[MSG_BYTES];

static void s_nofree(void *data, void *hint)
{
    (void)data;
    (void)hint;
}

/* Sends n messages [dst][header "seq N"][1 MiB] from s, numbered from first; how many left. */
static int s_send(void *s, int first, int n)
{
    int sent = 0;
    for (int i = 0; i < n; i++) {
        char hdr[32];
        int len = snprintf(hdr, sizeof hdr, "seq %d", first + i);
        zmq_msg_t m;
        zmq_msg_init_data(&m, s_payload, MSG_BYTES, s_nofree, NULL);
        if (zmq_send(s, "dst", 3, ZMQ_SNDMORE) < 0 ||
            zmq_send(s, hdr, (size_t)len, ZMQ_SNDMORE) < 0 || zmq_msg_send(&m, s, 0) < 0) {
            zmq_msg_close(&m);
            break;
        }
        sent++;
    }
    return sent;
}

/* ERR_DEST_BUSY naming dst that s received within ms (the relay's answers to a sender), and
 * *expired of them saying the message waited its 5 s out, the first and the last of those at
 * *first and *last (when not NULL; *first set only when 0). */
static int s_busy(void *s, int ms, int *expired, double *first, double *last)
{
    int busy = 0;
    for (const double until = swa_now() + ms / 1e3; swa_now() < until;) {
        zmq_pollitem_t it = {.socket = s, .events = ZMQ_POLLIN};
        if (zmq_poll(&it, 1, 50) <= 0)
            continue;
        sw_wire_msg_t m = {0};
        char err[256];
        if (sw_wire_recv(s, 0, &m, err, sizeof err) != SW_WIRE_OK)
            continue;
        if (m.env->pb.body_case == SHARDWIRE__ENVELOPE__BODY_ERROR &&
            m.env->pb.error->code == SHARDWIRE__ERROR_CODE__ERR_DEST_BUSY &&
            !strcmp(m.env->pb.error->dest, "dst")) {
            busy++;
            if (expired && strstr(m.env->pb.error->message, "took no messages for 5000 ms")) {
                ++*expired;
                if (first && *first == 0)
                    *first = swa_now();
                if (last)
                    *last = swa_now();
            }
        }
        sw_wire_msg_clear(&m);
    }
    return busy;
}

/*
 * Reads what reaches dst within ms (or until want messages came): each message's sender
 * ("a" or "b", from the source frame) and sequence number, in arrival order, into from[]
 * and seq[] (max entries). Probes (one empty frame) are skipped. Returns the count.
 */
static int s_read(void *dst, int ms, int want, char *from, int *seq, int max)
{
    int n = 0;
    for (const double until = swa_now() + ms / 1e3; swa_now() < until && n < want;) {
        zmq_pollitem_t it = {.socket = dst, .events = ZMQ_POLLIN};
        if (zmq_poll(&it, 1, 50) <= 0)
            continue;
        zmq_msg_t f[3];
        int k = 0, more = 1;
        while (more) {
            zmq_msg_t *m = &f[k < 3 ? k : 2];
            if (k >= 3)
                zmq_msg_close(m);
            zmq_msg_init(m);
            if (zmq_msg_recv(m, dst, 0) < 0)
                break;
            more = zmq_msg_more(m);
            k++;
        }
        if (k == 3 && n < max) {
            char hdr[32] = "";
            size_t hl = zmq_msg_size(&f[1]) < sizeof hdr - 1 ? zmq_msg_size(&f[1]) : 0;
            memcpy(hdr, zmq_msg_data(&f[1]), hl);
            hdr[hl] = 0;
            from[n] = zmq_msg_size(&f[0]) ? *(const char *)zmq_msg_data(&f[0]) : '?';
            seq[n] = sscanf(hdr, "seq %d", &seq[n]) == 1 ? seq[n] : -1;
            n++;
        }
        for (int i = 0; i < (k < 3 ? k : 3); i++)
            zmq_msg_close(&f[i]);
    }
    return n;
}

/* 1 when the messages from `who` among n are exactly first, first + 1, ..., first + count - 1
 * in that order. */
static int s_in_order(const char *from, const int *seq, int n, char who, int first, int count)
{
    int next = first;
    for (int i = 0; i < n; i++)
        if (from[i] == who && seq[i] != next++)
            return 0;
    return next == first + count;
}

/* 1 when who's messages among the n read are in increasing order and number count: c's may
 * have gaps (one refused while the budget was full can be followed by one forwarded once the
 * socket's buffers drained), but never go out of order. */
static int s_increasing(const char *from, const int *seq, int n, char who, int count)
{
    int last = -1, k = 0;
    for (int i = 0; i < n; i++)
        if (from[i] == who) {
            if (seq[i] <= last)
                return 0;
            last = seq[i];
            k++;
        }
    return k == count;
}

/* Waits (up to 20 s) until the relay has taken n more messages from `who` than `before` (its
 * msgs_in): they are forwarded, held or refused by then. */
static void s_taken(sw_peer_t *obs, const char *who, long before, int n)
{
    for (const double until = swa_now() + 20; swa_now() < until; usleep(50000))
        if (swa_msgs(obs, who, 0) >= before + n)
            return;
    SW_CHECK(!"the relay took every message within 20 s");
}

/* Sends n messages numbered from first from s (peer `who`) and waits until the relay has
 * taken them all; the number of them refused (ERR_DEST_BUSY). */
static int s_send_all(sw_peer_t *obs, void *s, const char *who, int first, int n)
{
    const long before = swa_msgs(obs, who, 0);
    SW_CHECK_INT(s_send(s, first, n), n);
    s_taken(obs, who, before, n);
    return s_busy(s, 300, NULL, NULL, NULL);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const char *nodes[] = {"dst", "a", "b", "c", NULL}, *clients[] = {"obs", NULL};
    const char *const flags[] = {"--queue-mib", "17", "--heartbeat-ms", "5000", NULL};
    pid_t relay = swa_relay(&s_a, s_dir, s_ep, nodes, clients, flags);
    SW_CHECK(relay > 0);
    if (relay <= 0)
        return sw_test_done();
    memset(s_a.fp, 'a', 64); /* any well-formed fingerprint: no stage runs in this test */
    s_a.fp[64] = 0;
    void *ctx = zmq_ctx_new();
    void *dst = swa_raw_peer(&s_a, ctx, "dst", 1);
    void *a = swa_raw_peer(&s_a, ctx, "a", 0);
    void *b = swa_raw_peer(&s_a, ctx, "b", 0);
    void *c = swa_raw_peer(&s_a, ctx, "c", 0);
    sw_peer_t *obs = swa_client(&s_a, "obs");
    SW_CHECK(dst && a && b && c && obs);
    if (!dst || !a || !b || !c || !obs)
        goto out;
    SW_CHECK_INT(swa_raw_announce(dst, "dst", 1, s_a.fp), 0);
    SW_CHECK_INT(swa_raw_announce(a, "a", 1, s_a.fp), 0);
    SW_CHECK_INT(swa_raw_announce(b, "b", 1, s_a.fp), 0);
    SW_CHECK_INT(swa_raw_announce(c, "c", 1, s_a.fp), 0);
    static char from[4 * N_FILL];
    static int seq[4 * N_FILL];

    /* 1. c fills dst (its excess held or refused); then a and b each get 8 held, the rest
     * refused, and nothing of theirs passes (c's held messages go first) */
    const long out0 = swa_msgs(obs, "dst", 1);
    const int busy_c = s_send_all(obs, c, "c", 0, N_FILL);
    const long fwd_c = swa_msgs(obs, "dst", 1) - out0;
    const double t_park = swa_now();
    const long in_b = swa_msgs(obs, "b", 0);
    const int busy_a = s_send_all(obs, a, "a", 0, N_AB);
    SW_CHECK_INT(s_send(b, 0, N_AB), N_AB);
    s_taken(obs, "b", in_b, N_AB);
    const int busy_b = s_busy(b, 300, NULL, NULL, NULL);
    printf("c filled dst: %d sent, %ld forwarded, %d refused; then a and b sent %d each: %d and "
           "%d refused (ERR_DEST_BUSY), so %d and %d held\n",
           N_FILL, fwd_c, busy_c, N_AB, busy_a, busy_b, N_AB - busy_a, N_AB - busy_b);
    SW_CHECK(fwd_c >= 1 && busy_c >= 1); /* the budget was reached, and c's hold was full */
    SW_CHECK_INT(N_AB - busy_a, HOLD);
    SW_CHECK_INT(N_AB - busy_b, HOLD);

    /* 2. dst reads within the 5 s: what c got through, then the held ones, in order */
    const long before = swa_msgs(obs, "dst", 1) - out0;
    SW_CHECK(swa_now() - t_park < HOLD_S - 1.5);
    int got = s_read(dst, 4000, (int)before + 3 * HOLD, from, seq, 4 * N_FILL);
    const double t_read = swa_now() - t_park;
    const long fwd = swa_msgs(obs, "dst", 1) - out0;
    const int late = s_busy(a, 200, NULL, NULL, NULL) + s_busy(b, 1, NULL, NULL, NULL) +
                     s_busy(c, 1, NULL, NULL, NULL);
    int n_a = 0, n_b = 0, n_c = 0;
    for (int i = 0; i < got; i++) {
        n_a += from[i] == 'a';
        n_b += from[i] == 'b';
        n_c += from[i] == 'c';
    }
    printf("dst read %d messages by %.1f s after a's and b's were held (%d of a, %d of b, %d of "
           "c); the relay counts %ld forwarded (%ld before dst read); %d ERR_DEST_BUSY more\n",
           got, t_read, n_a, n_b, n_c, fwd, before, late);
    SW_CHECK_INT(got, (int)fwd);
    SW_CHECK(s_in_order(from, seq, got, 'a', 0, HOLD));
    SW_CHECK(s_in_order(from, seq, got, 'b', 0, HOLD));
    SW_CHECK(s_increasing(from, seq, got, 'c', N_FILL - busy_c));
    SW_CHECK_INT(late, 0);
    SW_CHECK_INT(s_read(dst, 300, 1, from, seq, 4 * N_FILL), 0); /* nothing else */

    /* 3. the same again, and dst reads nothing for longer than 5 s: a's 8 expire */
    const long out3 = swa_msgs(obs, "dst", 1);
    const int busy_c3 = s_send_all(obs, c, "c", SEQ_BASE, N_FILL);
    const double t_send = swa_now();
    SW_CHECK_INT(s_send(a, SEQ_BASE, N_AB), N_AB);
    int expired = 0;
    double t_first = 0, t_last = 0;
    const int busy3 = s_busy(a, (int)(1000 * (HOLD_S + 3.0)), &expired, &t_first, &t_last);
    printf("again: c refused %d; a sent %d: %d refused at once, %d held; %d ERR_DEST_BUSY say the "
           "5 s ran out, %.2f to %.2f s after sending\n",
           busy_c3, N_AB, busy3 - expired, N_AB - (busy3 - expired), expired,
           t_first > 0 ? t_first - t_send : -1.0, t_last > 0 ? t_last - t_send : -1.0);
    SW_CHECK(busy_c3 >= 1);
    SW_CHECK_INT(N_AB - (busy3 - expired), HOLD);
    SW_CHECK_INT(expired, HOLD);
    SW_CHECK(t_first - t_send >= HOLD_S && t_last - t_send <= HOLD_S + 3.0);
    const long fwd3 = swa_msgs(obs, "dst", 1) - out3;
    got = s_read(dst, 4000, (int)fwd3 + 1, from, seq, 4 * N_FILL);
    n_a = 0;
    for (int i = 0; i < got; i++)
        n_a += from[i] == 'a';
    printf("dst then read %d messages (%ld were forwarded), %d of them a's\n", got, fwd3, n_a);
    SW_CHECK_INT(got, (int)fwd3);
    SW_CHECK_INT(n_a, 0);
    SW_CHECK(sw_test_count_in_file(sw_test_log("relay.log"), "MiB queued for it") >= 1);

out:
    if (dst)
        zmq_close(dst);
    if (a)
        zmq_close(a);
    if (b)
        zmq_close(b);
    if (c)
        zmq_close(c);
    sw_peer_destroy(&obs);
    zmq_ctx_term(ctx);
    sw_test_kill(relay);
    swa_rmdir(s_dir);
    return sw_test_done();
}
