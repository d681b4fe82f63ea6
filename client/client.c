/*
 * client.c - the client library's API and lifetime (client.h): joining the
 * relay and leaving it, the names of error codes and finishes, and the event
 * loop (sw_client_next) that reads the relay connection, hands each message to
 * the part it concerns and runs the watches. The parts, one concern per file,
 * are listed in client_impl.h.
 */
#include "client_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

const char *sw_client_strerror(int rc)
{
    switch (rc) {
    case SW_CLIENT_OK:
        return "ok";
    case SW_CLIENT_EINVAL:
        return "invalid_request";
    case SW_CLIENT_ECONNECT:
        return "relay_unreachable";
    case SW_CLIENT_ENOHEAD:
        return "no_head";
    case SW_CLIENT_EKEY:
        return "wrong_access_key";
    case SW_CLIENT_EHEAD:
        return "head_error";
    case SW_CLIENT_EHEADGONE:
        return "head_gone";
    case SW_CLIENT_ETIMEOUT:
        return "timeout";
    case SW_CLIENT_ELOST:
        return "tokens_lost";
    case SW_CLIENT_EBUSY:
        return "busy";
    case SW_CLIENT_ENOMEM:
        return "out_of_memory";
    case SW_CLIENT_ECANCELLED:
        return "cancelled";
    default:
        return "unknown";
    }
}

const char *sw_client_finish_name(int finish)
{
    switch (finish) {
    case SW_CLIENT_FINISH_LENGTH:
        return "length";
    case SW_CLIENT_FINISH_EOS:
        return "eos";
    case SW_CLIENT_FINISH_STOP:
        return "stop";
    case SW_CLIENT_FINISH_DEADLINE:
        return "deadline";
    default:
        return "?";
    }
}

/* ---- connection ------------------------------------------------------------------------- */

sw_client_t *sw_client_new(const sw_client_opts_t *o, char *err, size_t err_len)
{
    if (!o || !o->relay) {
        client_fail(0, err, err_len, "no relay endpoint given");
        return NULL;
    }
    if (sodium_init() < 0) {
        client_fail(0, err, err_len, "libsodium cannot start");
        return NULL;
    }
    /* SW_CLIENT_NAME (cluster init's shardwire.sh sets it: the name the relay's
     * allow-list binds our key to) comes before the program's own default */
    const char *env = getenv("SW_CLIENT_NAME");
    const char *prefix = env && env[0] ? env : o->name && o->name[0] ? o->name : "client";
    char name[SW_CLIENT_NAME_LEN];
    char hex[13];
    client_random_hex(hex, 6);
    if (snprintf(name, sizeof name, "%s-%s", prefix, hex) >= (int)sizeof name ||
        !sw_wire_name_ok(name, strlen(name))) {
        client_fail(0, err, err_len,
                    "client name '%s' must be up to 48 characters of [A-Za-z0-9._-]", prefix);
        return NULL;
    }
    sw_client_t *c = calloc(1, sizeof *c);
    if (c)
        c->reqs = calloc(SW_CLIENT_MAX_INFLIGHT, sizeof *c->reqs);
    if (!c || !c->reqs) {
        free(c);
        client_fail(0, err, err_len, "out of memory");
        return NULL;
    }
    const sw_msg_announce_t an = {.name = name, .role = SW_ROLE_CLIENT};
    sw_peer_opts_t po = {.relay = o->relay,
                         .announce = &an,
                         .connect_timeout_ms = o->connect_timeout_ms,
                         .sec = o->sec,
                         .stop = o->stop,
                         .accept_clear_errors = 1,
                         .rename_on_taken = 1};
    c->peer = sw_peer_new(&po);
    if (!c->peer && o->join_err_logged) {
        if (err && err_len)
            err[0] = 0;
        free(c->reqs);
        free(c);
        return NULL;
    }
    if (!c->peer) {
        client_fail(0, err, err_len,
                    "cannot join the relay at %s (is it running and is the address right? the line "
                    "above says more)",
                    o->relay);
        free(c->reqs);
        free(c);
        return NULL;
    }
    c->sealed = o->sec && o->sec->n_access > 0; /* also with --insecure-loopback */
    c->secure = o->sec && !o->sec->insecure;
    c->announces = sw_peer_announces(c->peer);
    c->progress = o->progress;
    return c;
}

