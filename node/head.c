/*
 * head.c - the head node's side of a generation: it owns the session,
 * tokenizes the request, builds the route of stages from the relay's peer
 * table, and drives sw_generate() with a pipeline target whose round runs
 * this stage's layers and sends ONE Forward down the route; the last stage
 * answers with a Verdict. Text streams back to the client as TokenChunks.
 *
 * The only message in the decode loop is that Forward (and its Verdict).
 * The relay is asked for its peer table once per request (to build the
 * route) and, while a Verdict is late, once a second to notice a stage that
 * left - never on a round that goes well.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "chat.h"
#include "drafter.h"
#include "log.h"
#include "node.h"
#include "recover.h"

#define S_MAX_QUEUE 64

struct node_head {
    sw_tokenizer_t *tok;              // from the model's GGUF
    sw_wire_msg_t queue[S_MAX_QUEUE]; // requests waiting their turn
    int q_head, q_len;                // ring buffer
    sw_kv_t *kv;                      // this stage's cache for the running session
    draft_model_t *dmodel;            // --draft-model, or NULL
    draft_t *drafter;                 // the proposer of the running generation
    char running_rid[64];             // request_id of the running generation ("" = none)
    char running_client[64];          // who sent it
    int cancel_running;               // 1 once a Cancel for it arrived
};

/* ---- request queue --------------------------------------------------------------------- */

int node_head_new(node_t *n, char *err, size_t err_len)
{
    node_head_t *h = calloc(1, sizeof *h);
    if (!h) {
        snprintf(err, err_len, "out of memory");
        return -1;
    }
    h->tok = sw_tokenizer_from_gguf(sw_model_gguf(n->model), err, err_len);
    h->kv = h->tok ? sw_kv_new(n->model, n->o.n_ctx) : NULL;
    if (!h->tok || !h->kv) {
        if (h->tok)
            snprintf(err, err_len, "out of memory for a %d-position cache", n->o.n_ctx);
        sw_tokenizer_free(&h->tok);
        free(h);
        return -1;
    }
    if (n->o.draft_model) {
        const char *dbe =
            n->o.draft_backend ? n->o.draft_backend : sw_backend_name(sw_backend_primary(n->be));
        h->dmodel = draft_model_new(n->o.draft_model, sw_model_gguf(n->model), dbe,
                                    n->o.draft_threads ? n->o.draft_threads : n->o.threads,
                                    n->o.n_ctx, err, err_len);
        if (!h->dmodel)
            goto fail;
        SW_INFO("draft model %s loaded on %s (vocabulary checked)", n->o.draft_model,
                draft_model_backend(h->dmodel));
    }
    h->drafter = draft_new(h->dmodel);
    if (!h->drafter) {
        snprintf(err, err_len, "out of memory");
        goto fail;
    }
    n->head = h;
    return 0;
fail:
    draft_model_free(&h->dmodel);
    sw_kv_free(&h->kv);
    sw_tokenizer_free(&h->tok);
    free(h);
    return -1;
}

void node_head_free(node_t *n)
{
    node_head_t *h = n->head;
    if (!h)
        return;
    for (int i = 0; i < h->q_len; i++)
        sw_wire_msg_clear(&h->queue[(h->q_head + i) % S_MAX_QUEUE]);
    sw_kv_free(&h->kv);
    draft_free(&h->drafter);
    draft_model_free(&h->dmodel);
    sw_tokenizer_free(&h->tok);
    free(h);
    n->head = NULL;
}

static void s_send_error(node_t *n, const char *dest, int code, const char *request_id,
                         uint64_t session, const char *text)
{
    Shardwire__Error er = SHARDWIRE__ERROR__INIT;
    er.code = code;
    er.message = (char *)text;
    er.session_id = session;
    er.request_id = (char *)(request_id ? request_id : "");
    Shardwire__Envelope env = SHARDWIRE__ENVELOPE__INIT;
    env.body_case = SHARDWIRE__ENVELOPE__BODY_ERROR;
    env.error = &er;
    if (sw_peer_send(n->peer, dest, &env, NULL, 0, 0) != 0)
        SW_WARN("could not send an error to %s", dest);
}

void node_head_request(node_t *n, sw_wire_msg_t *msg)
{
    node_head_t *h = n->head;
    if (!h) {
        s_send_error(n, msg->peer, SHARDWIRE__ERROR_CODE__ERR_BAD_REQUEST,
                     msg->env->generate->request_id, 0,
                     "this node is not a head (its layers do not start at 0)");
        return;
    }
    if (h->q_len == S_MAX_QUEUE) {
        s_send_error(n, msg->peer, SHARDWIRE__ERROR_CODE__ERR_DEST_BUSY,
                     msg->env->generate->request_id, 0,
                     "the head has too many queued requests: retry later");
        return;
    }
    sw_wire_msg_t *slot = &h->queue[(h->q_head + h->q_len) % S_MAX_QUEUE];
    memset(slot, 0, sizeof *slot);
    sw_wire_msg_move(slot, msg);
    h->q_len++;
}

static void s_chunk_cancelled(node_t *n, const char *client, const char *request_id)
{
    Shardwire__TokenChunk c = SHARDWIRE__TOKEN_CHUNK__INIT;
    c.request_id = (char *)request_id;
    c.done = 1;
    c.finish = SHARDWIRE__FINISH_REASON__FINISH_CANCELLED;
    Shardwire__Envelope env = SHARDWIRE__ENVELOPE__INIT;
    env.body_case = SHARDWIRE__ENVELOPE__BODY_TOKEN_CHUNK;
    env.token_chunk = &c;
    if (sw_peer_send(n->peer, client, &env, NULL, 0, 0) != 0)
        SW_DEBUG("could not confirm the cancel to %s", client);
}

