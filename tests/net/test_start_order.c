/*
 * test_start_order.c - a cluster whose processes start in any order, with
 * real keys (CurveZMQ + sealing) and a TCP forwarder in front of the relay.
 *
 *  - the client starts first, then a stage dialling through a forwarder
 *    (shardwire-wanem) whose relay is not up yet, then the relay, then the
 *    head: everyone waits, writes one line per wait (not per attempt), and the client's
 *    output equals `shardwire generate`;
 *  - the forwarder's accept-then-close is retried (the stage stays up and
 *    says "forwarder"), while a real relay-key mismatch through the same
 *    forwarder still fails fast with the key error;
 *  - a node with --insecure-loopback against a relay with keys, and a port
 *    where something else (not a relay) answers: one clear error at once;
 *  - --listen with a missing --allow file, --allow without --listen, --listen
 *    without --allow: one line each, exit 2, before the model loads;
 *  - deadlines: `shardwire status` gives up after --connect-timeout-s with
 *    two lines (the wait, the error with its advice); a node with --connect-timeout-s too; a node
 * with no deadline exits cleanly on SIGTERM while it waits;
 *  - `status --expect` waits for named peers (also ones that join after its
 *    first look) and fails when they never come.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sw_test.h"

#define N_GEN 12
static const char *s_prompt = "The three primary colors are";

static char s_dir[256];

static const char *s_path(const char *name)
{
    static char buf[8][512];
    static int slot;
    char *p = buf[slot++ & 7];
    snprintf(p, 512, "%s/%s", s_dir, name);
    return p;
}

static double s_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void s_keygen(const char *who)
{
    char *argv[] = {(char *)sw_test_bin("shardwire"), "keygen", "--out", (char *)s_path(who), NULL};
    SW_CHECK_INT(sw_test_run(argv, 20, NULL, NULL), 0);
}

/* First line of a file, without the newline (static buffer per slot). */
static const char *s_line(const char *path)
{
    static char buf[4][128];
    static int slot;
    char *p = buf[slot++ & 3];
    char *text = sw_test_read_file(path, NULL);
    snprintf(p, 128, "%s", text ? text : "");
    p[strcspn(p, "\r\n")] = 0;
    free(text);
    return p;
}

/* A node's argv (static storage): name, layers, relay endpoint, relay key file. */
static char **s_node_argv(const char *model, const char *name, const char *layers, const char *ep,
                          const char *relay_pub, const char *extra)
{
    static char *argv[32];
    static char key[512];
    snprintf(key, sizeof key, "%s/%s.key", s_dir, name);
    int i = 0;
    argv[i++] = (char *)sw_test_bin("shardwire-node");
    argv[i++] = "--model";
    argv[i++] = (char *)model;
    argv[i++] = "--layers";
    argv[i++] = (char *)layers;
    argv[i++] = "--relay";
    argv[i++] = (char *)ep;
    argv[i++] = "--name";
    argv[i++] = (char *)name;
    argv[i++] = "--threads";
    argv[i++] = "1";
    argv[i++] = "--key";
    argv[i++] = key;
    argv[i++] = "--relay-key";
    argv[i++] = (char *)relay_pub;
    argv[i++] = "--cluster-key";
    argv[i++] = (char *)s_path("cluster.key");
    if (!strncmp(layers, "0:", 2)) {
        argv[i++] = "--access-key";
        argv[i++] = (char *)s_path("access.key");
    }
    if (extra) {
        argv[i++] = "--connect-timeout-s";
        argv[i++] = (char *)extra;
    }
    argv[i] = NULL;
    return argv;
}

static int s_alive(pid_t pid)
{
    return waitpid(pid, NULL, WNOHANG) == 0;
}

/* A server on a free port that is not a relay: greets every connection with
 * an SSH banner and closes. Returns its pid; *port receives the port. */
static pid_t s_not_a_relay(int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 8) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) != 0)
        return -1;
    *port = ntohs(a.sin_port);
    pid_t pid = fork();
    if (pid != 0) {
        close(fd);
        return pid;
    }
    for (;;) {
        int c = accept(fd, NULL, NULL);
        if (c < 0)
            continue;
        const char banner[] = "SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n";
        if (write(c, banner, sizeof banner - 1) < 0) {
            /* nothing to do */
        }
        close(c);
    }
}

