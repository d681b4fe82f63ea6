/*
 * client.h - the client side of a shardwire cluster, for `shardwire run`,
 * `shardwire status`, the HTTP gateway (`shardwire serve`) and tests.
 *
 * A client joins the relay as a peer of role CLIENT, finds a head (the
 * named one, or one whose layers start at 0, optionally serving a given
 * model), sends it GenerateRequests and receives their TokenChunks. Several
 * requests may be in flight on one connection: every event names its request.
 * What the library watches so that callers do not have to:
 *
 * - the head leaving the relay during a request (checked after 3 s of
 *   silence, twice in a row so that a relay restart is not taken for it);
 * - the request's deadline (its timeout plus 5 s of grace);
 * - tokens lost on the way: a chunk's index beyond the tokens held (a gap),
 *   a reconnect to the relay (it may have restarted with chunks in flight)
 *   or a silence make the client ask the head to send again from the tokens
 *   it holds (Resume); chunks the head resent are dropped by index, so a
 *   caller sees every token once, in order;
 * - stop strings: text is held back while it could still become a stop
 *   string, and a request that meets one ends with SW_CLIENT_FINISH_STOP
 *   (the head is sent a Cancel so that it stops generating);
 * - a head that cannot open our sealed messages (a different access key):
 *   it answers with a clear Error, which ends the request at once with
 *   SW_CLIENT_EKEY instead of a silent wait for the timeout.
 *
 * Errors are negative sw_client_rc codes with a line of text; an error the
 * head reported also carries its protocol code (Shardwire ErrorCode).
 *
 * One owner thread: a sw_client_t is used only by the thread that created it
 * (the gateway hands requests to its one client thread through inproc
 * sockets). Event data stays valid until the next sw_client_next call.
 */
#ifndef SW_CLIENT_H
#define SW_CLIENT_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "keys.h"
#include "sw_limits.h"
#include <zmq.h>

/* The client's limits are the protocol's (sw_limits.h), except the two of its own. */
#define SW_CLIENT_ID_LEN 32                         /* bytes of a request id, NUL included */
#define SW_CLIENT_NAME_LEN (SW_WIRE_NAME_MAX + 1)   /* bytes of a peer name, NUL included */
#define SW_CLIENT_MAX_STOP SW_WIRE_MAX_STOP         /* stop strings per request */
#define SW_CLIENT_MAX_STOP_LEN SW_WIRE_MAX_STOP_LEN /* bytes per stop string */
#define SW_CLIENT_MAX_STAGES SW_WIRE_MAX_ROUTE      /* stages in the statistics */
#define SW_CLIENT_MAX_INFLIGHT 256                  /* requests in flight on one client */
#define SW_CLIENT_MAX_MESSAGES SW_WIRE_MAX_MESSAGES /* chat messages per request */
#define SW_CLIENT_MAX_DRAFT SW_WIRE_MAX_DRAFT       /* drafts per round, chain or tree */

_Static_assert(SW_CLIENT_ID_LEN <= SW_WIRE_NAME_MAX + 1, "a request id is a wire name");
_Static_assert(SW_CLIENT_MAX_STOP == SW_WIRE_MAX_STOP &&
                   SW_CLIENT_MAX_STOP_LEN == SW_WIRE_MAX_STOP_LEN &&
                   SW_CLIENT_MAX_MESSAGES == SW_WIRE_MAX_MESSAGES &&
                   SW_CLIENT_MAX_DRAFT == SW_WIRE_MAX_DRAFT,
               "a request the client accepts is one the wire accepts, and the other way round");
_Static_assert(SW_CLIENT_MAX_STAGES >= SW_WIRE_MAX_ROUTE, "the statistics hold every stage");

/* Error codes (negative); sw_client_strerror names them. */
enum sw_client_rc {
    SW_CLIENT_OK = 0,
    SW_CLIENT_EINVAL = -1,     /* the request or an argument is invalid (nothing was sent) */
    SW_CLIENT_ECONNECT = -2,   /* the relay cannot be reached, refused us or went away */
    SW_CLIENT_ENOHEAD = -3,    /* no suitable head is connected to the relay */
    SW_CLIENT_EKEY = -4,       /* the head cannot open our messages: different access key */
    SW_CLIENT_EHEAD = -5,      /* the head reported an error (wire_code says which) */
    SW_CLIENT_EHEADGONE = -6,  /* the head left the relay during the request */
    SW_CLIENT_ETIMEOUT = -7,   /* no complete answer within the request's timeout */
    SW_CLIENT_ELOST = -8,      /* the head's count of tokens differs from what arrived */
    SW_CLIENT_EBUSY = -9,      /* too many requests in flight here, or the head is busy */
    SW_CLIENT_ENOMEM = -10,    /* out of memory */
    SW_CLIENT_ECANCELLED = -11 /* cancelled by the caller */
};

