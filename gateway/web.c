/*
 * web.c - the embedded web page's lookup and the cluster page's JSON (web.h).
 */
#include "web.h"

#include <string.h>
#include <time.h>

const gw_web_file_t *gw_web_find(const char *url)
{
    for (size_t i = 0; i < gw_web_n_files; i++)
        if (!strcmp(gw_web_files[i].path, url))
            return &gw_web_files[i];
    return NULL;
}

static json_t *s_node(const sw_client_peer_t *p)
{
    json_t *n = json_object();
    json_object_set_new(n, "name", json_string(p->name));
    json_object_set_new(n, "role", json_string(p->role));
    json_object_set_new(n, "layer_begin", json_integer(p->layer_begin));
    json_object_set_new(n, "layer_end", json_integer(p->layer_end));
    json_object_set_new(n, "n_layers", json_integer(p->n_layers));
    json_object_set_new(n, "model", json_string(p->model_name[0] ? p->model_name : p->model));
    json_object_set_new(n, "fingerprint", json_string(p->model));
    json_object_set_new(n, "backend", json_string(p->backend));
    json_object_set_new(n, "max_sessions", json_integer(p->max_sessions));
    json_object_set_new(n, "n_ctx", json_integer(p->n_ctx));
    json_object_set_new(n, "kv_mib", json_integer(p->kv_mib));
    json_object_set_new(n, "kv_full", json_integer(p->kv_full));
    json_object_set_new(n, "kv_type", json_string(p->kv_type ? p->kv_type : "f16"));
    json_object_set_new(n, "heartbeat_age_ms", json_integer(p->heartbeat_age_ms));
    json_object_set_new(n, "idle_ms", json_integer(p->idle_ms));
    json_object_set_new(n, "msgs_in", json_integer((json_int_t)p->msgs_in));
    json_object_set_new(n, "msgs_out", json_integer((json_int_t)p->msgs_out));
    json_object_set_new(n, "key_bound", json_boolean(p->key_bound));
    json_object_set_new(n, "role_bound", json_boolean(p->role_bound));
    return n;
}

json_t *gw_web_hops_json(const sw_client_table_t *t, const char *relay)
{
    json_t *hops = json_array();
    sw_client_hop_t hv[4 * SW_WIRE_MAX_ROUTE];
    const int n = sw_client_hops(t, hv, (int)(sizeof hv / sizeof hv[0]));
    for (int i = 0; i < n && i < (int)(sizeof hv / sizeof hv[0]); i++) {
        json_t *h = json_object();
        json_object_set_new(h, "from", json_string(hv[i].from));
        json_object_set_new(h, "to", json_string(hv[i].to));
        json_object_set_new(h, "model", json_string(hv[i].model));
        json_object_set_new(h, "path", json_string(hv[i].direct ? "direct" : "relay"));
        if (!hv[i].direct)
            json_object_set_new(h, "relay", json_string(relay));
        json_object_set_new(h, "rtt_ms",
                            hv[i].rtt_us >= 0 ? json_real(hv[i].rtt_us / 1e3) : json_null());
        json_array_append_new(hops, h);
    }
    return hops;
}

char *gw_web_cluster_json(const sw_client_table_t *t, const gw_web_relay_t *relay, json_t *gateway,
                          int max_inflight)
{
    json_t *j = json_object(), *rl = json_object(), *nodes = json_array();
    int clients = 0;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    json_object_set_new(j, "object", json_string("shardwire.cluster"));
    json_object_set_new(j, "time_ms", json_real(now.tv_sec * 1e3 + now.tv_nsec / 1e6));
    json_object_set_new(rl, "endpoint", json_string(relay->endpoint));
    json_object_set_new(rl, "connected", json_boolean(t || relay->connected));
    if (t) {
        json_object_set_new(rl, "uptime_ms", json_integer((json_int_t)t->uptime_ms));
        json_object_set_new(rl, "forwarded", json_integer((json_int_t)t->forwarded));
        json_object_set_new(rl, "dropped", json_integer((json_int_t)t->dropped));
        /* the pipeline in order: by first layer, one pass per distinct first layer */
        uint32_t begin = 0;
        for (int pass = 0; pass < t->n_peers; pass++) {
            uint32_t next = UINT32_MAX;
            for (int i = 0; i < t->n_peers; i++) {
                const sw_client_peer_t *p = &t->peers[i];
                if (!p->is_node)
                    continue;
                if (p->layer_begin == begin)
                    json_array_append_new(nodes, s_node(p));
                else if (p->layer_begin > begin && p->layer_begin < next)
                    next = p->layer_begin;
            }
            if (next == UINT32_MAX)
                break;
            begin = next;
        }
        for (int i = 0; i < t->n_peers; i++)
            clients += !t->peers[i].is_node;
        /* per hop of each pipeline: the path that carries it and its round trip (issue 39) */
        json_object_set_new(j, "hops", gw_web_hops_json(t, relay->endpoint));
    } else {
        json_object_set_new(rl, "error", json_string(relay->error ? relay->error : "no answer"));
        json_object_set_new(rl, "error_code",
                            json_string(relay->error_code ? relay->error_code : "unknown"));
    }
    json_object_set_new(j, "relay", rl);
    json_object_set_new(j, "nodes", nodes);
    json_object_set_new(j, "clients", json_integer(clients));
    if (gateway) {
        json_object_set_new(gateway, "max_inflight", json_integer(max_inflight));
        json_object_set_new(j, "gateway", gateway);
    } else {
        json_object_set_new(j, "gateway", json_null());
    }
    char *s = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    return s;
}
