/*
 * test_fair_compute.c - a long prompt shares the pipeline, and one client key's
 * long prompts leave another key's requests their time (issue 33 point 2,
 * issue 35 finding 1; node/sched.h). A keyed cluster of real processes on
 * loopback: relay, head 0:15 and tail 15:30 of SmolLM2 (one thread each,
 * --ctx 4096, the head's defaults otherwise: --max-sessions 8), clients
 * "alice", "bob" and "mallory" with their own keys.
 *
 *  A. A short request's time to first token while another session prefills
 *     2,000 tokens: alice's short requests (a 6-token prompt, 4 tokens) one
 *     after another while bob's 2,000-token prompt is prefilled; the median
 *     of their times to first token stays within 2x of the median alone
 *     (before: each waited for the whole prefill, 24.4 s against 35 ms
 *     alone, 680x). Bob's prompt, cut in pieces that the stages evaluate
 *     as parts of their prompt windows, gives `shardwire generate`'s tokens.
 *  B. One key's long prefills against another key's request: mallory sends
 *     6 requests of 2,000 random tokens (1 token each, as in the issue's
 *     attack); alice's 64-token request then takes at most 3x its time
 *     alone (the slower of its medians before and after mallory's prompts)
 *     and gives `shardwire generate`'s tokens (before: it failed at its
 *     deadline).
 *  C. A key that took every session while nobody waited gives one back:
 *     mallory's 8 requests of 48 tokens run at once (the head's 8
 *     sessions); alice's short request then starts at once (one of
 *     mallory's sessions is parked: its caches freed, the head's log says
 *     so), and the parked one goes on afterwards (its rounds sent again)
 *     and ends with exactly `shardwire generate`'s tokens, like the 7
 *     others.
 *
 * The timings are medians of several requests measured by the client
 * library (request sent to first token, to the last); the bounds are the
 * issue's, loose next to what the scheduler gives on an idle machine
 * (docs/benchmarks.md, "Fair shares").
 */
#include "client.h"
#include "sw_attack.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define N_SHORT 4      /* tokens of a short request */
#define N_ALICE 64     /* tokens of alice's request in part B */
#define N_BOB 4        /* tokens after bob's long prompt */
#define LONG_WORDS 700 /* words of a long prompt: about 2,000 tokens */

static char s_dir[64];
static char s_ep[64];
static swa_t s_a;
static const char *s_short = "The capital of France is";
static const char *s_alice = "Once upon a time";

/* A client of the library with `who`'s client key and the access key. */
static sw_client_t *s_client(const char *who)
{
    return swa_client_lib(&s_a, who, NULL);
}

/* A prompt of about 2,000 tokens of random words (seed: which). */
static char *s_long_prompt(unsigned which)
{
    static const char *words[] = {"apple", "river",  "stone",  "cloud",  "music",
                                  "paper", "light",  "ocean",  "forest", "garden",
                                  "house", "silver", "yellow", "dragon"};
    char *p = malloc(LONG_WORDS * 16);
    if (!p)
        return NULL;
    size_t at = 0;
    unsigned x = 2463534242u + which * 7919u;
    for (int i = 0; i < LONG_WORDS; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        at += (size_t)snprintf(p + at, 16, "%s%s%u", i ? " " : "", words[x % 14], (x >> 8) % 100);
    }
    return p;
}

/* Runs one greedy request of alice's to its end: 0 with the client's time
 * to first token and total time (ms) and its tokens in out (n_out), or -1. */