/* The name of a code ("no_head", "wrong_access_key", ...), stable for JSON and logs. */
const char *sw_client_strerror(int rc);

/* How a request ended. */
enum sw_client_finish {
    SW_CLIENT_FINISH_LENGTH = 1,   /* n_predict tokens generated */
    SW_CLIENT_FINISH_EOS = 2,      /* the model's end-of-generation token */
    SW_CLIENT_FINISH_STOP = 3,     /* a stop string (cut from the text) */
    SW_CLIENT_FINISH_DEADLINE = 4, /* the head's deadline passed */
};
/* "length", "eos", "stop", "deadline". */
const char *sw_client_finish_name(int finish);

typedef struct sw_client sw_client_t;

typedef struct sw_client_opts {
    const char *relay;           /* relay endpoint, tcp://HOST:PORT */
    const sw_sec_t *sec;         /* keys (copied); NULL or sec->insecure = loopback without keys */
    const char *name;            /* peer name prefix (default "client"; the environment's
                                    SW_CLIENT_NAME comes first); a random suffix is added */
    int connect_timeout_ms;      /* how long to keep trying to reach the relay (0 =
                                    SW_PEER_DEFAULT_CONNECT_MS, -1 = no limit); one progress
                                    line while waiting (peer.h) */
    volatile sig_atomic_t *stop; /* optional: joining gives up once it is non-zero */
    int join_err_logged;         /* 1: when the relay cannot be joined, err is left empty:
                                    the peer's error line (logged) is the one line a user
                                    needs (a command line tool sets it) */
    int progress;                /* 1: sw_client_next also returns SW_CLIENT_EV_PROGRESS */
} sw_client_opts_t;

/*
 * Joins the relay. NULL after one line in err (the relay is unreachable,
 * refused our key, or the endpoint is malformed; empty with join_err_logged
 * when the peer has logged why it could not join). Free with sw_client_destroy.
 */
sw_client_t *sw_client_new(const sw_client_opts_t *opts, char *err, size_t err_len)
    __attribute__((warn_unused_result));

/* Leaves the relay (requests in flight are cancelled); accepts NULL, NULLs *self_p. */
void sw_client_destroy(sw_client_t **self_p);

/* This client's peer name on the relay. */
const char *sw_client_name(const sw_client_t *c);

/* ---- the relay's peer table ------------------------------------------------------------- */

typedef struct sw_client_peer {
    char name[SW_CLIENT_NAME_LEN]; /* announced name */
    const char *role;              /* "head", "middle", "tail", "full", "client", "?" */
    int is_node;                   /* 1 for head, middle, tail and full */
    int key_bound;        /* 1: a node bound to its name by its key in the relay's allow-list */
    int role_bound;       /* 1: ... and to its role ("KEY head NAME" / "KEY stage NAME") */
    uint32_t layer_begin; /* first layer held */
    uint32_t layer_end;   /* one past the last layer held */
    uint32_t n_layers;    /* layers of the whole model */
    char model[65];       /* model fingerprint (hex), "" for clients */
    char model_name[SW_CLIENT_NAME_LEN]; /* the model's name (shardwire-node --model-name) */
    char backend[SW_CLIENT_NAME_LEN];    /* "cpu", "cuda:0", ... */
    uint32_t max_sessions;               /* sessions it can hold at once */
    uint32_t heartbeat_age_ms;           /* since the relay last knew it alive */
    uint32_t idle_ms;                    /* since its last message */
    uint64_t msgs_in, msgs_out;          /* messages from / to it */
    /* placement (version 7; 0 = not said): what the node announced it can do */
    int auto_place;        /* 1: started with --layers auto */
    int standby;           /* 1: an auto node without a range yet */
    uint32_t mem_mib;      /* memory for weights and KV cache */
    uint32_t us_layer_1;   /* probe: us a layer for 1 row */
    uint32_t us_layer_k;   /* ... for probe_rows rows */
    uint32_t probe_rows;   /* 0 or 2..512 */
    uint32_t us_out_1;     /* probe: output norm + LM head, 1 row */
    uint32_t us_out_k;     /* ... probe_rows rows */
    uint32_t rtt_us;       /* round trip to the relay */
    uint32_t kv_kib_layer; /* KV of its sessions per layer, KiB */
    /* KV cache (issue 33; 0 = not said) */
    uint32_t n_ctx;      /* positions a session may reach there */
    uint32_t kv_mib;     /* KV memory its sessions share, MiB */
    uint32_t kv_full;    /* sessions of n_ctx positions that fit at once */
    const char *kv_type; /* "f16" or "q8_0" (static) */
    /* direct paths (version 10, issue 39) */
    char direct[SW_WIRE_DIRECT_MAX + 1]; /* its listener (--listen-public), "" = none */
    uint32_t relay_rtt_us;               /* its link to this relay: round trip (0 = not said) */
    int n_hops;                          /* its live direct links */
    struct {
        char peer[SW_CLIENT_NAME_LEN];
        uint32_t rtt_us; /* measured round trip, 0 = not yet */
    } hops[SW_DIRECT_MAX_LINKS];
} sw_client_peer_t;

