/*
 * metrics.h - the gateway's counters, served at GET /metrics in the
 * Prometheus text format (docs/api.md lists every series).
 *
 * Updated by every HTTP connection thread, so the counters sit behind one
 * mutex: a counter bump is a few nanoseconds and nothing blocks while it is
 * held (the alternative, a message per bump to one owner thread, costs more
 * and says less).
 */
#ifndef GW_METRICS_H
#define GW_METRICS_H

#include <jansson.h>

#include "client.h"

#define GW_METRICS_RECENT 32 /* generations the cluster page shows (gw_metrics_json) */

typedef struct gw_metrics gw_metrics_t;

gw_metrics_t *gw_metrics_new(void) __attribute__((warn_unused_result));
/* Accepts NULL; NULLs *self_p. */
void gw_metrics_destroy(gw_metrics_t **self_p);

/* One HTTP response: endpoint ("chat", "completions", "models", ...), status code. */
void gw_metrics_response(gw_metrics_t *m, const char *endpoint, int status);
/* One generation that ended well: tokens, time to first token, speed, drafts. */
void gw_metrics_generation(gw_metrics_t *m, const sw_client_stats_t *st);
/* Tokens that arrived from the cluster (of any generation, also one still running). */
void gw_metrics_tokens(gw_metrics_t *m, int n);
/* One generation that failed, by its error name (sw_client_strerror or an HTTP reason). */
void gw_metrics_error(gw_metrics_t *m, const char *code);
/*
 * Generations in flight: delta +1 / -1. With +1, refuses (returns -1, no
 * change) when limit are already in flight; otherwise returns the new count.
 */
int gw_metrics_inflight(gw_metrics_t *m, int delta, int limit);
/* Open HTTP connections: delta +1 / -1. */
void gw_metrics_connection(gw_metrics_t *m, int delta);

/*
 * The spot-check report of head (sw_client_spot_ask, dispatch.c), shown in
 * the text as shardwire_gateway_spot_* series labelled with the head and,
 * for reported nodes, the node: at most GW_METRICS_SPOT_HEADS heads (a new
 * one takes the place of the one reported longest ago) of at most
 * SW_WIRE_MAX_SPOT_NODES nodes each, so the label sets stay bounded.
 */
#define GW_METRICS_SPOT_HEADS 4
#define GW_SPOT_EVERY_S 5 /* the dispatcher asks each trusted head for its report this often */
void gw_metrics_spot(gw_metrics_t *m, const char *head, const sw_client_spot_t *rep);

/* The exposition text (malloc'd, the caller frees); NULL when out of memory. */
char *gw_metrics_text(gw_metrics_t *m);

/*
 * The gateway's numbers for the cluster page (GET /v1/cluster, docs/api.md):
 * counters, generations and connections now, and the last GW_METRICS_RECENT
 * generations that completed, oldest first, each with its speed, tokens per
 * round trip and its time split into drafting, head compute, the other
 * stages' compute and the network. A new reference (NULL when out of memory).
 */
json_t *gw_metrics_json(gw_metrics_t *m);

#endif
