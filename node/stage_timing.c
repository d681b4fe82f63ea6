/*
 * stage_timing.c - what a stage says about its time in a round's timing
 * entries (StageTiming, docs/protocol.md "Timing"), so that the head can
 * split a round's time between the nodes and the network even when the
 * round is a prefill in many chunks that the stages compute at once
 * (pipelined):
 *
 *  - compute_us: this chunk's batch; on a prefill's last chunk, every chunk
 *    of the round at this stage (its whole work);
 *  - critical_us: this stage's part of the round's critical path: from the
 *    arrival of the chunk that found it waiting for this round (its current
 *    busy stretch for the session) to the end of this chunk. The entries of
 *    the stages before it are passed on as that chunk carried them, so the
 *    last chunk's entries are one chain of waits: head, network, stage 1,
 *    network, ... whose parts add up, with the network, to the round.
 *
 * A stage is waiting for a round when its previous chunk of the session ended
 * (and went on) before this one was read; the loop reads messages only
 * between batches, so a chunk that came during a batch counts as waited for
 * (S_IDLE_MS of slack covers the loop's own work).
 */
#include <string.h>

#include "node.h"
#include "stage.h"

#define S_IDLE_MS 5.0 // a gap after the last chunk shorter than this is the loop, not waiting

uint32_t node_stage_timing(node_session_t *s, const sw_msg_forward_t *f,
                           const sw_msg_timing_t *mine, double t_arrive, double t0, double t1,
                           sw_msg_timing_t *out)
{
    const uint32_t up = f->n_timing < SW_WIRE_MAX_ROUTE - 1 ? f->n_timing : SW_WIRE_MAX_ROUTE - 1;
    const int continues = s->prefill_open && f->kv_keep == s->prefill_next;
    if (!continues)
        s->round_work_ms = 0; // a new round
    if (!continues || t_arrive > s->last_end + S_IDLE_MS) {
        /* this chunk found the stage waiting: a new stretch, and the path to it is the
         * one its entries carry */
        s->stretch_t0 = t_arrive;
        s->n_crit_up = up;
        for (uint32_t i = 0; i < up; i++)
            s->crit_up[i] = f->timing[i].critical_us;
    }
    for (uint32_t i = 0; i < up; i++) {
        out[i] = f->timing[i];
        out[i].critical_us = i < s->n_crit_up ? s->crit_up[i] : 0;
    }
    out[up] = *mine;
    const double batch = t1 - t0, crit = t1 - s->stretch_t0;
    out[up].critical_us = node_us(crit);
    if (f->prefill_more) {
        s->round_work_ms += batch;
        s->prefill_open = 1;
        s->prefill_next = f->kv_keep + f->n_rows;
    } else {
        out[up].compute_us = node_us(s->round_work_ms + batch);
        s->round_work_ms = 0;
        s->prefill_open = 0;
    }
    return up + 1;
}
