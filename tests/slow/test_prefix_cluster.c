/*
 * test_prefix_cluster.c - prefix reuse across requests through a real
 * cluster (a relay, a head with the draft model and a tail, `shardwire run`
 * clients): requests that share a long system prompt (about 600 tokens)
 *
 *  - give exactly the output of the request alone in one process (greedy),
 *    and a warm request (its prefix in every stage's cache, reported in its
 *    stats as prefix_reused) the same tokens and the same logits digest
 *    (every verified logits row bit for bit) as the same request cold, for
 *    plain decoding, draft-model drafting and seeded sampling (its cold
 *    reference: the cluster with the cache off, the prompt cut in other
 *    pieces; and the same request in one process: a seeded draw depends on
 *    its position, not on how the scheduler cut the prompt);
 *  - the repeat of an earlier request reuses its prompt up to its last
 *    whole block before the last token;
 *  - after the tail restarted (its prefix cache empty) a request whose prefix
 *    the head still holds is refused by the tail, sent again whole by the
 *    head's recovery, and still exact (reported as no reuse);
 *  - a head and a tail with --prefix-cache off never reuse.
 */
#include "sw_fault.h"

#define N_GEN 24

static char s_system[16384];

static void s_make_system(void)
{
    s_system[0] = 0;
    strcat(s_system, "You are a careful assistant for a team of engineers. ");
    for (int i = 0; i < 24; i++) {
        char line[256];
        snprintf(line, sizeof line,
                 "Rule %d: answer in plain words, cite the file you read, and never guess a "
                 "number you did not measure. ",
                 i + 1);
        strcat(s_system, line);
    }
}

static void s_prompt(char *out, size_t len, const char *question)
{
    snprintf(out, len, "%sQuestion: %s\nAnswer:", s_system, question);
}

/* One request through the cluster; waits for it. */
static void s_run(const swf_cluster_t *c, const char *prompt, const char *const *extra,
                  const char *tag, swf_result_t *r)
{
    swf_client_t cl = {0};
    SW_CHECK_INT(swf_client_start(&cl, c->ep, prompt, N_GEN, 300, extra, tag), 0);
    swf_client_wait(&cl, r);
    SW_CHECK_INT(r->rc, 0);
    if (r->rc != 0)
        fprintf(stderr, "%s: %s\n", tag, r->err);
}

static void s_same(const swf_result_t *a, const swf_result_t *b, const char *what)
{
    const int same = swf_same(a, b), digest = a->digest[0] && !strcmp(a->digest, b->digest);
    SW_CHECK(same);
    SW_CHECK(digest);
    fprintf(stderr, "%s: tokens %s, logits digest %s (%s / %s)\n", what, same ? "equal" : "DIFFER",
            digest ? "equal" : "DIFFERS", a->digest, b->digest);
}

