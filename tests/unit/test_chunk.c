/*
 * test_chunk.c - how the head cuts a round into Forwards (node/chunk.c):
 * every Forward fits SW_WIRE_MAX_PAYLOAD at f32 whatever the hidden size,
 * none crosses a prompt window's end, no piece is small enough to change a
 * window's arithmetic (at least 8 rows unless it is the whole window), the
 * pieces cover the round in order, and a prefill starts and ends with small
 * pieces (pipelining) while a decoding round and a mixture of experts'
 * windows go whole. Every prompt length up to 2,600 rows at the widths of
 * real models and of the protocol's extremes. With the fair queue's piece
 * size (node/sched.h; a prefill sharing the pipeline): no piece larger than
 * it (or the ramp's), 8 rows or more at a window's start, and the bytes and
 * windows as before.
 */
#include <stdio.h>

#include "../../node/chunk.c"
#include "sw_test.h"

#define W SW_WIRE_MAX_ROWS

/* Cuts a round of n rows (prefill or not, the fair queue's piece size fair: 0 = none) at
 * width hidden; checks every piece; returns the number of pieces and the first and last
 * piece's rows. */
static int s_plan_fair(int n, uint32_t hidden, int prefill, int fair, int *first, int *last)
{
    int at = 0, chunks = 0, bad = 0;
    *first = *last = 0;
    while (at < n && chunks <= n) {
        const int r = node_chunk_rows(at, n - at, chunks, hidden, prefill, fair);
        const int ws = at / W * W;                        // its window's first row
        const int wrows = (n < ws + W ? n : ws + W) - ws; // the window's rows in the round
        const int start = wrows < NODE_CHUNK_START_ROWS ? wrows : NODE_CHUNK_START_ROWS;
        bad |= r < 1 || r > n - at;
        bad |= (at + r - 1) / W != at / W;                     // crosses a window
        bad |= (uint64_t)r * hidden * 4 > SW_WIRE_MAX_PAYLOAD; // over the bytes
        bad |= at == ws && r < start;                          // a window's first piece: 8 rows
        if (!fair) {
            bad |= r < start;                         // changes the window
            bad |= r < 8 && (at != ws || r != wrows); // a small window whole
        } else {
            bad |= r > (at == ws && fair < start ? start : fair); // over the fair share
        }
        if (bad) {
            fprintf(stderr, "n %d hidden %u prefill %d fair %d: piece %d at %d has %d rows\n", n,
                    hidden, prefill, fair, chunks, at, r);
            return -1;
        }
        if (!chunks)
            *first = r;
        *last = r;
        at += r;
        chunks++;
    }
    return at == n ? chunks : -1;
}

static int s_plan(int n, uint32_t hidden, int prefill, int *first, int *last)
{
    return s_plan_fair(n, hidden, prefill, 0, first, last);
}

