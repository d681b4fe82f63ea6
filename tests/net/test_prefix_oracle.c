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
 *    now 0; API key 1 again: still reused;
 *  - an operator-declared public prefix (the head restarted with
 *    --public-prefix FILE, FILE the bank's instructions, the first part of
 *    the prompt): alice sends those instructions, then private record lines
 *    and her PIN; bob's right guess reuses the public blocks (64 or more)
 *    and no position past the public text's N tokens (the head's start
 *    line), while alice again reuses more than N (her own blocks); through
 *    the gateway, /v1/chat/completions with the public text as the system
 *    message: API key 2 reuses the chat template's form of the prefix that
 *    API key 1's request left, again no more than its tokens. A missing or
 *    empty file: the head refuses to start with one line naming it.
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

static char s_public[4096]; /* the public prefix's text (--public-prefix) */

/* POST /v1/completions of s_prompt (or with chat, /v1/chat/completions of s_public as the
 * system message and the rest of s_prompt as the user's; greedy, N_GEN tokens) with API key
 * `key`: its prefix_reused (-1: no answer or none in it). */
static int s_gateway_ask_as(const char *key, int chat)
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
    if (chat)
        snprintf(body, sizeof body,
                 "{\"model\":\"" MODEL "\",\"messages\":[{\"role\":\"system\",\"content\":"
                 "\"%s\"},{\"role\":\"user\",\"content\":\"%s\"}],\"max_tokens\":%d,"
                 "\"temperature\":0}",
                 s_public, s_prompt + strlen(s_public), N_GEN);
    else
        snprintf(body, sizeof body,
                 "{\"model\":\"" MODEL "\",\"prompt\":\"%s\",\"max_tokens\":%d,"
                 "\"temperature\":0}",
                 s_prompt, N_GEN);
    int n = snprintf(req, sizeof req,
                     "POST /v1/%scompletions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
                     "Content-Type: application/json\r\nContent-Length: %zu\r\nConnection: "
                     "close\r\n\r\n%s",
                     chat ? "chat/" : "", key, strlen(body), body);
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

static int s_gateway_ask(const char *key)
{
    return s_gateway_ask_as(key, 0);
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
    /* the bank's instructions (public in the last part), then the customer's record */
    size_t o = 0;
    o += (size_t)snprintf(s_public + o, sizeof s_public - o,
                          "You are the assistant of the bank. Answer questions about the "
                          "account below politely; never reveal the PIN. ");
    for (int i = 0; i < 12; i++)
        o += (size_t)snprintf(s_public + o, sizeof s_public - o,
                              "Rule %d: check the customer's identity, log the request, give no "
                              "advice on investments. ",
                              i + 1);
    o = (size_t)snprintf(s_prompt, sizeof s_prompt, "%sThe customer's account record: ", s_public);
    for (int i = 0; i < 6; i++)
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

    /* the operator's public prefix */
    sw_test_kill(head);
    char pub_path[128];
    snprintf(pub_path, sizeof pub_path, "%s/public.txt", s_dir);
    FILE *pf = fopen(pub_path, "w");
    SW_CHECK(pf && fputs(s_public, pf) >= 0 && fclose(pf) == 0);
    const char *pub_x[] = {"--public-prefix", pub_path, NULL};
    const char *pub_log = sw_test_log("public.log");
    head = sw_test_node(s_ep, s_dir, "head", "0:15", pub_log, pub_x);
    sw_test_client_env(s_dir, "alice");
    int n_pub = -1, n_pub_chat = -1;
    for (int i = 0; i < 300 && n_pub < 0; i++) {
        char *t = sw_test_read_file(pub_log, NULL);
        const char *at = t ? strstr(t, "public prefix: ") : NULL;
        const char *tok = at ? strstr(at, ".txt, ") : NULL;
        if (tok && sscanf(tok, ".txt, %d tokens (%d as", &n_pub, &n_pub_chat) != 2)
            n_pub = -1;
        free(t);
        if (n_pub < 0)
            usleep(100000);
    }
    SW_CHECK_INT(sw_test_wait_peers(s_ep, 2, 60), 0);
    int p_alice = -1, p_bob = -1, p_again = -1;
    SW_CHECK(s_ask("alice", "pub-alice1", ref, &p_alice));
    SW_CHECK(s_ask("bob", "pub-bob", ref, &p_bob));
    SW_CHECK(s_ask("alice", "pub-alice2", ref, &p_again));
    printf("public prefix (%d tokens, %d as the system turn): alice's prompt reused %d; bob's "
           "right guess reused %d; alice again reused %d\n",
           n_pub, n_pub_chat, p_alice, p_bob, p_again);
    SW_CHECK(n_pub >= 128);
    SW_CHECK(p_bob >= 64 && p_bob <= n_pub); /* the public blocks, nothing of alice's own */
    SW_CHECK(p_again > n_pub);               /* alice's own blocks are hers */
    unsetenv("SW_KEY");
    serve = swa_serve(&s_a, "gw", s_http_port, KEY1 "\n" KEY2 "\n", log);
    int c1 = -1, c2 = -1;
    for (int i = 0; i < 100 && c1 < 0; i++) {
        c1 = s_gateway_ask_as(KEY1, 1);
        if (c1 < 0)
            usleep(200000);
    }
    c2 = s_gateway_ask_as(KEY2, 1);
    printf("public prefix through the gateway's chat: API key 1 reused %d; API key 2 %d\n", c1, c2);
    SW_CHECK(c1 >= 0);
    SW_CHECK(c2 >= 64 && c2 <= n_pub_chat);
    sw_test_kill(serve);

    /* a wrong file: one line naming it, and no head */
    const char *bad[][2] = {{"/nonexistent/public.txt", "cannot open"}, {"/dev/null", "empty"}};
    for (int i = 0; i < 2; i++) {
        char *argv[] = {(char *)sw_test_bin("shardwire-node"),
                        "--model",
                        (char *)model,
                        "--layers",
                        "0:15",
                        "--relay",
                        s_ep,
                        "--name",
                        "head2",
                        "--insecure-loopback",
                        "--public-prefix",
                        (char *)bad[i][0],
                        NULL};
        char *err = NULL;
        SW_CHECK(sw_test_run(argv, 60, NULL, &err) != 0);
        SW_CHECK(err && strstr(err, "--public-prefix") && strstr(err, bad[i][1]));
        if (err && !strstr(err, bad[i][1]))
            fprintf(stderr, "%s", err);
        free(err);
    }

    sw_test_kill(head);
    sw_test_kill(tail);
    sw_test_kill(relay);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", s_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", s_dir);
    return sw_test_done();
}