int main(void)
{
    const char *model = sw_test_model();
    snprintf(s_dir, sizeof s_dir, "%s", sw_test_tmpdir());
    const char *who[] = {"relay", "head", "tail", "client"};
    for (int i = 0; i < 4; i++)
        s_keygen(who[i]);
    s_keygen("stranger"); /* a relay key pair nobody runs: the wrong pinned key */
    char *ck[] = {(char *)sw_test_bin("shardwire"), "keygen", "--cluster-key",
                  (char *)s_path("cluster.key"), NULL};
    SW_CHECK_INT(sw_test_run(ck, 20, NULL, NULL), 0);
    char *ak[] = {(char *)sw_test_bin("shardwire"), "keygen", "--access-key",
                  (char *)s_path("access.key"), NULL};
    SW_CHECK_INT(sw_test_run(ak, 20, NULL, NULL), 0);
    /* the old allow-list form ("KEY NAME" = a node, "KEY" = a client) still works */
    FILE *f = fopen(s_path("allow.txt"), "w");
    if (!f)
        sw_test_skip("cannot write the allow-list");
    fprintf(f, "%s head\n%s tail\n%s\n", s_line(s_path("head.pub")), s_line(s_path("tail.pub")),
            s_line(s_path("client.pub")));
    fclose(f);

    int relay_port = sw_test_free_port(), fwd_port = sw_test_free_port();
    char relay_ep[64], fwd_ep[64], relay_addr[64], fwd_addr[64];
    snprintf(relay_ep, sizeof relay_ep, "tcp://127.0.0.1:%d", relay_port);
    snprintf(fwd_ep, sizeof fwd_ep, "tcp://127.0.0.1:%d", fwd_port);
    snprintf(relay_addr, sizeof relay_addr, "127.0.0.1:%d", relay_port);
    snprintf(fwd_addr, sizeof fwd_addr, "127.0.0.1:%d", fwd_port);

    /* reference: one process */
    char n_gen[8];
    snprintf(n_gen, sizeof n_gen, "%d", N_GEN);
    int32_t ref[64];
    int n_ref = sw_test_generate(model, s_prompt, N_GEN, ref, 64);
    SW_CHECK_INT(n_ref, N_GEN);

    /* the forwarder: accepts, dials the relay, closes when that fails */
    char *fw[] = {(char *)sw_test_bin("shardwire-wanem"),
                  "--listen",
                  fwd_addr,
                  "--connect",
                  relay_addr,
                  "--delay-ms",
                  "0",
                  NULL};
    pid_t wanem = sw_test_spawn(fw, s_path("wanem.log"));

    /* 1. the client first: nothing is up */
    char *run[] = {(char *)sw_test_bin("shardwire"),
                   "run",
                   "--greedy",
                   "--relay",
                   relay_ep,
                   "-p",
                   (char *)s_prompt,
                   "-n",
                   n_gen,
                   "--json",
                   "--connect-timeout-s",
                   "90",
                   "--key",
                   (char *)s_path("client.key"),
                   "--relay-key",
                   (char *)s_path("relay.pub"),
                   "--access-key",
                   (char *)s_path("access.key"),
                   NULL};
    pid_t client = sw_test_spawn_io(run, s_path("client.out"), s_path("client.err"));

    /* 2. the tail, through the forwarder */
    pid_t tail =
        sw_test_spawn(s_node_argv(model, "tail", "15:end", fwd_ep, s_path("relay.pub"), NULL),
                      s_path("tail.log"));
    usleep(2500000);
    SW_CHECK(s_alive(tail));
    SW_CHECK(s_alive(client));
    /* one line per wait in a log, not one per attempt (the reason stays) */
    SW_CHECK_INT(sw_test_count_in_file(s_path("tail.log"), "waiting for the relay"), 1);
    SW_CHECK(sw_test_count_in_file(s_path("tail.log"), "forwarder or tunnel") >= 1);
    SW_CHECK(sw_test_count_in_file(s_path("tail.log"), "--relay-key") == 0);
    SW_CHECK_INT(sw_test_count_in_file(s_path("client.err"), "waiting for the relay"), 1);
    SW_CHECK(sw_test_count_in_file(s_path("client.err"), "Connection refused") >= 1);

    /* 3. the relay */
    char *ra[] = {(char *)sw_test_bin("shardwire-relay"),
                  "--listen",
                  relay_ep,
                  "--key",
                  (char *)s_path("relay.key"),
                  "--allow",
                  (char *)s_path("allow.txt"),
                  NULL};
    pid_t relay = sw_test_spawn(ra, s_path("relay.log"));
    usleep(4000000); /* the client now waits for a head */
    SW_CHECK(s_alive(client));
    SW_CHECK(sw_test_count_in_file(s_path("client.err"), "waiting for the pipeline") >= 1);

    /* a status --expect started before the head: it asks again until the head is there */
    char *sx[] = {(char *)sw_test_bin("shardwire"),
                  "status",
                  "--relay",
                  relay_addr, /* HOST:PORT, no tcp:// */
                  "--expect",
                  "head,tail",
                  "--connect-timeout-s",
                  "90",
                  "--key",
                  (char *)s_path("client.key"),
                  "--relay-key",
                  (char *)s_path("relay.pub"),
                  NULL};
    pid_t expect = sw_test_spawn_io(sx, s_path("expect.out"), s_path("expect.err"));
    usleep(1000000);

    /* 4. the head, last */
    pid_t head =
        sw_test_spawn(s_node_argv(model, "head", "0:15", relay_ep, s_path("relay.pub"), NULL),
                      s_path("head.log"));
    int rc = sw_test_wait(client, 120);
    SW_CHECK_INT(rc, 0);
    SW_CHECK_INT(sw_test_wait(expect, 60), 0);
    SW_CHECK(sw_test_count_in_file(s_path("expect.err"), "'head' is not connected yet") >= 1);
    SW_CHECK(sw_test_count_in_file(s_path("expect.out"), " 0:15/30 ") == 1); /* the head */
    char *out = sw_test_read_file(s_path("client.out"), NULL);
    int32_t got[64];
    int n_got = sw_test_json_tokens(out, got, 64);
    free(out);
    SW_CHECK_INT(n_got, n_ref);
    SW_CHECK(n_got == n_ref && n_ref > 0 && !memcmp(got, ref, sizeof(int32_t) * (size_t)n_ref));
    SW_CHECK(sw_test_count_in_file(s_path("tail.log"), "announced to the relay") == 1);

    /* status --expect: both nodes are there; a name that never comes fails */
    char *st[] = {(char *)sw_test_bin("shardwire"),
                  "status",
                  "--relay",
                  fwd_ep,
                  "--expect",
                  "head,tail",
                  "--key",
                  (char *)s_path("client.key"),
                  "--relay-key",
                  (char *)s_path("relay.pub"),
                  NULL};
    SW_CHECK_INT(sw_test_run(st, 30, NULL, NULL), 0);
    st[5] = "head,nobody";
    char *st_err = NULL;
    double t0 = s_now();
    char *st2[16];
    memcpy(st2, st, sizeof(char *) * 10);
    st2[10] = "--connect-timeout-s";
    st2[11] = "2";
    st2[12] = NULL;
    SW_CHECK_INT(sw_test_run(st2, 30, NULL, &st_err), 1);
    SW_CHECK(st_err && strstr(st_err, "'nobody' is not connected"));
    SW_CHECK(s_now() - t0 < 10);
    free(st_err);

    /* a real key mismatch through the same forwarder: fails fast, names the key */
    t0 = s_now();
    char *mismatch_err = NULL;
    SW_CHECK(sw_test_run(s_node_argv(model, "tail", "15:end", fwd_ep, s_path("stranger.pub"), NULL),
                         30, NULL, &mismatch_err) != 0);
    SW_CHECK(s_now() - t0 < 15);
    SW_CHECK(mismatch_err && strstr(mismatch_err, "--relay-key"));
    SW_CHECK(mismatch_err && !strstr(mismatch_err, "(attempt "));
    free(mismatch_err);

    /* --insecure-loopback against a relay with keys: one clear line, at once */
    char *insecure[] = {(char *)sw_test_bin("shardwire-node"),
                        "--model",
                        (char *)model,
                        "--layers",
                        "0:15",
                        "--relay",
                        relay_ep,
                        "--name",
                        "plain",
                        "--insecure-loopback",
                        NULL};
    char *ins_err = NULL;
    t0 = s_now();
    SW_CHECK(sw_test_run(insecure, 30, NULL, &ins_err) != 0);
    SW_CHECK(s_now() - t0 < 10);
    SW_CHECK(ins_err && strstr(ins_err, "requires keys"));
    free(ins_err);

    /* --listen's allow-list missing, and --allow without --listen: one line each, exit 2,
     * before the model loads and before any relay is dialled (the node used to add a
     * second, wrong "could not join the relay" line) */
    static const struct {
        const char *listen, *allow, *want;
    } lcase[] = {{"127.0.0.1:1", "/nonexistent/allow.txt", "--allow: "},
                 {NULL, "/nonexistent/allow.txt", "--allow is the allow-list of --listen"},
                 {"127.0.0.1:1", NULL, "--listen needs --allow FILE"}};
    for (size_t c = 0; c < sizeof lcase / sizeof lcase[0]; c++) {
        char **av = s_node_argv(model, "tail", "15:end", relay_ep, s_path("relay.pub"), NULL);
        int k = 0;
        while (av[k])
            k++;
        if (lcase[c].listen) {
            av[k++] = "--listen";
            av[k++] = (char *)lcase[c].listen;
        }
        if (lcase[c].allow) {
            av[k++] = "--allow";
            av[k++] = (char *)lcase[c].allow;
        }
        av[k] = NULL;
        char *l_err = NULL;
        t0 = s_now();
        int l_rc = sw_test_run(av, 30, NULL, &l_err);
        SW_CHECK_INT(l_rc, 2);
        SW_CHECK(s_now() - t0 < 10);
        SW_CHECK(l_err && strstr(l_err, lcase[c].want));
        SW_CHECK(l_err && !strstr(l_err, "could not join the relay"));
        SW_CHECK(l_err && !strstr(l_err, "loaded"));
        if (l_err)
            printf("--listen/--allow case %zu: %s", c, l_err);
        free(l_err);
    }

    /* something else on the port: one clear line, no retries */
    int other_port = 0;
    pid_t other = s_not_a_relay(&other_port);
    char other_ep[64];
    snprintf(other_ep, sizeof other_ep, "tcp://127.0.0.1:%d", other_port);
    char *other_err = NULL;
    SW_CHECK(sw_test_run(s_node_argv(model, "head", "0:15", other_ep, s_path("relay.pub"), NULL),
                         30, NULL, &other_err) != 0);
    SW_CHECK(other_err && strstr(other_err, "not a shardwire relay"));
    free(other_err);
    sw_test_kill(other);

    /* deadlines: nothing listens on this port */
    int dead_port = sw_test_free_port();
    char dead_ep[64];
    snprintf(dead_ep, sizeof dead_ep, "tcp://127.0.0.1:%d", dead_port);
    char *st3[] = {(char *)sw_test_bin("shardwire"),
                   "status",
                   "--relay",
                   dead_ep,
                   "--connect-timeout-s",
                   "2",
                   "--key",
                   (char *)s_path("client.key"),
                   "--relay-key",
                   (char *)s_path("relay.pub"),
                   NULL};
    char *dead_err = NULL;
    t0 = s_now();
    SW_CHECK_INT(sw_test_run(st3, 30, NULL, &dead_err), 1);
    double took = s_now() - t0;
    SW_CHECK(took >= 1.5 && took < 8);
    /* two lines in all: the wait's progress line and the error with its advice
     * (it used to be a warning per attempt and a summary line after them) */
    SW_CHECK(dead_err && strstr(dead_err, "waiting for the relay") &&
             strstr(dead_err, "attempts): start it"));
    SW_CHECK(dead_err && strstr(dead_err, "is not reachable"));
    int dead_lines = 0;
    for (const char *q = dead_err; q && *q; q++)
        dead_lines += *q == '\n';
    SW_CHECK_INT(dead_lines, 2);
    if (dead_lines != 2)
        fprintf(stderr, "status with no relay said:\n%s", dead_err ? dead_err : "");
    free(dead_err);

    t0 = s_now();
    char *node_err = NULL;
    SW_CHECK(sw_test_run(s_node_argv(model, "head", "0:15", dead_ep, s_path("relay.pub"), "2"), 30,
                         NULL, &node_err) == 1);
    took = s_now() - t0;
    SW_CHECK(took >= 1.5 && took < 10);
    SW_CHECK(node_err && strstr(node_err, "is not reachable"));
    free(node_err);

    /* no deadline: keeps trying until SIGTERM, then exits 0 */
    pid_t waiter = sw_test_spawn(
        s_node_argv(model, "head", "0:15", dead_ep, s_path("relay.pub"), NULL), s_path("w.log"));
    usleep(1500000);
    SW_CHECK(s_alive(waiter));
    kill(waiter, SIGTERM);
    SW_CHECK_INT(sw_test_wait(waiter, 5), 0);
    SW_CHECK_INT(sw_test_count_in_file(s_path("w.log"), "no deadline"), 1); /* one line per wait */

    sw_test_kill(head);
    sw_test_kill(tail);
    sw_test_kill(relay);
    sw_test_kill(wanem);
    if (sw_test_failures) {
        const char *logs[] = {"client.err", "tail.log", "head.log", "relay.log", "w.log"};
        for (int i = 0; i < 5; i++) {
            char *t = sw_test_read_file(s_path(logs[i]), NULL);
            fprintf(stderr, "---- %s\n%s", logs[i], t ? t : "(none)\n");
            free(t);
        }
    }
    return sw_test_done();
}
