/*
 * status.c - `shardwire status`: prints the relay's peer table (names,
 * roles, layer ranges, heartbeat ages, models), and with --spot what a
 * head's spot checks found.
 *
 *   shardwire status --relay HOST:PORT [--json] [--expect NAME[,NAME...]]
 *                    [--spot HEAD] [--connect-timeout-s S] SECURITY
 *
 * Started before the relay or the nodes, it keeps trying, one line per
 * attempt, for --connect-timeout-s (default SW_CLIENT_DEFAULT_CONNECT_S; 0 =
 * no limit): to reach the relay, and with --expect until the named peers are
 * connected. It needs a client key on the relay's allow-list, no access key
 * (keys.h).
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "args.h"
#include "client.h"
#include "cmds.h"
#include "keys.h"
#include "web.h"
#include "wire.h"

enum { O_EXPECT = SW_OPT_OWN, O_SPOT };

static const sw_opt_t s_opts[] = {
    {"json", SW_OPT_JSON, NULL, "print the peer table as one JSON object"},
    {"expect", O_EXPECT, "NAMES",
     "wait (up to the connect timeout) until these peers\n(comma-separated) are connected; exit 1 "
     "if they are not"},
    {"spot", O_SPOT, "HEAD",
     "also ask head HEAD what its spot checks found (nodes\nconvicted or disputed; needs the "
     "access key;\ndocs/security.md)"},
};

static const sw_opt_group_t s_groups[] = {
    SW_ARGS_GROUP(NULL, s_opts),
    SW_ARGS_GROUP_RELAY,
    SW_ARGS_GROUP_SECURITY,
};

static const sw_args_spec_t s_spec = {
    .prog = "shardwire status",
    .usage = "--relay HOST:PORT [--json] [--expect NAME[,NAME...]] [--spot HEAD] SECURITY",
    .about = "  The relay's peers: names, roles, layer ranges, heartbeat ages, models.\n"
             "  Needs a client key on the relay's allow-list, no access key.\n",
    .groups = s_groups,
    .n_groups = SW_ARGS_COUNT(s_groups),
};

struct s_status_opts {
    sw_sec_args_t sec;     /* the security flags (no access key needed) */
    sw_args_relay_t relay; /* --relay, --connect-timeout-s */
    const char *expect;    /* --expect NAMES, or NULL */
    const char *spot_head; /* --spot HEAD, or NULL */
    int json;              /* --json */
};

/* -1 when the options are good (o filled), else the exit code: 0 after --help /
 * --version, 2 after a usage error's line. */
static int s_status_parse(int argc, char **argv, struct s_status_opts *o)
{
    const char *P = s_spec.prog, *v;
    /* the relay operator has no access key */
    *o = (struct s_status_opts){.sec = {.e2e_optional = 1}, .relay = SW_ARGS_RELAY_DEFAULT};
    int c;
    sw_args_t a;
    sw_args_init(&a, &s_spec, argc, argv);
    while ((c = sw_args_next(&a, &v)) >= 0) {
        int h = sw_sec_args_opt(&o->sec, c, v);
        if (!h)
            h = sw_args_relay_opt(P, &o->relay, c, v);
        if (!h && c == SW_OPT_JSON)
            h = o->json = 1;
        if (!h && c == O_EXPECT) {
            o->expect = v;
            h = 1;
        }
        if (!h && c == O_SPOT) {
            if (!sw_wire_name_ok(v, strlen(v)))
                return sw_args_exit(sw_args_fail(&s_spec, "--spot '%s' is no peer name", v));
            o->spot_head = v;
            h = 1;
        }
        if (h <= 0)
            return 2;
    }
    if ((c = sw_args_finish(&a, c, 0)) >= 0)
        return c;
    if (!o->relay.relay[0])
        return sw_args_exit(sw_args_fail(&s_spec, "--relay HOST:PORT is required"));
    if (o->spot_head) /* a head opens only a SpotQuery sealed with its access key */
        o->sec.e2e_optional = 0;
    return -1;
}

/* 1 when every comma-separated name in expect is in the table (missing is
 * then ""); else 0 and the first missing one in missing. */
