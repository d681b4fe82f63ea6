/*
 * test_place.c - placement (issue 25; docs/architecture.md "Placement"): a
 * keyed cluster of real processes on this machine (relay, a head 0:6 with
 * --auto-nodes 2, SmolLM2) and uneven auto nodes: "fast" with 2 threads and
 * a memory limit that holds about half the remaining layers, "slow" with 1
 * thread and no limit.
 *
 *  - the head plans and applies: both auto nodes announce a probe, memory
 *    and round trip (`shardwire status --json`); the head assigns ranges
 *    that cover layers [6, 30) once, each within the node's memory (weights
 *    of its layers from the GGUF + its announced KV per layer + the LM head
 *    on the last), and the assignment costs what `shardwire plan` finds
 *    optimal for the same announced numbers; a node that announced a
 *    smaller time per layer than another holds more layers, or as many as
 *    its memory allows; a greedy run through the placed pipeline equals
 *    `shardwire generate` token for token;
 *  - only the head may assign: a node with a valid node key ("rogue") that
 *    sends a standby a PlanAssign is refused and logged, and the standby
 *    stays one;
 *  - standby: a third auto node ("spare") starts without a range; the node
 *    holding the last layer is killed (SIGKILL) during a greedy run of 160
 *    tokens; the head plans the gap over the standby, which loads the range
 *    and announces it, the session recovers by replay, and its output
 *    equals the uninterrupted run.
 *
 * Timing (auto against the even split, measured against the plan's
 * prediction) is scripts/bench/bench_place.py's, not this test's: a loaded
 * machine would make a timed assertion flaky.
 */
#include "sw_attack.h"

#include <jansson.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gguf.h"
#include "planner.h"

#define N_GEN 160
/* SmolLM2 at --ctx 512, 2 sessions: 2.86 MiB a layer with its KV, 28.7 MiB of LM head.
 * Neither node holds layers [6, 30) alone: fast at most 13 of them (3 as the tail), slow 14
 * as the tail (21 as a middle). */
#define FAST_MIB "40"
#define SLOW_MIB "70"

static char s_dir[64], s_ep[64];
static swa_t s_a;
static const char *s_prompt = "Once upon a time, in a land far away,";

/* `shardwire ARGS...` with the client env's keys: its stdout as JSON (NULL on failure). */
static json_t *s_json(char *const *argv)
{
    char *out = NULL;
    json_t *j = NULL;
    if (sw_test_run(argv, 30, &out, NULL) == 0 && out)
        j = json_loads(out, 0, NULL);
    free(out);
    return j;
}

static json_t *s_status(void)
{
    char *argv[] = {(char *)sw_test_bin("shardwire"), "status", "--relay", s_ep, "--json", NULL};
    return s_json(argv);
}

/* The status entry of name (borrowed from st), or NULL. */
static json_t *s_peer(json_t *st, const char *name)
{
    size_t i;
    json_t *p;
    json_array_foreach(json_object_get(st, "peers"), i, p)
    {
        if (!strcmp(json_string_value(json_object_get(p, "name")), name))
            return p;
    }
    return NULL;
}

static int s_int(json_t *p, const char *k)
{
    return (int)json_integer_value(json_object_get(p, k));
}

/* Waits until every name in names is placed (not a standby, a range); 0 when they are. */
static int s_wait_placed(const char *const *names, int timeout_s)
{
    for (int t = 0; t < timeout_s * 4; t++) {
        json_t *st = s_status();
        int ok = st != NULL;
        for (int i = 0; ok && names[i]; i++) {
            json_t *p = s_peer(st, names[i]);
            ok = p && !json_is_true(json_object_get(p, "standby")) &&
                 s_int(p, "layer_end") > s_int(p, "layer_begin");
        }
        json_decref(st);
        if (ok)
            return 0;
        usleep(250000);
    }
    return -1;
}

