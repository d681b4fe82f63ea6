/*
 * run.c - `shardwire run` and `shardwire status`: the client side of a
 * cluster. `run` joins the relay as a client, sends one GenerateRequest to
 * the head and streams the TokenChunks it answers with; `status` prints the
 * relay's peer table.
 *
 *   shardwire run --relay tcp://HOST:PORT -p TEXT [-n N] [--temp T --seed S --top-k K
 *                 --top-p P --min-p P --repeat-penalty R] [--chat] [--head NAME]
 *                 [--timeout-s S] [--json] SECURITY
 *   shardwire status --relay tcp://HOST:PORT [--json] SECURITY
 *
 * SECURITY is --key FILE --relay-key FILE|Z85 --cluster-key FILE (required;
 * or the SW_KEY / SW_RELAY_KEY / SW_CLUSTER_KEY environment variables), or
 * --insecure-loopback for a loopback relay without keys (keys.h).
 */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sodium.h>

#include "args.h"
#include "cmds.h"
#include "decode.h"
#include "keys.h"
#include "log.h"
#include "peer.h"

static volatile sig_atomic_t s_stop;

static void s_on_signal(int sig)
{
    (void)sig;
    s_stop = 1;
}

static const char *s_role_name(int role)
{
    switch (role) {
    case SHARDWIRE__ROLE__ROLE_HEAD:
        return "head";
    case SHARDWIRE__ROLE__ROLE_MIDDLE:
        return "middle";
    case SHARDWIRE__ROLE__ROLE_TAIL:
        return "tail";
    case SHARDWIRE__ROLE__ROLE_FULL:
        return "full";
    case SHARDWIRE__ROLE__ROLE_CLIENT:
        return "client";
    default:
        return "?";
    }
}

/* Loads the client's keys from the security flags; 0 or -1 after one line on stderr. */
static int s_load_sec(const char *cmd, const sw_sec_args_t *a, const char *relay, sw_sec_t *sec)
{
    char err[512];
    if (sw_sec_load(a, relay, sec, err, sizeof err) != 0) {
        fprintf(stderr, "shardwire %s: %s\n", cmd, err);
        return -1;
    }
    return 0;
}

/* Joins the relay as a client with a fresh random name. */
static sw_peer_t *s_join(const char *relay, const sw_sec_t *sec)
{
    char name[40];
    unsigned char rnd[6];
    randombytes_buf(rnd, sizeof rnd);
    snprintf(name, sizeof name, "client-%02x%02x%02x%02x%02x%02x", rnd[0], rnd[1], rnd[2], rnd[3],
             rnd[4], rnd[5]);
    Shardwire__PeerAnnounce an = SHARDWIRE__PEER_ANNOUNCE__INIT;
    an.name = name;
    an.role = SHARDWIRE__ROLE__ROLE_CLIENT;
    an.backend = "";
    an.model_fingerprint = "";
    sw_peer_opts_t po = {.relay = relay, .announce = &an, .connect_timeout_ms = 5000, .sec = sec};
    return sw_peer_new(&po);
}

