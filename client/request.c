/*
 * request.c - a request's life (client.h): the checks of a request, submit (a
 * GenerateRequest to the head, the slot that follows the request and the copy
 * of it kept for a failover), Cancel, and the end of a request with an error
 * code: the heads' and the relay's Errors turned into error events.
 */
#include "client_impl.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- requests --------------------------------------------------------------------------- */

sw_client_request_t sw_client_request_default(void)
{
    sw_client_request_t r = {
        .n_predict = SW_REQUEST_DEFAULT_N_PREDICT,
        .temperature = 0, /* greedy: temperature 0 and the penalty off */
        .top_k = SW_SAMPLING_TOP_K,
        .top_p = (float)SW_SAMPLING_TOP_P,
        .min_p = (float)SW_SAMPLING_MIN_P,
        .repeat_penalty = SW_SAMPLING_REP_OFF,
        .repeat_last_n = SW_SAMPLING_REP_LAST_N,
        .seed = SW_SAMPLING_SEED,
        .draft = SW_CLIENT_DRAFT_AUTO,
        .draft_k = -1,
        .draft_ahead = -1,
        .timeout_ms = CLIENT_DEFAULT_TIMEOUT_MS,
    };
    return r;
}

/* The slot of request id, or NULL (none, or id empty). */
client_req_t *client_req_find(sw_client_t *c, const char *id)
{
    if (!id || !id[0])
        return NULL;
    for (int i = 0; i < SW_CLIENT_MAX_INFLIGHT; i++)
        if (!strcmp(c->reqs[i].id, id))
            return &c->reqs[i];
    return NULL;
}

