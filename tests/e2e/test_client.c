/*
 * test_client.c - the client library (client/client.h) against a real keyed
 * cluster on loopback: shardwire-relay with CURVE and an allow-list, a head
 * and a tail node holding the cluster key (the head the access key too).
 *
 *  - a request's tokens equal `shardwire generate` in one process;
 *  - chat messages (one user turn) equal the prompt with --chat, and a
 *    system + user conversation is formatted by the head (other tokens);
 *  - two requests in flight on one client both complete correctly;
 *  - a stop string cuts the text before it and ends with finish "stop",
 *    also when it arrives split across chunks;
 *  - a client holding another access key gets SW_CLIENT_EKEY within
 *    seconds instead of a silent timeout;
 *  - an unknown head name gives SW_CLIENT_ENOHEAD, an empty prompt
 *    SW_CLIENT_EINVAL without anything sent, a dead relay SW_CLIENT_ECONNECT
 *    at sw_client_new.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "client.h"
#include "sw_test.h"

#define N_GEN 24

static char s_dir[64];
static char s_ep[64];

static const char *s_path(const char *name)
{
    static char buf[8][256];
    static int slot;
    char *p = buf[slot++ % 8];
    snprintf(p, 256, "%s/%s", s_dir, name);
    return p;
}

static double s_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int s_run(char *const argv[])
{
    char *err = NULL;
    int rc = sw_test_run(argv, 30, NULL, &err);
    if (rc != 0)
        fprintf(stderr, "%s failed (%d): %s\n", argv[1], rc, err ? err : "");
    free(err);
    return rc;
}

static void s_keygen(const char *who)
{
    char out[256];
    snprintf(out, sizeof out, "%s", s_path(who));
    char *argv[] = {(char *)sw_test_bin("shardwire"), "keygen", "--out", out, NULL};
    SW_CHECK_INT(s_run(argv), 0);
}

/* `shardwire keygen --cluster-key FILE` (or --access-key FILE). */
static void s_sym_key(const char *flag, const char *file)
{
    char out[256];
    snprintf(out, sizeof out, "%s", s_path(file));
    char *argv[] = {(char *)sw_test_bin("shardwire"), "keygen", (char *)flag, out, NULL};
    SW_CHECK_INT(s_run(argv), 0);
}

static char *s_line(const char *path)
{
    size_t n;
    char *t = sw_test_read_file(path, &n);
    if (t)
        t[strcspn(t, "\n")] = 0;
    return t;
}

/* A client with client.key, the relay's key and the given access key file. */
static sw_client_t *s_client(const char *access_file, char *err, size_t err_len)
{
    char key[256], rk[256], ak[256];
    snprintf(key, sizeof key, "%s", s_path("client.key"));
    snprintf(rk, sizeof rk, "%s", s_path("relay.pub"));
    snprintf(ak, sizeof ak, "%s", s_path(access_file));
    sw_sec_args_t a = {.key_file = key, .relay_key = rk, .access_key = {ak, NULL}};
    sw_sec_t sec;
    if (sw_sec_load(&a, s_ep, &sec, err, err_len) != 0)
        return NULL;
    sw_client_opts_t o = {.relay = s_ep, .sec = &sec, .connect_timeout_ms = 3000};
    sw_client_t *c = sw_client_new(&o, err, err_len);
    sw_sec_wipe(&sec);
    return c;
}

struct s_out {
    int done;             // 1 = EV_DONE, -1 = EV_ERROR
    int code;             // error code
    int finish;           // finish reason
    int n;                // tokens
    uint32_t ids[512];    // token ids
    char text[8192];      // released text
    size_t len;           // bytes of text
    sw_client_stats_t st; // final stats
};