static int s_has_names(const sw_client_table_t *t, const char *expect, char *missing, size_t len)
{
    missing[0] = 0; /* a name missing on an earlier attempt may have come since */
    for (const char *p = expect; p && *p;) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        int found = n == 0;
        for (int i = 0; i < t->n_peers && !found; i++)
            found = strlen(t->peers[i].name) == n && !strncmp(t->peers[i].name, p, n);
        if (!found) {
            snprintf(missing, len, "%.*s", (int)(n < 64 ? n : 64), p);
            return 0;
        }
        p = comma ? comma + 1 : NULL;
    }
    return 1;
}

/*
 * The relay's peer table into *t, asked again until every --expect name is in it or the connect
 * deadline (from t_start) passed; the first name still missing then in missing ("" when none).
 * 0, or -1 after one line when the relay did not answer (*t is then empty).
 */
static int s_status_table(const struct s_status_opts *o, sw_client_t *cl, double t_start,
                          sw_client_table_t *t, char *missing, size_t missing_len)
{
    const int connect_ms = cli_connect_ms(o->relay.connect_s);
    const double deadline = connect_ms < 0 ? -1 : t_start + connect_ms;
    char err[512];
    for (int attempt = 1;; attempt++) {
        if (sw_client_status(cl, t, 5000, err, sizeof err) != 0) {
            fprintf(stderr, "shardwire status: the relay at %s did not answer\n", o->relay.relay);
            return -1;
        }
        if (!o->expect || s_has_names(t, o->expect, missing, missing_len))
            return 0;
        double left = deadline < 0 ? 2000 : deadline - cli_now_ms();
        double wait = attempt < 4 ? 250 << attempt : 2000;
        if (wait > left)
            wait = left;
        if (wait <= 0)
            return 0;
        fprintf(stderr,
                "shardwire status: '%s' is not connected yet (attempt %d); asking again in "
                "%.1f s\n",
                missing, attempt, wait / 1e3);
        sw_client_table_clear(t);
        usleep((useconds_t)(wait * 1000));
    }
}

/* The spot report of head as a JSON object (new reference). */
static json_t *s_spot_json(const char *head, const sw_client_spot_t *spot)
{
    json_t *o = json_object(), *nodes = json_array();
    json_object_set_new(o, "head", json_string(head));
    json_object_set_new(o, "share", json_real(spot->share));
    json_object_set_new(o, "sessions_checked", json_integer((json_int_t)spot->sessions_checked));
    json_object_set_new(o, "rounds_compared", json_integer((json_int_t)spot->rounds_compared));
    json_object_set_new(o, "mismatches", json_integer((json_int_t)spot->mismatches));
    for (int i = 0; i < spot->n_nodes; i++) {
        json_t *nd = json_object();
        json_object_set_new(nd, "name", json_string(spot->nodes[i].name));
        json_object_set_new(nd, "convicted", json_boolean(spot->nodes[i].convicted));
        json_object_set_new(nd, "avoid_s", json_integer(spot->nodes[i].avoid_s));
        json_array_append_new(nodes, nd);
    }
    json_object_set_new(o, "nodes", nodes);
    return o;
}

/* One peer of the table as a JSON object (new reference). */
static json_t *s_peer_json(const sw_client_peer_t *p)
{
    json_t *o = json_object();
    json_object_set_new(o, "name", json_string(p->name));
    json_object_set_new(o, "role", json_string(p->role));
    json_object_set_new(o, "layer_begin", json_integer(p->layer_begin));
    json_object_set_new(o, "layer_end", json_integer(p->layer_end));
    json_object_set_new(o, "n_layers", json_integer(p->n_layers));
    json_object_set_new(o, "model", json_string(p->model));
    json_object_set_new(o, "key_bound", json_boolean(p->key_bound));
    json_object_set_new(o, "role_bound", json_boolean(p->role_bound));
    json_object_set_new(o, "heartbeat_age_ms", json_integer(p->heartbeat_age_ms));
    json_object_set_new(o, "idle_ms", json_integer(p->idle_ms));
    json_object_set_new(o, "msgs_in", json_integer((json_int_t)p->msgs_in));
    json_object_set_new(o, "msgs_out", json_integer((json_int_t)p->msgs_out));
    if (p->is_node) {
        json_object_set_new(o, "auto", json_boolean(p->auto_place));
        json_object_set_new(o, "standby", json_boolean(p->standby));
        json_object_set_new(o, "mem_mib", json_integer(p->mem_mib));
        json_object_set_new(o, "us_layer_1", json_integer(p->us_layer_1));
        json_object_set_new(o, "us_layer_k", json_integer(p->us_layer_k));
        json_object_set_new(o, "probe_rows", json_integer(p->probe_rows));
        json_object_set_new(o, "us_out_1", json_integer(p->us_out_1));
        json_object_set_new(o, "us_out_k", json_integer(p->us_out_k));
        json_object_set_new(o, "rtt_us", json_integer(p->rtt_us));
        json_object_set_new(o, "kv_kib_layer", json_integer(p->kv_kib_layer));
        json_object_set_new(o, "max_sessions", json_integer(p->max_sessions));
        json_object_set_new(o, "n_ctx", json_integer(p->n_ctx));
        json_object_set_new(o, "kv_mib", json_integer(p->kv_mib));
        json_object_set_new(o, "kv_full", json_integer(p->kv_full));
        json_object_set_new(o, "kv_type", json_string(p->kv_type));
    }
    return o;
}

