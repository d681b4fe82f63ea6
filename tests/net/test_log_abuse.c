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
 *    lines for the window (SW_REFUSED_LOG_ALL) and then one summary line
 *    naming mallory's key and how many were left out (before: one line per
 *    refusal, thousands); mallory gets at most SW_HEAD_ANSWERS_S Errors a
 *    second back;
 *  - flood through the queue (6): one request of hers running, mallory queues
 *    requests and cancels them at once for 3 s. The head's log holds at most
 *    10 "waits" and "cancelled ... while waiting" lines (the gate's 5 in each
 *    of at most two windows; before: one "waits" line per request);
 *    Then requests of a 1 ms deadline, which expire in the queue: at most 10
 *    lines and SW_HEAD_ANSWERS_S Errors a second (before: a WARN line and an
 *    Error each);
 *  - Resumes under two names of one key (6): her request runs while mallory and a
 *    second connection of her key take turns sending Resumes for it for 2 s, each
 *    moving the stream to its name. At most 10 "is now" lines (before: one a Resume);
 *  - flood once a slot is taken (6 and 2): with her requests ended, mallory
 *    sends for 3 s requests the head refuses only after it gave them a
 *    session slot (the draft model this head lacks; a resume token past the
 *    vocabulary). The head's log holds at most 10 lines naming them (the
 *    gate's 5 in each of at most two windows) and mallory at most
 *    SW_HEAD_ANSWERS_S Errors a second, each BAD_REQUEST with the refusal's
 *    own text (before: one WARN line and one Error per request);
 *  - flood with no route (6 and 2): with the tail gone, mallory sends for 3 s
 *    requests that take a slot, wait for the next peer table and are refused
 *    then (a gap in the pipeline), before any round. The head's log holds at
 *    most 6 lines naming them in each 10 s window (the gate's 5 and a
 *    summary), besides the line saying a request got a place in the queue,
 *    and mallory at most SW_HEAD_ANSWERS_S Errors a second (before: a start
 *    line, a WARN line and an Error per request, one each peer table).
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

/* What s_drain counts: the Errors from the head for request ids beginning with prefix (NULL:
 * all), and of those the ones with code and one of the texts (a refusal the part asks for). */
typedef struct {
    const char *prefix;   // NULL: every Error counts, none is looked into
    sw_error_code_t code; // the refusal's code
    const char *text[2];  // ... and its text holds one of these (NULL: unused)
    long errors;          // Errors counted
    long refusals;        // ... of them with code and text
} s_tally_t;

