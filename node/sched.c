/*
 * sched.c - the fair queue of a node's compute (sched.h says the rule).
 *
 * The flows live in an open-addressing table (linear probing, deletion by
 * shifting back) of twice NODE_SCHED_FLOWS slots, keyed by their 64-bit id;
 * when it holds NODE_SCHED_FLOWS flows, the one used least recently goes.
 * A pick copies the service of the flows its items name into small arrays,
 * lifts the ones behind by more than the credit (in the table too), and
 * orders the items by (sender, head, client key, tenant, session) service, charging each
 * taken item to the copies as it goes, the way the batches after it would.
 */
#include "sched.h"

#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "sw_limits.h"

#define S_SLOTS (2 * NODE_SCHED_FLOWS) // a power of two

typedef struct s_flow {
    uint64_t id;     // 0 = free slot
    double served;   // compute it had (ms)
    uint64_t used;   // tick of its last use
    uint64_t parent; // the flow above it (0 for a sender): siblings share it
} s_flow_t;

struct node_sched {
    unsigned char key[crypto_shorthash_KEYBYTES]; // the ids' secret
    s_flow_t slot[S_SLOTS];                       // the table
    int n;                                        // flows in it
    uint64_t tick;                                // uses so far
};

node_sched_t *node_sched_new(void)
{
    node_sched_t *q = calloc(1, sizeof *q);
    if (q)
        crypto_shorthash_keygen(q->key);
    return q;
}

void node_sched_free(node_sched_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    sodium_memzero((*self_p)->key, sizeof(*self_p)->key);
    free(*self_p);
    *self_p = NULL;
}

uint64_t node_sched_flow(const node_sched_t *q, uint64_t parent, const void *name, size_t len)
{
    /* SipHash over the parent's id and the name, 248 bytes at a time, each block
     * chained under the id of the ones before; 0 is the free slot's id */
    const unsigned char *p = name;
    uint64_t id = parent;
    do {
        unsigned char buf[256];
        const size_t take = len < sizeof buf - 8 ? len : sizeof buf - 8;
        memcpy(buf, &id, 8);
        if (take)
            memcpy(buf + 8, p, take);
        crypto_shorthash((unsigned char *)&id, buf, 8 + take, q->key);
        p += take;
        len -= take;
    } while (len > 0);
    return id ? id : 1;
}

void node_sched_flows(const node_sched_t *q, node_sched_name_t sender, node_sched_name_t head,
                      node_sched_name_t client, node_sched_name_t tenant, uint64_t session,
                      uint64_t *out)
{
    out[0] = node_sched_flow(q, 0, sender.p, sender.len);
    out[1] = node_sched_flow(q, out[0], head.p, head.len);
    out[2] = node_sched_flow(q, out[1], client.p, client.len);
    out[3] = node_sched_flow(q, out[2], tenant.p, tenant.len);
    out[4] = node_sched_flow(q, out[3], &session, sizeof session);
}

/* The slot of flow id, or NULL when not remembered. */
static s_flow_t *s_find(node_sched_t *q, uint64_t id)
{
    for (size_t i = id & (S_SLOTS - 1);; i = (i + 1) & (S_SLOTS - 1)) {
        if (q->slot[i].id == id)
            return &q->slot[i];
        if (!q->slot[i].id)
            return NULL;
    }
}

/* Frees slot i, shifting the entries after it back (linear probing). */
static void s_remove(node_sched_t *q, size_t i)
{
    q->slot[i].id = 0;
    q->n--;
    for (size_t j = (i + 1) & (S_SLOTS - 1); q->slot[j].id; j = (j + 1) & (S_SLOTS - 1)) {
        const size_t home = q->slot[j].id & (S_SLOTS - 1);
        /* entry j may move to i when i lies on its probe path: home .. j (cyclic) */
        if (((j - home) & (S_SLOTS - 1)) >= ((j - i) & (S_SLOTS - 1))) {
            q->slot[i] = q->slot[j];
            q->slot[j].id = 0;
            i = j;
        }
    }
}

/* The slot of flow id, added (service 0) when new; the least recently used
 * flow goes when the table is full. Never NULL. */
static s_flow_t *s_get(node_sched_t *q, uint64_t id, uint64_t parent)
{
    s_flow_t *f = s_find(q, id);
    if (!f) {
        if (q->n >= NODE_SCHED_FLOWS) {
            size_t old = 0;
            for (size_t i = 1; i < S_SLOTS; i++)
                if (q->slot[i].id && (!q->slot[old].id || q->slot[i].used < q->slot[old].used))
                    old = i;
            s_remove(q, old);
        }
        size_t i = id & (S_SLOTS - 1);
        while (q->slot[i].id)
            i = (i + 1) & (S_SLOTS - 1);
        f = &q->slot[i];
        memset(f, 0, sizeof *f);
        f->id = id;
        f->parent = parent;
        q->n++;
    }
    f->used = ++q->tick;
    return f;
}

