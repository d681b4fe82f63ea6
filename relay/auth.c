/*
 * auth.c - who may use the relay (docs/security.md): the allow-list file
 * (loaded at start, re-read when it changes and on SIGHUP, a file that fails
 * to parse keeping the list in force), what each key may announce (its role,
 * its name, the names reserved for other keys), the ZAP handler that admits
 * only listed CURVE keys (RFC 27, an inproc REP socket served by the loop),
 * its rate-limited log of refused handshakes, and the CurveZMQ setup.
 */
#include "relay_impl.h"

#include "log.h"

#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define RELAY_ZAP_EP "inproc://zeromq.zap.01" /* fixed by the ZAP spec (RFC 27) */
#define RELAY_ALLOW_CHECK_MS 1000             /* allow-list file change check period */
#define RELAY_REFUSE_LOG_MS 60000             /* refused-handshake log window */
#define RELAY_REFUSE_LOG_LINES 5              /* refusals logged one by one per window */

/* ---- the allow-list ------------------------------------------------------------ */

/* The allow-list entry of Z85 key `key`, or NULL (not on the list, or no key). */
const sw_allow_entry_t *relay_allowed(const relay_t *r, const char *key)
{
    if (!key)
        return NULL;
    for (int i = 0; i < r->n_allow; i++)
        if (strncmp(r->allow[i].key, key, SW_KEY_Z85_LEN) == 0 && strlen(key) == SW_KEY_Z85_LEN)
            return &r->allow[i];
    return NULL;
}

static int s_is_node_role(int role)
{
    return role >= SW_ROLE_HEAD && role <= SW_ROLE_FULL;
}

/* 1 when name is base or base-SUFFIX: a client key bound to the name base may announce both
 * (a client adds a random suffix to its name). */
static int s_name_in(const char *base, const char *name)
{
    size_t n = strlen(base);
    return n > 0 && !strncmp(base, name, n) && (name[n] == 0 || name[n] == '-');
}

/*
 * Whether key `user` may announce as `name` with `role` (secure relays): its
 * allow-list entry binds a role and maybe a name, and a name listed for some
 * key is reserved for the keys that list it, even while no peer holds it. 0,
 * or -1 with the reason in why.
 */
int relay_permit(const relay_t *r, const char *user, const char *name, int role, char *why,
                 size_t why_len)
{
    const sw_allow_entry_t *e = relay_allowed(r, user);
    if (!e) {
        snprintf(why, why_len, "your key is not on the relay's allow-list");
        return -1;
    }
    if (e->role == SW_ALLOW_NODE && (!s_is_node_role(role) || strcmp(e->name, name) != 0)) {
        snprintf(why, why_len,
                 "this key is the node key of '%s': it may only announce as '%s', as a head, "
                 "middle or tail node",
                 e->name, e->name);
        return -1;
    }
    /* a node key bound to a role too ("KEY head NAME", "KEY stage NAME"): any other node key
     * could otherwise announce a second head of a model and make the clients refuse to
     * choose (issue 21, finding 9) */
    if (e->role == SW_ALLOW_NODE && e->bind == SW_BIND_HEAD && role != SW_ROLE_HEAD &&
        role != SW_ROLE_FULL) {
        snprintf(why, why_len,
                 "the allow-list binds this key to the head role ('KEY head %s'): it may only "
                 "announce as a head (layers from 0)",
                 e->name);
        return -1;
    }
    if (e->role == SW_ALLOW_NODE && e->bind == SW_BIND_STAGE && role != SW_ROLE_MIDDLE &&
        role != SW_ROLE_TAIL) {
        snprintf(why, why_len,
                 "the allow-list binds this key to a stage ('KEY stage %s'): it may only announce "
                 "as a middle or tail node, not as a head",
                 e->name);
        return -1;
    }
    if (e->role == SW_ALLOW_CLIENT && role != SW_ROLE_CLIENT) {
        snprintf(why, why_len,
                 "this is a client key: it cannot announce as a head, middle or tail node (a "
                 "node needs its own key, listed as 'KEY head|stage NAME' in the allow-list)");
        return -1;
    }
    if (e->role == SW_ALLOW_CLIENT && e->name[0] && !s_name_in(e->name, name)) {
        snprintf(why, why_len, "this client key may only announce as '%s' or '%s-...'", e->name,
                 e->name);
        return -1;
    }
    /* A listed name itself is reserved; its suffixed forms are not: a bound
     * client adds 48 random bits to it, a live name is never taken, a dead
     * one is held for its key (--name-hold-s) and the head streams a request
     * only to the key that asked. Reserving the prefix too would refuse every
     * unnamed client key as soon as the list names a client "client" (cluster
     * init's default), as clients announce "client-SUFFIX" by default. */
    if (!e->name[0]) {
        for (int i = 0; i < r->n_allow; i++)
            if (!strcmp(r->allow[i].name, name)) {
                snprintf(why, why_len,
                         "the name '%s' is reserved in the relay's allow-list for another key",
                         name);
                return -1;
            }
    }
    return 0;
}

