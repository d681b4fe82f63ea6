/*
 * test_route.c - every stage checks a Forward's route before it uses it.
 *
 * A keyed three-stage cluster (real relay, head 0:10, middle 10:20, tail
 * 20:30 of SmolLM2, CURVE and sealing on) and "member", a peer holding a node
 * key and the cluster key (a compromised cluster member: the strongest sender
 * of Forwards there is). The member sends one properly sealed Forward of each
 * malformed route shape to the middle stage or the tail:
 *
 *  - hop at the route's last entry on a middle stage (it used to read past the
 *    route array: SIGSEGV), a tail that is not the route's last entry;
 *  - hop 0 (dropped by the decoder: no answer; a hop past the route is
 *    tests/unit/test_wire.c's),
 *    route[hop] naming another stage, a previous hop that is not the sender;
 *  - a reply_to that is not the route's head (errors and verdicts would go to
 *    a bystander);
 *  - a next hop that is no key-bound node (a client), one whose layers do
 *    not start where this stage's end, one not connected at all; a previous
 *    hop whose layers do not end where this stage's begin; a head entry that
 *    is no head (a middle stage, a client).
 *
 * Each one must be answered with an Error to the sender (or dropped), never
 * reach a bystander, and leave every stage alive. Then a member that swallows
 * every Forward (announced as the middle stage while mid is down) must not
 * hold a request until its deadline: after the round timeout the head avoids
 * the silent route's stages once mid is back, and `shardwire run` gives
 * exactly the tokens of `shardwire generate`.
 */
#include "sw_attack.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define N_GEN 16

static char s_dir[64];
static char s_ep[64];
static swa_t s_a; /* the cluster to attack */

/* One Forward of a shape from p (no draft); what came back (swa_shape). */
static int s_shape(sw_peer_t *p, const char *dest, uint32_t layer_begin, const char **route, int n,
                   uint32_t hop, const char *reply_to, uint64_t sid)
{
    return swa_shape(p, dest, layer_begin, route, n, hop, reply_to, sid, 0);
}

/* 1 when nothing but relay chatter reaches p within ms. */
static int s_quiet(sw_peer_t *p, int ms)
{
    sw_wire_msg_t m = {0};
    int rc = sw_peer_recv(p, &m, ms);
    if (rc == 0) {
        fprintf(stderr, "bystander got a %s from %s\n", sw_wire_type_name(sw_wire_msg_type(&m)),
                m.peer);
        sw_wire_msg_clear(&m);
        return 0;
    }
    return 1;
}

static int s_alive(pid_t pid)
{
    return waitpid(pid, NULL, WNOHANG) == 0;
}

