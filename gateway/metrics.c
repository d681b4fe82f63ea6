/*
 * metrics.c - the gateway's counters and their Prometheus text (metrics.h).
 */
#include "metrics.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sw_limits.h"

#define S_MAX_SERIES 64 /* distinct (endpoint, status) pairs and error names kept */

typedef struct s_hist {
    const double *le; /* bucket upper bounds (n_le of them; +Inf implied) */
    int n_le;
    unsigned long long bucket[16]; /* cumulative at output; per bucket here */
    unsigned long long count;
    double sum;
} s_hist_t;

static const double s_ttft_le[] = {0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
static const double s_dur_le[] = {0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300};
static const double s_tps_le[] = {1, 2, 5, 10, 20, 50, 100, 200, 500};

/* One completed generation, as the cluster page shows it. */
typedef struct s_recent {
    double t_ms;      /* Unix time it ended, ms */
    int n_prompt;     /* prompt tokens */
    int n_gen;        /* tokens generated */
    int rounds;       /* decode rounds (round trips after the prefill's) */
    int drafted;      /* drafts proposed */
    int accepted;     /* drafts accepted */
    double ttft_ms;   /* request to first token, seen by the gateway */
    double decode_ms; /* head: first token to the last */
    double draft_ms;  /* head: drafting on the critical path */
    double head_ms;   /* head: its layers */
    double stages_ms; /* every other stage's compute */
    double net_ms;    /* head: round time no stage computed */
    int have_head;    /* 1 when the head's timing arrived */
} s_recent_t;

struct gw_metrics {
    pthread_mutex_t mu;
    struct {
        char endpoint[16];
        int status;
        unsigned long long n;
    } resp[S_MAX_SERIES];
    int n_resp;
    struct {
        char code[32];
        unsigned long long n;
    } err[S_MAX_SERIES];
    int n_err;
    unsigned long long generations;       /* that ended well */
    unsigned long long prompt_tokens;     /* over all of them */
    unsigned long long completion_tokens; /* over all of them */
    unsigned long long rounds, drafted, accepted;
    unsigned long long tree_rounds, ahead_hits, ahead_misses;
    unsigned long long prefix_hits, prefix_tokens; /* generations that reused a prompt prefix */
    unsigned long long streamed;                   /* tokens received, running generations too */
    s_recent_t recent[GW_METRICS_RECENT];          /* a ring of the last generations */
    int n_recent;                                  /* entries filled (at most GW_METRICS_RECENT) */
    int recent_next;                               /* where the next one goes */
    int inflight;                                  /* generations now */
    int connections;                               /* HTTP connections now */
    s_hist_t ttft; /* seconds to the first token (seen by the gateway) */
    s_hist_t dur;  /* seconds per generation */
    s_hist_t tps;  /* decode tokens per second per generation (the head's clock) */
    struct {
        char head[SW_CLIENT_NAME_LEN]; /* "" = free */
        double at;                     /* when it arrived (monotonic, ms) */
        sw_client_spot_t rep;          /* the head's last report */
    } spot[GW_METRICS_SPOT_HEADS];     /* spot checks of the heads the gateway uses */
};

gw_metrics_t *gw_metrics_new(void)
{
    gw_metrics_t *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    pthread_mutex_init(&m->mu, NULL);
    m->ttft.le = s_ttft_le;
    m->ttft.n_le = (int)(sizeof s_ttft_le / sizeof s_ttft_le[0]);
    m->dur.le = s_dur_le;
    m->dur.n_le = (int)(sizeof s_dur_le / sizeof s_dur_le[0]);
    m->tps.le = s_tps_le;
    m->tps.n_le = (int)(sizeof s_tps_le / sizeof s_tps_le[0]);
    return m;
}

void gw_metrics_destroy(gw_metrics_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    pthread_mutex_destroy(&(*self_p)->mu);
    free(*self_p);
    *self_p = NULL;
}

static void s_observe(s_hist_t *h, double v)
{
    int i = 0;
    while (i < h->n_le && v > h->le[i])
        i++;
    h->bucket[i]++;
    h->count++;
    h->sum += v;
}

void gw_metrics_response(gw_metrics_t *m, const char *endpoint, int status)
{
    pthread_mutex_lock(&m->mu);
    int i = 0;
    while (i < m->n_resp && (m->resp[i].status != status || strcmp(m->resp[i].endpoint, endpoint)))
        i++;
    if (i == m->n_resp && m->n_resp < S_MAX_SERIES) {
        snprintf(m->resp[i].endpoint, sizeof m->resp[i].endpoint, "%s", endpoint);
        m->resp[i].status = status;
        m->n_resp++;
    }
    if (i < m->n_resp)
        m->resp[i].n++;
    pthread_mutex_unlock(&m->mu);
}

void gw_metrics_generation(gw_metrics_t *m, const sw_client_stats_t *st)
{
    pthread_mutex_lock(&m->mu);
    m->generations++;
    m->prompt_tokens += (unsigned long long)st->n_prompt;
    m->completion_tokens += (unsigned long long)st->n_generated;
    m->rounds += (unsigned long long)st->n_rounds;
    m->drafted += (unsigned long long)st->n_drafted;
    m->accepted += (unsigned long long)st->n_accepted;
    m->tree_rounds += (unsigned long long)st->n_tree_rounds;
    m->ahead_hits += (unsigned long long)st->n_ahead_hits;
    m->ahead_misses += (unsigned long long)st->n_ahead_misses;
    m->prefix_hits += st->n_prefix_reused > 0;
    m->prefix_tokens += (unsigned long long)st->n_prefix_reused;
    if (st->ttft_ms > 0)
        s_observe(&m->ttft, st->ttft_ms / 1e3);
    s_observe(&m->dur, st->total_ms / 1e3);
    if (st->decode_ms > 0 && st->n_generated > 1)
        s_observe(&m->tps, (st->n_generated - 1) * 1e3 / st->decode_ms);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    s_recent_t *r = &m->recent[m->recent_next];
    *r = (s_recent_t){.t_ms = now.tv_sec * 1e3 + now.tv_nsec / 1e6,
                      .n_prompt = st->n_prompt,
                      .n_gen = st->n_generated,
                      .rounds = st->n_rounds,
                      .drafted = st->n_drafted,
                      .accepted = st->n_accepted,
                      .ttft_ms = st->ttft_ms,
                      .decode_ms = st->decode_ms,
                      .draft_ms = st->draft_ms,
                      .head_ms = st->head_compute_ms,
                      .net_ms = st->network_ms,
                      .have_head = st->have_head};
    for (int i = 0; i < st->n_stages && i < SW_CLIENT_MAX_STAGES; i++)
        r->stages_ms += st->stages[i].compute_ms;
    m->recent_next = (m->recent_next + 1) % GW_METRICS_RECENT;
    if (m->n_recent < GW_METRICS_RECENT)
        m->n_recent++;
    pthread_mutex_unlock(&m->mu);
}

void gw_metrics_tokens(gw_metrics_t *m, int n)
{
    if (n <= 0)
        return;
    pthread_mutex_lock(&m->mu);
    m->streamed += (unsigned long long)n;
    pthread_mutex_unlock(&m->mu);
}

void gw_metrics_error(gw_metrics_t *m, const char *code)
{
    pthread_mutex_lock(&m->mu);
    int i = 0;
    while (i < m->n_err && strcmp(m->err[i].code, code))
        i++;
    if (i == m->n_err && m->n_err < S_MAX_SERIES) {
        snprintf(m->err[i].code, sizeof m->err[i].code, "%s", code);
        m->n_err++;
    }
    if (i < m->n_err)
        m->err[i].n++;
    pthread_mutex_unlock(&m->mu);
}

int gw_metrics_inflight(gw_metrics_t *m, int delta, int limit)
{
    pthread_mutex_lock(&m->mu);
    int rc;
    if (delta > 0 && m->inflight >= limit) {
        rc = -1;
    } else {
        m->inflight += delta;
        rc = m->inflight;
    }
    pthread_mutex_unlock(&m->mu);
    return rc;
}

void gw_metrics_connection(gw_metrics_t *m, int delta)
{
    pthread_mutex_lock(&m->mu);
    m->connections += delta;
    pthread_mutex_unlock(&m->mu);
}

static double s_mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

void gw_metrics_spot(gw_metrics_t *m, const char *head, const sw_client_spot_t *rep)
{
    pthread_mutex_lock(&m->mu);
    int at = -1, oldest = 0;
    for (int i = 0; i < GW_METRICS_SPOT_HEADS && at < 0; i++)
        if (!strcmp(m->spot[i].head, head))
            at = i;
    for (int i = 0; i < GW_METRICS_SPOT_HEADS && at < 0; i++)
        if (!m->spot[i].head[0])
            at = i;
    for (int i = 1; i < GW_METRICS_SPOT_HEADS && at < 0; i++)
        if (m->spot[i].at < m->spot[oldest].at)
            oldest = i;
    if (at < 0)
        at = oldest;
    snprintf(m->spot[at].head, sizeof m->spot[at].head, "%s", head);
    m->spot[at].at = s_mono_ms();
    m->spot[at].rep = *rep;
    pthread_mutex_unlock(&m->mu);
}

/* A growing text buffer. */
typedef struct s_buf {
    char *p;
    size_t len, cap;
    int oom;
} s_buf_t;

static void s_printf(s_buf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void s_printf(s_buf_t *b, const char *fmt, ...)
{
    for (;;) {
        if (b->oom)
            return;
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->oom = 1;
            return;
        }
        if (b->p && b->len + (size_t)n < b->cap) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = (b->cap ? b->cap * 2 : 4096) + (size_t)n;
        char *t = realloc(b->p, cap);
        if (!t) {
            b->oom = 1;
            return;
        }
        b->p = t;
        b->cap = cap;
    }
}

static void s_hist_text(s_buf_t *b, const char *name, const char *help, const s_hist_t *h)
{
    s_printf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    unsigned long long cum = 0;
    for (int i = 0; i < h->n_le; i++) {
        cum += h->bucket[i];
        s_printf(b, "%s_bucket{le=\"%g\"} %llu\n", name, h->le[i], cum);
    }
    s_printf(b, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count %llu\n", name, h->count, name,
             h->sum, name, h->count);
}

static void s_counter(s_buf_t *b, const char *name, const char *help, unsigned long long v)
{
    s_printf(b, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n", name, help, name, name, v);
}

/* The heads' spot checks (names are wire names: [A-Za-z0-9._-], nothing to escape). */
static void s_spot_text(s_buf_t *b, const gw_metrics_t *m)
{
    static const struct {
        const char *name, *type, *help;
    } series[] = {
        {"shardwire_gateway_spot_share", "gauge", "the head's --spot-check share of sessions"},
        {"shardwire_gateway_spot_sessions_checked_total", "counter",
         "sessions the head checked since it started"},
        {"shardwire_gateway_spot_rounds_compared_total", "counter",
         "rounds whose copies the head compared"},
        {"shardwire_gateway_spot_mismatches_total", "counter", "rounds whose copies disagreed"},
        {"shardwire_gateway_spot_report_age_seconds", "gauge",
         "age of the head's last spot report (asked every " SW_STR(GW_SPOT_EVERY_S) " s)"},
    };
    const double now = s_mono_ms();
    for (size_t k = 0; k < sizeof series / sizeof series[0]; k++) {
        s_printf(b, "# HELP %s %s\n# TYPE %s %s\n", series[k].name, series[k].help, series[k].name,
                 series[k].type);
        for (int i = 0; i < GW_METRICS_SPOT_HEADS; i++) {
            const sw_client_spot_t *r = &m->spot[i].rep;
            if (!m->spot[i].head[0])
                continue;
            const char *h = m->spot[i].head;
            if (k == 0)
                s_printf(b, "%s{head=\"%s\"} %g\n", series[k].name, h, (double)r->share);
            else if (k == 4)
                s_printf(b, "%s{head=\"%s\"} %.3f\n", series[k].name, h,
                         (now - m->spot[i].at) / 1e3);
            else
                s_printf(b, "%s{head=\"%s\"} %llu\n", series[k].name, h,
                         (unsigned long long)(k == 1   ? r->sessions_checked
                                              : k == 2 ? r->rounds_compared
                                                       : r->mismatches));
        }
    }
    s_printf(b, "# HELP shardwire_gateway_spot_node_avoid_seconds nodes a head's spot checks "
                "reported (convicted: outvoted; disputed: one of two copies that disagreed), "
                "with the seconds new routes still avoid them\n"
                "# TYPE shardwire_gateway_spot_node_avoid_seconds gauge\n");
    for (int i = 0; i < GW_METRICS_SPOT_HEADS; i++) {
        const sw_client_spot_t *r = &m->spot[i].rep;
        for (int j = 0; m->spot[i].head[0] && j < r->n_nodes && j < SW_WIRE_MAX_SPOT_NODES; j++)
            s_printf(b,
                     "shardwire_gateway_spot_node_avoid_seconds{head=\"%s\",node=\"%s\","
                     "verdict=\"%s\"} %u\n",
                     m->spot[i].head, r->nodes[j].name,
                     r->nodes[j].convicted ? "convicted" : "disputed", r->nodes[j].avoid_s);
    }
}

char *gw_metrics_text(gw_metrics_t *m)
{
    s_buf_t b = {0};
    pthread_mutex_lock(&m->mu);
    s_printf(&b, "# HELP shardwire_gateway_requests_total HTTP responses by endpoint and status\n"
                 "# TYPE shardwire_gateway_requests_total counter\n");
    for (int i = 0; i < m->n_resp; i++)
        s_printf(&b, "shardwire_gateway_requests_total{endpoint=\"%s\",status=\"%d\"} %llu\n",
                 m->resp[i].endpoint, m->resp[i].status, m->resp[i].n);
    s_printf(&b, "# HELP shardwire_gateway_errors_total generations refused or failed, clients "
                 "gone and connections closed or refused, by code\n"
                 "# TYPE shardwire_gateway_errors_total counter\n");
    for (int i = 0; i < m->n_err; i++)
        s_printf(&b, "shardwire_gateway_errors_total{code=\"%s\"} %llu\n", m->err[i].code,
                 m->err[i].n);
    s_counter(&b, "shardwire_gateway_generations_total", "generations that completed",
              m->generations);
    s_printf(&b,
             "# HELP shardwire_gateway_tokens_total tokens of completed generations\n"
             "# TYPE shardwire_gateway_tokens_total counter\n"
             "shardwire_gateway_tokens_total{kind=\"prompt\"} %llu\n"
             "shardwire_gateway_tokens_total{kind=\"completion\"} %llu\n",
             m->prompt_tokens, m->completion_tokens);
    s_counter(&b, "shardwire_gateway_streamed_tokens_total",
              "tokens received from the cluster, also of generations still running", m->streamed);
    s_counter(&b, "shardwire_gateway_rounds_total", "pipeline round trips of decoding", m->rounds);
    s_counter(&b, "shardwire_gateway_draft_tokens_total", "draft tokens proposed", m->drafted);
    s_counter(&b, "shardwire_gateway_draft_accepted_total", "draft tokens accepted", m->accepted);
    s_printf(&b,
             "# HELP shardwire_gateway_draft_acceptance_ratio accepted / proposed drafts so far\n"
             "# TYPE shardwire_gateway_draft_acceptance_ratio gauge\n"
             "shardwire_gateway_draft_acceptance_ratio %.6f\n",
             m->drafted ? (double)m->accepted / (double)m->drafted : 0.0);
    s_counter(&b, "shardwire_gateway_tree_rounds_total", "rounds whose drafts were a token tree",
              m->tree_rounds);
    s_printf(&b,
             "# HELP shardwire_gateway_ahead_rounds_total rounds drafted ahead while the previous "
             "one travelled, by whether the guess held\n"
             "# TYPE shardwire_gateway_ahead_rounds_total counter\n"
             "shardwire_gateway_ahead_rounds_total{outcome=\"hit\"} %llu\n"
             "shardwire_gateway_ahead_rounds_total{outcome=\"miss\"} %llu\n",
             m->ahead_hits, m->ahead_misses);
    s_counter(&b, "shardwire_gateway_prefix_hits_total",
              "generations whose prompt started with a prefix every stage had cached",
              m->prefix_hits);
    s_counter(&b, "shardwire_gateway_prefix_tokens_reused_total",
              "prompt tokens taken from the stages' prefix caches instead of computed",
              m->prefix_tokens);
    s_printf(&b,
             "# HELP shardwire_gateway_inflight generations in flight\n"
             "# TYPE shardwire_gateway_inflight gauge\nshardwire_gateway_inflight %d\n"
             "# HELP shardwire_gateway_connections open HTTP connections\n"
             "# TYPE shardwire_gateway_connections gauge\nshardwire_gateway_connections %d\n",
             m->inflight, m->connections);
    s_spot_text(&b, m);
    s_hist_text(&b, "shardwire_gateway_time_to_first_token_seconds",
                "request submitted to the cluster to first token", &m->ttft);
    s_hist_text(&b, "shardwire_gateway_generation_seconds",
                "request submitted to the cluster to last token", &m->dur);
    s_hist_text(&b, "shardwire_gateway_decode_tokens_per_second",
                "decode speed of each generation (the head's clock)", &m->tps);
    pthread_mutex_unlock(&m->mu);
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    return b.p;
}

/* One recent generation as JSON: its numbers and its time per round trip. */
static json_t *s_recent_json(const s_recent_t *r)
{
    json_t *j = json_object();
    /* every round trip of the request: the prefill's and the decode rounds */
    const double trips = r->rounds + 1.0;
    json_object_set_new(j, "t_ms", json_real(r->t_ms));
    json_object_set_new(j, "prompt_tokens", json_integer(r->n_prompt));
    json_object_set_new(j, "tokens", json_integer(r->n_gen));
    json_object_set_new(j, "rounds", json_integer(r->rounds));
    json_object_set_new(j, "drafted", json_integer(r->drafted));
    json_object_set_new(j, "accepted", json_integer(r->accepted));
    json_object_set_new(j, "ttft_ms", json_real(r->ttft_ms));
    json_object_set_new(
        j, "decode_tok_s",
        json_real(r->decode_ms > 0 && r->n_gen > 1 ? (r->n_gen - 1) * 1e3 / r->decode_ms : 0));
    json_object_set_new(j, "tokens_per_round",
                        json_real(r->rounds > 0 ? (r->n_gen - 1) / (double)r->rounds : 0));
    json_object_set_new(j, "round_ms", json_real(r->rounds > 0 ? r->decode_ms / r->rounds : 0));
    if (r->have_head) {
        json_t *sp = json_object();
        json_object_set_new(sp, "draft", json_real(r->draft_ms / trips));
        json_object_set_new(sp, "head", json_real(r->head_ms / trips));
        json_object_set_new(sp, "stages", json_real(r->stages_ms / trips));
        json_object_set_new(sp, "network", json_real(r->net_ms / trips));
        json_object_set_new(j, "split_ms_per_trip", sp);
    } else {
        json_object_set_new(j, "split_ms_per_trip", json_null());
    }
    return j;
}

json_t *gw_metrics_json(gw_metrics_t *m)
{
    json_t *j = json_object(), *rec = json_array();
    if (!j || !rec) {
        json_decref(j);
        json_decref(rec);
        return NULL;
    }
    pthread_mutex_lock(&m->mu);
    json_object_set_new(j, "inflight", json_integer(m->inflight));
    json_object_set_new(j, "connections", json_integer(m->connections));
    json_object_set_new(j, "generations", json_integer((json_int_t)m->generations));
    json_object_set_new(j, "streamed_tokens", json_integer((json_int_t)m->streamed));
    json_object_set_new(j, "prompt_tokens", json_integer((json_int_t)m->prompt_tokens));
    json_object_set_new(j, "completion_tokens", json_integer((json_int_t)m->completion_tokens));
    json_object_set_new(j, "rounds", json_integer((json_int_t)m->rounds));
    json_object_set_new(j, "drafted", json_integer((json_int_t)m->drafted));
    json_object_set_new(j, "accepted", json_integer((json_int_t)m->accepted));
    unsigned long long errors = 0;
    for (int i = 0; i < m->n_err; i++)
        errors += m->err[i].n;
    json_object_set_new(j, "errors", json_integer((json_int_t)errors));
    const int first = (m->recent_next - m->n_recent + GW_METRICS_RECENT) % GW_METRICS_RECENT;
    for (int i = 0; i < m->n_recent; i++)
        json_array_append_new(rec, s_recent_json(&m->recent[(first + i) % GW_METRICS_RECENT]));
    pthread_mutex_unlock(&m->mu);
    json_object_set_new(j, "recent", rec);
    return j;
}