int main(void)
{
    /* The bytes: a whole window while it fits at f32, else whole blocks. */
    SW_CHECK_INT(sw_wire_prompt_rows(576), W);
    SW_CHECK_INT(sw_wire_prompt_rows(3584), W);
    SW_CHECK_INT(sw_wire_prompt_rows(8192), W); // 70B: 512 x 8192 x 4 B = 16 MiB exactly
    SW_CHECK_INT(sw_wire_prompt_rows(8193), 448);
    SW_CHECK_INT(sw_wire_prompt_rows(16384), 256); // Llama 3.1 405B
    SW_CHECK_INT(sw_wire_prompt_rows(SW_WIRE_MAX_HIDDEN), 128);
    for (uint32_t h = 1; h <= SW_WIRE_MAX_HIDDEN; h += h < 9000 ? 7 : 61) {
        const int r = sw_wire_prompt_rows(h);
        SW_CHECK((uint64_t)r * h * SW_WIRE_MAX_VALUE_BYTES <= SW_WIRE_MAX_PAYLOAD);
        SW_CHECK(r == W || (r >= SW_PREFIX_BLOCK && r % SW_PREFIX_BLOCK == 0));
    }

    /* Every prompt length at the widths of SmolLM2, Qwen2.5 7B and 14B, Llama 70B and 405B,
     * an odd one and the widest: prefills, and rounds cut by windows alone. */
    static const uint32_t widths[] = {576,  3584,  5120,  8192,
                                      8193, 16384, 20000, SW_WIRE_MAX_HIDDEN};
    int worst_last = 0, most = 0;
    for (size_t w = 0; w < sizeof widths / sizeof widths[0]; w++)
        for (int n = 1; n <= 2600; n++) {
            int first, last;
            const int k = s_plan(n, widths[w], 1, &first, &last);
            SW_CHECK(k > 0);
            if (k <= 0)
                break;
            if (n >= 2 * SW_PREFIX_BLOCK) // a prefill starts with one block
                SW_CHECK_INT(first, SW_PREFIX_BLOCK);
            if (n >= SW_PREFIX_BLOCK && last > worst_last)
                worst_last = last;
            const int cap = sw_wire_prompt_rows(widths[w]);
            if (k - (n + cap - 1) / cap > most)
                most = k - (n + cap - 1) / cap;
            const int k0 = s_plan(n, widths[w], 0, &first, &last);
            SW_CHECK(k0 > 0);
            if (widths[w] <= 8192) // whole windows
                SW_CHECK_INT(k0, (n + W - 1) / W);
        }
    /* ... and ends with a block (a remainder under a block joins it) */
    SW_CHECK(worst_last < 2 * SW_PREFIX_BLOCK);
    /* the ramp costs a few Forwards more than the bytes alone would take */
    SW_CHECK(most <= 8);
    fprintf(stderr, "largest last piece %d rows, at most %d pieces more than by bytes alone\n",
            worst_last, most);

    /* The 1,900-row prompt of the 7B benchmark. */
    int first, last;
    SW_CHECK_INT(s_plan(1900, 3584, 1, &first, &last), 10);
    SW_CHECK_INT(first, 64);
    SW_CHECK_INT(last, 64);
    /* A decoding round (the last token and 64 drafts) is one Forward at any width. */
    SW_CHECK_INT(s_plan(SW_MAX_DRAFT + 1, SW_WIRE_MAX_HIDDEN, 0, &first, &last), 1);

    /* The fair queue's pieces (a prefill sharing the pipeline, node/sched.h): never over the
     * bytes or past a window, 8 rows at a window's start, no larger than the fair size. */
    static const int fairs[] = {1, 2, 7, 17, 87, 300, 512};
    for (size_t w = 0; w < sizeof widths / sizeof widths[0]; w++)
        for (size_t f = 0; f < sizeof fairs / sizeof fairs[0]; f++)
            for (int n = 1; n <= 2600; n += n < 600 ? 1 : 13) {
                SW_CHECK(s_plan_fair(n, widths[w], 1, fairs[f], &first, &last) > 0);
                /* a decoding round (or a mixture of experts' window) takes no fair pieces */
                SW_CHECK(node_chunk_rows(0, n, 0, widths[w], 0, fairs[f]) ==
                         node_chunk_rows(0, n, 0, widths[w], 0, 0));
            }
    /* SmolLM2 sharing the pipeline (2 rows a piece): 1,900 rows in 8 + 252 x 2 + ... pieces,
     * every window's first piece 8 rows */
    SW_CHECK_INT(node_chunk_rows(0, 1900, 0, 576, 1, 2), 8);
    SW_CHECK_INT(node_chunk_rows(8, 1892, 1, 576, 1, 2), 2);
    SW_CHECK_INT(node_chunk_rows(512, 1388, 200, 576, 1, 2), 8);
    SW_CHECK_INT(node_chunk_rows(510, 1390, 200, 576, 1, 5), 2); // the window's end
    /* a fair size above the ramp's: the ramp's (64 first) */
    SW_CHECK_INT(node_chunk_rows(0, 1900, 0, 576, 1, 300), 64);
    /* the 70B's width at the fair size of a window: the bytes' 512, the widest's 128 */
    SW_CHECK_INT(node_chunk_rows(512, 1388, 5, 8192, 1, 512), 512);
    SW_CHECK_INT(node_chunk_rows(512, 1388, 5, SW_WIRE_MAX_HIDDEN, 1, 512), 128);
    return sw_test_done();
}