void node_head_cancel(node_t *n, sw_wire_msg_t *msg)
{
    node_head_t *h = n->head;
    const Shardwire__Cancel *c = msg->env->cancel;
    if (!h)
        return;
    if (!strcmp(h->running_rid, c->request_id) && !strcmp(h->running_client, msg->peer)) {
        SW_INFO("request '%s': cancelled by %s (%s)", c->request_id, msg->peer,
                c->reason && c->reason[0] ? c->reason : "no reason given");
        h->cancel_running = 1;
        return;
    }
    for (int i = 0; i < h->q_len; i++) {
        sw_wire_msg_t *q = &h->queue[(h->q_head + i) % S_MAX_QUEUE];
        if (strcmp(q->peer, msg->peer) != 0 || strcmp(q->env->generate->request_id, c->request_id))
            continue;
        SW_INFO("request '%s': cancelled by %s while queued", c->request_id, msg->peer);
        sw_wire_msg_clear(q);
        for (int j = i; j + 1 < h->q_len; j++)
            sw_wire_msg_move(&h->queue[(h->q_head + j) % S_MAX_QUEUE],
                             &h->queue[(h->q_head + j + 1) % S_MAX_QUEUE]);
        h->q_len--;
        s_chunk_cancelled(n, msg->peer, c->request_id);
        return;
    }
}

/* ---- route -------------------------------------------------------------------------------- */

typedef struct s_route {
    int n; // stages, head included
    char names[SW_WIRE_MAX_ROUTE][SW_WIRE_NAME_MAX + 1];
    char *ptrs[SW_WIRE_MAX_ROUTE]; // names[i], for protobuf
} s_route_t;

/* Builds head -> ... -> tail from the relay's peer table: from the end of
 * this stage's range, the next stage is the peer whose range begins there.
 * Refuses gaps, overlaps and other models with a message naming the peer. */
static int s_build_route(node_t *n, s_route_t *r, node_recover_t *rec, char *err, size_t err_len)
{
    memset(r, 0, sizeof *r);
    snprintf(r->names[0], sizeof r->names[0], "%s", sw_peer_name(n->peer));
    r->n = 1;
    const uint32_t L = (uint32_t)n->hp->n_layer;
    uint32_t at = (uint32_t)sw_model_layer_end(n->model);
    if (at == L)
        goto done;
    sw_wire_msg_t t = {0};
    int rc = sw_peer_status(n->peer, &t, 5000);
    if (rc != 0) {
        snprintf(err, err_len, "the relay did not answer a status query%s",
                 rc == 1 ? " within 5 s" : "");
        return -1;
    }
    const Shardwire__PeerTable *pt = t.env->peer_table;
    while (at < L) {
        const Shardwire__PeerAnnounce *pick = NULL;
        for (size_t i = 0; i < pt->n_peers; i++) {
            const Shardwire__PeerAnnounce *a = pt->peers[i]->announce;
            if (!a ||
                (a->role != SHARDWIRE__ROLE__ROLE_MIDDLE && a->role != SHARDWIRE__ROLE__ROLE_TAIL))
                continue;
            if (a->layer_begin == at) {
                if (strcmp(a->model_fingerprint, n->fingerprint) != 0 || a->n_layers != L) {
                    snprintf(err, err_len,
                             "peer '%s' serves layers [%u, %u) of a different model file "
                             "(fingerprint %.12s..., this head has %.12s...): start it with "
                             "the same GGUF",
                             a->name, a->layer_begin, a->layer_end, a->model_fingerprint,
                             n->fingerprint);
                    goto fail;
                }
                if (!pick || strcmp(a->name, pick->name) < 0)
                    pick = a;
            }
        }
        if (!pick) {
            for (size_t i = 0; i < pt->n_peers; i++) {
                const Shardwire__PeerAnnounce *a = pt->peers[i]->announce;
                if (a && a->n_layers == L && a->layer_begin < at && a->layer_end > at &&
                    (a->role == SHARDWIRE__ROLE__ROLE_MIDDLE ||
                     a->role == SHARDWIRE__ROLE__ROLE_TAIL)) {
                    snprintf(err, err_len,
                             "layer ranges overlap: peer '%s' serves [%u, %u) but the stage "
                             "before it ends at layer %u: restart it with --layers %u:%u",
                             a->name, a->layer_begin, a->layer_end, at, at, a->layer_end);
                    goto fail;
                }
            }
            snprintf(err, err_len,
                     "gap in the pipeline: no connected node serves layer %u (of %u); start "
                     "one with --layers %u:END",
                     at, L, at);
            goto fail;
        }
        if (r->n == SW_WIRE_MAX_ROUTE) {
            snprintf(err, err_len, "the pipeline has more than %d stages", SW_WIRE_MAX_ROUTE);
            goto fail;
        }
        snprintf(r->names[r->n++], sizeof r->names[0], "%s", pick->name);
        at = pick->layer_end;
    }
    if (rec)
        node_recover_route_baseline(rec, pt, r->names, r->n);
    sw_wire_msg_clear(&t);
done:
    for (int i = 0; i < r->n; i++)
        r->ptrs[i] = r->names[i];
    return 0;
fail:
    sw_wire_msg_clear(&t);
    return -1;
}

/* 1 when every stage of the route is still in the relay's table on the
 * connection the route was built with (recover.h); else 0 and why. */
