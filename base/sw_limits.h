/*
 * sw_limits.h - the limits and defaults that more than one layer shares,
 * each defined once: the engine, the wire protocol, the client library and
 * the programs' --help all take them from here.
 *
 * Where two layers hold the same limit under two names (the engine's
 * SW_MAX_DRAFT and the wire's SW_WIRE_MAX_DRAFT, the client's
 * SW_CLIENT_MAX_STOP and the wire's SW_WIRE_MAX_STOP), one is defined from
 * the other, and the layer that sees both asserts the tie (_Static_assert),
 * so that giving one its own value does not compile. A value that --help
 * prints is a plain literal here (no suffix, no expression), so that the help
 * text is built from it (SW_STR) instead of repeating it. docs/protocol.md
 * states the wire's limits and the relay's defaults and names this header as
 * their source. A limit or default that one file alone uses stays there.
 *
 * Header only: it declares plain values and types, so including it links
 * nothing.
 */
#ifndef SW_LIMITS_H
#define SW_LIMITS_H

#include <stdint.h>

/* The value of a macro as a string literal: "default " SW_STR(SW_RELAY_DEFAULT_HWM). */
#define SW_STR(x) SW_STR_(x)
#define SW_STR_(x) #x

/* ---- the engine: what one round and one prompt window hold ----------------------------------- */

#define SW_MAX_DRAFT 64       // most draft tokens in one round, chain or tree
#define SW_PROPOSAL_Q_MAX 256 // most entries of one sparse draft distribution
/* Largest |q_tok - q(draft)| between a draft's probability and its distribution's entry for it:
 * the verifier's (engine/verify.c) and the wire's (a Forward's draft_probs, net/wire_check_round.c)
 * one tolerance. */
#define SW_DRAFT_Q_TOL 1e-4f

/* A prompt is evaluated in windows of this many rows from its start, as
 * llama.cpp evaluates a prompt in micro-batches of its default n_ubatch
 * (engine/include/model.h says why the window decides a row's reduction order). A
 * stage that receives a prompt in Forwards of at most this many rows
 * (SW_WIRE_MAX_ROWS) therefore computes what one process computes. */
#define SW_MODEL_PROMPT_WINDOW 512

/* ---- the wire protocol (net/wire_check.c checks every message against these) -------------- */

#define SW_WIRE_NAME_MAX 63 /* bytes in a peer name / request id */
/* A key's fingerprint: BLAKE2b-128 of its 32-byte CURVE public key in lower-case hex
 * (keys.h, sw_keys_fingerprint). The relay writes the sender's after its name in
 * the source frame ("NAME@FP"), and a peer may pin a destination to a key the same
 * way (docs/protocol.md section 2). */
#define SW_WIRE_KEY_FP_LEN 32
#define SW_WIRE_ADDR_MAX (SW_WIRE_NAME_MAX + 1 + SW_WIRE_KEY_FP_LEN) /* bytes of "NAME@FP" */

#define SW_WIRE_MAX_HEADER (4u << 20)   /* bytes in a header frame */
#define SW_WIRE_MAX_PAYLOAD (16u << 20) /* bytes of hidden states in one Forward (a payload) */
/* What a frame gains on its way: sealing adds 40 bytes to a payload (net/seal.h's
 * SW_SEAL_PAYLOAD_OVERHEAD, tied to this in seal.c) and 70 to a header; CURVE sends each frame
 * as a MESSAGE command, 33 bytes more (libzmq: "\x07MESSAGE", an 8-byte nonce, a 16-byte MAC,
 * a flags byte), and the limit below applies to that encrypted frame. */
#define SW_WIRE_SEAL_OVERHEAD 40
#define SW_WIRE_SEAL_HDR_OVERHEAD 70
#define SW_WIRE_CURVE_OVERHEAD 33
/* ZMQ_MAXMSGSIZE of every socket: a larger frame drops the link (at the relay, the sender's
 * whole connection), so every frame a valid message makes must fit, sealed and encrypted. */
