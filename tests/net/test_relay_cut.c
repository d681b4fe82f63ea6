/*
 * test_relay_cut.c - the relay ends a connection that floods it without
 * crashing (CI's test_relay_logs once saw the relay abort in libzmq:
 * "Assertion failed: !_io_error (src/stream_engine_base.cpp:331)").
 *
 * The relay ended connections with shutdown(SHUT_RDWR) on libzmq's socket.
 * When that connection's queue to the ROUTER was full (a flood the relay's
 * thread had not read yet), libzmq 4.3.4 took the EPOLLHUP for an I/O error
 * but kept the connection's timers, and its next ZMTP heartbeat asserted
 * (relay/conn.c, relay_cut, has the whole story). Now the relay shuts only
 * the reading side (SHUT_RD): libzmq sees the end when it reads again.
 *
 * A keyed relay with --announce-ms 1000 (a connection that has not announced
 * by then is shut down) and --heartbeat-ms 20 (the heartbeat that hit the
 * assertion, and the sweep that shuts connections down, fifty times a
 * second); mallory (an allowed client key) floods it for 5 s on 3 raw DEALER
 * connections that never announce, redialling when closed. Checked:
 *  - the relay is still running and logged no assertion (before: it aborted
 *    during the flood, see docs/security.md);
 *  - each of mallory's connections was closed by the relay within 20 s after
 *    the flood ended (mallory never closes one: the relay's announce deadline
 *    did, so a connection cut while it floods does end);
 *  - the relay still answers `shardwire status`.
 */
#include "sw_attack.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#define N_CONN 3
#define FLOOD_S 5.0

static char s_dir[64], s_ep[64];
static swa_t s_a;

/* Reads and drops whatever the relay sent back. */
static void s_drain(void *d)
{
    zmq_msg_t m;
    zmq_msg_init(&m);
    while (zmq_msg_recv(&m, d, ZMQ_DONTWAIT) >= 0)
        ;
    zmq_msg_close(&m);
}

/* DISCONNECTED events waiting on monitor socket mon. */
static int s_disconnects(void *mon)
{
    int k = 0;
    for (;;) {
        zmq_msg_t ev;
        zmq_msg_init(&ev);
        if (zmq_msg_recv(&ev, mon, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&ev);
            return k;
        }
        uint16_t event = 0;
        if (zmq_msg_size(&ev) >= 2)
            memcpy(&event, zmq_msg_data(&ev), 2);
        const int more = zmq_msg_more(&ev);
        zmq_msg_close(&ev);
        if (more) { /* the endpoint frame */
            zmq_msg_init(&ev);
            zmq_msg_recv(&ev, mon, 0);
            zmq_msg_close(&ev);
        }
        k += event == ZMQ_EVENT_DISCONNECTED;
    }
}

/* 1 while pid runs; its exit status in *st once it ended. */
static int s_running(pid_t pid, int *st)
{
    return waitpid(pid, st, WNOHANG) == 0;
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const char *clients[] = {"mallory", NULL};
    static const char *const extra[] = {"--announce-ms", "1000", "--heartbeat-ms", "20", NULL};
    pid_t relay = swa_relay(&s_a, s_dir, s_ep, NULL, clients, extra);
    SW_CHECK(relay > 0);
    const char *log = sw_test_log("relay.log");

    void *ctx = zmq_ctx_new();
    void *d[N_CONN], *mon[N_CONN];
    for (int i = 0; i < N_CONN; i++) {
        /* no receive limit: a DEALER whose queue of the relay's replies is full stops
         * reading, and libzmq 4.3.4 aborts this process too when the relay then closes the
         * connection (the PING after it: relay/conn.c, relay_cut) */
        d[i] = swa_raw_opts(&s_a, ctx, "mallory", 1000, 0, 100, -1, -1);
        char ep[64];
        snprintf(ep, sizeof ep, "inproc://cut-mon-%d", i);
        zmq_socket_monitor(d[i], ep, ZMQ_EVENT_DISCONNECTED);
        mon[i] = zmq_socket(ctx, ZMQ_PAIR);
        zmq_connect(mon[i], ep);
    }
    usleep(300000); /* handshakes */
    long sent = 0;
    int died = 0, st = 0;
    const double t0 = swa_now();
    while (swa_now() - t0 < FLOOD_S && !died) {
        for (int k = 0; k < 200; k++)
            for (int i = 0; i < N_CONN; i++)
                sent += zmq_send(d[i], "head", 4, ZMQ_DONTWAIT) >= 0;
        for (int i = 0; i < N_CONN; i++)
            s_drain(d[i]);
        died = !s_running(relay, &st);
    }
    for (int i = 0; i < N_CONN; i++)
        s_disconnects(mon[i]); /* count from the end of the flood */
    const double t_end = swa_now();
    const int cuts_flood = sw_test_count_in_file(log, "did not announce within");
    printf("flood: %ld one-frame messages on %d connections in %.1f s; %d log lines say the relay "
           "shut one down (its lines about peers are 20 a second, the flood's took most)\n",
           sent, N_CONN, t_end - t0, cuts_flood);

    /* every connection the relay shut down closes once its flood stopped */
    int closed[N_CONN] = {0}, n_closed = 0;
    while (!died && n_closed < N_CONN && swa_now() - t_end < 20) {
        for (int i = 0; i < N_CONN; i++) {
            s_drain(d[i]);
            if (!closed[i] && s_disconnects(mon[i]) > 0) {
                closed[i] = 1;
                n_closed++;
            }
        }
        died = !s_running(relay, &st);
        usleep(20000);
    }
    printf("%d of %d connections closed by the relay %.1f s after the flood; relay %s\n", n_closed,
           N_CONN, swa_now() - t_end, died ? "DIED" : "running");
    if (died)
        fprintf(stderr, "relay ended: %s %d; its log's last line is in %s\n",
                WIFSIGNALED(st) ? "signal" : "exit status",
                WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st), log);
    SW_CHECK(sent > 10000);
    SW_CHECK(!died);
    SW_CHECK_INT(sw_test_count_in_file(log, "Assertion failed"), 0);
    SW_CHECK_INT(n_closed, N_CONN);

    for (int i = 0; i < N_CONN; i++) {
        zmq_socket_monitor(d[i], NULL, 0);
        zmq_close(mon[i]);
        zmq_close(d[i]);
    }
    zmq_ctx_term(ctx);

    /* the relay still serves */
    if (!died) {
        sw_test_client_env(s_dir, "mallory");
        char *argv[] = {
            (char *)sw_test_bin("shardwire"), "status", "--relay", s_ep, "--json", NULL};
        char *out = NULL;
        SW_CHECK_INT(sw_test_run(argv, 30, &out, NULL), 0);
        SW_CHECK(out && strstr(out, "\"peers\""));
        free(out);
        sw_test_kill(relay);
    }
    swa_rmdir(s_dir);
    return sw_test_done();
}
