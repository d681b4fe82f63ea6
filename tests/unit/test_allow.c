/*
 * test_allow.c - who may announce what under an allow-list (net/keys.c,
 * sw_allow_permit: what the relay checks at every announce and a node's
 * listener at every dial). A list with a head, a stage, a client bound to
 * "gate", a client bound to "gate-admin" and an unnamed client:
 *
 *  - node keys only as their own name and role;
 *  - a client key bound to a name: that name or NAME-SUFFIX, never a node role;
 *  - a name the list gives one key is reserved for it: no other key may
 *    announce it, also not a bound client whose own name is a prefix of it
 *    ("gate" may not announce "gate-admin": before, the prefix rule let it,
 *    so a client key could squat another key's listed name while that peer
 *    was away);
 *  - an unnamed client key: any name the list does not give another key.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "codec.h"
#include "keys.h"
#include "sw_test.h"

static char s_pub[5][41];

static int s_permit(const sw_allow_entry_t *l, int n, int who, const char *name, int role)
{
    char why[256] = "";
    int rc = sw_allow_permit(l, n, s_pub[who], name, role, why, sizeof why);
    printf("key %d as '%s' (role %d): %s%s\n", who, name, role,
           rc == 0 ? "allowed" : "refused: ", why);
    return rc;
}

int main(void)
{
    char sec[41];
    for (int i = 0; i < 5; i++)
        SW_CHECK_INT(zmq_curve_keypair(s_pub[i], sec), 0);
    char path[512];
    snprintf(path, sizeof path, "%s/allow.txt", sw_test_tmpdir());
    FILE *f = fopen(path, "w");
    if (!f)
        sw_test_skip("cannot write the allow-list");
    fprintf(f, "%s head head\n%s stage tail\n%s client gate\n%s client gate-admin\n%s client\n",
            s_pub[0], s_pub[1], s_pub[2], s_pub[3], s_pub[4]);
    fclose(f);
    sw_allow_entry_t *l = NULL;
    int n = 0;
    char err[256];
    SW_CHECK_INT(sw_allow_load(path, &l, &n, err, sizeof err), 0);
    SW_CHECK_INT(n, 5);

    /* node keys: their own name and role only */
    SW_CHECK_INT(s_permit(l, n, 0, "head", SW_ROLE_HEAD), 0);
    SW_CHECK_INT(s_permit(l, n, 0, "tail", SW_ROLE_TAIL), -1);
    SW_CHECK_INT(s_permit(l, n, 1, "tail", SW_ROLE_TAIL), 0);
    SW_CHECK_INT(s_permit(l, n, 1, "tail", SW_ROLE_HEAD), -1);
    /* a bound client: its name and its suffixed forms, as a client only */
    SW_CHECK_INT(s_permit(l, n, 2, "gate", SW_ROLE_CLIENT), 0);
    SW_CHECK_INT(s_permit(l, n, 2, "gate-7f3a", SW_ROLE_CLIENT), 0);
    SW_CHECK_INT(s_permit(l, n, 2, "gate", SW_ROLE_TAIL), -1);
    SW_CHECK_INT(s_permit(l, n, 2, "other", SW_ROLE_CLIENT), -1);
    /* ... but not a suffixed form that the list gives another key */
    SW_CHECK_INT(s_permit(l, n, 2, "gate-admin", SW_ROLE_CLIENT), -1);
    SW_CHECK_INT(s_permit(l, n, 3, "gate-admin", SW_ROLE_CLIENT), 0);
    SW_CHECK_INT(s_permit(l, n, 3, "gate-admin-2", SW_ROLE_CLIENT), 0);
    /* the unnamed client: anything but the listed names */
    SW_CHECK_INT(s_permit(l, n, 4, "client-1234", SW_ROLE_CLIENT), 0);
    SW_CHECK_INT(s_permit(l, n, 4, "tail", SW_ROLE_CLIENT), -1);
    SW_CHECK_INT(s_permit(l, n, 4, "gate", SW_ROLE_CLIENT), -1);
    SW_CHECK_INT(s_permit(l, n, 4, "gate-admin", SW_ROLE_CLIENT), -1);
    SW_CHECK_INT(s_permit(l, n, 4, "head", SW_ROLE_HEAD), -1);
    free(l);
    return sw_test_done();
}