/* --json: the table (and the spot report when spot is not NULL) as one line. */
static void s_print_json(const char *relay, const sw_client_table_t *t, const char *head,
                         const sw_client_spot_t *spot)
{
    json_t *j = json_object(), *arr = json_array();
    if (spot)
        json_object_set_new(j, "spot", s_spot_json(head, spot));
    for (int i = 0; i < t->n_peers; i++)
        json_array_append_new(arr, s_peer_json(&t->peers[i]));
    json_object_set_new(j, "peers", arr);
    json_object_set_new(j, "hops", gw_web_hops_json(t, relay)); /* the web page's list */
    json_object_set_new(j, "uptime_ms", json_integer((json_int_t)t->uptime_ms));
    json_object_set_new(j, "forwarded", json_integer((json_int_t)t->forwarded));
    json_object_set_new(j, "dropped", json_integer((json_int_t)t->dropped));
    char *s = json_dumps(j, JSON_COMPACT);
    if (s)
        printf("%s\n", s);
    free(s);
    json_decref(j);
}

/* The table (and the spot report when spot is not NULL) for people. */
static void s_print_text(const char *relay, const sw_client_table_t *t, const char *head,
                         const sw_client_spot_t *spot)
{
    printf("relay %s: up %.1f s, %llu forwarded, %llu dropped\n", relay, t->uptime_ms / 1e3,
           (unsigned long long)t->forwarded, (unsigned long long)t->dropped);
    printf("%-24s %-7s %-12s %-14s %-12s %-10s %s\n", "NAME", "ROLE", "LAYERS", "HEARTBEAT AGE",
           "MODEL", "KEY BINDS", "SESSIONS");
    for (int i = 0; i < t->n_peers; i++) {
        const sw_client_peer_t *p = &t->peers[i];
        char layers[32] = "-";
        if (p->standby)
            snprintf(layers, sizeof layers, "auto/%u", p->n_layers);
        else if (p->is_node)
            snprintf(layers, sizeof layers, "%u:%u/%u", p->layer_begin, p->layer_end, p->n_layers);
        /* what the relay's allow-list binds its key to (docs/security.md section 2) */
        const char *binds = p->role_bound ? "name+role" : p->key_bound ? "name" : "-";
        /* "8, 5 of 32768 positions (f16, 2500 MiB)": slots, and how many of them
         * fit at full length in the KV memory (issue 33) */
        char sessions[96] = "-";
        if (p->is_node && p->n_ctx)
            snprintf(sessions, sizeof sessions, "%u, %u of %u positions (%s, %u MiB)",
                     p->max_sessions, p->kv_full, p->n_ctx, p->kv_type, p->kv_mib);
        printf("%-24s %-7s %-12s %-14.1f %-12.12s %-10s %s\n", p->name, p->role, layers,
               p->heartbeat_age_ms / 1e3, p->model, binds, sessions);
    }
    sw_client_hop_t hops[4 * SW_WIRE_MAX_ROUTE];
    const int n_hops = sw_client_hops(t, hops, (int)(sizeof hops / sizeof hops[0]));
    for (int i = 0; i < n_hops && i < (int)(sizeof hops / sizeof hops[0]); i++) {
        char rtt[32] = "round trip not measured";
        if (hops[i].rtt_us >= 0)
            snprintf(rtt, sizeof rtt, "round trip %.2f ms", hops[i].rtt_us / 1e3);
        printf("hop %s -> %s: %s%s, %s\n", hops[i].from, hops[i].to,
               hops[i].direct ? "direct" : "relay ", hops[i].direct ? "" : relay, rtt);
    }
    if (!spot)
        return;
    printf("spot checks of %s (share %g): %llu sessions checked, %llu rounds compared, "
           "%llu mismatches\n",
           head, (double)spot->share, (unsigned long long)spot->sessions_checked,
           (unsigned long long)spot->rounds_compared, (unsigned long long)spot->mismatches);
    for (int i = 0; i < spot->n_nodes; i++)
        printf("  %-24s %-9s avoided for %u s more\n", spot->nodes[i].name,
               spot->nodes[i].convicted ? "convicted" : "disputed", spot->nodes[i].avoid_s);
}