int cmd_status(int argc, char **argv)
{
    enum { O_RELAY = 256, O_JSON };
    static const struct option longs[] = {{"relay", required_argument, 0, O_RELAY},
                                          {"json", no_argument, 0, O_JSON},
                                          SW_SEC_LONGOPTS,
                                          {0, 0, 0, 0}};
    const char *relay = NULL;
    int json = 0, c;
    sw_sec_args_t sa = {.cluster_optional = 1}; /* the relay operator has no cluster key */
    sw_sec_t sec;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", longs, NULL)) != -1) {
        int h = sw_sec_args_opt(&sa, c, optarg);
        if (h < 0)
            return 2;
        if (h)
            continue;
        if (c == O_RELAY)
            relay = optarg;
        else if (c == O_JSON)
            json = 1;
        else
            return 2;
    }
    if (!relay) {
        fprintf(stderr, "shardwire status: --relay tcp://HOST:PORT is required\n" SW_SEC_USAGE);
        return 2;
    }
    if (s_load_sec("status", &sa, relay, &sec) != 0)
        return 2;
    sw_peer_t *peer = s_join(relay, &sec);
    sw_sec_wipe(&sec);
    if (!peer) {
        fprintf(stderr, "shardwire status: cannot reach the relay at %s\n", relay);
        return 1;
    }
    sw_wire_msg_t t = {0};
    int rc = sw_peer_status(peer, &t, 5000);
    if (rc != 0) {
        fprintf(stderr, "shardwire status: the relay at %s did not answer\n", relay);
        sw_peer_destroy(&peer);
        return 1;
    }
    const Shardwire__PeerTable *pt = t.env->peer_table;
    if (json) {
        json_t *j = json_object(), *arr = json_array();
        for (size_t i = 0; i < pt->n_peers; i++) {
            const Shardwire__PeerInfo *pi = pt->peers[i];
            const Shardwire__PeerAnnounce *a = pi->announce;
            json_t *p = json_object();
            json_object_set_new(p, "name", json_string(a ? a->name : ""));
            json_object_set_new(p, "role", json_string(a ? s_role_name(a->role) : "?"));
            json_object_set_new(p, "layer_begin", json_integer(a ? a->layer_begin : 0));
            json_object_set_new(p, "layer_end", json_integer(a ? a->layer_end : 0));
            json_object_set_new(p, "n_layers", json_integer(a ? a->n_layers : 0));
            json_object_set_new(p, "model", json_string(a ? a->model_fingerprint : ""));
            json_object_set_new(p, "heartbeat_age_ms", json_integer(pi->heartbeat_age_ms));
            json_object_set_new(p, "idle_ms", json_integer(pi->idle_ms));
            json_object_set_new(p, "msgs_in", json_integer((json_int_t)pi->msgs_in));
            json_object_set_new(p, "msgs_out", json_integer((json_int_t)pi->msgs_out));
            json_array_append_new(arr, p);
        }
        json_object_set_new(j, "peers", arr);
        json_object_set_new(j, "uptime_ms", json_integer((json_int_t)pt->uptime_ms));
        json_object_set_new(j, "forwarded", json_integer((json_int_t)pt->msgs_forwarded));
        json_object_set_new(j, "dropped", json_integer((json_int_t)pt->msgs_dropped));
        char *s = json_dumps(j, JSON_COMPACT);
        if (s)
            printf("%s\n", s);
        free(s);
        json_decref(j);
    } else {
        printf("relay %s: up %.1f s, %llu forwarded, %llu dropped\n", relay, pt->uptime_ms / 1e3,
               (unsigned long long)pt->msgs_forwarded, (unsigned long long)pt->msgs_dropped);
        printf("%-24s %-7s %-12s %-14s %s\n", "NAME", "ROLE", "LAYERS", "HEARTBEAT AGE", "MODEL");
        for (size_t i = 0; i < pt->n_peers; i++) {
            const Shardwire__PeerAnnounce *a = pt->peers[i]->announce;
            if (!a)
                continue;
            char layers[32] = "-";
            if (a->role != SHARDWIRE__ROLE__ROLE_CLIENT)
                snprintf(layers, sizeof layers, "%u:%u/%u", a->layer_begin, a->layer_end,
                         a->n_layers);
            printf("%-24s %-7s %-12s %-14.1f %.12s\n", a->name, s_role_name(a->role), layers,
                   pt->peers[i]->heartbeat_age_ms / 1e3, a->model_fingerprint);
        }
    }
    sw_wire_msg_clear(&t);
    sw_peer_destroy(&peer);
    return 0;
}

/* Finds the head: the named one, or the only peer whose layers start at 0.
 * quiet = 1: no message when it is not found. */
