/*
 * codec.h - the one place where shardwire's protobuf messages
 * (proto/shardwire.proto) become the plain C structs that the node, relay,
 * client and gateway logic use, and back. Only the codec files (codec.c,
 * codec_encode.c, wire.c, wire_check*.c) name a protobuf type, through the
 * private codec_pb.h; everything else sees the plain structs below and the
 * opaque sw_envelope_t of wire.h (tests include codec_pb.h to craft
 * malformed messages).
 *
 * Receiving: sw_wire_recv() (wire.h) has checked every field of a message
 * against the protocol's limits; sw_codec_decode() then gives a plain view
 * of it (sw_msg_t): numbers copied, strings, token arrays and the Forward's
 * tensor pointing into the received message, nothing copied or allocated.
 * Sending: fill a sw_msg_t and hand it to sw_peer_send_msg() (peer.h),
 * sw_codec_send() (a socket, through sw_wire_send_ex: sealing included) or
 * sw_codec_encode() (one header frame, for the relay's own replies). The
 * protobuf structs are built on the codec's stack, pointing into the
 * caller's memory, and validated (wire_check.c) before anything is sent.
 *
 * The hidden-state tensor of a Forward travels in its own frame as
 * [n_rows, hidden] of the Forward's dtype; sw_codec_hidden_pack / _unpack
 * convert it from and to the engine's f32.
 *
 * Ownership: a decoded sw_msg_t owns nothing. Its pointers stay valid while
 * the sw_wire_msg_t it came from is not cleared; the Forward's payload
 * pointer also only until that message is moved (a small frame lives
 * inside the zmq_msg_t). A sw_msg_t to send points into the caller's memory,
 * which the codec only reads during the call. Nothing here allocates.
 *
 * A new message type is a row in wire_check.c's table (body case, name,
 * channel, validator), a struct and its member of sw_msg_t below, its
 * decoder in codec.c's table and its encoder in codec_encode.c's.
 */
#ifndef SW_CODEC_H
#define SW_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "sw_limits.h"
#include "wire.h"

/* ---- field values ------------------------------------------------------------------------- */

/* PeerAnnounce.role: which layers a peer holds, or a client. */
typedef enum sw_role {
    SW_ROLE_NONE = 0,   /* not given (refused on the wire) */
    SW_ROLE_HEAD = 1,   /* [0, e): embeddings, first layers, drafting; owns the sessions */
    SW_ROLE_MIDDLE = 2, /* layers only */
    SW_ROLE_TAIL = 3,   /* [b, n_layers): last layers, LM head, verifier */
    SW_ROLE_FULL = 4,   /* every layer: head and tail at once */
    SW_ROLE_CLIENT = 5, /* no layers: sends requests, receives tokens */
} sw_role_t;

/* Forward.dtype: the element type of the hidden-state payload. */
typedef enum sw_dtype {
    SW_DTYPE_F32 = 0,  /* 4 bytes */
    SW_DTYPE_F16 = 1,  /* 2 bytes, IEEE half */
    SW_DTYPE_BF16 = 2, /* 2 bytes, bfloat16 */
} sw_dtype_t;

/* DraftParams.mode */
typedef enum sw_draft_mode {
    SW_DRAFT_AUTO = 0,  /* the head decides */
    SW_DRAFT_NONE = 1,  /* no speculation */
    SW_DRAFT_MODEL = 2, /* the head's draft model */
    SW_DRAFT_NGRAM = 3, /* prompt lookup */
    SW_DRAFT_MIX = 4,   /* prompt lookup, else the draft model */
} sw_draft_mode_t;

/* DraftParams.ahead */
typedef enum sw_draft_ahead {
    SW_AHEAD_DEFAULT = 0, /* the head decides */
    SW_AHEAD_OFF = 1,
    SW_AHEAD_ON = 2,
} sw_draft_ahead_t;

