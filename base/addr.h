/*
 * addr.h - address prefixes for per-network connection limits: the relay and
 * the gateway count connections per IPv4 /24 and per IPv6 /64 (one site's
 * share, or one attacker's: an IPv6 site holds a whole /64).
 */
#ifndef SW_ADDR_H
#define SW_ADDR_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#define SW_ADDR_PREFIX_LEN 9 /* bytes of a prefix (sw_addr_prefix): the family, 8 of address */

/*
 * The prefix of address a, for comparing with others by memcmp: 4 and its
 * IPv4 /24 (an IPv4-mapped IPv6 address counts as IPv4), or 6 and its IPv6
 * /64. out: SW_ADDR_PREFIX_LEN bytes. 0, or -1 for another family (out
 * zeroed).
 */
int sw_addr_prefix(const struct sockaddr *a, uint8_t out[SW_ADDR_PREFIX_LEN]);
/* "a.b.c.0/24" or "x:x:x:x::/64" for prefix p (a log line) into out (48 bytes are enough). */
const char *sw_addr_prefix_str(const uint8_t p[SW_ADDR_PREFIX_LEN], char *out, size_t len);

#endif
