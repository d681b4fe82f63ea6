/*
 * test_client_trust.c - `shardwire run` trusts only the head it chose, and never
 * hands a peer's control characters to the terminal. Real relay, real nodes
 * (head 0:15, tail 15:30 of SmolLM2), keys on:
 *
 *  - while a request streams, "mallory" (a client of the same cluster) and
 *    "evilhead" (a key-bound head the client did not choose) learn the real
 *    request id and client name from the head's log and send forged Errors
 *    and TokenChunks for it: the relay refuses mallory's (a client sends
 *    only to heads), the client drops evilhead's (only its head speaks for a
 *    request), and the request completes with exactly the tokens of
 *    `shardwire generate`;
 *  - a head that answers with escape sequences in its text and its Error
 *    (ESC, BEL, the C1 CSI U+009B) gets them stripped from what run prints.
 */
#include "codec_pb.h"
#include "keys.h"
#include "peer.h"
#include "sw_test.h"
#include "wire.h"

#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define N_GEN 48

static char s_dir[64];
static char s_ep[64];
static char s_fp[65];

static const char *s_path(const char *name, const char *ext)
{
    static char buf[8][256];
    static int slot;
    char *p = buf[slot++ % 8];
    snprintf(p, 256, "%s/%s%s", s_dir, name, ext);
    return p;
}

static double s_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int s_ids(const char *out, int32_t *ids, int max)
{
    const char *brace = out ? strchr(out, '{') : NULL;
    json_error_t je;
    json_t *j = brace ? json_loads(brace, JSON_DISABLE_EOF_CHECK, &je) : NULL;
    json_t *arr = j ? json_object_get(j, "tokens") : NULL;
    int n = -1;
    if (json_is_array(arr)) {
        n = 0;
        for (size_t i = 0; i < json_array_size(arr) && n < max; i++)
            ids[n++] = (int32_t)json_integer_value(json_array_get(arr, i));
    }
    json_decref(j);
    return n;
}

/* A peer with `who`'s keys: a client, or (layers_end > 0) a head of [0, layers_end). */
static sw_peer_t *s_peer(const char *who, uint32_t layers_end)
{
    sw_sec_args_t a = {.key_file = s_path(who, ".key"),
                       .relay_key = s_path("relay", ".pub"),
                       .access_key = {s_path("access.key", ""), NULL}};
    sw_sec_t sec;
    char err[512];
    if (sw_sec_load(&a, s_ep, &sec, err, sizeof err) != 0) {
        fprintf(stderr, "sec load: %s\n", err);
        return NULL;
    }
    sw_msg_announce_t an = {0};
    an.name = who;
    an.role = layers_end ? SW_ROLE_HEAD : SW_ROLE_CLIENT;
    an.backend = layers_end ? "cpu" : "";
    an.model_fingerprint = layers_end ? s_fp : "";
    an.layer_end = layers_end;
    an.n_layers = layers_end ? 30 : 0;
    an.hidden = layers_end ? 576 : 0;
    an.max_sessions = 1;
    sw_peer_opts_t o = {.relay = s_ep, .announce = &an, .connect_timeout_ms = 5000, .sec = &sec};
    sw_peer_t *p = sw_peer_new(&o);
    sw_sec_wipe(&sec);
    return p;
}

/* Starts `shardwire run` in a child that writes its stdout / stderr to files; returns the pid
 * (its exit status is run's exit code). */
static pid_t s_run_bg(char *const argv[], const char *out_path, const char *err_path)
{
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    char *out = NULL, *err = NULL;
    int rc = sw_test_run(argv, 120, &out, &err);
    FILE *f = fopen(out_path, "w");
    if (f) {
        fputs(out ? out : "", f);
        fclose(f);
    }
    f = fopen(err_path, "w");
    if (f) {
        fputs(err ? err : "", f);
        fclose(f);
    }
    _exit(rc);
}