typedef struct sw_client_table {
    sw_client_peer_t *peers; /* n_peers entries, malloc'd (sw_client_table_clear frees) */
    int n_peers;             /* live peers */
    uint64_t uptime_ms;      /* relay uptime */
    uint64_t forwarded;      /* messages the relay forwarded */
    uint64_t dropped;        /* messages it dropped */
    int need_key;            /* 1: only key-bound nodes count (the client holds keys) */
    int role_heads;          /* heads whose key is bound to the head role: when > 0, requests go
                                only to those (another node key announcing a head is ignored) */
} sw_client_table_t;

/* One hop of a pipeline as a table shows it (`shardwire status`, the web cluster page): from a
 * stage to the next one, and from the tail back to the head (the verdicts). */
typedef struct sw_client_hop {
    char from[SW_CLIENT_NAME_LEN], to[SW_CLIENT_NAME_LEN];
    char model[65]; /* the model's fingerprint */
    int direct;     /* 1: a direct link between the two carries it; 0: the relay */
    long rtt_us;    /* direct: the link's measured round trip; relay: the sum of both nodes'
                       round trips to the relay (the detour); -1 = not measured */
} sw_client_hop_t;

/* The hops of every pipeline in t (each head's chain of nodes by layers, of its model, and the
 * tail's hop back) into out[0..max): their count. */
int sw_client_hops(const sw_client_table_t *t, sw_client_hop_t *out, int max);

/* Asks the relay for its peer table (up to timeout_ms). 0, or a code after a line in err. */
int sw_client_status(sw_client_t *c, sw_client_table_t *out, int timeout_ms, char *err,
                     size_t err_len) __attribute__((warn_unused_result));
void sw_client_table_clear(sw_client_table_t *t);
/* sw_client_status asking relay i of the --relay list (-1: the one messages go by); fails at
 * once when that relay is not live. */
int sw_client_status_of(sw_client_t *c, int relay, sw_client_table_t *out, int timeout_ms,
                        char *err, size_t err_len) __attribute__((warn_unused_result));
/* The relays of the list and this client's link to each (`shardwire status`). */
typedef struct sw_client_relay {
    char endpoint[256]; /* tcp://HOST:PORT */
    int live;           /* announced on a live connection */
    int current;        /* this client's messages go by it now */
    long rtt_us;        /* the kernel's smoothed round trip of the connection, -1 = none */
} sw_client_relay_t;
int sw_client_relays(sw_client_t *c);
int sw_client_relay_info(sw_client_t *c, int i, sw_client_relay_t *out);

/* What a head's spot checks found (docs/security.md, section 9). */
typedef struct sw_client_spot {
    float share;               /* the head's --spot-check */
    uint64_t sessions_checked; /* since it started */
    uint64_t rounds_compared;  /* */
    uint64_t mismatches;       /* rounds whose copies disagreed */
    int n_nodes;               /* nodes reported and still avoided */
    struct {
        char name[SW_CLIENT_NAME_LEN];
        int convicted;    /* 1: convicted, 0: disputed */
        unsigned avoid_s; /* seconds new routes still avoid it */
    } nodes[SW_WIRE_MAX_SPOT_NODES];
} sw_client_spot_t;