int sw_client_request_check(const sw_client_request_t *q, char *err, size_t err_len)
{
    const int has_prompt = q->prompt != NULL;
    if (has_prompt == (q->n_messages > 0))
        return client_fail(SW_CLIENT_EINVAL, err, err_len,
                           "give exactly one of a prompt and chat messages");
    if (has_prompt && !q->prompt[0])
        return client_fail(SW_CLIENT_EINVAL, err, err_len, "the prompt is empty");
    if (has_prompt && strlen(q->prompt) > SW_WIRE_MAX_PROMPT_BYTES)
        return client_fail(SW_CLIENT_EINVAL, err, err_len, "the prompt is longer than %u bytes",
                           SW_WIRE_MAX_PROMPT_BYTES);
    if (q->n_messages < 0 || q->n_messages > SW_CLIENT_MAX_MESSAGES ||
        (q->n_messages && !q->messages))
        return client_fail(SW_CLIENT_EINVAL, err, err_len,
                           "between 1 and %d chat messages are allowed", SW_CLIENT_MAX_MESSAGES);
    size_t total = 0;
    for (int i = 0; i < q->n_messages; i++) {
        const char *role = q->messages[i].role;
        if (!role || (strcmp(role, "system") && strcmp(role, "user") && strcmp(role, "assistant") &&
                      strcmp(role, "tool")))
            return client_fail(SW_CLIENT_EINVAL, err, err_len,
                               "message %d: role must be system, user, assistant or tool", i);
        total += q->messages[i].content ? strlen(q->messages[i].content) : 0;
    }
    if (total > SW_WIRE_MAX_PROMPT_BYTES)
        return client_fail(SW_CLIENT_EINVAL, err, err_len, "the messages are longer than %u bytes",
                           SW_WIRE_MAX_PROMPT_BYTES);
    if (q->n_predict < 1 || q->n_predict > SW_REQUEST_MAX_N_PREDICT)
        return client_fail(SW_CLIENT_EINVAL, err, err_len, "tokens to generate %d not in [1, %d]",
                           q->n_predict, SW_REQUEST_MAX_N_PREDICT);
    if (!(q->temperature >= 0 && q->temperature <= SW_SAMPLING_MAX_TEMP))
        return client_fail(SW_CLIENT_EINVAL, err, err_len, "temperature %g not in [0, %d]",
                           (double)q->temperature, SW_SAMPLING_MAX_TEMP);
    if (q->top_k < 0 || q->top_k > SW_SAMPLING_MAX_TOP_K)
        return client_fail(SW_CLIENT_EINVAL, err, err_len, "top_k %d not in [0, %d]", q->top_k,
                           SW_SAMPLING_MAX_TOP_K);
    if (!(q->top_p > 0 && q->top_p <= 1))
        return client_fail(SW_CLIENT_EINVAL, err, err_len, "top_p %g not in (0, 1]",
                           (double)q->top_p);
    if (!(q->min_p >= 0 && q->min_p < 1))
        return client_fail(SW_CLIENT_EINVAL, err, err_len, "min_p %g not in [0, 1)",
                           (double)q->min_p);
    if (!(q->repeat_penalty > 0 && q->repeat_penalty <= SW_SAMPLING_MAX_REP_PENALTY))
        return client_fail(SW_CLIENT_EINVAL, err, err_len, "repeat penalty %g not in (0, %d]",
                           (double)q->repeat_penalty, SW_SAMPLING_MAX_REP_PENALTY);
    if (q->repeat_last_n < 0 || q->repeat_last_n > SW_SAMPLING_MAX_LAST_N)
        return client_fail(SW_CLIENT_EINVAL, err, err_len, "repeat_last_n %d not in [0, %d]",
                           q->repeat_last_n, SW_SAMPLING_MAX_LAST_N);
    if (q->draft < SW_CLIENT_DRAFT_AUTO || q->draft > SW_CLIENT_DRAFT_MIX)
        return client_fail(SW_CLIENT_EINVAL, err, err_len, "unknown draft mode %d", q->draft);
    if (q->draft_k < -1 || q->draft_k > SW_CLIENT_MAX_DRAFT)
        return client_fail(SW_CLIENT_EINVAL, err, err_len, "draft K %d not in [0, %d]", q->draft_k,
                           SW_CLIENT_MAX_DRAFT);
    if (q->draft_tree < 0 || q->draft_tree > SW_CLIENT_MAX_DRAFT)
        return client_fail(SW_CLIENT_EINVAL, err, err_len, "draft tree of %d drafts not in [0, %d]",
                           q->draft_tree, SW_CLIENT_MAX_DRAFT);
    if (q->draft_ahead < -1 || q->draft_ahead > 1)
        return client_fail(SW_CLIENT_EINVAL, err, err_len, "draft ahead %d is not -1, 0 or 1",
                           q->draft_ahead);
    if (q->n_stop < 0 || q->n_stop > SW_CLIENT_MAX_STOP || (q->n_stop && !q->stop))
        return client_fail(SW_CLIENT_EINVAL, err, err_len, "at most %d stop strings are allowed",
                           SW_CLIENT_MAX_STOP);
    for (int i = 0; i < q->n_stop; i++) {
        size_t n = q->stop[i] ? strlen(q->stop[i]) : 0;
        if (n < 1 || n > SW_CLIENT_MAX_STOP_LEN)
            return client_fail(SW_CLIENT_EINVAL, err, err_len, "stop string %d is not 1..%d bytes",
                               i, SW_CLIENT_MAX_STOP_LEN);
    }
    if (q->timeout_ms < 0 || q->timeout_ms > SW_REQUEST_MAX_TIMEOUT_S * 1000)
        return client_fail(SW_CLIENT_EINVAL, err, err_len, "timeout %d ms not in [0, %d]",
                           q->timeout_ms, SW_REQUEST_MAX_TIMEOUT_S * 1000);
    const size_t tl = q->tenant ? strnlen(q->tenant, SW_WIRE_NAME_MAX + 1) : 0;
    if (tl && !sw_wire_name_ok(q->tenant, tl))
        return client_fail(SW_CLIENT_EINVAL, err, err_len,
                           "tenant is not 0..%d characters of [A-Za-z0-9._-]", SW_WIRE_NAME_MAX);
    return 0;
}

/*
 * Sends q to head as request rid with a deadline of timeout_ms there; after a
 * failover, with the n_resume tokens received so far (GenerateRequest.
 * resume_tokens). The sw_peer_send_msg result.
 */
