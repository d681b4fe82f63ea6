/*
 * sw_relays.h - a cluster of two relays for the tests of issue 39
 * (tests/slow/test_relays.c on loopback, tests/slow/test_netns_relays.c on
 * namespaced hosts): the bundles of `shardwire cluster init --relay A
 * --relay B` started by their own scripts (relay/start.sh, relay-2/start.sh,
 * head/start.sh, tail/start.sh), `shardwire run` clients with the client
 * bundle's keys for both relays, and one request with a fault mid-request,
 * measured by the head's own log. Each process may run in a network
 * namespace of its own (sw_test_netns); the status queries and the clients
 * run in `home`. Header-only (static functions) like sw_fault.h.
 */
#ifndef SW_RELAYS_H
#define SW_RELAYS_H

#include "sw_fault.h"

typedef struct swr_relay {
    char ep[64];                /* the endpoint the peers dial, tcp://HOST:PORT */
    char listen[64];            /* its --listen (cluster init's), "" = ep */
    char ns[64];                /* the namespace it runs in, "" = the test's own */
    char script[320], pub[320]; /* its start.sh; its public key */
    pid_t pid;
} swr_relay_t;

typedef struct swr {
    char dir[256];       /* cluster init's folder */
    swr_relay_t r[2];    /* set ep (listen, ns) before swr_init */
    char eps[160];       /* "A,B" */
    char pubs[700];      /* their keys, "A.pub,B.pub" */
    swf_cluster_t c;     /* c.log: the nodes' log (swf_log_*) */
    pid_t nodes[2];      /* head, tail */
    char node_ns[2][64]; /* their namespaces, "" = the test's own */
    char home[64];       /* where status queries and clients run, "" = the test's own */
    int hb_ms;           /* every process's --heartbeat-ms */
    int slack_ms;        /* scheduling noise allowed on top of a bound */
} swr_t;

static inline void swr_ns(const char *ns)
{
    sw_test_netns(ns && ns[0] ? ns : NULL);
}

/* `shardwire cluster init` of both relays and the nodes head and tail into dir, and this
 * process's environment for the clients (the client bundle's keys for both relays). 0 or -1. */
static inline int swr_init(swr_t *w, const char *dir)
{
    snprintf(w->dir, sizeof w->dir, "%s", dir);
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "%s cluster init --relay %s --relay %s --listen %s --listen %s --nodes head,tail "
             "--out %s",
             sw_test_bin("shardwire"), w->r[0].ep + 6, w->r[1].ep + 6,
             w->r[0].listen[0] ? w->r[0].listen : w->r[0].ep,
             w->r[1].listen[0] ? w->r[1].listen : w->r[1].ep, w->dir);
    if (sw_test_sh(cmd, 60, NULL) != 0)
        return -1;
    for (int i = 0; i < 2; i++) {
        const char *d = i ? "relay-2" : "relay";
        snprintf(w->r[i].script, sizeof w->r[i].script, "%s/%s/start.sh", w->dir, d);
        snprintf(w->r[i].pub, sizeof w->r[i].pub, "%s/client/%s.pub", w->dir, d);
    }
    snprintf(w->eps, sizeof w->eps, "%s,%s", w->r[0].ep, w->r[1].ep);
    snprintf(w->pubs, sizeof w->pubs, "%s,%s", w->r[0].pub, w->r[1].pub);
    char path[400];
    snprintf(path, sizeof path, "%s/client/client.key", w->dir);
    setenv("SW_KEY", path, 1);
    snprintf(path, sizeof path, "%s/client/access.key", w->dir);
    setenv("SW_ACCESS_KEY", path, 1);
    unsetenv("SW_CLUSTER_KEY");
    setenv("SW_RELAY_KEY", w->pubs, 1);
    return 0;
}

/* Relay i by its bundle's script, logging to the nodes' log + its port. The process that runs
 * is the relay (exec), so SIGSTOP and SIGKILL reach it. Its pid. */
static inline pid_t swr_start_relay(swr_t *w, int i)
{
    swr_relay_t *r = &w->r[i];
    char log[300], hb[16];
    snprintf(log, sizeof log, "%s.relay%d", w->c.log, i + 1);
    snprintf(hb, sizeof hb, "%d", w->hb_ms);
    setenv("SHARDWIRE_BIN", sw_test_env("SW_BIN_DIR"), 1);
    char *argv[] = {"/bin/sh", r->script, "--heartbeat-ms", hb, NULL};
    swr_ns(r->ns);
    r->pid = sw_test_spawn(argv, log);
    swr_ns(w->home);
    return r->pid;
}

/* Node i (0 head, 1 tail) by its bundle's start.sh (the model and layers by SW_MODEL /
 * SW_LAYERS), logging to the nodes' log. */
static inline void swr_start_node(swr_t *w, int i, const char *name, const char *layers)
{
    char script[320], hb[16];
    snprintf(script, sizeof script, "%s/%s/start.sh", w->dir, name);
    snprintf(hb, sizeof hb, "%d", w->hb_ms);
    setenv("SW_MODEL", sw_test_model(), 1);
    setenv("SW_LAYERS", layers, 1);
    setenv("SHARDWIRE_BIN", sw_test_env("SW_BIN_DIR"), 1);
    char *argv[] = {
        "/bin/sh", script, "--threads", "1", "--heartbeat-ms", hb, "--recover-timeout-s",
        "60",      NULL};
    swr_ns(w->node_ns[i]);
    w->nodes[i] = sw_test_spawn(argv, w->c.log);
    swr_ns(w->home);
}

/* Relay i's record of a peer (swf_peer), asked with that relay's own key. */
static inline int swr_peer(swr_t *w, int i, const char *name, long *in)
{
    setenv("SW_RELAY_KEY", w->r[i].pub, 1);
    const int rc = swf_peer(w->r[i].ep, name, in, NULL);
    setenv("SW_RELAY_KEY", w->pubs, 1);
    return rc;
}

