/*
 * gateway_endpoints.c - the responses every endpoint of the gateway sends
 * (gw_http_send, gw_http_error) and the endpoints that generate nothing:
 * the models the heads serve, /health, /metrics, the cluster page's numbers,
 * the defaults of a request's fields (the web page fills its settings from
 * them) and the web page's files (gateway_impl.h; docs/api.md).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "codec.h"
#include "gateway_impl.h"
#include "web.h"

/* ---- responses --------------------------------------------------------------------------- */

enum MHD_Result gw_http_send(gw_t *g, struct MHD_Connection *c, const char *ep, int status,
                             char *body, const char *ctype, int retry_after_s)
{
    if (!body) {
        status = MHD_HTTP_INTERNAL_SERVER_ERROR;
        body = strdup("{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\","
                      "\"param\":null,\"code\":\"out_of_memory\"}}");
        if (!body)
            return MHD_NO;
    }
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    if (status == MHD_HTTP_UNAUTHORIZED)
        MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    if (retry_after_s > 0) {
        char ra[16];
        snprintf(ra, sizeof ra, "%d", retry_after_s);
        MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, ra);
    }
    enum MHD_Result rc = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    gw_metrics_response(g->metrics, ep, status);
    return rc;
}

enum MHD_Result gw_http_error(gw_t *g, struct MHD_Connection *c, const char *ep, int status,
                              const char *message, const char *type, const char *param,
                              const char *code)
{
    return gw_http_send(
        g, c, ep, status, gw_json_error(message, type, param, code), "application/json",
        status == MHD_HTTP_SERVICE_UNAVAILABLE || status == MHD_HTTP_TOO_MANY_REQUESTS ? 1 : 0);
}

int gw_status_of(int code, int wire_code, const char **type)
{
    *type = "server_error";
    switch (code) {
    case SW_CLIENT_EINVAL:
        *type = "invalid_request_error";
        return MHD_HTTP_BAD_REQUEST;
    case SW_CLIENT_EHEAD:
        if (wire_code == SW_ERROR_BAD_REQUEST) {
            *type = "invalid_request_error";
            return MHD_HTTP_BAD_REQUEST;
        }
        if (wire_code == SW_ERROR_BUSY || wire_code == SW_ERROR_DEST_BUSY)
            return MHD_HTTP_SERVICE_UNAVAILABLE;
        if (wire_code == SW_ERROR_DEADLINE)
            return MHD_HTTP_GATEWAY_TIMEOUT;
        return MHD_HTTP_BAD_GATEWAY;
    case SW_CLIENT_ETIMEOUT:
        return MHD_HTTP_GATEWAY_TIMEOUT;
    case SW_CLIENT_ENOHEAD:
    case SW_CLIENT_ECONNECT:
    case SW_CLIENT_EBUSY:
        return MHD_HTTP_SERVICE_UNAVAILABLE;
    case SW_CLIENT_ENOMEM:
        return MHD_HTTP_INTERNAL_SERVER_ERROR;
    case GW_DISP_ELINK: /* the dispatcher thread cannot be reached now (the gateway stops) */
        return MHD_HTTP_SERVICE_UNAVAILABLE;
    case GW_DISP_EREPLY:
        return MHD_HTTP_BAD_GATEWAY;
    default: /* EKEY, EHEADGONE, ELOST, ECANCELLED: the cluster side failed */
        return MHD_HTTP_BAD_GATEWAY;
    }
}

/* ---- models ------------------------------------------------------------------------------ */

/* The relay's peer table (gw_call_table, at most 1 s old) into *t: 0, or a code after a line
 * in err (gw_call_table's, or gw_call_new's: SW_CLIENT_ENOMEM, GW_DISP_ELINK). The caller clears
 * *t. */
static int s_table(gw_t *g, sw_client_table_t *t, char *err, size_t err_len)
{
    memset(t, 0, sizeof *t);
    int rc;
    gw_call_t *call = gw_call_new(g->disp, &rc, err, err_len);
    if (call)
        rc = gw_call_table(call, t, err, err_len);
    gw_call_destroy(&call);
    return rc;
}

