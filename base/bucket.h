/*
 * bucket.h - token buckets per name in a fixed table (the head's budgets of
 * answers and of resent chunks, one per client key): each refills `rate` a
 * second up to `rate`. A name not in the table takes a free entry with a full
 * bucket, else the entry refilled longest ago and what that entry holds by
 * now: so the table as a whole refills at most n x rate a second however
 * many names take turns in it (a full bucket for every newcomer would give
 * names that push one another out a fresh budget each time).
 */
#ifndef SW_BUCKET_H
#define SW_BUCKET_H

#include "sw_limits.h"

typedef struct sw_bucket {
    char who[SW_WIRE_NAME_MAX + 1]; /* "" = a free entry */
    double level;                   /* what it may spend now */
    double t;                       /* when last refilled (ms) */
} sw_bucket_t;

/* The bucket of who among t[0, n) (n >= 1), refilled to now. */
sw_bucket_t *sw_bucket_get(sw_bucket_t *t, int n, const char *who, double rate, double now);

#endif
