/*
 * test_prefix_oracle.c - the prefix cache tells a tenant nothing about
 * another's prompts (issue 35, finding 3: bob found alice's PIN among 40-60
 * guesses from `prefix_reused` and the time to the first token, because the
 * head kept one cache namespace for every client).
 *
 * A keyed cluster of real processes (relay, head 0:15, tail 15:30; SmolLM2,
 * CURVE and sealing on; the prefix cache on, as by default); alice and bob
 * hold two client keys:
 *
 *  - alice sends a prompt of about 200 tokens that ends with her PIN;
 *  - bob sends exactly that prompt (the right guess): before, the head took
 *    its first blocks from alice's cache entries and said so
 *    (`prefix_reused` 128 or 192); now bob's key is another tenant: 0;
 *  - alice sends it again: her own prefix is still reused (> 0), and every
 *    answer equals `shardwire generate`'s;
 *  - through the gateway (`shardwire serve`, one client key, two API keys,
 *    each its own tenant: GenerateRequest.tenant): API key 2 sends API key
 *    1's prompt: before, reused 192 (one namespace for the gateway's key);
 *    now 0; API key 1 again: still reused.
 */
#include "sw_attack.h"

#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#define MODEL "SmolLM2-135M-Instruct.Q4_1"
#define KEY1 "oracle-one-0123456789abcdef"
#define KEY2 "oracle-two-0123456789abcdef"

#define N_GEN 4

static char s_dir[64];
static char s_ep[64];
static char s_prompt[4096];
static swa_t s_a;
static int s_http_port;

/* POST /v1/completions of s_prompt (greedy, N_GEN tokens) with API key `key`: its
 * prefix_reused (-1: no answer or none in it). */
static int s_gateway_ask(const char *key)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)s_http_port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct timeval tv = {.tv_sec = 60};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    static char body[8192], req[12288], ans[65536];
    snprintf(body, sizeof body,
             "{\"model\":\"" MODEL "\",\"prompt\":\"%s\",\"max_tokens\":%d,"
             "\"temperature\":0}",
             s_prompt, N_GEN);
    int n = snprintf(req, sizeof req,
                     "POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
                     "Content-Type: application/json\r\nContent-Length: %zu\r\nConnection: "
                     "close\r\n\r\n%s",
                     key, strlen(body), body);
    size_t got = 0;
    if (write(fd, req, (size_t)n) == n)
        for (ssize_t r;
             got < sizeof ans - 1 && (r = read(fd, ans + got, sizeof ans - 1 - got)) > 0;)
            got += (size_t)r;
    close(fd);
    ans[got] = 0;
    const char *at = strstr(ans, "\"prefix_reused\":");
    return at ? atoi(at + strlen("\"prefix_reused\":")) : -1;
}

/* `shardwire run` as client who: 1 when exact; *reused: its prefix_reused (-1 when absent). */
static int s_ask(const char *who, const char *tag, const int32_t *ref, int *reused)
{
    sw_test_client_env(s_dir, who);
    pid_t p = sw_test_run_bg(s_ep, "head", s_prompt, N_GEN, 60, tag);
    int ok = sw_test_run_exact(p, tag, ref, N_GEN, 90);
    char *out = sw_test_read_file(sw_test_log(tag), NULL);
    const char *at = out ? strstr(out, "\"prefix_reused\":") : NULL;
    *reused = at ? atoi(at + strlen("\"prefix_reused\":")) : -1;
    free(out);
    return ok;
}

int main(void)
{
    const char *model = sw_test_model();
    signal(SIGPIPE, SIG_IGN);
    snprintf(s_dir, sizeof s_dir, "%s", sw_test_tmpdir());
    snprintf(s_ep, sizeof s_ep, "tcp://127.0.0.1:%d", sw_test_free_port());
    const char *nodes[] = {"head:head", "stage:tail", NULL};
    const char *clients[] = {"alice", "bob", "gw", NULL};
    SW_CHECK_INT(sw_test_keys(s_dir, nodes, clients), 0);
    size_t o = 0;
    o += (size_t)snprintf(s_prompt + o, sizeof s_prompt - o,
                          "You are the assistant of the bank. The customer's account record "
                          "follows; never reveal it. ");
    for (int i = 0; i < 12; i++)
        o += (size_t)snprintf(s_prompt + o, sizeof s_prompt - o,
                              "Line %d of the record: balance checked, address on file, no "
                              "alerts. ",
                              i + 1);
    snprintf(s_prompt + o, sizeof s_prompt - o, "The customer's PIN is 4821. Question:");
    int32_t ref[N_GEN + 8];
    SW_CHECK_INT(sw_test_generate(model, s_prompt, N_GEN, ref, N_GEN + 8), N_GEN);
    const char *log = sw_test_log("cluster.log");
    pid_t relay = sw_test_relay(s_ep, s_dir, log, NULL);
    pid_t head = sw_test_node(s_ep, s_dir, "head", "0:15", log, NULL);
    pid_t tail = sw_test_node(s_ep, s_dir, "tail", "15:30", log, NULL);
    sw_test_client_env(s_dir, "alice");
    SW_CHECK_INT(sw_test_wait_peers(s_ep, 2, 60), 0);

    int r_alice = -1, r_bob = -1, r_again = -1;
    SW_CHECK(s_ask("alice", "alice1", ref, &r_alice));
    SW_CHECK(s_ask("bob", "bob", ref, &r_bob));
    SW_CHECK(s_ask("alice", "alice2", ref, &r_again));
    printf("prefix oracle: alice's prompt reused %d; bob's right guess reused %d (another "
           "tenant's prefix); alice again reused %d\n",
           r_alice, r_bob, r_again);
    SW_CHECK_INT(r_alice, 0);
    SW_CHECK_INT(r_bob, 0);
    SW_CHECK(r_again >= 64);

    /* the gateway: two API keys, one client key */
    s_a.dir = s_dir;
    s_a.ep = s_ep;
    s_http_port = sw_test_free_port();
    unsetenv("SW_KEY");
    pid_t serve = swa_serve(&s_a, "gw", s_http_port, KEY1 "\n" KEY2 "\n", log);
    int g1 = -1, g2 = -1, g3 = -1;
    for (int i = 0; i < 100 && g1 < 0; i++) {
        g1 = s_gateway_ask(KEY1);
        if (g1 < 0)
            usleep(200000);
    }
    g2 = s_gateway_ask(KEY2);
    g3 = s_gateway_ask(KEY1);
    printf("prefix oracle through the gateway: API key 1 reused %d; API key 2's right guess %d; "
           "API key 1 again %d\n",
           g1, g2, g3);
    SW_CHECK(g1 >= 0);
    SW_CHECK_INT(g2, 0);
    SW_CHECK(g3 >= 64);
    sw_test_kill(serve);

    sw_test_kill(head);
    sw_test_kill(tail);
    sw_test_kill(relay);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", s_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", s_dir);
    return sw_test_done();
}
