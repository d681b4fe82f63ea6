/*
 * sw_fault.h - helpers for the fault-tolerance tests (tests/e2e/test_recover.c
 * and tests/slow/test_recover_*.c): a relay and named nodes as real
 * processes, a `shardwire run` client in the background, the relay's view of
 * a peer, and the reference tokens of `shardwire generate`. Header-only
 * (static functions) so that each test executable stays one .c file.
 */
#ifndef SW_FAULT_H
#define SW_FAULT_H

#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sw_test.h"

#define SWF_MAX_TOK 2048
#define SWF_MAX_NODES 6

typedef struct swf_result {
    int ok;                           // parsed a JSON result
    int n;                            // tokens
    int32_t ids[SWF_MAX_TOK];         // generated ids
    int rc;                           // client exit code
    double tail_ms;                   // compute time the stage named "tail" reported (ms), 0 = none
    char digest[17];                  // logits_digest: equal digests = bit-identical logits
    int prefix_reused;                // prompt tokens the stages took from their prefix caches
    double ttft_ms;                   // the client's time to the first token
    double network_ms;                // the head's round time not spent computing, summed (timing)
    double total_ms;                  // the client's time for the whole request (timing)
    int resumes;                      // Resumes the client sent
    double head_ms;                   // timing: the head's compute
    double overlap_ms;                // timing: compute that ran beside another node's
    int n_stages;                     // timing: stages reported
    char stage[SWF_MAX_NODES][32];    // (n_stages) their names
    double stage_ms[SWF_MAX_NODES];   // their compute
    double stage_crit[SWF_MAX_NODES]; // their parts of the critical paths
    char err[2048];                   // client stderr (start of it)
} swf_result_t;

typedef struct swf_node {
    pid_t pid;           // 0 = not running
    char name[32];       // peer name
    char layers[16];     // A:B
    char extra[10][160]; // extra flags (e.g. --recover-timeout-s 20), "" = none
} swf_node_t;

typedef struct swf_cluster {
    char ep[64];     // the endpoint peers dial: the relay, or the WAN emulator before it
    char listen[64]; // the relay's --listen
    int port;        // relay port
    pid_t relay;     // relay pid
    int relay_hb;    // relay --heartbeat-ms
    char keys[512];  // set before swf_start: a keyed cluster (sw_test_keys in this folder:
                     // CURVE, allow-list, sealing; clients use the key "client"); "" = loopback
    int wan_ms;      // set before swf_start: one-way delay of a shardwire-wanem between every
                     // peer and the relay (4 x wan_ms per round trip); 0 = none
    pid_t wanem;     // its pid
    const char *model;
    swf_node_t nodes[SWF_MAX_NODES];
    int n;
    char log[192]; // nodes' log file
} swf_cluster_t;

static inline double swf_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static inline void swf_parse(const char *json_text, swf_result_t *r)
{
    r->ok = 0;
    r->n = 0;
    json_error_t je;
    const char *brace = json_text ? strchr(json_text, '{') : NULL;
    json_t *j = brace ? json_loads(brace, JSON_DISABLE_EOF_CHECK, &je) : NULL;
    if (!j)
        return;
    json_t *ids = json_object_get(j, "tokens");
    for (size_t i = 0; json_is_array(ids) && i < json_array_size(ids) && i < SWF_MAX_TOK; i++)
        r->ids[r->n++] = (int32_t)json_integer_value(json_array_get(ids, i));
    r->ok = json_is_array(ids);
    json_t *tm = json_object_get(j, "timing");
    json_t *sc = tm ? json_object_get(tm, "stage_compute_ms") : NULL;
    r->tail_ms = sc ? json_real_value(json_object_get(sc, "tail")) : 0;
    r->network_ms = tm ? json_number_value(json_object_get(tm, "network_ms")) : 0;
    r->head_ms = tm ? json_number_value(json_object_get(tm, "head_compute_ms")) : 0;
    r->overlap_ms = tm ? json_number_value(json_object_get(tm, "overlap_ms")) : 0;
    json_t *cr = tm ? json_object_get(tm, "stage_critical_ms") : NULL;
    const char *key;
    json_t *val;
    r->n_stages = 0;
    json_object_foreach(sc, key, val)
    {
        if (r->n_stages == SWF_MAX_NODES)
            break;
        snprintf(r->stage[r->n_stages], sizeof r->stage[0], "%s", key);
        r->stage_ms[r->n_stages] = json_number_value(val);
        r->stage_crit[r->n_stages] = cr ? json_number_value(json_object_get(cr, key)) : 0;
        r->n_stages++;
    }
    r->resumes = (int)json_integer_value(json_object_get(j, "resumes"));
    r->total_ms = tm ? json_number_value(json_object_get(tm, "total_ms")) : 0;
    const char *dg = json_string_value(json_object_get(j, "logits_digest"));
    snprintf(r->digest, sizeof r->digest, "%s", dg ? dg : "");
    r->prefix_reused = (int)json_integer_value(json_object_get(j, "prefix_reused"));
    r->ttft_ms = json_number_value(json_object_get(j, "ttft_ms"));
    json_decref(j);
}