/* Waits until relay i's table lists n nodes (60 s); 0 or -1. */
static inline int swr_wait_peers(swr_t *w, int i, int n)
{
    setenv("SW_RELAY_KEY", w->r[i].pub, 1);
    const int rc = sw_test_wait_peers(w->r[i].ep, n, 60);
    setenv("SW_RELAY_KEY", w->pubs, 1);
    return rc;
}

/* The relay the head sends by now (its last "messages go by" line), or -1. */
static inline int swr_head_relay(const swr_t *w)
{
    size_t len = 0;
    char *text = sw_test_read_file(w->c.log, &len);
    const char *last = NULL, *needle = "peer head: messages go by the relay ";
    for (const char *p = text; p && (p = strstr(p, needle)); p += strlen(needle))
        last = p + strlen(needle);
    int which = -1;
    for (int i = 0; last && i < 2; i++)
        if (!strncmp(last, w->r[i].ep, strlen(w->r[i].ep)) && last[strlen(w->r[i].ep)] == ' ')
            which = i;
    free(text);
    return which;
}

/* One request without a fault: checks it against ref and returns the time of a round (ms, from
 * the head's "N tokens in R rounds" line), printing it with `what`. */
static inline double swr_base(swr_t *w, const char *what, const char *prompt, int n_gen,
                              const swf_result_t *ref)
{
    swf_client_t cl = {0};
    swf_result_t base;
    SW_CHECK_INT(swf_client_start(&cl, w->eps, prompt, n_gen, 300, NULL, "base"), 0);
    swf_client_wait(&cl, &base);
    SW_CHECK_INT(base.rc, 0);
    SW_CHECK(swf_same(&base, ref));
    SW_CHECK(!strcmp(base.digest, ref->digest));
    const double rounds = swf_log_ms(&w->c, "tokens in ");
    SW_CHECK(rounds > 0);
    const double round_ms = rounds > 0 ? base.total_ms / rounds : 1e9;
    const int used = swr_head_relay(w);
    fprintf(stderr, "%s: %d tokens in %.0f rounds by %s, %.0f ms, %.1f ms a round\n", what, base.n,
            rounds, used >= 0 ? w->r[used].ep : "?", base.total_ms, round_ms);
    return round_ms;
}

/*
 * One request with a fault: when the tail has sent 20 more messages by the relay the head uses,
 * fault(w, that relay's index) runs (it may block). Checks that the output and its logits digest
 * equal ref, that the head moved to the other relay and sent the round alone again (never the
 * whole session), and that the extra time (the head's measure: how long after it was sent the
 * round was found lost, plus how long the round took once sent again, minus round_ms) is within
 * bound_ms + round_ms + w->slack_ms. Returns the extra time (ms), -1 when it could not be read.
 */
static inline double swr_fault_run(swr_t *w, const char *what, const char *prompt, int n_gen,
                                   const swf_result_t *ref, double round_ms,
                                   void (*fault)(swr_t *, int), double bound_ms)
{
    const int used = swr_head_relay(w);
    SW_CHECK(used >= 0);
    if (used < 0)
        return -1;
    const int one_round_before = swf_log_count(&w->c, "recovery: sending the round");
    const int whole_before = swf_log_count(&w->c, "recovery: replaying");
    long in0 = 0;
    SW_CHECK_INT(swr_peer(w, used, "tail", &in0), 1);
    swf_client_t cl = {0};
    swf_result_t got;
    SW_CHECK_INT(swf_client_start(&cl, w->eps, prompt, n_gen, 300, NULL, what), 0);
    setenv("SW_RELAY_KEY", w->r[used].pub, 1); /* that relay's table, with its own key */
    SW_CHECK_INT(swf_wait_msgs_in(w->r[used].ep, "tail", in0 + 20, 120), 0);
    setenv("SW_RELAY_KEY", w->pubs, 1);
    const double t_fault = swf_now_ms();
    fault(w, used);
    const double t_faulted = swf_now_ms();
    swf_client_wait(&cl, &got);
    SWF_CHECK_SAME(what, &got, ref);
    const int moved = swr_head_relay(w);
    SW_CHECK(moved >= 0 && moved != used);
    /* the round alone went again, by the other relay */
    SW_CHECK_INT(swf_log_count(&w->c, "recovery: sending the round") - one_round_before, 1);
    SW_CHECK_INT(swf_log_count(&w->c, "recovery: replaying") - whole_before, 0);
    const double found = swf_log_ms(&w->c, "failed after "),
                 again = swf_log_ms(&w->c, "went through again ");
    const double extra = found + again - round_ms;
    fprintf(stderr,
            "%s: the round was found lost %.0f ms after it was sent and went through %.0f ms "
            "after that by %s; extra time %.0f ms (bound %.0f ms: detection %.0f + one round "
            "%.0f + noise %d); request %.0f ms (the fault took %.0f ms to make and heal)\n",
            what, found, again, moved >= 0 ? w->r[moved].ep : "?", extra,
            bound_ms + round_ms + w->slack_ms, bound_ms, round_ms, w->slack_ms, got.total_ms,
            t_faulted - t_fault);
    SW_CHECK(found > 0 && again > 0);
    SW_CHECK(extra <= bound_ms + round_ms + w->slack_ms);
    return extra;
}

/* Stops the nodes and the relays. */
static inline void swr_stop(swr_t *w)
{
    for (int i = 0; i < 2; i++)
        sw_test_kill(w->nodes[i]);
    for (int i = 0; i < 2; i++)
        if (w->r[i].pid)
            sw_test_kill(w->r[i].pid);
}

#endif
