/*
 * test_recover_direct.c - a direct link between two later stages lost mid-request (issue 39,
 * audit 22; label slow). Real processes on loopback: one relay with keys, a head, a middle
 * stage and a tail, all on direct links: the head dials the middle's --listen, the middle the
 * tail's, reached through a shardwire-wanem proxy (its --listen-public). A stage passes a
 * round on by the path it came by, so the rounds skip the relay on both hops. The middle's
 * allow-list leaves the tail out (the tail's own dial is refused): the proxy's link is the
 * only one between the two. The head cannot see that link (sw_peer_direct_losses counts its
 * own).
 *
 *  1. the link cut mid-request (the proxy stopped for STOP_MS, so that a round is inside it,
 *     then SIGKILLed): the round in flight gets no verdict; the head's route check (a verdict
 *     late) finds the tail's relay counter short of the rounds the link carried. That is the
 *     link's loss, not a restart: the round alone goes again (`recovery: sending the round at
 *     position`), never the whole session (`recovery: replaying`); output == `generate`'s,
 *     token for token and by its logits digest. Before the fix the head took the tail for
 *     restarted ("has a new relay connection") and replayed the whole session.
 *  2. the proxy back (the link up again), then the tail SIGKILLed mid-request and started
 *     again at once under its name: the restart is still found and the whole session
 *     replayed; output == `generate`'s. Found by the round sent again after the link's loss
 *     (answered with ERR_UNKNOWN_SESSION), or, when the middle dialled the new tail before
 *     the head's route check, only by --round-timeout-ms (10 s here): the check skips a hop
 *     a direct link carries, and the lost round leaves no chunk for the tail to refuse.
 */
#include "sw_fault.h"
#include "sw_limits.h"

#define N_GEN 120
#define DIAL_MS 1000
#define STOP_MS 300 /* the proxy stopped this long before the SIGKILL: a round is inside it */

static swf_cluster_t s_c;
static char s_lsn[64], s_wan[64], s_mid_lsn[64], s_allow[600], s_allow_mid[600];

/* One request with a fault: fault() runs once tokens flow; the result is checked against ref
 * and its whole replays and one-round resends counted. */
static void s_cut(const char *what, const swf_result_t *ref, void (*fault)(void), int *replays,
                  int *resends, double *ms)
{
    const int whole0 = swf_log_count(&s_c, "recovery: replaying");
    const int one0 = swf_log_count(&s_c, "recovery: sending the round at position");
    long hin0 = 0;
    SW_CHECK_INT(swf_peer(s_c.ep, "head", &hin0, NULL), 1);
    swf_client_t cl = {0};
    swf_result_t got;
    SW_CHECK_INT(swf_client_start(&cl, s_c.ep, "Once upon a time,", N_GEN, 300, NULL, what), 0);
    /* tokens flow: 20 messages, before the head need have taken a peer table that shows the
     * direct links since the session's baseline (a baseline from its older table misses
     * them; the route check still tells the link's loss from a restart by the tail's relay
     * connection: its byte counter did not go back) */
    SW_CHECK_INT(swf_wait_msgs_in(s_c.ep, "head", hin0 + 20, 120), 0);
    fault();
    swf_client_wait(&cl, &got);
    SW_CHECK_INT(got.rc, 0);
    SW_CHECK(swf_same(&got, ref));
    SW_CHECK(!strcmp(got.digest, ref->digest));
    if (!swf_same(&got, ref))
        fprintf(stderr, "%s: tokens differ at %d: %s\n", what, swf_diff_at(&got, ref), got.err);
    *replays = swf_log_count(&s_c, "recovery: replaying") - whole0;
    *resends = swf_log_count(&s_c, "recovery: sending the round at position") - one0;
    *ms = got.total_ms;
    fprintf(stderr, "%s: %d tokens in %.0f ms; %d whole replay(s), %d one-round resend(s)\n", what,
            got.n, got.total_ms, *replays, *resends);
}

static void s_cut_link(void)
{
    kill(s_c.wanem, SIGSTOP); /* the round in flight is inside the proxy when it dies */
    usleep(STOP_MS * 1000);
    swf_kill9(&s_c.wanem);
}