static int s_find_head(sw_peer_t *peer, const char *want, char *out, size_t len, int quiet)
{
    sw_wire_msg_t t = {0};
    if (sw_peer_status(peer, &t, 5000) != 0) {
        if (!quiet)
            fprintf(stderr, "shardwire run: the relay did not answer a status query\n");
        return -1;
    }
    int found = 0;
    for (size_t i = 0; i < t.env->peer_table->n_peers; i++) {
        const Shardwire__PeerAnnounce *a = t.env->peer_table->peers[i]->announce;
        if (!a || (a->role != SHARDWIRE__ROLE__ROLE_HEAD && a->role != SHARDWIRE__ROLE__ROLE_FULL))
            continue;
        if (want && strcmp(want, a->name) != 0)
            continue;
        if (!found || strcmp(a->name, out) < 0)
            snprintf(out, len, "%s", a->name);
        found++;
    }
    sw_wire_msg_clear(&t);
    if (!found) {
        if (!quiet && want)
            fprintf(stderr, "shardwire run: no head node named '%s' is connected to the relay\n",
                    want);
        else if (!quiet)
            fprintf(stderr, "shardwire run: no head node (layers starting at 0) is connected to "
                            "the relay: start one with shardwire-node --layers 0:N\n");
        return -1;
    }
    return 0;
}

