/*
 * test_fair.c - one cluster member or client cannot starve the others. A keyed
 * cluster of real processes (relay, head 0:15 with --max-sessions 2
 * --max-sessions-per-client 1 --max-queue 3 --max-queue-per-client 2, tail
 * 15:30 with --max-sessions 2; SmolLM2, CURVE and sealing on):
 *
 *  - the head's quotas: "mallory" (a client key) sends 6 long requests: one
 *    runs, two wait, three are refused as busy for the per-client quota;
 *    client A's request then runs at once in the second slot (mallory's
 *    waiting ones do not block it), and client B's waits in the room the
 *    quota left in the queue; both give exactly `shardwire generate`'s
 *    tokens while mallory's first request still runs;
 *  - a huge prompt: mallory's 2 MiB prompt (plain, and as 2 MiB of chat
 *    messages) is refused within a second or so (the head stops tokenizing
 *    once the prompt cannot fit), and client A's request, sent meanwhile,
 *    streams as usual;
 *  - a stage's sessions: "member" (a node key with the cluster key) sends the
 *    tail two rounds whose verification fails: the tail frees both sessions,
 *    so two good rounds right after get verdicts; those two sessions then
 *    fill the tail, and a third of the member's is refused as busy. The
 *    member then touches both every half second (as if in use, never idle for
 *    NODE_EVICT_IDLE_MS) while a request runs: the tail gives the head, whose
 *    key holds none, the member's least recently used session (fair share,
 *    issue 21 finding 9; before, the request failed at once and kept failing
 *    while the member touched its sessions) and the request gives exact
 *    tokens. Last, the member fills the tail again, leaves both idle, and
 *    after 5 s its next session finds room.
 */
#include "client.h"
#include "sw_attack.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define N_A 64
#define N_B 8
#define S_EVICT_MS 5000 /* node.h NODE_EVICT_IDLE_MS: a stage's idle session makes room */

static char s_dir[64];
static char s_ep[64];
static swa_t s_a;
static const char *s_prompt = "The capital of France is";

static double s_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* mallory: a client of the library (access key, client key "mallory"). */
static sw_client_t *s_mallory(void)
{
    sw_sec_args_t sa = {.key_file = swa_path(&s_a, "mallory", ".key"),
                        .relay_key = swa_path(&s_a, "relay", ".pub"),
                        .access_key = {swa_path(&s_a, "access.key", ""), NULL}};
    sw_sec_t sec;
    char err[512];
    if (sw_sec_load(&sa, s_ep, &sec, err, sizeof err) != 0)
        return NULL;
    sw_client_opts_t o = {
        .relay = s_ep, .sec = &sec, .name = "mallory", .connect_timeout_ms = 5000};
    sw_client_t *c = sw_client_new(&o, err, sizeof err);
    sw_sec_wipe(&sec);
    if (!c)
        fprintf(stderr, "mallory: %s\n", err);
    return c;
}

/* Events of c for up to ms: counts busy refusals that name the per-client queue quota, and
 * the requests that ended (any way). */
static void s_events(sw_client_t *c, int ms, int *busy_quota, int *ended)
{
    const double until = s_now() + ms / 1e3;
    while (s_now() < until) {
        sw_client_event_t ev;
        if (sw_client_next(c, &ev, 100) != 0)
            continue;
        if (ev.type == SW_CLIENT_EV_ERROR && ev.code == SW_CLIENT_EBUSY &&
            strstr(ev.message, "--max-queue-per-client"))
            ++*busy_quota;
        if (ev.type != SW_CLIENT_EV_TOKENS)
            ++*ended;
    }
}