/* The bytes a node of status entry p needs for its range (placement/planner.h). */
static double s_need_mib(const sw_plan_model_t *pm, json_t *p)
{
    sw_plan_node_t nd = {.kv_layer_bytes = (uint64_t)s_int(p, "kv_kib_layer") << 10};
    return (double)sw_plan_need_bytes(pm, &nd, s_int(p, "layer_begin"), s_int(p, "layer_end")) /
           (1 << 20);
}

/* Part 1: the head's plan over fast and slow. */
static void s_placed(const sw_plan_model_t *pm, const int32_t *ref)
{
    const char *both[] = {"fast", "slow", NULL};
    SW_CHECK_INT(s_wait_placed(both, 120), 0);
    json_t *st = s_status();
    json_t *f = s_peer(st, "fast"), *s = s_peer(st, "slow");
    SW_CHECK(f && s);
    if (!f || !s) {
        json_decref(st);
        return;
    }
    printf("fast: layers [%d, %d), %d us a layer, %d MiB; slow: layers [%d, %d), %d us a layer, "
           "%d MiB; round trips %d / %d us\n",
           s_int(f, "layer_begin"), s_int(f, "layer_end"), s_int(f, "us_layer_1"),
           s_int(f, "mem_mib"), s_int(s, "layer_begin"), s_int(s, "layer_end"),
           s_int(s, "us_layer_1"), s_int(s, "mem_mib"), s_int(f, "rtt_us"), s_int(s, "rtt_us"));
    /* what they announced */
    SW_CHECK(json_is_true(json_object_get(f, "auto")) && json_is_true(json_object_get(s, "auto")));
    SW_CHECK(s_int(f, "us_layer_1") > 0 && s_int(f, "us_layer_k") > 0 && s_int(f, "rtt_us") > 0);
    SW_CHECK_INT(s_int(f, "probe_rows"), 9);
    SW_CHECK_INT(s_int(f, "mem_mib"), atoi(FAST_MIB));
    SW_CHECK(s_int(s, "mem_mib") > atoi(FAST_MIB));
    /* one contiguous cover of [6, 30) */
    json_t *a = s_int(f, "layer_begin") == 6 ? f : s, *b = a == f ? s : f;
    SW_CHECK_INT(s_int(a, "layer_begin"), 6);
    SW_CHECK_INT(s_int(a, "layer_end"), s_int(b, "layer_begin"));
    SW_CHECK_INT(s_int(b, "layer_end"), 30);
    /* memory respected */
    SW_CHECK(s_need_mib(pm, f) <= s_int(f, "mem_mib"));
    SW_CHECK(s_need_mib(pm, s) <= s_int(s, "mem_mib"));
    /* the faster node (as probed) has more layers, unless its memory is full */
    json_t *q = s_int(f, "us_layer_1") <= s_int(s, "us_layer_1") ? f : s, *o = q == f ? s : f;
    const int nq = s_int(q, "layer_end") - s_int(q, "layer_begin");
    const int no = s_int(o, "layer_end") - s_int(o, "layer_begin");
    sw_plan_node_t nd = {.kv_layer_bytes = (uint64_t)s_int(q, "kv_kib_layer") << 10};
    const int b1 = s_int(q, "layer_begin") == 6 ? 6 : s_int(q, "layer_begin") - 1;
    const int e1 = s_int(q, "layer_begin") == 6 ? s_int(q, "layer_end") + 1 : 30;
    const double more = (double)sw_plan_need_bytes(pm, &nd, b1, e1) / (1 << 20);
    printf("the faster node by its probe: %s, %d layers (%d for the other); one more would need "
           "%.1f MiB of its %d\n",
           json_string_value(json_object_get(q, "name")), nq, no, more, s_int(q, "mem_mib"));
    SW_CHECK(nq > no || more > s_int(q, "mem_mib") || no <= 1);
    /* the head applied what `shardwire plan` finds optimal for these numbers */
    char *argv[] = {(char *)sw_test_bin("shardwire"), "plan",   "--relay", s_ep, "--model",
                    (char *)sw_test_model(),          "--json", NULL};
    json_t *pl = s_json(argv);
    SW_CHECK(pl != NULL);
    if (pl) {
        const double pred = json_number_value(json_object_get(pl, "predicted_us"));
        const double cur = json_number_value(json_object_get(pl, "current_us"));
        printf("shardwire plan: predicted %.2f ms a round, the head's assignment %.2f ms, the even "
               "split %.2f ms%s\n",
               pred / 1e3, cur / 1e3, json_number_value(json_object_get(pl, "even_us")) / 1e3,
               json_is_true(json_object_get(pl, "even_fits")) ? "" : " (over a node's memory)");
        SW_CHECK(pred > 0 && cur > 0 && cur <= pred * 1.001 + 1);
        json_decref(pl);
    }
    json_decref(st);
    /* the placed pipeline serves exactly */
    pid_t run = sw_test_run_bg(s_ep, "head", s_prompt, N_GEN, 120, "run1");
    SW_CHECK(sw_test_run_exact(run, "run1", ref, N_GEN, 150));
}