/* TokenChunk.finish */
typedef enum sw_finish {
    SW_FINISH_NONE = 0,     /* more chunks follow */
    SW_FINISH_LENGTH = 1,   /* n_predict reached */
    SW_FINISH_EOS = 2,      /* end-of-generation token */
    SW_FINISH_STOP = 3,     /* a stop string */
    SW_FINISH_DEADLINE = 4, /* timeout_ms passed */
    SW_FINISH_ERROR = 5,    /* an Error goes with it */
    SW_FINISH_CANCELLED = 6 /* the client cancelled or vanished */
} sw_finish_t;

/* Error.code (docs/protocol.md, section 6); sw_wire_error_code_name() names them. */
typedef enum sw_error_code {
    SW_ERROR_UNSPECIFIED = 0,
    SW_ERROR_VERSION_MISMATCH = 1, /* Envelope.version differs */
    SW_ERROR_MALFORMED = 2,        /* a frame failed validation */
    SW_ERROR_NAME_TAKEN = 3,       /* a live peer holds the announced name */
    SW_ERROR_NOT_ANNOUNCED = 4,    /* announce first */
    SW_ERROR_UNKNOWN_DEST = 5,     /* no live peer has the destination name */
    SW_ERROR_DEST_BUSY = 6,        /* destination queue full: dropped */
    SW_ERROR_DEST_GONE = 7,        /* destination vanished: dropped */
    SW_ERROR_RELAY_FULL = 8,       /* peer table full */
    SW_ERROR_UNKNOWN_SESSION = 9,
    SW_ERROR_BAD_REQUEST = 10,    /* valid frame, unacceptable content */
    SW_ERROR_MODEL_MISMATCH = 11, /* fingerprint or layer range does not fit */
    SW_ERROR_INTERNAL = 12,
    SW_ERROR_DEADLINE = 13,
    SW_ERROR_UNAUTHORIZED = 14, /* the sender's key may not do this */
    SW_ERROR_BUSY = 15,         /* the head's queue is full, or a request waited too long */
    SW_ERROR_PLAN_REFUSED = 20, /* a PlanAssign not from the head, or a range that does not fit */
    SW_ERROR_HEAD_LEAVING = 21, /* the head leaves before it finished the request: fail over */
} sw_error_code_t;

/* ---- messages ----------------------------------------------------------------------------- */

/* StageTiming: one stage's share of a round (or of a request, in stats). */
typedef struct sw_msg_timing {
    const char *name;      // stage peer name
    uint32_t compute_us;   // time spent computing
    uint32_t queue_us;     // time the message waited before compute
    uint32_t batch_rows;   // rows of the batch the round ran in, 0..SW_WIRE_MAX_BATCH_ROWS (0 =
                           // not said)
    uint32_t batch_rounds; // rounds in that batch, 0..SW_WIRE_MAX_BATCH_ROUNDS
    uint32_t critical_us;  // its part of the round's critical path (docs/protocol.md, "Timing")
} sw_msg_timing_t;

/* DraftDist: the sparse draft distribution of one draft position. */
typedef struct sw_msg_dist {
    uint32_t n;             // entries: 0..SW_WIRE_MAX_DIST (0 only for a later sibling)
    const uint32_t *tokens; // (n) token ids
    const float *probs;     // (n) their probabilities, [0, 1]
} sw_msg_dist_t;

/* DirectHop: one live direct link of a node (version 10). */
typedef struct sw_msg_direct_hop {
    const char *peer; // the node at the other end (a peer name)
    uint32_t rtt_us;  // its measured round trip, <= SW_WIRE_MAX_PROBE_US (0 = none yet)
} sw_msg_direct_hop_t;

/* PeerAnnounce: who a peer is. Strings are never NULL once decoded; NULL
 * strings are sent as "". */