/* Asks head for its spot-check report (a SpotQuery; up to timeout_ms) and
 * waits for it, for a client with no request in flight (`shardwire status
 * --spot`: SW_CLIENT_EBUSY otherwise, since the messages read while waiting
 * would be lost to them; such a client uses sw_client_spot_ask below). The
 * head answers at any time, also while it serves requests. 0, or a code
 * after a line in err. */
int sw_client_spot(sw_client_t *c, const char *head, sw_client_spot_t *out, int timeout_ms,
                   char *err, size_t err_len) __attribute__((warn_unused_result));

/* 1 when p, a peer of table t, is a head this client would send requests to
 * (key-bound where keys are used, role-bound when any head is). */
int sw_client_trusted_head(const sw_client_table_t *t, const sw_client_peer_t *p);

/*
 * The same without waiting, for a client with requests in flight (the
 * gateway): sends head a SpotQuery now (dropped when it cannot be queued at
 * once) and returns 0, or SW_CLIENT_EINVAL / ECONNECT. The SpotReport is read
 * by sw_client_next like any message (making no event) and kept, for up to 8
 * heads (a 9th takes the place of the one asked longest ago); a report comes
 * from the head asked, within 30 s of the question, sealed when the cluster
 * seals, or it is ignored. The head's errors about the query are ignored too
 * (no answer: the caller's copy grows old).
 */
int sw_client_spot_ask(sw_client_t *c, const char *head) __attribute__((warn_unused_result));

/* A report that arrived since the last call: 0 with the head's name and the
 * report, or 1 when none did. Call it until it returns 1. */
int sw_client_spot_take(sw_client_t *c, char head[SW_CLIENT_NAME_LEN], sw_client_spot_t *out)
    __attribute__((warn_unused_result));

/* 1 when p is a head (role head or full) serving model: its model name, or a
 * prefix of its fingerprint (8 hex digits or more); NULL or "" = any model. */
int sw_client_peer_serves(const sw_client_peer_t *p, const char *model);

/*
 * Chooses a head: a key-bound one (with keys; any with --insecure-loopback):
 * the peer called want when given, otherwise the only head (role head or
 * full) serving model when it is given (a model name, or a fingerprint or a
 * prefix of one), or the only head at all. Several candidates are refused
 * with a line naming them (choose one with want), never chosen by name. The
 * name goes into out (SW_CLIENT_NAME_LEN bytes). 0, or SW_CLIENT_ENOHEAD /
 * SW_CLIENT_ECONNECT after a line in err that says what to do.
 */
int sw_client_find_head(sw_client_t *c, const char *want, const char *model,
                        char out[SW_CLIENT_NAME_LEN], char *err, size_t err_len)
    __attribute__((warn_unused_result));

/* sw_client_find_head's choice in a table the caller already holds. */
int sw_client_pick_head(const sw_client_table_t *t, const char *want, const char *model,
                        char out[SW_CLIENT_NAME_LEN], char *err, size_t err_len)
    __attribute__((warn_unused_result));

/*
 * Like sw_client_find_head, but waits until that head and a whole pipeline
 * behind it (stages of the same model covering the layers after the head's
 * to the last) are connected: nodes may start after the client. Asks the
 * relay with a growing delay (0.5 s doubling to 2 s), one warning line per
 * attempt, for up to timeout_ms (-1 = no limit) or until *stop is set. When
 * time is up with a head connected but the pipeline incomplete, or when the
 * pipeline is broken in a way waiting cannot fix (an overlap, another model),
 * it returns 0 anyway: the head refuses the request with the exact reason.
 * 0, or SW_CLIENT_ENOHEAD / ECONNECT / ECANCELLED after a line in err.
 */
int sw_client_wait_head(sw_client_t *c, const char *want, const char *model, int timeout_ms,
                        volatile sig_atomic_t *stop, char out[SW_CLIENT_NAME_LEN], char *err,
                        size_t err_len) __attribute__((warn_unused_result));

/* ---- requests --------------------------------------------------------------------------- */

typedef struct sw_client_msg {
    const char *role;    /* "system", "user", "assistant" */
    const char *content; /* UTF-8 text */
} sw_client_msg_t;

