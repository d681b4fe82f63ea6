/*
 * chunk.h - how the head cuts a round into Forwards: sized by bytes (every
 * Forward fits SW_WIRE_MAX_PAYLOAD at any hidden size and dtype), never past
 * a prompt window's end, and a prefill in small pieces first and last so
 * that the stages after the head work while it computes (pipelining) and
 * little is left to them after its last piece.
 *
 * Pure arithmetic, no state: tests/unit/test_chunk.c checks its rules on
 * every prompt length and width that matters.
 */
#ifndef SW_NODE_CHUNK_H
#define SW_NODE_CHUNK_H

#include <stdint.h>

/* Rows of the next Forward of a round whose rows [at, at + left) are still
 * to send (left > 0), after chunks Forwards of it went; hidden: the hidden
 * state's width. prefill = 1: the prompt of a dense model (the ramp of small
 * pieces); 0: a decoding round, or a mixture of experts, whose windows go
 * whole (it counts a window's rows per expert) unless the bytes cut them. */
int node_chunk_rows(int at, int left, int chunks, uint32_t hidden, int prefill);

#endif