static inline int swf_same(const swf_result_t *a, const swf_result_t *b)
{
    return a->ok && b->ok && a->n == b->n && !memcmp(a->ids, b->ids, (size_t)a->n * 4);
}

/* Index of the first token where a and b differ (or the shorter length). */
static inline int swf_diff_at(const swf_result_t *a, const swf_result_t *b)
{
    int i = 0;
    while (i < a->n && i < b->n && a->ids[i] == b->ids[i])
        i++;
    return i;
}

/* Checks a request's result against the reference: it ended well, the same
 * tokens and the same logits digest; says where the tokens part when not. */
#define SWF_CHECK_SAME(what, got, ref)                                                             \
    do {                                                                                           \
        SW_CHECK_INT((got)->rc, 0);                                                                \
        SW_CHECK(swf_same((got), (ref)));                                                          \
        SW_CHECK(!strcmp((got)->digest, (ref)->digest));                                           \
        if (!swf_same((got), (ref)))                                                               \
            fprintf(stderr, "%s: tokens differ at %d: %s\n", (what), swf_diff_at((got), (ref)),    \
                    (got)->err);                                                                   \
    } while (0)

/* The single-process reference: `shardwire generate --greedy`, with extra
 * flags (NULL-terminated, may be NULL) such as the sampling ones, which
 * override it (--temp T keeps the repetition penalty off). */
static inline void swf_reference_s(const char *model, const char *prompt, int n_gen,
                                   const char *const *extra, int timeout_s, swf_result_t *r)
{
    char *out = NULL, *err = NULL;
    memset(r, 0, sizeof *r);
    r->rc = sw_test_generate_run(model, prompt, n_gen, extra, timeout_s, &out, &err);
    if (r->rc != 0)
        fprintf(stderr, "generate failed (%d): %s\n", r->rc, err ? err : "");
    swf_parse(out, r);
    free(out);
    free(err);
}

/* swf_reference within 300 s. */
static inline void swf_reference(const char *model, const char *prompt, int n_gen,
                                 const char *const *extra, swf_result_t *r)
{
    swf_reference_s(model, prompt, n_gen, extra, 300, r);
}

/* Sets a node's name, layers and extra flags (NULL-terminated, up to 10). */
static inline void swf_node(swf_node_t *nd, const char *name, const char *layers,
                            const char *const *flags)
{
    memset(nd, 0, sizeof *nd);
    snprintf(nd->name, sizeof nd->name, "%s", name);
    snprintf(nd->layers, sizeof nd->layers, "%s", layers);
    for (int i = 0; flags && flags[i] && i < 10; i++)
        snprintf(nd->extra[i], sizeof nd->extra[i], "%s", flags[i]);
}

/* The security flags of a program in c (who: "relay", a node's name, or
 * "client") appended to argv at *k: the keys of c->keys, else the loopback
 * development mode. Paths live in static storage (one set per call site is
 * enough: a caller spawns before it calls again). */
