/*
 * unicode.c - UTF-8 coding and the category lookup over the generated run
 * table (see unicode.h).
 */
#include "unicode.h"

unsigned sw_unicode_flags(uint32_t cp)
{
    if (cp > 0x10FFFF)
        return 0;
    /* Binary search for the last run that starts at or before cp. */
    size_t lo = 0, hi = sw_unicode_n_runs;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if ((sw_unicode_runs[mid] >> 8) <= cp)
            lo = mid;
        else
            hi = mid;
    }
    return sw_unicode_runs[lo] & 0xFFu;
}

size_t sw_utf8_seq_len(unsigned char b)
{
    if (b < 0x80)
        return 1;
    if (b >= 0xC2 && b <= 0xDF)
        return 2;
    if (b >= 0xE0 && b <= 0xEF)
        return 3;
    if (b >= 0xF0 && b <= 0xF4)
        return 4;
    return 1;
}

uint32_t sw_utf8_decode(const char *s, size_t len, size_t *n)
{
    const unsigned char *u = (const unsigned char *)s;
    *n = 1;
    if (u[0] < 0x80)
        return u[0];
    size_t need = sw_utf8_seq_len(u[0]);
    if (need == 1 || need > len)
        return SW_UNICODE_REPLACEMENT;
    uint32_t cp = u[0] & (0x7Fu >> need);
    for (size_t i = 1; i < need; i++) {
        if ((u[i] & 0xC0) != 0x80)
            return SW_UNICODE_REPLACEMENT;
        cp = (cp << 6) | (u[i] & 0x3Fu);
    }
    /* Reject overlong 3/4-byte forms, surrogates and values past U+10FFFF
     * (2-byte overlongs are excluded by the lead-byte range). */
    if ((need == 3 && cp < 0x800) || (need == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
        (cp >= 0xD800 && cp <= 0xDFFF))
        return SW_UNICODE_REPLACEMENT;
    *n = need;
    return cp;
}

size_t sw_utf8_encode(uint32_t cp, char *out)
{
    unsigned char *u = (unsigned char *)out;
    if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        cp = SW_UNICODE_REPLACEMENT;
    if (cp < 0x80) {
        u[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        u[0] = (unsigned char)(0xC0 | (cp >> 6));
        u[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        u[0] = (unsigned char)(0xE0 | (cp >> 12));
        u[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        u[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    u[0] = (unsigned char)(0xF0 | (cp >> 18));
    u[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    u[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    u[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

size_t sw_utf8_valid_prefix(const char *s, size_t len)
{
    size_t i = 0;
    while (i < len) {
        size_t n;
        uint32_t cp = sw_utf8_decode(s + i, len - i, &n);
        /* A real U+FFFD in the input is 3 bytes long; a decoding error is 1. */
        if (cp == SW_UNICODE_REPLACEMENT && n == 1)
            break;
        i += n;
    }
    return i;
}