static int s_run(sw_client_t *c, const char *prompt, int n, double *ttft, double *total,
                 int32_t *out, int *n_out)
{
    sw_client_request_t q = sw_client_request_default();
    q.prompt = prompt;
    q.n_predict = n;
    q.timeout_ms = 240000;
    char id[SW_CLIENT_ID_LEN], err[256];
    if (sw_client_submit(c, "head", &q, id, err, sizeof err) != 0) {
        fprintf(stderr, "submit: %s\n", err);
        return -1;
    }
    *n_out = 0;
    const double t0 = swa_now();
    while (swa_now() - t0 < 250) {
        sw_client_event_t ev;
        if (sw_client_next(c, &ev, 200) != 0)
            continue;
        for (int i = 0; i < ev.n_tokens && *n_out < n; i++)
            out[(*n_out)++] = (int32_t)ev.tokens[i];
        if (ev.type == SW_CLIENT_EV_ERROR) {
            fprintf(stderr, "request failed: %s\n", ev.message);
            return -1;
        }
        if (ev.type == SW_CLIENT_EV_DONE) {
            *ttft = ev.stats->ttft_ms;
            *total = ev.stats->total_ms;
            return 0;
        }
    }
    return -1;
}

static int s_cmp(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double s_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, s_cmp);
    return n ? (n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2) : 0;
}

/* 1 while pid runs. */
static int s_alive(pid_t pid)
{
    siginfo_t si;
    memset(&si, 0, sizeof si);
    return waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid == 0;
}

/* Waits until the head's log shows `count` requests with `needle` started. */
static void s_wait_log(const char *needle, int count, int timeout_s)
{
    const char *log = sw_test_log("cluster.log");
    for (int i = 0; i < timeout_s * 20 && sw_test_count_in_file(log, needle) < count; i++)
        usleep(50000);
}

/* Part A, one try: alice's short requests alone (median into *m_alone), then while bob's
 * 2,000-token prompt is prefilled (median of *k into *m_during); bob's output checked. */
static void s_try_a(sw_client_t *alice, const int32_t *ref_short, const char *bob_prompt,
                    const int32_t *ref_bob, double *m_alone, double *m_during, int *k)
{
    double alone[5] = {0}, during[12] = {0}, total;
    int32_t got[N_SHORT];
    int n_got, ok = 1;
    for (int i = 0; i < 5; i++) {
        ok &= s_run(alice, s_short, N_SHORT, &alone[i], &total, got, &n_got) == 0;
        ok &= n_got == N_SHORT && !memcmp(got, ref_short, sizeof got);
    }
    SW_CHECK(ok);
    *m_alone = s_median(alone, 5);
    sw_test_client_env(s_dir, "bob");
    const int started = sw_test_count_in_file(sw_test_log("cluster.log"), "prompt tokens, 4 to");
    pid_t bob = sw_test_run_bg(s_ep, "head", bob_prompt, N_BOB, 600, "bob");
    s_wait_log("prompt tokens, 4 to", started + 1, 60);
    usleep(500000); /* its prefill is under way */
    *k = 0;
    while (*k < 12 && s_alive(bob)) {
        double t;
        ok = s_run(alice, s_short, N_SHORT, &t, &total, got, &n_got) == 0 && n_got == N_SHORT &&
             !memcmp(got, ref_short, sizeof got);
        SW_CHECK(ok);
        if (!ok)
            break;
        if (s_alive(bob)) /* it ended during the prefill */
            during[(*k)++] = t;
    }
    *m_during = s_median(during, *k);
    /* bob's prompt went in pieces and gives what one process gives */
    SW_CHECK(sw_test_run_exact(bob, "bob", ref_bob, N_BOB, 600));
}

/* Part A: alice's short requests while bob's 2,000-token prompt is prefilled, within 2x of
 * alone. Tried a second time when the first is over: on a shared 2-core machine one noisy
 * second took a 35 ms median to 79 ms (2.23x, 1 run in 5); a scheduler that let the prefill
 * block the short request is hundreds of times over (346x), at every try. */