void sw_client_destroy(sw_client_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    sw_client_t *c = *self_p;
    for (int i = 0; i < SW_CLIENT_MAX_INFLIGHT; i++)
        if (c->reqs[i].id[0])
            (void)sw_client_cancel(c, c->reqs[i].id);
    sw_peer_destroy(&c->peer);
    free(c->reqs);
    free(c->ev_text);
    free(c);
    *self_p = NULL;
}

const char *sw_client_name(const sw_client_t *c)
{
    return sw_peer_name(c->peer);
}

int sw_client_poll_items(sw_client_t *c, zmq_pollitem_t *items, int max)
{
    return sw_peer_poll_items(c->peer, items, max);
}

int sw_client_pending(const sw_client_t *c)
{
    return sw_peer_pending(c->peer);
}

int sw_client_inflight(const sw_client_t *c)
{
    return c->n_inflight;
}

/* ---- events ----------------------------------------------------------------------------- */

/* One message from the relay connection. 0 with *ev filled, 1 when it makes no event. */
static int s_on_message(sw_client_t *c, sw_wire_msg_t *m, sw_client_event_t *ev)
{
    sw_msg_t d;
    const sw_msg_type_t type = sw_wire_msg_type(m);
    if ((type != SW_MSG_TOKEN_CHUNK && type != SW_MSG_ERROR && type != SW_MSG_SPOT_REPORT &&
         type != SW_MSG_PROGRESS) ||
        sw_codec_decode(m, type, &d, NULL, 0) != 0)
        return 1;
    if (type == SW_MSG_PROGRESS) {
        /* The head is alive and says when it speaks next: no Resume before then. */
        client_req_t *r = client_req_find(c, d.progress.request_id);
        if (!r || strcmp(m->peer, r->head) != 0)
            return 1;
        const double now = client_now_ms();
        r->last_msg = now;
        r->head_missing = 0;
        r->quiet_until = now + d.progress.next_ms; // <= SW_WIRE_MAX_PROGRESS_MS (wire_check.c)
        if (!c->progress)
            return 1;
        memset(ev, 0, sizeof *ev);
        ev->type = SW_CLIENT_EV_PROGRESS;
        snprintf(ev->id, sizeof ev->id, "%s", r->id);
        ev->prompt_done = (int)d.progress.prompt_done;
        ev->prompt_total = (int)d.progress.prompt_total;
        ev->prompt_finished = (int)d.progress.prompt_finished;
        ev->generated = (int)d.progress.generated;
        return 0;
    }
    if (type == SW_MSG_SPOT_REPORT) {
        client_on_spot_report(c, m, &d.spot);
        return 1;
    }
    if (type == SW_MSG_TOKEN_CHUNK) {
        client_req_t *r = client_req_find(c, d.chunk.request_id);
        if (!r || strcmp(m->peer, r->head) != 0)
            return 1; /* a request we gave up on, or not from its head */
        r->last_msg = client_now_ms();
        r->head_missing = 0;
        return client_on_chunk(c, r, &d.chunk, ev);
    }
    return client_on_error(c, m, &d.error, ev);
}

int sw_client_next(sw_client_t *c, sw_client_event_t *ev, int timeout_ms)
{
    const double end = client_now_ms() + (timeout_ms > 0 ? timeout_ms : 0);
    for (;;) {
        double now = client_now_ms();
        if (c->n_inflight)
            client_resume(c, now);
        if (c->n_inflight && now >= c->next_watch) {
            c->next_watch = now + 500;
            if (client_watch(c, ev) == 0)
                return 0;
        }
        int wait = (int)(end - now);
        if (wait < 0)
            wait = 0;
        if (c->n_inflight && wait > 500)
            wait = 500;
        sw_wire_msg_t m = {0};
        int r = sw_peer_recv(c->peer, &m, wait);
        if (r < 0) {
            /* every request is lost with the connection */
            for (int i = 0; i < SW_CLIENT_MAX_INFLIGHT; i++)
                if (c->reqs[i].id[0]) {
                    client_end_error(c, &c->reqs[i], ev, SW_CLIENT_ECONNECT, 0,
                                     "lost the connection to the relay");
                    return 0;
                }
            return SW_CLIENT_ECONNECT;
        }
        if (r == 1 && (c->n_inflight == 0 || client_now_ms() >= end))
            return 1; /* time is up, or a signal: the caller looks at its flags */
        if (r == 0) {
            int got = s_on_message(c, &m, ev);
            sw_wire_msg_clear(&m);
            if (got == 0)
                return 0;
            if (client_now_ms() >= end)
                return 1;
        }
    }
}