/* Part 1: the head's per-client session and queue quotas. */
static void s_quotas(const int32_t *ref)
{
    sw_client_t *mal = s_mallory();
    SW_CHECK(mal != NULL);
    if (!mal)
        return;
    sw_client_request_t q = sw_client_request_default();
    q.prompt = "1, 2, 3, 4, 5, 6, 7, 8, 9, 10,";
    q.n_predict = 1900; /* minutes of work each */
    q.timeout_ms = 300000;
    char id[SW_CLIENT_ID_LEN], err[256];
    for (int i = 0; i < 6; i++)
        SW_CHECK_INT(sw_client_submit(mal, "head", &q, id, err, sizeof err), 0);
    int busy = 0, ended = 0;
    s_events(mal, 1500, &busy, &ended);
    printf("quotas: mallory's 6 requests: %d refused for the per-client queue quota\n", busy);
    SW_CHECK_INT(busy, 3);
    SW_CHECK_INT(ended, 3);
    const double t0 = s_now();
    pid_t a = sw_test_run_bg(s_ep, "head", s_prompt, N_A, 40, "runA");
    /* B once A runs: both slots are taken, B waits in the queue */
    for (int i = 0; i < 200 && sw_test_count_in_file(sw_test_log("cluster.log"),
                                                     "prompt tokens, 64 to generate") == 0;
         i++)
        usleep(50000);
    pid_t b = sw_test_run_bg(s_ep, "head", s_prompt, N_B, 60, "runB");
    s_events(mal, 500, &busy, &ended);
    SW_CHECK(sw_test_run_exact(a, "runA", ref, N_A, 60));
    const double ta = s_now() - t0;
    SW_CHECK(sw_test_run_exact(b, "runB", ref, N_B, 60));
    SW_CHECK_INT(sw_test_count_lines(sw_test_log("cluster.log"), "from client-", "waits (position"),
                 1);
    s_events(mal, 200, &busy, &ended);
    printf("quotas: client A's %d tokens in %.1f s, then client B's, while mallory's first "
           "request still ran (%d of mallory's ended)\n",
           N_A, ta, ended);
    SW_CHECK_INT(ended, 3);  /* mallory's running one never stopped for them */
    sw_client_destroy(&mal); /* cancels the rest */
}

/* Part 2: a 2 MiB prompt costs the head a moment, not seconds. */
static void s_huge_prompt(const int32_t *ref)
{
    sw_client_t *mal = s_mallory();
    SW_CHECK(mal != NULL);
    if (!mal)
        return;
    const size_t big = SW_WIRE_MAX_PROMPT_BYTES - 16;
    char *text = malloc(big + 1);
    for (size_t i = 0; i < big; i++)
        text[i] = "abcdefgh ij"[i % 11];
    text[big] = 0;
    pid_t a = sw_test_run_bg(s_ep, "head", s_prompt, N_B, 60, "runA2");
    for (int k = 0; k < 2; k++) {
        sw_client_request_t q = sw_client_request_default();
        sw_client_msg_t msgs[2] = {{"system", "You are terse."}, {"user", text}};
        if (k == 0) {
            q.prompt = text;
        } else {
            q.messages = msgs;
            q.n_messages = 2;
        }
        char id[SW_CLIENT_ID_LEN], err[256];
        const double t0 = s_now();
        SW_CHECK_INT(sw_client_submit(mal, "head", &q, id, err, sizeof err), 0);
        int refused = 0;
        while (!refused && s_now() - t0 < 30) {
            sw_client_event_t ev;
            if (sw_client_next(mal, &ev, 200) == 0 && ev.type == SW_CLIENT_EV_ERROR) {
                refused = strstr(ev.message, "context") != NULL;
                if (!refused)
                    fprintf(stderr, "huge prompt: %s\n", ev.message);
            }
        }
        const double dt = s_now() - t0;
        printf("huge prompt: %s of 2 MiB refused in %.2f s\n", k ? "chat messages" : "a prompt",
               dt);
        SW_CHECK(refused);
        SW_CHECK(dt < 2.5);
        usleep(700000); /* the client byte rate of the relay (4 MiB/s) */
    }
    SW_CHECK(sw_test_run_exact(a, "runA2", ref, N_B, 60));
    free(text);
    sw_client_destroy(&mal);
}