static int s_route_alive(node_t *n, s_route_t *r, const node_recover_t *rec, char *why, size_t len)
{
    sw_wire_msg_t t = {0};
    if (sw_peer_status(n->peer, &t, 2000) != 0) {
        snprintf(why, len, "the relay did not answer a status query");
        return 0;
    }
    int ok = node_recover_route_check(rec, t.env->peer_table, r->names, r->n, why, len);
    sw_wire_msg_clear(&t);
    return ok;
}

/* ---- pipeline target ------------------------------------------------------------------------ */

typedef struct s_pipe {
    node_t *n;
    s_route_t route;
    uint64_t session;
    uint64_t round;
    Shardwire__SamplingParams *sampling;
    double head_ms, stage_ms, net_ms;      // totals over the request
    double stage_total[SW_WIRE_MAX_ROUTE]; // compute per stage (ms)
    double deadline_ms;                    // absolute, 0 = none
    node_recover_t *rec;                   // committed tokens and route baseline (recover.h)
    const char *client;                    // who the tokens stream to (not owned)
    double round_head_ms, round_stage_ms;  // the current round's compute, head / stages
} s_pipe_t;

/* Waits for the Verdict of round p->round: NODE_RECOVER_OK, _RETRY (a stage
 * or the relay failed, or the verdict is late: recover.c may fix it) or _FATAL. */
static int s_wait_verdict(s_pipe_t *p, sw_verdict_t *out, double *stage_ms, char *err,
                          size_t err_len)
{
    node_t *n = p->n;
    double t_check = node_now_ms() + 1000;
    const double t_limit = node_now_ms() + n->o.round_timeout_ms;
    for (;;) {
        if (*n->stop) {
            snprintf(err, err_len, "the head is shutting down");
            return NODE_RECOVER_FATAL;
        }
        if (n->head->cancel_running) {
            snprintf(err, err_len, "cancelled by the client");
            return NODE_RECOVER_FATAL;
        }
        sw_wire_msg_t m = {0};
        int rc = sw_peer_recv(n->peer, &m, 100);
        if (rc < 0) {
            snprintf(err, err_len, "lost the connection to the relay");
            return NODE_RECOVER_FATAL;
        }
        if (rc == 0) {
            const Shardwire__Envelope *e = m.env;
            if (e->body_case == SHARDWIRE__ENVELOPE__BODY_VERDICT &&
                strcmp(m.peer, p->route.names[p->route.n - 1]) != 0) {
                SW_WARN("ignored a verdict from %s: only the route's tail %s may send one", m.peer,
                        p->route.names[p->route.n - 1]);
            } else if (e->body_case == SHARDWIRE__ENVELOPE__BODY_VERDICT &&
                       e->verdict->session_id == p->session && e->verdict->round == p->round) {
                const Shardwire__Verdict *v = e->verdict;
                if (v->n_tokens < 1 || v->n_tokens > SW_MAX_DRAFT + 1) {
                    snprintf(err, err_len, "the tail sent a verdict with %zu tokens", v->n_tokens);
                    sw_wire_msg_clear(&m);
                    return NODE_RECOVER_FATAL;
                }
                out->n_commit = (int)v->n_tokens;
                out->logits_digest = v->logits_digest;
                for (size_t i = 0; i < v->n_tokens; i++)
                    out->tokens[i] = (int32_t)v->tokens[i];
                *stage_ms = 0;
                /* The timing list starts with the head's own entry: count
                 * only the later stages here (the head's time is head_ms). */
                for (size_t i = 0; i < v->n_timing; i++) {
                    double ms = v->timing[i]->compute_us / 1e3;
                    for (int s = 1; s < p->route.n; s++)
                        if (!strcmp(p->route.names[s], v->timing[i]->name)) {
                            p->stage_total[s] += ms;
                            *stage_ms += ms;
                        }
                }
                sw_wire_msg_clear(&m);
                return 0;
            }
            int from_route = !strcmp(m.peer, SW_WIRE_RELAY_NAME); /* errors: relay or stages */
            for (int s = 1; s < p->route.n && !from_route; s++)
                from_route = !strcmp(m.peer, p->route.names[s]);
            if (e->body_case == SHARDWIRE__ENVELOPE__BODY_ERROR && from_route &&
                (e->error->session_id == p->session || (e->error->dest && e->error->dest[0]))) {
                const char *dest = e->error->dest ? e->error->dest : "";
                int ours = e->error->session_id == p->session;
                for (int s = 1; s < p->route.n && !ours; s++)
                    ours = !strcmp(dest, p->route.names[s]);
                if (ours) {
                    if (dest[0] && e->error->session_id != p->session)
                        snprintf(err, err_len,
                                 "stage '%s' left the pipeline (the relay cannot "
                                 "reach it)",
                                 dest);
                    else
                        snprintf(err, err_len, "%s", e->error->message);
                    /* Lost stages, lost sessions and lost messages can be
                     * recovered; a stage refusing the round cannot. */
                    int code = e->error->code;
                    int retry = code == SHARDWIRE__ERROR_CODE__ERR_UNKNOWN_DEST ||
                                code == SHARDWIRE__ERROR_CODE__ERR_DEST_GONE ||
                                code == SHARDWIRE__ERROR_CODE__ERR_DEST_BUSY ||
                                code == SHARDWIRE__ERROR_CODE__ERR_NOT_ANNOUNCED ||
                                code == SHARDWIRE__ERROR_CODE__ERR_UNKNOWN_SESSION;
                    sw_wire_msg_clear(&m);
                    return retry ? NODE_RECOVER_RETRY : NODE_RECOVER_FATAL;
                }
            } else if (e->body_case == SHARDWIRE__ENVELOPE__BODY_GENERATE) {
                node_head_request(n, &m);
            } else if (e->body_case == SHARDWIRE__ENVELOPE__BODY_CANCEL) {
                node_head_cancel(n, &m);
            } else if (e->body_case == SHARDWIRE__ENVELOPE__BODY_FORWARD) {
                node_stage_forward(n, &m);
            }
            sw_wire_msg_clear(&m);
            continue;
        }
        double now = node_now_ms();
        if (p->deadline_ms && now > p->deadline_ms) {
            snprintf(err, err_len, "the request's deadline passed");
            return NODE_RECOVER_FATAL;
        }
        if (now > t_limit) {
            snprintf(err, err_len, "no verdict within %d ms (see --round-timeout-ms)",
                     n->o.round_timeout_ms);
            return NODE_RECOVER_RETRY;
        }
        if (now > t_check) {
            char why[160];
            if (!s_route_alive(n, &p->route, p->rec, why, sizeof why)) {
                snprintf(err, err_len, "%s during the round", why);
                return NODE_RECOVER_RETRY;
            }
            t_check = node_now_ms() + 1000;
        }
    }
}

