/*
 * expiry.h - a small fixed table of names, each remembered until a time: the
 * head's suspect and proven stages and the nodes whose spot checks failed,
 * placement's benched nodes.
 * A full table forgets the entry that expires first, so a peer that makes
 * up names cannot grow it.
 */
#ifndef SW_EXPIRY_H
#define SW_EXPIRY_H

#include "sw_limits.h"

typedef struct sw_expiry {
    char name[SW_WIRE_NAME_MAX + 1];
    double until; /* remembered until then (ms); 0: a free entry */
    int rank;     /* its weight for sw_expiry_slot_ranked (0 in the unranked tables) */
} sw_expiry_t;

/* The entry of name among t[0, n): its own (live or expired), else a free
 * one or the one that expires first. */
int sw_expiry_slot(const sw_expiry_t *t, int n, const char *name);

/* As sw_expiry_slot, but a live entry (until > now) of a rank higher than `rank` is never
 * given up for name: name's own entry, else a free or expired one, else the live entry of
 * rank <= `rank` that expires first; -1 when every other entry is live and ranks higher
 * (the head's spot marks: a stream of disputes cannot push a conviction out). */
int sw_expiry_slot_ranked(const sw_expiry_t *t, int n, const char *name, int rank, double now);

/* Remembers name until `until` in its entry (sw_expiry_slot); returns it. */
int sw_expiry_put(sw_expiry_t *t, int n, const char *name, double until);

/* The entry of name when it is still remembered at now, else -1. */
int sw_expiry_find(const sw_expiry_t *t, int n, const char *name, double now);

#endif
