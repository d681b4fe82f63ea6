/*
 * test_expiry.c - the tables of names that expire (base/expiry.h): a name is
 * found until its time and not after; putting it again moves its time and
 * takes no second entry; a full table gives a new name a free entry first,
 * else the entry that expires first, so the names that stay longest survive
 * a stream of made-up names (the bound a hostile peer meets); a name longer
 * than an entry is cut, never written past it. Ranked (the head's spot marks):
 * a stream of lower-ranked names never takes a live entry of a higher rank,
 * even one that expires first; an expired one, or one of their own rank, they may.
 */
#include <stdio.h>
#include <string.h>

#include "expiry.h"
#include "sw_test.h"

#define N 4

int main(void)
{
    sw_expiry_t t[N];
    memset(t, 0, sizeof t);

    /* found until its time, not after */
    sw_expiry_put(t, N, "tail-a", 1000);
    SW_CHECK(sw_expiry_find(t, N, "tail-a", 999) >= 0);
    SW_CHECK_INT(sw_expiry_find(t, N, "tail-a", 1000), -1);
    SW_CHECK_INT(sw_expiry_find(t, N, "tail-b", 0), -1);
    SW_CHECK_INT(sw_expiry_find(t, N, "", 0), -1); /* free entries hold no name */

    /* again: the same entry, its new time */
    const int a = sw_expiry_find(t, N, "tail-a", 0);
    SW_CHECK_INT(sw_expiry_put(t, N, "tail-a", 5000), a);
    SW_CHECK(sw_expiry_find(t, N, "tail-a", 4999) >= 0);
    /* an expired name is put back in its own entry */
    SW_CHECK_INT(sw_expiry_put(t, N, "tail-a", 7000), a);

    /* free entries first */
    sw_expiry_put(t, N, "b", 9000);
    sw_expiry_put(t, N, "c", 8000);
    sw_expiry_put(t, N, "d", 6000);
    SW_CHECK(sw_expiry_find(t, N, "tail-a", 0) >= 0 && sw_expiry_find(t, N, "b", 0) >= 0 &&
             sw_expiry_find(t, N, "c", 0) >= 0 && sw_expiry_find(t, N, "d", 0) >= 0);

    /* full: the one that expires first ("d", 6000) makes room */
    const int d = sw_expiry_find(t, N, "d", 0);
    SW_CHECK_INT(sw_expiry_put(t, N, "e", 9500), d);
    SW_CHECK_INT(sw_expiry_find(t, N, "d", 0), -1);

    /* a stream of made-up names with short times never displaces the longest ones */
    char name[32];
    for (int i = 0; i < 1000; i++) {
        snprintf(name, sizeof name, "fake-%d", i);
        sw_expiry_put(t, N, name, 100 + i);
    }
    SW_CHECK(sw_expiry_find(t, N, "b", 0) >= 0 && sw_expiry_find(t, N, "e", 0) >= 0 &&
             sw_expiry_find(t, N, "c", 0) >= 0);

    /* a name longer than an entry is cut to it */
    char longname[200];
    memset(longname, 'x', sizeof longname - 1);
    longname[sizeof longname - 1] = 0;
    const int l = sw_expiry_put(t, N, longname, 20000);
    SW_CHECK_INT((int)strlen(t[l].name), SW_WIRE_NAME_MAX);

    /* ranked: a full table of rank 2 (convictions), the first expiring at 1000 */
    sw_expiry_t r[N];
    memset(r, 0, sizeof r);
    for (int i = 0; i < N; i++) {
        snprintf(r[i].name, sizeof r[i].name, "conv-%d", i);
        r[i].until = 1000 + 100 * i;
        r[i].rank = 2;
    }
    for (int i = 0; i < 1000; i++) { /* disputes (rank 1) at now = 500: none takes an entry */
        snprintf(name, sizeof name, "disp-%d", i);
        SW_CHECK_INT(sw_expiry_slot_ranked(r, N, name, 1, 500), -1);
    }
    SW_CHECK_INT(sw_expiry_slot_ranked(r, N, "conv-2", 1, 500), 2);   /* its own entry */
    SW_CHECK_INT(sw_expiry_slot_ranked(r, N, "conv-new", 2, 500), 0); /* a rank 2: the first */
    SW_CHECK_INT(sw_expiry_slot_ranked(r, N, "disp-x", 1, 1000), 0);  /* conv-0 expired at 1000 */
    r[3].rank = 1; /* a dispute among them: the dispute's entry, not an earlier conviction */
    SW_CHECK_INT(sw_expiry_slot_ranked(r, N, "disp-y", 1, 500), 3);
    return sw_test_done();
}
