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
#include "zap.h"

#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define RELAY_ALLOW_CHECK_MS 1000 /* allow-list file change check period */
#define RELAY_REFUSE_LOG_MS 60000 /* refused-handshake log window */
#define RELAY_REFUSE_LOG_LINES 5  /* refusals logged one by one per window */

/* ---- the allow-list ------------------------------------------------------------ */

/* The allow-list entry of Z85 key `key`, or NULL (not on the list, or no key). */
const sw_allow_entry_t *relay_allowed(const relay_t *r, const char *key)
{
    return sw_allow_find(r->allow, r->n_allow, key);
}

/* Whether key `user` may announce as `name` with `role` (keys.h, sw_allow_permit). */
int relay_permit(const relay_t *r, const char *user, const char *name, int role, char *why,
                 size_t why_len)
{
    return sw_allow_permit(r->allow, r->n_allow, user, name, role, why, why_len);
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
 * log. where is the ZAP request's address (printable, zap.h).
 */
static void s_refused_log(relay_t *r, const char *where, const char *why, const char *key)
{
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

/*
 * Answers every pending ZAP request (zap.h): a CURVE client whose public key is on
 * the allow-list gets 200 with the Z85 key as its User-Id; anything else 400.
 */
static void s_zap(relay_t *r)
{
    relay_events(r); /* the connections being authenticated were accepted before */
    sw_zap_req_t q;
    while (sw_zap_read(r->zap, &q)) {
        const char *status = "400", *text = "key not on the allow-list";
        if (!q.well_formed) {
            status = "500";
            text = "malformed ZAP request";
        } else if (!q.curve) {
            text = "only CURVE clients are admitted";
        } else if (q.key[0] && relay_allowed(r, q.key)) {
            status = "200";
            text = "OK";
            char why[256];
            if (relay_conn_key(r, q.addr, q.key, why, sizeof why) != 0) {
                status = "300"; /* temporary: libzmq tells the peer, which redials */
                text = "too many connections of this key";
            }
        }
        if (status[0] == '4' || status[0] == '5')
            s_refused_log(r, q.addr, text, q.key);
        sw_zap_reply(r->zap, &q, status, text, status[0] == '2' ? q.key : "");
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
            SW_ERR("relay: --insecure-loopback only binds loopback endpoints (" SW_LOOPBACK_FORMS
                   "); %s is not one: use --key and --allow",
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
    r->zap = sw_zap_bind(r->ctx, err, sizeof err);
    int one = 1;
    int rc = !r->zap || zmq_setsockopt(r->router, ZMQ_CURVE_SERVER, &one, sizeof one) ||
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