static inline void swf_sec_args(const swf_cluster_t *c, const char *who, int is_head, char **argv,
                                int *k)
{
    static char path[4][sizeof(c->keys) + 64];
    if (!c->keys[0]) {
        argv[(*k)++] = "--insecure-loopback";
        return;
    }
    if (!strcmp(who, "relay")) {
        snprintf(path[0], sizeof path[0], "%s/relay.key", c->keys);
        snprintf(path[1], sizeof path[1], "%s/allow.txt", c->keys);
        argv[(*k)++] = "--key";
        argv[(*k)++] = path[0];
        argv[(*k)++] = "--allow";
        argv[(*k)++] = path[1];
        return;
    }
    snprintf(path[0], sizeof path[0], "%s/%s.key", c->keys, who);
    snprintf(path[1], sizeof path[1], "%s/relay.pub", c->keys);
    snprintf(path[2], sizeof path[2], "%s/cluster.key", c->keys);
    snprintf(path[3], sizeof path[3], "%s/access.key", c->keys);
    argv[(*k)++] = "--key";
    argv[(*k)++] = path[0];
    argv[(*k)++] = "--relay-key";
    argv[(*k)++] = path[1];
    if (strcmp(who, "client") != 0) {
        argv[(*k)++] = "--cluster-key";
        argv[(*k)++] = path[2];
    }
    if (is_head || !strcmp(who, "client")) {
        argv[(*k)++] = "--access-key";
        argv[(*k)++] = path[3];
    }
}

static inline pid_t swf_start_relay(swf_cluster_t *c)
{
    char hb[16];
    snprintf(hb, sizeof hb, "%d", c->relay_hb);
    char *ra[16] = {(char *)sw_test_bin("shardwire-relay"), "--listen", c->listen, "--heartbeat-ms",
                    hb};
    int k = 5;
    swf_sec_args(c, "relay", 0, ra, &k);
    ra[k] = NULL;
    char log[200];
    snprintf(log, sizeof log, "%s.relay", c->log);
    c->relay = sw_test_spawn(ra, log);
    return c->relay;
}

static inline void swf_start_node(swf_cluster_t *c, int i)
{
    swf_node_t *nd = &c->nodes[i];
    char *na[40] = {(char *)sw_test_bin("shardwire-node"),
                    "--model",
                    (char *)c->model,
                    "--layers",
                    nd->layers,
                    "--relay",
                    c->ep,
                    "--name",
                    nd->name,
                    "--threads",
                    "1",
                    "--heartbeat-ms",
                    "200"};
    int k = 13;
    swf_sec_args(c, nd->name, !strncmp(nd->layers, "0:", 2), na, &k);
    for (int e = 0; e < 10 && nd->extra[e][0]; e++)
        na[k++] = nd->extra[e];
    na[k] = NULL;
    nd->pid = sw_test_spawn(na, c->log);
}

/* Relay on a free port, then nodes (names/layers set by the caller in
 * c->nodes[0..n)); waits until all are announced. 0 or -1. */
static inline int swf_start(swf_cluster_t *c, const char *model, int n, const char *log)
{
    c->model = model;
    c->n = n;
    c->port = sw_test_free_port();
    if (!c->relay_hb)
        c->relay_hb = 200;
    snprintf(c->listen, sizeof c->listen, "tcp://127.0.0.1:%d", c->port);
    snprintf(c->ep, sizeof c->ep, "%s", c->listen);
    /* One file per test process: engineers and CI jobs share /tmp. */
    snprintf(c->log, sizeof c->log, "%s.%d", log, (int)getpid());
    unlink(c->log);
    if (c->keys[0]) {
        const char *names[SWF_MAX_NODES + 1] = {0}, *clients[] = {"client", NULL};
        for (int i = 0; i < n; i++)
            names[i] = c->nodes[i].name;
        if (sw_test_keys(c->keys, names, clients) != 0)
            return -1;
        sw_test_client_env(c->keys, "client"); /* status, run: the client's keys */
    }
    if (c->wan_ms > 0) {
        int wport = sw_test_free_port();
        char listen[32], up[32], log_w[200];
        snprintf(listen, sizeof listen, "127.0.0.1:%d", wport);
        snprintf(up, sizeof up, "127.0.0.1:%d", c->port);
        snprintf(log_w, sizeof log_w, "%s.wanem", c->log);
        c->wanem = sw_test_spawn_wanem(listen, up, c->wan_ms, log_w);
        if (c->wanem <= 0)
            return -1;
        snprintf(c->ep, sizeof c->ep, "tcp://%s", listen);
    }
    if (swf_start_relay(c) <= 0)
        return -1;
    for (int i = 0; i < n; i++)
        swf_start_node(c, i);
    return sw_test_wait_peers(c->ep, n, 60);
}

