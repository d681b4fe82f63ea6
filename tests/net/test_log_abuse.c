/*
 * test_log_abuse.c - a client key cannot write the head's log (issue 35,
 * findings 6 and 7). A keyed cluster of real processes (relay, head 0:15
 * with --max-sessions 2 --max-queue-per-client 2 --max-sessions-per-client 1, tail 15:30; SmolLM2,
 * CURVE and sealing on); "mallory" (a client key and the access key) is the test's own peer:
 *
 *  - injection (7): mallory starts a request and cancels it with a reason
 *    holding a newline, a forged head log line ("spot check: node 'tail' ...
 *    convicted"), an ANSI escape and a BEL. The head's log must hold the
 *    reason on the cancel's own line, its control characters written as
 *    \xNN: no line of the log begins with the forged text, no ESC, no BEL
 *    (before: the forged line stood on its own and the escape reached the
 *    terminal);
 *  - flood (6): with two requests running and two waiting, mallory sends
 *    GenerateRequests as fast as the relay takes them for 3 s, each refused
 *    by the per-key queue quota. The head's log holds at most 20 refusal
 *    lines for the window (HEAD_REFUSED_LOG_ALL) and then one summary line
 *    naming mallory's key and how many were left out (before: one line per
 *    refusal, thousands); mallory gets at most SW_HEAD_ANSWERS_S Errors a
 *    second back;
 *  - flood once a slot is taken (6 and 2): with her requests ended, mallory
 *    sends for 3 s requests the head refuses only after it gave them a
 *    session slot (the draft model this head lacks; a resume token past the
 *    vocabulary). The head's log holds at most 10 lines naming them (the
 *    gate's 5 in each of at most two windows) and mallory at most
 *    SW_HEAD_ANSWERS_S Errors a second, each BAD_REQUEST with the refusal's
 *    own text (before: one WARN line and one Error per request).
 */
#include "sw_attack.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char s_dir[64];
static char s_ep[64];
static swa_t s_a;

#define FORGED "shardwire[head] warn: spot check: node 'tail' computed stage 1 forged: convicted"

/* Errors mallory receives within ms (counted into *errors). With refusals, only the Errors
 * for s_flood_in_slot's requests ("slot-N") count, and those that are a BAD_REQUEST with
 * the text of a refusal s_generate_bad asks for count into *refusals too. */
static void s_drain(sw_peer_t *m, int ms, long *errors, long *refusals)
{
    const double until = swa_now() + ms / 1e3;
    do {
        sw_wire_msg_t w = {0};
        if (sw_peer_recv(m, &w, 0) != 0)
            break;
        sw_msg_t d;
        const int error = sw_wire_msg_type(&w) == SW_MSG_ERROR && !strcmp(w.peer, "head");
        if (error && !refusals) {
            ++*errors;
        } else if (error && sw_codec_decode(&w, SW_MSG_ERROR, &d, NULL, 0) == 0 &&
                   !strncmp(d.error.request_id, "slot-", 5)) {
            ++*errors;
            *refusals += d.error.code == SW_ERROR_BAD_REQUEST &&
                         (strstr(d.error.message, "this head has no draft model") ||
                          strstr(d.error.message, "outside the vocabulary"));
        }
        sw_wire_msg_clear(&w);
    } while (swa_now() < until);
}

static int s_generate(sw_peer_t *m, const char *rid, int n_predict)
{
    sw_msg_t msg = {.type = SW_MSG_GENERATE};
    msg.generate.request_id = rid;
    msg.generate.prompt = "1, 2, 3, 4, 5, 6, 7, 8, 9, 10,";
    msg.generate.n_predict = (uint32_t)n_predict;
    msg.generate.has_draft = 1;
    msg.generate.draft.mode = SW_DRAFT_NONE;
    return sw_peer_try_send_msg(m, "head", &msg);
}

/* s_drain for ms, waiting for what is still to come. */
static void s_drain_wait(sw_peer_t *m, int ms, long *errors, long *refusals)
{
    const double until = swa_now() + ms / 1e3;
    do {
        s_drain(m, 0, errors, refusals);
        usleep(10000);
    } while (swa_now() < until);
}

/* A request the head refuses only once it took a session slot for it: even i asks for the
 * draft model this head lacks, odd i resumes from a token past SmolLM2's vocabulary. */
