/*
 * test_sched.c - the fair queue of a node's compute (node/sched.c), driven
 * as the head and the stages drive it: every pass offers the work that could
 * run (one item per session), "runs" the batch node_sched_pick chose (a
 * batch takes S_W ms to read the weights and S_C ms a row) and charges each
 * entry its rows' share of that time.
 *
 *  - a decode round of a key that used little goes before another key's
 *    prompt pieces, and a prompt piece never joins a batch after other work
 *    (it would delay it) while decode rounds join a prompt piece's batch;
 *  - the rows cap: the first entry always runs, the others only within it;
 *  - shares: two keys always backlogged get the same rows, whatever sessions
 *    and tenants each has (a key with 10 tenants and 30 sessions against a
 *    key with one: half each), tenants share their key's half equally, and
 *    a key that runs alone takes every batch (nothing reserved);
 *  - credit: a key idle for a long time gets at most NODE_SCHED_CREDIT_MS of
 *    compute ahead when it comes back, then shares;
 *  - flow ids: the same name under two parents gives two flows; the table
 *    forgets the least recently used flow beyond NODE_SCHED_FLOWS and keeps
 *    working;
 *  - prompt pieces: their rows follow the cost of the previous piece, at
 *    least 1 and at most a window (node/chunk.c cuts the piece: at least 8
 *    rows at a window's start, at most what is left; tests/unit/test_chunk.c).
 */
#include <stdio.h>
#include <string.h>

#include "../../node/sched.c"
#include "sw_test.h"

/* An item of sender `from`, head `head`, client key `key`, its tenant and session. */
static node_sched_item_t s_item_from(node_sched_t *q, const char *from, const char *head,
                                     const char *key, const char *tenant, int session, int rows,
                                     int alone)
{
    node_sched_item_t it = {.rows = rows, .alone = alone};
    node_sched_flows(q, (node_sched_name_t){from, strlen(from)},
                     (node_sched_name_t){head, strlen(head)}, (node_sched_name_t){key, strlen(key)},
                     (node_sched_name_t){tenant, strlen(tenant)}, (uint64_t)session, it.flow);
    return it;
}

/* An item as the head makes it (the head is the one sender of its own queue). */
static node_sched_item_t s_item(node_sched_t *q, const char *key, const char *tenant, int session,
                                int rows, int alone)
{
    return s_item_from(q, "", "", key, tenant, session, rows, alone);
}

#define S_W 5.0 /* ms: a batch's reading of the weights */
#define S_C 1.0 /* ms a row */

/* One pass: picks, "runs" and charges; returns the count and fills sel. */
static int s_pass(node_sched_t *q, const node_sched_item_t *items, int n, int max_rows, int *sel)
{
    const int k = node_sched_pick(q, items, n, max_rows, sel);
    int rows = 0;
    for (int i = 0; i < k; i++)
        rows += items[sel[i]].rows;
    const double ms = S_W + rows * S_C;
    for (int i = 0; i < k; i++)
        node_sched_charge(q, &items[sel[i]], ms * items[sel[i]].rows / rows);
    return k;
}