typedef struct sw_msg_announce {
    const char *name;              // [A-Za-z0-9._-]{1,63}
    sw_role_t role;                //
    const char *model_fingerprint; // 64 lower-case hex, "" for clients
    uint32_t layer_begin;          // first layer held
    uint32_t layer_end;            // one past the last
    uint32_t n_layers;             // layers of the whole model
    const char *backend;           // printable, <= 63 bytes
    uint32_t max_sessions;         // sessions held at once
    uint32_t hidden;               // model hidden size (0 for clients)
    const char *model_name;        // 0..63 bytes of [A-Za-z0-9._:/-]
    /* placement (version 7; 0 = not said): what an auto node can do */
    uint32_t mem_mib;      // memory for weights and KV cache, MiB
    uint32_t us_layer_1;   // probe: us one layer takes for 1 row
    uint32_t us_layer_k;   // ... for probe_rows rows
    uint32_t probe_rows;   // 0 or 2..SW_WIRE_MAX_ROWS
    uint32_t rtt_us;       // round trip to the relay
    int auto_place;        // 1: --layers auto (standby while the range is [0, 0))
    uint32_t kv_kib_layer; // KV memory of its sessions per layer, KiB
    uint32_t us_out_1;     // probe: output norm + LM head, 1 row
    uint32_t us_out_k;     // ... probe_rows rows
    /* KV cache (issue 33; 0 = not said) */
    uint32_t n_ctx;   // positions a session may reach here, <= SW_WIRE_MAX_POS
    uint32_t kv_mib;  // KV memory its sessions share, MiB, <= SW_WIRE_MAX_MEM_MIB
    uint32_t kv_full; // sessions of n_ctx positions that fit at once, <= max_sessions
    uint32_t kv_type; // 0 = f16, 1 = q8_0
    /* direct paths (version 10, issue 39): "" = none */
    const char *direct;     // "tcp://HOST:PORT" of its listener (sw_wire_direct_ok)
    const char *direct_key; // the listener's CURVE public key, Z85 (40) or ""
    uint32_t n_direct_hops; // 0..SW_DIRECT_MAX_LINKS
    sw_msg_direct_hop_t direct_hops[SW_DIRECT_MAX_LINKS]; // its live direct links
    uint32_t relay_rtt_us; // round trip of its link to the relay announced to, us (0 = none)
} sw_msg_announce_t;

/* PlanAssign: head -> an auto node, the layer range the plan gives it. */
typedef struct sw_msg_plan {
    const char *model_fingerprint; // 64 hex, the node's model
    uint32_t n_layers;             // layers of the whole model
    uint32_t layer_begin;          // 0 < begin < end <= n_layers
    uint32_t layer_end;            //
    uint32_t plan_us;              // predicted round time, us
} sw_msg_plan_t;

/* AnnounceAck: the relay took an announce. */
typedef struct sw_msg_ack {
    const char *name;         // the name now bound to the connection
    uint32_t heartbeat_ms;    // the relay's heartbeat interval
    uint64_t max_frame_bytes; // largest frame the relay accepts
} sw_msg_ack_t;

/* PeerInfo: one live peer in the relay's table. */
/* PeerInfo.key_bound: what the relay's allow-list binds a node's key to. */
enum sw_key_bound {
    SW_KEY_BOUND_NAME = 1, /* its name ("KEY node NAME"): it may announce any node role */
    SW_KEY_BOUND_ROLE = 2, /* its name and role ("KEY head|stage NAME", version 7) */
};

typedef struct sw_msg_peer {
    sw_msg_announce_t announce; // its announce
    uint32_t heartbeat_age_ms;  // since the relay last knew it alive
    uint32_t idle_ms;           // since its last message
    uint64_t msgs_in;           // messages from it for other peers
    uint64_t msgs_out;          // messages forwarded to it
    uint64_t bytes_in;          // bytes received from it, all frames
    int key_bound;              // 0, SW_KEY_BOUND_NAME or SW_KEY_BOUND_ROLE (below)
    const char *key_fp;         // its key's fingerprint (SW_WIRE_KEY_FP_LEN hex), "" = none
} sw_msg_peer_t;

/* PeerTable: the relay's live peers. Read entries with sw_codec_peer_at /
 * sw_codec_peer_find (either way it was made); to send one, point peers at
 * an array of n_peers entries. */