int cmd_run(int argc, char **argv)
{
    enum {
        O_RELAY = 256,
        O_TEMP,
        O_SEED,
        O_TOPK,
        O_TOPP,
        O_MINP,
        O_REP,
        O_CHAT,
        O_JSON,
        O_HEAD,
        O_TIMEOUT,
        O_DRAFT,
        O_DRAFTK
    };
    static const struct option longs[] = {{"relay", required_argument, 0, O_RELAY},
                                          {"prompt", required_argument, 0, 'p'},
                                          {"n-predict", required_argument, 0, 'n'},
                                          {"temp", required_argument, 0, O_TEMP},
                                          {"seed", required_argument, 0, O_SEED},
                                          {"top-k", required_argument, 0, O_TOPK},
                                          {"top-p", required_argument, 0, O_TOPP},
                                          {"min-p", required_argument, 0, O_MINP},
                                          {"repeat-penalty", required_argument, 0, O_REP},
                                          {"chat", no_argument, 0, O_CHAT},
                                          {"json", no_argument, 0, O_JSON},
                                          {"head", required_argument, 0, O_HEAD},
                                          {"timeout-s", required_argument, 0, O_TIMEOUT},
                                          {"draft", required_argument, 0, O_DRAFT},
                                          {"draft-k", required_argument, 0, O_DRAFTK},
                                          SW_SEC_LONGOPTS,
                                          {0, 0, 0, 0}};
    sw_sec_args_t sargs = {0};
    sw_sec_t sec;
    const char *relay = NULL, *prompt = NULL, *head_name = NULL, *draft = NULL;
    double n_predict = 128, temp = 0, seed = 0x5eed, top_k = 40, top_p = 0.95, min_p = 0.05,
           rep = 1.0, timeout_s = 300, draft_k = -1;
    int chat = 0, json = 0, c, rc = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, "p:n:", longs, NULL)) != -1) {
        int h = sw_sec_args_opt(&sargs, c, optarg);
        if (h < 0)
            return 2;
        if (h)
            continue;
        switch (c) {
        case O_RELAY:
            relay = optarg;
            break;
        case 'p':
            prompt = optarg;
            break;
        case 'n':
            rc = sw_arg_double("shardwire run", "-n", optarg, 1, 1 << 20, &n_predict);
            break;
        case O_TEMP:
            rc = sw_arg_double("shardwire run", "--temp", optarg, 0, 100, &temp);
            break;
        case O_SEED:
            rc = sw_arg_double("shardwire run", "--seed", optarg, 0, 1.8e19, &seed);
            break;
        case O_TOPK:
            rc = sw_arg_double("shardwire run", "--top-k", optarg, 0, 1 << 20, &top_k);
            break;
        case O_TOPP:
            rc = sw_arg_double("shardwire run", "--top-p", optarg, 0, 1, &top_p);
            break;
        case O_MINP:
            rc = sw_arg_double("shardwire run", "--min-p", optarg, 0, 1, &min_p);
            break;
        case O_REP:
            rc = sw_arg_double("shardwire run", "--repeat-penalty", optarg, 0.01, 10, &rep);
            break;
        case O_CHAT:
            chat = 1;
            break;
        case O_JSON:
            json = 1;
            break;
        case O_HEAD:
            head_name = optarg;
            break;
        case O_TIMEOUT:
            rc = sw_arg_double("shardwire run", "--timeout-s", optarg, 1, 86400, &timeout_s);
            break;
        case O_DRAFT:
            draft = optarg;
            break;
        case O_DRAFTK:
            rc = sw_arg_double("shardwire run", "--draft-k", optarg, 0, SW_MAX_DRAFT, &draft_k);
            break;
        default:
            return 2;
        }
        if (rc)
            return 2;
    }
    if (!relay || !prompt) {
        fprintf(stderr, "shardwire run: --relay and -p are required; security:\n" SW_SEC_USAGE);
        return 2;
    }
    if (draft && strcmp(draft, "model") && strcmp(draft, "ngram") && strcmp(draft, "none") &&
        strcmp(draft, "auto")) {
        fprintf(stderr, "shardwire run: --draft '%s' must be model, ngram, none or auto\n", draft);
        return 2;
    }
    if (strlen(prompt) > SW_WIRE_MAX_PROMPT_BYTES) {
        fprintf(stderr, "shardwire run: the prompt is longer than %u bytes\n",
                SW_WIRE_MAX_PROMPT_BYTES);
        return 2;
    }
    struct sigaction sa = {0};
    sa.sa_handler = s_on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    if (s_load_sec("run", &sargs, relay, &sec) != 0)
        return 2;
    sw_peer_t *peer = s_join(relay, &sec);
    sw_sec_wipe(&sec);
    if (!peer) {
        fprintf(stderr, "shardwire run: cannot reach the relay at %s\n", relay);
        return 1;
    }
    char head[SW_WIRE_NAME_MAX + 1] = "";
    int exit_code = 1;
    json_t *ids = json_array();
    char *text = NULL;
    size_t text_len = 0;
    if (s_find_head(peer, head_name, head, sizeof head, 0) != 0)
        goto out;

    char request_id[32];
    unsigned char rnd[8];
    randombytes_buf(rnd, sizeof rnd);
    snprintf(request_id, sizeof request_id, "req-%02x%02x%02x%02x%02x%02x%02x%02x", rnd[0], rnd[1],
             rnd[2], rnd[3], rnd[4], rnd[5], rnd[6], rnd[7]);
    Shardwire__SamplingParams sp = SHARDWIRE__SAMPLING_PARAMS__INIT;
    sp.temperature = (float)temp;
    sp.top_k = (uint32_t)top_k;
    sp.top_p = (float)top_p;
    sp.min_p = (float)min_p;
    sp.repeat_penalty = (float)rep;
    sp.repeat_last_n = 64;
    sp.seed = (uint64_t)seed;
    Shardwire__DraftParams dp = SHARDWIRE__DRAFT_PARAMS__INIT;
    if (draft)
        dp.mode = !strcmp(draft, "model")   ? SHARDWIRE__DRAFT_MODE__DRAFT_MODEL
                  : !strcmp(draft, "ngram") ? SHARDWIRE__DRAFT_MODE__DRAFT_NGRAM
                  : !strcmp(draft, "none")  ? SHARDWIRE__DRAFT_MODE__DRAFT_NONE
                                            : SHARDWIRE__DRAFT_MODE__DRAFT_AUTO;
    dp.n_draft = draft_k >= 0 ? (uint32_t)draft_k : 0;
    Shardwire__GenerateRequest g = SHARDWIRE__GENERATE_REQUEST__INIT;
    g.request_id = request_id;
    g.prompt = (char *)prompt;
    g.n_predict = (uint32_t)n_predict;
    g.sampling = &sp;
    g.chat = chat;
    g.draft = &dp;
    g.timeout_ms = (uint32_t)(timeout_s * 1000);
    Shardwire__Envelope env = SHARDWIRE__ENVELOPE__INIT;
    env.body_case = SHARDWIRE__ENVELOPE__BODY_GENERATE;
    env.generate = &g;
    const double t0 = sw_now_ms();
    if (sw_peer_send(peer, head, &env, NULL, 0, 0) != 0) {
        fprintf(stderr, "shardwire run: could not send the request to %s\n", head);
        goto out;
    }

    double last_msg = sw_now_ms(), first_tok = 0;
    int head_missing = 0; // consecutive quiet checks that did not find the head
    size_t n_got = 0;     // tokens received
    const double deadline = t0 + timeout_s * 1000 + 5000;
    /* No token lost: chunks carry their index; a gap, a reconnect to the
     * relay (it may have restarted with chunks in flight) or a silence makes
     * us ask the head to send again from the tokens we hold (Resume). */
    int connects = sw_peer_connects(peer), resumes = 0;
    double resume_at = 0, resumed_at = 0; // when to ask (0 = no need), when we last did
    for (;;) {
        if (sw_peer_connects(peer) != connects) {
            connects = sw_peer_connects(peer);
            resume_at = sw_now_ms();
        }
        if (resume_at && sw_now_ms() >= resume_at) {
            Shardwire__Resume rs = SHARDWIRE__RESUME__INIT;
            rs.request_id = request_id;
            rs.from_index = (uint32_t)n_got;
            Shardwire__Envelope re = SHARDWIRE__ENVELOPE__INIT;
            re.body_case = SHARDWIRE__ENVELOPE__BODY_RESUME;
            re.resume = &rs;
            resume_at = 0;
            if (sw_peer_try_send(peer, head, &re) != 0) {
                resume_at = sw_now_ms() + 500; // not connected yet: again soon
            } else {
                resumes++;
                resumed_at = sw_now_ms();
            }
        }
        if (s_stop) {
            /* Tell the head at once, so that the cluster stops working for
             * nobody; no need to wait for its confirmation. */
            Shardwire__Cancel cn = SHARDWIRE__CANCEL__INIT;
            cn.request_id = request_id;
            cn.reason = "interrupted";
            Shardwire__Envelope ce = SHARDWIRE__ENVELOPE__INIT;
            ce.body_case = SHARDWIRE__ENVELOPE__BODY_CANCEL;
            ce.cancel = &cn;
            int sent = sw_peer_send(peer, head, &ce, NULL, 0, 0) == 0;
            fprintf(stderr, "\nshardwire run: interrupted%s\n",
                    sent ? " (the request is cancelled on the cluster)" : "");
            exit_code = 130;
            goto out;
        }
        sw_wire_msg_t m = {0};
        int r = sw_peer_recv(peer, &m, 500);
        double now = sw_now_ms();
        if (r < 0) {
            fprintf(stderr, "shardwire run: lost the connection to the relay\n");
            goto out;
        }
        if (r == 1) {
            if (now > deadline) {
                fprintf(stderr, "shardwire run: no answer within %.0f s\n", timeout_s);
                goto out;
            }
            if (now - last_msg > 3000) { // quiet: is the head still there? (and a resume)
                /* Twice in a row, so that a relay restart (the head announces
                 * again within a second or so) is not taken for a dead head. */
                char again[SW_WIRE_NAME_MAX + 1];
                if (s_find_head(peer, head, again, sizeof again, 1) != 0) {
                    if (++head_missing >= 2) {
                        fprintf(stderr, "shardwire run: the head '%s' left during the request\n",
                                head);
                        goto out;
                    }
                    last_msg = now - 1500; // check again in 1.5 s
                    continue;
                }
                head_missing = 0;
                last_msg = now;
                resume_at = now; // a lost last chunk is sent again
            }
            continue;
        }
        last_msg = now;
        const Shardwire__Envelope *e = m.env;
        if (e->body_case == SHARDWIRE__ENVELOPE__BODY_ERROR) {
            const Shardwire__Error *er = e->error;
            const int code = er->code;
            if (!strcmp(m.peer, SW_WIRE_RELAY_NAME) &&
                (code == SHARDWIRE__ERROR_CODE__ERR_NOT_ANNOUNCED ||
                 ((code == SHARDWIRE__ERROR_CODE__ERR_UNKNOWN_DEST ||
                   code == SHARDWIRE__ERROR_CODE__ERR_DEST_GONE ||
                   code == SHARDWIRE__ERROR_CODE__ERR_DEST_BUSY) &&
                  er->dest && !strcmp(er->dest, head)))) {
                /* the relay (restarting?) did not deliver our message to the
                 * head: ask again in a while; the quiet check says if the
                 * head is really gone */
                resume_at = now + 1000;
                sw_wire_msg_clear(&m);
                continue;
            }
            if (er->queue_position)
                fprintf(stderr, "shardwire run: %s (%s, position %u in the head's queue)\n",
                        er->message, sw_wire_error_code_name(code), er->queue_position);
            else
                fprintf(stderr, "shardwire run: %s (%s)\n", er->message,
                        sw_wire_error_code_name(code));
            sw_wire_msg_clear(&m);
            goto out;
        }
        if (e->body_case != SHARDWIRE__ENVELOPE__BODY_TOKEN_CHUNK ||
            strcmp(e->token_chunk->request_id, request_id) != 0) {
            sw_wire_msg_clear(&m);
            continue;
        }
        const Shardwire__TokenChunk *tc = e->token_chunk;
        if (tc->index < n_got && tc->n_tokens) { /* a chunk we hold already */
            sw_wire_msg_clear(&m);
            continue;
        }
        if (tc->index > n_got) { /* a gap: ask for the rest, drop this one */
            if (!resume_at)      // once per 300 ms: chunks after the gap keep coming meanwhile
                resume_at = resumed_at + 300 > now ? resumed_at + 300 : now;
            sw_wire_msg_clear(&m);
            continue;
        }
        if (tc->n_tokens && !first_tok)
            first_tok = now;
        for (size_t i = 0; i < tc->n_tokens; i++)
            json_array_append_new(ids, json_integer(tc->tokens[i]));
        n_got += tc->n_tokens;
        if (tc->text.len) {
            char *t = realloc(text, text_len + tc->text.len + 1);
            if (!t) {
                sw_wire_msg_clear(&m);
                goto out;
            }
            text = t;
            memcpy(text + text_len, tc->text.data, tc->text.len);
            text_len += tc->text.len;
            text[text_len] = 0;
            if (!json) {
                fwrite(tc->text.data, 1, tc->text.len, stdout);
                fflush(stdout);
            }
        }
        if (!tc->done) {
            sw_wire_msg_clear(&m);
            continue;
        }
        if (tc->finish == SHARDWIRE__FINISH_REASON__FINISH_ERROR ||
            tc->finish == SHARDWIRE__FINISH_REASON__FINISH_DEADLINE ||
            tc->finish == SHARDWIRE__FINISH_REASON__FINISH_CANCELLED) {
            fprintf(stderr, "shardwire run: the request %s\n",
                    tc->finish == SHARDWIRE__FINISH_REASON__FINISH_CANCELLED ? "was cancelled"
                    : tc->finish == SHARDWIRE__FINISH_REASON__FINISH_DEADLINE
                        ? "reached its deadline"
                        : "failed");
            sw_wire_msg_clear(&m);
            goto out;
        }
        const Shardwire__GenerateStats *st = tc->stats;
        if (st && st->n_generated != n_got) {
            /* Cannot happen with chunks in index order; say so rather than
             * print a gapped text. */
            fprintf(stderr, "shardwire run: received %zu of the %u generated tokens\n", n_got,
                    st->n_generated);
            sw_wire_msg_clear(&m);
            goto out;
        }
        double total = now - t0;
        if (json) {
            json_t *j = json_object();
            json_object_set_new(j, "text", json_stringn(text ? text : "", text_len));
            json_object_set_new(j, "tokens", ids);
            ids = NULL;
            json_object_set_new(j, "n_prompt", json_integer(st ? st->n_prompt : 0));
            json_object_set_new(j, "n_gen", json_integer(st ? st->n_generated : 0));
            json_object_set_new(j, "ttft_ms", json_real(first_tok ? first_tok - t0 : 0));
            json_object_set_new(
                j, "prefill_tok_s",
                json_real(st && st->prompt_ms ? st->n_prompt * 1e3 / st->prompt_ms : 0));
            json_object_set_new(j, "decode_tok_s",
                                json_real(st && st->decode_ms > 0 && st->n_generated > 1
                                              ? (st->n_generated - 1) * 1e3 / st->decode_ms
                                              : 0));
            json_object_set_new(j, "rounds", json_integer(st ? st->n_rounds : 0));
            json_object_set_new(j, "drafted", json_integer(st ? st->n_drafted : 0));
            json_object_set_new(j, "accepted", json_integer(st ? st->n_accepted : 0));
            json_object_set_new(j, "resumes", json_integer(resumes));
            char dg[17];
            snprintf(dg, sizeof dg, "%016llx", st ? (unsigned long long)st->logits_digest : 0ull);
            json_object_set_new(j, "logits_digest", json_string(dg));
            json_t *tm = json_object();
            if (st) {
                json_object_set_new(tm, "head_ttft_ms", json_real(st->ttft_ms));
                json_object_set_new(tm, "draft_ms", json_real(st->draft_ms));
                json_object_set_new(tm, "head_compute_ms", json_real(st->head_ms));
                json_object_set_new(tm, "network_ms", json_real(st->network_ms));
                json_t *stages = json_object();
                for (size_t i = 0; i < st->n_stages; i++)
                    json_object_set_new(stages, st->stages[i]->name,
                                        json_real(st->stages[i]->compute_us / 1e3));
                json_object_set_new(tm, "stage_compute_ms", stages);
                json_object_set_new(tm, "per_round_ms",
                                    json_real(st->n_rounds ? st->decode_ms / st->n_rounds : 0));
            }
            json_object_set_new(tm, "total_ms", json_real(total));
            json_object_set_new(j, "timing", tm);
            char *s = json_dumps(j, JSON_COMPACT | JSON_ENSURE_ASCII);
            if (s)
                printf("%s\n", s);
            free(s);
            json_decref(j);
        } else {
            printf("\n");
            if (st) {
                double tps = st->decode_ms > 0 && st->n_generated > 1
                                 ? (st->n_generated - 1) * 1e3 / st->decode_ms
                                 : 0;
                fprintf(stderr, "\n%-22s %12u\n%-22s %12u\n%-22s %12u\n", "prompt tokens",
                        st->n_prompt, "generated tokens", st->n_generated, "rounds", st->n_rounds);
                fprintf(stderr, "%-22s %5u / %-5u\n", "drafts accepted", st->n_accepted,
                        st->n_drafted);
                fprintf(stderr, "%-22s %12.2f\n%-22s %8.1f tok/s\n%-22s %9.0f ms\n",
                        "tokens per round",
                        st->n_rounds ? (double)(st->n_generated - 1) / st->n_rounds : 0,
                        "decode speed", tps, "first token", first_tok ? first_tok - t0 : 0);
            }
        }
        sw_wire_msg_clear(&m);
        exit_code = 0;
        break;
    }
out:
    json_decref(ids);
    free(text);
    sw_peer_destroy(&peer);
    return exit_code;
}