/* What the peer table says of a peer announced under entry e (NULL: none, insecure):
 * SW_KEY_BOUND_ROLE for a node key bound to its name and role, SW_KEY_BOUND_NAME for one
 * bound to its name only, 0 otherwise. */
int relay_key_bound(const sw_allow_entry_t *e)
{
    if (!e || e->role != SW_ALLOW_NODE)
        return 0;
    return e->bind == SW_BIND_ANY ? SW_KEY_BOUND_NAME : SW_KEY_BOUND_ROLE;
}

static int s_name_cmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Distinct node names of the allow-list: the table keeps room for them. */
static int s_count_node_names(const relay_t *r)
{
    const char **names = malloc((size_t)(r->n_allow ? r->n_allow : 1) * sizeof *names);
    if (!names)
        return 0;
    int n = 0, distinct = 0;
    for (int i = 0; i < r->n_allow; i++)
        if (r->allow[i].role == SW_ALLOW_NODE)
            names[n++] = r->allow[i].name;
    qsort(names, (size_t)n, sizeof *names, s_name_cmp);
    for (int i = 0; i < n; i++)
        distinct += i == 0 || strcmp(names[i - 1], names[i]) != 0;
    free(names);
    return distinct;
}

/*
 * Re-reads the allow-list when the file changed (or when forced) and drops
 * every peer whose key is no longer on it or may no longer hold its name and
 * role. A file that fails to parse keeps the previous list (with an error
 * line each time the file changes), so a typo cannot open the relay to
 * anyone. 0, or -1 when the first load fails.
 */