static int s_wait_rc(pid_t pid)
{
    int st = 0;
    if (waitpid(pid, &st, 0) != pid)
        return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Sends an Error and a done TokenChunk for request_id to dest, both forged by p (sealed with
 * the access key, as any client or head can). 0 when both went out. */
static int s_forge(sw_peer_t *p, const char *dest, const char *request_id)
{
    Shardwire__Error er = SHARDWIRE__ERROR__INIT;
    er.code = SHARDWIRE__ERROR_CODE__ERR_DEST_GONE;
    er.message = "\x1b[2Jthe head crashed, run again";
    er.request_id = (char *)request_id;
    Shardwire__Envelope env = SHARDWIRE__ENVELOPE__INIT;
    env.body_case = SHARDWIRE__ENVELOPE__BODY_ERROR;
    env.error = &er;
    int rc = sw_peer_send(p, dest, sw_envelope_of(&env), NULL, 0, 0);
    Shardwire__TokenChunk c = SHARDWIRE__TOKEN_CHUNK__INIT;
    c.request_id = (char *)request_id;
    c.text.data = (uint8_t *)"FORGED";
    c.text.len = 6;
    c.done = 1;
    c.finish = SHARDWIRE__FINISH_REASON__FINISH_ERROR;
    env.body_case = SHARDWIRE__ENVELOPE__BODY_TOKEN_CHUNK;
    env.token_chunk = &c;
    rc |= sw_peer_send(p, dest, sw_envelope_of(&env), NULL, 0, 0);
    return rc;
}

/* The request id and client name of the newest "request 'ID' from CLIENT:" line of the head's
 * log (what an attacker who can see the head's log, or is the head, knows): 1 when found. */
static int s_request_in_log(const char *log, char *rid, char *client)
{
    char *text = sw_test_read_file(log, NULL);
    int found = 0;
    for (const char *p = text; p && (p = strstr(p, "request 'req-")); p++) {
        char r[64], c[64];
        if (sscanf(p, "request '%63[^']' from %63[A-Za-z0-9._-]:", r, c) == 2 &&
            !strncmp(c, "client-", 7)) {
            snprintf(rid, 64, "%s", r);
            snprintf(client, 64, "%s", c);
            found = 1;
        }
    }
    free(text);
    return found;
}

/* Relay errors that came back to p; counts those refusing a message to dest (unauthorized). */
static int s_refusals(sw_peer_t *p, const char *dest)
{
    int n = 0;
    sw_wire_msg_t m = {0};
    while (sw_peer_recv(p, &m, 0) == 0) {
        n += !strcmp(m.peer, SW_WIRE_RELAY_NAME) &&
             m.env->pb.body_case == SHARDWIRE__ENVELOPE__BODY_ERROR &&
             m.env->pb.error->code == SHARDWIRE__ERROR_CODE__ERR_UNAUTHORIZED &&
             m.env->pb.error->dest && !strcmp(m.env->pb.error->dest, dest);
        sw_wire_msg_clear(&m);
    }
    return n;
}

/*
 * While `shardwire run` streams, two attackers learn its request id and its client name from
 * the head's log (the id is random: no guessing) and forge an Error and a final TokenChunk
 * for exactly that request: "mallory", a client of the cluster (the relay refuses to pass
 * a client's message to anything but a head), and "evilhead", a key-bound head that is not
 * the one the client chose (its messages reach the client, which drops them: only the
 * chosen head speaks for a request). The run completes with exactly the tokens of
 * `shardwire generate`.
 */
static void s_forged_errors(const int32_t *ref, int n_ref, const char *log, sw_peer_t *evil)
{
    sw_peer_t *mal = s_peer("mallory", 0);
    SW_CHECK(mal != NULL);
    if (!mal)
        return;
    char n_gen[16];
    snprintf(n_gen, sizeof n_gen, "%d", N_GEN);
    char *rn[] = {(char *)sw_test_bin("shardwire"),
                  "run",
                  "--greedy",
                  "--relay",
                  s_ep,
                  "--head",
                  "head",
                  "-p",
                  "List three colors of the rainbow:\n1.",
                  "-n",
                  n_gen,
                  "--json",
                  "--timeout-s",
                  "60",
                  NULL};
    pid_t run = s_run_bg(rn, s_path("run1", ".out"), s_path("run1", ".err"));
    int forged = 0, refused = 0, st = 0;
    char rid[64] = "", client[64] = "";
    double t0 = s_now();
    while (waitpid(run, &st, WNOHANG) == 0 && s_now() - t0 < 90) {
        if (!s_request_in_log(log, rid, client)) {
            usleep(10000);
            continue;
        }
        if (s_forge(evil, client, rid) == 0)
            forged++;
        if (s_forge(mal, client, rid) != 0)
            fprintf(stderr, "mallory could not send\n");
        refused += s_refusals(mal, client);
        sw_wire_msg_t drop = {0};
        while (sw_peer_recv(evil, &drop, 0) == 0)
            sw_wire_msg_clear(&drop);
        usleep(20000);
    }
    refused += s_refusals(mal, client);
    int rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    char *out = sw_test_read_file(s_path("run1", ".out"), NULL);
    char *err = sw_test_read_file(s_path("run1", ".err"), NULL);
    int32_t got[N_GEN + 8];
    int n = s_ids(out, got, N_GEN + 8);
    printf("forged errors: request %s of %s: %d forgeries from a head that was not chosen, %d "
           "of mallory's refused by the relay; run exit %d, %d tokens\n",
           rid, client, forged, refused, rc, n);
    SW_CHECK(rid[0] != 0);
    SW_CHECK(forged >= 3);
    SW_CHECK(refused >= 3);
    SW_CHECK_INT(rc, 0);
    SW_CHECK(n == n_ref && n > 0 && !memcmp(got, ref, sizeof(int32_t) * (size_t)n_ref));
    SW_CHECK(out && !strstr(out, "FORGED"));
    if (rc != 0)
        fprintf(stderr, "run: %s\n", err ? err : "");
    free(out);
    free(err);
    sw_peer_destroy(&mal);
}

/* A head (compromised, or just hostile) that answers with terminal escapes. */
static void s_escapes(sw_peer_t *evil)
{
    char *rn[] = {(char *)sw_test_bin("shardwire"),
                  "run",
                  "--greedy",
                  "--relay",
                  s_ep,
                  "--head",
                  "evilhead",
                  "-p",
                  "hi",
                  "-n",
                  "8",
                  "--timeout-s",
                  "20",
                  NULL};
    pid_t run = s_run_bg(rn, s_path("run2", ".out"), s_path("run2", ".err"));
    double t0 = s_now();
    int answered = 0;
    while (!answered && s_now() - t0 < 30) {
        sw_wire_msg_t m = {0};
        if (sw_peer_recv(evil, &m, 500) != 0)
            continue;
        if (m.env->pb.body_case == SHARDWIRE__ENVELOPE__BODY_GENERATE) {
            Shardwire__TokenChunk c = SHARDWIRE__TOKEN_CHUNK__INIT;
            const char *txt = "hello \x1b[31mred\x1b[0m \xc2\x9b"
                              "31m world\x07\n\xc2";
            c.request_id = m.env->pb.generate->request_id;
            c.text.data = (uint8_t *)txt;
            c.text.len = strlen(txt);
            Shardwire__Envelope env = SHARDWIRE__ENVELOPE__INIT;
            env.body_case = SHARDWIRE__ENVELOPE__BODY_TOKEN_CHUNK;
            env.token_chunk = &c;
            SW_CHECK_INT(sw_peer_send(evil, m.peer, sw_envelope_of(&env), NULL, 0, 0), 0);
            c.text.data = (uint8_t *)"\x9b"
                                     "2J tail";
            c.text.len = 8;
            SW_CHECK_INT(sw_peer_send(evil, m.peer, sw_envelope_of(&env), NULL, 0, 0), 0);
            Shardwire__Error er = SHARDWIRE__ERROR__INIT;
            er.code = SHARDWIRE__ERROR_CODE__ERR_INTERNAL;
            er.message = "\x1b]0;pwned\x07 the head \x1b[5mfailed";
            er.request_id = m.env->pb.generate->request_id;
            env.body_case = SHARDWIRE__ENVELOPE__BODY_ERROR;
            env.error = &er;
            SW_CHECK_INT(sw_peer_send(evil, m.peer, sw_envelope_of(&env), NULL, 0, 0), 0);
            answered = 1;
        }
        sw_wire_msg_clear(&m);
    }
    SW_CHECK(answered);
    int rc = s_wait_rc(run);
    size_t lo = 0, le = 0;
    char *out = sw_test_read_file(s_path("run2", ".out"), &lo);
    char *err = sw_test_read_file(s_path("run2", ".err"), &le);
    SW_CHECK(rc != 0); /* the head said it failed */
    SW_CHECK(out && strstr(out, "hello [31mred[0m 31m world\n") && strstr(out, "2J tail"));
    SW_CHECK(err && strstr(err, "]0;pwned the head [5mfailed"));
    for (size_t i = 0; out && i < lo; i++)
        SW_CHECK(out[i] != 0x1b && out[i] != 0x07 && (unsigned char)out[i] != 0xc2);
    for (size_t i = 0; err && i < le; i++)
        SW_CHECK(err[i] != 0x1b && err[i] != 0x07);
    printf("escapes: run printed \"%s\"\n", out ? out : "");
    free(out);
    free(err);
}

int main(void)
{
    const char *model = sw_test_model();
    char e[256];
    if (sw_keys_curve_check(e, sizeof e) != 0)
        sw_test_skip(e);
    signal(SIGPIPE, SIG_IGN);
    snprintf(s_dir, sizeof s_dir, "%s", sw_test_tmpdir());
    snprintf(s_ep, sizeof s_ep, "tcp://127.0.0.1:%d", sw_test_free_port());
    const char *nodes[] = {"head", "tail", "evilhead", NULL};
    const char *clients[] = {"client", "mallory", NULL};
    SW_CHECK_INT(sw_test_keys(s_dir, nodes, clients), 0);

    char n_gen[16];
    snprintf(n_gen, sizeof n_gen, "%d", N_GEN);
    int32_t ref[N_GEN + 8];
    char *ga[] = {(char *)sw_test_bin("shardwire"),
                  "generate",
                  "--greedy",
                  "--model",
                  (char *)model,
                  "-p",
                  "List three colors of the rainbow:\n1.",
                  "-n",
                  n_gen,
                  "--threads",
                  "1",
                  "--json",
                  NULL};
    char *out = NULL;
    SW_CHECK_INT(sw_test_run(ga, 120, &out, NULL), 0);
    int n_ref = s_ids(out, ref, N_GEN + 8);
    free(out);
    SW_CHECK(n_ref > 0);

    const char *log = sw_test_log("cluster.log");
    pid_t relay = sw_test_relay(s_ep, s_dir, log, NULL);
    pid_t head = sw_test_node(s_ep, s_dir, "head", "0:15", log, NULL);
    pid_t tail = sw_test_node(s_ep, s_dir, "tail", "15:30", log, NULL);
    sw_test_client_env(s_dir, "client");
    SW_CHECK_INT(sw_test_wait_peers(s_ep, 2, 60), 0);
    char *sa[] = {(char *)sw_test_bin("shardwire"), "status", "--relay", s_ep, "--json", NULL};
    out = NULL;
    if (sw_test_run(sa, 20, &out, NULL) == 0 && out) {
        const char *m = strstr(out, "\"model\":\"");
        while (m && m[9] == '"')
            m = strstr(m + 9, "\"model\":\"");
        if (m)
            snprintf(s_fp, sizeof s_fp, "%.64s", m + 9);
    }
    free(out);
    SW_CHECK_INT(strlen(s_fp), 64);

    sw_peer_t *evil = s_peer("evilhead", 15);
    SW_CHECK(evil != NULL);
    if (evil) {
        s_forged_errors(ref, n_ref, log, evil);
        s_escapes(evil);
    }
    sw_peer_destroy(&evil);

    sw_test_kill(head);
    sw_test_kill(tail);
    sw_test_kill(relay);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", s_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", s_dir);
    return sw_test_done();
}