static void s_test_order(void)
{
    node_sched_t *q = node_sched_new();
    SW_CHECK(q != NULL);
    if (!q)
        return;
    int sel[8];
    /* mallory has prefilled a while; alice decodes */
    node_sched_item_t m = s_item(q, "mallory", "", 1, 64, 1);
    node_sched_item_t a = s_item(q, "alice", "", 2, 1, 0);
    for (int i = 0; i < 20; i++)
        node_sched_charge(q, &m, 69);
    node_sched_item_t both[2] = {m, a};
    int k = node_sched_pick(q, both, 2, 256, sel);
    SW_CHECK_INT(k, 1); // alice's round first, and mallory's piece does not join it
    SW_CHECK_INT(sel[0], 1);
    /* mallory's piece first (alice served more now): alice's round joins it */
    for (int i = 0; i < 40; i++)
        node_sched_charge(q, &a, 69);
    k = node_sched_pick(q, both, 2, 256, sel);
    SW_CHECK_INT(k, 2);
    SW_CHECK_INT(sel[0], 0);
    /* two prompt pieces never share a batch */
    node_sched_item_t p2[2] = {s_item(q, "x", "", 1, 8, 1), s_item(q, "y", "", 1, 8, 1)};
    SW_CHECK_INT(node_sched_pick(q, p2, 2, 256, sel), 1);
    /* the rows cap: the first always, then only what fits */
    node_sched_item_t r[3] = {s_item(q, "a", "", 1, 300, 0), s_item(q, "b", "", 1, 9, 0),
                              s_item(q, "c", "", 1, 9, 0)};
    k = node_sched_pick(q, r, 3, 256, sel);
    SW_CHECK_INT(k, 1); // 300 alone (the others would pass the cap)
    node_sched_item_t r2[3] = {s_item(q, "a2", "", 1, 200, 0), s_item(q, "b2", "", 1, 50, 0),
                               s_item(q, "c2", "", 1, 9, 0)};
    SW_CHECK_INT(node_sched_pick(q, r2, 3, 256, sel), 2); // 200 + 50; 9 more passes 256
    node_sched_free(&q);
    SW_CHECK(q == NULL);
    node_sched_free(&q); // idempotent
}

/* Rows each key got over passes passes where every session always has work;
 * ms (may be NULL): and their compute time. */
static void s_share(node_sched_t *q, node_sched_item_t *items, int n, const int *key_of,
                    double *got, double *ms, int passes, int max_rows)
{
    int sel[64];
    for (int p = 0; p < passes; p++) {
        const int k = s_pass(q, items, n, max_rows, sel);
        int rows = 0;
        for (int i = 0; i < k; i++)
            rows += items[sel[i]].rows;
        for (int i = 0; i < k; i++) {
            got[key_of[sel[i]]] += items[sel[i]].rows;
            if (ms)
                ms[key_of[sel[i]]] += (S_W + rows * S_C) * items[sel[i]].rows / rows;
        }
    }
}

static void s_test_shares(void)
{
    /* key A: 10 tenants x 3 sessions of prompt pieces; key B: one session */
    node_sched_t *q = node_sched_new();
    node_sched_item_t items[31];
    int key_of[31], n = 0;
    for (int t = 0; t < 10; t++)
        for (int s = 0; s < 3; s++) {
            char tn[16];
            snprintf(tn, sizeof tn, "tenant%d", t);
            key_of[n] = 0;
            items[n++] = s_item(q, "A", tn, t * 3 + s, 32, 1);
        }
    key_of[n] = 1;
    items[n++] = s_item(q, "B", "", 99, 32, 1);
    double got[2] = {0, 0}, ms[2] = {0, 0};
    s_share(q, items, n, key_of, got, ms, 400, 256);
    printf("shares: key A (30 sessions, 10 tenants) %.0f rows, key B (1 session) %.0f rows\n",
           got[0], got[1]);
    SW_CHECK_NEAR(got[0], got[1], 64);
    /* A's tenants share its half equally */
    for (int t = 0; t < 10; t++) {
        const double sv = node_sched_served(q, items[t * 3].flow[3]);
        SW_CHECK_NEAR(sv, ms[0] / 10, 2 * (S_W + 32 * S_C));
    }
    node_sched_free(&q);

    /* decode rounds (9 rows, join any batch) of key C, always ready, against key D's pieces
     * (64 rows): the same compute time each; C's rounds also ride along in D's batches */
    q = node_sched_new();
    node_sched_item_t cd[2] = {s_item(q, "C", "", 1, 9, 0), s_item(q, "D", "", 1, 64, 1)};
    int ko[2] = {0, 1};
    double g2[2] = {0, 0}, m2[2] = {0, 0};
    s_share(q, cd, 2, ko, g2, m2, 100, 256);
    printf("decode rounds against prompt pieces: %.0f and %.0f rows, %.0f and %.0f ms in 100 "
           "passes\n",
           g2[0], g2[1], m2[0], m2[1]);
    SW_CHECK_INT((int)g2[0], 900);               // C's round in every pass
    SW_CHECK_NEAR(m2[0], m2[1], S_W + 73 * S_C); // the same time each
    node_sched_free(&q);

    /* alone, a key takes every batch */
    q = node_sched_new();
    node_sched_item_t one = s_item(q, "E", "", 1, 64, 1);
    int k0 = 0;
    double g3[1] = {0};
    s_share(q, &one, 1, &k0, g3, NULL, 50, 256);
    SW_CHECK_NEAR(g3[0], 50 * 64, 0.5);
    node_sched_free(&q);
}