static int s_allow_reload(relay_t *r, int force)
{
    struct stat st;
    if (stat(r->allow_path, &st) != 0) {
        /* said once until the file is back or the reason changes (the relay checks each second) */
        if (r->allow && errno == r->allow_errno)
            return 0;
        r->allow_errno = errno;
        if (r->allow)
            SW_ERR("relay: allow-list %s: %s (keeping the %d keys loaded)", r->allow_path,
                   strerror(errno), r->n_allow);
        else
            SW_ERR("relay: allow-list %s: %s", r->allow_path, strerror(errno));
        return r->allow ? 0 : -1;
    }
    if (r->allow_errno && r->allow)
        SW_INFO("relay: allow-list %s is back", r->allow_path);
    r->allow_errno = 0;
    if (!force && r->allow && st.st_mtim.tv_sec == r->allow_st.st_mtim.tv_sec &&
        st.st_mtim.tv_nsec == r->allow_st.st_mtim.tv_nsec && st.st_size == r->allow_st.st_size &&
        st.st_ino == r->allow_st.st_ino)
        return 0;
    r->allow_st = st;
    sw_allow_entry_t *list = NULL;
    int n = 0;
    char err[512];
    if (sw_allow_load(r->allow_path, &list, &n, err, sizeof err) != 0) {
        if (r->allow)
            SW_ERR("relay: %s (keeping the %d keys loaded before)", err, r->n_allow);
        else
            SW_ERR("relay: %s", err);
        return r->allow ? 0 : -1;
    }
    int first = r->allow == NULL;
    free(r->allow);
    r->allow = list ? list : calloc(1, sizeof *list); /* non-NULL marks "loaded" */
    r->n_allow = list ? n : 0;
    if (!r->allow)
        return -1;
    int nodes = 0, legacy = 0, legacy_line = 0, unbound = 0, unbound_line = 0;
    for (int i = 0; i < r->n_allow; i++) {
        nodes += r->allow[i].role == SW_ALLOW_NODE;
        if (r->allow[i].legacy && !legacy++)
            legacy_line = r->allow[i].legacy;
        if (r->allow[i].role == SW_ALLOW_NODE && r->allow[i].bind == SW_BIND_ANY && !unbound++)
            unbound_line = r->allow[i].line;
    }
    r->node_names = s_count_node_names(r);
    SW_INFO("relay: allow-list %s: %d keys (%d node, %d client)%s", r->allow_path, r->n_allow,
            nodes, r->n_allow - nodes, first ? "" : " (reloaded)");
    if (legacy)
        SW_WARN("relay: %s: %d line(s) in the old 'KEY [NAME]' form (the first on line %d), read "
                "as 'KEY node NAME' and 'KEY client': write them that way (docs/security.md)",
                r->allow_path, legacy, legacy_line);
    if (unbound)
        SW_WARN("relay: %s: %d node key(s) bound to a name but not to a role (the first on line "
                "%d): each may announce as a head too; write 'KEY head NAME' or 'KEY stage NAME' "
                "(docs/security.md)",
                r->allow_path, unbound, unbound_line);
    for (int i = 0; i < r->n_peers;) {
        relay_peer_t *p = r->peers[i];
        char why[256];
        if (relay_permit(r, p->user, p->name, p->ann.a.role, why, sizeof why) != 0) {
            relay_note(r, SW_LOG_WARN,
                       "relay: key of %s revoked or changed (%s; key %s): dropping it", p->name,
                       why, p->fp);
            relay_reply_error(r, p->id, p->id_len, SW_ERROR_UNAUTHORIZED, NULL,
                              "the relay's allow-list changed: %s", why);
            relay_peer_remove(r, p, "key revoked");
            continue;
        }
        const sw_allow_entry_t *e = relay_allowed(r, p->user);
        p->key_bound = relay_key_bound(e);
        p->client = e->role == SW_ALLOW_CLIENT;
        i++;
    }
    return 0;
}

/* ---- the ZAP handler ---------------------------------------------------------- */

/* Ends the refused-handshake log window when it is over: one line for what it did not log. */
static void s_refused_flush(relay_t *r, int64_t now)
{
    if (now - r->refused_since_ms < RELAY_REFUSE_LOG_MS)
        return;
    if (r->refused_window > RELAY_REFUSE_LOG_LINES)
        SW_WARN("relay: refused %llu more handshakes in the last %d s (the last from %s); "
                "%llu refused since start",
                (unsigned long long)(r->refused_window - RELAY_REFUSE_LOG_LINES),
                RELAY_REFUSE_LOG_MS / 1000, r->refused_last, (unsigned long long)r->refused);
    r->refused_window = 0;
    r->refused_since_ms = now;
}

/*
 * Logs a refused handshake: the first few of each minute one line each, the
 * rest as one summary line at the end of the minute, so that a stream of
 * refused connections (anyone on the network can cause one) cannot flood the
 * log. addr is the ZAP request's address frame.
 */