typedef struct sw_msg_table {
    uint32_t n_peers;           // 0..SW_WIRE_MAX_PEERS
    const sw_msg_peer_t *peers; // to send: (n_peers) entries; NULL in a decoded table
    const void *pb;             // a decoded table: the message it views (codec.c's business)
    uint64_t uptime_ms;         // relay uptime
    uint64_t msgs_forwarded;    // relay totals
    uint64_t msgs_dropped;      //
} sw_msg_table_t;

/* SessionOpen: head -> stages, optional before a session's first Forward. */
typedef struct sw_msg_session_open {
    uint64_t session_id;                  // nonzero
    uint32_t n_ctx;                       // positions to reserve, 1..2^24
    const char *model_fingerprint;        // 64 hex
    uint32_t n_route;                     // 1..SW_WIRE_MAX_ROUTE
    const char *route[SW_WIRE_MAX_ROUTE]; // (n_route) stage names
    int has_sampling;                     // 0: sampling not sent
    sw_sampling_t sampling;               // as sw_codec_decode reads it (below)
} sw_msg_session_open_t;

/* SessionClose: head -> stages. */
typedef struct sw_msg_session_close {
    uint64_t session_id; // nonzero
    const char *reason;  // free text, <= 256 bytes
} sw_msg_session_close_t;

/*
 * Forward: one round (or prefill chunk) for one hop, the hot path.
 * Rows are positions start_pos .. start_pos + n_rows - 1; draft i is row
 * i + 1. Arrays given as NULL are not sent (draft_probs, draft_parents,
 * kv_path); otherwise they hold n_draft (or n_kv_path) entries.
 */
typedef struct sw_msg_forward {
    uint64_t session_id;                       // nonzero
    uint64_t round;                            // per session, grows
    uint32_t start_pos;                        // first row's position
    uint32_t kv_keep;                          // cache positions kept before the rows
    uint32_t n_rows;                           // 1..SW_WIRE_MAX_ROWS
    uint32_t n_tokens;                         // 0 or n_rows
    const uint32_t *tokens;                    // (n_tokens) the token of each row
    int has_sampling;                          // 0: sampling not sent
    sw_sampling_t sampling;                    // the verifier's sampling
    uint32_t n_draft;                          // K drafts, 0..SW_WIRE_MAX_DRAFT
    const uint32_t *draft_tokens;              // (n_draft)
    const float *draft_probs;                  // (n_draft) q_i(draft_i), or NULL
    uint32_t n_dists;                          // 0 or n_draft
    sw_msg_dist_t dists[SW_WIRE_MAX_DRAFT];    // (n_dists) sparse draft distributions
    const uint32_t *draft_parents;             // (n_draft) tree parents, or NULL = a chain
    sw_dtype_t dtype;                          // payload element type
    uint32_t hidden;                           // payload row width, 0 = no payload
    uint32_t layer_begin;                      // first layer the receiver runs
    uint32_t n_route;                          // 1..SW_WIRE_MAX_ROUTE
    const char *route[SW_WIRE_MAX_ROUTE];      // (n_route) head .. tail
    uint32_t hop;                              // index in route of the receiver
    const char *reply_to;                      // where the tail sends the Verdict
    int prefill_more;                          // 1: more prefill chunks follow
    uint32_t n_timing;                         // 0..SW_WIRE_MAX_ROUTE
    sw_msg_timing_t timing[SW_WIRE_MAX_ROUTE]; // (n_timing) stages passed so far
    uint32_t kv_path_from;                     // with kv_path: first position it moves
    uint32_t n_kv_path;                        // 0..SW_WIRE_MAX_DRAFT
    const uint32_t *kv_path;                   // (n_kv_path) increasing offsets, or NULL
    uint32_t n_ctx;                            // positions the session may reach, 0 = --ctx
    uint32_t prefix_len;                       // 0, or positions taken from the prefix caches
                                               // (then start_pos == kv_keep == prefix_len)
    const uint32_t *prefix_tokens;             // (prefix_len) the prompt's first tokens
    uint32_t n_hop_digests;                    // 0..hop: spot checks (docs/security.md)
    uint64_t hop_digests[SW_WIRE_MAX_ROUTE];   // (n_hop_digests) running digest of what route
                                               // stage i sent, as stage i + 1 received it
    uint64_t fair_client;                      // the head's opaque id of the client key (0 = none)
    uint64_t fair_tenant;                      // and of its tenant (node/sched.h)
    const void *payload;                       // [n_rows, hidden] of dtype, or NULL: none
    size_t payload_len;                        // its bytes
} sw_msg_forward_t;