/* Runs this stage's layers on the round's rows and sends them to the next
 * stage as Forwards of a new round number (recover.h: node_recover_ops_t.send).
 * more = 1 marks the last chunk prefill_more too (a replay). The number of
 * chunks sent, or NODE_RECOVER_RETRY / _FATAL. */
static int s_pipe_send(void *ctx, const sw_round_t *r, int more, char *err, size_t err_len)
{
    s_pipe_t *p = ctx;
    node_t *n = p->n;
    node_head_t *h = n->head;
    const int E = n->hp->n_embd;
    double head_ms = 0;
    int chunks = 0;
    p->round++;
    if (sw_kv_truncate(h->kv, r->kv_keep) != 0) {
        snprintf(err, err_len, "kv_keep %d is past the head's %d positions", r->kv_keep,
                 sw_kv_len(h->kv));
        return NODE_RECOVER_FATAL;
    }
    uint32_t toks[SW_WIRE_MAX_ROWS], drafts[SW_MAX_DRAFT];
    float probs[SW_MAX_DRAFT];
    Shardwire__DraftDist dd[SW_MAX_DRAFT], *ddp[SW_MAX_DRAFT];
    for (int i = 0; i < r->n_draft; i++) {
        drafts[i] = (uint32_t)r->tokens[r->n - r->n_draft + i];
        if (r->q) {
            probs[i] = r->q[i].q_tok;
            shardwire__draft_dist__init(&dd[i]);
            if (r->q[i].n > 0 && r->q[i].ids) {
                dd[i].n_tokens = dd[i].n_probs = (size_t)r->q[i].n;
                dd[i].tokens = (uint32_t *)r->q[i].ids;
                dd[i].probs = (float *)r->q[i].vals;
            }
            ddp[i] = &dd[i];
        }
    }
    for (int c0 = 0; c0 < r->n; c0 += SW_WIRE_MAX_ROWS) {
        const int rows = r->n - c0 < SW_WIRE_MAX_ROWS ? r->n - c0 : SW_WIRE_MAX_ROWS;
        const int last_chunk = c0 + rows == r->n;
        double t0 = node_now_ms();
        sw_forward_t fw = {.n = rows,
                           .tokens = r->tokens + c0,
                           .out_hidden = n->hidden_out,
                           .prompt = r->n_draft == 0};
        if (sw_model_forward(n->model, h->kv, &fw, err, err_len) != 0)
            return NODE_RECOVER_FATAL;
        const void *wire =
            node_hidden_pack(n->o.dtype, n->hidden_out, n->wire_buf, (size_t)rows * E);
        head_ms += node_now_ms() - t0;
        for (int i = 0; i < rows; i++)
            toks[i] = (uint32_t)r->tokens[c0 + i];

        Shardwire__StageTiming mine = SHARDWIRE__STAGE_TIMING__INIT;
        mine.name = p->route.names[0];
        mine.compute_us = (uint32_t)(head_ms * 1e3);
        Shardwire__StageTiming *tp = &mine;
        Shardwire__Forward f = SHARDWIRE__FORWARD__INIT;
        f.session_id = p->session;
        f.round = p->round;
        f.start_pos = f.kv_keep = (uint32_t)(r->kv_keep + c0);
        f.n_rows = (uint32_t)rows;
        f.n_tokens = (size_t)rows;
        f.tokens = toks;
        f.sampling = p->sampling;
        if (last_chunk && r->n_draft) {
            f.n_draft_tokens = (size_t)r->n_draft;
            f.draft_tokens = drafts;
            if (r->q) {
                f.n_draft_probs = (size_t)r->n_draft;
                f.draft_probs = probs;
                f.n_draft_dists = (size_t)r->n_draft;
                f.draft_dists = ddp;
            }
        }
        f.dtype = n->o.dtype;
        f.hidden = (uint32_t)E;
        f.layer_begin = (uint32_t)sw_model_layer_end(n->model);
        f.n_route = (size_t)p->route.n;
        f.route = p->route.ptrs;
        f.hop = 1;
        f.reply_to = p->route.names[0];
        f.prefill_more = !last_chunk || more;
        f.n_timing = 1;
        f.timing = &tp;
        Shardwire__Envelope env = SHARDWIRE__ENVELOPE__INIT;
        env.body_case = SHARDWIRE__ENVELOPE__BODY_FORWARD;
        env.forward = &f;
        const size_t bytes = (size_t)rows * E * sw_wire_dtype_size(f.dtype);
        if (sw_peer_send(n->peer, p->route.names[1], &env, wire, bytes, 1) != 0) {
            snprintf(err, err_len, "could not send the round to stage '%s'", p->route.names[1]);
            p->round_head_ms += head_ms;
            return NODE_RECOVER_RETRY;
        }
        chunks++;
    }
    p->round_head_ms += head_ms;
    /* The prefill keeps the later stages busy for a while: feed the prompt
     * to the draft model meanwhile, off the critical path (once: a replay's
     * prefill has a later round number). */
    if (p->round == 1 && r->kv_keep == 0 && r->n_draft == 0 && !more && h->drafter &&
        draft_warm(h->drafter, r->tokens, r->n) != 0)
        SW_DEBUG("the draft model could not prefill the prompt; it catches up later");
    return chunks;
}