int client_send_generate(sw_client_t *c, const char *head, const sw_client_request_t *q,
                         const char *rid, int timeout_ms, const uint32_t *resume, uint32_t n_resume)
{
    sw_msg_turn_t turn[SW_CLIENT_MAX_MESSAGES];
    for (int i = 0; i < q->n_messages && i < SW_CLIENT_MAX_MESSAGES; i++) {
        turn[i].role = q->messages[i].role;
        turn[i].content = q->messages[i].content ? q->messages[i].content : "";
    }
    sw_msg_t msg = {.type = SW_MSG_GENERATE};
    sw_msg_generate_t *g = &msg.generate;
    g->request_id = rid;
    g->prompt = q->prompt ? q->prompt : "";
    g->n_predict = (uint32_t)q->n_predict;
    g->has_sampling = 1;
    g->sampling = (sw_sampling_t){
        .temp = q->temperature,
        .top_k = q->top_k,
        .top_p = q->top_p,
        .min_p = q->min_p,
        .rep_penalty = q->repeat_penalty,
        .rep_last_n = q->repeat_last_n > 0 ? q->repeat_last_n : SW_SAMPLING_REP_LAST_N,
        .seed = q->seed,
    };
    g->chat = q->chat || q->n_messages > 0;
    g->has_draft = 1;
    g->draft = (sw_msg_draft_t){
        .mode = (sw_draft_mode_t)q->draft,
        .n_draft = q->draft_k >= 0 ? (uint32_t)q->draft_k : 0,
        .tree = (uint32_t)q->draft_tree,
        .ahead = q->draft_ahead < 0   ? SW_AHEAD_DEFAULT
                 : q->draft_ahead > 0 ? SW_AHEAD_ON
                                      : SW_AHEAD_OFF,
    };
    g->timeout_ms = (uint32_t)timeout_ms;
    g->n_stop = (uint32_t)q->n_stop;
    for (int i = 0; i < q->n_stop && i < SW_WIRE_MAX_STOP; i++)
        g->stop[i] = q->stop[i];
    g->n_messages = (uint32_t)q->n_messages;
    g->messages = turn;
    g->n_resume_tokens = n_resume;
    g->resume_tokens = resume;
    g->tenant = q->tenant;
    return sw_peer_send_msg(c->peer, head, &msg);
}

static void s_req_free(client_req_t *r)
{
    free(r->text);
    free(r->blob);
    free(r->turns);
    free(r->toks);
    memset(r, 0, sizeof *r);
}

/* Keeps a copy of q in r (its strings in r->blob), for a failover. 0, or -1 out of memory. */
static int s_req_keep(client_req_t *r, const sw_client_request_t *q)
{
    size_t need = q->prompt ? strlen(q->prompt) + 1 : 0;
    for (int i = 0; i < q->n_messages; i++)
        need += strlen(q->messages[i].role) + 1 +
                strlen(q->messages[i].content ? q->messages[i].content : "") + 1;
    r->q = *q;
    r->blob = malloc(need ? need : 1);
    r->turns = q->n_messages ? calloc((size_t)q->n_messages, sizeof *r->turns) : NULL;
    if (!r->blob || (q->n_messages && !r->turns))
        return -1;
    char *at = r->blob;
    if (q->prompt) {
        r->q.prompt = strcpy(at, q->prompt);
        at += strlen(at) + 1;
    }
    for (int i = 0; i < q->n_messages; i++) {
        r->turns[i].role = strcpy(at, q->messages[i].role);
        at += strlen(at) + 1;
        r->turns[i].content = strcpy(at, q->messages[i].content ? q->messages[i].content : "");
        at += strlen(at) + 1;
    }
    r->q.messages = r->turns;
    for (int i = 0; i < q->n_stop; i++)
        r->stop_p[i] = r->stop[i];
    r->q.stop = q->n_stop ? r->stop_p : NULL;
    snprintf(r->tenant, sizeof r->tenant, "%s", q->tenant ? q->tenant : "");
    r->q.tenant = r->tenant;
    return 0;
}