#define SW_WIRE_MAX_FRAME (SW_WIRE_MAX_PAYLOAD + 128u)
_Static_assert(SW_WIRE_MAX_PAYLOAD + SW_WIRE_SEAL_OVERHEAD + SW_WIRE_CURVE_OVERHEAD <=
                       SW_WIRE_MAX_FRAME &&
                   SW_WIRE_MAX_HEADER + SW_WIRE_SEAL_HDR_OVERHEAD + SW_WIRE_CURVE_OVERHEAD <=
                       SW_WIRE_MAX_FRAME,
               "the largest payload and header, sealed and in CURVE's framing, pass "
               "ZMQ_MAXMSGSIZE");
/* All frames of one message after the relay's identity: names, a sealed
 * header (SW_WIRE_SEAL_HDR_OVERHEAD, 70 bytes more than the Envelope) and a sealed payload. */
#define SW_WIRE_MAX_TOTAL (SW_WIRE_MAX_HEADER + SW_WIRE_MAX_PAYLOAD + 2 * 256 + 128)
#define SW_WIRE_MAX_FRAMES 3 /* name + header + payload, after the relay's identity */

#define SW_WIRE_MAX_ROWS SW_MODEL_PROMPT_WINDOW /* rows in one Forward: one prompt window */
#define SW_WIRE_MAX_DRAFT SW_MAX_DRAFT /* drafts per round (a Forward of them and one token) */
#define SW_WIRE_MAX_HIDDEN 32768       /* hidden size (the widest model, Llama 3.1 405B: 16384) */
#define SW_WIRE_MAX_VALUE_BYTES 4      /* bytes of the widest hidden-state value (f32) */
#define SW_WIRE_MAX_POS (1u << 24)     /* positions in a session */
#define SW_WIRE_MAX_TOKEN (1u << 22)   /* token ids are < this */
#define SW_WIRE_MAX_LAYERS 4096
#define SW_WIRE_MAX_ROUTE 16               /* stages in a pipeline */
#define SW_WIRE_MAX_SPOT_NODES 16          /* nodes in a SpotReport */
#define SW_WIRE_MAX_SPOT_AVOID_S 3600      /* SpotNode.avoid_s */
#define SW_WIRE_MAX_DIST SW_PROPOSAL_Q_MAX /* entries in one sparse draft distribution */
#define SW_WIRE_MAX_PEERS 256              /* peers in a PeerTable / the relay */
#define SW_WIRE_MAX_PROMPT_BYTES (2u << 20)
#define SW_WIRE_MAX_PROMPT_TOKENS (1u << 18)
#define SW_WIRE_MAX_MESSAGES 256 /* chat turns in one GenerateRequest */
#define SW_WIRE_MAX_STOP 8       /* stop strings in one GenerateRequest */
#define SW_WIRE_MAX_STOP_LEN 64  /* bytes of one stop string */
#define SW_WIRE_MAX_CHUNK_TOKENS 4096
#define SW_WIRE_MAX_CHUNK_TEXT (64u << 10)
#define SW_WIRE_MAX_ERROR_TEXT 512
#define SW_WIRE_MAX_QUEUE 65536        /* Error.queue_position */
#define SW_WIRE_MAX_BATCH_ROWS 65536   /* StageTiming.batch_rows */
#define SW_WIRE_MAX_BATCH_ROUNDS 65536 /* StageTiming.batch_rounds */
#define SW_WIRE_MAX_PROGRESS_MS                                                                    \
    600000 /* Progress.next_ms: the longest silence a head announces                               \
            */
/* Forward.prefix_len: a prefix reused from the stages' caches is part of a
 * prompt, in blocks of SW_PREFIX_BLOCK tokens (engine/include/prefix.h says why). */
#define SW_PREFIX_BLOCK 64
#define SW_WIRE_MAX_PREFIX SW_WIRE_MAX_PROMPT_TOKENS

_Static_assert(SW_WIRE_MAX_DRAFT + 1 <= SW_WIRE_MAX_ROWS,
               "a drafting Forward (the last token and its drafts) is one Forward");
/* Messages sized by bytes: a decoding round (the last token and its drafts) always fits one
 * Forward, and a prompt goes in Forwards of sw_wire_prompt_rows() rows (at least a block), at
 * any hidden size and dtype; the sender checks every Forward against SW_WIRE_MAX_PAYLOAD before
 * it goes (net/wire_check_round.c), so one that would not fit is refused there, never sent. */
