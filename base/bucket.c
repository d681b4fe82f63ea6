/*
 * bucket.c - token buckets per name in a fixed table (bucket.h).
 */
#include "bucket.h"

#include <stdio.h>
#include <string.h>

/* b refilled at rate a second from its last refill to now, up to rate. */
static void s_refill(sw_bucket_t *b, double rate, double now)
{
    if (now > b->t)
        b->level += (now - b->t) / 1e3 * rate;
    if (b->level > rate)
        b->level = rate;
    b->t = now;
}

sw_bucket_t *sw_bucket_get(sw_bucket_t *t, int n, const char *who, double rate, double now)
{
    sw_bucket_t *b = &t[0]; // n >= 1
    for (int i = 0; i < n; i++) {
        if (!strcmp(t[i].who, who)) {
            s_refill(&t[i], rate, now);
            return &t[i];
        }
        if (b->who[0] && (!t[i].who[0] || t[i].t < b->t))
            b = &t[i];
    }
    if (!b->who[0]) { // a free entry: a full bucket
        b->level = rate;
        b->t = now;
    } else {
        s_refill(b, rate, now); // what the entry holds by now goes to the newcomer
    }
    snprintf(b->who, sizeof b->who, "%s", who);
    return b;
}
