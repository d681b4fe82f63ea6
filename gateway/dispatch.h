/*
 * dispatch.h - the gateway's one connection to the cluster.
 *
 * One thread owns the sw_client_t (client.h is single-threaded) and serves
 * the HTTP connection threads through an inproc ROUTER socket: each HTTP
 * request opens a gw_call_t (its own DEALER socket), asks for the peer table
 * or submits one generation, and then receives that generation's events. So
 * all requests in flight share one relay connection, one CURVE handshake and
 * one peer-table cache, and the threads share no mutable state.
 *
 * When the relay connection breaks, the dispatcher fails the requests in
 * flight, answers new ones with SW_CLIENT_ECONNECT and joins the relay again
 * every 2 s.
 */
#ifndef GW_DISPATCH_H
#define GW_DISPATCH_H

#include <stddef.h>

#include "client.h"
#include "metrics.h"

typedef struct gw_disp gw_disp_t;

/*
 * Starts the dispatcher thread and joins the relay (opts is copied, keys
 * included). NULL after a line in err when the first join fails. zctx is the
 * ZeroMQ context the inproc sockets live in (the caller's, outlives this).
 * Every 5 s the thread also asks the trusted heads of its last peer table
 * (at most GW_METRICS_SPOT_HEADS) for their spot-check reports, without
 * waiting (sw_client_spot_ask), and hands those that arrive to metrics (the
 * caller's, outlives this; NULL = none asked).
 */
gw_disp_t *gw_disp_new(void *zctx, const sw_client_opts_t *opts, gw_metrics_t *metrics, char *err,
                       size_t err_len) __attribute__((warn_unused_result));

/* Stops the thread (requests in flight are cancelled); accepts NULL, NULLs *self_p. */
void gw_disp_destroy(gw_disp_t **self_p);

/* ---- the HTTP threads' side -------------------------------------------------------------- */

typedef struct gw_call gw_call_t;

/* One event of a generation, copied out of the dispatcher (owned by the call). */
typedef struct gw_event {
    int type;                /* SW_CLIENT_EV_TOKENS / DONE / ERROR */
    int n_tokens;            /* tokens that arrived */
    const char *text;        /* released text (text_len bytes, NUL after) */
    size_t text_len;         /* bytes of text */
    int finish;              /* EV_DONE: enum sw_client_finish */
    sw_client_stats_t stats; /* EV_DONE / EV_ERROR */
    int code;                /* EV_ERROR: enum sw_client_rc */
    int wire_code;           /* EV_ERROR from the head: its ErrorCode */
    char wire_code_name[32]; /* its name, or "" */
    char message[640];       /* EV_ERROR: one line */
} gw_event_t;

/*
 * The failures of the link between an HTTP thread and the dispatcher, beside
 * the client library's codes (enum sw_client_rc) that the calls below return.
 * They are the gateway's own: nothing reached the relay or came from it.
 */
enum gw_disp_rc {
    GW_DISP_ELINK = -100, /* the inproc socket to the dispatcher failed (send or receive) */
    GW_DISP_EREPLY = -101 /* the dispatcher's reply was not one the call can read */
};
/* A code's name: "dispatcher_unavailable", "dispatcher_bad_reply", else sw_client_strerror's. */
const char *gw_disp_strerror(int rc);

/*
 * A link to the dispatcher for one HTTP request (one thread); the caller frees it with
 * gw_call_destroy. NULL after a line in err, with *rc SW_CLIENT_ENOMEM (no memory) or
 * GW_DISP_ELINK (ZeroMQ cannot open its socket: its socket limit, ZMQ_MAX_SOCKETS, or the
 * process's file descriptors), reported as the calls below report them.
 */
gw_call_t *gw_call_new(gw_disp_t *d, int *rc, char *err, size_t err_len)
    __attribute__((warn_unused_result));
/* Cancels the generation if one is still running; accepts NULL, NULLs *self_p. */
void gw_call_destroy(gw_call_t **self_p);

/*
 * The relay's peer table (at most 1 s old). 0, or a code after a line in err:
 * the dispatcher's (SW_CLIENT_ECONNECT: no relay, or no answer in time), or
 * the link's own (SW_CLIENT_ENOMEM: no memory for the reply's copy,
 * GW_DISP_ELINK, GW_DISP_EREPLY). The caller clears *out with
 * sw_client_table_clear.
 */
int gw_call_table(gw_call_t *c, sw_client_table_t *out, char *err, size_t err_len)
    __attribute__((warn_unused_result));

/*
 * Chooses a head (head_name, or one serving model) and submits q (read
 * during the call only). 0 with the request id in id, or a code after a line
 * in err: a client code (SW_CLIENT_ENOHEAD, EINVAL, ECONNECT, ...) or the
 * link's own (as gw_call_table's). When the dispatcher's reply was not read
 * (no answer in 15 s, no memory for it, not a reply), the generation may have
 * started all the same: gw_call_destroy cancels it, and the dispatcher cancels
 * one whose reply or event finds the call gone.
 */
int gw_call_submit(gw_call_t *c, const sw_client_request_t *q, const char *model,
                   const char *head_name, char id[SW_CLIENT_ID_LEN], char *err, size_t err_len)
    __attribute__((warn_unused_result));

/*
 * Waits up to timeout_ms for the submitted generation's next event. 0 with
 * *ev filled (valid until the next call), 1 on timeout. After EV_DONE or
 * EV_ERROR the generation is over. An event that cannot be read is an
 * EV_ERROR of the link (code SW_CLIENT_ENOMEM: no memory for its copy;
 * GW_DISP_ELINK, GW_DISP_EREPLY) and the generation is cancelled at its head.
 */
int gw_call_next(gw_call_t *c, gw_event_t *ev, int timeout_ms) __attribute__((warn_unused_result));

/* Cancels the submitted generation (the client went away); no more events come. */
void gw_call_cancel(gw_call_t *c);

#endif