enum sw_client_draft {
    SW_CLIENT_DRAFT_AUTO = 0,  /* the head's default */
    SW_CLIENT_DRAFT_NONE = 1,  /* no speculation */
    SW_CLIENT_DRAFT_MODEL = 2, /* the head's draft model */
    SW_CLIENT_DRAFT_NGRAM = 3, /* prompt lookup */
    SW_CLIENT_DRAFT_MIX = 4,   /* prompt lookup, else the head's draft model */
};

/*
 * One generation. Exactly one of prompt and messages: prompt is raw text
 * (wrapped in the model's chat template as one user turn when chat is 1);
 * messages are a conversation the head formats with the model's template,
 * ending with the opening of the assistant's turn.
 */
typedef struct sw_client_request {
    const char *prompt;              /* text, or NULL */
    int chat;                        /* 1: prompt is one user message */
    const sw_client_msg_t *messages; /* n_messages turns, or NULL */
    int n_messages;                  /* 0 .. SW_CLIENT_MAX_MESSAGES */
    int n_predict;                   /* tokens to generate, 1 .. SW_REQUEST_MAX_N_PREDICT */
    float temperature;               /* 0 = greedy, up to 100 */
    int top_k;                       /* 0 = off */
    float top_p;                     /* (0, 1], 1 = off */
    float min_p;                     /* [0, 1), 0 = off */
    float repeat_penalty;            /* 1 = off, up to 10 */
    int repeat_last_n;               /* tokens the penalty looks at (0 = SW_SAMPLING_REP_LAST_N) */
    uint64_t seed;                   /* sampling seed */
    int draft;                       /* enum sw_client_draft */
    int draft_k;                     /* drafts per round, -1 = the head's default */
    int draft_tree;                  /* token trees of at most this many drafts, 0 = the
                                        head's default, 1 = chains */
    int draft_ahead;                 /* drafting ahead: -1 = the head's default, 0 off, 1 on */
    const char *const *stop;         /* n_stop stop strings (each 1..SW_CLIENT_MAX_STOP_LEN
                                        bytes), or NULL */
    int n_stop;                      /* 0 .. SW_CLIENT_MAX_STOP */
    int timeout_ms;                  /* deadline at the head; 0 = SW_REQUEST_DEFAULT_TIMEOUT_S */
    const char *tenant;              /* who it is for under this client's key (the gateway: an
                                        API key's id): the head shares its compute fairly
                                        between the tenants of a key; 0..SW_WIRE_NAME_MAX of
                                        [A-Za-z0-9._-], NULL or "" = the key's own */
} sw_client_request_t;

/* A request with the library's defaults: greedy (temperature 0, the
 * repetition penalty off; the other sampling fields SW_SAMPLING_*),
 * SW_REQUEST_DEFAULT_N_PREDICT tokens, SW_REQUEST_DEFAULT_TIMEOUT_S.
 * `shardwire run` and `shardwire serve` sample by default instead (they set
 * the sampling fields from their flags, whose defaults are every
 * SW_SAMPLING_* value). */
sw_client_request_t sw_client_request_default(void);

/* Checks req against the protocol's limits: 0, or SW_CLIENT_EINVAL after a line in err. */
int sw_client_request_check(const sw_client_request_t *req, char *err, size_t err_len)
    __attribute__((warn_unused_result));

/*
 * Checks req and sends it to the head. The request's id goes into id
 * (SW_CLIENT_ID_LEN bytes); its events come from sw_client_next. 0, or
 * SW_CLIENT_EINVAL / EBUSY / ECONNECT / ENOMEM after a line in err.
 */
int sw_client_submit(sw_client_t *c, const char *head, const sw_client_request_t *req,
                     char id[SW_CLIENT_ID_LEN], char *err, size_t err_len)
    __attribute__((warn_unused_result));

/*
 * Ends a request at the client: no more events come for it. The head is
 * told (Cancel) so that it frees the cluster for the next request. 0, or
 * SW_CLIENT_EINVAL when no such request is in flight.
 */
int sw_client_cancel(sw_client_t *c, const char *id);

/* Requests in flight. */
int sw_client_inflight(const sw_client_t *c);