static inline void swf_stop(swf_cluster_t *c)
{
    for (int i = 0; i < c->n; i++) {
        if (c->nodes[i].pid > 0) {
            kill(c->nodes[i].pid, SIGCONT);
            sw_test_kill(c->nodes[i].pid);
        }
        c->nodes[i].pid = 0;
    }
    sw_test_kill(c->relay);
    c->relay = 0;
    if (c->wanem > 0)
        sw_test_kill(c->wanem);
    c->wanem = 0;
}

static inline void swf_kill9(pid_t *pid)
{
    if (*pid > 0) {
        kill(*pid, SIGKILL);
        waitpid(*pid, NULL, 0);
    }
    *pid = 0;
}

/* The relay's record of a peer: 1 listed (counters filled), 0 absent, -1
 * when the relay did not answer. */
static inline int swf_peer(const char *ep, const char *name, long *msgs_in, long *msgs_out)
{
    char *argv[] = {(char *)sw_test_bin("shardwire"), "status", "--relay", (char *)ep, "--json",
                    /* keys from SW_KEY etc. in a keyed cluster (swf_start set them) */
                    getenv("SW_RELAY_KEY") ? NULL : "--insecure-loopback", NULL};
    char *o = NULL;
    int rc = sw_test_run(argv, 20, &o, NULL);
    json_error_t je;
    json_t *j = rc == 0 && o ? json_loads(o, JSON_DISABLE_EOF_CHECK, &je) : NULL;
    json_t *peers = j ? json_object_get(j, "peers") : NULL;
    int found = j ? 0 : -1;
    for (size_t i = 0; json_is_array(peers) && i < json_array_size(peers); i++) {
        json_t *p = json_array_get(peers, i);
        const char *nm = json_string_value(json_object_get(p, "name"));
        if (nm && !strcmp(nm, name)) {
            found = 1;
            if (msgs_in)
                *msgs_in = (long)json_integer_value(json_object_get(p, "msgs_in"));
            if (msgs_out)
                *msgs_out = (long)json_integer_value(json_object_get(p, "msgs_out"));
        }
    }
    json_decref(j);
    free(o);
    return found;
}

/* Waits until the peer's msgs_in (messages it sent through the relay) reaches
 * at least want; 0, or -1 after timeout_s. */
static inline int swf_wait_msgs_in(const char *ep, const char *name, long want, int timeout_s)
{
    double t_end = swf_now_ms() + timeout_s * 1e3;
    while (swf_now_ms() < t_end) {
        long in = -1, out = -1;
        if (swf_peer(ep, name, &in, &out) == 1 && in >= want)
            return 0;
        usleep(50000);
    }
    return -1;
}

/* Waits until the peer's msgs_out (messages delivered to it) reaches want. */
static inline int swf_wait_msgs_out(const char *ep, const char *name, long want, int timeout_s)
{
    double t_end = swf_now_ms() + timeout_s * 1e3;
    while (swf_now_ms() < t_end) {
        long in = -1, out = -1;
        if (swf_peer(ep, name, &in, &out) == 1 && out >= want)
            return 0;
        usleep(30000);
    }
    return -1;
}

/* A background `shardwire run --greedy` (extra flags override it): its stdout and stderr go to
 * files. */
typedef struct swf_client {
    pid_t pid;
    char out_path[192], err_path[192];
} swf_client_t;