/* Verdict: tail -> head, the outcome of one round. */
typedef struct sw_msg_verdict {
    uint64_t session_id;                       // nonzero
    uint64_t round;                            // the Forward's round
    uint32_t n_accepted;                       // drafts accepted, <= SW_WIRE_MAX_DRAFT
    uint32_t n_tokens;                         // n_accepted + 1
    const uint32_t *tokens;                    // (n_tokens) committed: the drafts, then the next
    uint32_t next_token;                       // tokens[n_accepted]
    uint32_t n_path;                           // 0 or n_accepted
    const uint32_t *path;                      // (n_path) tree nodes of the accepted drafts
    uint32_t n_timing;                         // 0..SW_WIRE_MAX_ROUTE
    sw_msg_timing_t timing[SW_WIRE_MAX_ROUTE]; // (n_timing) every stage of the round
    uint64_t logits_digest;                    // the tail's running logits digest
    uint32_t n_hop_digests;                    // 0..SW_WIRE_MAX_ROUTE - 1
    uint64_t hop_digests[SW_WIRE_MAX_ROUTE];   // (n_hop_digests) Forward.hop_digests + the tail's
} sw_msg_verdict_t;

/* ChatMessage: one turn of a conversation. */
typedef struct sw_msg_turn {
    const char *role;    // "system", "user", "assistant", "tool" (1..16 bytes)
    const char *content; // UTF-8 text
} sw_msg_turn_t;

/* DraftParams: how a request wants to be drafted. */
typedef struct sw_msg_draft {
    sw_draft_mode_t mode;   //
    uint32_t n_draft;       // K, 0 = the head's default
    float p_min;            // [0, 1]
    uint32_t tree;          // drafts in a token tree, 0 = the head's default, 1 = chains
    sw_draft_ahead_t ahead; //
} sw_msg_draft_t;

/* GenerateRequest: client -> head. Read turns with sw_codec_turn_at (either
 * way it was made); to send some, point messages at n_messages entries. */
typedef struct sw_msg_generate {
    const char *request_id;             // 1..63 bytes of the name alphabet
    const char *prompt;                 // UTF-8 text ("" when none)
    uint32_t n_prompt_tokens;           // 0..SW_WIRE_MAX_PROMPT_TOKENS
    const uint32_t *prompt_tokens;      // (n_prompt_tokens)
    uint32_t n_resume_tokens;           // 0..n_predict - 1: failover, tokens already generated
    const uint32_t *resume_tokens;      // (n_resume_tokens)
    uint32_t n_predict;                 // tokens to generate
    int has_sampling;                   // 0: sampling not sent
    sw_sampling_t sampling;             // as sw_codec_decode reads it (below)
    int chat;                           // 1: wrap the prompt in the chat template
    int has_draft;                      // 0: draft not sent
    sw_msg_draft_t draft;               //
    uint32_t timeout_ms;                // 0 = no deadline
    uint32_t n_stop;                    // 0..SW_WIRE_MAX_STOP
    const char *stop[SW_WIRE_MAX_STOP]; // (n_stop) stop strings, 1..SW_WIRE_MAX_STOP_LEN bytes each
    uint32_t n_messages;                // 0..SW_WIRE_MAX_MESSAGES
    const sw_msg_turn_t *messages;      // to send: (n_messages) turns; NULL once decoded
    const char *tenant;                 // 0..SW_WIRE_NAME_MAX bytes of the name alphabet ("" =
                                        // the key's own; NULL to send = "")
    const void *pb;                     // decoded: the message it views (codec.c's business)
} sw_msg_generate_t;