static int s_pipe_wait(void *ctx, sw_verdict_t *out, char *err, size_t err_len)
{
    s_pipe_t *p = ctx;
    double stage_ms = 0;
    int rc = s_wait_verdict(p, out, &stage_ms, err, err_len);
    p->round_stage_ms += stage_ms;
    return rc;
}

/* Serves messages for up to ms while recovery waits (recover.h). */
static int s_pipe_idle(void *ctx, int ms, char *err, size_t err_len)
{
    s_pipe_t *p = ctx;
    node_t *n = p->n;
    const double until = node_now_ms() + ms;
    for (;;) {
        if (*n->stop) {
            snprintf(err, err_len, "the head is shutting down");
            return NODE_RECOVER_FATAL;
        }
        if (n->head->cancel_running) {
            snprintf(err, err_len, "cancelled by the client");
            return NODE_RECOVER_FATAL;
        }
        const double left = until - node_now_ms();
        if (left <= 0)
            return NODE_RECOVER_OK;
        sw_wire_msg_t m = {0};
        int rc = sw_peer_recv(n->peer, &m, (int)left + 1);
        if (rc < 0) {
            snprintf(err, err_len, "lost the connection to the relay");
            return NODE_RECOVER_FATAL;
        }
        if (rc != 0)
            continue;
        if (m.env->body_case == SHARDWIRE__ENVELOPE__BODY_GENERATE)
            node_head_request(n, &m);
        else if (m.env->body_case == SHARDWIRE__ENVELOPE__BODY_CANCEL)
            node_head_cancel(n, &m);
        else if (m.env->body_case == SHARDWIRE__ENVELOPE__BODY_FORWARD)
            node_stage_forward(n, &m);
        sw_wire_msg_clear(&m); // stale verdicts and errors of the failed round
    }
}

static int s_pipe_reroute(void *ctx, char *err, size_t err_len)
{
    s_pipe_t *p = ctx;
    s_route_t nr;
    if (s_build_route(p->n, &nr, p->rec, err, err_len) != 0)
        return NODE_RECOVER_RETRY;
    if (nr.n < 2) {
        snprintf(err, err_len, "the head now holds every layer");
        return NODE_RECOVER_FATAL;
    }
    p->route = nr;
    for (int i = 0; i < p->route.n; i++)
        p->route.ptrs[i] = p->route.names[i];
    /* After a relay restart the client must have announced again too, or
     * the next TokenChunk would be dropped. */
    sw_wire_msg_t t = {0};
    if (p->client && sw_peer_status(p->n->peer, &t, 2000) == 0) {
        int found = 0;
        for (size_t j = 0; j < t.env->peer_table->n_peers; j++) {
            const Shardwire__PeerAnnounce *a = t.env->peer_table->peers[j]->announce;
            found |= a && !strcmp(a->name, p->client);
        }
        sw_wire_msg_clear(&t);
        if (!found) {
            snprintf(err, err_len, "the client '%s' is not connected to the relay", p->client);
            return NODE_RECOVER_RETRY;
        }
    }
    return NODE_RECOVER_OK;
}

/* One round through the pipeline, recovered by recover.c if a stage or the
 * relay fails on the way. */
static int s_pipe_round(void *ctx, const sw_round_t *r, sw_verdict_t *out, char *err,
                        size_t err_len)
{
    s_pipe_t *p = ctx;
    const double t_round = node_now_ms();
    if (p->deadline_ms && t_round > p->deadline_ms) { /* checked every round, not only when idle */
        snprintf(err, err_len, "the request's deadline passed");
        return -1;
    }
    p->round_head_ms = p->round_stage_ms = 0;
    const node_recover_ops_t ops = {.ctx = p,
                                    .send = s_pipe_send,
                                    .wait = s_pipe_wait,
                                    .reroute = s_pipe_reroute,
                                    .idle = s_pipe_idle};
    if (node_recover_round(p->rec, &ops, r, p->deadline_ms, out, err, err_len) != 0)
        return -1;
    const double head_ms = p->round_head_ms, stage_ms = p->round_stage_ms;
    const double wall = node_now_ms() - t_round;
    out->compute_ms = head_ms + stage_ms;
    p->head_ms += head_ms;
    p->stage_ms += stage_ms;
    p->net_ms += wall - head_ms - stage_ms > 0 ? wall - head_ms - stage_ms : 0;
    return 0;
}

/* ---- one generation ---------------------------------------------------------------------------
 */