_Static_assert((uint64_t)(SW_WIRE_MAX_DRAFT + 1) * SW_WIRE_MAX_HIDDEN * SW_WIRE_MAX_VALUE_BYTES <=
                       SW_WIRE_MAX_PAYLOAD &&
                   (uint64_t)SW_PREFIX_BLOCK * SW_WIRE_MAX_HIDDEN * SW_WIRE_MAX_VALUE_BYTES <=
                       SW_WIRE_MAX_PAYLOAD,
               "a decoding round and a block of prompt rows fit one payload at any width");

/* The most rows of a prompt Forward for hidden states of width hidden (1..SW_WIRE_MAX_HIDDEN):
 * a whole prompt window (SW_WIRE_MAX_ROWS) when it fits SW_WIRE_MAX_PAYLOAD at the widest value
 * (f32; a stage may pass on wider values than it received), else the most whole blocks of
 * SW_PREFIX_BLOCK rows that do (Llama 3.1 405B, 16384 wide: 256 rows). */
static inline int sw_wire_prompt_rows(uint32_t hidden)
{
    const uint64_t row = (uint64_t)(hidden ? hidden : 1) * SW_WIRE_MAX_VALUE_BYTES;
    const uint64_t fit = SW_WIRE_MAX_PAYLOAD / row;
    if (fit >= SW_WIRE_MAX_ROWS)
        return SW_WIRE_MAX_ROWS;
    return (int)(fit / SW_PREFIX_BLOCK * SW_PREFIX_BLOCK);
}

/* ---- clients and their requests -------------------------------------------------------------- */

#define SW_REQUEST_DEFAULT_N_PREDICT 128 /* tokens to generate (-n; sw_client_request_default) */
#define SW_REQUEST_MAX_N_PREDICT 1048576 /* tokens one request may ask for (-n, max_tokens) */
#define SW_REQUEST_DEFAULT_TIMEOUT_S 300 /* a request's deadline on the cluster (--timeout-s) */
#define SW_CLIENT_DEFAULT_CONNECT_S 15   /* run and status keep trying to reach the relay */
#define SW_REQUEST_MAX_TIMEOUT_S 86400   /* the longest deadline a request may ask for */

_Static_assert(SW_REQUEST_MAX_N_PREDICT <= SW_WIRE_MAX_POS,
               "a GenerateRequest of the most tokens is valid on the wire");

/* ---- programs' shared flags (args.h) --------------------------------------------------------- */

/* -c: context positions per session; 0 = the model's trained context (a node cuts it to what
 * its KV memory holds) */
#define SW_ARGS_DEFAULT_CTX 0
#define SW_DRAFT_DEFAULT_K_MAX 16 /* --draft-k-max: the adaptive K's ceiling */

_Static_assert(SW_DRAFT_DEFAULT_K_MAX <= SW_MAX_DRAFT, "the default ceiling is a valid K");

/* ---- a peer's link to the relay (net/peer.h; a 0 in sw_peer_opts_t) ----------------------- */

#define SW_PEER_DEFAULT_HEARTBEAT_MS 1000 /* ZMTP heartbeat interval */
#define SW_PEER_SILENT_IVLS 10 /* heartbeat intervals without data from the relay = gone */
#define SW_PEER_DEFAULT_SEND_MS                                                                    \
    10000 /* how long a peer's send may block (relay unreachable, queue full) */
#define SW_PEER_DEFAULT_CONNECT_MS 5000 /* how long to keep trying to reach the relay */
/* Relays one process keeps a link to (--relay A,B,...): each link is one ZeroMQ socket with its
 * monitor and send queue (the peer's one context and I/O thread serve them all). */
#define SW_PEER_MAX_RELAYS 4
/* Once one relay has acked at start-up, how long a process waits for the other relays of its
 * list before it picks the one with the lowest round trip and goes on without the rest. */
#define SW_PEER_SETTLE_MS 2000

/* ---- direct paths between nodes (net/direct.c, issue 39; docs/protocol.md "Direct paths") ---- */