static void s_refused_log(relay_t *r, zmq_msg_t *addr, const char *why, const char *key)
{
    char where[64];
    size_t n = zmq_msg_size(addr) < sizeof where - 1 ? zmq_msg_size(addr) : sizeof where - 1;
    memcpy(where, zmq_msg_data(addr), n);
    where[n] = 0;
    for (size_t i = 0; i < n; i++) /* an address is [0-9a-f.:], but keep the log clean */
        if ((unsigned char)where[i] < 0x20 || (unsigned char)where[i] > 0x7e)
            where[i] = '?';
    r->unauthorized++;
    r->refused++;
    s_refused_flush(r, relay_now_ms());
    if (++r->refused_window <= RELAY_REFUSE_LOG_LINES) {
        SW_WARN("relay: refused a connection from %s: %s%s%s%s", where, why, key[0] ? " " : "", key,
                r->refused_window == RELAY_REFUSE_LOG_LINES ? " (further refusals this "
                                                              "minute: one summary line)"
                                                            : "");
        return;
    }
    snprintf(r->refused_last, sizeof r->refused_last, "%s%s%s", where, key[0] ? " key " : "", key);
}

/* Sends one ZAP reply (RFC 27): version, request id, status, text, user id, metadata. */
static void s_zap_reply(relay_t *r, zmq_msg_t *reqid, const char *status, const char *text,
                        const char *user)
{
    zmq_send(r->zap, "1.0", 3, ZMQ_SNDMORE);
    zmq_msg_send(reqid, r->zap, ZMQ_SNDMORE);
    zmq_send(r->zap, status, strlen(status), ZMQ_SNDMORE);
    zmq_send(r->zap, text, strlen(text), ZMQ_SNDMORE);
    zmq_send(r->zap, user, strlen(user), ZMQ_SNDMORE);
    zmq_send(r->zap, "", 0, 0);
}

/*
 * Answers every pending ZAP request: a CURVE client whose public key is on
 * the allow-list gets 200 with the Z85 key as its User-Id; anything else 400.
 */
static void s_zap(relay_t *r)
{
    relay_events(r); /* the connections being authenticated were accepted before */
    for (;;) {
        zmq_msg_t f[7];
        int n = 0, more = 1;
        for (int i = 0; i < 7; i++)
            zmq_msg_init(&f[i]);
        while (more) {
            zmq_msg_t *dst = &f[n < 7 ? n : 6];
            if (n >= 7) {
                zmq_msg_close(dst);
                zmq_msg_init(dst);
            }
            if (zmq_msg_recv(dst, r->zap, n == 0 ? ZMQ_DONTWAIT : 0) < 0) {
                for (int i = 0; i < 7; i++)
                    zmq_msg_close(&f[i]);
                return;
            }
            more = zmq_msg_more(dst);
            n++;
        }
        char key[SW_KEY_Z85_LEN + 1] = "";
        const char *status = "400", *text = "key not on the allow-list";
        if (n != 7 || zmq_msg_size(&f[0]) != 3 || memcmp(zmq_msg_data(&f[0]), "1.0", 3) != 0) {
            status = "500";
            text = "malformed ZAP request";
        } else if (zmq_msg_size(&f[5]) != 5 || memcmp(zmq_msg_data(&f[5]), "CURVE", 5) != 0) {
            text = "only CURVE clients are admitted";
        } else if (zmq_msg_size(&f[6]) == 32 && zmq_z85_encode(key, zmq_msg_data(&f[6]), 32) &&
                   relay_allowed(r, key)) {
            status = "200";
            text = "OK";
            char ip[64], why[256];
            size_t il = zmq_msg_size(&f[3]) < sizeof ip - 1 ? zmq_msg_size(&f[3]) : sizeof ip - 1;
            memcpy(ip, zmq_msg_data(&f[3]), il);
            ip[il] = 0;
            if (relay_conn_key(r, ip, key, why, sizeof why) != 0) {
                status = "300"; /* temporary: libzmq tells the peer, which redials */
                text = "too many connections of this key";
            }
        }
        if (status[0] == '4' || status[0] == '5')
            s_refused_log(r, &f[3], text, key);
        zmq_msg_t reqid;
        zmq_msg_init(&reqid);
        if (n >= 2)
            zmq_msg_copy(&reqid, &f[1]);
        s_zap_reply(r, &reqid, status, text, status[0] == '2' ? key : "");
        zmq_msg_close(&reqid);
        for (int i = 0; i < 7; i++)
            zmq_msg_close(&f[i]);
    }
}

