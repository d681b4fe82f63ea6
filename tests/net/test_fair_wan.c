/*
 * test_fair_wan.c - fairness that never idles capacity (issue 35, "Also
 * measured"): one client key alone may use every session of the head. A
 * keyed cluster of real processes with a 172 ms emulated WAN round trip
 * (shardwire-wanem, 43 ms each way on the head's and the tail's link to
 * the relay, as scripts/bench/bench_multi.py): relay, head 0:15 and tail
 * 15:30 of SmolLM2 at the node's defaults (--max-sessions 8, no
 * --max-sessions-per-client), one client key sending through the head's
 * link.
 *
 * One request of N_TOK tokens (plain decoding), then 8 at once from the
 * same key, in turns (1, 8, 1, 8, 1: the machine's load drifts alike for
 * both): the 8 give several times one request's aggregate tokens per second
 * (every token over the time from the first request sent to the last
 * token; medians), none of them waited for a session (the head's log has
 * no "waits" line), and each gives `shardwire generate`'s tokens. The
 * ratio is 7.75x on a quiet machine, but it is a timing: under CI's
 * ASan+UBSan build beside another test the 8 sessions' compute, not the
 * WAN, set the pace (4.70x in the CI run of 2026-12-05). So the ratio is
 * asserted at 3x only (8 sessions did run side by side), and the "waits"
 * line is what decides work conservation. Before
 * (the per-key share of 6 of 8 sessions kept whether another key waited or
 * not): 2 of the 8 waited for the first ones to end, 4.01x in the issue's
 * run.
 */
#include "client.h"
#include "sw_attack.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define N_TOK 32
#define N_REQ 8
#define DELAY_MS 43

static char s_dir[64];
static char s_relay[64];
static char s_head_ep[64];
static swa_t s_a;
static const char *s_prompt = "The capital of France is";

/* The client, through the head's emulated WAN link. */
static sw_client_t *s_client(void)
{
    return swa_client_lib(&s_a, "client", s_head_ep);
}

/* Sends n greedy requests of N_TOK tokens at once and waits for all: the
 * seconds from the first sent to the last token, the largest time to first
 * token (ms), and how many gave the reference tokens. -1 on a failure. */
static double s_batch(sw_client_t *c, int n, const int32_t *ref, double *ttft_max, int *exact)
{
    sw_client_request_t q = sw_client_request_default();
    q.prompt = s_prompt;
    q.n_predict = N_TOK;
    q.draft = SW_CLIENT_DRAFT_NONE;
    q.timeout_ms = 120000;
    char ids[N_REQ][SW_CLIENT_ID_LEN], err[256];
    int32_t got[N_REQ][N_TOK];
    int n_got[N_REQ] = {0}, done = 0;
    *ttft_max = 0;
    *exact = 0;
    const double t0 = swa_now();
    for (int i = 0; i < n; i++)
        if (sw_client_submit(c, "head", &q, ids[i], err, sizeof err) != 0) {
            fprintf(stderr, "submit: %s\n", err);
            return -1;
        }
    double t_end = t0;
    while (done < n && swa_now() - t0 < 120) {
        sw_client_event_t ev;
        if (sw_client_next(c, &ev, 200) != 0)
            continue;
        int k = 0;
        while (k < n && strcmp(ids[k], ev.id) != 0)
            k++;
        if (k == n)
            continue;
        for (int j = 0; j < ev.n_tokens && n_got[k] < N_TOK; j++)
            got[k][n_got[k]++] = (int32_t)ev.tokens[j];
        if (ev.type == SW_CLIENT_EV_ERROR) {
            fprintf(stderr, "request failed: %s\n", ev.message);
            return -1;
        }
        if (ev.type == SW_CLIENT_EV_DONE) {
            done++;
            t_end = swa_now();
            if (ev.stats->ttft_ms > *ttft_max)
                *ttft_max = ev.stats->ttft_ms;
            *exact += n_got[k] == N_TOK && !memcmp(got[k], ref, sizeof got[k]);
        }
    }
    return done == n ? t_end - t0 : -1;
}