/* bytes of an announced listener address "tcp://HOST:PORT" (PeerAnnounce.direct) */
#define SW_WIRE_DIRECT_MAX 255
/* direct links one node keeps (dialled and accepted together; PeerAnnounce.direct_hops) */
#define SW_DIRECT_MAX_LINKS 8
/* connections a listener holds at once, authenticated or not; more are closed at once */
#define SW_DIRECT_MAX_CONNS 16
/* messages queued per direct connection and direction (ZeroMQ's high-water marks) */
#define SW_DIRECT_HWM 64
/* --direct-dial-ms: a dial whose handshake has not completed by then keeps the relay path */
#define SW_DIRECT_DIAL_MS 3000
/* a link that failed (or never connected) is dialled again after this long */
#define SW_DIRECT_RETRY_MS 30000
/* messages to a peer move from the relay to a new direct link only once none went to it by the
 * relay for this long, so that a later message cannot overtake an earlier one */
#define SW_DIRECT_QUIET_MS 1000
/* a node announces again this often with the measured round trips of its relay and direct
 * links (PeerAnnounce.relay_rtt_us, direct_hops: what `shardwire status` shows per hop) */
#define SW_PEER_RTT_REFRESH_MS 30000

/* ---- the node's defaults (shardwire-node; node_opts_t) --------------------------------------- */

#define SW_NODE_DEFAULT_MAX_SESSIONS 8          /* --max-sessions */
#define SW_NODE_DEFAULT_MAX_QUEUE 64            /* --max-queue: requests waiting at a head */
#define SW_NODE_DEFAULT_MAX_QUEUE_PER_CLIENT 16 /* --max-queue-per-client (one client key) */
/* --max-sessions-per-client's default: a client key runs at most all but a quarter of the
 * sessions (at least one kept for others; with --max-sessions 1 the one), so one tenant
 * never holds every slot where there are two. */
#define SW_NODE_DEFAULT_SESSIONS_PER_CLIENT(max)                                                   \
    ((max) > 1 ? (max) - ((max) > 7 ? (max) / 4 : 1) : 1)
#define SW_NODE_DEFAULT_MAX_BATCH_ROWS 256                        /* --max-batch-rows */
#define SW_NODE_DEFAULT_IDLE_TIMEOUT_S 300                        /* --idle-timeout-s */
#define SW_NODE_DEFAULT_ROUND_TIMEOUT_MS 60000                    /* --round-timeout-ms */
#define SW_NODE_DEFAULT_RECOVER_TIMEOUT_S 60                      /* --recover-timeout-s */
#define SW_NODE_DEFAULT_HEARTBEAT_MS SW_PEER_DEFAULT_HEARTBEAT_MS /* --heartbeat-ms */
/* While a round's verdict is late, the head asks its relay's table this often: is every stage of
 * the route still there with its connection (node/head.c)? A stage gone from the relay in use
 * while other relays are live moves the head to another (sw_peer_leave): the round alone goes
 * again, within SW_RELAY_SILENT_IVLS relay heartbeats + this + one round of the cut. */
#define SW_NODE_ROUTE_CHECK_MS 1000

/* What a Resume may cost (node/head_stream.c): the chunks a head sends again are paced per
 * client key (this many a second, a second's worth at once), and one request's chunks are sent
 * again at most SW_HEAD_RESEND_PER_REQUEST times over (plus 64 chunks); past that the first
 * Resume is refused with ERR_BUSY and later ones get nothing. A client that floods Resumes only
 * slows its own resends. */
#define SW_HEAD_RESEND_CHUNKS_S 200
#define SW_HEAD_RESEND_PER_REQUEST 4
/* What the head answers that starts no work (node/head_stream.c: a SpotReport, an Error for a
 * request id it does not hold or a refused request): at most this many a second per client key,
 * as many at once; the rest get no answer. So however many connections a key floods from, its
 * answers cost the head's link to the relay at most this. The budgets live in a table of the
 * head's session slots (base/bucket.h): more keys than slots, taking turns, share what the
 * table refills (slots x this a second) rather than each starting full. */
#define SW_HEAD_ANSWERS_S 20
/* The log gates for refusals (base/log.h sw_log_gate_refusals: the head's refused requests,
 * Resumes and requests that wait; the gateway's refused or closed connections): past these,
 * one summary line per key when the window ends. */