int sw_client_submit(sw_client_t *c, const char *head, const sw_client_request_t *q,
                     char id[SW_CLIENT_ID_LEN], char *err, size_t err_len)
{
    int rc = sw_client_request_check(q, err, err_len);
    if (rc != 0)
        return rc;
    if (!head || !sw_wire_name_ok(head, strnlen(head, SW_WIRE_NAME_MAX + 1)))
        return client_fail(SW_CLIENT_EINVAL, err, err_len, "no head name given");
    client_req_t *r = NULL;
    for (int i = 0; i < SW_CLIENT_MAX_INFLIGHT && !r; i++)
        if (!c->reqs[i].id[0])
            r = &c->reqs[i];
    if (!r)
        return client_fail(SW_CLIENT_EBUSY, err, err_len, "%d requests are already in flight",
                           SW_CLIENT_MAX_INFLIGHT);

    char rid[SW_CLIENT_ID_LEN] = "req-";
    client_random_hex(rid + 4, 8);
    const int timeout_ms = q->timeout_ms ? q->timeout_ms : CLIENT_DEFAULT_TIMEOUT_MS;
    if (client_send_generate(c, head, q, rid, timeout_ms, NULL, 0) != 0)
        return client_fail(SW_CLIENT_ECONNECT, err, err_len,
                           "could not send the request to %s through the relay", head);

    memset(r, 0, sizeof *r);
    snprintf(r->id, sizeof r->id, "%s", rid);
    snprintf(r->head, sizeof r->head, "%s", head);
    r->t_submit = r->last_msg = client_now_ms();
    r->deadline = r->t_submit + timeout_ms + CLIENT_GRACE_MS;
    for (int i = 0; i < q->n_stop; i++) {
        snprintf(r->stop[i], sizeof r->stop[i], "%s", q->stop[i]);
        size_t n = strlen(r->stop[i]);
        if (n > r->stop_max)
            r->stop_max = n;
    }
    r->n_stop = q->n_stop;
    if (s_req_keep(r, q) != 0)
        r->q.n_predict = 0; /* out of memory: no failover for this one */
    for (int i = 0; i < c->n_heads; i++)
        if (!strcmp(c->heads[i].name, head))
            snprintf(r->model, sizeof r->model, "%s", c->heads[i].model);
    c->n_inflight++;
    memcpy(id, rid, SW_CLIENT_ID_LEN);
    return 0;
}

/* Sends Cancel for r to its head (a failed send only costs the head some work). */
void client_send_cancel(sw_client_t *c, const client_req_t *r, const char *reason)
{
    const sw_msg_t cn = {.type = SW_MSG_CANCEL, .cancel = {.request_id = r->id, .reason = reason}};
    if (sw_peer_send_msg(c->peer, r->head, &cn) != 0)
        SW_DEBUG("could not send a Cancel for %s to %s", r->id, r->head);
}

int sw_client_cancel(sw_client_t *c, const char *id)
{
    client_req_t *r = client_req_find(c, id);
    if (!r)
        return SW_CLIENT_EINVAL;
    /* Tell the head at once, so that the cluster stops working for nobody; its
     * confirmation (a final chunk, finish CANCELLED) is not waited for. */
    client_send_cancel(c, r, "no longer wanted");
    s_req_free(r);
    c->n_inflight--;
    return 0;
}

/* Puts r's statistics into the event and frees r's slot: the request has ended. */
void client_finish(sw_client_t *c, client_req_t *r, sw_client_event_t *ev)
{
    c->ev_stats = r->stats;
    c->ev_stats.total_ms = client_now_ms() - r->t_submit;
    ev->stats = &c->ev_stats;
    s_req_free(r);
    c->n_inflight--;
}

/* Ends r with an error event (its slot is freed; the event's strings are the client's). */
void client_end_error(sw_client_t *c, client_req_t *r, sw_client_event_t *ev, int code,
                      int wire_code, const char *fmt, ...)
{
    char line[sizeof c->ev_message];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    client_clean(c->ev_message, sizeof c->ev_message, line);
    memset(ev, 0, sizeof *ev);
    ev->type = SW_CLIENT_EV_ERROR;
    memcpy(ev->id, r->id, sizeof ev->id);
    ev->code = code;
    ev->wire_code = wire_code;
    ev->wire_code_name = wire_code ? sw_wire_error_code_name(wire_code) : "";
    ev->message = c->ev_message;
    client_finish(c, r, ev);
}

