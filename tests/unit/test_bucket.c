/*
 * test_bucket.c - the token buckets per name of base/bucket.h: a name's
 * bucket refills at its rate up to the rate; a newcomer on a free entry
 * starts full; names that take turns in a full table (more names than
 * entries, each pushing another out) share what the table refills, n x rate
 * a second, instead of each getting a fresh bucket (the head's answers per
 * client key, docs/security.md section 6).
 */
#include <stdio.h>
#include <string.h>

#include "bucket.h"
#include "sw_test.h"

#define RATE 20.0

/* Spends all that who may spend at now; returns how much. */
static int s_spend(sw_bucket_t *t, int n, const char *who, double now)
{
    sw_bucket_t *b = sw_bucket_get(t, n, who, RATE, now);
    int k = 0;
    while (b->level >= 1) {
        b->level -= 1;
        k++;
    }
    return k;
}

int main(void)
{
    sw_bucket_t t[4];
    memset(t, 0, sizeof t);
    /* one name: full at first, then the rate */
    SW_CHECK_INT(s_spend(t, 4, "alice", 1000), (int)RATE);
    SW_CHECK_INT(s_spend(t, 4, "alice", 1000), 0);
    SW_CHECK_INT(s_spend(t, 4, "alice", 1500), (int)(RATE / 2));
    SW_CHECK_INT(s_spend(t, 4, "alice", 60000), (int)RATE); /* never above the rate */
    /* a second name on a free entry starts full; alice's bucket is hers */
    SW_CHECK_INT(s_spend(t, 4, "bob", 60000), (int)RATE);
    SW_CHECK_INT(s_spend(t, 4, "alice", 60000), 0);
    /* 40 names taking turns in the 4 entries for 10 s, each spending all it may every 10 ms:
     * at most what 4 entries refill (4 x RATE a second) plus what they held at the start */
    memset(t, 0, sizeof t);
    long spent = 0;
    for (int step = 0; step < 1000; step++) {
        char who[16];
        snprintf(who, sizeof who, "k%d", step % 40);
        spent += s_spend(t, 4, who, 10.0 * step);
    }
    printf("40 names in a table of 4 at %.0f a second each, 10 s: %ld spent (bound %.0f)\n", RATE,
           spent, 4 * RATE * 10 + 4 * RATE);
    SW_CHECK(spent <= 4 * RATE * 10 + 4 * RATE);
    SW_CHECK(spent >= 4 * RATE * 10 - 4 * RATE); /* and the table's rate is not lost either */
    return sw_test_done();
}