/* GenerateStats: the head's account of a finished request. */
typedef struct sw_msg_stats {
    uint32_t n_prompt, n_generated, n_rounds, n_drafted, n_accepted;  // counts
    uint32_t prompt_ms, generate_ms;                                  // ms
    float ttft_ms, decode_ms, draft_ms, head_ms, network_ms;          // ms
    float draft_ahead_ms;                                             // ms
    uint32_t n_ahead_hits, n_ahead_misses, n_tree_rounds, n_kv_moves; // counts
    uint32_t n_prefix_reused; // prompt tokens taken from the prefix caches
    float overlap_ms;         // compute that ran beside another node's (pipelined prefill chunks)
    uint32_t n_stages;        // 0..SW_WIRE_MAX_ROUTE
    sw_msg_timing_t stages[SW_WIRE_MAX_ROUTE]; // (n_stages) compute per stage (compute_us)
    uint64_t logits_digest;                    // the tail's digest at the end
} sw_msg_stats_t;

/* TokenChunk: head -> client, streamed output. */
typedef struct sw_msg_chunk {
    const char *request_id; // as in the request
    uint32_t n_tokens;      // 0..SW_WIRE_MAX_CHUNK_TOKENS
    const uint32_t *tokens; // (n_tokens)
    const void *text;       // (text_len) UTF-8 bytes of those tokens; NULL when none
    size_t text_len;        // <= SW_WIRE_MAX_CHUNK_TEXT
    int done;               // 1: the last chunk
    sw_finish_t finish;     // NONE unless done
    int has_stats;          // 1: stats set (a last chunk)
    sw_msg_stats_t stats;   //
    uint32_t index;         // position of tokens[0] among the generated tokens
} sw_msg_chunk_t;

/* Error: anyone -> anyone. Strings are never NULL once decoded. */
typedef struct sw_msg_error {
    sw_error_code_t code;    //
    const char *message;     // one line, <= SW_WIRE_MAX_ERROR_TEXT bytes
    uint64_t session_id;     // context, or 0
    const char *request_id;  // context, or ""
    const char *dest;        // relay routing errors: the destination, or ""
    uint32_t queue_position; // ERR_BUSY / ERR_DEADLINE of a queued request, 0 = not queued
} sw_msg_error_t;

/* Cancel: client -> head. */
typedef struct sw_msg_cancel {
    const char *request_id; // the request to stop
    const char *reason;     // <= 256 bytes, for the head's log
} sw_msg_cancel_t;

/* Resume: client -> head. */
typedef struct sw_msg_resume {
    const char *request_id; // the request
    uint32_t from_index;    // tokens the client holds
} sw_msg_resume_t;

/* Progress: head -> client, a running request's heartbeat. */
typedef struct sw_msg_progress {
    const char *request_id;   // the request
    uint32_t prompt_done;     // prompt positions through the head's layers, <= prompt_total
    uint32_t prompt_total;    // the prompt's positions, <= SW_WIRE_MAX_POS
    uint32_t generated;       // tokens generated so far, <= SW_WIRE_MAX_POS
    uint32_t prompt_finished; // of prompt_done, positions through every stage
    uint32_t next_ms; // the head's next message comes within this, <= SW_WIRE_MAX_PROGRESS_MS
} sw_msg_progress_t;

/* PrefillAck: last stage -> head, a prefill chunk through every stage. */
typedef struct sw_msg_prefill_ack {
    uint64_t session_id; //
    uint64_t round;      // the Forward's round
    uint32_t done;       // positions computed on every stage, <= SW_WIRE_MAX_POS
} sw_msg_prefill_ack_t;

/* SpotReport: head -> client, what its spot checks found (SpotQuery has no fields). */
typedef struct sw_msg_spot_node {
    const char *name; // a node the checks reported
    int convicted;    // 1: convicted, 0: disputed
    uint32_t avoid_s; // seconds new routes still avoid it, <= SW_WIRE_MAX_SPOT_AVOID_S
} sw_msg_spot_node_t;