#define SW_REFUSED_LOG_KEY 5    /* lines per key (a client key, a network) in a window */
#define SW_REFUSED_LOG_ALL 20   /* lines for all keys together in a window */
#define SW_REFUSED_LOG_MS 10000 /* the window (ms) */

_Static_assert(SW_NODE_DEFAULT_MAX_QUEUE <= SW_WIRE_MAX_QUEUE &&
                   SW_NODE_DEFAULT_MAX_QUEUE_PER_CLIENT <= SW_NODE_DEFAULT_MAX_QUEUE,
               "a queue position fits Error.queue_position");

/* ---- the relay's defaults (shardwire-relay; a 0 in relay_opts_t) ----------------------------- */

#define SW_RELAY_DEFAULT_HEARTBEAT_MS 1000 /* --heartbeat-ms: ZMTP heartbeat, liveness sweep */
#define SW_RELAY_SILENT_IVLS 5             /* heartbeat intervals without data from a peer = dead */
#define SW_RELAY_DEFAULT_HWM 128           /* --hwm: messages per peer and direction */
#define SW_RELAY_DEFAULT_RATE 2000         /* --rate: messages/s one peer may send */
#define SW_RELAY_DEFAULT_HANDSHAKE_MS 5000 /* --handshake-ms: to finish the CURVE handshake */
#define SW_RELAY_DEFAULT_CONNS_PER_KEY 16  /* --max-conns-per-key */
/* --max-conns-per-prefix: TCP connections the relay keeps open from one address prefix (an IPv4
 * /24, an IPv6 /64), authenticated or not; beyond, a new one is shut down at once. */
#define SW_RELAY_DEFAULT_CONNS_PER_PREFIX 256
#define SW_RELAY_DEFAULT_QUEUE_MIB 64        /* --queue-mib: held for one destination */
#define SW_RELAY_DEFAULT_QUEUE_TOTAL_MIB 256 /* --queue-total-mib: for all of them */
#define SW_RELAY_DEFAULT_CLIENT_MIB_S 4      /* --client-mib-s: one client key's peer */
#define SW_RELAY_DEFAULT_NODE_MIB_S 256      /* --node-mib-s: any other peer */
/* The relay holds (parks) this many messages per sender and destination while the destination's
 * queue is full, uncounted in its msgs_out until they go (the head's route check allows them). */
#define SW_RELAY_PARK_PER_PAIR 8 /* messages held per sender and destination for a full one */
/* --name-hold-s: a client's name stays held for its key after its connection left, longer than
 * a head keeps the requests of a client that vanished (its 60 s linger for a Resume and the
 * seconds it takes to see the client gone), so that no other key can answer to that name. */
#define SW_RELAY_DEFAULT_NAME_HOLD_S 90
/* --announce-ms: a connection must announce this soon after it opened (a status query needs no
 * announce and takes milliseconds), else the relay shuts it down; and a key holds at most
 * SW_RELAY_UNANNOUNCED_PER_KEY connections that have not announced (beyond: its handshake is
 * refused for now, ZAP status 300, and the peer redials). */
#define SW_RELAY_DEFAULT_ANNOUNCE_MS 10000
#define SW_RELAY_UNANNOUNCED_PER_KEY 4
/* The relay's largest message from a client key: a GenerateRequest of the
 * largest prompt, sealed, with room for its other fields and the destination
 * frame (no payload frame). */
#define SW_RELAY_CLIENT_MSG_MAX (SW_WIRE_MAX_PROMPT_BYTES + (64u << 10))
/* The smallest values the byte budgets take (MiB, rounded up): a budget
 * below one largest frame (or, for a client, one largest request) would
 * refuse every such message. */
#define SW_MIB_CEIL(bytes) ((int)(((uint64_t)(bytes) + (1u << 20) - 1) >> 20))
#define SW_RELAY_MIN_FRAME_MIB SW_MIB_CEIL(SW_WIRE_MAX_FRAME)        /* --queue-*, --node-mib-s */
#define SW_RELAY_MIN_CLIENT_MIB SW_MIB_CEIL(SW_RELAY_CLIENT_MSG_MAX) /* --client-mib-s */