/* Drives c until every request in ids[0..n) ended or timeout_s passed. */
static void s_drain(sw_client_t *c, char ids[][SW_CLIENT_ID_LEN], struct s_out *out, int n,
                    int timeout_s)
{
    double end = s_now_ms() + timeout_s * 1e3;
    int left = n;
    while (left > 0 && s_now_ms() < end) {
        sw_client_event_t ev;
        int r = sw_client_next(c, &ev, 200);
        if (r != 0)
            continue;
        for (int i = 0; i < n; i++) {
            if (strcmp(ev.id, ids[i]) != 0)
                continue;
            struct s_out *o = &out[i];
            for (int k = 0; k < ev.n_tokens && o->n < 512; k++)
                o->ids[o->n++] = ev.tokens[k];
            if (ev.text_len && o->len + ev.text_len < sizeof o->text) {
                memcpy(o->text + o->len, ev.text, ev.text_len);
                o->len += ev.text_len;
                o->text[o->len] = 0;
            }
            if (ev.type == SW_CLIENT_EV_DONE) {
                o->done = 1;
                o->finish = ev.finish;
                o->st = *ev.stats;
                left--;
            } else if (ev.type == SW_CLIENT_EV_ERROR) {
                o->done = -1;
                o->code = ev.code;
                fprintf(stderr, "request %s: %s (%s)\n", ev.id, ev.message,
                        sw_client_strerror(ev.code));
                left--;
            }
        }
    }
}

/* `shardwire generate --json` token ids and text. */
static int s_reference(const char *model, const char *prompt, int chat, struct s_out *r)
{
    const char *chat_x[] = {"--chat", NULL};
    char *out = NULL;
    memset(r, 0, sizeof *r);
    int rc = sw_test_generate_run(model, prompt, N_GEN, chat ? chat_x : NULL, 120, &out, NULL);
    json_error_t je;
    json_t *j = rc == 0 && out ? json_loads(out, JSON_DISABLE_EOF_CHECK, &je) : NULL;
    json_t *ids = j ? json_object_get(j, "tokens") : NULL;
    for (size_t i = 0; json_is_array(ids) && i < json_array_size(ids) && i < 512; i++)
        r->ids[r->n++] = (uint32_t)json_integer_value(json_array_get(ids, i));
    const char *t = j ? json_string_value(json_object_get(j, "text")) : NULL;
    snprintf(r->text, sizeof r->text, "%s", t ? t : "");
    r->len = strlen(r->text);
    json_decref(j);
    free(out);
    return r->n > 0 ? 0 : -1;
}

static int s_same_ids(const struct s_out *a, const struct s_out *b)
{
    return a->n == b->n && a->n > 0 && !memcmp(a->ids, b->ids, (size_t)a->n * sizeof a->ids[0]);
}