typedef struct sw_msg_spot_report {
    float share;                                      // --spot-check, [0, 1]
    uint64_t sessions_checked;                        // since the head started
    uint64_t rounds_compared;                         //
    uint64_t mismatches;                              // rounds whose copies disagreed
    uint32_t n_nodes;                                 // 0..SW_WIRE_MAX_SPOT_NODES
    sw_msg_spot_node_t nodes[SW_WIRE_MAX_SPOT_NODES]; // (n_nodes)
} sw_msg_spot_report_t;

/* One message of any type; type says which member holds it (StatusQuery
 * and SpotQuery have no fields). */
typedef struct sw_msg {
    sw_msg_type_t type;
    union {
        sw_msg_announce_t announce;           // SW_MSG_ANNOUNCE
        sw_msg_ack_t ack;                     // SW_MSG_ANNOUNCE_ACK
        sw_msg_table_t table;                 // SW_MSG_PEER_TABLE
        sw_msg_session_open_t session_open;   // SW_MSG_SESSION_OPEN
        sw_msg_session_close_t session_close; // SW_MSG_SESSION_CLOSE
        sw_msg_forward_t forward;             // SW_MSG_FORWARD
        sw_msg_verdict_t verdict;             // SW_MSG_VERDICT
        sw_msg_generate_t generate;           // SW_MSG_GENERATE
        sw_msg_chunk_t chunk;                 // SW_MSG_TOKEN_CHUNK
        sw_msg_error_t error;                 // SW_MSG_ERROR
        sw_msg_cancel_t cancel;               // SW_MSG_CANCEL
        sw_msg_resume_t resume;               // SW_MSG_RESUME
        sw_msg_plan_t plan;                   // SW_MSG_PLAN_ASSIGN
        sw_msg_spot_report_t spot;            // SW_MSG_SPOT_REPORT
        sw_msg_progress_t progress;           // SW_MSG_PROGRESS
        sw_msg_prefill_ack_t prefill_ack;     // SW_MSG_PREFILL_ACK
    };
} sw_msg_t;

/* ---- decoding ------------------------------------------------------------------------------ */

/*
 * The plain view of a received message (m as sw_wire_recv left it), when its
 * type is want (SW_MSG_NONE: any type). Sampling parameters read as the
 * protocol says: top_p 0 and repeat_penalty 0 are 1 (off); absent ones are
 * has_sampling 0 with every field as if 0 had been sent (greedy). Returns
 * SW_WIRE_OK, or SW_WIRE_EMALFORMED (another type, no message, or a count
 * that wire_check.c should have refused) after a line in err (logged when
 * NULL).
 */
int sw_codec_decode(const sw_wire_msg_t *m, sw_msg_type_t want, sw_msg_t *out, char *err,
                    size_t err_len) __attribute__((warn_unused_result));

/* Entry i (< t->n_peers) of a peer table, decoded or to send; its strings
 * point into t's memory. 0, or -1 when i is out of range. */
int sw_codec_peer_at(const sw_msg_table_t *t, uint32_t i, sw_msg_peer_t *out)
    __attribute__((warn_unused_result));
/* The table's entry for the peer called name: 1 with *out filled, 0 when
 * it has none. The one look-up by name (route checks, route baselines,
 * "is the client still there"). */
int sw_codec_peer_find(const sw_msg_table_t *t, const char *name, sw_msg_peer_t *out);
/* 1 when a peer-table entry is a node (head, middle, tail, full) that may be
 * routed to: key-bound by the relay's allow-list, or need_key is 0 (a relay
 * without keys binds nothing). */
int sw_codec_peer_routable(const sw_msg_peer_t *p, int need_key);

/* Turn i (< g->n_messages) of a request, decoded or to send. 0, or -1 when
 * i is out of range. */
int sw_codec_turn_at(const sw_msg_generate_t *g, uint32_t i, sw_msg_turn_t *out)
    __attribute__((warn_unused_result));

/* ---- encoding ------------------------------------------------------------------------------- */