static inline int swf_client_start(swf_client_t *cl, const char *ep, const char *prompt, int n_gen,
                                   int timeout_s, const char *const *extra, const char *tag)
{
    char name[64];
    snprintf(name, sizeof name, "client_%s.out", tag);
    snprintf(cl->out_path, sizeof cl->out_path, "%s", sw_test_log(name));
    snprintf(name, sizeof name, "client_%s.err", tag);
    snprintf(cl->err_path, sizeof cl->err_path, "%s", sw_test_log(name));
    cl->pid = fork();
    if (cl->pid < 0)
        return -1;
    if (cl->pid == 0) {
        char n[16], t[16];
        snprintf(n, sizeof n, "%d", n_gen);
        snprintf(t, sizeof t, "%d", timeout_s);
        char *argv[24] = {(char *)sw_test_bin("shardwire"),
                          "run",
                          "--greedy",
                          "--relay",
                          (char *)ep,
                          "-p",
                          (char *)prompt,
                          "-n",
                          n,
                          "--json",
                          "--timeout-s",
                          t,
                          getenv("SW_RELAY_KEY") ? NULL : "--insecure-loopback"};
        int k = getenv("SW_RELAY_KEY") ? 12 : 13;
        for (int i = 0; extra && extra[i] && k < 23; i++)
            argv[k++] = (char *)extra[i];
        argv[k] = NULL;
        char *out = NULL, *err = NULL;
        int rc = sw_test_run(argv, timeout_s + 60, &out, &err);
        FILE *f = fopen(cl->out_path, "w");
        if (f) {
            fputs(out ? out : "", f);
            fclose(f);
        }
        f = fopen(cl->err_path, "w");
        if (f) {
            fputs(err ? err : "", f);
            fclose(f);
        }
        _exit(rc < 0 ? 255 : rc > 254 ? 254 : rc);
    }
    return 0;
}

/* 1 while the client runs. */
static inline int swf_client_running(const swf_client_t *cl)
{
    return waitpid(cl->pid, NULL, WNOHANG) == 0;
}

/* Waits for the client and reads its result. */
static inline void swf_client_wait(swf_client_t *cl, swf_result_t *r)
{
    int st = 0;
    memset(r, 0, sizeof *r);
    waitpid(cl->pid, &st, 0);
    r->rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    size_t len = 0;
    char *out = sw_test_read_file(cl->out_path, &len);
    char *err = sw_test_read_file(cl->err_path, &len);
    swf_parse(out, r);
    snprintf(r->err, sizeof r->err, "%s", err ? err : "");
    free(out);
    free(err);
    unlink(cl->out_path);
    unlink(cl->err_path);
}

/* Counts lines of the nodes' log that contain needle. */
static inline int swf_log_count(const swf_cluster_t *c, const char *needle)
{
    size_t len = 0;
    char *text = sw_test_read_file(c->log, &len);
    int n = 0;
    for (const char *p = text; p && (p = strstr(p, needle)); p += strlen(needle))
        n++;
    free(text);
    return n;
}

/* Waits up to timeout_s for the nodes' log to hold needle count times: 0, or -1. */
static inline int swf_wait_log(const swf_cluster_t *c, const char *needle, int count, int timeout_s)
{
    for (int i = 0; i < timeout_s * 20; i++) {
        if (swf_log_count(c, needle) >= count)
            return 0;
        usleep(50000);
    }
    return -1;
}

/* The last number (ms) that follows needle in the nodes' log, or -1. */
static inline double swf_log_ms(const swf_cluster_t *c, const char *needle)
{
    size_t len = 0;
    char *text = sw_test_read_file(c->log, &len);
    double v = -1;
    for (const char *p = text; p && (p = strstr(p, needle)); p += strlen(needle))
        v = atof(p + strlen(needle));
    free(text);
    return v;
}

/*
 * The relay SIGKILLed and restarted on its port while three clients stream
 * (greedy, seeded sampling, n-gram drafts; n_gen tokens each, at least
 * min_ref before an end of text), runs times,
 * each time at another moment: after 5 to max_at of the tail's verdicts, down
 * for 0.3 to 1.5 s. The reference is each request alone through the same
 * cluster with no fault (the greedy one also equals one process); every
 * client's output must equal it token for token. Returns how many runs were
 * exact for all three (each inexact one also fails a check).
 */