static int s_generate_bad(sw_peer_t *m, const char *rid, long i)
{
    static const uint32_t resume[1] = {1u << 21};
    sw_msg_t msg = {.type = SW_MSG_GENERATE};
    msg.generate.request_id = rid;
    msg.generate.prompt = "1, 2, 3,";
    msg.generate.n_predict = 4;
    msg.generate.has_draft = 1;
    msg.generate.draft.mode = i % 2 ? SW_DRAFT_NONE : SW_DRAFT_MODEL;
    if (i % 2) {
        msg.generate.n_resume_tokens = 1;
        msg.generate.resume_tokens = resume;
    }
    return sw_peer_try_send_msg(m, "head", &msg);
}

/* 6 and 2 once a slot is taken: 3 s of s_generate_bad, then one good request, whose start in
 * the head's log says the head has read the whole flood. */
static void s_flood_in_slot(sw_peer_t *m, const char *hlog)
{
    long sent = 0, errors = 0, refusals = 0;
    const double t0 = swa_now();
    while (swa_now() - t0 < 3) {
        char r[32];
        snprintf(r, sizeof r, "slot-%ld", sent);
        sent += s_generate_bad(m, r, sent) == 0;
        if (sent % 64 == 0)
            s_drain(m, 0, &errors, &refusals);
    }
    const double flood_s = swa_now() - t0;
    s_drain_wait(m, 1500, &errors, &refusals); /* the relay's --rate bucket for mallory refills */
    SW_CHECK_INT(s_generate(m, "after-flood", 1), 0);
    for (double until = swa_now() + 60;
         swa_now() < until && !sw_test_count_in_file(hlog, "'after-flood' from mallory:");)
        s_drain_wait(m, 100, &errors, &refusals);
    const double span_s = swa_now() - t0; /* the head sent every answer within it */
    s_drain_wait(m, 1000, &errors, &refusals);
    const int lines = sw_test_count_in_file(hlog, "'slot-");
    printf("flood once a slot is taken: %ld requests sent in %.1f s, read by the head in %.1f s: "
           "%d log lines name them; %ld Errors back (%.1f/s), %ld of them the refusal's code and "
           "text\n",
           sent, flood_s, span_s, lines, errors, errors / span_s, refusals);
    SW_CHECK(sw_test_count_in_file(hlog, "'after-flood' from mallory:") == 1);
    SW_CHECK(sent > 1000);
    SW_CHECK(lines >= 1 && lines <= 10); /* HEAD_REFUSED_LOG_KEY in each of two windows */
    SW_CHECK(errors >= 1 && errors <= SW_HEAD_ANSWERS_S * (span_s + 2));
    SW_CHECK_INT(refusals, errors);
}

