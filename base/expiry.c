/* expiry.c - see expiry.h */
#include "expiry.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

int sw_expiry_slot_ranked(const sw_expiry_t *t, int n, const char *name, int rank, double now)
{
    int at = -1;
    for (int i = 0; i < n; i++) {
        if (!strcmp(t[i].name, name))
            return i;
        if (t[i].until > now && t[i].rank > rank)
            continue; /* live and of a higher rank: kept */
        if (at < 0 || t[i].until < t[at].until)
            at = i; /* a free entry (0), an expired one, or the one that expires first */
    }
    return at;
}

int sw_expiry_slot(const sw_expiry_t *t, int n, const char *name)
{
    return sw_expiry_slot_ranked(t, n, name, INT_MAX, 0); /* no rank kept: any entry may go */
}

int sw_expiry_put(sw_expiry_t *t, int n, const char *name, double until)
{
    const int at = sw_expiry_slot(t, n, name);
    snprintf(t[at].name, sizeof t[at].name, "%s", name);
    t[at].until = until;
    return at;
}

int sw_expiry_find(const sw_expiry_t *t, int n, const char *name, double now)
{
    for (int i = 0; i < n; i++)
        if (t[i].until > now && !strcmp(t[i].name, name))
            return i;
    return -1;
}