static void s_short_during_prefill(sw_client_t *alice, const int32_t *ref_short)
{
    double m_alone = 0, m_during = 0;
    int k = 0;
    for (unsigned attempt = 1; attempt <= 2; attempt++) {
        /* a prompt of its own each try: the head's prefix cache would skip a repeated one */
        char *bob_prompt = s_long_prompt(attempt == 1 ? 1 : 2);
        int32_t ref_bob[N_BOB + 8];
        SW_CHECK_INT(sw_test_generate(sw_test_model(), bob_prompt, N_BOB, ref_bob, N_BOB + 8),
                     N_BOB);
        s_try_a(alice, ref_short, bob_prompt, ref_bob, &m_alone, &m_during, &k);
        free(bob_prompt);
        printf("A: a short request's time to first token: %.0f ms alone (median of 5), %.0f ms "
               "(median of %d) while bob's 2,000-token prompt was prefilled: %.2fx (try %u)\n",
               m_alone, m_during, k, m_during / m_alone, attempt);
        if (k >= 3 && m_during <= 2 * m_alone)
            break;
    }
    SW_CHECK(k >= 3);
    SW_CHECK(m_during <= 2 * m_alone);
}

/* Part B: alice's 64-token request while mallory's 6 long prompts are prefilled. */
static void s_key_against_key(sw_client_t *alice, const int32_t *ref_alice)
{
    double alone[3] = {0}, ttft, total;
    int32_t got[N_ALICE];
    int n_got, ok = 1;
    for (int i = 0; i < 3; i++) {
        ok &= s_run(alice, s_alice, N_ALICE, &ttft, &alone[i], got, &n_got) == 0;
        ok &= n_got == N_ALICE && !memcmp(got, ref_alice, sizeof got);
    }
    SW_CHECK(ok);
    const double m_alone = s_median(alone, 3);
    sw_test_client_env(s_dir, "mallory");
    pid_t mal[6];
    char *prompts[6];
    const int started = sw_test_count_in_file(sw_test_log("cluster.log"), "prompt tokens, 1 to");
    for (int i = 0; i < 6; i++) {
        char tag[16];
        snprintf(tag, sizeof tag, "mallory%d", i);
        prompts[i] = s_long_prompt(10 + (unsigned)i);
        mal[i] = sw_test_run_bg(s_ep, "head", prompts[i], 1, 600, tag);
    }
    s_wait_log("prompt tokens, 1 to", started + 6, 60);
    usleep(500000);
    double during[3] = {0};
    int k = 0;
    for (int i = 0; i < 3; i++) {
        const int r = s_run(alice, s_alice, N_ALICE, &ttft, &total, got, &n_got);
        SW_CHECK(r == 0 && n_got == N_ALICE && !memcmp(got, ref_alice, sizeof got));
        if (r == 0)
            during[k++] = total;
    }
    int running = 0;
    for (int i = 0; i < 6; i++)
        running += s_alive(mal[i]);
    for (int i = 0; i < 6; i++) {
        sw_test_kill(mal[i]);
        free(prompts[i]);
    }
    /* alone again after mallory's prompts: the baseline is the slower of the two medians, so
     * a change in the machine's load during the part is not taken for unfairness */
    double after[3] = {0};
    for (int i = 0; i < 3; i++) {
        ok &= s_run(alice, s_alice, N_ALICE, &ttft, &after[i], got, &n_got) == 0;
        ok &= n_got == N_ALICE && !memcmp(got, ref_alice, sizeof got);
    }
    SW_CHECK(ok);
    const double m_after = s_median(after, 3), m_base = m_after > m_alone ? m_after : m_alone;
    const double m_during = k ? s_median(during, k) : 1e9;
    printf("B: alice's %d-token request: %.0f ms alone (medians of 3: %.0f before, %.0f after), "
           "%.0f ms (median of %d) while mallory's 6 prompts of 2,000 tokens were prefilled (%d "
           "still were after): %.2fx\n",
           N_ALICE, m_base, m_alone, m_after, m_during, k, running, m_during / m_base);
    SW_CHECK(running >= 1); /* it really ran during their prefills */
    SW_CHECK_INT(k, 3);
    SW_CHECK(m_during <= 3 * m_base);
}

#define N_PARK 48 /* tokens of mallory's requests in part C */