/*
 * Where sw_codec_emit hands the Envelope it built (on its stack, pointing
 * into msg): send it, pack it or check it, and return 0 or a negative
 * sw_wire_rc. The Envelope and payload are valid only during the call.
 */
typedef int (*sw_codec_sink_fn)(void *ctx, sw_envelope_t *env, const void *payload,
                                size_t payload_len, int has_payload);

/*
 * Builds msg's Envelope and gives it to sink(ctx, ...); a Forward's payload
 * goes with it (has_payload = payload != NULL). Values the protobuf cannot
 * carry (a negative top_k, more entries than a plain array holds) are
 * refused here; everything else is wire_check.c's validation, run by the sink's
 * send. Returns what the sink returned, or SW_WIRE_EMALFORMED after a line
 * in err (logged when NULL).
 */
int sw_codec_emit(const sw_msg_t *msg, sw_codec_sink_fn sink, void *ctx, char *err, size_t err_len)
    __attribute__((warn_unused_result));

/* sw_codec_emit into sw_wire_send_ex(sock, name, ..., flags, crypto, err, err_len). */
int sw_codec_send(void *sock, const char *name, const sw_msg_t *msg, int flags,
                  const sw_wire_crypto_t *crypto, char *err, size_t err_len)
    __attribute__((warn_unused_result));

/* sw_codec_emit into sw_wire_encode: one validated header frame in *frame
 * (initialised here; the caller sends or closes it). */
int sw_codec_encode(const sw_msg_t *msg, zmq_msg_t *frame, char *err, size_t err_len)
    __attribute__((warn_unused_result));

/* Validates msg as it would be sent (sw_wire_validate), sending nothing. */
int sw_codec_validate(const sw_msg_t *msg, char *err, size_t err_len)
    __attribute__((warn_unused_result));

/* ---- keeping an announce ------------------------------------------------------------------- */

/* An announce that owns its strings (a peer keeps its own, the relay one per
 * peer): a's strings point into the buffers beside it, so the struct stays
 * where it was filled (copy it again with sw_codec_announce_copy). */
typedef struct sw_announce_copy {
    sw_msg_announce_t a;                                      // the announce
    char name[SW_WIRE_NAME_MAX + 1];                          // a.name
    char model_fingerprint[65];                               // a.model_fingerprint
    char backend[SW_WIRE_NAME_MAX + 1];                       // a.backend
    char model_name[SW_WIRE_NAME_MAX + 1];                    // a.model_name
    char direct[SW_WIRE_DIRECT_MAX + 1];                      // a.direct
    char direct_key[41];                                      // a.direct_key
    char hop_peer[SW_DIRECT_MAX_LINKS][SW_WIRE_NAME_MAX + 1]; // a.direct_hops[i].peer
} sw_announce_copy_t;

/* Copies src into dst. 0, or -1 when a string is longer than its buffer
 * (never for a validated announce). */
int sw_codec_announce_copy(sw_announce_copy_t *dst, const sw_msg_announce_t *src)
    __attribute__((warn_unused_result));

/* ---- the hidden-state payload ---------------------------------------------------------------- */

/*
 * n f32 values in dtype for the wire: src itself for F32 (the send copies it
 * once into the frame), else converted into scratch (room for n elements of
 * dtype), rounding to nearest even. Returns what to send.
 */
const void *sw_codec_hidden_pack(sw_dtype_t dtype, const float *src, void *scratch, size_t n);
/* n elements of dtype from the wire into f32 dst (exact). */
void sw_codec_hidden_unpack(sw_dtype_t dtype, const void *src, float *dst, size_t n);

/*
 * Spot checks (docs/security.md): the running digest h of a session's
 * hidden-state payloads folded with one more, len bytes of dtype. Equal
 * digests mean bit-identical payloads in the same order (64 bits, not
 * cryptographic: it tells honest nodes apart from a node that computed
 * something else, not a forger who knows the digest; see the docs). A
 * session's digest starts at 0.
 */
uint64_t sw_codec_digest_fold(uint64_t h, sw_dtype_t dtype, const void *payload, size_t len);

#endif