typedef struct sw_client_stats {
    int n_prompt;           /* prompt tokens */
    int n_generated;        /* tokens generated (including those after a stop string) */
    int n_rounds;           /* decode rounds */
    int n_drafted;          /* draft tokens proposed */
    int n_accepted;         /* drafts accepted */
    int n_resumes;          /* Resumes sent (tokens lost on the way and sent again) */
    int n_failovers;        /* times another head took the request over (its head left) */
    double ttft_ms;         /* submit to the first token, measured here */
    double total_ms;        /* submit to the end, measured here */
    int have_head;          /* 1 when the head's statistics below arrived */
    double prompt_ms;       /* head: prefill time */
    double decode_ms;       /* head: first token to the last */
    double head_ttft_ms;    /* head: request arrival to the first token */
    double draft_ms;        /* head: time spent drafting (no round out) */
    double draft_ahead_ms;  /* head: time spent drafting ahead while rounds travelled */
    int n_ahead_hits;       /* rounds that left with drafts prepared ahead */
    int n_ahead_misses;     /* rounds whose prepared drafts were dropped */
    int n_tree_rounds;      /* rounds whose drafts were a token tree */
    int n_kv_moves;         /* rounds that moved a tree's accepted path in the caches */
    int n_prefix_reused;    /* prompt tokens every stage took from its prefix cache */
    double head_compute_ms; /* head: time computing its layers */
    double network_ms;      /* head: round time not spent computing */
    double overlap_ms;      /* head: compute that ran beside another node's (pipelined
                               prefill): head + stages + network - overlap = the rounds */
    uint64_t logits_digest; /* the tail's running digest of every verified logits row */
    int n_stages;           /* entries in stages */
    struct {
        char name[SW_CLIENT_NAME_LEN]; /* stage peer name */
        double compute_ms;             /* its compute over the whole request */
        double critical_ms;            /* of it, on the rounds' critical paths */
    } stages[SW_CLIENT_MAX_STAGES];
} sw_client_stats_t;

enum sw_client_event_type {
    SW_CLIENT_EV_TOKENS = 1,   /* tokens and text arrived */
    SW_CLIENT_EV_DONE = 2,     /* the request ended well: finish and stats are set */
    SW_CLIENT_EV_ERROR = 3,    /* the request failed: code, wire_code and message are set */
    SW_CLIENT_EV_PROGRESS = 4, /* the head reports where the request is (opts.progress): the
                                  prompt_* and generated fields are set */
};

typedef struct sw_client_event {
    int type;                       /* enum sw_client_event_type */
    char id[SW_CLIENT_ID_LEN];      /* the request */
    const uint32_t *tokens;         /* token ids that arrived (EV_TOKENS, may be 0 of them) */
    int n_tokens;                   /* entries in tokens */
    const char *text;               /* UTF-8 text now final (stop strings held back and cut) */
    size_t text_len;                /* bytes of text (also on EV_DONE: the rest that was held) */
    int finish;                     /* EV_DONE: enum sw_client_finish */
    const sw_client_stats_t *stats; /* EV_DONE (and EV_ERROR: what arrived) */
    int code;                       /* EV_ERROR: enum sw_client_rc */
    int wire_code;                  /* EV_ERROR from the head: its ErrorCode; else 0 */
    const char *wire_code_name;     /* its name ("bad_request", ...), or "" */
    const char *message;            /* EV_ERROR: one line (control characters removed) */
    int prompt_done, prompt_total;  /* EV_PROGRESS: prompt positions through the head's layers */
    int prompt_finished;            /* EV_PROGRESS: of them, through every stage */
    int generated;                  /* EV_PROGRESS: tokens generated so far */
} sw_client_event_t;

/*
 * Waits up to timeout_ms (0 = poll) for the next event of any request in
 * flight. Returns 0 with *ev filled, 1 when nothing happened in time (or a
 * signal interrupted the wait), or SW_CLIENT_ECONNECT when the connection to
 * the relay broke (every request in flight is then lost). Call it at least
 * every second while requests are in flight: the watches above run inside.
 */
int sw_client_next(sw_client_t *c, sw_client_event_t *ev, int timeout_ms)
    __attribute__((warn_unused_result));

/*
 * The relay connections' ZeroMQ sockets (one per relay) as zmq_poll items in
 * items[0..max), their count, for zmq_poll in a caller's own loop (the
 * gateway): when one is readable, or sw_client_pending() > 0, or a second
 * has passed, call sw_client_next with timeout 0.
 */
int sw_client_poll_items(sw_client_t *c, zmq_pollitem_t *items, int max);
int sw_client_pending(const sw_client_t *c);

#endif
