/*
 * args.c - checked parsing of numeric command-line values (args.h).
 */
#include "args.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

int sw_arg_int(const char *prog, const char *flag, const char *s, long lo, long hi, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 0);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "%s: %s '%s' is not an integer in [%ld, %ld]\n", prog, flag, s, lo, hi);
        return -1;
    }
    *out = (int)v;
    return 0;
}

int sw_arg_double(const char *prog, const char *flag, const char *s, double lo, double hi,
                  double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi)) {
        fprintf(stderr, "%s: %s '%s' is not a number in [%g, %g]\n", prog, flag, s, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

int sw_arg_float(const char *prog, const char *flag, const char *s, double lo, double hi,
                 float *out)
{
    double v;
    if (sw_arg_double(prog, flag, s, lo, hi, &v) != 0)
        return -1;
    *out = (float)v;
    return 0;
}