/* Errors mallory receives within ms, counted into t. */
static void s_drain(sw_peer_t *m, int ms, s_tally_t *t)
{
    const double until = swa_now() + ms / 1e3;
    do {
        sw_wire_msg_t w = {0};
        if (sw_peer_recv(m, &w, 0) != 0)
            break;
        sw_msg_t d;
        const int error = sw_wire_msg_type(&w) == SW_MSG_ERROR && !strcmp(w.peer, "head");
        if (error && !t->prefix) {
            t->errors++;
        } else if (error && sw_codec_decode(&w, SW_MSG_ERROR, &d, NULL, 0) == 0 &&
                   !strncmp(d.error.request_id, t->prefix, strlen(t->prefix))) {
            t->errors++;
            t->refusals +=
                d.error.code == t->code && ((t->text[0] && strstr(d.error.message, t->text[0])) ||
                                            (t->text[1] && strstr(d.error.message, t->text[1])));
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
static void s_drain_wait(sw_peer_t *m, int ms, s_tally_t *t)
{
    const double until = swa_now() + ms / 1e3;
    do {
        s_drain(m, 0, t);
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

/* 6 through the queue: with one request of hers running (her hard cap is 1), mallory queues a
 * request and cancels it, again and again for 3 s (paced within the relay's rate, so that
 * every Cancel arrives). The head's log holds at most the gate's
 * lines for her key in each window (SW_REFUSED_LOG_KEY, at most two windows) of "waits" and
 * "cancelled ... while waiting" (before: two INFO lines per cycle, ungated). */
/* 6, Resumes under two names of her key: her request runs while mallory and a second
 * connection of her key ("mallory-2") take turns sending Resumes for it for 2 s, so that
 * each moves the stream to the other name. The head's log holds at most 10 lines saying
 * the client "is now" the other name (the gate's 5 in each of at most two windows;
 * before: one line per Resume). */
static void s_flood_resume_rename(sw_peer_t *m, const char *hlog)
{
    sw_peer_t *m2 = swa_client_named(&s_a, "mallory", "mallory-2");
    SW_CHECK(m2 != NULL);
    if (!m2)
        return;
    SW_CHECK_INT(s_generate(m, "mal-r", 1000), 0);
    SW_CHECK(sw_test_wait_text(hlog, "'mal-r' from mallory", 30));
    s_tally_t t = {0};
    long sent = 0;
    const double t0 = swa_now();
    while (swa_now() - t0 < 2) {
        const sw_msg_t r = {.type = SW_MSG_RESUME, .resume = {.request_id = "mal-r"}};
        sent += sw_peer_try_send_msg(sent % 2 ? m : m2, "head", &r) == 0;
        s_drain(m, 0, &t);
        s_drain(m2, 0, &t);
        usleep(2000);
    }
    const sw_msg_t c = {.type = SW_MSG_CANCEL, .cancel = {.request_id = "mal-r", .reason = "done"}};
    SW_CHECK_INT(sw_peer_send_msg(m, "head", &c), 0);
    SW_CHECK(sw_test_wait_text(hlog, "'mal-r' from mallory", 30));
    for (double until = swa_now() + 20;
         swa_now() < until && !sw_test_count_lines(hlog, "'mal-r'", "cancelled by");)
        usleep(50000);
    s_drain(m2, 200, &t);
    sw_peer_destroy(&m2);
    const int lines = sw_test_count_lines(hlog, "'mal-r'", "(same key)");
    printf("Resumes under two names of one key: %ld sent in 2 s, %d \"is now\" log lines\n", sent,
           lines);
    SW_CHECK(sent > 100);
    SW_CHECK(lines >= 1 && lines <= 10);
    /* the next part's refusal lines get a window of their own (these spent this one's) */
    usleep((SW_REFUSED_LOG_MS + 500) * 1000);
}

static void s_flood_wait_cancel(sw_peer_t *m, const char *hlog)
{
    SW_CHECK_INT(s_generate(m, "wq-run", 400), 0);
    SW_CHECK(sw_test_wait_text(hlog, "'wq-run' from mallory", 30));
    const int w0 = sw_test_count_lines(hlog, "waits (position", "mallory");
    const int c0 = sw_test_count_lines(hlog, "while waiting", "mallory");
    long cycles = 0;
    s_tally_t t = {0};
    const double t0 = swa_now();
    while (swa_now() - t0 < 3) {
        char r[32];
        snprintf(r, sizeof r, "wq-%ld", cycles);
        if (s_generate(m, r, 4) != 0)
            continue;
        const sw_msg_t cc = {.type = SW_MSG_CANCEL, .cancel = {.request_id = r, .reason = "x"}};
        cycles += sw_peer_try_send_msg(m, "head", &cc) == 0;
        if (cycles % 32 == 0)
            s_drain(m, 0, &t);
        usleep(2000); /* within the relay's --rate: no Cancel dropped, no request left waiting */
    }
    s_drain_wait(m, 2000, &t); /* the head reads the rest */
    const int waits = sw_test_count_lines(hlog, "waits (position", "mallory") - w0;
    const int cancels = sw_test_count_lines(hlog, "while waiting", "mallory") - c0;
    printf("queue-and-cancel flood: %ld cycles in 3 s: %d 'waits' and %d 'cancelled while "
           "waiting' lines in the head's log\n",
           cycles, waits, cancels);
    SW_CHECK(cycles > 200);
    SW_CHECK(waits >= 1 && waits + cancels <= 10); /* SW_REFUSED_LOG_KEY in two windows */
    /* the same with requests of a 1 ms deadline, which expire in the queue: their refusals
     * go through the refusals' gate and the answer budget (before: an ungated WARN line and an
     * Error each). Those that find a slot free start and end at their deadline
     * (ERR_DEADLINE): an answer to a request taken, not a refusal, so not in the budget (a
     * fast head takes tens a second; the CI failure of 2026-12-07 counted them) */
    const int e0 = sw_test_count_lines(hlog, "until its deadline", "mallory");
    s_tally_t te = {.prefix = "wx-",
                    .code = SW_ERROR_BUSY,
                    .text = {"until its deadline", "--max-queue-per-client"}};
    long expired = 0;
    const double t1 = swa_now();
    while (swa_now() - t1 < 3) {
        char r[32];
        snprintf(r, sizeof r, "wx-%ld", expired);
        sw_msg_t g = {.type = SW_MSG_GENERATE};
        g.generate.request_id = r;
        g.generate.prompt = "1, 2, 3,";
        g.generate.n_predict = 4;
        g.generate.timeout_ms = 1;
        expired += sw_peer_try_send_msg(m, "head", &g) == 0;
        s_drain(m, 1, &te); /* all that came (the last part's final chunks too) */
        usleep(1000);
    }
    for (const double until = swa_now() + 2; swa_now() < until; usleep(20000))
        s_drain(m, 1, &te);
    const int elines = sw_test_count_lines(hlog, "until its deadline", "mallory") - e0;
    printf("queue deadline flood: %ld requests of a 1 ms deadline in 3 s: %d log lines, %ld "
           "Errors back, %ld of them refusals\n",
           expired, elines, te.errors, te.refusals);
    SW_CHECK(expired > 200);
    SW_CHECK(elines <= 10); /* SW_REFUSED_LOG_KEY in each of two windows */
    SW_CHECK(te.errors >= 1 && te.errors <= expired);
    SW_CHECK(te.refusals <= SW_HEAD_ANSWERS_S * (swa_now() - t1 + 2));
    const sw_msg_t cc = {.type = SW_MSG_CANCEL,
                         .cancel = {.request_id = "wq-run", .reason = "done"}};
    /* again every 2 s: the relay's --rate bucket for mallory may still be empty after the
     * flood (a dropped Cancel left wq-run to run its 400 tokens out, 20 s) */
    for (double until = swa_now() + 20, again = 0;
         swa_now() < until && !sw_test_count_lines(hlog, "'wq-run'", "ended") &&
         !sw_test_count_lines(hlog, "'wq-run'", "done:");
         usleep(50000))
        if (swa_now() >= again) {
            SW_CHECK_INT(sw_peer_send_msg(m, "head", &cc), 0);
            again = swa_now() + 2;
        }
}

/* 6 and 2 once a slot is taken: 3 s of s_generate_bad, then one good request, whose start in
 * the head's log says the head has read the whole flood. */
static void s_flood_in_slot(sw_peer_t *m, const char *hlog)
{
    s_tally_t t = {.prefix = "slot-",
                   .code = SW_ERROR_BAD_REQUEST,
                   .text = {"this head has no draft model", "outside the vocabulary"}};
    /* the refusal gate's window that the floods before opened (its 5 lines for mallory's key
     * may be spent on them: CI once saw the 1 ms deadline flood's queue-quota refusals open it
     * and this flood fall wholly inside it, 0 lines) ends before this flood begins */
    usleep((SW_REFUSED_LOG_MS + 500) * 1000);
    long sent = 0;
    const double t0 = swa_now();
    while (swa_now() - t0 < 3) {
        char r[32];
        snprintf(r, sizeof r, "slot-%ld", sent);
        sent += s_generate_bad(m, r, sent) == 0;
        if (sent % 64 == 0)
            s_drain(m, 0, &t);
    }
    const double flood_s = swa_now() - t0;
    s_drain_wait(m, 1500, &t); /* the relay's --rate bucket for mallory refills */
    SW_CHECK_INT(s_generate(m, "after-flood", 1), 0);
    for (double until = swa_now() + 60;
         swa_now() < until && !sw_test_count_in_file(hlog, "'after-flood' from mallory:");)
        s_drain_wait(m, 100, &t);
    const double span_s = swa_now() - t0; /* the head sent every answer within it */
    s_drain_wait(m, 1000, &t);
    const long errors = t.errors, refusals = t.refusals;
    const int lines = sw_test_count_in_file(hlog, "'slot-");
    printf("flood once a slot is taken: %ld requests sent in %.1f s, read by the head in %.1f s: "
           "%d log lines name them; %ld Errors back (%.1f/s), %ld of them the refusal's code and "
           "text\n",
           sent, flood_s, span_s, lines, errors, errors / span_s, refusals);
    SW_CHECK(sw_test_count_in_file(hlog, "'after-flood' from mallory:") == 1);
    SW_CHECK(sent > 1000);
    SW_CHECK(lines >= 1 && lines <= 10); /* SW_REFUSED_LOG_KEY in each of two windows */
    SW_CHECK(errors >= 1 && errors <= SW_HEAD_ANSWERS_S * (span_s + 2));
    SW_CHECK_INT(refusals, errors);
}

/* Sends request prefix-N (N from *k) every 2 s until an Error for one of them with t's code
 * and text arrives, up to timeout_s: 1 when one did. */
static int s_until_refused(sw_peer_t *m, const char *prefix, long *k, s_tally_t *t, int timeout_s)
{
    const long had = t->refusals;
    for (double until = swa_now() + timeout_s; swa_now() < until && t->refusals == had;) {
        char r[32];
        snprintf(r, sizeof r, "%s%ld", prefix, (*k)++);
        SW_CHECK_INT(s_generate(m, r, 4), 0);
        s_drain_wait(m, 2000, t);
    }
    return t->refusals > had;
}

/* 6 and 2 before any round: with the tail gone (the route has a gap), every request that
 * gets a slot waits for the next peer table and is refused then, as many as slots each
 * table. 3 s of them, then requests until one is told of the gap, which says the head has
 * read the whole flood. */
static void s_flood_no_route(sw_peer_t *m, const char *hlog, pid_t *tail)
{
    sw_test_kill(*tail);
    *tail = 0;
    /* The head's route is broken once a table without the tail came (one every 2.5 s while
     * idle); a request it still routed to the tail would wait for the pipeline (recovery). */
    SW_CHECK(sw_test_wait_text(sw_test_log("relay.log"), "peer tail left", 20));
    usleep(3000000);
    long k = 0;
    s_tally_t probe = {
        .prefix = "probe-", .code = SW_ERROR_UNKNOWN_DEST, .text = {"gap in the pipeline", NULL}};
    SW_CHECK(s_until_refused(m, "probe-", &k, &probe, 30));
    s_drain_wait(m, 1500, &probe); /* the budget refills */
    s_tally_t t = {
        .prefix = "route-", .code = SW_ERROR_UNKNOWN_DEST, .text = {"gap in the pipeline", NULL}};
    const int before = sw_test_count_in_file(hlog, "'route-");
    long sent = 0;
    const double t0 = swa_now();
    while (swa_now() - t0 < 3) { /* paced below what the head reads, so that its tables do
                                    not wait behind a backlog: a refusal each round trip */
        char r[32];
        snprintf(r, sizeof r, "route-%ld", sent);
        sent += s_generate(m, r, 4) == 0;
        s_drain(m, 0, &t);
        usleep(1000);
    }
    const double flood_s = swa_now() - t0;
    s_drain_wait(m, 1500, &t);
    const long refused = t.refusals;
    k = 0;
    SW_CHECK(s_until_refused(m, "route-last-", &k, &t, 60));
    const double span_s = swa_now() - t0; /* the head sent every answer within it */
    s_drain_wait(m, 1000, &t);
    /* a request given a place in the queue says so once (not a refusal: not gated) */
    const int waits = sw_test_count_lines(hlog, "'route-", "waits (position");
    const int lines = sw_test_count_in_file(hlog, "'route-") - before - waits;
    const int failed = sw_test_count_lines(hlog, "'route-", "gap in the pipeline");
    printf("flood with no route: %ld requests sent in %.1f s, read by the head in %.1f s: %d log "
           "lines name them (%d the gap's), besides %d that they wait; %ld Errors back (%.1f/s), "
           "%ld of them the gap's (%ld before the last requests)\n",
           sent, flood_s, span_s, lines, failed, waits, t.errors, t.errors / span_s, t.refusals,
           refused);
    SW_CHECK(sent > 1000);
    /* SW_REFUSED_LOG_KEY (5) and a summary naming the last, in each 10 s window it spans */
    SW_CHECK(lines <= 6 * (int)(span_s / 10 + 2));
    SW_CHECK(t.errors >= 1 && t.errors <= SW_HEAD_ANSWERS_S * (span_s + 2));
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
    s_tally_t all = {0}; /* every Error from the head */
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

    s_flood_resume_rename(m, hlog);

    /* 6: requests running and waiting up to her queue quota, then a flood of refused ones */
    for (int i = 1; i < 4; i++) {
        snprintf(rid[i], sizeof rid[i], "mal-%d", i);
        SW_CHECK_INT(s_generate(m, rid[i], 400), 0);
    }
    SW_CHECK(sw_test_wait_text(hlog, "'mal-2' from mallory waits", 30));
    usleep(300000);
    const int before = sw_test_count_lines(hlog, "refused", "mallory");
    /* the Resume part's summary is in the log already: this part's is the next */
    const int sums0 = sw_test_count_in_file(hlog, "refusals and Resumes: ");
    long sent = 0, in0 = swa_msgs(m, "mallory", 0);
    const double t0 = swa_now();
    while (swa_now() - t0 < 3) {
        char r[32];
        snprintf(r, sizeof r, "flood-%ld", sent);
        sent += s_generate(m, r, 1) == 0;
        if (sent % 64 == 0)
            s_drain(m, 0, &all);
    }
    const double flood_s = swa_now() - t0;
    s_drain(m, 1000, &all);
    const long errors = all.errors;
    const long relayed = swa_msgs(m, "mallory", 0) - in0;
    /* counted once the head has written its summary: a slow head (a sanitizer build) may
     * still be reading the flood when the client stops sending */
    for (double until = swa_now() + 20;
         swa_now() < until && sw_test_count_in_file(hlog, "refusals and Resumes: ") <= sums0;)
        usleep(100000);
    const int lines = sw_test_count_lines(hlog, "refused", "mallory") -
                      sw_test_count_lines(hlog, "refused", "more lines for key") - before;
    const int summary = sw_test_count_in_file(hlog, "refusals and Resumes: ") - sums0;
    long held = 0; /* the refusals the summary counts: what the head got */
    char *ht = sw_test_read_file(hlog, NULL);
    const char *sm = NULL; /* this part's: the last one */
    for (const char *f = ht; f && (f = strstr(f, "refusals and Resumes: ")); f++)
        sm = f;
    if (sm)
        held = strtol(sm + strlen("refusals and Resumes: "), NULL, 10);
    free(ht);
    printf("log flood: %ld requests sent to the relay in %.1f s, %ld refused by the head "
           "besides the %d logged: %d log lines, %d summary line(s); %ld Errors back from the "
           "head (%.1f/s)\n",
           relayed, flood_s, held, lines, lines, summary, errors, errors / (flood_s + 1));
    SW_CHECK(held > 1000);
    SW_CHECK(lines >= 1 && lines <= 6); /* SW_REFUSED_LOG_KEY in a window, and mal-3's */
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
    s_flood_wait_cancel(m, hlog);
    s_flood_in_slot(m, hlog);
    s_flood_no_route(m, hlog, &tail); /* the last: the tail is gone after it */
    sw_peer_destroy(&m);
out:
    sw_test_kill(head);
    sw_test_kill(tail);
    sw_test_kill(relay);
    swa_rmdir(s_dir);
    return sw_test_done();
}