/* /v1/models (url NULL) or /v1/models/{id}. */
static enum MHD_Result s_models_list(gw_t *g, struct MHD_Connection *c, const char *ep,
                                     const char *url)
{
    sw_client_table_t t;
    char err[512];
    int rc = s_table(g, &t, err, sizeof err);
    if (rc != 0) { /* as a generation's model check answers it (gw_status_of) */
        const char *type;
        const int status = gw_status_of(rc, 0, &type);
        return gw_http_error(g, c, ep, status, err, type, NULL, gw_disp_strerror(rc));
    }
    char *body = gw_json_models(&t, (long long)time(NULL));
    sw_client_table_clear(&t);
    if (!url || !body)
        return gw_http_send(g, c, ep, MHD_HTTP_OK, body, "application/json", 0);
    /* /v1/models/{id}: that entry of the list, or 404 */
    const char *want = url + strlen("/v1/models/");
    json_error_t je;
    json_t *list = json_loads(body, 0, &je), *m;
    free(body);
    size_t i;
    char *one = NULL;
    json_array_foreach(json_object_get(list, "data"), i, m)
    {
        if (!strcmp(json_string_value(json_object_get(m, "id")), want))
            one = json_dumps(m, JSON_COMPACT);
    }
    json_decref(list);
    if (one)
        return gw_http_send(g, c, ep, MHD_HTTP_OK, one, "application/json", 0);
    return gw_http_error(g, c, ep, MHD_HTTP_NOT_FOUND, "no such model here",
                         "invalid_request_error", "model", "model_not_found");
}

enum MHD_Result gw_ep_models(gw_t *g, struct MHD_Connection *c, gw_conn_t *sc, const char *url)
{
    (void)url;
    return s_models_list(g, c, gw_conn_ep(sc), NULL);
}

enum MHD_Result gw_ep_model(gw_t *g, struct MHD_Connection *c, gw_conn_t *sc, const char *url)
{
    return s_models_list(g, c, gw_conn_ep(sc), url);
}

/* ---- health, metrics, the cluster page, the defaults --------------------------------------- */

/*
 * The first layer of [0, n_layers) that no node of the head's model holds
 * (standby nodes hold none), or -1 when every layer is held: a head whose
 * pipeline has such a gap cannot answer a request. *gap_end: where it ends.
 */
static int64_t s_gap(const sw_client_table_t *t, const sw_client_peer_t *head, int64_t *gap_end)
{
    int64_t at = 0;
    for (;;) {
        int64_t reach = at;
        for (int i = 0; i < t->n_peers; i++) {
            const sw_client_peer_t *p = &t->peers[i];
            if (p->is_node && !p->standby && !strcmp(p->model, head->model) &&
                p->n_layers == head->n_layers && p->layer_begin <= at && p->layer_end > reach)
                reach = p->layer_end;
        }
        if (reach >= head->n_layers)
            return -1;
        if (reach == at) { /* nothing starts at or before at: the gap runs to the next start */
            int64_t next = head->n_layers;
            for (int i = 0; i < t->n_peers; i++) {
                const sw_client_peer_t *p = &t->peers[i];
                if (p->is_node && !p->standby && !strcmp(p->model, head->model) &&
                    p->layer_begin > at && p->layer_begin < next)
                    next = p->layer_begin;
            }
            *gap_end = next;
            return at;
        }
        at = reach;
    }
}

/*
 * GET /health (docs/api.md): "status" is "ok" (the relay answers and every
 * head's pipeline holds all its model's layers), "degraded" (the relay
 * answers, but a node is there without a head, or a pipeline has a gap:
 * "gaps" names them) or "down" (no relay, no node at all, or no peer table:
 * "error_code" says what failed, relay_unreachable or the gateway's own). The HTTP status
 * is 200 when some head can answer a request (ok, or degraded with a complete
 * pipeline beside a broken one), else 503, so that a load balancer sends
 * requests only where they can run. Only heads this gateway would send
 * requests to count (sw_client_trusted_head); the others are untrusted_heads.
 */