typedef struct s_stream {
    node_t *n;
    const char *client;
    const char *request_id;
    sw_detok_t *detok;
    uint32_t n_sent; // tokens streamed so far (the next chunk's index)
} s_stream_t;

static int s_send_chunk(s_stream_t *st, const int32_t *tokens, int n_tok, const char *text,
                        size_t len, int finish, Shardwire__GenerateStats *stats)
{
    uint32_t ids[SW_MAX_DRAFT + 1];
    Shardwire__TokenChunk c = SHARDWIRE__TOKEN_CHUNK__INIT;
    c.request_id = (char *)st->request_id;
    for (int i = 0; i < n_tok; i++)
        ids[i] = (uint32_t)tokens[i];
    c.n_tokens = (size_t)n_tok;
    c.tokens = ids;
    c.index = st->n_sent;
    st->n_sent += (uint32_t)n_tok;
    c.text.data = (uint8_t *)text;
    c.text.len = len;
    c.done = finish != SHARDWIRE__FINISH_REASON__FINISH_NONE;
    c.finish = finish;
    c.stats = stats;
    Shardwire__Envelope env = SHARDWIRE__ENVELOPE__INIT;
    env.body_case = SHARDWIRE__ENVELOPE__BODY_TOKEN_CHUNK;
    env.token_chunk = &c;
    return sw_peer_send(st->n->peer, st->client, &env, NULL, 0, 0);
}

static int s_on_tokens(void *ctx, const int32_t *tokens, int n)
{
    s_stream_t *st = ctx;
    char text[4096];
    size_t len = 0;
    for (int i = 0; i < n; i++) {
        const char *piece;
        size_t pl;
        if (sw_detok_push(st->detok, tokens[i], &piece, &pl) != 0)
            return 1;
        if (len + pl <= sizeof text) {
            memcpy(text + len, piece, pl);
            len += pl;
        }
    }
    if (s_send_chunk(st, tokens, n, text, len, SHARDWIRE__FINISH_REASON__FINISH_NONE, NULL) != 0)
        return 1; // the client is gone: stop generating
    return 0;
}

static int s_is_eog(void *ctx, int32_t token)
{
    return sw_tokenizer_is_eog((const sw_tokenizer_t *)ctx, token);
}

static void s_close_session(node_t *n, const s_route_t *route, uint64_t session, const char *why)
{
    Shardwire__SessionClose sc = SHARDWIRE__SESSION_CLOSE__INIT;
    sc.session_id = session;
    sc.reason = (char *)why;
    Shardwire__Envelope env = SHARDWIRE__ENVELOPE__INIT;
    env.body_case = SHARDWIRE__ENVELOPE__BODY_SESSION_CLOSE;
    env.session_close = &sc;
    for (int i = 1; i < route->n; i++)
        if (sw_peer_send(n->peer, route->names[i], &env, NULL, 0, 0) != 0)
            SW_DEBUG("could not close the session on %s", route->names[i]);
}

/* The drafting of one request: its DraftParams where set, the node's
 * --draft* defaults otherwise. */
static int s_draft_cfg(const node_t *n, const Shardwire__DraftParams *dp, const sw_sampling_t *sp,
                       draft_cfg_t *dc, char *err, size_t err_len)
{
    const node_head_t *h = n->head;
    const node_opts_t *o = &n->o;
    memset(dc, 0, sizeof *dc);
    dc->sampling = *sp;
    dc->mode = h->dmodel ? DRAFT_MODE_MODEL : DRAFT_MODE_NONE;
    if (o->draft_mode && draft_mode_parse(o->draft_mode, &dc->mode) != 0)
        dc->mode = DRAFT_MODE_NONE;
    dc->k = o->draft_k;
    dc->k_max = o->draft_k_max;
    dc->p_min = o->draft_p_min;
    if (!dp)
        return 0;
    switch (dp->mode) {
    case SHARDWIRE__DRAFT_MODE__DRAFT_NONE:
        dc->mode = DRAFT_MODE_NONE;
        break;
    case SHARDWIRE__DRAFT_MODE__DRAFT_MODEL:
        if (!h->dmodel) {
            snprintf(err, err_len, "this head has no draft model (start it with --draft-model)");
            return -1;
        }
        dc->mode = DRAFT_MODE_MODEL;
        break;
    case SHARDWIRE__DRAFT_MODE__DRAFT_NGRAM:
        dc->mode = DRAFT_MODE_NGRAM;
        break;
    default: // DRAFT_AUTO: the head's default
        break;
    }
    if (dp->n_draft > SW_MAX_DRAFT || !(dp->p_min >= 0 && dp->p_min <= 1)) {
        snprintf(err, err_len, "draft parameters out of range (K %u > %d or p_min %g)", dp->n_draft,
                 SW_MAX_DRAFT, (double)dp->p_min);
        return -1;
    }
    if (dp->n_draft > 0)
        dc->k = (int)dp->n_draft;
    if (dp->p_min > 0)
        dc->p_min = dp->p_min;
    if (dc->mode != DRAFT_MODE_NONE && dc->k == 0 && dp->mode != SHARDWIRE__DRAFT_MODE__DRAFT_AUTO)
        dc->k = DRAFT_K_AUTO; // a proposer asked for by name with the head's K off
    return 0;
}

