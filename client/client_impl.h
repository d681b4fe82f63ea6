/*
 * client_impl.h - the client's state and the functions its parts share;
 * private to the .c files of client/ (tests/unit/test_layers.py keeps it in this folder).
 *
 * The client library is cut by concern, each part calling only the ones
 * below it (no circle between them, tests/unit/test_layers.py):
 *
 *   client.c    the API's lifetime (connect to the relay, destroy), the event
 *               loop (sw_client_next) and the dispatch of what the relay sends
 *   stream.c    a request's TokenChunks: order, gaps, stop strings, the
 *               released text, the final chunk and its statistics
 *   failover.c  re-ask and failover: Resume, the head asked again from the
 *               tokens received, another head taking over, the watches
 *   join.c      the relay's peer table, choosing a head, waiting for a
 *               whole pipeline
 *   request.c   a request's life: checks, submit, Cancel, the end of a
 *               request with an error code, the Errors heads and the relay send
 *   spot.c      the heads' spot-check reports (sw_client_spot*)
 *   util.c      small helpers: the clock, error lines, a peer's text, random ids
 *
 * A request's slot (client_req_t) and everything it points to belong to the
 * client: client_finish (and sw_client_cancel) free them.
 */
#ifndef SW_CLIENT_IMPL_H
#define SW_CLIENT_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "client.h"
#include "log.h"
#include "peer.h"

#define CLIENT_QUIET_MS 3000       /* silence from a head before we check it is still there */
#define CLIENT_RESUME_GAP_MS 300   /* between two Resumes of one request while a gap lasts */
#define CLIENT_GRACE_MS 5000       /* past the head's own deadline before we give up */
#define CLIENT_STATUS_MS 5000      /* wait for a peer table */
#define CLIENT_HEADS_KNOWN 16      /* heads remembered from the last peer table */
#define CLIENT_SPOT_HEADS 8        /* heads whose spot reports sw_client_spot_ask awaits or keeps */
#define CLIENT_SPOT_WAIT_MS 30000  /* a head's report is taken this long after the question */
#define CLIENT_FAILOVER_MS 30000   /* a request whose head left waits this long for another */
#define CLIENT_REASK_MAX 3         /* a head that took us for gone is asked again this often */
#define CLIENT_REASK_STALE_MS 3000 /* ... and its old end, still on the way, ignored this long */
#define CLIENT_DEFAULT_TIMEOUT_MS (SW_REQUEST_DEFAULT_TIMEOUT_S * 1000)

typedef struct client_req {
    char id[SW_CLIENT_ID_LEN];     /* request id, "" = free slot */
    char head[SW_CLIENT_NAME_LEN]; /* the head it went to */
    double t_submit;               /* when it was sent (ms) */
    double deadline;               /* when we give up (ms) */
    double last_msg;               /* last message from its head, or last check (ms) */
    double quiet_until;            /* its head promised its next message by then (Progress) */
    int head_missing;              /* consecutive checks that did not find the head */
    char stop[SW_CLIENT_MAX_STOP][SW_CLIENT_MAX_STOP_LEN + 1]; /* stop strings */
    int n_stop;                                                /* entries in stop */
    size_t stop_max;                                           /* longest stop string */
    char *text;                /* text not yet released (stop-string hold-back) */
    size_t text_len, text_cap; /* bytes held, capacity */
    int stopped;               /* a stop string was found: ignore the rest */
    sw_client_stats_t stats;   /* counters so far */
    double resume_at;          /* when to ask the head to send again (Resume), 0 = no need */
    double resumed_at;         /* when we last asked */
    /* failover: what it takes to ask another head for the rest */
    sw_client_request_t q;                  /* the request, its strings in blob and stop */
    char *blob;                             /* the prompt or the turns' strings, q points into it */
    sw_client_msg_t *turns;                 /* (q.n_messages) q.messages */
    const char *stop_p[SW_CLIENT_MAX_STOP]; /* q.stop: r->stop's rows */
    char tenant[SW_WIRE_NAME_MAX + 1];      /* q.tenant */
    uint32_t *toks;                         /* (stats.n_generated) tokens received, in order */
    size_t toks_cap;                        /* entries allocated in toks */
    char model[65];  /* its head's model fingerprint, "" unknown: another head
                        serving it may take over */
    double gone_at;  /* when a look first missed its head, or found it leaving (0: it is
                        there); CLIENT_FAILOVER_MS count from here */
    int leaving;     /* its head said it is leaving (ERR_HEAD_LEAVING): 1 while the relay still
                        lists it (not a head to go to), 2 once a check did not find it (a head
                        of its name after that is a restart), 0 otherwise */
    int n_reasks;    /* times its head ended it, taking us for gone, and was asked again */
    double reask_at; /* the last time (0: a token came since): an end then is the old one's */
} client_req_t;

