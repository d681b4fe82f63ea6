/*
 * gateway_keys.c - the gateway's API keys (gateway_impl.h): the key file
 * (--api-key-file: one key per line, mode 0600), kept as BLAKE2b hashes; the
 * key a request carries, compared with every hash in constant time; and each
 * key's share of the generations in flight (--max-inflight-per-key), so that
 * one tenant cannot take every generation the gateway (one client to the
 * head) may run; and each key's tenant id, which the head's fair queue shares
 * its compute by.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <sodium.h>

#include "gateway_impl.h"

#define S_MAX_KEYS 1024 /* API keys in a key file */

int gw_keys_load(gw_t *g, const char *path, char *err, size_t err_len)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        snprintf(err, err_len, "--api-key-file %s: %s", path, strerror(errno));
        return -1;
    }
    if (st.st_mode & 077) {
        snprintf(err, err_len, "--api-key-file %s can be read by others (mode %03o): chmod 600 it",
                 path, (unsigned)(st.st_mode & 0777));
        return -1;
    }
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, err_len, "--api-key-file %s: %s", path, strerror(errno));
        return -1;
    }
    randombytes_buf(g->tenant_key, sizeof g->tenant_key);
    g->keys = calloc(S_MAX_KEYS, sizeof *g->keys);
    if (!g->keys) {
        fclose(f);
        snprintf(err, err_len, "out of memory");
        return -1;
    }
    char line[1024];
    int lineno = 0, rc = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        if (!strchr(line, '\n') && !feof(f)) {
            /* read on, the rest would count as a key of its own */
            snprintf(err, err_len, "--api-key-file %s line %d is longer than %zu characters", path,
                     lineno, sizeof line - 2);
            rc = -1;
            break;
        }
        char *s = line, *e;
        while (*s == ' ' || *s == '\t')
            s++;
        e = s + strcspn(s, "\r\n");
        while (e > s && (e[-1] == ' ' || e[-1] == '\t'))
            e--;
        *e = 0;
        if (!*s || *s == '#')
            continue;
        if (strlen(s) < 16 || strcspn(s, " \t") != strlen(s)) {
            snprintf(err, err_len,
                     "--api-key-file %s line %d: a key is one word of at least 16 characters "
                     "(make one with: head -c 24 /dev/urandom | base64)",
                     path, lineno);
            rc = -1;
            break;
        }
        if (g->n_keys == S_MAX_KEYS) {
            snprintf(err, err_len, "--api-key-file %s: more than %d keys", path, S_MAX_KEYS);
            rc = -1;
            break;
        }
        crypto_generichash(g->keys[g->n_keys++], GW_KEY_HASH, (const unsigned char *)s, strlen(s),
                           NULL, 0);
        sodium_memzero(line, sizeof line);
    }
    sodium_memzero(line, sizeof line);
    fclose(f);
    if (rc == 0 && g->n_keys == 0) {
        snprintf(err, err_len, "--api-key-file %s holds no key", path);
        rc = -1;
    }
    return rc;
}

void gw_keys_tenant(const gw_t *g, int key, char out[GW_TENANT_LEN])
{
    out[0] = 0;
    if (key < 0 || key >= g->n_keys)
        return;
    unsigned char id[8];
    crypto_generichash(id, sizeof id, g->keys[key], GW_KEY_HASH, g->tenant_key,
                       sizeof g->tenant_key);
    out[0] = 'k';
    sodium_bin2hex(out + 1, GW_TENANT_LEN - 1, id, sizeof id);
}

void gw_keys_free(gw_t *g)
{
    sodium_memzero(g->tenant_key, sizeof g->tenant_key);
    if (g->keys)
        sodium_memzero(g->keys, S_MAX_KEYS * sizeof *g->keys);
    free(g->keys);
    g->keys = NULL;
}

int gw_keys_check(const gw_t *g, struct MHD_Connection *c, int *index)
{
    *index = -1;
    if (g->o->no_api_key)
        return 1;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!h || strncasecmp(h, "Bearer ", 7) != 0)
        return 0;
    const char *key = h + 7;
    while (*key == ' ')
        key++;
    unsigned char hash[GW_KEY_HASH];
    crypto_generichash(hash, sizeof hash, (const unsigned char *)key, strlen(key), NULL, 0);
    /* every stored hash is compared, in constant time, whichever matches */
    int ok = 0;
    for (int i = 0; i < g->n_keys; i++) {
        const int same = sodium_memcmp(hash, g->keys[i], GW_KEY_HASH) == 0;
        ok |= same;
        *index = same ? i : *index;
    }
    return ok;
}

int gw_keys_take(gw_t *g, int key)
{
    if (key < 0 || !g->key_inflight)
        return 0;
    pthread_mutex_lock(&g->key_mu);
    const int ok = g->key_inflight[key] < g->o->max_inflight_per_key;
    g->key_inflight[key] += ok;
    pthread_mutex_unlock(&g->key_mu);
    return ok ? 0 : -1;
}

void gw_inflight_end(gw_t *g, int key)
{
    gw_metrics_inflight(g->metrics, -1, 0);
    if (key < 0 || !g->key_inflight)
        return;
    pthread_mutex_lock(&g->key_mu);
    g->key_inflight[key]--;
    pthread_mutex_unlock(&g->key_mu);
}