/* Two groups always backlogged, 9 items (one client id each) against 1: half each over 400
 * passes, and the 9 share their half equally (their flow at level `lvl`). */
static void s_half(node_sched_t *q, node_sched_item_t *items, int lvl, const char *what)
{
    int key_of[10];
    for (int i = 0; i < 10; i++)
        key_of[i] = i == 9;
    double got[2] = {0, 0}, ms[2] = {0, 0};
    s_share(q, items, 10, key_of, got, ms, 400, 256);
    printf("%s: %.0f rows against %.0f\n", what, got[0], got[1]);
    SW_CHECK_NEAR(got[0], got[1], 64);
    for (int c = 0; c < 9; c++) {
        const double sv = node_sched_served(q, items[c].flow[lvl]);
        SW_CHECK_NEAR(sv, ms[0] / 9, 2 * (S_W + 32 * S_C));
    }
}

/* At a stage: the senders (authenticated keys) first, then the heads (route[0]) under each,
 * then the client ids. A head that says 9 client ids against a head with one gets half, at
 * its first stage (each head its own sender) and behind a shared middle stage (one sender);
 * a node that names head A in its Forwards stays within its own sender's half. */
static void s_test_senders(void)
{
    static const char *cases[3][4] = {
        /* the 9 ids' sender and head, the one id's sender and head */
        {"head-A", "head-A", "head-B", "head-B"},
        {"mid", "head-A", "mid", "head-B"},
        {"rogue", "head-A", "mid", "head-A"},
    };
    static const char *what[3] = {"first stage: head A (9 client ids), head B (1)",
                                  "behind one middle stage: head A (9 ids), head B (1)",
                                  "a node naming head A (9 ids), the middle stage for A (1)"};
    for (int t = 0; t < 3; t++) {
        node_sched_t *q = node_sched_new();
        node_sched_item_t items[10];
        for (int c = 0; c < 9; c++) {
            char client[16];
            snprintf(client, sizeof client, "client%d", c);
            items[c] = s_item_from(q, cases[t][0], cases[t][1], client, "", c, 32, 1);
        }
        items[9] = s_item_from(q, cases[t][2], cases[t][3], "client0", "", 0, 32, 1);
        SW_CHECK(items[0].flow[2] != items[9].flow[2]); // client0 under two parents: two flows
        s_half(q, items, 2, what[t]);
        node_sched_free(&q);
    }
}

static void s_test_credit(void)
{
    node_sched_t *q = node_sched_new();
    node_sched_item_t a = s_item(q, "busy", "", 1, 64, 1);
    for (int i = 0; i < 1000; i++)
        node_sched_charge(q, &a, 69); // 69 s of compute while "idle" waited elsewhere
    node_sched_item_t items[2] = {a, s_item(q, "idle", "", 2, 64, 1)};
    int key_of[2] = {0, 1}, sel[2], first_idle = 0;
    /* the newcomer goes first for about NODE_SCHED_CREDIT_MS, then they alternate */
    const int ahead = (int)(NODE_SCHED_CREDIT_MS / (S_W + 64 * S_C));
    for (int p = 0; p < ahead; p++) {
        s_pass(q, items, 2, 256, sel);
        first_idle += sel[0] == 1;
    }
    SW_CHECK_INT(first_idle, ahead);
    double got[2] = {0, 0};
    s_share(q, items, 2, key_of, got, NULL, 100, 256);
    printf("after the credit: %.0f and %.0f rows\n", got[0], got[1]);
    SW_CHECK_NEAR(got[0], got[1], 128);
    node_sched_free(&q);
}