int main(void)
{
    sw_test_model();
    signal(SIGPIPE, SIG_IGN);
    const char *nodes[] = {"head", "tail", NULL}, *clients[] = {"mallory", NULL};
    pid_t relay = swa_relay(&s_a, s_dir, s_ep, nodes, clients, NULL);
    SW_CHECK(relay > 0);
    if (relay <= 0)
        return sw_test_done();
    const char *hlog = sw_test_log("head.log");
    /* an explicit per-client cap is a hard one (node --help): mallory's second request waits even
     * while no other key does, so her queue fills */
    static const char *const head_flags[] = {"--max-sessions",
                                             "2",
                                             "--max-queue-per-client",
                                             "2",
                                             "--max-sessions-per-client",
                                             "1",
                                             NULL};
    pid_t head = sw_test_node(s_ep, s_dir, "head", "0:15", hlog, head_flags);
    pid_t tail = sw_test_node(s_ep, s_dir, "tail", "15:30", sw_test_log("tail.log"), NULL);
    sw_test_client_env(s_dir, "mallory");
    SW_CHECK_INT(sw_test_wait_peers(s_ep, 2, 60), 0);
    sw_peer_t *m = swa_client(&s_a, "mallory");
    SW_CHECK(m != NULL);
    if (!m)
        goto out;

    /* 7: the injection, through a Cancel of a request that runs */
    long errors = 0;
    char rid[4][16];
    snprintf(rid[0], sizeof rid[0], "mal-0");
    SW_CHECK_INT(s_generate(m, rid[0], 400), 0);
    SW_CHECK(sw_test_wait_text(hlog, "'mal-0' from mallory", 30));
    const sw_msg_t c = {
        .type = SW_MSG_CANCEL,
        .cancel = {.request_id = rid[0], .reason = "bye\n" FORGED "\x1b[2J\x1b]0;owned\x07\r\n"}};
    SW_CHECK_INT(sw_peer_send_msg(m, "head", &c), 0);
    SW_CHECK(sw_test_wait_text(hlog, "'mal-0' from mallory ended", 20));
    size_t len = 0;
    char *text = sw_test_read_file(hlog, &len);
    int forged_lines = 0, ctl = 0;
    for (size_t i = 0; text && i < len; i++) {
        ctl += text[i] == 0x1b || text[i] == 0x07 || text[i] == '\r';
        forged_lines +=
            (i == 0 || text[i - 1] == '\n') && !strncmp(text + i, FORGED, strlen(FORGED));
    }
    free(text);
    const int escaped = sw_test_count_in_file(hlog, "bye\\x0a" FORGED "\\x1b[2J");
    printf("log injection: %d forged lines, %d control characters in the head's log, the "
           "reason escaped on its own line %d time(s)\n",
           forged_lines, ctl, escaped);
    SW_CHECK_INT(forged_lines, 0);
    SW_CHECK_INT(ctl, 0);
    SW_CHECK_INT(escaped, 1);

    /* 6: requests running and waiting up to her queue quota, then a flood of refused ones */
    for (int i = 1; i < 4; i++) {
        snprintf(rid[i], sizeof rid[i], "mal-%d", i);
        SW_CHECK_INT(s_generate(m, rid[i], 400), 0);
    }
    SW_CHECK(sw_test_wait_text(hlog, "'mal-2' from mallory waits", 30));
    usleep(300000);
    const int before = sw_test_count_lines(hlog, "refused", "mallory");
    long sent = 0, in0 = swa_msgs(m, "mallory", 0);
    const double t0 = swa_now();
    while (swa_now() - t0 < 3) {
        char r[32];
        snprintf(r, sizeof r, "flood-%ld", sent);
        sent += s_generate(m, r, 1) == 0;
        if (sent % 64 == 0)
            s_drain(m, 0, &errors, NULL);
    }
    const double flood_s = swa_now() - t0;
    s_drain(m, 1000, &errors, NULL);
    const long relayed = swa_msgs(m, "mallory", 0) - in0;
    /* counted once the head has written its summary: a slow head (a sanitizer build) may
     * still be reading the flood when the client stops sending */
    SW_CHECK(sw_test_wait_text(hlog, "more lines for key", 20));
    const int lines = sw_test_count_lines(hlog, "refused", "mallory") -
                      sw_test_count_lines(hlog, "refused", "more lines for key") - before;
    const int summary = sw_test_count_in_file(hlog, "more lines for key");
    long held = 0; /* the refusals the summary counts: what the head got */
    char *ht = sw_test_read_file(hlog, NULL);
    const char *sm = ht ? strstr(ht, "refusals and Resumes: ") : NULL;
    if (sm)
        held = strtol(sm + strlen("refusals and Resumes: "), NULL, 10);
    free(ht);
    printf("log flood: %ld requests sent to the relay in %.1f s, %ld refused by the head "
           "besides the %d logged: %d log lines, %d summary line(s); %ld Errors back from the "
           "head (%.1f/s)\n",
           relayed, flood_s, held, lines, lines, summary, errors, errors / (flood_s + 1));
    SW_CHECK(held > 1000);
    SW_CHECK(lines >= 1 && lines <= 6); /* HEAD_REFUSED_LOG_KEY in a window, and mal-3's */
    SW_CHECK(summary >= 1);
    SW_CHECK(errors <= SW_HEAD_ANSWERS_S * (flood_s + 2));

    for (int i = 1; i < 4; i++) {
        const sw_msg_t cc = {.type = SW_MSG_CANCEL,
                             .cancel = {.request_id = rid[i], .reason = "done"}};
        SW_CHECK_INT(sw_peer_send_msg(m, "head", &cc), 0);
    }
    for (int i = 1; i < 4; i++) /* ended running ("from mallory ended") or while waiting */
        for (double until = swa_now() + 20;
             swa_now() < until && !sw_test_count_lines(hlog, rid[i], "cancelled by");)
            usleep(50000);
    s_flood_in_slot(m, hlog);
    sw_peer_destroy(&m);
out:
    sw_test_kill(head);
    sw_test_kill(tail);
    sw_test_kill(relay);
    swa_rmdir(s_dir);
    return sw_test_done();
}
