/*
 * chunk.h - how the head cuts a round into Forwards: sized by bytes (every
 * Forward fits SW_WIRE_MAX_PAYLOAD at any hidden size and dtype), never past
 * a prompt window's end, and a prefill in small pieces first and last so
 * that the stages after the head work while it computes (pipelining) and
 * little is left to them after its last piece; a prefill that shares the
 * pipeline with other sessions in pieces no larger than the fair queue's
 * (node/sched.h), so that other sessions' rounds run between them.
 *
 * Pure arithmetic, no state: tests/unit/test_chunk.c checks its rules on
 * every prompt length and width that matters.
 */
#ifndef SW_NODE_CHUNK_H
#define SW_NODE_CHUNK_H

#include <stdint.h>

/* Rows a piece that starts a prompt window has at least (or the whole window
 * when it is smaller): a window's arithmetic depends on its first piece
 * reaching 8 rows (engine/include/model.h; later pieces continue it with
 * prompt_cont at every stage). */
#define NODE_CHUNK_START_ROWS 8

/* Rows of the next Forward of a round whose rows [at, at + left) are still
 * to send (left > 0), after chunks Forwards of it went; hidden: the hidden
 * state's width. prefill = 1: the prompt of a dense model on a route of CPUs
 * (the ramp of small pieces); 0: a decoding round, or a route whose windows
 * go whole unless the bytes cut them (a mixture of experts counts a window's
 * rows per expert; a GPU's prompt arithmetic depends on the cut).
 * fair > 0 (a prefill only): the rows the fair queue gives the prompt's next
 * piece (node/sched.h, node_sched_piece_rows): the piece has at most that
 * many (and the ramp's), NODE_CHUNK_START_ROWS at a window's start, any
 * number from 1 row after it; 0: the ramp's pieces alone. Never more than
 * the bytes allow, never past a window's end. */
int node_chunk_rows(int at, int left, int chunks, uint32_t hidden, int prefill, int fair);

#endif