static void s_test_flows(void)
{
    node_sched_t *q = node_sched_new();
    const uint64_t a = node_sched_flow(q, 0, "k", 1), b = node_sched_flow(q, 1, "k", 1);
    SW_CHECK(a != b && a != 0 && b != 0);
    SW_CHECK(a == node_sched_flow(q, 0, "k", 1));
    char big[1000];
    memset(big, 'x', sizeof big);
    const uint64_t l1 = node_sched_flow(q, 0, big, sizeof big);
    big[999] = 'y'; // a difference past the first block counts
    SW_CHECK(l1 != node_sched_flow(q, 0, big, sizeof big));
    node_sched_t *q2 = node_sched_new(); // another secret, other ids
    SW_CHECK(a != node_sched_flow(q2, 0, "k", 1));
    node_sched_free(&q2);
    /* more flows than the table holds: the oldest go, picks still work */
    int sel[2];
    for (int i = 0; i < 3 * NODE_SCHED_FLOWS; i++) {
        char key[32];
        snprintf(key, sizeof key, "key%d", i);
        node_sched_item_t it[2] = {s_item(q, key, "", i, 8, 1), s_item(q, "steady", "", 0, 8, 1)};
        SW_CHECK(node_sched_pick(q, it, 2, 256, sel) == 1);
        node_sched_charge(q, &it[0], 8);
        node_sched_charge(q, &it[1], 8);
    }
    node_sched_item_t st = s_item(q, "steady", "", 0, 8, 1);
    SW_CHECK(node_sched_served(q, st.flow[2]) > 0); // used all along: never forgotten
    node_sched_item_t old = s_item(q, "key0", "", 0, 8, 1);
    SW_CHECK(node_sched_served(q, old.flow[2]) == 0); // forgotten
    node_sched_free(&q);
}

static void s_test_pieces(void)
{
    /* no measurement yet: 64 rows (node/chunk.c cuts them to what is left) */
    SW_CHECK_INT(node_sched_piece_rows(0, 0, 0, 8), 64);
    SW_CHECK_INT(node_sched_piece_rows(5, 0, 0, 8), 64);
    /* previous piece: 64 rows in 5 + 64 x 2 ms: about (k - 1) x 5 / 2 rows */
    SW_CHECK_INT(node_sched_piece_rows(5, 64, 133, 8), 17);
    SW_CHECK_INT(node_sched_piece_rows(5, 64, 133, NODE_SCHED_PIECE_SHARED), 2);
    /* a big model: one-row forwards of 250 ms, 20 ms a row: ~87 rows alone, ~12 shared */
    SW_CHECK_INT(node_sched_piece_rows(250, 64, 250 + 64 * 20, 8), 87);
    SW_CHECK_INT(node_sched_piece_rows(250, 64, 250 + 64 * 20, NODE_SCHED_PIECE_SHARED), 12);
    /* a piece measured faster than a one-row forward (noise): a quarter of it counts */
    SW_CHECK(node_sched_piece_rows(50, 8, 10, NODE_SCHED_PIECE_SHARED) >= 1);
    /* a row far cheaper than the weights' reading: at most a window */
    SW_CHECK_INT(node_sched_piece_rows(1000, 64, 1000.5, 8), SW_WIRE_MAX_ROWS);
}

int main(void)
{
    s_test_order();
    s_test_shares();
    s_test_senders();
    s_test_credit();
    s_test_flows();
    s_test_pieces();
    return sw_test_done();
}