static int s_cmp(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(void)
{
    const char *model = sw_test_model();
    signal(SIGPIPE, SIG_IGN);
    const char *nodes[] = {"head", "tail", NULL};
    const char *clients[] = {"client", NULL};
    pid_t relay = swa_relay(&s_a, s_dir, s_relay, nodes, clients, NULL);
    SW_CHECK(relay > 0);
    const int ph = sw_test_free_port(), pt = sw_test_free_port();
    char relay_addr[64], head_addr[32], tail_addr[32], tail_ep[64];
    snprintf(relay_addr, sizeof relay_addr, "%s", s_relay + strlen("tcp://"));
    snprintf(head_addr, sizeof head_addr, "127.0.0.1:%d", ph);
    snprintf(tail_addr, sizeof tail_addr, "127.0.0.1:%d", pt);
    snprintf(s_head_ep, sizeof s_head_ep, "tcp://%s", head_addr);
    snprintf(tail_ep, sizeof tail_ep, "tcp://%s", tail_addr);
    int32_t ref[N_TOK + 8];
    SW_CHECK_INT(sw_test_generate(model, s_prompt, N_TOK, ref, N_TOK + 8), N_TOK);

    const char *log = sw_test_log("cluster.log");
    pid_t wh = sw_test_spawn_wanem(head_addr, relay_addr, DELAY_MS, sw_test_log("wanem.log"));
    pid_t wt = sw_test_spawn_wanem(tail_addr, relay_addr, DELAY_MS, sw_test_log("wanem.log"));
    SW_CHECK_INT(sw_test_wait_listen(s_head_ep, 20), 0);
    SW_CHECK_INT(sw_test_wait_listen(tail_ep, 20), 0);
    pid_t head = sw_test_node(s_head_ep, s_dir, "head", "0:15", log, NULL);
    pid_t tail = sw_test_node(tail_ep, s_dir, "tail", "15:30", log, NULL);
    sw_test_client_env(s_dir, "client");
    SW_CHECK_INT(sw_test_wait_peers(s_relay, 2, 60), 0);
    sw_client_t *c = s_client();
    SW_CHECK(c != NULL);
    if (c) {
        double ttft1, ttft8, ttft8_max = 0, one[3] = {0}, eight[2] = {0};
        int exact1, exact8, exact = 0;
        SW_CHECK(s_batch(c, 1, ref, &ttft1, &exact1) > 0); /* warm-up: first touch, routes */
        for (int i = 0; i < 5; i++) {
            if (i % 2 == 0) {
                one[i / 2] = s_batch(c, 1, ref, &ttft1, &exact1);
                exact += exact1;
            } else {
                eight[i / 2] = s_batch(c, N_REQ, ref, &ttft8, &exact8);
                exact += exact8;
                ttft8_max = ttft8 > ttft8_max ? ttft8 : ttft8_max;
            }
        }
        qsort(one, 3, sizeof *one, s_cmp);
        const double t1 = one[1], t8 = (eight[0] + eight[1]) / 2;
        const double r1 = N_TOK / t1, r8 = N_REQ * N_TOK / t8;
        printf("one key, %d tokens each over a %d ms round trip: 1 request %.2f s (%.1f tok/s; "
               "median of 3), %d at once %.2f s (%.1f tok/s, first tokens by %.0f ms; mean of "
               "2): %.2fx\n",
               N_TOK, 4 * DELAY_MS, t1, r1, N_REQ, t8, r8, ttft8_max, r8 / r1);
        SW_CHECK(one[0] > 0 && eight[0] > 0 && eight[1] > 0);
        /* a timing: see the top (7.75x quiet; the log's "waits" is the decisive check) */
        SW_CHECK(r8 >= 3 * r1);
        SW_CHECK_INT(exact, 3 + 2 * N_REQ);
        /* none of the 8 waited for a session: the key may use them all while nobody waits */
        SW_CHECK_INT(sw_test_count_in_file(log, "waits (position"), 0);
        sw_client_destroy(&c);
    }
    sw_test_kill(head);
    sw_test_kill(tail);
    sw_test_kill(wh);
    sw_test_kill(wt);
    sw_test_kill(relay);
    swa_rmdir(s_dir);
    return sw_test_done();
}