/* Part 2: a PlanAssign from a node that is not the head is refused. */
static void s_rogue(void)
{
    const char *log = sw_test_log("cluster.log");
    const int before = sw_test_count_in_file(log, "refused a plan_assign from rogue");
    const char *real_fp = s_a.fp;
    /* rogue: a key-bound node of this model, layers [1, 2) (inside the head's range: no
     * route takes it), not the head */
    sw_peer_t *rogue = swa_member(&s_a, "rogue", 1, 2);
    SW_CHECK(rogue != NULL);
    if (!rogue)
        return;
    const sw_msg_t pm = {.type = SW_MSG_PLAN_ASSIGN,
                         .plan = {.model_fingerprint = real_fp,
                                  .n_layers = SWA_LAYERS,
                                  .layer_begin = 6,
                                  .layer_end = 30}};
    SW_CHECK_INT(sw_peer_send_msg(rogue, "spare", &pm), 0);
    sw_wire_msg_t m = {0};
    int code = -1;
    for (int i = 0; i < 50 && code < 0; i++) {
        sw_msg_t d;
        if (sw_peer_recv(rogue, &m, 100) == 0) {
            if (sw_codec_decode(&m, SW_MSG_ERROR, &d, NULL, 0) == 0)
                code = (int)d.error.code;
            sw_wire_msg_clear(&m);
        }
    }
    printf("rogue's PlanAssign to the standby: answered with %s\n",
           code < 0 ? "nothing" : sw_wire_error_code_name(code));
    SW_CHECK_INT(code, SW_ERROR_PLAN_REFUSED);
    SW_CHECK(sw_test_count_in_file(log, "refused a plan_assign from rogue") > before);
    json_t *st = s_status();
    json_t *sp = s_peer(st, "spare");
    SW_CHECK(sp && json_is_true(json_object_get(sp, "standby")));
    json_decref(st);
    sw_peer_destroy(&rogue);
}