/* One Error m (decoded: er) read by sw_client_next. 0 with *ev filled, 1 when it makes
 * no event. */
int client_on_error(sw_client_t *c, const sw_wire_msg_t *m, const sw_msg_error_t *er,
                    sw_client_event_t *ev)
{
    const int from_relay = !strcmp(m->peer, SW_WIRE_RELAY_NAME);
    if (c->sealed && !from_relay && !m->sealed) {
        /* A head without our access key says so in clear: it holds no key to seal
         * with. Its text is not trusted (anyone could send a clear message); the
         * fact is only used for requests that went to that very peer. */
        for (int i = 0; i < SW_CLIENT_MAX_INFLIGHT; i++) {
            client_req_t *r = &c->reqs[i];
            if (r->id[0] && !strcmp(r->head, m->peer) && er->code == SW_ERROR_UNAUTHORIZED) {
                client_end_error(c, r, ev, SW_CLIENT_EKEY, 0,
                                 "the head '%s' cannot open our messages: this client's access key "
                                 "(--access-key) is not the one the cluster uses",
                                 m->peer);
                return 0;
            }
        }
        return 1;
    }
    client_req_t *r = client_req_find(c, er->request_id);
    if (from_relay && !r && er->dest[0]) {
        /* the relay could not deliver to a head: the request that went there fails */
        for (int i = 0; i < SW_CLIENT_MAX_INFLIGHT && !r; i++)
            if (c->reqs[i].id[0] && !strcmp(c->reqs[i].head, er->dest))
                r = &c->reqs[i];
    }
    if (!r || (!from_relay && strcmp(m->peer, r->head) != 0))
        return 1;
    if (from_relay && (er->code == SW_ERROR_UNKNOWN_DEST || er->code == SW_ERROR_DEST_GONE ||
                       er->code == SW_ERROR_DEST_BUSY)) {
        /* the relay did not deliver a message of ours to the head (it may be
         * restarting, with the head not announced again yet): ask again in a
         * second; the quiet watch tells a head that is really gone */
        for (int i = 0; i < SW_CLIENT_MAX_INFLIGHT; i++)
            if (c->reqs[i].id[0] && !strcmp(c->reqs[i].head, er->dest))
                c->reqs[i].resume_at = client_now_ms() + 1000;
        return 1;
    }
    char msg[SW_WIRE_MAX_ERROR_TEXT + 1];
    client_clean(msg, sizeof msg, er->message);
    if (!from_relay && er->code == SW_ERROR_HEAD_LEAVING) {
        /* the head stops (Ctrl-C, a rolling restart, its GPU failed) before it finished r:
         * the watch takes r to another head of its model, or to this one restarted, from
         * the tokens received (failover.c), at its first look, which comes at once */
        SW_WARN("client: request %s: the head '%s' is leaving (%s) after %d tokens; looking "
                "for another head of its model",
                r->id, r->head, msg, r->stats.n_generated);
        r->leaving = 1;
        r->resume_at = 0;
        const double now = client_now_ms();
        r->last_msg = now - CLIENT_QUIET_MS - 1;
        c->next_watch = now; /* the watch looks at once */
        return 1;
    }
    if (from_relay)
        client_end_error(c, r, ev, SW_CLIENT_ECONNECT, er->code, "the relay: %s (%s)", msg,
                         sw_wire_error_code_name(er->code));
    else if (er->code == SW_ERROR_BUSY && er->queue_position)
        client_end_error(c, r, ev, SW_CLIENT_EBUSY, er->code,
                         "%s (position %u in the head's queue)", msg, er->queue_position);
    else if (er->code == SW_ERROR_BUSY)
        client_end_error(c, r, ev, SW_CLIENT_EBUSY, er->code, "%s", msg);
    else
        client_end_error(c, r, ev, SW_CLIENT_EHEAD, er->code, "%s", msg);
    return 0;
}