/* Part 3: a stage frees what failed, and what lies idle makes room. */
static void s_stage_sessions(const int32_t *ref)
{
    sw_peer_t *m = swa_member(&s_a, "member", 0, 15);
    SW_CHECK(m != NULL);
    if (!m)
        return;
    const char *r[] = {"member", "tail"};
    /* two rounds whose draft is outside the vocabulary: verification fails */
    for (int i = 0; i < 2; i++)
        SW_CHECK_INT(swa_shape(m, "tail", 15, r, 2, 1, "member", 0x7100 + i, 60000),
                     SHARDWIRE__ERROR_CODE__ERR_BAD_REQUEST);
    /* their sessions are gone: two good rounds find room at once */
    for (int i = 0; i < 2; i++)
        SW_CHECK_INT(swa_shape(m, "tail", 15, r, 2, 1, "member", 0x7200 + i, 0), SWA_VERDICT);
    /* ... and fill the tail: a third session of the member's is refused */
    SW_CHECK_INT(swa_shape(m, "tail", 15, r, 2, 1, "member", 0x7300, 0),
                 SHARDWIRE__ERROR_CODE__ERR_BUSY);
    /* the member keeps both in use; the head's request still gets a session */
    const char *log = sw_test_log("cluster.log");
    const int fair0 = sw_test_count_in_file(log, "(fair share)");
    int touches = 0, verdicts = 0;
    for (int i = 0; i < 2; i++)
        SW_CHECK_INT(swa_shape(m, "tail", 15, r, 2, 1, "member", 0x7200 + i, 0), SWA_VERDICT);
    const double t0 = s_now();
    pid_t a = sw_test_run_bg(s_ep, "head", s_prompt, N_A, 30, "runHeld");
    siginfo_t si;
    memset(&si, 0, sizeof si);
    while (waitid(P_PID, (id_t)a, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid == 0 &&
           s_now() - t0 < 60) {
        for (int i = 0; i < 2; i++, touches++)
            verdicts += swa_shape(m, "tail", 15, r, 2, 1, "member", 0x7200 + i, 0) == SWA_VERDICT;
        usleep(500000);
    }
    const int held_ok = sw_test_run_exact(a, "runHeld", ref, N_A, 60);
    const int fair = sw_test_count_in_file(log, "(fair share)") - fair0;
    printf("stage sessions: the member touching its 2 sessions (%d touches, %d verdicts) during "
           "the run: the head's request %s in %.1f s, %d session(s) given up for the fair "
           "share\n",
           touches, verdicts, held_ok ? "exact" : "FAILED", s_now() - t0, fair);
    SW_CHECK(held_ok);
    SW_CHECK(fair >= 1);
    /* the member fills the tail again; once its sessions lie idle its next one finds room */
    usleep(1500000); /* the head closes its session at the tail */
    for (int i = 0; i < 2; i++)
        SW_CHECK_INT(swa_shape(m, "tail", 15, r, 2, 1, "member", 0x7200 + i, 0), SWA_VERDICT);
    SW_CHECK_INT(swa_shape(m, "tail", 15, r, 2, 1, "member", 0x7500, 0),
                 SHARDWIRE__ERROR_CODE__ERR_BUSY);
    usleep((S_EVICT_MS + 1500) * 1000);
    SW_CHECK_INT(swa_shape(m, "tail", 15, r, 2, 1, "member", 0x7500, 0), SWA_VERDICT);
    printf("stage sessions: verification failures freed; idle sessions evicted after %.1f s\n",
           S_EVICT_MS / 1e3);
    sw_peer_destroy(&m);
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
    s_a.dir = s_dir;
    s_a.ep = s_ep;
    const char *nodes[] = {"head", "tail", "member", NULL};
    const char *clients[] = {"client", "mallory", NULL};
    SW_CHECK_INT(sw_test_keys(s_dir, nodes, clients), 0);
    int32_t ref[N_A + 8];
    SW_CHECK_INT(sw_test_generate(model, s_prompt, N_A, ref, N_A + 8), N_A);

    const char *log = sw_test_log("cluster.log");
    static const char *const head_flags[] = {"--max-sessions",
                                             "2",
                                             "--max-sessions-per-client",
                                             "1",
                                             "--max-queue",
                                             "3",
                                             "--max-queue-per-client",
                                             "2",
                                             NULL};
    static const char *const tail_flags[] = {"--max-sessions", "2", NULL};
    pid_t relay = sw_test_relay(s_ep, s_dir, log, NULL);
    pid_t head = sw_test_node(s_ep, s_dir, "head", "0:15", log, head_flags);
    pid_t tail = sw_test_node(s_ep, s_dir, "tail", "15:30", log, tail_flags);
    sw_test_client_env(s_dir, "client");
    SW_CHECK_INT(sw_test_wait_peers(s_ep, 2, 60), 0);
    SW_CHECK_INT(swa_fingerprint(&s_a), 0);

    s_quotas(ref);
    usleep(2500000); /* the head sees mallory gone and closes its sessions */
    s_huge_prompt(ref);
    usleep(2500000);
    s_stage_sessions(ref);

    sw_test_kill(head);
    sw_test_kill(tail);
    sw_test_kill(relay);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", s_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", s_dir);
    return sw_test_done();
}