struct sw_client {
    sw_peer_t *peer;    /* connection to the relay */
    int sealed;         /* 1 when the cluster seals (we hold an access key) */
    int secure;         /* 1 with keys: only key-bound heads are used */
    client_req_t *reqs; /* SW_CLIENT_MAX_INFLIGHT slots */
    int n_inflight;     /* slots in use */
    double next_watch;  /* next time the watches run (ms) */
    int announces;      /* announces the relay acked (a new one: it may have restarted) */
    int progress;       /* 1: Progress messages become SW_CLIENT_EV_PROGRESS events */
    struct {
        char name[SW_CLIENT_NAME_LEN]; /* a head seen in the last peer table */
        char model[65];                /* its model fingerprint */
    } heads[CLIENT_HEADS_KNOWN];       /* (n_heads): the model a request's head serves */
    int n_heads;                       /* entries in heads */
    struct {
        char head[SW_CLIENT_NAME_LEN]; /* "" = free */
        double asked_at;               /* the last SpotQuery sent (ms) */
        int fresh;                     /* 1: its report is not yet taken (sw_client_spot_take) */
        sw_client_spot_t report;       /* the last one that arrived */
    } spot[CLIENT_SPOT_HEADS];         /* sw_client_spot_ask's heads */
    /* the current event's storage (valid until the next sw_client_next) */
    uint32_t ev_tokens[SW_WIRE_MAX_CHUNK_TOKENS];
    char *ev_text;              /* released text */
    size_t ev_text_cap;         /* its capacity */
    sw_client_stats_t ev_stats; /* statistics of the ending request */
    char ev_message[SW_WIRE_MAX_ERROR_TEXT + 128];
};

/* ---- util.c: small helpers every part uses --------------------------------------------- */

/* Now on the monotonic clock (ms). */
double client_now_ms(void);
/* Writes one line into err and returns code. */
int client_fail(int code, char *err, size_t err_len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* A peer's text, bounded and without the control characters a terminal acts on (log.h). */
void client_clean(char *dst, size_t dst_len, const char *src);
/* n_bytes (at most 16) random bytes into out as 2 * n_bytes hex digits and a 0. */
void client_random_hex(char *out, size_t n_bytes);

/* ---- request.c: a request's life -------------------------------------------------------- */

/* The slot of request id, or NULL (none, or id empty). */
client_req_t *client_req_find(sw_client_t *c, const char *id);

/*
 * Sends q to head as request rid with a deadline of timeout_ms there; after a
 * failover, with the n_resume tokens received so far (GenerateRequest.
 * resume_tokens). The sw_peer_send_msg result.
 */
int client_send_generate(sw_client_t *c, const char *head, const sw_client_request_t *q,
                         const char *rid, int timeout_ms, const uint32_t *resume,
                         uint32_t n_resume);

/* Sends Cancel for r to its head (a failed send only costs the head some work). */
void client_send_cancel(sw_client_t *c, const client_req_t *r, const char *reason);

/* Puts r's statistics into the event and frees r's slot: the request has ended. */
void client_finish(sw_client_t *c, client_req_t *r, sw_client_event_t *ev);

/* Ends r with an error event (its slot is freed; the event's strings are the client's). */
void client_end_error(sw_client_t *c, client_req_t *r, sw_client_event_t *ev, int code,
                      int wire_code, const char *fmt, ...) __attribute__((format(printf, 6, 7)));

/* One Error m (decoded: er) read by sw_client_next. 0 with *ev filled, 1 when it makes
 * no event. */
int client_on_error(sw_client_t *c, const sw_wire_msg_t *m, const sw_msg_error_t *er,
                    sw_client_event_t *ev);

/* ---- join.c: the peer table and the heads ----------------------------------------------- */
/* (its entry points are client.h's: sw_client_status, sw_client_trusted_head, ...) */

/* ---- failover.c: re-ask, failover, the watches ------------------------------------------ */

/* r's head ended it as cancelled, which we did not ask for: it took us for
 * gone (the relay dropped us while our link was down). The same head is asked
 * for the rest, from the tokens received (GenerateRequest.resume_tokens), at
 * most CLIENT_REASK_MAX times. 0 when it was asked, -1 when r cannot be resent. */
int client_reask(sw_client_t *c, client_req_t *r, double now);

/*
 * The watches: deadlines, and heads that went quiet. 0 with *ev filled for
 * the first request that fails one, 1 when none does.
 */
int client_watch(sw_client_t *c, sw_client_event_t *ev);

/* Asks the heads for what may have been lost (Resume): after a reconnect to
 * the relay for every request, else for requests whose resume_at has come. */
void client_resume(sw_client_t *c, double now);

/* ---- stream.c: token chunks ------------------------------------------------------------- */

/* One TokenChunk for r. 0 with *ev filled, 1 when it makes no event. */
int client_on_chunk(sw_client_t *c, client_req_t *r, const sw_msg_chunk_t *tc,
                    sw_client_event_t *ev);

/* ---- spot.c: spot reports --------------------------------------------------------------- */

/* A SpotReport read by sw_client_next: kept when it comes from a head asked
 * lately (sealed when the cluster seals), else ignored. */
void client_on_spot_report(sw_client_t *c, const sw_wire_msg_t *m, const sw_msg_spot_report_t *r);

#endif
