/*
 * test_replay.c - replay protection that volume cannot flush (issue 21,
 * finding 8; docs/security.md, "Replays"). A keyed cluster of real processes
 * (relay, head 0:15, tail 15:30; SmolLM2, CURVE and sealing on):
 *
 *  - alice (a client key) sends a sealed GenerateRequest of 8 tokens; the
 *    test keeps the sealed frame, as a malicious relay records what passes;
 *  - mallory (another client key and the access key) sends 1,100 sealed
 *    Cancels to the head, each under a fresh sender session (a new sealer
 *    each): the head used to keep 1,024 (sender, session) windows, least
 *    recently used evicted, so alice's window went;
 *  - the recorded frame is sent again from alice's name (what a relay
 *    replaying its history does). It used to open and start a second
 *    generation (alice got its chunks again). Now windows are given up only
 *    for the same sender key or once older than the 120 s a sealed frame
 *    lives: the head refuses the replay ("replayed or too old") and alice
 *    gets nothing.
 *
 * The unit test (tests/unit/test_seal.c) covers the rest: frames older (or
 * newer) than SW_SEAL_MAX_AGE_MS refused, a full table of live windows
 * refusing a new session rather than give one up.
 */
#include "sw_attack.h"

#include "codec.h"
#include "seal.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define N_FLOOD 1100
#define N_PREDICT 8

static char s_dir[64];
static char s_ep[64];
static swa_t s_a;

/* The access key's sealer (a fresh sender session), NULL when the key does not load. */
static sw_seal_t *s_sealer(void)
{
    uint8_t ak[1][SW_CLUSTER_KEY_BYTES];
    char e[256];
    if (sw_cluster_key_load(swa_path(&s_a, "access.key", ""), ak[0], e, sizeof e) != 0)
        return NULL;
    sw_seal_t *s = sw_seal_new(ak, 1, SW_SEAL_ACCESS);
    sodium_memzero(ak, sizeof ak);
    return s;
}

/* msg sealed by s from src to the head into *out (the caller closes it); 0 or -1. */
static int s_seal(sw_seal_t *s, const char *src, const sw_msg_t *msg, zmq_msg_t *out)
{
    char e[256];
    zmq_msg_t hdr, pl;
    if (!s || sw_codec_encode(msg, &hdr, e, sizeof e) != 0)
        return -1;
    int rc = sw_seal_message(s, src, "head", zmq_msg_data(&hdr), zmq_msg_size(&hdr), NULL, 0, 0,
                             out, &pl);
    zmq_msg_close(&hdr);
    return rc == SW_SEAL_OK ? 0 : -1;
}

/* Sends [head][a copy of frame] on p's own connection (as the relay would deliver it). */
static void s_send_raw(sw_peer_t *p, zmq_msg_t *frame)
{
    zmq_msg_t copy;
    zmq_msg_init(&copy);
    zmq_msg_copy(&copy, frame);
    zmq_pollitem_t it;
    SW_CHECK_INT(sw_peer_poll_items(p, &it, 1), 1); /* its one relay's socket */
    void *sock = it.socket;
    if (zmq_send(sock, "head", 4, ZMQ_SNDMORE) < 0 || zmq_msg_send(&copy, sock, 0) < 0)
        zmq_msg_close(&copy);
}

/* TokenChunks of request rid that reach alice within ms; *done set at the last one. */
static int s_chunks(sw_peer_t *alice, const char *rid, int ms, int *done)
{
    int n = 0;
    *done = 0;
    const double until = swa_now() + ms / 1e3;
    while (swa_now() < until && !*done) {
        sw_wire_msg_t m = {0};
        if (sw_peer_recv(alice, &m, 200) != 0)
            continue;
        sw_msg_t c;
        char e[256];
        if (sw_codec_decode(&m, SW_MSG_NONE, &c, e, sizeof e) == 0 &&
            c.type == SW_MSG_TOKEN_CHUNK && strcmp(c.chunk.request_id, rid) == 0) {
            n++;
            *done = c.chunk.done;
        }
        sw_wire_msg_clear(&m);
    }
    return n;
}

int main(void)
{
    const char *model = sw_test_model();
    signal(SIGPIPE, SIG_IGN);
    const char *nodes[] = {"head", "tail", NULL};
    const char *clients[] = {"alice", "mallory", NULL};
    pid_t relay = swa_relay(&s_a, s_dir, s_ep, nodes, clients, NULL);
    SW_CHECK(relay > 0 && model);
    const char *log = sw_test_log("cluster.log");
    pid_t head = sw_test_node(s_ep, s_dir, "head", "0:15", log, NULL);
    pid_t tail = sw_test_node(s_ep, s_dir, "tail", "15:30", log, NULL);
    sw_test_client_env(s_dir, "alice");
    SW_CHECK_INT(sw_test_wait_peers(s_ep, 2, 60), 0);
    sw_peer_t *alice = swa_client(&s_a, "alice");
    sw_peer_t *mallory = swa_client(&s_a, "mallory");
    SW_CHECK(alice && mallory);

    /* alice's request, sealed by the test and kept */
    sw_msg_t req = {.type = SW_MSG_GENERATE};
    req.generate.request_id = "req-replayed";
    req.generate.prompt = "The capital of France is";
    req.generate.n_predict = N_PREDICT;
    req.generate.timeout_ms = 60000;
    sw_seal_t *as = s_sealer();
    zmq_msg_t recorded;
    SW_CHECK_INT(s_seal(as, "alice", &req, &recorded), 0);
    int done = 0, first = 0;
    if (alice) {
        s_send_raw(alice, &recorded);
        first = s_chunks(alice, "req-replayed", 60000, &done);
    }
    printf("alice's request: %d chunks, %s\n", first, done ? "done" : "not done");
    SW_CHECK(first > 0 && done);

    /* mallory: one sealed Cancel under each of N_FLOOD fresh sender sessions */
    const double t0 = swa_now();
    int sent = 0;
    for (int i = 0; mallory && i < N_FLOOD; i++) {
        sw_seal_t *ms = s_sealer();
        sw_msg_t cancel = {.type = SW_MSG_CANCEL};
        cancel.cancel.request_id = "req-none";
        cancel.cancel.reason = "flush";
        zmq_msg_t f;
        if (s_seal(ms, "mallory", &cancel, &f) == 0) {
            s_send_raw(mallory, &f);
            zmq_msg_close(&f);
            sent++;
        }
        sw_seal_destroy(&ms);
        if (i % 100 == 99)
            usleep(100000); /* within the relay's --rate */
    }
    usleep(2000000);
    printf("mallory: %d sealed messages under fresh sender sessions in %.1f s\n", sent,
           swa_now() - t0);
    SW_CHECK_INT(sent, N_FLOOD);

    /* the replay: the recorded frame again, from alice's name */
    int again = 0;
    if (alice) {
        s_send_raw(alice, &recorded);
        again = s_chunks(alice, "req-replayed", 8000, &done);
    }
    const int refused = sw_test_count_in_file(log, "replayed or too old");
    printf("the replay after %d sessions: %d chunks came back (a second generation); the head "
           "logged %d refusal(s)\n",
           N_FLOOD, again, refused);
    SW_CHECK_INT(again, 0);
    SW_CHECK(refused >= 1);

    zmq_msg_close(&recorded);
    sw_seal_destroy(&as);
    sw_peer_destroy(&alice);
    sw_peer_destroy(&mallory);
    sw_test_kill(head);
    sw_test_kill(tail);
    sw_test_kill(relay);
    swa_rmdir(s_dir);
    return sw_test_done();
}