/* Part C: mallory takes every session; alice's request makes one of them park. */
static void s_parking(sw_client_t *alice, const int32_t *ref_short, const int32_t *ref_alice)
{
    sw_client_t *mal = s_client("mallory");
    SW_CHECK(mal != NULL);
    if (!mal)
        return;
    const char *log = sw_test_log("cluster.log");
    const int parked0 = sw_test_count_in_file(log, "parked after");
    const int resumed0 = sw_test_count_in_file(log, "goes on after");
    sw_client_request_t q = sw_client_request_default();
    q.prompt = s_alice;
    q.n_predict = N_PARK;
    q.timeout_ms = 240000;
    char err[256];
    int32_t got[8][N_PARK];
    swa_reqs_t m = {
        .n = 8, .cap = N_PARK, .ref = ref_alice, .got = &got[0][0], .who = "mallory", .t_done = -1};
    for (int i = 0; i < 8; i++)
        SW_CHECK_INT(sw_client_submit(mal, "head", &q, m.ids[i], err, sizeof err), 0);
    const double t0 = swa_now();
    SW_CHECK_INT(swa_reqs_first(&m, mal, 60), 8); /* one key alone took every session */
    double ttft, total;
    int32_t s_got[N_SHORT];
    int n_s;
    SW_CHECK_INT(s_run(alice, s_short, N_SHORT, &ttft, &total, s_got, &n_s), 0);
    SW_CHECK(n_s == N_SHORT && !memcmp(s_got, ref_short, sizeof s_got));
    while (m.done < 8 && swa_now() - t0 < 240) {
        sw_client_event_t ev;
        if (sw_client_next(mal, &ev, 200) == 0)
            swa_reqs_take(&m, &ev);
    }
    const int parked = sw_test_count_in_file(log, "parked after") - parked0;
    const int resumed = sw_test_count_in_file(log, "goes on after") - resumed0;
    printf("C: mallory's 8 requests took the 8 sessions; alice's short request: first token in "
           "%.0f ms, %d of mallory's parked for it and went on after; %d of 8 exact\n",
           ttft, parked, m.exact);
    SW_CHECK(parked >= 1 && resumed == parked);
    SW_CHECK_INT(m.exact, 8);
    sw_client_destroy(&mal);
}

int main(void)
{
    const char *model = sw_test_model();
    signal(SIGPIPE, SIG_IGN);
    const char *nodes[] = {"head", "tail", NULL};
    const char *clients[] = {"alice", "bob", "mallory", NULL};
    pid_t relay = swa_relay(&s_a, s_dir, s_ep, nodes, clients, NULL);
    SW_CHECK(relay > 0);
    int32_t ref_short[N_SHORT + 8], ref_alice[N_ALICE + 8];
    SW_CHECK_INT(sw_test_generate(model, s_short, N_SHORT, ref_short, N_SHORT + 8), N_SHORT);
    SW_CHECK_INT(sw_test_generate(model, s_alice, N_ALICE, ref_alice, N_ALICE + 8), N_ALICE);

    const char *log = sw_test_log("cluster.log");
    static const char *const flags[] = {"--ctx", "4096", NULL};
    pid_t head = sw_test_node(s_ep, s_dir, "head", "0:15", log, flags);
    pid_t tail = sw_test_node(s_ep, s_dir, "tail", "15:30", log, flags);
    sw_test_client_env(s_dir, "alice");
    SW_CHECK_INT(sw_test_wait_peers(s_ep, 2, 60), 0);
    sw_client_t *alice = s_client("alice");
    SW_CHECK(alice != NULL);
    if (alice) {
        double t, total;
        int32_t warm[2];
        int n;
        SW_CHECK_INT(s_run(alice, s_short, 2, &t, &total, warm, &n), 0); /* first touch */
        s_short_during_prefill(alice, ref_short);
        usleep(1000000);
        s_key_against_key(alice, ref_alice);
        usleep(3000000); /* mallory's requests end at the head (its clients were killed) */
        s_parking(alice, ref_short, ref_alice);
        sw_client_destroy(&alice);
    }
    sw_test_kill(head);
    sw_test_kill(tail);
    sw_test_kill(relay);
    swa_rmdir(s_dir);
    return sw_test_done();
}