/* ---- setup and the loop's share ---------------------------------------------- */

/*
 * CurveZMQ server: the relay's secret key before bind, the ZAP handler bound
 * before the ROUTER so that no connection is ever accepted without it, and the
 * allow-list. Without keys only loopback endpoints are allowed.
 */
int relay_auth_setup(relay_t *r, const relay_opts_t *o)
{
    char err[512], pub[SW_KEY_Z85_LEN + 1], sec[SW_KEY_Z85_LEN + 1];
    if (o->insecure_loopback) {
        if (!sw_endpoint_is_loopback(o->listen)) {
            SW_ERR("relay: --insecure-loopback only binds loopback endpoints (127.0.0.1, "
                   "localhost, [::1]); %s is not one: use --key and --allow",
                   o->listen);
            return -1;
        }
        if (o->key_file || o->allow_file)
            SW_WARN("relay: --insecure-loopback: ignoring --key / --allow");
        SW_WARN("relay: INSECURE development mode: no authentication, no encryption");
        return 0;
    }
    if (!o->key_file || !o->allow_file) {
        SW_ERR("relay: --key FILE and --allow FILE are required (without an allow-list anyone "
               "could connect); make keys with 'shardwire keygen', or use --insecure-loopback "
               "for a loopback-only test setup");
        return -1;
    }
    if (sw_keys_curve_check(err, sizeof err) != 0 ||
        sw_keys_load_secret(o->key_file, pub, sec, err, sizeof err) != 0) {
        SW_ERR("relay: %s", err);
        return -1;
    }
    if (snprintf(r->allow_path, sizeof r->allow_path, "%s", o->allow_file) >=
        (int)sizeof r->allow_path) {
        SW_ERR("relay: allow-list path too long");
        return -1;
    }
    if (s_allow_reload(r, 1) != 0) {
        sodium_memzero(sec, sizeof sec);
        return -1;
    }
    r->zap = zmq_socket(r->ctx, ZMQ_REP);
    int one = 1, zero = 0;
    int rc = !r->zap || zmq_setsockopt(r->zap, ZMQ_LINGER, &zero, sizeof zero) ||
             zmq_bind(r->zap, RELAY_ZAP_EP) ||
             zmq_setsockopt(r->router, ZMQ_CURVE_SERVER, &one, sizeof one) ||
             zmq_setsockopt(r->router, ZMQ_CURVE_SECRETKEY, sec, SW_KEY_Z85_LEN + 1) ||
             zmq_setsockopt(r->router, ZMQ_ZAP_DOMAIN, "shardwire", 9);
    sodium_memzero(sec, sizeof sec);
    if (rc) {
        SW_ERR("relay: CURVE / ZAP setup: %s", zmq_strerror(errno));
        return -1;
    }
    r->secure = 1;
    r->allow_check_at_ms = relay_now_ms() + RELAY_ALLOW_CHECK_MS;
    SW_INFO("relay: CURVE on; relay public key %s", pub);
    return 0;
}

/*
 * The loop's authentication work, once a pass (secure relays): answers the
 * pending ZAP requests, ends the refused-handshake log window when it is over,
 * and re-reads the allow-list when asked (r->reload, SIGHUP) or when its
 * change check is due.
 */
void relay_auth_step(relay_t *r)
{
    s_zap(r);
    s_refused_flush(r, relay_now_ms());
    int forced = r->reload && *r->reload;
    if (forced)
        *r->reload = 0;
    if (forced || relay_now_ms() >= r->allow_check_at_ms) {
        (void)s_allow_reload(r, forced);
        r->allow_check_at_ms = relay_now_ms() + RELAY_ALLOW_CHECK_MS;
    }
}
