/*
 * chunk.c - the sizes of a round's Forwards (see chunk.h).
 *
 * Exactness. A prompt is evaluated in windows of SW_WIRE_MAX_ROWS rows from
 * its start, and a window's arithmetic depends on how many rows it holds
 * only through two thresholds (2 rows: the batched attention order; 8: the
 * tiled K-quant matmul; engine/include/model.h). A window cut into pieces of
 * 8 rows or more, each evaluated after the one before it, therefore gives a
 * dense model's rows the bits of the whole window on the CPU (the engine
 * computes a prefix's continuation the same way, engine/include/prefix.h),
 * whichever stage runs a piece and whether it counts windows from the
 * prompt's start or from the piece's. The pieces here are whole blocks
 * (SW_PREFIX_BLOCK rows), or what is left of a window when that is less, or
 * two halves of a part that would otherwise leave a remainder under a block.
 * The fair queue's pieces (a prefill sharing the pipeline) may be smaller:
 * every stage evaluates a piece that continues its prompt with prompt_cont
 * (windows counted from position 0, the window's earlier rows in the
 * cache), which gives the whole window's bits once the window's first piece
 * has 8 rows (tests/net/test_fair_compute.c: tokens equal generate's).
 */
#include "chunk.h"

#include "sw_limits.h"

/* Rows of the next piece of a window part of part rows still to send: at most
 * cap (the bytes) and about want (the ramp), never leaving a remainder under
 * a block in the part. */
static int s_piece(int part, int cap, int want)
{
    int take = part < cap ? part : cap;
    if (want < take)
        take = want < SW_PREFIX_BLOCK ? SW_PREFIX_BLOCK : want;
    if (take > part)
        take = part;
    const int rest = part - take;
    if (rest > 0 && rest < SW_PREFIX_BLOCK)
        take = part <= cap ? part : part / 2; // then part < 2 * cap: both halves fit
    return take;
}

int node_chunk_rows(int at, int left, int chunks, uint32_t hidden, int prefill, int fair)
{
    const int window_end = (at / SW_WIRE_MAX_ROWS + 1) * SW_WIRE_MAX_ROWS;
    const int part = left < window_end - at ? left : window_end - at;
    const int cap = sw_wire_prompt_rows(hidden);
    if (!prefill)
        return s_piece(part, cap, part);
    /* A block, doubling up to a window at the start; in the last window's worth of
     * rows each piece leaves half of what is left (in blocks), so the last pieces are
     * a block each. */
    int want = SW_PREFIX_BLOCK << (chunks < 3 ? chunks : 3);
    if (left > SW_PREFIX_BLOCK && left <= SW_WIRE_MAX_ROWS) {
        int keep = (left / 2 + SW_PREFIX_BLOCK - 1) / SW_PREFIX_BLOCK * SW_PREFIX_BLOCK;
        if (left - keep < want)
            want = left - keep;
    }
    if (fair > 0) {
        /* The fair queue's piece: smaller than a block is exact too, since every stage
         * continues the window (prompt_cont) once its first piece has 8 rows. */
        int take = fair < want ? fair : want;
        if (at % SW_WIRE_MAX_ROWS == 0 && take < NODE_CHUNK_START_ROWS)
            take = NODE_CHUNK_START_ROWS;
        take = take < cap ? take : cap;
        return take < part ? take : part;
    }
    return s_piece(part, cap, want);
}