/* Several relays: a line per relay (live, the round trip from here, whether this process's
 * messages go by it) and each other live relay's table; the table of the relay in use follows
 * as with one relay. Every process keeps a link to each relay, so each table should list the
 * same peers; a node missing from one has lost that relay. */
static void s_print_relays(sw_client_t *cl)
{
    const int n = sw_client_relays(cl);
    for (int i = 0; i < n; i++) {
        sw_client_relay_t r;
        if (sw_client_relay_info(cl, i, &r) != 0)
            continue;
        char rtt[32] = "-";
        if (r.rtt_us >= 0)
            snprintf(rtt, sizeof rtt, "%.2f ms", r.rtt_us / 1e3);
        printf("relay %d of %d %s: %s, round trip from here %s%s\n", i + 1, n, r.endpoint,
               r.live ? "live" : "not reachable now", rtt,
               r.current ? " (messages go by it: the table below)" : "");
    }
    for (int i = 0; i < n; i++) {
        sw_client_relay_t r;
        sw_client_table_t t;
        char err[256];
        if (sw_client_relay_info(cl, i, &r) != 0 || r.current || !r.live ||
            sw_client_status_of(cl, i, &t, 5000, err, sizeof err) != 0)
            continue;
        s_print_text(r.endpoint, &t, NULL, NULL);
        sw_client_table_clear(&t);
        printf("\n");
    }
}

/* The endpoint of the relay the table came from: the one messages go by. */
static const char *s_current(sw_client_t *cl, const char *list)
{
    static sw_client_relay_t r;
    for (int i = 0; i < sw_client_relays(cl); i++)
        if (sw_client_relay_info(cl, i, &r) == 0 && r.current)
            return r.endpoint;
    return list;
}

/* Asks the relay (and the --spot head) and prints what they answered: the exit code. */
static int s_status_run(const struct s_status_opts *o)
{
    int rc = 1;
    const double t_start = cli_now_ms();
    sw_client_t *cl =
        cli_connect("status", &o->sec, o->relay.relay, o->relay.connect_s, NULL, 0, &rc);
    if (!cl)
        return rc;
    sw_client_table_t t;
    char err[512], missing[80] = "";
    if (s_status_table(o, cl, t_start, &t, missing, sizeof missing) != 0) {
        sw_client_destroy(&cl);
        return 1;
    }
    if (sw_client_relays(cl) > 1 && !o->json)
        s_print_relays(cl);
    sw_client_spot_t spot;
    int spot_rc = 0;
    if (o->spot_head) { /* only a head clients trust: run's and the gateway's rule */
        char name[SW_CLIENT_NAME_LEN];
        spot_rc = sw_client_pick_head(&t, o->spot_head, NULL, name, err, sizeof err);
        if (spot_rc == 0)
            spot_rc = sw_client_spot(cl, o->spot_head, &spot, 5000, err, sizeof err);
        if (spot_rc != 0)
            fprintf(stderr, "shardwire status: %s\n", err);
    }
    const sw_client_spot_t *shown = o->spot_head && spot_rc == 0 ? &spot : NULL;
    if (o->json)
        s_print_json(s_current(cl, o->relay.relay), &t, o->spot_head, shown);
    else
        s_print_text(s_current(cl, o->relay.relay), &t, o->spot_head, shown);
    sw_client_table_clear(&t);
    sw_client_destroy(&cl);
    if (o->expect && missing[0]) {
        fprintf(stderr, "shardwire status: '%s' is not connected to the relay\n", missing);
        return 1;
    }
    return spot_rc != 0;
}

int cmd_status(int argc, char **argv)
{
    struct s_status_opts o;
    const int rc = s_status_parse(argc, argv, &o);
    return rc >= 0 ? rc : s_status_run(&o);
}