_Static_assert(((uint64_t)SW_RELAY_DEFAULT_QUEUE_MIB << 20) > SW_WIRE_MAX_FRAME &&
                   SW_RELAY_DEFAULT_QUEUE_TOTAL_MIB >= SW_RELAY_DEFAULT_QUEUE_MIB &&
                   ((uint64_t)SW_RELAY_DEFAULT_NODE_MIB_S << 20) > SW_WIRE_MAX_FRAME,
               "a destination's budget and a node's byte rate take one largest frame");
_Static_assert(SW_RELAY_DEFAULT_HEARTBEAT_MS * 2 <=
                   SW_PEER_SILENT_IVLS * SW_PEER_DEFAULT_HEARTBEAT_MS,
               "a peer hears the relay's heartbeat well before it takes the relay for gone");

/* ---- the gateway's defaults (shardwire serve; gw_opts_t in gateway/gateway.h) ---------------- */

/* serve's --help prints these; the gateway's GET /v1/defaults hands the defaults of a request's
 * fields to the web page (docs/api.md), and tests/e2e/test_web.c checks that the page shows
 * them. The sampling defaults of a request are the SW_SAMPLING_* values below. */
#define SW_GATEWAY_DEFAULT_LISTEN "127.0.0.1:8080" /* --listen */
#define SW_GATEWAY_DEFAULT_BODY_MB 8               /* --max-body-mb */
#define SW_GATEWAY_DEFAULT_BODIES_MB 64            /* --max-bodies-mb: 8 of the largest at once */
/* --max-connections: with 8 per address, 64 addresses to fill them, each for 10 s */
#define SW_GATEWAY_DEFAULT_CONNECTIONS 512
#define SW_GATEWAY_DEFAULT_PER_IP 8      /* --max-per-ip */
#define SW_GATEWAY_DEFAULT_PER_PREFIX 64 /* --max-per-prefix: one IPv4 /24 or IPv6 /64 */
/* --max-slow: connections opened or still sending their headers or body (not kept-alive ones
 * waiting for their next request), all addresses together; a new connection beyond it closes
 * the one that has been at its headers or body longest (issue 35, finding 8) */
#define SW_GATEWAY_DEFAULT_SLOW 256
#define SW_GATEWAY_DEFAULT_HEADER_TIMEOUT_S 10 /* --header-timeout-s */
#define SW_GATEWAY_DEFAULT_INFLIGHT 32         /* --max-inflight */
/* --max-inflight-per-key: a tenant's share; the head runs 6 of the gateway's at once
 * (SW_NODE_DEFAULT_SESSIONS_PER_CLIENT of SW_NODE_DEFAULT_MAX_SESSIONS) */
#define SW_GATEWAY_DEFAULT_INFLIGHT_PER_KEY 4
#define SW_GATEWAY_DEFAULT_IDLE_S 30         /* --idle-timeout-s */
#define SW_GATEWAY_DEFAULT_BODY_TIMEOUT_S 30 /* --body-timeout-s */
#define SW_GATEWAY_DEFAULT_MAX_TOKENS 512    /* --max-tokens: a request's max_tokens */

_Static_assert(SW_GATEWAY_DEFAULT_MAX_TOKENS <= SW_REQUEST_MAX_N_PREDICT,
               "the default is a valid max_tokens");
_Static_assert(SW_GATEWAY_DEFAULT_PER_IP <= SW_GATEWAY_DEFAULT_PER_PREFIX &&
                   SW_GATEWAY_DEFAULT_PER_PREFIX <= SW_GATEWAY_DEFAULT_CONNECTIONS &&
                   SW_GATEWAY_DEFAULT_SLOW < SW_GATEWAY_DEFAULT_CONNECTIONS &&
                   SW_GATEWAY_DEFAULT_PER_IP <= SW_GATEWAY_DEFAULT_CONNECTIONS &&
                   SW_GATEWAY_DEFAULT_INFLIGHT_PER_KEY <= SW_GATEWAY_DEFAULT_INFLIGHT,
               "a share is at most the whole");

/* ---- sampling -------------------------------------------------------------------------------- */