static void s_generate(node_t *n, sw_wire_msg_t *msg)
{
    node_head_t *h = n->head;
    const Shardwire__GenerateRequest *g = msg->env->generate;
    const double t_start = node_now_ms();
    char err[512] = "";
    int code = SHARDWIRE__ERROR_CODE__ERR_BAD_REQUEST;
    int32_t *prompt = NULL, *out = NULL;
    char *chat_text = NULL;
    sw_local_target_t *lt = NULL;
    s_stream_t st = {.n = n, .client = msg->peer, .request_id = g->request_id};
    s_pipe_t pipe = {.n = n};
    snprintf(h->running_rid, sizeof h->running_rid, "%s", g->request_id);
    snprintf(h->running_client, sizeof h->running_client, "%s", msg->peer);
    h->cancel_running = 0;

    sw_sampling_t sp = sw_sampling_default();
    Shardwire__SamplingParams spw = SHARDWIRE__SAMPLING_PARAMS__INIT;
    if (g->sampling)
        spw = *g->sampling;
    sp.temp = spw.temperature;
    sp.top_k = (int)spw.top_k;
    sp.top_p = spw.top_p > 0 ? spw.top_p : 1.0f;
    sp.min_p = spw.min_p;
    sp.rep_penalty = spw.repeat_penalty > 0 ? spw.repeat_penalty : 1.0f;
    sp.rep_last_n = (int)spw.repeat_last_n;
    sp.seed = spw.seed;
    if (sw_sampling_check(&sp) != 0) {
        snprintf(err, sizeof err, "invalid sampling parameters");
        goto fail;
    }

    int n_prompt = 0;
    if (g->n_prompt_tokens) {
        prompt = malloc(g->n_prompt_tokens * sizeof *prompt);
        if (!prompt)
            goto oom;
        for (size_t i = 0; i < g->n_prompt_tokens; i++) {
            if (g->prompt_tokens[i] >= (uint32_t)n->hp->n_vocab) {
                snprintf(err, sizeof err, "prompt token %u is outside the vocabulary",
                         g->prompt_tokens[i]);
                goto fail;
            }
            prompt[i] = (int32_t)g->prompt_tokens[i];
        }
        n_prompt = (int)g->n_prompt_tokens;
    } else {
        const char *text = g->prompt ? g->prompt : "";
        const int chat = g->chat || g->n_messages > 0;
        if (chat) {
            /* A conversation, or the prompt as one user turn (wire.c bounds both). */
            sw_chat_msg_t one = {.role = "user", .content = text};
            sw_chat_msg_t *turns = &one;
            if (g->n_messages > 0) {
                turns = calloc(g->n_messages, sizeof *turns);
                if (!turns)
                    goto oom;
                for (size_t i = 0; i < g->n_messages; i++) {
                    turns[i].role = g->messages[i]->role;
                    turns[i].content = g->messages[i]->content;
                }
            }
            chat_text = sw_chat_format_alloc(sw_model_gguf(n->model), turns,
                                             g->n_messages > 0 ? (int)g->n_messages : 1, 1);
            if (turns != &one)
                free(turns);
            if (!chat_text) {
                snprintf(err, sizeof err, "the model has no usable chat template");
                goto fail;
            }
            text = chat_text;
        }
        /* Stop as soon as the prompt cannot fit: a 2 MiB prompt would otherwise
         * hold the head in the tokenizer for seconds before this is known. */
        const int64_t room = (int64_t)n->o.n_ctx - g->n_predict;
        int trc = room < 1 ? SW_TOK_ERR_TOO_LONG
                           : sw_tokenize_max(h->tok, text, strlen(text), 1, chat, (int)room,
                                             &prompt, &n_prompt);
        if (trc == SW_TOK_ERR_TOO_LONG) {
            snprintf(err, sizeof err,
                     "the prompt (more than %lld tokens) + %u new tokens exceed the %d-position "
                     "context (node --ctx)",
                     (long long)(room > 0 ? room : 0), g->n_predict, n->o.n_ctx);
            goto fail;
        }
        if (trc != 0)
            goto oom;
    }
    if (n_prompt < 1) {
        snprintf(err, sizeof err, "the prompt is empty");
        goto fail;
    }
    if ((int64_t)n_prompt + g->n_predict > n->o.n_ctx) {
        snprintf(err, sizeof err,
                 "%d prompt + %u new tokens exceed the %d-position context (node --ctx)", n_prompt,
                 g->n_predict, n->o.n_ctx);
        goto fail;
    }
    out = malloc(((size_t)g->n_predict + 1) * sizeof *out);
    st.detok = sw_detok_new(h->tok, 0);
    if (!out || !st.detok)
        goto oom;

    code = SHARDWIRE__ERROR_CODE__ERR_MODEL_MISMATCH;
    pipe.client = msg->peer;
    pipe.rec = node_recover_new(n->o.n_ctx, n->o.recover_timeout_ms);
    if (!pipe.rec)
        goto oom;
    if (s_build_route(n, &pipe.route, pipe.rec, err, sizeof err) != 0)
        goto fail;
    code = SHARDWIRE__ERROR_CODE__ERR_INTERNAL;
    randombytes_buf(&pipe.session, sizeof pipe.session);
    pipe.session |= 1;
    pipe.sampling = &spw;
    pipe.deadline_ms = g->timeout_ms ? t_start + g->timeout_ms : 0;

    sw_target_t target;
    if (pipe.route.n == 1) {
        lt = sw_local_target_new(n->model, n->o.n_ctx, &sp, err, sizeof err);
        if (!lt)
            goto fail;
        target = sw_local_target(lt);
    } else {
        target.round = s_pipe_round;
        target.ctx = &pipe;
    }
    draft_cfg_t dc;
    code = SHARDWIRE__ERROR_CODE__ERR_BAD_REQUEST;
    if (s_draft_cfg(n, g->draft, &sp, &dc, err, sizeof err) != 0 ||
        draft_begin(h->drafter, &dc, err, sizeof err) != 0)
        goto fail;
    code = SHARDWIRE__ERROR_CODE__ERR_INTERNAL;
    sw_proposer_t proposer = draft_proposer(h->drafter);
    SW_INFO("request '%s' from %s: %d prompt tokens, %u to generate, route of %d stage(s), "
            "draft %s K %s%d",
            g->request_id, msg->peer, n_prompt, g->n_predict, pipe.route.n,
            draft_mode_name(dc.mode), dc.k == DRAFT_K_AUTO ? "auto <= " : "",
            draft_gen_k(h->drafter));
    sw_gen_opts_t go = {
        .k = draft_gen_k(h->drafter),
        .proposer = &proposer,
        .n_predict = (int)g->n_predict,
        .stop_at_eog = 1,
        .on_tokens = s_on_tokens,
        .on_tokens_ctx = &st,
        .is_eog = s_is_eog,
        .is_eog_ctx = h->tok,
    };
    sw_gen_stats_t gs;
    const double t_gen = node_now_ms();
    if (sw_generate(&target, prompt, n_prompt, &go, out, &gs, err, sizeof err) != 0) {
        code = pipe.deadline_ms && node_now_ms() > pipe.deadline_ms
                   ? SHARDWIRE__ERROR_CODE__ERR_DEADLINE
                   : SHARDWIRE__ERROR_CODE__ERR_DEST_GONE;
        goto fail;
    }
    const char *tail;
    size_t tl = 0;
    if (sw_detok_flush(st.detok, &tail, &tl) != 0)
        tl = 0;
    Shardwire__GenerateStats stats = SHARDWIRE__GENERATE_STATS__INIT;
    Shardwire__StageTiming stage[SW_WIRE_MAX_ROUTE], *stage_p[SW_WIRE_MAX_ROUTE];
    stats.n_prompt = (uint32_t)gs.n_prompt;
    stats.n_generated = (uint32_t)gs.n_gen;
    stats.n_rounds = (uint32_t)gs.rounds;
    stats.n_drafted = (uint32_t)gs.drafted;
    stats.n_accepted = (uint32_t)gs.accepted;
    stats.prompt_ms = (uint32_t)gs.prefill_ms;
    stats.generate_ms = (uint32_t)(gs.prefill_ms + gs.decode_ms);
    stats.ttft_ms = (float)(gs.ttft_ms + (t_gen - t_start));
    stats.decode_ms = (float)gs.decode_ms;
    stats.draft_ms = (float)gs.draft_ms;
    stats.head_ms = (float)(pipe.route.n == 1 ? gs.target_ms : pipe.head_ms);
    stats.network_ms = (float)pipe.net_ms;
    for (int i = 1; i < pipe.route.n; i++) {
        shardwire__stage_timing__init(&stage[i]);
        stage[i].name = pipe.route.names[i];
        stage[i].compute_us = (uint32_t)(pipe.stage_total[i] * 1e3);
        stage_p[i - 1] = &stage[i];
    }
    stats.n_stages = (size_t)(pipe.route.n - 1);
    stats.logits_digest = gs.logits_digest;
    stats.stages = stage_p;
    int finish = gs.n_gen > 0 && sw_tokenizer_is_eog(h->tok, out[gs.n_gen - 1])
                     ? SHARDWIRE__FINISH_REASON__FINISH_EOS
                     : SHARDWIRE__FINISH_REASON__FINISH_LENGTH;
    if (s_send_chunk(&st, NULL, 0, tail, tl, finish, &stats) != 0)
        SW_WARN("request '%s': the client %s is gone", g->request_id, msg->peer);
    SW_INFO("request '%s' done: %d tokens in %d rounds (%d of %d drafts accepted)", g->request_id,
            gs.n_gen, gs.rounds, gs.accepted, gs.drafted);
    goto done;
oom:
    snprintf(err, sizeof err, "out of memory");
    code = SHARDWIRE__ERROR_CODE__ERR_INTERNAL;
fail:
    if (h->cancel_running) {
        s_chunk_cancelled(n, msg->peer, g->request_id);
        goto done;
    }
    SW_WARN("request '%s' from %s failed: %s", g->request_id, msg->peer, err);
    s_send_error(n, msg->peer, code, g->request_id, pipe.session, err);
    if (s_send_chunk(&st, NULL, 0, NULL, 0, SHARDWIRE__FINISH_REASON__FINISH_ERROR, NULL) != 0)
        SW_DEBUG("request '%s': could not send the final chunk", g->request_id);
done:
    if (pipe.route.n > 1)
        s_close_session(n, &pipe.route, pipe.session, h->cancel_running ? "cancelled" : "done");
    h->running_rid[0] = h->running_client[0] = 0;
    h->cancel_running = 0;
    node_recover_free(&pipe.rec);
    sw_local_target_free(&lt);
    sw_detok_free(&st.detok);
    free(chat_text);
    free(prompt);
    free(out);
}

void node_head_work(node_t *n)
{
    node_head_t *h = n->head;
    while (h && h->q_len > 0 && !*n->stop) {
        sw_wire_msg_t m = {0};
        sw_wire_msg_move(&m, &h->queue[h->q_head]);
        h->q_head = (h->q_head + 1) % S_MAX_QUEUE;
        h->q_len--;
        s_generate(n, &m);
        sw_wire_msg_clear(&m);
    }
}