/* Part 3: the standby takes the range of the node that held the last layer. */
static void s_standby(pid_t *fast, pid_t *slow, const int32_t *ref)
{
    json_t *st = s_status();
    json_t *f = s_peer(st, "fast");
    const int fast_tail = f && s_int(f, "layer_end") == 30;
    json_decref(st);
    pid_t *victim = fast_tail ? fast : slow;
    const char *vname = fast_tail ? "fast" : "slow";
    const char *log = sw_test_log("cluster.log");
    const int before = sw_test_count_in_file(log, "prompt tokens, 160 to generate");
    pid_t run = sw_test_run_bg(s_ep, "head", s_prompt, N_GEN, 150, "run2");
    for (int i = 0;
         i < 300 && sw_test_count_in_file(log, "prompt tokens, 160 to generate") == before; i++)
        usleep(20000);
    usleep(600000); /* some rounds went through */
    kill(*victim, SIGKILL);
    waitpid(*victim, NULL, 0);
    *victim = 0;
    printf("killed %s (it held the last layer) during the run\n", vname);
    SW_CHECK(sw_test_run_exact(run, "run2", ref, N_GEN, 180));
    const char *sp[] = {"spare", NULL};
    SW_CHECK_INT(s_wait_placed(sp, 10), 0);
    st = s_status();
    json_t *s = s_peer(st, "spare");
    SW_CHECK(s && s_int(s, "layer_end") == 30);
    printf("spare now serves layers [%d, %d)\n", s ? s_int(s, "layer_begin") : -1,
           s ? s_int(s, "layer_end") : -1);
    json_decref(st);
    /* the head noticed the loss and recovered the session: by replaying its rounds, or, when
     * the kill came before the first round was answered (the slow sanitizer build), by sending
     * that round again */
    SW_CHECK(sw_test_count_in_file(log, "left the pipeline") >= 1);
    SW_CHECK(sw_test_count_in_file(log, "recovery: replaying") +
                 sw_test_count_in_file(log, "recovery: the round went through again") >=
             1);
}

int main(void)
{
    const char *model = sw_test_model();
    signal(SIGPIPE, SIG_IGN);
    const char *nodes[] = {"head", "fast", "slow", "spare", "rogue", NULL};
    const char *clients[] = {"alice", NULL};
    pid_t relay = swa_relay(&s_a, s_dir, s_ep, nodes, clients, NULL);
    SW_CHECK(relay > 0);
    int32_t ref[N_GEN + 8];
    SW_CHECK_INT(sw_test_generate(model, s_prompt, N_GEN, ref, N_GEN + 8), N_GEN);
    char err[256];
    static sw_plan_model_t pm;
    sw_gguf_t *g = sw_gguf_open(model, err, sizeof err);
    SW_CHECK(g != NULL);
    if (g)
        SW_CHECK_INT(sw_plan_model_bytes(g, SWA_LAYERS, &pm, err, sizeof err), 0);
    sw_gguf_close(&g);
    const char *log = sw_test_log("cluster.log");
    const char *hx[] = {"--auto-nodes",        "2",  "--ctx", "512", "--max-sessions", "2",
                        "--recover-timeout-s", "60", NULL};
    const char *fx[] = {"--threads",      "2", "--mem-mib", FAST_MIB, "--ctx", "512",
                        "--max-sessions", "2", NULL};
    const char *sx[] = {"--mem-mib", SLOW_MIB, "--ctx", "512", "--max-sessions", "2", NULL};
    const char *px[] = {"--ctx", "512", "--max-sessions", "2", NULL};
    pid_t head = sw_test_node(s_ep, s_dir, "head", "0:6", log, hx);
    pid_t fast = sw_test_node(s_ep, s_dir, "fast", "auto", log, fx);
    pid_t slow = sw_test_node(s_ep, s_dir, "slow", "auto", log, sx);
    sw_test_client_env(s_dir, "alice");
    SW_CHECK_INT(sw_test_wait_peers(s_ep, 3, 120), 0);
    SW_CHECK_INT(swa_fingerprint(&s_a), 0);
    s_placed(&pm, ref);
    pid_t spare = sw_test_node(s_ep, s_dir, "spare", "auto", log, px);
    SW_CHECK_INT(sw_test_wait_peers(s_ep, 4, 120), 0);
    for (int i = 0; i < 100 && !sw_test_count_in_file(log, "standby auto node (model"); i++)
        usleep(100000);
    sleep(1); /* its round trip announced */
    s_rogue();
    s_standby(&fast, &slow, ref);
    sw_test_kill(spare);
    sw_test_kill(fast);
    sw_test_kill(slow);
    sw_test_kill(head);
    sw_test_kill(relay);
    swa_rmdir(s_dir);
    return sw_test_done();
}
