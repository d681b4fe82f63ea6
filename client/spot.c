/*
 * spot.c - the heads' spot-check reports (client.h): a SpotQuery sent to a
 * head and the SpotReport it brings, kept per head (sw_client_spot_ask,
 * sw_client_spot_take) or awaited (sw_client_spot).
 */
#include "client_impl.h"

#include <stdio.h>
#include <string.h>

/* A decoded SpotReport into the client's form. */
static void s_spot_copy(sw_client_spot_t *out, const sw_msg_spot_report_t *r)
{
    memset(out, 0, sizeof *out);
    out->share = r->share;
    out->sessions_checked = r->sessions_checked;
    out->rounds_compared = r->rounds_compared;
    out->mismatches = r->mismatches;
    for (uint32_t i = 0; i < r->n_nodes && i < SW_WIRE_MAX_SPOT_NODES; i++) {
        client_clean(out->nodes[i].name, sizeof out->nodes[i].name, r->nodes[i].name);
        out->nodes[i].convicted = r->nodes[i].convicted;
        out->nodes[i].avoid_s = r->nodes[i].avoid_s;
        out->n_nodes++;
    }
}

int sw_client_spot_ask(sw_client_t *c, const char *head)
{
    if (!head || !sw_wire_name_ok(head, strnlen(head, SW_WIRE_NAME_MAX + 1)))
        return SW_CLIENT_EINVAL;
    int at = -1, oldest = 0;
    for (int i = 0; i < CLIENT_SPOT_HEADS && at < 0; i++)
        if (!strcmp(c->spot[i].head, head))
            at = i;
    for (int i = 0; i < CLIENT_SPOT_HEADS && at < 0; i++)
        if (!c->spot[i].head[0])
            at = i;
    for (int i = 1; i < CLIENT_SPOT_HEADS && at < 0; i++)
        if (c->spot[i].asked_at < c->spot[oldest].asked_at)
            oldest = i;
    if (at < 0) { /* every slot taken: the head asked longest ago gives its place */
        at = oldest;
        memset(&c->spot[at], 0, sizeof c->spot[at]);
    }
    const sw_msg_t q = {.type = SW_MSG_SPOT_QUERY};
    if (sw_peer_try_send_msg(c->peer, head, &q) != 0)
        return SW_CLIENT_ECONNECT;
    snprintf(c->spot[at].head, sizeof c->spot[at].head, "%s", head);
    c->spot[at].asked_at = client_now_ms();
    return 0;
}

int sw_client_spot_take(sw_client_t *c, char head[SW_CLIENT_NAME_LEN], sw_client_spot_t *out)
{
    for (int i = 0; i < CLIENT_SPOT_HEADS; i++)
        if (c->spot[i].head[0] && c->spot[i].fresh) {
            c->spot[i].fresh = 0;
            memcpy(head, c->spot[i].head, SW_CLIENT_NAME_LEN);
            *out = c->spot[i].report;
            return 0;
        }
    return 1;
}

/* A SpotReport read by sw_client_next: kept when it comes from a head asked
 * lately (sealed when the cluster seals), else ignored. */
void client_on_spot_report(sw_client_t *c, const sw_wire_msg_t *m, const sw_msg_spot_report_t *r)
{
    if (c->sealed && !m->sealed)
        return;
    for (int i = 0; i < CLIENT_SPOT_HEADS; i++)
        if (c->spot[i].head[0] && !strcmp(c->spot[i].head, m->peer) &&
            client_now_ms() - c->spot[i].asked_at < CLIENT_SPOT_WAIT_MS) {
            s_spot_copy(&c->spot[i].report, r);
            c->spot[i].fresh = 1;
        }
}

int sw_client_spot(sw_client_t *c, const char *head, sw_client_spot_t *out, int timeout_ms,
                   char *err, size_t err_len)
{
    memset(out, 0, sizeof *out);
    if (c->n_inflight)
        return client_fail(SW_CLIENT_EBUSY, err, err_len, "requests are in flight");
    const sw_msg_t q = {.type = SW_MSG_SPOT_QUERY};
    if (sw_peer_send_msg(c->peer, head, &q) != 0)
        return client_fail(SW_CLIENT_ECONNECT, err, err_len, "could not send the query to %s",
                           head);
    const double end = client_now_ms() + timeout_ms;
    for (double now = client_now_ms(); now < end; now = client_now_ms()) {
        sw_wire_msg_t m = {0};
        const int r = sw_peer_recv(c->peer, &m, (int)(end - now) + 1);
        if (r < 0)
            return client_fail(SW_CLIENT_ECONNECT, err, err_len,
                               "lost the connection to the relay");
        if (r != 0)
            continue;
        sw_msg_t d;
        const sw_msg_type_t type = sw_wire_msg_type(&m);
        int rc = 1;
        if (type == SW_MSG_SPOT_REPORT && !strcmp(m.peer, head) &&
            sw_codec_decode(&m, SW_MSG_SPOT_REPORT, &d, NULL, 0) == 0) {
            s_spot_copy(out, &d.spot);
            rc = 0;
        } else if (type == SW_MSG_ERROR && sw_codec_decode(&m, SW_MSG_ERROR, &d, NULL, 0) == 0 &&
                   (!strcmp(m.peer, head) || !strcmp(d.error.dest, head))) {
            rc =
                d.error.code == SW_ERROR_UNKNOWN_DEST
                    ? client_fail(SW_CLIENT_ENOHEAD, err, err_len,
                                  "no peer called '%s' is connected to the relay (shardwire status "
                                  "lists the heads)",
                                  head)
                    : client_fail(SW_CLIENT_ENOHEAD, err, err_len, "%s did not answer: %s (%s)",
                                  head, sw_wire_error_code_name(d.error.code), d.error.message);
        }
        sw_wire_msg_clear(&m);
        if (rc <= 0)
            return rc;
    }
    return client_fail(SW_CLIENT_ETIMEOUT, err, err_len,
                       "%s did not answer the spot query within %d ms (a head of wire version 7?)",
                       head, timeout_ms);
}