int main(void)
{
    const char *model = sw_test_model();
    snprintf(s_dir, sizeof s_dir, "%s", sw_test_tmpdir());
    snprintf(s_ep, sizeof s_ep, "tcp://127.0.0.1:%d", sw_test_free_port());

    /* keys: relay, head, tail, client; the cluster key, one access key and a second one */
    const char *who[] = {"relay", "head", "tail", "client"};
    for (int i = 0; i < 4; i++)
        s_keygen(who[i]);
    s_sym_key("--cluster-key", "cluster.key");
    s_sym_key("--access-key", "access.key");
    s_sym_key("--access-key", "other.key");
    char *hp = s_line(s_path("head.pub")), *tp = s_line(s_path("tail.pub"));
    char *cp = s_line(s_path("client.pub"));
    FILE *f = fopen(s_path("allow.txt"), "w");
    if (!f || !hp || !tp || !cp)
        sw_test_skip("cannot write the keys");
    fprintf(f, "%s node head\n%s node tail\n%s client\n", hp, tp, cp);
    fclose(f);
    free(hp);
    free(tp);
    free(cp);

    char rkey[256], allow[256], rpub[256], ckey[256], hkey[256], tkey[256], akey[256];
    snprintf(rkey, sizeof rkey, "%s", s_path("relay.key"));
    snprintf(allow, sizeof allow, "%s", s_path("allow.txt"));
    snprintf(rpub, sizeof rpub, "%s", s_path("relay.pub"));
    snprintf(ckey, sizeof ckey, "%s", s_path("cluster.key"));
    snprintf(akey, sizeof akey, "%s", s_path("access.key"));
    snprintf(hkey, sizeof hkey, "%s", s_path("head.key"));
    snprintf(tkey, sizeof tkey, "%s", s_path("tail.key"));
    char *ra[] = {(char *)sw_test_bin("shardwire-relay"),
                  "--listen",
                  s_ep,
                  "--key",
                  rkey,
                  "--allow",
                  allow,
                  NULL};
    pid_t relay = sw_test_spawn(ra, NULL);
    char *na[] = {(char *)sw_test_bin("shardwire-node"),
                  "--model",
                  (char *)model,
                  "--layers",
                  "0:15",
                  "--relay",
                  s_ep,
                  "--name",
                  "head",
                  "--threads",
                  "1",
                  "--key",
                  hkey,
                  "--relay-key",
                  rpub,
                  "--cluster-key",
                  ckey,
                  "--access-key",
                  akey,
                  NULL};
    pid_t head = sw_test_spawn(na, NULL);
    char *ta[] = {(char *)sw_test_bin("shardwire-node"),
                  "--model",
                  (char *)model,
                  "--layers",
                  "15:end",
                  "--relay",
                  s_ep,
                  "--name",
                  "tail",
                  "--threads",
                  "1",
                  "--key",
                  tkey,
                  "--relay-key",
                  rpub,
                  "--cluster-key",
                  ckey,
                  NULL};
    pid_t tail = sw_test_spawn(ta, NULL);
    setenv("SW_KEY", s_path("client.key"), 1);
    setenv("SW_RELAY_KEY", rpub, 1);
    setenv("SW_ACCESS_KEY", akey, 1);
    if (sw_test_wait_peers(s_ep, 2, 60) != 0) {
        SW_CHECK(!"the cluster came up");
        goto out;
    }

    char err[512];
    sw_client_t *c = s_client("access.key", err, sizeof err);
    SW_CHECK(c != NULL);
    if (!c) {
        fprintf(stderr, "client: %s\n", err);
        goto out;
    }
    char hn[SW_CLIENT_NAME_LEN];
    SW_CHECK_INT(sw_client_find_head(c, NULL, NULL, hn, err, sizeof err), 0);
    SW_CHECK(!strcmp(hn, "head"));
    SW_CHECK_INT(sw_client_find_head(c, "nobody", NULL, hn, err, sizeof err), SW_CLIENT_ENOHEAD);
    SW_CHECK(strstr(err, "nobody") != NULL);
    SW_CHECK_INT(sw_client_find_head(c, NULL, "ffffffff", hn, err, sizeof err), SW_CLIENT_ENOHEAD);
    SW_CHECK_INT(sw_client_find_head(c, NULL, "SmolLM2-135M-Instruct.Q4_1", hn, err, sizeof err),
                 0);

    /* invalid requests are refused before anything is sent */
    char id[2][SW_CLIENT_ID_LEN];
    sw_client_request_t q = sw_client_request_default();
    q.prompt = "";
    SW_CHECK_INT(sw_client_submit(c, "head", &q, id[0], err, sizeof err), SW_CLIENT_EINVAL);
    SW_CHECK(strstr(err, "empty") != NULL);
    q.prompt = "x";
    q.top_p = 2;
    SW_CHECK_INT(sw_client_submit(c, "head", &q, id[0], err, sizeof err), SW_CLIENT_EINVAL);
    SW_CHECK_INT(sw_client_inflight(c), 0);

    /* two requests in flight on one client: both equal the one-process output */
    const char *p0 = "The capital of France is", *p1 = "List three colors of the rainbow:\n1.";
    struct s_out ref[2], got[2];
    SW_CHECK_INT(s_reference(model, p0, 0, &ref[0]), 0);
    SW_CHECK_INT(s_reference(model, p1, 0, &ref[1]), 0);
    memset(got, 0, sizeof got);
    q = sw_client_request_default();
    q.n_predict = N_GEN;
    q.prompt = p0;
    SW_CHECK_INT(sw_client_submit(c, "head", &q, id[0], err, sizeof err), 0);
    q.prompt = p1;
    SW_CHECK_INT(sw_client_submit(c, "head", &q, id[1], err, sizeof err), 0);
    SW_CHECK_INT(sw_client_inflight(c), 2);
    s_drain(c, id, got, 2, 120);
    for (int i = 0; i < 2; i++) {
        SW_CHECK_INT(got[i].done, 1);
        SW_CHECK(s_same_ids(&got[i], &ref[i]));
        SW_CHECK(!strcmp(got[i].text, ref[i].text));
        SW_CHECK_INT(got[i].st.n_generated, N_GEN);
        SW_CHECK(got[i].st.have_head && got[i].st.n_prompt > 0);
        SW_CHECK_INT(got[i].finish, SW_CLIENT_FINISH_LENGTH);
    }
    SW_CHECK_INT(sw_client_inflight(c), 0);

    /* stop strings: a word from the middle of the reference text, and a two-byte one */
    char stop_word[32] = "";
    const char *mid = ref[1].len > 8 ? ref[1].text + ref[1].len / 2 : NULL;
    if (mid) {
        snprintf(stop_word, sizeof stop_word, "%.6s", mid);
        const char *stops[] = {"never appears", stop_word};
        q.prompt = p1;
        q.stop = stops;
        q.n_stop = 2;
        memset(got, 0, sizeof got);
        SW_CHECK_INT(sw_client_submit(c, "head", &q, id[0], err, sizeof err), 0);
        s_drain(c, id, got, 1, 120);
        const char *at = strstr(ref[1].text, stop_word);
        SW_CHECK_INT(got[0].done, 1);
        SW_CHECK_INT(got[0].finish, SW_CLIENT_FINISH_STOP);
        SW_CHECK(at != NULL && got[0].len == (size_t)(at - ref[1].text));
        SW_CHECK(!strncmp(got[0].text, ref[1].text, got[0].len));
        q.stop = NULL;
        q.n_stop = 0;
    }

    /* chat messages: one user turn equals the prompt with --chat */
    struct s_out ref_chat;
    SW_CHECK_INT(s_reference(model, p0, 1, &ref_chat), 0);
    sw_client_msg_t turns[2] = {{"system", "You answer in one word."}, {"user", p0}};
    q = sw_client_request_default();
    q.n_predict = N_GEN;
    q.messages = &turns[1];
    q.n_messages = 1;
    memset(got, 0, sizeof got);
    SW_CHECK_INT(sw_client_submit(c, "head", &q, id[0], err, sizeof err), 0);
    q.messages = turns;
    q.n_messages = 2;
    SW_CHECK_INT(sw_client_submit(c, "head", &q, id[1], err, sizeof err), 0);
    s_drain(c, id, got, 2, 120);
    SW_CHECK_INT(got[0].done, 1);
    SW_CHECK(s_same_ids(&got[0], &ref_chat));
    SW_CHECK_INT(got[1].done, 1);
    /* the system turn replaced the template's default one */
    SW_CHECK(got[1].st.n_prompt > 0 && got[1].st.n_prompt != got[0].st.n_prompt);
    sw_client_destroy(&c);
    SW_CHECK(c == NULL);

    /* another access key: a clear error within seconds, not a 300 s wait */
    c = s_client("other.key", err, sizeof err);
    SW_CHECK(c != NULL);
    if (c) {
        q = sw_client_request_default();
        q.prompt = p0;
        double t0 = s_now_ms();
        SW_CHECK_INT(sw_client_submit(c, "head", &q, id[0], err, sizeof err), 0);
        memset(got, 0, sizeof got);
        s_drain(c, id, got, 1, 30);
        SW_CHECK_INT(got[0].done, -1);
        SW_CHECK_INT(got[0].code, SW_CLIENT_EKEY);
        SW_CHECK(s_now_ms() - t0 < 5000);
        sw_client_destroy(&c);
    }

out:
    sw_test_kill(head);
    sw_test_kill(tail);
    sw_test_kill(relay);

    /* no relay: sw_client_new fails with a line that names the endpoint */
    c = s_client("access.key", err, sizeof err);
    SW_CHECK(c == NULL);
    SW_CHECK(strstr(err, s_ep) != NULL);
    return sw_test_done();
}
