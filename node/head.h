/*
 * head.h - the head (layers from 0): it owns every request's session and
 * drives them all from the node's event loop as a message-driven state
 * machine (head.c and its parts, head_impl.h).
 *
 * Every handler only changes state and sends; none waits. The event loop
 * (node.c) hands each message to its handler, calls node_head_step once per
 * pass and waits for the next message at most node_head_timeout ms. The head
 * calls nothing of the event loop, and of the stage only node_kv_grow (its
 * own cache grows as a stage's does).
 *
 * Ownership: node_head_new hangs the head's state on n->head and
 * node_head_free frees it (and answers every request still open). A message
 * handed to a handler stays the caller's, who clears it after; a handler
 * that keeps one moves it out (sw_wire_msg_move), as said below.
 */
#ifndef SW_NODE_HEAD_H
#define SW_NODE_HEAD_H

#include <stddef.h>

#include "wire.h"

/* Bytes of a --public-prefix file at most (the system prompt a cluster's
 * tenants may share in the prefix cache). */
#define HEAD_PUBLIC_PREFIX_MAX 1048576

typedef struct node node_t;           // node.h
typedef struct node_head node_head_t; // head_impl.h

/* The head's state on n->head (its tokenizer, draft model, session slots,
 * queue and batch buffers). 0, or -1 with err. */
int node_head_new(node_t *n, char *err, size_t err_len);
/* Reads --public-prefix (n->o.public_prefix) into the head, after
 * node_head_new: its text as a prompt and as the chat template's system
 * turn, as tokens (head_session.c). 0 (also without the flag), or -1 with
 * one line in err naming the file and what is wrong. */
int node_head_public_prefix(node_t *n, char *err, size_t err_len);
/* Ends every running session (the client gets an Error, the stages a
 * SessionClose), refuses every waiting request, frees n->head. NULL-safe. */
void node_head_free(node_t *n);
/* A GenerateRequest: starts a session, queues it (msg is moved into the
 * queue), or answers busy. */
void node_head_request(node_t *n, sw_wire_msg_t *msg);
/* A client's Cancel: drops its queued request or ends its running one. */
void node_head_cancel(node_t *n, sw_wire_msg_t *msg);
/* A client's Resume: sends its request's chunks again from an index. */
void node_head_resume(node_t *n, sw_wire_msg_t *msg);
/* A SpotQuery from a client: answered with the head's SpotReport (head_spot.c). */
void node_head_spot_query(node_t *n, sw_wire_msg_t *msg);
/* A Verdict from a route's tail. */
void node_head_verdict(node_t *n, sw_wire_msg_t *msg);
/* A PrefillAck from a route's tail: the round in flight moves. */
void node_head_prefill_ack(node_t *n, sw_wire_msg_t *msg);
/* An Error from the relay or a stage. */
void node_head_error(node_t *n, sw_wire_msg_t *msg);
/* The relay's PeerTable (the answer to the head's status query); msg is
 * moved (kept: new sessions take their route baseline from it). */
void node_head_table(node_t *n, sw_wire_msg_t *msg);
/* Advances every session: timers, the next rounds, the head's layers for all
 * sessions with rows to send (one batch), the sends. */
void node_head_step(node_t *n);
/* How long the loop may wait for a message before node_head_step has work
 * (ms, 0 = at once). */
int node_head_timeout(const node_t *n);

#endif