/*
 * The one set of sampling defaults: `run` and `generate` sample with these
 * (docs/usage.md, "Sampling"): llama.cpp's temperature, top-k, top-p and min-p,
 * Ollama's repetition penalty and its window, and a fixed seed (the same
 * request gives the same text). The HTTP API takes the same values but the
 * penalty (SW_SAMPLING_HTTP_REP_PENALTY below) and draws a seed per request.
 * --greedy is temperature 0 and the penalty off (SW_SAMPLING_REP_OFF). Plain decimal literals: the
 * programs' --help prints them with SW_STR.
 */
#define SW_SAMPLING_TEMP 0.8
#define SW_SAMPLING_TOP_K 40
#define SW_SAMPLING_TOP_P 0.95
#define SW_SAMPLING_MIN_P 0.05
#define SW_SAMPLING_REP_PENALTY 1.1
#define SW_SAMPLING_REP_LAST_N 64
#define SW_SAMPLING_SEED 0x5eed
#define SW_SAMPLING_REP_OFF 1 /* the repetition penalty that changes no logit */

/*
 * The HTTP API's preset (shardwire serve, docs/api.md): the SW_SAMPLING_*
 * values above, except the repetition penalty, which is off unless a request
 * asks for one (repeat_penalty). OpenAI's API and llama.cpp's server apply no
 * penalty by default, and with one, temperature 0 would not be what
 * `shardwire run --greedy` gives. The CLI keeps SW_SAMPLING_REP_PENALTY.
 */
#define SW_SAMPLING_HTTP_REP_PENALTY 1
_Static_assert(SW_SAMPLING_HTTP_REP_PENALTY == SW_SAMPLING_REP_OFF,
               "the HTTP API applies no penalty unless asked (docs/api.md)");

#define SW_SAMPLING_MAX_TOP_K (1 << 20)  /* --top-k, top_k of a request */
#define SW_SAMPLING_MAX_LAST_N (1 << 20) /* --repeat-last-n, repeat_last_n of a request */
#define SW_SAMPLING_MAX_TEMP 100         /* --temp, temperature of a request */
#define SW_SAMPLING_MAX_REP_PENALTY 10   /* --repeat-penalty, repeat_penalty of a request */
#define SW_SAMPLING_MIN_REP_PENALTY 0.01 /* and the smallest */
#define SW_SAMPLING_MAX_MIN_P                                                                      \
    0.999 /* --min-p, min_p of a request (1 would keep the top token alone) */

/* Sampling parameters (engine/include/sampler.h applies them; clients send them in a
 * GenerateRequest). */
typedef struct sw_sampling {
    float temp;        // temperature, >= 0; 0 = greedy argmax
    int top_k;         // keep the k largest logits, >= 0; 0 = off
    float top_p;       // keep the smallest prefix with mass >= top_p, (0, 1]; 1 = off
    float min_p;       // keep tokens with prob >= min_p * max prob, [0, 1]; 0 = off
    float rep_penalty; // repetition penalty, > 0; 1 = off
    int rep_last_n;    // tokens of history the penalty looks at, >= 0; 0 = off
    uint64_t seed;     // RNG seed; same seed + same inputs = same tokens
} sw_sampling_t;

/*
 * The engine's preset: the defaults above with the repetition penalty off.
 * The clients' preset (sw_args_sampling_default in args.h) turns it on.
 * Two presets because the penalty changes greedy decoding too (the argmax of
 * the penalised logits): the engine's users that take this preset and set
 * temp 0 for plain greedy (the draft model, the tests that compare with
 * llama.cpp's greedy output) must not get a penalty they did not ask for.
 * A node fills every field from the request, so the preset does not matter
 * there.
 */
static inline sw_sampling_t sw_sampling_default(void)
{
    sw_sampling_t p = {
        .temp = (float)SW_SAMPLING_TEMP,
        .top_k = SW_SAMPLING_TOP_K,
        .top_p = (float)SW_SAMPLING_TOP_P,
        .min_p = (float)SW_SAMPLING_MIN_P,
        .rep_penalty = (float)SW_SAMPLING_REP_OFF,
        .rep_last_n = SW_SAMPLING_REP_LAST_N,
        .seed = SW_SAMPLING_SEED,
    };
    return p;
}

#endif