static void s_restart_tail(void)
{
    swf_kill9(&s_c.nodes[2].pid);
    swf_start_node(&s_c, 2);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    swf_result_t ref;
    swf_reference(sw_test_model(), "Once upon a time,", N_GEN, NULL, &ref);
    SW_CHECK(ref.ok && ref.n == N_GEN);

    snprintf(s_c.keys, sizeof s_c.keys, "%s", sw_test_tmpdir());
    const char *names[] = {"head", "mid", "tail", NULL}, *clients[] = {"client", NULL};
    SW_CHECK_INT(sw_test_keys(s_c.keys, names, clients), 0);
    sw_test_client_env(s_c.keys, "client");
    snprintf(s_allow, sizeof s_allow, "%s/allow.txt", s_c.keys);
    snprintf(s_allow_mid, sizeof s_allow_mid, "%s/allow_mid.txt", s_c.keys);
    size_t len = 0;
    char *allow = sw_test_read_file(s_allow, &len);
    FILE *f = fopen(s_allow_mid, "w");
    SW_CHECK(allow && f);
    for (char *line = allow, *end; line && *line; line = end ? end + 1 : NULL) {
        end = strchr(line, '\n');
        const int n = end ? (int)(end - line) : (int)strlen(line);
        if (f && (n < 5 || strncmp(line + n - 5, " tail", 5) != 0)) /* all but the tail */
            fprintf(f, "%.*s\n", n, line);
    }
    if (f)
        fclose(f);
    free(allow);
    snprintf(s_mid_lsn, sizeof s_mid_lsn, "127.0.0.1:%d", sw_test_free_port());
    snprintf(s_lsn, sizeof s_lsn, "127.0.0.1:%d", sw_test_free_port());
    snprintf(s_wan, sizeof s_wan, "127.0.0.1:%d", sw_test_free_port());
    const char *fl_head[] = {"--recover-timeout-s", "60", "--round-timeout-ms", "10000", NULL};
    const char *fl_mid[] = {"--listen",         s_mid_lsn, "--allow", s_allow_mid,
                            "--direct-dial-ms", "1000",    NULL};
    const char *fl_tail[] = {"--listen", s_lsn,   "--listen-public",  s_wan,
                             "--allow",  s_allow, "--direct-dial-ms", "1000",
                             NULL};
    swf_node(&s_c.nodes[0], "head", "0:10", fl_head);
    swf_node(&s_c.nodes[1], "mid", "10:20", fl_mid);
    swf_node(&s_c.nodes[2], "tail", "20:30", fl_tail);
    /* the proxy before the tail's listener (swf_stop ends it as c.wanem) */
    s_c.wanem = sw_test_spawn_wanem(s_wan, s_lsn, 1, sw_test_log("recover_direct_wanem.log"));
    SW_CHECK(s_c.wanem > 0);
    /* swf_start's steps, but for the keys made above (the middle's allow-list names them) */
    s_c.model = sw_test_model();
    s_c.n = 3;
    s_c.port = sw_test_free_port();
    s_c.relay_hb = 200;
    snprintf(s_c.listen, sizeof s_c.listen, "tcp://127.0.0.1:%d", s_c.port);
    snprintf(s_c.ep, sizeof s_c.ep, "%s", s_c.listen);
    snprintf(s_c.log, sizeof s_c.log, "%s", sw_test_log("recover_direct.log"));
    unlink(s_c.log);
    SW_CHECK(swf_start_relay(&s_c) > 0);
    for (int i = 0; i < 3; i++)
        swf_start_node(&s_c, i);
    if (sw_test_wait_peers(s_c.ep, 3, 60) != 0) {
        SW_CHECK(0);
        swf_stop(&s_c);
        return sw_test_done();
    }
    SW_CHECK_INT(swf_wait_log(&s_c, "direct: link to mid (", 1, 60), 0);
    SW_CHECK_INT(swf_wait_log(&s_c, "direct: link to tail (", 1, 60), 0);
    usleep((SW_DIRECT_QUIET_MS + 300) * 1000); /* whatever went to it by the relay is there */
    char hp[16] = "";
    double rtt = -1;
    SW_CHECK_INT(swf_hop(s_c.ep, "mid", "tail", hp, sizeof hp, &rtt), 0);
    SW_CHECK(!strcmp(hp, "direct"));
    SW_CHECK_INT(swf_hop(s_c.ep, "head", "mid", hp, sizeof hp, &rtt), 0);
    SW_CHECK(!strcmp(hp, "direct"));

    /* 1. the link between mid and tail cut mid-request */
    int replays = 0, resends = 0;
    double cut_ms = 0, restart_ms = 0;
    s_cut("cut", &ref, s_cut_link, &replays, &resends, &cut_ms);
    SW_CHECK(swf_log_count(&s_c, "direct: link to tail lost") >= 1);
    SW_CHECK_INT(replays, 0);
    SW_CHECK(resends >= 1 && resends <= 2);
    SW_CHECK_INT(swf_log_count(&s_c, "has a new relay connection"), 0);
    /* named as the link's loss: seen in a table since the baseline, or only by the tail's
     * missing chunks on the same relay connection (a cut before any table showed the link) */
    SW_CHECK(swf_log_count(&s_c, "the direct link from 'mid' to 'tail' is gone") +
                 swf_log_count(&s_c, "went by a direct link from 'mid' that is gone") >=
             1);

    /* 2. the link back, then the tail restarted mid-request: still a whole replay */
    const int ups = swf_log_count(&s_c, "direct: link to tail (");
    s_c.wanem = sw_test_spawn_wanem(s_wan, s_lsn, 1, sw_test_log("recover_direct_wanem.log"));
    SW_CHECK_INT(swf_wait_log(&s_c, "direct: link to tail (", ups + 1, 60), 0);
    usleep((SW_DIRECT_QUIET_MS + 300) * 1000);
    const int unknown0 = swf_log_count(&s_c, "stage restarted?");
    s_cut("restart", &ref, s_restart_tail, &replays, &resends, &restart_ms);
    SW_CHECK(replays >= 1);
    fprintf(stderr,
            "restart: found by %d ERR_UNKNOWN_SESSION answer(s), %d new-connection check(s), "
            "%d lost-link check(s) in all\n",
            swf_log_count(&s_c, "stage restarted?") - unknown0,
            swf_log_count(&s_c, "has a new relay connection"),
            swf_log_count(&s_c, "the direct link from 'mid' to 'tail' is gone"));

    swf_stop(&s_c);
    return sw_test_done();
}