int main(void)
{
    const char *model = sw_test_model();
    char e[256];
    if (sw_keys_curve_check(e, sizeof e) != 0)
        sw_test_skip(e);
    signal(SIGPIPE, SIG_IGN);
    snprintf(s_dir, sizeof s_dir, "%s", sw_test_tmpdir());
    snprintf(s_ep, sizeof s_ep, "tcp://127.0.0.1:%d", sw_test_free_port());
    const char *nodes[] = {"head", "mid", "tail", "member", "member2", "member3", NULL};
    const char *clients[] = {"client", "bystander", NULL};
    SW_CHECK_INT(sw_test_keys(s_dir, nodes, clients), 0);

    const char *prompt = "The capital of France is";
    char n_gen[16];
    snprintf(n_gen, sizeof n_gen, "%d", N_GEN);
    int32_t ref[N_GEN + 8], got[N_GEN + 8];
    char *out = NULL;
    SW_CHECK_INT(sw_test_generate_run(model, prompt, N_GEN, NULL, 120, &out, NULL), 0);
    int n_ref = sw_test_json_tokens(out, ref, N_GEN + 8);
    free(out);
    SW_CHECK(n_ref > 0);

    const char *log = sw_test_log("cluster.log");
    pid_t relay = sw_test_relay(s_ep, s_dir, log, NULL);
    static const char *const head_extra[] = {"--round-timeout-ms", "4000", NULL};
    pid_t head = sw_test_node(s_ep, s_dir, "head", "0:10", log, head_extra);
    pid_t mid = sw_test_node(s_ep, s_dir, "mid", "10:20", log, NULL);
    pid_t tail = sw_test_node(s_ep, s_dir, "tail", "20:30", log, NULL);
    sw_test_client_env(s_dir, "client");
    SW_CHECK_INT(sw_test_wait_peers(s_ep, 3, 60), 0);
    s_a.dir = s_dir;
    s_a.ep = s_ep;
    SW_CHECK_INT(swa_fingerprint(&s_a), 0);

    sw_peer_t *m = swa_member(&s_a, "member", 0, 10);    /* fits in front of mid */
    sw_peer_t *m2 = swa_member(&s_a, "member2", 0, 5);   /* a head whose layers fit nowhere */
    sw_peer_t *m3 = swa_member(&s_a, "member3", 10, 20); /* a middle in front of the tail */
    sw_peer_t *by = swa_client(&s_a, "bystander");
    SW_CHECK(m && m2 && m3 && by);
    if (!m || !m2 || !m3 || !by)
        goto out;
    const int BAD = SHARDWIRE__ERROR_CODE__ERR_BAD_REQUEST;
    uint64_t sid = 0x5100;

    /* 1. hop at the route's last entry on a middle stage: no stage after it (the crash) */
    for (int i = 0; i < 3; i++) {
        const char *r[] = {"member", "mid"};
        SW_CHECK_INT(s_shape(m, "mid", 10, r, 2, 1, "member", ++sid), BAD);
        SW_CHECK(s_alive(mid));
    }
    /* 2. a tail that is not the route's last entry */
    {
        const char *r[] = {"member", "tail", "mid"};
        SW_CHECK_INT(s_shape(m, "tail", 20, r, 3, 1, "member", ++sid), BAD);
    }
    /* 3. hop 0 (the head's own entry): malformed, dropped by the decoder with no answer (a
     * stage answered ERR_BAD_REQUEST before the wire refused it) */
    {
        const char *r[] = {"mid", "tail"};
        SW_CHECK(s_shape(m, "mid", 10, r, 2, 0, "mid", ++sid) < 0);
        SW_CHECK(s_alive(mid));
    }
    /* 4. route[hop] names another stage */
    {
        const char *r[] = {"member", "tail", "mid"};
        SW_CHECK_INT(s_shape(m, "mid", 10, r, 3, 1, "member", ++sid), BAD);
    }
    /* 5. the previous hop is not the sender */
    {
        const char *r[] = {"head", "mid", "tail"};
        SW_CHECK_INT(s_shape(m, "mid", 10, r, 3, 1, "head", ++sid), BAD);
    }
    /* 6. reply_to is a bystander, not the route's head: the error comes back to the
     * sender and the bystander hears nothing (no error, no verdict) */
    {
        const char *r[] = {"member", "mid", "tail"};
        SW_CHECK_INT(s_shape(m, "mid", 10, r, 3, 1, "bystander", ++sid), BAD);
        SW_CHECK(s_quiet(by, 1500));
    }
    /* 7. the next hop is no node: a client */
    {
        const char *r[] = {"member", "mid", "bystander"};
        SW_CHECK_INT(s_shape(m, "mid", 10, r, 3, 1, "member", ++sid), BAD);
        SW_CHECK(s_quiet(by, 1000));
    }
    /* 8. the next hop is a key-bound node whose layers do not begin where mid's end */
    {
        const char *r[] = {"member", "mid", "member2"};
        SW_CHECK_INT(s_shape(m, "mid", 10, r, 3, 1, "member", ++sid), BAD);
    }
    /* 9. the next hop is not connected at all (the stage asks the relay again first):
     * ERR_DEST_GONE, which a head retries (a stage that left while a prompt's chunks
     * travelled), not a bad request that would end the request */
    {
        const char *r[] = {"member", "mid", "ghost"};
        SW_CHECK_INT(s_shape(m, "mid", 10, r, 3, 1, "member", ++sid),
                     SHARDWIRE__ERROR_CODE__ERR_DEST_GONE);
    }
    /* 10. the previous hop's layers do not end where mid's begin */
    {
        const char *r[] = {"member2", "mid", "tail"};
        SW_CHECK_INT(s_shape(m2, "mid", 10, r, 3, 1, "member2", ++sid), BAD);
    }
    /* 11. the route's head entry is no head: a middle stage, or a client */
    {
        const char *r[] = {"mid", "member3", "tail"};
        SW_CHECK_INT(s_shape(m3, "tail", 20, r, 3, 2, "mid", ++sid), BAD);
        const char *r2[] = {"bystander", "member3", "tail"};
        SW_CHECK_INT(s_shape(m3, "tail", 20, r2, 3, 2, "bystander", ++sid), BAD);
        SW_CHECK(s_quiet(by, 1000));
    }
    /* a well-formed route from the member still works (the checks are not blanket refusals) */
    {
        const char *r[] = {"member", "mid", "tail"};
        SW_CHECK_INT(s_shape(m, "mid", 10, r, 3, 1, "member", ++sid), SWA_VERDICT);
    }
    SW_CHECK(s_alive(relay));
    SW_CHECK(s_alive(head));
    SW_CHECK(s_alive(mid));
    SW_CHECK(s_alive(tail));

    /* A member that swallows every Forward it gets (member3: valid keys, announced as a
     * middle stage for [10, 20), never answers) must not hold a request until its
     * deadline. With mid down it is the only middle stage: the head's round gets no
     * verdict (--round-timeout-ms 4000 above); once mid is back, new routes avoid the
     * stages of the silent route where another serves their layers (the quiet member
     * would otherwise look like the least busy stage and be picked again), and the
     * request ends with exactly the tokens of one process. */
    sw_test_kill(mid);
    mid = 0;
    {
        char outp[256], errp[256];
        snprintf(outp, sizeof outp, "%s", sw_test_log("run.out"));
        snprintf(errp, sizeof errp, "%s", sw_test_log("run.err"));
        char *rn[] = {(char *)sw_test_bin("shardwire"),
                      "run",
                      "--greedy",
                      "--relay",
                      s_ep,
                      "--head",
                      "head",
                      "-p",
                      (char *)prompt,
                      "-n",
                      n_gen,
                      "--json",
                      "--timeout-s",
                      "90",
                      NULL};
        usleep(1500 * 1000); /* the head's next peer table lacks mid */
        pid_t run = sw_test_spawn_io(rn, outp, errp);
        /* mid comes back only after a round through member3 got no verdict */
        SW_CHECK(
            sw_test_wait_text(log, "from the route through member3, tail: new routes avoid", 30));
        mid = sw_test_node(s_ep, s_dir, "mid", "10:20", log, NULL);
        SW_CHECK_INT(sw_test_wait(run, 120), 0);
        size_t len = 0;
        char *o = sw_test_read_file(outp, &len);
        int n = o ? sw_test_json_tokens(o, got, N_GEN + 8) : 0;
        SW_CHECK(n == n_ref && n > 0 && !memcmp(got, ref, sizeof(int32_t) * (size_t)n_ref));
        if (n != n_ref) {
            char *es = sw_test_read_file(errp, &len);
            fprintf(stderr, "run: %s\n", es ? es : "");
            free(es);
        }
        free(o);
    }
out:
    sw_peer_destroy(&m);
    sw_peer_destroy(&m2);
    sw_peer_destroy(&m3);
    sw_peer_destroy(&by);
    sw_test_kill(head);
    sw_test_kill(mid);
    sw_test_kill(tail);
    sw_test_kill(relay);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", s_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", s_dir);
    return sw_test_done();
}
