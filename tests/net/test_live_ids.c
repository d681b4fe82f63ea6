/*
 * test_live_ids.c - docs/security.md, a holder of a node key: "a stage takes
 * a session only from its creator; the head takes a Verdict only from its
 * route's tail", checked with the live session's id (read from the tail's
 * debug log, as a member that can see logs, or guesses right, would know it)
 * while a real request streams through a keyed cluster (CURVE, sealing):
 *
 *  - "evil" holds a node key and the cluster key; it sends the tail a
 *    Forward for the live session (a valid route through itself): the tail
 *    refuses it (unknown_session, "belongs to another peer") and logs it;
 *  - evil sends the head a Verdict for the live session: the head ignores
 *    it and logs that only the route's tail may send one;
 *  - the request's tokens equal `shardwire generate`'s.
 */
#include "codec_pb.h"
#include "sw_attack.h"
#include "sw_test.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define N_GEN 160
#define PROMPT "Count from 1 to 1000: 1, 2, 3,"

/* The id of the newest "session X opened by head" line of the log: 1 when found. */
static int s_live_sid(const char *log, uint64_t *sid)
{
    char *t = sw_test_read_file(log, NULL);
    const char *last = NULL;
    for (const char *p = t; p && (p = strstr(p, "session ")); p++)
        if (strstr(p, " opened by head") == p + 8 + 16)
            last = p;
    int ok = last && sscanf(last + 8, "%16llx", (unsigned long long *)sid) == 1;
    free(t);
    return ok;
}

int main(void)
{
    const char *model = sw_test_model();
    char e[256];
    if (sw_keys_curve_check(e, sizeof e) != 0)
        sw_test_skip(e);
    signal(SIGPIPE, SIG_IGN);
    static char dir[256], ep[64];
    snprintf(dir, sizeof dir, "%s", sw_test_tmpdir());
    snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", sw_test_free_port());
    const char *nodes[] = {"head", "tail", "evil", NULL}, *clients[] = {"client", NULL};
    SW_CHECK_INT(sw_test_keys(dir, nodes, clients), 0);

    int32_t ref[N_GEN + 8];
    int n_ref = sw_test_generate(model, PROMPT, N_GEN, ref, N_GEN + 8);
    SW_CHECK_INT(n_ref, N_GEN);

    const char *rlog = sw_test_log("relay.log"), *hlog = sw_test_log("head.log"),
               *tlog = sw_test_log("tail.log");
    pid_t relay = sw_test_relay(ep, dir, rlog, NULL);
    pid_t head = sw_test_node(ep, dir, "head", "0:15", hlog, NULL);
    setenv("SW_LOG_LEVEL", "debug", 1); /* the tail logs the sessions it opens */
    pid_t tail = sw_test_node(ep, dir, "tail", "15:30", tlog, NULL);
    unsetenv("SW_LOG_LEVEL");
    sw_test_client_env(dir, "client");
    SW_CHECK_INT(sw_test_wait_peers(ep, 2, 60), 0);
    swa_t a = {.dir = dir, .ep = ep};
    SW_CHECK_INT(swa_fingerprint(&a), 0);
    sw_peer_t *evil = swa_member(&a, "evil", 0, 15);
    SW_CHECK(evil != NULL);

    char n_gen[16];
    snprintf(n_gen, sizeof n_gen, "%d", N_GEN);
    char *rn[] = {(char *)sw_test_bin("shardwire"),
                  "run",
                  "--greedy",
                  "--relay",
                  ep,
                  "--head",
                  "head",
                  "-p",
                  PROMPT,
                  "-n",
                  n_gen,
                  "--json",
                  "--timeout-s",
                  "120",
                  NULL};
    const char *out = sw_test_log("run.out");
    pid_t run = sw_test_spawn_io(rn, out, sw_test_log("run.err"));

    uint64_t sid = 0;
    for (int i = 0; i < 300 && !s_live_sid(tlog, &sid); i++)
        usleep(100000);
    SW_CHECK(sid != 0);
    if (evil && sid) {
        /* a Forward for the live session from a peer that did not create it */
        const char *route[] = {"evil", "tail"};
        int code = swa_shape(evil, "tail", 15, route, 2, 1, "evil", sid, 0);
        SW_CHECK_INT(code, SW_ERROR_UNKNOWN_SESSION);
        SW_CHECK_INT(sw_test_wait_text(tlog, "dropped a forward from evil for session", 10), 1);

        /* a Verdict for the live session from a peer that is not its tail */
        Shardwire__Verdict v = SHARDWIRE__VERDICT__INIT;
        uint32_t toks[1] = {2};
        v.session_id = sid;
        v.round = 1;
        v.n_tokens = 1;
        v.tokens = toks;
        v.next_token = 2;
        Shardwire__Envelope env = SHARDWIRE__ENVELOPE__INIT;
        env.body_case = SHARDWIRE__ENVELOPE__BODY_VERDICT;
        env.verdict = &v;
        for (int i = 0; i < 3; i++)
            SW_CHECK_INT(sw_peer_send(evil, "head", sw_envelope_of(&env), NULL, 0, 0), 0);
        SW_CHECK_INT(sw_test_wait_text(hlog, "ignored a verdict from evil", 10), 1);
    }

    /* the request went on as if nothing happened */
    SW_CHECK_INT(sw_test_wait(run, 120), 0);
    run = 0;
    char *o = sw_test_read_file(out, NULL);
    int32_t got[N_GEN + 8];
    int n_got = o ? sw_test_json_tokens(o, got, N_GEN + 8) : -1;
    free(o);
    SW_CHECK_INT(n_got, N_GEN);
    SW_CHECK(n_got == n_ref && !memcmp(got, ref, sizeof(int32_t) * (size_t)n_ref));

    sw_peer_destroy(&evil);
    sw_test_kill(run);
    sw_test_kill(tail);
    sw_test_kill(head);
    sw_test_kill(relay);
    return sw_test_done();
}
