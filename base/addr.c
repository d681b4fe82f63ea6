/*
 * addr.c - address prefixes for per-network connection limits (addr.h).
 */
#include "addr.h"

#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

/* The 12-byte head of an IPv4-mapped IPv6 address (::ffff:a.b.c.d). */
static const uint8_t s_mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

int sw_addr_prefix(const struct sockaddr *a, uint8_t out[SW_ADDR_PREFIX_LEN])
{
    memset(out, 0, SW_ADDR_PREFIX_LEN);
    if (a->sa_family == AF_INET) {
        out[0] = 4;
        memcpy(out + 1, &((const struct sockaddr_in *)(const void *)a)->sin_addr, 3);
        return 0;
    }
    if (a->sa_family != AF_INET6)
        return -1;
    const uint8_t *b = ((const struct sockaddr_in6 *)(const void *)a)->sin6_addr.s6_addr;
    if (!memcmp(b, s_mapped, sizeof s_mapped)) {
        out[0] = 4;
        memcpy(out + 1, b + 12, 3);
        return 0;
    }
    out[0] = 6;
    memcpy(out + 1, b, 8);
    return 0;
}

const char *sw_addr_prefix_str(const uint8_t p[SW_ADDR_PREFIX_LEN], char *out, size_t len)
{
    if (p[0] == 4)
        snprintf(out, len, "%u.%u.%u.0/24", p[1], p[2], p[3]);
    else if (p[0] == 6)
        snprintf(out, len, "%x:%x:%x:%x::/64", p[1] << 8 | p[2], p[3] << 8 | p[4], p[5] << 8 | p[6],
                 p[7] << 8 | p[8]);
    else
        snprintf(out, len, "(no prefix)");
    return out;
}