enum MHD_Result gw_ep_health(gw_t *g, struct MHD_Connection *c, gw_conn_t *sc, const char *url)
{
    (void)url;
    sw_client_table_t t;
    char err[512];
    int rc = s_table(g, &t, err, sizeof err);
    int heads = 0, nodes = 0, complete = 0, untrusted = 0;
    json_t *j = json_object(), *gaps = json_array();
    if (rc == 0) {
        for (int i = 0; i < t.n_peers; i++) {
            const sw_client_peer_t *p = &t.peers[i];
            nodes += p->is_node;
            if (!sw_client_peer_serves(p, NULL))
                continue;
            /* a head requests never go to (its key not bound to its name, or not to the
             * head role while another's is) cannot make the answer 200 */
            if (!sw_client_trusted_head(&t, p)) {
                untrusted++;
                continue;
            }
            heads++;
            int64_t end = 0, gap = s_gap(&t, p, &end);
            if (gap < 0) {
                complete++;
                continue;
            }
            char line[256];
            snprintf(line, sizeof line, "head %s (%s): no node holds layers %lld:%lld of %u",
                     p->name, p->model_name[0] ? p->model_name : p->model, (long long)gap,
                     (long long)end, p->n_layers);
            json_array_append_new(gaps, json_string(line));
        }
        sw_client_table_clear(&t);
    }
    const char *status = rc != 0 || !nodes            ? "down"
                         : heads && complete == heads ? "ok"
                                                      : "degraded";
    json_object_set_new(j, "status", json_string(status));
    json_object_set_new(j, "relay", json_string(g->o->relay));
    /* only a relay that did not answer is down: a table lost on the gateway's side (its memory,
     * its dispatcher thread) says so in error_code */
    json_object_set_new(j, "relay_connected", json_boolean(rc != SW_CLIENT_ECONNECT));
    if (rc != 0)
        json_object_set_new(j, "error_code", json_string(gw_disp_strerror(rc)));
    json_object_set_new(j, "heads", json_integer(heads));
    json_object_set_new(j, "untrusted_heads", json_integer(untrusted));
    json_object_set_new(j, "complete_heads", json_integer(complete));
    json_object_set_new(j, "nodes", json_integer(nodes));
    json_object_set_new(j, "gaps", gaps);
    if (rc != 0)
        json_object_set_new(j, "error", json_string(err));
    else if (!nodes)
        json_object_set_new(j, "error", json_string("no node is connected to the relay"));
    else if (!heads)
        json_object_set_new(j, "error",
                            json_string(untrusted ? "no head this gateway trusts is connected: "
                                                    "a head's key must be bound to its name "
                                                    "(and role) in the relay's --allow list"
                                                  : "no head node is connected to the relay"));
    else if (json_array_size(gaps))
        json_object_set_new(j, "error", json_incref(json_array_get(gaps, 0)));
    char *body = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    return gw_http_send(g, c, gw_conn_ep(sc), complete ? MHD_HTTP_OK : MHD_HTTP_SERVICE_UNAVAILABLE,
                        body, "application/json", 0);
}

enum MHD_Result gw_ep_metrics(gw_t *g, struct MHD_Connection *c, gw_conn_t *sc, const char *url)
{
    (void)url;
    return gw_http_send(g, c, gw_conn_ep(sc), MHD_HTTP_OK, gw_metrics_text(g->metrics),
                        "text/plain; version=0.0.4", 0);
}

/* The cluster page's numbers: the relay's peer table and the gateway's own (web.h). A table
 * that could not be had is part of the answer (relay.error and .error_code; relay.connected
 * false only when the relay did not answer), not an error. */
enum MHD_Result gw_ep_cluster(gw_t *g, struct MHD_Connection *c, gw_conn_t *sc, const char *url)
{
    (void)url;
    sw_client_table_t t;
    char err[512];
    int rc = s_table(g, &t, err, sizeof err);
    const gw_web_relay_t rl = {.endpoint = g->o->relay,
                               .connected = rc != SW_CLIENT_ECONNECT,
                               .error = err,
                               .error_code = gw_disp_strerror(rc)};
    char *body = gw_web_cluster_json(rc == 0 ? &t : NULL, &rl, gw_metrics_json(g->metrics),
                                     g->o->max_inflight);
    if (rc == 0)
        sw_client_table_clear(&t);
    return gw_http_send(g, c, gw_conn_ep(sc), MHD_HTTP_OK, body, "application/json", 0);
}

/* What a request gets for the fields it leaves out (serve's flags), with each field's range:
 * the web page fills its settings from it, so that it never keeps a copy of its own. */
enum MHD_Result gw_ep_defaults(gw_t *g, struct MHD_Connection *c, gw_conn_t *sc, const char *url)
{
    (void)url;
    return gw_http_send(g, c, gw_conn_ep(sc), MHD_HTTP_OK, gw_json_defaults(&g->o->defaults),
                        "application/json", 0);
}

/* ---- the web page ------------------------------------------------------------------------ */

/* One file of the embedded web page (web.h): no key, the API calls it makes need one. */
enum MHD_Result gw_ep_web(gw_t *g, struct MHD_Connection *c, gw_conn_t *sc, const char *url)
{
    const gw_web_file_t *f = gw_web_find(url);
    if (!f)
        return gw_http_error(g, c, gw_conn_ep(sc), MHD_HTTP_NOT_FOUND,
                             "no such file in the web page", "invalid_request_error", NULL,
                             "not_found");
    /* PERSISTENT: MHD reads the static bytes and never writes or frees them */
    struct MHD_Response *r =
        MHD_create_response_from_buffer(f->len, (void *)f->data, MHD_RESPMEM_PERSISTENT);
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, f->ctype);
    MHD_add_response_header(r, "Content-Security-Policy", GW_WEB_CSP);
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(r, "X-Frame-Options", "DENY");
    MHD_add_response_header(r, "Referrer-Policy", "no-referrer");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    enum MHD_Result rc = MHD_queue_response(c, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    gw_metrics_response(g->metrics, gw_conn_ep(sc), MHD_HTTP_OK);
    return rc;
}