static inline int swf_relay_restarts(swf_cluster_t *c, int n_gen, int min_ref, int runs,
                                     long max_at)
{
    static const char *const prompt[3] = {
        "Once upon a time, in a land far away,",
        "The capital of France is",
        "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    };
    static const char *const cfg[3][7] = {
        {NULL},
        {"--temp", "0.8", "--seed", "7", "--draft", "none", NULL},
        {"--draft", "ngram", NULL},
    };
    swf_result_t ref[3], local;
    swf_client_t cl[3] = {{0}};
    for (int i = 0; i < 3; i++) {
        SW_CHECK_INT(swf_client_start(&cl[i], c->ep, prompt[i], n_gen, 300, cfg[i], "ref"), 0);
        swf_client_wait(&cl[i], &ref[i]);
        SW_CHECK_INT(ref[i].rc, 0);
        SW_CHECK(ref[i].n >= min_ref);
    }
    swf_reference(c->model, prompt[0], n_gen, NULL, &local);
    SW_CHECK(swf_same(&local, &ref[0]));
    swf_result_t got[3];
    int exact = 0;
    for (int run = 0; run < runs; run++) {
        long in0 = 0;
        SW_CHECK_INT(swf_peer(c->ep, "tail", &in0, NULL), 1);
        char tag[16];
        for (int i = 0; i < 3; i++) {
            snprintf(tag, sizeof tag, "relay%d", i);
            SW_CHECK_INT(swf_client_start(&cl[i], c->ep, prompt[i], n_gen, 300, cfg[i], tag), 0);
        }
        /* verdicts before the kill: 5 to max_at, spread by the golden ratio */
        const long at = 5 + (long)(run * 618 % 1000) * (max_at - 5) / 1000;
        const int down_ms = 300 + (run * 370) % 1200;
        int waited = swf_wait_msgs_in(c->ep, "tail", in0 + at, 120);
        const double t_kill = swf_now_ms();
        swf_kill9(&c->relay);
        usleep((useconds_t)down_ms * 1000);
        SW_CHECK(swf_start_relay(c) > 0);
        int ok = 1;
        for (int i = 0; i < 3; i++) {
            swf_client_wait(&cl[i], &got[i]);
            ok &= got[i].rc == 0 && swf_same(&got[i], &ref[i]);
            if (got[i].rc != 0 || !swf_same(&got[i], &ref[i]))
                fprintf(stderr, "run %d client %d: rc %d, differs at %d of %d/%d: %s\n", run, i,
                        got[i].rc, swf_diff_at(&got[i], &ref[i]), got[i].n, ref[i].n, got[i].err);
        }
        fprintf(stderr,
                "run %2d: relay killed after %4ld verdicts%s, down %4d ms; all three exact: %s; "
                "%.1f s from the kill to the last token\n",
                run, at, waited == 0 ? "" : " (the runs ended first)", down_ms, ok ? "yes" : "NO",
                (swf_now_ms() - t_kill) / 1e3);
        exact += ok;
        SW_CHECK(ok);
        SW_CHECK_INT(sw_test_wait_peers(c->ep, 2, 60), 0); // the nodes are back for the next run
    }
    return exact;
}

/* `shardwire status --relay relay --json`'s hop from -> to: its path ("direct" or "relay") into
 * path and its round trip (ms, -1 = null); 0, or -1 when the hop is not listed. The text form too.
 */
static inline int swf_hop(const char *relay, const char *from, const char *to, char *path,
                          size_t len, double *rtt_ms)
{
    char *argv[] = {
        (char *)sw_test_bin("shardwire"), "status", "--relay", (char *)relay, "--json", NULL};
    char *o = NULL;
    int rc = sw_test_run(argv, 20, &o, NULL), found = -1;
    json_error_t je;
    json_t *j = rc == 0 && o ? json_loads(o, JSON_DISABLE_EOF_CHECK, &je) : NULL;
    json_t *hops = j ? json_object_get(j, "hops") : NULL;
    for (size_t i = 0; json_is_array(hops) && i < json_array_size(hops); i++) {
        json_t *h = json_array_get(hops, i);
        const char *f = json_string_value(json_object_get(h, "from"));
        const char *t = json_string_value(json_object_get(h, "to"));
        if (f && t && !strcmp(f, from) && !strcmp(t, to)) {
            const char *pv = json_string_value(json_object_get(h, "path"));
            snprintf(path, len, "%s", pv ? pv : "");
            json_t *r = json_object_get(h, "rtt_ms");
            *rtt_ms = json_is_number(r) ? json_number_value(r) : -1;
            found = 0;
        }
    }
    json_decref(j);
    free(o);
    char *targv[] = {(char *)sw_test_bin("shardwire"), "status", "--relay", (char *)relay, NULL};
    o = NULL;
    if (sw_test_run(targv, 20, &o, NULL) == 0 && o && strstr(o, "hop "))
        fprintf(stderr, "status: %s", strstr(o, "hop "));
    free(o);
    return found;
}

#endif