double node_sched_served(const node_sched_t *q, uint64_t flow)
{
    const s_flow_t *f = s_find((node_sched_t *)q, flow);
    return f ? f->served : 0;
}

void node_sched_charge(node_sched_t *q, const node_sched_item_t *item, double ms)
{
    uint64_t parent = 0;
    for (int l = 0; l < NODE_SCHED_LEVELS; l++) {
        s_get(q, item->flow[l], parent)->served += ms > 0 ? ms : 0;
        parent = item->flow[l];
    }
}

/* Lifts every flow of items[0..n) at level l that is more than the credit
 * behind the most served of its competing siblings (same parent). */
static void s_lift(node_sched_t *q, const node_sched_item_t *items, int n, int l)
{
    for (int i = 0; i < n; i++) {
        const uint64_t parent = l ? items[i].flow[l - 1] : 0;
        double most = 0;
        for (int j = 0; j < n; j++)
            if (!l || items[j].flow[l - 1] == parent) {
                const double s = s_get(q, items[j].flow[l], parent)->served;
                most = s > most ? s : most;
            }
        s_flow_t *f = s_get(q, items[i].flow[l], parent);
        if (f->served < most - NODE_SCHED_CREDIT_MS)
            f->served = most - NODE_SCHED_CREDIT_MS;
    }
}

/* The batch from the service of each flow the items name (fl: per item and
 * level, an index into sv), charging each item taken to sv as the batches
 * after it would (its rows stand for its time: the order only needs to be
 * about right, and the charge after the batch is the measured one). */
static int s_order(const node_sched_item_t *items, int n, int max_rows,
                   const int (*fl)[NODE_SCHED_LEVELS], double *sv, char *done, int *sel)
{
    int k = 0, rows = 0;
    for (;;) {
        int best = -1;
        for (int i = 0; i < n; i++) {
            if (done[i] || (k > 0 && (items[i].alone || rows + items[i].rows > max_rows)))
                continue;
            int better = best < 0;
            for (int l = 0; l < NODE_SCHED_LEVELS && !better; l++)
                if (sv[fl[i][l]] != sv[fl[best][l]]) {
                    better = sv[fl[i][l]] < sv[fl[best][l]];
                    break;
                }
            if (better)
                best = i;
        }
        if (best < 0)
            return k;
        done[best] = 1;
        sel[k++] = best;
        rows += items[best].rows;
        for (int l = 0; l < NODE_SCHED_LEVELS; l++)
            sv[fl[best][l]] += items[best].rows;
    }
}

int node_sched_pick(node_sched_t *q, const node_sched_item_t *items, int n, int max_rows, int *sel)
{
    if (n <= 0)
        return 0;
    for (int l = 0; l < NODE_SCHED_LEVELS; l++)
        s_lift(q, items, n, l);
    int(*fl)[NODE_SCHED_LEVELS] = malloc((size_t)n * sizeof *fl);
    uint64_t *ids = malloc((size_t)n * NODE_SCHED_LEVELS * sizeof *ids);
    double *sv = malloc((size_t)n * NODE_SCHED_LEVELS * sizeof *sv);
    char *done = calloc((size_t)n, 1);
    int k = 0;
    if (fl && ids && sv && done) {
        int nf = 0; // the distinct flows the items name, with their service
        for (int i = 0; i < n; i++) {
            uint64_t parent = 0;
            for (int l = 0; l < NODE_SCHED_LEVELS; l++) {
                const uint64_t id = items[i].flow[l];
                int f = 0;
                while (f < nf && ids[f] != id)
                    f++;
                if (f == nf) {
                    ids[nf] = id;
                    sv[nf++] = s_get(q, id, parent)->served;
                }
                fl[i][l] = f;
                parent = id;
            }
        }
        k = s_order(items, n, max_rows, (const int(*)[NODE_SCHED_LEVELS])fl, sv, done, sel);
    } else { // out of memory: the order they came in
        int rows = 0;
        for (int i = 0; i < n; i++)
            if (k == 0 || (!items[i].alone && rows + items[i].rows <= max_rows)) {
                sel[k++] = i;
                rows += items[i].rows;
            }
    }
    free(fl);
    free(ids);
    free(sv);
    free(done);
    return k;
}

int node_sched_piece_rows(double w_ms, int prev_rows, double prev_ms, int k)
{
    int rows = 64;
    if (w_ms > 0 && prev_rows > 0 && prev_ms > 0) {
        /* the previous piece cost w_ms (the weights' reading, the call) + its rows x c */
        double per_row = (prev_ms - w_ms) / prev_rows;
        if (per_row < prev_ms / 4 / prev_rows)
            per_row = prev_ms / 4 / prev_rows; // noise: a piece faster than a one-row forward
        const double want = (k - 1) * w_ms / per_row;
        rows = want >= SW_WIRE_MAX_ROWS ? SW_WIRE_MAX_ROWS : want < 1 ? 1 : (int)want;
    }
    return rows;
}
