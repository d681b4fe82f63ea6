/*
 * test_unannounced.c - connections that never announce count against their
 * key and do not stay (issue 21, finding 7). A keyed relay (CURVE,
 * allow-list; --announce-ms 3000 to keep the test short) and raw DEALER
 * connections of one client key, "mallory", that never announce:
 *
 *  - 64 of them send [relay][16 MiB frame] as fast as they can for 6 s.
 *    They used to pass --max-conns-per-key (it counted announced peers
 *    only) and the relay received every frame whole before refusing it:
 *    64 connections took it from 200 MB to 1,080 MB. Now a key holds at most
 *    SW_RELAY_UNANNOUNCED_PER_KEY (4) connections that have not announced
 *    (the ZAP handler refuses the rest for now), and one that sends more
 *    than 64 KiB before announcing is shut down after that message: the
 *    relay's resident memory grows by less than 4 connections x 2 frames of
 *    17 MiB + 64 MiB of slack (the bound docs/security.md states);
 *  - 200 of them (one connection each, no redial) open and send nothing.
 *    They used to hold 200 of the relay's file descriptors forever (with the
 *    open-file limit at 1024, 1,050 of them locked new joins out). Now the
 *    relay refuses all but 4 in the handshake, shuts those 4 down
 *    --announce-ms after they opened, and alice (another client key) joins
 *    meanwhile. (A key that redials without pause keeps handshakes in
 *    flight, as anyone on the network can: the firewall's per-address limit
 *    of docs/security.md section 3 bounds those.)
 */
#include "sw_attack.h"

#include <dirent.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#define FRAME (16u << 20)
#define ABORT_KB (1536L << 10) /* stop the flood when the relay holds 1.5 GiB */

static char s_dir[64];
static char s_ep[64];
static swa_t s_a;

/* Open file descriptors of pid. */
static int s_fds(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
    DIR *d = opendir(path);
    int n = 0;
    while (d && readdir(d))
        n++;
    if (d)
        closedir(d);
    return n - 2;
}

static void s_free_none(void *data, void *hint)
{
    (void)data, (void)hint;
}

/* Part 1: 64 connections that send 16 MiB frames without announcing. */
static void s_big_frames(pid_t relay)
{
    static char frame[FRAME];
    void *ctx = zmq_ctx_new();
    int io = 2;
    zmq_ctx_set(ctx, ZMQ_IO_THREADS, io);
    void *d[64];
    for (int i = 0; i < 64; i++)
        d[i] = swa_raw(&s_a, ctx, "mallory", 4, 1000);
    usleep(1500000);
    const long start = swa_rss_kb(relay);
    long peak = start;
    long sent = 0;
    const double t0 = swa_now();
    while (swa_now() - t0 < 6 && peak < ABORT_KB) {
        for (int i = 0; i < 64; i++) {
            zmq_msg_t m;
            zmq_msg_init_data(&m, frame, FRAME, s_free_none, NULL);
            if (zmq_send(d[i], "relay", 5, ZMQ_DONTWAIT | ZMQ_SNDMORE) >= 0 &&
                zmq_msg_send(&m, d[i], ZMQ_DONTWAIT) >= 0)
                sent++;
            else
                zmq_msg_close(&m);
            zmq_msg_t in;
            zmq_msg_init(&in);
            while (zmq_msg_recv(&in, d[i], ZMQ_DONTWAIT) >= 0)
                ;
            zmq_msg_close(&in);
        }
        long rss = swa_rss_kb(relay);
        if (rss > peak)
            peak = rss;
        usleep(20000);
    }
    for (int i = 0; i < 64; i++)
        zmq_close(d[i]);
    zmq_ctx_term(ctx);
    const long bound = SW_RELAY_UNANNOUNCED_PER_KEY * 2 * 17 * 1024L + 64 * 1024L;
    printf("unannounced 16 MiB frames: 64 connections of one key queued %ld frames in 6 s; the "
           "relay's memory went %ld -> %ld MiB (growth bound %ld MiB)\n",
           sent, start / 1024, peak / 1024, bound / 1024);
    SW_CHECK(peak - start < bound);
}

/* Part 2: 200 connections that send nothing. */
static void s_silent(pid_t relay)
{
    void *ctx = zmq_ctx_new();
    const int before = s_fds(relay);
    void *d[200];
    for (int i = 0; i < 200; i++)
        d[i] = swa_raw(&s_a, ctx, "mallory", 4,
                       -1); /* one connection each: what the relay keeps of them */
    usleep(2000000);
    const int during = s_fds(relay);
    /* alice joins while they are there */
    sw_peer_t *alice = swa_client(&s_a, "alice");
    SW_CHECK(alice != NULL);
    usleep(4500000); /* past --announce-ms */
    int after = s_fds(relay);
    /* a loaded machine tears the refused handshakes down later: wait up to
     * 8 s more for the count the check asks for (CI once saw 14 extra at
     * 6.5 s) */
    int waited = 0;
    for (; waited < 8 && after > before + 8; waited++) {
        usleep(1000000);
        after = s_fds(relay);
    }
    printf("silent connections: 200 of one key: the relay held %d -> %d file descriptors after "
           "2 s, %d after %.1f s; alice %s\n",
           before, during, after, 6.5 + waited, alice ? "joined" : "could not join");
    SW_CHECK(after <= before + 8); /* (after 2 s, 200 handshakes may still be under way) */
    sw_peer_destroy(&alice);
    for (int i = 0; i < 200; i++)
        zmq_close(d[i]);
    zmq_ctx_term(ctx);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    sw_test_memory_bounds(); /* the relay's resident memory is bounded below */
    const char *clients[] = {"alice", "mallory", NULL};
    static const char *const flags[] = {"--announce-ms", "3000", NULL};
    pid_t relay = swa_relay(&s_a, s_dir, s_ep, NULL, clients, flags);
    SW_CHECK(relay > 0);

    s_big_frames(relay);
    usleep(2000000);
    s_silent(relay);

    sw_test_kill(relay);
    swa_rmdir(s_dir);
    return sw_test_done();
}