int main(void)
{
    const char *model = sw_test_model();
    signal(SIGPIPE, SIG_IGN);
    s_make_system();
    static char pa[20000], pb[20000], pc[20000], pd[20000];
    /* long enough to reach a block past the system prompt's last one */
    s_prompt(pa, sizeof pa,
             "Which file holds the relay's limits, and which of them bound the rows of one "
             "Forward, the prompt tokens of one request, the draft tokens of one round and the "
             "names on a route? List each limit with its value and the reason its comment gives, "
             "then say which of them a client can reach with an ordinary request and which only "
             "a broken or hostile peer would ever hit.");
    s_prompt(pb, sizeof pb, "How do I measure the time to the first token?");
    s_prompt(pc, sizeof pc, "What does the tail verify?");
    s_prompt(pd, sizeof pd, "Why are prompts evaluated in windows?");
    static const char *const plain[] = {"--draft", "none", NULL};
    static const char *const model_d[] = {"--draft", "model", NULL};
    static const char *const sampled[] = {"--temp", "0.8", "--seed", "5", "--draft", "none", NULL};

    /* references: each request alone in one process */
    swf_result_t ref_a, ref_b, ref_c, ref_d;
    swf_reference(model, pa, N_GEN, NULL, &ref_a);
    swf_reference(model, pb, N_GEN, NULL, &ref_b);
    swf_reference(model, pc, N_GEN, NULL, &ref_c);
    swf_reference(model, pd, N_GEN, NULL, &ref_d);
    SW_CHECK(ref_a.ok && ref_b.ok && ref_c.ok && ref_d.ok);

    swf_cluster_t c = {0};
    const char *head[] = {
        "--draft-model", model, "--round-timeout-ms", "20000", "--recover-timeout-s", "60", NULL};
    swf_node(&c.nodes[0], "head", "0:15", head);
    swf_node(&c.nodes[1], "tail", "15:30", NULL);
    SW_CHECK_INT(swf_start(&c, model, 2, sw_test_log("nodes.log")), 0);

    swf_result_t a1, a2, b1, s1, s2, m1, m2;
    s_run(&c, pa, plain, "a1", &a1); // cold: nothing cached yet
    SW_CHECK_INT(a1.prefix_reused, 0);
    SW_CHECK(swf_same(&a1, &ref_a));
    s_run(&c, pb, plain, "b1", &b1); // warm: the system prompt from every cache
    fprintf(stderr, "a second question after the same system prompt reused %d positions\n",
            b1.prefix_reused);
    SW_CHECK(b1.prefix_reused >= 512); // the system prompt is about 600 tokens
    SW_CHECK(swf_same(&b1, &ref_b));
    /* the stats of a warm request: its prefill round starts past row 0 and is
     * still timed (its network time was "now minus 0", the host's uptime) */
    fprintf(stderr, "warm request: network %.1f ms of %.1f ms in all\n", b1.network_ms,
            b1.total_ms);
    SW_CHECK(b1.total_ms > 0 && b1.network_ms >= 0 && b1.network_ms < b1.total_ms);
    s_run(&c, pa, plain, "a2", &a2); // the first request again: its whole prompt but the end
    SW_CHECK(a2.prefix_reused > b1.prefix_reused);
    fprintf(stderr, "the first request again reused %d positions\n", a2.prefix_reused);
    s_same(&a1, &a2, "the same request cold and warm (plain)");

    /* draft-model drafting (the draft model's own prefix cache too) and sampling */
    s_run(&c, pc, model_d, "m1", &m1);
    s_run(&c, pc, model_d, "m2", &m2);
    SW_CHECK(m1.prefix_reused >= 512 && m2.prefix_reused >= m1.prefix_reused);
    fprintf(stderr, "draft model: reused %d, then %d\n", m1.prefix_reused, m2.prefix_reused);
    SW_CHECK(swf_same(&m1, &ref_c));
    s_same(&m1, &m2, "draft model, the system prompt cached, then the whole prompt");
    s_run(&c, pb, sampled, "s1", &s1);
    s_run(&c, pb, sampled, "s2", &s2);
    SW_CHECK(s1.prefix_reused > 0 && s2.prefix_reused > 0);
    s_same(&s1, &s2, "seeded sampling, twice warm");

    /* the tail restarted: its cache is empty, the head's is not */
    swf_kill9(&c.nodes[1].pid);
    usleep(300 * 1000);
    swf_start_node(&c, 1);
    SW_CHECK_INT(swf_wait_msgs_in(c.ep, "tail", 0, 60), 0);
    const int misses0 = swf_log_count(&c, "prompt prefix is not in its prefix cache");
    swf_result_t d1;
    s_run(&c, pd, plain, "d1", &d1);
    SW_CHECK(swf_same(&d1, &ref_d));
    SW_CHECK_INT(d1.prefix_reused, 0);
    SW_CHECK(swf_log_count(&c, "prompt prefix is not in its prefix cache") > misses0);
    fprintf(stderr, "after the tail restarted: exact (%d tokens), reused %d\n", d1.n,
            d1.prefix_reused);
    swf_stop(&c);

    /* --prefix-cache off everywhere: never reused; and the prompt cut into other pieces
     * (--prefill-pieces 8, the first cluster's default 4) */
    swf_cluster_t o = {0};
    static const char *const off[] = {"--prefix-cache", "off", "--prefill-pieces", "8", NULL};
    swf_node(&o.nodes[0], "head", "0:15", off);
    swf_node(&o.nodes[1], "tail", "15:30", off);
    SW_CHECK_INT(swf_start(&o, model, 2, sw_test_log("off.log")), 0);
    swf_result_t o1, o2, o3;
    s_run(&o, pa, plain, "o1", &o1);
    s_run(&o, pb, plain, "o2", &o2);
    s_run(&o, pb, sampled, "o3", &o3);
    SW_CHECK_INT(o2.prefix_reused, 0);
    SW_CHECK_INT(o3.prefix_reused, 0);
    SW_CHECK(swf_same(&o1, &ref_a) && swf_same(&o2, &ref_b));
    /* seeded sampling draws by the position of each draw, not by how the prompt was
     * cut (a cut that moves with the scheduler's timing): nothing cached, warm, and one
     * process all give the same tokens and logits */
    s_same(&o3, &s1, "seeded sampling, nothing cached and warm");
    swf_result_t ref_s;
    swf_reference(model, pb, N_GEN, sampled, &ref_s);
    SW_CHECK(ref_s.ok);
    s_same(&o3, &ref_s, "seeded sampling, nothing cached (pieces of 8) and one process");
    swf_stop(&o);
    return sw_test_done();
}
